"""``refimpl check`` keeps freed blocks in glibc's heap, unless the environment tunes it.

Each chunk of a trace allocates its buffers again; with glibc's defaults a block of a few MiB is
mapped on its own and unmapped when freed, so every chunk's pages were faulted in again. The
command sets two ``mallopt`` parameters, and pyarrow's memory pool, for its own process only: a
program that calls ``refimpl.cli.main`` keeps its own. What is checked here: the values set, that a
user's own tuning (``GLIBC_TUNABLES`` naming malloc, any ``MALLOC_*`` variable) is left alone, that
the command's own process sets them and a caller of ``main`` does not, and, in a child process,
that the blocks of a CSV trace then fault in far fewer pages.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from refimpl import _process
from refimpl.cli import main
from refimpl.testing import check_cli

_LINUX = pytest.mark.skipif(sys.platform != "linux", reason="glibc's mallopt: Linux only")


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return 1

    def malloc_trim(self, pad: int) -> int:
        return 0

    def gnu_get_libc_version(self) -> bytes:  # glibc's, which the settings are for
        return b"2.36"


def _run(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> list[tuple[int, int]]:
    for name in list(os.environ):
        if name.startswith("MALLOC_") or name == "GLIBC_TUNABLES":
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    recorder = _Recorder()
    monkeypatch.setattr(ctypes, "CDLL", lambda _name: recorder)
    monkeypatch.setattr(sys, "platform", "linux")
    check_cli._reuse_freed_memory()
    return recorder.calls


def test_the_heap_keeps_blocks_up_to_32_mib_and_512_mib_at_its_top(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _run(monkeypatch, {}) == [(-3, 32 << 20), (-1, 512 << 20)]


@pytest.mark.parametrize(
    "env",
    [
        {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"},
        {"MALLOC_ARENA_MAX": "2"},
        {"MALLOC_TRIM_THRESHOLD_": "0"},
    ],
)
def test_a_users_own_tuning_is_left_alone(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> None:
    assert _run(monkeypatch, env) == []


def test_other_tunables_do_not_stop_it(monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(_run(monkeypatch, {"GLIBC_TUNABLES": "glibc.rtld.optional_static_tls=512"})) == 2


def _check_in_process(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("staleness,weight\n0,1\n3,0\n")
    code = main(["check", str(trace), "--spec", "staleness_mask", "--param", "eta=1"])
    assert code == 0


def test_a_caller_of_main_keeps_its_own_allocators(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = _Recorder()
    monkeypatch.setattr(ctypes, "CDLL", lambda _name: recorder)
    monkeypatch.setattr(sys, "platform", "linux")
    pool = pa.default_memory_pool().backend_name
    _check_in_process(tmp_path)
    assert recorder.calls == []
    assert pa.default_memory_pool().backend_name == pool


def test_the_commands_own_process_sets_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(os.environ):
        if name.startswith("MALLOC_") or name in ("GLIBC_TUNABLES", "ARROW_DEFAULT_MEMORY_POOL"):
            monkeypatch.delenv(name)
    recorder = _Recorder()
    monkeypatch.setattr(ctypes, "CDLL", lambda _name: recorder)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(_process, "_OWN_PROCESS", True)
    original = pa.default_memory_pool()
    try:
        _check_in_process(tmp_path)
        assert recorder.calls == [(-3, 32 << 20), (-1, 512 << 20)]
        assert pa.default_memory_pool().backend_name == "system"
    finally:
        pa.set_memory_pool(original)


_FAULTS = """
import resource, sys
from pathlib import Path
from refimpl.testing import _trace_csv, check_cli
if sys.argv[2] == "tuned":
    check_cli._reuse_freed_memory()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
with open(sys.argv[1], "rb") as handle:
    for block in _trace_csv._csv_blocks(handle, 4 << 20):
        pass
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@_LINUX
def test_the_blocks_of_a_csv_trace_fault_in_far_fewer_pages(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    line = b"-0.5,-0.25,1.2840254166877414\n"
    trace.write_bytes(line * ((64 << 20) // len(line)))  # 64 MiB: 16 blocks of 4 MiB
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.pop("GLIBC_TUNABLES", None)

    def faults(mode: str) -> Any:
        done = subprocess.run(
            [sys.executable, "-c", _FAULTS, str(trace), mode],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        )
        return int(done.stdout)

    # each 4 MiB block is 1024 pages: with the defaults every block faults its pages in again
    # (17,000 faults seen), kept blocks only the first few (4,000 seen). A page count, not a
    # time: the same on a loaded machine.
    assert faults("default") > 12 * 1024
    assert faults("tuned") < 6 * 1024
