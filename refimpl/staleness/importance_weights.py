"""Importance weights that correct for a stale behaviour policy (conventions §masks-and-weights).

Truncated (:func:`truncated_is_weights`), masked (:func:`masked_is_weights`) and decoupled-PPO
(:func:`decoupled_ppo_weights`) weights, per token, per sequence or as a geometric mean, all
computed from log-ratios so that no product of ratios overflows.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import (
    as_real,
    invalid,
    require_ordered,
)
from refimpl.staleness._checks import (
    _LOG_MAX,
    Level,
    NonFinite,
    _as_cap,
    _as_choice,
    _as_clamp,
    _as_clamp_at,
    _as_level,
    _as_lower,
    _capped_exp,
    _nonfinite_log_ratio,
    _sequence_log_ratio,
)

__all__ = ["decoupled_ppo_weights", "masked_is_weights", "truncated_is_weights"]


def truncated_is_weights(
    logp_target: ArrayLike,
    logp_behavior: ArrayLike,
    *,
    cap: float,
    level: Level = "token",
    mask: ArrayLike | None = None,
    lower: float | None = None,
    log_ratio_clamp: float | None = None,
    nonfinite: NonFinite = "error",
    clamp_at: Literal["level", "token"] = "level",
) -> NDArray[np.float64]:
    r"""Truncated importance weights (TIS) at token, sequence or geometric level.

    .. math::

        w_t = \min(\rho_t, C), \qquad
        w^{\text{seq}} = \min\Bigl(\prod_t \rho_t,\, C\Bigr), \qquad
        w^{\text{geo}} = \min\Bigl(\bigl(\prod_t \rho_t\bigr)^{1/T},\, C\Bigr),

    with :math:`\rho_t = \exp(\log\pi_t - \log\mu_t)` and the products over the valid tokens,
    computed as :math:`\exp(\min(\sum_t \log\rho_t, \log C))` (log space: never overflows).

    .. warning::

        ``level="sequence"`` is the **product** of the token ratios, as in verl 0.9.1
        (``rollout_is="sequence"``) and TRL's ``vllm_importance_sampling_mode="sequence_*"``. TRL's
        ``importance_sampling_level="sequence"`` (GSPO) is the **geometric mean** instead: its
        counterpart here is ``level="geometric"`` (read in TRL 1.16.0). verl also clamps the log-ratio (sum) to
        ``[-20, 20]`` before ``exp``; refimpl computes it exactly.

        TRL's ``*_truncate`` modes also clamp from below at ``vllm_importance_sampling_clip_min``
        when it is set; this function only caps from above.

    Parameters
    ----------
    logp_target : array_like, shape (T,) or (B, T)
        Log-probabilities of the sampled tokens under the trainer policy ``π``; finite.
    logp_behavior : array_like, same shape
        Log-probabilities under the behaviour (inference) policy ``μ`` that sampled them; finite.
    cap : float
        Truncation level ``C >= 1``.
    level : {"token", "sequence", "geometric"}
        Per-token ratios, the sequence product, or its geometric mean over the valid tokens.
    mask : array_like, same shape, optional
        0/1 padding mask (1 = a real token). Default: every token is real.
    lower : float, optional
        Two-sided truncation ``clip(ρ, lower, C)`` with ``0 <= lower <= 1`` (AReaL's
        ``action="clamp"``, TRL's vLLM correction). Default: one-sided, ``min(ρ, C)``.
    log_ratio_clamp : float, optional
        ``c > 0``: the log-ratio of the level (per token, or the sequence's sum or mean) is clipped
        to ``[−c, c]`` before ``exp`` (verl and SkyRL use 20). Default: no clamp.
    nonfinite : {"error", "one"}
        ``"one"``: a non-finite log-ratio (NaN, or an infinite log-probability) counts as 0,
        ratio 1 (AReaL); ``"error"`` (default) rejects it.
    clamp_at : {"level", "token"}
        Where ``log_ratio_clamp`` applies at the sequence levels: to the sum or mean (default,
        SkyRL, verl's IS weights) or to each token before aggregating (verl's ``seq_*_k1``).

    Returns
    -------
    ndarray of float64
        ``level="token"``: same shape as the inputs, 0.0 at padding. Otherwise one weight per
        sequence: shape ``(B,)``, or ``()`` for a single 1-D sequence. Values in ``[0, C]``.

    Raises
    ------
    ValueError
        If a log-probability is NaN or infinite, shapes differ (the message shows both), ``cap < 1``,
        ``level`` is unknown, ``mask`` is not 0/1, or a sequence is all padding (sequence levels).

    Notes
    -----
    Invariants: an on-policy token (ratio exactly 1) gets weight 1; weights are finite and in
    ``[0, C]``. Where ``ρ < C`` the weight equals the ratio, so the truncated estimate is unbiased on
    that event; its bias is ``−E_μ[(ρ − C)^+ f]`` (claim IS1). The sequence product is
    length-sensitive: for zero-mean i.i.d. per-token log-ratio noise a fixed cap truncates long
    sequences more often; for noise with ``E[ρ_t] = 1`` it does so up to ``T* = 2 log C/σ²``
    tokens, beyond which the product drifts towards 0 (claim IS3). Accuracy: the log-ratio sum is exact to float64 rounding (relative ``~T·ε``).

    References
    ----------
    Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL training";
    GSPO (arXiv 2507.18071) for the geometric mean.

    Examples
    --------
    >>> import numpy as np, refimpl
    >>> lp = np.log([[0.5, 0.5, 0.5], [0.9, 0.2, 0.5]])
    >>> lq = np.log([[0.5, 0.25, 0.5], [0.3, 0.2, 0.5]])
    >>> refimpl.truncated_is_weights(lp, lq, cap=2.0)
    array([[1., 2., 1.],
           [2., 1., 1.]])
    >>> refimpl.truncated_is_weights(lp, lq, cap=2.0, level="sequence")
    array([2., 2.])
    >>> refimpl.truncated_is_weights(lp, lq, cap=5.0, level="sequence")
    array([2., 3.])
    """
    d, m = _nonfinite_log_ratio(
        logp_target,
        logp_behavior,
        mask,
        names=("logp_target", "logp_behavior"),
        nonfinite=nonfinite,
    )
    cap_value = _as_cap(cap)
    lvl = _as_level(level)
    clamp = _as_clamp(log_ratio_clamp)
    low = _as_lower(lower)
    if lvl == "token":
        w = np.maximum(_capped_exp(np.clip(d, -clamp, clamp), cap_value), low)
        return np.where(m > 0, w, 0.0)
    if _as_clamp_at(clamp_at) == "token":
        d, clamp = np.clip(d, -clamp, clamp), math.inf
    total = np.clip(_sequence_log_ratio(d, m, lvl), -clamp, clamp)
    return np.asarray(np.maximum(_capped_exp(total, cap_value), low), dtype=np.float64)


def masked_is_weights(
    logp_target: ArrayLike,
    logp_behavior: ArrayLike,
    *,
    low: float,
    high: float,
    level: Level = "token",
    mask: ArrayLike | None = None,
    band_on: Literal["ratio", "reciprocal"] = "ratio",
    weight: Literal["ratio", "indicator", "token", "geometric"] = "ratio",
    log_ratio_clamp: float | None = None,
    nonfinite: NonFinite = "error",
    clamp_at: Literal["level", "token"] = "level",
) -> NDArray[np.float64]:
    r"""Masked importance weights (MIS / IcePop): ratios outside ``[α, β]`` are dropped, not clipped.

    .. math::

        w = \rho \cdot \mathbb{1}[\alpha \le \rho \le \beta],

    with ``ρ`` the token ratio, the sequence product, or its geometric mean (``level``), compared in
    log space: :math:`\log\alpha \le \log\rho \le \log\beta`.

    .. warning::

        ``level="sequence"`` is the **product** of the token ratios, as in verl 0.9.1
        (``rollout_is="sequence"``) and TRL's ``vllm_importance_sampling_mode="sequence_*"``. TRL's
        ``importance_sampling_level="sequence"`` (GSPO) is the **geometric mean** instead: its
        counterpart here is ``level="geometric"`` (read in TRL 1.16.0). verl also clamps the log-ratio (sum) to
        ``[-20, 20]`` before ``exp``; refimpl computes it exactly.

    Parameters
    ----------
    logp_target, logp_behavior : array_like, shape (T,) or (B, T)
        Log-probabilities under the trainer policy ``π`` and the behaviour policy ``μ``; finite.
    low : float
        Lower band edge ``α`` with ``0 <= α <= 1``.
    high : float
        Upper band edge ``β >= 1`` (finite), ``β >= α``.
    level : {"token", "sequence", "geometric"}
        Which ratio the band applies to.
    mask : array_like, same shape, optional
        0/1 padding mask (1 = a real token).
    band_on : {"ratio", "reciprocal"}
        ``"reciprocal"``: the band applies to ``1/ρ = μ/π`` (verl's ``k1`` rejection statistic
        ``−log ρ`` with thresholds ``"lo_hi"``: kept iff ``log α <= −log ρ <= log β``).
    weight : {"ratio", "indicator", "token", "geometric"}
        The weight of a kept entry: the ratio the band applies to (default); 1 (``"indicator"``: the
        0/1 rejection mask of verl and SkyRL); or, shaped like the tokens whatever the level, the
        token ratio ``ρ_t`` (``"token"``) or the sequence's geometric-mean ratio (``"geometric"``:
        AReaL's sequence-level rejection sampling, a filter combined with a geometric weight).
    log_ratio_clamp : float, optional
        ``c > 0``: each log-ratio (the filtered statistic and the weight) is clipped to ``[−c, c]``
        before ``exp`` (verl and SkyRL: 20).
    nonfinite : {"error", "one"}
        ``"one"``: a non-finite log-ratio counts as ratio 1 (AReaL); ``"error"`` rejects it.
    clamp_at : {"level", "token"}
        Where ``log_ratio_clamp`` applies at the sequence levels: the sum or mean (default), or
        each token before aggregating (verl's ``seq_sum_k1`` / ``seq_mean_k1``).

    Returns
    -------
    ndarray of float64
        Token level, or ``weight`` ``"token"``/``"geometric"``: same shape as the inputs (0 at padding
        and where dropped). Otherwise shape ``(B,)`` or ``()``. Values in ``{0} ∪ [α, β]`` for the
        default ``band_on`` and ``weight``.

    Raises
    ------
    ValueError
        If log-probabilities are non-finite, shapes differ, ``low > high``, ``low`` is outside
        ``[0, 1]`` or ``high < 1`` (a band that excludes ratio 1 drops every on-policy token), or
        ``mask`` is not 0/1.

    Notes
    -----
    Invariants: ratio exactly 1 gives weight 1; weights are finite and non-negative. Unlike
    truncation, masking removes a token's gradient entirely: it trades bias (the whole target
    mass outside the band, claim IS2) for bounded variance. A band tighter than the train/inference numerical mismatch drops
    on-policy tokens (:func:`over_masking_scenarios`); at sequence level the log-ratio noise grows
    like ``√T``, so which sequences are dropped depends on their length (claim IS3).

    References
    ----------
    IcePop (arXiv 2510.18855); M2PO (arXiv 2510.01161).

    Examples
    --------
    >>> import numpy as np, refimpl
    >>> lp = np.log([0.5, 0.9, 0.1, 0.5])
    >>> lq = np.log([0.5, 0.3, 0.4, 0.4])
    >>> refimpl.masked_is_weights(lp, lq, low=0.5, high=2.0)
    array([1.  , 0.  , 0.  , 1.25])
    """
    d, m = _nonfinite_log_ratio(
        logp_target,
        logp_behavior,
        mask,
        names=("logp_target", "logp_behavior"),
        nonfinite=nonfinite,
    )
    lo, hi = _band(low, high)
    lvl = _as_level(level)
    on = _as_choice(
        band_on,
        name="band_on",
        choices=("ratio", "reciprocal"),
        fix="Pass band_on='ratio' (α <= π/μ <= β) or 'reciprocal' (α <= μ/π <= β).",
    )
    kind = _as_choice(
        weight,
        name="weight",
        choices=("ratio", "indicator", "token", "geometric"),
        fix="Pass weight='ratio', 'indicator', 'token' or 'geometric'.",
    )
    clamp = _as_clamp(log_ratio_clamp)
    if lvl != "token" and _as_clamp_at(clamp_at) == "token":
        d, clamp = np.clip(d, -clamp, clamp), math.inf
    z = np.clip(d if lvl == "token" else _sequence_log_ratio(d, m, lvl), -clamp, clamp)
    statistic = z if on == "ratio" else -z
    log_lo = -math.inf if lo == 0.0 else math.log(lo)
    keep = (statistic >= log_lo) & (statistic <= math.log(hi))
    value = _band_value(kind, on, z, d, m, band=(lo, hi), clamp=clamp)
    if kind in ("token", "geometric") and lvl != "token":
        keep = keep[..., None]
    out = np.where(keep, value, 0.0)
    if lvl == "token" or kind in ("token", "geometric"):
        out = np.where(m > 0, np.broadcast_to(out, m.shape), 0.0)
    return np.asarray(out, dtype=np.float64)


def _band(low: Any, high: Any) -> tuple[float, float]:
    """The kept band ``[α, β]``: ``0 <= α <= 1 <= β`` (ratio 1, an on-policy token, is kept)."""
    lo = as_real(low, name="low", low=0.0, high=1.0, meaning="lower ratio bound α, 0 <= α <= 1")
    hi = as_real(high, name="high", meaning="upper ratio bound β >= 1")
    require_ordered(lo, hi, names=("low", "high"), meaning="the kept band is [low, high]")
    if hi < 1.0:
        raise invalid(
            "high",
            "be >= 1 (a band [low, high] that excludes ratio 1 drops every on-policy token)",
            high,
            "Pass high >= 1, e.g. high=2.0.",
        )
    return lo, hi


def _band_value(
    kind: str,
    on: str,
    z: NDArray[np.float64],
    d: NDArray[np.float64],
    m: NDArray[np.float64],
    *,
    band: tuple[float, float],
    clamp: float,
) -> NDArray[np.float64]:
    """The weight a kept token or sequence gets: its ratio, 1, its own token ratio, or the
    geometric mean ratio of its sequence (one value per sequence, as a column)."""
    if kind == "ratio":
        if on == "ratio":  # exactly inside [α, β], whatever the rounding of exp
            return np.maximum(_capped_exp(z, band[1]), band[0])
        return np.exp(np.minimum(z, _LOG_MAX))
    if kind == "indicator":
        return np.ones_like(z)
    if kind == "token":
        return np.exp(np.minimum(np.clip(d, -clamp, clamp), _LOG_MAX))
    geometric = np.clip(_sequence_log_ratio(d, m, "geometric"), -clamp, clamp)
    return np.exp(np.minimum(geometric, _LOG_MAX))[..., None]


def decoupled_ppo_weights(
    logp_prox: ArrayLike,
    logp_behavior: ArrayLike,
    *,
    cap: float | None = None,
    mask: ArrayLike | None = None,
    above_cap: Literal["mask", "clip"] = "mask",
    lower: float | None = None,
    log_ratio_clamp: float | None = None,
    nonfinite: NonFinite = "error",
) -> NDArray[np.float64]:
    r"""AReaL's behaviour importance weight ``π_prox/μ``, masked (set to 0) above the cap.

    Decoupled PPO writes the objective with a proximal policy :math:`\pi_\text{prox}` (the weights
    before the current update): the PPO ratio :math:`r = \pi_\theta/\pi_\text{prox}` is clipped as
    usual, and the whole term is multiplied by the behaviour weight

    .. math::

        w_t = \frac{\pi_\text{prox}(a_t)}{\mu(a_t)}\,
              \mathbb{1}\Bigl[\frac{\pi_\text{prox}(a_t)}{\mu(a_t)} \le C\Bigr].

    This function returns :math:`w_t`; the PPO clip is the caller's.

    Parameters
    ----------
    logp_prox : array_like, any shape
        Log-probabilities under the proximal policy; finite.
    logp_behavior : array_like, same shape
        Log-probabilities under the behaviour policy ``μ`` that generated the tokens; finite.
    cap : float, optional
        ``C >= 1``: tokens whose weight exceeds it get weight 0 (masked, **not** clipped, as in
        AReaL's ``behav_imp_weight_cap``). ``None``: no cap.
    mask : array_like, same shape, optional
        0/1 padding mask; padding gets weight 0.
    above_cap : {"mask", "clip"}
        ``"clip"``: ``clip(ρ, lower, C)`` instead of masking (AReaL's rejection sampling with
        ``action="clamp"``). Needs a cap.
    lower : float, optional
        ``0 <= lower <= 1``: with ``"mask"`` a weight below it is masked too (AReaL's ``lower``);
        with ``"clip"`` the lower truncation level. Default: none.
    log_ratio_clamp : float, optional
        ``c > 0``: the log-ratio is clipped to ``[−c, c]`` before ``exp``.
    nonfinite : {"error", "one"}
        ``"one"``: a non-finite log-ratio counts as ratio 1 (AReaL: ``log ρ`` set to 0).

    Returns
    -------
    ndarray of float64
        Weights, same shape as the inputs, finite and ``>= 0``.

    Raises
    ------
    ValueError
        If log-probabilities are non-finite, shapes differ, ``cap < 1``, or (``cap=None``) a
        weight would overflow float64 (log-ratio above ~709.78): pass a cap.

    Notes
    -----
    Invariants: ratio exactly 1 gives weight 1 (``C >= 1``); a weight above ``C`` becomes 0 while a
    weight equal to ``C`` is kept. Masking removes the token's gradient (bias for bounded variance);
    clipping would keep it at ``C``.

    References
    ----------
    AReaL (arXiv 2505.24298), decoupled PPO objective.

    Examples
    --------
    >>> import numpy as np, refimpl
    >>> lp = np.log([0.5, 0.6, 0.9])
    >>> lq = np.log([0.5, 0.3, 0.1])
    >>> refimpl.decoupled_ppo_weights(lp, lq, cap=5.0)
    array([1., 2., 0.])
    """
    d, m = _nonfinite_log_ratio(
        logp_prox,
        logp_behavior,
        mask,
        names=("logp_prox", "logp_behavior"),
        nonfinite=nonfinite,
        ndim=None,
    )
    action = _as_choice(
        above_cap,
        name="above_cap",
        choices=("mask", "clip"),
        fix="Pass above_cap='mask' (weight 0 above the cap) or 'clip' (min(ρ, C)).",
    )
    d = np.clip(d, -_as_clamp(log_ratio_clamp), _as_clamp(log_ratio_clamp))
    low = _as_lower(lower)
    log_low = -math.inf if low == 0.0 else math.log(low)
    valid = (m > 0) & ((d >= log_low) | (action == "clip"))
    if action == "clip":
        if cap is None:
            raise invalid(
                "cap",
                "be given with above_cap='clip' (clip(ρ, lower, C) needs C)",
                cap,
                "Pass cap=, e.g. cap=5.0.",
            )
        return np.where(valid, np.maximum(_capped_exp(d, _as_cap(cap)), low), 0.0)
    if cap is None:
        over = valid & (d > _LOG_MAX)
        if np.any(over):
            first = int(np.flatnonzero(over.ravel())[0])
            raise invalid(
                "logp_prox - logp_behavior",
                f"be <= {_LOG_MAX:.2f} without a cap (exp overflows float64 beyond)",
                d,
                f"Entry {first} has log-ratio {float(d.ravel()[first])!r}; pass cap= (AReaL's "
                "behav_imp_weight_cap) to mask such tokens.",
            )
        return np.where(valid, np.exp(np.minimum(d, _LOG_MAX)), 0.0)
    cap_value = _as_cap(cap)
    log_c = math.log(cap_value)
    keep = valid & (d <= log_c)
    return np.where(keep, _capped_exp(d, cap_value), 0.0)
