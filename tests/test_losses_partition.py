"""Partition invariance: effective weights of a split, the gap, and the candidate driver.

The driver is run against real torch (and jax) candidates written in the frameworks' style:
the global forms pass, the classic per-micro-batch token mean fails with a message that says
what is wrong and how to fix it, and every property here is also run against a wrong variant.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

from refimpl.losses.aggregation import AGGREGATION_MODES, aggregation_weights
from refimpl.losses.partition import (
    SCALING_RULES,
    ScalingRule,
    partition_gap,
    split_weights,
)
from refimpl.testing._partition import (
    PartitionCase,
    check_partition_invariance,
    partition_case_outcome,
    partition_cases,
    split_dependence,
)

Array = NDArray[np.float64]
Weights = Callable[..., Array]
H = 6

MASK = np.array([[1, 1, 1], [1, 0, 0], [1, 1, 0], [0, 0, 0]], dtype=np.float64)


def _options(mode: str, case: PartitionCase) -> dict[str, Any]:
    out: dict[str, Any] = {"constant": H} if mode == "token_sum_norm" else {}
    if mode == "group_mean":
        out["group"] = case.group
    return out


# ---------------------------------------------------------------------------------------------
# split_weights and partition_gap
# ---------------------------------------------------------------------------------------------


def test_split_weights_by_hand() -> None:
    split = [[[0], [1]], [[2, 3], []]]  # 2 ranks x 2 micro-batches; tokens 3, 1 | 2, 0
    verl = split_weights(MASK, splits=split, mode="token_mean", rule="verl")
    np.testing.assert_array_equal(verl, aggregation_weights(MASK, mode="token_mean"))
    local = split_weights(MASK, splits=split, mode="token_mean", rule="trl_bnpo")
    # 1/(R K N_m): 1/(4*3), 1/(4*1), 1/(4*2), and nothing from the empty micro-batch
    assert local[0, 0] == 1 / 12
    assert local[1, 0] == 1 / 4
    assert local[2, 0] == 1 / 8
    areal = split_weights(MASK, splits=split, mode="token_mean", rule="areal")
    np.testing.assert_allclose(areal, aggregation_weights(MASK, mode="token_mean"), rtol=1e-15)
    across = ScalingRule("across_ranks", "mean", "mean", False)
    pooled = split_weights(MASK, splits=split, mode="token_mean", rule=across)
    # step 0 pools rows {0, 2, 3}: 5 tokens; step 1 pools row {1}: 1 token
    assert pooled[0, 0] == 1 / (4 * 5)
    assert pooled[1, 0] == 1 / 4


def _check_global_rules_are_invariant(weights: Weights, rule: str) -> Callable[[], None]:
    @given(case=partition_cases(), mode=st.sampled_from(AGGREGATION_MODES))
    def check(case: PartitionCase, mode: str) -> None:
        options = _options(mode, case)
        eff = weights(case.mask, splits=case.splits, mode=mode, rule=rule, **options)
        full = aggregation_weights(case.mask, mode=mode, **options)
        np.testing.assert_allclose(eff, full, rtol=1e-13, atol=0.0)

    return check


@pytest.mark.parametrize("rule", ["verl", "openrlhf", "skyrl", "trl_dapo"])
def test_global_rules_give_the_full_batch_weights_for_every_split(rule: str) -> None:
    run_property(_check_global_rules_are_invariant(split_weights, rule))


def test_the_invariance_property_rejects_local_denominators() -> None:
    rejects(_check_global_rules_are_invariant(split_weights, "trl_bnpo"))
    rejects(_check_global_rules_are_invariant(split_weights, "skyrl_token_mean_legacy"))


def _local_equals_global_iff_equal_counts(weights: Weights) -> Callable[[], None]:
    @given(case=partition_cases())
    def check(case: PartitionCase) -> None:
        eff = weights(case.mask, splits=case.splits, mode="token_mean", rule="local_mean")
        full = aggregation_weights(case.mask, mode="token_mean")
        counts = [int(case.mask[mb].sum()) for rank in case.splits for mb in rank]
        equal = len(set(counts)) == 1
        assert np.allclose(eff, full, rtol=1e-13, atol=0.0) == equal

    return check


def _areal_labelled_local(mask: Any, *, splits: Any, mode: str, rule: Any, **kw: Any) -> Array:
    """Wrong: a token-share rule (invariant) in place of the local mean."""
    return split_weights(mask, splits=splits, mode=mode, rule="areal", **kw)


def test_local_token_mean_is_global_iff_every_micro_batch_has_equal_tokens() -> None:
    run_property(_local_equals_global_iff_equal_counts(split_weights))
    rejects(_local_equals_global_iff_equal_counts(_areal_labelled_local))


def test_partition_gap_reports_the_classic_dependence() -> None:
    split = [[[0], [1]], [[2, 3], []]]
    gap = partition_gap(MASK, splits=split, mode="token_mean", rule="trl_bnpo")
    assert gap.intent == "global"
    assert not gap.invariant
    # N = 6: ratios 6/(4*3), 6/(4*1), 6/(4*2)
    np.testing.assert_allclose(gap.sequence_ratio, [0.5, 1.5, 0.75, 1.0])
    assert gap.max_relative_difference == pytest.approx(0.5)
    assert "own token count" in gap.dependence
    assert "rank 0 micro-batch 1: x1.5" in gap.dependence
    ok = partition_gap(MASK, splits=split, mode="token_mean", rule="verl")
    assert ok.invariant
    assert ok.dependence == ""
    assert ok.max_relative_difference == 0.0


def test_partition_gap_states_the_sequence_mean_dependence_as_split() -> None:
    split = [[[0], [1, 2, 3]]]  # one rank, micro-batches of 1 and 2 counted sequences
    gap = partition_gap(MASK, splits=split, mode="seq_mean_token_mean", rule="trl_grpo")
    assert gap.intent == "split"
    # S = 3 counted sequences: micro-batch 0 weights 1/(2*1), micro-batch 1 1/(2*2)
    np.testing.assert_allclose(gap.sequence_ratio[:3], [1.5, 0.75, 0.75])
    assert "same number of counted sequences" in gap.dependence
    equal = partition_gap(
        MASK, splits=[[[0, 3], [1, 2]]], mode="seq_mean_token_mean", rule="trl_grpo"
    )
    assert not equal.invariant  # row 3 is empty: 1 counted sequence against 2
    counted = partition_gap(
        MASK,
        splits=[[[0, 3], [1, 2]]],
        mode="seq_mean_token_mean",
        rule="trl_grpo",
        empty_rows="counted",
    )
    assert counted.invariant  # TRL counts every row: 2 and 2


def test_splits_and_rules_are_validated() -> None:
    assert split_weights(MASK, splits=[[[0, 1, 2, 3]]], mode="token_sum", rule="verl").sum() == 6
    with pytest.raises(ValueError, match=r"splits must hold every row 0..3 exactly once"):
        split_weights(MASK, splits=[[[0, 1, 2]]], mode="token_sum", rule="verl")
    with pytest.raises(ValueError, match=r"splits must hold every row 0..3 exactly once"):
        split_weights(MASK, splits=[[[0, 1, 2, 3, 3]]], mode="token_sum", rule="verl")
    with pytest.raises(ValueError, match=r"give every rank the same number of micro-batches"):
        split_weights(MASK, splits=[[[0, 1]], [[2], [3]]], mode="token_sum", rule="verl")
    with pytest.raises(ValueError, match=r"splits must hold integer row indices in \[0, 4\)"):
        split_weights(MASK, splits=[[[0, 1, 2, 4]]], mode="token_sum", rule="verl")
    with pytest.raises(ValueError, match=r"splits must be a non-empty list of ranks"):
        split_weights(MASK, splits=[], mode="token_sum", rule="verl")
    with pytest.raises(ValueError, match=r"rule must be a ScalingRule or one of the presets"):
        split_weights(MASK, splits=[[[0, 1, 2, 3]]], mode="token_sum", rule="megatron")
    with pytest.raises(ValueError, match=r"token_count must not be passed to split_weights"):
        split_weights(MASK, splits=[[[0, 1, 2, 3]]], mode="token_mean", rule="verl", token_count=9)
    with pytest.raises(ValueError, match=r"denominator must be one of 'global', 'local'"):
        ScalingRule("step")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"world_scale must be a bool"):
        ScalingRule(world_scale=1)  # type: ignore[arg-type]
    assert set(SCALING_RULES) >= {"verl", "trl_dapo", "trl_bnpo", "areal", "skyrl", "openrlhf"}


# ---------------------------------------------------------------------------------------------
# the driver, against torch candidates written like the frameworks
# ---------------------------------------------------------------------------------------------


def _surrogate(logp: Any, logp_old: Any, advantages: Any) -> Any:
    return -advantages[:, None] * torch.exp(logp - logp_old)


def global_token_mean(
    logp: Any, logp_old: Any, advantages: Any, mask: Any, *, global_tokens: int, world_size: int
) -> Any:
    """verl's token-mean with global_batch_info: Σ/N_global × dp_size."""
    return (_surrogate(logp, logp_old, advantages) * mask).sum() / global_tokens * world_size


