"""A compiled kernel's columns mapped on another thread (refimpl.sim._pages).

Mapping must never change what a column holds (the kernel may have written it already), must stay
inside each column's whole pages, in steps that go front to back across the columns, and must map
the pages (every whole page of the column is resident after, by ``mincore``). Rejected wrong
variants: a request that discards the pages' contents (``MADV_DONTNEED``, which reads back
zeros), and ranges rounded out to the column's partial pages (they hold other objects' bytes).
"""

from __future__ import annotations

import ctypes
import itertools
import os
import sys
from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects
from hypothesis import given
from hypothesis import strategies as hst
from numpy.typing import NDArray

from refimpl.sim import _pages
from refimpl.sim._pages import map_in_background, page_ranges

_LINUX = sys.platform.startswith("linux")
_PAGE = os.sysconf("SC_PAGE_SIZE") if _LINUX else 4096


def _resident_pages(x: NDArray[Any]) -> tuple[int, int]:
    """``(resident, whole)``: how many of the whole pages inside ``x`` are resident (``mincore``),
    and how many there are. Counted on ``x``'s own pages, not the process's resident size, which
    the rest of a long-lived test process moves (a garbage collection that frees an earlier
    test's arrays) while a page is mapped."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    start = -(-x.ctypes.data // _PAGE) * _PAGE
    whole = (x.ctypes.data + x.nbytes) // _PAGE - start // _PAGE
    vec = (ctypes.c_ubyte * whole)()
    if libc.mincore(start, whole * _PAGE, vec) != 0:
        raise OSError(ctypes.get_errno(), "mincore failed")
    return sum(b & 1 for b in vec), whole


def _check_mapping_keeps_the_values() -> None:
    """A column written in part (as the kernel leaves it mid-run), mapped: every value is still
    there, and every whole page of the column is now resident."""
    x = np.empty(1 << 23)  # 64 MiB: beyond malloc's heap blocks, mapped apart, not touched yet
    x[: 1 << 21] = np.arange(1 << 21, dtype=np.float64)
    map_in_background([x])()
    assert np.array_equal(x[: 1 << 21], np.arange(1 << 21, dtype=np.float64))
    resident, whole = _resident_pages(x)
    assert resident == whole, (resident, whole)


@pytest.mark.skipif(not _LINUX, reason="madvise(MADV_POPULATE_WRITE) is Linux's")
def test_mapping_keeps_the_values_and_maps_the_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    _check_mapping_keeps_the_values()
    monkeypatch.setattr(_pages, "_MADV_POPULATE_WRITE", 4)  # MADV_DONTNEED: zeros
    rejects(_check_mapping_keeps_the_values)


def _check_ranges(ranges: Any) -> Any:
    """The property: each step's ranges lie inside whole pages of their column, a column's
    ranges follow each other front to back without gaps or overlaps across the steps, and small
    or strided columns get none."""

    @given(
        sizes=hst.lists(hst.integers(0, 3 << 20), min_size=1, max_size=4),
        offsets=hst.lists(hst.integers(0, 511), min_size=4, max_size=4),
    )
    def prop(sizes: list[int], offsets: list[int]) -> None:
        buffers = [np.empty(n + 4096, dtype=np.uint8) for n in sizes]
        columns: list[NDArray[Any]] = [
            b[o : o + n] for b, o, n in zip(buffers, offsets[: len(sizes)], sizes, strict=True)
        ]
        columns.append(np.empty(1 << 18)[::2])  # strided: left alone
        steps = ranges(columns, _PAGE)
        assert len(steps) == _pages._STEPS
        for x in columns:
            lo, hi = x.ctypes.data, x.ctypes.data + x.nbytes
            mine = [r for step in steps for r in step if lo <= r[0] < hi]
            if x.nbytes < _pages._SMALLEST or not x.flags.c_contiguous:
                assert mine == []
                continue
            first = -(-lo // _PAGE) * _PAGE
            assert mine[0][0] == first
            for (a, n), (b, _) in itertools.pairwise(mine):
                assert a + n == b
            end = mine[-1][0] + mine[-1][1]
            assert end == hi // _PAGE * _PAGE
            assert all(a % _PAGE == 0 and n % _PAGE == 0 and n > 0 for a, n in mine)

    return prop


def _ranges_rounded_out(columns: Any, page: int) -> Any:
    """Wrong: each column's first range starts at the page holding its first byte."""
    steps = page_ranges(columns, page)
    for step in steps[:1]:
        step[:] = [(a - page if a % page == 0 else a, n + page) for a, n in step]
    return steps


def test_the_ranges_are_whole_pages_inside_each_column_front_to_back() -> None:
    _check_ranges(page_ranges)()
    rejects(_check_ranges(_ranges_rounded_out))


def test_without_madvise_nothing_is_started(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_pages, "_madvise", lambda: None)
    x = np.zeros(1 << 18)
    map_in_background([x])()
    assert not x.any()
