"""The compiled engine's driver: the Python around the numba kernel of :mod:`refimpl.sim._compiled`.

What the kernel cannot do, the driver does: it packs the configuration into the kernel's parameter
arrays, allocates the kernel's arrays at a first guess of their sizes, grows them when the kernel
pauses for room (and resumes), runs again from the start with more when an event overran its room
(every draw comes from the same generators in the same order, so a rerun sees the same numbers),
reports progress, and finally reorders the kernel's rows into the trace's canonical row order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from refimpl.sim._compiled_layout import (
    _COLUMNS_PER_EVENT,
    _COMPLETED,
    _ERR,
    _ERR_A,
    _ERR_B,
    _EXP_USED,
    _GEN_BUSY,
    _HEAP_PER_EVENT,
    _J,
    _MAXCOL,
    _N_STATE,
    _NEED_HEAP,
    _NEED_LENGTHS,
    _NEED_ROOM,
    _NEED_ROWS,
    _NEED_SEGMENTS,
    _NR,
    _NSEG,
    _OK,
    _PARTIAL_CODES,
    _PAUSE_AT,
    _R_BUF,
    _R_GEN,
    _R_IDX,
    _R_RANK,
    _R_SLOT,
    _R_STEP,
    _R_VL,
    _R_VMIN,
    _ROWS_PER_EVENT,
    _S_NXT,
    _SEGMENTS_PER_EVENT,
    _STUCK,
    _T,
    _TRAINER_BUSY,
)
from refimpl.sim._config import SimConfig
from refimpl.sim._event import _Stuck
from refimpl.sim._lengths import LengthSupply
from refimpl.sim._trace import RawTrace

Scatter = Callable[[NDArray[Any], NDArray[np.int64], NDArray[Any]], None]


@dataclass
class _Room:
    """The sizes of the kernel's growable arrays, when it pauses, and the progress reported."""

    rows: int
    heap: int
    n_seg: int
    n_exp: int
    chunk: int  # the kernel pauses every ``chunk`` completions to report progress
    probe: int  # completions at the one early pause that sizes the rows (0: done)
    reported: int = 0


@dataclass
class _Arrays:
    """The kernel's working arrays (its state, its rows, its heap and its scratch)."""

    exps: NDArray[np.float64]
    S: NDArray[np.int64]
    SF: NDArray[np.float64]
    R: NDArray[np.int32]
    RF: NDArray[np.float64]
    W: NDArray[np.float64]
    status: NDArray[np.int8]
    ht: NDArray[np.float64]
    hk: NDArray[np.int64]
    hp: NDArray[np.int64]
    seg_r: NDArray[np.int64]
    seg_k: NDArray[np.float64]
    seg_v: NDArray[np.int32]
    publish: NDArray[np.float64]
    SL: NDArray[np.int64]
    SLF: NDArray[np.float64]
    idle: NDArray[np.int64]
    batch: NDArray[np.int64]
    hn: NDArray[np.int64]
    ev: NDArray[np.int64]


def run_kernel(
    kernel: Callable[..., None],
    scatter: Scatter,
    cfg: SimConfig,
    supply: LengthSupply,
    trainer_times: NDArray[np.float64],
    *,
    rows: int,
    room: int,
    progress: Callable[[int], None] | None,
) -> RawTrace:
    """Run ``kernel`` to the end of the run and return its trace in canonical row order.

    ``rows`` is the first guess of the rollouts the run launches, ``room`` the first room for heap
    entries, version segments and preemption delays beyond the first guess; ``scatter`` is the
    compiled ``into[dest] = src``.
    """
    need_w = cfg.partial != "none" or cfg.preempt_rate > 0 or cfg.mode in ("sync", "first_k")
    slow = (
        np.ascontiguousarray(cfg.slowdown_table, dtype=np.float64)
        if cfg.slowdown_table is not None
        else np.ones(1, dtype=np.float64)
    )
    inputs = (
        _int_parameters(cfg, supply),
        _float_parameters(cfg),
        np.ascontiguousarray(trainer_times, dtype=np.float64),
        slow,
    )
    sizes = _first_room(cfg, rows=rows, room=room, progress=progress)
    return _canonical_trace(
        cfg,
        supply,
        _run_to_end(kernel, cfg, supply, inputs, sizes, need_w, progress),
        need_w,
        scatter,
    )


