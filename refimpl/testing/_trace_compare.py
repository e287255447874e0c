"""How ``refimpl check`` compares a chunk of logged values with the reference's, and tallies the
rows that disagree (the counts, the largest error, the first mismatching rows of the report)."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from refimpl.testing._trace_spec import Columns, _TraceSpec
from refimpl.testing._traces import Chunk, TraceError
from refimpl.testing.tolerances import (
    SAFETY,
    Tolerance,
    agree,
    largest_finite,
    smallest_normal,
    unit_roundoff,
)


def _fmt(x: float) -> str:
    return format(float(x), ".10g")


@dataclass
class _Tally:
    rows: int = 0
    mismatches: int = 0
    max_abs_error: float = 0.0
    shown: list[dict[str, Any]] = field(default_factory=list)


def _first_rejected(reference: Callable[[Columns], Any], cols: Columns, n: int) -> int:
    """The first row the reference rejects (bisection on prefixes)."""

    def take(stop: int, start: int = 0) -> Columns:
        return {k: v[start:stop] for k, v in cols.items()}

    lo, hi = 0, n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            reference(take(mid))
            lo = mid
        except (ValueError, TypeError):
            hi = mid
    return lo


#: rows of a chunk from which a row-wise spec's reference runs on two threads (below it the
#: thread's start-up, about 0.1 ms, is a visible share of the work)
SPLIT_ROWS = 1 << 16


def _on_two_threads(reference: Callable[[Columns], Any], cols: Columns, n: int) -> NDArray[Any]:
    """The reference of a row-wise spec on the first half of the rows here and on the second half
    on another thread (numpy's arithmetic releases the GIL), the halves' values concatenated."""
    half = n // 2
    box: dict[str, Any] = {}

    def second() -> None:
        try:
            with np.errstate(all="ignore"):
                box["values"] = reference({k: v[half:] for k, v in cols.items()})
        except BaseException as exc:  # raised below, on the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=second, daemon=True)
    thread.start()
    try:
        with np.errstate(all="ignore"):
            first = reference({k: v[:half] for k, v in cols.items()})
    finally:
        thread.join()
    if "error" in box:
        raise box["error"]
    return np.concatenate([np.asarray(first), np.asarray(box["values"])])


def _expected(
    spec: _TraceSpec, reference: Callable[[Columns], Any], cols: Columns, n: int
) -> NDArray[Any]:
    """The reference's values of a chunk: a long chunk of a row-wise spec on two threads. A
    rejected input is looked for in the whole chunk, so the error is the one-thread run's."""
    if spec.rowwise and n >= SPLIT_ROWS and not spec.exact and not spec.found_list:
        try:
            return _on_two_threads(reference, cols, n)
        except (ValueError, TypeError):
            pass  # the whole chunk below raises it again, and the caller names the first row
    out: NDArray[Any] = reference(cols)
    return out


def _check_chunk(
    spec: _TraceSpec,
    refimpl: Any,
    chunk: Chunk,
    params: dict[str, Any],
    tol: Tolerance,
    tally: _Tally,
    max_show: int,
    dtype: str | None = None,
) -> None:
    cols = {k: v for k, v in chunk.columns.items() if k != spec.found}

    def reference(c: Columns) -> NDArray[Any]:
        out = spec.expected(refimpl, c, params)
        return out if spec.exact or spec.found_list else np.asarray(out, dtype=np.float64)

    try:
        with np.errstate(all="ignore"):
            expected = _expected(spec, reference, cols, chunk.size)
    except (ValueError, TypeError):
        i = _first_rejected(reference, cols, chunk.size)
        try:
            reference({k: v[i : i + 1] for k, v in cols.items()})
            why = "the reference rejects it"
        except (ValueError, TypeError) as exc:
            why = str(exc)
        shown = ", ".join(f"{k}={short(_show_value(v[i]))}" for k, v in cols.items())
        raise TraceError(
            f"{chunk.where(i)}: the inputs ({shown}) are outside the domain of "
            f"refimpl.{spec.reference}: {why}"
        ) from None
    if spec.found_list:
        found, ok, err = _list_agree(spec, chunk, cols, expected, params, tol, dtype)
        bad = np.flatnonzero(~ok)
        err = err[bad]
    elif spec.exact:
        found, ok, err = _exact_agree(chunk.columns[spec.found], expected, tol)
        bad = np.flatnonzero(~ok)
        err = err[bad]
    else:
        found = np.asarray(chunk.columns[spec.found], dtype=np.float64)
        if dtype is not None and spec.condition is not None:
            ok = _derived_agree(found, expected, spec.condition(cols, params, expected), dtype)
        else:
            ok = agree_float64(found, expected, tol)
        if spec.either is not None:
            ok |= spec.either(cols, params, found)
        bad = np.flatnonzero(~ok)
        with np.errstate(invalid="ignore"):
            err = np.abs(found[bad] - expected[bad])
    tally.rows += chunk.size
    tally.mismatches += int(bad.size)
    if bad.size:
        finite = err[np.isfinite(err)]
        worst = math.inf if finite.size < err.size else float(finite.max(initial=0.0))
        tally.max_abs_error = max(tally.max_abs_error, worst)
    for i in bad[: max(0, max_show - len(tally.shown))]:
        row = {
            "row": chunk.row_start + int(i),
            "where": chunk.where(int(i)),
            "inputs": {k: _json_value(v[i]) for k, v in cols.items() if not k.startswith("_")},
            "expected": _json_value(expected[i]),
            "found": _json_value(found[i]),
        }
        if chunk.lines is not None:
            row["line"] = int(chunk.lines[i])
        tally.shown.append(row)


def agree_float64(
    found: NDArray[np.float64], expected: NDArray[np.float64], tol: Tolerance
) -> NDArray[np.bool_]:
    """:func:`~refimpl.testing.tolerances.agree` on two float64 arrays of one shape, in fewer
    passes over the rows: ``(|f - e| <= atol + rtol·|e|, f and e finite) or f == e``, which is
    its verdict for every pair (the same infinity agrees through ``f == e``, a NaN never). A zero
    tolerance is ``f == e`` alone: a finite difference is at most 0 only when the two are equal.
    A tolerance that is not a finite number >= 0 goes to ``agree`` itself."""
    if not (0 <= tol.atol < math.inf and 0 <= tol.rtol < math.inf):
        return agree(found, expected, tol)
    if tol.atol == 0 and tol.rtol == 0:
        return np.asarray(found == expected)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.subtract(found, expected)
        np.abs(diff, out=diff)
        bound = np.abs(expected)
        bound *= tol.rtol
        bound += tol.atol
        close = diff <= bound
    close &= np.isfinite(expected)
    close &= np.isfinite(found)
    close |= found == expected
    return close


def _list_agree(
    spec: _TraceSpec,
    chunk: Chunk,
    cols: Columns,
    expected: NDArray[Any],
    params: dict[str, Any],
    tol: Tolerance,
    dtype: str | None,
) -> tuple[NDArray[Any], NDArray[np.bool_], NDArray[np.float64]]:
    """Rows whose logged value is a list: each element within tolerance; the row's error is its
    largest (infinite where a logged value is not finite and the reference's is)."""
    found = chunk.columns[spec.found]
    for i, (f, e) in enumerate(zip(found, expected, strict=True)):
        if np.size(f) != np.size(e):
            raise TraceError(
                f"{chunk.where(i)}: {spec.found} has {np.size(f)} values, expected "
                f"{np.size(e)} (one per element of {spec.lists[0]})."
            )
    sizes = [int(np.size(e)) for e in expected]
    flat_f = np.concatenate([np.asarray(f, dtype=np.float64).ravel() for f in found])
    flat_e = np.concatenate([np.asarray(e, dtype=np.float64).ravel() for e in expected])
    if dtype is not None and spec.condition is not None:
        cond = spec.condition(cols, params, expected)
        flat_c = np.concatenate([np.asarray(c, dtype=np.float64).ravel() for c in cond])
        elementwise = _derived_agree(flat_f, flat_e, flat_c, dtype)
    else:
        elementwise = agree_float64(flat_f, flat_e, tol)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    ok = np.logical_and.reduceat(elementwise, starts)
    with np.errstate(invalid="ignore"):
        diff = np.where(elementwise, 0.0, np.abs(flat_f - flat_e))
    diff = np.where(np.isnan(diff), np.inf, diff)
    err = np.maximum.reduceat(diff, starts)
    shown: NDArray[Any] = np.empty(len(found), dtype=object)
    for i, f in enumerate(found):
        shown[i] = np.asarray(f, dtype=np.float64)
    return shown, np.asarray(ok, dtype=np.bool_), np.asarray(err, dtype=np.float64)


def _derived_agree(
    found: NDArray[np.float64],
    expected: NDArray[np.float64],
    condition: NDArray[np.float64],
    dtype: str,
) -> NDArray[np.bool_]:
    """``|found − expected| <= SAFETY·u·condition + smallest normal`` (beyond the dtype's largest
    finite number, the same infinity agrees)."""
    allowed = SAFETY * unit_roundoff(dtype) * np.abs(condition) + smallest_normal(dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        close = np.abs(found - expected) <= allowed
        overflow = np.isinf(found) & (np.abs(expected) > largest_finite(dtype))
    finite = np.isfinite(found) & np.isfinite(expected)
    return np.asarray((finite & close) | (np.isinf(found) & (found == expected)) | overflow)


def _exact_agree(
    found: NDArray[Any], expected: NDArray[Any], tol: Tolerance
) -> tuple[NDArray[Any], NDArray[np.bool_], NDArray[np.float64]]:
    """Exact comparison of integers (int64 or Python ints): ``found == expected``, or within
    ``tol`` when one is given (computed exactly on the integers); the errors as float64."""
    if found.dtype != np.int64 or expected.dtype != np.int64:
        found, expected = found.astype(object), expected.astype(object)  # Python int and float
    with np.errstate(invalid="ignore", over="ignore"):
        if found.dtype == object:
            diff = np.array(
                [
                    abs(f - e) if not isinstance(f, float) or math.isfinite(f) else math.inf
                    for f, e in zip(found, expected, strict=True)
                ],
                dtype=object,
            )
        else:
            diff = np.abs(found.astype(object) - expected.astype(object))
        limit = [tol.atol + tol.rtol * abs(e) for e in expected] if tol.atol or tol.rtol else 0
        ok = np.asarray(diff <= np.asarray(limit, dtype=object), dtype=np.bool_)
    err = np.array([float(d) for d in diff], dtype=np.float64)
    return found, ok, err


def _show_value(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return "[" + ", ".join(_show_value(x) for x in v.tolist()) + "]"
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return str(int(v))  # exactly, whatever its size
    x = float(v)
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else _fmt(x)


def _json_value(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return [_json_value(x) for x in v.tolist()]
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return int(v)  # JSON integers are exact
    x = float(v)
    return x if math.isfinite(x) else str(x)  # JSON has no NaN/inf: write "nan", "inf"


def short(text: str, limit: int = 80) -> str:
    """``text`` cut to about ``limit`` characters (a long list shown by its first elements)."""
    return text if len(text) <= limit else text[: limit - 5] + " ...]"
