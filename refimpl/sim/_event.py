"""The event engine: a plain-Python discrete-event simulation over one heap, for every mode.

Event order at one instant: rollout completions and preemption events first, in the order they were
scheduled (as SimPy orders its timeouts), then publications. So a rollout launched at the instant a
version is published sees the old version (conventions §tie-rule), and the order of completions at one
instant is the order their rollouts were launched, exactly as in the SimPy peer.

Time. Generation advances a *virtual clock* ``V`` (work done at slowdown 1): all busy slots progress
at the same rate ``1 / slowdown(busy)``, so completions keep their order in ``V`` and sit in their own
heap keyed by ``V``. Without a slowdown ``V`` is the real time itself (bit for bit, so that the engine
agrees exactly with the vectorized engine and the peer).

A rollout's life cycle is a sequence of *phases*: a phase starts at ``V = dec_v`` with ``dec_k``
tokens already generated, spends ``dec_pre`` on (re-)prefill and then decodes one token per
``token_time``. Launch, ``recompute`` at a publication and resumption after a preemption each start a
phase; a version change starts a new token-version segment. Agent rollouts with tool calls, whose
phases alternate with tool latency, have an engine of their own (``refimpl.sim.agent``).
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from refimpl.sim._config import SimConfig
from refimpl.sim._lengths import LengthSupply
from refimpl.sim._trace import STATUS, RawTrace
from refimpl.staleness import admission_capacity

__all__ = ["fast_path_applies", "run_async_fast", "run_events"]


def fast_path_applies(cfg: SimConfig) -> bool:
    """Whether :func:`run_async_fast` covers ``cfg``."""
    return (
        cfg.mode == "async"
        and cfg.partial == "none"
        and cfg.preempt_rate == 0.0
        and cfg.slowdown is None
    )


_TRAINED = STATUS["trained"]
_DROPPED = STATUS["dropped"]
_ABORTED = STATUS["aborted"]
_UNFINISHED = STATUS["unfinished"]
_PENDING = STATUS["pending"]

_COMPLETE, _PUBLISH, _PREEMPT, _RESUME = 0, 1, 2, 3


class _Stuck(RuntimeError):
    pass


class _EventLoop:
    """The state of one run of the event engine and its handlers, one per event kind and launch
    policy; :func:`run_events` drives it."""

    __slots__ = (
        "admission", "admitted", "b", "batch", "buffer", "busy", "busy_since", "completed",
        "continuous", "down", "drop_leftovers", "drop_over", "eta", "extra_segs",
        "gen_busy", "gheap", "heap", "idle", "j", "k_cols", "kv_restore_time", "n_launch",
        "n_slots", "nxt", "partial", "paused", "pending_launch", "persist_kv", "pre",
        "preempt_duration", "preempt_rate", "prng", "progress", "publish_times", "r_deck",
        "r_decpre", "r_decv", "r_finish", "r_gen", "r_idx", "r_launch", "r_len", "r_rank",
        "r_recomp", "r_slot", "r_stale", "r_status", "r_step", "r_vl", "r_vmin", "r_wasted",
        "rank_counter", "remaining", "rows", "rp", "running", "seq", "slot_rid", "slow",
        "step_mode", "steps", "supply", "t", "taus", "trainer_busy", "training", "tt",
        "v_clock", "version",
    )  # fmt: skip

    def __init__(
        self,
        cfg: SimConfig,
        supply: LengthSupply,
        trainer_times: NDArray[np.float64],
        progress: Callable[[int], None] | None,
    ) -> None:
        self.n_slots, self.b, self.steps = cfg.slots, cfg.batch, cfg.steps
        self.tt, self.pre, self.rp = cfg.token_time, cfg.prefill_time, cfg.reprefill_token_time
        mode = cfg.mode
        self.step_mode = mode in ("sync", "first_k")
        self.continuous = mode == "async"
        self.admission = mode == "admission"
        self.n_launch = cfg.batch if mode == "sync" else int(cfg.launch or cfg.slots)
        carry = mode == "first_k" and cfg.leftovers == "carry"
        self.drop_leftovers = self.step_mode and not carry
        self.eta = cfg.eta if cfg.eta is not None else 0
        self.drop_over = cfg.over_bound == "drop"
        self.partial = cfg.partial
        self.slow = None if cfg.slowdown_table is None else cfg.slowdown_table.tolist()
        self.taus = trainer_times.tolist()
        self.preempt_rate = cfg.preempt_rate
        self.preempt_duration = cfg.preempt_duration
        self.persist_kv, self.kv_restore_time = cfg.persist_kv, cfg.kv_restore_time
        self.prng = np.random.default_rng([cfg.seed, 2]) if cfg.preempt_rate > 0 else None
        self.supply = supply
        self.rows = [array("d", np.ascontiguousarray(r).tobytes()) for r in supply.matrix]
        self.k_cols = len(self.rows[0])
        # per-rollout columns: slot, length column, launch and finish times, length, launch and
        # minimum versions, step, staleness, status, rank, wasted and recomputed tokens,
        # generation, and the current phase (its start dec_v, its prefill dec_pre, its tokens dec_k)
        self.r_slot: array[int] = array("i")
        self.r_idx: array[int] = array("i")
        self.r_launch: array[float] = array("d")
        self.r_finish: array[float] = array("d")
        self.r_len: array[float] = array("d")
        self.r_vl: array[int] = array("i")
        self.r_vmin: array[int] = array("i")
        self.r_step: array[int] = array("i")
        self.r_stale: array[int] = array("i")
        self.r_status: array[int] = array("b")
        self.r_rank: array[int] = array("q")
        self.r_wasted: array[float] = array("d")
        self.r_recomp: array[float] = array("d")
        self.r_gen: array[int] = array("i")
        self.r_decv: array[float] = array("d")
        self.r_decpre: array[float] = array("d")
        self.r_deck: array[float] = array("d")
        self.extra_segs: dict[int, list[tuple[float, int]]] = {}
        n = self.n_slots
        self.nxt = [0] * n  # next column per slot
        self.slot_rid = [-1] * n  # rollout generating on the slot (-1: none)
        self.paused = [-1] * n  # rollout paused by a preemption
        self.remaining = [0.0] * n  # its remaining decode work
        self.down = [False] * n
        self.busy_since = [0.0] * n
        self.idle: deque[int] = deque()
        self.heap: list[tuple[float, int, int, int, int, int]] = []  # real-time events
        self.gheap = self.heap if self.slow is None else []  # completions, keyed by V
        self.seq = self.busy = self.version = self.j = self.rank_counter = 0
        self.admitted = 0  # accepted + running (admission mode)
        self.running = 0  # rollouts in flight, generating or paused (admission mode)
        self.pending_launch = self.completed = 0
        self.t = self.v_clock = self.gen_busy = self.trainer_busy = 0.0
        self.training = False
        self.buffer: deque[int] = deque()
        self.batch: list[int] = []
        self.publish_times = [0.0] * self.steps
        self.progress = progress

    # ---- rollouts and slots

    def push(
        self, heap: list[tuple[float, int, int, int, int, int]], time: float, prio: int,
        kind: int, ref: int, gen: int,
    ) -> None:  # fmt: skip
        """Schedule an event; at one time and priority, after every event scheduled before."""
        seq = self.seq
        heapq.heappush(heap, (time, prio, seq, kind, ref, gen))
        self.seq = seq + 1

    def more_lengths(self, s: int, k: int) -> None:
        """Draw lengths up to column ``k`` of slot ``s`` (every slot's row grows alike)."""
        self.supply.extend(slot=s, needed=k + 1)
        m = self.supply.matrix
        for i in range(self.n_slots):
            self.rows[i].frombytes(np.ascontiguousarray(m[i, self.k_cols :]).tobytes())
        self.k_cols = m.shape[1]

    def launch(self, s: int) -> None:
        """Slot ``s`` launches its next rollout from the current version."""
        k = self.nxt[s]
        if k >= self.k_cols:
            self.more_lengths(s, k)
        self.nxt[s] = k + 1
        length = self.rows[s][k]
        t, version = self.t, self.version
        rid = len(self.r_slot)
        self.r_slot.append(s)
        self.r_idx.append(k)
        self.r_launch.append(t)
        self.r_finish.append(math.nan)
        self.r_len.append(length)
        self.r_vl.append(version)
        self.r_vmin.append(version)
        self.r_step.append(-1)
        self.r_stale.append(-1)
        self.r_status.append(_UNFINISHED)
        self.r_rank.append(-1)
        self.r_wasted.append(0.0)
        self.r_recomp.append(0.0)
        self.r_gen.append(0)
        self.r_decv.append(self.v_clock)
        self.r_decpre.append(self.pre)
        self.r_deck.append(0.0)
        self.slot_rid[s] = rid
        self.busy += 1
        self.busy_since[s] = t
        self.push(self.gheap, self.v_clock + (length * self.tt + self.pre), 0, _COMPLETE, rid, 0)

    def tokens_done(self, rid: int) -> float:
        """Tokens rollout ``rid`` has generated by now in its current phase."""
        x = self.r_deck[rid] + ((self.v_clock - self.r_decv[rid]) - self.r_decpre[rid]) / self.tt
        lo, hi = self.r_deck[rid], self.r_len[rid]
        return lo if x < lo else (hi if x > hi else x)

    def stop_generating(self, s: int) -> None:
        self.slot_rid[s] = -1
        self.busy -= 1
        self.gen_busy += self.t - self.busy_since[s]

    def new_segment(self, rid: int, k: float, ver: int) -> None:
        """Tokens of ``rid`` from ``k`` on are generated under version ``ver``."""
        segs = self.extra_segs.get(rid)
        last_start = segs[-1][0] if segs else 0.0
        if k <= last_start:  # no token under the current segment yet: it changes version
            if segs:
                segs[-1] = (last_start, ver)
            else:
                self.r_vmin[rid] = ver
        elif segs is None:
            self.extra_segs[rid] = [(k, ver)]
        else:
            segs.append((k, ver))

    # ---- launch policies

    def free_slot(self, s: int) -> None:
        """A slot with nothing to do: apply the launch policy."""
        if self.continuous:
            self.launch(s)
        elif self.step_mode and self.pending_launch > 0:
            self.pending_launch -= 1
            self.launch(s)
        else:
            self.idle.append(s)
            if self.admission:
                self.admit()

    def admit(self) -> None:
        """Admission mode: launch on idle slots as far as the staleness bound allows."""
        cap = admission_capacity(
            eta=self.eta,
            version=self.version,
            batch=self.b,
            accepted=self.admitted - self.running,
            running=self.running,
            max_concurrent=self.n_slots,
        )
        while cap > 0 and self.idle:
            s = self.idle.popleft()
            self.admitted += 1
            self.running += 1
            cap -= 1
            self.launch(s)

    def start_step(self) -> None:
        """Step modes: launch what the step still needs on the idle slots, in slot order."""
        in_flight = sum(
            1 for s in range(self.n_slots) if self.slot_rid[s] >= 0 or self.paused[s] >= 0
        )
        need = self.n_launch - in_flight - len(self.buffer) - self.pending_launch
        free = sorted(self.idle)
        self.idle.clear()
        for s in free:
            if need <= 0:
                self.idle.append(s)
                continue
            need -= 1
            self.launch(s)
        self.pending_launch += max(need, 0)

    # ---- the trainer

    def try_train(self) -> None:
        """The trainer, when idle, fills its batch from the buffer (dropping samples over the
        bound) and, with a full batch, trains on it and schedules the publication."""
        if self.training or self.j >= self.steps:
            return
        j, buffer, batch = self.j, self.buffer, self.batch
        while buffer and len(batch) < self.b:
            rid = buffer.popleft()
            s_ = j - self.r_vmin[rid]
            if self.drop_over and s_ > self.eta:
                self.r_status[rid] = _DROPPED
                self.r_step[rid] = j
                self.r_stale[rid] = s_
                if self.admission:
                    self.admitted -= 1
                continue
            batch.append(rid)
        if len(batch) < self.b:
            return
        for rid in batch:
            self.r_status[rid] = _TRAINED
            self.r_step[rid] = j
            self.r_stale[rid] = j - self.r_vmin[rid]
            self.r_rank[rid] = self.rank_counter
            self.rank_counter += 1
        batch.clear()
        tau = self.taus[j]
        self.trainer_busy += tau
        self.training = True
        self.push(self.heap, self.t + tau, 1, _PUBLISH, j, 0)
        self.j = j + 1
        if self.drop_leftovers:
            self.drop_in_flight()

    def drop_in_flight(self) -> None:
        """Step modes without carry-over: a step's leftovers, generating or paused, are dropped."""
        t = self.t
        for s in range(self.n_slots):
            rid = self.slot_rid[s]
            if rid >= 0:
                self.r_wasted[rid] = self.tokens_done(rid)
                self.r_status[rid] = _DROPPED
                self.r_finish[rid] = t
                self.r_gen[rid] += 1
                self.stop_generating(s)
                self.idle.append(s)
            rid = self.paused[s]
            if rid >= 0:
                self.r_wasted[rid] = self.r_deck[rid]
                self.r_status[rid] = _DROPPED
                self.r_finish[rid] = t
                self.paused[s] = -1
        self.pending_launch = 0

    # ---- partial rollouts at a publication

    def abort(self, rid: int, k: float) -> None:
        """``restart``: the rollout is aborted, its ``k`` tokens wasted."""
        self.r_wasted[rid] += k
        self.r_status[rid] = _ABORTED
        self.r_finish[rid] = self.t
        if self.admission:
            self.admitted -= 1
            self.running -= 1

    def recompute(self, rid: int, k: float) -> None:
        """``recompute``: the rollout re-prefills its ``k`` tokens under the new weights."""
        cost = self.pre + k * self.rp
        self.r_recomp[rid] += k
        self.r_decv[rid] = self.v_clock
        self.r_decpre[rid] = cost
        self.r_deck[rid] = k
        g = self.r_gen[rid] + 1
        self.r_gen[rid] = g
        done = self.v_clock + cost + (self.r_len[rid] - k) * self.tt
        self.push(self.gheap, done, 0, _COMPLETE, rid, g)

    def publish_partial(self) -> None:
        """Every rollout in flight, generating or paused, meets the new version."""
        partial, version = self.partial, self.version
        for s in range(self.n_slots):
            rid = self.slot_rid[s]
            if rid >= 0:
                k = self.tokens_done(rid)
                if partial == "restart":
                    self.r_gen[rid] += 1
                    self.stop_generating(s)
                    self.abort(rid, k)
                    self.free_slot(s)
                    continue
                self.new_segment(rid, k, version)
                if partial == "recompute":
                    self.recompute(rid, k)
            rid = self.paused[s]
            if rid >= 0:
                k = self.r_deck[rid]
                if partial == "restart":
                    self.paused[s] = -1
                    self.abort(rid, k)
                    continue
                self.new_segment(rid, k, version)
                if partial == "recompute":
                    self.r_recomp[rid] += k
                    self.remaining[s] += k * self.rp

    # ---- events

    def start(self) -> None:
        """Every slot's first preemption; then every slot launches (async), or the first step
        starts."""
        if self.prng is not None:
            for s in range(self.n_slots):
                delay = float(self.prng.exponential(1.0 / self.preempt_rate))
                self.push(self.heap, delay, 0, _PREEMPT, s, 0)
        if self.continuous:
            for s in range(self.n_slots):
                self.launch(s)
        else:
            self.idle.extend(range(self.n_slots))
            if self.admission:
                self.admit()
            else:
                self.start_step()

    def next_event(self) -> tuple[float, int, int, int, int, int]:
        """Pop the next event and advance the real clock ``t`` and the virtual clock to it."""
        heap, gheap, slow = self.heap, self.gheap, self.slow
        if slow is None:
            if not heap:
                raise _Stuck
            ev = heapq.heappop(heap)
            self.t = self.v_clock = ev[0]
            return ev
        t = self.t
        tr = heap[0][0] if heap else math.inf
        tg = t + (gheap[0][0] - self.v_clock) * slow[self.busy] if gheap else math.inf
        if tg == math.inf and tr == math.inf:
            raise _Stuck
        if tg <= tr:
            ev = heapq.heappop(gheap)
            self.v_clock = ev[0]
            self.t = tg
        else:
            ev = heapq.heappop(heap)
            self.v_clock += (ev[0] - t) / slow[self.busy]
            self.t = ev[0]
        return ev

    def on_complete(self, rid: int, gen: int) -> None:
        """Rollout ``rid`` completes, unless a later phase superseded this event."""
        if gen != self.r_gen[rid]:
            return
        s = self.r_slot[rid]
        self.r_finish[rid] = self.t
        self.r_status[rid] = _PENDING
        self.stop_generating(s)
        self.buffer.append(rid)
        self.completed += 1
        if self.admission:
            self.running -= 1
        if self.progress is not None and self.completed % _REPORT_EVERY == 0:
            self.progress(_REPORT_EVERY)
        self.free_slot(s)
        self.try_train()

    def on_publish(self, jj: int) -> bool:
        """Step ``jj``'s weights are published; ``True`` when it was the last step."""
        self.publish_times[jj] = self.t
        self.version = jj + 1
        self.training = False
        if self.version == self.steps:
            return True
        if self.partial != "none":
            self.publish_partial()
        if self.step_mode:
            self.start_step()
        elif self.admission:
            self.admit()
        self.try_train()
        return False

    def on_preempt(self, s: int) -> None:
        """Slot ``s`` goes down: its rollout pauses, or the idle slot leaves the idle queue."""
        self.down[s] = True
        rid = self.slot_rid[s]
        if rid >= 0:
            k = self.tokens_done(rid)
            self.remaining[s] = (self.r_len[rid] - k) * self.tt
            self.r_deck[rid] = k
            self.r_gen[rid] += 1
            self.stop_generating(s)
            self.paused[s] = rid
        elif s in self.idle:
            self.idle.remove(s)
        self.push(self.heap, self.t + self.preempt_duration, 0, _RESUME, s, 0)

    def on_resume(self, s: int) -> None:
        """Slot ``s`` comes back: its paused rollout resumes, or the slot is free."""
        assert self.prng is not None
        self.down[s] = False
        delay = float(self.prng.exponential(1.0 / self.preempt_rate))
        self.push(self.heap, self.t + delay, 0, _PREEMPT, s, 0)
        rid = self.paused[s]
        if rid < 0:
            self.free_slot(s)
            return
        self.paused[s] = -1
        k = self.r_deck[rid]
        if self.persist_kv:
            cost = self.kv_restore_time
        else:
            cost = self.pre + k * self.rp
            self.r_recomp[rid] += k
        self.r_decv[rid] = self.v_clock
        self.r_decpre[rid] = cost
        g = self.r_gen[rid] + 1
        self.r_gen[rid] = g
        self.slot_rid[s] = rid
        self.busy += 1
        self.busy_since[s] = self.t
        self.push(self.gheap, self.v_clock + cost + self.remaining[s], 0, _COMPLETE, rid, g)

    def close(self) -> None:
        """Close the books at the end: the slots still generating were busy until now."""
        for s in range(self.n_slots):
            if self.slot_rid[s] >= 0:
                self.gen_busy += self.t - self.busy_since[s]
        if self.progress is not None:
            self.progress(self.completed % _REPORT_EVERY)

    # ---- the trace

    def segments(self) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.int32]] | None:
        """The token-version segments (offsets, first token, version), ``None`` when every rollout
        has one."""
        if not self.extra_segs:
            return None
        n = len(self.r_slot)
        counts = np.ones(n, dtype=np.int64)
        for rid, segs in self.extra_segs.items():
            counts[rid] += len(segs)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        tok = np.zeros(int(offsets[-1]), dtype=np.float64)
        ver = np.empty(int(offsets[-1]), dtype=np.int32)
        ver[offsets[:-1]] = np.frombuffer(self.r_vmin, dtype=np.int32)
        for rid, segs in self.extra_segs.items():
            o = int(offsets[rid]) + 1
            for i, (kk, vv) in enumerate(segs):
                tok[o + i] = kk
                ver[o + i] = vv
        return offsets, tok, ver

    def trace(self) -> RawTrace:
        def col(a: array[Any], dt: Any) -> NDArray[Any]:
            return np.frombuffer(a, dtype=dt) if len(a) else np.zeros(0, dtype=dt)

        return RawTrace(
            slot=col(self.r_slot, np.int32),
            column=col(self.r_idx, np.int32),
            launch_time=col(self.r_launch, np.float64),
            finish_time=col(self.r_finish, np.float64),
            length=col(self.r_len, np.float64),
            launch_version=col(self.r_vl, np.int32),
            min_version=col(self.r_vmin, np.int32),
            step=col(self.r_step, np.int32),
            staleness=col(self.r_stale, np.int32),
            status=col(self.r_status, np.int8),
            rank=col(self.r_rank, np.int64),
            wasted_tokens=col(self.r_wasted, np.float64),
            recomputed_tokens=col(self.r_recomp, np.float64),
            segments=self.segments(),
            publish_times=np.asarray(self.publish_times, dtype=np.float64),
            end_time=self.t,
            generator_busy=self.gen_busy,
            trainer_busy=self.trainer_busy,
        )


