"""Streaming readers for logged traces (CSV, JSONL, Parquet) used by ``refimpl check``.

Each reader yields :class:`Chunk` objects: the requested columns of a block of rows as float64
arrays (a list of arrays for a list column such as ``versions``), with the row index of the first row
and, for text formats, the line number of every row. Unusable input raises :class:`TraceError` with a
message that names the line (or Parquet row), the column and what was found.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from numpy.typing import NDArray

from refimpl.errors import InvalidArgument

FORMATS = ("csv", "jsonl", "parquet")
_SUFFIXES = {
    ".csv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
}


# Bytes parsed at once: ~1e5 rows of a small CSV; JSONL rows are longer. Memory stays bounded by
# these (and by --chunk-rows for Parquet), whatever the size of the trace.
_CSV_BLOCK_BYTES = 8 << 20
_JSONL_BLOCK_BYTES = 8 << 20
# Each block is parsed by pyarrow in pieces of this size, in parallel on its CPU thread pool.
_PARSE_BLOCK = 1 << 20


class TraceError(InvalidArgument):
    """The trace cannot be checked (exit code 2); the message says where and how to fix it.

    Part of refimpl's exception family: an :class:`~refimpl.errors.InvalidArgument` (a
    ``ValueError``), like every refusal.
    """


ACCEPTED = (
    "refimpl check reads CSV and JSONL as UTF-8 text, and Parquet (a .parquet suffix or "
    "--format parquet)"
)


def _require_text(path: Path, data: bytes, fmt: str, first_line: int) -> None:
    """Refuse a block that is not UTF-8 text (a binary file), without echoing its bytes."""
    nul = data.find(b"\x00")
    if nul >= 0:
        line = first_line + data.count(b"\n", 0, nul)
        why = "a NUL byte"
    else:
        try:
            data.decode("utf-8")
            return
        except UnicodeDecodeError as exc:
            line = first_line + data.count(b"\n", 0, exc.start)
            why = "bytes that are not UTF-8"
    raise TraceError(
        f"{str(path)!r} is not a {fmt.upper()} text file (line {line} holds {why}). "
        f"{ACCEPTED}; pass the trace itself, or the right --format."
    )


def sniff_format(path: Path) -> str | None:
    """The format of a trace from its first bytes (``None``: empty): Parquet's magic ``PAR1``, a
    JSON object (``{``), else CSV."""
    with path.open("rb") as fh:
        head = fh.read(4096)
    if head.startswith(b"PAR1"):
        return "parquet"
    stripped = head.lstrip()
    if not stripped:
        return None
    return "jsonl" if stripped.startswith(b"{") else "csv"


class ListColumn:
    """A column whose rows are lists of numbers, stored flat: ``values[offsets[i]:offsets[i + 1]]``
    is row ``i`` (Arrow's layout, so a reader hands its buffers over without a Python object per
    row). Indexing a row gives a numpy view; a slice gives a :class:`ListColumn`; iterating gives
    the rows, so code written for a list of arrays reads it unchanged."""

    __slots__ = ("offsets", "values")

    def __init__(self, values: NDArray[Any], offsets: NDArray[np.int64]) -> None:
        self.values = values
        self.offsets = np.asarray(offsets, dtype=np.int64)

    @classmethod
    def from_rows(cls, rows: Sequence[NDArray[Any]], dtype: Any = np.float64) -> ListColumn:
        """The column of the arrays ``rows`` (an object dtype keeps Python ints exactly)."""
        sizes = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        if dtype is object or any(np.asarray(r).dtype == object for r in rows):
            values: NDArray[Any] = np.empty(int(offsets[-1]), dtype=object)
            for r, a, b in zip(rows, offsets[:-1], offsets[1:], strict=True):
                values[a:b] = list(r)
            if all(type(v) is int and -(2**63) <= v < 2**63 for v in values):
                values = values.astype(np.int64)
        elif len(rows):
            values = np.concatenate([np.asarray(r, dtype=dtype) for r in rows])
        else:
            values = np.zeros(0, dtype=dtype)
        return cls(values, offsets)

    def __len__(self) -> int:
        return int(self.offsets.size - 1)

    def sizes(self) -> NDArray[np.int64]:
        """The length of every row."""
        return np.diff(self.offsets)

    def row_of(self, flat: int) -> int:
        """The row that holds flat element ``flat``."""
        return int(np.searchsorted(self.offsets, flat, side="right") - 1)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step != 1:
                raise ValueError("a ListColumn is sliced with step 1 only")
            stop = max(start, stop)
            offsets = self.offsets[start : stop + 1]
            base = int(offsets[0]) if offsets.size else 0
            return ListColumn(
                self.values[base : int(offsets[-1]) if offsets.size else 0], offsets - base
            )
        i = int(key)
        if i < 0:
            i += len(self)
        return self.values[self.offsets[i] : self.offsets[i + 1]]

    def __iter__(self) -> Iterator[NDArray[Any]]:
        for a, b in zip(self.offsets[:-1].tolist(), self.offsets[1:].tolist(), strict=True):
            yield self.values[a:b]


@dataclass
class Chunk:
    """A block of rows: column name -> float64 array (a :class:`ListColumn` for list columns)."""

    columns: dict[str, Any]
    row_start: int
    lines: NDArray[np.int64] | None  # line number of each row (text formats), else None

    @property
    def size(self) -> int:
        first = next(iter(self.columns.values()))
        return len(first)

    def where(self, i: int) -> str:
        """``line L`` (text formats) or ``row R`` (Parquet, 0-based) for row ``i`` of the chunk."""
        if self.lines is not None:
            return f"line {int(self.lines[i])}"
        return f"row {self.row_start + i}"


def detect_format(path: Path, given: str | None) -> str:
    if given is not None:
        return given
    fmt = _SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        raise TraceError(
            f"cannot tell the format of {str(path)!r} from its suffix {path.suffix!r}; "
            f"pass --format {{{','.join(FORMATS)}}} (known suffixes: {', '.join(_SUFFIXES)})."
        )
    return fmt


def read_chunks(
    path: Path,
    fmt: str,
    numeric: Sequence[str],
    lists: Sequence[str],
    *,
    chunk_rows: int,
    on_progress: Callable[[int], None],
    exact: bool = False,
) -> Iterator[Chunk]:
    """Stream the columns ``numeric`` (float64) and ``lists`` (lists of numbers) of a trace.

    With ``exact``, numbers are read without a float64 round trip (integers such as versions and
    steps, of any size): a column is an int64 array when every value is an integer that fits, else
    an object array of Python ``int`` (an integral float becomes its ``int``) and ``float`` (the
    others: a fraction, NaN, infinity). ``on_progress`` receives the number of bytes (text
    formats) or rows (Parquet) consumed so far.
    """
    if path.is_dir():
        if fmt != "parquet":
            raise TraceError(
                f"{str(path)!r} is a directory, not a trace file. Pass the path of a logged "
                "trace, or a directory of Parquet files (a partitioned dataset)."
            )
        return _dataset_chunks(path, numeric, lists, chunk_rows, on_progress, exact)
    if not path.is_file():
        raise TraceError(f"no such file: {str(path)!r}. Pass the path of a logged trace.")
    if fmt == "csv":
        return _csv_chunks(path, numeric, lists, chunk_rows, on_progress, exact)
    if fmt == "jsonl":
        return _jsonl_chunks(path, numeric, lists, chunk_rows, on_progress, exact)
    return _parquet_chunks(path, numeric, lists, chunk_rows, on_progress, exact)


def dataset_files(path: Path) -> list[Path]:
    """The Parquet files of a partitioned dataset (a directory), in the order they are read:
    sorted by path, skipping hidden and ``_``-prefixed entries (``_SUCCESS``, ``_metadata``)."""
    files = sorted(
        p
        for p in path.rglob("*")
        if p.is_file() and not any(part[:1] in "._" for part in p.relative_to(path).parts)
    )
    if not files:
        raise TraceError(
            f"{str(path)!r} is a directory with no data files. Pass a trace file, or a directory "
            "of Parquet files (a partitioned dataset)."
        )
    return files


def parquet_rows(path: Path) -> int:
    """The rows of a Parquet file or dataset, from the footers (0 when unreadable)."""
    import pyarrow.parquet as pq

    try:
        files = dataset_files(path) if path.is_dir() else [path]
        return sum(int(pq.ParquetFile(f).metadata.num_rows) for f in files)
    except Exception:  # an unreadable trace: the reader names the problem
        return 0


def _dataset_chunks(
    path: Path,
    numeric: Sequence[str],
    lists: Sequence[str],
    chunk_rows: int,
    on_progress: Callable[[int], None],
    exact: bool,
) -> Iterator[Chunk]:
    """The files of a dataset one after the other, rows numbered across them."""
    row = 0
    for file in dataset_files(path):
        done = row
        for chunk in partition_chunks(path, file, row, numeric, lists, chunk_rows, exact):
            done = chunk.row_start + chunk.size
            on_progress(done)
            yield chunk
        row = done if done > row else row + parquet_rows(file)


def partition_chunks(
    root: Path,
    file: Path,
    row_start: int,
    numeric: Sequence[str],
    lists: Sequence[str],
    chunk_rows: int,
    exact: bool,
) -> Iterator[Chunk]:
    """The chunks of one file of a dataset, its rows numbered from ``row_start``; an error names
    the file."""
    try:
        for chunk in _parquet_chunks(file, numeric, lists, chunk_rows, lambda _: None, exact):
            chunk.row_start += row_start
            yield chunk
    except TraceError as exc:
        name = str(file.relative_to(root))
        raise TraceError(str(exc) if name in str(exc) else f"{name}: {exc}") from None


def exact_array(values: Sequence[Any]) -> NDArray[Any]:
    """Python numbers as an int64 array when all are integers that fit, else an object array of
    ``int`` (integral floats converted exactly) and ``float``."""
    out = [int(v) if isinstance(v, float) and v.is_integer() else v for v in values]
    if all(type(v) is int and -(2**63) <= v < 2**63 for v in out):
        return np.asarray(out, dtype=np.int64)
    arr = np.empty(len(out), dtype=object)
    arr[:] = out
    return arr


def _exact_text(text: str) -> int | float:
    """A number written in a CSV field, exactly: an integer literal of any size, else a float."""
    try:
        return int(text)
    except ValueError:
        return float(text)


_NUMPY_TYPES = {
    "double": np.float64,
    "float": np.float32,
    "int64": np.int64,
    "int32": np.int32,
    "int16": np.int16,
    "int8": np.int8,
    "uint64": np.uint64,
    "uint32": np.uint32,
    "uint16": np.uint16,
    "uint8": np.uint8,
}


def to_numpy(arr: Any) -> NDArray[Any]:
    """An Arrow array (or chunked array) as numpy, zero-copy where it can be.

    A fixed-width column without nulls is a view of its Arrow buffer; a boolean one is unpacked.
    pyarrow's own ``to_numpy`` imports pandas on first use (0.2-0.3 s of the start-up of a
    check that never needs it), so it is the fallback only (nulls, other types).
    """
    import pyarrow as pa

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.null_count == 0 and pa.types.is_boolean(arr.type):
        return to_numpy(arr.cast(pa.int8())).astype(bool)
    dtype = _NUMPY_TYPES.get(str(arr.type))
    if arr.null_count or dtype is None:
        out: NDArray[Any] = arr.to_numpy(zero_copy_only=False)
        return out
    if len(arr) == 0:
        return np.zeros(0, dtype=dtype)
    size = np.dtype(dtype).itemsize
    return np.frombuffer(arr.buffers()[1], dtype=dtype, count=len(arr), offset=arr.offset * size)


def float64(arr: Any) -> NDArray[np.float64]:
    """A numeric Arrow array as float64 numpy: a view when it is float64, converted by numpy from
    another fixed-width type (the IEEE rounding Arrow's cast applies), by Arrow otherwise."""
    import pyarrow as pa

    if arr.null_count == 0 and str(arr.type) in _NUMPY_TYPES:
        return np.asarray(to_numpy(arr), dtype=np.float64)
    return to_numpy(arr.cast(pa.float64()))


def excerpt(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut to about ``limit`` characters: an error quotes a value, not a page."""
    text = repr(value.tolist() if isinstance(value, np.ndarray) else value)
    return text if len(text) <= limit else text[: limit - 5] + " ...]"[: 5 if text[0] == "[" else 4]


def _duplicates(path: Path, names: Sequence[str], where: str) -> None:
    """Refuse a table that names a column twice: which of the two a check reads is a guess."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise TraceError(
                f"{str(path)!r}: {where} names the column {name!r} twice. A column must have one "
                "name: rename one of them (or drop the copy) and write the trace again."
            )
        seen.add(name)


def arrow_lists(
    col: Any, name: str, where: Callable[[int], str], *, exact: bool = False
) -> ListColumn:
    """An Arrow list array (no null rows) as a :class:`ListColumn`, without a row-by-row copy;
    a null element is a :class:`TraceError` naming its row."""
    import pyarrow as pa

    offsets = to_numpy(col.offsets).astype(np.int64)
    flat = col.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    offsets = offsets - offsets[0]
    if flat.null_count:
        j = int(np.flatnonzero(to_numpy(flat.is_null()))[0])
        row = int(np.searchsorted(offsets, j, side="right") - 1)
        raise TraceError(
            f"{where(row)}: column {name!r} holds a null at element {j - int(offsets[row])}. "
            "Log a number for every element of the list."
        )
    if exact and pa.types.is_integer(flat.type):
        try:
            return ListColumn(to_numpy(flat.cast(pa.int64())), offsets)
        except pa.ArrowInvalid:  # uint64 beyond int64
            return ListColumn(exact_array(flat.to_pylist()), offsets)
    if exact:
        return ListColumn(exact_array(flat.to_pylist()), offsets)
    return ListColumn(float64(flat), offsets)


def _missing(path: Path, wanted: Sequence[str], present: Sequence[str]) -> None:
    missing = [c for c in wanted if c not in present]
    if missing:
        raise TraceError(
            f"{str(path)!r} has no column {', '.join(map(repr, missing))} (columns found: "
            f"{', '.join(map(repr, present)) or 'none'}). Log these columns, or rename them."
        )


# --- CSV ------------------------------------------------------------------------------------


def _first_bad(array: Any, convert: Callable[[Any], Any]) -> int:
    """Index of the first element that ``convert`` rejects (bisection on prefixes)."""
    lo, hi = 0, len(array)  # invariant: array[:lo] converts, array[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            convert(array.slice(0, mid))
            lo = mid
        except Exception:
            hi = mid
    return lo


def _csv_blocks(handle: BinaryIO, size: int) -> Iterator[bytes]:
    """Blocks of about ``size`` bytes that end at a row boundary (a newline outside quotes).

    A block is extended line by line while it holds an odd number of ``"`` (a quoted field that
    spans a newline is still open; an escaped quote ``""`` counts twice and keeps the parity).
    """
    while True:
        block = handle.read(size)
        if not block:
            return
        parts = [block]
        if not block.endswith(b"\n"):
            parts.append(handle.readline())
        quotes = sum(p.count(b'"') for p in parts)
        while quotes % 2:
            more = handle.readline()
            if not more:
                break
            parts.append(more)
            quotes += more.count(b'"')
        yield b"".join(parts) if len(parts) > 1 else block


def _csv_row_lines(
    block: bytes, first_line: int, rows: int, newlines: int | None = None
) -> NDArray[np.int64]:
    """The line number of every row of ``block`` (whose first line is ``first_line``).

    Empty lines hold no row (the CSV parser skips them). If a quoted field spans lines the rows
    and the non-empty lines differ in number; rows are then numbered one per line. As many rows
    as lines (``newlines``, counted by the caller) means one row per line.
    """
    if newlines is not None and rows == newlines + (not block.endswith(b"\n")):
        return first_line + np.arange(rows, dtype=np.int64)
    buf = np.frombuffer(block, dtype=np.uint8)
    ends = np.flatnonzero(buf == 10)
    if ends.size == 0 or ends[-1] != buf.size - 1:
        ends = np.append(ends, buf.size)
    starts = np.concatenate(([0], ends[:-1] + 1))
    length = ends - starts
    first = buf[np.minimum(starts, buf.size - 1)] if buf.size else np.zeros(0, np.uint8)
    empty = (length == 0) | ((length == 1) & (first == 13))
    numbers = first_line + np.flatnonzero(~empty).astype(np.int64)
    if numbers.size == rows:
        return numbers
    return first_line + np.arange(rows, dtype=np.int64)


def _csv_bad_line(block: bytes, first_line: int, width: int) -> tuple[int, int] | None:
    """Line number and field count of the first row of ``block`` whose width differs from the header's."""
    text = io.StringIO(block.decode("utf-8", errors="replace"), newline="")
    reader = csv.reader(text)
    for row in reader:
        if row and len(row) != width:
            return first_line + reader.line_num - 1, len(row)
    return None


def _csv_chunks(
    path: Path,
    numeric: Sequence[str],
    lists: Sequence[str],
    chunk_rows: int,
    on_progress: Callable[[int], None],
    exact: bool = False,
) -> Iterator[Chunk]:
    # Each block is parsed on its own with the non-streaming pyarrow.csv.read_csv: the streaming
    # reader (open_csv) keeps a background thread that, alive at interpreter exit after an error,
    # aborted the process ("terminate called without an active exception", exit 134) in about a
    # third of the runs instead of exiting 2.
    import pyarrow as pa
    import pyarrow.csv as pacsv

    def to_float(arr: Any) -> Any:
        return arr.cast(pa.float64())

    with path.open("rb") as handle:
        head = handle.readline()
        _require_text(path, head, "csv", 1)
        header = next(csv.reader([head.decode("utf-8-sig")]), None)
        if not header:
            raise TraceError(
                f"{str(path)!r} is empty: no header line and no rows. Nothing to check."
            )
        wanted = [*numeric, *lists]
        _duplicates(path, header, "the CSV header")
        _missing(path, wanted, header)
        if not head.endswith(b"\n"):
            head += b"\n"

        def options(numbers: Any) -> Any:
            types = {c: pa.string() if c in lists or exact else numbers for c in wanted}
            return pacsv.ConvertOptions(
                column_types=types,
                include_columns=wanted,
                strings_can_be_null=True,
                null_values=[""],
                quoted_strings_can_be_null=True,
            )

        # Numbers are parsed as float64 directly; a block that does not parse so (or that holds
        # blanks, which pyarrow's float parser would trim) is read as text and cast, which
        # names the line and the field that is not a number.
        typed, text = options(pa.float64()), options(pa.string())
        read = pacsv.ReadOptions(use_threads=True, block_size=_PARSE_BLOCK)
        size = min(max(chunk_rows * 16, 1 << 12), _CSV_BLOCK_BYTES)
        row = 0
        line = 2
        for block in _csv_blocks(handle, size):
            _require_text(path, block, "csv", line)
            data = head + block
            newlines = block.count(b"\n")
            try:
                try:
                    if b" " in block or b"\t" in block:  # pyarrow's float parser trims " 1"
                        raise pa.ArrowInvalid("a field may hold blanks: read it as text")
                    table = pacsv.read_csv(
                        io.BytesIO(data), read_options=read, convert_options=typed
                    )
                except pa.ArrowInvalid:
                    table = pacsv.read_csv(
                        io.BytesIO(data), read_options=read, convert_options=text
                    )
            except pa.ArrowInvalid as exc:
                bad = _csv_bad_line(block, line, len(header))
                if bad is not None:
                    where, why = f"line {bad[0]}", f"{bad[1]} fields, the header has {len(header)}"
                else:  # pyarrow's row numbers count from this block, not from the file
                    last = line + newlines
                    where, why = f"lines {line}-{last}", str(exc)
                raise TraceError(
                    f"{where}: unparsable CSV ({why}). Every row needs one field per header "
                    "column, and a quote that opens a field must close it."
                ) from None
            n = table.num_rows
            lines = _csv_row_lines(block, line, n, newlines)
            line += newlines
            if n == 0:
                on_progress(handle.tell())
                continue
            columns: dict[str, Any] = {}
            for name in wanted:
                col = table.column(name).combine_chunks()
                if col.null_count:
                    i = int(np.flatnonzero(to_numpy(col.is_null()))[0])
                    raise TraceError(
                        f"line {lines[i]}: column {name!r} is empty. Log a number in every row."
                    )
                if name in lists:
                    columns[name] = _csv_list_column(col, name, lines, exact)
                    continue
                try:
                    if exact:
                        columns[name] = _exact_csv_column(col)
                        continue
                    columns[name] = to_numpy(col if col.type == pa.float64() else to_float(col))
                except (pa.ArrowInvalid, ValueError):
                    i = _first_bad(col, to_float)
                    raise TraceError(
                        f"line {lines[i]}: column {name!r} holds {excerpt(col[i].as_py())}, not a "
                        "number. Fix the row (numbers like 1, -0.5, 1e-3, nan, inf)."
                    ) from None
            yield Chunk(columns, row, lines)
            row += n
            on_progress(handle.tell())


#: the bytes that separate the numbers of a list in a CSV field (``3 3 4``, ``[3, 3, 4]``, ``3;4``)
_LIST_SEPARATORS = np.zeros(256, dtype=bool)
_LIST_SEPARATORS[list(b" \t\r\n,;[]")] = True


def _csv_list_tokens(col: Any) -> tuple[Any, NDArray[np.int64]]:
    """The numbers of a CSV column of lists as one Arrow string array, and each row's offsets.

    A byte scan of the column's data: a token is a run of bytes between separators (whitespace,
    ``,``, ``;``, ``[``, ``]``) within a field; the tokens' bytes, taken without the separators,
    become one string array, so a single cast parses them all.
    """
    import pyarrow as pa

    width = 8 if pa.types.is_large_string(col.type) else 4
    fields = np.frombuffer(
        col.buffers()[1],
        dtype=np.int64 if width == 8 else np.int32,
        count=len(col) + 1,
        offset=col.offset * width,
    ).astype(np.int64)
    data = np.frombuffer(col.buffers()[2] or b"", dtype=np.uint8)[fields[0] : fields[-1]]
    fields = fields - fields[0]
    keep = ~_LIST_SEPARATORS[data]
    edge = np.zeros(data.size + 1, dtype=bool)
    edge[fields] = True  # a field boundary ends a token and starts the next
    before = np.concatenate(([True], ~keep[:-1])) | edge[:-1]
    after = np.concatenate((~keep[1:], [True])) | edge[1:]
    starts = np.flatnonzero(keep & before)
    ends = np.flatnonzero(keep & after) + 1
    rows = np.searchsorted(starts, fields, side="left").astype(np.int64)
    offsets = np.concatenate(([0], np.cumsum(ends - starts))).astype(np.int32)
    tokens = pa.StringArray.from_buffers(
        len(starts), pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(data[keep]))
    )
    return tokens, rows


