"""Distillation with the reverse KL as a reward (refimpl.losses.distillation).

Exact values on hand-worked tokens; the value and gradient against torch autograd on the formula
written here the way AReaL writes it (``exp(logp − old)·(teacher − logp.detach())``); properties
(on-policy the gradient is the k1 value, the ratio scales value and gradient, padding is inert),
each run against a wrong variant it must reject; the spec ``reverse_kl_distillation`` rejects
wrong candidates; refusals name the parameter.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from _wrong_variants import rejects, run_property
from hypothesis import given
from numpy.typing import NDArray
from strategies_losses import TokenBatch, token_batches

from refimpl.losses import LossTerms, kl_penalty, reverse_kl_distillation_loss
from refimpl.testing import check_conformance

Array = NDArray[np.float64]
Loss = Callable[..., LossTerms]

LN2 = math.log(2.0)


def test_hand_worked_on_and_off_policy() -> None:
    logp = np.array([[-1.0, -2.0, -0.5]])
    teacher = np.array([[-2.0, -1.0, -0.5]])
    on = reverse_kl_distillation_loss(logp, logp, teacher, mask=[[1, 1, 0]])
    assert on.loss.tolist() == [[1.0, -1.0, 0.0]]
    assert on.grad.tolist() == [[1.0, -1.0, 0.0]]
    zero = np.zeros((1, 2))
    off = reverse_kl_distillation_loss(zero, zero - LN2, [[-1.0, 0.5]], cotangent=[[0.5, 2.0]])
    assert off.loss.tolist() == [[2.0, -1.0]]  # ρ = 2 exactly: 2·(0 − (−1)), 2·(0 − 1/2)
    assert off.grad.tolist() == [[1.0, -2.0]]


def _torch_areal(batch: TokenBatch, teacher: Array) -> tuple[Array, Array]:
    logp = torch.tensor(batch.logp, requires_grad=True)
    weight = torch.exp(logp - torch.tensor(batch.logp_old))
    loss = -weight * (torch.tensor(teacher) - logp.detach()) * torch.tensor(batch.mask)
    (grad,) = torch.autograd.grad((loss * torch.tensor(batch.cotangent)).sum(), logp)
    return loss.detach().numpy(), grad.numpy()


@given(token_batches(max_log_ratio=2.0))
def test_value_and_gradient_match_torch_autograd(batch: TokenBatch) -> None:
    teacher = batch.logp_old[::-1].copy()  # another policy's log-probabilities
    terms = reverse_kl_distillation_loss(
        batch.logp, batch.logp_old, teacher, mask=batch.mask, cotangent=batch.cotangent
    )
    loss, grad = _torch_areal(batch, teacher)
    np.testing.assert_allclose(terms.loss, loss, rtol=1e-13, atol=1e-300)
    np.testing.assert_allclose(terms.grad, grad, rtol=1e-13, atol=1e-300)


def _right(lp: Any, lo: Any, lt: Any, **k: Any) -> LossTerms:
    return reverse_kl_distillation_loss(lp, lo, lt, **k)


def _wrong_k1_penalty(lp: Any, lo: Any, lt: Any, **k: Any) -> LossTerms:
    """The k1 penalty differentiated directly (AReaL's KDRL term): gradient 1 per token."""
    return kl_penalty(lp, lt, estimator="k1", **k)


def _wrong_unweighted(lp: Any, lo: Any, lt: Any, **k: Any) -> LossTerms:
    """The ratio forgotten: on-policy values everywhere."""
    return reverse_kl_distillation_loss(lp, lp, lt, **k)


def _wrong_unmasked(lp: Any, lo: Any, lt: Any, *, mask: Any, **k: Any) -> LossTerms:
    """The mask applied to the value only."""
    terms = reverse_kl_distillation_loss(lp, lo, lt, mask=mask, **k)
    return LossTerms(terms.loss, reverse_kl_distillation_loss(lp, lo, lt, **k).grad)


def check_on_policy_gradient_is_k1(loss: Loss) -> Callable[[], None]:
    @given(token_batches())
    def prop(batch: TokenBatch) -> None:
        teacher = batch.logp_old
        terms = loss(batch.logp, batch.logp, teacher, mask=batch.mask)
        want = np.where(batch.mask > 0, batch.logp - teacher, 0.0)
        np.testing.assert_array_equal(terms.grad, want)

    return prop


def test_on_policy_gradient_is_the_k1_value() -> None:
    run_property(check_on_policy_gradient_is_k1(_right))


def test_on_policy_property_rejects_the_differentiated_penalty() -> None:
    rejects(check_on_policy_gradient_is_k1(_wrong_k1_penalty))


def check_ratio_scales_the_gradient(loss: Loss) -> Callable[[], None]:
    @given(token_batches(max_log_ratio=2.0))
    def prop(batch: TokenBatch) -> None:
        teacher = batch.logp_old[::-1].copy()
        off = loss(batch.logp, batch.logp_old, teacher, mask=batch.mask)
        on = loss(batch.logp, batch.logp, teacher, mask=batch.mask)
        rho = np.exp(batch.logp - batch.logp_old)
        np.testing.assert_allclose(off.grad, rho * on.grad, rtol=1e-14, atol=0.0)

    return prop


def test_the_ratio_scales_the_gradient() -> None:
    run_property(check_ratio_scales_the_gradient(_right))


def test_ratio_property_rejects_a_forgotten_ratio() -> None:
    rejects(check_ratio_scales_the_gradient(_wrong_unweighted))


def check_padding_is_inert(loss: Loss) -> Callable[[], None]:
    @given(token_batches())
    def prop(batch: TokenBatch) -> None:
        terms = loss(batch.logp, batch.logp_old, batch.logp_old[::-1].copy(), mask=batch.mask)
        assert np.all(terms.grad[batch.mask == 0] == 0.0)
        assert np.all(terms.loss[batch.mask == 0] == 0.0)

    return prop


def test_padding_is_inert() -> None:
    run_property(check_padding_is_inert(_right))


def test_padding_property_rejects_an_unmasked_gradient() -> None:
    rejects(check_padding_is_inert(_wrong_unmasked))


def _candidate(loss: Loss) -> Callable[..., Any]:
    def candidate(lp: Any, lo: Any, lt: Any, *, mask: Any, cotangent: Any = None) -> Any:
        terms = loss(lp, lo, lt, mask=mask, cotangent=cotangent)
        return terms.loss, terms.grad

    return candidate


def test_the_spec_passes_the_reference() -> None:
    report = check_conformance(
        _candidate(_right),
        spec="reverse_kl_distillation",
        conventions={"gradient": "returned"},
        max_examples=20,
    )
    assert report.ok, report


@pytest.mark.parametrize("wrong", [_wrong_k1_penalty, _wrong_unweighted])
def test_the_spec_rejects_a_wrong_candidate(wrong: Loss) -> None:
    report = check_conformance(
        _candidate(wrong),
        spec="reverse_kl_distillation",
        conventions={"gradient": "returned"},
        checks=["values", "gradient"],
        max_examples=40,
    )
    assert not report.ok, report


def test_refusals_name_the_parameter() -> None:
    lp = np.zeros((1, 2))
    with pytest.raises(ValueError, match="logp_teacher"):
        reverse_kl_distillation_loss(lp, lp, np.zeros((1, 3)))
    with pytest.raises(ValueError, match="logp_old"):
        reverse_kl_distillation_loss(lp, np.zeros((2, 2)), lp)
    with pytest.raises(ValueError, match="logp"):
        reverse_kl_distillation_loss([[np.nan, 0.0]], lp, lp)
