"""verl 0.9.1's and SkyRL 0.3.0's advantage estimators: every registered one has an adapter, and the
rules read in their code hold on hand-computed inputs (the float32 α of verl's GPG, OPO's length
weights, Pass@k's single non-zero entry, the optimal token baseline's zero tail, MaxRL's pass-rate
division).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from refimpl.frameworks import adapters, load_function
from refimpl.frameworks._skyrl_losses import PPO_UTILS_LOADED
from refimpl.frameworks._skyrl_losses_adv import skyrl_maxrl
from refimpl.frameworks._verl_losses_adv import (
    verl_gpg_advantages,
    verl_grpo_passk_advantages_no_std,
    verl_opo_advantages,
    verl_optimal_token_baseline_advantages,
    verl_tir_optimal_token_baseline_advantages,
)

F64 = torch.float64


def test_every_registered_verl_advantage_estimator_has_an_adapter() -> None:
    registry = load_function("verl.trainer.ppo.core_algos:ADV_ESTIMATOR_REGISTRY")
    functions = {a.function.rpartition(":")[2] for a in adapters("verl")}
    missing = sorted(name for name, fn in registry.items() if fn.__name__ not in functions)
    assert missing == []


def test_verl_gpg_rounds_alpha_to_float32() -> None:
    # three non-zero rewards in four: α = 4/3, computed as a float32 tensor
    got = verl_gpg_advantages(torch.tensor([1.0, 1.0, 0.0, 1.0], dtype=F64), group=[0, 1, 1, 2])
    alpha32 = float(torch.tensor(4) / torch.tensor(3))
    assert alpha32 != 4 / 3
    assert got.tolist() == [alpha32, alpha32 * 0.5, -alpha32 * 0.5, alpha32]


def test_verl_opo_weighs_the_baseline_by_length() -> None:
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]], dtype=F64)
    got = verl_opo_advantages(torch.tensor([1.0, 0.0], dtype=F64), group=[0, 0], mask=mask)
    assert got.tolist() == [0.75, -0.25]


def test_verl_passk_rewards_only_the_best_response() -> None:
    got = verl_grpo_passk_advantages_no_std(
        torch.tensor([1.0, 0.0, 0.5, 2.0, 2.0], dtype=F64), group=[0, 0, 1, 1, 1]
    )
    assert got.tolist() == [1.0, 0.0, 0.0, 0.0, 0.0]  # a tie at the top gives 0


@pytest.mark.parametrize(
    "otb", [verl_optimal_token_baseline_advantages, verl_tir_optimal_token_baseline_advantages]
)
def test_verl_optimal_token_baseline_zeroes_the_longest_tail(otb: object) -> None:
    # π = 0, Σπ² = 0: w = 1; the one-token row and the two-token row share the first baseline
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=F64)
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0]], dtype=F64)
    logp = torch.full((2, 2), -800.0, dtype=F64)
    got = otb(rewards, logp, torch.zeros((2, 2), dtype=F64), group=np.array([0, 0]), mask=mask)  # type: ignore[operator]
    # t = 0: returns (1, 1), baseline 2/(2 + 1e-8); t = 1: the second row alone, baseline zeroed
    assert got[:, 0].tolist() == pytest.approx([0.0, 0.0], abs=1e-8)
    assert got[1, 1].item() == 1.0


@pytest.mark.skipif(not PPO_UTILS_LOADED, reason="needs the SOURCE_LOADS entry of ppo_utils")
def test_skyrl_maxrl_divides_by_the_pass_rate() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.5, 0.0, 0.0], dtype=F64)
    got = skyrl_maxrl(rewards, group=torch.tensor([0, 0, 0, 0, 1, 2, 2]))
    # p = 1/4: (1 − 1/4)/(1/4 + 1e-6), (0 − 1/4)/(1/4 + 1e-6); a singleton keeps 0.5; no success: 0
    assert got[0].item() == pytest.approx(0.75 / (0.25 + 1e-6), rel=1e-15)
    assert got[1].item() == pytest.approx(-0.25 / (0.25 + 1e-6), rel=1e-15)
    assert got[4:].tolist() == [0.5, 0.0, 0.0]
    assert math.isclose(float(got[:4].sum()), 0.0, abs_tol=1e-12)
