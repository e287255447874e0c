"""TRL 1.16.0's loss adapters: the real GRPOTrainer._compute_loss on hand-computed inputs.

The conformance checks (the matrix) compare every adapter with its spec; these tests pin what the
checks cannot hold by themselves: the divergences read in TRL's code whose inputs a search need not
meet (delta below 1 + epsilon_high, CISPO without a lower bound, GMPO's empty rows), the mapping of
each aggregation branch, and each loss_type's partition verdict on its real scaling path.
"""

from __future__ import annotations

import math

import pytest
import torch

from refimpl.frameworks import adapter, adapters, check
from refimpl.frameworks._trl_losses import trl_cispo_loss, trl_dapo_loss, trl_grpo_loss
from refimpl.frameworks._trl_losses_aggregation import (
    trl_dr_grpo_aggregation,
    trl_grpo_aggregation,
    trl_luspo_aggregation,
)
from refimpl.frameworks._trl_losses_more import trl_gmpo_loss
from refimpl.testing import check_partition_invariance

F64 = torch.float64


def _t(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=F64)


def test_every_loss_type_and_level_has_an_adapter() -> None:
    keys = {a.key for a in adapters("trl")}
    for name in ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo"):
        assert f"trl.{name}" in keys
    for name in ("grpo", "bnpo", "dr_grpo", "dapo"):
        assert f"trl.gspo_{name}" in keys
    for name in ("grpo", "bnpo", "dr_grpo", "dapo", "luspo"):
        assert adapter(f"trl.aggregation_{name}").partition is not None


def test_delta_is_dual_clip_only_above_one_plus_epsilon_high() -> None:
    # One token, A = 1, ρ = 1.2 inside the clip range 1 + 0.28: with δ = 3 the loss is −1.2 (PPO);
    # with δ = 1.1 <= 1 + ε_high TRL clamps coef_1 to 1.1 before the min: −1.1, where dual clip
    # (applied to negative advantages only) would leave −1.2.
    logp = _t([[math.log(1.2)]])
    args = (torch.zeros(1, 1, dtype=F64), _t([[1.0]]))
    kw = {"eps_low": 0.2, "eps_high": 0.28, "mask": _t([[1.0]])}
    above = trl_grpo_loss(logp, *args, dual_clip=3.0, **kw)
    below = trl_grpo_loss(logp, *args, dual_clip=1.1, **kw)
    assert math.isclose(float(above), -1.2, rel_tol=1e-15)
    assert math.isclose(float(below), -1.1, rel_tol=1e-15)


def test_cispo_weight_has_no_lower_bound() -> None:
    # ρ = e^-1 < 1 − 0.2, A = 1, logp = −1: TRL's weight is e^-1 (no lower clip), the loss
    # −sg[w]·A·logp = e^-1, where a lower bound 0.8 would give 0.8.
    logp, old = _t([[-1.0]]), _t([[0.0]])
    got = trl_cispo_loss(logp, old, _t([[1.0]]), eps_high=0.28, mask=_t([[1.0]]))
    assert math.isclose(float(got), math.exp(-1.0), rel_tol=1e-15)


def test_gmpo_counts_an_empty_row_as_minus_its_advantage() -> None:
    # Row 0 has no valid token: TRL's coef is exp(0) = 1, its loss −A = −2 enters the mean over
    # the two rows; row 1 is on-policy with A = 1: −1. TRL returns (−2 − 1) / 2 = −1.5, the
    # reference −0.5. The gradient is unaffected: row 0 has none.
    logp = torch.zeros(2, 1, dtype=F64, requires_grad=True)
    got = trl_gmpo_loss(
        logp, logp.detach(), _t([[2.0], [1.0]]), eps_low=0.4, eps_high=None, mask=_t([[0.0], [1.0]])
    )
    assert float(got.detach()) == -1.5
    (grad,) = torch.autograd.grad(got, logp)
    assert grad.tolist() == [[0.0], [-0.5]]


