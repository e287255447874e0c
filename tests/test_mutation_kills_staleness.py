"""Pinned behaviours of refimpl.staleness that a sampled mutation run (``tools/mutate.py``, seed
101) found no test holding: each test names the mutant it was seen to fail on."""

from __future__ import annotations

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
