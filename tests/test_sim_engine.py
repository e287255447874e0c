"""The engine mode's arithmetic and hand-worked runs: KV blocks against vLLM's formulas, the
roofline, prefix sharing, preemption and the three interruption choices, in tokens, bytes and time.

Every expected number here is worked out by hand in the comment beside it.
"""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np
import pytest
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st

from refimpl.errors import InvalidArgument
from refimpl.sim import SimConfig, simulate, simulate_engine
from refimpl.sim.engine import (
    EngineModel,
    Roofline,
    decode_step_time,
    interruption_bytes,
    kv_block_bytes,
    kv_blocks_in_budget,
    kv_blocks_per_sequence,
    kv_bytes_per_token,
    kv_sequences_that_fit,
    preemption_cost,
    preemption_victims,
    prefix_sharing_savings,
    routing_bytes_per_token,
)
from refimpl.staleness import sample_staleness

# --- KV arithmetic against vLLM's formulas ---------------------------------------------------------
# vLLM (vllm/v1/kv_cache_interface.py, AttentionSpec.real_page_size_bytes): one layer's page of
# block_size tokens is 2 * block_size * num_kv_heads * head_size * dtype_size bytes;
# vllm/v1/core/kv_cache_utils.py: num_blocks = available_memory // page_size // num_layers, and a
# request of n tokens takes cdiv(n, block_size) blocks; max concurrency num_blocks / that.


def vllm_page_size_bytes(block_size: int, kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    return 2 * block_size * kv_heads * head_dim * dtype_bytes


def vllm_num_blocks(memory: int, page_size: int, layers: int) -> int:
    return memory // page_size // layers


def vllm_max_concurrency(num_blocks: int, tokens: int, block_size: int) -> float:
    return num_blocks / -(-tokens // block_size)


_shapes = st.tuples(
    st.integers(1, 128),  # layers
    st.integers(1, 64),  # kv heads
    st.sampled_from([64, 80, 96, 128, 256]),  # head dim
    st.sampled_from([1, 2, 4]),  # dtype bytes
    st.sampled_from([1, 8, 16, 32, 128]),  # block size
    st.integers(0, 2**40),  # memory
    st.integers(1, 2**17),  # tokens per sequence
)


def check_kv_against_vllm(shape: tuple[int, ...], per_token: Any = kv_bytes_per_token) -> None:
    layers, heads, dim, dt, bs, memory, tokens = shape
    b_tok = per_token(layers=layers, kv_heads=heads, head_dim=dim, dtype_bytes=dt)
    block = kv_block_bytes(block_size=bs, bytes_per_token=b_tok)
    page = vllm_page_size_bytes(bs, heads, dim, dt)
    assert block == layers * page
    blocks = kv_blocks_in_budget(memory, block_bytes=block)
    assert blocks == vllm_num_blocks(memory, page, layers)
    assert kv_blocks_per_sequence(tokens, block_size=bs) == math.ceil(tokens / bs)
    fit = kv_sequences_that_fit(blocks, tokens=tokens, block_size=bs)
    assert fit == math.floor(vllm_max_concurrency(blocks, tokens, bs))
    assert all(isinstance(x, int) for x in (b_tok, block, blocks, fit))


@given(_shapes)
def test_kv_arithmetic_is_vllms(shape: tuple[int, ...]) -> None:
    check_kv_against_vllm(shape)


def test_kv_arithmetic_rejects_a_cache_without_values() -> None:
    # the wrong variant: keys only (no factor 2)
    def keys_only(*, layers: int, kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
        return layers * kv_heads * head_dim * dtype_bytes

    run_property(lambda: check_kv_against_vllm((28, 4, 128, 2, 16, 2**30, 4096)))
    rejects(check_kv_against_vllm, (28, 4, 128, 2, 16, 2**30, 4096), keys_only)


def test_kv_hand_worked() -> None:
    # Qwen2.5-7B: 2 * 28 * 4 * 128 * 2 = 57344 B a token; a block of 16: 917504 B; 40 GiB hold
    # 42949672960 // 917504 = 46811 blocks; 4096 tokens take 256 blocks: 46811 // 256 = 182.
    b = kv_bytes_per_token(layers=28, kv_heads=4, head_dim=128, dtype_bytes=2)
    assert b == 57344
    assert kv_block_bytes(block_size=16, bytes_per_token=b) == 917504
    assert kv_blocks_in_budget(40 * 2**30, block_bytes=917504) == 46811
    assert kv_blocks_per_sequence(4096, block_size=16) == 256
    assert kv_sequences_that_fit(46811, tokens=4096, block_size=16) == 182
    # Qwen3-30B-A3B routing: 48 layers x top-8 x int32 ids = 1536 B a token
    assert routing_bytes_per_token(moe_layers=48, top_k=8, id_bytes=4) == 1536


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda: kv_bytes_per_token(layers=0, kv_heads=4, head_dim=128, dtype_bytes=2), "layers"),
        (lambda: kv_blocks_per_sequence(-1, block_size=16), "tokens"),
        (lambda: kv_sequences_that_fit(10, tokens=0, block_size=16), "tokens"),
        (lambda: routing_bytes_per_token(moe_layers=4, top_k=0, id_bytes=4), "top_k"),
        (lambda: EngineModel(watermark=1.0), "watermark"),
        (lambda: EngineModel(preemption="drop"), "preemption"),
        (lambda: SimConfig(slots=2, batch=2, steps=1, mode="sync", engine_model=EngineModel()), "mode"),
        (lambda: SimConfig(slots=2, batch=2, steps=1, prefill_time=1.0, engine_model=EngineModel()), "prefill_time"),
        (lambda: SimConfig(slots=2, batch=2, steps=1, engine_model=cast(Any, "big")), "engine_model"),
    ],
)  # fmt: skip
def test_refusals_name_the_parameter(call: Any, says: str) -> None:
    with pytest.raises((InvalidArgument, TypeError)) as err:
        call()
    assert str(err.value).startswith(says)


