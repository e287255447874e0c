"""The event engine: a plain-Python discrete-event simulation over one heap, for every mode.

Event order at one instant: rollout completions and preemption events first, in the order they were
scheduled (as SimPy orders its timeouts), then publications. So a rollout launched at the instant a
version is published sees the old version (conventions §tie-rule), and the order of completions at one
instant is the order their rollouts were launched, exactly as in the SimPy peer.

Time. Generation advances a *virtual clock* ``V`` (work done at slowdown 1): all busy slots progress
at the same rate ``1 / slowdown(busy)``, so completions keep their order in ``V`` and sit in their own
heap keyed by ``V``. Without a slowdown ``V`` is the real time itself (bit for bit, so that the engine
agrees exactly with the vectorized engine and the peer).

A rollout's life cycle is a sequence of *phases*: a phase starts at ``V = dec_v`` with ``dec_k``
tokens already generated, spends ``dec_pre`` on (re-)prefill and then decodes one token per
``token_time``. Launch, ``recompute`` at a publication and resumption after a preemption each start a
phase; a version change starts a new token-version segment. Agent rollouts with tool calls, whose
phases alternate with tool latency, have an engine of their own (``refimpl.sim.agent``).
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from refimpl.sim._config import SimConfig
from refimpl.sim._lengths import LengthSupply
from refimpl.sim._trace import STATUS, RawTrace
from refimpl.staleness import admission_capacity

__all__ = ["fast_path_applies", "run_async_fast", "run_events"]


def fast_path_applies(cfg: SimConfig) -> bool:
    """Whether :func:`run_async_fast` covers ``cfg``."""
    return (
        cfg.mode == "async"
        and cfg.partial == "none"
        and cfg.preempt_rate == 0.0
        and cfg.slowdown is None
    )


_TRAINED = STATUS["trained"]
_DROPPED = STATUS["dropped"]
_ABORTED = STATUS["aborted"]
_UNFINISHED = STATUS["unfinished"]
_PENDING = STATUS["pending"]

_COMPLETE, _PUBLISH, _PREEMPT, _RESUME = 0, 1, 2, 3


class _Stuck(RuntimeError):
    pass


def run_events(
    cfg: SimConfig,
    supply: LengthSupply,
    trainer_times: NDArray[np.float64],
    *,
    progress: Callable[[int], None] | None = None,
) -> RawTrace:
    """Run the event engine."""
    n_slots, b, steps = cfg.slots, cfg.batch, cfg.steps
    tt, pre, rp = cfg.token_time, cfg.prefill_time, cfg.reprefill_token_time
    mode = cfg.mode
    step_mode = mode in ("sync", "first_k")
    continuous = mode == "async"
    admission = mode == "admission"
    n_launch = b if mode == "sync" else int(cfg.launch or n_slots)
    carry = mode == "first_k" and cfg.leftovers == "carry"
    drop_leftovers = step_mode and not carry
    eta = cfg.eta if cfg.eta is not None else 0
    drop_over = cfg.over_bound == "drop"
    partial = cfg.partial
    slow = None if cfg.slowdown_table is None else cfg.slowdown_table.tolist()
    taus = trainer_times.tolist()
    preempt = cfg.preempt_rate > 0
    prng = np.random.default_rng([cfg.seed, 2]) if preempt else None

    rows = [array("d", np.ascontiguousarray(r).tobytes()) for r in supply.matrix]
    k_cols = len(rows[0])

    # per-rollout columns
    r_slot = array("i")
    r_idx = array("i")
    r_launch = array("d")
    r_finish = array("d")
    r_len = array("d")
    r_vl = array("i")
    r_vmin = array("i")
    r_step = array("i")
    r_stale = array("i")
    r_status = array("b")
    r_rank = array("q")
    r_wasted = array("d")
    r_recomp = array("d")
    r_gen = array("i")
    r_decv = array("d")
    r_decpre = array("d")
    r_deck = array("d")
    extra_segs: dict[int, list[tuple[float, int]]] = {}

    nxt = [0] * n_slots  # next column per slot
    slot_rid = [-1] * n_slots  # rollout generating on the slot (-1: none)
    paused = [-1] * n_slots  # rollout paused by a preemption
    remaining = [0.0] * n_slots  # its remaining decode work
    down = [False] * n_slots
    busy_since = [0.0] * n_slots
    idle: deque[int] = deque()
    heap: list[tuple[float, int, int, int, int, int]] = []  # real-time events
    gheap: list[tuple[float, int, int, int, int, int]] = heap if slow is None else []
    push = heapq.heappush
    pop = heapq.heappop
    nan = math.nan
    seq = 0
    t = 0.0
    v_clock = 0.0
    busy = 0
    gen_busy = 0.0
    trainer_busy = 0.0
    version = 0
    j = 0  # next trainer step
    training = False
    rank_counter = 0
    admitted = 0  # accepted + running (admission mode)
    running = 0  # rollouts in flight, generating or paused (admission mode)
    pending_launch = 0
    buffer: deque[int] = deque()
    batch: list[int] = []
    publish_times = [0.0] * steps
    completed = 0

    def launch(s: int) -> None:
        nonlocal seq, busy, k_cols
        k = nxt[s]
        if k >= k_cols:
            supply.extend(slot=s, needed=k + 1)
            m = supply.matrix
            for i in range(n_slots):
                rows[i].frombytes(np.ascontiguousarray(m[i, k_cols:]).tobytes())
            k_cols = m.shape[1]
        nxt[s] = k + 1
        length = rows[s][k]
        rid = len(r_slot)
        r_slot.append(s)
        r_idx.append(k)
        r_launch.append(t)
        r_finish.append(nan)
        r_len.append(length)
        r_vl.append(version)
        r_vmin.append(version)
        r_step.append(-1)
        r_stale.append(-1)
        r_status.append(_UNFINISHED)
        r_rank.append(-1)
        r_wasted.append(0.0)
        r_recomp.append(0.0)
        r_gen.append(0)
        r_decv.append(v_clock)
        r_decpre.append(pre)
        r_deck.append(0.0)
        slot_rid[s] = rid
        busy += 1
        busy_since[s] = t
        push(gheap, (v_clock + (length * tt + pre), 0, seq, _COMPLETE, rid, 0))
        seq += 1

    def tokens_done(rid: int) -> float:
        x = r_deck[rid] + ((v_clock - r_decv[rid]) - r_decpre[rid]) / tt
        lo, hi = r_deck[rid], r_len[rid]
        return lo if x < lo else (hi if x > hi else x)

    def stop_generating(s: int) -> None:
        nonlocal busy, gen_busy
        slot_rid[s] = -1
        busy -= 1
        gen_busy += t - busy_since[s]

    def new_segment(rid: int, k: float, ver: int) -> None:
        segs = extra_segs.get(rid)
        last_start = segs[-1][0] if segs else 0.0
        if k <= last_start:  # no token under the current segment yet: it changes version
            if segs:
                segs[-1] = (last_start, ver)
            else:
                r_vmin[rid] = ver
        elif segs is None:
            extra_segs[rid] = [(k, ver)]
        else:
            segs.append((k, ver))

    def free_slot(s: int) -> None:
        """A slot with nothing to do: apply the launch policy."""
        nonlocal pending_launch
        if continuous:
            launch(s)
        elif step_mode and pending_launch > 0:
            pending_launch -= 1
            launch(s)
        else:
            idle.append(s)
            if admission:
                admit()

    def admit() -> None:
        nonlocal admitted, running
        cap = admission_capacity(
            eta=eta,
            version=version,
            batch=b,
            accepted=admitted - running,
            running=running,
            max_concurrent=n_slots,
        )
        while cap > 0 and idle:
            s = idle.popleft()
            admitted += 1
            running += 1
            cap -= 1
            launch(s)

    def try_train() -> None:
        nonlocal training, j, rank_counter, trainer_busy, seq, admitted
        if training or j >= steps:
            return
        while buffer and len(batch) < b:
            rid = buffer.popleft()
            s_ = j - r_vmin[rid]
            if drop_over and s_ > eta:
                r_status[rid] = _DROPPED
                r_step[rid] = j
                r_stale[rid] = s_
                if admission:
                    admitted -= 1
                continue
            batch.append(rid)
        if len(batch) < b:
            return
        for rid in batch:
            r_status[rid] = _TRAINED
            r_step[rid] = j
            r_stale[rid] = j - r_vmin[rid]
            r_rank[rid] = rank_counter
            rank_counter += 1
        batch.clear()
        tau = taus[j]
        trainer_busy += tau
        training = True
        push(heap, (t + tau, 1, seq, _PUBLISH, j, 0))
        seq += 1
        j += 1
        if drop_leftovers:
            for s in range(n_slots):
                rid = slot_rid[s]
                if rid >= 0:
                    r_wasted[rid] = tokens_done(rid)
                    r_status[rid] = _DROPPED
                    r_finish[rid] = t
                    r_gen[rid] += 1
                    stop_generating(s)
                    idle.append(s)
                rid = paused[s]
                if rid >= 0:
                    r_wasted[rid] = r_deck[rid]
                    r_status[rid] = _DROPPED
                    r_finish[rid] = t
                    paused[s] = -1
            pending_launch_reset()

    def pending_launch_reset() -> None:
        nonlocal pending_launch
        pending_launch = 0

    def start_step() -> None:
        nonlocal pending_launch
        in_flight = sum(1 for s in range(n_slots) if slot_rid[s] >= 0 or paused[s] >= 0)
        need = n_launch - in_flight - len(buffer) - pending_launch
        free = sorted(idle)
        idle.clear()
        for s in free:
            if need <= 0:
                idle.append(s)
                continue
            need -= 1
            launch(s)
        pending_launch += max(need, 0)

    def publish_partial() -> None:
        nonlocal seq, admitted, running
        for s in range(n_slots):
            rid = slot_rid[s]
            if rid >= 0:
                k = tokens_done(rid)
                if partial == "restart":
                    r_wasted[rid] += k
                    r_status[rid] = _ABORTED
                    r_finish[rid] = t
                    r_gen[rid] += 1
                    stop_generating(s)
                    if admission:
                        admitted -= 1
                        running -= 1
                    free_slot(s)
                    continue
                new_segment(rid, k, version)
                if partial == "recompute":
                    cost = pre + k * rp
                    r_recomp[rid] += k
                    r_decv[rid] = v_clock
                    r_decpre[rid] = cost
                    r_deck[rid] = k
                    g = r_gen[rid] + 1
                    r_gen[rid] = g
                    push(gheap, (v_clock + cost + (r_len[rid] - k) * tt, 0, seq, _COMPLETE, rid, g))
                    seq += 1
            rid = paused[s]
            if rid >= 0:
                k = r_deck[rid]
                if partial == "restart":
                    r_wasted[rid] += k
                    r_status[rid] = _ABORTED
                    r_finish[rid] = t
                    paused[s] = -1
                    if admission:
                        admitted -= 1
                        running -= 1
                    continue
                new_segment(rid, k, version)
                if partial == "recompute":
                    r_recomp[rid] += k
                    remaining[s] += k * rp

    # ---- start: every slot launches (async), or the first step starts
    if preempt:
        assert prng is not None
        for s in range(n_slots):
            push(heap, (float(prng.exponential(1.0 / cfg.preempt_rate)), 0, seq, _PREEMPT, s, 0))
            seq += 1
    if continuous:
        for s in range(n_slots):
            launch(s)
    else:
        idle.extend(range(n_slots))
        if admission:
            admit()
        else:
            start_step()

    report_every = 1 << 14
    while True:
        if slow is None:
            if not heap:
                raise _Stuck
            ev = pop(heap)
            t = v_clock = ev[0]
        else:
            tr = heap[0][0] if heap else math.inf
            tg = t + (gheap[0][0] - v_clock) * slow[busy] if gheap else math.inf
            if tg == math.inf and tr == math.inf:
                raise _Stuck
            if tg <= tr:
                ev = pop(gheap)
                v_clock = ev[0]
                t = tg
            else:
                ev = pop(heap)
                v_clock += (ev[0] - t) / slow[busy]
                t = ev[0]
        kind = ev[3]
        if kind == _COMPLETE:
            rid = ev[4]
            if ev[5] != r_gen[rid]:
                continue
            s = r_slot[rid]
            r_finish[rid] = t
            r_status[rid] = _PENDING
            stop_generating(s)
            buffer.append(rid)
            completed += 1
            if admission:
                running -= 1
            if progress is not None and completed % report_every == 0:
                progress(report_every)
            free_slot(s)
            try_train()
        elif kind == _PUBLISH:
            jj = ev[4]
            publish_times[jj] = t
            version = jj + 1
            training = False
            if version == steps:
                break
            if partial != "none":
                publish_partial()
            if step_mode:
                start_step()
            elif admission:
                admit()
            try_train()
        elif kind == _PREEMPT:
            assert prng is not None
            s = ev[4]
            down[s] = True
            rid = slot_rid[s]
            if rid >= 0:
                k = tokens_done(rid)
                remaining[s] = (r_len[rid] - k) * tt
                r_deck[rid] = k
                r_gen[rid] += 1
                stop_generating(s)
                paused[s] = rid
            elif s in idle:
                idle.remove(s)
            push(heap, (t + cfg.preempt_duration, 0, seq, _RESUME, s, 0))
            seq += 1
        else:  # _RESUME
            assert prng is not None
            s = ev[4]
            down[s] = False
            push(
                heap, (t + float(prng.exponential(1.0 / cfg.preempt_rate)), 0, seq, _PREEMPT, s, 0)
            )
            seq += 1
            rid = paused[s]
            if rid >= 0:
                paused[s] = -1
                k = r_deck[rid]
                if cfg.persist_kv:
                    cost = cfg.kv_restore_time
                else:
                    cost = pre + k * rp
                    r_recomp[rid] += k
                r_decv[rid] = v_clock
                r_decpre[rid] = cost
                g = r_gen[rid] + 1
                r_gen[rid] = g
                slot_rid[s] = rid
                busy += 1
                busy_since[s] = t
                push(gheap, (v_clock + cost + remaining[s], 0, seq, _COMPLETE, rid, g))
                seq += 1
            else:
                free_slot(s)

    # close the books at the end
    for s in range(n_slots):
        if slot_rid[s] >= 0:
            gen_busy += t - busy_since[s]
    if progress is not None:
        progress(completed % report_every)
    n = len(r_slot)
    if extra_segs:
        counts = np.ones(n, dtype=np.int64)
        for rid, segs in extra_segs.items():
            counts[rid] += len(segs)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        tok = np.zeros(int(offsets[-1]), dtype=np.float64)
        ver = np.empty(int(offsets[-1]), dtype=np.int32)
        ver[offsets[:-1]] = np.frombuffer(r_vmin, dtype=np.int32)
        for rid, segs in extra_segs.items():
            o = int(offsets[rid]) + 1
            for i, (kk, vv) in enumerate(segs):
                tok[o + i] = kk
                ver[o + i] = vv
        segments: Any = (offsets, tok, ver)
    else:
        segments = None

    def col(a: array[Any], dt: Any) -> NDArray[Any]:
        return np.frombuffer(a, dtype=dt) if len(a) else np.zeros(0, dtype=dt)

    return RawTrace(
        slot=col(r_slot, np.int32),
        column=col(r_idx, np.int32),
        launch_time=col(r_launch, np.float64),
        finish_time=col(r_finish, np.float64),
        length=col(r_len, np.float64),
        launch_version=col(r_vl, np.int32),
        min_version=col(r_vmin, np.int32),
        step=col(r_step, np.int32),
        staleness=col(r_stale, np.int32),
        status=col(r_status, np.int8),
        rank=col(r_rank, np.int64),
        wasted_tokens=col(r_wasted, np.float64),
        recomputed_tokens=col(r_recomp, np.float64),
        segments=segments,
        publish_times=np.asarray(publish_times, dtype=np.float64),
        end_time=t,
        generator_busy=gen_busy,
        trainer_busy=trainer_busy,
    )


def run_async_fast(
    cfg: SimConfig,
    supply: LengthSupply,
    trainer_times: NDArray[np.float64],
    *,
    progress: Callable[[int], None] | None = None,
) -> RawTrace:
    """The event engine's loop for ``async`` without partial rollouts, preemption or slowdown.

    Same event order and semantics as :func:`run_events` (trainer time and dropping over the bound
    included), but it records only three numbers per completion (slot, time, current version): in
    this mode each completion relaunches its slot at once, so launch times, rollout ids and indices
    follow from those. The agreement tests run both loops.
    """
    n_slots, b, steps = cfg.slots, cfg.batch, cfg.steps
    target = steps * b
    tt, pre = cfg.token_time, cfg.prefill_time
    plain = tt == 1.0 and pre == 0.0  # l * 1.0 + 0.0 == l exactly

    def durations(m: NDArray[np.float64]) -> list[array[float]]:
        # one compact array per slot (8 bytes a length, not a Python float object each)
        d = np.ascontiguousarray(m if plain else m * tt + pre, dtype=np.float64)
        return [array("d", row.tobytes()) for row in d]

    drows = durations(supply.matrix)
    k_cols = len(drows[0])
    drop_over = cfg.over_bound == "drop"
    eta = cfg.eta if cfg.eta is not None else 0
    taus = trainer_times.tolist()

    # rollout ids: 0..N-1 are the initial launches (slot = id); completion c launches id N + c
    c_slot = array("i")
    c_time = array("d")
    c_ver = array("i")
    k_rid = array("q")  # consumption records (drop mode only)
    k_step = array("i")
    k_keep = array("b")
    nxt = [1] * n_slots
    # heap entries (time, key, slot): a completion's key is its rollout id (ids grow in launch
    # order, so ties at one instant resolve in launch order, as in SimPy); a publication's key is
    # PUB + step, after every completion at the same instant (the tie rule)
    pub = 1 << 62
    heap = [(drows[s][0], s, s) for s in range(n_slots)]
    heapq.heapify(heap)
    push = heapq.heappush
    pop = heapq.heappop
    slot_append = c_slot.append
    time_append = c_time.append
    ver_append = c_ver.append
    version = 0
    j = 0
    next_batch_at = b  # completions needed for batch j (no-drop mode)
    training = False
    n_comp = 0
    n_batch = 0  # samples accepted into the batch being filled (drop mode)
    buffer: deque[int] = deque()
    publish_times = [0.0] * steps
    report_every = 1 << 14
    t = 0.0
    while True:
        t, x, s = pop(heap)
        if x < pub:
            slot_append(s)
            time_append(t)
            ver_append(version)
            k = nxt[s]
            if k >= k_cols:
                supply.extend(slot=s, needed=k + 1)
                drows = durations(supply.matrix)
                k_cols = len(drows[0])
            nxt[s] = k + 1
            push(heap, (t + drows[s][k], n_slots + n_comp, s))
            n_comp += 1
            if progress is not None and n_comp % report_every == 0:
                progress(report_every)
            if not drop_over:
                if n_comp >= next_batch_at and not training and j < steps:
                    training = True
                    push(heap, (t + taus[j], pub + j, -1))
                    j += 1
                    next_batch_at += b
                continue
            buffer.append(x)
            if training or j >= steps:
                continue
        else:
            jj = x - pub
            publish_times[jj] = t
            version = jj + 1
            training = False
            if version == steps:
                break
            if not drop_over:
                if n_comp >= next_batch_at:
                    training = True
                    push(heap, (t + taus[j], pub + j, -1))
                    j += 1
                    next_batch_at += b
                continue
        # drop mode: the trainer pulls from the buffer
        while buffer:
            rid = buffer.popleft()
            k_rid.append(rid)
            k_step.append(j)
            if j - (c_ver[rid - n_slots] if rid >= n_slots else 0) > eta:
                k_keep.append(0)
                continue
            k_keep.append(1)
            n_batch += 1
            if n_batch == b:
                n_batch = 0
                training = True
                push(heap, (t + taus[j], pub + j, -1))
                j += 1
                break
    if progress is not None:
        progress(n_comp % report_every)
    # --- rebuild the per-rollout columns (rollout id order)
    cs = np.frombuffer(c_slot, dtype=np.int32) if n_comp else np.zeros(0, np.int32)
    ct = np.frombuffer(c_time, dtype=np.float64) if n_comp else np.zeros(0)
    cv = np.frombuffer(c_ver, dtype=np.int32) if n_comp else np.zeros(0, np.int32)
    n = n_slots + n_comp
    slot = np.concatenate([np.arange(n_slots, dtype=np.int32), cs])
    launch = np.concatenate([np.zeros(n_slots), ct])
    version_a = np.concatenate([np.zeros(n_slots, dtype=np.int32), cv])
    # completion c finished the slot's previous launch: its k-th completion finished rollout
    # (slot, k), launched by the slot's (k-1)-th completion (or initially)
    by_slot = np.argsort(cs, kind="stable")
    first = np.ones(n_comp, dtype=bool)
    first[1:] = cs[by_slot][1:] != cs[by_slot][:-1]
    prev_c = np.empty(n_comp, dtype=np.int64)
    prev_c[by_slot[1:]] = by_slot[:-1]
    done_rid = np.where(first[np.argsort(by_slot)], cs.astype(np.int64), n_slots + prev_c)
    index = np.zeros(n, dtype=np.int32)
    within = np.arange(n_comp) - np.maximum.accumulate(np.where(first, np.arange(n_comp), 0))
    index[n_slots + by_slot] = within + 1
    finish = np.full(n, np.nan)
    finish[done_rid] = ct
    status = np.full(n, _UNFINISHED, dtype=np.int8)
    status[done_rid] = _PENDING
    rank = np.full(n, -1, dtype=np.int64)
    step = np.full(n, -1, dtype=np.int32)
    if not drop_over:
        tr = done_rid[:target]
        rank[tr] = np.arange(tr.size)
        step[tr] = np.arange(tr.size) // b
        status[tr] = _TRAINED
    else:
        krid = np.frombuffer(k_rid, dtype=np.int64) if len(k_rid) else np.zeros(0, np.int64)
        kstep = np.frombuffer(k_step, dtype=np.int32) if len(k_step) else np.zeros(0, np.int32)
        keep = (np.frombuffer(k_keep, dtype=np.int8) if len(k_keep) else np.zeros(0, np.int8)) > 0
        step[krid] = kstep
        status[krid[~keep]] = _DROPPED
        tr = krid[keep]
        status[tr] = _TRAINED
        rank[tr] = np.arange(tr.size)
    stale = np.where(step >= 0, step - version_a, -1).astype(np.int32)
    busy = float(np.sum(np.where(np.isnan(finish), t, finish) - launch))
    return RawTrace(
        slot=slot,
        column=index,
        launch_time=launch,
        finish_time=finish,
        length=supply.matrix[slot, index],
        launch_version=version_a,
        min_version=version_a,
        step=step,
        staleness=stale,
        status=status,
        rank=rank,
        wasted_tokens=None,
        recomputed_tokens=None,
        segments=None,
        publish_times=np.asarray(publish_times, dtype=np.float64),
        end_time=t,
        generator_busy=busy,
        trainer_busy=float(np.sum(trainer_times)),
    )
