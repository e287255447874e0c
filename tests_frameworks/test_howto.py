"""docs/howto/check-your-framework.md: its ten lines pass as shown, and catch a planted bug."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

PAGE = Path(__file__).resolve().parents[1] / "docs" / "howto" / "check-your-framework.md"


def _snippet() -> str:
    (block,) = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)
    return str(block)


def _run(source: str) -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(source, str(PAGE), "exec"), namespace)
    return namespace["report"]


def test_the_snippet_is_at_most_ten_lines_and_passes(capsys: pytest.CaptureFixture[str]) -> None:
    source = _snippet()
    lines = [line for line in source.splitlines() if line.strip()]
    assert len(lines) <= 10
    report = _run(source)
    assert report.ok, report.summary()
    assert report.array == "torch float32"
    assert "tis" in capsys.readouterr().out


def test_the_snippet_catches_a_planted_bug(capsys: pytest.CaptureFixture[str]) -> None:
    source = _snippet()
    assert "max=cap" in source
    report = _run(source.replace("max=cap", "max=2 * cap"))  # the cap applied twice as loose
    assert not report.ok
    assert "never_exceeds_cap" in [r.name for r in report.failures]
