"""SkyRL's loss adapters on fixed inputs: the rules they were read to follow, by hand.

The conformance matrix runs every check of every adapter; these pin what a check cannot see on
its own: the reductions' denominators (empty rows and prompts counted, ``max_seq_len`` not the
padded width), the legacy token mean's per-micro-batch normalisation, and the selections fixed in
the Clip-Cov and KL-Cov adapters (which make them the PPO and the uncapped policy-gradient losses).
"""

from __future__ import annotations

import math

import pytest
import torch

from refimpl.frameworks import adapters
from refimpl.frameworks._skyrl_losses import (
    PPO_UTILS_LOADED,
    skyrl_cispo,
    skyrl_clip_cov,
    skyrl_importance_sampling,
    skyrl_kl_cov,
    skyrl_ppo_regular,
)
from refimpl.frameworks._skyrl_losses_stats import (
    skyrl_grpo,
    skyrl_logprobs,
    skyrl_logprobs_v2,
    skyrl_microbatch_token_mean,
    skyrl_microbatch_token_mean_legacy,
    skyrl_reduction_prompt_mean,
    skyrl_reduction_seq_mean_token_sum_norm,
    skyrl_reduction_sequence_mean,
    skyrl_reduction_token_mean,
)
from refimpl.testing import check_partition_invariance, spec_names

#: Every test but the log-probabilities' calls a function of SkyRL's ppo_utils, which is executed
#: from its installed file once refimpl.frameworks.SOURCE_LOADS lists it (its module imports
#: skyrl_gym, which is not installed with skyrl); until then the adapters are not registered.
needs_ppo_utils = pytest.mark.skipif(
    not PPO_UTILS_LOADED,
    reason="needs the SOURCE_LOADS entry of skyrl.backends.skyrl_train.utils.ppo_utils",
)
F64 = torch.float64
# three rows of 3, 1 and 0 valid tokens (the last row is all padding)
MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=F64)
LOSS = torch.tensor(
    [[1.0, 2.0, 3.0, 1e30], [4.0, -1e30, 0.0, 0.0], [7.0, 7.0, 7.0, 7.0]], dtype=F64
)


def _skyrl_loss_adapters() -> list[object]:
    return [
        a for a in adapters() if a.key.startswith("skyrl.") and a.spec in spec_names(losses=True)
    ]


@needs_ppo_utils
def test_the_loss_adapters_have_distinct_keys_and_loss_specs() -> None:
    keys = [a.key for a in _skyrl_loss_adapters()]  # type: ignore[attr-defined]
    # 31 + worker terms 6, their Megatron copy 6 and log-probs and entropy 3, normalisation 2,
    # reward 1, outlier masks 3, the adaptive KL controller 1, the JAX backend's losses 4, the
    # Megatron packed-sequence and fused-LM-head log-probabilities and entropies 6, the two packed
    # log-probabilities and the two packed entropies on two context-parallel ranks 4
    assert len(keys) == len(set(keys)) == 69, keys


@needs_ppo_utils
def test_the_reductions_divide_as_read() -> None:
    # valid tokens 1, 2, 3 | 4 | none: N = 4 tokens, B = 3 rows (the empty row counted)
    assert skyrl_reduction_token_mean(LOSS, MASK).item() == 10.0 / 4
    assert skyrl_reduction_sequence_mean(LOSS, MASK).item() == pytest.approx(
        (6 / 3 + 4 / 1 + 0) / 3
    )
    got = skyrl_reduction_seq_mean_token_sum_norm(LOSS, MASK, constant=8.0).item()
    assert got == pytest.approx(10.0 / (3 * 8.0))  # max_seq_len, not the padded width 4
    # prompts {0, 2} (3 tokens: sum 6) and {1} (1 token: sum 4), given unsorted: (6/3 + 4/1) / 2
    got = skyrl_reduction_prompt_mean(LOSS, MASK, group=torch.tensor([5, 1, 5])).item()
    assert got == pytest.approx(3.0)


