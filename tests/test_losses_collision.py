"""Properties of refimpl.losses.collision: Σπ² of the tempered softmax and its gradient.

Exact values come from logits ``log w`` (positive integers ``w``) at temperatures ``1/m``, where
``π ∝ w^m`` is a Fraction. Each property is written once as a function of the implementation
under test and run against refimpl (it must hold) and against a wrong variant (it must fail): the
sum of π instead of π², the temperature ignored, and a gradient without its factor 2.
"""

from __future__ import annotations

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

from refimpl.losses.collision import token_sum_pi_squared, token_sum_pi_squared_grad

Array = NDArray[np.float64]
ValueFn = Callable[..., Array]


def _exact(w: list[int], m: int) -> tuple[list[Fraction], Fraction]:
    """π = softmax(m·log w) and Σπ², exactly."""
    powered = [Fraction(x) ** m for x in w]
    total = sum(powered, Fraction(0))
    pi = [x / total for x in powered]
    return pi, sum((p * p for p in pi), Fraction(0))


def _logits(w: list[int]) -> Array:
    return np.log(np.asarray([[w]], dtype=np.float64))


# ---------------------------------------------------------------------------------------------
# exact values
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("w", "m", "expected"),
    [
        ([2, 1, 1], 1, Fraction(3, 8)),  # (1/2)² + 2·(1/4)²
        ([2, 1, 1], 2, Fraction(1, 2)),  # T = 1/2: π = (2/3, 1/6, 1/6)
        ([1, 1, 1, 1], 3, Fraction(1, 4)),  # equal logits: 1/V at any temperature
        ([3, 1], 1, Fraction(5, 8)),
        ([5], 2, Fraction(1)),  # one token: a point mass
    ],
)
def test_hand_worked_values(w: list[int], m: int, expected: Fraction) -> None:
    assert _exact(w, m)[1] == expected
    found = token_sum_pi_squared(_logits(w), temperature=1.0 / m)
    assert found[0, 0] == pytest.approx(float(expected), rel=1e-14)


def test_hand_worked_gradient_at_temperature_one_half() -> None:
    # π = (2/3, 1/6, 1/6), S = 1/2: (2/T)·π·(π − S) = 4·π·(π − S) = (4/9, −2/9, −2/9)
    grad = token_sum_pi_squared_grad(_logits([2, 1, 1]), temperature=0.5)[0, 0]
    np.testing.assert_allclose(grad, [4 / 9, -2 / 9, -2 / 9], rtol=1e-13)


def test_cotangent_and_mask_weight_each_position() -> None:
    z = np.zeros((2, 2, 3))
    z[0, 0] = np.log([2.0, 1.0, 1.0])
    z[1] = [[7.0, 1e300, -1e300]] * 2  # padding: any finite logits
    mask = [[1, 1], [0, 0]]
    value = token_sum_pi_squared(z, mask=mask)
    np.testing.assert_allclose(value, [[3 / 8, 1 / 3], [0.0, 0.0]], rtol=1e-14)
    grad = token_sum_pi_squared_grad(z, cotangent=[[2.0, 5.0], [1.0, 1.0]], mask=mask)
    np.testing.assert_allclose(grad[0, 0], [0.25, -0.125, -0.125], rtol=1e-13)
    np.testing.assert_allclose(grad[0, 1], 0.0, atol=1e-15)
    assert np.all(grad[1] == 0.0)


def test_huge_logits_give_a_point_mass_and_no_overflow() -> None:
    z = np.array([[[1e300, 0.0, -1e300], [1e4, 1e4, 1e4 - 1e3]]])
    np.testing.assert_allclose(token_sum_pi_squared(z), [[1.0, 0.5]], rtol=1e-14)
    grad = token_sum_pi_squared_grad(z)
    assert np.all(np.isfinite(grad))
    np.testing.assert_allclose(grad[0, 1], [0.0, 0.0, 0.0], atol=1e-15)


def test_validation_names_the_argument_and_the_fix() -> None:
    z = np.zeros((1, 1, 3))
    with pytest.raises(ValueError, match="temperature must be > 0"):
        token_sum_pi_squared(z, temperature=0.0)
    with pytest.raises(ValueError, match=r"Pass a \(B, T, V\) array"):
        token_sum_pi_squared(np.zeros((1, 0, 3)))
    with pytest.raises(ValueError, match="pass a larger temperature"):
        token_sum_pi_squared(np.full((1, 1, 2), 1e308), temperature=1e-3)
    with pytest.raises(ValueError, match="Pass a larger temperature"):
        token_sum_pi_squared_grad(z, temperature=1e-320, cotangent=[[1e10]])


# ---------------------------------------------------------------------------------------------
# properties, each rejected by a wrong variant
# ---------------------------------------------------------------------------------------------


@st.composite
def rational_cases(draw: st.DrawFn) -> tuple[list[int], int]:
    w = draw(st.lists(st.integers(1, 9), min_size=1, max_size=6))
    return w, draw(st.sampled_from([1, 2, 3]))


def _check_exact(impl: ValueFn) -> Callable[[], None]:
    @given(rational_cases())
    def check(case: tuple[list[int], int]) -> None:
        w, m = case
        _, s = _exact(w, m)
        found = float(impl(_logits(w), temperature=1.0 / m)[0, 0])
        assert found == pytest.approx(float(s), rel=1e-13), (w, m, found, s)

    return check


