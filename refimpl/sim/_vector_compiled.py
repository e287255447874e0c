"""The vectorized engine's processing order, compiled with numba (``refimpl[fast]``).

:func:`processing_order` computes what :func:`refimpl.sim._vector._processing_order` computes (and
the ranks the engine derives from it), with the same result: ``tests/test_sim_agreement.py``
checks it against the numpy version and the event engine, ties included. Two steps differ in
method, and one pass does the rest.

**The sort.** The keys are the bit patterns of finish times (float64 ``>= 0``) with the row number
in their low bits. ``np.sort`` merges the slots' sorted runs in ``O(n log N)``; :func:`sort_keys` is
a bucket sort in ``O(n)`` for times spread over the run, which the completions of many slots are,
and gives the same keys in the same order (a sort's result does not depend on the algorithm):

1. Read as a float64, a non-negative int64 is a non-decreasing function of it (the ordering that
   makes the keys work at all), so ``bucket = floor((value - min) * M / (max - min))`` is one too:
   IEEE subtraction and multiplication round monotonically. A key's bucket is never below a
   smaller key's.
2. Count the keys per bucket, turn the counts into starts, and place each key at its bucket's next
   free position (a counting sort by bucket: one read of the keys per pass, one write each). The
   buckets of this first pass are coarse, a few thousand keys each, so that its writes go to a
   few thousand places at a time, which stay in cache.
3. Sort each coarse bucket, now in cache, the same way by finer buckets (four keys each on
   average, bucket ``floor((value * scale - b) * K)`` within coarse bucket ``b``: non-decreasing
   in the value too), and sort those by insertion. A coarse bucket of a few keys is sorted by
   insertion at once, and one of very many (equal or nearly equal times piled up) by a heap
   sort, so the worst case stays ``O(n log n)``.

At 10^6 keys laid out as the engine's, this takes 17 ms against ``np.sort``'s 32; at 10^7, 0.22
against 0.35 s (one pass with fine buckets at once: 0.31 s, its writes all over memory).

**Ties.** Completions at one instant are ordered by the rank of the same slot's previous
completion (conventions §async-dispatch). The numpy version iterates over all tied runs at once to a
fixed point; here one pass in time order settles each run in turn: a predecessor finishes no later
than its row, so it is in an earlier run (settled already) or in the same one. A run is sorted by
its keys, and sorted again only when it holds its own predecessors (durations that add nothing to
a time), which moved.

**Loaded without numba.** The kernels allocate nothing and use none of numba's runtime, so that,
as the event kernels do, they run from ahead-of-time entries (:mod:`refimpl.sim._aot`), which a
fresh process loads in milliseconds without importing numba; the entries take arrays only (their
scalars in small arrays beside them). :func:`worth_compiling` says when they are used.

Without numba :data:`AVAILABLE` is ``False`` and the engine uses the numpy version.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
from numpy.typing import NDArray

from refimpl.sim import _aot
from refimpl.sim import _compiled as _sim_compiled
from refimpl.sim._aot import Kernel
from refimpl.sim._compiled_cache import njit
from refimpl.sim._config import SimConfig

AVAILABLE = _sim_compiled.AVAILABLE  # numba installed (imported when a kernel is first compiled)

__all__ = ["AVAILABLE", "COMPILE_ROWS", "processing_order", "sort_keys", "worth_compiling"]

#: Keys per coarse bucket (the first pass's: its write streams stay in cache), and per fine
#: bucket within one, on average, when times are spread evenly.
_PER_COARSE = 4096
_PER_BUCKET = 4
#: The longest coarse bucket sorted by finer buckets (one of more keys is heap sorted).
_FINE_MAX = 1 << 16
#: A bucket (or a tied run) with more keys than this is sorted by finer buckets (or a heap
#: sort) rather than by insertion.
_INSERTION_MAX = 24


def _insertion_sort(a: Any, s: int, e: int) -> None:  # pragma: no cover - compiled
    """Sort ``a[s:e]`` in place (a few values, or many that are nearly sorted)."""
    for i in range(s + 1, e):
        k = a[i]
        j = i - 1
        while j >= s and a[j] > k:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = k


def _before(
    a: Any, sa: int, b: Any, sb: int, i: int, j: int, paired: bool
) -> bool:  # pragma: no cover - compiled
    """Whether item ``i`` of :func:`_heap_sort`'s range sorts before item ``j``."""
    x, y = a[sa + i], a[sa + j]
    if x != y or not paired:
        return bool(x < y)
    return bool(b[sb + i] < b[sb + j])


