"""The layout of the compiled engine's arrays: which row or entry of each array holds what.

:mod:`refimpl.sim._compiled` (the numba kernel) and :mod:`refimpl.sim._compiled_run` (the Python
driver that sizes, grows and reads the kernel's arrays) share these numbers; numba reads them as
compile-time constants.

numba keys a kernel's on-disk cache by its own file alone, yet the compiled kernel freezes what
it reads from here: after a change here, clear numba's cache (or touch
``refimpl/sim/_compiled.py``) so that the kernel is compiled again.
"""

from __future__ import annotations

from refimpl.sim._trace import STATUS

_TRAINED = STATUS["trained"]
_DROPPED = STATUS["dropped"]
_ABORTED = STATUS["aborted"]
_UNFINISHED = STATUS["unfinished"]
_PENDING = STATUS["pending"]
_COMPLETE, _PUBLISH, _PREEMPT, _RESUME = 0, 1, 2, 3
_PARTIAL_CODES = {"none": 0, "restart": 1, "recompute": 2, "keep_kv": 3}

# integer state S[...]
_SEQ, _BUSY, _VERSION, _J, _TRAINING, _RANK, _ADMITTED, _RUNNING, _PENDING_LAUNCH = range(9)
_NR, _BUF_HEAD, _BUF_TAIL, _NBATCH, _IDLE_HEAD, _IDLE_LEN, _ERR, _ERR_A, _ERR_B = range(9, 18)
_COMPLETED, _NSEG, _EXP_USED, _KCOLS, _STARTED, _MAXCOL, _PAUSE_AT = range(18, 25)
_N_STATE = 25
# float state SF[...]
_T, _VCLOCK, _GEN_BUSY, _TRAINER_BUSY = range(4)
# errors: what the kernel needs from Python
_OK, _STUCK, _NEED_LENGTHS, _NEED_ROWS, _NEED_HEAP, _NEED_SEGMENTS, _NEED_EXPS = range(7)
# between two events: the arrays are nearly full; grow them and resume (state is consistent)
_NEED_ROOM = 7
# room one event may need at most: a publication can launch (restart, admission, a new step) and
# reschedule (recompute) on every slot, twice over for restart under admission
_ROWS_PER_EVENT, _HEAP_PER_EVENT, _SEGMENTS_PER_EVENT, _COLUMNS_PER_EVENT = 2, 4, 2, 3
# integer parameters P[...]
(
    _P_SLOTS,
    _P_BATCH,
    _P_STEPS,
    _P_CONTINUOUS,
    _P_STEP_MODE,
    _P_ADMISSION,
    _P_LAUNCH,
    _P_DROP_LEFTOVERS,
    _P_ETA,
    _P_DROP_OVER,
    _P_PARTIAL,
    _P_SLOW,
    _P_PREEMPT,
    _P_PERSIST_KV,
    _P_FIXED_LENGTHS,
) = range(15)
# float parameters PF[...]
_F_TT, _F_PRE, _F_RP, _F_PSCALE, _F_PDUR, _F_KVRESTORE = range(6)
# rollout int32 rows R[...]
_R_SLOT, _R_IDX, _R_VL, _R_VMIN, _R_STEP, _R_RANK, _R_GEN, _R_BUF = range(8)
# slot int64 rows SL[...] and float rows SLF[...]
_S_NXT, _S_RID, _S_PAUSED, _S_LASTSEG = range(4)
_S_REMAINING, _S_BUSY_SINCE, _S_DECV, _S_DECPRE, _S_DECK = range(5)
