"""How far the trained length law is from the true one (conventions §first-k-of-n).

:func:`length_bias` summarises it in one result: both means, their ratio, the total variation and
the KL divergence, for a pmf (exact with ``Fraction`` entries) or a frozen continuous law.
"""

from __future__ import annotations

import math
import numbers
import sys
from fractions import Fraction
from typing import Any

import numpy as np
from scipy import special

from refimpl._validation import (
    as_pmf,
    wrong_type,
)
from refimpl.dispatch._numerics import (
    _beta_breaks,
    _check_dist,
    _check_n_k,
    _quad,
)
from refimpl.dispatch._records import LengthBias as LengthBias
from refimpl.dispatch.order_statistics import selected_mean, selected_pmf

__all__ = ["LengthBias", "length_bias"]


def length_bias(law: Any, *, n: int, k: int) -> LengthBias:
    r"""Mean, ratio, total variation and KL divergence between the trained and the true length law.

    One function for both kinds of law: a pmf over lengths ``1..M`` (floats, or ``Fraction`` for
    exact values) or a frozen :mod:`scipy.stats` distribution.

    .. math::

        \mathrm{TV} = \tfrac12 \sum_\ell |q(\ell) - p(\ell)|, \qquad
        \mathrm{KL}(q\|p) = \sum_\ell q(\ell) \log \frac{n\,\pi(\ell)}{k}.

    For a continuous law both depend on :math:`(n, k)` only (they are invariant under monotone
    transforms of the length): with :math:`u^*` solving :math:`I_{1-u^*}(n-k,k) = k/n`,
    :math:`\mathrm{TV} = I_{u^*}(k+1, n-k)` and
    :math:`\mathrm{KL} = \int_0^1 r \log r\,du`, :math:`r(u) = \frac{n}{k} I_{1-u}(n-k, k)`.

    Parameters
    ----------
    law : array_like (M,), sequence of Fraction, or frozen scipy.stats distribution
        The true length law.
    n : int
        Number of rollouts launched at once, ``n >= 1``.
    k : int
        Number trained, ``1 <= k <= n``.

    Returns
    -------
    LengthBias
        ``(true_mean, selected_mean, ratio, total_variation, kl_divergence)``; exact ``Fraction``
        fields (except ``kl_divergence``) for a pmf of ``Fraction``.

    Raises
    ------
    TypeError
        If ``law`` is neither a pmf nor a frozen distribution, or ``n``, ``k`` are not integers.
    ValueError
        As :func:`selected_pmf` and :func:`selected_mean`.

    Notes
    -----
    ``ratio <= 1`` with equality iff :math:`k = n` or the law is degenerate; the derivation of the
    continuous TV is claim :ref:`OS3 <os3>`.

    Examples
    --------
    >>> from fractions import Fraction
    >>> import refimpl
    >>> b = refimpl.length_bias([Fraction(1, 2), Fraction(1, 2)], n=2, k=1)
    >>> b.true_mean, b.selected_mean, b.total_variation
    (Fraction(3, 2), Fraction(5, 4), Fraction(1, 4))
    >>> import scipy.stats
    >>> round(refimpl.length_bias(scipy.stats.expon(), n=2, k=1).ratio, 10)
    0.5
    """
    n_, k_ = _check_n_k(n, k)
    if callable(getattr(law, "cdf", None)):
        return _length_bias_continuous(law, n_, k_)
    if isinstance(law, (numbers.Number, str, bytes)) or not hasattr(law, "__len__"):
        raise wrong_type(
            "law",
            "a pmf over lengths 1..M or a frozen scipy.stats distribution",
            law,
            "Pass e.g. [0.5, 0.5] or scipy.stats.lognorm(s=1.0, scale=np.exp(6.0)).",
        )
    values, exact = as_pmf(law, name="law")
    if exact:
        assert isinstance(values, list)
        q = selected_pmf(values, n=n_, k=k_)
        true_mean = sum(((i + 1) * p for i, p in enumerate(values)), Fraction(0))
        sel_mean = sum(((i + 1) * x for i, x in enumerate(q)), Fraction(0))
        tv = sum((abs(x - p) for x, p in zip(q, values, strict=True)), Fraction(0)) / 2
        kl = math.fsum(float(x) * _log_of(x / p) for x, p in zip(q, values, strict=True) if x > 0)
        return LengthBias(true_mean, sel_mean, sel_mean / true_mean, tv, kl)
    assert isinstance(values, np.ndarray)
    p = values / values.sum()
    q_f = selected_pmf(p, n=n_, k=k_)
    lengths = np.arange(1, p.size + 1, dtype=np.float64)
    true_f = float(lengths @ p)
    sel_f = float(lengths @ q_f)
    tv_f = 0.5 * float(np.abs(q_f - p).sum())
    pos = q_f > 0
    kl_f = float(np.sum(q_f[pos] * np.log(q_f[pos] / p[pos])))
    return LengthBias(true_f, sel_f, sel_f / true_f, tv_f, kl_f)


def _length_bias_continuous(dist: Any, n: int, k: int) -> LengthBias:
    mean = _check_dist(dist, name="law")
    if k == n:
        return LengthBias(mean, mean, 1.0, 0.0, 0.0)
    sel = selected_mean(dist, n=n, k=k)
    a, kf = float(n - k), float(k)
    s_star = float(special.betaincinv(a, kf, k / n))  # I_{s*}(n-k, k) = k/n, s* = 1 - u*
    tv = float(special.betainc(kf + 1.0, a, 1.0 - s_star))

    def integrand(s: float) -> float:
        r = (n / k) * float(special.betainc(a, kf, s))
        return r * math.log(r) if r > 0 else 0.0

    kl = _quad(integrand, 0.0, 1.0, points=[*_beta_breaks(a, kf), s_star], what="KL(q||p)")
    return LengthBias(mean, sel, sel / mean, tv, kl)


def _log_of(ratio: Fraction) -> float:
    """``ln ratio`` of a positive Fraction, also where ``float(ratio)`` under- or overflows (a
    selected mass like (2/3)^2000 over its law's: ``float`` gives 0 and ``math.log`` refused it)."""
    try:
        value = float(ratio)
    except OverflowError:
        value = math.inf
    if sys.float_info.min <= value < math.inf:
        return math.log(value)
    return math.log(ratio.numerator) - math.log(ratio.denominator)
