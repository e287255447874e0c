"""Inverse-propensity correction of the length bias (conventions §first-k-of-n).

Weights ``1/π`` (:func:`ipw_weights`), the Horvitz–Thompson, Hájek and clipped estimators of a
batch mean, and the exact bias and variance of those estimators on a finite support, summed over
every composition of a batch (:func:`ipw_estimator_moments`), without Monte Carlo.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from refimpl._validation import (
    as_float_array,
    as_pmf,
    as_real,
    exact_list,
    invalid,
    mismatch,
    require_in_unit_interval,
    require_same_shape,
)
from refimpl.dispatch._numerics import FloatArray, Real, _check_n_k
from refimpl.dispatch.inclusion import _pi_exact, _pi_float

__all__ = [
    "EstimatorMoments",
    "IPWMoments",
    "clipped_ipw_estimate",
    "hajek_estimate",
    "horvitz_thompson_estimate",
    "ipw_estimator_moments",
    "ipw_weights",
]


def _as_pi(pi: ArrayLike, *, name: str = "pi") -> FloatArray:
    arr = as_float_array(pi, name=name)
    require_in_unit_interval(arr, name=name, meaning="inclusion probabilities")
    if np.any(arr <= 0):
        first = int(np.flatnonzero(arr.ravel() <= 0)[0])
        raise invalid(
            name,
            "be > 0 (a rollout that is never trained has no finite inverse-propensity weight)",
            arr,
            f"Entry {first} is 0; drop lengths with π = 0 or use a larger k.",
        )
    return arr


def _as_clip(clip: Any) -> float:
    return as_real(clip, name="clip", low=0.0, low_open=True, meaning="upper bound on the weights")


def ipw_weights(pi: ArrayLike, *, n: int, k: int, clip: float | None = None) -> FloatArray:
    r"""Inverse-propensity weights that undo the length bias of first-``k``-of-``n`` dispatch.

    .. math::

        w(\ell) = \frac{k}{n\,\pi(\ell)}, \qquad w_\text{clip}(\ell) = \min(w(\ell), c).

    Parameters
    ----------
    pi : array_like of float, any shape
        Inclusion probabilities in :math:`(0, 1]` (from :func:`inclusion_probability` or
        :func:`inclusion_probability_pmf`).
    n : int
        Number of rollouts launched at once, ``n >= 1``.
    k : int
        Number trained, ``1 <= k <= n``.
    clip : float, optional
        Upper bound :math:`c > 0` on the weights (clipped from above only); ``None`` for no clip.

    Returns
    -------
    ndarray of float64, the shape of ``pi``
        The weights; :math:`E_q[w\,g] = E_p[g]` without clipping (claim :ref:`LB4 <lb4>`).

    Raises
    ------
    TypeError
        If ``pi`` is not numeric or ``n``, ``k``, ``clip`` have the wrong type.
    ValueError
        If ``pi`` has entries outside :math:`(0, 1]`, NaN or infinity, or ``clip <= 0``; or, with
        no ``clip``, a weight beyond float64's range (``π`` below about ``k/(n·1.8e308)``).

    Notes
    -----
    Normalised so that the weighted batch mean :math:`\frac1k\sum w g` is the Horvitz–Thompson
    estimate; some frameworks normalise :math:`1/\pi` instead (the Hájek form,
    :func:`hajek_estimate`, is invariant to the scale).

    Examples
    --------
    >>> import refimpl
    >>> refimpl.ipw_weights([0.5, 1.0, 0.25], n=8, k=4)
    array([1. , 0.5, 2. ])
    >>> refimpl.ipw_weights([0.5, 1.0, 0.25], n=8, k=4, clip=1.5)
    array([1. , 0.5, 1.5])
    """
    n_, k_ = _check_n_k(n, k)
    arr = _as_pi(pi)
    c = None if clip is None else _as_clip(clip)
    with np.errstate(over="ignore", divide="ignore"):  # past float64's range: clipped or refused
        w = (k_ / n_) / arr
    if c is not None:
        w = np.minimum(w, c)
    return _representable(w, arr)


def _batch_arrays(values: ArrayLike, pi: ArrayLike) -> tuple[FloatArray, FloatArray]:
    g = as_float_array(values, name="values")
    if g.ndim == 0:
        raise invalid(
            "values",
            "be at least 1-D (the batch along the last axis)",
            g,
            "Pass an array.",
        )
    p = _as_pi(pi)
    require_same_shape(g, p, names=("values", "pi"))
    if g.shape[-1] == 0:
        raise invalid(
            "values",
            "hold at least one batch member along the last axis",
            g,
            "Pass the trained batch's values (a first-k-of-n batch has k >= 1 members).",
        )
    return g, p


def horvitz_thompson_estimate(values: ArrayLike, pi: ArrayLike, *, n: int, k: int) -> FloatArray:
    r"""Horvitz–Thompson estimate of :math:`E_p[g]` from one first-``k``-of-``n`` batch.

    .. math::

        \hat\mu_\text{HT} = \frac{1}{k}\sum_{i \in \text{batch}} \frac{k}{n\,\pi(L_i)}\, g(L_i)

    Parameters
    ----------
    values : array_like of float, shape (..., k)
        :math:`g(L_i)` of the batch members along the last axis.
    pi : array_like of float, shape (..., k)
        :math:`\pi(L_i)` of the same members, in :math:`(0, 1]`.
    n : int
        Number of rollouts launched at once.
    k : int
        Batch size; the last axis must have length ``k``.

    Returns
    -------
    ndarray of float64, shape (...)
        One estimate per batch (a 0-d array for a single batch).

    Raises
    ------
    ValueError
        If shapes differ, the last axis is not ``k`` long, ``pi`` is outside :math:`(0, 1]`, or
        the estimate is beyond float64's range (a subnormal ``π`` weighs its value by ``1/π``).

    Notes
    -----
    Unbiased (claim :ref:`LB4 <lb4>`); its exact variance on a finite support is reported by
    :func:`ipw_estimator_moments`.

    Examples
    --------
    >>> import refimpl
    >>> float(refimpl.horvitz_thompson_estimate([1.0, 3.0], [1.0, 0.5], n=4, k=2))
    1.75
    """
    n_, k_ = _check_n_k(n, k)
    g, p = _batch_arrays(values, pi)
    _require_batch_axis(g, k_)
    with np.errstate(over="ignore", invalid="ignore"):  # past float64's range: refused below
        estimate = np.sum(g / p, axis=-1) / n_
    return _representable(estimate, p, g)


def hajek_estimate(values: ArrayLike, pi: ArrayLike) -> FloatArray:
    r"""Self-normalised (Hájek) estimate of :math:`E_p[g]` from one batch.

    .. math::

        \hat\mu_\text{H} = \frac{\sum_i g(L_i)/\pi(L_i)}{\sum_i 1/\pi(L_i)}

    Parameters
    ----------
    values : array_like of float, shape (..., k)
        :math:`g(L_i)` along the last axis.
    pi : array_like of float, shape (..., k)
        :math:`\pi(L_i)` in :math:`(0, 1]`.

    Returns
    -------
    ndarray of float64, shape (...)
        One estimate per batch.

    Raises
    ------
    ValueError
        If shapes differ or ``pi`` is outside :math:`(0, 1]`.

    Notes
    -----
    Biased (a ratio estimate) but bounded by the batch's range of ``g``; the weight scale
    :math:`k/n` cancels, and so does any common factor: the weights are computed as
    :math:`\pi_\text{min}/\pi_i \le 1` and normalised, so a subnormal :math:`\pi` cannot overflow. Bias and variance: :func:`ipw_estimator_moments`.

    Examples
    --------
    >>> import refimpl
    >>> float(refimpl.hajek_estimate([1.0, 3.0], [1.0, 0.5]))
    2.3333333333333335
    """
    g, p = _batch_arrays(values, pi)
    # weights p_min / p in (0, 1], normalised: no 1/p that overflows, and a convex combination of
    # the values cannot leave their range
    inv = np.min(p, axis=-1, keepdims=True) / p
    share = inv / np.sum(inv, axis=-1, keepdims=True)
    return np.asarray(np.sum(share * g, axis=-1), dtype=np.float64)


def clipped_ipw_estimate(
    values: ArrayLike, pi: ArrayLike, *, n: int, k: int, clip: float
) -> FloatArray:
    r"""Clipped inverse-propensity estimate of :math:`E_p[g]` from one batch.

    .. math::

        \hat\mu_c = \frac{1}{k}\sum_{i} \min\Bigl(\frac{k}{n\,\pi(L_i)}, c\Bigr)\, g(L_i)

    Parameters
    ----------
    values : array_like of float, shape (..., k)
        :math:`g(L_i)` along the last axis.
    pi : array_like of float, shape (..., k)
        :math:`\pi(L_i)` in :math:`(0, 1]`.
    n : int
        Number of rollouts launched at once.
    k : int
        Batch size; the last axis must have length ``k``.
    clip : float
        Upper bound :math:`c > 0` on the weights.

    Returns
    -------
    ndarray of float64, shape (...)
        One estimate per batch.

    Raises
    ------
    ValueError
        As :func:`horvitz_thompson_estimate`, or ``clip <= 0``.

    Notes
    -----
    Trades the variance of HT for a bias toward short lengths (long, rare rollouts are
    under-weighted). Bias and variance: :func:`ipw_estimator_moments`.

    Examples
    --------
    >>> import refimpl
    >>> float(refimpl.clipped_ipw_estimate([1.0, 3.0], [1.0, 0.5], n=4, k=2, clip=0.75))
    1.375
    """
    n_, k_ = _check_n_k(n, k)
    g, p = _batch_arrays(values, pi)
    _require_batch_axis(g, k_)
    c = _as_clip(clip)
    with np.errstate(over="ignore", divide="ignore"):  # an infinite weight is clipped to c
        w = np.minimum((k_ / n_) / p, c)
    with np.errstate(over="ignore", invalid="ignore"):  # past float64's range: refused below
        estimate = np.sum(w * g, axis=-1) / k_
    return _representable(estimate, p, g)


def _representable(result: FloatArray, p: FloatArray, g: FloatArray | None = None) -> FloatArray:
    """``result`` as float64, refused when it left float64's range (a tiny ``π`` weighs 1/π)."""
    if np.all(np.isfinite(result)):
        return np.asarray(result, dtype=np.float64)
    smallest = f"the smallest pi is {float(np.min(p))!r}"
    if g is None:
        raise invalid(
            "pi",
            "be large enough for the weights k/(n π) to fit in float64",
            p,
            f"{smallest}; drop lengths that are practically never trained, or pass clip.",
        )
    raise mismatch(
        ("values", "pi"),
        "give an estimate within float64's range",
        f"{smallest} and the largest |value| {float(np.max(np.abs(g)))!r}",
        "Rescale values, drop lengths that are practically never trained, or use "
        "hajek_estimate (bounded by the values).",
    )


