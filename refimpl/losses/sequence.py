r"""Sequence-level policy surrogates: GSPO, GSPO-token and GMPO.

In these losses the importance ratio of a token is built from its whole sequence: GSPO uses the
geometric mean of the token ratios, :math:`s_b = \exp(\frac{1}{L_b}\sum_t (\log\pi_{bt} -
\log\pi^{\text{old}}_{bt}))`, over the :math:`L_b` valid tokens of sequence ``b``; GMPO takes the
geometric mean of token ratios clipped in log space. A token's loss then depends on every token of its
sequence, and the vector–Jacobian product ``grad`` carries that coupling exactly:
``grad_bt' = Σ_t c_bt ∂loss_bt/∂logp_bt'``.

Conventions (see :mod:`refimpl.losses._common`): the loss is minimised; padding has loss 0 and
gradient 0; a sequence made only of padding contributes nothing (its loss row is 0, as in verl 0.9.1,
TRL 1.16.0 and AReaL 1.0.4, which clamp the length to at least 1 and then mask every token).
At a kink the returned gradient is the one torch autograd gives: ``torch.clamp`` passes the gradient
on the closed interval (bounds included) and ``torch.maximum`` splits it equally between tied arguments.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import as_real, invalid
from refimpl.losses._common import (
    LossTerms,
    masked,
    policy_inputs,
)

__all__ = ["gmpo_loss", "gspo_loss", "gspo_token_loss"]

Array = NDArray[np.float64]


def _clip_range(eps_low: Any, eps_high: Any, *, ratio_space: bool) -> tuple[float, float]:
    """The validated ``(eps_low, eps_high)``; ``eps_high`` defaults to ``eps_low``."""
    high_bound = 1.0 if ratio_space else None
    meaning = "the ratio is clipped below at 1 - eps_low" if ratio_space else "log-space clip"
    low = as_real(eps_low, name="eps_low", low=0.0, high=high_bound, meaning=meaning)
    high = low if eps_high is None else as_real(eps_high, name="eps_high", low=0.0)
    return low, high


def _inputs(
    logp: ArrayLike,
    logp_old: ArrayLike,
    advantages: ArrayLike,
    mask: ArrayLike | None,
    cotangent: ArrayLike | None,
) -> tuple[Array, Array, Array, Array, Array]:
    """Validated ``(log-ratio, advantages, mask, cotangent, valid-token count per row)``."""
    lp, lo, a, m, c = policy_inputs(logp, logp_old, advantages, mask, cotangent)
    d = masked(lp - lo, m)
    return d, masked(a, m), m, c, m.sum(axis=1)


def _mean_log_ratio(d: Array, lengths: Array) -> Array:
    """Mean of the masked log-ratios per row; 0 for an all-padding row."""
    return np.asarray(d.sum(axis=1) / np.maximum(lengths, 1.0), dtype=np.float64)


def _as_cap(log_ratio_cap: Any) -> float:
    if log_ratio_cap is None:
        return math.inf
    return as_real(log_ratio_cap, name="log_ratio_cap", meaning="upper clamp of the log-ratio")


def _capped_ratio(mean_log: Array, cap: float) -> tuple[Array, Array]:
    """``exp(min(mean_log, cap))`` per row (inf on overflow) and the clamp's gradient factor."""
    with np.errstate(over="ignore"):
        s = np.exp(np.minimum(mean_log, cap))
    return s, (mean_log <= cap).astype(np.float64)


