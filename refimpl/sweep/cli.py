"""``refimpl sweep GRID.toml --out results.parquet``: run a parameter sweep.

Exit codes: 0 every cell succeeded; 1 some cells failed (their rows say why: an exception, a
``sys.exit`` or another ``BaseException`` of the cell, megabytes printed, a parameter changed in
place); 2 the grid or the options are invalid (checked before any cell runs: ``--out`` must name a
``.parquet`` file in an existing, writable directory, and neither it nor its journal may be the
grid file or the source file of a ``module:function`` kind, through any path or link), ``--out`` holds another grid's results, or the operating
system refused a read or a write (one line naming the path and the cause); 130 interrupted (rerun
the same command to resume).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``refimpl sweep``."""
    parser.add_argument("grid", metavar="GRID.toml", help="the grid file (TOML)")
    parser.add_argument(
        "--out",
        required=True,
        metavar="RESULTS.parquet",
        help="results file (required; Parquet, so its name must end in .parquet, in an existing "
        "directory); finished cells are journaled to RESULTS.parquet.journal.jsonl, and "
        "rerunning the same command resumes",
    )
    parser.add_argument(
        "--engine",
        choices=("local", "dask", "serial"),
        default="local",
        help="local: a process pool on this machine (default); dask: a Dask cluster (--scheduler, "
        "or a new local one); serial: in this process, for debugging",
    )
    parser.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        default=None,
        help="address of a running Dask scheduler, e.g. tcp://10.0.0.5:8786 (with --engine dask; "
        "default: none, start a local cluster)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="processes of the local pool or local Dask cluster (default: one per CPU)",
    )
    parser.add_argument(
        "--retry-failed",
        action="store_true",
        help="run again the cells that failed in an earlier run of the same grid (default: keep "
        "their records)",
    )
    parser.add_argument(
        "--quiet", action="store_true", help="no progress bar (default: a progress bar on stderr)"
    )


def _out_problem(out: str) -> str | None:
    """Why ``--out`` cannot take the results (``None`` if it can); checked before any cell runs."""
    path = Path(out)
    if path.suffix.lower() != ".parquet":
        return (
            f"--out {out!r} must end in .parquet (the results table is written as Parquet); got "
            + (f"the suffix {path.suffix!r}" if path.suffix else "no suffix")
            + f". Pass e.g. --out "
            f"{str(path.with_suffix('.parquet'))!r}, and convert afterwards if you need CSV."
        )
    fix = "Pass an --out path in an existing, writable directory (or create the directory)."
    if path.is_dir():
        return f"--out {out!r} is a directory, not a file. {fix}"
    directory = path.parent
    if not directory.is_dir():
        return f"--out {out!r}: the directory {str(directory)!r} does not exist. {fix}"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"--out {out!r}: no permission to write in {str(directory)!r}. {fix}"
    return None


def run(args: argparse.Namespace) -> int:
    """Run the sweep described by ``args``; return the exit code."""
    # Lazy, for `refimpl --help`'s start-up: the engine loads pyarrow, the kinds numpy and scipy.
    from refimpl._io import describe_os_error
    from refimpl.errors import InvalidArgument
    from refimpl.sweep.engine import MAX_WORKERS, journal_path
    from refimpl.sweep.engine import run as run_sweep
    from refimpl.sweep.grid import GridError, load_grid
    from refimpl.sweep.results import refuse_outputs_naming_the_grid

    problem = _out_problem(args.out)
    if problem is None and args.workers is not None and not 1 <= args.workers <= MAX_WORKERS:
        problem = (
            f"--workers must be in [1, {MAX_WORKERS}] (processes of the pool); got "
            f"{args.workers}. Pass e.g. --workers 2, or leave it out for one per CPU."
        )
    if problem is not None:
        print(f"refimpl sweep: {problem}", file=sys.stderr)
        return 2
    try:
        grid = load_grid(args.grid)
    except OSError as exc:  # missing, a symlink loop or a dangling link, permission denied, EIO
        if isinstance(exc, FileNotFoundError) and not os.path.islink(args.grid):
            line = f"GRID.toml {args.grid!r}: no such file"
        else:
            line = describe_os_error(exc, args.grid, action="read GRID.toml")
        print(
            f"refimpl sweep: {line}. Pass the path of a grid file (TOML; see "
            "docs/howto/sweeps.md).",
            file=sys.stderr,
        )
        return 2
    except GridError as exc:
        print(f"refimpl sweep: {exc}", file=sys.stderr)
        return 2
    try:  # before anything is written: --out or its journal must not be the grid (or kind) file
        refuse_outputs_naming_the_grid(args.out, args.grid, option="--out", kind=grid.kind)
    except InvalidArgument as exc:
        print(f"refimpl sweep: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"refimpl sweep: {describe_os_error(exc, action='examine --out')}", file=sys.stderr)
        return 2
    if args.scheduler is not None and args.engine != "dask":
        print(
            "refimpl sweep: --scheduler needs --engine dask (the address of a Dask scheduler).",
            file=sys.stderr,
        )
        return 2
    try:
        table = run_sweep(
            grid,
            out=args.out,
            engine=args.engine,
            workers=args.workers,
            scheduler=args.scheduler,
            retry_failed=args.retry_failed,
            progress=not args.quiet,
        )
    except KeyboardInterrupt:
        print(
            f"refimpl sweep: interrupted. Finished cells are kept in {journal_path(args.out)} "
            f"and {args.out}; rerun the same command to resume.",
            file=sys.stderr,
        )
        return 130
    except OSError as exc:
        line = describe_os_error(exc) if exc.errno is not None else str(exc)
        print(f"refimpl sweep: {line}", file=sys.stderr)
        return 2
    except (ValueError, ImportError) as exc:
        print(f"refimpl sweep: {exc}", file=sys.stderr)
        return 2
    status = table.column("status").to_pylist()
    failed = sum(s != "ok" for s in status)
    print(
        f"refimpl sweep: {len(status)} of {grid.n_cells} cells in {args.out}; "
        f"{len(status) - failed} ok, {failed} failed.",
        file=sys.stderr,
    )
    if failed:
        print(
            "refimpl sweep: see the error column for why; --retry-failed reruns those cells.",
            file=sys.stderr,
        )
        return 1
    return 0
