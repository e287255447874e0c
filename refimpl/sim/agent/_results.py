"""Agent rollouts: the accounting. The per-rollout, per-call, per-attempt and per-shard traces, and the
summary computed from them (throughput, staleness, latency, Little's law per shard, failures)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from refimpl._validation import wrong_type
from refimpl.sim._background import in_background
from refimpl.sim._order import float_cells
from refimpl.sim._trace import sorted_percentiles
from refimpl.sim.agent import _compiled as _c
from refimpl.sim.agent._compiled_lengths import without
from refimpl.sim.agent._config import (
    _ABORTED,
    _COMPLETED,
    _DROPPED,
    _FAILED,
    _TRAINED,
    ATTEMPT_OUTCOMES,
    CALL_STATUSES,
    ROLLOUT_STATUSES,
    AgentConfig,
    _int_dtypes,
    _is_frozen_law,
)
from refimpl.staleness import sample_staleness

# ---------------------------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------------------------


class RolloutTrace(NamedTuple):
    """Per-rollout columns, in launch order (index = rollout id).

    Integer columns have the narrowest type the configuration's bounds allow (ids and ranks int32,
    slots, versions, steps, staleness, call counts and turns int16 while they fit, codes,
    attempt numbers, redirects and shards int8 while they fit); every column is read-only."""

    slot: NDArray[np.signedinteger[Any]]
    """Generation slot that ran the rollout."""
    launch_index: NDArray[np.signedinteger[Any]]
    """k: the rollout is slot ``slot``'s k-th launch (column ``k`` of an ``N × K`` length matrix)."""
    launch_time: NDArray[np.float64]
    """When the slot launched it."""
    finish_time: NDArray[np.float64]
    """When it finished (or was aborted); every rollout finishes, the run drains."""
    length: NDArray[np.float64]
    """Decoded tokens (all segments)."""
    calls: NDArray[np.signedinteger[Any]]
    """Tool calls it planned (``turns`` drawn at launch)."""
    version: NDArray[np.signedinteger[Any]]
    """Policy version at launch (tie rule: a launch at a publication sees the old one)."""
    trained_step: NDArray[np.signedinteger[Any]]
    """Trainer step that consumed the rollout (trained, or dropped over ``eta``), else ``-1``."""
    staleness: NDArray[np.signedinteger[Any]]
    """``trained_step − version`` (``refimpl.sample_staleness``), ``-1`` if never consumed."""
    completion_rank: NDArray[np.signedinteger[Any]]
    """Completion rank (0-based, over every finished rollout; without ``eta`` a trained rollout's
    rank is its position in training order), ``-1`` for an aborted rollout."""
    status: NDArray[np.signedinteger[Any]]
    """Index into :data:`ROLLOUT_STATUSES`."""
    tool_time: NDArray[np.float64]
    """Time from issuing its calls to their results (waiting and execution)."""
    tool_exec_time: NDArray[np.float64]
    """Part of ``tool_time`` spent in a container (start, recovery, service, crashed work)."""


class CallTrace(NamedTuple):
    """Per-call columns, in issue order (index = call id); integer types as in
    :class:`RolloutTrace`. A constant service time is a read-only broadcast of its value."""

    rollout: NDArray[np.signedinteger[Any]]
    """Rollout id that issued the call."""
    turn: NDArray[np.signedinteger[Any]]
    """0 for the rollout's first call, 1 for its second, ..."""
    issue_time: NDArray[np.float64]
    """When the call was issued (its decode segment ended)."""
    end_time: NDArray[np.float64]
    """When it completed or was reported failed."""
    service: NDArray[np.float64]
    """Its service time, drawn once (the same work on every attempt)."""
    attempts: NDArray[np.signedinteger[Any]]
    """Attempts it took (``<= max_attempts``)."""
    status: NDArray[np.signedinteger[Any]]
    """Index into :data:`CALL_STATUSES`."""
    exec_time: NDArray[np.float64]
    """Time its attempts spent inside containers."""


