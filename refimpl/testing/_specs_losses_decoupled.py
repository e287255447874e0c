r"""Spec of decoupled PPO: the PPO clip against the proximal policy times the behaviour weight.

``decoupled_ppo_clip`` checks a candidate against :func:`refimpl.losses.decoupled_ppo_loss`:
:math:`\ell_t = w_t\,\ell^{\text{PPO}}_t(\log\pi_\theta - \log\pi_{\text{prox}})` with the
detached weight :math:`w_t = \pi_{\text{prox}}/\mu` rejected (``above_cap="mask"``) or clamped
(``"clip"``) outside :math:`[\lambda, C]`, per token or per row (convention ``level``: the row's
geometric-mean weight, the row rejected whole when its mean, sum or maximum log-ratio leaves the
bounds; convention ``metric``: a KL estimate of the log-ratio, per token or its row's mean, sum or
maximum, decides instead, the weight staying the token's own ratio). It is built by
:func:`~refimpl.testing._specs_losses_checks.loss_spec` from a
:class:`~refimpl.testing._specs_losses.LossDesc`, so it carries the loss family's checks (value,
gradient, padding, the clipped region's zero gradient, huge log-ratios, the clip boundaries) and
conventions (``output``/``aggregation``, ``padding``, ``compute_dtype``, ...). The on-policy check
does not apply: at :math:`\pi_\theta = \pi_{\text{prox}}` the gradient is :math:`-w_tA_t c_t`,
not :math:`-A_t c_t`, and the values check covers it.

The draws are the log-ratio family's: ``logp − logp_prox`` at the PPO clip's edges, and
``logp_prox − logp_behavior`` in :math:`\{0, \pm\frac12, 2\} - \max(d, 0)`, so that weights
above a drawn cap (:math:`e^2 > 5`) and below a drawn lower bound (:math:`e^{-1/2} < 0.9`) occur.

Derived tolerance (units of :math:`u`, before the engine's safety factor): the PPO term's
condition (the ``ppo_clip`` spec's, :math:`|\partial\ell/\partial d|(K - 1) + 2|\ell|` and
:math:`|g|(K + 1)` with :math:`K` the ratio's relative error) times :math:`w`, plus the weight's
own relative error :math:`K_w = |\log w| + 3` (with ``compute_dtype`` the inputs' magnitudes too;
at the row levels plus the row mean's pairwise-sum rounding, ``row_error``) and one rounding of
the product, on :math:`|\ell|` and on :math:`|g|`. A weight within its
rounding of a bound is not modelled: the draws do not place one there.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import strategies as st

from refimpl.testing._engine import Convention, Conventions, Spec
from refimpl.testing._specs_losses import (
    Array,
    LossDesc,
    Parts,
    Terms,
    ratio_error,
    resolve,
    row_error,
    shift_ratio,
)
from refimpl.testing._specs_losses_checks import loss_spec

__all__ = ["decoupled_specs"]

ARRAYS = ("logp", "logp_prox", "logp_behavior", "advantages")

ABOVE_CAP = Convention(
    "above_cap",
    "mask",
    ("mask", "clip"),
    "what a behaviour weight outside [lower, cap] becomes: 'mask' rejects the token (weight 0), "
    "'clip' clamps the weight to the bound",
    who="mask: AReaL 1.0.4 ppo_actor_loss_fn with rejection_sampling action='mask'; clip: "
    "action='clamp'",
)

LEVEL = Convention(
    "level",
    "token",
    ("token", "geometric", "sequence", "max"),
    "where the behaviour ratio is measured: per token, or per row (the row's geometric-mean "
    "weight on every token, the row rejected whole when its geometric mean, the product of "
    "its ratios for 'sequence' or its largest ratio for 'max' leaves [lower, cap]; with "
    "above_cap='clip' the weight of a row outside the bounds clamped to [lower, cap]); with a "
    "KL metric the row's mean, sum or maximum of the estimates decides",
    who="token: AReaL 1.0.4 rejection_sampling level='token'; geometric: level='sequence', "
    "agg='mean'; sequence: level='sequence', agg='sum'; max: level='sequence', agg='max'",
)

METRIC = Convention(
    "metric",
    "ratio",
    ("ratio", "kl_k1", "kl_k2", "kl_k3"),
    "what is compared with [lower, cap]: the behaviour ratio, or a KL estimate of "
    "d = log(π_prox/μ) (k1 d, k2 d²/2, k3 e^-d − 1 + d), the weight then the token's own ratio "
    "and the action 'mask' only",
    who="ratio: AReaL 1.0.4 rejection_sampling metric='ratio'; kl_k1, kl_k2, kl_k3: "
    "metric='kl_k1', 'kl_k2', 'kl_k3' (KLEstimator._compute_approx_kl, apply_clamp=False)",
)

#: KL bounds away from the estimates of the drawn log-ratios 0, ±1/2, 2 (and their float32
#: roundings): k1 0, ±0.5, 2; k2 0, 0.125, 2; k3 0.107, 0.149, 1.14.
_KL_CAPS = {"kl_k1": (-0.25, 0.25, 1.0, 3.0), "kl_k2": (0.05, 0.3, 1.0, 3.0)}

_OPEN = {"eps_low": 1.0 - 2.0**-40, "eps_high": 1e300, "dual_clip": None}


def _floats(low: float, high: float) -> st.SearchStrategy[float]:
    return st.floats(low, high, allow_nan=False, allow_infinity=False, allow_subnormal=False)


def _params(conv: Conventions) -> st.SearchStrategy[dict[str, Any]]:
    eps = st.one_of(st.sampled_from([0.2, 0.1, 0.28]), _floats(0.01, 0.6))
    high = st.one_of(st.none(), st.sampled_from([0.28, 0.2]), _floats(0.01, 1.0))
    dual = st.one_of(st.none(), st.just(3.0), _floats(1.1, 10.0))
    if conv["metric"] != "ratio":
        kl_caps = _KL_CAPS.get(conv["metric"], _KL_CAPS["kl_k2"])
        low_cap = -1.0 if conv["metric"] == "kl_k1" else 0.01
        kl = {"cap": st.one_of(st.sampled_from(kl_caps), _floats(low_cap, 3.0))}
        kl["lower"] = st.one_of(st.none(), st.just(0.1), _floats(-1.0, 1.0))
        fixed = {"eps_low": eps, "eps_high": high, "dual_clip": dual, **kl}
        return st.fixed_dictionaries(fixed).map(_lower_below_cap)
    caps = st.one_of(st.sampled_from([1.0, 1.5, 2.0, 5.0]), _floats(1.0, 10.0))
    needs_cap = conv["above_cap"] == "clip" or conv["level"] != "token"
    cap = caps if needs_cap else st.one_of(st.none(), caps)
    lower = st.one_of(st.none(), st.sampled_from([0.5, 0.9]), _floats(0.0, 1.0))
    return st.fixed_dictionaries(
        {"eps_low": eps, "eps_high": high, "dual_clip": dual, "cap": cap, "lower": lower}
    )


def _lower_below_cap(params: dict[str, Any]) -> dict[str, Any]:
    """A KL metric's lower bound above its cap is dropped (refused by the reference)."""
    lower = params["lower"]
    return {**params, "lower": None if lower is not None and lower > params["cap"] else lower}


