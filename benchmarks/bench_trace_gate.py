"""The trace gate against the columnar engines: ``refimpl check`` beside polars, duckdb and pyarrow.

For every spec × format × size it generates a trace (a correct one with a planted error in one row
of a thousand), then runs, each in its own subprocess, one after the other:

- ``refimpl check`` (the CLI a CI job runs);
- a **polars** lazy query and a **duckdb** SQL query that compute the *same* predicate (the
  reference value from the inputs, ``|found - expected| <= atol + rtol·|expected|`` with the spec's
  tolerance, the count of rows that fail) on the same file;
- **pyarrow** reading the whole file (what a check that does not stream holds in memory).

With ``--floors`` it also times, per cell, each reader decoding the columns the check needs into
numpy arrays with nothing checked: refimpl's own reading (its allocator settings included),
pyarrow's, polars' and duckdb's streams. The fastest of them over the faster engine's whole query
is the least ratio a check can reach that computes its expected values from decoded arrays, as
refimpl's reference functions do (``decode only`` under the cell's line).

It prints wall time, CPU time (user + system, all threads) and peak RSS of each (from
``resource.getrusage(RUSAGE_CHILDREN)`` of a wrapper process around each run), checks that every
tool counts the same rows and mismatches, and prints ``ratio`` = refimpl's wall time / the faster
of polars and duckdb, and ``cpu`` = the same ratio of CPU times (steadier on a loaded machine,
where wall time mostly measures the scheduler). Sizes count rows for the token specs and tokens
for the sequence spec (one row per sequence, ``--tokens`` per sequence on average).

    python benchmarks/bench_trace_gate.py --rows 1e5,1e6 --specs tis --formats csv,parquet
    python benchmarks/bench_trace_gate.py --json out.json --plot docs/_static/trace-gate.png

Fairness: each trace is first read whole by pyarrow (it puts the file in the page cache for every
tool); refimpl runs from compiled bytecode, as an installed package does (a
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

from refimpl import _process
from refimpl.testing.check_cli import _TRIM_THRESHOLD

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


#: the columns each spec's check reads (the list columns of the sequence spec last)
COLUMNS = {
    "tis": (["logp_target", "logp_behavior", "weight"], []),
    "staleness_mask": (["staleness", "weight"], []),
    "tis_sequence": (["weight"], ["logp_target", "logp_behavior"]),
}
#: rows of each batch a decode floor takes (refimpl's default chunk)
FLOOR_BATCH = 262144


#: a view of an Arrow column's numbers, as refimpl takes it (pyarrow's own ``to_numpy`` would
#: import pandas, a quarter of a second that no reader needs)
_VIEW = (
    "import numpy as np\n"
    "def view(a):\n"
    "    kind = {'double': np.float64, 'int64': np.int64}[str(a.type)]\n"
    "    return np.frombuffer(a.buffers()[1], kind, count=len(a), offset=a.offset * 8)\n"
)


#: the allocator settings refimpl check makes in its own process (pyarrow's buffers from the C
#: library, glibc keeping freed blocks), so that pyarrow's floor does not pay page faults it avoids
_ALLOCATORS = (
    "import ctypes, pyarrow as pa\n"
    "pa.set_memory_pool(pa.system_memory_pool())\n"
    "try:\n"
    "    libc = ctypes.CDLL('libc.so.6')\n"
    f"    libc.mallopt({_process.M_MMAP_THRESHOLD}, {_process.HEAP_BLOCK_MAX})\n"
    f"    libc.mallopt({_process.M_TRIM_THRESHOLD}, {_TRIM_THRESHOLD})\n"
    "except (OSError, AttributeError):\n"  # not glibc: its allocator as it is
    "    pass\n"
)


def _floor_sink(numbers: str, lists: str) -> str:
    """Python that turns a batch's columns into numpy arrays and counts its rows."""
    return (
        f"    for c in {numbers}: view(b.column(c))\n"
        f"    for c in {lists}: view(b.column(c).flatten())\n"
        "    n += b.num_rows\n"
    )


