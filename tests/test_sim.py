"""Properties of the simulator that hold for every run (mode by mode), and its trace export."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

from refimpl.sim import STATUS, OutOfLengths, SimConfig, SimTrace, simulate


def _lengths(seed: int, slots: int, cols: int, *, integer: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if integer:
        return rng.integers(1, 6, size=(slots, cols)).astype(np.float64)
    return rng.lognormal(1.5, 0.8, size=(slots, cols))


def _check_invariants(trace: SimTrace) -> None:
    """What every trace satisfies, whatever the mode."""
    cfg = trace.config
    trained = trace.status == STATUS["trained"]
    assert int(trained.sum()) == cfg.steps * cfg.batch
    assert np.all(trace.staleness[trained] >= 0)
    np.testing.assert_array_equal(
        trace.staleness[trained], (trace.step - trace.min_version)[trained]
    )
    # each step trains exactly B samples, ranks are 0..n-1 and follow the steps
    np.testing.assert_array_equal(np.bincount(trace.step[trained]), np.full(cfg.steps, cfg.batch))
    order = trace.training_order()
    np.testing.assert_array_equal(trace.rank[order], np.arange(order.size))
    assert np.all(np.diff(trace.step[order]) >= 0)
    # versions: min token version <= launch version... or later (no token under the launch version)
    assert np.all(trace.min_version >= 0)
    assert np.all(np.diff(trace.publish_times) >= 0)
    assert trace.end_time == trace.publish_times[-1]
    finished = ~np.isnan(trace.finish_time)
    assert np.all(trace.finish_time[finished] >= trace.launch_time[finished])
    unfinished = trace.status == STATUS["unfinished"]
    assert np.all(np.isnan(trace.finish_time[unfinished]))
    assert np.all(trace.wasted_tokens >= 0)
    assert np.all(trace.wasted_tokens <= trace.length + 1e-9)
    # token versions: segments start at token 0, are increasing in tokens and versions
    off = trace.segment_offsets
    assert off[0] == 0
    assert off[-1] == trace.segment_tokens.size
    assert np.all(np.diff(off) >= 1)
    np.testing.assert_array_equal(trace.segment_tokens[off[:-1]], 0.0)
    np.testing.assert_array_equal(trace.segment_versions[off[:-1]], trace.min_version)
    inner = np.ones(trace.segment_tokens.size, dtype=bool)
    inner[off[:-1]] = False
    assert np.all(np.diff(trace.segment_tokens)[inner[1:]] > 0)
    assert np.all(np.diff(trace.segment_versions)[inner[1:]] > 0)
    s = trace.summary()
    assert 0.0 <= s.generator_idle <= 1.0
    assert 0.0 <= s.trainer_idle <= 1.0
    assert s.staleness_hist.sum() == s.trained


@st.composite
def any_configs(draw: st.DrawFn) -> SimConfig:
    mode = draw(st.sampled_from(["async", "sync", "first_k", "admission"]))
    slots = draw(st.integers(1, 8))
    batch = draw(st.integers(1, 10))
    if mode == "first_k":
        batch = min(batch, slots)
    kw: dict[str, Any] = {}
    if mode == "first_k":
        kw["launch"] = draw(st.integers(batch, slots + 3))
        kw["leftovers"] = draw(st.sampled_from(["drop", "carry"]))
    if mode == "admission" or draw(st.booleans()):
        kw["eta"] = draw(st.integers(0, 3))
        if draw(st.booleans()):
            kw["over_bound"] = "drop"
    if mode in ("async", "admission"):
        kw["partial"] = draw(st.sampled_from(["none", "restart", "recompute", "keep_kv"]))
        kw["reprefill_token_time"] = draw(st.sampled_from([0.0, 0.1]))
    if draw(st.booleans()):
        kw["preempt_rate"] = draw(st.sampled_from([0.01, 0.1]))
        kw["preempt_duration"] = draw(st.sampled_from([0.5, 3.0]))
        kw["persist_kv"] = draw(st.booleans())
    if draw(st.booleans()):
        kw["slowdown"] = lambda busy: 1.0 + 0.05 * busy
    kw["trainer_time"] = draw(st.sampled_from([0.0, 0.0, 0.7, scipy.stats.expon(scale=1.0)]))
    seed = draw(st.integers(0, 2**16))
    steps = draw(st.integers(1, 12))
    integer = draw(st.booleans())
    return SimConfig(
        slots=slots,
        batch=batch,
        steps=steps,
        mode=mode,
        lengths=scipy.stats.randint(1, 6) if integer else scipy.stats.lognorm(s=0.8, scale=4.0),
        seed=seed,
        **kw,
    )


@settings(max_examples=80)
@given(any_configs())
def test_every_mode_keeps_the_trace_invariants(cfg: SimConfig) -> None:
    _check_invariants(simulate(cfg))


def test_the_invariant_check_rejects_a_trace_with_an_off_by_one_version() -> None:
    trace = simulate(SimConfig(slots=4, batch=3, steps=20, lengths=_lengths(0, 4, 80)))
    _check_invariants(trace)
    bad = SimTrace(**{**trace.__dict__, "min_version": trace.min_version + 1})
    with pytest.raises(AssertionError):
        _check_invariants(bad)


@pytest.mark.parametrize("mode", ["async", "sync", "first_k", "admission"])
def test_seeded_runs_reproduce_exactly(mode: str) -> None:
    kw: dict[str, Any] = {"eta": 1} if mode == "admission" else {}

    def make(seed: int) -> SimConfig:
        return SimConfig(
            slots=6,
            batch=4,
            steps=30,
            mode=mode,
            seed=seed,
            lengths=scipy.stats.lognorm(s=1.0, scale=20.0),
            trainer_time=scipy.stats.expon(scale=3.0),
            preempt_rate=0.01,
            preempt_duration=5.0,
            **kw,
        )

    a, b, c = simulate(make(3)), simulate(make(3)), simulate(make(4))
    for name in SimTrace.COLUMNS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.end_time == b.end_time
    assert a.end_time != c.end_time


def test_sync_trains_only_on_policy_samples_and_idles_while_waiting() -> None:
    lengths = np.tile(np.array([[1.0], [3.0]]), (1, 10))
    trace = simulate(SimConfig(slots=2, batch=2, steps=5, mode="sync", lengths=lengths))
    s = trace.summary()
    assert s.staleness_max == 0
    assert s.end_time == 15.0  # each step waits for the longest rollout (3)
    assert s.generator_idle == pytest.approx(1 - 20 / 30)  # slot 0 busy 1 of every 3


def test_length_bias_measures_vanish_exactly_when_every_launched_rollout_is_trained() -> None:
    pmf = np.full(6, 1 / 6)
    sync = simulate(SimConfig(slots=6, batch=6, steps=200, mode="sync", lengths=pmf, seed=1))
    b = sync.summary().length_bias
    assert (b.ratio, b.total_variation, b.kl_divergence) == (1.0, 0.0, 0.0)
    first = simulate(SimConfig(slots=6, batch=2, steps=200, mode="first_k", lengths=pmf, seed=1))
    b = first.summary().length_bias
    assert b.ratio < 1.0
    assert b.total_variation > 0.1
    assert b.kl_divergence > 0.0


def test_sync_with_more_samples_than_slots_queues_them() -> None:
    trace = simulate(SimConfig(slots=2, batch=5, steps=2, mode="sync", lengths=np.ones((2, 10))))
    assert trace.end_time == 6.0  # ceil(5 / 2) = 3 rounds of length 1 per step
    assert trace.summary().staleness_max == 0


def test_first_k_drops_the_leftovers_and_counts_their_tokens() -> None:
    lengths = np.array([[1.0] * 4, [2.0] * 4, [5.0] * 4])
    trace = simulate(
        SimConfig(slots=3, batch=1, steps=3, mode="first_k", launch=3, lengths=lengths)
    )
    trained = trace.status == STATUS["trained"]
    assert set(trace.slot[trained].tolist()) == {0}
    dropped = trace.status == STATUS["dropped"]
    assert int(dropped.sum()) == 6
    np.testing.assert_array_equal(trace.wasted_tokens[dropped], 1.0)  # cut off after 1 time unit
    assert trace.end_time == 3.0


def test_first_k_carry_trains_leftovers_later_with_staleness() -> None:
    lengths = np.array([[1.0] * 8, [2.5] * 8])
    trace = simulate(
        SimConfig(
            slots=2, batch=1, steps=4, mode="first_k", launch=2, leftovers="carry", lengths=lengths
        )
    )
    order = trace.training_order()
    assert trace.slot[order].tolist() == [0, 0, 1, 0]
    # step 3 trains slot 0's rollout launched under version 2 while slot 1 held up step 2
    assert trace.staleness[order].tolist() == [0, 0, 2, 1]


def test_admission_with_eta_zero_trains_only_on_policy_samples() -> None:
    cfg = SimConfig(slots=16, batch=4, steps=200, mode="admission", eta=0, seed=1)
    s = simulate(cfg).summary()
    assert s.staleness_max == 0
    wrong = SimConfig(slots=16, batch=4, steps=200, mode="admission", eta=1, seed=1)
    assert simulate(wrong).summary().staleness_max > 0  # the property is not vacuous


@settings(max_examples=40)
@given(st.integers(0, 2), st.integers(1, 8), st.integers(1, 8), st.integers(0, 2**16))
def test_admission_caps_launches_at_eta_plus_version_plus_one_batches(
    eta: int, slots: int, batch: int, seed: int
) -> None:
    trace = simulate(
        SimConfig(slots=slots, batch=batch, steps=10, mode="admission", eta=eta, seed=seed)
    )
    # launches under version v are among the first (eta + v + 1) * B launched
    order = np.argsort(trace.launch_time, kind="stable")
    nth = np.empty(order.size, dtype=np.int64)
    nth[order] = np.arange(order.size)
    assert np.all(nth < (eta + trace.launch_version.astype(np.int64) + 1) * batch)


def test_restart_trains_only_rollouts_launched_under_the_current_version() -> None:
    cfg = SimConfig(slots=8, batch=4, steps=100, partial="restart", lengths=_lengths(1, 8, 5000))
    trace = simulate(cfg)
    s = trace.summary()
    assert s.staleness_max == 0
    assert s.aborted > 0
    assert s.wasted_tokens > 0
    assert s.length_bias.ratio < 1  # long rollouts are aborted more often
    plain = simulate(SimConfig(slots=8, batch=4, steps=100, lengths=_lengths(1, 8, 5000)))
    assert plain.summary().staleness_max > 0  # without restart they are stale


@pytest.mark.parametrize("partial", ["recompute", "keep_kv"])
def test_partial_rollouts_mix_versions_but_keep_the_oldest_for_staleness(partial: str) -> None:
    cfg = SimConfig(
        slots=8,
        batch=4,
        steps=100,
        partial=partial,
        reprefill_token_time=0.5,
        lengths=_lengths(1, 8, 800),
    )
    trace = simulate(cfg)
    _check_invariants(trace)
    counts = np.diff(trace.segment_offsets)
    assert counts.max() > 1
    trained = trace.status == STATUS["trained"]
    s = trace.summary()
    assert (s.recomputed_tokens > 0) == (partial == "recompute")
    # tokens of each segment: versions grow along the rollout
    row = int(np.flatnonzero(trained & (counts > 1))[0])
    tokens, versions = trace.token_versions(row)
    assert tokens[0] == 0
    assert np.all(np.diff(versions) > 0)


def test_keep_kv_keeps_sample_staleness_and_freshens_tokens() -> None:
    base: dict[str, Any] = {"slots": 8, "batch": 4, "steps": 60, "lengths": _lengths(2, 8, 800)}
    keep = simulate(SimConfig(**base, partial="keep_kv"))
    none = simulate(SimConfig(**base))
    np.testing.assert_array_equal(keep.finish_time, none.finish_time)  # same timing
    # s uses the oldest token: unchanged, except for a rollout launched at the publication instant
    # (the tie rule gives it the old version) whose every token comes from the new weights
    same = keep.min_version == keep.launch_version
    np.testing.assert_array_equal(keep.staleness[same], none.staleness[same])
    fresh = ~same & (keep.status == STATUS["trained"])
    assert fresh.any()
    np.testing.assert_array_equal(keep.staleness[fresh], none.staleness[fresh] - 1)
    np.testing.assert_array_equal(
        keep.launch_time[~same], keep.publish_times[keep.min_version[~same] - 1]
    )
    assert keep.summary().token_staleness_mean < none.summary().token_staleness_mean
    assert none.summary().token_staleness_mean >= none.summary().staleness_mean  # long = staler


def test_recompute_costs_time_and_keep_kv_does_not() -> None:
    base: dict[str, Any] = {"slots": 8, "batch": 4, "steps": 60, "lengths": _lengths(2, 8, 800)}
    keep = simulate(SimConfig(**base, partial="keep_kv"))
    none = simulate(SimConfig(**base))
    redo = simulate(SimConfig(**base, partial="recompute", reprefill_token_time=0.5))
    assert keep.end_time == none.end_time
    assert redo.end_time > none.end_time


def test_preemption_without_persisted_kv_recomputes_the_prefix() -> None:
    base: dict[str, Any] = {
        "slots": 8,
        "batch": 8,
        "steps": 60,
        "seed": 5,
        "preempt_rate": 0.02,
        "preempt_duration": 4.0,
        "reprefill_token_time": 0.2,
        "lengths": scipy.stats.lognorm(s=0.8, scale=10.0),
    }
    kept = simulate(SimConfig(**base, persist_kv=True)).summary()
    lost = simulate(SimConfig(**base, persist_kv=False)).summary()
    none = simulate(SimConfig(**{**base, "preempt_rate": 0.0, "preempt_duration": 0.0})).summary()
    assert kept.recomputed_tokens == 0
    assert lost.recomputed_tokens > 0
    assert lost.end_time > kept.end_time > none.end_time
    assert kept.generator_idle > none.generator_idle


def test_a_constant_slowdown_is_a_slower_token_time() -> None:
    lengths = _lengths(3, 6, 400)
    slow = simulate(
        SimConfig(slots=6, batch=5, steps=40, lengths=lengths, slowdown=lambda b: 2.0),
        engine="event",
    )
    fast = simulate(SimConfig(slots=6, batch=5, steps=40, lengths=lengths, token_time=2.0))
    np.testing.assert_array_equal(slow.staleness, fast.staleness)
    np.testing.assert_allclose(slow.finish_time, fast.finish_time, rtol=1e-12)
    wrong = simulate(SimConfig(slots=6, batch=5, steps=40, lengths=lengths, token_time=1.5))
    assert not np.allclose(wrong.finish_time, fast.finish_time, rtol=1e-12, equal_nan=True)


def test_a_load_dependent_slowdown_lowers_throughput() -> None:
    base: dict[str, Any] = {"slots": 8, "batch": 4, "steps": 50, "lengths": _lengths(4, 8, 400)}
    a = simulate(SimConfig(**base)).summary()
    b = simulate(SimConfig(**base, slowdown=lambda busy: 1.0 + 0.1 * busy)).summary()
    assert b.throughput < a.throughput


def test_trainer_time_idles_the_generators_only_in_sync() -> None:
    base: dict[str, Any] = {"slots": 4, "batch": 4, "steps": 30, "lengths": _lengths(5, 4, 400)}
    sync = simulate(SimConfig(**base, mode="sync", trainer_time=2.0)).summary()
    asyn = simulate(SimConfig(**base, trainer_time=2.0)).summary()
    assert asyn.generator_idle == 0.0
    assert sync.generator_idle > 0.0
    assert sync.trainer_idle == pytest.approx(1 - 60.0 / sync.end_time)


def test_an_explicit_matrix_that_is_too_short_says_how_many_lengths_are_needed() -> None:
    cfg = SimConfig(slots=2, batch=2, steps=10, lengths=np.ones((2, 5)))
    engine: Literal["vector", "event"]
    for engine in ("vector", "event"):
        with pytest.raises(OutOfLengths, match=r"slot \d needs at least \d+ lengths"):
            simulate(cfg, engine=engine)


def test_drawn_lengths_extend_when_a_slot_runs_out() -> None:
    """Restarts and drops consume more lengths than the peer's K rule; a drawn law grows by
    blocks from the same generator, identically in both event loops."""
    from refimpl.sim import _trainer_times as trainer_times
    from refimpl.sim._event import run_async_fast, run_events
    from refimpl.sim._lengths import LengthSupply

    law = scipy.stats.randint(1, 9)
    restart = SimConfig(slots=4, batch=1, steps=200, partial="restart", lengths=law, seed=2)
    trace = simulate(restart)
    assert trace.index.max() >= restart.initial_columns()
    drop = SimConfig(slots=8, batch=1, steps=150, eta=0, over_bound="drop", lengths=law, seed=2)
    taus = trainer_times(drop)
    general = SimTrace.from_raw(run_events(drop, LengthSupply(drop), taus), drop, canonical=False)
    fast = SimTrace.from_raw(run_async_fast(drop, LengthSupply(drop), taus), drop, canonical=False)
    assert fast.index.max() >= drop.initial_columns()
    for name in SimTrace.COLUMNS:
        np.testing.assert_array_equal(getattr(general, name), getattr(fast, name))


def test_trace_exports_to_arrow_parquet_and_pandas(tmp_path: Path) -> None:
    import pandas as pd  # type: ignore[import-untyped]

    trace = simulate(SimConfig(slots=4, batch=4, steps=10, partial="keep_kv", seed=3))
    table = trace.to_arrow()
    assert table.num_rows == len(trace)
    np.testing.assert_array_equal(table.column("staleness").to_numpy(), trace.staleness)
    path = tmp_path / "trace.parquet"
    trace.to_parquet(path)
    df = pd.read_parquet(path)
    assert list(df["status_name"].unique()) != []
    row = int(np.argmax(np.diff(trace.segment_offsets)))
    tokens, versions = trace.token_versions(row)
    np.testing.assert_array_equal(np.asarray(df["segment_versions"][row]), versions)
    np.testing.assert_array_equal(np.asarray(df["segment_tokens"][row]), tokens)


def test_trace_columns_are_read_only() -> None:
    trace = simulate(SimConfig(slots=2, batch=2, steps=2, seed=0))
    with pytest.raises(ValueError, match="read-only"):
        trace.staleness[0] = 5


# ---------------------------------------------------------------------------------------------
# the simulator against refimpl.staleness (the definitions it must follow)
# ---------------------------------------------------------------------------------------------


@st.composite
def async_configs(draw: st.DrawFn) -> SimConfig:
    slots = draw(st.integers(1, 8))
    batch = draw(st.integers(1, 10))
    eta = draw(st.none() | st.integers(0, 3))
    kw: dict[str, Any] = {"eta": eta}
    if eta is not None and draw(st.booleans()):
        kw["over_bound"] = "drop"
    if draw(st.booleans()):
        kw["preempt_rate"] = 0.05
        kw["preempt_duration"] = 2.0
    return SimConfig(
        slots=slots,
        batch=batch,
        steps=draw(st.integers(1, 15)),
        lengths=scipy.stats.randint(1, 5),
        trainer_time=draw(st.sampled_from([0.0, 1.0, 2.5])),
        seed=draw(st.integers(0, 2**16)),
        **kw,
    )


@settings(max_examples=50)
@given(async_configs())
def test_async_launch_versions_follow_refimpl_policy_version(cfg: SimConfig) -> None:
    """Every async launch sees v(t) = #{j : T_j < t} (refimpl.policy_version, the tie rule)."""
    import refimpl

    trace = simulate(cfg)
    want = refimpl.policy_version(trace.launch_time, publish_times=trace.publish_times)
    np.testing.assert_array_equal(trace.launch_version, want.astype(np.int32))


