"""Running a grid: engines (serial, local process pool, Dask), the journal, resume, the results table.

Every finished cell is appended to a journal (``OUT.journal.jsonl``, one JSON object a line, flushed
at once) before anything else happens, so a crash or an interrupt loses only the cells that were
running. The Parquet file ``OUT`` is the journal's consolidated view, rewritten at the end of every run
(also an interrupted one). Rerunning the same grid with the same ``out`` skips the cells the journal
holds; a journal written by a different grid is refused.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from refimpl._validation import invalid, wrong_type
from refimpl.errors import InvalidArgument
from refimpl.sweep.cells import SweepInterrupt, execute_cell
from refimpl.sweep.grid import Cell, Grid, expand, load_grid, parse_grid
from refimpl.sweep.results import (
    _Journal,
    _Rows,
    _write_parquet,
    journal_path,
    refuse_outputs_naming_the_grid,
    resume,
)

__all__ = ["ENGINES", "MAX_WORKERS", "journal_path", "run"]

#: The engines :func:`run` accepts.
ENGINES = ("local", "dask", "serial")

_DASK_INFLIGHT = 1000
#: The most processes a local pool or a local Dask cluster may start: each is a Python interpreter
#: with numpy and scipy loaded, so more would exhaust memory before they helped.
MAX_WORKERS = 1024
_INSTALL_DASK = "pip install 'refimpl[sweep]'  (or: pip install 'dask[distributed]')"


# --- Ctrl-C ------------------------------------------------------------------------------------

_SIGMASK = hasattr(signal, "pthread_sigmask")


class _Interrupts:
    """Ctrl-C during a sweep: ``KeyboardInterrupt`` in the main thread, but never mid-bookkeeping.

    Inside :meth:`held` (starting a pool and its processes, handing out a cell, journaling a record)
    an interrupt is remembered and raised when the block ends, so the pool, the list of cells
    handed out and the journal are always consistent when ``KeyboardInterrupt`` arrives. SIGINT is
    also blocked in the thread that starts the pool's processes: a child inherits the blocked
    signal, so the Ctrl-C that a terminal sends to the whole process group stays pending in a
    worker still importing (before :func:`_worker_init` ignores it) instead of printing a
    traceback and breaking the pool. Pool threads started there inherit the mask too.

    The handler is installed only in the main thread and only over Python's default one (a
    caller's own SIGINT handler is left alone); the signal mask is used wherever it exists.
    """

    def __init__(self) -> None:
        self._depth = 0
        self._pending = False
        self._previous: Any = None

    def _handler(self, signum: int, frame: Any) -> None:
        if self._depth:
            self._pending = True
            return
        raise SweepInterrupt  # a cell's own KeyboardInterrupt is a failure of that cell

    _handler.raises_sweep_interrupt = True  # type: ignore[attr-defined]

    def __enter__(self) -> _Interrupts:
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            self._previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self._depth += 1
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if _SIGMASK else None
        try:
            yield
        finally:
            if mask is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            self._depth -= 1
        if not self._depth and self._pending:
            self._pending = False
            raise SweepInterrupt


# --- engines ----------------------------------------------------------------------------------


def _worker_init(parent_pid: int) -> None:
    """Set up a pool process: Ctrl-C is the parent's business, and the parent's death is ours.

    The process starts with SIGINT blocked (see :class:`_Interrupts`); it is ignored from here on,
    which also discards a Ctrl-C that came while the process was starting. The parent cancels the
    queue on Ctrl-C and lets running cells end. If the parent dies without cleaning up
    (``SIGKILL``, a crash), a watchdog thread ends this process within half a second instead of
    leaving it orphaned.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if _SIGMASK:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="refimpl-sweep-watchdog", daemon=True).start()


def _died(cell: Cell, exc: BaseException) -> dict[str, Any]:
    """The record of a cell whose worker process died (or that the engine could not run)."""
    return {
        "cell_id": cell.cell_id,
        "replicate": cell.replicate,
        "seed": cell.seed,
        "params": dict(cell.axes),
        "status": "error",
        "error": f"{type(exc).__name__}: the worker running this cell died or was lost ({exc}). "
        "Typical causes: out of memory, a crash in native code, os._exit in the cell.",
        "wall_time_s": float("nan"),
        "metrics": {},
    }


def _run_serial(cells: Iterable[Cell]) -> Generator[dict[str, Any], None, None]:
    for cell in cells:
        yield execute_cell(cell)


