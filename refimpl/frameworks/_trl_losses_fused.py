"""TRL (trl 1.16.0): the trainer's own log-probabilities and entropies, the fused LM head.

``GRPOTrainer.__init__`` patches the model with ``trl/trainer/utils.py:add_fused_lm_head(model,
temperature, outputs=("log_probs", "entropy"))``, and ``_get_per_token_logps_and_entropies`` reads
``outputs.log_probs`` and ``outputs.entropy`` from it: the per-token values come from
``trl/kernels/chunked_logprob.py:ChunkedLogProbFunction``, not from ``selective_log_softmax``.
Its forward projects ``hidden @ weight.T`` on tiles of ``chunk_size`` vocabulary entries
(``_CHUNKED_LOGPROB_CHUNK_SIZE = 32768`` in the trainer), divides by the temperature and folds
each tile into an online log-sum-exp in float32 (``running_max``, ``sum_exp``, ``x_sum_exp``;
the torch ``_forward_tile`` on CPU, the Triton kernel on CUDA); its backward recomputes each tile
and writes the gradients of the log-probability and of the entropy by hand.

The adapters call the function with the identity as ``weight`` (``hidden @ I = logits``), so the
given logits are the tile's logits and the gradient with respect to ``hidden`` is the one with
respect to the logits; once with the trainer's tile width (one tile for any vocabulary drawn),
once with tiles of 2 entries (the online merge across tiles).
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter

_CHUNKED = "trl.kernels.chunked_logprob:ChunkedLogProbFunction"


def fused_lm_head(logits: Any, tokens: Any, temperature: Any, chunk_size: int) -> Any:
    """``ChunkedLogProbFunction.apply(hidden, weight = I_V, bias = None, targets, temperature,
    chunk_size, outputs=("entropy",))`` on the (B, T, V) logits; returns (log-probs, entropies),
    each (B, T)."""
    import torch
    from trl.kernels import ChunkedLogProbFunction

    batch, time, vocab = logits.shape
    targets = torch.as_tensor(tokens).reshape(-1).to(torch.long)
    weight = torch.eye(vocab, dtype=logits.dtype)
    logp, entropy, *_ = ChunkedLogProbFunction.apply(
        logits.reshape(-1, vocab), weight, None, targets, float(temperature), chunk_size, None, 1.0,
        ("entropy",),
    )  # fmt: skip
    return logp.reshape(batch, time), entropy.reshape(batch, time)


def trl_fused_logprobs(logits: Any, tokens: Any, *, temperature: Any, mask: Any) -> Any:
    """The log-probabilities of TRL's ``ChunkedLogProbFunction`` (the trainer's tile width)."""
    from trl.trainer.utils import _CHUNKED_LOGPROB_CHUNK_SIZE

    from refimpl.frameworks._trl_losses_fused import fused_lm_head

    return fused_lm_head(logits, tokens, temperature, _CHUNKED_LOGPROB_CHUNK_SIZE)[0]


def trl_fused_logprobs_tiled(logits: Any, tokens: Any, *, temperature: Any, mask: Any) -> Any:
    """The log-probabilities of TRL's ``ChunkedLogProbFunction`` on vocabulary tiles of 2."""
    from refimpl.frameworks._trl_losses_fused import fused_lm_head

    return fused_lm_head(logits, tokens, temperature, 2)[0]


def trl_fused_entropy(logits: Any, *, temperature: Any) -> Any:
    """The entropy of TRL's ``ChunkedLogProbFunction`` (the trainer's tile width; the targets
    are all 0, they select only the log-probability)."""
    import torch
    from trl.trainer.utils import _CHUNKED_LOGPROB_CHUNK_SIZE

    from refimpl.frameworks._trl_losses_fused import fused_lm_head

    tokens = torch.zeros(logits.shape[:-1], dtype=torch.long)
    return fused_lm_head(logits, tokens, temperature, _CHUNKED_LOGPROB_CHUNK_SIZE)[1]


def trl_fused_entropy_tiled(logits: Any, *, temperature: Any) -> Any:
    """The entropy of TRL's ``ChunkedLogProbFunction`` on vocabulary tiles of 2."""
    import torch

    from refimpl.frameworks._trl_losses_fused import fused_lm_head

    tokens = torch.zeros(logits.shape[:-1], dtype=torch.long)
    return fused_lm_head(logits, tokens, temperature, 2)[1]


_LOGPROBS = {"padding": "ignored", "truncation": "none", "compute_dtype": "float32"}
_ENTROPY = {"mask": "none", "padding": "ignored", "compute_dtype": "float32"}


def _adapter(key: str, spec: str, candidate: Any, chunk: Any, note: str) -> Adapter:
    return Adapter(
        key=f"trl.{key}",
        framework="trl",
        function=_CHUNKED,
        settings={"temperature": "temperature", "chunk_size": chunk, "weight": "identity"},
        spec=spec,
        conventions=_LOGPROBS if spec == "token_logprobs" else _ENTROPY,
        candidate=candidate,
        note=note,
    )


ADAPTERS: tuple[Adapter, ...] = (
    _adapter(
        "fused_lm_head_logprobs",
        "token_logprobs",
        trl_fused_logprobs,
        32768,
        "The trainer's log-probabilities: logits / T folded into a float32 online log-sum-exp, "
        "the gradient written by hand; no top-k / top-p, padding not masked.",
    ),
    _adapter(
        "fused_lm_head_logprobs_tiled",
        "token_logprobs",
        trl_fused_logprobs_tiled,
        2,
        "As fused_lm_head_logprobs, on vocabulary tiles of 2 (the online merge across tiles).",
    ),
    _adapter(
        "fused_lm_head_entropy",
        "token_entropy",
        trl_fused_entropy,
        32768,
        "The trainer's entropies: log Z − Σ e^z·z / Σ e^z of logits / T in float32, the "
        "gradient written by hand; not masked.",
    ),
    _adapter(
        "fused_lm_head_entropy_tiled",
        "token_entropy",
        trl_fused_entropy_tiled,
        2,
        "As fused_lm_head_entropy, on vocabulary tiles of 2 (the online merge across tiles).",
    ),
)

__all__ = ["ADAPTERS", "fused_lm_head"]
