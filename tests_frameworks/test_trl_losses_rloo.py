"""TRL's RLOO loss, its normalised advantages, the sequence-level CISPO/SAPO, VESPO and the
high-entropy mask, read through their adapters: the behaviours the adapters' divergences state."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from refimpl.frameworks._trl_losses_rloo import trl_rloo_loss, trl_rloo_normalized_advantages
from refimpl.frameworks._trl_losses_sequence_soft import trl_high_entropy_mask, trl_vespo_loss
from refimpl.losses.advantages_normalized import rloo_normalized_advantages
from refimpl.losses.sequence_gamma import vespo_loss


def test_an_empty_completion_adds_minus_its_advantage_over_the_batch() -> None:
    logp = torch.tensor([[-0.5, -1.0], [0.0, 0.0]], dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    adv = torch.tensor([[1.0, 1.0], [3.0, 3.0]], dtype=torch.float64)
    loss = trl_rloo_loss(logp, logp.detach(), adv, eps_low=0.2, eps_high=None, mask=mask)
    assert float(loss.detach()) == pytest.approx((-1.0 - 3.0) / 2, rel=1e-15)  # empty: −3/2
    (grad,) = torch.autograd.grad(loss, logp)
    assert torch.equal(grad[1], torch.zeros(2, dtype=torch.float64))


def test_the_sequence_ratio_is_the_product_of_the_token_ratios() -> None:
    # two tokens of ratio 1.05 each: the product 1.1025 is clipped at 1.1 for A > 0, the
    # geometric mean (GSPO's) would not be
    logp = torch.log(torch.tensor([[0.525, 0.525]], dtype=torch.float64)).requires_grad_(True)
    old = torch.log(torch.tensor([[0.5, 0.5]], dtype=torch.float64))
    loss = trl_rloo_loss(logp, old, torch.ones(1, 2, dtype=torch.float64), eps_low=0.1,
                         eps_high=None, mask=torch.ones(1, 2, dtype=torch.float64))  # fmt: skip
    assert float(loss.detach()) == pytest.approx(-1.1, rel=1e-15)


def test_normalised_rloo_advantages_are_refimpls() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.5, 2.0, 0.0])
    group = torch.tensor([0, 0, 1, 1, 2, 2])
    found = trl_rloo_normalized_advantages(rewards, group=group).double().numpy()
    expected = rloo_normalized_advantages(rewards.numpy(), group=group.numpy(), eps=1e-4)
    np.testing.assert_allclose(found, expected, rtol=1e-6, atol=1e-7)  # float32 rewards


def test_vespos_kernel_parameters_are_rounded_to_float32() -> None:
    lp = torch.tensor([[-0.5, -1.0, -0.25]], dtype=torch.float64)
    old = lp - torch.tensor([[0.1, -0.2, 0.3]], dtype=torch.float64)
    mask, adv = torch.ones(1, 3, dtype=torch.float64), torch.ones(1, 3, dtype=torch.float64)
    kw = {"k_pos": 2.1, "lambda_pos": 3.3, "k_neg": 2.9, "lambda_neg": 1.7}
    found = float(trl_vespo_loss(lp, old, adv, mask=mask, **kw))
    ref = vespo_loss(lp.numpy(), old.numpy(), adv.numpy(), log_ratio_clamp=20.0,
                     log_weight_range=(math.log(1e-8), 20.0), **kw)  # fmt: skip
    exact = float(ref.loss.sum() / 3)
    assert found != exact
    assert abs(found - exact) <= 1e-7 * abs(exact)
    k32 = float(np.float32(2.1))  # the float32 k and λ reproduce TRL's value closely
    ref32 = vespo_loss(lp.numpy(), old.numpy(), adv.numpy(), log_ratio_clamp=20.0,
                       log_weight_range=(math.log(1e-8), 20.0), k_pos=k32,
                       lambda_pos=float(np.float32(3.3)), k_neg=2.9, lambda_neg=1.7)  # fmt: skip
    assert abs(found - float(ref32.loss.sum() / 3)) <= 1e-14 * abs(exact)


def test_the_high_entropy_mask_keeps_ties() -> None:
    h = torch.tensor([[1.0, 1.0, 1.0, 0.5]], dtype=torch.float64)
    kept = trl_high_entropy_mask(h, top_fraction=0.2, mask=torch.ones(1, 4))
    assert kept.tolist() == [[1.0, 1.0, 1.0, 0.0]]
