"""Pinned behaviours of refimpl.staleness that a sampled mutation run (``tools/mutate.py``, seed
101) found no test holding: each test names the mutant it was seen to fail on."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import refimpl


def test_decoupled_weights_take_ratio_one_at_a_non_finite_log_probability() -> None:
    # the shape-free path of nonfinite="one" (mutant: names[1] -> names[2] there, an IndexError)
    lp, lq = np.log([0.5, 0.5]), [np.log(0.25), -np.inf]
    assert refimpl.decoupled_ppo_weights(lp, lq, cap=5.0, nonfinite="one").tolist() == [2.0, 1.0]


def test_a_mode_outside_the_choices_is_refused() -> None:
    # mutants: the `or` of the choice check made `and`, and its raise removed
    with pytest.raises(
        ValueError, match=r"nonfinite must be one of 'error', 'one'; got nonfinite='zero'"
    ):
        refimpl.decoupled_ppo_weights([0.0], [0.0], nonfinite="zero")  # type: ignore[arg-type]


def test_tied_publication_times_are_allowed_and_name_the_first_out_of_order_entry() -> None:
    # non-decreasing, not increasing: two versions published at once
    got = refimpl.policy_version([0.5, 1.0, 1.5, 2.5], publish_times=[1.0, 1.0, 2.0])
    assert got.tolist() == [0.0, 0.0, 2.0, 3.0]
    # mutant: first + 1 -> first + 2 in the fix
    with pytest.raises(ValueError, match=r"publish_times\[2\] < publish_times\[1\]; sort them"):
        refimpl.policy_version([0.5], publish_times=[1.0, 3.0, 2.0])
    # a tie before the fault is not the fault (mutant: the index found with diff <= 0)
    with pytest.raises(ValueError, match=r"publish_times\[3\] < publish_times\[2\]; sort them"):
        refimpl.policy_version([0.5], publish_times=[1.0, 1.0, 3.0, 2.0])


def test_a_mask_beside_one_version_per_sample_is_refused() -> None:
    # mutant: the raise removed (the mask was then silently broadcast)
    with pytest.raises(ValueError, match=r"mask must be None when token_versions is 1-D"):
        refimpl.sample_staleness(3, [1, 2], mask=[1, 1])


def test_a_negative_trainer_step_per_sample_is_refused() -> None:
    # the per-sample branch of the check (mutant: its raise removed)
    with pytest.raises(ValueError, match=r"trained_step must be >= 0"):
        refimpl.sample_staleness([-1, 2], [0, 1])


@pytest.mark.parametrize(
    ("name", "value", "rule"),
    [("version", -1, ">= 0"), ("accepted", -1, ">= 0"), ("max_concurrent", 0, ">= 1")],
)
def test_admission_capacity_refuses_the_first_value_below_each_minimum(
    name: str, value: int, rule: str
) -> None:
    # mutants: each minimum lowered by one; the boundary values themselves are accepted
    args: dict[str, Any] = {"eta": 1, "version": 0, "batch": 4, "accepted": 0, "running": 3}
    assert refimpl.admission_capacity(**args, max_concurrent=1) == -2
    args["max_concurrent"] = 16
    with pytest.raises(ValueError, match=rf"{name} must be {rule}"):
        refimpl.admission_capacity(**{**args, name: value})


def test_a_sequence_weight_clamped_at_the_token_clips_each_token_first() -> None:
    # tokens 3, -1, 0 at clamp 1: clipped per token they sum to 0 (weight 1); clamped at the level,
    # the sum 2 becomes 1 (weight e). Mutant: the per-token clip applied only at token level.
    lp, lq = np.array([[3.0, -1.0, 0.0]]), np.zeros((1, 3))
    kw: dict[str, Any] = {"low": 0.0, "high": 100.0, "level": "sequence", "log_ratio_clamp": 1.0}
    assert refimpl.masked_is_weights(lp, lq, **kw, clamp_at="token").tolist() == [1.0]
    assert refimpl.masked_is_weights(lp, lq, **kw, clamp_at="level").tolist() == [math.e]


def test_vtrace_refuses_no_time_step_and_a_v_tm1_of_another_shape() -> None:
    zero = np.zeros(0)
    # mutant: the T = 0 check compared with -1
    with pytest.raises(ValueError, match=r"v_tm1 must have at least one time step"):
        refimpl.vtrace(zero, zero, zero, zero, zero)
    # mutant: every array compared with rho_tm1 instead of v_tm1 (v_tm1 itself then never is)
    three = np.ones(3)
    with pytest.raises(ValueError, match=r"v_tm1 and v_t must have the same shape"):
        refimpl.vtrace(np.zeros(1), three, three, three, three)
    one_step = refimpl.vtrace([0.0], [1.0], [0.5], [1.0], [1.0])  # T = 1 is allowed
    assert one_step.errors.tolist() == [1.5]


def test_effective_sample_size_as_a_fraction_divides_by_the_count() -> None:
    # (Σw)²/Σw² = 16/6 for w = (1, 1, 2); as a fraction of n = 3: 8/9 (mutant: times n)
    assert refimpl.effective_sample_size([1.0, 1.0, 2.0]) == pytest.approx(8 / 3, rel=1e-15)
    got = refimpl.effective_sample_size([1.0, 1.0, 2.0], ess="fraction")
    assert got == pytest.approx(8 / 9, rel=1e-15)


def test_masking_diagnostics_without_lengths_have_empty_length_tables() -> None:
    # mutant: the edges made np.empty(1), one uninitialised edge
    d = refimpl.masking_diagnostics([0, 1, 2], [1.0, 1.0, 0.0])
    assert d.length_edges.shape == (0,)
    assert d.keep_rate_by_length.shape == (0,)
    assert d.count_by_length.shape == (0,)