def floor_scripts(spec: str, fmt: str, path: Path) -> dict[str, str]:
    """The decode floors: each engine streaming the columns the check reads into numpy arrays
    (list columns: their values), nothing checked. A check that computes its expected values
    from decoded arrays, as refimpl's reference functions do, cannot take less."""
    numbers, lists = COLUMNS[spec]
    cols = [*numbers, *lists]
    p = str(path)
    sink = _floor_sink(repr(numbers), repr(lists))
    if fmt == "parquet":
        pa_read = (
            "import pyarrow.parquet as pq\n"
            f"f = pq.ParquetFile({p!r}, pre_buffer=False, buffer_size=1 << 20)\n"
            f"it = f.iter_batches(batch_size={FLOOR_BATCH}, columns={cols!r}, use_threads=False)\n"
        )
    elif fmt == "jsonl":
        pa_read = (
            "import pyarrow as pa, pyarrow.json as pj\n"
            f"types = dict.fromkeys({numbers!r}, pa.float64())\n"
            f"types.update(dict.fromkeys({lists!r}, pa.list_(pa.float64())))\n"
            "opts = pj.ParseOptions(explicit_schema=pa.schema(list(types.items())))\n"
            f"it = pj.open_json({p!r}, parse_options=opts)\n"
        )
    else:
        pa_read = (
            "import pyarrow as pa, pyarrow.csv as pc, pyarrow.compute as cc\n"
            f"types = dict.fromkeys({numbers!r}, pa.float64())\n"
            f"types.update(dict.fromkeys({lists!r}, pa.string()))\n"
            f"it = pc.open_csv({p!r}, convert_options=pc.ConvertOptions(column_types=types))\n"
        )
    if fmt == "csv" and lists:  # the list cells split and cast, as every reader must
        split = (
            "    b = pa.RecordBatch.from_pydict({c: cc.cast(cc.split_pattern(cc.utf8_trim("
            "b.column(c), characters='[]'), pattern=','), pa.list_(pa.float64())) if c in "
            f"{lists!r} else b.column(c) for c in b.schema.names}})\n"
        )
    else:
        split = ""
    pyarrow_floor = (
        _VIEW + _ALLOCATORS + pa_read + "n = 0\nfor b in it:\n" + split + sink + "print(n, '-')\n"
    )
    scan = {"csv": "scan_csv", "jsonl": "scan_ndjson", "parquet": "scan_parquet"}[fmt]
    if fmt == "csv":
        exprs = [f'pl.col("{c}")' for c in numbers] + [
            f'pl.col("{c}").str.strip_chars("[]").str.split(",").cast(pl.List(pl.Float64))'
            for c in lists
        ]
    else:
        exprs = [f'pl.col("{c}")' for c in cols]
    polars_floor = (
        "import polars as pl\nn = 0\n"
        f"q = pl.{scan}({p!r}).select({', '.join(exprs)})\n"
        f"for b in q.collect_batches(chunk_size={FLOOR_BATCH}):\n"
        + "".join(f"    b[{c!r}].to_numpy()\n" for c in numbers)
        + "".join(f"    b[{c!r}].explode().to_numpy()\n" for c in lists)
        + "    n += b.height\nprint(n, '-')\n"
    )
    select = ", ".join(cols)
    source = _duckdb_source(fmt, spec, path)
    duckdb_floor = (
        _VIEW + "import duckdb\ncon = duckdb.connect()\n"
        "con.execute('SET enable_progress_bar = false')\nn = 0\n"
        f"for b in con.sql('SELECT {select} FROM ' + {source!r}).to_arrow_reader({FLOOR_BATCH}):\n"
        + sink
        + "print(n, '-')\n"
    )
    refimpl_read = (  # refimpl check's own reading, its allocator settings included
        "import pathlib\n"
        "from refimpl.testing import check_cli\n"
        "from refimpl.testing._traces import read_chunks\n"
        "check_cli._system_memory_pool()\ncheck_cli._reuse_freed_memory()\nn = 0\n"
        f"for c in read_chunks(pathlib.Path({p!r}), {fmt!r}, {numbers!r}, {lists!r}, "
        f"chunk_rows={FLOOR_BATCH}, on_progress=lambda _: None):\n"
        "    n += c.size\nprint(n, '-')\n"
    )
    return {
        "refimpl": refimpl_read,
        "pyarrow": pyarrow_floor,
        "polars": polars_floor,
        "duckdb": duckdb_floor,
    }


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
        return int(rows), 0 if tool.startswith("floor ") else int(bad)  # a floor reads, no more
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
        floors = [v[what] for k, v in result.items() if k.startswith("floor ") and v["code"] == 0]
        if floors and peers:
            result[f"floor_{key}"] = min(floors) / min(peers)


def bench_one(
    spec: str,
    fmt: str,
    rows: int,
    tokens: int,
    folder: Path,
    rerun_above: float = math.inf,
    floors: bool = False,
) -> dict[str, Any]:
    path = folder / f"{spec}.{fmt}"
    trace_rows = write_trace(path, spec, fmt, rows, tokens)
    tools = {
        "pyarrow": [sys.executable, "-c", pyarrow_script(fmt, path)],  # first: warms the cache
        "refimpl": refimpl_command(spec, path),
        "polars": [sys.executable, "-c", polars_script(spec, fmt, path)],
        "duckdb": [sys.executable, "-c", duckdb_script(spec, fmt, path)],
    }
    if floors:
        for tool, script in floor_scripts(spec, fmt, path).items():
            tools[f"floor {tool}"] = [sys.executable, "-c", script]
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
    for tool in (t for t in tools if t.startswith("floor ")):  # each floor read every row
        result["agree"] &= result[tool]["counts"] == (trace_rows, 0)
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
    line = "  ".join(cells)
    floors = [k for k in r if k.startswith("floor ")]
    if floors:
        each = ", ".join(f"{k[6:]} {r[k]['seconds']:.2f}s {r[k]['cpu']:.2f}c" for k in floors)
        line += (
            f"\n{'':>34}decode only: {each}; fastest / faster engine "
            f"{r.get('floor_ratio', math.nan):.2f}x wall, "
            f"{r.get('floor_cpu_ratio', math.nan):.2f}x CPU"
        )
    return line


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
    parser.add_argument(
        "--floors",
        action="store_true",
        help="also time each engine decoding the checked columns into numpy arrays, nothing "
        "checked: the least a check that computes from decoded arrays can take",
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
                        bench_one(
                            spec, fmt, size, args.tokens, folder, args.rerun_above, args.floors
                        )
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
