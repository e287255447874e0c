"""numba's cache on disk serves a kernel only while every file it holds is unchanged
(:mod:`refimpl.sim._compiled_cache`).

The kernels read constants from layout modules and inline the heap's functions; numba keys its
cache by the kernel's own file, so a change to those files would be served stale. Checked without
timing: a small package in a temporary directory, in fresh interpreters sharing one cache
directory, reads numba's own counters (``stats.cache_hits`` / ``cache_misses``) and the values the
kernels return, before and after a dependency file changes. The same package carries a kernel
cached the plain numba way (``cache=True``): the wrong variant, which serves the stale value.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _fresh_kernels import run_fresh
from _wrong_variants import rejects

from refimpl.sim import _compiled, _compiled_heap, _compiled_layout, _vector_compiled
from refimpl.sim._compiled_cache import cached_on_disk, closure_stamp, kernel_files
from refimpl.sim.agent import _compiled as _agent_compiled
from refimpl.sim.agent import _compiled_layout as _agent_layout
from refimpl.staleness import versions


def _file(module: object) -> str:
    return str(Path(str(getattr(module, "__file__", ""))).resolve())


def test_each_kernel_is_keyed_by_its_layout_and_the_heap_it_inlines() -> None:
    sim = kernel_files(_compiled._kernel)
    assert sim == tuple(
        sorted(_file(m) for m in (_compiled, _compiled_heap, _compiled_layout, versions))
    )
    agent = kernel_files(_agent_compiled._kernel)
    assert {_file(_agent_layout), _file(_compiled_heap), _file(_agent_compiled)} <= set(agent)
    assert kernel_files(_vector_compiled._walk) == (_file(_vector_compiled),)


def test_a_kernel_that_is_not_a_function_is_refused() -> None:
    with pytest.raises(TypeError, match="kernel must be a Python function or a numba dispatcher"):
        kernel_files(42)


_LAYOUT = "K = 1\n"
_HEAP = "def step(x):\n    return 2 * x\n"
_KERNEL = """
import numba
from refimpl.sim._compiled_cache import njit
from tinykern import heap
from tinykern.layout import K

step = njit(heap.step, inline="always")


def kernel(x):
    return step(x) + K


def plain(x):
    return step(x) + K


sound = njit(kernel)
stale = numba.njit(cache=True)(plain)
"""
_RUN = """
from refimpl.sim._compiled_cache import cached_on_disk
from tinykern import kernel as k
ready = cached_on_disk(k.sound)
value, plain = k.sound(1), k.stale(1)
hits = sum(k.sound.stats.cache_hits.values())
misses = sum(k.sound.stats.cache_misses.values())
print(ready, value, hits, misses, plain)
"""


def _run(root: Path) -> str:
    """The tiny package's kernels in a fresh interpreter: their output."""
    return run_fresh(root, _RUN, timeout=600)


def test_a_changed_dependency_compiles_the_kernel_again(tmp_path: Path) -> None:
    pytest.importorskip("numba")
    pkg = tmp_path / "tinykern"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "layout.py").write_text(_LAYOUT)
    (pkg / "heap.py").write_text(_HEAP)
    (pkg / "kernel.py").write_text(_KERNEL)
    # ready on disk, 2 * 1 + K, cache hits, cache misses, the plain numba kernel's value
    assert _run(tmp_path) == "False 3 0 1 3"  # compiled and saved
    assert _run(tmp_path) == "True 3 1 0 3"  # loaded by the next process
    (pkg / "layout.py").write_text("K = 5\n")  # a constant the kernel holds changes
    # ours compiles again; numba's own key (kernel.py alone) serves the stale 3
    assert _run(tmp_path) == "False 7 0 1 3"
    (pkg / "heap.py").write_text(_HEAP.replace("2 * x", "3 * x"))  # an inlined function
    assert _run(tmp_path) == "False 8 0 1 3"


def test_the_stamp_follows_every_file_and_a_stale_index_holds_nothing(tmp_path: Path) -> None:
    pytest.importorskip("numba")
    stamp = closure_stamp(_compiled._kernel)
    assert stamp == closure_stamp(_compiled._kernel)  # a pure function of the files
    assert len(stamp) == 64
    assert not cached_on_disk(object())  # not a dispatcher: nothing on disk


