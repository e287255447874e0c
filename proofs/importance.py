r"""# Importance weights: truncation, masking, the sequence-length trap, effective sample size

Let a finite action set carry a target policy $\pi$ and a behaviour policy $\mu$ (both positive),
with ratio $\rho_a = \pi_a/\mu_a$, and let $f$ be any function of the action (a reward, an advantage,
a gradient coordinate).

**Truncation (TIS).** The truncated weight $w_a = \min(\rho_a, C)$ equals $\rho_a$ on the actions
whose ratio is at most the cap, so on that event the estimate is exact:
$\mu_a w_a f_a = \pi_a f_a$. On the others $w_a = C$, and summing over the actions

$$
\mathbb{E}_\mu[\min(\rho, C)\,f] - \mathbb{E}_\pi[f] = -\sum_{a:\rho_a > C} \mu_a(\rho_a - C) f_a
= -\mathbb{E}_\mu[(\rho - C)^+ f],
$$

which is $\le 0$ for $f \ge 0$: truncation under-weights exactly the excess of the ratio over the
cap (claim IS1). The proof enumerates every subset of actions that may exceed the cap, with
symbolic probabilities, and `refimpl.truncated_is_weights` is then evaluated against the formula on
exact rational policies.

**Masking (MIS / IcePop).** The masked weight $\rho_a\mathbb{1}[\alpha \le \rho_a \le \beta]$ is exact
on the band and zero outside, so its bias is the *whole* target mass outside the band,
$-\mathbb{E}_\pi[f\,\mathbb{1}[\rho \notin [\alpha, \beta]]]$ (claim IS2). Masking trades more bias
than truncation for weights bounded by $\beta$ and no gradient at all from the dropped tokens.

**The length trap (claim IS3).** At sequence level the weight depends on
$\Sigma_T = \sum_{t \le T} \log\rho_t$. For i.i.d. Gaussian per-token log-ratio noise
$\log\rho_t \sim N(m, \sigma^2)$, $\Sigma_T \sim N(Tm, T\sigma^2)$ and a cap $C > 1$ is hit
(truncated, or dropped by a mask) with probability
$P_T = \bar\Phi\bigl((\log C - Tm)/(\sigma\sqrt{T})\bigr)$.

- With zero-mean noise ($m = 0$) $P_T = \bar\Phi(\log C/(\sigma\sqrt T))$ strictly increases with $T$:
  a fixed cap hits long sequences more often.
- With the mean that makes each token ratio unbiased, $m = -\sigma^2/2$ (so $\mathbb{E}[\rho_t] = 1$),
  $z_T = \log C/(\sigma\sqrt T) + \sigma\sqrt T/2$ and
  $4\sigma T^{3/2}\,\mathrm{d}z_T/\mathrm{d}T = \sigma^2 T - 2\log C$. So $P_T$ **increases for
  $T < T^* = 2\log C/\sigma^2$ and decreases after**: the sequence ratio is a mean-one product that
  tends to 0, and very long sequences fall *below* the band instead. For a train/inference mismatch
  of $\sigma = 0.01$ and $C = 2$, $T^* \approx 13{,}900$ tokens, so over realistic lengths the cap hits
  longer sequences more often; a two-sided mask $[\alpha, \beta]$ with $\alpha < 1$ then also drops
  the long sequences that drift below $\alpha$.

The check evaluates `refimpl.masked_is_weights` (sequence level) on sequences whose log-ratio sums
sit at the $M$ mid-quantiles of $N(Tm, T\sigma^2)$, so the dropped fraction approximates $P_T$ within
$1/M$ without any randomness.

**Effective sample size.** For weights $w_1..w_n \ge 0$, not all zero,
$n\sum w_i^2 - (\sum w_i)^2 = \tfrac12\sum_{i,j}(w_i - w_j)^2 \ge 0$, with equality iff all weights
are equal, so $\mathrm{ESS} = (\sum w)^2/\sum w^2 \le n$ (claim ESS1); and
$(\sum w_i)^2 - \sum w_i^2 = 2\sum_{i<j} w_i w_j \ge 0$, with equality iff at most one weight is
positive, so $\mathrm{ESS} \ge 1$ (claim ESS2). ESS is invariant to rescaling all weights (ESS3).
"""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import numpy as np
import sympy as sp
from scipy import stats

