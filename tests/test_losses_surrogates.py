"""Token-level policy surrogates: refimpl.losses.clipped and refimpl.losses.policy_gradient.

Each surrogate is checked four ways: exact values on hand-worked tokens (Fractions); the gradient
against torch autograd on the frameworks' formula written here in torch (float64, Hypothesis
inputs, padding and cotangents included), and against central finite differences away from kinks;
properties (padding, on-policy reduction, clipped regions, dual-clip, stop-gradient, huge
log-ratios), each also run against a deliberately wrong variant that it must reject; and every
validation rule, just inside and just outside.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any, Literal

import numpy as np
import pytest
import torch
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy.typing import NDArray

import refimpl.losses.clipped as CL
import refimpl.losses.policy_gradient as PG
from refimpl.losses import LossTerms
from refimpl.testing import strategies as rst

Array = NDArray[np.float64]
Tensor = torch.Tensor
TorchLoss = Callable[[Tensor, Tensor, Tensor], Tensor]

# ---------------------------------------------------------------------------------------------
# torch formulas (independent implementations, written the way the frameworks write them)
# ---------------------------------------------------------------------------------------------


def _ratio(lp: Tensor, lq: Tensor, clamp: float | None) -> Tensor:
    lr = lp - lq
    if clamp is not None:
        lr = torch.clamp(lr, min=-clamp, max=clamp)
    return torch.exp(lr)


def torch_ppo(
    eps_low: float, eps_high: float, dual: float | None, clamp: float | None
) -> TorchLoss:
    def f(lp: Tensor, lq: Tensor, a: Tensor) -> Tensor:
        ratio = _ratio(lp, lq, clamp)
        loss = torch.maximum(-a * ratio, -a * torch.clamp(ratio, 1 - eps_low, 1 + eps_high))
        if dual is not None:
            loss = torch.where(a < 0, torch.min(-a * dual, loss), loss)
        return loss

    return f


def torch_cispo(eps_high: float, eps_low: float | None, clamp: float | None) -> TorchLoss:
    def f(lp: Tensor, lq: Tensor, a: Tensor) -> Tensor:
        ratio = _ratio(lp, lq, clamp)
        low = None if eps_low is None else 1 - eps_low
        return -torch.clamp(ratio, min=low, max=1 + eps_high).detach() * a * lp

    return f


def torch_sapo(tau_pos: float, tau_neg: float, clamp: float | None) -> TorchLoss:
    def f(lp: Tensor, lq: Tensor, a: Tensor) -> Tensor:
        ratio = _ratio(lp, lq, clamp)
        pos, neg = torch.tensor(tau_pos, dtype=a.dtype), torch.tensor(tau_neg, dtype=a.dtype)
        tau = torch.where(a > 0, pos, neg)
        return -torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau) * a

    return f


def torch_iw(cap: float | None, clamp: float | None) -> TorchLoss:
    def f(lp: Tensor, lq: Tensor, a: Tensor) -> Tensor:
        ratio = _ratio(lp, lq, clamp)
        if cap is None:
            return -ratio * a
        return -a * lp * torch.clamp(ratio, max=cap).detach()

    return f


def torch_dro(beta: float) -> TorchLoss:
    def f(lp: Tensor, lq: Tensor, a: Tensor) -> Tensor:
        return -(lp * a - 0.5 * beta * (lp - lq).square())

    return f


def torch_reinforce(lp: Tensor, lq: Tensor, a: Tensor) -> Tensor:
    return -lp * a


def torch_dppo(
    kind: str, d_low: float, d_high: float, cap: float | None, form: str, clamp: float | None
) -> TorchLoss:
    """verl's (form="log") and SkyRL's (form="ratio") DPPO, 1e-8 in the binary KL included."""

    def f(lp: Tensor, lq: Tensor, a: Tensor) -> Tensor:
        ratio = _ratio(lp, lq, clamp)
        with torch.no_grad():
            p, p_old = torch.exp(lp), torch.exp(lq)
            if kind == "tv":
                up, down = (p - p_old) <= d_high, (p - p_old) >= -d_low
            else:
                kl = p_old * (lq - lp) + (1 - p_old) * torch.log(
                    (1 - p_old + 1e-8) / (1 - p + 1e-8)
                )
                up, down = (kl <= d_high) | (p <= p_old), (kl <= d_low) | (p >= p_old)
            keep = torch.where(a > 0, up, down).to(lp.dtype)
        if form == "ratio":
            return -(ratio * a * keep)
        w = ratio if cap is None else torch.clamp(ratio, max=cap)
        return -a * w.detach() * lp * keep

    return f


def torch_terms(f: TorchLoss, lp: Array, lq: Array, a: Array, m: Array, c: Array) -> LossTerms:
    """Per-token loss (0 at padding) and ∂(Σ c·loss)/∂logp by torch autograd, float64."""
    lp_t = torch.tensor(lp, dtype=torch.float64, requires_grad=True)
    lq_t, a_t = torch.tensor(lq, dtype=torch.float64), torch.tensor(a, dtype=torch.float64)
    m_t, c_t = torch.tensor(m, dtype=torch.float64), torch.tensor(c, dtype=torch.float64)
    loss = torch.where(m_t > 0, f(lp_t, lq_t, a_t), torch.zeros_like(lp_t))
    (grad,) = torch.autograd.grad((c_t * m_t * loss).sum(), lp_t)
    return LossTerms(loss.detach().numpy(), grad.numpy())


# ---------------------------------------------------------------------------------------------
# strategies
# ---------------------------------------------------------------------------------------------


@st.composite
def token_batches(draw: st.DrawFn, max_abs_logp: float = 8.0) -> tuple[Array, ...]:
    """(logp, logp_old, advantages, mask, cotangent); padding holds garbage; some A = 0."""
    pair = draw(rst.logprob_pairs(max_batch=3, max_time=6, max_abs_logp=max_abs_logp))
    shape = pair.mask.shape
    adv = draw(
        hnp.arrays(
            np.float64,
            shape,
            elements=st.one_of(st.just(0.0), st.floats(-4.0, 4.0, allow_subnormal=False)),
        )
    )
    cot = draw(hnp.arrays(np.float64, shape, elements=st.floats(-2.0, 2.0, allow_subnormal=False)))
    garbage = np.where(pair.mask > 0, pair.logp_target, 3.0)
    return garbage, pair.logp_behavior, adv, pair.mask, cot


EPS = st.sampled_from([0.0, 0.1, 0.2, 0.28])
CLAMPS = st.sampled_from([None, 20.0, 1.0])


@st.composite
def ppo_params(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "eps_low": draw(EPS),
        "eps_high": draw(EPS),
        "dual_clip": draw(st.sampled_from([None, 1.5, 3.0])),
        "log_ratio_clamp": draw(CLAMPS),
    }


def _close(found: Array, expected: Array, *, rtol: float = 1e-12, atol: float = 1e-12) -> None:
    np.testing.assert_allclose(found, expected, rtol=rtol, atol=atol)


def _agree(ours: LossTerms, theirs: LossTerms) -> None:
    _close(ours.loss, theirs.loss)
    _close(ours.grad, theirs.grad)


# ---------------------------------------------------------------------------------------------
# (1) exact values on hand-worked tokens
# ---------------------------------------------------------------------------------------------

#: Ratios whose float64 logarithm exponentiates back exactly (checked below).
EXACT_RATIOS = (0.5, 0.75, 0.8, 1.0, 1.2, 1.25, 1.28, 1.5, 2.0, 4.0)


def test_exact_ratios_round_trip() -> None:
    assert all(np.exp(np.log(x)) == x for x in EXACT_RATIOS)


def _frac_ppo(
    rho: Fraction, a: Fraction, lo: Fraction, hi: Fraction, dual: Fraction | None
) -> tuple[Fraction, Fraction]:
    """Exact (loss, ∂loss/∂logp) of PPO-clip by cases (no ratio on a bound)."""
    if a > 0:
        return -a * min(rho, hi), (-a * rho if rho < hi else Fraction(0))
    loss, grad = -a * max(rho, lo), (-a * rho if rho > lo else Fraction(0))
    if dual is not None and loss > -a * dual:
        return -a * dual, Fraction(0)
    return loss, grad


@pytest.mark.parametrize("dual", [None, Fraction(3)])
@pytest.mark.parametrize(
    "rho", [Fraction(1, 2), Fraction(3, 4), Fraction(1), Fraction(3, 2), Fraction(4)]
)
@pytest.mark.parametrize("adv", [Fraction(2), Fraction(-3, 2)])
def test_ppo_exact_values(rho: Fraction, adv: Fraction, dual: Fraction | None) -> None:
    lo, hi = Fraction(4, 5), Fraction(32, 25)  # eps_low 0.2, eps_high 0.28 (clip-higher)
    terms = CL.ppo_clip_loss(
        [[math.log(rho)]],
        [[0.0]],
        [float(adv)],
        eps_low=0.2,
        eps_high=0.28,
        dual_clip=None if dual is None else float(dual),
    )
    loss, grad = _frac_ppo(rho, adv, lo, hi, dual)
    _close(terms.loss, np.array([[float(loss)]]), rtol=1e-15, atol=0.0)
    _close(terms.grad, np.array([[float(grad)]]), rtol=1e-15, atol=0.0)


def test_exact_values_of_the_other_surrogates() -> None:
    lp, lq = np.log([[0.6, 0.1, 0.5]]), np.log([[0.3, 0.2, 0.5]])  # ratios 2, 1/2, 1
    a = np.array([[2.0, -1.0, 3.0]])
    cispo = CL.cispo_loss(lp, lq, a, eps_high=0.25, eps_low=0.2)  # weights 1.25, 0.8, 1
    _close(cispo.grad, np.array([[-2.5, 0.8, -3.0]]), rtol=1e-15, atol=0.0)
    _close(cispo.loss, -np.array([[1.25, 0.8, 1.0]]) * a * lp, rtol=1e-15, atol=0.0)
    upper = CL.cispo_loss(lp, lq, a, eps_high=0.25)  # weights 1.25, 0.5, 1
    _close(upper.grad, np.array([[-2.5, 0.5, -3.0]]), rtol=1e-15, atol=0.0)
    iw = PG.importance_weighted_pg_loss(lp, lq, a)
    _close(iw.loss, np.array([[-4.0, 0.5, -3.0]]), rtol=1e-15, atol=0.0)
    _close(iw.grad, np.array([[-4.0, 0.5, -3.0]]), rtol=1e-15, atol=0.0)
    capped = PG.importance_weighted_pg_loss(lp, lq, a, cap=1.5)
    _close(capped.grad, np.array([[-3.0, 0.5, -3.0]]), rtol=1e-15, atol=0.0)
    _close(capped.loss, -np.array([[1.5, 0.5, 1.0]]) * a * lp, rtol=1e-15, atol=0.0)
    dro = PG.log_ratio_penalty_loss([[-1.0, -3.0]], [[-2.0, -1.0]], [1.0], tau=0.5)
    # loss = -A·l + τ/2·(l - l_old)²: 1 + 0.25, 3 + 1; grad = -A + τ(l - l_old): -0.5, -2
    _close(dro.loss, np.array([[1.25, 4.0]]), rtol=0.0, atol=0.0)
    _close(dro.grad, np.array([[-0.5, -2.0]]), rtol=0.0, atol=0.0)
    rf = PG.reinforce_loss([[-0.5, -2.0]], [[1.5, -2.0]])
    _close(rf.loss, np.array([[0.75, -4.0]]), rtol=0.0, atol=0.0)
    _close(rf.grad, np.array([[-1.5, 2.0]]), rtol=0.0, atol=0.0)
    # SAPO at ratio 1: loss -A·(4/τ)·(1/2), gradient -A.
    sapo = CL.sapo_loss([[0.0, 0.0]], [[0.0, 0.0]], [[2.0, -1.0]], tau_pos=1.0, tau_neg=2.0)
    _close(sapo.loss, np.array([[-4.0, 1.0]]), rtol=1e-15, atol=0.0)
    _close(sapo.grad, np.array([[-2.0, 1.0]]), rtol=1e-15, atol=0.0)


def test_dppo_exact_masks() -> None:
    # p_old = 1/2; p = 0.9 (up 0.4), 0.6 (up 0.1), 0.2 (down 0.3), 0.45 (down 0.05).
    p = np.array([[0.9, 0.6, 0.2, 0.45]])
    lp, lq = np.log(p), np.log(np.full((1, 4), 0.5))
    for a, expected_keep in (([1.0], [0, 1, 1, 1]), ([-1.0], [1, 1, 0, 1])):
        tv = CL.dppo_loss(lp, lq, a, divergence="tv", delta_low=0.2)
        keep = np.array([expected_keep], dtype=float)
        ratios = p / 0.5
        _close(tv.grad, -a[0] * ratios * keep, rtol=1e-15, atol=0.0)
    # binary KL of 0.5 -> 0.9 is 0.5·log(0.5/0.9) + 0.5·log(0.5/0.1) = 0.5108...: above δ = 0.5
    kl = CL.dppo_loss(lp, lq, [1.0], divergence="kl", delta_low=0.5)
    _close(kl.grad, -(p / 0.5) * np.array([[0, 1, 1, 1]]), rtol=1e-15, atol=0.0)
    kept = CL.dppo_loss(lp, lq, [1.0], divergence="kl", delta_low=0.52)
    _close(kept.grad, -(p / 0.5), rtol=1e-15, atol=0.0)
    capped = CL.dppo_loss(lp, lq, [1.0], delta_low=0.5, cap=1.5)
    _close(capped.grad, -np.minimum(p / 0.5, 1.5), rtol=1e-15, atol=0.0)
    ratio = CL.dppo_loss(lp, lq, [1.0], delta_low=0.2, surrogate="ratio")
    _close(ratio.loss, -(p / 0.5) * np.array([[0, 1, 1, 1]]), rtol=1e-15, atol=0.0)


def test_ppo_kinks_follow_torch() -> None:
    # Ratios exactly 1 - eps_low, 1 + eps_high and the dual-clip bound 1.5, with both signs.
    ratios = np.array([[0.8, 1.28, 0.8, 1.28, 1.5, 1.0]])
    adv = np.array([[1.0, 1.0, -1.0, -1.0, -2.0, 1.0]])
    lp, lq = np.log(ratios), np.zeros_like(ratios)
    ones = np.ones_like(ratios)
    ours = CL.ppo_clip_loss(lp, lq, adv, eps_low=0.2, eps_high=0.28, dual_clip=1.5)
    _agree(ours, torch_terms(torch_ppo(0.2, 0.28, 1.5, None), lp, lq, adv, ones, ones))
    # The clip bounds pass the full gradient; the dual-clip tie gives half of -A·ρ.
    _close(ours.grad, np.array([[-0.8, -1.28, 0.8, 1.28, 1.5, -1.0]]), rtol=0.0, atol=0.0)


# ---------------------------------------------------------------------------------------------
# (2) gradients against torch autograd and finite differences
# ---------------------------------------------------------------------------------------------


@given(token_batches(), ppo_params())
def test_ppo_matches_torch(batch: tuple[Array, ...], params: dict[str, Any]) -> None:
    lp, lq, a, m, c = batch
    ours = CL.ppo_clip_loss(lp, lq, a, mask=m, cotangent=c, **params)
    f = torch_ppo(
        params["eps_low"], params["eps_high"], params["dual_clip"], params["log_ratio_clamp"]
    )
    _agree(ours, torch_terms(f, lp, lq, a, m, c))


@given(token_batches(), EPS, st.sampled_from([None, 0.0, 0.2]), CLAMPS)
def test_cispo_matches_torch(
    batch: tuple[Array, ...], eps_high: float, eps_low: float | None, clamp: float | None
) -> None:
    lp, lq, a, m, c = batch
    ours = CL.cispo_loss(
        lp, lq, a, eps_high=eps_high, eps_low=eps_low, log_ratio_clamp=clamp, mask=m, cotangent=c
    )
    _agree(ours, torch_terms(torch_cispo(eps_high, eps_low, clamp), lp, lq, a, m, c))


@given(token_batches(), st.floats(0.1, 5.0), st.floats(0.1, 5.0), CLAMPS)
def test_sapo_matches_torch(
    batch: tuple[Array, ...], tau_pos: float, tau_neg: float, clamp: float | None
) -> None:
    lp, lq, a, m, c = batch
    ours = CL.sapo_loss(
        lp, lq, a, tau_pos=tau_pos, tau_neg=tau_neg, log_ratio_clamp=clamp, mask=m, cotangent=c
    )
    _agree(ours, torch_terms(torch_sapo(tau_pos, tau_neg, clamp), lp, lq, a, m, c))


@given(token_batches(), st.sampled_from([None, 1.0, 2.0]), CLAMPS)
def test_importance_weighted_matches_torch(
    batch: tuple[Array, ...], cap: float | None, clamp: float | None
) -> None:
    lp, lq, a, m, c = batch
    ours = PG.importance_weighted_pg_loss(
        lp, lq, a, cap=cap, log_ratio_clamp=clamp, mask=m, cotangent=c
    )
    _agree(ours, torch_terms(torch_iw(cap, clamp), lp, lq, a, m, c))


@given(token_batches(), st.floats(0.01, 10.0))
def test_dro_and_reinforce_match_torch(batch: tuple[Array, ...], tau: float) -> None:
    lp, lq, a, m, c = batch
    dro = PG.log_ratio_penalty_loss(lp, lq, a, tau=tau, mask=m, cotangent=c)
    _agree(dro, torch_terms(torch_dro(tau), lp, lq, a, m, c))
    rf = PG.reinforce_loss(lp, a, mask=m, cotangent=c)
    _agree(rf, torch_terms(torch_reinforce, lp, lq, a, m, c))


@given(
    token_batches(max_abs_logp=5.0),
    st.sampled_from(["tv", "kl"]),
    st.sampled_from([0.0, 0.05, 0.2]),
    st.sampled_from([0.05, 0.3]),
    st.sampled_from([("log", None), ("log", 3.0), ("ratio", None)]),
    CLAMPS,
)
def test_dppo_matches_torch(
    batch: tuple[Array, ...],
    kind: Literal["tv", "kl"],
    d_low: float,
    d_high: float,
    form_cap: tuple[Literal["log", "ratio"], float | None],
    clamp: float | None,
) -> None:
    lp, lq, a, m, c = batch
    lp = np.where(m > 0, np.minimum(lp, math.log(0.99)), lp)  # away from p = 1 (the 1e-8 guard)
    lq = np.minimum(lq, math.log(0.99))
    form, cap = form_cap
    ours = CL.dppo_loss(
        lp,
        lq,
        a,
        divergence=kind,
        delta_low=d_low,
        delta_high=d_high,
        cap=cap,
        surrogate=form,
        log_ratio_clamp=clamp,
        mask=m,
        cotangent=c,
    )
    _agree(ours, torch_terms(torch_dppo(kind, d_low, d_high, cap, form, clamp), lp, lq, a, m, c))


def _central_difference(
    fn: Callable[[Array], Array], lp: Array, c: Array, h: float = 1e-6
) -> Array:
    out = np.zeros_like(lp)
    for idx in np.ndindex(lp.shape):
        up, down = lp.copy(), lp.copy()
        up[idx] += h
        down[idx] -= h
        out[idx] = float(np.sum(c * fn(up)) - np.sum(c * fn(down))) / (2 * h)
    return out


def _loss_of(case: Callable[[Array], LossTerms]) -> Callable[[Array], Array]:
    return lambda x: case(x).loss


def test_gradients_match_central_differences_away_from_kinks() -> None:
    rng = np.random.default_rng(7)
    lq = rng.uniform(-3.0, -0.1, size=(4, 25))
    lr = rng.uniform(-1.0, 1.0, size=lq.shape)
    bounds = np.log([0.8, 1.28, 1.5])
    lr = np.where(np.min(np.abs(lr[..., None] - bounds), axis=-1) < 1e-3, 0.05, lr)
    lp = np.minimum(lq + lr, -1e-3)
    a = rng.choice([-2.0, -0.5, 0.7, 1.5], size=lq.shape)
    c = rng.uniform(0.1, 1.0, size=lq.shape)
    cases: list[Callable[[Array], LossTerms]] = [
        lambda x: CL.ppo_clip_loss(
            x, lq, a, eps_low=0.2, eps_high=0.28, dual_clip=1.5, cotangent=c
        ),
        lambda x: CL.sapo_loss(x, lq, a, tau_pos=1.0, tau_neg=1.05, cotangent=c),
        lambda x: PG.importance_weighted_pg_loss(x, lq, a, cotangent=c),
        lambda x: PG.log_ratio_penalty_loss(x, lq, a, tau=0.3, cotangent=c),
        lambda x: PG.reinforce_loss(x, a, cotangent=c),
        lambda x: CL.dppo_loss(x, lq, a, delta_low=1.0, surrogate="ratio", cotangent=c),
    ]
    for case in cases:
        fd = _central_difference(_loss_of(case), lp, c)
        np.testing.assert_allclose(case(lp).grad, fd, rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------------------------------------
# (3) properties, each paired with a wrong variant it rejects
# ---------------------------------------------------------------------------------------------

Surrogate = Callable[..., LossTerms]

#: Every surrogate as a function of (logp, logp_old, advantages, mask=...).
SURROGATES: dict[str, Surrogate] = {
    "ppo": lambda lp, lq, a, **k: CL.ppo_clip_loss(lp, lq, a, eps_low=0.2, dual_clip=3.0, **k),
    "ppo_no_eps": lambda lp, lq, a, **k: CL.ppo_clip_loss(lp, lq, a, eps_low=0.0, **k),
    "cispo": lambda lp, lq, a, **k: CL.cispo_loss(lp, lq, a, eps_high=0.28, **k),
    "sapo": lambda lp, lq, a, **k: CL.sapo_loss(lp, lq, a, tau_pos=1.0, tau_neg=1.05, **k),
    "dppo_tv": lambda lp, lq, a, **k: CL.dppo_loss(lp, lq, a, delta_low=0.2, **k),
    "dppo_kl": lambda lp, lq, a, **k: CL.dppo_loss(lp, lq, a, divergence="kl", delta_low=0.0, **k),
    "dppo_ratio": lambda lp, lq, a, **k: CL.dppo_loss(
        lp, lq, a, delta_low=0.0, surrogate="ratio", **k
    ),
    "iw": lambda lp, lq, a, **k: PG.importance_weighted_pg_loss(lp, lq, a, **k),
    "iw_capped": lambda lp, lq, a, **k: PG.importance_weighted_pg_loss(lp, lq, a, cap=2.0, **k),
    "dro": lambda lp, lq, a, **k: PG.log_ratio_penalty_loss(lp, lq, a, tau=0.7, **k),
    "reinforce": lambda lp, lq, a, **k: PG.reinforce_loss(lp, a, **k),
}


def _wrong_unmasked(lp: Array, lq: Array, a: Array, *, mask: Array) -> LossTerms:
    """Wrong: the mask is ignored, so padding contributes (the loss of its garbage values)."""
    return CL.ppo_clip_loss(lp, lq, a, eps_low=0.2)


def _wrong_sapo_unscaled(lp: Array, lq: Array, a: Array, *, mask: Array) -> LossTerms:
    """Wrong: SAPO's gate without the 4/τ factor (slope τ/4 at ratio 1, not 1)."""
    terms = CL.sapo_loss(lp, lq, a, tau_pos=2.0, tau_neg=2.0, mask=mask)
    return LossTerms(terms.loss * 0.5, terms.grad * 0.5)