# --- the roofline ------------------------------------------------------------------------------------
_ROOF = Roofline(weight_bytes=15.23e9, active_params=7.62e9, bandwidth=3.35e12, flops=989e12)


def test_roofline_is_memory_bound_small_and_compute_bound_large() -> None:
    t = decode_step_time([1, 4096], [0, 0], roofline=_ROOF, kv_bytes_per_token=57344)
    assert t[0] == 15.23e9 / 3.35e12  # the weights' read
    assert t[1] == 2 * 7.62e9 * 4096 / 989e12  # 4096 tokens' compute exceeds it
    with_prefill = decode_step_time(
        1, 0, roofline=_ROOF, kv_bytes_per_token=57344, prefill_tokens=4095
    )
    assert with_prefill[()] == t[1]  # a prefilled token costs what a decoded one does  # fmt: skip


# --- prefix sharing ----------------------------------------------------------------------------------
def _tiny(**kw: Any) -> EngineModel:
    """One byte-sized layer: 2 bytes of KV a token; blocks of 2 tokens."""
    base: dict[str, Any] = {"layers": 1, "kv_heads": 1, "head_dim": 1, "dtype_bytes": 1}
    base.update(block_size=2, watermark=0.0)
    base.update(kw)
    return EngineModel(**base)


def _run(model: EngineModel, lengths: Any, **kw: Any) -> Any:
    lengths = np.asarray(lengths, dtype=np.float64)
    cfg = SimConfig(slots=lengths.shape[0], lengths=lengths, engine_model=model, **kw)
    a = simulate_engine(cfg, engine="event")
    b = simulate_engine(cfg, engine="compiled")
    assert a.stats == b.stats
    return a


def test_prefix_sharing_hand_worked() -> None:
    # Two seats, groups of 2, prompts of 4 tokens (2 full blocks of 2), 2 tokens generated each,
    # a step of 1 plus 0.5 per prefilled token. Shared: each group's first sample prefills 4
    # tokens, its sibling none; steps take 1 + 2 = 3 and 1, so two groups end at 8. Unshared: 8
    # tokens prefilled a step, 1 + 4 = 5 and 1: 12. Saved: 4 tokens a group, 2 time units each.
    # A third group is admitted at t = 8, before the last publication ends the run: its prefill is
    # counted (12 tokens shared, 24 not), its step never runs.
    lengths = np.full((2, 4), 2.0)
    kw = {"batch": 2, "steps": 2}
    mem = {"prompt_tokens": 4, "group_size": 2, "prefill_token_time": 0.5, "kv_memory_bytes": 400}
    shared = _run(_tiny(**mem), lengths, **kw)
    alone = _run(_tiny(prefix_sharing=False, **mem), lengths, **kw)
    assert shared.trace.end_time == 8.0
    assert alone.trace.end_time == 12.0
    s, a = shared.stats, alone.stats
    assert (s.prefill_tokens, a.prefill_tokens) == (12.0, 24.0)
    assert (s.prefix_hit_tokens_group, a.prefix_hit_tokens_group) == (12.0, 0.0)
    assert s.prefix_time_saved == 6.0  # 12 tokens at 0.5
    assert (s.prefill_time, a.prefill_time) == (4.0, 8.0)  # the steps that ran
    assert a.prefill_time - s.prefill_time == alone.trace.end_time - shared.trace.end_time
    # memory: the 2 prompt blocks held once, not twice: saved 2 blocks at every step; at the
    # first token, shared 2 + 1 + 1 = 4 blocks held, unshared 2 x (2 + 1) = 6
    assert (s.prefix_blocks_saved_mean, a.prefix_blocks_saved_mean) == (2.0, 0.0)
    assert (s.blocks_used_peak, a.blocks_used_peak) == (4.0, 6.0)
    formula = prefix_sharing_savings(
        prompt_tokens=4, generated_tokens=1, group_size=2, block_size=2
    )
    assert (formula.blocks_shared, formula.blocks_unshared) == (4, 6)
    assert formula.prefill_saved * 3 == s.prefix_hit_tokens_group  # three groups


