"""Kernels compiled ahead of time (:mod:`refimpl.sim._aot`): a fresh process that runs a kernel
whose entry is built imports neither numba nor llvmlite, and runs the same machine code.

Checked without timing, in fresh interpreters: a small package in a temporary directory carries a
kernel whose entry is built, loaded, rebuilt when a file it holds changes, and left to numba's JIT
where no C compiler exists or the path is switched off; each run reports its values, the path it
took (:data:`~refimpl.sim._aot.PATHS`) and whether numba was imported. Then the simulator's own
kernels, in every compiled mode, against the reference engines' traces bit for bit. The wrong
variants: numba's own key (the kernel's file alone), which a change to a file the kernel holds
does not move, and a call with the path switched off, which imports numba (run on the small
kernel; the simulator's runs are checked against altered copies of their report).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import FunctionType
from typing import Any

import numpy as np
import pytest
from _fresh_kernels import run_fresh
from _wrong_variants import rejects

from refimpl.sim import _aot

pytest.importorskip("numba")

#: A build links with the system's C compiler; without one the JIT path is the one to check (below).
needs_cc = pytest.mark.skipif(
    _aot._compiler() is None, reason="no C compiler (CC or cc) to link an ahead-of-time entry"
)

_LAYOUT = "K = 1.0\n"
_KERNEL = """
from refimpl.sim._aot import Kernel
from refimpl.sim._compiled_cache import njit
from tinyaot.layout import K


def add(x, out):
    for i in range(x.size):
        out[i] = x[i] * 2.0 + K


_jit = []


def dispatcher():
    if not _jit:
        _jit.append(njit(add, error_model="numpy", _nrt=False))
    return _jit[0]


kernel = Kernel(add, "tinyaot.kernel:dispatcher", dispatcher)
"""
_RUN = """
import json, sys
import numpy as np
from refimpl.sim import _aot
from tinyaot import kernel as k
x, out = np.arange(3.0), np.zeros(3)
with _aot.building_when_cached():
    k.kernel(x, out)
    got = {"out": out.tolist(), "paths": dict(_aot.PATHS), "notes": dict(_aot.NOTES),
           "numba": "numba" in sys.modules or "llvmlite" in sys.modules}
    strided = np.zeros(3)
    k.kernel(np.arange(6.0)[::2], strided)  # not contiguous: numba's JIT takes it
    got["strided"] = [strided.tolist(), _aot.PATHS["tinyaot.kernel.add"]]
