"""The rows of a ``policy_loss`` step checked and padded on flat columns, as row by row.

:func:`first_bad_row` finds, on the flat token columns of a step, the first row that
:func:`check_row` (the rules stated row by row) refuses; :func:`batch` pads rows into the
``(B, T)`` arrays of the reference. Both are compared with their row-by-row definitions on random
steps with random defects (uneven lists, empty rows, a mask that is not 0/1, NaN or infinity at a
counted or a padding token, a non-finite advantage, advantages per sequence and per token mixed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st

from refimpl.testing._trace_loss_rows import StepRows, batch, check_row, first_bad_row
from refimpl.testing._traces import ListColumn, TraceError

VALUE = st.sampled_from([-0.5, -1.25, 0.0, -3.0, float("nan"), float("inf")])
MASK = st.sampled_from([1.0, 1.0, 1.0, 0.0, 0.5])


@st.composite
def step(draw: st.DrawFn) -> StepRows:
    rows = draw(st.integers(1, 6))
    cols: dict[str, list[list[float]]] = {"logp": [], "old": [], "mask": [], "adv": [], "ref": []}
    for _ in range(rows):
        n = draw(st.integers(0, 4))

        def tokens(kind: st.SearchStrategy[float], n: int = n) -> list[float]:
            # one list in twenty is a token longer or shorter than the others
            extra = draw(st.sampled_from([0] * 18 + [1, -1]))
            return draw(st.lists(kind, min_size=max(0, n + extra), max_size=max(0, n + extra)))

        cols["logp"].append(draw(st.lists(VALUE, min_size=n, max_size=n)))
        cols["old"].append(tokens(VALUE))
        cols["mask"].append(tokens(MASK))
        cols["ref"].append(tokens(VALUE))
        per_token = draw(st.booleans())
        cols["adv"].append(tokens(VALUE) if per_token else [draw(VALUE)])
    with_ref = draw(st.booleans())
    return StepRows(
        where_of=lambda i: f"row {i}",
        lines=None,
        logp=ListColumn.from_rows([np.array(v) for v in cols["logp"]]),
        old=ListColumn.from_rows([np.array(v) for v in cols["old"]]),
        mask=ListColumn.from_rows([np.array(v) for v in cols["mask"]]),
        adv=ListColumn.from_rows([np.array(v) for v in cols["adv"]]),
        ref=ListColumn.from_rows([np.array(v) for v in cols["ref"]]) if with_ref else None,
        micro=None,
        loss=np.zeros(rows),
    )


def row_by_row(rows: StepRows) -> int | None:
    """The definition: the first row whose check raises."""
    for i in range(rows.size):
        try:
            check_row(rows, i)
        except TraceError:
            return i
    return None


def finite_everywhere(rows: StepRows) -> int | None:
    """Wrong: a non-finite value at a padding token (mask 0) refuses the row too."""
    for i in range(rows.size):
        values = [rows.logp[i], rows.old[i]] + ([rows.ref[i]] if rows.ref is not None else [])
        if any(v.size == rows.logp[i].size and not np.all(np.isfinite(v)) for v in values):
            return i
        try:
            check_row(rows, i)
        except TraceError:
            return i
    return None


def finds_the_first_row_check_row_refuses(find: Callable[[StepRows], int | None]) -> Any:
    @given(step())
    def prop(rows: StepRows) -> None:
        assert find(rows) == row_by_row(rows)

    return prop


def test_the_flat_check_finds_the_first_row_the_row_check_refuses() -> None:
    run_property(finds_the_first_row_check_row_refuses(first_bad_row))


def test_the_row_property_rejects_refusing_nan_padding() -> None:
    rejects(finds_the_first_row_check_row_refuses(finite_everywhere))


def padded_row_by_row(rows: StepRows, a: int, b: int) -> dict[str, np.ndarray]:
    """The definition: each row written into a zero array, values kept where the mask is 1."""
    idx = range(a, b)
    width = max(rows.logp[i].size for i in idx)
    out: dict[str, np.ndarray] = {}
    mask = np.zeros((b - a, width))
    for k, i in enumerate(idx):
        mask[k, : rows.mask[i].size] = rows.mask[i]
    for name in ("logp", "old", "ref"):
        col = getattr(rows, name)
        if col is None:
            continue
        full = np.zeros((b - a, width))
        for k, i in enumerate(idx):
            full[k, : col[i].size] = col[i]
        out[name] = np.where(mask == 1, full, 0.0)
    if all(rows.adv[i].size == 1 for i in idx):
        out["adv"] = np.array([rows.adv[i][0] for i in idx])
    else:
        full = np.zeros((b - a, width))
        for k, i in enumerate(idx):
            a_i = rows.adv[i]
            full[k, : rows.logp[i].size] = a_i if a_i.size > 1 else a_i[0]
        out["adv"] = np.where(mask == 1, full, 0.0)
    out["mask"] = mask
    return out


@given(step(), st.data())
def test_padding_is_the_row_by_row_padding(rows: StepRows, data: st.DataObject) -> None:
    if first_bad_row(rows) is not None:
        return  # padding is only asked of rows that follow the rules
    a = data.draw(st.integers(0, rows.size - 1))
    b = data.draw(st.integers(a + 1, rows.size))
    got = batch(rows, a, b)
    want = padded_row_by_row(rows, a, b)
    for name, value in want.items():
        np.testing.assert_array_equal(getattr(got, name), value, err_msg=name)
    assert (got.ref is None) == (rows.ref is None)


def test_a_step_whose_rows_all_follow_the_rules_passes() -> None:
    rows = StepRows(
        where_of=lambda i: f"line {i + 1}",
        lines=None,
        logp=ListColumn.from_rows([np.array([-1.0, np.nan]), np.array([-2.0])]),
        old=ListColumn.from_rows([np.array([-1.0, 0.0]), np.array([-2.0])]),
        mask=ListColumn.from_rows([np.array([1.0, 0.0]), np.array([1.0])]),
        adv=ListColumn.from_rows([np.array([0.5]), np.array([1.5])]),
        ref=None,
        micro=None,
        loss=np.zeros(2),
    )
    assert first_bad_row(rows) is None  # NaN at a padding token is allowed
    rows.adv = ListColumn.from_rows([np.array([0.5]), np.array([np.inf])])
    assert first_bad_row(rows) == 1
    with pytest.raises(TraceError, match="line 2: advantage is inf"):
        check_row(rows, 1)