def local_token_mean(
    logp: Any, logp_old: Any, advantages: Any, mask: Any, *, accumulation_steps: int
) -> Any:
    """The classic error: each micro-batch's own token mean, averaged over micro-batches."""
    per_mb = (_surrogate(logp, logp_old, advantages) * mask).sum() / mask.sum().clamp(min=1.0)
    return per_mb / accumulation_steps


def unclamped_local_mean(logp: Any, logp_old: Any, advantages: Any, mask: Any, **_: Any) -> Any:
    """Local token mean without a clamp: 0/0 on a micro-batch with no valid token."""
    return (_surrogate(logp, logp_old, advantages) * mask).sum() / mask.sum()


def test_the_global_token_mean_passes() -> None:
    report = check_partition_invariance(global_token_mean, mode="token_mean", max_examples=40)
    assert report.ok, report.summary()
    assert report.intent == "global"
    assert [r.status for r in report.results] == ["passed", "passed", "passed"]


def test_the_classic_local_token_mean_fails_and_says_how_to_fix_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = check_partition_invariance(local_token_mean, mode="token_mean", max_examples=40)
    assert not report.ok
    result = report["gradient"]
    assert result.status == "failed"
    assert "local denominators, micro-batches mean, ranks mean" in result.message
    assert "own token count" in result.message
    assert "global count (global_tokens" in result.message
    assert "multiply by world_size" in result.message
    assert "partition_case_outcome(candidate, case" in result.reproduction
    with pytest.raises(AssertionError, match="local denominators"):
        report.raise_if_failed()
    exec(result.reproduction, {})  # the reproduction reruns the counterexample
    assert capsys.readouterr().out.startswith("gradient the accumulated gradient differs")