def _csv_list_column(col: Any, name: str, lines: NDArray[np.int64], exact: bool) -> ListColumn:
    """A CSV column of lists (``3 3 4``, ``[3, 3, 4]``, ``3;3;4``) parsed column-wise."""
    import pyarrow as pa
    import pyarrow.compute as pc

    tokens, offsets = _csv_list_tokens(col)

    def fail(j: int) -> TraceError:
        row = int(np.searchsorted(offsets, j, side="right") - 1)
        return TraceError(
            f"line {lines[row]}: column {name!r} holds {excerpt(col[row].as_py())}, not a list of "
            "numbers. Write lists as '3 3 4' or '[3, 3, 4]'."
        )

    if exact:
        try:
            return ListColumn(to_numpy(pc.cast(tokens, pa.int64())), offsets)
        except pa.ArrowInvalid:
            values = []
            for j, t in enumerate(tokens.to_pylist()):
                try:
                    values.append(_exact_text(t))
                except ValueError:
                    raise fail(j) from None
            return ListColumn(exact_array(values), offsets)
    try:
        return ListColumn(to_numpy(pc.cast(tokens, pa.float64())), offsets)
    except pa.ArrowInvalid:
        raise fail(_first_bad(tokens, lambda a: pc.cast(a, pa.float64()))) from None


