r"""# Effort on a mix of problems: adaptive effort dominates every fixed budget

Problems differ. Take difficulty classes $d$ with weights $w_d \ge 0$, $\sum_d w_d = 1$, each with
its own saturating quality $Q_d(\ell) = q_d(1 - e^{-\ell/\lambda_d})$. A length controller chooses
an *allocation* $(\ell_d)_d$; its mean cost is $C = \sum_d w_d \ell_d$ and its mean quality
$A = \sum_d w_d Q_d(\ell_d)$. Two controllers:

- **adaptive effort**: the price $k = k(b)$ of conventions §effort-conditioning applied to every
  problem, each class answering with its own optimum
  $\ell^*_d(k) = \max\big(0, \lambda_d \ln(q_d/(\lambda_d k))\big)$ (EF4–EF5);
- **fixed budget** (budget forcing, truncation, a policy blind to the problem): $\ell_d = \ell$ for
  every class, the curve $\ell \mapsto (\ell, \sum_d w_d Q_d(\ell))$.

**A lemma.** $\varphi(x) = e^{-x} - 1 + x \ge 0$ for every real $x$, with equality only at $x = 0$:
$\varphi(0) = 0$, $\varphi'(x) = 1 - e^{-x}$ vanishes only at $0$ and $\varphi'' = e^{-x} > 0$ (EM1).

**The regret of one class.** Write $g_d(\ell) = Q_d(\ell) - k\ell$. Where $\ell^*_d > 0$, the
first-order condition $k = (q_d/\lambda_d) e^{-\ell^*_d/\lambda_d}$ turns the regret of any other
length into

$$g_d(\ell^*_d) - g_d(\ell) = q_d\, e^{-\ell^*_d/\lambda_d}\, \varphi\!\Big(\frac{\ell - \ell^*_d}{\lambda_d}\Big),$$

and where $\ell^*_d = 0$ ($k = q_d/\lambda_d + s$, $s \ge 0$) into
$g_d(0) - g_d(\ell) = s\ell + q_d\,\varphi(\ell/\lambda_d)$. Both are $\ge 0$, and $> 0$ for
$\ell \ne \ell^*_d$ (EM2): each class's optimum is its unique best answer to the price.

**Dominance.** Let $(\ell_d)$ be any allocation with the adaptive mean cost,
$\sum_d w_d \ell_d = \sum_d w_d \ell^*_d$. Then, the price terms cancelling,

$$\sum_d w_d Q_d(\ell^*_d) - \sum_d w_d Q_d(\ell_d) = \sum_d w_d \big(g_d(\ell^*_d) - g_d(\ell_d)\big) \ge 0,$$

strictly as soon as $\ell_d \ne \ell^*_d$ for one class of positive weight (EM3, an exact identity for
symbolic weights). The fixed budget $\ell_d = C$ is such an allocation, and every cost is reached by
the adaptive frontier: $C(k) = \sum_d w_d \ell^*_d(k)$ is continuous and non-increasing in $k$, 0 for
$k \ge \max_d q_d/\lambda_d$ and unbounded as $k \to 0$. Hence **at equal mean cost the adaptive
frontier's mean quality is no lower than the fixed budget's, and strictly higher unless every class
of positive weight has the same optimum** $\ell^*_d(k) = C$. For classes that differ this happens
only at isolated prices: $\ell^*_1 - \ell^*_2$ is linear in $\ln k$ with slope $\lambda_2 - \lambda_1$
where both are positive (so at most one crossing when $\lambda_1 \ne \lambda_2$), never when
$\lambda_1 = \lambda_2$ and $q_1 \ne q_2$; and at $C = 0$, where both spend nothing (EM3). With one
class the two curves are one.

**The slope is still the price.** With $u = -\ln k$ and $S$ the classes with $\ell^*_d > 0$,
$dC/du = \sum_{d \in S} w_d \lambda_d$ and $dA/du = k \sum_{d \in S} w_d \lambda_d$, so
$dA/dC = k$ (EM4): the envelope theorem on the mix. The frontier is increasing and concave (the slope
$k$ falls as $C$ grows), and one price prices every class alike: the adaptive policy equalises the
*marginal* quality per token across problems, which is what a fixed budget cannot do.

**The gap.** At equal cost $C$, the quality gained is $A(k) - \sum_d w_d Q_d(C)$; at equal quality,
the cost saved is $B^{-1}(A) - C$ with $B(\ell) = \sum_d w_d Q_d(\ell)$ increasing, and
$B^{-1}(A) \in [\min_d \ell^*_d, \max_d \ell^*_d]$ (`refimpl.adaptive_gap`).

**A continuous difficulty law.** For $\ln\lambda \sim \mathcal N(\ln m, \sigma^2)$ and one $q$, a
class has $\ell^* > 0$ iff $\lambda < q/k$, i.e. $z < a = \ln(q/(km))/\sigma$, and the two
expectations the frontier needs have closed forms (EM5):

$$E[\lambda\, 1\{z < a\}] = m e^{\sigma^2/2}\, \Phi(a - \sigma), \qquad
E[\lambda z\, 1\{z < a\}] = m e^{\sigma^2/2}\big(\sigma\Phi(a - \sigma) - \phi(a - \sigma)\big),$$

so $C = (\ln(q/k) - \ln m)\,E[\lambda 1] - \sigma E[\lambda z 1]$ and $A = q\Phi(a) - k E[\lambda 1]$.
`refimpl.difficulty_mix` replaces the law by equally likely mid-quantile classes; the closed form
checks how close that quadrature comes.

**Kimi's group reward has no fixed length.** Kimi k1.5's length reward ranks a response's length
within its group. Suppose every other response of the group has length $\ell > 0$ and the reward is
$\mathbb 1[\text{correct}] + \omega\cdot$(Kimi term). Matching them earns $Q(\ell)$ (a degenerate
group: no length term), while undercutting by any $\varepsilon > 0$ makes the response the shortest,
worth $(1 + \omega/2)\,Q(\ell - \varepsilon) \to (1 + \omega/2)Q(\ell) > Q(\ell)$ (EM6). At $\ell = 0$
a deviation to $\ell'$ earns $Q(\ell') - \omega/2$, positive for large $\ell'$ when
$q > \omega/2$. So no symmetric length is a fixed point of the group; the lab trains a per-class
length policy on the group reward instead.
"""