class AttemptTrace(NamedTuple):
    """Per-attempt columns, in routing order (index = attempt id); integer types as in
    :class:`RolloutTrace`. ``arrive_time`` is ``route_time`` (the same array); when no attempt can
    fail (no crashes, no timeout) the recovery cost (0), the number (1) and the outcome (completed)
    are read-only broadcasts, as are the calls' attempts (1) and statuses (completed)."""

    call: NDArray[np.signedinteger[Any]]
    """Call id of the attempt."""
    number: NDArray[np.signedinteger[Any]]
    """1 for a call's first attempt, 2 for its first retry, ..."""
    shard: NDArray[np.signedinteger[Any]]
    """The shard where the attempt ended (after its redirects)."""
    redirects: NDArray[np.signedinteger[Any]]
    """Times local admission forwarded it to another shard."""
    route_time: NDArray[np.float64]
    """When the router sent it."""
    arrive_time: NDArray[np.float64]
    """Arrival at ``shard`` (equals ``route_time``: routing and redirects are instantaneous)."""
    admit_time: NDArray[np.float64]
    """Admission into a container, NaN if never admitted (timed out in the queue)."""
    depart_time: NDArray[np.float64]
    """When it left its shard (completed, crashed or timed out)."""
    outcome: NDArray[np.signedinteger[Any]]
    """Index into :data:`ATTEMPT_OUTCOMES`."""
    cold: NDArray[np.bool_]
    """Whether its container started cold."""
    recovery_cost: NDArray[np.float64]
    """Time spent restoring the trajectory's sandbox state (retries only)."""


class ShardStats(NamedTuple):
    """Per-shard counters and sample-path integrals over ``[0, drain_time]`` (arrays of length S).

    Every arrival ends one way: ``arrivals = completed + crashed + timed_out + redirected``.
    ``area`` is ``∫ (queued + busy) dt`` accumulated by the simulator's own counters; Little's law on
    the sample path says ``area = Σ (depart − arrive)`` over the shard's attempts.
    """

    arrivals: NDArray[np.int64]
    """Attempts that arrived (redirect visits included)."""
    completed: NDArray[np.int64]
    """Attempts that completed here."""
    crashed: NDArray[np.int64]
    """Attempts whose container crashed here."""
    timed_out: NDArray[np.int64]
    """Attempts that timed out here."""
    redirected: NDArray[np.int64]
    """Arrivals forwarded to another shard."""
    queued: NDArray[np.int64]
    """Attempts that had to wait in the shard's queue."""
    cold_starts: NDArray[np.int64]
    """Cold container starts."""
    containers: NDArray[np.int64]
    """Containers ever started (at most ``capacity``)."""
    area: NDArray[np.float64]
    """``∫ (queued + busy) dt`` from the simulator's counters."""
    busy_area: NDArray[np.float64]
    """``∫ busy dt``: busy container-time."""
    utilisation: NDArray[np.float64]
    """``busy_area / (capacity · drain_time)``; NaN when capacity is unlimited."""


