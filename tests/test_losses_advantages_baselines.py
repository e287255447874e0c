"""Properties of refimpl.losses.advantages_baselines and advantages_tokens: GPG, OPO, ReMax, MaxRL,
Pass@k, GDPO and the optimal token baseline.

Values are checked exactly on hand-worked cases (Fractions where rational), against independent
loop implementations on Hypothesis-drawn batches, and by properties that are each run against a
deliberately wrong variant (which they must reject). The conformance specs of the same estimators
are run on refimpl's own functions (they pass) and on wrong candidates (the check named fails).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

import refimpl.losses.advantages as adv
import refimpl.losses.advantages_baselines as ab
import refimpl.losses.advantages_tokens as at
from refimpl.testing import check_conformance

Array = NDArray[np.float64]

# ---------------------------------------------------------------------------------------------
# strategies
# ---------------------------------------------------------------------------------------------

REWARD = st.one_of(
    st.sampled_from([0.0, 1.0, -1.0, 0.5, 2.0]),
    st.floats(-10.0, 10.0, allow_nan=False, allow_subnormal=False),
)


@st.composite
def grouped(draw: st.DrawFn, *, min_group: int = 1, nonneg: bool = False) -> tuple[Array, Array]:
    """``(rewards, group)``: 1..4 groups of unequal sizes, ids shuffled and not contiguous."""
    sizes = draw(st.lists(st.integers(min_group, 5), min_size=1, max_size=4))
    ids = draw(st.permutations([3, 11, 0, 7][: len(sizes)]))
    group = [g for g, s in zip(ids, sizes, strict=True) for _ in range(s)]
    order = draw(st.permutations(range(len(group))))
    group = [group[i] for i in order]
    rewards = np.array(draw(st.lists(REWARD, min_size=len(group), max_size=len(group))))
    return (np.abs(rewards) if nonneg else rewards), np.array(group, dtype=np.int64)


@st.composite
def with_lengths(draw: st.DrawFn) -> tuple[Array, Array, Array]:
    rewards, group = draw(grouped())
    lengths = draw(st.lists(st.integers(1, 6), min_size=rewards.size, max_size=rewards.size))
    return rewards, group, np.array(lengths, dtype=np.float64)


@st.composite
def token_batch(draw: st.DrawFn) -> dict[str, Any]:
    """Inputs of the optimal token baseline: right-padded rows, π <= 0.9, Σπ² in [π², π² + (1−π)²]."""
    rewards, group = draw(grouped())
    b = rewards.size
    t = draw(st.integers(1, 5))
    lengths = np.array(draw(st.lists(st.integers(1, t), min_size=b, max_size=b)))
    mask = (np.arange(t)[None, :] < lengths[:, None]).astype(np.float64)
    dense = np.array(
        draw(st.lists(st.sampled_from([0.0, 0.5, -1.0, 2.0]), min_size=b * t, max_size=b * t))
    ).reshape(b, t)
    pi = np.array(draw(st.lists(st.floats(0.01, 0.9), min_size=b * t, max_size=b * t)))
    frac = np.array(draw(st.lists(st.floats(0.0, 1.0), min_size=b * t, max_size=b * t)))
    s2 = (pi * pi + frac * (1.0 - pi) ** 2).reshape(b, t)
    return {
        "token_rewards": dense * mask,
        "logp_old": np.log(pi).reshape(b, t),
        "sum_pi_squared": s2,
        "group": group,
        "mask": mask,
    }


def _labels(group: Array) -> NDArray[np.intp]:
    return np.unique(group, return_inverse=True)[1].astype(np.intp)


# ---------------------------------------------------------------------------------------------
# hand-worked values
# ---------------------------------------------------------------------------------------------

F = Fraction


def test_gpg_scales_the_centred_reward_by_the_batch_over_its_nonzero_count() -> None:
    # one non-zero reward in a batch of 4: α = 4; group 0's mean is 1/2
    assert ab.gpg_advantages([1.0, 0.0, 0.0, 0.0], group=[0, 0, 1, 1]).tolist() == [2, -2, 0, 0]
    # α = 3/2, F = 2, mean 2/3
    got = ab.gpg_advantages([F(1), F(0), F(1)], group=[0, 0, 0], f_norm=2.0)
    assert got == [F(1, 4), F(-1, 2), F(1, 4)]
    # a singleton keeps α·r under 'raw' (verl), 0 under 'zero'; α = 3/2
    raw = ab.gpg_advantages([F(3), F(1), F(0)], group=[5, 1, 1], singleton="raw")
    assert raw == [F(9, 2), F(3, 4), F(-3, 4)]
    zero = ab.gpg_advantages([F(3), F(1), F(0)], group=[5, 1, 1])
    assert zero == [F(0), F(3, 4), F(-3, 4)]
    # a fixed α = 1 is Dr GRPO; an all-zero batch has α = B/1 and advantages 0
    r = [0.3, 1.0, 0.0, 0.7]
    same = ab.gpg_advantages(r, group=[0, 0, 1, 1], alpha=1.0)
    np.testing.assert_array_equal(same, adv.grpo_advantages(r, group=[0, 0, 1, 1], std="none"))
    assert ab.gpg_advantages([0.0, 0.0], group=[0, 0]).tolist() == [0.0, 0.0]


def test_opo_subtracts_the_length_weighted_group_mean() -> None:
    assert ab.opo_advantages([F(1), F(0)], group=[0, 0], lengths=[1, 3]) == [F(3, 4), F(-1, 4)]
    # b = (1·2 + 2·1 + 3·0)/6 = 2/3
    got = ab.opo_advantages([F(2), F(1), F(0)], group=[4, 4, 4], lengths=[1, 2, 3])
    assert got == [F(4, 3), F(1, 3), F(-2, 3)]
    np.testing.assert_allclose(
        ab.opo_advantages([2.0, 1.0, 0.0], group=[4, 4, 4], lengths=[1, 2, 3]),
        [4 / 3, 1 / 3, -2 / 3],
        rtol=1e-15,
    )
    # a singleton: 0, or its reward (verl)
    assert ab.opo_advantages([5.0], group=[0], lengths=[3]).tolist() == [0.0]
    assert ab.opo_advantages([5.0], group=[0], lengths=[3], singleton="raw").tolist() == [5.0]


def test_remax_subtracts_the_greedy_reward() -> None:
    assert ab.remax_advantages([1.0, 0.0], baselines=[0.5, 0.5]).tolist() == [0.5, -0.5]
    assert ab.remax_advantages([F(1, 3), 2], baselines=[F(1, 2), 1]) == [F(-1, 6), F(1)]


def test_maxrl_divides_the_centred_reward_by_the_pass_rate() -> None:
    got = ab.maxrl_advantages([F(1), F(0), F(0), F(0)], group=[0, 0, 0, 0], eps=0.0)
    assert got == [F(3), F(-1), F(-1), F(-1)]
    # with ε: (3/4)/(1/4 + 1e-6)
    e = ab.maxrl_advantages([1.0, 0.0, 0.0, 0.0], group=[0, 0, 0, 0])
    assert e[0] == pytest.approx(0.75 / (0.25 + 1e-6), rel=1e-15)
    # no success: 0 (0/0 := 0 when ε = 0); a singleton: its reward under 'raw' (SkyRL)
    assert ab.maxrl_advantages([0.0, 0.0], group=[0, 0], eps=0.0).tolist() == [0.0, 0.0]
    assert ab.maxrl_advantages([F(1), F(0)], group=[0, 0], eps=0.0) == [F(1), F(-1)]
    assert ab.maxrl_advantages([0.5], group=[0], singleton="raw").tolist() == [0.5]


def test_passk_gives_the_best_response_the_gap_to_the_second() -> None:
    got = ab.passk_advantages([1.0, 0.0, 0.5, 2.0], group=[0, 0, 1, 1], std="none")
    assert got.tolist() == [1.0, 0.0, 0.0, 1.5]
    assert ab.passk_advantages([1.0, 0.0], group=[0, 0], std="population", eps=0.0).tolist() == [
        2.0,
        0.0,
    ]
    sample = ab.passk_advantages([1.0, 0.0], group=[0, 0], eps=0.0)
    assert sample[0] == pytest.approx(math.sqrt(2.0), rel=1e-15)
    # a tie at the top: every advantage is 0
    assert ab.passk_advantages([1.0, 1.0, 0.0], group=[0, 0, 0]).tolist() == [0.0, 0.0, 0.0]
    exact = ab.passk_advantages([F(1, 2), F(3, 4), F(1, 4)], group=[0, 0, 0], std="none")
    assert exact == [F(0), F(1, 4), F(0)]


def test_gdpo_normalises_each_component_then_whitens_the_sum() -> None:
    r = [[1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.0, 1.0]]
    got = at.gdpo_advantages(r, group=[0, 0, 1, 1], eps=0.0, whiten_eps=0.0)
    # column 0: ±1/√2 in both groups; column 1: constant in each group, 0; the sum's sample
    # variance over 4 is 2/3: ±(1/√2)/√(2/3) = ±√3/2
    np.testing.assert_allclose(got, [math.sqrt(3) / 2, -math.sqrt(3) / 2] * 2, rtol=1e-15)
    # weights scale a component before the whitening: weight 0 removes it
    w0 = at.gdpo_advantages(r, group=[0, 0, 1, 1], weights=[0.0, 1.0], eps=0.0, whiten_eps=0.0)
    one = at.gdpo_advantages(np.array(r)[:, 1:], group=[0, 0, 1, 1], eps=0.0, whiten_eps=0.0)
    np.testing.assert_array_equal(w0, one)
    # a mask weighs each sequence by its tokens in the batch mean and variance
    masked = at.gdpo_advantages(
        [[1.0], [0.0]],
        group=[0, 1],
        mask=[[1, 1, 1], [1, 0, 0]],
        singleton="raw",
        eps=0.0,
        whiten_eps=0.0,
    )
    np.testing.assert_allclose(masked, [0.5, -1.5], rtol=1e-15)


def test_the_optimal_token_baseline_on_a_hand_worked_group() -> None:
    # π = 0 and Σπ² = 0: w = 1, W_t = t + 1 over valid tokens
    zero = np.zeros((2, 2))
    logp = np.full((2, 2), -800.0)
    # row 0 (one token) has reward 1; row 1 (two tokens) has reward 1 on its last token
    r = np.array([[1.0, 0.0], [0.0, 1.0]])
    mask = np.array([[1.0, 0.0], [1.0, 1.0]])
    tail = at.optimal_token_baseline_advantages(r, logp, zero, group=[0, 0], mask=mask)
    # t = 0: G = (1, 1), B = 1 → 0; t = 1: row 1 alone, its tail baseline is zeroed: A = G = 1
    np.testing.assert_array_equal(tail, [[0.0, 0.0], [0.0, 1.0]])
    kept = at.optimal_token_baseline_advantages(
        r, logp, zero, group=[0, 0], mask=mask, zero_tail=False
    )
    np.testing.assert_array_equal(kept, [[0.0, 0.0], [0.0, 0.0]])
    # row 1 samples a token of probability 1/2 with Σπ² = 1/2: w = 1 − 1 + 1/2 = 1/2, so the
    # returns (1, 0) weigh (1, 1/2): B = 2/3
    half = at.optimal_token_baseline_advantages(
        [[1.0], [0.0]], [[-800.0], [math.log(0.5)]], [[0.0], [0.5]], group=[0, 0], mask=[[1], [1]]
    )
    np.testing.assert_allclose(half, [[1 / 3], [-2 / 3]], rtol=1e-15)
    # importance weights scale w by ρ²: W = (1, 3), B = 1/4
    weighted = at.optimal_token_baseline_advantages(
        [[1.0], [0.0]],
        [[-800.0], [-800.0]],
        [[0.0], [0.0]],
        group=[0, 0],
        mask=[[1], [1]],
        is_weights=[[1.0], [math.sqrt(3.0)]],
    )
    np.testing.assert_allclose(weighted, [[0.75], [-0.25]], rtol=1e-15)
    # a group of one: the advantage is the return
    single = at.optimal_token_baseline_advantages(
        [[0.0, 2.0]], [[-1.0, -1.0]], [[0.5, 0.5]], group=[9], mask=[[1, 1]]
    )
    np.testing.assert_array_equal(single, [[2.0, 2.0]])


def test_the_optimal_token_baseline_aligns_valid_tokens_or_columns() -> None:
    # row 0 has a gap at column 1: its second valid token is in column 2
    r = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    mask = np.array([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    logp, s2 = np.full((2, 3), -800.0), np.zeros((2, 3))
    valid = at.optimal_token_baseline_advantages(
        r, logp, s2, group=[0, 0], mask=mask, positions="valid"
    )
    # by rank: returns (1, 0) at both ranks with W = (1, 1) then (2, 2): B = 1/2 at each
    np.testing.assert_array_equal(valid, [[0.5, 0.0, 0.5], [-0.5, -0.5, 0.0]])
    column = at.optimal_token_baseline_advantages(r, logp, s2, group=[0, 0], mask=mask)
    # by column: column 1 holds row 1 alone (B = its own return 0), column 2 row 0 alone, whose
    # baseline the zero tail does not touch (the lengths are equal)
    np.testing.assert_array_equal(column, [[0.5, 0.0, 0.0], [-0.5, 0.0, 0.0]])
    # a row with no valid token: left out of its group by valid token (its partner is alone, A =
    # G); by column it stays in, and without the zero tail its partner is its own baseline
    r1, m1 = np.array([[1.0], [0.0]]), np.array([[1.0], [0.0]])
    kw: dict[str, Any] = {"group": [0, 0], "mask": m1, "zero_tail": False}
    alone = at.optimal_token_baseline_advantages(
        r1, logp[:, :1], s2[:, :1], positions="valid", **kw
    )
    np.testing.assert_array_equal(alone, [[1.0], [0.0]])
    paired = at.optimal_token_baseline_advantages(r1, logp[:, :1], s2[:, :1], **kw)
    np.testing.assert_array_equal(paired, [[0.0], [0.0]])


# ---------------------------------------------------------------------------------------------
# independent loop implementations
# ---------------------------------------------------------------------------------------------


def _loop_otb(inputs: dict[str, Any], *, zero_tail: bool, eps: float) -> Array:
    """The baseline written entry by entry from its definition (no cumsum, no broadcasting)."""
    r, m = inputs["token_rewards"], inputs["mask"]
    pi, s2 = np.exp(inputs["logp_old"]), inputs["sum_pi_squared"]
    b, t = r.shape
    g = [[sum(r[i, s] * m[i, s] for s in range(u, t)) for u in range(t)] for i in range(b)]
    w = [
        [sum((1 - 2 * pi[i, s] + s2[i, s]) * m[i, s] for s in range(u + 1)) for u in range(t)]
        for i in range(b)
    ]
    labels = list(inputs["group"])
    out = np.zeros((b, t))
    for i in range(b):
        rows = [j for j in range(b) if labels[j] == labels[i]]
        lengths = sorted(int(m[j].sum()) for j in rows)
        for u in range(t):
            if len(rows) == 1:
                base = 0.0
            else:
                num = sum(g[j][u] * w[j][u] * m[j, u] for j in rows)
                den = sum(w[j][u] * m[j, u] for j in rows) + eps
                base = num / den if den > 0 else 0.0
                mine = int(m[i].sum())
                unique = sum(1 for j in rows if int(m[j].sum()) == lengths[-1]) == 1
                if zero_tail and unique and mine == lengths[-1] > lengths[-2] and u >= lengths[-2]:
                    base = 0.0
            out[i, u] = (g[i][u] - base) * m[i, u]
    return out


@given(token_batch(), st.booleans(), st.sampled_from([0.0, 1e-8]))
def test_the_optimal_token_baseline_matches_its_definition_entry_by_entry(
    inputs: dict[str, Any], zero_tail: bool, eps: float
) -> None:
    got = at.optimal_token_baseline_advantages(
        inputs["token_rewards"],
        inputs["logp_old"],
        inputs["sum_pi_squared"],
        group=inputs["group"],
        mask=inputs["mask"],
        zero_tail=zero_tail,
        eps=eps,
    )
    np.testing.assert_allclose(got, _loop_otb(inputs, zero_tail=zero_tail, eps=eps), atol=1e-12)


@given(grouped(min_group=2), st.sampled_from(["sample", "population", "none"]))
def test_passk_matches_a_sort_of_each_group(data: tuple[Array, Array], std: str) -> None:
    r, group = data
    got = ab.passk_advantages(r, group=group, std=std, eps=1e-6)  # type: ignore[arg-type]
    for g in np.unique(group):
        rows = np.flatnonzero(group == g)
        top = np.sort(r[rows])[::-1]
        ddof = {"sample": 1, "population": 0}.get(std)
        scale = 1.0 if ddof is None else float(np.std(r[rows], ddof=ddof)) + 1e-6
        assert np.count_nonzero(got[rows]) <= 1
        assert got[rows].sum() == pytest.approx((top[0] - top[1]) / scale, rel=1e-12, abs=1e-12)


# ---------------------------------------------------------------------------------------------
# properties, each against a wrong variant
# ---------------------------------------------------------------------------------------------

Grouped = Callable[[Array, Array], Array]


def _check_group_sums_zero(impl: Grouped, *, nonneg: bool = False) -> Callable[[], None]:
    @given(grouped(min_group=2, nonneg=nonneg))
    def check(data: tuple[Array, Array]) -> None:
        r, group = data
        a = impl(r, group)
        sums = np.bincount(_labels(group), weights=a)
        scale = np.bincount(_labels(group), weights=np.abs(a) + np.abs(r)) + 1.0
        assert np.all(np.abs(sums) <= 1e-12 * scale), sums

    return check


def _gpg(r: Array, group: Array) -> Array:
    return np.asarray(ab.gpg_advantages(r, group=group))


def gpg_batch_mean(r: Array, group: Array) -> Array:
    """Wrong: the batch mean as baseline instead of each group's."""
    alpha = r.size / max(int(np.count_nonzero(r)), 1)
    return np.asarray(alpha * (r - r.mean()))


