r"""# Effort conditioning: the penalty $k(b)$, the optimal length $L^*(b)$ and the frontier

A policy conditioned on a scalar effort $b \ge b_\text{min}$ is trained on the shaped reward
$r = Q(\ell) - k(b)\,\ell$ (with $\ell_\text{scale} = 1$), where the price of a token decays
exponentially with the effort,

$$k(b) = k_0\, e^{-(b - b_\text{min})/\tau}, \qquad k_0 \ge 0,\ \tau > 0.$$

**The penalty.** At the lowest effort the price is $k_0$ (EF1). Differentiating,
$k'(b) = -k(b)/\tau$ (EF2): the price falls at a constant *relative* rate $1/\tau$, so every extra
$\tau$ of effort divides it by $e$ (EF3). For $k_0 > 0$ it is strictly decreasing.

**The optimal length.** Take the saturating quality model $Q(\ell) = q_\text{max}(1 - e^{-\ell/\lambda})$:
each extra token is worth less than the previous one, $Q'(\ell) = (q_\text{max}/\lambda) e^{-\ell/\lambda}$.
The reward $R(\ell) = Q(\ell) - k\ell$ has

- first-order condition $R'(\ell) = (q_\text{max}/\lambda) e^{-\ell/\lambda} - k = 0$, whose root is
  $\ell = \lambda \ln\big(q_\text{max}/(\lambda k)\big)$ (EF4): buy tokens until the marginal quality of
  the next one equals its price;
- second-order condition $R''(\ell) = -(q_\text{max}/\lambda^2) e^{-\ell/\lambda} < 0$ everywhere (EF5):
  $R$ is strictly concave, so the root is the unique maximiser on $\ell \ge 0$ when it is positive.
  When it is not ($q_\text{max} \le \lambda k$), $R'(0) = q_\text{max}/\lambda - k \le 0$ and $R$
  decreases on $[0, \infty)$, so the optimum is $\ell = 0$.

Hence $L^*(b) = \max\big(0, \lambda \ln(q_\text{max}/(\lambda k(b)))\big)$. Substituting $k(b)$, the
logarithm of an exponential is linear:

$$L^*(b) = \lambda \ln\frac{q_\text{max}}{\lambda k_0} + \frac{\lambda}{\tau}(b - b_\text{min})
\quad\text{where positive,}$$

a straight line in $b$ with slope $\lambda/\tau$ (EF6). This is also how `refimpl.optimal_length`
computes it: it never forms $k(b)$, so $L^*$ stays exact after $k(b)$ has underflowed to 0 in float64.

**The frontier.** At the optimum the quality is $Q(L^*) = q_\text{max} - \lambda k(b)$ (EF7): the
quality gap to saturation is $\lambda$ times the price. As $b$ grows the point
$(L^*(b), Q(L^*(b)))$ moves right and up. Its slope is
$\frac{dQ}{dL} = \frac{dQ(L^*)/db}{dL^*/db} = \frac{\lambda k(b)/\tau}{\lambda/\tau} = k(b)$ (EF8):
the frontier's slope at each point is exactly the price that selected it (the envelope theorem in
one line). Since $k$ decreases while $L^*$ increases, the slope falls along the curve,
$\frac{d^2Q}{dL^2} = \frac{dk/db}{dL^*/db} = -k(b)/\lambda < 0$ (EF9): the frontier is increasing and
concave, so its points are mutually non-dominated; one checkpoint conditioned on $b$ covers all of
them.

Every claim below also evaluates the matching `refimpl` function against the closed form.
"""

from __future__ import annotations

import math

import numpy as np
import sympy as sp

import refimpl
from proofs._framework import GENERAL, assert_close, assert_positive, assert_zero, claim

b, b_min = sp.symbols("b b_min", real=True)
d = sp.Symbol("d", positive=True)  # b − b_min > 0
k0, tau, q_max, lam, ell = sp.symbols("k_0 tau q_max lambda ell", positive=True)

k_expr = k0 * sp.exp(-(b - b_min) / tau)
Q_expr = q_max * (1 - sp.exp(-ell / lam))
L_root = lam * sp.log(q_max / (lam * k_expr))
L_linear = lam * sp.log(q_max / (lam * k0)) + lam / tau * (b - b_min)

# parameter sets for the checks against refimpl (L* > 0 on the whole grid for the first two)
POINTS = [
    {"q_max": 1.0, "lam": 100.0, "k0": 0.005, "b_min": 0.0, "tau": 1.0},
    {"q_max": 2.5, "lam": 30.0, "k0": 0.01, "b_min": -1.0, "tau": 0.7},
    {"q_max": 1.0, "lam": 100.0, "k0": 0.05, "b_min": 2.0, "tau": 3.0},  # L* = 0 near b_min
]
EFFORTS = np.array([0.0, 0.3, 1.0, 2.5, 7.0, 20.0])  # offsets from b_min


