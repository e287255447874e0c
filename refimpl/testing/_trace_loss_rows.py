"""The rows of one step of the ``policy_loss`` spec, as flat columns: checked, split into units
(the step, or its micro-batches) and padded into the ``(B, T)`` arrays of the reference.

A step's rows arrive as segments of the streamed chunks (a step may span a chunk boundary). They
are joined into one :class:`~refimpl.testing._traces.ListColumn` per token column, and every
row-level rule (lists of one length, a 0/1 mask, finite values at counted tokens) is checked on the
flat arrays at once; only the first offending row is then examined on its own, to word the error.
No step of the check makes a Python call per row.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from refimpl.testing._traces import Chunk, ListColumn, TraceError

Array = NDArray[np.float64]

STEP, MICRO, LOSS = "step", "micro_batch", "loss"
LOGP, OLD, MASK, ADV, REF = "logp", "logp_old", "mask", "advantage", "logp_ref"


@dataclass
class Segment:
    """Rows ``start:stop`` of a chunk, all of one step."""

    chunk: Chunk
    start: int
    stop: int


def whole(x: float) -> str:
    return str(int(x))


def span(a: str, b: str) -> str:
    """``line 4`` or ``lines 4-9`` (``row``/``rows`` for Parquet)."""
    if a == b:
        return a
    kind, _, start = a.partition(" ")
    return f"{kind}s {start}-{b.partition(' ')[2]}"


def _joined(parts: list[Any]) -> ListColumn:
    """Slices of list columns (or of a scalar column: one value per row) as one column."""
    lists = [_as_lists(p) for p in parts]
    values = np.concatenate([np.asarray(p.values, dtype=np.float64) for p in lists])
    sizes = np.concatenate([p.sizes() for p in lists])
    return ListColumn(values, np.concatenate(([0], np.cumsum(sizes))).astype(np.int64))


def _as_lists(part: Any) -> ListColumn:
    """A slice of a chunk's column as a list column: a numeric array holds one value per row; a
    sequence of arrays (a chunk built by hand) one list per row."""
    if isinstance(part, ListColumn):
        return part
    if isinstance(part, np.ndarray) and part.dtype != object:
        return _singletons(part)
    return ListColumn.from_rows([np.atleast_1d(np.asarray(v, dtype=np.float64)) for v in part])


def _singletons(values: Any) -> ListColumn:
    flat = np.asarray(values, dtype=np.float64)
    return ListColumn(flat, np.arange(flat.size + 1, dtype=np.int64))


@dataclass
class StepRows:
    """The rows of one step: its token lists as flat columns, its ids and logged losses."""

    where_of: Callable[[int], str]
    lines: NDArray[np.int64] | None
    logp: ListColumn
    old: ListColumn
    mask: ListColumn
    adv: ListColumn  # one value per row (per sequence), or one per token
    ref: ListColumn | None
    micro: Array | None
    loss: Array

    @property
    def size(self) -> int:
        return len(self.logp)

    def where(self, i: int) -> str:
        return self.where_of(i)

    def row_ids(self) -> NDArray[np.intp]:
        """The row of every token (of ``logp``'s layout)."""
        return np.repeat(np.arange(self.size), self.logp.sizes())


def step_rows(segments: list[Segment]) -> StepRows:
    """The segments of one step joined into flat columns."""
    starts = np.cumsum([0] + [s.stop - s.start for s in segments])

    def where_of(i: int) -> str:
        k = int(np.searchsorted(starts, i, side="right") - 1)
        s = segments[k]
        return s.chunk.where(s.start + i - int(starts[k]))

    def column(name: str) -> list[Any]:
        return [s.chunk.columns[name][s.start : s.stop] for s in segments]

    have = segments[0].chunk.columns
    logp = _joined(column(LOGP))
    mask = (
        _joined(column(MASK))
        if MASK in have
        else ListColumn(np.ones(logp.values.size), logp.offsets)
    )
    lines = None
    if all(s.chunk.lines is not None for s in segments):
        lines = np.concatenate([np.asarray(s.chunk.lines)[s.start : s.stop] for s in segments])
    return StepRows(
        where_of=where_of,
        lines=lines,
        logp=logp,
        old=_joined(column(OLD)),
        mask=mask,
        adv=_joined(column(ADV)),
        ref=_joined(column(REF)) if REF in have else None,
        micro=np.concatenate(column(MICRO)).astype(np.float64) if MICRO in have else None,
        loss=np.concatenate(column(LOSS)).astype(np.float64),
    )


# --- the rules every row follows ---------------------------------------------------------------


def first_bad_row(rows: StepRows) -> int | None:
    """The first row that breaks a rule of :func:`check_row` (``None``: none does), found on the
    flat columns: lengths first, then, among the rows before the first length mismatch (where the
    lists line up token for token), emptiness, the mask, the finite values and the advantage."""
    n = rows.logp.sizes()
    adv_sizes = rows.adv.sizes()
    per_token = adv_sizes != 1
    uneven = (rows.old.sizes() != n) | (rows.mask.sizes() != n) | (per_token & (adv_sizes != n))
    if rows.ref is not None:
        uneven |= rows.ref.sizes() != n
    cut = int(np.flatnonzero(uneven)[0]) if np.any(uneven) else rows.size
    tokens = int(rows.logp.offsets[cut])
    ids = rows.row_ids()[:tokens]
    m = rows.mask.values[:tokens]
    counted = m == 1
    broken = (m != 0) & (m != 1)
    for col in (rows.logp, rows.old, rows.ref):
        if col is not None:
            broken |= counted & ~np.isfinite(col.values[:tokens])
    spread = np.flatnonzero(per_token[ids])  # tokens of rows with an advantage per token
    pos = spread - rows.logp.offsets[ids[spread]]
    adv = rows.adv.values[rows.adv.offsets[ids[spread]] + pos]
    broken[spread] |= counted[spread] & ~np.isfinite(adv)
    bad = np.zeros(cut, dtype=bool)
    bad |= n[:cut] == 0
    bad[ids[broken]] = True
    scalar = np.flatnonzero(~per_token[:cut])
    bad[scalar] |= ~np.isfinite(rows.adv.values[rows.adv.offsets[scalar]])
    candidates = np.flatnonzero(bad)
    first = int(candidates[0]) if candidates.size else cut
    return None if first == rows.size else first


def check_row(rows: StepRows, i: int) -> None:
    """One row's lists: one length >= 1, a 0/1 mask, finite values at the tokens counted."""
    lists = {LOGP: rows.logp[i], OLD: rows.old[i], MASK: rows.mask[i]}
    if rows.ref is not None:
        lists[REF] = rows.ref[i]
    adv = rows.adv[i]
    if adv.size != 1:
        lists[ADV] = adv
    sizes = {k: v.size for k, v in lists.items()}
    where = rows.where(i)
    if len(set(sizes.values())) != 1:
        shown = ", ".join(f"{k} {n}" for k, n in sizes.items())
        raise TraceError(
            f"{where}: the token lists differ in length ({shown} values). A row is one sequence: "
            f"log {', '.join(sizes)} over the same tokens (padding in all of them, or in none)"
            + ("; an advantage per sequence is one number." if ADV in sizes else ".")
        )
    if lists[LOGP].size == 0:
        raise TraceError(f"{where}: {LOGP} is empty. A row is one sequence with at least 1 token.")
    m = lists[MASK]
    bad = np.flatnonzero((m != 0) & (m != 1))
    if bad.size:
        raise TraceError(
            f"{where}: {MASK} holds {float(m[bad[0]])!r} at token {bad[0]}, not 0 or 1. Log 1 for a "
            "token the loss counts and 0 for padding."
        )
    for name, values in lists.items():
        if name == MASK:
            continue
        broken = np.flatnonzero(~np.isfinite(values) & (m == 1))
        if broken.size:
            raise TraceError(
                f"{where}: {name} holds {float(values[broken[0]])!r} at token {broken[0]}, which the "
                f"loss counts ({MASK} 1). Values of counted tokens must be finite; a padding "
                f"token may hold anything if the row's {MASK} marks it 0."
            )
    if adv.size == 1 and not np.isfinite(adv[0]):
        raise TraceError(f"{where}: {ADV} is {float(adv[0])!r}; log a finite advantage.")


def check_rows(rows: StepRows) -> None:
    """Every row follows the rules; the first that does not is reported as :func:`check_row`
    words it."""
    i = first_bad_row(rows)
    if i is not None:
        check_row(rows, i)
        raise AssertionError(f"row {i} was found to break a rule that check_row accepts")


# --- units: the step, or its micro-batches ------------------------------------------------------


def units(rows: StepRows, step: float) -> list[tuple[str, int, int]]:
    """The step's units: (name, first row, end row); one per micro-batch when there is a column."""
    n = rows.size
    if rows.micro is None:
        return [(f"step {whole(step)}", 0, n)]
    mb = rows.micro
    cuts = [0, *(np.flatnonzero(mb[1:] != mb[:-1]) + 1).tolist(), n]
    out: list[tuple[str, int, int]] = []
    seen: dict[float, str] = {}
    for a, b in itertools.pairwise(cuts):
        key = float(mb[a])
        if key in seen:
            raise TraceError(
                f"{rows.where(a)}: micro_batch {whole(key)} of step {whole(step)} appears again "
                f"after another micro-batch (its rows were at {seen[key]}). The rows of a "
                "micro-batch must be contiguous within their step."
            )
        seen[key] = span(rows.where(a), rows.where(b - 1))
        out.append((f"step {whole(step)}, micro_batch {whole(key)}", a, b))
    return out


def same_loss(rows: StepRows, a: int, b: int, unit: str) -> float:
    """The unit's logged loss: the same on each of its rows (NaN counts as the same)."""
    values = rows.loss[a:b]
    first = values[0]
    differ = ~((values == first) | (np.isnan(values) & math.isnan(first)))
    if np.any(differ):
        i = a + int(np.flatnonzero(differ)[0])
        per = "micro-batch" if rows.micro is not None else "step"
        hint = (
            ""
            if rows.micro is not None
            else " If each micro-batch logs its own loss, add a micro_batch column."
        )
        raise TraceError(
            f"{rows.where(i)}: {LOSS} is {float(rows.loss[i])!r}, but {rows.where(a)} of the same "
            f"{unit} logged {float(first)!r}. The {LOSS} column holds the {per}'s loss, the same "
            f"on each of its rows.{hint}"
        )
    return float(first)


# --- a unit's rows as (B, T) arrays --------------------------------------------------------------


@dataclass
class Batch:
    """A unit's rows as (B, T) arrays, padded with mask 0 to the longest row."""

    logp: Array
    old: Array
    mask: Array
    adv: Array  # (B,) or (B, T)
    ref: Array | None


def _padded(col: ListColumn, width: int) -> Array:
    """Rows of ``col`` as a ``(rows, width)`` array, zeros after each row's end."""
    sizes = col.sizes()
    out = np.zeros((len(col), width))
    rows = np.repeat(np.arange(len(col)), sizes)
    pos = np.arange(col.values.size) - np.repeat(col.offsets[:-1], sizes)
    out[rows, pos] = col.values
    return out


def batch(rows: StepRows, a: int, b: int) -> Batch:
    """Rows ``a:b`` padded to the longest; values at padding are 0 (they do not matter)."""
    logp = rows.logp[a:b]
    width = int(logp.sizes().max())
    mask = _padded(rows.mask[a:b], width)

    def tokens(col: ListColumn) -> Array:
        return np.where(mask == 1, _padded(col, width), 0.0)

    adv_part = rows.adv[a:b]
    adv_sizes = adv_part.sizes()
    if np.all(adv_sizes == 1):
        adv = np.asarray(adv_part.values, dtype=np.float64)
    else:  # an advantage per sequence spread over its tokens, beside per-token ones
        n = logp.sizes()
        row = np.repeat(np.arange(b - a), n)
        pos = np.arange(logp.values.size) - np.repeat(logp.offsets[:-1], n)
        source = adv_part.offsets[row] + np.where(adv_sizes[row] == 1, 0, pos)
        adv = tokens(ListColumn(adv_part.values[source], logp.offsets))
    ref = tokens(rows.ref[a:b]) if rows.ref is not None else None
    return Batch(tokens(logp), tokens(rows.old[a:b]), mask, adv, ref)