def check_padding_contributes_nothing(surrogate: Surrogate) -> Callable[[], None]:
    @given(token_batches(max_abs_logp=6.0), st.floats(-50.0, 0.0))
    def prop(batch: tuple[Array, ...], garbage: float) -> None:
        lp, lq, a, m, _ = batch
        terms = surrogate(lp, lq, a, mask=m)
        assert np.all(terms.loss[m == 0] == 0.0)
        assert np.all(terms.grad[m == 0] == 0.0)
        other = surrogate(np.where(m > 0, lp, garbage), np.where(m > 0, lq, 0.0), a, mask=m)
        assert np.array_equal(other.loss, terms.loss)
        assert np.array_equal(other.grad, terms.grad)

    return prop


@pytest.mark.parametrize("name", list(SURROGATES))
def test_padding_contributes_nothing(name: str) -> None:
    run_property(check_padding_contributes_nothing(SURROGATES[name]))


def test_padding_property_rejects_a_loss_that_ignores_the_mask() -> None:
    rejects(check_padding_contributes_nothing(_wrong_unmasked))


def check_on_policy_gradient(surrogate: Surrogate) -> Callable[[], None]:
    @given(token_batches(max_abs_logp=6.0))
    def prop(batch: tuple[Array, ...]) -> None:
        lp, _, a, m, _ = batch
        lp = np.where(m > 0, np.minimum(lp, 0.0), lp)
        terms = surrogate(lp, lp.copy(), a, mask=m)
        expected = np.where(m > 0, -a, 0.0)
        np.testing.assert_allclose(terms.grad, expected, rtol=1e-14, atol=0.0)

    return prop


