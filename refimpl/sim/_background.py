"""A computation on a thread of its own, for work that releases the GIL (a numpy sort, a page
mapping, a compiled kernel called through ``ctypes``): on an idle machine it runs on another core
while the caller goes on; on a busy one it costs a thread's start. The simulator maps a run's
memory so while it loads its kernels (:class:`refimpl.sim._memory.MapAhead`), maps a kernel's
columns while the kernel fills them (:mod:`refimpl.sim._pages`), and the agent engine sorts its
lengths while its kernel runs and its summary while the rest of the summary is computed."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

__all__ = ["in_background"]

_T = TypeVar("_T")


def in_background(
    f: Callable[..., _T], *args: Any, name: str = "refimpl-background"
) -> Callable[[], _T]:
    """``f(*args)`` started on a thread of its own (named ``name``), under the caller's numpy
    error settings (they are per thread); the function returned waits for it and returns its
    value, or raises what it raised.

    Examples
    --------
    >>> total = in_background(sum, [1, 2, 3])
    >>> total()
    6
    """
    errors = np.geterr()
    done: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            with np.errstate(**errors):
                done.append((True, f(*args)))
        except BaseException as err:  # handed to the caller, who raises it
            done.append((False, err))

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()

    def result() -> _T:
        thread.join()
        ok, value = done[0]
        if not ok:
            raise value
        out: _T = value
        return out

    return result
