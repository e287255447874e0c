"""Properties of refimpl.losses.gae: GAE advantages and returns over each row's valid tokens.

Values are checked exactly on hand-worked cases (Fractions), against an independent torch
implementation (the closed form as a matrix product) on Hypothesis-drawn batches, and by
properties that are each run against a deliberately wrong variant (which they must reject).
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

from refimpl.losses.gae import GAE, ExactGAE, gae_advantages

Array = NDArray[np.float64]
#: (rewards, values, mask, gamma, lam) -> advantages
Impl = Callable[[Array, Array, Array, float, float], Array]

# ---------------------------------------------------------------------------------------------
# strategies
# ---------------------------------------------------------------------------------------------

ENTRY = st.one_of(
    st.sampled_from([0.0, 1.0, -1.0, 0.5]),
    st.floats(-10.0, 10.0, allow_nan=False, allow_subnormal=False),
)
DISCOUNT = st.one_of(
    st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0]), st.floats(0.0, 1.0, allow_subnormal=False)
)
GARBAGE = st.sampled_from([0.0, 1e4, -1e4, 1e30, -1e30, 7.0])


@st.composite
def batches(draw: st.DrawFn, *, gaps: bool = False) -> tuple[Array, Array, Array, float, float]:
    """(rewards, values, mask, gamma, lam): right-padded rows (with gaps: random 0/1 masks)."""
    batch, width = draw(st.integers(1, 3)), draw(st.integers(1, 7))
    n = batch * width
    rewards = np.asarray(draw(st.lists(ENTRY, min_size=n, max_size=n))).reshape(batch, width)
    values = np.asarray(draw(st.lists(ENTRY, min_size=n, max_size=n))).reshape(batch, width)
    if gaps:
        bits = draw(st.lists(st.booleans(), min_size=n, max_size=n))
        mask = np.asarray(bits, dtype=np.float64).reshape(batch, width)
    else:
        lengths = np.asarray(draw(st.lists(st.integers(0, width), min_size=batch, max_size=batch)))
        mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.float64)
    return rewards, values, mask, draw(DISCOUNT), draw(DISCOUNT)


# ---------------------------------------------------------------------------------------------
# (1) exact values on hand-worked cases
# ---------------------------------------------------------------------------------------------


def test_outcome_reward_with_gamma_and_lambda_one_is_return_minus_value() -> None:
    out = gae_advantages([[0.0, 0.0, 1.0]], [[0.5, 0.25, 0.75]], gamma=1.0, lam=1.0)
    np.testing.assert_array_equal(out.advantages, [[0.5, 0.75, 0.25]])
    np.testing.assert_array_equal(out.returns, [[1.0, 1.0, 1.0]])


def test_hand_worked_fractions() -> None:
    # r = (1, 0, 2), V = (1/2, 1, 1/4), γ = 1/2, λ = 1/2, b = 0
    # δ2 = 2 − 1/4 = 7/4; δ1 = 0 + 1/8 − 1 = −7/8; δ0 = 1 + 1/2 − 1/2 = 1
    # A2 = 7/4; A1 = −7/8 + 7/16 = −7/16; A0 = 1 − 7/64 = 57/64
    h = Fraction(1, 2)
    out = gae_advantages([[1, 0, 2]], [[h, 1, Fraction(1, 4)]], gamma=h, lam=h)
    assert isinstance(out, ExactGAE)
    assert out.advantages == [[Fraction(57, 64), Fraction(-7, 16), Fraction(7, 4)]]
    assert out.returns == [[Fraction(89, 64), Fraction(9, 16), Fraction(2)]]


def test_bootstrap_is_the_value_after_the_last_valid_token() -> None:
    # A1 = 0 + γ·b − V1 = 2·(1/2) − 1 = 0; A0 = (1 + γ·V1 − V0) + γλ·A1 = 1 + 1/2 − 0 = 3/2
    h = Fraction(1, 2)
    out = gae_advantages([[1, 0, 9]], [[0, 1, 9]], gamma=h, lam=1, mask=[[1, 1, 0]], bootstrap=[2])
    assert out.advantages == [[Fraction(3, 2), Fraction(0), Fraction(0)]]
    assert out.returns == [[Fraction(3, 2), Fraction(1), Fraction(0)]]


def test_gaps_skip_and_steps() -> None:
    r, v, m = [[1, 5, 5, 2]], [[1, 7, 7, 1]], [[1, 0, 0, 1]]
    skip = gae_advantages(r, v, gamma=Fraction(1, 2), lam=1, mask=m)
    steps = gae_advantages(r, v, gamma=Fraction(1, 2), lam=1, mask=m, gaps="steps")
    # skip: A3 = 2 − 1 = 1; A0 = 1 + 1/2 − 1 + 1/2·1 = 1
    assert skip.advantages == [[Fraction(1), Fraction(0), Fraction(0), Fraction(1)]]
    # steps: A3 = 1; A2 = 0 + 1/2 − 0 + 1/2 = 1; A1 = 0 + 0 − 0 + 1/2 = 1/2;
    # A0 = 1 + 0 − 1 + 1/4 = 1/4
    assert steps.advantages == [[Fraction(1, 4), Fraction(0), Fraction(0), Fraction(1)]]


def test_a_row_without_valid_tokens_gets_zeros() -> None:
    out = gae_advantages([[3.0, 4.0], [1.0, 1.0]], [[1.0, 2.0], [0.0, 0.0]], gamma=0.9,
                         lam=0.95, mask=[[0, 0], [1, 1]])  # fmt: skip
    np.testing.assert_array_equal(out.advantages[0], [0.0, 0.0])
    np.testing.assert_array_equal(out.returns[0], [0.0, 0.0])


def test_float_mode_returns_float64_gae() -> None:
    out = gae_advantages([[1, 0]], [[0, 0]], gamma=0.5, lam=0.5)
    assert isinstance(out, GAE)
    assert out.advantages.dtype == np.float64
    assert out.returns.dtype == np.float64


# ---------------------------------------------------------------------------------------------
# (2) against an independent torch implementation: the closed form as a matrix product
# ---------------------------------------------------------------------------------------------


def torch_closed_form(
    rewards: Array, values: Array, mask: Array, gamma: float, lam: float
) -> Array:
    """A_t = Σ_l (γλ)^l δ_{t+l} over each row's valid tokens (compressed), in float64 torch."""
    out = torch.zeros(rewards.shape, dtype=torch.float64)
    for b in range(rewards.shape[0]):
        idx = torch.as_tensor(np.flatnonzero(mask[b] > 0))
        n = int(idx.numel())
        if n == 0:
            continue
        r = torch.as_tensor(rewards[b])[idx]
        v = torch.as_tensor(values[b])[idx]
        nxt = torch.cat([v[1:], torch.zeros(1, dtype=torch.float64)])
        delta = r + gamma * nxt - v
        k = torch.arange(n)
        power = (k[None, :] - k[:, None]).to(torch.float64)
        weights = torch.where(power >= 0, (gamma * lam) ** power.clamp(min=0), 0.0)
        out[b, idx] = weights @ delta
    return out.numpy()


