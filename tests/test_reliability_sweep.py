"""Sweeps against hostile cells, hostile paths and hostile sizes.

- A cell that leaves by another door (``sys.exit``, its own ``KeyboardInterrupt``, another
  ``BaseException``, megabytes printed, a parameter changed in place) is that cell's own failure
  with a reproduction; the sweep runs every other cell and never ends with status 0. A Ctrl-C still
  stops it.
- An ``out`` (or its journal) that is the grid file, through any path or link, is refused before
  anything is written; the results file is replaced atomically.
- A grid of millions of cells is expanded lazily; a TOML nested thousands deep and a worker count
  of 2^63 are refused with a message.

Each property is also run against the wrong variant that the fix replaced, and must reject it.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import sys
import tracemalloc
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _wrong_variants import rejects

from refimpl import sweep
from refimpl.cli import main
from refimpl.errors import InvalidArgument
from refimpl.sweep import cells, engine, results
from refimpl.sweep import grid as grid_module
from refimpl.sweep.grid import Cell, Grid

_HERE = __name__


class _Custom(BaseException):
    """A BaseException that is not an Exception, as some libraries raise."""


class _ExitsWhenRead(float):
    """A metric whose conversion to float calls sys.exit: reading it runs the cell's code."""

    def __float__(self) -> float:
        sys.exit(4)


class _InterruptsWhenRead(dict[str, float]):
    """Metrics whose lookup raises KeyboardInterrupt (no Ctrl-C arrived)."""

    def __getitem__(self, key: str) -> float:
        raise KeyboardInterrupt


def hostile(params: dict[str, Any], seed: int) -> dict[str, float]:
    """A cell kind that leaves by the door its ``door`` parameter names."""
    door = params["door"]
    if door == "exit_when_read":
        return {"door_length": _ExitsWhenRead(1.0)}
    if door == "interrupt_when_read":
        return _InterruptsWhenRead(door_length=1.0)
    if door == "exit0":
        sys.exit(0)
    if door == "exit3":
        sys.exit(3)
    if door == "keyboard":
        raise KeyboardInterrupt
    if door == "custom":
        raise _Custom("a library's own BaseException")
    if door == "generator_exit":
        raise GeneratorExit
    if door == "print_mb":
        for _ in range(2048):
            print("x" * 1023)
    if door == "print_small":
        print("a short note")
    if door == "mutate_list":
        params["values"].append(99)
    if door == "mutate_key":
        params["added"] = 1
    if door == "ctrl_c":
        signal.raise_signal(signal.SIGINT)
    if door == "check_values" and params["values"] != [1, 2, 3]:
        raise AssertionError(f"this cell got values={params['values']}: an earlier cell leaked")
    return {"door_length": float(len(door))}


def fast(params: dict[str, Any], seed: int) -> dict[str, float]:
    return {"a_plus_b": float(params["a"] + params["b"])}


_FAILING = {
    "exit0": "called sys.exit(0)",
    "exit3": "called sys.exit(3)",
    "keyboard": "raised KeyboardInterrupt itself",
    "custom": "raised _Custom, a BaseException that is not an Exception",
    "generator_exit": "raised GeneratorExit",
    "print_mb": "printed 2097152 characters, more than the limit of 1048576",
    "mutate_list": "changed its parameter 'values' in place",
    "mutate_key": "changed its parameter 'added' in place",
    "exit_when_read": "called sys.exit(4)",
    "interrupt_when_read": "raised KeyboardInterrupt itself",
}
_PASSING = ("ok", "print_small", "check_values")


def _hostile_grid(doors: list[str]) -> dict[str, Any]:
    return {
        "sweep": {"kind": f"{_HERE}:hostile", "seed": 1},
        "fixed": {"values": [1, 2, 3]},
        "axes": {"door": doors},
    }