def _subs(p: dict[str, float], b_value: float) -> dict[sp.Symbol, float]:
    return {
        q_max: p["q_max"],
        lam: p["lam"],
        k0: p["k0"],
        b_min: p["b_min"],
        tau: p["tau"],
        b: b_value,
    }


@claim("EF1", r"$k(b_\text{min}) = k_0$.", scope=GENERAL)
def penalty_at_lowest_effort() -> None:
    assert_zero(k_expr.subs(b, b_min) - k0, label="k(b_min) - k0")
    for p in POINTS:
        found = float(
            refimpl.effort_penalty(p["b_min"], k0=p["k0"], b_min=p["b_min"], tau=p["tau"])
        )
        assert_close(found, p["k0"], rel=0.0, label="effort_penalty(b_min)")


@claim(
    "EF2",
    r"$\dfrac{dk}{db} = -\dfrac{k(b)}{\tau}$; for $k_0 > 0$, $k$ is strictly decreasing.",
    scope=GENERAL,
)
def penalty_derivative() -> None:
    assert_zero(sp.diff(k_expr, b) + k_expr / tau, label="dk/db + k/tau")
    assert_positive(-sp.diff(k_expr, b), label="-dk/db")
    # refimpl: central difference of effort_penalty against −k/τ
    for p in POINTS:
        for off in EFFORTS[1:4]:
            h = 1e-5 * p["tau"]
            bb = p["b_min"] + off
            kk = refimpl.effort_penalty(
                [bb - h, bb, bb + h], k0=p["k0"], b_min=p["b_min"], tau=p["tau"]
            )
            slope = (kk[2] - kk[0]) / (2 * h)
            assert_close(float(slope), float(-kk[1] / p["tau"]), rel=1e-6, label="dk/db")


@claim(
    "EF3",
    r"$k(b + \tau) = k(b)/e$: each $\tau$ of extra effort divides the price by $e$.",
    scope=GENERAL,
)
def penalty_per_tau() -> None:
    assert_zero(k_expr.subs(b, b + tau) - k_expr / sp.E, label="k(b+tau) - k(b)/e")
    for p in POINTS:
        for off in EFFORTS:
            bb = p["b_min"] + off
            k1, k2 = refimpl.effort_penalty(
                [bb, bb + p["tau"]], k0=p["k0"], b_min=p["b_min"], tau=p["tau"]
            )
            # float64: the exponent x = (b − b_min)/τ is rounded, so k has relative error ~ (1 + x) ulp
            assert_close(float(k2), float(k1 / math.e), rel=1e-14, label="k(b+tau)")


@claim(
    "EF4",
    r"First-order condition: $\frac{d}{d\ell}\left[Q(\ell) - k\ell\right] = 0$ at "
    r"$\ell = \lambda \ln\frac{q_\text{max}}{\lambda k}$.",
    scope=GENERAL,
)
def first_order_condition() -> None:
    k = sp.Symbol("k", positive=True)
    reward = Q_expr - k * ell
    root = lam * sp.log(q_max / (lam * k))
    assert_zero(sp.diff(reward, ell).subs(ell, root), label="R'(root)")
    # refimpl: optimal_length is that root where it is positive
    for p in POINTS[:2]:
        for off in EFFORTS:
            bb = p["b_min"] + off
            found = float(refimpl.optimal_length(bb, **p))
            kk = p["k0"] * math.exp(-off / p["tau"])
            expected = float(sp.N(root.subs({k: kk, q_max: p["q_max"], lam: p["lam"]}), 30))
            assert_close(found, expected, rel=1e-13, label="optimal_length")


@claim(
    "EF5",
    r"Second-order condition: $\frac{d^2}{d\ell^2}\left[Q(\ell) - k\ell\right] = "
    r"-\frac{q_\text{max}}{\lambda^2} e^{-\ell/\lambda} < 0$ for all $\ell$: the root is the unique "
    r"maximiser, and $L^* = 0$ when the root is $\le 0$.",
    scope=GENERAL,
)
def second_order_condition() -> None:
    k = sp.Symbol("k", positive=True)
    second = sp.diff(Q_expr - k * ell, ell, 2)
    assert_zero(second + q_max / lam**2 * sp.exp(-ell / lam), label="R''")
    assert_positive(-second, label="-R''")
    # refimpl: no length near L* does better, and L* = 0 when q_max <= λ k
    for p in POINTS:
        for off in EFFORTS:
            bb = p["b_min"] + off
            L = float(refimpl.optimal_length(bb, **p))
            kk = float(refimpl.effort_penalty(bb, k0=p["k0"], b_min=p["b_min"], tau=p["tau"]))
            if p["q_max"] <= p["lam"] * kk:
                assert L == 0.0, "optimal_length must be 0 when q_max <= lam k"
            grid = np.concatenate([[L], np.maximum(L + p["lam"] * np.linspace(-2, 2, 41), 0.0)])
            r = refimpl.saturating_quality(grid, q_max=p["q_max"], lam=p["lam"]) - kk * grid
            assert np.all(r[1:] <= r[0] + 1e-12 * p["q_max"]), "a length beats L*"


