"""AReaL's loss adapters on fixed inputs: the rules they were read to follow, by hand.

The conformance matrix runs every check of every adapter; these pin what a check cannot see on
its own: the denominator of ``ppo_actor_loss_fn`` (the mask count, 1 for an empty batch), the
engine's micro-batch scale ``local / total · dp_size``, GSPO's per-row mean advantage, the KL
clamp, the group normalisations' constants and the entropy of the fused log-prob pass.
"""

from __future__ import annotations

import math

import pytest
import torch

from refimpl.frameworks import STUBS, adapters
from refimpl.frameworks._areal_losses import (
    areal_adv_norm_batch,
    areal_adv_norm_group_mean,
    areal_entropy,
    areal_group_leave_one_out,
    areal_group_norm,
    areal_kl_k3,
    areal_ppo_actor_loss,
    areal_ppo_actor_loss_gspo,
    areal_token_mean,
    areal_token_mean_microbatch,
)
from refimpl.testing import check_partition_invariance, spec_names

F64 = torch.float64
# three rows of 3, 1 and 0 valid tokens (the last row is all padding)
MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=F64)
LOSS = torch.tensor(
    [[1.0, 2.0, 3.0, 1e30], [4.0, -1e30, 0.0, 0.0], [7.0, 7.0, 7.0, 7.0]], dtype=F64
)


def _areal_loss_adapters() -> list[object]:
    return [
        a for a in adapters() if a.key.startswith("areal.") and a.spec in spec_names(losses=True)
    ]


def test_the_loss_adapters_have_distinct_keys_and_loss_specs() -> None:
    keys = [a.key for a in _areal_loss_adapters()]  # type: ignore[attr-defined]
    assert len(keys) == len(set(keys)) >= 16, keys


def test_the_token_mean_divides_by_the_mask_count() -> None:
    # valid tokens 1, 2, 3 | 4 | none: 10 / 4; an all-padding batch divides by 1 (0, not 0/0)
    assert areal_token_mean(LOSS, MASK).item() == 10.0 / 4
    assert areal_token_mean(LOSS, torch.zeros_like(MASK)).item() == 0.0


def test_the_engine_scales_a_micro_batch_by_its_token_share_times_dp_size() -> None:
    # on-policy (ρ = 1), A = 1: the micro-batch's loss is its token mean −1; the engine multiplies
    # it by local / total · dp_size = 3 / 8 · 2 (8 tokens in the step over 2 ranks).
    zeros = torch.zeros(1, 4, dtype=F64)
    got = areal_token_mean_microbatch(
        zeros, zeros, torch.ones(1, dtype=F64), MASK[:1], global_tokens=8, world_size=2
    )
    assert got.item() == pytest.approx(-0.75, rel=1e-7)  # the scale is a float32 quotient
    empty = areal_token_mean_microbatch(
        zeros, zeros, torch.ones(1, dtype=F64), MASK[2:], global_tokens=8, world_size=2
    )
    assert empty.item() == 0.0


def test_the_dual_clip_caps_a_negative_advantage_at_c_times_its_size() -> None:
    # ρ = e² > 1 + ε with A = −1: max(−Aρ, −A·clip(ρ)) = e²; c_clip = 3 caps it at 3·|A|
    logp = torch.tensor([[2.0, 0.5]], dtype=F64)
    zeros, mask = torch.zeros(1, 2, dtype=F64), torch.tensor([[1.0, 0.0]], dtype=F64)
    advantages = torch.tensor([[-1.0, 1.0]], dtype=F64)
    common = {"eps_low": 0.2, "eps_high": None, "mask": mask}
    plain = areal_ppo_actor_loss(logp, zeros, advantages, dual_clip=None, **common)
    assert plain.item() == pytest.approx(math.exp(2.0), rel=1e-15)
    dual = areal_ppo_actor_loss(logp, zeros, advantages, dual_clip=3.0, **common)
    assert dual.item() == 3.0


