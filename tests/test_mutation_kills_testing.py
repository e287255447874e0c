"""Pinned behaviours of refimpl.testing that a sampled mutation run (``tools/mutate.py``, seed 2026)
found no fast test holding: each test names the mutant it was seen to fail on."""

from __future__ import annotations

import argparse
import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import Phase, find, settings
from hypothesis.errors import NoSuchExample

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
    _admission_calls,
    _ess_scale,
    _kimi_flat_group,
    _l1_never_above,
)
from refimpl.testing._specs_weights import SPECS as WEIGHT_SPECS
from refimpl.testing._specs_weights import _from_call, _layout_hint, _padded_draw
from refimpl.testing._traces import _csv_blocks
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
    # the first line: pytest adds its own explanation below when it rewrites the module's asserts
    assert str(raised.value).split("\n")[0] == "k increases from [2.] to [3.]: [0.5] -> [0.9]"


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
    condition = TRACE_SPECS["inclusion_probability"].condition
    assert condition is not None
    got = condition({}, {"n": 4, "k": 2}, np.array([0.5, 0.0]))
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


# --- the importance-weight specs (_specs_weights) ---------------------------------------------

_TIS = next(s for s in WEIGHT_SPECS if s.name == "tis")
_TIS_SEQUENCE = next(s for s in WEIGHT_SPECS if s.name == "tis_sequence")


def test_the_token_weight_tolerance_condition_by_hand() -> None:
    # per token (|d| + 1 + 3)·|w|: |d| + 1 bounds the rounding of d = log π − log μ (in u), + 3
    # for exp, the comparison with the cap and the cast; d = 1 and -1/2 give 5e and 4.5 e^-1/2
    # mutant: `err + 3.0` -> `err - 3.0` (|2 − 3|·e = e at d = 1)
    conv = _TIS.resolve({"inputs": "log_ratio"})
    call: Call = ((np.array([[1.0, -0.5]]),), {"cap": 4.0, "mask": np.ones((1, 2))})
    w = np.exp(np.array([[1.0, -0.5]]))
    got = _TIS.condition(call, conv, w)
    np.testing.assert_allclose(got, [[5.0 * w[0, 0], 4.5 * w[0, 1]]], rtol=1e-15, atol=0.0)


def test_a_packed_call_is_unpacked_to_padded_rows() -> None:
    # cu_seqlens [0, 2, 3]: rows of 2 and 1 tokens, padded to T = 2 (log-ratio inputs: behavior 0)
    # mutant: `return out[0], out[1], ...` -> `out[1], out[1]` (the target replaced by zeros)
    conv = {**_TIS.resolve({"inputs": "log_ratio"}), "layout": "packed"}
    call: Call = ((np.array([0.5, -1.0, 2.0]),), {"cap": 2.0, "cu_seqlens": np.array([0, 2, 3])})
    target, behavior, mask, params = _from_call(call, conv)
    assert target.tolist() == [[0.5, -1.0], [2.0, 0.0]]
    assert behavior.tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert mask.tolist() == [[1.0, 1.0], [1.0, 0.0]]
    assert params == {"cap": 2.0}


def test_a_b1_output_for_b_gets_the_one_layout_hint() -> None:
    # a sequence weight returned as (B, 1) where the conventions say (B,): one layout fits
    # mutant: `len(named) == 1` -> `== 0` ("one of these layouts is" for a single layout)
    call: Call = (
        (np.array([[1.0, -0.5], [0.2, 0.0]]),),
        {"cap": 4.0, "mask": np.array([[1.0, 1.0], [1.0, 0.0]])},
    )
    case = _case(_TIS_SEQUENCE, [call], [np.zeros((2, 1))])
    assert _layout_hint(case) == ": pass conventions={'output': 'B1'} if that layout is intended"


def test_the_weight_draws_reach_eight_tokens_and_a_long_single_row() -> None:
    # short batches are (1..3, 1..8); long ones (1..2, 4096)
    # mutants: `st.integers(1, 8)` -> `(1, 7)`, the long batch `st.integers(1, 2)` -> `(2, 2)`
    conv = _TIS.resolve({})
    once = settings(max_examples=300, database=None, phases=[Phase.generate])
    short = find(_padded_draw("tis", conv), lambda d: d[2].shape[1] == 8, settings=once)
    assert short[2].shape[1] == 8
    long = find(_padded_draw("tis", conv, long=True), lambda d: d[2].shape[0] == 1, settings=once)
    assert long[2].shape == (1, 4096)


def test_admission_draws_counting_versions_spanned_never_use_eta_zero() -> None:
    # counting versions spanned, η = 0 admits nothing, so η is drawn from 1..8 (0..8 otherwise)
    # mutant: `low = 1 if ... else 0` with the 1 made 0
    once = settings(max_examples=100, database=None, phases=[Phase.generate])
    spanned = _admission_calls({"staleness_count": "versions_spanned"})
    with pytest.raises(NoSuchExample):
        find(spanned, lambda calls: calls[0][1]["eta"] < 1, settings=once)
    behind = _admission_calls({"staleness_count": "versions_behind"})
    assert find(behind, lambda calls: calls[0][1]["eta"] == 0, settings=once)[0][1]["eta"] == 0


