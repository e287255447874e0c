"""The agent summary's Kolmogorov distance of the trained lengths (refimpl.sim.agent._results).

``_length_ks`` takes the trained lengths and the few launched ones that were not trained, and
sorts only the trained ones; it must give the very float that the computation it replaced gave
(both samples sorted, the sup over the launched values), and the plain two-sample definition
``_kolmogorov_distance``. Checked on drawn samples with many ties (small integer lengths), ties
between the trained and the other lengths and among the other lengths, no other lengths at all,
and chunks that cut runs of tied values. Two wrong variants are rejected: the other lengths below
one of theirs counted by position (wrong where two of them tie), and their values left out of the
sup. The trained lengths' mean and distance are computed on another thread while the summary
goes on: its value, exception and numpy error settings must be the caller's (rejected: a thread
under numpy's default settings). The latency percentiles come from one partition, and must be
numpy's ``percentile`` bit for bit (rejected: the order statistics read unpartitioned).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects
from hypothesis import given
from hypothesis import strategies as hst
from numpy.typing import NDArray

from refimpl.sim import _background
from refimpl.sim._trace import sorted_percentiles
from refimpl.sim.agent import _results
from refimpl.sim.agent._config import _TRAINED
from refimpl.sim.agent._results import _kolmogorov_distance, _largest_gap


def _subset_ks_before(x: NDArray[np.float64], y: NDArray[np.float64]) -> float:
    """The summary's distance as computed before ``_length_ks`` (``y`` all the launched lengths,
    ``x`` the trained ones among them): both sorted, the sup over the distinct values of ``y``."""
    xs, ys = np.sort(x), np.sort(y)
    best, n = 0.0, ys.size
    for lo in range(0, n, _results._CHUNK):
        hi = min(lo + _results._CHUNK, n)
        last = np.ones(hi - lo, dtype=bool)
        np.not_equal(ys[lo : hi - 1], ys[lo + 1 : hi], out=last[:-1])
        if hi < n:
            last[-1] = ys[hi - 1] != ys[hi]
        at = np.flatnonzero(last)
        fx = np.searchsorted(xs, ys[lo:hi][at], side="right") / xs.size
        fy = (at + (lo + 1)) / n
        if at.size:
            best = max(best, float(np.max(np.abs(fx - fy))))
    return best


@hst.composite
def _samples(draw: Any) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """Launched lengths and a mask of the trained ones (at least one): integers from a small
    range (ties everywhere), halves, or continuous values; the untrained ones from none to all
    but one."""
    n = draw(hst.integers(1, 300))
    seed = draw(hst.integers(0, 2**32 - 1))
    kind = draw(hst.sampled_from(["few", "halves", "continuous"]))
    rng = np.random.default_rng(seed)
    if kind == "few":
        lengths = rng.integers(1, draw(hst.integers(1, 6)) + 1, size=n).astype(np.float64)
    elif kind == "halves":
        lengths = rng.integers(1, 40, size=n) / 2.0
    else:
        lengths = rng.lognormal(6.0, 1.0, size=n)
    untrained = rng.random(n) < draw(hst.sampled_from([0.0, 0.05, 0.3, 0.9, 1.0]))
    untrained[rng.integers(n)] = False  # at least one trained rollout
    return lengths, ~untrained


def _check_same_float(sample: tuple[NDArray[np.float64], NDArray[np.bool_]]) -> None:
    lengths, trained = sample
    before = _subset_ks_before(lengths[trained], lengths)
    assert _kolmogorov_distance(lengths[trained], lengths) == before
    assert _results._length_ks(lengths[trained], lengths[~trained]) == before


@pytest.mark.parametrize("chunk", [3, 7, 1 << 18])
def test_the_length_ks_is_the_float_of_sorting_both_samples(
    chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_results, "_CHUNK", chunk)
    given(_samples())(_check_same_float)()


def test_the_length_ks_sorts_the_trained_lengths_in_place() -> None:
    trained = np.array([3.0, 1.0, 2.0, 1.0])
    d = _results._length_ks(trained, np.array([2.0, 5.0, 2.0]))
    assert trained.tolist() == [1.0, 1.0, 2.0, 3.0]
    assert d == _subset_ks_before(trained, np.array([3.0, 1.0, 2.0, 1.0, 2.0, 5.0, 2.0]))


def _gap_counting_by_position(
    trained: NDArray[np.float64], rs: NDArray[np.float64], n: int
) -> float:
    """Wrong: the other lengths at or below their ``i``-th smallest counted as ``i + 1``, which
    misses the ones tied with it further on."""
    at = np.searchsorted(trained, rs, side="right")
    return _largest_gap(at, at + np.arange(1, rs.size + 1), trained.size, n)


def _no_gap(trained: NDArray[np.float64], rs: NDArray[np.float64], n: int) -> float:
    """Wrong: the other lengths' own values left out of the sup (the trained values only)."""
    return 0.0


