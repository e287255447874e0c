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
import re
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
_CSV_BLOCK_BYTES = 1 << 20
_JSONL_BLOCK_BYTES = 4 << 20


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


@dataclass
class Chunk:
    """A block of rows: column name -> float64 array (or list of arrays for list columns)."""

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
        raise TraceError(
            f"{str(path)!r} is a directory, not a trace file. Pass the path of a logged trace."
        )
    if not path.is_file():
        raise TraceError(f"no such file: {str(path)!r}. Pass the path of a logged trace.")
    if fmt == "csv":
        return _csv_chunks(path, numeric, lists, chunk_rows, on_progress, exact)
    if fmt == "jsonl":
        return _jsonl_chunks(path, numeric, lists, chunk_rows, on_progress, exact)
    return _parquet_chunks(path, numeric, lists, chunk_rows, on_progress, exact)


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


def _csv_row_lines(block: bytes, first_line: int, rows: int) -> NDArray[np.int64]:
    """The line number of every row of ``block`` (whose first line is ``first_line``).

    Empty lines hold no row (the CSV parser skips them). If a quoted field spans lines the rows
    and the non-empty lines differ in number; rows are then numbered one per line.
    """
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


def _csv_list(text: str, exact: bool = False) -> NDArray[Any]:
    parts = [p for p in re.split(r"[\s,;]+", text.strip().strip("[]").strip()) if p]
    if exact:
        return exact_array([_exact_text(p) for p in parts])
    return np.asarray([float(p) for p in parts], dtype=np.float64)


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
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv

    def to_float(arr: Any) -> Any:
        return pc.cast(arr, pa.float64())

    with path.open("rb") as handle:
        head = handle.readline()
        _require_text(path, head, "csv", 1)
        header = next(csv.reader([head.decode("utf-8-sig")]), None)
        if not header:
            raise TraceError(
                f"{str(path)!r} is empty: no header line and no rows. Nothing to check."
            )
        wanted = [*numeric, *lists]
        _missing(path, wanted, header)
        if not head.endswith(b"\n"):
            head += b"\n"
        convert = pacsv.ConvertOptions(
            column_types={c: pa.string() for c in wanted},
            include_columns=wanted,
            strings_can_be_null=True,
            null_values=[""],
            quoted_strings_can_be_null=True,
        )
        size = min(max(chunk_rows * 16, 1 << 12), _CSV_BLOCK_BYTES)
        row = 0
        line = 2
        for block in _csv_blocks(handle, size):
            _require_text(path, block, "csv", line)
            data = head + block
            try:
                table = pacsv.read_csv(
                    io.BytesIO(data),
                    read_options=pacsv.ReadOptions(use_threads=False, block_size=len(data) + 1),
                    convert_options=convert,
                )
            except pa.ArrowInvalid as exc:
                bad = _csv_bad_line(block, line, len(header))
                if bad is not None:
                    where, why = f"line {bad[0]}", f"{bad[1]} fields, the header has {len(header)}"
                else:  # pyarrow's row numbers count from this block, not from the file
                    last = line + block.count(b"\n")
                    where, why = f"lines {line}-{last}", str(exc)
                raise TraceError(
                    f"{where}: unparsable CSV ({why}). Every row needs one field per header "
                    "column, and a quote that opens a field must close it."
                ) from None
            n = table.num_rows
            lines = _csv_row_lines(block, line, n)
            line += block.count(b"\n")
            if n == 0:
                on_progress(handle.tell())
                continue
            columns: dict[str, Any] = {}
            for name in wanted:
                col = table.column(name).combine_chunks()
                if col.null_count:
                    i = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
                    raise TraceError(
                        f"line {lines[i]}: column {name!r} is empty. Log a number in every row."
                    )
                if name in lists:
                    values = []
                    for i, s in enumerate(col.to_pylist()):
                        try:
                            values.append(_csv_list(s, exact))
                        except ValueError:
                            raise TraceError(
                                f"line {lines[i]}: column {name!r} holds {s!r}, not a list of "
                                "numbers. Write lists as '3 3 4' or '[3, 3, 4]'."
                            ) from None
                    columns[name] = values
                    continue
                try:
                    if exact:
                        columns[name] = _exact_csv_column(col)
                        continue
                    columns[name] = to_float(col).to_numpy(zero_copy_only=False)
                except (pa.ArrowInvalid, ValueError):
                    i = _first_bad(col, to_float)
                    raise TraceError(
                        f"line {lines[i]}: column {name!r} holds {col[i].as_py()!r}, not a number. "
                        "Fix the row (numbers like 1, -0.5, 1e-3, nan, inf)."
                    ) from None
            yield Chunk(columns, row, lines)
            row += n
            on_progress(handle.tell())


