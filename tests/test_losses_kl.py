"""Tests of refimpl.losses.kl: the KL estimators and their importance-weighted form.

Values on hand-worked cases and by exact enumeration; gradients against torch autograd (float64) on
the formulas written here in torch (verl's straight-through ``+`` with ``.detach()``), and against
central finite differences away from the kinks. Each property runs on refimpl and on a wrong
variant that it must reject.
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

from refimpl.losses import LossTerms
from refimpl.losses.kl import importance_weighted_kl, kl_penalty
from refimpl.testing import strategies as rst

Array = NDArray[np.float64]
Bounds = tuple[float | None, float | None]
RTOL, ATOL = 1e-12, 1e-12
BASE = ("k1", "abs", "k2", "k3")
ESTIMATORS = (*BASE, *(f"{e}+" for e in BASE))
WEIGHTINGS = ("detached", "differentiable", "gradient_only")


class Case(NamedTuple):
    logp: Array
    logp_ref: Array
    logp_behavior: Array
    mask: Array
    cot: Array


@st.composite
def cases(draw: st.DrawFn, *, max_abs_logp: float = 4.0) -> Case:
    pair = draw(rst.logprob_pairs(max_batch=3, max_time=5, max_abs_logp=max_abs_logp))
    shape = pair.mask.shape
    behavior = draw(hnp.arrays(np.float64, shape, elements=st.floats(-max_abs_logp, 0.0)))
    cot = draw(hnp.arrays(np.float64, shape, elements=st.floats(-2.0, 2.0)))
    return Case(pair.logp_target, pair.logp_behavior, behavior, pair.mask, cot)


CLAMPS: st.SearchStrategy[Bounds | None] = st.one_of(
    st.none(),
    st.tuples(st.floats(-3.0, 0.5), st.floats(0.6, 3.0)).map(lambda b: (b[0], b[1])),
    st.just((None, 2.0)),
    st.just((-1.0, None)),
)


# ---------------------------------------------------------------------------------------------
# independent torch implementation (float64)
# ---------------------------------------------------------------------------------------------


def _t(x: Array) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float64)


def _torch_clamp(x: torch.Tensor, bounds: Bounds | None) -> torch.Tensor:
    if bounds is None:
        return x
    return torch.clamp(x, min=bounds[0], max=bounds[1])


def torch_estimate(
    logp: torch.Tensor,
    ref: torch.Tensor,
    estimator: str,
    clamp: Bounds | None,
    log_clamp: Bounds | None,
) -> torch.Tensor:
    """verl's kl_penalty with our clamps: clamp the log-ratio, estimate, clamp the value, '+'."""
    base = estimator.rstrip("+")
    d = _torch_clamp(logp - ref, log_clamp)
    if base == "k1":
        value = d
    elif base == "abs":
        value = d.abs()
    elif base == "k2":
        value = 0.5 * d.square()
    else:
        value = torch.exp(-d) + d - 1
    value = _torch_clamp(value, clamp)
    if not estimator.endswith("+"):
        return value
    backward = 0.5 * (logp - ref).square()
    return backward - backward.detach() + value.detach()


def torch_kl(
    c: Case, estimator: str, clamp: Bounds | None = None, log_clamp: Bounds | None = None
) -> tuple[Array, Array]:
    logp = _t(c.logp).requires_grad_(True)
    mask = _t(c.mask)
    loss = torch_estimate(logp, _t(c.logp_ref), estimator, clamp, log_clamp) * mask
    (grad,) = torch.autograd.grad((loss * _t(c.cot)).sum(), logp)
    return loss.detach().numpy(), grad.numpy()


def torch_weighted(
    c: Case, estimator: str, weighting: str, cap: float | None = None
) -> tuple[Array, Array]:
    logp = _t(c.logp).requires_grad_(True)
    mask = _t(c.mask)
    k = torch_estimate(logp, _t(c.logp_ref), estimator, None, None)
    w = torch.exp(logp - _t(c.logp_behavior))
    if cap is not None:
        w = torch.clamp(w, max=cap)
    if weighting == "detached":
        loss = w.detach() * k
    elif weighting == "differentiable":
        loss = w * k
    else:  # OpenRLHF's unbiased_gradient: value k, gradient sg[w]·∂k
        loss = k.detach() + w.detach() * k - (w.detach() * k).detach()
    loss = loss * mask
    (grad,) = torch.autograd.grad((loss * _t(c.cot)).sum(), logp)
    return loss.detach().numpy(), grad.numpy()