def test_prefix_cache_across_steps_and_its_staleness() -> None:
    # One prompt for every group (prompts=1): the second group finds it cached. Under partial
    # 'none' the second group is admitted at t = 2 before the publication of that instant, so
    # the cached prompt is current: a hit. With a trainer time of 1, group 2 is admitted at t=2
    # and the publication comes at 3; group 3 (admitted at 4) finds the prompt prefilled under
    # version 0 while version 1 is out: a stale miss, prefilled again.
    lengths = np.full((2, 6), 2.0)
    model = _tiny(prompt_tokens=4, group_size=2, prompts=1, kv_memory_bytes=400)
    run = _run(model, lengths, batch=2, steps=2, trainer_time=1.0)
    assert run.stats.prefix_hit_tokens_cache == 4.0
    assert run.stats.prefix_stale_misses == 1
    # keep_kv keeps stale KV by design: then it is a hit
    kept = _run(model, lengths, batch=2, steps=2, trainer_time=1.0, partial="keep_kv")
    assert kept.stats.prefix_stale_misses == 0
    assert kept.stats.prefix_hit_tokens_cache == 8.0


# --- preemption ----------------------------------------------------------------------------------
def test_preemption_recompute_hand_worked() -> None:
    # Two seats, 3 blocks of 2 tokens, rollouts of 4 tokens, no prompt. Step 0: both take a block
    # (1 free). Step 2: both need their second block, 1 is free: the newest (rollout 1, 2 tokens)
    # is preempted, freeing its block; rollout 0 finishes at t = 4. Rollout 1 resumes then: its 2
    # tokens recomputed (their KV wasted), it finishes at 6; the batch of 2 is trained at 6.
    run = _run(_tiny(kv_memory_bytes=12), np.full((2, 4), 4.0), batch=2, steps=1)
    t, s = run.trace, run.stats
    assert s.total_blocks == 3
    assert s.preemptions == 1
    assert s.preemption_wasted_tokens == 2.0
    # rows by slot: rollouts 0 and 2 in slot 0, 1 and 3 (launched at 6) in slot 1
    assert t.recomputed_tokens.tolist() == [0.0, 0.0, 2.0, 0.0]
    assert t.finish_time[[0, 2]].tolist() == [4.0, 6.0]
    assert t.end_time == 6.0
    # the policy: newest first, until the others' new blocks fit
    assert preemption_victims([0, 1], [1, 1], [1, 1], free_blocks=1).tolist() == [1]
    assert preemption_cost(
        own_tokens=2, policy="recompute", block_size=2, kv_bytes_per_token=2
    ) == (2, 0)


def test_preemption_swap_hand_worked() -> None:
    # The same, swapping: a block of 2 tokens x 2 bytes crosses at 4 bytes a time unit, so a swap
    # of one block adds 1 to its step. Step 2 (swap out) takes 2: rollout 0 finishes at 5, rollout
    # 1 swaps in at 5 (step 4 takes 2) and finishes at 8.
    model = _tiny(kv_memory_bytes=12, preemption="swap", swap_bandwidth=4.0)
    run = _run(model, np.full((2, 4), 4.0), batch=2, steps=1)
    s = run.stats
    assert (s.preemptions, s.swapped_out_blocks, s.swapped_in_blocks) == (1, 1.0, 1.0)
    assert s.preemption_wasted_tokens == 0.0
    assert run.trace.recomputed_tokens.sum() == 0.0
    assert run.trace.end_time == 8.0
    cost = preemption_cost(own_tokens=2, policy="swap", block_size=2, kv_bytes_per_token=2)
    assert cost.swapped_bytes == 2 * 4  # out and back in


