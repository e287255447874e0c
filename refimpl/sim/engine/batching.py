"""Continuous batching under a KV budget: run the engine mode and report what the engine did.

:func:`refimpl.sim.simulate_engine` runs a :class:`refimpl.sim.SimConfig` that has an
``engine_model``: the trace has the simulator's schema (staleness, token versions, wasted and recomputed tokens), and
:class:`EngineStats` adds the engine's own figures: batch, memory, preemption, prefix sharing and the
bytes each weight update moved or kept.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from refimpl.sim._pages import map_in_background
from refimpl.sim._trace import RawTrace, SimTrace
from refimpl.sim.engine import _kernel
from refimpl.sim.engine import _loop as L
from refimpl.sim.engine.interruption import interruption_bytes
from refimpl.sim.engine.model import EngineModel

if TYPE_CHECKING:
    from refimpl.sim._config import SimConfig
    from refimpl.sim._lengths import LengthSupply

__all__ = ["EngineRun", "EngineStats", "engine_stats", "run_engine"]

_PARTIAL = {"none": 0, "restart": 1, "recompute": 2, "keep_kv": 3}


class EngineStats(NamedTuple):
    """What the engine did in one run (tokens, blocks, bytes; times in the run's unit).

    Attributes
    ----------
    steps : int
        Decode steps run.
    batch_mean : float
        Sequences per step, on average.
    kv_bytes_per_token, routing_bytes_per_token, total_blocks : int
        The model's KV and MoE routing bytes per token; blocks in the budget (-1: unbounded).
    blocks_used_mean, blocks_used_peak : float
        Blocks held, averaged over steps, and at most (NaN when unbounded).
    preemptions : int
        Sequences preempted (newest first) to make room.
    preemption_wasted_tokens : float
        KV tokens discarded by a ``recompute`` preemption (recomputed on resumption).
    swapped_out_blocks, swapped_in_blocks : float
        Blocks moved to host memory and back by ``swap`` preemptions.
    prefill_tokens : float
        Tokens prefilled (prompts, recomputed KV).
    prefix_hit_tokens_group, prefix_hit_tokens_cache : float
        Prompt tokens not prefilled because a sibling of the group held them, or the cache still
        held them from an earlier group.
    prefix_stale_misses : int
        Cached prompts found prefilled under older weights, so prefilled again.
    prefix_blocks_saved_mean : float
        Blocks sharing saved, averaged over steps (the group's prompt blocks held once, not per
        sequence).
    prefix_time_saved : float
        Time the prefix hits saved: their tokens' prefill cost at the step's rate (compute).
    prefill_time : float
        Time steps spent on prefill beyond their decode.
    interrupted : int
        Rollouts in flight at a weight update (counted at each update that reached them).
    interrupted_tokens, interrupted_context_tokens : float
        Their generated tokens, and their whole context (prompt and generated).
    interruption_bytes_discarded, interruption_bytes_recomputed, interruption_bytes_kept : float
        KV (and routing) bytes the partial policy threw away (``restart``), rebuilt under the new
        weights (``recompute``) or kept (``keep_kv``).
    """

    steps: int
    batch_mean: float
    kv_bytes_per_token: int
    routing_bytes_per_token: int
    total_blocks: int
    blocks_used_mean: float
    blocks_used_peak: float
    preemptions: int
    preemption_wasted_tokens: float
    swapped_out_blocks: float
    swapped_in_blocks: float
    prefill_tokens: float
    prefix_hit_tokens_group: float
    prefix_hit_tokens_cache: float
    prefix_stale_misses: int
    prefix_blocks_saved_mean: float
    prefix_time_saved: float
    prefill_time: float
    interrupted: int
    interrupted_tokens: float
    interrupted_context_tokens: float
    interruption_bytes_discarded: float
    interruption_bytes_recomputed: float
    interruption_bytes_kept: float

    def to_json_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (NaN stays NaN: the CLI writes it as null)."""
        return {
            k: (float(v) if isinstance(v, float) else int(v)) for k, v in self._asdict().items()
        }


class EngineRun(NamedTuple):
    """:func:`simulate_engine`'s result: the trace and the engine's figures."""

    trace: SimTrace
    stats: EngineStats


def _params(cfg: SimConfig, model: EngineModel) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    p = np.zeros(L.N_P, dtype=np.int64)
    total = model.total_blocks
    pool = model.prompts or 0
    p[: L._CAL] = (  # the calendar's size: set per run of the loop (run_engine)
        cfg.slots,
        cfg.batch,
        cfg.steps,
        _PARTIAL[cfg.partial],
        model.prompt_tokens,
        model.block_size,
        -1 if total is None else total,
        model.watermark_blocks,
        model.group_size,
        pool,
        int(model.prefix_sharing),
        int(model.preemption == "swap"),
        int(model.roofline is not None),
    )
    c = np.zeros(L.N_C, dtype=np.float64)
    if model.roofline is not None:
        base, per_ctx, per_tok, over = model.roofline.cost(
            kv_bytes_per_token=model.kv_bytes_per_token
        )
        c[:4] = base, per_ctx, per_tok, over
    else:
        c[:4] = cfg.token_time, 0.0, model.prefill_token_time, 0.0
    block_bytes = model.block_size * model.kv_bytes_per_token
    c[L._SWAP_T] = block_bytes / model.swap_bandwidth
    return p, c


def _stuck_message(model: EngineModel, rid: int) -> str:
    total = model.total_blocks
    if total is None:
        return "the engine cannot make progress (no sequence runs and no publication is due)."
    budget = (
        f"the KV budget of {total} blocks of {model.block_size} tokens (kv_memory_bytes="
        f"{model.kv_memory_bytes}; admissions leave {model.watermark_blocks} free)"
    )
    what = (
        f"a sequence (rollout {rid}) outgrows the whole of {budget}"
        if rid >= 0
        else f"no sequence fits: {budget} cannot hold one prompt and its first token"
    )
    return (
        f"the engine cannot make progress: {what}. Pass a larger kv_memory_bytes, shorter "
        "lengths or prompts, or a smaller watermark."
    )


def _capacities(cfg: SimConfig) -> tuple[int, int]:
    rollouts = cfg.trained_target + 2 * cfg.slots + 64
    rollouts = int(rollouts * (2.0 if cfg.partial == "restart" else 1.25))
    segments = rollouts if cfg.partial in ("recompute", "keep_kv") else 1
    return rollouts, segments


def _calendar_size(lengths: NDArray[np.int64]) -> int:
    """Buckets of the loop's completion calendar: the least power of two above the longest length
    (a completion is due less than that many steps ahead), or 0 (the heap) past
    :data:`~refimpl.sim.engine._loop.CALENDAR_MAX`."""
    top = int(lengths.max()) if lengths.size else 0
    size = 1 << max(top, 1).bit_length()
    return size if size <= L.CALENDAR_MAX else 0


def run_engine(
    cfg: SimConfig,
    supply: LengthSupply,
    trainer_times: NDArray[np.float64],
    *,
    compiled: bool,
) -> tuple[RawTrace, NDArray[np.float64]]:
    """Run the loop (compiled or the reference), growing its arrays and lengths until it ends."""
    model = cfg.engine_model
    assert model is not None
    loop = _kernel.runner if compiled else L.run_loop
    p, c = _params(cfg, model)
    cap, cap_seg = _capacities(cfg)
    cap_heap = 4 * cfg.slots + 1024  # live entries: about one per seat, and a few stale ones
    while True:
        lengths = np.ceil(supply.matrix).astype(np.int64)
        p[L._CAL] = _calendar_size(lengths)
        n_prompts = (model.prompts or cap) if model.prefix_sharing else 1
        arrays = _arrays(cap, cap_seg, cap_heap, n_prompts, cfg, model.block_size)
        if p[L._CAL]:  # the calendar's buckets and entries: two more rows of H
            arrays["H"] = np.zeros((5, 2, max(cap_heap, int(p[L._CAL]))), dtype=np.int64)
        i_state, f_state, stats = arrays["I"], arrays["F"], arrays["ST"]
        # the large columns' pages mapped on another thread while the loop fills them
        mapped = map_in_background([arrays[k] for k in _MAPPED])
        try:
            loop(p, c, trainer_times, lengths, *[arrays[k] for k in _ORDER])
        finally:
            mapped()
        err = int(i_state[L._ERR])
        if err == 0:
            break
        if err == L.ERR_ROLLOUTS:
            cap *= 2
        elif err == L.ERR_SEGMENTS:
            cap_seg *= 2
        elif err == L.ERR_SCHEDULE:
            cap_heap *= 2
        elif err == L.ERR_LENGTHS:
            supply.extend(slot=int(i_state[L._ERR_A]), needed=lengths.shape[1] + 1)
        else:
            raise RuntimeError(_stuck_message(model, int(i_state[L._ERR_A])))
    del lengths
    for name in ("buf", "H", "LRU", "PR", "seats", "seat_rid", "nxt", "cnt"):
        del arrays[name]  # the loop's own; the trace's columns come next (peak memory at 10^7)
    return _raw(arrays, float(f_state[L._T]), trainer_times, cfg.slots), stats


_MAPPED = ("R", "RF", "SEG", "SEGT", "buf", "LRU")  # a row per rollout (or two): the large ones
_ORDER = (
    "R",
    "W",
    "WF",
    "RF",
    "PR",
    "LRU",
    "SEG",
    "SEGT",
    "buf",
    "pub",
    "I",
    "F",
    "ST",
    "H",
    "seats",
    "seat_rid",
    "nxt",
    "cnt",
)


def _arrays(
    cap: int, cap_seg: int, cap_heap: int, n_prompts: int, cfg: SimConfig, block_size: int
) -> dict[str, NDArray[Any]]:
    pr = np.zeros((3, n_prompts), dtype=np.int64)
    pr[L._PVER] = -1
    return {
        "R": np.zeros((L.N_R, cap), dtype=np.int32),
        "W": np.zeros((L.N_W, cfg.slots), dtype=np.int64),
        "WF": np.zeros((L.N_WF, cfg.slots), dtype=np.float64),
        "RF": np.zeros((L.N_RF, cap), dtype=np.float64),
        "PR": pr,
        "LRU": np.zeros(
            (2, 2 * cap if cfg.engine_model and cfg.engine_model.prompts else 1), dtype=np.int64
        ),
        "SEG": np.zeros((2, cap_seg), dtype=np.int64),
        "SEGT": np.zeros(cap_seg, dtype=np.float64),
        "buf": np.zeros(cap, dtype=np.int64),
        "pub": np.zeros(cfg.steps, dtype=np.float64),
        "I": np.zeros(L.N_I, dtype=np.int64),
        "F": np.zeros(L.N_F, dtype=np.float64),
        "ST": np.zeros(L.N_STATS, dtype=np.float64),
        "H": np.zeros((3, 2, cap_heap), dtype=np.int64),
        "seats": np.arange(cfg.slots, dtype=np.int64),
        "seat_rid": np.full(cfg.slots, -1, dtype=np.int64),
        "nxt": np.zeros(cfg.slots, dtype=np.int64),
        "cnt": np.zeros(block_size, dtype=np.int64),
    }


def _canonical(R: NDArray[np.int32], n_slots: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """``(order, row)``: rollouts in the trace's canonical order (by slot, then launch within the
    slot), and each rollout's canonical row. A slot's rollouts used its columns 0, 1, ... in
    launch order, so the row is the slot's offset plus the column: no sort needed."""
    slot, col = R[L._SLOT], R[L._COL]
    offsets = np.zeros(n_slots + 1, dtype=np.int64)
    np.cumsum(np.bincount(slot, minlength=n_slots), out=offsets[1:])
    row = offsets[slot] + col
    order = np.empty(row.size, dtype=np.int64)
    order[row] = np.arange(row.size)
    return order, row


def _segments(
    a: dict[str, NDArray[Any]], vmin: NDArray[np.int64], row: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.int32]] | None:
    """The version segments in canonical row order (``vmin`` already in that order)."""
    n_seg = int(a["I"][L._NSEG])
    if not n_seg:
        return None
    n = vmin.size
    seg_row = row[a["SEG"][0, :n_seg]]
    order = np.argsort(seg_row, kind="stable")  # a rollout's segments in the order they began
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(seg_row, minlength=n) + 1, out=offsets[1:])
    tok = np.zeros(int(offsets[-1]), dtype=np.float64)
    ver = np.empty(int(offsets[-1]), dtype=np.int32)
    ver[offsets[:-1]] = vmin
    sorted_rows = seg_row[order]
    within = np.arange(n_seg) - np.searchsorted(sorted_rows, sorted_rows)
    at = offsets[sorted_rows] + 1 + within
    tok[at] = a["SEGT"][:n_seg][order]
    ver[at] = a["SEG"][1, :n_seg][order]
    return offsets, tok, ver


