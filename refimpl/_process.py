"""Whether this process is the ``refimpl`` command itself, whose process-wide settings are its own.

The console command (:func:`refimpl.cli.console`) claims its process before it runs: it may then
set what a whole process shares (BLAS threads, pyarrow's memory pool, glibc's allocator). A
program that calls :func:`refimpl.cli.main` keeps its own settings. A leaf module: the standard
library only, so any layer can ask.
"""

from __future__ import annotations

__all__: list[str] = []

_OWN_PROCESS = False


def claim() -> None:
    """Mark this process as the ``refimpl`` command's (called by the console command only)."""
    global _OWN_PROCESS
    _OWN_PROCESS = True


def own_process() -> bool:
    """Whether this process is the ``refimpl`` command itself (see :func:`claim`)."""
    return _OWN_PROCESS
