"""Properties of the agentic rollout simulator (refimpl.sim.agent, issue 9).

Each property is also run against a deliberately wrong variant of the engine (monkeypatched) and must
reject it: a test that cannot fail is a defect.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import scipy.stats as st
from _peers import load_simpy_peer, shared_candidates
from hypothesis import given
from hypothesis import strategies as hst
from numpy.typing import NDArray

import refimpl
import refimpl.sim as sim
from refimpl.sim import agent
from refimpl.sim.agent import (
    AgentConfig,
    AgentResult,
    agent_config_from_args,
    agent_summary_dict,
    configure_agent_options,
    run_agent_cli,
    simulate_agent,
)
from refimpl.sim.agent import _compiled as agent_compiled

# The peer: REFIMPL_PEERS, the peer directory next to the repository, or the vendored copy
# (tests/_peers.py).
_peer_candidates = shared_candidates
_load_peer = load_simpy_peer


@pytest.fixture(scope="module")
def peer() -> ModuleType:
    return _load_peer()


def _reference_engine_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrong variant is planted in the reference engine's Python code: let ``auto`` run it."""
    monkeypatch.setattr(agent_compiled, "AVAILABLE", False)


def _training_order(res: AgentResult) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Staleness and lengths of the trained rollouts in the trainer's order (completion rank)."""
    r = res.rollouts
    trained = np.flatnonzero(r.status == 0)
    order = trained[np.argsort(r.completion_rank[trained])]
    return r.staleness[order], r.length[order]


def test_the_peer_is_found_through_refimpl_peers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A clone outside the work tree finds the peer only through REFIMPL_PEERS (it was ignored here).
    (tmp_path / "simpy_queue.py").write_text("MARK = 'the copy under REFIMPL_PEERS'\n")
    monkeypatch.setenv("REFIMPL_PEERS", str(tmp_path))
    assert _peer_candidates()[0] == tmp_path / "simpy_queue.py"
    assert _load_peer().MARK == "the copy under REFIMPL_PEERS"


def _dyadic_lengths(peer: ModuleType, slots: int, rollouts: int, seed: int) -> NDArray[np.float64]:
    """The peer's lognormal lengths rounded to multiples of 2^-6: every split into 2 or 4 equal
    segments and every sum of them is then exact in float64, so a run with zero-latency calls adds
    up to the very same event times as the plain one."""
    mat = np.asarray(peer.draw_lengths(slots, rollouts, seed), dtype=np.float64)
    return np.maximum(np.round(mat * 64.0), 1.0) / 64.0


# ---------------------------------------------------------------------------------------------
# reduction to the plain queue
# ---------------------------------------------------------------------------------------------


def _assert_equals_peer(res: AgentResult, peer_out: tuple[Any, Any, float]) -> None:
    stale, tlen, t_end = peer_out
    ours_stale, ours_len = _training_order(res)
    np.testing.assert_array_equal(ours_stale, stale)
    np.testing.assert_array_equal(ours_len, tlen)
    assert res.summary.end_time == t_end


