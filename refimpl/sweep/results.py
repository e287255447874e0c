"""What a sweep keeps: the journal of finished cells, the results table, and resuming from them.

Every finished cell is appended to a journal (``OUT.journal.jsonl``, one JSON object a line, flushed
at once) before anything else happens, so a crash or an interrupt loses only the cells that were
running. The Parquet file ``OUT`` is the journal's consolidated view, written atomically (a reader
sees the old file or the new one) at the end of every run, also an interrupted one. Neither may be
the grid file (or the same file through a link): that is refused before anything is written.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from refimpl._io import atomic_path, refuse_output_naming_input
from refimpl.errors import InvalidArgument
from refimpl.sweep.grid import RESERVED_COLUMNS, Grid

__all__ = ["journal_path", "kind_source", "refuse_outputs_naming_the_grid"]

_JOURNAL_FORMAT = "refimpl.sweep journal v1"
_META_FINGERPRINT = b"refimpl.sweep.fingerprint"
_META_GRID = b"refimpl.sweep.grid"


def journal_path(out: str | os.PathLike[str]) -> Path:
    """The journal kept next to a results file: ``OUT.journal.jsonl``.

    Examples
    --------
    >>> journal_path("runs/results.parquet").as_posix()
    'runs/results.parquet.journal.jsonl'
    """
    p = Path(out)
    return p.with_name(p.name + ".journal.jsonl")


# --- the journal ------------------------------------------------------------------------------


def _refuse_other_grid(where: Path, theirs: str, grid: Grid, out: Path) -> InvalidArgument:
    return InvalidArgument(
        f"{where} was written by a different grid (fingerprint {theirs[:12]}…, this grid "
        f"{grid.fingerprint[:12]}…): its finished cells do not belong to this sweep. Pass a new "
        f"out path, or delete {out} and {journal_path(out)} to start over."
    )


_RECORD_KEYS = frozenset(
    {"cell_id", "replicate", "seed", "params", "status", "error", "wall_time_s", "metrics"}
)


def _damaged(path: Path, number: int, why: str) -> InvalidArgument:
    return InvalidArgument(
        f"{path}, line {number}, {why}: the journal is damaged. Delete that line (its cell will "
        "run again) and rerun."
    )


def _read_journal(
    path: Path, grid: Grid, out: Path, keep: Callable[[dict[str, Any]], None]
) -> None:
    """Pass each record to ``keep``, a line at a time (the journal is never held whole); a torn
    last line (the process died while writing it) is cut off, so appends start on a fresh line."""
    offset, torn = 0, None
    with path.open("rb") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.endswith(b"\n"):
                torn = offset
                break
            offset += len(line)
            if number == 1:
                _check_header(path, line, grid, out)
                continue
            try:
                rec = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise _damaged(path, number, "is not valid JSON") from None
            if not _is_record(rec):
                raise _damaged(path, number, "is not a record of a cell")
            try:
                keep(rec)
            except (KeyError, TypeError, ValueError, pa.ArrowException) as exc:
                raise _damaged(
                    path, number, f"holds a record not of this grid ({exc!r:.80})"
                ) from None
    if torn is not None:
        with path.open("r+b") as fh:
            fh.truncate(torn)


def _is_record(rec: Any) -> bool:
    """Whether a journal line holds a record as :func:`~refimpl.sweep.execute_cell` writes it."""
    return (
        isinstance(rec, dict)
        and rec.keys() >= _RECORD_KEYS
        and isinstance(rec["cell_id"], str)
        and all(type(rec[k]) is int for k in ("replicate", "seed"))
        and isinstance(rec["params"], dict)
        and isinstance(rec["metrics"], dict)
        and rec["status"] in ("ok", "error")
        and (rec["error"] is None or isinstance(rec["error"], str))
        and isinstance(rec["wall_time_s"], (int, float))
        and all(isinstance(v, (int, float)) for v in rec["metrics"].values())
    )


def _check_header(path: Path, line: bytes, grid: Grid, out: Path) -> None:
    try:
        header = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        header = None
    if not isinstance(header, dict) or header.get("format") != _JOURNAL_FORMAT:
        raise InvalidArgument(
            f"{path} is not a refimpl sweep journal (its first line is not the journal header). "
            f"Pass a different out path, or delete {path}."
        )
    if header.get("fingerprint") != grid.fingerprint:
        raise _refuse_other_grid(path, str(header.get("fingerprint")), grid, out)


class _Journal:
    """Append-only JSONL: each record is written and flushed before the next cell is handled."""

    def __init__(self, path: Path, grid: Grid) -> None:
        self.path = path
        fresh = not path.exists() or path.stat().st_size == 0
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] = path.open("a", encoding="utf-8")
        self._last_sync = time.monotonic()
        if fresh:
            header = {
                "format": _JOURNAL_FORMAT,
                "fingerprint": grid.fingerprint,
                "grid": grid.canonical(),
            }
            self._write(header)

    def _write(self, obj: Mapping[str, Any]) -> None:
        self._fh.write(json.dumps(obj, sort_keys=True) + "\n")
        self._fh.flush()  # in the OS now: survives a crash of this process
        if time.monotonic() - self._last_sync > 1.0:  # on disk at least once a second
            os.fsync(self._fh.fileno())
            self._last_sync = time.monotonic()

    def append(self, record: Mapping[str, Any]) -> None:
        self._write(record)

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()


# --- the results table ------------------------------------------------------------------------

#: Records converted to Arrow at a time: the most finished records a sweep holds as Python objects.
#: Beyond, a record is a row of an Arrow batch (its columns' bytes, about a hundred a cell), so the
#: Python memory of a sweep does not grow with its number of cells.
ROWS_PER_BATCH = 1024

_METRIC = "metric:"  # a metric's column until the end (a metric may not rename a fixed column)
_POSITION, _ORDER = "_position", "_order"


def _axis_type(values: tuple[Any, ...]) -> pa.DataType:
    first = values[0]
    if isinstance(first, bool):
        return pa.bool_()
    if isinstance(first, int):
        return pa.int64()
    if isinstance(first, float):
        return pa.float64()
    return pa.string()


def _grid_order(grid: Grid) -> Any:
    """A function giving a record's position in grid order, from its axis values and replicate.

    The same order as :func:`refimpl.sweep.expand` (axes in file order, last fastest; replicates
    fastest of all), computed without expanding the grid: a sweep of millions of cells never holds
    its list of cells.
    """
    names = list(grid.axes)
    index = [{value: i for i, value in enumerate(grid.axes[n])} for n in names]
    strides: list[int] = []
    stride = grid.replicates
    for n in reversed(names):
        strides.append(stride)
        stride *= len(grid.axes[n])
    strides.reverse()

    def position(record: Mapping[str, Any]) -> int:
        params = record["params"]
        where = sum(index[k][params[n]] * strides[k] for k, n in enumerate(names))
        return int(where) + int(record["replicate"])

    return position


class _Rows:
    """The finished records of a sweep, kept as Arrow batches: a few bytes a cell, not a dict.

    A record is held as a Python object only until :data:`ROWS_PER_BATCH` of them are converted
    to one Arrow batch, with its position in grid order and its order of arrival; :meth:`table`
    keeps the last record of each cell (a rerun replaces a failure) and sorts them in grid order.
    """

    def __init__(self, grid: Grid) -> None:
        self.grid = grid
        self._position = _grid_order(grid)
        self._pending: list[tuple[int, Mapping[str, Any]]] = []
        self._batches: list[pa.Table] = []
        self._count = 0

    def add(self, record: Mapping[str, Any]) -> None:
        self._pending.append((self._position(record), record))
        if len(self._pending) >= ROWS_PER_BATCH:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        rows, self._pending = self._pending, []
        start, self._count = self._count, self._count + len(rows)
        columns: dict[str, pa.Array] = {
            _POSITION: pa.array([p for p, _ in rows], pa.int64()),
            _ORDER: pa.array(range(start, self._count), pa.int64()),
            "cell_id": pa.array([r["cell_id"] for _, r in rows], pa.string()),
            "replicate": pa.array([r["replicate"] for _, r in rows], pa.int64()),
            "seed": pa.array([r["seed"] for _, r in rows], pa.int64()),
        }
        for name, values in self.grid.axes.items():
            columns[name] = pa.array([r["params"][name] for _, r in rows], _axis_type(values))
        columns["status"] = pa.array([r["status"] for _, r in rows], pa.string())
        columns["error"] = pa.array([r["error"] for _, r in rows], pa.string())
        columns["wall_time_s"] = pa.array([r["wall_time_s"] for _, r in rows], pa.float64())
        names = self.grid.metrics
        if names is None:
            names = tuple(sorted({str(m) for _, r in rows for m in r["metrics"]}))
        for m in names:
            columns[_METRIC + m] = pa.array([r["metrics"].get(m) for _, r in rows], pa.float64())
        self._batches.append(pa.table(columns))

    def _latest(self) -> pa.Table:
        """Every batch in one table: the last record of each cell, in grid order."""
        self._flush()
        if not self._batches:
            return self._empty()
        table = pa.concat_tables(self._batches, promote_options="default")
        order = pc.sort_indices(table, [(_POSITION, "ascending"), (_ORDER, "ascending")])
        position = table.column(_POSITION).take(order).to_numpy()
        last = np.append(position[1:] != position[:-1], True)  # the last record of each cell
        latest = table.take(pa.array(order.to_numpy()[last]))
        self._batches = [latest]  # what a later call starts from (the batches are let go)
        return latest

    def _empty(self) -> pa.Table:
        fields = [(_POSITION, pa.int64()), (_ORDER, pa.int64())]
        fields += [("cell_id", pa.string()), ("replicate", pa.int64()), ("seed", pa.int64())]
        fields += [(n, _axis_type(v)) for n, v in self.grid.axes.items()]
        fields += [("status", pa.string()), ("error", pa.string()), ("wall_time_s", pa.float64())]
        fields += [(_METRIC + m, pa.float64()) for m in self.grid.metrics or ()]
        return pa.schema(fields).empty_table()

    def finished(self, *, failed_too: bool) -> NDArray[np.int64]:
        """The grid positions of the cells finished (``failed_too``: also those that failed),
        sorted: the cells a resumed sweep skips."""
        latest = self._latest()
        done = pc.equal(latest.column("status"), "ok")
        if failed_too:
            done = pc.is_valid(latest.column("status"))
        positions: NDArray[np.int64] = latest.column(_POSITION).filter(done).to_numpy()
        return positions

    def failed(self) -> int:
        """How many of the cells finished so far failed (their last record)."""
        return int(pc.sum(pc.not_equal(self._latest().column("status"), "ok")).as_py() or 0)

    def table(self) -> pa.Table:
        """One row per finished cell, in grid order, with the grid in the schema's metadata."""
        latest = self._latest().drop_columns([_POSITION, _ORDER])
        metrics = [c[len(_METRIC) :] for c in latest.column_names if c.startswith(_METRIC)]
        if self.grid.metrics is None:
            metrics.sort()
        clash = [m for m in metrics if m in RESERVED_COLUMNS or m in self.grid.axes]
        if clash:
            raise InvalidArgument(
                f"cell kind {self.grid.kind!r} returns metric {clash[0]!r}, which is also a column "
                "name (reserved or an axis). List the metrics to keep in sweep.metrics, without it."
            )
        fixed = [c for c in latest.column_names if not c.startswith(_METRIC)]
        table = latest.select([*fixed, *(_METRIC + m for m in metrics)])
        table = table.rename_columns([*fixed, *metrics])
        meta = {
            _META_FINGERPRINT: self.grid.fingerprint.encode(),
            _META_GRID: json.dumps(self.grid.canonical(), sort_keys=True).encode(),
        }
        return table.replace_schema_metadata(meta)


