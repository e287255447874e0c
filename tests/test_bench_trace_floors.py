"""The trace-gate benchmark's decode floors read every row of every spec and format.

``benchmarks/bench_trace_gate.py --floors`` times four readers that decode a trace's checked
columns into numpy arrays and check nothing; their best time against an engine's whole query is
the least ratio a check from decoded arrays can reach, quoted on the trace how-to page. A floor
that read fewer rows (a reader stopping early, a row limit) would make that bound
look lower than it is, so each one's row count is compared with the trace's here, on small
traces read in many small batches.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from _scripts import ROOT, load_script


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_script("bench_trace_gate", ROOT / "benchmarks" / "bench_trace_gate.py")


def _read(script: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
@pytest.mark.parametrize("spec", ["tis", "staleness_mask", "tis_sequence"])
def test_every_floor_reads_every_row(
    bench: ModuleType, spec: str, fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench, "FLOOR_BATCH", 256)  # many batches: a reader that stops shows
    path = tmp_path / f"{spec}.{fmt}"
    rows = bench.write_trace(path, spec, fmt, 3000, 8)
    assert rows > 100
    scripts = bench.floor_scripts(spec, fmt, path)
    assert sorted(scripts) == ["duckdb", "polars", "pyarrow", "refimpl"]
    for script in scripts.values():
        assert bench._counts("floor x", {"code": 0, "stdout": _read(script)}) == (rows, 0)


def test_a_floor_that_miscounts_is_a_disagreement(bench: ModuleType) -> None:
    assert bench._counts("floor x", {"code": 0, "stdout": "2999 -\n"}) == (2999, 0)
    assert bench._counts("floor x", {"code": 1, "stdout": "3000 -\n"}) is None
