"""Pinned behaviours of refimpl.sweep that a sampled mutation run (``tools/mutate.py``, seed 2026)
found no fast test holding: each test names the mutant it was seen to fail on."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from refimpl import sweep
from refimpl.sweep import GridError, journal_path, parse_grid
from refimpl.sweep.grid import _MAX_AXIS_VALUES

_HERE = __name__


def reserved_metrics(params: dict[str, Any], seed: int) -> dict[str, float]:
    """A kind whose metrics are named like two reserved columns (sorted: seed, status)."""
    return {"status": 1.0, "seed": 2.0}


def sigint_handler_seen(params: dict[str, Any], seed: int) -> dict[str, float]:
    """1.0 when the sweep's own SIGINT handler is installed while the cell runs, else 0.0."""
    handler = signal.getsignal(signal.SIGINT)
    return {"own_handler": float(callable(handler) and handler is not signal.default_int_handler)}


# busy named as "module:function": its parameters are not checked at parse time, so draws = 0
# runs and fails (draws must be >= 1); one failing cell of three.
_ONE_OF_THREE_FAILS = {
    "sweep": {"kind": "refimpl.sweep.kinds:busy", "seed": 5},
    "axes": {"draws": [10, 0, 100]},
}


def test_a_metric_clashing_with_columns_names_the_first_clash_in_sorted_order() -> None:
    # mutant: clash[0] -> clash[-1] in the message (it then named 'status')
    grid = {"sweep": {"kind": f"{_HERE}:reserved_metrics"}, "axes": {"x": [1]}}
    with pytest.raises(ValueError, match=r"returns metric 'seed', which is also a column name"):
        sweep.run(grid, engine="serial")


def test_a_resumed_sweep_counts_the_failed_cells_it_keeps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # mutant: the failed cells found in the journal counted as those with status == "ok"
    out = tmp_path / "r.parquet"
    first = sweep.run(_ONE_OF_THREE_FAILS, out=out, engine="serial")
    assert first.column("status").to_pylist() == ["ok", "error", "ok"]
    capsys.readouterr()
    again = sweep.run(_ONE_OF_THREE_FAILS, out=out, engine="serial", progress=True)
    assert again.column("status").to_pylist() == ["ok", "error", "ok"]
    err = capsys.readouterr().err
    assert "3/3" in err
    assert "failed=1 remaining=0" in err
    assert "failed=2" not in err
    assert journal_path(out).read_text().count("\n") == 1 + 3


def test_the_sweep_installs_its_sigint_handler_over_the_default_and_restores_it() -> None:
    # mutant: the install condition negated (the handler then stayed Python's default)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as under a terminal
    try:
        grid = {"sweep": {"kind": f"{_HERE}:sigint_handler_seen"}, "axes": {"x": [1]}}
        table = sweep.run(grid, engine="serial")
        assert table.column("own_handler").to_pylist() == [1.0]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_two_axis_grid_is_checked_point_by_point_for_rules_between_parameters() -> None:
    # each value is valid beside the other axis's first value; only the point (8, 4) breaks
    # rollouts >= batch (mutant: the point-by-point check started at three axes, not two)
    with pytest.raises(GridError) as info:
        parse_grid(
            {
                "sweep": {"kind": "simulate"},
                "fixed": {"slots": 4},
                "axes": {"batch": [2, 8], "rollouts": [16, 4]},
            }
        )
    assert info.value.path == "axes"
    assert str(info.value).startswith(
        "axes: the cell with batch = 8, rollouts = 4: rollouts must be >= batch=8"
    )


def test_the_int64_bounds_are_accepted_and_one_past_them_refused() -> None:
    # mutants: either 2**63 of -(2**63) <= value < 2**63 lowered to 2**62
    lo, hi = -(2**63), 2**63 - 1
    grid = parse_grid({"sweep": {"kind": "busy"}, "fixed": {"a": lo}, "axes": {"b": [lo, hi]}})
    assert grid.fixed["a"] == lo
    assert grid.axes["b"] == (lo, hi)
    for path, value in (("fixed.a", hi + 1), ("fixed.a", lo - 1)):
        with pytest.raises(GridError, match=r"must fit a 64-bit integer") as info:
            parse_grid({"sweep": {"kind": "busy"}, "fixed": {"a": value}})
        assert info.value.path == path


def test_a_log_range_ending_at_zero_names_its_stop() -> None:
    # mutant: stop <= 0 -> stop < 0 (numpy's geomspace then failed instead, naming no key)
    with pytest.raises(GridError, match=r"axes.x.stop must be > 0 when log = true") as info:
        parse_grid(
            {
                "sweep": {"kind": "busy"},
                "axes": {"x": {"start": 1, "stop": 0, "num": 3, "log": True}},
            }
        )
    assert info.value.path == "axes.x.stop"


@pytest.mark.parametrize("step", ["a", True, float("inf")])
def test_a_range_step_that_is_not_a_finite_number_is_refused(step: Any) -> None:
    # mutant: the three refusals joined by `and` (a boolean step then counted as 1)
    with pytest.raises(GridError, match=r"axes.x.step must be a finite number") as info:
        parse_grid(
            {"sweep": {"kind": "busy"}, "axes": {"x": {"start": 0, "stop": 1, "step": step}}}
        )
    assert info.value.path == "axes.x.step"


def test_a_range_of_exactly_the_maximum_number_of_values_is_accepted() -> None:
    # mutant: count > _MAX_AXIS_VALUES -> count >= (the maximum itself refused); a kind named as
    # "module:function" is not checked value by value, which keeps this cheap
    spec = {"start": 1, "stop": _MAX_AXIS_VALUES, "step": 1}
    grid = parse_grid({"sweep": {"kind": "refimpl.sweep.kinds:busy"}, "axes": {"x": spec}})
    assert len(grid.axes["x"]) == _MAX_AXIS_VALUES
    assert grid.axes["x"][-1] == _MAX_AXIS_VALUES
    with pytest.raises(GridError, match=r"give at most 1000000 values \(it gives 1000001\)"):
        parse_grid({"sweep": {"kind": "busy"}, "axes": {"x": {**spec, "start": 0}}})
