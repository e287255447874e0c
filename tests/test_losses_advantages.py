"""Properties of refimpl.losses.advantages: GRPO z-score, RLOO, REINFORCE++.

Values are checked exactly on hand-worked cases (Fractions where rational), against an independent
torch implementation on Hypothesis-drawn batches, and by properties that are each run against a
deliberately wrong variant (which they must reject).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import torch
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

import refimpl.losses.advantages as A

Array = NDArray[np.float64]
Impl = Callable[[Array, Array], Array]

# ---------------------------------------------------------------------------------------------
# strategies
# ---------------------------------------------------------------------------------------------

#: Rewards as RL produces them: binary, small integers and halves, and arbitrary floats.
REWARD = st.one_of(
    st.sampled_from([0.0, 1.0, -1.0, 0.5, 2.0]),
    st.floats(-10.0, 10.0, allow_nan=False, allow_subnormal=False),
)


@st.composite
def grouped_rewards(draw: st.DrawFn, *, min_group: int = 1) -> tuple[Array, Array]:
    """``(rewards, group)``: 1..4 groups of unequal sizes, ids shuffled and not contiguous."""
    sizes = draw(st.lists(st.integers(min_group, 5), min_size=1, max_size=4))
    ids = draw(st.permutations([3, 11, 0, 7][: len(sizes)]))
    group = [g for g, s in zip(ids, sizes, strict=True) for _ in range(s)]
    order = draw(st.permutations(range(len(group))))
    group = [group[i] for i in order]
    rewards = draw(st.lists(REWARD, min_size=len(group), max_size=len(group)))
    return np.array(rewards, dtype=np.float64), np.array(group, dtype=np.int64)


@st.composite
def masked_rewards(draw: st.DrawFn) -> tuple[Array, Array, Array]:
    """``(rewards, group, mask)`` with a right-padded (B, T) mask, every row non-empty."""
    rewards, group = draw(grouped_rewards(min_group=2))
    t = draw(st.integers(1, 6))
    lengths = draw(st.lists(st.integers(1, t), min_size=rewards.size, max_size=rewards.size))
    mask = (np.arange(t)[None, :] < np.array(lengths)[:, None]).astype(np.float64)
    return rewards, group, mask


def _tolerance(rewards: Array, scale: float) -> float:
    """Absolute tolerance: a few ulps of the largest reward per summand, over the scale."""
    return (
        64.0
        * np.finfo(np.float64).eps
        * (1.0 + float(np.max(np.abs(rewards))))
        * rewards.size
        / scale
    )


# ---------------------------------------------------------------------------------------------
# independent torch implementations
# ---------------------------------------------------------------------------------------------


def torch_grpo(
    rewards: Array, group: Array, *, ddof: int, eps: float, placement: str, raw_singleton: bool
) -> Array:
    r = torch.tensor(rewards, dtype=torch.float64)
    out = torch.zeros_like(r)
    for g in set(group.tolist()):
        idx = torch.tensor(np.flatnonzero(group == g))
        x = r[idx]
        if x.numel() == 1:
            mean, var = (
                torch.tensor(0.0, dtype=torch.float64),
                torch.tensor(1.0, dtype=torch.float64),
            )
            if not raw_singleton:
                out[idx] = 0.0
                continue
        else:
            mean, var = x.mean(), x.var(correction=ddof)
        if placement == "std":
            denom = var.sqrt() + eps
        elif placement == "variance":
            denom = (var + eps).sqrt()
        else:
            denom = torch.clamp(var, min=eps).sqrt()
        out[idx] = (x - mean) / denom if float(denom) > 0 else torch.zeros_like(x)
    return out.numpy()


def torch_rloo(rewards: Array, group: Array) -> Array:
    r = torch.tensor(rewards, dtype=torch.float64)
    out = torch.zeros_like(r)
    for i in range(r.numel()):
        others = [j for j in range(r.numel()) if j != i and group[j] == group[i]]
        if others:
            out[i] = r[i] - r[torch.tensor(others)].mean()
    return out.numpy()


def torch_reinforce_pp(rewards: Array, group: Array | None, mask: Array, *, ddof: int) -> Array:
    """verl's route: group-centre, broadcast to tokens, masked whitening over the tokens."""
    r = torch.tensor(rewards, dtype=torch.float64)
    if group is not None:
        for g in set(group.tolist()):
            idx = torch.tensor(np.flatnonzero(group == g))
            r[idx] = r[idx] - r[idx].mean()
    m = torch.tensor(mask, dtype=torch.float64)
    tokens = r[:, None] * m
    n = m.sum()
    mean = tokens.sum() / n
    var = (((tokens - mean) ** 2) * m).sum() / (n - ddof)
    whitened = (tokens - mean) * torch.rsqrt(var + 1e-8) * m
    return (whitened.sum(dim=1) / m.sum(dim=1)).numpy()


