r"""# Rejection statistics: the M2PO mask is minimal, and sums of divergences grow with length

Let $d_t = \log\pi_t - \log\mu_t$ be the per-token log-ratio of the target (trainer) policy $\pi$
against the behaviour policy $\mu$ that sampled the tokens.

**The M2PO mask is the smallest one (claim RJ1).** M2PO bounds the second moment
$\frac1n\sum_t d_t^2$ of the kept tokens by $\tau$. Write $v_t = d_t^2$ and sort the $n$ values
decreasingly, $v_{(1)} \ge \dots \ge v_{(n)}$. Any selection that drops $j$ tokens keeps $n - j$
of them, whose sum is at least $\sum_{i > j} v_{(i)}$ (the $n - j$ smallest values); so the smallest
achievable kept mean after dropping $j$ tokens is $S_j = \frac1{n-j}\sum_{i>j} v_{(i)}$, reached by
dropping the $j$ largest. Hence the least number of tokens that *any* selection must drop to reach
$S < \tau$ is $k = \min\{j : S_j < \tau\}$, and dropping the $k$ largest achieves it.
`refimpl.losses.rejection.m2po_mask` drops exactly the first $k$ tokens of the order "larger $v$
first, then earlier position": when values tie, which of them is dropped changes neither $k$ nor
the kept mean. If no $j \le n - 1$ qualifies, it keeps the single smallest token (AReaL's fallback).
The check enumerates every subset of up to 7 tokens with dyadic log-ratios (so every float
operation in the decision is exact) and compares.

**The length trap of sum statistics (claims RJ2, RJ3).** Let the tokens of a sequence be i.i.d.
with per-token k1 statistic $k_t = -d_t$ of mean $\kappa$ (for tokens sampled from $\mu$,
$\kappa = \mathrm{KL}(\mu\,\|\,\pi) \ge 0$) and variance $v$. By linearity and independence

$$
\mathbb{E}\Bigl[\sum_{t \le T} k_t\Bigr] = T\kappa, \qquad
\mathrm{Var}\Bigl[\sum_{t \le T} k_t\Bigr] = T v, \qquad
\mathbb{E}\Bigl[\frac1T\sum_{t \le T} k_t\Bigr] = \kappa .
$$

The sum's mean grows linearly in $T$ (and its spread like $\sqrt T$), so a fixed threshold $c$ on
`reduce="sum"` is crossed more and more often as sequences get longer: for $\kappa > 0$ the
rejection probability tends to 1, and long responses are rejected for their length, not for a
larger per-token mismatch. The mean statistic has a length-independent expectation and, for a
threshold above $\kappa$, a rejection probability that tends to 0. RJ2 proves the moments by
enumerating every sequence of a two-token vocabulary with symbolic probabilities; RJ3 computes the
rejection rates exactly for a two-point noise and evaluates `sequence_divergence` on every
distinct sequence.
"""

from __future__ import annotations

import itertools
import random
from fractions import Fraction
from math import comb

import numpy as np
import sympy as sp

from proofs._framework import assert_close, assert_zero, claim
from refimpl.losses.rejection import m2po_mask, sequence_divergence


def _minimal_drop(values: list[Fraction], tau: Fraction, strict: bool) -> int:
    """The least number of tokens any selection must drop (every subset enumerated)."""
    n = len(values)
    for size in range(n):
        for dropped in itertools.combinations(range(n), size):
            kept = [values[i] for i in range(n) if i not in dropped]
            mean = sum(kept, Fraction(0)) / len(kept)
            if (mean < tau) if strict else (mean <= tau):
                return size
    return n - 1


@claim(
    "RJ1",
    r"The M2PO mask drops the least number of tokens that any selection must drop to bring the kept "
    r"mean of $d_t^2$ below $\tau$ (strictly, or $\le \tau$), and drops them in the stated order "
    r"(larger $d_t^2$ first, ties by position); with no such selection it keeps only the smallest.",
    method="exact",
    scope="300 random instances of 1..7 valid tokens in (B, T) = (2, 4) with dyadic log-ratios, "
    "every subset enumerated, both comparisons",
)
def m2po_is_minimal() -> None:
    rng = random.Random(21)
    for case in range(300):
        d = np.array([[rng.randint(-12, 12) / 8 for _ in range(4)] for _ in range(2)])
        m = np.zeros((2, 4))
        m.ravel()[rng.sample(range(8), rng.randint(1, 7))] = 1.0
        valid = np.flatnonzero(m.ravel() > 0)
        values = [Fraction(float(x)) ** 2 for x in d.ravel()[valid]]
        tau = rng.choice([*(v for v in values if v > 0), Fraction(rng.randint(1, 64), 64)])
        strict = case % 2 == 0
        keep = m2po_mask(d, np.zeros_like(d), tau=float(tau), mask=m, strict=strict).ravel()
        k = _minimal_drop(values, tau, strict)
        order = sorted(range(len(valid)), key=lambda i: (-values[i], i))
        expected = np.zeros(8)
        expected[valid] = 1.0
        expected[valid[order[:k]]] = 0.0
        if not np.array_equal(keep, expected):
            raise AssertionError(f"RJ1: case {case}: mask {keep} != expected {expected} (k={k})")


