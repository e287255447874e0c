"""The summary's percentiles are numpy's, bit for bit, read off sorted values or counts.

:func:`refimpl.sim._trace.sorted_percentiles` replaces ``np.percentile`` in ``SimTrace.summary``
(numpy copies and partitions a million values; the summary has them sorted, or counted, already).
The statistics must stay those of the SimPy peer, which calls ``np.percentile``: so the property
is exact equality with numpy on arbitrary values and percentiles, for a sorted array and for a
histogram of whole numbers. A linear interpolation written the textbook way (no switch to the
upper end at ``t >= 1/2``) and a histogram read one place off are the wrong variants it rejects.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

from refimpl.sim import SimConfig, simulate
from refimpl.sim._trace import _all_whole, _nth_from_counts, sorted_percentiles

Percentiles = Callable[[int, tuple[float, ...], Callable[[Any], Any]], NDArray[np.float64]]
Counts = Callable[[NDArray[np.int64]], Callable[[Any], Any]]

_Q = st.lists(
    st.one_of(st.sampled_from([0.0, 50.0, 90.0, 99.0, 100.0]), st.floats(0.0, 100.0)),
    min_size=1,
    max_size=5,
)
_VALUES = st.lists(
    st.floats(-1e6, 1e6, allow_nan=False, allow_subnormal=False), min_size=1, max_size=300
)


def textbook(n: int, q: tuple[float, ...], pick: Callable[[Any], Any]) -> NDArray[np.float64]:
    """The wrong variant: ``a + (b - a) t`` everywhere, as a textbook writes it."""
    virtual = (n - 1) * (np.asarray(q, dtype=np.float64) / 100)
    lo = np.minimum(np.floor(virtual), n - 1).astype(np.intp)
    hi = np.minimum(lo + 1, n - 1)
    a, b = np.asarray(pick(lo), dtype=np.float64), np.asarray(pick(hi), dtype=np.float64)
    out: NDArray[np.float64] = a + (b - a) * (virtual - lo)
    return out


def off_by_one(counts: NDArray[np.int64]) -> Callable[[Any], Any]:
    """The wrong variant: the k-th value searched on the left of the cumulative counts."""
    ends = np.cumsum(counts)
    return lambda k: np.searchsorted(ends, k, side="left").astype(np.int64)


def sorted_matches_numpy(impl: Percentiles) -> Any:
    @given(_VALUES, _Q)
    def prop(values: list[float], q: list[float]) -> None:
        x = np.asarray(values)
        got = impl(x.size, tuple(q), np.sort(x).__getitem__)
        assert np.array_equal(got, np.percentile(x, q)), (got, np.percentile(x, q))

    return prop


def counts_match_numpy(reader: Counts) -> Any:
    @given(st.lists(st.integers(0, 40), min_size=1, max_size=300), _Q)
    def prop(values: list[int], q: list[float]) -> None:
        x = np.asarray(values, dtype=np.int64)
        got = sorted_percentiles(x.size, tuple(q), reader(np.bincount(x)))
        assert np.array_equal(got, np.percentile(x, q)), (got, np.percentile(x, q))

    return prop


def test_percentiles_of_sorted_values_are_numpys_bit_for_bit() -> None:
    run_property(sorted_matches_numpy(sorted_percentiles))


def test_the_check_rejects_the_textbook_interpolation() -> None:
    rejects(sorted_matches_numpy(textbook))


def test_percentiles_of_counted_whole_numbers_are_numpys_bit_for_bit() -> None:
    run_property(counts_match_numpy(_nth_from_counts))


def test_the_check_rejects_counts_read_one_place_off() -> None:
    rejects(counts_match_numpy(off_by_one))


def test_hand_worked_percentiles() -> None:
    # 5 values: 50 % is the middle one; 90 %: index 3.6, 8 + 0.6 * 8 taken from 16 as
    # 16 - 0.4 * 8 = 12.8; 99 %: index 3.96, 16 - 0.04 * 8 = 15.68
    x = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    assert sorted_percentiles(5, (50.0, 90.0, 99.0), x.__getitem__).tolist() == [4.0, 12.8, 15.68]
    # staleness 0, 0, 1, 1, 1, 3 counted [2, 3, 0, 1]: 50 % at index 2.5 is 1; 99 % at 4.95
    # lies between 1 and 3: 3 - (1 - t) * 2 = 2.9 up to rounding, t = 4.95 - 4 in float64
    pick = _nth_from_counts(np.array([2, 3, 0, 1], dtype=np.int64))
    t = 5 * (99.0 / 100) - 4
    assert sorted_percentiles(6, (50.0, 99.0), pick).tolist() == [1.0, 3 - 2 * (1 - t)]
    assert 3 - 2 * (1 - t) == np.percentile([0, 0, 1, 1, 1, 3], 99)
    assert sorted_percentiles(1, (0.0, 100.0), np.array([7.0]).__getitem__).tolist() == [7.0, 7.0]


def test_a_summary_gives_numpys_percentiles_of_the_trained_samples() -> None:
    trace = simulate(SimConfig(slots=8, batch=16, steps=40, seed=4, partial="recompute"))
    s = trace.summary()
    order = trace.training_order()
    want_stale = np.percentile(trace.staleness[order].astype(np.int64), [50, 90, 99])
    want_len = np.percentile(trace.length[order], [50, 90, 99])
    assert np.array_equal(s.staleness_quantiles, want_stale)
    assert np.array_equal(s.length_quantiles, want_len)


def first_block_only(x: NDArray[np.float64]) -> bool:
    """The wrong variant: the whole-number check stops after its first block."""
    part = x[: 1 << 16]
    return bool(np.array_equal(part, np.round(part)))


def whole_check_matches_numpy(check: Callable[[NDArray[np.float64]], bool]) -> Any:
    @given(st.integers(1, 3), st.integers(0, 99), st.data())
    def prop(blocks: int, short: int, data: st.DataObject) -> None:
        n = blocks * (1 << 16) - short  # the last block partly filled
        x = np.arange(n, dtype=np.float64)
        if data.draw(st.booleans()):  # one fractional length, in any block
            block = data.draw(st.integers(0, blocks - 1))
            x[min(n - 1, block * (1 << 16) + data.draw(st.integers(0, (1 << 16) - 1)))] += 0.5
        assert check(x) == bool(np.all(x == np.round(x)))

    return prop


def test_the_whole_number_check_reads_every_block() -> None:
    run_property(whole_check_matches_numpy(_all_whole))


def test_the_check_rejects_a_whole_number_check_of_the_first_block_only() -> None:
    rejects(whole_check_matches_numpy(first_block_only))