import refimpl
from proofs._framework import (
    GENERAL,
    assert_close,
    assert_nonnegative,
    assert_positive,
    assert_zero,
    claim,
)

K = 3  # actions in the symbolic policies

mu = sp.symbols(f"mu0:{K}", positive=True)
rho = sp.symbols(f"rho0:{K}", positive=True)
f = sp.symbols(f"f0:{K}", real=True)
C = sp.symbols("C", positive=True)
excess = sp.symbols(f"e0:{K}", positive=True)  # rho_a = C + e_a on the actions over the cap


def _random_policies(rng: random.Random, k: int) -> tuple[list[Fraction], list[Fraction]]:
    def pmf() -> list[Fraction]:
        raw = [Fraction(rng.randint(1, 20)) for _ in range(k)]
        total = sum(raw, Fraction(0))
        return [x / total for x in raw]

    return pmf(), pmf()


@claim(
    "IS1",
    r"Truncated IS on a finite action set: $\mathbb{E}_\mu[\min(\rho, C) f] = \mathbb{E}_\pi[f] - "
    r"\sum_{a:\rho_a>C}\mu_a(\rho_a - C) f_a$, for every subset of actions over the cap (3 actions, "
    r"symbolic probabilities); the estimate is exact on the actions below the cap and the bias is "
    r"$\le 0$ for $f \ge 0$.",
    method="exact",
    scope="3 actions, every subset of them over the cap (symbolic probabilities)",
)
def truncated_is_bias() -> None:
    for size in range(K + 1):
        for over in itertools.combinations(range(K), size):
            ratio = [C + excess[a] if a in over else rho[a] for a in range(K)]
            weight = [C if a in over else ratio[a] for a in range(K)]
            pi_o = [mu[a] * ratio[a] for a in range(K)]
            target_o = sp.Add(*(pi_o[a] * f[a] for a in range(K)))
            estimate = sp.Add(*(mu[a] * weight[a] * f[a] for a in range(K)))
            bias = -sp.Add(*(mu[a] * (ratio[a] - C) * f[a] for a in over))
            assert_zero(estimate - target_o - bias, label=f"IS1 bias, over-cap set {over}")
            for a in range(K):
                if a not in over:
                    assert_zero(mu[a] * weight[a] * f[a] - pi_o[a] * f[a], label="IS1 exact part")
            nonneg_f = {f[a]: sp.Symbol(f"g{a}", nonnegative=True) for a in range(K)}
            assert_nonnegative(-bias.subs(nonneg_f), label=f"IS1 sign, over-cap set {over}")
    rng = random.Random(1)
    for _ in range(20):
        p, q = _random_policies(rng, 5)
        values = [Fraction(rng.randint(-5, 5)) for _ in range(5)]
        cap = rng.choice([Fraction(1), Fraction(3, 2), Fraction(2), Fraction(3)])
        w = refimpl.truncated_is_weights(
            np.log([float(x) for x in p]), np.log([float(x) for x in q]), cap=float(cap)
        )
        found = sum(float(q[a]) * w[a] * float(values[a]) for a in range(5))
        ratios = [p[a] / q[a] for a in range(5)]
        exact = sum((p[a] * values[a] for a in range(5)), Fraction(0)) - sum(
            (q[a] * (ratios[a] - cap) * values[a] for a in range(5) if ratios[a] > cap),
            Fraction(0),
        )
        assert_close(found, float(exact), rel=1e-12, abs_=1e-14, label="IS1 refimpl")


