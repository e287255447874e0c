"""The proximal log-probabilities approximated between behaviour and current policy
(refimpl.losses.proximal_logprobs, proximal_interpolation_weight).

Exact values on dyadic inputs (Fractions: the log-linear interpolation is linear in log space, and
staleness 1, 2, 4, 8 gives the weights 0, 1/2, 3/4, 7/8); the linear one against the log of an
exact arithmetic mean of powers of two; properties (the weight from the staleness, the linear
approximation as an arithmetic mean, its derivative), each run against a wrong variant it must
reject (weight inverted, versions swapped, prompt tokens interpolated, a geometric mean, the
log-linear derivative); validation.
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

from refimpl.errors import RefimplError
from refimpl.losses import ProximalLogprobs, proximal_interpolation_weight, proximal_logprobs

Array = NDArray[np.float64]
Approx = Callable[..., ProximalLogprobs]

# ---------------------------------------------------------------------------------------------
# (1) exact values
# ---------------------------------------------------------------------------------------------


def test_weights_by_hand() -> None:
    # v_θ = 8, v_p = 7: staleness 8, 4, 2, 1, 0 and a prompt token
    got = proximal_interpolation_weight([[0, 4, 6, 7, 8, -1]], current_version=8)
    assert got.tolist() == [[0.875, 0.75, 0.5, 0.0, 0.0, 0.0]]
    # an explicit proximal version: v_p = v_θ gives 1 to every generated older token
    same = proximal_interpolation_weight([[0, 7, 8, -1]], current_version=8, proximal_version=8)
    assert same.tolist() == [[1.0, 1.0, 0.0, 0.0]]
    # v_p = v_θ − 3: a token sampled after it (v = 6 > 5) is clipped to 0; v = 1: (5−1)/(8−1)
    early = proximal_interpolation_weight([[6, 1]], current_version=8, proximal_version=5)
    assert early.tolist() == [[0.0, 4 / 7]]


def test_loglinear_by_hand() -> None:
    lp = [[-0.5, -0.5, -0.5, -0.5, -0.5]]
    lb = [[-4.5, -4.5, -4.5, -4.5, -4.5]]
    got = proximal_logprobs(lp, lb, [[0, 4, 6, 7, -1]], current_version=8)
    # b + α (ℓ − b) = −4.5 + 4α for α = 7/8, 3/4, 1/2, 0, 0
    want = [
        float(Fraction(-9, 2) + 4 * a)
        for a in (Fraction(7, 8), Fraction(3, 4), Fraction(1, 2), 0, 0)
    ]
    assert got.logp_prox.tolist() == [want]
    assert got.grad.tolist() == [[0.875, 0.75, 0.5, 0.0, 0.0]]


def test_linear_by_hand() -> None:
    ln2 = math.log(2.0)
    # p_θ = 1/2, μ = 1/8; α = 1/2: log(1/16 + 1/4) = log(5/16); α = 3/4: log(1/32 + 3/8)
    got = proximal_logprobs(
        [[-ln2, -ln2, -ln2]], [[-3 * ln2] * 3], [[6, 4, 7]], current_version=8, method="linear"
    )
    mean = [Fraction(5, 16), Fraction(13, 32)]
    np.testing.assert_allclose(
        got.logp_prox[0], [math.log(mean[0]), math.log(mean[1]), -3 * ln2], rtol=4e-16
    )
    # ∂/∂ℓ = α p_θ / p̄: (1/4)/(5/16) = 4/5, (3/8)/(13/32) = 12/13, 0
    np.testing.assert_allclose(got.grad[0], [4 / 5, 12 / 13, 0.0], rtol=4e-16)


def test_linear_floor_is_added_to_the_probability() -> None:
    got = proximal_logprobs([[0.0]], [[0.0]], [[6]], current_version=8, method="linear", floor=1.0)
    assert got.logp_prox.tolist() == [[math.log(2.0)]]  # log(1/2·1 + 1/2·1 + 1)
    assert got.grad.tolist() == [[0.25]]  # (1/2·1) / 2


def test_rollout_is_the_behaviour_policy_without_gradient() -> None:
    got = proximal_logprobs(
        [[-1.0, -2.0]], [[-3.0, -5.0]], [[0, 1]], current_version=4, method="rollout"
    )
    assert got.logp_prox.tolist() == [[-3.0, -5.0]]
    assert got.grad.tolist() == [[0.0, 0.0]]


def test_linear_does_not_overflow_or_underflow() -> None:
    got = proximal_logprobs(
        [[-2000.0, 800.0]], [[-1000.0, 0.0]], [[6, 6]], current_version=8, method="linear"
    )
    # log(e^-1000/2 + e^-2000/2) = −1000 − log 2 (+ e^-1000, lost); log(e^800/2 + 1/2)
    np.testing.assert_allclose(got.logp_prox[0], [-1000.0 - math.log(2.0), 800.0 - math.log(2.0)])
    np.testing.assert_allclose(got.grad[0], [0.0, 1.0], atol=1e-300)


# ---------------------------------------------------------------------------------------------
# (2) properties, each paired with a wrong variant it rejects
# ---------------------------------------------------------------------------------------------

Batch = tuple[Array, Array, NDArray[np.int64], int]


@st.composite
def batches(draw: st.DrawFn) -> Batch:
    """Dyadic log-probabilities (k/8) and versions of staleness 0, 1, 2, 4, 8 or a prompt token:
    every weight is dyadic, so the log-linear interpolation is exact in float64."""
    b, t = draw(st.integers(1, 3)), draw(st.integers(1, 5))
    theta = draw(st.integers(8, 12))
    dyadic = st.integers(-160, 0).map(lambda k: k / 8.0)
    lp = np.asarray(draw(st.lists(dyadic, min_size=b * t, max_size=b * t))).reshape(b, t)
    lb = np.asarray(draw(st.lists(dyadic, min_size=b * t, max_size=b * t))).reshape(b, t)
    stale = st.sampled_from([0, 1, 2, 4, 8, None])
    v = [
        theta - s if s is not None else -1
        for s in draw(st.lists(stale, min_size=b * t, max_size=b * t))
    ]
    return lp, lb, np.asarray(v, dtype=np.int64).reshape(b, t), theta


def _exact_loglinear(lp: float, lb: float, v: int, theta: int) -> Fraction:
    s = theta - v
    alpha = Fraction(s - 1, s) if v >= 0 and s >= 1 else Fraction(0)
    return Fraction(lb) + alpha * (Fraction(lp) - Fraction(lb))


def check_loglinear_is_the_staleness_weight(fn: Approx) -> Callable[[], None]:
    @given(batches())
    def prop(batch: Batch) -> None:
        lp, lb, v, theta = batch
        got = fn(lp, lb, v, current_version=theta).logp_prox
        want = [
            [
                float(_exact_loglinear(lp[i, j], lb[i, j], int(v[i, j]), theta))
                for j in range(lp.shape[1])
            ]
            for i in range(lp.shape[0])
        ]
        assert got.tolist() == want

    return prop


def _inverted(lp: Any, lb: Any, v: Any, *, current_version: int) -> ProximalLogprobs:
    """Wrong: the weight 1 − α on the current policy (α on the behaviour one)."""
    a = proximal_interpolation_weight(v, current_version=current_version)
    w = np.where(np.asarray(v) >= 0, 1.0 - a, 0.0)
    lb = np.asarray(lb)
    return ProximalLogprobs(lb + w * (np.asarray(lp) - lb), w)


def _swapped(lp: Any, lb: Any, v: Any, *, current_version: int) -> ProximalLogprobs:
    """Wrong: v_b and v_θ swapped, α = (v_p − v_θ)/(v_b − v_θ) = 1/s."""
    v = np.asarray(v)
    s = current_version - v
    w = np.where((v >= 0) & (s > 0), 1.0 / np.where(s > 0, s, 1), 0.0)
    lb = np.asarray(lb)
    return ProximalLogprobs(lb + w * (np.asarray(lp) - lb), w)


def _prompt_interpolated(lp: Any, lb: Any, v: Any, *, current_version: int) -> ProximalLogprobs:
    """Wrong: a prompt token's version −1 is read as a version (weight v_θ/(v_θ + 1))."""
    v = np.asarray(v)
    w = np.clip((current_version - 1 - v) / np.maximum(current_version - v, 1), 0.0, 1.0)
    lb = np.asarray(lb)
    return ProximalLogprobs(lb + w * (np.asarray(lp) - lb), w)


