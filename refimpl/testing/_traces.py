"""Streaming readers for logged traces (CSV, JSONL, Parquet) used by ``refimpl check``.

:func:`read_chunks` streams the columns a spec reads from a trace in any format, in chunks whose
size does not grow with the trace; the readers live in :mod:`~refimpl.testing._trace_csv`,
:mod:`~refimpl.testing._trace_jsonl` and :mod:`~refimpl.testing._trace_parquet`, what they share
in :mod:`~refimpl.testing._trace_arrow` (re-exported here).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from refimpl.testing._trace_arrow import _SUFFIXES as _SUFFIXES
from refimpl.testing._trace_arrow import (
    ACCEPTED,
    FORMATS,
    Chunk,
    ListColumn,
    TraceError,
    arrow_lists,
    detect_format,
    exact_array,
    excerpt,
    float64,
    require_file,
    sniff_format,
    to_numpy,
)
from refimpl.testing._trace_csv import _csv_blocks as _csv_blocks
from refimpl.testing._trace_csv import _csv_chunks
from refimpl.testing._trace_csv import _csv_list_column as _csv_list_column
from refimpl.testing._trace_csv import _csv_row_lines as _csv_row_lines
from refimpl.testing._trace_jsonl import _jsonl_chunks
from refimpl.testing._trace_parquet import (
    _dataset_chunks,
    _parquet_chunks,
    dataset_columns,
    dataset_files,
    last_value,
    parquet_rows,
    partition_chunks,
)

__all__ = [
    "ACCEPTED",
    "FORMATS",
    "Chunk",
    "ListColumn",
    "TraceError",
    "arrow_lists",
    "dataset_columns",
    "dataset_files",
    "detect_format",
    "exact_array",
    "excerpt",
    "float64",
    "last_value",
    "parquet_rows",
    "partition_chunks",
    "read_chunks",
    "require_file",
    "sniff_format",
    "to_numpy",
]


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
    require_file(path)
    if fmt == "csv":
        return _csv_chunks(path, numeric, lists, chunk_rows, on_progress, exact)
    if fmt == "jsonl":
        return _jsonl_chunks(path, numeric, lists, chunk_rows, on_progress, exact)
    return _parquet_chunks(path, numeric, lists, chunk_rows, on_progress, exact)