print(json.dumps(got))
"""
_FIRST = {"out": [1.0, 3.0, 5.0], "notes": {}, "numba": False, "strided": [[1.0, 5.0, 9.0], "jit"]}


def _package(root: Path) -> Path:
    pkg = root / "tinyaot"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "layout.py").write_text(_LAYOUT)
    (pkg / "kernel.py").write_text(_KERNEL)
    return pkg


def _run(root: Path, script: str = _RUN, **env: str) -> dict[str, Any]:
    """``script`` in a fresh interpreter beside the tiny package: its last line, read as JSON."""
    got: dict[str, Any] = json.loads(run_fresh(root, script, timeout=900, **env).splitlines()[-1])
    return got


def _entries(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "cache" / "refimpl-aot").glob("*.so"))


@needs_cc
def test_an_entry_is_built_loaded_without_numba_and_rebuilt_when_a_file_it_holds_changes(
    tmp_path: Path,
) -> None:
    pkg = _package(tmp_path)
    first = _run(tmp_path)  # built in a child process: this one never imports numba
    assert first == {**_FIRST, "paths": {"tinyaot.kernel.add": "aot-built"}}
    built = _entries(tmp_path)
    assert len(built) == 1
    again = _run(tmp_path)  # loaded
    assert again == {**_FIRST, "paths": {"tinyaot.kernel.add": "aot"}}
    (pkg / "layout.py").write_text("K = 5.0\n")  # a constant the kernel holds changes
    changed = _run(tmp_path)
    assert (changed["out"], changed["numba"]) == ([5.0, 7.0, 9.0], False)
    assert changed["paths"] == {"tinyaot.kernel.add": "aot-built"}
    rebuilt = _entries(tmp_path)  # the entry under the old stamp removed
    assert len(rebuilt) == 1
    assert rebuilt != built


def _own_file_key(py_func: FunctionType) -> str:
    """The wrong variant: numba's own key, a hash of the kernel's file alone."""
    return hashlib.sha256(Path(py_func.__code__.co_filename).read_bytes()).hexdigest()


def check_the_key_follows_the_layout(key: Any, root: Path) -> None:
    """The property: the key of the tiny kernel changes when the layout file it reads changes."""
    script = (
        "import importlib, json\nfrom tinyaot import kernel as k\n"
        f"key = getattr(importlib.import_module({key.__module__!r}), {key.__qualname__!r})\n"
        "print(json.dumps({'key': str(key(k.add, ((\"<f8\", 1, False),) * 2))}))\n"
    )
    env = {"PYTHONPATH": os.pathsep.join([str(root), str(Path(__file__).parent)])}
    before = _run(root, script, **env)["key"]
    layout = root / "tinyaot" / "layout.py"
    layout.write_text(layout.read_text() + "# changed\nK = 3.0\n")
    assert _run(root, script, **env)["key"] != before


def _own_file_entry(py_func: FunctionType, spec: Any) -> str:
    return _own_file_key(py_func)


def test_the_entrys_key_follows_every_file_the_kernel_holds(tmp_path: Path) -> None:
    _package(tmp_path / "sound")
    check_the_key_follows_the_layout(_aot.entry_path, tmp_path / "sound")
    _package(tmp_path / "wrong")
    rejects(check_the_key_follows_the_layout, _own_file_entry, tmp_path / "wrong")


def test_without_a_compiler_or_with_the_path_off_numbas_jit_runs_the_kernel(
    tmp_path: Path,
) -> None:
    _package(tmp_path)
    no_cc = _run(tmp_path, CC=str(tmp_path / "no-such-compiler"))
    assert (no_cc["out"], no_cc["numba"]) == (_FIRST["out"], True)
    assert no_cc["paths"] == {"tinyaot.kernel.add": "jit"}
    assert "no C compiler" in no_cc["notes"]["tinyaot.kernel.add"]
    assert _entries(tmp_path) == []
    off = _run(tmp_path, REFIMPL_AOT="0")
    assert (off["out"], off["paths"], off["notes"]) == (_FIRST["out"], no_cc["paths"], {})
    assert off["numba"]  # the path switched off imports numba, which no AOT run may do
    assert _entries(tmp_path) == []


def _double(x: Any, out: Any) -> None:  # a kernel's Python function (never compiled here)
    out[:] = 2 * x


def sees_entries_built_later(kernel: Any) -> None:
    """``kernel.ready()`` answers no until an entry of the kernel exists, then yes: an entry built
    by another process meanwhile is seen."""
    assert not kernel.ready()
    assert not kernel.ready()  # asked again: still looked for
    entry = _aot.entry_path(kernel.py_func, (("<f8", 1, False),), stamp=kernel.stamp())
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.write_bytes(b"")  # another process's build (only its name is looked at)
    assert kernel.ready()
    assert kernel.ready()


class _NegativeKept(_aot.Kernel):
    """Wrong: the first answer is kept, a no as well as a yes."""

    def ready(self) -> bool:
        if not hasattr(self, "_first"):
            self._first = super().ready()
        return bool(self._first)


def test_a_kernel_is_ready_once_an_entry_is_built_and_sees_one_built_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(_aot.ENV, raising=False)
    monkeypatch.delenv("NUMBA_DISABLE_JIT", raising=False)
    sees_entries_built_later(_aot.Kernel(_double, "nowhere:none", lambda: None))
    for old in (tmp_path / "cache" / "refimpl-aot").glob("*"):
        old.unlink()
    rejects(sees_entries_built_later, _NegativeKept(_double, "nowhere:none", lambda: None))


def test_array_spec_and_the_report() -> None:
    spec = _aot.array_spec((np.zeros(2, dtype=np.int8), np.zeros((2, 3))))
    assert spec == (("|i1", 1, False), ("<f8", 2, False))
    ro = np.zeros(2)
    ro.setflags(write=False)
    assert _aot.array_spec((ro,)) == (("<f8", 1, True),)
    assert _aot.array_spec((np.zeros((2, 2)).T,)) is None  # Fortran order: the JIT's
    with _aot.building_when_cached():
        assert _aot.BUILD_WHEN_CACHED
        _aot.PATHS.update({"a": "aot", "b": "jit"})
        _aot.NOTES["b"] = "why"
        assert _aot.kernel_report() == {"kernel_path": "jit", "kernel_note": "b: why"}
    assert not _aot.BUILD_WHEN_CACHED
    _aot.PATHS.clear()
    _aot.NOTES.clear()


# -- the simulator's kernels, in a fresh process -------------------------------------------------
_MODES = """
import json, sys
import numpy as np
from refimpl.sim import SimConfig, _aot, simulate

def eq(x, y):
    return np.array_equal(x, y, equal_nan=np.asarray(x).dtype.kind == "f")

def same(a, b):
    return all(eq(getattr(a, f), getattr(b, f))
               for f in ("slot", "launch_time", "finish_time", "length", "staleness", "status",
                         "rank", "wasted_tokens", "recomputed_tokens", "publish_times"))

MODES = {"drop": {"eta": 1, "over_bound": "drop"}, "first_k": {"mode": "first_k", "launch": 48},
         "keep_kv": {"partial": "keep_kv"}, "recompute": {"partial": "recompute"},
         "restart": {"partial": "restart"}, "admission": {"mode": "admission", "eta": 1},
         "preempt": {"preempt_rate": 1e-3, "preempt_duration": 50.0}}
