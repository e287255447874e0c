"""The trace gate against the columnar engines: ``refimpl check`` beside polars, duckdb and pyarrow.

For every spec × format × size it generates a trace (a correct one with a planted error in one row
of a thousand), then runs, each in its own subprocess, one after the other:

- ``refimpl check`` (the CLI a CI job runs);
- a **polars** lazy query and a **duckdb** SQL query that compute the *same* predicate (the
  reference value from the inputs, ``|found - expected| <= atol + rtol·|expected|`` with the spec's
  tolerance, the count of rows that fail) on the same file;
- **pyarrow** reading the columns the check needs (the floor: a check cannot read faster).

It prints wall time, CPU time (user + system, all threads) and peak RSS of each (from
``resource.getrusage(RUSAGE_CHILDREN)`` of a wrapper process around each run), checks that every
tool counts the same rows and mismatches, and prints ``ratio`` = refimpl's wall time / the faster
of polars and duckdb, and ``cpu`` = the same ratio of CPU times (steadier on a loaded machine,
where wall time mostly measures the scheduler). Sizes count rows for the token specs and tokens
for the sequence spec (one row per sequence, ``--tokens`` per sequence on average).

    python benchmarks/bench_trace_gate.py --rows 1e5,1e6 --specs tis --formats csv,parquet
    python benchmarks/bench_trace_gate.py --json out.json --plot docs/_static/trace-gate.png

Fairness: each trace is first read whole by pyarrow (the floor, and it puts the file in the page
cache for every tool); refimpl runs from compiled bytecode, as an installed package does (a
``PYTHONPYCACHEPREFIX`` in the run's folder, filled by a warm-up check of each spec and format),
even where the environment sets ``PYTHONDONTWRITEBYTECODE``. With ``--rerun-above R`` a cell whose
ratio exceeds ``R`` is measured a second time at once and each tool keeps its faster run. The
engines use every core (polars and duckdb run threads). Timings are of a shared machine unless it
is idle: compare the ratios of one run, not numbers across runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

CAP = 2.0
ETA = 2
RTOL, ATOL = 1e-5, 1e-8  # tolerances.TRACE for tis and tis_sequence (staleness_mask: exact)
BATCH = 1_000_000  # rows generated and written at a time
FORMATS = ("csv", "jsonl", "parquet")
SPECS = ("tis", "staleness_mask", "tis_sequence")

# --- traces ----------------------------------------------------------------------------------


def _tis_batch(rng: np.random.Generator, n: int) -> pa.Table:
    lb = -rng.exponential(1.0, n)
    lt = lb + rng.normal(0.0, 0.3, n)
    w = np.minimum(np.exp(np.minimum(lt - lb, math.log(CAP))), CAP)
    return pa.table({"logp_target": lt, "logp_behavior": lb, "weight": _plant(rng, w)})


def _staleness_batch(rng: np.random.Generator, n: int) -> pa.Table:
    s = rng.poisson(2.0, n).astype(np.int64)
    w = (s <= ETA).astype(np.float64)
    bad = rng.random(n) < 1e-3
    w[bad] = 1.0 - w[bad]
    return pa.table({"staleness": s, "weight": w})


def _sequence_batch(rng: np.random.Generator, n: int, tokens: int) -> pa.Table:
    sizes = rng.integers(1, 2 * tokens, max(1, n // tokens))
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int32)
    lb = -rng.exponential(1.0, int(offsets[-1]))
    lt = lb + rng.normal(0.0, 0.05, lb.size)
    total = np.add.reduceat(lt - lb, offsets[:-1])
    w = np.minimum(np.exp(np.minimum(total, math.log(CAP))), CAP)
    return pa.table(
        {
            "logp_target": pa.ListArray.from_arrays(pa.array(offsets), pa.array(lt)),
            "logp_behavior": pa.ListArray.from_arrays(pa.array(offsets), pa.array(lb)),
            "weight": _plant(rng, w),
        }
    )


def _plant(rng: np.random.Generator, w: np.ndarray) -> np.ndarray:
    """One row in a thousand off by 1% (a bug every tool must count)."""
    bad = rng.random(w.size) < 1e-3
    out = w.copy()
    out[bad] *= 1.01
    return out


def batches(spec: str, rows: int, tokens: int, seed: int = 0) -> Iterator[pa.Table]:
    rng = np.random.default_rng(seed)
    for start in range(0, rows, BATCH):
        n = min(BATCH, rows - start)
        if spec == "tis":
            yield _tis_batch(rng, n)
        elif spec == "staleness_mask":
            yield _staleness_batch(rng, n)
        else:
            yield _sequence_batch(rng, n, tokens)


def _csv_lists(table: pa.Table) -> pa.Table:
    """List columns as CSV text, ``[a,b,c]`` (what refimpl, polars and duckdb all parse)."""
    frame: Any = pl.from_arrow(table)
    exprs = [
        pl.concat_str(
            pl.lit("["), pl.col(c).cast(pl.List(pl.String)).list.join(","), pl.lit("]")
        ).alias(c)
        if pa.types.is_list(table.schema.field(c).type)
        else pl.col(c)
        for c in table.column_names
    ]
    out: pa.Table = frame.select(exprs).to_arrow()
    return out


def write_trace(path: Path, spec: str, fmt: str, rows: int, tokens: int) -> int:
    """Write the trace; return its number of rows (sequences for the sequence spec)."""
    written = 0
    if fmt == "parquet":
        writer: Any = None
        for table in batches(spec, rows, tokens):
            writer = writer or pq.ParquetWriter(path, table.schema)
            writer.write_table(table, row_group_size=BATCH)
            written += table.num_rows
        writer.close()
    elif fmt == "csv":
        writer = None
        for table in batches(spec, rows, tokens):
            table = _csv_lists(table)
            writer = writer or pacsv.CSVWriter(str(path), table.schema)
            writer.write_table(table)
            written += table.num_rows
        writer.close()
    else:
        with path.open("wb") as fh:
            for table in batches(spec, rows, tokens):
                pl.from_arrow(table).write_ndjson(fh)  # type: ignore[union-attr]
                written += table.num_rows
    return written


# --- the tools -------------------------------------------------------------------------------


def _expected_sql(spec: str) -> str:
    if spec == "tis":
        return f"least(exp(least(logp_target - logp_behavior, ln({CAP}))), {CAP})"
    if spec == "staleness_mask":
        return f"CAST(staleness <= {ETA} AS DOUBLE)"
    return f"least(exp(least(list_sum(logp_target) - list_sum(logp_behavior), ln({CAP}))), {CAP})"


def _duckdb_source(fmt: str, spec: str, path: Path) -> str:
    if fmt == "parquet":
        return f"read_parquet('{path}')"
    if fmt == "jsonl":
        return f"read_json('{path}', format='newline_delimited')"
    if spec == "tis_sequence":
        return (
            f"(SELECT CAST(logp_target AS DOUBLE[]) AS logp_target, CAST(logp_behavior AS "
            f"DOUBLE[]) AS logp_behavior, weight FROM read_csv('{path}', types={{'logp_target': "
            f"'VARCHAR', 'logp_behavior': 'VARCHAR'}}))"
        )
    return f"read_csv('{path}')"


def duckdb_script(spec: str, fmt: str, path: Path) -> str:
    atol, rtol = (0.0, 0.0) if spec == "staleness_mask" else (ATOL, RTOL)
    query = (
        f"SELECT count(*), count(*) FILTER (WHERE NOT (abs(weight - e) <= {atol} + {rtol} * abs(e)))"
        f" FROM (SELECT weight, {_expected_sql(spec)} AS e FROM {_duckdb_source(fmt, spec, path)})"
    )
    return (
        "import duckdb\ncon = duckdb.connect()\ncon.execute('SET enable_progress_bar = false')\n"
        f"print(*con.execute({query!r}).fetchall()[0])\n"
    )


def polars_script(spec: str, fmt: str, path: Path) -> str:
    atol, rtol = (0.0, 0.0) if spec == "staleness_mask" else (ATOL, RTOL)
    scan = {"csv": "scan_csv", "jsonl": "scan_ndjson", "parquet": "scan_parquet"}[fmt]
    if spec == "tis":
        d = 'pl.col("logp_target") - pl.col("logp_behavior")'
    elif spec == "staleness_mask":
        d = None
    else:
        lists = ["logp_target", "logp_behavior"]
        if fmt == "csv":
            t, b = (
                f'pl.col("{c}").str.strip_chars("[]").str.split(",").cast(pl.List(pl.Float64))'
                for c in lists
            )
        else:
            t, b = (f'pl.col("{c}")' for c in lists)
        d = f"({t}.list.sum() - {b}.list.sum())"
    if d is None:
        e = f'(pl.col("staleness") <= {ETA}).cast(pl.Float64)'
    else:
        e = f"pl.min_horizontal(({d}).clip(upper_bound=math.log({CAP})).exp(), pl.lit({CAP}))"
    return (
        "import math, polars as pl\n"
        f"q = pl.{scan}({str(path)!r}).select(pl.col('weight'), ({e}).alias('e'))\n"
        f"bad = ~((pl.col('weight') - pl.col('e')).abs() <= {atol} + {rtol} * pl.col('e').abs())\n"
        "out = q.select(pl.len().alias('n'), bad.sum().alias('bad')).collect(engine='streaming')\n"
        "print(out['n'][0], out['bad'][0])\n"
    )


def pyarrow_script(fmt: str, path: Path) -> str:
    read = {
        "csv": "import pyarrow.csv as r; t = r.read_csv",
        "jsonl": "import pyarrow.json as r; t = r.read_json",
        "parquet": "import pyarrow.parquet as r; t = r.read_table",
    }[fmt]
    return f"{read}({str(path)!r})\nprint(t.num_rows, '-')\n"


def refimpl_command(spec: str, path: Path) -> list[str]:
    param = f"eta={ETA}" if spec == "staleness_mask" else f"cap={CAP}"
    return [
        *(sys.executable, "-m", "refimpl", "check", str(path), "--spec", spec),
        *("--param", param, "--max-show", "0", "--no-progress"),
    ]


# Runs a command and reports its peak RSS (KiB on Linux) on the last line of stderr.
_WRAP = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stdout.write(done.stdout)
sys.stderr.write(done.stderr[-2000:])
use = resource.getrusage(resource.RUSAGE_CHILDREN)
print(use.ru_utime + use.ru_stime, use.ru_maxrss, file=sys.stderr)
sys.exit(done.returncode)
"""


