"""Depth tests of refimpl.effort: classes of holes that sampled mutants showed, each closed across
the package rather than per mutant.

- **the toy policies' methods at exact values**: hand-set Chebyshev coefficients with spreads far
  from 1 (so that ``σ²`` and ``σ³`` differ), checked against the closed forms of the log-normal
  (``E[ℓ] = e^{μ + σ²/2}``), against an independent quadrature for the expected quality (at the
  accuracy the docstring claims), and against the same generator for the samples;
- **the training loops against an independent re-implementation** of their docstrings (stratified
  efforts, classes drawn by weight, RLOO advantages, REINFORCE gradients, Adam with a decayed step):
  several steps, several features, unequal weights, noise and both success modes, so that any
  changed operator of a step moves the parameters;
- **the bisections at full float64 resolution**, and :func:`frontier_quality` where ``λ/q_max``
  leaves float64 (it warned and returned a wrong quality there);
- **the outputs of degenerate branches** (empty efforts, one class): shape, dtype and value.

Each property is also run against a deliberately wrong variant, which it must reject.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray
from scipy import integrate

from refimpl.effort import (
    ConditionedEffortPolicy,
    EffortFrontier,
    EffortPolicy,
    adaptive_gap,
    budget_frontier,
    difficulty_mix,
    effort_frontier,
    effort_penalty,
    frontier_quality,
    optimal_length,
    pareto_front,
    saturating_quality,
    shaped_reward,
    train_conditioned_policy,
    train_effort_policy,
)

Array = NDArray[np.float64]


# ---------------------------------------------------------------------------------------------
# independent pieces: Chebyshev polynomials by their trigonometric definition, the log-normal
# ---------------------------------------------------------------------------------------------


def chebyshev(z: float, degree: int) -> list[float]:
    """``T_j(z) = cos(j·arccos z)`` for ``j = 0..degree`` (``|z| <= 1``)."""
    angle = math.acos(max(-1.0, min(1.0, z)))
    return [math.cos(j * angle) for j in range(degree + 1)]


def lognormal_quality(mu: float, sigma: float, *, q_max: float, lam: float) -> float:
    """``E[q_max (1 − e^{−ℓ/λ})]`` for ``ln ℓ ~ N(μ, σ²)``, by adaptive quadrature in ``ln ℓ``."""

    def integrand(x: float) -> float:
        density = math.exp(-0.5 * ((x - mu) / sigma) ** 2) / (sigma * math.sqrt(2.0 * math.pi))
        return -q_max * math.expm1(-math.exp(x) / lam) * density

    value, _ = integrate.quad(integrand, mu - 12 * sigma, mu + 12 * sigma, epsabs=0, epsrel=1e-13)
    return float(value)


def policy_point(coef: Array, spread: Array, features: list[float]) -> tuple[float, float]:
    mu = sum(c * f for c, f in zip(coef, features, strict=True))
    log_sigma = sum(c * f for c, f in zip(spread, features, strict=True))
    return float(mu), math.exp(log_sigma)


# ---------------------------------------------------------------------------------------------
# the one-effort policy, hand-set
# ---------------------------------------------------------------------------------------------

SINGLE: dict[str, Any] = {"b_min": 1.0, "b_max": 4.0, "q_max": 0.9, "lam": 120.0}
SINGLE_PENALTY: dict[str, float] = {"k0": 0.004, "tau": 1.5}


def single_policy(mean_coef: list[float], spread_coef: list[float]) -> EffortPolicy:
    return EffortPolicy(
        mean_coef=np.asarray(mean_coef, dtype=np.float64),
        log_spread_coef=np.asarray(spread_coef, dtype=np.float64),
        reward_history=np.zeros(1),
        **SINGLE,
        **SINGLE_PENALTY,
    )


coefficients = st.lists(st.floats(-0.6, 0.6), min_size=3, max_size=3)


def check_single_policy_methods(policy_of: Callable[[list[float], list[float]], Any]) -> Any:

    @given(coefficients, coefficients, st.lists(st.floats(1.0, 4.0), min_size=1, max_size=4))
    def prop(mean_tail: list[float], spread_tail: list[float], b: list[float]) -> None:
        mean_coef = [4.2, *mean_tail[:2]]
        spread_coef = [
            -1.2,
            *spread_tail[:2],
        ]  # σ in [e^-2.4, e^0]: far from 1, and distinct powers
        policy = policy_of(mean_coef, spread_coef)
        mu, sigma = policy.log_length_params(b)
        mean = policy.mean_length(b)
        for i, effort in enumerate(b):
            features = chebyshev(2.0 * (effort - 1.0) / 3.0 - 1.0, 2)
            mu_i, sigma_i = policy_point(np.asarray(mean_coef), np.asarray(spread_coef), features)
            assert mu[i] == pytest.approx(mu_i, rel=1e-13, abs=1e-13)
            assert sigma[i] == pytest.approx(sigma_i, rel=1e-13)
            assert mean[i] == pytest.approx(math.exp(mu_i + 0.5 * sigma_i**2), rel=1e-13)

    return prop


def test_single_policy_methods_are_the_lognormal_closed_forms() -> None:
    run_property(check_single_policy_methods(single_policy))


class _MedianPolicy(EffortPolicy):
    """Wrong: the mean length taken as the median ``e^μ`` (the spread's term dropped)."""

    def mean_length(self, b: Any) -> Array:
        return np.exp(self.log_length_params(b)[0])


class _CubedSpreadPolicy(EffortPolicy):
    """Wrong: ``e^{μ + σ³/2}``, which agrees with the right one only at ``σ = 1``."""

    def mean_length(self, b: Any) -> Array:
        mu, sigma = self.log_length_params(b)
        return np.exp(mu + 0.5 * sigma**3)


@pytest.mark.parametrize("wrong", [_MedianPolicy, _CubedSpreadPolicy])
def test_closed_form_property_rejects_a_wrong_mean_length(wrong: type[EffortPolicy]) -> None:
    def build(mean_coef: list[float], spread_coef: list[float]) -> Any:
        return wrong(*single_policy(mean_coef, spread_coef))

    rejects(check_single_policy_methods(build))


def test_single_policy_quality_matches_quadrature_to_the_claimed_accuracy() -> None:
    # evaluate() claims a relative error far below 1e-10 for the spreads training reaches (σ up
    # to about 0.5): checked at 1e-11 against adaptive quadrature, for σ from 0.05 to 0.6.
    policy = single_policy([4.6, 0.9, -0.3], [-1.9, 0.8, 0.2])
    b = np.linspace(1.0, 4.0, 7)
    point = policy.evaluate(b)
    mu, sigma = policy.log_length_params(b)
    assert float(sigma.min()) > 0.05
    assert float(sigma.max()) < 0.6
    for i in range(b.size):
        want = lognormal_quality(float(mu[i]), float(sigma[i]), q_max=0.9, lam=120.0)
        assert point.quality[i] == pytest.approx(want, rel=1e-11)
        assert point.cost[i] == pytest.approx(math.exp(mu[i] + 0.5 * sigma[i] ** 2), rel=1e-14)


def test_single_policy_samples_are_the_generators_normals_through_exp() -> None:
    policy = single_policy([4.0, 0.5, 0.1], [-0.7, 0.3, -0.2])
    b = np.array([[1.0, 2.5], [3.0, 4.0]])
    got = policy.sample_lengths(b, rng=np.random.default_rng(11))
    mu, sigma = policy.log_length_params(b)
    eps = np.random.default_rng(11).standard_normal(b.shape)
    assert got.shape == b.shape
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, np.exp(mu + sigma * eps), rtol=1e-14, atol=0)
    # a log-length past 700 is capped there, never inf
    huge = single_policy([800.0, 0.0, 0.0], [-5.0, 0.0, 0.0])
    capped = huge.sample_lengths([2.0], rng=np.random.default_rng(0))
    assert capped.tolist() == [math.exp(700.0)]


