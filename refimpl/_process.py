"""Whether this process is the ``refimpl`` command itself, whose process-wide settings are its own.

The console command (:func:`refimpl.cli.console`) claims its process before it runs: it may then
set what a whole process shares (BLAS threads, pyarrow's memory pool, glibc's allocator). A
program that calls :func:`refimpl.cli.main` keeps its own settings. Here too is the handle on
glibc's allocator that both ``refimpl simulate`` and ``refimpl check`` tune (:func:`glibc`). A leaf
module: the standard library only, so any layer can ask.
"""

from __future__ import annotations

import sys
from typing import Any

__all__: list[str] = []

M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_MMAP_THRESHOLD = -3
#: glibc's upper bound on M_MMAP_THRESHOLD (64-bit): larger blocks are always mapped apart.
HEAP_BLOCK_MAX = 32 << 20

_OWN_PROCESS = False


def claim() -> None:
    """Mark this process as the ``refimpl`` command's (called by the console command only)."""
    global _OWN_PROCESS
    _OWN_PROCESS = True


def own_process() -> bool:
    """Whether this process is the ``refimpl`` command itself (see :func:`claim`)."""
    return _OWN_PROCESS


def glibc() -> Any:
    """glibc's C library, or ``None`` elsewhere (another C library, another system)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - glibc's, and not musl's
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except (OSError, AttributeError):
        return None
