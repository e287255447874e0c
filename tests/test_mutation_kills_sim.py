"""Pinned behaviours of refimpl.sim from a sampled mutation run (``tools/mutate.py``, seed 4242:
14 of its 50 mutants on 1 December, the whole sample with ``--no-jit`` on 2 December): each test
names the mutant of that sample it was seen to fail on, and whether the tool's run found it
surviving or it was applied by hand."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from refimpl.errors import InvalidArgument
from refimpl.sim import STATUS, SimConfig, _compiled, simulate
from refimpl.sim._event import run_async_fast, run_events


def _engines_called(monkeypatch: pytest.MonkeyPatch, cfg: SimConfig, engine: str) -> list[str]:
    """Which of the compiled and event loops ``simulate(cfg, engine=engine)`` ran."""
    import refimpl.sim as sim

    seen: list[str] = []

    def spy(name: str, real: Any) -> Any:
        def run(*args: Any, **kw: Any) -> Any:
            seen.append(name)
            return real(*args, **kw)

        return run

    monkeypatch.setattr(_compiled, "run_compiled", spy("compiled", _compiled.run_compiled))
    monkeypatch.setattr(sim, "run_events", spy("event", run_events))
    monkeypatch.setattr(sim, "run_async_fast", spy("event", run_async_fast))
    simulate(cfg, engine=engine)  # type: ignore[arg-type]
    return seen


def test_engine_compiled_and_auto_run_the_compiled_loop_where_the_vector_one_does_not_apply(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # mutant: engine == "compiled" or (engine == "auto" and AVAILABLE) -> ... and ... (every run
    # went to the event loop: the same numbers). The sample's run killed it with the existing
    # tests too; this pins it directly, by the engine actually called.
    cfg = SimConfig(slots=3, batch=2, steps=3, lengths=np.full((3, 8), 2.0), trainer_time=1.0)
    assert not cfg.vectorizable
    assert _compiled.AVAILABLE
    assert _engines_called(monkeypatch, cfg, "compiled") == ["compiled"]
    assert _engines_called(monkeypatch, cfg, "auto") == ["compiled"]
    assert _engines_called(monkeypatch, cfg, "event") == ["event"]


def test_the_preemption_budget_uses_the_lognormal_mean_exp_mu_plus_half_sigma_squared() -> None:
    # mutant (of the sample, not reached by the run; applied by hand): exp(mu + 0.5 * sigma**2)
    # -> exp(mu + 0.5 * sigma**1) in SimConfig._mean_length
    # (sigma = 2 tells them apart: e^2 = 7.389 against e^1 = 2.718 time units a rollout)
    base: dict[str, Any] = {"slots": 2, "batch": 2, "steps": 2, "lognormal_mu": 0.0}
    base.update(lognormal_sigma=2.0, token_time=1.0, preempt_duration=1.0)
    assert 138.0 * math.exp(2.0) < 1024 < 139.0 * math.exp(2.0)  # MAX_PREEMPTIONS_PER_ROLLOUT
    SimConfig(**base, preempt_rate=138.0)
    with pytest.raises(InvalidArgument, match=r"A rollout takes 7\.38906 time units on average"):
        SimConfig(**base, preempt_rate=139.0)


def test_token_time_accepts_both_ends_of_its_range_exactly() -> None:
    # mutant (of the sample, not reached by the run; applied by hand): value < low -> value <= low
    # in _check_range (2^-53 itself was refused)
    for ok in (2.0**-53, 2.0**53):
        assert SimConfig(slots=2, batch=2, steps=2, token_time=ok).token_time == ok
    for bad in (2.0**-54, 2.0**53 + 2.0):
        with pytest.raises(InvalidArgument, match=r"token_time must lie in \[2\^-53, 2\^53\]"):
            SimConfig(slots=2, batch=2, steps=2, token_time=bad)


@pytest.mark.parametrize("clock", [(5.0, 7.0), (5.0, 5.0)])
def test_agent_cli_rate_is_rollouts_over_wall_seconds_and_none_for_a_zero_wall(
    monkeypatch: pytest.MonkeyPatch, clock: tuple[float, float]
) -> None:
    # mutants (survivors of the run): wall > 0 -> wall >= 0 (a zero wall divided by zero) and
    # -> wall < 0 (no rate at all)
    import types

    import scipy.stats as st

    from refimpl.sim.agent import AgentConfig, _cli, run_agent_cli

    # the CLI module's clock only: a patched time.perf_counter would also feed the two ticks to
    # whatever else reads it during the run (numba's compiler lock does, when the kernel compiles)
    ticks = iter(clock)
    monkeypatch.setattr(_cli, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks)))
    out = run_agent_cli(AgentConfig(slots=2, batch=2, steps=3, lengths=st.expon(), turns=1))
    assert out["rollouts_trained"] == 6
    assert out["wall_s"] == clock[1] - clock[0]
    assert out["rollouts_per_s"] == (3.0 if clock[1] > clock[0] else None)


def test_a_negative_seed_is_refused_by_name_and_zero_is_a_seed() -> None:
    # survived the run of 2 December (same sample): as_int's minimum=0 made -1 let seed=-1 through
    # to numpy, whose own error names neither the option nor the fix
    assert SimConfig(slots=1, batch=1, steps=1, seed=0).seed == 0
    with pytest.raises(
        InvalidArgument, match=r"^seed must be >= 0 \(random seed\); got seed=-1\. Pass"
    ):
        SimConfig(slots=1, batch=1, steps=1, seed=-1)


def test_token_staleness_of_a_partial_run_is_the_mean_over_its_tokens_exactly() -> None:
    # survived the run of 2 December: the one-version-per-rollout shortcut taken for traces whose
    # rollouts mix versions (``==`` made ``!=``) weights each rollout's staleness by its length
    from fractions import Fraction

    cfg = SimConfig(slots=3, batch=2, steps=12, partial="keep_kv", eta=1, seed=5)
    trace = simulate(cfg)
    off, starts, versions = trace.segment_offsets, trace.segment_tokens, trace.segment_versions
    total, weighted, mixed = Fraction(0), Fraction(0), 0
    trained = np.flatnonzero(trace.status == STATUS["trained"])
    for r in trained:  # token by token
        segs = range(int(off[r]), int(off[r + 1]))
        mixed += len({int(versions[o]) for o in segs}) > 1
        ends = [*(float(starts[o]) for o in segs[1:]), float(trace.length[r])]
        for o, end in zip(segs, ends, strict=True):
            tokens = Fraction(end) - Fraction(float(starts[o]))
            total += tokens
            weighted += tokens * (int(trace.step[r]) - int(versions[o]))
    assert mixed > 0  # some trained rollout's tokens come from two versions
    exact = weighted / total
    lens, stale = trace.length[trained], trace.staleness[trained]
    assert exact != Fraction(float((lens * stale).sum())) / Fraction(float(lens.sum()))
    assert trace.summary().token_staleness_mean == pytest.approx(float(exact), rel=1e-12)


def test_a_trace_file_in_a_missing_directory_is_refused_with_the_whole_fix(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # survived the run of 2 December: the fix's first letter lowered from fix[1] ("or aass a
    # path"); the whole message, through the command
    from refimpl.cli import main

    missing = tmp_path / "no-such-dir" / "t.parquet"
    args = ["simulate", "--slots", "2", "--batch", "2", "--steps", "2", "--trace", str(missing)]
    assert main(args) == 2
    assert capsys.readouterr().err == (
        f"refimpl simulate: --trace must name a file in a writable directory; got "
        f"--trace={str(missing)!r}, whose directory {str(missing.parent)!r} does not exist. "
        "Create it first, or pass a path you can write, e.g. --trace ./trace.parquet.\n"
    )


def test_the_compiled_agent_engine_stores_canonical_booleans() -> None:
    # survived the run of 2 December: a cold start stored as 2 (``1 if cold`` made ``2``); numpy
    # views the int8 column as bool and compares it equal, but its bytes (a digest of the trace,
    # np.frombuffer, tobytes) differ from the reference engine's
    import scipy.stats as st

    from refimpl.sim.agent import AgentConfig, simulate_agent

    cfg = AgentConfig(
        slots=4, batch=2, steps=6, lengths=st.expon(scale=3.0), turns=2, tool_latency=1.0,
        shards=2, capacity=1, cold_start=0.5, keepalive=1.0, seed=3,
    )  # fmt: skip
    compiled = simulate_agent(cfg, engine="compiled")
    reference = simulate_agent(cfg, engine="event")
    cold = compiled.attempts.cold
    assert cold.any()
    assert not cold.all()
    assert set(cold.view(np.int8).tolist()) == {0, 1}
    assert cold.tobytes() == reference.attempts.cold.tobytes()


def test_the_standalone_agent_options_default_as_refimpl_simulate_does() -> None:
    # survived the run of 2 December: the standalone parser's --slots default 256 made 255; the
    # options it repeats from `refimpl simulate` must default alike
    import argparse

    from refimpl.cli import full_parser
    from refimpl.sim.agent._cli import configure_agent_options

    standalone = argparse.ArgumentParser()
    configure_agent_options(standalone, standalone=True)
    alone = standalone.parse_args([])
    integrated = full_parser().parse_args(["simulate"])
    shared = ("slots", "batch", "rollouts", "steps", "seed", "mu", "sigma")
    assert [getattr(alone, k) for k in shared] == [getattr(integrated, k) for k in shared]
    assert (alone.slots, alone.batch) == (256, 512)