@given(batch=batches(gaps=True))
def test_agrees_with_the_closed_form_in_torch(
    batch: tuple[Array, Array, Array, float, float],
) -> None:
    rewards, values, mask, gamma, lam = batch
    found = gae_advantages(rewards, values, gamma=gamma, lam=lam, mask=mask)
    expected = torch_closed_form(rewards, values, mask, gamma, lam)
    scale = float(np.abs(rewards).sum() + np.abs(values).sum() + 1.0)
    np.testing.assert_allclose(found.advantages, expected, rtol=1e-12, atol=1e-13 * scale)
    np.testing.assert_allclose(found.returns, np.where(mask > 0, expected + values, 0.0),
                               rtol=1e-12, atol=1e-13 * scale)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# (3) properties, each rejecting a wrong variant
# ---------------------------------------------------------------------------------------------


def _refimpl(rewards: Array, values: Array, mask: Array, gamma: float, lam: float) -> Array:
    return gae_advantages(rewards, values, gamma=gamma, lam=lam, mask=mask).advantages


def _loop(
    rewards: Array, values: Array, mask: Array, gamma: float, lam: float, *, shift: int = 1,
    swap: bool = False, masked: bool = True,
) -> Array:  # fmt: skip
    """A recursion over positions with bugs switched on: the bootstrap ``shift`` positions ahead
    (1 is right), γ and λ swapped, or padded values read."""
    g, lm = (lam, gamma) if swap else (gamma, lam)
    out = np.zeros(rewards.shape)
    for b in range(rewards.shape[0]):
        idx = np.flatnonzero(mask[b] > 0) if masked else np.arange(rewards.shape[1])
        r, v = rewards[b, idx], values[b, idx]
        last = 0.0
        for j in range(idx.size - 1, -1, -1):
            nxt = v[j + shift] if j + shift < idx.size else 0.0
            last = r[j] + g * nxt - v[j] + g * lm * last
            out[b, idx[j]] = last
    return np.where(mask > 0, out, 0.0)


def off_by_one(rewards: Array, values: Array, mask: Array, gamma: float, lam: float) -> Array:
    return _loop(rewards, values, mask, gamma, lam, shift=0)


