r"""What a weight update does to the KV of a rollout in flight: bytes discarded, recomputed or kept.

An asynchronous trainer publishes new weights while the engine is generating. A rollout in flight
holds the KV cache (and, for a mixture-of-experts model, the experts each token was routed to) of its
``n`` context tokens, computed under the old weights. Three choices:

- ``restart``: throw the rollout away; its KV (and routing) is discarded and its tokens wasted.
- ``recompute``: keep the tokens, rebuild their KV (and routing) under the new weights: a prefill
  of ``n`` tokens, the bytes rewritten.
- ``keep_kv``: keep the KV and routing as they are (stale by the versions that made them) and go on.

Tokens generated after the update come from the new weights in every case, so a rollout's tokens
carry the versions that produced them and the staleness and masking functions apply per token.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from refimpl._validation import as_float_array, as_int, invalid

__all__ = ["INTERRUPTION_CHOICES", "InterruptionBytes", "interruption_bytes"]

#: What a weight update does to the rollouts in flight (``SimConfig.partial``, besides ``none``).
INTERRUPTION_CHOICES: tuple[str, ...] = ("restart", "recompute", "keep_kv")


class InterruptionBytes(NamedTuple):
    """Bytes a weight update discards, rewrites and keeps (float64: sums over many rollouts)."""

    discarded: float
    recomputed: float
    kept: float


def interruption_bytes(
    context_tokens: ArrayLike,
    *,
    choice: str,
    kv_bytes_per_token: int,
    routing_bytes_per_token: int = 0,
) -> InterruptionBytes:
    r"""Bytes the rollouts in flight discard, recompute or keep at a weight update.

    With :math:`n` the context tokens summed over the rollouts in flight, :math:`b_\text{kv}` and
    :math:`b_\text{route}` the bytes per token:

    .. math::

        \text{restart: discarded} = \text{recompute: recomputed} = \text{keep\_kv: kept}
        = n\,(b_\text{kv} + b_\text{route})

    and the other two are 0.

    Parameters
    ----------
    context_tokens : array_like
        Context tokens (prompt and generated) of each rollout in flight, ``>= 0``; summed.
    choice : {'restart', 'recompute', 'keep_kv'}
    kv_bytes_per_token, routing_bytes_per_token : int
        :func:`kv_bytes_per_token`, :func:`routing_bytes_per_token` (0 for a dense model).

    Returns
    -------
    InterruptionBytes

    Examples
    --------
    Two rollouts in flight of a Qwen3-30B-A3B (KV 98304 B and routing 1536 B per token), with
    contexts of 600 and 1000 tokens:

    >>> interruption_bytes([600, 1000], choice="keep_kv", kv_bytes_per_token=98304,
    ...                    routing_bytes_per_token=1536)
    InterruptionBytes(discarded=0.0, recomputed=0.0, kept=159744000.0)
    """
    if choice not in INTERRUPTION_CHOICES:
        raise invalid(
            "choice",
            f"be one of {INTERRUPTION_CHOICES}",
            choice,
            "Pick restart, recompute or keep_kv.",
        )
    n = as_float_array(context_tokens, name="context_tokens")
    if np.any(n < 0):
        raise invalid("context_tokens", "be >= 0", n, "Pass token counts >= 0.")
    kv = as_int(kv_bytes_per_token, name="kv_bytes_per_token", minimum=0)
    route = as_int(routing_bytes_per_token, name="routing_bytes_per_token", minimum=0)
    total = float(np.sum(n)) * float(kv + route)
    return InterruptionBytes(
        discarded=total if choice == "restart" else 0.0,
        recomputed=total if choice == "recompute" else 0.0,
        kept=total if choice == "keep_kv" else 0.0,
    )
