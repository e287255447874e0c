"""The engine mode's description: model shape, KV budget, batching, prompts, preemption.

An :class:`EngineModel` given to :class:`refimpl.sim.SimConfig` (``engine_model=``) turns the
simulator's slots into an inference engine's sequences: at most ``slots`` run at once
(vLLM's ``max_num_seqs``), fewer when the KV blocks run out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from refimpl._validation import as_int, as_real, invalid, wrong_type
from refimpl.sim.engine.kv import kv_block_bytes, kv_bytes_per_token, routing_bytes_per_token
from refimpl.sim.engine.roofline import Roofline

__all__ = ["ENGINE_PRESETS", "PREEMPTION_MODES", "EngineModel"]

#: What a preempted sequence's KV becomes (``EngineModel.preemption``).
PREEMPTION_MODES: tuple[str, ...] = ("recompute", "swap")

_H100 = {"bandwidth": 3.35e12, "flops": 989e12}
#: Named model sizes on one accelerator: the model's shape and a roofline (H100 SXM: 3.35 TB/s of
#: HBM3, 989 TFLOP/s dense bfloat16), and the KV memory vLLM leaves on its 80 GB at
#: ``gpu_memory_utilization=0.9`` once the weights and a few GB of activations are placed (rounded).
ENGINE_PRESETS: dict[str, dict[str, Any]] = {
    "qwen2.5-7b-h100": {
        "layers": 28,
        "kv_heads": 4,
        "head_dim": 128,
        "dtype_bytes": 2,
        "kv_memory_bytes": 48 * 2**30,
        "roofline": Roofline(weight_bytes=15.23e9, active_params=7.62e9, **_H100),
    },
    "qwen3-30b-a3b-h100": {
        "layers": 48,
        "kv_heads": 4,
        "head_dim": 128,
        "dtype_bytes": 2,
        "moe_layers": 48,
        "top_k": 8,
        "kv_memory_bytes": 6 * 2**30,
        "roofline": Roofline(weight_bytes=61.1e9, active_params=3.3e9, **_H100),
    },
}


@dataclass(frozen=True, kw_only=True)
class EngineModel:
    """An inference engine under a KV-cache budget (validated on construction).

    Parameters
    ----------
    layers, kv_heads, head_dim, dtype_bytes : int
        The model's attention shape and the KV cache's bytes per element (default: Qwen2.5-7B in
        bfloat16).
    moe_layers, top_k, expert_id_bytes : int
        Mixture-of-experts routing kept per token (layers, experts chosen, bytes per id); 0, 0 for a
        dense model (default).
    kv_memory_bytes : int or None
        Bytes for the KV cache; ``None``: unbounded (only ``slots`` limits the batch).
    block_size : int
        Tokens per KV block (vLLM's default 16).
    watermark : float
        Fraction of the blocks a new or resumed sequence must leave free (vLLM v0's 0.01), so that
        an admission is not preempted at once.
    roofline : Roofline or None
        The decode step's time (seconds); ``None``: a constant step of ``SimConfig.token_time``
        plus ``prefill_token_time`` per prefilled token.
    prefill_token_time : float
        Time per prefilled token when ``roofline`` is ``None`` (default 0).
    prompt_tokens : int
        Tokens of every prompt (default 0).
    group_size : int
        Samples per prompt (GRPO's ``n``): consecutive launches share a prompt.
    prefix_sharing : bool
        A group's sequences share its prompt's full blocks, and a prompt seen before is found in
        the cache while its blocks are still there (default ``True``).
    prompts : int or None
        Distinct prompts, cycled (group ``g`` asks prompt ``g mod prompts``): a later epoch finds a
        prompt cached if it was not evicted; ``None``: every group a new prompt.
    preemption : {'recompute', 'swap'}
        What a preempted sequence's KV becomes: discarded and recomputed on resumption, or swapped
        to host memory and back.
    swap_bandwidth : float
        Host-device bytes per time unit for swapping (default 25e9, PCIe 4 x16 in bytes/s).

    Examples
    --------
    >>> m = EngineModel.preset("qwen2.5-7b-h100", prompt_tokens=512, group_size=8)
    >>> m.kv_bytes_per_token, m.total_blocks
    (57344, 56173)
    """

    layers: int = 28
    kv_heads: int = 4
    head_dim: int = 128
    dtype_bytes: int = 2
    moe_layers: int = 0
    top_k: int = 0
    expert_id_bytes: int = 4
    kv_memory_bytes: int | None = None
    block_size: int = 16
    watermark: float = 0.01
    roofline: Roofline | None = None
    prefill_token_time: float = 0.0
    prompt_tokens: int = 0
    group_size: int = 1
    prefix_sharing: bool = True
    prompts: int | None = None
    preemption: str = "recompute"
    swap_bandwidth: float = 25e9

    def __post_init__(self) -> None:
        s = object.__setattr__
        for name in ("layers", "kv_heads", "head_dim", "dtype_bytes", "block_size", "group_size"):
            s(self, name, as_int(getattr(self, name), name=name, minimum=1))
        for name in ("moe_layers", "top_k", "prompt_tokens"):
            s(self, name, as_int(getattr(self, name), name=name, minimum=0))
        s(self, "expert_id_bytes", as_int(self.expert_id_bytes, name="expert_id_bytes", minimum=1))
        routing_bytes_per_token(
            moe_layers=self.moe_layers, top_k=self.top_k, id_bytes=self.expert_id_bytes
        )
        if self.kv_memory_bytes is not None:
            m = as_int(self.kv_memory_bytes, name="kv_memory_bytes", minimum=0)
            s(self, "kv_memory_bytes", m)
        if self.prompts is not None:
            s(self, "prompts", as_int(self.prompts, name="prompts", minimum=1))
        w = as_real(self.watermark, name="watermark", low=0.0, meaning="a fraction of the blocks")
        if not w < 1.0:
            raise invalid("watermark", "be < 1", w, "Pass a fraction in [0, 1), e.g. 0.01.")
        s(self, "watermark", w + 0.0)
        if self.roofline is not None and not isinstance(self.roofline, Roofline):
            raise wrong_type("roofline", "a Roofline or None", self.roofline, "Build a Roofline.")
        for name in ("prefill_token_time", "swap_bandwidth"):
            v = as_real(getattr(self, name), name=name, low=0.0, low_open=name == "swap_bandwidth")
            if not math.isfinite(v):
                raise invalid(name, "be finite", v, f"Pass a finite {name}.")
            s(self, name, v + 0.0)
        if self.roofline is not None and self.prefill_token_time != 0.0:
            raise invalid(
                "prefill_token_time",
                "be 0 with a roofline (the roofline prices prefill as compute)",
                self.prefill_token_time,
                "Drop prefill_token_time, or pass roofline=None.",
            )
        if not isinstance(self.prefix_sharing, bool):
            raise wrong_type("prefix_sharing", "a bool", self.prefix_sharing, "Pass True/False.")
        if not isinstance(self.preemption, str) or self.preemption not in PREEMPTION_MODES:
            raise invalid(
                "preemption", "be 'recompute' or 'swap'", self.preemption, "Pick one of them."
            )

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> EngineModel:
        """A named model on an accelerator (:data:`ENGINE_PRESETS`), with fields overridden."""
        if name not in ENGINE_PRESETS:
            raise invalid(
                "name", f"be one of {sorted(ENGINE_PRESETS)}", name, "Pick a preset, or build one."
            )
        return replace(cls(**ENGINE_PRESETS[name]), **overrides)

    @property
    def kv_bytes_per_token(self) -> int:
        """:func:`refimpl.sim.engine.kv_bytes_per_token` of this model."""
        return kv_bytes_per_token(
            layers=self.layers,
            kv_heads=self.kv_heads,
            head_dim=self.head_dim,
            dtype_bytes=self.dtype_bytes,
        )

    @property
    def routing_bytes_per_token(self) -> int:
        """:func:`refimpl.sim.engine.routing_bytes_per_token` of this model (0 if dense)."""
        return routing_bytes_per_token(
            moe_layers=self.moe_layers, top_k=self.top_k, id_bytes=self.expert_id_bytes
        )

    @property
    def total_blocks(self) -> int | None:
        """KV blocks in the budget (``None``: unbounded)."""
        if self.kv_memory_bytes is None:
            return None
        bb = kv_block_bytes(block_size=self.block_size, bytes_per_token=self.kv_bytes_per_token)
        return self.kv_memory_bytes // bb

    @property
    def watermark_blocks(self) -> int:
        """Blocks an admission must leave free: ``floor(watermark × total_blocks)``."""
        total = self.total_blocks
        return 0 if total is None else int(self.watermark * total)
