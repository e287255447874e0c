"""``refimpl check --report``: never one of the inputs, and written whole or not at all."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from refimpl.cli import main

TRACE = "staleness,weight\n0,1\n5,0\n"


def check(trace: Path, report: Path) -> int:
    argv = ["check", str(trace), "--spec", "staleness_mask", "--param", "eta=1", "--no-progress"]
    return main([*argv, "--report", str(report)])


@pytest.mark.parametrize("how", ["same path", "another path", "symlink", "hard link"])
def test_a_report_that_is_the_trace_is_refused_before_anything_is_written(
    how: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE)
    report = {
        "same path": trace,
        "another path": tmp_path / "." / "t.csv",
        "symlink": tmp_path / "link.json",
        "hard link": tmp_path / "hard.json",
    }[how]
    if how == "symlink":
        report.symlink_to(trace)
    if how == "hard link":
        os.link(trace, report)
    assert check(trace, report) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "--report must not name an input" in err
    assert trace.read_text() == TRACE
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        {"t.csv", report.name} if how in ("symlink", "hard link") else {"t.csv"}
    )


def test_the_report_replaces_an_old_one_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE)
    report = tmp_path / "r.json"
    report.write_text("old\n")
    assert check(trace, report) == 0
    got = json.loads(report.read_text())
    assert (got["status"], got["rows"]) == ("ok", 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "t.csv"]


def test_a_report_is_written_when_the_trace_is_unusable(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("staleness\n0\n")
    report = tmp_path / "r.json"
    assert check(trace, report) == 2
    got = json.loads(report.read_text())
    assert got["status"] == "unusable"
    assert "'weight'" in got["error"]


@pytest.mark.parametrize("where", ["target", "temporary"])
def test_a_report_that_cannot_be_written_names_the_path_the_cause_and_the_fix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, where: str
) -> None:
    import errno

    from refimpl.testing import _trace_report

    out = tmp_path / "report.json"
    failing = out if where == "target" else tmp_path / ".report.json.1234.tmp"

    def full(path: object, data: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(failing))

    monkeypatch.setattr(_trace_report, "atomic_write", full)
    line = _trace_report.write_report(out, {"ok": True})
    assert line is not None
    assert "\n" not in line
    assert line.startswith(f"cannot write the --report {str(out)!r}: no space left"), line
    assert ("renamed over it" in line) == (where == "temporary"), line
