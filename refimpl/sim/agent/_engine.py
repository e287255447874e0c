"""Agent rollouts: the discrete-event engine. The tool-call model (calls, attempts, crashes, timeouts,
retries and recovery), the sharded sandbox pool with its router and local admission, the slots and
the trainer, over one heap; and :func:`simulate_agent`, which runs it and hands its columns to the
accounting (``_results``)."""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from refimpl._validation import wrong_type
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
    AgentConfig,
    _is_frozen_law,
)
from refimpl.sim.agent._results import (
    AgentResult,
    AttemptTrace,
    CallTrace,
    RolloutTrace,
    ShardStats,
    _summarize,
)
from refimpl.staleness import sample_staleness

# ---------------------------------------------------------------------------------------------
# the engine
# ---------------------------------------------------------------------------------------------


class _Stream:
    """Draws from a constant or a frozen law with its own generator, in buffered chunks."""

    __slots__ = ("buf", "const", "gen", "law", "pos")

    def __init__(self, law: Any, gen: np.random.Generator) -> None:
        self.law = law if _is_frozen_law(law) else None
        self.const = None if self.law is not None else law
        self.gen = gen
        self.buf: list[Any] = []
        self.pos = 0

    def draw(self) -> Any:
        if self.law is None:
            return self.const
        if self.pos == len(self.buf):
            self.buf = np.asarray(self.law.rvs(size=512, random_state=self.gen)).tolist()
            self.pos = 0
        value = self.buf[self.pos]
        self.pos += 1
        return value


def _least_loaded(loads: list[int], allowed: list[int]) -> int:
    """The router's choice: the allowed shard with the smallest load in its view (lowest index)."""
    best = allowed[0]
    best_load = loads[best]
    for s in allowed[1:]:
        if loads[s] < best_load:
            best, best_load = s, loads[s]
    return best