def test_policy_version_check_rejects_sync_semantics() -> None:
    """The check is not vacuous: in sync mode a step's launches follow its publication and see
    the new version, which policy_version (a launch *at* the publication instant) would not give."""
    import refimpl

    trace = simulate(SimConfig(slots=2, batch=2, steps=4, mode="sync", lengths=np.ones((2, 8))))
    want = refimpl.policy_version(trace.launch_time, publish_times=trace.publish_times)
    assert not np.array_equal(trace.launch_version, want)


@pytest.mark.parametrize("partial", ["none", "recompute", "keep_kv", "restart"])
@pytest.mark.parametrize("mode", ["async", "admission"])
def test_trained_staleness_is_refimpl_sample_staleness_of_the_token_versions(
    partial: str, mode: str
) -> None:
    import refimpl

    cfg = SimConfig(
        slots=8,
        batch=4,
        steps=80,
        mode=mode,
        eta=1 if mode == "admission" else None,
        partial=partial,
        reprefill_token_time=0.2,
        preempt_rate=0.01,
        preempt_duration=3.0,
        persist_kv=False,
        lengths=scipy.stats.randint(1, 12),
        seed=4,
    )
    trace = simulate(cfg)
    order = trace.training_order()
    versions = [trace.token_versions(int(r))[1] for r in order]
    want = refimpl.sample_staleness(trace.step[order], versions).sample
    np.testing.assert_array_equal(trace.staleness[order], want.astype(np.int32))