def _raw(
    a: dict[str, NDArray[Any]], end: float, taus: NDArray[np.float64], n_slots: int
) -> RawTrace:
    """The loop's arrays as the trace's columns, in canonical row order. It consumes ``a``: the
    float fields are freed once their columns exist, then the integer ones."""
    n = int(a["I"][L._NL])
    runtime = a["RF"][L._RUNTIME, :n].copy()
    running = a["W"][L._STATE] == L._RUN  # seats whose rollout runs at the end
    runtime[a["W"][L._RID][running]] += end - a["WF"][L._SINCE][running]
    busy = float(np.sum(runtime))  # in launch order, as the slot mode sums it
    del runtime
    order, row = _canonical(a["R"][:, :n], n_slots)
    vmin = a["R"][L._VMIN, :n][order]
    segments = _segments(a, vmin, row)
    del order

    def col(table: str, field: int, dtype: Any) -> NDArray[Any]:
        # scattered to the canonical rows: the loop's rows read in order, one write stream per
        # slot (a gather by canonical row reads them at random: 26 ms for 12 columns of 1.1 x
        # 10^6 rows here, against 15 ms)
        out = np.empty(n, dtype=dtype)
        out[row] = a[table][field, :n]
        return out

    floats = {
        "launch_time": col("RF", L._LAUNCH, np.float64),
        "finish_time": col("RF", L._FINISH, np.float64),
        "length": col("RF", L._LENF, np.float64),
        "wasted_tokens": col("RF", L._WASTED, np.float64),
        "recomputed_tokens": col("RF", L._RECOMP, np.float64),
    }
    del a["RF"]
    ints = {
        "slot": col("R", L._SLOT, np.int32),
        "column": col("R", L._COL, np.int32),
        "launch_version": col("R", L._VL, np.int32),
        "min_version": vmin.astype(np.int32),
        "step": col("R", L._STEP, np.int32),
        "staleness": col("R", L._STALE, np.int32),
        "status": col("R", L._STATUS, np.int8),
        "rank": col("R", L._RANKR, np.int64),
    }
    del a["R"]
    return RawTrace(
        **floats,
        **ints,
        segments=segments,
        publish_times=a["pub"].copy(),
        end_time=end,
        generator_busy=busy,
        trainer_busy=float(np.sum(taus)),
    )