@claim(
    "RJ2",
    r"For i.i.d. tokens the per-sequence k1 sum has mean $T\kappa$ and variance $T v$ "
    r"($\kappa = \mathrm{KL}(\mu\,\|\,\pi)$, $v$ the per-token variance), and the k1 mean has mean "
    r"$\kappa$ for every length $T$.",
    method="symbolic",
    scope="two-token vocabulary with symbolic probabilities, lengths T = 1..4 (every sequence "
    "enumerated); refimpl evaluated on every sequence at one rational point",
)
def k1_sum_grows_linearly() -> None:
    q, p = sp.symbols("q p", positive=True)  # mu = (q, 1 - q), pi = (p, 1 - p)
    mu = (q, 1 - q)
    pi = (p, 1 - p)
    k1 = [sp.log(mu[a]) - sp.log(pi[a]) for a in range(2)]
    kappa = sum(mu[a] * k1[a] for a in range(2))
    var = sum(mu[a] * k1[a] ** 2 for a in range(2)) - kappa**2
    point = {q: sp.Rational(1, 3), p: sp.Rational(3, 5)}
    for length in range(1, 5):
        first = second = mean_of_mean = sp.Integer(0)
        for seq in itertools.product(range(2), repeat=length):
            prob = sp.Mul(*(mu[a] for a in seq))
            total = sp.Add(*(k1[a] for a in seq))
            first += prob * total
            second += prob * total**2
            mean_of_mean += prob * total / length
            lq = np.array([[float(sp.log(mu[a].subs(point))) for a in seq]])
            lp = np.array([[float(sp.log(pi[a].subs(point))) for a in seq]])
            found = float(sequence_divergence(lp, lq, estimator="k1", reduce="sum")[0])
            assert_close(
                found, float(total.subs(point)), rel=1e-12, abs_=1e-14, label="RJ2 refimpl"
            )
        assert_zero(sp.expand(first - length * kappa), label=f"RJ2 mean, T={length}")
        assert_zero(sp.expand(second - first**2 - length * var), label=f"RJ2 variance, T={length}")
        assert_zero(sp.expand(mean_of_mean - kappa), label=f"RJ2 mean statistic, T={length}")


#: The two-point noise of RJ3: ``d = −1/2`` or ``d = +1/4`` with probability 1/2 each, so the
#: token k1 ``−d`` is ``1/2`` or ``−1/4`` (mean 1/8 > 0). All values are exact in float64.
_D_HIGH, _D_LOW = -0.5, 0.25
_LENGTHS = (4, 8, 16, 32, 64)
_SUM_THRESHOLD = 1.0
_MEAN_THRESHOLD = _SUM_THRESHOLD / _LENGTHS[0]


def _rejection_rate(length: int, reduce: str, threshold: float) -> Fraction:
    """Exact ``P(statistic > threshold)``: one representative sequence per number of high tokens."""
    rate = Fraction(0)
    for high in range(length + 1):
        d = np.array([[_D_HIGH] * high + [_D_LOW] * (length - high)])
        stat = float(sequence_divergence(d, np.zeros_like(d), estimator="k1", reduce=reduce)[0])
        if stat > threshold:
            rate += Fraction(comb(length, high), 2**length)
    return rate


@claim(
    "RJ3",
    r"With i.i.d. per-token k1 of positive mean, a fixed threshold on the k1 **sum** rejects long "
    r"sequences more often, while the same threshold per token on the k1 **mean** rejects them "
    r"less often: for k1 $\in\{1/2, -1/4\}$ (probability 1/2 each), sum threshold 1 and mean "
    r"threshold 1/4, the rejection rates along $T = 4, 8, 16, 32, 64$ are strictly increasing "
    r"(sum, to above 0.99) and strictly decreasing (mean, to below 0.005).",
    method="exact",
    scope="the stated two-point noise and thresholds, lengths T = 4, 8, 16, 32, 64",
)
def sum_threshold_length_trap() -> None:
    sums = [_rejection_rate(t, "sum", _SUM_THRESHOLD) for t in _LENGTHS]
    means = [_rejection_rate(t, "mean", _MEAN_THRESHOLD) for t in _LENGTHS]
    for t, s, m in zip(_LENGTHS, sums, means, strict=True):
        expected_sum = sum(
            (Fraction(comb(t, h), 2**t) for h in range(t + 1) if Fraction(3 * h - t, 4) > 1),
            Fraction(0),
        )
        expected_mean = sum(
            (
                Fraction(comb(t, h), 2**t)
                for h in range(t + 1)
                if Fraction(3 * h - t, 4 * t) > Fraction(1, 4)
            ),
            Fraction(0),
        )
        if (s, m) != (expected_sum, expected_mean):
            raise AssertionError(
                f"RJ3: T={t}: refimpl rates {(s, m)} != {(expected_sum, expected_mean)}"
            )
    if not all(a < b for a, b in itertools.pairwise(sums)) or sums[-1] <= Fraction(99, 100):
        raise AssertionError(f"RJ3: sum rejection rates not increasing to > 0.99: {sums}")
    if not all(a > b for a, b in itertools.pairwise(means)) or means[-1] >= Fraction(1, 200):
        raise AssertionError(f"RJ3: mean rejection rates not decreasing to < 0.005: {means}")
