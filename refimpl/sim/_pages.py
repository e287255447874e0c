"""A compiled kernel's columns, mapped by another thread while the kernel fills them.

A fresh process gets each page of a new array from the operating system when it first writes it:
at :math:`10^6` rollouts of two tool calls the agent kernel's columns are about 150 MB, some
38 000 page faults taken one by one by the kernel's own thread (the engine mode's loop takes its
own share). Linux (5.14 and later) maps a range of pages writable without changing what they hold
when asked with ``madvise(MADV_POPULATE_WRITE)``; this module asks it on another thread, front to
back across the columns in 16 steps, while the kernel fills them front to back, so that on an idle
machine the faults are taken on the other core. The kernel's values are never touched (the pages
are mapped, not written), so a trace is the same whichever thread maps a page first. Where the
kernel runs ahead of time compiled (``ctypes`` releases the GIL) the two threads run at once; on
numba's JIT, which keeps the GIL, the mapping runs between the kernel's pauses. Elsewhere than
Linux, or where the kernel refuses the request (before 5.14), nothing is mapped ahead and the
kernel maps its pages as it writes them.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

from numpy.typing import NDArray

from refimpl.sim._background import in_background

__all__ = ["map_in_background"]

_MADV_POPULATE_WRITE = 23  # <linux/mman.h>, Linux 5.14
_STEPS = 16
_SMALLEST = 1 << 20  # columns below this are left to the kernel (a few faults)


@cache
def _madvise() -> Any:
    """The C library's ``madvise``, or ``None`` where there is none to call (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None).madvise
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return fn


def page_ranges(columns: Sequence[NDArray[Any]], page: int) -> list[list[tuple[int, int]]]:
    """For each of :data:`_STEPS` steps, the (address, length) of that step's share of the whole
    pages inside each column of at least 1 MiB (a column's first and last partial pages are left
    to the kernel).

    Examples
    --------
    >>> import numpy as np
    >>> x = np.empty(1 << 18)  # 2 MiB
    >>> steps = page_ranges([x, np.empty(3)], 4096)
    >>> len(steps), all(len(s) == 1 for s in steps)
    (16, True)
    >>> sum(n for s in steps for _, n in s) <= x.nbytes
    True
    """
    spans = []
    for x in columns:
        if x.nbytes >= _SMALLEST and x.flags.c_contiguous:
            start = -(-x.ctypes.data // page) * page
            end = (x.ctypes.data + x.nbytes) // page * page
            spans.append((start, (end - start) // page))
    steps: list[list[tuple[int, int]]] = [[] for _ in range(_STEPS)]
    for start, pages in spans:
        for k in range(_STEPS):
            lo, hi = pages * k // _STEPS, pages * (k + 1) // _STEPS
            if hi > lo:
                steps[k].append((start + lo * page, (hi - lo) * page))
    return steps


def map_in_background(columns: Sequence[NDArray[Any]]) -> Callable[[], None]:
    """Start mapping the pages of ``columns`` on another thread; the function returned waits for
    it (it holds the columns until then). Nothing is started where ``madvise`` is missing or no
    column is large enough."""
    madvise = _madvise()
    if madvise is None:
        return lambda: None
    steps = page_ranges(columns, os.sysconf("SC_PAGE_SIZE"))
    if not any(steps):  # small columns: nothing worth a thread
        return lambda: None
    keep = list(columns)  # alive while their pages are mapped

    def run() -> None:
        for step in steps:
            for address, length in step:
                if madvise(address, length, _MADV_POPULATE_WRITE) != 0:
                    return  # refused (an older kernel): the kernel maps its pages itself
        del keep[:]

    return in_background(run, name="refimpl-pages")