def _ppo_branch(a: Array, s: Array, eps_low: float, eps_high: float) -> tuple[Array, Array]:
    """``max(−a s, −a clip(s))`` and its derivative factor ``f`` (grad = −a·f·∂s), as torch does.

    ``f`` is 1 where the unclipped term wins, ``1[lo ≤ s ≤ hi]`` where the clipped one wins, and
    their average at a tie (``torch.maximum`` splits the gradient). Tokens with ``a = 0`` get 0.
    """
    lo, hi = 1.0 - eps_low, 1.0 + eps_high
    live = a != 0.0
    s_live = np.where(live, s, 1.0)  # a = 0 has loss 0 whatever s is (also s = inf)
    with np.errstate(invalid="ignore"):
        l1 = -a * s_live
        l2 = -a * np.clip(s_live, lo, hi)
    inside = ((s_live >= lo) & (s_live <= hi)).astype(np.float64)
    f = np.where(l1 > l2, 1.0, np.where(l1 < l2, inside, 0.5 * (1.0 + inside)))
    loss = np.where(live, np.maximum(l1, l2), 0.0)
    return loss, np.where(live, f, 0.0)


_CAP_FIX = ", or pass log_ratio_cap= (verl 0.9.1 and SkyRL 0.3.0 clamp the log-ratio at 10)."


def _require_finite(
    values: Array, log_ratio: Array, *, what: str, reduce: str = "mean", fix: str = _CAP_FIX
) -> None:
    """Refuse a non-finite loss or gradient, naming the first sequence whose ``reduce`` log-ratio
    (``"mean"`` for GSPO's ratio, ``"summed"`` for the product ratio) made it overflow."""
    if np.all(np.isfinite(values)):
        return
    row = int(np.flatnonzero(~np.all(np.isfinite(values), axis=1))[0])
    raise invalid(
        "logp",
        f"give a finite {what} (exp of the sequence's {reduce} log-ratio overflows float64 where "
        "the surrogate is not clipped)",
        float(log_ratio[row]),
        f"Sequence {row} has {reduce} log-ratio {float(log_ratio[row])!r}; check logp against "
        f"logp_old{fix}",
    )


