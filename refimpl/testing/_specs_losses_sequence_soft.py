r"""Loss specs of CISPO and SAPO with the sequence ratio (``cispo_sequence``, ``sapo_sequence``).

The references are :func:`refimpl.losses.sequence_soft.cispo_sequence_loss` and
:func:`~refimpl.losses.sequence_soft.sapo_sequence_loss`. The rounding model is the token-level
CISPO's and SAPO's (``_specs_losses_table``) with the sequence ratio's relative error
:math:`K_b` (GSPO's: the pairwise mean of the row's log-ratios) in place of a token ratio's. CISPO's
detached weight couples nothing, so its on-policy gradient is the token one, :math:`-A\,c`; SAPO's
gate is differentiated through the mean, so its gradient at every valid token of row ``b`` is a
row sum divided by :math:`L_b`, and at ``logp == logp_old`` it is
:math:`-\sum_t c_{bt}A_{bt}/L_b`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import strategies as st
from numpy.typing import NDArray

from refimpl.testing._engine import Conventions, Spec
from refimpl.testing._specs_losses import (
    LossDesc,
    Parts,
    Terms,
    ratio_error,
    resolve,
    row_error,
    shift_ratio,
)
from refimpl.testing._specs_losses_checks import loss_spec
from refimpl.testing.tolerances import summation_factor

Array = NDArray[np.float64]

__all__ = ["sequence_soft_specs"]

_ARRAYS = ("logp", "logp_old", "advantages")
_FLOATS: dict[str, Any] = {"allow_nan": False, "allow_infinity": False, "allow_subnormal": False}


def _adv(p: Parts) -> Array:
    return np.where(p.mask > 0, np.asarray(p.arrays["advantages"], dtype=np.float64), 0.0)


def _terms(name: str) -> Any:
    def terms(p: Parts, conv: Conventions) -> Terms:
        loss, grad = resolve(f"losses.sequence_soft.{name}")(
            *(p.arrays[a] for a in _ARRAYS), mask=p.mask, cotangent=p.cotangent, **p.params
        )
        return np.asarray(loss), np.asarray(grad)

    return terms


def _ratio(p: Parts, conv: Conventions) -> tuple[Array, Array, Array]:
    """(s_b, K_b, L_b) per token: the geometric-mean ratio, its relative error, the length."""
    m = p.mask
    k = ratio_error(p, conv)
    kb = row_error(p, conv, k) + 3.0
    lengths = np.maximum(m.sum(axis=1, keepdims=True), 1.0)
    x, y = np.asarray(p.arrays["logp"]), np.asarray(p.arrays["logp_old"])
    mean = np.where(m > 0, x - y, 0.0).sum(axis=1, keepdims=True) / lengths
    with np.errstate(over="ignore"):
        s = np.broadcast_to(np.exp(mean), m.shape)
    return np.asarray(s), kb, np.broadcast_to(lengths, m.shape)


# ---------------------------------------------------------------------------------------------
# CISPO
# ---------------------------------------------------------------------------------------------


def _cispo_params(conv: Conventions) -> st.SearchStrategy[dict[str, Any]]:
    high = st.one_of(st.sampled_from([0.28, 0.2, 4.0]), st.floats(0.0, 5.0, **_FLOATS))
    return st.builds(lambda h: {"eps_high": h}, high)


def _cispo_condition(p: Parts, conv: Conventions, loss: Array, grad: Array) -> Terms:
    s, kb, _ = _ratio(p, conv)
    live = s <= 1.0 + float(p.params["eps_high"])
    lp = np.where(p.mask > 0, np.asarray(p.arrays["logp"], dtype=np.float64), 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        sens = np.where(live, np.abs(_adv(p) * lp) * s, 0.0)
        return sens * (kb + 1.0) + 3.0 * np.abs(loss), np.abs(grad) * (kb + 3.0)


def _cispo_edges(params: dict[str, Any], conv: Conventions) -> list[float]:
    return [math.log1p(params.get("eps_high", 0.28))]


# ---------------------------------------------------------------------------------------------
# SAPO
# ---------------------------------------------------------------------------------------------


def _sapo_params(conv: Conventions) -> st.SearchStrategy[dict[str, Any]]:
    tau = st.one_of(st.sampled_from([1.0, 1.05, 0.5, 10.0]), st.floats(0.1, 10.0, **_FLOATS))
    return st.builds(lambda a, b: {"tau_pos": a, "tau_neg": b}, tau, tau)


def _sapo_condition(p: Parts, conv: Conventions, loss: Array, grad: Array) -> Terms:
    a = _adv(p)
    s, kb, lengths = _ratio(p, conv)
    tau = np.where(a > 0, p.params["tau_pos"], p.params["tau_neg"])
    with np.errstate(over="ignore", invalid="ignore"):
        x = tau * (s - 1.0)
        sig = np.exp(-np.logaddexp(0.0, -x))
        bell = np.exp(-np.logaddexp(0.0, -x) - np.logaddexp(0.0, x))  # σ(1 − σ)
        slope = 4.0 * np.abs(a) * bell * s
        cv = slope * (kb + 2.0) + 4.0 * np.abs(a) * bell * np.abs(s - 1.0) + 3.0 * np.abs(loss)
        spread = np.abs(1.0 - 2.0 * sig) * (tau * s * (kb + 2.0) + np.abs(x))
        weight = np.abs(p.cotangent) * (p.mask > 0)
        term = np.where(
            weight > 0, weight * (slope * (spread + kb + 5.0) + 8.0 * np.abs(a) * sig * s), 0.0
        )
        plain = np.where(weight > 0, weight * slope, 0.0)
        factor = summation_factor(int(p.mask.shape[1]))
        row = (term.sum(axis=1, keepdims=True) + factor * plain.sum(axis=1, keepdims=True)) / (
            lengths[:, :1]
        )
        cg = np.broadcast_to(row, p.mask.shape) * p.mask + np.abs(grad)
    return np.where(p.mask > 0, cv, 0.0), cg


def _no_clip(conv: Conventions) -> str | None:
    return "a smooth gate has no clipped region"


_SIG = "candidate(logp, logp_old, advantages, *, {}, mask)"

CISPO_SEQUENCE = LossDesc(
    "cispo_sequence",
    "losses.sequence_soft.cispo_sequence_loss",
    _SIG.format("eps_high"),
    _ARRAYS,
    _terms("cispo_sequence_loss"),
    _cispo_condition,
    _cispo_params,
    edges=_cispo_edges,
    sequence_ratio=True,
    sequence_advantages=True,
    shifted=shift_ratio,
)
SAPO_SEQUENCE = LossDesc(
    "sapo_sequence",
    "losses.sequence_soft.sapo_sequence_loss",
    _SIG.format("tau_pos, tau_neg"),
    _ARRAYS,
    _terms("sapo_sequence_loss"),
    _sapo_condition,
    _sapo_params,
    on_policy="sequence",
    clips=_no_clip,
    sequence_ratio=True,
    sequence_advantages=True,
    boundaries=False,
)


def sequence_soft_specs() -> tuple[Spec, ...]:
    """The specs ``cispo_sequence`` and ``sapo_sequence``."""
    return (loss_spec(CISPO_SEQUENCE), loss_spec(SAPO_SEQUENCE))