# A kernel loaded from the cache runs without numba's typing and lowering registries (numba's
# own load imports them all first, ``scipy.linalg`` included: four fifths of a load's cost).
# The kernel calls math and indexes an array, whose lowering those registries hold: its value
# must still be the Python function's. ``plain`` is the same code cached the numba way: the
# wrong variant, whose load imports the registries.
_LOAD_KERNEL = """
import math
import numba
from refimpl.sim._compiled_cache import njit


def total(x):
    s = 0.0
    for i in range(x.size):
        s += math.exp(-x[i]) * x[i] * x[i] + math.floor(3.0 * x[i])
    return s


def plain_total(x):
    s = 0.0
    for i in range(x.size):
        s += math.exp(-x[i]) * x[i] * x[i] + math.floor(3.0 * x[i])
    return s


sound = njit(total, error_model="numpy", _nrt=False)
numba_way = numba.njit(cache=True, error_model="numpy", _nrt=False)(plain_total)
"""
_LOAD_RUN = """
import sys
import numpy as np
from tinyload import kernel as k
fn = k.sound if sys.argv[1] == "sound" else k.numba_way
x = np.linspace(0.0, 3.0, 7)
value, want = fn(x), k.total(x)
close = abs(value - want) <= 1e-12 * abs(want)
hits = sum(fn.stats.cache_hits.values())
print(close, hits, "numba.np.arraymath" in sys.modules)
"""


def _load_run(root: Path, which: str) -> str:
    env = {
        **os.environ,
        "NUMBA_CACHE_DIR": str(root / "cache"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", _LOAD_RUN, which],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


def check_a_cached_load_needs_no_registries(out: str) -> None:
    """The kernel's value is right, it came from the cache, and numba's registries stayed out."""
    assert out == "True 1 False"


def test_a_kernel_loaded_from_the_cache_runs_without_numbas_registries(tmp_path: Path) -> None:
    pytest.importorskip("numba")
    pkg = tmp_path / "tinyload"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "kernel.py").write_text(_LOAD_KERNEL)
    # the first process compiles (numba's compiler installs the registries itself) and saves
    assert _load_run(tmp_path, "sound") == "True 0 True"
    check_a_cached_load_needs_no_registries(_load_run(tmp_path, "sound"))
    assert _load_run(tmp_path, "numba_way") == "True 0 True"
    numba_way = _load_run(tmp_path, "numba_way")
    assert numba_way == "True 1 True"  # loaded from numba's cache, after its refresh
    rejects(check_a_cached_load_needs_no_registries, numba_way)


_ENGINES_RUN = """
import json
import numpy as np
from refimpl.sim import SimConfig, simulate, simulate_engine
from refimpl.sim.engine import EngineModel
from refimpl.sim.agent import AgentConfig, simulate_agent

def same(a, b):
    return all(np.array_equal(getattr(a, f), getattr(b, f))
               for f in ("staleness", "length", "status", "rank", "launch_time"))

out = {}
# first, before anything installs numba's registries: the vectorized ordering's kernels allocate
# with numba's runtime, which only numba's own load sets up (loaded lean, they crashed)
from unittest import mock
from refimpl.sim import _vector_compiled
cfg = SimConfig(slots=8, batch=8, steps=30, seed=2)
with mock.patch.object(_vector_compiled, "worth_compiling", return_value=True):
    auto = simulate(cfg, engine="auto")
out["ordering"] = same(auto, simulate(cfg, engine="event"))
for name, opts in {"restart": {"partial": "restart"}, "admission": {"mode": "admission", "eta": 1},
                   "preempt": {"preempt_rate": 1e-3, "preempt_duration": 50.0}}.items():
    cfg = SimConfig(slots=16, batch=32, steps=40, seed=3, **opts)
    out[name] = same(simulate(cfg, engine="compiled"), simulate(cfg, engine="event"))
# 1 GiB of KV (1170 blocks of 16 tokens) for 16 sequences of lognormal(6, 1) tokens: preemptions
model = EngineModel.preset("qwen2.5-7b-h100", prompt_tokens=64, kv_memory_bytes=2**30)
cfg = SimConfig(slots=16, batch=32, steps=20, seed=3, engine_model=model)
a, b = simulate_engine(cfg, engine="compiled"), simulate_engine(cfg, engine="event")
out["engine"] = same(a.trace, b.trace) and a.stats == b.stats and a.stats.preemptions > 0
lengths = np.random.default_rng(3).lognormal(5.0, 1.0, size=(16, 400))
acfg = AgentConfig(slots=16, batch=32, steps=20, lengths=lengths, seed=3, turns=2, tool_latency=5.0)
ra, rb = simulate_agent(acfg, engine="compiled"), simulate_agent(acfg, engine="event")
out["agent"] = all(np.array_equal(getattr(ra.rollouts, f), getattr(rb.rollouts, f))
                   for f in ("staleness", "length", "status", "completion_rank"))
print(json.dumps(out))
"""


def test_each_compiled_engine_in_a_fresh_process_gives_the_reference_trace() -> None:
    """What ``refimpl simulate`` runs: kernels loaded from the cache (compiled on a cache miss)
    in a fresh interpreter, against the reference engines in the same process."""
    pytest.importorskip("numba")
    done = subprocess.run(
        [sys.executable, "-c", _ENGINES_RUN], capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout)
    assert got == dict.fromkeys(
        ("ordering", "restart", "admission", "preempt", "engine", "agent"), True
    )
