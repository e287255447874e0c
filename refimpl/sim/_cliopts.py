"""Command-line plumbing shared by ``refimpl simulate`` and its agent options.

argparse stores an option's default when the option is not given, so "given" and "not given" look
the same. A default here is stored as an instance of a marker subclass (``_DefaultFloat(6.0)`` is a
``float`` equal to 6.0), which argparse keeps as it is; a value the user typed is converted by the
option's ``type`` into a plain ``float``/``int``/``str``. :func:`given` tells them apart, so an option
that the chosen mode does not read can be refused, while the documented defaults stay what ``--help``
says. Also what every simulate command shares around a run: :func:`numeric_guard` (float64
overflow raises instead of warning), :func:`print_result` (one JSON object, or aligned lines) and
:func:`since_start` (the process's age, for the start-up cost a run reports apart), and
:func:`check_trace_path` (``--trace`` refused before the run when it cannot be written) and
:func:`progress_bar` (tqdm, imported only when a bar is shown) and :func:`small_pages` (the
run's arrays without transparent huge pages).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import os
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import numpy as np

from refimpl.errors import InvalidArgument, InvalidArgumentType

__all__ = [
    "HelpFormatter",
    "check_trace_path",
    "default",
    "given",
    "numeric_guard",
    "print_result",
    "progress_bar",
    "since_start",
    "small_pages",
]


class _DefaultFloat(float):
    __slots__ = ()


class _DefaultInt(int):
    __slots__ = ()


class _DefaultStr(str):
    __slots__ = ()


_MARKERS = (_DefaultFloat, _DefaultInt, _DefaultStr)


def default(value: Any) -> Any:
    """``value`` marked as a default (equal to it, of the same base type).

    Examples
    --------
    >>> d = default(6.0)
    >>> d == 6.0, given(argparse.Namespace(mu=d), "mu"), given(argparse.Namespace(mu=6.0), "mu")
    (True, False, True)
    """
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float):
        return _DefaultFloat(value)
    if isinstance(value, int):
        return _DefaultInt(value)
    if isinstance(value, str):
        return _DefaultStr(value)
    raise InvalidArgumentType(f"default must be a float, int, str, bool or None; got {value!r}")


def given(args: argparse.Namespace, dest: str) -> bool:
    """Whether the user typed the option stored in ``args.<dest>`` (a flag: whether it is set)."""
    value = getattr(args, dest, None)
    return not (value is None or value is False or isinstance(value, _MARKERS))


def plain(value: Any) -> Any:
    """``value`` without its default marker (a plain ``float``/``int``/``str``)."""
    for marker, base in zip(_MARKERS, (float, int, str), strict=True):
        if isinstance(value, marker):
            return base(value)
    return value


class HelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default: ``(default: 6.0)``, ``(default: off)`` for a flag.

    An option whose default is ``None`` says in its own help what not giving it means.
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if not action.option_strings or "default" in text or action.default is argparse.SUPPRESS:
            return text
        if action.default is None:
            return text
        if action.default is False:
            return f"{text} (default: off)"
        return f"{text} (default: %(default)s)"


class _NoBar:
    """What a hidden progress bar does: count, and show nothing."""

    def __init__(self) -> None:
        self.n = 0

    def update(self, n: int = 1) -> None:
        self.n += n

    def close(self) -> None:
        pass


def progress_bar(*, total: int, show: bool, unit: str) -> Any:
    """A tqdm bar on stderr when ``show``, else a bar that only counts (``update``, ``n``,
    ``close``): tqdm's import (``importlib.metadata``, ``multiprocessing``) is paid only by a call
    whose bar is seen.

    Examples
    --------
    >>> bar = progress_bar(total=10, show=False, unit="step")
    >>> bar.update(3); bar.update(4); bar.n
    7
    """
    if not show:
        return _NoBar()
    from tqdm import tqdm  # an optional dependency, and a slow import: only for a bar on show

    return tqdm(total=total, file=sys.stderr, unit=unit, leave=False)


@contextlib.contextmanager
def small_pages() -> Iterator[None]:
    """Within the block, numpy does not ask the kernel for transparent huge pages for its large
    arrays; numpy's own setting is restored after it, and left alone when the user chose one
    (``NUMPY_MADVISE_HUGEPAGE`` set) or this numpy has no such setting.

    numpy asks for huge pages (``madvise``) for every array of 4 MiB or more. Where the kernel
    answers such a request by compacting memory on the spot (Linux's default, ``defrag=madvise``)
    and free memory is fragmented, the first touch of a fresh array stalls: on a shared 2-core
    machine under load, a fresh ``refimpl simulate`` call's run of 10^6 rollouts took 0.43 s
    (plain async) and 2.5 s (the engine mode under 8 GiB) with huge pages against 0.20 s and
    1.7 s with small pages, alternating, two calls each (5 December 2026). A call maps its trace's
    arrays once and walks them a few times, so small pages cost it little where memory is free.

    Examples
    --------
    >>> with small_pages():
    ...     x = np.ones(10)
    >>> float(x.sum())
    10.0
    """
    setter = None
    for name in ("numpy._core.multiarray", "numpy.core.multiarray"):  # numpy 2, numpy 1.26
        try:
            setter = getattr(importlib.import_module(name), "_set_madvise_hugepage", None)
        except ImportError:
            continue
        break
    if setter is None or "NUMPY_MADVISE_HUGEPAGE" in os.environ:
        yield
        return
    previous = setter(False)
    try:
        yield
    finally:
        setter(previous)


def since_start() -> float | None:
    """Seconds since this process started (Linux: from /proc; elsewhere ``None``)."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rpartition(")")[2].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))


