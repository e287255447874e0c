r"""Loss specs of the surrogates on the sequence-likelihood ratio (the product of token ratios).

``sequence_ppo_clip`` checks a candidate against
:func:`refimpl.losses.sequence_product.sequence_ppo_clip_loss`: PPO-clip once per sequence, the
ratio :math:`S_b = \exp(\sum_t d_{bt})` (TRL 1.16.0 ``RLOOTrainer._compute_loss``). Its rounding
model is GSPO's with the sum in place of the mean: the pairwise sum of the :math:`L_b` log-ratios
has absolute error :math:`(\lceil\log_2 L_b\rceil + 1)\,u\sum_t|d_t|`, which ``exp`` turns into the
relative error of :math:`S_b` (no :math:`1/L_b`), and the gradient at each valid token sums
:math:`c_{bt}A_{bt}S_b` over the row. At ``logp == logp_old`` the gradient is
:math:`-\sum_t c_{bt}A_{bt}` at every valid token of row ``b`` (the on-policy check, replacing the
sequence-mean form of GSPO's).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from hypothesis import strategies as st
from numpy.typing import NDArray

from refimpl.testing._engine import Call, Case, Check, Conventions, Spec
from refimpl.testing._specs_losses import (
    LossDesc,
    Parts,
    Terms,
    calls,
    parts,
    ratio_error,
    resolve,
    row_error,
    shift_ratio,
)
from refimpl.testing._specs_losses_checks import _describe, loss_spec
from refimpl.testing.tolerances import summation_factor

Array = NDArray[np.float64]

__all__ = ["sequence_product_specs"]

_REFERENCE = "losses.sequence_product.sequence_ppo_clip_loss"
_ARRAYS = ("logp", "logp_old", "advantages")
_OPEN = {"eps_low": 1.0 - 2.0**-40, "eps_high": 1e300}


def _adv(p: Parts) -> Array:
    return np.where(p.mask > 0, np.asarray(p.arrays["advantages"], dtype=np.float64), 0.0)


def _call(p: Parts, **kw: Any) -> Terms:
    loss, grad = resolve(_REFERENCE)(
        *(p.arrays[a] for a in _ARRAYS), mask=p.mask, cotangent=p.cotangent, **kw
    )
    return np.asarray(loss), np.asarray(grad)


def _terms(p: Parts, conv: Conventions) -> Terms:
    return _call(p, **p.params)


def _open(p: Parts, conv: Conventions) -> Terms:
    return _call(p, **_OPEN)


def _ratio(p: Parts, conv: Conventions) -> tuple[Array, Array]:
    """(S_b per token, K_b per token): the product ratio and its relative error in units of u."""
    m = p.mask
    k = ratio_error(p, conv)
    lengths = m.sum(axis=1, keepdims=True)
    kb = row_error(p, conv, k) * np.maximum(lengths, 1.0) + 3.0  # the row's Σ, not its mean
    x, y = np.asarray(p.arrays["logp"]), np.asarray(p.arrays["logp_old"])
    total = np.where(m > 0, x - y, 0.0).sum(axis=1, keepdims=True)
    with np.errstate(over="ignore"):
        s = np.broadcast_to(np.exp(total), m.shape)
    return np.asarray(s), kb


def _eps(p: Parts) -> tuple[float, float]:
    low = float(p.params["eps_low"])
    high = low if p.params.get("eps_high") is None else float(p.params["eps_high"])
    return low, high


def _condition(p: Parts, conv: Conventions, loss: Array, grad: Array) -> Terms:
    s, kb = _ratio(p, conv)
    a = _adv(p)
    low, high = _eps(p)
    live = ((a > 0) & (s <= 1.0 + high)) | ((a < 0) & (s >= 1.0 - low))
    with np.errstate(invalid="ignore", over="ignore"):
        cv = np.where(live, np.abs(a) * s * kb, 0.0) + 2.0 * np.abs(loss)
        weight = np.abs(a * p.cotangent) * live
        row = np.where(weight > 0, weight * s, 0.0).sum(axis=1, keepdims=True)
        factor = summation_factor(int(p.mask.shape[1]))
        cg = np.broadcast_to(row, p.mask.shape) * (kb + factor + 3.0) * p.mask
    return np.where(p.mask > 0, cv, 0.0), cg + np.abs(grad)


def _branches(p: Parts, conv: Conventions) -> list[tuple[Array, Array]]:
    """(−A S, −A·clip(S)) with S the product ratio."""
    a = _adv(p)
    s, _ = _ratio(p, conv)
    low, high = _eps(p)
    inside = (s > 1.0 - low) & (s < 1.0 + high)
    with np.errstate(over="ignore", invalid="ignore"):
        return [(-a * s, np.where(inside, np.inf, -a * np.clip(s, 1.0 - low, 1.0 + high)))]


def _params(conv: Conventions) -> st.SearchStrategy[dict[str, Any]]:
    floats = st.floats(0.0, 0.6, allow_nan=False, allow_infinity=False, allow_subnormal=False)
    high = st.floats(0.0, 1.0, allow_nan=False, allow_infinity=False, allow_subnormal=False)
    eps = st.one_of(st.sampled_from([0.2, 0.1]), floats)
    top = st.one_of(st.none(), st.sampled_from([0.28, 0.2]), high)
    return st.builds(lambda e, h: {"eps_low": e, "eps_high": h}, eps, top)


def _edges(params: dict[str, Any], conv: Conventions) -> list[float]:
    """The log-ratios of the clip bounds (a one-token row, or a row whose other tokens are 0)."""
    low = float(params.get("eps_low", 0.2))
    high = low if params.get("eps_high") is None else float(params["eps_high"])
    return [math.log1p(-low) if low < 1.0 else -30.0, math.log1p(high)]


def _shifted(desc: LossDesc, call: Call, case: Case) -> tuple[list[Call], Array]:
    """GSPO's shift; the row's ratio moves by the sum of its tokens' moves (at most L_b·max)."""
    moved, drift = shift_ratio(desc, call, case)
    lengths = np.asarray(call[1]["mask"], dtype=np.float64).sum(axis=1, keepdims=True)
    with np.errstate(over="ignore"):
        grown = np.expm1(np.log1p(drift) * np.maximum(lengths, 1.0))
    return moved, np.asarray(grown, dtype=np.float64)


