"""The engine mode's limits and agreement: with unbounded memory and a constant step it is the slot
mode exactly; its compiled loop is its plain-Python loop, bit for bit; Little's law holds on its runs.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import numpy as np
import pytest
import scipy.stats
from _wrong_variants import rejects, run_property
from hypothesis import given, note, settings
from hypothesis import strategies as st

from refimpl.sim import SimConfig, SimTrace, simulate, simulate_engine
from refimpl.sim.engine import EngineModel, EngineRun
from refimpl.sim.engine import _loop as engine_loop

_FIELDS = (*SimTrace.COLUMNS, "segment_offsets", "segment_tokens", "segment_versions")


def _same(a: SimTrace, b: SimTrace) -> list[str]:
    bad = [c for c in _FIELDS if not np.array_equal(getattr(a, c), getattr(b, c), equal_nan=True)]
    bad += [c for c in ("publish_times",) if not np.array_equal(a.publish_times, b.publish_times)]
    bad += [c for c in ("end_time", "generator_busy", "trainer_busy") if getattr(a, c) != getattr(b, c)]  # fmt: skip
    return bad


@st.composite
def slot_runs(draw: st.DrawFn) -> dict[str, Any]:
    slots = draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**16))
    lengths = np.ceil(np.random.default_rng(seed).lognormal(1.0, 1.0, size=(slots, 300)))
    token_time = draw(st.sampled_from([1.0, 0.5, 0.25, 2.0]))
    partial = draw(st.sampled_from(["none", "restart", "recompute", "keep_kv"]))
    # An engine step runs under the weights it started with, where a slot's rollout changes weights
    # mid-token: with a partial policy they agree when publications fall on step boundaries (a
    # trainer time of whole steps); without one, at any trainer time.
    if partial == "none":
        trainer_time = draw(st.sampled_from([0.0, 1.0, 2.5, 3.0]))
    else:
        trainer_time = token_time * draw(st.sampled_from([0, 1, 3]))
    return {
        "slots": slots,
        "batch": draw(st.integers(1, 8)),
        "steps": draw(st.integers(1, 6)),
        "lengths": lengths,
        "token_time": token_time,
        "trainer_time": trainer_time,
        "partial": partial,
    }


def check_slot_limit(kw: dict[str, Any], model: EngineModel) -> None:
    """The engine mode with ``model`` gives the slot mode's trace, column for column."""
    plain = simulate(SimConfig(**kw), engine="event")
    engine = simulate_engine(SimConfig(engine_model=model, **kw), engine="event").trace
    assert _same(plain, engine) == []


_UNBOUNDED = EngineModel()  # no KV budget, constant step token_time, no prompt


@settings(max_examples=60, deadline=None)
@given(slot_runs())
def test_unbounded_memory_and_a_constant_step_is_the_slot_mode(kw: dict[str, Any]) -> None:
    note(repr({k: v for k, v in kw.items() if k != "lengths"}))
    check_slot_limit(kw, _UNBOUNDED)


def test_the_limit_rejects_an_engine_short_of_memory() -> None:
    # the wrong variant: 3 blocks of 16 tokens, so sequences queue for memory and are preempted
    tight = EngineModel(layers=1, kv_heads=1, head_dim=1, dtype_bytes=1, kv_memory_bytes=96, watermark=0.0)  # fmt: skip
    kw = {"slots": 4, "batch": 4, "steps": 3, "lengths": np.full((4, 40), 20.0)}
    run_property(lambda: check_slot_limit(kw, _UNBOUNDED))
    rejects(check_slot_limit, kw, tight)


def test_the_limit_holds_with_a_random_trainer_time() -> None:
    kw: dict[str, Any] = {"slots": 3, "batch": 4, "steps": 5, "seed": 7, "lognormal_mu": 2.0}
    kw["trainer_time"] = scipy.stats.expon(scale=4.0)
    kw["lengths"] = np.ceil(np.random.default_rng(1).lognormal(2.0, 1.0, size=(3, 50)))
    check_slot_limit(kw, _UNBOUNDED)


# --- the compiled loop is the reference loop ------------------------------------------------------
@st.composite
def engine_runs(draw: st.DrawFn, *, constant_step: bool = False) -> SimConfig:
    """Small engine runs of every kind; ``constant_step``: every step takes ``token_time`` (no
    prefill or swap time) and publications fall on step boundaries (trainer time 0)."""
    bs = draw(st.sampled_from([1, 2, 4, 16]))
    blocks = draw(st.one_of(st.none(), st.integers(8, 200)))
    model = EngineModel(
        layers=1, kv_heads=1, head_dim=1, dtype_bytes=1, block_size=bs,
        kv_memory_bytes=None if blocks is None else blocks * bs * 2,
        watermark=draw(st.sampled_from([0.0, 0.01, 0.1])),
        prompt_tokens=draw(st.integers(0, 20)),
        group_size=draw(st.integers(1, 4)),
        prefix_sharing=draw(st.booleans()),
        prompts=draw(st.one_of(st.none(), st.integers(1, 5))),
        preemption="recompute" if constant_step else draw(st.sampled_from(["recompute", "swap"])),
        prefill_token_time=0.0 if constant_step else draw(st.sampled_from([0.0, 0.01])),
        swap_bandwidth=draw(st.sampled_from([1.0, 100.0])),
    )  # fmt: skip
    return SimConfig(
        slots=draw(st.integers(1, 8)),
        batch=draw(st.integers(1, 8)),
        steps=draw(st.integers(1, 5)),
        lognormal_mu=2.0,
        seed=draw(st.integers(0, 100)),
        trainer_time=0.0 if constant_step else draw(st.sampled_from([0.0, 1.5, 7.0])),
        partial=draw(st.sampled_from(["none", "restart", "recompute", "keep_kv"])),
        engine_model=model,
    )


