"""Calling a candidate that may misbehave: it is user code, and the suite must outlive it.

A candidate under test can leave by doors other than a return or an ``Exception``: it may call
``sys.exit``, raise ``KeyboardInterrupt`` or another ``BaseException`` of its own, print megabytes,
modify its inputs in place, or return the wrong kind of thing (complex, strings, objects, booleans).
:func:`call_candidate` runs one call so that each of these becomes a :class:`CandidateMisbehaved`
(an ordinary ``Exception`` that the runner reports as that check's status, with a reproduction):

- the candidate gets its own copies of the inputs, so that nothing it does to them reaches the
  reference or the next call, and a change it makes to them in place is reported;
- what it writes to ``sys.stdout`` and ``sys.stderr`` (text, or bytes to their ``buffer``) is
  kept out of the user's terminal (the search calls it hundreds of times); past
  :data:`OUTPUT_LIMIT` characters in one call the call is stopped and reported. What compiled
  code or a child process writes straight to file descriptors 1 and 2 goes to temporary files
  (:func:`~refimpl._io.captured_descriptors`, from whichever thread runs the check; they are cut
  back to their first bytes while the call runs, so the disk stays bounded): it cannot be stopped
  mid-call, but past the limit the call is reported when it ends, with its exact size;
- ``SystemExit``, ``GeneratorExit`` and any other ``BaseException`` it raises are reported as a raise.

``KeyboardInterrupt`` is the one exception that may be the user's, not the candidate's: a real
Ctrl-C. :func:`user_interrupts` tells them apart by the signal itself: while it is active (in the
main thread, where Python delivers ``SIGINT``), a ``SIGINT`` that arrives during a candidate call
is recorded before it becomes a ``KeyboardInterrupt``, and such an interrupt propagates and stops
the run. A ``KeyboardInterrupt`` raised during a call without a ``SIGINT`` is the candidate's own
and is reported as a raise. Outside the main thread no ``SIGINT`` can arrive, so every
``KeyboardInterrupt`` there is the candidate's.
"""

from __future__ import annotations

import contextlib
import io
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import FrameType
from typing import Any, Literal

import numpy as np

from refimpl._io import BinaryView, DescriptorOutput, captured_descriptors, user_text
from refimpl.testing._arrays import ArrayBridge
from refimpl.testing._specs_parts import MASK_OUTPUTS
from refimpl.testing.tolerances import largest_finite

__all__ = [
    "OUTPUT_LIMIT",
    "CandidateMisbehaved",
    "call_candidate",
    "found_problem",
    "fresh_copy",
    "nan_where_finite",
    "output_kind_problem",
    "user_interrupts",
]

#: characters a candidate may write to stdout and stderr in one call before it is stopped
OUTPUT_LIMIT = 1 << 20

#: the longest excerpt of a candidate's output quoted in a report
_EXCERPT = 200