def _clips(conv: Conventions) -> str | None:
    return None


def _on_policy(case: Case) -> None:
    """At logp == logp_old: −Σ_t c_bt A_bt at every valid token of row b (a call that is not
    on-policy, such as an explicit example for another check, is not judged here)."""
    for i in range(len(case.calls)):
        p = parts(DESC, case.calls[i], case.conventions)
        mask = p.mask
        x, y = np.asarray(p.arrays["logp"]), np.asarray(p.arrays["logp_old"])
        if np.any((x != y) & (mask > 0)):
            continue
        a = _adv(p)
        c = p.cotangent * mask
        row = -(a * c).sum(axis=1, keepdims=True)
        pg = np.broadcast_to(row, mask.shape) * mask
        scale = np.abs(a * c).sum(axis=1, keepdims=True)
        cond = np.broadcast_to(scale, mask.shape) * (summation_factor(mask.shape[1]) + 4.0)
        grad = case.found[i][1]
        ok = case.close(grad, pg, cond)
        assert ok.all(), (
            "at logp == logp_old the gradient is not the sequence's policy gradient "
            "−Σ_t c·A: "
            + _describe(case, grad, pg, cond, ok, "the gradients").replace(
                "from the reference", "from −Σ_t c·A"
            )
        )


DESC = LossDesc(
    "sequence_ppo_clip",
    _REFERENCE,
    "candidate(logp, logp_old, advantages, *, eps_low, eps_high, mask)",
    _ARRAYS,
    _terms,
    _condition,
    _params,
    edges=_edges,
    on_policy=None,
    clips=_clips,
    sequence_ratio=True,
    sequence_advantages=True,
    shifted=_shifted,
    unclipped=_open,
    branches=_branches,
)


def sequence_product_specs() -> tuple[Spec, ...]:
    """The spec ``sequence_ppo_clip``, with its on-policy check after the padding check."""
    spec = loss_spec(DESC)
    on_policy = Check(
        "on_policy_is_policy_gradient",
        "at logp == logp_old the gradient is the sequence's policy gradient −Σ_t c·A at every "
        "valid token (no 1/L: the product ratio)",
        calls(DESC, "on_policy"),
        _on_policy,
    )
    checks = list(spec.checks)
    at = next(i for i, c in enumerate(checks) if c.name == "padding_contributes_nothing") + 1
    checks.insert(at, on_policy)
    return (dataclasses.replace(spec, checks=tuple(checks)),)
