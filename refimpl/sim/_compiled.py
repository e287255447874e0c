"""The compiled engine: the event engine's loop over arrays, compiled with numba (``refimpl[fast]``).

It is :func:`refimpl.sim._event.run_events` transcribed line for line onto preallocated arrays: one
binary heap of plain numbers (time, ``(priority, sequence)`` key, kind, rollout, generation) instead
of tuples, the rollout columns as array rows instead of ``array.append``, the slot state in
per-slot arrays, and the counters in one small integer array that the helper functions share. So it
processes the same events in the same order, draws the same preemptions and does the same float
operations in the same order: its trace is the reference engine's, bit for bit
(``tests/test_sim_agreement.py`` checks this with Hypothesis over every mode, ties included).

What Python must do (drawing more lengths, more preemption delays, more room for rollouts, heap
entries or version segments, reporting progress every 1/64 of the run) the kernel cannot; it stops
and says what it needs, and
:func:`run_compiled` provides it and runs again from the start. Every draw comes from the same
generators in the same order, so a rerun sees the same numbers as a run that had them from the start
(a longer prefix of the same streams) and the result does not depend on how often it reran.

Without numba the module imports; :data:`AVAILABLE` is ``False`` and ``refimpl.sim.simulate`` uses
the reference engine, whose results are the same.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from refimpl.sim import _aot, _compiled_heap
from refimpl.sim._aot import Kernel
from refimpl.sim._compiled_cache import AVAILABLE as _AVAILABLE
from refimpl.sim._compiled_cache import cached_on_disk as cached_on_disk
from refimpl.sim._compiled_cache import njit
from refimpl.sim._compiled_heap import _hpop as _hpop
from refimpl.sim._compiled_heap import _hpush as _hpush
from refimpl.sim._compiled_layout import (
    _ABORTED,
    _ADMITTED,
    _BUF_HEAD,
    _BUF_TAIL,
    _BUSY,
    _COLUMNS_PER_EVENT,
    _COMPLETE,
    _COMPLETED,
    _DROPPED,
    _ERR,
    _ERR_A,
    _ERR_B,
    _EXP_USED,
    _F_KVRESTORE,
    _F_PDUR,
    _F_PRE,
    _F_PSCALE,
    _F_RP,
    _F_TT,
    _GEN_BUSY,
    _HEAP_PER_EVENT,
    _IDLE_HEAD,
    _IDLE_LEN,
    _J,
    _KCOLS,
    _MAXCOL,
    _NBATCH,
    _NEED_EXPS,
    _NEED_HEAP,
    _NEED_LENGTHS,
    _NEED_ROOM,
    _NEED_ROWS,
    _NEED_SEGMENTS,
    _NR,
    _NSEG,
    _OK,
    _P_ADMISSION,
    _P_BATCH,
    _P_CONTINUOUS,
    _P_DROP_LEFTOVERS,
    _P_DROP_OVER,
    _P_ETA,
    _P_FIXED_LENGTHS,
    _P_LAUNCH,
    _P_PARTIAL,
    _P_PERSIST_KV,
    _P_PREEMPT,
    _P_SLOTS,
    _P_SLOW,
    _P_STEP_MODE,
    _P_STEPS,
    _PAUSE_AT,
    _PENDING,
    _PENDING_LAUNCH,
    _PREEMPT,
    _PUBLISH,
    _R_BUF,
    _R_GEN,
    _R_IDX,
    _R_RANK,
    _R_SLOT,
    _R_STEP,
    _R_VL,
    _R_VMIN,
    _RANK,
    _RESUME,
    _ROWS_PER_EVENT,
    _RUNNING,
    _S_BUSY_SINCE,
    _S_DECK,
    _S_DECPRE,
    _S_DECV,
    _S_LASTSEG,
    _S_NXT,
    _S_PAUSED,
    _S_REMAINING,
    _S_RID,
    _SEGMENTS_PER_EVENT,
    _SEQ,
    _STARTED,
    _STUCK,
    _T,
    _TRAINED,
    _TRAINER_BUSY,
    _TRAINING,
    _UNFINISHED,
    _VCLOCK,
    _VERSION,
)
from refimpl.sim._compiled_run import run_kernel
from refimpl.sim._config import SimConfig
from refimpl.sim._lengths import LengthSupply
from refimpl.sim._trace import RawTrace
from refimpl.staleness import _admission_capacity

AVAILABLE = _AVAILABLE  # numba installed (imported only when a kernel is compiled or loaded)

__all__ = ["AVAILABLE", "COMPILE_ROLLOUTS", "run_compiled", "worth_compiling"]


def _push(
    ht: Any,
    hk: Any,
    hp: Any,
    hn: Any,
    S: Any,
    w: int,
    t: float,
    prio: int,
    kind: int,
    ref: int,
    gen: int,
) -> None:
    """Schedule an event: key ``(prio, sequence)`` as Python's tuples order them; payload
    ``ref · 2^34 + gen · 4 + kind`` (a rollout id or step below 2^29, a generation below 2^32)."""
    seq = S[_SEQ]
    S[_SEQ] = seq + 1
    if not _hpush(ht, hk, hp, w, hn, t, (prio << 62) | seq, (ref << 34) | (gen << 2) | kind):
        S[_ERR] = _NEED_HEAP


def _launch(
    s: int, P: Any, PF: Any, S: Any, SF: Any, lengths: Any, R: Any, RF: Any, status: Any, SL: Any,
    SLF: Any, ht: Any, hk: Any, hp: Any, hn: Any,
) -> None:  # fmt: skip
    if S[_ERR] != _OK:
        return
    k = SL[_S_NXT, s]
    if k >= S[_KCOLS]:
        S[_ERR] = _NEED_LENGTHS
        S[_ERR_A] = s
        S[_ERR_B] = k + 1
        return
    rid = S[_NR]
    if rid >= status.shape[0]:
        S[_ERR] = _NEED_ROWS
        return
    SL[_S_NXT, s] = k + 1
    if k + 1 > S[_MAXCOL]:
        S[_MAXCOL] = k + 1
    length = lengths[s, k]
    S[_NR] = rid + 1
    t = SF[_T]
    version = S[_VERSION]
    R[_R_SLOT, rid] = s
    R[_R_IDX, rid] = k
    R[_R_VL, rid] = version
    R[_R_VMIN, rid] = version
    R[_R_STEP, rid] = -1
    R[_R_RANK, rid] = -1
    R[_R_GEN, rid] = 0
    RF[0, rid] = t
    RF[1, rid] = math.nan
    status[rid] = _UNFINISHED
    pre = PF[_F_PRE]
    SLF[_S_DECV, s] = SF[_VCLOCK]
    SLF[_S_DECPRE, s] = pre
    SLF[_S_DECK, s] = 0.0
    SL[_S_LASTSEG, s] = -1
    SL[_S_RID, s] = rid
    S[_BUSY] += 1
    SLF[_S_BUSY_SINCE, s] = t
    done = SF[_VCLOCK] + (length * PF[_F_TT] + pre)
    _push(ht, hk, hp, hn, S, P[_P_SLOW], done, 0, _COMPLETE, rid, 0)


def _tokens_done(s: int, length: float, PF: Any, SF: Any, SLF: Any) -> float:
    lo = SLF[_S_DECK, s]
    x = lo + ((SF[_VCLOCK] - SLF[_S_DECV, s]) - SLF[_S_DECPRE, s]) / PF[_F_TT]
    return lo if x < lo else (length if x > length else x)


def _stop_generating(s: int, S: Any, SF: Any, SL: Any, SLF: Any) -> None:
    SL[_S_RID, s] = -1
    S[_BUSY] -= 1
    SF[_GEN_BUSY] += SF[_T] - SLF[_S_BUSY_SINCE, s]


def _new_segment(
    rid: int, s: int, k: float, ver: int, S: Any, R: Any, SL: Any, seg_r: Any, seg_k: Any,
    seg_v: Any,
) -> None:  # fmt: skip
    last = SL[_S_LASTSEG, s]
    last_start = seg_k[last] if last >= 0 else 0.0
    if k <= last_start:  # no token under the current segment yet: it changes version
        if last >= 0:
            seg_v[last] = ver
        else:
            R[_R_VMIN, rid] = ver
        return
    n = S[_NSEG]
    if n >= seg_r.shape[0]:
        S[_ERR] = _NEED_SEGMENTS
        return
    seg_r[n] = rid
    seg_k[n] = k
    seg_v[n] = ver
    SL[_S_LASTSEG, s] = n
    S[_NSEG] = n + 1


def _idle_append(s: int, S: Any, idle: Any) -> None:
    n = idle.shape[0] // 2  # the ring is the first half; _start_step sorts in the second
    idle[(S[_IDLE_HEAD] + S[_IDLE_LEN]) % n] = s
    S[_IDLE_LEN] += 1


def _idle_popleft(S: Any, idle: Any) -> int:
    h = S[_IDLE_HEAD]
    s = idle[h]
    S[_IDLE_HEAD] = (h + 1) % (idle.shape[0] // 2)
    S[_IDLE_LEN] -= 1
    return int(s)


def _admit(
    P: Any, PF: Any, S: Any, SF: Any, lengths: Any, R: Any, RF: Any, status: Any, SL: Any,
    SLF: Any, ht: Any, hk: Any, hp: Any, hn: Any, idle: Any,
) -> None:  # fmt: skip
    cap = _admission_capacity(
        P[_P_ETA], S[_VERSION], P[_P_BATCH], S[_ADMITTED] - S[_RUNNING], S[_RUNNING], P[_P_SLOTS]
    )
    while cap > 0 and S[_IDLE_LEN] > 0:
        s = _idle_popleft(S, idle)
        S[_ADMITTED] += 1
        S[_RUNNING] += 1
        cap -= 1
        _launch(s, P, PF, S, SF, lengths, R, RF, status, SL, SLF, ht, hk, hp, hn)


def _free_slot(
    s: int, P: Any, PF: Any, S: Any, SF: Any, lengths: Any, R: Any, RF: Any, status: Any,
    SL: Any, SLF: Any, ht: Any, hk: Any, hp: Any, hn: Any, idle: Any,
) -> None:  # fmt: skip
    """A slot with nothing to do: apply the launch policy."""
    if P[_P_CONTINUOUS]:
        _launch(s, P, PF, S, SF, lengths, R, RF, status, SL, SLF, ht, hk, hp, hn)
    elif P[_P_STEP_MODE] and S[_PENDING_LAUNCH] > 0:
        S[_PENDING_LAUNCH] -= 1
        _launch(s, P, PF, S, SF, lengths, R, RF, status, SL, SLF, ht, hk, hp, hn)
    else:
        _idle_append(s, S, idle)
        if P[_P_ADMISSION]:
            _admit(P, PF, S, SF, lengths, R, RF, status, SL, SLF, ht, hk, hp, hn, idle)


def _try_train(
    P: Any, PF: Any, S: Any, SF: Any, lengths: Any, R: Any, RF: Any, W: Any, status: Any,
    SL: Any, SLF: Any, ht: Any, hk: Any, hp: Any, hn: Any, idle: Any, batch: Any, taus: Any,
) -> None:  # fmt: skip
    steps, b = P[_P_STEPS], P[_P_BATCH]
    if S[_TRAINING] or S[_J] >= steps:
        return
    j = S[_J]
    eta = P[_P_ETA]
    while S[_BUF_TAIL] > S[_BUF_HEAD] and S[_NBATCH] < b:
        rid = R[_R_BUF, S[_BUF_HEAD]]
        S[_BUF_HEAD] += 1
        s_ = j - R[_R_VMIN, rid]
        if P[_P_DROP_OVER] and s_ > eta:
            status[rid] = _DROPPED
            R[_R_STEP, rid] = j
            if P[_P_ADMISSION]:
                S[_ADMITTED] -= 1
            continue
        batch[S[_NBATCH]] = rid
        S[_NBATCH] += 1
    if S[_NBATCH] < b:
        return
    for i in range(b):
        rid = batch[i]
        status[rid] = _TRAINED
        R[_R_STEP, rid] = j
        R[_R_RANK, rid] = S[_RANK]
        S[_RANK] += 1
    S[_NBATCH] = 0
    tau = taus[j]
    SF[_TRAINER_BUSY] += tau
    S[_TRAINING] = 1
    _push(ht, hk, hp, hn, S, 0, SF[_T] + tau, 1, _PUBLISH, j, 0)
    S[_J] = j + 1
    if P[_P_DROP_LEFTOVERS]:
        t = SF[_T]
        for s in range(P[_P_SLOTS]):
            rid = SL[_S_RID, s]
            if rid >= 0:
                W[0, rid] = _tokens_done(s, lengths[s, R[_R_IDX, rid]], PF, SF, SLF)
                status[rid] = _DROPPED
                RF[1, rid] = t
                R[_R_GEN, rid] += 1
                _stop_generating(s, S, SF, SL, SLF)
                _idle_append(s, S, idle)
            rid = SL[_S_PAUSED, s]
            if rid >= 0:
                W[0, rid] = SLF[_S_DECK, s]
                status[rid] = _DROPPED
                RF[1, rid] = t
                SL[_S_PAUSED, s] = -1
        S[_PENDING_LAUNCH] = 0


def _start_step(
    P: Any, PF: Any, S: Any, SF: Any, lengths: Any, R: Any, RF: Any, status: Any, SL: Any,
    SLF: Any, ht: Any, hk: Any, hp: Any, hn: Any, idle: Any,
) -> None:  # fmt: skip
    n_slots = P[_P_SLOTS]
    in_flight = 0
    for s in range(n_slots):
        if SL[_S_RID, s] >= 0 or SL[_S_PAUSED, s] >= 0:
            in_flight += 1
    need = P[_P_LAUNCH] - in_flight - (S[_BUF_TAIL] - S[_BUF_HEAD]) - S[_PENDING_LAUNCH]
    n_idle = S[_IDLE_LEN]
    mark = idle[n_slots:]  # the scratch half: which slots are idle, to visit them in slot order
    mark[:] = 0
    for _ in range(n_idle):
        mark[_idle_popleft(S, idle)] = 1
    S[_IDLE_HEAD] = 0
    for s in range(n_slots):
        if mark[s] == 0:
            continue
        if need <= 0:
            _idle_append(s, S, idle)
            continue
        need -= 1
        _launch(s, P, PF, S, SF, lengths, R, RF, status, SL, SLF, ht, hk, hp, hn)
    if need > 0:
        S[_PENDING_LAUNCH] += need


def _publish_partial(
    P: Any, PF: Any, S: Any, SF: Any, lengths: Any, R: Any, RF: Any, W: Any, status: Any,
    SL: Any, SLF: Any, ht: Any, hk: Any, hp: Any, hn: Any, idle: Any, seg_r: Any, seg_k: Any, seg_v: Any,
) -> None:  # fmt: skip
    partial = P[_P_PARTIAL]
    admission = P[_P_ADMISSION]
    pre, rp, tt = PF[_F_PRE], PF[_F_RP], PF[_F_TT]
    t = SF[_T]
    version = S[_VERSION]
    for s in range(P[_P_SLOTS]):
        rid = SL[_S_RID, s]
        if rid >= 0:
            length = lengths[s, R[_R_IDX, rid]]
            k = _tokens_done(s, length, PF, SF, SLF)
            if partial == 1:  # restart
                W[0, rid] += k
                status[rid] = _ABORTED
                RF[1, rid] = t
                R[_R_GEN, rid] += 1
                _stop_generating(s, S, SF, SL, SLF)
                if admission:
                    S[_ADMITTED] -= 1
                    S[_RUNNING] -= 1
                _free_slot(s, P, PF, S, SF, lengths, R, RF, status, SL, SLF, ht, hk, hp, hn, idle)
                continue
            _new_segment(rid, s, k, version, S, R, SL, seg_r, seg_k, seg_v)
            if partial == 2:  # recompute
                cost = pre + k * rp
                W[1, rid] += k
                vc = SF[_VCLOCK]
                SLF[_S_DECV, s] = vc
                SLF[_S_DECPRE, s] = cost
                SLF[_S_DECK, s] = k
                g = R[_R_GEN, rid] + 1
                R[_R_GEN, rid] = g
                done = vc + cost + (length - k) * tt
                _push(ht, hk, hp, hn, S, P[_P_SLOW], done, 0, _COMPLETE, rid, g)
        rid = SL[_S_PAUSED, s]
        if rid >= 0:
            k = SLF[_S_DECK, s]
            if partial == 1:
                W[0, rid] += k
                status[rid] = _ABORTED
                RF[1, rid] = t
                SL[_S_PAUSED, s] = -1
                if admission:
                    S[_ADMITTED] -= 1
                    S[_RUNNING] -= 1
                continue
            _new_segment(rid, s, k, version, S, R, SL, seg_r, seg_k, seg_v)
            if partial == 2:
                W[1, rid] += k
                SLF[_S_REMAINING, s] += k * rp


def _start(
    P: Any, PF: Any, lengths: Any, exps: Any, S: Any, SF: Any, R: Any, RF: Any, status: Any,
    ht: Any, hk: Any, hp: Any, hn: Any, SL: Any, SLF: Any, idle: Any,
) -> None:  # fmt: skip
    """The first events: every slot's first preemption, then every slot launches (async) or the
    first step starts."""
    n_slots = P[_P_SLOTS]
    if P[_P_PREEMPT]:
        for s in range(n_slots):
            e = S[_EXP_USED]
            S[_EXP_USED] = e + 1
            _push(ht, hk, hp, hn, S, 0, PF[_F_PSCALE] * exps[e], 0, _PREEMPT, s, 0)
    if P[_P_CONTINUOUS]:
        for s in range(n_slots):
            _launch(s, P, PF, S, SF, lengths, R, RF, status, SL, SLF, ht, hk, hp, hn)
    else:
        for s in range(n_slots):
            _idle_append(s, S, idle)
        if P[_P_ADMISSION]:
            _admit(P, PF, S, SF, lengths, R, RF, status, SL, SLF, ht, hk, hp, hn, idle)
        else:
            _start_step(P, PF, S, SF, lengths, R, RF, status, SL, SLF, ht, hk, hp, hn, idle)


def _out_of_room(
    P: Any, exps: Any, S: Any, status: Any, ht: Any, hn: Any, seg_r: Any, check_columns: bool
) -> bool:
    """Whether the next event might not fit (rows, heap entries, segments, preemption delays,
    length columns), or a chunk of the run is done and Python reports progress."""
    n_slots = P[_P_SLOTS]
    return bool(  # every operand a boolean (numba types the expression as one)
        status.shape[0] - S[_NR] < _ROWS_PER_EVENT * n_slots + 1
        or ht.shape[1] - max(hn[0], hn[1]) < _HEAP_PER_EVENT * n_slots + 4
        or (P[_P_PARTIAL] != 0 and seg_r.shape[0] - S[_NSEG] < _SEGMENTS_PER_EVENT * n_slots)
        or (P[_P_PREEMPT] != 0 and S[_EXP_USED] >= exps.shape[0])
        or (check_columns and S[_KCOLS] - S[_MAXCOL] < _COLUMNS_PER_EVENT)
        or S[_COMPLETED] >= S[_PAUSE_AT]  # a chunk done: Python reports progress
    )


def _next_event(
    P: Any, slow: Any, S: Any, SF: Any, ht: Any, hk: Any, hp: Any, hn: Any, ev: Any
) -> bool:
    """Pop the next event into ``ev`` and advance the real and virtual clocks to it; ``False``
    when no event is left (the run is stuck)."""
    t = SF[_T]
    if P[_P_SLOW] != 1:
        if hn[0] == 0:
            return False
        t = _hpop(ht, hk, hp, 0, hn, ev)
        SF[_T] = t
        SF[_VCLOCK] = t
        return True
    tr = ht[0, 0] if hn[0] > 0 else math.inf
    tg = t + (ht[1, 0] - SF[_VCLOCK]) * slow[S[_BUSY]] if hn[1] > 0 else math.inf
    if tg == math.inf and tr == math.inf:
        return False
    if tg <= tr:
        SF[_VCLOCK] = _hpop(ht, hk, hp, 1, hn, ev)
        SF[_T] = tg
    else:
        te = _hpop(ht, hk, hp, 0, hn, ev)
        SF[_VCLOCK] += (te - t) / slow[S[_BUSY]]
        SF[_T] = te
    return True


def _on_complete(
    rid: int, gen: int, P: Any, PF: Any, S: Any, SF: Any, lengths: Any, R: Any, RF: Any, W: Any,
    status: Any, SL: Any, SLF: Any, ht: Any, hk: Any, hp: Any, hn: Any, idle: Any, batch: Any,
    taus: Any,
) -> None:  # fmt: skip
    """A rollout completes (unless a later phase superseded the event): it joins the buffer, its
    slot is free, and the trainer may take a batch."""
    if gen != R[_R_GEN, rid]:
        return
    s = R[_R_SLOT, rid]
    RF[1, rid] = SF[_T]
    status[rid] = _PENDING
    _stop_generating(s, S, SF, SL, SLF)
    R[_R_BUF, S[_BUF_TAIL]] = rid
    S[_BUF_TAIL] += 1
    S[_COMPLETED] += 1
    if P[_P_ADMISSION]:
        S[_RUNNING] -= 1
    _free_slot(s, P, PF, S, SF, lengths, R, RF, status, SL, SLF, ht, hk, hp, hn, idle)
    _try_train(P, PF, S, SF, lengths, R, RF, W, status, SL, SLF, ht, hk, hp, hn, idle, batch, taus)


def _on_publish(
    jj: int, P: Any, PF: Any, S: Any, SF: Any, lengths: Any, R: Any, RF: Any, W: Any,
    status: Any, SL: Any, SLF: Any, ht: Any, hk: Any, hp: Any, hn: Any, idle: Any, batch: Any,
    taus: Any, seg_r: Any, seg_k: Any, seg_v: Any, publish_times: Any,
) -> bool:  # fmt: skip
    """Step ``jj``'s weights are published; ``True`` when it was the last step. Partial rollouts
    change version, a step mode starts its next step, admission admits, the trainer may train."""
    publish_times[jj] = SF[_T]
    S[_VERSION] = jj + 1
    S[_TRAINING] = 0
    if jj + 1 == P[_P_STEPS]:
        return True
    if P[_P_PARTIAL] != 0:
        _publish_partial(
            P, PF, S, SF, lengths, R, RF, W, status, SL, SLF, ht, hk, hp, hn, idle,
            seg_r, seg_k, seg_v,
        )  # fmt: skip
    if P[_P_STEP_MODE]:
        _start_step(P, PF, S, SF, lengths, R, RF, status, SL, SLF, ht, hk, hp, hn, idle)
    elif P[_P_ADMISSION]:
        _admit(P, PF, S, SF, lengths, R, RF, status, SL, SLF, ht, hk, hp, hn, idle)
    _try_train(P, PF, S, SF, lengths, R, RF, W, status, SL, SLF, ht, hk, hp, hn, idle, batch, taus)
    return False


def _idle_remove(s: int, S: Any, idle: Any) -> None:
    """Remove ``s`` from the idle queue if it is there (first occurrence, order kept)."""
    n_idle = S[_IDLE_LEN]
    h = S[_IDLE_HEAD]
    m = idle.shape[0] // 2
    found = -1
    for i in range(n_idle):
        if idle[(h + i) % m] == s:
            found = i
            break
    if found >= 0:
        for i in range(found, n_idle - 1):
            idle[(h + i) % m] = idle[(h + i + 1) % m]
        S[_IDLE_LEN] = n_idle - 1


def _on_preempt(
    s: int, P: Any, PF: Any, S: Any, SF: Any, lengths: Any, R: Any, SL: Any, SLF: Any, ht: Any,
    hk: Any, hp: Any, hn: Any, idle: Any,
) -> None:  # fmt: skip
    """Slot ``s`` goes down: its rollout pauses with the tokens it has, or an idle slot leaves the
    idle queue; it comes back after the preemption's duration."""
    rid = SL[_S_RID, s]
    if rid >= 0:
        length = lengths[s, R[_R_IDX, rid]]
        k = _tokens_done(s, length, PF, SF, SLF)
        SLF[_S_REMAINING, s] = (length - k) * PF[_F_TT]
        SLF[_S_DECK, s] = k
        R[_R_GEN, rid] += 1
        _stop_generating(s, S, SF, SL, SLF)
        SL[_S_PAUSED, s] = rid
    else:
        _idle_remove(s, S, idle)
    _push(ht, hk, hp, hn, S, 0, SF[_T] + PF[_F_PDUR], 0, _RESUME, s, 0)


