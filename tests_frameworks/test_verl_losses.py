"""verl 0.9.1's loss adapters: the real core_algos functions on hand-computed inputs.

The conformance checks (the matrix) compare every adapter with its spec; these tests pin what the
checks cannot hold by themselves: the rules read in verl's code whose effect a divergence hides
(SAPO's hard-coded aggregation, GMPO's mean over every row, the seq-mean epsilon), the rules an
input has to be built for (the always-on dual clip, kl_cov's covariance token, DPPO's truncation
under an ActorConfig), the empty-row count of the local fallback against the trainer's, and each
loss_agg_mode's partition verdict on the trainer's path.
"""

from __future__ import annotations

import math

import pytest
import torch

from refimpl.frameworks import adapter, adapters, load_function
from refimpl.frameworks._verl_losses import (
    verl_policy_loss_geo_mean,
    verl_policy_loss_kl_cov,
    verl_policy_loss_sapo,
    verl_policy_loss_vanilla,
)
from refimpl.frameworks._verl_losses_adv import (
    verl_grpo_advantages,
    verl_rloo_advantages,
    verl_rloo_vectorized_advantages,
)
from refimpl.frameworks._verl_losses_agg import (
    verl_agg_seq_mean_token_sum_norm_default,
    verl_kl_penalty_k3_st,
)
from refimpl.testing import check_partition_invariance

F64 = torch.float64
MODES = ("token_mean", "token_sum", "seq_mean_token_sum", "seq_mean_token_mean")


def _t(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=F64)


def test_every_registered_policy_loss_and_agg_mode_has_an_adapter() -> None:
    registry = load_function("verl.trainer.ppo.core_algos:POLICY_LOSS_REGISTRY")
    functions = {a.function.rpartition(":")[2] for a in adapters("verl")}
    for fn in registry.values():
        assert fn.__name__ in functions, fn.__name__
    for mode in (*MODES, "seq_mean_token_sum_norm"):
        assert adapter(f"verl.agg_loss_{mode}").partition is not None


def test_vanilla_always_applies_the_dual_clip_at_three() -> None:
    # A = −1, ρ = e² ≈ 7.39 inside no clip range: PPO gives max(7.39, 0.8) = 7.39, the dual clip
    # min(3·1, 7.39) = 3 (clip_ratio_c = 3, applied to negative advantages whatever is configured).
    got = verl_policy_loss_vanilla(
        _t([[2.0]]), _t([[0.0]]), _t([[-1.0]]), eps_low=0.2, eps_high=None, mask=_t([[1.0]])
    )
    assert float(got) == 3.0


def test_sapo_aggregates_seq_mean_token_mean_whatever_is_passed() -> None:
    # On-policy (ρ = 1) SAPO's gate is σ(0)·4/τ = 2/τ: with τ_pos = 1 the token loss is −2A.
    # Row 0: two tokens with A = 1 (−2 each), row 1: one token with A = 3 (−6). token-mean, what
    # the candidate passes, would be −10/3; seq-mean-token-mean gives (−2 − 6)/2 = −4 (up to the
    # 1e-8 added to each row's count).
    logp = _t([[-1.0, -1.0], [-1.0, -1.0]])
    got = verl_policy_loss_sapo(
        logp, logp, _t([[1.0, 1.0], [3.0, 0.0]]), tau_pos=1.0, tau_neg=1.05,
        mask=_t([[1.0, 1.0], [1.0, 0.0]]),
    )  # fmt: skip
    assert math.isclose(float(got), -4.0, rel_tol=1e-7)


def test_geo_mean_averages_over_every_row_including_empty_ones() -> None:
    # Row 0 has no valid token (its loss is 0·exp(0) = 0), row 1 is on-policy with A = 1: −1.
    # verl's torch.mean over both rows: −0.5 (up to L + 1e-8 in the row means).
    logp = torch.zeros(2, 1, dtype=F64)
    got = verl_policy_loss_geo_mean(
        logp, logp, _t([[2.0], [1.0]]), eps_low=0.4, eps_high=None, mask=_t([[0.0], [1.0]])
    )
    assert math.isclose(float(got), -0.5, rel_tol=1e-7)


def test_kl_cov_penalises_the_token_of_largest_covariance() -> None:
    # A = [3, 0, 0] (mean 1), logp = [−1, −2, −3] (mean −2): covariances [2, 0, 1], so token 0 (the
    # only one with a log-ratio, 0.5) gets −A·ρ + 0.1·|log ρ|; the others' −0·ρ are 0. token-mean.
    logp, old = _t([[-1.0, -2.0, -3.0]]), _t([[-1.5, -2.0, -3.0]])
    got = verl_policy_loss_kl_cov(logp, old, _t([[3.0, 0.0, 0.0]]), cap=None, mask=_t([[1.0] * 3]))
    assert math.isclose(float(got), (-3.0 * math.exp(0.5) + 0.1 * 0.5) / 3.0, rel_tol=1e-15)