def engine_stats(st: NDArray[np.float64], cfg: SimConfig) -> EngineStats:
    """The loop's counters as :class:`EngineStats`."""
    model = cfg.engine_model
    assert model is not None
    steps = int(st[L.ST_STEPS])
    per_step = (lambda x: x / steps) if steps else (lambda x: math.nan)
    kv, route = model.kv_bytes_per_token, model.routing_bytes_per_token
    total = model.total_blocks
    ctx = float(st[L.ST_INT_CTX_TOKENS])
    moved = interruption_bytes(
        ctx, choice=cfg.partial if cfg.partial != "none" else "keep_kv",
        kv_bytes_per_token=kv, routing_bytes_per_token=route,
    )  # fmt: skip
    zero = cfg.partial == "none"
    if model.roofline is not None:
        per_token = 2.0 * model.roofline.active_params / model.roofline.flops
    else:
        per_token = model.prefill_token_time
    hits = float(st[L.ST_SAVED_GROUP] + st[L.ST_SAVED_CACHE])
    return EngineStats(
        steps=steps,
        batch_mean=per_step(float(st[L.ST_BATCH_SUM])),
        kv_bytes_per_token=kv,
        routing_bytes_per_token=route,
        total_blocks=-1 if total is None else total,
        blocks_used_mean=per_step(float(st[L.ST_BLOCKS_SUM])) if total is not None else math.nan,
        blocks_used_peak=float(st[L.ST_PEAK_BLOCKS]) if total is not None else math.nan,
        preemptions=int(st[L.ST_PREEMPTIONS]),
        preemption_wasted_tokens=float(st[L.ST_PREEMPT_KV_TOKENS]),
        swapped_out_blocks=float(st[L.ST_SWAP_OUT]),
        swapped_in_blocks=float(st[L.ST_SWAP_IN]),
        prefill_tokens=float(st[L.ST_PREFILL]),
        prefix_hit_tokens_group=float(st[L.ST_SAVED_GROUP]),
        prefix_hit_tokens_cache=float(st[L.ST_SAVED_CACHE]),
        prefix_stale_misses=int(st[L.ST_STALE_MISS]),
        prefix_blocks_saved_mean=per_step(float(st[L.ST_BLOCKS_SAVED_SUM])),
        prefix_time_saved=hits * per_token,
        prefill_time=float(st[L.ST_PREFILL_TIME]),
        interrupted=int(st[L.ST_INTERRUPTED]),
        interrupted_tokens=float(st[L.ST_INT_GEN_TOKENS]),
        interrupted_context_tokens=ctx,
        interruption_bytes_discarded=0.0 if zero else moved.discarded,
        interruption_bytes_recomputed=0.0 if zero else moved.recomputed,
        interruption_bytes_kept=0.0 if zero else moved.kept,
    )