@claim(
    "IS2",
    r"Masked IS: $\mathbb{E}_\mu[\rho\,\mathbb{1}[\alpha\le\rho\le\beta] f] = \mathbb{E}_\pi[f] - "
    r"\sum_{a:\rho_a\notin[\alpha,\beta]}\pi_a f_a$ for every subset of actions outside the band: the "
    r"bias is the whole target mass outside, not just an excess.",
    method="exact",
    scope="3 actions, every subset of them outside the band (symbolic probabilities); the library check on 5 actions",
)
def masked_is_bias() -> None:
    pi = [mu[a] * rho[a] for a in range(K)]
    target = sp.Add(*(pi[a] * f[a] for a in range(K)))
    for size in range(K + 1):
        for out in itertools.combinations(range(K), size):
            estimate = sp.Add(*(mu[a] * rho[a] * f[a] for a in range(K) if a not in out))
            bias = -sp.Add(*(pi[a] * f[a] for a in out))
            assert_zero(estimate - target - bias, label=f"IS2 bias, dropped set {out}")
    rng = random.Random(2)
    for _ in range(20):
        p, q = _random_policies(rng, 5)
        values = [Fraction(rng.randint(-5, 5)) for _ in range(5)]
        low, high = Fraction(1, rng.randint(1, 4)), Fraction(rng.randint(1, 4))
        if any(p[a] / q[a] in (low, high) for a in range(5)):
            continue  # a ratio exactly on a band edge: float rounding may put it either side
        w = refimpl.masked_is_weights(
            np.log([float(x) for x in p]),
            np.log([float(x) for x in q]),
            low=float(low),
            high=float(high),
        )
        found = sum(float(q[a]) * w[a] * float(values[a]) for a in range(5))
        exact = sum((p[a] * values[a] for a in range(5) if low <= p[a] / q[a] <= high), Fraction(0))
        assert_close(found, float(exact), rel=1e-12, abs_=1e-14, label="IS2 refimpl")


T_sym, sigma, logC = sp.symbols("T sigma logC", positive=True)


def _hit_probability_by_quantiles(t: int, m: float, s: float, cap: float, points: int) -> float:
    """Fraction of sequences dropped by ``refimpl.masked_is_weights(level="sequence", high=cap)``
    when the log-ratio sums are the ``points`` mid-quantiles of ``N(t m, t s²)``."""
    u = (np.arange(points) + 0.5) / points
    sums = t * m + s * math.sqrt(t) * stats.norm.ppf(u)
    logp_target = np.repeat((sums / t)[:, None], t, axis=1)
    w = refimpl.masked_is_weights(
        logp_target, np.zeros_like(logp_target), low=0.0, high=cap, level="sequence"
    )
    return float(np.mean(w == 0.0))


@claim(
    "IS3",
    r"Sequence-level cap $C > 1$, i.i.d. Gaussian per-token log-ratios $N(m, \sigma^2)$: with $m = 0$ "
    r"the hit probability $\bar\Phi(\log C/(\sigma\sqrt T))$ strictly increases in $T$; with "
    r"$m = -\sigma^2/2$ ($\mathbb{E}\rho_t = 1$) its derivative has the sign of "
    r"$2\log C - \sigma^2 T$, so it increases exactly for $T < 2\log C/\sigma^2$. "
    r"`refimpl.masked_is_weights` reproduces $P_T$.",
    method="symbolic",
    scope=GENERAL,
)
def sequence_cap_hits_long_sequences_more_often() -> None:
    z0 = logC / (sigma * sp.sqrt(T_sym))
    phi = sp.exp(-(z0**2) / 2) / sp.sqrt(2 * sp.pi)
    # P_T = 1 − Φ(z0): dP/dT = −φ(z0) dz0/dT.
    assert_positive(-phi * sp.diff(z0, T_sym), label="IS3 zero-mean: dP/dT > 0")
    z1 = logC / (sigma * sp.sqrt(T_sym)) + sigma * sp.sqrt(T_sym) / 2
    assert_zero(
        4 * sigma * T_sym ** sp.Rational(3, 2) * sp.diff(z1, T_sym) - (sigma**2 * T_sym - 2 * logC),
        label="IS3 mean-one: 4σT^{3/2} dz/dT = σ²T − 2 log C",
    )
    # The factor 4σT^{3/2} and φ are positive, so sign(dP/dT) = sign(2 log C − σ² T).
    assert_positive(4 * sigma * T_sym ** sp.Rational(3, 2), label="IS3 factor")
    points = 4000
    cap = 2.0
    for s, m_of in ((0.05, lambda s: 0.0), (0.3, lambda s: -(s**2) / 2)):
        m = m_of(s)
        for t in (1, 4, 16, 64, 256):
            closed = float(stats.norm.sf((math.log(cap) - t * m) / (s * math.sqrt(t))))
            found = _hit_probability_by_quantiles(t, m, s, cap, points)
            assert_close(found, closed, abs_=1.0 / points, rel=0.0, label=f"IS3 σ={s} T={t}")
    # Mean-one noise, σ = 0.3, C = 2: T* = 2 log 2 / 0.09 ≈ 15.4; P_T rises to T* then falls.
    s = 0.3
    p = [
        float(stats.norm.sf(math.log(cap) / (s * math.sqrt(t)) + s * math.sqrt(t) / 2))
        for t in range(1, 60)
    ]
    t_star = 2 * math.log(cap) / s**2
    peak = int(np.argmax(p)) + 1
    if not abs(peak - t_star) <= 1.0:
        raise AssertionError(f"IS3: P_T peaks at T={peak}, closed form T*={t_star:.2f}")