def _close(found: Array, expected: Array) -> None:
    np.testing.assert_allclose(found, expected, rtol=RTOL, atol=ATOL)


# ---------------------------------------------------------------------------------------------
# (1) exact values
# ---------------------------------------------------------------------------------------------


def test_hand_worked_values() -> None:
    d = np.array([[math.log(2.0), -math.log(2.0), 0.0]])
    zero = np.zeros_like(d)
    ln2 = math.log(2.0)
    expected = {
        "k1": ([ln2, -ln2, 0.0], [1.0, 1.0, 1.0]),
        "abs": ([ln2, ln2, 0.0], [1.0, -1.0, 0.0]),
        "k2": ([ln2**2 / 2, ln2**2 / 2, 0.0], [ln2, -ln2, 0.0]),
        "k3": ([ln2 - 0.5, 1.0 - ln2, 0.0], [0.5, -1.0, 0.0]),
        "k3+": ([ln2 - 0.5, 1.0 - ln2, 0.0], [ln2, -ln2, 0.0]),
        "kl": ([ln2, -ln2, 0.0], [1.0, 1.0, 1.0]),
        "mse": ([ln2**2 / 2, ln2**2 / 2, 0.0], [ln2, -ln2, 0.0]),
    }
    for est, (value, grad) in expected.items():
        t = kl_penalty(d, zero, estimator=est)
        np.testing.assert_allclose(t.loss, [value], rtol=1e-15, atol=1e-300)
        np.testing.assert_allclose(t.grad, [grad], rtol=1e-15, atol=1e-300)


def test_k3_is_accurate_near_zero() -> None:
    """k3(d) = d²/2 − d³/6 + …: the series keeps full relative accuracy where the formula cancels."""
    for d in (1e-3, -1e-5, 1e-8, 0.0999, -0.0999, 0.5, -0.99, 1.0, -1.0, 2.0, -2.0):
        exact = sum(Fraction(-d) ** n / math.factorial(n) for n in range(2, 40))
        found = float(kl_penalty([[d]], [[0.0]], estimator="k3").loss[0, 0])
        assert abs(found - float(exact)) <= 1e-15 * float(exact)


def test_low_var_kl_is_verls_clamped_k3() -> None:
    d = np.array([[-25.0, -2.0, 0.5, 3.0, 25.0]])
    t = kl_penalty(d, np.zeros_like(d), estimator="low_var_kl")
    same = kl_penalty(d, np.zeros_like(d), estimator="k3", clamp=10.0, log_ratio_clamp=20.0)
    _close(t.loss, same.loss)
    _close(t.grad, same.grad)
    assert t.loss[0, 0] == 10.0  # value clamp
    assert t.grad[0, 0] == 0.0
    assert t.loss[0, 4] == 10.0  # k3(20) = 19 + e^-20: the value clamp decides
    assert t.grad[0, 4] == 0.0
    np.testing.assert_allclose(t.grad[0, 1:4], 1 - np.exp(-d[0, 1:4]), rtol=1e-15)
    plus = kl_penalty(d, np.zeros_like(d), estimator="low_var_kl+")
    _close(plus.loss, t.loss)
    _close(plus.grad, d)  # k2's gradient on the unclamped log-ratio


def test_exact_expectations_by_enumeration() -> None:
    """Σ_a π_a k3(a) = KL(π‖ref) and Σ_a μ_a w_a k(a) = KL(π‖ref) with Fraction probabilities."""
    pi = [Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)]
    ref = [Fraction(1, 5), Fraction(2, 5), Fraction(2, 5)]
    mu = [Fraction(1, 4), Fraction(1, 4), Fraction(1, 2)]
    kl = sum(float(p) * math.log(p / q) for p, q in zip(pi, ref, strict=True))
    col = np.log(np.array([[float(x)] for x in pi]))
    col_ref = np.log(np.array([[float(x)] for x in ref]))
    col_mu = np.log(np.array([[float(x)] for x in mu]))
    for est in ("k1", "k3", "k3+"):
        on = kl_penalty(col, col_ref, estimator=est).loss[:, 0]
        assert abs(sum(float(p) * v for p, v in zip(pi, on, strict=True)) - kl) < 1e-15
        off = importance_weighted_kl(col, col_ref, col_mu, estimator=est).loss[:, 0]
        assert abs(sum(float(m) * v for m, v in zip(mu, off, strict=True)) - kl) < 1e-15