def _require_batch_axis(g: FloatArray, k: int) -> None:
    if g.shape[-1] != k:
        raise invalid(
            "values",
            f"have k={k} entries along its last axis (one per batch member)",
            g,
            f"Its last axis has {g.shape[-1]}; pass the whole batch or the right k.",
        )


class EstimatorMoments(NamedTuple):
    """Exact moments of one estimator of :math:`E_p[g]` over the random batch."""

    mean: Real
    bias: Real
    variance: Real
    mse: Real


class IPWMoments(NamedTuple):
    """Bias and variance of the HT, Hájek and clipped estimates (see :func:`ipw_estimator_moments`)."""

    target: Real
    """:math:`E_p[g]`."""
    horvitz_thompson: EstimatorMoments
    hajek: EstimatorMoments
    clipped: EstimatorMoments | None
    """``None`` when no ``clip`` was given."""
    per_draw_variance: Real
    r""":math:`\mathrm{Var}_q[w\,g] = (k/n)\,E_p[g^2/\pi] - E_p[g]^2` (one draw from :math:`q`)."""


_MAX_COMPOSITIONS = 200_000


def ipw_estimator_moments(
    pmf: Any, g: Any, *, n: int, k: int, clip: float | Fraction | None = None
) -> IPWMoments:
    r"""Exact bias and variance of the HT, Hájek and clipped-IPW estimates on a finite support.

    The batch is the first ``k`` of ``n`` i.i.d. lengths from ``pmf``, ties broken uniformly. The
    batch *multiset* does not depend on the tie-break, so the expectation is a finite sum over the
    compositions :math:`b` of ``k`` over the support (``b_j`` members of length ``j``). With
    :math:`m` the longest length in :math:`b`,

    .. math::

        P(b) = \frac{n!}{\prod_{j<m} b_j!} \prod_{j<m} p_j^{b_j}
               \sum_{c=b_m}^{n-k+b_m} \frac{p_m^{c}\, S_m^{\,n-k+b_m-c}}{c!\,(n-k+b_m-c)!},

    (:math:`c` rollouts of length :math:`m` launched, :math:`S_m = P(L > m)`), and each estimator is
    a function of :math:`b`. The per-draw variance of conventions §first-k-of-n is reported beside:
    :math:`\mathrm{Var}_q[w g] = (k/n) E_p[g^2/\pi] - E_p[g]^2`. The batch estimate's variance is
    *not* that divided by :math:`k` (members of a batch are dependent).

    Parameters
    ----------
    pmf : array_like (M,) or sequence of Fraction
        The true length law over ``1..M``.
    g : array_like (M,) or sequence of Fraction/int
        :math:`g(\ell)` per length (e.g. ``range(1, M+1)`` for the mean length).
    n : int
        Number of rollouts launched at once.
    k : int
        Batch size.
    clip : float or Fraction, optional
        Upper bound on the weights for the clipped estimate.

    Returns
    -------
    IPWMoments
        ``target``, the three :class:`EstimatorMoments` and ``per_draw_variance``; exact
        ``Fraction`` values when ``pmf`` (and ``g``, ``clip``) are exact.

    Raises
    ------
    ValueError
        Bad ``pmf``, ``n``, ``k``, ``clip``; ``g`` of another length than ``pmf``; more than
        200 000 batch compositions, or more terms (compositions times ``n - k + 1``) than
        200 000 in exact mode (where also ``n <= 2000``) or 2e7 in float mode (cost below).

    Notes
    -----
    Cost: :math:`\binom{k+M'-1}{M'-1}` compositions (:math:`M'` support points with
    :math:`p > 0`), :math:`O(n)` work each. The float mode sums each composition's terms in log
    space (:math:`n!` alone overflows float64 past 170). HT is unbiased (claim :ref:`LB4 <lb4>`).

    Examples
    --------
    >>> from fractions import Fraction
    >>> import refimpl
    >>> half = Fraction(1, 2)
    >>> m = refimpl.ipw_estimator_moments([half, half], [1, 2], n=2, k=1)
    >>> m.target, m.horvitz_thompson.bias, m.horvitz_thompson.variance
    (Fraction(3, 2), Fraction(0, 1), Fraction(25, 12))
    >>> m.hajek.bias
    Fraction(-1, 4)
    """
    n_, k_ = _check_n_k(n, k)
    values, exact = as_pmf(pmf, name="pmf")
    g_exact = exact_list(g)
    if exact and g_exact is None:
        g_arr = as_float_array(g, name="g", ndim=1)
        if np.all(g_arr == np.round(g_arr)):
            g_exact = [Fraction(int(x)) for x in g_arr]
    if exact and g_exact is not None and (clip is None or isinstance(clip, (int, Fraction))):
        assert isinstance(values, list)
        if len(g_exact) != len(values):
            raise _g_length_error(g, len(values))
        c_exact = None if clip is None else Fraction(clip)
        if c_exact is not None and c_exact <= 0:
            raise invalid("clip", "be > 0 (upper bound on the weights)", clip, "Pass clip > 0.")
        return _moments(values, g_exact, n_, k_, c_exact, Fraction(0), Fraction)
    p = np.asarray([float(x) for x in values]) if exact else np.asarray(values)
    g_f = as_float_array(g, name="g", ndim=1)
    if g_f.size != p.size:
        raise _g_length_error(g, p.size)
    c_f = None if clip is None else _as_clip(clip)
    p = p / p.sum()
    return _moments(list(p), list(g_f), n_, k_, c_f, 0.0, float)


