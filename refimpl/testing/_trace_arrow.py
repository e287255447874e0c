"""What the trace readers share: the chunk of rows they yield, list columns in Arrow's layout,
Arrow-to-numpy conversion, and the errors of a trace that cannot be checked.

A reader (:mod:`~refimpl.testing._trace_csv`, :mod:`~refimpl.testing._trace_jsonl`,
:mod:`~refimpl.testing._trace_parquet`) yields :class:`Chunk` objects: the requested columns of a
block of rows as float64 arrays (a :class:`ListColumn` for a list column such as ``versions``),
with the row index of the first row and, for text formats, the line number of every row.
Unusable input raises :class:`TraceError` with a message that names the line (or Parquet row), the
column and what was found, quoting at most a short excerpt of a value.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from refimpl._io import describe_os_error
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


def count_newlines(data: bytes | memoryview) -> int:
    """The newlines of a block: numpy's vectorised compare, about 3x faster than ``bytes.count``
    (a byte-at-a-time loop) on a block of megabytes."""
    return byte_counts(data, (10,))[0]


#: bytes compared at once by :func:`byte_counts` (a piece and its mask stay in the CPU's cache)
_COUNT_PIECE = 1 << 18
_scratch = threading.local()


def byte_counts(data: bytes | memoryview, values: Sequence[int]) -> list[int]:
    """How many bytes of ``data`` equal each of ``values``, compared piece by piece into one
    reused mask per thread: no 8 MiB temporary per count (a block's compare allocated one,
    whose pages the system faulted in and zeroed, about a sixth of a large JSONL check's CPU)."""
    a = np.frombuffer(data, dtype=np.uint8)
    mask: NDArray[np.bool_] | None = getattr(_scratch, "mask", None)
    if mask is None:
        mask = _scratch.mask = np.empty(_COUNT_PIECE, dtype=bool)
    out = [0] * len(values)
    for start in range(0, a.size, _COUNT_PIECE):
        piece = a[start : start + _COUNT_PIECE]
        m = mask[: piece.size]
        for k, value in enumerate(values):
            np.equal(piece, value, out=m)
            out[k] += int(np.count_nonzero(m))
    return out


def _require_text(path: Path, data: bytes, fmt: str, first_line: int) -> None:
    """Refuse a block that is not UTF-8 text (a binary file), without echoing its bytes."""
    nul = data.find(b"\x00")
    if nul >= 0:
        line = first_line + data.count(b"\n", 0, nul)
        why = "a NUL byte"
    elif data.isascii():  # most traces: a scan without decoding 8 MiB into a str
        return
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


def require_file(path: Path) -> None:
    """Refuse a trace path that is not a readable file, naming the real cause: a missing file, a
    symlink loop, a directory of the path that cannot be searched."""
    if path.is_file():
        return
    try:
        path.stat()
    except FileNotFoundError:
        raise TraceError(f"no such file: {str(path)!r}. Pass the path of a logged trace.") from None
    except OSError as exc:
        raise TraceError(describe_os_error(exc, path, action="read the trace") + ".") from None
    raise TraceError(f"{str(path)!r} is not a regular file. Pass the path of a logged trace.")


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
