"""How fast and how lean is ``refimpl check`` on a large trace? (a benchmark script, not a test)

Generates a CSV trace of ``--rows`` rows (default 10^7) for the ``staleness_mask`` spec in a temporary
directory, runs ``refimpl check`` on it in a subprocess, and reports rows/s and peak RSS. The peer,
measured in the same run on the same file, is ``pyarrow.csv.read_csv`` loading the two columns whole
(the fastest way to *read* the file, and what a non-streaming checker would hold in memory):

    python benchmarks/bench_check.py [--rows N] [--chunk-rows N]

It prints the ratios check/peer for time and for peak memory. Streaming keeps the check's memory
bounded by the chunk size, so its RSS ratio falls as the trace grows.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

_PEER = """
import resource, sys, time
import pyarrow as pa, pyarrow.csv as pacsv
t = time.perf_counter()
table = pacsv.read_csv(sys.argv[1], convert_options=pacsv.ConvertOptions(
    column_types={"staleness": pa.float64(), "weight": pa.float64()}))
print(table.num_rows, time.perf_counter() - t)
"""


def write_trace(path: Path, rows: int, eta: int, seed: int = 0) -> None:
    """A correct staleness_mask trace: staleness ~ Poisson(2), weight = 1[s <= eta]."""
    rng = np.random.default_rng(seed)
    schema = pa.schema([("staleness", pa.int64()), ("weight", pa.float64())])
    with pacsv.CSVWriter(str(path), schema) as writer:
        for start in range(0, rows, 1_000_000):
            s = rng.poisson(2.0, min(1_000_000, rows - start)).astype(np.int64)
            w = (s <= eta).astype(np.float64)
            writer.write_table(pa.table({"staleness": s, "weight": w}, schema=schema))


# Runs a command and reports its peak RSS (KiB on Linux) on the last line of stderr.
_WRAP = """
import resource, subprocess, sys
code = subprocess.run(sys.argv[1:]).returncode
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)
sys.exit(code)
"""


def measure(command: list[str]) -> tuple[float, float, str]:
    """Wall seconds, peak RSS of the command in MiB, and its stdout."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _WRAP, *command], capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{command[:4]} failed ({done.returncode}):\n{done.stderr}")
    peak_kib = float(done.stderr.strip().splitlines()[-1])
    return seconds, peak_kib / 1024.0, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--chunk-rows", type=int, default=1 << 18)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.csv"
        t = time.perf_counter()
        write_trace(path, args.rows, eta=2)
        size = path.stat().st_size / 2**20
        print(
            f"trace: {args.rows:,} rows, {size:.0f} MiB CSV (written in {time.perf_counter() - t:.1f} s)"
        )
        check_s, check_mib, out = measure(
            [sys.executable, "-m", "refimpl", "check", str(path), "--spec", "staleness_mask",
             "--param", "eta=2", "--no-progress", "--chunk-rows", str(args.chunk_rows)]
        )  # fmt: skip
        assert f"OK: all {args.rows:,} rows agree" in out, out
        peer_s, peer_mib, _ = measure([sys.executable, "-c", _PEER, str(path)])
        tiny = Path(tmp) / "tiny.csv"
        write_trace(tiny, 1, eta=2)
        base_s, base_mib, _ = measure(
            [sys.executable, "-m", "refimpl", "check", str(tiny), "--spec", "staleness_mask",
             "--param", "eta=2", "--no-progress"]
        )  # fmt: skip
    print(
        f"refimpl check : {check_s:6.1f} s  {args.rows / check_s:12,.0f} rows/s  peak RSS {check_mib:7.0f} MiB"
    )
    print(
        f"read_csv peer : {peer_s:6.1f} s  {args.rows / peer_s:12,.0f} rows/s  peak RSS {peer_mib:7.0f} MiB"
    )
    print(
        f"baseline      : {base_s:6.1f} s  (refimpl check of a 1-row trace: imports)  peak RSS {base_mib:7.0f} MiB"
    )
    extra = check_s - base_s
    rate = f"{args.rows / extra:,.0f} rows/s" if extra > 0 else "n/a (below timing noise)"
    print(
        f"streaming cost: {extra:.1f} s ({rate}), {check_mib - base_mib:.0f} MiB above the baseline"
    )
    print(f"ratio check/peer: time {check_s / peer_s:.2f}x, peak RSS {check_mib / peer_mib:.2f}x")


if __name__ == "__main__":
    main()
