"""OpenRLHF 0.11.2's loss adapters: values read in its sources, its scaling path, its defect and limits."""

from __future__ import annotations

import math

import pytest
import torch

from refimpl.frameworks import _openrlhf_losses, _openrlhf_losses_advantages, adapter
from refimpl.frameworks._openrlhf_losses import (
    openrlhf_aggregate_sequence_level,
    openrlhf_gspo,
    openrlhf_ppo_token_level,
)
from refimpl.frameworks._openrlhf_losses_correction import (
    openrlhf_is_seq_mask,
    openrlhf_is_token_clip,
)
from refimpl.frameworks._openrlhf_losses_kl import openrlhf_kl_k3, openrlhf_log_probs
from refimpl.testing import check_partition_invariance

# openrlhf.models.loss and .utils import only with the openrlhf.models and deepspeed stubs
# (refimpl.frameworks.STUBS); until they are there the adapters are not registered.
pytestmark = pytest.mark.skipif(
    not _openrlhf_losses.ADAPTERS,
    reason="needs the openrlhf.models and deepspeed stubs in refimpl.frameworks.STUBS",
)

_T = torch.float64


def _t(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=_T)


def test_ppo_token_level_clips_and_averages_over_valid_tokens() -> None:
    # ρ = e^0.1 ≈ 1.105 is clipped at 1 + 0.05 (A > 0): −1.05; the padded token is dropped
    loss = openrlhf_ppo_token_level(
        _t([[0.1, 5.0]]), _t([[0.0, 0.0]]), _t([[1.0, 1.0]]),
        eps_low=0.05, eps_high=None, dual_clip=None, mask=_t([[1.0, 0.0]]),
    )  # fmt: skip
    assert float(loss) == pytest.approx(-1.05, rel=1e-15)


def test_the_sequence_level_divides_each_row_by_its_length_plus_1e8() -> None:
    value = openrlhf_aggregate_sequence_level(_t([[1.0, 1.0]]), _t([[1.0, 1.0]]))
    assert float(value) == 2.0 / (2.0 + 1e-8)
    assert float(value) != 1.0  # the numerical limit its adapters declare


def test_gspo_sequence_ratio_overflows_to_nan() -> None:
    """The defect: no bound on the mean log-ratio before exp (PPO's path clamps at ±20)."""
    loss = openrlhf_gspo(
        _t([[0.0]]), _t([[-1000.0]]), _t([[0.0]]), eps_low=0.2, eps_high=None, mask=_t([[1.0]])
    )
    assert math.isnan(float(loss))
    assert "huge_log_ratios_stay_finite" in adapter("openrlhf.policy_loss_gspo").divergences


@pytest.mark.parametrize(
    "key", ["openrlhf.aggregate_loss_token_level", "openrlhf.aggregate_loss_sequence_level"]
)
def test_each_aggregation_is_partition_invariant_on_the_deepspeed_path(key: str) -> None:
    p = adapter(key).partition
    assert p is not None
    report = check_partition_invariance(
        p.candidate, mode=p.mode, rule=p.rule, empty_rows=p.empty_rows, dtype="float64",
        max_examples=10, rtol=p.rtol,
    )  # fmt: skip
    assert report.ok, report


def test_log_probs_from_logits_divides_its_argument_in_place() -> None:
    """Why the adapter passes a copy: the installed function calls logits.div_(temperature)."""
    from openrlhf.models.utils import log_probs_from_logits

    logits = torch.tensor([[[0.0, 1.0, 2.0]]], dtype=_T)
    log_probs_from_logits(logits, torch.tensor([[0]]), temperature=2.0)
    assert logits.tolist() == [[[0.0, 0.5, 1.0]]]
    kept = torch.tensor([[[0.0, 1.0, 2.0]]], dtype=_T, requires_grad=True)
    value = openrlhf_log_probs(kept, torch.tensor([[2]]), temperature=2.0, mask=_t([[1.0]]))
    expected = 1.0 - math.log(1 + math.exp(0.5) + math.e)
    assert value.detach().item() == pytest.approx(expected, rel=1e-12)


