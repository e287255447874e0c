"""Depth tests of refimpl.penalties: every option of every penalty against its source's formula in
exact arithmetic, on data without accidental symmetry.

Sampled mutants survived where the tests' data was too regular to see an operator: integer lengths
(so a spread below 1 never occurred and ``spread > 0`` could become ``spread > 1``), the default
parameters (``penalty_factor = 1``, ``delta = 0.5``, a cosine range symmetric about 0), one problem
per call. The strategies here draw dyadic fractional lengths (exact in float64 and in ``Fraction``),
spreads below 1, unequal ragged groups with string labels, and non-default parameters; every
rational reference is exact (``fractions.Fraction``), compared with the float64 result to an ulp
or so; the cosine reward, not rational, is compared with ``math.cos`` at 1e-14. Every degenerate
branch (empty input, one response, a group of equal lengths) is checked for shape, dtype and value.
Each property is also shown to reject a deliberately wrong variant.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects, run_property
from hypothesis import example, given
from hypothesis import strategies as st
from numpy.typing import NDArray

from refimpl.penalties import (
    cosine_length_reward,
    dapo_overlong_penalty,
    kimi_length_reward,
    l1_exact_reward,
    l1_max_reward,
)

Array = NDArray[np.float64]

# dyadic lengths: k/8 for k up to 8·64, exact in float64, with spreads well below 1 possible
lengths = st.integers(0, 8 * 64).map(lambda k: Fraction(k, 8))
responses = st.lists(st.tuples(lengths, st.booleans()), min_size=1, max_size=9)


def close(got: float, want: Fraction, *, ulps: float = 4.0) -> None:
    """``got`` within a few ulps of the exact ``want`` (the float64 result's own rounding)."""
    scale = max(abs(float(want)), 1.0)
    assert abs(Fraction(got) - want) <= Fraction(ulps * math.ulp(scale)), (got, want)


# ---------------------------------------------------------------------------------------------
# Kimi k1.5: every scope, ragged groups with labels, fractional lengths
# ---------------------------------------------------------------------------------------------


def kimi_reference(ell: list[Fraction], ok: list[bool], group_of: list[Any]) -> list[Fraction]:
    out = []
    for i, (x, right) in enumerate(zip(ell, ok, strict=True)):
        members = [e for e, g in zip(ell, group_of, strict=True) if g == group_of[i]]
        lo, hi = min(members), max(members)
        lam = Fraction(0) if hi == lo else Fraction(1, 2) - (x - lo) / (hi - lo)
        out.append(lam if right else min(lam, Fraction(0)))
    return out


@st.composite
def ragged_problems(draw: st.DrawFn) -> tuple[list[Fraction], list[bool], list[str]]:
    """Responses of 1–4 problems of unequal sizes, interleaved, labelled by strings."""
    items = draw(st.lists(st.tuples(lengths, st.booleans(), st.sampled_from("qxa")), min_size=1,
                          max_size=12))  # fmt: skip
    return [i[0] for i in items], [i[1] for i in items], [f"prob-{i[2]}" for i in items]


KimiFn = Callable[..., Array]


def check_kimi_scopes(kimi: KimiFn) -> Any:
    # a group whose spread is below one token, always tried first (random draws rarely give one)
    sub_token = ([Fraction(1, 8), Fraction(1, 2), Fraction(3, 8), Fraction(9)], [True, False, True, True],
                 ["prob-q", "prob-q", "prob-q", "prob-a"])  # fmt: skip

    @given(ragged_problems())
    @example(sub_token)
    def prop(problem: tuple[list[Fraction], list[bool], list[str]]) -> None:
        ell, ok, labels = problem
        x = np.array([float(e) for e in ell])
        grouped = kimi(x, ok, groups=labels)
        batch = kimi(x, ok, scope="batch")
        assert grouped.dtype == np.float64
        assert grouped.shape == batch.shape == (len(ell),)
        for got, want in zip(grouped, kimi_reference(ell, ok, labels), strict=True):
            close(float(got), want)
        for got, want in zip(batch, kimi_reference(ell, ok, [0] * len(ell)), strict=True):
            close(float(got), want)

    return prop


def test_kimi_groups_and_batch_scope_match_the_exact_formula() -> None:
    run_property(check_kimi_scopes(kimi_length_reward))


def test_kimi_scope_property_rejects_a_spread_floor_of_one() -> None:
    # the mutant that survived a fresh sample: a group whose spread is below 1 token treated as if
    # its spread were 1 (integer lengths never showed it)
    def wrong(lengths: Any, correct: Any, **kw: Any) -> Array:
        ell = np.asarray(lengths, dtype=float)
        labels = kw.get("groups") if kw.get("scope", "problem") == "problem" else None
        ids = (
            np.unique(labels, return_inverse=True)[1]
            if labels is not None
            else np.zeros(ell.size, int)
        )
        out = np.empty(ell.size)
        for g in np.unique(ids):
            sel = ids == g
            lo, hi = ell[sel].min(), ell[sel].max()
            spread = hi - lo
            safe = spread if spread > 1 else 1.0
            out[sel] = 0.5 - (ell[sel] - lo) / safe if spread > 0 else 0.0
        return np.where(np.asarray(correct), out, np.minimum(out, 0.0))

    rejects(check_kimi_scopes(wrong))


def test_kimi_rows_and_degenerate_groups() -> None:
    # 2-D: each row its own problem, a row of equal lengths gives 0 whatever the correctness
    got = kimi_length_reward([[0.25, 0.5, 0.375], [7.0, 7.0, 7.0]], [[True, False, True]] * 2)
    assert got.shape == (2, 3)
    assert got.tolist() == [[0.5, -0.5, 0.0], [0.0, 0.0, 0.0]]
    one = kimi_length_reward([3.0], [True])
    assert one.shape == (1,)
    assert one.tolist() == [0.0]
    empties: list[Any] = [[], np.zeros((0,)), np.zeros((2, 0))]
    for empty in empties:
        out = kimi_length_reward(empty, np.zeros(np.shape(empty), dtype=bool))
        assert out.dtype == np.float64
        assert out.shape == np.shape(empty)
    with_groups = kimi_length_reward([], [], groups=[])
    assert with_groups.shape == (0,)


def test_kimi_labels_of_any_order_give_the_same_problems() -> None:
    ell = [1.0, 1.5, 9.0, 2.0, 4.0]
    ok = [True, True, True, False, True]
    by_int = kimi_length_reward(ell, ok, groups=[7, 3, 7, 3, 7])
    by_str = kimi_length_reward(ell, ok, groups=["z", "a", "z", "a", "z"])
    assert by_int.tolist() == by_str.tolist() == [0.5, 0.5, -0.5, -0.5, 0.125]


# ---------------------------------------------------------------------------------------------
# DAPO: floor and no floor, any penalty factor, fractional intervals
# ---------------------------------------------------------------------------------------------


def dapo_reference(ell: Fraction, l_max: Fraction, cache: Fraction, floor: bool,
                   factor: Fraction) -> Fraction:  # fmt: skip
    start = l_max - cache
    if ell <= start:
        return Fraction(0)
    if ell <= l_max or not floor:
        return factor * (start - ell) / cache
    return -factor


@st.composite
def dapo_settings(draw: st.DrawFn) -> tuple[Fraction, Fraction, Fraction]:
    l_max = Fraction(draw(st.integers(1, 8 * 64)), 8)
    cache = Fraction(draw(st.integers(1, 8 * 64)), 8)
    factor = Fraction(draw(st.integers(0, 64)), 16)
    return l_max, min(cache, l_max), factor


def check_dapo(dapo: Callable[..., Array]) -> Any:
    @given(dapo_settings(), st.lists(lengths, min_size=1, max_size=8), st.booleans())
    def prop(params: tuple[Fraction, Fraction, Fraction], ell: list[Fraction], floor: bool) -> None:
        l_max, cache, factor = params
        x = np.array([float(e) for e in ell] + [float(l_max), float(l_max - cache)])
        got = dapo(x, max_length=float(l_max), cache_length=float(cache), floor=floor,
                   penalty_factor=float(factor))  # fmt: skip
        assert got.dtype == np.float64
        assert got.shape == x.shape
        for g, e in zip(got, [*ell, l_max, l_max - cache], strict=True):
            close(float(g), dapo_reference(e, l_max, cache, floor, factor))

    return prop


def test_dapo_matches_the_exact_formula_for_every_option() -> None:
    run_property(check_dapo(dapo_overlong_penalty))


def test_dapo_property_rejects_a_factor_applied_inside_the_floor() -> None:
    def wrong(lengths: Any, *, max_length: float, cache_length: float, floor: bool,
              penalty_factor: float) -> Array:  # fmt: skip
        over = np.maximum(np.asarray(lengths) - (max_length - cache_length), 0.0)
        ramp = -(penalty_factor * over) / cache_length
        return np.maximum(ramp, -1.0) if floor else ramp  # floored at -1, not at -factor

    rejects(check_dapo(wrong))


def test_dapo_degenerate_outputs() -> None:
    empty = dapo_overlong_penalty([], max_length=10.0, cache_length=2.0)
    assert empty.dtype == np.float64
    assert empty.shape == (0,)
    zero = dapo_overlong_penalty([[30.0, 9.5]], max_length=10.0, cache_length=2.0, floor=False,
                                 penalty_factor=0.0)  # fmt: skip
    assert zero.shape == (1, 2)
    assert zero.tolist() == [[0.0, 0.0]]
    assert math.copysign(1.0, zero[0, 0]) == 1.0  # +0.0, never -0.0
    scalar = dapo_overlong_penalty(9.5, max_length=10.0, cache_length=2.0, penalty_factor=0.5)
    assert scalar.shape == ()
    assert float(scalar) == -0.375  # (9.5 − 8)/2 · 0.5
    whole = dapo_overlong_penalty([0.0, 5.0, 10.0, 12.0], max_length=10.0, cache_length=10.0)
    assert whole.tolist() == [0.0, -0.5, -1.0, -1.0]
    assert math.copysign(1.0, float(whole[0])) == 1.0


# ---------------------------------------------------------------------------------------------
# cosine: asymmetric ranges, exceed_value, lengths past the cap
# ---------------------------------------------------------------------------------------------


def cosine_reference(ell: float, ok: bool, cap: float, lo_w: float, hi_w: float, lo_c: float,
                     hi_c: float, exceed: float | None) -> float:  # fmt: skip
    if exceed is not None and ell >= cap:
        return exceed
    c = 0.5 * (1.0 + math.cos(math.pi * min(ell, cap) / cap))
    return lo_c + (hi_c - lo_c) * c if ok else hi_w + (lo_w - hi_w) * c


values = st.integers(-64, 64).map(lambda k: k / 16)


@st.composite
def cosine_settings(draw: st.DrawFn) -> dict[str, Any]:
    lo_w, hi_w = sorted((draw(values), draw(values)))
    lo_c, hi_c = sorted((draw(values), draw(values)))
    return {
        "max_length": draw(st.integers(1, 8 * 64)) / 8,
        "min_value_wrong": lo_w,
        "max_value_wrong": hi_w,
        "min_value_correct": lo_c,
        "max_value_correct": hi_c,
        "exceed_value": draw(st.none() | values),
    }


def check_cosine(cosine: Callable[..., Array]) -> Any:
    @given(cosine_settings(), responses)
    def prop(kw: dict[str, Any], items: list[tuple[Fraction, bool]]) -> None:
        ell = [float(e) for e, _ in items] + [kw["max_length"], 2 * kw["max_length"]]
        ok = [o for _, o in items] + [True, False]
        got = cosine(ell, ok, **kw)
        assert got.dtype == np.float64
        for g, e, o in zip(got, ell, ok, strict=True):
            want = cosine_reference(e, o, kw["max_length"], kw["min_value_wrong"],
                                    kw["max_value_wrong"], kw["min_value_correct"],
                                    kw["max_value_correct"], kw["exceed_value"])  # fmt: skip
            assert float(g) == pytest.approx(want, rel=1e-14, abs=1e-14)

    return prop


def test_cosine_matches_the_formula_for_every_range_and_exceed_value() -> None:
    run_property(check_cosine(cosine_length_reward))


def test_cosine_property_rejects_swapped_wrong_ends() -> None:
    def wrong(lengths: Any, correct: Any, **kw: Any) -> Array:
        kw = dict(kw)
        kw["min_value_wrong"], kw["max_value_wrong"] = kw["max_value_wrong"], kw["min_value_wrong"]
        if kw["min_value_wrong"] > kw["max_value_wrong"]:  # the range is symmetric only by luck
            return np.asarray(
                [cosine_reference(e, o, kw["max_length"], kw["min_value_wrong"],
                                  kw["max_value_wrong"], kw["min_value_correct"],
                                  kw["max_value_correct"], kw["exceed_value"])
                 for e, o in zip(np.asarray(lengths), correct, strict=True)]
            )  # fmt: skip
        return cosine_length_reward(lengths, correct, **kw)

    rejects(check_cosine(wrong))


def test_cosine_degenerate_outputs() -> None:
    empty = cosine_length_reward([], [], max_length=5.0)
    assert empty.dtype == np.float64
    assert empty.shape == (0,)
    grid = cosine_length_reward([[0.0, 5.0], [10.0, 2.5]], [[True, False], [True, False]],
                                max_length=5.0, exceed_value=-2.0)  # fmt: skip
    assert grid.shape == (2, 2)
    assert grid[0].tolist() == [1.0, -2.0]
    assert grid[1, 0] == -2.0
    assert float(grid[1, 1]) == pytest.approx(-0.75, rel=1e-15)


# ---------------------------------------------------------------------------------------------
# L1 / LCPO: per-response targets, non-default alpha and delta
# ---------------------------------------------------------------------------------------------

alphas = st.integers(0, 64).map(lambda k: Fraction(k, 256))
deltas = st.integers(0, 16).map(lambda k: Fraction(k, 16))


def check_l1(exact_fn: Callable[..., Array], max_fn: Callable[..., Array]) -> Any:
    @given(responses, st.lists(lengths, min_size=9, max_size=9), alphas, deltas, st.booleans())
    def prop(items: list[tuple[Fraction, bool]], targets: list[Fraction], alpha: Fraction,
             delta: Fraction, per_response: bool) -> None:  # fmt: skip
        ell = [e for e, _ in items]
        ok = [o for _, o in items]
        target = targets[: len(ell)] if per_response else [targets[0]] * len(ell)
        t_arg: Any = [float(t) for t in target] if per_response else float(targets[0])
        x = [float(e) for e in ell]
        got_exact = exact_fn(x, ok, t_arg, alpha=float(alpha))
        got_max = max_fn(x, ok, t_arg, alpha=float(alpha), delta=float(delta))
        assert got_exact.shape == got_max.shape == (len(ell),)
        for i in range(len(ell)):
            want_exact = int(ok[i]) - alpha * abs(target[i] - ell[i])
            want_max = Fraction(0) if not ok[i] else min(max(alpha * (target[i] - ell[i]) + delta,
                                                             Fraction(0)), Fraction(1))  # fmt: skip
            close(float(got_exact[i]), want_exact)
            close(float(got_max[i]), want_max)

    return prop


def test_l1_rewards_match_the_exact_formulas() -> None:
    run_property(check_l1(l1_exact_reward, l1_max_reward))


def test_l1_property_rejects_a_budget_measured_the_wrong_way() -> None:
    def wrong_max(lengths: Any, correct: Any, target: Any, *, alpha: float, delta: float) -> Array:
        x, t = np.asarray(lengths, dtype=float), np.asarray(target, dtype=float)
        return np.where(correct, np.clip(alpha * (x - t) + delta, 0.0, 1.0), 0.0)

    rejects(check_l1(l1_exact_reward, wrong_max))


def test_l1_degenerate_outputs() -> None:
    for fn in (l1_exact_reward, l1_max_reward):
        empty = fn([], [], 3.0)
        assert empty.dtype == np.float64
        assert empty.shape == (0,)
        grid = fn([[1.0, 2.0]], [[True, False]], [[1.0, 1.0]])
        assert grid.shape == (1, 2)
    assert l1_exact_reward(5.0, True, 5.0, alpha=0.5).shape == ()
    # the budget's ends: full reward (1 − δ)/α below the target, nothing δ/α above it
    ends = l1_max_reward([0.0, 2.0, 4.0, 6.0, 8.0], [True] * 5, 4.0, alpha=0.25, delta=0.25)
    assert ends.tolist() == [1.0, 0.75, 0.25, 0.0, 0.0]


def test_kimi_refuses_labels_numpy_cannot_order_in_its_own_words() -> None:
    # np.unique raises on labels of no common order (None among numbers, bare objects): the
    # refusal names groups and the fix, never an UnboundLocalError or numpy's TypeError
    bad: list[Any] = [[1.5, None, 2], [object(), object(), object()]]
    for labels in bad:
        with pytest.raises(TypeError, match=r"groups must be a 1-D array of comparable labels"):
            kimi_length_reward([1.0, 2.0, 3.0], [True, False, True], groups=labels)
    # labels numpy can order are problems, whatever their kind
    mixed = kimi_length_reward([1.0, 2.0, 3.0, 5.0], [True] * 4, groups=np.array([1, "a", 1, "a"]))
    assert mixed.tolist() == [0.5, 0.5, -0.5, -0.5]