def test_gpg_group_sums_are_zero() -> None:
    run_property(_check_group_sums_zero(_gpg))


def test_gpg_group_sum_property_rejects_a_batch_mean_baseline() -> None:
    rejects(_check_group_sums_zero(gpg_batch_mean))


def _maxrl(r: Array, group: Array) -> Array:
    return np.asarray(ab.maxrl_advantages(r, group=group, eps=0.0))


def maxrl_uncentred(r: Array, group: Array) -> Array:
    """Wrong: r/p − 0 (the reward over the pass rate, not centred)."""
    labels = _labels(group)
    p = (np.bincount(labels, weights=r) / np.bincount(labels))[labels]
    return np.asarray(np.divide(r, p, out=np.zeros_like(r), where=p > 0))


def test_maxrl_group_sums_are_zero() -> None:
    run_property(_check_group_sums_zero(_maxrl, nonneg=True))


def test_maxrl_group_sum_property_rejects_an_uncentred_reward() -> None:
    rejects(_check_group_sums_zero(maxrl_uncentred, nonneg=True))


def _check_scale_invariant(impl: Grouped) -> Callable[[], None]:
    @given(grouped(min_group=2, nonneg=True), st.sampled_from([2.0, 0.5, 10.0]))
    def check(data: tuple[Array, Array], c: float) -> None:
        r, group = data
        np.testing.assert_allclose(impl(r * c, group), impl(r, group), rtol=1e-12, atol=1e-12)

    return check


