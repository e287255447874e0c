"""SkyRL's outlier-token mask on fixed inputs: the any-token veto, decided on a float32 ratio.

``compute_outlier_token_mask`` keeps a row when no valid token has ``ρ < low`` or ``ρ > high``;
the matrix checks it against ``any_token_veto`` on drawn inputs, where a ratio within float32
rounding of a threshold is not drawn. These pin the rule on chosen rows, the unset high threshold,
the unset low threshold, and the one place it departs from the reference: SkyRL compares ``exp(clamp(d, ±20))`` rounded to
float32, the reference compares ``d`` with ``log τ`` in float64.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from refimpl.frameworks._skyrl import skyrl_outlier_token_mask
from refimpl.losses.rejection import any_token_veto

F64 = torch.float64
# ratios per token: row 0 has one at 1/16 (below 1/8), row 1 one at 16 (above 8), row 2 a 1/16
# at padding only, row 3 every token at 1, row 4 no valid token
RATIOS = torch.tensor(
    [
        [1.0, 0.0625, 2.0],
        [16.0, 1.0, 1.0],
        [2.0, 1.0, 0.0625],
        [1.0, 1.0, 1.0],
        [1e-9, 1e9, 1.0],
    ],
    dtype=F64,
)
MASK = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 1, 1], [0, 0, 0]], dtype=F64)
LOGP_OLD = torch.log(RATIOS) - 1.5
LOGP_ROLLOUT = torch.full_like(RATIOS, -1.5)


def test_one_valid_token_outside_the_bounds_masks_its_row() -> None:
    got = skyrl_outlier_token_mask(LOGP_OLD, LOGP_ROLLOUT, threshold=0.125, upper=8.0, mask=MASK)
    assert got.tolist() == [0.0, 0.0, 1.0, 1.0, 1.0]
    expected = any_token_veto(
        LOGP_OLD.numpy(), LOGP_ROLLOUT.numpy(), threshold=0.125, upper=8.0, mask=MASK.numpy()
    )
    assert np.array_equal(got.numpy(), expected)


def test_an_unset_high_threshold_checks_no_ceiling() -> None:
    got = skyrl_outlier_token_mask(LOGP_OLD, LOGP_ROLLOUT, threshold=0.125, mask=MASK)
    assert got.tolist() == [0.0, 1.0, 1.0, 1.0, 1.0]


def test_an_unset_low_threshold_checks_only_the_ceiling() -> None:
    # by hand: with ρ > 8 the only veto, row 1 (a 16) goes; row 0's 1/16 and row 4's 1e-9 stay
    got = skyrl_outlier_token_mask(LOGP_OLD, LOGP_ROLLOUT, threshold=None, upper=8.0, mask=MASK)
    assert got.tolist() == [1.0, 0.0, 1.0, 1.0, 1.0]
    expected = any_token_veto(
        LOGP_OLD.numpy(), LOGP_ROLLOUT.numpy(), threshold=None, upper=8.0, mask=MASK.numpy()
    )
    assert np.array_equal(got.numpy(), expected)


def test_the_decision_is_taken_on_the_float32_ratio() -> None:
    # d = log(1/2) − 1e-12: ρ < 1/2 in float64, but exp(d) rounds to 1/2 in float32, which is kept
    d = math.log(0.5) - 1e-12
    logp_old = torch.tensor([[d, 0.0]], dtype=F64)
    zeros, mask = torch.zeros(1, 2, dtype=F64), torch.ones(1, 2, dtype=F64)
    assert float(torch.tensor(d).to(torch.float32).exp()) == 0.5
    got = skyrl_outlier_token_mask(logp_old, zeros, threshold=0.5, mask=mask)
    assert got.tolist() == [1.0]
    reference = any_token_veto(logp_old.numpy(), zeros.numpy(), threshold=0.5, mask=mask.numpy())
    assert reference.tolist() == [0.0]