def _check_bounds(impl: ValueFn) -> Callable[[], None]:
    """1/V <= S <= max π (Σπ² <= max π · Σπ), with both ends reached."""

    @given(rational_cases())
    def check(case: tuple[list[int], int]) -> None:
        w, m = case
        pi, _ = _exact(w, m)
        found = float(impl(_logits(w), temperature=1.0 / m)[0, 0])
        tol = 1e-14
        assert 1.0 / len(w) - tol <= found <= float(max(pi)) + tol, (w, m, found)

    return check


def _check_temperature_divides_logits(impl: ValueFn) -> Callable[[], None]:
    """S(z, T) = S(z/T, 1): the temperature divides the logits (T = 1/m, exact)."""

    @given(rational_cases())
    def check(case: tuple[list[int], int]) -> None:
        w, m = case
        z = _logits(w)
        at_t = float(impl(z, temperature=1.0 / m)[0, 0])
        divided = float(impl(z * m, temperature=1.0)[0, 0])
        assert at_t == pytest.approx(divided, rel=1e-13), (w, m, at_t, divided)

    return check


def sum_of_pi(logits: Any, *, temperature: float = 1.0, **_: Any) -> Array:
    """Wrong: Σπ (always 1) instead of Σπ²."""
    y = np.asarray(logits) / temperature
    p = np.exp(y - y.max(axis=-1, keepdims=True))
    return np.asarray((p / p.sum(axis=-1, keepdims=True)).sum(axis=-1))


def ignores_temperature(logits: Any, *, temperature: float = 1.0, **kw: Any) -> Array:
    """Wrong: Σπ² of softmax(z), the caller's division by T forgotten."""
    return token_sum_pi_squared(logits, temperature=1.0, **kw)


def test_values_are_exact() -> None:
    run_property(_check_exact(token_sum_pi_squared))


def test_values_reject_the_sum_of_pi() -> None:
    rejects(_check_exact(sum_of_pi))


def test_values_reject_an_ignored_temperature() -> None:
    rejects(_check_exact(ignores_temperature))


def test_bounds_hold() -> None:
    run_property(_check_bounds(token_sum_pi_squared))


def test_bounds_reject_the_sum_of_pi() -> None:
    rejects(_check_bounds(sum_of_pi))


def test_temperature_divides_the_logits() -> None:
    run_property(_check_temperature_divides_logits(token_sum_pi_squared))


def test_temperature_property_rejects_an_ignored_temperature() -> None:
    rejects(_check_temperature_divides_logits(ignores_temperature))


# the gradient


@st.composite
def float_cases(draw: st.DrawFn) -> tuple[Array, float, Array, Array]:
    b, t, v = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 6))
    n = b * t * v
    entries = st.floats(-6.0, 6.0, allow_nan=False, allow_subnormal=False)
    z = np.asarray(draw(st.lists(entries, min_size=n, max_size=n))).reshape(b, t, v)
    temperature = draw(st.sampled_from([1.0, 0.5, 0.7, 2.0]))
    cot = np.asarray(draw(st.lists(st.integers(-8, 8), min_size=b * t, max_size=b * t)))
    mask = np.asarray(draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=b * t, max_size=b * t)))
    return z, temperature, cot.reshape(b, t) / 4.0, mask.reshape(b, t)


def _check_gradient_is_autograd(impl: ValueFn) -> Callable[[], None]:
    """The VJP equals torch autograd of Σ c·S, S computed as verl does (lse(2y) − 2·lse(y))."""

    @given(float_cases())
    def check(case: tuple[Array, float, Array, Array]) -> None:
        z, temperature, cot, mask = case
        zt = torch.tensor(z, requires_grad=True)
        y = zt / temperature
        s = torch.exp(torch.logsumexp(2.0 * y, -1) - 2.0 * torch.logsumexp(y, -1))
        (grad,) = torch.autograd.grad((torch.tensor(cot * mask) * s).sum(), zt)
        found = impl(z, temperature=temperature, cotangent=cot, mask=mask)
        np.testing.assert_allclose(found, grad.numpy(), rtol=1e-10, atol=1e-13)

    return check


def gradient_without_factor_two(logits: Any, **kw: Any) -> Array:
    """Wrong: π(π − S)/T, the derivative of π² taken as π."""
    return token_sum_pi_squared_grad(logits, **kw) / 2.0


def test_gradient_is_torch_autograd() -> None:
    run_property(_check_gradient_is_autograd(token_sum_pi_squared_grad))


def test_gradient_property_rejects_a_missing_factor_two() -> None:
    rejects(_check_gradient_is_autograd(gradient_without_factor_two))


def test_gradient_agrees_with_central_differences() -> None:
    rng = np.random.default_rng(7)
    z = rng.normal(0.0, 2.0, (2, 3, 5))
    cot = rng.normal(0.0, 1.0, (2, 3))
    grad = token_sum_pi_squared_grad(z, temperature=0.7, cotangent=cot)
    h = 1e-6
    for index in np.ndindex(z.shape):
        up, down = z.copy(), z.copy()
        up[index] += h
        down[index] -= h
        f_up = float(np.sum(cot * token_sum_pi_squared(up, temperature=0.7)))
        f_down = float(np.sum(cot * token_sum_pi_squared(down, temperature=0.7)))
        assert grad[index] == pytest.approx((f_up - f_down) / (2 * h), abs=1e-8)