def _reference(p: Parts, conv: Conventions, **override: Any) -> Terms:
    params = {**p.params, **override}
    loss, grad = resolve("losses.decoupled.decoupled_ppo_loss")(
        *(p.arrays[a] for a in ARRAYS),
        **params,
        above_cap=conv["above_cap"],
        level=conv["level"],
        metric=conv["metric"],
        mask=p.mask,
        cotangent=p.cotangent,
    )
    return np.asarray(loss), np.asarray(grad)


def _terms(p: Parts, conv: Conventions) -> Terms:
    return _reference(p, conv)


def _unclipped(p: Parts, conv: Conventions) -> Terms:
    return _reference(p, conv, **_OPEN)


def _weight(p: Parts, conv: Conventions) -> Array:
    """The behaviour weight the reference applies (0 where rejected and at padding): the
    tolerance and the clip branches need it, the expected values come from the reference."""
    weight = resolve("losses.decoupled._behaviour_weight")
    lq, lb = (np.asarray(p.arrays[a], dtype=np.float64) for a in ("logp_prox", "logp_behavior"))
    return np.asarray(
        weight(
            lq,
            lb,
            np.asarray(p.mask, dtype=np.float64),
            cap=p.params.get("cap"),
            lower=p.params.get("lower"),
            above_cap=conv["above_cap"],
            level=conv["level"],
            metric=conv["metric"],
        ),
        dtype=np.float64,
    )


