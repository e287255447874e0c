"""The engine mode's loop: continuous batching over discrete decode steps, on preallocated arrays.

Written in the subset of Python that numba compiles without its reference counting (arrays,
integers, floats; the queues are rows of an array), so that :mod:`refimpl.sim.engine._kernel`
compiles these very functions: the plain Python run is the reference, the compiled one the fast
path, and they agree bit for bit. Completions wait in a calendar, a list per step (bucket
``step % M``, ``M`` a power of two above the longest length: :data:`CALENDAR_MAX`), appended in
schedule order, so a step's completions are taken in the order a heap keyed by (step, schedule
number) gives, without its sifts; a binary heap holds them when the lengths are longer than that.
Preempted rollouts wait in a binary heap; the running rollouts, for preemption newest first, on a
stack: they are pushed as they are scheduled, so the last pushed is the newest (a heap keyed by
the schedule number popped them in the same order, with a sift over its whole depth at every push
and pop).

One engine step: every running sequence generates one token; the step takes the roofline time of the
batch (or a constant). Between two steps (a *boundary*): the step's completions (in launch order),
admissions to the free seats while the KV blocks allow, then the weight updates published at that
instant and what the partial policy does to the sequences in flight. A publication between two
boundaries changes the version at its own time (the trainer moves on then) and reaches the
sequences in flight at the next boundary: a step runs under the weights it started with.

Memory: a sequence holds ``ceil(own / block_size)`` blocks, ``own`` its tokens outside its prompt's
shared full blocks; a prompt's ``prompt // block_size`` full blocks are shared by the sequences of
its group (and kept, evictable, once unused, for a later group with the same prompt). A sequence
needs a new block when it generates a token at a multiple of ``block_size`` own tokens; sequences
are counted by that phase (the step modulo ``block_size``), so a step's demand is one lookup. When
the demand exceeds the free blocks, the newest running sequence is preempted until it fits.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

__all__ = ["run_loop"]

I64 = NDArray[np.int64]
I32 = NDArray[np.int32]
F64 = NDArray[np.float64]

# integer state IS[...]
_S, _VERSION, _J, _TRAINING, _RANK, _NL, _BUF_H, _BUF_T, _SEAT_H, _SEAT_N = range(10)
_FREE, _CACHED, _LRU_H, _LRU_T, _NSEG, _ERR, _ERR_A, _APPLIED, _SWAP, _NSHARE = range(10, 20)
_NPROMPT, _NRUN, _DONE, _SEQNO, _HN = range(20, 25)  # _HN.._HN+2: the three H' sizes
_EFREE = 27  # the first free entry of the completion calendar (H[4])
N_I = 28
# float state F[...]: time, next publication, context tokens of the running batch, prefill tokens
_T, _NEXT_PUB, _CTX, _PREFILL = range(4)
N_F = 4
# integer parameters P[...]
_SEATS, _B, _STEPS, _PARTIAL, _PROMPT, _BS, _BLOCKS, _WM, _GROUP, _POOL, _SHARE = range(11)
_SWAPPING, _ROOF, _CAL = range(11, 14)  # _CAL: the calendar's buckets (0: the heap instead)
N_P = 14
# float parameters C[...]: roofline (base, per context token, per processed token, overhead) or
# constant step (step time, 0, per prefilled token, 0); seconds per swapped block
_BASE, _PER_CTX, _PER_TOK, _OVER, _SWAP_T = range(5)
N_C = 5
# per-rollout fields, the trace's: R[field, rid] (int32) and RF[field, rid] (float64)
_SLOT, _COL, _VL, _VMIN, _STEP, _STALE, _RANKR, _STATUS = range(8)
N_R = 8
_LAUNCH, _FINISH, _WASTED, _RECOMP, _RUNTIME, _LENF = range(6)
N_RF = 6
# the state of the rollout in flight in each seat (a rollout keeps its seat while it is preempted):
# W[field, seat] (int64) and WF[field, seat] (float64)
_RID, _STATE, _G0, _S0, _OWN, _PR, _LASTSEG, _ONCPU, _SEQ, _ADM, _LEN = range(11)
N_W = 11
_SEGSTART, _SINCE = range(2)
N_WF = 2
# per-prompt fields PR[field, prompt]: users, version that prefilled it (-1: not in memory), stamp
_REF, _PVER, _STAMP = range(3)
# statistics ST[...]
(
    ST_STEPS,
    ST_BATCH_SUM,
    ST_PREEMPTIONS,
    ST_PREEMPT_KV_TOKENS,
    ST_SWAP_OUT,
    ST_SWAP_IN,
    ST_PREFILL,
    ST_SAVED_GROUP,
    ST_SAVED_CACHE,
    ST_STALE_MISS,
    ST_BLOCKS_SAVED_SUM,
    ST_PEAK_BLOCKS,
    ST_BLOCKS_SUM,
    ST_INTERRUPTED,
    ST_INT_GEN_TOKENS,
    ST_INT_CTX_TOKENS,
    ST_PREFILL_TIME,
) = range(17)
N_STATS = 17

# statuses (refimpl.sim._trace.STATUS) and rollout states
_TRAINED, _ABORTED, _UNFINISHED, _PENDING = 0, 2, 3, 4
_RUN, _PAUSED, _OFF = 1, 2, 3
# partial policies
_NONE, _RESTART, _RECOMPUTE, _KEEP = 0, 1, 2, 3
# error codes
ERR_ROLLOUTS, ERR_LENGTHS, ERR_SEGMENTS, ERR_STUCK, ERR_SCHEDULE = 1, 2, 3, 4, 5
# A completion's heap key: step * KEY + its schedule number (numbers stay below 2^31, steps below
# 2^32), so the completions of one step come in the order they were scheduled: launch order, as
# in the slot mode, where a rollout recomputed at a publication is scheduled anew.
KEY = 1 << 31
#: The most buckets of the completion calendar. A completion is due less than the longest rollout's
#: length of steps ahead, so with a power of two ``M`` of buckets above that length, bucket
#: ``step % M`` holds the completions of that step alone, appended in schedule order: a step's
#: completions are one list, taken in the heap's order, with no sift. Longer rollouts than this
#: (a length file's) keep the heap (``P[_CAL] = 0``). ``H`` then takes 80 bytes a bucket: 5 MiB
#: for lognormal(6, 1) lengths at 10^6 rollouts (the longest near 50,000 tokens: 65,536
#: buckets), 20 MiB at this bound.
CALENDAR_MAX = 1 << 18


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _hpush(H: I64, IS: I64, k: int, key: int, r: int) -> None:
    """Push ``(key, r)`` on the binary min-heap ``H[k]`` (keys in ``H[k, 0]``, rollouts in
    ``H[k, 1]``; its size in ``IS[_HN + k]``)."""
    i = int(IS[_HN + k])
    if i >= H.shape[2]:
        IS[_ERR] = ERR_SCHEDULE
        return
    IS[_HN + k] = i + 1
    while i > 0:
        up = (i - 1) >> 1
        if H[k, 0, up] <= key:
            break
        H[k, 0, i] = H[k, 0, up]
        H[k, 1, i] = H[k, 1, up]
        i = up
    H[k, 0, i] = key
    H[k, 1, i] = r


def _hpop(H: I64, IS: I64, k: int) -> tuple[int, int]:
    """Pop the entry of the smallest key of the heap ``H[k]``: ``(key, rollout)``."""
    n = int(IS[_HN + k]) - 1
    top, top_r = int(H[k, 0, 0]), int(H[k, 1, 0])
    last, last_r = H[k, 0, n], H[k, 1, n]
    IS[_HN + k] = n
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and H[k, 0, c + 1] < H[k, 0, c]:
            c += 1
        if H[k, 0, c] >= last:
            break
        H[k, 0, i] = H[k, 0, c]
        H[k, 1, i] = H[k, 1, c]
        i = c
    if n > 0:
        H[k, 0, i] = last
        H[k, 1, i] = last_r
    return top, top_r


def _compact_newest(IS: I64, R: I32, W: I64, WF: F64, H: I64) -> None:
    """Drop the entries of the newest-running stack whose rollout stopped or was admitted again
    (only a preemption pops that stack, so they pile up); the rest keep their order."""
    n = int(IS[_HN + 1])
    m = 0
    for i in range(n):
        key, r = H[1, 0, i], H[1, 1, i]
        if W[_STATE, R[_SLOT, r]] == _RUN and W[_ADM, R[_SLOT, r]] == -key:
            H[1, 0, m] = key
            H[1, 1, m] = r
            m += 1
    IS[_HN + 1] = m


def _alloc(IS: I64, P: I64, PR: I64, LRU: I64, k: int) -> None:
    """Take ``k`` blocks, evicting unused cached prompts (least recently released first)."""
    s_blocks = P[_PROMPT] // P[_BS] if P[_SHARE] else 0
    while IS[_FREE] < k and IS[_LRU_H] < IS[_LRU_T]:
        h = IS[_LRU_H]
        IS[_LRU_H] = h + 1
        p = LRU[0, h]
        if LRU[1, h] != PR[_STAMP, p] or PR[_REF, p] != 0 or PR[_PVER, p] < 0:
            continue  # reused since, or gone already
        PR[_PVER, p] = -1
        IS[_CACHED] -= s_blocks
        IS[_FREE] += s_blocks
    IS[_FREE] -= k


def _release_prompt(IS: I64, P: I64, PR: I64, LRU: I64, p: int) -> None:
    s_blocks = P[_PROMPT] // P[_BS]
    PR[_REF, p] -= 1
    IS[_NSHARE] -= 1
    if PR[_REF, p] > 0:
        return
    IS[_NPROMPT] -= 1
    if P[_POOL] > 0:  # kept, evictable, for a later group with the same prompt
        IS[_CACHED] += s_blocks
        t = IS[_LRU_T]
        if t >= LRU.shape[1]:
            IS[_ERR] = ERR_ROLLOUTS
            return
        IS[_LRU_T] = t + 1
        PR[_STAMP, p] += 1
        LRU[0, t] = p
        LRU[1, t] = PR[_STAMP, p]
    else:
        IS[_FREE] += s_blocks
        PR[_PVER, p] = -1


def _prompt_plan(IS: I64, P: I64, PR: I64, r: int) -> tuple[int, int, int, int]:
    """How rollout ``r`` gets its prompt: ``(prompt id or -1, blocks it takes from the available
    ones, tokens to prefill, tokens found cached)``. Its own blocks come on top."""
    prompt, bs = P[_PROMPT], P[_BS]
    s_blocks = prompt // bs if P[_SHARE] else 0
    if s_blocks == 0:
        return -1, 0, prompt, 0
    group = r // P[_GROUP]
    p = group % P[_POOL] if P[_POOL] > 0 else group
    ver = PR[_PVER, p]
    valid = ver == IS[_VERSION] or (ver >= 0 and P[_PARTIAL] == _KEEP)
    if valid:
        took = s_blocks if PR[_REF, p] == 0 else 0
        return p, took, prompt - s_blocks * bs, s_blocks * bs
    if ver >= 0 and PR[_REF, p] > 0:  # in use under older weights: this one prefills its own copy
        return -1, 0, prompt, 0
    return p, s_blocks, prompt, 0


def _acquire_prompt(IS: I64, P: I64, PR: I64, LRU: I64, ST: F64, p: int, hit: int) -> None:
    s_blocks = P[_PROMPT] // P[_BS]
    if PR[_REF, p] == 0:
        IS[_NPROMPT] += 1
        if PR[_PVER, p] >= 0 and (PR[_PVER, p] == IS[_VERSION] or P[_PARTIAL] == _KEEP):
            IS[_CACHED] -= s_blocks  # a cached prompt, in use again
            ST[ST_SAVED_CACHE] += hit
        else:
            if PR[_PVER, p] >= 0:  # cached under older weights: dropped, prefilled again
                IS[_CACHED] -= s_blocks
                IS[_FREE] += s_blocks
                ST[ST_STALE_MISS] += 1
            if P[_BLOCKS] >= 0:
                _alloc(IS, P, PR, LRU, s_blocks)
            PR[_PVER, p] = IS[_VERSION]
    else:
        ST[ST_SAVED_GROUP] += hit
    PR[_REF, p] += 1
    IS[_NSHARE] += 1


def _fits(IS: I64, P: I64, cnt: I64, took: int, tokens: int) -> bool:
    """Whether a sequence holding ``tokens`` own tokens can join: the blocks the running ones need
    for the coming step come first (they were there first), then its own, its next token's
    included, and the watermark stays free."""
    if P[_BLOCKS] < 0:
        return True
    reserved = cnt[IS[_S] % P[_BS]]
    room = IS[_FREE] + IS[_CACHED] - reserved - took - _cdiv(tokens + 1, P[_BS])
    return bool(room >= P[_WM])


def _schedule(IS: I64, P: I64, R: I32, W: I64, WF: F64, H: I64, r: int, fin: int) -> int:
    """Give rollout ``r`` a new schedule number and schedule its completion at step ``fin``: at
    the tail of the calendar's bucket for that step (its entries ``H[4]``: number and rollout,
    next entry; its buckets ``H[3]``: first and last entry), or on the heap without a calendar."""
    q = int(IS[_SEQNO])
    IS[_SEQNO] = q + 1
    W[_SEQ, R[_SLOT, r]] = q
    if P[_CAL] == 0:
        _hpush(H, IS, 0, fin * KEY + q, r)
        return q
    e = IS[_EFREE]
    if e < 0:
        IS[_ERR] = ERR_SCHEDULE
        return q
    IS[_EFREE] = H[4, 1, e]
    H[4, 0, e] = q * KEY + r
    H[4, 1, e] = -1
    b = fin & (P[_CAL] - 1)
    if H[3, 1, b] < 0:
        H[3, 0, b] = e
    else:
        H[4, 1, H[3, 1, b]] = e
    H[3, 1, b] = e
    return q


def _start(
    IS: I64,
    P: I64,
    F: F64,
    R: I32,
    W: I64,
    WF: F64,
    RF: F64,
    cnt: I64,
    H: I64,
    r: int,
    g: int,
) -> None:
    """Rollout ``r`` (``g`` tokens generated) joins the running batch at the coming step."""
    s = IS[_S]
    W[_STATE, R[_SLOT, r]] = _RUN
    W[_G0, R[_SLOT, r]] = g
    W[_S0, R[_SLOT, r]] = s
    cnt[(s - W[_OWN, R[_SLOT, r]] - g) % P[_BS]] += 1
    IS[_NRUN] += 1
    F[_CTX] += P[_PROMPT] + g
    WF[_SINCE, R[_SLOT, r]] = F[_T]
    q = _schedule(IS, P, R, W, WF, H, r, s + W[_LEN, R[_SLOT, r]] - g - 1)
    W[_ADM, R[_SLOT, r]] = q
    if P[_BLOCKS] >= 0:  # preemption needs the newest running sequence: pushed on its stack
        if IS[_HN + 1] >= H.shape[2]:
            _compact_newest(IS, R, W, WF, H)
        i = IS[_HN + 1]
        if i >= H.shape[2]:
            IS[_ERR] = ERR_SCHEDULE
            return
        H[1, 0, i] = -q
        H[1, 1, i] = r
        IS[_HN + 1] = i + 1


def _stop(
    IS: I64,
    P: I64,
    F: F64,
    R: I32,
    W: I64,
    WF: F64,
    RF: F64,
    PR: I64,
    LRU: I64,
    cnt: I64,
    r: int,
    g: int,
) -> None:
    """Rollout ``r`` leaves the running batch with ``g`` tokens: its own blocks and prompt freed."""
    W[_STATE, R[_SLOT, r]] = _PAUSED
    cnt[(W[_S0, R[_SLOT, r]] - W[_OWN, R[_SLOT, r]] - W[_G0, R[_SLOT, r]]) % P[_BS]] -= 1
    IS[_NRUN] -= 1
    F[_CTX] -= P[_PROMPT] + g
    RF[_RUNTIME, r] += F[_T] - WF[_SINCE, R[_SLOT, r]]
    if P[_BLOCKS] >= 0:
        IS[_FREE] += _cdiv(W[_OWN, R[_SLOT, r]] + g, P[_BS])
    if W[_PR, R[_SLOT, r]] >= 0:
        _release_prompt(IS, P, PR, LRU, W[_PR, R[_SLOT, r]])


def _launch(
    IS: I64, P: I64, F: F64, R: I32, W: I64, WF: F64, RF: F64, PR: I64, LRU: I64, ST: F64, lengths: I64, nxt: I64, seats: I64, seat_rid: I64, cnt: I64, H: I64,
) -> bool:  # fmt: skip
    """Launch a new rollout in the next free seat if the blocks allow; whether it did."""
    r = IS[_NL]
    if r >= R.shape[1]:
        IS[_ERR] = ERR_ROLLOUTS
        return False
    seat = seats[IS[_SEAT_H]]
    col = nxt[seat]
    if col >= lengths.shape[1]:
        IS[_ERR] = ERR_LENGTHS
        IS[_ERR_A] = seat
        return False
    p, took, prefill, hit = _prompt_plan(IS, P, PR, r)
    own = P[_PROMPT] % P[_BS] if p >= 0 else P[_PROMPT]
    if not _fits(IS, P, cnt, took, own):
        return False
    IS[_SEAT_H] = (IS[_SEAT_H] + 1) % P[_SEATS]
    IS[_SEAT_N] -= 1
    IS[_NL] = r + 1
    nxt[seat] = col + 1
    seat_rid[seat] = r
    v = IS[_VERSION]
    length = lengths[seat, col]
    R[_SLOT, r], R[_COL, r], R[_VL, r], R[_VMIN, r] = seat, col, v, v
    R[_STEP, r], R[_STALE, r], R[_RANKR, r], R[_STATUS, r] = -1, -1, -1, _UNFINISHED
    W[_RID, seat], W[_LEN, seat], W[_OWN, seat], W[_PR, seat] = r, length, own, p
    W[_LASTSEG, seat], W[_ONCPU, seat] = -1, 0
    RF[_LAUNCH, r], RF[_FINISH, r], RF[_WASTED, r], RF[_RECOMP, r] = F[_T], math.nan, 0.0, 0.0
    RF[_RUNTIME, r], RF[_LENF, r] = 0.0, float(length)
    WF[_SEGSTART, seat] = 0.0
    if p >= 0:
        _acquire_prompt(IS, P, PR, LRU, ST, p, hit)
    if P[_BLOCKS] >= 0:
        _alloc(IS, P, PR, LRU, _cdiv(own, P[_BS]))
    F[_PREFILL] += prefill
    ST[ST_PREFILL] += prefill
    _start(IS, P, F, R, W, WF, RF, cnt, H, r, 0)
    return True


def _resume(
    IS: I64, P: I64, F: F64, R: I32, W: I64, WF: F64, RF: F64, PR: I64, LRU: I64, ST: F64, cnt: I64, H: I64, r: int,
) -> bool:  # fmt: skip
    """Resume the preempted rollout ``r`` if the blocks allow (its KV swapped in, or recomputed)."""
    g = W[_G0, R[_SLOT, r]]
    p, took, prefill, hit = _prompt_plan(IS, P, PR, r)
    own = P[_PROMPT] % P[_BS] if p >= 0 else P[_PROMPT]
    if not _fits(IS, P, cnt, took, own + g):
        return False
    if W[_ONCPU, R[_SLOT, r]]:  # swapped in; a prompt part it no longer shares is prefilled
        ST[ST_SWAP_IN] += _cdiv(min(own, W[_OWN, R[_SLOT, r]]) + g, P[_BS])
        IS[_SWAP] += _cdiv(min(own, W[_OWN, R[_SLOT, r]]) + g, P[_BS])
        prefill = max(prefill - W[_OWN, R[_SLOT, r]], 0)
    else:  # recomputed: the prompt as at launch, and every generated token
        prefill += g
        RF[_RECOMP, r] += g
    W[_OWN, R[_SLOT, r]], W[_PR, R[_SLOT, r]], W[_ONCPU, R[_SLOT, r]] = own, p, 0
    if p >= 0:
        _acquire_prompt(IS, P, PR, LRU, ST, p, hit)
    if P[_BLOCKS] >= 0:
        _alloc(IS, P, PR, LRU, _cdiv(own + g, P[_BS]))
    F[_PREFILL] += prefill
    ST[ST_PREFILL] += prefill
    _start(IS, P, F, R, W, WF, RF, cnt, H, r, g)
    return True


def _admit(
    IS: I64, P: I64, F: F64, R: I32, W: I64, WF: F64, RF: F64, PR: I64, LRU: I64, ST: F64, lengths: I64, nxt: I64, seats: I64, seat_rid: I64, cnt: I64, H: I64,
) -> None:  # fmt: skip
    """Fill the engine: preempted rollouts first (oldest first), then new ones in free seats.
    Whether the next one fits is checked here first, as :func:`_resume` and :func:`_launch`
    check it: under memory pressure most boundaries end on one that does not, and the check
    costs less than their call."""
    while IS[_ERR] == 0:
        if IS[_HN + 2] > 0:
            r = int(H[2, 1, 0])
            if W[_STATE, R[_SLOT, r]] != _PAUSED or W[_RID, R[_SLOT, r]] != r:
                _hpop(H, IS, 2)  # restarted meanwhile
                continue
            if not _fits_plan(IS, P, PR, cnt, r, W[_G0, R[_SLOT, r]]):
                return  # first come, first served: nothing overtakes it
            if not _resume(IS, P, F, R, W, WF, RF, PR, LRU, ST, cnt, H, r):
                return
            _hpop(H, IS, 2)
            continue
        if IS[_SEAT_N] == 0:
            return
        r = IS[_NL]  # the next launch, unless it is out of room (_launch reports that)
        room = r < R.shape[1] and nxt[seats[IS[_SEAT_H]]] < lengths.shape[1]
        if room and not _fits_plan(IS, P, PR, cnt, r, 0):
            return
        if not _launch(IS, P, F, R, W, WF, RF, PR, LRU, ST, lengths, nxt, seats, seat_rid, cnt, H):
            return


def _fits_plan(IS: I64, P: I64, PR: I64, cnt: I64, r: int, g: int) -> bool:
    """Whether rollout ``r``, ``g`` tokens generated, can join now: its prompt's plan
    (:func:`_prompt_plan`), then :func:`_fits`."""
    p, took, _, _ = _prompt_plan(IS, P, PR, r)
    own = P[_PROMPT] % P[_BS] if p >= 0 else P[_PROMPT]
    return _fits(IS, P, cnt, took, own + g)


def _make_room(
    IS: I64, P: I64, F: F64, R: I32, W: I64, WF: F64, RF: F64, PR: I64, LRU: I64, ST: F64, cnt: I64, H: I64,
) -> None:  # fmt: skip
    """Blocks for the coming step's new tokens; preempt the newest running rollouts until they fit."""
    if P[_BLOCKS] < 0:
        return
    s, bs = IS[_S], P[_BS]
    need = cnt[s % bs]
    while need > IS[_FREE] + IS[_CACHED]:
        top = IS[_HN + 1] - 1  # the newest running: the top of its stack
        key, r = H[1, 0, top], H[1, 1, top]
        IS[_HN + 1] = top
        if W[_STATE, R[_SLOT, r]] != _RUN or W[_ADM, R[_SLOT, r]] != -key:
            continue  # gone, or admitted again since
        if IS[_NRUN] == 1:  # the last one outgrows the whole budget
            IS[_ERR] = ERR_STUCK
            IS[_ERR_A] = r
            return
        g = W[_G0, R[_SLOT, r]] + s - W[_S0, R[_SLOT, r]]
        if (W[_S0, R[_SLOT, r]] - W[_OWN, R[_SLOT, r]] - W[_G0, R[_SLOT, r]]) % bs == s % bs:
            need -= 1
        _stop(IS, P, F, R, W, WF, RF, PR, LRU, cnt, r, g)
        W[_G0, R[_SLOT, r]] = g
        ST[ST_PREEMPTIONS] += 1
        if P[_SWAPPING]:
            W[_ONCPU, R[_SLOT, r]] = 1
            ST[ST_SWAP_OUT] += _cdiv(W[_OWN, R[_SLOT, r]] + g, bs)
            IS[_SWAP] += _cdiv(W[_OWN, R[_SLOT, r]] + g, bs)
        else:
            ST[ST_PREEMPT_KV_TOKENS] += W[_OWN, R[_SLOT, r]] + g
        _hpush(H, IS, 2, r, r)
    _alloc(IS, P, PR, LRU, need)