# ---------------------------------------------------------------------------------------------
# (2) gradients against torch autograd and finite differences
# ---------------------------------------------------------------------------------------------


@given(cases(), st.sampled_from(ESTIMATORS), CLAMPS, CLAMPS)
def test_kl_penalty_matches_torch(
    c: Case, estimator: str, clamp: Bounds | None, log_clamp: Bounds | None
) -> None:
    terms = kl_penalty(
        c.logp,
        c.logp_ref,
        estimator=estimator,
        clamp=clamp,
        log_ratio_clamp=log_clamp,
        mask=c.mask,
        cotangent=c.cot,
    )
    loss, grad = torch_kl(c, estimator, clamp, log_clamp)
    _close(terms.loss, loss)
    _close(terms.grad, grad)


@given(
    cases(),
    st.sampled_from(ESTIMATORS),
    st.sampled_from(WEIGHTINGS),
    st.one_of(st.none(), st.floats(1.0, 5.0)),
)
def test_importance_weighted_kl_matches_torch(
    c: Case, estimator: str, weighting: Any, cap: float | None
) -> None:
    terms = importance_weighted_kl(
        c.logp,
        c.logp_ref,
        c.logp_behavior,
        estimator=estimator,
        weighting=weighting,
        weight_cap=cap,
        mask=c.mask,
        cotangent=c.cot,
    )
    loss, grad = torch_weighted(c, estimator, weighting, cap)
    _close(terms.loss, loss)
    _close(terms.grad, grad)


def test_openrlhf_unbiased_gradient_recipe() -> None:
    """OpenRLHF 0.11.2 compute_approx_kl(k3, unbiased_gradient=True), transcribed in torch."""
    rng = np.random.default_rng(0)
    lp, ref, old = (rng.normal(size=(2, 5)) * 4 - 3 for _ in range(3))
    logp = _t(lp).requires_grad_(True)
    r = logp - _t(ref)
    value = (torch.exp(-r.clamp(min=-10)) - 1 + r.clamp(min=-10)).clamp(min=-10, max=10)
    w = torch.exp(logp - _t(old)).clamp(max=10.0).detach()
    surrogate = w * r.square() / 2
    out = value.detach() + surrogate - surrogate.detach()
    (grad,) = torch.autograd.grad(out.sum(), logp)
    terms = importance_weighted_kl(
        lp,
        ref,
        old,
        estimator="k3+",
        weighting="gradient_only",
        weight_cap=10.0,
        clamp=10.0,
        log_ratio_clamp=(-10.0, None),
    )
    _close(terms.loss, out.detach().numpy())
    _close(terms.grad, grad.numpy())


def _finite_difference(fn: Callable[[Array], LossTerms], x: Array, cot: Array) -> Array:
    h = 1e-6
    out = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        up, down = x.copy(), x.copy()
        up[idx] += h
        down[idx] -= h
        out[idx] = float(np.sum(cot * (fn(up).loss - fn(down).loss))) / (2 * h)
    return out