#: Completions between two progress reports.
_REPORT_EVERY = 1 << 14


def run_events(
    cfg: SimConfig,
    supply: LengthSupply,
    trainer_times: NDArray[np.float64],
    *,
    progress: Callable[[int], None] | None = None,
) -> RawTrace:
    """Run the event engine: events in time order (completions and preemptions before
    publications at one instant, each kind in the order it was scheduled) until the last
    publication; :class:`_Stuck` when no event is left before it."""
    loop = _EventLoop(cfg, supply, trainer_times, progress)
    loop.start()
    next_event, on_complete = loop.next_event, loop.on_complete
    while True:
        ev = next_event()
        kind = ev[3]
        if kind == _COMPLETE:
            on_complete(ev[4], ev[5])
        elif kind == _PUBLISH:
            if loop.on_publish(ev[4]):
                break
        elif kind == _PREEMPT:
            loop.on_preempt(ev[4])
        else:
            loop.on_resume(ev[4])
    loop.close()
    return loop.trace()


def _durations(m: NDArray[np.float64], cfg: SimConfig) -> list[array[float]]:
    """Each length's generation time, one compact array per slot (8 bytes a length, not a Python
    float object each)."""
    tt, pre = cfg.token_time, cfg.prefill_time
    plain = tt == 1.0 and pre == 0.0  # l * 1.0 + 0.0 == l exactly
    d = np.ascontiguousarray(m if plain else m * tt + pre, dtype=np.float64)
    return [array("d", row.tobytes()) for row in d]


