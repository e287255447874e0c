"""The three how-to guides catch their planted bugs, with the code exactly as the pages show it.

Each test takes the buggy module from the page's code block (the block whose first line is
``# mytrainer/NAME.py``), runs the gate the page describes, checks the failure the page shows, then
fixes the bug and checks that the same gate passes.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

from refimpl.cli import main
from refimpl.testing import check_names

pytest_plugins = ["pytester"]

DOCS = Path(__file__).resolve().parent.parent / "docs"


def code_block(page: str, first_line: str) -> str:
    """The ```python block of ``docs/howto/page`` whose first line is ``first_line``."""
    text = (DOCS / "howto" / page).read_text()
    for block in re.findall(r"```python\n(.*?)```", text, flags=re.S):
        if block.startswith(first_line + "\n"):
            return str(block)
    raise AssertionError(f"no python block starting with {first_line!r} in {page}")


def install(pytester: pytest.Pytester, files: dict[str, str]) -> None:
    pytester.mkpydir("mytrainer")
    for name, source in files.items():
        (pytester.path / name).parent.mkdir(parents=True, exist_ok=True)
        (pytester.path / name).write_text(source)
    pytester.syspathinsert()


def test_oracle_howto_catches_the_staleness_off_by_one(pytester: pytest.Pytester) -> None:
    page = "oracle-in-your-tests.md"
    module = code_block(page, "# mytrainer/staleness.py")
    test_file = code_block(page, "# tests/test_staleness.py")
    conformance = code_block(page, "from refimpl.testing import check_conformance")
    install(
        pytester,
        {
            "mytrainer/staleness.py": module,
            # unique names: the in-process run shares sys.modules with refimpl's own tests
            "test_howto_oracle_staleness.py": test_file,
            "test_howto_oracle_conformance.py": conformance,
        },
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*s=array([[]0[]]),*", "*eta=0,*"])
    result.stdout.fnmatch_lines(["*failed   staleness_mask.keeps_at_bound*"])
    fixed = module.replace("< eta)", "<= eta)")
    assert fixed != module
    (pytester.path / "mytrainer" / "staleness.py").write_text(fixed)
    for name in list(sys.modules):
        if name.startswith("mytrainer"):
            del sys.modules[name]
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)


def _log_run(directory: Path) -> Path:
    """The short training run of the page: three steps of 1000 tokens, log-ratio spread 0.5."""
    for name in [m for m in sys.modules if m.startswith("mytrainer")]:
        del sys.modules[name]
    from mytrainer.tis import log_batch, tis_weights  # type: ignore[import-not-found]

    path = directory / "tokens.jsonl"
    path.unlink(missing_ok=True)
    rng = np.random.default_rng(0)
    for _ in range(3):
        lb = np.log(rng.uniform(0.05, 1.0, 1000))
        lt = lb + rng.normal(0.0, 0.5, 1000)
        log_batch(str(path), lt.tolist(), lb.tolist(), tis_weights(lt, lb, cap=2.0).tolist())
    return path


def _check(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["check", str(path), "--spec", "tis", "--param", "cap=2.0", "--max-show", "3"])
    return code, capsys.readouterr().out


def test_trace_howto_catches_tis_without_its_cap(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    module = code_block("gate-ci-on-traces.md", "# mytrainer/tis.py")
    install(pytester, {"mytrainer/tis.py": module})
    code, out = _check(_log_run(pytester.path), capsys)
    assert code == 1
    page = (DOCS / "howto" / "gate-ci-on-traces.md").read_text()
    for line in out.splitlines()[2:]:  # the lines after the header, as the page shows
        assert line in page, line
    fixed = module.replace(
        "np.exp(logp_target - logp_behavior)",
        "np.exp(np.minimum(logp_target - logp_behavior, np.log(cap)))",
    )
    assert fixed != module
    (pytester.path / "mytrainer" / "tis.py").write_text(fixed)
    code, out = _check(_log_run(pytester.path), capsys)
    assert code == 0, out
    assert "OK: all 3,000 rows agree" in out


def test_plugin_howto_catches_the_penalty_with_the_wrong_sign(pytester: pytest.Pytester) -> None:
    module = code_block("pytest-plugin.md", "# mytrainer/reward.py")
    install(pytester, {"mytrainer/reward.py": module})
    args = [
        "-p",
        "no:cacheprovider",
        "--refimpl-target=mytrainer.reward:length_price",
        "--refimpl-spec=effort_penalty",
        "--refimpl-only",
    ]
    result = pytester.runpytest_inprocess(*args)
    result.assert_outcomes(failed=4, passed=1)
    page = (DOCS / "howto" / "pytest-plugin.md").read_text()
    for line in result.stdout.lines:
        if line.startswith("FAILED refimpl::"):
            assert line.split(" - ")[0] + " - " in page, line
        elif "k increases from b=" in line:
            assert line.strip() in page, line
    fixed = module.replace("np.exp((np.asarray", "np.exp(-(np.asarray")
    assert fixed != module
    (pytester.path / "mytrainer" / "reward.py").write_text(fixed)
    result = pytester.runpytest_inprocess(*args)
    result.assert_outcomes(passed=len(check_names("effort_penalty")))


def test_every_check_is_listed_in_the_api_page() -> None:
    from refimpl.testing import spec_names

    page = (DOCS / "api" / "testing.md").read_text()
    rows = re.findall(r"^\| (`\w+`)? *\| `(\w+)` \|", page, flags=re.M)
    listed: dict[str, list[str]] = {}
    spec = ""
    for spec_cell, check in rows:
        spec = spec_cell.strip("`") or spec
        listed.setdefault(spec, []).append(check)
    assert listed == {s: list(check_names(s)) for s in spec_names()}