@given(cases(), st.sampled_from(BASE))
def test_gradient_matches_finite_differences(c: Case, estimator: str) -> None:
    d = c.logp - c.logp_ref
    if estimator == "abs" and np.any((np.abs(d) < 1e-3) & (c.mask > 0)):
        return  # the kink of |d|
    fd = _finite_difference(
        lambda x: kl_penalty(x, c.logp_ref, estimator=estimator, mask=c.mask), c.logp, c.cot
    )
    terms = kl_penalty(c.logp, c.logp_ref, estimator=estimator, mask=c.mask, cotangent=c.cot)
    np.testing.assert_allclose(terms.grad, fd, rtol=1e-5, atol=1e-6)
    for weighting in ("detached", "differentiable"):
        if weighting == "differentiable":
            fd = _finite_difference(
                lambda x: importance_weighted_kl(
                    x,
                    c.logp_ref,
                    c.logp_behavior,
                    estimator=estimator,
                    weighting="differentiable",
                    mask=c.mask,
                ),
                c.logp,
                c.cot,
            )
            terms = importance_weighted_kl(
                c.logp,
                c.logp_ref,
                c.logp_behavior,
                estimator=estimator,
                weighting="differentiable",
                mask=c.mask,
                cotangent=c.cot,
            )
            np.testing.assert_allclose(terms.grad, fd, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# (3) properties, each rejected on a wrong variant
# ---------------------------------------------------------------------------------------------

KL = Callable[..., LossTerms]


def k3_plus_as_plain_k3(logp: Array, ref: Array, **kw: Any) -> LossTerms:
    """Wrong: "k3+" computed as plain k3 (same value, k3's gradient)."""
    return kl_penalty(logp, ref, **{**kw, "estimator": "k3"})


def check_straight_through(fn: KL) -> None:
    """``k3+`` has the value of k3 and the gradient c·d of k2."""

    @given(cases())
    def prop(c: Case) -> None:
        t = fn(c.logp, c.logp_ref, estimator="k3+", mask=c.mask, cotangent=c.cot)
        plain = kl_penalty(c.logp, c.logp_ref, estimator="k3", mask=c.mask)
        np.testing.assert_allclose(t.loss, plain.loss, rtol=1e-15, atol=0)
        expected = c.cot * c.mask * (c.logp - c.logp_ref)
        np.testing.assert_allclose(t.grad, expected, rtol=1e-12, atol=1e-15)

    prop()


def test_k3_plus_has_k3_value_and_k2_gradient() -> None:
    run_property(lambda: check_straight_through(kl_penalty))
    rejects(check_straight_through, k3_plus_as_plain_k3)


def k3_reversed(logp: Array, ref: Array, **kw: Any) -> LossTerms:
    """Wrong: k3 of the other direction, exp(d) − d − 1 (estimates KL(ref‖π) under ref)."""
    return kl_penalty(ref, logp, **kw)


def check_k3_is_unbiased_on_policy(fn: KL) -> None:
    """Σ_a π_a k3(a) = KL(π‖ref) exactly, for random rational π and ref over 4 tokens."""

    @given(
        st.lists(st.integers(1, 30), min_size=4, max_size=4),
        st.lists(st.integers(1, 30), min_size=4, max_size=4),
    )
    def prop(p_raw: list[int], q_raw: list[int]) -> None:
        pi = [Fraction(x, sum(p_raw)) for x in p_raw]
        ref = [Fraction(x, sum(q_raw)) for x in q_raw]
        kl = sum(float(p) * math.log(p / q) for p, q in zip(pi, ref, strict=True))
        lp = np.log([[float(x)] for x in pi])
        lr = np.log([[float(x)] for x in ref])
        est = fn(lp, lr, estimator="k3").loss[:, 0]
        found = sum(float(p) * v for p, v in zip(pi, est, strict=True))
        assert abs(found - kl) <= 1e-14 + 1e-13 * kl

    prop()


def test_k3_direction_is_reverse_kl_under_pi() -> None:
    run_property(lambda: check_k3_is_unbiased_on_policy(kl_penalty))
    rejects(check_k3_is_unbiased_on_policy, k3_reversed)


def clamp_after_exp(logp: Array, ref: Array, **kw: Any) -> LossTerms:
    """Wrong: the clamp applied to exp(-d) only (after exp); the linear term still moves."""
    bounds = kw.pop("log_ratio_clamp")
    d = np.asarray(logp) - np.asarray(ref)
    rho = np.clip(np.exp(-d), math.exp(-bounds[1]), math.exp(-bounds[0]))
    return LossTerms(rho + d - 1, (1 - rho) * np.ones_like(d))


def check_log_ratio_clamp(fn: KL) -> None:
    """Beyond the log-ratio clamp, k3 is k3 at the bound and has gradient 0."""

    @given(st.floats(3.0, 30.0), st.sampled_from([-1.0, 1.0]))
    def prop(excess: float, side: float) -> None:
        d = np.array([[side * (2.0 + excess)]])
        t = fn(d, np.zeros_like(d), estimator="k3", log_ratio_clamp=(-2.0, 2.0))
        bound = side * 2.0
        np.testing.assert_allclose(t.loss[0, 0], math.exp(-bound) + bound - 1, rtol=1e-14)
        assert t.grad[0, 0] == 0.0

    prop()


def test_log_ratio_clamp_is_before_exp() -> None:
    run_property(lambda: check_log_ratio_clamp(kl_penalty))
    rejects(check_log_ratio_clamp, clamp_after_exp)


def check_padding_is_inert(fn: KL) -> None:
    @given(cases(), st.floats(-40.0, 40.0), st.sampled_from(ESTIMATORS))
    def prop(c: Case, junk: float, est: str) -> None:
        pad = c.mask == 0
        first = fn(c.logp, c.logp_ref, estimator=est, mask=c.mask, cotangent=c.cot)
        second = fn(
            np.where(pad, junk, c.logp),
            np.where(pad, -junk, c.logp_ref),
            estimator=est,
            mask=c.mask,
            cotangent=np.where(pad, 5.0, c.cot),
        )
        assert np.all(second.loss[pad] == 0.0)
        assert np.all(second.grad[pad] == 0.0)
        np.testing.assert_allclose(second.loss, first.loss, rtol=1e-15, atol=0)
        np.testing.assert_allclose(second.grad, first.grad, rtol=1e-15, atol=0)

    prop()


def kl_ignoring_mask(logp: Array, ref: Array, **kw: Any) -> LossTerms:
    """Wrong: the mask is not applied."""
    kw.pop("mask")
    return kl_penalty(logp, ref, **kw)


def test_padding_contributes_nothing() -> None:
    run_property(lambda: check_padding_is_inert(kl_penalty))
    rejects(check_padding_is_inert, kl_ignoring_mask)


def check_detached_on_policy_is_plain(weighting: str) -> None:
    """On-policy (behaviour = current, w = 1) the detached weighted KL equals kl_penalty."""

    @given(cases(), st.sampled_from(ESTIMATORS))
    def prop(c: Case, est: str) -> None:
        plain = kl_penalty(c.logp, c.logp_ref, estimator=est, mask=c.mask, cotangent=c.cot)
        w = importance_weighted_kl(
            c.logp,
            c.logp_ref,
            c.logp,
            estimator=est,
            weighting=weighting,  # type: ignore[arg-type]
            mask=c.mask,
            cotangent=c.cot,
        )
        np.testing.assert_allclose(w.loss, plain.loss, rtol=1e-15, atol=0)
        np.testing.assert_allclose(w.grad, plain.grad, rtol=1e-15, atol=0)

    prop()


def test_on_policy_weighting_is_the_plain_estimator() -> None:
    run_property(lambda: check_detached_on_policy_is_plain("detached"))
    run_property(lambda: check_detached_on_policy_is_plain("gradient_only"))
    # TRL's differentiable ratio changes the gradient even where its value is 1:
    rejects(check_detached_on_policy_is_plain, "differentiable")


# ---------------------------------------------------------------------------------------------
# (4) validation: each rule just inside and just outside
# ---------------------------------------------------------------------------------------------

Z = np.zeros((2, 3))


def test_unknown_estimator_is_refused() -> None:
    kl_penalty(Z, Z, estimator="k2+")
    with pytest.raises(
        ValueError, match=r"estimator must be one of 'k1', 'abs'.*got estimator='k4'"
    ):
        kl_penalty(Z, Z, estimator="k4")
    with pytest.raises(ValueError, match=r"estimator must be one of"):
        importance_weighted_kl(Z, Z, Z, estimator="full")


def test_clamp_must_be_positive_or_an_ordered_pair() -> None:
    kl_penalty(Z, Z, estimator="k3", clamp=1e-9)
    with pytest.raises(ValueError, match=r"clamp must be > 0 \(value clamp"):
        kl_penalty(Z, Z, estimator="k3", clamp=0.0)
    kl_penalty(Z, Z, estimator="k3", clamp=(1.0, 1.0))
    d = np.array([[-3.0, 0.5, 2.5]])
    as_list = kl_penalty(d, 0 * d, estimator="k3", clamp=[0.1, 2.0])  # type: ignore[arg-type]
    as_tuple = kl_penalty(d, 0 * d, estimator="k3", clamp=(0.1, 2.0))
    _close(as_list.loss, as_tuple.loss)
    _close(as_list.grad, as_tuple.grad)
    with pytest.raises(ValueError, match=r"clamp\[0\] must be <= clamp\[1\]"):
        kl_penalty(Z, Z, estimator="k3", clamp=(1.0, 0.999))
    with pytest.raises(ValueError, match=r"clamp must be c > 0 or a pair"):
        kl_penalty(Z, Z, estimator="k3", clamp=(1.0, 2.0, 3.0))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"log_ratio_clamp must be a real number"):
        kl_penalty(Z, Z, estimator="k3", log_ratio_clamp="20")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"log_ratio_clamp\[1\] must be finite"):
        kl_penalty(Z, Z, estimator="k3", log_ratio_clamp=(None, math.inf))


