"""The validation tables as a whole, and the exception family they check.

The tables themselves live beside the modules they test (tests/test_validation_<module>.py); each
checks its messages and that every refusal is a :class:`refimpl.RefimplError`.
"""

from __future__ import annotations

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
from _validation_table import Case, check_refusal

import refimpl
from refimpl import errors

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
