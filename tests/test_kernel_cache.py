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

import os
import subprocess
import sys
from pathlib import Path

import pytest

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
    """The tiny package's kernels in a fresh interpreter (no bytecode: a file rewritten within
    the same second must be read again)."""
    env = {
        **os.environ,
        "NUMBA_CACHE_DIR": str(root / "cache"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", _RUN], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


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
