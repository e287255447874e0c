"""The sweep engines: identical results across engines and worker counts, journaling and resume,
failures, and the command line. (Dask has its own module, tests/test_sweep_dask.py.)"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _processes import default_sigint

from refimpl import sweep
from refimpl.cli import main
from refimpl.sweep import journal_path

# --- cell kinds used by the tests (top level: the pool's processes import them by name) --------

_HERE = __name__


def recorded(params: dict[str, Any], seed: int) -> dict[str, float]:
    """Appends one line per execution to ``params["log"]``, then sleeps, fails or dies on demand.

    With ``hold_at`` and ``release``, the cell whose ``x`` is ``hold_at`` waits until the file
    ``release`` exists: a sweep with one worker then stops making progress at a known cell.
    """
    with open(params["log"], "a") as fh:
        fh.write(json.dumps({"seed": seed, "pid": os.getpid()}) + "\n")
    time.sleep(params.get("sleep", 0.0))
    if params.get("hold_at") == params.get("x"):
        while not os.path.exists(params["release"]):
            time.sleep(0.01)
    if params.get("fail", False):
        raise RuntimeError(f"asked to fail (x={params.get('x')})")
    if params.get("die_at") == params.get("x"):
        os._exit(3)
    return {"x_plus_seed_mod_7": float(params.get("x", 0) + seed % 7)}


def _executions(log: Path) -> list[int]:
    if not log.exists():
        return []
    return [json.loads(line)["seed"] for line in log.read_text().splitlines()]


def _recorded_grid(log: Path, n: int = 6, replicates: int = 2, **fixed: Any) -> dict[str, Any]:
    return {
        "sweep": {"kind": f"{_HERE}:recorded", "replicates": replicates, "seed": 3},
        "fixed": {"log": str(log), **fixed},
        "axes": {"x": list(range(n))},
    }


def _gone_within(pids: set[int], *, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    alive = set(pids)
    while alive and time.monotonic() < deadline:
        for pid in list(alive):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                alive.discard(pid)
                continue
            stat = Path(f"/proc/{pid}/stat")  # an exited orphan not yet reaped is a zombie ("Z")
            with contextlib.suppress(OSError):
                if stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
                    alive.discard(pid)
        time.sleep(0.05)
    for pid in alive:  # do not leak them if the assertion is about to fail
        os.kill(pid, signal.SIGKILL)
    return not alive


def _without_wall_time(table: pa.Table) -> pa.Table:
    return table.drop_columns(["wall_time_s"])


# busy, named as "module:function": parse_grid checks the parameters of a built-in kind only, so
# the cells with draws = 0 run and fail (and the engines' handling of failures is seen).
BUSY = {
    "sweep": {"kind": "refimpl.sweep.kinds:busy", "replicates": 3, "seed": 11},
    "axes": {"draws": [10, 1000, 0], "label": ["a", "b"]},
}


# --- identical results ---------------------------------------------------------------------------


def test_serial_and_local_pools_of_any_size_give_identical_tables() -> None:
    reference = _without_wall_time(sweep.run(BUSY, engine="serial"))
    assert reference.num_rows == 18
    assert reference.column("status").to_pylist().count("error") == 6  # draws = 0 fails
    for workers in (1, 2):
        table = sweep.run(BUSY, engine="local", workers=workers)
        assert _without_wall_time(table).equals(reference), workers


def test_results_do_not_depend_on_the_order_cells_run_in() -> None:
    # The same cells listed in another order give the same rows (sorted back by parameters).
    turned = {**BUSY, "axes": {"label": ["b", "a"], "draws": [0, 1000, 10]}}
    a = _without_wall_time(sweep.run(BUSY, engine="serial")).sort_by("cell_id")
    b = _without_wall_time(sweep.run(turned, engine="serial")).sort_by("cell_id")
    assert a.select(b.column_names).equals(b)


def test_a_failing_cell_is_recorded_with_its_error_and_the_sweep_goes_on() -> None:
    table = sweep.run(BUSY, engine="serial").to_pylist()  # the same rows as a pool: see above
    bad = [row for row in table if row["draws"] == 0]
    good = [row for row in table if row["draws"] != 0]
    assert len(bad) == 6
    assert len(good) == 12
    assert all(row["status"] == "error" for row in bad)
    assert all(row["error"].startswith("InvalidArgument: draws must be >= 1") for row in bad)
    assert all(row["mean"] is None for row in bad)
    assert all(row["status"] == "ok" and row["error"] is None for row in good)
    assert all(row["wall_time_s"] >= 0 for row in table)


def test_a_cell_that_kills_its_worker_fails_alone(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    grid = _recorded_grid(log, n=4, replicates=1, die_at=1)
    table = sweep.run(grid, engine="local", workers=2).to_pylist()
    assert [row["x"] for row in table] == [0, 1, 2, 3]
    for row in table:
        if row["x"] == 1:
            assert row["status"] == "error"
            assert "BrokenProcessPool: the worker running this cell died" in row["error"]
        else:
            assert row["status"] == "ok", row["error"]


def test_metrics_listed_in_the_grid_are_kept_and_a_missing_one_is_a_grid_or_cell_error() -> None:
    keep = {**BUSY, "sweep": {**BUSY["sweep"], "metrics": ["mean_square"]}}
    table = sweep.run(keep, engine="serial")
    assert table.column_names[-1] == "mean_square"
    assert "mean" not in table.column_names
    wrong: dict[str, Any] = {
        "sweep": {"kind": "busy", "replicates": 3, "seed": 11, "metrics": ["median"]},
        "axes": {"draws": [10, 1000]},
    }
    with pytest.raises(sweep.GridError, match=r"sweep.metrics\[0\] = 'median' is not a metric"):
        sweep.run(wrong, engine="serial")
    # a kind named "module:function" declares nothing: its cells find the missing metric
    own = {**wrong, "sweep": {**wrong["sweep"], "kind": "refimpl.sweep.kinds:busy"}}
    rows = sweep.run(own, engine="serial").to_pylist()
    assert all(r["status"] == "error" for r in rows)
    assert "returned no metric 'median'; it returns mean, mean_square" in rows[0]["error"]


# --- journal and resume ------------------------------------------------------------------------


def test_an_interrupted_sweep_resumes_without_recomputing_finished_cells(tmp_path: Path) -> None:
    log, out = tmp_path / "log.jsonl", tmp_path / "r.parquet"
    grid = _recorded_grid(log, n=6, replicates=2, sleep=0.05)
    seen: list[int] = []

    def interrupt_after_five(record: Any) -> None:
        seen.append(record["seed"])
        if len(seen) == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sweep.run(grid, out=out, engine="local", workers=2, on_record=interrupt_after_five)
    journaled = pq.read_table(out).column("seed").to_pylist()
    first_run = _executions(log)
    # The cells running at the interrupt were finished and journaled, the queued ones cancelled:
    # every cell that ran is in the results, and not all cells ran.
    assert sorted(first_run) == sorted(journaled)
    assert set(seen) <= set(journaled)
    assert len(journaled) < 12
    log.unlink()

    table = sweep.run(grid, out=out, engine="serial")  # resuming is the same on every engine
    second_run = _executions(log)
    assert not set(second_run) & set(journaled), "a journaled cell was computed again"
    assert len(second_run) == len(set(second_run)) == 12 - len(journaled)
    assert table.num_rows == 12
    assert table.column("x_plus_seed_mod_7").to_pylist() == [
        float(x + s % 7) for x, s in zip(table.column("x").to_pylist(), table.column("seed").to_pylist(), strict=True)
    ]  # fmt: skip
    # A third run computes nothing (on any engine: skipping happens before dispatch).
    log.unlink()
    again = sweep.run(grid, out=out, engine="serial")
    assert not log.exists()
    assert _without_wall_time(again).equals(_without_wall_time(table))
    # The resumed table is the table of an uninterrupted run.
    reference = sweep.run(grid, engine="serial")
    assert _without_wall_time(table).equals(_without_wall_time(reference))


def test_a_killed_sweep_loses_only_the_running_cells(tmp_path: Path) -> None:
    """The process is SIGKILLed (no cleanup at all); the journal still has every finished cell.

    One worker runs the cells in grid order, and the first cell with x = 2 holds until a file
    appears, so once the journal shows the four cells before it and the held cell has started, no
    other cell can finish: what the kill leaves does not depend on how fast either process runs.
    """
    log, out, release = tmp_path / "log.jsonl", tmp_path / "r.parquet", tmp_path / "release"
    grid_file = tmp_path / "grid.toml"
    grid_file.write_text(
        f'[sweep]\nkind = "{_HERE}:recorded"\nreplicates = 2\n'
        f'[fixed]\nlog = "{log}"\nhold_at = 2\nrelease = "{release}"\n'
        "[axes]\nx = [0, 1, 2, 3, 4, 5]\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    command = [sys.executable, "-m", "refimpl", "sweep", str(grid_file), "--out", str(out)]
    proc = subprocess.Popen([*command, "--workers", "1", "--quiet"], env=env)
    journal = journal_path(out)
    try:
        # Generous: only a broken sweep takes long here (the wait ends as soon as the lines exist).
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if (
                journal.exists()
                and journal.read_text().count("\n") >= 5  # header + 4 cells
                and log.exists()
                and log.read_text().count("\n") >= 5  # and the held cell has started
            ):
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the sweep ended although one of its cells is held"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # The pool's process, orphaned by the kill, notices and exits on its own (its watchdog looks
    # every 0.5 s; the bound only has to be reached by a loaded machine, never by a broken one).
    workers = {json.loads(line)["pid"] for line in log.read_text().splitlines()}
    assert len(workers) == 1
    assert _gone_within(workers, seconds=60), "an orphaned pool process kept running"
    assert not out.exists(), "the parquet is written at the end; the journal is what survives"
    finished = [json.loads(line)["seed"] for line in journal.read_text().splitlines()[1:]]
    assert len(finished) == 4  # x = 0 and x = 1, two replicates each
    release.touch()
    log.unlink()
    table = sweep.run(grid_file, out=out, engine="serial")
    assert not set(_executions(log)) & set(finished)
    assert sorted(_executions(log) + finished) == sorted(table.column("seed").to_pylist())
    assert table.num_rows == 12
    assert set(table.column("status").to_pylist()) == {"ok"}


def test_a_torn_last_journal_line_is_dropped_and_the_rest_kept(tmp_path: Path) -> None:
    log, out = tmp_path / "log.jsonl", tmp_path / "r.parquet"
    grid = _recorded_grid(log, n=3, replicates=1)
    first = sweep.run(grid, out=out, engine="serial")
    lines = journal_path(out).read_text().splitlines(keepends=True)
    journal_path(out).write_text("".join(lines[:-1]) + lines[-1][:25])  # died mid-write
    log.unlink()
    table = sweep.run(grid, out=out, engine="serial")
    assert len(_executions(log)) == 1  # only the torn cell ran again
    assert _without_wall_time(table).equals(_without_wall_time(first))
    text = journal_path(out).read_text()
    assert text.endswith("\n")
    assert all(json.loads(line) for line in text.splitlines())


def test_a_results_file_of_another_grid_is_refused(tmp_path: Path) -> None:
    log, out = tmp_path / "log.jsonl", tmp_path / "r.parquet"
    sweep.run(_recorded_grid(log, n=2), out=out, engine="serial")
    changed = _recorded_grid(log, n=3)
    with pytest.raises(
        ValueError,
        match=r"r.parquet.journal.jsonl was written by a different grid .* Pass a new out path, or delete",
    ):
        sweep.run(changed, out=out, engine="serial")
    journal_path(out).unlink()  # only the parquet is left: its metadata holds the fingerprint
    with pytest.raises(ValueError, match=r"r.parquet was written by a different grid"):
        sweep.run(changed, out=out, engine="serial")
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"a": [1]}), other)
    with pytest.raises(ValueError, match=r"other.parquet exists and is not a refimpl sweep result"):
        sweep.run(changed, out=other, engine="serial")
    stray = tmp_path / "stray.parquet"
    journal_path(stray).write_text('{"hello": 1}\n')
    with pytest.raises(ValueError, match=r"is not a refimpl sweep journal"):
        sweep.run(changed, out=stray, engine="serial")


def test_a_lost_journal_is_rebuilt_from_the_results_file(tmp_path: Path) -> None:
    log, out = tmp_path / "log.jsonl", tmp_path / "r.parquet"
    grid = _recorded_grid(log, n=3, fail=False)
    first = sweep.run(grid, out=out, engine="serial")
    journal_path(out).unlink()
    log.unlink()
    again = sweep.run(grid, out=out, engine="serial")
    assert not log.exists()
    assert _without_wall_time(again).equals(_without_wall_time(first))
    assert journal_path(out).read_text().count("\n") == 1 + first.num_rows


def test_failed_cells_are_kept_unless_retry_failed(tmp_path: Path) -> None:
    log, out = tmp_path / "log.jsonl", tmp_path / "r.parquet"
    grid = _recorded_grid(log, n=2, replicates=1)
    grid["axes"]["fail"] = [False, True]
    table = sweep.run(grid, out=out, engine="serial")
    assert table.column("status").to_pylist() == ["ok", "error", "ok", "error"]
    assert (
        "RuntimeError: asked to fail (x=0) (at test_sweep_engine.py"
        in table.column("error")[1].as_py()
    )
    log.unlink()
    sweep.run(grid, out=out, engine="serial")
    assert not log.exists()
    sweep.run(grid, out=out, engine="serial", retry_failed=True)
    failing = {
        s
        for s, f in zip(
            table.column("seed").to_pylist(), table.column("fail").to_pylist(), strict=True
        )
        if f
    }
    assert set(_executions(log)) == failing


def test_progress_reports_done_failed_and_remaining(capsys: pytest.CaptureFixture[str]) -> None:
    sweep.run(BUSY, engine="serial", progress=True)
    err = capsys.readouterr().err
    assert "18/18" in err
    assert "failed=6 remaining=0" in err


# --- bad calls ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"engine": "gpu"}, r"engine must be one of local, dask, serial; got engine='gpu'"),
        (
            {"workers": 0},
            r"workers must be an integer in \[1, 1024\] \(processes to start\); got workers=0",
        ),
        ({"workers": True}, r"workers must be an integer in \[1, 1024\]"),
        ({"scheduler": "tcp://x:1"}, r"scheduler is only used with engine='dask'"),
    ],
)
def test_bad_run_arguments_say_how_to_fix_the_call(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        sweep.run(BUSY, **kwargs)


def test_a_grid_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(TypeError, match=r"grid must be a Grid, a table \(dict\) or the path"):
        sweep.run(3)  # type: ignore[arg-type]


def test_the_dask_engine_without_dask_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    out = tmp_path / "r.parquet"
    with pytest.raises(ImportError, match=r"pip install 'refimpl\[sweep\]'"):
        sweep.run(BUSY, engine="dask", out=out)
    assert not out.exists()
    assert not journal_path(out).exists()


# --- the command line --------------------------------------------------------------------------


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_the_command_writes_the_table_and_exits_1_when_cells_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kind = "refimpl.sweep.kinds:busy"  # not a built-in name: draws = 0 fails when it runs
    grid = _write(tmp_path / "g.toml", f'[sweep]\nkind = "{kind}"\n[axes]\ndraws = [10, 0]\n')
    out = tmp_path / "r.parquet"
    assert main(["sweep", str(grid), "--out", str(out), "--engine", "serial", "--quiet"]) == 1
    assert "2 of 2 cells" in capsys.readouterr().err
    table = pq.read_table(out)
    assert table.column("status").to_pylist() == ["ok", "error"]
    assert (
        table.schema.metadata[b"refimpl.sweep.fingerprint"]
        == sweep.load_grid(grid).fingerprint.encode()
    )
    ok = _write(tmp_path / "ok.toml", '[sweep]\nkind = "busy"\n[axes]\ndraws = [10, 20]\n')
    assert (
        main(
            [
                "sweep",
                str(ok),
                "--out",
                str(tmp_path / "ok.parquet"),
                "--engine",
                "serial",
                "--quiet",
            ]
        )
        == 0
    )


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--engine", "serial"], r"axes.draws\[1\] must have the type of axes.draws\[0\]"),
        (["--scheduler", "tcp://127.0.0.1:1"], r"--scheduler needs --engine dask"),
    ],
)
def test_the_command_exits_2_with_the_message_on_bad_input(
    args: list[str], match: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        '[sweep]\nkind = "busy"\n[axes]\ndraws = [10, "x"]\n'
        if "serial" in args
        else '[sweep]\nkind = "busy"\n'
    )
    grid = _write(tmp_path / "g.toml", text)
    assert main(["sweep", str(grid), "--out", str(tmp_path / "r.parquet"), *args]) == 2
    assert re.search(match, capsys.readouterr().err)


def test_the_command_reports_a_missing_grid_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sweep", str(tmp_path / "nope.toml"), "--out", str(tmp_path / "r.parquet")]) == 2
    assert "nope.toml" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "path"),
    [
        (
            '[sweep]\nkind = "simulate"\n[fixed]\nslotz = 4\nbatch = 2\nrollouts = 4\n'
            "[axes]\neta = [0, 1]\n",
            "fixed.slotz",
        ),
        (
            '[sweep]\nkind = "closed_form"\nmetrics = ["ratio", "tv"]\n'
            '[fixed]\nfunction = "length_bias"\nlaw = "expon"\nk = 1\n[axes]\nn = [2, 3]\n',
            "sweep.metrics[1]",
        ),
    ],
)
def test_the_command_exits_2_before_any_cell_runs_on_an_unknown_parameter_or_metric(
    text: str, path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grid = _write(tmp_path / "g.toml", text)
    out = tmp_path / "r.parquet"
    assert main(["sweep", str(grid), "--out", str(out), "--engine", "serial", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{path} " in err
    assert "is not a" in err
    assert not out.exists()
    assert not journal_path(out).exists()
    fixed = text.replace("slotz", "slots").replace('"tv"', '"total_variation"')
    _write(grid, fixed)
    assert main(["sweep", str(grid), "--out", str(out), "--engine", "serial", "--quiet"]) == 0
    assert pq.read_table(out).num_rows == 2


# --- Ctrl-C --------------------------------------------------------------------------------------

# On PYTHONPATH in the sweep's processes: a pool process (argv --multiprocessing-fork) that starts
# importing numpy, which it does while it unpickles its initializer, i.e. before _worker_init can
# ignore SIGINT, writes its pid to a file and waits for another file. The test thus knows that the
# process is inside its start-up when the Ctrl-C comes, whatever the load.
_HOLD_STARTING_WORKER = """
import os, sys, time