@pytest.mark.parametrize("name", list(SURROGATES))
def test_on_policy_gradient_is_the_policy_gradient(name: str) -> None:
    run_property(check_on_policy_gradient(SURROGATES[name]))


def test_on_policy_property_rejects_sapo_without_its_scale() -> None:
    rejects(check_on_policy_gradient(_wrong_sapo_unscaled))


PpoGrad = Callable[[Array, Array, Array, float, float], Array]


def _ppo_grad(lp: Array, lq: Array, a: Array, eps_low: float, eps_high: float) -> Array:
    return CL.ppo_clip_loss(lp, lq, a, eps_low=eps_low, eps_high=eps_high).grad


def _wrong_ppo_clipped_on_wrong_side(
    lp: Array, lq: Array, a: Array, eps_low: float, eps_high: float
) -> Array:
    """Wrong: positive advantages clipped at 1 - eps_low, negative ones at 1 + eps_high."""
    rho = np.exp(lp - lq)
    clipped = np.where(a > 0, rho < 1 - eps_low, rho > 1 + eps_high)
    return np.where(clipped, 0.0, -a * rho)


def check_clipped_regions(grad_fn: PpoGrad) -> Callable[[], None]:
    @given(token_batches(max_abs_logp=3.0), EPS, EPS)
    def prop(batch: tuple[Array, ...], eps_low: float, eps_high: float) -> None:
        lp, lq, a, m, _ = batch
        lp, lq, a = lp[m > 0][None, :], lq[m > 0][None, :], a[m > 0][None, :]
        rho = np.exp(lp - lq)
        clipped = ((a > 0) & (rho > 1 + eps_high)) | ((a < 0) & (rho < 1 - eps_low))
        grad = grad_fn(lp, lq, a, eps_low, eps_high)
        assert np.all(grad[clipped] == 0.0)
        np.testing.assert_allclose(grad[~clipped], (-a * rho)[~clipped], rtol=1e-15, atol=0.0)

    return prop