def _on_resume(
    s: int, P: Any, PF: Any, exps: Any, S: Any, SF: Any, lengths: Any, R: Any, RF: Any, W: Any,
    status: Any, SL: Any, SLF: Any, ht: Any, hk: Any, hp: Any, hn: Any, idle: Any,
) -> bool:  # fmt: skip
    """Slot ``s`` comes back (its next preemption drawn): its paused rollout resumes after the KV
    restore or a re-prefill, or the slot is free. ``False`` when no preemption delay is left."""
    e = S[_EXP_USED]
    if e >= exps.shape[0]:
        S[_ERR] = _NEED_EXPS
        return False
    S[_EXP_USED] = e + 1
    t = SF[_T]
    _push(ht, hk, hp, hn, S, 0, t + PF[_F_PSCALE] * exps[e], 0, _PREEMPT, s, 0)
    rid = SL[_S_PAUSED, s]
    if rid < 0:
        _free_slot(s, P, PF, S, SF, lengths, R, RF, status, SL, SLF, ht, hk, hp, hn, idle)
        return True
    SL[_S_PAUSED, s] = -1
    k = SLF[_S_DECK, s]
    if P[_P_PERSIST_KV]:
        cost = PF[_F_KVRESTORE]
    else:
        cost = PF[_F_PRE] + k * PF[_F_RP]
        W[1, rid] += k
    vc = SF[_VCLOCK]
    SLF[_S_DECV, s] = vc
    SLF[_S_DECPRE, s] = cost
    g = R[_R_GEN, rid] + 1
    R[_R_GEN, rid] = g
    SL[_S_RID, s] = rid
    S[_BUSY] += 1
    SLF[_S_BUSY_SINCE, s] = t
    done = vc + cost + SLF[_S_REMAINING, s]
    _push(ht, hk, hp, hn, S, P[_P_SLOW], done, 0, _COMPLETE, rid, g)
    return True