def check_every_door_is_the_cell_s_own_failure(engine_name: str) -> None:
    """The property: all cells have a row; the hostile ones fail with the reason and a reproduction."""
    doors = [*_FAILING, *_PASSING]
    table = sweep.run(_hostile_grid(doors), engine=engine_name, workers=1)
    rows = {r["door"]: r for r in table.to_pylist()}
    assert sorted(rows) == sorted(doors), "a cell has no row: the sweep ended early"
    for door, why in _FAILING.items():
        assert rows[door]["status"] == "error", (door, rows[door])
        assert why in rows[door]["error"], (door, rows[door]["error"])
        assert (
            "Reproduce: from refimpl.sweep import resolve_kind; resolve_kind("
            in rows[door]["error"]
        )
    for door in _PASSING:
        assert rows[door]["status"] == "ok", (door, rows[door]["error"])


@pytest.mark.parametrize("engine_name", ["serial", "local"])
def test_a_cell_that_leaves_by_another_door_fails_alone(
    engine_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    check_every_door_is_the_cell_s_own_failure(engine_name)
    out = capsys.readouterr().out
    if engine_name == "serial":  # a pool process writes to the inherited descriptor instead
        assert "a short note" in out, "a cell's short output is passed on"
    assert "x" * 1023 not in out, "megabytes of a cell's output reached the terminal"


def _execute_catching_exceptions_only(cell: Any) -> dict[str, Any]:
    """The wrong variant: the cell's code is called with ``except Exception`` only."""
    try:
        metrics = dict(sweep.resolve_kind(cell.kind)(dict(cell.params), cell.seed))
        status, error = "ok", None
    except Exception as exc:
        metrics, status, error = {}, "error", str(exc)
    return {
        "cell_id": cell.cell_id,
        "replicate": cell.replicate,
        "seed": cell.seed,
        "params": dict(cell.axes),
        "status": status,
        "error": error,
        "wall_time_s": 0.0,
        "metrics": metrics,
    }


def test_the_door_check_rejects_a_cell_runner_that_catches_exceptions_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(engine, "execute_cell", _execute_catching_exceptions_only)

    def check() -> None:
        try:
            check_every_door_is_the_cell_s_own_failure("serial")
        except (SystemExit, KeyboardInterrupt, _Custom, GeneratorExit) as exc:
            raise AssertionError(f"{type(exc).__name__} escaped the sweep") from None

    rejects(check)


def check_no_cell_sees_another_s_changes() -> None:
    table = sweep.run(_hostile_grid(["mutate_list", "check_values"]), engine="serial")
    status = dict(
        zip(table.column("door").to_pylist(), table.column("status").to_pylist(), strict=True)
    )
    assert status["check_values"] == "ok", "a cell's in-place change reached the next cell"
    assert status["mutate_list"] == "error"


def test_a_cell_s_in_place_change_never_reaches_the_next_cell() -> None:
    check_no_cell_sees_another_s_changes()


def test_the_leak_check_rejects_cells_that_share_their_parameters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the wrong variant: no deep copy (the cells share the grid's lists, as dict(params) did)
    monkeypatch.setattr(cells, "copy", types.SimpleNamespace(deepcopy=lambda x: x))
    rejects(check_no_cell_sees_another_s_changes)


def test_a_cell_calling_sys_exit_0_makes_the_command_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grid = tmp_path / "g.toml"
    grid.write_text(
        f'[sweep]\nkind = "{_HERE}:hostile"\n[fixed]\nvalues = [1, 2, 3]\n'
        '[axes]\ndoor = ["ok", "exit0", "print_small"]\n'
    )
    out = tmp_path / "r.parquet"
    code = main(["sweep", str(grid), "--out", str(out), "--engine", "serial", "--quiet"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "3 of 3 cells" in err
    assert "2 ok, 1 failed" in err
    assert pq.read_table(out).num_rows == 3


def check_ctrl_c_stops_a_serial_sweep() -> None:
    try:
        table = sweep.run(_hostile_grid(["ok", "ctrl_c", "print_small"]), engine="serial")
    except KeyboardInterrupt:
        return
    raise AssertionError(f"a Ctrl-C did not stop the sweep: {table.column('status').to_pylist()}")


@pytest.mark.usefixtures("python_ctrl_c")
def test_ctrl_c_still_stops_a_serial_sweep() -> None:
    check_ctrl_c_stops_a_serial_sweep()


@pytest.mark.usefixtures("python_ctrl_c")
def test_the_ctrl_c_check_rejects_a_handler_that_raises_a_plain_keyboard_interrupt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the wrong variant: the sweep's handler raises what a cell could raise itself
    monkeypatch.setattr(engine, "SweepInterrupt", KeyboardInterrupt)
    rejects(check_ctrl_c_stops_a_serial_sweep)


# --- outputs that name the grid --------------------------------------------------------------------

_GRID_TEXT = '[sweep]\nkind = "busy"\n[axes]\ndraws = [10, 20]\n'


def _links(tmp_path: Path) -> dict[str, tuple[Path, Path]]:
    """name -> (grid file, out) where writing out (or its journal) would destroy the grid."""
    grid = tmp_path / "g.parquet"  # a TOML grid whose name ends in .parquet: the same path works
    grid.write_text(_GRID_TEXT)
    (tmp_path / "link.parquet").symlink_to(grid)
    os.link(grid, tmp_path / "hard.parquet")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "r.parquet.journal.jsonl").symlink_to(grid)
    return {
        "same path": (grid, grid),
        "symlink": (grid, tmp_path / "link.parquet"),
        "hard link": (grid, tmp_path / "hard.parquet"),
        "journal is a link to the grid": (grid, tmp_path / "sub" / "r.parquet"),
    }


@pytest.mark.parametrize(
    "way", ["same path", "symlink", "hard link", "journal is a link to the grid"]
)
def test_an_out_that_names_the_grid_is_refused_before_anything_is_written(
    tmp_path: Path, way: str, capsys: pytest.CaptureFixture[str]
) -> None:
    grid, out = _links(tmp_path)[way]
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(ValueError, match=r"must not name an input") as info:
        sweep.run(str(grid), out=out, engine="serial")
    assert "nothing was written" in str(info.value)
    code = main(["sweep", str(grid), "--out", str(out), "--engine", "serial", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert "--out" in err
    assert "must not name an input" in err
    assert grid.read_text() == _GRID_TEXT, "the grid file was changed"
    assert sorted(p.name for p in tmp_path.rglob("*")) == before, "a file was written"


def _write_partially_then_fail(table: pa.Table, where: Any, **kwargs: Any) -> None:
    Path(where).write_bytes(b"PAR1 half a table")
    raise OSError(28, "No space left on device")


def check_a_failed_write_keeps_the_old_results(
    write: Callable[[pa.Table, Path], None], directory: Path
) -> None:
    out = directory / "r.parquet"
    out.write_bytes(b"the old results")
    with pytest.raises(OSError, match="No space"):
        write(pa.table({"a": [1]}), out)
    assert out.read_bytes() == b"the old results", "a failed write damaged the old results"
    assert sorted(p.name for p in directory.iterdir()) == ["r.parquet"], "a temporary file was left"


def _replace_without_cleanup(table: pa.Table, out: Path) -> None:
    """The wrong variant (the writer this replaced): a fixed temporary name, no cleanup."""
    tmp = out.with_name(out.name + ".tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, out)


_KIND_SOURCE = "def cell(params, seed):\n    return {'x': 1.0}\n"


def _kind_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> Path:
    """A ``module:function`` kind's source file, importable (not yet imported)."""
    source = tmp_path / f"{name}.py"
    source.write_text(_KIND_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return source


def check_an_out_naming_the_kind_s_source_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    source = _kind_module(tmp_path, monkeypatch, name)
    grid = {"sweep": {"kind": f"{name}:cell"}, "axes": {"a": [1, 2]}}
    (tmp_path / "link.parquet").symlink_to(source)
    for out in (source, tmp_path / "link.parquet"):
        message = ""
        try:
            sweep.run(grid, engine="serial", out=out)
        except InvalidArgument as exc:
            message = str(exc)
        assert "must not name an input" in message, f"out={out.name} was not refused: {message}"
        assert source.name in message, message
        assert source.read_text() == _KIND_SOURCE, f"out={out.name} overwrote the kind's source"
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "r.parquet.journal.jsonl").symlink_to(source)
    text = f'[sweep]\nkind = "{name}:cell"\n[axes]\na = [1, 2]\n'
    (tmp_path / "g.toml").write_text(text)
    code = main(["sweep", str(tmp_path / "g.toml"), "--out", str(tmp_path / "sub" / "r.parquet"),
                 "--engine", "serial", "--quiet"])  # fmt: skip
    assert code == 2, "the command wrote through a journal that is the kind's source"
    assert source.read_text() == _KIND_SOURCE, "the journal was appended to the kind's source"
    assert not (tmp_path / "sub" / "r.parquet").exists()


def test_an_out_or_journal_naming_a_module_kind_s_source_is_refused_before_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    check_an_out_naming_the_kind_s_source_is_refused(tmp_path, monkeypatch, "refimpl_kind_a")
    assert "refimpl_kind_a.py" in capsys.readouterr().err  # the message names the input


def test_the_kind_source_check_rejects_a_sweep_that_protects_only_the_grid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(results, "kind_source", lambda kind: None)  # the wrong variant
    rejects(
        check_an_out_naming_the_kind_s_source_is_refused, tmp_path, monkeypatch, "refimpl_kind_b"
    )


def test_a_failed_results_write_keeps_the_old_file_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pq, "write_table", _write_partially_then_fail)
    check_a_failed_write_keeps_the_old_results(results._write_parquet, tmp_path)
    (tmp_path / "wrong").mkdir()
    rejects(
        check_a_failed_write_keeps_the_old_results, _replace_without_cleanup, tmp_path / "wrong"
    )


@pytest.mark.parametrize(
    ("option", "said"),
    [
        ({"out": b"r.parquet"}, "out must be a path (str or pathlib.Path); got out=b'r.parquet'"),
        ({"out": "."}, "out must name a file (the results table), not a directory"),
        ({"out": "DIR"}, "out must name a file (the results table), not a directory"),
        ({"retry_failed": "no"}, "retry_failed must be True or False; got retry_failed='no'"),
        ({"progress": 1}, "progress must be True or False; got progress=1"),
        ({"on_record": "print"}, "on_record must be a function of one record, or None"),
    ],
    ids=["bytes_out", "dot_out", "directory_out", "retry_str", "progress_int", "on_record_str"],
)
def test_an_option_of_the_wrong_kind_is_refused_before_anything_runs(
    option: dict[str, Any], said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "DIR").mkdir()
    ran: list[Any] = []
    monkeypatch.setattr(engine, "execute_cell", lambda cell: ran.append(cell))
    with pytest.raises((ValueError, TypeError)) as info:
        sweep.run({"sweep": {"kind": "busy"}, "axes": {"draws": [10]}}, engine="serial", **option)
    assert said in str(info.value)
    assert ran == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["DIR"], "something was written"


_IMPORT_DOORS = {
    "exit0": ("import sys\nsys.exit(0)\n", "its module called sys.exit(0) while it was imported"),
    "own_base": (
        "class Stop(BaseException):\n    pass\nraise Stop('at import')\n",
        "its module raised Stop (at import) while it was imported",
    ),
    "flood": (
        "import os\nos.write(1, b'y' * (3 << 20))\n",
        "its module printed 3145728 characters while it was imported",
    ),
}


def check_a_kind_module_leaving_at_import_is_a_grid_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    for door, (code, said) in _IMPORT_DOORS.items():
        name = f"refimpl_import_{door}_{tmp_path.name[-12:].replace('-', '_')}"
        (tmp_path / f"{name}.py").write_text(code + "def cell(p, s):\n    return {'x': 1.0}\n")
        grid = tmp_path / f"{door}.toml"
        grid.write_text(f'[sweep]\nkind = "{name}:cell"\n[axes]\na = [1, 2]\n')
        out = tmp_path / f"{door}.parquet"
        try:
            status = main(["sweep", str(grid), "--out", str(out), "--engine", "serial", "--quiet"])
        except BaseException as exc:  # the import's own door, out of the command
            raise AssertionError(f"{door}: {type(exc).__name__} escaped refimpl sweep") from None
        printed, err = capfd.readouterr()
        assert status == 2, (door, status, err[-300:])
        assert said in err, err[-300:]
        assert "y" * 1000 not in printed, "an import's flood reached the terminal"
        assert not out.exists()


def test_a_kind_module_that_exits_raises_or_floods_at_import_is_a_grid_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    check_a_kind_module_leaving_at_import_is_a_grid_error(tmp_path, monkeypatch, capfd)


def test_the_import_check_rejects_a_grid_that_imports_its_kind_unguarded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(grid_module, "resolve_kind_guarded", sweep.resolve_kind)
    rejects(check_a_kind_module_leaving_at_import_is_a_grid_error, tmp_path, monkeypatch, capfd)


def many_metrics(params: dict[str, Any], seed: int) -> dict[str, float]:
    """A cell kind that returns ``n`` metrics, named with ``width`` characters."""
    return {f"m{i}".rjust(params["width"], "x"): 1.0 for i in range(params["n"])}


@pytest.mark.parametrize(
    ("n", "width", "keep", "said"),
    [
        (cells.MAX_METRICS + 1, 8, None, "returned 10001 metrics, more than 10000"),
        (1, 5000, None, "returned a metric whose name has 5000 characters, more than 200"),
        (cells.MAX_METRICS, 8, ["absent"], "and 9990 more. Fix sweep.metrics."),
    ],
    ids=["too_many", "name_too_long", "missing_among_many"],
)
def test_a_cell_returning_unbounded_metrics_fails_with_a_short_message(
    n: int, width: int, keep: list[str] | None, said: str
) -> None:
    grid: dict[str, Any] = {
        "sweep": {"kind": f"{_HERE}:many_metrics", **({"metrics": keep} if keep else {})},
        "fixed": {"n": n, "width": width},
        "axes": {"a": [1]},
    }
    (row,) = sweep.run(grid, engine="serial").to_pylist()
    assert row["status"] == "error"
    assert said in row["error"], row["error"][:300]
    assert len(row["error"]) < 1000, len(row["error"])


# --- a journal or a results file that lies ------------------------------------------------------


def _damage(kind: str, out: Path) -> None:
    """Damage the journal (or, without it, the results file) of a finished sweep at ``out``."""
    journal = results.journal_path(out)
    lines = journal.read_text().splitlines()
    record = json.loads(lines[1])
    if kind == "not a record":
        lines.append("[1, 2, 3]")
    elif kind == "not valid JSON":
        lines.append("{'cell_id': ")
    elif kind == "a value off the grid":
        lines.append(json.dumps({**record, "params": {"draws": 999}}))
    elif kind == "a string for the replicate":
        lines.append(json.dumps({**record, "replicate": "0"}))
    journal.write_text("\n".join(lines) + "\n")
    if kind in ("results: a column missing", "results: a value off the grid"):
        journal.unlink()
        table = pq.read_table(out)
        meta = table.schema.metadata
        if kind == "results: a column missing":
            table = table.drop_columns(["seed"])
        else:
            table = table.set_column(
                table.column_names.index("draws"), "draws", pa.array([10, 999])
            )
        pq.write_table(table.replace_schema_metadata(meta), out)


_DAMAGES = {
    "not a record": "line 4, is not a record of a cell",
    "not valid JSON": "line 4, is not valid JSON",
    "a value off the grid": "line 4, holds a record not of this grid",
    "a string for the replicate": "line 4, is not a record of a cell",
    "results: a column missing": "has no column 'seed'",
    "results: a value off the grid": "holds a row not of this grid",
}


@pytest.mark.parametrize("kind", list(_DAMAGES))
def test_a_damaged_journal_or_results_file_is_refused_in_one_line(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grid = tmp_path / "g.toml"
    grid.write_text(_GRID_TEXT)
    out = tmp_path / "r.parquet"
    assert main(["sweep", str(grid), "--out", str(out), "--engine", "serial", "--quiet"]) == 0
    _damage(kind, out)
    capsys.readouterr()
    code = main(["sweep", str(grid), "--out", str(out), "--engine", "serial", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert _DAMAGES[kind] in err, err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    if kind.startswith("results"):
        assert not results.journal_path(out).exists(), "a journal rebuilt from a damaged file"


# --- sizes -------------------------------------------------------------------------------------------


def _counting(counter: list[int], materialize: bool) -> Callable[[Grid], Iterator[Cell]]:
    real = sweep.expand

    def expand(grid: Grid) -> Iterator[Cell]:
        def counted() -> Iterator[Cell]:
            for cell in real(grid):
                counter[0] += 1
                yield cell

        return iter(list(counted())) if materialize else counted()

    return expand


def check_the_first_cell_starts_before_the_grid_is_expanded(
    side: int, monkeypatch: pytest.MonkeyPatch, materialize: bool = False
) -> None:
    grid = {
        "sweep": {"kind": f"{_HERE}:fast", "replicates": 2},
        "axes": {
            "a": {"start": 1, "stop": side, "step": 1},
            "b": {"start": 1, "stop": side, "step": 1},
        },
    }
    counter = [0]
    monkeypatch.setattr(engine, "expand", _counting(counter, materialize))

    def stop(record: Any) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sweep.run(grid, engine="serial", on_record=stop)
    assert counter[0] <= 2, f"{counter[0]} of {2 * side * side} cells expanded before the first ran"


def test_a_grid_of_two_million_cells_is_expanded_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    check_the_first_cell_starts_before_the_grid_is_expanded(1000, monkeypatch)


def test_the_laziness_check_rejects_an_engine_that_lists_the_cells_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rejects(check_the_first_cell_starts_before_the_grid_is_expanded, 30, monkeypatch, True)


def test_results_come_in_grid_order_whatever_order_the_cells_finish() -> None:
    grid = {
        "sweep": {"kind": f"{_HERE}:fast", "replicates": 2, "seed": 4},
        "axes": {"a": [3, 1, 2], "b": [0.5, -1.0]},
    }
    table = sweep.run(grid, engine="local", workers=2)
    expected = [
        (c.axes["a"], c.axes["b"], c.replicate) for c in sweep.expand(sweep.parse_grid(grid))
    ]
    rows = table.to_pylist()
    assert [(r["a"], r["b"], r["replicate"]) for r in rows] == expected


# The Python memory of a sweep, measured by tracemalloc's peak over a fresh run and a resumed one
# (every cell skipped, the journal read back), at two grid sizes ten times apart. A finished record
# held as a dict costs about a kilobyte (measured: 1.1 KB); a record kept as an Arrow row costs no
# Python memory (Arrow allocates outside tracemalloc's view), and what remains per cell is numpy's
# list of finished positions on resume and the sort's keys (8 + 2 bytes a cell). The bound, 32
# bytes per added cell, is three times that and thirty times below a record. The peak is
# deterministic: one thread, no Hypothesis, the same allocations in the same order whatever the
# load (fsync's timing changes when the journal reaches the disk, not what is allocated).
_SMALL, _LARGE, _BYTES_PER_CELL = 200, 2000, 32


def _peak_bytes(cells: int, out: Path) -> int:
    """The larger tracemalloc peak of a fresh sweep of ``cells`` cells and of its resumption."""
    grid = {"sweep": {"kind": f"{_HERE}:fast", "replicates": cells}, "axes": {"a": [1], "b": [0.5]}}
    peaks = []
    for _ in range(2):  # the second run resumes: every cell is read back from the journal
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            table = sweep.run(grid, engine="serial", out=out)
            peaks.append(tracemalloc.get_traced_memory()[1] - base)
        finally:
            tracemalloc.stop()
        assert table.num_rows == cells
    return max(peaks)


def check_memory_does_not_grow_with_the_number_of_cells(tmp_path: Path) -> None:
    _peak_bytes(20, tmp_path / "warm.parquet")  # imports and caches, outside the comparison
    small = _peak_bytes(_SMALL, tmp_path / "small.parquet")
    large = _peak_bytes(_LARGE, tmp_path / "large.parquet")
    bound = _BYTES_PER_CELL * (_LARGE - _SMALL)
    assert large - small <= bound, (
        f"the sweep's Python memory grew by {large - small} bytes from {_SMALL} to {_LARGE} "
        f"cells (peaks {small} and {large}), more than {_BYTES_PER_CELL} bytes a cell: finished "
        "records are held as Python objects"
    )


def test_a_sweep_s_memory_does_not_grow_with_its_number_of_cells(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert not tracemalloc.is_tracing(), "run without PYTHONTRACEMALLOC: the test traces itself"
    monkeypatch.setattr(results, "ROWS_PER_BATCH", 16)  # batches small beside both grids
    check_memory_does_not_grow_with_the_number_of_cells(tmp_path)


def test_the_memory_check_rejects_a_sweep_that_keeps_every_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the wrong variant: every finished record kept as a dict until the table is built at the end
    monkeypatch.setattr(results, "ROWS_PER_BATCH", 10**9)
    rejects(check_memory_does_not_grow_with_the_number_of_cells, tmp_path)


@pytest.mark.parametrize("depth", [40, 5000])
def test_a_grid_nested_thousands_deep_is_refused_with_a_message(
    tmp_path: Path, depth: int, capsys: pytest.CaptureFixture[str]
) -> None:
    grid = tmp_path / "deep.toml"
    grid.write_text('[sweep]\nkind = "busy"\n[fixed]\nx = ' + "[" * depth + "]" * depth + "\n")
    with pytest.raises(sweep.GridError, match=r"nested (more than 32 levels|too deep)"):
        sweep.load_grid(grid)
    code = main(["sweep", str(grid), "--out", str(tmp_path / "r.parquet"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert len(err) < 400


def test_a_table_that_contains_itself_is_refused() -> None:
    table: dict[str, Any] = {}
    table["self"] = table
    with pytest.raises(sweep.GridError, match=r"fixed\.x\.self.*nested more than 32 levels"):
        sweep.parse_grid({"sweep": {"kind": f"{_HERE}:fast"}, "fixed": {"x": table}})


def test_a_huge_axis_is_checked_at_its_ends() -> None:
    spec = {"start": -1, "stop": 999_998, "step": 1}  # draws = -1 and 0 come first: refused
    with pytest.raises(sweep.GridError, match=r"axes\.draws\[0\] = -1: draws must be >= 1"):
        sweep.parse_grid({"sweep": {"kind": "busy"}, "axes": {"draws": spec}})
    down = {"start": 999_998, "stop": -1, "step": -1}  # and last
    with pytest.raises(sweep.GridError, match=r"axes\.draws\[999998\] = 0: draws must be >= 1"):
        sweep.parse_grid({"sweep": {"kind": "busy"}, "axes": {"draws": down}})


@pytest.mark.parametrize("workers", [0, 1025, 2**63])
def test_a_worker_count_beyond_the_bound_is_refused(
    workers: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grid = {"sweep": {"kind": "busy"}, "axes": {"draws": [10]}}
    with pytest.raises(ValueError, match=r"workers must be an integer in \[1, 1024\]"):
        sweep.run(grid, engine="local", workers=workers)
    path = tmp_path / "g.toml"
    path.write_text(_GRID_TEXT)
    code = main(
        ["sweep", str(path), "--out", str(tmp_path / "r.parquet"), "--workers", str(workers)]
    )
    assert code == 2
    assert (
        f"--workers must be in [1, 1024] (processes of the pool); got {workers}"
        in capsys.readouterr().err
    )
    assert not (tmp_path / "r.parquet").exists()


def test_a_grid_behind_a_symlink_loop_is_named_as_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.symlink_to(b)
    b.symlink_to(a)
    code = main(["sweep", str(a), "--out", str(tmp_path / "r.parquet"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert "symlink loop" in err
    assert "no such file" not in err
    assert not (tmp_path / "r.parquet").exists()


def test_chained_indices_cover_both_ends() -> None:
    from refimpl.sweep.grid import _MAX_CHECKED_VALUES, _checked_indices

    small = list(_checked_indices(5))
    assert small == [1, 2, 3, 4]
    big = list(_checked_indices(10 * _MAX_CHECKED_VALUES))
    assert big[0] == 1
    assert big[-1] == 10 * _MAX_CHECKED_VALUES - 1
    assert len(big) == _MAX_CHECKED_VALUES - 1
    assert list(itertools.islice(big, 3)) == [1, 2, 3]
