"""TRL's experimental A*-PO (``A2POTrainer``) through its adapters and its real
``_get_sequence_logps``, worked by hand."""

from __future__ import annotations

import math

import pytest
import torch

from refimpl.frameworks._trl_losses_a2po import trl_a2po_loss, trl_a2po_optimal_values


def test_stage_one_estimates_v_star_from_the_reference_samples() -> None:
    """β₁ = 1/ln 2 makes e^{r/β₁} = 2^r: rewards (0, 1, 1, 2) → log2(9/4); a constant prompt
    keeps its reward; both through the real _estimate_optimal_values."""
    found = trl_a2po_optimal_values(
        torch.tensor([[0.0, 1.0, 1.0, 2.0], [3.0, 3.0, 3.0, 3.0]]), beta1=1 / math.log(2)
    )
    assert float(found[0]) == pytest.approx(math.log2(9 / 4), rel=1e-6)  # float32
    assert float(found[1]) == pytest.approx(3.0, rel=1e-6)


def test_stage_two_regresses_the_implicit_reward_onto_the_optimal_advantage() -> None:
    """D = 1/2, β₂ = 1/2, A = 1: (1/4 − 1)² = 9/16; gradient 2·(1/2)·(−3/4)/B at each valid
    token (B = 1), padding's 5.0 unread."""
    logp = torch.tensor([[-1.0, -1.0, 5.0]], dtype=torch.float64, requires_grad=True)
    loss = trl_a2po_loss(
        logp, torch.tensor([[-1.5, -1.0, -9.0]], dtype=torch.float64),
        torch.ones(1, 3, dtype=torch.float64), beta2=0.5, mask=torch.tensor([[1, 1, 0]]),
    )  # fmt: skip
    assert float(loss.detach()) == 0.5625
    (grad,) = torch.autograd.grad(loss, logp)
    assert grad.tolist() == [[-0.75, -0.75, 0.0]]


def test_the_real_sequence_logps_sum_the_sampled_tokens_over_the_completion_mask() -> None:
    """A stand-in model with fixed logits over a vocabulary of 2: the real _get_sequence_logps
    takes the log-softmax of each completion token (shifted by one position) and sums it over the
    completion part of the attention mask."""
    import collections
    import types

    from trl.experimental.a2po.a2po_trainer import A2POTrainer

    logits = torch.log(torch.tensor([[[0.5, 0.5], [0.25, 0.75], [0.125, 0.875], [1.0, 1.0]]]))

    def model(**_kw: object) -> object:
        return types.SimpleNamespace(logits=logits)

    t = A2POTrainer.__new__(A2POTrainer)
    t.model_kwarg_keys = collections.OrderedDict(input_ids=None, attention_mask=None).keys()
    ids = torch.tensor([[7, 1, 0, 1]])  # prompt token 7, completion tokens (1, 0, 1)
    mask = torch.tensor([[1, 1, 1, 0]])  # the last completion token is padding
    found = t._get_sequence_logps(model, ids, mask, 3)
    # positions 0, 1, 2 predict the completion tokens 1, 0, 1: log 0.5, log 0.25, log 0.875;
    # the third is padding
    want = math.log(0.5) + math.log(0.25)
    assert float(found[0]) == pytest.approx(want, rel=1e-6)
