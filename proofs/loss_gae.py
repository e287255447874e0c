r"""# Generalised advantage estimation: the recursion, its closed form and its two ends

A row of $n$ valid tokens carries rewards $r_0..r_{n-1}$ and critic values $V_0..V_{n-1}$; the
value after the last token is $V_n = b$ (the bootstrap: 0 when the sequence ended). With the
one-step TD errors

$$
\delta_t = r_t + \gamma V_{t+1} - V_t ,
$$

`refimpl.losses.gae_advantages` computes the advantages backwards,

$$
A_{n-1} = \delta_{n-1}, \qquad A_t = \delta_t + \gamma\lambda\,A_{t+1},
$$

and the returns $R_t = A_t + V_t$.

**The closed form (claim GAE1).** Unrolling the recursion $n - t$ times gives

$$
A_t = \sum_{l=0}^{n-1-t} (\gamma\lambda)^l\,\delta_{t+l},
$$

the exponentially weighted sum of TD errors of Schulman et al. (2016). The check unrolls the
recursion symbolically for $n = 1..6$ with symbolic $r$, $V$, $b$, $\gamma$, $\lambda$ and
subtracts the sum; the difference simplifies to 0.

**$\lambda = 1$: the discounted return minus the value (claim GAE2).** The sum telescopes: the
$\gamma^{l+1}V_{t+l+1}$ of one term cancels the $-\gamma^{l+1}V_{t+l+1}$ of the next, leaving

$$
A_t = \sum_{l=0}^{n-1-t}\gamma^l r_{t+l} + \gamma^{n-t} b - V_t ,
$$

so $R_t = A_t + V_t$ is the discounted return (bootstrapped from $b$), the Monte Carlo target
that does not depend on the critic except through $b$.

**$\lambda = 0$: the TD error (claim GAE3).** Every term but the first vanishes: $A_t = \delta_t$
and $R_t = r_t + \gamma V_{t+1}$, the one-step target.

**Padding and gaps (claim GAE4).** The recursion runs over the valid tokens only. A masked position
between two valid tokens (an observation inserted by the environment in a multi-turn rollout) is,
by default, *not a step*: the row with the gap removed gives the same advantages at every valid
token, whatever the rewards and values at the gap hold. The alternative `gaps="steps"` makes the
gap a step with reward 0 and value 0, which is what a recursion over every position computes after
multiplying rewards and values by the mask. The check compares `gae_advantages` on rows with gaps
against the recursion on the compressed row (`"skip"`) and on the row with zeros in the gaps
(`"steps"`), in exact arithmetic.

**The library function (claim GAE5).** `gae_advantages` in exact mode equals the closed form
above, computed as the double sum over $l$ with `Fraction` arithmetic on random rational rows
with right padding; its float64 result agrees with the exact one to $10^{-12}$, and its returns
are $A + V$ at the valid tokens and 0 at padding.
"""

from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import sympy as sp

from proofs._framework import assert_zero, claim
from refimpl.losses.gae import ExactGAE, gae_advantages

LENGTHS = range(1, 7)


def _recursion(
    r: list[sp.Expr], v: list[sp.Expr], b: sp.Expr, g: sp.Expr, lam: sp.Expr
) -> list[sp.Expr]:
    n = len(r)
    out: list[sp.Expr] = [sp.Integer(0)] * n
    nxt_v, nxt_a = b, sp.Integer(0)
    for t in range(n - 1, -1, -1):
        out[t] = r[t] + g * nxt_v - v[t] + g * lam * nxt_a
        nxt_v, nxt_a = v[t], out[t]
    return out


def _symbols(n: int) -> tuple[list[sp.Expr], list[sp.Expr], sp.Expr, sp.Expr, sp.Expr]:
    r = list(sp.symbols(f"r0:{n}", real=True))
    v = list(sp.symbols(f"V0:{n}", real=True))
    b, g, lam = sp.symbols("b gamma lambda", real=True)
    return r, v, b, g, lam


def _delta(r: list[sp.Expr], v: list[sp.Expr], b: sp.Expr, g: sp.Expr, t: int) -> sp.Expr:
    nxt = v[t + 1] if t + 1 < len(v) else b
    return r[t] + g * nxt - v[t]


@claim(
    "GAE1",
    r"The backward recursion $A_t = \delta_t + \gamma\lambda A_{t+1}$ ($A$ after the last token 0, "
    r"$V$ after it the bootstrap $b$) equals the closed form "
    r"$A_t = \sum_{l=0}^{n-1-t}(\gamma\lambda)^l\delta_{t+l}$.",
    method="symbolic",
    scope="rows of n = 1..6 valid tokens, symbolic r, V, b, γ, λ",
)
def closed_form() -> None:
    for n in LENGTHS:
        r, v, b, g, lam = _symbols(n)
        rec = _recursion(r, v, b, g, lam)
        for t in range(n):
            closed = sum(
                ((g * lam) ** k * _delta(r, v, b, g, t + k) for k in range(n - t)), sp.Integer(0)
            )
            assert_zero(sp.expand(rec[t] - closed), label=f"n={n}, t={t}")


@claim(
    "GAE2",
    r"At $\lambda = 1$: $A_t = \sum_{l=0}^{n-1-t}\gamma^l r_{t+l} + \gamma^{n-t}b - V_t$, the "
    r"discounted return minus the value.",
    method="symbolic",
    scope="rows of n = 1..6 valid tokens, symbolic r, V, b, γ",
)
def lambda_one() -> None:
    for n in LENGTHS:
        r, v, b, g, _ = _symbols(n)
        rec = _recursion(r, v, b, g, sp.Integer(1))
        for t in range(n):
            ret = sum((g**k * r[t + k] for k in range(n - t)), sp.Integer(0)) + g ** (n - t) * b
            assert_zero(sp.expand(rec[t] - (ret - v[t])), label=f"n={n}, t={t}")