def test_loglinear_is_the_staleness_weight() -> None:
    run_property(check_loglinear_is_the_staleness_weight(proximal_logprobs))


@pytest.mark.parametrize("wrong", [_inverted, _swapped, _prompt_interpolated])
def test_staleness_weight_property_rejects(wrong: Approx) -> None:
    rejects(check_loglinear_is_the_staleness_weight(wrong))


def check_linear_is_an_arithmetic_mean(fn: Approx) -> Callable[[], None]:
    """exp of the result is (1 − α)·μ + α·π_θ (to a few ulps), its derivative α·π_θ / p̄."""

    @given(batches())
    def prop(batch: Batch) -> None:
        lp, lb, v, theta = batch
        got = fn(lp, lb, v, current_version=theta, method="linear")
        a = proximal_interpolation_weight(v, current_version=theta)
        mean = (1.0 - a) * np.exp(lb) + a * np.exp(lp)
        np.testing.assert_allclose(np.exp(got.logp_prox), mean, rtol=1e-14)
        np.testing.assert_allclose(got.grad, a * np.exp(lp) / mean, rtol=1e-14)

    return prop


def _geometric(lp: Any, lb: Any, v: Any, *, current_version: int, method: str) -> ProximalLogprobs:
    """Wrong: the log-linear approximation under the name linear."""
    return proximal_logprobs(lp, lb, v, current_version=current_version)