@needs_ppo_utils
def test_the_legacy_token_mean_normalises_each_micro_batch() -> None:
    # on-policy (ρ = 1), A = 1: each micro-batch's loss is -Σ w over its tokens, times R = 1.
    # K = 2 micro-batches of 3 and 1 tokens: the global mean gives every token 1/4; the legacy
    # mean gives each micro-batch 1/K of its own mean, so the lone token weighs 1/2.
    big, small = MASK[:1], MASK[1:2]
    zeros, one = torch.zeros(1, 4, dtype=F64), torch.ones(1, dtype=F64)
    step = {"accumulation_steps": 2, "world_size": 1}
    assert (
        skyrl_microbatch_token_mean(zeros, zeros, one, big, global_tokens=4, world_size=1) == -0.75
    )
    assert (
        skyrl_microbatch_token_mean(zeros, zeros, one, small, global_tokens=4, world_size=1)
        == -0.25
    )
    assert skyrl_microbatch_token_mean_legacy(zeros, zeros, one, big, **step) == -0.5
    assert skyrl_microbatch_token_mean_legacy(zeros, zeros, one, small, **step) == -0.5


@needs_ppo_utils
def test_clip_cov_with_an_empty_band_is_the_ppo_surrogate_without_a_dual_clip() -> None:
    # ρ = e² > 1 + ε with A = -1: max(-Aρ, -A·clip(ρ)) = e² (a dual clip at 3 would give 3); the
    # padded entry's log-ratio is moderate here (the unclamped exp is a recorded divergence).
    logp = torch.tensor([[2.0, 0.5]], dtype=F64)
    zeros, mask = torch.zeros(1, 2, dtype=F64), torch.tensor([[1.0, 0.0]], dtype=F64)
    advantages = torch.tensor([[-1.0, 1.0]], dtype=F64)
    got = skyrl_clip_cov(
        logp, zeros, advantages, eps_low=0.2, eps_high=None, dual_clip=None, mask=mask
    )
    assert got.item() == pytest.approx(math.exp(2.0), rel=1e-15)
    dual = skyrl_ppo_regular(
        logp, zeros, advantages, eps_low=0.2, eps_high=None, dual_clip=3.0, mask=mask
    )
    assert dual.item() == pytest.approx(3.0)


@needs_ppo_utils
def test_kl_cov_without_its_coefficient_and_importance_sampling_are_minus_a_rho() -> None:
    logp = torch.tensor([[0.3, -0.2, 0.1], [1.5, 0.0, 0.0]], dtype=F64, requires_grad=True)
    old = torch.tensor([[0.1, 0.1, 0.1], [0.0, 0.0, 0.0]], dtype=F64)
    advantages = torch.tensor([[1.0, -2.0, 0.5], [-1.0, 3.0, 3.0]], dtype=F64)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]], dtype=F64)
    expected = -(advantages * torch.exp(logp.detach() - old) * mask).sum().item()
    for candidate in (skyrl_kl_cov, skyrl_importance_sampling):
        got = candidate(logp, old, advantages, cap=None, mask=mask)
        assert got.item() == pytest.approx(expected, rel=1e-14)


@needs_ppo_utils
def test_cispo_without_a_lower_clip_keeps_small_ratios() -> None:
    # ρ = e^-1 is below every lower clip 1 - ε with ε < 0.63: eps_low=None keeps it (-A·ρ·logp).
    logp = torch.tensor([[-1.0]], dtype=F64)
    zeros, one = torch.zeros(1, 1, dtype=F64), torch.ones(1, 1, dtype=F64)
    got = skyrl_cispo(logp, zeros, one, eps_high=0.2, eps_low=None, mask=one)
    assert got.item() == pytest.approx(math.exp(-1.0), rel=1e-7)  # float32 ratio


@needs_ppo_utils
@pytest.mark.parametrize(
    "key",
    [
        "skyrl.loss_reduction_token_mean",
        "skyrl.loss_reduction_sequence_mean",
        "skyrl.loss_reduction_seq_mean_token_sum_norm",
        "skyrl.loss_reduction_prompt_mean",
    ],
)
def test_the_global_reductions_are_partition_invariant(key: str) -> None:
    (a,) = [x for x in _skyrl_loss_adapters() if x.key == key]  # type: ignore[attr-defined]
    p = a.partition  # type: ignore[attr-defined]
    report = check_partition_invariance(
        p.candidate,
        mode=p.mode,
        rule=p.rule,
        constant=p.constant,
        empty_rows=p.empty_rows,
        rtol=p.rtol,
        dtype="float64",
        max_examples=4,
    )
    assert report.ok, report


