"""The getting-started page works as written: its commands run, and print what the page shows.

The install command is the README's; the lab command is run by the ``quick_lab`` fixture (shared
with the browser test); the Python block and the trace commands are taken from the page and run in
a fresh directory, and their output is compared line by line with the page's.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import QuickLab

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "getting-started.md"
BIN = Path(sys.executable).parent


def blocks(language: str) -> list[str]:
    """The fenced blocks of the page in ``language``, in page order."""
    return re.findall(rf"^```{language}\n(.*?)^```", PAGE.read_text(), flags=re.S | re.M)


def console(block: str) -> list[tuple[str, list[str]]]:
    """``(command, expected output lines)`` for each ``$ `` line of a console block."""
    steps: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            assert steps, f"output before the first command in a console block: {line!r}"
            steps[-1][1].append(line)
    return steps


def run_python(source: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    (cwd / "example.py").write_text(source)
    return subprocess.run(
        [sys.executable, "example.py"], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def test_the_install_command_is_the_readmes() -> None:
    install = console(blocks("console")[0])
    assert [c for c, _ in install] == [
        "python3 -m venv --upgrade-deps .venv && .venv/bin/pip install '.[lab]'",
        ". .venv/bin/activate",
    ]
    readme = (ROOT / "README.md").read_text()
    main = re.search(r"<!-- main-command -->\n```bash\n(.*?)\n```", readme, flags=re.S)
    assert main is not None, "README.md has no main-command block"
    assert main[1].startswith(install[0][0] + " && "), main[1]


def test_the_lab_command_writes_the_report_the_page_describes(quick_lab: QuickLab) -> None:
    assert console(blocks("console")[1]) == [("refimpl lab --quick", [])]
    assert quick_lab.result.returncode == 0, quick_lab.result.stderr[-3000:]
    shown = next(b for b in blocks("text") if b.startswith("wrote lab-report/")).strip()
    # The same line, with any number (the run time) allowed to differ.
    pattern = re.sub(r"\d+\\\.\d+", r"\\d+\\.\\d+", re.escape(shown))
    last = quick_lab.result.stderr.strip().splitlines()[-1]
    assert re.fullmatch(pattern, last), (last, shown)
    for name in ["index.html", "report.md", "metrics.json"]:
        assert (quick_lab.report / name).is_file(), name


def test_the_oracle_example_passes_and_prints_what_the_page_shows(tmp_path: Path) -> None:
    (source,) = blocks("python")
    result = run_python(source, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    shown = next(b for b in blocks("text") if b.startswith("refimpl conformance of")).splitlines()
    printed = result.stdout.splitlines()
    head = re.escape(shown[0]).replace("0x7f42d38d84a0", "0x[0-9a-f]+")
    assert re.fullmatch(head, printed[0]), printed[0]
    assert printed[1:] == shown[1:]


def test_the_oracle_example_catches_the_strict_comparison(tmp_path: Path) -> None:
    (source,) = blocks("python")
    buggy = source.replace("<= eta", "< eta")
    assert buggy != source
    result = run_python(buggy, tmp_path)
    assert result.returncode != 0
    assert result.stdout.splitlines()[0].endswith("3 failed, 3 passed"), result.stdout
    # The smallest counterexample the page names: one on-policy sample, eta = 0.
    assert "((np.array([0], dtype=np.int64),), {'eta': 0})" in result.stdout
    assert "refimpl.testing.ConformanceError: refimpl conformance of" in result.stderr


def test_the_trace_check_prints_what_the_page_shows(tmp_path: Path) -> None:
    steps = console(blocks("console")[2])
    assert [c.split()[0] for c, _ in steps] == ["printf", "refimpl", "echo"]
    if not (BIN / "refimpl").is_file():
        pytest.fail(f"the refimpl command is not installed next to {sys.executable}")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    code = 0
    for command, expected in steps:
        if command == "echo $?":
            output = f"{code}\n"
        else:
            result = subprocess.run(
                ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True
            )
            code, output = result.returncode, result.stdout + result.stderr
        assert output.splitlines() == expected, (command, output)


def readme_quick_start() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Python quick start", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, flags=re.S)
    assert block is not None, "README.md has no python block under 'Python quick start'"
    return block[1]


def test_the_readme_quick_start_prints_its_reference_value_and_passes(tmp_path: Path) -> None:
    source = readme_quick_start()
    lines = [line for line in source.splitlines() if line.strip()]
    assert len(lines) == 5, "the README promises a five-line quick start"
    result = run_python(source, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    printed = next(line for line in lines if line.startswith("print("))
    assert result.stdout == printed.split("# ")[1].split(":")[0] + "\n"


def test_the_readme_quick_start_check_catches_the_strict_comparison(tmp_path: Path) -> None:
    source = readme_quick_start()
    buggy = source.replace("<= eta", "< eta")
    assert buggy != source
    result = run_python(buggy, tmp_path)
    assert result.returncode != 0
    assert "ConformanceError" in result.stderr
    assert "3 failed, 3 passed" in result.stderr
