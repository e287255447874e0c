r"""Unclipped token-level policy-gradient surrogates: REINFORCE, importance-weighted PG, DRO.

Each function returns :class:`~refimpl.losses.LossTerms` (the per-token loss, minimised, and its
gradient with respect to ``logp`` as a vector–Jacobian product with ``cotangent``, the padding mask
by default). ``logp_old`` is whatever the ratio is taken against (the old, proximal or rollout
policy): it carries no gradient. Stop-gradients are written ``sg[·]``.

The ratio :math:`\rho = \exp(\log\pi - \log\pi_{\text{old}})` is evaluated from the log-ratio.
With ``log_ratio_clamp=c`` the log-ratio is first clipped to :math:`[-c, c]`, as verl 0.9.1,
SkyRL 0.3.0 and OpenRLHF 0.11.2 do with :math:`c = 20`; the gradient then flows only where
:math:`|\log\rho| \le c` (bounds included, as ``torch.clamp``'s autograd does). Without a clamp
the ratio is exact, and a token whose loss or gradient is beyond float64 (``|A|·ρ`` over
``1.8e308``) is refused with a message naming the token, never returned as ``inf`` or NaN.
A token with advantage exactly 0 has loss 0 and gradient 0 whatever its ratio.

The helpers at the bottom are shared with :mod:`refimpl.losses.clipped`.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import as_real, invalid
from refimpl.losses._common import (
    LossTerms,
    masked,
    masked_product,
    policy_inputs,
    token_advantages,
    token_array,
    token_cotangent,
    token_mask,
)

__all__ = ["importance_weighted_pg_loss", "log_ratio_penalty_loss", "reinforce_loss"]

Array = NDArray[np.float64]


def reinforce_loss(
    logp: ArrayLike,
    advantages: ArrayLike,
    *,
    mask: ArrayLike | None = None,
    cotangent: ArrayLike | None = None,
) -> LossTerms:
    r"""The REINFORCE (vanilla policy-gradient) surrogate, per token.

    .. math::

        \ell_t = -A_t \log\pi_\theta(y_t), \qquad
        \frac{\partial \ell_t}{\partial \log\pi_\theta(y_t)} = -A_t .

    Parameters
    ----------
    logp : array_like, shape (B, T)
        Current log-probabilities of the sampled tokens; finite.
    advantages : array_like, shape (B,) or (B, T)
        Per-sequence or per-token advantages; finite.
    mask : array_like, shape (B, T), optional
        0/1 padding mask (1 = a real token). Default: every token is real.
    cotangent : array_like, shape (B, T), optional
        Weights ``c`` of the vector–Jacobian product (the aggregation's token weights). Default:
        the mask.

    Returns
    -------
    LossTerms
        ``loss`` (B, T), 0 at padding; ``grad = c·(−A)``, 0 at padding.

    Raises
    ------
    ValueError
        A non-finite entry, mismatched shapes, or a mask that is not 0/1.

    Notes
    -----
    verl 0.9.1 ``compute_policy_loss_gpg`` and ``compute_policy_loss_reinforce`` (without rollout
    IS weights) compute this loss. The gradient is the on-policy policy gradient that every other
    surrogate reduces to at ratio 1 (claim :ref:`PS3 <ps3>`; REINFORCE itself in :ref:`PS8 <ps8>`).

    Examples
    --------
    >>> import refimpl.losses.policy_gradient as pg
    >>> terms = pg.reinforce_loss([[-0.5, -2.0]], [2.0], mask=[[1, 0]])
    >>> terms.loss
    array([[1., 0.]])
    >>> terms.grad
    array([[-2.,  0.]])
    """
    lp = token_array(logp, name="logp")
    shape = (lp.shape[0], lp.shape[1])
    a = token_advantages(advantages, shape)
    m = token_mask(mask, shape)
    c = token_cotangent(cotangent, m)
    loss = _times(-a, lp)
    fix = "Check the scale of logp and advantages."
    _require_finite(loss, m, lp, what="the loss -A*logp", fix=fix, label="logp")
    return LossTerms(masked(loss, m), _vjp(c, -a, m))


def importance_weighted_pg_loss(
    logp: ArrayLike,
    logp_old: ArrayLike,
    advantages: ArrayLike,
    *,
    cap: float | None = None,
    log_ratio_clamp: float | None = None,
    mask: ArrayLike | None = None,
    cotangent: ArrayLike | None = None,
) -> LossTerms:
    r"""The importance-weighted policy-gradient surrogate, optionally with a truncated weight.

    .. math::

        \text{cap=None:}\quad \ell_t = -A_t\,\rho_t, \qquad
        \frac{\partial \ell_t}{\partial \log\pi_\theta} = -A_t\,\rho_t ;

        \text{cap}=C:\quad \ell_t = -\operatorname{sg}[\min(\rho_t, C)]\,A_t \log\pi_\theta(y_t),
        \qquad \frac{\partial \ell_t}{\partial \log\pi_\theta} = -A_t \min(\rho_t, C),

    with :math:`\rho_t = \exp(\log\pi_\theta(y_t) - \log\pi_{\text{old}}(y_t))`.

    .. warning::

        The two forms have the same gradient where :math:`\rho \le C`, but **different loss
        values**: without a cap the value is the ratio surrogate :math:`-A\rho` (SkyRL 0.3.0
        ``importance_sampling_loss``, Tinker's ``importance_sampling``); with a cap it is the
        truncated-IS REINFORCE value :math:`-\operatorname{sg}[w]A\log\pi` of verl 0.9.1
        ``compute_policy_loss_bypass_mode`` with ``loss_type="reinforce"`` and
        ``rollout_is="token"`` (``cap`` is its ``rollout_is_threshold``, default 2.0; the weights
        are computed under ``no_grad`` after clamping the log-ratio to ``[-20, 20]``, so pass
        ``log_ratio_clamp=20.0`` to reproduce it). A truncated ratio surrogate
        :math:`-A\min(\rho, C)` would instead have zero gradient above the cap; no framework read
        uses it.

    Parameters
    ----------
    logp : array_like, shape (B, T)
        Current log-probabilities; the gradient is with respect to them.
    logp_old : array_like, shape (B, T)
        Log-probabilities the ratio is taken against (behaviour / rollout policy); no gradient.
    advantages : array_like, shape (B,) or (B, T)
        Per-sequence or per-token advantages.
    cap : float, optional
        Truncation level ``C >= 1`` of the detached weight. Default: no truncation, ratio form.
    log_ratio_clamp : float, optional
        ``c > 0``: the log-ratio is clipped to ``[-c, c]`` before ``exp`` (verl's IS weights use
        20; SkyRL's ``importance_sampling_loss`` does not clamp). Default: exact.
    mask, cotangent : array_like, shape (B, T), optional
        Padding mask and VJP weights (default: the mask).

    Returns
    -------
    LossTerms
        Per-token loss and ``grad``, both 0 at padding.

    Raises
    ------
    ValueError
        Invalid arrays (non-finite, shape, mask), ``cap < 1``, ``log_ratio_clamp <= 0``, or (no
        cap, no clamp) a real token whose loss ``|A|·ρ`` overflows float64.

    Notes
    -----
    At ratio 1 both forms give gradient ``-A`` (claim :ref:`PS3 <ps3>`); the gradients of both
    forms, the clamp's zero-gradient region included, are derived in claims :ref:`PS8 <ps8>` and
    :ref:`PS9 <ps9>`. At ``|log ρ| = c`` exactly the clamp passes the gradient (torch's rule).

    Examples
    --------
    >>> import numpy as np
    >>> import refimpl.losses.policy_gradient as pg
    >>> lp, lq = np.log([[0.5, 0.5]]), np.log([[0.25, 0.5]])
    >>> pg.importance_weighted_pg_loss(lp, lq, [1.0]).grad
    array([[-2., -1.]])
    >>> pg.importance_weighted_pg_loss(lp, lq, [1.0], cap=1.5).grad
    array([[-1.5, -1. ]])
    """
    r = _ratio_inputs(logp, logp_old, advantages, mask, cotangent, log_ratio_clamp)
    if cap is None:
        loss = _times(-r.a, r.rho)
        local = _where_passes(r, loss)
        fix = "Pass log_ratio_clamp= (verl and SkyRL clip the log-ratio at 20) or a cap=."
        _require_finite(loss, r.m, r.lr, what="the loss -A*ratio", fix=fix)
    else:
        cap_value = as_real(cap, name="cap", low=1.0, meaning="a truncated weight keeps ratio 1")
        w = np.minimum(r.rho, cap_value)
        loss = _times(-r.a, w * r.lp)
        local = _times(-r.a, w)
        _require_finite(loss, r.m, r.lr, what="the loss -w*A*logp", fix="Check the inputs' scale.")
    return LossTerms(masked(loss, r.m), _vjp(r.c, local, r.m))


def log_ratio_penalty_loss(
    logp: ArrayLike,
    logp_old: ArrayLike,
    advantages: ArrayLike,
    *,
    tau: float,
    mask: ArrayLike | None = None,
    cotangent: ArrayLike | None = None,
) -> LossTerms:
    r"""Policy gradient with a quadratic log-ratio penalty (Kimi k1.5 / DRO).

    .. math::

        \ell_t = -A_t \log\pi_\theta(y_t) + \frac{\tau}{2}\bigl(\log\pi_\theta(y_t)
        - \log\pi_{\text{old}}(y_t)\bigr)^2, \qquad
        \frac{\partial \ell_t}{\partial \log\pi_\theta} = -A_t + \tau\,\log\rho_t .

    Parameters
    ----------
    logp : array_like, shape (B, T)
        Current log-probabilities; the gradient is with respect to them.
    logp_old : array_like, shape (B, T)
        Log-probabilities of the policy the penalty anchors to; no gradient.
    advantages : array_like, shape (B,) or (B, T)
        Per-sequence or per-token advantages (Kimi: reward minus the group mean).
    tau : float
        Penalty strength ``tau > 0`` (verl's ``policy_loss.dro_beta``; Kimi k1.5's ``τ``).
    mask, cotangent : array_like, shape (B, T), optional
        Padding mask and VJP weights (default: the mask).

    Returns
    -------
    LossTerms
        Per-token loss and ``grad``, both 0 at padding.

    Raises
    ------
    ValueError
        Invalid arrays, or ``tau <= 0`` (verl refuses a non-positive ``dro_beta`` too).

    Notes
    -----
    verl 0.9.1 ``compute_policy_loss_dro`` computes exactly this loss, with ``β = tau`` and the
    factor 1/2, and no clamp of the log-ratio (none is needed: no ``exp``). It is the per-token
    form of the gradient Kimi k1.5 derives from its squared-residual objective. At ratio 1 the
    penalty's gradient vanishes and the gradient is ``-A`` (claims :ref:`PS3 <ps3>`,
    :ref:`PS7 <ps7>`).

    Examples
    --------
    >>> import refimpl.losses.policy_gradient as pg
    >>> terms = pg.log_ratio_penalty_loss([[-1.0]], [[-2.0]], [1.0], tau=0.5)
    >>> terms.loss, terms.grad
    (array([[1.25]]), array([[-0.5]]))
    """
    lp, lq, a, m, c = policy_inputs(logp, logp_old, advantages, mask, cotangent)
    t = as_real(tau, name="tau", low=0.0, low_open=True, meaning="penalty strength")
    with np.errstate(over="ignore", invalid="ignore"):
        lr = lp - lq
        loss = _times(-a, lp) + 0.5 * t * lr * lr
        local = -a + t * lr
    fix = "Check the scale of logp, logp_old and advantages."
    _require_finite(loss, m, lr, what="the penalised loss", fix=fix)
    return LossTerms(masked(loss, m), _vjp(c, local, m))


# --- helpers shared with refimpl.losses.clipped ------------------------------------------------


class RatioInputs(NamedTuple):
    """Validated inputs of a ratio surrogate (all (B, T) float64).

    ``lr`` is the exact log-ratio, ``log_rho`` the log-ratio after the optional clamp, ``rho``
    its ``exp`` (``inf`` where an unclamped log-ratio overflows), ``passes`` is True where the
    clamp lets the gradient through (everywhere without a clamp).
    """

    lp: Array
    lq: Array
    a: Array
    m: Array
    c: Array
    lr: Array
    log_rho: Array
    rho: Array
    passes: NDArray[np.bool_]


def _ratio_inputs(
    logp: ArrayLike,
    logp_old: ArrayLike,
    advantages: ArrayLike,
    mask: ArrayLike | None,
    cotangent: ArrayLike | None,
    log_ratio_clamp: Any,
) -> RatioInputs:
    """Validate the common arrays and ``log_ratio_clamp``; the ratio after the optional clamp."""
    lp, lq, a, m, c = policy_inputs(logp, logp_old, advantages, mask, cotangent)
    bound = _as_clamp(log_ratio_clamp)
    with np.errstate(over="ignore", invalid="ignore"):
        lr = lp - lq
        clipped = np.clip(lr, -bound, bound)
        rho = np.exp(clipped)
    passes = np.abs(lr) <= bound
    return RatioInputs(lp, lq, a, m, c, lr, clipped, rho, passes)


def _as_clamp(log_ratio_clamp: Any) -> float:
    """The validated log-ratio clamp ``c > 0``; ``inf`` when None (no clamp)."""
    if log_ratio_clamp is None:
        return math.inf
    return as_real(
        log_ratio_clamp,
        name="log_ratio_clamp",
        low=0.0,
        low_open=True,
        meaning="the log-ratio is clipped to [-c, c] before exp (verl, SkyRL, OpenRLHF: 20)",
    )


def _times(a: Array, x: Array) -> Array:
    """``a·x`` with exactly 0 where ``a == 0`` (also where ``x`` is infinite)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(np.where(a == 0.0, 0.0, a * x), dtype=np.float64)


def _where_passes(r: RatioInputs, values: Array) -> Array:
    """``values`` where the clamp passes the gradient, 0 elsewhere (``∂ρ/∂logp = ρ·1[pass]``)."""
    return np.asarray(np.where(r.passes, values, 0.0), dtype=np.float64)


def _vjp(c: Array, local: Array, m: Array) -> Array:
    """``c·local`` at real tokens, 0 at padding; refused where the product overflows."""
    out, first = masked_product(c, local, m)
    if first is not None:
        b, t = first
        raise invalid(
            "cotangent",
            "keep the gradient cotangent * dloss/dlogp finite in float64",
            c,
            f"Token (b={b}, t={t}) overflows; pass cotangent weights of a smaller scale.",
        )
    return out


def _require_finite(
    values: Array, m: Array, shown: Array, *, what: str, fix: str, label: str = "log-ratio"
) -> None:
    """Refuse a real token whose loss is beyond float64, naming the token.

    ``shown`` is what the message shows as ``logp`` (the log-ratios for a ratio surrogate).
    """
    bad = (m > 0) & ~np.isfinite(values)
    if np.any(bad):
        b, t = (int(i) for i in np.argwhere(bad)[0])
        raise invalid(
            "logp",
            f"keep {what} finite in float64 at every real token",
            shown,
            f"Token (b={b}, t={t}) overflows (its {label} is {float(shown[b, t])!r}). {fix}",
        )
