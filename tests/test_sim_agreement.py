"""The simulator agrees sample for sample: with the SimPy peer, and its two engines with each other.

The peer (``simpy_queue.py``) is imported from the peer directory next to the repository, else from
the copy vendored in ``tests/peers`` (``tests/_peers.py``); a missing peer is an error, never a skip.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest import mock

import numpy as np
import pytest
import scipy.stats
from _peers import load_simpy_peer
from _wrong_variants import rejects
from hypothesis import given, note, settings
from hypothesis import strategies as st

from refimpl.cli import main
from refimpl.sim import SimConfig, SimTrace, _aot, _compiled, _vector_compiled, simulate
from refimpl.sim import _trainer_times as trainer_times
from refimpl.sim._compiled import run_compiled
from refimpl.sim._event import _Stuck, run_async_fast, run_events
from refimpl.sim._lengths import LengthSupply, OutOfLengths


def _load_peer() -> ModuleType:
    return load_simpy_peer()


peer = _load_peer()


def _ours(trace: SimTrace) -> tuple[Any, Any, float]:
    order = trace.training_order()
    return trace.staleness[order], trace.length[order], trace.end_time


def _integer_lengths(seed: int, slots: int, cols: int, high: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(1, high + 1, size=(slots, cols)).astype(np.float64)


CASES = [
    # (name, slots, batch, rollouts, lengths factory, has ties)
    ("lognormal", 16, 32, 6_000, lambda: peer.draw_lengths(16, 6_000, 7), False),
    ("lognormal-B<N", 24, 5, 3_000, lambda: peer.draw_lengths(24, 3_000, 8), False),
    ("integer-ties", 8, 5, 1_500, lambda: _integer_lengths(1, 8, 400, 3), True),
    ("constant", 6, 4, 400, lambda: np.full((6, 200), 2.0), True),
    ("integer-B=1", 5, 1, 300, lambda: _integer_lengths(2, 5, 200, 4), True),
]
# The peer's ``callback`` variant reads the version when *each* slot relaunches, so when several
# slots finish at the instant a batch fills, the later ones see the new version: it departs from
# the conventions §tie-rule (which the ``store`` variant follows) on tied completion times. It is compared
# on continuous lengths only; test_the_callback_variant_departs_from_the_tie_rule_on_ties pins this.
PEER_RUNS = [
    pytest.param(case, engine, variant, id=f"{case[0]}-{engine}-{variant}")
    for case in CASES
    for engine in ("vector", "auto", "event")  # auto: the vectorized engine, compiled ordering
    for variant in ("store", "callback")
    if variant == "store" or not case[5]
]


@pytest.mark.parametrize(("case", "engine", "variant"), PEER_RUNS)
def test_matches_the_simpy_peer_sample_for_sample(case: Any, engine: str, variant: str) -> None:
    _, slots, batch, rollouts, make, _ = case
    lengths = make()
    sim = peer.simulate_store if variant == "store" else peer.simulate_callback
    stale, tlen, t_end = sim(lengths, batch, rollouts // batch)
    cfg = SimConfig(slots=slots, batch=batch, rollouts=rollouts, lengths=lengths)
    ours_stale, ours_len, ours_end = _ours(simulate(cfg, engine=engine))  # type: ignore[arg-type]
    np.testing.assert_array_equal(ours_stale, stale)
    np.testing.assert_array_equal(ours_len, tlen)
    assert ours_end == t_end


def test_the_peer_comparison_rejects_a_wrong_tie_rule() -> None:
    """The comparison can fail: versions taken with the wrong tie rule (a launch at the
    publication instant seeing the new version) disagree with the peer on tied lengths."""
    lengths = _integer_lengths(1, 8, 400, 3)
    stale, _, _ = peer.simulate_store(lengths, 5, 300)
    trace = simulate(SimConfig(slots=8, batch=5, steps=300, lengths=lengths), engine="vector")
    order = trace.training_order()
    wrong_version = np.searchsorted(trace.publish_times, trace.launch_time, side="right")
    wrong = (trace.step - wrong_version)[order]
    assert not np.array_equal(wrong, stale)
    np.testing.assert_array_equal(trace.staleness[order], stale)


def test_the_callback_variant_departs_from_the_tie_rule_on_ties() -> None:
    lengths = np.full((6, 200), 2.0)
    store, _, _ = peer.simulate_store(lengths, 4, 100)
    callback, _, _ = peer.simulate_callback(lengths, 4, 100)
    ours, _, _ = _ours(simulate(SimConfig(slots=6, batch=4, steps=100, lengths=lengths)))
    np.testing.assert_array_equal(ours, store)
    assert not np.array_equal(ours, callback)


def test_default_lengths_are_drawn_exactly_as_the_peer_draws_them() -> None:
    cfg = SimConfig(slots=32, batch=64, rollouts=5_000, seed=11)
    np.testing.assert_array_equal(LengthSupply(cfg).matrix, peer.draw_lengths(32, 5_000, 11))
    stale, tlen, t_end = peer.simulate_store(peer.draw_lengths(32, 5_000, 11), 64, 5_000 // 64)
    ours_stale, ours_len, ours_end = _ours(simulate(cfg))
    np.testing.assert_array_equal(ours_stale, stale)
    np.testing.assert_array_equal(ours_len, tlen)
    assert ours_end == t_end


def test_cli_json_matches_the_peer_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lengths = peer.draw_lengths(32, 4_000, 3)
    path = tmp_path / "lengths.npy"
    np.save(path, lengths)
    stale, tlen, t_end = peer.simulate_store(lengths, 64, 4_000 // 64)
    want = peer.summarize(stale, tlen)
    code = main(
        [
            "simulate",
            "--slots",
            "32",
            "--batch",
            "64",
            "--rollouts",
            "4000",
            "--lengths-npy",
            str(path),
            "--json",
            "--no-progress",
        ]
    )
    assert code == 0
    got = json.loads(capsys.readouterr().out)
    for key, value in want.items():
        assert got[key] == value, key
    assert got["sim_time_end"] == t_end
    assert got["trained_rollouts"] == stale.size
    assert got["rollouts_per_s"] > 0
    assert got["closed_form"] is None  # an explicit matrix is not a law


# ---------------------------------------------------------------------------------------------
# the two engines (and the event engine's two loops) agree wherever both apply
# ---------------------------------------------------------------------------------------------


def _equal_traces(a: SimTrace, b: SimTrace) -> None:
    for name in SimTrace.COLUMNS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    np.testing.assert_array_equal(a.publish_times, b.publish_times)
    np.testing.assert_array_equal(a.segment_offsets, b.segment_offsets)
    np.testing.assert_array_equal(a.segment_versions, b.segment_versions)
    assert a.end_time == b.end_time
    assert a.generator_busy == pytest.approx(b.generator_busy, rel=1e-9)
    assert a.trainer_busy == pytest.approx(b.trainer_busy, rel=1e-12)


@st.composite
def vector_configs(draw: st.DrawFn) -> SimConfig:
    mode = draw(st.sampled_from(["async", "sync", "first_k"]))
    slots = draw(st.integers(1, 9))
    batch = draw(st.integers(1, 2 * slots if mode == "async" else slots))
    steps = draw(st.integers(1, 25))
    # integer lengths make ties (the hard case) common; "near" ones put finish times a few ulps
    # apart, which the vectorized engine's packed sort keys cannot tell apart on their own
    # "chained": some durations add nothing to a finish time of about 1e3 (a length of 1e-300),
    # so a slot's next rollout finishes at the instant its previous one did, in the same tie
    kind = draw(st.sampled_from(["integer", "near", "lognormal", "chained"]))
    seed = draw(st.integers(0, 2**16))
    cols = steps * batch + 8
    rng = np.random.default_rng(seed)
    if kind == "lognormal":
        lengths = rng.lognormal(1.0, 1.0, size=(slots, cols))
    else:
        lengths = rng.integers(1, draw(st.integers(1, 4)) + 1, size=(slots, cols)).astype(float)
        if kind == "near":
            lengths += rng.integers(0, 3, size=(slots, cols)) * 2.0**-44
        if kind == "chained":
            lengths[rng.random(size=(slots, cols)) < 0.3] = 1e-300
    kw: dict[str, Any] = {}
    if mode == "first_k":
        kw["launch"] = draw(st.integers(batch, slots))
    if mode != "async" and draw(st.booleans()):
        kw["trainer_time"] = draw(st.sampled_from([0.5, 3.0, scipy.stats.expon(scale=1.0)]))
    token_time = draw(st.sampled_from([1.0, 0.5, 2.0]))
    prefill = draw(st.sampled_from([0.0, 1.0, 0.25]))
    return SimConfig(
        slots=slots,
        batch=batch,
        steps=steps,
        mode=mode,
        lengths=lengths,
        token_time=token_time,
        prefill_time=prefill,
        **kw,
    )


@settings(max_examples=60)
@given(vector_configs())
def test_vectorized_and_event_engines_agree_sample_for_sample(cfg: SimConfig) -> None:
    assert cfg.vectorizable
    _equal_traces(simulate(cfg, engine="vector"), simulate(cfg, engine="event"))


@settings(max_examples=120)
@given(vector_configs())
def test_the_compiled_ordering_gives_the_numpy_engines_trace(cfg: SimConfig) -> None:
    """``auto`` with the ordering step compiled (numba is a test dependency; made worth it here,
    whatever the run's size): the trace is the numpy engine's and the event engine's, ties
    included."""
    assert _vector_compiled.AVAILABLE
    with mock.patch.object(_vector_compiled, "worth_compiling", return_value=True):
        auto = simulate(cfg, engine="auto")
    _equal_traces(auto, simulate(cfg, engine="vector"))
    _equal_traces(auto, simulate(cfg, engine="event"))


@pytest.mark.parametrize("chained", [False, True])
def test_the_compiled_ordering_settles_ties_longer_than_an_insertion_sort_takes(
    chained: bool,
) -> None:
    # 40 slots finishing together: runs of 40 tied completions (heap sorted, not by
    # insertion); chained, some of a slot's rollouts add nothing to the time, in the same run
    lengths = np.full((40, 60), 2.0)
    if chained:
        lengths[np.random.default_rng(5).random(size=lengths.shape) < 0.3] = 1e-300
    cfg = SimConfig(slots=40, batch=7, steps=30, lengths=lengths)
    with mock.patch.object(_vector_compiled, "worth_compiling", return_value=True):
        auto = simulate(cfg, engine="auto")
    _equal_traces(auto, simulate(cfg, engine="event"))


def _packed_keys(draw: Callable[[st.SearchStrategy[Any]], Any]) -> np.ndarray:
    kind = draw(st.sampled_from(["times", "clustered", "wide", "equal"]))
    n: int = draw(st.integers(0, 3000))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    if kind == "times":  # the engine's: float64 finish times >= 0 as bits
        values = np.cumsum(rng.lognormal(0.0, 2.0, size=n))
        return rng.permutation(values).view(np.int64)
    if kind == "clustered":  # many keys in a few buckets, some equal
        return rng.integers(0, 50, size=n) * (1 << 40) + rng.integers(0, 3, size=n)
    if kind == "wide":  # zero, subnormals and huge values: a range too wide to scale
        return rng.integers(0, 2**63 - 2**52, size=n, dtype=np.int64)
    return np.full(n, draw(st.integers(0, 2**62)), dtype=np.int64)


@settings(max_examples=200)
@given(st.data())
def test_the_bucket_sort_sorts_as_numpy_does(data: st.DataObject) -> None:
    keys = _packed_keys(data.draw)
    expected = np.sort(keys)
    ours = keys.copy()
    _vector_compiled.sort_keys(ours, np.empty(keys.size, dtype=np.int64))
    np.testing.assert_array_equal(ours, expected)


@settings(max_examples=200)
@given(
    st.lists(st.integers(-3, 3), max_size=60),
    st.integers(0, 4),
    st.integers(0, 4),
    st.booleans(),
    st.booleans(),
)
def test_the_heap_sort_sorts_as_numpys_stable_sort(
    values: list[int], sa: int, sb: int, as_floats: bool, paired: bool
) -> None:
    """The kernels' own sort (no numba runtime to call numpy's): ``a[sa:sa + m]`` sorted, and
    paired, ``b[sb:sb + m]`` moved with it in ``(a, b)`` order, which numpy's stable sort of
    ``a`` gives where ``b`` ascends (the rows of a group of tied times do). Few distinct values:
    many ties."""
    m = len(values)
    a = np.full(m + sa + 2, 99, dtype=np.float64 if as_floats else np.int64)
    a[sa : sa + m] = values
    b = np.full(m + sb + 2, -1, dtype=np.int64)
    b[sb : sb + m] = np.arange(m) * 7
    want_a, want_b = a.copy(), b.copy()
    order = np.argsort(a[sa : sa + m], kind="stable")
    want_a[sa : sa + m] = a[sa : sa + m][order]
    if paired:
        want_b[sb : sb + m] = b[sb : sb + m][order]
    _vector_compiled._compiled("_heap_sort")(a, sa, b, sb, m, paired)
    np.testing.assert_array_equal(a, want_a)  # the items outside the range untouched too
    np.testing.assert_array_equal(b, want_b)


def test_the_bucket_sort_sorts_a_pile_of_keys_in_one_coarse_bucket() -> None:
    # 100k keys spread over [0, 1e6), then 80k of them moved into [5e5, 5e5 + 1): one coarse
    # bucket holds more than the fine pass takes (2^16), and the heap sort sorts it
    rng = np.random.default_rng(11)
    values = rng.uniform(0.0, 1e6, size=100_000)
    values[:80_000] = 5e5 + rng.random(80_000)
    keys = rng.permutation(values).view(np.int64)
    ours = keys.copy()
    _vector_compiled.sort_keys(ours, np.empty(keys.size, dtype=np.int64))
    np.testing.assert_array_equal(ours, np.sort(keys))


@pytest.mark.parametrize("engine", ["vector", "auto"])
def test_the_vectorized_engine_orders_finish_times_one_ulp_apart(engine: str) -> None:
    # Slot 0 finishes one ulp after slot 1; their packed sort keys agree once the low bit holds
    # the row number, and slot 0's row comes first: the exact re-sort must put slot 1 first.
    lengths = np.ones((2, 8))
    lengths[0, 0] = np.nextafter(1.0, 2.0)
    cfg = SimConfig(slots=2, batch=1, steps=3, lengths=lengths)
    vector = simulate(cfg, engine=engine)  # type: ignore[arg-type]
    _equal_traces(vector, simulate(cfg, engine="event"))
    assert vector.slot[vector.training_order()].tolist() == [1, 0, 1]


@st.composite
def fast_configs(draw: st.DrawFn) -> SimConfig:
    slots = draw(st.integers(1, 8))
    batch = draw(st.integers(1, 12))
    steps = draw(st.integers(1, 20))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 4, size=(slots, 4 * steps * batch + 8)).astype(float)
    eta = draw(st.none() | st.integers(0, 3))
    over = "drop" if eta is not None and draw(st.booleans()) else "keep"
    tau = draw(st.sampled_from([0.0, 0.0, 1.0, 2.5]))
    return SimConfig(
        slots=slots,
        batch=batch,
        steps=steps,
        lengths=lengths,
        eta=eta,
        over_bound=over,
        trainer_time=tau,
    )


@settings(max_examples=60)
@given(fast_configs())
def test_the_fast_async_loop_agrees_with_the_general_event_loop(cfg: SimConfig) -> None:
    taus = trainer_times(cfg)
    general = SimTrace.from_raw(run_events(cfg, LengthSupply(cfg), taus), cfg, canonical=False)
    fast = SimTrace.from_raw(run_async_fast(cfg, LengthSupply(cfg), taus), cfg, canonical=False)
    _equal_traces(general, fast)


# ---------------------------------------------------------------------------------------------
# the compiled engine (refimpl[fast]) is the reference event engine, sample for sample
# ---------------------------------------------------------------------------------------------


@st.composite
def every_mode_configs(draw: st.DrawFn) -> SimConfig:
    """Every mode and option of :class:`SimConfig`; integer lengths (a pmf) make ties common."""
    mode = draw(st.sampled_from(["async", "sync", "first_k", "admission"]))
    slots = draw(st.integers(1, 8))
    batch = draw(st.integers(1, 10))
    kw: dict[str, Any] = {}
    if mode == "first_k":
        kw["launch"] = draw(st.integers(batch, batch + slots + 3))
        kw["leftovers"] = draw(st.sampled_from(["drop", "carry"]))
    if mode == "admission" or draw(st.booleans()):
        kw["eta"] = draw(st.integers(0, 3))
        if draw(st.booleans()):
            kw["over_bound"] = "drop"
    if mode in ("async", "admission"):
        kw["partial"] = draw(st.sampled_from(["none", "restart", "recompute", "keep_kv"]))
        kw["reprefill_token_time"] = draw(st.sampled_from([0.0, 0.1, 1.0]))
    if draw(st.booleans()):
        kw["preempt_rate"] = draw(st.sampled_from([0.01, 0.1, 0.5]))
        kw["preempt_duration"] = draw(st.sampled_from([0.5, 1.0, 3.0]))
        kw["persist_kv"] = draw(st.booleans())
        kw["kv_restore_time"] = draw(st.sampled_from([0.0, 0.5]))
    if draw(st.booleans()):
        kw["slowdown"] = draw(st.sampled_from([lambda busy: 1.0 + 0.05 * busy, lambda busy: 2.0]))
    kw["trainer_time"] = draw(st.sampled_from([0.0, 0.0, 1.0, 0.7, scipy.stats.expon(scale=1.0)]))
    kw["token_time"] = draw(st.sampled_from([1.0, 1.0, 0.5]))
    kw["prefill_time"] = draw(st.sampled_from([0.0, 0.0, 1.0]))
    kind = draw(st.sampled_from(["pmf", "pmf", "lognormal"]))
    if kind == "pmf":  # integer lengths: simultaneous completions, publications and launches
        high = draw(st.integers(1, 4))
        kw["lengths"] = np.full(high, 1.0 / high)
    return SimConfig(
        slots=slots,
        batch=batch,
        steps=draw(st.integers(1, 15)),
        mode=mode,
        seed=draw(st.integers(0, 2**16)),
        lognormal_mu=1.0,
        **kw,
    )


def _engine_trace(run: Any, cfg: SimConfig, *, canonical: bool) -> SimTrace | str:
    """The trace of one engine, or the name of the error it ended with."""
    try:
        raw = run(cfg, LengthSupply(cfg), trainer_times(cfg))
    except (_Stuck, OutOfLengths) as e:
        return f"{type(e).__name__}: {e}"
    return SimTrace.from_raw(raw, cfg, canonical=canonical)


def _equal_exactly(a: SimTrace, b: SimTrace) -> None:
    """Every column, every segment and every total, bit for bit (no tolerance at all)."""
    _equal_traces(a, b)
    np.testing.assert_array_equal(a.segment_tokens, b.segment_tokens)
    assert a.generator_busy == b.generator_busy
    assert a.trainer_busy == b.trainer_busy


@settings(max_examples=150)
@given(every_mode_configs())
def test_the_compiled_engine_is_the_reference_engine_sample_for_sample(cfg: SimConfig) -> None:
    reference = _engine_trace(run_events, cfg, canonical=False)
    compiled = _engine_trace(run_compiled, cfg, canonical=True)
    note(f"reference: {reference if isinstance(reference, str) else len(reference)} rows")
    if isinstance(reference, str) or isinstance(compiled, str):
        assert compiled == reference
        return
    _equal_exactly(reference, compiled)


@pytest.mark.parametrize(
    "kw",
    [
        {"partial": "restart"},  # more rows than planned
        {"partial": "recompute", "reprefill_token_time": 0.5},  # more version segments
        {"preempt_rate": 0.2, "preempt_duration": 2.0},  # more preemption delays
        {"mode": "first_k", "launch": 9, "leftovers": "carry"},  # more lengths, block by block
    ],
    ids=["rows", "segments", "preemptions", "lengths"],
)
def test_the_compiled_engine_gives_the_same_trace_when_it_runs_out_of_room(
    kw: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Starting with almost no room forces every "I need more" path of the kernel (grow the arrays
    between two events and resume; or, inside an event, run again from the start); either way the
    trace must be the reference trace exactly."""
    cfg = SimConfig(slots=3, batch=2, steps=60, lengths=np.full(3, 1.0 / 3), seed=5, **kw)
    monkeypatch.setattr(_compiled, "_rows_estimate", lambda cfg: 1)
    monkeypatch.setattr(_compiled, "_INITIAL_ROOM", 1)
    monkeypatch.setattr(SimConfig, "initial_columns", lambda self: 4)  # lengths in blocks of 4
    reference = _engine_trace(run_events, cfg, canonical=False)
    compiled = _engine_trace(run_compiled, cfg, canonical=True)
    assert not isinstance(reference, str)
    assert not isinstance(compiled, str)
    _equal_exactly(reference, compiled)


