"""The band-masked importance-weighted policy gradient (refimpl.losses.band_masked) and the negative
log-likelihood (refimpl.losses.likelihood).

Exact values on hand-worked tokens; the gradient against torch autograd on the formula written here
the way SkyRL writes it (``torch.where`` on the band, a detached weight); properties (out of the band
the gradient is exactly 0, the ends are open, on-policy it is the policy gradient, padding is
inert, the NLL is REINFORCE at A = 1), each run against a wrong variant it must reject; the specs
``band_masked_pg`` and ``nll`` reject wrong candidates; and the validation rules.
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
from strategies_losses import TokenBatch, token_batches

import refimpl.losses.clipped as CL
import refimpl.losses.policy_gradient as PG
from refimpl.errors import RefimplError
from refimpl.losses import LossTerms, band_masked_pg_loss, nll_loss
from refimpl.testing import check_conformance

Array = NDArray[np.float64]
Band = Callable[..., LossTerms]

# ---------------------------------------------------------------------------------------------
# (1) exact values
# ---------------------------------------------------------------------------------------------


def test_hand_worked_tokens_inside_outside_and_at_the_ends() -> None:
    # ratios 1 (inside), e (above 1.28), 1/e (below 0.8)
    lq = np.array([[-0.5, -2.0, -1.0]])
    lp = lq + np.array([[0.0, 1.0, -1.0]])
    terms = band_masked_pg_loss(lp, lq, [[1.5, 2.0, 2.0]], eps_low=0.2, eps_high=0.28)
    assert terms.grad.tolist() == [[-1.5, 0.0, 0.0]]
    assert terms.loss.tolist() == [[float(-Fraction(3, 2) * Fraction(-1, 2)), 0.0, 0.0]]
    # ratio 1 exactly at an end of the band (eps 0 on that side): dropped, the ends are open
    at_hi = band_masked_pg_loss([[-1.0]], [[-1.0]], [1.0], eps_low=0.5, eps_high=0.0)
    at_lo = band_masked_pg_loss([[-1.0]], [[-1.0]], [1.0], eps_low=0.0, eps_high=0.5)
    assert at_hi.grad.tolist() == [[0.0]]
    assert at_hi.loss.tolist() == [[0.0]]
    assert at_lo.grad.tolist() == [[0.0]]
    assert at_lo.loss.tolist() == [[0.0]]


def test_a_ratio_inside_the_band_weighs_by_itself() -> None:
    lq, lp = -2.0, -2.0 + math.log(1.25)
    rho = math.exp(lp - lq)
    terms = band_masked_pg_loss([[lp]], [[lq]], [-0.5], eps_low=0.2, eps_high=0.28)
    assert terms.grad[0, 0] == 0.5 * rho
    assert terms.loss[0, 0] == 0.5 * rho * lp


def test_nll_hand_worked() -> None:
    terms = nll_loss([[-0.25, -3.0, -1.5]], mask=[[1, 1, 0]], cotangent=[[0.5, 2.0, 7.0]])
    assert terms.loss.tolist() == [[0.25, 3.0, 0.0]]
    assert terms.grad.tolist() == [[-0.5, -2.0, 0.0]]
    assert float(terms.loss.sum()) == float(Fraction(13, 4))


# ---------------------------------------------------------------------------------------------
# (2) the gradient against torch autograd on SkyRL's formula
# ---------------------------------------------------------------------------------------------


def _torch_band(batch: TokenBatch, low: float, high: float) -> tuple[Array, Array]:
    logp = torch.tensor(batch.logp, requires_grad=True)
    ratio = torch.exp(logp - torch.tensor(batch.logp_old))
    inside = (ratio > 1 - low) & (ratio < 1 + high)
    weight = torch.where(inside, ratio, torch.zeros_like(ratio)).detach()
    loss = -(weight * torch.tensor(batch.advantages) * logp) * torch.tensor(batch.mask)
    (grad,) = torch.autograd.grad((loss * torch.tensor(batch.cotangent)).sum(), logp)
    return loss.detach().numpy(), grad.numpy()


@given(
    token_batches(max_log_ratio=0.6), st.sampled_from([0.1, 0.2, 0.5]), st.sampled_from([0.1, 0.28])
)
def test_value_and_gradient_match_torch_autograd(
    batch: TokenBatch, low: float, high: float
) -> None:
    terms = band_masked_pg_loss(
        batch.logp,
        batch.logp_old,
        batch.advantages,
        eps_low=low,
        eps_high=high,
        mask=batch.mask,
        cotangent=batch.cotangent,
    )
    loss, grad = _torch_band(batch, low, high)
    np.testing.assert_allclose(terms.loss, loss, rtol=1e-13, atol=1e-300)
    np.testing.assert_allclose(terms.grad, grad, rtol=1e-13, atol=1e-300)


# ---------------------------------------------------------------------------------------------
# (3) properties, each paired with a wrong variant it rejects
# ---------------------------------------------------------------------------------------------


def _band(lp: Any, lq: Any, a: Any, **k: Any) -> LossTerms:
    return band_masked_pg_loss(lp, lq, a, eps_low=0.2, eps_high=0.28, **k)


def _wrong_clipped(lp: Any, lq: Any, a: Any, **k: Any) -> LossTerms:
    """CISPO: the weight clipped to the band instead of zeroed outside it."""
    return CL.cispo_loss(lp, lq, a, eps_low=0.2, eps_high=0.28, **k)


def _wrong_through_weight(lp: Any, lq: Any, a: Any, **k: Any) -> LossTerms:
    """No stop-gradient: the weight's own derivative −A·l·ρ added inside the band."""
    terms = _band(lp, lq, a, **k)
    lp_arr = np.asarray(lp, dtype=np.float64)
    return LossTerms(terms.loss, terms.grad * (1.0 + lp_arr))


