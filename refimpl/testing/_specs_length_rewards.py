"""Specs of the effort-shaped reward and the published length penalties (DAPO overlong, Kimi
k1.5, cosine, L1): typed checks over the calls as the candidate saw them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import refimpl
from refimpl.testing import strategies as rst
from refimpl.testing._engine import Call, Case, Check, Convention, Conventions, Spec
from refimpl.testing._specs_parts import (
    Array,
    Strategy,
    _agrees,
    _array,
    _f,
    _floats,
    _lengths,
    _non_increasing,
    _one,
)
from refimpl.testing.tolerances import SAFETY, smallest_normal

# --- shaped_reward ------------------------------------------------------------------------


def _shaped_calls(k0: float | None = None, vary: str | None = None) -> Strategy:
    @st.composite
    def draw(d: st.DrawFn) -> list[Call]:
        p = d(rst.effort_parameters())
        n = d(st.integers(1, 8))
        quality = d(hnp.arrays(np.float64, n, elements=_floats(-1.0, 1.0)))
        length = d(
            hnp.arrays(np.float64, n, elements=st.one_of(st.just(0.0), _floats(0.0, 4096.0)))
        )
        b = p.b_min + d(hnp.arrays(np.float64, n, elements=_floats(0.0, 20.0)))
        kw = {**p._asdict(), "length_scale": d(st.sampled_from([1.0, 1000.0]))}
        if k0 is not None:
            kw["k0"] = k0
        if vary == "length":
            return [((np.full(n, quality[0]), np.sort(length), np.full(n, b[0])), kw)]
        if vary == "b":
            return [((np.full(n, quality[0]), np.full(n, length[0]), np.sort(b)), kw)]
        return [((quality, length, b), kw)]

    return lambda conv: draw()


def _shaped_condition(call: Call, conv: Conventions, expected: Any) -> Array:
    q, ell, b = (np.asarray(a, dtype=np.float64) for a in call[0])
    kw = call[1]
    k = refimpl.effort_penalty(b, k0=kw["k0"], b_min=kw["b_min"], tau=kw["tau"])
    x = (b - kw["b_min"]) / kw["tau"]
    price = k * ell / kw["length_scale"]
    scale = (np.abs(b) + abs(kw["b_min"])) / kw["tau"] + 2 * np.abs(x) + 5
    return np.asarray(np.abs(q) + price * scale, dtype=np.float64)


def _shaped_tolerance(case: Case, i: int = 0) -> Array:
    """The condition plus an intermediate underflow: ``k(b)`` below the dtype's smallest normal
    number is subnormal or zero, an absolute error up to that number that the product amplifies
    by ``ℓ/ℓ_scale`` (in float16, ``k = e^-17.5`` times 3135 tokens is a price of 8e-5 that a
    correct candidate computes as 0)."""
    _, ell, _ = case.calls[i][0]
    scale = case.calls[i][1]["length_scale"]
    tiny = smallest_normal(case.dtype) / (SAFETY * case.u)
    return np.asarray(case.condition(i) + np.abs(ell) / scale * tiny, dtype=np.float64)


def _shaped_agrees(case: Case) -> None:
    expected = np.asarray(case.expected(), dtype=np.float64)
    case.show("found:   ", _f(case))
    case.show("expected:", expected)
    case.assert_close(_f(case), expected, _shaped_tolerance(case), "values")


def _quality_when_free(case: Case) -> None:
    q = case.calls[0][0][0]
    case.show("reward:", _f(case), "quality:", q)
    case.assert_close(_f(case), q, np.abs(q) + 1.0, "reward with k0 = 0 vs quality")


def _shaped_monotone(sign: int, what: str) -> Callable[[Case], None]:
    def monotone(case: Case) -> None:
        y = _f(case)
        cond = _shaped_tolerance(case)
        slack = case.allowed(y[:-1], cond[:-1] + cond[1:])
        bad = (np.diff(y) > slack) if sign < 0 else (np.diff(y) < -slack)
        case.show("reward:", y)
        assert not bad.any(), f"the reward must be {what}: {y}"

    return monotone


SHAPED = Spec(
    name="shaped_reward",
    reference="shaped_reward",
    signature="candidate(quality, length, b, *, k0, b_min, tau, length_scale)",
    read=_array,
    expected=lambda call, conv: refimpl.shaped_reward(*call[0], **call[1]),
    condition=_shaped_condition,
    checks=(
        Check(
            "agrees_with_reference",
            "Q − k(b)·ℓ/ℓ_scale agrees with refimpl.shaped_reward",
            _shaped_calls(),
            _shaped_agrees,
        ),
        Check(
            "quality_when_the_price_is_zero",
            "with k0 = 0 the reward is the quality",
            _shaped_calls(k0=0.0),
            _quality_when_free,
        ),
        Check(
            "non_increasing_in_length",
            "at fixed quality and effort, a longer response never earns more",
            _shaped_calls(vary="length"),
            _shaped_monotone(-1, "non-increasing in the length"),
        ),
        Check(
            "non_decreasing_in_effort",
            "at fixed quality and length, more effort never earns less (a lower price)",
            _shaped_calls(vary="b"),
            _shaped_monotone(+1, "non-decreasing in the effort"),
        ),
    ),
)

# --- dapo_overlong ------------------------------------------------------------------------

FLOOR = Convention(
    "floor",
    True,
    (True, False),
    "True: the paper's −1 floor beyond max_length; False: the ramp goes on below it",
    who="False: verl DAPORewardManager, AReaL reward_overlong_penalty; True: TRL",
)


def _dapo_calls(sort: bool = False) -> Strategy:
    @st.composite
    def draw(d: st.DrawFn) -> list[Call]:
        max_length = d(st.sampled_from([1024, 4096, 20480]))
        cache = d(st.sampled_from([1, 256, max_length // 4]))
        ell = d(_lengths(max_length * 2))
        edges = np.array(
            [0, max_length - cache, max_length - cache + 1, max_length, max_length + 1]
        )
        ell = np.concatenate([ell, edges]).astype(np.int64)
        ell = np.sort(ell) if sort else ell
        factor = d(st.sampled_from([1.0, 0.5]))
        return _one((ell,), max_length=max_length, cache_length=cache, penalty_factor=factor)

    return lambda conv: draw()


def _dapo_expected(call: Call, conv: Conventions) -> Array:
    return refimpl.dapo_overlong_penalty(*call[0], **call[1], floor=conv["floor"])


def _dapo_condition(call: Call, conv: Conventions, expected: Any) -> Array:
    ell = np.asarray(call[0][0], dtype=np.float64)
    kw = call[1]
    return np.asarray(
        ((ell + kw["max_length"]) / kw["cache_length"] + 2) * kw["penalty_factor"], dtype=np.float64
    )


def _dapo_zero_inside(case: Case) -> None:
    ell, kw = case.calls[0][0][0], case.calls[0][1]
    inside = ell <= kw["max_length"] - kw["cache_length"]
    w = _f(case)
    case.show("lengths:", ell)
    case.show("penalty:", w)
    assert np.all(w[inside] == 0.0), (
        f"lengths {ell[inside][w[inside] != 0]} within max_length − cache_length got penalties "
        f"{w[inside][w[inside] != 0]}"
    )


def _dapo_bounds(case: Case) -> None:
    w, kw = _f(case), case.calls[0][1]
    low = -kw["penalty_factor"] - case.slack(kw["penalty_factor"])
    case.show("penalty:", w)
    assert np.all(w <= 0.0), f"positive penalties: {w[w > 0]}"
    if case.conventions["floor"]:
        assert np.all(w >= low), f"penalties below −penalty_factor (floor=True): {w[w < low]}"


DAPO = Spec(
    name="dapo_overlong",
    reference="dapo_overlong_penalty",
    signature="candidate(lengths, *, max_length, cache_length, penalty_factor)",
    read=_array,
    expected=_dapo_expected,
    condition=_dapo_condition,
    conventions=(FLOOR,),
    checks=(
        Check(
            "agrees_with_reference",
            "the soft overlong punishment agrees with refimpl.dapo_overlong_penalty",
            _dapo_calls(),
            _agrees,
        ),
        Check(
            "zero_up_to_the_soft_limit",
            "no penalty for ℓ <= max_length − cache_length",
            _dapo_calls(),
            _dapo_zero_inside,
        ),
        Check(
            "non_increasing_in_length",
            "a longer response is never penalised less",
            _dapo_calls(sort=True),
            _non_increasing,
        ),
        Check(
            "between_minus_factor_and_zero",
            "−penalty_factor <= R <= 0 (with floor), R <= 0 (without)",
            _dapo_calls(),
            _dapo_bounds,
        ),
    ),
)

# --- kimi_length_reward -------------------------------------------------------------------

SCOPE = Convention(
    "scope",
    "problem",
    ("problem", "batch"),
    "min and max lengths per problem (a row), or over the whole batch",
    who="batch: open-r1 len_reward",
)


def _kimi_calls(conv: Conventions) -> st.SearchStrategy[list[Call]]:
    @st.composite
    def draw(d: st.DrawFn) -> list[Call]:
        rows, n = d(st.integers(1, 3)), d(st.integers(1, 6))
        ell = d(hnp.arrays(np.int64, (rows, n), elements=st.integers(0, 4096)))
        if d(st.booleans()):
            ell[0] = ell[0, 0]  # every response of a problem equally long
        correct = d(hnp.arrays(np.bool_, (rows, n)))
        return _one((ell, correct))

    return draw()


def _kimi_expected(call: Call, conv: Conventions) -> Array:
    scope: Any = conv["scope"]
    ell, correct = call[0]
    if scope == "batch":
        return refimpl.kimi_length_reward(np.ravel(ell), np.ravel(correct), scope="batch").reshape(
            np.shape(ell)
        )
    return refimpl.kimi_length_reward(ell, correct)


def _kimi_condition(call: Call, conv: Conventions, expected: Any) -> Array:
    ell = np.asarray(call[0][0], dtype=np.float64)
    spread = max(float(ell.max() - ell.min()), 1.0)
    return np.asarray(np.full(ell.shape, 2.0 * (ell.max() + 1) / spread + 1), dtype=np.float64)


def _kimi_wrong_never_positive(case: Case) -> None:
    correct, w = np.asarray(case.calls[0][0][1]), _f(case)
    case.show("correct:", correct)
    case.show("reward: ", w)
    assert np.all(w[~correct] <= 0.0), (
        f"wrong answers got positive rewards {w[~correct][w[~correct] > 0]}"
    )


def _kimi_flat_group(case: Case) -> None:
    ell, w = np.asarray(case.calls[0][0][0]), _f(case)
    if case.conventions["scope"] == "batch":
        flat = bool(np.all(ell == ell.flat[0]))
        rows = np.full(ell.shape[0], flat)
    else:
        rows = np.all(ell == ell[:, :1], axis=1)
    case.show("lengths:", ell)
    case.show("reward: ", w)
    assert np.all(w[rows] == 0.0), (
        f"a group whose responses are all equally long got rewards {w[rows]} (there is no length "
        "signal: 0)"
    )


def _kimi_bounds(case: Case) -> None:
    w = _f(case)
    s = case.slack(0.5)
    case.show("reward:", w)
    assert np.all((w >= -0.5 - s) & (w <= 0.5 + s)), f"rewards outside [−1/2, 1/2]: {w}"


KIMI = Spec(
    name="kimi_length_reward",
    reference="kimi_length_reward",
    signature="candidate(lengths, correct) (lengths (G, n): one problem per row)",
    read=_array,
    expected=_kimi_expected,
    condition=_kimi_condition,
    conventions=(SCOPE,),
    checks=(
        Check(
            "agrees_with_reference",
            "λ = 1/2 − (ℓ − min)/(max − min), min(0, λ) when wrong, agrees with "
            "refimpl.kimi_length_reward",
            _kimi_calls,
            _agrees,
        ),
        Check(
            "wrong_answers_never_rewarded",
            "a wrong answer's length reward is <= 0",
            _kimi_calls,
            _kimi_wrong_never_positive,
        ),
        Check(
            "zero_without_length_spread",
            "when all responses are equally long the reward is 0 (no 0/0)",
            _kimi_calls,
            _kimi_flat_group,
        ),
        Check(
            "between_minus_and_plus_half",
            "−1/2 <= reward <= 1/2",
            _kimi_calls,
            _kimi_bounds,
        ),
    ),
)

# --- cosine_length_reward -----------------------------------------------------------------


def _cosine_calls(sort: bool = False, correct_value: bool | None = None) -> Strategy:
    @st.composite
    def draw(d: st.DrawFn) -> list[Call]:
        max_length = d(st.sampled_from([1000, 4096]))
        ell = d(_lengths(max_length))
        ell = np.sort(ell) if sort else ell
        if correct_value is None:
            correct = d(hnp.arrays(np.bool_, ell.shape))
        else:
            correct = np.full(ell.shape, correct_value)
        return _one((ell, correct), max_length=max_length)

    return lambda conv: draw()


def _cosine_condition(call: Call, conv: Conventions, expected: Any) -> Array:
    ell = np.asarray(call[0][0], dtype=np.float64)
    kw = call[1]
    return np.asarray(np.pi * (ell / kw["max_length"] + 1) + np.abs(expected) + 2, dtype=np.float64)


def _cosine_order(sign: int, what: str) -> Callable[[Case], None]:
    def order(case: Case) -> None:
        y = _f(case)
        cond = case.condition()
        slack = case.allowed(y[:-1], cond[:-1] + cond[1:])
        bad = (np.diff(y) > slack) if sign < 0 else (np.diff(y) < -slack)
        case.show("lengths:", case.calls[0][0][0])
        case.show("reward: ", y)
        assert not bad.any(), f"the reward must be {what} in the length: {y}"

    return order


def _cosine_correct_beats_wrong(case: Case) -> None:
    correct, w = np.asarray(case.calls[0][0][1]), _f(case)
    case.show("correct:", correct)
    case.show("reward: ", w)
    if correct.any() and (~correct).any():
        assert w[correct].min() >= w[~correct].max(), (
            f"a wrong answer ({w[~correct].max()}) outscored a correct one ({w[correct].min()})"
        )


COSINE = Spec(
    name="cosine_length_reward",
    reference="cosine_length_reward",
    signature="candidate(lengths, correct, *, max_length) (open-r1's default value ranges)",
    read=_array,
    expected=lambda call, conv: refimpl.cosine_length_reward(*call[0], **call[1]),
    condition=_cosine_condition,
    checks=(
        Check(
            "agrees_with_reference",
            "the cosine-scaled reward agrees with refimpl.cosine_length_reward",
            _cosine_calls(),
            _agrees,
        ),
        Check(
            "correct_shorter_is_better",
            "for correct answers the reward is non-increasing in the length",
            _cosine_calls(sort=True, correct_value=True),
            _cosine_order(-1, "non-increasing"),
        ),
        Check(
            "wrong_longer_is_better",
            "for wrong answers the reward is non-decreasing in the length",
            _cosine_calls(sort=True, correct_value=False),
            _cosine_order(+1, "non-decreasing"),
        ),
        Check(
            "correct_beats_wrong",
            "every correct answer earns at least as much as every wrong one",
            _cosine_calls(),
            _cosine_correct_beats_wrong,
        ),
    ),
)

# --- l1_exact and l1_max ------------------------------------------------------------------


def _l1_calls(at_target: bool = False, correct_value: bool | None = None) -> Strategy:
    @st.composite
    def draw(d: st.DrawFn) -> list[Call]:
        ell = d(_lengths(8192))
        target = d(hnp.arrays(np.int64, ell.shape, elements=st.integers(1, 8192)))
        if at_target:
            ell = target.copy()
        if correct_value is None:
            correct = d(hnp.arrays(np.bool_, ell.shape))
        else:
            correct = np.full(ell.shape, correct_value)
        alpha = d(st.sampled_from([0.0003, 0.001, 0.01]))
        return _one((ell, correct, target), alpha=alpha)

    return lambda conv: draw()


def _l1_condition(call: Call, conv: Conventions, expected: Any) -> Array:
    ell, _, target = (np.asarray(a, dtype=np.float64) for a in call[0])
    alpha = call[1]["alpha"]
    delta = abs(call[1].get("delta", 0.0))
    return np.asarray(alpha * (ell + target) * 3 + delta + np.abs(expected) + 2, dtype=np.float64)


def _l1_correctness_at_target(case: Case) -> None:
    correct, w = np.asarray(case.calls[0][0][1], dtype=np.float64), _f(case)
    case.show("correct:", correct)
    case.show("reward: ", w)
    case.assert_close(w, correct, case.condition(), "the reward at the target length vs 1[correct]")


def _l1_never_above(case: Case) -> None:
    correct, w = np.asarray(case.calls[0][0][1], dtype=np.float64), _f(case)
    case.show("correct:", correct)
    case.show("reward: ", w)
    top = correct + case.slack(1.0)
    assert np.all(w <= top), f"rewards above 1[correct]: {w[w > top]}"


def _l1_max_wrong_is_zero(case: Case) -> None:
    w = _f(case)
    case.show("reward:", w)
    assert np.all(w == 0.0), f"wrong answers got rewards {w[w != 0]} (L1-Max: 0 when wrong)"


def _l1_max_in_unit_interval(case: Case) -> None:
    w = _f(case)
    s = case.slack(1.0)
    case.show("reward:", w)
    assert np.all((w >= -s) & (w <= 1 + s)), f"rewards outside [0, 1]: {w}"


L1_EXACT = Spec(
    name="l1_exact",
    reference="l1_exact_reward",
    signature="candidate(lengths, correct, target_lengths, *, alpha)",
    read=_array,
    expected=lambda call, conv: refimpl.l1_exact_reward(*call[0], **call[1]),
    condition=_l1_condition,
    checks=(
        Check(
            "agrees_with_reference",
            "1[correct] − α·|n_gold − n_y| agrees with refimpl.l1_exact_reward",
            _l1_calls(),
            _agrees,
        ),
        Check(
            "correctness_at_the_target",
            "a response exactly at its target length gets 1[correct]",
            _l1_calls(at_target=True),
            _l1_correctness_at_target,
        ),
        Check(
            "never_above_correctness",
            "the reward never exceeds 1[correct]",
            _l1_calls(),
            _l1_never_above,
        ),
    ),
)


def _l1_max_calls(at_target: bool = False, correct_value: bool | None = None) -> Strategy:
    base = _l1_calls(at_target=at_target, correct_value=correct_value)

    def strategy(conv: Conventions) -> st.SearchStrategy[list[Call]]:
        return base(conv).map(lambda c: [(c[0][0], {**c[0][1], "delta": 0.5})])

    return strategy


L1_MAX = Spec(
    name="l1_max",
    reference="l1_max_reward",
    signature="candidate(lengths, correct, target_lengths, *, alpha, delta)",
    read=_array,
    expected=lambda call, conv: refimpl.l1_max_reward(*call[0], **call[1]),
    condition=_l1_condition,
    checks=(
        Check(
            "agrees_with_reference",
            "1[correct]·clip(α·(n_gold − n_y) + δ, 0, 1) agrees with refimpl.l1_max_reward",
            _l1_max_calls(),
            _agrees,
        ),
        Check(
            "zero_when_wrong",
            "a wrong answer gets 0 whatever its length",
            _l1_max_calls(correct_value=False),
            _l1_max_wrong_is_zero,
        ),
        Check(
            "in_unit_interval",
            "0 <= reward <= 1",
            _l1_max_calls(),
            _l1_max_in_unit_interval,
        ),
    ),
)
