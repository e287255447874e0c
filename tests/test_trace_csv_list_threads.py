"""The list columns of a large CSV block are parsed at once, on threads: nothing else changes.

A block of at least ``LIST_THREAD_BYTES`` parses all its list columns but the last on threads of
their own and the last meanwhile. The verdict, the report and every error message must be those of
parsing them one after the other, and when several columns are wrong the error must name the
first in column order (the one a sequential parse meets first), whichever thread finishes first.
Each trace below runs with the threads (the threshold set to 0) and without (the threshold out of
reach), and the two runs must print and report the same.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from refimpl.cli import main
from refimpl.testing import _trace_csv

GOOD = '"[-0.5,-1.0]","[-0.6,-1.0]",1.1051709180756477\n"[-2.0]","[-1.0]",0.5\n'
TRACES = {
    "correct": GOOD,
    "a mismatch": GOOD + '"[-2.0]","[-1.0]",0.75\n',
    "the first list wrong": GOOD + '"[-2.0,x]","[-1.0,-1.0]",0.5\n',
    "the last list wrong": GOOD + '"[-2.0,-1.0]","[-1.0,y]",0.5\n',
    "both lists wrong": GOOD + '"[-2.0,x]","[-1.0,y]",0.5\n',
    "the number empty, a list wrong": GOOD + '"[-2.0]","[-1.0,y]",\n',
    "lists of unequal length": GOOD + '"[-2.0,-1.0]","[-1.0]",0.5\n',
}


def _run(
    trace: Path,
    report: Path,
    threshold: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> tuple[int, str, str, object]:
    monkeypatch.setattr(_trace_csv, "LIST_THREAD_BYTES", threshold)
    code = main(
        [
            *("check", str(trace), "--spec", "tis_sequence", "--param", "cap=2"),
            *("--no-progress", "--report", str(report)),
        ]
    )
    out, err = capsys.readouterr()
    return code, out, err, json.loads(report.read_text()) if report.exists() else None


@pytest.mark.parametrize("name", sorted(TRACES))
def test_threads_or_not_the_command_prints_and_reports_the_same(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("logp_target,logp_behavior,weight\n" + TRACES[name])
    threaded = _run(trace, tmp_path / "a.json", 0, monkeypatch, capsys)
    alone = _run(trace, tmp_path / "b.json", 1 << 62, monkeypatch, capsys)
    assert threaded == alone


def test_with_both_lists_wrong_the_error_names_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("logp_target,logp_behavior,weight\n" + TRACES["both lists wrong"])
    code, _, err, _ = _run(trace, tmp_path / "a.json", 0, monkeypatch, capsys)
    assert code == 2
    assert "line 4: column 'logp_target'" in err