def _swap(
    a: Any, sa: int, b: Any, sb: int, i: int, j: int, paired: bool
) -> None:  # pragma: no cover - compiled
    """Swap items ``i`` and ``j`` of :func:`_heap_sort`'s range (and of ``b``'s, ``paired``)."""
    a[sa + i], a[sa + j] = a[sa + j], a[sa + i]
    if paired:
        b[sb + i], b[sb + j] = b[sb + j], b[sb + i]


def _sift(
    a: Any, sa: int, b: Any, sb: int, root: int, end: int, paired: bool
) -> None:  # pragma: no cover - compiled
    """Move item ``root`` down the heap of items ``[0, end)`` until it is no smaller than its
    children (a heap: every item no smaller than its children ``2i + 1`` and ``2i + 2``)."""
    while True:
        child = 2 * root + 1
        if child >= end:
            return
        if child + 1 < end and _before(a, sa, b, sb, child, child + 1, paired):
            child += 1
        if not _before(a, sa, b, sb, root, child, paired):
            return
        _swap(a, sa, b, sb, root, child, paired)
        root = child


def _heap_sort(
    a: Any, sa: int, b: Any, sb: int, m: int, paired: bool
) -> None:  # pragma: no cover - compiled
    """Sort ``a[sa:sa + m]`` in place; ``paired``: by ``(a, b)`` pairs, ``b[sb:sb + m]`` moving
    with ``a`` (pairs that differ: a stable sort of ``a`` moving ``b``, when ``b`` ascends).

    ``O(m log m)`` in the worst case, with no memory of its own: numpy's sorts in a kernel need
    numba's runtime, which the kernels' ahead-of-time entries leave out (:mod:`refimpl.sim._aot`).
    """
    for root in range(m // 2 - 1, -1, -1):
        _sift(a, sa, b, sb, root, m, paired)
    for end in range(m - 1, 0, -1):
        _swap(a, sa, b, sb, 0, end, paired)
        _sift(a, sa, b, sb, 0, end, paired)


def _bucket(value: float, scale: float, m: int) -> int:  # pragma: no cover - compiled
    """The bucket of a value in ``[0, m / scale]`` (a larger one goes to the last)."""
    b = int(value * scale)
    return b if b < m else m - 1


def _count(values: Any, starts: Any, scale: float) -> None:  # pragma: no cover - compiled
    """``starts[b + 1]``: how many ``values`` fall in bucket ``b`` (``starts``: ``M + 1`` zeros)."""
    m = starts.size - 1
    for i in range(values.size):
        starts[_bucket(values[i], scale, m) + 1] += 1


def _place(
    keys: Any, values: Any, out: Any, starts: Any, scale: float, tmp: Any, fine: Any
) -> None:  # pragma: no cover - compiled
    """Sort ``keys`` into ``out``, by the coarse buckets ``_count`` counted in ``starts``
    (``values``: ``keys`` read as float64), then each coarse bucket by finer ones in ``tmp``
    (``fine``: its counters; a coarse bucket longer than ``tmp`` is heap sorted)."""
    n = keys.size
    m = starts.size - 1
    for b in range(m):
        starts[b + 1] += starts[b]
    for i in range(n):  # starts[b] moves from bucket b's start to its end (b + 1's start)
        b = _bucket(values[i], scale, m)
        out[starts[b]] = keys[i]
        starts[b] += 1
    out_values = out.view(np.float64)
    s = 0
    for b in range(m):
        e = starts[b]
        k = e - s
        if k <= _INSERTION_MAX:
            _insertion_sort(out, s, e)
        elif k > tmp.size:
            _heap_sort(out, s, out, s, k, False)
        else:
            # within bucket b, value * scale - b is in [0, 1) (or above, in the last bucket)
            kf = k // _PER_BUCKET + 1
            fine[: kf + 1] = 0
            for i in range(s, e):
                fine[_bucket((out_values[i] * scale - b) * kf, 1.0, kf) + 1] += 1
            for f in range(kf):
                fine[f + 1] += fine[f]
            for i in range(s, e):
                f = _bucket((out_values[i] * scale - b) * kf, 1.0, kf)
                tmp[fine[f]] = out[i]
                fine[f] += 1
            a = 0
            for f in range(kf):
                _insertion_sort(tmp, a, fine[f])
                a = fine[f]
            for i in range(k):  # (a slice assignment of arrays needs numba's runtime)
                out[s + i] = tmp[i]
        s = e


def _rows(
    lengths: Any,
    fin: Any,
    fin_bits: Any,
    counts: Any,
    low: int,
    length: Any,
    finish: Any,
    launch: Any,
    keys: Any,
    starts: Any,
    scale: float,
    cell: Any,
    cell_value: Any,
) -> int:  # pragma: no cover - compiled
    """The rows (slot by slot, ``counts[s]`` each) of the ``lengths`` and accumulated ``fin``
    matrices, in one pass: ``length``, ``finish``, ``launch`` (the previous finish on the slot,
    0 for its first) and ``keys[i]``: the finish time's bits (``fin_bits``) with the low ones
    replaced by ``i``, counted into its coarse bucket as ``_count`` would (``cell_value``: the
    one-value array ``cell`` read as float64). ``keys`` may be ``fin``'s own memory: row ``i`` of
    slot ``s`` is written at or before where ``fin[s, c]`` was read. Returns the low bits of all
    finish times, or-ed: ``0`` when the keys lost nothing of the times."""
    high = ~low
    m = starts.size - 1
    lost = 0
    i = 0
    for s in range(counts.size):
        prev = 0.0
        for c in range(counts[s]):
            f = fin[s, c]
            bits = fin_bits[s, c]
            length[i] = lengths[s, c]
            finish[i] = f
            launch[i] = prev
            prev = f
            k = (bits & high) | i
            keys[i] = k
            lost |= bits & low
            cell[0] = k
            starts[_bucket(cell_value[0], scale, m) + 1] += 1
            i += 1
    return lost


def _walk(
    keys: Any,
    finish: Any,
    slot: Any,
    low: int,
    exact: bool,
    n_comp: int,
    batch: int,
    rank: Any,
    key: Any,
    times: Any,
    straddle: Any,
    state: Any,
) -> None:  # pragma: no cover - compiled
    """Sorted packed keys -> rows in processing order, in place; fill ``rank``.

    One pass in time order over the groups of keys that agree above the low bits (one time, or a
    few ulps apart); a key alone in its group (most keys, for continuous times) costs one write.
    A group is put in ``(finish, row)`` order (its rows are ascending already, so a stable sort by
    time alone does it), then each run of one time among the completions is settled
    (:func:`_settle`). With ``exact`` (the keys' low bits held nothing of the times, as for
    integer times) a group is one time, and no time is read. ``rank`` must hold ``n`` at each
    slot's last row (in flight, so ranked last) beforehand.

    ``key`` and ``times`` are scratch for a group. The pass starts at position ``state[0]`` with
    ``state[1]`` runs counted (below), and ends with ``state = (n, count, 0)``; where a group is
    longer than the scratch, it stops before the group with ``state = (p, count, need)``, for the
    caller to resume with ``need`` items of scratch (a kernel without numba's runtime allocates
    nothing).

    A completion's successor sees ``lo // batch`` versions, ``lo`` the first position of the
    completion's time: ``rank // batch``, unless the run of that time straddles a multiple of
    ``batch``. At most one run straddles each; their ``(start, end)`` go to ``straddle`` (two
    columns, a row per step), counted in ``state[1]``.
    """
    n = keys.size
    high = ~low
    p, count = state[0], state[1]
    while p < n:
        top = keys[p] & high
        if p + 1 == n or (keys[p + 1] & high) != top:
            r = keys[p] & low
            keys[p] = r
            rank[r] = p
            p += 1
            continue
        q = p + 2
        while q < n and (keys[q] & high) == top:
            q += 1
        if q - p > key.size:  # the caller resumes here with more scratch
            state[0], state[1], state[2] = p, count, 2 * (q - p)
            return
        if exact:  # the keys held the whole times: the group is one time, ordered by row
            for i in range(p, q):
                r = keys[i] & low
                keys[i] = r
                rank[r] = i
            if p < n_comp:  # (written out twice: a helper for these five lines, called per
                # tied run, cost 8-10 ms at 10^6 integer lengths, inlined or not)
                _settle(keys, slot, p, q, n_comp, rank, key)
                if p // batch != (q - 1) // batch:
                    straddle[count, 0] = p
                    straddle[count, 1] = q
                    count += 1
            p = q
            continue
        in_order = True
        for i in range(p, q):
            r = keys[i] & low
            keys[i] = r
            times[i - p] = finish[r]
            if i > p and times[i - p] < times[i - p - 1]:
                in_order = False
        if not in_order:  # by (time, row): the rows ascend, so a stable sort by time
            _heap_sort(times, 0, keys, p, q - p, True)
        for i in range(p, q):
            rank[keys[i]] = i
        i = p
        while i < q and i < n_comp:
            j = i + 1
            while j < q and times[j - p] == times[i - p]:
                j += 1
            # (j <= n_comp: the rows in flight finish after the end, so after every completion)
            if j - i > 1:
                _settle(keys, slot, i, j, n_comp, rank, key)
                if i // batch != (j - 1) // batch:
                    straddle[count, 0] = i
                    straddle[count, 1] = j
                    count += 1
            i = j
        p = q
    state[0], state[1], state[2] = n, count, 0


def _settle(
    keys: Any, slot: Any, p: int, q: int, n_comp: int, rank: Any, key: Any
) -> None:  # pragma: no cover - compiled
    """Order the tied completions at positions ``[p, q)`` by their rows' keys.

    A row's key is the rank of the same slot's previous row, or ``slot - slots`` for a slot's first
    launch (below every rank, by slot; ``slot - 2**31`` here: the same order). Row ``r - 1`` is
    not the same slot's when it is ranked from ``n_comp`` on (the previous slot's last row, in
    flight). One sort orders the run unless a row's predecessor is in the run itself: then the
    keys move with it, and the rounds repeat until they stand still.
    """
    while True:
        in_order = True
        inside = False
        for i in range(p, q):
            r = keys[i]
            k = rank[r - 1] if r > 0 else n_comp
            if k >= n_comp:
                k = np.int64(slot[r]) - 2147483648
            elif k >= p:
                inside = True
            key[i - p] = k
            if i > p and k <= key[i - p - 1]:
                in_order = False
        if in_order:
            return
        if q - p > _INSERTION_MAX:  # the keys differ (each row's predecessor is its own)
            _heap_sort(key, 0, keys, p, q - p, True)
        else:  # by insertion, the rows moving with their keys
            for i in range(1, q - p):
                k, r = key[i], keys[p + i]
                j = i - 1
                while j >= 0 and key[j] > k:
                    key[j + 1] = key[j]
                    keys[p + j + 1] = keys[p + j]
                    j -= 1
                key[j + 1] = k
                keys[p + j + 1] = r
        for i in range(p, q):
            rank[keys[i]] = i
        if not inside:  # the keys did not depend on the run's order: sorted once is sorted
            return


# The entries :func:`processing_order` calls: arrays in, nothing returned (an ahead-of-time
# entry's calling convention); the scalars travel in ``ints`` and ``floats``.


def _rows_entry(
    lengths: Any, fin: Any, fin_bits: Any, counts: Any, length: Any, finish: Any, launch: Any,
    keys: Any, starts: Any, cell: Any, cell_value: Any, ints: Any, floats: Any,
) -> None:  # fmt: skip  # pragma: no cover - compiled
    """:func:`_rows` with ``low = ints[0]`` and ``scale = floats[0]``; its result in ``ints[1]``."""
    ints[1] = _rows(
        lengths, fin, fin_bits, counts, ints[0], length, finish, launch, keys, starts,
        floats[0], cell, cell_value,
    )  # fmt: skip


def _place_entry(
    keys: Any, values: Any, out: Any, starts: Any, tmp: Any, fine: Any, floats: Any
) -> None:  # pragma: no cover - compiled
    """:func:`_place` with ``scale = floats[0]``."""
    _place(keys, values, out, starts, floats[0], tmp, fine)


def _walk_entry(
    keys: Any, finish: Any, slot: Any, rank: Any, key: Any, times: Any, straddle: Any,
    ints: Any, state: Any,
) -> None:  # fmt: skip  # pragma: no cover - compiled
    """:func:`_walk` with ``(low, exact, n_comp, batch) = ints``."""
    _walk(
        keys, finish, slot, ints[0], ints[1] != 0, ints[2], ints[3], rank, key, times, straddle,
        state,
    )  # fmt: skip


_KERNELS = (
    "_insertion_sort", "_before", "_swap", "_sift", "_heap_sort", "_bucket", "_count", "_place",
    "_rows", "_settle", "_walk", "_rows_entry", "_place_entry", "_walk_entry",
)  # fmt: skip
_jit: dict[str, Any] = {}


def _compiled(name: str) -> Any:
    """The named kernel, compiled once per process (numba's cache keeps it on disk, keyed by
    every file it holds: :mod:`refimpl.sim._compiled_cache`). Without numba's runtime, as its
    ahead-of-time entry is built: the kernels allocate nothing."""
    if name not in _jit:
        for helper in _KERNELS:
            if helper not in _jit:
                fn = globals()[helper]
                _jit[helper] = njit(fn, error_model="numpy", _nrt=False)
                globals()[helper] = _jit[helper]
    return _jit[name]


def _rows_jit() -> Any:
    return _compiled("_rows_entry")


def _place_jit() -> Any:
    return _compiled("_place_entry")


def _walk_jit() -> Any:
    return _compiled("_walk_entry")


#: The entries, ahead of time where they can be (:mod:`refimpl.sim._aot`: no numba imported),
#: else on numba's JIT.
_ENTRIES = {
    "_rows_entry": Kernel(_rows_entry, "refimpl.sim._vector_compiled:_rows_jit", _rows_jit),
    "_place_entry": Kernel(_place_entry, "refimpl.sim._vector_compiled:_place_jit", _place_jit),
    "_walk_entry": Kernel(_walk_entry, "refimpl.sim._vector_compiled:_walk_jit", _walk_jit),
}


#: Rows from which ``simulate(engine="auto")`` orders with these kernels even when this process has
#: not compiled them yet. Compiling them takes about 8 s (measured on two cores, numba 0.68, empty
#: cache), and loading them from numba's cache on disk about 0.4 s (numba's import and the
#: modules it pulls in), while they save a fraction of numpy's ordering time (0.014 s of CPU at
#: 10^6 rows): only a run of 10^7 rows or more repays either.
COMPILE_ROWS = 10_000_000

#: The kernels :func:`processing_order` calls (the others are compiled into them or unused there).
_ORDER_KERNELS = tuple(_ENTRIES)


def _compiled_here() -> bool:
    """Whether this process holds the ordering kernels ready to run: compiled (a dispatcher with a
    signature), or plain functions (numba's JIT switched off). Compiles and imports nothing."""
    kernels = [_jit.get(name) for name in _ORDER_KERNELS]
    return all(
        k is not None and (getattr(k, "signatures", None) is None or bool(k.signatures))
        for k in kernels
    )


def _built() -> bool:
    """Whether every ordering kernel's ahead-of-time entry is built (loaded in milliseconds,
    without numba). Compiles and imports nothing."""
    return all(kernel.ready() for kernel in _ENTRIES.values())


def _numba_loaded() -> bool:
    """Whether this process has imported numba already (another engine of the run used it)."""
    return "numba" in sys.modules


def worth_compiling(cfg: SimConfig) -> bool:
    """Whether ``simulate(engine="auto")`` should order the vectorized engine's rows with these
    kernels rather than with numpy.

    True when numba is installed and the run has at least :data:`COMPILE_ROWS` rows; or the
    kernels are compiled in this process already, or built ahead of time (loaded in milliseconds
    without numba), or built by this call (``refimpl simulate`` from
    :data:`~refimpl.sim._aot.COMMAND_BUILD_ROLLOUTS` rollouts, once for the machine); or this
    process has imported numba and numba's cache on disk holds the kernels (loading them then
    costs milliseconds, and they halve the ordering's time). Otherwise a fresh process does not
    import numba for a shorter run: numba's import and the modules it pulls in cost far more than
    the kernels save. The order is the same either way; the choice changes how long a run takes,
    never its result.
    """
    if not AVAILABLE:
        return False
    rows = cfg.steps * int(cfg.launch or cfg.slots) if cfg.mode == "first_k" else cfg.trained_target
    if rows >= COMPILE_ROWS or _compiled_here() or _built() or _aot.command_builds(rows):
        return True
    if not _numba_loaded():
        return False
    return all(_sim_compiled.kernel_ready(_compiled(name)) for name in _ORDER_KERNELS)


def _scale(hi: float, buckets: int) -> float | None:
    """Buckets per unit over ``[0, hi]``, or ``None`` when that range cannot be scaled."""
    if not (hi > 0.0 and np.isfinite(hi)):
        return None
    scale = buckets / hi
    return scale if np.isfinite(scale) else None


def _fine_scratch() -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The second pass's buffer and counters (one coarse bucket at a time)."""
    return np.empty(_FINE_MAX, dtype=np.int64), np.empty(
        _FINE_MAX // _PER_BUCKET + 2, dtype=np.int64
    )


def _sort_counted(
    keys: NDArray[np.int64], scratch: NDArray[np.int64], starts: NDArray[np.int64], scale: float
) -> None:
    """Sort ``keys`` in place by the coarse buckets already counted in ``starts``."""
    out = scratch[: keys.size]
    floats = np.array([scale])
    _ENTRIES["_place_entry"](keys, keys.view(np.float64), out, starts, *_fine_scratch(), floats)
    keys[:] = out


def sort_keys(keys: NDArray[np.int64], scratch: NDArray[np.int64]) -> None:
    """Sort ``keys`` (int64, every one ``>= 0``) in place; ``scratch`` is an int64 buffer of at
    least ``keys.size`` values that is overwritten. Needs numba (:data:`AVAILABLE`)."""
    n = keys.size
    if n < 2:
        return
    values = keys.view(np.float64)
    buckets = n // _PER_COARSE + 1
    scale = _scale(float(values.max()), buckets)
    if scale is None:
        keys.sort()  # all zero, or a range too wide to scale: no buckets
        return
    starts = np.zeros(buckets + 1, dtype=np.int64)
    _compiled("_count")(values, starts, scale)
    _sort_counted(keys, scratch, starts, scale)


def processing_order(
    lengths: NDArray[np.float64],
    fin: NDArray[np.float64],
    n_launched: NDArray[np.int64],
    slot: NDArray[np.int32],
    last_row: NDArray[np.int64],
    n_comp: int,
    batch: int,
    rank: NDArray[np.int64],
) -> tuple[
    NDArray[np.float64],
    NDArray[np.float64],
    NDArray[np.float64],
    NDArray[np.int64],
    NDArray[np.int64],
]:
    """The rows and their processing order, as the numpy version builds and orders them.

    ``lengths`` and ``fin`` (each slot's accumulated finish times, C-ordered) hold at least
    ``n_launched[s]`` columns per slot; ``rank`` (int64, a value per row) receives
    ``rank[order[p]] = p``. Returns ``(length, finish, launch, order, straddle)``: ``order``
    lives in ``fin``'s memory, which is written over; ``straddle`` holds ``(start, end)`` of each
    run of tied completions across a multiple of ``batch`` (the one place where ``lo // batch``
    is not ``rank // batch``; see :func:`_walk`).
    """
    # read only here, so presented read-only whatever it is (SimConfig's matrix is, a drawn one
    # is not): one ahead-of-time entry serves both
    lengths = lengths.view()
    lengths.setflags(write=False)
    n = rank.size
    width = max(1, (n - 1).bit_length())
    low = (1 << width) - 1
    buckets = n // _PER_COARSE + 1
    # the keys' values: within [0, max finish], or a few ulps above it (the last bucket's)
    scale = _scale(float(fin[np.arange(n_launched.size), n_launched - 1].max()), buckets)
    starts = np.zeros(buckets + 1, dtype=np.int64)
    cell = np.zeros(1, dtype=np.int64)
    length, finish, launch = np.empty(n), np.empty(n), np.empty(n)
    keys = fin.reshape(-1).view(np.int64)[:n]
    ints, floats = np.array([low, 0], dtype=np.int64), np.array([scale or 0.0])
    _ENTRIES["_rows_entry"](
        lengths, fin, fin.view(np.int64), n_launched, length, finish, launch, keys, starts,
        cell, cell.view(np.float64), ints, floats,
    )  # fmt: skip
    lost = int(ints[1])
    if scale is None:
        keys.sort()
    else:
        _sort_counted(keys, rank, starts, scale)
    # a group of one time holds at most a row per slot, unless durations add nothing to a time
    # (then the walk stops, and resumes with what it needs)
    room = int(slot[-1]) + 2
    key, times = np.empty(room, dtype=np.int64), np.empty(room, dtype=np.float64)
    straddle = np.empty((n_comp // batch + 1, 2), dtype=np.int64)
    rank[last_row] = n
    ints = np.array([low, lost == 0, n_comp, batch], dtype=np.int64)
    state = np.zeros(3, dtype=np.int64)  # where the walk is, runs counted, scratch it needs
    while True:
        _ENTRIES["_walk_entry"](keys, finish, slot, rank, key, times, straddle, ints, state)
        if state[2] == 0:
            break
        key, times = np.empty(state[2], dtype=np.int64), np.empty(state[2], dtype=np.float64)
    return length, finish, launch, keys, straddle[: state[1]]
