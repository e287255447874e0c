"""Properties of the published length penalties (refimpl.penalties), each against its source's definition.

Exact references are written here with ``fractions.Fraction`` straight from the papers' formulas, and
every property is also shown to reject a deliberately wrong variant.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest
from _wrong_variants import rejects
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import ArrayLike, NDArray

from refimpl import (
    cosine_length_reward,
    dapo_overlong_penalty,
    kimi_length_reward,
    l1_exact_reward,
    l1_max_reward,
)
from refimpl.errors import RefimplError

lengths_int = st.integers(0, 4000)
groups_of_responses = st.lists(st.tuples(lengths_int, st.booleans()), min_size=1, max_size=16)


def split(group: list[tuple[int, bool]]) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    return np.array([g[0] for g in group], dtype=float), np.array([g[1] for g in group])


# ---------------------------------------------------------------------------------------------
# Kimi k1.5
# ---------------------------------------------------------------------------------------------


def kimi_exact(lengths: list[int], correct: list[bool]) -> list[Fraction]:
    """The paper's formula in exact arithmetic, one problem (0 for a degenerate group)."""
    lo, hi = min(lengths), max(lengths)
    if lo == hi:
        return [Fraction(0)] * len(lengths)
    out = []
    for ell, ok in zip(lengths, correct, strict=True):
        lam = Fraction(1, 2) - Fraction(ell - lo, hi - lo)
        out.append(lam if ok else min(Fraction(0), lam))
    return out


@given(groups_of_responses)
def test_kimi_matches_the_exact_formula(group: list[tuple[int, bool]]) -> None:
    ell, ok = split(group)
    expected = kimi_exact([g[0] for g in group], [g[1] for g in group])
    np.testing.assert_allclose(
        kimi_length_reward(ell, ok), [float(x) for x in expected], rtol=0, atol=1e-15
    )


def kimi_properties(
    reward: Callable[..., NDArray[np.float64]], group: list[tuple[int, bool]]
) -> None:
    ell, ok = split(group)
    r = reward(ell, ok)
    assert np.all(r[~ok] <= 0.0), "a wrong answer got a positive length reward"
    assert np.all((r >= -0.5) & (r <= 0.5))
    if ell.max() > ell.min():
        shortest = ell == ell.min()
        assert np.all(r[shortest & ok] == 0.5), "the shortest correct response must get 0.5"
        assert np.all(r[ell == ell.max()] == -0.5)
        # decreasing in length among the correct ones
        order = np.argsort(ell[ok], kind="stable")
        assert np.all(np.diff(r[ok][order]) <= 0.0)
    else:
        assert np.all(r == 0.0)


@given(groups_of_responses)
def test_kimi_shortest_correct_gets_half_and_wrong_answers_get_at_most_zero(
    group: list[tuple[int, bool]],
) -> None:
    kimi_properties(kimi_length_reward, group)


def test_kimi_property_rejects_wrong_answers_with_positive_reward() -> None:
    def wrong(lengths: ArrayLike, correct: ArrayLike) -> NDArray[np.float64]:
        ell = np.asarray(lengths, dtype=float)
        return np.asarray(0.5 - (ell - ell.min()) / (ell.max() - ell.min()))  # λ for all

    with pytest.raises(AssertionError, match="wrong answer got a positive"):
        kimi_properties(wrong, [(100, False), (300, True)])


@given(st.lists(groups_of_responses, min_size=1, max_size=5))
def test_kimi_groups_are_independent_problems(problems: list[list[tuple[int, bool]]]) -> None:
    ell = np.concatenate([split(p)[0] for p in problems])
    ok = np.concatenate([split(p)[1] for p in problems])
    labels = np.concatenate([np.full(len(p), 10 * i + 3) for i, p in enumerate(problems)])
    per_group = kimi_length_reward(ell, ok, groups=labels)
    separately = np.concatenate([kimi_length_reward(*split(p)) for p in problems])
    np.testing.assert_array_equal(per_group, separately)
    # batch scope: one min/max over everything, i.e. one problem
    np.testing.assert_array_equal(
        kimi_length_reward(ell, ok, scope="batch"), kimi_length_reward(ell, ok)
    )


def test_kimi_refuses_arguments_of_the_wrong_type_with_a_type_error() -> None:
    # A scope that is not a string is a TypeError naming scope (not the ValueError of a wrong
    # string); flags that are not numbers are a TypeError naming correct (found by mutation testing:
    # without these checks the first became a ValueError and the second an UnboundLocalError).
    with pytest.raises(TypeError, match=r"scope must be the string"):
        kimi_length_reward([1, 2], [True, False], scope=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"correct must be a boolean array"):
        kimi_length_reward([1, 2], ["yes", "no"])


