"""Straightforward SimPy models of the simulator's modes, one per mode, for ``bench_sim.py``.

The plain SimPy peer (``tests/peers/simpy_queue.py``) models only plain asynchronous dispatch. A
mode does more work per rollout (a staleness check, a batch cut-off, a publication that touches every
slot, preemptions, an admission rule), so ``bench_sim.py`` also times each mode against a SimPy model
of that same mode. Each model here is written from the mode's rules (conventions §vocabulary,
§async-dispatch, §admission-and-partial, §tie-rule) in SimPy's idiom: SimPy's clock and event queue,
one timeout per rollout phase, a callback per event; a publication is an event of lower priority, so
it follows every completion of its instant (the tie rule). The benchmark checks each model sample for
sample against ``refimpl.sim`` on the shared inputs before timing it.

Times: decode ``tokens · 1``, no prefill and no re-prefill cost (the benchmark's runs), so every
completion time is the phase start plus the remaining tokens, in the same float operations as
``refimpl.sim``. Each function returns ``(staleness, trained_lengths, end_time)`` in training order.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import simpy
from simpy.events import Event

NORMAL, LATE = 1, 2  # SimPy priorities: completions, preemptions; publications after them


class _Run:
    """What every mode shares: the clock, the slots' length rows, the trainer's batch."""

    def __init__(self, lengths: np.ndarray, batch: int, steps: int) -> None:
        self.env = simpy.Environment()
        self.rows = [row.tolist() for row in lengths]
        self.col = [0] * len(self.rows)
        self.batch, self.steps = batch, steps
        self.version = 0
        self.stale: list[int] = []
        self.tlen: list[float] = []
        self.done = self.env.event()

    def at(self, delay: float, fn: Callable[[Any], None], priority: int = NORMAL) -> Event:
        ev = Event(self.env)
        ev._ok = True
        ev._value = None
        ev.callbacks.append(fn)
        self.env.schedule(ev, priority, delay)
        return ev

    def next_length(self, s: int) -> float:
        k = self.col[s]
        self.col[s] = k + 1
        return float(self.rows[s][k])

    def train(self, samples: list[tuple[int, float]]) -> None:
        """Train one batch of ``(oldest version, length)`` and publish at once."""
        j = self.version
        for v, length in samples:
            self.stale.append(j - v)
            self.tlen.append(length)
        self.at(0.0, self.publish, LATE)

    def publish(self, _: Any) -> None:
        self.version += 1
        if self.version == self.steps:
            self.done.succeed()
        else:
            self.published()

    def published(self) -> None:  # a mode's reaction to a new version
        pass

    def result(self) -> tuple[np.ndarray, np.ndarray, float]:
        self.env.run(until=self.done)
        return np.asarray(self.stale, dtype=np.int64), np.asarray(self.tlen), self.env.now


def simulate_drop(
    lengths: np.ndarray, batch: int, steps: int, *, eta: int
) -> tuple[np.ndarray, np.ndarray, float]:
    """Asynchronous dispatch; the trainer drops a sample whose staleness exceeds ``eta``."""
    run = _Run(lengths, batch, steps)
    buffer: deque[tuple[int, float]] = deque()
    batch_: list[tuple[int, float]] = []
    training = [False]

    def launch(s: int) -> None:
        v, length = run.version, run.next_length(s)
        run.env.timeout(length).callbacks.append(lambda _: complete(s, v, length))

    def complete(s: int, v: int, length: float) -> None:
        buffer.append((v, length))
        launch(s)
        pull()

    def pull() -> None:
        if training[0] or run.version >= run.steps:
            return
        while buffer and len(batch_) < batch:
            v, length = buffer.popleft()
            if run.version - v <= eta:
                batch_.append((v, length))
        if len(batch_) == batch:
            training[0] = True
            run.train(batch_)
            batch_.clear()

    def published() -> None:
        training[0] = False
        pull()

    run.published = published  # type: ignore[method-assign]
    for s in range(len(run.rows)):
        launch(s)
    return run.result()


def simulate_first_k(
    lengths: np.ndarray, batch: int, steps: int, *, launch: int
) -> tuple[np.ndarray, np.ndarray, float]:
    """``first_k``: each step launches ``launch`` rollouts (queued for free slots), trains the first
    ``batch`` to finish and drops the rest."""
    run = _Run(lengths, batch, steps)
    n_slots = len(run.rows)
    running: dict[int, int] = {}  # slot -> generation of its rollout
    gen = [0] * n_slots
    idle: list[int] = list(range(n_slots))
    queued = [0]
    batch_: list[tuple[int, float]] = []

    def start(s: int) -> None:
        v, length = run.version, run.next_length(s)
        gen[s] += 1
        g = gen[s]
        running[s] = g
        run.env.timeout(length).callbacks.append(lambda _: complete(s, g, v, length))

    def complete(s: int, g: int, v: int, length: float) -> None:
        if running.get(s) != g:
            return  # dropped as a leftover
        del running[s]
        batch_.append((v, length))
        if queued[0]:
            queued[0] -= 1
            start(s)
        else:
            idle.append(s)
        if len(batch_) == batch:
            run.train(batch_)
            batch_.clear()
            idle.extend(running)  # the leftovers are dropped; their slots are free
            running.clear()
            queued[0] = 0

    def published() -> None:
        free = sorted(idle)
        idle.clear()
        for s in free[:launch]:
            start(s)
        idle.extend(free[launch:])
        queued[0] = max(launch - len(free), 0)

    run.published = published  # type: ignore[method-assign]
    published()
    return run.result()


def simulate_admission(
    lengths: np.ndarray, batch: int, steps: int, *, eta: int
) -> tuple[np.ndarray, np.ndarray, float]:
    """Asynchronous dispatch under the AReaL/SkyRL capacity rule: a launch waits while
    ``accepted + running >= (eta + version + 1) * batch``."""
    run = _Run(lengths, batch, steps)
    n_slots = len(run.rows)
    idle: deque[int] = deque(range(n_slots))
    count = {"admitted": 0, "running": 0}
    buffer: list[tuple[int, float]] = []

    def admit() -> None:
        running = count["running"]
        cap = min(n_slots - running, (eta + run.version + 1) * batch - count["admitted"])
        while cap > 0 and idle:
            s = idle.popleft()
            count["admitted"] += 1
            count["running"] += 1
            cap -= 1
            v, length = run.version, run.next_length(s)
            run.env.timeout(length).callbacks.append(
                lambda _, s=s, v=v, length=length: complete(s, v, length)
            )

    def complete(s: int, v: int, length: float) -> None:
        count["running"] -= 1
        buffer.append((v, length))
        idle.append(s)
        admit()
        if len(buffer) == batch:
            run.train(buffer)
            buffer.clear()

    run.published = admit  # type: ignore[method-assign]
    admit()
    return run.result()


def simulate_partial(
    lengths: np.ndarray, batch: int, steps: int, *, partial: str
) -> tuple[np.ndarray, np.ndarray, float]:
    """Asynchronous dispatch with partial rollouts: at each publication every in-flight rollout
    keeps its KV cache (``keep_kv``), re-prefills (``recompute``, free here) or is aborted and its
    slot relaunches (``restart``). Staleness counts the oldest version among its tokens."""
    run = _Run(lengths, batch, steps)
    n_slots = len(run.rows)
    # per slot: the rollout in flight (None when none), as a small record
    fly: list[dict[str, Any] | None] = [None] * n_slots
    buffer: list[tuple[int, float]] = []

    def launch(s: int) -> None:
        r = {"v": run.version, "len": run.next_length(s), "t0": run.env.now, "k0": 0.0}
        r["seg"] = 0.0  # tokens before the start of its current version segment
        fly[s] = r
        schedule(s, r, r["len"])

    def schedule(s: int, r: dict[str, Any], rest: float) -> None:
        r["gen"] = r.get("gen", 0) + 1
        g = r["gen"]
        run.env.timeout(rest).callbacks.append(lambda _: complete(s, r, g))

    def complete(s: int, r: dict[str, Any], g: int) -> None:
        if fly[s] is not r or r["gen"] != g:
            return
        fly[s] = None
        buffer.append((r["v"], r["len"]))
        launch(s)
        if len(buffer) == batch:
            run.train(buffer)
            buffer.clear()

    def published() -> None:
        now = run.env.now
        for s in range(n_slots):
            r = fly[s]
            if r is None:
                continue
            k = min(max(r["k0"] + (now - r["t0"]), r["k0"]), r["len"])  # tokens done
            if partial == "restart":
                fly[s] = None
                launch(s)
                continue
            if k <= r["seg"]:
                if r["seg"] == 0.0:  # no token yet: the rollout's oldest version is the new one
                    r["v"] = run.version
            else:
                r["seg"] = k
            if partial == "recompute":
                r["t0"], r["k0"] = now, k
                schedule(s, r, r["len"] - k)

    run.published = published  # type: ignore[method-assign]
    for s in range(n_slots):
        launch(s)
    return run.result()


def simulate_preemption(
    lengths: np.ndarray, batch: int, steps: int, *, rate: float, duration: float, seed: int
) -> tuple[np.ndarray, np.ndarray, float]:
    """Asynchronous dispatch with checkpoint preemption: each slot is lost at rate ``rate``
    (exponential delays from ``default_rng([seed, 2])``, drawn in event order) for ``duration``;
    its rollout pauses and resumes from its persisted KV cache at no cost."""
    run = _Run(lengths, batch, steps)
    n_slots = len(run.rows)
    rng = np.random.default_rng([seed, 2])
    scale = 1.0 / rate
    fly: list[dict[str, Any] | None] = [None] * n_slots
    paused: list[dict[str, Any] | None] = [None] * n_slots
    down = [False] * n_slots
    buffer: list[tuple[int, float]] = []

    def launch(s: int) -> None:
        r = {"v": run.version, "len": run.next_length(s), "t0": run.env.now, "k0": 0.0, "gen": 0}
        fly[s] = r
        schedule(s, r, r["len"])

    def schedule(s: int, r: dict[str, Any], rest: float) -> None:
        r["gen"] += 1
        g = r["gen"]
        run.env.timeout(rest).callbacks.append(lambda _: complete(s, r, g))

    def complete(s: int, r: dict[str, Any], g: int) -> None:
        if fly[s] is not r or r["gen"] != g:
            return
        fly[s] = None
        buffer.append((r["v"], r["len"]))
        launch(s)
        if len(buffer) == batch:
            run.train(buffer)
            buffer.clear()

    def preempt(s: int) -> None:
        down[s] = True
        r = fly[s]
        if r is not None:
            k = min(max(r["k0"] + (run.env.now - r["t0"]), r["k0"]), r["len"])
            r["rest"], r["k0"] = r["len"] - k, k
            r["gen"] += 1
            fly[s], paused[s] = None, r
        run.at(duration, lambda _: resume(s))

    def resume(s: int) -> None:
        down[s] = False
        run.at(float(rng.exponential(scale)), lambda _: preempt(s))
        r = paused[s]
        if r is None:
            launch(s)
            return
        paused[s] = None
        r["t0"] = run.env.now
        fly[s] = r
        schedule(s, r, r["rest"])

    for s in range(n_slots):
        run.at(float(rng.exponential(scale)), lambda _, s=s: preempt(s))
    for s in range(n_slots):
        launch(s)
    return run.result()


def least_loaded(loads: list[int]) -> int:
    """The router: the shard with the smallest load, the lowest index among equals."""
    return loads.index(min(loads))


def simulate_agent(
    lengths: np.ndarray,
    batch: int,
    steps: int,
    *,
    turns: int,
    tool_latency: float,
    shards: int,
    capacity: int | None,
    eta: int | None = None,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Agent rollouts (``refimpl.sim.agent``) without faults: a rollout decodes ``turns + 1``
    equal segments (``length / (turns + 1)`` each) with a tool call of ``tool_latency`` between two;
    each call goes to the least loaded shard (queued + busy, lowest index on ties), which serves it
    at once if one of its ``capacity`` containers is free, else queues it (FIFO). The slot stays with
    its rollout until the last segment ends, then relaunches; with ``eta`` a rollout over the bound
    when the trainer consumes it is dropped."""
    run = _Run(lengths, batch, steps)
    n_slots = len(run.rows)
    cap = float("inf") if capacity is None else capacity
    busy = [0] * shards
    queue: list[deque[Callable[[], None]]] = [deque() for _ in range(shards)]
    trained = [0]
    target = steps * batch

    def launch(s: int) -> None:
        v, length = run.version, run.next_length(s)
        seg = length * 1.0 / (turns + 1)
        segment(s, v, length, seg, turns)

    def segment(s: int, v: int, length: float, seg: float, calls_left: int) -> None:
        if calls_left:
            after = lambda: tool(s, v, length, seg, calls_left - 1)  # noqa: E731
        else:
            after = lambda: finish(s, v, length)  # noqa: E731
        run.env.timeout(seg).callbacks.append(lambda _: after())

    def tool(s: int, v: int, length: float, seg: float, calls_left: int) -> None:
        shard = least_loaded([len(q) + b for q, b in zip(queue, busy, strict=True)])

        def serve() -> None:
            busy[shard] += 1
            run.env.timeout(tool_latency).callbacks.append(lambda _: done())

        def done() -> None:
            busy[shard] -= 1
            if queue[shard]:
                queue[shard].popleft()()
            segment(s, v, length, seg, calls_left)

        if busy[shard] < cap:
            serve()
        else:
            queue[shard].append(serve)

    def finish(s: int, v: int, length: float) -> None:
        m = trained[0]
        if m < target:
            step = m // batch
            if eta is None or step - v <= eta:
                trained[0] = m + 1
                run.stale.append(step - v)
                run.tlen.append(length)
                if (m + 1) % batch == 0:
                    run.at(0.0, run.publish, LATE)
        if trained[0] < target:
            launch(s)

    for s in range(n_slots):
        launch(s)
    return run.result()


