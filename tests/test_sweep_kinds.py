"""The built-in cell kinds: closed_form and simulate call refimpl's public functions, nothing else."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.stats

import refimpl
from refimpl import sweep
from refimpl.sim import SimConfig
from refimpl.sim import simulate as run_simulation
from refimpl.sweep.kinds import closed_form, simulate

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "sweeps"


def test_closed_form_cells_equal_direct_calls_of_refimpl() -> None:
    grid = {
        "sweep": {"kind": "closed_form"},
        "fixed": {"function": "length_bias", "law": "lognorm", "law_scale": float(np.exp(6.0))},
        "axes": {"law_s": [0.5, 1.0], "n": [4], "k": [1, 3]},
    }
    for row in sweep.run(grid, engine="serial").to_pylist():
        direct = refimpl.length_bias(
            scipy.stats.lognorm(s=row["law_s"], scale=np.exp(6.0)), n=row["n"], k=row["k"]
        )
        assert row["status"] == "ok"
        assert {f: row[f] for f in direct._fields} == direct._asdict()


@pytest.mark.parametrize(
    ("params", "call"),
    [
        (
            {"function": "selected_pmf", "pmf": [0.25, 0.25, 0.5], "n": 3, "k": 2},
            lambda: {
                f"selected_pmf_{i + 1}": x
                for i, x in enumerate(refimpl.selected_pmf([0.25, 0.25, 0.5], n=3, k=2))
            },
        ),
        (
            {"function": "expected_max", "law": "expon", "law_args": {"scale": 2.0}, "n": 5},
            lambda: {"expected_max": refimpl.expected_max(scipy.stats.expon(scale=2.0), n=5)},
        ),
        (
            {"function": "async_speedup", "law": "uniform", "law_loc": 1.0, "law_scale": 3.0, "n": 4},
            lambda: {
                "async_speedup": refimpl.async_speedup(scipy.stats.uniform(loc=1.0, scale=3.0), n=4)
            },
        ),
        (
            {"function": "selected_mean", "law": "gamma", "law_a": 2.0, "n": 6, "k": 2},
            lambda: {"selected_mean": refimpl.selected_mean(scipy.stats.gamma(a=2.0), n=6, k=2)},
        ),
        (
            {"function": "fluid_steady_state", "law": "lognorm", "law_s": 1.0, "law_scale": 403.0, "slots": 128, "batch": 256, "eta": 0},
            lambda: refimpl.fluid_steady_state(
                scipy.stats.lognorm(s=1.0, scale=403.0), slots=128, batch=256, eta=0
            )._asdict(),
        ),
    ],
)  # fmt: skip
def test_each_closed_form_function_gives_the_direct_calls_numbers(
    params: dict[str, Any], call: Any
) -> None:
    assert closed_form(params, 123) == {k: float(v) for k, v in call().items()}


def test_a_simulate_cell_is_the_simulator_run_with_the_cells_seed() -> None:
    grid = {
        "sweep": {"kind": "simulate", "replicates": 2, "seed": 9},
        "fixed": {"batch": 16, "rollouts": 320, "law": "lognorm", "law_s": 1.0, "law_scale": 100.0},
        "axes": {"slots": [8, 32], "eta": [0, 1], "over_bound": ["drop"]},
    }
    table = sweep.run(grid, engine="serial").to_pylist()
    assert {row["status"] for row in table} == {"ok"}
    for row in table[:3]:
        config = SimConfig(
            slots=row["slots"],
            batch=16,
            rollouts=320,
            eta=row["eta"],
            over_bound="drop",
            lengths=scipy.stats.lognorm(s=1.0, scale=100.0),
            seed=row["seed"],
        )
        summary = run_simulation(config).summary()
        assert row["staleness_mean"] == summary.staleness_mean
        assert row["length_mean"] == summary.length_mean
        assert row["dropped"] == summary.dropped
        assert row["length_tv"] == summary.length_bias.total_variation
    # replicates differ (their seeds do), so the seed reaches the simulator
    assert table[0]["length_mean"] != table[1]["length_mean"]


def test_simulate_defaults_to_the_peers_lognormal_lengths() -> None:
    metrics = simulate({"slots": 4, "batch": 8, "rollouts": 64, "lognormal_sigma": 0.5}, 7)
    config = SimConfig(slots=4, batch=8, rollouts=64, lognormal_sigma=0.5, seed=7)
    assert metrics["length_mean"] == run_simulation(config).summary().length_mean


@pytest.mark.parametrize(
    ("kind", "params", "match"),
    [
        (closed_form, {"law": "expon", "n": 2, "k": 1}, r"closed_form needs function = NAME, one of length_bias"),
        (closed_form, {"function": "pareto_front"}, r"no function 'pareto_front'; it offers length_bias"),
        (closed_form, {"function": "length_bias", "law": "expon", "n": 2, "k": 1, "eta": 0}, r"takes no parameter 'eta'; it takes k, n"),
        (closed_form, {"function": "length_bias", "n": 2, "k": 1}, r"needs its length law as law = \"NAME\" or pmf"),
        (closed_form, {"function": "selected_pmf", "law": "expon", "n": 2, "k": 1}, r"needs its length law as pmf = \["),
        (closed_form, {"function": "expected_max", "pmf": [1.0], "n": 2}, r"needs its length law as law = \"NAME\""),
        (closed_form, {"function": "length_bias", "law": "poisson", "n": 2, "k": 1}, r"law='poisson' is not a continuous scipy.stats distribution"),
        (closed_form, {"function": "length_bias", "law": "lognorm", "law_scale": 1.0, "n": 2, "k": 1}, r"law='lognorm' needs its shape parameter 's'; add law_s"),
        (closed_form, {"function": "length_bias", "law": "expon", "law_sigma": 1.0, "n": 2, "k": 1}, r"law='expon' has no parameter 'sigma'; it takes loc, scale"),
        (closed_form, {"function": "length_bias", "law": "expon", "pmf": [1.0], "n": 2, "k": 1}, r"either as pmf = \[...\] or as law = NAME"),
        (closed_form, {"function": "length_bias", "law": "expon", "n": 2, "k": 3}, r"k"),
        (simulate, {"slots": 2, "batch": 2, "rollouts": 4, "seed": 1}, r"simulate takes its seed from the sweep"),
        (simulate, {"slots": 2, "batch": 2, "rollouts": 4, "speed": 1}, r"simulate takes no parameter 'speed'; it takes batch, .*eta"),
        (simulate, {"slots": 2, "batch": 0, "rollouts": 4}, r"batch must be >= 1"),
        (simulate, {"slots": 2, "batch": 2, "rollouts": 4, "law_s": 1.0}, r"law parameters \['s'\] were given without law = NAME"),
    ],
)  # fmt: skip
def test_bad_cell_parameters_fail_with_a_message_that_says_how_to_fix_them(
    kind: Any, params: dict[str, Any], match: str
) -> None:
    with pytest.raises((ValueError, TypeError), match=match):
        kind(params, 0)


def test_a_bad_parameter_becomes_the_cells_error_not_the_sweeps() -> None:
    grid = {
        "sweep": {"kind": "closed_form"},
        "fixed": {"function": "length_bias", "law": "expon"},
        "axes": {"n": [4], "k": [2, 5]},
    }
    rows = sweep.run(grid, engine="serial").to_pylist()
    assert [r["status"] for r in rows] == ["ok", "error"]
    assert re.search(r"^InvalidArgument: k must .*", rows[1]["error"])


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.toml")), ids=lambda p: p.name)
def test_the_example_grids_run_their_first_cells(path: Path) -> None:
    grid = sweep.load_grid(path)
    cell = next(sweep.expand(grid))
    record = sweep.execute_cell(cell)
    assert record["status"] == "ok", record["error"]
