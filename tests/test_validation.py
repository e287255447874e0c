"""The validation tables as a whole, and the exception family they check.

The tables themselves live beside the modules they test (tests/test_validation_<module>.py); each
checks its messages and that every refusal is a :class:`refimpl.RefimplError`.
"""

from __future__ import annotations

import datetime as dt
import re
import warnings
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import test_validation_dispatch
import test_validation_effort
import test_validation_frameworks
import test_validation_learning
import test_validation_penalties
import test_validation_sim
import test_validation_staleness
import test_validation_sweep
import test_validation_testing
from _validation_table import Case, as_any, check_refusal
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

import refimpl
from refimpl import errors
from refimpl._validation import as_float_array, as_int, as_int_array, as_pmf, as_real
from refimpl.errors import InvalidArgument, InvalidArgumentType, RefimplError

TABLES = (
    test_validation_dispatch,
    test_validation_staleness,
    test_validation_frameworks,
    test_validation_effort,
    test_validation_penalties,
    test_validation_learning,
    test_validation_sim,
    test_validation_sweep,
    test_validation_testing,
)
ALL_CASES: list[Case] = [case for table in TABLES for case in table.CASES]


def test_ids_are_unique_across_the_tables() -> None:
    ids = [c.id for c in ALL_CASES]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})


def test_every_table_covers_its_module() -> None:
    # a table that lost its cases would pass vacuously
    assert all(len(table.CASES) >= 3 for table in TABLES)


def test_the_family_is_also_the_builtin_exception_callers_expect() -> None:
    assert issubclass(errors.InvalidArgument, ValueError)
    assert issubclass(errors.InvalidArgumentType, TypeError)
    assert issubclass(errors.InvalidArgument, errors.RefimplError)
    assert issubclass(errors.InvalidArgumentType, errors.RefimplError)
    assert not issubclass(errors.RefimplError, (ValueError, TypeError))


def test_the_family_is_flat_in_refimpl() -> None:
    for name in errors.__all__:
        assert getattr(refimpl, name) is getattr(errors, name)
        assert name in refimpl.__all__


def test_the_family_check_rejects_a_builtin_value_error() -> None:
    # the wrong variant: a refusal written by hand as a plain ValueError
    def hand_written() -> None:
        raise ValueError("x must be > 0; got x=0. Pass x > 0.")

    with pytest.raises(AssertionError, match=r"is not a refimpl\.RefimplError"):
        check_refusal(Case("hand-written", hand_written, ValueError, r"x must be > 0"))


# --- exact integers, and the look-alikes that are refused ----------------------------------------

_BEYOND_FLOAT = [2**53 + 1, 2**63 - 1, -(2**63), 2**64 + 3, 3**200]


@pytest.mark.parametrize("n", _BEYOND_FLOAT)
def test_an_integer_parameter_is_exact_beyond_2_to_53(n: int) -> None:
    assert as_int(n, name="eta") == n
    assert as_int(Fraction(n), name="eta") == n
    assert as_int(Decimal(n), name="eta") == n
    if -(2**63) <= n < 2**63:
        assert as_int(np.int64(n), name="eta") == n
        assert as_int(np.array(n, dtype=np.int64), name="eta") == n


def test_an_integer_past_float64_s_range_is_refused_not_overflowed() -> None:
    assert as_int(2**1023, name="n") == 2**1023
    with pytest.raises(InvalidArgument, match=r"n must be at most 2\^1023 in magnitude"):
        as_int(2**1023 + 1, name="n")


def test_a_pmf_that_is_not_a_sequence_is_refused() -> None:
    for value in (True, 3, None, 1 + 2j):
        with pytest.raises(RefimplError, match=r"^pmf must "):
            as_pmf(value)
    values, exact = as_pmf(x for x in (Fraction(1, 2), Fraction(1, 2)))
    assert exact
    assert values == [Fraction(1, 2), Fraction(1, 2)]


def test_the_bounds_of_an_integer_parameter_are_compared_exactly() -> None:
    assert as_int(2**53 + 1, name="n", minimum=2**53 + 1) == 2**53 + 1
    with pytest.raises(InvalidArgument, match=r"n must be >= 9007199254740993"):
        as_int(2**53, name="n", minimum=2**53 + 1)  # equal as floats, not as integers
    with pytest.raises(InvalidArgument, match=r"n must be <= 3"):
        as_int(4, name="n", maximum=3)


_LOOK_ALIKES: list[tuple[str, object, str]] = [
    ("bool", True, "a boolean is not a count"),
    ("numpy bool", np.bool_(True), "a boolean is not a count"),
    ("integral float", 3.0, r"Pass eta=3 as an int, not a float"),
    ("float beyond 2^53", 2.0**60, "a float is not exact beyond 2.53"),
    ("fractional float", 2.5, "not a whole number"),
    ("nan", float("nan"), "not a whole number"),
    ("numpy float", np.float32(1.0), "not a float"),
    ("complex", 1 + 0j, "a complex number is not a count"),
    ("numpy complex", np.complex128(1), "a complex number is not a count"),
    ("numpy timedelta", np.timedelta64(3, "s"), "a date or a duration"),
    ("numpy datetime", np.datetime64("2020-01-01"), "a date or a duration"),
    ("timedelta", dt.timedelta(days=1), "a date or a duration"),
    ("date", dt.date(2020, 1, 1), "a date or a duration"),
    ("text", "3", "text is not a number"),
    ("bytes", b"3", "text is not a number"),
    ("half fraction", Fraction(1, 2), "not a whole number"),
    ("decimal", Decimal("1.5"), "not a whole number"),
    ("infinite decimal", Decimal("Infinity"), "not finite"),
    ("none", None, "not a number"),
    ("list", [3], "not a number"),
    ("0-d float array", np.array(3.0), "not a float"),
]