def test_kimi_takes_flags_as_0_and_1_and_names_the_first_entry_that_is_neither() -> None:
    # Found by mutation testing: no test passed numeric flags, so accepting 0/1 could break, and
    # the message could name the last bad entry instead of the first.
    lengths = [100, 300, 200]
    np.testing.assert_array_equal(
        kimi_length_reward(lengths, [1, 0, 1]), kimi_length_reward(lengths, [True, False, True])
    )
    with pytest.raises(ValueError, match=r"Entry 0 is 2\.0"):
        kimi_length_reward(lengths, [2, 1, 0.5])


def test_kimi_rows_of_a_2d_array_are_problems() -> None:
    ell = np.array([[100.0, 200.0, 300.0], [10.0, 10.0, 10.0]])
    ok = np.array([[True, False, True], [True, True, False]])
    np.testing.assert_array_equal(kimi_length_reward(ell, ok), [[0.5, 0.0, -0.5], [0.0, 0.0, 0.0]])
    batch = kimi_length_reward(ell, ok, scope="batch")
    np.testing.assert_allclose(batch[1], [0.5, 0.5, 0.0])  # shortest of the batch
    assert kimi_length_reward(np.zeros((0,)), np.zeros((0,), dtype=bool)).shape == (0,)


# ---------------------------------------------------------------------------------------------
# DAPO
# ---------------------------------------------------------------------------------------------

dapo_params = st.tuples(st.integers(1, 5000), st.integers(1, 5000)).map(
    lambda t: (float(max(t)), float(min(t)))  # (max_length, cache_length), cache <= max
)


def dapo_properties(
    penalty: Callable[..., NDArray[np.float64]], max_len: float, cache: float
) -> None:
    start = max_len - cache
    below = np.linspace(0.0, start, 7)
    above = np.sort(np.concatenate([np.linspace(start, 2.0 * max_len + 1.0, 40), [max_len]]))
    assert np.all(penalty(below, max_length=max_len, cache_length=cache) == 0.0)
    p = penalty(above, max_length=max_len, cache_length=cache)
    assert np.all(np.diff(p) <= 0.0), "penalty must be non-increasing in the length"
    assert np.all((p >= -1.0) & (p <= 0.0))
    assert penalty(np.array([max_len]), max_length=max_len, cache_length=cache)[0] == -1.0


@given(dapo_params)
def test_dapo_is_zero_below_the_interval_and_monotone_above(params: tuple[float, float]) -> None:
    dapo_properties(dapo_overlong_penalty, *params)


def test_dapo_property_rejects_a_rising_ramp() -> None:
    def wrong(lengths: ArrayLike, *, max_length: float, cache_length: float) -> NDArray[np.float64]:
        ell = np.asarray(lengths, dtype=float)
        start = max_length - cache_length
        return np.where(ell <= start, 0.0, np.clip((ell - start) / cache_length, 0, 1) - 1.0)

    rejects(dapo_properties, wrong, 1000.0, 200.0)


@given(dapo_params, st.lists(st.integers(0, 12000), min_size=1, max_size=20))
def test_dapo_matches_the_exact_formula_and_variants_agree_up_to_max_length(
    params: tuple[float, float], lengths: list[int]
) -> None:
    max_len, cache = params
    start = Fraction(int(max_len - cache))

    def exact(ell: int, floor: bool) -> Fraction:
        if ell <= start:
            return Fraction(0)
        if ell > max_len and floor:
            return Fraction(-1)
        return (start - ell) / Fraction(int(cache))

    ell = np.array(lengths, dtype=float)
    for floor in (True, False):
        got = dapo_overlong_penalty(ell, max_length=max_len, cache_length=cache, floor=floor)
        want = [float(exact(x, floor)) for x in lengths]
        np.testing.assert_allclose(got, want, rtol=1e-15, atol=0)
    within = ell <= max_len
    np.testing.assert_array_equal(
        dapo_overlong_penalty(ell[within], max_length=max_len, cache_length=cache),
        dapo_overlong_penalty(ell[within], max_length=max_len, cache_length=cache, floor=False),
    )


def test_dapo_penalty_factor_scales_and_no_negative_zero() -> None:
    p = dapo_overlong_penalty([0.0, 900.0], max_length=1000, cache_length=200, penalty_factor=2.0)
    np.testing.assert_array_equal(p, [0.0, -1.0])
    assert not np.signbit(p[0])
    # a zero factor times a negative ramp is -0.0 in IEEE arithmetic; the penalty is +0.0
    zero = dapo_overlong_penalty([900.0], max_length=1000, cache_length=200, penalty_factor=0.0)
    assert zero[0] == 0.0
    assert not np.signbit(zero[0])


