"""The CSV reader of ``refimpl check``: blocks cut at row boundaries, parsed by pyarrow.

Each block (at most 8 MiB) is parsed on its own by ``pyarrow.csv.read_csv`` in 1 MiB pieces on
pyarrow's threads, numbers straight to float64; a block that does not parse so is read as text to
name the line and the field. Two blocks are parsed at once, each on a worker thread, so that one
block's work outside pyarrow's threads (its text check, its columns' conversion) overlaps the
other's parse; the chunks, and an error, come in file order, and the workers are joined before
the reader returns or raises. The streaming ``pyarrow.csv.open_csv`` is not used: its background
thread, alive at interpreter exit after an error, aborted the process (exit 134) in about a third
of the runs instead of exiting 2. List cells are split by one byte scan and parsed by one cast.
"""

from __future__ import annotations

import csv
import io
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from numpy.typing import NDArray

from refimpl.testing._trace_arrow import (
    _CSV_BLOCK_BYTES,
    _PARSE_BLOCK,
    Chunk,
    ListColumn,
    TraceError,
    _duplicates,
    _exact_text,
    _first_bad,
    _missing,
    _require_text,
    byte_counts,
    count_newlines,
    exact_array,
    excerpt,
    to_numpy,
)


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
        quotes = sum(_quotes(p) for p in parts if b'"' in p)  # `in`: a memchr, 10x faster
        while quotes % 2:
            more = handle.readline()
            if not more:
                break
            parts.append(more)
            quotes += more.count(b'"')  # a line: bytes.count is faster on a few bytes
        yield b"".join(parts) if len(parts) > 1 else block


def _quotes(data: bytes) -> int:
    """The ``"`` bytes of a block (numpy's vectorised compare: 3x faster than ``bytes.count``)."""
    return byte_counts(data, (34,))[0]


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


def _csv_header(path: Path, handle: BinaryIO, wanted: list[str]) -> tuple[bytes, list[str]]:
    """The header line (ending in a newline) and its names; refused if empty, if a name is
    repeated or if a column the spec reads is missing."""
    head = handle.readline()
    _require_text(path, head, "csv", 1)
    header = next(csv.reader([head.decode("utf-8-sig")]), None)
    if not header:
        raise TraceError(f"{str(path)!r} is empty: no header line and no rows. Nothing to check.")
    _duplicates(path, header, "the CSV header")
    _missing(path, wanted, header)
    return (head if head.endswith(b"\n") else head + b"\n"), header


class _BlockParser:
    """Parses a block (the header line prepended) into an Arrow table of the wanted columns.

    Numbers are parsed as float64 directly; a block that does not parse so (or that holds blanks,
    which pyarrow's float parser would trim: `` 1`` is refused, as a cast refuses it) is read as
    text, so that the column conversion names the line and the field that is not a number.
    """

    def __init__(
        self, header: list[str], wanted: list[str], lists: Sequence[str], exact: bool
    ) -> None:
        import pyarrow as pa
        import pyarrow.csv as pacsv

        def options(numbers: Any) -> Any:
            types = {c: pa.string() if c in lists or exact else numbers for c in wanted}
            return pacsv.ConvertOptions(
                column_types=types,
                include_columns=wanted,
                strings_can_be_null=True,
                null_values=[""],
                quoted_strings_can_be_null=True,
            )

        self.typed, self.text = options(pa.float64()), options(pa.string())
        # The header's names given, pyarrow parses the block in place (no copy with the header
        # line in front of it).
        self.read = pacsv.ReadOptions(
            use_threads=True, block_size=_PARSE_BLOCK, column_names=header
        )

    def __call__(self, header: list[str], block: bytes, line: int, newlines: int) -> Any:
        import pyarrow as pa
        import pyarrow.csv as pacsv

        width = len(header)
        data = pa.BufferReader(pa.py_buffer(block))
        try:
            try:
                if b" " in block or b"\t" in block:
                    raise pa.ArrowInvalid("a field may hold blanks: read it as text")
                return pacsv.read_csv(data, read_options=self.read, convert_options=self.typed)
            except pa.ArrowInvalid:
                data.seek(0)
                return pacsv.read_csv(data, read_options=self.read, convert_options=self.text)
        except pa.ArrowInvalid as exc:
            bad = _csv_bad_line(block, line, width)
            if bad is not None:
                where, why = f"line {bad[0]}", f"{bad[1]} fields, the header has {width}"
            else:  # pyarrow's row numbers count from this block, not from the file
                where, why = f"lines {line}-{line + newlines}", str(exc)
            raise TraceError(
                f"{where}: unparsable CSV ({why}). Every row needs one field per header "
                "column, and a quote that opens a field must close it."
            ) from None