def test_ppo_gradient_is_zero_exactly_in_the_clipped_regions() -> None:
    run_property(check_clipped_regions(_ppo_grad))


def test_clipped_region_property_rejects_a_clip_on_the_wrong_side() -> None:
    rejects(check_clipped_regions(_wrong_ppo_clipped_on_wrong_side))


DualFn = Callable[[Array, Array, Array, float], LossTerms]

HUGE = st.sampled_from([-1000.0, -100.0, 100.0, 1000.0])


def _ppo_dual(lp: Array, lq: Array, a: Array, c: float) -> LossTerms:
    return CL.ppo_clip_loss(lp, lq, a, eps_low=0.2, eps_high=0.28, dual_clip=c)


def _wrong_dual_on_every_sign(lp: Array, lq: Array, a: Array, c: float) -> LossTerms:
    """Wrong: min(loss, -c·A) at every token, positive advantages included."""
    right = _ppo_dual(lp, lq, a, c)
    floor = -c * a
    return LossTerms(np.minimum(right.loss, floor), np.where(right.loss > floor, 0.0, right.grad))


def check_dual_clip(fn: DualFn) -> Callable[[], None]:
    @given(token_batches(max_abs_logp=4.0), st.sampled_from([1.5, 3.0, 10.0]), HUGE)
    def prop(batch: tuple[Array, ...], c: float, huge: float) -> None:
        lp, lq, a, m, _ = batch
        lp, lq, a = lp[m > 0][None, :], lq[m > 0][None, :], a[m > 0][None, :]
        lp = np.concatenate([lp, [[huge, huge]]], axis=1)
        lq = np.concatenate([lq, [[0.0, 0.0]]], axis=1)
        a = np.concatenate([a, [[-1.0, 1.0]]], axis=1)
        dual = fn(lp, lq, a, c)
        assert np.all(np.isfinite(dual.loss))
        assert np.all(np.isfinite(dual.grad))
        neg = a < 0
        assert np.all(dual.loss[neg] <= (-c * a)[neg])
        pos = a >= 0
        plain = CL.ppo_clip_loss(
            lp[pos][None, :], lq[pos][None, :], a[pos][None, :], eps_low=0.2, eps_high=0.28
        )
        assert np.array_equal(dual.loss[pos], plain.loss[0])
        assert np.array_equal(dual.grad[pos], plain.grad[0])

    return prop