def _ppo(p: Parts, kept: Array, cotangent: Array) -> Terms:
    """The unweighted PPO term on the kept tokens (``logp_prox`` as the ratio's anchor)."""
    kw = {k: p.params.get(k) for k in ("eps_low", "eps_high", "dual_clip")}
    loss, grad = resolve("losses.clipped.ppo_clip_loss")(
        p.arrays["logp"],
        p.arrays["logp_prox"],
        p.arrays["advantages"],
        **kw,
        mask=kept,
        cotangent=cotangent,
    )
    return np.asarray(loss), np.asarray(grad)


def _condition(p: Parts, conv: Conventions, loss: Array, grad: Array) -> Terms:
    """w·(the PPO term's condition) + (K_w + 1)·|ℓ| and the same on the gradient."""
    w = _weight(p, conv)
    kept = (w > 0.0) & (p.mask > 0)
    on = kept.astype(np.float64)
    k = ratio_error(p, conv, "logp", "logp_prox")
    kw = ratio_error(p, conv, "logp_prox", "logp_behavior")
    if conv["level"] != "token" and conv["metric"] == "ratio":  # the row's mean log-ratio
        kw = kw + row_error(p, conv, kw)
    with np.errstate(all="ignore"):
        ppo_loss, sens = _ppo(p, on, on)
        _, ppo_grad = _ppo(p, on, p.cotangent * on)
        cv = w * (np.abs(sens) * (k - 1.0) + 2.0 * np.abs(ppo_loss)) + (kw + 1.0) * np.abs(loss)
        cg = w * np.abs(ppo_grad) * (k + 1.0) + (kw + 1.0) * np.abs(grad)
    return np.where(kept, cv, 0.0), np.where(kept, cg, 0.0)


def _branches(p: Parts, conv: Conventions) -> list[tuple[Array, Array]]:
    """The weighted (−Aρ, −A·clip(ρ)) and, with dual-clip and A < 0, (the clipped, −A·c)."""
    w = _weight(p, conv)
    a = np.where(p.mask > 0, np.asarray(p.arrays["advantages"], dtype=np.float64), 0.0)
    x, y = np.asarray(p.arrays["logp"]), np.asarray(p.arrays["logp_prox"])
    low = float(p.params["eps_low"])
    high = low if p.params.get("eps_high") is None else float(p.params["eps_high"])
    with np.errstate(over="ignore", invalid="ignore"):
        rho = np.exp(np.where(p.mask > 0, x - y, 0.0))
        one, other = -a * rho * w, -a * np.clip(rho, 1.0 - low, 1.0 + high) * w
    inside = (rho > 1.0 - low) & (rho < 1.0 + high)
    pairs = [(one, np.where(inside, np.inf, other))]
    dual = p.params.get("dual_clip")
    if dual is not None:
        floor = np.where(a < 0, -a * dual * w, np.inf)
        pairs.append((np.maximum(one, other), floor))
    return pairs


def _edges(params: dict[str, Any], conv: Conventions) -> list[float]:
    low = float(params["eps_low"])
    high = low if params.get("eps_high") is None else float(params["eps_high"])
    out = [math.log1p(-low), math.log1p(high)]
    if params.get("dual_clip") is not None:
        out.append(math.log(params["dual_clip"]))
    return out


def _clipped_always(conv: Conventions) -> str | None:
    return None


def decoupled_specs() -> tuple[Spec, ...]:
    """The spec ``decoupled_ppo_clip``."""
    desc = LossDesc(
        "decoupled_ppo_clip",
        "losses.decoupled.decoupled_ppo_loss",
        "candidate(logp, logp_prox, logp_behavior, advantages, *, eps_low, eps_high, dual_clip, "
        "cap, lower, mask) (above_cap, level, metric: conventions)",
        ARRAYS,
        _terms,
        _condition,
        _params,
        conventions=(ABOVE_CAP, LEVEL, METRIC),
        edges=_edges,
        on_policy=None,
        clips=_clipped_always,
        shifted=shift_ratio,
        unclipped=_unclipped,
        branches=_branches,
    )
    return (loss_spec(desc),)