def check_preemption_policy(victims: Any) -> None:
    """Newest first: the victims are the most recently admitted, and no more than needed."""
    # 4 blocks needed, none free: the newest (index 0, admitted 3) frees 2 and needs none: 3 > 2,
    # so the next newest (index 2) goes too: 2 needed, 3 free
    out = list(victims([3, 0, 2, 1], [2, 5, 1, 1], [1, 1, 1, 1], free_blocks=0))
    assert out == [0, 2]
    # the newest frees 3: enough for the other three
    assert list(victims([3, 0, 2, 1], [3, 5, 1, 1], [1, 1, 1, 1], free_blocks=0)) == [0]


def test_preemption_policy_newest_first_rejects_oldest_first() -> None:
    check_preemption_policy(preemption_victims)

    def oldest_first(a: Any, f: Any, n: Any, *, free_blocks: int) -> Any:
        return preemption_victims([-x for x in a], f, n, free_blocks=free_blocks)

    rejects(check_preemption_policy, oldest_first)


# --- interruption --------------------------------------------------------------------------------
def _interrupted(partial: str) -> Any:
    # Two seats, batch 1, prompts of 4 tokens (no sharing), a dense KV of 2 B and routing of
    # 2 B a token (1 MoE layer, top-2, 1-byte ids). Rollout 0 (2 tokens) completes at t = 2 and is
    # trained at once; its seat launches rollout 2 under version 0; the publication at t = 2 then
    # reaches rollout 1 (2 of 3 tokens done) and rollout 2 (none done): contexts 4 + 2 and 4 + 0,
    # 10 tokens, 40 bytes.
    lengths = np.array([[2.0, 3.0, 3.0, 3.0, 3.0], [3.0, 3.0, 3.0, 3.0, 3.0]])
    model = _tiny(
        prompt_tokens=4, prefix_sharing=False, moe_layers=1, top_k=2, expert_id_bytes=1,
        kv_memory_bytes=None,
    )  # fmt: skip
    return _run(model, lengths, batch=1, steps=2, partial=partial)


@pytest.mark.parametrize(
    ("partial", "discarded", "recomputed", "kept"),
    [("restart", 40.0, 0.0, 0.0), ("recompute", 0.0, 40.0, 0.0), ("keep_kv", 0.0, 0.0, 40.0)],
)
def test_interruption_bytes_hand_worked(
    partial: str, discarded: float, recomputed: float, kept: float
) -> None:
    s = _interrupted(partial).stats
    assert (s.interrupted, s.interrupted_tokens, s.interrupted_context_tokens) == (2, 2.0, 10.0)
    assert (s.kv_bytes_per_token, s.routing_bytes_per_token) == (2, 2)
    got = (
        s.interruption_bytes_discarded,
        s.interruption_bytes_recomputed,
        s.interruption_bytes_kept,
    )
    assert got == (discarded, recomputed, kept)
    assert tuple(interruption_bytes([6, 4], choice=partial, kv_bytes_per_token=2, routing_bytes_per_token=2)) == got  # fmt: skip


def test_interruption_turns_sequence_staleness_into_token_staleness() -> None:
    # keep_kv: rollout 1's tokens 0-1 come from version 0, token 2 from version 1; it is trained at
    # step 1: sample staleness 1 (its oldest token), token staleness [1, 1, 0] -- exactly what
    # refimpl.staleness.sample_staleness says from the versions in the trace.
    trace = _interrupted("keep_kv").trace
    order = trace.training_order()
    row = int(order[1])
    starts, versions = trace.token_versions(row)
    assert (starts.tolist(), versions.tolist()) == ([0.0, 2.0], [0, 1])
    per_token = np.repeat(versions, np.diff(np.append(starts, trace.length[row])).astype(int))
    st_ = sample_staleness(int(trace.step[row]), [per_token])
    assert st_.sample.tolist() == [trace.staleness[row]] == [1]
    assert st_.token.tolist() == [[1.0, 1.0, 0.0]]
    # restart: the interrupted rollouts are aborted with their 2 tokens wasted, and none of the
    # trained ones mixes versions
    restarted = _interrupted("restart").trace
    assert restarted.wasted_tokens.sum() == 2.0
    assert np.all(np.diff(restarted.segment_offsets) == 1)


def test_engine_mode_through_simulate_is_the_same_trace() -> None:
    cfg = SimConfig(slots=2, lengths=np.full((2, 4), 4.0), engine_model=_tiny(kv_memory_bytes=12), batch=2, steps=1)  # fmt: skip
    a, b = simulate(cfg), simulate_engine(cfg).trace
    for c in a.COLUMNS:
        assert np.array_equal(getattr(a, c), getattr(b, c), equal_nan=True)