class CandidateMisbehaved(Exception):
    """The candidate left by another door than a return value; ``kind`` is the check's status."""

    def __init__(self, kind: Literal["failed", "raised"], message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class _OutputLimit(BaseException):
    """Raised inside the candidate's ``print`` when it passes :data:`OUTPUT_LIMIT` (a
    ``BaseException``, so that the candidate's own ``except Exception`` does not swallow it)."""


class _Sink(io.TextIOBase):
    """Counts what is written and keeps the first characters; stops the writer at the limit.

    Bytes written to its ``buffer`` count the same way; its ``fileno()`` is the descriptor it
    stands for (captured by :func:`~refimpl._io.captured_descriptors` during the call).
    """

    encoding = "utf-8"

    def __init__(self, name: str, fd: int) -> None:
        self.name = name
        self.count = 0
        self.head = ""
        self.buffer = BinaryView(self)
        self._fd = fd

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        self.count += len(text)
        if len(self.head) < _EXCERPT:
            self.head += text[: _EXCERPT - len(self.head)]
        if self.count > OUTPUT_LIMIT:
            raise _OutputLimit(self.name)
        return len(text)


@dataclass
class _Interrupts:
    """How many ``SIGINT`` signals arrived while :func:`user_interrupts` was active."""

    count: int = 0


_STATE = threading.local()


@contextlib.contextmanager
def user_interrupts() -> Iterator[None]:
    """Record each real ``SIGINT`` (Ctrl-C) while the block runs, then deliver it as before.

    The handler is wrapped only in the main thread and when it is a Python callable (by default
    :func:`signal.default_int_handler`, which raises ``KeyboardInterrupt``); otherwise a ``SIGINT``
    cannot become a ``KeyboardInterrupt`` in this thread, and every ``KeyboardInterrupt`` raised
    during a call is the candidate's. Outside this block one cannot tell, and a
    ``KeyboardInterrupt`` always propagates.
    """
    state = _Interrupts()
    outer = getattr(_STATE, "interrupts", None)
    _STATE.interrupts = state
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main else None
    try:
        if callable(previous):
            deliver: Callable[[int, FrameType | None], Any] = previous

            def record(signum: int, frame: FrameType | None) -> Any:
                state.count += 1
                return deliver(signum, frame)

            signal.signal(signal.SIGINT, record)
        yield
    finally:
        if callable(previous):
            signal.signal(signal.SIGINT, previous)
        _STATE.interrupts = outer


def _interrupt_count() -> int:
    state = getattr(_STATE, "interrupts", None)
    return -1 if state is None else state.count


def fresh_copy(value: Any) -> Any:
    """``value`` with every numpy array copied (containers rebuilt): the candidate's own inputs."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, list):
        return [fresh_copy(v) for v in value]
    if isinstance(value, tuple):
        return tuple(fresh_copy(v) for v in value)
    if isinstance(value, Mapping):
        return {k: fresh_copy(v) for k, v in value.items()}
    return value


def _snapshot(value: Any) -> Any:
    """What the candidate was given, as float64 numpy copies (to see a change made in place)."""
    if isinstance(value, list):
        return [_snapshot(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_snapshot(v) for v in value)
    if isinstance(value, Mapping):
        return {k: _snapshot(v) for k, v in value.items()}
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return np.array(ArrayBridge.to_numpy(value), copy=True)
    return value


def _changed(before: Any, after: Any, where: str) -> str | None:
    """The first input (``args[0]``, ``kwargs['mask']``) whose values differ, or None."""
    if isinstance(before, np.ndarray):
        same = isinstance(after, np.ndarray) and before.shape == after.shape
        return None if same and np.array_equal(before, after, equal_nan=True) else where
    if isinstance(before, (list, tuple)):
        for i, (b, a) in enumerate(zip(before, after, strict=True)):
            found = _changed(b, a, f"{where}[{i}]")
            if found is not None:
                return found
        return None
    if isinstance(before, Mapping):
        for key in before:
            found = _changed(before[key], after[key], f"{where}[{key!r}]")
            if found is not None:
                return found
    return None


def call_candidate(
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    watch_inputs: bool = True,
    kind: Callable[[Any], str | None] | None = None,
) -> Any:
    """``func(*args, **kwargs)``, its output kept out of the terminal; a misbehaviour raises
    :class:`CandidateMisbehaved`, an ordinary ``Exception`` of the candidate propagates as it is.

    ``args`` and ``kwargs`` must be the candidate's own copies (:func:`fresh_copy` before the
    conversion to its library), so that a change it makes to them touches nothing else; with
    ``watch_inputs`` (not under an autodiff trace, whose inputs cannot be read) the change is
    reported. ``kind(output)`` says why an output is the wrong kind of thing (or None).
    """
    before = _snapshot((args, kwargs)) if watch_inputs else None
    out, err = _Sink("stdout", 1), _Sink("stderr", 2)
    fds = DescriptorOutput()
    interrupts = _interrupt_count()
    try:
        with (
            captured_descriptors() as fds,
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            result = func(*args, **kwargs)
            wrong = None if kind is None else kind(result)  # may run its code (``__array__``)
    except _OutputLimit as exc:
        sink = out if str(exc) == "stdout" else err
        raise CandidateMisbehaved(
            "failed",
            f"the candidate wrote more than {OUTPUT_LIMIT} characters to {sink.name} in one call "
            f"(stopped there); it began: {sink.head!r}. A reference function returns its result "
            "and prints nothing: remove the print, or send it to a logger.",
        ) from None
    except KeyboardInterrupt:
        if interrupts == -1 or _interrupt_count() != interrupts:
            raise  # a real Ctrl-C (or no way to tell, outside user_interrupts): the user stops
        raise CandidateMisbehaved(
            "raised",
            "the candidate raised KeyboardInterrupt itself (no Ctrl-C arrived): a function must "
            "not raise it; raise a ValueError for inputs it refuses.",
        ) from None
    except Exception:
        _refuse_flood(out, err, fds)
        raise
    except BaseException as exc:  # SystemExit, GeneratorExit, a BaseException of its own
        code = user_text(exc.code, quoted=True) if isinstance(exc, SystemExit) else ""
        what = f"called sys.exit({code})" if isinstance(exc, SystemExit) else "raised"
        raise CandidateMisbehaved(
            "raised",
            f"the candidate {what} ({type(exc).__name__}: {user_text(exc)}), which would end the "
            "caller's "
            "program: raise a ValueError for inputs it refuses, and return its result otherwise.",
        ) from None
    _refuse_flood(out, err, fds)
    moved = None if before is None else _changed(before, _snapshot((args, kwargs)), "inputs")
    if moved is not None:
        where = moved.replace("inputs[0]", "args", 1).replace("inputs[1]", "kwargs", 1)
        raise CandidateMisbehaved(
            "failed",
            f"the candidate modified its input {where} in place: a reference function must leave "
            "its inputs as they were (work on a copy, e.g. x = x.clone() or np.array(x)).",
        )
    if wrong is not None:
        raise CandidateMisbehaved("failed", wrong)
    return result


def _refuse_flood(out: _Sink, err: _Sink, fds: DescriptorOutput) -> None:
    """Past the limit with what compiled code or a child process wrote to file descriptors 1
    and 2 (seen only when the call has ended): the call fails, as a flood of ``print`` does."""
    if fds.total and out.count + err.count + fds.total > OUTPUT_LIMIT:
        raise CandidateMisbehaved(
            "failed",
            f"the candidate wrote {fds.total} bytes to file descriptors 1 and 2 in one call (from "
            f"compiled code or a child process; {out.count + err.count} characters printed "
            f"besides), more than the limit of {OUTPUT_LIMIT}; it began: {fds.head()!r}. A "
            "reference function returns its result and prints nothing: remove the output, or "
            "send it to a logger.",
        ) from None


def _array_leaves(value: Any) -> Iterator[Any]:
    """The leaves of an output that are its numbers: every element of a list (a list is an
    array), and inside a tuple or a mapping the leaves that carry a dtype (arrays of any library,
    numpy scalars) or are complex; other Python objects there (a framework's ``None`` or label
    beside its numbers) are not the spec's output."""
    if isinstance(value, list):
        for v in value:
            yield from _array_leaves(v) if isinstance(v, (list, tuple, Mapping)) else [v]
    elif isinstance(value, tuple):
        for v in value:
            yield from _array_leaves(v)
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _array_leaves(v)
    elif hasattr(value, "dtype") or isinstance(value, complex):
        yield value


