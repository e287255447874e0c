"""Effort conditioning: the penalty ``k(b)``, the shaped reward, the optimal length and the frontier.

A policy conditioned on a scalar reasoning effort ``b`` is trained with the shaped reward
``r(y; b) = Q(y) − k(b)·ℓ(y)/ℓ_scale`` and the exponentially decaying length price
``k(b) = k0·exp(−(b − b_min)/τ)``. Under the saturating quality model
``Q(ℓ) = q_max·(1 − e^{−ℓ/λ})`` the reward-maximising length is ``L*(b) = max(0, λ ln(q_max/(λ k(b))))``,
linear in ``b`` with slope ``λ/τ`` where positive, and ``b ↦ (L*(b), Q(L*(b)))`` traces a monotone,
concave cost/quality frontier: one checkpoint, many cost/quality points (conventions §effort-conditioning).

The module also carries a toy effort-conditioned policy trained by policy gradient in numpy
(:func:`train_effort_policy`), which shows that one set of parameters conditioned on ``b`` learns
``L*(b)`` and traces the analytic frontier.

Claim ids (``proofs/effort.py``): EF1–EF3 (the penalty), EF4–EF6 (the optimum), EF7–EF9 (the frontier);
(``proofs/effort_mix.py``) EM1–EM6 (a mix of problems: adaptive effort against a fixed budget).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import (
    as_float_array,
    as_int,
    as_pmf,
    as_real,
    invalid,
    require_same_shape,
    wrong_type,
)

__all__ = [
    "AdaptiveGap",
    "ConditionedEffortPolicy",
    "DifficultyMix",
    "EffortFrontier",
    "EffortPolicy",
    "adaptive_gap",
    "budget_frontier",
    "difficulty_mix",
    "effort_frontier",
    "effort_penalty",
    "frontier_quality",
    "optimal_length",
    "pareto_front",
    "saturating_quality",
    "shaped_reward",
    "train_conditioned_policy",
    "train_effort_policy",
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
# a mix of difficulty classes (private helpers)
# ---------------------------------------------------------------------------------------------


class _Mix(NamedTuple):
    """Validated classes: per-class ``q_max`` and ``λ`` (shape (D,)) and the weights, if any."""

    q_max: NDArray[np.float64]
    lam: NDArray[np.float64]
    weights: NDArray[np.float64] | list[Fraction] | None


def _class_parameter(value: Any, *, name: str, meaning: str) -> NDArray[np.float64]:
    """A positive scalar or a non-empty 1-D array of positive values (one per class)."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return np.asarray([as_real(value, name=name, low=0.0, low_open=True, meaning=meaning)])
    arr = np.atleast_1d(as_float_array(value, name=name, ndim=(0, 1)))
    if arr.size == 0:
        raise invalid(
            name, "be non-empty (one value per class)", arr, f"Pass one {name} per class."
        )
    bad = arr <= 0.0
    if np.any(bad):
        first = int(np.flatnonzero(bad)[0])
        raise invalid(
            name,
            f"be > 0 ({meaning})",
            arr,
            f"Entry {first} is {float(arr[first])!r}; pass positive values.",
        )
    return arr


def _is_scalar(value: Any) -> bool:
    return np.ndim(value) == 0 if not isinstance(value, (str, bytes)) else True


def _mix(q_max: Any, lam: Any, weights: Any) -> _Mix | None:
    """The classes of a call, or ``None`` for the one-curve call (scalar ``q_max``, ``lam``, no weights)."""
    if weights is None and _is_scalar(q_max) and _is_scalar(lam):
        return None
    q = _class_parameter(q_max, name="q_max", meaning="saturation quality of each class")
    lm = _class_parameter(lam, name="lam", meaning="quality length scale of each class")
    w: NDArray[np.float64] | list[Fraction] | None = None
    if weights is not None:
        w, _ = as_pmf(weights, name="weights")
    sizes = {"q_max": q.size, "lam": lm.size}
    if w is not None:
        sizes["weights"] = len(w)
    n = max(sizes.values())
    for name, size in sizes.items():
        if size != n and (size != 1 or name == "weights"):
            shown = ", ".join(f"{k}: {v}" for k, v in sizes.items())
            raise invalid(
                name,
                f"have one entry per class ({n} classes; q_max and lam may also have one for all)",
                {"q_max": q, "lam": lm, "weights": weights}[name],
                f"Give q_max, lam and weights the same length (got {shown}).",
            )
    return _Mix(np.broadcast_to(q, (n,)).copy(), np.broadcast_to(lm, (n,)).copy(), w)


def _mix_mean(values: NDArray[np.float64], weights: NDArray[np.float64] | list[Fraction]) -> Any:
    """``Σ_d w_d v[..., d]``; with ``Fraction`` weights the sum is exact, rounded once."""
    if isinstance(weights, list):
        flat = values.reshape(-1, values.shape[-1])
        exact = [
            float(
                sum(
                    (Fraction(float(v)) * w for v, w in zip(row, weights, strict=True)), Fraction(0)
                )
            )
            for row in flat
        ]
        return np.asarray(exact, dtype=np.float64).reshape(values.shape[:-1])
    return values @ weights


def _class_optimum(
    arr: NDArray[np.float64], mix: _Mix, k0: float, b_min: float, tau: float
) -> NDArray[np.float64]:
    """``ℓ*_d(b)`` for every class, shape ``(*b.shape, D)`` (log form, never forms ``k(b)``)."""
    x = _scaled_effort(arr, b_min, tau)[..., None]
    intercept = np.log(mix.q_max) - np.log(mix.lam) - np.log(k0)
    with np.errstate(over="ignore", invalid="ignore"):
        length = np.maximum(mix.lam * (intercept + x), 0.0)
    if not np.all(np.isfinite(length)):
        raise invalid(
            "b",
            "give a finite optimal length (λ·(b − b_min)/τ overflows float64)",
            arr,
            "Pass smaller efforts or a larger tau.",
        )
    return _out(length)


def _class_quality(length: NDArray[np.float64], mix: _Mix) -> NDArray[np.float64]:
    """``Q_d(ℓ_d)`` for lengths with a class axis last."""
    with np.errstate(over="ignore", under="ignore"):
        return _out(-mix.q_max * np.expm1(-(length / mix.lam)))


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


def _mix_effort(b: ArrayLike, k0: Any, b_min: Any, tau: Any) -> tuple[float, float, float, Any]:
    k0_, b_min_, tau_ = _penalty_parameters(k0, b_min, tau)
    if k0_ == 0.0:
        raise invalid(
            "k0",
            "be > 0 for an optimal length (with k0 = 0 longer is always better: L* = inf)",
            k0,
            "Pass a positive k0.",
        )
    return k0_, b_min_, tau_, _effort_array(b, b_min_)


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