def test_gspo_gives_every_token_of_a_row_the_row_mean_advantage() -> None:
    # on-policy, rows of 2 and 1 valid tokens, N = 3: each token's gradient is −Ā_row / N
    # (Ā = 2 for the advantages 1 and 3), where the token-level loss would give −A_t / N.
    logp = torch.zeros(2, 2, dtype=F64, requires_grad=True)
    advantages = torch.tensor([[1.0, 3.0], [5.0, 5.0]], dtype=F64)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]], dtype=F64)
    loss = areal_ppo_actor_loss_gspo(
        logp, logp.detach(), advantages, eps_low=0.2, eps_high=None, mask=mask
    )
    loss.backward()
    assert logp.grad is not None
    expected = [-2.0 / 3, -2.0 / 3, -5.0 / 3, 0.0]
    assert logp.grad.ravel().tolist() == pytest.approx(expected, rel=1e-15)
    assert loss.item() == pytest.approx(-3.0, rel=1e-15)


def test_k3_is_clamped_at_ten() -> None:
    # d = logp − ref = −20: e^{20} − 1 − 20 ≈ 4.9e8, clamped to 10; d = 0.5: e^{−0.5} − 1 + 0.5
    logp = torch.tensor([[-20.0, 0.5]], dtype=F64)
    got = areal_kl_k3(logp, torch.zeros_like(logp), mask=torch.ones_like(logp))
    assert got[0, 0].item() == 10.0
    assert got[0, 1].item() == pytest.approx(math.exp(-0.5) - 0.5, rel=1e-6)  # float32


def test_the_group_normalisations_use_the_sample_std_plus_1e_5_and_leave_one_out() -> None:
    rewards = torch.tensor([1.0, 2.0, 3.0, 5.0, 5.0, 5.0])
    group = torch.tensor([0, 0, 0, 1, 1, 1])
    # group 0: mean 2, sample std 1; group 1 is constant (0)
    got = areal_group_norm(rewards, group=group)
    assert got.tolist() == pytest.approx([-1 / (1 + 1e-5), 0.0, 1 / (1 + 1e-5), 0, 0, 0])
    # RLOO: each reward minus the mean of the other two
    loo = areal_group_leave_one_out(rewards, group=group)
    assert loo.tolist() == pytest.approx([-1.5, 0.0, 1.5, 0.0, 0.0, 0.0])
    # a group of one: the leave-one-out mean is 0, so the reward is kept as it is
    assert areal_group_leave_one_out(rewards[:2], group=torch.tensor([0, 1])).tolist() == [1, 2]


def test_the_batch_advantage_norm_weighs_a_reward_by_its_tokens() -> None:
    # rewards 1 (3 tokens) and 3 (1 token): tokens 1, 1, 1, 3, mean 1.5, sample variance 1
    rewards = torch.tensor([1.0, 3.0, 9.0])
    got = areal_adv_norm_batch(rewards, mask=MASK.float())
    assert got.tolist() == pytest.approx([-0.5 / (1 + 1e-5), 1.5 / (1 + 1e-5), 0.0])


def test_the_group_mean_of_the_advantage_norm_is_over_tokens() -> None:
    # one group: rewards 0 (1 token) and 1 (2 tokens); its token mean is 2/3 (not 1/2), the
    # centred tokens -2/3, 1/3, 1/3 have sample variance (4/9 + 1/9 + 1/9) / 2 = 1/3
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    got = areal_adv_norm_group_mean(torch.tensor([0.0, 1.0]), mask=mask, group=torch.tensor([0, 0]))
    d = math.sqrt(1 / 3) + 1e-5
    assert got.tolist() == pytest.approx([-2 / 3 / d, 1 / 3 / d], rel=1e-6)


def test_the_entropy_of_equal_logits_is_log_v() -> None:
    logits = torch.zeros(1, 2, 4, dtype=F64)
    got = areal_entropy(logits, temperature=0.7)
    assert got.ravel().tolist() == pytest.approx([math.log(4)] * 2, rel=1e-6)


def test_the_token_mean_scaling_path_is_partition_invariant() -> None:
    (a,) = [x for x in _areal_loss_adapters() if x.key == "areal.token_mean"]  # type: ignore[attr-defined]
    p = a.partition  # type: ignore[attr-defined]
    report = check_partition_invariance(
        p.candidate,
        mode=p.mode,
        rule=p.rule,
        constant=p.constant,
        empty_rows=p.empty_rows,
        dtype="float64",
        max_examples=8,
        rtol=p.rtol,
    )
    assert report.ok, report