out = {}
with _aot.building_when_cached():
    for name, opts in MODES.items():
        cfg = SimConfig(slots=16, batch=32, steps=40, seed=3, **opts)
        out[name] = same(simulate(cfg, engine="compiled"), simulate(cfg, engine="event"))
    # 1 GiB of KV (1170 blocks of 16 tokens) for 16 sequences of lognormal(6, 1) tokens: preemptions
    from refimpl.sim import simulate_engine
    from refimpl.sim.engine import EngineModel
    model = EngineModel.preset("qwen2.5-7b-h100", prompt_tokens=64, kv_memory_bytes=2**30)
    cfg = SimConfig(slots=16, batch=32, steps=20, seed=3, engine_model=model)
    a, b = simulate_engine(cfg, engine="compiled"), simulate_engine(cfg, engine="event")
    out["engine"] = same(a.trace, b.trace) and a.stats == b.stats and a.stats.preemptions > 0
    from refimpl.sim.agent import AgentConfig, simulate_agent
    lengths = np.random.default_rng(3).lognormal(5.0, 1.0, size=(16, 400))
    acfg = AgentConfig(slots=16, batch=32, steps=20, lengths=lengths, seed=3, turns=2,
                       tool_latency=5.0)
    ra, rb = simulate_agent(acfg, engine="compiled"), simulate_agent(acfg, engine="event")
    out["agent"] = all(eq(getattr(ra.rollouts, f), getattr(rb.rollouts, f))
                       for f in ra.rollouts._fields)
    # the vectorized engine's ordering kernels (made worth it at this size), on tied times too
    from refimpl.sim import _vector_compiled
    _vector_compiled.worth_compiling = lambda config: True
    ties = np.ceil(np.random.default_rng(3).lognormal(2.0, 1.0, size=(16, 200)))
    for name, opts in {"vector": {"seed": 3}, "vector-ties": {"lengths": ties}}.items():
        cfg = SimConfig(slots=16, batch=32, steps=40, **opts)
        out[name] = same(simulate(cfg, engine="auto"), simulate(cfg, engine="event"))
    out["paths"] = sorted(set(_aot.PATHS.values()))
    out["kernels"] = len(_aot.PATHS)
out["numba"] = "numba" in sys.modules or "llvmlite" in sys.modules
print(json.dumps(out))
"""


def check_runs_without_numba(got: dict[str, Any]) -> None:
    """The property: every mode ran ahead of time, imported no numba, gave the reference trace."""
    assert not got.pop("numba")
    assert set(got.pop("paths")) <= {"aot", "aot-built"}
    # the event kernel, its scatter, the engine loop, the agent's, the three ordering kernels
    assert got.pop("kernels") == 7
    assert all(got.values()), got


def _modes(**env: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _MODES],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got: dict[str, Any] = json.loads(done.stdout)
    return got


@needs_cc
def test_every_compiled_mode_runs_ahead_of_time_without_numba_and_gives_the_reference_trace() -> (
    None
):
    got = _modes()
    check_runs_without_numba(dict(got))
    # The wrong variants, one for each way a run can miss the property: numba imported (what the
    # JIT's path does, run for real on the small kernel above: running every mode on it again
    # would compile the seven kernels from scratch, about 100 s of CPU), a kernel left to the JIT,
    # a kernel missing, a mode whose trace differs from the reference engine's.
    wrong = ({"numba": True}, {"paths": ["aot", "jit"]}, {"kernels": 6}, {"engine": False})
    for change in wrong:
        rejects(check_runs_without_numba, {**got, **change})


def test_each_simulator_kernel_is_keyed_by_numbas_closure_stamp() -> None:
    from refimpl.sim import _compiled, _vector_compiled
    from refimpl.sim._compiled_cache import closure_stamp
    from refimpl.sim.agent import _compiled as _agent_compiled
    from refimpl.sim.engine import _kernel as _engine_kernel
    from refimpl.sim.engine import _loop

    runners = {
        _compiled._runner: _compiled._kernel,
        _compiled._scatter_kernel: _compiled._scatter_rows,
        _engine_kernel.runner: _loop.run_loop,
        _agent_compiled._runner: _agent_compiled._kernel,
        **{k: getattr(_vector_compiled, name) for name, k in _vector_compiled._ENTRIES.items()},
    }
    for runner, found in runners.items():
        # A process that has compiled the JIT kernel holds its dispatcher under the same name.
        fn = getattr(found, "py_func", found)
        assert isinstance(fn, FunctionType)
        stamp = closure_stamp(fn)  # the key of numba's own cache entry for the JIT kernel
        assert runner.stamp() == stamp
        path = _aot.entry_path(runner.py_func, (("<f8", 1, False),), stamp=runner.stamp())
        assert path.name.endswith(f".{stamp[:32]}.so")
        assert path == _aot.entry_path(fn, (("<f8", 1, False),))