def _kernel(
    P: Any, PF: Any, lengths: Any, taus: Any, slow: Any, exps: Any, S: Any, SF: Any, R: Any,
    RF: Any, W: Any, status: Any, ht: Any, hk: Any, hp: Any, seg_r: Any, seg_k: Any, seg_v: Any,
    publish_times: Any, SL: Any, SLF: Any, idle: Any, batch: Any, hn: Any, ev: Any,
) -> None:  # fmt: skip
    """Run (or resume) the event loop until the last publication, or until it needs something
    (``S[_ERR]``); with ``_NEED_ROOM`` it stopped between two events and can be resumed."""
    S[_KCOLS] = lengths.shape[1]
    check_columns = P[_P_FIXED_LENGTHS] == 0
    if S[_STARTED] != 1:
        S[_STARTED] = 1
        _start(P, PF, lengths, exps, S, SF, R, RF, status, ht, hk, hp, hn, SL, SLF, idle)
    while S[_ERR] == _OK:
        if _out_of_room(P, exps, S, status, ht, hn, seg_r, check_columns):
            S[_ERR] = _NEED_ROOM
            return
        if not _next_event(P, slow, S, SF, ht, hk, hp, hn, ev):
            S[_ERR] = _STUCK
            break
        kind = ev[0]
        if kind == _COMPLETE:
            _on_complete(
                ev[1], ev[2], P, PF, S, SF, lengths, R, RF, W, status, SL, SLF, ht, hk, hp, hn,
                idle, batch, taus,
            )  # fmt: skip
        elif kind == _PUBLISH:
            if _on_publish(
                ev[1], P, PF, S, SF, lengths, R, RF, W, status, SL, SLF, ht, hk, hp, hn, idle,
                batch, taus, seg_r, seg_k, seg_v, publish_times,
            ):  # fmt: skip
                break
        elif kind == _PREEMPT:
            _on_preempt(ev[1], P, PF, S, SF, lengths, R, SL, SLF, ht, hk, hp, hn, idle)
        elif not _on_resume(
            ev[1], P, PF, exps, S, SF, lengths, R, RF, W, status, SL, SLF, ht, hk, hp, hn, idle
        ):
            break
    if S[_ERR] == _OK:  # close the books at the end
        t = SF[_T]
        for s in range(P[_P_SLOTS]):
            if SL[_S_RID, s] >= 0:
                SF[_GEN_BUSY] += t - SLF[_S_BUSY_SINCE, s]