class AgentSummary(NamedTuple):
    """What a run says (frozen). Latencies over finished, non-aborted rollouts; times in time units."""

    steps: int
    """Trainer steps run."""
    end_time: float
    """Time of the last trainer step (the plain simulator's end time)."""
    drain_time: float
    """Time the last in-flight rollout finished (the pools are empty from then on)."""
    rollouts_per_time: float
    """Trained rollouts per simulated time unit (up to ``end_time``)."""
    rollouts_launched: int
    """Rollouts launched."""
    rollouts_trained: int
    """Rollouts trained (``steps · B``)."""
    rollouts_dropped: int
    """Rollouts dropped over the staleness bound ``eta`` at consumption."""
    rollouts_aborted: int
    """Rollouts aborted by a failed call (``on_failure='abort'``)."""
    latency_p50: float
    """Median rollout latency (launch to finish)."""
    latency_p99: float
    """99th percentile of rollout latency."""
    tool_share: float
    """Share of rollout latency spent in tool calls (waiting and executing)."""
    tool_wait_share: float
    """Share spent waiting for tools (queueing, retry back-off), outside containers."""
    tool_exec_share: float
    """Share spent inside containers (start, recovery, service, crashed work)."""
    calls_issued: int
    """Tool calls issued."""
    calls_completed: int
    """Calls that completed."""
    calls_failed: int
    """Calls reported failed (attempts exhausted)."""
    attempts: int
    """Attempts, retries included."""
    queued_attempts: int
    """Attempts that waited in a shard queue."""
    redirected_attempts: int
    """Attempts forwarded at least once."""
    crashes: int
    """Container crashes."""
    timeouts: int
    """Attempt timeouts."""
    cold_starts: int
    """Cold container starts."""
    queue_wait_mean: float
    """Mean time an attempt spends in a shard queue (0 for one admitted at once)."""
    utilisation: float
    """Pool-wide busy container-time over capacity · drain_time; NaN when unlimited."""
    staleness_mean: float
    """Mean staleness of the trained rollouts."""
    staleness_hist: tuple[int, ...]
    """Counts of trained rollouts by staleness 0, 1, 2, ..."""
    launched_length_mean: float
    """Mean length of every launched rollout."""
    trained_length_mean: float
    """Mean length of the trained rollouts."""
    length_ratio: float
    """``trained_length_mean / launched_length_mean`` (1 = no length bias; < 1 short-biased)."""
    length_bias: float
    """``length_ratio − 1``, the plain simulator's relative bias of the trained mean length."""
    length_ks: float
    """Kolmogorov distance ``sup_ℓ |F_trained(ℓ) − F_launched(ℓ)|`` of the empirical length laws."""


class AgentResult(NamedTuple):
    """Everything one run produced."""

    config: AgentConfig
    """The configuration that produced the run."""
    summary: AgentSummary
    """The :class:`AgentSummary`."""
    rollouts: RolloutTrace
    """Per-rollout columns (:class:`RolloutTrace`)."""
    calls: CallTrace
    """Per-call columns (:class:`CallTrace`)."""
    attempts: AttemptTrace
    """Per-attempt columns (:class:`AttemptTrace`)."""
    shards: ShardStats
    """Per-shard statistics (:class:`ShardStats`)."""

    def to_arrow(self) -> dict[str, Any]:
        """The four traces as ``pyarrow.Table`` objects, keyed ``rollouts``, ``calls``,
        ``attempts`` and ``shards`` (status codes also as names; the config in the metadata)."""
        import pyarrow as pa

        names = {
            ("rollouts", "status"): ROLLOUT_STATUSES,
            ("calls", "status"): CALL_STATUSES,
            ("attempts", "outcome"): ATTEMPT_OUTCOMES,
        }
        meta = {"refimpl.sim.agent.config": repr(self.config)}
        tables = {}
        for key in ("rollouts", "calls", "attempts", "shards"):
            part = getattr(self, key)
            data = {field: pa.array(getattr(part, field)) for field in part._fields}
            for (owner, column), labels in names.items():
                if owner == key:
                    codes = getattr(part, column)
                    data[f"{column}_name"] = pa.array([labels[int(c)] for c in codes])
            tables[key] = pa.table(data).replace_schema_metadata(meta)
        return tables

    def to_parquet(self, directory: Any) -> None:
        """Write :meth:`to_arrow` as ``rollouts.parquet``, ``calls.parquet``, ``attempts.parquet``
        and ``shards.parquet`` in ``directory`` (created if missing)."""
        from pathlib import Path

        import pyarrow.parquet as pq

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        for key, table in self.to_arrow().items():
            pq.write_table(table, str(out / f"{key}.parquet"))


