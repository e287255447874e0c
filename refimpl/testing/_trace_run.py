"""Checking a trace's rows: on this machine, chunk after chunk, or on Dask, partition by partition.

Both routes run the same code on the same chunks. A partitioned Parquet dataset (a directory) is
checked locally as its files one after the other, rows numbered across them; on Dask each file is
one task that checks its rows, numbered from the file's first row (known from the footers), and
returns its tally; the tallies are merged in file order. Counts add up, the largest error is the
largest of the files', and the first mismatching rows are the first ``--max-show`` of the files'
lists in order: the verdict and the report are the same as the local run's, row for row. A spec
that groups rows into steps (``policy_loss``) has one task per file too, each checking the steps
that begin in its file (:mod:`refimpl.testing._trace_steps`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from refimpl.testing._trace_compare import _check_chunk, _Tally
from refimpl.testing._trace_loss_rows import STEP
from refimpl.testing._trace_prefetch import Prefetched
from refimpl.testing._trace_spec import _EDGE_DTYPE, References, _TraceSpec
from refimpl.testing._trace_specs import SPECS
from refimpl.testing._traces import (
    Chunk,
    TraceError,
    dataset_files,
    parquet_rows,
    partition_chunks,
    read_chunks,
)
from refimpl.testing.tolerances import Tolerance

if TYPE_CHECKING:
    from refimpl.testing._trace_steps import StepsResult


@dataclass(frozen=True)
class Plan:
    """What to read and how to compare: everything a worker needs (picklable: no callables)."""

    spec: str
    found: str
    params: dict[str, Any]
    tol: Tolerance
    mapping: dict[str, str]
    inputs: tuple[str, ...]
    lists: tuple[str, ...]
    chunk_rows: int
    max_show: int
    dtype: str | None

    def trace_spec(self) -> _TraceSpec:
        return replace(SPECS[self.spec], found=self.found)

    def columns(self, spec: _TraceSpec) -> tuple[list[str], list[str]]:
        """The trace's names of the scalar and of the list columns to read."""
        m = self.mapping
        numeric = [*self.inputs, *([] if spec.found_list else [spec.found])]
        lists = [*self.lists, *([spec.found] if spec.found_list else [])]
        return [m.get(n, n) for n in numeric], [m.get(n, n) for n in lists]

    def renamed(self, spec: _TraceSpec, chunks: Iterable[Chunk]) -> Iterator[Chunk]:
        """The chunks with the spec's column names (``--column`` maps them from the trace's)."""
        back = {self.mapping.get(n, n): n for n in [*self.inputs, *self.lists, spec.found]}
        for chunk in chunks:
            chunk.columns = {back.get(k, k): v for k, v in chunk.columns.items()}
            yield chunk


def check_chunks(plan: Plan, spec: _TraceSpec, chunks: Iterable[Chunk]) -> _Tally:
    """Compare every row of ``chunks`` (regrouped into the spec's units if it has them)."""
    refimpl = References()
    _EDGE_DTYPE["dtype"] = plan.dtype or "float64"
    tally = _Tally()
    units = chunks if spec.regroup is None else spec.regroup(iter(chunks), refimpl, plan.params)
    for chunk in units:
        _check_chunk(spec, refimpl, chunk, plan.params, plan.tol, tally, plan.max_show, plan.dtype)
    return tally


def check_local(
    plan: Plan, spec: _TraceSpec, trace: Path, fmt: str, progress: Callable[[int], None]
) -> _Tally:
    """The trace (a file, or a dataset's files in order) checked on this machine, the next
    chunk read on a second thread while the current one is checked (see
    :mod:`~refimpl.testing._trace_prefetch`)."""
    numeric, lists = plan.columns(spec)

    def read(on_progress: Callable[[int], None]) -> Iterator[Chunk]:
        return read_chunks(
            trace,
            fmt,
            numeric,
            lists,
            chunk_rows=plan.chunk_rows,
            on_progress=on_progress,
            exact=spec.exact,
        )

    with Prefetched(read, progress) as raw:
        return check_chunks(plan, spec, plan.renamed(spec, raw))