class _Engine:
    """The event loop and all state; columns are Python lists until the run ends."""

    __slots__ = (
        "a_admit",
        "a_arrive",
        "a_box",
        "a_call",
        "a_cold",
        "a_depart",
        "a_number",
        "a_outcome",
        "a_recovery",
        "a_redirects",
        "a_route",
        "a_shard",
        "a_state",
        "a_visited",
        "aborted",
        "c_attempts",
        "c_end",
        "c_exec",
        "c_index",
        "c_issue",
        "c_rollout",
        "c_service",
        "c_status",
        "cap",
        "cfg",
        "completed",
        "cont_alive",
        "cont_release",
        "crash_gen",
        "end_time",
        "heap",
        "last_t",
        "launching",
        "len_stream",
        "max_redirects",
        "progress",
        "r_calls",
        "r_done_service",
        "r_exec",
        "r_finish",
        "r_issued",
        "r_k",
        "r_launch",
        "r_len",
        "r_rank",
        "r_seg",
        "r_slot",
        "r_status",
        "r_step",
        "r_tool",
        "r_version",
        "s_area",
        "s_arrivals",
        "s_busy",
        "s_busy_area",
        "s_cold",
        "s_completed",
        "s_crashed",
        "s_free",
        "s_nq",
        "s_queue",
        "s_queued",
        "s_redirected",
        "s_timed_out",
        "seq",
        "service_stream",
        "slot_k",
        "target",
        "trained",
        "turns_stream",
        "version",
        "view",
    )

    def __init__(self, cfg: AgentConfig) -> None:
        self.cfg = cfg
        gens = np.random.default_rng(cfg.seed).spawn(4)
        self.len_stream = _Stream(cfg.lengths, gens[0]) if _is_frozen_law(cfg.lengths) else None
        self.turns_stream = _Stream(cfg.turns, gens[1])
        self.service_stream = _Stream(cfg.tool_latency, gens[2])
        self.crash_gen = gens[3]
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.version = 0
        self.completed = 0
        self.trained = 0
        self.aborted = 0
        self.progress: Callable[[int], None] | None = None
        self.target = cfg.steps * cfg.batch
        self.launching = True
        self.max_redirects: int = cfg.shards - 1 if cfg.max_redirects is None else cfg.max_redirects
        self.end_time = math.nan
        self.slot_k = [0] * cfg.slots
        self.r_slot: list[int] = []
        self.r_k: list[int] = []
        self.r_calls: list[int] = []
        self.r_issued: list[int] = []
        self.r_version: list[int] = []
        self.r_step: list[int] = []
        self.r_rank: list[int] = []
        self.r_status: list[int] = []
        self.c_rollout: list[int] = []
        self.c_index: list[int] = []
        self.c_attempts: list[int] = []
        self.c_status: list[int] = []
        self.a_call: list[int] = []
        self.a_number: list[int] = []
        self.a_redirects: list[int] = []
        self.a_shard: list[int] = []
        self.a_outcome: list[int] = []
        self.a_box: list[int] = []
        self.a_state: list[int] = []
        self.a_visited: list[int] = []
        self.r_launch: list[float] = []
        self.r_finish: list[float] = []
        self.r_len: list[float] = []
        self.r_seg: list[float] = []
        self.r_tool: list[float] = []
        self.r_exec: list[float] = []
        self.r_done_service: list[float] = []
        self.c_issue: list[float] = []
        self.c_end: list[float] = []
        self.c_service: list[float] = []
        self.c_exec: list[float] = []
        self.a_route: list[float] = []
        self.a_arrive: list[float] = []
        self.a_admit: list[float] = []
        self.a_depart: list[float] = []
        self.a_recovery: list[float] = []
        self.a_cold: list[bool] = []
        n = cfg.shards
        self.cap = math.inf if cfg.capacity is None else float(cfg.capacity)
        self.s_queue: list[deque[int]] = [deque() for _ in range(n)]
        self.s_free: list[list[int]] = [[] for _ in range(n)]
        self.s_nq: list[int] = [0] * n
        self.s_busy: list[int] = [0] * n
        self.s_arrivals: list[int] = [0] * n
        self.s_completed: list[int] = [0] * n
        self.s_crashed: list[int] = [0] * n
        self.s_timed_out: list[int] = [0] * n
        self.s_redirected: list[int] = [0] * n
        self.s_queued: list[int] = [0] * n
        self.s_cold: list[int] = [0] * n
        self.s_area = [0.0] * n
        self.s_busy_area = [0.0] * n
        self.last_t = [0.0] * n
        self.cont_alive: list[bool] = []
        self.cont_release: list[float] = []
        self.view = [0] * n

    # -- bookkeeping ---------------------------------------------------------------------------

    def push(self, t: float, prio: int, kind: int, ref: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, prio, self.seq, kind, ref))

    def touch(self, s: int, t: float) -> None:
        """Accumulate shard ``s``'s integrals up to ``t`` (before any change of its counters)."""
        dt = t - self.last_t[s]
        if dt:
            busy = self.s_busy[s]
            self.s_area[s] += (self.s_nq[s] + busy) * dt
            self.s_busy_area[s] += busy * dt
        self.last_t[s] = t

    def loads(self) -> list[int]:
        if self.cfg.refresh == 0.0:
            return [q + b for q, b in zip(self.s_nq, self.s_busy, strict=True)]
        return self.view

    # -- rollouts ------------------------------------------------------------------------------

    def launch(self, slot: int, t: float) -> None:
        cfg = self.cfg
        k = self.slot_k[slot]
        self.slot_k[slot] = k + 1
        if self.len_stream is None:
            mat = cfg.lengths
            if k >= mat.shape[1]:
                raise ValueError(
                    f"lengths must have a column for every launch; slot {slot} needed launch {k + 1} "
                    f"but lengths has {mat.shape[1]} columns. Pass a longer N × K matrix (the "
                    "SimPy peer's margin, ceil(1.25·rollouts/slots) + 64 columns, is ample when "
                    "tool latency is small)."
                )
            length = float(mat[slot, k])
        else:
            length = float(self.len_stream.draw())
            if not length > 0.0:
                raise ValueError(
                    f"lengths must draw positive token counts; got {length!r} at launch {k} of slot "
                    f"{slot}. Pass a law supported on (0, inf)."
                )
        turns = int(self.turns_stream.draw())
        if turns < 0:
            raise ValueError(
                f"turns must draw counts >= 0; got {turns}. Pass a law on {{0, 1, ...}}."
            )
        r = len(self.r_slot)
        self.r_slot.append(slot)
        self.r_k.append(k)
        self.r_launch.append(t)
        self.r_finish.append(math.nan)
        self.r_len.append(length)
        self.r_calls.append(turns)
        self.r_issued.append(0)
        self.r_seg.append(length * cfg.token_time / (turns + 1))
        self.r_version.append(self.version)
        self.r_step.append(-1)
        self.r_rank.append(-1)
        self.r_status.append(_PENDING)
        self.r_tool.append(0.0)
        self.r_exec.append(0.0)
        self.r_done_service.append(0.0)
        self.push(t + self.r_seg[r], _PRIO_EVENT, _SEG_END, r)

    def segment_end(self, r: int, t: float) -> None:
        issued = self.r_issued[r]
        if issued < self.r_calls[r]:
            self.r_issued[r] = issued + 1
            c = len(self.c_rollout)
            self.c_rollout.append(r)
            self.c_index.append(issued)
            self.c_issue.append(t)
            self.c_end.append(math.nan)
            self.c_service.append(float(self.service_stream.draw()))
            self.c_attempts.append(0)
            self.c_status.append(_PENDING)
            self.c_exec.append(0.0)
            self.start_attempt(c, t)
        else:
            self.finish_rollout(r, t)

    def finish_rollout(self, r: int, t: float) -> None:
        self.r_finish[r] = t
        n = self.completed
        self.completed = n + 1
        self.r_rank[r] = n
        m = self.trained
        if m < self.target:
            step = m // self.cfg.batch
            self.r_step[r] = step
            eta = self.cfg.eta
            if eta is not None and step - self.r_version[r] > eta:
                self.r_status[r] = _DROPPED  # over the bound at consumption: does not fill a batch
            else:
                self.trained = m + 1
                self.r_status[r] = _TRAINED
                if (m + 1) % self.cfg.batch == 0:
                    self.batch_full(t)
                if m + 1 == self.target:
                    self.launching = False
                    self.end_time = t
        else:
            self.r_status[r] = _UNTRAINED
        if self.launching:
            self.launch(self.r_slot[r], t)

    def batch_full(self, t: float) -> None:
        """Publish the next version at the end of instant ``t`` (tie rule: launches at ``t`` see the
        old version)."""
        self.push(t, _PRIO_PUBLISH, _PUBLISH, 0)

    def call_ended(self, c: int, t: float, status: int) -> None:
        self.c_status[c] = status
        self.c_end[c] = t
        r = self.c_rollout[c]
        self.r_tool[r] += t - self.c_issue[c]
        self.r_exec[r] += self.c_exec[c]
        self.r_done_service[r] += self.c_service[c]
        if status == _FAILED and self.cfg.on_failure == "abort":
            self.r_finish[r] = t
            self.r_status[r] = _ABORTED
            self.aborted += 1
            if self.aborted > 1000 + 100 * self.target:
                raise ValueError(
                    f"on_failure='abort' must leave some rollouts to train; {self.aborted} "
                    f"rollouts were aborted while only {self.trained} of {self.target} trained. "
                    "Calls fail far more often than they succeed: raise timeout or max_attempts, "
                    "lower crash_rate, or pass on_failure='continue'."
                )
            if self.launching:
                self.launch(self.r_slot[r], t)
            return
        self.push(t + self.r_seg[r], _PRIO_EVENT, _SEG_END, r)

    # -- attempts ------------------------------------------------------------------------------

    def start_attempt(self, c: int, t: float) -> None:
        cfg = self.cfg
        a = len(self.a_call)
        number = self.c_attempts[c] + 1
        self.c_attempts[c] = number
        self.a_call.append(c)
        self.a_number.append(number)
        self.a_route.append(t)
        self.a_redirects.append(0)
        self.a_shard.append(-1)
        self.a_arrive.append(math.nan)
        self.a_admit.append(math.nan)
        self.a_depart.append(math.nan)
        self.a_outcome.append(_PENDING)
        self.a_cold.append(False)
        self.a_box.append(-1)
        self.a_state.append(0)
        recovery = 0.0
        if number > 1:
            if cfg.recovery == "replay":
                recovery = cfg.replay_cost * self.c_index[c]
            else:
                recovery = self.r_done_service[self.c_rollout[c]]
        self.a_recovery.append(recovery)
        if cfg.timeout is not None:
            self.push(t + cfg.timeout, _PRIO_EVENT, _TIMEOUT, a)
        shards = list(range(cfg.shards))
        s = _least_loaded(self.loads(), shards) if cfg.shards > 1 else 0
        self.a_visited.append(1 << s)
        self.arrive(a, s, t)

    def arrive(self, a: int, s: int, t: float) -> None:
        cfg = self.cfg
        self.s_arrivals[s] += 1
        if self.s_busy[s] < self.cap:
            self.a_shard[a] = s
            self.a_arrive[a] = t
            self.admit(a, s, t)
            return
        if cfg.admission == "redirect" and self.a_redirects[a] < self.max_redirects:
            visited = self.a_visited[a]
            loads = self.loads()
            others = [
                x for x in range(cfg.shards) if not (visited >> x) & 1 and loads[x] < self.cap
            ]
            if others:
                self.s_redirected[s] += 1
                target = _least_loaded(loads, others)
                self.a_redirects[a] += 1
                self.a_visited[a] = visited | (1 << target)
                self.arrive(a, target, t)
                return
        self.touch(s, t)
        self.a_shard[a] = s
        self.a_arrive[a] = t
        self.a_state[a] = _A_QUEUED
        self.s_nq[s] += 1
        self.s_queued[s] += 1
        self.s_queue[s].append(a)

    def admit(self, a: int, s: int, t: float) -> None:
        cfg = self.cfg
        self.touch(s, t)
        free = self.s_free[s]
        if free:
            box = free.pop()
            cold = (not self.cont_alive[box]) or (t - self.cont_release[box] > cfg.keepalive)
        else:
            box = len(self.cont_alive)
            self.cont_alive.append(True)
            self.cont_release.append(t)
            cold = True
        self.cont_alive[box] = True
        self.s_busy[s] += 1
        self.a_state[a] = _A_SERVICE
        self.a_admit[a] = t
        self.a_cold[a] = cold
        if cold:
            self.s_cold[s] += 1
        c = self.a_call[a]
        occupancy = (cfg.cold_start if cold else cfg.warm_start) + self.a_recovery[a]
        occupancy += self.c_service[c]
        self.a_box[a] = box
        if cfg.crash_rate > 0.0:
            life = float(self.crash_gen.exponential(1.0 / cfg.crash_rate))
            if life < occupancy:
                self.push(t + life, _PRIO_EVENT, _CRASH, a)
                return
        self.push(t + occupancy, _PRIO_EVENT, _DONE, a)

    def release(self, a: int, s: int, t: float, alive: bool) -> None:
        """Free attempt ``a``'s container on shard ``s`` and admit the next queued attempt."""
        box = self.a_box[a]
        self.touch(s, t)
        self.s_busy[s] -= 1
        self.cont_alive[box] = alive
        self.cont_release[box] = t
        self.s_free[s].append(box)
        self.c_exec[self.a_call[a]] += t - self.a_admit[a]
        queue = self.s_queue[s]
        while queue:
            nxt = queue.popleft()
            if self.a_state[nxt] == _A_QUEUED:
                self.s_nq[s] -= 1
                self.admit(nxt, s, t)
                break

    def leave_queue(self, s: int, t: float) -> None:
        """An attempt timed out while queued at ``s`` (lazily removed from the deque)."""
        self.touch(s, t)
        self.s_nq[s] -= 1

    def end_attempt(self, a: int, t: float, outcome: int) -> None:
        s = self.a_shard[a]
        state = self.a_state[a]
        self.a_state[a] = _A_ENDED
        if state == _A_SERVICE:
            self.release(a, s, t, alive=outcome == _COMPLETED)
        else:
            self.leave_queue(s, t)
        self.a_outcome[a] = outcome
        self.a_depart[a] = t
        c = self.a_call[a]
        if outcome == _COMPLETED:
            self.s_completed[s] += 1
            self.call_ended(c, t, _COMPLETED)
        else:
            if outcome == _CRASHED:
                self.s_crashed[s] += 1
            else:
                self.s_timed_out[s] += 1
            self.retry_or_fail(c, t)

    def retry_or_fail(self, c: int, t: float) -> None:
        if self.c_attempts[c] < self.cfg.max_attempts:
            self.push(t + self.cfg.retry_delay, _PRIO_EVENT, _RETRY, c)
        else:
            self.call_ended(c, t, _FAILED)

    # -- loop ----------------------------------------------------------------------------------

    def run(self) -> float:
        cfg = self.cfg
        for slot in range(cfg.slots):
            self.launch(slot, 0.0)
        if cfg.refresh > 0.0 and cfg.shards > 1:
            self.push(cfg.refresh, _PRIO_REFRESH, _REFRESH, 1)
        heap = self.heap
        pop = heapq.heappop
        last = 0.0  # time of the last event that changed anything (stale events are skipped)
        while heap:
            t, _prio, _seq, kind, ref = pop(heap)
            if kind == _SEG_END:
                self.segment_end(ref, t)
            elif kind in (_DONE, _CRASH):
                if self.a_state[ref] != _A_SERVICE:
                    continue
                self.end_attempt(ref, t, _COMPLETED if kind == _DONE else _CRASHED)
            elif kind == _TIMEOUT:
                if self.a_state[ref] == _A_ENDED:
                    continue
                self.end_attempt(ref, t, _TIMED_OUT)
            elif kind == _RETRY:
                self.start_attempt(ref, t)
            elif kind == _PUBLISH:
                self.version += 1
                if self.progress is not None:
                    self.progress(self.version)
            else:  # _REFRESH: the snapshot at ref·δ; the next one while anything else is pending
                if heap:
                    self.view = [q + b for q, b in zip(self.s_nq, self.s_busy, strict=True)]
                    self.push((ref + 1) * cfg.refresh, _PRIO_REFRESH, _REFRESH, ref + 1)
                continue
            last = t
        if self.trained < self.target:
            raise RuntimeError(
                f"internal error: the run stalled after {self.trained} of {self.target} rollouts "
                "(a rollout never finished); please report it with the config."
            )
        for s in range(cfg.shards):
            self.touch(s, last)
        return last


