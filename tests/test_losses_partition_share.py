"""The sequence-share accumulation: micro-batch averages weighted by their share of the rank's rows.

SkyRL's policy worker adds its KL and entropy terms to each micro-batch's loss times
``len(microbatch) / len(data)``, ``data`` being the rank's shard. The effective weights are
checked against an exact ``Fraction`` enumeration, by hand and on drawn splits; the partition
gap is shown to vanish exactly where the algebra says it must (and nowhere else); and the
partition check passes a candidate written that way, reports its dependence on the split, and
fails candidates that weigh the micro-batches otherwise. Every property is also run against a
wrong variant.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import torch
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

from refimpl.losses.aggregation import aggregation_weights
from refimpl.losses.partition import (
    SCALING_RULES,
    ScalingRule,
    intent_of,
    partition_gap,
    split_weights,
)
from refimpl.testing._partition import (
    STATED_WORKLOAD,
    PartitionCase,
    check_partition_invariance,
    partition_cases,
    split_dependence,
)

Array = NDArray[np.float64]
Weights = Callable[..., Array]
SHARE = ScalingRule("local", "sequence_share", "mean", False)
MODES = ("token_mean", "seq_mean_token_mean")

MASK = np.array([[1, 1, 1], [1, 0, 0], [1, 1, 0], [0, 0, 0]], dtype=np.float64)


def exact_share_weights(mask: Array, splits: Any, mode: str) -> list[list[Fraction]]:
    """The sequence-share weights in exact arithmetic, every row counted: a token of row b in
    micro-batch k (n_k rows, N_k valid tokens) of rank r (n_r rows) of R ranks weighs
    ``(1/R)(n_k/n_r)/N_k`` (token mean) or ``(1/R)(n_k/n_r)/(n_k T_b)`` (mean of row means)."""
    rows, width = mask.shape
    out = [[Fraction(0)] * width for _ in range(rows)]
    ranks = len(splits)
    for rank in splits:
        n_r = sum(len(mb) for mb in rank)
        for mb in rank:
            if not mb:
                continue
            share = Fraction(len(mb), n_r) / ranks
            n_tokens = int(sum(mask[b].sum() for b in mb))
            for b in mb:
                t_b = int(mask[b].sum())
                for t in range(width):
                    if mask[b, t] == 0:
                        continue
                    if mode == "token_mean":
                        out[b][t] = share / n_tokens
                    else:
                        out[b][t] = share / (len(mb) * t_b)
    return out


def _as_float(exact: list[list[Fraction]]) -> Array:
    return np.array([[float(x) for x in row] for row in exact], dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# the rule, by hand
# ---------------------------------------------------------------------------------------------


def test_the_preset_is_skyrls_worker_rule_and_a_split_intent() -> None:
    preset = SCALING_RULES["skyrl_worker_terms"]
    assert (preset.denominator, preset.accumulation, preset.ranks, preset.world_scale) == (
        "local",
        "sequence_share",
        "mean",
        False,
    )
    assert preset.describe() == (
        "skyrl_worker_terms: local denominators, micro-batches sequence_share, ranks mean"
    )
    for mode in ("token_mean", "token_sum", "seq_mean_token_mean", "group_mean"):
        assert intent_of(mode, preset) == "split"
    # a global denominator keeps the global intent of a token mean
    assert intent_of("token_mean", ScalingRule("global", "sequence_share")) == "global"


def test_token_mean_weights_by_hand() -> None:
    # 2 ranks of 2 rows: rank 0 micro-batches {0} (3 tokens), {1} (1 token); rank 1 {2, 3}
    # (2 tokens, row 3 empty) and an empty micro-batch. (1/R)(n_k/n_r)/N_k:
    split = [[[0], [1]], [[2, 3], []]]
    got = split_weights(MASK, splits=split, mode="token_mean", rule="skyrl_worker_terms")
    expected = [Fraction(1, 2) * Fraction(1, 2) / 3, Fraction(1, 2) * Fraction(1, 2) / 1]
    expected.append(Fraction(1, 2) * Fraction(2, 2) / 2)
    assert got[0, 0] == float(expected[0]) == 1 / 12
    assert got[1, 0] == float(expected[1]) == 1 / 4
    assert got[2, 0] == got[2, 1] == float(expected[2]) == 1 / 4
    np.testing.assert_array_equal(got, _as_float(exact_share_weights(MASK, split, "token_mean")))
    gap = partition_gap(MASK, splits=split, mode="token_mean", rule="skyrl_worker_terms")
    assert gap.intent == "split"
    assert not gap.invariant
    # N = 6 tokens, full weight 1/6: ratios 1/2, 3/2, 3/2
    assert gap.max_relative_difference == pytest.approx(0.5, rel=1e-15)
    assert "rank 0 micro-batch 1: x1.5" in gap.dependence
    assert "n_k / (R n_r N_k)" in gap.dependence


def test_the_mean_of_row_means_is_invariant_on_even_ranks_only() -> None:
    options: dict[str, Any] = {"mode": "seq_mean_token_mean", "empty_rows": "counted"}
    even = [[[0], [1]], [[2, 3], []]]  # 2 rows per rank, uneven micro-batches
    gap = partition_gap(MASK, splits=even, rule="skyrl_worker_terms", **options)
    assert gap.invariant
    assert gap.dependence == ""
    uneven = [[[0], [1, 2]], [[3], []]]  # 3 rows on rank 0, 1 on rank 1
    got = split_weights(MASK, splits=uneven, rule="skyrl_worker_terms", **options)
    # 1/(R n_r T_b) with n_r = 3: rows 0, 1, 2 get 1/18, 1/6, 1/12 (full batch: 1/(4 T_b))
    assert got[0, 0] == float(Fraction(1, 18))
    assert got[1, 0] == float(Fraction(1, 6))
    assert got[2, 0] == float(Fraction(1, 12))
    gap = partition_gap(MASK, splits=uneven, rule="skyrl_worker_terms", **options)
    assert gap.max_relative_difference == pytest.approx(1 / 3, rel=1e-14)
    np.testing.assert_allclose(gap.sequence_ratio, [2 / 3, 2 / 3, 2 / 3, 1.0], rtol=1e-14)
    assert "every rank holds B/R rows" in gap.dependence


def test_the_accumulation_is_validated() -> None:
    with pytest.raises(ValueError, match=r"accumulation must be one of .*'sequence_share'"):
        ScalingRule(accumulation="row_share")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# properties on drawn splits
# ---------------------------------------------------------------------------------------------


def _agrees_with_the_exact_enumeration(weights: Weights) -> Callable[[], None]:
    @given(case=partition_cases(), mode=st.sampled_from(MODES))
    def check(case: PartitionCase, mode: str) -> None:
        got = weights(case.mask, splits=case.splits, mode=mode, rule=SHARE, empty_rows="counted")
        exact = _as_float(exact_share_weights(case.mask, case.splits, mode))
        np.testing.assert_allclose(got, exact, rtol=1e-14, atol=0.0)

    return check


def _token_share_labelled(mask: Any, *, splits: Any, mode: str, rule: Any, **kw: Any) -> Array:
    """Wrong: each micro-batch weighted by its share of the step's tokens (AReaL's rule)."""
    return split_weights(
        mask, splits=splits, mode=mode, rule=ScalingRule("local", "token_share", "mean", False),
        **kw,
    )  # fmt: skip


def _non_empty_rows_share(mask: Any, *, splits: Any, mode: str, rule: Any, **kw: Any) -> Array:
    """Wrong: the share counts only rows with a valid token (SkyRL's len() counts every row)."""
    m = np.asarray(mask, dtype=np.float64)
    out = np.zeros_like(m)
    live = m.sum(axis=1) > 0
    for rank in splits:
        n_r = sum(int(live[b]) for mb in rank for b in mb)
        for mb in rank:
            rows = np.asarray(mb, dtype=np.int64)
            if rows.size == 0 or not live[rows].any():
                continue
            local = aggregation_weights(m[rows], mode=mode, **kw)
            out[rows] = int(live[rows].sum()) / n_r / len(splits) * local
    return out


def test_the_weights_are_the_exact_sequence_share_weights() -> None:
    run_property(_agrees_with_the_exact_enumeration(split_weights))
    rejects(_agrees_with_the_exact_enumeration(_token_share_labelled))
    rejects(_agrees_with_the_exact_enumeration(_non_empty_rows_share))


def _row_means_invariant_iff_even_ranks(weights: Weights) -> Callable[[], None]:
    @given(case=partition_cases())
    def check(case: PartitionCase) -> None:
        eff = weights(
            case.mask, splits=case.splits, mode="seq_mean_token_mean", rule=SHARE,
            empty_rows="counted",
        )  # fmt: skip
        full = aggregation_weights(case.mask, mode="seq_mean_token_mean", empty_rows="counted")
        rows, ranks = case.mask.shape[0], len(case.splits)
        # a rank holding a valid token must hold B/R rows (n_r R == B)
        even = all(
            sum(len(mb) for mb in rank) * ranks == rows
            for rank in case.splits
            if any(case.mask[mb].sum() > 0 for mb in rank if mb)
        )
        assert np.allclose(eff, full, rtol=1e-13, atol=0.0) == even

    return check


def test_the_mean_of_row_means_depends_on_the_split_only_through_uneven_ranks() -> None:
    run_property(_row_means_invariant_iff_even_ranks(split_weights))
    rejects(_row_means_invariant_iff_even_ranks(_token_share_labelled))
    rejects(_row_means_invariant_iff_even_ranks(_non_empty_rows_share))


def _token_mean_invariant_iff_rows_track_tokens(weights: Weights) -> Callable[[], None]:
    @given(case=partition_cases())
    def check(case: PartitionCase) -> None:
        eff = weights(case.mask, splits=case.splits, mode="token_mean", rule=SHARE)
        full = aggregation_weights(case.mask, mode="token_mean")
        rows, tokens, ranks = case.mask.shape[0], int(case.mask.sum()), len(case.splits)
        # n_k / (R n_r N_k) == 1/N for every micro-batch holding a valid token
        law = all(
            len(mb) * tokens == ranks * sum(len(m) for m in rank) * int(case.mask[mb].sum())
            for rank in case.splits
            for mb in rank
            if mb and case.mask[mb].sum() > 0
        )
        assert np.allclose(eff, full, rtol=1e-13, atol=0.0) == law
        assert rows >= 1

    return check


def test_the_token_mean_is_invariant_exactly_when_rows_track_tokens() -> None:
    run_property(_token_mean_invariant_iff_rows_track_tokens(split_weights))
    rejects(_token_mean_invariant_iff_rows_track_tokens(_token_share_labelled))


# ---------------------------------------------------------------------------------------------
# the partition check, against torch candidates weighted as SkyRL's worker does
# ---------------------------------------------------------------------------------------------


def _surrogate(logp: Any, logp_old: Any, advantages: Any) -> Any:
    return -advantages[:, None] * torch.exp(logp - logp_old)


def share_token_mean(
    logp: Any, logp_old: Any, advantages: Any, mask: Any, *, rank_sequences: int
) -> Any:
    """The micro-batch's token mean times ``len(microbatch) / len(data)``."""
    loss = _surrogate(logp, logp_old, advantages)
    return (loss * mask).sum() / mask.sum().clamp(min=1) * (mask.shape[0] / rank_sequences)


def share_row_means(
    logp: Any, logp_old: Any, advantages: Any, mask: Any, *, rank_sequences: int
) -> Any:
    """The micro-batch's mean of row token means (every row) times its share of the rank."""
    loss = _surrogate(logp, logp_old, advantages)
    rows = (loss * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1)
    return rows.mean() * (mask.shape[0] / rank_sequences)


def even_shard_row_means(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    mask: Any,
    *,
    global_sequences: int,
    world_size: int,
) -> Any:
    """Wrong for uneven ranks: ``len(data)`` taken as ``global_sequences / world_size``."""
    loss = _surrogate(logp, logp_old, advantages)
    rows = (loss * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1)
    return rows.mean() * (mask.shape[0] * world_size / global_sequences)


def steps_mean_token_mean(
    logp: Any, logp_old: Any, advantages: Any, mask: Any, *, accumulation_steps: int
) -> Any:
    """Wrong: the micro-batch's token mean over the number of accumulation steps."""
    loss = _surrogate(logp, logp_old, advantages)
    return (loss * mask).sum() / mask.sum().clamp(min=1) / accumulation_steps


def test_a_sequence_share_token_mean_passes_and_reports_its_split_dependence() -> None:
    report = check_partition_invariance(
        share_token_mean, mode="token_mean", rule="skyrl_worker_terms", dtype="float64",
        max_examples=25,
    )  # fmt: skip
    assert report.ok, report.summary()
    assert report.intent == "split"
    assert report.max_gap > 0.0
    assert "n_k / (R n_r N_k)" in report.dependence
    # the stated workload: micro-batches of 3, 1 | 2, 2 rows and 37, 21 | 16, 13 tokens of 87;
    # the last weighs (1/2)(2/4)/13 = 1/52 against 1/87: off by 35/52
    gap = split_dependence(share_token_mean, mode="token_mean", rule="skyrl_worker_terms")
    assert gap == pytest.approx(35 / 52, rel=1e-12)


def test_a_sequence_share_mean_of_row_means_is_invariant_on_the_stated_even_dispatch() -> None:
    options: dict[str, Any] = {"mode": "seq_mean_token_mean", "empty_rows": "counted"}
    report = check_partition_invariance(
        share_row_means, rule="skyrl_worker_terms", dtype="float64", max_examples=25, **options
    )
    assert report.ok, report.summary()
    assert report.intent == "split"
    assert report.max_gap > 0.0  # the search draws ranks of uneven rows
    assert "every rank holds B/R rows" in report.dependence
    rows_per_rank = [sum(len(mb) for mb in rank) for rank in STATED_WORKLOAD.splits]
    assert rows_per_rank == [4, 4]
    gap = split_dependence(share_row_means, rule="skyrl_worker_terms", **options)
    assert gap <= 4 * np.finfo(np.float64).eps  # 0 up to the rounding of the weights read back


@pytest.mark.parametrize(
    ("candidate", "mode"),
    [(even_shard_row_means, "seq_mean_token_mean"), (steps_mean_token_mean, "token_mean")],
)
def test_the_check_fails_a_candidate_weighted_otherwise(
    candidate: Callable[..., Any], mode: str
) -> None:
    report = check_partition_invariance(
        candidate, mode=mode, rule="skyrl_worker_terms", dtype="float64", max_examples=25,
        empty_rows="counted",
    )  # fmt: skip
    assert not report.ok
    assert report["gradient"].status == "failed"


# ---------------------------------------------------------------------------------------------
# the micro-batch mean over a rank's micro-batches that hold rows (SkyRL's Megatron wrapper)
# ---------------------------------------------------------------------------------------------

MEAN = ScalingRule("local", "microbatch_mean", "mean", False)


def exact_mean_weights(mask: Array, splits: Any, mode: str) -> list[list[Fraction]]:
    """A token of row b in micro-batch k (n_k rows, N_k tokens) of a rank with K_r micro-batches
    holding rows weighs ``1/(R K_r N_k)`` (token mean) or ``1/(R K_r n_k T_b)`` (row means)."""
    rows, width = mask.shape
    out = [[Fraction(0)] * width for _ in range(rows)]
    for rank in splits:
        held = sum(1 for mb in rank if mb)
        for mb in rank:
            n_tokens = int(sum(mask[b].sum() for b in mb))
            for b in mb:
                for t in range(width):
                    if mask[b, t]:
                        size = n_tokens if mode == "token_mean" else len(mb) * int(mask[b].sum())
                        out[b][t] = Fraction(1, len(splits) * held * size)
    return out


def test_the_microbatch_mean_preset_and_weights_by_hand() -> None:
    preset = SCALING_RULES["skyrl_megatron_terms"]
    assert (preset.accumulation, preset.denominator, preset.world_scale) == (
        "microbatch_mean",
        "local",
        False,
    )
    assert intent_of("token_mean", preset) == "split"
    # rank 0: micro-batches {0} (3 tokens), {1} (1 token); rank 1: {2, 3} and an empty one,
    # which does not count: 1/(2*2*3), 1/(2*2*1), 1/(2*1*2)
    split = [[[0], [1]], [[2, 3], []]]
    got = split_weights(MASK, splits=split, mode="token_mean", rule="skyrl_megatron_terms")
    assert (got[0, 0], got[1, 0], got[2, 0]) == (1 / 12, 1 / 4, 1 / 4)
    gap = partition_gap(MASK, splits=split, mode="token_mean", rule="skyrl_megatron_terms")
    assert "averaged over the rank's K_r micro-batches that hold rows" in gap.dependence


def _agrees_with_the_exact_mean(weights: Weights) -> Callable[[], None]:
    @given(case=partition_cases(), mode=st.sampled_from(MODES))
    def check(case: PartitionCase, mode: str) -> None:
        got = weights(case.mask, splits=case.splits, mode=mode, rule=MEAN, empty_rows="counted")
        exact = _as_float(exact_mean_weights(case.mask, case.splits, mode))
        np.testing.assert_allclose(got, exact, rtol=1e-14, atol=0.0)

    return check


def _sequence_share_labelled(mask: Any, *, splits: Any, mode: str, rule: Any, **kw: Any) -> Array:
    """Wrong: the micro-batches weighted by their share of the rank's rows (the FSDP worker)."""
    return split_weights(mask, splits=splits, mode=mode, rule=SHARE, **kw)


def test_the_weights_are_the_exact_microbatch_mean_weights() -> None:
    run_property(_agrees_with_the_exact_mean(split_weights))
    rejects(_agrees_with_the_exact_mean(_sequence_share_labelled))


def test_a_micro_batch_without_rows_is_not_counted_unlike_the_accumulation_mean() -> None:
    """The drawn splits give every micro-batch a row (there K_r = K, as for "mean"); a padding
    micro-batch (no rows) is where the two differ: rank 1's one micro-batch weighs 1/(R*1),
    not 1/(R*2)."""
    split = [[[0], [1]], [[2, 3], []]]
    mean = split_weights(MASK, splits=split, mode="token_mean", rule="local_mean")
    got = split_weights(MASK, splits=split, mode="token_mean", rule="skyrl_megatron_terms")
    assert (mean[2, 0], got[2, 0]) == (1 / 8, 1 / 4)
    np.testing.assert_array_equal(got[:2], mean[:2])


def share_of_real_microbatches(
    logp: Any, logp_old: Any, advantages: Any, mask: Any, *, rank_microbatches: int
) -> Any:
    """The micro-batch's mean of row means over the rank's micro-batches that hold rows."""
    loss = _surrogate(logp, logp_old, advantages)
    rows = (loss * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1)
    return rows.mean() / rank_microbatches


def test_the_check_passes_a_microbatch_mean_and_fails_one_over_every_step() -> None:
    options: dict[str, Any] = {"mode": "seq_mean_token_mean", "empty_rows": "counted"}
    report = check_partition_invariance(
        share_of_real_microbatches, rule="skyrl_megatron_terms", dtype="float64",
        max_examples=25, **options,
    )  # fmt: skip
    assert report.ok, report.summary()
    assert report.intent == "split"
    assert report.max_gap > 0.0
    wrong = check_partition_invariance(
        share_of_real_microbatches, rule="skyrl_worker_terms", dtype="float64",
        max_examples=25, **options,
    )  # fmt: skip
    assert not wrong.ok
