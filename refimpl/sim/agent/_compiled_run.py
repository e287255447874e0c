"""The agent's compiled engine's driver: the Python around the numba kernel of
:mod:`refimpl.sim.agent._compiled`.

It packs the configuration into the kernel's parameter arrays, draws the random streams ahead in
the reference's chunks, allocates the kernel's columns (placeholders for the columns the
configuration makes constant), and runs the kernel; when the kernel stops between two events it
reports progress, grows what is short and draws more, and resumes, or raises the reference
engine's error for what stopped it. The finished run's columns are trimmed to what was used.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from refimpl._validation import invalid
from refimpl.errors import InvalidArgument
from refimpl.sim._pages import map_in_background
from refimpl.sim.agent._compiled_layout import (
    _A_ADMIT,
    _A_BOX,
    _A_DEPART,
    _A_NEXT,
    _A_RECOVERY,
    _A_ROUTE,
    _A_STATE,
    _ABORTED_N,
    _BAD_LENGTH,
    _BAD_TURNS,
    _C_END,
    _C_ISSUE,
    _C_SERVICE,
    _CRASH_USED,
    _END_TIME,
    _ERR,
    _ERR_A,
    _ERR_B,
    _HEAP_ROOM,
    _LAST,
    _LEN_USED,
    _N_STATE,
    _NA,
    _NBOX,
    _NC,
    _NEED_ROOM,
    _NO_COLUMN,
    _NR,
    _OK,
    _P_STOP_VERSION,
    _PAUSE,
    _R_DONE_SVC,
    _ROOM,
    _S_FREE,
    _S_QHEAD,
    _S_QTAIL,
    _S_VISITED,
    _SVC_USED,
    _TOO_MANY_ABORTS,
    _TRAINED_N,
    _TURN_USED,
    _VERSION,
)
from refimpl.sim.agent._compiled_lengths import SortedDraws
from refimpl.sim.agent._config import (
    _COMPLETED,
    MAX_TRACE_ROWS,
    MAX_TURNS,
    AgentConfig,
    _int_dtypes,
    _is_frozen_law,
)
from refimpl.sim.agent._lognormal import LognormalLaw

#: Runs of at most this many rollouts draw a length law's lengths at once and sort them while the
#: kernel runs (:mod:`refimpl.sim.agent._compiled_lengths`); a longer one keeps its first draws
#: small and leaves the sort to the summary: the sorted copy, held through the run (8 bytes a
#: rollout), would add to the peak of a 10^7-rollout run, which fits 2 GiB narrowly.
SORT_AHEAD_ROWS = 1 << 22


class _Draws:
    """One random stream drawn ahead: a constant, or a frozen law drawn ``rvs(size=512)`` at a time
    from its own generator, exactly the reference's ``_Stream`` chunks.

    :class:`~refimpl.sim.agent._lognormal.LognormalLaw` (the command line's length law) is drawn in
    one call for all the chunks: it maps the generator's normal draws one by one, and the generator
    fills an array one value after the other, so the numbers are those of the chunks, one Python
    call instead of thousands (``tests/test_sim_agent_lognormal.py`` compares them)."""

    def __init__(self, law: Any, gen: np.random.Generator, dtype: type) -> None:
        self.law, self.gen, self.dtype = law, gen, dtype

    def more(self, n: int) -> NDArray[Any]:
        chunks = -(-n // 512)
        if isinstance(self.law, LognormalLaw):
            return self.law.rvs(size=512 * chunks, random_state=self.gen).astype(self.dtype)
        return np.concatenate(
            [
                np.asarray(self.law.rvs(size=512, random_state=self.gen)).astype(self.dtype)
                for _ in range(chunks)
            ]
        )


def _refill(buf: NDArray[Any], used: int, more: NDArray[Any]) -> NDArray[Any]:
    """The unused tail of ``buf`` followed by ``more`` (the kernel's pointer restarts at 0)."""
    return np.concatenate([buf[..., used:], more], axis=-1)


def _grown(a: NDArray[Any], size: int) -> NDArray[Any]:
    out = np.empty((*a.shape[:-1], size), dtype=a.dtype)
    out[..., : a.shape[-1]] = a
    return out


#: Names (the reference engine's) of the integer columns, in the order of their indices.
_RI_NAMES = ("r_slot", "r_k", "r_calls", "r_issued", "r_version", "r_step", "r_rank", "r_status")
_CI_NAMES = ("c_rollout", "c_index", "c_attempts", "c_status")
_AI_NAMES = (
    "a_call", "a_number", "a_redirects", "a_shard", "a_outcome", "a_box", "a_state", "a_next",
    "a_cold",
)  # fmt: skip
#: What stands for a column the kernel does not use (see :class:`CompiledRun`).
_PLACEHOLDER = np.zeros(1, dtype=np.float64)
_PLACEHOLDER_I = np.zeros(1, dtype=np.int8)
_PLACEHOLDER_CALL = np.zeros(1, dtype=np.int32)  # attempt a is call a
#: With one attempt per call: every attempt is number 1 and completes, every call completes after
#: one attempt (placeholders of the columns' own types, whatever those are).
_ONE_VALUES = {"a_number": 1, "a_outcome": _COMPLETED, "c_attempts": 1, "c_status": _COMPLETED}
_PLACEHOLDER_ONE: dict[str, NDArray[Any]] = {}


def _placeholders(dtypes: dict[str, Any]) -> None:
    """The placeholders of :data:`_ONE_VALUES`, one per column type (the kernel's types must not
    change between runs with the same column types, so they are made once per type)."""
    for name in _ONE_VALUES:
        key = f"{name}:{np.dtype(dtypes[name]).name}"
        if key not in _PLACEHOLDERS_BY_TYPE:
            _PLACEHOLDERS_BY_TYPE[key] = np.zeros(1, dtype=dtypes[name])
        _PLACEHOLDER_ONE[name] = _PLACEHOLDERS_BY_TYPE[key]


_PLACEHOLDERS_BY_TYPE: dict[str, NDArray[Any]] = {}


def _attempt_floats(
    CF: tuple[NDArray[Any], ...],
    admit: NDArray[np.float64],
    own: tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]] | None,
) -> tuple[NDArray[np.float64], ...]:
    """The attempt float columns: arrival is routing (the same array; routing and redirects are
    instantaneous); ``own`` is (route, depart, recovery), or None when every call takes one
    attempt: then attempt ``a`` is call ``a`` and routes and departs when it is issued and ends."""
    if own is None:
        return (CF[_C_ISSUE], CF[_C_ISSUE], admit, CF[_C_END], _PLACEHOLDER)
    route, depart, recovery = own
    return (route, route, admit, depart, recovery)


