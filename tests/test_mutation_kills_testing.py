"""Pinned behaviours of refimpl.testing that a sampled mutation run (``tools/mutate.py``, seed 2026)
found no fast test holding: each test names the mutant it was seen to fail on."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import Phase, find, settings

import refimpl
from refimpl.cli import main as cli_main
from refimpl.testing._arrays import ArrayBridge
from refimpl.testing._conformance import _literal
from refimpl.testing._engine import Call, Case, Spec
from refimpl.testing._specs_basic import (
    EFFORT,
    INCLUSION,
    MASK,
    _averages_to_k_over_n,
    _between_zero_and_k0,
    _non_increasing,
)
from refimpl.testing._specs_more import (
    DAPO,
    DECAY,
    ESS,
    KIMI,
    L1_EXACT,
    _ess_scale,
    _kimi_flat_group,
    _l1_never_above,
)
from refimpl.testing.check_cli import SPECS as TRACE_SPECS
from refimpl.testing.check_cli import _count, _show_value


def test_an_integer_tensor_is_read_exactly_not_through_float32() -> None:
    # 2**24 + 1 has no float32: read through float32 it becomes 2**24 (mutant: the dtype test of
    # to_numpy negated, which sent integer tensors to the float32 branch meant for bfloat16)
    got = ArrayBridge.to_numpy(torch.tensor([2**24 + 1, -(2**40) - 3], dtype=torch.int64))
    assert got.dtype == np.float64
    assert got.tolist() == [2.0**24 + 1, -(2.0**40) - 3]
    # and the low-precision floats are widened exactly: bfloat16's 1 + 2**-7 is kept
    half = ArrayBridge.to_numpy(torch.tensor([1 + 2**-7], dtype=torch.bfloat16))
    assert half.tolist() == [1 + 2**-7]


# --- the seed-2026 sample of refimpl/testing, classified by helper h15f -----------------------
# The checks of a spec are pinned directly on a Case built by hand (one fixed call, a fixed found
# value), so that a wrong check, a wrong tolerance or a wrong message fails here in milliseconds
# instead of only inside a Hypothesis search that may not reach it.


def _case(spec: Spec, calls: list[Call], found: list[Any], **conventions: Any) -> Case:
    return Case(spec, calls, found, spec.resolve(conventions), "float64")


def test_non_increasing_names_the_rise_exactly() -> None:
    # mutants: `case.calls[0]` -> `calls[1]` (IndexError on the one call) and `y[1:]` -> `y[0:]`
    # in the message (a boolean index of the wrong length)
    call: Call = ((np.array([1.0, 2.0, 3.0]),), {"k0": 1.0, "b_min": 1.0, "tau": 1.0})
    check = _non_increasing("k")
    check(_case(EFFORT, [call], [np.array([1.0, 0.5, 0.25])]))
    with pytest.raises(AssertionError) as raised:
        check(_case(EFFORT, [call], [np.array([1.0, 0.5, 0.9])]))
    assert str(raised.value) == "k increases from [2.] to [3.]: [0.5] -> [0.9]"


def test_the_effort_penalty_may_reach_k0_plus_its_slack_but_not_beyond() -> None:
    # mutant: `k <= top` -> `k < top` (a correct value rounded up to the top refused). The slack
    # is SAFETY·u·k0 + the smallest normal: 8 · 2^-53 · 2 + 2^-1022 for k0 = 2.
    call: Call = ((np.array([1.0]),), {"k0": 2.0, "b_min": 1.0, "tau": 1.0})
    top = 2.0 + 8.0 * 2.0**-53 * 2.0 + 2.0**-1022
    check = _between_zero_and_k0
    check(_case(EFFORT, [call], [np.array([top])]))
    with pytest.raises(AssertionError, match=r"penalties above k0=2\.0"):
        check(_case(EFFORT, [call], [np.array([np.nextafter(top, 3.0)])]))


def test_the_mean_inclusion_probability_is_read_from_the_call() -> None:
    # mutant: `case.calls[0][1]["k"]` -> `case.calls[0][0]["k"]` (a tuple indexed by "k")
    nodes, _ = np.polynomial.legendre.leggauss(8)
    u = (nodes + 1.0) / 2.0
    call: Call = ((u,), {"n": 4, "k": 2})
    check = _averages_to_k_over_n
    check(_case(INCLUSION, [call], [refimpl.inclusion_probability(u, n=4, k=2)]))
    with pytest.raises(AssertionError, match=r"not k/n = 0\.5"):
        check(_case(INCLUSION, [call], [np.full(8, 0.25)]))


def test_the_decay_tolerance_condition_by_hand() -> None:
    # (|s·log γ| + s + 3)·|γ^s|: at s = 2, γ = 1/2: (2 ln 2 + 5)/4; at s = 0: 3
    # mutant: `s * math.log(g)` -> `s / math.log(g)` (2 / ln 2 instead of 2 ln 2)
    call: Call = ((np.array([0.0, 2.0]),), {"gamma": 0.5})
    got = DECAY.condition(call, DECAY.resolve({}), np.array([1.0, 0.25]))
    assert got.tolist() == [3.0, (2.0 * math.log(2.0) + 5.0) / 4.0]


def test_the_ess_of_scaled_weights_compares_the_two_calls() -> None:
    # mutant: `_f(case, 1)` -> `_f(case, 0)` (the ESS of w compared with itself: never fails)
    w = np.array([1.0, 2.0, 3.0])
    calls: list[Call] = [((w,), {}), ((4.0 * w,), {})]
    check = _ess_scale
    ess = 36.0 / 14.0  # (Σw)² / Σw²
    check(_case(ESS, calls, [ess, ess]))
    with pytest.raises(AssertionError, match="ESS of scaled weights differ"):
        check(_case(ESS, calls, [ess, 2.0]))


def test_the_dapo_reference_reads_its_lengths_and_keywords() -> None:
    # mutant: `*call[0]` -> `*call[1]` (the keywords' names passed as lengths)
    call: Call = (
        (np.array([0, 6, 8, 12]),),
        {"max_length": 10, "cache_length": 4, "penalty_factor": 1.0},
    )
    got = DAPO.expected(call, DAPO.resolve({"floor": False}))
    assert got.tolist() == [0.0, 0.0, -0.5, -1.5]


def test_the_dapo_draws_include_the_one_token_and_256_token_buffers() -> None:
    # the buffer is drawn from [1, 256, max_length // 4] with max_length in {1024, 4096, 20480}:
    # 1 and 256 must both come out beside a max_length whose quarter is not 256
    # mutants: the 1 made 2, the 256 made 257 (then 256 only with max_length = 1024)
    draws = DAPO.check("agrees_with_reference").strategy(DAPO.resolve({}))
    once = settings(max_examples=300, database=None, phases=[Phase.generate])
    for cache in (1, 256):

        def drawn(calls: list[Call], cache: int = cache) -> bool:
            kw = calls[0][1]
            return bool(kw["cache_length"] == cache and kw["max_length"] != 1024)

        found = find(draws, drawn, settings=once)
        assert found[0][1]["cache_length"] == cache


def test_the_kimi_tolerance_condition_by_hand() -> None:
    # 2 (max ℓ + 1) / spread + 1 at every entry: lengths 0 and 4 give 2 · 5 / 4 + 1 = 3.5
    # mutant: the final `+ 1` made `+ 0`
    call: Call = ((np.array([[0, 4]]), np.array([[True, False]])), {})
    got = KIMI.condition(call, KIMI.resolve({}), np.zeros((1, 2)))
    assert got.tolist() == [[3.5, 3.5]]


def test_a_flat_batch_must_get_no_kimi_reward() -> None:
    # with scope="batch", a batch whose responses are all equally long has no length signal
    # mutant: `ell == ell.flat[0]` -> `!=` (no batch is ever flat: nothing checked)
    call: Call = ((np.array([[3, 3], [3, 3]]), np.array([[True, False], [True, True]])), {})
    check = _kimi_flat_group
    check(_case(KIMI, [call], [np.zeros((2, 2))], scope="batch"))
    with pytest.raises(AssertionError, match="all equally long got rewards"):
        check(_case(KIMI, [call], [np.array([[0.5, -0.5], [0.5, 0.5]])], scope="batch"))


def test_the_l1_reward_may_not_exceed_one_for_a_correct_answer() -> None:
    # mutant: `case.calls[0][0][1]` -> `case.calls[0][-1][1]` (the keywords indexed by 1)
    call: Call = ((np.array([5, 5]), np.array([True, False]), np.array([5, 9])), {"alpha": 0.01})
    check = _l1_never_above
    check(_case(L1_EXACT, [call], [np.array([1.0, -0.04])]))
    with pytest.raises(AssertionError, match=r"rewards above 1\[correct\]: \[0\.5\]"):
        check(_case(L1_EXACT, [call], [np.array([1.0, 0.5])]))


def test_a_reproduction_writes_one_and_two_tuples_as_python_does() -> None:
    # mutant: `len(value) == 1` -> `!=` ("(1)" for a 1-tuple, "(1, 2,)" for a pair)
    assert _literal((1,)) == "(1,)"
    assert _literal((1, 2.5)) == "(1, 2.5)"


def test_an_unknown_convention_value_is_refused_by_name() -> None:
    # mutant: the `raise invalid(...)` of Convention.validate removed (the value passed through)
    with pytest.raises(ValueError, match=r"conventions\['staleness_count'\] must be one of"):
        MASK.resolve({"staleness_count": "sometimes"})


def test_assert_close_raises_with_the_entries_and_the_tolerance() -> None:
    # mutant: the `raise AssertionError(...)` of Case.assert_close removed
    call: Call = ((np.array([1.0, 2.0]),), {"k0": 1.0, "b_min": 1.0, "tau": 1.0})
    case = _case(EFFORT, [call], [np.zeros(2)])
    case.assert_close(np.array([1.0, 2.0]), np.array([1.0, 2.0]), 1.0)
    with pytest.raises(AssertionError) as raised:
        case.assert_close(np.array([1.0, 2.5]), np.array([1.0, 2.0]), 1.0, "k")
    allowed = 8.0 * 2.0**-53 * 1.0 + 2.0**-1022
    assert str(raised.value) == (
        f"k differ from the reference at 1 of 2 entries (first at [(1,)]): found [2.5], expected "
        f"[2.0] (allowed error [{allowed!r}]; tolerance 8·u·condition, u = 1.11e-16 (float64))"
    )


def test_an_unknown_dtype_string_is_refused() -> None:
    # mutant: `not isinstance(dtype, str) or dtype not in DTYPES` -> `and` (a string outside
    # DTYPES accepted)
    with pytest.raises(ValueError, match="dtype must be one of"):
        ArrayBridge(dtype="float8")


# --- refimpl check (check_cli), in-process ---------------------------------------------------


def test_a_logged_array_is_shown_as_a_list() -> None:
    # mutant: `"[" + ", ".join(...)` -> `-` (a TypeError whenever a list input is shown)
    assert _show_value(np.array([1, 2.5])) == "[1, 2.5]"


def test_max_show_accepts_zero_and_refuses_a_negative_count() -> None:
    # mutant: `value < 0` -> `value <= 0` (--max-show 0, "show no rows", refused)
    assert _count("0") == 0
    with pytest.raises(argparse.ArgumentTypeError, match="must be >= 0; got -1"):
        _count("-1")


def test_the_inclusion_trace_tolerance_condition_by_hand() -> None:
    # n·(|π| + 1e-3): 4 · 0.501 and 4 · 0.001; mutant: `p["n"] * (...)` -> `/`
    got = TRACE_SPECS["inclusion_probability"].condition({}, {"n": 4, "k": 2}, np.array([0.5, 0.0]))
    assert got.tolist() == [4 * (0.5 + 1e-3), 4 * 1e-3]


def test_the_report_records_the_largest_error_of_a_mismatching_trace(tmp_path: Path) -> None:
    # rows: w = 1 (right), 1.5 for 1 (off by 0.5), 0.25 for e^-1 (off by 0.118): the largest is 0.5
    # mutant: `if bad.size:` negated (the largest error then stays 0.0 on a failing trace)
    trace, report = tmp_path / "t.csv", tmp_path / "r.json"
    trace.write_text("logp_target,logp_behavior,weight\n0,0,1.0\n0,0,1.5\n-1,0,0.25\n")
    argv = ["check", str(trace), "--spec", "tis", "--param", "cap=2", "--report", str(report)]
    assert cli_main(argv) == 1
    got = json.loads(report.read_text())
    assert (got["rows"], got["mismatches"], got["max_abs_error"]) == (3, 2, 0.5)


def test_a_fractional_staleness_in_a_diagnostics_trace_is_unusable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # mutant: the `raise InvalidArgument(...)` for a staleness that is not a whole number removed
    trace = tmp_path / "d.csv"
    trace.write_text('staleness,weight,kept_fraction\n"[0, 1.5]","[1, 1]",1.0\n')
    assert cli_main(["check", str(trace), "--spec", "masking_diagnostics"]) == 2
    err = capsys.readouterr().err
    assert "staleness must hold whole numbers >= 0 (versions behind); row 0 has [0.  1.5]." in err
