r"""Preemption under memory pressure: which sequences go (newest first) and what it costs.

When the running sequences need more new blocks than are free, the engine preempts the most recently
admitted sequence, then the next, until the rest fit (vLLM's policy: the last in is the first out,
so the oldest sequences, closest to finishing, keep their memory). A preempted sequence keeps its
tokens; its KV is either discarded and recomputed when it resumes (``recompute``: those tokens' KV is
wasted work) or swapped to host memory and back (``swap``: its blocks cross the host link twice).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import as_float_array, as_int, invalid

__all__ = ["PreemptionCost", "preemption_cost", "preemption_victims"]


def preemption_victims(
    admitted: ArrayLike, frees: ArrayLike, needs: ArrayLike, *, free_blocks: int
) -> NDArray[np.int64]:
    r"""Indices of the sequences preempted, newest first, so that the others' next tokens fit.

    Sequences are taken in decreasing admission order; each taken one frees its blocks and no longer
    needs its new block. It stops at the first :math:`k` with

    .. math::

        \sum_{i \notin V_k} \text{need}_i \le F + \sum_{i \in V_k} \text{frees}_i .

    Parameters
    ----------
    admitted : array_like
        Admission order of each running sequence (larger: newer), distinct.
    frees : array_like
        Blocks each would free.
    needs : array_like
        1 where the sequence needs a new block for its next token, else 0.
    free_blocks : int
        Blocks free now.

    Returns
    -------
    ndarray of int64
        Indices into the arrays, in preemption order.

    Examples
    --------
    Three sequences need a block each, one is free; preempting the newest (index 1) frees 2 blocks:

    >>> preemption_victims([0, 2, 1], [5, 2, 3], [1, 1, 1], free_blocks=1).tolist()
    [1]
    """
    order_key = as_float_array(admitted, name="admitted", ndim=1)
    f = as_float_array(frees, name="frees", ndim=1)
    nd = as_float_array(needs, name="needs", ndim=1)
    if not (order_key.shape == f.shape == nd.shape):
        raise invalid("frees", "match admitted and needs in shape", f, "Pass one entry each.")
    free = float(as_int(free_blocks, name="free_blocks", minimum=0))
    need = float(nd.sum())
    out = []
    for i in np.argsort(-order_key, kind="stable"):
        if need <= free:
            break
        out.append(int(i))
        need -= nd[i]
        free += f[i]
    return np.asarray(out, dtype=np.int64)


class PreemptionCost(NamedTuple):
    """What one preemption costs: KV tokens recomputed, or bytes over the host link."""

    wasted_tokens: int
    swapped_bytes: int


def preemption_cost(
    *, own_tokens: int, policy: str, block_size: int, kv_bytes_per_token: int
) -> PreemptionCost:
    r"""Cost of preempting a sequence holding ``own_tokens`` tokens in its own blocks.

    .. math::

        \text{recompute: } n \text{ tokens' KV wasted};\qquad
        \text{swap: } 2 \lceil n / B \rceil B\, b_\text{tok} \text{ bytes (out and back in)}.

    Blocks shared with its group stay in memory and cost nothing.

    Examples
    --------
    >>> preemption_cost(own_tokens=40, policy="recompute", block_size=16, kv_bytes_per_token=10)
    PreemptionCost(wasted_tokens=40, swapped_bytes=0)
    >>> preemption_cost(own_tokens=40, policy="swap", block_size=16, kv_bytes_per_token=10)
    PreemptionCost(wasted_tokens=0, swapped_bytes=960)
    """
    n = as_int(own_tokens, name="own_tokens", minimum=0)
    bs = as_int(block_size, name="block_size", minimum=1)
    kv = as_int(kv_bytes_per_token, name="kv_bytes_per_token", minimum=1)
    if policy == "recompute":
        return PreemptionCost(wasted_tokens=n, swapped_bytes=0)
    if policy == "swap":
        return PreemptionCost(wasted_tokens=0, swapped_bytes=2 * (-(-n // bs)) * bs * kv)
    raise invalid("policy", "be 'recompute' or 'swap'", policy, "Pick one of them.")
