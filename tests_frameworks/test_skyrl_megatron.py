"""SkyRL's Megatron copy of the worker KL and entropy terms, on hand-worked inputs.

The adapters run ``MegatronModelWrapper.forward_backward_mini_batch`` through megatron.core's own
schedule on one gloo rank (needs megatron-core and the wrapper's source load).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from refimpl.frameworks import adapter, check
from refimpl.frameworks._skyrl_losses_megatron import megatron_loss


def test_the_megatron_kl_term_is_the_mean_over_every_row_of_each_rows_token_mean() -> None:
    """The FSDP worker's hand-worked case: k3 of d = −0.5 on one token of row 0, the mean over
    three rows of each row's token mean: (e^−0.5 − 0.5) / 6."""
    logp = torch.tensor(
        [[-1.0, -2.0, -0.5], [-0.3, -0.1, -2.0], [-1.0, -1.0, -1.0]],
        dtype=torch.float64,
        requires_grad=True,
    )
    ref = torch.tensor(
        [[-1.5, -2.0, 7.0], [-0.3, -1.1, -2.0], [3.0, 3.0, 3.0]], dtype=torch.float64
    )
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]], dtype=torch.float64)
    loss = adapter("skyrl.megatron_kl_k3").candidate(logp, ref, mask=mask)
    assert math.isclose(float(loss.detach()), (math.exp(-0.5) - 0.5) / 6, rel_tol=1e-12)
    loss.backward()
    assert logp.grad is not None
    assert math.isclose(float(logp.grad[0, 0]), (1 - math.exp(-0.5)) / 6, rel_tol=1e-12)
    assert float(logp.grad.abs().sum()) == float(logp.grad[0, 0].abs())


def test_the_megatron_entropy_term_is_the_token_mean_and_a_wrong_declaration_fails() -> None:
    entropy = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.float64)
    found = adapter("skyrl.megatron_entropy").candidate(entropy, mask)
    assert math.isclose(float(found.detach()), 7 / 3, rel_tol=1e-12)
    assert check("skyrl.megatron_entropy", max_examples=25).ok
    wrong = check(
        "skyrl.megatron_entropy", max_examples=25, conventions={"mode": "seq_mean_token_mean"}
    )
    assert not wrong.ok


def test_the_process_group_is_torn_down_after_each_call() -> None:
    import torch.distributed as dist

    logp = torch.zeros((1, 2), dtype=torch.float64, requires_grad=True)
    megatron_loss(logp, torch.ones((1, 2)), use_kl_loss=True, kl_loss_coef=1.0)
    assert not dist.is_initialized()


def test_each_micro_batch_weighs_one_over_the_ranks_real_micro_batches() -> None:
    """One row of 2 valid tokens, A = −1, ρ = 1 (per-token loss 1): among K = 3 micro-batches of
    which 2 hold rows, megatron divides by 3 and the wrapper multiplies by 3/2, so each token
    weighs 1/(2·2) in the KL term's row mean and in the entropy term's token mean, whatever
    the micro-batch's rows (the FSDP worker would weigh it by its share of the rank's rows)."""
    for key in ("skyrl.megatron_kl_reduction", "skyrl.megatron_entropy"):
        a = adapter(key)
        assert a.partition is not None
        logp = torch.zeros((1, 2), dtype=torch.float64, requires_grad=True)
        loss = a.partition.candidate(
            logp,
            torch.zeros((1, 2), dtype=torch.float64),
            torch.tensor([-1.0], dtype=torch.float64),
            torch.ones((1, 2), dtype=torch.float64),
            accumulation_steps=3,
            rank_microbatches=2,
        )
        loss.backward()
        assert logp.grad is not None
        assert all(math.isclose(float(g), 1 / 4, rel_tol=1e-12) for g in logp.grad[0]), key


def test_a_check_starts_one_process_group_and_leaves_none(monkeypatch: Any) -> None:
    """The Megatron adapters' session holds one gloo group for the whole check (a group per call
    waits about 0.1 s in gloo's teardown, every call), and the check ends with none left up, so
    that the next adapter's framework code sees no process group."""
    import torch.distributed as dist

    started: list[int] = []
    init = dist.init_process_group

    def counted(*args: Any, **kwargs: Any) -> Any:
        started.append(1)
        return init(*args, **kwargs)

    monkeypatch.setattr(dist, "init_process_group", counted)
    for key in ("skyrl.megatron_kl_k1", "skyrl.megatron_logprobs"):
        started.clear()
        assert check(key, max_examples=3).ok
        assert started == [1], f"{key}: {len(started)} process groups started"
        assert not dist.is_initialized()