# ---------------------------------------------------------------------------------------------
# wrong variants
# ---------------------------------------------------------------------------------------------


def grpo_population_as_sample(rewards: Array, group: Array) -> Array:
    """Wrong: the population std where the sample std is declared."""
    return A.grpo_advantages(rewards, group=group, std="population", eps=0.0)


def grpo_eps_inside_sqrt(rewards: Array, group: Array) -> Array:
    """Wrong: ``√(σ² + ε)`` where ``σ + ε`` is declared."""
    return A.grpo_advantages(rewards, group=group, eps=0.25, eps_placement="variance")


def rloo_including_self(rewards: Array, group: Array) -> Array:
    """Wrong: RLOO whose baseline is the group mean including the sample itself."""
    return A.grpo_advantages(rewards, group=group, std="none")


def centred_by_batch_mean(rewards: Array, group: Array) -> Array:
    """Wrong: centred by the batch mean instead of each group's mean."""
    return np.asarray(rewards - rewards.mean(), dtype=np.float64)


def reinforce_pp_sequence_weighted(rewards: Array, mask: Array) -> Array:
    """Wrong: batch statistics per sequence, ignoring the token counts."""
    return A.reinforce_pp_advantages(rewards, std="population", eps=0.0)


# ---------------------------------------------------------------------------------------------
# (1) exact values on hand-worked cases
# ---------------------------------------------------------------------------------------------


def test_grpo_sample_and_population_z_scores_by_hand() -> None:
    r = [1.0, 0.0, 0.0, 1.0]  # mean 1/2, Σ(r − m)² = 1: sample σ = 1/√3, population σ = 1/2
    sample = A.grpo_advantages(r, group=[5, 5, 5, 5], eps=0.0)
    np.testing.assert_allclose(sample, np.array([1, -1, -1, 1]) * math.sqrt(3) / 2, rtol=1e-15)
    population = A.grpo_advantages(r, group=[5, 5, 5, 5], std="population", eps=0.0)
    np.testing.assert_array_equal(population, [1.0, -1.0, -1.0, 1.0])


@pytest.mark.parametrize(
    ("placement", "eps", "expected"),
    [
        ("std", 0.25, 0.5 / 0.75),  # σ = 1/2: 0.5/(0.5 + 0.25)
        ("variance", 0.25, 0.5 / math.sqrt(0.5)),  # 0.5/√(0.25 + 0.25)
        ("floor", 0.1, 1.0),  # √max(0.25, 0.1) = 0.5
        ("floor", 1.0, 0.5),  # √max(0.25, 1) = 1
    ],
)
def test_grpo_eps_placement_by_hand(placement: A.EpsPlacement, eps: float, expected: float) -> None:
    out = A.grpo_advantages(
        [1.0, 0.0], group=[0, 0], std="population", eps=eps, eps_placement=placement
    )
    np.testing.assert_allclose(out, [expected, -expected], rtol=1e-15)


