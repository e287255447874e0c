"""The vectorized engine: numpy, for the modes whose timing does not depend on versions.

``async`` (no drop, zero trainer time, no partial rollouts, no preemption, no slowdown): slot ``i``'s
completion times are the cumulative sums of its decode times; all completions are merged in the order
the event engine (and SimPy) processes them; batch ``j`` is completions ``[jB, (j+1)B)``, published at
``T_j``, the completion time of its last sample; a launch at time ``t`` sees version
``#{j : T_j < t}`` (the tie rule: a launch at the publication instant sees the old version).

Tie order. Completions at one instant are processed in the order their rollouts were launched, and
launches at one instant in the order of the completions that freed the slots (initial launches by slot
index). So a completion's rank is the lexicographic order of ``(finish time, rank of the slot's
previous completion)``. Ties are rare for continuous lengths and common for integer ones; they are
resolved by a fixed-point iteration on the tied completions only (it converges in at most the depth
of the longest chain of tied predecessors, usually one or two rounds).

Cost. The sort is the one step that is not linear: one ``np.sort`` of 64-bit integers that carry the
finish time in their high bits and the row in their low ones (``_processing_order``). With numba
installed, ``simulate``'s ``auto`` engine runs that step compiled instead
(:mod:`refimpl.sim._vector_compiled`: a bucket sort, linear for times spread over the run, and the
ties settled in one pass), with the same result; ``engine='vector'`` stays numpy only. Every other
column is a few linear passes over the rows, each computed once (the step and the launch version
are both ``rank // B``, read at the row and at its predecessor; the generator's busy time is
``N`` times the end, as every slot runs from 0 to the end). Memory: at 10^6 rows each column is
megabytes, and every fresh one costs its first-touch page faults (a third of the time), so the
one temporary of full length is the cumulative sums' buffer: it holds the sort's keys, and is
freed before the int32 columns are allocated, which take its place; ``0..n-1`` is produced in
cache-sized blocks (``_with_iota``), never as a column.

``sync`` (``B <= N``) and ``first_k`` with ``leftovers='drop'`` (``n <= N``) loop over steps with
numpy over slots.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from refimpl.sim import _vector_compiled
from refimpl.sim._config import SimConfig
from refimpl.sim._lengths import LengthSupply
from refimpl.sim._trace import STATUS, RawTrace

__all__ = ["run_vector"]


_CHUNK = 1 << 15  # rows per block where 0..n-1 is produced block by block (stays in cache)


def _with_iota(n: int, first: int, use: Callable[[int, int, NDArray[np.int64]], object]) -> None:
    """Call ``use(s, e, values)`` per block ``[s, e)`` of ``0..n-1``; ``values`` = ``first + s..e``.

    An ``arange(n)`` built block by block in one cache-sized buffer: no ``n``-long temporary.
    """
    base = np.arange(first, first + min(n, _CHUNK), dtype=np.int64)
    buf = np.empty_like(base)
    for s in range(0, n, _CHUNK):
        e = min(s + _CHUNK, n)
        np.add(base[: e - s], s, out=buf[: e - s])
        use(s, e, buf[: e - s])


def _scatter_iota(out: NDArray[np.int64], order: NDArray[np.int64]) -> None:
    """``out[order] = arange(order.size)`` (the inverse permutation) without the ``arange``."""

    def put(s: int, e: int, values: NDArray[np.int64]) -> None:
        out[order[s:e]] = values

    _with_iota(order.size, 0, put)


def _counts(fin: NDArray[np.float64], x: float, side: str) -> NDArray[np.int64]:
    """Per row of ``fin`` (each row sorted), ``np.searchsorted(row, x, side)``, all rows at once.

    The same bisection as ``searchsorted`` run on every row in lockstep: ``log2(columns)`` rounds of
    a few operations on one value per row, instead of one Python-level call per row.
    """
    n_rows, n_cols = fin.shape
    rows = np.arange(n_rows)
    lo = np.zeros(n_rows, dtype=np.int64)
    hi = np.full(n_rows, n_cols, dtype=np.int64)
    while True:
        open_ = lo < hi
        if not open_.any():
            return lo
        mid = (lo + hi) >> 1
        value = fin[rows, np.minimum(mid, n_cols - 1)]
        right = (value <= x) if side == "right" else (value < x)
        right &= open_
        left = open_ & ~right
        np.copyto(lo, mid + 1, where=right)
        np.copyto(hi, mid, where=left)


def _with_next(pos: NDArray[np.int64]) -> NDArray[np.int64]:
    """The sorted union of ``pos`` and ``pos + 1`` (``pos`` sorted, distinct), in linear time.

    >>> _with_next(np.array([2, 3, 7])).tolist()
    [2, 3, 4, 7, 8]
    """
    ends = np.empty(pos.size, dtype=bool)  # pos[i] + 1 is not pos[i + 1]: it is a new position
    np.not_equal(pos[1:], pos[:-1] + 1, out=ends[:-1])
    ends[-1:] = True
    out = np.concatenate((pos, pos[ends] + 1))
    out.sort(kind="stable")  # two sorted runs: merged in linear time
    return out


def _ranges(lo: NDArray[np.int64], hi: NDArray[np.int64]) -> NDArray[np.int64]:
    """The integers of ``[lo[0], hi[0])``, then of ``[lo[1], hi[1])``, ... (ranges in order)."""
    sizes = hi - lo
    starts = np.zeros(sizes.size, dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    return np.repeat(lo - starts, sizes) + np.arange(int(sizes.sum()), dtype=np.int64)


def _processing_order(
    finish: NDArray[np.float64],
    predecessors: Callable[[], tuple[NDArray[np.int64], NDArray[np.int32]]],
    n_slots: int,
    n_comp: int,
    keys: NDArray[np.int64],
    scratch: NDArray[np.int64],
) -> tuple[NDArray[np.int64], NDArray[np.int64] | None]:
    """Rows in processing order (see the module docstring).

    ``finish`` holds every launched row's finish time; the first ``n_comp`` positions of the order
    are the completions (the other rows finish after the run's end). ``predecessors()`` gives, per
    row, the same slot's previous row (``-1`` for its first) and the slot; it is only called when two
    completions tie. ``keys`` and ``scratch`` are int64 buffers of ``n`` values the caller does not
    need (overwritten; ``order`` is returned in ``keys``). Returns ``(order, lo)``: ``order[p]`` is
    the row processed ``p``-th; ``lo[p]`` the first position holding the same time (``None`` when
    no two completions tie).

    The sort is one ``np.sort`` of 64-bit integers: the bit pattern of a float64 ``>= 0`` orders as
    the float does, so the pattern with its low ``w`` bits replaced by the row number (``2^w`` >
    rows) sorts by time and carries the row along, in half an ``argsort``'s time. Two times that
    agree on every other bit may come out swapped; they are then next to each other, and an exact
    sort of just those positions puts them in order. Two equal times agree on every other bit, so
    exact ties are looked for among those neighbours only.
    """
    n = finish.size
    width = max(1, (n - 1).bit_length())
    low = np.int64((1 << width) - 1)
    bits = finish.view(np.int64)

    def fill(s: int, e: int, rows: NDArray[np.int64]) -> None:
        np.bitwise_and(bits[s:e], ~low, out=keys[s:e])
        keys[s:e] |= rows

    _with_iota(n, 0, fill)
    # The rows go slot by slot, each slot's finish times increasing: a merge sort (numpy's
    # "stable") finds those sorted runs and merges them, about twice as fast here as the default
    # sort. The keys are distinct (the low bits hold the row), so the order is the same.
    keys.sort(kind="stable")
    # neighbours whose high bits agree: their xor has no bit above the low w
    xor = np.bitwise_xor(keys[1:], keys[:-1], out=scratch[: n - 1])
    near_pos = np.flatnonzero(xor <= low)
    del xor
    order = np.bitwise_and(keys, low, out=keys)
    if near_pos.size == 0:
        return order, None
    equal = finish[order[near_pos]] == finish[order[near_pos + 1]]
    if not equal.all():
        # runs that share the high bits hold two different times: their exact order. (A run of
        # equal times is in row order already, which is the exact order: integer lengths give
        # many such runs and no re-sort.)
        pos = _with_next(near_pos)
        items = order[pos]
        order[pos] = items[np.lexsort((items, finish[items]))]
        equal = finish[order[near_pos]] == finish[order[near_pos + 1]]
    tied_pos = near_pos[equal & (near_pos < n_comp - 1)]  # rows after the end are never processed
    if tied_pos.size == 0:
        return order, None
    prev, slot = predecessors()
    pos = _with_next(tied_pos)  # positions (in processing order) of tied completions
    items = order[pos]
    # the runs of one time among them (pos is in time order): a tie is ordered within its run
    run = np.zeros(pos.size, dtype=np.int64)
    np.cumsum(finish[items[1:]] != finish[items[:-1]], out=run[1:])
    run *= n + n_slots  # key + n_slots is in [0, n + n_slots): one int64 key per (run, key)
    run += n_slots
    rank = scratch  # rank[row]: the row's position in the order
    _scatter_iota(rank, order)
    # per tied row (permuted along with it): its predecessor, and the key of a slot's first
    # launch, which ranks below every completion, by slot index
    p = prev[items]
    first = p < 0
    np.maximum(p, 0, out=p)
    first_key = slot[items].astype(np.int64) - n_slots
    while True:
        # keys within a run are distinct (a row's rank, or a slot's first launch): the order is
        # the one that sorts them, and it is reached when they are sorted already
        key = rank[p]
        np.copyto(key, first_key, where=first)
        key += run
        bad = np.flatnonzero(key[1:] <= key[:-1])  # within a run: runs' keys do not overlap
        if bad.size == 0:
            break
        if 8 * bad.size >= key.size:
            perm = np.argsort(key, kind="stable")
            items, p, first, first_key = items[perm], p[perm], first[perm], first_key[perm]
            order[pos] = items
            rank[items] = pos  # only the tied rows moved
            continue
        # few runs out of order (the later rounds): sort just those runs; the others are sorted
        # already, which a sort of all of them would leave as they are
        runs = np.unique(run[bad])
        sel = _ranges(np.searchsorted(run, runs, "left"), np.searchsorted(run, runs, "right"))
        perm = sel[np.argsort(key[sel], kind="stable")]
        items[sel], p[sel], first[sel], first_key[sel] = (
            items[perm],
            p[perm],
            first[perm],
            first_key[perm],
        )
        order[pos[sel]] = items[sel]
        rank[items[sel]] = pos[sel]
    lo = np.empty(n, dtype=np.int64)

    def positions(s: int, e: int, values: NDArray[np.int64]) -> None:
        lo[s:e] = values

    _with_iota(n, 0, positions)
    lo[tied_pos + 1] = 0  # a tied position's run starts further up
    np.maximum.accumulate(lo, out=lo)
    return order, lo


def _finish_times(
    cfg: SimConfig, supply: LengthSupply
) -> tuple[NDArray[np.float64], NDArray[np.float64], float, NDArray[np.int64]]:
    """``(lengths, fin, t_end, n_done)``: the length matrix, each slot's cumulative finish times
    over the columns accumulated, the end (the ``steps × B``-th smallest finish time) and each
    slot's completions by then; the supply is extended until every slot's last launch is known."""
    n_slots, b, steps = cfg.slots, cfg.batch, cfg.steps
    target = steps * b
    c_hi, c_lo = -(-target // n_slots), target // n_slots
    width = c_hi + c_hi // 8 + 16  # columns to accumulate: the run's share per slot, and a margin
    while True:
        lengths = supply.matrix
        k_cols = lengths.shape[1]
        if lengths.size < target:
            supply.extend(slot=0, needed=c_hi + 1)
            continue
        used = lengths[:, : min(width, k_cols)]
        if cfg.token_time == 1.0 and cfg.prefill_time == 0.0:
            dur = used  # l * 1.0 + 0.0 == l exactly
        else:
            dur = used * cfg.token_time + cfg.prefill_time
        fin = np.cumsum(dur, axis=1)  # each slot's prefix sums: a prefix of the whole row's
        del dur
        # The end is the target-th smallest finish time. Every slot has c_hi finish times <= upper,
        # so it is <= upper; a slot has at most c_lo - 1 finish times < lower, fewer than target
        # in all, so it is >= lower: select it among the times in [lower, upper] only.
        upper = float(fin[:, c_hi - 1].max())
        lower = float(fin[:, c_lo - 1].min()) if c_lo > 0 else -np.inf
        below = _counts(fin, lower, "left").tolist()
        top = _counts(fin, upper, "right").tolist()
        middle = np.concatenate([row[a:z] for row, a, z in zip(fin, below, top, strict=True)])
        k = target - 1 - sum(below)
        t_end = float(np.partition(middle, k)[k])
        del middle
        # each slot's finish times are sorted: count its completions by bisection
        n_done = _counts(fin, t_end, "right")
        short = np.flatnonzero(n_done >= fin.shape[1])
        if short.size == 0:
            return lengths, fin, t_end, n_done
        if fin.shape[1] < k_cols:  # accumulate more of the rows
            width = 2 * width
            continue
        supply.extend(slot=int(short[0]), needed=k_cols + 1)


def _async(cfg: SimConfig, supply: LengthSupply, compiled: bool) -> RawTrace:
    n_slots, b, steps = cfg.slots, cfg.batch, cfg.steps
    target = steps * b
    lengths, fin, t_end, n_done = _finish_times(cfg, supply)
    n_launched = n_done + 1
    counts = n_launched.tolist()
    # rows: every launched rollout, slot-major (slot, column); each slot's last row is in flight
    n_rows = int(n_launched.sum())
    n_comp = n_rows - n_slots
    row_start = np.zeros(n_slots + 1, dtype=np.int64)
    np.cumsum(n_launched, out=row_start[1:])
    first_row, last_row = row_start[:-1], row_start[1:] - 1
    # every slot runs a rollout from 0 to the end: the rows' busy times, min(finish, end) -
    # launch, add up to the end on each slot
    busy = n_slots * t_end
    slot: NDArray[np.int32] | None = None

    def slots() -> NDArray[np.int32]:
        nonlocal slot
        if slot is None:
            slot = np.repeat(np.arange(n_slots, dtype=np.int32), n_launched)
        return slot

    def predecessors() -> tuple[NDArray[np.int64], NDArray[np.int32]]:
        prev = np.empty(n_rows, dtype=np.int64)

        def fill(s: int, e: int, values: NDArray[np.int64]) -> None:
            prev[s:e] = values

        _with_iota(n_rows, -1, fill)
        prev[first_row] = -1
        return prev, slots()

    # crank: the row's position in processing order (rows in flight: n_comp and later); the
    # sort's other scratch until then
    crank = np.empty(n_rows, dtype=np.int64)
    straddle = None  # the compiled ordering's exceptions to lo // B == crank // B (its runs)
    if _vector_compiled.AVAILABLE and compiled:
        # the rows, their keys and their order in compiled passes (fin's memory holds the order)
        length, finish, launch, order, straddle = _vector_compiled.processing_order(
            lengths, fin, n_launched, slots(), last_row, n_comp, b, crank
        )
        lo_sorted = None
        del fin
    else:
        length = np.concatenate([row[:k] for row, k in zip(lengths, counts, strict=True)])
        finish = np.concatenate([row[:k] for row, k in zip(fin, counts, strict=True)])
        launch = np.empty(n_rows)
        launch[1:] = finish[:-1]
        launch[first_row] = 0.0
        # Memory: fin's buffer (fin.size >= n_rows: no slot launched past its accumulated
        # columns) is the one scratch array; it holds the sort's keys, and is freed before the
        # int32 columns are allocated, so they take its place.
        keys = fin.reshape(-1)[:n_rows].view(np.int64)
        del fin
        order, lo_sorted = _processing_order(finish, predecessors, n_slots, n_comp, keys, crank)
        del keys
        _scatter_iota(crank, order)
    publish = finish[order[b - 1 : target : b]]  # T_j, j = 0..steps-1
    # version at launch of row r (index > 0) = #{j : T_j < finish[r-1]} = lo // B (capped),
    # lo = first processing position holding the predecessor's finish time (crank without ties;
    # the compiled ordering gives crank, and the runs where lo // B differs, in straddle)
    lo: NDArray[np.int64] | None = None
    if lo_sorted is not None:
        lo = np.empty(n_rows, dtype=np.int64)
        lo[order] = lo_sorted
        del lo_sorted
    quotient = np.empty(n_rows, dtype=np.int32)  # crank // B: the step of a trained row
    np.floor_divide(crank, b, out=quotient, casting="unsafe")
    version = _launch_versions(quotient, lo, order, straddle, first_row, b=b, steps=steps)
    del lo, order
    step, stale, status = _step_columns(quotient, version, crank, last_row, steps=steps)
    finish[last_row] = np.nan
    columns = np.arange(max(counts), dtype=np.int32)
    index = np.concatenate([columns[:k] for k in counts])
    return RawTrace(
        slot=slots(),
        column=index,
        launch_time=launch,
        finish_time=finish,
        length=length,
        launch_version=version,
        min_version=version,
        step=step,
        staleness=stale,
        status=status,
        rank=crank,
        wasted_tokens=None,
        recomputed_tokens=None,
        segments=None,
        publish_times=publish,
        end_time=t_end,
        generator_busy=busy,
        trainer_busy=0.0,
    )


def _launch_versions(
    quotient: NDArray[np.int32],
    lo: NDArray[np.int64] | None,
    order: NDArray[np.int64],
    straddle: NDArray[np.int64] | None,
    first_row: NDArray[np.int64],
    *,
    b: int,
    steps: int,
) -> NDArray[np.int32]:
    """Each row's version at launch: ``lo // B`` of its predecessor, capped at ``steps`` (``lo``
    is ``None`` where it is ``crank``, whose quotient is given; ``straddle`` holds the compiled
    ordering's runs where it is not), 0 for a slot's first row."""
    version = np.empty(quotient.size, dtype=np.int32)
    if lo is None:
        np.minimum(quotient[:-1], steps, out=version[1:])
    else:
        np.floor_divide(lo[:-1], b, out=version[1:], casting="unsafe")
        np.minimum(version, steps, out=version)
    if straddle is not None:
        for start, end in straddle.tolist():  # a run's successors all see its first position's
            version[order[start + 1 : end] + 1] = min(start // b, steps)
    version[first_row] = 0
    return version


def _step_columns(
    quotient: NDArray[np.int32],
    version: NDArray[np.int32],
    crank: NDArray[np.int64],
    last_row: NDArray[np.int64],
    *,
    steps: int,
) -> tuple[NDArray[np.int32], NDArray[np.int32], NDArray[np.int8]]:
    """``(step, staleness, status)`` from ``crank // B`` (``quotient``, which becomes ``step``);
    a row past the last step is pending (in flight if it is its slot's last), with step,
    staleness and ``crank`` set to -1 in place."""
    untrained = quotient >= steps  # crank >= target: pending, and (from n_comp on) in flight
    step = quotient
    np.copyto(step, -1, where=untrained)
    stale = np.subtract(step, version)
    np.copyto(stale, -1, where=untrained)
    status = np.where(untrained, np.int8(STATUS["pending"]), np.int8(STATUS["trained"]))
    status[last_row] = STATUS["unfinished"]
    np.copyto(crank, -1, where=untrained)
    return step, stale, status


def _stepwise(cfg: SimConfig, supply: LengthSupply, trainer_times: NDArray[np.float64]) -> RawTrace:
    """``sync`` (``n = k = B``) and ``first_k`` with dropped leftovers, every launch on its own slot."""
    b, steps = cfg.batch, cfg.steps
    n = b if cfg.mode == "sync" else int(cfg.launch or cfg.slots)
    while supply.matrix.shape[1] < steps:
        supply.extend(slot=0, needed=steps)
    lengths = supply.matrix
    dur = lengths[:n, :steps] * cfg.token_time + cfg.prefill_time  # (n, steps)
    slots = np.arange(n, dtype=np.int32)
    launch = np.empty((steps, n))
    finish = np.empty((steps, n))
    selected = np.zeros((steps, n), dtype=bool)
    rank = np.full((steps, n), -1, dtype=np.int64)
    publish = np.empty(steps)
    consume = np.empty(steps)
    start = 0.0
    for j in range(steps):
        f = start + dur[:, j]
        order = np.argsort(f, kind="stable")  # ties: launch order = slot order
        t_k = float(f[order[b - 1]])
        launch[j] = start
        finish[j] = f
        chosen = order[:b]
        selected[j, chosen] = True
        rank[j, chosen] = j * b + np.arange(b)
        consume[j] = t_k
        start = t_k + float(trainer_times[j])
        publish[j] = start
    end = float(publish[-1])
    # rows slot-major: slot i, column j
    launch_r = launch.T.ravel()
    finish_r = finish.T.ravel()
    sel = selected.T.ravel()
    cons = np.repeat(consume[None, :], n, axis=0).ravel()
    stop = np.where(sel, finish_r, cons)  # dropped leftovers stop at the cut-off
    length = lengths[:n, :steps].ravel()
    tokens_done = np.clip((stop - launch_r - cfg.prefill_time) / cfg.token_time, 0.0, length)
    wasted = np.where(sel, 0.0, tokens_done)
    step = np.repeat(np.arange(steps, dtype=np.int32)[None, :], n, axis=0).ravel()
    version = step.copy()
    trained_step = np.where(sel, step, -1).astype(np.int32)
    return RawTrace(
        slot=np.repeat(slots, steps),
        column=np.tile(np.arange(steps, dtype=np.int32), n),
        launch_time=launch_r,
        finish_time=stop,
        length=length,
        launch_version=version,
        min_version=version,
        step=trained_step,
        staleness=np.where(sel, 0, -1).astype(np.int32),
        status=np.where(sel, STATUS["trained"], STATUS["dropped"]).astype(np.int8),
        rank=rank.T.ravel(),
        wasted_tokens=wasted,
        recomputed_tokens=None,
        segments=None,
        publish_times=publish,
        end_time=end,
        generator_busy=float(np.sum(stop - launch_r)),
        trainer_busy=float(np.sum(trainer_times)),
    )


def run_vector(
    cfg: SimConfig, supply: LengthSupply, trainer_times: Any, *, compiled: bool = False
) -> RawTrace:
    """Run the vectorized engine (the caller checked ``cfg.vectorizable``); ``compiled``: its
    ordering step with numba's kernels (:mod:`refimpl.sim._vector_compiled`) when installed."""
    if cfg.mode == "async":
        return _async(cfg, supply, compiled)
    return _stepwise(cfg, supply, np.asarray(trainer_times, dtype=np.float64))