def _new_segment(
    IS: I64, R: I32, W: I64, WF: F64, RF: F64, SEG: I64, SEGT: F64, r: int, k: int, v: int
) -> None:
    """From token ``k`` on, rollout ``r``'s tokens come from version ``v``."""
    last = W[_LASTSEG, R[_SLOT, r]]
    if (
        k <= WF[_SEGSTART, R[_SLOT, r]]
    ):  # no token under the current segment yet: it changes version
        if last >= 0:
            SEG[1, last] = v
        else:
            R[_VMIN, r] = v
        return
    n = IS[_NSEG]
    if n >= SEG.shape[1]:
        IS[_ERR] = ERR_SEGMENTS
        return
    IS[_NSEG] = n + 1
    SEG[0, n], SEG[1, n], SEGT[n] = r, v, float(k)
    W[_LASTSEG, R[_SLOT, r]] = n
    WF[_SEGSTART, R[_SLOT, r]] = float(k)


def _interrupt(
    IS: I64, P: I64, F: F64, R: I32, W: I64, WF: F64, RF: F64, PR: I64, LRU: I64, ST: F64, SEG: I64,
    SEGT: F64, seats: I64, seat_rid: I64, cnt: I64, H: I64,
) -> None:  # fmt: skip
    """A weight update reaches the rollouts in flight: restart, recompute or keep their KV."""
    v, s, policy = IS[_VERSION], IS[_S], P[_PARTIAL]
    for seat in range(P[_SEATS]):
        r = seat_rid[seat]
        if r < 0:
            continue
        last = W[_LASTSEG, R[_SLOT, r]]
        if (SEG[1, last] if last >= 0 else R[_VMIN, r]) == v:
            continue  # launched under these weights
        running = W[_STATE, R[_SLOT, r]] == _RUN
        g = W[_G0, R[_SLOT, r]] + s - W[_S0, R[_SLOT, r]] if running else W[_G0, R[_SLOT, r]]
        ST[ST_INTERRUPTED] += 1
        ST[ST_INT_GEN_TOKENS] += g
        ST[ST_INT_CTX_TOKENS] += P[_PROMPT] + g
        if policy == _RESTART:
            RF[_WASTED, r] += g
            R[_STATUS, r] = _ABORTED
            RF[_FINISH, r] = F[_T]
            if running:
                _stop(IS, P, F, R, W, WF, RF, PR, LRU, cnt, r, g)
            W[_STATE, R[_SLOT, r]] = _OFF
            W[_ONCPU, R[_SLOT, r]] = 0
            seat_rid[seat] = -1
            seats[(IS[_SEAT_H] + IS[_SEAT_N]) % P[_SEATS]] = seat
            IS[_SEAT_N] += 1
            continue
        _new_segment(IS, R, W, WF, RF, SEG, SEGT, r, g, v)
        if policy == _RECOMPUTE:
            RF[_RECOMP, r] += g
            if running:  # rescheduled, at the same step: its completion now follows the others'
                F[_PREFILL] += P[_PROMPT] + g
                ST[ST_PREFILL] += P[_PROMPT] + g
                _schedule(IS, P, R, W, WF, H, r, s + W[_LEN, R[_SLOT, r]] - g - 1)
            else:
                W[_ONCPU, R[_SLOT, r]] = 0  # its swapped KV is stale: recomputed when it resumes


