"""The shipped adapters call the installed framework functions (no transcriptions), one call each."""

from __future__ import annotations

import importlib.metadata
import inspect
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from refimpl.frameworks import (
    SOURCE_LOADS,
    STUBS,
    TESTED_VERSIONS,
    adapters,
    check,
    load_function,
    rejection_sampling_to_refimpl,
)


def _distribution_files(framework: str) -> set[Path]:
    dist = importlib.metadata.distribution(TESTED_VERSIONS[framework][0])
    return {Path(str(dist.locate_file(f))).resolve() for f in dist.files or ()}


@pytest.mark.parametrize("a", adapters(), ids=lambda a: a.key)
def test_the_adapter_calls_the_installed_function(a: object) -> None:
    from refimpl.frameworks import Adapter

    assert isinstance(a, Adapter)
    function = load_function(a.function)
    target = inspect.unwrap(function)
    source_file = Path(inspect.getfile(target)).resolve()
    assert source_file in _distribution_files(a.framework), source_file
    name = a.function.rpartition(":")[2].split(".")[-1]
    assert name in inspect.getsource(a.candidate), f"{a.key}'s candidate does not call {name}"


def test_one_call_checks_a_framework_function() -> None:
    report = check("verl.rollout_is_token_tis", max_examples=5)
    assert report.array == "torch float64"
    assert report.ok, report.summary()
    assert report.conventions["log_ratio_clamp"] == 20.0


def test_a_planted_bug_in_an_adapter_setting_is_caught() -> None:
    """The same call with a wrong declaration fails: the verl k1 mask is not a band on π/μ."""
    report = check("verl.rollout_rs_token_k1", max_examples=25, conventions={
        "inputs": "log_ratio", "log_ratio_clamp": 20.0, "padding": "zero", "empty_rows": "excluded",
        "weight": "indicator"})  # fmt: skip
    assert not report.ok


def test_the_skyrl_stub_is_needed_and_enough() -> None:
    (stub,) = [s for s in STUBS if s.framework == "skyrl"]
    module = "skyrl.backends.skyrl_train.utils.off_policy_correction_utils"
    plain = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", f"import {module}"], capture_output=True, text=True
    )
    assert plain.returncode != 0
    assert "TypedDict" in plain.stderr, plain.stderr[-500:]
    stubbed = subprocess.run(
        [sys.executable, "-W", "ignore", "-c",
         f"from refimpl.frameworks import install_stubs; install_stubs(); import {module}"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert stubbed.returncode == 0, stubbed.stderr[-500:]
    assert stub.package == "skyrl.backends"


#: Imports each module named on stdin (a JSON list), after install_stubs, in a child forked from
#: one interpreter that has imported torch and nothing else of the frameworks', and prints each
#: child's exit code (1: the import raised). Each module imports torch anyway: one fresh
#: interpreter per module imported it again, most of this test's CPU.
_IMPORTS = """
import json, os, sys
import torch
codes = []
for source in json.load(sys.stdin):
    pid = os.fork()
    if pid == 0:
        try:
            from refimpl.frameworks import install_stubs
            install_stubs()
            __import__(source)
        except BaseException:
            os._exit(1)
        os._exit(0)
    codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
print(json.dumps(codes))
"""


def test_every_source_load_is_of_a_module_that_cannot_be_imported() -> None:
    sources = [entry.source for entry in SOURCE_LOADS]
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", _IMPORTS],
        input=json.dumps(sources), capture_output=True, text=True, check=True,
    )  # fmt: skip
    codes = json.loads(done.stdout.strip().splitlines()[-1])
    for source, code in zip(sources, codes, strict=True):
        assert code != 0, f"{source} imports: drop its source load"


# the adapters of AReaL's rejection sampling (the function, or the loss's behaviour weight under
# a rejection_sampling setting); the loss-level adapters of ppo_actor_loss_fn set none
_REJECTION_SAMPLING = [a for a in adapters("areal") if "rejection_sampling" in a.function
                       or isinstance(a.settings.get("rejection_sampling"), dict)]  # fmt: skip


@pytest.mark.parametrize("a", _REJECTION_SAMPLING, ids=lambda a: a.key)
def test_areal_rejection_sampling_translation_is_what_the_matrix_checks(a: object) -> None:
    from refimpl.frameworks import Adapter

    assert isinstance(a, Adapter)
    settings = a.settings.get("rejection_sampling", a.settings)
    known = {k: v for k, v in settings.items() if k in ("level", "action", "metric", "agg")}
    lower = settings.get("lower")
    options: dict[str, Any] = {**known, "upper": 2.0}
    if isinstance(lower, float):
        options["lower"] = lower
    spec, _, conventions = rejection_sampling_to_refimpl(**options)
    declared = {k: v for k, v in a.conventions.items() if k != "layout"}
    assert (spec, conventions) == (a.spec, declared)
