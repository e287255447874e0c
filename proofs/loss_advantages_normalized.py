r"""# RLOO advantages standardised over the batch

The leave-one-out advantage of sequence $i$ in a group $g$ of $n \ge 2$ sequences is
$A_i = r_i - \frac{1}{n-1}\sum_{j\ne i} r_j = \frac{n}{n-1}(r_i - \bar r_g)$. Standardising over
the batch, as TRL's `RLOOTrainer` does with `normalize_advantages=True`, gives
$\hat A_i = (A_i - \bar A)/(s + \varepsilon)$ with $\bar A$ the batch mean and $s$ the batch's
sample standard deviation of the advantages.

**The batch mean is 0 (claim RN1).** Within a group,
$\sum_{i\in g} A_i = \frac{n}{n-1}\sum_{i\in g}(r_i - \bar r_g) = 0$, so with every group of two
sequences or more (or a singleton given advantage 0) $\bar A = 0$, and
$\hat A_i = A_i/(s + \varepsilon)$: the standardisation rescales the whole batch by one factor.
A group whose rewards are all equal keeps $\hat A = 0$, and adding a constant to every reward
changes nothing. A singleton left at its raw reward ($A = r$) breaks this: the batch mean then
moves every other advantage.

**The scale (claim RN2).** The sample standard deviation of $\hat A$ over the batch is
$s/(s+\varepsilon)$, 1 up to $\varepsilon/s$; with $\varepsilon = 10^{-4}$ a batch whose
advantages spread by $s = 10^{-3}$ is scaled to $0.91$, not 1. Multiplying every reward by
$k > 0$ multiplies $A$ and $s$ by $k$: with $\varepsilon = 0$, $\hat A$ does not change.

The library checks evaluate `refimpl.losses.advantages_normalized` against these expressions in
exact arithmetic (Fractions; one rounded square root).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import sympy as sp

from proofs._framework import GENERAL, assert_close, assert_zero, claim
from refimpl.losses.advantages_normalized import rloo_normalized_advantages


def _rloo(rewards: list[Fraction], sizes: list[int]) -> list[Fraction]:
    """Leave-one-out advantages, written out group by group."""
    out: list[Fraction] = []
    start = 0
    for n in sizes:
        block = rewards[start : start + n]
        out += [r - (sum(block, Fraction(0)) - r) / (n - 1) for r in block]
        start += n
    return out


@claim(
    "RN1",
    r"The leave-one-out advantages of a group of $n \ge 2$ sum to 0, so their batch mean is 0 and "
    r"$\hat A_i = A_i/(s+\varepsilon)$.",
    method="symbolic",
    scope="the group sum symbolic for n = 2..6; library check on batches of groups of sizes 2..4",
)
def batch_mean_is_zero() -> None:
    for n in range(2, 7):
        r = sp.symbols(f"r0:{n}", real=True)
        total = sp.Add(*r)
        assert_zero(sp.Add(*(r[i] - (total - r[i]) / (n - 1) for i in range(n))), label=f"RN1 {n}")
    sizes = [2, 3, 4]
    rewards = [Fraction(v, 4) for v in (3, -1, 0, 5, 5, 2, 7, -3, 1)]
    a = _rloo(rewards, sizes)
    assert sum(a, Fraction(0)) == 0
    s = math.sqrt(sum((x * x for x in a), Fraction(0)) / (len(a) - 1))
    group = np.repeat(np.arange(3), sizes)
    out = rloo_normalized_advantages(rewards, group=group, eps=0.0)
    for found, x in zip(out, a, strict=True):
        assert_close(float(found), float(x) / s, rel=1e-15, abs_=1e-300, label="RN1 values")


@claim(
    "RN2",
    r"The batch's sample standard deviation of $\hat A$ is $s/(s+\varepsilon)$; scaling every "
    r"reward by $k > 0$ leaves $\hat A$ unchanged when $\varepsilon = 0$.",
    method="symbolic",
    scope=GENERAL,
)
def batch_scale() -> None:
    d, k = sp.symbols("D k", positive=True)
    x = sp.symbols("x0:4", real=True)

    def variance(v: list[sp.Expr]) -> sp.Expr:
        m = sp.Add(*v) / len(v)
        return sp.Add(*((vi - m) ** 2 for vi in v)) / (len(v) - 1)

    # Â = (A − Ā)/D with D = s + ε: its sample variance is s²/D²
    assert_zero(variance([xi / d for xi in x]) - variance(list(x)) / d**2, label="RN2 std")
    # k·A has std k·s: with ε = 0 the ratio does not see k
    scaled = [k * xi / sp.sqrt(k**2 * variance(list(x))) for xi in x]
    assert_zero(
        sp.Add(*[a - xi / sp.sqrt(variance(list(x))) for a, xi in zip(scaled, x, strict=True)]),
        label="RN2 scale",
    )
    rewards = [Fraction(v) for v in (1, 0, 0, 4, 2, 2)]
    group = np.repeat(np.arange(2), 3)
    a = _rloo(rewards, [3, 3])
    s_exact = math.sqrt(sum((v * v for v in a), Fraction(0)) / (len(a) - 1))
    for eps in (0.0, 1e-4, 0.5):
        out = rloo_normalized_advantages(rewards, group=group, eps=eps)
        assert_close(float(np.std(out, ddof=1)), s_exact / (s_exact + eps), rel=1e-14,
                     label="RN2 std")  # fmt: skip
    tripled = rloo_normalized_advantages([3 * r for r in rewards], group=group, eps=0.0)
    base = rloo_normalized_advantages(rewards, group=group, eps=0.0)
    for p, q in zip(tripled, base, strict=True):
        assert_close(float(p), float(q), rel=1e-15, abs_=1e-300, label="RN2 scale")