from __future__ import annotations

import math

import numpy as np
import sympy as sp

import refimpl
from proofs._framework import assert_close, assert_positive, assert_zero, claim

x = sp.Symbol("x", real=True)
ell, lam, q, k = sp.symbols("ell lambda q k", positive=True)
phi = sp.exp(-x) - 1 + x
Q = q * (1 - sp.exp(-ell / lam))
PENALTY = {"k0": 0.005, "b_min": 0.0, "tau": 1.0}

# mixes for the checks against refimpl: two classes, three classes with their own q_max, log-normal
MIXES = [
    {"q_max": [1.0, 1.0], "lam": [20.0, 200.0], "weights": [0.5, 0.5]},
    {"q_max": [1.0, 0.8, 0.6], "lam": [30.0, 120.0, 400.0], "weights": [0.5, 0.3, 0.2]},
    refimpl.difficulty_mix(median=100.0, sigma=1.0, nodes=64)._asdict(),
]
EFFORTS = np.linspace(0.0, 6.0, 25)


@claim(
    "EM1",
    r"$\varphi(x) = e^{-x} - 1 + x \ge 0$ on $\mathbb R$, with equality only at $x = 0$: "
    r"$\varphi(0) = 0$, $\varphi'$ vanishes only at 0 (SymPy's `solveset`), $\varphi'' = e^{-x} > 0$, "
    r"and SymPy's `minimum` over $\mathbb R$ is 0.",
)
def phi_is_nonnegative() -> None:
    assert_zero(phi.subs(x, 0), label="phi(0)")
    roots = sp.solveset(sp.diff(phi, x), x, sp.S.Reals)
    if roots != sp.FiniteSet(0):
        raise AssertionError(f"phi' vanishes at {roots}, not only at 0")
    assert_positive(sp.diff(phi, x, 2), label="phi''")
    assert_zero(sp.calculus.util.minimum(phi, x, sp.S.Reals), label="min of phi")


