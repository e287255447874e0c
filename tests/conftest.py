"""Hypothesis profiles for the test suite.

- ``ci``: derandomized (same examples every run), no deadline; loaded when the ``CI`` variable is set.
- ``dev``: the default for local runs: random examples, fewer of them, no deadline.
- ``thorough``: many examples, for runs outside the gate:
  ``HYPOTHESIS_PROFILE=thorough pytest``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

try:
    import fcntl
except ImportError:  # no POSIX file locks (Windows): each worker runs what it needs itself
    fcntl = None  # type: ignore[assignment]

# The generators of reference data run in their own environments (rlax and jax for V-trace), not
# in the test suite: never import them here, not even for their doctests.
# jax_cases.py and jax_loss_cases.py run in their own interpreter (see test_conformance_jax.py),
# jax_adapter_cases.py too (see test_frameworks_xp.py): never import them here.
collect_ignore = ["data", "jax_cases.py", "jax_loss_cases.py", "jax_adapter_cases.py"]

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=60,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev",
    deadline=None,
    max_examples=40,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],  # a wall-clock check: load would decide it
)
settings.register_profile(
    "thorough", deadline=None, max_examples=2_000, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def session_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory of this test session that every pytest-xdist worker sees: each worker's base
    temporary directory lies in the session's own (``pytest-N/popen-gwK``); without workers, the
    base temporary directory itself."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER") and fcntl is not None:
        return base.parent
    return base


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the file ``path`` (created if missing): a worker that asks for it
    while another holds it waits until that one is done. The lock goes with the process that
    holds it, should it die."""
    with path.open("a") as f:
        if fcntl is not None:
            fcntl.flock(f, fcntl.LOCK_EX)
        yield


class QuickLab:
    """What one ``refimpl lab --quick`` run in a fresh directory left behind."""

    def __init__(
        self, cwd: Path, result: subprocess.CompletedProcess[str], compiled: list[str]
    ) -> None:
        self.cwd = cwd
        self.report = cwd / "lab-report"
        self.result = result
        #: the kernels the run compiled into its numba cache, empty at its start
        self.compiled = compiled


def _run_quick_lab(root: Path) -> dict[str, object]:
    """Run ``refimpl lab --quick`` in the empty directory ``root/cwd``, with the empty numba cache
    ``root/numba-cache``: what a first run after installation meets."""
    command = Path(sys.executable).parent / "refimpl"
    if not command.is_file():
        pytest.fail(
            f"the refimpl command is not installed next to {sys.executable}: pip install -e ."
        )
    shutil.rmtree(root, ignore_errors=True)  # what a run that died before its end left
    cwd, cache = root / "cwd", root / "numba-cache"
    cwd.mkdir(parents=True)
    cache.mkdir()
    result = subprocess.run(
        [str(command), "lab", "--quick"],
        cwd=cwd,
        env={**os.environ, "NUMBA_CACHE_DIR": str(cache)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    return {
        "cwd": str(cwd),
        "args": [str(command), "lab", "--quick"],
        "returncode": result.returncode,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "compiled": sorted(p.name for p in cache.rglob("*.nbi")),
    }


@pytest.fixture(scope="session")
def quick_lab(tmp_path_factory: pytest.TempPathFactory) -> QuickLab:
    """``refimpl lab --quick`` run once per test session, as the getting-started page runs it (the
    installed command, in an empty directory, on an empty numba cache); shared by the tests of
    that page, the browser test of the report and the lab test of what a first run compiles.

    The first worker that needs it runs it, under a lock, and leaves its outcome in the session's
    directory (written whole, then renamed into place); the others read that outcome."""
    shared = session_dir(tmp_path_factory)
    done = shared / "quick-lab.json"
    with locked(shared / "quick-lab.lock"):
        if not done.is_file():
            partial = shared / "quick-lab.json.partial"
            partial.write_text(json.dumps(_run_quick_lab(shared / "quick-lab")))
            os.replace(partial, done)
        got = json.loads(done.read_text())
    result = subprocess.CompletedProcess(
        got["args"], got["returncode"], stdout=got["stdout"], stderr=got["stderr"]
    )
    return QuickLab(Path(got["cwd"]), result, got["compiled"])


@pytest.fixture
def python_ctrl_c() -> Iterator[None]:
    """Ctrl-C as Python installs it: ``KeyboardInterrupt`` from SIGINT, for the test's length.

    Python installs that handler only when SIGINT was not ignored at its start; a shell without
    job control (``cmd &``, ``nohup``) starts pytest with SIGINT ignored, and refimpl then leaves
    the caller's choice alone. The tests of what a Ctrl-C does take Python's handler as given, so
    they set it here instead of depending on how pytest was started."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
