"""The columnar trace readers: list columns without a Python object per row, tables that lie.

A trace is read in chunks through pyarrow's readers; list columns stay Arrow's flat values and
offsets (:class:`ListColumn`). A table whose columns are ambiguous (a name twice, a column mapped
twice) or whose values are not what the spec reads is refused with exit status 2 and a message
that names the column and quotes at most a short excerpt of the value.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st

from refimpl.cli import main
from refimpl.testing import _traces
from refimpl.testing._traces import ListColumn, _csv_list_column, read_chunks


def check(path: Path, spec: str, *extra: str) -> int:
    return main(["check", str(path), "--spec", spec, "--no-progress", *extra])


# --- ListColumn -------------------------------------------------------------------------------


def test_a_list_column_reads_like_a_list_of_arrays() -> None:
    rows = [np.array([1.0, 2.0]), np.array([]), np.array([3.0, 4.0, 5.0])]
    col = ListColumn.from_rows(rows)
    assert len(col) == 3
    assert [r.tolist() for r in col] == [[1.0, 2.0], [], [3.0, 4.0, 5.0]]
    assert col[2].tolist() == [3.0, 4.0, 5.0]
    assert col[-1].tolist() == [3.0, 4.0, 5.0]
    part = col[1:3]
    assert isinstance(part, ListColumn)
    assert part.offsets.tolist() == [0, 0, 3]
    assert part.values.tolist() == [3.0, 4.0, 5.0]
    assert col.sizes().tolist() == [2, 0, 3]
    assert [col.row_of(j) for j in range(5)] == [0, 0, 2, 2, 2]


def test_python_integers_beyond_int64_stay_exact() -> None:
    col = ListColumn.from_rows([np.array([2**70, 1], dtype=object)], dtype=object)
    assert col.values.dtype == object
    assert col[0].tolist() == [2**70, 1]
    small = ListColumn.from_rows([np.array([3, 1], dtype=object)], dtype=object)
    assert small.values.dtype == np.int64


# --- CSV list fields --------------------------------------------------------------------------


def per_row(texts: list[str]) -> list[list[float]]:
    """The per-row parser the columnar one replaced (the definition of a CSV list field)."""
    out = []
    for text in texts:
        parts = [p for p in re.split(r"[\s,;]+", text.strip().strip("[]").strip()) if p]
        out.append([float(p) for p in parts])
    return out


def columnar(texts: list[str]) -> list[list[float]]:
    col = _csv_list_column(pa.array(texts), "x", np.arange(len(texts)), False)
    return [r.tolist() for r in col]


def comma_only(texts: list[str]) -> list[list[float]]:
    """Wrong: split on commas only (``3 3 4`` and ``3;4`` are lists too)."""
    out = []
    for text in texts:
        row = []
        for part in text.strip().strip("[]").split(","):
            if part.strip():
                try:
                    row.append(float(part))
                except ValueError:  # "3 4" is not one number
                    row.append(math.nan)
        out.append(row)
    return out


NUMBER = st.floats(allow_nan=False, width=64).map(repr) | st.integers(-(10**6), 10**6).map(str)
SEPARATOR = st.sampled_from([",", ", ", " ", ";", "\t", " ,  "])


@st.composite
def list_field(draw: st.DrawFn) -> str:
    numbers = draw(st.lists(NUMBER, max_size=6))
    seps = [draw(SEPARATOR) for _ in numbers]
    body = "".join(n + s for n, s in zip(numbers, seps, strict=True))
    body = body[: -len(seps[-1])] if seps else body
    return draw(st.sampled_from(["{}", "[{}]", " [{}] ", "{} "])).format(body)


def parses_like_the_per_row_definition(parse: Any) -> Any:
    @given(st.lists(list_field(), min_size=1, max_size=8))
    def prop(texts: list[str]) -> None:
        assert parse(texts) == per_row(texts)

    return prop


def test_csv_list_fields_parse_as_the_per_row_definition() -> None:
    run_property(parses_like_the_per_row_definition(columnar))


def test_the_list_property_rejects_a_comma_only_split() -> None:
    rejects(parses_like_the_per_row_definition(comma_only))


# --- tables that lie --------------------------------------------------------------------------


def test_a_csv_header_naming_a_column_twice_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("staleness,weight,weight\n0,1,0\n")
    assert check(trace, "staleness_mask", "--param", "eta=1") == 2
    err = capsys.readouterr().err
    assert "the CSV header names the column 'weight' twice" in err


def test_a_jsonl_object_naming_a_key_twice_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"staleness": 0, "weight": 1}\n{"staleness": 0, "weight": 1, "weight": 0}\n')
    assert check(trace, "staleness_mask", "--param", "eta=1") == 2
    err = capsys.readouterr().err
    assert "line 2: the key 'weight' appears twice" in err


def test_a_parquet_schema_naming_a_column_twice_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.parquet"
    table = pa.Table.from_arrays(
        [pa.array([0]), pa.array([1.0]), pa.array([0.0])], names=["staleness", "weight", "weight"]
    )
    pq.write_table(table, trace)
    assert check(trace, "staleness_mask", "--param", "eta=1") == 2
    assert "the Parquet schema names the column 'weight' twice" in capsys.readouterr().err


def test_one_trace_column_mapped_to_two_spec_columns_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("lp,weight\n0,1\n")
    extra = ["--column", "logp_target=lp", "--column", "logp_behavior=lp", "--param", "cap=2"]
    assert check(trace, "tis", *extra) == 2
    err = capsys.readouterr().err
    assert "--column logp_target=lp and --column logp_behavior=lp read one trace column" in err


def test_a_header_only_trace_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("staleness,weight\n")
    assert check(trace, "staleness_mask", "--param", "eta=1") == 2
    assert "has no rows" in capsys.readouterr().err


def test_a_column_of_mixed_types_names_its_line_and_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"staleness": 0, "weight": 1}\n{"staleness": "one", "weight": 1}\n')
    assert check(trace, "staleness_mask", "--param", "eta=1") == 2
    assert "line 2: 'staleness' is 'one' (str), not a number" in capsys.readouterr().err


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_an_error_quotes_a_short_excerpt_of_a_long_value(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junk = "x" * 100_000
    trace = tmp_path / f"t.{fmt}"
    if fmt == "csv":
        trace.write_text(f"logp_target,logp_behavior,weight\n1 2,{junk},1\n")
    else:
        trace.write_text(
            json.dumps({"logp_target": [1], "logp_behavior": junk, "weight": 1}) + "\n"
        )
    assert check(trace, "tis_sequence", "--param", "cap=2") == 2
    err = capsys.readouterr().err
    assert "'logp_behavior'" in err
    assert "xxxx" in err
    assert len(err) < 400


# --- Parquet: by row group, never the whole file -----------------------------------------------


def test_parquet_is_opened_without_pre_buffering_and_read_in_bounded_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = tmp_path / "t.parquet"
    n = 1000
    pq.write_table(
        pa.table({"staleness": np.arange(n) % 4, "weight": np.ones(n)}), trace, row_group_size=128
    )
    opened: list[dict[str, Any]] = []
    real = pq.ParquetFile

    def spy(*args: Any, **kwargs: Any) -> Any:
        opened.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(pq, "ParquetFile", spy)
    chunks = list(
        read_chunks(
            trace,
            "parquet",
            ["staleness", "weight"],
            [],
            chunk_rows=100,
            on_progress=lambda _: None,
        )
    )
    assert opened
    assert all(kw.get("pre_buffer") is False for kw in opened)
    assert max(c.size for c in chunks) <= 100
    assert sum(c.size for c in chunks) == n
    assert [c.row_start for c in chunks] == list(np.cumsum([0] + [c.size for c in chunks[:-1]]))
    got = np.concatenate([c.columns["staleness"] for c in chunks])
    assert got.tolist() == (np.arange(n) % 4).tolist()


def test_the_numpy_view_of_an_arrow_column_needs_no_pandas() -> None:
    arr = pa.array([1.5, 2.5, 3.5]).slice(1)
    assert _traces.to_numpy(arr).tolist() == [2.5, 3.5]
    assert _traces.to_numpy(pa.array([True, False])).tolist() == [True, False]
    assert _traces.to_numpy(pa.array([1, None])).tolist()[0] == 1  # nulls: pyarrow's own path


def test_a_parquet_chunk_of_list_rows_holds_about_chunk_rows_values(tmp_path: Path) -> None:
    """A row of token lists holds ~50 values: a chunk of 1000 rows would hold 50 000 of them."""
    trace = tmp_path / "t.parquet"
    rows = [[-0.5] * 50] * 400
    pq.write_table(
        pa.table({"logp_target": rows, "logp_behavior": rows, "weight": [1.0] * 400}), trace
    )
    chunks = list(
        read_chunks(
            trace,
            "parquet",
            ["weight"],
            ["logp_target", "logp_behavior"],
            chunk_rows=1000,
            on_progress=lambda _: None,
        )
    )
    assert sum(c.size for c in chunks) == 400
    assert max(c.columns["logp_target"].values.size for c in chunks) <= 1000