@claim(
    "EM2",
    r"Per class, with $g(\ell) = Q(\ell) - k\ell$: where $\ell^* > 0$, "
    r"$g(\ell^*) - g(\ell) = q e^{-\ell^*/\lambda}\varphi((\ell - \ell^*)/\lambda)$; where "
    r"$\ell^* = 0$ ($k = q/\lambda + s$), $g(0) - g(\ell) = s\ell + q\varphi(\ell/\lambda)$. So "
    r"$\ell^*_d$ is each class's unique best length. Library check: the per-class "
    r"`optimal_length` beats every length of a fine grid on every class of the check mixes.",
)
def per_class_regret() -> None:
    star = sp.Symbol("ell_star", positive=True)
    price = q / lam * sp.exp(-star / lam)  # the first-order condition at ℓ* > 0
    g = Q - price * ell
    regret = g.subs(ell, star) - g
    assert_zero(
        regret - q * sp.exp(-star / lam) * phi.subs(x, (ell - star) / lam), label="interior"
    )
    s = sp.Symbol("s", nonnegative=True)
    g0 = Q - (q / lam + s) * ell
    assert_zero(
        (g0.subs(ell, 0) - g0) - (s * ell + q * phi.subs(x, ell / lam)), label="clipped at 0"
    )
    grid = np.linspace(0.0, 3000.0, 30_001)
    for mix in MIXES:
        qd, lam_d = np.asarray(mix["q_max"]), np.asarray(mix["lam"])
        for b in (0.0, 1.5, 4.0):
            kk = float(refimpl.effort_penalty(b, **PENALTY))
            best = refimpl.optimal_length(b, q_max=qd, lam=lam_d, **PENALTY)
            for d in range(qd.size):
                reward = refimpl.saturating_quality(grid, q_max=qd[d], lam=lam_d[d]) - kk * grid
                at_best = float(qd[d] * -math.expm1(-best[d] / lam_d[d]) - kk * best[d])
                assert float(reward.max()) <= at_best + 1e-12, "a grid length beats ℓ*_d"


@claim(
    "EM3",
    r"Dominance: for weights $w_d$ and any allocation with $\sum w_d \ell_d = \sum w_d \ell^*_d$, "
    r"$\sum w_d Q_d(\ell^*_d) - \sum w_d Q_d(\ell_d) = \sum w_d (g_d(\ell^*_d) - g_d(\ell_d)) \ge 0$ "
    r"(an exact identity, three classes with symbolic weights, the third weight $1 - w_1 - w_2$), "
    r"strict unless $\ell_d = \ell^*_d$ wherever $w_d > 0$; two classes' optima cross at most once in "
    r"$\ln k$ ($\partial(\ell^*_1 - \ell^*_2)/\partial\ln k = \lambda_2 - \lambda_1$). So the adaptive "
    r"frontier dominates the fixed-budget curve, strictly where the $\ell^*_d$ differ. Library check: "
    r"at the adaptive cost, `effort_frontier` is above `budget_frontier` on each check mix (two and "
    r"three classes, log-normal), strictly where the per-class optima differ, and "
    r"`adaptive_gap` matches both coordinates.",
    method="exact",
)
def adaptive_dominates_fixed_budget() -> None:
    w1, w2 = sp.symbols("w_1 w_2", positive=True)
    weights = [w1, w2, 1 - w1 - w2]
    qs = sp.symbols("q_1:4", positive=True)
    lams = sp.symbols("lambda_1:4", positive=True)
    stars = sp.symbols("s_1:4", nonnegative=True)
    alloc = sp.symbols("l_1:3", nonnegative=True)
    # the third length is whatever keeps the mean cost equal to the adaptive one
    cost = sum(w * s_ for w, s_ in zip(weights, stars, strict=True))
    third = (cost - weights[0] * alloc[0] - weights[1] * alloc[1]) / weights[2]
    lengths = [alloc[0], alloc[1], third]

    def g(d: int, length: sp.Expr) -> sp.Expr:
        return qs[d] * (1 - sp.exp(-length / lams[d])) - k * length

    lhs = sum(
        w
        * (qs[d] * (1 - sp.exp(-stars[d] / lams[d])) - qs[d] * (1 - sp.exp(-lengths[d] / lams[d])))
        for d, w in enumerate(weights)
    )
    rhs = sum(w * (g(d, stars[d]) - g(d, lengths[d])) for d, w in enumerate(weights))
    assert_zero(lhs - rhs, label="mean-quality gap = mean regret at equal cost")
    # two classes cross at most once: ℓ*_1 − ℓ*_2 is linear in ln k with slope λ_2 − λ_1
    l1, l2 = sp.symbols("lambda_1 lambda_2", positive=True)
    q1, q2 = sp.symbols("q_1 q_2", positive=True)
    logk = sp.Symbol("u", real=True)
    diff = l1 * (sp.log(q1 / l1) - logk) - l2 * (sp.log(q2 / l2) - logk)
    assert_zero(sp.diff(diff, logk) - (l2 - l1), label="d(l1* - l2*)/d ln k")
    assert_zero(sp.diff(diff, logk, 2), label="linear in ln k")
    for mix in MIXES:
        front = refimpl.effort_frontier(EFFORTS, **mix, **PENALTY)
        fixed = refimpl.budget_frontier(front.cost, **mix)
        assert np.all(front.quality >= fixed.quality - 1e-15), "a fixed budget beats adaptive"
        per = refimpl.optimal_length(EFFORTS, q_max=mix["q_max"], lam=mix["lam"], **PENALTY)
        differ = per.max(axis=-1) - per.min(axis=-1) > 1e-3
        assert np.all(front.quality[differ] > fixed.quality[differ]), "not strict"
        gap = refimpl.adaptive_gap(EFFORTS, **mix, **PENALTY)
        # independent: the gain at equal cost from the two frontiers; the equal-quality length by
        # bisection on the fixed-budget curve in Python floats
        np.testing.assert_allclose(gap.quality_gained, front.quality - fixed.quality, atol=1e-15)
        wts = np.asarray(mix["weights"])
        qd, lam_d = np.asarray(mix["q_max"]), np.asarray(mix["lam"])
        for i in (3, 12, 24):
            lo, hi = 0.0, 1e5
            for _ in range(200):
                mid = 0.5 * (lo + hi)
                if float(np.dot(wts, qd * -np.expm1(-mid / lam_d))) < front.quality[i]:
                    lo = mid
                else:
                    hi = mid
            assert_close(float(gap.budget_length[i]), hi, rel=1e-12, label="equal-quality length")


