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
``effective_sample_size``  ``weight`` (a list per batch) → ``ess``     ``ess`` (option)
``masking_diagnostics``    ``staleness``, ``weight`` (lists per        ``statistic``, ``ess``
                           batch) → ``kept_fraction`` (or the          (options)
                           ``statistic`` named)
``kimi_length_reward``     ``length``, ``correct`` (lists per          ``scope`` (option)
                           problem) → ``reward`` (a list)
``vtrace``                 ``v_tm1``, ``v_t``, ``r_t``,                ``output``, ``lambda_``,
                           ``discount_t``, ``rho_tm1`` (lists per      thresholds (options)
                           trajectory) → ``errors`` (or the
                           ``output`` named; a list)
``policy_loss``            ``step``, ``advantage``, ``logp`` and       ``surrogate``,
                           ``logp_old`` (lists per sequence;           ``aggregation``;
                           optional ``mask``, ``micro_batch``,         surrogate, KL and
                           ``logp_ref``) → ``loss`` of the step        denominator (options)
=========================  ==========================================  ========================

The table lists the first specs; ``refimpl check --help`` lists all of them (every spec of
:func:`refimpl.testing.spec_names`). A logged value that is a list agrees when every element does.

Exit codes: **0** every row agrees within tolerance; **1** at least one row disagrees (a logged NaN or
infinity where the reference is finite counts as a mismatch); **2** the input is unusable: unknown
spec or parameter, missing or invalid parameter, unknown format, a ``--report`` path that cannot
be written or that names an input (the trace through any path, symlink or hard link; both checked
before the trace is read), a missing column, a column named twice (in the trace, or by two
``--column`` mappings), a row that cannot be
parsed or whose inputs the reference rejects (NaN log-probability, negative staleness, a version
newer than its trainer step), with its line number (CSV, JSONL) or row number (Parquet), and an
**empty trace** (no rows: a gate that checked nothing must not pass).

The trace may be ``-``, standard input (also a pipe or a device such as ``/dev/null``): it is copied
to a temporary file first, and its format is ``--format``, else sniffed from its first bytes
(Parquet's magic ``PAR1``, a JSON object ``{``, else CSV). A file that is not text where text is
expected (NUL bytes, bytes that are not UTF-8: a binary file given as CSV) is refused as "not a CSV
text file" without echoing its bytes. A directory is a partitioned Parquet dataset: its files are
read in path order, rows numbered across them, and a directory ``key=value`` on a file's path (hive
partitioning, e.g. ``step=3/``) is a column of its rows; ``--dask`` checks it on Dask, one task per
file, with the same verdict and report, ``policy_loss`` included (its steps may run across files:
:mod:`refimpl.testing._trace_run`).

The ``staleness`` spec reads steps and versions as integers and computes ``s = j − min_t v_t`` in
exact integer arithmetic (int64, or Python integers beyond it in JSONL and CSV): no float64 round
trip, which would merge versions beyond 2**53. It follows the definition and the domain of
:func:`refimpl.sample_staleness`.

