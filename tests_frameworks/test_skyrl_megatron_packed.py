"""SkyRL's Megatron packed-sequence and fused-LM-head log-probabilities and entropies on fixed
logits of powers of two.

The adapters run each function on one gloo rank; these pin what the drawn checks take for granted:
the packing (one row of ``T + 1`` positions per drawn row, the function's roll within each
sequence), the identity LM head (hidden states = logits), and the masked token mean of the packed
entropies.
"""

from __future__ import annotations

import pytest
import torch

from refimpl.frameworks import _skyrl_losses_megatron_packed as packed
from refimpl.frameworks import eager

# two rows of two positions over a vocabulary of four
LOGITS = torch.tensor(
    [
        [[0.5, 0.25, -1.0, 2.0], [4.0, 0.0, 0.0, -0.5]],
        [[-2.0, 1.0, 0.5, 0.0], [0.0, 0.0, 0.0, 0.0]],
    ],
    dtype=torch.float64,
)
TOKENS = torch.tensor([[1, 3], [0, 2]])
COTANGENT = torch.tensor([[1.0, -0.5], [2.0, 0.25]], dtype=torch.float64)
MASK = torch.tensor([[1.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
# float32 inside: |z / T| <= 8, log-sum-exp near 8, each rounded at 2^-24
TOL = 2**-19


def _expected_logprobs(temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    z = LOGITS.clone().requires_grad_(True)
    logp = torch.log_softmax(z / temperature, dim=-1).gather(-1, TOKENS[..., None])[..., 0]
    (grad,) = torch.autograd.grad(logp, z, grad_outputs=COTANGENT)
    return logp.detach(), grad


def _entropy(z: torch.Tensor) -> torch.Tensor:
    return -(torch.softmax(z, dim=-1) * torch.log_softmax(z, dim=-1)).sum(-1)


@pytest.mark.parametrize(
    "candidate",
    [
        packed.skyrl_megatron_logprobs_packed,
        packed.skyrl_megatron_hidden_logprobs,
        packed.skyrl_megatron_hidden_logprobs_packed,
    ],
)
def test_the_log_probability_of_each_given_token_and_its_softmax_gradient(
    candidate: object,
) -> None:
    with eager():
        value, grad = candidate(  # type: ignore[operator]
            LOGITS, TOKENS, temperature=0.5, mask=MASK, cotangent=COTANGENT
        )
    want_value, want_grad = _expected_logprobs(0.5)
    assert value.shape == (2, 2)
    assert torch.allclose(value.double(), want_value, rtol=0.0, atol=TOL)
    assert torch.allclose(grad.double(), want_grad, rtol=0.0, atol=TOL)


def test_the_packing_scores_each_rows_own_tokens() -> None:
    # a row's second token differs from the first row's: a packing that reads the wrong
    # sequence or the wrong offset scores another token
    with eager():
        value, _ = packed.skyrl_megatron_logprobs_packed(
            LOGITS, TOKENS, temperature=1.0, mask=MASK, cotangent=COTANGENT
        )
    # the last row's last position is uniform over four tokens: log(1/4) = -2 log 2
    assert value[1, 1].item() == pytest.approx(-2 * torch.log(torch.tensor(2.0)).item(), abs=TOL)


def test_the_fused_entropy_of_every_position_and_its_gradient() -> None:
    z = LOGITS.clone().requires_grad_(True)
    with eager():
        got = packed.skyrl_megatron_hidden_entropy(z, temperature=0.5)
    # torch autograd runs through the forward's all-reduces, which have no autograd kernel
    # (identity at one rank); torch says so
    with pytest.warns(UserWarning, match="c10d::allreduce_"):
        (grad,) = torch.autograd.grad(got, z, grad_outputs=COTANGENT.float())
    w = LOGITS.clone().requires_grad_(True)
    expected = _entropy(w / 0.5)
    (want,) = torch.autograd.grad(expected, w, grad_outputs=COTANGENT)
    # the uniform position: exactly log 4
    assert got[1, 1].item() == pytest.approx(2 * torch.log(torch.tensor(2.0)).item(), abs=TOL)
    assert torch.allclose(got.double(), expected.detach(), rtol=0.0, atol=TOL)
    assert torch.allclose(grad.double(), want, rtol=0.0, atol=TOL)


@pytest.mark.parametrize("fused", [False, True])
def test_the_packed_entropy_is_the_masked_token_mean_and_its_gradient(fused: bool) -> None:
    z = LOGITS.clone().requires_grad_(True)
    with eager():
        if fused:
            got = packed.skyrl_megatron_hidden_entropy_packed(z, temperature=1.0, mask=MASK)
        else:
            got = packed.skyrl_megatron_entropy_packed(z, mask=MASK)
    if fused:  # autograd through the all-reduces, as above
        with pytest.warns(UserWarning, match="c10d::allreduce_"):
            (grad,) = torch.autograd.grad(got, z)
    else:
        (grad,) = torch.autograd.grad(got, z)
    w = LOGITS.clone().requires_grad_(True)
    expected = (_entropy(w) * MASK).sum() / MASK.sum()  # three masked-in tokens
    (want,) = torch.autograd.grad(expected, w)
    assert torch.allclose(got.double(), expected.detach(), rtol=0.0, atol=TOL)
    assert torch.allclose(grad.double(), want, rtol=0.0, atol=TOL)
    assert grad[0, 1].abs().max().item() == 0.0  # the masked-out position
