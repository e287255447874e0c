"""The float cells of :mod:`refimpl.sim._order` answer exactly what a sort answers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from refimpl.sim._order import float_cells
from refimpl.sim._trace import _length_counts

#: non-negative float64 values, ties, zeros, subnormals and infinity included; a few
#: "anchor" values repeat so that cells hold several values and edges fall on values
_VALUES = st.one_of(
    st.floats(min_value=0.0, allow_nan=False, allow_infinity=True),
    st.sampled_from([0.0, 5e-324, 1.0, 1.0 + 2**-52, 1.5, 2.0, 700.0, 1e300, np.inf]),
    st.floats(min_value=1.0, max_value=1.03),  # one or two cells, many values each
)
_ARRAYS = arrays(np.float64, st.integers(1, 300), elements=_VALUES).map(
    lambda a: np.where(a == 0.0, 0.0, a)  # +0.0: -0.0 is refused (its own test)
)


@settings(max_examples=300, deadline=None)
@given(x=_ARRAYS, data=st.data())
def test_nth_is_the_sorted_arrays_value(x: np.ndarray, data: st.DataObject) -> None:
    k = np.array(data.draw(st.lists(st.integers(0, x.size - 1), min_size=1, max_size=8)))
    cells = float_cells(x)
    assert cells is not None
    got = cells.nth(k)
    np.testing.assert_array_equal(got.view(np.int64), np.sort(x)[k].view(np.int64))


@settings(max_examples=300, deadline=None)
@given(x=_ARRAYS, edges=st.lists(_VALUES, min_size=1, max_size=70))
def test_bin_counts_are_searchsorted_counts(x: np.ndarray, edges: list[float]) -> None:
    e = np.sort(np.array(edges, dtype=np.float64))
    cells = float_cells(x)
    assert cells is not None
    expected = np.bincount(np.searchsorted(e, x), minlength=e.size + 1)
    np.testing.assert_array_equal(cells.bin_counts(e), expected)


def test_values_the_cells_cannot_order_are_refused() -> None:
    for bad in ([1.0, -0.0], [1.0, -2.0], [1.0, np.nan], []):
        assert float_cells(np.array(bad, dtype=np.float64)) is None
    assert float_cells(np.arange(6.0)[::2]) is None  # not contiguous
    assert float_cells(np.arange(6.0).reshape(2, 3)) is None


def test_a_cell_an_edge_cuts_is_counted_value_by_value() -> None:
    """1.0 and 1.001 share a cell (256 cells per binade); an edge between them splits it."""
    x = np.array([1.0, 1.001, 1.001, 3.0])
    cells = float_cells(x)
    assert cells is not None
    assert cells.bin_counts(np.array([1.0005])).tolist() == [1, 3]
    assert cells.nth(np.array([0, 1, 3])).tolist() == [1.0, 1.001, 3.0]


def test_an_edge_one_step_below_a_cells_last_value_cuts_it() -> None:
    """The cell's range ends at its last float: an edge just below that value splits the cell
    (a range one float short would miss it)."""
    last = np.nextafter(2.0, 0.0)  # the last float of the cell [2 - 2^-8, 2)
    x = np.array([1.999, last])
    cells = float_cells(x)
    assert cells is not None
    assert cells.bin_counts(np.array([np.nextafter(last, 0.0)])).tolist() == [1, 1]


@pytest.mark.parametrize("first", [-0.0, 0.25])
def test_length_counts_sort_where_the_cells_do_not_apply(first: float) -> None:
    """A -0.0 length (the cells refuse it) takes the sort; both paths give the sorted answers."""
    rng = np.random.default_rng(3)
    trained = np.concatenate([[first], rng.lognormal(6.0, 1.0, 999)])
    rest = rng.lognormal(6.0, 1.0, 50)
    launched = np.concatenate([trained, rest])
    p, q, nth = _length_counts(trained.copy(), rest, launched)
    assert q.sum() == trained.size
    assert p.sum() == launched.size
    k = np.array([0, 1, 500, 998, 999])
    np.testing.assert_array_equal(nth(k), np.sort(trained)[k])