def _scatter_rows(src: Any, dest: Any, into: Any) -> None:  # pragma: no cover - compiled
    """``into[dest] = src``, one row at a time: the 11 columns of a restart run at 10^6
    rollouts took 41 ms, against 51 with numpy's fancy assignment."""
    for i in range(src.size):
        into[dest[i]] = src[i]


_scatter_jit: Callable[..., None] | None = None


def _scatter_dispatcher() -> Callable[..., None]:
    """:func:`_scatter_rows` compiled with numba, once per process."""
    global _scatter_jit
    if _scatter_jit is None:
        _scatter_jit = njit(_scatter_rows, error_model="numpy", _nrt=False)
    return _scatter_jit


#: ``into[dest] = src`` by :func:`_scatter_rows`: ahead of time where it can be
#: (:mod:`refimpl.sim._aot`), else on the JIT.
_scatter_kernel = Kernel(
    _scatter_rows, "refimpl.sim._compiled:_scatter_dispatcher", _scatter_dispatcher
)


_HELPERS = (
    "_hpush",
    "_hpop",
    "_push",
    "_launch",
    "_tokens_done",
    "_stop_generating",
    "_new_segment",
    "_idle_append",
    "_idle_popleft",
    "_admit",
    "_free_slot",
    "_try_train",
    "_start_step",
    "_publish_partial",
    "_start",
    "_out_of_room",
    "_next_event",
    "_on_complete",
    "_on_publish",
    "_idle_remove",
    "_on_preempt",
    "_on_resume",
    "_kernel",
)
_INLINE = _HELPERS[:-1]
_compiled: Callable[..., None] | None = None