def _run_local(
    cells: Iterable[Cell], workers: int, say: Callable[[str], None], interrupts: _Interrupts
) -> Generator[dict[str, Any], None, None]:
    """A spawn-started process pool with at most ``2 * workers`` cells handed out at a time.

    When a worker process dies, every cell handed out fails with ``BrokenProcessPool``; those cells
    are then run one at a time in a one-process pool (a fresh one after each death), so only the
    cell that kills its process is recorded as failed, and the sweep continues in a new pool.

    On ``KeyboardInterrupt`` (Ctrl-C at any moment, or thrown in by the consumer) the cells not yet
    started are cancelled, the running ones are waited for and yielded, then ``KeyboardInterrupt``
    is raised. A second interrupt abandons the running cells (their processes are terminated).
    """
    context = multiprocessing.get_context("spawn")

    def new_pool(n: int) -> ProcessPoolExecutor:
        with interrupts.held():
            return ProcessPoolExecutor(
                max_workers=n,
                mp_context=context,
                initializer=_worker_init,
                initargs=(os.getpid(),),
            )

    todo = iter(cells)
    pool = new_pool(workers)
    inflight: dict[Future[dict[str, Any]], Cell] = {}
    interrupted = False
    abandoned = True  # until the loop ends normally

    def fill() -> None:
        while not interrupted and len(inflight) < 2 * workers:
            with interrupts.held():  # a cell handed out is a cell in inflight
                cell = next(todo, None)
                if cell is None:
                    return
                inflight[pool.submit(execute_cell, cell)] = cell

    def stop_queue() -> None:
        nonlocal interrupted
        if interrupted:  # a second interrupt: give up on the running cells
            raise KeyboardInterrupt
        interrupted = True
        for fut in [f for f in inflight if f.cancel()]:
            del inflight[fut]
        if inflight:
            say(f"interrupted: waiting for {len(inflight)} running cells (Ctrl-C again to abandon)")

    try:
        while True:
            try:
                fill()
                if not inflight:
                    break
                done, _ = wait(inflight, return_when=FIRST_COMPLETED)
                suspects: list[Cell] = []
                for fut in done:
                    try:
                        record = fut.result()
                    except BrokenProcessPool:
                        suspects.append(inflight.pop(fut))
                        continue
                    del inflight[fut]
                    yield record
                if suspects and not interrupted:
                    suspects += inflight.values()  # all of them failed with the pool
                    inflight.clear()
                    with interrupts.held():
                        pool.shutdown(wait=True)
                    yield from _isolated(suspects, new_pool, interrupts)
                    pool = new_pool(workers)
            except KeyboardInterrupt:
                stop_queue()
        abandoned = False
    finally:
        _stop(pool, abandoned, interrupts)
    if interrupted:
        raise KeyboardInterrupt


def _isolated(
    cells: list[Cell], new_pool: Callable[[int], ProcessPoolExecutor], interrupts: _Interrupts
) -> Iterator[dict[str, Any]]:
    """Run cells one at a time in a one-process pool, replaced only when a cell kills it.

    On Ctrl-C the running cell is waited for and yielded, then ``KeyboardInterrupt`` is raised; a
    second Ctrl-C abandons it.
    """
    solo = new_pool(1)
    abandoned = True
    try:
        for cell in cells:
            with interrupts.held():
                future = solo.submit(execute_cell, cell)
            interrupted = False
            try:
                try:
                    record = future.result()
                except KeyboardInterrupt:
                    interrupted = True
                    record = future.result()  # let the running cell end; Ctrl-C again abandons
            except BrokenProcessPool as exc:
                record = _died(cell, exc)
                solo.shutdown(wait=True)
                solo = new_pool(1)
            yield record
            if interrupted:
                abandoned = False
                raise KeyboardInterrupt
        abandoned = False
    finally:
        _stop(solo, abandoned, interrupts)


def _stop(pool: ProcessPoolExecutor, abandon: bool, interrupts: _Interrupts) -> None:
    """Shut a pool down: wait for its processes to end, or (``abandon``) terminate them."""
    if abandon:
        processes = list((getattr(pool, "_processes", None) or {}).values())  # private
        # Shut down before terminating: the pool's thread then drops the cancelled cells before
        # it sees its processes die (otherwise it fails them again and dies of InvalidStateError,
        # a traceback on stderr).
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
    else:
        with interrupts.held():
            pool.shutdown(wait=True, cancel_futures=True)


def _import_distributed() -> Any:
    try:
        import distributed  # lazy: an optional dependency (the sweep extra), needed only for dask
    except ImportError as exc:
        raise ImportError(
            f"engine='dask' needs dask.distributed, which is not installed ({exc}). Install it "
            f"with: {_INSTALL_DASK}"
        ) from None
    return distributed


