"""The JSONL reader of ``refimpl check``: blocks of lines parsed by duckdb, polars or pyarrow.

A block (at most 8 MiB of whole lines) is parsed against the columns the spec reads (a JSON array
becomes a list column). A trace of at least 16 MiB is parsed by duckdb where it certifies a block
(:mod:`~refimpl.testing._trace_jsonl_duckdb`: about 0.15 of pyarrow's CPU time per row), and from
the first block it does not certify on by polars when it is installed (both in the ``trace``
extra): polars' JSON reader takes about 0.4 of pyarrow's CPU time per row, which repays its import
(0.04 s more than pyarrow's) from about 16 MiB on. The three parse numbers identically (correctly
rounded), and polars is only trusted where both accept the same text: a block that polars
refuses, or where a key read may be missing or repeated, or that holds an integer ``-0`` (polars
reads +0) goes to pyarrow's reader, in 1 MiB pieces on pyarrow's threads; a block that pyarrow
cannot parse (a string where a number belongs, a key given twice, a line that is not JSON) is
parsed again line by line, only to name the line and the key. Exact specs (integers of any size)
use pyarrow.
"""

from __future__ import annotations

import importlib.util
import io
import json
import math
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from numpy.typing import NDArray

from refimpl.testing._trace_arrow import (
    _JSONL_BLOCK_BYTES,
    _PARSE_BLOCK,
    Chunk,
    ListColumn,
    TraceError,
    _require_text,
    arrow_lists,
    count_newlines,
    exact_array,
    excerpt,
    to_numpy,
)
from refimpl.testing._trace_jsonl_duckdb import (
    duckdb_blocks,
    duckdb_installed,
    lines_of,
    plain_names,
    usable_path,
)


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