def _kind(leaf: Any) -> str | None:
    """``"complex"``, ``"string"``, ``"object"``, ``"boolean"``, ``"duration"``, ``"date"``,
    ``"masked"`` (a masked array with masked entries) or ``"None"`` for an output leaf of that
    kind (any array library), else None."""
    if leaf is None:
        return "None"
    if isinstance(leaf, (str, bytes)):
        return "string"
    if isinstance(leaf, (bool, np.bool_)):
        return "boolean"
    if isinstance(leaf, complex | np.complexfloating):
        return "complex"
    if isinstance(leaf, np.ma.MaskedArray) and np.any(np.ma.getmaskarray(leaf)):
        return "masked"  # entries with no value: what is under the mask is not an answer
    dtype = getattr(leaf, "dtype", None)
    if dtype is None:
        return None
    if isinstance(dtype, np.dtype):
        return {"c": "complex", "U": "string", "S": "string", "O": "object", "V": "object",
                "b": "boolean", "m": "duration", "M": "date"}.get(dtype.kind)  # fmt: skip
    name = str(dtype).lower()
    for word, kind in (("complex", "complex"), ("bool", "boolean"), ("str", "string")):
        if word in name:
            return kind
    return None


def output_kind_problem(out: Any, *, mask: bool) -> str | None:
    """Why the candidate's output is the wrong kind of thing for a numeric spec, or None.

    A bare output or the elements of a list must be real numbers: complex, string, object,
    boolean, duration (``timedelta64``: its number is a count of some unit), date, masked
    entries and ``None`` are refused. Inside a tuple or a mapping, arrays of those kinds and
    complex numbers are refused. Booleans are right only where the spec declares that its
    reference's output is a 0/1 mask (``mask=True``: the runner passes whether the spec is in
    ``MASK_OUTPUTS``; ``s <= eta`` is ``staleness_mask`` exactly); ``mask=False`` refuses them
    whatever their values (a weight that happens to be all 0 or 1 on one draw is still a weight).
    """
    bare = not isinstance(out, (list, tuple, Mapping))  # a list is walked as an array
    for leaf in [out] if bare else _array_leaves(out):
        kind = _kind(leaf)
        if kind == "boolean" and mask:
            continue
        if kind is not None:
            shown = getattr(leaf, "dtype", type(leaf).__name__)
            return (
                f"the candidate returned a {kind} value ({shown}) where the reference returns real "
                "numbers: return float arrays (booleans are accepted only by the specs whose "
                f"reference is a 0/1 mask: {', '.join(sorted(MASK_OUTPUTS))})."
            )
    return None


