"""Shared checks and quadrature of the dispatch formulas (private).

The checks of ``n``, ``k`` and a frozen law, and the integrals over a length law or a Beta weight
that :mod:`refimpl.dispatch.order_statistics`, :mod:`refimpl.dispatch.length_bias` and
:mod:`refimpl.dispatch.fluid` share: each integral is split at quantiles of the law, where its
weight changes, so that adaptive quadrature sees every piece of mass.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import integrate, special, stats

from refimpl._validation import (
    as_int,
    invalid,
    require_frozen_distribution,
)
from refimpl.dispatch._records import Real as Real

__all__: list[str] = []

FloatArray = NDArray[np.float64]


def _check_n_k(n: Any, k: Any) -> tuple[int, int]:
    """``n >= 1`` rollouts launched, ``1 <= k <= n`` trained."""
    n_ = as_int(n, name="n", minimum=1, meaning="number of rollouts launched at once")
    k_ = as_int(k, name="k", minimum=1, meaning="batch size: the first k to finish are trained")
    if k_ > n_:
        raise invalid(
            "k",
            f"be <= n={n_} (the batch is the first k of the n rollouts launched)",
            k,
            "Pass k <= n, or launch more rollouts.",
        )
    return n_, k_


#: The largest ``n`` of exact (Fraction) evaluation: it sums O(n) binomial terms per support point
#: whose numerators and denominators have O(n) digits, a cost growing like n^2.5 (n = 2000 takes
#: about half a second for four points; n = 10^5 would take hours). Float evaluation has no such
#: cost.
MAX_EXACT_N = 2000

#: The largest ``n`` of float evaluation: scipy's binomial and beta functions take ``n`` as a
#: float64 (or an int64), and past 2^53 a float64 is no longer the integer given.
MAX_FLOAT_N = 2**53


#: The largest ``n`` of the quadratures over a continuous law (:func:`selected_mean`): the
#: first-k-of-n weight has a width of about 1/n in probability, which the quantile-split quadrature
#: resolves to 3e-11 relative at n = 10^7 (exponential lengths, k = 2) but only to 4e-9 at 10^8,
#: where a log-normal law no longer converges.
MAX_QUADRATURE_N = 10**7


def _check_quadrature_n(n: int) -> None:
    if n > MAX_QUADRATURE_N:
        raise invalid(
            "n",
            f"be <= {MAX_QUADRATURE_N} for a continuous law (the first-k-of-n weight is about "
            "1/n wide, too narrow for float64 quadrature beyond)",
            n,
            "Pass a smaller n, or the law as a pmf over lengths (the float evaluation handles "
            "any n up to 2^53).",
        )


def _check_exact_n(n: int) -> None:
    if n > MAX_EXACT_N:
        raise invalid(
            "n",
            f"be <= {MAX_EXACT_N} with an exact (Fraction) pmf (exact terms grow to n digits: "
            "the cost grows like n^2.5)",
            n,
            "Pass the pmf as floats (the float evaluation handles any n up to 2^53), or a "
            "smaller n.",
        )


def _check_float_n(n: int) -> None:
    if n > MAX_FLOAT_N:
        raise invalid(
            "n",
            "be <= 2^53 (the float evaluation passes n to scipy's binomial and beta functions, "
            "whose float64 is not the integer given past 2^53)",
            n,
            "Pass a smaller n (no launch of more than 2^53 rollouts is meant).",
        )


def _mean(dist: Any) -> float:
    """``dist.mean()``, or ``∫ S`` when scipy would integrate a root-searched quantile function.

    scipy's generic mean of an ``rv_continuous`` subclass that defines no moments and no inverse
    integrates ``ppf`` over ``(0, 1)``: about 800 root searches. A law of lengths
    (support in ``[0, ∞)``) has ``E[L] = ∫_0^∞ S``, which needs ``sf`` only.
    """
    generator = getattr(dist, "dist", None)
    if not isinstance(generator, stats.rv_continuous) or float(dist.support()[0]) < 0.0:
        return float(dist.mean())  # not a continuous law of lengths: scipy's (the caller refuses)
    cls = type(generator)
    own = any(
        getattr(cls, m, None) is not getattr(stats.rv_continuous, m, None)
        for m in ("_stats", "_munp", "_ppf", "_isf")
    )
    return float(dist.mean()) if own else _length_integral(lambda s: s, dist, what="E[L]")


def _check_dist(dist: Any, *, name: str = "dist", positive: bool = True) -> float:
    """A frozen scipy.stats distribution with a finite (positive) mean; returns the mean."""
    require_frozen_distribution(dist, name=name)
    mean = _mean(dist)
    if not math.isfinite(mean):
        raise invalid(
            name,
            "have a finite mean (lengths with an infinite mean have no length bias ratio)",
            dist,
            "Pass a distribution with a finite mean, e.g. a lognormal or a gamma law.",
        )
    if positive:
        low = float(dist.support()[0]) if callable(getattr(dist, "support", None)) else 0.0
        if low < 0.0 or mean <= 0.0:
            raise invalid(
                name,
                "be supported on [0, inf) with a positive mean (it models lengths)",
                dist,
                f"Its support starts at {low!r} and its mean is {mean!r}; pass a law of lengths.",
            )
    return mean


def _quad(
    fn: Callable[[float], float],
    low: float,
    high: float,
    *,
    points: Sequence[float] | None = None,
    what: str,
    rtol: float = 1e-9,
) -> float:
    """``scipy.integrate.quad`` that refuses to return an inaccurate value silently."""
    pts = sorted({p for p in (points or ()) if low < p < high})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", integrate.IntegrationWarning)
        value, err = integrate.quad(
            fn, low, high, points=pts or None, limit=500, epsabs=0.0, epsrel=1e-11
        )
    if not (math.isfinite(value) and err <= max(rtol * abs(value), 1e-300)):
        raise ArithmeticError(
            f"numerical integration of {what} did not converge (value {value!r}, error estimate "
            f"{err!r}); the distribution may be too heavy-tailed for float64 quadrature."
        )
    return float(value)


_GL16 = np.polynomial.legendre.leggauss(16)
_GL32 = np.polynomial.legendre.leggauss(32)


def _survival_integral(
    weight: Callable[[FloatArray], FloatArray],
    dist: Any,
    *,
    points: Sequence[float],
    what: str,
) -> float:
    """``∫_0^1 dist.isf(s) · weight(s) ds`` with vectorised ``isf`` calls.

    Composite Gauss–Legendre (16 and 32 nodes per panel) on panels log-uniform in ``s`` from
    ``1e-18`` and in ``1 - s`` from ``1e-15`` (4 per decade), uniform (128), and split at the
    break ``points``; accepted when the two orders
    agree to ``1e-11`` relative, otherwise (a singular tail, a kink) adaptive ``quad``.
    """
    edges = np.unique(
        np.concatenate(
            (
                [0.0],
                np.geomspace(1e-18, 1.0, 73),
                1.0 - np.geomspace(1e-15, 0.5, 62),
                np.linspace(0.0, 1.0, 129),
                [p for p in points if 0 < p < 1],
            )
        )
    )
    lo, hi = edges[:-1, None], edges[1:, None]

    def rule(nodes_weights: tuple[FloatArray, FloatArray]) -> float:
        x, w = nodes_weights
        s = lo + (hi - lo) * (x[None, :] + 1.0) / 2.0
        with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            vals = np.asarray(dist.isf(s), dtype=np.float64) * weight(s)
        return float(np.sum(vals @ w * (hi[:, 0] - lo[:, 0]) / 2.0))

    coarse, fine = rule(_GL16), rule(_GL32)
    if math.isfinite(fine) and abs(fine - coarse) <= 1e-11 * abs(fine):
        return fine

    def scalar(s: float) -> float:
        with np.errstate(divide="ignore", under="ignore"):
            return float(dist.isf(s)) * float(weight(np.array([s]))[0])

    return _quad(scalar, 0.0, 1.0, points=points, what=what)


def _has_own_inverse(dist: Any) -> bool:
    """Whether the law computes its quantiles itself.

    A ``scipy.stats.rv_continuous`` subclass that defines neither ``_ppf`` nor ``_isf`` (a mixture
    written by a user, say) gets scipy's generic inverse: a root search on the cdf, one point at a
    time, thousands of times slower than a closed form.
    """
    cls = type(getattr(dist, "dist", None))
    base = stats.rv_continuous
    return any(getattr(cls, m, None) is not getattr(base, m) for m in ("_ppf", "_isf"))


_LENGTH_BREAK_QUANTILES = np.array(
    [
        1e-9,
        1e-6,
        1e-3,
        0.01,
        0.1,
        0.25,
        0.5,
        0.75,
        0.9,
        0.99,
        0.999,
        1 - 1e-6,
        1 - 1e-9,
        1 - 1e-12,
    ]
)


def _length_integral(
    survival: Callable[[FloatArray], FloatArray], dist: Any, *, what: str
) -> float:
    """``∫_0^∞ survival(dist.sf(x)) dx``: the mean of a law whose survival is a function of the
    length law's survival ``s = S(x)`` (``survival(1) = 1``), for laws without their own inverse.

    It needs only ``dist.sf`` and fourteen quantiles (break points of the panels, found once by
    the law's ``ppf``); past the last quantile, adaptive ``quad`` in ``t = top / x``. Accepted when
    the tail's error estimate is below ``1e-9`` of the whole, else ``ArithmeticError``.
    """
    low = max(float(dist.support()[0]), 0.0)
    with np.errstate(all="ignore"):
        breaks = np.asarray(dist.ppf(_LENGTH_BREAK_QUANTILES), dtype=np.float64)
    breaks = breaks[np.isfinite(breaks) & (breaks > low)]
    top = float(breaks.max()) if breaks.size else low + 1.0

    def fn(x: FloatArray) -> FloatArray:
        return np.asarray(survival(np.asarray(dist.sf(x), dtype=np.float64)), dtype=np.float64)

    body = low + _interval_integral(fn, low, top, what=what, breaks=breaks)  # survival 1 below low
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", integrate.IntegrationWarning)
        # x = top / t: the tail's own scale (about top) maps onto (0, 1], where quad resolves it;
        # a power-law tail S ~ x^-b becomes the integrable endpoint singularity t^(b-2).
        tail, err = integrate.quad(
            lambda t: top * float(fn(np.array([top / t]))[0]) / (t * t) if t > 0 else 0.0,
            0.0,
            1.0,
            limit=500,
            epsabs=1e-14 * abs(body),  # the tail only has to be accurate relative to the whole
            epsrel=1e-11,
        )
    total = body + tail
    if not (math.isfinite(total) and err <= 1e-9 * abs(total)):
        raise ArithmeticError(
            f"numerical integration of {what} did not converge (value {total!r}, tail error "
            f"estimate {err!r}); the distribution may be too heavy-tailed for float64 quadrature."
        )
    return float(total)


_TAIL = np.array([0.0, 1e-12, 1e-9, 1e-6, 1e-4, 1e-3, 0.01, 0.05, 0.1, 0.25])
_FLUID_BREAK_QUANTILES = np.concatenate([_TAIL, [0.5], (1.0 - _TAIL)[::-1]])


def _interval_integral(
    fn: Callable[[FloatArray], FloatArray],
    low: float,
    high: float,
    *,
    what: str,
    breaks: FloatArray | None = None,
) -> float:
    """``∫_low^high fn``: 16 uniform panels of 16- and 32-point Gauss–Legendre on each piece between
    the ``breaks`` inside ``[low, high]``, accepted when the two orders agree to ``1e-11`` relative
    (absolute ``1e-300``), else adaptive ``quad``.

    Pass quantiles of the length law as ``breaks``: a law much narrower than the window (all its mass
    on one token of a window of hundreds) is otherwise missed by every node, and the two orders then
    agree on a wrong value.
    """
    cuts = np.array([low, high], dtype=np.float64)
    if breaks is not None:
        inside = breaks[np.isfinite(breaks) & (breaks > low) & (breaks < high)]
        cuts = np.unique(np.concatenate([cuts, inside]))
    edges = cuts[:-1, None] + (cuts[1:] - cuts[:-1])[:, None] * np.linspace(0, 1, 17)[None, :]
    edges_lo, edges_hi = edges[:, :-1].ravel(), edges[:, 1:].ravel()
    lo, hi = edges_lo[:, None], edges_hi[:, None]

    def rule(nodes_weights: tuple[FloatArray, FloatArray]) -> float:
        x, w = nodes_weights
        pts = lo + (hi - lo) * (x[None, :] + 1.0) / 2.0
        with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            vals = fn(pts)
        return float(np.sum(vals @ w * (hi[:, 0] - lo[:, 0]) / 2.0))

    coarse, fine = rule(_GL16), rule(_GL32)
    if math.isfinite(fine) and abs(fine - coarse) <= max(1e-11 * abs(fine), 1e-300):
        return fine

    def scalar(x: float) -> float:
        return float(fn(np.array([x]))[0])

    # The fallback splits at the same cuts, or it would miss a narrow law in the same way.
    return _quad(scalar, low, high, points=cuts[1:-1].tolist(), what=what, rtol=1e-9)


def _beta_breaks(a: float, b: float) -> list[float]:
    """Quantiles of Beta(a, b) used as quadrature break points (where its weight changes)."""
    qs = special.betaincinv(a, b, np.array([1e-14, 1e-8, 1e-3, 0.1, 0.5, 0.9, 1 - 1e-3, 1 - 1e-8]))
    return [float(x) for x in qs if 0.0 < x < 1.0]
