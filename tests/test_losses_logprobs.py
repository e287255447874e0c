"""Properties of refimpl.losses.logprobs: token log-probabilities under temperature, top-k and top-p,
their gradient, the tempered entropy, and the sampler/trainer mismatch.

The reference inside this file is written in torch (float64), the way vLLM's sampler writes it:
``torch.topk`` for the k-th value, an *ascending* sort with ``cumsum <= 1 − p`` for top-p, then
``log_softmax`` of the masked logits. It shares no code with refimpl. Hypothesis draws logits that
are distinct within a row (no ties) and top-p values away from a cumulative-mass boundary, where
the two float64 computations may legitimately decide differently; ties and exact boundaries are
tested by hand with exact fractions.

Each property is written once as a function of the implementation under test and run against
refimpl (it must hold) and against a deliberately wrong variant (it must fail).
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
from hypothesis import assume, example, given
from hypothesis import strategies as st
from numpy.typing import NDArray

import refimpl.losses.logprobs as L
from refimpl.losses.logprobs import (
    LogprobSemantics,
    logprob_mismatch,
    token_entropy,
    token_logprobs,
    token_logprobs_grad,
)

Array = NDArray[np.float64]
Ints = NDArray[np.int64]
LogprobFn = Callable[..., Array]

# ---------------------------------------------------------------------------------------------
# the torch reference (vLLM's order and comparisons)
# ---------------------------------------------------------------------------------------------


def _torch_keep(y: torch.Tensor, top_k: int | None, top_p: float | None) -> torch.Tensor:
    keep = torch.ones_like(y, dtype=torch.bool)
    if top_k is not None:
        kth = torch.topk(y, top_k, dim=-1).values[..., -1:]
        keep = y >= kth
    if top_p is not None:
        probs = torch.softmax(y.masked_fill(~keep, -math.inf), dim=-1)
        ascending, index = torch.sort(probs, dim=-1, descending=False)
        drop_sorted = torch.cumsum(ascending, dim=-1) <= 1.0 - top_p
        drop_sorted[..., -1] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, index, drop_sorted)
        keep = keep & ~drop
    return keep


def torch_logprobs(
    z: Array, tokens: Ints, temperature: float, top_k: int | None, top_p: float | None
) -> Array:
    y = torch.tensor(z, dtype=torch.float64) / temperature
    keep = _torch_keep(y, top_k, top_p)
    logp = torch.log_softmax(y.masked_fill(~keep, -math.inf), dim=-1)
    ids = torch.tensor(tokens, dtype=torch.int64)[..., None]
    return logp.gather(-1, ids)[..., 0].numpy()


def torch_grad(
    z: Array,
    tokens: Ints,
    cotangent: Array,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
) -> Array:
    zt = torch.tensor(z, dtype=torch.float64, requires_grad=True)
    y = zt / temperature
    keep = _torch_keep(y.detach(), top_k, top_p)
    logp = torch.log_softmax(y.masked_fill(~keep, -math.inf), dim=-1)
    picked = logp.gather(-1, torch.tensor(tokens, dtype=torch.int64)[..., None])[..., 0]
    (grad,) = torch.autograd.grad(picked, zt, grad_outputs=torch.tensor(cotangent))
    return grad.numpy()


def torch_entropy(z: Array, temperature: float, top_k: int | None, top_p: float | None) -> Array:
    y = torch.tensor(z, dtype=torch.float64) / temperature
    keep = _torch_keep(y, top_k, top_p)
    probs = torch.softmax(y.masked_fill(~keep, -math.inf), dim=-1)
    return np.asarray(torch.special.entr(probs).sum(dim=-1).numpy(), dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# strategies
# ---------------------------------------------------------------------------------------------


@st.composite
def distinct_logits(draw: st.DrawFn) -> Array:
    """(B, T, V) logits, distinct within each row (gap >= 0.25), shifted by a common offset."""
    b, t, v = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 6))
    offset = draw(st.sampled_from([0.0, 30.0, -500.0]))
    rows = [
        draw(st.lists(st.integers(-40, 40), min_size=v, max_size=v, unique=True))
        for _ in range(b * t)
    ]
    return np.asarray(rows, dtype=np.float64).reshape(b, t, v) * 0.25 + offset


@st.composite
def cases(draw: st.DrawFn) -> tuple[Array, Ints, float, int | None, float | None]:
    """Logits, tokens, temperature, top_k, top_p, with no cumulative mass within 1e-9 of top_p."""
    z = draw(distinct_logits())
    b, t, v = z.shape
    tokens = np.asarray(draw(st.lists(st.integers(0, v - 1), min_size=b * t, max_size=b * t)))
    temperature = draw(st.sampled_from([0.3, 0.6, 1.0, 1.7, 3.0]))
    top_k = draw(st.one_of(st.none(), st.integers(1, v)))
    top_p = draw(st.one_of(st.none(), st.floats(0.05, 1.0)))
    if top_p is not None:
        assume(not _near_top_p_boundary(z / temperature, top_k, top_p))
    return z, tokens.reshape(b, t).astype(np.int64), temperature, top_k, top_p


def _near_top_p_boundary(
    y: Array, top_k: int | None, top_p: float | None, *, within: float = 1e-9
) -> bool:
    """Whether a token's preceding mass (descending, after top-k) is within ``within`` of top_p."""
    if top_p is None:
        return False
    ranked = -np.sort(-y, axis=-1)
    if top_k is not None:
        ranked = ranked[..., :top_k]
    probs = np.exp(ranked - ranked[..., :1])
    probs /= probs.sum(axis=-1, keepdims=True)
    before = np.cumsum(probs, axis=-1) - probs
    return bool(np.any(np.abs(before - top_p) < within))


