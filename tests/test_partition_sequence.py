"""Partition invariance of a loss with one ratio per sequence (``ratio="sequence"``).

TRL's ``RLOOTrainer`` applies PPO-clip to the sequence-likelihood ratio
``S_b = exp(Σ_t m·(logp − logp_old))``: every valid token of a row gets the gradient ``−A_b·S_b``
times the row's weight, which the token-level reference (``−A·ρ_t`` per token) cannot express.
Torch candidates in that style: the global sequence mean passes against the sequence reference and
fails against the token one; a micro-batch mean divided by the accumulation steps fails a global
rule, is named by the diagnosis, and passes as its own (split) rule with the hand-worked workload
gap; and the token-level default is untouched.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from _wrong_variants import rejects

from refimpl.errors import InvalidArgument
from refimpl.losses.partition import ScalingRule
from refimpl.testing._partition import (
    STATED_WORKLOAD,
    PartitionCase,
    check_partition_invariance,
    partition_case_outcome,
    split_dependence,
)

LOCAL_MEAN = ScalingRule("local", "mean", "mean", False, "local_rows")


def _sequence_loss(logp: Any, logp_old: Any, advantages: Any, mask: Any) -> Any:
    """−A·S per row, S = exp(Σ_t m·(logp − logp_old)), 0 for a row without a valid token."""
    log_ratio = ((logp - logp_old) * mask).sum(dim=1)
    return -advantages * torch.exp(log_ratio) * (mask.sum(dim=1) > 0)


def global_sequence_mean(
    logp: Any, logp_old: Any, advantages: Any, mask: Any, *, global_sequences: Any, world_size: Any
) -> Any:
    """Every row over the step's sequence count, times the ranks (the all-reduce averages)."""
    return _sequence_loss(logp, logp_old, advantages, mask).sum() / global_sequences * world_size


def local_sequence_mean(
    logp: Any, logp_old: Any, advantages: Any, mask: Any, *, accumulation_steps: Any
) -> Any:
    """TRL's RLOO form: the micro-batch's rows averaged, divided by the accumulation steps."""
    return _sequence_loss(logp, logp_old, advantages, mask).mean() / accumulation_steps


def _run(candidate: Any, **options: Any) -> Any:
    return check_partition_invariance(
        candidate, mode="seq_mean_token_mean", dtype="float64", max_examples=25,
        empty_rows="counted", **options,
    )  # fmt: skip


def test_the_global_sequence_mean_passes_against_the_sequence_reference() -> None:
    report = _run(global_sequence_mean, ratio="sequence")
    report.raise_if_failed()


def test_the_token_reference_cannot_check_a_sequence_ratio() -> None:
    report = _run(global_sequence_mean)  # ratio="token": −A·ρ_t per token is another loss
    assert report["gradient"].status == "failed"


def test_a_local_mean_fails_a_global_rule_and_is_named() -> None:
    report = _run(local_sequence_mean, ratio="sequence", rule="verl")
    assert not report.ok
    message = report["gradient"].message
    assert "local denominators, micro-batches mean, ranks mean" in message, message


def test_the_local_mean_passes_as_its_own_rule_and_reports_the_split() -> None:
    report = _run(local_sequence_mean, ratio="sequence", rule=LOCAL_MEAN)
    report.raise_if_failed()
    assert report.intent == "split"


def test_the_workload_gap_by_hand() -> None:
    # the stated workload: 2 ranks × 2 steps holding 3, 1, 2 and 2 rows of 8; the lone row weighs
    # 1/(1·K·R) = 1/4 against 1/8 in the full batch (+100 %), the rows of three 1/12 (−33 %)
    gap = split_dependence(
        local_sequence_mean, mode="seq_mean_token_mean", rule=LOCAL_MEAN, dtype="float64",
        empty_rows="counted", ratio="sequence",
    )  # fmt: skip
    assert gap == pytest.approx(1.0, rel=1e-12)
    invariant = split_dependence(
        global_sequence_mean, mode="seq_mean_token_mean", rule="verl", dtype="float64",
        empty_rows="counted", ratio="sequence",
    )  # fmt: skip
    assert invariant == pytest.approx(0.0, abs=1e-12)


def _one_case() -> PartitionCase:
    return STATED_WORKLOAD


def sequence_gradient_agrees(candidate: Any) -> None:
    """The property: on the stated workload, the candidate's step gradient is the full-batch
    sequence-mean gradient (global rule)."""
    out = partition_case_outcome(
        candidate, _one_case(), mode="seq_mean_token_mean", rule="verl", dtype="float64",
        empty_rows="counted", ratio="sequence",
    )  # fmt: skip
    assert out.failed == "", out.message


def test_the_sequence_reference_rejects_a_token_ratio_candidate() -> None:
    def token_ratio(
        logp: Any, logp_old: Any, advantages: Any, mask: Any, *, global_sequences: Any,
        world_size: Any,
    ) -> Any:  # fmt: skip
        """Wrong: the token-level ratio, averaged per row (a GRPO seq-mean-token-mean)."""
        per_token = -advantages[:, None] * torch.exp(logp - logp_old) * mask
        rows = per_token.sum(dim=1) / mask.sum(dim=1).clamp(min=1)
        return rows.sum() / global_sequences * world_size

    sequence_gradient_agrees(global_sequence_mean)
    rejects(sequence_gradient_agrees, token_ratio)


def test_an_unknown_ratio_is_refused_by_name() -> None:
    with pytest.raises(InvalidArgument, match="ratio must be one of"):
        _run(global_sequence_mean, ratio="row")


def test_the_token_default_keeps_its_reproduction() -> None:
    """A token-level failure's reproduction has no ratio keyword (as before the option)."""

    def local_token_mean(logp: Any, logp_old: Any, advantages: Any, mask: Any, **_: Any) -> Any:
        loss = -advantages[:, None] * torch.exp(logp - logp_old)
        return (loss * mask).sum() / mask.sum().clamp(min=1)

    report = check_partition_invariance(local_token_mean, mode="token_mean", max_examples=20)
    assert not report.ok
    assert "'ratio'" not in report["gradient"].reproduction
    assert "'rule': 'verl'" in report["gradient"].reproduction
    assert np.isfinite(report.max_gap)
