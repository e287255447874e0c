r"""Rejection statistics and masks for off-policy samples that are not ratio bands.

A trainer that learns from samples of a behaviour policy :math:`\mu` (the inference engine, or an
older policy) with a target policy :math:`\pi` (the trainer) measures, per token, the log-ratio
:math:`d_t = \log\pi_t - \log\mu_t` (``logp_target − logp_behavior``) and rejects what diverges too
much. The importance-ratio bands (truncation, masking of :math:`\rho` outside :math:`[\alpha, \beta]`)
live in :mod:`refimpl.staleness`; this module holds the other statistics:

- :func:`sequence_divergence`: per-sequence sum, mean or max of a token KL estimator (k1, k2, k3);
- :func:`any_token_veto`: reject a sequence if any token's ratio falls below a threshold;
- :func:`is_batch_normalize`: rescale importance weights to mean 1 over the batch;
- :func:`off_policy_sequence_mask`: DeepSeek-V3.2's off-policy sequence mask (OPSM);
- :func:`m2po_mask`: M2PO's second-moment token mask;
- :func:`divergence_rejection_mask`: keep tokens or sequences whose k1/k2/k3 statistic is within
  bounds (verl's rollout rejection).

Masks are *keep* masks: 1.0 = kept, 0.0 = rejected (multiply them into the loss mask); padding
(``mask == 0``) is 0 in every (B, T) output. The inputs are arrays of shape (B, T) whose padding
holds arbitrary finite values.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import (
    as_float_array,
    as_real,
    invalid,
    require_entries,
    require_in_range,
    require_same_shape,
    wrong_type,
)
from refimpl.losses._common import as_choice, like_tokens, masked, token_array, token_mask

__all__ = [
    "any_token_veto",
    "divergence_rejection_mask",
    "is_batch_normalize",
    "m2po_mask",
    "off_policy_sequence_mask",
    "sequence_divergence",
]

FloatArray = NDArray[np.float64]
Estimator = Literal["k1", "k2", "k3"]
Reduce = Literal["sum", "mean", "max"]
Level = Literal["token", "sequence"]

#: ``exp(x)`` is finite in float64 exactly when ``x <= _LOG_MAX``.
_LOG_MAX = float(np.log(np.finfo(np.float64).max))

#: Taylor coefficients 1/k! of ``expm1(d) − d = Σ_{k>=2} d^k/k!`` (used for ``|d| < 1/2``).
_K3_SERIES = [1.0 / math.factorial(k) for k in range(2, 19)]


# ---------------------------------------------------------------------------------------------
# shared validation and arithmetic
# ---------------------------------------------------------------------------------------------


def _log_ratio(
    logp_target: ArrayLike, logp_behavior: ArrayLike, mask: ArrayLike | None
) -> tuple[FloatArray, FloatArray]:
    """``(d, m)``: the token log-ratio ``log π − log μ`` (0 at padding) and the 0/1 mask."""
    t = token_array(logp_target, name="logp_target")
    b = like_tokens(logp_behavior, t.shape, name="logp_behavior", like="logp_target")
    m = token_mask(mask, t.shape, like="logp_target")
    with np.errstate(over="ignore", invalid="ignore"):
        d = masked(t - b, m)
    require_entries(
        d,
        ~np.isfinite(d),
        name="logp_target − logp_behavior",
        rule="be finite at every real token",
        fix="; the difference overflows float64: pass log-probabilities (<= 0).",
    )
    return d, m


def _as_clamp(log_ratio_clamp: Any) -> float:
    if log_ratio_clamp is None:
        return math.inf
    return as_real(
        log_ratio_clamp,
        name="log_ratio_clamp",
        low=0.0,
        low_open=True,
        meaning="the log-ratio is clipped to [-c, c]; verl uses 20",
    )


def _k3(d: FloatArray) -> FloatArray:
    """``exp(d) − 1 − d`` without cancellation near 0 (a Taylor series for ``|d| < 1/2``).

    It is ``+inf`` where ``exp(d)`` overflows float64 (``d > 709.78``): the true value exceeds
    every float64, and any finite threshold rejects it.
    """
    small = np.abs(d) < 0.5
    series = np.zeros_like(d)
    for coef in reversed(_K3_SERIES):
        series = (series + coef) * np.where(small, d, 0.0)
    series = series * np.where(small, d, 0.0)
    with np.errstate(over="ignore"):
        large = np.where(d > _LOG_MAX, np.inf, np.expm1(np.minimum(d, _LOG_MAX)) - d)
    return np.asarray(np.where(small, series, large), dtype=np.float64)


def _token_estimator(d: FloatArray, estimator: str) -> FloatArray:
    """The token KL estimator of ``KL(μ‖π)`` under samples of ``μ`` (verl's signs)."""
    if estimator == "k1":
        return -d
    if estimator == "k2":
        with np.errstate(over="ignore"):
            return np.asarray(0.5 * d * d, dtype=np.float64)
    return _k3(d)


# ---------------------------------------------------------------------------------------------
# sequence divergence
# ---------------------------------------------------------------------------------------------


def sequence_divergence(
    logp_target: ArrayLike,
    logp_behavior: ArrayLike,
    *,
    estimator: Estimator = "k1",
    reduce: Reduce = "sum",
    mask: ArrayLike | None = None,
    log_ratio_clamp: float | None = None,
) -> FloatArray:
    r"""Per-sequence sum, mean or max of a token KL estimator between behaviour and target.

    With :math:`d_t = \log\pi_t - \log\mu_t` and :math:`\rho_t = e^{d_t}`, the token estimators of
    :math:`\mathrm{KL}(\mu \,\|\, \pi)` under tokens sampled from :math:`\mu` are

    .. math::

        k_1 = -d_t, \qquad k_2 = \tfrac12 d_t^2, \qquad k_3 = \rho_t - 1 - d_t,

    and the statistic is :math:`\sum_t k`, :math:`\frac1{|y|}\sum_t k` or :math:`\max_t k` over the
    valid tokens :math:`t` of the sequence.

    .. warning::

        A *sum* grows with the length: under i.i.d. per-token noise its mean is :math:`T` times the
        per-token KL, so a fixed threshold on ``reduce="sum"`` rejects long sequences more often
        (claims RJ2, RJ3). The mean does not have this trap.

    These are the statistics of verl 0.9.1's rollout rejection
    (``trainer/ppo/rollout_corr_helper.compute_rollout_rejection_mask``, options ``seq_sum_k*``,
    ``seq_mean_k*``, ``seq_max_k2``/``k3``) with its signs: ``log_ratio = old_log_prob −
    rollout_log_prob`` and ``token_k1 = −log_ratio``. verl clips the log-ratio to ``[−20, 20]``
    first (``SAFETY_BOUND``): pass ``log_ratio_clamp=20.0`` to reproduce that; refimpl does not clip
    by default. verl's means divide by ``n + 1e-8`` (relative ``1e-8/n``; exact here). verl has
    no ``seq_max_k1``; it is allowed here.

    Parameters
    ----------
    logp_target : array_like, shape (B, T)
        :math:`\log\pi` of the sampled tokens under the trainer; finite.
    logp_behavior : array_like, shape (B, T)
        :math:`\log\mu` under the behaviour (rollout) policy; finite.
    estimator : {"k1", "k2", "k3"}
        The token estimator.
    reduce : {"sum", "mean", "max"}
        How a sequence's valid tokens are reduced.
    mask : array_like, shape (B, T), optional
        0/1 padding mask (1 = a real token). Default: every token is real.
    log_ratio_clamp : float, optional
        ``c > 0``: clip :math:`d_t` to ``[−c, c]`` before the estimator (verl: 20).

    Returns
    -------
    ndarray of float64, shape (B,)
        The statistic per sequence; 0.0 for a sequence without a valid token (as verl). ``k3`` is
        ``+inf`` where :math:`\rho_t` overflows float64 (:math:`d_t > 709.78`, no clamp).

    Raises
    ------
    ValueError
        If an input is not finite or not 2-D, shapes differ, ``mask`` is not 0/1, an option is
        unknown, or ``log_ratio_clamp <= 0``.

    Notes
    -----
    ``k2`` and ``k3`` are :math:`\ge 0` per token, with equality exactly on-policy (:math:`d_t = 0`).
    ``k3`` is computed without cancellation near :math:`d = 0` (Taylor series below
    :math:`|d| = 1/2`): a few ulps relative. Sums are plain float64 sums (relative error
    :math:`\lesssim T\varepsilon`).

    References
    ----------
    Schulman 2020, "Approximating KL divergence" (k1, k2, k3).

    Examples
    --------
    >>> import numpy as np
    >>> import refimpl.losses.rejection as rj
    >>> lp = np.log([[0.5, 0.25, 0.9]])
    >>> lq = np.log([[0.25, 0.25, 0.1]])
    >>> rj.sequence_divergence(lp, lq, estimator="k1", reduce="sum", mask=[[1, 1, 0]])
    array([-0.69314718])
    >>> rj.sequence_divergence(lp, lq, estimator="k3", reduce="max", mask=[[1, 1, 0]])
    array([0.30685282])
    """
    d, m = _log_ratio(logp_target, logp_behavior, mask)
    kind = as_choice(estimator, name="estimator", choices=("k1", "k2", "k3"))
    how = as_choice(reduce, name="reduce", choices=("sum", "mean", "max"))
    return _sequence_statistic(d, m, kind, how, _as_clamp(log_ratio_clamp))


def _sequence_statistic(d: FloatArray, m: FloatArray, kind: str, how: str, c: float) -> FloatArray:
    """:func:`sequence_divergence` on validated inputs (shared with the rejection mask)."""
    k = masked(_token_estimator(np.clip(d, -c, c), kind), m)
    count = m.sum(axis=1)
    if how == "max":
        top = np.max(np.where(m > 0, k, -np.inf), axis=1)
        return np.asarray(np.where(count > 0, top, 0.0), dtype=np.float64)
    total = k.sum(axis=1)
    if how == "sum":
        return np.asarray(total, dtype=np.float64)
    return np.asarray(np.where(count > 0, total / np.maximum(count, 1.0), 0.0), dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# any-token veto
# ---------------------------------------------------------------------------------------------


def any_token_veto(
    logp_target: ArrayLike,
    logp_behavior: ArrayLike,
    *,
    threshold: float | None,
    mask: ArrayLike | None = None,
    upper: float | None = None,
) -> FloatArray:
    r"""Keep mask that rejects a whole sequence when any token's ratio falls below a threshold.

    .. math::

        \mathrm{keep}_b = \mathbb{1}\Bigl[\min_{t:\,m_{bt}=1} \rho_{bt} \ge \tau\Bigr]
        \;\Bigl(\cdot\, \mathbb{1}\bigl[\max_{t} \rho_{bt} \le U\bigr] \text{ with ``upper``}\Bigr),

    decided in log space (:math:`d_t < \log\tau` rejects), so no ratio is exponentiated. With
    ``threshold=None`` there is no floor (the first factor is 1) and ``upper`` is required: the
    veto is then the ceiling alone, :math:`\mathbb{1}[\max_t \rho_{bt} \le U]`.

    A single token that the trainer finds far less likely than the sampler did (a catastrophic
    mismatch) vetoes its sequence, however ordinary the other tokens are: a mean over tokens would
    dilute it by the length.

    .. note::

        verl 0.9.1 has no veto any more (a stale comment "RS + veto" remains in
        ``core_algos.compute_policy_loss_bypass_mode``). SkyRL 0.3.0
        (``compute_outlier_token_mask`` in ``off_policy_correction_utils.py`` under
        ``backends/skyrl_train/utils/``) rejects a sequence if any valid token has
        :math:`\rho < \tau` (``outlier_token_is_threshold_low``) or :math:`\rho > U`
        (``..._high``; either may be unset: ``threshold=None`` or no ``upper``), comparing ``exp(clamp(d, ±20))`` in float32: the same
        decision except at a ratio within float32 rounding of a threshold or beyond
        :math:`e^{\pm 20}`.

    Parameters
    ----------
    logp_target, logp_behavior : array_like, shape (B, T)
        Log-probabilities under the trainer :math:`\pi` and the behaviour policy :math:`\mu`.
    threshold : float or None
        :math:`0 < \tau \le 1`: the smallest ratio a token may have (``ρ = τ`` is kept).
        ``None``: no floor (only with ``upper``).
    mask : array_like, shape (B, T), optional
        0/1 padding mask; padding never vetoes.
    upper : float, optional
        :math:`U \ge 1`: also reject a sequence with a token of ratio above ``U``.

    Returns
    -------
    ndarray of float64, shape (B,)
        1.0 = kept, 0.0 = vetoed. A sequence without a valid token is kept.

    Raises
    ------
    ValueError
        If an input is not finite, shapes differ, ``mask`` is not 0/1, ``threshold`` is not in
        ``(0, 1]``, ``upper < 1``, or both ``threshold`` and ``upper`` are ``None``.

    Examples
    --------
    >>> import numpy as np
    >>> import refimpl.losses.rejection as rj
    >>> lp = np.log([[0.5, 0.01, 0.5], [0.5, 0.5, 0.5]])
    >>> lq = np.log([[0.5, 0.5, 0.5], [0.5, 0.5, 0.5]])
    >>> rj.any_token_veto(lp, lq, threshold=0.1)
    array([0., 1.])
    >>> rj.any_token_veto(lp, lq, threshold=0.1, mask=[[1, 0, 1], [1, 1, 1]])
    array([1., 1.])
    >>> rj.any_token_veto(lq, lp, threshold=None, upper=10.0)  # ρ = 50 in row 0: over the ceiling
    array([0., 1.])
    """
    d, m = _log_ratio(logp_target, logp_behavior, mask)
    if threshold is None and upper is None:
        raise invalid(
            "threshold",
            "be a ratio floor in (0, 1] when upper is None",
            threshold,
            "Pass threshold= (e.g. 0.1), upper= (a ratio ceiling >= 1, for a veto above it only), "
            "or both; with neither nothing would ever be vetoed.",
        )
    bad = np.zeros(d.shape, dtype=np.bool_)
    if threshold is not None:
        tau = as_real(
            threshold, name="threshold", low=0.0, high=1.0, low_open=True, meaning="a ratio floor"
        )
        bad |= (d < math.log(tau)) & (m > 0)
    if upper is not None:
        u = as_real(upper, name="upper", low=1.0, meaning="a ratio ceiling")
        bad |= (d > math.log(u)) & (m > 0)
    return np.asarray(~np.any(bad, axis=1), dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# batch normalisation of IS weights
# ---------------------------------------------------------------------------------------------


def is_batch_normalize(
    w: ArrayLike, *, mask: ArrayLike | None = None, level: Level = "token"
) -> FloatArray:
    r"""Importance weights divided by their mean over the valid entries of the batch.

    .. math::

        \tilde w = \frac{w}{\bar w}, \qquad
        \bar w = \frac{\sum_{bt} m_{bt} w_{bt}}{\sum_{bt} m_{bt}} \ (\text{token}), \qquad
        \bar w = \frac{1}{|\{b : n_b > 0\}|}\sum_{b:\,n_b>0}
                 \frac{\sum_t m_{bt} w_{bt}}{n_b} \ (\text{sequence}),

    with :math:`n_b = \sum_t m_{bt}`. Padding never enters the mean (dividing by the padded count
    would shrink :math:`\bar w` and inflate every weight) and is 0 in the result.

    This is verl 0.9.1's ``rollout_is_batch_normalize``
    (``trainer/ppo/rollout_corr_helper.compute_rollout_correction_weights``): the masked mean of
    the token weights for ``rollout_is="token"``, and for ``"sequence"`` the mean over non-empty
    sequences of each sequence's (constant) weight. verl leaves the weights unchanged when
    :math:`\bar w \le 10^{-8}`; here only :math:`\bar w = 0` (every valid weight 0) leaves them so.

    Parameters
    ----------
    w : array_like, shape (B, T) or (B,)
        Non-negative finite weights: per token, or one per sequence.
    mask : array_like, same shape as ``w``, optional
        0/1 validity mask. Default: every entry is valid.
    level : {"token", "sequence"}
        For (B, T) weights: mean over valid tokens, or over sequences (each sequence's mean over
        its valid tokens). Ignored for (B,) weights (one entry per sequence).

    Returns
    -------
    ndarray of float64, same shape as ``w``
        The normalised weights (mean 1 over the valid entries at the chosen level); 0 at padding.

    Raises
    ------
    ValueError
        If ``w`` is not 1-D or 2-D, not finite or negative, ``mask`` does not match or is not 0/1,
        ``level`` is unknown, or no entry is valid.

    Examples
    --------
    >>> import refimpl.losses.rejection as rj
    >>> rj.is_batch_normalize([[1.0, 3.0, 9.0], [2.0, 2.0, 9.0]], mask=[[1, 1, 0], [1, 1, 0]])
    array([[0.5, 1.5, 0. ],
           [1. , 1. , 0. ]])
    >>> rj.is_batch_normalize([0.5, 1.5, 7.0], mask=[1, 1, 0])
    array([0.5, 1.5, 0. ])
    """
    arr = as_float_array(w, name="w", ndim=(1, 2))
    require_in_range(arr, name="w", low=0.0, meaning="importance weights")
    how = as_choice(level, name="level", choices=("token", "sequence"))
    m = _entry_mask(mask, arr)
    if not np.any(m > 0):
        raise invalid(
            "mask", "mark at least one valid entry", m, "Pass a mask with at least one 1."
        )
    if arr.ndim == 2 and how == "sequence":
        count = m.sum(axis=1)
        rows = count > 0
        per_row = (arr * m).sum(axis=1)[rows] / count[rows]
        mean = float(per_row.mean())
    else:
        mean = float((arr * m).sum() / m.sum())
    out = masked(arr, m)
    return out if mean == 0.0 else np.asarray(out / mean, dtype=np.float64)


def _entry_mask(mask: ArrayLike | None, like: FloatArray) -> FloatArray:
    if mask is None:
        return np.ones(like.shape, dtype=np.float64)
    m = as_float_array(mask, name="mask", ndim=like.ndim)
    require_same_shape(m, like, names=("mask", "w"))
    require_entries(
        m,
        (m != 0.0) & (m != 1.0),
        name="mask",
        rule="hold only 0 and 1 (1 = a valid entry)",
        fix="; pass a boolean or 0/1 mask.",
    )
    return m


# ---------------------------------------------------------------------------------------------
# OPSM
# ---------------------------------------------------------------------------------------------


def off_policy_sequence_mask(
    logp_target: ArrayLike,
    logp_behavior: ArrayLike,
    advantages: ArrayLike,
    *,
    delta: float,
    mask: ArrayLike | None = None,
) -> FloatArray:
    r"""DeepSeek-V3.2's off-policy sequence mask (OPSM): drop negative-advantage drifted sequences.

    .. math::

        \mathrm{keep}_b = \mathbb{1}\bigl[A_b \ge 0\bigr] \;\lor\;
        \mathbb{1}\Bigl[\frac{1}{n_b}\sum_{t:\,m_{bt}=1}\bigl(\log\mu_{bt} - \log\pi_{bt}\bigr)
        \le \delta\Bigr],

    with :math:`n_b` the sequence's valid tokens (the mean is 0 when :math:`n_b = 0`). The mean
    k1 term estimates :math:`\mathrm{KL}(\mu\,\|\,\pi)` per token. A sequence that earned a negative
    advantage under a policy the trainer has drifted away from mostly pushes down tokens the
    trainer no longer produces; dropping it removes that noise, while positive-advantage sequences
    are always kept.

    This follows TRL 1.16.0 (``GRPOTrainer.get_off_policy_mask``, ``off_policy_mask_threshold``,
    "Equation 9 of the DeepSeek-V3.2 paper", arXiv 2512.02556): ``kl = sampling_logps −
    per_token_logps``, mean over the mask with the count clamped to 1, keep if
    ``advantage >= 0`` or ``mean <= δ``. TRL takes :math:`\mu` from the sampler (vLLM) when it has
    it, else the old policy. verl 0.9.1, AReaL 1.0.4, SkyRL 0.3.0 and OpenRLHF 0.11.2 have no OPSM.

    Parameters
    ----------
    logp_target : array_like, shape (B, T)
        :math:`\log\pi` under the current trainer policy.
    logp_behavior : array_like, shape (B, T)
        :math:`\log\mu` under the policy that sampled the tokens.
    advantages : array_like, shape (B,)
        One advantage per sequence; finite.
    delta : float
        :math:`\delta \ge 0`: the largest mean per-token divergence a negative-advantage sequence
        may have (TRL's example value: 0.5).
    mask : array_like, shape (B, T), optional
        0/1 padding mask.

    Returns
    -------
    ndarray of float64, shape (B,)
        1.0 = kept, 0.0 = dropped.

    Raises
    ------
    ValueError
        If an input is not finite, shapes differ, ``advantages`` is not one per sequence,
        ``mask`` is not 0/1, or ``delta < 0``.

    Examples
    --------
    >>> import numpy as np
    >>> import refimpl.losses.rejection as rj
    >>> lp = np.log([[0.1, 0.1], [0.1, 0.1], [0.5, 0.5]])
    >>> lq = np.log([[0.5, 0.5], [0.5, 0.5], [0.5, 0.5]])
    >>> rj.off_policy_sequence_mask(lp, lq, [1.0, -1.0, -1.0], delta=0.5)
    array([1., 0., 1.])
    """
    d, m = _log_ratio(logp_target, logp_behavior, mask)
    a = as_float_array(advantages, name="advantages", ndim=1)
    if a.shape != (d.shape[0],):
        raise invalid(
            "advantages",
            f"have one entry per sequence (B = {d.shape[0]})",
            a,
            "Pass per-sequence advantages of shape (B,).",
        )
    bound = as_real(delta, name="delta", low=0.0, meaning="a mean per-token divergence")
    count = m.sum(axis=1)
    mean_k1 = -d.sum(axis=1) / np.maximum(count, 1.0)
    return np.asarray((a >= 0.0) | (mean_k1 <= bound), dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# M2PO
# ---------------------------------------------------------------------------------------------


def m2po_mask(
    logp_target: ArrayLike,
    logp_behavior: ArrayLike,
    *,
    tau: float,
    mask: ArrayLike | None = None,
    strict: bool = True,
) -> FloatArray:
    r"""M2PO's second-moment token mask: drop the largest squared log-ratios until the mean is small.

    With :math:`v_t = d_t^2` over the :math:`n` valid tokens of the whole batch, sorted so that
    :math:`v_{(1)} \ge v_{(2)} \ge \dots \ge v_{(n)}` (ties in row-major token order: the earlier
    token comes first), the mask drops the first :math:`k` tokens of that order, where

    .. math::

        k = \min\Bigl\{\,j \in \{0, \dots, n-1\} :
            \frac{1}{n - j}\sum_{i > j} v_{(i)} < \tau \Bigr\}
        \quad(\le \tau \text{ when } \texttt{strict=False}),

    and :math:`k = n - 1` (only the smallest is kept) when no :math:`j` qualifies. Dropping the
    largest values first minimises the remaining mean for every number dropped, so :math:`k` is
    the smallest number of tokens *any* selection must drop (claim RJ1). Which of several equal
    values is dropped does not change :math:`k` or the remaining mean.

    .. note::

        This is AReaL 1.0.4's ``trainer/ppo/actor._apply_m2po_masking`` / ``_get_m2po_loss_mask``
        (``actor.m2_threshold``): the strict comparison, the fallback that keeps one token, and the
        batch-wide (not per-sequence) selection. AReaL squares ``old_logp − prox_logp`` (the
        behaviour against the proximal policy); pass those as ``logp_behavior`` and
        ``logp_target``. AReaL breaks ties by ``torch.sort`` order, which is not specified.

    Parameters
    ----------
    logp_target, logp_behavior : array_like, shape (B, T)
        Log-probabilities under the target (proximal) and behaviour policies.
    tau : float
        :math:`\tau > 0`: the bound on the mean squared log-ratio of the kept tokens (the M2PO
        paper, arXiv 2510.01161, uses 0.04).
    mask : array_like, shape (B, T), optional
        0/1 padding mask.
    strict : bool
        ``True`` (default, AReaL): the kept mean must be ``< τ``; ``False``: ``<= τ``.

    Returns
    -------
    ndarray of float64, shape (B, T)
        1.0 = kept, 0.0 = dropped or padding. All zeros when there is no valid token.

    Raises
    ------
    ValueError
        If an input is not finite, shapes differ, ``mask`` is not 0/1 or ``tau <= 0``.
    TypeError
        If ``strict`` is not a bool.

    Notes
    -----
    The kept mean is decided in float64 on suffix sums accumulated from the smallest value up
    (relative error :math:`\lesssim n\varepsilon`): a mean that close to :math:`\tau` may be decided
    either way. Squares that overflow float64 are ``inf`` and dropped first.

    Examples
    --------
    >>> import numpy as np
    >>> import refimpl.losses.rejection as rj
    >>> lq = np.zeros((2, 3))
    >>> lp = np.array([[0.1, 0.5, 0.0], [0.3, 0.1, 0.2]])
    >>> rj.m2po_mask(lp, lq, tau=0.02)
    array([[1., 0., 1.],
           [0., 1., 1.]])
    """
    d, m = _log_ratio(logp_target, logp_behavior, mask)
    bound = as_real(tau, name="tau", low=0.0, low_open=True, meaning="a mean squared log-ratio")
    if not isinstance(strict, bool):
        raise wrong_type("strict", "a bool", strict, "Pass strict=True (AReaL: '<') or False.")
    valid = np.flatnonzero(m.ravel() > 0)
    keep = np.zeros(m.size, dtype=np.float64)
    if valid.size == 0:
        return keep.reshape(m.shape)
    with np.errstate(over="ignore"):
        v = d.ravel()[valid] ** 2
    order = np.argsort(-v, kind="stable")  # descending; equal values keep row-major order
    ascending_sums = np.cumsum(v[order][::-1])  # sums of the j smallest, j = 1..n
    n = v.size
    tail_sums = ascending_sums[::-1]  # tail_sums[j] = sum of v_(j+1..n)
    tail_means = tail_sums / np.arange(n, 0, -1)
    ok = tail_means < bound if strict else tail_means <= bound
    dropped = int(np.argmax(ok)) if np.any(ok) else n - 1
    keep[valid] = 1.0
    keep[valid[order[:dropped]]] = 0.0
    return keep.reshape(m.shape)


# ---------------------------------------------------------------------------------------------
# divergence rejection mask
# ---------------------------------------------------------------------------------------------

RejectReduce = Literal["token", "sum", "mean", "max"]


def divergence_rejection_mask(
    logp_target: ArrayLike,
    logp_behavior: ArrayLike,
    *,
    estimator: Estimator,
    reduce: RejectReduce,
    upper: float,
    lower: float | None = None,
    mask: ArrayLike | None = None,
    log_ratio_clamp: float | None = None,
) -> FloatArray:
    r"""A 0/1 keep mask: tokens or sequences whose KL-estimator statistic lies within bounds.

    With :math:`d_t = \log\pi_t - \log\mu_t` (clipped to :math:`[-c, c]` if ``log_ratio_clamp``
    is given) and the token estimator :math:`k_t \in \{-d_t,\ \tfrac12 d_t^2,\ e^{d_t} - 1 - d_t\}`
    (k1, k2, k3), the statistic :math:`s` is :math:`k_t` itself (``reduce="token"``) or the
    sequence's :func:`sequence_divergence` (sum, mean or max over its valid tokens), and

    .. math::

        \mathrm{keep}_{bt} = m_{bt}\,\mathbb{1}\bigl[\ell \le s \le u\bigr],

    both bounds inclusive (:math:`\ell = -\infty` when ``lower`` is omitted). A sequence-level
    decision is broadcast to every valid token of the sequence.

    This is verl 0.9.1's rollout rejection
    (``trainer/ppo/rollout_corr_helper.compute_rollout_rejection_mask``; options ``token_k*``,
    ``seq_sum_k*``, ``seq_mean_k*``, ``seq_max_k2``/``k3`` with ``rollout_rs_threshold``), which
    returns ``response_mask`` times the keep decision. verl clips :math:`d` to ``[−20, 20]``
    (``SAFETY_BOUND``; pass ``log_ratio_clamp=20.0``), keeps ``k2``/``k3`` statistics ``<=``
    the threshold and a ``k1`` statistic in ``[log lo, log hi]`` (``lower=log(lo)``,
    ``upper=log(hi)`` here); its means divide by ``n + 1e-8``.

    Parameters
    ----------
    logp_target : array_like, shape (B, T)
        :math:`\log\pi` of the sampled tokens under the trainer; finite.
    logp_behavior : array_like, shape (B, T)
        :math:`\log\mu` under the behaviour (rollout) policy; finite.
    estimator : {"k1", "k2", "k3"}
        The token estimator.
    reduce : {"token", "sum", "mean", "max"}
        ``"token"``: each token is judged on its own estimator; otherwise each sequence on the
        sum, mean or max over its valid tokens.
    upper : float
        :math:`u`: the largest statistic kept (inclusive); finite.
    lower : float, optional
        :math:`\ell \le u`: the smallest statistic kept (inclusive). Default: no lower bound.
    mask : array_like, shape (B, T), optional
        0/1 padding mask (1 = a real token). Default: every token is real.
    log_ratio_clamp : float, optional
        ``c > 0``: clip :math:`d_t` to ``[−c, c]`` before the estimator (verl: 20).

    Returns
    -------
    ndarray of float64, shape (B, T)
        1.0 = kept, 0.0 = rejected or padding. A sequence without a valid token is all 0.

    Raises
    ------
    ValueError
        If an input is not finite or not 2-D, shapes differ, ``mask`` is not 0/1, an option is
        unknown, ``lower > upper``, or ``log_ratio_clamp <= 0``.

    Notes
    -----
    A statistic that exceeds float64 (``k3`` with :math:`d_t > 709.78` and no clamp, a ``k2``
    square or a sum past ``1.8e308``) is ``+inf`` and is rejected by every finite ``upper``.

    Examples
    --------
    >>> import numpy as np
    >>> import refimpl.losses.rejection as rj
    >>> d = np.array([[0.5, -1.0, 2.0], [0.25, 0.5, 9.0]])
    >>> rj.divergence_rejection_mask(d, np.zeros_like(d), estimator="k2", reduce="token",
    ...                              upper=0.5)
    array([[1., 1., 0.],
           [1., 1., 0.]])
    >>> rj.divergence_rejection_mask(d, np.zeros_like(d), estimator="k2", reduce="max",
    ...                              upper=0.5, mask=[[1, 1, 1], [1, 1, 0]])
    array([[0., 0., 0.],
           [1., 1., 0.]])
    """
    d, m = _log_ratio(logp_target, logp_behavior, mask)
    kind = as_choice(estimator, name="estimator", choices=("k1", "k2", "k3"))
    how = as_choice(reduce, name="reduce", choices=("token", "sum", "mean", "max"))
    high = as_real(upper, name="upper", meaning="the largest statistic kept")
    low = -math.inf
    if lower is not None:
        low = as_real(
            lower,
            name="lower",
            high=high,
            meaning=f"the smallest statistic kept, at most upper={high!r}",
        )
    c = _as_clamp(log_ratio_clamp)
    with np.errstate(over="ignore", invalid="ignore"):
        if how == "token":
            stat = _token_estimator(np.clip(d, -c, c), kind)
        else:
            seq = _sequence_statistic(d, m, kind, how, c)
            stat = np.broadcast_to(seq[:, None], d.shape)
        keep = (stat >= low) & (stat <= high) & (m > 0)
    return np.asarray(keep, dtype=np.float64)