def test_grpo_mean_centred_is_exact_with_fractions() -> None:
    r = [Fraction(1, 3), Fraction(2), Fraction(5, 7), Fraction(1)]
    out = A.grpo_advantages(r, group=[0, 1, 0, 1], std="none")
    assert out == [
        Fraction(1, 3) - Fraction(11, 21),
        Fraction(1, 2),
        Fraction(5, 7) - Fraction(11, 21),
        Fraction(-1, 2),
    ]
    assert all(isinstance(x, Fraction) for x in out)


def test_grpo_z_score_of_fractions_is_float_from_the_exact_moments() -> None:
    r = [Fraction(1, 10), Fraction(2, 10), Fraction(3, 10)]  # sample σ = 1/10 exactly
    out = A.grpo_advantages(r, group=[0, 0, 0], eps=0.0)
    np.testing.assert_array_equal(out, [-1.0, 0.0, 1.0])


#: Rational rewards without symmetry (groups of 3, 2 and 1 of unequal spread, no value ±1).
EXACT_REWARDS = [
    Fraction(1, 3),
    Fraction(5, 7),
    Fraction(9, 4),
    Fraction(-3, 8),
    Fraction(2),
    Fraction(7, 5),
]
EXACT_GROUPS = [0, 0, 0, 1, 1, 2]


def _exact_mode_calls() -> list[tuple[str, dict[str, Any]]]:
    """Every option of the advantage functions that take Fractions, with a float result."""
    calls: list[tuple[str, dict[str, Any]]] = []
    for std in ("sample", "population"):
        for placement in A._PLACEMENTS:
            for eps in (0.0, 0.25):
                common = {"std": std, "eps": eps, "eps_placement": placement}
                for scope in A._SCOPES:
                    for alone in ("zero", "raw"):
                        options = {**common, "std_scope": scope, "singleton": alone}
                        calls.append(("grpo_advantages", {"group": EXACT_GROUPS, **options}))
                calls.append(("reinforce_pp_advantages", common))
                calls.append(("reinforce_pp_advantages", {"group": EXACT_GROUPS, **common}))
    return calls


@pytest.mark.parametrize(("name", "options"), _exact_mode_calls())
def test_fraction_rewards_give_the_float_result_under_every_option(
    name: str, options: dict[str, Any]
) -> None:
    """Fraction rewards take the exact path for the mean and variance (group or batch scope);
    its float result is the float path's up to rounding, under every option: a moment wrong only
    in the exact path (a sum started at -1 instead of 0) moves it by far more."""
    exact = getattr(A, name)(EXACT_REWARDS, **options)
    floats = getattr(A, name)(np.array([float(x) for x in EXACT_REWARDS]), **options)
    np.testing.assert_allclose(np.asarray(exact, dtype=np.float64), floats, rtol=1e-13, atol=1e-15)


def test_grpo_batch_scope_uses_the_batch_std_of_raw_rewards_and_the_group_mean() -> None:
    # group means 1 and 4; batch mean 5/2, Σ(r − 5/2)² = 11, sample var 11/3 (TRL "batch")
    out = A.grpo_advantages([0.0, 2.0, 4.0, 4.0], group=[0, 0, 1, 1], eps=0.0, std_scope="batch")
    np.testing.assert_allclose(out, np.array([-1.0, 1.0, 0.0, 0.0]) / math.sqrt(11 / 3), rtol=1e-15)


def test_grpo_constant_group_gives_zero_even_without_eps() -> None:
    out = A.grpo_advantages([2.0, 2.0, 1.0, 3.0], group=[0, 0, 1, 1], eps=0.0)
    np.testing.assert_array_equal(out[:2], [0.0, 0.0])


@pytest.mark.parametrize(
    ("singleton", "expected"),
    [("zero", 0.0), ("raw", 3.0 / (1.0 + 1e-6))],
)
def test_grpo_singleton_rules(singleton: A.Singleton, expected: float) -> None:
    out = A.grpo_advantages([1.0, 0.0, 3.0], group=[0, 0, 9], singleton=singleton)
    assert out[2] == pytest.approx(expected, rel=1e-15)
    half = 0.5 / (math.sqrt(0.5) + 1e-6)  # the pair [1, 0]: sample σ = √(1/2)
    np.testing.assert_allclose(out[:2], [half, -half], rtol=1e-15)