def maxrl_plus_one(r: Array, group: Array) -> Array:
    """Wrong: ε = 1 in the denominator (a 'safe' division that breaks the scale)."""
    return np.asarray(ab.maxrl_advantages(r, group=group, eps=1.0))


def test_maxrl_is_scale_invariant() -> None:
    run_property(_check_scale_invariant(_maxrl))


def test_maxrl_scale_property_rejects_a_large_epsilon() -> None:
    rejects(_check_scale_invariant(maxrl_plus_one))


Lengths = Callable[[Array, Array, Array], Array]


def _check_length_weighted_zero(impl: Lengths) -> Callable[[], None]:
    @given(with_lengths())
    def check(data: tuple[Array, Array, Array]) -> None:
        r, group, lengths = data
        a = impl(r, group, lengths)
        labels = _labels(group)
        sums = np.bincount(labels, weights=lengths * a)
        alone = np.bincount(labels) == 1
        scale = np.bincount(labels, weights=lengths * (np.abs(a) + np.abs(r))) + 1.0
        assert np.all((np.abs(sums) <= 1e-12 * scale) | alone), sums

    return check


def _opo(r: Array, group: Array, lengths: Array) -> Array:
    return np.asarray(ab.opo_advantages(r, group=group, lengths=lengths))


def opo_unweighted(r: Array, group: Array, lengths: Array) -> Array:
    """Wrong: the plain group mean (Dr GRPO) as OPO's baseline."""
    return np.asarray(adv.grpo_advantages(r, group=group, std="none"))