def test_dppo_truncates_at_the_actor_configs_clip_ratio_c() -> None:
    # compute_policy_loss_dppo_tv reads config.get("clip_ratio_c", 20.0); ActorConfig has the field
    # (3.0, the dual clip's), so DPPO truncates the detached ratio e² at 3, not at 20:
    # p_old = 0.01, p = 0.01·e² (moved 0.064 < 0.2: kept), A = 1, loss −3·logp.
    from verl.trainer.ppo.core_algos import compute_policy_loss_dppo_tv
    from verl.workers.config import ActorConfig

    config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1)
    old = _t([[math.log(0.01)]])
    logp = old + 2.0
    loss, _ = compute_policy_loss_dppo_tv(
        old_log_prob=old, log_prob=logp, advantages=_t([[1.0]]), response_mask=_t([[1.0]]),
        loss_agg_mode="token-mean", config=config,
    )  # fmt: skip
    assert config.clip_ratio_c == 3.0
    assert math.isclose(float(loss), -3.0 * float(logp), rel_tol=1e-15)


def test_seq_mean_counts_empty_rows_only_with_the_trainers_global_batch_size() -> None:
    # Without global numbers agg_loss counts the rows with a valid token (1 here: 2/1); the trainer
    # passes global_batch_size = every row of the mini-batch (2: 2/2).
    from verl.trainer.ppo.core_algos import agg_loss

    loss, mask = _t([[1.0, 1.0], [5.0, 5.0]]), _t([[1.0, 1.0], [0.0, 0.0]])
    assert float(agg_loss(loss, mask, "seq-mean-token-sum")) == 2.0
    assert float(agg_loss(loss, mask, "seq-mean-token-sum", global_batch_size=2)) == 1.0


def test_token_sum_norm_without_loss_scale_factor_divides_by_the_padded_width() -> None:
    # One row of one token padded to width 4: Σ = 1 over one sequence, divided by 4 (not H = 1).
    got = verl_agg_seq_mean_token_sum_norm_default(
        _t([[1.0, 0.0, 0.0, 0.0]]), _t([[1.0, 0.0, 0.0, 0.0]]), constant=1.0
    )
    assert float(got) == 0.25


def test_k3_plus_has_the_clamped_value_and_the_k2_gradient() -> None:
    # log π − log π_ref = 30: low_var_kl clamps the log-ratio to −20 and the value to 10; the
    # straight-through gradient is k2's, d = 30.
    logp = _t([[0.0]]).requires_grad_(True)
    got = verl_kl_penalty_k3_st(logp, _t([[-30.0]]), mask=_t([[1.0]]))
    (grad,) = torch.autograd.grad(got.sum(), logp)
    assert float(got.detach()) == 10.0
    assert float(grad) == 30.0


def test_singletons_rloo_keeps_the_reward_rloo_vectorized_zeroes_it_grpo_divides() -> None:
    rewards, group = torch.tensor([0.25, 1.0, 0.0], dtype=F64), torch.tensor([7, 3, 3])
    assert verl_rloo_advantages(rewards, group=group).tolist() == [0.25, 1.0, -1.0]
    assert verl_rloo_vectorized_advantages(rewards, group=group).tolist() == [0.0, 1.0, -1.0]
    # GRPO's singleton: (r − 0)/(1 + 1e-6), the std a float32 tensor
    singleton = float(verl_grpo_advantages(rewards, group=group)[0])
    one_plus_eps = float(torch.tensor(1.0) + 1e-6)
    assert singleton == 0.25 / one_plus_eps != 0.25


@pytest.mark.parametrize("mode", [*MODES, "seq_mean_token_sum_norm"])
def test_partition_on_the_trainers_scaling_path(mode: str) -> None:
    p = adapter(f"verl.agg_loss_{mode}").partition
    assert p is not None
    report = check_partition_invariance(
        p.candidate, mode=p.mode, rule=p.rule, constant=p.constant, empty_rows=p.empty_rows,
        dtype="float64", max_examples=10, rtol=p.rtol,
    )  # fmt: skip
    assert report.ok, report
    assert report.intent == "global"


def test_the_kl_penalty_in_the_reward_masks_in_the_trainer_and_not_in_compute_rewards() -> None:
    from refimpl.frameworks._verl_losses_reward import verl_apply_kl_penalty, verl_compute_rewards

    # outcomes 1 and 2 on rows of 2 and 1 valid tokens, k1 = 0.5 everywhere, β = 0.1
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    rewards = torch.tensor([1.0, 2.0], dtype=torch.float64)
    kl = torch.full((2, 2), 0.5, dtype=torch.float64)
    got = verl_apply_kl_penalty(rewards, kl, beta=0.1, reward_clip=None, mask=mask)
    want = torch.tensor([[-0.05, 0.95], [1.95, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=0.0, atol=1e-15)
    # compute_rewards has no mask: the padded token carries −β·kl
    got = verl_compute_rewards(rewards, kl, beta=0.1, reward_clip=None, mask=mask)
    want = torch.tensor([[-0.05, 0.95], [1.95, -0.05]], dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=0.0, atol=1e-15)


def test_masked_mean_adds_1e8_to_the_count() -> None:
    from refimpl.frameworks._verl_losses_agg import verl_masked_mean

    loss = torch.tensor([[1.0, 3.0, 1e30]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64)
    assert verl_masked_mean(loss, mask).item() == 4.0 / (2.0 + 1e-8)
    assert verl_masked_mean(loss, torch.zeros_like(mask)).item() == 0.0