def _summarize(
    cfg: AgentConfig,
    end_time: float,
    r: RolloutTrace,
    c: CallTrace,
    a: AttemptTrace,
    sh: ShardStats,
    drain: float,
    trained_lengths: Callable[[], tuple[float, float]],
) -> AgentSummary:
    """The summary; ``trained_lengths()`` gives the trained lengths' mean and ``length_ks``
    (:func:`_trained_length_stats`, computed meanwhile on another thread)."""
    trained = r.status == _TRAINED
    finished = r.status != _ABORTED
    every = bool(finished.all())  # no masked copies then (the same values, less memory)

    def kept(x: NDArray[np.float64]) -> NDArray[np.float64]:
        return x if every else x[finished]

    latency = r.finish_time - r.launch_time
    if not every:
        latency = latency[finished]
    total = float(latency.sum())
    tool = float(kept(r.tool_time).sum())
    exec_ = float(kept(r.tool_exec_time).sum())
    p50, p99 = _percentiles(latency, (50.0, 99.0))
    del latency
    never = np.isnan(a.admit_time)
    if never.any():
        waits = np.where(never, a.depart_time, a.admit_time)
        np.subtract(waits, a.arrive_time, out=waits)
    else:
        waits = a.admit_time - a.arrive_time
    del never
    wait_mean = float(waits.mean()) if waits.size else 0.0
    del waits
    stale = r.staleness[trained]
    hist = tuple(int(x) for x in np.bincount(stale))
    launched_mean = float(r.length.mean())
    util = math.nan
    if cfg.capacity is not None and drain > 0.0:
        util = float(sh.busy_area.sum()) / (cfg.capacity * cfg.shards * drain)
    trained_mean, length_ks = trained_lengths()
    return AgentSummary(
        steps=cfg.steps,
        end_time=float(end_time),
        drain_time=float(drain),
        rollouts_per_time=float(cfg.steps * cfg.batch / end_time),
        rollouts_launched=int(r.slot.size),
        rollouts_trained=int(trained.sum()),
        rollouts_dropped=int((r.status == _DROPPED).sum()),
        rollouts_aborted=int((r.status == _ABORTED).sum()),
        latency_p50=p50,
        latency_p99=p99,
        tool_share=tool / total if total > 0 else 0.0,
        tool_wait_share=(tool - exec_) / total if total > 0 else 0.0,
        tool_exec_share=exec_ / total if total > 0 else 0.0,
        calls_issued=int(c.rollout.size),
        calls_completed=int((c.status == _COMPLETED).sum()),
        calls_failed=int((c.status == _FAILED).sum()),
        attempts=int(a.call.size),
        queued_attempts=int(sh.queued.sum()),
        redirected_attempts=int((a.redirects > 0).sum()),
        crashes=int(sh.crashed.sum()),
        timeouts=int(sh.timed_out.sum()),
        cold_starts=int(sh.cold_starts.sum()),
        queue_wait_mean=wait_mean,
        utilisation=util,
        staleness_mean=float(stale.mean()),
        staleness_hist=hist,
        launched_length_mean=launched_mean,
        trained_length_mean=trained_mean,
        length_ratio=trained_mean / launched_mean,
        length_bias=trained_mean / launched_mean - 1.0,
        length_ks=length_ks,
    )