def run_async_fast(
    cfg: SimConfig,
    supply: LengthSupply,
    trainer_times: NDArray[np.float64],
    *,
    progress: Callable[[int], None] | None = None,
) -> RawTrace:
    """The event engine's loop for ``async`` without partial rollouts, preemption or slowdown.

    Same event order and semantics as :func:`run_events` (trainer time and dropping over the bound
    included), but it records only three numbers per completion (slot, time, current version): in
    this mode each completion relaunches its slot at once, so launch times, rollout ids and indices
    follow from those. The agreement tests run both loops.
    """
    n_slots, b, steps = cfg.slots, cfg.batch, cfg.steps
    drows = _durations(supply.matrix, cfg)
    k_cols = len(drows[0])
    drop_over = cfg.over_bound == "drop"
    eta = cfg.eta if cfg.eta is not None else 0
    taus = trainer_times.tolist()

    # rollout ids: 0..N-1 are the initial launches (slot = id); completion c launches id N + c
    c_slot, c_time, c_ver = array("i"), array("d"), array("i")
    k_rid, k_step, k_keep = array("q"), array("i"), array("b")  # consumptions (drop mode only)
    nxt = [1] * n_slots
    # heap entries (time, key, slot): a completion's key is its rollout id (ids grow in launch
    # order, so ties at one instant resolve in launch order, as in SimPy); a publication's key is
    # PUB + step, after every completion at the same instant (the tie rule)
    pub = 1 << 62
    heap = [(drows[s][0], s, s) for s in range(n_slots)]
    heapq.heapify(heap)
    push, pop = heapq.heappush, heapq.heappop
    slot_append, time_append, ver_append = c_slot.append, c_time.append, c_ver.append
    version = j = 0
    next_batch_at = b  # completions needed for batch j (no-drop mode)
    training = False
    n_comp = 0
    n_batch = 0  # samples accepted into the batch being filled (drop mode)
    buffer: deque[int] = deque()
    publish_times = [0.0] * steps
    report_every = 1 << 14
    t = 0.0
    while True:
        t, x, s = pop(heap)
        if x < pub:
            slot_append(s)
            time_append(t)
            ver_append(version)
            k = nxt[s]
            if k >= k_cols:
                supply.extend(slot=s, needed=k + 1)
                drows = _durations(supply.matrix, cfg)
                k_cols = len(drows[0])
            nxt[s] = k + 1
            push(heap, (t + drows[s][k], n_slots + n_comp, s))
            n_comp += 1
            if progress is not None and n_comp % report_every == 0:
                progress(report_every)
            if not drop_over:
                if n_comp >= next_batch_at and not training and j < steps:
                    training = True
                    push(heap, (t + taus[j], pub + j, -1))
                    j += 1
                    next_batch_at += b
                continue
            buffer.append(x)
            if training or j >= steps:
                continue
        else:
            jj = x - pub
            publish_times[jj] = t
            version = jj + 1
            training = False
            if version == steps:
                break
            if not drop_over:
                if n_comp >= next_batch_at:
                    training = True
                    push(heap, (t + taus[j], pub + j, -1))
                    j += 1
                    next_batch_at += b
                continue
        # drop mode: the trainer pulls from the buffer
        while buffer:
            rid = buffer.popleft()
            k_rid.append(rid)
            k_step.append(j)
            if j - (c_ver[rid - n_slots] if rid >= n_slots else 0) > eta:
                k_keep.append(0)
                continue
            k_keep.append(1)
            n_batch += 1
            if n_batch == b:
                n_batch = 0
                training = True
                push(heap, (t + taus[j], pub + j, -1))
                j += 1
                break
    if progress is not None:
        progress(n_comp % report_every)
    c_rec = _Completions(c_slot, c_time, c_ver, k_rid, k_step, k_keep, n_comp, publish_times, t)
    return _fast_trace(cfg, supply, trainer_times, c_rec)