def test_policies_accept_the_ends_of_their_range_and_refuse_just_past_them() -> None:
    policy = single_policy([4.0, 0.0, 0.0], [-1.0, 0.0, 0.0])
    ends = policy.mean_length([1.0, 4.0])
    assert ends.tolist() == [math.exp(4.0 + 0.5 * math.exp(-2.0))] * 2
    for outside in (np.nextafter(1.0, 0.0), np.nextafter(4.0, 5.0)):
        with pytest.raises(
            ValueError, match=r"b must lie in the trained effort range \[1\.0, 4\.0\]"
        ):
            policy.mean_length([2.0, outside])
    conditioned = conditioned_policy([0.0] * 6, [-1.0] + [0.0] * 5)
    assert conditioned.class_lengths([0.5, 3.5]).shape == (2, 3)
    for outside in (np.nextafter(0.5, 0.0), np.nextafter(3.5, 4.0)):
        with pytest.raises(ValueError, match=r"b must lie in the trained effort range"):
            conditioned.class_lengths(outside)


# ---------------------------------------------------------------------------------------------
# the conditioned policy, hand-set: tensor features of b and ln λ, unequal weights
# ---------------------------------------------------------------------------------------------

CLASSES = np.array([30.0, 90.0, 500.0])
CLASS_WEIGHTS = np.array([0.5, 0.3, 0.2])
COND: dict[str, Any] = {"b_min": 0.5, "b_max": 3.5, "degrees": (2, 1), "q_max": 0.8}
COND_PENALTY: dict[str, Any] = {"k0": 0.003, "tau": 0.8}