if "--multiprocessing-fork" in sys.argv and "REFIMPL_TEST_WORKER_READY" in os.environ:

    class _HoldNumpy:
        def find_spec(self, name, path=None, target=None):
            if name == "numpy":
                sys.meta_path.remove(self)
                ready = os.environ["REFIMPL_TEST_WORKER_READY"]
                with open(ready + ".tmp", "w") as fh:
                    fh.write(str(os.getpid()))
                os.replace(ready + ".tmp", ready)
                while not os.path.exists(os.environ["REFIMPL_TEST_WORKER_RELEASE"]):
                    time.sleep(0.01)
            return None

    sys.meta_path.insert(0, _HoldNumpy())
"""


def _wait_for(condition: Any, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 300  # a hang guard only: each wait ends when its event happens
    while not condition():
        assert proc.poll() is None, f"the sweep ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within 300 s"
        time.sleep(0.02)


@pytest.mark.parametrize("presses", [1, 2], ids=["ctrl-c", "ctrl-c-twice"])
@pytest.mark.parametrize("moment", ["worker-starting", "cell-running"])
def test_ctrl_c_at_any_moment_of_a_local_sweep_ends_in_one_line_with_exit_130(
    moment: str, presses: int, tmp_path: Path
) -> None:
    """SIGINT goes to the whole process group, as a terminal's Ctrl-C does, at a known moment.

    Once: the running cells end, are journaled and written, and the process exits 130 with the
    documented lines only. Twice: the running cells are abandoned and their processes end.
    """
    log, out, release = tmp_path / "log.jsonl", tmp_path / "r.parquet", tmp_path / "release"
    ready = tmp_path / "worker-ready"
    (tmp_path / "sitecustomize.py").write_text(_HOLD_STARTING_WORKER)
    grid_file = tmp_path / "grid.toml"
    hold = "hold_at = 0\n" if moment == "cell-running" else ""
    grid_file.write_text(
        f'[sweep]\nkind = "{_HERE}:recorded"\nreplicates = 2\n'
        f'[fixed]\nlog = "{log}"\nrelease = "{release}"\n{hold}'
        "[axes]\nx = [0, 1, 2]\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(Path(__file__).parent), *sys.path]),
    }
    if moment == "worker-starting":
        env.update(REFIMPL_TEST_WORKER_READY=str(ready), REFIMPL_TEST_WORKER_RELEASE=str(release))
    command = [sys.executable, "-m", "refimpl", "sweep", str(grid_file), "--out", str(out)]
    err_file = tmp_path / "stderr"
    with err_file.open("wb") as err_fh:
        proc = subprocess.Popen(
            [*command, "--workers", "1"],
            env=env,
            stderr=err_fh,
            start_new_session=True,
            preexec_fn=default_sigint,
        )
    try:
        if moment == "worker-starting":
            _wait_for(ready.exists, proc, "a pool process started")
            pids = {int(ready.read_text())}
        else:
            _wait_for(lambda: log.exists() and log.read_text().count("\n") >= 1, proc, "a cell")
            pids = {json.loads(line)["pid"] for line in log.read_text().splitlines()}
        os.killpg(proc.pid, signal.SIGINT)
        _wait_for(lambda: b"waiting for" in err_file.read_bytes(), proc, "the waiting line")
        if presses == 2:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            release.touch()
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    err = err_file.read_text()
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    assert "Error" not in err, err
    lines = [ln for ln in re.split(r"[\r\n]+", err) if ln.strip() and not ln.startswith("sweep:")]
    # Two cells are handed out (workers=1: one running, one queued to the pool). Whether the queued
    # one has reached the pool's call queue (and can no longer be cancelled) is up to the pool's
    # own thread, so the count is read from the line, not assumed.
    waiting = re.match(r"interrupted: waiting for (\d+) running cells? \(", lines[0])
    assert waiting is not None, err
    assert int(waiting.group(1)) in (1, 2), err
    assert lines[1:] == [
        f"refimpl sweep: interrupted. Finished cells are kept in {journal_path(out)} and {out}; "
        "rerun the same command to resume."
    ], err
    assert _gone_within(pids, seconds=60), "a pool process outlived the sweep"
    finished = [json.loads(line)["seed"] for line in journal_path(out).read_text().splitlines()[1:]]
    assert sorted(finished) == sorted(pq.read_table(out).column("seed").to_pylist())
    if presses == 1:  # the cells still running ran to the end and are kept; the rest never ran
        assert sorted(finished) == sorted(_executions(log))
        assert len(finished) == int(waiting.group(1))
    else:  # abandoned: nothing finished
        assert finished == []


@pytest.mark.parametrize(
    ("out", "args", "says"),
    [
        ("r.csv", [], ["--out", "r.csv", "must end in .parquet", "'.csv'", "r.parquet"]),
        ("r", [], ["--out", "must end in .parquet", "no suffix"]),
        ("missing/dir/r.parquet", [], ["--out", "the directory", "missing/dir", "does not exist"]),
        ("a-dir.parquet", [], ["--out", "is a directory"]),
        ("r.parquet", ["--workers", "0"], ["--workers must be in [1, 1024]", "got 0"]),
        (
            "r.parquet",
            ["--workers", str(2**63)],
            ["--workers must be in [1, 1024]", f"got {2**63}"],
        ),
    ],
)
def test_the_command_refuses_an_unusable_out_or_workers_before_any_cell_runs(
    out: str,
    args: list[str],
    says: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "a-dir.parquet").mkdir()
    grid = _write(tmp_path / "g.toml", '[sweep]\nkind = "busy"\n[axes]\ndraws = [10]\n')
    target = tmp_path / out
    assert main(["sweep", str(grid), "--out", str(target), "--quiet", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    for text in says:
        assert text in err, err
    assert not (tmp_path / "missing").exists(), "a directory was created"
    assert not target.is_file()
    assert not journal_path(target).exists()


def test_a_grid_value_its_kind_rejects_exits_2_before_any_cell_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grid = _write(
        tmp_path / "g.toml",
        '[sweep]\nkind = "simulate"\n[fixed]\nbatch = 2\nrollouts = 8\n[axes]\nslots = [8, -1]\n',
    )
    out = tmp_path / "r.parquet"
    assert main(["sweep", str(grid), "--out", str(out), "--engine", "serial", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err == f"refimpl sweep: {grid}: axes.slots[1] = -1: slots must be >= 1 (generation " \
        "slots); got slots=-1. Pass slots >= 1.\n"  # fmt: skip
    assert not out.exists()
    assert not journal_path(out).exists()


def test_the_command_names_a_missing_grid_file_and_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "nope.toml")
    assert main(["sweep", missing, "--out", str(tmp_path / "r.parquet")]) == 2
    assert capsys.readouterr().err == (
        f"refimpl sweep: GRID.toml {missing!r}: no such file. Pass the path of a grid file "
        "(TOML; see docs/howto/sweeps.md).\n"
    )
