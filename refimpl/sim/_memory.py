"""The memory of a ``refimpl simulate`` call: freed memory kept for reuse, and the run's pages
mapped before the run.

A process that has run a simulation before reuses the memory it freed; a fresh process gets every
page of its arrays from the operating system, which maps it on first touch (a page fault per
4 KiB page). In a fresh call at :math:`10^6` rollouts those faults were about 0.025 s of the run's
0.065 s of CPU time and 0.015 s of the summary's 0.037 s (5 December 2026), and glibc's ``malloc``
returned to the system, and faulted in again, memory that the next array could have used. So the
command keeps what it frees (:func:`kept_memory`), and touches the pages its run will use before
the run starts (:func:`map_ahead`), a cost it reports apart (``memory_s``) as it reports loading
the kernels: the run's rate is then the rate of a process whose memory is mapped, as a warmed
process's is, and the whole call pays the first touch once, where it is seen. The command touches
those pages in a thread (:class:`MapAhead`) while it loads the kernels and draws the lengths.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import numpy as np

from refimpl._process import HEAP_BLOCK_MAX as _HEAP_BLOCK_MAX
from refimpl._process import M_MMAP_THRESHOLD as _M_MMAP_THRESHOLD
from refimpl._process import M_TRIM_THRESHOLD as _M_TRIM_THRESHOLD
from refimpl._process import glibc as _glibc
from refimpl.sim._background import in_background

__all__ = [
    "KERNEL_BYTES_PER_ROW",
    "TRACE_BYTES_PER_ROW",
    "MapAhead",
    "kept_memory",
    "map_ahead",
    "run_bytes",
]

_KEEP = 1 << 30  # freed memory kept at the top of the heap, up to 1 GiB
_BLOCK = 8 << 20  # map_ahead's blocks (below _HEAP_BLOCK_MAX: they come from the heap)
_PAGE = 4096

#: Bytes a row of a :class:`~refimpl.sim.SimTrace` takes: slot, index (int32), launch and finish
#: times, length (float64), launch and min version, step, staleness (int32), status (int8), rank
#: (int64), wasted and recomputed tokens (float64), and one version segment (offset int64,
#: start float64, version int32).
TRACE_BYTES_PER_ROW = 4 + 4 + 8 + 8 + 8 + 4 + 4 + 4 + 4 + 1 + 8 + 8 + 8 + 8 + 8 + 4

#: Bytes a row of the event kernel's own columns takes (:mod:`refimpl.sim._compiled_run`): eight
#: int32 fields, launch and finish times, wasted and recomputed tokens (float64), status (int8).
#: Mapped ahead too, the run no longer faults them in: in fresh calls at 10^6 rollouts, three
#: each alternating with the code before, partial restart's run took 0.213-0.217 s instead of
#: 0.235-0.242 and partial recompute's 0.188-0.195 instead of 0.222-0.227, while the whole call
#: took about as long (0.46-0.49 s either way; 6 December 2026).
KERNEL_BYTES_PER_ROW = 8 * 4 + 2 * 8 + 2 * 8 + 1


@contextlib.contextmanager
def kept_memory() -> Iterator[bool]:
    """Within the block, memory the process frees stays mapped and is reused: glibc's ``malloc``
    serves blocks of up to 32 MiB from its heap and keeps up to 1 GiB freed at its top. Yields
    whether it applies (glibc only; elsewhere nothing changes).

    After it the heap is trimmed, and the thresholds are those glibc's own adjustment reaches in
    a process that has freed a 32 MiB array (blocks up to 32 MiB from the heap, 64 MiB kept at its
    top): once set by ``mallopt`` they no longer adjust, and glibc's starting values (128 KiB
    both) would map and fault in every array above 128 KiB afresh for the rest of a process that
    called the command in-process (a test suite, a notebook).

    Examples
    --------
    >>> with kept_memory() as kept:
    ...     x = np.ones(10)
    >>> float(x.sum()), isinstance(kept, bool)
    (10.0, True)
    """
    libc = _glibc()
    if libc is None:
        yield False
        return
    kept = bool(libc.mallopt(_M_MMAP_THRESHOLD, _HEAP_BLOCK_MAX)) and bool(
        libc.mallopt(_M_TRIM_THRESHOLD, _KEEP)
    )
    try:
        yield kept
    finally:
        libc.mallopt(_M_TRIM_THRESHOLD, 2 * _HEAP_BLOCK_MAX)
        libc.malloc_trim(0)


def run_bytes(rows: int, *, kernel: bool = False) -> int:
    """The memory :func:`map_ahead` maps for a run of ``rows`` trace rows: the trace's columns
    (:data:`TRACE_BYTES_PER_ROW` a row) and, with ``kernel``, the event kernel's own
    (:data:`KERNEL_BYTES_PER_ROW`); or 0 when a float64 column would be larger than the heap
    serves (32 MiB: more than 4,194,304 rows), since such a column is mapped apart anyway.

    Examples
    --------
    >>> run_bytes(1000) == 1000 * TRACE_BYTES_PER_ROW
    True
    >>> run_bytes(1000, kernel=True) == 1000 * (TRACE_BYTES_PER_ROW + KERNEL_BYTES_PER_ROW)
    True
    >>> run_bytes(5_000_000)
    0
    """
    per_row = TRACE_BYTES_PER_ROW + (KERNEL_BYTES_PER_ROW if kernel else 0)
    return 0 if 8 * rows > _HEAP_BLOCK_MAX else rows * per_row


def map_ahead(nbytes: int) -> float:
    """Touch about ``nbytes`` of fresh memory, a byte per 4 KiB page, in blocks of 8 MiB, and free
    it; the seconds it took. Inside :func:`kept_memory` the pages stay mapped for the arrays the
    process allocates next. :class:`MapAhead` does the same beside other work.

    Examples
    --------
    >>> map_ahead(1 << 20) >= 0.0
    True
    """
    start = time.perf_counter()
    MapAhead(nbytes, beside=False).join()
    return time.perf_counter() - start


class MapAhead:
    """:func:`map_ahead`, its pages touched by a thread while the caller goes on (drawing the
    run's lengths, loading its kernels): on two cores the call's wall time no longer pays both.

    The blocks are allocated by the caller's thread, untouched (which maps nothing), so that they
    come from the malloc arena the caller's later arrays come from (glibc gives other threads
    arenas of their own); the thread only writes a byte a page. :meth:`join` waits, frees the blocks
    (kept for reuse inside :func:`kept_memory`) and returns the seconds the touching took.

    Examples
    --------
    >>> ahead = MapAhead(1 << 20)
    >>> ahead.join() >= 0.0
    True
    """

    def __init__(self, nbytes: int, *, beside: bool = True) -> None:
        self._blocks = [np.empty(_BLOCK, dtype=np.uint8) for _ in range(-(-nbytes // _BLOCK))]
        self._touched = in_background(self._touch, name="refimpl-map-ahead") if beside else None
        self.seconds = 0.0 if beside else self._touch()

    def _touch(self) -> float:
        start = time.perf_counter()
        for block in self._blocks:
            block[::_PAGE] = 0  # one write a page maps it
        return time.perf_counter() - start

    def join(self) -> float:
        """Wait for the pages, free the blocks; the seconds the touching took."""
        if self._touched is not None:
            self.seconds = self._touched()
            self._touched = None
        self._blocks.clear()
        return self.seconds
