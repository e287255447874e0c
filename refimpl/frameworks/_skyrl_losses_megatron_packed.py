"""SkyRL (skyrl 0.3.0): the Megatron backend's packed-sequence and fused-LM-head log-probabilities
and entropies, read from ``skyrl/backends/skyrl_train/distributed/megatron/model_utils.py``.

``MegatronModelWrapper.forward_backward_mini_batch`` (``workers/megatron/megatron_model_wrapper.py``)
picks, by ``packed_seq_params`` and ``fused_lm_head``, one of
``from_parallel_logits_to_logprobs_packed_sequences``, ``from_parallel_hidden_to_logprobs`` and
``from_parallel_hidden_to_logprobs_packed_sequences`` for the log-probabilities, and, under
``torch.set_grad_enabled(use_entropy_loss)``, one of ``vocab_parallel_entropy_packed_sequences``,
``_fused_vocab_parallel_entropy_from_hidden`` (then ``masked_mean`` with the loss mask) and
``from_parallel_hidden_to_entropy_packed_sequences`` for the entropy term. The adapters run each on
one gloo rank (:func:`~refimpl.frameworks._skyrl_losses_megatron.megatron_on_cpu`; tensor- and
context-parallel size 1, ``cp_group=None``, the whole vocabulary on the rank); the two packed
log-probabilities and the two packed entropies with a context-parallel size of two are
:mod:`refimpl.frameworks._skyrl_megatron_cp`.

Packed layout: the drawn ``(B, T)`` rows become one packed row of ``B`` sequences of ``T + 1``
positions each (``cu_seqlens_padded = [0, T + 1, 2 (T + 1), …]``, ``unpacked_seqlen = T + 1``),
a zero position appended to every row and the tokens shifted right by one, so that the
function's own roll (position ``t`` scores token ``t + 1`` of its sequence) scores the given
token at every drawn position; the function scatters its result back to ``(B, T)`` itself.
The packed entropy functions take an all-ones ``attention_mask`` of ``(B, T + 1)``,
``num_actions = T`` and the drawn mask as ``loss_mask``, and return ``Σ m·H / max(Σ m, 1)``.

Fused LM head: these take the decoder hidden states and the output-layer weight, not logits. The
adapters pass the drawn logits as the hidden states (``H = V``) and the identity as the weight, so
``hidden @ weightᵀ`` is the drawn logits exactly and the gradient with respect to the hidden
states is the gradient with respect to the logits (``grad_logits @ I``). The temperature is the
function's own keyword (it divides the weight). ``FusedLinearChunkedDistributedLogprob`` (the
torch backend; ``fused_backend="torch"``) recomputes the softmax chunk by chunk in its backward.
The fused adapters run chunks of three positions (``chunk_size=3``): every drawn row longer than
three crosses a chunk boundary, and one whose length is not a multiple of three ends in a shorter
chunk, at a third of the calls of one position a chunk (with which the four fused entries took
about 105 s of CPU in the matrix, now about 55 s).
The fused entropies have no backward of their own (their docstrings say metric only, yet the
wrapper enables grad with the entropy loss): torch autograd runs through their forward's
``all_reduce`` calls, which have no autograd kernel (torch warns); on one rank they are the
identity, so the check says nothing of the gradient across tensor-parallel ranks.
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter
from refimpl.frameworks._skyrl_losses_megatron import megatron_on_cpu

_UTILS = "skyrl.backends.skyrl_train.distributed.megatron.model_utils"


def appended(x: Any) -> Any:
    """``(B, T, …)`` → ``(B, T + 1, …)``, a zero position after each row."""
    import torch

    return torch.cat([x, torch.zeros_like(x[:, :1])], dim=1)


def packed(x: Any) -> tuple[Any, Any]:
    """``(B, T, …)`` → one packed row ``(1, B (T + 1), …)``, a zero position after each row,
    and its ``cu_seqlens_padded``."""
    import torch

    full = appended(x)
    rows, width = int(full.shape[0]), int(full.shape[1])
    cu_seqlens = torch.arange(rows + 1, dtype=torch.int32) * width
    return full.reshape(1, rows * width, *full.shape[2:]), cu_seqlens


def shifted_tokens(tokens: Any) -> Any:
    """The tokens one to the right in ``T + 1`` positions: the function's roll scores
    ``tokens[t]`` at position ``t``."""
    import torch

    return torch.cat([torch.zeros_like(tokens[:, :1]), tokens], dim=1).long()


def returned_logprobs(call: Any, logits: Any, cotangent: Any) -> tuple[Any, Any]:
    """``call(z)`` on one gloo rank and the vector–Jacobian product of ``cotangent`` with
    respect to ``z`` (the logits), both while the group exists."""
    import torch

    z = logits.detach().clone().requires_grad_(True)
    with megatron_on_cpu():
        logp = call(z)
        (grad,) = torch.autograd.grad(logp, z, grad_outputs=cotangent.to(logp.dtype))
    return logp.detach(), grad


def identity_head(logits: Any) -> Any:
    """The output-layer weight ``I`` (``V × V``) under which the hidden states are the logits."""
    import torch

    return torch.eye(int(logits.shape[-1]), dtype=logits.dtype)


def skyrl_megatron_logprobs_packed(
    logits: Any, tokens: Any, *, temperature: Any, mask: Any, cotangent: Any
) -> tuple[Any, Any]:
    """``from_parallel_logits_to_logprobs_packed_sequences`` of ``logits / temperature`` (the
    wrapper's ``logits.div_``), ``chunk_size=None``: ``DistributedLogprob``."""
    import torch.distributed as dist
    from skyrl.backends.skyrl_train.distributed.megatron.model_utils import (
        from_parallel_logits_to_logprobs_packed_sequences as function,
    )

    from refimpl.frameworks._skyrl_losses_megatron_packed import (
        packed,
        returned_logprobs,
        shifted_tokens,
    )

    def call(z: Any) -> Any:
        flat, cu = packed(z / temperature)
        target = shifted_tokens(tokens).reshape(1, -1)
        return function(
            flat, target, cu, int(z.shape[1]) + 1, 0, int(z.shape[-1]), dist.group.WORLD
        )

    return returned_logprobs(call, logits, cotangent)


def skyrl_megatron_hidden_logprobs(
    logits: Any, tokens: Any, *, temperature: Any, mask: Any, cotangent: Any
) -> tuple[Any, Any]:
    """``from_parallel_hidden_to_logprobs`` (hidden = the logits, weight = ``I``),
    ``chunk_size=3``, ``fused_backend="torch"``: ``FusedLinearChunkedDistributedLogprob``."""
    import torch.distributed as dist
    from skyrl.backends.skyrl_train.distributed.megatron.model_utils import (
        from_parallel_hidden_to_logprobs as function,
    )

    from refimpl.frameworks._skyrl_losses_megatron_packed import (
        appended,
        identity_head,
        returned_logprobs,
        shifted_tokens,
    )

    def call(z: Any) -> Any:
        return function(
            appended(z),
            identity_head(z),
            shifted_tokens(tokens),
            0,
            int(z.shape[-1]),
            dist.group.WORLD,
            chunk_size=3,
            temperature=float(temperature),
        )

    return returned_logprobs(call, logits, cotangent)


def skyrl_megatron_hidden_logprobs_packed(
    logits: Any, tokens: Any, *, temperature: Any, mask: Any, cotangent: Any
) -> tuple[Any, Any]:
    """``from_parallel_hidden_to_logprobs_packed_sequences`` (hidden = the packed logits,
    weight = ``I``), ``chunk_size=3``, ``fused_backend="torch"``."""
    import torch.distributed as dist
    from skyrl.backends.skyrl_train.distributed.megatron.model_utils import (
        from_parallel_hidden_to_logprobs_packed_sequences as function,
    )

    from refimpl.frameworks._skyrl_losses_megatron_packed import (
        identity_head,
        packed,
        returned_logprobs,
        shifted_tokens,
    )

    def call(z: Any) -> Any:
        hidden, cu = packed(z)
        target = shifted_tokens(tokens).reshape(1, -1)
        width, vocab = int(z.shape[1]) + 1, int(z.shape[-1])
        return function(
            hidden, identity_head(z), target, cu, width, 0, vocab, dist.group.WORLD,
            chunk_size=3, temperature=float(temperature),
        )  # fmt: skip

    return returned_logprobs(call, logits, cotangent)


def entropy_packing(logits: Any, mask: Any) -> dict[str, Any]:
    """The packed entropy functions' layout arguments for ``(B, T)`` rows under ``mask``."""
    import torch

    rows, width = int(logits.shape[0]), int(logits.shape[1]) + 1
    return {
        "cu_seqlens_padded": torch.arange(rows + 1, dtype=torch.int32) * width,
        "unpacked_seqlen": width,
        "num_actions": width - 1,
        "attention_mask": torch.ones((rows, width), dtype=torch.bool),
        "loss_mask": mask,
        "cp_group": None,
    }


def skyrl_megatron_entropy_packed(logits: Any, *, mask: Any) -> Any:
    """``vocab_parallel_entropy_packed_sequences``: its ``entropy_for_loss``, ``Σ m·H /
    max(Σ m, 1)`` (the term times ``entropy_loss_coef``)."""
    from skyrl.backends.skyrl_train.distributed.megatron.model_utils import (
        vocab_parallel_entropy_packed_sequences as function,
    )

    from refimpl.frameworks._skyrl_losses_megatron_packed import entropy_packing, packed

    with megatron_on_cpu():
        _, for_loss = function(packed(logits)[0], **entropy_packing(logits, mask))
    return for_loss


def skyrl_megatron_hidden_entropy(logits: Any, *, temperature: Any) -> Any:
    """``_fused_vocab_parallel_entropy_from_hidden`` (hidden = the logits, weight = ``I``),
    ``chunk_size=3``: the entropy of every position, differentiated by torch autograd."""
    import torch.distributed as dist
    from skyrl.backends.skyrl_train.distributed.megatron.model_utils import (
        _fused_vocab_parallel_entropy_from_hidden as function,
    )

    from refimpl.frameworks._skyrl_losses_megatron_packed import identity_head

    with megatron_on_cpu():
        return function(
            logits, identity_head(logits), dist.group.WORLD, 3, temperature=float(temperature)
        )


def skyrl_megatron_hidden_entropy_packed(logits: Any, *, temperature: Any, mask: Any) -> Any:
    """``from_parallel_hidden_to_entropy_packed_sequences`` (hidden = the packed logits,
    weight = ``I``), ``chunk_size=3``: its ``entropy_for_loss``."""
    import torch.distributed as dist
    from skyrl.backends.skyrl_train.distributed.megatron.model_utils import (
        from_parallel_hidden_to_entropy_packed_sequences as function,
    )

    from refimpl.frameworks._skyrl_losses_megatron_packed import (
        entropy_packing,
        identity_head,
        packed,
    )

    with megatron_on_cpu():
        _, for_loss = function(
            packed(logits)[0],
            identity_head(logits),
            **entropy_packing(logits, mask),
            tp_group=dist.group.WORLD,
            chunk_size=3,
            temperature=float(temperature),
        )
    return for_loss


_LOGPROBS = {
    "padding": "ignored",
    "truncation": "none",
    "gradient": "returned",
    "compute_dtype": "float32",
}
_PACKED_ENTROPY = {"output": "scalar", "aggregation": "token_mean", "compute_dtype": "float32"}


def _adapter(
    key: str, function: str, spec: str, conventions: Any, candidate: Any, note: str
) -> Adapter:
    temperature = conventions.get("temperature", "keyword") == "keyword"
    return Adapter(
        key=f"skyrl.{key}",
        framework="skyrl",
        function=f"{_UTILS}:{function}",
        settings={"temperature": "temperature"} if temperature else {},
        spec=spec,
        conventions=conventions,
        candidate=candidate,
        session=megatron_on_cpu,
        note=note,
    )


ADAPTERS: tuple[Adapter, ...] = (
    _adapter(
        "megatron_logprobs_packed",
        "from_parallel_logits_to_logprobs_packed_sequences",
        "token_logprobs",
        _LOGPROBS,
        skyrl_megatron_logprobs_packed,
        "Packed rows (cu_seqlens): the roll within each sequence, DistributedLogprob in float32, "
        "scattered back to (B, T); padding not masked.",
    ),
    _adapter(
        "megatron_hidden_logprobs",
        "from_parallel_hidden_to_logprobs",
        "token_logprobs",
        _LOGPROBS,
        skyrl_megatron_hidden_logprobs,
        "Fused LM head (torch backend), hidden = logits and weight = I: the weight divided by T, "
        "FusedLinearChunkedDistributedLogprob in float32, softmax recomputed per chunk.",
    ),
    _adapter(
        "megatron_hidden_logprobs_packed",
        "from_parallel_hidden_to_logprobs_packed_sequences",
        "token_logprobs",
        _LOGPROBS,
        skyrl_megatron_hidden_logprobs_packed,
        "Fused LM head on packed rows, hidden = logits and weight = I; padding not masked.",
    ),
    _adapter(
        "megatron_entropy_packed",
        "vocab_parallel_entropy_packed_sequences",
        "token_entropy",
        {**_PACKED_ENTROPY, "temperature": "none", "compute_dtype": None},
        skyrl_megatron_entropy_packed,
        "_VocabParallelEntropy of the packed logits, weighted by the loss mask scattered to the "
        "packed positions: Σ m·H / max(Σ m, 1).",
    ),
    _adapter(
        "megatron_hidden_entropy",
        "_fused_vocab_parallel_entropy_from_hidden",
        "token_entropy",
        {"mask": "none", "padding": "ignored", "compute_dtype": "float32"},
        skyrl_megatron_hidden_entropy,
        "Fused LM head, hidden = logits and weight = I: max + log Σ e^(z − max) − Σ softmax·z "
        "per chunk in float32, torch autograd (the wrapper enables grad with the entropy loss).",
    ),
    _adapter(
        "megatron_hidden_entropy_packed",
        "from_parallel_hidden_to_entropy_packed_sequences",
        "token_entropy",
        _PACKED_ENTROPY,
        skyrl_megatron_hidden_entropy_packed,
        "Fused LM head on packed rows, hidden = logits and weight = I, in float32: "
        "Σ m·H / max(Σ m, 1).",
    ),
)

__all__ = ["ADAPTERS", "packed", "shifted_tokens"]
