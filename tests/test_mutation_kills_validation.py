"""Pinned behaviours of refimpl._validation (the builders of every refusal) and refimpl._imports that
mutation runs (``tools/mutate.py refimpl/_validation.py --seed 2027``, ``refimpl/_imports.py
--sample 0``) found no test holding: each test names the mutants it was seen to fail on."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from refimpl._imports import import_object
from refimpl._validation import _show, as_real, require_one_of, require_ordered
from refimpl.errors import InvalidArgument


def test_an_array_of_nine_entries_is_summarised_with_three_at_each_end() -> None:
    # numpy summarises an array above `threshold` entries, keeping `edgeitems` at each end
    # (mutants: threshold 8 -> 9 prints all nine; edgeitems 3 -> 4 keeps four at each end).
    assert _show(np.arange(9.0)) == "array of shape (9,): [0. 1. 2. ... 6. 7. 8.]"
    assert _show(np.arange(20.0)) == "array of shape (20,): [ 0.  1.  2. ... 17. 18. 19.]"


def test_a_long_value_is_cut_to_sixty_characters_ending_in_dots() -> None:
    # mutant: the cut at _MAX_SHOWN - 3 made _MAX_SHOWN - 4 (59 characters)
    shown = _show("x" * 100)
    assert shown == "'" + "x" * 56 + "..."
    assert len(shown) == 60


def test_an_open_upper_bound_refuses_the_bound_and_keeps_what_is_below() -> None:
    # mutant: `result >= high` (the open bound) made `result <= high`, refusing 0.5 < 1
    assert as_real(0.5, name="q", high=1.0, high_open=True) == 0.5
    with pytest.raises(InvalidArgument, match=r"^q must be < 1; got q=1\.0\. Pass q < 1\.$"):
        as_real(1.0, name="q", high=1.0, high_open=True)


def test_equal_bounds_are_in_order_unless_strict() -> None:
    # mutants: `low < high` made `low <= high` (equal bounds pass when strict) and `not strict`
    # made `strict` (equal bounds refused when not strict)
    require_ordered(1.0, 1.0, names=("low", "high"))
    require_ordered(1.0, 2.0, names=("low", "high"), strict=True)
    with pytest.raises(
        InvalidArgument, match=r"^low must be < high; got low=1\.0 and high=1\.0\. Swap them\.$"
    ):
        require_ordered(1.0, 1.0, names=("low", "high"), strict=True)


def test_a_choice_refusal_without_a_fix_says_which_values_to_pass() -> None:
    # mutant: `fix or default` made `fix and default`: without a fix the message ended with nothing
    with pytest.raises(InvalidArgument) as caught:
        require_one_of("x", ("a", "b"), name="mode")
    assert str(caught.value) == (
        "mode must be one of 'a', 'b'; got mode='x'. Pass mode as one of 'a', 'b'."
    )
    with pytest.raises(InvalidArgument) as caught:
        require_one_of("x", ("a", "b"), name="mode", fix="Use 'a'.")
    assert str(caught.value) == "mode must be one of 'a', 'b'; got mode='x'. Use 'a'."


def test_a_module_that_fails_while_imported_is_refused_naming_the_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # mutant: the raise of import_object's "failed while it was imported" removed (it went on to
    # look for the attribute in the module object that was never bound)
    (tmp_path / "refimpl_breaks_on_import.py").write_text("raise RuntimeError('no GPU here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(InvalidArgument) as caught:
        import_object("refimpl_breaks_on_import:f", what="candidate")
    assert str(caught.value) == (
        "candidate module 'refimpl_breaks_on_import' failed while it was imported (RuntimeError: "
        "no GPU here); got candidate='refimpl_breaks_on_import:f'. Fix the module, or name another."
    )
