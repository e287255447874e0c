"""A partitioned Parquet dataset checked on Dask: the same verdict and report as on one machine.

The dataset is a directory of Parquet files in hive-style partitions (``day=0/part-0.parquet``)
with a ``_SUCCESS`` marker; it is checked locally, on a two-process Dask ``LocalCluster``, and as
the one file that holds the same rows: the three reports agree except for the trace's path. The
same holds for a partition key the spec reads (``step=3/``: the step of the file's rows) and for
``policy_loss``, whose steps may run across the files.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_check_cli_losses import Step, columns, make_steps, padded_mean, ppo_loss

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


def test_dask_refuses_a_text_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text("logp_target,logp_behavior,weight\n0,0,1\n")
    argv = ["check", str(csv), "--spec", "tis", "--param", "cap=2", "--no-progress", "--dask"]
    assert main(argv) == 2
    assert (
        "--dask checks a Parquet file or a partitioned Parquet dataset" in capsys.readouterr().err
    )


# --- partition keys, and a spec that groups rows into steps ----------------------------------


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    """One two-process Dask cluster for the checks below (``--scheduler``)."""
    import distributed

    with distributed.LocalCluster(  # type: ignore[no-untyped-call]
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        silence_logs=logging.CRITICAL,
    ) as cluster:
        yield str(cluster.scheduler_address)


def three_ways(
    root: Path, whole: Path, tmp: Path, scheduler: str, *argv: str
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], list[int]]:
    """The reports of the dataset checked locally and on Dask, and of the one file; and each
    run's exit code."""
    reports: list[dict[str, Any]] = []
    codes: list[int] = []
    for trace, extra in ((root, ()), (root, ("--scheduler", scheduler)), (whole, ())):
        out = tmp / f"r{len(reports)}.json"
        code = main(["check", str(trace), *argv, "--no-progress", "--report", str(out), *extra])
        got: dict[str, Any] = json.loads(out.read_text())
        assert got.pop("exit_code") == code
        reports.append({k: v for k, v in got.items() if k != "trace"})
        codes.append(code)
    return reports[0], reports[1], reports[2], codes


def loss_table(steps: list[Step], losses: list[float]) -> pa.Table:
    return pa.table(columns(steps, losses))


LOSS = [
    "--spec",
    "policy_loss",
    "--param",
    "surrogate=ppo_clip",
    "--param",
    "aggregation=token_mean",
]


def test_a_partition_key_is_a_column_locally_and_on_dask(tmp_path: Path, scheduler: str) -> None:
    """``step=k/`` directories hold the step of their rows: the files need no step column."""
    steps = make_steps(n=4)
    losses = [ppo_loss(s) for s in steps]
    losses[2] = padded_mean(steps[2])
    table = loss_table(steps, losses)
    root, first = tmp_path / "trace", 0
    for k, s in enumerate(steps):
        (root / f"step={k}").mkdir(parents=True)
        part = table.slice(first, s.rows).drop_columns(["step"])
        pq.write_table(part, root / f"step={k}" / "part-0.parquet", row_group_size=2)
        first += s.rows
    whole = tmp_path / "whole.parquet"
    pq.write_table(table, whole)
    local, on_dask, one_file, codes = three_ways(root, whole, tmp_path, scheduler, *LOSS)
    assert codes == [1, 1, 1]
    assert local["mismatches"] == 1
    assert local["rows"] == 4
    assert on_dask == local == one_file


def test_steps_that_run_across_files_give_the_local_report_on_dask(
    tmp_path: Path, scheduler: str
) -> None:
    """Files cut inside steps (and a file of one row inside a step): each step is checked once,
    by the task of the file it begins in, and the units are numbered as on one machine."""
    steps = make_steps(n=5)
    losses = [ppo_loss(s) for s in steps]
    losses[1] = padded_mean(steps[1])
    losses[4] = padded_mean(steps[4])
    table = loss_table(steps, losses)
    cuts = [0, 4, 5, 6, 13, table.num_rows]
    root = tmp_path / "trace"
    for j, (a, b) in enumerate(itertools.pairwise(cuts)):
        (root / f"part={j}").mkdir(parents=True)
        pq.write_table(table.slice(a, b - a), root / f"part={j}" / "p.parquet", row_group_size=3)
    whole = tmp_path / "whole.parquet"
    pq.write_table(table, whole)
    argv = [*LOSS, "--chunk-rows", "2", "--max-show", "5"]
    local, on_dask, one_file, codes = three_ways(root, whole, tmp_path, scheduler, *argv)
    assert codes == [1, 1, 1]
    assert [r["row"] for r in local["first_mismatches"]] == [1, 4]
    assert on_dask == local == one_file


def test_a_step_in_two_files_is_refused_on_dask_as_locally(tmp_path: Path, scheduler: str) -> None:
    steps = make_steps(n=3)
    table = loss_table(steps, [ppo_loss(s) for s in steps])
    root = tmp_path / "trace"
    rows = [steps[0].rows, steps[1].rows, steps[2].rows]
    order = [(0, 0, rows[0]), (1, rows[0], rows[1]), (2, 0, 1)]  # step 0's first row again
    for j, (_, a, n) in enumerate(order):
        (root / f"part={j}").mkdir(parents=True)
        pq.write_table(table.slice(a, n), root / f"part={j}" / "p.parquet")
    local, on_dask, _, codes = three_ways(root, root, tmp_path, scheduler, *LOSS)
    assert codes[:2] == [2, 2]
    assert "step 0 appears again after other steps" in local["error"]
    assert on_dask == local


def test_a_partition_key_that_is_not_a_number_or_is_also_a_column_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = pa.table({"weight": [1.0, 0.0]})
    (tmp_path / "a" / "staleness=two").mkdir(parents=True)
    pq.write_table(table, tmp_path / "a" / "staleness=two" / "p.parquet")
    argv = ["--spec", "staleness_mask", "--param", "eta=1", "--no-progress"]
    assert main(["check", str(tmp_path / "a"), *argv]) == 2
    assert "partition directory staleness=two on its path holds 'two', not a number" in (
        capsys.readouterr().err
    )
    (tmp_path / "b" / "staleness=1").mkdir(parents=True)
    pq.write_table(
        table.append_column("staleness", pa.array([0, 1])),
        tmp_path / "b" / "staleness=1" / "p.parquet",
    )
    assert main(["check", str(tmp_path / "b"), *argv]) == 2
    assert "the column is named twice" in capsys.readouterr().err
    (tmp_path / "c" / "staleness=3").mkdir(parents=True)
    pq.write_table(pa.table({"weight": [0.0, 0.0]}), tmp_path / "c" / "staleness=3" / "p.parquet")
    assert main(["check", str(tmp_path / "c"), *argv]) == 0


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
