"""The Parquet reader of ``refimpl check``: a file by row groups, a dataset file after file.

A file is opened without pre-buffering (pyarrow then reads the column chunks of one row group at a
time, not the whole file) and read in batches of about ``--chunk-rows`` values per column. A
directory is a partitioned dataset: its files in path order, rows numbered across them. In a
hive-style dataset the directories ``key=value`` on a file's path are columns of its rows (the
value a number, the same in every row of the file), as Spark, pyarrow and polars read them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np
from numpy.typing import NDArray

from refimpl.testing._trace_arrow import (
    Chunk,
    TraceError,
    _duplicates,
    _exact_text,
    _missing,
    arrow_lists,
    exact_array,
    float64,
    to_numpy,
)


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


def hive_keys(root: Path, file: Path) -> dict[str, str]:
    """The partition keys of a file of a dataset: each ``key=value`` directory on its path below
    ``root`` (the value unescaped as hive writes it: ``%3D`` is ``=``)."""
    if file == root:
        return {}
    out: dict[str, str] = {}
    for part in file.relative_to(root).parts[:-1]:
        key, sep, value = part.partition("=")
        if sep and key:
            out[unquote(key)] = unquote(value)
    return out


def dataset_columns(path: Path) -> tuple[list[str], dict[str, str]]:
    """The column names of a Parquet file or dataset (the first file's schema) and the partition
    keys on that file's path; ``([], {})`` when unreadable (the reader names the problem)."""
    import pyarrow.parquet as pq

    try:
        file = dataset_files(path)[0] if path.is_dir() else path
        names: list[str] = pq.ParquetFile(file).schema_arrow.names
    except Exception:
        return [], {}
    return names, hive_keys(path, file) if path.is_dir() else {}


def last_value(root: Path, file: Path, column: str) -> float | None:
    """The value of ``column`` in the last row of a file of a dataset (a partition key's, or
    read from its last row group alone); ``None`` when the file cannot say (its reader will)."""
    import pyarrow.parquet as pq

    keys = hive_keys(root, file)
    try:
        if column in keys:
            return float(keys[column])
        meta = pq.ParquetFile(file).metadata
        groups = [g for g in range(meta.num_row_groups) if meta.row_group(g).num_rows]
        if not groups:
            return None
        col = pq.ParquetFile(file).read_row_group(groups[-1], columns=[column]).column(0)
        value = col[len(col) - 1].as_py()
        return None if value is None else float(value)
    except Exception:
        return None


def _key_value(file: Path, key: str, text: str, exact: bool) -> Any:
    """The number a partition directory ``key=text`` holds."""
    try:
        value = _exact_text(text) if exact else float(text)
    except ValueError:
        raise TraceError(
            f"{str(file)!r}: the partition directory {key}={text} on its path holds "
            f"{text!r}, not a number. Name the partitions by numbers (e.g. {key}=3)."
        ) from None
    return value


def _key_column(value: Any, rows: int) -> NDArray[Any]:
    """A partition key's value in every row of a batch (int64 when it fits, else exact)."""
    if isinstance(value, int) and -(2**63) <= value < 2**63:
        return np.full(rows, value, dtype=np.int64)
    if isinstance(value, int):
        return exact_array([value] * rows)
    return np.full(rows, value, dtype=np.float64)


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
    keys = hive_keys(root, file)
    try:
        for chunk in _parquet_chunks(file, numeric, lists, chunk_rows, lambda _: None, exact, keys):
            chunk.row_start += row_start
            yield chunk
    except TraceError as exc:
        name = str(file.relative_to(root))
        raise TraceError(str(exc) if name in str(exc) else f"{name}: {exc}") from None


def _read_keys(
    path: Path,
    keys: dict[str, str],
    numeric: Sequence[str],
    lists: Sequence[str],
    names: Sequence[str],
    exact: bool,
) -> dict[str, Any]:
    """The columns read from the partition keys of the file's path (those not in the file)."""
    for key in keys:
        if key in names and key in [*numeric, *lists]:
            raise TraceError(
                f"{str(path)!r} has a column {key!r} and its path a partition directory "
                f"{key}={keys[key]}: the column is named twice, and which one a check reads is a "
                "guess. Drop the column from the files, or name the partitions by another key."
            )
        if key in lists:
            raise TraceError(
                f"{key!r} is a partition directory ({key}={keys[key]}) on the path of "
                f"{str(path)!r}: one number per file, not a list per row. Log {key!r} as a "
                "list column in the files."
            )
    return {k: _key_value(path, k, keys[k], exact) for k in numeric if k in keys}


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

    # Decoded on this thread: the check runs on the other core meanwhile, and pyarrow's own
    # threads only competed with it (a 10^7-row check: 0.33-0.35 s instead of 0.36-0.40, and a
    # peak RSS 30-40 MiB lower).
    batches = file.iter_batches(batch_size=chunk_rows, columns=columns, use_threads=False)
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
    keys: dict[str, str] | None = None,
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
    constants = _read_keys(path, keys or {}, numeric, lists, schema.names, exact)
    _missing(path, [*numeric, *lists], [*schema.names, *constants])
    order = [*numeric, *lists]  # the chunk's columns in the order asked, keys included
    numeric = [n for n in numeric if n not in constants]
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
        columns: dict[str, Any] = {k: _key_column(v, batch.num_rows) for k, v in constants.items()}
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
        yield Chunk({n: columns[n] for n in order}, row, None)
        row += batch.num_rows
        on_progress(row)