@claim(
    "ESS1",
    r"$n\sum_i w_i^2 - (\sum_i w_i)^2 = \tfrac12\sum_{i,j}(w_i - w_j)^2$ ($n = 4$): hence "
    r"$\mathrm{ESS} \le n$, with equality iff all weights are equal; `refimpl.effective_sample_size` "
    r"matches exact rational evaluation.",
    method="symbolic",
    scope="n = 4 weights (symbolic)",
)
def ess_at_most_n() -> None:
    n = 4
    w = sp.symbols(f"w0:{n}", nonnegative=True)
    lhs = n * sp.Add(*(x**2 for x in w)) - sp.Add(*w) ** 2
    rhs = sp.Rational(1, 2) * sp.Add(*((w[i] - w[j]) ** 2 for i in range(n) for j in range(n)))
    assert_zero(lhs - rhs, label="ESS1 identity")
    rng = random.Random(3)
    for _ in range(30):
        ws = [Fraction(rng.randint(0, 9), rng.randint(1, 5)) for _ in range(rng.randint(1, 7))]
        if not any(ws):
            continue
        exact = sum(ws, Fraction(0)) ** 2 / sum((x * x for x in ws), Fraction(0))
        found = refimpl.effective_sample_size([float(x) for x in ws])
        assert_close(found, float(exact), rel=1e-13, label="ESS1 refimpl")
        assert exact <= len(ws)
        assert (exact == len(ws)) == (len(set(ws)) == 1)
    assert_close(refimpl.effective_sample_size([2.5] * 7), 7.0, rel=1e-15, label="ESS1 equal")


@claim(
    "ESS2",
    r"$(\sum_i w_i)^2 - \sum_i w_i^2 = 2\sum_{i<j} w_i w_j \ge 0$ for $w \ge 0$ ($n = 4$): hence "
    r"$\mathrm{ESS} \ge 1$, with equality iff exactly one weight is positive.",
    method="symbolic",
    scope="n = 4 weights (symbolic)",
)
def ess_at_least_one() -> None:
    n = 4
    w = sp.symbols(f"w0:{n}", nonnegative=True)
    lhs = sp.Add(*w) ** 2 - sp.Add(*(x**2 for x in w))
    cross = 2 * sp.Add(*(w[i] * w[j] for i in range(n) for j in range(i + 1, n)))
    assert_zero(lhs - cross, label="ESS2 identity")
    assert_nonnegative(cross, label="ESS2 sign")
    assert_close(refimpl.effective_sample_size([0.0, 3.0, 0.0]), 1.0, rel=1e-15, label="ESS2 one")


@claim(
    "ESS3",
    r"$\mathrm{ESS}(c\,w) = \mathrm{ESS}(w)$ for $c > 0$ (scale invariance), and "
    r"`refimpl.effective_sample_size` keeps it for weights up to $10^{300}$ (no overflow).",
    method="symbolic",
    scope=GENERAL,
)
def ess_scale_invariant() -> None:
    n = 4
    w = sp.symbols(f"w0:{n}", positive=True)
    scale = sp.Symbol("c", positive=True)

    def ess(x: list[sp.Expr]) -> sp.Expr:
        return sp.Add(*x) ** 2 / sp.Add(*(y**2 for y in x))

    assert_zero(ess([scale * x for x in w]) - ess(list(w)), label="ESS3 scale")
    base = [1.0, 2.0, 0.5, 4.0]
    for factor in (1e-300, 1.0, 1e300):
        assert_close(
            refimpl.effective_sample_size([factor * x for x in base]),
            float(Fraction(15, 2) ** 2 / Fraction(85, 4)),
            rel=1e-13,
            label=f"ESS3 scale {factor}",
        )
