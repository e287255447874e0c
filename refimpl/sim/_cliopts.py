"""Command-line plumbing shared by ``refimpl simulate`` and its agent options.

argparse stores an option's default when the option is not given, so "given" and "not given" look
the same. A default here is stored as an instance of a marker subclass (``_DefaultFloat(6.0)`` is a
``float`` equal to 6.0), which argparse keeps as it is; a value the user typed is converted by the
option's ``type`` into a plain ``float``/``int``/``str``. :func:`given` tells them apart, so an option
that the chosen mode does not read can be refused, while the documented defaults stay what ``--help``
says. Also what every simulate command shares around a run: :func:`numeric_guard` (float64
overflow raises instead of warning), :func:`print_result` (one JSON object, or aligned lines) and
:func:`since_start` (the process's age, for the start-up cost a run reports apart).
"""

from __future__ import annotations

import argparse
import json
import math
import os
from typing import Any

import numpy as np

from refimpl.errors import InvalidArgumentType

__all__ = ["HelpFormatter", "default", "given", "numeric_guard", "print_result", "since_start"]


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