def test_low_var_kl_refuses_extra_clamps() -> None:
    kl_penalty(Z, Z, estimator="low_var_kl")
    with pytest.raises(ValueError, match=r"estimator and clamp/log_ratio_clamp must not both"):
        kl_penalty(Z, Z, estimator="low_var_kl", clamp=5.0)


def test_k3_overflow_is_refused_without_a_clamp() -> None:
    kl_penalty([[-700.0]], [[0.0]], estimator="k3")
    with pytest.raises(ValueError, match=r"overflows float64.*pass log_ratio_clamp="):
        kl_penalty([[-710.0]], [[0.0]], estimator="k3")
    t = kl_penalty([[-710.0]], [[0.0]], estimator="k3", clamp=10.0)
    assert t.loss[0, 0] == 10.0
    assert t.grad[0, 0] == 0.0


def test_weight_cap_and_weighting_are_checked() -> None:
    importance_weighted_kl(Z, Z, Z, estimator="k3", weight_cap=1.0)
    with pytest.raises(ValueError, match=r"weight_cap must be >= 1"):
        importance_weighted_kl(Z, Z, Z, estimator="k3", weight_cap=0.999)
    with pytest.raises(ValueError, match=r"weighting must be one of 'detached'"):
        importance_weighted_kl(Z, Z, Z, estimator="k3", weighting="live")  # type: ignore[arg-type]


