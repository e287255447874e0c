"""The length price ``k(b)``, the saturating quality model and the shaped reward
(conventions §effort-conditioning; claims EF1–EF3 of ``proofs/effort.py``).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import (
    as_float_array,
    as_real,
    invalid,
    require_same_shape,
)
from refimpl.effort._checks import (
    _effort_array,
    _out,
    _penalty_parameters,
    _require_nonnegative,
    _scaled_effort,
)

__all__ = ["effort_penalty", "saturating_quality", "shaped_reward"]


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
    ``(b − b_min)/τ`` itself exceeds the float64 range. Accuracy: relative error about
    ``(1 + (b − b_min)/τ)`` ulp (the rounding of the exponent, amplified by ``exp``).

    References
    ----------
    conventions §effort-conditioning (effort conditioning).

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
