"""Tests of refimpl.losses.sequence: GSPO, GSPO-token and GMPO.

Values are checked on hand-worked cases; gradients against torch autograd (float64) on the same
formulas written here in torch (GSPO-token with ``.detach()`` where the formula has ``sg``), and
against central finite differences away from kinks. Each property is run on refimpl and on a
deliberately wrong variant, which it must reject.
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

from refimpl.losses import LossTerms
from refimpl.losses.sequence import gmpo_loss, gspo_loss, gspo_token_loss
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
def cases(draw: st.DrawFn, *, per_token: bool | None = None, max_abs_logp: float = 3.0) -> Case:
    """A padded batch with moderate log-ratios, advantages per sequence or per token, a cotangent."""
    pair = draw(rst.logprob_pairs(max_batch=3, max_time=6, max_abs_logp=max_abs_logp))
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


# ---------------------------------------------------------------------------------------------
# independent torch implementations (float64)
# ---------------------------------------------------------------------------------------------


def _t(x: Array) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float64)


def _torch_adv(adv: Array, shape: tuple[int, ...]) -> torch.Tensor:
    a = _t(adv)
    return a[:, None].expand(*shape) if a.dim() == 1 else a


def torch_gspo(c: Case, *, token: bool, cap: float | None = None) -> tuple[Array, Array]:
    """GSPO (token=False) or GSPO-token (token=True) in torch: (loss, VJP with c.cot)."""
    logp = _t(c.logp).requires_grad_(True)
    mask = _t(c.mask)
    d = (logp - _t(c.logp_old)) * mask
    mean = d.sum(-1) / mask.sum(-1).clamp(min=1.0)
    if token:
        log_s = logp - logp.detach() + mean.detach()[:, None]
    else:
        log_s = mean[:, None].expand_as(logp)
    if cap is not None:
        log_s = torch.clamp(log_s, max=cap)
    s = torch.exp(log_s)
    a = _torch_adv(c.adv, c.logp.shape)
    loss = torch.maximum(-a * s, -a * torch.clamp(s, 1 - c.eps_low, 1 + c.eps_high)) * mask
    (grad,) = torch.autograd.grad((loss * _t(c.cot) * mask).sum(), logp)
    return loss.detach().numpy(), grad.numpy()


def torch_gmpo(c: Case) -> tuple[Array, Array]:
    """verl's geo_mean loss in torch, with the exact length (no +1e-8), per token, VJP with c.cot."""
    logp = _t(c.logp).requires_grad_(True)
    mask = _t(c.mask)
    a = _torch_adv(c.adv, c.logp.shape) * mask
    d = logp - _t(c.logp_old)
    sgn = torch.sign(a)
    d_min = sgn * torch.min(sgn * d, sgn * torch.clamp(d, -c.eps_low, c.eps_high))
    n = mask.sum(-1).clamp(min=1.0)
    ratio = torch.exp((d_min * mask).sum(-1) / n)
    seq = -(a.sum(-1) / n) * ratio
    loss = seq[:, None] * mask
    (grad,) = torch.autograd.grad((loss * _t(c.cot) * mask).sum(), logp)
    return loss.detach().numpy(), grad.numpy()


def _close(found: Array, expected: Array) -> None:
    np.testing.assert_allclose(found, expected, rtol=RTOL, atol=ATOL)


# ---------------------------------------------------------------------------------------------
# (1) exact values
# ---------------------------------------------------------------------------------------------