def test_dual_clip_bounds_negative_advantages_and_leaves_the_rest() -> None:
    run_property(check_dual_clip(_ppo_dual))


def test_dual_clip_property_rejects_a_dual_clip_on_positive_advantages() -> None:
    rejects(check_dual_clip(_wrong_dual_on_every_sign))


CispoGrad = Callable[[Array, Array, Array], Array]


def _cispo_grad(lp: Array, lq: Array, a: Array) -> Array:
    return CL.cispo_loss(lp, lq, a, eps_high=0.28, eps_low=0.2).grad


def _wrong_cispo_without_stop_gradient(lp: Array, lq: Array, a: Array) -> Array:
    """Wrong: autograd through the weight, -A·(w + logp·∂w/∂logp)."""
    lp_t = torch.tensor(lp, requires_grad=True)
    ratio = torch.exp(lp_t - torch.tensor(lq))
    loss = -torch.clamp(ratio, 0.8, 1.28) * torch.tensor(a) * lp_t
    (grad,) = torch.autograd.grad(loss.sum(), lp_t)
    return grad.numpy()


def check_cispo_stop_gradient(grad_fn: CispoGrad) -> Callable[[], None]:
    @given(token_batches(max_abs_logp=3.0))
    def prop(batch: tuple[Array, ...]) -> None:
        lp, lq, a, m, _ = batch
        lp, lq, a = lp[m > 0][None, :], lq[m > 0][None, :], a[m > 0][None, :]
        w = np.clip(np.exp(lp - lq), 0.8, 1.28)
        np.testing.assert_allclose(grad_fn(lp, lq, a), -w * a, rtol=1e-15, atol=0.0)

    return prop