def test_empty_micro_batches_and_ranks_give_no_nan_in_the_correct_candidate() -> None:
    mask = np.array([[1, 1], [0, 0], [0, 0], [1, 0]], dtype=np.float64)
    logp_old = np.full((4, 2), -1.0)
    case = PartitionCase(
        logp_old + 0.05 * mask,
        logp_old,
        np.array([1.0, -1.0, 0.5, 2.0]),
        mask,
        [[[0], [1]], [[2], [3]]],  # rank 1's first micro-batch, rank 0's second: no token
        np.zeros(4, dtype=np.int64),
    )
    good = partition_case_outcome(global_token_mean, case, mode="token_mean", rule="verl")
    assert good.failed == ""
    assert np.all(np.isfinite(good.grad))
    bad = partition_case_outcome(unclamped_local_mean, case, mode="token_mean", rule="verl")
    assert bad.failed == "finite"
    assert "0/0" in bad.message
    assert "clamp" in bad.message
    allrank = case._replace(mask=np.array([[0, 0], [0, 0], [1, 1], [1, 0]], dtype=np.float64))
    assert (
        partition_case_outcome(global_token_mean, allrank, mode="token_mean", rule="verl").failed
        == ""
    )


def test_an_unclamped_local_mean_is_reported_as_non_finite() -> None:
    report = check_partition_invariance(unclamped_local_mean, mode="token_mean", max_examples=40)
    assert report["finite"].status == "failed"
    assert "0/0" in report["finite"].message


