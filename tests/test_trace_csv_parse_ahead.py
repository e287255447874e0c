"""CSV blocks are parsed several at once, on worker threads: nothing else changes.

The reader cuts a CSV trace into blocks in order and parses ``PARSE_AHEAD`` of them at once. The
chunks must come out in file order with the rows, line numbers and values of a parse one block
after the other, and a block's error must be raised where that parse raises it: after every
earlier block's chunk, and the first bad block's, not a later one that a worker met first. Each
trace below is read with one block at a time (``PARSE_AHEAD = 1``) and with several, in blocks of
a few kilobytes (``--chunk-rows 1``), and the two must read, print and report the same.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Generator
from pathlib import Path
from typing import cast

import numpy as np
import pytest

from refimpl.cli import main
from refimpl.testing import _trace_csv
from refimpl.testing._traces import Chunk, TraceError, read_chunks

HEADER = "logp_target,logp_behavior,weight\n"
ROWS = 3000  # about 30 blocks of 4 KiB


def _rows(bad: dict[int, str] | None = None) -> str:
    """``ROWS`` rows of token-level TIS weights (cap 2), one in 97 wrong; ``bad`` replaces rows."""
    rng = np.random.default_rng(7)
    target = rng.normal(-1.0, 0.5, ROWS)
    behavior = target + rng.normal(0.0, 0.5, ROWS)
    weight = np.minimum(np.exp(target - behavior), 2.0)
    weight[::97] += 0.25
    rows = zip(target.tolist(), behavior.tolist(), weight.tolist(), strict=True)
    lines = [f"{t!r},{b!r},{w!r}\n" for t, b, w in rows]
    for i, text in (bad or {}).items():
        lines[i] = text
    return HEADER + "".join(lines)


TRACES = {
    "correct but for the planted rows": _rows(),
    "a word in row 1500": _rows({1500: "-1.0,-1.0,one\n"}),
    "a word in row 1500, a NUL byte in row 2500": _rows(
        {1500: "-1.0,-1.0,one\n", 2500: "-1.0,-1.0,1\x00\n"}
    ),
    "a NUL byte in row 900, a word in row 2500": _rows(
        {900: "-1.0,-1.0,1\x00\n", 2500: "-1.0,-1.0,one\n"}
    ),
    "a short row 2000": _rows({2000: "-1.0,1.0\n"}),
    "an empty weight in row 2900": _rows({2900: "-1.0,-1.0,\n"}),
}


def _read(trace: Path, ahead: int, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every chunk of the trace (its first row, lines and columns), then the error if any."""
    monkeypatch.setattr(_trace_csv, "PARSE_AHEAD", ahead)
    out: list[object] = []
    names = ["logp_target", "logp_behavior", "weight"]
    try:
        for chunk in read_chunks(trace, "csv", names, [], chunk_rows=1, on_progress=out.append):
            assert chunk.lines is not None
            columns = {k: v.tolist() for k, v in chunk.columns.items()}
            out.append((chunk.row_start, chunk.lines.tolist(), columns))
    except TraceError as exc:
        out.append(str(exc))
    return out


def _check(
    trace: Path,
    report: Path,
    ahead: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> tuple[int, str, str, object]:
    monkeypatch.setattr(_trace_csv, "PARSE_AHEAD", ahead)
    code = main(
        [
            *("check", str(trace), "--spec", "tis", "--param", "cap=2", "--chunk-rows", "1"),
            *("--max-show", "100", "--no-progress", "--report", str(report)),
        ]
    )
    out, err = capsys.readouterr()
    return code, out, err, json.loads(report.read_text()) if report.exists() else None


@pytest.mark.parametrize("name", sorted(TRACES))
def test_blocks_parsed_at_once_read_as_one_at_a_time(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(TRACES[name])
    alone = _read(trace, 1, monkeypatch)
    assert len(alone) > 20  # many blocks: the workers have something to overlap
    for ahead in (2, 5):
        assert _read(trace, ahead, monkeypatch) == alone


@pytest.mark.parametrize("name", sorted(TRACES))
def test_blocks_parsed_at_once_the_command_prints_and_reports_the_same(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(TRACES[name])
    alone = _check(trace, tmp_path / "a.json", 1, monkeypatch, capsys)
    assert alone[0] in (1, 2)
    assert _check(trace, tmp_path / "b.json", 3, monkeypatch, capsys) == alone


def test_the_first_bad_block_is_named_after_the_chunks_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(TRACES["a word in row 1500, a NUL byte in row 2500"])
    read = _read(trace, 4, monkeypatch)
    assert isinstance(read[-1], str)
    assert "line 1502: column 'weight' holds 'one'" in read[-1]
    rows = [r for r in read if isinstance(r, tuple)]
    assert rows[-1][1][-1] < 1502 <= rows[-1][1][-1] + 200  # every block before it was given


def test_a_reader_closed_early_stops_its_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(TRACES["correct but for the planted rows"])
    monkeypatch.setattr(_trace_csv, "PARSE_AHEAD", 3)
    chunks = cast(
        Generator[Chunk, None, None],
        read_chunks(
            trace, "csv", ["logp_target", "weight"], [], chunk_rows=1, on_progress=lambda _: None
        ),
    )
    next(chunks)
    assert any(t.name.startswith("refimpl-csv") for t in threading.enumerate())
    chunks.close()
    assert not any(t.name.startswith("refimpl-csv") for t in threading.enumerate())