@pytest.mark.skipif(
    not any(s.package == "areal.trainer" for s in STUBS),
    reason="needs the areal.trainer stub in refimpl.frameworks.STUBS (actor.py's package imports "
    "swanlab)",
)
def test_m2po_drops_the_largest_square_until_the_mean_is_below_tau() -> None:
    from refimpl.frameworks._areal_losses_actor import areal_m2po_mask

    # squares 0.25, 0.01, 0 (and a padded 100): the mean of all three is 0.0867 >= 0.04, without
    # the largest 0.005 < 0.04, so only the first token is dropped
    target = torch.tensor([[0.5, 0.1, 0.0, 10.0]], dtype=F64)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]], dtype=F64)
    got = areal_m2po_mask(target, torch.zeros_like(target), tau=0.04, mask=mask)
    assert got.tolist() == [[0.0, 1.0, 1.0, 0.0]]


# --- decoupled PPO with rejection sampling, and the actor's inline GAE --------------------------

F32 = torch.float32
# ratios π_θ/π_prox 1.1, 1, 1 and behaviour weights π_prox/μ 2, 1, 10; advantages 1, −1, 1
DECOUPLED = (
    torch.log(torch.tensor([[0.55, 0.5, 0.5]], dtype=F32)),
    torch.log(torch.tensor([[0.5, 0.5, 0.5]], dtype=F32)),
    torch.log(torch.tensor([[0.25, 0.5, 0.05]], dtype=F32)),
    torch.tensor([[1.0, -1.0, 1.0]], dtype=F32),
)
PPO = {"eps_low": 0.2, "eps_high": None, "dual_clip": None}


def test_rejection_drops_a_token_from_the_sum_but_not_from_the_count() -> None:
    from refimpl.frameworks._areal_losses_decoupled import areal_decoupled_ppo_mask

    ones = torch.ones(1, 3, dtype=F32)
    # per token w·(−A·r): −2.2, 1, rejected (10 > 5): the sum −1.2 over the 3 tokens, not over 2
    got = areal_decoupled_ppo_mask(*DECOUPLED, **PPO, cap=5.0, lower=None, mask=ones)
    assert got.item() == pytest.approx(-1.2 / 3, rel=1e-6)
    # a lower bound 1.5 rejects the weight-1 token too (inclusive bounds keep 2)
    got = areal_decoupled_ppo_mask(*DECOUPLED, **PPO, cap=5.0, lower=1.5, mask=ones)
    assert got.item() == pytest.approx(-2.2 / 3, rel=1e-6)


def test_clamping_keeps_every_token_at_the_bound() -> None:
    from refimpl.frameworks._areal_losses_decoupled import areal_decoupled_ppo_clamp

    ones = torch.ones(1, 3, dtype=F32)
    # weights 2, 1, min(10, 5) = 5: (−2.2 + 1 − 5) / 3; a lower bound 1.5 lifts the 1 to 1.5,
    # so the second token's loss −A·r·w = 1.5
    got = areal_decoupled_ppo_clamp(*DECOUPLED, **PPO, cap=5.0, lower=None, mask=ones)
    assert got.item() == pytest.approx(-6.2 / 3, rel=1e-6)
    got = areal_decoupled_ppo_clamp(*DECOUPLED, **PPO, cap=5.0, lower=1.5, mask=ones)
    assert got.item() == pytest.approx(-5.7 / 3, rel=1e-6)


def test_the_behaviour_weight_carries_no_gradient() -> None:
    from refimpl.frameworks._areal_losses_decoupled import areal_decoupled_ppo_mask

    logp, prox, behav, adv = (t.clone() for t in DECOUPLED)
    logp.requires_grad_(True)
    prox.requires_grad_(True)
    loss = areal_decoupled_ppo_mask(
        logp, prox, behav, adv, **PPO, cap=5.0, lower=None, mask=torch.ones(1, 3, dtype=F32)
    )
    loss.backward()
    assert logp.grad is not None
    # ∂/∂logp = w·(−A·r)/3 per token: −2.2/3, 1/3, 0 (the rejected token)
    assert logp.grad[0].tolist() == pytest.approx([-2.2 / 3, 1 / 3, 0.0], rel=1e-6)