def _loglinear_derivative(
    lp: Any, lb: Any, v: Any, *, current_version: int, method: str
) -> ProximalLogprobs:
    """Wrong: the linear value with the log-linear derivative α."""
    out = proximal_logprobs(lp, lb, v, current_version=current_version, method="linear")
    return ProximalLogprobs(
        out.logp_prox, proximal_interpolation_weight(v, current_version=current_version)
    )


def test_linear_is_an_arithmetic_mean() -> None:
    run_property(check_linear_is_an_arithmetic_mean(proximal_logprobs))


@pytest.mark.parametrize("wrong", [_geometric, _loglinear_derivative])
def test_arithmetic_mean_property_rejects(wrong: Approx) -> None:
    rejects(check_linear_is_an_arithmetic_mean(wrong))


def test_linear_lies_above_loglinear() -> None:
    """The arithmetic mean is at least the geometric one (equal where α ∈ {0, 1} or ℓ = b)."""

    @given(batches())
    def prop(batch: Batch) -> None:
        lp, lb, v, theta = batch
        lin = proximal_logprobs(lp, lb, v, current_version=theta, method="linear").logp_prox
        geo = proximal_logprobs(lp, lb, v, current_version=theta).logp_prox
        assert np.all(lin >= geo - 1e-13 * np.abs(geo))

    run_property(prop)


# ---------------------------------------------------------------------------------------------
# (3) validation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "kwargs", "name"),
    [
        (([[0.0]], [[0.0]], [[5]]), {"current_version": 4}, "versions"),
        (([[0.0]], [[0.0]], [[1.5]]), {"current_version": 4}, "versions"),
        (([[0.0]], [[0.0]], [[1, 2]]), {"current_version": 4}, "versions"),
        (([[0.0]], [[0.0]], [[1]]), {"current_version": 0}, "versions"),
        (([[0.0]], [[0.0]], [[1]]), {"current_version": 2.0}, "current_version"),
        (
            ([[0.0]], [[0.0]], [[1]]),
            {"current_version": 4, "proximal_version": 5},
            "proximal_version",
        ),
        (([[0.0]], [[0.0]], [[1]]), {"current_version": 4, "method": "geometric"}, "method"),
        (([[0.0]], [[0.0]], [[1]]), {"current_version": 4, "floor": -1e-10}, "floor"),
        (([[0.0]], [[0.0, 0.0]], [[1]]), {"current_version": 4}, "logp_behavior"),
        (([[math.nan]], [[0.0]], [[1]]), {"current_version": 4}, "logp"),
    ],
)
def test_arguments_are_validated(args: tuple[Any, ...], kwargs: dict[str, Any], name: str) -> None:
    with pytest.raises(RefimplError, match=name):
        proximal_logprobs(*args, **kwargs)