def test_the_compiled_engine_refuses_a_short_matrix_as_the_reference_does() -> None:
    cfg = SimConfig(slots=2, batch=2, steps=50, lengths=np.ones((2, 10)), mode="admission", eta=1)
    reference = _engine_trace(run_events, cfg, canonical=False)
    assert isinstance(reference, str)
    assert reference.startswith("OutOfLengths")
    assert _engine_trace(run_compiled, cfg, canonical=True) == reference


def test_the_engine_comparison_catches_a_one_token_difference() -> None:
    """The comparison can fail: the same run with one length changed by a token differs."""
    lengths = np.random.default_rng(3).integers(1, 4, size=(4, 300)).astype(float)
    cfg = SimConfig(slots=4, batch=3, steps=40, lengths=lengths, partial="recompute")
    wrong = lengths.copy()
    wrong[2, 5] += 1.0
    other = SimConfig(slots=4, batch=3, steps=40, lengths=wrong, partial="recompute")
    a = _engine_trace(run_events, cfg, canonical=False)
    b = _engine_trace(run_compiled, other, canonical=True)
    assert not isinstance(a, str)
    assert not isinstance(b, str)
    with pytest.raises(AssertionError):
        _equal_exactly(a, b)


def test_simulate_uses_the_compiled_engine_by_default_and_names_every_engine() -> None:
    cfg = SimConfig(slots=4, batch=4, steps=20, mode="admission", eta=1, seed=2)
    assert _compiled.AVAILABLE  # the dev install has numba (refimpl[fast])
    auto = simulate(cfg)
    _equal_exactly(auto, simulate(cfg, engine="compiled"))
    _equal_exactly(auto, simulate(cfg, engine="event"))
    with pytest.raises(ValueError, match="engine must be one of 'auto', 'vector', 'compiled'"):
        simulate(cfg, engine="numba")  # type: ignore[arg-type]


