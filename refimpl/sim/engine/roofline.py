r"""A decode step's time on an accelerator: the roofline of a batch.

A decode step reads every weight once and every running sequence's KV cache, and does about
:math:`2 A` floating-point operations per token it processes (:math:`A` the parameters a token passes
through). It takes the longer of the two: memory-bound at small batches (the weights dominate and
the batch rides for free), compute-bound at large ones. Prompt tokens prefilled in the same step
(chunked prefill, as vLLM schedules them) add to the compute.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import as_float_array, as_real, invalid

__all__ = ["Roofline", "decode_step_time"]


@dataclass(frozen=True, kw_only=True)
class Roofline:
    """What a decode step's time depends on (validated on construction; SI units).

    Parameters
    ----------
    weight_bytes : float
        Bytes of weights read per step (all of them: at a batch of a few dozen a mixture-of-experts
        model touches nearly every expert).
    active_params : float
        Parameters one token passes through (a mixture-of-experts model's active ones).
    bandwidth : float
        Memory bandwidth, bytes per second.
    flops : float
        Sustained floating-point rate, operations per second.
    step_overhead : float
        Seconds every step pays besides (kernel launches, sampling, scheduling); default 0.

    Examples
    --------
    Qwen2.5-7B in bfloat16 on an H100 SXM (3.35 TB/s, 989 TFLOP/s dense bfloat16):

    >>> r = Roofline(weight_bytes=15.23e9, active_params=7.62e9, bandwidth=3.35e12, flops=989e12)
    >>> round(r.weight_bytes / r.bandwidth * 1e3, 3)  # ms a step takes at least
    4.546
    """

    weight_bytes: float
    active_params: float
    bandwidth: float
    flops: float
    step_overhead: float = 0.0

    def __post_init__(self) -> None:
        for name in ("weight_bytes", "active_params", "bandwidth", "flops"):
            v = as_real(getattr(self, name), name=name, low=0.0, low_open=True)
            if not math.isfinite(v):
                raise invalid(name, "be finite", v, f"Pass a finite {name} > 0.")
            object.__setattr__(self, name, v)
        o = as_real(self.step_overhead, name="step_overhead", low=0.0, meaning="seconds")
        if not math.isfinite(o):
            raise invalid("step_overhead", "be finite", o, "Pass seconds >= 0.")
        object.__setattr__(self, "step_overhead", o + 0.0)

    def cost(self, *, kv_bytes_per_token: int) -> tuple[float, float, float, float]:
        """``(base, per context token, per processed token, overhead)``, in seconds, of
        :func:`decode_step_time`: the memory term is ``base + per_context · C``, the compute term
        ``per_processed · (b + p)``."""
        return (
            self.weight_bytes / self.bandwidth,
            kv_bytes_per_token / self.bandwidth,
            2.0 * self.active_params / self.flops,
            self.step_overhead,
        )


def decode_step_time(
    batch: ArrayLike,
    context_tokens: ArrayLike,
    *,
    roofline: Roofline,
    kv_bytes_per_token: int,
    prefill_tokens: ArrayLike = 0,
) -> NDArray[np.float64]:
    r"""Seconds one engine step takes for a batch of ``batch`` decoding sequences.

    .. math::

        t = t_0 + \max\!\left(\frac{W + b_\text{tok}\,C}{\beta},\;
            \frac{2A\,(b + p)}{F}\right)

    with :math:`W` the weight bytes, :math:`C` the tokens of context the batch's attention reads,
    :math:`b` the decoding sequences, :math:`p` the prompt tokens prefilled in the step,
    :math:`\beta` the bandwidth, :math:`F` the FLOP rate and :math:`t_0` the step overhead.

    Parameters
    ----------
    batch, context_tokens : array_like
        Sequences decoding in the step (``>= 0``) and their total context in tokens (``>= 0``).
    roofline : Roofline
        The accelerator and model.
    kv_bytes_per_token : int
        :func:`refimpl.sim.engine.kv_bytes_per_token`.
    prefill_tokens : array_like
        Prompt (or recomputed) tokens prefilled in the same step; default 0.

    Returns
    -------
    ndarray of float64

    Examples
    --------
    >>> r = Roofline(weight_bytes=15.23e9, active_params=7.62e9, bandwidth=3.35e12, flops=989e12)
    >>> t = decode_step_time([1, 256], [1000, 256_000], roofline=r, kv_bytes_per_token=57344)
    >>> (t * 1e3).round(3).tolist()  # ms: the batch of 256 reads 14.7 GB of KV besides the weights
    [4.563, 8.928]
    """
    if not isinstance(roofline, Roofline):
        raise invalid(
            "roofline", "be a Roofline", roofline, "Build one: Roofline(weight_bytes=...)."
        )
    b = as_float_array(batch, name="batch")
    c = as_float_array(context_tokens, name="context_tokens")
    p = as_float_array(prefill_tokens, name="prefill_tokens")
    for name, arr in (("batch", b), ("context_tokens", c), ("prefill_tokens", p)):
        if np.any(arr < 0):
            raise invalid(name, "be >= 0 (a count of tokens)", arr, f"Pass {name} >= 0.")
    kv = as_real(kv_bytes_per_token, name="kv_bytes_per_token", low=0.0)
    base, per_ctx, per_tok, over = roofline.cost(kv_bytes_per_token=int(kv))
    out = over + np.maximum(base + per_ctx * c, per_tok * (b + p))
    return np.asarray(out, dtype=np.float64)