#: Where each column of the compiled engine's arrays is: the reference engine's attribute name ->
#: (array, row); ``a_cold`` is stored as 0/1.
_COMPILED_ROWS: dict[str, tuple[str, int]] = {
    "r_slot": ("RI", _c._R_SLOT),
    "r_k": ("RI", _c._R_K),
    "r_calls": ("RI", _c._R_CALLS),
    "r_version": ("RI", _c._R_VERSION),
    "r_step": ("RI", _c._R_STEP),
    "r_rank": ("RI", _c._R_RANK),
    "r_status": ("RI", _c._R_STATUS),
    "r_launch": ("RF", _c._R_LAUNCH),
    "r_finish": ("RF", _c._R_FINISH),
    "r_len": ("RF", _c._R_LEN),
    "r_tool": ("RF", _c._R_TOOL),
    "r_exec": ("RF", _c._R_EXEC),
    "c_rollout": ("CI", _c._C_ROLLOUT),
    "c_index": ("CI", _c._C_INDEX),
    "c_attempts": ("CI", _c._C_ATTEMPTS),
    "c_status": ("CI", _c._C_STATUS),
    "c_issue": ("CF", _c._C_ISSUE),
    "c_end": ("CF", _c._C_END),
    "c_service": ("CF", _c._C_SERVICE),
    "c_exec": ("CF", _c._C_EXEC),
    "a_call": ("AI", _c._A_CALL),
    "a_number": ("AI", _c._A_NUMBER),
    "a_shard": ("AI", _c._A_SHARD),
    "a_redirects": ("AI", _c._A_REDIRECTS),
    "a_outcome": ("AI", _c._A_OUTCOME),
    "a_cold": ("AI", _c._A_COLD),
    "a_route": ("AF", _c._A_ROUTE),
    "a_arrive": ("AF", _c._A_ARRIVE),
    "a_admit": ("AF", _c._A_ADMIT),
    "a_depart": ("AF", _c._A_DEPART),
    "a_recovery": ("AF", _c._A_RECOVERY),
    "s_arrivals": ("SH", _c._S_ARRIVALS),
    "s_completed": ("SH", _c._S_COMPLETED),
    "s_crashed": ("SH", _c._S_CRASHED),
    "s_timed_out": ("SH", _c._S_TIMED_OUT),
    "s_redirected": ("SH", _c._S_REDIRECTED),
    "s_queued": ("SH", _c._S_QUEUED),
    "s_cold": ("SH", _c._S_COLD),
    "s_containers": ("SH", _c._S_CONTAINERS),
    "s_area": ("SHF", _c._S_AREA),
    "s_busy_area": ("SHF", _c._S_BUSY_AREA),
}


def compiled_columns(run: _c.CompiledRun, config: AgentConfig) -> Callable[[str], Any]:
    """The columns of a compiled run by the reference engine's attribute names; a column the
    configuration makes constant (a constant service time; no recovery cost when every call takes
    one attempt) is that constant, as a read-only broadcast of one value."""
    constant = {"c_service": float(config.tool_latency) if not _is_frozen_law(config.tool_latency)
                else 0.0, "a_recovery": 0.0}  # fmt: skip
    sizes = {"c": run.CI[0].size, "a": run.AI[_c._A_SHARD].size}

    def column(name: str) -> Any:
        where, row = _COMPILED_ROWS[name]
        out = getattr(run, where)[row]
        if out is _c._PLACEHOLDER_CALL:  # every call took one attempt: attempt a is call a
            return np.arange(sizes["a"], dtype=np.int32)
        if name in _c._ONE_VALUES and any(out is x for x in _c._PLACEHOLDERS_BY_TYPE.values()):
            return np.broadcast_to(out.dtype.type(_c._ONE_VALUES[name]), (sizes[name[0]],))
        if out is _c._PLACEHOLDER:
            return np.broadcast_to(np.float64(constant[name]), (sizes[name[0]],))
        return out

    return column


def _column(values: Any, dtype: type) -> NDArray[Any]:
    """A read-only array of ``values`` (a list of the reference engine, or a column of the compiled
    one's, which is used as it is when it has the dtype already; 0/1 bytes are viewed as bool)."""
    if dtype is np.bool_ and isinstance(values, np.ndarray) and values.dtype == np.int8:
        values = values.view(np.bool_)
    out: NDArray[Any] = np.asarray(values, dtype=dtype)
    if out.flags.writeable:
        out.flags.writeable = False
    return out


#: Rollouts handed to :func:`refimpl.sample_staleness` at once (it works in float64: chunks keep
#: its temporaries small at 10^7 rollouts).
_CHUNK = 1 << 18