def _jsonable(value: Any) -> Any:
    """Replace non-finite floats by ``None`` (strict JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def print_result(out: dict[str, Any], *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(_jsonable(out), allow_nan=False))
        return
    for key, value in out.items():
        if key == "staleness_hist":
            value = " ".join(str(v) for v in value)
        elif isinstance(value, dict):
            value = ", ".join(
                f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in value.items()
            )
        print(f"{key:22s} {value}")


def numeric_guard() -> Any:
    """Inside: numpy overflow or invalid arithmetic raises ``FloatingPointError``, warnings raise."""
    import contextlib
    import warnings

    stack = contextlib.ExitStack()
    stack.enter_context(np.errstate(over="raise", invalid="raise", divide="raise"))
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("error", RuntimeWarning)
    return stack


_FILE_SUFFIXES = (
    ".parquet",
    ".pq",
    ".csv",
    ".tsv",
    ".json",
    ".jsonl",
    ".arrow",
    ".feather",
    ".txt",
)


def check_trace_path(path: str, *, directory: bool) -> None:
    """Fail before the run if ``--trace`` cannot be written (a ``ValueError`` naming the option).

    ``directory``: the agent simulator writes a directory of Parquet files (created with its
    parents); the plain simulator writes one Parquet file into an existing directory.
    """
    what = "a directory it can create or write" if directory else "a file in a writable directory"
    fix = (
        "Pass a path you can write, e.g. --trace ./trace" + ("" if directory else ".parquet") + "."
    )
    if not path.strip():
        raise InvalidArgument(f"--trace must name {what}; got an empty --trace={path!r}. {fix}")
    suffix = os.path.splitext(path.rstrip(os.sep))[1].lower()
    target = os.path.abspath(path)
    if directory:
        if os.path.exists(target) and not os.path.isdir(target):
            raise InvalidArgument(
                f"--trace must name {what} (agent runs write one Parquet file per table); got "
                f"--trace={path!r}, an existing file. {fix}"
            )
        if not os.path.isdir(target) and suffix in _FILE_SUFFIXES:
            raise InvalidArgument(
                f"--trace must name a directory for agent runs (they write rollouts.parquet, "
                f"calls.parquet, attempts.parquet and shards.parquet into it); got --trace={path!r}, "
                f"a file name ending in {suffix}. Pass a directory name without a suffix, e.g. "
                f"--trace {os.path.splitext(path)[0] or 'trace'}."
            )
        probe = target
        while not os.path.exists(probe):
            probe = os.path.dirname(probe)
    else:
        if os.path.isdir(target):
            raise InvalidArgument(
                f"--trace must name {what}; got --trace={path!r}, an existing directory. "
                f"Name the file, e.g. --trace {os.path.join(path, 'trace.parquet')}."
            )
        if suffix != ".parquet":
            raise InvalidArgument(
                f"--trace must name a .parquet file (the trace is written as Parquet only: its "
                f"per-rollout segment columns are lists, which CSV and JSON lines cannot hold); got "
                f"--trace={path!r}"
                + (f", ending in {suffix}" if suffix else ", without the .parquet suffix")
                + f". Pass e.g. --trace {os.path.splitext(path)[0] or 'trace'}.parquet, and convert "
                "with pyarrow or pandas if you need another format."
            )
        probe = os.path.dirname(target)
        if not os.path.isdir(probe):
            raise InvalidArgument(
                f"--trace must name {what}; got --trace={path!r}, whose directory {probe!r} does "
                f"not exist. Create it first, or {fix[0].lower()}{fix[1:]}"
            )
    if not os.path.isdir(probe):
        raise InvalidArgument(
            f"--trace must name {what}; got --trace={path!r}, but {probe!r} is not a directory. "
            f"{fix}"
        )
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as err:
        raise InvalidArgument(
            f"--trace must name {what}; got --trace={path!r}, but no file can be created in "
            f"{probe!r} ({err.strerror or err}). {fix}"
        ) from None