@pytest.mark.skipif(
    not any(s.package == "areal.trainer" for s in STUBS),
    reason="needs the areal.trainer stub in refimpl.frameworks.STUBS (actor.py's package imports "
    "swanlab)",
)
def test_the_actor_gae_skips_a_masked_position_and_bootstraps_zero() -> None:
    from refimpl.frameworks._areal_losses_actor import areal_gae

    # γ = 1/2, λ = 1/2 (γλ = 1/4), rewards 1, ·, 2 with the middle position masked, values
    # 1/2, garbage, 1/4: δ_2 = 2 − 1/4 = 7/4 (the value after the row is 0); the gap is skipped,
    # so δ_0 = 1 + V_2/2 − V_0 = 5/8 and A_0 = 5/8 + 7/16 = 17/16; returns A + V
    rewards = torch.tensor([[1.0, 1e4, 2.0]], dtype=F32)
    values = torch.tensor([[0.5, -1e4, 0.25]], dtype=F32)
    mask = torch.tensor([[1.0, 0.0, 1.0]], dtype=F32)
    adv, ret = areal_gae(rewards, values, gamma=0.5, lam=0.5, mask=mask)
    assert (adv[0, 0].item(), adv[0, 2].item()) == (17 / 16, 7 / 4)
    assert (ret[0, 0].item(), ret[0, 2].item()) == (17 / 16 + 0.5, 7 / 4 + 0.25)


@pytest.mark.skipif(
    not any(s.package == "areal.trainer" for s in STUBS),
    reason="needs the areal.trainer stub in refimpl.frameworks.STUBS (actor.py's package imports "
    "swanlab)",
)
def test_the_kl_reward_puts_the_outcome_on_the_last_token_or_a_masked_one() -> None:
    from refimpl.frameworks._areal_losses_actor import areal_kl_reward

    # β = 1/8, k1 = 1/2 at the two valid tokens of row 0 (garbage at its padding): −1/16 each, the
    # outcome 1 on the second; row 1 has no response token: its outcome 2 sits at position 0,
    # masked (the one-token prompt's position), and GAE never reads it
    kl = torch.tensor([[0.5, 0.5, 7.0], [0.25, 1e3, 1e3]], dtype=F64)
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]], dtype=F64)
    got = areal_kl_reward(
        torch.tensor([1.0, 2.0], dtype=F64),
        kl,
        beta=0.125,
        reward_clip=None,
        mask=mask,
        reward_bias=0.0,
        reward_scaling=1.0,
    )
    assert got.tolist() == [[-0.0625, 0.9375, 0.0], [2.0, 0.0, 0.0]]


@pytest.mark.skipif(
    not any(s.package == "areal.trainer" for s in STUBS),
    reason="needs the areal.trainer stub in refimpl.frameworks.STUBS (actor.py's package imports "
    "swanlab)",
)
def test_the_kl_reward_shifts_then_scales_then_clips_the_outcome() -> None:
    from refimpl.frameworks._areal_losses_actor import areal_kl_reward

    # (r + 1/2)·4 clipped to ±5: r = 3 → 14 → 5; r = −1 → −2; r = −3 → −10 → −5 (scaling
    # before the bias would give 12.5 → 5, −3.5, −11.5 → −5: row 1 tells them apart)
    mask = torch.ones(3, 1, dtype=F64)
    got = areal_kl_reward(
        torch.tensor([3.0, -1.0, -3.0], dtype=F64),
        torch.zeros(3, 1, dtype=F64),
        beta=0.0,
        reward_clip=(-5.0, 5.0),
        mask=mask,
        reward_bias=0.5,
        reward_scaling=4.0,
    )
    assert got.tolist() == [[5.0], [-2.0], [-5.0]]


@pytest.mark.skipif(
    not any(s.package == "areal.trainer" for s in STUBS),
    reason="needs the areal.trainer stub in refimpl.frameworks.STUBS (actor.py's package imports "
    "swanlab)",
)
def test_pure_distillation_differentiates_the_ratio_only() -> None:
    from refimpl.frameworks._areal_losses_actor import areal_pure_distillation

    # on-policy (ρ = 1), log π = log 1/2, log π_T = log 1/4 and log 1 on two valid tokens of 3:
    # the value is Σ (log π − log π_T) / 2 and the gradient (log π − log π_T) / 2 per token, not
    # the k1 penalty's 1/2 (the reward is detached)
    logp = torch.log(torch.tensor([[0.5, 0.5, 0.5]], dtype=F32)).requires_grad_(True)
    teacher = torch.log(torch.tensor([[0.25, 1.0, 0.1]], dtype=F32))
    mask = torch.tensor([[1.0, 1.0, 0.0]], dtype=F32)
    loss = areal_pure_distillation(logp, logp.detach(), teacher, mask=mask)
    loss.backward()
    assert loss.item() == pytest.approx(0.0, abs=1e-7)  # +log 2 and −log 2
    assert logp.grad is not None
    assert logp.grad[0].tolist() == pytest.approx([math.log(2) / 2, -math.log(2) / 2, 0.0])


