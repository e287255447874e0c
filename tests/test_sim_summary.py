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
from hypothesis import example, given
from hypothesis import strategies as st
from numpy.typing import NDArray

from refimpl.sim import SimConfig, simulate
from refimpl.sim._trace import (
    _all_whole,
    _length_counts,
    _nth_from_counts,
    sorted_percentiles,
    sorted_quantiles,
)

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


# --- quantile levels (the length bins' edges) and the length counts ------------------------------

_EXTREMES = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    5e-324,
    2.2250738585072014e-308,
    1e308,
    -1e308,
    1.7976931348623157e308,
]
_AWKWARD = st.lists(
    st.one_of(
        st.sampled_from(_EXTREMES),
        st.integers(-3, 3).map(float),  # ties
        st.floats(allow_nan=False, allow_infinity=False),
    ),
    min_size=1,
    max_size=40,
)
_LEVELS = st.lists(
    st.one_of(
        st.sampled_from([0.0, 1.0, 0.5, 0.25, 0.99, 1 / 3, 1 - 2**-53, 2**-1074]),
        st.floats(0.0, 1.0),
    ),
    min_size=1,
    max_size=6,
)
Quantiles = Callable[[int, NDArray[np.float64], Callable[[Any], Any]], NDArray[np.float64]]


def nearest_rank(n: int, q: NDArray[np.float64], pick: Callable[[Any], Any]) -> NDArray[np.float64]:
    """The wrong variant: the nearest-rank rule, ``x_sorted[ceil(q n) - 1]``, no interpolation."""
    k = np.clip(np.ceil(np.asarray(q) * n).astype(np.intp) - 1, 0, n - 1)
    out: NDArray[np.float64] = np.asarray(pick(k), dtype=np.float64)
    return out


def quantiles_match_numpy(impl: Quantiles) -> Any:
    @given(_AWKWARD, _LEVELS)
    @example([7.0], [0.0, 0.5, 1.0])  # n = 1
    @example([1.0, 2.0], [0.0, 0.3, 0.5, 0.7, 1.0])  # n = 2
    @example([-1e308, 1e308], [0.0, 0.5, 1.0])  # b - a overflows: numpy's inf and nan
    def prop(values: list[float], levels: list[float]) -> None:
        x, q = np.asarray(values), np.asarray(levels)
        with np.errstate(all="ignore"):  # numpy's own overflow, on the extremes
            got = impl(x.size, q, np.sort(x).__getitem__)
            want = np.quantile(x, q)
        assert np.array_equal(got, want, equal_nan=True), (got, want)
        assert np.array_equal(np.signbit(got), np.signbit(want)), (got, want)

    return prop


def test_quantiles_of_sorted_values_are_numpys_bit_for_bit() -> None:
    run_property(quantiles_match_numpy(sorted_quantiles))


def test_the_check_rejects_the_nearest_rank_rule() -> None:
    rejects(quantiles_match_numpy(nearest_rank))


def test_the_check_rejects_the_textbook_interpolation_of_quantiles() -> None:
    rejects(quantiles_match_numpy(lambda n, q, pick: textbook(n, tuple(100 * np.asarray(q)), pick)))


def test_hand_worked_quantiles() -> None:
    # 4 values 1, 2, 4, 8: level 1/3 is index 1, exactly 2; level 0.5 is index 1.5, taken from
    # the upper end as 4 - 0.5 * 2 = 3; level 1 is the last value
    x = np.array([1.0, 2.0, 4.0, 8.0])
    got = sorted_quantiles(4, np.array([1 / 3, 0.5, 1.0]), x.__getitem__)
    assert got.tolist() == [2.0, 3.0, 8.0]


Counted = tuple[NDArray[np.float64], NDArray[np.float64], Callable[[Any], Any]]


