"""Bad calls to refimpl.frameworks and the messages they give (see tests/_validation_table.py).

Each case is ``(id, call, exception type, regex the message must match)``; every refusal must also
be an instance of :class:`refimpl.RefimplError`.
"""

from __future__ import annotations

import pytest
from _validation_table import Case, check_refusal

from refimpl import frameworks as fw


def _frameworks_cases() -> list[Case]:
    return [
        Case(
            "fw-unknown-framework",
            lambda: fw.framework_staleness_bound(framework="openrlhf", value=1),
            ValueError,
            r"framework must be one of",
        ),
        Case(
            "fw-areal-negative",
            lambda: fw.areal_staleness_bound(max_head_offpolicyness=-1),
            ValueError,
            r"max_head_offpolicyness must be >= 0",
        ),
        Case(
            "fw-verl-negative",
            lambda: fw.verl_staleness_bound(staleness_threshold=-0.1),
            ValueError,
            r"staleness_threshold must be >= 0",
        ),
    ]


CASES: list[Case] = _frameworks_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_call_raises_a_message_that_says_how_to_fix_it(case: Case) -> None:
    check_refusal(case)