def test_opo_length_weighted_advantages_cancel() -> None:
    run_property(_check_length_weighted_zero(_opo))


def test_opo_property_rejects_an_unweighted_baseline() -> None:
    rejects(_check_length_weighted_zero(opo_unweighted))


def _check_one_best(impl: Grouped) -> Callable[[], None]:
    @given(grouped(min_group=2))
    def check(data: tuple[Array, Array]) -> None:
        r, group = data
        a = impl(r, group)
        for g in np.unique(group):
            rows = np.flatnonzero(group == g)
            nonzero = rows[a[rows] != 0]
            assert nonzero.size <= 1, a[rows]
            assert all(r[i] == r[rows].max() and a[i] > 0 for i in nonzero), (r[rows], a[rows])

    return check


def _passk(r: Array, group: Array) -> Array:
    return np.asarray(ab.passk_advantages(r, group=group))


def passk_against_the_mean(r: Array, group: Array) -> Array:
    """Wrong: every response gets its gap to the group mean (GRPO without a std)."""
    return np.asarray(adv.grpo_advantages(r, group=group, std="none"))


def test_passk_rewards_only_the_best_response() -> None:
    run_property(_check_one_best(_passk))


def test_passk_property_rejects_every_response_against_the_mean() -> None:
    rejects(_check_one_best(passk_against_the_mean))


