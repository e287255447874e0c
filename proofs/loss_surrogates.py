r"""# Token-level policy surrogates: gradients region by region

Notation: for one token, $l = \log\pi_\theta(y)$ is what the gradient is taken with respect to,
$l_0 = \log\pi_{\text{old}}(y)$ is fixed, $\rho = e^{l - l_0}$ (so $\partial\rho/\partial l = \rho$),
$A$ the advantage, $[\underline r, \bar r] = [1-\varepsilon_{\text{low}}, 1+\varepsilon_{\text{high}}]$ the
clip band, $c > 1$ the dual-clip constant. Every loss is minimised; a stop-gradient $\mathrm{sg}[w]$
contributes its value and no derivative. The derivative of each loss with respect to $l$ is what
`refimpl.losses` returns as `grad` (with the default cotangent 1 at real tokens).

**How each region is proved.** A clipped surrogate is a composition of $\max$, $\min$ and `clip`.
On an open region of $\rho$ the composition equals one smooth *branch*: the check writes the
region's inequalities as positive gaps (for instance $\bar r = \rho - e$ with $e > 0$ for "the
ratio is above the band"), lets SymPy resolve every $\max$/$\min$ from the signs of the gaps, and
proves that the result equals the stated branch. The gradient on the region is then the derivative
of that branch with $\rho = e^{l-l_0}$, taken symbolically. Finally the `refimpl` function is
evaluated at points inside each region and compared with the branch's gradient.

**PPO-clip (PS1).** $\ell = \max(-A\rho, -A\,\mathrm{clip}(\rho, \underline r, \bar r))$.

| advantage | region | active branch | gradient |
|---|---|---|---|
| $A > 0$ | $\rho < \bar r$ | $-A\rho$ | $-A\rho$ |
| $A > 0$ | $\rho > \bar r$ | $-A\bar r$ (clipped) | $0$ |
| $A < 0$ | $\rho > \underline r$ | $-A\rho$ | $-A\rho$ |
| $A < 0$ | $\rho < \underline r$ | $-A\underline r$ (clipped) | $0$ |

So the clip removes exactly the gradient that would push the ratio further out of the band in the
direction the advantage favours; it never clips a positive advantage from below or a negative one
from above (the wrong-side bug).

**Dual-clip (PS2).** For $A < 0$, $\ell^{\text{dual}} = \min(\ell, -cA)$, which on the three regions
is $-A\underline r$, $-A\rho$ and $-cA$: i.e. $\ell^{\text{dual}} = |A|\,\mathrm{clip}(\rho,
\underline r, c) \le -cA$, with zero gradient for $\rho > c$. However large the ratio, the loss of a
negative-advantage token is bounded by $c|A|$; positive advantages are untouched.

**On-policy reduction (PS3).** At $l = l_0$ ($\rho = 1$) every surrogate's gradient is the policy
gradient $-A$: PPO ($1$ is inside the band when $\varepsilon > 0$), CISPO ($w = 1$), SAPO (the gate's
slope $4\sigma(0)^2 = 1$), DPPO (the token is in its trust region: zero TV distance, zero binary
KL), importance-weighted PG in both forms, the DRO penalty (its derivative $\tau(l - l_0)$
vanishes) and REINFORCE.

**CISPO (PS4).** $\ell = -\mathrm{sg}[w]A\,l$ with $w = \mathrm{clip}(\rho, \underline r, \bar r)$
(or $\min(\rho, \bar r)$): the gradient is $-wA$ on every region, never 0. Differentiating through
the weight instead adds $-A\,l\,\partial w/\partial l = -A\,l\,\rho$ inside the band: the missing
stop-gradient bug changes the gradient wherever $l \ne 0$.

**SAPO (PS5).** $\ell = -A\frac{4}{\tau}\sigma(\tau(\rho - 1))$ has gradient
$-4A\,\sigma(x)\sigma(-x)\,\rho$ with $x = \tau(\rho - 1)$; at $\rho = 1$ it is $-A$ for every $\tau$.

**DPPO (PS6).** The keep mask depends on $l$ only through comparisons, so it is piecewise constant:
on a region where the token is kept the gradient is the surrogate's ($-Aw$ for
$-A\,\mathrm{sg}[w]\,l$, $-A\rho$ for $-A\rho$), and 0 where it is dropped. The binary KL
$D(p) = p_0\log\frac{p_0}{p} + (1-p_0)\log\frac{1-p_0}{1-p}$ has $D(p_0) = 0$ and
$D'(p) = \frac{p - p_0}{p(1-p)}$, so it grows monotonically as $p$ leaves $p_0$ on either side: the
threshold $D \le \delta$ is a band around $p_0$, and only the side the advantage pushes towards is
tested.

**DRO / Kimi penalty (PS7).** $\ell = -A\,l + \frac{\tau}{2}(l - l_0)^2$ has gradient
$-A + \tau(l - l_0)$ and second derivative $\tau > 0$: per token the loss is minimised at
$l = l_0 + A/\tau$, so $\tau$ bounds how far one step moves the log-probability.

**Importance-weighted PG and REINFORCE (PS8).** $-A\rho$ has gradient $-A\rho$ (the IS-corrected
policy gradient); the truncated form $-\mathrm{sg}[\min(\rho, C)]A\,l$ has $-A\min(\rho, C)$;
REINFORCE $-A\,l$ has $-A$.

**Log-ratio clamp (PS9).** With $\rho = \exp(\mathrm{clip}(l - l_0, -k, k))$,
$\partial\rho/\partial l = \rho$ for $|l - l_0| < k$ and $0$ outside: a clamped token carries no
ratio gradient, and since the clamp acts *before* `exp` nothing overflows. Clamping after `exp`
gives the same values but the gradient $0\cdot e^{l - l_0}$ is NaN once $e^{l-l_0}$ overflows.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Literal

import numpy as np
import sympy as sp

import refimpl.losses.clipped as CL
import refimpl.losses.policy_gradient as PG
from proofs._framework import GENERAL, assert_close, assert_positive, assert_zero, claim
from refimpl.losses import LossTerms

rho, a, e, f, g, tau, cap = sp.symbols("rho a e f g tau C", positive=True)
lg, l0, A = sp.symbols("l l0 A", real=True)
RATIO = sp.exp(lg - l0)


def _clip(x: sp.Expr, low: sp.Expr, high: sp.Expr) -> sp.Expr:
    return sp.Min(sp.Max(x, low), high)


def _ppo(r: sp.Expr, adv: sp.Expr, low: sp.Expr, high: sp.Expr) -> sp.Expr:
    return sp.Max(-adv * r, -adv * _clip(r, low, high))


def _grad(branch: sp.Expr) -> sp.Expr:
    """∂branch/∂l with ρ = exp(l - l0), written back in terms of ρ."""
    return sp.diff(branch.subs(rho, RATIO), lg).subs(sp.exp(lg - l0), rho)


def _at(r: float, adv: float) -> tuple[list[list[float]], list[list[float]], list[float]]:
    return [[math.log(r)]], [[0.0]], [adv]


def _branch_equals(
    loss: sp.Expr, branch: sp.Expr, gaps: dict[sp.Symbol, sp.Expr], label: str
) -> None:
    """On the region described by ``gaps`` (positive-gap substitutions), ``loss`` is ``branch``."""
    assert_zero(loss.subs(gaps) - branch.subs(gaps), label=label)


LO, HI, C_DUAL = sp.symbols("lo hi c", positive=True)

#: PPO regions: (sign of A, gaps placing ρ in the region, branch, gradient).
PPO_REGIONS: list[tuple[int, dict[sp.Symbol, sp.Expr], sp.Expr, sp.Expr, str]] = [
    (1, {LO: rho - e, HI: rho + f}, -A * rho, -A * rho, "A > 0, inside the band"),
    (1, {HI: rho + e, LO: rho + e + f}, -A * rho, -A * rho, "A > 0, below the band"),
    (1, {HI: rho - e, LO: rho - e - f}, -A * HI, sp.Integer(0), "A > 0, above the band"),
    (-1, {LO: rho - e, HI: rho + f}, -A * rho, -A * rho, "A < 0, inside the band"),
    (-1, {HI: rho - e, LO: rho - e - f}, -A * rho, -A * rho, "A < 0, above the band"),
    (-1, {LO: rho + e, HI: rho + e + f}, -A * LO, sp.Integer(0), "A < 0, below the band"),
]

#: Points (ratio, advantage) inside each PPO region for eps_low = 0.2, eps_high = 0.28.
PPO_POINTS = {
    "A > 0, inside the band": (1.1, 1.5),
    "A > 0, below the band": (0.5, 2.0),
    "A > 0, above the band": (1.5, 0.7),
    "A < 0, inside the band": (0.9, -1.5),
    "A < 0, above the band": (2.5, -2.0),
    "A < 0, below the band": (0.25, -0.3),
}


@claim(
    "PS1",
    r"PPO-clip: on each open region of $\rho$ the loss is one branch, and its gradient is "
    r"$-A\rho$ where the unclipped branch is active ($A>0,\rho<1+\varepsilon_{\text{high}}$; "
    r"$A<0,\rho>1-\varepsilon_{\text{low}}$) and exactly 0 in the clipped regions; "
    r"`refimpl.losses.clipped.ppo_clip_loss` returns these gradients inside every region.",
    scope=GENERAL,
)
def ppo_gradient_by_region() -> None:
    for sign, gaps, branch, gradient, label in PPO_REGIONS:
        adv = sign * a
        loss = _ppo(rho, adv, LO, HI)
        _branch_equals(loss, branch.subs(A, adv), gaps, f"PS1 branch, {label}")
        assert_zero(_grad(branch) - gradient, label=f"PS1 gradient, {label}")
        r, av = PPO_POINTS[label]
        got = CL.ppo_clip_loss(*_at(r, av), eps_low=0.2, eps_high=0.28)
        expected = float(gradient.subs({A: av, rho: r}))
        assert_close(float(got.grad[0, 0]), expected, rel=1e-14, label=f"PS1 refimpl, {label}")


@claim(
    "PS2",
    r"Dual-clip, $A<0$, $c>1$: $\min(\ell, -cA)$ equals $-A(1-\varepsilon_{\text{low}})$, $-A\rho$, "
    r"$-cA$ below, inside and above $[1-\varepsilon_{\text{low}}, c]$ (whether $c$ is above or below "
    r"$1+\varepsilon_{\text{high}}$), so the loss is $\le -cA$ with zero gradient for $\rho > c$; "
    r"the refimpl loss stays finite and $\le -cA$ at log-ratios $\pm 10^3$ without any clamp, and "
    r"positive advantages are unchanged by `dual_clip`.",
    scope=GENERAL,
)
def dual_clip_bounds_negative_advantages() -> None:
    adv = -a
    dual = sp.Min(_ppo(rho, adv, LO, HI), -adv * C_DUAL)
    regions = [  # (gaps, branch, gradient, label)
        ({LO: rho + e, HI: rho + e + f, C_DUAL: rho + e + g}, a * LO, 0, "below the band"),
        ({LO: rho - e, HI: rho + f, C_DUAL: rho + g}, a * rho, a * rho, "inside, rho < hi"),
        ({LO: rho - e - f, HI: rho - e, C_DUAL: rho + g}, a * rho, a * rho, "inside, hi < rho"),
        ({LO: rho - e - f, HI: rho - e, C_DUAL: rho - g}, a * C_DUAL, 0, "above c, c < hi"),
        ({LO: rho - e - f - g, HI: rho - e - f, C_DUAL: rho - e}, a * C_DUAL, 0, "above, hi < c"),
        ({LO: rho - e - f, HI: rho + g, C_DUAL: rho - e}, a * C_DUAL, 0, "above c, rho < hi"),
    ]
    for gaps, branch, gradient, label in regions:
        _branch_equals(dual, branch, gaps, f"PS2 branch, {label}")
        assert_zero(_grad(branch) - gradient, label=f"PS2 gradient, {label}")
        bound_gap = (a * C_DUAL - branch).subs(gaps)
        if bound_gap != 0:
            assert_positive(bound_gap, label=f"PS2 bound, {label}")
    lr = np.array([[-1000.0, -100.0, 0.0, 100.0, 1000.0] * 2])
    adv_values = np.array([[-1.5] * 5 + [2.0] * 5])
    for c in (1.1, 3.0):
        terms = CL.ppo_clip_loss(lr, np.zeros_like(lr), adv_values, eps_low=0.2, dual_clip=c)
        neg = adv_values < 0
        if not (np.all(np.isfinite(terms.loss)) and np.all(terms.loss[neg] <= c * 1.5)):
            raise AssertionError(f"PS2 refimpl: dual-clipped loss {terms.loss} exceeds -cA")
        plain = CL.ppo_clip_loss(lr[:, 5:], np.zeros((1, 5)), adv_values[:, 5:], eps_low=0.2)
        if not np.array_equal(plain.loss, terms.loss[:, 5:]):
            raise AssertionError("PS2 refimpl: dual_clip changed a positive-advantage token")


def _sg(weight: sp.Expr, surrogate: Callable[[sp.Expr], sp.Expr]) -> sp.Expr:
    """∂/∂l of ``surrogate(W)`` with W a stop-gradient symbol, then W := ``weight``."""
    w_sym = sp.Symbol("W", positive=True)
    return sp.diff(surrogate(w_sym), lg).subs(w_sym, weight)


def _sapo_loss(adv: sp.Expr, t: sp.Expr) -> sp.Expr:
    return -adv * (4 / t) / (1 + sp.exp(-t * (RATIO - 1)))


def _binary_kl(p: sp.Expr, p0: sp.Expr) -> sp.Expr:
    return p0 * sp.log(p0 / p) + (1 - p0) * sp.log((1 - p0) / (1 - p))


@claim(
    "PS3",
    r"On-policy reduction: at $\log\pi_\theta = \log\pi_{\text{old}}$ ($\rho = 1$) the gradient "
    r"of every surrogate (PPO-clip with $\varepsilon > 0$, CISPO, SAPO, DPPO in both forms, "
    r"importance-weighted PG in both forms, DRO, REINFORCE) is the policy gradient $-A$; refimpl "
    r"returns exactly $-A$ on on-policy tokens, also at $\varepsilon = 0$ (the kink, by torch's "
    r"tie rule).",
    scope=GENERAL,
)
def on_policy_gradient_is_the_policy_gradient() -> None:
    eps_lo, eps_hi = sp.symbols("epsilon_lo epsilon_hi", positive=True)
    inside = {LO: 1 - eps_lo, HI: 1 + eps_hi}
    on_policy = {lg: l0}
    p0 = sp.Symbol("p0", positive=True)
    gradients = {
        # PPO: at ρ = 1 inside the band the active branch is −Aρ (PS1).
        "ppo": _grad(-A * rho).subs(rho, RATIO),
        "cispo": _sg(_clip(RATIO, LO, HI).subs(inside), lambda w: -w * A * lg),
        "sapo": sp.diff(_sapo_loss(A, tau), lg),
        "dppo_log": _sg(sp.Min(RATIO, 1 + cap), lambda w: -A * w * lg),
        "dppo_ratio": sp.diff(-A * RATIO, lg),
        "iw": sp.diff(-A * RATIO, lg),
        "iw_capped": _sg(sp.Min(RATIO, 1 + cap), lambda w: -A * w * lg),
        "dro": sp.diff(-A * lg + tau / 2 * (lg - l0) ** 2, lg),
        "reinforce": sp.diff(-A * lg, lg),
    }
    for name, gradient in gradients.items():
        assert_zero(gradient.subs(on_policy) + A, label=f"PS3 {name}")
    # DPPO keeps an on-policy token: zero TV distance and zero binary KL.
    assert_zero(_binary_kl(p0, p0), label="PS3 DPPO binary KL at p = p_old")
    rng = np.random.default_rng(3)
    lp = -rng.exponential(2.0, size=(3, 7))
    adv = rng.normal(size=(3, 7))
    calls: list[Callable[[], LossTerms]] = [
        lambda: CL.ppo_clip_loss(lp, lp, adv, eps_low=0.0, dual_clip=3.0),
        lambda: CL.ppo_clip_loss(lp, lp, adv, eps_low=0.2, eps_high=0.28),
        lambda: CL.cispo_loss(lp, lp, adv, eps_high=0.0, eps_low=0.0),
        lambda: CL.sapo_loss(lp, lp, adv, tau_pos=1.0, tau_neg=1.05),
        lambda: CL.dppo_loss(lp, lp, adv, divergence="kl", delta_low=0.0),
        lambda: CL.dppo_loss(lp, lp, adv, delta_low=0.0, surrogate="ratio"),
        lambda: PG.importance_weighted_pg_loss(lp, lp, adv, cap=1.0),
        lambda: PG.log_ratio_penalty_loss(lp, lp, adv, tau=2.0),
    ]
    for call in calls:
        grad = call().grad
        if not np.allclose(grad, -adv, rtol=1e-15, atol=0.0):
            raise AssertionError(f"PS3 refimpl: on-policy gradient {grad} is not -A")


@claim(
    "PS4",
    r"CISPO: the gradient of $-\mathrm{sg}[w]A\log\pi$ is $-wA$ on every region of the clipped "
    r"weight (below, inside, above the band; and with the upper cap only), never 0; without the "
    r"stop-gradient it would differ by $-A\rho\log\pi$ inside the band. refimpl matches $-wA$.",
    scope=GENERAL,
)
def cispo_gradient_uses_the_clipped_weight() -> None:
    weights = {  # region: (gaps, w)
        "below": ({LO: rho + e, HI: rho + e + f}, LO),
        "inside": ({LO: rho - e, HI: rho + f}, rho),
        "above": ({LO: rho - e - f, HI: rho - e}, HI),
    }
    for label, (gaps, w) in weights.items():
        _branch_equals(_clip(rho, LO, HI), w, gaps, f"PS4 weight {label}")
        assert_zero(_sg(w, lambda ws: -ws * A * lg) + A * w, label=f"PS4 gradient {label}")
    assert_zero(sp.Min(rho, rho + e) - rho, label="PS4 upper cap only, below the cap")
    through = sp.diff(-RATIO * A * lg, lg)  # no stop-gradient, inside the band (w = ρ)
    assert_zero(through - (-A * RATIO - A * lg * RATIO), label="PS4 without stop-gradient")
    rng = random.Random(4)
    for _ in range(30):
        lq, lr, av = rng.uniform(-5, -0.01), rng.uniform(-1.5, 1.5), rng.uniform(-3, 3)
        lp = min(lq + lr, -1e-3)
        r = math.exp(lp - lq)
        for eps_low, low in ((None, 0.0), (0.2, 0.8)):
            w = min(max(r, low), 1.28)
            got = CL.cispo_loss([[lp]], [[lq]], [av], eps_high=0.28, eps_low=eps_low)
            assert_close(float(got.grad[0, 0]), -w * av, rel=1e-14, label="PS4 refimpl")


@claim(
    "PS5",
    r"SAPO: $\partial/\partial l$ of $-A\frac{4}{\tau}\sigma(\tau(\rho-1))$ is "
    r"$-4A\sigma(x)\sigma(-x)\rho$, $x = \tau(\rho - 1)$, equal to $-A$ at $\rho = 1$; refimpl "
    r"matches it (50-digit evaluation) and stays finite at log-ratios $\pm 10^3$.",
    scope=GENERAL,
)
def sapo_gradient() -> None:
    x = tau * (RATIO - 1)
    sig = 1 / (1 + sp.exp(-x))
    closed = -4 * A * sig * (1 - sig) * RATIO
    assert_zero(sp.diff(_sapo_loss(A, tau), lg) - closed, label="PS5 gradient")
    assert_zero(closed.subs(lg, l0) + A, label="PS5 at ratio 1")
    rng = random.Random(5)
    for _ in range(30):
        lr, av, t = rng.uniform(-3, 3), rng.uniform(-3, 3), rng.uniform(0.2, 5)
        expected = closed.subs(
            {A: sp.Float(av, 50), tau: sp.Float(t, 50), lg: sp.Float(lr, 50), l0: 0}
        )
        got = CL.sapo_loss([[lr]], [[0.0]], [[av]], tau_pos=t, tau_neg=t)
        assert_close(float(got.grad[0, 0]), float(sp.N(expected, 50)), rel=1e-12, abs_=1e-300)
    huge = CL.sapo_loss([[1000.0, -1000.0]], [[0.0, 0.0]], [[1.0, -1.0]], tau_pos=1.0, tau_neg=2.0)
    if not (np.all(np.isfinite(huge.loss)) and np.all(huge.grad == 0.0)):
        raise AssertionError(f"PS5 refimpl at log-ratios ±1000: {huge}")


@claim(
    "PS6",
    r"DPPO: kept tokens have gradient $-A\min(\rho, C)$ (verl's $-A\,\mathrm{sg}[w]\log\pi$) or "
    r"$-A\rho$ (SkyRL's $-A\rho$), dropped tokens 0; the binary KL has $D(p_0) = 0$ and "
    r"$D'(p) = (p - p_0)/(p(1-p))$, so $D \le \delta$ is a band around $p_0$; refimpl's keep "
    r"decisions match the definitions on a grid of rational probabilities.",
    scope="the symbolic part: general; the decisions: p, p_old on the grid k/10, thresholds 0, 0.05, 0.3",
)
def dppo_trust_region() -> None:
    p, p0 = sp.symbols("p p0", positive=True)
    assert_zero(sp.diff(_binary_kl(p, p0), p) - (p - p0) / (p * (1 - p)), label="PS6 D'(p)")
    assert_zero(
        _sg(sp.Min(RATIO, cap), lambda w: -A * w * lg) + A * sp.Min(RATIO, cap), label="PS6 log"
    )
    assert_zero(sp.diff(-A * RATIO, lg) + A * RATIO, label="PS6 ratio")
    grid = [k / 10 for k in range(1, 10)]
    for p_new in grid:
        for p_old in grid:
            for delta in (0.0, 0.05, 0.3):
                _check_dppo_decisions(p_new, p_old, delta)


def _check_dppo_decisions(p_new: float, p_old: float, delta: float) -> None:
    lp, lq = [[math.log(p_new)] * 2], [[math.log(p_old)] * 2]
    adv = [[1.0, -1.0]]
    diff = p_new - p_old
    kl = float(_binary_kl(sp.Rational(str(p_new)), sp.Rational(str(p_old))).evalf(30))
    keep: dict[Literal["tv", "kl"], tuple[bool, bool]] = {
        "tv": (diff <= delta + 1e-12, diff >= -delta - 1e-12),
        "kl": (kl <= delta or p_new <= p_old, kl <= delta or p_new >= p_old),
    }
    for kind, (up, down) in keep.items():
        if abs(abs(diff) - delta) < 1e-9 or abs(kl - delta) < 1e-9:
            continue  # on a threshold: float rounding of p - p_old decides
        got = CL.dppo_loss(lp, lq, adv, divergence=kind, delta_low=delta, surrogate="ratio")
        expected = [-(p_new / p_old) if up else 0.0, (p_new / p_old) if down else 0.0]
        for i in range(2):
            assert_close(
                float(got.grad[0, i]), expected[i], rel=1e-13, abs_=0.0, label=f"PS6 {kind}"
            )


@claim(
    "PS7",
    r"DRO / Kimi k1.5: $\ell = -A\log\pi + \frac{\tau}{2}(\log\pi - \log\pi_{\text{old}})^2$ has "
    r"gradient $-A + \tau\log\rho$ and curvature $\tau > 0$, minimised at "
    r"$\log\pi = \log\pi_{\text{old}} + A/\tau$; refimpl matches the gradient.",
    scope=GENERAL,
)
def log_ratio_penalty_gradient() -> None:
    loss = -A * lg + tau / 2 * (lg - l0) ** 2
    assert_zero(sp.diff(loss, lg) - (-A + tau * (lg - l0)), label="PS7 gradient")
    assert_positive(sp.diff(loss, lg, 2), label="PS7 curvature")
    assert_zero(sp.diff(loss, lg).subs(lg, l0 + A / tau), label="PS7 minimiser")
    rng = random.Random(7)
    for _ in range(20):
        lp, lq, av, t = (
            rng.uniform(-9, 0),
            rng.uniform(-9, 0),
            rng.uniform(-3, 3),
            rng.uniform(0.01, 5),
        )
        got = PG.log_ratio_penalty_loss([[lp]], [[lq]], [av], tau=t)
        assert_close(float(got.grad[0, 0]), -av + t * (lp - lq), rel=1e-12, abs_=1e-14, label="PS7")


@claim(
    "PS8",
    r"Importance-weighted PG: $\partial(-A\rho)/\partial l = -A\rho$; the truncated form "
    r"$-\mathrm{sg}[\min(\rho, C)]A\,l$ has $-A\rho$ below the cap and $-AC$ above; REINFORCE "
    r"$-A\,l$ has $-A$; refimpl matches all three.",
    scope=GENERAL,
)
def importance_weighted_gradients() -> None:
    assert_zero(sp.diff(-A * RATIO, lg) + A * RATIO, label="PS8 ratio form")
    below, above = {cap: rho + e}, {cap: rho - e}
    _branch_equals(sp.Min(rho, cap), rho, below, "PS8 weight below the cap")
    _branch_equals(sp.Min(rho, cap), cap, above, "PS8 weight above the cap")
    assert_zero(_sg(cap, lambda w: -w * A * lg) + A * cap, label="PS8 truncated above")
    assert_zero(_sg(RATIO, lambda w: -w * A * lg) + A * RATIO, label="PS8 truncated below")
    assert_zero(sp.diff(-A * lg, lg) + A, label="PS8 REINFORCE")
    for r, av in ((0.5, 2.0), (1.5, -1.0), (4.0, 0.5)):
        lp, lq, adv = _at(r, av)
        assert_close(
            float(PG.importance_weighted_pg_loss(lp, lq, adv).grad[0, 0]), -av * r, label="PS8"
        )
        truncated = PG.importance_weighted_pg_loss(lp, lq, adv, cap=2.0).grad[0, 0]
        assert_close(float(truncated), -av * min(r, 2.0), label="PS8 truncated")
        assert_close(float(PG.reinforce_loss(lp, adv).grad[0, 0]), -av, label="PS8 REINFORCE")


@claim(
    "PS9",
    r"Log-ratio clamp before exp: $\partial \exp(\mathrm{clip}(l - l_0, -k, k))/\partial l$ is "
    r"$\rho$ inside $(-k, k)$ and 0 outside; with $k = 20$ refimpl's PPO, SAPO and "
    r"importance-weighted gradients are exactly 0 and every value finite at log-ratios $\pm 100$, "
    r"$\pm 1000$.",
    scope=GENERAL,
)
def log_ratio_clamp_gradient() -> None:
    d = sp.Symbol("d", real=True)
    k_lo, k_hi = sp.symbols("k_lo k_hi", real=True)  # the clamp's bounds, -k and k
    for label, gaps, branch in (
        ("inside", {k_lo: d - e, k_hi: d + f}, d),
        ("above", {k_hi: d - e, k_lo: d - e - f}, k_hi),
        ("below", {k_lo: d + e, k_hi: d + e + f}, k_lo),
    ):
        _branch_equals(_clip(d, k_lo, k_hi), branch, gaps, f"PS9 clamp {label}")
        expected = sp.exp(d) if label == "inside" else sp.Integer(0)
        assert_zero(sp.diff(sp.exp(branch), d) - expected, label=f"PS9 gradient {label}")
    lr = np.array([[-1000.0, -100.0, 100.0, 1000.0] * 2])
    adv = np.array([[1.0] * 4 + [-1.0] * 4])
    zeros = np.zeros_like(lr)
    for terms in (
        CL.ppo_clip_loss(lr, zeros, adv, log_ratio_clamp=20.0),
        CL.sapo_loss(lr, zeros, adv, tau_pos=1.0, tau_neg=1.0, log_ratio_clamp=20.0),
        PG.importance_weighted_pg_loss(lr, zeros, adv, log_ratio_clamp=20.0),
    ):
        if not (np.all(np.isfinite(terms.loss)) and np.all(terms.grad == 0.0)):
            raise AssertionError(f"PS9 refimpl with the clamp: {terms}")
