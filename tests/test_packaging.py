"""The light install: ``pip install refimpl`` brings only what the reference functions and
``refimpl.testing`` need, and each command names the extra it is missing."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE = {"numpy", "scipy", "hypothesis", "array-api-compat"}
# Made unimportable in the checks below. (torch is left alone: scipy's vendored array-api-compat
# looks it up in sys.modules, and a None there breaks it; the core never imports torch itself.)
HEAVY = ("matplotlib", "pyarrow", "tqdm", "dask", "distributed", "pandas", "sympy")


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match is not None, requirement
    return match[0].lower()


def test_the_core_dependencies_are_the_light_four() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert {_name(r) for r in project["dependencies"]} == CORE
    extras = project["optional-dependencies"]
    for extra in ("lab", "trace", "sim", "sweep", "all", "test-torch"):
        assert extra in extras, extra
    assert "torch" in {_name(r) for r in extras["test-torch"]}
    assert not any("torch" in r for r in extras["test"] + extras["dev"]), "torch only via -c"


def test_torch_is_pinned_by_the_constraints_file_the_readme_installs_with() -> None:
    pins = (ROOT / "constraints.txt").read_text()
    assert re.search(r"^torch==2\.13\.0$", pins, flags=re.M)
    readme = (ROOT / "README.md").read_text()
    test = re.search(r"<!-- test-command -->\n```bash\n(.*?)\n```", readme, flags=re.S)
    assert test is not None
    assert "-c constraints.txt" in test[1]
    assert "test-torch" in test[1]


def _blocked_run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` with every heavy optional package made unimportable."""
    blocker = textwrap.dedent(
        f"""
        import sys
        for name in {HEAVY!r}:
            sys.modules[name] = None  # import name -> ModuleNotFoundError
        """
    )
    return subprocess.run(
        [sys.executable, "-c", blocker + textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )


def test_the_oracle_runs_with_the_core_alone() -> None:
    result = _blocked_run(
        """
        import numpy as np
        import refimpl
        report = refimpl.testing.check_conformance(
            lambda s, *, eta: np.asarray(s) <= eta, spec="staleness_mask", max_examples=5
        )
        assert report.ok, report.summary()
        print(refimpl.truncated_is_weights([0.0], [0.0], cap=2.0))
        """
    )
    assert result.returncode == 0, result.stderr


def test_a_command_without_its_extra_names_the_extra(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("staleness,weight\n0,1\n")
    result = _blocked_run(
        """
        import sys
        from refimpl.cli import main
        sys.exit(main(sys.argv[1:]))
        """,
        "check",
        str(trace),
        "--spec",
        "staleness_mask",
        "--param",
        "eta=1",
    )
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert re.fullmatch(
        r"refimpl check: needs (pyarrow|tqdm), which is not installed \(the light install leaves "
        r"it out\): pip install 'refimpl\[trace\]'",
        line,
    ), line