def _compile() -> Callable[..., None]:
    """Compile the kernel and its helpers once per process; numba's cache keeps them on disk,
    keyed by every file they hold (:mod:`refimpl.sim._compiled_cache`)."""
    global _compiled, _admission_capacity
    if _compiled is None:
        _compiled_heap.jit_siftup()
        g = globals()
        _admission_capacity = njit(_admission_capacity, _nrt=False, inline="always")
        g["_admission_capacity"] = _admission_capacity
        for name in _HELPERS:
            inline = "always" if name in _INLINE else "never"
            g[name] = njit(g[name], error_model="numpy", _nrt=False, inline=inline)
        _compiled = g["_kernel"]
    return _compiled


#: The kernel ahead of time where it can be (:mod:`refimpl.sim._aot`), else :func:`_compile`'s.
_runner = Kernel(_kernel, "refimpl.sim._compiled:_compile", _compile)


#: Rollouts from which ``simulate(engine="auto")`` compiles the kernel when it is not compiled yet.
#: Compiling it takes about 30 s (31 s on two cores, numba 0.68, empty cache); the reference engine
#: runs 0.2 to 1.3 million rollouts a second there (partial recompute 0.22 M/s, 6 December 2026):
#: from 10^7 rollouts a first run compiles for less time than the reference engine would run.
COMPILE_ROLLOUTS = 10_000_000


