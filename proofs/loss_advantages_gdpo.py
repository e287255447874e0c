r"""# GDPO's batch stage: where the ε of the batch denominator sits

GDPO z-scores each of $K$ rewards in its group, sums the z-scores with weights $w_k$ into
$S_i = \sum_k w_k z_{ik}$, and standardises $S$ over the batch: $A_i = (S_i - m)/D(s)$ with $m$
and $s^2$ the (weighted) mean and sample variance of $S$. Frameworks place the batch's
$\varepsilon_w$ differently: verl whitens with $D(s) = \sqrt{s^2 + \varepsilon_w}$, TRL's
`normalize_then_sum` divides by $D(s) = s + \varepsilon_w$ (and weighs each sequence 1, not by its
tokens); a floor $\sqrt{\max(s^2, \varepsilon_w)}$ is the third form.

**The batch scale (claim GD1).** Dividing the centred sums by a constant $D$ divides their
sample standard deviation by $D$: the advantages have batch standard deviation $s/D(s)$. With
$\varepsilon_w = 0$ every placement gives 1. With $\varepsilon_w > 0$ they differ most where the
sums barely spread: at $s = \varepsilon_w = 10^{-4}$, $s/(s + \varepsilon_w) = 1/2$ but
$s/\sqrt{s^2 + \varepsilon_w} \approx 10^{-2}$; at $s = 1$ the two are $1 - 10^{-4}$ and
$1 - 5\cdot10^{-5}$ (to first order). A group whose every reward is nearly constant has z-scores
of order (spread)/$\varepsilon$, so a batch of such groups is where TRL's and verl's GDPO part.

**The weights' scale (claim GD2).** Multiplying every weight by $c > 0$ multiplies $S - m$ and $s$
by $c$. With $D(s) = s + \varepsilon_w$ the advantages change by the factor
$(s + \varepsilon_w)/(s + \varepsilon_w/c)$, with $\sqrt{s^2 + \varepsilon_w}$ by
$\sqrt{s^2 + \varepsilon_w}/\sqrt{s^2 + \varepsilon_w/c^2}$: both are 1 exactly when
$\varepsilon_w = 0$, so the weights' common scale matters only through $\varepsilon_w$.

The library checks evaluate `refimpl.losses.advantages_tokens.gdpo_advantages` against these
expressions on batches whose sample variance is a rational square, in exact arithmetic.
"""

from __future__ import annotations

import math
from fractions import Fraction

import sympy as sp

from proofs._framework import GENERAL, assert_close, assert_zero, claim
from refimpl.losses.advantages_tokens import gdpo_advantages

# Population z-scores ±1 in two groups of (1, 0), a second reward moving only in group 1, a
# singleton (z = 0): weights (1, 6) give sums (1, −1, 7, −7, 0), sample variance 25.
_REWARDS = [[1.0, 5.0], [0.0, 5.0], [1.0, 1.0], [0.0, 0.0], [7.0, 2.0]]
_GROUP = [0, 0, 1, 1, 2]
_SUMS = [Fraction(1), Fraction(-1), Fraction(7), Fraction(-7), Fraction(0)]


def _sample_variance(values: list[sp.Expr]) -> sp.Expr:
    m = sp.Add(*values) / len(values)
    return sp.Add(*((v - m) ** 2 for v in values)) / (len(values) - 1)


def _denominator(placement: str, s: Fraction, eps: Fraction) -> float:
    """D(s) from its definition, in exact arithmetic where it is rational."""
    if placement == "std":
        return float(s + eps)
    return math.sqrt(s * s + eps) if placement == "variance" else math.sqrt(max(s * s, eps))


@claim(
    "GD1",
    r"Standardising the summed z-scores as $(S_i - m)/D(s)$ gives a batch sample standard "
    r"deviation $s/D(s)$: $s/(s + \varepsilon_w)$ (TRL), $s/\sqrt{s^2 + \varepsilon_w}$ (verl), "
    r"$s/\sqrt{\max(s^2, \varepsilon_w)}$; all 1 at $\varepsilon_w = 0$.",
    method="symbolic",
    scope="batches of B = 2..5 sums (symbolic, D a positive symbol); refimpl on a batch with "
    "s = 5 for each placement and ε_w in {0, 1/4, 11, 49}",
)
def batch_scale() -> None:
    d = sp.Symbol("D", positive=True)
    for b in range(2, 6):
        x = sp.symbols(f"S0:{b}", real=True)
        m = sp.Add(*x) / b
        scaled = [(xi - m) / d for xi in x]
        assert_zero(_sample_variance(scaled) - _sample_variance(list(x)) / d**2, label=f"GD1 B={b}")
    s = Fraction(5)
    for placement in ("std", "variance", "floor"):
        for eps in (Fraction(0), Fraction(1, 4), Fraction(11), Fraction(49)):
            out = gdpo_advantages(
                _REWARDS, group=_GROUP, weights=[1.0, 6.0], std="population", eps=0.0,
                whiten_eps=float(eps), whiten_placement=placement,
            )  # fmt: skip
            den = _denominator(placement, s, eps)
            for found, x in zip(out, _SUMS, strict=True):
                assert_close(float(found), float(x) / den, rel=1e-15, abs_=1e-300,
                             label=f"GD1 {placement} ε={eps}")  # fmt: skip
            std = math.sqrt(sum(float(v) ** 2 for v in out) / 4)  # the batch mean is 0
            assert_close(std, float(s) / den, rel=1e-14, label=f"GD1 std {placement}")


@claim(
    "GD2",
    r"Scaling every weight by $c > 0$ multiplies GDPO's advantages by "
    r"$(s + \varepsilon_w)/(s + \varepsilon_w/c)$ under $D = s + \varepsilon_w$ and by "
    r"$\sqrt{s^2 + \varepsilon_w}/\sqrt{s^2 + \varepsilon_w/c^2}$ under "
    r"$D = \sqrt{s^2 + \varepsilon_w}$: 1 exactly when $\varepsilon_w = 0$.",
    method="symbolic",
    scope=GENERAL + "; refimpl on the s = 5 batch with c in {2, 1/2, 3}",
)
def weight_scale() -> None:
    s, c, e, y = sp.symbols("s c epsilon y", positive=True)
    assert_zero((c * y / (c * s + e)) / (y / (s + e)) - (s + e) / (s + e / c), label="GD2 std")
    ratio = (c * y / sp.sqrt(c**2 * s**2 + e)) / (y / sp.sqrt(s**2 + e))
    assert_zero(sp.simplify(ratio**2 - (s**2 + e) / (s**2 + e / c**2)), label="GD2 variance")
    assert_zero(((s + e) / (s + e / c)).subs(e, 0) - 1, label="GD2 at ε = 0")
    eps = Fraction(1, 4)
    base = gdpo_advantages(_REWARDS, group=_GROUP, weights=[1.0, 6.0], std="population",
                           eps=0.0, whiten_eps=float(eps), whiten_placement="std")  # fmt: skip
    for k in (Fraction(2), Fraction(1, 2), Fraction(3)):
        moved = gdpo_advantages(
            _REWARDS, group=_GROUP, weights=[float(k), float(6 * k)], std="population", eps=0.0,
            whiten_eps=float(eps), whiten_placement="std",
        )  # fmt: skip
        factor = float((5 + eps) / (5 + eps / k))
        for p, q in zip(moved, base, strict=True):
            assert_close(float(p), float(q) * factor, rel=1e-14, abs_=1e-300, label="GD2 refimpl")
