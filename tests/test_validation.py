"""Bad calls and the messages they give: one table per module.

Each case is ``(call, exception type, regex the message must match)``. Every message names the
parameter, the rule, the value received and the fix (see ``refimpl/_validation.py``). The tables are in
separate sections so that each module's owner edits only its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest


class Case(NamedTuple):
    id: str
    call: Callable[[], Any]
    error: type[Exception]
    match: str


# ---------------------------------------------------------------------------------------------
# refimpl.dispatch
# ---------------------------------------------------------------------------------------------

DISPATCH_CASES: list[Case] = []


# ---------------------------------------------------------------------------------------------
# refimpl.staleness
# ---------------------------------------------------------------------------------------------

STALENESS_CASES: list[Case] = []


# ---------------------------------------------------------------------------------------------
# refimpl.effort and refimpl.penalties
# ---------------------------------------------------------------------------------------------

EFFORT_CASES: list[Case] = []


# ---------------------------------------------------------------------------------------------
# refimpl.sim
# ---------------------------------------------------------------------------------------------

SIM_CASES: list[Case] = []


# ---------------------------------------------------------------------------------------------
# the whole table
# ---------------------------------------------------------------------------------------------

ALL_CASES = [*DISPATCH_CASES, *STALENESS_CASES, *EFFORT_CASES, *SIM_CASES]


@pytest.mark.parametrize("case", ALL_CASES, ids=[c.id for c in ALL_CASES])
def test_bad_call_raises_a_message_that_says_how_to_fix_it(case: Case) -> None:
    with pytest.raises(case.error) as info:
        case.call()
    message = str(info.value)
    assert re.search(case.match, message), f"message {message!r} does not match {case.match!r}"
    assert "got " in message or "must" in message, f"message does not state the rule: {message!r}"


def test_ids_are_unique() -> None:
    ids = [c.id for c in ALL_CASES]
    assert len(ids) == len(set(ids))
