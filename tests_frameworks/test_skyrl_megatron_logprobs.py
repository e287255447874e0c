"""SkyRL's Megatron log-probabilities (``from_parallel_logits_to_logprobs``) on fixed logits.

The adapters run the function on one gloo rank; these pin what the drawn checks take for granted:
the function scores position ``t`` with token ``t + 1`` (the adapter's shift undoes it), and both
custom backwards, the saved softmax and the chunked recomputation, give the softmax gradient.
"""

from __future__ import annotations

import pytest
import torch

from refimpl.frameworks._skyrl_losses_megatron_logprobs import megatron_logprobs


def _logprobs(chunk_size: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    from skyrl.backends.skyrl_train.distributed.megatron.model_utils import (
        from_parallel_logits_to_logprobs,
    )

    return megatron_logprobs(
        from_parallel_logits_to_logprobs,
        LOGITS,
        TOKENS,
        temperature=0.5,
        cotangent=COTANGENT,
        chunk_size=chunk_size,
    )


LOGITS = torch.tensor([[[0.5, 0.25, -1.0], [4.0, 0.0, 0.0], [-2.0, 1.0, 0.5]]], dtype=torch.float64)
TOKENS = torch.tensor([[1, 0, 2]])
COTANGENT = torch.tensor([[1.0, -0.5, 2.0]], dtype=torch.float64)


@pytest.mark.parametrize("chunk_size", [None, 1, 2])
def test_the_log_probability_of_each_given_token_and_its_softmax_gradient(
    chunk_size: int | None,
) -> None:
    value, grad = _logprobs(chunk_size)
    z = LOGITS.clone().requires_grad_(True)
    expected = torch.log_softmax(z / 0.5, dim=-1).gather(-1, TOKENS[..., None])[..., 0]
    (want,) = torch.autograd.grad(expected, z, grad_outputs=COTANGENT)
    # float32 inside: |y| <= 8 and log-sum-exp near 8, rounded at 2^-24 each
    assert torch.allclose(value.double(), expected.detach(), rtol=0.0, atol=2**-19)
    assert torch.allclose(grad.double(), want, rtol=0.0, atol=2**-19)


def test_the_vocab_parallel_entropy_and_its_own_backward() -> None:
    from refimpl.frameworks import eager
    from refimpl.frameworks._skyrl_losses_megatron_logprobs import (
        skyrl_megatron_entropy_from_logits,
    )

    z = LOGITS.clone().requires_grad_(True)
    with eager():
        got = skyrl_megatron_entropy_from_logits(z)
    (grad,) = torch.autograd.grad(got, z, grad_outputs=COTANGENT)
    w = LOGITS.clone().requires_grad_(True)
    p = torch.softmax(w, dim=-1)
    expected = -(p * torch.log_softmax(w, dim=-1)).sum(-1)
    (want,) = torch.autograd.grad(expected, w, grad_outputs=COTANGENT)
    assert torch.allclose(got.detach(), expected.detach(), rtol=1e-14, atol=1e-15)
    assert torch.allclose(grad, want, rtol=1e-13, atol=1e-15)