def _g_length_error(g: Any, size: int) -> ValueError:
    return invalid(
        "g",
        f"have one value per support point ({size}, like pmf)",
        g,
        "Pass g(ℓ) for ℓ = 1..M.",
    )


def _moments(
    p: list[Any],
    g: list[Any],
    n: int,
    k: int,
    clip: Any,
    zero: Any,
    num: Callable[[Any], Any],
) -> IPWMoments:
    support = [j for j, x in enumerate(p) if x > 0]
    count = math.comb(k + len(support) - 1, len(support) - 1)
    if count > _MAX_COMPOSITIONS:
        raise invalid(
            "k",
            f"give at most {_MAX_COMPOSITIONS} batch compositions for exact enumeration",
            k,
            f"(k={k} over {len(support)} support points gives {count}); use a smaller k or support.",
        )
    exact = isinstance(zero, Fraction)
    _check_terms(n, count * (n - k + 1), exact)
    if isinstance(zero, Fraction):
        pi: list[Any] = _pi_exact(p, n, k)
    else:
        pi = list(_pi_float(np.asarray(p, dtype=np.float64), n, k))
    scale = num(k) / num(n)
    w = [scale / x if x > 0 else zero for x in pi]
    target = sum((p[j] * g[j] for j in support), zero)
    per_draw = scale * sum((p[j] * g[j] * g[j] / pi[j] for j in support), zero) - target * target
    # survival S_m = P(L > m) over the whole support, from the top.
    surv = [zero] * len(p)
    acc = zero
    for j in range(len(p) - 1, -1, -1):
        surv[j] = acc
        acc = acc + p[j]
    fact = [math.factorial(i) for i in range(n + 1)] if exact else []
    outcomes: list[tuple[Any, Any, Any, Any]] = []
    for comp in _compositions(k, len(support)):
        chosen = [(p[j], c) for j, c in zip(support, comp, strict=True)]
        last = max(i for i, c in enumerate(comp) if c > 0)
        m = support[last]
        prob: Any
        if exact:
            prob = _batch_probability_exact(chosen, last, surv[m], n - k, fact)
        else:
            prob = _batch_probability_float(chosen, last, surv[m], n - k)
        ht = (
            sum(
                (comp[i] * w[support[i]] * g[support[i]] for i in range(len(comp))),
                zero,
            )
            / k
        )
        inv = [comp[i] / pi[support[i]] for i in range(len(comp))]
        hj = sum((inv[i] * g[support[i]] for i in range(len(comp))), zero) / sum(inv, zero)
        if clip is None:
            cl = zero
        else:
            cl = (
                sum(
                    (comp[i] * min(w[support[i]], clip) * g[support[i]] for i in range(len(comp))),
                    zero,
                )
                / k
            )
        outcomes.append((prob, ht, hj, cl))

    def moments(index: int) -> EstimatorMoments:
        mean = sum((o[0] * o[index] for o in outcomes), zero)
        # prob * d * d, not prob * d**2: a composition of tiny probability can carry a weight
        # whose square alone is past float64 while its share of the variance is not.
        var = sum((o[0] * (o[index] - mean) * (o[index] - mean) for o in outcomes), zero)
        bias = mean - target
        return EstimatorMoments(mean, bias, var, var + bias * bias)

    return IPWMoments(
        target, moments(1), moments(2), None if clip is None else moments(3), per_draw
    )