def assemble(
    config: AgentConfig,
    column: Callable[[str], Any],
    end_time: float,
    drain: float,
    sorted_lengths: Callable[[], NDArray[np.float64]] | None = None,
) -> AgentResult:
    """The traces, shard statistics and summary of a run from its engine's columns (``column(name)``:
    the reference engine's attribute ``name``, a list, or the compiled engine's row of that name);
    ``sorted_lengths``, where given, returns the launched lengths sorted."""

    dtypes = _int_dtypes(config)

    def i64(name: str) -> NDArray[np.signedinteger[Any]]:
        return _column(column(name), dtypes.get(name, np.int64))

    def f64(name: str) -> NDArray[np.float64]:
        return _column(column(name), np.float64)

    status, step, version = i64("r_status"), i64("r_step"), i64("r_version")
    length = f64("r_len")
    # the one sort of the summary, on the other core while this thread does the rest
    trained_lengths = in_background(_trained_length_stats, length, status, sorted_lengths)
    # staleness from refimpl.staleness (conventions §staleness): s = j − min_t v_t, one launch
    # version per rollout
    staleness = np.full(status.size, -1, dtype=dtypes["r_step"])
    for lo in range(0, status.size, _CHUNK):
        part = slice(lo, lo + _CHUNK)
        consumed = np.flatnonzero((status[part] == _TRAINED) | (status[part] == _DROPPED)) + lo
        sample = sample_staleness(step[consumed], version[consumed]).sample
        staleness[consumed] = sample.astype(staleness.dtype)
    staleness.flags.writeable = False
    rollouts = RolloutTrace(
        slot=i64("r_slot"),
        launch_index=i64("r_k"),
        launch_time=f64("r_launch"),
        finish_time=f64("r_finish"),
        length=length,
        calls=i64("r_calls"),
        version=version,
        trained_step=step,
        staleness=staleness,
        completion_rank=i64("r_rank"),
        status=status,
        tool_time=f64("r_tool"),
        tool_exec_time=f64("r_exec"),
    )
    calls = CallTrace(
        rollout=i64("c_rollout"),
        turn=i64("c_index"),
        issue_time=f64("c_issue"),
        end_time=f64("c_end"),
        service=f64("c_service"),
        attempts=i64("c_attempts"),
        status=i64("c_status"),
        exec_time=f64("c_exec"),
    )
    attempts = AttemptTrace(
        call=i64("a_call"),
        number=i64("a_number"),
        shard=i64("a_shard"),
        redirects=i64("a_redirects"),
        route_time=f64("a_route"),
        arrive_time=f64("a_arrive"),
        admit_time=f64("a_admit"),
        depart_time=f64("a_depart"),
        outcome=i64("a_outcome"),
        cold=_column(column("a_cold"), np.bool_),
        recovery_cost=f64("a_recovery"),
    )
    cap = config.capacity
    busy_area = f64("s_busy_area")
    if cap is None or drain <= 0.0:
        util = np.full(config.shards, np.nan)
    else:
        util = np.asarray(busy_area) / (cap * drain)
    util.flags.writeable = False
    shards = ShardStats(
        arrivals=i64("s_arrivals"),
        completed=i64("s_completed"),
        crashed=i64("s_crashed"),
        timed_out=i64("s_timed_out"),
        redirected=i64("s_redirected"),
        queued=i64("s_queued"),
        cold_starts=i64("s_cold"),
        containers=i64("s_containers"),
        area=f64("s_area"),
        busy_area=busy_area,
        utilisation=util,
    )
    summary = _summarize(
        config, end_time, rollouts, calls, attempts, shards, drain, trained_lengths
    )
    return AgentResult(config, summary, rollouts, calls, attempts, shards)