Gdpo = Callable[[Array, Array, Array], Array]


@st.composite
def gdpo_batch(draw: st.DrawFn) -> tuple[Array, Array, Array]:
    r, group = draw(grouped(min_group=2))  # two sequences at least: a batch sample variance
    lengths = np.array(draw(st.lists(st.integers(1, 6), min_size=r.size, max_size=r.size)), float)
    k = draw(st.integers(1, 3))
    extra = draw(
        st.lists(
            st.sampled_from([0.0, 1.0, 0.5]), min_size=r.size * (k - 1), max_size=r.size * (k - 1)
        )
    )
    rewards = np.column_stack([r, np.array(extra).reshape(r.size, k - 1)])
    t = int(lengths.max())
    mask = (np.arange(t)[None, :] < lengths[:, None]).astype(np.float64)
    return rewards, group, mask


def _check_token_mean_zero(impl: Gdpo) -> Callable[[], None]:
    @given(gdpo_batch())
    def check(data: tuple[Array, Array, Array]) -> None:
        r, group, mask = data
        a = impl(r, group, mask)
        w = mask.sum(axis=1)
        assert abs(float(np.sum(w * a))) <= 1e-9 * float(np.sum(w * (np.abs(a) + 1.0))), a

    return check


def _gdpo(r: Array, group: Array, mask: Array) -> Array:
    return at.gdpo_advantages(r, group=group, mask=mask)


def gdpo_unweighted(r: Array, group: Array, mask: Array) -> Array:
    """Wrong: whitened over sequences, ignoring the token counts."""
    return at.gdpo_advantages(r, group=group)