def conditioned_policy(mean_coef: list[float], spread_coef: list[float]) -> ConditionedEffortPolicy:
    return ConditionedEffortPolicy(
        mean_coef=np.asarray(mean_coef, dtype=np.float64),
        log_spread_coef=np.asarray(spread_coef, dtype=np.float64),
        lam=CLASSES.copy(),
        weights=CLASS_WEIGHTS.copy(),
        reward_history=np.zeros(1),
        **COND,
        **COND_PENALTY,
    )


def conditioned_features(b: float, lam: float) -> list[float]:
    lo, hi = math.log(CLASSES[0]), math.log(CLASSES[-1])
    fb = chebyshev(2.0 * (b - 0.5) / 3.0 - 1.0, 2)
    fl = chebyshev(2.0 * (math.log(lam) - lo) / (hi - lo) - 1.0, 1)
    return [x * y for x in fb for y in fl]  # T_i(z_b) T_j(z_λ), i major


MEAN6 = [4.3, 0.8, 0.2, -0.1, 0.05, 0.03]
SPREAD6 = [-1.4, 0.3, 0.25, -0.2, 0.1, 0.05]


def test_conditioned_policy_methods_are_the_closed_forms_per_class() -> None:
    policy = conditioned_policy(MEAN6, SPREAD6)
    b = np.array([0.5, 1.7, 3.5])
    lengths = policy.class_lengths(b)
    point = policy.evaluate(b)
    assert lengths.shape == (3, 3)
    assert lengths.dtype == np.float64
    for i, effort in enumerate(b):
        want_cost, want_quality = 0.0, 0.0
        for d, lam in enumerate(CLASSES):
            mu, sigma = policy_point(
                np.asarray(MEAN6), np.asarray(SPREAD6), conditioned_features(effort, lam)
            )
            assert 0.05 < sigma < 0.6
            mean = math.exp(mu + 0.5 * sigma**2)
            assert lengths[i, d] == pytest.approx(mean, rel=1e-13)
            want_cost += CLASS_WEIGHTS[d] * mean
            want_quality += CLASS_WEIGHTS[d] * lognormal_quality(mu, sigma, q_max=0.8, lam=lam)
        assert point.cost[i] == pytest.approx(want_cost, rel=1e-13)
        assert point.quality[i] == pytest.approx(want_quality, rel=1e-11)
    best = effort_frontier(
        b, q_max=0.8, lam=CLASSES, weights=CLASS_WEIGHTS, b_min=0.5, **COND_PENALTY
    )
    k = effort_penalty(b, k0=0.003, b_min=0.5, tau=0.8)
    want_regret = (best.quality - k * best.cost) - (point.quality - k * point.cost)
    np.testing.assert_allclose(policy.regret(b), want_regret, rtol=1e-12, atol=1e-15)
    assert np.all(policy.regret(b) > 0.0)


def test_conditioned_policy_of_one_class_has_no_difficulty_axis() -> None:
    # one class: the ln λ range has width 0 and its feature is T_j(0) (z_λ = 0)
    policy = ConditionedEffortPolicy(
        mean_coef=np.array([4.0, 0.3, 0.0, 0.0, 0.0, 0.0]),
        log_spread_coef=np.array([-1.0, 0.0, 0.0, 0.0, 0.5, 0.0]),
        lam=np.array([70.0]),
        weights=np.array([1.0]),
        reward_history=np.zeros(1),
        **COND,
        **COND_PENALTY,
    )
    b = 2.0  # z_b = 0: T(z_b) = (1, 0, -1); T(z_λ) = (1, 0)
    mu, sigma = 4.0, math.exp(-1.0 - 0.5)
    assert policy.class_lengths([b])[0, 0] == pytest.approx(math.exp(mu + sigma**2 / 2), rel=1e-14)


# ---------------------------------------------------------------------------------------------
# training: the docstrings' algorithm, written again here, step by step
# ---------------------------------------------------------------------------------------------


def adam(
    theta: Array, g: Array, m1: Array, m2: Array, *, t: int, steps: int, lr: float
) -> tuple[Array, Array, Array]:
    m1 = 0.9 * m1 + 0.1 * g
    m2 = 0.999 * m2 + 0.001 * g * g
    size = lr * (1.0 - (t - 1) / steps)
    m_hat, v_hat = m1 / (1.0 - 0.9**t), m2 / (1.0 - 0.999**t)
    return theta + size * m_hat / (np.sqrt(v_hat) + 1e-8), m1, m2