def test_rloo_by_hand_exact_and_singletons() -> None:
    assert A.rloo_advantages([Fraction(1), Fraction(0), Fraction(0)], group=[0, 0, 0]) == [
        1,
        Fraction(-1, 2),
        Fraction(-1, 2),
    ]
    np.testing.assert_array_equal(
        A.rloo_advantages([1.0, 3.0, 5.0], group=[0, 0, 1]), [-2.0, 2.0, 0.0]
    )
    raw = A.rloo_advantages([1.0, 3.0, 5.0], group=[0, 0, 1], singleton="raw")
    np.testing.assert_array_equal(raw, [-2.0, 2.0, 5.0])


def test_reinforce_pp_by_hand() -> None:
    # weights 3 and 1: mean 3/4, population variance 3/16
    out = A.reinforce_pp_advantages(
        [1.0, 0.0], mask=[[1, 1, 1], [1, 0, 0]], std="population", eps=0.0
    )
    np.testing.assert_allclose(out, [1 / math.sqrt(3), -math.sqrt(3)], rtol=1e-15)
    # baseline: centred [1/2, −1/2, 0, 0]; population variance 1/8
    base = A.reinforce_pp_advantages(
        [1.0, 0.0, 5.0, 5.0], group=[0, 0, 1, 1], std="population", eps=0.0
    )
    np.testing.assert_allclose(base, [math.sqrt(2), -math.sqrt(2), 0.0, 0.0], rtol=1e-15)
    # a sequence without a valid token gets 0 and no weight
    empty = A.reinforce_pp_advantages(
        [1.0, 0.0, 9.0], mask=[[1], [1], [0]], std="population", eps=0.0
    )
    np.testing.assert_array_equal(empty, [1.0, -1.0, 0.0])
    # std="none" only centres
    np.testing.assert_array_equal(A.reinforce_pp_advantages([1.0, 3.0], std="none"), [-1.0, 1.0])


# ---------------------------------------------------------------------------------------------
# (2) against independent torch implementations
# ---------------------------------------------------------------------------------------------


@given(
    batch=grouped_rewards(),
    std=st.sampled_from([("sample", 1), ("population", 0)]),
    placement=st.sampled_from(["std", "variance", "floor"]),
    eps=st.sampled_from([0.0, 1e-6, 1e-4, 0.5]),
    raw=st.booleans(),
)
def test_grpo_matches_torch(
    batch: tuple[Array, Array],
    std: tuple[A.Std, int],
    placement: A.EpsPlacement,
    eps: float,
    raw: bool,
) -> None:
    rewards, group = batch
    found = A.grpo_advantages(
        rewards,
        group=group,
        std=std[0],
        eps=eps,
        eps_placement=placement,
        singleton="raw" if raw else "zero",
    )
    expected = torch_grpo(
        rewards, group, ddof=std[1], eps=eps, placement=placement, raw_singleton=raw
    )
    for g in set(group.tolist()):
        sel = group == g
        spread = float(np.std(rewards[sel], ddof=0)) if sel.sum() > 1 else 1.0
        scale = max(spread, math.sqrt(eps), eps, 1e-300)
        np.testing.assert_allclose(
            found[sel], expected[sel], rtol=1e-11, atol=_tolerance(rewards, scale)
        )


@given(batch=grouped_rewards())
def test_rloo_matches_torch(batch: tuple[Array, Array]) -> None:
    rewards, group = batch
    found = A.rloo_advantages(rewards, group=group)
    np.testing.assert_allclose(
        found, torch_rloo(rewards, group), rtol=1e-12, atol=_tolerance(rewards, 1.0)
    )


