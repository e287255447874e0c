"""What ``refimpl simulate`` imports: what the run needs, and not scipy.stats or Hypothesis.

A fresh call pays for every module it imports before the run starts (scipy.stats and
scipy.integrate alone took 0.5-0.8 s, more than a run of 10^6 rollouts). These tests run the
command in a fresh interpreter and read ``sys.modules`` when it is done; they never time anything.
The one place the command needs scipy.stats, ``--closed-form``, is the wrong variant the check
must catch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _wrong_variants import rejects

from refimpl.sim import _aot

#: Modules the plain run must not load: scipy's statistics (and with it scipy.integrate and
#: scipy.optimize), and the property-testing library, which only the tests use.
HEAVY = ("scipy.stats", "scipy.integrate", "scipy.optimize", "hypothesis")

_CHILD = """
import json, sys
from refimpl.cli import main
code = main(sys.argv[2:])
with open(sys.argv[1], "w") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""

_SMALL = ["--slots", "4", "--batch", "4", "--rollouts", "64", "--json", "--no-progress"]


def modules_after(argv: list[str], tmp_path: Path, **env: str) -> set[str]:
    """The modules loaded once ``refimpl simulate ARGV`` has run in a fresh interpreter (with
    ``env`` added to its environment)."""
    out = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(out), "simulate", *argv],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(out.read_text())
    assert got["code"] == 0, done.stderr
    return set(got["modules"])


def check_loads_nothing_heavy(argv: list[str], tmp_path: Path) -> None:
    """The property: none of :data:`HEAVY` is loaded by the call."""
    loaded = modules_after(argv, tmp_path)
    assert [m for m in HEAVY if m in loaded] == [], argv


@pytest.mark.parametrize(
    "extra",
    [
        [],  # plain async: the vectorized engine
        ["--partial", "recompute", "--engine", "event"],  # the event engine
        ["--engine-model", "qwen2.5-7b-h100", "--prompt-tokens", "16", "--engine", "event"],
        ["--mode", "first_k", "--launch", "6", "--lengths-pmf", "0.5,0.5"],
        # agent rollouts: the default lognormal law is drawn as scipy draws it, without scipy
        ["--tool-turns", "2", "--tool-latency", "5", "--tool-shards", "2"],
    ],
    ids=["async", "partial", "engine-mode", "first_k-pmf", "agent"],
)
def test_simulate_loads_neither_scipy_stats_nor_hypothesis(
    extra: list[str], tmp_path: Path
) -> None:
    check_loads_nothing_heavy([*_SMALL, *extra], tmp_path)


def test_the_check_catches_a_call_that_loads_scipy_stats(tmp_path: Path) -> None:
    # --closed-form evaluates scipy.stats laws: the check must see them loaded
    rejects(check_loads_nothing_heavy, [*_SMALL, "--closed-form"], tmp_path)


# -- numba is imported only by a call that compiles or loads a kernel --------------------------
#: numba and its compiler (``scipy.linalg`` comes with a kernel's first load): a short plain run
#: orders with numpy, whose time numba's ordering would save less than loading it costs.
COMPILER = ("numba", "llvmlite")


def check_loads_no_compiler(argv: list[str], tmp_path: Path, **env: str) -> None:
    """The property: none of :data:`COMPILER` is loaded by the call."""
    loaded = modules_after(argv, tmp_path, **env)
    assert [m for m in COMPILER if m in loaded] == [], argv


@pytest.mark.parametrize(
    "extra",
    [[], ["--mode", "sync"], ["--mode", "first_k", "--launch", "4", "--lengths-pmf", "0.5,0.5"]],
    ids=["async", "sync", "first_k-pmf"],
)
def test_a_short_vectorizable_simulate_imports_no_numba(extra: list[str], tmp_path: Path) -> None:
    check_loads_no_compiler([*_SMALL, *extra], tmp_path)


@pytest.mark.skipif(
    _aot._compiler() is None, reason="no C compiler (CC or cc) to link an ahead-of-time entry"
)
def test_a_compiled_mode_runs_its_kernel_ahead_of_time_without_numba(tmp_path: Path) -> None:
    # the command builds the kernel's entry where it is missing (refimpl.sim._aot), then loads it
    check_loads_no_compiler([*_SMALL, "--partial", "recompute"], tmp_path)


def test_the_check_catches_a_call_that_imports_numba(tmp_path: Path) -> None:
    # with the ahead-of-time path off, partial rollouts ask numba's cache for the event kernel
    argv = [*_SMALL, "--partial", "recompute"]
    rejects(check_loads_no_compiler, argv, tmp_path, REFIMPL_AOT="0")
