"""Explicit ``examples=`` are validated as the candidate receives them, in its dtype; ``assume=``
is checked to be callable before any check runs.

``check_conformance(..., dtype="float16", examples=[...])`` hands the candidate the example's
floats rounded to float16. An example valid in float64 but refused by the reference once rounded
(``-1e5`` is ``-inf`` in float16) used to be validated in float64 only, then skipped by every
check as "invalid": the run passed without ever trying the example the user asked for. It is
now refused before any check runs, naming the example, the arguments the rounding changed and
the reference's reason. An ``assume=`` that is not callable (``assume=3``) made every check
``raised``; it is now refused up front. Each property also runs against the wrong variant (validation in float64
only, as before) and must reject it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects

from refimpl.errors import InvalidArgument, InvalidArgumentType
from refimpl.testing import _conformance_plan as plan
from refimpl.testing import check_conformance
from refimpl.testing._arrays import ArrayBridge


def tis(logp_target: Any, logp_behavior: Any, *, cap: float, mask: Any) -> Any:
    """A correct truncated-IS weight."""
    d = np.asarray(logp_target, dtype=np.float64) - np.asarray(logp_behavior, dtype=np.float64)
    return np.minimum(np.exp(d), cap) * np.asarray(mask, dtype=np.float64)


#: Finite in float64 (and in float32); -inf once rounded to float16 (past -65504).
OVERFLOWS_IN_FLOAT16 = [
    (
        (np.array([[-1e5, -1.0]]), np.array([[-1.0, -1.0]])),
        {"cap": 2.0, "mask": np.array([[1.0, 1.0]])},
    )
]


def _run(dtype: str) -> Any:
    return check_conformance(
        tis,
        spec="tis",
        dtype=dtype,
        checks=["agrees_with_reference"],
        max_examples=1,
        examples=[OVERFLOWS_IN_FLOAT16],
    )


def check_an_example_invalid_once_rounded_is_refused() -> None:
    try:
        report = _run("float16")
    except InvalidArgument as exc:
        message = str(exc)
    else:
        raise AssertionError(f"the example was skipped silently: {report.summary()}")
    assert message.startswith("examples must hold calls that the reference of spec 'tis'"), message
    assert "accepts in float16" in message, message
    assert "rounding positional argument 0 to float16" in message, message  # only that one
    assert "logp_target must contain only finite values" in message, message  # the reason
    assert "-1.e+05" in message, message  # the example itself


def test_an_example_that_float16_makes_invalid_is_refused_naming_the_argument() -> None:
    check_an_example_invalid_once_rounded_is_refused()


def test_the_same_example_runs_in_float32_where_it_stays_valid() -> None:
    report = _run("float32")
    assert report.ok, report.summary()


def test_the_example_check_rejects_validation_in_float64_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ArrayBridge, "seen", lambda self, value: value)
    rejects(check_an_example_invalid_once_rounded_is_refused)


def test_an_example_rounded_in_a_keyword_names_the_keyword() -> None:
    bridge = ArrayBridge(None, "float16")
    args, kwargs = (np.array([1.0]),), {"x": np.array([1e-9]), "y": 2.0}
    seen = (bridge.seen(args), bridge.seen(kwargs))
    assert plan._rounded(args, kwargs, seen) == "keyword argument 'x'"


def check_a_non_callable_assume_is_refused_up_front() -> None:
    bad: Any = 3
    try:
        report = check_conformance(
            tis, spec="tis", checks=["agrees_with_reference"], max_examples=1, assume=bad
        )
    except InvalidArgumentType as exc:
        message = str(exc)
    else:
        raise AssertionError(f"assume=3 ran the checks: {report.summary()}")
    assert message.startswith("assume must be a callable (or None); got assume=3"), message


def test_an_assume_that_is_not_callable_is_refused_before_any_check() -> None:
    check_a_non_callable_assume_is_refused_up_front()


def test_the_assume_check_rejects_a_plan_that_takes_any_assume(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(plan, "callable", lambda value: True, raising=False)
    rejects(check_a_non_callable_assume_is_refused_up_front)