def test_a_sequence_mean_with_local_counts_reports_its_dependence_instead_of_failing() -> None:
    def trl_grpo(
        logp: Any, logp_old: Any, advantages: Any, mask: Any, *, accumulation_steps: int
    ) -> Any:
        loss = _surrogate(logp, logp_old, advantages)
        seq = (loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
        return seq.mean() / accumulation_steps

    report = check_partition_invariance(
        trl_grpo,
        mode="seq_mean_token_mean",
        rule="trl_grpo",
        empty_rows="counted",
        max_examples=30,
    )
    assert report.ok, report.summary()
    assert report.intent == "split"
    assert report.max_gap > 0
    assert "same number of counted sequences" in report.dependence
    assert "depends on the split" in report.summary()


def test_verl_style_wrappers_pass_with_their_epsilon_declared() -> None:
    def verl_seq_mean(
        logp: Any,
        logp_old: Any,
        advantages: Any,
        mask: Any,
        *,
        global_sequences: int,
        world_size: int,
    ) -> Any:
        loss, n = _surrogate(logp, logp_old, advantages), mask.sum(-1)
        seq = (loss * mask).sum(-1) / (n + 1e-8)  # verl's epsilon
        return (seq * (n > 0)).sum() / global_sequences * world_size

    exact = check_partition_invariance(
        verl_seq_mean, mode="seq_mean_token_mean", dtype="float64", max_examples=20
    )
    assert exact["gradient"].status == "failed"  # the epsilon is a 1e-8 relative deviation
    assert "relative difference" in exact["gradient"].message
    loose = check_partition_invariance(
        verl_seq_mean, mode="seq_mean_token_mean", dtype="float64", max_examples=20, rtol=1e-7
    )
    assert loose.ok, loose.summary()

    def dr_grpo(
        logp: Any,
        logp_old: Any,
        advantages: Any,
        mask: Any,
        *,
        global_sequences: int,
        world_size: int,
        constant: float,
    ) -> Any:
        loss = _surrogate(logp, logp_old, advantages)
        return (loss * mask).sum() / (global_sequences * constant) * world_size

    report = check_partition_invariance(dr_grpo, mode="token_sum_norm", constant=H, max_examples=20)
    assert report.ok, report.summary()


def test_the_group_mean_candidate_gets_group_labels_and_token_counts() -> None:
    def prompt_mean(
        logp: Any,
        logp_old: Any,
        advantages: Any,
        mask: Any,
        *,
        global_sequences: int,
        world_size: int,
        group_tokens: Any,
    ) -> Any:
        loss = _surrogate(logp, logp_old, advantages) * mask
        per_row = loss.sum(-1) / group_tokens.clamp(min=1.0)
        return per_row.sum() / global_sequences * world_size

    report = check_partition_invariance(prompt_mean, mode="group_mean", max_examples=20)
    assert report.ok, report.summary()


def test_driver_arguments_are_validated() -> None:
    with pytest.raises(ValueError, match=r"xp must be a library whose autograd refimpl drives"):
        check_partition_invariance(global_token_mean, mode="token_mean", xp="numpy")
    with pytest.raises(ValueError, match=r"mode must be one of"):
        check_partition_invariance(global_token_mean, mode="token-mean")
    with pytest.raises(ValueError, match=r"max_examples must be >= 1"):
        check_partition_invariance(global_token_mean, mode="token_mean", max_examples=0)
    with pytest.raises(ValueError, match=r"constant must be given for mode='token_sum_norm'"):
        check_partition_invariance(global_token_mean, mode="token_sum_norm")
    with pytest.raises(ValueError, match=r"rtol must be >= 0"):
        check_partition_invariance(global_token_mean, mode="token_mean", rtol=-1.0)
    ok = check_partition_invariance(global_token_mean, mode="token_mean", max_examples=1)
    assert ok.ok


#: Run in a fresh interpreter: jax must never be imported in the test process, where its threads
#: make every later ``os.fork`` warn (see tests/test_conformance_jax.py).
JAX_CASE = """
import json
import jax.numpy as jnp
from refimpl.testing import check_partition_invariance

def jax_global_mean(logp, logp_old, advantages, mask, *, global_tokens, world_size):
    loss = -advantages[:, None] * jnp.exp(logp - logp_old)
    return (loss * mask).sum() / global_tokens * world_size

def jax_local_mean(logp, logp_old, advantages, mask, **_):
    loss = -advantages[:, None] * jnp.exp(logp - logp_old)
    return (loss * mask).sum() / jnp.maximum(mask.sum(), 1.0)

runs = {}
for name, candidate in (("global", jax_global_mean), ("local", jax_local_mean)):
    report = check_partition_invariance(
        candidate, mode="token_mean", xp="jax.numpy", max_examples=15
    )
    runs[name] = {"ok": report.ok, "array": report.array, "summary": report.summary()}
print(json.dumps(runs))
"""


def test_a_jax_candidate_is_differentiated_by_jax() -> None:
    done = subprocess.run(
        [sys.executable, "-c", JAX_CASE], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr
    runs = json.loads(done.stdout.splitlines()[-1])
    assert runs["global"]["ok"], runs["global"]["summary"]
    assert runs["global"]["array"] == "jax.numpy float32"
    # the classic local token mean fails under jax's autograd as it does under torch's
    assert not runs["local"]["ok"], runs["local"]["summary"]
    assert "jax" not in sys.modules


def test_a_ppo_clipped_candidate_agrees_on_the_drawn_ratios() -> None:
    def verl_ppo(
        logp: Any, logp_old: Any, advantages: Any, mask: Any, *, global_tokens: int, world_size: int
    ) -> Any:
        ratio = torch.exp(torch.clamp(logp - logp_old, -20.0, 20.0))
        adv = advantages[:, None]
        clipped = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 0.8, 1.28))
        dual = torch.where(adv < 0, torch.minimum(clipped, -adv * 3.0), clipped)
        return (dual * mask).sum() / global_tokens * world_size

    report = check_partition_invariance(verl_ppo, mode="token_mean", max_examples=30)
    assert report.ok, report.summary()


