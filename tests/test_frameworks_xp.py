"""An adapter's array library (``Adapter.xp``): a jax adapter is checked on jax arrays by
:func:`refimpl.frameworks.check`, :func:`refimpl.frameworks.check_partition` and the matrix, whose
entry, comparison and page name the library.

The jax runs are in ``tests/jax_adapter_cases.py``, in a fresh interpreter, once for this module
(jax must never be imported in the test process: ``tests/test_conformance_jax.py`` says why).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from refimpl.frameworks import Adapter
from refimpl.frameworks._matrix import changes, render_markdown

ROOT = Path(__file__).resolve().parents[1]
CASES = Path(__file__).with_name("jax_adapter_cases.py")


@pytest.fixture(scope="module")
def outcome() -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's refimpl, whatever is installed
    done = subprocess.run(
        [sys.executable, str(CASES)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_an_adapter_is_torch_unless_it_says_otherwise() -> None:
    fields = Adapter.__dataclass_fields__
    assert fields["xp"].default == "torch"


def test_check_hands_a_jax_adapter_jax_arrays(outcome: dict[str, Any]) -> None:
    assert outcome["check"] == {"failed": [], "seen": ["jax"]}
    assert outcome["torch_imported"] is False  # eager() leaves torch alone for a jax adapter


def test_a_jax_adapter_s_failure_reproduces_in_jax(outcome: dict[str, Any]) -> None:
    wrong = outcome["wrong"]
    assert wrong["status"] == "failed"
    assert "xp='jax.numpy', dtype='float32'" in wrong["reproduction"]


def test_check_partition_runs_a_jax_scaling_path_in_jax(outcome: dict[str, Any]) -> None:
    partition = outcome["partition"]
    assert partition["ok"], partition["summary"]
    assert partition["seen"] == ["jax"]
    assert "(jax.numpy float32)" in partition["summary"]


def test_the_matrix_entry_of_a_jax_adapter_names_its_library(outcome: dict[str, Any]) -> None:
    assert outcome["entry"] == {
        "xp": "jax.numpy",
        "verdict": "pass",
        "partition": "invariant",
        "seen": ["jax"],
    }


def _entry(**extra: Any) -> dict[str, Any]:
    return {
        "key": "skyrl.f",
        "framework": "skyrl",
        "version": "0.3.0",
        "spec": "nll",
        "level": "loss",
        "conventions": {},
        "verdict": "pass",
        "verdicts": {"value": "pass", "gradient": "pass", "partition": "not applicable"},
        "checks": {},
        "divergences": [],
        "adapter_lines": 3,
        **extra,
    }


def test_changes_finds_an_array_library_that_moved() -> None:
    old = {"versions": {"skyrl": "0.3.0"}, "entries": [_entry()]}
    new = {"versions": {"skyrl": "0.3.0"}, "entries": [_entry(xp="jax.numpy")]}
    assert changes(new, old) == ["skyrl.f: xp None -> 'jax.numpy'"]
    assert changes(old, old) == []


def test_the_matrix_page_names_a_library_other_than_torch() -> None:
    page = render_markdown({"versions": {}, "entries": [_entry(xp="jax.numpy")]})
    assert "| `skyrl.f` (jax.numpy) | nll |" in page
    page = render_markdown({"versions": {}, "entries": [_entry()]})
    assert "| `skyrl.f` | nll |" in page
