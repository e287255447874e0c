"""TRL 1.16.0's vLLM importance-sampling correction, hand-worked through the adapters that run the
real ``GRPOTrainer._generate_and_score_completions``: each mode on ratios that are powers of two,
a NaN sampling log-probability (ratio 1), padded positions (ratio 1 whatever the log-probabilities
there), the float32 sampling log-probabilities, and the infinite log-probabilities the adapters'
declared divergence states."""

from __future__ import annotations

import math

import pytest
import torch

from refimpl.frameworks import adapter, adapters
from refimpl.frameworks._trl_losses_vllm_is import (
    trl_vllm_is_sequence_mask,
    trl_vllm_is_sequence_truncate,
    trl_vllm_is_token_mask,
    trl_vllm_is_token_truncate,
    vllm_is_ratio,
)

F32 = torch.float32
LN2 = math.log(2.0)
NAN = math.nan

# Row 0: log π_old − log μ = ln 4, NaN (log μ missing), ln 2: token ratios 4, 1, 2, product 8.
# Row 1: one valid token at ln(1/4); its padding holds log-probabilities (7, NaN) that must not
# count. Row 2: no valid token.
OLD = torch.tensor([[3 * LN2, -1.0, LN2], [-2 * LN2, 7.0, NAN], [5.0, 5.0, 5.0]], dtype=F32)
SAMPLED = torch.tensor([[LN2, NAN, 0.0], [0.0, 3.0, 0.0], [0.0, 0.0, 0.0]], dtype=F32)
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], dtype=F32)


def _close(found: torch.Tensor, rows: list[list[float]]) -> None:
    torch.testing.assert_close(found, torch.tensor(rows, dtype=F32), rtol=1e-6, atol=0.0)


def test_the_four_modes_have_an_adapter_on_the_trainer_method() -> None:
    keys = {a.key for a in adapters("trl")}
    for mode in ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask"):
        a = adapter(f"trl.vllm_is_{mode}")
        assert a.key in keys
        assert a.function.endswith("GRPOTrainer._generate_and_score_completions")
        assert a.settings["vllm_importance_sampling_mode"] == mode


def test_token_truncate_clips_above_the_cap_and_is_one_at_nan_and_padding() -> None:
    found = trl_vllm_is_token_truncate(OLD, SAMPLED, cap=2.0, mask=MASK)
    _close(found, [[2.0, 1.0, 2.0], [0.25, 1.0, 1.0], [1.0, 1.0, 1.0]])


def test_truncate_clips_from_below_only_with_clip_min() -> None:
    found = vllm_is_ratio(OLD, SAMPLED, MASK, mode="token_truncate", clip_min=0.5, clip_max=2.0)
    _close(found, [[2.0, 1.0, 2.0], [0.5, 1.0, 1.0], [1.0, 1.0, 1.0]])


def test_token_mask_zeroes_ratios_outside_the_band_and_keeps_its_edges() -> None:
    found = trl_vllm_is_token_mask(OLD, SAMPLED, low=0.5, high=2.0, mask=MASK)
    _close(found, [[0.0, 1.0, 2.0], [0.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    found = trl_vllm_is_token_mask(OLD, SAMPLED, low=0.25, high=4.0, mask=MASK)
    _close(found, [[4.0, 1.0, 2.0], [0.25, 1.0, 1.0], [1.0, 1.0, 1.0]])


def test_sequence_truncate_is_the_clipped_product_per_row() -> None:
    found = trl_vllm_is_sequence_truncate(OLD, SAMPLED, cap=2.0, mask=MASK)
    _close(found, [[2.0], [0.25], [1.0]])  # 4·1·2 = 8 clipped; the padding of row 1 adds 0
    _close(trl_vllm_is_sequence_truncate(OLD, SAMPLED, cap=16.0, mask=MASK), [[8.0], [0.25], [1.0]])


def test_sequence_mask_drops_whole_rows_outside_the_band() -> None:
    found = trl_vllm_is_sequence_mask(OLD, SAMPLED, low=0.5, high=2.0, mask=MASK)
    _close(found, [[0.0], [0.0], [1.0]])
    found = trl_vllm_is_sequence_mask(OLD, SAMPLED, low=0.125, high=8.0, mask=MASK)
    _close(found, [[8.0], [0.25], [1.0]])


def test_the_sampling_log_probabilities_are_rounded_to_float32() -> None:
    # log π_old = log μ = 0.1 in float64: TRL builds μ's tensor with torch.tensor (float32), so
    # the ratio is exp(0.1 − fl32(0.1)) = exp(−1.49e-9), not 1
    old = torch.tensor([[0.1]], dtype=torch.float64)
    found = trl_vllm_is_token_truncate(old, old.clone(), cap=2.0, mask=torch.ones(1, 1))
    expected = math.exp(0.1 - float(torch.tensor(0.1, dtype=F32)))
    assert found.dtype == torch.float64
    assert float(found) == pytest.approx(expected, rel=1e-15)
    assert float(found) != 1.0


def test_an_infinite_log_probability_is_not_neutralised() -> None:
    # the declared convention divergence: nan_to_num maps ±inf to ± float32's largest value, so
    # log μ = −inf gives ratio +inf (truncated to the cap, masked to 0) and log π_old = −inf gives 0
    old = torch.tensor([[0.0, -math.inf]], dtype=F32)
    sampled = torch.tensor([[-math.inf, 0.0]], dtype=F32)
    mask = torch.ones(1, 2)
    _close(trl_vllm_is_token_truncate(old, sampled, cap=2.0, mask=mask), [[2.0, 0.0]])
    _close(trl_vllm_is_token_mask(old, sampled, low=0.5, high=2.0, mask=mask), [[0.0, 0.0]])
