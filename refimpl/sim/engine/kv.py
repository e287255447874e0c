r"""Paged KV-cache arithmetic: bytes per token, blocks per sequence, blocks in a budget, sequences that fit.

Every quantity is an exact integer, computed as vLLM's paged allocator computes it (see the docs'
engine page for the files): a token keeps a key and a value vector per layer and KV head, a block
holds ``block_size`` tokens, a sequence takes whole blocks, and the budget holds whole blocks.
"""

from __future__ import annotations

from typing import Any

from refimpl._validation import as_int, invalid

__all__ = [
    "kv_block_bytes",
    "kv_blocks_in_budget",
    "kv_blocks_per_sequence",
    "kv_bytes_per_token",
    "kv_sequences_that_fit",
    "routing_bytes_per_token",
]


def _positive(value: Any, name: str, meaning: str) -> int:
    return as_int(value, name=name, minimum=1, meaning=meaning)


def kv_bytes_per_token(*, layers: int, kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    r"""Bytes of KV cache one token occupies.

    .. math::

        b_\text{tok} = 2 \cdot L \cdot H_\text{kv} \cdot d_\text{head} \cdot s_\text{dtype}

    (2: a key and a value vector per layer and KV head).

    Parameters
    ----------
    layers, kv_heads, head_dim, dtype_bytes : int
        Attention layers, key/value heads (grouped-query attention: fewer than query heads), head
        dimension, bytes per element of the cache's dtype (2 for bfloat16, 1 for fp8); all ``>= 1``.

    Returns
    -------
    int

    Examples
    --------
    Qwen2.5-7B (28 layers, 4 KV heads of dimension 128) with a bfloat16 cache:

    >>> kv_bytes_per_token(layers=28, kv_heads=4, head_dim=128, dtype_bytes=2)
    57344
    """
    n_l = _positive(layers, "layers", "attention layers")
    n_h = _positive(kv_heads, "kv_heads", "key/value heads")
    d = _positive(head_dim, "head_dim", "head dimension")
    s = _positive(dtype_bytes, "dtype_bytes", "bytes per cache element")
    return 2 * n_l * n_h * d * s


def kv_block_bytes(*, block_size: int, bytes_per_token: int) -> int:
    r"""Bytes of one KV block (all layers): :math:`b_\text{block} = B_\text{block} \cdot b_\text{tok}`.

    Examples
    --------
    >>> kv_block_bytes(block_size=16, bytes_per_token=57344)
    917504
    """
    bs = _positive(block_size, "block_size", "tokens per block")
    bt = _positive(bytes_per_token, "bytes_per_token", "KV bytes per token")
    return bs * bt


def kv_blocks_per_sequence(tokens: int, *, block_size: int) -> int:
    r"""Blocks a sequence of ``tokens`` tokens holds: :math:`\lceil n / B_\text{block} \rceil`.

    A partly filled last block is a whole block: paged allocation wastes at most
    ``block_size - 1`` token slots per sequence.

    Examples
    --------
    >>> kv_blocks_per_sequence(17, block_size=16), kv_blocks_per_sequence(16, block_size=16)
    (2, 1)
    >>> kv_blocks_per_sequence(0, block_size=16)
    0
    """
    n = as_int(tokens, name="tokens", minimum=0, meaning="tokens in the sequence")
    bs = _positive(block_size, "block_size", "tokens per block")
    return -(-n // bs)


def kv_blocks_in_budget(memory_bytes: int, *, block_bytes: int) -> int:
    r"""Whole blocks a budget of ``memory_bytes`` holds: :math:`\lfloor M / b_\text{block} \rfloor`.

    Examples
    --------
    >>> kv_blocks_in_budget(40 * 2**30, block_bytes=917504)
    46811
    """
    m = as_int(memory_bytes, name="memory_bytes", minimum=0, meaning="bytes for the KV cache")
    bb = _positive(block_bytes, "block_bytes", "bytes per block")
    return m // bb


def kv_sequences_that_fit(blocks: int, *, tokens: int, block_size: int) -> int:
    r"""Sequences of ``tokens`` tokens that ``blocks`` blocks hold at once, without sharing.

    .. math::

        \left\lfloor \frac{N_\text{blocks}}{\lceil n / B_\text{block} \rceil} \right\rfloor

    (vLLM logs the ratio before the floor as its "maximum concurrency").

    Raises
    ------
    InvalidArgument
        ``tokens < 1`` (an empty sequence takes no block, so any number fits).

    Examples
    --------
    >>> kv_sequences_that_fit(46811, tokens=4096, block_size=16)
    182
    """
    nb = as_int(blocks, name="blocks", minimum=0, meaning="KV blocks available")
    n = as_int(tokens, name="tokens", minimum=1, meaning="tokens per sequence")
    return nb // kv_blocks_per_sequence(n, block_size=block_size)


def routing_bytes_per_token(*, moe_layers: int, top_k: int, id_bytes: int) -> int:
    r"""Bytes of expert routing state per token of a mixture-of-experts model.

    .. math::

        b_\text{route} = L_\text{moe} \cdot k \cdot s_\text{id}

    the ids of the ``top_k`` experts each MoE layer chose for the token. Keeping them with the KV
    cache replays the same routing after a weight update ("routing replay"); recomputing the KV
    under new weights recomputes them too.

    Examples
    --------
    Qwen3-30B-A3B: 48 MoE layers, 8 experts of 128 per token, ids stored as int32:

    >>> routing_bytes_per_token(moe_layers=48, top_k=8, id_bytes=4)
    1536
    >>> routing_bytes_per_token(moe_layers=0, top_k=0, id_bytes=4)  # a dense model
    0
    """
    n_l = as_int(moe_layers, name="moe_layers", minimum=0, meaning="mixture-of-experts layers")
    k = as_int(top_k, name="top_k", minimum=0, meaning="experts chosen per token")
    s = _positive(id_bytes, "id_bytes", "bytes per expert id")
    if (n_l == 0) != (k == 0):
        raise invalid(
            "top_k",
            "be 0 exactly when moe_layers is 0 (a dense model routes nothing)",
            k,
            "Pass moe_layers=0, top_k=0 for a dense model, or both >= 1.",
        )
    return n_l * k * s