def reinforce(rewards: Array, eps: Array, sigma: Array, features: Array) -> tuple[Array, Array]:
    batch, group = rewards.shape
    adv = (rewards - rewards.mean(axis=1, keepdims=True)) * group / (group - 1)
    g_mu = (adv * eps).mean(axis=1) / sigma
    g_log_sigma = (adv * (eps * eps - 1.0)).mean(axis=1)
    return features.T @ g_mu / batch, features.T @ g_log_sigma / batch


def reference_single_training(
    *, seed: int, steps: int, batch: int, group: int, degree: int, lr: float, noise: float,
    spread: float, q_max: float, lam: float, k0: float, b_min: float, tau: float, b_max: float,
) -> tuple[Array, Array, Array]:  # fmt: skip
    rng = np.random.default_rng(seed)
    n = degree + 1
    theta = np.zeros(2 * n)
    theta[0], theta[n] = math.log(lam), math.log(spread)
    m1, m2 = np.zeros(2 * n), np.zeros(2 * n)
    history = []
    for t in range(1, steps + 1):
        b = b_min + (b_max - b_min) * (np.arange(batch) + rng.uniform(size=batch)) / batch
        features = np.array([chebyshev(2 * (x - b_min) / (b_max - b_min) - 1, degree) for x in b])
        mu, sigma = features @ theta[:n], np.exp(features @ theta[n:])
        eps = rng.standard_normal((batch, group))
        ell = np.exp(np.minimum(mu[:, None] + sigma[:, None] * eps, 700.0))
        k = k0 * np.exp(-(b - b_min) / tau)
        rewards = q_max * (1.0 - np.exp(-ell / lam)) - k[:, None] * ell
        if noise > 0:
            rewards = rewards + noise * rng.standard_normal((batch, group))
        history.append(rewards.mean())
        g_mu, g_sigma = reinforce(rewards, eps, sigma, features)
        theta, m1, m2 = adam(
            theta, np.concatenate([g_mu, g_sigma]), m1, m2, t=t, steps=steps, lr=lr
        )
    return theta[:n], theta[n:], np.asarray(history)


SINGLE_RUN: dict[str, Any] = {
    "q_max": 0.9,
    "lam": 80.0,
    "k0": 0.006,
    "b_min": -1.0,
    "tau": 0.7,
    "b_max": 2.0,
}


