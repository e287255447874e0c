"""Decoupled PPO (refimpl.losses.decoupled): the PPO clip against π_prox times the behaviour weight.

Exact values on hand-worked tokens (ratios and weights that are powers of two, so every product
is exact); the value and gradient against torch autograd on the formula written here the way
AReaL writes it (a detached weight, ``torch.where`` on the kept tokens); properties (a rejected
token contributes nothing, on-policy the gradient is the weighted policy gradient, a behaviour
equal to the proximal policy is plain PPO, a truncated weight never exceeds the cap), each run
against a wrong variant it must reject; the spec ``decoupled_ppo_clip`` rejects wrong candidates;
and the refusals name the parameter.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import pytest
import torch
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray
from strategies_losses import TokenBatch, token_batches

from refimpl.losses import LossTerms, aggregate_loss, decoupled_ppo_loss, ppo_clip_loss
from refimpl.staleness import decoupled_ppo_weights
from refimpl.testing import check_conformance

Array = NDArray[np.float64]
Loss = Callable[..., LossTerms]

LN2 = math.log(2.0)

# ---------------------------------------------------------------------------------------------
# (1) exact values
# ---------------------------------------------------------------------------------------------


def test_hand_worked_rejection_and_the_denominator_before_it() -> None:
    # π_θ/π_prox = 1, 2, 1/2, 1; π_prox/μ = 2, 1, 1/2, 8 (the last above C = 4: rejected)
    prox = np.array([[-1.0, -2.0, -1.5, -3.0]])
    logp = prox + np.array([[0.0, LN2, -LN2, 0.0]])
    behav = prox - np.array([[LN2, 0.0, -LN2, 3 * LN2]])
    adv = np.array([[1.0, 1.0, -1.0, -1.0]])
    terms = decoupled_ppo_loss(logp, prox, behav, adv, eps_low=0.25, eps_high=0.5, cap=4.0)
    # PPO: −1 (ρ 1); A > 0 at ρ 2 clipped at 1.5; A < 0 at ρ 1/2 clipped at 3/4; rejected
    assert terms.loss.tolist() == [[-2.0, -1.5, 0.375, 0.0]]
    assert terms.grad.tolist() == [[-2.0, 0.0, 0.0, 0.0]]
    # AReaL's token mean divides by the 4 tokens of the mask, the rejected one included
    assert aggregate_loss(terms.loss, np.ones((1, 4)), mode="token_mean") == -3.125 / 4


def test_hand_worked_truncation_and_lower_bound() -> None:
    prox = np.array([[-1.0, -2.0, -1.5]])
    logp = prox.copy()  # on-policy: the gradient is −w·A
    behav = prox - np.array([[3 * LN2, 0.0, -2 * LN2]])  # weights 8, 1, 1/4
    adv = np.array([[1.0, -2.0, 4.0]])
    clip = decoupled_ppo_loss(logp, prox, behav, adv, cap=2.0, lower=0.5, above_cap="clip")
    assert clip.grad.tolist() == [[-2.0, 2.0, -2.0]]  # weights clamped to 2, 1, 1/2
    mask = decoupled_ppo_loss(logp, prox, behav, adv, cap=2.0, lower=0.5)
    assert mask.grad.tolist() == [[0.0, 2.0, 0.0]]  # both ends rejected
    zero = np.zeros((1, 3))  # log-ratio ln 2 exactly: the weight is C = 2 to the last bit
    at_bounds = decoupled_ppo_loss(zero, zero, zero - LN2, adv, cap=2.0, lower=2.0**-40)
    assert at_bounds.grad.tolist() == [[-2.0, 4.0, -8.0]]  # a weight equal to C is kept


def test_padding_and_cotangent() -> None:
    prox = np.array([[-1.0, -1.0], [-1.0, -1.0]])
    behav = prox - LN2  # weight 2
    terms = decoupled_ppo_loss(
        prox, prox, behav, [1.0, -1.0], mask=[[1, 0], [1, 1]], cotangent=[[0.5, 9.0], [2.0, 0.25]]
    )
    assert terms.loss.tolist() == [[-2.0, 0.0], [2.0, 2.0]]
    assert terms.grad.tolist() == [[-1.0, 0.0], [4.0, 0.5]]


# ---------------------------------------------------------------------------------------------
# (2) value and gradient against torch autograd on AReaL's formula
# ---------------------------------------------------------------------------------------------


def _torch_decoupled(
    batch: TokenBatch, behav: Array, cap: float, dual: float | None
) -> tuple[Array, Array]:
    logp = torch.tensor(batch.logp, requires_grad=True)
    prox = torch.tensor(batch.logp_old)
    w = torch.exp(prox - torch.tensor(behav))
    kept = (w <= cap) & (torch.tensor(batch.mask) > 0)
    ratio = torch.where(kept, torch.exp(logp - prox), 0.0)
    adv = torch.tensor(batch.advantages)
    loss = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 0.8, 1.2))
    if dual is not None:
        loss = torch.where(adv < 0, torch.min(loss, -adv * dual), loss)
    loss = torch.where(kept, loss * w.detach(), 0.0)
    (grad,) = torch.autograd.grad((loss * torch.tensor(batch.cotangent)).sum(), logp)
    return loss.detach().numpy(), grad.numpy()


def _behaviour(batch: TokenBatch, shifts: list[float]) -> Array:
    return np.asarray(batch.logp_old - np.resize(np.asarray(shifts), batch.logp_old.shape))


@given(
    token_batches(max_log_ratio=0.6),
    st.lists(st.floats(-2.0, 2.0, allow_nan=False), min_size=1, max_size=15),
    st.sampled_from([1.5, 3.0]),
    st.sampled_from([None, 3.0]),
)
def test_value_and_gradient_match_torch_autograd(
    batch: TokenBatch, shifts: list[float], cap: float, dual: float | None
) -> None:
    behav = _behaviour(batch, shifts)
    terms = decoupled_ppo_loss(
        batch.logp,
        batch.logp_old,
        behav,
        batch.advantages,
        dual_clip=dual,
        cap=cap,
        mask=batch.mask,
        cotangent=batch.cotangent,
    )
    loss, grad = _torch_decoupled(batch, behav, cap, dual)
    np.testing.assert_allclose(terms.loss, loss, rtol=1e-13, atol=1e-300)
    np.testing.assert_allclose(terms.grad, grad, rtol=1e-13, atol=1e-300)


# ---------------------------------------------------------------------------------------------
# (3) properties, each paired with a wrong variant it rejects
# ---------------------------------------------------------------------------------------------


def _right(lp: Any, lq: Any, lb: Any, a: Any, **k: Any) -> LossTerms:
    return decoupled_ppo_loss(lp, lq, lb, a, **k)


def _wrong_clipped_weight(lp: Any, lq: Any, lb: Any, a: Any, *, cap: float, **k: Any) -> LossTerms:
    """A weight above the cap clamped to it instead of rejected."""
    return decoupled_ppo_loss(lp, lq, lb, a, cap=cap, above_cap="clip", **k)


def _wrong_unweighted(lp: Any, lq: Any, lb: Any, a: Any, **k: Any) -> LossTerms:
    """The behaviour weight forgotten (a kept token's loss is the plain PPO loss)."""
    cap = k.pop("cap", None)
    kept = decoupled_ppo_weights(lq, lb, cap=cap, mask=k.pop("mask", None)) > 0
    return ppo_clip_loss(lp, lq, a, mask=kept.astype(np.float64), **k)


def _wrong_current_weight(lp: Any, lq: Any, lb: Any, a: Any, **k: Any) -> LossTerms:
    """The weight taken against the current policy, π_θ/μ, instead of π_prox/μ."""
    w = np.exp(np.asarray(lp) - np.asarray(lb))
    base = decoupled_ppo_loss(lp, lq, lq, a, **k)
    return LossTerms(base.loss * w, base.grad * w)


def check_rejected_tokens_contribute_nothing(loss: Loss) -> Callable[[], None]:
    @given(token_batches(), st.lists(st.floats(-2.0, 2.0, allow_nan=False), min_size=1))
    def prop(batch: TokenBatch, shifts: list[float]) -> None:
        behav = _behaviour(batch, shifts)
        terms = loss(batch.logp, batch.logp_old, behav, batch.advantages, cap=2.0, mask=batch.mask)
        rejected = (batch.logp_old - behav > LN2) & (batch.mask > 0)
        assert np.all(terms.loss[rejected] == 0.0), terms.loss[rejected]
        assert np.all(terms.grad[rejected] == 0.0), terms.grad[rejected]

    return prop


def test_rejected_tokens_contribute_nothing() -> None:
    run_property(check_rejected_tokens_contribute_nothing(_right))


def test_rejection_property_rejects_a_clamped_weight() -> None:
    rejects(check_rejected_tokens_contribute_nothing(_wrong_clipped_weight))


def check_on_policy_gradient_is_weighted(loss: Loss) -> Callable[[], None]:
    @given(token_batches(), st.lists(st.floats(-1.0, 1.0, allow_nan=False), min_size=1))
    def prop(batch: TokenBatch, shifts: list[float]) -> None:
        behav = _behaviour(batch, shifts)
        terms = loss(batch.logp_old, batch.logp_old, behav, batch.advantages, mask=batch.mask)
        w = np.exp(batch.logp_old - behav)
        want = np.where(batch.mask > 0, -w * batch.advantages, 0.0)
        np.testing.assert_allclose(terms.grad, want, rtol=1e-14, atol=0.0)

    return prop


def test_on_policy_gradient_is_the_weighted_policy_gradient() -> None:
    run_property(check_on_policy_gradient_is_weighted(_right))


def test_on_policy_property_rejects_a_forgotten_weight() -> None:
    rejects(check_on_policy_gradient_is_weighted(_wrong_unweighted))


def check_behaviour_at_prox_is_ppo(loss: Loss) -> Callable[[], None]:
    @given(token_batches(max_log_ratio=0.6))
    def prop(batch: TokenBatch) -> None:
        lq = batch.logp_old
        terms = loss(batch.logp, lq, lq, batch.advantages, mask=batch.mask, cap=1.0)
        ppo = ppo_clip_loss(batch.logp, lq, batch.advantages, mask=batch.mask)
        np.testing.assert_array_equal(terms.loss, ppo.loss)
        np.testing.assert_array_equal(terms.grad, ppo.grad)

    return prop


def test_a_behaviour_equal_to_the_proximal_policy_is_ppo() -> None:
    run_property(check_behaviour_at_prox_is_ppo(_right))


def test_ppo_property_rejects_the_weight_against_the_current_policy() -> None:
    rejects(check_behaviour_at_prox_is_ppo(_wrong_current_weight))


# ---------------------------------------------------------------------------------------------
# (4) the spec rejects wrong candidates
# ---------------------------------------------------------------------------------------------


def _candidate(wrong: Loss | None, above_cap: Literal["mask", "clip"]) -> Callable[..., Any]:
    def candidate(*arrays: Any, cotangent: Any = None, **kw: Any) -> tuple[Array, Array]:
        if wrong is None:
            t = decoupled_ppo_loss(*arrays, above_cap=above_cap, cotangent=cotangent, **kw)
        else:
            t = wrong(*arrays, cotangent=cotangent, **kw)
        return t.loss, t.grad

    return candidate


@pytest.mark.parametrize("above_cap", ["mask", "clip"])
def test_the_spec_passes_the_reference(above_cap: Literal["mask", "clip"]) -> None:
    report = check_conformance(
        _candidate(None, above_cap),
        spec="decoupled_ppo_clip",
        conventions={"gradient": "returned", "above_cap": above_cap},
        max_examples=15,
    )
    assert report.ok, report


def _dropping_lower(lp: Any, lq: Any, lb: Any, a: Any, **k: Any) -> LossTerms:
    """The lower bound ignored."""
    k.pop("lower", None)
    return decoupled_ppo_loss(lp, lq, lb, a, **k)


@pytest.mark.parametrize("wrong", [_wrong_unweighted, _dropping_lower])
def test_the_spec_rejects_a_wrong_candidate(wrong: Loss) -> None:
    report = check_conformance(
        _candidate(wrong, "mask"),
        spec="decoupled_ppo_clip",
        conventions={"gradient": "returned"},
        checks=["values"],
        max_examples=40,
    )
    assert not report.ok, report


# ---------------------------------------------------------------------------------------------
# (5) refusals name the parameter
# ---------------------------------------------------------------------------------------------


def test_refusals_name_the_parameter() -> None:
    lp = np.zeros((1, 2))
    with pytest.raises(ValueError, match="logp_prox"):
        decoupled_ppo_loss(lp, np.zeros((1, 3)), lp, [1.0])
    with pytest.raises(ValueError, match="logp_behavior"):
        decoupled_ppo_loss(lp, lp, np.zeros((2, 2)), [1.0])
    with pytest.raises(ValueError, match="cap"):
        decoupled_ppo_loss(lp, lp, lp, [1.0], above_cap="clip")
    with pytest.raises(ValueError, match="cap"):
        decoupled_ppo_loss(lp, lp, lp, [1.0], cap=0.5)
    with pytest.raises(ValueError, match="eps_low"):
        decoupled_ppo_loss(lp, lp, lp, [1.0], eps_low=1.0)
    with pytest.raises(ValueError, match="cap"):  # w·loss beyond float64: a cap is the fix
        decoupled_ppo_loss([[0.0]], [[0.0]], [[-700.0]], [[1e10]])


# ---------------------------------------------------------------------------------------------
# (6) the row levels: the geometric-mean weight, the row rejected or clamped whole
# ---------------------------------------------------------------------------------------------


def test_hand_worked_row_levels() -> None:
    zero = np.zeros((3, 2))
    # log2 of π_prox/μ per token: rows (2, 0), (1, 1), (3, -3): geometric means 2, 2, 1 and
    # products 4, 4, 1; on-policy, A = 1 everywhere, so the gradient is −w per token
    behav = -LN2 * np.array([[2.0, 0.0], [1.0, 1.0], [3.0, -3.0]])
    mask = np.ones((3, 2))
    adv = np.ones((3, 2))
    geo = decoupled_ppo_loss(zero, zero, behav, adv, cap=2.0, level="geometric", mask=mask)
    assert geo.grad.tolist() == [[-2.0, -2.0], [-2.0, -2.0], [-1.0, -1.0]]  # means <= 2: kept
    seq = decoupled_ppo_loss(zero, zero, behav, adv, cap=2.0, level="sequence", mask=mask)
    assert seq.grad.tolist() == [[0.0, 0.0], [0.0, 0.0], [-1.0, -1.0]]  # products 4 > 2
    clip = decoupled_ppo_loss(zero, zero, behav, adv, cap=1.5, level="sequence", above_cap="clip")
    assert clip.grad.tolist() == [[-1.5, -1.5], [-1.5, -1.5], [-1.0, -1.0]]
    # an all-padding row has no weight and contributes nothing
    empty = decoupled_ppo_loss(zero, zero, behav, adv, cap=2.0, level="geometric", mask=mask * 0)
    assert empty.grad.tolist() == [[0.0, 0.0]] * 3


def _wrong_token_weight_in_rows(lp: Any, lq: Any, lb: Any, a: Any, **k: Any) -> LossTerms:
    """Each token's own ratio as its weight, the row's statistic deciding only the rejection."""
    rows = decoupled_ppo_loss(lp, lq, lb, a, level="geometric", **k)
    own = decoupled_ppo_loss(lp, lq, lb, a, **{**k, "cap": None, "lower": None})
    kept = rows.grad != 0.0
    return LossTerms(np.where(kept, own.loss, 0.0), np.where(kept, own.grad, 0.0))


def _right_rows(lp: Any, lq: Any, lb: Any, a: Any, **k: Any) -> LossTerms:
    return decoupled_ppo_loss(lp, lq, lb, a, level="geometric", **k)


def check_a_row_shares_one_weight(loss: Loss) -> Callable[[], None]:
    @given(token_batches(), st.lists(st.floats(-1.0, 1.0, allow_nan=False), min_size=1))
    def prop(batch: TokenBatch, shifts: list[float]) -> None:
        behav = _behaviour(batch, shifts)
        lq = batch.logp_old
        terms = loss(lq, lq, behav, batch.advantages, cap=3.0, mask=batch.mask)
        w = np.where(batch.mask > 0, terms.grad / -batch.advantages, 0.0)  # on-policy: −w·A
        for row, m in zip(w, batch.mask, strict=True):
            kept = row[m > 0]
            np.testing.assert_allclose(kept, kept[0], rtol=1e-14)

    return prop


def test_a_row_shares_one_weight() -> None:
    run_property(check_a_row_shares_one_weight(_right_rows))


def test_row_weight_property_rejects_the_token_weights() -> None:
    rejects(check_a_row_shares_one_weight(_wrong_token_weight_in_rows))


def test_an_overflowing_weighted_loss_is_refused_at_its_first_real_token() -> None:
    """A weight e^700 times an advantage 1e300 overflows: the refusal names the first such real
    token in row-major order and the cap that would bound it; at padding it is harmless."""
    zeros = [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    behaviour = [[0.0, -700.0, 0.0], [-700.0, 0.0, -700.0]]
    with pytest.raises(ValueError, match=r"cap must bound the behaviour weight") as err:
        decoupled_ppo_loss(zeros, zeros, behaviour, [1.0, 1e300])
    assert "Token (b=1, t=0) overflows with weight 1.01423205473500" in str(err.value)
    padded = decoupled_ppo_loss(zeros, zeros, behaviour, [1.0, 1e300], mask=[[1, 1, 1], [0, 1, 0]])
    assert padded.loss[1].tolist() == [0.0, -1e300, 0.0]
    assert padded.grad[1].tolist() == [0.0, -1e300, 0.0]


@pytest.mark.parametrize("level", ["token", "geometric", "sequence", "max"])
def test_a_dropped_token_is_never_read_by_the_ppo_term(
    level: Literal["token", "geometric", "sequence", "max"],
) -> None:
    """A token rejected by the weight, and a padded one, each hold log π_θ − log π_prox = 1000,
    whose ratio overflows float64: neither enters the PPO term, so the call is not refused and
    both come out exactly 0 (AReaL's exp before the mask turns the same input into NaN)."""
    logp = [[0.0, 1000.0, 1000.0], [0.0, 0.0, 1000.0]]
    prox = [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    behaviour = [[0.0, -4.0, 0.0], [0.0, 0.0, 0.0]]  # e^4, e^2 > cap: row 0 or its token 1 out
    terms = decoupled_ppo_loss(
        logp, prox, behaviour, [-1.0, -2.0], cap=5.0, level=level, mask=[[1, 1, 0], [1, 1, 0]]
    )  # negative advantages: a ratio of e^1000 read anywhere would make the loss +inf
    row0 = [1.0, 0.0, 0.0] if level == "token" else [0.0, 0.0, 0.0]
    assert terms.loss.tolist() == [row0, [2.0, 2.0, 0.0]]
    assert terms.grad.tolist() == [row0, [2.0, 2.0, 0.0]]
