"""Tests of refimpl.losses.sequence_product: PPO-clip on the sequence-likelihood ratio.

Values are checked on hand-worked cases (exact: ratios that are powers of two); gradients against
torch autograd (float64) on the formula written here in torch, and against central finite
differences away from the clip bounds. Each property is run on refimpl and on a deliberately
wrong variant, which it must reject.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
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
from refimpl.losses.sequence import gspo_loss
from refimpl.losses.sequence_product import sequence_ppo_clip_loss
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
    eps_low: float
    eps_high: float


@st.composite
def cases(draw: st.DrawFn, *, per_token: bool | None = None) -> Case:
    """A padded batch with log-ratios small enough that the summed ratio stays finite."""
    pair = draw(rst.logprob_pairs(max_batch=3, max_time=6, max_abs_logp=1.5))
    shape = pair.mask.shape
    token_level = draw(st.booleans()) if per_token is None else per_token
    adv_shape = shape if token_level else (shape[0],)
    adv = draw(hnp.arrays(np.float64, adv_shape, elements=st.floats(-3.0, 3.0)))
    cot = draw(hnp.arrays(np.float64, shape, elements=st.floats(-2.0, 2.0)))
    eps_low = draw(st.floats(0.01, 0.9))
    eps_high = draw(st.floats(0.01, 2.0))
    return Case(pair.logp_target, pair.logp_behavior, pair.mask, adv, cot, eps_low, eps_high)


def _call(fn: Loss, c: Case, **kw: Any) -> LossTerms:
    return fn(c.logp, c.logp_old, c.adv, eps_low=c.eps_low, eps_high=c.eps_high, mask=c.mask, **kw)


def _t(x: Array) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float64)


def torch_sequence_ppo(c: Case) -> tuple[Array, Array]:
    """The surrogate in torch: exp of the masked sum, clipped; (loss, VJP with c.cot)."""
    logp = _t(c.logp).requires_grad_(True)
    mask = _t(c.mask)
    total = ((logp - _t(c.logp_old)) * mask).sum(-1, keepdim=True)
    s = torch.exp(total).expand_as(logp)
    a = _t(c.adv)
    a = a[:, None].expand_as(logp) if a.dim() == 1 else a
    loss = torch.maximum(-a * s, -a * torch.clamp(s, 1 - c.eps_low, 1 + c.eps_high)) * mask
    (grad,) = torch.autograd.grad((loss * _t(c.cot) * mask).sum(), logp)
    return loss.detach().numpy(), grad.numpy()


def _close(found: Array, expected: Array) -> None:
    np.testing.assert_allclose(found, expected, rtol=RTOL, atol=ATOL)


# ---------------------------------------------------------------------------------------------
# (1) exact values
# ---------------------------------------------------------------------------------------------


def test_hand_worked_values() -> None:
    # row 0: ratios 2 and 1/2 -> S = 1, A = 1: unclipped, loss −1, grad −A·S·Σc = −(1 + 3).
    # row 1: ratios 2 and 2 -> S = 4 > 1.2 with A = 1: clipped, loss −1.2, grad 0.
    # row 2: ratios 1/2 and 1/2 -> S = 1/4 < 0.8 with A = −1: clipped, loss +0.8, grad 0.
    # row 3: ratio 2 then padding -> S = 2 with A = −1: unclipped (above), loss +2, grad 2·c.
    half, two = math.log(0.5), math.log(2.0)
    logp = np.array([[two, half], [two, two], [half, half], [two, 9.0]])
    old = np.zeros_like(logp)
    mask = np.array([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    cot = np.array([[1.0, 3.0], [1.0, 1.0], [1.0, 1.0], [0.5, 7.0]])
    terms = sequence_ppo_clip_loss(
        logp, old, [1.0, 1.0, -1.0, -1.0], eps_low=0.2, mask=mask, cotangent=cot
    )
    loss = [[-1, -1], [Fraction(-6, 5)] * 2, [Fraction(4, 5)] * 2, [2, 0]]
    grad = [[-4, -4], [0, 0], [0, 0], [1, 0]]
    np.testing.assert_allclose(terms.loss, np.array(loss, dtype=float), rtol=1e-15, atol=0)
    np.testing.assert_allclose(terms.grad, np.array(grad, dtype=float), rtol=1e-15, atol=0)


def test_asymmetric_clip_and_per_token_advantages() -> None:
    # S = 2 (one token of ratio 2 and one of ratio 1), eps_high = 1.5: inside [0.8, 2.5].
    # Per-token advantages (1, −2): loss (−2, 4); grad at each valid token Σ_t c_t·(−A_t)·S =
    # 1·(−1)·2 + 1·2·2 = 2.
    logp = np.array([[math.log(2.0), 0.0]])
    terms = sequence_ppo_clip_loss(logp, np.zeros_like(logp), [[1.0, -2.0]], eps_low=0.2,
                                   eps_high=1.5)  # fmt: skip
    np.testing.assert_allclose(terms.loss, [[-2.0, 4.0]], rtol=1e-15)
    np.testing.assert_allclose(terms.grad, [[2.0, 2.0]], rtol=1e-15)


def test_all_padding_row_contributes_nothing() -> None:
    logp = np.array([[0.3, -0.2], [5.0, 5.0]])
    mask = np.array([[1.0, 1.0], [0.0, 0.0]])
    terms = sequence_ppo_clip_loss(logp, np.zeros_like(logp), [1.0, 3.0], eps_low=0.2, mask=mask)
    assert np.all(terms.loss[1] == 0.0)
    assert np.all(terms.grad[1] == 0.0)


def test_at_the_clip_bound_the_gradient_is_torchs() -> None:
    # S exactly 1 + eps_high (dyadic): torch.clamp passes the gradient at its bound, and both
    # branches tie, so torch.maximum splits it: grad = ½·(−A·S) + ½·(−A·S) = −A·S per unit c.
    logp = np.array([[math.log(1.5), 0.0]])
    c = Case(logp, np.zeros_like(logp), np.ones_like(logp), np.array([1.0]), np.ones_like(logp),
             0.2, 0.5)  # fmt: skip
    terms = _call(sequence_ppo_clip_loss, c, cotangent=c.cot)
    loss, grad = torch_sequence_ppo(c)
    np.testing.assert_allclose(terms.loss, loss, rtol=1e-15)
    np.testing.assert_allclose(terms.grad, grad, rtol=1e-15)


def test_refusals_name_the_parameter_and_the_fix() -> None:
    lp = np.zeros((1, 2))
    with pytest.raises(InvalidArgument, match="eps_low"):
        sequence_ppo_clip_loss(lp, lp, [1.0], eps_low=1.5)
    with pytest.raises(InvalidArgument, match="eps_high"):
        sequence_ppo_clip_loss(lp, lp, [1.0], eps_low=0.2, eps_high=-0.1)
    big = np.array([[400.0, 400.0]])  # Σ = 800: exp overflows, and A < 0 leaves it unclipped
    with pytest.raises(InvalidArgument, match=r"summed log-ratio 800\.0"):
        sequence_ppo_clip_loss(big, np.zeros_like(big), [-1.0], eps_low=0.2)
    # the same ratio with A > 0 is clipped: finite
    terms = sequence_ppo_clip_loss(big, np.zeros_like(big), [1.0], eps_low=0.2)
    assert np.all(terms.loss == -1.2)
    assert np.all(terms.grad == 0.0)


# ---------------------------------------------------------------------------------------------
# (2) properties, each shown to reject a wrong variant
# ---------------------------------------------------------------------------------------------


def sequence_mean_variant(logp: Any, logp_old: Any, advantages: Any, **kw: Any) -> LossTerms:
    """Wrong: the geometric mean (GSPO) in place of the product."""
    return gspo_loss(logp, logp_old, advantages, **kw)


def padding_counts_variant(logp: Any, logp_old: Any, advantages: Any, **kw: Any) -> LossTerms:
    """Wrong: the padded entries' log-ratios enter the sum."""
    mask = kw.pop("mask", None)
    terms = sequence_ppo_clip_loss(logp, logp_old, advantages, **kw)
    m = np.ones_like(np.asarray(logp)) if mask is None else np.asarray(mask)
    return LossTerms(terms.loss * m, terms.grad * m)


