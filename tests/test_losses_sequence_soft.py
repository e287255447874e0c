"""Tests of refimpl.losses.sequence_soft: CISPO and SAPO with GSPO's sequence ratio.

Hand-worked values (ratios that are powers of two); gradients against torch autograd (float64)
on the formulas written here; properties each run on refimpl and on a deliberately wrong variant,
which it must reject.
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
from refimpl.losses.clipped import cispo_loss, sapo_loss
from refimpl.losses.sequence_soft import cispo_sequence_loss, sapo_sequence_loss
from refimpl.testing import strategies as rst

Array = NDArray[np.float64]
Loss = Callable[..., LossTerms]
RTOL, ATOL = 1e-12, 1e-12


class Case(NamedTuple):
    logp: Array
    logp_old: Array
    mask: Array
    adv: Array
    cot: Array
    eps_high: float
    tau_pos: float
    tau_neg: float


@st.composite
def cases(draw: st.DrawFn) -> Case:
    pair = draw(rst.logprob_pairs(max_batch=3, max_time=6, max_abs_logp=3.0))
    shape = pair.mask.shape
    adv_shape = shape if draw(st.booleans()) else (shape[0],)
    adv = draw(hnp.arrays(np.float64, adv_shape, elements=st.floats(-3.0, 3.0)))
    cot = draw(hnp.arrays(np.float64, shape, elements=st.floats(-2.0, 2.0)))
    return Case(
        pair.logp_target, pair.logp_behavior, pair.mask, adv, cot,
        draw(st.floats(0.0, 4.0)), draw(st.floats(0.1, 5.0)), draw(st.floats(0.1, 5.0)),
    )  # fmt: skip


def _cispo(fn: Loss, c: Case) -> LossTerms:
    return fn(c.logp, c.logp_old, c.adv, eps_high=c.eps_high, mask=c.mask, cotangent=c.cot)


def _sapo(fn: Loss, c: Case) -> LossTerms:
    return fn(c.logp, c.logp_old, c.adv, tau_pos=c.tau_pos, tau_neg=c.tau_neg, mask=c.mask,
              cotangent=c.cot)  # fmt: skip


def _t(x: Array) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float64)


def _torch_parts(c: Case) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    logp = _t(c.logp).requires_grad_(True)
    mask = _t(c.mask)
    mean = ((logp - _t(c.logp_old)) * mask).sum(-1, keepdim=True) / mask.sum(
        -1, keepdim=True
    ).clamp(min=1.0)
    a = _t(c.adv)
    return logp, mask, mean, (a[:, None].expand_as(logp) if a.dim() == 1 else a)


def torch_cispo(c: Case, *, detach: bool = True) -> tuple[Array, Array]:
    logp, mask, mean, a = _torch_parts(c)
    w = torch.clamp(torch.exp(mean), max=1 + c.eps_high)
    w = w.detach() if detach else w
    loss = -w * a * logp * mask
    (grad,) = torch.autograd.grad((loss * _t(c.cot)).sum(), logp)
    return loss.detach().numpy(), grad.numpy()


def torch_sapo(c: Case) -> tuple[Array, Array]:
    logp, mask, mean, a = _torch_parts(c)
    tau = torch.where(a > 0, torch.full_like(a, c.tau_pos), torch.full_like(a, c.tau_neg))
    loss = -a * torch.sigmoid(tau * (torch.exp(mean) - 1)) * 4 / tau * mask
    (grad,) = torch.autograd.grad((loss * _t(c.cot)).sum(), logp)
    return loss.detach().numpy(), grad.numpy()


def _close(found: Array, expected: Array) -> None:
    np.testing.assert_allclose(found, expected, rtol=RTOL, atol=ATOL)


# ---------------------------------------------------------------------------------------------
# exact values
# ---------------------------------------------------------------------------------------------


def test_cispo_hand_worked_values() -> None:
    # row 0: token ratios 4 and 1 -> s = 2, capped at 1.5; row 1: ratios 1/4, 1 -> s = 1/2.
    lp = np.log([[0.5, 0.5], [0.125, 0.5]])
    old = np.log([[0.125, 0.5], [0.5, 0.5]])
    terms = cispo_sequence_loss(lp, old, [2.0, -1.0], eps_high=0.5)
    np.testing.assert_allclose(terms.grad, [[-3.0, -3.0], [0.5, 0.5]], rtol=1e-15)
    np.testing.assert_allclose(terms.loss, terms.grad * lp, rtol=1e-15)  # ℓ = −wA·logp, g = −wA


def test_sapo_hand_worked_values() -> None:
    # s = 2 (token ratios 4 and 1), A = 1, τ = 1: loss −4σ(1), gradient per token
    # Σ_t c_t·(−A)·4σ(1)σ(−1)·s / L = −4σ(1)σ(−1)·2 (c = 1 on both tokens)
    lp, old = np.log([[0.5, 0.5]]), np.log([[0.125, 0.5]])
    terms = sapo_sequence_loss(lp, old, [1.0], tau_pos=1.0, tau_neg=1.05)
    sig = 1 / (1 + math.exp(-1.0))
    np.testing.assert_allclose(terms.loss, [[-4 * sig] * 2], rtol=1e-15)
    np.testing.assert_allclose(terms.grad, [[-8 * sig * (1 - sig)] * 2], rtol=1e-14)


def test_refusals_name_the_parameter() -> None:
    z = np.zeros((1, 2))
    with pytest.raises(InvalidArgument, match="eps_high"):
        cispo_sequence_loss(z, z, [1.0], eps_high=-0.5)
    with pytest.raises(InvalidArgument, match="eps_low"):
        cispo_sequence_loss(z, z, [1.0], eps_high=0.5, eps_low=1.0)
    with pytest.raises(InvalidArgument, match="tau_neg"):
        sapo_sequence_loss(z, z, [1.0], tau_pos=1.0, tau_neg=0.0)


def test_huge_mean_log_ratios_stay_finite() -> None:
    lp, old = np.array([[0.0, 0.0]]), np.array([[-1000.0, -1000.0]])
    cispo = cispo_sequence_loss(lp, old, [1.0], eps_high=0.28)
    sapo = sapo_sequence_loss(lp, old, [1.0], tau_pos=1.0, tau_neg=1.05)
    assert np.all(np.isfinite(cispo.grad))
    np.testing.assert_allclose(cispo.grad, [[-1.28, -1.28]], rtol=1e-15)
    np.testing.assert_allclose(sapo.loss, [[-4.0, -4.0]], rtol=1e-15)
    assert np.all(sapo.grad == 0.0)


# ---------------------------------------------------------------------------------------------
# properties, each rejecting a wrong variant
# ---------------------------------------------------------------------------------------------


def cispo_weight_not_detached(c: Case) -> tuple[Array, Array]:
    """Wrong: the weight carries a gradient (through the sequence mean)."""
    return torch_cispo(c, detach=False)


def cispo_matches(reference: Callable[[Case], tuple[Array, Array]]) -> Callable[[], None]:
    @given(cases())
    def check(c: Case) -> None:
        terms = _cispo(cispo_sequence_loss, c)
        loss, grad = reference(c)
        _close(terms.loss, loss)
        _close(terms.grad, grad)

    return check


def test_cispo_matches_torch_with_a_detached_weight() -> None:
    run_property(cispo_matches(torch_cispo))
    rejects(cispo_matches(cispo_weight_not_detached))


def sapo_matches(fn: Loss) -> Callable[[], None]:
    @given(cases())
    def check(c: Case) -> None:
        terms = _sapo(fn, c)
        loss, grad = torch_sapo(c)
        _close(terms.loss, loss)
        _close(terms.grad, grad)

    return check


def sapo_token_ratio(*args: Any, **kw: Any) -> LossTerms:
    """Wrong: the token-level SAPO (each token's own ratio)."""
    return sapo_loss(*args, **kw)


def test_sapo_matches_torch_through_the_sequence_mean() -> None:
    run_property(sapo_matches(sapo_sequence_loss))
    rejects(sapo_matches(sapo_token_ratio))


def sapo_on_policy(fn: Loss) -> Callable[[], None]:
    @given(cases())
    def check(c: Case) -> None:
        c = c._replace(logp_old=c.logp.copy())
        a = np.broadcast_to(c.adv[:, None], c.mask.shape) if c.adv.ndim == 1 else c.adv
        lengths = np.maximum(c.mask.sum(axis=1, keepdims=True), 1.0)
        row = -(a * c.cot * c.mask).sum(axis=1, keepdims=True) / lengths
        _close(_sapo(fn, c).grad, np.broadcast_to(row, c.mask.shape) * c.mask)

    return check


def test_sapo_on_policy_gradient_is_the_sequence_mean_policy_gradient() -> None:
    run_property(sapo_on_policy(sapo_sequence_loss))
    rejects(sapo_on_policy(sapo_token_ratio))


@given(cases())
def test_one_token_sequences_are_the_token_losses(c: Case) -> None:
    one = c._replace(mask=c.mask * (np.arange(c.mask.shape[1]) == 0))
    _close(_cispo(cispo_sequence_loss, one).grad, _cispo(cispo_loss, one).grad)
    ours, theirs = _sapo(sapo_sequence_loss, one), _sapo(sapo_loss, one)
    _close(ours.loss, theirs.loss)
    _close(ours.grad, theirs.grad)


def padding_is_inert(fn: Loss) -> Callable[[], None]:
    @given(cases(), st.floats(-30.0, 30.0))
    def check(c: Case, junk: float) -> None:
        dirty = c._replace(logp=np.where(c.mask > 0, c.logp, junk))
        _close(_sapo(fn, dirty).grad, _sapo(fn, c).grad)
        _close(_sapo(fn, dirty).loss, _sapo(fn, c).loss)

    return check


def sapo_unmasked_mean(logp: Any, logp_old: Any, advantages: Any, **kw: Any) -> LossTerms:
    """Wrong: the padded entries enter the sequence mean."""
    mask = np.asarray(kw.pop("mask"))
    terms = sapo_sequence_loss(logp, logp_old, advantages, **kw)
    return LossTerms(terms.loss * mask, terms.grad * mask)


def test_padding_contributes_nothing() -> None:
    run_property(padding_is_inert(sapo_sequence_loss))
    rejects(padding_is_inert(sapo_unmasked_mean))


@pytest.mark.parametrize("size", [1e-300, 0.5, 3.0, 1e300])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_an_overflowing_gate_names_the_temperature_of_its_sign(sign: float, size: float) -> None:
    """4/τ overflows at τ = 1e-320: the refusal names the temperature of the rows that overflow
    (tau_pos for A > 0, tau_neg for A < 0), with the other row and a zero advantage beside them;
    the same τ on the other sign's rows, and on a row of A = 0, is accepted. The overflowing
    advantage is sized from 1e-300 to 1e300, never ±1: the sign test reads A against 0, not
    against ±1 (A = -0.5 is negative, A = 0.5 positive)."""
    z = np.zeros((3, 2))
    tiny, name = ("tau_pos", "tau_neg") if sign > 0 else ("tau_neg", "tau_pos")
    adv = [sign * size, -sign * 2.0, 0.0]
    with pytest.raises(InvalidArgument, match=rf"^{tiny} must give a finite gated loss"):
        sapo_sequence_loss(z, z, adv, **{tiny: 1e-320, name: 1.0})
    terms = sapo_sequence_loss(z, z, [-sign * size, 0.0, -sign * 2.0], **{tiny: 1e-320, name: 1.0})
    assert np.all(np.isfinite(terms.loss))
    assert np.all(np.isfinite(terms.grad))