def test_cispo_gradient_is_the_clipped_weight_policy_gradient() -> None:
    run_property(check_cispo_stop_gradient(_cispo_grad))


def test_cispo_property_rejects_a_missing_stop_gradient() -> None:
    rejects(check_cispo_stop_gradient(_wrong_cispo_without_stop_gradient))


ClampedFn = Callable[[Array, Array, Array], LossTerms]


def _ppo_clamped(lp: Array, lq: Array, a: Array) -> LossTerms:
    return CL.ppo_clip_loss(lp, lq, a, eps_low=0.2, log_ratio_clamp=20.0)


def _wrong_clamp_after_exp(lp: Array, lq: Array, a: Array) -> LossTerms:
    """Wrong: the ratio is clamped to [e^-20, e^20] after exp instead of the log-ratio before."""
    lp_t = torch.tensor(lp, requires_grad=True)
    a_t = torch.tensor(a)
    ratio = torch.clamp(torch.exp(lp_t - torch.tensor(lq)), math.exp(-20.0), math.exp(20.0))
    loss = torch.maximum(-a_t * ratio, -a_t * torch.clamp(ratio, 0.8, 1.2))
    (grad,) = torch.autograd.grad(loss.sum(), lp_t)
    return LossTerms(loss.detach().numpy(), grad.numpy())


