"""Hypothesis profiles for the test suite.

- ``ci``: derandomized (same examples every run), no deadline; loaded when the ``CI`` variable is set.
- ``dev``: the default for local runs: random examples, fewer of them, no deadline.
- ``thorough``: many examples, for runs outside the gate:
  ``HYPOTHESIS_PROFILE=thorough pytest``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# The generators of reference data run in their own environments (rlax and jax for V-trace), not
# in the test suite: never import them here, not even for their doctests.
# jax_cases.py and jax_loss_cases.py run in their own interpreter (see test_conformance_jax.py):
# never import them here.
collect_ignore = ["data", "jax_cases.py", "jax_loss_cases.py"]

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


class QuickLab:
    """What one ``refimpl lab --quick`` run in a fresh directory left behind."""

    def __init__(self, cwd: Path, result: subprocess.CompletedProcess[str]) -> None:
        self.cwd = cwd
        self.report = cwd / "lab-report"
        self.result = result


@pytest.fixture(scope="session")
def quick_lab(tmp_path_factory: pytest.TempPathFactory) -> QuickLab:
    """``refimpl lab --quick`` run once, as the getting-started page runs it (the installed command,
    in an empty directory); shared by the tests of that page and the browser test of the report."""
    command = Path(sys.executable).parent / "refimpl"
    if not command.is_file():
        pytest.fail(
            f"the refimpl command is not installed next to {sys.executable}: pip install -e ."
        )
    cwd = tmp_path_factory.mktemp("quick-lab")
    result = subprocess.run(
        [str(command), "lab", "--quick"], cwd=cwd, capture_output=True, text=True, timeout=600
    )
    return QuickLab(cwd, result)