@given(
    batch=masked_rewards(),
    baseline=st.booleans(),
    std=st.sampled_from([("sample", 1), ("population", 0)]),
)
def test_reinforce_pp_matches_torch_token_whitening(
    batch: tuple[Array, Array, Array], baseline: bool, std: tuple[A.Std, int]
) -> None:
    rewards, group, mask = batch
    grp = group if baseline else None
    found = A.reinforce_pp_advantages(rewards, group=grp, mask=mask, std=std[0])
    expected = torch_reinforce_pp(rewards, grp, mask, ddof=std[1])
    np.testing.assert_allclose(found, expected, rtol=1e-10, atol=_tolerance(rewards, 1e-4))


# ---------------------------------------------------------------------------------------------
# (3) properties, each rejecting a wrong variant
# ---------------------------------------------------------------------------------------------


def _check_sample_std_is_one(impl: Impl) -> Callable[[], None]:
    @given(batch=grouped_rewards(min_group=2))
    def check(batch: tuple[Array, Array]) -> None:
        rewards, group = batch
        a = impl(rewards, group)
        for g in set(group.tolist()):
            sel = group == g
            if np.ptp(rewards[sel]) > 1e-3:
                assert float(np.sum(a[sel] ** 2)) == pytest.approx(sel.sum() - 1, rel=1e-9)

    return check


def _grpo_sample(rewards: Array, group: Array) -> Array:
    return A.grpo_advantages(rewards, group=group, std="sample", eps=0.0)


def test_grpo_sample_std_has_unit_sample_std_per_group() -> None:
    run_property(_check_sample_std_is_one(_grpo_sample))


def test_unit_std_property_rejects_population_std() -> None:
    rejects(_check_sample_std_is_one(grpo_population_as_sample))


def _check_eps_added_to_std(impl: Impl) -> Callable[[], None]:
    @given(batch=grouped_rewards(min_group=2))
    def check(batch: tuple[Array, Array]) -> None:
        rewards, group = batch
        a = impl(rewards, group)
        for g in set(group.tolist()):
            sel = group == g
            sigma = float(np.std(rewards[sel], ddof=1))
            centred = rewards[sel] - rewards[sel].mean()
            np.testing.assert_allclose(a[sel] * (sigma + 0.25), centred, rtol=1e-9, atol=1e-12)

    return check


def _grpo_eps_on_std(rewards: Array, group: Array) -> Array:
    return A.grpo_advantages(rewards, group=group, eps=0.25, eps_placement="std")


def test_grpo_eps_is_added_to_the_std() -> None:
    run_property(_check_eps_added_to_std(_grpo_eps_on_std))


def test_eps_placement_property_rejects_eps_inside_the_sqrt() -> None:
    rejects(_check_eps_added_to_std(grpo_eps_inside_sqrt))


def _check_baseline_excludes_self(impl: Impl) -> Callable[[], None]:
    @given(batch=grouped_rewards(min_group=2), bump=st.sampled_from([1.0, -3.0, 7.5]))
    def check(batch: tuple[Array, Array], bump: float) -> None:
        rewards, group = batch
        moved = rewards.copy()
        moved[0] += bump
        baseline = rewards[0] - impl(rewards, group)[0]
        assert moved[0] - impl(moved, group)[0] == pytest.approx(baseline, abs=1e-9)

    return check


def _rloo(rewards: Array, group: Array) -> Array:
    return A.rloo_advantages(rewards, group=group)


def test_rloo_baseline_does_not_depend_on_the_own_reward() -> None:
    run_property(_check_baseline_excludes_self(_rloo))


def test_own_reward_property_rejects_rloo_including_self() -> None:
    rejects(_check_baseline_excludes_self(rloo_including_self))


def _check_group_sums_vanish(impl: Impl) -> Callable[[], None]:
    @given(batch=grouped_rewards(min_group=2))
    def check(batch: tuple[Array, Array]) -> None:
        rewards, group = batch
        a = impl(rewards, group)
        for g in set(group.tolist()):
            assert float(np.sum(a[group == g])) == pytest.approx(0.0, abs=1e-9)

    return check