def check_huge_log_ratios_with_clamp(fn: ClampedFn) -> Callable[[], None]:
    @given(st.lists(HUGE, min_size=1, max_size=6), st.sampled_from([-1.0, 1.0]))
    def prop(log_ratios: list[float], sign: float) -> None:
        lr = np.array([log_ratios])
        a = np.full_like(lr, sign)
        terms = fn(lr, np.zeros_like(lr), a)
        at_bound = fn(np.clip(lr, -20.0, 20.0), np.zeros_like(lr), a)
        assert np.all(np.isfinite(terms.loss))
        assert np.all(np.isfinite(terms.grad))
        assert np.array_equal(terms.loss, at_bound.loss)
        assert np.all(terms.grad == 0.0)  # outside the clamp no gradient flows

    return prop


def test_huge_log_ratios_stay_finite_with_the_clamp_before_exp() -> None:
    run_property(check_huge_log_ratios_with_clamp(_ppo_clamped))


def test_huge_log_ratio_property_rejects_a_clamp_after_exp() -> None:
    rejects(check_huge_log_ratios_with_clamp(_wrong_clamp_after_exp))


@pytest.mark.parametrize("huge", [-1000.0, -100.0, 100.0, 1000.0])
def test_huge_log_ratios_without_a_clamp_stay_finite_where_bounded(huge: float) -> None:
    lp, lq = np.array([[huge, huge]]), np.zeros((1, 2))
    a = np.array([[1.0, -1.0]])
    bounded = [
        CL.ppo_clip_loss(lp, lq, a, eps_low=0.2, dual_clip=3.0),
        CL.cispo_loss(lp, lq, a, eps_high=0.28),
        CL.sapo_loss(lp, lq, a, tau_pos=1.0, tau_neg=1.05),
        PG.log_ratio_penalty_loss(lp, lq, a, tau=0.5),
        PG.importance_weighted_pg_loss(lp, lq, a, cap=2.0),
    ]
    for terms in bounded:
        assert np.all(np.isfinite(terms.loss))
        assert np.all(np.isfinite(terms.grad))
    ppo = bounded[0]
    if huge > 0:  # A > 0 clipped at 1 + eps; A < 0 held at the dual-clip bound 3
        _close(ppo.loss, np.array([[-1.2, 3.0]]), rtol=1e-15, atol=0.0)
        assert np.all(ppo.grad == 0.0)


# ---------------------------------------------------------------------------------------------
# (4) validation: every rule just inside and just outside
# ---------------------------------------------------------------------------------------------

LP, LQ, ADV = [[-1.0, -0.5]], [[-1.0, -0.7]], [1.0]

Call = Callable[..., LossTerms]

#: Arguments each function needs besides the one a rule varies.
BASE: dict[Call, dict[str, Any]] = {
    CL.ppo_clip_loss: {},
    CL.cispo_loss: {"eps_high": 0.2},
    CL.sapo_loss: {"tau_pos": 1.0, "tau_neg": 1.0},
    CL.dppo_loss: {"delta_low": 0.1},
    PG.importance_weighted_pg_loss: {},
    PG.log_ratio_penalty_loss: {"tau": 1.0},
}

#: (function, parameter, a value just inside, one just outside, the rule the refusal states).
RULES: list[tuple[Call, str, Any, Any, str]] = [
    (CL.ppo_clip_loss, "eps_low", 0.0, -1e-9, "be >= 0"),
    (CL.ppo_clip_loss, "eps_low", 0.999, 1.0, "be < 1"),
    (CL.ppo_clip_loss, "eps_high", 0.0, -0.1, "be >= 0"),
    (CL.ppo_clip_loss, "dual_clip", 1.0001, 1.0, "be > 1"),
    (CL.ppo_clip_loss, "log_ratio_clamp", 1e-9, 0.0, "be > 0"),
    (CL.cispo_loss, "eps_high", 0.0, -0.1, "be >= 0"),
    (CL.cispo_loss, "eps_low", 0.999, 1.0, "be < 1"),
    (CL.sapo_loss, "tau_pos", 1e-9, 0.0, "be > 0"),
    (CL.sapo_loss, "tau_neg", 1e-9, -1.0, "be > 0"),
    (CL.dppo_loss, "divergence", "kl", "js", "be one of 'tv', 'kl'"),
    (CL.dppo_loss, "surrogate", "ratio", "logp", "be one of 'log', 'ratio'"),
    (CL.dppo_loss, "delta_low", 0.0, -0.1, "be >= 0"),
    (CL.dppo_loss, "delta_high", 0.0, -0.1, "be >= 0"),
    (CL.dppo_loss, "cap", 1.0, 0.99, "be >= 1"),
    (PG.importance_weighted_pg_loss, "cap", 1.0, 0.99, "be >= 1"),
    (PG.importance_weighted_pg_loss, "log_ratio_clamp", 1e-9, -1.0, "be > 0"),
    (PG.log_ratio_penalty_loss, "tau", 1e-9, 0.0, "be > 0"),
]


@pytest.mark.parametrize("rule", RULES, ids=[f"{r[0].__name__}-{r[1]}-{r[3]}" for r in RULES])
def test_parameter_rules(rule: tuple[Call, str, Any, Any, str]) -> None:
    fn, name, inside, outside, message = rule
    fn(LP, LQ, ADV, **{**BASE[fn], name: inside})
    with pytest.raises(ValueError, match=f"{name} must {message}"):
        fn(LP, LQ, ADV, **{**BASE[fn], name: outside})


