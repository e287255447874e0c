r"""# The band-masked importance-weighted policy gradient and the negative log-likelihood

Notation as for the token-level surrogates: for one token $l = \log\pi_\theta(y)$ is what the
gradient is taken with respect to, $l_0$ the log-probability the ratio is taken against (fixed),
$\rho = e^{l - l_0}$, $A$ the advantage, $(\underline r, \bar r) = (1-\varepsilon_{\text{low}},
1+\varepsilon_{\text{high}})$ the open band. Every loss is minimised; $\mathrm{sg}[w]$ contributes
its value and no derivative.

**Band-masked weight (BM1).** $\ell = -\mathrm{sg}[w]\,A\,l$ with
$w = \rho\,\mathbb 1[\underline r < \rho < \bar r]$. The indicator depends on $l$ only through two
strict comparisons, so it is constant on each of the three open regions (below, inside, above the
band) and on the two boundary points; the weight is detached, so on every region the derivative is
$-wA$: $-\rho A$ inside, exactly $0$ outside and at the ends. It agrees with CISPO's gradient
$-\mathrm{clip}(\rho, \underline r, \bar r)A$ inside the band only: out of the band CISPO keeps
$-\underline r A$ or $-\bar r A$, this loss keeps nothing. At $\rho = 1$ (inside whenever both
widths are positive) the gradient is the policy gradient $-A$.

**Why the stop-gradient matters (BM2).** Without it, inside the band the loss $-A\rho\,l$ has
derivative $-A\rho(1 + l)$: the weight's own derivative $-A\,l\,\rho$ is added, which is not the
importance-weighted policy gradient unless $l = 0$.

**Negative log-likelihood (NL1).** $\ell = -l$ has derivative $-1$; summed over the real tokens of
a sequence it is the cross-entropy $-\sum_t \log\pi_\theta(y_t)$ of the sampled (or data) tokens,
and over a batch with weights $c$ the vector–Jacobian product is $-c$. It is REINFORCE's $-A\,l$ at
$A = 1$.

The checks evaluate `refimpl.losses.band_masked_pg_loss` and `refimpl.losses.nll_loss` at exact
dyadic points against values computed here independently (from the region's branch and from
`Fraction` arithmetic).
"""

from __future__ import annotations

import math
from fractions import Fraction

import sympy as sp

from proofs._framework import GENERAL, assert_close, assert_zero, claim
from refimpl.losses.band_masked import band_masked_pg_loss
from refimpl.losses.likelihood import nll_loss

rho, e, f = sp.symbols("rho e f", positive=True)
lg, l0, A = sp.symbols("l l0 A", real=True)
LO, HI = sp.symbols("lo hi", positive=True)
RATIO = sp.exp(lg - l0)


def _band_weight(r: sp.Expr, low: sp.Expr, high: sp.Expr) -> sp.Expr:
    """``r`` inside the open band ``(low, high)``, 0 elsewhere (ends excluded)."""
    return sp.Piecewise((r, sp.And(r > low, r < high)), (0, True))


def _detached_gradient(weight: sp.Expr) -> sp.Expr:
    """∂/∂l of ``-sg[w]·A·l``: ``w`` is held fixed while differentiating."""
    w = sp.Symbol("w", real=True)
    return sp.diff(-w * A * lg, lg).subs(w, weight)