def counts_as_before(trained: NDArray[np.float64], rest: NDArray[np.float64]) -> Counted:
    """The summary's cells counted the plain way: the launched lengths themselves sorted or
    counted, numpy's own quantiles as the bins' edges, and the trained lengths sorted."""
    launched = np.concatenate([trained, rest])
    trained_sorted = np.sort(trained)
    if np.all(launched == np.round(launched)):
        top = int(launched.max()) + 1
        if top <= 4 * launched.size + 1024:
            p = np.bincount(launched.astype(np.int64), minlength=top)
            q = np.bincount(trained.astype(np.int64), minlength=top)
        else:
            values, p = np.unique(launched, return_counts=True)
            q = np.bincount(np.searchsorted(values, trained), minlength=values.size)
    else:
        sample = launched[:: max(1, launched.size // 200_000)]
        edges = np.quantile(sample, np.linspace(0.0, 1.0, 65)[1:-1])
        p = np.bincount(np.searchsorted(edges, launched), minlength=64)
        q = np.bincount(np.searchsorted(edges, trained), minlength=64)
    return p.astype(np.float64), q.astype(np.float64), trained_sorted.__getitem__


def counts_without_the_rest(trained: NDArray[np.float64], rest: NDArray[np.float64]) -> Counted:
    """The wrong variant: the launched law counted from the trained lengths alone."""
    return _length_counts(trained, rest[:0], trained.copy())


_LENGTH_KIND = st.sampled_from(["continuous", "whole", "sparse"])


def length_counts_match(impl: Callable[[NDArray[np.float64], NDArray[np.float64]], Counted]) -> Any:
    @given(_LENGTH_KIND, st.integers(1, 300), st.integers(0, 60), st.integers(0, 2**32 - 1))
    def prop(kind: str, n_trained: int, n_rest: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        x = rng.lognormal(3.0, 1.0, n_trained + n_rest)
        if kind == "whole":
            x = np.ceil(x)
        elif kind == "sparse":
            x = np.ceil(x) * 1e9
        trained, rest = x[:n_trained], x[n_trained:]
        p, q, nth = impl(trained.copy(), rest)
        p0, q0, nth0 = counts_as_before(trained, rest)
        k = np.arange(n_trained)
        assert np.array_equal(p, p0), (kind, p, p0)
        assert np.array_equal(q, q0), (kind, q, q0)
        assert np.array_equal(np.asarray(nth(k), dtype=np.float64), nth0(k)), kind

    return prop


def _counts_now(trained: NDArray[np.float64], rest: NDArray[np.float64]) -> Counted:
    return _length_counts(trained, rest, np.concatenate([trained, rest]))


def test_length_counts_are_the_plain_ones() -> None:
    run_property(length_counts_match(_counts_now))


def test_the_check_rejects_a_launched_law_without_the_rollouts_not_trained() -> None:
    rejects(length_counts_match(counts_without_the_rest))


def test_length_counts_on_a_subsampled_launched_law() -> None:
    # past 400,000 launched lengths the bins' edges come from every other one (or sparser)
    x = np.random.default_rng(11).lognormal(6.0, 1.0, 450_000)
    trained, rest = x[:449_000], x[449_000:]
    p, q, nth = _counts_now(trained.copy(), rest)
    p0, q0, nth0 = counts_as_before(trained, rest)
    assert np.array_equal(p, p0)
    assert np.array_equal(q, q0)
    k = np.arange(0, 449_000, 997)
    assert np.array_equal(nth(k), nth0(k))


def test_length_counts_by_hand() -> None:
    # trained 1, 3, 3 and not trained 2, 3: launched counts [0, 1, 1, 3], trained [0, 1, 0, 2]
    p, q, nth = _counts_now(np.array([3.0, 1.0, 3.0]), np.array([2.0, 3.0]))
    assert p.tolist() == [0.0, 1.0, 1.0, 3.0]
    assert q.tolist() == [0.0, 1.0, 0.0, 2.0]
    assert nth(np.arange(3)).tolist() == [1.0, 3.0, 3.0]