def _try_train(
    IS: I64, P: I64, F: F64, R: I32, W: I64, WF: F64, buf: I64, taus: F64, t: float
) -> None:
    """The trainer takes the next ``B`` completed rollouts if it is free and they are there."""
    b = P[_B]
    if IS[_TRAINING] or IS[_J] >= P[_STEPS] or IS[_BUF_T] - IS[_BUF_H] < b:
        return
    j = IS[_J]
    for _ in range(b):
        r = buf[IS[_BUF_H]]
        IS[_BUF_H] += 1
        R[_STATUS, r] = _TRAINED
        R[_STEP, r] = j
        R[_STALE, r] = j - R[_VMIN, r]
        R[_RANKR, r] = IS[_RANK]
        IS[_RANK] += 1
    IS[_TRAINING] = 1
    F[_NEXT_PUB] = t + taus[j]
    IS[_J] = j + 1


def _publish(IS: I64, P: I64, F: F64, pub: F64) -> None:
    """The trainer publishes the version it trained (the run ends at the last one)."""
    t = F[_NEXT_PUB]
    j = IS[_J] - 1
    pub[j] = t
    IS[_VERSION] = j + 1
    IS[_TRAINING] = 0
    F[_NEXT_PUB] = math.inf
    if j + 1 == P[_STEPS]:
        IS[_DONE] = 1
        F[_T] = t