@pytest.mark.parametrize("wrong", [_gap_counting_by_position, _no_gap])
def test_the_comparison_rejects_a_miscounted_or_missing_point(
    wrong: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_results, "_gap_at_rest", wrong)
    rejects(given(_samples())(_check_same_float))


# -- the trained lengths' statistics, computed on another thread ---------------------------------


def _divide_by_zero() -> float:
    return float(np.float64(1.0) / np.float64(0.0))


def _check_background_runs_as_the_caller(in_background: Any) -> None:
    """The value comes back, an exception is raised in the caller, and the caller's numpy error
    settings hold in the thread (numpy keeps them per thread)."""
    assert in_background(sum, [1, 2, 3])() == 6
    with pytest.raises(ZeroDivisionError):
        in_background(divmod, 1, 0)()
    with np.errstate(divide="raise"):
        try:
            in_background(_divide_by_zero)()
        except FloatingPointError:
            return
    raise AssertionError("the thread did not divide under the caller's divide='raise'")


def _under_numpys_defaults(f: Any, *args: Any) -> Any:
    with np.errstate(divide="ignore"):
        return f(*args)


def _in_background_under_numpys_defaults(f: Any, *args: Any) -> Any:
    """Wrong: the thread divides under numpy's own settings, not the caller's (quietly here)."""
    return _background.in_background(_under_numpys_defaults, f, *args)


def test_the_background_computation_runs_as_the_caller_would() -> None:
    _check_background_runs_as_the_caller(_background.in_background)
    rejects(_check_background_runs_as_the_caller, _in_background_under_numpys_defaults)


def test_the_summary_gets_the_trained_lengths_mean_and_distance_from_the_thread() -> None:
    rng = np.random.default_rng(2)
    length = np.round(rng.lognormal(2.0, 1.0, 500))
    status = np.where(rng.random(500) < 0.9, _TRAINED, _TRAINED + 1).astype(np.int8)
    mean, ks = _results._trained_length_stats(length, status)
    trained = length[status == _TRAINED]
    assert mean == float(trained.mean())
    assert ks == _subset_ks_before(trained, length)


# -- the latency percentiles, from one partition -------------------------------------------------


def _check_percentiles(percentiles: Any) -> Any:
    @given(
        _samples(),
        hst.sampled_from([(50.0, 99.0), (0.0, 100.0), (1.0, 50.0, 75.0)]),
        hst.sampled_from([0.0, 1.0, 20.0]),
    )
    def prop(
        sample: tuple[NDArray[np.float64], NDArray[np.bool_]], q: tuple[float, ...], shift: float
    ) -> None:
        # shifted down: values below zero, which the cells do not order (the partition's path)
        x = sample[0] - shift if shift else sample[0]
        want = tuple(float(v) for v in np.percentile(x.copy(), list(q), overwrite_input=True))
        assert percentiles(x.copy(), q) == want

    return prop


def _percentiles_unpartitioned(x: NDArray[np.float64], q: tuple[float, ...]) -> tuple[float, ...]:
    """Wrong: the order statistics read from the values as they lie."""
    return tuple(float(v) for v in sorted_percentiles(x.size, q, x.__getitem__))


def test_the_latency_percentiles_are_numpys_bit_for_bit() -> None:
    _check_percentiles(_results._percentiles)()
    rejects(_check_percentiles(_percentiles_unpartitioned))
