"""Grid files: parsing, ranges, per-cell seeds, and a table of malformed grids with their messages."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from refimpl.sweep import Grid, GridError, expand, load_grid, parse_grid
from refimpl.sweep.grid import cell_identity


def _grid(axes: dict[str, Any], **sweep: Any) -> Grid:
    return parse_grid({"sweep": {"kind": "busy", **sweep}, "axes": axes})


# --- expansion and ranges --------------------------------------------------------------------


def test_cells_are_the_product_of_the_axes_times_the_replicates_in_file_order() -> None:
    g = _grid({"a": [1, 2], "b": ["x", "y", "z"]}, replicates=2)
    cells = list(expand(g))
    assert g.n_cells == len(cells) == 12
    assert [(c.axes["a"], c.axes["b"], c.replicate) for c in cells[:4]] == [
        (1, "x", 0),
        (1, "x", 1),
        (1, "y", 0),
        (1, "y", 1),
    ]
    assert [c.position for c in cells] == list(range(12))
    assert all(c.params == {**g.fixed, **c.axes} for c in cells)


def test_no_axes_gives_one_cell_per_replicate() -> None:
    g = parse_grid({"sweep": {"kind": "busy", "replicates": 3}, "fixed": {"draws": 5}})
    assert [c.params for c in expand(g)] == [{"draws": 5}] * 3


@pytest.mark.parametrize(
    ("spec", "values"),
    [
        ({"start": 1, "stop": 7, "step": 2}, (1, 3, 5, 7)),
        ({"start": 1, "stop": 8, "step": 2}, (1, 3, 5, 7)),
        ({"start": 5, "stop": 1, "step": -2}, (5, 3, 1)),
        ({"start": 0.0, "stop": 0.3, "step": 0.1}, (0.0, 0.1, 0.2, 0.30000000000000004)),
        ({"start": 0, "stop": 1, "num": 5}, (0.0, 0.25, 0.5, 0.75, 1.0)),
        ({"start": 1, "stop": 1000, "num": 4, "log": True}, (1.0, 10.0, 100.0, 1000.0)),
        ({"start": 2, "stop": 2, "num": 1}, (2.0,)),
    ],
)
def test_ranges_include_both_ends_when_reached(spec: dict[str, Any], values: tuple[Any]) -> None:
    axis = _grid({"x": spec}).axes["x"]
    assert axis == pytest.approx(values, rel=1e-15, abs=1e-15)
    assert [type(v) for v in axis] == [type(v) for v in values]


def test_integer_and_float_values_of_one_axis_become_floats() -> None:
    assert _grid({"x": [1, 2.5]}).axes["x"] == (1.0, 2.5)
    assert all(isinstance(v, float) for v in _grid({"x": [1, 2.5]}).axes["x"])


# --- seeds -------------------------------------------------------------------------------------


def test_a_cells_seed_does_not_depend_on_the_other_cells_or_their_order() -> None:
    base = {
        (c.axes["draws"], c.replicate): (c.cell_id, c.seed)
        for c in expand(_grid({"draws": [1, 2]}, replicates=2))
    }
    other = {
        (c.axes["draws"], c.replicate): (c.cell_id, c.seed)
        for c in expand(_grid({"draws": [3, 2, 1]}, replicates=3))
    }
    assert all(other[key] == value for key, value in base.items())


def test_every_cell_of_a_grid_gets_its_own_seed_and_id() -> None:
    cells = list(expand(_grid({"a": list(range(20)), "b": [0.5, 1.5]}, replicates=10)))
    assert len({c.seed for c in cells}) == len({c.cell_id for c in cells}) == len(cells) == 400


@pytest.mark.parametrize(
    "change",
    [
        {"kind": "refimpl.sweep.kinds:busy"},
        {"params": {"draws": 11}},
        {"params": {"draws": 10, "extra": 0}},
        {"params": {"draws": 10.0}},
        {"replicate": 1},
        {"root_seed": 1},
    ],
)
def test_changing_anything_that_defines_a_cell_changes_its_seed(change: dict[str, Any]) -> None:
    base: dict[str, Any] = {"kind": "busy", "params": {"draws": 10}, "replicate": 0, "root_seed": 0}
    assert cell_identity(**base)[1] != cell_identity(**{**base, **change})[1]
    assert cell_identity(**base)[0] != cell_identity(**{**base, **change})[0]


def test_a_cells_seed_follows_the_documented_derivation() -> None:
    # docs/howto/sweeps.md states the scheme so that anyone can recompute a cell's seed:
    # sha256 of the canonical JSON -> SeedSequence -> first 64-bit word, top 63 bits.
    payload: dict[str, Any] = {
        "kind": "busy",
        "params": {"draws": 10, "eta": 0.5},
        "replicate": 3,
        "root_seed": 7,
    }
    text = json.dumps({"scheme": 1, **payload}, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(text.encode()).digest()
    word = np.random.SeedSequence(int.from_bytes(digest, "big")).generate_state(1, np.uint64)[0]
    assert cell_identity(**payload) == (digest.hex()[:20], int(word) >> 1)


def test_the_fingerprint_changes_with_any_part_of_the_grid() -> None:
    base = {"sweep": {"kind": "busy", "seed": 0}, "axes": {"draws": [1, 2]}}
    variants = [
        {"sweep": {"kind": "busy", "seed": 1}, "axes": {"draws": [1, 2]}},
        {"sweep": {"kind": "busy", "seed": 0}, "axes": {"draws": [1, 2, 3]}},
        {"sweep": {"kind": "busy", "seed": 0, "metrics": ["mean"]}, "axes": {"draws": [1, 2]}},
        {"sweep": {"kind": "busy", "seed": 0, "replicates": 2}, "axes": {"draws": [1, 2]}},
        {"sweep": {"kind": "busy", "seed": 0}, "axes": {"draws": [1, 2]}, "fixed": {"z": 1}},
    ]
    prints = {parse_grid(base).fingerprint, *(parse_grid(v).fingerprint for v in variants)}
    assert len(prints) == 1 + len(variants)
    assert parse_grid(base).fingerprint == parse_grid(dict(base)).fingerprint


# --- malformed grids ---------------------------------------------------------------------------


class Bad(NamedTuple):
    id: str
    toml: str
    path: str
    match: str


_K = '[sweep]\nkind = "busy"\n'

BAD_GRIDS = [
    Bad("syntax", "[sweep\nkind = 1", "", r"not valid TOML: .*line 1.* Fix the syntax"),
    Bad("no-sweep", "[axes]\nx = [1]\n", "sweep", r"sweep is missing: a grid needs a \[sweep\]"),
    Bad("unknown-top", _K + "[axis]\nx = [1]\n", "axis", r"axis is not a known key; allowed at the top level: sweep, fixed, axes"),
    Bad("unknown-sweep-key", _K + "replicate = 2\n", "sweep.replicate", r"allowed in \[sweep\]: kind, replicates, seed, metrics, name"),
    Bad("sweep-not-table", "sweep = 3\n", "sweep", r"sweep must be a table; got 3"),
    Bad("no-kind", "[sweep]\nseed = 1\n", "sweep.kind", r"sweep.kind is missing: .* one of busy"),
    Bad("kind-unknown", '[sweep]\nkind = "nope"\n', "sweep.kind", r"unknown cell kind 'nope'; built-in kinds: busy"),
    Bad("kind-not-str", "[sweep]\nkind = 3\n", "sweep.kind", r"sweep.kind must be a string; got 3"),
    Bad("kind-no-module", '[sweep]\nkind = "no_such_module_xyz:f"\n', "sweep.kind", r"module 'no_such_module_xyz' cannot be imported"),
    Bad("kind-no-function", '[sweep]\nkind = "refimpl.sweep.kinds:nope"\n', "sweep.kind", r"has no attribute 'nope'. Check the function name"),
    Bad("kind-half-dotted", '[sweep]\nkind = "refimpl:"\n', "sweep.kind", r'must read "module:function"'),
    Bad("replicates-zero", _K + "replicates = 0\n", "sweep.replicates", r"sweep.replicates must be >= 1 \(cells per point\); got 0"),
    Bad("replicates-float", _K + "replicates = 1.5\n", "sweep.replicates", r"must be an integer .*; got 1.5"),
    Bad("replicates-bool", _K + "replicates = true\n", "sweep.replicates", r"must be an integer"),
    Bad("seed-negative", _K + "seed = -1\n", "sweep.seed", r"sweep.seed must be >= 0"),
    Bad("name-not-str", _K + "name = 1\n", "sweep.name", r"sweep.name must be a string"),
    Bad("metrics-empty", _K + "metrics = []\n", "sweep.metrics", r"non-empty list of metric names"),
    Bad("metrics-not-str", _K + 'metrics = ["a", 1]\n', "sweep.metrics[1]", r"sweep.metrics\[1\] must be a non-empty string; got 1"),
    Bad("metrics-repeated", _K + 'metrics = ["a", "a"]\n', "sweep.metrics", r"list each metric once.*repeated 'a'"),
    Bad("metrics-reserved", _K + 'metrics = ["a", "seed"]\n', "sweep.metrics[1]", r"'seed' clashes with a column"),
    Bad("metrics-axis", _K + 'metrics = ["x"]\n[axes]\nx = [1]\n', "sweep.metrics[0]", r"'x' clashes with a column .*axes: x"),
    Bad("fixed-not-table", "fixed = 3\n" + _K, "fixed", r"fixed must be a table; got 3"),
    Bad("fixed-date", _K + "[fixed]\nwhen = 1979-05-27\n", "fixed.when", r"TOML dates and times are not supported"),
    Bad("fixed-nested-nan", _K + "[fixed]\nd = {s = [1.0, nan]}\n", "fixed.d.s[1]", r"fixed.d.s\[1\] must be finite"),
    Bad("axis-empty", _K + "[axes]\neta = []\n", "axes.eta", r"non-empty list of values or a range table"),
    Bad("axis-scalar", _K + "[axes]\neta = 3\n", "axes.eta", r"non-empty list of values or a range table"),
    Bad("axis-mixed", _K + '[axes]\neta = [0, 1, "x"]\n', "axes.eta[2]", r"axes.eta\[2\] must have the type of axes.eta\[0\] \(int\); got 'x'"),
    Bad("axis-bool-int", _K + "[axes]\neta = [true, 1]\n", "axes.eta[1]", r"type of axes.eta\[0\] \(bool\)"),
    Bad("axis-nan", _K + "[axes]\neta = [0.0, nan]\n", "axes.eta[1]", r"axes.eta\[1\] must be finite; got nan"),
    Bad("axis-nested", _K + "[axes]\neta = [[1]]\n", "axes.eta[0]", r"string, integer, float or boolean .*Move structured values to \[fixed\]"),
    Bad("axis-repeated", _K + "[axes]\neta = [1, 2, 1]\n", "axes.eta", r"list each value once.*repeated 1"),
    Bad("axis-reserved", _K + "[axes]\nseed = [1]\n", "axes.seed", r"reserved column name"),
    Bad("axis-also-fixed", _K + "[fixed]\neta = 1\n[axes]\neta = [1]\n", "axes.eta", r"also fixed.eta: a parameter is either fixed or an axis"),
    Bad("range-no-stop", _K + "[axes]\nx = {start = 0, num = 2}\n", "axes.x.stop", r"axes.x.stop is missing"),
    Bad("range-neither", _K + "[axes]\nx = {start = 0, stop = 1}\n", "axes.x", r"exactly one of step .* or num"),
    Bad("range-both", _K + "[axes]\nx = {start = 0, stop = 1, step = 1, num = 2}\n", "axes.x", r"exactly one of step"),
    Bad("range-unknown-key", _K + "[axes]\nx = {start = 0, stop = 1, num = 2, end = 3}\n", "axes.x.end", r"allowed in \[axes.x\]: start, stop, step, num, log"),
    Bad("range-start-str", _K + '[axes]\nx = {start = "a", stop = 1, num = 2}\n', "axes.x.start", r"must be a finite number; got 'a'"),
    Bad("range-step-away", _K + "[axes]\nx = {start = 0, stop = 1, step = -1}\n", "axes.x.step", r"point from start=0 towards stop=1; got -1"),
    Bad("range-step-zero", _K + "[axes]\nx = {start = 0, stop = 1, step = 0}\n", "axes.x.step", r"be non-zero"),
    Bad("range-too-many", _K + "[axes]\nx = {start = 0, stop = 1, step = 1e-9}\n", "axes.x.step", r"at most 1000000 values"),
    Bad("range-num-zero", _K + "[axes]\nx = {start = 0, stop = 1, num = 0}\n", "axes.x.num", r"axes.x.num must be >= 1"),
    Bad("range-log-zero", _K + "[axes]\nx = {start = 0, stop = 1, num = 3, log = true}\n", "axes.x.start", r"be > 0 when log = true"),
    Bad("range-log-step", _K + "[axes]\nx = {start = 1, stop = 2, step = 1, log = true}\n", "axes.x.log", r"log = true needs num, not step"),
    Bad("range-repeats", _K + "[axes]\nx = {start = 1, stop = 1, num = 3}\n", "axes.x", r"give distinct values"),
    Bad("too-many-cells", _K + "replicates = 100\n[axes]\nx = {start = 0, stop = 99999, step = 1}\nz = {start = 0, stop = 9, step = 1}\n", "axes", r"100000000 cells, more than 10000000"),
]  # fmt: skip


@pytest.mark.parametrize("bad", BAD_GRIDS, ids=[b.id for b in BAD_GRIDS])
def test_a_malformed_grid_fails_naming_the_key_path_and_what_is_allowed(
    bad: Bad, tmp_path: Path
) -> None:
    path = tmp_path / "grid.toml"
    path.write_text(bad.toml)
    with pytest.raises(GridError) as info:
        load_grid(path)
    assert info.value.path == bad.path
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert re.search(bad.match, message), message
    if bad.path:
        assert bad.path in message


def test_a_grid_table_that_is_not_a_mapping_is_refused() -> None:
    with pytest.raises(GridError, match=r"must be a table"):
        parse_grid([1, 2])  # type: ignore[arg-type]


def test_the_example_grid_parses() -> None:
    root = Path(__file__).resolve().parent.parent
    for path in sorted((root / "examples" / "sweeps").glob("*.toml")):
        assert load_grid(path).n_cells >= 1


# --- properties over random grids ------------------------------------------------------------


@given(
    start=st.integers(-50, 50),
    length=st.integers(0, 60),
    step=st.integers(1, 7),
    descending=st.booleans(),
)
def test_an_integer_range_is_pythons_range_with_stop_included(
    start: int, length: int, step: int, descending: bool
) -> None:
    sign = -1 if descending else 1
    stop = start + sign * length
    axis = _grid({"x": {"start": start, "stop": stop, "step": sign * step}}).axes["x"]
    assert axis == tuple(range(start, stop + sign, sign * step))


@given(
    sizes=st.lists(st.integers(1, 4), min_size=0, max_size=3),
    replicates=st.integers(1, 3),
    order=st.randoms(use_true_random=False),
)
def test_cells_keep_their_ids_and_seeds_whatever_the_order_of_axes_and_values(
    sizes: list[int], replicates: int, order: Any
) -> None:
    axes = {f"a{i}": list(range(n)) for i, n in enumerate(sizes)}
    shuffled_names = list(axes)
    order.shuffle(shuffled_names)
    shuffled = {}
    for name in shuffled_names:
        values = list(axes[name])
        order.shuffle(values)
        shuffled[name] = values

    def identities(g: Grid) -> dict[tuple[Any, ...], tuple[str, int]]:
        return {
            (tuple(sorted(c.axes.items())), c.replicate): (c.cell_id, c.seed) for c in expand(g)
        }

    a = identities(_grid(axes, replicates=replicates))
    b = identities(_grid(shuffled, replicates=replicates))
    assert a == b
    assert (
        len(a)
        == len({seed for _, seed in a.values()})
        == _grid(axes, replicates=replicates).n_cells
    )


# --- parameters and metrics the kind does not take or return: refused before any cell runs ----

_SIM = '[sweep]\nkind = "simulate"\n'
_CF = '[sweep]\nkind = "closed_form"\n'
_CF_FIXED = '[fixed]\nfunction = "length_bias"\nlaw = "expon"\n'

BAD_KIND_GRIDS = [
    Bad("sim-metric", _SIM + 'metrics = ["throughput", "length_mean", "dropped", "troughput"]\n[fixed]\nbatch = 4\nrollouts = 8\n[axes]\nslots = [1, 2]\n', "sweep.metrics[3]", r"'troughput' is not a metric of kind 'simulate'; it returns .*throughput.* Did you mean 'throughput'\?"),
    Bad("sim-fixed-typo", _SIM + "[fixed]\nslotz = 4\nbatch = 4\nrollouts = 8\n", "fixed.slotz", r"fixed.slotz is not a parameter of kind 'simulate'; it takes .*batch, .*slots.* Did you mean 'slots'\?"),
    Bad("sim-axis-typo", _SIM + "[fixed]\nslots = 4\nbatch = 4\nrollouts = 8\n[axes]\nettta = [0, 1]\n", "axes.ettta", r"axes.ettta is not a parameter of kind 'simulate'.*Did you mean 'eta'\?"),
    Bad("sim-law-arg-typo", _SIM + '[fixed]\nslots = 4\nbatch = 4\nrollouts = 8\nlaw = "lognorm"\n[axes]\nlaw_sigma = [0.5, 1.0]\n', "axes.law_sigma", r"not a parameter of kind 'simulate'; it takes .*law_s, law_scale"),
    Bad("sim-law-unknown", _SIM + '[fixed]\nslots = 4\nbatch = 4\nrollouts = 8\nlaw = "lognormal"\n', "fixed.law", r"fixed.law: law='lognormal' is not a continuous scipy.stats distribution"),
    Bad("sim-fixed-seed", _SIM + "[fixed]\nslots = 4\nbatch = 4\nrollouts = 8\nseed = 3\n", "fixed.seed", r"the seed of every cell comes from the sweep"),
    Bad("sim-slowdown", _SIM + '[fixed]\nslots = 4\nbatch = 4\nrollouts = 8\nslowdown = "x"\n', "fixed.slowdown", r"not a parameter of kind 'simulate'"),
    Bad("cf-metric", _CF + 'metrics = ["ratio", "true_mean", "selected_mean", "ratioo"]\n' + _CF_FIXED + "k = 1\n[axes]\nn = [2, 4]\n", "sweep.metrics[3]", r"'ratioo' is not a metric of kind 'closed_form'; it returns true_mean, selected_mean, ratio, total_variation, kl_divergence\. Did you mean 'ratio'\?"),
    Bad("cf-fixed-typo", _CF + _CF_FIXED + "k = 1\nnn = 4\n", "fixed.nn", r"fixed.nn is not a parameter of kind 'closed_form'; it takes function, k, law, .*, n, pmf\."),
    Bad("cf-axis-typo", _CF + _CF_FIXED + "n = 4\n[axes]\nkk = [1, 2]\n", "axes.kk", r"axes.kk is not a parameter of kind 'closed_form'.*Did you mean 'k'\?"),
    Bad("cf-keyword-of-another-function", _CF + '[fixed]\nfunction = "expected_max"\nlaw = "expon"\nn = 4\nk = 1\n', "fixed.k", r"fixed.k is not a parameter of kind 'closed_form'; it takes function, law, law_args, law_loc, law_scale, n, pmf"),
    Bad("cf-function-axis", _CF + '[fixed]\nlaw = "expon"\nn = 4\nk = 1\n[axes]\nfunction = ["length_bias", "expected_max"]\n', "fixed.k", r"fixed.k is not a parameter of kind 'closed_form' with function = 'expected_max'"),
    Bad("cf-missing-keyword", _CF + _CF_FIXED + "[axes]\nn = [2, 4]\n", "fixed.k", r"fixed.k is missing: kind 'closed_form' needs it; add k = VALUE to \[fixed\] or \[axes\]"),
    Bad("sim-missing-field", _SIM + "[fixed]\nslots = 4\nrollouts = 8\n", "fixed.batch", r"fixed.batch is missing: kind 'simulate' needs it"),
    Bad("cf-function-axis-metric", _CF + 'metrics = ["expected_max"]\n[fixed]\nlaw = "expon"\nn = 4\n[axes]\nfunction = ["expected_max", "async_speedup"]\n', "sweep.metrics[0]", r"not a metric of kind 'closed_form' with function = 'async_speedup'; it returns async_speedup"),
    Bad("cf-function-unknown", _CF + '[fixed]\nlaw = "expon"\nn = 4\n[axes]\nfunction = ["expected_max", "expected_min"]\n', "axes.function[1]", r"closed_form has no function 'expected_min'; it offers length_bias"),
    Bad("cf-no-function", _CF + '[fixed]\nlaw = "expon"\nn = 4\n', "fixed.function", r"closed_form needs function = NAME"),
    Bad("cf-no-law", _CF + '[fixed]\nfunction = "expected_max"\nn = 4\n', "fixed.law", r"needs its length law as law = \"NAME\""),
    Bad("cf-pmf-metric", _CF + 'metrics = ["selected_pmf_4"]\n[fixed]\nfunction = "selected_pmf"\npmf = [0.5, 0.25, 0.25]\nn = 2\nk = 1\n', "sweep.metrics[0]", r"it returns selected_pmf_1, selected_pmf_2, selected_pmf_3\."),
    Bad("cf-law-args-typo", _CF + '[fixed]\nfunction = "expected_max"\nlaw = "lognorm"\nlaw_args = {sigma = 1.0}\nn = 4\n', "fixed.law_args", r"law='lognorm' has no parameter 'sigma'; it takes s, loc, scale"),
    Bad("busy-metric", '[sweep]\nkind = "busy"\nmetrics = ["mean", "median"]\n[fixed]\ndraws = 10\n', "sweep.metrics[1]", r"'median' is not a metric of kind 'busy'; it returns mean, mean_square"),
]  # fmt: skip


@pytest.mark.parametrize("bad", BAD_KIND_GRIDS, ids=[b.id for b in BAD_KIND_GRIDS])
def test_a_parameter_or_metric_the_kind_does_not_know_is_a_grid_error_naming_its_key_path(
    bad: Bad, tmp_path: Path
) -> None:
    test_a_malformed_grid_fails_naming_the_key_path_and_what_is_allowed(bad, tmp_path)


def test_every_metric_a_kind_declares_is_one_its_cells_return_and_no_more() -> None:
    # the declared metrics are read from the callee; a cell must return exactly those
    from refimpl.sweep.kinds import KINDS, _signature

    cases: list[tuple[str, dict[str, Any]]] = [
        ("busy", {"draws": 3}),
        ("simulate", {"slots": 3, "batch": 2, "rollouts": 6, "mode": "sync"}),
        ("simulate", {"slots": 3, "batch": 2, "rollouts": 6, "law": "expon", "law_scale": 9.0}),
        ("closed_form", {"function": "length_bias", "pmf": [0.5, 0.5], "n": 2, "k": 1}),
        ("closed_form", {"function": "selected_pmf", "pmf": [0.5, 0.5], "n": 2, "k": 1}),
        ("closed_form", {"function": "expected_max", "law": "expon", "n": 3}),
        ("closed_form", {"function": "fluid_steady_state", "law": "expon", "slots": 8, "batch": 4}),
    ]
    for kind, params in cases:
        signature = _signature(kind, params)
        assert signature is not None
        assert set(KINDS[kind](dict(params), 0)) == set(signature.metrics), (kind, params)


def test_the_closed_form_keywords_are_the_keyword_parameters_of_the_functions() -> None:
    import inspect

    import refimpl
    from refimpl.sweep import CLOSED_FORMS

    for name, (_, keywords) in CLOSED_FORMS.items():
        sig = inspect.signature(getattr(refimpl, name))
        assert keywords == tuple(
            p for p, v in sig.parameters.items() if v.kind is inspect.Parameter.KEYWORD_ONLY
        )
    assert CLOSED_FORMS["fluid_steady_state"][1] == ("slots", "batch", "eta")


def test_a_kind_of_your_own_is_not_checked_and_good_grids_still_parse() -> None:
    own = parse_grid(
        {
            "sweep": {"kind": "refimpl.sweep.kinds:busy", "metrics": ["anything"]},
            "fixed": {"whatever": 1},
        }
    )
    assert own.metrics == ("anything",)
    good = parse_grid(
        {
            "sweep": {"kind": "closed_form", "metrics": ["expected_max"]},
            "fixed": {"law": "gamma", "law_a": 2.0},
            "axes": {"function": ["expected_max"], "n": [2, 3]},
        }
    )
    assert good.n_cells == 2


# --- every cell's parameters are checked before the run ----------------------------------------

_SIM_FIXED: dict[str, Any] = {"batch": 2, "rollouts": 8}


@pytest.mark.parametrize(
    ("table", "start"),
    [
        (
            {"sweep": {"kind": "simulate"}, "fixed": _SIM_FIXED, "axes": {"slots": [8, -1]}},
            "axes.slots[1] = -1: slots must be >= 1 (generation slots); got slots=-1.",
        ),
        (
            {"sweep": {"kind": "simulate"}, "fixed": _SIM_FIXED, "axes": {"slots": [-1, 8]}},
            "axes.slots[0] = -1: slots must be >= 1",
        ),
        (
            {
                "sweep": {"kind": "simulate"},
                "fixed": {**_SIM_FIXED, "slots": 0},
                "axes": {"eta": [0]},
            },
            "fixed.slots: slots must be >= 1",
        ),
        (
            {
                "sweep": {"kind": "simulate"},
                "fixed": {**_SIM_FIXED, "slots": 4},
                "axes": {"eta": [0, 1], "mode": ["async", "asnyc"]},
            },
            "axes.mode[1] = 'asnyc': mode must be one of",
        ),
        (
            {"sweep": {"kind": "busy"}, "axes": {"draws": [10, 0]}},
            "axes.draws[1] = 0: draws must be >= 1",
        ),
        (
            {"sweep": {"kind": "busy"}, "axes": {"draws": ["ten", "twenty"]}},
            "axes.draws[0] = 'ten': draws must be",
        ),
    ],
)
def test_a_parameter_value_its_kind_rejects_is_a_grid_error_before_any_cell_runs(
    table: dict[str, Any], start: str
) -> None:
    with pytest.raises(GridError) as caught:
        parse_grid(table)
    assert str(caught.value).startswith(start), str(caught.value)
    assert caught.value.path == start.split(" ", 1)[0].rstrip(":")


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"\xff\xfe[sweep]\n", "is not a TOML text file (byte 0 is not UTF-8)"),
        (b'[sweep]\nkind = "busy"\n\x00', "is not a TOML text file (it holds NUL bytes)"),
        (b'[sweep]\nkind = "busy"\n[axes]\nx = [99999999999999999999]\n', "axes.x[0] must fit"),
        (b'[sweep]\nkind = "busy"\n[fixed]\nn = -99999999999999999999\n', "fixed.n must fit a 64"),
        (
            b'[sweep]\nkind = "busy"\n[axes]\nd = {start = 1, stop = 1e300, step = 1}\n',
            "axes.d.step must give at most 1000000 values (it gives about 1e+300)",
        ),
        (
            b'[sweep]\nkind = "os:sep"\n',
            "sweep.kind: cell kind must be callable; got cell kind='os:sep', which names a str",
        ),
        (
            b'[sweep]\nkind = "refimpl_test_boom:f"\n',
            "module 'refimpl_test_boom' failed while it was imported (RuntimeError: boom)",
        ),
    ],
)
def test_a_grid_file_that_cannot_be_used_is_one_grid_error(
    content: bytes, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "refimpl_test_boom.py").write_text('raise RuntimeError("boom")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    grid = tmp_path / "g.toml"
    grid.write_bytes(content)
    with pytest.raises(GridError) as caught:
        load_grid(grid)
    message = str(caught.value)
    assert says in message, message
    assert "\n" not in message
    assert len(message) < 400


def test_a_directory_is_not_a_grid_file(tmp_path: Path) -> None:
    with pytest.raises(GridError, match="is a directory, not a grid file"):
        load_grid(tmp_path)