def _complete(
    IS: I64, P: I64, F: F64, R: I32, W: I64, WF: F64, RF: F64, PR: I64, LRU: I64, buf: I64, seats: I64, seat_rid: I64, cnt: I64, H: I64, step: int,
) -> None:  # fmt: skip
    """The rollouts whose last token came in ``step`` finish, in launch order: the calendar's
    bucket of the step, first to last, or the heap's entries of the step."""
    if P[_CAL] > 0:
        b = step & (P[_CAL] - 1)
        while H[3, 0, b] >= 0:
            e = H[3, 0, b]
            H[3, 0, b] = H[4, 1, e]
            entry = H[4, 0, e]
            H[4, 1, e] = IS[_EFREE]
            IS[_EFREE] = e
            q, r = entry // KEY, entry % KEY
            _finish(IS, P, F, R, W, WF, RF, PR, LRU, buf, seats, seat_rid, cnt, r, q)
        H[3, 1, b] = -1
        return
    while IS[_HN] > 0 and H[0, 0, 0] // KEY == step:
        key, r = _hpop(H, IS, 0)
        _finish(IS, P, F, R, W, WF, RF, PR, LRU, buf, seats, seat_rid, cnt, r, key % KEY)


def _finish(
    IS: I64, P: I64, F: F64, R: I32, W: I64, WF: F64, RF: F64, PR: I64, LRU: I64, buf: I64, seats: I64, seat_rid: I64, cnt: I64, r: int, q: int,
) -> None:  # fmt: skip
    """Rollout ``r``'s completion under schedule number ``q`` comes due: it finishes, unless it
    was preempted, restarted or rescheduled since (another number)."""
    if W[_STATE, R[_SLOT, r]] != _RUN or W[_SEQ, R[_SLOT, r]] != q:
        return
    _stop(IS, P, F, R, W, WF, RF, PR, LRU, cnt, r, W[_LEN, R[_SLOT, r]])
    W[_STATE, R[_SLOT, r]] = _OFF
    R[_STATUS, r] = _PENDING
    RF[_FINISH, r] = F[_T]
    buf[IS[_BUF_T]] = r
    IS[_BUF_T] += 1
    seat = R[_SLOT, r]
    seat_rid[seat] = -1
    seats[(IS[_SEAT_H] + IS[_SEAT_N]) % P[_SEATS]] = seat
    IS[_SEAT_N] += 1