def _grown_columns(cols: tuple[NDArray[Any], ...], size: int) -> tuple[NDArray[Any], ...]:
    """Each column grown to ``size`` (its first values kept); placeholders stay."""
    return tuple(x if _is_placeholder(x) else _grown(x, size) for x in cols)


def _trimmed(cols: tuple[NDArray[Any], ...], n: int) -> tuple[NDArray[Any], ...]:
    return tuple(x if _is_placeholder(x) else x[:n] for x in cols)


def _is_placeholder(x: NDArray[Any]) -> bool:
    keep = (_PLACEHOLDER, _PLACEHOLDER_I, _PLACEHOLDER_CALL, *_PLACEHOLDERS_BY_TYPE.values())
    return any(x is k for k in keep)


def _more_rows(size: int, used: int, scale: float, what: str) -> int:
    """The next room for a trace: 1.5 times, or the whole run extrapolated from the part done."""
    new = max(int(size * 1.5), int(used * scale)) + _ROOM
    if used + _ROOM > MAX_TRACE_ROWS:
        raise invalid(
            "the run",
            f"keep each trace to at most {MAX_TRACE_ROWS} rows (int32 ids)",
            used,
            f"it needed more {what}; run fewer steps, or several runs with other seeds.",
        )
    return min(new, MAX_TRACE_ROWS)


