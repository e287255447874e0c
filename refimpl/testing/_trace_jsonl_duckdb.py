"""Large JSONL traces parsed by duckdb's JSON reader, trusted only where it reads as pyarrow does.

duckdb (the ``trace`` extra) parses newline-delimited JSON against an explicit schema in about a
third of the CPU time of polars' reader and a seventh of pyarrow's, streaming record batches in
bounded memory (``MEMORY_LIMIT``, ``THREADS``). It reads the whole file; the trace's own blocks
are read beside it, and each block takes from duckdb's stream as many rows as it has lines.

duckdb refuses much of what pyarrow refuses (a key given twice, a value of the wrong shape, text
that is not JSON, two objects on a line) but *accepts* some text pyarrow refuses: a number written
as a string (``"1.5"``), a boolean (read as 1 or 0), a trailing comma, ``nan`` and ``inf`` in any
case, a number beyond float64 (infinity) even in a column the check does not read; and it reads an
integer ``-0`` as +0. So a block is taken from duckdb only with a certificate that none of these
is in it, checked on its bytes (``bytes`` searches and three numpy counts) and on the values read:

- ASCII, no backslash, no carriage return, neither ``true`` nor ``false`` (the bytes ``u`` and
  ``f`` are searched first: most traces have neither);
- no value read is a null or not finite (a NaN, an infinity, a number beyond float64);
- the block's colons number its lines times the columns read, its quotes twice that, its commas
  those between the members and between the list elements read. With duckdb's refusal of a
  repeated key and no null, the colons say that every line (blank ones included) holds exactly
  the columns read and no other key or colon; the quotes then say that no value is a string, and
  the commas that none is trailing. So every value of the line is a value read, a number;
- a zero read only where the block holds no integer ``-0``.

The first block without a certificate, or a duckdb error, ends the duckdb stream: that block and
every later one are read as before (:mod:`~refimpl.testing._trace_jsonl`), so the verdict, the
report and every error message are those of pyarrow's route. A trace with more columns than the
check reads is therefore read by that route (polars' reader), correctly and more slowly.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from refimpl.testing._trace_arrow import arrow_lists, byte_counts, count_newlines, float64

#: duckdb's working memory and threads: the peak RSS of a check stays flat in the trace's size
MEMORY_LIMIT = "128MB"
THREADS = 2
#: rows of each record batch duckdb hands over
BATCH_ROWS = 65536

_NEGATIVE_ZERO = re.compile(rb"-0(?![0-9.eE])")


def duckdb_installed() -> bool:
    """Whether duckdb can be imported (without importing it)."""
    return importlib.util.find_spec("duckdb") is not None


def _sql_text(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def usable_path(path: Path) -> bool:
    """duckdb expands glob characters in a path: such a path is read by the other route."""
    return not any(ch in str(path) for ch in "*?[]{}")


class DuckRows:
    """duckdb's rows of the trace, handed over in runs of a requested length."""

    def __init__(self, path: Path, numeric: Sequence[str], lists: Sequence[str]) -> None:
        import duckdb

        self._con = duckdb.connect(config={"threads": THREADS, "memory_limit": MEMORY_LIMIT})
        self._con.execute("SET enable_progress_bar = false")
        types = [(c, "DOUBLE") for c in numeric] + [(c, "DOUBLE[]") for c in lists]
        columns = "{" + ", ".join(f"{_sql_text(c)}: {_sql_text(t)}" for c, t in types) + "}"
        names = ", ".join('"' + c.replace('"', '""') + '"' for c, _ in types)
        query = (
            f"SELECT {names} FROM read_json({_sql_text(str(path))}, "
            "format = 'newline_delimited', records = true, compression = 'none', "
            f"auto_detect = false, columns = {columns})"
        )
        self._reader = self._con.sql(query).to_arrow_reader(BATCH_ROWS)
        self._held: list[Any] = []
        self._rows = 0

    def take(self, n: int) -> Any | None:
        """The next ``n`` rows as a pyarrow table, ``None`` if the stream holds fewer."""
        import pyarrow as pa

        while self._rows < n:
            try:
                batch = self._reader.read_next_batch()
            except StopIteration:
                return None
            self._held.append(batch)
            self._rows += batch.num_rows
        table = pa.Table.from_batches(self._held)
        out, rest = table.slice(0, n), table.slice(n)
        self._held = rest.to_batches()
        self._rows -= n
        return out

    def close(self) -> None:
        try:
            self._reader.close()
        finally:
            self._con.close()