@claim(
    "BM1",
    r"Band-masked weight: the gradient of $-\mathrm{sg}[w]A\,l$, "
    r"$w = \rho\,\mathbb 1[1-\varepsilon_l < \rho < 1+\varepsilon_h]$, is $-\rho A$ inside the open "
    r"band and exactly 0 below it, above it and at either end; at $\rho = 1$ it is $-A$. refimpl "
    r"matches these values at points of each region.",
    scope=GENERAL,
)
def band_masked_gradient_by_region() -> None:
    regions = {  # region: (gaps placing rho, expected weight)
        "inside": ({LO: rho - e, HI: rho + f}, rho),
        "below": ({LO: rho + e, HI: rho + e + f}, sp.Integer(0)),
        "above": ({LO: rho - e - f, HI: rho - e}, sp.Integer(0)),
        "at the lower end": ({LO: rho, HI: rho + f}, sp.Integer(0)),
        "at the upper end": ({LO: rho - e, HI: rho}, sp.Integer(0)),
    }
    for label, (gaps, w) in regions.items():
        weight = _band_weight(rho, LO, HI).subs(gaps)
        assert_zero(weight - w, label=f"BM1 weight {label}")
        assert_zero(_detached_gradient(weight) + w * A, label=f"BM1 gradient {label}")
    at_one = _band_weight(sp.Integer(1), 1 - e, 1 + f)
    assert_zero(_detached_gradient(at_one) + A, label="BM1 at ratio 1")
    # refimpl at exact dyadic ratios (log-ratios log 2^k are exact to the last bit of exp here)
    cases = [  # (ratio, eps_low, eps_high, advantage, expected weight)
        (Fraction(1), Fraction(1, 4), Fraction(1, 4), Fraction(3, 2), Fraction(1)),
        (Fraction(2), Fraction(1, 4), Fraction(3), Fraction(-1, 2), Fraction(2)),
        (Fraction(2), Fraction(1, 4), Fraction(1, 2), Fraction(5, 4), Fraction(0)),
        (Fraction(1, 2), Fraction(1, 4), Fraction(1, 4), Fraction(2), Fraction(0)),
        (Fraction(1, 2), Fraction(3, 4), Fraction(1, 4), Fraction(2), Fraction(1, 2)),
        (Fraction(1, 2), Fraction(1, 2), Fraction(1, 4), Fraction(2), Fraction(0)),  # the end
    ]
    for r, low, high, adv, w in cases:
        lq = -3.0
        lp = lq + math.log(float(r))
        got = band_masked_pg_loss(
            [[lp]], [[lq]], [float(adv)], eps_low=float(low), eps_high=float(high)
        )
        want_grad = float(-w * adv)
        assert_close(float(got.grad[0, 0]), want_grad, rel=1e-15, label=f"BM1 refimpl ρ={r}")
        assert_close(float(got.loss[0, 0]), want_grad * lp, rel=1e-15, label=f"BM1 loss ρ={r}")


@claim(
    "BM2",
    r"Without the stop-gradient the band-masked loss $-A\rho\,l$ has derivative "
    r"$-A\rho(1 + l)$ inside the band: it adds $-A\,l\,\rho$ to the importance-weighted "
    r"policy gradient.",
    scope=GENERAL,
)
def band_masked_without_stop_gradient() -> None:
    through = sp.diff(-RATIO * A * lg, lg)
    assert_zero(through - (-A * RATIO * (1 + lg)), label="BM2 derivative through the weight")
    assert_zero(through - _detached_gradient(RATIO) - (-A * lg * RATIO), label="BM2 the extra term")


@claim(
    "NL1",
    r"Negative log-likelihood: $\partial(-l)/\partial l = -1$, so with cotangent $c$ the "
    r"gradient is $-c$ and the summed loss is $-\sum_t \log\pi(y_t)$; refimpl's loss and "
    r"gradient equal the exact sums on a padded batch.",
    method="exact",
    scope="one padded 2 × 3 batch with dyadic log-probabilities and weights",
)
def nll_gradient_and_sum() -> None:
    assert_zero(sp.diff(-lg, lg) + 1, label="NL1 derivative")
    logp: list[list[Fraction]] = [
        [Fraction(-1, 2), Fraction(-3, 4), Fraction(-5)],
        [Fraction(-1, 8), Fraction(-9), Fraction(0)],
    ]
    mask: list[list[int]] = [[1, 1, 1], [1, 0, 0]]
    cot: list[list[Fraction]] = [
        [Fraction(1, 4), Fraction(1, 2), Fraction(1)],
        [Fraction(3, 2), Fraction(2), Fraction(2)],
    ]
    pairs = [zip(row, mr, strict=True) for row, mr in zip(logp, mask, strict=True)]
    want_sum = -sum(lp * m for pair in pairs for lp, m in pair)
    got = nll_loss(
        [[float(x) for x in row] for row in logp],
        mask=mask,
        cotangent=[[float(x) for x in row] for row in cot],
    )
    assert float(got.loss.sum()) == float(want_sum), "NL1 summed loss"
    want_grad = [
        [float(-c * m) + 0.0 for c, m in zip(cr, mr, strict=True)]
        for cr, mr in zip(cot, mask, strict=True)
    ]
    assert got.grad.tolist() == want_grad, f"NL1 gradient {got.grad.tolist()} != {want_grad}"
