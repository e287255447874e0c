"""``refimpl simulate`` takes a mode's compiled kernel from :data:`COMMAND_BUILD_ROLLOUTS` rollouts
even where nothing is built or cached yet, and says so while it compiles.

On a fresh install a command at 10^6 rollouts otherwise ran the reference engines on every call
(partial recompute 4.5 s, agent rollouts 17 s, against 0.2-0.5 s compiled): the engines' own
thresholds, made for a process that compiles for itself, never reached. The checks read the choice
with "nothing ready" forced, so that they do not depend on what this machine has cached.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _wrong_variants import rejects
from scipy.stats import expon

from refimpl.cli import main
from refimpl.sim import SimConfig, _aot
from refimpl.sim import _compiled as sim_compiled
from refimpl.sim.agent import AgentConfig
from refimpl.sim.agent import _compiled as agent_compiled

pytestmark = pytest.mark.skipif(not sim_compiled.AVAILABLE, reason="numba is not installed")

SMALL, LARGE = _aot.COMMAND_BUILD_ROLLOUTS // 2, _aot.COMMAND_BUILD_ROLLOUTS
_LAW = expon(scale=100.0)


def _nothing_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither engine's kernel compiled in this process, built ahead of time or cached."""
    for module in (sim_compiled, agent_compiled):
        monkeypatch.setattr(module._runner, "ready", lambda: False)
        monkeypatch.setattr(module, "_compile", lambda: None)
    monkeypatch.setattr(sim_compiled, "kernel_ready", lambda kernel: False)  # both engines read it


def _choices(rollouts: int) -> tuple[bool, bool]:
    """The compiled engines' choice for a partial-recompute run and an agent run of ``rollouts``."""
    cfg = SimConfig(slots=64, batch=64, rollouts=rollouts, partial="recompute")
    agent = AgentConfig(slots=64, batch=64, steps=-(-rollouts // 64), lengths=_LAW)
    return sim_compiled.worth_compiling(cfg), agent_compiled.worth_compiling(agent)


def check_the_command_compiles_from_its_threshold(command_builds: Any) -> None:
    with pytest.MonkeyPatch.context() as mp:
        _nothing_ready(mp)
        mp.setattr(_aot, "command_builds", command_builds)
        mp.delenv(_aot.ENV, raising=False)
        assert _choices(LARGE) == (False, False)  # the Python API: the reference engines
        with _aot.building_when_cached():  # the command
            assert _choices(LARGE) == (True, True)
            assert _choices(SMALL) == (False, False)
            mp.setenv(_aot.ENV, "0")  # the ahead-of-time path switched off: nothing to build
            assert _choices(LARGE) == (False, False)


def test_the_command_compiles_from_its_threshold() -> None:
    check_the_command_compiles_from_its_threshold(_aot.command_builds)


def test_the_check_rejects_compiling_outside_the_command_and_below_the_threshold() -> None:
    rejects(check_the_command_compiles_from_its_threshold, lambda rollouts: _aot.enabled())
    rejects(
        check_the_command_compiles_from_its_threshold,
        lambda rollouts: _aot.BUILD_WHEN_CACHED and _aot.enabled(),
    )
    rejects(
        check_the_command_compiles_from_its_threshold,
        lambda rollouts: _aot.BUILD_WHEN_CACHED and rollouts >= LARGE,
    )


def test_the_command_says_it_is_compiling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing entry built inside the command is announced on standard error, once, before
    the build; outside the command nothing is printed."""
    built: list[Path] = []

    def fake_build(factory: str, spec: Any, path: Path, *, stamp: str) -> str:
        built.append(path)
        return "not built in this test"

    monkeypatch.setattr(_aot, "build", fake_build)
    monkeypatch.setattr(_aot, "_ANNOUNCED", [])
    monkeypatch.setattr(_aot, "entry_path", lambda func, spec, stamp: tmp_path / "missing.so")
    monkeypatch.delenv(_aot.ENV, raising=False)
    kernel = _aot.Kernel(_choices, "unused:unused", lambda: None)
    monkeypatch.setattr(kernel, "stamp", lambda: "stamp")
    monkeypatch.setattr(kernel, "_jit_cached", lambda: True)  # outside the command: no build
    assert kernel._find(("spec",)) is None
    assert (built, capsys.readouterr().err) == ([], "")
    with _aot.building_when_cached():
        assert kernel._find(("spec",)) is None
        assert kernel._find(("another spec",)) is None  # a second build: no second message
    err = capsys.readouterr().err
    assert len(built) == 2
    assert err.count("compiling") == 1, err
    assert f"compiling this mode's kernels ({_choices.__module__}._choices, ...)" in err, err


def test_the_result_names_the_engine_that_ran(capsys: pytest.CaptureFixture[str]) -> None:
    """Under ``--engine auto`` a run the compiled engine declines is the reference engine's, and
    the JSON says so (it said ``refimpl-compiled`` wherever numba was installed). The compiled
    case is not run here: on a fresh clone it would build the kernel's entry first."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sim_compiled, "worth_compiling", lambda cfg: False)
        args = ["simulate", "--no-progress", "--slots", "8", "--batch", "8", "--steps", "2"]
        assert main([*args, "--partial", "recompute", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert (got["impl"], got["kernel_path"]) == ("refimpl-event", None)
