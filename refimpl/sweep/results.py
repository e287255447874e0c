"""What a sweep keeps: the journal of finished cells, the results table, and resuming from them.

Every finished cell is appended to a journal (``OUT.journal.jsonl``, one JSON object a line, flushed
at once) before anything else happens, so a crash or an interrupt loses only the cells that were
running. The Parquet file ``OUT`` is the journal's consolidated view, written atomically (a reader
sees the old file or the new one) at the end of every run, also an interrupted one. Neither may be
the grid file (or the same file through a link): that is refused before anything is written.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

import pyarrow as pa

from refimpl._io import atomic_path, refuse_output_naming_input
from refimpl.errors import InvalidArgument
from refimpl.sweep.grid import RESERVED_COLUMNS, Grid

__all__ = ["journal_path", "refuse_outputs_naming_the_grid"]

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


def _read_journal(path: Path, grid: Grid, out: Path) -> dict[str, dict[str, Any]]:
    """Records by cell id (the last record of a cell wins); a torn last line is cut off."""
    records: dict[str, dict[str, Any]] = {}
    with path.open("rb") as fh:
        data = fh.read()
    lines = data.split(b"\n")
    complete, torn = lines[:-1], lines[-1]
    if torn:
        # The process died while writing the last line: drop it, so appends start on a fresh line.
        with path.open("r+b") as fh:
            fh.truncate(len(data) - len(torn))
    if not complete:
        return records
    try:
        header = json.loads(complete[0])
    except json.JSONDecodeError:
        header = None
    if not isinstance(header, dict) or header.get("format") != _JOURNAL_FORMAT:
        raise InvalidArgument(
            f"{path} is not a refimpl sweep journal (its first line is not the journal header). "
            f"Pass a different out path, or delete {path}."
        )
    if header.get("fingerprint") != grid.fingerprint:
        raise _refuse_other_grid(path, str(header.get("fingerprint")), grid, out)
    for number, line in enumerate(complete[1:], start=2):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            raise InvalidArgument(
                f"{path}, line {number}, is not valid JSON: the journal is damaged. Delete that "
                "line (its cell will run again) and rerun."
            ) from None
        records[rec["cell_id"]] = rec
    return records


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


def _axis_type(values: tuple[Any, ...]) -> pa.DataType:
    first = values[0]
    if isinstance(first, bool):
        return pa.bool_()
    if isinstance(first, int):
        return pa.int64()
    if isinstance(first, float):
        return pa.float64()
    return pa.string()


def _metric_names(grid: Grid, records: Iterable[Mapping[str, Any]]) -> list[str]:
    if grid.metrics is not None:
        return list(grid.metrics)
    names: set[str] = set()
    for rec in records:
        names.update(rec["metrics"])
    return sorted(names)


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


def _table(grid: Grid, records: Mapping[str, Mapping[str, Any]]) -> pa.Table:
    """One row per finished cell, in grid order."""
    rows = sorted(records.values(), key=_grid_order(grid))
    metrics = _metric_names(grid, rows)
    clash = [m for m in metrics if m in RESERVED_COLUMNS or m in grid.axes]
    if clash:
        raise InvalidArgument(
            f"cell kind {grid.kind!r} returns metric {clash[0]!r}, which is also a column name "
            f"(reserved or an axis). List the metrics to keep in sweep.metrics, without it."
        )
    columns: dict[str, pa.Array] = {
        "cell_id": pa.array([r["cell_id"] for r in rows], pa.string()),
        "replicate": pa.array([r["replicate"] for r in rows], pa.int64()),
        "seed": pa.array([r["seed"] for r in rows], pa.int64()),
    }
    for name, values in grid.axes.items():
        columns[name] = pa.array([r["params"][name] for r in rows], _axis_type(values))
    columns["status"] = pa.array([r["status"] for r in rows], pa.string())
    columns["error"] = pa.array([r["error"] for r in rows], pa.string())
    columns["wall_time_s"] = pa.array([r["wall_time_s"] for r in rows], pa.float64())
    for m in metrics:
        columns[m] = pa.array([r["metrics"].get(m) for r in rows], pa.float64())
    table = pa.table(columns)
    meta = {
        _META_FINGERPRINT: grid.fingerprint.encode(),
        _META_GRID: json.dumps(grid.canonical(), sort_keys=True).encode(),
    }
    return table.replace_schema_metadata(meta)


def _records_from_table(table: pa.Table, grid: Grid) -> dict[str, dict[str, Any]]:
    """Inverse of :func:`_table`: journal records from a results file (its journal was lost)."""
    metrics = [c for c in table.column_names if c not in RESERVED_COLUMNS and c not in grid.axes]
    records: dict[str, dict[str, Any]] = {}
    for row in table.to_pylist():
        records[row["cell_id"]] = {
            "cell_id": row["cell_id"],
            "replicate": row["replicate"],
            "seed": row["seed"],
            "params": {a: row[a] for a in grid.axes},
            "status": row["status"],
            "error": row["error"],
            "wall_time_s": row["wall_time_s"],
            "metrics": {m: row[m] for m in metrics if row[m] is not None},
        }
    return records


def _write_parquet(table: pa.Table, out: Path) -> None:
    """Write the table atomically: a reader sees the old file or the new one, never a part."""
    import pyarrow.parquet as pq  # lazy: the Parquet reader/writer is a heavy part of pyarrow

    with atomic_path(out) as tmp:
        pq.write_table(table, tmp)


def refuse_outputs_naming_the_grid(
    out: str | os.PathLike[str], grid_file: str | os.PathLike[str] | None, *, option: str
) -> None:
    """Refuse a results file or journal that is the grid file (or the same file through a link).

    Checked before anything is written: the journal is appended to and the results file replaced,
    either of which would destroy the grid. The journal must not be the results file either.

    Raises
    ------
    refimpl.errors.InvalidArgument
        Naming ``option`` (``"out"`` or ``"--out"``), the input and how they are the same file.
    """
    journal = journal_path(out)
    refuse_output_naming_input(out, [grid_file], option=option)
    refuse_output_naming_input(journal, [grid_file, out], option=f"the journal of {option}")


def _load_previous(out: Path, grid: Grid) -> dict[str, dict[str, Any]]:
    """Finished cells from an earlier run with the same ``out`` (journal first, else the Parquet)."""
    journal = journal_path(out)
    if journal.exists():
        return _read_journal(journal, grid, out)
    if out.exists():
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
        if theirs.decode() != grid.fingerprint:
            raise _refuse_other_grid(out, theirs.decode(), grid, out)
        return _records_from_table(pq.read_table(out), grid)
    return {}