def budget_frontier(
    length: ArrayLike,
    *,
    q_max: float | ArrayLike,
    lam: float | ArrayLike,
    weights: ArrayLike | Sequence[Fraction] | None,
) -> EffortFrontier:
    r"""The fixed-budget curve: one length ``ℓ`` for every problem of the mix (budget forcing).

    .. math::

        \ell \mapsto \Big(\ell,\ \sum_d w_d\, Q_d(\ell)\Big), \qquad
        Q_d(\ell) = q_{\max,d}\left(1 - e^{-\ell/\lambda_d}\right).

    This is what a length controller that ignores the problem reaches: truncation at ``ℓ``, or a
    policy conditioned on a budget but not on the problem.

    Parameters
    ----------
    length : array_like of float, any shape
        The one length spent on every problem, finite and ``>= 0``.
    q_max, lam : float or array_like of float, shape (D,)
        Per-class quality model, as in :func:`optimal_length`.
    weights : array_like, shape (D,), or None
        Share of each class (a probability vector; exact for ``Fraction`` weights). ``None``: no
        averaging, the quality of each class (class axis last; a scalar ``q_max`` and ``lam`` give
        the one-class curve ``(ℓ, Q(ℓ))``).

    Returns
    -------
    EffortFrontier
        ``cost``: the length, as float64 (broadcast to ``(*length.shape, D)`` per class when
        ``weights`` is ``None`` and a parameter is per class); ``quality``: the mix's mean quality.

    Raises
    ------
    TypeError
        If an input is not numeric.
    ValueError
        If an input is not finite, a length is negative, a ``q_max`` or ``lam`` is ``<= 0``, the
        per-class arrays and ``weights`` differ in length, or ``weights`` is not a probability
        vector.

    Notes
    -----
    Increasing and concave in ``ℓ`` (a mix of increasing concave curves), from 0 to
    :math:`\sum_d w_d q_{\max,d}`. It lies on or below :func:`effort_frontier` at every cost (EM3):
    one length for all is one allocation among many, and the adaptive one is best for its cost.
    For one class the two curves coincide: every point of ``(ℓ, Q(ℓ))`` with
    ``ℓ >= L*(b_min)`` is an adaptive optimum.

    Examples
    --------
    >>> from refimpl import budget_frontier
    >>> fixed = budget_frontier([133.02585093], q_max=1.0, lam=[20.0, 200.0], weights=[0.5, 0.5])
    >>> fixed.quality  # the adaptive mix reaches 0.79766631 at this mean cost
    array([0.74225029])
    """
    mix = _mix(q_max, lam, weights)
    ell = as_float_array(length, name="length")
    _require_nonnegative(ell, name="length", meaning="a generated length")
    if mix is None:
        return EffortFrontier(
            cost=_out(ell),
            quality=saturating_quality(ell, q_max=q_max, lam=lam),  # type: ignore[arg-type]
        )
    per_class = _class_quality(np.broadcast_to(ell[..., None], (*ell.shape, mix.lam.size)), mix)
    if mix.weights is None:
        cost = np.broadcast_to(ell[..., None], per_class.shape).copy()
        return EffortFrontier(cost=_out(cost), quality=per_class)
    return EffortFrontier(cost=_out(ell.copy()), quality=_out(_mix_mean(per_class, mix.weights)))


class AdaptiveGap(NamedTuple):
    """What adapting the length to the problem buys over one fixed length, at each effort.

    Attributes
    ----------
    cost, quality : ndarray of float64
        The adaptive frontier point: mean length and mean quality (:func:`effort_frontier`).
    budget_quality : ndarray of float64
        Mean quality of the fixed budget ``ℓ = cost`` (:func:`budget_frontier`): equal cost.
    budget_length : ndarray of float64
        The fixed length whose mean quality equals ``quality``: equal quality.
    quality_gained : ndarray of float64
        ``quality − budget_quality >= 0``: quality gained at equal cost.
    cost_saved : ndarray of float64
        ``budget_length − cost >= 0``: tokens saved per problem at equal quality.
    """

    cost: NDArray[np.float64]
    quality: NDArray[np.float64]
    budget_quality: NDArray[np.float64]
    budget_length: NDArray[np.float64]
    quality_gained: NDArray[np.float64]
    cost_saved: NDArray[np.float64]


def adaptive_gap(
    b: ArrayLike,
    *,
    q_max: float | ArrayLike,
    lam: float | ArrayLike,
    k0: float,
    b_min: float,
    tau: float,
    weights: ArrayLike | Sequence[Fraction],
) -> AdaptiveGap:
    r"""The gap between the adaptive frontier and the fixed-budget curve, at each effort ``b``.

    With :math:`C(b), A(b)` the adaptive frontier (:func:`effort_frontier`) and
    :math:`B(\ell) = \sum_d w_d Q_d(\ell)` the fixed-budget curve (:func:`budget_frontier`):

    .. math::

        \text{quality gained} = A(b) - B(C(b)), \qquad
        \text{cost saved} = B^{-1}(A(b)) - C(b).

    Parameters
    ----------
    b : array_like of float, any shape
        Effort values, ``>= b_min``.
    q_max, lam, k0, b_min, tau, weights
        As in :func:`effort_frontier`; ``weights`` is required (the gap is a property of a mix).

    Returns
    -------
    AdaptiveGap
        Float64 arrays of the shape of ``b``.

    Raises
    ------
    TypeError, ValueError
        As :func:`effort_frontier`.

    Notes
    -----
    Both gaps are ``>= 0`` (EM3) and 0 for one class. The equal-quality length
    :math:`B^{-1}(A)` lies between the shortest and the longest :math:`\ell^*_d(b)` (``B`` is
    increasing and :math:`B(\min_d \ell^*_d) \le A \le B(\max_d \ell^*_d)`); it is found by
    bisection in that bracket to float64 resolution (at most 1100 halvings, vectorised).

    Examples
    --------
    >>> from refimpl import adaptive_gap
    >>> gap = adaptive_gap([1.0], q_max=1.0, lam=[20.0, 200.0], k0=0.005, b_min=0.0, tau=1.0,
    ...                    weights=[0.5, 0.5])
    >>> gap.quality_gained, gap.cost_saved
    (array([0.05541601]), array([47.97015166]))
    """
    if weights is None:
        raise invalid(
            "weights",
            "be given (the gap compares strategies on a mix of classes)",
            weights,
            "Pass one weight per class, e.g. weights=[0.5, 0.5].",
        )
    mix = _mix(q_max, lam, weights)
    if mix is None or mix.weights is None:  # pragma: no cover - weights were given above
        raise AssertionError("a mix with weights")
    k0_, b_min_, tau_, arr = _mix_effort(b, k0, b_min, tau)
    length = _class_optimum(arr, mix, k0_, b_min_, tau_)
    front = effort_frontier(
        arr, q_max=mix.q_max, lam=mix.lam, k0=k0_, b_min=b_min_, tau=tau_, weights=weights
    )
    fixed = budget_frontier(front.cost, q_max=mix.q_max, lam=mix.lam, weights=weights)
    lo = np.min(length, axis=-1)
    hi = np.max(length, axis=-1)
    target = front.quality
    for _ in range(1100):
        mid = 0.5 * (lo + hi)
        if np.all((mid == lo) | (mid == hi)):
            break
        below = budget_frontier(mid, q_max=mix.q_max, lam=mix.lam, weights=weights).quality < target
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    budget_length = _out(hi)
    return AdaptiveGap(
        cost=front.cost,
        quality=front.quality,
        budget_quality=fixed.quality,
        budget_length=budget_length,
        quality_gained=_out(np.maximum(front.quality - fixed.quality, 0.0)),
        cost_saved=_out(np.maximum(budget_length - front.cost, 0.0)),
    )