Large traces are streamed in chunks, so memory stays bounded whatever the number of rows: CSV and
JSONL in blocks of at most 8 MiB cut at row boundaries, parsed by pyarrow's CSV and JSON readers
(a JSONL trace of 16 MiB or more by polars' when installed, where it reads as pyarrow does);
Parquet without pre-buffering, in batches of about ``--chunk-rows`` values per column. List
columns stay columnar (:class:`~refimpl.testing._traces.ListColumn`), and sequence-level specs
are one reference call per group of sequences of one length. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

from refimpl import _process
from refimpl.errors import RefimplError
from refimpl.testing._trace_compare import _json_value, _Tally
from refimpl.testing._trace_compare import _show_value as _show_value  # used by tests
from refimpl.testing._trace_report import print_summary, report_problem, write_report
from refimpl.testing._trace_run import Plan, check_local, check_on_dask
from refimpl.testing._trace_spec import _EDGE_DTYPE, References, _TraceSpec
from refimpl.testing._trace_specs import SPECS, TRACE_ONLY
from refimpl.testing._traces import _SUFFIXES as _SUFFIX_FORMAT
from refimpl.testing._traces import (
    FORMATS,
    TraceError,
    dataset_columns,
    detect_format,
    parquet_rows,
    require_file,
    sniff_format,
)
from refimpl.testing.tolerances import TRACE, Tolerance

__all__ = ["EXIT_MISMATCH", "EXIT_OK", "EXIT_UNUSABLE", "SPECS", "TRACE_ONLY", "configure", "run"]

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_UNUSABLE = 2


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
    parser.add_argument(
        "trace",
        type=Path,
        help="the logged trace: .csv, .jsonl or .parquet; - reads standard input (the format from "
        "--format, else sniffed: Parquet's magic bytes, a JSON object per line, else CSV)",
    )
    parser.add_argument("--spec", required=True, help=f"required; one of: {', '.join(SPECS)}")
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a parameter of the spec (repeat), e.g. --param eta=1 (default: none; the spec "
        "says which it needs)",
    )
    parser.add_argument(
        "--report", type=Path, help="write a JSON report to this file (default: no report)"
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        help="trace format (default: from the suffix; for - or a pipe, sniffed from the content)",
    )
    parser.add_argument(
        "--dtype",
        choices=("float64", "float32", "bfloat16", "float16"),
        help="the dtype the trainer computed in: the tolerance is derived from it and the "
        "operation, row by row (see the tolerances page); default: tolerances.TRACE",
    )
    parser.add_argument(
        "--column",
        action="append",
        default=[],
        metavar="NAME=TRACE_COLUMN",
        help="read the spec's column NAME from the trace's column TRACE_COLUMN (repeat), e.g. "
        "--column weight=rollout_is_weights (default: the spec's own names)",
    )
    parser.add_argument(
        "--rtol", type=float, help="relative tolerance (default: per spec, tolerances.TRACE)"
    )
    parser.add_argument(
        "--atol", type=float, help="absolute tolerance (default: per spec, tolerances.TRACE)"
    )
    parser.add_argument(
        "--max-show",
        type=_count,
        default=10,
        metavar="N",
        help="mismatching rows to show and to put in the report, N >= 0 (default 10; 0 shows "
        "none: the summary and the exit code only)",
    )
    parser.add_argument(
        "--chunk-rows",
        type=int,
        default=1 << 18,
        help="values per column in a streamed Parquet batch; text blocks are at most 16 bytes "
        "per chunk row and 8 MiB (default 262144: memory stays bounded whatever the length of "
        "the trace)",
    )
    parser.add_argument(
        "--dask",
        action="store_true",
        help="check a Parquet file or a partitioned Parquet dataset (a directory) on Dask, one "
        "task per file, with the same verdict and report (default: on this machine)",
    )
    parser.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="a running Dask scheduler, e.g. tcp://10.0.0.5:8786 (implies --dask; default: a "
        "LocalCluster of --workers processes started for the run)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes of the LocalCluster started by --dask (default 2)",
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
    shown = ", ".join([*spec.inputs, *(f"{n} (lists)" for n in spec.lists)])
    return [shown + (f"; optional {', '.join(spec.optional)}" if spec.optional else "")]


class _Unusable(RefimplError):
    """The command cannot run as asked (exit code 2): a member of refimpl's exception family."""


def _refuse_rounded(key: str, text: str, number: float) -> None:
    """Refuse a number written finite and nonzero that float64 reads as infinity or 0
    (``1e400``, ``1e-400``): a later message would quote ``inf`` or ``0.0``, which the user did
    not write. An ``inf`` or ``nan`` written as such is left to the spec's own rule."""
    if math.isfinite(number) and (number != 0.0 or not _nonzero(text)):
        return
    if not math.isfinite(number) and not any(c.isdigit() for c in text):
        return  # written as inf or nan
    reads = ("-infinity" if number < 0 else "infinity") if math.isinf(number) else "0"
    raise _Unusable(
        f"--param {key} must be a number within float64's range; got {key}={text.strip()!r}, "
        f"which float64 reads as {reads}. Pass a value between 1e-308 and 1e308 in magnitude "
        "(or 0)."
    )


def _nonzero(text: str) -> bool:
    """Whether a decimal number's text is nonzero (``"1e-400"`` is; ``"0e5"`` is not)."""
    try:
        return Decimal(text.strip()) != 0
    except ArithmeticError:
        return False


def _parse_params(spec: _TraceSpec, raw: list[str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for item in raw:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise _Unusable(f"--param must be KEY=VALUE; got {item!r}. Write e.g. --param eta=1.")
        kinds = {**spec.params, **spec.options}
        if key not in kinds:
            valid = ", ".join(kinds) or "none"
            raise _Unusable(
                f"unknown parameter {key!r} for spec {spec.name!r} (its parameters: {valid})."
            )
        if key in params:
            raise _Unusable(
                f"--param {key} is given twice (last {item!r}); pass each parameter once."
            )
        kind = kinds[key]
        if kind is str:
            params[key] = value.strip()
            continue
        try:
            params[key] = int(value) if kind is int else float(value)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise _Unusable(
                f"--param {key} must be {what}; got {key}={value!r}. Pass e.g. {key}=1."
            ) from None
        if kind is not int:
            _refuse_rounded(key, value, params[key])
    missing = [k for k in spec.params if k not in params]
    if missing:
        example = " ".join(f"--param {k}=..." for k in missing)
        raise _Unusable(
            f"spec {spec.name!r} needs parameter(s) {', '.join(missing)}: add {example}."
        )
    return params


def run(args: argparse.Namespace) -> int:
    """Check the trace; print a summary; return the exit code (0, 1 or 2)."""
    report: dict[str, Any] = {
        "trace": str(args.trace),
        "spec": args.spec,
        "params": {},
    }
    if args.report is not None:
        problem = report_problem(args.report, [args.trace])
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
        problem = write_report(args.report, report)
        if problem is not None:
            print(f"refimpl check: error: {problem}", file=sys.stderr)
            return EXIT_UNUSABLE
    return code


def _run(args: argparse.Namespace, report: dict[str, Any]) -> int:
    spec = SPECS.get(args.spec)
    if spec is None:
        raise _Unusable(f"unknown spec {args.spec!r}; use one of: {', '.join(SPECS)}.")
    params = _parse_params(spec, args.param)
    report["params"] = params
    refimpl = References()
    if not hasattr(refimpl, spec.reference):
        raise _Unusable(
            f"refimpl.{spec.reference} is not available in the installed refimpl; upgrade it."
        )
    try:
        spec.probe(refimpl, params)
    except (ValueError, TypeError) as exc:
        raise _Unusable(f"invalid --param for spec {spec.name!r}: {exc}") from None
    if spec.found_from is not None and spec.found_from in params:
        spec = replace(spec, found=params[spec.found_from])
    default = TRACE.get(spec.name, Tolerance(rtol=1e-5, atol=1e-8))
    tol = Tolerance(
        rtol=default.rtol if args.rtol is None else args.rtol,
        atol=default.atol if args.atol is None else args.atol,
    )
    for option, value in (("--rtol", args.rtol), ("--atol", args.atol)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise _Unusable(
                f"{option} must be finite and >= 0 (a tolerance); got {option} {value}. Pass e.g. "
                f"{option} 1e-9, or leave it out for the spec's default ({default._asdict()})."
            )
    if args.chunk_rows < 1:
        raise _Unusable(f"--chunk-rows must be >= 1; got {args.chunk_rows}.")
    if args.workers is not None and args.workers < 1:
        raise _Unusable(f"--workers must be >= 1 (Dask worker processes); got {args.workers}.")
    report["columns"] = _parse_columns(spec, args.column)
    report["dtype"] = args.dtype
    _EDGE_DTYPE["dtype"] = args.dtype or "float64"
    with tempfile.TemporaryDirectory(prefix="refimpl-check-") as spool:
        trace = _readable(args.trace, Path(spool))
        try:
            return _check(args, report, spec, params, tol, trace)
        except TraceError as exc:
            if trace != args.trace:  # name what the user passed, not the spooled copy
                raise TraceError(str(exc).replace(repr(str(trace)), _shown(args.trace))) from None
            raise


def _parse_columns(spec: _TraceSpec, raw: list[str]) -> dict[str, str]:
    """``--column NAME=TRACE_COLUMN``: the spec's column names and the trace's."""
    known = [*spec.inputs, *spec.lists, *spec.optional, *(spec.found_choices or (spec.found,))]
    if spec.name == "staleness":
        known += ["min_version", "versions"]
    out: dict[str, str] = {}
    for item in raw:
        name, sep, column = (x.strip() for x in item.partition("="))
        if not sep or not name or not column:
            raise _Unusable(
                f"--column must be NAME=TRACE_COLUMN; got {item!r}. Write e.g. "
                "--column weight=rollout_is_weights."
            )
        if name not in known:
            raise _Unusable(
                f"--column names {name!r}, which spec {spec.name!r} does not read (its columns: "
                f"{', '.join(known)})."
            )
        if name in out:
            raise _Unusable(f"--column {name} is given twice; map each column once.")
        twin = next((k for k, v in out.items() if v == column), None)
        if twin is not None:
            raise _Unusable(
                f"--column {twin}={column} and --column {name}={column} read one trace column as "
                f"two of the spec's; map each to its own column."
            )
        out[name] = column
    return out


def _shown(trace: Path) -> str:
    return "standard input" if str(trace) == "-" else repr(str(trace))


def _readable(trace: Path, spool: Path) -> Path:
    """A regular file with the trace: the path itself, or a copy of standard input (``-``), of a
    pipe or of a device (``/dev/null``, ``<(...)``), which cannot be read twice or seeked."""
    if str(trace) != "-" and not trace.exists():
        require_file(trace)  # a missing file, a symlink loop: named before the format is guessed
    if str(trace) != "-" and (trace.is_file() or trace.is_dir()):
        return trace  # read_chunks names a directory that is not a dataset
    copy = spool / "trace"
    try:
        with copy.open("wb") as out:
            if str(trace) == "-":
                shutil.copyfileobj(sys.stdin.buffer, out, 1 << 20)
            else:
                with trace.open("rb") as source:
                    shutil.copyfileobj(source, out, 1 << 20)
    except OSError as exc:
        raise TraceError(
            f"{_shown(trace)} could not be read ({exc.strerror or exc}). Pass a readable trace."
        ) from None
    return copy


def _check(
    args: argparse.Namespace,
    report: dict[str, Any],
    spec: _TraceSpec,
    params: dict[str, Any],
    tol: Tolerance,
    trace: Path,
) -> int:
    if args.format is not None or (trace == args.trace and str(trace) != "-"):
        fmt = _dataset_format(trace, args.format) or detect_format(trace, args.format)
    else:  # standard input or a pipe: the suffix, else the first bytes
        fmt = _SUFFIX_FORMAT.get(args.trace.suffix.lower()) or sniff_format(trace) or "csv"
    report.update(format=fmt, tolerance=tol._asdict(), reference=f"refimpl.{spec.reference}")
    inputs = list(spec.inputs)
    lists: list[str] = list(spec.lists)
    mapping: dict[str, str] = report.get("columns", {})
    if spec.name == "staleness":
        inputs, lists = _staleness_columns(trace, fmt, mapping)
    elif spec.layout is not None:
        inputs, lists = spec.layout(trace, fmt, mapping, params)
    plan = Plan(
        spec=spec.name,
        found=spec.found,
        params=params,
        tol=tol,
        mapping=mapping,
        inputs=tuple(inputs),
        lists=tuple(lists),
        chunk_rows=args.chunk_rows,
        max_show=args.max_show,
        dtype=args.dtype,
    )
    if args.dask or args.scheduler is not None:
        if fmt != "parquet":
            raise _Unusable(
                f"--dask checks a Parquet file or a partitioned Parquet dataset (a directory); "
                f"this trace is {fmt}. Convert it to Parquet, or drop --dask."
            )
        tally = check_on_dask(plan, spec, trace, args.scheduler, args.workers)
    else:
        tally = _check_here(args, plan, spec, trace, fmt)
    if tally.rows == 0:
        raise TraceError(
            f"{_shown(args.trace)} has no rows: nothing was checked, and an empty trace cannot "
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
    print_summary(spec, params, tol, tally, args.trace, fmt, args.dtype)
    return code


def _check_here(
    args: argparse.Namespace, plan: Plan, spec: _TraceSpec, trace: Path, fmt: str
) -> _Tally:
    """The trace checked on this machine, with a progress bar on stderr (a terminal's)."""
    if _process.own_process():  # the allocators of a program that calls main() are its own
        _system_memory_pool()
        _reuse_freed_memory()
    shown = sys.stderr.isatty() if args.progress is None else args.progress
    if not shown:  # no bar: tqdm is not even imported (0.05 s of CPU, a tenth of a start-up)
        return check_local(plan, spec, trace, fmt, lambda done: None)
    from tqdm import tqdm

    total = trace.stat().st_size if trace.is_file() else 0
    unit = "rows" if fmt == "parquet" else "B"
    if fmt == "parquet":
        total = parquet_rows(trace)
    with tqdm(
        total=total,
        unit=unit,
        unit_scale=True,
        file=sys.stderr,
        disable=False,
        desc=f"refimpl check {spec.name}",
        leave=False,
    ) as bar:

        def progress(done: int) -> None:
            bar.update(done - bar.n)

        return check_local(plan, spec, trace, fmt, progress)


def _system_memory_pool() -> None:
    """pyarrow's buffers from the C library's allocator, unless ``ARROW_DEFAULT_MEMORY_POOL``
    chooses: pyarrow's default (mimalloc) returns the pages of each chunk to the system and
    faults them in again for the next, which cost a Parquet check a third of its CPU time in
    system time (the C allocator reuses them). Set in the command's own process only
    (:func:`refimpl._process.own_process`)."""
    if "ARROW_DEFAULT_MEMORY_POOL" in os.environ:
        return
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())


#: freed memory glibc keeps at the top of its heap during a check (blocks of up to
#: ``HEAP_BLOCK_MAX``, 32 MiB, come from the heap instead of their own mapping)
_TRIM_THRESHOLD = 512 << 20


def _reuse_freed_memory() -> None:
    """Keep freed blocks in the C library's heap for the next chunk, unless the environment tunes
    glibc's allocator itself (``GLIBC_TUNABLES`` or a ``MALLOC_*`` variable).

    Every chunk allocates its buffers again (the bytes read, the parsed columns, numpy's
    temporaries), a few MiB each. glibc maps a block that large on its own and unmaps it when it
    is freed, or trims the heap's top, so each chunk's pages were faulted in and zeroed again:
    123,000 page faults and 0.34 s of system time for the blocks of a 10^7-row CSV alone, 0.09 s
    with the blocks kept. Peak memory changes little, since the blocks kept are the next chunk's
    (CSV checks of 10^7 rows: within 25 MiB). Set in the command's own process only
    (:func:`refimpl._process.own_process`); a C library other than glibc is left as it is."""
    if "malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        return
    if any(name.startswith("MALLOC_") for name in os.environ):
        return
    libc = _process.glibc()
    if libc is not None:
        libc.mallopt(_process.M_MMAP_THRESHOLD, _process.HEAP_BLOCK_MAX)
        libc.mallopt(_process.M_TRIM_THRESHOLD, _TRIM_THRESHOLD)


def _dataset_format(trace: Path, given: str | None) -> str | None:
    """A directory is a partitioned Parquet dataset unless ``--format`` or its suffix says else
    (then the reader refuses it as a directory)."""
    if not trace.is_dir():
        return None
    return given or _SUFFIX_FORMAT.get(trace.suffix.lower()) or "parquet"


def _staleness_columns(
    path: Path, fmt: str, mapping: dict[str, str] | None = None
) -> tuple[list[str], list[str]]:
    """``trained_step`` plus ``versions`` (list column) if the trace has it, else ``min_version``."""
    names = _column_names(path, fmt)
    mapping = mapping or {}
    if names is not None and mapping.get("versions", "versions") in names:
        return ["trained_step"], ["versions"]
    if names is not None and names and mapping.get("min_version", "min_version") not in names:
        raise TraceError(
            f"{str(path)!r} has neither a 'min_version' nor a 'versions' column (columns found: "
            f"{', '.join(map(repr, names))}). Log the oldest token version of each sample as "
            "min_version, or every token's version as a list in versions."
        )
    return ["trained_step", "min_version"], []


def _column_names(path: Path, fmt: str) -> list[str] | None:
    if path.is_dir() and fmt == "parquet":  # a dataset: its first file's, and partition keys
        found, keys = dataset_columns(path)
        return [*found, *keys] if found else None
    if not path.is_file():
        return None
    if fmt == "csv":
        import csv

        with path.open("rb") as f:
            head = f.readline()
        if b"\x00" in head:
            return None  # not text: the reader says so
        try:
            return next(csv.reader([head.decode("utf-8-sig")]), [])
        except UnicodeDecodeError:
            return None
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
