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
    return [
        Case(
            "testing-unknown-spec",
            lambda: check_conformance(refimpl.staleness_mask, spec="nope"),
            ValueError,
            r"spec must be one of 'effort_penalty'",
        ),
        Case(
            "testing-max-examples-zero",
            lambda: check_conformance(
                refimpl.staleness_mask, spec="staleness_mask", max_examples=0
            ),
            ValueError,
            r"max_examples must be an int >= 1; got max_examples=0",
        ),
        Case(
            "testing-expected-failures-a-string",
            lambda: check_conformance(
                refimpl.staleness_mask, spec="staleness_mask", expected_failures="x"
            ),
            TypeError,
            r"expected_failures must be a mapping .* Wrap it in a list",
        ),
        Case(
            "testing-expected-failures-unknown-check",
            lambda: check_conformance(
                refimpl.staleness_mask, spec="staleness_mask", expected_failures=["nope"]
            ),
            ValueError,
            r"expected_failures names a check that spec 'staleness_mask' does not have",
        ),
        Case(
            "testing-unknown-dtype",
            lambda: check_conformance(
                refimpl.staleness_mask, spec="staleness_mask", dtype="float8"
            ),
            ValueError,
            r"dtype must be one of 'float64', 'float32', 'bfloat16', 'float16'",
        ),
        Case(
            "testing-unknown-convention",
            lambda: check_conformance(
                refimpl.staleness_mask, spec="staleness_mask", conventions={"zzz": 1}
            ),
            ValueError,
            r"conventions must use only the convention keys of spec 'staleness_mask'",
        ),
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
