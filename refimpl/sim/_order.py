"""Order statistics and bin counts of non-negative floats, read without sorting them.

A summary of a 10^6-rollout run needs a few order statistics of the trained lengths (three
percentiles) and their counts in 64 bins. Sorting a million float64 values took 50-70 ms on the
benchmark's machine, the largest single cost of a fresh ``refimpl simulate`` call after numpy's
import. Both answers can be read in a few linear passes instead, exactly:

- a non-negative float64's bit pattern, read as an int64, orders as the float does (IEEE 754), so
  its top bits (sign, exponent and :data:`MANTISSA_BITS` bits of mantissa) name a *cell*: every
  value of a lower cell is below every value of a higher one, and a binade splits into
  ``2**MANTISSA_BITS`` cells. Counting the cells is one ``bincount``;
- the ``k``-th smallest value lies in the cell where the cells' running count passes ``k``; only
  the values of those few cells are sorted;
- a cell whose lowest and highest possible values fall in one bin puts all its values there; only
  the values of the cells an edge cuts are placed one by one.

Every answer is the sorted array's, bit for bit (the tests compare them on arbitrary inputs). Where
the trick does not apply (a negative value, ``-0.0`` or NaN) :func:`float_cells` returns ``None``
and the caller sorts. The cells of all non-negative floats number fewer than 2^19 (2047 binades of
256), so the counts take at most 4 MiB, and far less for lengths that span a few binades.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["MANTISSA_BITS", "FloatCells", "float_cells"]

#: mantissa bits a cell keeps: 256 cells per binade (a cell spans 0.4 % of its values)
MANTISSA_BITS = 8
_SHIFT = 52 - MANTISSA_BITS
_INF_BITS = 0x7FF0000000000000


class FloatCells:
    """The cells of non-negative float64 values ``x``, infinity included (see the module's text).

    Made by :func:`float_cells`, which checks that the values qualify.
    """

    def __init__(self, x: NDArray[np.float64], low: int, high: int) -> None:
        self.x = x
        self.base = low >> _SHIFT
        self.cell = np.right_shift(x.view(np.int64), _SHIFT)
        self.cell -= self.base
        size = (high >> _SHIFT) - self.base + 1
        self.counts = np.bincount(self.cell, minlength=size)

    def _values_of(self, chosen: NDArray[np.bool_]) -> NDArray[np.float64]:
        """The values of the chosen cells, sorted (cells in order, each cell sorted)."""
        values: NDArray[np.float64] = np.sort(self.x[chosen[self.cell]])
        return values

    def nth(self, k: NDArray[np.intp]) -> NDArray[np.float64]:
        """``np.sort(x)[k]`` for indices ``0 <= k < x.size``."""
        k = np.asarray(k, dtype=np.intp)
        ends = np.cumsum(self.counts)
        at = np.searchsorted(ends, k, side="right")  # the cell holding each k-th value
        chosen = np.zeros(self.counts.size, dtype=bool)
        chosen[at] = True
        values = self._values_of(chosen)
        starts = np.cumsum(np.where(chosen, self.counts, 0)) - self.counts  # in ``values``
        result: NDArray[np.float64] = values[starts[at] + k - (ends[at] - self.counts[at])]
        return result

    def bin_counts(self, edges: NDArray[np.float64]) -> NDArray[np.intp]:
        """How many values fall in each bin ``(edges[i-1], edges[i]]`` (the first from -inf, the
        last to +inf): ``np.bincount(np.searchsorted(edges, x), minlength=edges.size + 1)``, for
        sorted ``edges``."""
        cells = np.arange(self.counts.size, dtype=np.int64) + self.base
        lowest = np.left_shift(cells, _SHIFT).view(np.float64)
        highest = (np.left_shift(cells + 1, _SHIFT) - 1).view(np.float64)
        with np.errstate(invalid="ignore"):  # the last binade's highest patterns are NaN
            low_bin = np.searchsorted(edges, lowest)
            cut = (low_bin != np.searchsorted(edges, highest)) & (self.counts > 0)
        whole = np.bincount(low_bin[~cut], weights=self.counts[~cut], minlength=edges.size + 1)
        counts = whole.astype(np.intp)
        if cut.any():
            parted = np.searchsorted(edges, self.x[cut[self.cell]])
            counts += np.bincount(parted, minlength=edges.size + 1)
        return counts


def float_cells(x: NDArray[np.float64]) -> FloatCells | None:
    """The cells of ``x`` (a 1-D float64 array), or ``None`` where the cells do not order it: a
    value below ``+0.0`` by its bits (a negative number or ``-0.0``), a NaN, or no value (and
    an array that is not a contiguous 1-D float64 one).

    Examples
    --------
    >>> x = np.array([3.0, 0.5, 2.0, 2.0, 100.0])
    >>> c = float_cells(x)
    >>> c.nth(np.array([0, 2, 4])).tolist()
    [0.5, 2.0, 100.0]
    >>> c.bin_counts(np.array([1.0, 2.0, 50.0])).tolist()
    [1, 2, 1, 1]
    >>> float_cells(np.array([1.0, -0.0])) is None
    True
    """
    if x.size == 0 or x.dtype != np.float64 or x.ndim != 1 or not x.flags.c_contiguous:
        return None
    bits = x.view(np.int64)
    low, high = int(bits.min()), int(bits.max())
    if low < 0 or high > _INF_BITS:
        return None
    return FloatCells(x, low, high)
