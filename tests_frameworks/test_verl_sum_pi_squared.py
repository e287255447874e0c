"""verl 0.9.1's calculate_sum_pi_squared_from_logits: the real function on hand-worked logits,
against refimpl.token_sum_pi_squared and its gradient.

The matrix entry ``verl.sum_pi_squared_from_logits`` searches for disagreements; these tests pin
what was read in verl's code: Σπ² of softmax(logits) with no temperature of its own (its caller
divides the logits), finite at huge logits, and its autograd gradient 2π(π − Σπ²).
"""

from __future__ import annotations

import numpy as np
import torch

import refimpl
from refimpl.frameworks import adapter

# π = (1/2, 1/4, 1/4): Σπ² = 3/8; equal logits: 1/V; a huge gap: a point mass
Z = np.log([[[2.0, 1.0, 1.0], [1.0, 1.0, 1.0]]])
HUGE = np.array([[[1e4, 1e4, 1e4 - 1e3], [1e4, 0.0, -1e4]]])


def _verl(z: np.ndarray, temperature: float = 1.0) -> torch.Tensor:
    logits = torch.tensor(z / temperature, dtype=torch.float64)
    out: torch.Tensor = adapter("verl.sum_pi_squared_from_logits").candidate(logits)
    return out


def test_the_value_is_sum_pi_squared_by_hand() -> None:
    np.testing.assert_allclose(_verl(Z).numpy(), [[3 / 8, 1 / 3]], rtol=1e-14)
    # lse(2z) − 2·lse(z) at |z| ~ 1e4 rounds the exponent by about 4·1e4·u ≈ 1e-11 (the spec's
    # condition 4·max|y| allows it); refimpl's exp(2·log π) is exact here
    np.testing.assert_allclose(_verl(HUGE).numpy(), [[0.5, 1.0]], rtol=1e-11)
    np.testing.assert_allclose(refimpl.token_sum_pi_squared(HUGE), [[0.5, 1.0]], rtol=1e-15)


def test_the_callers_division_by_the_temperature_is_the_references_temperature() -> None:
    for temperature in (0.5, 0.7, 2.0):
        found = _verl(Z, temperature).numpy()
        expected = refimpl.token_sum_pi_squared(Z, temperature=temperature)
        np.testing.assert_allclose(found, expected, rtol=1e-13)


def test_the_autograd_gradient_is_the_references() -> None:
    rng = np.random.default_rng(3)
    z = rng.normal(0.0, 3.0, (2, 3, 5))
    cot = rng.integers(-4, 5, (2, 3)) / 4.0
    logits = torch.tensor(z, requires_grad=True)
    fn = adapter("verl.sum_pi_squared_from_logits").candidate
    (fn(logits) * torch.tensor(cot)).sum().backward()
    assert logits.grad is not None
    expected = refimpl.token_sum_pi_squared_grad(z, cotangent=cot)
    np.testing.assert_allclose(logits.grad.numpy(), expected, rtol=1e-11, atol=1e-14)