def nan_where_finite(
    found: Any, expected: Any, *, dtype: str, free: Callable[[tuple[int, ...]], Any] | None = None
) -> str | None:
    """Why the candidate's output is NaN where the reference's is a number, or None.

    A NaN is never a right answer where refimpl's is finite and within the candidate's dtype (a
    value past ``largest_finite(dtype)`` may come out as infinity, and an infinity minus itself as
    NaN: left to the checks). Tuples, lists and mappings are walked beside the reference's; an
    array whose shape is not the reference's is left to :func:`found_problem`. ``free(shape)``
    gives the entries the conventions leave free (padding under ``padding='ignored'``), or None.
    """
    if isinstance(found, tuple | list) and isinstance(expected, tuple | list):
        if len(found) != len(expected):
            return None
        for i, (f, e) in enumerate(zip(found, expected, strict=True)):
            wrong = nan_where_finite(f, e, dtype=dtype, free=free)
            if wrong is not None:
                return f"output {i}: {wrong}"
        return None
    if isinstance(found, Mapping) and isinstance(expected, Mapping):
        for key in expected:
            wrong = (
                None
                if key not in found
                else nan_where_finite(found[key], expected[key], dtype=dtype, free=free)
            )
            if wrong is not None:
                return f"output {key!r}: {wrong}"
        return None
    try:
        f = np.asarray(found, dtype=np.float64)
        e = np.asarray(expected, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    if f.shape != e.shape:
        return None
    with np.errstate(invalid="ignore"):
        bad = np.isnan(f) & np.isfinite(e) & (np.abs(e) <= largest_finite(dtype))
    loose = None if free is None else free(f.shape)
    if loose is not None:
        bad &= ~np.asarray(loose, dtype=np.bool_)
    if not bad.any():
        return None
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    where = f" (first at index {first}" if first else " ("
    sep = ": " if first else ""
    return (
        f"the candidate returned NaN at {int(bad.sum())} of {f.size} entries where the reference "
        f"is finite{where}{sep}expected {float(e[first])!r}): NaN is never right where the "
        "reference is a number; find the 0/0, inf − inf or log of a negative that produces it."
    )


def found_problem(found: Any, expected: Any) -> str | None:
    """Why the candidate's output, as the spec read it, cannot be the reference's: a shape that
    differs (one that broadcasts, a scalar for an array). None when the shapes agree.

    Compared where both are arrays (or numpy scalars), or tuples of the same length; a layout the
    spec reads otherwise is left to its checks. NaN is left to them too: a spec may accept NaN
    where the inputs, rounded to the candidate's dtype, leave a ratio undefined (0/0).
    """
    if isinstance(found, tuple) and isinstance(expected, tuple) and len(found) == len(expected):
        for i, (f, e) in enumerate(zip(found, expected, strict=True)):
            wrong = found_problem(f, e)
            if wrong is not None:
                return f"output {i}: {wrong}"
        return None
    found, expected = (np.asarray(x) if isinstance(x, np.generic) else x for x in (found, expected))
    if not (isinstance(found, np.ndarray) and isinstance(expected, np.ndarray)):
        return None
    if found.shape == expected.shape:
        return None
    return (
        f"the candidate's output has shape {found.shape} where the reference's has shape "
        f"{expected.shape}: return exactly that shape (one that broadcasts is still wrong)."
    )