def matches_torch(fn: Loss) -> Callable[[], None]:
    @given(cases())
    def check(c: Case) -> None:
        terms = _call(fn, c, cotangent=c.cot)
        loss, grad = torch_sequence_ppo(c)
        _close(terms.loss, loss)
        _close(terms.grad, grad)

    return check


def test_matches_torch_autograd() -> None:
    run_property(matches_torch(sequence_ppo_clip_loss))
    rejects(matches_torch(sequence_mean_variant))


def on_policy_gradient(fn: Loss) -> Callable[[], None]:
    @given(cases())
    def check(c: Case) -> None:
        c = c._replace(logp_old=c.logp.copy())
        terms = _call(fn, c, cotangent=c.cot)
        a = np.broadcast_to(c.adv[:, None], c.mask.shape) if c.adv.ndim == 1 else c.adv
        row = -(a * c.cot * c.mask).sum(axis=1, keepdims=True)
        _close(terms.grad, np.broadcast_to(row, c.mask.shape) * c.mask)

    return check


def test_on_policy_the_gradient_is_the_sequence_policy_gradient() -> None:
    # at logp == logp_old: −Σ_t c_bt·A_bt at every valid token (no 1/L_b: GSPO has one)
    run_property(on_policy_gradient(sequence_ppo_clip_loss))
    rejects(on_policy_gradient(sequence_mean_variant))