def _run_dask(
    cells: Iterable[Cell], workers: int | None, scheduler: str | None
) -> Generator[dict[str, Any], None, None]:
    """Submit cells to a Dask cluster (``scheduler``) or to a loopback ``LocalCluster``.

    Dask retries a task whose worker died on another worker up to
    ``distributed.scheduler.allowed-failures`` times (default 3), then fails it with
    ``KilledWorker``. Cells that fail that way are run again at the end, one at a time, and only
    those that fail again are recorded as failed.
    """
    distributed = _import_distributed()
    cluster = None
    if scheduler is None:
        cluster = distributed.LocalCluster(
            n_workers=workers or os.cpu_count() or 1,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",  # any free port: None would still bind 8787
        )
        client = distributed.Client(cluster)
    else:
        try:
            client = distributed.Client(scheduler)
        except OSError as exc:
            raise OSError(
                f"cannot reach the Dask scheduler at {scheduler!r} ({exc}). Start one with "
                "`dask scheduler` and workers with `dask worker ADDRESS`, and pass its address "
                "(tcp://HOST:8786)."
            ) from None
    todo = iter(cells)
    futures = distributed.as_completed()
    inflight: dict[str, tuple[Any, Cell]] = {}

    def fill() -> None:
        while len(inflight) < _DASK_INFLIGHT:
            cell = next(todo, None)
            if cell is None:
                return
            fut = client.submit(execute_cell, cell, pure=False)
            inflight[fut.key] = (fut, cell)
            futures.add(fut)

    suspects: list[Cell] = []
    try:
        try:
            fill()
            for fut in futures:
                _, cell = inflight.pop(fut.key)
                try:
                    record: dict[str, Any] = fut.result()
                except Exception:  # KilledWorker and friends: a worker holding this cell was lost
                    suspects.append(cell)
                else:
                    yield record
                fut.release()
                fill()
            # A lost worker takes every cell assigned to it along; run those again one at a
            # time, so that only the cell that kills its worker is recorded as failed.
            for cell in suspects:
                fut = client.submit(execute_cell, cell, pure=False)
                try:
                    record = fut.result()
                except Exception as exc:
                    record = _died(cell, exc)
                fut.release()
                yield record
        except KeyboardInterrupt:
            # Keep the cells that have finished already; the others are cancelled with the client.
            finished = [f for f, _ in inflight.values() if f.status == "finished"]
            for fut in finished:
                yield fut.result()
            raise
    finally:
        futures.clear()
        client.close()
        if cluster is not None:
            cluster.close()


# --- run --------------------------------------------------------------------------------------


def _as_grid(grid: Grid | Mapping[str, Any] | str | os.PathLike[str]) -> Grid:
    if isinstance(grid, Grid):
        return grid
    if isinstance(grid, Mapping):
        return parse_grid(grid)
    if isinstance(grid, (str, os.PathLike)):
        return load_grid(grid)
    raise wrong_type(
        "grid",
        "a Grid, a table (dict) or the path of a grid file",
        grid,
        "Pass e.g. run('grid.toml').",
    )