def _jsonl_views(
    handle: io.BufferedIOBase, size: int, slack: int | None = None
) -> Iterator[memoryview]:
    """The blocks of :func:`_jsonl_blocks`, byte for byte, as views of one reused buffer from its
    first byte (each valid until the next is taken): no new 8 MiB object per block, whose pages
    the system would fault in and zero, and no copy to append the end of the block's last line.
    The buffer holds ``slack`` bytes more than ``size`` (an eighth more, by default): a block's
    last line that runs past it is appended as before."""
    buf = bytearray(size + (size // 8 + 4096 if slack is None else slack))
    view = memoryview(buf)
    held, eof = 0, False
    while True:
        while not eof and held < len(buf):
            n = handle.readinto(view[held:])
            eof = not n
            held += n or 0
        if not held:
            return
        end = buf.find(b"\n", size - 1, held) + 1 if held >= size else held
        if not end and not eof:  # the line goes on past the buffer
            yield memoryview(bytes(view[:held]) + handle.readline())
            held = 0
            continue
        end = end or held
        yield view[:end]
        buf[: held - end] = view[end:held]
        held -= end


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
    found = _row_lines(data, line, table.num_rows)
    if found is None:
        return None
    numbers = found

    def where(row: int) -> str:
        return f"line {int(numbers[row])}"

    columns: dict[str, Any] = {}
    for c in numeric:
        columns[c] = to_numpy(table.column(c))
    for c in lists:
        columns[c] = arrow_lists(table.column(c).combine_chunks(), c, where, exact=exact)
    return columns, numbers


#: a JSONL trace at least this large is parsed by polars (when installed): see the module's text
POLARS_MIN_BYTES = 16 << 20
#: a JSONL trace at least this large is parsed by duckdb (when installed) where it certifies a
#: block (:mod:`~refimpl.testing._trace_jsonl_duckdb`), by polars otherwise
DUCKDB_MIN_BYTES = 16 << 20


def polars_installed() -> bool:
    """Whether polars can be imported (without importing it)."""
    return importlib.util.find_spec("polars") is not None


def _row_lines(
    data: bytes, line: int, rows: int, newlines: int | None = None
) -> NDArray[np.int64] | None:
    """The line number of each of the ``rows`` rows parsed from ``data`` (its first line is
    ``line``, ``newlines`` its count of newlines if known; blank lines hold no row); ``None`` if
    the rows are not its non-blank lines."""
    lines = (data.count(b"\n") if newlines is None else newlines) + (not data.endswith(b"\n"))
    if rows == lines:
        return line + np.arange(lines, dtype=np.int64)
    filled = [i for i, raw in enumerate(data.splitlines()) if raw.strip()]
    if len(filled) != rows:
        return None
    return line + np.asarray(filled, dtype=np.int64)


#: an integer ``-0`` (polars reads it as +0, pyarrow as -0)
_NEGATIVE_ZERO = re.compile(rb"-0(?![0-9.eE])")


def _jsonl_polars(
    data: bytes, line: int, newlines: int, numeric: Sequence[str], lists: Sequence[str]
) -> tuple[dict[str, Any], NDArray[np.int64]] | None:
    """The block through polars' JSON reader (``None``: not surely as pyarrow reads it)."""
    import polars as pl

    schema: dict[str, Any] = dict.fromkeys(numeric, pl.Float64)
    schema.update({c: pl.List(pl.Float64) for c in lists})
    try:
        frame = pl.read_ndjson(io.BytesIO(data), schema=schema)
    except Exception:  # polars refuses it: pyarrow's reader, then the line-by-line one, say why
        return None
    rows = frame.height
    # Each key read once per row: a key missing from a row is a null, a repeated one (which
    # polars would read silently) makes a count above the rows, unless escaped ("weigh\u0074"):
    # a block with an escape sequence is pyarrow's (a backslash first: one memchr, ~40x faster
    # than the search for the two bytes, and most blocks have none).
    if b"\\" in data and b"\\u" in data:
        return None
    if any(frame[c].null_count() or data.count(f'"{c}"'.encode()) != rows for c in schema):
        return None
    numbers = _row_lines(data, line, rows, newlines)
    if numbers is None:
        return None

    def where(row: int) -> str:
        return f"line {int(numbers[row])}"

    columns: dict[str, Any] = {c: frame[c].to_numpy() for c in numeric}
    for c in lists:
        columns[c] = arrow_lists(frame[c].to_arrow(), c, where)
    zeros = any(np.any(v == 0) for v in columns.values() if isinstance(v, np.ndarray)) or any(
        np.any(columns[c].values == 0) for c in lists
    )
    if zeros and _NEGATIVE_ZERO.search(data):  # a zero parsed, maybe from -0: pyarrow's sign
        return None
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
    size = path.stat().st_size
    fast = not exact and size >= POLARS_MIN_BYTES and polars_installed()
    duck = (
        not exact
        and size >= DUCKDB_MIN_BYTES
        and duckdb_installed()
        and usable_path(path)
        and plain_names(numeric, lists)
    )
    block = min(max(chunk_rows * 64, 1 << 12), _JSONL_BLOCK_BYTES)
    with path.open("rb") as handle:
        if duck:  # views of one buffer; a block duckdb does not read is copied out of it
            read = duckdb_blocks(path, numeric, lists, _jsonl_views(handle, block))
        else:
            read = _plain(_jsonl_blocks(handle, block))
        for view, newlines, columns in read:
            if columns is not None:  # duckdb's rows, certified: one per line
                parsed = columns, line + np.arange(lines_of(view, newlines), dtype=np.int64)
            else:
                data = view if isinstance(view, bytes) else bytes(view)
                parsed = _parse_block(path, data, line, newlines, numeric, lists, exact, fast)
            columns, numbers = parsed
            line += newlines
            if numbers.size:
                yield Chunk(columns, row, numbers)
                row += int(numbers.size)
            on_progress(handle.tell())


def _parse_block(
    path: Path,
    data: bytes,
    line: int,
    newlines: int,
    numeric: Sequence[str],
    lists: Sequence[str],
    exact: bool,
    fast: bool,
) -> tuple[dict[str, Any], NDArray[np.int64]]:
    """A block duckdb does not read: polars (``fast``), pyarrow, or line by line to say why not."""
    # polars refuses bytes that are not UTF-8 text (NUL included): checked on its refusal
    parsed = _jsonl_polars(data, line, newlines, numeric, lists) if fast else None
    if parsed is None:
        _require_text(path, data, "jsonl", line)
        parsed = _jsonl_fast(data, line, numeric, lists, exact)
    if parsed is None:
        parsed = _jsonl_slow(data.split(b"\n"), line, numeric, lists, exact)
    return parsed


def _plain(blocks: Iterator[bytes]) -> Iterator[tuple[bytes, int, None]]:
    for data in blocks:
        yield data, count_newlines(data), None
