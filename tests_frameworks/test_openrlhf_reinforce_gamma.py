"""OpenRLHF 0.11.2's ``reinforce`` estimator at ``advantage.gamma < 1``: the real
``compute_advantages_and_returns`` on hand-worked rows at γ = 1/2, against refimpl's discounted
return (``gae_advantages`` at V = 0, λ = 1, ``gaps="steps"``) and its token whitening.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch

from refimpl.frameworks import _openrlhf_losses_advantages
from refimpl.frameworks._openrlhf_losses_advantages import (
    openrlhf_reinforce_discounted,
    openrlhf_reinforce_discounted_centred,
)
from refimpl.losses import gae_advantages, reinforce_pp_advantages

pytestmark = pytest.mark.skipif(
    not _openrlhf_losses_advantages.ADAPTERS,
    reason="needs the experience maker in refimpl.frameworks.SOURCE_LOADS",
)

# row 0: the outcome 1 on its last valid token (index 2), garbage at the padding; row 1: per-token
# rewards with a gap at index 1 (a discount step with reward 0 in OpenRLHF)
REWARDS = [[0.0, 0.0, 1.0, 99.0], [2.0, 7.0, 4.0, 0.0]]
MASK = [[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 1.0, 1.0]]
# γ = 1/2, by hand: row 0 (1/4, 1/2, 1, ·); row 1: R_3 = 0, R_2 = 4, R_1 = 0 + 2 = 2, R_0 = 2 + 1 = 3
RETURNS: list[list[Fraction | None]] = [
    [Fraction(1, 4), Fraction(1, 2), Fraction(1), None],
    [Fraction(3), None, Fraction(4), Fraction(0)],
]


def _run(fn: object) -> tuple[np.ndarray, np.ndarray]:
    rewards, mask = torch.tensor(REWARDS, dtype=torch.float64), torch.tensor(MASK)
    adv, ret = fn(rewards, gamma=0.5, mask=mask.to(torch.float64))  # type: ignore[operator]
    return adv.double().numpy(), ret.double().numpy()


def test_the_returns_are_discounted_back_from_each_reward() -> None:
    _, ret = _run(openrlhf_reinforce_discounted)
    for b, row in enumerate(RETURNS):
        for t, want in enumerate(row):
            if want is not None:
                assert ret[b, t] == float(want), (b, t, ret[b, t], want)
    exact = gae_advantages(
        [[Fraction(x) for x in r] for r in REWARDS], [[0] * 4] * 2,
        gamma=Fraction(1, 2), lam=1, mask=MASK, gaps="steps",
    ).advantages  # fmt: skip
    valid = np.asarray(MASK) > 0
    assert np.array_equal(ret[valid], np.asarray(exact, dtype=float)[valid])


def test_the_advantages_are_the_returns_whitened_over_the_valid_tokens() -> None:
    adv, ret = _run(openrlhf_reinforce_discounted)
    valid = np.asarray(MASK) > 0
    expected = reinforce_pp_advantages(
        ret[valid], std="population", eps=1e-8, eps_placement="floor"
    )
    np.testing.assert_allclose(adv[valid], expected, rtol=1e-6)  # OpenRLHF whitens in float32


def test_no_std_norm_only_centres() -> None:
    adv, ret = _run(openrlhf_reinforce_discounted_centred)
    valid = np.asarray(MASK) > 0
    np.testing.assert_allclose(adv[valid], ret[valid] - ret[valid].mean(), rtol=1e-6)
