"""The specs of ``refimpl check`` whose rows are lists: a sequence's tokens, a batch's weights, a
problem's responses, a trajectory.

Sequence-level importance weights (``tis_sequence`` and the like) are segment reductions: the rows
of a chunk are grouped by their number of tokens, and each group is one call of the reference on a
``(rows, tokens)`` array, whose row sums numpy computes exactly as it does for one sequence (the
same pairwise order), so the weights equal the reference's called row by row, bit for bit. The
batch, problem and trajectory specs call the conformance spec's reference per row (their rows are
few: one per batch or trajectory); the conformance machinery loads only for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from numpy.typing import NDArray

from refimpl.errors import InvalidArgument
from refimpl.testing._trace_spec import Columns
from refimpl.testing._traces import ListColumn
from refimpl.testing.tolerances import summation_factor

# --- sequence-level importance weights: one row per sequence, lists of its tokens ------------


def sequence_log_ratios(cols: Columns) -> ListColumn:
    """``logp_target − logp_behavior`` of every token, per sequence (lists of one length >= 1)."""
    a, b = cols["logp_target"], cols["logp_behavior"]
    sa, sb = a.sizes(), b.sizes()
    bad = (sa != sb) | (sa == 0)
    if np.any(bad):
        i = int(np.flatnonzero(bad)[0])
        raise InvalidArgument(
            f"logp_target and logp_behavior must be lists of one length >= 1 per sequence; "
            f"row {i} has {sa[i]} and {sb[i]}."
        )
    with np.errstate(invalid="ignore"):
        return ListColumn(np.asarray(a.values - b.values, dtype=np.float64), a.offsets)


def by_length(lists: ListColumn) -> Iterator[tuple[NDArray[np.intp], NDArray[Any]]]:
    """The rows grouped by their length: each group's row indices and its ``(rows, length)``
    values (a gather, no padding: a row's sum is then computed as for the row alone)."""
    sizes = lists.sizes()
    order = np.argsort(sizes, kind="stable")
    cuts = np.flatnonzero(np.diff(sizes[order])) + 1
    for group in np.split(order, cuts):
        if group.size:
            n = int(sizes[group[0]])
            yield group, lists.values[lists.offsets[group][:, None] + np.arange(n)]


def sequence_weights(
    r: Any, cols: Columns, p: dict[str, Any], fn: str, level: str
) -> NDArray[np.float64]:
    """The reference's weight of every sequence (``level`` sequence or geometric), one call per
    group of sequences of one length."""
    d = sequence_log_ratios(cols)
    reference = getattr(r, fn)
    out = np.empty(len(d))
    for group, values in by_length(d):
        out[group] = reference(values, np.zeros_like(values), level=level, **p)
    return out


def sequence_condition(
    mean: bool,
) -> Callable[[Columns, dict[str, Any], NDArray[np.float64]], NDArray[np.float64]]:
    """The rounding condition of a sequence weight: ``((⌈log₂ n⌉ + 1)·Σ|d| (/ n) + 4)·|w|``."""

    def condition(
        cols: Columns, params: dict[str, Any], expected: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        d = sequence_log_ratios(cols)
        err = np.empty(len(d))
        for group, values in by_length(d):
            n = values.shape[1]
            err[group] = summation_factor(n) * np.abs(values).sum(axis=1) / (n if mean else 1)
        return np.asarray((err + 4.0) * np.abs(expected), dtype=np.float64)

    return condition
