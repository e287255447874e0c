"""The fluid model of continuous asynchronous dispatch with masking (conventions §async-dispatch).

``N`` generation slots relaunch as soon as they finish and the trainer takes ``B`` kept
completions per step. A rollout of length ``ℓ`` survives a staleness mask at ``η`` with
:func:`fluid_keep_probability`; :func:`fluid_steady_state` solves for the time between versions,
the kept fraction, the trained samples' mean staleness and their mean length. Claims ``FL*`` of
``proofs/fluid.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize

from refimpl._validation import (
    as_float_array,
    as_int,
    as_real,
    invalid,
)
from refimpl.dispatch._numerics import (
    _FLUID_BREAK_QUANTILES,
    FloatArray,
    _check_dist,
    _interval_integral,
)

__all__ = ["FluidSteadyState", "fluid_keep_probability", "fluid_steady_state"]


def fluid_keep_probability(lengths: ArrayLike, *, step_time: float, eta: int) -> FloatArray:
    r"""Probability that a rollout of length :math:`\ell` survives a staleness mask at :math:`\eta`.

    In the fluid model its staleness is :math:`\lfloor \ell/\Delta + U \rfloor`, :math:`U \sim
    U(0, 1)`, so

    .. math::

        \mathrm{keep}(\ell) = P(s \le \eta \mid \ell) = \operatorname{clip}(\eta + 1 - \ell/\Delta,
        0, 1).

    Parameters
    ----------
    lengths : array_like of float, any shape
        Lengths (decode times), ``>= 0``.
    step_time : float
        :math:`\Delta > 0`, the time between versions.
    eta : int
        Staleness bound :math:`\eta \ge 0` (``0`` admits only on-policy samples).

    Returns
    -------
    ndarray of float64, the shape of ``lengths``
        Keep probabilities in :math:`[0, 1]`, non-increasing in length.

    Raises
    ------
    TypeError
        If ``eta`` is not an integer or ``step_time`` is not a real number.
    ValueError
        If ``eta < 0``, ``step_time <= 0``, or ``lengths`` is negative or non-finite.

    Notes
    -----
    Rollouts longer than :math:`(\eta+1)\Delta` are never trained (claim :ref:`FL2 <fl2>`).

    Examples
    --------
    >>> import refimpl
    >>> refimpl.fluid_keep_probability([0.0, 50.0, 100.0, 150.0], step_time=100.0, eta=0)
    array([1. , 0.5, 0. , 0. ])
    """
    arr = as_float_array(lengths, name="lengths")
    if np.any(arr < 0):
        raise invalid("lengths", "be >= 0", arr, "Pass non-negative lengths (decode times).")
    delta = as_real(
        step_time,
        name="step_time",
        low=0.0,
        low_open=True,
        meaning="time between versions",
    )
    eta_ = _as_eta(eta)
    with np.errstate(over="ignore"):  # l/Δ past float64's range is far past η + 1: keep 0
        ramp = eta_ + 1.0 - arr / delta
    return np.asarray(np.clip(ramp, 0.0, 1.0), dtype=np.float64)


#: The largest staleness bound of :func:`fluid_steady_state` when the mask drops anything: float64
#: places the window's ends ηΔ and (η+1)Δ to about η·1e-16 of its width Δ (1e-10 at 2^20).
_MAX_FLUID_ETA = 2**20


def _as_eta(eta: Any) -> int:
    return as_int(eta, name="eta", minimum=0, meaning="staleness bound in versions")


class FluidSteadyState(NamedTuple):
    """Steady state of continuous dispatch in the fluid model (see :func:`fluid_steady_state`)."""

    step_time: float
    r""":math:`\Delta`, time between versions."""
    kept_fraction: float
    r""":math:`E_p[\mathrm{keep}_\Delta(L)]`, fraction of finished rollouts trained."""
    mean_staleness: float
    """Mean staleness of the *trained* samples."""
    trained_mean_length: float
    r""":math:`E_{q_\eta}[L]`, mean length of the trained samples."""


def fluid_steady_state(
    dist: Any, *, slots: int, batch: int, eta: int | None = None
) -> FluidSteadyState:
    r"""Steady state of continuous asynchronous dispatch with an optional staleness mask (fluid model).

    ``slots`` = :math:`N` generation slots relaunch as soon as they finish (one time unit per token);
    the trainer takes :math:`B` kept completions per step. Without a mask
    :math:`\Delta = B\,E[L]/N`, nothing is dropped, :math:`E[s] = N/B` and the trained law is
    :math:`p`. With a mask at :math:`\eta`, :math:`\Delta` solves

    .. math::

        \Delta = \frac{B\,E[L]}{N\,E_p[\mathrm{keep}_\Delta(L)]},\qquad
        E_p[\mathrm{keep}_\Delta(L)] = \frac{1}{\Delta}\int_{\eta\Delta}^{(\eta+1)\Delta} F(x)\,dx,

    (unique: the right side falls as :math:`\Delta` grows), the trained law is
    :math:`q_\eta \propto p\,\mathrm{keep}_\Delta`, and the trained samples' staleness has mean
    :math:`\bigl(\frac1\Delta\int_0^{\eta\Delta} S - \frac{\eta}{\Delta}\int_{\eta\Delta}^{(\eta+1)
    \Delta} S\bigr) / E_p[\mathrm{keep}]`.

    Parameters
    ----------
    dist : frozen scipy.stats distribution
        Length (decode time) law on :math:`[0, \infty)` with a finite positive mean.
    slots : int
        :math:`N \ge 1` generation slots.
    batch : int
        :math:`B \ge 1` trained samples per step.
    eta : int, optional
        Staleness bound :math:`\eta \ge 0`; ``None`` for no mask.

    Returns
    -------
    FluidSteadyState
        ``(step_time, kept_fraction, mean_staleness, trained_mean_length)``.

    Raises
    ------
    TypeError
        If ``dist`` is not a frozen distribution or ``slots``, ``batch``, ``eta`` are not integers.
    ValueError
        If ``slots < 1``, ``batch < 1``, ``eta < 0`` or the law has no finite positive mean; if
        ``eta > 2^20`` while the law has mass past ``eta`` unmasked step times (float64 places the
        window :math:`[\eta\Delta, (\eta+1)\Delta]` to about :math:`\eta\cdot 10^{-16}` of its
        width). A bound past all the law's mass drops nothing: the unmasked state is returned.
    ArithmeticError
        If a quadrature does not converge.

    Notes
    -----
    The fixed point is found by Brent's method on a bracket :math:`[B E[L]/N, 2^j B E[L]/N]`.
    The fluid model ignores the discreteness of slots and overstates the length bias of the drop by
    a relative error that falls as :math:`1/N`. Measured against the simulator for lognormal(6, 1)
    lengths at ``N/B = 2``, ``eta = 0`` (:ref:`the table of the length-bias page <fluid-error>`,
    ``tools/fluid_error_table.py``): the trained mean is predicted 12% low at ``N = 8``, 3% at
    ``N = 32``, under 1% from ``N = 128``; at ``N = 128``, ``B = 256``, ``eta = 0`` it predicts
    about 58% of :math:`E[L]`, which a simulation confirms within 0.4%. Claims :ref:`FL1 <fl1>`, :ref:`FL2 <fl2>`.

    Examples
    --------
    >>> import scipy.stats
    >>> import refimpl
    >>> refimpl.fluid_steady_state(scipy.stats.expon(scale=100.0), slots=8, batch=4)
    FluidSteadyState(step_time=50.0, kept_fraction=1.0, mean_staleness=2.0, trained_mean_length=100.0)
    >>> st = refimpl.fluid_steady_state(scipy.stats.expon(scale=100.0), slots=8, batch=4, eta=0)
    >>> round(st.trained_mean_length / 100.0, 4)
    0.3265
    """
    mean = _check_dist(dist)
    n_slots = as_int(slots, name="slots", minimum=1, meaning="number of generation slots")
    b = as_int(batch, name="batch", minimum=1, meaning="trained samples per step")
    base = b * mean / n_slots
    if eta is None:
        return FluidSteadyState(base, 1.0, n_slots / b, mean)
    eta_ = _as_eta(eta)
    if float(dist.sf(eta_ * base)) == 0.0:  # no length reaches ηΔ: the mask drops nothing
        return FluidSteadyState(base, 1.0, n_slots / b, mean)
    if eta_ > _MAX_FLUID_ETA:
        raise invalid(
            "eta",
            f"be <= {_MAX_FLUID_ETA} unless the law has no mass past eta * step_time (the "
            "window [ηΔ, (η+1)Δ] is resolved to η·1e-16 of its width in float64)",
            eta,
            "Pass a smaller eta; a law with mass that far out is better served by the simulator.",
        )

    # Quantiles of the law split every window, so that its mass is resolved however narrow it is.
    breaks = np.asarray(dist.ppf(_FLUID_BREAK_QUANTILES), dtype=np.float64)

    def window(fn: Callable[[FloatArray], FloatArray], low: float, high: float, what: str) -> float:
        return _interval_integral(fn, low, high, what=what, breaks=breaks) if high > low else 0.0

    def cdf(x: FloatArray) -> FloatArray:
        return np.asarray(dist.cdf(x), dtype=np.float64)

    def keep_mean(delta: float) -> float:
        return window(cdf, eta_ * delta, (eta_ + 1) * delta, "E[keep]") / delta

    def gap(delta: float) -> float:
        return base / max(keep_mean(delta), 1e-300) - delta

    delta = base  # when nothing is dropped at the unmasked step time (to rounding)
    high = base * 2.0
    while gap(high) > 0:
        high *= 2.0
        if high > base * 2.0**60:  # pragma: no cover - keep -> 1 as Δ grows
            raise ArithmeticError("could not bracket the fluid fixed point")
    if gap(base) > 0:
        delta = float(optimize.brentq(gap, base, high, xtol=1e-12 * base, rtol=1e-14))
    kept = min(keep_mean(delta), 1.0)
    d_lo, d_hi = eta_ * delta, (eta_ + 1) * delta

    def sf(x: FloatArray) -> FloatArray:
        return np.asarray(dist.sf(x), dtype=np.float64)

    def mean_density(x: FloatArray) -> FloatArray:
        return np.asarray(x * dist.pdf(x), dtype=np.float64)

    def ramp_density(x: FloatArray) -> FloatArray:
        return np.asarray(x * dist.pdf(x) * (d_hi - x) / delta, dtype=np.float64)

    low_part = window(sf, 0.0, d_lo, "∫S") / delta
    band = window(sf, d_lo, d_hi, "∫S") / delta
    mean_s = (low_part - eta_ * band) / kept
    support_low = max(float(dist.support()[0]), 0.0)
    below = window(mean_density, support_low, d_lo, "E[L; L <= ηΔ]")
    ramp = window(ramp_density, max(d_lo, support_low), d_hi, "E[L keep(L)]")
    trained_mean = (below + ramp) / kept
    return FluidSteadyState(delta, kept, mean_s, trained_mean)