#: the environment of every measured run (set by ``main``: compiled bytecode for refimpl)
ENV: dict[str, str] = dict(os.environ)


def measure(command: list[str]) -> dict[str, Any]:
    """Wall and CPU seconds, peak RSS (MiB), exit code and stdout of ``command`` in its own
    process."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _WRAP, *command],
        capture_output=True,
        text=True,
        check=False,
        env=ENV,
    )
    seconds = time.perf_counter() - start
    lines = done.stderr.strip().splitlines()
    cpu, rss = lines[-1].split()
    return {
        "seconds": seconds,
        "cpu": float(cpu),
        "rss_mib": int(rss) / 1024,
        "code": done.returncode,
        "stdout": done.stdout,
        "stderr": "\n".join(lines[:-1])[-500:],
    }


def _counts(tool: str, run: dict[str, Any]) -> tuple[int, int] | None:
    if tool == "refimpl":
        for line in run["stdout"].splitlines():
            if line.startswith("MISMATCH:"):
                words = line.replace(",", "").split()
                return int(words[3]), int(words[1])
            if line.startswith("OK:"):
                return int(line.replace(",", "").split()[2]), 0
        return None
    if tool == "pyarrow" or run["code"] != 0:
        return None
    try:
        rows, bad = run["stdout"].strip().splitlines()[-1].split()
        return int(rows), int(bad)
    except (IndexError, ValueError):
        return None


def _run_tools(tools: dict[str, list[str]], result: dict[str, Any]) -> None:
    """Measure every tool once; a tool measured before keeps its faster run."""
    for tool, command in tools.items():
        run = measure(command)
        new = {k: run[k] for k in ("seconds", "cpu", "rss_mib", "code")}
        new["counts"] = _counts(tool, run)
        if run["code"] not in (0, 1):
            new["error"] = run["stderr"]
        old = result.get(tool)
        if old is None or new["seconds"] < old["seconds"]:
            result[tool] = new
        if old is not None:
            result[tool]["runs"] = [old["seconds"], new["seconds"]]


def _ratios(result: dict[str, Any]) -> None:
    for key, what in (("ratio", "seconds"), ("cpu_ratio", "cpu")):
        peers = [result[p][what] for p in ("polars", "duckdb") if result[p]["code"] == 0]
        result[key] = result["refimpl"][what] / min(peers) if peers else math.nan


def bench_one(
    spec: str, fmt: str, rows: int, tokens: int, folder: Path, rerun_above: float = math.inf
) -> dict[str, Any]:
    path = folder / f"{spec}.{fmt}"
    trace_rows = write_trace(path, spec, fmt, rows, tokens)
    tools = {
        "pyarrow": [sys.executable, "-c", pyarrow_script(fmt, path)],  # first: warms the cache
        "refimpl": refimpl_command(spec, path),
        "polars": [sys.executable, "-c", polars_script(spec, fmt, path)],
        "duckdb": [sys.executable, "-c", duckdb_script(spec, fmt, path)],
    }
    result: dict[str, Any] = {
        "spec": spec,
        "format": fmt,
        "size": rows,
        "trace_rows": trace_rows,
        "bytes": path.stat().st_size,
    }
    _run_tools(tools, result)
    _ratios(result)
    result["measured"] = 1
    if result["ratio"] > rerun_above:
        _run_tools(tools, result)
        _ratios(result)
        result["measured"] = 2
    path.unlink()
    counts = {t: result[t]["counts"] for t in ("refimpl", "polars", "duckdb")}
    result["agree"] = len({c for c in counts.values() if c is not None}) == 1 and None not in (
        counts.values()
    )
    return result


# --- the table and the plot ------------------------------------------------------------------


def show(r: dict[str, Any]) -> str:
    cells = [f"{r['spec']:<14}", f"{r['format']:<7}", f"{r['size']:>9.0e}"]
    for tool in ("refimpl", "polars", "duckdb", "pyarrow"):
        t = r[tool]
        mark = "" if t["code"] in (0, 1) else "!"
        cells.append(f"{t['seconds']:7.2f}s {t['cpu']:6.2f}c {t['rss_mib']:5.0f}M{mark}")
    cells.append(f"{r['ratio']:5.2f}x")
    cells.append(f"{r['cpu_ratio']:5.2f}x" + ("*" if r.get("measured") == 2 else " "))
    cells.append("same counts" if r["agree"] else f"COUNTS DIFFER {r['refimpl']['counts']}")
    return "  ".join(cells)


HEADER = (
    f"{'spec':<14}  {'format':<7}  {'rows':>9}  "
    + "  ".join(f"{t:>23}" for t in ("refimpl", "polars", "duckdb", "pyarrow read"))
    + "  ratio    cpu   counts   (s: wall, c: CPU seconds, M: peak RSS MiB; *: best of 2 runs)"
)


def prepare(folder: Path, specs: list[str], formats: list[str], tokens: int) -> None:
    """Compiled bytecode for refimpl in the run's folder, as an installed package has it: one
    small check of each spec and format, not measured."""
    ENV.pop("PYTHONDONTWRITEBYTECODE", None)
    ENV["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
    # the engines refimpl imports only for a large trace (duckdb, polars), compiled too
    measure([sys.executable, "-c", "import duckdb, polars, pyarrow.json, pyarrow.parquet"])
    for spec in specs:
        for fmt in formats:
            path = folder / f"warm-{spec}.{fmt}"
            write_trace(path, spec, fmt, 1000, tokens)
            measure(refimpl_command(spec, path))
            path.unlink()


def plot(results: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    specs = sorted({r["spec"] for r in results}, key=SPECS.index)
    fig, axes = plt.subplots(2, len(specs), figsize=(4.2 * len(specs), 6.5), squeeze=False)
    styles = {"csv": "-", "jsonl": "--", "parquet": ":"}
    colors = {"refimpl": "C0", "polars": "C1", "duckdb": "C2", "pyarrow": "C7"}
    for j, spec in enumerate(specs):
        for fmt in FORMATS:
            rs = sorted(
                (r for r in results if r["spec"] == spec and r["format"] == fmt),
                key=lambda r: r["size"],
            )
            if not rs:
                continue
            x = [r["size"] for r in rs]
            for tool, color in colors.items():
                kw = {"color": color, "linestyle": styles[fmt], "marker": "o", "markersize": 3}
                label = f"{tool} {fmt}" if j == 0 else None
                axes[0, j].plot(x, [r[tool]["seconds"] for r in rs], label=label, **kw)
                axes[1, j].plot(x, [r[tool]["rss_mib"] for r in rs], **kw)
        axes[0, j].set_title(spec)
        for i, what in enumerate(("wall time (s)", "peak RSS (MiB)")):
            axes[i, j].set_xscale("log")
            axes[i, j].set_yscale("log")
            axes[i, j].set_ylabel(what)
            axes[i, j].grid(True, which="both", alpha=0.3)
        axes[1, j].set_xlabel("rows (tokens for tis_sequence)")
    fig.legend(loc="lower center", ncol=6, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(out, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1e5,1e6,1e7,3e7", help="sizes, comma-separated")
    parser.add_argument("--specs", default=",".join(SPECS))
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--tokens", type=int, default=64, help="mean tokens per sequence")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--plot", type=Path, help="write the plot (PNG) here")
    parser.add_argument("--dir", type=Path, help="where traces are written (default: a temp dir)")
    parser.add_argument(
        "--rerun-above",
        type=float,
        default=math.inf,
        metavar="R",
        help="measure a cell whose ratio exceeds R a second time, each tool keeping its faster "
        "run (default: never)",
    )
    args = parser.parse_args(argv)
    sizes = [int(float(x)) for x in args.rows.split(",")]
    specs, formats = args.specs.split(","), args.formats.split(",")
    folder = Path(tempfile.mkdtemp(prefix="bench-trace-gate-", dir=args.dir))
    results = []
    try:
        prepare(folder, specs, formats, args.tokens)
        print(f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f} at start")
        print(HEADER, flush=True)
        for size in sizes:
            for spec in specs:
                for fmt in formats:
                    results.append(
                        bench_one(spec, fmt, size, args.tokens, folder, args.rerun_above)
                    )
                    print(show(results[-1]), flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    worst = max(results, key=lambda r: r["ratio"])
    print(
        f"largest ratio {worst['ratio']:.2f}x ({worst['spec']}, {worst['format']}, {worst['size']:.0e})"
    )
    for key, what in (("ratio", "wall"), ("cpu_ratio", "CPU")):
        within = sum(r[key] <= 1.2 for r in results)
        print(f"{what} time within 1.2x of the faster engine: {within} of {len(results)} cells")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    if args.plot:
        plot(results, args.plot)
    return 0 if all(r["agree"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