@pytest.mark.parametrize("noise", [0.0, 0.03])
def test_effort_training_is_the_documented_algorithm(noise: float) -> None:
    settings_: dict[str, Any] = {
        "steps": 5, "batch": 4, "group": 3, "degree": 2, "noise": noise,
    }  # fmt: skip
    policy = train_effort_policy(
        **SINGLE_RUN, rng=7, learning_rate=0.07, initial_spread=0.4, **settings_
    )
    mean, spread, history = reference_single_training(
        seed=7, lr=0.07, spread=0.4, **settings_, **SINGLE_RUN
    )
    np.testing.assert_allclose(policy.mean_coef, mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(policy.log_spread_coef, spread, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(policy.reward_history, history, rtol=1e-10, atol=1e-13)
    assert (policy.b_min, policy.b_max, policy.q_max, policy.lam, policy.k0, policy.tau) == (
        -1.0, 2.0, 0.9, 80.0, 0.006, 0.7,
    )  # fmt: skip


def reference_conditioned_training(
    *, seed: int, steps: int, batch: int, group: int, degrees: tuple[int, int], lr: float,
    spread: float, bernoulli: bool, q_max: float, lam: Array, weights: Array, k0: float,
    b_min: float, tau: float, b_max: float,
) -> tuple[Array, Array, Array]:  # fmt: skip
    rng = np.random.default_rng(seed)
    n = (degrees[0] + 1) * (degrees[1] + 1)
    lo, hi = math.log(lam.min()), math.log(lam.max())
    theta = np.zeros(2 * n)
    theta[0] = (lo + hi) / 2  # μ = ln λ at the start: centre + half-width·T_1(z_λ)
    theta[1] = (hi - lo) / 2
    theta[n] = math.log(spread)
    m1, m2 = np.zeros(2 * n), np.zeros(2 * n)
    cumulative = np.cumsum(weights)
    history = []
    for t in range(1, steps + 1):
        b = b_min + (b_max - b_min) * (np.arange(batch) + rng.uniform(size=batch)) / batch
        picks = rng.uniform(size=batch)
        cls = [min(int(np.sum(cumulative < u)), lam.size - 1) for u in picks]
        features = np.array(
            [
                [
                    x * y
                    for x in chebyshev(2 * (bi - b_min) / (b_max - b_min) - 1, degrees[0])
                    for y in chebyshev(2 * (math.log(lam[d]) - lo) / (hi - lo) - 1, degrees[1])
                ]
                for bi, d in zip(b, cls, strict=True)
            ]
        )
        mu, sigma = features @ theta[:n], np.exp(features @ theta[n:])
        eps = rng.standard_normal((batch, group))
        ell = np.exp(np.minimum(mu[:, None] + sigma[:, None] * eps, 700.0))
        quality = q_max * (1.0 - np.exp(-ell / lam[cls][:, None]))
        if bernoulli:
            quality = (rng.uniform(size=(batch, group)) < quality).astype(np.float64)
        k = k0 * np.exp(-(b - b_min) / tau)
        rewards = quality - k[:, None] * ell
        history.append(rewards.mean())
        g_mu, g_sigma = reinforce(rewards, eps, sigma, features)
        theta, m1, m2 = adam(
            theta, np.concatenate([g_mu, g_sigma]), m1, m2, t=t, steps=steps, lr=lr
        )
    return theta[:n], theta[n:], np.asarray(history)


COND_RUN: dict[str, Any] = {
    "q_max": 0.85,
    "k0": 0.003,
    "b_min": 0.5,
    "tau": 0.8,
    "b_max": 3.5,
}


@pytest.mark.parametrize("success", ["bernoulli", "expected"])
def test_conditioned_training_is_the_documented_algorithm(success: str) -> None:
    policy = train_conditioned_policy(
        lam=CLASSES, weights=CLASS_WEIGHTS, rng=13, steps=5, batch=6, group=3, degree=2,
        feature_degree=1, learning_rate=0.02, success=success, initial_spread=0.3, **COND_RUN,
    )  # fmt: skip
    mean, spread, history = reference_conditioned_training(
        seed=13, steps=5, batch=6, group=3, degrees=(2, 1), lr=0.02, spread=0.3,
        bernoulli=success == "bernoulli", lam=CLASSES, weights=CLASS_WEIGHTS, **COND_RUN,
    )  # fmt: skip
    np.testing.assert_allclose(policy.mean_coef, mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(policy.log_spread_coef, spread, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(policy.reward_history, history, rtol=1e-10, atol=1e-13)
    assert policy.degrees == (2, 1)
    assert policy.lam.tolist() == CLASSES.tolist()
    assert policy.weights.tolist() == CLASS_WEIGHTS.tolist()
    assert (policy.b_min, policy.b_max, policy.q_max, policy.k0, policy.tau) == (
        0.5, 3.5, 0.85, 0.003, 0.8,
    )  # fmt: skip


def test_the_reference_training_rejects_a_wrong_step() -> None:
    # the comparison can fail: a reference whose Adam omits the bias correction of the second
    # moment is told apart from the library after five steps
    policy = train_effort_policy(
        **SINGLE_RUN, rng=7, steps=5, batch=4, group=3, degree=2, learning_rate=0.07
    )
    right = reference_single_training(
        seed=7, steps=5, batch=4, group=3, degree=2, lr=0.07, noise=0.0, spread=0.5, **SINGLE_RUN
    )
    np.testing.assert_allclose(policy.mean_coef, right[0], rtol=1e-10, atol=1e-12)

    def wrong_adam(
        theta: Array, g: Array, m1: Array, m2: Array, *, t: int, steps: int, lr: float
    ) -> tuple[Array, Array, Array]:
        m1 = 0.9 * m1 + 0.1 * g
        m2 = 0.999 * m2 + 0.001 * g * g
        size = lr * (1.0 - (t - 1) / steps)
        return theta + size * (m1 / (1.0 - 0.9**t)) / (np.sqrt(m2) + 1e-8), m1, m2

    def compare() -> None:
        original = globals()["adam"]
        globals()["adam"] = wrong_adam
        try:
            wrong = reference_single_training(
                seed=7, steps=5, batch=4, group=3, degree=2, lr=0.07, noise=0.0, spread=0.5,
                **SINGLE_RUN,
            )  # fmt: skip
        finally:
            globals()["adam"] = original
        np.testing.assert_allclose(policy.mean_coef, wrong[0], rtol=1e-10, atol=1e-12)

    rejects(compare)


# ---------------------------------------------------------------------------------------------
# bisections at full resolution, and frontier_quality at the edges of float64
# ---------------------------------------------------------------------------------------------


@st.composite
def asymmetric_mixes(draw: st.DrawFn) -> dict[str, Any]:
    """2–4 classes with distinct λ and q_max and unequal, non-unit weights."""
    size = draw(st.integers(2, 4))
    lam = sorted(draw(st.lists(st.floats(5.0, 800.0), min_size=size, max_size=size, unique=True)))
    q_max = draw(st.lists(st.floats(0.3, 2.0), min_size=size, max_size=size))
    raw = draw(st.lists(st.floats(0.05, 1.0), min_size=size, max_size=size))
    weights = np.asarray(raw) / sum(raw)
    return {"q_max": np.asarray(q_max), "lam": np.asarray(lam), "weights": weights}


def check_frontier_quality_inverts_the_frontier(quality_at: Callable[..., Array]) -> Any:

    @given(asymmetric_mixes(), st.lists(st.floats(0.0, 6.0), min_size=1, max_size=5))
    def prop(mix: dict[str, Any], b: list[float]) -> None:
        front = effort_frontier(b, k0=0.004, b_min=0.0, tau=0.9, **mix)
        got = quality_at(front.cost, **mix)
        positive = front.cost > 0
        np.testing.assert_allclose(got[positive], front.quality[positive], rtol=1e-12, atol=0)

    return prop


def test_frontier_quality_inverts_the_frontier_at_full_resolution() -> None:
    run_property(check_frontier_quality_inverts_the_frontier(frontier_quality))


def test_inversion_property_rejects_a_bisection_stopped_early() -> None:
    def coarse(cost: Array, **mix: Any) -> Array:
        # the same search stopped after 30 halvings: right to about 1e-9, not to float64
        w, lam, q = mix["weights"], mix["lam"], mix["q_max"]
        threshold = np.log(lam / q)
        lo = np.full(cost.shape, threshold.min())
        hi = np.maximum((cost + w @ (lam * threshold)) / (w @ lam), threshold.max())
        for _ in range(30):
            mid = 0.5 * (lo + hi)
            short = np.maximum(mid[..., None] - threshold, 0.0) @ (w * lam) < cost
            lo, hi = np.where(short, mid, lo), np.where(short, hi, mid)
        spends = hi[..., None] > threshold
        quality = np.where(spends, q - lam * np.exp(-hi[..., None]), 0.0) @ w
        return np.asarray(np.where(cost > 0, quality, 0.0))

    rejects(check_frontier_quality_inverts_the_frontier(coarse))


def test_frontier_quality_where_lambda_over_q_max_leaves_float64() -> None:
    # classes 1e-300, 1 and 1e308 (q_max = 1, weights 1/4, 1/2, 1/4): thresholds ln λ of about
    # -690.8, 0 and 709.2. At cost 1e-300 only the first class spends, 1e-300 = (1/4)·1e-300·(u − t1),
    # so u − t1 = 4 and the quality is (1/4)(1 − e^{-4}); at cost 1e308 every class spends and
    # u − t3 solves (1/4)·1e-300·(u − t1) + (1/2)u + (1/4)·1e308·(u − t3) = 1e308.
    lam = [1e-300, 1.0, 1e308]
    with np.errstate(over="raise", divide="raise", invalid="raise"):  # no warning may leave
        got = frontier_quality([0.0, 1e-300, 1e308], q_max=1.0, lam=lam, weights=[0.25, 0.5, 0.25])
    t3 = math.log(1e308)
    x = 4.0 - (0.5 * t3) / (0.25 * 1e308)  # (u − t3), the other classes' cost being negligible
    want_top = 0.25 * (-math.expm1(-(x + t3 - math.log(1e-300)))) + 0.5 * -math.expm1(
        -(x + t3)
    ) + 0.25 * -math.expm1(-x)  # fmt: skip
    assert got[0] == 0.0
    assert got[1] == pytest.approx(0.25 * -math.expm1(-4.0), rel=1e-12)
    assert got[2] == pytest.approx(want_top, rel=1e-12)
    # q_max far from λ: one class, cost C: u = ln λ − ln q + C/λ, quality q(1 − e^{−C/λ})
    with np.errstate(over="raise", divide="raise", invalid="raise"):
        tiny = frontier_quality([1.0], q_max=1e-300, lam=1e10, weights=[1.0])
        big = frontier_quality([1e-300], q_max=1e300, lam=1e-300, weights=[1.0])
    assert tiny[0] == pytest.approx(1e-300 * -math.expm1(-1e-10), rel=1e-9)
    assert big[0] == pytest.approx(1e300 * -math.expm1(-1.0), rel=1e-12)


def test_adaptive_gaps_budget_length_is_the_float64_inverse_of_the_budget_curve() -> None:
    # documented: B^{-1}(A) by bisection to float64 resolution: B at the returned length reaches
    # the adaptive quality, and B one float below it does not (up to the curve's own rounding)
    mix = {"q_max": [0.7, 1.3, 1.0], "lam": [15.0, 120.0, 700.0], "weights": [0.45, 0.35, 0.2]}
    b = np.array([0.5, 1.5, 3.0, 5.0])
    gap = adaptive_gap(b, k0=0.004, b_min=0.0, tau=0.9, **mix)
    at = budget_frontier(gap.budget_length, **mix).quality
    below = budget_frontier(np.nextafter(gap.budget_length, 0.0), **mix).quality
    assert np.all(at >= gap.quality)
    assert np.all(below < gap.quality)  # the smallest such length: one float less falls short
    np.testing.assert_allclose(at, gap.quality, rtol=1e-15, atol=0)
    assert np.all(gap.cost_saved > 0.0)
    assert np.all(gap.quality_gained > 0.0)
    np.testing.assert_allclose(gap.cost_saved, gap.budget_length - gap.cost, rtol=1e-15)
    np.testing.assert_allclose(gap.quality_gained, gap.quality - gap.budget_quality, rtol=1e-15)


# ---------------------------------------------------------------------------------------------
# degenerate branches: empty efforts, one class, scalars
# ---------------------------------------------------------------------------------------------

PEN: dict[str, float] = {"k0": 0.005, "b_min": 0.0, "tau": 1.0}
MIX3: dict[str, Any] = {"q_max": [1.0, 0.8, 1.2], "lam": [20.0, 90.0, 300.0]}
W3 = [0.5, 0.3, 0.2]

EMPTY_CASES: list[tuple[str, Callable[[], Any], tuple[int, ...]]] = [
    ("effort_penalty", lambda: effort_penalty([], **PEN), (0,)),
    ("saturating_quality", lambda: saturating_quality([], q_max=1.0, lam=5.0), (0,)),
    ("shaped_reward", lambda: shaped_reward([], [], 0.0, **PEN), (0,)),
    ("optimal_length", lambda: optimal_length([], q_max=1.0, lam=50.0, **PEN), (0,)),
    ("optimal_length per class", lambda: optimal_length([], **MIX3, **PEN), (0, 3)),
    ("optimal_length mix", lambda: optimal_length([], **MIX3, weights=W3, **PEN), (0,)),
    ("frontier_quality", lambda: frontier_quality([], **MIX3, weights=W3), (0,)),
    ("effort_frontier cost", lambda: effort_frontier([], **MIX3, **PEN).cost, (0, 3)),
    ("effort_frontier quality", lambda: effort_frontier([], **MIX3, **PEN).quality, (0, 3)),
    ("budget_frontier cost", lambda: budget_frontier([], **MIX3, weights=None).cost, (0, 3)),
    ("budget_frontier mix", lambda: budget_frontier([], **MIX3, weights=W3).quality, (0,)),
    ("adaptive_gap", lambda: adaptive_gap([], **MIX3, weights=W3, **PEN).cost_saved, (0,)),
]


@pytest.mark.parametrize("case", EMPTY_CASES, ids=[c[0] for c in EMPTY_CASES])
def test_empty_efforts_give_empty_float64_arrays_of_the_documented_shape(
    case: tuple[str, Callable[[], Any], tuple[int, ...]],
) -> None:
    _, call, shape = case
    out = call()
    assert isinstance(out, np.ndarray)
    assert out.dtype == np.float64
    assert out.shape == shape


def test_pareto_front_of_nothing_and_of_one_point() -> None:
    none = pareto_front([], [])
    assert none.dtype == np.intp
    assert none.shape == (0,)
    one = pareto_front([2.0], [0.5])
    assert one.dtype == np.intp
    assert one.tolist() == [0]


def test_scalar_efforts_give_zero_dimensional_results_with_the_values() -> None:
    k = effort_penalty(1.0, **PEN)
    assert k.shape == ()
    assert float(k) == pytest.approx(0.005 / math.e, rel=1e-15)
    front = effort_frontier(2.0, q_max=1.0, lam=100.0, **PEN)
    assert isinstance(front, EffortFrontier)
    assert front.cost.shape == ()
    assert float(front.cost) == pytest.approx(100.0 * (math.log(1.0 / 0.5) + 2.0), rel=1e-15)
    assert float(front.quality) == pytest.approx(1.0 - 100.0 * 0.005 * math.exp(-2.0), rel=1e-15)
    mixed = effort_frontier(2.0, **MIX3, weights=W3, **PEN)
    assert mixed.cost.shape == ()
    assert mixed.quality.shape == ()
    lengths = [lam * max(0.0, math.log(q / (lam * 0.005)) + 2.0) for q, lam in zip(
        MIX3["q_max"], MIX3["lam"], strict=True)]  # fmt: skip
    assert float(mixed.cost) == pytest.approx(float(np.dot(W3, lengths)), rel=1e-14)


def test_a_one_entry_class_parameter_is_one_for_all_and_other_sizes_are_refused() -> None:
    # "q_max and lam may also have one for all": a one-entry array is broadcast over the classes
    # (as a scalar is), any other size than the class count is refused in refimpl's words
    lam = [20.0, 90.0, 300.0]
    as_array = optimal_length([0.5, 2.0], q_max=[0.8], lam=lam, **PEN)
    as_scalar = optimal_length([0.5, 2.0], q_max=0.8, lam=lam, **PEN)
    assert as_array.shape == (2, 3)
    assert as_array.tolist() == as_scalar.tolist()
    one_lam = effort_frontier(1.0, q_max=[0.8, 1.0, 1.2], lam=[70.0], weights=W3, **PEN)
    per_class = effort_frontier(1.0, q_max=[0.8, 1.0, 1.2], lam=[70.0] * 3, weights=W3, **PEN)
    assert float(one_lam.cost) == float(per_class.cost)
    assert float(one_lam.quality) == float(per_class.quality)
    for q_max, lam_, name in (([0.8, 0.9], lam, "q_max"), (0.8, [20.0, 90.0], "lam")):
        with pytest.raises(ValueError, match=rf"{name} must have one entry per class"):
            optimal_length(1.0, q_max=q_max, lam=lam_, weights=W3, **PEN)
    with pytest.raises(ValueError, match=r"weights must have one entry per class"):
        optimal_length(1.0, q_max=0.8, lam=lam, weights=[1.0], **PEN)


def test_an_optimal_length_past_float64_is_refused_on_every_path() -> None:
    # λ·(b − b_min)/τ beyond 1.8e308: the one-class path and the per-class path of a mix (optimal
    # length, frontier, gap) refuse it naming b, never return inf
    huge: dict[str, Any] = {"k0": 0.005, "b_min": 0.0, "tau": 1e-300}
    calls: list[Callable[[], Any]] = [
        lambda: optimal_length([1.0, 1e10], q_max=1.0, lam=50.0, **huge),
        lambda: optimal_length([1.0, 1e10], **MIX3, **huge),
        lambda: optimal_length([1e10], **MIX3, weights=W3, **huge),
        lambda: effort_frontier([1e10], **MIX3, **huge),
        lambda: adaptive_gap([1e10], **MIX3, weights=W3, **huge),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=r"b must give a finite optimal length"):
            call()
    # just inside: finite and exact to the formula
    inside = optimal_length([1e-290], **MIX3, **huge)
    want = [
        lam * (math.log(q / (lam * 0.005)) + 1e10)
        for q, lam in zip(MIX3["q_max"], MIX3["lam"], strict=True)
    ]
    np.testing.assert_allclose(inside[0], want, rtol=1e-15)


def test_where_the_qualities_saturate_the_equal_quality_length_is_the_smallest() -> None:
    # at a large effort the adaptive quality is Σ w q_max in float64 and so is the budget curve
    # for every long enough length: B^{-1}(A) is the shortest of them, not the top of the bracket
    mix = {"q_max": [0.7, 1.3, 1.0], "lam": [15.0, 120.0, 700.0], "weights": [0.45, 0.35, 0.2]}
    gap = adaptive_gap([40.0, 60.0], k0=0.004, b_min=0.0, tau=0.9, **mix)
    top = float(np.dot(mix["weights"], mix["q_max"]))
    assert gap.quality.tolist() == [top, top]
    at = budget_frontier(gap.budget_length, **mix).quality
    below = budget_frontier(np.nextafter(gap.budget_length, 0.0), **mix).quality
    assert at.tolist() == [top, top]
    assert np.all(below < top)
    assert gap.budget_length[0] == gap.budget_length[1]  # the same shortest saturating length
    np.testing.assert_allclose(gap.cost_saved, gap.budget_length - gap.cost, rtol=1e-15)


def test_difficulty_mix_takes_exactly_a_million_nodes() -> None:
    """The hand-written cap nodes <= 10^6: at the bound accepted (equal weights summing to 1 and
    the median at the middle of the symmetric rule), one past it refused naming nodes."""
    mix = difficulty_mix(median=100.0, sigma=1.0, nodes=1_000_000)
    assert mix.lam.shape == mix.weights.shape == (1_000_000,)
    assert mix.weights.sum() == pytest.approx(1.0, rel=1e-12)
    assert np.all(np.diff(mix.lam) > 0)
    with pytest.raises(ValueError, match=r"^nodes must be <= 1000000"):
        difficulty_mix(median=100.0, sigma=1.0, nodes=1_000_001)
