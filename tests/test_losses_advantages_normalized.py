"""Tests of refimpl.losses.advantages_normalized: RLOO advantages standardised over the batch.

Exact hand-worked values (Fractions, one rounded square root); properties against an independent
loop-by-group formula, the batch's standard deviation, scale and shift invariance, and the
centring, each shown to reject a deliberately wrong variant.
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

from refimpl.errors import InvalidArgument
from refimpl.losses.advantages import rloo_advantages
from refimpl.losses.advantages_normalized import rloo_normalized_advantages

Array = NDArray[np.float64]
Normalized = Callable[..., Array]
Labels = NDArray[np.int64]


@st.composite
def batches(draw: st.DrawFn, *, singles: bool = False) -> tuple[Array, Labels]:
    """Rewards and group labels: 1–4 groups of 2–5 (a singleton first when ``singles``)."""
    sizes = draw(st.lists(st.integers(2, 5), min_size=1, max_size=4))
    if singles:
        sizes = [1, *sizes]
    rewards = draw(
        st.lists(st.floats(-5.0, 5.0, allow_subnormal=False), min_size=sum(sizes),
                 max_size=sum(sizes))
    )  # fmt: skip
    group = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)
    return np.asarray(rewards, dtype=np.float64), group


def loop_formula(rewards: Array, group: Labels, eps: float) -> Array:
    """Independent: each reward minus the mean of its group's others, then a batch z-score."""
    a = np.zeros(rewards.size)
    for i in range(rewards.size):
        others = [rewards[j] for j in range(rewards.size) if group[j] == group[i] and j != i]
        a[i] = rewards[i] - sum(others) / len(others) if others else 0.0
    mean = sum(a) / a.size
    s = math.sqrt(sum((x - mean) ** 2 for x in a) / (a.size - 1))
    return (a - mean) / (s + eps) if s + eps > 0 else np.zeros(a.size)


def test_hand_worked_values() -> None:
    # groups (1, 0) and (3, 3): A = (1, −1, 0, 0), mean 0, sample variance 2/3.
    out = rloo_normalized_advantages(
        [Fraction(1), Fraction(0), Fraction(3), Fraction(3)], group=[0, 0, 1, 1], eps=0.0
    )
    z = 1 / math.sqrt(Fraction(2, 3))
    np.testing.assert_allclose(out, [z, -z, 0.0, 0.0], rtol=2e-16, atol=0)
    # eps adds to the std: 1 / (sqrt(2/3) + 1/4)
    out = rloo_normalized_advantages([1.0, 0.0, 3.0, 3.0], group=[0, 0, 1, 1], eps=0.25)
    w = 1 / (math.sqrt(2 / 3) + 0.25)
    np.testing.assert_allclose(out, [w, -w, 0.0, 0.0], rtol=1e-15, atol=0)


def test_a_singleton_left_raw_is_centred_with_the_batch() -> None:
    # singleton='raw': A = (2, 1, −1); mean 2/3; centred (4/3, 1/3, −5/3); population var 14/9
    out = rloo_normalized_advantages(
        [2.0, 1.0, 0.0], group=[7, 3, 3], eps=0.0, std="population", singleton="raw"
    )
    s = math.sqrt(14 / 9)
    np.testing.assert_allclose(out, np.array([4, 1, -5]) / 3 / s, rtol=1e-15)


def test_all_equal_advantages_give_zero() -> None:
    out = rloo_normalized_advantages([2.0, 2.0, 5.0, 5.0], group=[0, 0, 1, 1], eps=0.0)
    assert np.array_equal(out, np.zeros(4))


def test_refusals_name_the_parameter_and_the_fix() -> None:
    with pytest.raises(InvalidArgument, match="eps"):
        rloo_normalized_advantages([1.0, 0.0], group=[0, 0], eps=-1.0)
    with pytest.raises(InvalidArgument, match="std"):
        rloo_normalized_advantages([1.0, 0.0], group=[0, 0], std="none")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="std='population'"):
        rloo_normalized_advantages([1.0], group=[0])