def gspo_loss(
    logp: ArrayLike,
    logp_old: ArrayLike,
    advantages: ArrayLike,
    *,
    eps_low: float,
    eps_high: float | None = None,
    log_ratio_cap: float | None = None,
    mask: ArrayLike | None = None,
    cotangent: ArrayLike | None = None,
) -> LossTerms:
    r"""GSPO's clipped surrogate with the sequence ratio (the geometric mean of token ratios).

    .. math::

        s_b = \exp\Bigl(\frac{1}{L_b}\sum_{t \in b} (\log\pi_{bt} - \log\pi^{\text{old}}_{bt})\Bigr),
        \qquad
        \ell_{bt} = \max\bigl(-A_{bt}\, s_b,\; -A_{bt}\,\mathrm{clip}(s_b, 1-\epsilon_{\text{low}},
        1+\epsilon_{\text{high}})\bigr)

    at every valid token, where :math:`L_b` is the number of valid tokens. The gradient flows
    through :math:`s_b` to every token of the sequence: where the unclipped term is active,
    :math:`\partial\ell_{bt}/\partial\log\pi_{bt'} = -A_{bt}\,s_b/L_b` for each valid :math:`t'`.

    Parameters
    ----------
    logp, logp_old : array_like, shape (B, T)
        Current and old (behaviour) log-probabilities of the sampled tokens; finite.
    advantages : array_like, shape (B,) or (B, T)
        One advantage per sequence (GSPO), or per token: then each token's surrogate uses its own
        advantage with the shared sequence ratio (TRL 1.16.0 with ``importance_sampling_level=
        "sequence"`` and (B, T) advantages); AReaL averages per-token advantages first (pass
        their mean to reproduce it).
    eps_low : float
        Lower clip width, ``0 <= eps_low <= 1`` (the ratio is clipped below at ``1 - eps_low``).
    eps_high : float, optional
        Upper clip width ``>= 0``; default ``eps_low``. GSPO's paper uses ``3e-4`` and ``4e-4``.
    log_ratio_cap : float, optional
        Clamp the mean log-ratio from above before ``exp`` (value capped, zero gradient above the
        cap, as ``torch.clamp(max=...)``). Default: none (exact).
    mask : array_like, shape (B, T), optional
        0/1 padding mask; default all tokens valid.
    cotangent : array_like, shape (B, T), optional
        Weights ``c`` of the vector–Jacobian product; default the mask.

    Returns
    -------
    LossTerms
        ``loss`` (B, T) and ``grad = ∂(Σ_bt c_bt loss_bt)/∂logp``, both 0 at padding.

    Raises
    ------
    ValueError
        Bad shapes or values, ``eps_low`` outside [0, 1], a negative ``eps_high``, a non-0/1 mask,
        or a ratio that overflows float64 where the surrogate is not clipped.

    Notes
    -----
    An all-padding sequence contributes 0 (loss and gradient). The mean, not the sum, of the
    log-ratios makes :math:`s_b` independent of the length for a constant per-token log-ratio;
    the product of the ratios would be :math:`s_b^{L_b}`. At the clip bounds (``s`` exactly
    ``1 ± eps``) the gradient is the unclipped one (``torch.clamp`` includes its bounds). With
    advantages constant per sequence and a cotangent constant over each sequence's valid tokens
    (every standard aggregation) the gradient equals :func:`gspo_token_loss`'s (claim SQ1);
    the gradient region by region is claim SQ2.

    References
    ----------
    Zheng et al. 2025, "Group Sequence Policy Optimization", arXiv 2507.18071: the sequence
    objective.

    Examples
    --------
    >>> import numpy as np
    >>> from refimpl.losses.sequence import gspo_loss
    >>> lp = np.log([[0.5, 0.5], [0.2, 0.9]])
    >>> terms = gspo_loss(lp, lp, [1.0, -2.0], eps_low=0.2)
    >>> terms.loss
    array([[-1., -1.],
           [ 2.,  2.]])
    >>> terms.grad  # on-policy: Σ_t c_bt (−A_b) s_b / L_b = −A_b
    array([[-1., -1.],
           [ 2.,  2.]])
    """
    d, a, m, c, lengths = _inputs(logp, logp_old, advantages, mask, cotangent)
    low, high = _clip_range(eps_low, eps_high, ratio_space=True)
    cap = _as_cap(log_ratio_cap)
    mean_log = _mean_log_ratio(d, lengths)
    s, cap_factor = _capped_ratio(mean_log, cap)
    loss, f = _ppo_branch(a, np.broadcast_to(s[:, None], d.shape), low, high)
    loss = masked(loss, m)
    _require_finite(loss, mean_log, what="loss")
    with np.errstate(invalid="ignore", over="ignore"):
        per_token = np.where(f * c != 0.0, -a * f * c * s[:, None], 0.0)
        row = per_token.sum(axis=1) * cap_factor / np.maximum(lengths, 1.0)
    grad = masked(np.broadcast_to(row[:, None], d.shape), m)
    _require_finite(grad, mean_log, what="gradient")
    return LossTerms(loss, grad)