def swapped(rewards: Array, values: Array, mask: Array, gamma: float, lam: float) -> Array:
    return _loop(rewards, values, mask, gamma, lam, swap=True)


def leaking(rewards: Array, values: Array, mask: Array, gamma: float, lam: float) -> Array:
    return _loop(rewards, values, mask, gamma, lam, masked=False)


def _check_td_error_at_lambda_zero(impl: Impl) -> Callable[[], None]:
    @given(batch=batches())
    def check(batch: tuple[Array, Array, Array, float, float]) -> None:
        rewards, values, mask, gamma, _ = batch
        a = impl(rewards, values, mask, gamma, 0.0)
        nxt = np.concatenate([values[:, 1:] * mask[:, 1:], np.zeros((rewards.shape[0], 1))], 1)
        delta = np.where(mask > 0, rewards + gamma * nxt - values, 0.0)
        np.testing.assert_allclose(a, delta, rtol=1e-12, atol=1e-12)

    return check


def test_lambda_zero_is_the_td_error() -> None:
    run_property(_check_td_error_at_lambda_zero(_refimpl))


def test_td_error_property_rejects_an_off_by_one_bootstrap() -> None:
    rejects(_check_td_error_at_lambda_zero(off_by_one))


def _check_discounted_return_at_lambda_one(impl: Impl) -> Callable[[], None]:
    @given(batch=batches())
    def check(batch: tuple[Array, Array, Array, float, float]) -> None:
        rewards, values, mask, gamma, _ = batch
        a = impl(rewards, values, mask, gamma, 1.0)
        width = rewards.shape[1]
        for b in range(rewards.shape[0]):
            n = int(mask[b].sum())
            for t in range(n):
                ret = sum(gamma**k * rewards[b, t + k] for k in range(n - t))
                assert a[b, t] == pytest.approx(ret - values[b, t], rel=1e-12, abs=1e-12)
            assert np.all(a[b, n:width] == 0.0)

    return check


def test_lambda_one_is_the_discounted_return_minus_the_value() -> None:
    run_property(_check_discounted_return_at_lambda_one(_refimpl))


def test_discounted_return_property_rejects_gamma_and_lambda_swapped() -> None:
    rejects(_check_discounted_return_at_lambda_one(swapped))


def _check_padding_contributes_nothing(impl: Impl) -> Callable[[], None]:
    @given(batch=batches(gaps=True), junk=st.lists(GARBAGE, min_size=2, max_size=2))
    def check(batch: tuple[Array, Array, Array, float, float], junk: list[float]) -> None:
        rewards, values, mask, gamma, lam = batch
        clean = impl(rewards, values, mask, gamma, lam)
        dirty = impl(np.where(mask > 0, rewards, junk[0]), np.where(mask > 0, values, junk[1]),
                     mask, gamma, lam)  # fmt: skip
        np.testing.assert_array_equal(dirty, clean)
        assert np.all(dirty[mask == 0] == 0.0)

    return check


def test_padding_contributes_nothing() -> None:
    run_property(_check_padding_contributes_nothing(_refimpl))


def test_padding_property_rejects_a_recursion_that_reads_padded_values() -> None:
    rejects(_check_padding_contributes_nothing(leaking))


def _check_gap_is_transparent(impl: Impl) -> Callable[[], None]:
    """Removing a gap (default semantics) leaves every valid token's advantage unchanged."""

    @given(batch=batches(gaps=True))
    def check(batch: tuple[Array, Array, Array, float, float]) -> None:
        rewards, values, mask, gamma, lam = batch
        a = impl(rewards, values, mask, gamma, lam)
        for b in range(rewards.shape[0]):
            idx = np.flatnonzero(mask[b] > 0)
            if idx.size == 0:
                continue
            alone = impl(rewards[b : b + 1, idx], values[b : b + 1, idx],
                         np.ones((1, idx.size)), gamma, lam)  # fmt: skip
            np.testing.assert_allclose(a[b, idx], alone[0], rtol=1e-12, atol=1e-12)

    return check


def _steps_recursion(rewards: Array, values: Array, mask: Array, gamma: float, lam: float) -> Array:
    return gae_advantages(rewards, values, gamma=gamma, lam=lam, mask=mask, gaps="steps").advantages


def test_a_gap_is_not_a_step_by_default() -> None:
    run_property(_check_gap_is_transparent(_refimpl))


def test_gap_property_rejects_gaps_as_steps() -> None:
    rejects(_check_gap_is_transparent(_steps_recursion))