def tiling_multiplies_the_log_ratio(fn: Loss) -> Callable[[], None]:
    @given(st.floats(-0.3, 0.3), st.integers(1, 5), st.floats(-2.0, 2.0))
    def check(delta: float, length: int, a: float) -> None:
        logp = np.full((1, length), delta)
        terms = fn(logp, np.zeros_like(logp), [a], eps_low=0.2, eps_high=0.28)
        s = math.exp(length * delta)
        expected = max(-a * s, -a * min(max(s, 0.8), 1.28))
        np.testing.assert_allclose(terms.loss, np.full((1, length), expected), rtol=1e-12,
                                   atol=1e-15)  # fmt: skip

    return check


def test_the_ratio_is_the_product_over_the_sequence() -> None:
    # a constant per-token log-ratio δ over L tokens gives S = e^{Lδ} (GSPO's stays e^δ)
    run_property(tiling_multiplies_the_log_ratio(sequence_ppo_clip_loss))
    rejects(tiling_multiplies_the_log_ratio(sequence_mean_variant))


def padding_is_inert(fn: Loss) -> Callable[[], None]:
    @given(cases(), st.floats(-50.0, 50.0))
    def check(c: Case, junk: float) -> None:
        if np.all(c.mask > 0):
            return
        base = _call(fn, c, cotangent=c.cot)
        dirty = c._replace(logp=np.where(c.mask > 0, c.logp, junk))
        moved = _call(fn, dirty, cotangent=c.cot)
        _close(moved.loss, base.loss)
        _close(moved.grad, base.grad)

    return check


def test_padding_contributes_nothing() -> None:
    run_property(padding_is_inert(sequence_ppo_clip_loss))
    rejects(padding_is_inert(padding_counts_variant))


def _finite_difference(c: Case, h: float = 1e-6) -> Array:
    def objective(x: Array) -> float:
        return float(np.sum(c.cot * _call(sequence_ppo_clip_loss, c._replace(logp=x)).loss))

    out = np.zeros_like(c.logp)
    for idx in np.ndindex(*c.logp.shape):
        up, down = c.logp.copy(), c.logp.copy()
        up[idx] += h
        down[idx] -= h
        out[idx] = (objective(up) - objective(down)) / (2 * h)
    return out


@given(cases())
def test_gradient_matches_finite_differences(c: Case) -> None:
    s = np.exp(((c.logp - c.logp_old) * c.mask).sum(axis=1))
    margin = 1e-3 * np.maximum(s, 1.0)
    if np.any(np.abs(s - (1 - c.eps_low)) < margin) or np.any(
        np.abs(s - (1 + c.eps_high)) < margin
    ):
        return
    fd = _finite_difference(c)
    terms = _call(sequence_ppo_clip_loss, c, cotangent=c.cot)
    np.testing.assert_allclose(terms.grad, fd, rtol=1e-5, atol=1e-5 * float(np.max(s, initial=1.0)))


@given(cases(per_token=False))
def test_one_token_sequences_are_gspo(c: Case) -> None:
    # with one valid token the product and the geometric mean coincide
    one = c._replace(mask=c.mask * (np.arange(c.mask.shape[1]) == 0))
    ours = _call(sequence_ppo_clip_loss, one, cotangent=c.cot)
    theirs = _call(gspo_loss, one, cotangent=c.cot)
    _close(ours.loss, theirs.loss)
    _close(ours.grad, theirs.grad)