@pytest.mark.parametrize(
    ("value", "why"), [c[1:] for c in _LOOK_ALIKES], ids=[c[0] for c in _LOOK_ALIKES]
)
def test_an_integer_parameter_refuses_look_alikes_saying_why(value: object, why: str) -> None:
    with pytest.raises(InvalidArgumentType, match=r"^eta must be an integer; got eta=") as info:
        as_int(value, name="eta", minimum=0)
    assert re.search(why, str(info.value)), str(info.value)


def test_an_integer_array_is_exact_beyond_2_to_53_and_past_int64() -> None:
    small = as_int_array([2**53 + 1, 0], name="v")
    assert small.dtype == np.int64
    assert int(small[0]) == 2**53 + 1
    big = as_int_array(as_any([[2**70, 1], [Fraction(2**64), Decimal(5)]]), name="v")
    assert big.dtype == object
    assert big.shape == (2, 2)
    assert [int(x) for x in big.ravel()] == [2**70, 1, 2**64, 5]
    top = as_int_array(np.array([2**64 - 1], dtype=np.uint64), name="v")
    assert int(top[0]) == 2**64 - 1
    assert as_int_array([0.0, 2.0**53, -4.0], name="v").tolist() == [0, 2**53, -4]
    assert as_int_array([0, 2**63], name="v").tolist() == [0, 2**63]  # numpy would say float64


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ([True, False], "not booleans"),
        ([2.0**53 + 2], r"a float past 2\^53 is not exact"),
        ([0.5], "not a whole number"),
        ([float("nan")], "not a whole number"),
        ([1 + 0j], "imaginary part"),
        (np.array([1], dtype="m8[s]"), "not dates or durations"),
        (np.array(["2020-01-01"], dtype="M8[D]"), "not dates or durations"),
        (["1"], "not text"),
        ([[1], [1, 2]], "rectangular"),
        ([Fraction(1, 3)], "not a whole number"),
        ([None], "not a number"),
    ],
)
def test_an_integer_array_refuses_look_alikes(value: object, why: str) -> None:
    with pytest.raises(InvalidArgumentType, match=r"^versions must be an array of integers") as e:
        as_int_array(value, name="versions")  # type: ignore[arg-type]
    assert why in str(e.value) or re.search(why, str(e.value)), str(e.value)


def test_an_integer_array_minimum_names_the_first_entry() -> None:
    with pytest.raises(InvalidArgument, match=r"Entry 1 is -1; pass values >= 0"):
        as_int_array([3, -1, -2], name="versions", minimum=0)
    with pytest.raises(InvalidArgument, match=r"v must be 1-D"):
        as_int_array([[1]], name="v", ndim=1)


def _through_float(value: object, *, name: str) -> NDArray[np.object_]:
    """The wrong variant: integers through float64, as ``np.asarray(x, float)`` would carry them."""
    carried = np.asarray(value, dtype=np.float64)
    return np.array([int(x) for x in carried.ravel()], dtype=object)


def round_trip(convert: Callable[..., NDArray[Any]]) -> Callable[[], None]:
    """The property: integers of any size come back from ``convert`` exactly."""

    @given(st.lists(st.integers(min_value=-(2**80), max_value=2**80), min_size=1, max_size=6))
    def check(values: list[int]) -> None:
        got = convert(values, name="v")
        assert [int(x) for x in got.ravel()] == values

    return check


def test_integer_arrays_round_trip_exactly() -> None:
    run_property(round_trip(as_int_array))


def test_the_round_trip_rejects_a_conversion_through_float() -> None:
    rejects(round_trip(_through_float))


@pytest.mark.parametrize(
    ("value", "error", "why"),
    [
        (np.array([1 + 0j]), InvalidArgumentType, "imaginary part"),
        ([1 + 2j], InvalidArgumentType, "imaginary part"),
        (np.array(["2020-01-01"], dtype="M8[D]"), InvalidArgumentType, "dates or durations"),
        (np.array([5], dtype="m8[s]"), InvalidArgumentType, "dates or durations"),
        ([10**400], InvalidArgument, "too large for float64"),
        ([[1.0], [1.0, 2.0]], InvalidArgumentType, "rectangular"),
    ],
)
def test_a_float_array_refuses_without_a_warning(
    value: object, error: type[Exception], why: str
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(error, match=r"^x must ") as info:
            as_float_array(value, name="x")  # type: ignore[arg-type]
    assert why in str(info.value)


def test_a_real_parameter_refuses_overflow_and_durations() -> None:
    with pytest.raises(InvalidArgument, match=r"tau must be finite in float64; got tau=an integer"):
        as_real(10**400, name="tau")
    with pytest.raises(InvalidArgumentType, match=r"tau must be a real number"):
        as_real(np.timedelta64(1), name="tau")
    assert as_real(np.array(2.5), name="tau") == 2.5


class _Hostile:
    def __repr__(self) -> str:
        raise RuntimeError("repr exploded")


def test_a_message_shows_a_huge_or_hostile_value_briefly() -> None:
    with pytest.raises(InvalidArgumentType, match=r"got n=<_Hostile object>"):
        as_int(_Hostile(), name="n")
    with pytest.raises(
        InvalidArgument,
        match=r"n must be at most 2\^1023 in magnitude .*got n=-an integer of 16610",
    ) as info:
        as_int(-(10**5000), name="n", minimum=0)
    assert len(str(info.value)) < 200