@claim(
    "GAE3",
    r"At $\lambda = 0$: $A_t = \delta_t = r_t + \gamma V_{t+1} - V_t$.",
    method="symbolic",
    scope="rows of n = 1..6 valid tokens, symbolic r, V, b, γ",
)
def lambda_zero() -> None:
    for n in LENGTHS:
        r, v, b, g, _ = _symbols(n)
        rec = _recursion(r, v, b, g, sp.Integer(0))
        for t in range(n):
            assert_zero(sp.expand(rec[t] - _delta(r, v, b, g, t)), label=f"n={n}, t={t}")


def _rational(rng: random.Random) -> Fraction:
    return Fraction(rng.randint(-9, 9), rng.randint(1, 4))


def _discount(rng: random.Random) -> Fraction:
    return Fraction(rng.randint(0, 8), 8)


def _plain(
    r: list[Fraction], v: list[Fraction], b: Fraction, g: Fraction, lam: Fraction
) -> list[Fraction]:
    """The recursion on a row without padding, in Fractions (written apart from the library's)."""
    out = [Fraction(0)] * len(r)
    for t in range(len(r) - 1, -1, -1):
        nxt_v = v[t + 1] if t + 1 < len(r) else b
        nxt_a = out[t + 1] if t + 1 < len(r) else Fraction(0)
        out[t] = r[t] + g * nxt_v - v[t] + g * lam * nxt_a
    return out


@claim(
    "GAE4",
    r"With gaps='skip' a masked position between valid tokens changes nothing at the valid tokens "
    r"(the row with the gap removed gives the same advantages, whatever the gap holds); with "
    r"gaps='steps' the gap is a step with $r = V = 0$. The library agrees with both.",
    method="exact",
    scope="200 random rational rows of 2..8 positions with random gaps, γ, λ in {0, 1/8, ..., 1}",
)
def gaps() -> None:
    rng = random.Random(21)
    for _ in range(200):
        width = rng.randint(2, 8)
        mask = [rng.random() < 0.6 for _ in range(width)]
        mask[0] = True
        r = [_rational(rng) for _ in range(width)]
        v = [_rational(rng) for _ in range(width)]
        b, g, lam = _rational(rng), _discount(rng), _discount(rng)
        kept = [t for t in range(width) if mask[t]]
        compressed = _plain([r[t] for t in kept], [v[t] for t in kept], b, g, lam)
        last = kept[-1]
        zeros = [r[t] if mask[t] else Fraction(0) for t in range(last + 1)]
        zero_v = [v[t] if mask[t] else Fraction(0) for t in range(last + 1)]
        stepped = _plain(zeros, zero_v, b, g, lam)
        m = [[1 if k else 0 for k in mask]]
        skip = gae_advantages([r], [v], gamma=g, lam=lam, mask=m, bootstrap=[b], gaps="skip")
        steps = gae_advantages([r], [v], gamma=g, lam=lam, mask=m, bootstrap=[b], gaps="steps")
        assert isinstance(skip, ExactGAE)
        assert isinstance(steps, ExactGAE)
        for j, t in enumerate(kept):
            assert skip.advantages[0][t] == compressed[j], (mask, t)
            assert steps.advantages[0][t] == stepped[t], (mask, t)
        gaps_ = [t for t in range(width) if not mask[t]]
        assert all(skip.advantages[0][t] == 0 and steps.advantages[0][t] == 0 for t in gaps_)


@claim(
    "GAE5",
    r"`gae_advantages` (exact mode) equals the closed form $\sum_l(\gamma\lambda)^l\delta_{t+l}$ "
    r"over each row's valid tokens, returns $R = A + V$ there and 0 at padding; the float64 result "
    r"agrees with it to $10^{-12}$.",
    method="exact",
    scope="100 random rational batches of 1..3 right-padded rows of width 1..7, γ, λ in "
    "{0, 1/8, ..., 1}, bootstrap 0 or random",
)
def library() -> None:
    rng = random.Random(22)
    for _ in range(100):
        batch, width = rng.randint(1, 3), rng.randint(1, 7)
        lengths = [rng.randint(0, width) for _ in range(batch)]
        r = [[_rational(rng) for _ in range(width)] for _ in range(batch)]
        v = [[_rational(rng) for _ in range(width)] for _ in range(batch)]
        boot = [_rational(rng) if rng.random() < 0.5 else Fraction(0) for _ in range(batch)]
        g, lam = _discount(rng), _discount(rng)
        mask = [[1 if t < n else 0 for t in range(width)] for n in lengths]
        got = gae_advantages(r, v, gamma=g, lam=lam, mask=mask, bootstrap=boot)
        assert isinstance(got, ExactGAE)
        for i, n in enumerate(lengths):
            vv = [*v[i][:n], boot[i]]
            for t in range(width):
                if t >= n:
                    assert got.advantages[i][t] == 0
                    assert got.returns[i][t] == 0
                    continue
                closed = sum(
                    (
                        (g * lam) ** k * (r[i][t + k] + g * vv[t + k + 1] - vv[t + k])
                        for k in range(n - t)
                    ),
                    Fraction(0),
                )
                assert got.advantages[i][t] == closed, (i, t)
                assert got.returns[i][t] == closed + v[i][t], (i, t)
        floats = gae_advantages(
            np.asarray(r, dtype=np.float64),
            np.asarray(v, dtype=np.float64),
            gamma=float(g),
            lam=float(lam),
            mask=mask,
            bootstrap=np.asarray(boot, dtype=np.float64),
        )
        exact = np.asarray(got.advantages, dtype=np.float64)
        assert np.allclose(floats.advantages, exact, rtol=1e-12, atol=1e-12)
