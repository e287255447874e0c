"""TRL's RLOO with ``beta > 0`` and ``reward_clip_range`` (the real
``RLOOTrainer._generate_and_score_completions`` through its adapter), worked by hand."""

from __future__ import annotations

import numpy as np
import torch

from refimpl.frameworks._trl_losses_rloo import (
    trl_rloo_kl_advantages,
    trl_rloo_kl_normalized_advantages,
)
from refimpl.losses.kl_reward import rloo_kl_advantages

REWARDS = torch.tensor([3.0, 0.0, -0.5, 1.0])
GROUP = torch.tensor([0, 0, 1, 1])
LOGP = torch.tensor([[-1.0, -0.5], [-1.0, -4.0], [-2.0, -2.0], [-1.0, -1.0]])
REF = torch.tensor([[-2.0, -0.5], [-0.5, 0.0], [-2.0, -2.0], [0.0, 0.0]])
MASK = torch.tensor([[1, 1], [1, 0], [1, 1], [1, 0]])


def test_the_clipped_outcome_minus_the_summed_k1_enters_the_leave_one_out_baseline() -> None:
    """Clip (−1, 1): outcomes (1, 0, −0.5, 1); summed log-ratios (1, −0.5, 0, −1) (row 1's
    padded −4 and row 3's −1 not read); β = 1/2: r̃ = (0.5, 0.25, −0.5, 1.5);
    leave-one-out in pairs: (0.25, −0.25, −2, 2)."""
    found = trl_rloo_kl_advantages(
        REWARDS, LOGP, REF, group=GROUP, beta=0.5, reward_clip=(-1.0, 1.0), mask=MASK
    )
    assert found.tolist() == [0.25, -0.25, -2.0, 2.0]


def test_the_penalty_is_not_clipped() -> None:
    """A sequence log-ratio of 8 nats with β = 1 takes the reward to −7, below the clip range
    (−1, 1): TRL clips the outcome first, so the penalty passes the range."""
    lp = torch.tensor([[0.0], [-8.0]])
    found = trl_rloo_kl_advantages(
        torch.tensor([0.0, 0.0]), lp, torch.tensor([[-8.0], [-8.0]]), group=torch.tensor([0, 0]),
        beta=1.0, reward_clip=(-1.0, 1.0), mask=torch.ones(2, 1),
    )  # fmt: skip
    assert found.tolist() == [-8.0, 8.0]


def test_normalised_kl_advantages_are_refimpls() -> None:
    found = trl_rloo_kl_normalized_advantages(
        REWARDS, LOGP, REF, group=GROUP, beta=0.5, reward_clip=None, mask=MASK
    )
    want = rloo_kl_advantages(
        REWARDS.numpy(), LOGP.numpy(), REF.numpy(), group=GROUP.numpy(), beta=0.5,
        mask=MASK.numpy(), normalize=True, eps=1e-4,
    )  # fmt: skip
    np.testing.assert_allclose(found.double().numpy(), want, rtol=1e-6, atol=1e-7)  # float32