def _exact_csv_column(col: Any) -> NDArray[Any]:
    """A CSV column of numbers, exactly (int64 when every field is an integer that fits)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        out: NDArray[Any] = to_numpy(pc.cast(col, pa.int64()))
        return out
    except pa.ArrowInvalid:
        return exact_array([_exact_text(v) for v in col.to_pylist()])  # ValueError: not a number


# --- JSONL ----------------------------------------------------------------------------------


def _jsonl_slow(
    lines: list[bytes],
    first_line: int,
    numeric: Sequence[str],
    lists: Sequence[str],
    exact: bool = False,
) -> tuple[dict[str, Any], NDArray[np.int64]]:
    """Parse line by line with exact error messages (used when the fast path cannot)."""
    out: dict[str, list[Any]] = {c: [] for c in [*numeric, *lists]}
    row_lines: list[int] = []
    for offset, raw in enumerate(lines):
        where = f"line {first_line + offset}"
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw, object_pairs_hook=_no_duplicate_keys)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise TraceError(
                f"{where}: not valid JSON ({exc}). Each line must be one JSON object."
            ) from None
        except _DuplicateKey as exc:
            raise TraceError(
                f"{where}: the key {exc.args[0]!r} appears twice in one object. A column must have "
                "one name: log each key once."
            ) from None
        if not isinstance(obj, dict):
            raise TraceError(f"{where}: a JSON {type(obj).__name__}, not an object {{...}}.")
        for name in numeric:
            if name not in obj:
                raise TraceError(
                    f"{where}: no key {name!r} (keys: {', '.join(map(repr, obj)) or 'none'}). "
                    "Log it in every row."
                )
            out[name].append(_json_number(obj[name], where, name, exact))
        for name in lists:
            if name not in obj:
                raise TraceError(
                    f"{where}: no key {name!r} (keys: {', '.join(map(repr, obj)) or 'none'})."
                )
            value = obj[name]
            if not isinstance(value, list):
                raise TraceError(
                    f"{where}: {name!r} is {excerpt(value)}, not a list of numbers. Log e.g. "
                    "[3, 3, 4]."
                )
            numbers = [_json_number(v, where, name, exact) for v in value]
            out[name].append(
                exact_array(numbers) if exact else np.asarray(numbers, dtype=np.float64)
            )
        row_lines.append(first_line + offset)
    columns: dict[str, Any] = {
        c: (
            (exact_array(v) if exact else np.asarray(v, dtype=np.float64))
            if c in numeric
            else ListColumn.from_rows(v, dtype=object if exact else np.float64)
        )
        for c, v in out.items()
    }
    return columns, np.asarray(row_lines, dtype=np.int64)


class _DuplicateKey(Exception):
    """A JSON object names a key twice (``json`` would keep the last silently)."""


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return out


def _json_number(value: Any, where: str, name: str, exact: bool = False) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        kind = "null" if value is None else type(value).__name__
        what = {
            "bool": "booleans (write 1 or 0, not true or false)",
            "null": "null",
            "str": "strings",
        }.get(kind, f"{kind} values")
        raise TraceError(
            f"{where}: {name!r} is {excerpt(value)} ({kind}), not a number. Log numbers, not {what}."
        )
    if exact:
        return value  # int of any size, or float
    try:
        return float(value)
    except OverflowError:  # an integer beyond float64
        return math.inf if value > 0 else -math.inf


def _jsonl_blocks(handle: BinaryIO, size: int) -> Iterator[bytes]:
    """Blocks of about ``size`` bytes that end at a line boundary."""
    while True:
        block = handle.read(size)
        if not block:
            return
        if not block.endswith(b"\n"):
            block += handle.readline()
        yield block


def _jsonl_fast(
    data: bytes, line: int, numeric: Sequence[str], lists: Sequence[str], exact: bool
) -> tuple[dict[str, Any], NDArray[np.int64]] | None:
    """The block through pyarrow's JSON reader (``None``: it cannot say, the slow path will)."""
    import pyarrow as pa
    import pyarrow.json as pajson

    number = pa.int64() if exact else pa.float64()  # exact: int64, else the slow path
    schema = pa.schema([(c, number) for c in numeric] + [(c, pa.list_(number)) for c in lists])
    parse = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    table = None
    # In parallel pieces first; a line longer than a piece is parsed with the block whole.
    for size in (_PARSE_BLOCK, len(data) + 1) if len(data) > _PARSE_BLOCK else (len(data) + 1,):
        try:
            options = pajson.ReadOptions(use_threads=True, block_size=size)
            table = pajson.read_json(io.BytesIO(data), read_options=options, parse_options=parse)
            break
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
    if table is None:
        return None
    if any(table.column(c).null_count for c in schema.names):
        return None
    lines = data.count(b"\n") + (not data.endswith(b"\n"))
    if table.num_rows == lines:
        numbers = line + np.arange(lines, dtype=np.int64)
    else:  # blank lines hold no row
        blank = [i for i, raw in enumerate(data.splitlines()) if raw.strip()]
        if len(blank) != table.num_rows:
            return None
        numbers = line + np.asarray(blank, dtype=np.int64)

    def where(row: int) -> str:
        return f"line {int(numbers[row])}"

    columns: dict[str, Any] = {}
    for c in numeric:
        columns[c] = to_numpy(table.column(c))
    for c in lists:
        columns[c] = arrow_lists(table.column(c).combine_chunks(), c, where, exact=exact)
    return columns, numbers