def _all_tokens(z: Array) -> tuple[Array, Ints]:
    """Each position repeated V times, with every token id: (B·T, V, V) logits and (B·T, V) ids."""
    b, t, v = z.shape
    rows = np.repeat(z.reshape(b * t, 1, v), v, axis=1)
    return rows, np.tile(np.arange(v), (b * t, 1))


# ---------------------------------------------------------------------------------------------
# wrong variants
# ---------------------------------------------------------------------------------------------


def wrong_temperature_on_logprobs(
    z: Array, tokens: Ints, *, temperature: float = 1.0, **trunc: Any
) -> Array:
    """Divides the log-probabilities by T instead of the logits."""
    return token_logprobs(z, tokens, **trunc) / temperature


def wrong_top_p_not_renormalised(
    z: Array,
    tokens: Ints,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> Array:
    """Cuts the support but keeps the full softmax's log-probabilities on it."""
    full = token_logprobs(z, tokens, temperature=temperature)
    cut = token_logprobs(z, tokens, temperature=temperature, top_k=top_k, top_p=top_p)
    return np.where(np.isneginf(cut), -np.inf, full)


def wrong_top_p_before_top_k(
    z: Array,
    tokens: Ints,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> Array:
    """Top-p on the full distribution first, then top-k, then renormalise."""
    y = z / temperature
    keep = L._support(y, None, top_p) & L._support(y, top_k, None)
    shift, log_s = L._log_normaliser(y, keep)
    value = L._gather(y, tokens) - shift[..., 0] - log_s[..., 0]
    return np.where(L._gather(keep, tokens), value, -np.inf)


def wrong_boundary_token_excluded(
    z: Array,
    tokens: Ints,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> Array:
    """Top-p keeps only the tokens whose *inclusive* cumulative mass is < p (drops the boundary)."""
    y = z / temperature
    keep = L._support(y, top_k, None)
    if top_p is not None and top_p < 1.0:
        shift, log_s = L._log_normaliser(y, keep)
        probs = np.where(keep, np.exp(y - shift - log_s), 0.0)
        order = np.argsort(-probs, axis=-1, kind="stable")
        inclusive = np.cumsum(np.take_along_axis(probs, order, -1), axis=-1)
        drop_sorted = inclusive >= top_p
        drop_sorted[..., 0] = False
        drop = np.zeros_like(drop_sorted)
        np.put_along_axis(drop, order, drop_sorted, axis=-1)
        keep = keep & ~drop
    shift, log_s = L._log_normaliser(y, keep)
    value = L._gather(y, tokens) - shift[..., 0] - log_s[..., 0]
    return np.where(L._gather(keep, tokens), value, -np.inf)


# ---------------------------------------------------------------------------------------------
# hand cases with exact fractions
# ---------------------------------------------------------------------------------------------


def _z(*weights: float) -> Array:
    return np.log(np.array([[weights]], dtype=np.float64))


def _probs(z: Array, **kw: Any) -> list[float]:
    v = z.shape[-1]
    return [float(np.exp(token_logprobs(z, [[x]], **kw)[0, 0])) for x in range(v)]


def _assert_fractions(found: list[float], exact: list[Fraction]) -> None:
    assert found == pytest.approx([float(x) for x in exact], rel=1e-13, abs=1e-15)


def test_tempered_probabilities_are_powers_of_the_weights() -> None:
    # z = log w and T = 1/2: softmax(z/T) ∝ w² = 16, 4, 1, 1.
    found = _probs(_z(4, 2, 1, 1), temperature=0.5)
    _assert_fractions(found, [Fraction(16, 22), Fraction(4, 22), Fraction(1, 22), Fraction(1, 22)])


def test_top_k_renormalises_over_the_kept_tokens() -> None:
    found = _probs(_z(4, 2, 1, 1), top_k=2)
    _assert_fractions(found, [Fraction(2, 3), Fraction(1, 3), Fraction(0), Fraction(0)])
    assert token_logprobs(_z(4, 2, 1, 1), [[3]], top_k=2)[0, 0] == -math.inf


def test_top_k_keeps_every_token_tied_with_the_kth() -> None:
    # k = 2 and the 2nd and 3rd logits are equal: both are kept (vLLM's `< kth` mask).
    found = _probs(_z(4, 2, 2, 1), top_k=2)
    _assert_fractions(found, [Fraction(1, 2), Fraction(1, 4), Fraction(1, 4), Fraction(0)])


def test_top_p_keeps_the_token_that_crosses_p() -> None:
    # probabilities 1/2, 3/10, 1/5 and p = 0.6: the mass before token 1 is 1/2 < 0.6, so token 1
    # is kept; before token 2 it is 4/5 >= 0.6, so token 2 is cut.
    found = _probs(_z(5, 3, 2), top_p=0.6)
    _assert_fractions(found, [Fraction(5, 8), Fraction(3, 8), Fraction(0)])


def test_top_p_keeps_every_token_tied_at_the_boundary() -> None:
    # uniform over 4 tokens, p = 1/2: the minimal prefix has 2 tokens, and the 2 others tie with
    # its last one, so all 4 are kept (vLLM keeps whichever 2 its sort puts last).
    found = _probs(np.zeros((1, 1, 4)), top_p=0.5)
    _assert_fractions(found, [Fraction(1, 4)] * 4)


def test_top_p_works_on_the_mass_renormalised_after_top_k() -> None:
    # 0.4, 0.3, 0.2, 0.1 with k = 2: renormalised 4/7, 3/7; the mass before token 1 is 4/7 >= 0.5.
    found = _probs(_z(4, 3, 2, 1), top_k=2, top_p=0.5)
    _assert_fractions(found, [Fraction(1), Fraction(0), Fraction(0), Fraction(0)])
    before_k = wrong_top_p_before_top_k(_z(4, 3, 2, 1), np.array([[1]]), top_k=2, top_p=0.5)
    assert np.exp(before_k[0, 0]) == pytest.approx(3 / 7)


def test_top_p_one_and_top_k_v_change_nothing() -> None:
    z = _z(5, 3, 2, 7)
    tokens = np.array([[2]])
    plain = token_logprobs(z, tokens, temperature=0.8)
    assert token_logprobs(z, tokens, temperature=0.8, top_p=1.0, top_k=4) == pytest.approx(plain)


def test_padding_is_zero_and_may_hold_any_token_id() -> None:
    z = np.stack([_z(1, 2, 3)[0, 0], _z(3, 2, 1)[0, 0]])[None]
    out = token_logprobs(z, [[0, -100]], mask=[[1, 0]], top_k=1)
    assert out[0, 1] == 0.0
    assert out[0, 0] == -math.inf


def test_garbage_logits_at_padding_are_ignored() -> None:
    z = np.array([[[1.0, 2.0, 3.0], [1e308, -1e308, 0.0]]])
    tokens, mask = [[2, 7]], [[1, 0]]
    kw: dict[str, Any] = {"temperature": 0.5, "top_k": 2, "mask": mask}
    assert token_logprobs(z, tokens, **kw)[0, 1] == 0.0
    assert np.all(token_logprobs_grad(z, tokens, **kw)[0, 1] == 0.0)
    assert token_entropy(z, temperature=0.5, mask=mask)[0, 1] == 0.0
    out = logprob_mismatch(z, tokens, sampler={"temperature": 0.5}, trainer={}, mask=mask)
    assert out.log_ratio[0, 1] == 0.0
    with pytest.raises(ValueError, match=r"largest \|logit\| at a real position is 1e\+308"):
        token_logprobs(z, [[2, 0]], temperature=0.5)


def test_large_logits_do_not_overflow() -> None:
    z = np.array([[[1e6, 1e6 - 1.0, 1e6 - 2.0]]])
    found = token_logprobs(z, [[0]], temperature=0.5)
    expected = -math.log(1 + math.exp(-2.0) + math.exp(-4.0))
    assert found[0, 0] == pytest.approx(expected, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# against torch (float64) and finite differences
# ---------------------------------------------------------------------------------------------


@given(cases())
def test_values_match_torch(case: tuple[Array, Ints, float, int | None, float | None]) -> None:
    z, tokens, temperature, top_k, top_p = case
    found = token_logprobs(z, tokens, temperature=temperature, top_k=top_k, top_p=top_p)
    expected = torch_logprobs(z, tokens, temperature, top_k, top_p)
    np.testing.assert_array_equal(np.isneginf(found), np.isneginf(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(found[finite], expected[finite], rtol=1e-12, atol=1e-12)


@given(cases(), st.data())
def test_gradient_matches_torch_autograd(
    case: tuple[Array, Ints, float, int | None, float | None], data: st.DataObject
) -> None:
    z, tokens, temperature, top_k, top_p = case
    c = np.asarray(
        data.draw(st.lists(st.floats(-3, 3), min_size=tokens.size, max_size=tokens.size))
    ).reshape(tokens.shape)
    found = token_logprobs_grad(
        z, tokens, temperature=temperature, top_k=top_k, top_p=top_p, cotangent=c
    )
    expected = torch_grad(z, tokens, c, temperature, top_k, top_p)
    np.testing.assert_allclose(found, expected, rtol=1e-12, atol=1e-14)


@given(cases())
def test_gradient_matches_central_differences(
    case: tuple[Array, Ints, float, int | None, float | None],
) -> None:
    z, tokens, temperature, top_k, top_p = case
    z = z - z.max(axis=-1, keepdims=True)  # logits near 0: the step h is relative to them
    kw: dict[str, Any] = {"temperature": temperature, "top_k": top_k, "top_p": top_p}
    assume(np.all(np.isfinite(token_logprobs(z, tokens, **kw))))
    assume(not _near_top_p_boundary(z / temperature, top_k, top_p, within=1e-4))
    h = 1e-6
    grad = token_logprobs_grad(z, tokens, **kw)
    numeric = np.zeros_like(z)
    for index in np.ndindex(*z.shape):
        step = np.zeros_like(z)
        step[index] = h
        # the logits are 0.25 apart and no cumulative mass is within 1e-4 of top_p: a step of 1e-6
        # never moves a token across a support boundary
        up = token_logprobs(z + step, tokens, **kw).sum()
        down = token_logprobs(z - step, tokens, **kw).sum()
        numeric[index] = (up - down) / (2 * h)
    assume(np.all(np.isfinite(numeric)))
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-6)


@given(cases())
def test_entropy_matches_torch(case: tuple[Array, Ints, float, int | None, float | None]) -> None:
    z, _, temperature, top_k, top_p = case
    found = token_entropy(z, temperature=temperature, top_k=top_k, top_p=top_p)
    np.testing.assert_allclose(
        found, torch_entropy(z, temperature, top_k, top_p), rtol=1e-10, atol=1e-12
    )


def test_entropy_of_large_peaked_logits_has_no_cancellation() -> None:
    # verl's form lse(y) − Σ μ y loses every digit here (both terms ~1e8); −Σ μ log μ does not.
    z = np.array([[[1e8, 1e8 - 30.0]]])
    eps = math.exp(-30.0)
    p0, p1 = 1 / (1 + eps), eps / (1 + eps)
    expected = -(p0 * math.log(p0) + p1 * math.log(p1))
    assert token_entropy(z)[0, 0] == pytest.approx(expected, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# properties, each rejected by a wrong variant
# ---------------------------------------------------------------------------------------------


def _check_normalised(impl: LogprobFn) -> Callable[[], None]:
    @given(cases())
    def check(case: tuple[Array, Ints, float, int | None, float | None]) -> None:
        z, _, temperature, top_k, top_p = case
        rows, ids = _all_tokens(z)
        logp = impl(rows, ids, temperature=temperature, top_k=top_k, top_p=top_p)
        totals = np.exp(logp).sum(axis=-1)
        assert np.allclose(totals, 1.0, rtol=0.0, atol=1e-12), totals

    return check


def test_log_probabilities_sum_to_one_over_the_vocabulary() -> None:
    run_property(_check_normalised(token_logprobs))


def test_normalisation_rejects_temperature_on_logprobs() -> None:
    rejects(_check_normalised(wrong_temperature_on_logprobs))


def test_normalisation_rejects_top_p_without_renormalising() -> None:
    rejects(_check_normalised(wrong_top_p_not_renormalised))


ORDER_MATTERS = (_z(4, 3, 2, 1), np.array([[1]]), 1.0, 2, 0.5)
BOUNDARY = (_z(5, 3, 2), np.array([[1]]), 1.0, None, 0.6)


def _check_matches_torch(impl: LogprobFn) -> Callable[[], None]:
    @given(cases())
    @example(ORDER_MATTERS)
    @example(BOUNDARY)
    def check(case: tuple[Array, Ints, float, int | None, float | None]) -> None:
        z, tokens, temperature, top_k, top_p = case
        found = impl(z, tokens, temperature=temperature, top_k=top_k, top_p=top_p)
        expected = torch_logprobs(z, tokens, temperature, top_k, top_p)
        assert np.array_equal(np.isneginf(found), np.isneginf(expected)), (found, expected)
        finite = np.isfinite(expected)
        assert np.allclose(found[finite], expected[finite], rtol=1e-12, atol=1e-12)

    return check


def test_support_matches_vllm_order_and_boundary() -> None:
    run_property(_check_matches_torch(token_logprobs))


def test_support_rejects_top_p_before_top_k() -> None:
    rejects(_check_matches_torch(wrong_top_p_before_top_k))


def test_support_rejects_excluding_the_boundary_token() -> None:
    rejects(_check_matches_torch(wrong_boundary_token_excluded))


GradFn = Callable[..., Array]


def wrong_grad_without_temperature(z: Array, tokens: Ints, **kw: Any) -> Array:
    """Forgets the 1/T of the chain rule."""
    return token_logprobs_grad(z, tokens, **kw) * float(kw.get("temperature", 1.0))


def wrong_grad_ignoring_mask(z: Array, tokens: Ints, *, mask: Any = None, **kw: Any) -> Array:
    """Back-propagates through padding positions too (and so needs in-range ids there)."""
    return token_logprobs_grad(z, np.where(np.asarray(mask) > 0, tokens, 0), **kw)


def _check_grad_vs_torch(impl: GradFn) -> Callable[[], None]:
    @given(cases())
    def check(case: tuple[Array, Ints, float, int | None, float | None]) -> None:
        z, tokens, temperature, top_k, top_p = case
        c = np.ones(tokens.shape)
        found = impl(z, tokens, temperature=temperature, top_k=top_k, top_p=top_p)
        assert np.allclose(found, torch_grad(z, tokens, c, temperature, top_k, top_p), atol=1e-12)

    return check


def test_gradient_property_holds() -> None:
    run_property(_check_grad_vs_torch(token_logprobs_grad))


def test_gradient_rejects_a_missing_temperature_factor() -> None:
    rejects(_check_grad_vs_torch(wrong_grad_without_temperature))


def _check_padding_contributes_nothing(impl: GradFn) -> Callable[[], None]:
    @given(cases(), st.data())
    def check(case: tuple[Array, Ints, float, int | None, float | None], data: Any) -> None:
        z, tokens, temperature, top_k, top_p = case
        flat = data.draw(
            st.lists(st.sampled_from([0, 1]), min_size=tokens.size, max_size=tokens.size)
        )
        mask = np.asarray(flat, dtype=np.float64).reshape(tokens.shape)
        kw: dict[str, Any] = {"temperature": temperature, "top_k": top_k, "top_p": top_p}
        grad = impl(z, tokens, mask=mask, **kw)
        assert np.all(grad[mask == 0] == 0.0)
        value = token_logprobs(z, tokens, mask=mask, **kw)
        assert np.all(value[mask == 0] == 0.0)
        kept = np.isfinite(token_logprobs(z, tokens, **kw)) & (mask > 0)
        assert np.allclose(grad.sum(axis=-1)[kept], 0.0, atol=1e-12)

    return check


def test_padding_contributes_nothing_to_value_or_gradient() -> None:
    run_property(_check_padding_contributes_nothing(token_logprobs_grad))


def test_padding_property_rejects_a_gradient_that_ignores_the_mask() -> None:
    rejects(_check_padding_contributes_nothing(wrong_grad_ignoring_mask))


def test_gradient_within_the_support_is_onehot_minus_renormalised_probs() -> None:
    # z = log(4, 2, 1, 1), k = 2, T = 1/2: μ ∝ 16, 4 on {0, 1}, so μ = 4/5, 1/5.
    g = token_logprobs_grad(_z(4, 2, 1, 1), [[1]], temperature=0.5, top_k=2, cotangent=[[3.0]])
    exact = [3 * 2 * (0 - Fraction(4, 5)), 3 * 2 * (1 - Fraction(1, 5)), 0, 0]
    assert g[0, 0].tolist() == pytest.approx([float(x) for x in exact], rel=1e-13, abs=1e-15)
    outside = token_logprobs_grad(_z(4, 2, 1, 1), [[3]], temperature=0.5, top_k=2)
    assert outside[0, 0].tolist() == pytest.approx([-1.6, -0.4, 0.0, 0.0], rel=1e-13)


# ---------------------------------------------------------------------------------------------
# the sampler/trainer mismatch
# ---------------------------------------------------------------------------------------------


def test_mismatch_of_a_truncating_sampler_is_the_kept_mass() -> None:
    z = np.repeat(_z(4, 2, 1, 1), 3, axis=1)
    out = logprob_mismatch(
        z, [[0, 1, 2]], sampler={"top_k": 2}, trainer=LogprobSemantics(), tolerance=0.1
    )
    assert np.exp(out.log_ratio[0, :2]).tolist() == pytest.approx([0.75, 0.75], rel=1e-13)
    assert out.log_ratio[0, 2] == math.inf
    assert out.logp_sampler[0, 2] == -math.inf
    assert out.max_abs_log_ratio == math.inf
    assert out.fraction_ratio_off == 1.0
    assert out.fraction_outside_sampler == pytest.approx(1 / 3)
    assert out.fraction_outside_trainer == 0.0


def test_identical_semantics_have_ratio_one() -> None:
    z = np.random.default_rng(0).normal(size=(2, 3, 7))
    sem = LogprobSemantics(temperature=0.7, top_k=5, top_p=0.9)
    tokens = np.argmax(z, axis=-1)  # always kept
    out = logprob_mismatch(z, tokens, sampler=sem, trainer=sem)
    assert np.all(out.log_ratio == 0.0)
    assert (out.max_abs_log_ratio, out.fraction_ratio_off) == (0.0, 0.0)


def test_a_token_outside_both_supports_has_an_undefined_ratio() -> None:
    sem = LogprobSemantics(top_k=1)
    out = logprob_mismatch(_z(4, 2, 1), [[2]], sampler=sem, trainer=sem)
    assert math.isnan(out.log_ratio[0, 0])
    assert (out.fraction_ratio_off, out.max_abs_log_ratio) == (1.0, 0.0)
    assert out.fraction_outside_trainer == out.fraction_outside_sampler == 1.0


def test_temperature_on_logprobs_shifts_every_token_by_log_sum_p_to_the_1_over_t() -> None:
    # p = 4/7, 2/7, 1/7 and T = 1/2: Δ = log Σ p² = log(21/49).
    z = np.repeat(_z(4, 2, 1), 3, axis=1)
    bug = LogprobSemantics(temperature=0.5, temperature_on="logprobs")
    out = logprob_mismatch(z, [[0, 1, 2]], sampler=LogprobSemantics(temperature=0.5), trainer=bug)
    assert out.log_ratio[0].tolist() == pytest.approx([math.log(21 / 49)] * 3, rel=1e-13)
    same = logprob_mismatch(
        z,
        [[0, 1, 2]],
        sampler=LogprobSemantics(),
        trainer=LogprobSemantics(temperature_on="logprobs"),
    )
    assert np.all(same.log_ratio == 0.0)


def wrong_bug_shift(z: Array, temperature: float) -> Array:
    """The naive '(1/T − 1)·logsumexp(z)' shift, without the log-normaliser of z/T."""
    lse = np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1)) + z.max(-1)
    return np.asarray((1 / temperature - 1) * lse)


def refimpl_bug_shift(z: Array, temperature: float) -> Array:
    rows, ids = _all_tokens(z)
    out = logprob_mismatch(
        rows,
        ids,
        sampler=LogprobSemantics(temperature=temperature),
        trainer=LogprobSemantics(temperature=temperature, temperature_on="logprobs"),
    )
    assert np.allclose(out.log_ratio, out.log_ratio[:, :1], rtol=0, atol=1e-10)
    return np.asarray(out.log_ratio[:, 0])


def _check_bug_shift_sign(shift: Callable[[Array, float], Array]) -> Callable[[], None]:
    @given(distinct_logits(), st.sampled_from([0.3, 0.6, 1.0, 1.7, 3.0]))
    def check(z: Array, temperature: float) -> None:
        assume(z.shape[-1] >= 2)
        delta = shift(z, temperature)
        if temperature == 1.0:
            assert np.allclose(delta, 0.0, atol=1e-12)
        else:
            assert np.all(np.sign(delta) == np.sign(temperature - 1.0)), delta

    return check


def test_bug_ratio_is_below_one_for_t_below_one_and_above_for_t_above() -> None:
    run_property(_check_bug_shift_sign(refimpl_bug_shift))


def test_bug_sign_property_rejects_the_naive_shift() -> None:
    rejects(_check_bug_shift_sign(wrong_bug_shift))


def test_mismatch_tolerance_is_a_bound_on_ratio_minus_one() -> None:
    z = np.repeat(_z(9, 1), 2, axis=1)  # top-k=1 keeps token 0 with kept mass 9/10
    kw: dict[str, Any] = {"sampler": {"top_k": 1}, "trainer": {}}
    assert logprob_mismatch(z, [[0, 0]], tolerance=0.1001, **kw).fraction_ratio_off == 0.0
    assert logprob_mismatch(z, [[0, 0]], tolerance=0.0999, **kw).fraction_ratio_off == 1.0
    half = logprob_mismatch(z, [[0, 0]], mask=[[1, 0]], tolerance=0.0, **kw)
    assert (half.fraction_ratio_off, half.log_ratio[0, 1]) == (1.0, 0.0)


# ---------------------------------------------------------------------------------------------
# validation: a call just inside and just outside each rule
# ---------------------------------------------------------------------------------------------

Z = _z(4, 2, 1)
TOK = np.array([[0]])


def test_temperature_must_be_positive() -> None:
    token_logprobs(Z, TOK, temperature=1e-3)
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError, match=r"temperature must be > 0 .*Pass temperature > 0"):
            token_logprobs(Z, TOK, temperature=bad)
    with pytest.raises(TypeError, match="temperature must be a real number"):
        token_logprobs(Z, TOK, temperature="1")  # type: ignore[arg-type]


def test_temperature_must_keep_the_scaled_logits_finite() -> None:
    z = np.array([[[1e300, 0.0]]])
    token_logprobs(z, TOK, temperature=1.0)
    with pytest.raises(ValueError, match=r"logits/temperature stays finite.*pass a larger"):
        token_logprobs(z, TOK, temperature=1e-10)


def test_top_k_must_lie_between_one_and_the_vocabulary() -> None:
    token_logprobs(Z, TOK, top_k=1)
    token_logprobs(Z, TOK, top_k=3)
    with pytest.raises(ValueError, match=r"top_k must be >= 1 .*top_k=None to disable top-k"):
        token_logprobs(Z, TOK, top_k=0)
    with pytest.raises(ValueError, match=r"top_k must be <= the vocabulary size V = 3"):
        token_logprobs(Z, TOK, top_k=4)
    for bad in (2.0, True):
        with pytest.raises(TypeError, match="top_k must be an integer"):
            token_logprobs(Z, TOK, top_k=bad)  # type: ignore[arg-type]


def test_top_p_must_lie_in_zero_one() -> None:
    token_logprobs(Z, TOK, top_p=1.0)
    token_logprobs(Z, TOK, top_p=1e-12)
    for bad in (0.0, 1.0 + 1e-12, -0.5):
        with pytest.raises(ValueError, match=r"top_p must lie in \(0, 1\].*top_p=None"):
            token_logprobs(Z, TOK, top_p=bad)
    with pytest.raises(TypeError, match="top_p must be a real number"):
        token_logprobs(Z, TOK, top_p="0.9")  # type: ignore[arg-type]


def test_tokens_must_be_integer_ids_in_range() -> None:
    token_logprobs(Z, [[2]])
    token_logprobs(Z, np.array([[2]], dtype=np.uint8))
    with pytest.raises(TypeError, match="tokens must be an integer array"):
        token_logprobs(Z, [[1.0]])
    with pytest.raises(TypeError, match="tokens must be an integer array"):
        token_logprobs(Z, [[True]])
    for bad in (3, -1):
        with pytest.raises(ValueError, match=r"tokens must hold token ids in \[0, V\) = \[0, 3\)"):
            token_logprobs(Z, [[bad]])
    with pytest.raises(ValueError, match=r"tokens must have shape \(B, T\) = logits.shape\[:2\]"):
        token_logprobs(Z, [0])
    with pytest.raises(TypeError, match="tokens must be an integer array"):
        token_logprobs(np.zeros((1, 2, 3)), [[0], [1, 2]])


def test_logits_must_be_a_finite_three_dimensional_array() -> None:
    with pytest.raises(ValueError, match="logits must be 3-D"):
        token_logprobs(Z[0], TOK)
    with pytest.raises(ValueError, match="logits must contain only finite values"):
        token_logprobs(np.array([[[0.0, math.inf]]]), TOK)
    with pytest.raises(ValueError, match="logits must have at least one"):
        token_logprobs(np.zeros((1, 1, 0)), TOK)


def test_mask_and_cotangent_must_match_the_tokens() -> None:
    token_logprobs(Z, TOK, mask=[[1]])
    with pytest.raises(ValueError, match="mask must hold only 0 and 1"):
        token_logprobs(Z, TOK, mask=[[0.5]])
    with pytest.raises(ValueError, match="mask and tokens must have the same shape"):
        token_logprobs(Z, TOK, mask=[[1, 1]])
    with pytest.raises(ValueError, match="cotangent and mask must have the same shape"):
        token_logprobs_grad(Z, TOK, cotangent=[[1.0, 2.0]])
    token_logprobs_grad(Z, TOK, cotangent=[[-2.5]])
    with pytest.raises(ValueError, match="cotangent must contain only finite values"):
        token_logprobs_grad(Z, TOK, cotangent=[[math.nan]])


def test_entropy_is_validated_like_the_log_probabilities() -> None:
    token_entropy(Z, temperature=0.5, top_k=3, top_p=1.0, mask=[[1]])
    with pytest.raises(ValueError, match="temperature must be > 0"):
        token_entropy(Z, temperature=0.0)
    with pytest.raises(ValueError, match="top_k must be <= the vocabulary size V = 3"):
        token_entropy(Z, top_k=4)
    with pytest.raises(ValueError, match=r"top_p must lie in \(0, 1\]"):
        token_entropy(Z, top_p=0.0)
    with pytest.raises(ValueError, match=r"mask and logits\[\.\.\., 0\] must have the same shape"):
        token_entropy(Z, mask=[[1, 1]])


def test_semantics_are_validated_where_they_are_built() -> None:
    sem = LogprobSemantics(temperature=0.1, top_k=1, top_p=1.0)
    with pytest.raises(AttributeError):
        sem.temperature = 2.0  # type: ignore[misc]
    with pytest.raises(ValueError, match=r"top_k must be >= 1 .*vLLM's -1 and TRL's 0"):
        LogprobSemantics(top_k=-1)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        LogprobSemantics(temperature=0.0)
    with pytest.raises(ValueError, match="temperature_on must be one of 'logits', 'logprobs'"):
        LogprobSemantics(temperature_on="probs")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="top_p must lie in"):
        LogprobSemantics(top_p=0.0)


def test_mismatch_names_the_side_and_refuses_bad_sides() -> None:
    with pytest.raises(ValueError, match=r"sampler.top_k must be <= the vocabulary size V = 3"):
        logprob_mismatch(Z, TOK, sampler={"top_k": 4}, trainer={})
    with pytest.raises(TypeError, match="sampler must be a LogprobSemantics"):
        logprob_mismatch(Z, TOK, sampler="vllm", trainer={})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"trainer must only have the keys.*Remove 'topk'"):
        logprob_mismatch(Z, TOK, sampler={}, trainer={"topk": 2})
    with pytest.raises(ValueError, match="tolerance must be >= 0"):
        logprob_mismatch(Z, TOK, sampler={}, trainer={}, tolerance=-1e-9)
    logprob_mismatch(Z, TOK, sampler={}, trainer={}, tolerance=0.0)
    with pytest.raises(ValueError, match="mask must mark at least one real token"):
        logprob_mismatch(Z, TOK, sampler={}, trainer={}, mask=[[0]])
    bug = LogprobSemantics(temperature=1e-310, temperature_on="logprobs")
    with pytest.raises(ValueError, match=r"trainer.temperature must be large enough"):
        logprob_mismatch(Z, [[1]], sampler={}, trainer=bug)
