"""Running one cell: every way out of a kind's code is that cell's own status.

A kind is user code (or a built-in that calls user-supplied laws), and user code leaves by many
doors: an exception, ``sys.exit``, a ``KeyboardInterrupt`` or another ``BaseException`` it raises
itself, megabytes of printed output, a parameter changed in place. :func:`execute_cell` turns
each into the cell's own ``status="error"`` record with a one-line reproduction, so that a sweep
never ends early with status 0 and partial results, and one cell never corrupts the next one's
inputs. A Ctrl-C (the sweep's :class:`SweepInterrupt`) still stops the sweep.
"""

from __future__ import annotations

import contextlib
import copy
import io
import itertools
import signal
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from typing import Any

import numpy as np

from refimpl._io import BinaryView, DescriptorOutput, captured_descriptors, user_text
from refimpl.errors import InvalidArgument, InvalidArgumentType
from refimpl.sweep.kinds import resolve_kind

__all__ = ["MAX_METRICS", "OUTPUT_LIMIT", "SweepInterrupt", "execute_cell", "resolve_kind_guarded"]

#: The most a cell may print (standard output and error together, in characters; what it writes
#: straight to file descriptors 1 and 2, from compiled code or a child process, in bytes): beyond,
#: the cell fails (a cell returns its metrics; megabytes of output would flood the terminal or a CI log).
OUTPUT_LIMIT = 1 << 20

#: The most metrics a cell may return when the grid keeps all of them (each is a column).
MAX_METRICS = 10_000

#: The longest metric name (a column name) a cell may return.
_NAME_CHARS = 200

#: The longest reproduction a failure message quotes (parameters beyond are shortened).
_REPRO_CHARS = 1000


class SweepInterrupt(KeyboardInterrupt):
    """Ctrl-C, as the sweep's own SIGINT handler raises it: it stops the sweep.

    A plain ``KeyboardInterrupt`` raised by a cell's code while that handler is in place (or in a
    pool process, which ignores SIGINT) is the cell's own failure, recorded like any other.
    """