def gspo_token_loss(
    logp: ArrayLike,
    logp_old: ArrayLike,
    advantages: ArrayLike,
    *,
    eps_low: float,
    eps_high: float | None = None,
    log_ratio_cap: float | None = None,
    mask: ArrayLike | None = None,
    cotangent: ArrayLike | None = None,
) -> LossTerms:
    r"""GSPO-token: the sequence ratio's value with a token ratio's gradient, per-token advantages.

    .. math::

        s_{bt} = \mathrm{sg}[s_b]\,\frac{\pi_{bt}}{\mathrm{sg}[\pi_{bt}]}, \qquad
        \ell_{bt} = \max\bigl(-A_{bt}\, s_{bt},\; -A_{bt}\,\mathrm{clip}(s_{bt}, 1-\epsilon_{\text{low}},
        1+\epsilon_{\text{high}})\bigr),

    with :math:`s_b` as in :func:`gspo_loss`. The value of :math:`s_{bt}` is :math:`s_b`; its
    gradient is :math:`s_b\,\partial\log\pi_{bt}`, so ``grad_bt = c_bt·(−A_bt)·f_bt·s_b`` with
    ``f`` the clip factor (1 unclipped, 0 clipped) and no coupling across tokens.

    Parameters
    ----------
    logp, logp_old : array_like, shape (B, T)
        Current and old log-probabilities; finite.
    advantages : array_like, shape (B,) or (B, T)
        Per-sequence or per-token advantages.
    eps_low, eps_high : float
        Clip widths as in :func:`gspo_loss`.
    log_ratio_cap : float, optional
        Clamp of the token log-ratio :math:`\log s_{bt}` from above (value capped, zero gradient
        above the cap). verl 0.9.1 (``compute_policy_loss_gspo``) and SkyRL 0.3.0
        (``gspo_policy_loss``) use 10. Default: none.
    mask, cotangent : array_like, shape (B, T), optional
        Padding mask (default all valid) and VJP weights (default the mask).

    Returns
    -------
    LossTerms
        ``loss`` (B, T) and ``grad``, both 0 at padding.

    Raises
    ------
    ValueError
        As :func:`gspo_loss`.

    Notes
    -----
    This is what verl 0.9.1 registers as the policy loss ``"gspo"`` and what SkyRL 0.3.0 calls GSPO
    (both the token form of the GSPO paper). Without the stop-gradients the gradient of
    ``exp(mean log-ratio)`` would be :math:`s_b/L_b` at every token of the sequence instead. With
    advantages constant per sequence and a cotangent constant over each sequence's valid tokens
    the gradient equals :func:`gspo_loss`'s (claim SQ1).

    References
    ----------
    Zheng et al. 2025, "Group Sequence Policy Optimization", arXiv 2507.18071 (GSPO-token).

    Examples
    --------
    >>> import numpy as np
    >>> from refimpl.losses.sequence import gspo_token_loss
    >>> lp = np.log([[0.5, 0.5]])
    >>> gspo_token_loss(lp, lp, [[1.0, -1.0]], eps_low=0.2).grad
    array([[-1.,  1.]])
    """
    d, a, m, c, lengths = _inputs(logp, logp_old, advantages, mask, cotangent)
    low, high = _clip_range(eps_low, eps_high, ratio_space=True)
    cap = _as_cap(log_ratio_cap)
    mean_log = _mean_log_ratio(d, lengths)
    s, cap_factor = _capped_ratio(mean_log, cap)
    s_bt = np.broadcast_to(s[:, None], d.shape)
    loss, f = _ppo_branch(a, s_bt, low, high)
    loss = masked(loss, m)
    _require_finite(loss, mean_log, what="loss")
    with np.errstate(invalid="ignore", over="ignore"):
        g = np.where(f * c != 0.0, -a * f * c * s_bt, 0.0) * cap_factor[:, None]
    grad = masked(g, m)
    _require_finite(grad, mean_log, what="gradient")
    return LossTerms(loss, grad)


