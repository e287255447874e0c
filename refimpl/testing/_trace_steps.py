"""A spec that groups rows into steps (``policy_loss``) checked on Dask, one task per file.

A step's rows are contiguous but may run across files of a dataset. Each task checks the steps
that *begin* in its file: it skips the file's leading rows that continue the step of the file
before (whose last row it reads), and it reads on into the next files while its last step goes
on. Every step is then checked by exactly one task, on the same rows as on one machine, so the
units are the same; the driver numbers them across the tasks, and refuses a step that appears
in two tasks' files as the local run refuses it (:func:`~refimpl.testing._trace_losses.repeated_step`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from refimpl.testing._trace_compare import _Tally
from refimpl.testing._trace_losses import STEP, repeated_step, step_span
from refimpl.testing._traces import Chunk, TraceError, last_value


@dataclass
class StepsResult:
    """What one task returns: its tally (units numbered from 0), each step that began in its
    files (value, first row, last row) in order, and the error that stopped it, if any."""

    tally: _Tally
    steps: list[tuple[float, str, str]] = field(default_factory=list)
    error: str | None = None


def _rows(chunk: Chunk, a: int, b: int) -> Chunk:
    """Rows ``a:b`` of a chunk."""
    lines = None if chunk.lines is None else chunk.lines[a:b]
    return Chunk({k: v[a:b] for k, v in chunk.columns.items()}, chunk.row_start + a, lines)


def _leading(chunk: Chunk, value: float | None) -> int:
    """How many of the chunk's first rows hold step ``value``."""
    if value is None:
        return 0
    steps = np.asarray(chunk.columns[STEP], dtype=np.float64)
    other = np.flatnonzero(steps != value)
    return int(other[0]) if other.size else chunk.size


class _Runs:
    """The steps of a stream of chunks, in order: value, first and last row."""

    def __init__(self) -> None:
        self.steps: list[tuple[float, str, str]] = []

    def see(self, chunk: Chunk) -> Chunk:
        steps = np.asarray(chunk.columns[STEP], dtype=np.float64)
        cuts = [0, *(np.flatnonzero(steps[1:] != steps[:-1]) + 1).tolist(), chunk.size]
        for a, b in itertools.pairwise(cuts):
            value = float(steps[a])
            if self.steps and self.steps[-1][0] == value and a == 0:
                self.steps[-1] = (value, self.steps[-1][1], chunk.where(b - 1))
            else:
                self.steps.append((value, chunk.where(a), chunk.where(b - 1)))
        return chunk

    @property
    def last(self) -> float | None:
        return self.steps[-1][0] if self.steps else None


def step_stream(
    read: Callable[[int], Iterator[Chunk]],
    files: int,
    index: int,
    before: float | None,
    runs: _Runs,
) -> Iterator[Chunk]:
    """The rows of the steps that begin in file ``index`` of ``files`` (``read(j)``: file ``j``'s
    chunks, with the spec's column names), given the step of the last row ``before`` it."""
    skipping = True
    for chunk in read(index):
        n = _leading(chunk, before) if skipping else 0
        skipping = skipping and n == chunk.size
        if n < chunk.size:
            yield runs.see(_rows(chunk, n, chunk.size) if n else chunk)
    for j in range(index + 1, files):
        if runs.last is None:
            return
        for chunk in read(j):
            n = _leading(chunk, runs.last)
            if n:
                yield runs.see(_rows(chunk, 0, n) if n < chunk.size else chunk)
            if n < chunk.size:
                return


def step_before(
    root: Path, files: Sequence[Path], starts: Sequence[int], index: int, column: str
) -> float | None:
    """The step (trace column ``column``) of the last row before ``files[index]``: that of the
    nearest file before it that has rows (``starts``: each file's first row, and the total)."""
    for j in range(index - 1, -1, -1):
        if starts[j + 1] > starts[j]:
            return last_value(root, files[j], column)
    return None


def merge_steps(results: Sequence[StepsResult], max_show: int) -> _Tally:
    """The tasks' results as the tally of the whole trace: units numbered across the tasks, and
    a step that began in two tasks' files refused as the local run refuses it."""
    seen: dict[float, str] = {}
    out = _Tally()
    for result in results:
        for value, first, last in result.steps:
            if value in seen:
                raise repeated_step(first, value, seen[value])
            seen[value] = step_span(first, last)
        if result.error is not None:
            raise TraceError(result.error)
        t = result.tally
        for row in t.shown[: max(0, max_show - len(out.shown))]:
            out.shown.append({**row, "row": row["row"] + out.rows})
        out.rows += t.rows
        out.mismatches += t.mismatches
        out.max_abs_error = max(out.max_abs_error, t.max_abs_error)
    return out
