"""``refimpl check TRACE --spec NAME``: compare a logged trace with the reference, row by row.

A trainer logs, per sample or per token, the inputs of a quantity and the value it used; this command
recomputes the value with refimpl and reports every row that disagrees beyond the documented
tolerance (:data:`refimpl.testing.tolerances.TRACE`, or ``--rtol``/``--atol``).

=========================  ==========================================  ========================
spec                       columns (inputs → logged value)             parameters
=========================  ==========================================  ========================
``staleness_mask``         ``staleness`` → ``weight``                  ``eta`` (int)
``tis``                    ``logp_target``, ``logp_behavior`` →        ``cap``
                           ``weight`` (token level)
``masked_is``              ``logp_target``, ``logp_behavior`` →        ``low``, ``high``
                           ``weight`` (token level)
``effort_penalty``         ``b`` → ``penalty``                         ``k0``, ``b_min``, ``tau``
``inclusion_probability``  ``cdf`` → ``pi``                            ``n``, ``k`` (int)
``staleness``              ``trained_step`` and ``min_version`` (or    none
                           ``versions``, a list per row) →
                           ``staleness``
=========================  ==========================================  ========================

Exit codes: **0** every row agrees within tolerance; **1** at least one row disagrees (a logged NaN or
infinity where the reference is finite counts as a mismatch); **2** the input is unusable: unknown
spec or parameter, missing or invalid parameter, unknown format, a ``--report`` path that cannot
be written (checked before the trace is read), missing column, a row that cannot be
parsed or whose inputs the reference rejects (NaN log-probability, negative staleness, a version
newer than its trainer step), with its line number (CSV, JSONL) or row number (Parquet), and an
**empty trace** (no rows: a gate that checked nothing must not pass).

Large traces are streamed in chunks (CSV blocks cut at row boundaries, each parsed by
``pyarrow.csv.read_csv``; ``ParquetFile.iter_batches``; blocks of JSONL lines), so memory stays bounded whatever the number of rows; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from refimpl.testing._traces import FORMATS, Chunk, TraceError, detect_format, read_chunks
from refimpl.testing.tolerances import TRACE, Tolerance, agree

__all__ = ["EXIT_MISMATCH", "EXIT_OK", "EXIT_UNUSABLE", "configure", "run"]

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_UNUSABLE = 2

Columns = dict[str, Any]


@dataclass(frozen=True)
class _TraceSpec:
    name: str
    reference: str
    inputs: tuple[str, ...]
    found: str
    params: dict[str, type]
    expected: Callable[[Any, Columns, dict[str, Any]], NDArray[np.float64]]
    probe: Callable[[Any, dict[str, Any]], object]
    lists: tuple[str, ...] = ()
    either: Callable[[Columns, dict[str, Any], NDArray[np.float64]], NDArray[np.bool_]] | None = (
        None
    )
    notes: str = ""


def _mis_edge(
    cols: Columns, params: dict[str, Any], found: NDArray[np.float64]
) -> NDArray[np.bool_]:
    """Rows whose ratio sits at a band edge (to float64 rounding): kept or dropped both agree."""
    with np.errstate(over="ignore"):
        ratio = np.exp(cols["logp_target"] - cols["logp_behavior"])
    edge = np.isclose(ratio, params["low"], rtol=1e-9, atol=0) | np.isclose(
        ratio, params["high"], rtol=1e-9, atol=0
    )
    return np.asarray(edge & ((found == 0) | np.isclose(found, ratio, rtol=1e-5)), dtype=np.bool_)


def _staleness_expected(r: Any, cols: Columns, p: dict[str, Any]) -> NDArray[np.float64]:
    versions = cols["versions"] if "versions" in cols else cols["min_version"]
    steps = cols["trained_step"]
    out: NDArray[np.float64] = r.sample_staleness(steps, versions).sample
    return out


SPECS: dict[str, _TraceSpec] = {
    s.name: s
    for s in (
        _TraceSpec(
            name="staleness_mask",
            reference="staleness_mask",
            inputs=("staleness",),
            found="weight",
            params={"eta": int},
            expected=lambda r, c, p: r.staleness_mask(c["staleness"], eta=p["eta"]),
            probe=lambda r, p: r.staleness_mask([0], eta=p["eta"]),
        ),
        _TraceSpec(
            name="tis",
            reference="truncated_is_weights",
            inputs=("logp_target", "logp_behavior"),
            found="weight",
            params={"cap": float},
            expected=lambda r, c, p: r.truncated_is_weights(
                c["logp_target"], c["logp_behavior"], cap=p["cap"]
            ),
            probe=lambda r, p: r.truncated_is_weights([0.0], [0.0], cap=p["cap"]),
            notes="token level: one row per token",
        ),
        _TraceSpec(
            name="masked_is",
            reference="masked_is_weights",
            inputs=("logp_target", "logp_behavior"),
            found="weight",
            params={"low": float, "high": float},
            expected=lambda r, c, p: r.masked_is_weights(
                c["logp_target"], c["logp_behavior"], low=p["low"], high=p["high"]
            ),
            probe=lambda r, p: r.masked_is_weights([0.0], [0.0], low=p["low"], high=p["high"]),
            either=_mis_edge,
            notes="token level; a ratio at a band edge (to 1e-9) may be kept or dropped",
        ),
        _TraceSpec(
            name="effort_penalty",
            reference="effort_penalty",
            inputs=("b",),
            found="penalty",
            params={"k0": float, "b_min": float, "tau": float},
            expected=lambda r, c, p: r.effort_penalty(c["b"], **p),
            probe=lambda r, p: r.effort_penalty([p["b_min"]], **p),
        ),
        _TraceSpec(
            name="inclusion_probability",
            reference="inclusion_probability",
            inputs=("cdf",),
            found="pi",
            params={"n": int, "k": int},
            expected=lambda r, c, p: r.inclusion_probability(c["cdf"], **p),
            probe=lambda r, p: r.inclusion_probability([0.5], **p),
        ),
        _TraceSpec(
            name="staleness",
            reference="sample_staleness",
            inputs=("trained_step", "min_version"),
            found="staleness",
            params={},
            expected=_staleness_expected,
            probe=lambda r, p: None,
            notes="s = trained_step − oldest token version; versions may be a list per row",
        ),
    )
}


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``refimpl check`` to ``parser``."""
    parser.description = (
        "Recompute every row of a logged trace (CSV, JSONL or Parquet) with refimpl and report the "
        "rows that disagree beyond the documented tolerance (refimpl.testing.tolerances.TRACE, or "
        "--rtol/--atol)."
    )
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (
        "specs: "
        + "; ".join(
            f"{s.name} ({' or '.join(_input_sets(s))} -> {s.found}"
            + (f"; params {', '.join(s.params)})" if s.params else ")")
            for s in SPECS.values()
        )
        + ".\nexit codes: 0 all rows agree, 1 a mismatch, 2 unusable input (incl. an empty trace)."
    )
    parser.add_argument("trace", type=Path, help="the logged trace: .csv, .jsonl or .parquet")
    parser.add_argument("--spec", required=True, help=f"one of: {', '.join(SPECS)}")
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a parameter of the spec (repeat), e.g. --param eta=1",
    )
    parser.add_argument("--report", type=Path, help="write a JSON report to this file")
    parser.add_argument("--format", choices=FORMATS, help="trace format (default: from suffix)")
    parser.add_argument("--rtol", type=float, help="relative tolerance (default: per spec)")
    parser.add_argument("--atol", type=float, help="absolute tolerance (default: per spec)")
    parser.add_argument(
        "--max-show",
        type=_count,
        default=10,
        metavar="N",
        help="mismatching rows to show and to put in the report, N >= 0 (default 10; 0 shows "
        "none: the summary and the exit code only)",
    )
    parser.add_argument(
        "--chunk-rows", type=int, default=1 << 18, help="rows per streamed chunk (default 262144)"
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show progress on stderr (default: when stderr is a terminal)",
    )


