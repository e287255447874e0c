r"""The toy stop-hazard policy: hazards, length law, token scores and log-probabilities."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from refimpl._validation import as_float_array, as_int, invalid
from refimpl.learning._common import AnyArray, FloatArray, _as_array


def length_features(max_length: int, *, degree: int = 2) -> FloatArray:
    r"""Polynomial features of the position, :math:`\phi(t) = (1, t/M, \ldots, (t/M)^d)`.

    Parameters
    ----------
    max_length : int
        :math:`M \ge 1`, the longest length (the policy always stops there).
    degree : int
        :math:`d \ge 0`.

    Returns
    -------
    ndarray of float64, shape (M, d + 1)
        Row :math:`t - 1` is :math:`\phi(t)`.

    Examples
    --------
    >>> length_features(4, degree=1).tolist()
    [[1.0, 0.25], [1.0, 0.5], [1.0, 0.75], [1.0, 1.0]]
    """
    m = as_int(max_length, name="max_length", minimum=1, meaning="longest length")
    d = as_int(degree, name="degree", minimum=0, meaning="polynomial degree")
    x = np.arange(1, m + 1, dtype=np.float64) / m
    return np.asarray(np.stack([x**i for i in range(d + 1)], axis=1), dtype=np.float64)


def _logits(theta: ArrayLike, features: ArrayLike) -> tuple[FloatArray, FloatArray]:
    phi = as_float_array(features, name="features", ndim=2)
    th = as_float_array(theta, name="theta", ndim=1)
    if th.size != phi.shape[1]:
        raise invalid(
            "theta",
            f"have one entry per feature ({phi.shape[1]})",
            th,
            "Pass theta of length features.shape[1].",
        )
    return phi @ th, phi


def stop_hazard(theta: ArrayLike, features: ArrayLike) -> FloatArray:
    r"""The stop hazard :math:`h_\theta(t) = \sigma(\phi(t)^\top\theta)`, with :math:`h(M) = 1`.

    Parameters
    ----------
    theta : array_like (d,)
        Policy parameters.
    features : array_like (M, d)
        :math:`\phi(t)` per position (:func:`length_features`).

    Returns
    -------
    ndarray of float64, shape (M,)
        Hazards in :math:`(0, 1)` for :math:`t < M` and exactly 1 at :math:`t = M`.

    Examples
    --------
    >>> stop_hazard([0.0, 0.0], length_features(3, degree=1)).tolist()
    [0.5, 0.5, 1.0]
    """
    z, _ = _logits(theta, features)
    h = np.asarray(special.expit(z), dtype=np.float64)
    h[-1] = 1.0
    return np.asarray(h, dtype=np.float64)


def hazard_length_pmf(hazard: Any) -> Any:
    r"""The length law of a stop hazard, :math:`p(\ell) = h(\ell)\prod_{t<\ell}(1 - h(t))`.

    Parameters
    ----------
    hazard : array_like (M,) or sequence of Fraction
        :math:`h(t) \in [0, 1]` for :math:`t = 1..M` with :math:`h(M) = 1` (the rollout ends at
        :math:`M` at the latest).

    Returns
    -------
    ndarray of float64 or list of Fraction, shape (M,)
        The pmf over lengths :math:`1..M`; exact when ``hazard`` is.

    Raises
    ------
    ValueError
        If a hazard is outside :math:`[0, 1]` or the last one is not 1.

    Examples
    --------
    >>> from fractions import Fraction as F
    >>> hazard_length_pmf([F(1, 2), F(1, 3), F(1)])
    [Fraction(1, 2), Fraction(1, 6), Fraction(1, 3)]
    """
    h, exact = _as_array(hazard, name="hazard", ndim=1)
    if h.size == 0 or any(not (0 <= x <= 1) for x in h) or h[-1] != 1:
        raise invalid(
            "hazard",
            "lie in [0, 1] with the last entry exactly 1 (the policy stops at M)",
            hazard,
            "Pass h(1..M) with h(M) = 1 (stop_hazard does this).",
        )
    one: Any = Fraction(1) if exact else 1.0
    out: list[Any] = []
    alive = one
    for x in h:
        out.append(alive * x)
        alive = alive * (one - x)
    return out if exact else np.asarray(out, dtype=np.float64)


def token_scores(hazard: Any, features: Any) -> AnyArray:
    r"""Per-token scores :math:`\nabla_\theta \log \pi_\theta(a_t)` of every length-:math:`\ell` rollout.

    .. math::

        \nabla \log \pi(a_t) =
        \begin{cases} -h(t)\,\phi(t) & t < \ell \text{ (continue)},\\
        (1 - h(\ell))\,\phi(\ell) & t = \ell \text{ (stop)},\\ 0 & t > \ell,\end{cases}

    and :math:`\nabla\log p_\theta(\ell) = \sum_t \nabla\log\pi(a_t)`. The forced stop at
    :math:`M` has score 0.

    Parameters
    ----------
    hazard : array_like (M,) or sequence of Fraction
        :math:`h(t)`, last entry 1.
    features : array_like (M, d)
        :math:`\phi(t)`; with ``features = identity`` the parameters are the logits of each hazard
        (tabular policy: rational hazards give exact scores).

    Returns
    -------
    ndarray, shape (M, M, d)
        Entry ``[ℓ-1, t-1]``; float64, or ``object`` holding ``Fraction`` when both inputs are exact.

    Examples
    --------
    >>> from fractions import Fraction as F
    >>> s = token_scores([F(1, 2), F(1)], [[1], [1]])
    >>> s[:, :, 0].tolist()
    [[Fraction(1, 2), Fraction(0, 1)], [Fraction(-1, 2), Fraction(0, 1)]]
    """
    h, exact_h = _as_array(hazard, name="hazard", ndim=1)
    phi, exact_phi = _as_array(features, name="features", ndim=2)
    exact = exact_h and exact_phi
    if not exact:
        h = h.astype(np.float64)
        phi = phi.astype(np.float64)
    m = h.size
    if phi.shape[0] != m:
        raise invalid(
            "features", f"have one row per position ({m}, like hazard)", phi, "Pass (M, d)."
        )
    d = phi.shape[1]
    one: Any = Fraction(1) if exact else 1.0
    out = np.zeros((m, m, d), dtype=object if exact else np.float64)
    if exact:
        out[...] = Fraction(0)
    cont = -h[:, None] * phi  # (M, d): score of continuing at t
    stop = (one - h)[:, None] * phi  # score of stopping at t
    for ell in range(m):
        out[ell, :ell] = cont[:ell]
        out[ell, ell] = stop[ell]
    return out


def _log_hazards(theta: ArrayLike, features: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """``(log h(t), log(1 − h(t)))`` from the logits, never ``-inf`` (the last stop is forced)."""
    z, _ = _logits(theta, features)
    log_stop = -np.logaddexp(0.0, -z)
    log_cont = -np.logaddexp(0.0, z)
    log_stop[-1] = 0.0
    log_cont[-1] = 0.0  # never a valid token: the policy stops at M
    return np.asarray(log_stop, dtype=np.float64), np.asarray(log_cont, dtype=np.float64)


def _token_log_probs_from_logits(
    theta: ArrayLike, features: ArrayLike
) -> tuple[FloatArray, FloatArray]:
    """:func:`token_log_probs` computed from the logits (finite however sharp the hazard)."""
    log_stop, log_cont = _log_hazards(theta, features)
    m = log_stop.size
    mask = np.tril(np.ones((m, m)))
    lp = np.where(np.tril(np.ones((m, m)), -1) > 0, log_cont[None, :], 0.0)
    lp[np.arange(m), np.arange(m)] = log_stop
    return np.asarray(lp * mask, dtype=np.float64), np.asarray(mask, dtype=np.float64)


def token_log_probs(hazard: ArrayLike) -> tuple[FloatArray, FloatArray]:
    r"""Log-probabilities of the tokens of every length-:math:`\ell` rollout, and their padding mask.

    :math:`\log(1 - h(t))` for :math:`t < \ell`, :math:`\log h(\ell)` at :math:`t = \ell`, padding
    (mask 0, value 0) after. Row :math:`\ell - 1` sums to :math:`\log p(\ell)`.

    Parameters
    ----------
    hazard : array_like (M,)
        :math:`h(t)` in :math:`(0, 1)` for :math:`t < M`, last entry 1.

    Returns
    -------
    (logp, mask) : two ndarrays of float64, shape (M, M)

    Examples
    --------
    >>> lp, m = token_log_probs([0.5, 1.0])
    >>> np.exp(lp).tolist(), m.tolist()
    ([[0.5, 1.0], [0.5, 1.0]], [[1.0, 0.0], [1.0, 1.0]])
    """
    h = as_float_array(hazard, name="hazard", ndim=1)
    m = h.size
    with np.errstate(divide="ignore"):
        log_stop = np.log(h)
        log_cont = np.log1p(-h)
    mask = np.tril(np.ones((m, m)))
    lp = np.where(np.tril(np.ones((m, m)), -1) > 0, log_cont[None, :], 0.0)
    lp[np.arange(m), np.arange(m)] = log_stop
    if not np.all(np.isfinite(lp[mask > 0])):
        raise invalid(
            "hazard",
            "be in (0, 1) before the last position (every token needs a finite log-probability)",
            h,
            "Use finite logits (stop_hazard with finite theta).",
        )
    return np.asarray(lp, dtype=np.float64), np.asarray(mask, dtype=np.float64)