# ---------------------------------------------------------------------------------------------
# cosine
# ---------------------------------------------------------------------------------------------


def open_r1_cosine(ell: float, ok: bool, max_len: float, values: tuple[float, ...]) -> float:
    """open-r1's get_cosine_scaled_reward, transcribed (valid for ell <= max_len)."""
    min_w, max_w, min_c, max_c = values
    cosine = math.cos(ell / max_len * math.pi)
    lo, hi = (min_c, max_c) if ok else (max_w, min_w)
    return lo + 0.5 * (hi - lo) * (1.0 + cosine)


cosine_values = st.tuples(
    st.floats(-5, 5), st.floats(-5, 5), st.floats(-5, 5), st.floats(-5, 5)
).map(lambda v: (min(v[0], v[1]), max(v[0], v[1]), min(v[2], v[3]), max(v[2], v[3])))


@given(
    groups_of_responses,
    st.floats(1.0, 5000.0),
    cosine_values,
)
def test_cosine_matches_open_r1_below_max_length_and_is_monotone(
    group: list[tuple[int, bool]], max_len: float, values: tuple[float, float, float, float]
) -> None:
    ell, ok = split(group)
    kw = dict(
        zip(
            ("min_value_wrong", "max_value_wrong", "min_value_correct", "max_value_correct"),
            values,
            strict=True,
        )
    )
    r = cosine_length_reward(ell, ok, max_length=max_len, **kw)
    inside = ell <= max_len
    want = [
        open_r1_cosine(x, bool(c), max_len, values)
        for x, c in zip(ell[inside], ok[inside], strict=True)
    ]
    np.testing.assert_allclose(r[inside], want, rtol=1e-12, atol=1e-12)
    cosine_monotone(cosine_length_reward, max_len, values)


def cosine_monotone(
    reward: Callable[..., NDArray[np.float64]], max_len: float, values: tuple[float, ...]
) -> None:
    grid = np.linspace(0.0, 2.0 * max_len, 81)
    kw = dict(
        zip(
            ("min_value_wrong", "max_value_wrong", "min_value_correct", "max_value_correct"),
            values,
            strict=True,
        )
    )
    rc = reward(grid, np.ones(grid.size, dtype=bool), max_length=max_len, **kw)
    rw = reward(grid, np.zeros(grid.size, dtype=bool), max_length=max_len, **kw)
    tol = 1e-12 * (1.0 + max(abs(v) for v in values))
    assert np.all(np.diff(rc) <= tol), "correct answers must not gain from length"
    assert np.all(np.diff(rw) >= -tol), "wrong answers must not lose from length"
    assert np.all((rc >= values[2] - tol) & (rc <= values[3] + tol))
    assert np.all((rw >= values[0] - tol) & (rw <= values[1] + tol))


def test_cosine_monotonicity_rejects_open_r1_beyond_max_length_and_an_unswapped_wrong_branch() -> (
    None
):
    values = (-1.0, -0.5, 0.5, 1.0)

    def open_r1(
        lengths: ArrayLike, correct: ArrayLike, *, max_length: float, **kw: float
    ) -> NDArray[np.float64]:
        return np.array(
            [
                open_r1_cosine(float(x), bool(c), max_length, values)
                for x, c in zip(np.asarray(lengths), np.asarray(correct), strict=True)
            ]
        )

    def unswapped(
        lengths: ArrayLike, correct: ArrayLike, *, max_length: float, **kw: float
    ) -> NDArray[np.float64]:
        ell = np.asarray(lengths, dtype=float)
        c = 0.5 * (1 + np.cos(np.pi * np.minimum(ell, max_length) / max_length))
        return np.asarray(np.where(np.asarray(correct), 0.5 + 0.5 * c, -1.0 + 0.5 * c))

    for wrong in (open_r1, unswapped):
        rejects(cosine_monotone, wrong, 1000.0, values)


def test_cosine_exceed_value_replaces_truncated_responses() -> None:
    r = cosine_length_reward(
        [999.0, 1000.0, 1500.0], [True, True, False], max_length=1000, exceed_value=-2.0
    )
    assert r[0] > 0.5
    np.testing.assert_array_equal(r[1:], [-2.0, -2.0])


# ---------------------------------------------------------------------------------------------
# L1 / LCPO
# ---------------------------------------------------------------------------------------------