def test_without_numba_compiled_is_refused_and_auto_falls_back_to_the_same_trace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cfg = SimConfig(slots=4, batch=4, steps=20, partial="keep_kv", trainer_time=1.5, seed=2)
    fast = simulate(cfg)
    monkeypatch.setattr(_compiled, "AVAILABLE", False)
    with pytest.raises(ValueError, match=r"pip install 'refimpl\[fast\]'"):
        simulate(cfg, engine="compiled")
    _equal_exactly(simulate(cfg), fast)


def test_auto_orders_a_vectorizable_run_with_the_compiled_kernels_when_worth_it_else_numpy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cfg = SimConfig(slots=5, batch=4, steps=30, lengths=_integer_lengths(3, 5, 200, 3))
    calls: list[int] = []
    kernel = _vector_compiled.processing_order

    def counted(*args: Any) -> Any:
        calls.append(1)
        return kernel(*args)

    monkeypatch.setattr(_vector_compiled, "processing_order", counted)
    monkeypatch.setattr(_vector_compiled, "worth_compiling", lambda config: True)
    fast = simulate(cfg)
    assert calls == [1]
    _equal_traces(simulate(cfg, engine="vector"), fast)  # engine="vector": numpy only
    assert calls == [1]
    monkeypatch.setattr(_vector_compiled, "worth_compiling", lambda config: False)
    _equal_traces(simulate(cfg), fast)  # a cold kernel and a short run: numpy, the same trace
    assert calls == [1]