def test_dppo_refuses_a_cap_with_the_ratio_surrogate() -> None:
    CL.dppo_loss(LP, LQ, ADV, delta_low=0.1, surrogate="ratio")
    with pytest.raises(ValueError, match='cap must be None with surrogate="ratio"'):
        CL.dppo_loss(LP, LQ, ADV, delta_low=0.1, surrogate="ratio", cap=2.0)


def test_dppo_refuses_positive_log_probabilities_at_real_tokens_only() -> None:
    CL.dppo_loss([[0.0, 5.0]], [[-1.0, 3.0]], [1.0], delta_low=0.1, mask=[[1, 0]])
    with pytest.raises(ValueError, match=r"logp must be <= 0 at real tokens.*Entry 1 is 1e-09"):
        CL.dppo_loss([[0.0, 1e-9]], [[-1.0, -1.0]], [1.0], delta_low=0.1)
    with pytest.raises(ValueError, match=r"logp_old must be <= 0 at real tokens"):
        CL.dppo_loss([[-1.0, -1.0]], [[-1.0, 1e-9]], [1.0], delta_low=0.1)


def test_an_overflowing_loss_is_refused_with_the_fix() -> None:
    a = [[-1.0]]
    CL.ppo_clip_loss([[100.0]], [[0.0]], a)  # e^100 is finite
    with pytest.raises(ValueError, match=r"Token \(b=0, t=0\) overflows.*log_ratio_clamp"):
        CL.ppo_clip_loss([[1000.0]], [[0.0]], a)
    with pytest.raises(ValueError, match=r"Token \(b=0, t=0\) overflows"):
        PG.importance_weighted_pg_loss([[1000.0]], [[0.0]], [1.0])
    with pytest.raises(ValueError, match=r"Token \(b=0, t=0\) overflows"):
        CL.dppo_loss([[0.0]], [[-800.0]], [1.0], delta_low=1.0, surrogate="ratio")
    # at padding the same token is harmless
    CL.ppo_clip_loss([[1000.0, 0.0]], [[0.0, 0.0]], [[-1.0, -1.0]], mask=[[0, 1]])


def test_an_overflowing_cotangent_is_refused() -> None:
    PG.reinforce_loss([[-1.0]], [2.0], cotangent=[[1e307]])
    with pytest.raises(ValueError, match=r"cotangent must keep the gradient"):
        PG.reinforce_loss([[-1.0]], [1e300], cotangent=[[1e300]])


@pytest.mark.parametrize("name", ["ppo", "cispo", "sapo", "dppo_tv", "iw", "dro", "reinforce"])
def test_array_rules(name: str) -> None:
    fn = SURROGATES[name]
    fn(LP, LQ, ADV, mask=[[1, 0]])
    with pytest.raises(ValueError, match=r"logp must contain only finite values"):
        fn([[-1.0, math.nan]], LQ, ADV)
    with pytest.raises(ValueError, match=r"advantages must have one entry per sequence"):
        fn(LP, LQ, [1.0, 2.0])
    with pytest.raises(ValueError, match=r"mask must hold only 0 and 1"):
        fn(LP, LQ, ADV, mask=[[1, 0.5]])
    with pytest.raises(ValueError, match=r"cotangent and mask must have the same shape"):
        fn(LP, LQ, ADV, cotangent=[[1.0]])
    if name != "reinforce":
        with pytest.raises(ValueError, match=r"logp_old and logp must have the same shape"):
            fn(LP, [[-1.0]], ADV)


def test_dppo_keeps_a_token_exactly_at_its_threshold() -> None:
    # p - p_old = 0.75 - 0.5 = 0.25 exactly in float64 (both probabilities round-trip through log).
    lp, lq = np.log([[0.75, 0.25]]), np.log([[0.5, 0.5]])
    adv = np.array([[1.0, -1.0]])
    at = CL.dppo_loss(lp, lq, adv, delta_low=0.25)
    _close(at.grad, np.array([[-1.5, 0.5]]), rtol=1e-15, atol=0.0)
    below = CL.dppo_loss(lp, lq, adv, delta_low=math.nextafter(0.25, 0.0))
    assert np.all(below.grad == 0.0)


@pytest.mark.parametrize("huge", [-1000.0, -100.0, 100.0, 1000.0])
def test_huge_log_ratios_with_the_clamp_match_torch(huge: float) -> None:
    lp, lq = np.array([[huge, huge, 0.5]]), np.array([[0.0, 0.0, 0.0]])
    a, ones = np.array([[1.0, -1.0, -2.0]]), np.ones((1, 3))
    pairs: list[tuple[LossTerms, TorchLoss]] = [
        (
            CL.ppo_clip_loss(lp, lq, a, eps_low=0.2, log_ratio_clamp=20.0),
            torch_ppo(0.2, 0.2, None, 20.0),
        ),
        (
            CL.cispo_loss(lp, lq, a, eps_high=0.28, eps_low=0.2, log_ratio_clamp=20.0),
            torch_cispo(0.28, 0.2, 20.0),
        ),
        (
            CL.sapo_loss(lp, lq, a, tau_pos=1.0, tau_neg=1.05, log_ratio_clamp=20.0),
            torch_sapo(1.0, 1.05, 20.0),
        ),
        (PG.importance_weighted_pg_loss(lp, lq, a, log_ratio_clamp=20.0), torch_iw(None, 20.0)),
    ]
    for ours, formula in pairs:
        _agree(ours, torch_terms(formula, lp, lq, a, ones, ones))