def test_gdpo_token_weighted_mean_is_zero() -> None:
    run_property(_check_token_mean_zero(_gdpo))


def test_gdpo_mean_property_rejects_whitening_per_sequence() -> None:
    rejects(_check_token_mean_zero(gdpo_unweighted))


Otb = Callable[[dict[str, Any]], Array]


def _check_w_weighted_cancel(impl: Otb) -> Callable[[], None]:
    """Without the zero tail and ε: Σ_i m W A = 0 per group and position (W the cumulative one)."""

    @given(token_batch())
    def check(inputs: dict[str, Any]) -> None:
        a = impl(inputs)
        m = inputs["mask"]
        w = np.cumsum((1 - 2 * np.exp(inputs["logp_old"]) + inputs["sum_pi_squared"]) * m, axis=1)
        labels = _labels(inputs["group"])
        for g in np.flatnonzero(np.bincount(labels) >= 2):
            rows = labels == g
            total = np.sum(m[rows] * w[rows] * a[rows], axis=0)
            scale = np.sum(m[rows] * w[rows] * (np.abs(a[rows]) + 1.0), axis=0)
            assert np.all(np.abs(total) <= 1e-12 * scale), total

    return check


def _otb(inputs: dict[str, Any]) -> Array:
    return at.optimal_token_baseline_advantages(
        inputs["token_rewards"],
        inputs["logp_old"],
        inputs["sum_pi_squared"],
        group=inputs["group"],
        mask=inputs["mask"],
        zero_tail=False,
    )


def otb_per_token_weight(inputs: dict[str, Any]) -> Array:
    """Wrong: each position weighted by its own w_t, not the cumulative W_t."""
    m = inputs["mask"]
    w = 1 - 2 * np.exp(inputs["logp_old"]) + inputs["sum_pi_squared"]
    g = np.cumsum((inputs["token_rewards"] * m)[:, ::-1], axis=1)[:, ::-1]
    labels = _labels(inputs["group"])
    out = g.copy()
    for grp in np.flatnonzero(np.bincount(labels) >= 2):
        rows = labels == grp
        den = np.sum(w[rows] * m[rows], axis=0)
        out[rows] = g[rows] - np.sum(g[rows] * w[rows] * m[rows], axis=0) / den
    return np.asarray(out * m)


def test_otb_w_weighted_advantages_cancel() -> None:
    run_property(_check_w_weighted_cancel(_otb))


def test_otb_property_rejects_a_per_token_weight() -> None:
    rejects(_check_w_weighted_cancel(otb_per_token_weight))


@st.composite
def gapped_batch(draw: st.DrawFn) -> dict[str, Any]:
    """A token batch whose mask has gaps (multi-turn), every row non-empty."""
    inputs = draw(token_batch())
    b, t = inputs["mask"].shape
    bits = np.array(draw(st.lists(st.booleans(), min_size=b * t, max_size=b * t))).reshape(b, t)
    bits[np.arange(b), draw(st.lists(st.integers(0, t - 1), min_size=b, max_size=b))] = True
    return {**inputs, "mask": bits.astype(np.float64)}


def _front(x: Array, mask: Array) -> Array:
    out = np.zeros_like(x)
    for i, row in enumerate(mask):
        idx = np.flatnonzero(row)
        out[i, : idx.size] = x[i, idx]
    return out


def _check_valid_is_packed_columns(impl: Otb) -> Callable[[], None]:
    """Aligning valid tokens is the column baseline of the rows packed to the front."""

    @given(gapped_batch())
    def check(inputs: dict[str, Any]) -> None:
        m = inputs["mask"]
        packed = {k: _front(v, m) if k != "group" else v for k, v in inputs.items()}
        expected = _front(_otb(packed), np.ones_like(m))
        np.testing.assert_allclose(_front(impl(inputs), m), expected, rtol=1e-13, atol=1e-13)

    return check


def _otb_valid(inputs: dict[str, Any]) -> Array:
    return at.optimal_token_baseline_advantages(
        inputs["token_rewards"],
        inputs["logp_old"],
        inputs["sum_pi_squared"],
        group=inputs["group"],
        mask=inputs["mask"],
        zero_tail=False,
        positions="valid",
    )


def test_otb_valid_positions_are_the_packed_columns() -> None:
    run_property(_check_valid_is_packed_columns(_otb_valid))


def test_otb_valid_positions_property_rejects_columns() -> None:
    rejects(_check_valid_is_packed_columns(_otb))


def _check_antisymmetric(impl: Callable[[Array, Array], Array]) -> Callable[[], None]:
    @given(st.lists(st.tuples(REWARD, REWARD), min_size=1, max_size=6))
    def check(pairs: list[tuple[float, float]]) -> None:
        r, b = (np.array(x) for x in zip(*pairs, strict=True))
        np.testing.assert_array_equal(impl(r, b), -impl(b, r))

    return check


