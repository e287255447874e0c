"""The cost/quality frontier ``b ↦ (L*(b), Q(L*(b)))`` and the non-dominated points of a cloud
(conventions §effort-conditioning; claims EF7–EF9 of ``proofs/effort.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import (
    as_float_array,
    require_same_shape,
)
from refimpl.effort._checks import _out
from refimpl.effort._mix import _class_optimum, _mix, _mix_effort, _mix_mean
from refimpl.effort.optimum import _optimum
from refimpl.effort.reward import effort_penalty

__all__ = ["EffortFrontier", "effort_frontier", "pareto_front"]


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


def effort_frontier(
    b: ArrayLike,
    *,
    q_max: float | ArrayLike,
    lam: float | ArrayLike,
    k0: float,
    b_min: float,
    tau: float,
    weights: ArrayLike | Sequence[Fraction] | None = None,
) -> EffortFrontier:
    r"""The analytic cost/quality frontier ``b ↦ (L*(b), Q(L*(b)))``, of one class or of a mix.

    .. math::

        \text{cost}(b) = L^*(b), \qquad
        \text{quality}(b) = Q(L^*(b)) = \max\!\left(0,\ q_\text{max} - \lambda k(b)\right).

    On a mix of classes with weights :math:`w_d`, the adaptive policy spends
    :math:`\ell^*_d(b)` on class ``d`` and the frontier is

    .. math::

        b \mapsto \Big(\sum_d w_d\, \ell^*_d(b),\ \sum_d w_d\, Q_d(\ell^*_d(b))\Big).

    Parameters
    ----------
    b : array_like of float, any shape
        Effort values, ``>= b_min``.
    q_max, lam, k0, b_min, tau, weights
        As in :func:`optimal_length` (``q_max`` and ``lam`` may be per class).

    Returns
    -------
    EffortFrontier
        ``(cost, quality)``: float64 arrays of the shape of ``b`` (one class, or a mix with
        ``weights``), or ``(*b.shape, D)`` per class (per-class ``q_max`` or ``lam``, no weights).

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

    On a mix the slope is still the price, ``dQ/dL = k(b)`` (EM4), and the frontier dominates the
    fixed-budget curve :func:`budget_frontier`: at equal mean cost its mean quality is no lower, and
    strictly higher wherever the classes' optimal lengths differ (EM3); :func:`adaptive_gap`
    measures by how much. The mix's mean is exact for ``Fraction`` weights (one rounding of the
    exact sum of the float64 per-class values).

    Examples
    --------
    >>> from refimpl import effort_frontier
    >>> front = effort_frontier([0.0, 1.0, 2.0], q_max=1.0, lam=100.0, k0=0.005, b_min=0.0, tau=1.0)
    >>> front.cost
    array([ 69.31471806, 169.31471806, 269.31471806])
    >>> front.quality
    array([0.5       , 0.81606028, 0.93233236])
    >>> mix = effort_frontier([1.0, 2.0], q_max=1.0, lam=[20.0, 200.0], k0=0.005, b_min=0.0,
    ...                       tau=1.0, weights=[0.5, 0.5])
    >>> mix.cost, mix.quality
    (array([133.02585093, 243.02585093]), array([0.79766631, 0.92556559]))
    """
    mix = _mix(q_max, lam, weights)
    if mix is None:
        length, arr, q_max_, lam_, k0_, b_min_, tau_ = _optimum(b, q_max, lam, k0, b_min, tau)
        k = effort_penalty(arr, k0=k0_, b_min=b_min_, tau=tau_)
        quality = np.where(length > 0.0, np.maximum(q_max_ - lam_ * k, 0.0), 0.0)
        return EffortFrontier(cost=length, quality=_out(quality))
    k0_, b_min_, tau_, arr = _mix_effort(b, k0, b_min, tau)
    length = _class_optimum(arr, mix, k0_, b_min_, tau_)
    k = effort_penalty(arr, k0=k0_, b_min=b_min_, tau=tau_)[..., None]
    quality = _out(np.where(length > 0.0, np.maximum(mix.q_max - mix.lam * k, 0.0), 0.0))
    if mix.weights is None:
        return EffortFrontier(cost=length, quality=quality)
    return EffortFrontier(
        cost=_out(_mix_mean(length, mix.weights)), quality=_out(_mix_mean(quality, mix.weights))
    )


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
