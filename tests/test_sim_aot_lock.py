"""Processes that need one missing ahead-of-time entry at once build it once.

Two test workers or two ``refimpl simulate`` commands in a fresh checkout each miss the same entry;
the one that takes the entry's lock builds it, the others wait and then find it built. No timing is
involved: the test holds the lock itself, makes the entry while a build waits for the lock, and
checks that the waiting build then starts no compiler.
"""

from __future__ import annotations

import fcntl
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from refimpl.sim import _aot


def test_a_build_that_waited_for_the_lock_finds_the_entry_and_compiles_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[Any] = []
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: runs.append(a))
    monkeypatch.setattr(_aot, "_compiler", lambda: "cc")
    entry = tmp_path / "kernel.cpu.spec.stamp.so"
    result: list[str | None] = []
    with open(entry.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process is building the entry
        waiting = threading.Thread(
            target=lambda: result.append(_aot.build("m:f", (), entry, stamp="stamp"))
        )
        waiting.start()
        entry.write_bytes(b"built by the other process")
    waiting.join(timeout=60)
    assert result == [None]
    assert runs == []


def test_a_build_with_the_lock_free_and_no_entry_runs_the_builder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check above can fail: a missing entry does start the child that builds it."""
    runs: list[Any] = []

    def builder(cmd: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        runs.append(cmd)
        Path(cmd[-2]).write_bytes(b"built")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", builder)
    monkeypatch.setattr(_aot, "_compiler", lambda: "cc")
    entry = tmp_path / "kernel.cpu.spec.stamp.so"
    assert _aot.build("m:f", (), entry, stamp="stamp") is None
    assert [cmd[-2:] for cmd in runs] == [[str(entry), "stamp"]]
