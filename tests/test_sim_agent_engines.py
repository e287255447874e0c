"""The agent simulator's engines (refimpl.sim.agent, issue 17): the compiled engine is the reference
engine bit for bit, and the benchmark's SimPy model of the agent mode is refimpl's agent mode sample
for sample.

The properties were seen to fail on planted bugs (run by hand, not kept: each costs a compile):
a keepalive test ``>=`` for ``>`` in the compiled admission, and a router that breaks load ties
towards the highest shard index.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import scipy.stats as st
from _scripts import load_script
from hypothesis import given, note, settings
from hypothesis import strategies as hst

from refimpl.sim.agent import AgentConfig, AgentResult, simulate_agent
from refimpl.sim.agent import _compiled as agent_compiled

_ROOT = Path(__file__).resolve().parents[1]


def _outcome(cfg: AgentConfig, engine: str, **kw: Any) -> AgentResult | str:
    """The run's result, or the error it ended with (type and message)."""
    try:
        return simulate_agent(cfg, engine=engine, **kw)  # type: ignore[arg-type]
    except (ValueError, RuntimeError) as err:
        return f"{type(err).__name__}: {err}"


def _equal_exactly(a: AgentResult, b: AgentResult) -> None:
    """Every column of every trace, dtype and shape included, and every summary field, bit for
    bit (NaN where NaN)."""
    for part in ("rollouts", "calls", "attempts", "shards"):
        x, y = getattr(a, part), getattr(b, part)
        for name in x._fields:
            u, v = getattr(x, name), getattr(y, name)
            assert (u.dtype, u.shape) == (v.dtype, v.shape), f"{part}.{name}"
            np.testing.assert_array_equal(u, v, err_msg=f"{part}.{name}", strict=True)
    for name, u in a.summary._asdict().items():
        v = getattr(b.summary, name)
        same = u == v or (isinstance(u, float) and math.isnan(u) and math.isnan(v))
        assert same, f"summary.{name}: {u!r} != {v!r}"