#: Work budgets of :func:`ipw_estimator_moments`, in tail terms (compositions x (n - k + 1)):
#: an exact term is a Fraction of up to n digits, a float term one entry of a numpy vector.
_MAX_EXACT_TERMS = 200_000
_MAX_FLOAT_TERMS = 20_000_000


def _check_terms(n: int, terms: int, exact: bool) -> None:
    budget = _MAX_EXACT_TERMS if exact else _MAX_FLOAT_TERMS
    if terms > budget:
        mode = "exact (Fraction)" if exact else "float"
        raise invalid(
            "n",
            f"keep the {mode} enumeration within {budget} terms (batch compositions times "
            "n - k + 1)",
            n,
            f"This call needs {terms}; pass a smaller n or k"
            + (", or the pmf as floats." if exact else "."),
        )


def _batch_probability_exact(
    chosen: list[tuple[Fraction, int]], last: int, survival: Fraction, spare: int, fact: list[int]
) -> Fraction:
    """``P(b)`` of the docstring: ``chosen`` holds ``(p_j, b_j)`` per support point, ``last`` is the
    index of the longest length in the batch, ``spare = n - k``."""
    n = spare + sum(c for _, c in chosen)
    coef = Fraction(fact[n])
    for p_j, c in chosen[:last]:
        if c:
            coef = coef * p_j**c / fact[c]
    p_m, b_m = chosen[last]
    rest = spare + b_m
    tail = sum(
        (
            p_m**c * survival ** (rest - c) / (fact[c] * fact[rest - c])
            for c in range(b_m, rest + 1)
        ),
        Fraction(0),
    )
    return coef * tail


