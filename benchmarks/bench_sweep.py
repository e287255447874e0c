"""Speedup of 2 workers over 1 on CPU-bound cells, measured in one run.

Runs the same grid of ``busy`` cells (standard normal draws: pure CPU, no I/O) on the local process
pool with 1 worker and with 2 workers, alternating the order over ``--repeats`` rounds, and prints
the median wall times and their ratio. With ``--dask`` it also measures a loopback Dask
``LocalCluster`` of 1 and 2 workers (cluster start-up excluded). The two tables must be identical
(apart from wall times): the benchmark checks that too.

    python benchmarks/bench_sweep.py [--cells 8] [--draws 20000000] [--repeats 3] [--dask]

The ideal ratio is 2 on an idle machine with 2 free cores; pool start-up (spawn) and other load on
the machine pull it down.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from refimpl import sweep


def _grid(cells: int, draws: int) -> dict[str, Any]:
    return {
        "sweep": {"kind": "busy", "replicates": cells, "seed": 0},
        "fixed": {"draws": draws},
    }


def _timed(fn: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=8)
    parser.add_argument("--draws", type=int, default=20_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dask", action="store_true", help="also measure a Dask LocalCluster")
    args = parser.parse_args()
    grid = _grid(args.cells, args.draws)
    print(
        f"{args.cells} busy cells of {args.draws} draws; {os.cpu_count()} CPUs; "
        f"load average {os.getloadavg()[0]:.1f}"
    )

    times: dict[int, list[float]] = {1: [], 2: []}
    tables = {}
    for r in range(args.repeats):
        for workers in (1, 2) if r % 2 == 0 else (2, 1):
            seconds, table = _timed(lambda w=workers: sweep.run(grid, engine="local", workers=w))
            times[workers].append(seconds)
            tables[workers] = table.drop_columns(["wall_time_s"])
    assert tables[1].equals(tables[2]), "1 and 2 workers gave different tables"
    cell_s = statistics.median(sweep.run(grid, engine="serial").column("wall_time_s").to_pylist())
    t1, t2 = statistics.median(times[1]), statistics.median(times[2])
    print(f"one cell (serial, median):   {cell_s:.3f} s")
    print(
        f"local pool, 1 worker:        {t1:.2f} s  (runs: {', '.join(f'{t:.2f}' for t in times[1])})"
    )
    print(
        f"local pool, 2 workers:       {t2:.2f} s  (runs: {', '.join(f'{t:.2f}' for t in times[2])})"
    )
    print(f"speedup of 2 workers over 1 (local pool): {t1 / t2:.2f}x")

    if args.dask:
        from distributed import LocalCluster

        dask_times = {}
        for workers in (1, 2):
            with LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                host="127.0.0.1",
                dashboard_address="127.0.0.1:0",
            ) as cluster:
                address = cluster.scheduler_address
                sweep.run(_grid(workers, 10), engine="dask", scheduler=address)  # warm the workers
                runs = [
                    _timed(lambda a=address: sweep.run(grid, engine="dask", scheduler=a))[0]
                    for _ in range(args.repeats)
                ]
            dask_times[workers] = statistics.median(runs)
            print(f"dask LocalCluster, {workers} worker(s): {dask_times[workers]:.2f} s")
        print(f"speedup of 2 workers over 1 (dask): {dask_times[1] / dask_times[2]:.2f}x")


if __name__ == "__main__":
    main()
