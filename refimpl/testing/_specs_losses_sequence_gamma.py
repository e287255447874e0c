r"""Loss spec of VESPO (``vespo``): the detached gamma-kernel weight of the sequence ratio.

The reference is :func:`refimpl.losses.sequence_gamma.vespo_loss`. Its weight
:math:`\phi = \exp(\lambda + k\log w - \lambda w)` depends on the sequence's summed log-ratio
:math:`\log w`, whose rounding is the pairwise sum's over the row
(:math:`(\lceil\log_2 L\rceil + 1)\sum_t|d_t|` units of :math:`u`, no :math:`1/L`); ``exp``
turns it into a relative error of :math:`\phi` scaled by :math:`|d\log\phi/d\log w| =
|k - \lambda w|`; the sum :math:`\lambda + k\log w - \lambda w` itself rounds by
:math:`u(\lambda + |k\log w| + \lambda w)` (also where :math:`\log w` is clipped). The loss :math:`-\phi A\log\pi` and the gradient :math:`-c\phi A` add three and
four roundings. At ``logp == logp_old``, :math:`\phi = 1`: the token policy gradient.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import strategies as st
from numpy.typing import NDArray

from refimpl.testing._engine import Convention, Conventions, Spec
from refimpl.testing._specs_losses import LossDesc, Parts, Terms, ratio_error, resolve, row_error
from refimpl.testing._specs_losses_checks import loss_spec

Array = NDArray[np.float64]

__all__ = ["vespo_specs"]

_ARRAYS = ("logp", "logp_old", "advantages")
_TRL_RANGE = (math.log(1e-8), 20.0)
_FLOATS: dict[str, Any] = {"allow_nan": False, "allow_infinity": False, "allow_subnormal": False}

LOG_RATIO_CLAMP = Convention(
    "log_ratio_clamp",
    None,
    (None,),
    "c > 0: each token's log-ratio is clipped to [-c, c] before the sequence sum",
    number=True,
    who="20: TRL 1.16.0 GRPOTrainer.get_gamma_weights",
)
LOG_WEIGHT_RANGE = Convention(
    "log_weight_range",
    None,
    (None, "trl"),
    "the sequence's log-weight clipped to a range: None, or 'trl' = [log 1e-8, 20]",
    who="trl: TRL 1.16.0 GRPOTrainer.get_gamma_weights",
)


def _settings(conv: Conventions) -> dict[str, Any]:
    return {
        "log_ratio_clamp": conv["log_ratio_clamp"],
        "log_weight_range": _TRL_RANGE if conv["log_weight_range"] == "trl" else None,
    }


def _terms(p: Parts, conv: Conventions) -> Terms:
    loss, grad = resolve("losses.sequence_gamma.vespo_loss")(
        *(p.arrays[a] for a in _ARRAYS), mask=p.mask, cotangent=p.cotangent, **p.params,
        **_settings(conv),
    )  # fmt: skip
    return np.asarray(loss), np.asarray(grad)


def _params(conv: Conventions) -> st.SearchStrategy[dict[str, Any]]:
    k = st.one_of(st.sampled_from([2.0, 3.0, 0.0]), st.floats(0.0, 5.0, **_FLOATS))
    lam = st.one_of(st.sampled_from([3.0, 2.0]), st.floats(0.1, 5.0, **_FLOATS))
    return st.builds(
        lambda a, b, c, d: {"k_pos": a, "lambda_pos": b, "k_neg": c, "lambda_neg": d},
        k, lam, k, lam,
    )  # fmt: skip


def _condition(p: Parts, conv: Conventions, loss: Array, grad: Array) -> Terms:
    m = p.mask
    k_tok = ratio_error(p, conv)
    kd = row_error(p, conv, k_tok) * np.maximum(m.sum(axis=1, keepdims=True), 1.0)  # Σ, not mean
    x, y = np.asarray(p.arrays["logp"]), np.asarray(p.arrays["logp_old"])
    d = np.where(m > 0, x - y, 0.0)
    clamp = conv["log_ratio_clamp"]
    if clamp is not None:
        d = np.clip(d, -clamp, clamp)
    low, high = _TRL_RANGE if conv["log_weight_range"] == "trl" else (-np.inf, np.inf)
    log_w = d.sum(axis=1, keepdims=True)
    inside = (log_w >= low) & (log_w <= high)
    log_w = np.clip(log_w, low, high)
    a = np.where(m > 0, np.asarray(p.arrays["advantages"], dtype=np.float64), 0.0)
    kk = np.where(a >= 0, p.params["k_pos"], p.params["k_neg"])
    lam = np.where(a >= 0, p.params["lambda_pos"], p.params["lambda_neg"])
    with np.errstate(over="ignore", invalid="ignore"):
        w = np.exp(log_w)
        slope = np.where(inside, np.abs(kk - lam * w), 0.0)
        # log φ = λ + k·log w − λ·w rounds by u·(λ + |k log w| + λw) (a clamped log w too)
        terms = 2.0 * (lam + np.abs(kk * log_w) + lam * w)
        k_phi = np.nan_to_num(slope * kd + terms, nan=0.0, posinf=np.inf) + 3.0
        return np.abs(loss) * (k_phi + 3.0), np.abs(grad) * (k_phi + 4.0)


VESPO = LossDesc(
    "vespo",
    "losses.sequence_gamma.vespo_loss",
    "candidate(logp, logp_old, advantages, *, k_pos, lambda_pos, k_neg, lambda_neg, mask)",
    _ARRAYS,
    _terms,
    _condition,
    _params,
    conventions=(LOG_RATIO_CLAMP, LOG_WEIGHT_RANGE),
    sequence_ratio=True,
    sequence_advantages=True,
    boundaries=False,
    guesses={"log_ratio_clamp": [20.0]},
)


def vespo_specs() -> tuple[Spec, ...]:
    """The spec ``vespo``."""
    return (loss_spec(VESPO),)
