"""Agent rollouts: the sandbox pool and its routing, the part of the reference engine that knows
shards and containers.

An attempt is routed to the shard that is least loaded (queued + busy) in the router's **view**
(exact when ``refresh = 0``, else the snapshot of the last refresh); the shard admits it if one of
its containers is free, else redirects it (``admission='redirect'``, to the least loaded unvisited
shard that the view shows with a free container) or queues it FIFO. A free shard hands out its most
recently released container, cold if it is new, crashed or idle beyond ``keepalive``. Each shard
integrates its load over time for Little's law (:meth:`_Pool.touch`).

The pool decides *where* and *when* an attempt holds a container; what the attempt then does in it
(its occupancy, a crash) is the tool-call model's (:mod:`refimpl.sim.agent._calls`), reached through
:meth:`_Pool.start_service`.
"""

from __future__ import annotations

import heapq
import math
from collections import deque

from refimpl.sim.agent._config import _A_QUEUED, _A_SERVICE, AgentConfig


def _least_loaded(loads: list[int], allowed: list[int]) -> int:
    """The router's choice: the allowed shard with the smallest load in its view (lowest index)."""
    best = allowed[0]
    best_load = loads[best]
    for s in allowed[1:]:
        if loads[s] < best_load:
            best, best_load = s, loads[s]
    return best


class _Clock:
    """The one heap of events every part pushes onto: ``(time, priority, sequence, kind, ref)``,
    so that events of one instant run by priority, then in the order they were scheduled."""

    __slots__ = ("cfg", "heap", "seq")

    def __init__(self, cfg: AgentConfig) -> None:
        self.cfg = cfg
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = 0

    def push(self, t: float, prio: int, kind: int, ref: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, prio, self.seq, kind, ref))


class _Pool(_Clock):
    """Shards, their queues and containers, the router's view, and where each attempt went."""

    __slots__ = (
        "a_admit",
        "a_arrive",
        "a_box",
        "a_cold",
        "a_redirects",
        "a_shard",
        "a_state",
        "a_visited",
        "cap",
        "cont_alive",
        "cont_release",
        "last_t",
        "max_redirects",
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
        "view",
    )

    def __init__(self, cfg: AgentConfig) -> None:
        super().__init__(cfg)
        n = cfg.shards
        self.max_redirects: int = n - 1 if cfg.max_redirects is None else cfg.max_redirects
        self.cap = math.inf if cfg.capacity is None else float(cfg.capacity)
        # per attempt: where it went and what it holds
        self.a_redirects: list[int] = []
        self.a_shard: list[int] = []
        self.a_box: list[int] = []
        self.a_state: list[int] = []
        self.a_visited: list[int] = []
        self.a_arrive: list[float] = []
        self.a_admit: list[float] = []
        self.a_cold: list[bool] = []
        # per shard
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
        self.view = [0] * n
        # per container
        self.cont_alive: list[bool] = []
        self.cont_release: list[float] = []

    @property
    def s_containers(self) -> list[int]:
        """Containers of each shard (all free once the run has drained)."""
        return [len(f) for f in self.s_free]

    def new_attempt(self) -> None:
        """Append a row for an attempt that has not reached the pool yet."""
        self.a_redirects.append(0)
        self.a_shard.append(-1)
        self.a_arrive.append(math.nan)
        self.a_admit.append(math.nan)
        self.a_cold.append(False)
        self.a_box.append(-1)
        self.a_state.append(0)
        self.a_visited.append(0)

    def touch(self, s: int, t: float) -> None:
        """Accumulate shard ``s``'s integrals up to ``t`` (before any change of its counters)."""
        dt = t - self.last_t[s]
        if dt:
            busy = self.s_busy[s]
            self.s_area[s] += (self.s_nq[s] + busy) * dt
            self.s_busy_area[s] += busy * dt
        self.last_t[s] = t

    def loads(self) -> list[int]:
        """Each shard's load (queued + busy) as the router sees it."""
        if self.cfg.refresh == 0.0:
            return [q + b for q, b in zip(self.s_nq, self.s_busy, strict=True)]
        return self.view

    def refresh_view(self) -> None:
        self.view = [q + b for q, b in zip(self.s_nq, self.s_busy, strict=True)]

    def route(self, a: int, t: float) -> None:
        """Send attempt ``a`` to the least loaded shard in the view."""
        n = self.cfg.shards
        s = _least_loaded(self.loads(), list(range(n))) if n > 1 else 0
        self.a_visited[a] = 1 << s
        self.arrive(a, s, t)

    def arrive(self, a: int, s: int, t: float) -> None:
        """Local admission at shard ``s``: admit, redirect or queue."""
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
        """Give attempt ``a`` a container of shard ``s`` (warm if one is) and start its service."""
        self.touch(s, t)
        free = self.s_free[s]
        if free:
            box = free.pop()
            cold = (not self.cont_alive[box]) or (t - self.cont_release[box] > self.cfg.keepalive)
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
        self.a_box[a] = box
        self.start_service(a, t, cold)

    def start_service(self, a: int, t: float, cold: bool) -> None:
        """What attempt ``a`` does in its container (the tool-call model's part)."""
        raise NotImplementedError

    def release(self, a: int, s: int, t: float, alive: bool) -> None:
        """Free attempt ``a``'s container on shard ``s`` and admit the next queued attempt."""
        box = self.a_box[a]
        self.touch(s, t)
        self.s_busy[s] -= 1
        self.cont_alive[box] = alive
        self.cont_release[box] = t
        self.s_free[s].append(box)
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
