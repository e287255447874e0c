r"""Continuous asynchronous dispatch in the fluid model: staleness law and step time."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from refimpl._validation import as_float_array, as_int, invalid
from refimpl.dispatch import fluid_keep_probability
from refimpl.learning._common import FloatArray, _as_array


def fluid_staleness_pmf(lengths: ArrayLike, *, step_time: float, max_staleness: int) -> FloatArray:
    r"""Fluid-model staleness law given the length, :math:`P(s = m \mid \ell)`, :math:`m = 0..S`.

    From :func:`refimpl.fluid_keep_probability`: :math:`P(s \le m \mid \ell) =
    \mathrm{keep}_m(\ell) = \mathrm{clip}(m + 1 - \ell/\Delta, 0, 1)`, so
    :math:`P(s = m \mid \ell) = \mathrm{keep}_m(\ell) - \mathrm{keep}_{m-1}(\ell)`
    (conventions §async-dispatch).

    Parameters
    ----------
    lengths : array_like (M,)
        Lengths (decode times).
    step_time : float
        :math:`\Delta > 0`.
    max_staleness : int
        :math:`S`; must be at least :math:`\max\ell/\Delta` so that the rows sum to 1.

    Returns
    -------
    ndarray of float64, shape (M, S + 1)

    Examples
    --------
    >>> fluid_staleness_pmf([1.0, 2.0, 3.0], step_time=2.0, max_staleness=2).tolist()
    [[0.5, 0.5, 0.0], [0.0, 1.0, 0.0], [0.0, 0.5, 0.5]]
    """
    ell = as_float_array(lengths, name="lengths", ndim=1)
    s_max = as_int(max_staleness, name="max_staleness", minimum=0, meaning="largest staleness")
    cum = np.stack(
        [fluid_keep_probability(ell, step_time=step_time, eta=m) for m in range(s_max + 1)], axis=1
    )
    if np.any(cum[:, -1] < 1.0):
        need = math.ceil(float(ell.max()) / step_time)
        raise invalid(
            "max_staleness",
            "cover every staleness the longest length reaches (ceil(max ℓ / Δ))",
            s_max,
            f"Pass max_staleness >= {need}.",
        )
    out = np.diff(np.concatenate([np.zeros((ell.size, 1)), cum], axis=1), axis=1)
    return np.asarray(out, dtype=np.float64)


def fluid_step_time(pmf: Any, *, slots: int, batch: int, eta: int | None = None) -> Any:
    r"""Time between versions :math:`\Delta` of continuous dispatch for a length pmf (fluid model).

    Without a mask :math:`\Delta = B\,E[L]/N`; with a mask at :math:`\eta`, the fixed point
    :math:`\Delta = B\,E[L]/(N\,E_p[\mathrm{keep}_\Delta(L)])` of conventions §async-dispatch, with
    :math:`\mathrm{keep}` from :func:`refimpl.fluid_keep_probability` and the expectation a finite
    sum over the pmf (:func:`refimpl.fluid_steady_state` solves the same equation for a continuous
    law). The right side falls as :math:`\Delta` grows, so bisection finds the unique root.

    Examples
    --------
    >>> fluid_step_time([0.5, 0.5], slots=3, batch=2)
    1.0
    >>> round(fluid_step_time([0.5, 0.5], slots=3, batch=2, eta=0), 12)
    2.5

    A pmf of Fractions gives :math:`\Delta` exactly: :math:`\Delta\,E_p[\mathrm{keep}_\Delta(L)]`
    is piecewise linear in :math:`\Delta` (breakpoints :math:`\ell/\eta` and
    :math:`\ell/(\eta+1)`), so the root is rational:

    >>> from fractions import Fraction as F
    >>> fluid_step_time([F(1, 2), F(1, 2)], slots=3, batch=2, eta=0)
    Fraction(5, 2)
    """
    n_ = as_int(slots, name="slots", minimum=1, meaning="generation slots")
    b_ = as_int(batch, name="batch", minimum=1, meaning="samples per step")
    pe, exact = _as_array(pmf, name="pmf", ndim=1)
    if exact:
        return _exact_step_time(list(pe), n_, b_, eta)
    p = as_float_array(pmf, name="pmf", ndim=1)
    ell = np.arange(1, p.size + 1, dtype=np.float64)
    base = b_ * float(p @ ell) / n_
    if eta is None:
        return base

    def gap(delta: float) -> float:
        kept = float(p @ fluid_keep_probability(ell, step_time=delta, eta=eta))
        return base / max(kept, 1e-300) - delta

    lo, hi = base, base
    while gap(hi) > 0:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if gap(mid) > 0:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-14 * hi:
            break
    return hi


def _exact_keep(ell: int, delta: Fraction, eta: int) -> Fraction:
    r""":math:`\mathrm{clip}(\eta + 1 - \ell/\Delta, 0, 1)` in Fractions."""
    return min(max(eta + 1 - Fraction(ell) / delta, Fraction(0)), Fraction(1))


def _exact_step_time(p: list[Fraction], n: int, b: int, eta: int | None) -> Fraction:
    r"""The root of :math:`\Delta E_p[\mathrm{keep}_\Delta] = B E[L]/N`, exactly (piecewise linear)."""
    base = Fraction(b) * sum((x * (i + 1) for i, x in enumerate(p)), Fraction(0)) / n
    if eta is None:
        return base
    eta_ = as_int(eta, name="eta", minimum=0, meaning="staleness bound")
    support = [(i + 1, x) for i, x in enumerate(p) if x > 0]

    def f(delta: Fraction) -> Fraction:
        return delta * sum((x * _exact_keep(ell, delta, eta_) for ell, x in support), Fraction(0))

    points = sorted(
        {Fraction(ell, eta_ + 1) for ell, _ in support}
        | ({Fraction(ell, eta_) for ell, _ in support} if eta_ > 0 else set())
    )
    lo = Fraction(0)
    for hi in [*points, None]:
        if hi is not None and f(hi) < base:
            lo = hi
            continue
        # on (lo, hi) every length is in a fixed regime: keep = 1, linear, or 0
        mid = lo + 1 if hi is None else (lo + hi) / 2
        slope = Fraction(0)
        offset = Fraction(0)
        for ell, x in support:
            if ell <= eta_ * mid:
                slope += x
            elif ell < (eta_ + 1) * mid:
                slope += x * (eta_ + 1)
                offset += x * ell
        return (base + offset) / slope
    raise AssertionError("unreachable: f grows without bound")  # pragma: no cover