def _records_from_parquet(out: Path, grid: Grid) -> Iterator[dict[str, Any]]:
    """Inverse of :meth:`_Rows.table`: journal records from a results file (its journal was
    lost), read a batch at a time; a file without the columns is refused at once."""
    import pyarrow.parquet as pq  # lazy: the Parquet reader/writer is a heavy part of pyarrow

    fh = pq.ParquetFile(out)
    names = fh.schema_arrow.names
    missing = [c for c in (*RESERVED_COLUMNS, *grid.axes) if c not in names]
    if missing:
        raise InvalidArgument(
            f"{out} has no column {missing[0]!r}: it is not a refimpl sweep result (or it is "
            f"damaged). Pass a different out path, or delete {out}."
        )
    metrics = [c for c in names if c not in RESERVED_COLUMNS and c not in grid.axes]
    return _rows_of(fh, grid, metrics)


def _rows_of(fh: Any, grid: Grid, metrics: list[str]) -> Iterator[dict[str, Any]]:
    for batch in fh.iter_batches(batch_size=ROWS_PER_BATCH):
        for row in batch.to_pylist():
            yield {
                "cell_id": row["cell_id"],
                "replicate": row["replicate"],
                "seed": row["seed"],
                "params": {a: row[a] for a in grid.axes},
                "status": row["status"],
                "error": row["error"],
                "wall_time_s": row["wall_time_s"],
                "metrics": {m: row[m] for m in metrics if row[m] is not None},
            }