class CompiledRun(NamedTuple):
    """The columns of one compiled run, as the reference engine leaves them, trimmed to what was
    used (column names: the ``_R_``, ``_C_``, ``_A_`` and ``_S_`` indices of this module). Columns
    the configuration makes constant are length-1 placeholders the kernel never touches: a constant
    service time (``CF[_C_SERVICE]``), the recovery cost when every call takes one attempt
    (``AF[_A_RECOVERY]``, 0) and the re-executed service without ``recovery='reexecute'``. The
    arrival time is the routing time (the same array); with one attempt per call the attempt ids
    are the call ids and its routing and departure times are the call's issue and end times (the
    same arrays)."""

    RI: tuple[NDArray[Any], ...]
    """Rollout integer columns."""
    RF: tuple[NDArray[Any], ...]
    """Rollout float columns."""
    CI: tuple[NDArray[Any], ...]
    """Call integer columns."""
    CF: tuple[NDArray[Any], ...]
    """Call float columns."""
    AI: tuple[NDArray[Any], ...]
    """Attempt integer columns."""
    AF: tuple[NDArray[Any], ...]
    """Attempt float columns."""
    SH: NDArray[np.int64]
    """Shard integer rows."""
    SHF: NDArray[np.float64]
    """Shard float rows (the load integrals)."""
    end_time: float
    """When the last trained rollout finished."""
    drain: float
    """When the last event that changed anything happened (the run drained)."""
    sorted_lengths: Callable[[], NDArray[np.float64]] | None = None
    """Where the lengths come from a law: the launched lengths sorted (sorted while the kernel ran,
    :mod:`refimpl.sim.agent._compiled_lengths`); the function waits for them."""


@dataclass
class _Streams:
    """The random streams drawn ahead (None: a constant), and the buffers the kernel reads."""

    length_draws: _Draws | None
    turn_draws: _Draws | None
    svc_draws: _Draws | None
    crash_gen: np.random.Generator
    crash_on: bool
    crash_scale: float
    lengths: NDArray[Any]
    turns: NDArray[Any]
    svc: NDArray[Any]
    crash: NDArray[Any]
    sorted_draws: SortedDraws | None = None  # the length law's draws, sorted meanwhile


@dataclass
class _Arrays:
    """The kernel's state, columns and heap, and the room of each growable one."""

    S: NDArray[np.int64]
    SF: NDArray[np.float64]
    slot_k: NDArray[np.int64]
    SH: NDArray[np.int64]
    SHF: NDArray[np.float64]
    BX: NDArray[np.int64]
    BXF: NDArray[np.float64]
    RI: tuple[NDArray[Any], ...]
    RF: tuple[NDArray[Any], ...]
    CI: tuple[NDArray[Any], ...]
    CF: tuple[NDArray[Any], ...]
    AI: tuple[NDArray[Any], ...]
    AF: tuple[NDArray[Any], ...]
    ht: NDArray[np.float64]
    hk: NDArray[np.int64]
    hp: NDArray[np.int64]
    hn: NDArray[np.int64]
    ev: NDArray[np.int64]
    rows: int
    n_calls: int
    n_att: int
    n_box: int
    heap: int
    one: bool  # every call takes exactly one attempt