def run(
    grid: Grid | Mapping[str, Any] | str | os.PathLike[str],
    *,
    out: str | os.PathLike[str] | None = None,
    engine: str = "local",
    workers: int | None = None,
    scheduler: str | None = None,
    retry_failed: bool = False,
    progress: bool = False,
    on_record: Callable[[Mapping[str, Any]], None] | None = None,
) -> pa.Table:
    """Run every cell of a grid and return the results table.

    Cells are independent: each gets its parameters and its own seed (a function of the grid and
    the cell, never of the execution order), so the table is the same on every engine and for every
    number of workers, except the ``wall_time_s`` column.

    Parameters
    ----------
    grid : Grid, dict or path
        A :class:`Grid`, a grid table, or the path of a grid file (TOML).
    out : path, optional
        The results file (Parquet). Finished cells are journaled to ``OUT.journal.jsonl`` as they
        complete; a rerun with the same grid and ``out`` skips them. Without ``out`` nothing is
        written and nothing is resumed.
    engine : {"local", "dask", "serial"}
        ``"local"``: a process pool (spawn) on this machine. ``"dask"``: a Dask cluster, the one at
        ``scheduler`` or a new loopback ``LocalCluster`` (needs ``pip install 'refimpl[sweep]'``).
        ``"serial"``: in this process, one cell after another (for debugging).
    workers : int, optional
        Processes of the local pool or of the ``LocalCluster`` (default: the number of CPUs).
        Not used with ``scheduler``.
    scheduler : str, optional
        Address of a running Dask scheduler (``tcp://HOST:8786``); only with ``engine="dask"``.
    retry_failed : bool
        Run again the cells that the journal records as failed (default: keep their records).
    progress : bool
        Show a progress bar on stderr: cells done, failed, remaining.
    on_record : callable, optional
        Called with each new record after it is journaled.

    Returns
    -------
    pyarrow.Table
        One row per finished cell, in grid order: ``cell_id``, ``replicate``, ``seed``, one column
        per axis, ``status`` (``"ok"`` or ``"error"``), ``error`` (the message, or null),
        ``wall_time_s``, then one float64 column per metric (null for failed cells). The schema
        metadata holds the grid and its fingerprint.

    Raises
    ------
    GridError
        The grid is invalid (the message names the key path).
    ValueError
        Bad ``engine``/``workers``/``scheduler``, or ``out`` holds results of a different grid.
    ImportError
        ``engine="dask"`` without ``dask.distributed`` installed (the message says what to install).
    KeyboardInterrupt
        After journaling what finished and writing the partial table to ``out``; rerun to resume.
        The local pool cancels the queued cells and finishes the running ones first (a second
        interrupt abandons them); Dask keeps the cells that had finished and cancels the rest.

    Notes
    -----
    A failing cell does not stop the sweep: its row has ``status="error"`` and the message. A cell
    whose worker process dies is recorded the same way (the local pool then reruns the other cells
    that were handed out with it, each alone, to find the one that killed it).

    The Python memory of a sweep does not grow with its number of cells: the cells are expanded
    as they are handed out, a finished record is kept as a row of an Arrow batch (about 100
    bytes a cell), and the journal is read back a line at a time. Building the table and writing
    the Parquet file take, at their peak, about three times the table itself.

    Examples
    --------
    >>> from refimpl import sweep
    >>> grid = {"sweep": {"kind": "busy", "replicates": 2}, "axes": {"draws": [100, 1000]}}
    >>> table = sweep.run(grid, engine="serial")
    >>> table.num_rows, table.column_names[:5]
    (4, ['cell_id', 'replicate', 'seed', 'draws', 'status'])
    >>> table.column("status").to_pylist()
    ['ok', 'ok', 'ok', 'ok']
    """
    g = _as_grid(grid)
    _check_engine(engine, workers, scheduler)
    _check_options(out, retry_failed=retry_failed, progress=progress, on_record=on_record)
    out_path = None if out is None else Path(out)
    if out_path is not None:
        grid_file = grid if isinstance(grid, (str, os.PathLike)) else None
        refuse_outputs_naming_the_grid(out_path, grid_file, option="out", kind=g.kind)
    rows = _Rows(g)
    journal = None if out_path is None else resume(out_path, g, rows)
    # The cells are expanded lazily, and finished records are kept as Arrow rows: a grid of
    # millions starts its first cell at once, and neither its cells nor its records are held
    # as Python objects.
    done = rows.finished(failed_too=not retry_failed)
    skipped = len(done)
    failed = 0 if retry_failed else rows.failed()
    to_run = g.n_cells - skipped
    todo = _unfinished(expand(g), done)
    bar = _progress_bar(g.n_cells, skipped, failed, to_run, progress)
    interrupts = _Interrupts()
    stream = _start(todo, to_run, engine, workers, scheduler, bar if progress else None, interrupts)
    remaining = to_run

    def keep(record: dict[str, Any]) -> None:
        nonlocal remaining, failed
        with interrupts.held():  # a record is journaled whole, or not at all
            if journal is not None:
                journal.append(record)
            rows.add(record)
        remaining -= 1
        failed += record["status"] != "ok"
        bar.set_postfix_str(f"failed={failed} remaining={remaining}", refresh=False)
        bar.update(1)

    try:
        with interrupts:
            _consume(stream, keep, on_record)
    finally:
        table = _close(stream, bar, journal, rows, out_path)
    return table


def _unfinished(cells: Iterator[Cell], done: NDArray[np.int64]) -> Iterator[Cell]:
    """The cells whose grid position is not in ``done`` (sorted): a walk beside the expansion."""
    i = 0
    for cell in cells:
        while i < len(done) and done[i] < cell.position:
            i += 1
        if i < len(done) and done[i] == cell.position:
            continue
        yield cell


