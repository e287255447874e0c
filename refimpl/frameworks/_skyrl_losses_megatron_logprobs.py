"""SkyRL (skyrl 0.3.0): the Megatron backend's log-probabilities and entropies, read from
``skyrl/backends/skyrl_train/distributed/megatron/model_utils.py``
``from_parallel_logits_to_logprobs`` and ``vocab_parallel_entropy``.

``MegatronModelWrapper.forward_backward_mini_batch`` (``workers/megatron/megatron_model_wrapper.py``)
divides the logits by the temperature in place, ``logits.div_(temperature)``, then calls
``from_parallel_logits_to_logprobs(logits, sequences, vocab_start_index, vocab_end_index,
tp_group, inference_only=False, cp_group=None, chunk_size=cfg.logprobs_chunk_size)`` (unpacked
rows, no fused LM head). The function rolls the targets left by one (position ``t`` scores token
``t + 1``), drops the last position, and computes the vocabulary-parallel log-softmax in float32
with its own backward: ``DistributedLogprob`` (the softmax saved in the forward), or, when
``chunk_size`` is smaller than the sequence, ``ChunkedDistributedLogprob`` (the softmax recomputed
chunk by chunk in the backward, with an all-reduce over the tensor-parallel group).

The adapters run it on one gloo rank (:func:`~refimpl.frameworks._skyrl_losses_megatron.
megatron_on_cpu`; tensor-parallel size 1, the whole vocabulary on the rank): the logits divided by
the temperature as the wrapper does, a position appended after the last one and the tokens
shifted right by one, so that the function's output is the log-probability of the given token at
every position. The chunked backward all-reduces within the group, so the candidate takes the
cotangent and returns the value and its gradient with respect to the logits, both computed while
the group exists (``gradient="returned"``, the gradient torch's autograd of SkyRL's own backward).

With the entropy loss on, the step computes ``vocab_parallel_entropy(logits[:, -num_actions - 1 :
-1, :])`` (``_VocabParallelEntropy``: max, sum of exponentials and ``Σ softmax·logits`` each
all-reduced over the tensor-parallel group, its own backward ``softmax·(Σ softmax·z − z)``, in the
logits' dtype) on the tempered logits, then ``masked_mean`` with the loss mask (the term checked by
``skyrl.megatron_entropy``). Its adapter takes the logits of the response positions, no mask and
no temperature; its forward reads the group from megatron's model-parallel state, its backward
none, so autograd runs it after the call.
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter
from refimpl.frameworks._skyrl_losses_megatron import megatron_on_cpu

_FUNCTION = (
    "skyrl.backends.skyrl_train.distributed.megatron.model_utils:from_parallel_logits_to_logprobs"
)


def megatron_logprobs(
    function: Any,
    logits: Any,
    tokens: Any,
    *,
    temperature: Any,
    cotangent: Any,
    chunk_size: int | None,
) -> tuple[Any, Any]:
    """``function`` (SkyRL's ``from_parallel_logits_to_logprobs``) of ``logits / temperature`` on
    one gloo rank, and the vector–Jacobian product of ``cotangent`` through its backward."""
    import torch
    import torch.distributed as dist

    from refimpl.frameworks._skyrl_losses_megatron import megatron_on_cpu

    z = logits.detach().clone().requires_grad_(True)
    scaled = z / temperature  # the wrapper's logits.div_(temperature)
    # position t scores token t + 1: one more position, the tokens one to the right
    full = torch.cat([scaled, torch.zeros_like(scaled[:, :1])], dim=1)
    targets = torch.cat([torch.zeros_like(tokens[:, :1]), tokens], dim=1).long()
    with megatron_on_cpu():
        logp = function(
            full,
            targets,
            vocab_start_index=0,
            vocab_end_index=int(logits.shape[-1]),
            tp_group=dist.group.WORLD,
            inference_only=False,
            cp_group=None,
            chunk_size=chunk_size,
        )
        (grad,) = torch.autograd.grad(logp, z, grad_outputs=cotangent.to(logp.dtype))
    return logp.detach(), grad


def skyrl_megatron_logprobs(
    logits: Any, tokens: Any, *, temperature: Any, mask: Any, cotangent: Any
) -> tuple[Any, Any]:
    """``logprobs_chunk_size=None``: ``DistributedLogprob``."""
    from skyrl.backends.skyrl_train.distributed.megatron.model_utils import (
        from_parallel_logits_to_logprobs,
    )

    from refimpl.frameworks._skyrl_losses_megatron_logprobs import megatron_logprobs

    return megatron_logprobs(
        from_parallel_logits_to_logprobs,
        logits,
        tokens,
        temperature=temperature,
        cotangent=cotangent,
        chunk_size=None,
    )


def skyrl_megatron_logprobs_chunked(
    logits: Any, tokens: Any, *, temperature: Any, mask: Any, cotangent: Any
) -> tuple[Any, Any]:
    """``logprobs_chunk_size=1``: ``ChunkedDistributedLogprob``, one position per chunk."""
    from skyrl.backends.skyrl_train.distributed.megatron.model_utils import (
        from_parallel_logits_to_logprobs,
    )

    from refimpl.frameworks._skyrl_losses_megatron_logprobs import megatron_logprobs

    return megatron_logprobs(
        from_parallel_logits_to_logprobs,
        logits,
        tokens,
        temperature=temperature,
        cotangent=cotangent,
        chunk_size=1,
    )


def skyrl_megatron_entropy_from_logits(logits: Any) -> Any:
    """``vocab_parallel_entropy`` of the logits on one gloo rank (the whole vocabulary)."""
    from skyrl.backends.skyrl_train.distributed.megatron.model_utils import (
        vocab_parallel_entropy,
    )

    from refimpl.frameworks._skyrl_losses_megatron import megatron_on_cpu

    with megatron_on_cpu():
        return vocab_parallel_entropy(logits)


_CONVENTIONS = {
    "padding": "ignored",
    "truncation": "none",
    "gradient": "returned",
    "compute_dtype": "float32",
}

ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="skyrl.megatron_logprobs",
        framework="skyrl",
        function=_FUNCTION,
        settings={"temperature": "temperature", "logprobs_chunk_size": None},
        spec="token_logprobs",
        conventions=_CONVENTIONS,
        candidate=skyrl_megatron_logprobs,
        session=megatron_on_cpu,
        note="DistributedLogprob on one rank: log_softmax(z/T) in float32, gathered; its own "
        "backward (softmax saved); padding not masked.",
    ),
    Adapter(
        key="skyrl.megatron_logprobs_chunked",
        framework="skyrl",
        function=_FUNCTION,
        settings={"temperature": "temperature", "logprobs_chunk_size": 1},
        spec="token_logprobs",
        conventions=_CONVENTIONS,
        candidate=skyrl_megatron_logprobs_chunked,
        session=megatron_on_cpu,
        note="ChunkedDistributedLogprob on one rank, one position per chunk: the softmax "
        "recomputed in the backward; padding not masked.",
    ),
    Adapter(
        key="skyrl.megatron_vocab_parallel_entropy",
        framework="skyrl",
        function=(
            "skyrl.backends.skyrl_train.distributed.megatron.model_utils:vocab_parallel_entropy"
        ),
        settings={"use_entropy_loss": True},
        spec="token_entropy",
        conventions={"temperature": "none", "mask": "none", "padding": "ignored"},
        candidate=skyrl_megatron_entropy_from_logits,
        session=megatron_on_cpu,
        note="_VocabParallelEntropy on one rank: max + log Σ e^(z − max) − Σ softmax·z at every "
        "position, its own backward; the step's masked_mean applies the loss mask.",
    ),
)

__all__ = ["ADAPTERS", "megatron_logprobs"]