# --- KL-metric rejection, the largest ratio, the packed layout, the shared factory -------------


def _on_policy(k: list[list[float]]) -> tuple[torch.Tensor, ...]:
    """π_θ = π_prox = 1 and log(π_prox/μ) = ln 2 · k per token; A = 1 (loss −Σw / count)."""
    zero = torch.zeros(len(k), len(k[0]), dtype=F64)
    return zero, zero, -math.log(2.0) * torch.tensor(k, dtype=F64), torch.ones_like(zero)


@pytest.mark.parametrize(
    ("metric", "kept"),
    [("kl_k1", [2.0, 0.5, 0.0, 0.25]), ("kl_k2", [2.0, 0.5, 4.0, 0.25]),
     ("kl_k3", [2.0, 0.5, 4.0, 0.0])],
)  # fmt: skip
def test_each_kl_estimate_rejects_its_own_tokens(metric: str, kept: list[float]) -> None:
    from refimpl.frameworks import _areal_losses_decoupled as m

    candidate = getattr(m, f"areal_decoupled_ppo_{metric}")
    # d = ln 2·(1, −1, 2, −2), bound 1: k1 drops 2 ln 2, k2 (≤ 0.96) none, k3 (1.61) the last;
    # the kept tokens weigh their own ratios 2, 1/2, 4, 1/4
    args = _on_policy([[1.0, -1.0, 2.0, -2.0]])
    got = candidate(*args, **PPO, cap=1.0, lower=None, mask=torch.ones(1, 4, dtype=F64))
    assert got.item() == pytest.approx(-sum(kept) / 4, rel=1e-6)


def test_a_kl_row_statistic_is_arithmetic_and_keeps_the_token_ratios() -> None:
    from refimpl.frameworks import _areal_losses_decoupled as m

    # k3 per token of d = ln 2·(2, 0): 0.64 and 0 → mean 0.32, sum 0.64, max 0.64; bound 0.5:
    # only the mean keeps the row, whose tokens weigh 4 and 1 (not the geometric mean 2)
    args = _on_policy([[2.0, 0.0]])
    ones = torch.ones(1, 2, dtype=F64)
    for agg, want in (("mean", -5.0 / 2), ("sum", 0.0), ("max", 0.0)):
        candidate = getattr(m, f"areal_decoupled_ppo_sequence_kl_k3_{agg}")
        got = candidate(*args, **PPO, cap=0.5, lower=None, mask=ones)
        assert got.item() == pytest.approx(want, rel=1e-6), agg


def test_the_clamp_at_the_largest_ratio_spares_a_row_inside() -> None:
    from refimpl.frameworks._areal_losses_decoupled import areal_decoupled_ppo_sequence_clamp_max

    # log2-ratios (0, −2): the largest ratio 1 is inside [3/4, 3/2], the geometric mean 1/2 is
    # below 3/4 and stays (AReaL clamps only the rows outside the bounds)
    args = _on_policy([[0.0, -2.0]])
    ones = torch.ones(1, 2, dtype=F64)
    got = areal_decoupled_ppo_sequence_clamp_max(*args, **PPO, cap=1.5, lower=0.75, mask=ones)
    assert got.item() == pytest.approx(-0.5, rel=1e-6)


