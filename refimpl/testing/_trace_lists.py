"""The specs of ``refimpl check`` whose rows are lists: a sequence's tokens, a batch's weights, a
problem's responses, a trajectory.

Sequence-level importance weights (``tis_sequence`` and the like) are segment reductions: each
sequence's log-ratio sum is computed over the chunk's flat tokens in numpy's own order
(:mod:`~refimpl.testing._trace_pairwise`) and the reference is called once on the sums, so the
weights equal the reference's called row by row, bit for bit. The batch, problem and trajectory
specs call the conformance spec's reference per row (their rows are few: one per batch or
trajectory); the conformance machinery loads only for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from numpy.typing import NDArray

from refimpl.errors import InvalidArgument
from refimpl.testing._trace_pairwise import numpy_order_holds, segment_sums
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
    """The reference's weight of every sequence (``level`` sequence or geometric).

    The weight depends on a sequence's tokens only through the sum of their log-ratios, which the
    reference computes with numpy: :func:`segment_sums` computes every sequence's sum in numpy's
    order, and the reference is called once, on those sums as one-token sequences (divided by the
    lengths for the geometric level, as the reference divides). Where that cannot be the same
    (numpy sums otherwise, or a sum that is not finite: the reference's message must name the
    token), the reference is called on each group of sequences of one length, whose row sums numpy
    computes as for each row alone."""
    d = sequence_log_ratios(cols)
    reference = getattr(r, fn)
    if numpy_order_holds():
        with np.errstate(over="ignore", invalid="ignore"):
            total = segment_sums(d.values, d.offsets)
        if np.all(np.isfinite(total)):
            if level == "geometric":
                total = total / d.sizes()
            ones = total[:, None]
            return np.asarray(reference(ones, np.zeros_like(ones), level=level, **p))
    out = np.empty(len(d))
    for group, values in by_length(d):
        out[group] = reference(values, np.zeros_like(values), level=level, **p)
    return out


def sequence_band_probe(r: Any, p: dict[str, Any]) -> None:
    """Refuse the parameters of a sequence-level band the reference refuses, and a weight shaped
    like the tokens (a row of the trace logs one weight per sequence)."""
    if p.get("weight") in ("token", "geometric"):
        raise ValueError(
            f"weight={p['weight']!r} gives a weight per token, but a row of this spec logs one "
            "weight per sequence. Check per-token weights with the token-level spec masked_is, or "
            "pass weight='ratio' or 'indicator'."
        )
    r.masked_is_weights([0.0], [0.0], **p)


def sequence_condition(
    mean: bool,
) -> Callable[[Columns, dict[str, Any], NDArray[np.float64]], NDArray[np.float64]]:
    """The rounding condition of a sequence weight: ``((⌈log₂ n⌉ + 1)·Σ|d| (/ n) + 4)·|w|``."""

    def condition(
        cols: Columns, params: dict[str, Any], expected: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        d = sequence_log_ratios(cols)
        n = d.sizes()
        lengths, where = np.unique(n, return_inverse=True)
        factor = np.array([summation_factor(int(k)) for k in lengths])[where]
        with np.errstate(over="ignore", invalid="ignore"):
            err = factor * segment_sums(np.abs(d.values), d.offsets)
        if mean:
            err = err / n
        return np.asarray((err + 4.0) * np.abs(expected), dtype=np.float64)

    return condition