# ---------------------------------------------------------------------------------------------
# the command line
# ---------------------------------------------------------------------------------------------


def test_cli_bad_configuration_exits_2_with_the_fix(capsys: pytest.CaptureFixture[str]) -> None:
    from refimpl.cli import main

    assert main(["simulate", "--slots", "4", "--batch", "0", "--rollouts", "10"]) == 2
    assert "batch must be >= 1" in capsys.readouterr().err


def test_cli_event_mode_writes_a_trace_and_a_progress_bar(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pyarrow.parquet as pq

    from refimpl.cli import main

    path = tmp_path / "t.parquet"
    args = ["simulate", "--slots", "8", "--batch", "4", "--rollouts", "10000", "--seed", "1"]
    args += ["--mode", "admission", "--eta", "1", "--partial", "keep_kv", "--progress"]
    assert main([*args, "--trace", str(path)]) == 0
    out = capsys.readouterr()
    assert "rollout" in out.err  # tqdm on stderr
    assert "staleness_hist" in out.out
    table = pq.read_table(path)
    assert table.num_rows > 10_000
    assert "refimpl.sim.config" in {k.decode() for k in table.schema.metadata}


def test_cli_tool_turns_switch_to_agent_rollouts(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from refimpl.cli import main

    args = ["simulate", "--slots", "4", "--batch", "4", "--rollouts", "40", "--no-progress"]
    assert main([*args, "--tool-turns", "1", "--json"]) == 0
    agent = json.loads(capsys.readouterr().out)
    assert agent["mode"] == "agent"
    assert agent["rollouts_trained"] == 40
    assert main([*args, "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["mode"] == "async"
    assert main([*args, "--tool-turns", "-1"]) == 2
    assert "refimpl simulate:" in capsys.readouterr().err


def test_cli_zero_steps_says_steps_must_be_at_least_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from refimpl.cli import main

    assert main(["simulate", "--slots", "4", "--batch", "4", "--steps", "0"]) == 2
    err = capsys.readouterr().err
    assert "steps must be >= 1" in err, err
    assert "steps=0" in err, err
    assert "rollouts or steps=None" not in err
    assert "Traceback" not in err


def _write_npy(path: Path, content: str) -> str:
    """A file for ``--lengths-npy``: ``missing``, ``dir``, ``garbage``, ``object``, ``1d``, ``3d``."""
    import numpy as np

    if content == "missing":
        return str(path / "missing.npy")
    if content == "dir":
        return str(path)
    file = path / f"{content}.npy"
    if content == "garbage":
        file.write_text("not a numpy file")
    elif content == "object":
        np.save(file, np.array([{}, 1], dtype=object), allow_pickle=True)
    elif content == "1d":
        np.save(file, np.full(5, 0.2))
    elif content == "3d":
        np.save(file, np.ones((4, 2, 3)))
    elif content == "text":
        np.save(file, np.array([["a", "b"]] * 4))
    return str(file)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("missing", r"cannot be read \(No such file or directory\)"),
        ("dir", r"cannot be read \(Is a directory\)"),
        ("garbage", r"numpy cannot read as a plain numeric \.npy array \(no NumPy \.npy header"),
        ("object", r"numpy cannot read as a plain numeric \.npy array \(Object arrays"),
        ("text", r"got an array of dtype <U1"),
        ("3d", r"got a 3-D array of shape \(4, 2, 3\)"),
        (
            "1d",
            r"--lengths-npy must be an N×K float64 matrix \(row i = slot i's lengths\); "
            r"got a 1-D array of shape \(5,\).*--lengths-pmf",
        ),
    ],
)
def test_cli_a_bad_lengths_npy_file_names_the_option_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, says: str
) -> None:
    import re

    from refimpl.cli import main

    path = _write_npy(tmp_path, content)
    args = ["simulate", "--slots", "4", "--batch", "4", "--rollouts", "8", "--no-progress"]
    assert main([*args, "--lengths-npy", path]) == 2
    err = capsys.readouterr().err
    assert err.startswith("refimpl simulate: --lengths-npy must"), err
    assert re.search(says, err), err
    assert "numpy.save" in err, err
    assert "Traceback" not in err


def test_cli_a_lengths_npy_matrix_runs_sample_for_sample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    import numpy as np

    from refimpl.cli import main

    path = tmp_path / "m.npy"
    np.save(path, np.arange(1, 4 * 40 + 1).reshape(4, 40))  # integers are accepted as float64
    args = ["simulate", "--slots", "4", "--batch", "4", "--rollouts", "40", "--no-progress"]
    assert main([*args, "--lengths-npy", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["trained_rollouts"] == 40


@pytest.mark.parametrize(
    ("where", "agent", "says"),
    [
        ("/proc/x.parquet", False, r"no file can be created in '/proc'"),
        ("{tmp}/no/such/dir/t.parquet", False, r"whose directory '.*/no/such/dir' does not exist"),
        ("{tmp}", False, r"an existing directory\. Name the file"),
        ("/proc/x", True, r"no file can be created in '/proc'"),
        ("{tmp}/file.txt", True, r"an existing file"),
    ],
)
def test_cli_an_unwritable_trace_path_fails_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str, agent: bool, says: str
) -> None:
    import re

    from refimpl.cli import main

    (tmp_path / "file.txt").write_text("")
    path = where.format(tmp=tmp_path)
    args = ["simulate", "--slots", "4", "--batch", "4", "--rollouts", "8", "--progress"]
    args += ["--tool-turns", "1"] if agent else []
    assert main([*args, "--trace", path]) == 2
    out = capsys.readouterr()
    assert out.err.startswith("refimpl simulate: --trace must name"), out.err
    assert re.search(says, out.err), out.err
    assert not re.search(r"\d+/\d+ \[", out.err)  # failed before the run: no progress bar drawn
    assert out.out == ""


@pytest.mark.parametrize(
    ("pmf", "says"),
    [
        ("a,b", r"entry 1 \('a', the probability of length 1\) is not a number"),
        ("0.5,,0.5", r"entry 2 \('', the probability of length 2\) is not a number"),
        ("0.5,0.5x", r"entry 2 \('0.5x', the probability of length 2\) is not a number"),
    ],
)
def test_cli_a_malformed_lengths_pmf_names_the_option_and_the_form(
    capsys: pytest.CaptureFixture[str], pmf: str, says: str
) -> None:
    import re

    from refimpl.cli import main

    args = ["simulate", "--slots", "4", "--batch", "4", "--rollouts", "8", "--no-progress"]
    assert main([*args, "--lengths-pmf", pmf]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "refimpl simulate: --lengths-pmf must be comma-separated probabilities of lengths 1..M"
    ), err
    assert re.search(says, err), err
    assert "could not convert" not in err


def test_cli_help_says_how_to_pass_a_pmf_starting_with_a_minus(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from refimpl.cli import main

    monkeypatch.setenv("COLUMNS", "300")  # argparse wraps help text, and may break at hyphens

    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    assert "--lengths-pmf=-0.1" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ("--sigma -1", "--sigma must be > 0; got --sigma=-1.0. Pass --sigma > 0."),
        ("--mu nan", "--mu must be finite (log-scale location); got --mu=nan. Pass a finite --mu."),
        ("--token-time 0", "--token-time must be > 0 (a time); got --token-time=0.0."),
        ("--trainer-time -2", "--trainer-time must be >= 0 (a time); got --trainer-time=-2.0."),
        ("--trainer-time-random", "--trainer-time must be in (0, 2^53] with --trainer-time-random"),
        ("--trainer-time-random --trainer-time -1", "got --trainer-time=-1.0. Pass e.g."),
        ("--preempt-rate 0.1", "--preempt-duration must be > 0 when --preempt-rate > 0"),
        ("--over-bound drop", "--over-bound must be 'keep' when --eta is not given"),
        ("--mode admission", "--eta must be given for --mode admission"),
        ("--launch 5", "--launch must not be given unless --mode first_k; got --launch=5."),
        ("--batch 0", "--batch must be >= 1 (samples per trainer step); got --batch=0."),
        ("--lengths-pmf 0.5,0.2", "--lengths-pmf must sum to 1"),
        ("--lengths-npy {rows3}", "--lengths-npy must have one row per slot (--slots=4 rows)"),
        ("--lengths-npy {cols3}", "--lengths-npy must hold every rollout the run launches"),
        ("--rollouts 8 --steps 2", "got --rollouts=8 and --steps=2. Pass only one of them."),
        ("--slowdown-per-slot -1", "--slowdown-per-slot must keep the decode slowdown factor"),
        ("--engine vector --eta 0 --over-bound drop", "--engine must be 'event' or 'auto'"),
    ],
)
def test_cli_messages_name_the_options_not_the_config_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: str, says: str
) -> None:
    import numpy as np

    from refimpl.cli import main

    np.save(tmp_path / "rows3.npy", np.ones((3, 10)))
    np.save(tmp_path / "cols3.npy", np.ones((4, 3)))
    extra = options.format(rows3=tmp_path / "rows3.npy", cols3=tmp_path / "cols3.npy").split()
    args = ["simulate", "--slots", "4", "--batch", "4", "--no-progress", *extra]
    if "--steps" not in options:
        args += ["--rollouts", "64"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("refimpl simulate: --"), err
    assert says in err, err
    for field in ("lognormal_", "_time", "_rate", "_duration", "over_bound", "slowdown must"):
        assert field not in err, err
    assert "Traceback" not in err


def test_cli_zero_steps_names_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    from refimpl.cli import main

    assert main(["simulate", "--slots", "4", "--batch", "4", "--steps", "0"]) == 2
    err = capsys.readouterr().err
    assert "--steps must be >= 1 (trainer steps); got --steps=0. Pass --steps >= 1." in err, err


def test_option_names_leave_prose_alone() -> None:
    import argparse

    from refimpl.sim.cli import _option_names

    args = argparse.Namespace(lengths_pmf=None, lengths_npy="m.npy")
    message = (
        "rollouts must be >= batch=4 (at least one trainer step); got rollouts=3. "
        "Pass rollouts >= 4 or a smaller batch of lengths."
    )
    assert _option_names(message, args) == (
        "--rollouts must be >= --batch=4 (at least one trainer step); got --rollouts=3. "
        "Pass --rollouts >= 4 or a smaller batch of lengths."
    )
    assert _option_names("steps must be >= 1 (trainer steps)", args) == (
        "--steps must be >= 1 (trainer steps)"
    )