@claim(
    "EF6",
    r"$L^*(b) = \lambda \ln\frac{q_\text{max}}{\lambda k_0} + \frac{\lambda}{\tau}(b - b_\text{min})$ "
    r"where positive: linear in $b$ with slope $\lambda/\tau$.",
    scope=GENERAL,
)
def optimal_length_is_linear() -> None:
    assert_zero(sp.expand_log(L_root - L_linear, force=True), label="L*(b) log form")
    assert_zero(sp.diff(L_root, b) - lam / tau, label="dL*/db - lam/tau")
    for p in POINTS[:2]:
        bb = p["b_min"] + EFFORTS
        L = refimpl.optimal_length(bb, **p)
        slopes = np.diff(L) / np.diff(bb)
        for s in slopes:
            assert_close(float(s), p["lam"] / p["tau"], rel=1e-9, label="slope of L*")
        for bv, Lv in zip(bb, L, strict=True):
            expected = float(sp.N(L_linear.subs(_subs(p, float(bv))), 30))
            assert_close(float(Lv), expected, rel=1e-13, label="L* linear form")


@claim(
    "EF7",
    r"$Q(L^*(b)) = q_\text{max} - \lambda k(b)$ where $L^* > 0$ (and 0 where $L^* = 0$).",
    scope=GENERAL,
)
def quality_at_optimum() -> None:
    assert_zero(Q_expr.subs(ell, L_root) - (q_max - lam * k_expr), label="Q(L*)")
    for p in POINTS:
        bb = p["b_min"] + EFFORTS
        front = refimpl.effort_frontier(bb, **p)
        for bv, c, q in zip(bb, front.cost, front.quality, strict=True):
            expected = max(0.0, float(sp.N((q_max - lam * k_expr).subs(_subs(p, float(bv))), 30)))
            assert_close(float(q), expected, rel=1e-13, abs_=1e-15, label="frontier quality")
            if c == 0.0:
                assert q == 0.0


@claim(
    "EF8",
    r"Along the frontier $\dfrac{dQ}{dL} = \dfrac{dQ(L^*)/db}{dL^*/db} = k(b)$: the slope is the "
    r"price that selects the point.",
    scope=GENERAL,
)
def frontier_slope_is_the_price() -> None:
    quality = q_max - lam * k_expr
    assert_zero(sp.diff(quality, b) / sp.diff(L_root, b) - k_expr, label="dQ/dL - k")
    for p in POINTS[:2]:
        for off in EFFORTS[1:5]:
            bb = p["b_min"] + off
            h = 1e-4 * p["tau"]
            f = refimpl.effort_frontier([bb - h, bb + h], **p)
            slope = (f.quality[1] - f.quality[0]) / (f.cost[1] - f.cost[0])
            kk = float(refimpl.effort_penalty(bb, k0=p["k0"], b_min=p["b_min"], tau=p["tau"]))
            assert_close(float(slope), kk, rel=1e-6, label="frontier slope")


@claim(
    "EF9",
    r"The frontier is concave: $\dfrac{d^2Q}{dL^2} = \dfrac{dk/db}{dL^*/db} = -\dfrac{k(b)}{\lambda}"
    r" < 0$; with $dL^*/db > 0$ and $dQ/dL = k > 0$ its points are mutually non-dominated.",
    scope=GENERAL,
)
def frontier_is_concave() -> None:
    second = sp.diff(k_expr, b) / sp.diff(L_root, b)
    assert_zero(second + k_expr / lam, label="d2Q/dL2 + k/lam")
    assert_positive(-second, label="-d2Q/dL2")
    assert_positive(sp.diff(L_root, b), label="dL*/db")
    for p in POINTS[:2]:
        bb = p["b_min"] + p["tau"] * np.linspace(0.0, 5.0, 26)
        f = refimpl.effort_frontier(bb, **p)
        slopes = np.diff(f.quality) / np.diff(f.cost)
        assert np.all(np.diff(slopes) < 0), "frontier secant slopes must decrease"
        assert len(refimpl.pareto_front(f.cost, f.quality)) == bb.size
