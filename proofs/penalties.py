r"""# Published length penalties: what each one controls, and where it puts the optimum

The effort price $k(b)$ is compared with four published length terms. This page derives the facts
the library's implementations rely on, and where each penalty puts the reward-maximising length
under the same saturating quality model $Q(\ell) = q_\text{max}(1 - e^{-\ell/\lambda})$ used for
$L^*(b)$, read as the probability of a correct answer ($q_\text{max} \le 1$) so that the expected
correctness reward is $Q(\ell)$.

**Kimi k1.5.** Within the responses to one problem,
$\lambda_i = \tfrac12 - (\ell_i - \ell_\text{min})/(\ell_\text{max} - \ell_\text{min})$, given in full
to correct answers and as $\min(0, \lambda_i)$ to wrong ones. It is linear in the length, $+\tfrac12$ at
the shortest and $-\tfrac12$ at the longest response (PEN1); checked exhaustively on small groups in
exact arithmetic (PEN2). It is *relative*: it has no knob and no interior optimum. It always pushes
towards the shortest response of the group, and it vanishes when the group's lengths are equal.

**DAPO.** The soft overlong punishment is $0$ up to $L_\text{max} - L_\text{cache}$, then
$((L_\text{max} - L_\text{cache}) - \ell)/L_\text{cache}$, reaching exactly $-1$ at $L_\text{max}$,
so the paper's floor joins it continuously, and verl's form
$-(\ell - (L_\text{max} - L_\text{cache}))/L_\text{cache}$ is the same ramp (PEN3). With the quality
model, the reward $Q(\ell) + R(\ell)$ is increasing up to the ramp, and on the ramp its first-order
condition $Q'(\ell) = 1/L_\text{cache}$ gives
$\ell^* = \operatorname{clip}\big(\lambda \ln(q_\text{max} L_\text{cache}/\lambda),\
L_\text{max} - L_\text{cache},\ L_\text{max}\big)$ (PEN4). The ramp acts like a price
$1/L_\text{cache}$ per token, switched on only near the cap: DAPO controls a *maximum*, and its knob
$L_\text{max}$ moves the optimum only while the cap binds.

**Cosine.** With $c(\ell) = \tfrac12(1 + \cos(\pi \ell / L))$, correct answers get
$r^c_\text{min} + (r^c_\text{max} - r^c_\text{min}) c(\ell)$ and wrong ones
$r^w_\text{max} + (r^w_\text{min} - r^w_\text{max}) c(\ell)$; $c$ falls from 1 to 0 on $[0, L]$ with
$c'(\ell) = -\frac{\pi}{2L}\sin(\pi\ell/L) \le 0$ (PEN5). Correct answers are pushed short, wrong
ones long (to "keep thinking"); the knob $L$ stretches the schedule.

**L1 (LCPO).** L1-Exact, $\mathbb 1[\text{correct}] - \alpha|n_\text{gold} - n_y|$, targets a length
given in the prompt. Under the quality model the reward increases below $n_\text{gold}$
($Q' + \alpha > 0$); above it the first-order condition is $Q'(\ell) = \alpha$, so
$\ell^* = \max\big(n_\text{gold},\ \lambda\ln(q_\text{max}/(\lambda\alpha))\big)$ (PEN6). Above the
target, L1-Exact acts as the constant price $\alpha$: a target below
$\lambda\ln(q_\text{max}/(\lambda\alpha))$ is overshot, exactly where the effort price
$k(b) = \alpha$ would put the optimum. L1-Max,
$\mathbb 1[\text{correct}]\cdot\operatorname{clip}(\alpha(n_\text{gold} - n_y) + \delta, 0, 1)$,
gives a correct answer $\delta$ at the budget, $1$ once
$n_y \le n_\text{gold} - (1 - \delta)/\alpha$ and $0$ once $n_y \ge n_\text{gold} + \delta/\alpha$;
below that window the expected reward is $Q(\ell)$, increasing, and above it 0, so the optimum lies
in the window (PEN7).

The effort price is the only one of these terms whose knob maps one-to-one onto a point of the frontier
at every setting, linearly in $b$ (EF6).
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import sympy as sp

import refimpl
from proofs._framework import (
    GENERAL,
    assert_close,
    assert_positive,
    assert_zero,
    claim,
)

ell, lam, q_max = sp.symbols("ell lambda q_max", positive=True)
l_lo, width = sp.symbols("ell_min w", positive=True)  # w = ℓ_max − ℓ_min > 0
l_max, l_cache = sp.symbols("L_max L_cache", positive=True)
Q_expr = q_max * (1 - sp.exp(-ell / lam))


def _grid_argmax(values: np.ndarray, grid: np.ndarray) -> float:
    return float(grid[int(np.argmax(values))])


@claim(
    "PEN1",
    r"Kimi: $\lambda(\ell_\text{min}) = \tfrac12$, $\lambda(\ell_\text{max}) = -\tfrac12$, "
    r"$d\lambda/d\ell = -1/(\ell_\text{max} - \ell_\text{min}) < 0$.",
    scope=GENERAL,
)
def kimi_endpoints() -> None:
    kimi = sp.Rational(1, 2) - (ell - l_lo) / width
    assert_zero(kimi.subs(ell, l_lo) - sp.Rational(1, 2), label="lambda(min)")
    assert_zero(kimi.subs(ell, l_lo + width) + sp.Rational(1, 2), label="lambda(max)")
    assert_zero(sp.diff(kimi, ell) + 1 / width, label="dlambda/dl")
    r = refimpl.kimi_length_reward([120.0, 480.0, 300.0], [True, True, True])
    assert list(r) == [0.5, -0.5, 0.0]


@claim(
    "PEN2",
    r"Kimi, exhaustively for every group of 1–4 responses with lengths in $\{0,1,2,3\}$ and every "
    r"correctness pattern: `kimi_length_reward` equals the paper's formula in exact arithmetic, wrong "
    r"answers get $\le 0$, and the shortest response, when correct, gets $\tfrac12$ (degenerate "
    r"groups: 0).",
    method="exact",
    scope="every group of 1–4 responses with lengths in {0, 1, 2, 3} and every correctness pattern",
)
def kimi_exhaustive() -> None:
    half = Fraction(1, 2)
    for size in range(1, 5):
        for lengths in itertools.product(range(4), repeat=size):
            lo, hi = min(lengths), max(lengths)
            for correct in itertools.product((False, True), repeat=size):
                got = refimpl.kimi_length_reward(list(lengths), list(correct))
                for x, ok, g in zip(lengths, correct, got, strict=True):
                    lam_i = Fraction(0) if hi == lo else half - Fraction(x - lo, hi - lo)
                    want = lam_i if ok else min(Fraction(0), lam_i)
                    assert Fraction(float(g)) == want or abs(float(g) - float(want)) <= 1e-16
                    if not ok:
                        assert float(g) <= 0.0
                    if ok and x == lo and hi > lo:
                        assert float(g) == 0.5


@claim(
    "PEN3",
    r"DAPO: the ramp $((L_\text{max} - L_\text{cache}) - \ell)/L_\text{cache}$ is 0 at "
    r"$L_\text{max} - L_\text{cache}$ and $-1$ at $L_\text{max}$ (the floor is continuous), and "
    r"verl's $-(\ell - (L_\text{max} - L_\text{cache}))/L_\text{cache}$ is the same ramp.",
    scope=GENERAL,
)
def dapo_ramp() -> None:
    ramp = ((l_max - l_cache) - ell) / l_cache
    assert_zero(ramp.subs(ell, l_max - l_cache), label="ramp at start")
    assert_zero(ramp.subs(ell, l_max) + 1, label="ramp at L_max")
    verl = -(ell - (l_max - l_cache)) / l_cache
    assert_zero(ramp - verl, label="paper - verl")
    for lm, lc in ((1000.0, 200.0), (16384.0, 4096.0), (10.0, 10.0)):
        p = refimpl.dapo_overlong_penalty([lm - lc, lm], max_length=lm, cache_length=lc)
        assert list(p) == [0.0, -1.0]


@claim(
    "PEN4",
    r"DAPO under the quality model: $\arg\max_\ell\, Q(\ell) + R(\ell) = "
    r"\operatorname{clip}\big(\lambda\ln(q_\text{max}L_\text{cache}/\lambda),\ L_\text{max} - "
    r"L_\text{cache},\ L_\text{max}\big)$. Symbolic: $Q'' < 0$ and the penalty's slope falls from "
    r"0 to $-1/L_\text{cache}$, so $Q + R$ is concave on $[0, L_\text{max}]$; $Q' > 0$ before the "
    r"ramp; on it the first-order condition $Q'(\ell) = 1/L_\text{cache}$ has that root; beyond "
    r"$L_\text{max}$, $Q - 1 < 0 = Q(0) + R(0)$ for $q_\text{max} \le 1$. Library check: "
    r"`saturating_quality + dapo_overlong_penalty` on a fine grid peaks at the closed form.",
    scope=GENERAL,
)
def dapo_optimum() -> None:
    root = lam * sp.log(q_max * l_cache / lam)
    foc = sp.diff(Q_expr - ell / l_cache, ell).subs(ell, root)
    assert_zero(foc, label="FOC on the ramp")
    assert_positive(sp.diff(Q_expr, ell), label="Q' > 0 (reward increasing before the ramp)")
    assert_positive(-sp.diff(Q_expr, ell, 2), label="-Q'' > 0 (Q strictly concave)")
    assert_positive(0 - (-1 / l_cache), label="penalty slope falls from 0 to -1/L_cache")
    d = sp.Symbol("d", nonnegative=True)  # q_max = 1/(1 + d) <= 1
    assert_positive(-(Q_expr.subs(q_max, 1 / (1 + d)) - 1), label="beyond L_max: Q - 1 < 0")
    grid = np.linspace(0.0, 3000.0, 300_001)
    # interior optimum; clipped at L_max − L_cache (twice). (The upper clip cannot bind when
    # q_max <= 1: it needs λ ln(q_max L_cache/λ) > L_cache, but ln(x)/x <= 1/e.) Parameters keep
    # Q' well above float64 resolution at the optimum, so the grid argmax is unambiguous.
    for q, lm_, lc, lmax in (
        (1.0, 100.0, 400.0, 450.0),
        (1.0, 100.0, 400.0, 600.0),
        (0.8, 800.0, 1000.0, 2500.0),
    ):
        total = refimpl.saturating_quality(grid, q_max=q, lam=lm_) + refimpl.dapo_overlong_penalty(
            grid, max_length=lmax, cache_length=lc
        )
        closed = min(max(lm_ * math.log(q * lc / lm_), lmax - lc), lmax)
        assert_close(_grid_argmax(total, grid), closed, rel=0.0, abs_=0.02, label="DAPO optimum")


@claim(
    "PEN5",
    r"Cosine: $c(0) = 1$, $c(L) = 0$ and $c'(\ell) = -\frac{\pi}{2L}\sin(\pi\ell/L) \le 0$ on "
    r"$[0, L]$ (symbolic: SymPy's inequality solver finds no $u \in [0, 1]$ with $\sin \pi u < 0$), "
    r"so correct rewards fall from $r^c_\text{max}$ to $r^c_\text{min}$ and wrong rewards "
    r"rise from $r^w_\text{min}$ to $r^w_\text{max}$.",
    scope=GENERAL,
)
def cosine_schedule() -> None:
    L = sp.Symbol("L", positive=True)
    c = (1 + sp.cos(sp.pi * ell / L)) / 2
    assert_zero(c.subs(ell, 0) - 1, label="c(0)")
    assert_zero(c.subs(ell, L), label="c(L)")
    assert_zero(sp.diff(c, ell) + sp.pi / (2 * L) * sp.sin(sp.pi * ell / L), label="c'")
    # c' <= 0 on [0, L] iff sin(πu) >= 0 for u = ℓ/L in [0, 1]: SymPy solves the inequality
    # sin(πu) < 0 on that interval and finds no solution (and the minimum there is 0).
    u = sp.Symbol("u", real=True)
    unit = sp.Interval(0, 1)
    negative = sp.solveset(sp.sin(sp.pi * u) < 0, u, unit)
    if negative != sp.S.EmptySet:
        raise AssertionError(f"sin(πu) < 0 somewhere on [0, 1]: {negative}")
    assert_zero(
        sp.calculus.util.minimum(sp.sin(sp.pi * u), u, unit), label="min of sin(πu) on [0, 1]"
    )
    # ... while on a longer range the same solver does find the sign change (it can say no)
    if sp.solveset(sp.sin(sp.pi * u) < 0, u, sp.Interval(0, 2)) == sp.S.EmptySet:
        raise AssertionError("the inequality solver misses sin(πu) < 0 on (1, 2)")
    r = refimpl.cosine_length_reward(
        [0.0, 1000.0, 0.0, 1000.0],
        [True, True, False, False],
        max_length=1000.0,
        min_value_wrong=-1.0,
        max_value_wrong=-0.5,
        min_value_correct=0.5,
        max_value_correct=1.0,
    )
    assert list(r) == [1.0, 0.5, -1.0, -0.5]


@claim(
    "PEN6",
    r"L1-Exact under the quality model: $\arg\max_\ell\, Q(\ell) - \alpha|n_\text{gold} - \ell| = "
    r"\max\big(n_\text{gold},\ \lambda\ln(q_\text{max}/(\lambda\alpha))\big)$: above the target it "
    r"is the constant price $\alpha$. Symbolic: $Q'' < 0$ and $-\alpha|\cdot|$ is concave, so the "
    r"objective is concave; its slope $Q' + \alpha > 0$ below the target, and above it "
    r"$Q' - \alpha$ vanishes at that root. Library check: `saturating_quality` plus "
    r"`l1_exact_reward` on a fine grid peaks at the closed form.",
    scope=GENERAL,
)
def l1_exact_optimum() -> None:
    alpha = sp.Symbol("alpha", positive=True)
    root = lam * sp.log(q_max / (lam * alpha))
    assert_zero(sp.diff(Q_expr - alpha * ell, ell).subs(ell, root), label="FOC above target")
    assert_positive(sp.diff(Q_expr + alpha * ell, ell), label="increasing below target")
    assert_positive(-sp.diff(Q_expr, ell, 2), label="-Q'' > 0 (Q strictly concave)")
    assert_positive(alpha - (-alpha), label="the |.| term's slope falls from +α to -α")
    grid = np.linspace(0.0, 3000.0, 300_001)
    for q, lm_, a, gold in (
        (1.0, 100.0, 0.0003, 100.0),
        (1.0, 100.0, 0.0003, 900.0),
        (0.9, 200.0, 0.001, 300.0),
    ):
        ones = np.ones(grid.size, dtype=bool)
        # expected reward: Q(ℓ)·1 − α|n_gold − ℓ| = l1_exact_reward(correct) weighted by Q
        total = refimpl.saturating_quality(grid, q_max=q, lam=lm_) + (
            refimpl.l1_exact_reward(grid, ones, gold, alpha=a) - 1.0
        )
        closed = max(gold, lm_ * math.log(q / (lm_ * a)))
        assert_close(
            _grid_argmax(total, grid), closed, rel=0.0, abs_=0.02, label="L1-Exact optimum"
        )


@claim(
    "PEN7",
    r"L1-Max: a correct answer gets $\delta$ at the budget, 1 for "
    r"$n_y \le n_\text{gold} - (1 - \delta)/\alpha$, 0 for $n_y \ge n_\text{gold} + \delta/\alpha$; "
    r"under the quality model its optimum lies in that window (symbolic: below it the expected "
    r"reward is $Q$, with $Q' > 0$, so the window's left end beats every shorter length; above it "
    r"the reward is 0, which no length in the window falls below). Library check: "
    r"`saturating_quality · l1_max_reward` on a grid peaks inside the window.",
    scope=GENERAL,
)
def l1_max_budget() -> None:
    alpha, delta, gold = sp.symbols("alpha delta n_gold", positive=True)
    inner = alpha * (gold - ell) + delta
    assert_zero(inner.subs(ell, gold) - delta, label="at budget")
    assert_zero(inner.subs(ell, gold - (1 - delta) / alpha) - 1, label="reaches 1")
    assert_zero(inner.subs(ell, gold + delta / alpha), label="reaches 0")
    assert_positive(sp.diff(Q_expr, ell), label="Q' > 0 below the window")
    assert_zero(Q_expr.subs(ell, 0), label="Q(0) = 0, so with Q' > 0, Q >= 0: the window beats 0")
    # under the quality model, the optimum lies in the window [g − (1 − δ)/α, g + δ/α]: below it the
    # reward is Q(ℓ) (increasing), above it 0
    ell_grid = np.arange(0.0, 12001.0)
    for q, lm_, g_ in (
        (0.9, 500.0, 0.0),
        (0.9, 500.0, 1000.0),
        (0.9, 500.0, 4000.0),
        (1.0, 2000.0, 8000.0),
    ):
        ones = np.ones(ell_grid.size, dtype=bool)
        expected = refimpl.saturating_quality(ell_grid, q_max=q, lam=lm_) * refimpl.l1_max_reward(
            ell_grid, ones, g_
        )
        best = _grid_argmax(expected, ell_grid)
        assert g_ - 0.5 / 0.0003 - 1.0 <= best <= g_ + 0.5 / 0.0003 + 1.0, "outside the window"
    a, d, g = 0.0003, 0.5, 4000.0
    r = refimpl.l1_max_reward([g, g - (1 - d) / a, g + d / a, 0.0], [True] * 4, g, alpha=a, delta=d)
    np.testing.assert_allclose(r, [0.5, 1.0, 0.0, 1.0], rtol=0, atol=1e-12)