def test_advantages_sum_to_zero_in_every_group() -> None:
    run_property(_check_group_sums_vanish(_rloo))
    run_property(_check_group_sums_vanish(_grpo_sample))
    run_property(_check_group_sums_vanish(lambda r, g: A.grpo_advantages(r, group=g, std="none")))


def test_group_sum_property_rejects_the_batch_mean() -> None:
    rejects(_check_group_sums_vanish(centred_by_batch_mean))


def _check_token_weighted_mean_zero(impl: Callable[[Array, Array], Array]) -> Callable[[], None]:
    @given(batch=masked_rewards())
    def check(batch: tuple[Array, Array, Array]) -> None:
        rewards, _, mask = batch
        a = impl(rewards, mask)
        lengths = mask.sum(axis=1)
        assert float(np.sum(lengths * a)) == pytest.approx(0.0, abs=1e-6)

    return check


def _reinforce_pp_tokens(rewards: Array, mask: Array) -> Array:
    return A.reinforce_pp_advantages(rewards, mask=mask, std="population", eps=0.0)


def test_reinforce_pp_has_zero_token_weighted_mean() -> None:
    run_property(_check_token_weighted_mean_zero(_reinforce_pp_tokens))


def test_token_weighted_mean_property_rejects_sequence_weighting() -> None:
    rejects(_check_token_weighted_mean_zero(reinforce_pp_sequence_weighted))


def _check_singleton_gets_zero(impl: Impl) -> Callable[[], None]:
    @given(batch=grouped_rewards(), alone=REWARD.filter(lambda x: x != 0.0))
    def check(batch: tuple[Array, Array], alone: float) -> None:
        rewards, group = batch
        r = np.append(rewards, alone)
        g = np.append(group, 99)
        assert impl(r, g)[-1] == 0.0

    return check


def test_default_singleton_rule_gives_zero() -> None:
    run_property(_check_singleton_gets_zero(_rloo))
    run_property(_check_singleton_gets_zero(_grpo_sample))


def test_singleton_property_rejects_the_raw_rule() -> None:
    rejects(_check_singleton_gets_zero(lambda r, g: A.rloo_advantages(r, group=g, singleton="raw")))


# ---------------------------------------------------------------------------------------------
# (4) validation: each rule just inside and just outside
# ---------------------------------------------------------------------------------------------


def test_rewards_validation() -> None:
    assert A.rloo_advantages([1.0], group=[0]).shape == (1,)
    with pytest.raises(
        ValueError, match=r"rewards must hold at least one reward; got rewards=.*B >= 1"
    ):
        A.rloo_advantages([], group=[])
    with pytest.raises(ValueError, match=r"rewards must contain only finite values"):
        A.grpo_advantages([1.0, math.nan], group=[0, 0])
    with pytest.raises(ValueError, match=r"rewards must be 1-D"):
        A.grpo_advantages([[1.0, 0.0]], group=[0, 0])
    with pytest.raises(TypeError, match=r"rewards must be an array of real numbers"):
        A.grpo_advantages(["1", "0"], group=[0, 0])


def test_group_validation() -> None:
    np.testing.assert_array_equal(A.rloo_advantages([1.0, 0.0], group=[2.0, 2.0]), [1.0, -1.0])
    with pytest.raises(
        ValueError, match=r"group and rewards must have the same length.*one prompt id"
    ):
        A.rloo_advantages([1.0, 0.0], group=[0, 0, 0])
    with pytest.raises(ValueError, match=r"group must hold integer prompt ids.*Entry 1 is 0.5"):
        A.rloo_advantages([1.0, 0.0], group=[0.0, 0.5])
    with pytest.raises(ValueError, match=r"group must hold integer prompt ids.*booleans"):
        A.rloo_advantages([1.0, 0.0], group=[True, False])