def kernel_ready(dispatcher: Any) -> bool:
    """Whether running ``dispatcher`` costs no compilation: it is compiled in this process, held
    by numba's cache on disk, or a plain function (numba's JIT switched off, ``NUMBA_DISABLE_JIT=1``).
    """
    signatures = getattr(dispatcher, "signatures", None)
    if signatures is None:
        return True
    return bool(signatures) or cached_on_disk(dispatcher)


def worth_compiling(cfg: SimConfig) -> bool:
    """Whether ``simulate(engine="auto")`` should run this engine rather than the reference one.

    True when numba is installed and either the kernel is ready (built ahead of time, compiled in
    this process, or held by numba's cache on disk, where loading it takes a fraction of a second)
    or the run launches at least :data:`COMPILE_ROLLOUTS` rollouts (then compiling repays itself
    within the run). Both engines give the same trace, so the choice changes how long a run
    takes, never its result; a short run on a fresh installation does not wait half a minute for
    a compiler (``refimpl simulate``, whose entry serves every later call, compiles from fewer).
    """
    if not AVAILABLE:
        return False
    rows = _rows_estimate(cfg)
    if rows >= COMPILE_ROLLOUTS or _runner.ready() or _aot.command_builds(rows):
        return True
    kernel: Any = _compile()  # a numba dispatcher
    return kernel_ready(kernel)