def run_kernel(
    kernel: Callable[..., None],
    cfg: AgentConfig,
    sizes: tuple[int, int, int, int, int, int],
    *,
    progress: Callable[[int], None] | None,
) -> CompiledRun:
    """Run ``kernel`` to the end of the run; raises what the reference raises.

    ``sizes`` is the first room for rollouts, calls, attempts, containers and heap entries, and the
    draws of each stream to take ahead (``_first_sizes`` of :mod:`refimpl.sim.agent._compiled`).
    """
    ahead = sizes[0] <= SORT_AHEAD_ROWS  # the run's lengths drawn at once and sorted meanwhile
    streams = _streams(cfg, first=sizes[5], lengths=sizes[0] if ahead else 0)
    steps_chunk = max(1, cfg.steps // 64) if progress is not None else cfg.steps + 2
    P = _int_parameters(cfg, steps_chunk)
    PF = _float_parameters(cfg)
    a = _allocate(cfg, sizes)
    # their pages mapped on another thread while the kernel fills them (a queue's links are
    # written only when an attempt waits)
    columns = (*a.RI, *a.RF, *a.CI, *a.CF, *(x for j, x in enumerate(a.AI) if j != _A_NEXT), *a.AF)
    mapped = map_in_background(columns)
    if ahead and streams.length_draws is not None:
        streams.sorted_draws = SortedDraws(streams.lengths[0], mapped)
    try:
        run = _run(kernel, cfg, streams, P, PF, a, steps_chunk, progress)
    finally:
        mapped()
    draws, launched = streams.sorted_draws, run.RI[0].size
    if draws is None:
        return run
    return run._replace(sorted_lengths=lambda: draws.launched(launched))


def _run(
    kernel: Callable[..., None],
    cfg: AgentConfig,
    streams: _Streams,
    P: NDArray[np.int64],
    PF: NDArray[np.float64],
    a: _Arrays,
    steps_chunk: int,
    progress: Callable[[int], None] | None,
) -> CompiledRun:
    """Run and resume ``kernel`` until the run ends (:func:`run_kernel`'s loop)."""
    reported = 0
    while True:
        d = streams
        kernel(
            P, PF, a.S, a.SF, a.slot_k, d.lengths, d.turns, d.svc, d.crash, a.SH, a.SHF, a.BX,
            a.BXF, a.RI, a.RF, a.CI, a.CF, a.AI, a.AF, a.ht, a.hk, a.hp, a.hn, a.ev,
        )  # fmt: skip
        err = int(a.S[_ERR])
        a.S[_ERR] = _OK
        if progress is not None and a.S[_VERSION] > reported:
            for v in range(reported + 1, int(a.S[_VERSION]) + 1):
                progress(v)
            reported = int(a.S[_VERSION])
        if err == _OK:
            return _finished(a)
        if err == _PAUSE:
            P[_P_STOP_VERSION] = a.S[_VERSION] + steps_chunk
        elif err == _NEED_ROOM:
            _grow(cfg, a)
            _draw_more(streams, a.S)
        else:
            _raise(err, cfg, a.S, streams.lengths)


def _int_parameters(cfg: AgentConfig, steps_chunk: int) -> NDArray[np.int64]:
    """The kernel's integer parameters ``P`` (rows ``_P_...``)."""
    n_shards = cfg.shards
    return np.array(
        [
            cfg.slots,
            cfg.batch,
            cfg.steps * cfg.batch,
            n_shards,
            n_shards - 1 if cfg.max_redirects is None else cfg.max_redirects,
            -1 if cfg.eta is None else cfg.eta,
            cfg.admission == "redirect",
            cfg.refresh == 0.0,
            cfg.refresh > 0.0 and n_shards > 1,
            cfg.timeout is not None,
            cfg.max_attempts,
            cfg.recovery == "reexecute",
            cfg.on_failure == "abort",
            _is_frozen_law(cfg.lengths),
            _is_frozen_law(cfg.turns),
            0 if _is_frozen_law(cfg.turns) else cfg.turns,
            _is_frozen_law(cfg.tool_latency),
            cfg.crash_rate > 0.0,
            steps_chunk,
            _one_attempt(cfg),
        ],
        dtype=np.int64,
    )


def _float_parameters(cfg: AgentConfig) -> NDArray[np.float64]:
    """The kernel's float parameters ``PF`` (rows ``_F_...``)."""
    return np.array(
        [
            cfg.token_time,
            0.0 if _is_frozen_law(cfg.tool_latency) else float(cfg.tool_latency),
            math.inf if cfg.capacity is None else float(cfg.capacity),
            cfg.keepalive,
            cfg.cold_start,
            cfg.warm_start,
            0.0 if cfg.timeout is None else cfg.timeout,
            cfg.retry_delay,
            cfg.replay_cost,
            cfg.refresh,
        ],
        dtype=np.float64,
    )


def _one_attempt(cfg: AgentConfig) -> bool:
    """Whether every call takes exactly one attempt (no crashes, no timeout)."""
    return not cfg.crash_rate > 0.0 and cfg.timeout is None


def _streams(cfg: AgentConfig, *, first: int, lengths: int) -> _Streams:
    """The reference's four streams, in its order, and their first ``first`` draws (a margin more);
    of a length law, the run's ``lengths`` at once (they are sorted while the kernel runs:
    :mod:`refimpl.sim.agent._compiled_lengths`)."""
    gens = np.random.default_rng(cfg.seed).spawn(4)
    n_slots = cfg.slots
    len_draws = _Draws(cfg.lengths, gens[0], np.float64) if _is_frozen_law(cfg.lengths) else None
    turn_draws = _Draws(cfg.turns, gens[1], np.int64) if _is_frozen_law(cfg.turns) else None
    svc_law = _is_frozen_law(cfg.tool_latency)
    svc_draws = _Draws(cfg.tool_latency, gens[2], np.float64) if svc_law else None
    crash_on = cfg.crash_rate > 0.0
    crash_scale = 1.0 / cfg.crash_rate if crash_on else 0.0
    empty_f, empty_i = np.zeros(1, dtype=np.float64), np.zeros(1, dtype=np.int64)
    if len_draws is not None:
        drawn = len_draws.more(max(first, lengths, n_slots) + _ROOM)[None, :]
    else:
        drawn = np.array(cfg.lengths, dtype=np.float64)  # a writable copy: one numba type
    return _Streams(
        length_draws=len_draws,
        turn_draws=turn_draws,
        svc_draws=svc_draws,
        crash_gen=gens[3],
        crash_on=crash_on,
        crash_scale=crash_scale,
        lengths=drawn,
        turns=turn_draws.more(max(first, n_slots) + _ROOM) if turn_draws is not None else empty_i,
        svc=svc_draws.more(first + _ROOM) if svc_draws is not None else empty_f,
        crash=gens[3].exponential(crash_scale, size=first + _ROOM) if crash_on else empty_f,
    )


def _allocate(cfg: AgentConfig, sizes: tuple[int, int, int, int, int, int]) -> _Arrays:
    """The kernel's arrays at their first sizes; placeholders for the columns it does not use."""
    rows, n_calls, n_att, n_box, heap, _ = sizes
    n_slots, n_shards, one = cfg.slots, cfg.shards, _one_attempt(cfg)
    SF = np.zeros(3, dtype=np.float64)
    SF[_END_TIME] = math.nan
    SH = np.zeros((15, n_shards), dtype=np.int64)
    SH[_S_QHEAD] = SH[_S_QTAIL] = SH[_S_FREE] = SH[_S_VISITED] = -1
    rows = max(rows, n_slots + _ROOM)  # the first launches happen before any check
    heap = max(heap, n_slots + _HEAP_ROOM)
    if one:
        n_att = n_calls = max(n_att, n_calls)
    dtypes = _int_dtypes(cfg)
    _placeholders(dtypes)
    reexec = bool(cfg.recovery == "reexecute")
    svc_law = _is_frozen_law(cfg.tool_latency)
    CF = tuple(np.empty(n_calls) if j != _C_SERVICE or svc_law else _PLACEHOLDER for j in range(4))
    own = None if one else (np.empty(n_att), np.empty(n_att), np.empty(n_att))
    return _Arrays(
        S=np.zeros(_N_STATE, dtype=np.int64),
        SF=SF,
        slot_k=np.zeros(n_slots, dtype=np.int64),
        SH=SH,
        SHF=np.zeros((3, n_shards), dtype=np.float64),
        BX=np.empty((2, n_box), dtype=np.int64),
        BXF=np.empty(n_box, dtype=np.float64),
        RI=tuple(np.empty(rows, dtype=dtypes[name]) for name in _RI_NAMES),
        RF=tuple(np.empty(rows) if j != _R_DONE_SVC or reexec else _PLACEHOLDER for j in range(6)),
        CI=tuple(
            _PLACEHOLDER_ONE[name]
            if one and name in _PLACEHOLDER_ONE
            else np.empty(n_calls, dtype=dtypes[name])
            for name in _CI_NAMES
        ),
        CF=CF,
        AI=tuple(
            _PLACEHOLDER_CALL
            if one and name == "a_call"
            else _PLACEHOLDER_ONE[name]
            if one and name in _PLACEHOLDER_ONE
            else np.empty(n_att, dtype=dtypes[name])
            for name in _AI_NAMES
        ),
        AF=_attempt_floats(CF, np.empty(n_att), own),
        ht=np.empty((2, heap), dtype=np.float64),  # row 0 the heap, row 1 the ring
        hk=np.empty((2, heap), dtype=np.int64),
        hp=np.empty((2, heap), dtype=np.int64),
        hn=np.zeros(3, dtype=np.int64),  # the heap's size, the ring's head and size
        ev=np.zeros(3, dtype=np.int64),
        rows=rows,
        n_calls=n_calls,
        n_att=n_att,
        n_box=n_box,
        heap=heap,
        one=one,
    )


def _grow(cfg: AgentConfig, a: _Arrays) -> None:
    """Grow the columns, containers and heap that are nearly full (the kernel paused for room)."""
    S, one = a.S, a.one
    done = max(int(S[_TRAINED_N]), 1)
    scale = cfg.steps * cfg.batch / done * 1.05  # the whole run, extrapolated from the part done
    if a.rows - S[_NR] < _ROOM:
        a.rows = _more_rows(a.rows, int(S[_NR]), scale, "rollouts")
        a.RI, a.RF = _grown_columns(a.RI, a.rows), _grown_columns(a.RF, a.rows)
    if a.n_calls - S[_NC] < _ROOM or (one and a.n_att - S[_NA] < _ROOM):
        a.n_calls = _more_rows(a.n_calls, int(S[_NC]), scale, "tool calls")
        a.CI, a.CF = _grown_columns(a.CI, a.n_calls), _grown_columns(a.CF, a.n_calls)
        if one:  # the attempts are the calls
            a.n_att = a.n_calls
            a.AI = _grown_columns(a.AI, a.n_att)
            a.AF = _attempt_floats(a.CF, _grown(a.AF[_A_ADMIT], a.n_att), None)
    if not one and a.n_att - S[_NA] < _ROOM:
        a.n_att = _more_rows(a.n_att, int(S[_NA]), scale, "attempts")
        a.AI = _grown_columns(a.AI, a.n_att)
        route, admit, depart, recovery = (
            _grown(a.AF[j], a.n_att) for j in (_A_ROUTE, _A_ADMIT, _A_DEPART, _A_RECOVERY)
        )
        a.AF = _attempt_floats(a.CF, admit, (route, depart, recovery))
    if a.n_box - S[_NBOX] < _ROOM:
        a.n_box = 2 * a.n_box + _ROOM
        a.BX, a.BXF = _grown(a.BX, a.n_box), _grown(a.BXF, a.n_box)
    if a.heap - a.hn[0] < _HEAP_ROOM or a.heap - a.hn[2] < _HEAP_ROOM:
        ring = (a.hn[1] + np.arange(a.hn[2])) % a.heap  # the ring's entries, head first
        a.heap = 2 * a.heap + _HEAP_ROOM
        a.ht, a.hk, a.hp = (_unwrapped(x, a.heap, ring) for x in (a.ht, a.hk, a.hp))
        a.hn[1] = 0


def _unwrapped(x: NDArray[Any], size: int, ring: NDArray[np.int64]) -> NDArray[Any]:
    """Heap and ring arrays ``x`` grown to ``size``: the heap row as it was, the ring's entries
    (at ``ring``, head first) from the start of its row."""
    out = _grown(x, size)
    out[1, : ring.size] = x[1, ring]
    return out


def _draw_more(d: _Streams, S: NDArray[np.int64]) -> None:
    """Draw more of each stream whose buffer is nearly used up (the kernel's pointer restarts)."""
    if d.length_draws is not None and d.lengths.shape[1] - S[_LEN_USED] < _ROOM:
        more = d.length_draws.more(d.lengths.shape[1])[None, :]
        if d.sorted_draws is not None:
            d.sorted_draws.add(more[0])
        d.lengths = _refill(d.lengths, int(S[_LEN_USED]), more)
        S[_LEN_USED] = 0
    if d.turn_draws is not None and d.turns.shape[0] - S[_TURN_USED] < _ROOM:
        d.turns = _refill(d.turns, int(S[_TURN_USED]), d.turn_draws.more(d.turns.shape[0]))
        S[_TURN_USED] = 0
    if d.svc_draws is not None and d.svc.shape[0] - S[_SVC_USED] < _ROOM:
        d.svc = _refill(d.svc, int(S[_SVC_USED]), d.svc_draws.more(d.svc.shape[0]))
        S[_SVC_USED] = 0
    if d.crash_on and d.crash.shape[0] - S[_CRASH_USED] < _ROOM:
        more = np.asarray(d.crash_gen.exponential(d.crash_scale, size=d.crash.shape[0]))
        d.crash = _refill(d.crash, int(S[_CRASH_USED]), more)
        S[_CRASH_USED] = 0


def _finished(a: _Arrays) -> CompiledRun:
    """The run's columns trimmed to what was used (the heap and the attempts' bookkeeping are not
    results)."""
    n_r, n_c, n_a = int(a.S[_NR]), int(a.S[_NC]), int(a.S[_NA])
    scratch = (_A_BOX, _A_STATE, _A_NEXT)
    AI = tuple(_PLACEHOLDER_I if j in scratch else x for j, x in enumerate(a.AI))
    return CompiledRun(
        RI=_trimmed(a.RI, n_r),
        RF=_trimmed(a.RF, n_r),
        CI=_trimmed(a.CI, n_c),
        CF=_trimmed(a.CF, n_c),
        AI=_trimmed(AI, n_a),
        AF=_trimmed(a.AF, n_a),
        SH=a.SH,
        SHF=a.SHF,
        end_time=float(a.SF[_END_TIME]),
        drain=float(a.SF[_LAST]),
    )


def _raise(err: int, cfg: AgentConfig, S: NDArray[np.int64], lengths: NDArray[Any]) -> None:
    """The reference engine's error for what stopped the kernel."""
    slot, k = int(S[_ERR_A]), int(S[_ERR_B])
    if err == _NO_COLUMN:
        raise InvalidArgument(
            f"lengths must have a column for every launch; slot {slot} needed launch {k + 1} "
            f"but lengths has {lengths.shape[1]} columns. Pass a longer N × K matrix (the "
            "SimPy peer's margin, ceil(1.25·rollouts/slots) + 64 columns, is ample when "
            "tool latency is small)."
        )
    if err == _BAD_LENGTH:
        length = float(lengths[0, int(S[_LEN_USED]) - 1])
        raise InvalidArgument(
            f"lengths must draw positive token counts; got {length!r} at launch {k} of slot "
            f"{slot}. Pass a law supported on (0, inf)."
        )
    if err == _BAD_TURNS:
        raise InvalidArgument(
            f"turns must draw counts in [0, {MAX_TURNS}]; got {slot}. Pass a law on "
            f"{{0, 1, ..., {MAX_TURNS}}}."
        )
    if err == _TOO_MANY_ABORTS:
        raise InvalidArgument(
            f"on_failure='abort' must leave some rollouts to train; {int(S[_ABORTED_N])} "
            f"rollouts were aborted while only {int(S[_TRAINED_N])} of {cfg.steps * cfg.batch} "
            "trained. Calls fail far more often than they succeed: raise timeout or max_attempts, "
            "lower crash_rate, or pass on_failure='continue'."
        )
    raise RuntimeError(
        f"internal error: the run stalled after {int(S[_TRAINED_N])} of {cfg.steps * cfg.batch} "
        "rollouts (a rollout never finished); please report it with the config."
    )
