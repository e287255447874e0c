r"""Decoupled PPO: the PPO clip on the proximal policy, times the behaviour importance weight.

An asynchronous trainer learns from tokens sampled by a behaviour policy :math:`\mu` (the
inference engine, possibly several versions old). Decoupled PPO (AReaL) separates the two roles
the old policy plays in PPO: the *trust region* is taken around the proximal policy
:math:`\pi_{\text{prox}}` (the weights before this update), and the *off-policy correction* is the
behaviour weight :math:`\pi_{\text{prox}}/\mu`, detached, with its large values rejected (masked
to 0) or truncated (clamped). The weight is :func:`refimpl.decoupled_ppo_weights` (or a row's
geometric mean, or the ratio rejected on a KL estimate of :math:`\log(\pi_{\text{prox}}/\mu)`),
the PPO term :func:`refimpl.ppo_clip_loss`; this module holds their product, which is what the
loss and its gradient are.

It returns :class:`~refimpl.losses.LossTerms` (the per-token loss, minimised, 0 at padding and at
rejected tokens, and its gradient with respect to ``logp`` as a vector–Jacobian product with
``cotangent``). Aggregation is the caller's: AReaL 1.0.4 sums over the valid tokens and divides by
their count *before* rejection (a rejected token still counts in the denominator), which is
:func:`refimpl.aggregate_loss` with ``mode="token_mean"`` and the padding mask.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import as_real, invalid
from refimpl.losses._common import (
    LossTerms,
    as_choice,
    like_tokens,
    masked_product,
    token_array,
    token_cotangent,
    token_mask,
)
from refimpl.losses.clipped import ppo_clip_loss
from refimpl.staleness.importance_weights import decoupled_ppo_weights

__all__ = ["decoupled_ppo_loss"]

Array = NDArray[np.float64]


def _weighted(w: Array, values: Array, m: Array, *, what: str, cap: float | None) -> Array:
    """``w·values`` at real tokens (exactly 0 where ``w == 0``), refused where it overflows."""
    out, first = masked_product(w, values, m)
    if first is not None:
        b, t = first
        raise invalid(
            "cap",
            f"bound the behaviour weight so that it times {what} stays finite in float64",
            cap,
            f"Token (b={b}, t={t}) overflows with weight {float(w[b, t])!r}; pass a smaller cap= "
            "(AReaL's rejection_sampling.upper) or advantages of a smaller scale.",
        )
    return out


_LEVELS = ("token", "geometric", "sequence", "max")
_METRICS = ("ratio", "kl_k1", "kl_k2", "kl_k3")


def _row_statistic(values: Array, m: Array, level: str) -> Array:
    """The row's mean (``"geometric"``), sum (``"sequence"``) or maximum (``"max"``) of
    ``values`` over its valid tokens; a row without one has 0 (it has no token to weigh)."""
    if level == "max":
        top = np.max(np.where(m > 0, values, -np.inf), axis=1, keepdims=True)
        return np.asarray(np.where(top == -np.inf, 0.0, top), dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        total = np.where(m > 0, values, 0.0).sum(axis=1, keepdims=True)
    if level == "sequence":
        return np.asarray(total, dtype=np.float64)
    return np.asarray(total / np.maximum(m.sum(axis=1, keepdims=True), 1.0), dtype=np.float64)


def _row_weight(
    lq: Array, lb: Array, m: Array, *, low: float, high: float, clip: bool, level: str
) -> Array:
    """Every valid token's weight: its row's geometric-mean ratio, the row rejected (or its
    weight clamped to ``[low, high]``) when the row's statistic of the log-ratio (mean, sum or
    maximum) is outside ``[log low, log high]``."""
    with np.errstate(over="ignore", invalid="ignore"):  # padding may hold any finite value
        d = np.where(m > 0, lq - lb, 0.0)
    mean = _row_statistic(d, m, "geometric")
    stat = _row_statistic(d, m, level)
    top = math.log(high)
    bottom = -math.inf if low == 0.0 else math.log(low)
    inside = (stat >= bottom) & (stat <= top)
    w = np.exp(np.minimum(mean, top + 1.0))  # a row inside the bounds has mean <= log high
    # a row inside the bounds keeps its weight (at the mean and the sum it is inside them too)
    w = np.where(inside, w, np.clip(w, low, high) if clip else 0.0)
    return np.asarray(np.where(m > 0, w, 0.0), dtype=np.float64)


def _kl_estimate(d: Array, metric: str) -> Array:
    """The per-token KL estimate of ``d = log(π_prox/μ)``: ``d``, ``d²/2`` or
    ``e^{-d} − 1 + d`` (AReaL's ``KLEstimator`` k1, k2, k3); overflow is ``+inf``."""
    with np.errstate(over="ignore", invalid="ignore"):
        if metric == "kl_k1":
            return d
        if metric == "kl_k2":
            return np.asarray(d * d / 2.0, dtype=np.float64)
        return np.asarray(np.expm1(-d) + d, dtype=np.float64)


def _kl_weight(
    lq: Array, lb: Array, m: Array, *, cap: float, lower: float | None, level: str, metric: str
) -> Array:
    """The KL metrics' weight: ``π_prox/μ`` per token, 0 at the tokens (``level="token"``) or in
    the rows (the row's mean, sum or maximum of the estimate) whose estimate leaves
    ``[lower, cap]``."""
    with np.errstate(over="ignore", invalid="ignore"):
        d = np.where(m > 0, lq - lb, 0.0)
        stat = _kl_estimate(d, metric)
    if level != "token":
        stat = _row_statistic(stat, m, level)
    bottom = -math.inf if lower is None else lower
    kept = (stat >= bottom) & (stat <= cap) & (m > 0)
    with np.errstate(over="ignore"):
        return np.asarray(np.where(kept, np.exp(np.where(kept, d, 0.0)), 0.0), dtype=np.float64)


def _kl_bounds(
    metric: str, cap: float | None, above_cap: str, lower: float | None
) -> tuple[float, float | None]:
    """The KL metrics' validated ``(cap, lower)``: mask only, a cap (> 0 for k2 and k3, any real
    for k1, which can be negative) and an optional lower bound ``<= cap``."""
    if above_cap != "mask":
        raise invalid(
            "above_cap",
            f"be 'mask' with metric={metric!r} (a KL estimate rejects; only the ratio is clamped)",
            above_cap,
            "Pass above_cap='mask', or metric='ratio' to truncate the weight.",
        )
    if cap is None:
        raise invalid(
            "cap",
            f"be given with metric={metric!r} (the KL estimate is compared with it)",
            cap,
            "Pass cap=, e.g. cap=0.5 (AReaL's rejection_sampling.upper).",
        )
    meaning = "the upper bound of the KL estimate"
    if metric == "kl_k1":  # k1 can be negative: any real bound
        high = as_real(cap, name="cap", meaning=meaning)
    else:
        high = as_real(cap, name="cap", low=0.0, low_open=True, meaning=meaning)
    if lower is None:
        return high, None
    meaning = "the lower bound of the KL estimate, at most cap"
    return high, as_real(lower, name="lower", high=high, meaning=meaning)


def _behaviour_weight(
    lq: Array,
    lb: Array,
    m: Array,
    *,
    cap: float | None,
    above_cap: Literal["mask", "clip"],
    lower: float | None,
    level: str,
    metric: str = "ratio",
) -> Array:
    """The detached weight: per token, or the row's geometric mean (the row rejected whole);
    with a KL metric ``π_prox/μ`` per token, rejected by the estimate at the token or the row."""
    where = as_choice(level, name="level", choices=_LEVELS)
    what = as_choice(metric, name="metric", choices=_METRICS)
    if what == "ratio" and where == "token":
        return decoupled_ppo_weights(lq, lb, cap=cap, mask=m, above_cap=above_cap, lower=lower)
    action = as_choice(above_cap, name="above_cap", choices=("mask", "clip"))
    if what != "ratio":
        high, low_kl = _kl_bounds(what, cap, action, lower)
        return _kl_weight(lq, lb, m, cap=high, lower=low_kl, level=where, metric=what)
    if cap is None:
        raise invalid(
            "cap",
            f"be given at level={where!r} (the row's statistic is compared with it)",
            cap,
            "Pass cap=, e.g. cap=5.0 (AReaL's rejection_sampling.upper).",
        )
    high = as_real(cap, name="cap", low=1.0, meaning="the upper bound of the row's statistic")
    low = 0.0
    if lower is not None:
        low = as_real(lower, name="lower", low=0.0, high=1.0, meaning="its lower bound")
    return _row_weight(lq, lb, m, low=low, high=high, clip=action == "clip", level=where)


def decoupled_ppo_loss(
    logp: ArrayLike,
    logp_prox: ArrayLike,
    logp_behavior: ArrayLike,
    advantages: ArrayLike,
    *,
    eps_low: float = 0.2,
    eps_high: float | None = None,
    dual_clip: float | None = None,
    cap: float | None = None,
    above_cap: Literal["mask", "clip"] = "mask",
    lower: float | None = None,
    level: Literal["token", "geometric", "sequence", "max"] = "token",
    metric: Literal["ratio", "kl_k1", "kl_k2", "kl_k3"] = "ratio",
    mask: ArrayLike | None = None,
    cotangent: ArrayLike | None = None,
) -> LossTerms:
    r"""Decoupled PPO per token: the PPO clip against ``π_prox`` times the behaviour weight.

    .. math::

        \ell_t = w_t\,\max\bigl(-A_t r_t,\; -A_t\operatorname{clip}(r_t,
        1-\varepsilon_{\text{low}}, 1+\varepsilon_{\text{high}})\bigr), \qquad
        r_t = \frac{\pi_\theta(y_t)}{\pi_{\text{prox}}(y_t)},

        w_t = \operatorname{sg}\Bigl[\frac{\pi_{\text{prox}}(y_t)}{\mu(y_t)}\Bigr]\,
        \mathbb{1}\Bigl[\lambda \le \frac{\pi_{\text{prox}}(y_t)}{\mu(y_t)} \le C\Bigr]
        \quad\text{(reject, ``above_cap="mask"``)}, \qquad
        w_t = \operatorname{clip}\Bigl(\frac{\pi_{\text{prox}}(y_t)}{\mu(y_t)}, \lambda,
        C\Bigr) \quad\text{(truncate, ``"clip"``)},

    with a KL metric :math:`w_t = \operatorname{sg}[e^{d_t}]\,\mathbb{1}[\lambda \le S \le C]`,
    :math:`d_t = \log\pi_{\text{prox}}(y_t) - \log\mu(y_t)`, :math:`S = k(d_t)` per token or
    :math:`S = \operatorname{mean}_t / \sum_t / \max_t\, k(d_t)` over the row's valid tokens;
    the dual clip :math:`\min(\cdot, -cA_t)` for :math:`A_t < 0` as in
    :func:`refimpl.ppo_clip_loss`. The weight carries no gradient, so
    :math:`\partial\ell_t/\partial\log\pi_\theta = w_t\,\partial\ell^{\text{PPO}}_t/\partial\log\pi_\theta`:
    a rejected token has loss and gradient 0, and at :math:`\pi_\theta = \pi_{\text{prox}}` the
    gradient is :math:`-w_t A_t` (the importance-weighted policy gradient from :math:`\mu`).

    Parameters
    ----------
    logp : array_like, shape (B, T)
        Current log-probabilities :math:`\log\pi_\theta`; the gradient is with respect to them.
    logp_prox : array_like, shape (B, T)
        Proximal log-probabilities (recomputed by the trainer before the update); no gradient.
    logp_behavior : array_like, shape (B, T)
        Log-probabilities of the behaviour policy :math:`\mu` that sampled the tokens; no gradient.
    advantages : array_like, shape (B,) or (B, T)
        Per-sequence or per-token advantages.
    eps_low, eps_high, dual_clip : float, optional
        The PPO clip, as in :func:`refimpl.ppo_clip_loss` (AReaL's ``eps_clip``,
        ``eps_clip_higher``, ``c_clip``).
    cap : float, optional
        ``C >= 1``: the upper bound of the behaviour weight (AReaL's
        ``rejection_sampling.upper``). ``None``: no upper bound (``"mask"`` only).
    above_cap : {"mask", "clip"}
        ``"mask"``: a token whose weight is outside ``[lower, C]`` is rejected (weight 0);
        ``"clip"``: the weight is clamped to ``[lower, C]`` (AReaL's ``action="clamp"``).
    lower : float, optional
        ``0 <= lower <= 1``: the lower bound :math:`\lambda` of the weight (AReaL's
        ``rejection_sampling.lower``).
    level : {"token", "geometric", "sequence", "max"}
        Where the behaviour ratio is measured (AReaL's ``rejection_sampling.level`` and ``agg``):
        per token (default); or per sequence, every valid token of a row then weighted by the
        row's geometric-mean ratio :math:`\exp(\frac1L\sum_t\log v_t)` and the whole row
        rejected when a statistic of its log-ratios leaves ``[log lower, log cap]``: their mean
        (``"geometric"``, AReaL ``agg="mean"``: the geometric mean), their sum (``"sequence"``,
        ``agg="sum"``: the product of the ratios) or their maximum (``"max"``, ``agg="max"``:
        the largest ratio). With ``above_cap="clip"`` the weight of a row outside the bounds is
        clamped to ``[lower, cap]`` instead (AReaL; at the mean and the sum a row inside them
        has its weight inside them too, at the maximum not always). The row levels need a cap.
    metric : {"ratio", "kl_k1", "kl_k2", "kl_k3"}
        What is compared with ``[lower, cap]`` (AReaL's ``rejection_sampling.metric``): the
        ratio (default), or a KL estimate of :math:`d_t = \log(\pi_{\text{prox}}/\mu)`:
        ``k1`` :math:`d_t`, ``k2`` :math:`d_t^2/2`, ``k3`` :math:`e^{-d_t} - 1 + d_t`
        (AReaL's ``KLEstimator``, unclamped). With a KL metric the weight stays the token's own
        ratio :math:`e^{d_t}` (no geometric mean), a token (``level="token"``) or a row is
        rejected when its estimate leaves the bounds, the row levels naming the row's statistic
        of the estimates (mean, sum, maximum, arithmetic); only ``above_cap="mask"``; ``cap``
        is required (``> 0`` for k2 and k3, any real for k1) and ``lower`` is any real
        ``<= cap``.
    mask, cotangent : array_like, shape (B, T), optional
        Padding mask and VJP weights (default: the mask).

    Returns
    -------
    LossTerms
        Per-token loss and ``grad``, both 0 at padding and at rejected tokens.

    Raises
    ------
    ValueError
        Invalid arrays (non-finite, shape, mask); the PPO clip's and the weight's parameters out
        of range (see :func:`refimpl.ppo_clip_loss` and :func:`refimpl.decoupled_ppo_weights`);
        ``above_cap="clip"`` or a row level without a cap; a KL metric with ``above_cap="clip"``,
        without a cap or with ``lower > cap``; a kept token whose weighted loss or gradient
        overflows float64.

    Notes
    -----
    The weight is compared with its bounds inclusively: a weight equal to ``C`` or to ``lower``
    is kept (AReaL's ``_check_bounds``). Rejection removes a token from the numerator only: to
    reproduce AReaL, aggregate with the padding mask, not the kept tokens (the count before
    rejection is AReaL's denominator, which keeps it equal to the trainer's ``loss_weight_fn``).
    AReaL 1.0.4 computes the weight and the KL estimates in float32 (``.float()`` of both
    log-probabilities) and maps a non-finite log-ratio to weight 1; this reference computes them
    in float64 from finite inputs. Claims: the product's gradient and the on-policy reduction
    :ref:`DP1 <dp1>`, rejection and truncation :ref:`DP2 <dp2>`, the row clamp :ref:`DP3 <dp3>`,
    the KL estimates :ref:`DP4 <dp4>`, the largest ratio :ref:`DP5 <dp5>`.

    References
    ----------
    W. Fu et al., "AReaL: A Large-Scale Asynchronous Reinforcement Learning System for Language
    Reasoning" (arXiv 2505.24298), the decoupled PPO objective.

    Examples
    --------
    >>> import numpy as np, refimpl
    >>> logp = np.log([[0.55, 0.5, 0.5]])           # r = 1.1, 1, 1 against π_prox
    >>> prox = np.log([[0.5, 0.5, 0.5]])
    >>> behav = np.log([[0.25, 0.5, 0.05]])        # weights 2, 1, 10 (rejected above C = 5)
    >>> terms = refimpl.decoupled_ppo_loss(logp, prox, behav, [[1.0, -1.0, 1.0]], cap=5.0)
    >>> terms.loss
    array([[-2.2,  1. ,  0. ]])
    >>> terms.grad
    array([[-2.2,  1. ,  0. ]])

    Rejecting on the KL estimate ``k2 = d²/2`` instead (``d = ln 2, 0, ln 10``; bound 0.5):

    >>> refimpl.decoupled_ppo_loss(logp, prox, behav, [[1.0, -1.0, 1.0]], cap=0.5,
    ...                            metric="kl_k2").loss
    array([[-2.2,  1. ,  0. ]])

    The whole row at once, by its largest ratio (10 > 5: the row is rejected):

    >>> refimpl.decoupled_ppo_loss(logp, prox, behav, [[1.0, -1.0, 1.0]], cap=5.0,
    ...                            level="max").loss
    array([[0., 0., 0.]])
    """
    lp = token_array(logp, name="logp")
    shape = (lp.shape[0], lp.shape[1])
    lq = like_tokens(logp_prox, shape, name="logp_prox", like="logp")
    lb = like_tokens(logp_behavior, shape, name="logp_behavior", like="logp")
    m = token_mask(mask, shape)
    c = token_cotangent(cotangent, m)
    w = _behaviour_weight(
        lq, lb, m, cap=cap, above_cap=above_cap, lower=lower, level=level, metric=metric
    )
    kept = np.asarray(w > 0.0, dtype=np.float64)
    ppo = ppo_clip_loss(
        lp,
        lq,
        advantages,
        eps_low=eps_low,
        eps_high=eps_high,
        dual_clip=dual_clip,
        mask=kept,
        cotangent=c,
    )
    loss = _weighted(w, np.asarray(ppo.loss), kept, what="the PPO loss", cap=cap)
    grad = _weighted(w, np.asarray(ppo.grad), kept, what="the PPO gradient", cap=cap)
    return LossTerms(loss, grad)
