r"""The KL loss specs: ``kl_penalty`` and ``importance_weighted_kl`` against refimpl.losses.kl.

The estimator, the weighting of an off-policy KL and the clamps are conventions (a framework
implements one estimator); the rounding-error model, with :math:`d` the log-ratio to the reference
policy and :math:`\delta = |d| + 1` its absolute rounding error in units of :math:`u`:
``k1``/``abs``: :math:`\delta + |k|`; ``k2``: :math:`|d|\delta + 2|k|`; ``k3`` computed naively as
:math:`e^{-d} + d - 1`: :math:`|1 - e^{-d}|\delta + 2e^{-d} + |d| + 2` (an absolute error: the sum
cancels near :math:`d = 0`); the gradient :math:`c\,\partial k`: ``k3`` :math:`|c|(e^{-d}(\delta + 2)
+ 1)`, a straight-through ``X+`` :math:`|c|(|d| + \delta)`. An importance weight
:math:`w = e^{\log\pi - \log\mu}` multiplies these and adds its own :math:`(|\log w| + 3)` relative
rounding (and, where it underflows, the subnormal spacing).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import strategies as st

from refimpl.testing._engine import Convention, Conventions
from refimpl.testing._specs_losses import (
    Array,
    LossDesc,
    Parts,
    Terms,
    ratio_error,
    resolve,
    shift_ratio,
)

__all__ = ["kl_descs"]


def _ref(name: str, p: Parts, arrays: tuple[str, ...], **kw: Any) -> Terms:
    loss, grad = resolve(name)(
        *(p.arrays[a] for a in arrays), mask=p.mask, cotangent=p.cotangent, **kw
    )
    return np.asarray(loss), np.asarray(grad)


ESTIMATORS = ("k3", "k1", "abs", "k2", "k1+", "abs+", "k2+", "k3+", "low_var_kl", "low_var_kl+")
ESTIMATOR = Convention(
    "estimator",
    "k3",
    ESTIMATORS,
    "the KL estimator the candidate implements ('+': the value of X with the gradient of k2)",
    who="low_var_kl: verl 0.9.1 kl_penalty_forward 'k3'/'low_var_kl' (clamps 20 and 10); "
    "'k3+': verl 0.9.1 kl_penalty straight-through; k3: TRL 1.16.0 (per_token_kl)",
)
KL_CLAMP = Convention(
    "clamp",
    None,
    (None,),
    "c > 0: the KL estimate is clamped to [−c, c]",
    number=True,
    who="10: OpenRLHF 0.11.2 compute_approx_kl (every estimator), SkyRL 0.3.0 "
    "compute_approx_kl (k3 only)",
)
KL_LOG_CLAMP = Convention(
    "log_ratio_clamp",
    None,
    (None,),
    "c > 0: the log-ratio is clipped to [−c, c] before the estimator",
    number=True,
    who="20: SkyRL 0.3.0 compute_approx_kl (k3); verl's low_var_kl fixes it (estimator=)",
)

# ---------------------------------------------------------------------------------------------
# KL estimators
# ---------------------------------------------------------------------------------------------


def _kl_terms(p: Parts, conv: Conventions) -> Terms:
    est = conv["estimator"]
    clamps = {}
    if not est.startswith("low_var_kl"):
        clamps = {"clamp": conv["clamp"], "log_ratio_clamp": conv["log_ratio_clamp"]}
    return _ref("losses.kl.kl_penalty", p, ("logp", "logp_ref"), estimator=est, **clamps)


def _kl_condition(p: Parts, conv: Conventions, loss: Array, grad: Array) -> Terms:
    est = conv["estimator"]
    stem = est.rstrip("+")
    log_clamp = conv["log_ratio_clamp"]
    if stem == "low_var_kl":
        stem, log_clamp = "k3", 20.0
    x, y = np.asarray(p.arrays["logp"]), np.asarray(p.arrays["logp_ref"])
    raw = np.where(p.mask > 0, x - y, 0.0)
    d = raw if log_clamp is None else np.clip(raw, -log_clamp, log_clamp)
    derr = ratio_error(p, conv, "logp", "logp_ref") - 3.0 + 1.0  # |d| (+ inputs) + 1
    c = np.abs(p.cotangent)
    with np.errstate(over="ignore", invalid="ignore"):
        if stem == "k3":
            e = np.exp(-d)
            cv = np.abs(1.0 - e) * derr + 2.0 * e + np.abs(d) + 2.0
            cg = c * (e * (derr + 2.0) + 1.0)
        elif stem == "k2":
            cv, cg = np.abs(d) * derr + 2.0 * np.abs(loss), c * derr
        else:
            cv, cg = derr + np.abs(loss), c
    if est.endswith("+"):
        cg = c * (np.abs(raw) + derr)
    cv = np.where(p.mask > 0, cv + np.abs(loss), 0.0)
    return cv, np.where(p.mask > 0, cg + 2.0 * np.abs(grad), 0.0)


def _kl_clips(conv: Conventions) -> str | None:
    est = conv["estimator"]
    if est.endswith("+"):
        return "a straight-through estimator's gradient ignores the clamps"
    if est == "low_var_kl" or conv["clamp"] is not None or conv["log_ratio_clamp"] is not None:
        return None
    return "no clamp is declared"


WEIGHTING = Convention(
    "weighting",
    "detached",
    ("detached", "differentiable", "gradient_only"),
    "the importance weight w = π/μ of an off-policy KL: value w·k with a detached w, value w·k "
    "with w differentiated, or value k with gradient w·∂k",
    who="differentiable: TRL 1.16.0 use_bias_correction_kl (per_token_kl * coef_1); "
    "gradient_only: OpenRLHF 0.11.2 compute_approx_kl(unbiased_gradient=True)",
)
WEIGHT_CAP = Convention(
    "weight_cap",
    None,
    (None,),
    "C >= 1: the importance weight is capped at C",
    number=True,
    who="10: OpenRLHF 0.11.2 compute_approx_kl (unbiased_gradient)",
)


def _iw_kl_terms(p: Parts, conv: Conventions) -> Terms:
    est = conv["estimator"]
    clamps = {}
    if not est.startswith("low_var_kl"):
        clamps = {"clamp": conv["clamp"], "log_ratio_clamp": conv["log_ratio_clamp"]}
    return _ref(
        "losses.kl.importance_weighted_kl",
        p,
        ("logp", "logp_ref", "logp_behavior"),
        estimator=est,
        weighting=conv["weighting"],
        weight_cap=conv["weight_cap"],
        **clamps,
    )


def _iw_kl_condition(p: Parts, conv: Conventions, loss: Array, grad: Array) -> Terms:
    """k's conditions times the weight, plus the weight's own rounding (|log w| + 3) on both."""
    x, z = np.asarray(p.arrays["logp"]), np.asarray(p.arrays["logp_behavior"])
    lw = np.where(p.mask > 0, x - z, 0.0)
    cap = math.inf if conv["weight_cap"] is None else float(conv["weight_cap"])
    with np.errstate(over="ignore"):
        w = np.minimum(np.exp(lw), cap)
    kw = np.abs(lw) + 3.0
    k_loss, k_grad = _kl_terms(p._replace(cotangent=p.mask), conv)
    cv_k, cg_k = _kl_condition(p, conv, k_loss, k_grad * p.cotangent)
    with np.errstate(invalid="ignore", over="ignore"):
        cv = w * cv_k + np.abs(loss) * kw + np.abs(k_loss) * kw
        cg = w * (cg_k + np.abs(p.cotangent) * (cv_k + np.abs(k_loss))) + np.abs(grad) * kw
    return np.where(p.mask > 0, cv, 0.0), np.where(p.mask > 0, cg, 0.0)


def _iw_kl_underflow(p: Parts, conv: Conventions) -> Terms:
    """The weight multiplies k (value) and c·(k + ∂k) (gradient)."""
    k_loss, k_grad = _kl_terms(p._replace(cotangent=p.mask), conv)
    c = np.abs(p.cotangent)
    return np.abs(k_loss), c * (np.abs(k_loss) + np.abs(k_grad))


def kl_descs() -> list[LossDesc]:
    """The KL specs' descriptions (no drawn hyperparameters: everything is a convention)."""
    return [
        LossDesc(
            "kl_penalty",
            "losses.kl.kl_penalty",
            "candidate(logp, logp_ref, *, mask) (one estimator, declared by conventions)",
            ("logp", "logp_ref"),
            _kl_terms,
            _kl_condition,
            lambda conv: st.just({}),
            conventions=(ESTIMATOR, KL_CLAMP, KL_LOG_CLAMP),
            edges=lambda p, c: (
                [0.0]
                + ([c["log_ratio_clamp"], -c["log_ratio_clamp"]] if c["log_ratio_clamp"] else [])
            ),
            on_policy=None,
            clips=_kl_clips,
            shifted=shift_ratio,
            guesses={"clamp": [10.0], "log_ratio_clamp": [20.0]},
        ),
        LossDesc(
            "importance_weighted_kl",
            "losses.kl.importance_weighted_kl",
            "candidate(logp, logp_ref, logp_behavior, *, mask) (estimator, weighting: conventions)",
            ("logp", "logp_ref", "logp_behavior"),
            _iw_kl_terms,
            _iw_kl_condition,
            lambda conv: st.just({}),
            conventions=(ESTIMATOR, WEIGHTING, WEIGHT_CAP, KL_CLAMP, KL_LOG_CLAMP),
            edges=lambda p, c: (
                [0.0]
                + ([c["log_ratio_clamp"], -c["log_ratio_clamp"]] if c["log_ratio_clamp"] else [])
            ),
            on_policy=None,
            clips=_kl_clips,
            shifted=shift_ratio,
            guesses={"clamp": [10.0], "log_ratio_clamp": [20.0], "weight_cap": [10.0]},
            underflow=_iw_kl_underflow,
        ),
    ]