def simulate_engine(
    lengths: np.ndarray,
    batch: int,
    steps: int,
    *,
    blocks: int,
    block_size: int,
    watermark_blocks: int,
    prompt_tokens: int,
    roofline: tuple[float, float, float, float],
) -> tuple[np.ndarray, np.ndarray, float]:
    """The engine mode (``refimpl.sim.engine``): continuous batching under a paged KV budget.

    One SimPy timeout per decode step, of the roofline time ``over + max(base + per_ctx · C,
    per_tok · (b + p))``; between steps, in this order: the step's completions (in the order they
    were scheduled), admissions (preempted sequences first, oldest first, then new ones in the seats
    freed, in order) while the running sequences' next blocks, the new one's blocks with its next
    token's and the watermark fit, the trainer (zero time: it publishes at once), then blocks for the
    next step's tokens, preempting the most recently admitted sequence (its KV recomputed when it
    resumes) until they fit. Each sequence holds its prompt (no sharing) and ``ceil(own / block)``
    blocks; lengths are rounded up to whole tokens.
    """
    env = simpy.Environment()
    rows = [np.ceil(row).astype(np.int64).tolist() for row in lengths]
    col = [0] * len(rows)
    base, per_ctx, per_tok, over = roofline
    seats: deque[int] = deque(range(len(rows)))
    seqs: dict[int, dict[str, Any]] = {}  # running or preempted, by rollout id
    finishing: list[tuple[int, int, int]] = []  # (step, schedule number, rollout)
    newest: list[tuple[int, int]] = []  # (-admission number, rollout)
    paused: list[int] = []
    state = {"s": 0, "free": blocks, "ctx": 0.0, "prefill": 0.0, "next": 0, "q": 0, "v": 0}
    phase = [0] * block_size  # running sequences by the step modulo block_size they need a block
    buffer: deque[tuple[int, int]] = deque()
    stale: list[int] = []
    tlen: list[float] = []

    def cdiv(a: int, b: int) -> int:
        return -(-a // b)

    def fits(own: int) -> bool:
        need = phase[state["s"] % block_size] + cdiv(own + 1, block_size)
        return state["free"] - need >= watermark_blocks

    def start(r: int, g: int) -> None:
        seq = seqs[r]
        seq.update(g0=g, s0=state["s"], running=True)
        phase[(state["s"] - prompt_tokens - g) % block_size] += 1
        state["ctx"] += prompt_tokens + g
        state["free"] -= cdiv(prompt_tokens + g, block_size)
        q = state["q"]
        state["q"] = q + 1
        seq["q"] = q
        heapq.heappush(finishing, (state["s"] + seq["length"] - g - 1, q, r))
        heapq.heappush(newest, (-q, r))

    def stop(r: int, g: int) -> None:
        seq = seqs[r]
        seq["running"] = False
        phase[(seq["s0"] - prompt_tokens - seq["g0"]) % block_size] -= 1
        state["ctx"] -= prompt_tokens + g
        state["free"] += cdiv(prompt_tokens + g, block_size)

    def admit() -> None:
        while True:
            if paused:
                r = paused[0]
                g = seqs[r]["g0"]
                if not fits(prompt_tokens + g):
                    return
                heapq.heappop(paused)
                state["prefill"] += prompt_tokens + g
                start(r, g)
                continue
            if not seats or not fits(prompt_tokens):
                return
            seat = seats.popleft()
            r = state["next"]
            state["next"] = r + 1
            length = rows[seat][col[seat]]
            col[seat] += 1
            seqs[r] = {"seat": seat, "length": length, "version": state["v"]}
            state["prefill"] += prompt_tokens
            start(r, 0)

    def make_room() -> None:
        s = state["s"]
        need = phase[s % block_size]
        while need > state["free"]:
            key, r = heapq.heappop(newest)
            seq = seqs.get(r)
            if seq is None or not seq["running"] or seq["q"] != -key:
                continue
            g = seq["g0"] + s - seq["s0"]
            if (seq["s0"] - prompt_tokens - seq["g0"]) % block_size == s % block_size:
                need -= 1
            stop(r, g)
            seq["g0"] = g
            heapq.heappush(paused, r)
        state["free"] -= need

    def complete(step: int) -> None:
        while finishing and finishing[0][0] == step:
            _, q, r = heapq.heappop(finishing)
            seq = seqs[r]
            if not seq["running"] or seq["q"] != q:
                continue
            stop(r, seq["length"])
            del seqs[r]
            buffer.append((seq["version"], seq["length"]))
            seats.append(seq["seat"])

    def engine() -> Any:
        while True:
            admit()
            make_room()
            b = sum(phase)
            dt = over + max(base + per_ctx * state["ctx"], per_tok * (b + state["prefill"]))
            yield env.timeout(dt)
            state["ctx"] += b
            state["prefill"] = 0.0
            state["s"] += 1
            complete(state["s"] - 1)
            admit()
            while len(buffer) >= batch:  # the trainer: zero time, it publishes at once
                j = state["v"]
                for _ in range(batch):
                    v, length = buffer.popleft()
                    stale.append(j - v)
                    tlen.append(float(length))
                state["v"] = j + 1
                if state["v"] == steps:
                    return

    env.run(until=env.process(engine()))
    return np.asarray(stale, dtype=np.int64), np.asarray(tlen), env.now


MODELS: dict[str, Callable[..., tuple[np.ndarray, np.ndarray, float]]] = {
    "drop": simulate_drop,
    "first_k": simulate_first_k,
    "admission": simulate_admission,
    "partial": simulate_partial,
    "preemption": simulate_preemption,
    "agent": simulate_agent,
    "engine": simulate_engine,
}