def check_partition(plan: Plan, root: Path, file: Path, row_start: int) -> _Tally:
    """One file of a dataset, its rows numbered from ``row_start`` (a Dask task)."""
    spec = plan.trace_spec()
    numeric, lists = plan.columns(spec)
    raw = partition_chunks(root, file, row_start, numeric, lists, plan.chunk_rows, spec.exact)
    return check_chunks(plan, spec, plan.renamed(spec, raw))


def check_steps(
    plan: Plan, root: Path, files: Sequence[Path], starts: Sequence[int], index: int
) -> StepsResult:
    """The steps that begin in ``files[index]`` (a Dask task of a spec that groups rows into
    steps), their units numbered from 0; an unusable row is returned, not raised, so that the
    driver reports the first problem of the trace in its order."""
    spec = plan.trace_spec()
    numeric, lists = plan.columns(spec)

    def read(j: int) -> Iterator[Chunk]:
        raw = partition_chunks(
            root, files[j], starts[j], numeric, lists, plan.chunk_rows, spec.exact
        )
        return plan.renamed(spec, raw)

    from refimpl.testing import _trace_steps as steps  # the Dask route of policy_loss only

    before = steps.step_before(root, files, starts, index, plan.mapping.get(STEP, STEP))
    runs = steps._Runs()
    try:
        tally = check_chunks(plan, spec, steps.step_stream(read, len(files), index, before, runs))
    except TraceError as exc:
        return steps.StepsResult(_Tally(), runs.steps, str(exc))
    return steps.StepsResult(tally, runs.steps)


def merge(tallies: Sequence[_Tally], max_show: int) -> _Tally:
    """The tallies of consecutive parts of a trace as the tally of the whole."""
    out = _Tally()
    for t in tallies:
        out.rows += t.rows
        out.mismatches += t.mismatches
        out.max_abs_error = max(out.max_abs_error, t.max_abs_error)
        out.shown.extend(t.shown[: max(0, max_show - len(out.shown))])
    return out


def check_on_dask(
    plan: Plan, spec: _TraceSpec, trace: Path, scheduler: str | None, workers: int | None
) -> _Tally:
    """A Parquet file or dataset checked on Dask, one task per file.

    ``scheduler`` is the address of a running Dask scheduler (``tcp://HOST:8786``); without it a
    loopback ``LocalCluster`` of ``workers`` processes is started for the run.
    """
    files = dataset_files(trace) if trace.is_dir() else [trace]
    root = trace if trace.is_dir() else trace.parent
    starts = [0]
    for f in files:
        starts.append(starts[-1] + parquet_rows(f))
    import logging

    from refimpl.testing._trace_steps import merge_steps

    try:
        distributed: Any = importlib.import_module("distributed")
    except ModuleNotFoundError:
        raise TraceError(
            "--dask needs dask.distributed, which is not installed: pip install 'refimpl[sweep]'."
        ) from None
    if scheduler is None:
        cluster: Any = distributed.LocalCluster(
            n_workers=workers or 2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.CRITICAL,  # a failing task is reported once, in one line
        )
        client = distributed.Client(cluster)
    else:
        cluster = None
        try:
            client = distributed.Client(scheduler)
        except OSError as exc:
            raise TraceError(
                f"cannot reach the Dask scheduler at {scheduler!r} ({exc}). Start one with `dask "
                "scheduler` and workers with `dask worker ADDRESS`, and pass its address."
            ) from None
    try:
        if spec.regroup is not None:  # steps may run across files: see _trace_steps
            tasks = [
                client.submit(check_steps, plan, root, files, starts, i, pure=False)
                for i in range(len(files))
            ]
            return merge_steps(client.gather(tasks), plan.max_show)
        futures = [
            client.submit(check_partition, plan, root, f, s, pure=False)
            for f, s in zip(files, starts, strict=False)
        ]
        tallies: list[_Tally] = client.gather(futures)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    return merge(tallies, plan.max_show)