def test_the_packed_layout_gives_the_padded_loss_and_gradient() -> None:
    from refimpl.frameworks._areal_losses_decoupled import (
        areal_decoupled_ppo_sequence_mean,
        areal_decoupled_ppo_sequence_mean_packed,
    )

    torch.manual_seed(0)
    logp, prox, behav = (torch.randn(3, 4, dtype=F64) * 0.3 for _ in range(3))
    adv = torch.randn(3, 4, dtype=F64)
    out = []
    for candidate in (areal_decoupled_ppo_sequence_mean, areal_decoupled_ppo_sequence_mean_packed):
        x = logp.clone().requires_grad_(True)
        loss = candidate(x, prox, behav, adv, **PPO, cap=1.2, lower=0.9, mask=MASK)
        loss.backward()
        out.append((loss.item(), x.grad))
    assert out[0][0] == pytest.approx(out[1][0], rel=1e-6)
    torch.testing.assert_close(out[0][1], out[1][1], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("packed", ["", "_packed"])
@pytest.mark.parametrize("agg", ["mean", "sum", "max"])
@pytest.mark.parametrize(("metric", "want"), [("kl_k1", -0.75), ("kl_k2", -1.0)])
def test_a_row_statistic_below_lower_drops_the_row_only_for_k1(
    metric: str, want: float, agg: str, packed: str
) -> None:
    from refimpl.frameworks import _areal_losses_decoupled_sequence as m

    # d = ln 2·(−1, −1) and ln 2·(1, 0): k1's row mean, sum and max are −0.69, −1.39, −0.69 and
    # 0.35, 0.69, 0.69, so lower −0.5 drops the first row and keeps the second (weights 2, 1:
    # −3/4, the count before rejection); k2 (0.24, 0.24 and 0.24, 0) is never below −0.5 and
    # keeps both (weights 1/2, 1/2, 2, 1: −4/4)
    candidate = getattr(m, f"areal_decoupled_ppo_sequence_{metric}_{agg}{packed}")
    args = _on_policy([[-1.0, -1.0], [1.0, 0.0]])
    got = candidate(*args, **PPO, cap=1.0, lower=-0.5, mask=torch.ones(2, 2, dtype=F64))
    assert got.item() == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("agg", ["sum", "max"])
def test_the_packed_clamp_of_a_row_statistic_gives_the_padded_loss_and_gradient(agg: str) -> None:
    from refimpl.frameworks import _areal_losses_decoupled as padded
    from refimpl.frameworks import _areal_losses_decoupled_sequence as packed

    torch.manual_seed(1)
    logp, prox, behav = (torch.randn(3, 4, dtype=F64) * 0.3 for _ in range(3))
    adv = torch.randn(3, 4, dtype=F64)
    out = []
    for candidate in (
        getattr(padded, f"areal_decoupled_ppo_sequence_clamp_{agg}"),
        getattr(packed, f"areal_decoupled_ppo_sequence_clamp_{agg}_packed"),
    ):
        x = logp.clone().requires_grad_(True)
        loss = candidate(x, prox, behav, adv, **PPO, cap=1.1, lower=0.9, mask=MASK)
        loss.backward()
        out.append((loss.item(), x.grad))
    assert out[0][0] == pytest.approx(out[1][0], rel=1e-6)
    torch.testing.assert_close(out[0][1], out[1][1], rtol=1e-6, atol=1e-7)


def test_every_decoupled_candidate_is_one_call_of_the_factory() -> None:
    import inspect

    from refimpl.frameworks import _areal_losses_decoupled as m
    from refimpl.frameworks import _areal_losses_decoupled_sequence as more

    for a in (*m.ADAPTERS, *more.ADAPTERS):
        source = inspect.getsource(a.candidate)
        assert source.count("rejection_loss(") == 1, a.key
        assert "ppo_actor_loss_fn" in source, a.key


def test_a_generated_reproduction_runs() -> None:
    from refimpl.frameworks import adapter, check
    from refimpl.testing import ConformanceError

    report = check(
        "areal.ppo_actor_loss_decoupled_kl_k2",
        max_examples=5,
        checks=["padding_contributes_nothing"],
    )
    failed = [r for r in report.results if r.reproduction]
    assert failed, "the padding defect gives a reproduction"
    # the reproduction defines the candidate, calls the real function and reports the failure
    code = compile(failed[0].reproduction, "<reproduction>", "exec")
    with pytest.raises(ConformanceError, match="padding entries got gradients"):
        exec(code, {"__name__": "reproduction"})
    assert adapter("areal.ppo_actor_loss_decoupled_kl_k2").setup.count("rejection_loss") == 2
