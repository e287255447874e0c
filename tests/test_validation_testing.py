"""Bad calls to refimpl.testing (the conformance suite) and the messages they give.

See tests/_validation_table.py; every refusal must also be an instance of
:class:`refimpl.RefimplError`.
"""

from __future__ import annotations

import pytest
from _validation_table import Case, as_any, check_refusal

import refimpl
from refimpl.testing import ConformanceError, check_conformance


def _fails_conformance() -> None:
    def keeps_nothing(s: object, *, eta: int) -> object:
        return refimpl.staleness_mask(s, eta=eta) * 0.0  # type: ignore[arg-type]

    report = check_conformance(keeps_nothing, spec="staleness_mask", max_examples=10)
    report.raise_if_failed()


def _testing_cases() -> list[Case]:
    # Not yet here: the suite's own argument checks (spec, max_examples, expected_failures, checks)
    # still raise plain ValueError/TypeError; they join when they raise through the builders.
    return [
        Case(
            "testing-candidate-no-colon",
            lambda: check_conformance("no_colon", spec="staleness_mask"),
            ValueError,
            r'candidate must read "module:function".*Separate the module and the function',
        ),
        Case(
            "testing-candidate-not-callable",
            lambda: check_conformance(as_any(42), spec="staleness_mask"),
            TypeError,
            r"candidate must be a callable or 'package.module:function'; got 42",
        ),
        Case(
            "testing-failed-conformance",
            _fails_conformance,
            AssertionError,
            r"staleness_mask.* failed",
        ),
    ]


CASES: list[Case] = _testing_cases()


def test_a_failed_conformance_check_is_in_the_family_and_an_assertion() -> None:
    assert issubclass(ConformanceError, refimpl.RefimplError)
    assert issubclass(ConformanceError, AssertionError)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_call_raises_a_message_that_says_how_to_fix_it(case: Case) -> None:
    check_refusal(case)
