"""A*-PO's optimal value estimate and regression loss (refimpl.losses.optimal_advantage).

The estimate is checked on rewards whose exponentials are powers of two, against the bounds
mean <= V* <= max and its two limits; the loss against an exact Fraction computation on dyadic
inputs, and its gradient against central finite differences of the loss. Each property rejects a
plausible wrong variant (the log n left out, the temperature left out of the exponent, the
regression per token instead of per sequence, a gradient without the factor 2 or without beta2).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects
from hypothesis import given
from hypothesis import strategies as st

from refimpl.errors import RefimplError
from refimpl.losses import LossTerms, optimal_advantage_regression_loss, optimal_value_estimate

Impl = Callable[..., Any]
Case = dict[str, Any]

_REWARDS = st.lists(st.integers(-8, 8).map(lambda k: k / 4), min_size=1, max_size=6)


def test_optimal_value_by_hand_with_powers_of_two() -> None:
    """β₁ = 1/ln 2 makes e^{r/β₁} = 2^r: rewards (0, 1, 1, 2) → mean of (1, 2, 2, 4) = 9/4, so
    V* = log2(9/4); rewards (0, 0) → 0; (3, 3, 3) → 3 whatever β₁."""
    got = optimal_value_estimate([[0.0, 1.0, 1.0, 2.0]], beta1=1 / math.log(2))
    assert got[0] == pytest.approx(math.log2(9 / 4), rel=4 * 2**-52)
    assert optimal_value_estimate([[0.0, 0.0], [3.0, 3.0]], beta1=0.125).tolist() == [0.0, 3.0]


def _within_bounds(fn: Impl, rewards: list[float], beta1: float) -> None:
    r = np.asarray([rewards])
    got = float(np.asarray(fn(r, beta1=beta1))[0])
    low, high = float(r.mean()), float(r.max())
    slack = 4e-16 * (abs(high) + 1.0)
    assert low - slack <= got <= high + slack, f"V* = {got} outside [mean {low}, max {high}]"
    assert np.isfinite(got), f"V* = {got}"


@given(_REWARDS, st.sampled_from([2.0**-12, 2.0**-3, 0.5, 1.0, 4.0, 2.0**10]))
def test_optimal_value_lies_between_the_mean_and_the_maximum(
    rewards: list[float], beta1: float
) -> None:
    _within_bounds(optimal_value_estimate, rewards, beta1)


def _limits(fn: Impl, rewards: list[float]) -> None:
    """β₁ → 0: within β₁·log(n/k) below the maximum; β₁ → ∞: within s²/(2β₁)(1 + ...) of the
    mean (claims OV1, OV2)."""
    r = np.asarray([rewards])
    n, top = r.size, float(r.max())
    k = int((r == top).sum())
    small = float(np.asarray(fn(r, beta1=2.0**-10))[0])
    assert top - 2.0**-10 * math.log(n / k) - 1e-15 <= small <= top + 1e-15, (small, top)
    big = float(np.asarray(fn(r, beta1=2.0**20))[0])
    excess = float(r.var()) / 2.0**21
    assert abs(big - float(r.mean()) - excess) <= 1e-12 + excess * 1e-3, (big, r.mean())


@given(_REWARDS)
def test_optimal_value_limits(rewards: list[float]) -> None:
    _limits(optimal_value_estimate, rewards)


def _without_log_n(rewards: Any, *, beta1: float) -> Any:
    r = np.asarray(rewards)
    top = r.max(axis=1)
    return top + beta1 * np.log(np.exp((r - top[:, None]) / beta1).sum(axis=1))


def _unscaled_exponent(rewards: Any, *, beta1: float) -> Any:
    r = np.asarray(rewards)
    return beta1 * np.log(np.exp(r).mean(axis=1))


def _naive(rewards: Any, *, beta1: float) -> Any:
    with np.errstate(over="ignore"):
        return beta1 * np.log(np.exp(np.asarray(rewards) / beta1).mean(axis=1))


@pytest.mark.parametrize("variant", [_without_log_n, _unscaled_exponent, _naive])
def test_the_value_checks_reject_wrong_variants(variant: Impl) -> None:
    """The log n left out overshoots the maximum; the temperature left out of the exponent misses
    both limits; the unshifted exponential overflows at β₁ = 2^-12 (a reward of 8 → e^32768)."""
    rejects(
        given(_REWARDS, st.sampled_from([2.0**-12, 0.5, 4.0]))(
            lambda r, b: _within_bounds(variant, r, b)
        )
    )
    if variant is not _naive:
        rejects(given(_REWARDS)(lambda r: _limits(variant, r)))


# --- the regression loss -------------------------------------------------------------------------


@st.composite
def _loss_cases(draw: st.DrawFn) -> Case:
    rows, time = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    lengths = draw(st.lists(st.integers(0, time), min_size=rows, max_size=rows))
    mask = (np.arange(time)[None, :] < np.asarray(lengths)[:, None]).astype(np.float64)
    eighths = st.integers(-24, 0).map(lambda k: k / 8)
    cells = rows * time
    return {
        "logp": np.asarray(draw(st.lists(eighths, min_size=cells, max_size=cells))).reshape(
            rows, time
        ),
        "logp_ref": np.asarray(draw(st.lists(eighths, min_size=cells, max_size=cells))).reshape(
            rows, time
        ),
        "advantages": np.asarray(draw(st.lists(st.integers(-8, 8), min_size=rows, max_size=rows)))
        / 4,
        "beta2": draw(st.sampled_from([0.125, 0.5, 1.0, 2.0])),
        "mask": mask,
        "cotangent": np.asarray(
            draw(st.lists(st.integers(0, 8), min_size=cells, max_size=cells))
        ).reshape(rows, time)
        / 8,
    }


def _terms(fn: Impl, c: Case) -> LossTerms:
    return LossTerms(
        *fn(
            c["logp"],
            c["logp_ref"],
            c["advantages"],
            beta2=c["beta2"],
            mask=c["mask"],
            cotangent=c["cotangent"],
        )
    )


def _agrees_with_exact(fn: Impl, c: Case) -> None:
    """loss_bt = (β₂D_b − A_b)² and grad_bt = Σ_t c_bt·2β₂(β₂D_b − A_b) at valid tokens, exactly."""
    got = _terms(fn, c)
    m, beta2 = c["mask"], Fraction(c["beta2"])
    for b in range(m.shape[0]):
        valid = [t for t in range(m.shape[1]) if m[b, t] > 0]
        d = sum((Fraction(c["logp"][b, t]) - Fraction(c["logp_ref"][b, t]) for t in valid),
                Fraction(0))  # fmt: skip
        error = beta2 * d - Fraction(c["advantages"][b])
        weight = sum((Fraction(c["cotangent"][b, t]) for t in valid), Fraction(0))
        for t in range(m.shape[1]):
            loss, grad = (error**2, 2 * beta2 * error * weight) if t in valid else (0, 0)
            assert Fraction(float(got.loss[b, t])) == loss, f"loss[{b},{t}] {got.loss[b, t]}"
            assert Fraction(float(got.grad[b, t])) == grad, f"grad[{b},{t}] {got.grad[b, t]}"


def _gradient_matches_differences(fn: Impl, c: Case) -> None:
    """grad = ∂(Σ c·loss)/∂logp by central differences (the loss is quadratic: exact up to
    rounding)."""
    got = _terms(fn, c).grad
    h = 2.0**-10
    for b, t in np.argwhere(c["mask"] > 0):
        up, down = dict(c, logp=c["logp"].copy()), dict(c, logp=c["logp"].copy())
        up["logp"][b, t] += h
        down["logp"][b, t] -= h
        total = np.sum(c["cotangent"] * (_terms(fn, up).loss - _terms(fn, down).loss))
        want = float(total) / (2 * h)
        assert abs(got[b, t] - want) <= 1e-9 * (1.0 + abs(want)), (b, t, got[b, t], want)


def _per_token(logp: Any, logp_ref: Any, advantages: Any, **kw: Any) -> Any:
    """The regression per token: (β₂(logp_t − ref_t) − A)²."""
    m, c, beta2 = np.asarray(kw["mask"]), np.asarray(kw["cotangent"]) * kw["mask"], kw["beta2"]
    e = beta2 * (np.asarray(logp) - logp_ref) - np.asarray(advantages)[:, None]
    return e * e * m, 2 * beta2 * e * c


def _no_two(logp: Any, logp_ref: Any, advantages: Any, **kw: Any) -> Any:
    loss, grad = optimal_advantage_regression_loss(logp, logp_ref, advantages, **kw)
    return loss, grad / 2


def _no_beta2(logp: Any, logp_ref: Any, advantages: Any, **kw: Any) -> Any:
    loss, grad = optimal_advantage_regression_loss(logp, logp_ref, advantages, **kw)
    return loss, grad / kw["beta2"]


@given(_loss_cases())
def test_regression_loss_agrees_with_the_exact_definition(case: Case) -> None:
    _agrees_with_exact(optimal_advantage_regression_loss, case)


@given(_loss_cases())
def test_regression_gradient_matches_finite_differences(case: Case) -> None:
    _gradient_matches_differences(optimal_advantage_regression_loss, case)


@pytest.mark.parametrize("variant", [_per_token, _no_two, _no_beta2])
def test_the_loss_checks_reject_wrong_variants(variant: Impl) -> None:
    rejects(given(_loss_cases())(lambda c: _agrees_with_exact(variant, c)))
    if variant is not _per_token:  # consistent with its own loss: only the exact check sees it
        rejects(given(_loss_cases())(lambda c: _gradient_matches_differences(variant, c)))


def test_regression_loss_by_hand_and_padding() -> None:
    """D = (−1 + 1.5) + (−1 + 1) = 1/2; β₂D − A = 1/4 − 1 = −3/4: loss 9/16, and with the
    cotangent of the batch mean (1/(B·L) = 1/2 per token, summing to 1 over the row) the
    gradient 2·(1/2)·(−3/4) = −3/4 at each token.
    Padding values do not enter."""
    terms = optimal_advantage_regression_loss(
        [[-1.0, -1.0, 5.0]], [[-1.5, -1.0, -9.0]], [1.0], beta2=0.5,
        mask=[[1, 1, 0]], cotangent=[[0.5, 0.5, 0.5]],
    )  # fmt: skip
    assert terms.loss.tolist() == [[0.5625, 0.5625, 0.0]]
    assert terms.grad.tolist() == [[-0.75, -0.75, 0.0]]


def test_refusals_name_the_parameter() -> None:
    with pytest.raises(RefimplError, match="beta1"):
        optimal_value_estimate([[1.0, 0.0]], beta1=0.0)
    with pytest.raises(RefimplError, match="rewards"):
        optimal_value_estimate(np.zeros((1, 0)), beta1=1.0)
    with pytest.raises(RefimplError, match="beta2"):
        optimal_advantage_regression_loss([[0.0]], [[0.0]], [1.0], beta2=0.0)
    with pytest.raises(RefimplError, match="logp_ref"):
        optimal_advantage_regression_loss([[0.0]], [[0.0, 1.0]], [1.0], beta2=1.0)
    with pytest.raises(RefimplError, match="logp"):
        optimal_advantage_regression_loss([[1e200]], [[-1e200]], [1.0], beta2=1.0)
