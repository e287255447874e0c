"""The agent kernel's ring of constant-delay events (refimpl.sim.agent._compiled_fifo).

The ends of tool calls served warm, with a constant service time and one attempt per call, skip
the heap for a first-in, first-out ring; the kernel takes whichever of the ring's head and the
heap's top orders first by (time, key). The run must stay the reference engine's bit for bit:
with ties between the two queues (integer times), with the ring wrapping around its row, and when
the kernel pauses for room and the driver grows the heap. Growing keeps the ring's entries in
order at the start of its row, head first: checked on a ring wrapped past the end of its row,
since in a run the ring never holds more entries than there are slots and the heap grows only at
the start, the ring empty. The kernel run as plain Python pushes some ends through the ring and
others (cold starts) through the heap. Each check is also shown to fail on a wrong variant: a
ring taken first on equal times whatever the keys, and a ring grown without moving its entries.
"""

from __future__ import annotations

import math
import types
from typing import Any

import numpy as np
import pytest
import scipy.stats as st
from _wrong_variants import rejects

from refimpl.sim.agent import (
    AgentConfig,
    AgentResult,
    _compiled_fifo,
    _compiled_run,
    simulate_agent,
)
from refimpl.sim.agent import _compiled as agent_compiled

_RING = AgentConfig(
    slots=6, batch=4, steps=30, lengths=st.expon(scale=6.0), turns=2, tool_latency=1.5,
    shards=2, capacity=2, cold_start=0.5, warm_start=0.25, keepalive=3.0, refresh=2.0, seed=3,
)  # fmt: skip
# integer lengths, latency and refresh period: events of the ring and of the heap often tie
_TIES = AgentConfig(
    slots=5, batch=3, steps=30,
    lengths=np.random.default_rng(4).integers(1, 5, size=(5, 40)).astype(float),
    turns=2, tool_latency=1.0, shards=2, capacity=2, cold_start=1.0, keepalive=2.0, refresh=1.0,
    seed=4,
)  # fmt: skip
_CONFIGS = {"continuous": _RING, "ties": _TIES}


def _same_run(a: AgentResult, b: AgentResult) -> None:
    """Every column of every trace and every summary field, bit for bit (NaN where NaN)."""
    for part in ("rollouts", "calls", "attempts", "shards"):
        x, y = getattr(a, part), getattr(b, part)
        for name in x._fields:
            np.testing.assert_array_equal(
                getattr(x, name), getattr(y, name), err_msg=f"{part}.{name}", strict=True
            )
    for name, u in a.summary._asdict().items():
        v = getattr(b.summary, name)
        assert u == v or (isinstance(u, float) and math.isnan(u) and math.isnan(v)), name


def _kernel_as_python(
    cfg: AgentConfig, monkeypatch: pytest.MonkeyPatch, **replaced: Any
) -> AgentResult:
    """The run with the kernel and its helpers as plain Python, in a namespace of their own
    (helpers named in ``replaced`` replaced there), so that no compiled kernel sees a
    replacement."""
    space = dict(vars(agent_compiled))
    for name in (*agent_compiled._HELPERS, "_hpush", "_hpop"):
        f = getattr(space[name], "py_func", space[name])
        if name in ("_hpush", "_hpop"):  # the heap's, with the heap module's own names
            space[name] = f
        else:
            space[name] = types.FunctionType(f.__code__, space, name, f.__defaults__)
    space.update(replaced)
    monkeypatch.setattr(agent_compiled, "_runner", space["_kernel"])
    return simulate_agent(cfg, engine="compiled")


def _tiny_room(monkeypatch: pytest.MonkeyPatch) -> None:
    """Almost no room at first: the kernel pauses, and the driver grows the heap and the ring."""
    monkeypatch.setattr(agent_compiled, "_first_sizes", lambda cfg: (1, 1, 1, 1, 1, 1))


@pytest.mark.parametrize("name", list(_CONFIGS))
def test_runs_through_the_ring_are_the_reference_bit_for_bit(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _CONFIGS[name]
    reference = simulate_agent(cfg, engine="event")
    _same_run(reference, simulate_agent(cfg, engine="compiled"))
    with monkeypatch.context() as m:
        _tiny_room(m)
        _same_run(reference, simulate_agent(cfg, engine="compiled"))
    pushed: list[int] = []
    ring_push = _compiled_fifo._fifo_push

    def counted(*args: Any) -> None:
        pushed.append(1)
        ring_push(*args)

    _same_run(reference, _kernel_as_python(cfg, monkeypatch, _fifo_push=counted))
    calls = int(reference.summary.calls_issued)
    assert 0 < len(pushed) < calls  # warm ends through the ring, cold ones through the heap


def _ring_first_on_equal_times(ht: Any, hk: Any, hn: Any) -> bool:
    return bool(hn[2] > 0 and (hn[0] == 0 or ht[1, hn[1]] <= ht[0, 0]))


def _ring_left_in_place(x: Any, size: int, ring: Any) -> Any:
    return _compiled_run._grown(x, size)


def _check_growth_keeps_the_ring() -> None:
    """A heap nearly full and a ring wrapped past the end of its row (entries 0..4 from the
    second-to-last position): grown, the heap row is as it was and the ring's entries come first
    in its row, head first, the head at 0."""
    a = _compiled_run._allocate(_RING, (1, 1, 1, 1, 1, 1))
    old, n_heap, n_ring = a.heap, a.heap - 3, 5
    a.hn[:] = (n_heap, old - 2, n_ring)
    for x in (a.ht, a.hk, a.hp):
        x[0, :n_heap] = np.arange(100, 100 + n_heap)
        x[1, (old - 2 + np.arange(n_ring)) % old] = np.arange(n_ring)
    _compiled_run._grow(_RING, a)
    assert a.heap > old
    assert a.hn.tolist() == [n_heap, 0, n_ring]
    for x in (a.ht, a.hk, a.hp):
        assert x.shape == (2, a.heap)
        assert x[0, :n_heap].tolist() == list(range(100, 100 + n_heap))
        assert x[1, :n_ring].tolist() == list(range(n_ring))


def test_growing_keeps_the_heap_and_the_ring_in_order() -> None:
    _check_growth_keeps_the_ring()


def test_the_checks_reject_a_wrong_tie_rule_and_a_ring_grown_in_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reference = simulate_agent(_TIES, engine="event")

    def tie_rule() -> None:
        with monkeypatch.context() as m:
            run = _kernel_as_python(_TIES, m, _fifo_first=_ring_first_on_equal_times)
            _same_run(reference, run)

    rejects(tie_rule)
    monkeypatch.setattr(_compiled_run, "_unwrapped", _ring_left_in_place)
    rejects(_check_growth_keeps_the_ring)