def _step_time(IS: I64, P: I64, F: F64, C: F64, ST: F64) -> float:
    """Seconds (time units) of the coming step: its roofline, or the constant step time."""
    b = float(IS[_NRUN])
    prefill = F[_PREFILL]
    swap = C[_SWAP_T] * IS[_SWAP]
    if P[_ROOF]:
        compute = C[_PER_TOK] * (b + prefill)
        memory = C[_BASE] + C[_PER_CTX] * F[_CTX]
        ST[ST_PREFILL_TIME] += max(memory, compute) - max(memory, C[_PER_TOK] * b)
        return float(C[_OVER] + max(memory, compute) + swap)
    ST[ST_PREFILL_TIME] += C[_PER_TOK] * prefill
    return float(C[_BASE] + C[_PER_TOK] * prefill + swap)


def _account(IS: I64, P: I64, ST: F64) -> None:
    ST[ST_STEPS] += 1
    ST[ST_BATCH_SUM] += IS[_NRUN]
    if P[_SHARE]:
        ST[ST_BLOCKS_SAVED_SUM] += (P[_PROMPT] // P[_BS]) * (IS[_NSHARE] - IS[_NPROMPT])
    if P[_BLOCKS] >= 0:
        used = P[_BLOCKS] - IS[_FREE] - IS[_CACHED]
        ST[ST_BLOCKS_SUM] += used
        ST[ST_PEAK_BLOCKS] = max(ST[ST_PEAK_BLOCKS], used)


def _advance(IS: I64, P: I64, F: F64, C: F64, ST: F64, t: float) -> float:
    """Run one step from time ``t``: every running sequence generates a token; its end time."""
    _account(IS, P, ST)
    t_next = t + _step_time(IS, P, F, C, ST)
    F[_CTX] += IS[_NRUN]
    F[_PREFILL] = 0.0
    IS[_SWAP] = 0
    IS[_S] += 1
    return float(t_next)


def _quiet(IS: I64, P: I64, F: F64, R: I32, W: I64, WF: F64, H: I64, cnt: I64, t: float) -> bool:
    """Whether the boundary at ``t`` (after step ``S - 1``) changes nothing but the blocks the next
    step takes: no completion, publication or pending weight update, no admission possible (no
    seat or preempted rollout waiting, or not even its smallest need fits), and those blocks free.
    The loop then runs the next step at once, doing exactly what the full boundary would have
    done."""
    if F[_NEXT_PUB] <= t:
        return False
    if P[_CAL] > 0:  # a completion due at the step just run
        if H[3, 0, (IS[_S] - 1) & (P[_CAL] - 1)] >= 0:
            return False
    elif IS[_HN] > 0 and H[0, 0, 0] // KEY < IS[_S]:
        return False
    if P[_PARTIAL] != _NONE and IS[_APPLIED] != IS[_VERSION]:
        return False
    if P[_BLOCKS] < 0:
        return bool(IS[_SEAT_N] == 0 and IS[_HN + 2] == 0)
    if IS[_HN + 2] > 0 or IS[_SEAT_N] > 0:  # the head of the queue: does even its least fit?
        own = P[_PROMPT] % P[_BS] if P[_SHARE] else P[_PROMPT]
        if IS[_HN + 2] > 0:
            r = H[2, 1, 0]
            if W[_STATE, R[_SLOT, r]] != _PAUSED or W[_RID, R[_SLOT, r]] != r:
                return False
            own += W[_G0, R[_SLOT, r]]
        if _fits(IS, P, cnt, 0, own):
            return False
    return bool(cnt[IS[_S] % P[_BS]] <= IS[_FREE] + IS[_CACHED])


def run_loop(
    P: I64, C: F64, taus: F64, lengths: I64, R: I32, W: I64, WF: F64, RF: F64, PR: I64, LRU: I64,
    SEG: I64, SEGT: F64, buf: I64, pub: F64, IS: I64, F: F64, ST: F64,
    H: I64, seats: I64, seat_rid: I64, nxt: I64, cnt: I64,
) -> None:  # fmt: skip
    """Run the engine until the last publication or an error code in ``IS[_ERR]`` (see module).

    ``seats`` holds ``0 .. slots - 1``, ``seat_rid`` ``-1``, ``nxt`` and ``cnt`` zeros (``cnt`` of
    length ``block_size``), ``H`` room for the two heaps and the stack: completions, newest running (a
    stack of negated schedule numbers, the newest on top), preempted; with a calendar
    (``P[_CAL] > 0``), two more rows: its buckets, and its entries in place of the completions'
    heap."""
    n = P[_SEATS]
    IS[_SEAT_N] = n
    IS[_FREE] = P[_BLOCKS]
    F[_NEXT_PUB] = math.inf
    if P[_CAL] > 0:  # the calendar's buckets empty, its entries all free
        for b in range(P[_CAL]):
            H[3, 0, b] = -1
            H[3, 1, b] = -1
        for e in range(H.shape[2]):
            H[4, 1, e] = e + 1
        H[4, 1, H.shape[2] - 1] = -1
        IS[_EFREE] = 0
    while True:
        _admit(IS, P, F, R, W, WF, RF, PR, LRU, ST, lengths, nxt, seats, seat_rid, cnt, H)
        _make_room(IS, P, F, R, W, WF, RF, PR, LRU, ST, cnt, H)
        if IS[_ERR]:
            return
        t = F[_T]
        stepped = IS[_NRUN] > 0
        if not stepped:
            if F[_NEXT_PUB] == math.inf:
                IS[_ERR] = ERR_STUCK
                IS[_ERR_A] = -1
                return
            t_next = F[_NEXT_PUB]  # nothing runs: the clock jumps to the trainer's publication
        else:
            t_next = _advance(IS, P, F, C, ST, t)
            while _quiet(IS, P, F, R, W, WF, H, cnt, t_next):  # a boundary where nothing happens
                F[_T] = t_next
                if P[_BLOCKS] >= 0:
                    _alloc(IS, P, PR, LRU, cnt[IS[_S] % P[_BS]])
                t_next = _advance(IS, P, F, C, ST, t_next)
        while F[_NEXT_PUB] < t_next:  # published during the step: the trainer moves on at once
            t_pub = F[_NEXT_PUB]
            _publish(IS, P, F, pub)
            if IS[_DONE]:
                return
            _try_train(IS, P, F, R, W, WF, buf, taus, t_pub)
        F[_T] = t_next
        if stepped:
            _complete(IS, P, F, R, W, WF, RF, PR, LRU, buf, seats, seat_rid, cnt, H, IS[_S] - 1)
        _try_train(IS, P, F, R, W, WF, buf, taus, t_next)
        _admit(IS, P, F, R, W, WF, RF, PR, LRU, ST, lengths, nxt, seats, seat_rid, cnt, H)
        while F[_NEXT_PUB] == t_next:  # published at this boundary: after its completions
            _publish(IS, P, F, pub)
            if IS[_DONE]:
                return
            if P[_PARTIAL] != _NONE and IS[_APPLIED] != IS[_VERSION]:
                _update(
                    IS, P, F, R, W, WF, RF, PR, LRU, ST, SEG, SEGT, lengths, nxt, seats,
                    seat_rid, cnt, H,
                )  # fmt: skip
            _try_train(IS, P, F, R, W, WF, buf, taus, t_next)
        if P[_PARTIAL] != _NONE and IS[_APPLIED] != IS[_VERSION]:  # checked here: a call costs
            _update(
                IS, P, F, R, W, WF, RF, PR, LRU, ST, SEG, SEGT, lengths, nxt, seats, seat_rid,
                cnt, H,
            )  # fmt: skip


def _update(
    IS: I64, P: I64, F: F64, R: I32, W: I64, WF: F64, RF: F64, PR: I64, LRU: I64, ST: F64, SEG: I64,
    SEGT: F64, lengths: I64, nxt: I64, seats: I64, seat_rid: I64, cnt: I64,
    H: I64,
) -> None:  # fmt: skip
    """New weights reach the rollouts in flight (once per version); restarted seats relaunch."""
    if P[_PARTIAL] == _NONE or IS[_APPLIED] == IS[_VERSION]:
        return
    _interrupt(IS, P, F, R, W, WF, RF, PR, LRU, ST, SEG, SEGT, seats, seat_rid, cnt, H)
    IS[_APPLIED] = IS[_VERSION]
    _admit(IS, P, F, R, W, WF, RF, PR, LRU, ST, lengths, nxt, seats, seat_rid, cnt, H)