def _batch_probability_float(
    chosen: list[tuple[float, int]], last: int, survival: float, spare: int
) -> float:
    """:func:`_batch_probability_exact` in log space: ``n!`` overflows float64 past n = 170."""
    n = spare + sum(c for _, c in chosen)
    log_coef = math.lgamma(n + 1) + sum(
        c * math.log(p_j) - math.lgamma(c + 1) for p_j, c in chosen[:last] if c
    )
    p_m, b_m = chosen[last]
    rest = spare + b_m
    c = np.arange(b_m, rest + 1, dtype=np.float64)
    # xlogy: at the longest length of the support S = 0, and only c = rest (0^0 = 1) counts
    log_terms = (
        c * math.log(p_m)
        + special.xlogy(rest - c, survival)
        - special.gammaln(c + 1.0)
        - special.gammaln(rest - c + 1.0)
    )
    with np.errstate(under="ignore"):
        return float(np.sum(np.exp(log_coef + log_terms)))


def _compositions(total: int, parts: int) -> itertools.chain[tuple[int, ...]]:
    """All tuples of ``parts`` non-negative integers summing to ``total`` (stars and bars)."""

    def gen() -> Any:
        for bars in itertools.combinations(range(total + parts - 1), parts - 1):
            prev = -1
            out = []
            for b in bars:
                out.append(b - prev - 1)
                prev = b
            out.append(total + parts - 2 - prev)
            yield tuple(out)

    return itertools.chain(gen())
