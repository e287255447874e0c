"""The layout of the agent's compiled engine's arrays: which row or entry of each array holds what.

:mod:`refimpl.sim.agent._compiled` (the numba kernel) and :mod:`refimpl.sim.agent._compiled_run`
(the Python driver that sizes, grows and reads the kernel's arrays) share these numbers; numba
reads them as compile-time constants.

numba keys a kernel's on-disk cache by its own file alone, yet the compiled kernel freezes what
it reads from here: after a change here, clear numba's cache (or touch
``refimpl/sim/agent/_compiled.py``) so that the kernel is compiled again.
"""

from __future__ import annotations

# integer state S[...]
_SEQ, _VERSION, _COMPLETED_N, _TRAINED_N, _ABORTED_N, _LAUNCHING, _NR, _NC, _NA, _NBOX = range(10)
_ERR, _ERR_A, _ERR_B, _LEN_USED, _TURN_USED, _SVC_USED, _CRASH_USED, _STARTED = range(10, 18)
_N_STATE = 18
# float state SF[...]
_END_TIME, _LAST, _ERR_X = range(3)
# what the kernel stopped for
_OK, _NEED_ROOM, _PAUSE, _NO_COLUMN, _BAD_LENGTH, _BAD_TURNS, _TOO_MANY_ABORTS, _STALLED = range(8)
# integer parameters P[...]
(
    _P_SLOTS,
    _P_BATCH,
    _P_TARGET,
    _P_SHARDS,
    _P_MAX_REDIRECTS,
    _P_ETA,
    _P_REDIRECT,
    _P_CONSISTENT,
    _P_REFRESH_ON,
    _P_TIMEOUT_ON,
    _P_MAX_ATTEMPTS,
    _P_REEXECUTE,
    _P_ABORT,
    _P_LEN_LAW,
    _P_TURNS_LAW,
    _P_TURNS,
    _P_SVC_LAW,
    _P_CRASH_ON,
    _P_STOP_VERSION,
    _P_ONE_ATTEMPT,
) = range(20)
# float parameters PF[...]
(
    _F_TOKEN,
    _F_SVC,
    _F_CAP,
    _F_KEEPALIVE,
    _F_COLD,
    _F_WARM,
    _F_TIMEOUT,
    _F_RETRY,
    _F_REPLAY,
    _F_REFRESH,
) = range(10)
# rollout columns RI[...] (integers, each of its own width: _columns) and RF[...] (float64)
_R_SLOT, _R_K, _R_CALLS, _R_ISSUED, _R_VERSION, _R_STEP, _R_RANK, _R_STATUS = range(8)
_R_LAUNCH, _R_FINISH, _R_LEN, _R_TOOL, _R_EXEC, _R_DONE_SVC = range(6)
# call columns CI[...] and CF[...]
_C_ROLLOUT, _C_INDEX, _C_ATTEMPTS, _C_STATUS = range(4)
_C_ISSUE, _C_END, _C_SERVICE, _C_EXEC = range(4)
# attempt columns AI[...] and AF[...]
_A_CALL, _A_NUMBER, _A_REDIRECTS, _A_SHARD, _A_OUTCOME, _A_BOX, _A_STATE, _A_NEXT, _A_COLD = range(
    9
)
_A_ROUTE, _A_ARRIVE, _A_ADMIT, _A_DEPART, _A_RECOVERY = range(5)
# shard rows SH[...] (int64) and SHF[...] (float64)
(
    _S_NQ,
    _S_BUSY,
    _S_ARRIVALS,
    _S_COMPLETED,
    _S_CRASHED,
    _S_TIMED_OUT,
    _S_REDIRECTED,
    _S_QUEUED,
    _S_COLD,
    _S_VIEW,
    _S_QHEAD,
    _S_QTAIL,
    _S_FREE,
    _S_VISITED,
    _S_CONTAINERS,
) = range(15)
_S_AREA, _S_BUSY_AREA, _S_LAST = range(3)
# container rows BX[...] (int64: alive, next free) and BXF (float64: release time)
_B_ALIVE, _B_NEXT = range(2)
# room one event may need at most (a launch, a call, an attempt, a container, a few pushes, one draw
# of each stream)
_ROOM, _HEAP_ROOM = 4, 8
_PRIO_SHIFT = 61  # heap key (priority << 61) | sequence: priorities 0..2 stay below 2^63