#: Rows a row group of the results file holds: the writer's buffers stay a few megabytes.
_ROW_GROUP = 65536


def _write_parquet(table: pa.Table, out: Path) -> None:
    """Write the table atomically: a reader sees the old file or the new one, never a part."""
    import pyarrow.parquet as pq  # lazy: the Parquet reader/writer is a heavy part of pyarrow

    with atomic_path(out) as tmp:
        pq.write_table(table, tmp, row_group_size=_ROW_GROUP)


def refuse_outputs_naming_the_grid(
    out: str | os.PathLike[str],
    grid_file: str | os.PathLike[str] | None,
    *,
    option: str,
    kind: str | None = None,
) -> None:
    """Refuse a results file or journal that is an input: the grid file, or the source file of
    a ``"module:function"`` kind (or the same file through a link).

    Checked before anything is written: the journal is appended to and the results file replaced,
    either of which would destroy the input. The journal must not be the results file either.

    Raises
    ------
    refimpl.errors.InvalidArgument
        Naming ``option`` (``"out"`` or ``"--out"``), the input and how they are the same file.
    """
    inputs = [grid_file, None if kind is None else kind_source(kind)]
    journal = journal_path(out)
    refuse_output_naming_input(out, inputs, option=option)
    refuse_output_naming_input(journal, [*inputs, out], option=f"the journal of {option}")