@pytest.mark.parametrize("weighting", WEIGHTINGS)
def test_weight_overflow_is_refused_without_a_cap(weighting: str) -> None:
    """Under every weighting, a weight that overflows is refused, though under "gradient_only"
    only the gradient holds it (the value is k itself): the check reads loss and gradient."""
    kw: dict[str, Any] = {"estimator": "k1", "weighting": weighting}
    t = importance_weighted_kl([[0.0]], [[-1.0]], [[-700.0]], **kw)
    assert np.all(np.isfinite(t.loss))
    assert np.all(np.isfinite(t.grad))
    with pytest.raises(
        ValueError, match=r"weight exp\(logp - logp_behavior\) overflows.*weight_cap"
    ):
        importance_weighted_kl([[0.0]], [[-1.0]], [[-710.0]], **kw)
    t = importance_weighted_kl([[0.0]], [[-1.0]], [[-710.0]], weight_cap=10.0, **kw)
    assert t.loss[0, 0] == (1.0 if weighting == "gradient_only" else 10.0)
    assert t.grad[0, 0] == 10.0


def test_shapes_masks_and_values_are_checked() -> None:
    with pytest.raises(ValueError, match=r"logp_ref and logp must have the same shape"):
        kl_penalty(Z, np.zeros((2, 2)), estimator="k1")
    with pytest.raises(ValueError, match=r"logp_behavior and logp must have the same shape"):
        importance_weighted_kl(Z, Z, np.zeros((3, 3)), estimator="k1")
    with pytest.raises(ValueError, match=r"mask must hold only 0 and 1"):
        kl_penalty(Z, Z, estimator="k1", mask=np.full((2, 3), 2.0))
    with pytest.raises(ValueError, match=r"logp_ref must contain only finite values"):
        kl_penalty(Z, np.full((2, 3), -np.inf), estimator="k1")
    with pytest.raises(ValueError, match=r"cotangent and mask must have the same shape"):
        kl_penalty(Z, Z, estimator="k1", cotangent=np.ones((3, 3)))