def _jsonl_chunks(
    path: Path,
    numeric: Sequence[str],
    lists: Sequence[str],
    chunk_rows: int,
    on_progress: Callable[[int], None],
    exact: bool = False,
) -> Iterator[Chunk]:
    line = 1
    row = 0
    with path.open("rb") as handle:
        for data in _jsonl_blocks(handle, min(max(chunk_rows * 64, 1 << 12), _JSONL_BLOCK_BYTES)):
            _require_text(path, data, "jsonl", line)
            parsed = _jsonl_fast(data, line, numeric, lists, exact)
            if parsed is None:
                parsed = _jsonl_slow(data.split(b"\n"), line, numeric, lists, exact)
            columns, numbers = parsed
            line += data.count(b"\n")
            if numbers.size:
                yield Chunk(columns, row, numbers)
                row += int(numbers.size)
            on_progress(handle.tell())


# --- Parquet --------------------------------------------------------------------------------


def _one_line(exc: BaseException) -> str:
    return "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())


def _rows_per_batch(file: Any, chunk_rows: int, lists: Sequence[str]) -> int:
    """Rows per batch so that a batch holds about ``chunk_rows`` values of each column: a row of
    list columns holds many (a sequence's tokens), estimated from the first row group."""
    meta = file.metadata
    if not lists or meta.num_row_groups == 0 or meta.row_group(0).num_rows == 0:
        return chunk_rows
    group = meta.row_group(0)
    values = [
        group.column(j).num_values
        for j in range(group.num_columns)
        if group.column(j).path_in_schema.split(".")[0] in lists
    ]
    per_row = max(1.0, max(values, default=0) / group.num_rows)
    return max(1, int(chunk_rows / per_row))