def test_kimi_draws_are_well_formed_groups() -> None:
    # (1..3 problems) x (1..6 responses), lengths 0..4096; half the draws make problem 0 flat
    # mutant: the flat row copied from `ell[0, 1]` (an IndexError for one response per problem)
    once = settings(max_examples=100, database=None, phases=[Phase.generate])
    draws = KIMI.check("zero_without_length_spread").strategy(KIMI.resolve({}))

    def malformed(calls: list[Call]) -> bool:
        ell, correct = calls[0][0]
        rows, n = ell.shape
        return not (1 <= rows <= 3 and 1 <= n <= 6 and correct.shape == ell.shape)

    with pytest.raises(NoSuchExample):
        find(draws, malformed, settings=once)
    one = find(draws, lambda calls: calls[0][0][0].shape[1] == 1, settings=once)
    assert one[0][0][0].shape[1] == 1


def test_l1_target_lengths_stay_within_1_to_8192() -> None:
    # mutant: the target's upper bound 8192 made 8193
    once = settings(max_examples=100, database=None, phases=[Phase.generate])
    draws = L1_EXACT.check("agrees_with_reference").strategy(L1_EXACT.resolve({}))
    with pytest.raises(NoSuchExample):
        find(draws, lambda calls: bool(calls[0][0][2].max(initial=1) > 8192), settings=once)


def test_divided_by_e_allows_the_sum_of_both_calls_rounding() -> None:
    # k0 = 1, b_min = 1, τ = 1 at b = 1 and b + τ = 2: k = 1 and 1/e. The conditions
    # (|b| + |b_min|)/τ + 2|x| + 3, times k, are 5 and 8/e, so e·k(b + τ) may differ from k(b)
    # by 8·u·(5 + e · 8/e) = 104 u. A value 60 u off passes, one 150 u off fails.
    # mutant (not in the seed-2026 sample, the known hole): `+ math.e *` -> `- math.e *`
    # (|5 − 8| = 3: 24 u allowed, so the 60 u value is refused)
    p = {"k0": 1.0, "b_min": 1.0, "tau": 1.0}
    calls: list[Call] = [((np.array([1.0]),), p), ((np.array([2.0]),), p)]
    u = 2.0**-53
    check = EFFORT.check("divided_by_e_per_tau").function
    probe = _case(EFFORT, calls, [np.array([1.0]), np.array([1.0 / math.e])])
    np.testing.assert_allclose(probe.condition(0), [5.0], rtol=1e-15)
    np.testing.assert_allclose(probe.condition(1), [8.0 / math.e], rtol=1e-15)
    check(_case(EFFORT, calls, [np.array([1.0]), np.array([(1.0 + 60 * u) / math.e])]))
    with pytest.raises(AssertionError, match=r"e·k\(b \+ tau\) vs k\(b\) differ"):
        check(_case(EFFORT, calls, [np.array([1.0]), np.array([(1.0 + 150 * u) / math.e])]))


def test_each_weight_family_has_its_own_conventions() -> None:
    # TIS: `lower`; masked IS: `band_on` and `weight`; decoupled PPO: `above_cap` and `lower`
    # mutant: `family == "tis"` negated in _conventions (TIS gets PPO's keys, the others TIS's)
    keys = {s.name: set(s.resolve({})) for s in WEIGHT_SPECS}
    common = {"padding", "log_ratio_clamp", "nonfinite", "inputs", "layout", "compute_dtype"}
    common |= {"empty_rows", "empty_batch"}
    assert keys["tis"] == common | {"lower"}
    assert keys["masked_is"] == common | {"band_on", "weight"}
    assert keys["decoupled_ppo"] == common | {"above_cap", "lower"}


def test_a_csv_block_is_extended_to_the_end_of_a_quoted_field_over_three_lines() -> None:
    # the first 7 bytes end inside the quoted field "x⏎y⏎z": the block is extended line by line
    # until the quotes are even again, so the field is never split between blocks
    # mutant: `if not more: break` -> `if not not more: break` (stops after one extra line)
    # (the mutant also loops forever at the end of a file with an open quote: the handle refuses
    # a second read past the end instead of hanging the test)
    data = b'a,b\n1,"x\ny\nz"\n2,3\n'
    assert list(_csv_blocks(_EndsOnce(data), 7)) == [b'a,b\n1,"x\ny\nz"\n', b"2,3\n"]


class _EndsOnce(io.BytesIO):
    """A file that fails a test reading past its end a second time (instead of looping)."""

    ends = 0

    def readline(self, size: int | None = -1) -> bytes:
        line = super().readline(size)
        if not line:
            self.ends += 1
            assert self.ends <= 1, "read past the end of the file twice"
        return line


def _tis_case(found: Any) -> Case:
    call: Call = ((np.array([[1.0, -0.5]]),), {"cap": 2.0, "mask": np.ones((1, 2))})
    return _case(_TIS, [call], [found], inputs="log_ratio")


def test_tis_weights_above_the_cap_are_not_compared_with_the_ratio() -> None:
    # ratios e ≈ 2.72 (above the cap 2: the weight is 2, not the ratio) and e^-1/2 (below: itself)
    # mutant: `fam.family == "tis"` -> `!=` in equals_ratio (the capped entry compared with e)
    check = _TIS.check("equals_ratio_below_cap").function
    check(_tis_case(np.array([[2.0, math.exp(-0.5)]])))
    with pytest.raises(AssertionError, match="kept weights vs the ratio differ"):
        check(_tis_case(np.array([[2.0, 0.5]])))


def test_a_negative_weight_is_refused_and_positive_ones_pass() -> None:
    # mutant: `np.all(w >= 0)` -> `np.all(w <= 0)` (every positive weight refused)
    check = _TIS.check("finite_and_non_negative").function
    check(_tis_case(np.array([[2.0, math.exp(-0.5)]])))
    with pytest.raises(AssertionError, match="negative weights"):
        check(_tis_case(np.array([[2.0, -0.5]])))
