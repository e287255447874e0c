"""The measured table of the fluid model's error (docs/concepts/length-bias.md) is what the tool prints.

The table is produced by ``tools/fluid_error_table.py`` from seeded simulations; recomputing two of
its rows here (a few seconds) keeps the published numbers tied to the simulator and the fluid model
as they are now: a change to either that moves a printed digit fails this test.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest
from _scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "concepts" / "length-bias.md"


def _tool() -> ModuleType:
    return load_script("fluid_error_table", ROOT / "tools" / "fluid_error_table.py")


def _published_rows() -> dict[tuple[int, int, int], str]:
    text = PAGE.read_text(encoding="utf-8")
    block = re.search(
        r"<!-- fluid-error-table.*?-->\n(.*?)\n<!-- /fluid-error-table -->", text, re.S
    )
    assert block is not None, "the generated table's markers are missing from the length-bias page"
    rows = {}
    for line in block.group(1).splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[(int(cells[0]), int(cells[1]), int(cells[2]))] = line
    return rows


def test_the_published_table_covers_every_setting_of_the_tool() -> None:
    tool = _tool()
    want = {
        (slots, max(1, round(slots / ratio)), eta)
        for ratio in tool.RATIOS
        for eta in tool.ETAS
        for slots in tool.SLOTS
    }
    assert set(_published_rows()) == want


@pytest.mark.parametrize(("slots", "batch", "eta"), [(8, 4, 0), (16, 32, 1)])
def test_published_rows_are_reproduced_by_the_tool(slots: int, batch: int, eta: int) -> None:
    tool = _tool()
    line = tool.markdown([tool.measure(slots, batch, eta)]).splitlines()[-1]
    assert line == _published_rows()[(slots, batch, eta)]