def _readable_batches(file: Any, path: Path, chunk_rows: int, columns: list[str]) -> Iterator[Any]:
    """The file's record batches; a page that cannot be decoded is a ``TraceError``.

    The footer can be intact while the pages it points at are not (bytes inserted or cut in the
    middle of the file): pyarrow then fails only while reading, with a multi-line ``OSError``.
    """
    import pyarrow as pa

    batches = file.iter_batches(batch_size=chunk_rows, columns=columns)
    row = 0
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except (pa.ArrowException, OSError) as exc:
            raise TraceError(
                f"{str(path)!r} is not a readable Parquet file: its data from row {row} on cannot "
                f"be decoded ({_one_line(exc)}). The file is damaged; write it again."
            ) from None
        row += batch.num_rows
        yield batch


def _parquet_row(start: int) -> Callable[[int], str]:
    return lambda i: f"row {start + i}"


def _parquet_chunks(
    path: Path,
    numeric: Sequence[str],
    lists: Sequence[str],
    chunk_rows: int,
    on_progress: Callable[[int], None],
    exact: bool = False,
) -> Iterator[Chunk]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        # Without pre-buffering, pyarrow reads the column chunks of one row group at a time
        # instead of the whole file's: peak memory follows the row group, not the file.
        file = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
    except (pa.ArrowInvalid, OSError) as exc:
        raise TraceError(
            f"{str(path)!r} is not a readable Parquet file ({_one_line(exc)}). Is it empty or "
            "truncated?"
        ) from None
    schema = file.schema_arrow
    _duplicates(path, schema.names, "the Parquet schema")
    _missing(path, [*numeric, *lists], schema.names)
    for name in numeric:
        kind = schema.field(name).type
        if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
            raise TraceError(
                f"column {name!r} has type {kind}, not numbers. Log it as a float or integer "
                "column."
            )
    for name in lists:
        kind = schema.field(name).type
        if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)) or not (
            pa.types.is_integer(kind.value_type) or pa.types.is_floating(kind.value_type)
        ):
            raise TraceError(
                f"column {name!r} has type {kind}, not a list of numbers. Log e.g. list<int64>."
            )
    row = 0
    batch_rows = _rows_per_batch(file, chunk_rows, lists)
    for batch in _readable_batches(file, path, batch_rows, [*numeric, *lists]):
        columns: dict[str, Any] = {}
        for name in [*numeric, *lists]:
            col = batch.column(name)
            if col.null_count:
                i = int(np.flatnonzero(to_numpy(col.is_null()))[0])
                raise TraceError(
                    f"row {row + i}: column {name!r} is null. Log a value in every row."
                )
            if name in lists:
                columns[name] = arrow_lists(col, name, _parquet_row(row), exact=exact)
            elif exact and pa.types.is_integer(col.type):
                try:
                    columns[name] = to_numpy(col.cast(pa.int64()))
                except pa.ArrowInvalid:  # uint64 beyond int64
                    columns[name] = exact_array(col.to_pylist())
            elif exact:
                columns[name] = exact_array(col.to_pylist())
            else:
                columns[name] = float64(col)
        yield Chunk(columns, row, None)
        row += batch.num_rows
        on_progress(row)
