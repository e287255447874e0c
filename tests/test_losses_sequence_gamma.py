"""Tests of refimpl.losses.sequence_gamma: VESPO's gamma-kernel weight.

Hand-worked values (w a power of two); the loss and gradient against torch autograd (float64) on
the formula written here; properties each rejecting a deliberately wrong variant.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pytest
import torch
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy.typing import NDArray

from refimpl.errors import InvalidArgument
from refimpl.losses import LossTerms
from refimpl.losses.sequence_gamma import vespo_loss
from refimpl.testing import strategies as rst

Array = NDArray[np.float64]
Loss = Callable[..., LossTerms]
PARAMS: dict[str, Any] = {"k_pos": 2.0, "lambda_pos": 3.0, "k_neg": 3.0, "lambda_neg": 2.0}


class Case(NamedTuple):
    logp: Array
    logp_old: Array
    mask: Array
    adv: Array
    cot: Array


@st.composite
def cases(draw: st.DrawFn) -> Case:
    pair = draw(rst.logprob_pairs(max_batch=3, max_time=5, max_abs_logp=2.0))
    shape = pair.mask.shape
    adv = draw(hnp.arrays(np.float64, (shape[0],), elements=st.floats(-3.0, 3.0)))
    cot = draw(hnp.arrays(np.float64, shape, elements=st.floats(-2.0, 2.0)))
    return Case(pair.logp_target, pair.logp_behavior, pair.mask, adv, cot)


def _call(fn: Loss, c: Case, **kw: Any) -> LossTerms:
    return fn(c.logp, c.logp_old, c.adv, mask=c.mask, cotangent=c.cot, **PARAMS, **kw)


def torch_vespo(c: Case) -> tuple[Array, Array]:
    logp = torch.tensor(c.logp, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor(c.mask, dtype=torch.float64)
    log_w = ((logp - torch.tensor(c.logp_old)) * mask).sum(-1, keepdim=True)
    a = torch.tensor(c.adv, dtype=torch.float64)[:, None].expand_as(logp)
    pos = a >= 0
    k = torch.where(pos, torch.full_like(a, 2.0), torch.full_like(a, 3.0))
    lam = torch.where(pos, torch.full_like(a, 3.0), torch.full_like(a, 2.0))
    phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w)).detach()
    loss = -phi * a * logp * mask
    (grad,) = torch.autograd.grad((loss * torch.tensor(c.cot)).sum(), logp)
    return loss.detach().numpy(), grad.numpy()


def test_hand_worked_values() -> None:
    # w = 2 (token ratios 2 and 1): A > 0 -> φ = e^3·2^2·e^{-6} = 4e^{-3};
    # A < 0 -> φ = e^2·2^3·e^{-4} = 8e^{-2}. The gradient is −φA per token (c = 1).
    lp = np.log([[0.5, 0.5], [0.5, 0.5]])
    old = np.log([[0.25, 0.5], [0.25, 0.5]])
    terms = vespo_loss(lp, old, [1.0, -1.0], **PARAMS)
    expected = [[-4 * math.exp(-3.0)] * 2, [8 * math.exp(-2.0)] * 2]
    np.testing.assert_allclose(terms.grad, expected, rtol=1e-14)
    np.testing.assert_allclose(terms.loss, terms.grad * lp, rtol=1e-14)


def test_the_clamps() -> None:
    # token log-ratios of 30 clamped to 20 each; the sum 40 clamped to the range's 20
    lp, old = np.array([[0.0, 0.0]]), np.array([[-30.0, -30.0]])
    log_w = 20.0
    terms = vespo_loss(lp, old, [-1.0], **PARAMS, log_ratio_clamp=20.0,
                       log_weight_range=(math.log(1e-8), 20.0), cotangent=np.ones((1, 2)))  # fmt: skip
    phi = math.exp(2.0 + 3.0 * log_w - 2.0 * math.exp(log_w))
    np.testing.assert_allclose(terms.grad, [[phi, phi]], rtol=1e-14, atol=0)
    low = vespo_loss(old, lp, [1.0], **PARAMS, log_weight_range=(-5.0, 20.0))  # Σ = −60 -> −5
    np.testing.assert_allclose(low.grad, -math.exp(3.0 - 10.0 - 3.0 * math.exp(-5.0)), rtol=1e-14)


def test_refusals_name_the_parameter() -> None:
    z = np.zeros((1, 2))
    with pytest.raises(InvalidArgument, match="lambda_neg"):
        vespo_loss(z, z, [1.0], lambda_neg=0.0)
    with pytest.raises(InvalidArgument, match="k_pos"):
        vespo_loss(z, z, [1.0], k_pos=-1.0)
    with pytest.raises(InvalidArgument, match="log_weight_range"):
        vespo_loss(z, z, [1.0], log_weight_range=(2.0, 1.0))


def mean_variant(logp: Any, logp_old: Any, advantages: Any, **kw: Any) -> LossTerms:
    """Wrong: the sequence's mean log-ratio (length-normalised) in place of its sum."""
    mask = np.asarray(kw["mask"])
    lengths = np.maximum(mask.sum(axis=1, keepdims=True), 1.0)
    scaled = np.asarray(logp_old) + (np.asarray(logp) - np.asarray(logp_old)) / lengths
    terms = vespo_loss(scaled, logp_old, advantages, **kw)
    lp = np.where(mask > 0, np.asarray(logp), 0.0)
    weight = np.where(
        mask > 0, terms.grad / np.where(kw["cotangent"] == 0, 1.0, kw["cotangent"]), 0
    )
    return LossTerms(weight * lp, terms.grad)