def _describe(exc: BaseException) -> str:
    """``Type: message (at file:line in function)`` for the innermost frame."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = ""
    if frames:
        last = frames[-1]
        where = f" (at {last.filename.rsplit('/', 1)[-1]}:{last.lineno} in {last.name})"
    return f"{type(exc).__name__}: {user_text(exc)}{where}"


def _select(out: Any, wanted: tuple[str, ...] | None, kind: str) -> dict[str, float]:
    if not isinstance(out, Mapping):
        raise InvalidArgumentType(
            f"cell kind {kind!r} returned {type(out).__name__}, not a dict of metrics; "
            "return {name: float}."
        )
    if wanted is None and len(out) > MAX_METRICS:
        raise InvalidArgument(
            f"cell kind {kind!r} returned {len(out)} metrics, more than {MAX_METRICS} (each is a "
            "column of the results table); return fewer, or list the ones to keep in "
            "sweep.metrics."
        )
    names = list(out) if wanted is None else list(wanted)
    missing = [m for m in names if m not in out]
    if missing:
        returned = ", ".join(str(m)[:_NAME_CHARS] for m in itertools.islice(out, 10))
        more = f" and {len(out) - 10} more" if len(out) > 10 else ""
        raise InvalidArgument(
            f"cell kind {kind!r} returned no metric {missing[0]!r}; it returns "
            f"{returned or 'nothing'}{more}. Fix sweep.metrics."
        )
    long = next((str(m) for m in names if len(str(m)) > _NAME_CHARS), None)
    if long is not None:
        raise InvalidArgument(
            f"cell kind {kind!r} returned a metric whose name has {len(long)} characters, more "
            f"than {_NAME_CHARS} (it names a column): {long[:60]!r}... Use a short name."
        )
    metrics: dict[str, float] = {}
    for m in names:
        v = out[m]
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise InvalidArgumentType(
                f"cell kind {kind!r} returned metric {m!r} = {v!r}, not a real number; "
                "metrics are floats."
            )
        metrics[str(m)] = float(v)
    return metrics


class _Capture(io.TextIOBase):
    """A stand-in for stdout or stderr during a cell: keeps up to the limit, counts the rest.

    Bytes written to its ``buffer`` are decoded and counted the same way; its ``fileno()`` is
    the descriptor it stands for, which :func:`~refimpl._io.captured_descriptors` captures.
    """

    def __init__(self, budget: list[int], fd: int) -> None:
        self._parts: list[str] = []
        self._budget = budget  # shared by stdout and stderr: [characters left]
        self._fd = fd
        self.total = 0
        self.buffer = BinaryView(self)

    encoding = "utf-8"

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self.total += len(text)
        keep = min(len(text), max(self._budget[0], 0))
        if keep:
            self._parts.append(text[:keep])
        self._budget[0] -= len(text)
        return len(text)

    def text(self) -> str:
        return "".join(self._parts)


def _reproduction(cell: Any) -> str:
    call = f"resolve_kind({cell.kind!r})({dict(cell.params)!r}, {cell.seed})"
    if len(call) > _REPRO_CHARS:
        call = call[: _REPRO_CHARS - 40] + "...  (parameters shortened: see the grid)"
    return f"Reproduce: from refimpl.sweep import resolve_kind; {call}"


def _left_by_another_door(exc: BaseException) -> str:
    """Why a ``BaseException`` that is not an ``Exception`` ended a cell, in a sentence."""
    if isinstance(exc, SystemExit):
        return (
            f"the cell called sys.exit({user_text(exc.code, quoted=True)}): a cell returns its "
            "metrics or raises, "
            "it does not end the process"
        )
    if isinstance(exc, KeyboardInterrupt):
        return (
            "the cell raised KeyboardInterrupt itself (Ctrl-C stops a sweep; a cell raises errors)"
        )
    return f"the cell raised {type(exc).__name__}, a BaseException that is not an Exception"


def _changed_key(before: Mapping[str, Any], after: Mapping[str, Any]) -> str | None:
    """The first parameter a cell changed in place (added, removed or modified), or None."""
    for key in sorted({*before, *after}, key=str):
        if key not in after or key not in before or before[key] != after[key]:
            return str(key)
    return None


def _run_kind(cell: Any) -> tuple[dict[str, float], str | None]:
    """``(metrics, error)`` of one cell: every way out of the kind's code is the cell's own."""
    budget = [OUTPUT_LIMIT]
    out, err = _Capture(budget, 1), _Capture(budget, 2)
    fds = DescriptorOutput()
    before = copy.deepcopy(dict(cell.params))
    given = copy.deepcopy(before)  # a cell cannot reach the grid's (or the next cell's) values

    def within(seen: DescriptorOutput) -> bool:  # the cell's output is passed on, or its failure
        return out.total + err.total + seen.total <= OUTPUT_LIMIT

    try:
        fn = resolve_kind(cell.kind)
        with (
            captured_descriptors(replay=within) as fds,
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            selected = _selection(fn(given, cell.seed), cell)  # may run its code: __float__
    except SweepInterrupt:
        raise
    except KeyboardInterrupt as exc:
        if _ctrl_c_reaches_cells():
            raise  # Python's own handler: a Ctrl-C cannot be told from the cell's own
        return {}, f"{_describe(exc)}: {_left_by_another_door(exc)}. {_reproduction(cell)}"
    except Exception as exc:
        return {}, _describe(exc)
    except BaseException as exc:
        return {}, f"{_describe(exc)}: {_left_by_another_door(exc)}. {_reproduction(cell)}"
    finally:
        _replay(out, err)
    changed = _changed_key(before, given)
    if changed is not None:
        return {}, (
            f"the cell changed its parameter {changed!r} in place; a cell must not modify its "
            f"inputs (copy them first). {_reproduction(cell)}"
        )
    printed = out.total + err.total + fds.total
    if printed > OUTPUT_LIMIT:
        first = (out.text() or err.text() or fds.head()).split("\n", 1)[0][:80]
        native = f", {fds.total} bytes of it to file descriptors 1 and 2" if fds.total else ""
        return {}, (
            f"the cell printed {printed} characters, more than the limit of {OUTPUT_LIMIT}"
            f"{native} (its first line: {first!r}); a cell returns metrics: print less, or log "
            f"to a file. {_reproduction(cell)}"
        )
    return selected


def _selection(result: Any, cell: Any) -> tuple[dict[str, float], str | None]:
    """``(metrics, error)`` of what a cell returned; reading it runs the cell's code too (a
    mapping's ``__getitem__``, a number's ``__float__``), so it runs where the cell ran: an
    exit or an interrupt there is the cell's own, an ordinary exception its error."""
    try:
        return _select(result, cell.metrics, cell.kind), None
    except Exception as exc:
        return {}, _describe(exc)


