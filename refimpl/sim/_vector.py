"""The vectorized engine: numpy only, for the modes whose timing does not depend on versions.

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
finish time in their high bits and the row in their low ones (``_processing_order``). Every other
column is a few linear passes over the rows, each computed once (the step and the launch version
are both ``rank // B``, read at the row and at its predecessor).

``sync`` (``B <= N``) and ``first_k`` with ``leftovers='drop'`` (``n <= N``) loop over steps with
numpy over slots.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from refimpl.sim._config import SimConfig
from refimpl.sim._lengths import LengthSupply
from refimpl.sim._trace import STATUS, RawTrace

__all__ = ["run_vector"]


def _processing_order(
    finish: NDArray[np.float64],
    predecessors: Callable[[], tuple[NDArray[np.int64], NDArray[np.int32]]],
    n_slots: int,
    n_comp: int,
) -> tuple[NDArray[np.int64], NDArray[np.int64] | None]:
    """Rows in processing order (see the module docstring).

    ``finish`` holds every launched row's finish time; the first ``n_comp`` positions of the order
    are the completions (the other rows finish after the run's end). ``predecessors()`` gives, per
    row, the same slot's previous row (``-1`` for its first) and the slot; it is only called when two
    completions tie. Returns ``(order, lo)``: ``order[p]`` is the row processed ``p``-th; ``lo[p]``
    the first position holding the same time (``None`` when no two completions tie).

    The sort is one ``np.sort`` of 64-bit integers: the bit pattern of a float64 ``>= 0`` orders as
    the float does, so the pattern with its low ``w`` bits replaced by the row number (``2^w`` >
    rows) sorts by time and carries the row along, in half an ``argsort``'s time. Two times that
    agree on every other bit may come out swapped; they are then next to each other, and an exact
    sort of just those positions puts them in order.
    """
    n = finish.size
    width = max(1, (n - 1).bit_length())
    low = np.int64((1 << width) - 1)
    keys = finish.view(np.int64) & ~low
    keys |= np.arange(n, dtype=np.int64)
    keys.sort()
    high = keys >> width
    near = high[1:] == high[:-1]
    del high
    order = np.bitwise_and(keys, low, out=keys)
    if not near.any():
        return order, None
    near_pos = np.flatnonzero(near)
    mark = np.zeros(n, dtype=bool)
    mark[near_pos] = True
    mark[near_pos + 1] = True
    pos = np.flatnonzero(mark)  # runs that share the high bits: put each in exact order
    items = order[pos]
    order[pos] = items[np.lexsort((items, finish[items]))]
    fs = finish[order]
    same = fs[1:] == fs[:-1]
    del fs
    same[n_comp - 1 :] = False  # rows that finish after the end are never processed
    if not same.any():
        return order, None
    prev, slot = predecessors()
    tied_pos = np.flatnonzero(same)
    mark[:] = False
    mark[tied_pos] = True
    mark[tied_pos + 1] = True
    pos = np.flatnonzero(mark)  # positions (in processing order) occupied by tied completions
    items = order[pos]
    rank = np.empty(n, dtype=np.int64)
    while True:
        rank[order] = np.arange(n)
        p = prev[items]
        # initial launches rank below every completion, by slot index
        key = np.where(p >= 0, rank[np.maximum(p, 0)], slot[items].astype(np.int64) - n_slots)
        new_items = items[np.lexsort((key, finish[items]))]
        if np.array_equal(new_items, items):
            break
        items = new_items
        order[pos] = items
    start = np.ones(n, dtype=bool)
    start[1:] = ~same
    lo = np.maximum.accumulate(np.where(start, np.arange(n), 0))
    return order, lo


def _async(cfg: SimConfig, supply: LengthSupply) -> RawTrace:
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
        below = [int(np.searchsorted(row, lower, side="left")) for row in fin]
        top = [int(np.searchsorted(row, upper, side="right")) for row in fin]
        middle = np.concatenate([row[a:z] for row, a, z in zip(fin, below, top, strict=True)])
        k = target - 1 - sum(below)
        t_end = float(np.partition(middle, k)[k])
        del middle
        # each slot's finish times are sorted: count its completions by bisection
        n_done = np.array([np.searchsorted(row, t_end, side="right") for row in fin])
        short = np.flatnonzero(n_done >= fin.shape[1])
        if short.size == 0:
            break
        if fin.shape[1] < k_cols:  # accumulate more of the rows
            width = 2 * width
            continue
        supply.extend(slot=int(short[0]), needed=k_cols + 1)
    n_launched = n_done + 1
    # rows: every launched rollout, slot-major (slot, column); each slot's last row is in flight
    length = np.concatenate([row[:k] for row, k in zip(lengths, n_launched, strict=True)])
    finish = np.concatenate([row[:k] for row, k in zip(fin, n_launched, strict=True)])
    del fin
    n_rows = finish.size
    n_comp = n_rows - n_slots
    row_start = np.zeros(n_slots + 1, dtype=np.int64)
    np.cumsum(n_launched, out=row_start[1:])
    first_row, last_row = row_start[:-1], row_start[1:] - 1
    launch = np.empty(n_rows)
    launch[1:] = finish[:-1]
    launch[first_row] = 0.0
    slot = np.repeat(np.arange(n_slots, dtype=np.int32), n_launched)
    columns = np.arange(int(n_launched.max()), dtype=np.int32)
    index = np.concatenate([columns[:k] for k in n_launched])

    def predecessors() -> tuple[NDArray[np.int64], NDArray[np.int32]]:
        prev = np.arange(-1, n_rows - 1, dtype=np.int64)
        prev[first_row] = -1
        return prev, slot

    order, lo_sorted = _processing_order(finish, predecessors, n_slots, n_comp)
    # crank: the row's position in processing order (rows in flight: n_comp and later)
    crank = np.empty(n_rows, dtype=np.int64)
    crank[order] = np.arange(n_rows, dtype=np.int64)
    publish = finish[order[b - 1 : target : b]]  # T_j, j = 0..steps-1
    # version at launch of row r (index > 0) = #{j : T_j < finish[r-1]} = lo // B (capped),
    # lo = first processing position holding the predecessor's finish time (crank without ties)
    quotient = np.empty(n_rows, dtype=np.int32)  # crank // B: the step of a trained row
    np.floor_divide(crank, b, out=quotient, casting="unsafe")
    version = np.empty(n_rows, dtype=np.int32)
    if lo_sorted is None:
        version[1:] = quotient[:-1]
    else:
        lo = np.empty(n_rows, dtype=np.int64)
        lo[order] = lo_sorted
        np.floor_divide(lo[:-1], b, out=version[1:], casting="unsafe")
        del lo, lo_sorted
    del order
    np.minimum(version, steps, out=version)
    version[first_row] = 0
    untrained = crank >= target  # pending, and (from n_comp on) in flight
    step = quotient
    step[untrained] = -1
    stale = step - version
    stale[untrained] = -1
    status = np.where(untrained, np.int8(STATUS["pending"]), np.int8(STATUS["trained"]))
    status[last_row] = STATUS["unfinished"]
    busy_rows = np.minimum(finish, t_end)
    busy_rows -= launch
    busy = float(np.sum(busy_rows))
    del busy_rows
    finish[last_row] = np.nan
    crank[untrained] = -1
    return RawTrace(
        slot=slot,
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


def run_vector(cfg: SimConfig, supply: LengthSupply, trainer_times: Any) -> RawTrace:
    """Run the vectorized engine (the caller checked ``cfg.vectorizable``)."""
    if cfg.mode == "async":
        return _async(cfg, supply)
    return _stepwise(cfg, supply, np.asarray(trainer_times, dtype=np.float64))