def test_gspo_hand_worked_values() -> None:
    # sequence 0: log-ratios ln 2 and 0 -> s = sqrt 2 > 1.2, A = 1: clipped at 1.2, gradient 0.
    # sequence 1: log-ratios ln(1/2), 0 -> s = 1/sqrt 2 < 0.8, A = -1: clipped, loss 0.8.
    # sequence 2: one token, log-ratio ln 1.1 -> s = 1.1 inside, A = 2: loss -2.2, grad -2.2.
    logp = np.log([[2.0, 1.0], [0.5, 1.0], [1.1, 5.0]])
    mask = np.array([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    t = gspo_loss(logp, np.zeros((3, 2)), [1.0, -1.0, 2.0], eps_low=0.2, mask=mask)
    np.testing.assert_allclose(t.loss, [[-1.2, -1.2], [0.8, 0.8], [-2.2, 0.0]], rtol=1e-15)
    np.testing.assert_allclose(t.grad, [[0.0, 0.0], [0.0, 0.0], [-2.2, 0.0]], rtol=1e-15)
    # unclipped two-token sequence, A = -1: s = sqrt(1.21) = 1.1; grad per token = s/2·Σc = 1.1
    t2 = gspo_loss(np.log([[1.21, 1.0]]), np.zeros((1, 2)), [-1.0], eps_low=0.2)
    np.testing.assert_allclose(t2.loss, [[1.1, 1.1]], rtol=1e-15)
    np.testing.assert_allclose(t2.grad, [[1.1, 1.1]], rtol=1e-15)


def test_gspo_token_hand_worked_values() -> None:
    # s = 1.1 for both tokens; per-token advantages 1 and -3; cotangent 2 and 1.
    t = gspo_token_loss(
        np.log([[1.21, 1.0]]), np.zeros((1, 2)), [[1.0, -3.0]], eps_low=0.2, cotangent=[[2.0, 1.0]]
    )
    np.testing.assert_allclose(t.loss, [[-1.1, 3.3]], rtol=1e-15)
    np.testing.assert_allclose(t.grad, [[-2.2, 3.3]], rtol=1e-15)


def test_gmpo_hand_worked_values() -> None:
    # log-ratios 0.5 (A>0: clipped to 0.4), -0.5 (A>0: kept), 0.1 -> mean 0; Ā = 1: loss -1.
    d = np.array([[0.5, -0.5, 0.0]])
    t = gmpo_loss(d, np.zeros((1, 3)), [1.0], eps_low=0.4)
    np.testing.assert_allclose(t.loss, np.full((1, 3), -math.exp(-0.1 / 3)), rtol=1e-15)
    g = -math.exp(-0.1 / 3) / 3 * 3  # -Ā r / L · Σc, on the unclipped tokens
    np.testing.assert_allclose(t.grad, [[0.0, g, g]], rtol=1e-15)


def test_all_padding_row_contributes_nothing() -> None:
    logp = np.array([[0.3, -2.0], [5.0, 7.0]])
    mask = np.array([[1.0, 1.0], [0.0, 0.0]])
    for fn in (gspo_loss, gspo_token_loss, gmpo_loss):
        t = fn(logp, np.zeros((2, 2)), [1.0, -4.0], eps_low=0.2, mask=mask)
        assert np.all(t.loss[1] == 0.0)
        assert np.all(t.grad[1] == 0.0)
        assert np.all(t.loss[0] != 0.0)


def test_at_the_clip_bound_the_gradient_is_torchs() -> None:
    """On-policy s = 1 exactly; with eps_high = 0 it sits on the upper bound (torch.clamp passes)."""
    logp = np.log([[0.3, 0.6, 0.2]])
    for fn, token in ((gspo_loss, False), (gspo_token_loss, True)):
        for eps_low, eps_high, adv in ((0.2, 0.0, 1.0), (0.0, 0.2, -1.0), (0.0, 0.0, 2.0)):
            c = Case(
                logp, logp, np.ones((1, 3)), np.array([adv]), np.ones((1, 3)), eps_low, eps_high
            )
            terms = _call(fn, c, cotangent=c.cot)
            loss, grad = torch_gspo(c, token=token)
            _close(terms.loss, loss)
            _close(terms.grad, grad)
            assert np.all(terms.grad == -adv)
    c = Case(logp, logp - 0.4, np.ones((1, 3)), np.array([1.0]), np.ones((1, 3)), 0.4, 0.4)
    _close(gmpo_loss(c.logp, c.logp_old, c.adv, eps_low=0.4).grad, torch_gmpo(c)[1])


def test_a_tie_outside_the_band_splits_the_gradient_as_torch_does() -> None:
    """-a·s and -a·clip(s) can round to one float with s just outside the band (a = 1.9, s one ulp
    above 1 + eps_high): torch.maximum then gives each side half the gradient, and the clipped
    side's is 0 there, so the loss's gradient is half the unclipped one's, not all of it."""
    x = float(np.log(1.3))
    s = float(np.exp(x))
    eps_high = float(np.nextafter(s, 0.0)) - 1.0
    a = 1.9
    assert s > 1.0 + eps_high  # outside the band,
    assert -a * s == -a * (1.0 + eps_high)  # yet the two terms are one float: the tie
    one = np.ones((1, 1))
    c = Case(np.array([[x]]), np.zeros((1, 1)), one, np.array([a]), one, 0.2, eps_high)
    for fn, token in ((gspo_loss, False), (gspo_token_loss, True)):
        terms = _call(fn, c, cotangent=c.cot)
        loss, grad = torch_gspo(c, token=token)
        np.testing.assert_array_equal(terms.loss, loss)
        np.testing.assert_allclose(terms.grad, grad, rtol=1e-15, atol=0.0)
        np.testing.assert_allclose(terms.grad, [[-0.5 * a * s]], rtol=1e-15, atol=0.0)


# ---------------------------------------------------------------------------------------------
# (2) gradients against torch autograd and finite differences
# ---------------------------------------------------------------------------------------------


@given(cases())
def test_gspo_matches_torch(c: Case) -> None:
    terms = _call(gspo_loss, c, cotangent=c.cot)
    loss, grad = torch_gspo(c, token=False)
    _close(terms.loss, loss)
    _close(terms.grad, grad)


@given(cases())
def test_gspo_token_matches_torch(c: Case) -> None:
    terms = _call(gspo_token_loss, c, cotangent=c.cot)
    loss, grad = torch_gspo(c, token=True)
    _close(terms.loss, loss)
    _close(terms.grad, grad)


@given(cases(max_abs_logp=20.0), st.floats(-1.0, 12.0))
def test_log_ratio_cap_matches_torch(c: Case, cap: float) -> None:
    for fn, token in ((gspo_loss, False), (gspo_token_loss, True)):
        terms = _call(fn, c, cotangent=c.cot, log_ratio_cap=cap)
        loss, grad = torch_gspo(c, token=token, cap=cap)
        _close(terms.loss, loss)
        _close(terms.grad, grad)


@given(cases())
def test_gmpo_matches_torch(c: Case) -> None:
    terms = _call(gmpo_loss, c, cotangent=c.cot)
    loss, grad = torch_gmpo(c)
    _close(terms.loss, loss)
    _close(terms.grad, grad)


def _finite_difference(fn: Loss, c: Case, h: float = 1e-6) -> Array:
    def objective(x: Array) -> float:
        return float(np.sum(c.cot * _call(fn, c._replace(logp=x)).loss))

    out = np.zeros_like(c.logp)
    for idx in np.ndindex(*c.logp.shape):
        up, down = c.logp.copy(), c.logp.copy()
        up[idx] += h
        down[idx] -= h
        out[idx] = (objective(up) - objective(down)) / (2 * h)
    return out


def _away_from_kinks(c: Case, margin: float = 1e-3) -> bool:
    d = (c.logp - c.logp_old) * c.mask
    mean = d.sum(1) / np.maximum(c.mask.sum(1), 1)
    s = np.exp(mean)
    return bool(
        np.all(np.abs(s - (1 - c.eps_low)) > margin)
        and np.all(np.abs(s - (1 + c.eps_high)) > margin)
    )


@given(cases())
def test_gspo_gradient_matches_finite_differences(c: Case) -> None:
    if not _away_from_kinks(c):
        return
    fd = _finite_difference(gspo_loss, c)
    np.testing.assert_allclose(_call(gspo_loss, c, cotangent=c.cot).grad, fd, rtol=1e-5, atol=1e-6)


@given(cases())
def test_gmpo_gradient_matches_finite_differences(c: Case) -> None:
    d = c.logp - c.logp_old
    near = np.minimum(np.abs(d + c.eps_low), np.abs(d - c.eps_high))
    if np.any((near < 1e-3) & (c.mask > 0)):
        return
    fd = _finite_difference(gmpo_loss, c)
    np.testing.assert_allclose(_call(gmpo_loss, c, cotangent=c.cot).grad, fd, rtol=1e-5, atol=1e-6)


def test_gmpo_is_verls_geo_mean_up_to_its_1e8_denominators() -> None:
    """verl 0.9.1 compute_policy_loss_geo_mean, transcribed in torch (``L + 1e-8``, batch mean), vs
    gmpo_loss aggregated with seq-mean-token-mean weights: equal to about 1e-8 relative."""
    rng = np.random.default_rng(7)
    lengths = np.array([3, 5, 1, 4])
    mask = (np.arange(5)[None, :] < lengths[:, None]).astype(float)
    lp, old = rng.normal(size=(4, 5)) * 0.3 - 1, rng.normal(size=(4, 5)) * 0.3 - 1
    adv = rng.normal(size=(4, 5))
    logp = _t(lp).requires_grad_(True)
    m, a = _t(mask), _t(adv)
    d = logp - _t(old)
    sgn = torch.sign(a)
    d_min = sgn * torch.min(sgn * d, sgn * torch.clamp(d, -0.4, 0.3))
    n = m.sum(-1)
    ratio = torch.exp((d_min * m).sum(-1) / (n + 1e-8))
    pg_loss = torch.mean(-((a * m).sum(-1) / (n + 1e-8)) * ratio)
    (grad,) = torch.autograd.grad(pg_loss, logp)
    weights = mask / lengths[:, None] / 4  # seq-mean-token-mean
    terms = gmpo_loss(lp, old, adv, eps_low=0.4, eps_high=0.3, mask=mask, cotangent=weights)
    np.testing.assert_allclose(np.sum(weights * terms.loss), pg_loss.item(), rtol=1e-7)
    np.testing.assert_allclose(terms.grad, grad.numpy(), rtol=1e-7, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# (3) properties, each rejected on a wrong variant
# ---------------------------------------------------------------------------------------------


def gspo_without_stop_gradient(logp: Array, logp_old: Array, adv: Array, **kw: Any) -> LossTerms:
    """Wrong: GSPO-token's ratio differentiated through the whole mean (no sg)."""
    return gspo_loss(logp, logp_old, adv, **kw)


def gspo_with_sum(logp: Array, logp_old: Array, adv: Array, **kw: Any) -> LossTerms:
    """Wrong: the product of the token ratios (sum of log-ratios) instead of the geometric mean."""
    mask = np.ones_like(logp) if kw.get("mask") is None else np.asarray(kw["mask"])
    n = mask.sum(1, keepdims=True)
    total = ((logp - logp_old) * mask).sum(1, keepdims=True)
    shifted = logp_old + np.where(mask > 0, total / np.maximum(n, 1) * (n - 1), 0.0)
    return gspo_loss(logp + shifted - logp_old, logp_old, adv, **kw)


def gspo_padding_counts(logp: Array, logp_old: Array, adv: Array, **kw: Any) -> LossTerms:
    """Wrong: the mean log-ratio over all T positions, padding included."""
    mask = kw.pop("mask", None)
    terms = gspo_loss(logp, logp_old, adv, **kw)
    m = np.ones_like(logp) if mask is None else np.asarray(mask)
    return LossTerms(terms.loss * m, terms.grad * m)


def gspo_min_instead_of_max(logp: Array, logp_old: Array, adv: Array, **kw: Any) -> LossTerms:
    """Wrong: ``min`` of the two surrogates (the optimistic bound): clipped tokens keep a gradient."""
    flipped = gspo_loss(logp, logp_old, -np.asarray(adv), **kw)
    return LossTerms(-flipped.loss, -flipped.grad)


def gspo_without_length(logp: Array, logp_old: Array, adv: Array, **kw: Any) -> LossTerms:
    """Wrong: the gradient of exp(mean) taken as s instead of s/L per token."""
    terms = gspo_loss(logp, logp_old, adv, **kw)
    mask = np.ones_like(logp) if kw.get("mask") is None else np.asarray(kw["mask"])
    return LossTerms(terms.loss, terms.grad * mask.sum(1, keepdims=True))


def check_token_variant_has_no_coupling(fn: Loss) -> None:
    @given(cases(per_token=True))
    def prop(c: Case) -> None:
        base = _call(fn, c, cotangent=c.cot).grad
        other = c.cot.copy()
        other[:, 1:] += 1.0  # change every cotangent except the first token's
        moved = _call(fn, c, cotangent=other).grad
        np.testing.assert_allclose(moved[:, 0], base[:, 0], rtol=1e-12, atol=1e-12)

    prop()


def test_gspo_token_gradient_is_not_coupled_across_tokens() -> None:
    run_property(lambda: check_token_variant_has_no_coupling(gspo_token_loss))
    rejects(check_token_variant_has_no_coupling, gspo_without_stop_gradient)


def check_tiling_keeps_the_ratio(fn: Loss) -> None:
    """Repeating a sequence's valid tokens leaves the geometric mean, hence the loss, unchanged."""

    @given(cases(per_token=False), st.integers(2, 3))
    def prop(c: Case, times: int) -> None:
        b = 0
        n = int(c.mask[b].sum())
        lp = np.tile(c.logp[b, :n], times)[None, :]
        lo = np.tile(c.logp_old[b, :n], times)[None, :]
        once = fn(c.logp[b : b + 1, :n], c.logp_old[b : b + 1, :n], c.adv[:1], eps_low=c.eps_low)
        tiled = fn(lp, lo, c.adv[:1], eps_low=c.eps_low)
        np.testing.assert_allclose(tiled.loss[0, 0], once.loss[0, 0], rtol=1e-12, atol=1e-12)

    prop()


def test_gspo_loss_does_not_grow_with_repetition() -> None:
    run_property(lambda: check_tiling_keeps_the_ratio(gspo_loss))
    run_property(lambda: check_tiling_keeps_the_ratio(gspo_token_loss))
    rejects(check_tiling_keeps_the_ratio, gspo_with_sum)


def check_padding_is_inert(fn: Loss) -> None:
    @given(cases(), st.floats(-50.0, 50.0))
    def prop(c: Case, junk: float) -> None:
        first = _call(fn, c, cotangent=c.cot)
        pad = c.mask == 0
        moved = c._replace(
            logp=np.where(pad, junk, c.logp),
            logp_old=np.where(pad, -junk, c.logp_old),
            cot=np.where(pad, 3.0, c.cot),
        )
        second = _call(fn, moved, cotangent=moved.cot)
        assert np.all(second.loss[pad] == 0.0)
        assert np.all(second.grad[pad] == 0.0)
        np.testing.assert_allclose(second.loss, first.loss, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(second.grad, first.grad, rtol=1e-12, atol=1e-12)

    prop()


def test_padding_contributes_nothing() -> None:
    for fn in (gspo_loss, gspo_token_loss, gmpo_loss):
        run_property(lambda fn=fn: check_padding_is_inert(fn))  # type: ignore[misc]
    rejects(check_padding_is_inert, gspo_padding_counts)


def check_on_policy_is_policy_gradient(fn: Loss) -> None:
    """On-policy (s = 1) with the mask as cotangent: GSPO's gradient is −A at every valid token."""

    @given(cases(per_token=False))
    def prop(c: Case) -> None:
        c = c._replace(logp_old=c.logp)
        terms = _call(fn, c)
        expected = -np.broadcast_to(c.adv[:, None], c.logp.shape) * c.mask
        np.testing.assert_allclose(terms.grad, expected, rtol=1e-14, atol=0)

    prop()


def test_on_policy_reduces_to_the_policy_gradient() -> None:
    for fn in (gspo_loss, gspo_token_loss, gmpo_loss):
        run_property(lambda fn=fn: check_on_policy_is_policy_gradient(fn))  # type: ignore[misc]
    rejects(check_on_policy_is_policy_gradient, gspo_without_length)


def check_clipped_sequences_have_no_gradient(fn: Loss) -> None:
    @given(cases(per_token=False))
    def prop(c: Case) -> None:
        terms = _call(fn, c, cotangent=c.cot)
        d = (c.logp - c.logp_old) * c.mask
        s = np.exp(d.sum(1) / c.mask.sum(1))
        clipped = ((c.adv > 0) & (s > 1 + c.eps_high)) | ((c.adv < 0) & (s < 1 - c.eps_low))
        assert np.all(terms.grad[clipped] == 0.0)

    prop()


def test_clipped_sequences_have_zero_gradient() -> None:
    run_property(lambda: check_clipped_sequences_have_no_gradient(gspo_loss))
    run_property(lambda: check_clipped_sequences_have_no_gradient(gspo_token_loss))
    rejects(check_clipped_sequences_have_no_gradient, gspo_min_instead_of_max)


def test_token_and_sequence_gradients_agree_for_sequence_advantages() -> None:
    """Claim SQ1 on random batches: equal for the mask and for seq-mean-token-mean weights."""
    rng = np.random.default_rng(3)
    mask = np.array([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]], dtype=float)
    for _ in range(10):
        logp = rng.normal(size=(3, 4)) * 0.2
        adv = rng.normal(size=3)
        for cot in (mask, mask / mask.sum(1, keepdims=True) / 3):
            kw: dict[str, Any] = {"eps_low": 0.2, "mask": mask, "cotangent": cot}
            _close(
                gspo_loss(logp, 0 * logp, adv, **kw).grad,
                gspo_token_loss(logp, 0 * logp, adv, **kw).grad,
            )


# ---------------------------------------------------------------------------------------------
# (4) validation: each rule just inside and just outside
# ---------------------------------------------------------------------------------------------

X = np.zeros((2, 3))
FNS = (gspo_loss, gspo_token_loss, gmpo_loss)


@pytest.mark.parametrize("fn", FNS)
def test_eps_low_must_be_non_negative(fn: Loss) -> None:
    fn(X, X, [1.0, 1.0], eps_low=0.0)
    with pytest.raises(ValueError, match=r"eps_low must be >= 0.*got eps_low=-0\.01"):
        fn(X, X, [1.0, 1.0], eps_low=-0.01)


@pytest.mark.parametrize("fn", FNS)
def test_eps_high_must_be_non_negative(fn: Loss) -> None:
    fn(X, X, [1.0, 1.0], eps_low=0.2, eps_high=0.0)
    with pytest.raises(ValueError, match=r"eps_high must be >= 0.*Pass eps_high >= 0"):
        fn(X, X, [1.0, 1.0], eps_low=0.2, eps_high=-1e-9)


@pytest.mark.parametrize("fn", [gspo_loss, gspo_token_loss])
def test_ratio_eps_low_at_most_one(fn: Loss) -> None:
    fn(X, X, [1.0, 1.0], eps_low=1.0)
    with pytest.raises(ValueError, match=r"eps_low must be <= 1 \(the ratio is clipped below"):
        fn(X, X, [1.0, 1.0], eps_low=1.01)
    gmpo_loss(X, X, [1.0, 1.0], eps_low=1.01)  # log-space widths have no upper bound


@pytest.mark.parametrize("fn", FNS)
def test_eps_must_be_a_real_number(fn: Loss) -> None:
    with pytest.raises(TypeError, match=r"eps_low must be a real number.*Pass eps_low as a float"):
        fn(X, X, [1.0, 1.0], eps_low="0.2")


@pytest.mark.parametrize("fn", FNS)
def test_shapes_must_match(fn: Loss) -> None:
    with pytest.raises(ValueError, match=r"logp_old and logp must have the same shape"):
        fn(X, np.zeros((2, 4)), [1.0, 1.0], eps_low=0.2)
    with pytest.raises(ValueError, match=r"advantages must have one entry per sequence"):
        fn(X, X, [1.0, 1.0, 1.0], eps_low=0.2)
    with pytest.raises(ValueError, match=r"cotangent and mask must have the same shape"):
        fn(X, X, [1.0, 1.0], eps_low=0.2, cotangent=np.ones((3, 3)))
    with pytest.raises(ValueError, match=r"logp must be 2-D"):
        fn(np.zeros(3), np.zeros(3), [1.0], eps_low=0.2)


@pytest.mark.parametrize("fn", FNS)
def test_mask_must_be_zero_or_one(fn: Loss) -> None:
    fn(X, X, [1.0, 1.0], eps_low=0.2, mask=[[1, 1, 0], [1, 0, 0]])
    with pytest.raises(ValueError, match=r"mask must hold only 0 and 1"):
        fn(X, X, [1.0, 1.0], eps_low=0.2, mask=[[1, 0.5, 0], [1, 0, 0]])


@pytest.mark.parametrize("fn", FNS)
def test_non_finite_logp_is_refused(fn: Loss) -> None:
    with pytest.raises(ValueError, match=r"logp must contain only finite values"):
        fn(np.array([[0.0, np.nan, 0.0]]), np.zeros((1, 3)), [1.0], eps_low=0.2)


@pytest.mark.parametrize("fn", [gspo_loss, gspo_token_loss])
def test_overflowing_unclipped_ratio_is_refused(fn: Loss) -> None:
    fn(np.full((1, 2), 700.0), np.zeros((1, 2)), [-1.0], eps_low=0.2)
    fn(np.full((1, 2), 800.0), np.zeros((1, 2)), [1.0], eps_low=0.2)  # clipped: finite
    with pytest.raises(ValueError, match=r"overflows float64.*pass log_ratio_cap="):
        fn(np.full((1, 2), 800.0), np.zeros((1, 2)), [-1.0], eps_low=0.2)
    capped = fn(np.full((1, 2), 800.0), np.zeros((1, 2)), [-1.0], eps_low=0.2, log_ratio_cap=10.0)
    np.testing.assert_allclose(capped.loss, np.full((1, 2), math.exp(10.0)), rtol=1e-15)
    assert np.all(capped.grad == 0.0)


def test_overflowing_geometric_mean_is_refused() -> None:
    gmpo_loss(np.full((1, 2), 700.0), np.zeros((1, 2)), [-1.0], eps_low=0.2)
    with pytest.raises(ValueError, match=r"overflows float64"):
        gmpo_loss(np.full((1, 2), 800.0), np.zeros((1, 2)), [-1.0], eps_low=0.2)


@pytest.mark.parametrize(
    ("fn", "reduce", "value"),
    [
        (gspo_loss, "mean", 760.0),
        (gspo_token_loss, "mean", 760.0),
        (gmpo_loss, "mean", 760.0),
        (sequence_ppo_clip_loss, "summed", 2280.0),
    ],
)
def test_an_overflow_names_the_first_sequence_that_overflows(
    fn: Loss, reduce: str, value: float
) -> None:
    """Row 0 is finite; rows 1 and 2 overflow, and row 2's tokens start a column later. The refusal
    names row 1 and its log-ratio: neither the last overflowing row nor the row of the first
    non-finite column's index."""
    logp = np.array([[0.1, 0.0, 0.0], [760.0, 760.0, 760.0], [0.0, 800.0, 800.0]])
    mask = np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [0.0, 1.0, 1.0]])
    kw: dict[str, Any] = {} if fn is gmpo_loss else {"eps_high": 0.2}
    with pytest.raises(ValueError, match=rf"Sequence 1 has {reduce} log-ratio {value!r}"):
        fn(logp, np.zeros((3, 3)), [1.0, -1.0, -1.0], eps_low=0.2, mask=mask, **kw)


@pytest.mark.parametrize("fn", [gspo_loss, gspo_token_loss])
def test_log_ratio_cap_must_be_finite_real(fn: Loss) -> None:
    fn(X, X, [1.0, 1.0], eps_low=0.2, log_ratio_cap=-5.0)
    with pytest.raises(ValueError, match=r"log_ratio_cap must be finite"):
        fn(X, X, [1.0, 1.0], eps_low=0.2, log_ratio_cap=math.inf)
    with pytest.raises(TypeError, match=r"log_ratio_cap must be a real number"):
        fn(X, X, [1.0, 1.0], eps_low=0.2, log_ratio_cap="10")
