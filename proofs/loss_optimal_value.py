r"""# A*-PO: the sample estimate of the optimal value, and its regression loss

Notation: $n$ rewards $r_1..r_n$ of completions sampled from the reference policy for one prompt,
a temperature $\beta_1 > 0$, and the estimate
$\hat V^*(\beta_1) = \beta_1\log\frac1n\sum_i e^{r_i/\beta_1}$ (A*-PO's stage 1).

**Small temperature (OV1).** As $\beta_1 \to 0^+$, $\hat V^* \to \max_i r_i$: writing
$M = \max_i r_i$ and $k$ the number of rewards equal to it,
$\hat V^* = M + \beta_1\log\frac1n\bigl(k + \sum_{r_i < M} e^{(r_i - M)/\beta_1}\bigr)$, and the
last sum vanishes; the gap is $\beta_1\log(n/k) \to 0$.

**Large temperature (OV2).** As $\beta_1 \to \infty$, $\hat V^* \to \bar r$, the mean: the
expansion is $\hat V^* = \bar r + \frac{s^2}{2\beta_1} + O(\beta_1^{-2})$ with $s^2$ the population
variance of the rewards.

**Bounds and monotonicity (OV3).** $\bar r \le \hat V^* \le \max_i r_i$ and
$\partial\hat V^*/\partial\beta_1 \le 0$: the derivative is minus the KL divergence of the
tilted distribution $w_i \propto e^{r_i/\beta_1}$ from the uniform one, so the estimate falls from
the maximum to the mean as $\beta_1$ grows.

**Shift (OV4).** Adding $c$ to every reward adds $c$ to $\hat V^*$.

**The loss's gradient (OV5).** With $D = \sum_t (\log\pi_t - \log\pi^{\text{ref}}_t)$ and
$\ell = (\beta_2 D - A)^2$, $\partial\ell/\partial\log\pi_t = 2\beta_2(\beta_2 D - A)$ at every
token $t$ of the sequence.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import sympy as sp

from proofs._framework import assert_positive, assert_zero, claim
from refimpl.losses.optimal_advantage import (
    optimal_advantage_regression_loss,
    optimal_value_estimate,
)

_REWARDS = (sp.Integer(0), sp.Rational(1, 2), sp.Integer(1), sp.Integer(1))


def _estimate(rewards: tuple[sp.Expr, ...], beta: sp.Expr) -> sp.Expr:
    n = len(rewards)
    return beta * sp.log(sum(sp.exp(r / beta) for r in rewards) / n)


@claim(
    "OV1",
    r"As $\beta_1 \to 0^+$ the estimate $\beta_1\log\frac1n\sum_i e^{r_i/\beta_1}$ tends to "
    r"$\max_i r_i$, and refimpl's estimate is within $\beta_1\log(n/k)$ of it ($k$ maxima).",
    scope="symbolic rewards a < b (two samples), and the rewards (0, 1/2, 1, 1); refimpl at "
    "beta1 = 2^-10 .. 2^-1",
)
def small_temperature_is_the_maximum() -> None:
    beta = sp.symbols("beta", positive=True)
    a, gap = sp.symbols("a gap", positive=True)
    two = _estimate((a, a + gap), beta)
    assert_zero(sp.limit(two, beta, 0, "+") - (a + gap), label="OV1 two samples")
    four = _estimate(_REWARDS, beta)
    assert_zero(sp.limit(four, beta, 0, "+") - 1, label="OV1 four samples")
    rewards = np.asarray([[float(r) for r in _REWARDS]])
    for k in range(1, 11):
        b = 2.0**-k
        got = float(optimal_value_estimate(rewards, beta1=b)[0])
        lower = 1.0 + b * float(np.log(2 / 4))  # the two maxima alone: β log(k/n)
        assert lower - 1e-15 <= got <= 1.0, f"OV1 beta1={b}: {got} not in [{lower}, 1]"


@claim(
    "OV2",
    r"As $\beta_1 \to \infty$ the estimate tends to the mean $\bar r$, with "
    r"$\hat V^* - \bar r \sim s^2/(2\beta_1)$ ($s^2$ the population variance).",
    scope="the rewards (0, 1/2, 1, 1) and two symbolic rewards",
)
def large_temperature_is_the_mean() -> None:
    beta = sp.symbols("beta", positive=True)
    four = _estimate(_REWARDS, beta)
    mean = sum(_REWARDS) / len(_REWARDS)
    variance = sum((r - mean) ** 2 for r in _REWARDS) / len(_REWARDS)
    assert_zero(sp.limit(four, beta, sp.oo) - mean, label="OV2 mean")
    assert_zero(sp.limit(beta * (four - mean), beta, sp.oo) - variance / 2, label="OV2 rate")
    a, b = sp.symbols("a b", real=True)
    two = _estimate((a, b), beta)
    assert_zero(sp.limit(two, beta, sp.oo) - (a + b) / 2, label="OV2 symbolic")


@claim(
    "OV3",
    r"$\bar r \le \hat V^* \le \max_i r_i$, and $\partial\hat V^*/\partial\beta_1 = "
    r"-\mathrm{KL}(w\,\|\,\mathrm{uniform})\le 0$ with $w_i \propto e^{r_i/\beta_1}$: the "
    r"estimate falls from the maximum to the mean as $\beta_1$ grows; refimpl's estimate is "
    r"inside the bounds and decreasing.",
    scope="GENERAL for the derivative identity (two symbolic rewards); refimpl on dyadic "
    "rewards for beta1 = 2^-4 .. 2^4",
)
def bounds_and_monotonicity() -> None:
    beta = sp.symbols("beta", positive=True)
    a, b = sp.symbols("a b", real=True)
    za, zb = sp.exp(a / beta), sp.exp(b / beta)
    total = za + zb
    w = (za / total, zb / total)
    kl = sum(wi * sp.log(2 * wi) for wi in w)
    # log w_i = r_i/β − log Z, so KL(w || uniform) = log 2 − log Z + Σ w_i r_i / β
    kl_open = sp.log(2) - sp.log(total) + (a * w[0] + b * w[1]) / beta
    assert_zero(sp.expand(sp.expand_log(kl - kl_open, force=True)), label="OV3 KL")
    derivative = sp.diff(_estimate((a, b), beta), beta)
    assert_zero(sp.expand_log(derivative + kl_open, force=True), label="OV3 derivative")
    # KL(w || uniform) >= 0 on two points, w = (x, 1 − x): 0 with slope 0 at x = 1/2, convex on
    # (0, 1) (x = 1/(1 + y) with y > 0 covers it)
    x, y = sp.symbols("x y", positive=True)
    two_point = x * sp.log(2 * x) + (1 - x) * sp.log(2 * (1 - x))
    half = sp.Rational(1, 2)
    assert_zero(two_point.subs(x, half), label="OV3 KL at uniform")
    assert_zero(sp.diff(two_point, x).subs(x, half), label="OV3 slope at uniform")
    assert_positive(sp.diff(two_point, x, 2).subs(x, 1 / (1 + y)), label="OV3 convex")
    rewards = np.asarray([[0.0, 0.25, 0.75, 1.0], [-2.0, 0.5, 0.5, 3.0]])
    previous = optimal_value_estimate(rewards, beta1=2.0**-4)
    for k in range(-3, 5):
        got = optimal_value_estimate(rewards, beta1=2.0**k)
        assert np.all(got >= rewards.mean(axis=1)), f"OV3 below the mean at beta1 = 2^{k}"
        assert np.all(got <= rewards.max(axis=1)), f"OV3 above the maximum at beta1 = 2^{k}"
        assert np.all(got <= previous), f"OV3 increasing at beta1 = 2^{k}"
        previous = got


@claim(
    "OV4",
    r"Adding $c$ to every reward adds $c$ to $\hat V^*$.",
    scope="GENERAL (symbolic), and refimpl on dyadic rewards and shifts",
)
def shift_equivariance() -> None:
    beta, c = sp.symbols("beta c", positive=True)
    a, b = sp.symbols("a b", real=True)
    moved = _estimate((a + c, b + c), beta) - _estimate((a, b), beta) - c
    assert_zero(sp.expand_log(sp.expand(sp.logcombine(moved, force=True)), force=True),
                label="OV4")  # fmt: skip
    rewards = np.asarray([[0.0, 0.25, 1.0]])
    for shift in (-4.0, 0.5, 8.0):
        got = optimal_value_estimate(rewards + shift, beta1=0.5)
        want = optimal_value_estimate(rewards, beta1=0.5) + shift
        assert np.allclose(got, want, rtol=0.0, atol=4e-15), f"OV4 shift {shift}"


@claim(
    "OV5",
    r"$\partial(\beta_2 D - A)^2/\partial\log\pi_t = 2\beta_2(\beta_2 D - A)$ at every token of "
    r"the sequence; refimpl's gradient is exactly this on a dyadic sequence.",
    method="exact",
    scope="GENERAL (symbolic, three tokens); refimpl on one dyadic row",
)
def regression_gradient() -> None:
    lp = sp.symbols("l0:3", real=True)
    ref = sp.symbols("q0:3", real=True)
    beta2, adv = sp.symbols("beta2 A", real=True)
    d = sum(lp) - sum(ref)
    loss = (beta2 * d - adv) ** 2
    for t in range(3):
        assert_zero(sp.diff(loss, lp[t]) - 2 * beta2 * (beta2 * d - adv), label=f"OV5 t={t}")
    row, anchor = [-1.0, -0.5, -2.0], [-1.5, -0.5, -1.0]
    # the cotangent weighs the row's loss once (one token), as the sequence's own loss
    terms = optimal_advantage_regression_loss(
        [row], [anchor], [0.75], beta2=0.5, cotangent=[[1.0, 0.0, 0.0]]
    )
    b2, dd = (
        Fraction(1, 2),
        sum(Fraction(x) - Fraction(y) for x, y in zip(row, anchor, strict=True)),
    )
    error = b2 * dd - Fraction(3, 4)
    for t in range(3):
        assert Fraction(float(terms.loss[0, t])) == error**2, "OV5 loss"
        assert Fraction(float(terms.grad[0, t])) == 2 * b2 * error, "OV5 gradient"
