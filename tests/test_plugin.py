"""The pytest plugin: inert unless asked; with a target and a spec, one item per check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from refimpl.testing import check_names

pytest_plugins = ["pytester"]

CANDIDATES = textwrap.dedent(
    """
    import numpy as np
    import refimpl

    def good_mask(s, *, eta):
        return refimpl.staleness_mask(s, eta=eta)

    def strict_mask(s, *, eta):
        return (np.asarray(s) < eta).astype(float)  # off-by-one: drops s == eta

    def no_cap(logp_target, logp_behavior, *, cap, mask=None):
        return np.exp(np.asarray(logp_target) - np.asarray(logp_behavior))

    def torch_tis(logp_target, logp_behavior, *, cap, mask):
        import torch
        assert logp_target.dtype == torch.float32
        w = torch.clamp(torch.exp(torch.clamp(logp_target - logp_behavior, -20, 20)), max=cap)
        return torch.where(mask > 0, w, torch.zeros_like(w))
    """
)

FAST = "--refimpl-max-examples=25"


@pytest.fixture
def candidates(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(mycandidates=CANDIDATES)
    pytester.syspathinsert()
    return pytester


def test_plugin_is_registered_through_the_entry_point(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--help")
    result.stdout.fnmatch_lines(["*refimpl conformance checks*", "*--refimpl-target=*"])


def _modules_loaded_by_an_inert_run(
    directory: Path, *plugin_args: str, autoload: bool = False
) -> list[str]:
    code = textwrap.dedent(
        f"""
        import sys, pytest
        code = pytest.main(["-q", "-p", "no:cacheprovider", *{list(plugin_args)!r}, {str(directory)!r}])
        loaded = [m for m in ("refimpl", "numpy", "hypothesis") if m in sys.modules]
        assert "_refimpl_pytestplugin" in sys.modules, "the plugin was not loaded"
        print("LOADED", loaded, "EXIT", int(code))
        """
    )
    env = dict(os.environ)
    env.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
    if not autoload:  # only our plugin: another one (Hypothesis's) may import its own package
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr + done.stdout
    line = next(x for x in done.stdout.splitlines() if x.startswith("LOADED"))
    loaded, exit_code = line.removeprefix("LOADED ").split(" EXIT ")
    assert exit_code == "0"
    names: list[str] = json.loads(loaded.replace("'", '"'))
    return names


def test_inert_plugin_imports_nothing_heavy(tmp_path: Path) -> None:
    (tmp_path / "test_plain.py").write_text("def test_one():\n    assert True\n")
    loaded = _modules_loaded_by_an_inert_run(tmp_path, "-p", "_refimpl_pytestplugin")
    assert loaded == []


def test_plugin_loaded_by_its_entry_point_imports_neither_refimpl_nor_numpy(
    tmp_path: Path,
) -> None:
    (tmp_path / "test_plain.py").write_text("def test_one():\n    assert True\n")
    loaded = _modules_loaded_by_an_inert_run(tmp_path, autoload=True)
    assert "refimpl" not in loaded
    assert "numpy" not in loaded


def test_subprocess_probe_sees_imports_when_the_plugin_is_asked(tmp_path: Path) -> None:
    # The probe above can fail: asked for a run, the plugin does import refimpl, numpy, hypothesis.
    (tmp_path / "mycandidates.py").write_text(CANDIDATES)
    (tmp_path / "conftest.py").write_text(f"import sys\nsys.path.insert(0, {str(tmp_path)!r})\n")
    loaded = _modules_loaded_by_an_inert_run(
        tmp_path,
        "-p",
        "_refimpl_pytestplugin",
        "--refimpl-target=mycandidates:good_mask",
        "--refimpl-spec=staleness_mask",
        FAST,
    )
    assert loaded == ["refimpl", "numpy", "hypothesis"]


def test_without_options_no_items_are_added(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_one():\n    assert True\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_correct_target_passes_every_check(candidates: pytest.Pytester) -> None:
    result = candidates.runpytest(
        "--refimpl-target=mycandidates:good_mask", "--refimpl-spec=staleness_mask", FAST, "-v"
    )
    result.assert_outcomes(passed=len(check_names("staleness_mask")))
    result.stdout.fnmatch_lines(["*refimpl::staleness_mask::keeps_at_bound PASSED*"])


def test_planted_off_by_one_fails_with_a_reproduction(candidates: pytest.Pytester) -> None:
    result = candidates.runpytest(
        "--refimpl-target=mycandidates:strict_mask", "--refimpl-spec=staleness_mask", FAST
    )
    result.assert_outcomes(passed=3, failed=3)
    result.stdout.fnmatch_lines(
        [
            "*FAILED   staleness_mask.keeps_at_bound*",
            "*samples with s == 0 (eta = 0) got weights*",
            "*from mycandidates import strict_mask as candidate*",
            "*FAILED refimpl::staleness_mask::keeps_on_policy*",
        ]
    )


def test_planted_tis_without_cap_fails(candidates: pytest.Pytester) -> None:
    result = candidates.runpytest(
        "--refimpl-target=mycandidates:no_cap", "--refimpl-spec=tis", FAST, "-k", "never_exceeds"
    )
    result.assert_outcomes(failed=1, deselected=len(check_names("tis")) - 1)
    result.stdout.fnmatch_lines(["*weights above the cap*"])


def test_float32_torch_target_with_a_declared_clamp_passes(candidates: pytest.Pytester) -> None:
    args = ["--refimpl-target=mycandidates:torch_tis", "--refimpl-spec=tis", FAST]
    torch_args = ["--refimpl-xp=torch", "--refimpl-dtype=float32"]
    # torch in a child process: importing it into pytester's in-process runs is not safe
    declared = candidates.runpytest_subprocess(
        *args, *torch_args, "--refimpl-convention=log_ratio_clamp=20"
    )
    declared.assert_outcomes(passed=len(check_names("tis")))
    undeclared = candidates.runpytest_subprocess(*args, *torch_args, "-k", "agrees")
    undeclared.assert_outcomes(failed=1, deselected=len(check_names("tis")) - 1)
    undeclared.stdout.fnmatch_lines(["*passes under conventions={'log_ratio_clamp': 20.0}*"])


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("--refimpl-dtype=float8", "*dtype must be one of 'float64', 'float32'*"),
        ("--refimpl-xp=nosuchlib", "*xp must name an installed array library*"),
        ("--refimpl-convention=nope=1", "*--refimpl-convention must be KEY=VALUE with a key*"),
        (
            "--refimpl-convention=padding=two",
            "*must be one of 'zero', 'one', 'ignored' for spec 'tis'*",
        ),
        ("--refimpl-rtol=-1", "*rtol must be a finite number >= 0*"),
    ],
)
def test_bad_array_options_are_usage_errors(
    candidates: pytest.Pytester, option: str, message: str
) -> None:
    result = candidates.runpytest_subprocess(
        "--refimpl-target=mycandidates:torch_tis", "--refimpl-spec=tis", option
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_declared_expected_failures_xfail_and_a_stale_one_fails(
    candidates: pytest.Pytester,
) -> None:
    result = candidates.runpytest(
        "--refimpl-target=mycandidates:strict_mask",
        "--refimpl-spec=staleness_mask",
        "--refimpl-xfail=agrees_with_reference:known off-by-one",
        "--refimpl-xfail=keeps_on_policy",
        "--refimpl-xfail=staleness_mask.keeps_at_bound:known",
        "--refimpl-xfail=binary:not actually broken",
        FAST,
    )
    result.assert_outcomes(passed=2, xfailed=3, failed=1)
    result.stdout.fnmatch_lines(["*XPASSED  staleness_mask.binary*", "*remove it from*"])


def test_report_file_records_every_check(candidates: pytest.Pytester) -> None:
    report = candidates.path / "conformance.json"
    candidates.runpytest(
        "--refimpl-target=mycandidates:strict_mask",
        "--refimpl-spec=staleness_mask",
        f"--refimpl-report={report}",
        FAST,
    )
    data = json.loads(report.read_text())
    assert data["target"] == "mycandidates:strict_mask"
    assert data["ok"] is False
    statuses = {r["name"]: r["status"] for r in data["results"]}
    assert statuses["keeps_at_bound"] == "failed"
    assert statuses["binary"] == "passed"
    assert set(statuses) == set(check_names("staleness_mask"))
    failed = next(r for r in data["results"] if r["name"] == "keeps_at_bound")
    assert "import strict_mask as candidate" in failed["reproduction"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--refimpl-spec=staleness_mask"], "*--refimpl-target and --refimpl-spec go together*"),
        (
            ["--refimpl-target=mycandidates:good_mask", "--refimpl-spec=nope"],
            "*--refimpl-spec must be one of effort_penalty*",
        ),
        (
            [
                "--refimpl-target=mycandidates:good_mask",
                "--refimpl-spec=staleness_mask",
                "--refimpl-xfail=nope",
            ],
            "*--refimpl-xfail names no check of spec 'staleness_mask': 'nope'*",
        ),
    ],
)
def test_bad_options_are_usage_errors(
    candidates: pytest.Pytester, args: list[str], message: str
) -> None:
    result = candidates.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("mycandidates:nope", "*'mycandidates' has no attribute 'nope'. Check the function name*"),
        ("nosuchmodule:f", "*candidate module 'nosuchmodule' cannot be imported*"),
        ("mycandidates", "*Separate the module and the function with ':'*"),
        ("mycandidates:np", "*candidate must be callable*"),
        ("badmodule:f", "*failed while it was imported (RuntimeError: broken at import)*"),
    ],
)
def test_unloadable_target_is_one_usage_error(
    candidates: pytest.Pytester, target: str, message: str
) -> None:
    candidates.makepyfile(badmodule="raise RuntimeError('broken at import')\n")
    candidates.makepyfile(test_plain="def test_one():\n    assert True\n")
    result = candidates.runpytest(
        f"--refimpl-target={target}", "--refimpl-spec=staleness_mask", FAST
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --refimpl-target{message}"])
    output = "\n".join(result.outlines + result.errlines)
    assert output.count("--refimpl-target") == 1, output  # once, not once per item
    assert "Traceback" not in output
    assert len(result.errlines) < 10, output


def test_target_next_to_the_tests_is_resolved_after_collection(
    pytester: pytest.Pytester,
) -> None:
    # sub/ is on sys.path only once pytest has collected sub/test_x.py (rootdir-relative
    # "prepend" import mode), so the target must be imported after collection, not at configure.
    sub = pytester.mkdir("sub")
    (sub / "subtarget.py").write_text(CANDIDATES)
    (sub / "test_x.py").write_text("def test_one():\n    assert True\n")
    result = pytester.runpytest(
        "sub", "--refimpl-target=subtarget:good_mask", "--refimpl-spec=staleness_mask", FAST
    )
    result.assert_outcomes(passed=1 + len(check_names("staleness_mask")))


def test_refimpl_only_deselects_the_other_tests(candidates: pytest.Pytester) -> None:
    candidates.makepyfile(test_plain="def test_one():\n    assert True\n")
    args = ["--refimpl-target=mycandidates:good_mask", "--refimpl-spec=staleness_mask", FAST]
    candidates.runpytest(*args).assert_outcomes(passed=1 + len(check_names("staleness_mask")))
    only = candidates.runpytest(*args, "--refimpl-only")
    only.assert_outcomes(passed=len(check_names("staleness_mask")), deselected=1)