def test_eps_validation() -> None:
    A.grpo_advantages([1.0, 0.0], group=[0, 0], eps=0.0)
    with pytest.raises(ValueError, match=r"eps must be >= 0 .*got eps=-1e-12. Pass eps >= 0"):
        A.grpo_advantages([1.0, 0.0], group=[0, 0], eps=-1e-12)
    with pytest.raises(ValueError, match=r"eps must be >= 0"):
        A.reinforce_pp_advantages([1.0, 0.0], eps=-1.0)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("std", "unbiased"),
        ("eps_placement", "inside"),
        ("std_scope", "global"),
        ("singleton", "nan"),
    ],
)
def test_grpo_options_are_checked(option: str, value: str) -> None:
    kwargs: dict[str, Any] = {option: value}
    with pytest.raises(ValueError, match=rf"{option} must be one of .*got {option}='{value}'"):
        A.grpo_advantages([1.0, 0.0], group=[0, 0], **kwargs)


def test_singleton_error_rule() -> None:
    A.grpo_advantages([1.0, 0.0, 2.0, 2.0], group=[0, 0, 1, 1], singleton="error")
    with pytest.raises(
        ValueError, match=r"at least two sequences in every group.*Sequence 2 is alone"
    ):
        A.grpo_advantages([1.0, 0.0, 2.0], group=[0, 0, 1], singleton="error")
    with pytest.raises(ValueError, match=r"Sequence 0 is alone"):
        A.rloo_advantages([1.0, 0.0, 2.0], group=[5, 0, 0], singleton="error")
    with pytest.raises(ValueError, match=r"Sequence 1 is alone"):
        A.reinforce_pp_advantages([1.0, 0.0, 2.0], group=[0, 1, 0], singleton="error")


def test_reinforce_pp_mask_validation() -> None:
    A.reinforce_pp_advantages([1.0, 0.0], mask=[[1, 0], [1, 0]])
    with pytest.raises(ValueError, match=r"mask and rewards must have one row per sequence"):
        A.reinforce_pp_advantages([1.0, 0.0], mask=[[1, 0]])
    with pytest.raises(ValueError, match=r"(?s)mask must hold only 0 and 1.*Entry 1 is 0.5"):
        A.reinforce_pp_advantages([1.0, 0.0], mask=np.array([[1, 0.5], [1, 0]]))
    with pytest.raises(
        ValueError, match=r"mask must leave at least two valid tokens.*std='sample'"
    ):
        A.reinforce_pp_advantages([1.0, 0.0], mask=[[1, 0], [0, 0]])
    A.reinforce_pp_advantages([1.0, 0.0], mask=[[1, 0], [0, 0]], std="population")
    with pytest.raises(
        ValueError, match=r"(?s)mask must leave at least one valid token.*Found none"
    ):
        A.reinforce_pp_advantages([1.0, 0.0], mask=[[0, 0], [0, 0]], std="population")
    A.reinforce_pp_advantages([1.0], std="population")
    with pytest.raises(
        ValueError, match=r"rewards must hold at least two rewards for a batch std='sample'"
    ):
        A.reinforce_pp_advantages([1.0])


@pytest.mark.parametrize("advantages", [A.grpo_advantages, A.rloo_advantages])
def test_a_ragged_group_is_refused_by_refimpl(advantages: Callable[..., Any]) -> None:
    ragged: Any = [[1.0], [1.0, 2.0]]
    with pytest.raises(TypeError, match=r"group must be a 1-D array of integer prompt ids"):
        advantages([0.0, 0.0, 0.0], group=ragged)


def test_prompt_ids_past_two_to_the_53_stay_distinct() -> None:
    # ids past int64 are Python ints: as floats 2^64 and 2^64 + 1 are one number, and the two
    # prompts would be merged into one group
    big = 2**64
    out = A.rloo_advantages([0.0, 1.0, 3.0, 5.0], group=[big, big, big + 1, big + 1])
    np.testing.assert_array_equal(out, [-1.0, 1.0, -2.0, 2.0])
