"""Agent rollouts: the reference engine's rollouts, trainer and event loop, and
:func:`simulate_agent`, which runs it (or the compiled engine) and hands the columns to the
accounting (``_results``).

The engine is three layers, each a class a reader can hold at once: the sandbox pool and its router
(``_pool``), the tool-call model on top of it (``_calls``), and here the slots, the rollouts'
segments and the trainer, over the one heap of events they share.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import Literal

import numpy as np

from refimpl._validation import invalid, wrong_type
from refimpl.errors import InvalidArgument
from refimpl.sim.agent import _compiled
from refimpl.sim.agent._calls import _ToolCalls
from refimpl.sim.agent._config import (
    _A_ENDED,
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
    _Stream,
)
from refimpl.sim.agent._results import AgentResult, assemble, compiled_columns


class _Engine(_ToolCalls):
    """The slots, the rollouts and the trainer; columns are Python lists until the run ends."""

    __slots__ = (
        "aborted",
        "completed",
        "end_time",
        "launching",
        "len_stream",
        "progress",
        "r_calls",
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
        "slot_k",
        "target",
        "trained",
        "turns_stream",
        "version",
    )

    def __init__(self, cfg: AgentConfig) -> None:
        gens = np.random.default_rng(cfg.seed).spawn(4)
        super().__init__(cfg, gens[2], gens[3])
        self.len_stream = _Stream(cfg.lengths, gens[0]) if _is_frozen_law(cfg.lengths) else None
        self.turns_stream = _Stream(cfg.turns, gens[1])
        self.version = 0
        self.completed = 0
        self.trained = 0
        self.aborted = 0
        self.progress: Callable[[int], None] | None = None
        self.target = cfg.steps * cfg.batch
        self.launching = True
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
        self.r_launch: list[float] = []
        self.r_finish: list[float] = []
        self.r_len: list[float] = []
        self.r_seg: list[float] = []
        self.r_tool: list[float] = []
        self.r_exec: list[float] = []

    # -- rollouts ------------------------------------------------------------------------------

    def launch(self, slot: int, t: float) -> None:
        cfg = self.cfg
        k = self.slot_k[slot]
        self.slot_k[slot] = k + 1
        if self.len_stream is None:
            mat = cfg.lengths
            if k >= mat.shape[1]:
                raise InvalidArgument(
                    f"lengths must have a column for every launch; slot {slot} needed launch {k + 1} "
                    f"but lengths has {mat.shape[1]} columns. Pass a longer N × K matrix (the "
                    "SimPy peer's margin, ceil(1.25·rollouts/slots) + 64 columns, is ample when "
                    "tool latency is small)."
                )
            length = float(mat[slot, k])
        else:
            length = float(self.len_stream.draw())
            if not length > 0.0:
                raise InvalidArgument(
                    f"lengths must draw positive token counts; got {length!r} at launch {k} of slot "
                    f"{slot}. Pass a law supported on (0, inf)."
                )
        turns = int(self.turns_stream.draw())
        if not 0 <= turns <= MAX_TURNS:
            raise InvalidArgument(
                f"turns must draw counts in [0, {MAX_TURNS}]; got {turns}. Pass a law on "
                f"{{0, 1, ..., {MAX_TURNS}}}."
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
            self.issue_call(r, issued, t)
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
        r = self.c_rollout[c]
        self.r_tool[r] += t - self.c_issue[c]
        self.r_exec[r] += self.c_exec[c]
        if status == _FAILED and self.cfg.on_failure == "abort":
            self.r_finish[r] = t
            self.r_status[r] = _ABORTED
            self.aborted += 1
            if self.aborted > 1000 + 100 * self.target:
                raise InvalidArgument(
                    f"on_failure='abort' must leave some rollouts to train; {self.aborted} "
                    f"rollouts were aborted while only {self.trained} of {self.target} trained. "
                    "Calls fail far more often than they succeed: raise timeout or max_attempts, "
                    "lower crash_rate, or pass on_failure='continue'."
                )
            if self.launching:
                self.launch(self.r_slot[r], t)
            return
        self.push(t + self.r_seg[r], _PRIO_EVENT, _SEG_END, r)

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
                    self.refresh_view()
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


def simulate_agent(
    config: AgentConfig,
    *,
    engine: Literal["auto", "compiled", "event"] = "auto",
    progress: Callable[[int], None] | None = None,
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
    engine : {'auto', 'compiled', 'event'}
        ``event`` is the reference engine (plain Python); ``compiled`` the same event loop compiled
        with numba (needs ``pip install 'refimpl[fast]'``); ``auto`` the compiled one when numba is
        installed and its kernel is already compiled (here or in numba's cache on disk) or the run
        is long enough to repay a first compilation, else the reference. Both give the same result,
        bit for bit.
    progress : callable, optional
        Called with the number of trainer steps done, once per step and in order (e.g. to set a
        progress bar); it must not touch the simulation. The compiled engine makes the calls in
        chunks of about 1/64 of the run, when it pauses.

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
        For an unknown ``engine``, or ``engine='compiled'`` without numba. If an ``N × K`` length matrix runs out of columns for a slot (the message says how many
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
    if engine not in ("auto", "compiled", "event"):
        raise invalid("engine", "be one of 'auto', 'compiled', 'event'", engine, "Pick one.")
    if engine == "compiled" and not _compiled.AVAILABLE:
        raise invalid(
            "engine",
            "be 'auto' or 'event' without numba (the compiled engine needs it)",
            engine,
            "Install it (pip install 'refimpl[fast]'), or pass engine='auto'.",
        )
    if engine == "compiled" or (engine == "auto" and _compiled.worth_compiling(config)):
        run = _compiled.run_agent_compiled(config, progress=progress)
        columns = compiled_columns(run, config)
        return assemble(config, columns, run.end_time, run.drain, run.sorted_lengths)
    eng = _Engine(config)
    eng.progress = progress
    drain = eng.run()
    return assemble(config, lambda name: getattr(eng, name), eng.end_time, drain)