@given(
    groups_of_responses,
    st.integers(0, 4000),
    st.sampled_from([0.0, 0.0003, 0.001, 0.01]),
)
def test_l1_exact_is_best_at_the_target_and_symmetric(
    group: list[tuple[int, bool]], target: int, alpha: float
) -> None:
    ell, ok = split(group)
    r = l1_exact_reward(ell, ok, target, alpha=alpha)
    exact = [
        float(int(c) - Fraction(alpha) * abs(target - int(x))) for x, c in zip(ell, ok, strict=True)
    ]
    np.testing.assert_allclose(r, exact, rtol=1e-12, atol=1e-12)
    assert np.all(r <= ok.astype(float))
    mirrored = np.abs(2.0 * target - ell)  # same distance on the other side (clipped at 0)
    keep = 2.0 * target - ell >= 0
    np.testing.assert_allclose(
        l1_exact_reward(mirrored[keep], ok[keep], target, alpha=alpha), r[keep], rtol=1e-12
    )


@given(
    groups_of_responses,
    st.integers(0, 4000),
    st.sampled_from([0.0, 0.0003, 0.001]),
    st.sampled_from([0.0, 0.5, 1.0]),
)
def test_l1_max_is_a_soft_budget_in_unit_interval(
    group: list[tuple[int, bool]], target: int, alpha: float, delta: float
) -> None:
    ell, ok = split(group)
    r = l1_max_reward(ell, ok, target, alpha=alpha, delta=delta)
    assert np.all((r >= 0.0) & (r <= 1.0))
    assert np.all(r[~ok] == 0.0)
    grid = np.linspace(0.0, 8000.0, 101)
    rc = l1_max_reward(grid, np.ones(grid.size, dtype=bool), target, alpha=alpha, delta=delta)
    assert np.all(np.diff(rc) <= 1e-15)
    at_budget = l1_max_reward([float(target)], [True], target, alpha=alpha, delta=delta)
    assert at_budget[0] == pytest.approx(delta)


def test_l1_defaults_are_the_papers() -> None:
    # α = 0.0003, δ = 0.5 (arXiv 2503.04697 §3)
    assert l1_exact_reward([2000.0], [True], 1000.0)[0] == pytest.approx(1.0 - 0.3)
    assert l1_max_reward([1000.0], [True], 1000.0)[0] == 0.5
    np.testing.assert_allclose(l1_max_reward([0.0, 3000.0], [True, True], 1000.0), [0.8, 0.0])


# --- hostile inputs: a refusal or an exact answer, never a numpy error or a warning ---------------


@pytest.mark.parametrize(
    "call",
    [
        lambda: kimi_length_reward([1.0], [1 + 2j]),
        lambda: kimi_length_reward([1.0, 2.0], [1, 1], groups=[[1], [1, 2]]),
        lambda: cosine_length_reward([[1.0], [1.0, 2.0]], [True], max_length=10.0),
        lambda: cosine_length_reward([2**1100], [True], max_length=10.0),
        lambda: l1_exact_reward([1.0], [True], [1e308], alpha=2.0),
        lambda: dapo_overlong_penalty([4e11], max_length=3e11, cache_length=1e-300, floor=False),
    ],
)
def test_hostile_penalty_inputs_are_refused_by_refimpl(call: Callable[[], object]) -> None:
    with warnings.catch_warnings(), np.errstate(all="raise", under="ignore"):
        warnings.simplefilter("error")
        with pytest.raises(RefimplError):
            call()


def test_penalties_near_float64s_range_answer_exactly_without_overflow() -> None:
    with warnings.catch_warnings(), np.errstate(all="raise", under="ignore"):
        warnings.simplefilter("error")
        # the interval is a subnormal 1.5e-297 tokens: 1 token is far below it, 3e11 past it
        tiny = dapo_overlong_penalty(
            [1.0, 3e11], max_length=269159647051.0, cache_length=1.4972502360355677e-297
        )
        # alpha * (target - length) is +-inf in float64: the clip makes it exactly 1 or 0
        clipped = l1_max_reward([1.0, 1e308], [True, True], [1e308, 1.0], alpha=1e308)
        # the ends differ by 2e308: the cosine at length 0 and at max_length is still exact
        ends = cosine_length_reward(
            [0.0, 10.0],
            [True, True],
            max_length=10.0,
            min_value_correct=-1e308,
            max_value_correct=1e308,
        )
    np.testing.assert_array_equal(tiny, [0.0, -1.0])
    np.testing.assert_array_equal(clipped, [1.0, 0.0])
    np.testing.assert_array_equal(ends, [1e308, -1e308])