def remax_plus(r: Array, b: Array) -> Array:
    """Wrong: the baseline added."""
    return np.asarray(r + b)


def test_remax_is_antisymmetric() -> None:
    run_property(_check_antisymmetric(lambda r, b: np.asarray(ab.remax_advantages(r, baselines=b))))


def test_remax_property_rejects_an_added_baseline() -> None:
    rejects(_check_antisymmetric(remax_plus))


# ---------------------------------------------------------------------------------------------
# refusals name the parameter and the fix
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: ab.maxrl_advantages([1.0, -1.0], group=[0, 0]), ["rewards", ">= 0"]),
        (lambda: ab.passk_advantages([1.0, 0.0], group=[0, 1]), ["group", "two"]),
        (lambda: ab.opo_advantages([1.0, 0.0], group=[0, 0], lengths=[0, 0]), ["lengths", "drop"]),
        (lambda: ab.opo_advantages([1.0], group=[0], lengths=[1, 2]), ["lengths", "rewards"]),
        (lambda: ab.opo_advantages([1.0], group=[0], lengths=[-1]), ["lengths", ">= 0"]),
        (lambda: ab.gpg_advantages([1.0], group=[0], f_norm=0.0), ["f_norm", "> 0"]),
        (
            lambda: ab.gpg_advantages([1.0], group=[0], alpha="batch"),  # type: ignore[arg-type]
            ["alpha", "nonzero"],
        ),
        (lambda: ab.remax_advantages([1.0], baselines=[1.0, 2.0]), ["baselines", "greedy"]),
        (lambda: at.gdpo_advantages([1.0, 2.0], group=[0, 0]), ["rewards", "2"]),
        (lambda: at.gdpo_advantages([[1.0], [0.0]], group=[0, 0], weights=[1, 2]), ["weights"]),
        (
            lambda: at.optimal_token_baseline_advantages(
                [[1.0]], [[0.5]], [[0.1]], group=[0], mask=[[1]]
            ),
            ["logp_old", "<= 0"],
        ),
        (
            lambda: at.optimal_token_baseline_advantages(
                [[1.0]], [[-0.5]], [[1.5]], group=[0], mask=[[1]]
            ),
            ["sum_pi_squared", "[0, 1]"],
        ),
        (
            lambda: at.optimal_token_baseline_advantages(
                [[1.0]], [[-0.5]], [[0.5]], group=[0], mask=[[0.5]]
            ),
            ["mask", "0 and 1"],
        ),
        (
            lambda: at.optimal_token_baseline_advantages(
                [[1.0]], [[-0.5]], [[0.5]], group=[0], mask=[[1]], eps=-1.0
            ),
            ["eps", ">= 0"],
        ),
        (
            lambda: at.optimal_token_baseline_advantages(
                [[1.0]],
                [[-0.5]],
                [[0.5]],
                group=[0],
                mask=[[1]],
                positions="rank",  # type: ignore[arg-type]
            ),
            ["positions", "column"],
        ),
    ],
)
def test_refusals_name_the_parameter(call: Callable[[], Any], words: list[str]) -> None:
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    for word in words:
        assert word in str(info.value), str(info.value)


# ---------------------------------------------------------------------------------------------
# the conformance specs: refimpl's own functions pass, wrong candidates fail the named check
# ---------------------------------------------------------------------------------------------

OWN: dict[str, Callable[..., Any]] = {
    "gpg_advantages": ab.gpg_advantages,
    "opo_advantages": lambda r, *, group, mask: ab.opo_advantages(
        r, group=group, lengths=np.asarray(mask).sum(axis=1)
    ),
    "remax_advantages": ab.remax_advantages,
    "maxrl_advantages": lambda r, *, group: ab.maxrl_advantages(r, group=group, eps=0.0),
    "passk_advantages": ab.passk_advantages,
    "gdpo_advantages": at.gdpo_advantages,
    "optimal_token_baseline_advantages": at.optimal_token_baseline_advantages,
}


@pytest.mark.parametrize("spec", sorted(OWN))
def test_refimpls_own_estimator_passes_its_spec(spec: str) -> None:
    report = check_conformance(OWN[spec], spec=spec, max_examples=15)
    report.raise_if_failed()
    assert sum(r.status == "passed" for r in report.results) >= 4


WRONG: list[tuple[str, Callable[..., Any], str]] = [
    ("gpg_advantages", lambda r, *, group: ab.gpg_advantages(r, group=group, alpha=1.0), "values"),
    (
        "opo_advantages",
        lambda r, *, group, mask: adv.grpo_advantages(r, group=group, std="none"),
        "zero_group_sum",
    ),
    ("remax_advantages", lambda r, *, baselines: np.asarray(r) + baselines, "antisymmetry"),
    (
        "maxrl_advantages",
        lambda r, *, group: ab.maxrl_advantages(r, group=group, eps=1.0),
        "scale_invariance",
    ),
    (
        "passk_advantages",
        lambda r, *, group: adv.grpo_advantages(r, group=group, std="none"),
        "one_best_per_group",
    ),
    (
        "gdpo_advantages",
        lambda r, *, group, weights, mask: at.gdpo_advantages(r, group=group, weights=weights),
        "zero_batch_mean",
    ),
    (
        "optimal_token_baseline_advantages",
        lambda r, lp, s2, *, group, mask: otb_per_token_weight(
            {"token_rewards": r, "logp_old": lp, "sum_pi_squared": s2, "group": group, "mask": mask}
        ),
        "values",
    ),
]


