"""Agent rollouts: the compiled engine, the reference event loop over arrays, compiled with numba.

It is :class:`refimpl.sim.agent._engine._Engine` transcribed line for line onto preallocated arrays
(``refimpl[fast]``): the heap of :mod:`refimpl.sim._compiled` (time, ``(priority, sequence)`` key,
payload) instead of tuples (and for the ends of tool calls of one constant delay a ring that
skips the heap, :mod:`refimpl.sim.agent._compiled_fifo`: the same order), the rollout, call and
attempt columns as array rows, each shard's FIFO queue as a linked list through the attempts and
each shard's free containers as a stack linked through the containers (both in the reference's
order), and the router's "visited" set as a stamp per shard. It processes the same events in the same order and does the same float operations in the
same order, so its columns are the reference engine's, bit for bit (``tests/test_sim_agent_engines.py``
checks this with Hypothesis over the agent's parameters, ties included).

The random draws come from the reference's four generators, in its chunks (``rvs(size=512)`` per
law, one exponential per admission when containers crash): Python draws them ahead into buffers and
the kernel consumes them in order. When a buffer or a column is nearly used up, or after a chunk of
trainer steps (to report progress), the kernel stops between two events with its state in the arrays;
:func:`run_agent_compiled` grows what is short and resumes it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from refimpl.sim import _aot, _compiled_heap
from refimpl.sim import _compiled as _sim_compiled
from refimpl.sim._aot import Kernel
from refimpl.sim._compiled_cache import njit
from refimpl.sim.agent._compiled_fifo import _fifo_first, _fifo_pop, _fifo_push
from refimpl.sim.agent._compiled_layout import _A_ADMIT as _A_ADMIT
from refimpl.sim.agent._compiled_layout import _A_ARRIVE as _A_ARRIVE
from refimpl.sim.agent._compiled_layout import (
    _A_BOX,
    _A_NEXT,
    _A_STATE,
    _ABORTED_N,
    _B_ALIVE,
    _B_NEXT,
    _BAD_LENGTH,
    _BAD_TURNS,
    _COMPLETED_N,
    _CRASH_USED,
    _END_TIME,
    _ERR,
    _ERR_A,
    _ERR_B,
    _F_CAP,
    _F_COLD,
    _F_KEEPALIVE,
    _F_REFRESH,
    _F_REPLAY,
    _F_RETRY,
    _F_SVC,
    _F_TIMEOUT,
    _F_TOKEN,
    _F_WARM,
    _HEAP_ROOM,
    _LAST,
    _LAUNCHING,
    _LEN_USED,
    _NA,
    _NBOX,
    _NC,
    _NEED_ROOM,
    _NO_COLUMN,
    _NR,
    _OK,
    _P_ABORT,
    _P_BATCH,
    _P_CONSISTENT,
    _P_CRASH_ON,
    _P_ETA,
    _P_LEN_LAW,
    _P_MAX_ATTEMPTS,
    _P_MAX_REDIRECTS,
    _P_ONE_ATTEMPT,
    _P_REDIRECT,
    _P_REEXECUTE,
    _P_REFRESH_ON,
    _P_SHARDS,
    _P_SLOTS,
    _P_STOP_VERSION,
    _P_SVC_LAW,
    _P_TARGET,
    _P_TIMEOUT_ON,
    _P_TURNS,
    _P_TURNS_LAW,
    _PAUSE,
    _PRIO_SHIFT,
    _R_DONE_SVC,
    _R_ISSUED,
    _ROOM,
    _S_BUSY,
    _S_FREE,
    _S_LAST,
    _S_NQ,
    _S_QHEAD,
    _S_QTAIL,
    _S_VIEW,
    _S_VISITED,
    _SEQ,
    _STALLED,
    _STARTED,
    _SVC_USED,
    _TOO_MANY_ABORTS,
    _TRAINED_N,
    _TURN_USED,
    _VERSION,
)
from refimpl.sim.agent._compiled_layout import _A_CALL as _A_CALL
from refimpl.sim.agent._compiled_layout import _A_COLD as _A_COLD
from refimpl.sim.agent._compiled_layout import _A_DEPART as _A_DEPART
from refimpl.sim.agent._compiled_layout import _A_NUMBER as _A_NUMBER
from refimpl.sim.agent._compiled_layout import _A_OUTCOME as _A_OUTCOME
from refimpl.sim.agent._compiled_layout import _A_RECOVERY as _A_RECOVERY
from refimpl.sim.agent._compiled_layout import _A_REDIRECTS as _A_REDIRECTS
from refimpl.sim.agent._compiled_layout import _A_ROUTE as _A_ROUTE
from refimpl.sim.agent._compiled_layout import _A_SHARD as _A_SHARD
from refimpl.sim.agent._compiled_layout import _C_ATTEMPTS as _C_ATTEMPTS
from refimpl.sim.agent._compiled_layout import _C_END as _C_END
from refimpl.sim.agent._compiled_layout import _C_EXEC as _C_EXEC
from refimpl.sim.agent._compiled_layout import _C_INDEX as _C_INDEX
from refimpl.sim.agent._compiled_layout import _C_ISSUE as _C_ISSUE
from refimpl.sim.agent._compiled_layout import _C_ROLLOUT as _C_ROLLOUT
from refimpl.sim.agent._compiled_layout import _C_SERVICE as _C_SERVICE
from refimpl.sim.agent._compiled_layout import _C_STATUS as _C_STATUS
from refimpl.sim.agent._compiled_layout import _R_CALLS as _R_CALLS
from refimpl.sim.agent._compiled_layout import _R_EXEC as _R_EXEC
from refimpl.sim.agent._compiled_layout import _R_FINISH as _R_FINISH
from refimpl.sim.agent._compiled_layout import _R_K as _R_K
from refimpl.sim.agent._compiled_layout import _R_LAUNCH as _R_LAUNCH
from refimpl.sim.agent._compiled_layout import _R_LEN as _R_LEN
from refimpl.sim.agent._compiled_layout import _R_RANK as _R_RANK
from refimpl.sim.agent._compiled_layout import _R_SLOT as _R_SLOT
from refimpl.sim.agent._compiled_layout import _R_STATUS as _R_STATUS
from refimpl.sim.agent._compiled_layout import _R_STEP as _R_STEP
from refimpl.sim.agent._compiled_layout import _R_TOOL as _R_TOOL
from refimpl.sim.agent._compiled_layout import _R_VERSION as _R_VERSION
from refimpl.sim.agent._compiled_layout import _S_AREA as _S_AREA
from refimpl.sim.agent._compiled_layout import _S_ARRIVALS as _S_ARRIVALS
from refimpl.sim.agent._compiled_layout import _S_BUSY_AREA as _S_BUSY_AREA
from refimpl.sim.agent._compiled_layout import _S_COLD as _S_COLD
from refimpl.sim.agent._compiled_layout import _S_COMPLETED as _S_COMPLETED
from refimpl.sim.agent._compiled_layout import _S_CONTAINERS as _S_CONTAINERS
from refimpl.sim.agent._compiled_layout import _S_CRASHED as _S_CRASHED
from refimpl.sim.agent._compiled_layout import _S_QUEUED as _S_QUEUED
from refimpl.sim.agent._compiled_layout import _S_REDIRECTED as _S_REDIRECTED
from refimpl.sim.agent._compiled_layout import _S_TIMED_OUT as _S_TIMED_OUT
from refimpl.sim.agent._compiled_run import (
    _ONE_VALUES as _ONE_VALUES,
)
from refimpl.sim.agent._compiled_run import (
    _PLACEHOLDER as _PLACEHOLDER,
)
from refimpl.sim.agent._compiled_run import (
    _PLACEHOLDER_CALL as _PLACEHOLDER_CALL,
)
from refimpl.sim.agent._compiled_run import (
    _PLACEHOLDERS_BY_TYPE as _PLACEHOLDERS_BY_TYPE,
)
from refimpl.sim.agent._compiled_run import (
    CompiledRun,
    run_kernel,
)
from refimpl.sim.agent._config import (
    _A_ENDED,
    _A_QUEUED,
    _A_SERVICE,
    _ABORTED,
    _COMPLETED,
    _CRASH,
    _CRASHED,
    _DONE,
    _DROPPED,
    _FAILED,
    _PENDING,
    _PRIO_EVENT,
    _PRIO_PUBLISH,
    _PRIO_REFRESH,
    _PUBLISH,
    _REFRESH,
    _RETRY,
    _SEG_END,
    _TIMED_OUT,
    _TIMEOUT,
    _TRAINED,
    _UNTRAINED,
    MAX_TURNS,
    AgentConfig,
    _is_frozen_law,
)

AVAILABLE = _sim_compiled.AVAILABLE

__all__ = ["AVAILABLE", "COMPILE_ROLLOUTS", "CompiledRun", "run_agent_compiled", "worth_compiling"]

_hpush = _sim_compiled._hpush
_hpop = _sim_compiled._hpop


def _push(
    ht: Any, hk: Any, hp: Any, hn: Any, S: Any, t: float, prio: int, kind: int, ref: int
) -> None:
    """Schedule an event: key ``(prio, sequence)`` as the reference's tuples order them; payload
    ``ref · 2^34 + kind · 4`` (``_hpop`` hands back ``ref`` and ``kind``)."""
    seq = S[_SEQ] + 1
    S[_SEQ] = seq
    # np.int64 first: a ref read from an int32 column, shifted by 34 as a numpy scalar, would be
    # cut to 32 bits (numba widens it anyway; the kernel run as plain Python does not)
    payload: Any = (np.int64(ref) << 34) | (np.int64(kind) << 2)
    _hpush(ht, hk, hp, 0, hn, t, (np.int64(prio) << _PRIO_SHIFT) | seq, payload)


def _segment(r: int, PF: Any, RI: Any, RF: Any) -> float:
    """Duration of each of rollout ``r``'s ``calls + 1`` decode segments (the reference's ``r_seg``,
    recomputed by the same float operations rather than stored)."""
    seg: float = RF[_R_LEN][r] * PF[_F_TOKEN] / (np.int64(RI[_R_CALLS][r]) + 1)  # int16 column
    return seg


def _call_of(a: int, P: Any, AI: Any) -> int:
    """The call of attempt ``a`` (itself when every call takes one attempt: not stored then)."""
    c: int = a if P[_P_ONE_ATTEMPT] else AI[_A_CALL][a]
    return c


# -- the sandbox pool: loads, the router, admission, containers ---------------------------------


def _load(s: int, P: Any, SH: Any) -> int:
    """Shard ``s``'s load in the router's view (queued + busy; a snapshot when ``δ > 0``)."""
    if P[_P_CONSISTENT]:
        return int(SH[_S_NQ, s] + SH[_S_BUSY, s])
    return int(SH[_S_VIEW, s])


def _touch(s: int, t: float, SH: Any, SHF: Any) -> None:
    dt = t - SHF[_S_LAST, s]
    if dt:
        busy = SH[_S_BUSY, s]
        SHF[_S_AREA, s] += (SH[_S_NQ, s] + busy) * dt
        SHF[_S_BUSY_AREA, s] += busy * dt
    SHF[_S_LAST, s] = t


def _admit(
    a: int, s: int, t: float, P: Any, PF: Any, S: Any, SH: Any, SHF: Any, BX: Any, BXF: Any,
    AI: Any, AF: Any, CF: Any, crash: Any, ht: Any, hk: Any, hp: Any, hn: Any,
) -> None:  # fmt: skip
    _touch(s, t, SH, SHF)
    box = SH[_S_FREE, s]
    if box >= 0:
        SH[_S_FREE, s] = BX[_B_NEXT, box]
        cold = BX[_B_ALIVE, box] == 0 or (t - BXF[box] > PF[_F_KEEPALIVE])
    else:
        box = S[_NBOX]
        S[_NBOX] = box + 1
        BXF[box] = t
        cold = True
    BX[_B_ALIVE, box] = 1
    SH[_S_BUSY, s] += 1
    AI[_A_STATE][a] = _A_SERVICE
    AF[_A_ADMIT][a] = t
    AI[_A_COLD][a] = 1 if cold else 0
    if cold:
        SH[_S_COLD, s] += 1
    c = _call_of(a, P, AI)
    recovery = 0.0 if P[_P_ONE_ATTEMPT] else AF[_A_RECOVERY][a]
    occupancy = (PF[_F_COLD] if cold else PF[_F_WARM]) + recovery
    occupancy += CF[_C_SERVICE][c] if P[_P_SVC_LAW] else PF[_F_SVC]
    AI[_A_BOX][a] = box
    if P[_P_CRASH_ON]:
        u = S[_CRASH_USED]
        S[_CRASH_USED] = u + 1
        life = crash[u]
        if life < occupancy:
            _push(ht, hk, hp, hn, S, t + life, _PRIO_EVENT, _CRASH, a)
            return
    if P[_P_ONE_ATTEMPT] and not cold and not P[_P_SVC_LAW]:  # a constant delay: the ring
        _fifo_push(ht, hk, hp, hn, S, t + occupancy, _PRIO_EVENT, _DONE, a)
        return
    _push(ht, hk, hp, hn, S, t + occupancy, _PRIO_EVENT, _DONE, a)


def _arrive(
    a: int, s: int, t: float, P: Any, PF: Any, S: Any, SH: Any, SHF: Any, BX: Any, BXF: Any,
    AI: Any, AF: Any, CF: Any, crash: Any, ht: Any, hk: Any, hp: Any, hn: Any,
) -> None:  # fmt: skip
    """Local admission at shard ``s``: admit, redirect (the reference's recursion, as a loop) or
    queue."""
    cap = PF[_F_CAP]
    while True:
        SH[_S_ARRIVALS, s] += 1
        if SH[_S_BUSY, s] < cap:
            AI[_A_SHARD][a] = s
            AF[_A_ARRIVE][a] = t
            _admit(a, s, t, P, PF, S, SH, SHF, BX, BXF, AI, AF, CF, crash, ht, hk, hp, hn)
            return
        if P[_P_REDIRECT] and AI[_A_REDIRECTS][a] < P[_P_MAX_REDIRECTS]:
            best = -1
            best_load = 0
            for x in range(P[_P_SHARDS]):
                if SH[_S_VISITED, x] == a:
                    continue
                load = _load(x, P, SH)
                if load < cap and (best < 0 or load < best_load):
                    best, best_load = x, load
            if best >= 0:
                SH[_S_REDIRECTED, s] += 1
                AI[_A_REDIRECTS][a] += 1
                SH[_S_VISITED, best] = a
                s = best
                continue
        _touch(s, t, SH, SHF)
        AI[_A_SHARD][a] = s
        AF[_A_ARRIVE][a] = t
        AI[_A_STATE][a] = _A_QUEUED
        SH[_S_NQ, s] += 1
        SH[_S_QUEUED, s] += 1
        AI[_A_NEXT][a] = -1
        tail = SH[_S_QTAIL, s]
        if tail >= 0:
            AI[_A_NEXT][tail] = a
        else:
            SH[_S_QHEAD, s] = a
        SH[_S_QTAIL, s] = a
        return


def _release(
    a: int, s: int, t: float, alive: bool, P: Any, PF: Any, S: Any, SH: Any, SHF: Any, BX: Any,
    BXF: Any, AI: Any, AF: Any, CF: Any, crash: Any, ht: Any, hk: Any, hp: Any, hn: Any,
) -> None:  # fmt: skip
    """Free attempt ``a``'s container on shard ``s`` and admit the next queued attempt."""
    box = AI[_A_BOX][a]
    _touch(s, t, SH, SHF)
    SH[_S_BUSY, s] -= 1
    BX[_B_ALIVE, box] = 1 if alive else 0
    BXF[box] = t
    BX[_B_NEXT, box] = SH[_S_FREE, s]
    SH[_S_FREE, s] = box
    CF[_C_EXEC][_call_of(a, P, AI)] += t - AF[_A_ADMIT][a]
    while SH[_S_QHEAD, s] >= 0:
        nxt = SH[_S_QHEAD, s]
        SH[_S_QHEAD, s] = AI[_A_NEXT][nxt]
        if SH[_S_QHEAD, s] < 0:
            SH[_S_QTAIL, s] = -1
        if AI[_A_STATE][nxt] == _A_QUEUED:
            SH[_S_NQ, s] -= 1
            _admit(nxt, s, t, P, PF, S, SH, SHF, BX, BXF, AI, AF, CF, crash, ht, hk, hp, hn)
            break


# -- rollouts and the trainer -------------------------------------------------------------------


def _launch(
    slot: int, t: float, P: Any, PF: Any, S: Any, slot_k: Any, lengths: Any, turns_buf: Any,
    RI: Any, RF: Any, ht: Any, hk: Any, hp: Any, hn: Any,
) -> None:  # fmt: skip
    k = slot_k[slot]
    slot_k[slot] = k + 1
    if P[_P_LEN_LAW]:
        u = S[_LEN_USED]
        S[_LEN_USED] = u + 1
        length = lengths[0, u]
        if not length > 0.0:
            S[_ERR], S[_ERR_A], S[_ERR_B] = _BAD_LENGTH, slot, k
            return
    else:
        if k >= lengths.shape[1]:
            S[_ERR], S[_ERR_A], S[_ERR_B] = _NO_COLUMN, slot, k
            return
        length = lengths[slot, k]
    if P[_P_TURNS_LAW]:
        u = S[_TURN_USED]
        S[_TURN_USED] = u + 1
        turns = turns_buf[u]
        if turns < 0 or turns > MAX_TURNS:
            S[_ERR], S[_ERR_A] = _BAD_TURNS, turns
            return
    else:
        turns = P[_P_TURNS]
    r = S[_NR]
    S[_NR] = r + 1
    RI[_R_SLOT][r] = slot
    RI[_R_K][r] = k
    RI[_R_CALLS][r] = turns
    RI[_R_ISSUED][r] = 0
    RI[_R_VERSION][r] = S[_VERSION]
    RI[_R_STEP][r] = -1
    RI[_R_RANK][r] = -1
    RI[_R_STATUS][r] = _PENDING
    RF[_R_LAUNCH][r] = t
    RF[_R_FINISH][r] = math.nan
    RF[_R_LEN][r] = length
    RF[_R_TOOL][r] = 0.0
    RF[_R_EXEC][r] = 0.0
    if P[_P_REEXECUTE]:
        RF[_R_DONE_SVC][r] = 0.0
    _push(ht, hk, hp, hn, S, t + _segment(r, PF, RI, RF), _PRIO_EVENT, _SEG_END, r)


def _finish_rollout(
    r: int, t: float, P: Any, PF: Any, S: Any, SF: Any, slot_k: Any, lengths: Any,
    turns_buf: Any, RI: Any, RF: Any, ht: Any, hk: Any, hp: Any, hn: Any,
) -> None:  # fmt: skip
    RF[_R_FINISH][r] = t
    n = S[_COMPLETED_N]
    S[_COMPLETED_N] = n + 1
    RI[_R_RANK][r] = n
    m = S[_TRAINED_N]
    batch = P[_P_BATCH]
    if m < P[_P_TARGET]:
        step = m // batch
        RI[_R_STEP][r] = step
        eta = P[_P_ETA]
        if eta >= 0 and step - RI[_R_VERSION][r] > eta:
            RI[_R_STATUS][r] = _DROPPED
        else:
            S[_TRAINED_N] = m + 1
            RI[_R_STATUS][r] = _TRAINED
            if (m + 1) % batch == 0:
                _push(ht, hk, hp, hn, S, t, _PRIO_PUBLISH, _PUBLISH, 0)
            if m + 1 == P[_P_TARGET]:
                S[_LAUNCHING] = 0
                SF[_END_TIME] = t
    else:
        RI[_R_STATUS][r] = _UNTRAINED
    if S[_LAUNCHING]:
        _launch(RI[_R_SLOT][r], t, P, PF, S, slot_k, lengths, turns_buf, RI, RF, ht, hk, hp, hn)


def _call_ended(
    c: int, t: float, status: int, P: Any, PF: Any, S: Any, slot_k: Any, lengths: Any,
    turns_buf: Any, RI: Any, RF: Any, CI: Any, CF: Any, ht: Any, hk: Any, hp: Any, hn: Any,
) -> None:  # fmt: skip
    if not P[_P_ONE_ATTEMPT]:
        CI[_C_STATUS][c] = status
    CF[_C_END][c] = t
    r = CI[_C_ROLLOUT][c]
    RF[_R_TOOL][r] += t - CF[_C_ISSUE][c]
    RF[_R_EXEC][r] += CF[_C_EXEC][c]
    if P[_P_REEXECUTE]:
        RF[_R_DONE_SVC][r] += CF[_C_SERVICE][c] if P[_P_SVC_LAW] else PF[_F_SVC]
    if status == _FAILED and P[_P_ABORT]:
        RF[_R_FINISH][r] = t
        RI[_R_STATUS][r] = _ABORTED
        S[_ABORTED_N] += 1
        if S[_ABORTED_N] > 1000 + 100 * P[_P_TARGET]:
            S[_ERR] = _TOO_MANY_ABORTS
            return
        if S[_LAUNCHING]:
            _launch(RI[_R_SLOT][r], t, P, PF, S, slot_k, lengths, turns_buf, RI, RF, ht, hk, hp, hn)
        return
    _push(ht, hk, hp, hn, S, t + _segment(r, PF, RI, RF), _PRIO_EVENT, _SEG_END, r)


# -- the tool-call model: attempts, outcomes, retries, recovery ---------------------------------


def _start_attempt(
    c: int, t: float, P: Any, PF: Any, S: Any, SH: Any, SHF: Any, BX: Any, BXF: Any, RF: Any,
    CI: Any, CF: Any, AI: Any, AF: Any, crash: Any, ht: Any, hk: Any, hp: Any, hn: Any,
) -> None:  # fmt: skip
    a = S[_NA]
    S[_NA] = a + 1
    one = P[_P_ONE_ATTEMPT]  # then number 1, outcome and status completed: not stored
    number = 1 if one else CI[_C_ATTEMPTS][c] + 1
    if not one:
        CI[_C_ATTEMPTS][c] = number
        AI[_A_CALL][a] = c
        AI[_A_NUMBER][a] = number
        AI[_A_OUTCOME][a] = _PENDING
    AF[_A_ROUTE][a] = t
    AI[_A_REDIRECTS][a] = 0
    AI[_A_SHARD][a] = -1
    AF[_A_ARRIVE][a] = math.nan
    AF[_A_ADMIT][a] = math.nan
    AF[_A_DEPART][a] = math.nan
    AI[_A_COLD][a] = 0
    AI[_A_BOX][a] = -1
    AI[_A_STATE][a] = 0
    recovery = 0.0
    if number > 1:
        if P[_P_REEXECUTE]:
            recovery = RF[_R_DONE_SVC][CI[_C_ROLLOUT][c]]
        else:
            recovery = PF[_F_REPLAY] * CI[_C_INDEX][c]
    if not P[_P_ONE_ATTEMPT]:
        AF[_A_RECOVERY][a] = recovery
    if P[_P_TIMEOUT_ON]:
        _push(ht, hk, hp, hn, S, t + PF[_F_TIMEOUT], _PRIO_EVENT, _TIMEOUT, a)
    s = 0
    n = P[_P_SHARDS]
    if n > 1:
        best_load = _load(0, P, SH)
        for x in range(1, n):
            load = _load(x, P, SH)
            if load < best_load:
                s, best_load = x, load
    SH[_S_VISITED, s] = a
    _arrive(a, s, t, P, PF, S, SH, SHF, BX, BXF, AI, AF, CF, crash, ht, hk, hp, hn)


def _segment_end(
    r: int, t: float, P: Any, PF: Any, S: Any, SF: Any, slot_k: Any, lengths: Any,
    turns_buf: Any, svc: Any, SH: Any, SHF: Any, BX: Any, BXF: Any, RI: Any, RF: Any, CI: Any,
    CF: Any, AI: Any, AF: Any, crash: Any, ht: Any, hk: Any, hp: Any, hn: Any,
) -> None:  # fmt: skip
    issued = RI[_R_ISSUED][r]
    if issued < RI[_R_CALLS][r]:
        RI[_R_ISSUED][r] = issued + 1
        c = S[_NC]
        S[_NC] = c + 1
        CI[_C_ROLLOUT][c] = r
        CI[_C_INDEX][c] = issued
        CF[_C_ISSUE][c] = t
        CF[_C_END][c] = math.nan
        if P[_P_SVC_LAW]:
            u = S[_SVC_USED]
            S[_SVC_USED] = u + 1
            CF[_C_SERVICE][c] = svc[u]
        if not P[_P_ONE_ATTEMPT]:
            CI[_C_ATTEMPTS][c] = 0
            CI[_C_STATUS][c] = _PENDING
        CF[_C_EXEC][c] = 0.0
        _start_attempt(c, t, P, PF, S, SH, SHF, BX, BXF, RF, CI, CF, AI, AF, crash, ht, hk, hp, hn)
    else:
        _finish_rollout(r, t, P, PF, S, SF, slot_k, lengths, turns_buf, RI, RF, ht, hk, hp, hn)


def _end_attempt(
    a: int, t: float, outcome: int, P: Any, PF: Any, S: Any, slot_k: Any, lengths: Any,
    turns_buf: Any, SH: Any, SHF: Any, BX: Any, BXF: Any, RI: Any, RF: Any, CI: Any, CF: Any,
    AI: Any, AF: Any, crash: Any, ht: Any, hk: Any, hp: Any, hn: Any,
) -> None:  # fmt: skip
    s = AI[_A_SHARD][a]
    state = AI[_A_STATE][a]
    AI[_A_STATE][a] = _A_ENDED
    if state == _A_SERVICE:
        _release(
            a, s, t, outcome == _COMPLETED, P, PF, S, SH, SHF, BX, BXF, AI, AF, CF, crash,
            ht, hk, hp, hn,
        )  # fmt: skip
    else:
        _touch(s, t, SH, SHF)
        SH[_S_NQ, s] -= 1
    if not P[_P_ONE_ATTEMPT]:
        AI[_A_OUTCOME][a] = outcome
    AF[_A_DEPART][a] = t
    c = _call_of(a, P, AI)
    if outcome == _COMPLETED:
        SH[_S_COMPLETED, s] += 1
        _call_ended(
            c, t, _COMPLETED, P, PF, S, slot_k, lengths, turns_buf, RI, RF, CI, CF, ht, hk, hp, hn
        )
        return
    if outcome == _CRASHED:
        SH[_S_CRASHED, s] += 1
    else:
        SH[_S_TIMED_OUT, s] += 1
    if CI[_C_ATTEMPTS][c] < P[_P_MAX_ATTEMPTS]:
        _push(ht, hk, hp, hn, S, t + PF[_F_RETRY], _PRIO_EVENT, _RETRY, c)
    else:
        _call_ended(
            c, t, _FAILED, P, PF, S, slot_k, lengths, turns_buf, RI, RF, CI, CF, ht, hk, hp, hn
        )


# -- the loop -----------------------------------------------------------------------------------


def _kernel(
    P: Any, PF: Any, S: Any, SF: Any, slot_k: Any, lengths: Any, turns_buf: Any, svc: Any,
    crash: Any, SH: Any, SHF: Any, BX: Any, BXF: Any, RI: Any, RF: Any, CI: Any, CF: Any,
    AI: Any, AF: Any, ht: Any, hk: Any, hp: Any, hn: Any, ev: Any,
) -> None:  # fmt: skip
    """Run (or resume) the event loop until the heap is empty, or until it needs something
    (``S[_ERR]``); with ``_NEED_ROOM`` or ``_PAUSE`` it stopped between two events and resumes."""
    n_shards = P[_P_SHARDS]
    if S[_STARTED] == 0:
        S[_STARTED] = 1
        S[_LAUNCHING] = 1
        for slot in range(P[_P_SLOTS]):
            _launch(slot, 0.0, P, PF, S, slot_k, lengths, turns_buf, RI, RF, ht, hk, hp, hn)
            if S[_ERR] != _OK:
                return
        if P[_P_REFRESH_ON]:
            _push(ht, hk, hp, hn, S, PF[_F_REFRESH], _PRIO_REFRESH, _REFRESH, 1)
    rows, calls, attempts, boxes, heap = (
        RI[0].shape[0],
        CI[0].shape[0],
        AI[_A_SHARD].shape[0],
        BXF.shape[0],
        ht.shape[1],
    )
    while hn[0] > 0 or hn[2] > 0:
        if (
            rows - S[_NR] < _ROOM
            or calls - S[_NC] < _ROOM
            or attempts - S[_NA] < _ROOM
            or boxes - S[_NBOX] < _ROOM
            or heap - hn[0] < _HEAP_ROOM
            or heap - hn[2] < _HEAP_ROOM
            or (P[_P_LEN_LAW] and lengths.shape[1] - S[_LEN_USED] < _ROOM)
            or (P[_P_TURNS_LAW] and turns_buf.shape[0] - S[_TURN_USED] < _ROOM)
            or (P[_P_SVC_LAW] and svc.shape[0] - S[_SVC_USED] < _ROOM)
            or (P[_P_CRASH_ON] and crash.shape[0] - S[_CRASH_USED] < _ROOM)
        ):
            S[_ERR] = _NEED_ROOM
            return
        fifo = _fifo_first(ht, hk, hn)
        t = _fifo_pop(ht, hp, hn, ev) if fifo else _hpop(ht, hk, hp, 0, hn, ev)
        ref = ev[1]
        kind = ev[2]
        if kind == _SEG_END:
            _segment_end(
                ref, t, P, PF, S, SF, slot_k, lengths, turns_buf, svc, SH, SHF, BX, BXF, RI, RF,
                CI, CF, AI, AF, crash, ht, hk, hp, hn,
            )  # fmt: skip
        elif kind in (_DONE, _CRASH):
            if AI[_A_STATE][ref] != _A_SERVICE:
                continue
            _end_attempt(
                ref, t, _COMPLETED if kind == _DONE else _CRASHED, P, PF, S, slot_k, lengths,
                turns_buf, SH, SHF, BX, BXF, RI, RF, CI, CF, AI, AF, crash, ht, hk, hp, hn,
            )  # fmt: skip
        elif kind == _TIMEOUT:
            if AI[_A_STATE][ref] == _A_ENDED:
                continue
            _end_attempt(
                ref, t, _TIMED_OUT, P, PF, S, slot_k, lengths, turns_buf, SH, SHF, BX, BXF, RI,
                RF, CI, CF, AI, AF, crash, ht, hk, hp, hn,
            )  # fmt: skip
        elif kind == _RETRY:
            _start_attempt(
                ref, t, P, PF, S, SH, SHF, BX, BXF, RF, CI, CF, AI, AF, crash, ht, hk, hp, hn
            )
        elif kind == _PUBLISH:
            S[_VERSION] += 1
            SF[_LAST] = t
            if S[_VERSION] >= P[_P_STOP_VERSION]:
                S[_ERR] = _PAUSE
                return
            continue
        else:  # _REFRESH: the snapshot at ref·δ; the next one while anything else is pending
            if hn[0] > 0 or hn[2] > 0:
                for s in range(n_shards):
                    SH[_S_VIEW, s] = SH[_S_NQ, s] + SH[_S_BUSY, s]
                _push(
                    ht, hk, hp, hn, S, (ref + 1) * PF[_F_REFRESH], _PRIO_REFRESH, _REFRESH, ref + 1
                )
            continue
        if S[_ERR] != _OK:
            return
        SF[_LAST] = t
    if S[_TRAINED_N] < P[_P_TARGET]:
        S[_ERR] = _STALLED
        return
    last = SF[_LAST]
    for s in range(n_shards):
        _touch(s, last, SH, SHF)
        n = 0
        box = SH[_S_FREE, s]
        while box >= 0:
            n += 1
            box = BX[_B_NEXT, box]
        SH[_S_CONTAINERS, s] = n


_HELPERS = (
    "_push",
    "_fifo_push",
    "_fifo_first",
    "_fifo_pop",
    "_segment",
    "_call_of",
    "_load",
    "_touch",
    "_admit",
    "_arrive",
    "_release",
    "_launch",
    "_finish_rollout",
    "_call_ended",
    "_start_attempt",
    "_segment_end",
    "_end_attempt",
    "_kernel",
)
#: Inlined where they are called: the small hot ones and those called from one or two places; the
#: three called from several places (launch, admission, the end of a call) stay functions, which
#: keeps the compile time near 13 s of CPU (inlining all of them triples it).
_INLINE = (
    "_push",
    "_fifo_push",
    "_fifo_first",
    "_fifo_pop",
    "_segment",
    "_call_of",
    "_load",
    "_touch",
    "_segment_end",
    "_finish_rollout",
    "_arrive",
    "_release",
    "_end_attempt",
    "_start_attempt",
)
_compiled: Callable[..., None] | None = None


def _compile() -> Callable[..., None]:
    """Compile the kernel and its helpers once per process (numba's cache keeps them on disk)."""
    global _compiled
    if _compiled is None:
        _compiled_heap.jit_siftup()
        g = globals()
        for name in ("_hpush", "_hpop"):
            heap = getattr(_sim_compiled, name)
            g[name] = njit(
                getattr(heap, "py_func", heap), error_model="numpy", _nrt=False, inline="always"
            )
        for name in _HELPERS:
            inline = "always" if name in _INLINE else "never"
            g[name] = njit(g[name], error_model="numpy", _nrt=False, inline=inline)
        _compiled = g["_kernel"]
    return _compiled


#: The kernel ahead of time compiled where it can be (:mod:`refimpl.sim._aot`), else
#: :func:`_compile`'s.
_runner = Kernel(_kernel, "refimpl.sim.agent._compiled:_compile", _compile)


#: Rollouts from which ``simulate_agent(engine="auto")`` compiles the kernel when it is not compiled
#: yet. Compiling it took 12.5 s of CPU (numba 0.68, empty cache); at 3.2 x 10^4 rollouts of three
#: tool calls each the reference engine took 0.45 s of CPU and the compiled one 0.19 s, trace
#: included: a first compilation repays itself from about 1.5 x 10^6 rollouts.
COMPILE_ROLLOUTS = 1_000_000


def worth_compiling(cfg: AgentConfig) -> bool:
    """Whether ``simulate_agent(engine="auto")`` should run this engine rather than the reference.

    True when numba is installed and either the kernel is ready (built ahead of time, compiled in
    this process, or held by numba's cache on disk) or the run trains at least :data:`COMPILE_ROLLOUTS` rollouts. Both
    engines give the same results; the choice changes how long a run takes, never what it returns.
    ``refimpl simulate`` compiles from fewer rollouts (:func:`refimpl.sim._aot.command_builds`).
    """
    if not AVAILABLE:
        return False
    trained = cfg.steps * cfg.batch
    if trained >= COMPILE_ROLLOUTS or _runner.ready() or _aot.command_builds(trained):
        return True
    kernel: Any = _compile()  # a numba dispatcher
    return _sim_compiled.kernel_ready(kernel)


def _first_sizes(cfg: AgentConfig) -> tuple[int, int, int, int, int, int]:
    """First room for rollouts, calls, attempts, containers and heap entries, and the draws of each
    stream to take ahead (the kernel asks for more when they do not suffice).

    When every call takes one attempt (no crashes, no timeout), nothing is dropped (no ``eta``) and
    ``turns`` is a constant, the room is exact: the slots launch once each at 0 and once more per
    finished rollout until the last trained one, so at most ``steps · B + slots`` rollouts, ``turns``
    calls each, one attempt per call. Otherwise it is an estimate with margins."""
    one = cfg.crash_rate == 0.0 and cfg.timeout is None
    if one and cfg.eta is None and not _is_frozen_law(cfg.turns):
        rows = cfg.steps * cfg.batch + cfg.slots + _ROOM
        n_calls = rows * int(cfg.turns) + _ROOM
        n_att = n_calls
    else:
        mean_turns = float(cfg.turns.mean()) if _is_frozen_law(cfg.turns) else float(cfg.turns)
        rows = int(cfg.steps * cfg.batch * 1.05) + cfg.slots + 64
        n_calls = int(rows * mean_turns * 1.02) + 64
        n_att = int(n_calls * 1.05) + 64
    first = max(cfg.slots, min(rows, 1 << 16))  # every slot launches at 0
    return rows, n_calls, n_att, 4 * cfg.slots + 64, 4 * cfg.slots + 64, first


def run_agent_compiled(
    cfg: AgentConfig, *, progress: Callable[[int], None] | None = None
) -> CompiledRun:
    """Run the compiled engine (``AVAILABLE`` must be true); raises what the reference raises.

    The driver around the kernel (parameters, draws, room, progress, errors) is
    :func:`refimpl.sim.agent._compiled_run.run_kernel`.
    """
    return run_kernel(_runner, cfg, _first_sizes(cfg), progress=progress)
