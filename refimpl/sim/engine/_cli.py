"""``refimpl simulate --engine-model``: the engine mode's options, their checks, its EngineModel.

Used by :mod:`refimpl.sim.cli`. An engine option without ``--engine-model`` is refused (the slot
mode would ignore it), and so are the slot mode's own timing options with it (the engine prices
prefill, batching and preemption itself).
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from refimpl.errors import InvalidArgument
from refimpl.sim._cliopts import default, given
from refimpl.sim.engine.model import ENGINE_PRESETS, EngineModel

__all__ = [
    "ENGINE_ONLY",
    "configure_engine_options",
    "engine_model_from_args",
    "refuse_inert_engine_options",
]

#: Options of the engine mode, read only with --engine-model (argparse dests).
ENGINE_ONLY: tuple[str, ...] = (
    "kv_memory_gib",
    "block_size",
    "watermark",
    "prompt_tokens",
    "group_size",
    "prompts",
    "no_prefix_sharing",
    "preemption",
)


def configure_engine_options(parser: argparse.ArgumentParser) -> None:
    """Add the engine mode's option group to ``parser``."""
    eg = parser.add_argument_group(
        "engine mode (--engine-model): continuous batching under a KV-cache budget"
    )
    eg.add_argument(
        "--engine-model",
        choices=["unbounded", *sorted(ENGINE_PRESETS)],
        default=None,
        help=(
            "run the slots as an inference engine: 'unbounded' (no KV budget, a constant step of "
            "--token-time) or a named model on an accelerator (its KV budget and roofline step "
            "time, in seconds) (default: not set, the slot mode)"
        ),
    )
    eg.add_argument(
        "--kv-memory-gib",
        type=float,
        default=None,
        help="KV-cache budget in GiB (default: the preset's; unbounded for 'unbounded')",
    )
    eg.add_argument("--block-size", type=int, default=default(16), help="tokens per KV block")
    eg.add_argument(
        "--watermark",
        type=float,
        default=default(0.01),
        help="fraction of the blocks an admission must leave free",
    )
    eg.add_argument("--prompt-tokens", type=int, default=default(0), help="tokens per prompt")
    eg.add_argument(
        "--group-size", type=int, default=default(1), help="samples per prompt (GRPO's n)"
    )
    eg.add_argument(
        "--prompts",
        type=int,
        default=None,
        help="distinct prompts, cycled (later epochs can hit the prefix cache) (default: all new)",
    )
    eg.add_argument(
        "--no-prefix-sharing",
        action="store_true",
        help="each sequence holds and prefills its own prompt",
    )
    eg.add_argument(
        "--preemption",
        choices=["recompute", "swap"],
        default=default("recompute"),
        help="what a preempted sequence's KV becomes",
    )


def refuse_inert_engine_options(args: argparse.Namespace, refuse: Any) -> None:
    """The engine options need --engine-model; the engine prices what some slot options model."""
    if args.engine_model is None:
        for dest in ENGINE_ONLY:
            if given(args, dest):
                refuse(
                    dest,
                    "to the engine mode, which --engine-model selects",
                    f"Add --engine-model unbounded (or a preset), or drop "
                    f"--{dest.replace('_', '-')}.",
                )
        return
    if args.mode != "async":
        raise InvalidArgument(
            f"--mode must be async (or not given) with --engine-model (the engine admits "
            f"sequences continuously); got --mode {args.mode} with --engine-model "
            f"{args.engine_model}. Drop --mode, or drop --engine-model."
        )
    if args.over_bound != "keep":
        refuse(
            "over_bound",
            "to the slot mode (the engine mode trains every sample it completes)",
            "Drop --over-bound, or drop --engine-model.",
            context=f"with --engine-model {args.engine_model}",
        )
    for dest, why in (
        ("slowdown_per_slot", "the engine's step time is its roofline (or --token-time)"),
        ("prefill_time", "the engine prices prefill per token"),
        ("reprefill_token_time", "the engine prices recomputation per token"),
        ("preempt_rate", "the engine preempts when its KV blocks run out"),
    ):
        if given(args, dest):
            refuse(
                dest,
                f"to the slot mode ({why})",
                f"Drop --{dest.replace('_', '-')}, or drop --engine-model.",
                context=f"with --engine-model {args.engine_model}",
            )


def engine_model_from_args(args: argparse.Namespace) -> EngineModel | None:
    """The :class:`EngineModel` the engine options describe (``None`` without --engine-model)."""
    name = args.engine_model
    if name is None:
        return None
    fields: dict[str, Any] = {
        "block_size": args.block_size,
        "watermark": args.watermark,
        "prompt_tokens": args.prompt_tokens,
        "group_size": args.group_size,
        "prompts": args.prompts,
        "prefix_sharing": not args.no_prefix_sharing,
        "preemption": args.preemption,
    }
    if args.kv_memory_gib is not None:
        gib = float(args.kv_memory_gib)
        if not (math.isfinite(gib) and 0 < gib <= 2.0**33):
            raise InvalidArgument(
                f"--kv-memory-gib must be in (0, 2^33] (a KV-cache budget in GiB); got "
                f"--kv-memory-gib={gib!r}. Pass e.g. --kv-memory-gib 40."
            )
        fields["kv_memory_bytes"] = int(gib * 2**30)
    if name == "unbounded":
        return EngineModel(**fields)
    return EngineModel.preset(name, **fields)