class DifficultyMix(NamedTuple):
    """A mix of difficulty classes: per-class quality model and weights (see :func:`difficulty_mix`).

    Attributes
    ----------
    q_max, lam, weights : ndarray of float64, shape (D,)
        Saturation quality, quality length scale and share of each class; pass them as
        ``q_max=, lam=, weights=`` (``**mix._asdict()``) to :func:`effort_frontier` and friends.
    """

    q_max: NDArray[np.float64]
    lam: NDArray[np.float64]
    weights: NDArray[np.float64]


def difficulty_mix(
    *, median: float, sigma: float, q_max: float = 1.0, nodes: int = 64
) -> DifficultyMix:
    r"""A log-normal law of the quality length scale ``λ``, as equally likely quantile classes.

    :math:`\ln\lambda \sim \mathcal N(\ln m, \sigma^2)` is replaced by ``nodes`` classes of
    weight :math:`1/n` at the mid-quantiles :math:`\lambda_i = m\, e^{\sigma z_i}`,
    :math:`z_i = \Phi^{-1}((i - \tfrac12)/n)`: class ``i`` stands for the ``i``-th ``n``-quantile
    of difficulty, and :math:`E[f(\lambda)] \approx \tfrac1n \sum_i f(\lambda_i)`.

    Parameters
    ----------
    median : float
        Median ``m`` of ``λ``, ``> 0`` (tokens).
    sigma : float
        Standard deviation of ``ln λ``, ``>= 0`` (0: every class has ``λ = m``).
    q_max : float, default 1.0
        Saturation quality of every class, ``> 0``.
    nodes : int, default 64
        Number of classes, ``>= 1``.

    Returns
    -------
    DifficultyMix
        ``q_max``, ``lam`` (increasing) and ``weights`` (each ``1/nodes``, as float64).

    Raises
    ------
    TypeError
        If a parameter has the wrong type.
    ValueError
        If a parameter is outside its domain.

    Notes
    -----
    Why mid-quantiles and not Gauss–Hermite nodes: the adaptive frontier's integrand has a kink
    where :math:`\ell^*(\lambda)` is clipped at 0 (at :math:`\lambda = q_\text{max}/k(b)`, which
    moves with ``b``), which no fixed rule resolves, and there Gauss–Hermite converges no faster than
    the mid-quantile rule (both about :math:`1/n`). Measured against the closed form of the
    log-normal mix (EM5) at ``m = 100, σ = 1, k0 = 0.005, τ = 1``, ``b ∈ [0, 4]``: the mean quality
    of the adaptive frontier is within 1.1e-3 at 64 classes and 2.5e-4 at 256, the mean cost within
    0.5% and 0.15%; the fixed-budget curve (smooth in ``z``) within 4e-4 and 7e-5.

    Examples
    --------
    >>> from refimpl import difficulty_mix
    >>> mix = difficulty_mix(median=100.0, sigma=1.0, nodes=3)
    >>> mix.lam
    array([ 38.00617399, 100.        , 263.11514554])
    >>> mix.weights
    array([0.33333333, 0.33333333, 0.33333333])
    """
    m = as_real(median, name="median", low=0.0, low_open=True, meaning="median of λ")
    s = as_real(sigma, name="sigma", low=0.0, meaning="standard deviation of ln λ")
    q = as_real(q_max, name="q_max", low=0.0, low_open=True, meaning="saturation quality")
    n = as_int(nodes, name="nodes", minimum=1, meaning="quadrature classes")
    z = _normal_quantile((np.arange(n) + 0.5) / n)
    return DifficultyMix(
        q_max=_out(np.full(n, q)), lam=_out(m * np.exp(s * z)), weights=_out(np.full(n, 1.0 / n))
    )


def _normal_quantile(p: NDArray[np.float64]) -> NDArray[np.float64]:
    from scipy.special import ndtri

    return _out(ndtri(p))


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

_HERMITE_NODES, _HERMITE_WEIGHTS = np.polynomial.hermite_e.hermegauss(64)
_HERMITE_WEIGHTS = _HERMITE_WEIGHTS / math.sqrt(2.0 * math.pi)
_MAX_LOG_LENGTH = 700.0  # exp(700) ≈ 1e304: sampled lengths never overflow


def _chebyshev_features(b: NDArray[np.float64], b_min: float, b_max: float, degree: int) -> Any:
    z = 2.0 * (b - b_min) / (b_max - b_min) - 1.0
    phi = np.polynomial.chebyshev.chebvander(z.ravel(), degree)
    return phi.reshape((*z.shape, degree + 1))