def _trained_length_stats(
    length: NDArray[np.float64],
    status: NDArray[np.signedinteger[Any]],
    sorted_lengths: Callable[[], NDArray[np.float64]] | None = None,
) -> tuple[float, float]:
    """The trained lengths' mean and :func:`_length_ks` (``length`` and ``status``: the rollout
    columns; ``sorted_lengths``, where given, returns them all sorted: the trained ones sorted are
    those without the others)."""
    trained = status == _TRAINED
    lengths = length[trained]
    mean = float(lengths.mean())  # before _length_ks sorts them
    if sorted_lengths is None:
        return mean, _length_ks(lengths, length[~trained])
    rs = np.sort(length[~trained])
    return mean, _sorted_length_ks(without(sorted_lengths(), rs), rs)


def _percentiles(x: NDArray[np.float64], q: tuple[float, ...]) -> tuple[float, ...]:
    """``np.percentile(x, q, overwrite_input=True)``, bit for bit
    (:func:`refimpl.sim._trace.sorted_percentiles`). The order statistics numpy's rule reads are
    read off the values' cells (:mod:`refimpl.sim._order`: a few linear passes) where the values
    qualify (no negative value, ``-0.0`` or NaN: latencies do), else from one partition of ``x``
    in place (10^6 lognormal latencies, best of five: 3.4 ms against the partition's 9.5).
    numpy's own function also imports ``numpy.ma`` on its first call, 7-14 ms of a fresh
    ``refimpl simulate`` call. ``x`` holds at least one value."""
    n = x.size
    cells = float_cells(x)
    if cells is not None:
        return tuple(float(v) for v in sorted_percentiles(n, q, cells.nth))

    def pick(k: NDArray[np.intp]) -> NDArray[np.float64]:
        if not placed:  # the first call asks for the lower indices; the upper are the next ones
            kth = sorted({min(int(i) + j, n - 1) for i in k for j in (0, 1)})
            x.partition(kth)
            placed.append(True)
        return x[k]

    placed: list[bool] = []
    return tuple(float(v) for v in sorted_percentiles(n, q, pick))


def _kolmogorov_distance(x: NDArray[np.float64], y: NDArray[np.float64]) -> float:
    """``sup |F_x − F_y|`` of two empirical CDFs, evaluated at every sample point (both are step
    functions that jump only there), in chunks: small temporaries at 10^7 rollouts."""
    xs, ys = np.sort(x), np.sort(y)
    best = 0.0
    for sample in (xs, ys):
        for lo in range(0, sample.size, _CHUNK):
            grid = sample[lo : lo + _CHUNK]
            fx = np.searchsorted(xs, grid, side="right") / xs.size
            fy = np.searchsorted(ys, grid, side="right") / ys.size
            best = max(best, float(np.max(np.abs(fx - fy))))
    return best


def _length_ks(trained: NDArray[np.float64], rest: NDArray[np.float64]) -> float:
    """The summary's ``length_ks``: :func:`_kolmogorov_distance` of the trained lengths against
    the launched ones, which are ``trained`` and ``rest`` (the rollouts not trained: in flight at
    the end, dropped or aborted; few), without sorting the launched lengths.

    ``F_launched`` jumps only at launched values, and every trained value is one, so the sup is
    taken over the distinct values of ``trained`` and the values of ``rest``; at a value ``v``
    the launched count is the trained count plus ``#{rest <= v}``, the same integers
    :func:`_kolmogorov_distance` finds by sorting both samples, divided the same way: the same
    float. ``trained`` (a scratch copy, at least one length) is sorted in place."""
    trained.sort()
    return _sorted_length_ks(trained, np.sort(rest))


def _sorted_length_ks(trained: NDArray[np.float64], rs: NDArray[np.float64]) -> float:
    """:func:`_length_ks` of the trained and the other lengths, both sorted."""
    n = trained.size + rs.size
    return max(_gap_at_rest(trained, rs, n), _gap_at_trained(trained, rs, n))