def test_k3_is_clamped_at_10() -> None:
    value = openrlhf_kl_k3(_t([[-5.0, 0.5]]), _t([[0.0, 0.0]]), mask=_t([[1.0, 1.0]]))
    assert value.dtype == torch.float32  # compute_approx_kl's .float()
    assert value[0, 0].item() == 10.0
    assert value[0, 1].item() == pytest.approx(math.exp(-0.5) - 1 + 0.5, rel=1e-6)


def test_the_correction_weights_read_from_the_loss() -> None:
    # clip mode: clamp(ρ, 0.5, cap); ρ = 10 → 5, ρ = 0.1 → 0.5, padding → 0
    w = openrlhf_is_token_clip(
        _t([[math.log(10.0), math.log(0.1), 0.0]]), _t([[0.0, 0.0, 0.0]]),
        cap=5.0, mask=_t([[1.0, 1.0, 0.0]]),
    )  # fmt: skip
    assert w[0].tolist() == pytest.approx([5.0, 0.5, 0.0], rel=1e-15)
    # sequence mask: row 0's geometric mean is 1 (kept, token ratios), row 1's is e^2 (dropped)
    w = openrlhf_is_seq_mask(
        _t([[0.5, -0.5], [2.0, 2.0]]), _t([[0.0, 0.0], [0.0, 0.0]]),
        low=0.5, high=2.0, mask=_t([[1.0, 1.0], [1.0, 1.0]]),
    )  # fmt: skip
    assert w.flatten().tolist() == pytest.approx(
        [math.exp(0.5), math.exp(-0.5), 0.0, 0.0], rel=1e-15
    )


@pytest.mark.skipif(
    not _openrlhf_losses_advantages.ADAPTERS,
    reason="needs the SOURCE_LOADS entry of openrlhf.trainer.ppo_utils.experience_maker",
)
def test_group_norm_and_rloo_on_two_groups() -> None:
    from refimpl.frameworks._openrlhf_losses_advantages import (
        openrlhf_group_norm,
        openrlhf_rloo,
    )

    rewards = torch.tensor([0.0, 1.0, 3.0, 3.0], dtype=_T)
    group = torch.tensor([0, 0, 1, 1])
    a = openrlhf_group_norm(rewards, group=group)
    s = math.sqrt(0.5)  # torch.std of (0, 1)
    assert a.tolist() == pytest.approx([-0.5 / (s + 1e-9), 0.5 / (s + 1e-9), 0.0, 0.0], rel=1e-12)
    assert openrlhf_rloo(rewards, group=group).tolist() == [-1.0, 1.0, 0.0, 0.0]


@pytest.mark.skipif(
    not _openrlhf_losses_advantages.ADAPTERS,
    reason="needs the SOURCE_LOADS entry of openrlhf.trainer.ppo_utils.experience_maker",
)
def test_no_std_norm_centres_on_the_token_weighted_mean_without_scaling() -> None:
    from refimpl.frameworks._openrlhf_losses_advantages import (
        openrlhf_gae_centred,
        openrlhf_reinforce_baseline_centred,
        openrlhf_reinforce_centred,
    )

    # rewards 1 and 3 on rows of 1 and 3 valid tokens: the token mean is (1 + 9)/4 = 2.5, not
    # the row mean 2, and nothing divides the centred values
    mask = _t([[1, 0, 0], [1, 1, 1]])
    got = openrlhf_reinforce_centred(torch.tensor([1.0, 3.0], dtype=_T), mask=mask)
    assert got.tolist() == [-1.5, 0.5]
    # one group of two: r − group mean gives −1 and 1, then their token mean (−1 + 3)/4 = 0.5
    got = openrlhf_reinforce_baseline_centred(
        torch.tensor([1.0, 3.0], dtype=_T), mask=mask, group=torch.tensor([0, 0])
    )
    assert got.tolist() == [-1.5, 0.5]
    # GAE with γ = λ = 1 and values 0: each token's return-to-go (1; 3, 2, 1) minus their mean 7/4
    rewards = _t([[1, 0, 0], [1, 1, 1]])
    adv, ret = openrlhf_gae_centred(
        rewards, torch.zeros_like(rewards), gamma=1.0, lam=1.0, mask=mask
    )
    assert (adv * mask).tolist() == [[-0.75, 0.0, 0.0], [1.25, 0.25, -0.75]]
    assert ret.tolist() == [[1.0, 0.0, 0.0], [3.0, 2.0, 1.0]]
