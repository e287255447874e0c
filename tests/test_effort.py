"""Properties of refimpl.effort: the penalty k(b), the shaped reward, L*(b), the frontier, pareto_front.

Each property was also run against a deliberately wrong variant (listed in the helper's report and, where
cheap, kept here as a test that asserts the property *rejects* the wrong variant).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import TypedDict

import numpy as np
import pytest
from _wrong_variants import rejects
from hypothesis import assume, given
from hypothesis import strategies as st
from numpy.typing import ArrayLike, NDArray

from refimpl import (
    EffortFrontier,
    EffortPolicy,
    effort_frontier,
    effort_penalty,
    optimal_length,
    pareto_front,
    saturating_quality,
    shaped_reward,
    train_effort_policy,
)

# ---------------------------------------------------------------------------------------------
# strategies (local: refimpl.testing is written by another helper)
# ---------------------------------------------------------------------------------------------

positive = st.floats(min_value=1e-3, max_value=1e3, allow_nan=False, allow_infinity=False)
b_mins = st.floats(min_value=-100.0, max_value=100.0, allow_nan=False, allow_infinity=False)
offsets = st.floats(min_value=0.0, max_value=1e3, allow_nan=False, allow_infinity=False)


@st.composite
def penalty_params(draw: st.DrawFn) -> dict[str, float]:
    return {"k0": draw(positive), "b_min": draw(b_mins), "tau": draw(positive)}


@st.composite
def model_params(draw: st.DrawFn) -> dict[str, float]:
    """Quality model + penalty parameters."""
    return {
        "q_max": draw(positive),
        "lam": draw(positive),
        "k0": draw(positive),
        "b_min": draw(b_mins),
        "tau": draw(positive),
    }


def brute_force_pareto(cost: ArrayLike, quality: ArrayLike) -> set[int]:
    """O(n²) reference: i is kept iff no j is at least as good in both and better in one."""
    c = np.asarray(cost, dtype=float)
    q = np.asarray(quality, dtype=float)
    kept = set()
    for i in range(c.size):
        dominated = any(
            c[j] <= c[i] and q[j] >= q[i] and (c[j] < c[i] or q[j] > q[i]) for j in range(c.size)
        )
        if not dominated:
            kept.add(i)
    return kept


# ---------------------------------------------------------------------------------------------
# the penalty
# ---------------------------------------------------------------------------------------------


def test_penalty_at_b_min_is_k0_and_divides_by_e_per_tau() -> None:
    k = effort_penalty([2.0, 5.0, 8.0], k0=0.3, b_min=2.0, tau=3.0)
    assert k[0] == 0.3
    np.testing.assert_allclose(k[1:], [0.3 / math.e, 0.3 / math.e**2], rtol=1e-15)


def k_strictly_decreasing(penalty: Callable[..., NDArray[np.float64]]) -> Callable[..., None]:
    def check(p: dict[str, float], b1: float, b2: float) -> None:
        k1, k2 = penalty([b1, b2], **p)
        assert k2 < k1

    return check


@given(penalty_params(), st.floats(0.0, 50.0), st.floats(1e-2, 50.0))
def test_penalty_is_strictly_decreasing_in_effort(p: dict[str, float], a: float, d: float) -> None:
    b1 = p["b_min"] + a
    b2 = b1 + d
    assume(b2 > b1)  # the step survives rounding
    assume(effort_penalty(b2, **p) > 0.0)  # not underflowed
    k_strictly_decreasing(effort_penalty)(p, b1, b2)


def test_penalty_monotonicity_property_rejects_a_growing_penalty() -> None:
    def wrong(b: ArrayLike, *, k0: float, b_min: float, tau: float) -> NDArray[np.float64]:
        return k0 * np.exp(+(np.asarray(b) - b_min) / tau)

    rejects(k_strictly_decreasing(wrong), {"k0": 1.0, "b_min": 0.0, "tau": 1.0}, 0.5, 1.0)


@given(penalty_params(), offsets)
def test_penalty_is_in_zero_k0(p: dict[str, float], a: float) -> None:
    k = effort_penalty(p["b_min"] + a, **p)
    assert 0.0 <= float(k) <= p["k0"]


def test_penalty_underflows_to_zero_without_warning() -> None:
    # pytest runs with warnings as errors: any overflow/underflow warning fails this test.
    k = effort_penalty([1e6, 1e300], k0=1e300, b_min=-1e300, tau=1e-300)
    assert np.all(k == 0.0)
    assert effort_penalty(1e6, k0=1.0, b_min=0.0, tau=1.0) == 0.0


def test_penalty_keeps_shape_and_dtype() -> None:
    k = effort_penalty(np.ones((2, 3)), k0=1.0, b_min=0.0, tau=1.0)
    assert k.shape == (2, 3)
    assert k.dtype == np.float64
    assert effort_penalty(1, k0=1, b_min=0, tau=1).shape == ()


def test_zero_k0_gives_zero_penalty() -> None:
    assert np.all(effort_penalty([0.0, 1.0], k0=0.0, b_min=0.0, tau=1.0) == 0.0)


# ---------------------------------------------------------------------------------------------
# the shaped reward
# ---------------------------------------------------------------------------------------------


def check_linear_in_length(
    reward: Callable[..., NDArray[np.float64]],
    p: dict[str, float],
    b: float,
    quality: float,
    ell: NDArray[np.float64],
    scale: float,
) -> None:
    """r(ℓ) = Q − k(b)·ℓ/ℓ_scale: exact values, and the secant slope is −k(b)/ℓ_scale."""
    r = reward(np.full(ell.size, quality), ell, b, length_scale=scale, **p)
    # The formula of conventions §effort-conditioning, not refimpl's code.
    k = p["k0"] * math.exp(-(b - p["b_min"]) / p["tau"])
    expected = quality - k * ell / scale
    np.testing.assert_allclose(
        r, expected, rtol=1e-12, atol=1e-13 * (1.0 + np.max(np.abs(expected)))
    )
    if ell.max() > ell.min():
        i, j = int(np.argmin(ell)), int(np.argmax(ell))
        slope = (r[j] - r[i]) / (ell[j] - ell[i])
        assert slope == pytest.approx(
            -k / scale, rel=1e-6, abs=1e-9 * (1.0 + abs(quality)) / (ell[j] - ell[i])
        )


@given(
    penalty_params(),
    st.floats(0.0, 50.0),
    st.floats(-10.0, 10.0),
    st.lists(st.floats(0.0, 1e4), min_size=2, max_size=10),
    positive,
)
def test_shaped_reward_is_linear_in_length_with_slope_minus_k_over_scale(
    p: dict[str, float], a: float, quality: float, lengths: list[float], scale: float
) -> None:
    b = p["b_min"] + a
    check_linear_in_length(shaped_reward, p, b, quality, np.asarray(lengths), scale)


def test_linearity_property_rejects_a_price_multiplied_by_the_scale() -> None:
    def wrong(quality: ArrayLike, length: ArrayLike, b: float, **kw: float) -> NDArray[np.float64]:
        scale = kw.pop("length_scale")
        k = effort_penalty(b, **kw)
        return np.asarray(np.asarray(quality) - k * np.asarray(length) * scale)

    p = {"k0": 0.01, "b_min": 0.0, "tau": 1.0}
    rejects(check_linear_in_length, wrong, p, 1.0, 1.0, np.array([10.0, 20.0]), 4.0)


def test_shaped_reward_accepts_one_effort_per_rollout() -> None:
    r = shaped_reward([1.0, 1.0], [10.0, 10.0], [0.0, 1.0], k0=0.01, b_min=0.0, tau=1.0)
    np.testing.assert_allclose(r, [1.0 - 0.1, 1.0 - 0.1 / math.e], rtol=1e-15)


def test_shaped_reward_price_is_zero_not_nan_when_k_underflows() -> None:
    r = shaped_reward([0.5], [1e300], 1e9, k0=1.0, b_min=0.0, tau=1.0, length_scale=1e-300)
    assert r[0] == 0.5


# ---------------------------------------------------------------------------------------------
# the optimum
# ---------------------------------------------------------------------------------------------


@given(model_params(), offsets)
def test_optimal_length_maximises_the_shaped_reward(p: dict[str, float], a: float) -> None:
    b = p["b_min"] + a
    L = float(optimal_length(b, **p))
    k = float(effort_penalty(b, k0=p["k0"], b_min=p["b_min"], tau=p["tau"]))
    assume(k > 0.0)

    def reward(ell: float) -> float:
        return float(saturating_quality(ell, q_max=p["q_max"], lam=p["lam"])) - k * ell

    best = reward(L)
    tol = 1e-12 * (p["q_max"] + k * L)
    for factor in (0.5, 0.9, 0.99, 1.01, 1.1, 2.0):
        assert reward(L * factor) <= best + tol
    for delta in (p["lam"] * 1e-3, p["lam"]):
        assert reward(L + delta) <= best + tol
        if L - delta >= 0:
            assert reward(L - delta) <= best + tol


@given(model_params(), st.lists(offsets, min_size=2, max_size=12))
def test_optimal_length_and_its_quality_are_non_decreasing_in_effort(
    p: dict[str, float], a: list[float]
) -> None:
    b = p["b_min"] + np.sort(np.asarray(a))
    assert np.all(np.diff(optimal_length(b, **p)) >= 0.0)
    check_frontier_non_decreasing(effort_frontier, p, b)


def check_frontier_non_decreasing(
    frontier: Callable[..., EffortFrontier], p: dict[str, float], b: NDArray[np.float64]
) -> None:
    front = frontier(b, **p)
    assert np.all(np.diff(front.cost) >= 0.0)
    assert np.all(np.diff(front.quality) >= 0.0)


def test_monotonicity_property_rejects_a_frontier_built_on_a_growing_price() -> None:
    def wrong(b: ArrayLike, **p: float) -> EffortFrontier:
        k = p["k0"] * np.exp(+(np.asarray(b) - p["b_min"]) / p["tau"])  # wrong sign
        cost = np.maximum(p["lam"] * np.log(p["q_max"] / (p["lam"] * k)), 0.0)
        return EffortFrontier(cost, np.maximum(p["q_max"] - p["lam"] * k, 0.0))

    p = {"q_max": 1.0, "lam": 100.0, "k0": 0.001, "b_min": 0.0, "tau": 1.0}
    rejects(check_frontier_non_decreasing, wrong, p, np.array([0.0, 0.5, 1.0]))


@given(model_params(), st.floats(0.0, 20.0), st.floats(1e-3, 20.0))
def test_optimal_length_has_slope_lam_over_tau_where_positive(
    p: dict[str, float], a: float, d: float
) -> None:
    b1 = p["b_min"] + a * p["tau"]
    b2 = b1 + d * p["tau"]
    L1, L2 = optimal_length([b1, b2], **p)
    assume(L1 > 0.0)
    assert pytest.approx(p["lam"] * (b2 - b1) / p["tau"], rel=1e-8, abs=1e-9 * L2) == (L2 - L1)


def test_optimal_length_keeps_growing_after_the_penalty_underflows() -> None:
    p = {"q_max": 1.0, "lam": 100.0, "k0": 0.005, "b_min": 0.0, "tau": 1.0}
    assert effort_penalty(1e4, k0=0.005, b_min=0.0, tau=1.0) == 0.0
    L = optimal_length([1e4, 2e4], **p)
    np.testing.assert_allclose(L, 100.0 * (math.log(2.0) + np.array([1e4, 2e4])), rtol=1e-15)
    front = effort_frontier([1e4], **p)
    assert front.quality[0] == 1.0


def test_optimal_length_is_zero_when_length_is_too_dear() -> None:
    # q_max/(λ k0) < 1: the reward is decreasing on ℓ >= 0 at b_min
    p = {"q_max": 1.0, "lam": 100.0, "k0": 0.02, "b_min": 0.0, "tau": 1.0}
    L = optimal_length([0.0, math.log(2.0), 1.0], **p)
    assert L[0] == 0.0
    assert L[1] == pytest.approx(0.0, abs=1e-12)
    assert L[2] == pytest.approx(100.0 * (1.0 - math.log(2.0)), rel=1e-14)
    assert effort_frontier([0.0], **p).quality[0] == 0.0


# ---------------------------------------------------------------------------------------------
# the frontier
# ---------------------------------------------------------------------------------------------


def test_frontier_is_a_namedtuple_of_float_arrays() -> None:
    front = effort_frontier(np.zeros((2, 2)), q_max=1.0, lam=1.0, k0=0.1, b_min=0.0, tau=1.0)
    assert isinstance(front, EffortFrontier)
    assert front.cost.shape == front.quality.shape == (2, 2)
    assert front.cost.dtype == front.quality.dtype == np.float64


@given(model_params())
def test_frontier_quality_is_q_max_minus_lam_k_where_optimum_positive(p: dict[str, float]) -> None:
    b = p["b_min"] + p["tau"] * np.linspace(0.0, 10.0, 21)
    front = effort_frontier(b, **p)
    k = effort_penalty(b, k0=p["k0"], b_min=p["b_min"], tau=p["tau"])
    pos = front.cost > 0
    np.testing.assert_allclose(
        front.quality[pos], p["q_max"] - p["lam"] * k[pos], rtol=1e-12, atol=1e-15 * p["q_max"]
    )
    # and it is the quality model evaluated at L*
    np.testing.assert_allclose(
        front.quality,
        saturating_quality(front.cost, q_max=p["q_max"], lam=p["lam"]),
        rtol=1e-9,
        atol=1e-12 * p["q_max"],
    )


def mutually_non_dominated(cost: NDArray[np.float64], quality: NDArray[np.float64]) -> bool:
    return brute_force_pareto(cost, quality) == set(range(cost.size))


@st.composite
def resolvable_efforts(draw: st.DrawFn) -> tuple[dict[str, float], NDArray[np.float64]]:
    """Efforts spaced by >= τ/8 with λ k(b) >= 1e-6 q_max: differences survive float64 rounding."""
    p = draw(model_params())
    steps = draw(st.lists(st.integers(0, 60), min_size=2, max_size=12, unique=True))
    b = p["b_min"] + p["tau"] * np.asarray(steps, dtype=float) / 8.0
    k = effort_penalty(b, k0=p["k0"], b_min=p["b_min"], tau=p["tau"])
    assume(np.all(p["lam"] * k >= 1e-6 * p["q_max"]))
    return p, b


@given(resolvable_efforts())
def test_frontier_points_are_mutually_non_dominated(
    case: tuple[dict[str, float], NDArray[np.float64]],
) -> None:
    p, b = case
    front = effort_frontier(b, **p)
    assert mutually_non_dominated(front.cost, front.quality)
    assert sorted(pareto_front(front.cost, front.quality).tolist()) == list(range(b.size))


def test_non_domination_property_rejects_a_frontier_with_decreasing_quality() -> None:
    b = np.array([1.0, 2.0, 3.0])
    p = {"q_max": 1.0, "lam": 100.0, "k0": 0.005, "b_min": 0.0, "tau": 1.0}
    front = effort_frontier(b, **p)
    assert not mutually_non_dominated(front.cost, front.quality[::-1].copy())


def test_frontier_slope_is_the_penalty_and_decreases() -> None:
    p = {"q_max": 2.0, "lam": 50.0, "k0": 0.01, "b_min": 1.0, "tau": 0.5}
    b = np.linspace(1.0, 4.0, 301)
    front = effort_frontier(b, **p)
    slope = np.diff(front.quality) / np.diff(front.cost)
    mid = 0.5 * (b[1:] + b[:-1])
    # secant slope of a smooth curve equals the tangent at an interior point: within O(h²)
    np.testing.assert_allclose(slope, effort_penalty(mid, k0=0.01, b_min=1.0, tau=0.5), rtol=1e-4)
    assert np.all(np.diff(slope) < 0)  # concave


# ---------------------------------------------------------------------------------------------
# pareto_front
# ---------------------------------------------------------------------------------------------


grid_values = st.integers(0, 6).map(float)  # a coarse grid makes ties and duplicates common


@given(st.lists(st.tuples(grid_values, grid_values), max_size=25))
def test_pareto_front_agrees_with_brute_force_dominance(points: list[tuple[float, float]]) -> None:
    cost = np.array([c for c, _ in points])
    quality = np.array([q for _, q in points])
    front = pareto_front(cost, quality)
    assert set(front.tolist()) == brute_force_pareto(cost, quality)
    assert len(front) == len(set(front.tolist()))
    # sorted by cost, then by index; along the front quality increases with cost
    assert np.all(np.diff(cost[front]) >= 0)
    assert np.all(np.diff(quality[front]) >= 0)
    for i, j in itertools.pairwise(front):
        if cost[i] == cost[j]:
            assert i < j


@given(
    st.lists(
        st.tuples(st.floats(-1e6, 1e6), st.floats(-1e6, 1e6)),
        max_size=40,
    )
)
def test_pareto_front_agrees_with_brute_force_on_real_values(
    points: list[tuple[float, float]],
) -> None:
    cost = np.array([c for c, _ in points])
    quality = np.array([q for _, q in points])
    assert set(pareto_front(cost, quality).tolist()) == brute_force_pareto(cost, quality)


def keeps_dominated_ties(cost: ArrayLike, quality: ArrayLike) -> NDArray[np.intp]:
    """Wrong variant: a point is kept if no point is strictly better in *both* coordinates."""
    c = np.asarray(cost, dtype=float)
    q = np.asarray(quality, dtype=float)
    keep = [i for i in range(c.size) if not np.any((c < c[i]) & (q > q[i]))]
    return np.asarray(sorted(keep, key=lambda i: (c[i], i)), dtype=np.intp)


def test_brute_force_comparison_rejects_a_front_that_keeps_dominated_ties() -> None:
    cost, quality = [1.0, 2.0, 1.0], [0.5, 0.5, 0.4]
    assert set(keeps_dominated_ties(cost, quality).tolist()) != brute_force_pareto(cost, quality)
    assert set(pareto_front(cost, quality).tolist()) == brute_force_pareto(cost, quality) == {0}


def test_pareto_front_keeps_every_copy_of_a_duplicate_and_handles_empty_input() -> None:
    assert pareto_front([1.0, 1.0, 2.0], [0.5, 0.5, 0.4]).tolist() == [0, 1]
    assert pareto_front([-0.0, 0.0], [1.0, 1.0]).tolist() == [0, 1]
    empty = pareto_front([], [])
    assert empty.shape == (0,)
    assert empty.dtype == np.intp


# ---------------------------------------------------------------------------------------------
# the effort-conditioned toy policy
# ---------------------------------------------------------------------------------------------


class Problem(TypedDict):
    q_max: float
    lam: float
    k0: float
    b_min: float
    tau: float


PROBLEM: Problem = {"q_max": 1.0, "lam": 100.0, "k0": 0.005, "b_min": 0.0, "tau": 1.0}


@pytest.fixture(scope="module")
def trained() -> list[EffortPolicy]:
    return [train_effort_policy(**PROBLEM, b_max=4.0, rng=seed) for seed in range(3)]


def test_training_from_a_seed_is_bit_identical() -> None:
    a = train_effort_policy(**PROBLEM, b_max=4.0, rng=7, steps=200, noise=0.01)
    b = train_effort_policy(
        **PROBLEM, b_max=4.0, rng=np.random.default_rng(7), steps=200, noise=0.01
    )
    for name in EffortPolicy._fields:
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    c = train_effort_policy(**PROBLEM, b_max=4.0, rng=8, steps=200, noise=0.01)
    assert not np.array_equal(a.mean_coef, c.mean_coef)  # the seed matters


def test_learned_mean_length_approaches_the_optimal_length(trained: list[EffortPolicy]) -> None:
    # Training is deterministic given the seed, so this cannot flake; the tolerance covers the
    # approximation bias of the degree-6 features and the residual spread (measured <= 0.6% for seeds
    # 0-3, see train_effort_policy's Notes) with a margin of about 3x.
    b = np.linspace(0.0, 4.0, 41)
    target = optimal_length(b, **PROBLEM)
    for policy in trained:
        np.testing.assert_allclose(policy.mean_length(b), target, rtol=0.02)


def test_untrained_policy_is_far_from_the_optimum() -> None:
    # the previous test can fail: one step of training leaves the mean length near λ·e^{σ²/2}
    policy = train_effort_policy(**PROBLEM, b_max=4.0, rng=0, steps=1)
    b = np.linspace(0.0, 4.0, 41)
    error = np.abs(policy.mean_length(b) / optimal_length(b, **PROBLEM) - 1.0)
    assert error.max() > 0.02


def test_one_trained_policy_traces_the_analytic_frontier(trained: list[EffortPolicy]) -> None:
    b = np.linspace(0.0, 4.0, 41)
    front = effort_frontier(b, **PROBLEM)
    for policy in trained:
        points = policy.evaluate(b)
        np.testing.assert_allclose(points.cost, front.cost, rtol=0.02)
        np.testing.assert_allclose(points.quality, front.quality, rtol=0.01)
        # below the frontier: no policy beats the optimum's reward at any effort
        k = effort_penalty(b, k0=0.005, b_min=0.0, tau=1.0)
        assert np.all(points.quality - k * points.cost <= front.quality - k * front.cost + 1e-12)
        # a frontier: many non-dominated cost/quality points from one set of parameters
        assert len(pareto_front(points.cost, points.quality)) == b.size


def test_policy_quality_quadrature_matches_monte_carlo(trained: list[EffortPolicy]) -> None:
    # 20_000 draws; the standard error of the mean quality is below std(Q)/sqrt(n) <= 1/141 · std;
    # 6 standard errors gives a false-failure rate below 1e-8 (Gaussian tail).
    policy = trained[0]
    rng = np.random.default_rng(1)
    b = np.full(20_000, 0.5)
    q = saturating_quality(policy.sample_lengths(b, rng=rng), q_max=1.0, lam=100.0)
    expected = float(policy.evaluate(0.5).quality)
    assert abs(q.mean() - expected) <= 6.0 * q.std() / math.sqrt(q.size) + 1e-12


def test_policy_rejects_efforts_outside_its_training_range(trained: list[EffortPolicy]) -> None:
    with pytest.raises(ValueError, match=r"b must lie in the trained effort range"):
        trained[0].mean_length([1.0, 5.0])


def test_policy_methods_keep_the_shape_of_b(trained: list[EffortPolicy]) -> None:
    policy = trained[0]
    assert policy.mean_length(1.0).shape == ()
    assert policy.evaluate(np.ones((2, 3))).quality.shape == (2, 3)
    assert policy.sample_lengths(np.ones(4), rng=np.random.default_rng(0)).shape == (4,)
