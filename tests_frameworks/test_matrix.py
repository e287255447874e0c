"""The conformance matrix, rerun on the installed frameworks, agrees with the committed file."""

from __future__ import annotations

import subprocess
import sys

import pytest

from refimpl.cli import main
from refimpl.frameworks._matrix import MATRIX_PATH, load_matrix


def test_a_fresh_run_agrees_with_the_committed_matrix(capsys: pytest.CaptureFixture[str]) -> None:
    # `refimpl conformance --check`, in this process: the frameworks are imported once per stage.
    code = main(["conformance", "--check"])
    out = capsys.readouterr().out
    assert code == 0, f"refimpl conformance --check exited {code}:\n{out}"
    assert "no change against" in out


def test_each_defect_reproduction_fails_when_pasted() -> None:
    """A defect's reproduction is a bug report: run as a script, it fails the way the matrix says."""
    defects = [
        (e["key"], d)
        for e in load_matrix(MATRIX_PATH)["entries"]
        for d in e["divergences"]
        if d["classification"] == "defect"
    ]
    assert defects, "the matrix records no defect: drop this test or the word from the docs"
    seen = set()
    for key, d in defects:
        if key in seen:
            continue  # one reproduction per adapter: they share the failure
        seen.add(key)
        done = subprocess.run(
            [sys.executable, "-W", "ignore", "-c", d["reproduction"]],
            capture_output=True,
            text=True,
        )
        assert done.returncode != 0, f"{key}: the reproduction of {d['check']} passes"
        assert d["message"].split(":")[0].split()[-1] in done.stderr, done.stderr[-800:]