def _int_parameters(cfg: SimConfig, supply: LengthSupply) -> NDArray[np.int64]:
    """The kernel's integer parameters ``P`` (rows ``_P_...``)."""
    n_slots = cfg.slots
    return np.array(
        [
            n_slots,
            cfg.batch,
            cfg.steps,
            cfg.mode == "async",
            cfg.mode in ("sync", "first_k"),
            cfg.mode == "admission",
            cfg.batch if cfg.mode == "sync" else int(cfg.launch or n_slots),
            cfg.mode in ("sync", "first_k") and not (cfg.mode == "first_k" and cfg.leftovers == "carry"),
            cfg.eta if cfg.eta is not None else 0,
            cfg.over_bound == "drop",
            _PARTIAL_CODES[cfg.partial],
            cfg.slowdown_table is not None,
            cfg.preempt_rate > 0,
            cfg.persist_kv,
            supply.fixed,
        ],
        dtype=np.int64,
    )  # fmt: skip


def _float_parameters(cfg: SimConfig) -> NDArray[np.float64]:
    """The kernel's float parameters ``PF`` (rows ``_F_...``)."""
    return np.array(
        [
            cfg.token_time,
            cfg.prefill_time,
            cfg.reprefill_token_time,
            1.0 / cfg.preempt_rate if cfg.preempt_rate > 0 else 0.0,
            cfg.preempt_duration,
            cfg.kv_restore_time,
        ],
        dtype=np.float64,
    )