def _unwhitened_gdpo(r: Array, *, group: Array, weights: Array, mask: Array) -> Array:
    """Wrong: the weighted sum of the components' GRPO advantages, never whitened."""
    cols = [adv.grpo_advantages(r[:, k], group=group) for k in range(r.shape[1])]
    return np.asarray(sum(w * c for w, c in zip(weights, cols, strict=True)))


def _otb_singleton_own_baseline(
    r: Array, lp: Array, s2: Array, *, group: Array, mask: Array
) -> Array:
    """Wrong: a group of one is its own baseline (advantage 0 instead of its return)."""
    labels = _labels(group)
    out = at.optimal_token_baseline_advantages(r, lp, s2, group=group, mask=mask)
    out[np.bincount(labels)[labels] == 1] = 0.0
    return out


def _passk_gap_to_zero(r: Array, *, group: Array) -> Array:
    """Wrong: each group's best response gets its own reward (as if the second best were 0)."""
    out = np.zeros_like(r)
    for g in np.unique(group):
        rows = np.flatnonzero(group == g)
        best = rows[np.argmax(r[rows])]
        out[best] = r[best]
    return out


WRONG += [
    ("gpg_advantages", lambda r, *, group: gpg_batch_mean(r, group), "zero_group_sum"),
    ("maxrl_advantages", lambda r, *, group: maxrl_uncentred(r, group), "zero_group_sum"),
    (
        "remax_advantages",
        lambda r, *, baselines: np.asarray(r) - np.asarray(baselines) / 2,
        "reward_equal_to_baseline_is_zero",
    ),
    ("passk_advantages", _passk_gap_to_zero, "constant_group_is_zero"),
    ("gdpo_advantages", _unwhitened_gdpo, "weight_scale_invariance"),
    ("optimal_token_baseline_advantages", _otb_singleton_own_baseline, "singleton_gets_return"),
]


@pytest.mark.parametrize(("spec", "wrong", "check"), WRONG, ids=[f"{w[0]}-{w[2]}" for w in WRONG])
def test_a_wrong_estimator_fails_the_check_that_reads_it(
    spec: str, wrong: Callable[..., Any], check: str
) -> None:
    report = check_conformance(wrong, spec=spec, checks=[check], max_examples=30, shrink=False)
    assert [r.status for r in report.results] == ["failed"], report.summary()


def _otb_exact(r: list[list[F]], w: list[list[F]], eps: F) -> list[list[F]]:
    """The optimal token baseline's advantages of one group of full-length rows, in Fractions
    from the docstring's formula: G the reward-to-go, W the running sum of w, and
    B_t = Σ_i W_it G_it / (Σ_i W_it + ε)."""
    n = len(r[0])
    g = [[sum(row[t:], F(0)) for t in range(n)] for row in r]
    big_w = [[sum(row[: t + 1], F(0)) for t in range(n)] for row in w]
    base = [
        sum((big_w[i][t] * g[i][t] for i in range(len(r))), F(0))
        / (sum((big_w[i][t] for i in range(len(r))), F(0)) + eps)
        for t in range(n)
    ]
    return [[g[i][t] - base[t] for t in range(n)] for i in range(len(r))]


@pytest.mark.parametrize("eps", [F(0), F(1, 4), F(3)])
def test_the_optimal_token_baseline_with_eps_by_exact_fractions(eps: F) -> None:
    """ε in the baseline's denominator, against exact Fractions on a group without symmetry:
    π = 1/2 with Σπ² = 1/2 (w = 1/2) and π = 1/4 with Σπ² = 3/8 (w = 7/8), rewards of unequal
    sums (ε = 1/4: B = (40/13, 3))."""
    logp = np.log([[0.5, 0.5], [0.25, 0.25]])
    sq = [[0.5, 0.5], [0.375, 0.375]]
    r = [[F(1), F(2)], [F(0), F(4)]]
    w = [[F(1, 2), F(1, 2)], [F(7, 8), F(7, 8)]]
    got = at.optimal_token_baseline_advantages(
        np.array(r, dtype=float), logp, sq, group=[0, 0], mask=np.ones((2, 2)), eps=float(eps)
    )
    want = [[float(x) for x in row] for row in _otb_exact(r, w, eps)]
    np.testing.assert_allclose(got, want, rtol=1e-15, atol=1e-15)