def _wrong_unmasked(lp: Any, lq: Any, a: Any, *, mask: Any, **k: Any) -> LossTerms:
    """The mask forgotten on the gradient."""
    terms = _band(lp, lq, a, mask=mask, **k)
    full = _band(lp, lq, a, **k)
    return LossTerms(terms.loss, full.grad)


def check_out_of_band_gradient_is_zero(loss: Band) -> Callable[[], None]:
    @given(token_batches(max_log_ratio=2.0))
    def prop(batch: TokenBatch) -> None:
        terms = loss(batch.logp, batch.logp_old, batch.advantages, mask=batch.mask)
        rho = np.exp(batch.logp - batch.logp_old)
        outside = ((rho <= 0.8) | (rho >= 1.28)) & (batch.mask > 0)
        assert np.all(terms.grad[outside] == 0.0), terms.grad[outside]
        assert np.all(terms.loss[outside] == 0.0), terms.loss[outside]

    return prop


def test_out_of_band_gradient_is_zero() -> None:
    run_property(check_out_of_band_gradient_is_zero(_band))


def test_out_of_band_property_rejects_the_clipped_weight() -> None:
    rejects(check_out_of_band_gradient_is_zero(_wrong_clipped))


def check_on_policy_gradient(loss: Band) -> Callable[[], None]:
    @given(token_batches())
    def prop(batch: TokenBatch) -> None:
        terms = loss(batch.logp, batch.logp.copy(), batch.advantages, mask=batch.mask)
        np.testing.assert_array_equal(terms.grad, np.where(batch.mask > 0, -batch.advantages, 0.0))

    return prop


def test_on_policy_gradient_is_the_policy_gradient() -> None:
    run_property(check_on_policy_gradient(_band))


def test_on_policy_property_rejects_a_weight_without_stop_gradient() -> None:
    rejects(check_on_policy_gradient(_wrong_through_weight))


def check_padding_is_inert(loss: Band) -> Callable[[], None]:
    @given(token_batches())
    def prop(batch: TokenBatch) -> None:
        lp = np.where(batch.mask > 0, batch.logp, -0.01)  # padding in the band at ratio ~1
        lq = np.where(batch.mask > 0, batch.logp_old, -0.01)
        terms = loss(lp, lq, batch.advantages, mask=batch.mask)
        assert np.all(terms.grad[batch.mask == 0] == 0.0)
        assert np.all(terms.loss[batch.mask == 0] == 0.0)

    return prop


def test_padding_is_inert() -> None:
    run_property(check_padding_is_inert(_band))


def test_padding_property_rejects_an_unmasked_gradient() -> None:
    rejects(check_padding_is_inert(_wrong_unmasked))


def _closed_band(lp: Any, lq: Any, a: Any, *, eps_low: float, eps_high: float) -> LossTerms:
    """Both ends included (<=), the wrong end convention."""
    rho = np.exp(np.asarray(lp) - np.asarray(lq))
    w = np.where((rho >= 1 - eps_low) & (rho <= 1 + eps_high), rho, 0.0)
    local = -w * np.asarray(a)
    return LossTerms(local * np.asarray(lp), local)


def check_ends_are_open(loss: Band) -> Callable[[], None]:
    @given(st.floats(-0.6, 0.6, allow_subnormal=False), st.floats(-3.0, -0.1))
    def prop(d: float, lq: float) -> None:
        lp = lq + d
        # the ratio as the loss computes it: numpy's exp of a (1, 1) array, which may differ from
        # math.exp in the last bit (numpy's vectorised exp is not libm's)
        rho = float(np.exp(np.asarray([[lp]]) - np.asarray([[lq]]))[0, 0])
        # Sterbenz: rho − 1 and 1 − rho are exact for rho in [1/2, 2], so 1 ± eps is rho itself
        eps_high, eps_low = (rho - 1.0, 0.5) if rho >= 1.0 else (0.5, 1.0 - rho)
        terms = loss([[lp]], [[lq]], [[1.0]], eps_low=eps_low, eps_high=eps_high)
        assert terms.grad[0, 0] == 0.0, (rho, eps_low, eps_high, terms.grad)

    return prop