@pytest.mark.parametrize("variant", ["store", "callback"])
@pytest.mark.parametrize(
    ("slots", "batch", "rollouts", "seed"), [(8, 16, 1600, 0), (32, 8, 1200, 7)]
)
def test_one_segment_rollouts_reduce_exactly_to_the_simpy_peer(
    peer: ModuleType, variant: str, slots: int, batch: int, rollouts: int, seed: int
) -> None:
    lengths = peer.draw_lengths(slots, rollouts, seed)
    run_peer = peer.simulate_store if variant == "store" else peer.simulate_callback
    expected = run_peer(lengths, batch, rollouts // batch)
    res = simulate_agent(
        AgentConfig(slots=slots, batch=batch, steps=rollouts // batch, lengths=lengths)
    )
    _assert_equals_peer(res, expected)


@pytest.mark.parametrize(("turns", "shards", "capacity"), [(1, 1, None), (3, 3, None), (3, 2, 16)])
def test_zero_latency_calls_on_unlimited_capacity_reduce_exactly_to_the_simpy_peer(
    peer: ModuleType, turns: int, shards: int, capacity: int | None
) -> None:
    # capacity=16 = slots: at most one call per rollout is in flight, so no shard is ever full.
    slots, batch, rollouts = 16, 16, 1600
    lengths = _dyadic_lengths(peer, slots, rollouts, seed=3)
    expected = peer.simulate_store(lengths, batch, rollouts // batch)
    res = simulate_agent(
        AgentConfig(
            slots=slots,
            batch=batch,
            steps=rollouts // batch,
            lengths=lengths,
            turns=turns,
            shards=shards,
            capacity=capacity,
        )
    )
    assert res.summary.calls_issued > 0
    assert res.summary.queued_attempts == 0
    _assert_equals_peer(res, expected)


def _plain_trace_mismatches(res: AgentResult, trace: Any) -> list[str]:
    """Compare the agent run with refimpl.sim's trace, rollout by rollout, matched by (slot, column);
    every rollout the plain simulator trained must be trained identically here."""
    r = res.rollouts
    ours = {
        (int(s), int(k)): i for i, (s, k) in enumerate(zip(r.slot, r.launch_index, strict=True))
    }
    trained = np.flatnonzero(trace.status == sim.STATUS["trained"])
    errors = []
    if int((r.status == 0).sum()) != trained.size:
        errors.append(f"{int((r.status == 0).sum())} trained here, {trained.size} in refimpl.sim")
    try:
        idx = np.array([ours[(int(trace.slot[i]), int(trace.index[i]))] for i in trained])
    except KeyError as missing:
        return [*errors, f"rollout {missing} trained by refimpl.sim was never launched here"]
    for mine, theirs in (
        ("trained_step", "step"),
        ("staleness", "staleness"),
        ("version", "launch_version"),
        ("launch_time", "launch_time"),
        ("finish_time", "finish_time"),
        ("length", "length"),
    ):
        if not np.array_equal(getattr(r, mine)[idx], getattr(trace, theirs)[trained]):
            errors.append(f"{mine} differs from refimpl.sim's {theirs}")
    if res.summary.end_time != trace.end_time:
        errors.append(f"end time {res.summary.end_time} != {trace.end_time}")
    return errors


@pytest.mark.parametrize(("turns", "shards"), [(0, 1), (3, 2)])
def test_reduces_exactly_to_refimpl_sim(peer: ModuleType, turns: int, shards: int) -> None:
    slots, batch, steps = 12, 8, 60
    lengths = _dyadic_lengths(peer, slots, steps * batch, seed=9)
    trace = sim.simulate(sim.SimConfig(slots=slots, batch=batch, steps=steps, lengths=lengths))
    res = simulate_agent(
        AgentConfig(
            slots=slots, batch=batch, steps=steps, lengths=lengths, turns=turns, shards=shards
        )
    )
    assert _plain_trace_mismatches(res, trace) == []


@pytest.mark.parametrize("eta", [0, 1])
def test_staleness_bound_with_drop_reduces_exactly_to_refimpl_sim(
    peer: ModuleType, eta: int
) -> None:
    slots, batch, steps = 16, 8, 40
    lengths = peer.draw_lengths(slots, 4 * steps * batch, 5)
    trace = sim.simulate(
        sim.SimConfig(
            slots=slots, batch=batch, steps=steps, lengths=lengths, eta=eta, over_bound="drop"
        )
    )
    res = simulate_agent(
        AgentConfig(slots=slots, batch=batch, steps=steps, lengths=lengths, eta=eta)
    )
    assert res.summary.rollouts_dropped > 0
    assert _plain_trace_mismatches(res, trace) == []
    dropped = np.flatnonzero(trace.status == sim.STATUS["dropped"])
    r = res.rollouts
    ours = {
        (int(s), int(k)): i for i, (s, k) in enumerate(zip(r.slot, r.launch_index, strict=True))
    }
    idx = np.array([ours[(int(trace.slot[i]), int(trace.index[i]))] for i in dropped])
    np.testing.assert_array_equal(r.status[idx], agent.ROLLOUT_STATUSES.index("dropped"))
    np.testing.assert_array_equal(r.staleness[idx], trace.staleness[dropped])


def test_staleness_bound_holds_with_tools() -> None:
    res = simulate_agent(dataclasses.replace(_FAULTY, eta=0))
    r = res.rollouts
    dropped = r.status == agent.ROLLOUT_STATUSES.index("dropped")
    assert res.summary.rollouts_dropped == int(dropped.sum()) > 0
    assert np.all(r.staleness[r.status == 0] == 0)
    assert np.all(r.staleness[dropped] > 0)
    assert res.summary.rollouts_trained == res.config.steps * res.config.batch


def _shift_run(peer: ModuleType) -> tuple[AgentResult, tuple[Any, Any, float]]:
    slots, batch, steps, turns, call = 16, 16, 60, 3, 12.5
    lengths = _dyadic_lengths(peer, slots, steps * batch, seed=4)
    res = simulate_agent(
        AgentConfig(
            slots=slots, batch=batch, steps=steps, lengths=lengths, turns=turns,
            tool_latency=call, shards=2,
        )
    )  # fmt: skip
    shifted = lengths + turns * call  # dyadic: every partial sum is exact in float64
    return res, peer.simulate_store(shifted, batch, steps)


def test_constant_tool_time_on_unlimited_capacity_is_a_length_shift(peer: ModuleType) -> None:
    """With unlimited capacity and constant call time c, a rollout with m calls takes
    ℓ·t_token + m·c: the plain queue on lengths ℓ + m·c, sample for sample."""
    res, (stale, tlen, t_end) = _shift_run(peer)
    ours_stale, ours_len = _training_order(res)
    np.testing.assert_array_equal(ours_stale, stale)
    np.testing.assert_array_equal(ours_len + 3 * 12.5, tlen)
    assert res.summary.end_time == t_end


def test_length_shift_rejects_calls_that_take_no_time(
    peer: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Wrong variant: the container finishes a call the instant it is admitted."""
    real = agent._Engine.admit

    def instant(self: Any, a: int, s: int, t: float) -> None:
        self.c_service[self.a_call[a]] = 0.0
        real(self, a, s, t)

    _reference_engine_only(monkeypatch)
    monkeypatch.setattr(agent._Engine, "admit", instant)
    res, expected = _shift_run(peer)
    assert res.summary.end_time != expected[2]


def test_reduction_rejects_a_version_read_after_the_bump(
    peer: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Wrong variant: the version is bumped inside the completion that fills the batch, so the slot
    that relaunches at that instant reads the new version (violates the tie rule)."""

    def bump_now(self: Any, t: float) -> None:
        self.version += 1

    _reference_engine_only(monkeypatch)
    monkeypatch.setattr(agent._Engine, "batch_full", bump_now)
    lengths = peer.draw_lengths(8, 800, 0)
    expected = peer.simulate_store(lengths, 16, 50)
    res = simulate_agent(AgentConfig(slots=8, batch=16, steps=50, lengths=lengths))
    with pytest.raises(AssertionError):
        _assert_equals_peer(res, expected)
    trace = sim.simulate(sim.SimConfig(slots=8, batch=16, steps=50, lengths=lengths))
    assert _plain_trace_mismatches(res, trace) != []


# ---------------------------------------------------------------------------------------------
# Little's law and per-shard accounting
# ---------------------------------------------------------------------------------------------


def _littles_law_errors(res: AgentResult) -> list[str]:
    """Compare, per shard, the simulator's own integral of the number in system with the sum of
    sojourn times recomputed from the attempt trace: Little's law on the sample path.

    Tolerance: the pool is empty at time 0 and at the drain time T, so on the sample path
    ∫_0^T N_s(t) dt = Σ_a (d_a − a_a) exactly (Little 1961, the finite-horizon identity), i.e.
    L̄ = λ W̄ with L̄ = area/T, λ = n/T, W̄ = Σ W/n. The only discrepancy is float rounding: the
    integral is a sum of at most E products n_k·Δt_k (E = number of state changes ≤ 4·attempts) with
    n_k ≤ N_max, each term and each partial sum carrying relative error ≤ ε = 2^-52, and every Δt or
    d−a a difference of times ≤ T (absolute error ≤ ε T). Both sides are therefore within
    E·(N_max + 1)·2ε·T of the exact value; we allow twice that (4·E·(N_max+1)·ε·T)."""
    a = res.attempts
    sh = res.shards
    t_end = res.summary.drain_time
    errors = []
    eps = float(np.finfo(np.float64).eps)
    events = 4 * max(int(a.call.size), 1)
    n_max = res.config.slots  # at most one call per rollout is in a pool
    tol = 4.0 * events * (n_max + 1) * eps * max(t_end, 1.0)
    for s in range(res.config.shards):
        mine = a.shard == s
        sojourn = float((a.depart_time[mine] - a.arrive_time[mine]).sum())
        area = float(sh.area[s])
        if not abs(area - sojourn) <= tol:
            errors.append(f"shard {s}: area {area!r} != sum of sojourns {sojourn!r} (tol {tol:g})")
        ends = sh.completed[s] + sh.crashed[s] + sh.timed_out[s] + sh.redirected[s]
        if ends != sh.arrivals[s]:
            errors.append(f"shard {s}: {sh.arrivals[s]} arrivals but {ends} ends")
    return errors


_FAULTY = AgentConfig(
    slots=24,
    batch=24,
    steps=12,
    lengths=st.lognorm(s=1.0, scale=30.0),
    turns=st.poisson(3.0),
    tool_latency=st.expon(scale=15.0),
    shards=3,
    capacity=3,
    refresh=10.0,
    cold_start=3.0,
    warm_start=0.5,
    keepalive=50.0,
    crash_rate=0.01,
    timeout=60.0,
    max_attempts=2,
    retry_delay=1.0,
    replay_cost=0.25,
    seed=11,
)


@given(
    shards=hst.integers(1, 4),
    capacity=hst.integers(1, 4),
    admission=hst.sampled_from(agent.ADMISSION_POLICIES),
    refresh=hst.sampled_from([0.0, 2.0, 25.0]),
    crash_rate=hst.sampled_from([0.0, 0.02]),
    timeout=hst.sampled_from([None, 40.0]),
    seed=hst.integers(0, 2**16),
)
def test_littles_law_holds_on_every_shard(
    shards: int,
    capacity: int,
    admission: str,
    refresh: float,
    crash_rate: float,
    timeout: float | None,
    seed: int,
) -> None:
    cfg = dataclasses.replace(
        _FAULTY,
        slots=12,
        batch=12,
        steps=5,
        shards=shards,
        capacity=capacity,
        admission=admission,
        max_redirects=None if admission == "redirect" else 0,
        refresh=refresh,
        crash_rate=crash_rate,
        timeout=timeout,
        seed=seed,
    )
    res = simulate_agent(cfg)
    # area_s = Σ W over shard s is L̄_s·T = (λ_s T)·W̄_s: Little's law times the horizon T
    assert _littles_law_errors(res) == []
    assert np.all(res.shards.area >= 0)


def test_littles_law_rejects_a_pool_that_counts_only_busy_containers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Wrong variant: the shard integrates only its busy containers as "in system" (queued attempts
    forgotten), a utilisation/occupancy mix-up."""

    def busy_only(self: Any, s: int, t: float) -> None:
        dt = t - self.last_t[s]
        self.s_area[s] += self.s_busy[s] * dt
        self.s_busy_area[s] += self.s_busy[s] * dt
        self.last_t[s] = t

    _reference_engine_only(monkeypatch)
    monkeypatch.setattr(agent._Engine, "touch", busy_only)
    res = simulate_agent(_FAULTY)
    assert res.summary.queued_attempts > 0
    assert _littles_law_errors(res) != []


# ---------------------------------------------------------------------------------------------
# no call is lost under faults
# ---------------------------------------------------------------------------------------------


def _call_accounting_errors(res: AgentResult) -> list[str]:
    """Every call id ends once, completed or failed, consistently with its attempts."""
    c, a, s = res.calls, res.attempts, res.summary
    errors = []
    if s.calls_issued != s.calls_completed + s.calls_failed:
        errors.append(
            f"issued {s.calls_issued} != completed {s.calls_completed} + failed {s.calls_failed}"
        )
    bad = np.flatnonzero((c.status != 0) & (c.status != 1))
    if bad.size:
        errors.append(f"{bad.size} calls with no final status, first id {int(bad[0])}")
    per_call = np.bincount(a.call, minlength=c.status.size)
    if not np.array_equal(per_call, c.attempts):
        errors.append("attempt trace disagrees with the calls' attempt counts")
    order = np.lexsort((a.number, a.call))
    last = np.ones(order.size, dtype=bool)
    last[:-1] = a.call[order][1:] != a.call[order][:-1]
    final = order[last]  # each call's last attempt, by call id
    if final.size == c.status.size:
        done = c.status == 0
        if not np.all(a.outcome[final][done] == 0) or np.any(a.outcome[final][~done] == 0):
            errors.append("a call's status disagrees with its last attempt's outcome")
        if not np.array_equal(a.depart_time[final], c.end_time):
            errors.append("a call's end time is not its last attempt's departure")
        earlier = np.ones(a.call.size, dtype=bool)
        earlier[final] = False
        if np.any(a.outcome[earlier] == 0):
            errors.append("a call completed and was retried anyway")
        if np.any(c.attempts[~done] != res.config.max_attempts):
            errors.append("a call failed before exhausting its attempts")
    else:
        errors.append("some call has no attempt")
    r = res.rollouts
    if np.any(np.isnan(r.finish_time)):
        errors.append("a rollout never finished (the run must drain)")
    per_rollout = np.bincount(c.rollout, minlength=r.calls.size)
    full = r.status != agent.ROLLOUT_STATUSES.index("aborted")
    if not np.array_equal(per_rollout[full], r.calls[full]):
        errors.append("a finished rollout issued a different number of calls than it planned")
    return errors


@pytest.mark.parametrize("on_failure", agent.FAILURE_ACTIONS)
@pytest.mark.parametrize("recovery", agent.RECOVERY_MODES)
def test_no_call_disappears_under_injected_faults(on_failure: str, recovery: str) -> None:
    cfg = dataclasses.replace(
        _FAULTY, crash_rate=0.03, on_failure=on_failure, recovery=recovery, admission="redirect"
    )
    res = simulate_agent(cfg)
    s = res.summary
    assert s.crashes > 0
    assert s.timeouts > 0
    assert s.calls_failed > 0
    assert s.calls_completed > 0
    assert _call_accounting_errors(res) == []
    assert _littles_law_errors(res) == []
    if on_failure == "abort":
        assert s.rollouts_aborted > 0
    # a retry restores the trajectory: replay costs replay_cost per earlier call, re-execution
    # the earlier calls' service times
    a, c = res.attempts, res.calls
    retry = a.number > 1
    if recovery == "replay":
        np.testing.assert_array_equal(
            a.recovery_cost[retry], cfg.replay_cost * c.turn[a.call[retry]]
        )
    else:
        for i in np.flatnonzero(retry)[:50]:
            call = a.call[i]
            same = (c.rollout == c.rollout[call]) & (c.turn < c.turn[call])
            assert a.recovery_cost[i] == pytest.approx(c.service[same].sum(), rel=1e-12)
    assert np.all(a.recovery_cost[~retry] == 0.0)


def test_call_accounting_rejects_a_retry_that_drops_the_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Wrong variant: a call whose attempts are exhausted is silently dropped (the rollout goes on
    as if nothing happened, no failure is reported)."""

    def drop(self: Any, c: int, t: float) -> None:
        if self.c_attempts[c] < self.cfg.max_attempts:
            self.push(t + self.cfg.retry_delay, agent._PRIO_EVENT, agent._RETRY, c)
        else:
            r = self.c_rollout[c]
            self.push(t + self.r_seg[r], agent._PRIO_EVENT, agent._SEG_END, r)

    _reference_engine_only(monkeypatch)
    monkeypatch.setattr(agent._Engine, "retry_or_fail", drop)
    res = simulate_agent(dataclasses.replace(_FAULTY, crash_rate=0.03))
    assert _call_accounting_errors(res) != []


# ---------------------------------------------------------------------------------------------
# a consistent view queues no longer than a stale one
# ---------------------------------------------------------------------------------------------

_ROUTING = AgentConfig(
    slots=32,
    batch=32,
    steps=6,
    lengths=st.lognorm(s=0.5, scale=20.0),
    turns=4,
    tool_latency=st.expon(scale=10.0),
    shards=4,
    capacity=4,
)
_SEEDS = range(12)
_STALE_REFRESH = 5.0
# Threshold. For seed i let D_i = W_i(δ) − W_i(0), the difference of the mean queue wait per attempt
# between a stale view (δ = 5, half a mean service time) and a consistent one, on the same seed
# (common random numbers: every law has its own stream, so both runs see the same lengths, turns and
# service times in the same order). The property is E[D] >= 0. Each D_i is an average over ~800
# attempts, so it is close to normal (CLT); the D_i are independent across seeds. The one-sided
# paired t-test rejects when t = mean(D) / (sd(D)/√n) < −t_{1−α}(n−1). At the boundary E[D] = 0 it
# rejects with probability α; for E[D] > 0 less often. With α = 10^-3 and n = 12 the false-failure
# rate of this test, over a random choice of seeds, is at most 10^-3 (nominal: it rests on the
# approximate normality of the D_i; on these seeds t ≈ +29, far from the threshold -4.02).
# The power half (stale queues strictly longer) is the mirror test of H0: E[D] <= 0 at the same α:
# it claims that this configuration herds, and fails if the effect vanished (as with a router that
# ignores load, see below).
_ALPHA = 1e-3
_T_CRIT = float(st.t.ppf(1.0 - _ALPHA, df=len(_SEEDS) - 1))


def _consistent_vs_stale_t() -> float:
    diffs = []
    for seed in _SEEDS:
        cons = simulate_agent(dataclasses.replace(_ROUTING, refresh=0.0, seed=seed))
        stale = simulate_agent(dataclasses.replace(_ROUTING, refresh=_STALE_REFRESH, seed=seed))
        diffs.append(stale.summary.queue_wait_mean - cons.summary.queue_wait_mean)
    d = np.asarray(diffs)
    sd = float(d.std(ddof=1))
    if sd == 0.0:
        return 0.0 if float(d.mean()) == 0.0 else math.copysign(math.inf, float(d.mean()))
    return float(d.mean() / (sd / math.sqrt(d.size)))


def test_consistent_view_queues_no_longer_than_a_stale_one() -> None:
    t = _consistent_vs_stale_t()
    assert t >= -_T_CRIT, f"consistent view queued longer: paired t = {t:.2f} < {-_T_CRIT:.2f}"
    # and the stale view does herd (power: the difference is detected, not just not reversed)
    assert t > _T_CRIT


def test_view_property_rejects_a_zero_period_read_as_never_refresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Wrong variant: ``refresh = 0`` taken as "no refresh events" instead of "always exact": the
    router keeps the empty snapshot of time 0 and sends every call to shard 0."""
    _reference_engine_only(monkeypatch)
    monkeypatch.setattr(agent._Engine, "loads", lambda self: self.view)
    assert _consistent_vs_stale_t() < -_T_CRIT


def test_herding_check_rejects_a_router_that_ignores_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """Wrong variant: the router always picks the first allowed shard; the view then does not matter
    and the power half of the view test (stale queues strictly longer) fails."""
    _reference_engine_only(monkeypatch)
    monkeypatch.setattr(agent._pool, "_least_loaded", lambda loads, allowed: allowed[0])
    assert not _consistent_vs_stale_t() > _T_CRIT


# ---------------------------------------------------------------------------------------------
# smaller properties
# ---------------------------------------------------------------------------------------------


def test_redirect_equals_queue_under_a_consistent_view() -> None:
    """With δ = 0 the router's choice is full only when every shard is full, so local admission with
    redirection has nowhere to send an attempt: the run is the queueing run, event for event."""
    q = simulate_agent(dataclasses.replace(_ROUTING, refresh=0.0, seed=4))
    r = simulate_agent(dataclasses.replace(_ROUTING, refresh=0.0, admission="redirect", seed=4))
    assert q.summary.queued_attempts > 0
    assert r.summary.redirected_attempts == 0
    for x, y in zip(q.attempts, r.attempts, strict=True):
        np.testing.assert_array_equal(x, y)
    stale_q = simulate_agent(dataclasses.replace(_ROUTING, refresh=20.0, seed=4))
    stale_r = simulate_agent(
        dataclasses.replace(_ROUTING, refresh=20.0, admission="redirect", seed=4)
    )
    assert stale_r.summary.redirected_attempts > 0
    assert stale_r.summary.queue_wait_mean < stale_q.summary.queue_wait_mean


def test_seeded_runs_reproduce_exactly() -> None:
    a = simulate_agent(_FAULTY)
    b = simulate_agent(_FAULTY)
    c = simulate_agent(dataclasses.replace(_FAULTY, seed=12))
    for name in ("rollouts", "calls", "attempts", "shards"):
        for x, y in zip(getattr(a, name), getattr(b, name), strict=True):
            np.testing.assert_array_equal(x, y)
    assert a.summary == b.summary
    assert not np.array_equal(a.calls.service[:10], c.calls.service[:10])


def test_constant_tool_latency_on_unlimited_capacity_adds_exactly_the_call_time() -> None:
    cfg = AgentConfig(
        slots=6,
        batch=6,
        steps=4,
        lengths=st.expon(scale=10.0),
        turns=st.poisson(2.0),
        tool_latency=2.5,
        shards=2,
        seed=5,
    )
    res = simulate_agent(cfg)
    r = res.rollouts
    np.testing.assert_allclose(r.finish_time - r.launch_time, r.length + 2.5 * r.calls, rtol=1e-12)
    np.testing.assert_allclose(r.tool_time, 2.5 * r.calls, rtol=1e-12)
    assert res.summary.tool_wait_share == pytest.approx(0.0, abs=1e-12)
    assert res.summary.queued_attempts == 0


def test_every_container_starts_cold_once_without_faults_or_expiry() -> None:
    res = simulate_agent(
        dataclasses.replace(_FAULTY, crash_rate=0.0, timeout=None, keepalive=math.inf)
    )
    np.testing.assert_array_equal(res.shards.cold_starts, res.shards.containers)
    assert np.all(res.shards.containers <= 3)
    assert np.all((res.shards.utilisation > 0) & (res.shards.utilisation <= 1))


def test_slots_stay_busy_while_waiting_for_tools() -> None:
    """A slot holds its rollout through the tool calls: a slot's rollouts never overlap in time and
    each relaunch happens at the previous rollout's finish (or abort)."""
    res = simulate_agent(dataclasses.replace(_FAULTY, on_failure="abort", crash_rate=0.03))
    r = res.rollouts
    for slot in range(res.config.slots):
        mine = np.flatnonzero(r.slot == slot)
        mine = mine[np.argsort(r.launch_index[mine])]
        np.testing.assert_array_equal(r.launch_time[mine][1:], r.finish_time[mine][:-1])


def test_staleness_is_step_minus_launch_version() -> None:
    res = simulate_agent(_FAULTY)
    r = res.rollouts
    trained = r.status == 0
    assert trained.sum() == res.config.steps * res.config.batch
    np.testing.assert_array_equal(
        r.staleness[trained], r.trained_step[trained] - r.version[trained]
    )
    np.testing.assert_array_equal(
        r.trained_step[trained], r.completion_rank[trained] // res.config.batch
    )
    assert np.all(r.staleness[trained] >= 0)


def _publication_times(res: AgentResult) -> NDArray[np.float64]:
    """Version j+1 is published when the last rollout trained at step j finishes."""
    r = res.rollouts
    trained = r.status == 0
    return np.array(
        [r.finish_time[trained & (r.trained_step == j)].max() for j in range(res.config.steps)]
    )


def _launch_version_mismatches(res: AgentResult) -> int:
    """Launch versions against refimpl.policy_version (conventions §tie-rule) at the publication times."""
    r = res.rollouts
    expected = refimpl.policy_version(r.launch_time, publish_times=_publication_times(res))
    return int(np.sum(expected != r.version))


def test_launch_versions_follow_the_tie_rule() -> None:
    # integer lengths and latencies: many launches coincide with a publication
    cfg = dataclasses.replace(
        _FAULTY, lengths=st.randint(1, 20), tool_latency=st.randint(0, 5), crash_rate=0.0
    )
    res = simulate_agent(cfg)
    assert _launch_version_mismatches(res) == 0
    assert _launch_version_mismatches(simulate_agent(_FAULTY)) == 0


def test_tie_rule_check_rejects_a_version_read_after_the_bump(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def bump_now(self: Any, t: float) -> None:
        self.version += 1

    _reference_engine_only(monkeypatch)
    monkeypatch.setattr(agent._Engine, "batch_full", bump_now)
    cfg = dataclasses.replace(_FAULTY, lengths=st.randint(1, 20), crash_rate=0.0)
    assert _launch_version_mismatches(simulate_agent(cfg)) > 0


def _in_flight_staleness_counts(res: AgentResult) -> NDArray[np.int64]:
    """count_k = #{trained i : j_i > k, launch_i <= T_k}: the rollouts held by slots at the k-th
    publication that are trained later. By the tie rule v_i = #{k : T_k < launch_i}, so
    s_i = j_i − v_i = #{k < j_i : T_k >= launch_i} and Σ_i s_i = Σ_k count_k exactly."""
    r = res.rollouts
    trained = r.status == 0
    pub = _publication_times(res)
    return np.array(
        [
            int(np.sum(trained & (r.trained_step > k) & (r.launch_time <= pub[k])))
            for k in range(res.config.steps)
        ]
    )


@pytest.mark.parametrize(
    "cfg",
    [
        _FAULTY,
        dataclasses.replace(_FAULTY, on_failure="abort", crash_rate=0.03, seed=5),
        dataclasses.replace(_ROUTING, refresh=10.0, seed=1),
        AgentConfig(slots=40, batch=8, steps=30, lengths=st.lognorm(s=1.0, scale=20.0), seed=2),
        dataclasses.replace(_FAULTY, eta=1, seed=3),
    ],
    ids=["faulty", "abort", "stale-routing", "plain", "eta-drop"],
)
def test_mean_staleness_is_slots_in_flight_per_batch(cfg: AgentConfig) -> None:
    """Little's law on the slots, on the sample path: every slot holds one rollout at each
    publication, so count_k <= N and mean staleness <= (N/B)·(steps − 1)/steps, tool calls or not
    (the E[s] = N/B of conventions §async-dispatch is the limit of long runs). Exact integer identities, no tolerance."""
    res = simulate_agent(cfg)
    counts = _in_flight_staleness_counts(res)
    trained = res.rollouts.status == 0
    assert int(res.rollouts.staleness[trained].sum()) == int(counts.sum())
    assert counts[-1] == 0
    assert np.all(counts <= cfg.slots)
    assert res.summary.staleness_mean <= cfg.slots / cfg.batch * (cfg.steps - 1) / cfg.steps


def test_staleness_identity_rejects_an_off_by_one_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """Wrong variant: the launch records the version one step too old (v − 1 once a step is
    published), the off-by-one that inflates staleness and over-masks (conventions §masks-and-weights)."""
    real = agent._Engine.launch

    def late(self: Any, slot: int, t: float) -> None:
        real(self, slot, t)
        if self.version > 0:
            self.r_version[-1] = self.version - 1

    _reference_engine_only(monkeypatch)
    monkeypatch.setattr(agent._Engine, "launch", late)
    res = simulate_agent(_FAULTY)
    trained = res.rollouts.status == 0
    counts = _in_flight_staleness_counts(res)
    assert int(res.rollouts.staleness[trained].sum()) != int(counts.sum())


# ---------------------------------------------------------------------------------------------
# command line and bad calls
# ---------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    configure_agent_options(p, standalone=True)
    return p


def test_cli_functions_run_a_configured_simulation(tmp_path: Path, peer: ModuleType) -> None:
    p = _parser()
    assert agent_config_from_args(p.parse_args(["--slots", "4"])) is None
    args = p.parse_args(
        [
            "--slots",
            "8",
            "--batch",
            "8",
            "--rollouts",
            "64",
            "--seed",
            "2",
            "--tool-turns",
            "poisson:mu=2",
            "--tool-latency",
            "expon:scale=20",
            "--tool-shards",
            "2",
            "--tool-capacity",
            "2",
            "--tool-crash-rate",
            "0.01",
            "--tool-timeout",
            "100",
            "--agent-lengths",
            "lognorm:s=1,scale=50",
        ]
    )
    cfg = agent_config_from_args(args)
    assert cfg is not None
    assert (cfg.steps, cfg.shards) == (8, 2)
    seen: list[int] = []
    out = run_agent_cli(cfg, trace=tmp_path / "trace", progress=seen.append)
    assert seen == list(range(1, cfg.steps + 1))
    assert (tmp_path / "trace" / "attempts.parquet").is_file()
    text = json.dumps(out, allow_nan=False)
    for key in ("rollouts_per_s", "staleness_mean", "staleness_hist", "length_mean"):
        assert key in json.loads(text)
    assert out["calls_issued"] == out["calls_completed"] + out["calls_failed"]
    # --lengths-npy: the plain simulator's N × K matrix
    lengths = peer.draw_lengths(8, 64, 0)
    path = tmp_path / "lengths.npy"
    np.save(path, lengths)
    cfg2 = agent_config_from_args(
        p.parse_args(
            [
                "--slots",
                "8",
                "--batch",
                "8",
                "--rollouts",
                "64",
                "--tool-turns",
                "0",
                "--lengths-npy",
                str(path),
            ]
        )
    )
    assert cfg2 is not None
    res = simulate_agent(cfg2)
    _assert_equals_peer(res, peer.simulate_store(lengths, 8, 8))
    assert agent_summary_dict(res)["utilisation"] is None
    # --lengths-pmf (lengths 1..M) and --steps; the default law is lognormal(--mu, --sigma)
    cfg3 = agent_config_from_args(
        p.parse_args(["--steps", "3", "--batch", "4", "--slots", "4", "--tool-turns", "1",
                      "--lengths-pmf", "0.5,0,0.5"])
    )  # fmt: skip
    assert cfg3 is not None
    assert cfg3.steps == 3
    assert set(simulate_agent(cfg3).rollouts.length.tolist()) <= {1.0, 3.0}
    cfg4 = agent_config_from_args(
        p.parse_args(["--tool-turns", "0", "--mu", "2", "--sigma", "0.5"])
    )
    assert cfg4 is not None
    assert cfg4.steps == 100_000 // 512
    assert cfg4.lengths.mean() == pytest.approx(np.exp(2 + 0.125))
    assert cfg4.eta is None
    cfg5 = agent_config_from_args(
        p.parse_args(["--tool-turns", "1", "--eta", "2", "--over-bound", "drop"])
    )
    assert cfg5 is not None
    assert cfg5.eta == 2


def test_traces_export_to_parquet(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    res = simulate_agent(dataclasses.replace(_FAULTY, on_failure="abort", crash_rate=0.03))
    res.to_parquet(tmp_path / "run")
    calls = pq.read_table(tmp_path / "run" / "calls.parquet")
    assert calls.num_rows == res.summary.calls_issued
    assert set(calls.column("status_name").to_pylist()) == {"completed", "failed"}
    rollouts = pq.read_table(tmp_path / "run" / "rollouts.parquet")
    np.testing.assert_array_equal(rollouts.column("staleness").to_numpy(), res.rollouts.staleness)
    assert "aborted" in set(rollouts.column("status_name").to_pylist())
    assert pq.read_table(tmp_path / "run" / "shards.parquet").num_rows == res.config.shards


BAD_CALLS: list[tuple[str, Callable[[], Any], type[Exception], str]] = [
    (
        "slots",
        lambda: AgentConfig(slots=0, batch=1, steps=1, lengths=st.expon()),
        ValueError,
        r"slots must be >= 1 .*got slots=0",
    ),
    (
        "lengths-missing",
        lambda: AgentConfig(slots=1, batch=1, steps=1, lengths=None),
        ValueError,
        r"lengths must be given .*scipy.stats.lognorm",
    ),
    (
        "lengths-rows",
        lambda: AgentConfig(slots=2, batch=1, steps=1, lengths=np.ones((3, 4))),
        ValueError,
        r"(?s)lengths must have one row per slot \(slots=2\).*shape \(2, K\)",
    ),
    (
        "lengths-short",
        lambda: AgentConfig(slots=2, batch=4, steps=4, lengths=np.ones((2, 3))),
        ValueError,
        r"at least ceil\(steps·batch/slots\) = 8 columns",
    ),
    (
        "lengths-negative-law",
        lambda: AgentConfig(slots=1, batch=1, steps=1, lengths=st.norm()),
        ValueError,
        r"lengths must be supported on \[0, inf\)",
    ),
    (
        "lengths-zero-mass",
        lambda: AgentConfig(slots=1, batch=1, steps=1, lengths=st.poisson(3.0)),
        ValueError,
        r"lengths must put no mass on 0 tokens .*poisson\(mu, loc=1\)",
    ),
    (
        "turns-continuous",
        lambda: AgentConfig(slots=1, batch=1, steps=1, lengths=st.expon(), turns=st.expon()),
        TypeError,
        r"turns must be an int or a frozen discrete scipy.stats law",
    ),
    (
        "capacity",
        lambda: AgentConfig(slots=1, batch=1, steps=1, lengths=st.expon(), capacity=0),
        ValueError,
        r"capacity must be >= 1 \(containers per shard\)",
    ),
    (
        "admission",
        lambda: AgentConfig(slots=1, batch=1, steps=1, lengths=st.expon(), admission="drop"),
        ValueError,
        r"admission must be one of 'queue', 'redirect'",
    ),
    (
        "timeout",
        lambda: AgentConfig(slots=1, batch=1, steps=1, lengths=st.expon(), timeout=0.0),
        ValueError,
        r"timeout must be > 0",
    ),
    (
        "tool-latency",
        lambda: AgentConfig(slots=1, batch=1, steps=1, lengths=st.expon(), tool_latency="slow"),
        TypeError,
        r"tool_latency must be a number >= 0 or a frozen scipy.stats law",
    ),
    (
        "max-attempts",
        lambda: AgentConfig(slots=1, batch=1, steps=1, lengths=st.expon(), max_attempts=0),
        ValueError,
        r"max_attempts must be >= 1",
    ),
    (
        "config-type",
        lambda: simulate_agent({"slots": 1}),  # type: ignore[arg-type]
        TypeError,
        r"config must be an AgentConfig",
    ),
    (
        "cli-law",
        lambda: agent_config_from_args(
            _parser().parse_args(["--tool-turns", "1", "--tool-latency", "nolaw:x=1"])
        ),
        ValueError,
        r"--tool-latency must name a scipy.stats distribution",
    ),
    (
        "cli-params",
        lambda: agent_config_from_args(
            _parser().parse_args(["--tool-turns", "1", "--tool-latency", "expon:scale"])
        ),
        ValueError,
        r"--tool-latency must give parameters as KEY=NUMBER",
    ),
    (
        "cli-turns-integer",  # 2.5 is a number: the rule broken is "an integer"
        lambda: agent_config_from_args(_parser().parse_args(["--tool-turns", "2.5"])),
        ValueError,
        r"--tool-turns must be an integer or NAME:KEY=VALUE",
    ),
    (
        "cli-npy-missing",  # was a bare FileNotFoundError naming no option
        lambda: agent_config_from_args(
            _parser().parse_args(["--tool-turns", "1", "--lengths-npy", "/nonexistent/x.npy"])
        ),
        ValueError,
        r"--lengths-npy must name a \.npy file.*'/nonexistent/x\.npy', which cannot be read",
    ),
    (
        "cli-pmf-text",  # was numpy's "could not convert string to float: 'a'"
        lambda: agent_config_from_args(
            _parser().parse_args(["--tool-turns", "1", "--lengths-pmf", "0.5,a"])
        ),
        ValueError,
        r"--lengths-pmf must be comma-separated probabilities.*'0\.5,a', whose entry 2",
    ),
]


@pytest.mark.parametrize(
    ("call", "error", "match"), [c[1:] for c in BAD_CALLS], ids=[c[0] for c in BAD_CALLS]
)
def test_bad_config_says_what_to_change(
    call: Callable[[], Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        call()


def test_a_run_where_every_rollout_aborts_stops_with_advice() -> None:
    cfg = AgentConfig(
        slots=2,
        batch=2,
        steps=1,
        lengths=st.expon(),
        turns=1,
        tool_latency=5.0,
        timeout=1.0,
        max_attempts=1,
        on_failure="abort",
    )
    with pytest.raises(ValueError, match=r"raise timeout or max_attempts"):
        simulate_agent(cfg)


def test_drain_time_is_the_last_real_event_not_a_stale_timeout() -> None:
    cfg = dataclasses.replace(_FAULTY, timeout=1e6, crash_rate=0.0)
    res = simulate_agent(cfg)
    assert res.summary.drain_time == max(
        float(np.nanmax(res.rollouts.finish_time)), float(np.nanmax(res.attempts.depart_time))
    )


def test_length_matrix_that_runs_out_says_how_many_columns_were_needed() -> None:
    cfg = AgentConfig(
        slots=2,
        batch=2,
        steps=2,
        lengths=np.array([[1000.0, 1.0, 1.0], [1.0, 1.0, 1.0]]),
        turns=1,
        tool_latency=1.0,
    )
    with pytest.raises(ValueError, match=r"slot 1 needed launch 4 but lengths has 3 columns"):
        simulate_agent(cfg)


@pytest.mark.parametrize("chunk", [7, 1 << 18])
def test_the_length_ks_over_the_launched_points_is_the_sup_over_every_point(
    chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The summary's Kolmogorov distance evaluates only the launched lengths (the trained ones are
    among them): the same value as the sup over both samples' points, computed directly. It works
    through the lengths in chunks; chunks of 7 put tied values across their boundaries."""
    from refimpl.sim.agent import _results
    from refimpl.sim.agent._results import _length_ks

    monkeypatch.setattr(_results, "_CHUNK", chunk)
    rng = np.random.default_rng(5)
    for n in (1, 2, 7, 8, 15, 200, 3000):
        y = np.round(rng.lognormal(2.0, 1.0, n))
        trained = rng.random(n) < 0.6
        trained[0] = True
        x = y[trained]
        points = np.concatenate([x, y])
        direct = max(abs(float(np.mean(x <= p)) - float(np.mean(y <= p))) for p in points)
        assert _length_ks(x.copy(), y[~trained]) == pytest.approx(direct, abs=1e-15)