def unnormalised(logp: Any, logp_old: Any, advantages: Any, **kw: Any) -> LossTerms:
    """Wrong: the kernel w^k e^{−λw} without e^λ (φ(1) = e^{−λ}, not 1)."""
    terms = vespo_loss(logp, logp_old, advantages, **kw)
    a = np.asarray(advantages)[:, None]
    scale = np.where(a >= 0, math.exp(-kw["lambda_pos"]), math.exp(-kw["lambda_neg"]))
    return LossTerms(terms.loss * scale, terms.grad * scale)


def matches_torch(fn: Loss) -> Callable[[], None]:
    @given(cases())
    def check(c: Case) -> None:
        terms = _call(fn, c)
        loss, grad = torch_vespo(c)
        np.testing.assert_allclose(terms.loss, loss, rtol=1e-11, atol=1e-12)
        np.testing.assert_allclose(terms.grad, grad, rtol=1e-11, atol=1e-12)

    return check


def test_matches_torch_with_the_summed_log_ratio() -> None:
    run_property(matches_torch(vespo_loss))
    rejects(matches_torch(mean_variant))


def on_policy(fn: Loss) -> Callable[[], None]:
    @given(cases())
    def check(c: Case) -> None:
        c = c._replace(logp_old=c.logp.copy())
        expected = -c.cot * c.adv[:, None] * c.mask
        np.testing.assert_allclose(_call(fn, c).grad, expected, rtol=1e-14, atol=1e-300)

    return check


def test_on_policy_the_weight_is_one() -> None:
    run_property(on_policy(vespo_loss))
    rejects(on_policy(unnormalised))


@given(st.floats(0.5, 5.0), st.floats(0.5, 5.0), st.floats(-3.0, 3.0))
def test_the_kernel_peaks_at_k_over_lambda(k: float, lam: float, log_w: float) -> None:
    def phi(lw: float) -> float:
        z = np.array([[lw]])
        g = vespo_loss(z, np.zeros((1, 1)), [1.0], k_pos=k, lambda_pos=lam).grad
        return -float(g[0, 0])

    assert phi(math.log(k / lam)) >= phi(log_w) * (1 - 1e-12)