class EffortPolicy(NamedTuple):
    r"""An effort-conditioned length policy: one set of parameters, the effort ``b`` as its input.

    The length is log-normal, :math:`\ln \ell \sim \mathcal N(\mu(b), \sigma(b)^2)`, with
    :math:`\mu(b) = \sum_j w_j T_j(z)` and :math:`\ln\sigma(b) = \sum_j v_j T_j(z)`, where :math:`T_j`
    are Chebyshev polynomials and :math:`z = 2(b - b_\text{min})/(b_\text{max} - b_\text{min}) - 1`.
    Made by :func:`train_effort_policy`, which also records the training problem (the quality model
    and the penalty) so that :meth:`evaluate` can score the policy on it.

    Attributes
    ----------
    mean_coef : ndarray of float64, shape (degree + 1,)
        Chebyshev coefficients ``w`` of ``μ(b)`` (the log of the median length).
    log_spread_coef : ndarray of float64, shape (degree + 1,)
        Chebyshev coefficients ``v`` of ``ln σ(b)``.
    b_min, b_max : float
        The effort range the policy was trained on (and may be evaluated on).
    q_max, lam, k0, tau : float
        The training problem: quality model ``Q(ℓ) = q_max (1 − e^{−ℓ/λ})`` and penalty
        ``k(b) = k0 e^{−(b − b_min)/τ}``.
    reward_history : ndarray of float64, shape (steps,)
        Mean shaped reward of each training batch (noise included).

    Notes
    -----
    Methods: :meth:`log_length_params` (``μ(b), σ(b)``), :meth:`mean_length`
    (``e^{μ + σ²/2}``), :meth:`sample_lengths` (with an explicit generator) and :meth:`evaluate`
    (expected length and expected quality, the policy's frontier point at each effort). Efforts
    outside ``[b_min, b_max]`` are rejected: polynomial features do not extrapolate.

    Examples
    --------
    >>> import numpy as np
    >>> from refimpl import effort_frontier, effort_penalty, train_effort_policy
    >>> problem = dict(q_max=1.0, lam=100.0, k0=0.005, b_min=0.0, tau=1.0)
    >>> policy = train_effort_policy(**problem, b_max=4.0, rng=1, steps=300)
    >>> b = np.linspace(0.0, 4.0, 5)
    >>> points, best = policy.evaluate(b), effort_frontier(b, **problem)
    >>> k = effort_penalty(b, k0=0.005, b_min=0.0, tau=1.0)
    >>> gap = (best.quality - k * best.cost) - (points.quality - k * points.cost)
    >>> bool(np.all(gap >= 0.0)), bool(np.all(gap < 0.01))  # no policy beats L*; this one is close
    (True, True)
    """

    mean_coef: NDArray[np.float64]
    log_spread_coef: NDArray[np.float64]
    b_min: float
    b_max: float
    q_max: float
    lam: float
    k0: float
    tau: float
    reward_history: NDArray[np.float64]

    def _efforts(self, b: ArrayLike) -> NDArray[np.float64]:
        arr = as_float_array(b, name="b")
        outside = (arr < self.b_min) | (arr > self.b_max)
        if np.any(outside):
            first = int(np.flatnonzero(outside.ravel())[0])
            raise invalid(
                "b",
                f"lie in the trained effort range [{self.b_min!r}, {self.b_max!r}]",
                arr,
                f"Entry {first} is {float(arr.ravel()[first])!r}; evaluate inside the range or "
                "train with a wider b_max.",
            )
        return arr

    def log_length_params(self, b: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """``(μ(b), σ(b))``: mean and standard deviation of ``ln ℓ`` at each effort."""
        arr = self._efforts(b)
        phi = _chebyshev_features(arr, self.b_min, self.b_max, self.mean_coef.size - 1)
        mu = phi @ self.mean_coef
        with np.errstate(over="ignore", under="ignore"):
            sigma = np.exp(phi @ self.log_spread_coef)
        return _out(mu), _out(sigma)

    def mean_length(self, b: ArrayLike) -> NDArray[np.float64]:
        r"""Expected length :math:`E[\ell \mid b] = e^{\mu(b) + \sigma(b)^2/2}`, shape of ``b``."""
        mu, sigma = self.log_length_params(b)
        with np.errstate(over="ignore"):
            return _out(np.exp(mu + 0.5 * sigma**2))

    def sample_lengths(self, b: ArrayLike, *, rng: np.random.Generator) -> NDArray[np.float64]:
        """One sampled length per entry of ``b``, drawn with the given generator."""
        if not isinstance(rng, np.random.Generator):
            raise wrong_type(
                "rng", "a numpy.random.Generator", rng, "Pass rng=np.random.default_rng(seed)."
            )
        mu, sigma = self.log_length_params(b)
        eps = rng.standard_normal(mu.shape)
        return _out(np.exp(np.minimum(mu + sigma * eps, _MAX_LOG_LENGTH)))

    def evaluate(self, b: ArrayLike) -> EffortFrontier:
        r"""The policy's cost/quality point at each effort: ``(E[ℓ | b], E[Q(ℓ) | b])``.

        The quality expectation over the log-normal length is computed by 64-point Gauss–Hermite
        quadrature (deterministic; relative error far below 1e-10 for the spreads training reaches).
        Evaluating the one trained policy at many ``b`` traces its frontier.
        """
        mu, sigma = self.log_length_params(b)
        log_ell = np.minimum(mu[..., None] + sigma[..., None] * _HERMITE_NODES, _MAX_LOG_LENGTH)
        with np.errstate(under="ignore"):
            e = np.exp(-np.exp(log_ell) / self.lam)
        quality = self.q_max * (1.0 - e @ _HERMITE_WEIGHTS)
        return EffortFrontier(cost=self.mean_length(b), quality=_out(quality))


_ADAM_BETA1, _ADAM_BETA2, _ADAM_EPS = 0.9, 0.999, 1e-8


def _adam_step(
    params: NDArray[np.float64],
    grad: NDArray[np.float64],
    m1: NDArray[np.float64],
    m2: NDArray[np.float64],
    *,
    t: int,
    steps: int,
    lr: float,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    r"""One Adam ascent step ``t`` (1-based) of ``steps``, the step size decayed linearly to 0.

    :math:`m_t = \beta_1 m_{t-1} + (1 - \beta_1) g`, :math:`v_t = \beta_2 v_{t-1} + (1 - \beta_2) g^2`,
    :math:`\theta_t = \theta_{t-1} + \eta_t\, \hat m_t / (\sqrt{\hat v_t} + \epsilon)` with the bias
    corrections :math:`\hat m_t = m_t/(1 - \beta_1^t)`, :math:`\hat v_t = v_t/(1 - \beta_2^t)` and
    :math:`\eta_t = \eta\,(1 - (t - 1)/T)` (Kingma and Ba 2015; ``β = (0.9, 0.999)``, ``ε = 1e-8``).
    """
    m1 = _ADAM_BETA1 * m1 + (1.0 - _ADAM_BETA1) * grad
    m2 = _ADAM_BETA2 * m2 + (1.0 - _ADAM_BETA2) * grad * grad
    step = lr * (1.0 - (t - 1) / steps)
    params = params + step * (m1 / (1.0 - _ADAM_BETA1**t)) / (
        np.sqrt(m2 / (1.0 - _ADAM_BETA2**t)) + _ADAM_EPS
    )
    return params, m1, m2


def _as_generator(rng: Any) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, numbers.Integral) and not isinstance(rng, bool) and int(rng) >= 0:
        return np.random.default_rng(int(rng))
    raise wrong_type(
        "rng",
        "a numpy.random.Generator or a non-negative int seed",
        rng,
        "Pass rng=np.random.default_rng(seed) or rng=seed.",
    )


def train_effort_policy(
    *,
    q_max: float,
    lam: float,
    k0: float,
    b_min: float,
    tau: float,
    b_max: float,
    rng: np.random.Generator | int,
    steps: int = 1000,
    batch: int = 64,
    group: int = 8,
    degree: int = 6,
    learning_rate: float = 0.05,
    noise: float = 0.0,
    initial_spread: float = 0.5,
) -> EffortPolicy:
    r"""Train one effort-conditioned length policy by policy gradient (REINFORCE, leave-one-out baseline).

    Each step draws ``batch`` efforts stratified over ``[b_min, b_max]``, ``group`` lengths per effort
    from the policy (:class:`EffortPolicy`), scores them with the shaped reward

    .. math::

        r = Q(\ell) - k(b)\,\ell + \text{noise}\cdot\xi, \qquad
        Q(\ell) = q_\text{max}(1 - e^{-\ell/\lambda}),\quad \xi \sim \mathcal N(0, 1),

    and ascends the policy-gradient estimate

    .. math::

        \hat g = \frac{1}{BG} \sum_{i,j} A_{ij}\, \nabla_\theta \ln p_\theta(\ell_{ij} \mid b_i),
        \qquad A_{ij} = \frac{G}{G - 1}\Big(r_{ij} - \frac{1}{G}\sum_{j'} r_{ij'}\Big)

    (the leave-one-out, RLOO, baseline of the same effort) with Adam, the step size decayed linearly
    to 0 over the run.

    Parameters
    ----------
    q_max, lam : float
        Quality model, both ``> 0``.
    k0, b_min, tau : float
        Penalty ``k(b)``, ``k0 > 0``, ``tau > 0``.
    b_max : float
        Highest training effort, ``> b_min``.
    rng : numpy.random.Generator or int
        The only source of randomness (an int is a seed for ``np.random.default_rng``). The same seed
        reproduces the result bit for bit; a Generator is advanced by the call (pass a fresh one, or
        a seed, to repeat a run).
    steps : int, default 1000
        Optimiser steps, ``>= 1``.
    batch : int, default 64
        Efforts per step, ``>= 1``.
    group : int, default 8
        Lengths sampled per effort, ``>= 2`` (the baseline needs the others).
    degree : int, default 6
        Degree of the Chebyshev features of ``b``, ``>= 0``.
    learning_rate : float, default 0.05
        Initial Adam step size, ``> 0``.
    noise : float, default 0.0
        Standard deviation of zero-mean Gaussian reward noise, ``>= 0`` (does not move the optimum).
    initial_spread : float, default 0.5
        Initial ``σ`` of ``ln ℓ``, ``> 0``; the initial median length is ``λ``.

    Returns
    -------
    EffortPolicy
        The trained parameters, the training problem and the reward history.

    Raises
    ------
    TypeError
        If ``rng`` is neither a Generator nor a non-negative int, or an argument has the wrong type.
    ValueError
        If a parameter is outside its domain (see above).

    Notes
    -----
    The reward-maximising deterministic length is :func:`optimal_length`; the policy learns to shrink
    ``σ(b)`` and to move its mean length towards ``L*(b)``. Measured at the defaults (about 0.2 s on
    one core) with ``q_max = 1, λ = 100, k0 = 0.005, τ = 1`` on ``b ∈ [0, 4]``, seeds 0–3: the learned
    mean length is within 0.6% of ``L*(b)`` over the whole range and the expected quality within 0.35%
    of the analytic frontier (the residual is the bias of the degree-6 features plus the remaining
    spread ``σ ≈ 0.05``); tests/test_effort.py checks 2% and 1%. Reward noise does not move the optimum
    but hides the small reward differences near it: with ``noise=0.05`` the error is about 20% at
    2000 steps, so raise ``group`` and ``steps`` with the noise. Meant for ranges where ``L*(b) > 0``
    (``q_max > λ k0``): where ``L* = 0`` the policy can only drive its lengths towards 0.

    Examples
    --------
    >>> import numpy as np
    >>> from refimpl import optimal_length, train_effort_policy
    >>> problem = dict(q_max=1.0, lam=100.0, k0=0.005, b_min=0.0, tau=1.0)
    >>> policy = train_effort_policy(**problem, b_max=4.0, rng=0)
    >>> b = np.array([0.5, 2.0, 3.5])
    >>> bool(np.all(np.abs(policy.mean_length(b) / optimal_length(b, **problem) - 1) < 0.05))
    True
    """
    q_max_, lam_ = _quality_parameters(q_max, lam)
    k0_, b_min_, tau_ = _penalty_parameters(k0, b_min, tau)
    if k0_ == 0.0:
        raise invalid("k0", "be > 0 to train a policy (k0 = 0 has no optimum)", k0, "Pass k0 > 0.")
    b_max_ = as_real(b_max, name="b_max", meaning="highest training effort")
    if b_max_ <= b_min_:
        raise invalid("b_max", f"be > b_min={b_min_!r}", b_max, "Pass b_max > b_min.")
    generator = _as_generator(rng)
    steps_ = as_int(steps, name="steps", minimum=1, meaning="optimiser steps")
    batch_ = as_int(batch, name="batch", minimum=1, meaning="efforts per step")
    group_ = as_int(group, name="group", minimum=2, meaning="lengths per effort; RLOO needs >= 2")
    degree_ = as_int(degree, name="degree", minimum=0, meaning="Chebyshev degree")
    lr = as_real(learning_rate, name="learning_rate", low=0.0, low_open=True)
    noise_ = as_real(noise, name="noise", low=0.0, meaning="reward noise standard deviation")
    spread0 = as_real(initial_spread, name="initial_spread", low=0.0, low_open=True)

    n_feat = degree_ + 1
    params = np.zeros(2 * n_feat)
    params[0] = math.log(lam_)
    params[n_feat] = math.log(spread0)
    m1 = np.zeros_like(params)
    m2 = np.zeros_like(params)
    history = np.empty(steps_)
    strata = np.arange(batch_, dtype=np.float64)
    with np.errstate(over="ignore", under="ignore"):
        for t in range(1, steps_ + 1):
            b = b_min_ + (b_max_ - b_min_) * (strata + generator.uniform(size=batch_)) / batch_
            phi = _chebyshev_features(b, b_min_, b_max_, degree_)
            mu = phi @ params[:n_feat]
            sigma = np.exp(phi @ params[n_feat:])
            eps = generator.standard_normal((batch_, group_))
            ell = np.exp(np.minimum(mu[:, None] + sigma[:, None] * eps, _MAX_LOG_LENGTH))
            k = k0_ * np.exp(-(b - b_min_) / tau_)
            reward = -q_max_ * np.expm1(-ell / lam_) - k[:, None] * ell
            if noise_ > 0.0:
                reward = reward + noise_ * generator.standard_normal((batch_, group_))
            history[t - 1] = reward.mean()
            adv = (reward - reward.mean(axis=1, keepdims=True)) * (group_ / (group_ - 1))
            grad_mu = (adv * eps).mean(axis=1) / sigma  # d ln p / d mu = eps / sigma
            grad_log_sigma = (adv * (eps**2 - 1.0)).mean(axis=1)  # d ln p / d ln sigma
            grad = np.concatenate([phi.T @ grad_mu, phi.T @ grad_log_sigma]) / batch_
            params, m1, m2 = _adam_step(params, grad, m1, m2, t=t, steps=steps_, lr=lr)
    if not np.all(np.isfinite(params)):  # pragma: no cover - guarded by the clipping above
        raise RuntimeError("training diverged; lower learning_rate")
    return EffortPolicy(
        mean_coef=_out(params[:n_feat].copy()),
        log_spread_coef=_out(params[n_feat:].copy()),
        b_min=b_min_,
        b_max=b_max_,
        q_max=q_max_,
        lam=lam_,
        k0=k0_,
        tau=tau_,
        reward_history=_out(history),
    )


# ---------------------------------------------------------------------------------------------
# one checkpoint on a mix: the policy conditioned on the effort and on the problem
# ---------------------------------------------------------------------------------------------


def frontier_quality(
    cost: ArrayLike,
    *,
    q_max: float | ArrayLike,
    lam: float | ArrayLike,
    weights: ArrayLike | Sequence[Fraction],
) -> NDArray[np.float64]:
    r"""The adaptive frontier's mean quality at a given mean cost: :math:`A(C)`.

    The price :math:`k` with :math:`\sum_d w_d\, \ell^*_d(k) = C` is found (the mean optimal
    length is continuous and decreasing in :math:`k` where positive), and the frontier's quality
    there returned:

    .. math::

        A(C) = \sum_d w_d\, Q_d(\ell^*_d(k)), \qquad \sum_d w_d\, \ell^*_d(k) = C.

    No allocation of mean cost ``C`` has a higher mean quality (EM3), so ``A(C) − quality`` is how
    far any strategy's point ``(C, quality)`` lies below the frontier.

    Parameters
    ----------
    cost : array_like of float, any shape
        Mean lengths, finite and ``>= 0``.
    q_max, lam, weights
        The mix, as in :func:`effort_frontier` (``weights`` required).

    Returns
    -------
    ndarray of float64
        ``A(C)``, shape of ``cost``; 0 at ``C = 0``.

    Raises
    ------
    TypeError, ValueError
        As :func:`budget_frontier`.

    Notes
    -----
    With :math:`u = -\ln k`, :math:`C(u) = \sum_d w_d \lambda_d \max(0, \ln(q_d/\lambda_d) + u)` is
    piecewise linear and increasing once positive; :math:`u` is found by bisection between the
    first class's threshold and :math:`(C - \sum_d w_d\lambda_d\ln(q_d/\lambda_d))/\sum_d w_d\lambda_d`
    (where every class spends), to float64 resolution. The quality is then
    :math:`\sum_{d:\ell^*_d > 0} w_d (q_d - \lambda_d e^{-u})`.

    Examples
    --------
    >>> from refimpl import frontier_quality
    >>> frontier_quality([0.0, 133.02585093], q_max=1.0, lam=[20.0, 200.0], weights=[0.5, 0.5])
    array([0.        , 0.79766631])
    """
    mix = _mix(q_max, lam, weights)
    if mix is None or mix.weights is None:
        raise invalid(
            "weights",
            "be given (the frontier's quality at a cost is a property of a mix)",
            weights,
            "Pass one weight per class, e.g. weights=[1.0] for one class.",
        )
    c = as_float_array(cost, name="cost")
    _require_nonnegative(c, name="cost", meaning="a mean length")
    w = np.asarray([float(x) for x in mix.weights])
    threshold = np.log(mix.lam / mix.q_max)  # class d spends iff u > threshold_d
    lo = np.full(c.shape, float(threshold.min()))
    total = float(np.dot(w, mix.lam))
    hi = np.maximum((c + float(np.dot(w, mix.lam * threshold))) / total, float(threshold.max()))

    def mean_cost(u: NDArray[np.float64]) -> Any:
        return np.maximum(u[..., None] - threshold, 0.0) * mix.lam @ w

    for _ in range(1100):
        mid = 0.5 * (lo + hi)
        if np.all((mid == lo) | (mid == hi)):
            break
        short = mean_cost(mid) < c
        lo = np.where(short, mid, lo)
        hi = np.where(short, hi, mid)
    u = hi
    spends = u[..., None] > threshold
    with np.errstate(under="ignore"):
        quality = np.where(
            spends, np.maximum(mix.q_max - mix.lam * np.exp(-u[..., None]), 0.0), 0.0
        )
    return _out(np.where(c > 0.0, quality @ w, 0.0))


def _class_features(
    b: NDArray[np.float64],
    log_lam: NDArray[np.float64],
    b_range: tuple[float, float],
    lam_range: tuple[float, float],
    degrees: tuple[int, int],
) -> Any:
    """Tensor-product Chebyshev features of the effort and of ``ln λ``: shape ``(*b.shape, F)``."""
    zb = 2.0 * (b - b_range[0]) / (b_range[1] - b_range[0]) - 1.0
    width = lam_range[1] - lam_range[0]
    zl = 2.0 * (log_lam - lam_range[0]) / width - 1.0 if width > 0 else np.zeros_like(log_lam)
    fb = np.polynomial.chebyshev.chebvander(zb.ravel(), degrees[0])
    fl = np.polynomial.chebyshev.chebvander(zl.ravel(), degrees[1])
    phi = (fb[:, :, None] * fl[:, None, :]).reshape(fb.shape[0], -1)
    return phi.reshape((*b.shape, phi.shape[-1]))


class ConditionedEffortPolicy(NamedTuple):
    r"""A length policy conditioned on the effort ``b`` and on the problem's difficulty ``λ``.

    :math:`\ln \ell \sim \mathcal N(\mu(b, \lambda), \sigma(b, \lambda)^2)` with :math:`\mu` and
    :math:`\ln\sigma` linear in tensor-product Chebyshev features
    :math:`T_i(z_b)\,T_j(z_\lambda)`, :math:`z_b` the effort and :math:`z_\lambda` the log of the
    problem's quality length scale, each mapped onto ``[−1, 1]`` over the training ranges. Made by
    :func:`train_conditioned_policy`, which records the training mix.

    Attributes
    ----------
    mean_coef, log_spread_coef : ndarray of float64, shape ((degree + 1)·(feature_degree + 1),)
        Coefficients of :math:`\mu` and :math:`\ln\sigma`.
    b_min, b_max : float
        The trained effort range.
    degrees : tuple of int
        Chebyshev degrees in ``b`` and in ``ln λ``.
    q_max : float
        Saturation quality of every class.
    lam, weights : ndarray of float64, shape (D,)
        The training mix (:math:`\lambda_d`, :math:`w_d`).
    k0, tau : float
        The penalty ``k(b) = k0 e^{−(b − b_min)/τ}``.
    reward_history : ndarray of float64, shape (steps,)
        Mean shaped reward of each training batch (Bernoulli outcomes included).

    Notes
    -----
    :meth:`class_lengths` gives ``E[ℓ | b, d]`` per class, :meth:`evaluate` the policy's point on
    the mix, ``(Σ_d w_d E[ℓ | b, d], Σ_d w_d E[Q_d(ℓ) | b, d])``, and :meth:`regret` the gap of its
    mean shaped reward to the optimum's, which bounds how far the point lies below the adaptive
    frontier (EM3 and the frontier's concavity: see :meth:`regret`).
    """

    mean_coef: NDArray[np.float64]
    log_spread_coef: NDArray[np.float64]
    b_min: float
    b_max: float
    degrees: tuple[int, int]
    q_max: float
    lam: NDArray[np.float64]
    weights: NDArray[np.float64]
    k0: float
    tau: float
    reward_history: NDArray[np.float64]

    def _params(self, b: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        arr = as_float_array(b, name="b")
        outside = (arr < self.b_min) | (arr > self.b_max)
        if np.any(outside):
            first = int(np.flatnonzero(outside.ravel())[0])
            raise invalid(
                "b",
                f"lie in the trained effort range [{self.b_min!r}, {self.b_max!r}]",
                arr,
                f"Entry {first} is {float(arr.ravel()[first])!r}; evaluate inside the range or "
                "train with a wider b_max.",
            )
        log_lam = np.log(self.lam)
        bb = np.broadcast_to(arr[..., None], (*arr.shape, self.lam.size))
        ll = np.broadcast_to(log_lam, bb.shape)
        phi = _class_features(
            bb,
            ll,
            (self.b_min, self.b_max),
            (float(log_lam.min()), float(log_lam.max())),
            self.degrees,
        )
        with np.errstate(over="ignore", under="ignore"):
            return _out(phi @ self.mean_coef), _out(np.exp(phi @ self.log_spread_coef))

    def class_lengths(self, b: ArrayLike) -> NDArray[np.float64]:
        r"""``E[ℓ | b, d] = e^{μ + σ²/2}`` for every class, shape ``(*b.shape, D)``."""
        mu, sigma = self._params(b)
        with np.errstate(over="ignore"):
            return _out(np.exp(mu + 0.5 * sigma**2))

    def _class_quality(self, b: ArrayLike) -> NDArray[np.float64]:
        mu, sigma = self._params(b)
        log_ell = np.minimum(mu[..., None] + sigma[..., None] * _HERMITE_NODES, _MAX_LOG_LENGTH)
        with np.errstate(under="ignore"):
            e = np.exp(-np.exp(log_ell) / self.lam[..., None])
        return _out(self.q_max * (1.0 - e @ _HERMITE_WEIGHTS))

    def evaluate(self, b: ArrayLike) -> EffortFrontier:
        r"""The policy's point on its training mix at each effort (64-point Gauss–Hermite in ``ln ℓ``)."""
        return EffortFrontier(
            cost=_out(self.class_lengths(b) @ self.weights),
            quality=_out(self._class_quality(b) @ self.weights),
        )

    def regret(self, b: ArrayLike) -> NDArray[np.float64]:
        r"""Mean shaped reward lost to the adaptive optimum, :math:`R^*(b) - R_\pi(b) \ge 0`.

        With :math:`R = \sum_d w_d E[Q_d(\ell) - k(b)\ell]`. It bounds the vertical distance of the
        policy's point :math:`(C_\pi, A_\pi)` to the adaptive frontier :math:`A`:

        .. math::

            0 \le A(C_\pi) - A_\pi \le R^*(b) - R_\pi(b),

        the left side by dominance (EM3, applied to the mix refined by the policy's random draws),
        the right side because the concave frontier lies below its tangent of slope ``k(b)`` at
        :math:`C(b)` (EM4).
        """
        arr = as_float_array(b, name="b")
        points = self.evaluate(arr)
        best = effort_frontier(
            arr,
            q_max=self.q_max,
            lam=self.lam,
            k0=self.k0,
            b_min=self.b_min,
            tau=self.tau,
            weights=self.weights,
        )
        k = effort_penalty(arr, k0=self.k0, b_min=self.b_min, tau=self.tau)
        return _out((best.quality - k * best.cost) - (points.quality - k * points.cost))


def train_conditioned_policy(
    *,
    q_max: float,
    lam: ArrayLike,
    weights: ArrayLike,
    k0: float,
    b_min: float,
    tau: float,
    b_max: float,
    rng: np.random.Generator | int,
    steps: int = 4000,
    batch: int = 64,
    group: int = 16,
    degree: int = 4,
    feature_degree: int = 2,
    learning_rate: float = 0.005,
    success: str = "bernoulli",
    initial_spread: float = 0.5,
) -> ConditionedEffortPolicy:
    r"""Train one policy on a mix of problems, conditioned on the effort and the problem's ``λ``.

    The extension of :func:`train_effort_policy` to a mix: each step draws ``batch`` problems, their
    classes ``d`` from ``weights`` and their efforts stratified over ``[b_min, b_max]``; samples
    ``group`` lengths per problem from :class:`ConditionedEffortPolicy`; scores each with

    .. math::

        r = s - k(b)\,\ell, \qquad s \sim \mathrm{Bernoulli}\big(Q_d(\ell)\big),\quad
        Q_d(\ell) = q_\text{max}(1 - e^{-\ell/\lambda_d})

    (``success="bernoulli"``: a sampled success, as a verifier gives; ``"expected"``: :math:`s =
    Q_d(\ell)`, no outcome noise), and ascends the REINFORCE estimate with the leave-one-out
    baseline of the problem's group, with Adam and a step size decayed linearly to 0, as
    :func:`train_effort_policy` does.

    Parameters
    ----------
    q_max : float
        Saturation quality of every class, ``0 < q_max <= 1`` (a success probability).
    lam : array_like of float, shape (D,)
        Quality length scale of each class, ``> 0`` (the problem's feature the policy sees).
    weights : array_like of float, shape (D,)
        Share of each class, a probability vector.
    k0, b_min, tau : float
        The penalty, ``k0 > 0``, ``tau > 0``.
    b_max : float
        Highest training effort, ``> b_min``.
    rng : numpy.random.Generator or int
        The only source of randomness; the same seed gives the same policy bit for bit.
    steps, batch, group : int
        Optimiser steps (``>= 1``), problems per step (``>= 1``), lengths per problem (``>= 2``).
    degree, feature_degree : int
        Chebyshev degrees in ``b`` and in ``ln λ`` (``>= 0``).
    learning_rate : float
        Initial Adam step size, ``> 0``.
    success : {"bernoulli", "expected"}
        How the quality enters the reward.
    initial_spread : float
        Initial ``σ`` of ``ln ℓ``, ``> 0``; the initial median length of class ``d`` is ``λ_d``.

    Returns
    -------
    ConditionedEffortPolicy

    Raises
    ------
    TypeError
        If ``rng`` or another argument has the wrong type.
    ValueError
        If a parameter is outside its domain, or ``lam`` and ``weights`` differ in length.

    Notes
    -----
    The optimum it approaches is the adaptive frontier of :func:`effort_frontier` on the same mix:
    :math:`\ell^*_d(b)`, one length per class and effort. How close it gets is measured by
    :meth:`ConditionedEffortPolicy.regret`, which bounds the distance of its points to the
    frontier. Meant for mixes and ranges where every :math:`\ell^*_d(b) > 0`
    (:math:`\lambda_d k_0 < q_\text{max}`).

    Measured on ``λ ∈ {25, 100, 400}`` with weights ``(0.4, 0.4, 0.2)``, ``q_max = 1``,
    ``k0 = 0.002``, ``τ = 1``, ``b ∈ [0, 4]``, Bernoulli successes, at the defaults (about 1 s on
    one core), seeds 0–3: the regret is at most 0.0027 (in quality units), the points lie at most
    8.5% of the adaptive-over-fixed gap below the adaptive frontier, and at least 0.02 above the
    fixed-budget curve (whose gap to the frontier is 0.026–0.054 there). Outcome noise is what
    limits it: with ``success="expected"`` the regret falls to 3e-4. Step size: the Bernoulli
    outcomes make the gradient noisy, and at ``learning_rate=0.05`` (the default of
    :func:`train_effort_policy`) the spread and the lengths of the rare hard class diverge.

    Examples
    --------
    >>> import numpy as np
    >>> from refimpl import train_conditioned_policy
    >>> policy = train_conditioned_policy(
    ...     q_max=1.0, lam=[25.0, 400.0], weights=[0.5, 0.5], k0=0.002, b_min=0.0, tau=1.0,
    ...     b_max=3.0, rng=0, steps=200, success="expected")
    >>> policy.class_lengths([0.0, 3.0]).shape
    (2, 2)
    >>> bool(np.all(policy.regret(np.linspace(0.0, 3.0, 7)) >= 0.0))
    True
    """
    if not isinstance(q_max, numbers.Real) or isinstance(q_max, bool):
        raise wrong_type("q_max", "a real number", q_max, "Pass q_max as a float.")
    q_max_ = as_real(q_max, name="q_max", low=0.0, low_open=True, high=1.0, meaning="a probability")
    mix = _mix(q_max_, lam, weights)
    if mix is None or mix.weights is None:  # pragma: no cover - weights is required
        raise invalid("weights", "be given", weights, "Pass one weight per class.")
    k0_, b_min_, tau_ = _penalty_parameters(k0, b_min, tau)
    if k0_ == 0.0:
        raise invalid("k0", "be > 0 to train a policy (k0 = 0 has no optimum)", k0, "Pass k0 > 0.")
    b_max_ = as_real(b_max, name="b_max", meaning="highest training effort")
    if b_max_ <= b_min_:
        raise invalid("b_max", f"be > b_min={b_min_!r}", b_max, "Pass b_max > b_min.")
    generator = _as_generator(rng)
    steps_ = as_int(steps, name="steps", minimum=1, meaning="optimiser steps")
    batch_ = as_int(batch, name="batch", minimum=1, meaning="problems per step")
    group_ = as_int(group, name="group", minimum=2, meaning="lengths per problem; RLOO needs >= 2")
    degree_ = as_int(degree, name="degree", minimum=0, meaning="Chebyshev degree in b")
    fdeg = as_int(feature_degree, name="feature_degree", minimum=0, meaning="degree in ln λ")
    lr = as_real(learning_rate, name="learning_rate", low=0.0, low_open=True)
    spread0 = as_real(initial_spread, name="initial_spread", low=0.0, low_open=True)
    if not isinstance(success, str) or success not in ("bernoulli", "expected"):
        raise invalid(
            "success",
            'be "bernoulli" or "expected"',
            success,
            'Pass success="bernoulli" (sampled outcomes) or "expected".',
        )
    w = np.asarray([float(x) for x in mix.weights])
    log_lam = np.log(mix.lam)
    lam_range = (float(log_lam.min()), float(log_lam.max()))
    degrees = (degree_, fdeg)
    n_feat = (degree_ + 1) * (fdeg + 1)
    params = np.zeros(2 * n_feat)
    # μ = ln λ at the start: ln λ = centre + half-width·z_λ, i.e. T_0 T_0 and T_0 T_1 coefficients
    params[0] = 0.5 * (lam_range[0] + lam_range[1])
    if fdeg >= 1 and lam_range[1] > lam_range[0]:
        params[1] = 0.5 * (lam_range[1] - lam_range[0])
    params[n_feat] = math.log(spread0)
    m1 = np.zeros_like(params)
    m2 = np.zeros_like(params)
    history = np.empty(steps_)
    strata = np.arange(batch_, dtype=np.float64)
    cumulative = np.cumsum(w)
    bernoulli = success == "bernoulli"
    with np.errstate(over="ignore", under="ignore"):
        for t in range(1, steps_ + 1):
            b = b_min_ + (b_max_ - b_min_) * (strata + generator.uniform(size=batch_)) / batch_
            cls = np.minimum(
                np.searchsorted(cumulative, generator.uniform(size=batch_)), w.size - 1
            )
            lam_b = mix.lam[cls]
            phi = _class_features(b, log_lam[cls], (b_min_, b_max_), lam_range, degrees)
            mu = phi @ params[:n_feat]
            sigma = np.exp(phi @ params[n_feat:])
            eps = generator.standard_normal((batch_, group_))
            ell = np.exp(np.minimum(mu[:, None] + sigma[:, None] * eps, _MAX_LOG_LENGTH))
            quality = -q_max_ * np.expm1(-ell / lam_b[:, None])
            if bernoulli:
                quality = (generator.uniform(size=(batch_, group_)) < quality).astype(np.float64)
            k = k0_ * np.exp(-(b - b_min_) / tau_)
            reward = quality - k[:, None] * ell
            history[t - 1] = reward.mean()
            adv = (reward - reward.mean(axis=1, keepdims=True)) * (group_ / (group_ - 1))
            grad_mu = (adv * eps).mean(axis=1) / sigma
            grad_log_sigma = (adv * (eps**2 - 1.0)).mean(axis=1)
            grad = np.concatenate([phi.T @ grad_mu, phi.T @ grad_log_sigma]) / batch_
            params, m1, m2 = _adam_step(params, grad, m1, m2, t=t, steps=steps_, lr=lr)
    if not np.all(np.isfinite(params)):  # pragma: no cover - guarded by the clipping above
        raise RuntimeError("training diverged; lower learning_rate")
    return ConditionedEffortPolicy(
        mean_coef=_out(params[:n_feat].copy()),
        log_spread_coef=_out(params[n_feat:].copy()),
        b_min=b_min_,
        b_max=b_max_,
        degrees=degrees,
        q_max=q_max_,
        lam=_out(mix.lam.copy()),
        weights=_out(w),
        k0=k0_,
        tau=tau_,
        reward_history=_out(history),
    )