def _run_or_stuck(cfg: SimConfig, engine: str) -> EngineRun | None:
    """The run, or ``None`` when a sequence outgrows the budget (the engine refuses to go on)."""
    try:
        return simulate_engine(cfg, engine=cast(Any, engine))
    except RuntimeError as err:
        if "cannot make progress" not in str(err):
            raise
        return None


def event_loop_run(cfg: SimConfig, **patched: Any) -> EngineRun | None:
    """The loop in plain Python with attributes of ``refimpl.sim.engine._loop`` replaced (a
    constant or a loop function), or ``None`` when a sequence outgrows the budget."""
    with pytest.MonkeyPatch.context() as m:
        for name, value in patched.items():
            m.setattr(engine_loop, name, value)
        return _run_or_stuck(cfg, "event")


def assert_same_outcome(a: EngineRun | None, b: EngineRun | None) -> None:
    """Both stuck, or the same trace and statistics bit for bit."""
    assert (a is None) == (b is None)
    if a is None or b is None:
        return
    assert _same(a.trace, b.trace) == []
    assert a.stats == b.stats


def check_compiled_is_reference(cfg: SimConfig, flip: bool = False) -> None:
    a = _run_or_stuck(cfg, "event")
    b = _run_or_stuck(cfg, "compiled")
    assert (a is None) == (b is None)
    if a is None or b is None:
        return
    tb = b.trace
    if flip:  # the wrong variant: a compiled loop that lost the order of completions at a tie
        tb = dataclasses.replace(tb, rank=tb.rank[::-1].copy())
    assert _same(a.trace, tb) == []
    assert a.stats == b.stats


@settings(max_examples=80, deadline=None)
@given(engine_runs())
def test_the_compiled_loop_is_the_reference_loop(cfg: SimConfig) -> None:
    note(repr(cfg))
    check_compiled_is_reference(cfg)


def test_the_agreement_check_rejects_a_different_order() -> None:
    model = EngineModel(layers=1, kv_heads=1, head_dim=1, dtype_bytes=1, kv_memory_bytes=640)
    cfg = SimConfig(slots=4, batch=4, steps=3, seed=1, lognormal_mu=2.0, engine_model=model)
    check_compiled_is_reference(cfg)
    rejects(check_compiled_is_reference, cfg, True)


# --- Little's law ---------------------------------------------------------------------------------
def check_littles_law(cfg: SimConfig, sojourn: str = "all") -> None:
    r"""On a run whose publications fall on step boundaries (trainer time 0), the time-average of
    the sequences running, :math:`L = \sum_k b_k \Delta t_k / T`, equals the launch rate times the
    mean time each launched rollout spent running within the run, :math:`\lambda W` (Little's law
    on the run's sample path; a constant step makes :math:`\sum_k b_k \Delta t_k` the batch mean
    times the steps times the step)."""
    run = _run_or_stuck(cfg, "compiled")
    if run is None:
        return
    t, s = run.trace, run.stats
    big_t = t.end_time
    occupancy = s.batch_mean * s.steps * cfg.token_time / big_t
    launched = len(t)
    if sojourn == "all":
        w = t.generator_busy / launched
    else:  # the wrong variant: the completed rollouts' times only
        done = ~np.isnan(t.finish_time)
        w = float(np.sum(t.finish_time[done] - t.launch_time[done])) / launched
    assert abs(occupancy - launched / big_t * w) <= 1e-9 * occupancy


@settings(max_examples=30, deadline=None)
@given(engine_runs(constant_step=True))
def test_littles_law(cfg: SimConfig) -> None:
    check_littles_law(cfg)


def test_littles_law_on_a_steady_run_rejects_counting_only_completions() -> None:
    model = EngineModel(layers=1, kv_heads=1, head_dim=1, dtype_bytes=1, kv_memory_bytes=2000, prompt_tokens=8, group_size=4)  # fmt: skip
    cfg = SimConfig(slots=16, batch=16, steps=40, seed=2, lognormal_mu=3.0, engine_model=model)
    check_littles_law(cfg)
    rejects(check_littles_law, cfg, "completed")