def test_steps_equals_zeroing_rewards_and_values_then_stepping_through() -> None:
    @given(batch=batches(gaps=True))
    def check(batch: tuple[Array, Array, Array, float, float]) -> None:
        rewards, values, mask, gamma, lam = batch
        found = _steps_recursion(rewards, values, mask, gamma, lam)
        r, v = rewards * mask, values * mask
        expected = np.zeros(rewards.shape)
        for b in range(rewards.shape[0]):
            valid = np.flatnonzero(mask[b] > 0)
            if valid.size == 0:
                continue
            last = 0.0
            for t in range(int(valid[-1]), -1, -1):
                nxt = v[b, t + 1] if t < valid[-1] else 0.0
                last = r[b, t] + gamma * nxt - v[b, t] + gamma * lam * last
                expected[b, t] = last
        np.testing.assert_allclose(found, expected * mask, rtol=1e-12, atol=1e-12)

    run_property(check)


# ---------------------------------------------------------------------------------------------
# (4) validation: each rule just inside and just outside
# ---------------------------------------------------------------------------------------------

R, V = [[1.0, 0.0]], [[0.5, 0.5]]
#: the function without its overloads: calls that mix exact and float inputs on purpose
LOOSE: Callable[..., Any] = gae_advantages


def test_array_validation() -> None:
    assert gae_advantages([[1.0]], [[0.0]], gamma=1.0, lam=1.0).advantages.shape == (1, 1)
    with pytest.raises(ValueError, match=r"rewards must have at least one sequence and one token"):
        gae_advantages(np.zeros((1, 0)), np.zeros((1, 0)), gamma=1.0, lam=1.0)
    with pytest.raises(ValueError, match=r"rewards must be 2-D"):
        gae_advantages([1.0, 0.0], [0.5, 0.5], gamma=1.0, lam=1.0)
    with pytest.raises(ValueError, match=r"values must contain only finite values"):
        gae_advantages(R, [[0.5, math.inf]], gamma=1.0, lam=1.0)
    with pytest.raises(ValueError, match=r"values"):
        gae_advantages(R, [[0.5, 0.5, 0.5]], gamma=1.0, lam=1.0)
    with pytest.raises(TypeError, match=r"rewards must be an array of real numbers"):
        gae_advantages([["1", "0"]], V, gamma=1.0, lam=1.0)
    with pytest.raises(ValueError, match=r"mask must hold only 0 and 1"):
        gae_advantages(R, V, gamma=1.0, lam=1.0, mask=[[1.0, 0.5]])


@pytest.mark.parametrize("name", ["gamma", "lam"])
def test_discount_validation(name: str) -> None:
    ok: dict[str, Any] = {"gamma": 1.0, "lam": 1.0}
    for inside in (0.0, 1.0):
        gae_advantages(R, V, **{**ok, name: inside})
    with pytest.raises(ValueError, match=rf"{name} must be <= 1 .*got {name}=1.0000001"):
        gae_advantages(R, V, **{**ok, name: 1.0000001})
    with pytest.raises(ValueError, match=rf"{name} must be >= 0 .*Pass {name} >= 0"):
        gae_advantages(R, V, **{**ok, name: -1e-12})
    with pytest.raises(TypeError, match=rf"{name} must be a real number"):
        gae_advantages(R, V, **{**ok, name: "0.9"})
    with pytest.raises(ValueError, match=rf"{name} must be finite"):
        gae_advantages(R, V, **{**ok, name: math.nan})


def test_bootstrap_validation() -> None:
    gae_advantages(R, V, gamma=1.0, lam=1.0, bootstrap=[0.5])
    with pytest.raises(ValueError, match=r"bootstrap and rewards must have one entry per sequence"):
        gae_advantages(R, V, gamma=1.0, lam=1.0, bootstrap=[0.5, 0.5])
    with pytest.raises(ValueError, match=r"bootstrap must contain only finite values"):
        gae_advantages(R, V, gamma=1.0, lam=1.0, bootstrap=[math.nan])


def test_gaps_validation() -> None:
    gae_advantages(R, V, gamma=1.0, lam=1.0, gaps="steps")
    with pytest.raises(ValueError, match=r"gaps must be one of 'skip', 'steps'; got gaps='step'"):
        LOOSE(R, V, gamma=1.0, lam=1.0, gaps="step")


def test_exact_mode_needs_every_input_rational() -> None:
    h = Fraction(1, 2)
    assert isinstance(gae_advantages([[1, 0]], [[h, h]], gamma=1, lam=1), ExactGAE)
    assert isinstance(LOOSE([[1, 0]], [[h, h]], gamma=0.5, lam=1), GAE)
    assert isinstance(gae_advantages([[1, 0]], [[1, 1]], gamma=1, lam=1), GAE)  # no Fraction
    assert isinstance(LOOSE([[1, 0]], [[h, h]], gamma=1, lam=1, bootstrap=[0.5]), GAE)
