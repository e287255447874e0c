"""A partitioned Parquet dataset checked on Dask: the same verdict and report as on one machine.

The dataset is a directory of Parquet files in hive-style partitions (``day=0/part-0.parquet``)
with a ``_SUCCESS`` marker; it is checked locally, on a two-process Dask ``LocalCluster``, and as
the one file that holds the same rows: the three reports agree except for the trace's path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from refimpl.cli import main
from refimpl.testing._trace_compare import _Tally
from refimpl.testing._trace_run import merge

ROWS = (40, 1, 25)  # rows per file: a file of one row, row groups of 8


def tis_table(rng: np.random.Generator, n: int) -> pa.Table:
    lb = -rng.exponential(1.0, n)
    lt = lb + rng.normal(0.0, 0.3, n)
    w = np.minimum(np.exp(np.minimum(lt - lb, np.log(2.0))), 2.0)
    w[rng.random(n) < 0.15] *= 1.1  # planted errors in every file
    return pa.table({"logp_target": lt, "logp_behavior": lb, "weight": w})


@pytest.fixture
def dataset(tmp_path: Path) -> tuple[Path, Path]:
    rng = np.random.default_rng(3)
    root = tmp_path / "trace"
    tables = []
    for day, n in enumerate(ROWS):
        (root / f"day={day}").mkdir(parents=True)
        table = tis_table(rng, n)
        pq.write_table(table, root / f"day={day}" / "part-0.parquet", row_group_size=8)
        tables.append(table)
    (root / "_SUCCESS").write_text("")
    whole = tmp_path / "whole.parquet"
    pq.write_table(pa.concat_tables(tables), whole)
    return root, whole


def report_of(trace: Path, out: Path, *extra: str) -> dict[str, Any]:
    argv = ["check", str(trace), "--spec", "tis", "--param", "cap=2", "--no-progress"]
    code = main([*argv, "--max-show", "5", "--chunk-rows", "7", "--report", str(out), *extra])
    got: dict[str, Any] = json.loads(out.read_text())
    assert got["exit_code"] == code
    del got["trace"]
    return got


def test_a_dataset_on_dask_gives_the_local_verdict_and_report(
    dataset: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, whole = dataset
    local = report_of(root, tmp_path / "local.json")
    on_dask = report_of(root, tmp_path / "dask.json", "--dask", "--workers", "2")
    one_file = report_of(whole, tmp_path / "one.json")
    capsys.readouterr()
    assert local["status"] == "mismatch"
    assert local["rows"] == sum(ROWS)
    assert len(local["first_mismatches"]) == 5
    assert on_dask == local
    assert one_file == local


def test_the_merge_keeps_the_first_rows_in_order_and_the_largest_error() -> None:
    def tally(rows: int, bad: list[int], err: float) -> _Tally:
        return _Tally(rows, len(bad), err, [{"row": r} for r in bad])

    got = merge([tally(3, [1, 2], 0.5), tally(2, [], 0.0), tally(4, [5, 6, 8], 2.0)], 4)
    assert (got.rows, got.mismatches, got.max_abs_error) == (9, 5, 2.0)
    assert [r["row"] for r in got.shown] == [1, 2, 5, 6]


def test_dask_refuses_a_text_trace_and_a_spec_that_groups_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text("logp_target,logp_behavior,weight\n0,0,1\n")
    argv = ["check", str(csv), "--spec", "tis", "--param", "cap=2", "--no-progress", "--dask"]
    assert main(argv) == 2
    assert (
        "--dask checks a Parquet file or a partitioned Parquet dataset" in capsys.readouterr().err
    )
    loss = tmp_path / "l.parquet"
    pq.write_table(
        pa.table(
            {"step": [0], "logp": [[0.0]], "logp_old": [[0.0]], "advantage": [1.0], "loss": [0.0]}
        ),
        loss,
    )
    params = ["--param", "surrogate=ppo_clip", "--param", "aggregation=token_mean"]
    assert main(["check", str(loss), "--spec", "policy_loss", *params, "--dask"]) == 2
    assert "checked on one machine: drop --dask" in capsys.readouterr().err


def test_a_directory_without_data_files_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "_SUCCESS").write_text("")
    argv = ["check", str(tmp_path / "empty"), "--spec", "tis", "--param", "cap=2"]
    assert main([*argv, "--no-progress"]) == 2
    assert "is a directory with no data files" in capsys.readouterr().err


def test_an_unusable_row_on_dask_is_the_local_one_line_error(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "trace"
    for part, lt in (("a", [0.0, -1.0]), ("b", [0.0, float("nan")])):
        (root / part).mkdir(parents=True)
        table = pa.table({"logp_target": lt, "logp_behavior": [0.0, -1.0], "weight": [1.0, 1.0]})
        pq.write_table(table, root / part / "p.parquet")
    argv = ["check", str(root), "--spec", "tis", "--param", "cap=2", "--no-progress"]
    assert main(argv) == 2
    local = capfd.readouterr().err
    assert main([*argv, "--dask", "--workers", "1"]) == 2
    on_dask = capfd.readouterr().err
    assert local.startswith("refimpl check: error: row 3: the inputs")
    assert on_dask == local