@hst.composite
def agent_configs(draw: Any) -> AgentConfig:
    """Small runs over every parameter of the agent model. Integer lengths, service times, starts
    and refresh periods make ties of event times common (the tie rule and the heap's order)."""
    slots = draw(hst.integers(1, 5))
    batch = draw(hst.integers(1, 5))
    steps = draw(hst.integers(1, 6))
    if draw(hst.booleans()):
        cols = -(-steps * batch // slots) + 12
        lengths: Any = np.asarray(
            draw(hst.lists(hst.integers(1, 4), min_size=slots * cols, max_size=slots * cols)),
            dtype=float,
        ).reshape(slots, cols)
    else:
        lengths = draw(hst.sampled_from([st.expon(scale=3.0), st.poisson(2.0, loc=1)]))
    turns = draw(hst.one_of(hst.integers(0, 3), hst.just(st.poisson(1.2))))
    latency = draw(
        hst.one_of(
            hst.sampled_from([0.0, 1.0, 2.5]),
            hst.sampled_from([st.expon(scale=2.0), st.randint(0, 3)]),
        )
    )
    shards = draw(hst.integers(1, 4))
    return AgentConfig(
        slots=slots,
        batch=batch,
        steps=steps,
        lengths=lengths,
        turns=turns,
        tool_latency=latency,
        shards=shards,
        capacity=draw(hst.one_of(hst.none(), hst.integers(1, 3))),
        admission=draw(hst.sampled_from(["queue", "redirect"])),
        max_redirects=draw(hst.one_of(hst.none(), hst.integers(0, 2))),
        refresh=draw(hst.sampled_from([0.0, 0.0, 1.0, 2.5])),
        cold_start=draw(hst.sampled_from([0.0, 1.0, 0.5])),
        warm_start=draw(hst.sampled_from([0.0, 0.25])),
        keepalive=draw(hst.sampled_from([math.inf, 1.0, 4.0])),
        crash_rate=draw(hst.sampled_from([0.0, 0.0, 0.1, 0.4])),
        timeout=draw(hst.sampled_from([None, 2.0, 5.0])),
        max_attempts=draw(hst.integers(1, 3)),
        retry_delay=draw(hst.sampled_from([0.0, 1.0])),
        recovery=draw(hst.sampled_from(["replay", "reexecute"])),
        replay_cost=draw(hst.sampled_from([0.0, 0.5])),
        on_failure=draw(hst.sampled_from(["continue", "abort"])),
        eta=draw(hst.sampled_from([None, 0, 1])),
        seed=draw(hst.integers(0, 2**16)),
    )


@settings(max_examples=120, deadline=None)
@given(agent_configs())
def test_the_compiled_agent_engine_is_the_reference_engine_bit_for_bit(cfg: AgentConfig) -> None:
    reference = _outcome(cfg, "event")
    compiled = _outcome(cfg, "compiled")
    note(f"reference: {reference if isinstance(reference, str) else reference.summary}")
    if isinstance(reference, str) or isinstance(compiled, str):
        assert compiled == reference
        return
    _equal_exactly(reference, compiled)


_FAULTY = AgentConfig(
    slots=6,
    batch=4,
    steps=40,
    lengths=st.expon(scale=6.0),
    turns=st.poisson(2.0),
    tool_latency=st.expon(scale=1.5),
    shards=3,
    capacity=2,
    admission="redirect",
    refresh=2.0,
    cold_start=0.5,
    keepalive=3.0,
    crash_rate=0.08,
    timeout=6.0,
    recovery="reexecute",
    seed=9,
)


def test_the_compiled_agent_engine_gives_the_same_result_when_it_runs_out_of_room(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Starting with almost no room and drawing ahead almost nothing forces every "grow and
    resume" path of the kernel (rows, calls, attempts, containers, heap, each random stream), and
    progress in chunks of one step: the same result, and the same progress calls, as the
    reference."""
    monkeypatch.setattr(agent_compiled, "_first_sizes", lambda cfg: (1, 1, 1, 1, 1, 1))
    seen: dict[str, list[int]] = {"event": [], "compiled": []}
    reference = simulate_agent(_FAULTY, engine="event", progress=seen["event"].append)
    compiled = simulate_agent(_FAULTY, engine="compiled", progress=seen["compiled"].append)
    _equal_exactly(reference, compiled)
    assert seen["compiled"] == seen["event"] == list(range(1, _FAULTY.steps + 1))


def test_the_engine_comparison_catches_one_call_that_takes_a_little_longer() -> None:
    """The comparison can fail: the same run with one service time changed differs."""
    lengths = np.random.default_rng(3).integers(1, 5, size=(4, 40)).astype(float)
    cfg = AgentConfig(slots=4, batch=4, steps=20, lengths=lengths, turns=1, tool_latency=1.0)
    other = dataclasses.replace(cfg, tool_latency=1.0 + 2**-40)
    with pytest.raises(AssertionError):
        _equal_exactly(
            simulate_agent(cfg, engine="event"), simulate_agent(other, engine="compiled")
        )


def test_both_engines_refuse_a_short_matrix_and_too_many_aborts_alike() -> None:
    short = AgentConfig(
        slots=2, batch=2, steps=4, lengths=np.ones((2, 4)), turns=1, tool_latency=3.0
    )
    aborts = dataclasses.replace(
        _FAULTY, on_failure="abort", crash_rate=50.0, max_attempts=1, steps=2, turns=2
    )
    for cfg in (short, aborts):
        reference = _outcome(cfg, "event")
        assert isinstance(reference, str)
        assert _outcome(cfg, "compiled") == reference


def test_auto_uses_the_compiled_engine_and_falls_back_without_numba(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cfg = dataclasses.replace(_FAULTY, steps=5)
    assert agent_compiled.AVAILABLE  # the dev install has numba (refimpl[fast])
    calls: list[AgentConfig] = []
    real = agent_compiled.run_agent_compiled

    def spy(c: AgentConfig, **kw: Any) -> Any:
        calls.append(c)
        return real(c, **kw)

    monkeypatch.setattr(agent_compiled, "run_agent_compiled", spy)
    auto = simulate_agent(cfg)
    assert calls == [cfg]
    monkeypatch.setattr(agent_compiled, "AVAILABLE", False)
    _equal_exactly(simulate_agent(cfg), auto)
    assert len(calls) == 1
    with pytest.raises(ValueError, match=r"pip install 'refimpl\[fast\]'"):
        simulate_agent(cfg, engine="compiled")
    with pytest.raises(ValueError, match="engine must be one of 'auto', 'compiled', 'event'"):
        simulate_agent(cfg, engine="numba")  # type: ignore[arg-type]


# -- the benchmark's SimPy model of the agent mode ------------------------------------------------


@pytest.fixture(scope="module")
def simpy_modes() -> ModuleType:
    return load_script("simpy_modes", _ROOT / "benchmarks" / "simpy_modes.py")


def _training_order(res: AgentResult) -> tuple[np.ndarray, np.ndarray]:
    r = res.rollouts
    trained = np.flatnonzero(r.status == 0)
    order = trained[np.argsort(r.completion_rank[trained])]
    return r.staleness[order], r.length[order]


_MODEL_CASES = [
    {"turns": 2, "tool_latency": 50.0, "shards": 4, "capacity": 3},  # the benchmark's, scaled
    {"turns": 1, "tool_latency": 2.0, "shards": 2, "capacity": 1, "eta": 1},
    {"turns": 3, "tool_latency": 1.0, "shards": 3, "capacity": None},
    {"turns": 0, "tool_latency": 0.0, "shards": 1, "capacity": 1},
]


@pytest.mark.parametrize("case", _MODEL_CASES, ids=lambda c: f"turns{c['turns']}")
@pytest.mark.parametrize("integer", [False, True], ids=["lognormal", "ties"])
def test_the_simpy_agent_model_matches_refimpl_sample_for_sample(
    simpy_modes: ModuleType, case: dict[str, Any], integer: bool
) -> None:
    """Shared inputs (the length matrix): the same staleness and lengths in training order and the
    same end time. Integer lengths make completions, calls and publications tie often."""
    slots, batch, steps = 8, 6, 40
    rng = np.random.default_rng(11)
    cols = -(-steps * batch // slots) + 24
    if integer:
        lengths = rng.integers(1, 6, size=(slots, cols)).astype(float)
    else:
        lengths = rng.lognormal(3.0, 1.0, size=(slots, cols))
    cfg = AgentConfig(slots=slots, batch=batch, steps=steps, lengths=lengths, **case)
    res = simulate_agent(cfg)
    stale, tlen, end = simpy_modes.simulate_agent(lengths, batch, steps, **case)
    ours = _training_order(res)
    np.testing.assert_array_equal(ours[0], stale)
    np.testing.assert_array_equal(ours[1], tlen)
    assert res.summary.end_time == end


def test_the_simpy_model_comparison_rejects_a_model_whose_router_ignores_load(
    simpy_modes: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The comparison can fail: a model that sends every call to shard 0 queues differently.
    (Breaking load ties towards the last shard instead is no wrong variant: the shards are alike,
    so it relabels them and the samples are the same.)"""
    slots, batch, steps = 8, 6, 40
    lengths = np.random.default_rng(11).lognormal(3.0, 1.0, size=(slots, 60))
    case: dict[str, Any] = {"turns": 2, "tool_latency": 20.0, "shards": 3, "capacity": 1}
    cfg = AgentConfig(slots=slots, batch=batch, steps=steps, lengths=lengths, **case)
    ours = _training_order(simulate_agent(cfg))

    monkeypatch.setattr(simpy_modes, "least_loaded", lambda loads: 0)
    stale, tlen, _ = simpy_modes.simulate_agent(lengths, batch, steps, **case)
    assert not (np.array_equal(ours[0], stale) and np.array_equal(ours[1], tlen))


def test_both_engines_refuse_a_turns_draw_beyond_max_turns_alike() -> None:
    """Call counts are int16: a law drawing more than ``MAX_TURNS`` calls is refused by both
    engines with the same message (the compiled one would otherwise wrap the count around)."""
    from refimpl.sim.agent._config import MAX_TURNS

    cfg = AgentConfig(
        slots=1,
        batch=1,
        steps=1,
        lengths=st.expon(),
        turns=st.bernoulli(1.0, loc=MAX_TURNS),
    )
    reference = _outcome(cfg, "event")
    assert isinstance(reference, str)
    assert f"[0, {MAX_TURNS}]" in reference
    assert _outcome(cfg, "compiled") == reference
    ok = dataclasses.replace(cfg, turns=st.bernoulli(1.0, loc=MAX_TURNS - 1), tool_latency=0.0)
    assert not isinstance(_outcome(ok, "compiled"), str)
