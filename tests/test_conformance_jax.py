"""The oracle against jax (``xp="jax.numpy"``, float32): a correct implementation passes, a planted
bug fails, jax arrays reach the candidate, and float64 without ``jax_enable_x64`` is refused.

The cases are in ``tests/jax_cases.py`` and run in a fresh interpreter, once for this module: jax
must never be imported in the test process, where its threads would make every later ``os.fork``
warn (and the suite's warnings are errors).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

CASES = Path(__file__).with_name("jax_cases.py")
SPECS = ["effort_penalty", "staleness_mask", "tis"]


@pytest.fixture(scope="module")
def outcome() -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(CASES)], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_jax_stays_out_of_the_test_process() -> None:
    assert "jax" not in sys.modules


@pytest.mark.parametrize("spec", SPECS)
def test_a_jax_implementation_passes_and_a_planted_bug_fails(
    spec: str, outcome: dict[str, Any]
) -> None:
    case = outcome[spec]
    assert case["failed"] == [], case["summary"]
    assert case["array"] == "jax.numpy float32"
    assert case["planted"] == "failed", case["planted_summary"]


def test_jax_arrays_reach_the_candidate(outcome: dict[str, Any]) -> None:
    spy = outcome["spy"]
    assert spy["failed"] == [], spy["summary"]
    assert spy["seen"] in (["jaxlib"], ["jax"]), spy["seen"]


def test_float64_without_jax_x64_is_refused_not_silently_rounded(outcome: dict[str, Any]) -> None:
    refused = outcome["float64"]
    assert refused["raised"] is not None, "float64 was accepted without jax_enable_x64"
    assert "jax_enable_x64" in refused["message"]