def test_an_areal_style_token_share_candidate_passes() -> None:
    def areal(
        logp: Any, logp_old: Any, advantages: Any, mask: Any, *, global_tokens: int, world_size: int
    ) -> Any:
        local = mask.sum()
        per_mb = (_surrogate(logp, logp_old, advantages) * mask).sum() / local.clamp(min=1.0)
        return per_mb * (local / global_tokens) * world_size

    report = check_partition_invariance(areal, mode="token_mean", rule="areal", max_examples=30)
    assert report.ok, report.summary()


def per_step_token_mean(
    logp: torch.Tensor, logp_old: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *,
    step_tokens: int, accumulation_steps: int, world_size: int,
) -> torch.Tensor:  # fmt: skip
    """A token mean over each accumulation step's tokens summed over the ranks (TRL's async GRPO)."""
    loss = -advantages[:, None] * torch.exp(logp - logp_old)
    return (loss * mask).sum() / max(step_tokens / world_size, 1.0) / accumulation_steps


def per_step_with_the_global_count(
    logp: torch.Tensor, logp_old: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *,
    global_tokens: int, world_size: int,
) -> torch.Tensor:  # fmt: skip
    """The same loss divided by the step's tokens over every micro-batch: invariant."""
    loss = -advantages[:, None] * torch.exp(logp - logp_old)
    return (loss * mask).sum() / (global_tokens / world_size)


def test_a_per_step_count_is_passed_and_named_across_ranks() -> None:
    across = ScalingRule("across_ranks", "mean", "mean", True, "per_step")
    report = check_partition_invariance(
        per_step_token_mean, mode="token_mean", rule=across, dtype="float64", max_examples=25
    )
    assert report["gradient"].status == "failed"
    assert "the rule 'across_ranks denominators, micro-batches mean" in report["gradient"].message
    # on the stated workload the steps hold 37 + 16 = 53 and 21 + 13 = 34 of its 87 tokens
    gap = split_dependence(per_step_token_mean, mode="token_mean", rule=across)
    assert gap == pytest.approx(87 / 68 - 1, rel=1e-12)
    fixed = check_partition_invariance(
        per_step_with_the_global_count, mode="token_mean", rule="verl", dtype="float64",
        max_examples=25,
    )  # fmt: skip
    assert fixed.ok, fixed.summary()


@pytest.mark.parametrize("rule", sorted(SCALING_RULES))
def test_a_step_without_a_counted_token_weighs_nothing(rule: str) -> None:
    """A step with no counted token (all padding, or every token rejected under
    denominator='after_rejection') gets exact zeros of the mask's shape under every rule and mode,
    with no division by its zero token count (warnings are errors here)."""
    mask = np.array([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    splits: list[list[list[int]]] = [[[0, 2], [1]], [[], []]]
    for mode in AGGREGATION_MODES:
        kw: dict[str, Any] = {"constant": 4.0} if mode == "token_sum_norm" else {}
        if mode == "group_mean":
            kw["group"] = [0, 0, 1]
        for m, extra in (
            (np.zeros_like(mask), {}),
            (mask, {"rejection": [0.0, 0.0, 1.0], "denominator": "after_rejection"}),
        ):
            w = split_weights(m, splits=splits, mode=mode, rule=rule, **kw, **extra)
            assert w.shape == mask.shape
            assert w.dtype == np.float64
            assert np.all(w == 0.0), (mode, extra)
