"""The Dask engine on a real ``dask.distributed`` cluster (processes, loopback), started by the tests.

The cluster is shared by the module's tests (starting one takes seconds); the test that kills a
worker runs last. Clusters and clients are closed explicitly, so no resource warnings are left.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask
import pyarrow as pa
import pytest
from distributed import LocalCluster

from refimpl import sweep
from refimpl.cli import main

_HERE = __name__

# busy as "module:function", which parse_grid does not check: the cells with draws = 0 run and fail.
BUSY = {
    "sweep": {"kind": "refimpl.sweep.kinds:busy", "replicates": 3, "seed": 5},
    "axes": {"draws": [10, 2000, 0], "scale": {"start": 0.5, "stop": 1.5, "num": 3}},
}


def recorded(params: dict[str, Any], seed: int) -> dict[str, float]:
    """Appends one line per execution to ``params["log"]``; sleeps or kills its process on demand."""
    with open(params["log"], "a") as fh:
        fh.write(json.dumps({"seed": seed, "pid": os.getpid()}) + "\n")
    time.sleep(params.get("sleep", 0.0))
    if params.get("die_at") == params["x"]:
        os._exit(3)
    return {"twice_x": 2.0 * params["x"]}


def _executions(log: Path) -> list[int]:
    return (
        [json.loads(line)["seed"] for line in log.read_text().splitlines()] if log.exists() else []
    )


def _without_wall_time(table: pa.Table) -> pa.Table:
    return table.drop_columns(["wall_time_s"])


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    # For the last test: Dask fails a task whose worker died at once (no retries on other
    # workers), so the test sees the engine's own rerun of lost cells, with fewer worker deaths.
    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 0}),
        LocalCluster(  # type: ignore[no-untyped-call]
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",  # any free port: None would still bind 8787
        ) as cluster,
    ):
        yield str(cluster.scheduler_address)


def test_local_and_dask_engines_give_identical_tables(scheduler: str) -> None:
    reference = _without_wall_time(
        sweep.run(BUSY, engine="serial")
    )  # == local pool: see test_sweep_engine
    on_dask = sweep.run(BUSY, engine="dask", scheduler=scheduler)
    assert _without_wall_time(on_dask).equals(reference)
    assert on_dask.column("status").to_pylist().count("error") == 9  # draws = 0 fails


def test_a_dask_local_cluster_of_one_worker_gives_the_same_table() -> None:
    reference = _without_wall_time(sweep.run(BUSY, engine="serial"))
    assert _without_wall_time(sweep.run(BUSY, engine="dask", workers=1)).equals(reference)


def test_an_interrupted_dask_sweep_resumes_without_recomputing(
    scheduler: str, tmp_path: Path
) -> None:
    log, out = tmp_path / "log.jsonl", tmp_path / "r.parquet"
    grid = {
        "sweep": {"kind": f"{_HERE}:recorded", "replicates": 2},
        "fixed": {"log": str(log), "sleep": 0.02},
        "axes": {"x": list(range(6))},
    }
    seen: list[int] = []

    def interrupt_after_four(record: Any) -> None:
        seen.append(record["seed"])
        if len(seen) == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sweep.run(grid, out=out, engine="dask", scheduler=scheduler, on_record=interrupt_after_four)
    log.unlink()
    table = sweep.run(grid, out=out, engine="dask", scheduler=scheduler)
    assert not set(_executions(log)) & set(seen)
    assert table.num_rows == 12
    assert set(table.column("status").to_pylist()) == {"ok"}
    # The journal from Dask resumes on the local pool too: nothing is left to compute.
    log.unlink()
    again = sweep.run(grid, out=out, engine="local", workers=1)
    assert not log.exists()
    assert _without_wall_time(again).equals(_without_wall_time(table))


def test_the_command_runs_on_a_dask_scheduler(scheduler: str, tmp_path: Path) -> None:
    grid = tmp_path / "g.toml"
    grid.write_text('[sweep]\nkind = "busy"\n[axes]\ndraws = [10, 20, 30]\n')
    out = tmp_path / "r.parquet"
    args = ["sweep", str(grid), "--out", str(out), "--engine", "dask", "--quiet"]
    assert main([*args, "--scheduler", scheduler]) == 0
    reference = sweep.run(grid, engine="serial")
    import pyarrow.parquet as pq

    assert _without_wall_time(pq.read_table(out)).equals(_without_wall_time(reference))


def test_an_unreachable_scheduler_says_how_to_start_one() -> None:
    with (
        dask.config.set({"distributed.comm.timeouts.connect": "0.5s"}),
        pytest.raises(
            OSError, match=r"cannot reach the Dask scheduler at 'tcp://127.0.0.1:9'.*dask scheduler"
        ),
    ):
        sweep.run(BUSY, engine="dask", scheduler="tcp://127.0.0.1:9")


def test_a_cell_that_kills_its_dask_worker_is_recorded_and_the_rest_finish(
    scheduler: str, tmp_path: Path
) -> None:
    log = tmp_path / "log.jsonl"
    grid = {
        "sweep": {"kind": f"{_HERE}:recorded"},
        "fixed": {"log": str(log), "die_at": 3},
        "axes": {"x": [0, 1, 2, 3, 4, 5]},
    }
    rows = sweep.run(grid, engine="dask", scheduler=scheduler).to_pylist()
    assert [row["x"] for row in rows] == [0, 1, 2, 3, 4, 5]
    for row in rows:
        if row["x"] == 3:
            assert row["status"] == "error"
            assert "KilledWorker" in row["error"]
        else:
            assert row["status"] == "ok", row["error"]
            assert row["twice_x"] == 2.0 * row["x"]
