"""numpy's sum of each segment, computed for all segments at once, must be ``np.sum``'s bit for bit.

The sequence-level trace specs rest on it: their weights are the reference's only if every
sequence's log-ratio sum is the one the reference computes, and numpy's pairwise order rounds
differently from any other. The property draws segments of every regime (fewer than 8 values,
8 to 128, longer ones split in halves) with values of mixed magnitudes and signed zeros; three
wrong variants of the order (leaves of 64 values instead of 128, halves not rounded down to a
multiple of 8, the running sums combined left to right) each fail it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

import refimpl
from refimpl.testing import _trace_pairwise
from refimpl.testing._trace_lists import sequence_weights
from refimpl.testing._trace_pairwise import numpy_order_holds, segment_sums
from refimpl.testing._traces import ListColumn

Sums = Callable[[NDArray[np.float64], NDArray[np.int64]], NDArray[np.float64]]


@st.composite
def segments(draw: st.DrawFn) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    regime = draw(st.sampled_from([8, 129, 600, 5000]))
    sizes = draw(st.lists(st.integers(1, regime), min_size=1, max_size=20))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(offsets[-1])
    values = rng.standard_normal(n) * 10.0 ** rng.integers(-9, 10, n)
    values[rng.random(n) < draw(st.sampled_from([0.0, 0.3]))] = -0.0
    return values, offsets


def equals_numpy(sums: Sums) -> Callable[[], None]:
    @given(segments())
    def prop(case: tuple[NDArray[np.float64], NDArray[np.int64]]) -> None:
        values, offsets = case
        want = np.array([np.sum(values[a:b]) for a, b in itertools.pairwise(offsets)])
        got = sums(values, offsets)
        assert got.tobytes() == want.tobytes(), (np.diff(offsets), got - want)

    return prop


def test_segment_sums_are_numpys_bit_for_bit() -> None:
    assert numpy_order_holds()
    run_property(equals_numpy(segment_sums))


def _patched(monkeypatch: pytest.MonkeyPatch, **names: Any) -> Sums:
    for name, value in names.items():
        monkeypatch.setattr(_trace_pairwise, name, value)
    return segment_sums


def test_the_property_rejects_leaves_of_64_values(monkeypatch: pytest.MonkeyPatch) -> None:
    rejects(equals_numpy(_patched(monkeypatch, BLOCK=64)))


def test_the_property_rejects_halves_not_rounded_to_eight(monkeypatch: pytest.MonkeyPatch) -> None:
    def unrounded(values: NDArray[np.float64], offsets: NDArray[np.int64]) -> NDArray[np.float64]:
        out = []
        for a, b in itertools.pairwise(offsets):
            x = values[a:b]
            if x.size > 128:  # exact halves: another tree
                h = x.size // 2
                out.append(
                    segment_sums(x[:h], np.array([0, h]))[0]
                    + segment_sums(x[h:], np.array([0, x.size - h]))[0]
                )
            else:
                out.append(segment_sums(x, np.array([0, x.size]))[0])
        return np.asarray(out)

    rejects(equals_numpy(unrounded))


def test_the_property_rejects_running_sums_added_left_to_right(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def left_to_right(
        values: NDArray[np.float64], offsets: NDArray[np.int64]
    ) -> NDArray[np.float64]:
        out = []
        for a, b in itertools.pairwise(offsets):
            x = values[a:b]
            if 8 <= x.size <= 128:
                whole = x.size - x.size % 8
                r = x[:whole].reshape(-1, 8).sum(axis=0)
                total = 0.0
                for v in [*r, *x[whole:]]:
                    total += v
                out.append(total)
            else:
                out.append(np.sum(x))
        return np.asarray(out)

    rejects(equals_numpy(left_to_right))


def test_a_numpy_that_sums_otherwise_is_noticed(monkeypatch: pytest.MonkeyPatch) -> None:
    numpy_order_holds.cache_clear()
    monkeypatch.setattr(_trace_pairwise, "BLOCK", 64)
    try:
        assert not numpy_order_holds()
    finally:
        numpy_order_holds.cache_clear()


# --- the weights, whichever way they are computed ---------------------------------------------


def _cols(rows_t: list[NDArray[np.float64]], rows_b: list[NDArray[np.float64]]) -> dict[str, Any]:
    return {
        "logp_target": ListColumn.from_rows(rows_t),
        "logp_behavior": ListColumn.from_rows(rows_b),
    }


def test_without_numpys_order_the_weights_are_computed_by_length_and_agree(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(3)
    rows_b = [-rng.exponential(1.0, n) for n in rng.integers(1, 400, 60)]
    rows_t = [b + rng.normal(0.0, 0.05, b.size) for b in rows_b]
    fast = sequence_weights(
        refimpl, _cols(rows_t, rows_b), {"cap": 2.0}, "truncated_is_weights", "sequence"
    )
    monkeypatch.setattr("refimpl.testing._trace_lists.numpy_order_holds", lambda: False)
    grouped = sequence_weights(
        refimpl, _cols(rows_t, rows_b), {"cap": 2.0}, "truncated_is_weights", "sequence"
    )
    assert fast.tobytes() == grouped.tobytes()


def test_a_sum_that_is_not_finite_is_left_to_the_reference_on_the_tokens() -> None:
    # the reference must see the tokens to name the one at fault, not an infinite sum
    rows_t = [np.array([-0.5, -0.25, np.nan]), np.array([-0.5])]
    rows_b = [np.array([-0.25, -0.5, -0.25]), np.array([-0.25])]
    with pytest.raises(ValueError, match=r"first at flat index 2\)"):
        sequence_weights(
            refimpl, _cols(rows_t, rows_b), {"cap": 2.0}, "truncated_is_weights", "sequence"
        )