class _Cold:  # a numba dispatcher not compiled in this process
    signatures: tuple[Any, ...] = ()


class _Warm:  # one compiled in this process
    signatures: tuple[Any, ...] = (("float64",),)


def _plain() -> None:  # NUMBA_DISABLE_JIT: a plain function, ready
    return None


def _ordering_rule_holds(
    worth: Callable[[SimConfig], bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``worth`` (as ``_vector_compiled.worth_compiling``) orders with the kernels only when they
    are compiled in this process, built ahead of time, built by this call (the command, from
    ``COMMAND_BUILD_ROLLOUTS``), or the run has ``COMPILE_ROWS`` rows, whatever numba's cache
    holds, in a process that has not imported numba; once numba is imported, numba's cache counts
    too."""
    short = SimConfig(slots=4, batch=4, steps=20)
    long = SimConfig(slots=4, batch=4, steps=_vector_compiled.COMPILE_ROWS // 4)
    first_k = SimConfig(slots=4, batch=4, steps=20, mode="first_k", launch=4, leftovers="drop")
    names = _vector_compiled._ORDER_KERNELS
    monkeypatch.setattr(_vector_compiled, "AVAILABLE", True)  # the rule, numba here or not
    monkeypatch.setattr(_compiled, "cached_on_disk", lambda dispatcher: True)  # all on disk
    monkeypatch.setattr(_vector_compiled, "_numba_loaded", lambda: False)  # a fresh process
    monkeypatch.setattr(_vector_compiled, "_jit", {})  # nothing compiled in this process
    monkeypatch.setattr(_vector_compiled, "_built", lambda: False)  # no entry built
    assert not worth(short)
    assert not worth(first_k)
    assert worth(long)
    assert _vector_compiled._jit == {}, "deciding compiled (or built) a kernel"
    monkeypatch.setattr(_vector_compiled, "_built", lambda: True)  # entries, loaded without numba
    assert worth(short)
    assert worth(first_k)
    monkeypatch.setattr(_vector_compiled, "_built", lambda: False)
    command = SimConfig(slots=4, batch=4, steps=_aot.COMMAND_BUILD_ROLLOUTS // 4)
    assert not worth(command)  # the Python API: numpy, nothing built
    with _aot.building_when_cached():  # the command: builds the entries once, then loads them
        assert worth(command)
        assert not worth(short)
    assert _vector_compiled._jit == {}, "deciding compiled (or built) a kernel"
    monkeypatch.setattr(_vector_compiled, "_jit", dict.fromkeys(names, _Cold()))
    assert not worth(short)  # built in this process but not compiled (on disk only)
    monkeypatch.setattr(_vector_compiled, "_jit", dict.fromkeys(names[:-1], _Warm()))
    assert not worth(short)  # one kernel missing
    monkeypatch.setattr(
        _vector_compiled, "_jit", {**dict.fromkeys(names, _Warm()), names[0]: _Cold()}
    )
    assert not worth(short)  # one kernel cold
    monkeypatch.setattr(_vector_compiled, "_jit", dict.fromkeys(names, _Warm()))
    assert worth(short)
    assert worth(first_k)
    monkeypatch.setattr(_vector_compiled, "_jit", dict.fromkeys(names, _plain))
    assert worth(short)
    # numba imported already (another engine of the run used it): kernels on disk count, cold
    # ones do not
    monkeypatch.setattr(_vector_compiled, "_numba_loaded", lambda: True)
    monkeypatch.setattr(_vector_compiled, "_jit", {})
    monkeypatch.setattr(_vector_compiled, "_compiled", lambda name: _Cold())  # built, not compiled
    assert worth(short)
    monkeypatch.setattr(_compiled, "cached_on_disk", lambda dispatcher: False)
    assert not worth(short)
    monkeypatch.setattr(_vector_compiled, "AVAILABLE", False)
    assert not worth(long)
    assert not worth(short)


def _wrong_rule(
    cfg: SimConfig, *, disk: bool = True, built: bool = True, command: bool = True
) -> bool:
    """The rule with one of its ways to say yes dropped: numba's cache on disk once numba is
    imported (``disk``), the built entries (``built``), the command's build (``command``)."""
    if not _vector_compiled.AVAILABLE:
        return False
    rows = cfg.trained_target
    if rows >= _vector_compiled.COMPILE_ROWS or _vector_compiled._compiled_here():
        return True
    if (built and _vector_compiled._built()) or (command and _aot.command_builds(rows)):
        return True
    if not (disk and _vector_compiled._numba_loaded()):
        return False
    kernels = [_vector_compiled._compiled(name) for name in _vector_compiled._ORDER_KERNELS]
    return all(_compiled.kernel_ready(k) for k in kernels)


def _never_from_disk(cfg: SimConfig) -> bool:
    """Wrong: kernels on disk never count, even where numba is imported already (a warmed
    process that ran another engine then orders at half speed)."""
    return _wrong_rule(cfg, disk=False)


def _entries_ignored(cfg: SimConfig) -> bool:
    """Wrong: built entries do not count (a fresh call orders with numpy, a warmed process with
    numba's cached kernels: the two rates differ by half)."""
    return _wrong_rule(cfg, built=False)


def _command_ignored(cfg: SimConfig) -> bool:
    """Wrong: the command does not build the entries (they are never built)."""
    return _wrong_rule(cfg, command=False)


def _disk_counts(cfg: SimConfig) -> bool:
    """Wrong: kernels in numba's cache on disk count as ready, numba imported or not (loading
    them costs ~0.4 s)."""
    if _wrong_rule(cfg):
        return True
    kernels = [_vector_compiled._jit.get(name) for name in _vector_compiled._ORDER_KERNELS]
    ready = all(k is not None and _compiled.kernel_ready(k) for k in kernels)
    return _vector_compiled.AVAILABLE and ready


def test_auto_orders_with_kernels_compiled_in_this_process_or_for_a_long_run_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kernels held by numba's cache on disk do not count for the vectorized ordering in a process
    without numba: loading them costs more than they save a run shorter than ``COMPILE_ROWS``.
    Their ahead-of-time entries, loaded without numba, do."""
    _ordering_rule_holds(_vector_compiled.worth_compiling, monkeypatch)
    rejects(_ordering_rule_holds, _disk_counts, monkeypatch)
    rejects(_ordering_rule_holds, _never_from_disk, monkeypatch)
    rejects(_ordering_rule_holds, _entries_ignored, monkeypatch)
    rejects(_ordering_rule_holds, _command_ignored, monkeypatch)


def test_the_ordering_kernels_count_as_ready_once_a_run_compiled_them() -> None:
    """A run that used the kernels leaves them compiled; the next short ``auto`` run uses them."""
    cfg = SimConfig(slots=5, batch=4, steps=30, lengths=_integer_lengths(3, 5, 200, 3))
    with mock.patch.object(_vector_compiled, "worth_compiling", return_value=True):
        simulate(cfg)
    assert _vector_compiled.worth_compiling(cfg)


def test_auto_compiles_only_a_ready_kernel_or_a_run_long_enough_to_repay_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Cold:  # a numba dispatcher compiled neither here nor on disk
        signatures: tuple[Any, ...] = ()

    class Warm:
        signatures: tuple[Any, ...] = (("float64",),)

    monkeypatch.setattr(_compiled, "cached_on_disk", lambda dispatcher: False)
    assert not _compiled.kernel_ready(Cold())
    assert _compiled.kernel_ready(Warm())
    assert _compiled.kernel_ready(lambda: None)  # NUMBA_DISABLE_JIT: a plain function
    short = SimConfig(slots=4, batch=4, steps=20)
    long = SimConfig(slots=4, batch=4, steps=_compiled.COMPILE_ROLLOUTS // 4)
    monkeypatch.setattr(_compiled, "AVAILABLE", True)  # the rule, whether numba is here or not
    monkeypatch.setattr(_compiled, "_compile", Cold)
    monkeypatch.setattr(_compiled._runner, "ready", lambda: False)  # no ahead-of-time entry
    assert not _compiled.worth_compiling(short)
    assert _compiled.worth_compiling(long)
    monkeypatch.setattr(_compiled._runner, "ready", lambda: True)  # an entry built: ready
    assert _compiled.worth_compiling(short)
    monkeypatch.setattr(_compiled._runner, "ready", lambda: False)
    monkeypatch.setattr(_compiled, "_compile", Warm)
    assert _compiled.worth_compiling(short)
    monkeypatch.setattr(_compiled, "AVAILABLE", False)
    assert not _compiled.worth_compiling(long)


def test_the_compiled_engine_reports_progress_in_chunks_that_add_up() -> None:
    """Progress every 1/64 of the run or so (not only at the end), adding up to the completions the
    reference engine reports; and the trace is the same with progress as without."""
    cfg = SimConfig(slots=4, batch=4, steps=200, partial="recompute", seed=3)
    seen: list[int] = []
    reference: list[int] = []
    with_progress = simulate(cfg, engine="compiled", progress=seen.append)
    simulate(cfg, engine="event", progress=reference.append)
    assert len(seen) >= 32
    assert sum(seen) == sum(reference) > 0
    _equal_exactly(with_progress, simulate(cfg, engine="compiled"))


def test_progress_does_not_make_the_compiled_engine_refuse_a_matrix_that_is_long_enough() -> None:
    """An explicit length matrix with just the columns the run needs: the compiled engine paused
    for progress (every 1/64 of the run) used to try to extend it, and refused it naming the wrong
    slot, where the reference engine runs it. One column fewer is refused alike by both."""
    lengths = np.random.default_rng(1).integers(1, 6, size=(2, 400)).astype(float)

    def outcome(k: int, engine: str) -> str:
        cfg = SimConfig(slots=2, batch=3, steps=151, lengths=lengths[:, :k].copy())
        try:
            trace = simulate(cfg, engine=engine, progress=lambda n: None)  # type: ignore[arg-type]
        except OutOfLengths as err:
            return str(err)
        return f"{len(trace)} rows"

    lo, hi = 1, 400  # the fewest columns the reference engine runs with
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if outcome(mid, "event").endswith("rows") else (mid + 1, hi)
    for k in (lo - 1, lo, lo + 1):
        assert outcome(k, "compiled") == outcome(k, "event"), k
    assert "slot 1 needs at least" in outcome(lo - 1, "compiled")