def _replay(out: _Capture, err: _Capture) -> None:
    """Pass a cell's output on when it stayed within the limit (else it is the cell's failure)."""
    if out.total + err.total > OUTPUT_LIMIT:
        return
    for capture, stream in ((out, sys.stdout), (err, sys.stderr)):
        if capture.total:
            stream.write(capture.text())
            stream.flush()


def _ctrl_c_reaches_cells() -> bool:
    """Whether a Ctrl-C would arrive in a cell as a plain ``KeyboardInterrupt``.

    False in a pool process (SIGINT ignored), under the sweep's own handler (it raises
    :class:`SweepInterrupt`), and outside the main thread (signals go to the main thread); True
    under Python's default handler or a caller's own, where a Ctrl-C cannot be told apart.
    """
    if threading.current_thread() is not threading.main_thread():
        return False
    handler = signal.getsignal(signal.SIGINT)
    if handler in (signal.SIG_IGN, signal.SIG_DFL, None):
        return False
    return not getattr(handler, "raises_sweep_interrupt", False)


def resolve_kind_guarded(kind: str) -> Any:
    """:func:`~refimpl.sweep.resolve_kind`, with the import of a ``module:function`` kind held
    to a cell's rules: a module that calls ``sys.exit``, raises a ``BaseException`` or prints
    more than :data:`OUTPUT_LIMIT` while it is imported is refused with
    :class:`~refimpl.errors.InvalidArgument` (it would end the sweep with status 0, or flood the
    terminal, before any cell ran). A ``KeyboardInterrupt`` propagates: it may be a Ctrl-C.

    Examples
    --------
    >>> resolve_kind_guarded("busy").__name__
    'busy'
    """
    budget = [OUTPUT_LIMIT]
    out, err = _Capture(budget, 1), _Capture(budget, 2)
    fds = DescriptorOutput()

    def within(seen: DescriptorOutput) -> bool:
        return out.total + err.total + seen.total <= OUTPUT_LIMIT

    try:
        with (
            captured_descriptors(replay=within) as fds,
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            fn = resolve_kind(kind)
    except (Exception, KeyboardInterrupt):
        raise
    except BaseException as exc:
        what = (
            f"called sys.exit({user_text(exc.code, quoted=True)})"
            if isinstance(exc, SystemExit)
            else f"raised {type(exc).__name__} ({user_text(exc)})"
        )
        raise InvalidArgument(
            f"cell kind {kind!r} cannot be used: its module {what} while it was imported. A "
            "kind's module defines functions: run nothing at import (guard a script's code with "
            "if __name__ == '__main__')."
        ) from None
    finally:
        _replay(out, err)
    printed = out.total + err.total + fds.total
    if printed > OUTPUT_LIMIT:
        raise InvalidArgument(
            f"cell kind {kind!r} cannot be used: its module printed {printed} characters while it "
            f"was imported, more than the limit of {OUTPUT_LIMIT}. Print nothing at import."
        )
    return fn


def execute_cell(cell: Any) -> dict[str, Any]:
    """Run one cell where it lands (a pool process, a Dask worker) and return its journal record.

    Every way out of the kind's code is the cell's own ``status="error"`` with the message, and
    never escapes: an exception; ``sys.exit``, a ``KeyboardInterrupt`` the cell raises itself, or
    another ``BaseException``; more than :data:`OUTPUT_LIMIT` characters printed; a parameter
    changed in place (the cell gets a deep copy, so the next cell's inputs are never touched).
    Those messages end with a one-line reproduction. A Ctrl-C still stops the sweep.

    Examples
    --------
    >>> from refimpl.sweep import parse_grid, expand
    >>> g = parse_grid({"sweep": {"kind": "busy"}, "axes": {"draws": [100]}})
    >>> cell = next(expand(g))
    >>> ok = execute_cell(cell)
    >>> bad = execute_cell(cell._replace(params={"draws": 0}))  # parse_grid refuses draws = 0
    >>> ok["status"], sorted(ok["metrics"])
    ('ok', ['mean', 'mean_square'])
    >>> bad["status"], bad["error"][:35]
    ('error', 'InvalidArgument: draws must be >= 1')
    """
    start = time.perf_counter()
    metrics, error = _run_kind(cell)
    wall = time.perf_counter() - start
    return {
        "cell_id": cell.cell_id,
        "replicate": cell.replicate,
        "seed": cell.seed,
        "params": dict(cell.axes),
        "status": "ok" if error is None else "error",
        "error": error,
        "wall_time_s": wall,
        "metrics": metrics,
    }