def _first_room(
    cfg: SimConfig, *, rows: int, room: int, progress: Callable[[int], None] | None
) -> _Room:
    """First sizes; the kernel asks for more when they do not suffice.

    Where the rows a run launches are not known beforehand (a drop at η, aborted rollouts), the
    first guess can fall short near the end, and growing then copies nearly the whole trace (about
    1 s at 10^7 rollouts). So the kernel pauses once early, after about 1/32 of the run, and the
    sizes are extrapolated from that part while there is little to copy.
    """
    n_slots = cfg.slots
    return _Room(
        rows=rows,
        heap=(_HEAP_PER_EVENT + 2) * n_slots + 4 + room,
        n_seg=room if cfg.partial != "none" else 0,
        n_exp=4 * n_slots + room if cfg.preempt_rate > 0 else 0,
        # progress: the kernel pauses every ``chunk`` completions (about 1/64 of the run)
        chunk=max(cfg.trained_target // 64, 1) if progress is not None else 2**62,
        probe=max(cfg.trained_target // 32, 1),
    )


def _allocate(cfg: SimConfig, room: _Room, need_w: bool) -> _Arrays:
    """The kernel's arrays for a run from the start, at the current sizes."""
    n_slots, rows, heap, n_seg = cfg.slots, room.rows, room.heap, room.n_seg
    S = np.zeros(_N_STATE, dtype=np.int64)
    S[_PAUSE_AT] = min(room.chunk, room.probe)
    SL = np.full((4, n_slots), -1, dtype=np.int64)  # next column, rollout, paused, segment
    SL[_S_NXT] = 0
    return _Arrays(
        exps=_exponentials(cfg, room.n_exp),
        S=S,
        SF=np.zeros(4, dtype=np.float64),
        R=np.empty((8, rows), dtype=np.int32),
        RF=np.empty((2, rows), dtype=np.float64),
        W=np.zeros((2, rows if need_w else 1), dtype=np.float64),  # wasted, recomputed
        status=np.empty(rows, dtype=np.int8),
        ht=np.empty((2, heap), dtype=np.float64),
        hk=np.empty((2, heap), dtype=np.int64),  # keys
        hp=np.empty((2, heap), dtype=np.int64),  # payloads
        seg_r=np.empty(n_seg, dtype=np.int64),
        seg_k=np.empty(n_seg, dtype=np.float64),
        seg_v=np.empty(n_seg, dtype=np.int32),
        publish=np.zeros(cfg.steps, dtype=np.float64),
        SL=SL,
        SLF=np.zeros((5, n_slots), dtype=np.float64),
        idle=np.empty(2 * n_slots, dtype=np.int64),  # a ring of idle slots, and scratch
        batch=np.empty(cfg.batch, dtype=np.int64),
        hn=np.zeros(2, dtype=np.int64),
        ev=np.empty(3, dtype=np.int64),  # the popped event's kind, ref, generation
    )


def _run_to_end(
    kernel: Callable[..., None],
    cfg: SimConfig,
    supply: LengthSupply,
    inputs: tuple[NDArray[Any], ...],
    room: _Room,
    need_w: bool,
    progress: Callable[[int], None] | None,
) -> _Arrays:
    """Run from the start (again only when an event overran its room) until the run ends."""
    while True:
        arrays = _allocate(cfg, room, need_w)
        err = _run_and_grow(kernel, cfg, supply, inputs, room, arrays, need_w, progress)
        if err == _OK:
            return arrays
        if err == _STUCK:
            raise _Stuck
        _more_for_a_rerun(err, cfg, supply, room, arrays.S)
        del arrays


def _run_and_grow(
    kernel: Callable[..., None],
    cfg: SimConfig,
    supply: LengthSupply,
    inputs: tuple[NDArray[Any], ...],
    room: _Room,
    a: _Arrays,
    need_w: bool,
    progress: Callable[[int], None] | None,
) -> int:
    """Run the kernel, growing its arrays and resuming whenever it pauses; its final error code."""
    params, fparams, taus, slow = inputs
    while True:
        kernel(
            _readonly(params), _readonly(fparams), _readonly(supply.matrix),
            _readonly(taus), _readonly(slow), _readonly(a.exps), a.S, a.SF, a.R, a.RF, a.W,
            a.status, a.ht, a.hk, a.hp, a.seg_r, a.seg_k, a.seg_v, a.publish, a.SL, a.SLF, a.idle,
            a.batch, a.hn, a.ev,
        )  # fmt: skip
        err = int(a.S[_ERR])
        if progress is not None and a.S[_COMPLETED] > room.reported:
            progress(
                int(a.S[_COMPLETED]) - room.reported
            )  # a rerun from the start reports no twice
            room.reported = int(a.S[_COMPLETED])
        if err != _NEED_ROOM:
            return err
        _grow_between_events(cfg, supply, room, a, need_w)


def _grow_between_events(
    cfg: SimConfig, supply: LengthSupply, room: _Room, a: _Arrays, need_w: bool
) -> None:
    """Grow the arrays that are nearly full, so that the kernel can resume where it paused."""
    S, n_slots = a.S, cfg.slots
    S[_ERR] = _OK
    S[_PAUSE_AT] = S[_COMPLETED] + room.chunk
    done = max(int(S[_J]), 1)
    scale = cfg.steps / done * 1.05  # the whole run, extrapolated from the part done
    n_r = int(S[_NR])
    probing = room.probe > 0 and S[_COMPLETED] >= room.probe
    if probing:  # the early pause, once: size the rows for the whole run
        room.probe = 0
    rows = room.rows
    if rows - n_r < _ROWS_PER_EVENT * n_slots + 1 or (probing and rows < n_r * scale and done >= 4):
        grown = int(n_r * scale) if probing else max(int(rows * 1.5), int(n_r * scale))
        room.rows = rows = grown + _ROWS_PER_EVENT * n_slots + 1
        # one array at a time: only one old copy is alive beside its grown one
        a.R = _grown(a.R, rows, n_r)
        a.RF = _grown(a.RF, rows, n_r)
        a.status = _grown(a.status, rows, n_r)
        if need_w:
            a.W = _grown(a.W, rows, n_r)
    if room.heap - int(a.hn.max()) < _HEAP_PER_EVENT * n_slots + 4:
        room.heap = heap = 2 * room.heap + _HEAP_PER_EVENT * n_slots + 4
        a.ht, a.hk, a.hp = _grown(a.ht, heap), _grown(a.hk, heap), _grown(a.hp, heap)
    if cfg.partial != "none" and room.n_seg - int(S[_NSEG]) < _SEGMENTS_PER_EVENT * n_slots:
        room.n_seg = max(2 * room.n_seg, int(S[_NSEG] * scale)) + _SEGMENTS_PER_EVENT * n_slots
        used = int(S[_NSEG])
        a.seg_r = _grown(a.seg_r, room.n_seg, used)
        a.seg_k = _grown(a.seg_k, room.n_seg, used)
        a.seg_v = _grown(a.seg_v, room.n_seg, used)
    if cfg.preempt_rate > 0 and int(S[_EXP_USED]) >= room.n_exp:
        room.n_exp = max(2 * room.n_exp, int(room.n_exp * scale))
        a.exps = _exponentials(cfg, room.n_exp)  # a longer prefix of the same stream
    # a drawn supply grows ahead of the launches; an explicit matrix is never extended here (the
    # kernel stops with _NEED_LENGTHS, naming the slot, only when a launch needs a column it
    # lacks; a pause for progress or room is not such a need)
    while not supply.fixed and supply.matrix.shape[1] - int(S[_MAXCOL]) < _COLUMNS_PER_EVENT:
        supply.extend(slot=0, needed=int(S[_MAXCOL]) + _COLUMNS_PER_EVENT)


def _more_for_a_rerun(
    err: int, cfg: SimConfig, supply: LengthSupply, room: _Room, S: NDArray[np.int64]
) -> None:
    """Provide what the kernel stopped for inside an event (``err``), for a run from the start."""
    steps = cfg.steps
    done = max(int(S[_J]), 1)
    if err == _NEED_LENGTHS:  # an explicit matrix: raises OutOfLengths as the reference does
        need = int(S[_ERR_B])
        supply.extend(slot=int(S[_ERR_A]), needed=need)
        want = need * steps / done * 1.05
        while supply.matrix.shape[1] < want:
            supply.extend(slot=int(S[_ERR_A]), needed=need)
    elif err == _NEED_ROWS:
        room.rows = max(2 * room.rows, int(room.rows * steps / done * 1.05))
    elif err == _NEED_HEAP:
        room.heap *= 4
    elif err == _NEED_SEGMENTS:
        room.n_seg = max(4 * room.n_seg, int(room.n_seg * steps / done * 1.05))
    else:  # _NEED_EXPS
        room.n_exp = max(4 * room.n_exp, int(room.n_exp * steps / done * 1.05))


def _canonical_trace(
    cfg: SimConfig, supply: LengthSupply, a: _Arrays, need_w: bool, scatter: Scatter
) -> RawTrace:
    """The finished run's trace, its rows in canonical order."""
    n, n_s = int(a.S[_NR]), int(a.S[_NSEG])
    SF, publish = a.SF, a.publish
    seg_r, seg_k, seg_v = a.seg_r[:n_s], a.seg_k[:n_s], a.seg_v[:n_s]
    R, RF, W, status = a.R, a.RF, a.W, a.status
    del a  # the heap goes; the kernel's rows become the trace's columns
    dest, out = _canonical_columns(cfg, supply, R, RF, W, status, n, need_w, scatter)
    del R, RF, W, status
    out["segments"] = _segments(dest, seg_r, seg_k, seg_v, n, out["min_version"]) if n_s else None
    return RawTrace(
        slot=out["slot"],
        column=out["column"],
        launch_time=out["launch_time"],
        finish_time=out["finish_time"],
        length=out["length"],
        launch_version=out["launch_version"],
        min_version=out["min_version"],
        step=out["step"],
        staleness=out["staleness"],
        status=out["status"],
        rank=out["rank"],
        wasted_tokens=out["wasted_tokens"],
        recomputed_tokens=out["recomputed_tokens"],
        segments=out["segments"],
        publish_times=publish,
        end_time=float(SF[_T]),
        generator_busy=float(SF[_GEN_BUSY]),
        trainer_busy=float(SF[_TRAINER_BUSY]),
    )


def _canonical_columns(
    cfg: SimConfig,
    supply: LengthSupply,
    R: NDArray[np.int32],
    RF: NDArray[np.float64],
    W: NDArray[np.float64],
    status: NDArray[np.int8],
    n: int,
    need_w: bool,
    scatter_into: Scatter,
) -> tuple[NDArray[np.int64], dict[str, Any]]:
    """Each kernel row's canonical row, and the trace's columns in canonical row order.

    Canonical row order: by slot, then launch order within the slot (index 0, 1, ... per slot).
    Reorder by scattering (reading the kernel's rows in order, writing one stream per slot: it
    stays in cache where a gather by slot would not) into rows of the kernel's arrays that are no
    longer needed, so that the trace costs no copy of the kernel's arrays: each column lands in the
    row freed by the previous one (the rank, int64, in the two scratch rows of int32).
    """
    n_slots = cfg.slots
    slot = R[_R_SLOT, :n]
    index = R[_R_IDX, :n]
    counts = np.bincount(slot, minlength=n_slots)
    start = np.zeros(n_slots, dtype=np.int64)
    np.cumsum(counts[:-1], out=start[1:])
    dest = start[slot] + index  # each kernel row's canonical row
    del start

    def scatter(src: NDArray[Any], into: NDArray[Any]) -> NDArray[Any]:
        scatter_into(src, dest, into)  # into[dest] = src
        into.setflags(write=False)  # the trace keeps it as it is (no copy)
        return into

    out: dict[str, Any] = {}
    scratch = R[_R_GEN : _R_BUF + 1].reshape(-1).view(np.int64)  # rows GEN, BUF: free now
    out["rank"] = scatter(R[_R_RANK, :n], scratch[:n])
    out["slot"] = scatter(slot, R[_R_RANK, :n])
    out["column"] = scatter(index, R[_R_SLOT, :n])
    out["launch_version"] = scatter(R[_R_VL, :n], R[_R_IDX, :n])
    vmin = scatter(R[_R_VMIN, :n], R[_R_VL, :n])
    out["min_version"] = vmin
    step = scatter(R[_R_STEP, :n], R[_R_VMIN, :n])
    out["step"] = step
    stale = R[_R_STEP, :n]
    np.subtract(step, vmin, out=stale)
    stale[step < 0] = -1
    stale.setflags(write=False)
    out["staleness"] = stale
    # canonical rows of slot s are its launches 0, 1, ...: a prefix of its row of lengths
    out["length"] = np.concatenate(
        [row[:k] for row, k in zip(supply.matrix, counts.tolist(), strict=True)]
    )
    del counts
    out["status"] = scatter(status[:n], np.empty(n, dtype=np.int8))
    launch = RF[0, :n].copy()  # one column's copy frees a float row to start the chain
    out["finish_time"] = scatter(RF[1, :n], RF[0, :n])
    if need_w:
        out["wasted_tokens"] = scatter(W[0, :n], RF[1, :n])
        out["recomputed_tokens"] = scatter(W[1, :n], W[0, :n])
        out["launch_time"] = scatter(launch, W[1, :n])
    else:
        out["wasted_tokens"] = out["recomputed_tokens"] = None
        out["launch_time"] = scatter(launch, RF[1, :n])
    return dest, out


def _segments(
    dest: NDArray[np.int64],
    seg_r: NDArray[np.int64],
    seg_k: NDArray[np.float64],
    seg_v: NDArray[np.int32],
    n: int,
    vmin: NDArray[Any],
) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.int32]]:
    """The version segments in canonical row order: ``(offsets, tokens, versions)``.

    Each row's first segment is its launch (``min_version``, its tokens filled later); the extra
    segments the kernel appended (``seg_r`` their kernel rows) follow, per row in append order.
    """
    n_s = seg_r.size
    rows_of = dest[seg_r]  # canonical row of each extra segment
    order = np.argsort(rows_of, kind="stable")  # per row, in the order they were appended
    counts = np.bincount(rows_of, minlength=n) + 1
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    tok = np.zeros(int(offsets[-1]), dtype=np.float64)
    ver = np.empty(int(offsets[-1]), dtype=np.int32)
    ver[offsets[:-1]] = vmin
    ro = rows_of[order]
    # The i-th segment in sorted order is the w-th extra one of its row r, w = i - (extra segments
    # of rows before r); it lands at offsets[r] + 1 + w, and offsets[r] is r plus those extra
    # segments: so at r + 1 + i.
    at = ro + np.arange(1, n_s + 1)
    tok[at] = seg_k[order]
    ver[at] = seg_v[order]
    return offsets, tok, ver


def _grown(a: NDArray[Any], size: int, used: int | None = None) -> NDArray[Any]:
    """``a`` with its last axis grown to ``size``; its first ``used`` entries (all by default)
    kept, the rest zero (W accumulates). The kernel reads no row it has not written, so only the
    used rows need copying: a copy of the whole allocation would touch pages never used."""
    out = np.zeros((*a.shape[:-1], size), dtype=a.dtype)
    keep = a.shape[-1] if used is None else used
    out[..., :keep] = a[..., :keep]
    return out


def _exponentials(cfg: SimConfig, n: int) -> NDArray[np.float64]:
    """The first ``n`` standard exponentials of the preemption stream (the reference engine
    draws ``exponential(1 / rate)`` one at a time from the same generator: the same numbers)."""
    if n == 0:
        return np.zeros(0)
    return np.random.default_rng([cfg.seed, 2]).standard_exponential(n)


def _readonly(a: NDArray[Any]) -> NDArray[Any]:
    """A read-only view: inputs always have one numba type, so the kernel compiles once."""
    v = a.view()
    v.setflags(write=False)
    return v