def kind_source(kind: str) -> str | None:
    """The source file of a ``"module:function"`` kind, found without running the module (a
    package that contains it is imported, as ``import`` would); None for a built-in kind or
    when it cannot be found (running the cells then reports why).

    Examples
    --------
    >>> kind_source("busy") is None
    True
    >>> kind_source("refimpl.sweep.kinds:busy").endswith("kinds.py")
    True
    """
    if ":" not in kind:
        return None
    module = kind.partition(":")[0]
    loaded = sys.modules.get(module)
    if loaded is not None:
        found = getattr(loaded, "__file__", None)
        return found if isinstance(found, str) else None
    try:
        spec = importlib.util.find_spec(module)
    except (Exception, SystemExit):  # a package that fails to import: the cells report it
        return None
    if spec is None or not spec.has_location or not isinstance(spec.origin, str):
        return None
    return spec.origin


def resume(out: Path, grid: Grid, rows: _Rows) -> _Journal:
    """Feed ``rows`` the cells finished for ``out`` by an earlier run of this grid (its journal,
    else its results file, from which the lost journal is rebuilt); return the journal that new
    records are appended to. Both are read a line or a batch at a time."""
    journal = journal_path(out)
    if journal.exists():
        _read_journal(journal, grid, out, rows.add)
        return _Journal(journal, grid)
    previous = _records_in_results(out, grid)
    kept = _Journal(journal, grid)
    try:
        for rec in previous:
            if not _is_record(rec):
                raise ValueError(f"row of cell {rec.get('cell_id')!r} is not a record of a cell")
            rows.add(rec)
            kept.append(rec)
    except (KeyError, TypeError, ValueError, pa.ArrowException) as exc:
        kept.close()
        journal.unlink(missing_ok=True)  # rebuilt from a damaged file: not a journal to resume
        raise InvalidArgument(
            f"{out} holds a row not of this grid ({exc!r:.120}): the results file is damaged. "
            f"Pass a new out path, or delete {out} to start over."
        ) from None
    return kept


def _records_in_results(out: Path, grid: Grid) -> Iterator[dict[str, Any]]:
    """The records of a results file of this grid (none when ``out`` does not exist); a file
    that is not one, or is another grid's, is refused before anything is written."""
    if not out.exists():
        return iter(())
    import pyarrow.parquet as pq  # lazy: the Parquet reader/writer is a heavy part of pyarrow

    try:
        meta = pq.read_schema(out).metadata or {}
    except (pa.ArrowInvalid, OSError):
        meta = {}
    theirs = meta.get(_META_FINGERPRINT)
    if theirs is None:
        raise InvalidArgument(
            f"{out} exists and is not a refimpl sweep result. Pass a different out path, or "
            "delete the file."
        )
    if theirs.decode(errors="replace") != grid.fingerprint:
        raise _refuse_other_grid(out, theirs.decode(errors="replace"), grid, out)
    return _records_from_parquet(out, grid)
