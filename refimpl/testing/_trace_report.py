"""The outcome of ``refimpl check``: the summary it prints and the JSON report it writes.

The report path is checked before the trace is read: it must be writable and must not be one of
the inputs (the same file through another path, a symlink or a hard link would be destroyed). It
is written atomically (:func:`refimpl._io.atomic_write`): a reader sees the old report or the new
one, never a part.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from refimpl._io import atomic_write, describe_os_error, refuse_output_naming_input
from refimpl.errors import InvalidArgument
from refimpl.testing._trace_compare import _fmt, _show_value, _Tally
from refimpl.testing._trace_spec import _TraceSpec
from refimpl.testing.tolerances import SAFETY, Tolerance, unit_roundoff


def report_problem(report: Path, inputs: list[Path]) -> str | None:
    """Why ``--report report`` cannot be written (``None`` if it can), found before any input
    is read."""
    problem = _unwritable(report)
    if problem is not None:
        return problem
    try:
        refuse_output_naming_input(report, inputs, option="--report")
    except InvalidArgument as exc:
        return str(exc)
    except OSError as exc:
        return describe_os_error(exc, report, action="examine the --report path")
    return None


def write_report(path: Path, report: dict[str, Any]) -> str | None:
    """Write the JSON report atomically; the one-line error if it cannot be (``None`` if done)."""
    try:
        atomic_write(path, json.dumps(report, indent=2) + "\n")
    except OSError as exc:  # e.g. the disk filled up while checking
        line = describe_os_error(exc, path, action="write the --report")
        if exc.filename is not None and Path(exc.filename) != path:  # the temporary file
            line += (
                f" (the report is written to {str(Path(exc.filename).name)!r} beside it first, "
                f"then renamed over it: the directory {str(path.parent)!r} must accept new "
                "files; pass a --report path in a writable directory)"
            )
        return line
    return None


def _unwritable(path: Path) -> str | None:
    """Why ``--report path`` cannot be written (``None`` if it can)."""
    directory = path.parent
    fix = "Pass a --report path in an existing, writable directory (or create the directory)."
    if path.is_dir():
        return f"--report {str(path)!r} is a directory, not a file. {fix}"
    if not directory.is_dir():
        return f"--report {str(path)!r}: the directory {str(directory)!r} does not exist. {fix}"
    if not os.access(directory, os.W_OK | os.X_OK) or (
        path.exists() and not os.access(path, os.W_OK)
    ):
        return f"--report {str(path)!r}: no permission to write there. {fix}"
    return None


def print_summary(
    spec: _TraceSpec,
    params: dict[str, Any],
    tol: Tolerance,
    tally: _Tally,
    trace: Path,
    fmt: str,
    dtype: str | None = None,
) -> None:
    shown_params = ", ".join(f"{k}={v}" for k, v in params.items())
    print(
        f"refimpl check {trace} ({fmt}): spec {spec.name}"
        + (f" ({shown_params})" if params else "")
    )
    exact = " (in exact integer arithmetic)" if spec.exact else ""
    if dtype is not None and spec.condition is not None:
        rule = (
            f"derived from {dtype}: |found - expected| <= {SAFETY:g}*u*condition, "
            f"u = {unit_roundoff(dtype):.3g}"
        )
    else:
        rule = f"|found - expected| <= {tol.atol:g} + {tol.rtol:g}*|expected|"
    print(f"reference refimpl.{spec.reference}{exact}; tolerance {rule}")
    if not tally.mismatches:
        print(f"OK: all {tally.rows:,} {spec.unit} agree with the reference.")
        return
    share = tally.mismatches / tally.rows
    print(
        f"MISMATCH: {tally.mismatches:,} of {tally.rows:,} {spec.unit} ({share:.3%}) disagree "
        f"(largest absolute error {_fmt(tally.max_abs_error)})."
    )
    if not tally.shown:
        return
    print(f"first {len(tally.shown)} mismatching {spec.unit}:")
    for row in tally.shown:
        inputs = ", ".join(f"{k}={_show_json(v)}" for k, v in row["inputs"].items())
        print(
            f"  {row['where']}: {inputs} -> expected {spec.found}={_show_json(row['expected'])}, "
            f"found {spec.found}={_show_json(row['found'])}"
        )


def _show_json(v: Any) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(_show_json(x) for x in v) + "]"
    if isinstance(v, str):
        return v
    return _show_value(v)
