"""The simulator's engine mode: an inference engine's continuous batching under a KV-cache budget.

Give :class:`refimpl.sim.SimConfig` an :class:`EngineModel` (``engine_model=``) and the slots become
an engine's sequences: paged KV blocks (``kv``), a roofline step time
(``roofline``), prefix sharing within a GRPO group and across steps
(``prefix``), preemption newest first with recompute or swap
(``preemption``), and weight updates that restart, recompute or keep the KV
of the rollouts in flight (``interruption``).
:func:`refimpl.sim.simulate_engine` returns the trace and :class:`EngineStats`.
"""

from __future__ import annotations

from refimpl.sim.engine.batching import EngineRun, EngineStats
from refimpl.sim.engine.interruption import (
    INTERRUPTION_CHOICES,
    InterruptionBytes,
    interruption_bytes,
)
from refimpl.sim.engine.kv import (
    kv_block_bytes,
    kv_blocks_in_budget,
    kv_blocks_per_sequence,
    kv_bytes_per_token,
    kv_sequences_that_fit,
    routing_bytes_per_token,
)
from refimpl.sim.engine.model import ENGINE_PRESETS, PREEMPTION_MODES, EngineModel
from refimpl.sim.engine.preemption import PreemptionCost, preemption_cost, preemption_victims
from refimpl.sim.engine.prefix import PrefixSavings, prefix_sharing_savings
from refimpl.sim.engine.roofline import Roofline, decode_step_time

__all__ = [
    "ENGINE_PRESETS",
    "INTERRUPTION_CHOICES",
    "PREEMPTION_MODES",
    "EngineModel",
    "EngineRun",
    "EngineStats",
    "InterruptionBytes",
    "PreemptionCost",
    "PrefixSavings",
    "Roofline",
    "decode_step_time",
    "interruption_bytes",
    "kv_block_bytes",
    "kv_blocks_in_budget",
    "kv_blocks_per_sequence",
    "kv_bytes_per_token",
    "kv_sequences_that_fit",
    "preemption_cost",
    "preemption_victims",
    "prefix_sharing_savings",
    "routing_bytes_per_token",
]
