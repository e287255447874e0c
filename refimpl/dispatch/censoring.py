"""Lengths cut off before they finish (conventions §first-k-of-n): Kaplan–Meier and the MLE.

Rollouts still running at the cut-off are right-censored at the length they had reached; the
Kaplan–Meier survival curve (:func:`kaplan_meier`) and the exponential rate MLE
(:func:`exponential_rate_mle`) estimate the true length law from finished and censored lengths
together. Claims ``KM*`` of ``proofs/censoring.py``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from refimpl._validation import (
    as_float_array,
    invalid,
    require_entries,
    require_in_range,
    require_same_shape,
    wrong_type,
)
from refimpl.dispatch._numerics import FloatArray

__all__ = ["KaplanMeier", "exponential_rate_mle", "kaplan_meier"]


class KaplanMeier(NamedTuple):
    """Product-limit estimate: ``survival[i]`` is :math:`\\hat S(t)` for ``times[i] <= t <
    times[i+1]``, and :math:`\\hat S(t) = 1` before ``times[0]``.

    Empty arrays (no rollout finished) therefore mean :math:`\\hat S \\equiv 1`: no drop was
    observed. The estimate says nothing beyond the longest length observed, finished or not."""

    times: FloatArray
    survival: FloatArray


def _censored_arrays(durations: ArrayLike, observed: ArrayLike) -> tuple[FloatArray, FloatArray]:
    d = as_float_array(durations, name="durations", ndim=1)
    o = as_float_array(observed, name="observed", ndim=1)
    require_same_shape(d, o, names=("durations", "observed"))
    require_in_range(d, name="durations", low=0.0, meaning="lengths", fix="; pass lengths >= 0.")
    require_entries(
        o,
        (o != 0) & (o != 1),
        name="observed",
        rule="be 0/1 or bool (1 = finished, 0 = censored: unfinished at the cut-off)",
        fix=".",
    )
    return d, o


def kaplan_meier(durations: ArrayLike, observed: ArrayLike) -> KaplanMeier:
    r"""Kaplan–Meier (product-limit) estimate of the length survival :math:`S(t) = P(L > t)`.

    Finished rollouts are events at their length; unfinished ones are right-censored at the length
    they had reached at the cut-off. At the distinct event times :math:`t_1 < t_2 < \dots`, with
    :math:`d_i` events and :math:`r_i` at risk (length :math:`\ge t_i`),

    .. math::

        \hat S(t) = \prod_{t_i \le t} \Bigl(1 - \frac{d_i}{r_i}\Bigr).

    Parameters
    ----------
    durations : array_like of float, shape (m,)
        Lengths (finished) or lengths reached (censored), ``>= 0``.
    observed : array_like of bool or 0/1, shape (m,)
        1 (True) for a finished rollout, 0 for a censored one.

    Returns
    -------
    KaplanMeier
        ``times`` (the distinct event times, increasing) and ``survival`` (:math:`\hat S` just after
        each of them). :math:`\hat S = 1` before the first event time, so when nothing finished
        both are empty and the estimate is :math:`\hat S \equiv 1` (no event, no drop), not
        missing.

    Raises
    ------
    ValueError
        If shapes differ, a duration is negative or non-finite, or ``observed`` is not 0/1.

    Notes
    -----
    Convention (as lifelines and R's ``survival``): a rollout censored at :math:`t_i` is still at
    risk at :math:`t_i`. With nothing censored :math:`\hat S` is the empirical survival (claim
    :ref:`KM1 <km1>`). Pool finished and censored lengths across steps (type II censoring at each
    step's cut-off) to estimate the true :math:`p` under first-``k``-of-``n`` dispatch.

    References
    ----------
    Kaplan & Meier (1958), *J. Amer. Statist. Assoc.* 53, 457–481.

    Examples
    --------
    >>> import refimpl
    >>> km = refimpl.kaplan_meier([1, 2, 2, 3, 4], [1, 1, 0, 1, 0])
    >>> km.times, km.survival
    (array([1., 2., 3.]), array([0.8, 0.6, 0.3]))
    """
    d, o = _censored_arrays(durations, observed)
    if d.size == 0:
        return KaplanMeier(np.empty(0), np.empty(0))
    times = np.unique(d[o == 1])
    if times.size == 0:
        return KaplanMeier(np.empty(0), np.empty(0))
    sorted_d = np.sort(d)
    at_risk = d.size - np.searchsorted(sorted_d, times, side="left")
    events = np.searchsorted(np.sort(d[o == 1]), times, side="right") - np.searchsorted(
        np.sort(d[o == 1]), times, side="left"
    )
    survival = np.cumprod(1.0 - events / at_risk)
    return KaplanMeier(times.astype(np.float64), np.asarray(survival, dtype=np.float64))


def exponential_rate_mle(
    durations: ArrayLike, observed: ArrayLike, *, unbiased: bool = False
) -> float:
    r"""Rate of exponential lengths from censored data: the MLE :math:`d/T` or :math:`(d-1)/T`.

    With :math:`d` finished rollouts and total time on test :math:`T` (every duration summed,
    censored ones at their censoring length). For first-``k``-of-``n`` dispatch (type II censoring)
    :math:`d = k` and :math:`T = \sum_{i \le k} x_{(i)} + (n-k)\, x_{(k)}`:

    .. math::

        \hat\lambda = \frac{k}{T}, \qquad \hat\lambda_\text{unbiased} = \frac{k-1}{T}.

    Parameters
    ----------
    durations : array_like of float, shape (m,)
        Lengths (finished) or lengths reached (censored), ``>= 0``.
    observed : array_like of bool or 0/1, shape (m,)
        1 for a finished rollout, 0 for a censored one.
    unbiased : bool
        Return :math:`(d-1)/T` (unbiased under type II censoring, where :math:`T \sim
        \mathrm{Gamma}(k, \lambda)`) instead of the MLE.

    Returns
    -------
    float
        The rate estimate.

    Raises
    ------
    ValueError
        As :func:`kaplan_meier`; or fewer than 1 (2 for ``unbiased``) finished rollouts,
        :math:`T = 0`, or a rate past float64 (below about 1e-308 of total time per finished
        rollout).

    Notes
    -----
    :math:`E[k/T] = k\lambda/(k-1)` (biased upward), :math:`E[(k-1)/T] = \lambda` (claim
    :ref:`KM2 <km2>`). Under type I censoring (a fixed time cut-off) the unbiased variant is only
    approximately unbiased.

    Examples
    --------
    >>> import refimpl
    >>> refimpl.exponential_rate_mle([1.0, 2.0, 3.0, 3.0], [1, 1, 1, 0])  # 3 / 9
    0.3333333333333333
    """
    d, o = _censored_arrays(durations, observed)
    if not isinstance(unbiased, bool):
        raise wrong_type("unbiased", "a bool", unbiased, "Pass unbiased=True or False.")
    events = int(o.sum())
    need = 2 if unbiased else 1
    if events < need:
        raise invalid(
            "observed",
            f"contain at least {need} finished rollouts for the {'unbiased ' if unbiased else ''}"
            "estimate",
            o,
            "Pool more steps before estimating the rate.",
        )
    total = float(d.sum())
    if total <= 0:
        raise invalid(
            "durations",
            "have a positive sum (total time on test)",
            d,
            "Pass positive lengths.",
        )
    rate = (events - 1 if unbiased else events) / total
    if not math.isfinite(rate):  # e.g. one finished rollout of length 5e-324: 2e323 is past float64
        raise invalid(
            "durations",
            "have a sum large enough for the rate (finished rollouts / total time) to fit in float64",
            d,
            "Pass the lengths in a larger unit; the rate scales by the same factor.",
        )
    return rate
