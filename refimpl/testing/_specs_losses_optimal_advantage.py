r"""Specs of A*-PO: the optimal value estimate (value only) and the regression loss.

``optimal_value_estimate`` checks a candidate against
:func:`refimpl.losses.optimal_advantage.optimal_value_estimate`:
:math:`\hat V^* = \beta_1(\log\sum_i e^{r_i/\beta_1} - \log n)` per prompt, on rewards in
[−4, 4] (binary ones among them, A*-PO's case) and :math:`\beta_1` in [1/16, 4] (TRL's default
0.5). Derived tolerance (units of :math:`u`): a logsumexp computed as
:math:`\beta_1\cdot\mathrm{logsumexp}(r/\beta_1)` rounds :math:`r/\beta_1` and the sum, so its
error is :math:`(f_n + 3)(\max_i|r_i| + \beta_1\log n) + |\hat V^*|` (the subtraction of
:math:`\log n` happens at the scale of the logsumexp, not of the result).

``optimal_advantage_regression`` checks a candidate against
:func:`refimpl.losses.optimal_advantage.optimal_advantage_regression_loss`:
:math:`(\beta_2 D_b - A_b)^2` at each valid token, :math:`D_b` the sequence log-ratio to the
reference, with the loss family's checks (value, gradient, padding, huge log-ratios) through
:func:`~refimpl.testing._specs_losses_checks.loss_spec`. Derived tolerance: the candidate's
:math:`D_b` (two pairwise sums of log-probabilities, subtracted) has error
:math:`f_T(\sum_t|\log\pi| + |\log\pi^{\text{ref}}|) + |D_b|`, and
:math:`e = \beta_2 D_b - A_b` adds :math:`|\beta_2 D_b| + |e|`; the loss :math:`e^2` has
:math:`2|e|\,\delta e + |e^2|`, the gradient :math:`2\beta_2 \sum_t|c_{bt}|(\delta e + (f_T +
2)|e|)`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

from refimpl.losses.optimal_advantage import optimal_value_estimate
from refimpl.testing._arrays import ArrayBridge
from refimpl.testing._engine import Call, Case, Check, Conventions, Spec
from refimpl.testing._specs_losses import Array, LossDesc, Parts, Terms, resolve
from refimpl.testing._specs_losses_checks import loss_spec
from refimpl.testing.tolerances import summation_factor

__all__ = ["optimal_advantage_specs"]

_REFERENCE = "losses.optimal_advantage.optimal_advantage_regression_loss"
_ARRAYS = ("logp", "logp_ref", "advantages")


def _floats(low: float, high: float) -> st.SearchStrategy[float]:
    return st.floats(low, high, allow_nan=False, allow_infinity=False, allow_subnormal=False)


# --- the optimal value ---------------------------------------------------------------------------


@st.composite
def _value_call(
    draw: st.DrawFn, conv: Conventions, shift: bool = False, cold: bool = False
) -> list[Call]:
    prompts, n = draw(st.integers(1, 4)), draw(st.integers(1, 8))
    cells = prompts * n
    values = st.one_of(st.sampled_from([0.0, 1.0]), _floats(-4.0, 4.0))
    rewards = np.asarray(draw(st.lists(values, min_size=cells, max_size=cells))).reshape(prompts, n)
    beta1 = draw(st.one_of(st.sampled_from([0.5, 0.0625, 4.0]), _floats(0.0625, 4.0)))
    if cold:
        beta1 = draw(st.sampled_from([2.0**-10, 2.0**-14, 2.0**-20]))
    call: Call = ((rewards,), {"beta1": beta1})
    if not shift:
        return [call]
    moved = float(draw(st.sampled_from([1.0, -2.0, 0.5])))
    return [call, ((rewards + moved,), {"beta1": beta1})]


def _value_expected(call: Call, conv: Conventions) -> Array:
    (rewards,), kw = call
    return optimal_value_estimate(rewards, **kw)


def _value_condition(call: Call, conv: Conventions, expected: Any) -> Array:
    (rewards,), kw = call
    r = np.abs(np.asarray(rewards, dtype=np.float64))
    n = r.shape[1]
    scale = r.max(axis=1) + float(kw["beta1"]) * np.log(n)
    found = np.abs(np.asarray(expected, dtype=np.float64))
    return np.asarray((summation_factor(n) + 3.0) * scale + found, dtype=np.float64)


def _value_found(case: Case, i: int = 0) -> Array:
    found = np.asarray(case.found[i], dtype=np.float64)
    want = np.asarray(case.expected(i)).shape
    assert found.shape == want, f"V* of shape {found.shape}, expected {want}"
    return found


def _value_agrees(case: Case) -> None:
    found = _value_found(case)
    case.show("found:   ", found)
    case.show("expected:", case.expected())
    case.assert_close(found, case.expected(), case.condition(), "the optimal values")


def _between_mean_and_max(case: Case) -> None:
    """mean_i r_i <= V* <= max_i r_i (within the candidate's rounding)."""
    found = _value_found(case)
    r = np.asarray(case.calls[0][0][0], dtype=np.float64)
    slack = case.allowed(case.expected(), case.condition())
    low, high = r.mean(axis=1) - slack, r.max(axis=1) + slack
    case.show("found:", found, "mean:", r.mean(axis=1), "max:", r.max(axis=1))
    bad = (found < low) | (found > high)
    assert not bad.any(), (
        f"V* {found[bad].tolist()} is outside [mean, max] = "
        f"{list(zip(r.mean(axis=1)[bad].tolist(), r.max(axis=1)[bad].tolist(), strict=True))}"
    )


def _shifts_with_the_rewards(case: Case) -> None:
    """Adding c to every reward adds c to V*."""
    a, b = _value_found(case, 0), _value_found(case, 1)
    c = float(np.asarray(case.calls[1][0][0]).flat[0] - np.asarray(case.calls[0][0][0]).flat[0])
    allowed = case.allowed(case.expected(0), case.condition(0)) + case.allowed(
        case.expected(1), case.condition(1)
    )
    case.show("moved by:", b - a, "shift:", c)
    bad = np.abs(b - a - c) > allowed + case.allowed(c, abs(c))
    assert not bad.any(), f"V* moved by {(b - a)[bad].tolist()}, not by the shift {c}"


def _near_the_maximum(case: Case) -> None:
    """A small β₁: max + β₁·log(k/n) <= V* <= max, k the number of maxima (claim OV1)."""
    found = _value_found(case)
    r = np.asarray(case.calls[0][0][0], dtype=np.float64)
    beta1 = float(case.calls[0][1]["beta1"])
    top = r.max(axis=1)
    k = (r == top[:, None]).sum(axis=1)
    slack = case.allowed(case.expected(), case.condition())
    low = top + beta1 * np.log(k / r.shape[1]) - slack
    case.show("found:", found, "max:", top, "lowest allowed:", low)
    bad = (found < low) | (found > top + slack)
    assert not bad.any(), (
        f"with beta1 = {beta1} V* {found[bad].tolist()} is not within beta1·log(n/k) below the "
        f"maximum {top[bad].tolist()}"
    )


def _value_spec() -> Spec:
    return Spec(
        name="optimal_value_estimate",
        reference="losses.optimal_advantage.optimal_value_estimate",
        signature="candidate(rewards, *, beta1) -> (P,) (rewards (P, n))",
        read=lambda raw, call, conv: ArrayBridge.to_numpy(raw),
        expected=_value_expected,
        condition=_value_condition,
        checks=(
            Check(
                "values",
                "V* agrees with refimpl.losses.optimal_advantage.optimal_value_estimate",
                lambda conv: _value_call(conv),
                _value_agrees,
            ),
            Check(
                "between_mean_and_max",
                "V* lies between the mean and the maximum of the prompt's rewards",
                lambda conv: _value_call(conv),
                _between_mean_and_max,
            ),
            Check(
                "shift_equivariance",
                "adding a constant to every reward adds it to V*",
                lambda conv: _value_call(conv, shift=True),
                _shifts_with_the_rewards,
            ),
            Check(
                "maximum_at_small_beta1",
                "with beta1 -> 0 V* tends to the maximum: within beta1·log(n/k) below it "
                "(no overflow of e^{r/beta1})",
                lambda conv: _value_call(conv, cold=True),
                _near_the_maximum,
            ),
        ),
    )


# --- the regression loss -------------------------------------------------------------------------


def _terms(p: Parts, conv: Conventions) -> Terms:
    loss, grad = resolve(_REFERENCE)(
        *(p.arrays[a] for a in _ARRAYS), mask=p.mask, cotangent=p.cotangent, **p.params
    )
    return np.asarray(loss), np.asarray(grad)


def _condition(p: Parts, conv: Conventions, loss: Array, grad: Array) -> Terms:
    m = p.mask > 0
    lp, ref = np.asarray(p.arrays["logp"]), np.asarray(p.arrays["logp_ref"])
    a = np.where(m, np.asarray(p.arrays["advantages"], dtype=np.float64), 0.0)
    beta2 = float(p.params["beta2"])
    f = summation_factor(int(p.mask.shape[1]))
    d = np.where(m, lp - ref, 0.0).sum(axis=1, keepdims=True)
    spread = np.where(m, np.abs(lp) + np.abs(ref), 0.0).sum(axis=1, keepdims=True)
    e = beta2 * d - a
    de = beta2 * (f * spread + np.abs(d)) + np.abs(beta2 * d) + np.abs(e)
    cv = 2.0 * np.abs(e) * de + e * e
    weight = np.abs(p.cotangent * p.mask).sum(axis=1, keepdims=True)
    row = (2.0 * beta2 * weight * (de + (f + 2.0) * np.abs(e))).max(axis=1, keepdims=True)
    cg = np.broadcast_to(row, p.mask.shape) + np.abs(grad)
    return np.where(m, cv, 0.0), np.where(m, cg, 0.0)


def _params(conv: Conventions) -> st.SearchStrategy[dict[str, Any]]:
    beta2 = st.one_of(st.sampled_from([1e-3, 0.5, 1.0]), _floats(1e-3, 2.0))
    return beta2.map(lambda b: {"beta2": b})


DESC = LossDesc(
    "optimal_advantage_regression",
    _REFERENCE,
    "candidate(logp, logp_ref, advantages, *, beta2, mask)",
    _ARRAYS,
    _terms,
    _condition,
    _params,
    on_policy=None,
    sequence_advantages=True,
    # D_b is a sum over the row: the huge draws' advantage signs follow the row, not the token
    sequence_ratio=True,
    boundaries=False,
)


def optimal_advantage_specs() -> tuple[Spec, ...]:
    """The specs ``optimal_value_estimate`` and ``optimal_advantage_regression``."""
    return (_value_spec(), loss_spec(DESC))
