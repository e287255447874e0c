"""Adapters pinned to exact outputs on fixed inputs, where the conformance checks cannot hold them.

Every check of verl's IcePop adapters is a recorded divergence (verl's ESS divides by zero when a
batch has no token in the band), so the matrix expects them to fail and a wrong band would go
unseen; the DAPO overlong adapter's reference check is a divergence too (verl rounds rewards to
float32). Each test below computes the expected values by hand from the rule the adapter declares
and names the wrong adapter (a mutant of ``tools/mutate.py``) it was seen to fail on.
"""

from __future__ import annotations

import math

import torch

from refimpl.frameworks._verl import verl_dapo_overlong, verl_sequence_icepop, verl_token_icepop


def _exp(x: float) -> float:
    return float(torch.exp(torch.tensor(x, dtype=torch.float64)))


def test_verl_sequence_icepop_zeroes_a_sequence_below_the_band() -> None:
    # Σ log ρ per row: -2 (ρ = e^-2 ≈ 0.135 < lo = 0.5: 0), 0.5 (in [0.5, 2]: e^0.5 on each valid
    # token), 1 (e ≈ 2.72 > hi = 2: 0); the second row's last token is padding (weight 0).
    # Mutant seen failing: `max(low, 5e-324)` -> `min` (the band's lower edge lost: row 0 kept e^-2).
    log_ratio = torch.tensor([[-1.0, -1.0], [0.5, 7.0], [0.75, 0.25]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    got = verl_sequence_icepop(log_ratio, low=0.5, high=2.0, mask=mask)
    assert got.tolist() == [[0.0, 0.0], [_exp(0.5), 0.0], [0.0, 0.0]]
    assert math.isclose(_exp(0.5), math.exp(0.5), rel_tol=4e-16)


def test_verl_token_icepop_zeroes_a_token_below_the_band() -> None:
    # per token ρ = e^x: e^-1 ≈ 0.37 < lo = 0.5 (0), e^0.25 and e^-0.5 ≈ 0.61 kept, e^1 > hi = 2 (0).
    # Mutant seen failing: `max(low, 5e-324)` -> `min` in verl_token_icepop (e^-1 kept).
    log_ratio = torch.tensor([[-1.0, 0.25], [-0.5, 1.0]], dtype=torch.float64)
    mask = torch.ones(2, 2, dtype=torch.float64)
    got = verl_token_icepop(log_ratio, low=0.5, high=2.0, mask=mask)
    assert got.tolist() == [[0.0, _exp(0.25)], [_exp(-0.5), 0.0]]


def test_verl_dapo_overlong_reward_on_lengths_through_the_buffer() -> None:
    # DAPO (`refimpl.dapo_overlong_penalty`, conventions §effort-conditioning; no floor):
    # r = min(-(L - (L_max - L_cache)) / L_cache · f, 0)
    # with L_max = 10, L_cache = 4, f = 1: the penalty starts after 6 tokens and is -1 at L_max;
    # every value is a multiple of 1/4, exact in verl's float32 reward tensor.
    # Mutant seen failing: the prompt made two tokens wide (`torch.ones(len(ell), 2)`), which makes
    # verl read every response one token short (0 at L = 7, -1.25 at L = 12).
    lengths = [0, 1, 6, 7, 8, 10, 12]
    got = verl_dapo_overlong(
        torch.tensor(lengths), max_length=10, cache_length=4, penalty_factor=1.0
    )
    assert got.dtype == torch.float64
    assert got.tolist() == [0.0, 0.0, 0.0, -0.25, -0.5, -1.0, -1.5]
    assert [min(-(n - (10 - 4)) / 4 * 1.0, 0.0) for n in lengths] == got.tolist()
