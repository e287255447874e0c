r"""# Estimator bias: which baseline and correction keep the batch gradient unbiased.

A batch estimate $\hat g = \sum_{i\in\beta} u_i (R_i - b_i)\,s_i$ is linear in the rewards, and
given the batch's lengths the rewards are independent with means $\bar R(\ell_i)$; so its mean is
that of the same expression with every $R_j$ replaced by $r_j = \bar R(\ell_j)$, whatever the
baseline $b_i$ (a constant, the batch mean $\bar R = \frac1k\sum_j R_j$, or the leave-one-out mean
$\frac1{k-1}\sum_{j\ne i} R_j$). What differs is how the baseline couples the members.

**Independent draws (claim LRN7).** With $k$ independent on-policy draws and the batch-mean
baseline, member $i$'s advantage is $(1 - \frac1k)R_i - \frac1k\sum_{j\ne i}R_j$, so

$$
E\Bigl[\frac1k\sum_i (R_i - \bar R)s_i\Bigr] = \Bigl(1 - \frac1k\Bigr)E[R\,s]
- \Bigl(1 - \frac1k\Bigr)E[R]\,E[s] = \Bigl(1 - \frac1k\Bigr)\nabla J,
$$

because $E[s] = \sum_\ell p(\ell)\nabla\log p(\ell) = 0$. The batch baseline shrinks the step by
$1 - 1/k$ without turning it; the leave-one-out baseline, $\frac{k}{k-1}$ times the same
advantage, is unbiased.

**Dependent members (claim LRN8).** Under first-$k$-of-$n$ the members of a batch are dependent
(the batch keeps the $k$ shortest), so $E[s_i R_j]$ no longer factorises: Horvitz–Thompson weights
$k/(n\pi)$ are unbiased with a constant baseline (LRN1) and biased with the batch or leave-one-out
baseline, and the bias is a turn, not a scaling. Hájek (self-normalised weights) is biased even
with a constant baseline, and clipping the HT weights can leave more bias than no correction at
all. The claim computes each by brute-force enumeration of every launched tuple and every reward
outcome, in Fractions, on a rational three-length law, and checks
`refimpl.learning.estimator_bias` against it.
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Any

import numpy as np
import sympy as sp

from proofs._framework import assert_zero, claim
from refimpl import learning as lrn


@claim(
    "LRN7",
    r"On $k$ independent on-policy draws the batch-mean baseline gives "
    r"$E[\hat g] = (1 - 1/k)\,\nabla J$ and the leave-one-out baseline $E[\hat g] = \nabla J$ "
    r"(symbolic probabilities $p_1, p_2, 1 - p_1 - p_2$, symbolic mean rewards and scores with "
    r"$\sum_\ell p\,s = 0$, every tuple of $k \le 4$ draws enumerated); "
    r"`refimpl.learning.estimator_bias` with $n = k$ agrees on a rational policy.",
    method="exact",
    scope="three-point laws with symbolic probabilities, k <= 4; the library check on one rational policy",
)
def batch_baseline_scales_independent_draws() -> None:
    p1, p2 = sp.symbols("p1 p2", positive=True)
    r = sp.symbols("r1:4", real=True)
    s1, s2 = sp.symbols("s1 s2", real=True)
    probs = [p1, p2, 1 - p1 - p2]
    s = [s1, s2, -(p1 * s1 + p2 * s2) / (1 - p1 - p2)]  # the score has mean zero
    grad = sp.Add(*(probs[j] * r[j] * s[j] for j in range(3)))
    for k in range(1, 5):
        batch = sp.Integer(0)
        for tup in itertools.product(range(3), repeat=k):
            prob = sp.Mul(*(probs[j] for j in tup))
            r_bar = sp.Add(*(r[j] for j in tup)) / k
            batch += prob * sp.Add(*((r[j] - r_bar) * s[j] for j in tup)) / k
        assert_zero(sp.simplify(batch - (1 - sp.Rational(1, k)) * grad), label=f"LRN7 k={k}")
        if k > 1:
            loo = batch * sp.Rational(k, k - 1)
            assert_zero(sp.simplify(loo - grad), label=f"LRN7 leave-one-out k={k}")
    h = [Fraction(1, 2), Fraction(1, 3), Fraction(1)]
    eye = np.eye(3, dtype=int).tolist()
    pmf, scores = lrn.hazard_length_pmf(h), lrn.token_scores(h, eye).sum(axis=1)
    q = [Fraction(0), Fraction(1, 2), Fraction(1)]
    for k in (2, 3):
        got = lrn.estimator_bias(pmf, scores, q, n=k, k=k, baseline="batch")
        assert got.parallel, "LRN7 library (batch): parallel"
        assert got.scale == 1 - Fraction(1, k), "LRN7 library (batch): scale"
        loo = lrn.estimator_bias(pmf, scores, q, n=k, k=k, baseline="leave_one_out")
        assert list(loo.bias) == [0, 0, 0], "LRN7 library (leave-one-out)"


def brute_force_first_k(
    pmf: list[Fraction],
    scores: Any,
    quality: list[Fraction],
    *,
    n: int,
    k: int,
    correction: str,
    baseline: Any,
    clip: Fraction | None = None,
) -> list[Fraction]:
    """:math:`E[\\hat g]` by enumeration of every launched n-tuple and every reward outcome.

    The batch is the k shortest of the tuple (which of tied equal lengths enter does not change
    the estimate, which depends on the lengths only); ``baseline`` is a Fraction, ``'batch'`` or
    ``'leave_one_out'``.
    """
    m, d = len(pmf), len(scores[0])
    pi = lrn_inclusion(pmf, n, k)
    total = [Fraction(0)] * d
    for tup in itertools.product(range(m), repeat=n):
        prob = Fraction(1)
        for j in tup:
            prob *= pmf[j]
        if prob == 0:
            continue
        batch = sorted(tup)[:k]
        w = [Fraction(k, n) / pi[j] for j in batch]
        if clip is not None:
            w = [min(x, clip) for x in w]
        unit = {
            "none": [Fraction(1, k)] * k,
            "horvitz_thompson": [x / k for x in w],
            "clipped_ht": [x / k for x in w],
            "hajek": [x / sum(w) for x in w],
        }[correction]
        for rewards in itertools.product((0, 1), repeat=k):
            pr = prob
            for j, x in zip(batch, rewards, strict=True):
                pr *= quality[j] if x else 1 - quality[j]
            if pr == 0:
                continue
            mean = Fraction(sum(rewards), k)
            for i, j in enumerate(batch):
                if baseline == "batch":
                    adv = rewards[i] - mean
                elif baseline == "leave_one_out":
                    adv = rewards[i] - Fraction(sum(rewards) - rewards[i], k - 1)
                else:
                    adv = rewards[i] - baseline
                for c in range(d):
                    total[c] += pr * unit[i] * adv * scores[j][c]
    return total


def lrn_inclusion(pmf: list[Fraction], n: int, k: int) -> list[Fraction]:
    """Inclusion probability of a launched rollout of each length, by the same enumeration."""
    m = len(pmf)
    incl = [Fraction(0)] * m
    for tup in itertools.product(range(m), repeat=n):
        prob = Fraction(1)
        for j in tup:
            prob *= pmf[j]
        j0 = tup[0]
        shorter = sum(1 for x in tup if x < j0)
        equal = sum(1 for x in tup if x == j0)
        incl[j0] += prob * min(max(Fraction(k - shorter, equal), Fraction(0)), Fraction(1))
    return [incl[j] / pmf[j] if pmf[j] else Fraction(0) for j in range(m)]


@claim(
    "LRN8",
    r"Under first-$k$-of-$n$ with $k < n$ the batch members are dependent: on the rational law "
    r"$h = (1/2, 1/3, 1)$, $Q = (0, 1/2, 1)$ with $n = 4$, $k = 2$, Horvitz–Thompson is unbiased "
    r"with a constant baseline and biased with the batch baseline (projection scale "
    r"$1021139/2553395$, not parallel to $\nabla J$) and with leave-one-out; Hájek is biased with "
    r"every baseline; HT clipped at $C = 1$ with a constant baseline is more biased than no "
    r"correction; brute-force enumeration of every launched tuple and reward outcome in "
    r"Fractions, against `refimpl.learning.estimator_bias`.",
    method="exact",
    scope="one rational three-length law, n = 4, k = 2, every correction and baseline",
)
def first_k_baselines_and_corrections() -> None:
    h = [Fraction(1, 2), Fraction(1, 3), Fraction(1)]
    eye = np.eye(3, dtype=int).tolist()
    pmf = list(lrn.hazard_length_pmf(h))
    scores = lrn.token_scores(h, eye).sum(axis=1).tolist()
    q = [Fraction(0), Fraction(1, 2), Fraction(1)]
    grad = list(lrn.policy_gradient(pmf, scores, q).mean)
    j = lrn.mean_reward(pmf, q)
    bias: dict[tuple[str, str], Fraction] = {}
    for corr in ("none", "horvitz_thompson", "hajek", "clipped_ht"):
        for base in ("constant", "batch", "leave_one_out"):
            b = j if base == "constant" else base
            clip = Fraction(1) if corr == "clipped_ht" else None
            want = brute_force_first_k(
                pmf, scores, q, n=4, k=2, correction=corr, baseline=b, clip=clip
            )
            got = lrn.estimator_bias(
                pmf, scores, q, n=4, k=2, correction=corr, baseline=b, clip=clip
            )
            assert list(got.expected) == want, f"LRN8 library {corr} {base}"
            bias[corr, base] = sum(
                ((x - y) ** 2 for x, y in zip(want, grad, strict=True)), Fraction(0)
            )
            if (corr, base) == ("horvitz_thompson", "batch"):
                assert got.scale == Fraction(1021139, 2553395), "LRN8 HT+batch scale"
                assert not got.parallel, "LRN8 HT+batch turns the gradient"
    assert bias["horvitz_thompson", "constant"] == 0, "LRN8 HT unbiased with a constant baseline"
    for base in ("batch", "leave_one_out"):
        assert bias["horvitz_thompson", base] > 0, f"LRN8 HT biased with {base}"
    for base in ("constant", "batch", "leave_one_out"):
        assert bias["hajek", base] > 0, f"LRN8 Hájek biased with {base}"
    assert bias["clipped_ht", "constant"] > bias["none", "constant"], "LRN8 clipped HT"