#: Room for heap entries, version segments and preemption delays beyond the first guess.
_INITIAL_ROOM = 1024


def _rows_estimate(cfg: SimConfig) -> int:
    """Rollouts the run is expected to launch (the trace's rows), with a margin."""
    n = cfg.trained_target
    if cfg.mode == "first_k":
        n = cfg.steps * int(cfg.launch or cfg.slots)
    extra = 0
    if cfg.partial == "restart":  # a publication relaunches at most every slot's rollout
        extra = min(cfg.steps * cfg.slots, n)
    return int(n * 1.02) + extra + 2 * cfg.slots + 1024


def run_compiled(
    cfg: SimConfig,
    supply: LengthSupply,
    trainer_times: NDArray[np.float64],
    *,
    progress: Callable[[int], None] | None = None,
) -> RawTrace:
    """Run the compiled engine (``AVAILABLE`` must be true); the trace is in canonical row order.

    The driver around the kernel (sizes, growth, reruns, progress, row order) is
    :func:`refimpl.sim._compiled_run.run_kernel`.
    """
    return run_kernel(
        _runner,
        _scatter_kernel,
        cfg,
        supply,
        trainer_times,
        rows=_rows_estimate(cfg),
        room=_INITIAL_ROOM,
        progress=progress,
    )
