"""The adaptive KL coefficient (Ziegler et al. 2019, section 2.2): exact steps and its direction.

Exact values are computed with :class:`fractions.Fraction` from the paper's formula and compared
with the float reference at inputs where both round alike (float64 rounding of a few operations).
Wrong variants each fail a test here: the error without its clip (the values at KL = 3·target and
KL = 0), the error with its sign flipped (every value off the target and the direction property),
and the gain inverted to horizon/n_steps (the values at n_steps != horizon).
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from refimpl.losses.kl_control import adaptive_kl_coefficient


def _exact(
    coef: Fraction, kl: Fraction, target: Fraction, horizon: Fraction, n: Fraction
) -> Fraction:
    """The paper's step in exact arithmetic, clip 1/5."""
    error = min(max((kl - target) / target, Fraction(-1, 5)), Fraction(1, 5))
    return coef * (1 + error * n / horizon)


@pytest.mark.parametrize(
    ("kl", "error"),
    [
        (Fraction(11, 10), Fraction(1, 10)),  # target·(1 + 1/10)
        (Fraction(9, 10), Fraction(-1, 10)),  # target·(1 − 1/10)
        (Fraction(3), Fraction(1, 5)),  # target·3: clipped at +0.2
        (Fraction(0), Fraction(-1, 5)),  # no divergence: clipped at −0.2
        (Fraction(1), Fraction(0)),  # at the target: unchanged
    ],
)
@pytest.mark.parametrize(("n_steps", "horizon"), [(1, 10), (4, 8), (256, 10000)])
def test_exact_step(kl: Fraction, error: Fraction, n_steps: int, horizon: int) -> None:
    """β·(1 + e·n/H) with the clipped error e at target 1/4 (KL scaled by the target)."""
    coef, target = Fraction(1, 2), Fraction(1, 4)
    expected = coef * (1 + error * Fraction(n_steps, horizon))
    assert expected == _exact(coef, kl * target, target, Fraction(horizon), Fraction(n_steps))
    found = adaptive_kl_coefficient(
        float(coef), float(kl * target), target=float(target), horizon=horizon, n_steps=n_steps
    )
    assert found == pytest.approx(float(expected), rel=4e-16, abs=0.0)


@pytest.mark.parametrize("ratio", [Fraction(6, 5), Fraction(2), Fraction(100)])
def test_error_clipped_at_both_ends(ratio: Fraction) -> None:
    """From KL = 1.2·target up the step is the +0.2 one; down to 0.8·target and below, −0.2."""
    up = adaptive_kl_coefficient(1.0, float(ratio), target=1.0, horizon=1.0)
    down = adaptive_kl_coefficient(
        1.0, float(2 - ratio if ratio < 2 else 0), target=1.0, horizon=1.0
    )
    assert up == pytest.approx(1.2, rel=1e-15)
    assert down == pytest.approx(0.8, rel=1e-15)


def test_error_clip_option() -> None:
    """``error_clip`` bounds the error: 1/2 lets KL = 1.5·target through, 0 freezes the coefficient."""
    assert adaptive_kl_coefficient(2.0, 1.5, target=1.0, horizon=4.0, error_clip=0.5) == 2.25
    assert adaptive_kl_coefficient(2.0, 9.0, target=1.0, horizon=4.0, error_clip=0.0) == 2.0


@given(
    coef=st.floats(1e-3, 10.0),
    target=st.floats(1e-3, 10.0),
    factor=st.floats(0.0, 10.0),
    horizon=st.floats(1.0, 1e4),
    n_steps=st.integers(0, 1000),
)
def test_moves_toward_target(
    coef: float, target: float, factor: float, horizon: float, n_steps: int
) -> None:
    """Above the target the coefficient grows, below it shrinks, at it stays (n_steps <= horizon)."""
    n = min(float(n_steps), horizon)
    kl = target * factor
    found = adaptive_kl_coefficient(coef, kl, target=target, horizon=horizon, n_steps=n)
    error = kl / target - 1.0
    if n == 0.0 or error == 0.0:
        assert found == coef
    elif error > 0.0:
        assert found > coef
    else:
        assert found < coef


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"coef": -0.1}, "Pass coef >= 0"),
        ({"current_kl": float("nan")}, "Pass a finite current_kl"),
        ({"target": 0.0}, "Pass target > 0"),
        ({"horizon": -1.0}, "Pass horizon > 0"),
        ({"n_steps": -1}, "Pass n_steps >= 0"),
        ({"error_clip": -0.2}, "Pass error_clip >= 0"),
    ],
)
def test_invalid_calls_say_how_to_fix(kwargs: dict[str, float], fragment: str) -> None:
    """Each bound is checked and its message says what to pass."""
    call: dict[str, float] = {"coef": 0.5, "current_kl": 0.1, "target": 0.1, "horizon": 10.0}
    call.update(kwargs)
    coef, kl = call.pop("coef"), call.pop("current_kl")
    with pytest.raises(ValueError, match=fragment):
        adaptive_kl_coefficient(coef, kl, **call)