def test_the_band_ends_are_open() -> None:
    run_property(check_ends_are_open(band_masked_pg_loss))


def test_ends_property_rejects_a_closed_band() -> None:
    rejects(check_ends_are_open(_closed_band))


def check_nll_is_reinforce_at_unit_advantage(loss: Callable[..., LossTerms]) -> Callable[[], None]:
    @given(token_batches())
    def prop(batch: TokenBatch) -> None:
        got = loss(batch.logp, mask=batch.mask, cotangent=batch.cotangent)
        want = PG.reinforce_loss(
            batch.logp, np.ones_like(batch.logp), mask=batch.mask, cotangent=batch.cotangent
        )
        np.testing.assert_array_equal(got.loss, want.loss)
        np.testing.assert_array_equal(got.grad, want.grad)

    return prop


def test_nll_is_reinforce_at_unit_advantage() -> None:
    run_property(check_nll_is_reinforce_at_unit_advantage(nll_loss))


def _wrong_nll_mean(logp: Any, *, mask: Any, cotangent: Any) -> LossTerms:
    """Each row divided by its length (a per-sequence mean folded into the loss)."""
    terms = nll_loss(logp, mask=mask, cotangent=cotangent)
    lengths = np.maximum(np.asarray(mask).sum(axis=1, keepdims=True), 1.0)
    return LossTerms(terms.loss / lengths, terms.grad / lengths)


def test_nll_property_rejects_a_row_mean() -> None:
    rejects(check_nll_is_reinforce_at_unit_advantage(_wrong_nll_mean))


# ---------------------------------------------------------------------------------------------
# (4) the specs reject wrong candidates
# ---------------------------------------------------------------------------------------------

EXAMPLES = 40


def test_the_spec_refuses_the_clipped_weight() -> None:
    def cispo(lp: Any, lq: Any, a: Any, *, eps_low: Any, eps_high: Any, **k: Any) -> Any:
        return CL.cispo_loss(lp, lq, a, eps_low=min(eps_low, 0.999), eps_high=eps_high, **k)

    report = check_conformance(
        cispo,
        spec="band_masked_pg",
        conventions={"gradient": "returned"},
        checks=("values", "clipped_region_has_zero_gradient"),
        max_examples=EXAMPLES,
        shrink=False,
    )
    failed = {r.name for r in report.results if r.status == "failed"}
    assert {"values", "clipped_region_has_zero_gradient"} <= failed, report.summary()


def test_the_spec_refuses_a_closed_band() -> None:
    def closed(
        lp: Any, lq: Any, a: Any, *, eps_low: Any, eps_high: Any, mask: Any, cotangent: Any
    ) -> Any:
        terms = _closed_band(lp, lq, a, eps_low=eps_low, eps_high=eps_high)
        m = np.asarray(mask)
        return np.where(m > 0, terms.loss, 0.0), np.where(m > 0, terms.grad * cotangent, 0.0)

    report = check_conformance(
        closed,
        spec="band_masked_pg",
        conventions={"gradient": "returned"},
        checks=("ratios_at_clip_boundaries",),
        max_examples=EXAMPLES,
        shrink=False,
    )
    failed = {r.name for r in report.results if r.status == "failed"}
    assert "ratios_at_clip_boundaries" in failed, report.summary()


def test_the_nll_spec_refuses_a_plus_sign() -> None:
    def plus(lp: Any, **k: Any) -> Any:
        terms = nll_loss(lp, **k)
        return -terms.loss, -terms.grad

    report = check_conformance(
        plus,
        spec="nll",
        conventions={"gradient": "returned"},
        checks=("values", "gradient"),
        max_examples=EXAMPLES,
        shrink=False,
    )
    failed = {r.name for r in report.results if r.status == "failed"}
    assert {"values", "gradient"} <= failed, report.summary()


# ---------------------------------------------------------------------------------------------
# (5) validation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"eps_low": 1.0 + 1e-12, "eps_high": 0.2}, "eps_low"),
        ({"eps_low": -1e-12, "eps_high": 0.2}, "eps_low"),
        ({"eps_low": 0.2, "eps_high": -1e-12}, "eps_high"),
        ({"eps_low": 0.2, "eps_high": 0.2, "log_ratio_clamp": 0.0}, "log_ratio_clamp"),
    ],
)
def test_band_parameters_are_validated(kwargs: dict[str, Any], names: str) -> None:
    with pytest.raises(RefimplError, match=names):
        band_masked_pg_loss([[-1.0]], [[-1.0]], [1.0], **kwargs)
    band_masked_pg_loss([[-1.0]], [[-1.0]], [1.0], eps_low=1.0, eps_high=0.0)  # the bounds pass


def test_nll_refuses_a_non_finite_logp_naming_it() -> None:
    with pytest.raises(RefimplError, match="logp"):
        nll_loss([[-1.0, math.inf]])