def plain_names(numeric: Sequence[str], lists: Sequence[str]) -> bool:
    """Whether the columns' names can be counted in a block's bytes: ASCII, without a quote,
    a backslash, a colon or a comma."""
    return all(n.isascii() and not any(ch in n for ch in '"\\:,') for n in [*numeric, *lists])


#: a block of a trace: its bytes, or a view of a buffer from the buffer's first byte
Block = bytes | memoryview


def _has(data: Block, part: bytes) -> bool:
    """Whether ``part`` is in the block (a view is searched in its buffer, up to its end)."""
    if isinstance(data, memoryview):
        return bool(data.obj.find(part, 0, data.nbytes) >= 0)  # type: ignore[attr-defined]
    return part in data


def plain_bytes(data: Block) -> bool:
    """The conditions on a block's bytes that need no count: ASCII, no backslash, carriage return
    or NUL byte, no ``true`` or ``false``."""
    if not len(data) or np.frombuffer(data, dtype=np.uint8).max() > 127:
        return False
    if _has(data, b"\\") or _has(data, b"\r") or _has(data, b"\0"):
        return False
    return not (
        (_has(data, b"u") and _has(data, b"true")) or (_has(data, b"f") and _has(data, b"false"))
    )


def counts_agree(data: Block, lines: int, keys: int, list_commas: int) -> bool:
    """Whether the block's colons, quotes and commas are those of ``lines`` objects of ``keys``
    numeric members each (``list_commas`` the commas between the elements of their lists): then
    every line holds the read keys only, no string but the keys and no trailing comma."""
    colons, quotes, commas = byte_counts(data, (58, 34, 44))
    if colons != lines * keys or quotes != 2 * colons:
        return False
    return commas == lines * (keys - 1) + list_commas


def columns_of(
    table: Any, data: Block, numeric: Sequence[str], lists: Sequence[str]
) -> dict[str, Any] | None:
    """The block's columns from duckdb's rows, ``None`` unless certified (the module's text)."""
    out: dict[str, Any] = {}
    zero = False
    list_commas = 0
    for c in [*numeric, *lists]:
        col = table.column(c).combine_chunks()
        if col.null_count:
            return None
        values: NDArray[np.float64]
        if c in lists:
            if col.values.null_count:
                return None
            column = arrow_lists(col, c, str)
            sizes = column.sizes()
            list_commas += int(sizes.sum()) - int(np.count_nonzero(sizes))
            values = column.values
            out[c] = column
        else:
            values = out[c] = float64(col)
        if not np.all(np.isfinite(values)):
            return None
        zero = zero or bool(np.any(values == 0))
    if not counts_agree(data, table.num_rows, len(numeric) + len(lists), list_commas):
        return None
    if zero and _has(data, b"-") and _negative_zero(data):
        return None
    return out


def _negative_zero(data: Block) -> bool:
    """Whether the block holds an integer ``-0``."""
    if isinstance(data, memoryview):
        return _NEGATIVE_ZERO.search(data.obj, 0, data.nbytes) is not None
    return _NEGATIVE_ZERO.search(data) is not None


def lines_of(data: Block, newlines: int) -> int:
    """The lines of a block of ``newlines`` newlines (a last line without a newline counts)."""
    return newlines + (not len(data) or data[-1] != 10)


def duckdb_blocks(
    path: Path, numeric: Sequence[str], lists: Sequence[str], blocks: Iterator[Block]
) -> Iterator[tuple[Block, int, dict[str, Any] | None]]:
    """Each block with its count of newlines and its columns from duckdb, or with ``None`` from
    the first block that duckdb is not trusted with on (its stream closed then)."""
    rows: DuckRows | None = None
    try:
        try:
            rows = DuckRows(path, numeric, lists)
        except Exception:  # duckdb cannot read it at all: the other route says why
            rows = None
        for data in blocks:
            if rows is None:
                yield data, count_newlines(data), None
                continue
            newlines = count_newlines(data)
            columns = _block_columns(rows, data, newlines, numeric, lists)
            if columns is None:
                rows.close()
                rows = None
            yield data, newlines, columns
    finally:
        if rows is not None:
            rows.close()


def _block_columns(
    rows: DuckRows, data: Block, newlines: int, numeric: Sequence[str], lists: Sequence[str]
) -> dict[str, Any] | None:
    if not plain_bytes(data):
        return None
    try:
        table = rows.take(lines_of(data, newlines))
    except Exception:  # a duckdb error (not JSON, a repeated key...): the other route says why
        return None
    if table is None:
        return None
    return columns_of(table, data, numeric, lists)
