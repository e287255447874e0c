"""The reward-maximising length ``L*(b) = max(0, λ ln(q_max/(λ k(b))))`` under the saturating
quality model (conventions §effort-conditioning; claims EF4–EF6 of ``proofs/effort.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import (
    invalid,
)
from refimpl.effort._checks import (
    _effort_array,
    _out,
    _penalty_parameters,
    _quality_parameters,
    _scaled_effort,
)
from refimpl.effort._mix import _class_optimum, _mix, _mix_effort, _mix_mean

__all__ = ["optimal_length"]


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
    b: ArrayLike,
    *,
    q_max: float | ArrayLike,
    lam: float | ArrayLike,
    k0: float,
    b_min: float,
    tau: float,
    weights: ArrayLike | Sequence[Fraction] | None = None,
) -> NDArray[np.float64]:
    r"""Reward-maximising length ``L*(b)`` under the saturating quality model, for one class or a mix.

    Maximises ``Q(ℓ) − k(b)·ℓ`` over ``ℓ >= 0`` with ``Q(ℓ) = q_max (1 − e^{−ℓ/λ})`` (``ℓ_scale = 1``):

    .. math::

        L^*(b) = \max\!\left(0,\ \lambda \ln\frac{q_\text{max}}{\lambda k(b)}\right)
               = \max\!\left(0,\ \lambda \ln\frac{q_\text{max}}{\lambda k_0}
                 + \frac{\lambda}{\tau}(b - b_\text{min})\right).

    On a mix of difficulty classes ``d`` (``lam`` and/or ``q_max`` one entry per class) each class
    gets its own optimum :math:`\ell^*_d(b)`, the formula above with :math:`\lambda_d, q_{\max,d}`;
    with ``weights`` :math:`w_d` the result is the mix's mean length
    :math:`\sum_d w_d\, \ell^*_d(b)` (the cost of the adaptive policy).

    Parameters
    ----------
    b : array_like of float, any shape
        Effort values, finite and ``>= b_min``.
    q_max : float or array_like of float, shape (D,)
        Saturation quality, ``> 0``; one per class, or one for all.
    lam : float or array_like of float, shape (D,)
        Quality length scale ``λ > 0``; one per class, or one for all.
    k0 : float
        Length price at ``b_min``, ``> 0`` (with ``k0 = 0`` there is no finite optimum).
    b_min : float
        Lowest effort.
    tau : float
        Decay length of the price, ``> 0``.
    weights : array_like, shape (D,), optional
        Share of each class in the mix: non-negative, summing to 1 (exactly, for ``Fraction``
        weights; within 1e-9 otherwise). Quadrature weights of a continuous difficulty law
        (:func:`difficulty_mix`) are such a mix.

    Returns
    -------
    ndarray of float64
        ``L*(b) >= 0``: shape of ``b`` for one class (scalar ``q_max`` and ``lam``, no ``weights``)
        or with ``weights``; ``(*b.shape, D)`` (one length per class, class axis last) for per-class
        ``q_max`` or ``lam`` without ``weights``.

    Raises
    ------
    TypeError
        If an input is not numeric.
    ValueError
        If an input is not finite, ``b < b_min``, ``k0 <= 0``, a ``q_max`` or ``lam`` is ``<= 0``,
        ``tau <= 0``, the per-class arrays and ``weights`` differ in length, ``weights`` is not a
        probability vector, or ``L*`` exceeds the float64 range (``λ (b − b_min)/τ > 1.8e308``).

    Notes
    -----
    First-order condition ``(q_max/λ) e^{−ℓ/λ} = k(b)`` (EF4), second-order condition
    ``Q''(ℓ) < 0`` everywhere (EF5), so the root is the unique maximiser when positive; otherwise
    the reward is decreasing on ``ℓ >= 0`` and ``L* = 0``. ``L*`` is linear in ``b`` with slope
    ``λ/τ`` where positive (EF6) and non-decreasing in ``b``. On a mix the classes are separate
    problems, so the per-class optimum maximises the mix's mean shaped reward (EM2), and no other
    allocation of the same mean length has a higher mean quality (EM3).

    Computed in the log form above, which never forms ``k(b)``: as ``k(b) → 0`` (large
    ``(b − b_min)/τ``) ``L*`` keeps growing linearly and stays exact after ``k(b)`` itself has
    underflowed to 0; it does not blow up to ``inf`` silently (an overflow of the linear term raises).
    The weighted mean is exact for ``Fraction`` weights (the exact sum of the float64 per-class
    lengths, rounded once); with float weights it is a float64 dot product. A one-class mix
    (``lam=[λ], weights=[1]``) gives the one-class values bit for bit.

    References
    ----------
    conventions §effort-conditioning.

    Examples
    --------
    >>> from fractions import Fraction
    >>> from refimpl import optimal_length
    >>> optimal_length([0.0, 1.0, 2.0], q_max=1.0, lam=100.0, k0=0.005, b_min=0.0, tau=1.0)
    array([ 69.31471806, 169.31471806, 269.31471806])
    >>> float(optimal_length(0.0, q_max=1.0, lam=100.0, k0=0.02, b_min=0.0, tau=1.0))  # too dear
    0.0

    Two classes, easy (``λ = 20``) and hard (``λ = 200``): one length each, then the mix's mean.

    >>> optimal_length([0.0, 1.0], q_max=1.0, lam=[20.0, 200.0], k0=0.005, b_min=0.0, tau=1.0)
    array([[ 46.05170186,   0.        ],
           [ 66.05170186, 200.        ]])
    >>> optimal_length(1.0, q_max=1.0, lam=[20.0, 200.0], k0=0.005, b_min=0.0, tau=1.0,
    ...                weights=[Fraction(1, 2), Fraction(1, 2)])
    array(133.02585093)
    """
    mix = _mix(q_max, lam, weights)
    if mix is None:
        return _optimum(b, q_max, lam, k0, b_min, tau)[0]
    k0_, b_min_, tau_, arr = _mix_effort(b, k0, b_min, tau)
    length = _class_optimum(arr, mix, k0_, b_min_, tau_)
    return length if mix.weights is None else _out(_mix_mean(length, mix.weights))