@claim(
    "EM4",
    r"On a mix, with $u = -\ln k$: $dC/du = \sum_{d \in S} w_d\lambda_d$ and "
    r"$dA/du = k\sum_{d \in S} w_d\lambda_d$ over the classes with $\ell^*_d > 0$, so the frontier's "
    r"slope $dA/dC$ is the price $k$ (symbolic, three classes). Library check: secant slopes of "
    r"`effort_frontier` on the check mixes against `effort_penalty` at the midpoint.",
)
def mix_slope_is_the_price() -> None:
    u = sp.Symbol("u", real=True)
    w = sp.symbols("w_1:4", positive=True)
    qs = sp.symbols("q_1:4", positive=True)
    lams = sp.symbols("lambda_1:4", positive=True)
    kk = sp.exp(-u)
    C = sum(wd * ld * sp.log(qd / (ld * kk)) for wd, qd, ld in zip(w, qs, lams, strict=True))
    A = sum(wd * (qd - ld * kk) for wd, qd, ld in zip(w, qs, lams, strict=True))
    assert_zero(sp.diff(C, u) - sum(wd * ld for wd, ld in zip(w, lams, strict=True)), label="dC/du")
    assert_zero(sp.diff(A, u) / sp.diff(C, u) - kk, label="dA/dC - k")
    for mix in MIXES[:2]:
        b = np.linspace(0.5, 5.0, 46)
        f = refimpl.effort_frontier(b, **mix, **PENALTY)
        slope = np.diff(f.quality) / np.diff(f.cost)
        mid = refimpl.effort_penalty(0.5 * (b[1:] + b[:-1]), **PENALTY)
        # exact except on the pieces where a class starts spending (a kink of C): skip those
        per = refimpl.optimal_length(b, q_max=mix["q_max"], lam=mix["lam"], **PENALTY)
        same = np.all((per[1:] > 0) == (per[:-1] > 0), axis=-1)
        np.testing.assert_allclose(slope[same], mid[same], rtol=2e-3)