def gmpo_loss(
    logp: ArrayLike,
    logp_old: ArrayLike,
    advantages: ArrayLike,
    *,
    eps_low: float,
    eps_high: float | None = None,
    mask: ArrayLike | None = None,
    cotangent: ArrayLike | None = None,
) -> LossTerms:
    r"""GMPO: the geometric mean of token ratios clipped in log space by the advantage's sign.

    .. math::

        \tilde d_{bt} = \sigma_{bt}\min\bigl(\sigma_{bt} d_{bt},\;
        \sigma_{bt}\,\mathrm{clip}(d_{bt}, -\epsilon_{\text{low}}, \epsilon_{\text{high}})\bigr),
        \qquad
        \ell_b = -\bar A_b \exp\Bigl(\frac{1}{L_b}\sum_{t\in b} \tilde d_{bt}\Bigr),

    with :math:`d_{bt} = \log\pi_{bt} - \log\pi^{\text{old}}_{bt}`,
    :math:`\sigma_{bt} = \mathrm{sign}(A_{bt})` and :math:`\bar A_b` the mean advantage over the
    valid tokens. Every valid token of sequence ``b`` carries :math:`\ell_b`, so aggregating with
    ``seq-mean-token-mean`` gives verl's batch mean of :math:`\ell_b`.

    Parameters
    ----------
    logp, logp_old : array_like, shape (B, T)
        Current and old log-probabilities; finite.
    advantages : array_like, shape (B,) or (B, T)
        Per-sequence or per-token advantages (the sign is taken per token, the value averaged).
    eps_low, eps_high : float
        Clip widths **of the log-ratio**, ``>= 0`` (``eps_high`` defaults to ``eps_low``); the GMPO
        paper uses 0.4, i.e. ratios in :math:`[e^{-0.4}, e^{0.4}]`.
    mask, cotangent : array_like, shape (B, T), optional
        Padding mask (default all valid) and VJP weights (default the mask).

    Returns
    -------
    LossTerms
        ``loss`` (B, T), :math:`\ell_b` at every valid token, and
        ``grad_bt' = (Σ_t c_bt)·(−Ā_b r_b / L_b)·g_bt'`` with :math:`r_b` the geometric mean and
        ``g`` = 1 where the token's log-ratio is not clipped for its sign (0 for ``A_bt = 0``).

    Raises
    ------
    ValueError
        Bad shapes or values, a negative clip width, a non-0/1 mask, or a geometric mean that
        overflows float64.

    Notes
    -----
    Follows verl 0.9.1 ``compute_policy_loss_geo_mean`` exactly except that verl divides by
    ``L_b + 1e-8`` (a relative difference of about ``1e-8/L_b`` in the exponent and the mean
    advantage) and averages over all rows, all-padding ones included; here the mean is exact and
    an all-padding row gives 0. A token with ``A_bt = 0`` has sign 0: its log-ratio is replaced by
    0 (it counts in ``L_b`` but moves neither the ratio nor the gradient), as in verl. At a clip
    bound the gradient passes (``torch.clamp`` includes its bounds). Gradient: claim SQ3.

    References
    ----------
    Zhao et al. 2025, "Geometric-Mean Policy Optimization", arXiv 2507.20673.

    Examples
    --------
    >>> import numpy as np
    >>> from refimpl.losses.sequence import gmpo_loss
    >>> lp = np.log([[0.5, 0.5]])
    >>> terms = gmpo_loss(lp, lp, [2.0], eps_low=0.4)
    >>> terms.loss, terms.grad
    (array([[-2., -2.]]), array([[-2., -2.]]))
    """
    d, a, m, c, lengths = _inputs(logp, logp_old, advantages, mask, cotangent)
    low, high = _clip_range(eps_low, eps_high, ratio_space=False)
    sign = np.sign(a)
    dc = np.clip(d, -low, high)
    d_tilde = sign * np.minimum(sign * d, sign * dc)
    inside = ((d >= -low) & (d <= high)).astype(np.float64)
    # derivative of σ·min(σd, σ·clip(d)): the unclipped term wins -> 1, the clipped one wins or
    # ties -> 1[inside]. A tie with σ ≠ 0 means clip(d) = d, inside the range, where both terms'
    # derivatives are 1, so torch's even split of a tie's gradient is 1 as well.
    g = np.where(sign * d < sign * dc, 1.0, inside) * (sign != 0.0)
    n = np.maximum(lengths, 1.0)
    mean_log = np.asarray(masked(d_tilde, m).sum(axis=1) / n, dtype=np.float64)
    a_bar = a.sum(axis=1) / n
    with np.errstate(over="ignore"):
        r = np.exp(mean_log)
    with np.errstate(invalid="ignore", over="ignore"):
        seq_loss = np.where(a_bar != 0.0, -a_bar * r, 0.0)
        row = np.where(a_bar != 0.0, c.sum(axis=1) * -a_bar * r / n, 0.0)
    loss = masked(np.broadcast_to(seq_loss[:, None], d.shape), m)
    _require_finite(loss, mean_log, what="loss")
    grad = masked(row[:, None] * g, m)
    _require_finite(grad, mean_log, what="gradient")
    return LossTerms(loss, grad)
