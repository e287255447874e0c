"""SkyRL (skyrl 0.3.0): the log-probabilities of its JAX models, read from
``skyrl/tx/utils/logits_processor.py`` (``LogitsProcessorMixin``).

``logits_to_logprobs(logits, target_ids)`` (a static method) is ``take_along_axis(logits,
target_ids) − logsumexp(logits)`` over the last axis: the full softmax's log-probability, no
temperature, no top-k or top-p. ``compute_logprobs(hidden_states, target_ids)`` is what the JAX
backend's training step calls (``skyrl/backends/jax.py``, ``_model_forward``, on the model's last
hidden states): with ``ModelConfig.loss_chunk_size > 0`` it runs ``_compute_chunked_logprobs``,
which flattens the ``B·T`` positions, pads them with zeros to a multiple of the chunk size, maps
``lm_head`` and ``logits_to_logprobs`` over the chunks with ``jax.lax.map`` (through
``jax.checkpoint`` when ``gradient_checkpointing`` is set) and drops the padding.

Neither takes a temperature, and nothing divides the logits before them: the JAX backend has
no temperature on its log-probability path (``_model_forward`` passes the model's untempered
logits, and the sampler reports ``logits_to_logprobs`` of the untempered logits whatever
temperature it sampled with, ``tx/utils/generator.py``). The adapters therefore declare
``temperature="none"``: they receive no ``temperature=`` and are checked at ``T = 1``.

The chunked adapter's model is the smallest object the mixin accepts: a subclass whose LM head is
the identity (the hidden states are the drawn logits, so ``H = V`` and the chunk's logits are the
drawn logits exactly, the gradient with respect to the hidden states is the gradient with respect
to the logits) and whose config is SkyRL's own ``ModelConfig`` built from an empty dictionary,
with ``loss_chunk_size=3`` (every drawn batch of more than three positions crosses a chunk
boundary, and one whose ``B·T`` is not a multiple of three ends in a padded chunk) and
``gradient_checkpointing=True``. jax computes in float32 (x64 is off), so the adapters are checked
in float32; jax's autograd differentiates them (``Adapter.xp``).

Both run under ``jax.jit``, as SkyRL runs them (the generator's ``_prefill_and_decode`` and the
backend's ``_forward_backward_and_accumulate`` and ``_forward`` are jitted), one jitted function
per adapter, so a shape is compiled once: the two matrix entries took about 19 and 12 s of CPU,
against about 35 and 38 s op by op (``_compute_chunked_logprobs``'s ``jax.lax.map`` compiled on
every call).
"""

from __future__ import annotations

import functools
from typing import Any

from refimpl.frameworks._registry import Adapter

_MIXIN = "skyrl.tx.utils.logits_processor:LogitsProcessorMixin"


def skyrl_tx_logprobs(logits: Any, tokens: Any, *, mask: Any) -> Any:
    """``LogitsProcessorMixin.logits_to_logprobs`` (the static gather − logsumexp) of the logits,
    under ``jax.jit``; the mask is not read (padding is scored like any position)."""
    import jax.numpy as jnp

    return _jitted(0)(logits, jnp.asarray(tokens))


@functools.cache
def _jitted(chunk_size: int) -> Any:
    """``logits_to_logprobs`` (``chunk_size = 0``) or ``compute_logprobs`` of the identity-head
    model with chunks of ``chunk_size``, under ``jax.jit`` (as the backend runs them:
    the generator's decode step and the training step are jitted); one per chunk size, so that
    jax's compilation cache serves every call of a shape it has seen."""
    import jax
    from skyrl.tx.utils.logits_processor import LogitsProcessorMixin

    if chunk_size == 0:
        function = LogitsProcessorMixin.logits_to_logprobs
    else:
        function = identity_head_model(chunk_size).compute_logprobs
    return jax.jit(function)


def identity_head_model(chunk_size: int) -> Any:
    """A ``LogitsProcessorMixin`` whose LM head is the identity and whose ``ModelConfig`` has
    ``loss_chunk_size=chunk_size`` and ``gradient_checkpointing=True``."""
    from skyrl.tx.models.configs import ModelConfig
    from skyrl.tx.utils.logits_processor import LogitsProcessorMixin

    config = ModelConfig(
        {},
        max_lora_adapters=1,
        max_lora_rank=1,
        shard_attention_heads=False,
        loss_chunk_size=chunk_size,
        gradient_checkpointing=True,
    )

    methods = {
        "get_model_config": lambda self: config,
        "get_lm_head": lambda self: lambda hidden, adapter_indices: hidden,
    }
    return type("IdentityHead", (LogitsProcessorMixin,), methods)()


def skyrl_tx_logprobs_chunked(logits: Any, tokens: Any, *, mask: Any) -> Any:
    """``compute_logprobs`` of a model with the identity LM head and chunks of three positions,
    under ``jax.jit``: ``_compute_chunked_logprobs`` on the logits as the hidden states."""
    import jax.numpy as jnp

    return _jitted(3)(logits, jnp.asarray(tokens))


ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="skyrl.tx_logprobs",
        framework="skyrl",
        function=f"{_MIXIN}.logits_to_logprobs",
        settings={},
        spec="token_logprobs",
        conventions={"padding": "ignored", "truncation": "none", "temperature": "none"},
        candidate=skyrl_tx_logprobs,
        dtype="float32",
        xp="jax.numpy",
        note="take_along_axis(z, x) − logsumexp(z) in jax, no temperature; padding not masked.",
    ),
    Adapter(
        key="skyrl.tx_logprobs_chunked",
        framework="skyrl",
        function=f"{_MIXIN}._compute_chunked_logprobs",
        settings={"loss_chunk_size": 3, "gradient_checkpointing": True},
        spec="token_logprobs",
        conventions={"padding": "ignored", "truncation": "none", "temperature": "none"},
        candidate=skyrl_tx_logprobs_chunked,
        dtype="float32",
        xp="jax.numpy",
        note="compute_logprobs with the identity LM head: B·T positions in zero-padded chunks of "
        "three, jax.lax.map of logits_to_logprobs under jax.checkpoint, no temperature; padding "
        "not masked.",
    ),
)

__all__ = ["ADAPTERS", "identity_head_model"]