def _i64(values: list[Any]) -> NDArray[np.int64]:
    out = np.asarray(values, dtype=np.int64)
    out.flags.writeable = False
    return out


def _f64(values: list[Any]) -> NDArray[np.float64]:
    out = np.asarray(values, dtype=np.float64)
    out.flags.writeable = False
    return out


def _ro(arr: NDArray[Any]) -> NDArray[Any]:
    arr.flags.writeable = False
    return arr


def simulate_agent(
    config: AgentConfig, *, progress: Callable[[int], None] | None = None
) -> AgentResult:
    r"""Simulate one run of the agentic rollout queue with sandboxed tool calls.

    Rollout ``i`` launched at version :math:`v_i` and trained at step :math:`j_i` (the
    :math:`\lfloor n/B \rfloor` of its completion rank :math:`n`) has staleness

    .. math::

        s_i = j_i - v_i, \qquad v_i = \#\{k : T_k < t^{\text{launch}}_i\},

    with :math:`T_k` the publication of version :math:`k+1` (conventions §tie-rule). Its latency is its
    decode time :math:`\ell_i\, t_{\text{token}}` plus the time its calls take, queueing, starts,
    recovery, crashes and back-off included; on every shard the sample path obeys Little's law

    .. math::

        \int_0^{T} N_s(t)\,dt \;=\; \sum_{a \in s} (d_a - a_a)
        \quad\Longleftrightarrow\quad \bar L_s = \lambda_s \bar W_s ,

    because the pools are empty at :math:`0` and at the drain time :math:`T`.

    Parameters
    ----------
    config : AgentConfig
        The run (validated when it was built).
    progress : callable, optional
        Called with the number of trainer steps done after each step (e.g. to advance a progress
        bar); it must not touch the simulation.

    Returns
    -------
    AgentResult
        ``summary`` (:class:`AgentSummary`), per-rollout, per-call and per-attempt columnar traces,
        and per-shard statistics (:class:`ShardStats`). Seeded runs reproduce exactly.

    Raises
    ------
    TypeError
        If ``config`` is not an :class:`AgentConfig`.
    ValueError
        If an ``N × K`` length matrix runs out of columns for a slot (the message says how many
        launches it needed).

    Notes
    -----
    Invariants (tests/test_sim_agent.py): with unlimited capacity, zero tool latency and no faults the
    run equals the plain queue (SimPy peer) sample for sample; ``calls_issued = calls_completed +
    calls_failed`` and every call has one final status; on every shard ``arrivals = completed +
    crashed + timed_out + redirected`` and Little's law holds on the sample path to float rounding;
    averaged over seeds a consistent router view (``refresh = 0``) queues no longer than a stale one;
    mean staleness is at most ``(N/B)·(steps − 1)/steps`` (every slot holds one rollout at each
    publication: Little's law on the slots, whatever the tools do).

    The staleness and length measures follow conventions §vocabulary, §dispatch: the trained length law is compared with the
    launched one through ``length_ratio`` (``E_q[L] / E_p[L]``).

    References
    ----------
    DeepSeek DSec sandbox service (sharded pools, local admission, relaxed global consistency);
    Little, "A proof for the queuing formula L = λW" (1961); conventions §vocabulary, §async-dispatch.

    Examples
    --------
    Two calls per rollout, 0.5 time units each, on one shard of 2 containers:

    >>> import scipy.stats as st
    >>> cfg = AgentConfig(slots=4, batch=4, steps=5, lengths=st.expon(scale=4.0), turns=2,
    ...                   tool_latency=0.5, capacity=2, seed=3)
    >>> res = simulate_agent(cfg)
    >>> s = res.summary
    >>> s.rollouts_trained, s.calls_issued == s.calls_completed + s.calls_failed
    (20, True)
    >>> bool(abs(res.shards.area[0] - (res.attempts.depart_time - res.attempts.arrive_time).sum()) < 1e-9)
    True
    """
    if not isinstance(config, AgentConfig):
        raise wrong_type(
            "config", "an AgentConfig", config, "Build one with refimpl.sim.agent.AgentConfig(...)."
        )
    eng = _Engine(config)
    eng.progress = progress
    drain = eng.run()
    # staleness from refimpl.staleness (conventions §staleness): s = j − min_t v_t, one launch version per rollout
    status = np.asarray(eng.r_status, dtype=np.int64)
    step = np.asarray(eng.r_step, dtype=np.int64)
    version = np.asarray(eng.r_version, dtype=np.int64)
    staleness = np.full(status.size, -1, dtype=np.int64)
    consumed = (status == _TRAINED) | (status == _DROPPED)
    staleness[consumed] = sample_staleness(step[consumed], version[consumed]).sample.astype(
        np.int64
    )
    rollouts = RolloutTrace(
        slot=_i64(eng.r_slot),
        launch_index=_i64(eng.r_k),
        launch_time=_f64(eng.r_launch),
        finish_time=_f64(eng.r_finish),
        length=_f64(eng.r_len),
        calls=_i64(eng.r_calls),
        version=_i64(eng.r_version),
        trained_step=_i64(eng.r_step),
        staleness=_ro(staleness),
        completion_rank=_i64(eng.r_rank),
        status=_i64(eng.r_status),
        tool_time=_f64(eng.r_tool),
        tool_exec_time=_f64(eng.r_exec),
    )
    calls = CallTrace(
        rollout=_i64(eng.c_rollout),
        turn=_i64(eng.c_index),
        issue_time=_f64(eng.c_issue),
        end_time=_f64(eng.c_end),
        service=_f64(eng.c_service),
        attempts=_i64(eng.c_attempts),
        status=_i64(eng.c_status),
        exec_time=_f64(eng.c_exec),
    )
    attempts = AttemptTrace(
        call=_i64(eng.a_call),
        number=_i64(eng.a_number),
        shard=_i64(eng.a_shard),
        redirects=_i64(eng.a_redirects),
        route_time=_f64(eng.a_route),
        arrive_time=_f64(eng.a_arrive),
        admit_time=_f64(eng.a_admit),
        depart_time=_f64(eng.a_depart),
        outcome=_i64(eng.a_outcome),
        cold=_ro(np.asarray(eng.a_cold, dtype=np.bool_)),
        recovery_cost=_f64(eng.a_recovery),
    )
    cap = config.capacity
    busy_area = _f64(eng.s_busy_area)
    if cap is None or drain <= 0.0:
        util = np.full(config.shards, np.nan)
    else:
        util = np.asarray(busy_area) / (cap * drain)
    shards = ShardStats(
        arrivals=_i64(eng.s_arrivals),
        completed=_i64(eng.s_completed),
        crashed=_i64(eng.s_crashed),
        timed_out=_i64(eng.s_timed_out),
        redirected=_i64(eng.s_redirected),
        queued=_i64(eng.s_queued),
        cold_starts=_i64(eng.s_cold),
        containers=_i64([len(f) for f in eng.s_free]),
        area=_f64(eng.s_area),
        busy_area=busy_area,
        utilisation=_ro(util),
    )
    summary = _summarize(config, eng, rollouts, calls, attempts, shards, drain)
    return AgentResult(config, summary, rollouts, calls, attempts, shards)