class _Completions(NamedTuple):
    """What the fast loop records: per completion its slot, time and the version then current;
    in drop mode per consumption the rollout id, the step and whether it was kept."""

    slot: array[int]
    time: array[float]
    version: array[int]
    k_rid: array[int]
    k_step: array[int]
    k_keep: array[int]
    n: int
    publish_times: list[float]
    end_time: float


def _fast_trace(
    cfg: SimConfig, supply: LengthSupply, trainer_times: NDArray[np.float64], c: _Completions
) -> RawTrace:
    """The per-rollout columns (rollout id order) rebuilt from the fast loop's records: each
    completion relaunched its slot at once, so launch times, ids and indices follow."""
    n_slots, b, target = cfg.slots, cfg.batch, cfg.steps * cfg.batch
    drop_over = cfg.over_bound == "drop"
    n_comp, t = c.n, c.end_time
    publish_times = c.publish_times
    c_slot, c_time, c_ver, k_rid, k_step, k_keep = (
        c.slot,
        c.time,
        c.version,
        c.k_rid,
        c.k_step,
        c.k_keep,
    )
    cs = np.frombuffer(c_slot, dtype=np.int32) if n_comp else np.zeros(0, np.int32)
    ct = np.frombuffer(c_time, dtype=np.float64) if n_comp else np.zeros(0)
    cv = np.frombuffer(c_ver, dtype=np.int32) if n_comp else np.zeros(0, np.int32)
    n = n_slots + n_comp
    slot = np.concatenate([np.arange(n_slots, dtype=np.int32), cs])
    launch = np.concatenate([np.zeros(n_slots), ct])
    version_a = np.concatenate([np.zeros(n_slots, dtype=np.int32), cv])
    # completion c finished the slot's previous launch: its k-th completion finished rollout
    # (slot, k), launched by the slot's (k-1)-th completion (or initially)
    by_slot = np.argsort(cs, kind="stable")
    first = np.ones(n_comp, dtype=bool)
    first[1:] = cs[by_slot][1:] != cs[by_slot][:-1]
    prev_c = np.empty(n_comp, dtype=np.int64)
    prev_c[by_slot[1:]] = by_slot[:-1]
    done_rid = np.where(first[np.argsort(by_slot)], cs.astype(np.int64), n_slots + prev_c)
    index = np.zeros(n, dtype=np.int32)
    within = np.arange(n_comp) - np.maximum.accumulate(np.where(first, np.arange(n_comp), 0))
    index[n_slots + by_slot] = within + 1
    finish = np.full(n, np.nan)
    finish[done_rid] = ct
    status = np.full(n, _UNFINISHED, dtype=np.int8)
    status[done_rid] = _PENDING
    rank = np.full(n, -1, dtype=np.int64)
    step = np.full(n, -1, dtype=np.int32)
    if not drop_over:
        tr = done_rid[:target]
        rank[tr] = np.arange(tr.size)
        step[tr] = np.arange(tr.size) // b
        status[tr] = _TRAINED
    else:
        krid = np.frombuffer(k_rid, dtype=np.int64) if len(k_rid) else np.zeros(0, np.int64)
        kstep = np.frombuffer(k_step, dtype=np.int32) if len(k_step) else np.zeros(0, np.int32)
        keep = (np.frombuffer(k_keep, dtype=np.int8) if len(k_keep) else np.zeros(0, np.int8)) > 0
        step[krid] = kstep
        status[krid[~keep]] = _DROPPED
        tr = krid[keep]
        status[tr] = _TRAINED
        rank[tr] = np.arange(tr.size)
    stale = np.where(step >= 0, step - version_a, -1).astype(np.int32)
    busy = float(np.sum(np.where(np.isnan(finish), t, finish) - launch))
    return RawTrace(
        slot=slot,
        column=index,
        launch_time=launch,
        finish_time=finish,
        length=supply.matrix[slot, index],
        launch_version=version_a,
        min_version=version_a,
        step=step,
        staleness=stale,
        status=status,
        rank=rank,
        wasted_tokens=None,
        recomputed_tokens=None,
        segments=None,
        publish_times=np.asarray(publish_times, dtype=np.float64),
        end_time=t,
        generator_busy=busy,
        trainer_busy=float(np.sum(trainer_times)),
    )
