"""Agent rollouts: the tool-call model of the reference engine, i.e. calls and their attempts.

A call's service time is drawn once (the same work on every attempt). Each attempt is routed into
the sandbox pool (:mod:`refimpl.sim.agent._pool`); in its container it is occupied for its start
(cold or warm), its recovery (a retry first restores the trajectory's sandbox state:
``replay_cost`` per earlier call, or the earlier calls' service again) and its service, unless it
crashes first (exponential life at ``crash_rate``) or times out (``timeout`` from routing, queueing
included). A crashed or timed-out attempt is retried after ``retry_delay`` up to ``max_attempts``
in all; then the call is reported failed. What the rollout does with a call's end is the engine's
(:meth:`_ToolCalls.call_ended`).
"""

from __future__ import annotations

import math

import numpy as np

from refimpl.sim.agent._config import (
    _A_ENDED,
    _A_SERVICE,
    _COMPLETED,
    _CRASH,
    _CRASHED,
    _DONE,
    _FAILED,
    _PENDING,
    _PRIO_EVENT,
    _RETRY,
    _TIMEOUT,
    AgentConfig,
    _Stream,
)
from refimpl.sim.agent._pool import _Pool


class _ToolCalls(_Pool):
    """Calls and attempts: their columns, outcomes, retries and recovery."""

    __slots__ = (
        "a_call",
        "a_depart",
        "a_number",
        "a_outcome",
        "a_recovery",
        "a_route",
        "c_attempts",
        "c_end",
        "c_exec",
        "c_index",
        "c_issue",
        "c_rollout",
        "c_service",
        "c_status",
        "crash_gen",
        "r_done_service",
        "service_stream",
    )

    def __init__(
        self, cfg: AgentConfig, service_gen: np.random.Generator, crash_gen: np.random.Generator
    ) -> None:
        super().__init__(cfg)
        self.service_stream = _Stream(cfg.tool_latency, service_gen)
        self.crash_gen = crash_gen
        self.c_rollout: list[int] = []
        self.c_index: list[int] = []
        self.c_attempts: list[int] = []
        self.c_status: list[int] = []
        self.c_issue: list[float] = []
        self.c_end: list[float] = []
        self.c_service: list[float] = []
        self.c_exec: list[float] = []
        self.a_call: list[int] = []
        self.a_number: list[int] = []
        self.a_outcome: list[int] = []
        self.a_route: list[float] = []
        self.a_depart: list[float] = []
        self.a_recovery: list[float] = []
        #: per rollout: the service of its calls that have ended (what ``reexecute`` runs again)
        self.r_done_service: list[float] = []

    def issue_call(self, r: int, turn: int, t: float) -> None:
        """Rollout ``r`` issues its call number ``turn`` (0-based) at ``t``."""
        c = len(self.c_rollout)
        self.c_rollout.append(r)
        self.c_index.append(turn)
        self.c_issue.append(t)
        self.c_end.append(math.nan)
        self.c_service.append(float(self.service_stream.draw()))
        self.c_attempts.append(0)
        self.c_status.append(_PENDING)
        self.c_exec.append(0.0)
        self.start_attempt(c, t)

    def start_attempt(self, c: int, t: float) -> None:
        cfg = self.cfg
        a = len(self.a_call)
        number = self.c_attempts[c] + 1
        self.c_attempts[c] = number
        self.a_call.append(c)
        self.a_number.append(number)
        self.a_route.append(t)
        self.a_depart.append(math.nan)
        self.a_outcome.append(_PENDING)
        self.new_attempt()
        recovery = 0.0
        if number > 1:
            if cfg.recovery == "replay":
                recovery = cfg.replay_cost * self.c_index[c]
            else:
                recovery = self.r_done_service[self.c_rollout[c]]
        self.a_recovery.append(recovery)
        if cfg.timeout is not None:
            self.push(t + cfg.timeout, _PRIO_EVENT, _TIMEOUT, a)
        self.route(a, t)

    def start_service(self, a: int, t: float, cold: bool) -> None:
        """Occupancy ``start + recovery + service``, cut short by a crash drawn now."""
        cfg = self.cfg
        occupancy = (cfg.cold_start if cold else cfg.warm_start) + self.a_recovery[a]
        occupancy += self.c_service[self.a_call[a]]
        if cfg.crash_rate > 0.0:
            life = float(self.crash_gen.exponential(1.0 / cfg.crash_rate))
            if life < occupancy:
                self.push(t + life, _PRIO_EVENT, _CRASH, a)
                return
        self.push(t + occupancy, _PRIO_EVENT, _DONE, a)

    def end_attempt(self, a: int, t: float, outcome: int) -> None:
        s = self.a_shard[a]
        state = self.a_state[a]
        self.a_state[a] = _A_ENDED
        c = self.a_call[a]
        if state == _A_SERVICE:
            self.c_exec[c] += t - self.a_admit[a]
            self.release(a, s, t, alive=outcome == _COMPLETED)
        else:
            self.leave_queue(s, t)
        self.a_outcome[a] = outcome
        self.a_depart[a] = t
        if outcome == _COMPLETED:
            self.s_completed[s] += 1
            self.end_call(c, t, _COMPLETED)
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
            self.end_call(c, t, _FAILED)

    def end_call(self, c: int, t: float, status: int) -> None:
        """Call ``c`` ends ``completed`` or ``failed``; its rollout goes on (the engine's part)."""
        self.c_status[c] = status
        self.c_end[c] = t
        self.r_done_service[self.c_rollout[c]] += self.c_service[c]
        self.call_ended(c, t, status)

    def call_ended(self, c: int, t: float, status: int) -> None:
        """What the rollout does when call ``c`` has ended (the engine's part)."""
        raise NotImplementedError