def test_aggregation_branches_divide_as_read() -> None:
    loss = _t([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [5.0, 6.0, 0.0]])
    mask = _t([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    # grpo: per-row means 2, 4, and 0 for the empty row, averaged over all 3 rows
    assert math.isclose(float(trl_grpo_aggregation(loss, mask)), 2.0, rel_tol=1e-15)
    # dr_grpo: Σ m·ℓ = 10 over B·H = 3·4
    assert math.isclose(float(trl_dr_grpo_aggregation(loss, mask, constant=4)), 10 / 12)
    # luspo: per-row sums 6, 4, 0 averaged over 3 rows
    assert math.isclose(float(trl_luspo_aggregation(loss, mask)), 10 / 3, rel_tol=1e-15)


def test_dapo_divides_by_num_items_in_batch() -> None:
    logp = torch.zeros(1, 2, dtype=F64)
    got = trl_dapo_loss(
        logp, logp, _t([[1.0, 1.0]]), eps_low=0.2, eps_high=None, dual_clip=None,
        mask=_t([[1.0, 0.0]]),
    )  # fmt: skip
    assert float(got) == -1.0


def test_the_clipped_surrogates_agree_with_refimpl() -> None:
    for key in ("trl.grpo", "trl.gspo_grpo"):
        report = check(key, max_examples=5)
        statuses = {r.name: r.status for r in report.results}
        assert statuses["values"] == statuses["gradient"] == "passed", report


@pytest.mark.parametrize(
    ("key", "dtype", "ok", "intent"),
    [
        # global: N / R per micro-batch, summed, ranks averaged (exact up to its float32 normalizer)
        ("trl.aggregation_dapo", "float32", True, "global"),
        # local token means averaged over K: a token's weight depends on its micro-batch's count
        ("trl.aggregation_bnpo", "float64", False, "global"),
        # per-sequence means over each micro-batch's rows: split-dependent by design
        ("trl.aggregation_grpo", "float64", True, "split"),
    ],
)
def test_partition_on_the_trainers_scaling_path(
    key: str, dtype: str, ok: bool, intent: str
) -> None:
    p = adapter(key).partition
    assert p is not None
    report = check_partition_invariance(
        p.candidate, mode=p.mode, rule=p.rule, constant=p.constant, empty_rows=p.empty_rows,
        dtype=dtype, max_examples=10,
    )  # fmt: skip
    assert report.ok is ok, report
    assert report.intent == intent


def test_the_entropy_bonus_is_the_token_mean_entropy_whatever_the_loss_type_normalises() -> None:
    from refimpl.frameworks._trl_losses_more import trl_entropy_bonus

    # row 0: uniform over 2 (H = ln 2), one valid token; row 1: p = (1/4, 3/4) at T = 1, two valid
    # tokens: the bonus is the token mean (ln 2 + 2 h)/3, not the row mean (ln 2 + h)/2
    h = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    logits = torch.zeros(2, 2, 2, dtype=torch.float64)
    logits[1, :, 1] = math.log(3.0)
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    got = trl_entropy_bonus(logits, temperature=1.0, mask=mask)
    assert got.item() == pytest.approx((math.log(2.0) + 2 * h) / 3, rel=1e-12)


@pytest.mark.parametrize("chunk_size", [32768, 2])
def test_the_fused_lm_head_folds_the_vocabulary_tiles_into_one_softmax(chunk_size: int) -> None:
    from refimpl.frameworks._trl_losses_fused import fused_lm_head

    # logits (0, 0, ln 2, 0) / T = 2: p ∝ (1, 1, √2, 1); with tiles of 2 the running max and sum
    # of the first tile are merged with the second's, giving the one-tile values
    logits = torch.tensor([[[0.0, 0.0, math.log(2.0), 0.0]]], dtype=F64)
    logp, entropy = fused_lm_head(logits, torch.tensor([[2]]), 2.0, chunk_size)
    z = 3.0 + math.sqrt(2.0)
    p = [1 / z, 1 / z, math.sqrt(2.0) / z, 1 / z]
    assert logp.item() == pytest.approx(math.log(p[2]), rel=1e-6)
    assert entropy.item() == pytest.approx(-sum(q * math.log(q) for q in p), rel=1e-6)