def _count(text: str) -> int:
    """An integer >= 0 (argparse rejects anything else with exit code 2 and this message)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be an integer >= 0; got {text!r}. Pass e.g. --max-show 10."
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(
            f"must be >= 0; got {value}. Pass 0 to show no rows, or e.g. --max-show 10."
        )
    return value


def _input_sets(spec: _TraceSpec) -> list[str]:
    if spec.name == "staleness":
        return ["trained_step, min_version", "trained_step, versions"]
    return [", ".join(spec.inputs)]


class _Unusable(Exception):
    pass


def _parse_params(spec: _TraceSpec, raw: list[str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for item in raw:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise _Unusable(f"--param must be KEY=VALUE; got {item!r}. Write e.g. --param eta=1.")
        if key not in spec.params:
            valid = ", ".join(spec.params) or "none"
            raise _Unusable(
                f"unknown parameter {key!r} for spec {spec.name!r} (its parameters: {valid})."
            )
        kind = spec.params[key]
        try:
            params[key] = int(value) if kind is int else float(value)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise _Unusable(
                f"--param {key} must be {what}; got {key}={value!r}. Pass e.g. {key}=1."
            ) from None
    missing = [k for k in spec.params if k not in params]
    if missing:
        example = " ".join(f"--param {k}=..." for k in missing)
        raise _Unusable(
            f"spec {spec.name!r} needs parameter(s) {', '.join(missing)}: add {example}."
        )
    return params


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


def _check_chunk(
    spec: _TraceSpec,
    refimpl: Any,
    chunk: Chunk,
    params: dict[str, Any],
    tol: Tolerance,
    tally: _Tally,
    max_show: int,
) -> None:
    cols = {k: v for k, v in chunk.columns.items() if k != spec.found}

    def reference(c: Columns) -> NDArray[np.float64]:
        return np.asarray(spec.expected(refimpl, c, params), dtype=np.float64)

    try:
        with np.errstate(all="ignore"):
            expected = reference(cols)
    except (ValueError, TypeError):
        i = _first_rejected(reference, cols, chunk.size)
        try:
            reference({k: v[i : i + 1] for k, v in cols.items()})
            why = "the reference rejects it"
        except (ValueError, TypeError) as exc:
            why = str(exc)
        shown = ", ".join(f"{k}={_show_value(v[i])}" for k, v in cols.items())
        raise TraceError(
            f"{chunk.where(i)}: the inputs ({shown}) are outside the domain of "
            f"refimpl.{spec.reference}: {why}"
        ) from None
    found = np.asarray(chunk.columns[spec.found], dtype=np.float64)
    ok = agree(found, expected, tol)
    if spec.either is not None:
        ok |= spec.either(cols, params, found)
    bad = np.flatnonzero(~ok)
    tally.rows += chunk.size
    tally.mismatches += int(bad.size)
    if bad.size:
        with np.errstate(invalid="ignore"):
            err = np.abs(found[bad] - expected[bad])
        finite = err[np.isfinite(err)]
        worst = math.inf if finite.size < err.size else float(finite.max(initial=0.0))
        tally.max_abs_error = max(tally.max_abs_error, worst)
    for i in bad[: max(0, max_show - len(tally.shown))]:
        row = {
            "row": chunk.row_start + int(i),
            "where": chunk.where(int(i)),
            "inputs": {k: _json_value(v[i]) for k, v in cols.items()},
            "expected": _json_value(expected[i]),
            "found": _json_value(found[i]),
        }
        if chunk.lines is not None:
            row["line"] = int(chunk.lines[i])
        tally.shown.append(row)


def _show_value(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return "[" + ", ".join(_fmt(x) for x in v.tolist()) + "]"
    x = float(v)
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else _fmt(x)


def _json_value(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return [_json_value(x) for x in v.tolist()]
    x = float(v)
    return x if math.isfinite(x) else str(x)  # JSON has no NaN/inf: write "nan", "inf"


def run(args: argparse.Namespace) -> int:
    """Check the trace; print a summary; return the exit code (0, 1 or 2)."""
    report: dict[str, Any] = {
        "trace": str(args.trace),
        "spec": args.spec,
        "params": {},
    }
    if args.report is not None:
        problem = _unwritable(args.report)
        if problem is not None:  # found before reading the trace, not after checking it all
            print(f"refimpl check: error: {problem}", file=sys.stderr)
            return EXIT_UNUSABLE
    try:
        code = _run(args, report)
    except (TraceError, _Unusable) as exc:
        report.update(status="unusable", exit_code=EXIT_UNUSABLE, error=str(exc))
        print(f"refimpl check: error: {exc}", file=sys.stderr)
        code = EXIT_UNUSABLE
    if args.report is not None:
        try:
            args.report.write_text(json.dumps(report, indent=2) + "\n")
        except OSError as exc:  # e.g. the disk filled up while checking
            print(
                f"refimpl check: error: --report {str(args.report)!r} could not be written "
                f"({exc.strerror or exc}). Pass a --report path in a writable directory.",
                file=sys.stderr,
            )
            return EXIT_UNUSABLE
    return code


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


def _run(args: argparse.Namespace, report: dict[str, Any]) -> int:
    spec = SPECS.get(args.spec)
    if spec is None:
        raise _Unusable(f"unknown spec {args.spec!r}; use one of: {', '.join(SPECS)}.")
    params = _parse_params(spec, args.param)
    report["params"] = params
    import refimpl

    if not hasattr(refimpl, spec.reference):
        raise _Unusable(
            f"refimpl.{spec.reference} is not available in the installed refimpl; upgrade it."
        )
    try:
        spec.probe(refimpl, params)
    except (ValueError, TypeError) as exc:
        raise _Unusable(f"invalid --param for spec {spec.name!r}: {exc}") from None
    default = TRACE[spec.name]
    tol = Tolerance(
        rtol=default.rtol if args.rtol is None else args.rtol,
        atol=default.atol if args.atol is None else args.atol,
    )
    if tol.rtol < 0 or tol.atol < 0 or not all(map(math.isfinite, tol)):
        raise _Unusable(f"--rtol and --atol must be finite and >= 0; got {tol}.")
    fmt = detect_format(args.trace, args.format)
    report.update(format=fmt, tolerance=tol._asdict(), reference=f"refimpl.{spec.reference}")
    inputs = list(spec.inputs)
    lists: list[str] = []
    if spec.name == "staleness":
        inputs, lists = _staleness_columns(args.trace, fmt)
    if args.chunk_rows < 1:
        raise _Unusable(f"--chunk-rows must be >= 1; got {args.chunk_rows}.")

    from tqdm import tqdm

    total = args.trace.stat().st_size if args.trace.is_file() else 0
    unit = "rows" if fmt == "parquet" else "B"
    if fmt == "parquet":
        total = _parquet_rows(args.trace)
    tally = _Tally()
    with tqdm(
        total=total,
        unit=unit,
        unit_scale=True,
        file=sys.stderr,
        disable=None if args.progress is None else not args.progress,
        desc=f"refimpl check {spec.name}",
        leave=False,
    ) as bar:

        def progress(done: int) -> None:
            bar.update(done - bar.n)

        for chunk in read_chunks(
            args.trace,
            fmt,
            [*inputs, spec.found],
            lists,
            chunk_rows=args.chunk_rows,
            on_progress=progress,
        ):
            _check_chunk(spec, refimpl, chunk, params, tol, tally, args.max_show)
    if tally.rows == 0:
        raise TraceError(
            f"{str(args.trace)!r} has no rows: nothing was checked, and an empty trace cannot "
            "pass the gate. Check that the trainer wrote the trace."
        )
    code = EXIT_MISMATCH if tally.mismatches else EXIT_OK
    report.update(
        status="mismatch" if tally.mismatches else "ok",
        exit_code=code,
        rows=tally.rows,
        mismatches=tally.mismatches,
        max_abs_error=_json_value(tally.max_abs_error),
        first_mismatches=tally.shown,
    )
    _print_summary(spec, params, tol, tally, args.trace, fmt)
    return code


def _staleness_columns(path: Path, fmt: str) -> tuple[list[str], list[str]]:
    """``trained_step`` plus ``versions`` (list column) if the trace has it, else ``min_version``."""
    names = _column_names(path, fmt)
    if names is not None and "versions" in names:
        return ["trained_step"], ["versions"]
    if names is not None and names and "min_version" not in names:
        raise TraceError(
            f"{str(path)!r} has neither a 'min_version' nor a 'versions' column (columns found: "
            f"{', '.join(map(repr, names))}). Log the oldest token version of each sample as "
            "min_version, or every token's version as a list in versions."
        )
    return ["trained_step", "min_version"], []


def _column_names(path: Path, fmt: str) -> list[str] | None:
    if not path.is_file():
        return None
    if fmt == "csv":
        import csv

        with path.open(newline="", encoding="utf-8", errors="replace") as f:
            return next(csv.reader(f), [])
    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            names: list[str] = pq.ParquetFile(path).schema_arrow.names
        except Exception:
            return None
        return names
    with path.open("rb") as f:
        for raw in f:
            if raw.strip():
                try:
                    obj = json.loads(raw)
                except ValueError:
                    return None
                return list(obj) if isinstance(obj, dict) else None
    return None


def _parquet_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    try:
        rows: int = pq.ParquetFile(path).metadata.num_rows
    except Exception:
        return 0
    return rows


def _print_summary(
    spec: _TraceSpec,
    params: dict[str, Any],
    tol: Tolerance,
    tally: _Tally,
    trace: Path,
    fmt: str,
) -> None:
    shown_params = ", ".join(f"{k}={v}" for k, v in params.items())
    print(
        f"refimpl check {trace} ({fmt}): spec {spec.name}"
        + (f" ({shown_params})" if params else "")
    )
    print(
        f"reference refimpl.{spec.reference}; tolerance |found - expected| <= "
        f"{tol.atol:g} + {tol.rtol:g}*|expected|"
    )
    if not tally.mismatches:
        print(f"OK: all {tally.rows:,} rows agree with the reference.")
        return
    share = tally.mismatches / tally.rows
    print(
        f"MISMATCH: {tally.mismatches:,} of {tally.rows:,} rows ({share:.3%}) disagree "
        f"(largest absolute error {_fmt(tally.max_abs_error)})."
    )
    if not tally.shown:
        return
    print(f"first {len(tally.shown)} mismatching rows:")
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