def no_centring(rewards: Any, *, group: Any, eps: float = 1e-4, **kw: Any) -> Array:
    """Wrong: divides by the std but does not subtract the batch mean."""
    a = np.asarray(rloo_advantages(rewards, group=group, singleton=kw.get("singleton", "zero")))
    return np.asarray(a / (np.std(a, ddof=1) + eps))


def population_std(rewards: Any, *, group: Any, eps: float = 1e-4, **kw: Any) -> Array:
    """Wrong: the population std (TRL's nanstd is Bessel-corrected)."""
    a = np.asarray(rloo_advantages(rewards, group=group))
    return np.asarray((a - a.mean()) / (np.std(a) + eps))


def reward_std(rewards: Any, *, group: Any, eps: float = 1e-4, **kw: Any) -> Array:
    """Wrong: divides by the rewards' std, not the advantages'."""
    a = np.asarray(rloo_advantages(rewards, group=group))
    return np.asarray((a - a.mean()) / (np.std(np.asarray(rewards), ddof=1) + eps))


def matches_loop(fn: Normalized) -> Callable[[], None]:
    @given(batches(), st.sampled_from([1e-4, 0.5]))
    def check(batch: tuple[Array, Labels], eps: float) -> None:
        rewards, group = batch
        if rewards.size < 2:
            return
        expected = loop_formula(rewards, group, eps)
        np.testing.assert_allclose(fn(rewards, group=group, eps=eps), expected, rtol=1e-9,
                                   atol=1e-9)  # fmt: skip

    return check


def test_matches_an_independent_loop() -> None:
    run_property(matches_loop(rloo_normalized_advantages))
    rejects(matches_loop(reward_std))


def batch_std_is_s_over_s_plus_eps(fn: Normalized) -> Callable[[], None]:
    @given(batches(), st.sampled_from([1e-4, 0.5, 2.0]))
    def check(batch: tuple[Array, Labels], eps: float) -> None:
        rewards, group = batch
        a = np.asarray(rloo_advantages(rewards, group=group))
        s = float(np.std(a, ddof=1))
        out = fn(rewards, group=group, eps=eps)
        assert math.isclose(float(np.std(out, ddof=1)), s / (s + eps), rel_tol=1e-9, abs_tol=1e-12)

    return check


def test_the_batch_std_is_s_over_s_plus_eps() -> None:
    run_property(batch_std_is_s_over_s_plus_eps(rloo_normalized_advantages))
    rejects(batch_std_is_s_over_s_plus_eps(population_std))


def centred_with_singletons(fn: Normalized) -> Callable[[], None]:
    @given(batches(singles=True))
    def check(batch: tuple[Array, Labels]) -> None:
        rewards, group = batch
        out = fn(rewards, group=group, eps=1e-4, singleton="raw")
        assert abs(float(np.sum(out))) <= 1e-9 * max(1.0, float(np.sum(np.abs(out))))

    return check


def test_the_batch_mean_is_removed_even_with_raw_singletons() -> None:
    run_property(centred_with_singletons(rloo_normalized_advantages))
    rejects(centred_with_singletons(no_centring))


@given(batches(), st.floats(0.25, 8.0), st.floats(-10.0, 10.0))
def test_scale_and_shift_leave_it_unchanged_without_eps(
    batch: tuple[Array, Labels], k: float, c: float
) -> None:
    rewards, group = batch
    base = rloo_normalized_advantages(rewards, group=group, eps=0.0)
    moved = rloo_normalized_advantages(k * rewards + c, group=group, eps=0.0)
    if float(np.std(np.asarray(rloo_advantages(rewards, group=group)), ddof=1)) < 1e-6:
        return  # a (nearly) constant batch: 0/0 rounding, not the property
    np.testing.assert_allclose(moved, base, rtol=1e-7, atol=1e-7)