def _csv_columns(
    table: Any, wanted: list[str], lists: Sequence[str], lines: NDArray[np.int64], exact: bool
) -> dict[str, Any]:
    """The table's columns as numpy (numbers) and :class:`ListColumn` (lists)."""
    import pyarrow as pa

    def to_float(arr: Any) -> Any:
        return arr.cast(pa.float64())

    columns: dict[str, Any] = {}
    ahead = _lists_ahead(table, lists, lines, exact)
    for name in wanted:
        col = table.column(name).combine_chunks()
        if col.null_count:
            i = int(np.flatnonzero(to_numpy(col.is_null()))[0])
            raise TraceError(
                f"line {lines[i]}: column {name!r} is empty. Log a number in every row."
            )
        if name in lists:
            columns[name] = (
                ahead[name]() if name in ahead else _csv_list_column(col, name, lines, exact)
            )
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
    return columns


#: text bytes of a block's list columns from which all but the last are parsed on threads
LIST_THREAD_BYTES = 1 << 20


def _lists_ahead(
    table: Any, lists: Sequence[str], lines: NDArray[np.int64], exact: bool
) -> dict[str, Callable[[], ListColumn]]:
    """The list columns of a large block, parsed at once: all but the last on threads of their own
    (pyarrow's kernels release the GIL), the last here meanwhile. For each, a function that
    returns the column or raises its error: the caller asks for a column when it reaches it, so
    the first error in column order is the one raised, as without threads."""
    if len(lists) < 2 or table.nbytes < LIST_THREAD_BYTES:
        return {}
    out: dict[str, Callable[[], ListColumn]] = {}
    threads: list[threading.Thread] = []
    for name in lists:
        box: dict[str, Any] = {}

        def work(name: str = name, box: dict[str, Any] = box) -> None:
            try:
                col = table.column(name).combine_chunks()
                box["value"] = _csv_list_column(col, name, lines, exact)
            except BaseException as exc:  # raised by the caller, in column order
                box["error"] = exc

        if name == lists[-1]:
            work()
        else:
            threads.append(threading.Thread(target=work, daemon=True))
            threads[-1].start()

        def result(box: dict[str, Any] = box) -> ListColumn:
            for thread in threads:
                thread.join()
            if "error" in box:
                raise box["error"]
            value: ListColumn = box["value"]
            return value

        out[name] = result
    return out


#: blocks parsed at once (each on its own worker thread; the chunks are yielded in file order)
PARSE_AHEAD = 2