def _check_options(out: Any, **options: Any) -> None:
    """Refuse an ``out`` that is not a file path, and flags that are not booleans (``"no"``
    would be true): before anything is written."""
    if out is not None:
        if not isinstance(out, (str, os.PathLike)) or not isinstance(os.fspath(out), str):
            raise wrong_type(
                "out", "a path (str or pathlib.Path)", out, "Pass e.g. out='results.parquet'."
            )
        if not Path(out).name or Path(out).is_dir():
            raise invalid(
                "out",
                "name a file (the results table), not a directory",
                os.fspath(out),
                "Pass e.g. out='runs/results.parquet'.",
            )
    for name in ("retry_failed", "progress"):
        if not isinstance(options[name], bool):
            raise wrong_type(name, "True or False", options[name], f"Pass {name}=True or False.")
    on_record = options["on_record"]
    if on_record is not None and not callable(on_record):
        raise wrong_type(
            "on_record", "a function of one record, or None", on_record, "Pass e.g. print."
        )


def _check_engine(engine: str, workers: int | None, scheduler: str | None) -> None:
    """Refuse an unknown ``engine``, a bad ``workers``, a ``scheduler`` without Dask, and Dask
    when ``dask.distributed`` is missing: before anything is written."""
    if engine not in ENGINES:
        raise invalid(
            "engine",
            f"be one of {', '.join(ENGINES)}",
            engine,
            "Pass engine='local' (a process pool) or engine='dask'.",
        )
    if workers is not None and (
        isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS
    ):
        raise invalid(
            "workers",
            f"be an integer in [1, {MAX_WORKERS}] (processes to start)",
            workers,
            "Pass e.g. workers=2, or None for one per CPU.",
        )
    if scheduler is not None and engine != "dask":
        raise InvalidArgument(
            f"scheduler is only used with engine='dask'; got engine={engine!r} and "
            f"scheduler={scheduler!r}. Pass engine='dask'."
        )
    if engine == "dask":
        _import_distributed()  # fail before anything is written when it is missing


def _progress_bar(total: int, skipped: int, failed: int, to_run: int, progress: bool) -> Any:
    """The progress bar on stderr (disabled unless ``progress``): cells done, failed, remaining."""
    from tqdm import tqdm  # lazy: only when a progress bar is shown

    bar = tqdm(
        total=total,
        initial=skipped,
        desc="sweep",
        unit="cell",
        file=sys.stderr,
        disable=not progress,
        dynamic_ncols=True,
    )
    bar.set_postfix_str(f"failed={failed} remaining={to_run}", refresh=False)
    return bar


def _start(
    todo: Iterator[Cell],
    to_run: int,
    engine: str,
    workers: int | None,
    scheduler: str | None,
    bar: Any,
    interrupts: _Interrupts,
) -> Generator[dict[str, Any], None, None]:
    """The records of the cells of ``todo`` as the engine finishes them (``bar``: where the local
    pool's messages are written, or None to keep them quiet)."""
    if engine == "serial" or not to_run:  # nothing to run: start no pool and no cluster
        return _run_serial(todo)
    if engine == "local":

        def say(message: str) -> None:
            if bar is not None:
                bar.write(message, file=sys.stderr)

        return _run_local(todo, workers or os.cpu_count() or 1, say, interrupts)
    return _run_dask(todo, workers, scheduler)


def _consume(
    stream: Generator[dict[str, Any], None, None],
    keep: Callable[[dict[str, Any]], None],
    on_record: Callable[[Mapping[str, Any]], None] | None,
) -> None:
    """Keep every record of ``stream``, calling ``on_record`` after each. On an interrupt, let the
    engine finish the running cells and keep them too (``on_record`` is not called), then re-raise.
    """
    try:
        for record in stream:
            keep(record)
            if on_record is not None:
                on_record(record)
    except KeyboardInterrupt:
        # A stream that has ended already re-raises the interrupt at once.
        try:
            keep(stream.throw(KeyboardInterrupt()))
            for record in stream:
                keep(record)
        except StopIteration:
            pass
        raise


def _close(
    stream: Generator[dict[str, Any], None, None],
    bar: Any,
    journal: _Journal | None,
    rows: _Rows,
    out_path: Path | None,
) -> pa.Table:
    """Stop the engine, the bar and the journal, and write the results table to ``out_path``."""
    close = getattr(stream, "close", None)
    if close is not None:
        close()
    bar.close()
    if journal is not None:
        journal.close()
    table = rows.table()
    if out_path is not None:
        _write_parquet(table, out_path)
    return table
