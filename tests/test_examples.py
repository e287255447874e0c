"""The sample traces in ``examples/traces``: reproducible, and checked as their README says."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from types import ModuleType

import pytest
from _scripts import load_script

from refimpl.cli import main

FOLDER = Path(__file__).resolve().parent.parent / "examples" / "traces"


def _maker() -> ModuleType:
    return load_script("make_traces", FOLDER / "make_traces.py")


def _sessions() -> list[tuple[str, list[str], int]]:
    """(command, the output lines shown, the exit code shown) for every command of the README."""
    text = (FOLDER / "README.md").read_text()
    found = []
    for block in re.findall(r"```console\n(.*?)```", text, flags=re.S):
        for command, shown, code in re.findall(
            r"^\$ (refimpl check [^\n]+)\n(.*?)^\$ echo \$\?\n(\d+)\n", block, flags=re.S | re.M
        ):
            found.append((command, shown.splitlines(), int(code)))
    return found


def test_the_script_writes_the_committed_traces_byte_for_byte() -> None:
    written = _maker().traces()
    assert sorted(written) == sorted(
        p.name for p in FOLDER.iterdir() if p.suffix in (".csv", ".jsonl")
    )
    for name, text in written.items():
        assert (FOLDER / name).read_text() == text, f"{name}: rerun examples/traces/make_traces.py"


def test_every_spec_has_a_passing_trace_and_a_caught_bug_in_the_readme() -> None:
    specs = set(_maker().SPECS)
    from refimpl.testing import spec_names
    from refimpl.testing.check_cli import SPECS, TRACE_ONLY

    # every spec of refimpl check (one per conformance spec, and the declared trace-only ones)
    # has a worked example
    assert specs == set(SPECS) == set(spec_names()) | set(TRACE_ONLY)
    codes = {
        (shlex.split(c)[shlex.split(c).index("--spec") + 1], code) for c, _, code in _sessions()
    }
    assert codes == {(s, 0) for s in specs} | {(s, 1) for s in specs}


@pytest.mark.parametrize(("command", "shown", "code"), _sessions(), ids=lambda v: str(v)[:60])
def test_each_readme_command_prints_what_the_readme_shows(
    command: str,
    shown: list[str],
    code: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(FOLDER)
    assert main(shlex.split(command)[1:]) == code
    assert capsys.readouterr().out.splitlines() == shown
