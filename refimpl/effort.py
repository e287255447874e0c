"""Effort conditioning: the penalty ``k(b)``, the shaped reward, the optimal length and the frontier.

A policy conditioned on a scalar reasoning effort ``b`` is trained with the shaped reward
``r(y; b) = Q(y) − k(b)·ℓ(y)/ℓ_scale`` and the exponentially decaying length price
``k(b) = k0·exp(−(b − b_min)/τ)``. Under the saturating quality model
``Q(ℓ) = q_max·(1 − e^{−ℓ/λ})`` the reward-maximising length is ``L*(b) = max(0, λ ln(q_max/(λ k(b))))``,
linear in ``b`` with slope ``λ/τ`` where positive, and ``b ↦ (L*(b), Q(L*(b)))`` traces a monotone,
concave cost/quality frontier: one checkpoint, many cost/quality points (SPEC §4).

The module also carries a toy effort-conditioned policy trained by policy gradient in numpy
(:func:`train_effort_policy`), which shows that one set of parameters conditioned on ``b`` learns
``L*(b)`` and traces the analytic frontier.

Claim ids (``proofs/effort.py``): EF1–EF3 (the penalty), EF4–EF6 (the optimum), EF7–EF9 (the frontier).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import (
    as_float_array,
    as_real,
    invalid,
    require_same_shape,
)

__all__ = [
    "EffortFrontier",
    "effort_frontier",
    "effort_penalty",
    "optimal_length",
    "pareto_front",
    "saturating_quality",
    "shaped_reward",
]


class EffortFrontier(NamedTuple):
    """Cost/quality points of an effort-conditioned policy, one per effort value.

    Attributes
    ----------
    cost : ndarray of float64
        Expected generated length at each effort (tokens; the cost axis).
    quality : ndarray of float64
        Expected quality at each effort (same shape as ``cost``).
    """

    cost: NDArray[np.float64]
    quality: NDArray[np.float64]


# ---------------------------------------------------------------------------------------------
# validation helpers (private)
# ---------------------------------------------------------------------------------------------


def _penalty_parameters(k0: Any, b_min: Any, tau: Any) -> tuple[float, float, float]:
    k0_ = as_real(k0, name="k0", low=0.0, meaning="length price at the lowest effort")
    b_min_ = as_real(b_min, name="b_min", meaning="lowest effort")
    tau_ = as_real(tau, name="tau", low=0.0, low_open=True, meaning="decay length in effort units")
    return k0_, b_min_, tau_


def _effort_array(b: ArrayLike, b_min: float) -> NDArray[np.float64]:
    arr = as_float_array(b, name="b")
    below = arr < b_min
    if np.any(below):
        first = int(np.flatnonzero(below.ravel())[0])
        raise invalid(
            "b",
            f"be >= b_min={b_min!r} (effort is measured from its minimum)",
            arr,
            f"Entry {first} is {float(arr.ravel()[first])!r}; pass efforts >= b_min or lower b_min.",
        )
    return arr


def _scaled_effort(b: NDArray[np.float64], b_min: float, tau: float) -> NDArray[np.float64]:
    """``(b − b_min)/τ`` ≥ 0; may be ``+inf`` for huge ratios (never a warning)."""
    with np.errstate(over="ignore"):
        return np.asarray((b - b_min) / tau, dtype=np.float64)


def _out(value: Any) -> NDArray[np.float64]:
    return np.asarray(value, dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# the penalty, the reward, the quality model
# ---------------------------------------------------------------------------------------------


def effort_penalty(b: ArrayLike, *, k0: float, b_min: float, tau: float) -> NDArray[np.float64]:
    r"""Length price ``k(b)`` at effort ``b``: exponential decay from ``k0`` at ``b_min``.

    .. math::

        k(b) = k_0 \, \exp\!\left(-\frac{b - b_\text{min}}{\tau}\right), \qquad b \ge b_\text{min}.

    Parameters
    ----------
    b : array_like of float, any shape
        Effort values, finite and ``>= b_min``.
    k0 : float
        Price per unit length at the lowest effort, ``k0 >= 0`` (``k0 = 0`` gives ``k ≡ 0``).
    b_min : float
        Lowest effort (finite).
    tau : float
        Decay length in effort units, ``tau > 0``: each ``tau`` of extra effort divides the price by
        ``e``.

    Returns
    -------
    ndarray of float64
        ``k(b)``, same shape as ``b`` (0-d for a scalar), in ``[0, k0]``.

    Raises
    ------
    TypeError
        If ``b`` is not numeric or a parameter is not a real number.
    ValueError
        If ``b`` or a parameter is not finite, ``b < b_min``, ``k0 < 0`` or ``tau <= 0``.

    Notes
    -----
    ``k(b_min) = k0`` (EF1), ``dk/db = −k/τ`` (EF2), ``k(b + τ) = k(b)/e`` (EF3); ``k`` is strictly
    decreasing in ``b`` when ``k0 > 0`` (until it underflows). For large ``(b − b_min)/τ`` (beyond about
    745 plus ``ln k0``) the price underflows to exactly 0; it never overflows and never warns, even when
    ``(b − b_min)/τ`` itself exceeds the float64 range. Accuracy: a few ulp (one ``exp``).

    References
    ----------
    SPEC §4 (effort conditioning).

    Examples
    --------
    >>> import numpy as np
    >>> from refimpl import effort_penalty
    >>> effort_penalty([0.0, 1.0, 2.0], k0=0.5, b_min=0.0, tau=1.0)
    array([0.5       , 0.18393972, 0.06766764])
    >>> float(effort_penalty(1e6, k0=0.5, b_min=0.0, tau=1e-300))  # underflows, no warning
    0.0
    """
    k0_, b_min_, tau_ = _penalty_parameters(k0, b_min, tau)
    arr = _effort_array(b, b_min_)
    x = _scaled_effort(arr, b_min_, tau_)
    with np.errstate(under="ignore"):
        return _out(k0_ * np.exp(-x))


def saturating_quality(length: ArrayLike, *, q_max: float, lam: float) -> NDArray[np.float64]:
    r"""Saturating quality model ``Q(ℓ) = q_max·(1 − exp(−ℓ/λ))``.

    .. math::

        Q(\ell) = q_\text{max} \left(1 - e^{-\ell/\lambda}\right)
                = -q_\text{max}\, \operatorname{expm1}(-\ell/\lambda).

    Parameters
    ----------
    length : array_like of float, any shape
        Generated lengths, finite and ``>= 0`` (continuous approximation of token counts).
    q_max : float
        Quality reached with unlimited length, ``q_max > 0``.
    lam : float
        Quality length scale ``λ > 0``: ``Q(λ) = q_max (1 − 1/e)``.

    Returns
    -------
    ndarray of float64
        ``Q(ℓ)`` in ``[0, q_max]``, same shape as ``length``.

    Raises
    ------
    TypeError
        If ``length`` is not numeric or a parameter is not a real number.
    ValueError
        If an input is not finite, a length is negative, ``q_max <= 0`` or ``lam <= 0``.

    Notes
    -----
    Computed with ``expm1``, so small lengths keep full relative accuracy. ``Q(0) = 0``,
    ``Q' = (q_max/λ) e^{−ℓ/λ} > 0`` and ``Q'' < 0``: increasing and strictly concave (EF4, EF5).

    Examples
    --------
    >>> from refimpl import saturating_quality
    >>> saturating_quality([0.0, 100.0, 1e9], q_max=1.0, lam=100.0)
    array([0.        , 0.63212056, 1.        ])
    """
    q_max_ = as_real(q_max, name="q_max", low=0.0, low_open=True, meaning="saturation quality")
    lam_ = as_real(lam, name="lam", low=0.0, low_open=True, meaning="quality length scale")
    arr = as_float_array(length, name="length")
    _require_nonnegative(arr, name="length", meaning="a generated length")
    with np.errstate(over="ignore", under="ignore"):
        return _out(-q_max_ * np.expm1(-(arr / lam_)))


def _require_nonnegative(arr: NDArray[np.float64], *, name: str, meaning: str) -> None:
    bad = arr < 0
    if np.any(bad):
        first = int(np.flatnonzero(bad.ravel())[0])
        raise invalid(
            name,
            f"be >= 0 ({meaning})",
            arr,
            f"Entry {first} is {float(arr.ravel()[first])!r}; pass non-negative values.",
        )


def shaped_reward(
    quality: ArrayLike,
    length: ArrayLike,
    b: ArrayLike,
    *,
    k0: float,
    b_min: float,
    tau: float,
    length_scale: float = 1.0,
) -> NDArray[np.float64]:
    r"""Effort-shaped reward: quality minus the effort-dependent price of the length.

    .. math::

        r(y; b) = Q(y) - k(b)\, \frac{\ell(y)}{\ell_\text{scale}}, \qquad
        k(b) = k_0 e^{-(b - b_\text{min})/\tau}.

    Parameters
    ----------
    quality : array_like of float, shape (n,) or any
        Quality (task reward) of each rollout, finite.
    length : array_like of float, same shape as ``quality``
        Generated length of each rollout, finite and ``>= 0``.
    b : array_like of float, scalar or same shape as ``quality``
        Effort each rollout was conditioned on, ``>= b_min``.
    k0, b_min, tau : float
        Penalty parameters, as in :func:`effort_penalty`.
    length_scale : float, default 1.0
        Length unit of the price, ``> 0`` (e.g. the maximum length, to price a fraction of budget).

    Returns
    -------
    ndarray of float64
        The shaped reward, same shape as ``quality``.

    Raises
    ------
    TypeError
        If an input is not numeric.
    ValueError
        If shapes do not match (``b`` must be a scalar or match ``quality``), an input is not finite, a
        length is negative, ``b < b_min``, ``k0 < 0``, ``tau <= 0``, ``length_scale <= 0``, or the
        result overflows float64.

    Notes
    -----
    Linear in the length with slope ``−k(b)/ℓ_scale`` and intercept ``Q``; at ``b = b_min`` the price
    is ``k0/ℓ_scale`` per token. Where ``k(b)`` has underflowed to 0 (or the length is 0) the price is
    exactly 0, never ``0·inf = NaN``.

    Examples
    --------
    >>> from refimpl import shaped_reward
    >>> shaped_reward([1.0, 1.0], [100.0, 200.0], 0.0, k0=0.002, b_min=0.0, tau=1.0)
    array([0.8, 0.6])
    >>> shaped_reward([1.0, 1.0], [100.0, 200.0], [0.0, 1.0], k0=0.002, b_min=0.0, tau=1.0,
    ...               length_scale=100.0)
    array([0.998     , 0.99852848])
    """
    k0_, b_min_, tau_ = _penalty_parameters(k0, b_min, tau)
    scale = as_real(
        length_scale,
        name="length_scale",
        low=0.0,
        low_open=True,
        meaning="length unit of the price",
    )
    q = as_float_array(quality, name="quality")
    ell = as_float_array(length, name="length")
    require_same_shape(q, ell, names=("quality", "length"))
    b_arr = as_float_array(b, name="b")
    if b_arr.ndim != 0 and b_arr.shape != q.shape:
        raise invalid(
            "b",
            f"be a scalar or have the shape of quality {q.shape}",
            b_arr,
            f"Pass one effort for all rollouts or one per rollout (got shape {b_arr.shape}).",
        )
    _require_nonnegative(ell, name="length", meaning="a generated length")
    b_arr = _effort_array(b_arr, b_min_)
    k = effort_penalty(b_arr, k0=k0_, b_min=b_min_, tau=tau_)
    with np.errstate(over="ignore", invalid="ignore"):
        price = np.where((k == 0.0) | (ell == 0.0), 0.0, k * (ell / scale))
        reward = q - price
    if not np.all(np.isfinite(reward)):
        raise invalid(
            "length",
            "give a finite shaped reward (k(b)·length/length_scale overflows float64)",
            ell,
            "Rescale the lengths or pass a larger length_scale.",
        )
    return _out(reward)


# ---------------------------------------------------------------------------------------------
# the optimum and the frontier
# ---------------------------------------------------------------------------------------------


def _quality_parameters(q_max: Any, lam: Any) -> tuple[float, float]:
    q_max_ = as_real(q_max, name="q_max", low=0.0, low_open=True, meaning="saturation quality")
    lam_ = as_real(lam, name="lam", low=0.0, low_open=True, meaning="quality length scale")
    return q_max_, lam_


def _optimum(
    b: ArrayLike, q_max: Any, lam: Any, k0: Any, b_min: Any, tau: Any
) -> tuple[NDArray[np.float64], NDArray[np.float64], float, float, float, float, float]:
    q_max_, lam_ = _quality_parameters(q_max, lam)
    k0_, b_min_, tau_ = _penalty_parameters(k0, b_min, tau)
    if k0_ == 0.0:
        raise invalid(
            "k0",
            "be > 0 for an optimal length (with k0 = 0 longer is always better: L* = inf)",
            k0,
            "Pass a positive k0.",
        )
    arr = _effort_array(b, b_min_)
    x = _scaled_effort(arr, b_min_, tau_)
    # log form: L* = λ (ln q_max − ln λ − ln k0 + (b − b_min)/τ), clipped at 0; never forms k(b).
    intercept = np.log(q_max_) - np.log(lam_) - np.log(k0_)
    with np.errstate(over="ignore"):
        length = np.maximum(lam_ * (intercept + x), 0.0)
    if not np.all(np.isfinite(length)):
        raise invalid(
            "b",
            "give a finite optimal length (λ·(b − b_min)/τ overflows float64)",
            arr,
            "Pass smaller efforts or a larger tau.",
        )
    return _out(length), arr, q_max_, lam_, k0_, b_min_, tau_


def optimal_length(
    b: ArrayLike, *, q_max: float, lam: float, k0: float, b_min: float, tau: float
) -> NDArray[np.float64]:
    r"""Reward-maximising length ``L*(b)`` under the saturating quality model.

    Maximises ``Q(ℓ) − k(b)·ℓ`` over ``ℓ >= 0`` with ``Q(ℓ) = q_max (1 − e^{−ℓ/λ})`` (``ℓ_scale = 1``):

    .. math::

        L^*(b) = \max\!\left(0,\ \lambda \ln\frac{q_\text{max}}{\lambda k(b)}\right)
               = \max\!\left(0,\ \lambda \ln\frac{q_\text{max}}{\lambda k_0}
                 + \frac{\lambda}{\tau}(b - b_\text{min})\right).

    Parameters
    ----------
    b : array_like of float, any shape
        Effort values, finite and ``>= b_min``.
    q_max : float
        Saturation quality, ``> 0``.
    lam : float
        Quality length scale ``λ > 0``.
    k0 : float
        Length price at ``b_min``, ``> 0`` (with ``k0 = 0`` there is no finite optimum).
    b_min : float
        Lowest effort.
    tau : float
        Decay length of the price, ``> 0``.

    Returns
    -------
    ndarray of float64
        ``L*(b) >= 0``, same shape as ``b``.

    Raises
    ------
    TypeError
        If an input is not numeric.
    ValueError
        If an input is not finite, ``b < b_min``, ``k0 <= 0``, ``q_max <= 0``, ``lam <= 0``,
        ``tau <= 0``, or ``L*`` exceeds the float64 range (``λ (b − b_min)/τ > 1.8e308``).

    Notes
    -----
    First-order condition ``(q_max/λ) e^{−ℓ/λ} = k(b)`` (EF4), second-order condition
    ``Q''(ℓ) < 0`` everywhere (EF5), so the root is the unique maximiser when positive; otherwise
    the reward is decreasing on ``ℓ >= 0`` and ``L* = 0``. ``L*`` is linear in ``b`` with slope
    ``λ/τ`` where positive (EF6) and non-decreasing in ``b``.

    Computed in the log form above, which never forms ``k(b)``: as ``k(b) → 0`` (large
    ``(b − b_min)/τ``) ``L*`` keeps growing linearly and stays exact after ``k(b)`` itself has
    underflowed to 0; it does not blow up to ``inf`` silently (an overflow of the linear term raises).

    References
    ----------
    SPEC §4.

    Examples
    --------
    >>> from refimpl import optimal_length
    >>> optimal_length([0.0, 1.0, 2.0], q_max=1.0, lam=100.0, k0=0.005, b_min=0.0, tau=1.0)
    array([ 69.31471806, 169.31471806, 269.31471806])
    >>> float(optimal_length(0.0, q_max=1.0, lam=100.0, k0=0.02, b_min=0.0, tau=1.0))  # too dear
    0.0
    """
    return _optimum(b, q_max, lam, k0, b_min, tau)[0]


def effort_frontier(
    b: ArrayLike, *, q_max: float, lam: float, k0: float, b_min: float, tau: float
) -> EffortFrontier:
    r"""The analytic cost/quality frontier ``b ↦ (L*(b), Q(L*(b)))``.

    .. math::

        \text{cost}(b) = L^*(b), \qquad
        \text{quality}(b) = Q(L^*(b)) = \max\!\left(0,\ q_\text{max} - \lambda k(b)\right).

    Parameters
    ----------
    b : array_like of float, any shape
        Effort values, ``>= b_min``.
    q_max, lam, k0, b_min, tau : float
        As in :func:`optimal_length`.

    Returns
    -------
    EffortFrontier
        ``(cost, quality)``: float64 arrays of the shape of ``b``.

    Raises
    ------
    TypeError, ValueError
        As :func:`optimal_length`.

    Notes
    -----
    ``Q(L*) = q_max − λ k(b)`` where ``L* > 0`` (EF7) and 0 where ``L* = 0``. Both coordinates are
    non-decreasing in ``b``; along the frontier ``dQ/dL = k(b)`` (EF8), positive and decreasing in
    the cost, so the frontier is increasing and concave (EF9) and its points are mutually
    non-dominated (more cost buys strictly more quality). In float64 the quality saturates at
    ``q_max`` once ``λ k(b)`` is below half an ulp of ``q_max``; beyond that, points tie in quality
    while the cost still grows (and :func:`pareto_front` keeps only the cheapest of them).

    Examples
    --------
    >>> from refimpl import effort_frontier
    >>> front = effort_frontier([0.0, 1.0, 2.0], q_max=1.0, lam=100.0, k0=0.005, b_min=0.0, tau=1.0)
    >>> front.cost
    array([ 69.31471806, 169.31471806, 269.31471806])
    >>> front.quality
    array([0.5       , 0.81606028, 0.93233236])
    """
    length, arr, q_max_, lam_, k0_, b_min_, tau_ = _optimum(b, q_max, lam, k0, b_min, tau)
    k = effort_penalty(arr, k0=k0_, b_min=b_min_, tau=tau_)
    quality = np.where(length > 0.0, np.maximum(q_max_ - lam_ * k, 0.0), 0.0)
    return EffortFrontier(cost=length, quality=_out(quality))


def pareto_front(cost: ArrayLike, quality: ArrayLike) -> NDArray[np.intp]:
    r"""Indices of the non-dominated points, sorted by cost (lower cost and higher quality are better).

    Point ``j`` dominates point ``i`` when

    .. math::

        c_j \le c_i,\quad q_j \ge q_i,\quad (c_j, q_j) \ne (c_i, q_i).

    Parameters
    ----------
    cost : array_like of float, shape (n,)
        Cost of each point (e.g. expected length), finite.
    quality : array_like of float, shape (n,)
        Quality of each point, finite.

    Returns
    -------
    ndarray of intp, shape (m,)
        Indices of the points that no other point dominates, in increasing cost; points of equal cost
        (which are then exact duplicates) in increasing index.

    Raises
    ------
    TypeError
        If an input is not numeric.
    ValueError
        If an input is not 1-D, not finite, or the shapes differ.

    Notes
    -----
    Ties: a point with the same cost and lower quality, or the same quality and higher cost, is
    dominated and dropped. Exact duplicates do not dominate each other: every copy of a
    non-dominated point is kept (this matches the usual definition of the first non-dominated front;
    deduplicate first if you want one copy). ``-0.0`` and ``0.0`` are equal. ``O(n log n)``: one sort,
    then a sweep keeping the best quality seen at strictly lower cost. Along the kept indices both
    cost and quality increase (strictly, except across exact duplicates).

    Examples
    --------
    >>> from refimpl import pareto_front
    >>> pareto_front([3.0, 1.0, 2.0, 2.0, 1.0], [0.9, 0.5, 0.5, 0.7, 0.5])
    array([1, 4, 3, 0])
    """
    c = as_float_array(cost, name="cost", ndim=1)
    q = as_float_array(quality, name="quality", ndim=1)
    require_same_shape(c, q, names=("cost", "quality"))
    n = c.size
    if n == 0:
        return np.zeros(0, dtype=np.intp)
    # sort by cost ascending, then quality descending, then index ascending (lexsort is stable)
    order = np.lexsort((np.arange(n), -q, c))
    cs, qs = c[order], q[order]
    new_group = np.empty(n, dtype=bool)
    new_group[0] = True
    new_group[1:] = cs[1:] != cs[:-1]
    group_id = np.cumsum(new_group) - 1
    group_best = qs[new_group]  # first of each equal-cost group has its highest quality
    # best quality among strictly cheaper points, per group
    prefix = np.maximum.accumulate(group_best)
    before = np.concatenate(([-np.inf], prefix[:-1]))
    keep = (qs == group_best[group_id]) & (qs > before[group_id])
    return np.asarray(order[keep], dtype=np.intp)


# ---------------------------------------------------------------------------------------------
# the effort-conditioned toy policy
# ---------------------------------------------------------------------------------------------
