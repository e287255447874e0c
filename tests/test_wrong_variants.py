"""The helper that runs a property against a wrong variant must itself be able to fail."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from _wrong_variants import rejects
from hypothesis import given
from hypothesis import strategies as st


def _non_negative(square: Callable[[float], float]) -> Callable[[], None]:
    """The property "square(x) >= 0 for every x", as a Hypothesis test."""

    @given(st.floats(-1e6, 1e6))
    def prop(x: float) -> None:
        assert square(x) >= 0

    result: Callable[[], None] = prop
    return result


def test_rejects_passes_when_the_property_fails_on_the_wrong_variant() -> None:
    rejects(_non_negative(lambda x: x * abs(x)))  # negative for x < 0
    rejects(lambda n: _assert_even(n), 3)


def test_rejects_fails_when_the_property_holds() -> None:
    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        rejects(_non_negative(lambda x: x * x))
    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        rejects(lambda n: _assert_even(n), 4)


def _assert_even(n: int) -> None:
    assert n % 2 == 0