def _gap_at_rest(trained: NDArray[np.float64], rs: NDArray[np.float64], n: int) -> float:
    """The largest gap of the CDFs at the values of ``rs`` (both samples sorted; ``n`` launched
    lengths); a value also trained is a point :func:`_gap_at_trained` gives again."""
    at = np.searchsorted(trained, rs, side="right")
    return _largest_gap(at, at + np.searchsorted(rs, rs, side="right"), trained.size, n)


def _gap_at_trained(trained: NDArray[np.float64], rs: NDArray[np.float64], n: int) -> float:
    """The largest gap of the CDFs at the distinct values of ``trained`` (both samples sorted;
    ``n`` launched lengths). The other lengths at or below ``trained[i]`` are those whose first
    place in ``trained`` is at most ``i``: a running count of those places (a search of the few
    other lengths, not of every trained one)."""
    best, n_x = 0.0, trained.size
    places = np.searchsorted(trained, rs, side="left")  # sorted, as rs is
    for lo in range(0, n_x, _CHUNK):  # in chunks: small temporaries at 10^7 rollouts
        hi = min(lo + _CHUNK, n_x)
        last = np.ones(hi - lo, dtype=bool)  # a value's last index (the next one differs)
        np.not_equal(trained[lo : hi - 1], trained[lo + 1 : hi], out=last[:-1])
        if hi < n_x:
            last[-1] = trained[hi - 1] != trained[hi]
        at = np.flatnonzero(last)
        count = at + (lo + 1)  # trained lengths <= each distinct value
        first, end = np.searchsorted(places, [lo, hi])
        rest_below = np.cumsum(np.bincount(places[first:end] - lo, minlength=hi - lo))
        best = max(best, _largest_gap(count, count + (rest_below[at] + first), n_x, n))
    return best


def _largest_gap(count: NDArray[np.int64], launched: NDArray[np.int64], n_x: int, n: int) -> float:
    """``max |count / n_x − launched / n|`` (0 for no points): the CDFs' gap at those points."""
    if count.size == 0:
        return 0.0
    return float(np.max(np.abs(count / n_x - launched / n)))


# ---------------------------------------------------------------------------------------------
# JSON summary and command line
# ---------------------------------------------------------------------------------------------


def agent_summary_dict(result: AgentResult) -> dict[str, Any]:
    """A JSON-able dict of a run's summary, plus the per-shard statistics.

    NaN (utilisation of an unlimited pool) becomes ``None`` so that ``json.dumps`` writes strict JSON.

    Parameters
    ----------
    result : AgentResult
        A finished run.

    Returns
    -------
    dict
        Every :class:`AgentSummary` field (``staleness_hist`` as a list), ``"mode": "agent"``,
        ``"length_mean"`` (the trained mean, as ``refimpl simulate`` reports it) and ``"shards"``: a
        list of per-shard dicts.

    Raises
    ------
    TypeError
        If ``result`` is not an :class:`AgentResult`.

    Examples
    --------
    >>> import json, scipy.stats as st
    >>> from refimpl.sim.agent import simulate_agent
    >>> res = simulate_agent(AgentConfig(slots=2, batch=2, steps=2, lengths=st.expon(), seed=1))
    >>> d = agent_summary_dict(res)
    >>> d["rollouts_trained"], d["utilisation"], len(json.dumps(d)) > 0
    (4, None, True)
    """
    if not isinstance(result, AgentResult):
        raise wrong_type(
            "result", "an AgentResult", result, "Pass the value returned by simulate_agent."
        )

    def clean(x: Any) -> Any:
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, tuple):
            return [clean(v) for v in x]
        return x

    out: dict[str, Any] = {"mode": "agent"}
    out.update({k: clean(v) for k, v in result.summary._asdict().items()})
    out["length_mean"] = out["trained_length_mean"]
    sh = result.shards
    out["shards"] = [
        {k: clean(getattr(sh, k)[s].item()) for k in sh._fields}
        for s in range(result.config.shards)
    ]
    return out