def _exact_csv_column(col: Any) -> NDArray[Any]:
    """A CSV column of numbers, exactly (int64 when every field is an integer that fits)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        out: NDArray[Any] = pc.cast(col, pa.int64()).to_numpy(zero_copy_only=False)
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
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise TraceError(
                f"{where}: not valid JSON ({exc}). Each line must be one JSON object."
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
                    f"{where}: {name!r} is {value!r}, not a list of numbers. Log e.g. [3, 3, 4]."
                )
            numbers = [_json_number(v, where, name, exact) for v in value]
            out[name].append(
                exact_array(numbers) if exact else np.asarray(numbers, dtype=np.float64)
            )
        row_lines.append(first_line + offset)
    columns: dict[str, Any] = {
        c: ((exact_array(v) if exact else np.asarray(v, dtype=np.float64)) if c in numeric else v)
        for c, v in out.items()
    }
    return columns, np.asarray(row_lines, dtype=np.int64)


def _json_number(value: Any, where: str, name: str, exact: bool = False) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        kind = "null" if value is None else type(value).__name__
        what = {
            "bool": "booleans (write 1 or 0, not true or false)",
            "null": "null",
            "str": "strings",
        }.get(kind, f"{kind} values")
        raise TraceError(
            f"{where}: {name!r} is {value!r} ({kind}), not a number. Log numbers, not {what}."
        )
    if exact:
        return value  # int of any size, or float
    try:
        return float(value)
    except OverflowError:  # an integer beyond float64
        return math.inf if value > 0 else -math.inf


def _jsonl_chunks(
    path: Path,
    numeric: Sequence[str],
    lists: Sequence[str],
    chunk_rows: int,
    on_progress: Callable[[int], None],
    exact: bool = False,
) -> Iterator[Chunk]:
    import pyarrow as pa
    import pyarrow.json as pajson

    number = pa.int64() if exact else pa.float64()  # exact: int64, else the slow path
    fields = [(c, number) for c in numeric] + [(c, pa.list_(number)) for c in lists]
    schema = pa.schema(fields)
    options = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    line = 1
    row = 0
    with path.open("rb") as handle:
        while True:
            block = handle.readlines(min(chunk_rows * 64, _JSONL_BLOCK_BYTES))
            if not block:
                break
            data = b"".join(block)
            _require_text(path, data, "jsonl", line)
            columns: dict[str, Any] | None = None
            numbers: NDArray[np.int64] | None = None
            try:
                table = pajson.read_json(
                    io.BytesIO(data),
                    read_options=pajson.ReadOptions(block_size=max(len(data), 1 << 16) + 1),
                    parse_options=options,
                )
                if all(table.column(c).null_count == 0 for c in schema.names):
                    nonblank = [i for i, raw in enumerate(block) if raw.strip()]
                    if len(nonblank) == table.num_rows:
                        columns = {}
                        for c in numeric:
                            columns[c] = table.column(c).to_numpy()
                        for c in lists:
                            columns[c] = [
                                np.asarray(v, dtype=number.to_pandas_dtype())
                                for v in table.column(c).to_pylist()
                            ]
                        numbers = line + np.asarray(nonblank, dtype=np.int64)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                columns = None
            if columns is None or numbers is None:
                columns, numbers = _jsonl_slow(block, line, numeric, lists, exact)
            line += len(block)
            if numbers.size:
                yield Chunk(columns, row, numbers)
                row += int(numbers.size)
            on_progress(handle.tell())


# --- Parquet --------------------------------------------------------------------------------


def _one_line(exc: BaseException) -> str:
    return "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())


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
        file = pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise TraceError(
            f"{str(path)!r} is not a readable Parquet file ({_one_line(exc)}). Is it empty or "
            "truncated?"
        ) from None
    schema = file.schema_arrow
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
    for batch in _readable_batches(file, path, chunk_rows, [*numeric, *lists]):
        columns: dict[str, Any] = {}
        for name in [*numeric, *lists]:
            col = batch.column(name)
            if col.null_count:
                i = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
                raise TraceError(
                    f"row {row + i}: column {name!r} is null. Log a value in every row."
                )
            if name in lists:
                values = col.to_pylist()
                for i, v in enumerate(values):
                    if any(x is None for x in v):
                        raise TraceError(f"row {row + i}: column {name!r} holds a null version.")
                if exact:
                    columns[name] = [exact_array(v) for v in values]
                else:
                    columns[name] = [np.asarray(v, dtype=np.float64) for v in values]
            elif exact and pa.types.is_integer(col.type):
                try:
                    columns[name] = col.cast(pa.int64()).to_numpy(zero_copy_only=False)
                except pa.ArrowInvalid:  # uint64 beyond int64
                    columns[name] = exact_array(col.to_pylist())
            elif exact:
                columns[name] = exact_array(col.to_pylist())
            else:
                columns[name] = col.cast(pa.float64()).to_numpy(zero_copy_only=False)
        yield Chunk(columns, row, None)
        row += batch.num_rows
        on_progress(row)