@claim(
    "EM5",
    r"Log-normal $\lambda$: $E[\lambda 1\{z < a\}] = m e^{\sigma^2/2}\Phi(a - \sigma)$ and "
    r"$E[\lambda z 1\{z < a\}] = m e^{\sigma^2/2}(\sigma\Phi(a - \sigma) - \phi(a - \sigma))$ "
    r"(SymPy integrates both against the normal density). Library check: `difficulty_mix` with 256 "
    r"classes reproduces the closed-form frontier within 2.7e-4 in quality and 0.2% in cost "
    r"(the quadrature error falls like 1/classes; see `difficulty_mix`).",
)
def lognormal_closed_form() -> None:
    m, s = sp.symbols("m sigma", positive=True)
    a, z = sp.symbols("a z", real=True)
    pdf = sp.exp(-(z**2) / 2) / sp.sqrt(2 * sp.pi)

    def Phi(t: sp.Expr) -> sp.Expr:
        return (1 + sp.erf(t / sp.sqrt(2))) / 2

    def density(t: sp.Expr) -> sp.Expr:
        return sp.exp(-(t**2) / 2) / sp.sqrt(2 * sp.pi)

    first = sp.integrate(m * sp.exp(s * z) * pdf, (z, -sp.oo, a))
    assert_zero(first - m * sp.exp(s**2 / 2) * Phi(a - s), label="E[lambda 1]")
    second = sp.integrate(m * sp.exp(s * z) * z * pdf, (z, -sp.oo, a))
    closed = m * sp.exp(s**2 / 2) * (s * Phi(a - s) - density(a - s))
    assert_zero(second - closed, label="E[lambda z 1]")
    from scipy.stats import norm

    median, sigma = 100.0, 1.0
    b = np.linspace(0.0, 4.0, 41)
    kk = refimpl.effort_penalty(b, **PENALTY)
    aa = np.log(1.0 / (kk * median)) / sigma
    e1 = median * math.exp(sigma**2 / 2) * norm.cdf(aa - sigma)
    e2 = median * math.exp(sigma**2 / 2) * (sigma * norm.cdf(aa - sigma) - norm.pdf(aa - sigma))
    cost = (np.log(1.0 / kk) - math.log(median)) * e1 - sigma * e2
    quality = norm.cdf(aa) - kk * e1
    mix = refimpl.difficulty_mix(median=median, sigma=sigma, nodes=256)
    front = refimpl.effort_frontier(b, **mix._asdict(), **PENALTY)
    np.testing.assert_allclose(front.quality, quality, rtol=0, atol=2.7e-4)
    np.testing.assert_allclose(front.cost, cost, rtol=2e-3)


@claim(
    "EM6",
    r"Kimi k1.5 has no symmetric fixed length: against a group all of length $\ell > 0$, "
    r"undercutting by $\varepsilon \to 0$ earns $(1 + \omega/2)Q(\ell) > Q(\ell)$, the reward of "
    r"matching (the limit is symbolic); at $\ell = 0$, a deviation to $\ell'$ earns "
    r"$Q(\ell') - \omega/2 \to q - \omega/2$. Library check: `kimi_length_reward` gives the "
    r"undercutting response $+\tfrac12$, the matched group 0, and a longer deviant $-\tfrac12$.",
)
def kimi_has_no_symmetric_fixed_point() -> None:
    omega, eps = sp.symbols("omega epsilon", positive=True)
    undercut = (1 + omega / 2) * Q.subs(ell, ell - eps)
    gain = sp.limit(undercut, eps, 0) - Q
    assert_zero(gain - omega / 2 * Q, label="undercutting gain")
    # the gain (ω/2)·Q(ℓ) is > 0: Q(0) = 0 and Q' > 0, so Q(ℓ) > 0 for ℓ > 0
    assert_zero(Q.subs(ell, 0), label="Q(0)")
    assert_positive(sp.diff(Q, ell), label="Q' > 0")
    assert_zero(sp.limit(Q - omega / 2, ell, sp.oo) - (q - omega / 2), label="deviation from 0")
    group = [300.0, 300.0, 300.0, 299.0]
    r = refimpl.kimi_length_reward(group, [True] * 4)
    assert list(r) == [-0.5, -0.5, -0.5, 0.5]
    assert list(refimpl.kimi_length_reward([300.0] * 4, [True] * 4)) == [0.0] * 4
    r_up = refimpl.kimi_length_reward([0.0, 0.0, 0.0, 50.0], [False, False, False, True])
    assert list(r_up) == [0.0, 0.0, 0.0, -0.5]