@needs_ppo_utils
def test_the_unclamped_ratios_give_nan_at_an_overflowing_padded_position() -> None:
    # the recorded defect: exp(1000) = inf at a padded position, times the mask's 0, is NaN
    logp = torch.tensor([[0.0, 1000.0]], dtype=F64)
    zeros, ones = torch.zeros(1, 2, dtype=F64), torch.ones(1, 2, dtype=F64)
    mask = torch.tensor([[1.0, 0.0]], dtype=F64)
    for candidate in (skyrl_kl_cov, skyrl_importance_sampling):
        assert math.isnan(candidate(logp, zeros, ones, cap=None, mask=mask).item())
    # Clip-Cov: with A < 0 there, max(−A·ρ, −A·clip(ρ)) = inf (with A > 0 only its gradient is NaN)
    negative = torch.tensor([[1.0, -1.0]], dtype=F64)
    got = skyrl_clip_cov(
        logp, zeros, negative, eps_low=0.2, eps_high=None, dual_clip=None, mask=mask
    )
    assert math.isnan(got.item())
    # the clamped losses (safe_exp_delta) stay finite on the same input
    assert (
        skyrl_ppo_regular(
            logp, zeros, ones, eps_low=0.2, eps_high=None, dual_clip=None, mask=mask
        ).item()
        == -1.0
    )


@needs_ppo_utils
def test_a_grpo_singleton_group_is_divided_by_one_plus_a_float32_epsilon() -> None:
    rewards, group = torch.tensor([0.25, 1.0, 2.0], dtype=F64), torch.tensor([0, 1, 1])
    got = skyrl_grpo(rewards, group=group)
    one_plus_eps = float(torch.tensor(1.0) + 1e-6)  # float32: 1 + 2^-20
    assert got[0].item() == 0.25 / one_plus_eps != 0.25
    # the pair's sample std is √0.5: (r − 1.5)/(√0.5 + 1e-6)
    expected = [-0.5 / (math.sqrt(0.5) + 1e-6), 0.5 / (math.sqrt(0.5) + 1e-6)]
    assert got[1:].tolist() == pytest.approx(expected, rel=1e-12)


def test_the_trainer_log_probabilities_are_the_full_tempered_softmax() -> None:
    logits = torch.tensor([[[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]]], dtype=F64)
    tokens = torch.tensor([[0, 2]])
    expected = torch.log_softmax(logits / 0.5, dim=-1).gather(-1, tokens[..., None])[..., 0]
    got = skyrl_logprobs(logits, tokens, temperature=0.5, mask=None)  # no top-k/top-p to take
    assert torch.allclose(got, expected, rtol=1e-12, atol=0.0)


def test_float32_logits_take_the_gather_minus_logsumexp_branch() -> None:
    # the float32 branch keeps float32 and its output and gradient are the softmax's to float32
    # rounding (the bfloat16 branch of the same function is off by more than 2^-9 here)
    logits = torch.tensor([[[0.5, 0.25, -1.0], [4.0, 0.0, 0.0]]], requires_grad=True)
    tokens = torch.tensor([[1, 0]])
    got = skyrl_logprobs_v2(logits, tokens, temperature=1.0, mask=None)
    assert got.dtype == torch.float32
    wide = logits.detach().double()
    expected = (wide.gather(-1, tokens[..., None])[..., 0] - torch.logsumexp(wide, -1)).float()
    # z_x − logsumexp(z) cancels: its error is float32 rounding of the terms (<= 4.1), not of it
    assert torch.allclose(got, expected, rtol=0.0, atol=4 * 2**-21)
    got.sum().backward()
    grad = torch.nn.functional.one_hot(tokens, 3).double() - torch.softmax(wide, -1)
    assert logits.grad is not None
    assert torch.allclose(logits.grad.double(), grad, rtol=0.0, atol=2**-22)