def _csv_chunks(
    path: Path,
    numeric: Sequence[str],
    lists: Sequence[str],
    chunk_rows: int,
    on_progress: Callable[[int], None],
    exact: bool = False,
) -> Iterator[Chunk]:
    """The trace's chunks, block by block. Cutting a block and counting its lines is sequential
    (each block's first line is the one after the previous block's); the rest (checking that it
    is text, parsing, converting the columns) is done for :data:`PARSE_AHEAD` blocks at once on
    worker threads, since pyarrow's parser and numpy release the GIL. A block's result, chunk or
    error, is given in file order: an error is raised where the serial reading would raise it,
    after every earlier block's chunk."""
    from concurrent.futures import Future, ThreadPoolExecutor

    wanted = [*numeric, *lists]
    with path.open("rb") as handle:
        _, header = _csv_header(path, handle, wanted)
        parse = _BlockParser(header, wanted, lists, exact)
        size = min(max(chunk_rows * 16, 1 << 12), _CSV_BLOCK_BYTES)

        def work(block: bytes, line: int, newlines: int) -> Chunk | None:
            _require_text(path, block, "csv", line)
            table = parse(header, block, line, newlines)
            n = table.num_rows
            if not n:
                return None
            lines = _csv_row_lines(block, line, n, newlines)
            return Chunk(_csv_columns(table, wanted, lists, lines, exact), 0, lines)

        pending: list[tuple[Future[Chunk | None], int]] = []  # in file order, with its end
        row = 0

        def give() -> Iterator[Chunk]:
            nonlocal row
            future, end = pending.pop(0)
            chunk = future.result()  # the block's error, if it has one, is raised here
            if chunk is not None:
                chunk.row_start = row
                row += chunk.size
                yield chunk
            on_progress(end)

        line = 2
        pool = ThreadPoolExecutor(PARSE_AHEAD, thread_name_prefix="refimpl-csv")
        try:
            for block in _csv_blocks(handle, size):
                newlines = count_newlines(block)
                pending.append((pool.submit(work, block, line, newlines), handle.tell()))
                line += newlines
                if len(pending) >= PARSE_AHEAD:
                    yield from give()
            while pending:
                yield from give()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


#: the bytes that separate the numbers of a list in a CSV field (``3 3 4``, ``[3, 3, 4]``, ``3;4``)
_LIST_SEPARATORS = np.zeros(256, dtype=bool)
_LIST_SEPARATORS[list(b" \t\r\n,;[]")] = True
#: ``bytes.translate`` table: 1 for a byte of a number, 0 for a separator (a C loop, about 4x
#: faster than indexing :data:`_LIST_SEPARATORS` by the bytes)
_KEEP = (~_LIST_SEPARATORS).astype(np.uint8).tobytes()


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
    text = bytes(memoryview(col.buffers()[2] or b"")[fields[0] : fields[-1]])
    data = np.frombuffer(text, dtype=np.uint8)
    fields = fields - fields[0]
    keep = np.frombuffer(text.translate(_KEEP), dtype=np.bool_)
    step = np.zeros(data.size + 2, dtype=np.int8)
    step[1:-1] = keep
    step = np.diff(step)  # +1 where a token starts, -1 just past its end
    starts, ends = np.flatnonzero(step == 1), np.flatnonzero(step == -1)
    # A field boundary between two bytes of numbers ends a token and starts the next.
    inner = np.unique(fields[(fields > 0) & (fields < data.size)])
    cut = inner[keep[inner - 1] & keep[inner]]
    if cut.size:
        starts = np.sort(np.concatenate((starts, cut)))
        ends = np.sort(np.concatenate((ends, cut)))
    rows = np.searchsorted(starts, fields, side="left").astype(np.int64)
    offsets = np.concatenate(([0], np.cumsum(ends - starts))).astype(np.int32)
    tokens = pa.StringArray.from_buffers(
        len(starts), pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(data[keep]))
    )
    return tokens, rows


def _comma_lists(col: Any) -> ListColumn | None:
    """A column of lists written ``[3,3.5,4]`` (or ``3,3.5,4``), split at the commas and parsed by
    one cast, in about 0.6 of the time of the byte scan; ``None`` unless every piece is a number
    (a blank, a ``;``, an inner bracket or an empty list leaves a piece that is not). Then the
    pieces are exactly the scan's tokens, and their values the scan's."""
    import pyarrow as pa
    import pyarrow.compute as pc

    parts = pc.split_pattern(pc.utf8_trim(col, characters="[]"), pattern=",")
    try:
        values = pc.cast(parts.values, pa.float64())
    except pa.ArrowInvalid:
        return None
    offsets = to_numpy(parts.offsets).astype(np.int64)
    return ListColumn(to_numpy(values), offsets - offsets[0])


def _csv_list_column(col: Any, name: str, lines: NDArray[np.int64], exact: bool) -> ListColumn:
    """A CSV column of lists (``3 3 4``, ``[3, 3, 4]``, ``3;3;4``) parsed column-wise."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not exact:
        simple = _comma_lists(col)
        if simple is not None:
            return simple
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
