r"""Learning under asynchrony: what length bias, staleness and their corrections do to the gradient.

A toy autoregressive policy whose length emerges token by token: at position :math:`t` it stops with
the hazard :math:`h_\theta(t) = \sigma(\phi(t)^\top\theta)` (logistic in a few features of
:math:`t`), and always stops at the last position :math:`M`, so the length law on :math:`1..M` is

.. math::

    p_\theta(\ell) = h_\theta(\ell) \prod_{t<\ell} \bigl(1 - h_\theta(t)\bigr).

Token :math:`t < \ell` of a length-:math:`\ell` rollout is a *continue* action with probability
:math:`1 - h(t)`, token :math:`\ell` the *stop* action with probability :math:`h(\ell)`; every token
has a probability under every policy version, so token-level importance ratios are real. The reward
is a success with probability :math:`Q(\ell)` minus an optional per-token penalty :math:`c\,\ell`
(the effort penalty :math:`k(b)\,\ell/\ell_\text{scale}` with :math:`c = k(b)/\ell_\text{scale}`):
:math:`\bar R(\ell) = Q(\ell) - c\,\ell`, :math:`\mathrm{Var}(R \mid \ell) = Q(\ell)(1 - Q(\ell))`.

Everything is a finite sum over the support, so the objective, its gradient and the expected
gradient of every estimator are exact (``Fraction`` in, ``Fraction`` out where the inputs are
rational and no logarithm is needed):

- :func:`stop_hazard`, :func:`hazard_length_pmf`, :func:`token_scores`, :func:`token_log_probs`:
  the policy;
- :func:`gradient_moments`: mean and trace of the covariance of a per-sample gradient estimator over
  any trained law (the on-policy gradient :math:`\nabla J = \sum_\ell p_\theta(\ell)\,\bar R(\ell)\,
  \nabla \log p_\theta(\ell)` is the case ``law = p``);
- :func:`first_k_gradient`: the batch gradient under first-:math:`k`-of-:math:`n` dispatch, exactly,
  uncorrected, Horvitz–Thompson, Hájek or clipped IPW (enumeration of batch compositions);
  :func:`first_k_carry_gradient`: the same with carried leftovers (the exact chain of carried
  rollouts);
- :func:`fluid_staleness_pmf`, :func:`fluid_step_time`, :func:`async_gradient`: continuous
  asynchronous dispatch in the fluid model, stale behaviour versions, a staleness mask at
  :math:`\eta` (with inverse propensity for it), and each off-policy correction of
  :mod:`refimpl.staleness`; :func:`async_gradient_exact`: the same in Fractions for rational
  hazards;
- :func:`train_policy`: the real loop, in which :func:`refimpl.sim.simulate` decides which version
  launches which rollout, which versions generate its tokens and which batch trains it.

References
----------
conventions §first-k-of-n, §async-dispatch, §masks-and-weights, §effort-conditioning; the derivation
page ``derivations/learning`` (claims LRN1–LRN6).
"""

from __future__ import annotations

import functools
import itertools
import math
from fractions import Fraction
from typing import Any, Literal, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import special

from refimpl._validation import as_float_array, as_int, as_real, invalid
from refimpl.dispatch import fluid_keep_probability, inclusion_probability_pmf
from refimpl.staleness import (
    decoupled_ppo_weights,
    masked_is_weights,
    staleness_mask,
    truncated_is_weights,
)

__all__ = [
    "CORRECTIONS",
    "EXACT_CORRECTIONS",
    "FIRST_K_CORRECTIONS",
    "CarryMoments",
    "GradientMoments",
    "TrainingRun",
    "async_gradient",
    "async_gradient_exact",
    "corrected_scores",
    "expected_length",
    "first_k_carry_gradient",
    "first_k_gradient",
    "fluid_staleness_pmf",
    "fluid_step_time",
    "gradient_moments",
    "hazard_length_pmf",
    "length_features",
    "length_gradient",
    "mean_reward",
    "policy_gradient",
    "stop_hazard",
    "token_log_probs",
    "token_scores",
    "train_policy",
]

FloatArray = NDArray[np.float64]
AnyArray = NDArray[Any]

Correction = Literal[
    "none", "sequence_is", "token_tis", "sequence_tis", "geometric", "icepop", "decoupled_ppo"
]
#: The off-policy corrections of :func:`corrected_scores` (conventions §masks-and-weights), plus
#: ``sequence_is``: the full, uncapped sequence ratio, the unbiased reference.
CORRECTIONS: tuple[str, ...] = (
    "none",
    "sequence_is",
    "token_tis",
    "sequence_tis",
    "geometric",
    "icepop",
    "decoupled_ppo",
)
#: The length-bias corrections of :func:`first_k_gradient` (conventions §first-k-of-n).
FIRST_K_CORRECTIONS: tuple[str, ...] = ("none", "horvitz_thompson", "hajek", "clipped_ht")


# ---------------------------------------------------------------------------------------------
# the policy
# ---------------------------------------------------------------------------------------------


def _as_array(values: Any, *, name: str, ndim: int | None = None) -> tuple[AnyArray, bool]:
    """``values`` as an object array of Fractions (exact) or a float64 array."""
    arr = np.asarray(values, dtype=object)
    flat = list(arr.ravel())
    if flat and all(
        isinstance(x, (Fraction, int)) and not isinstance(x, (bool, np.bool_)) for x in flat
    ):
        out = np.empty(arr.shape, dtype=object)
        out.ravel()[:] = [Fraction(x) for x in flat]
        if ndim is not None and out.ndim != ndim:
            raise invalid(name, f"be {ndim}-dimensional", values, f"Pass a {ndim}-D array.")
        return out, True
    return as_float_array(values, name=name, ndim=ndim), False


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


# ---------------------------------------------------------------------------------------------
# exact objective and gradients
# ---------------------------------------------------------------------------------------------


def _reward(quality: Any, penalty: Any, m: int) -> tuple[AnyArray, AnyArray, bool]:
    q, exact_q = _as_array(quality, name="quality", ndim=1)
    if q.size != m:
        raise invalid("quality", f"have one value per length ({m})", quality, "Pass Q(1..M).")
    if any(not (0 <= x <= 1) for x in q):
        raise invalid(
            "quality", "lie in [0, 1] (a success probability)", quality, "Pass Q(ℓ) in [0, 1]."
        )
    exact_c = isinstance(penalty, (Fraction, int)) and not isinstance(penalty, bool)
    c: Any = Fraction(penalty) if exact_c else as_real(penalty, name="penalty", low=0.0)
    if c < 0:
        raise invalid("penalty", "be >= 0 (reward per token)", penalty, "Pass penalty >= 0.")
    exact = exact_q and exact_c
    lengths = np.array([Fraction(i) if exact else float(i) for i in range(1, m + 1)], dtype=object)
    mean = q - c * lengths
    var = q * (1 - q)
    if not exact:
        mean, var = mean.astype(np.float64), var.astype(np.float64)
    return mean, var, exact


def mean_reward(pmf: Any, quality: Any, *, penalty: Any = 0) -> Any:
    r"""The objective :math:`J = \sum_\ell p(\ell)\,(Q(\ell) - c\,\ell)`.

    Examples
    --------
    >>> from fractions import Fraction as F
    >>> mean_reward([F(1, 2), F(1, 2)], [F(0), F(1)], penalty=F(1, 10))
    Fraction(7, 20)
    """
    p, _ = _as_array(pmf, name="pmf", ndim=1)
    r, _, exact = _reward(quality, penalty, p.size)
    total = (p * r).sum()
    return total if exact and isinstance(p[0], Fraction) else float(total)


def expected_length(pmf: Any) -> Any:
    r""":math:`E[L] = \sum_\ell \ell\, p(\ell)` (exact for a Fraction pmf).

    Examples
    --------
    >>> from fractions import Fraction as F
    >>> expected_length([F(1, 2), F(1, 2)])
    Fraction(3, 2)
    """
    p, exact = _as_array(pmf, name="pmf", ndim=1)
    total = sum((p[i] * (i + 1) for i in range(p.size)), Fraction(0) if exact else 0.0)
    return total if exact else float(total)


class GradientMoments(NamedTuple):
    """Mean and trace of the covariance of a gradient estimator (see :func:`gradient_moments`)."""

    mean: AnyArray
    """The expected gradient, shape (d,): float64, or ``object`` of ``Fraction`` in exact mode."""
    trace_variance: Any
    r""":math:`\operatorname{tr}\operatorname{Cov}` of the estimator: of one draw
    (:func:`gradient_moments`, :func:`async_gradient`) or of the whole batch estimate
    (:func:`first_k_gradient`)."""


def gradient_moments(
    law: Any, weighted_scores: Any, quality: Any, *, penalty: Any = 0, baseline: Any = 0
) -> GradientMoments:
    r"""Exact mean and per-draw covariance trace of :math:`g = (R - b)\,G(\ell)`, :math:`\ell \sim` ``law``.

    .. math::

        E[g] = \sum_{c,\ell} q_c(\ell)\,(\bar R(\ell) - b)\,G_c(\ell), \qquad
        \operatorname{tr}\operatorname{Cov}(g) = \sum_{c,\ell} q_c(\ell)\,
        \bigl(Q(1-Q) + (\bar R - b)^2\bigr)\,\lVert G_c(\ell)\rVert^2 - \lVert E[g]\rVert^2,

    over components :math:`c` (e.g. staleness values, each with its own behaviour policy and
    weights) and lengths :math:`\ell`. :math:`G` is a (weighted) score: :math:`\nabla\log
    p_\theta(\ell)` on-policy, :math:`w(\ell)\nabla\log p_\theta(\ell)` for sequence weights,
    :math:`\sum_t w_t \nabla\log\pi(a_t)` for token weights (:func:`corrected_scores`).

    Parameters
    ----------
    law : array_like (M,) or (C, M)
        Probabilities of (component, length), summing to 1.
    weighted_scores : array_like (M, d) or (C, M, d)
        :math:`G_c(\ell)`.
    quality : array_like (M,)
        Success probability :math:`Q(\ell)`.
    penalty : float or Fraction
        Reward per token :math:`c \ge 0`; :math:`\bar R(\ell) = Q(\ell) - c\ell`.
    baseline : float or Fraction
        Constant baseline :math:`b`.

    Returns
    -------
    GradientMoments
        Exact (``Fraction``) when every input is.

    Examples
    --------
    >>> from fractions import Fraction as F
    >>> h = [F(1, 2), F(1)]
    >>> p = hazard_length_pmf(h)
    >>> s = token_scores(h, [[1], [1]]).sum(axis=1)
    >>> gradient_moments(p, s, [F(1, 4), F(3, 4)]).mean.tolist()
    [Fraction(-1, 8)]
    """
    q, exact_q = _as_array(law, name="law")
    g, exact_g = _as_array(weighted_scores, name="weighted_scores")
    if q.ndim == 1:
        q, g = q[None, :], g[None, :, :]
    if q.ndim != 2 or g.ndim != 3 or g.shape[:2] != q.shape:
        raise invalid(
            "weighted_scores",
            f"have shape law.shape + (d,) (law has shape {q.shape})",
            g,
            "Pass G of shape (M, d) for a law (M,), or (C, M, d) for (C, M).",
        )
    r, var, exact_r = _reward(quality, penalty, q.shape[1])
    exact = exact_q and exact_g and exact_r
    b: Any = Fraction(baseline) if exact else as_real(baseline, name="baseline")
    if not exact:
        q, g, r, var = (x.astype(np.float64) for x in (q, g, r, var))
    total = q.sum()
    if (exact and total != 1) or (not exact and abs(float(total) - 1.0) > 1e-9):
        raise invalid("law", "sum to 1", total, "Normalise the law over (component, length).")
    adv = r - b
    coef = q * adv[None, :]
    mean = (coef[:, :, None] * g).sum(axis=(0, 1))
    sq = (g * g).sum(axis=2)
    second = (q * (var + adv * adv)[None, :] * sq).sum()
    trace = second - (mean * mean).sum()
    return GradientMoments(mean if exact else mean.astype(np.float64), trace)


def policy_gradient(
    pmf: Any, scores: Any, quality: Any, *, penalty: Any = 0, baseline: Any = 0
) -> GradientMoments:
    r"""The on-policy gradient :math:`\nabla J = \sum_\ell p(\ell)(\bar R(\ell) - b)\nabla\log p(\ell)`.

    A constant baseline leaves the mean unchanged (:math:`\sum_\ell p\,\nabla\log p = 0`) and
    changes only the variance. ``scores`` are the sequence scores, shape (M, d)
    (``token_scores(...).sum(axis=1)``).

    Examples
    --------
    >>> from fractions import Fraction as F
    >>> h = [F(1, 2), F(1)]
    >>> s = token_scores(h, [[1], [1]]).sum(axis=1)
    >>> policy_gradient(hazard_length_pmf(h), s, [F(1, 4), F(3, 4)], baseline=F(1, 2)).mean.tolist()
    [Fraction(-1, 8)]
    """
    return gradient_moments(pmf, scores, quality, penalty=penalty, baseline=baseline)


def length_gradient(pmf: Any, scores: Any) -> AnyArray:
    r""":math:`\nabla E_\theta[L] = \sum_\ell p(\ell)\,\ell\,\nabla\log p(\ell)`, shape (d,).

    The direction in which the policy's outputs get longer: a bias with a negative component along
    it pushes the policy towards shorter outputs (when it does: claims :ref:`LRN3 <lrn3>`,
    :ref:`LRN4 <lrn4>`).

    Examples
    --------
    >>> from fractions import Fraction as F
    >>> h = [F(1, 2), F(1)]
    >>> length_gradient(hazard_length_pmf(h), token_scores(h, [[1], [1]]).sum(axis=1)).tolist()
    [Fraction(-1, 4)]
    """
    p, exact_p = _as_array(pmf, name="pmf", ndim=1)
    g, exact_g = _as_array(scores, name="scores", ndim=2)
    exact = exact_p and exact_g
    ell = np.array([Fraction(i) if exact else float(i) for i in range(1, p.size + 1)], dtype=object)
    out = ((p * ell)[:, None] * g).sum(axis=0)
    return out if exact else np.asarray(out, dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# first k of n: exact batch enumeration
# ---------------------------------------------------------------------------------------------

_MAX_COMPOSITIONS = 200_000
#: Largest log-weight exponentiated (``exp`` overflows float64 beyond ``~709.78``).
_LOG_MAX = 700.0


def _compositions(total: int, parts: int) -> Any:
    for bars in itertools.combinations(range(total + parts - 1), parts - 1):
        prev = -1
        out = []
        for b in bars:
            out.append(b - prev - 1)
            prev = b
        out.append(total + parts - 2 - prev)
        yield tuple(out)


def first_k_gradient(
    pmf: Any,
    scores: Any,
    quality: Any,
    *,
    n: int,
    k: int,
    correction: str = "none",
    penalty: Any = 0,
    baseline: Any = 0,
    clip: Any = None,
) -> GradientMoments:
    r"""Exact mean and covariance trace of the batch gradient under first-:math:`k`-of-:math:`n` dispatch.

    :math:`n` rollouts are launched from :math:`p_\theta`, the first :math:`k` to finish form the
    batch (ties broken uniformly: the batch *multiset* :math:`\beta` is a function of the lengths).
    The estimates are

    .. math::

        \hat g_\text{none} = \frac1k\sum_{i\in\beta}(R_i - b)\,s_i, \quad
        \hat g_\text{HT} = \frac1k\sum_{i\in\beta} w_i (R_i - b)\,s_i, \quad
        \hat g_\text{Hájek} = \frac{\sum_{i\in\beta} w_i (R_i - b)\,s_i}{\sum_{i\in\beta} w_i},

    with :math:`w = k/(n\pi)` (:func:`refimpl.inclusion_probability_pmf`; ``clipped_ht`` is
    :math:`\hat g_\text{HT}` with :math:`w = \min(k/(n\pi), C)`, as
    :func:`refimpl.ipw_weights` with ``clip``: biased towards the uncorrected gradient wherever a
    weight is clipped, unbiased when :math:`C \ge \max_\ell k/(n\pi(\ell))`) and
    :math:`s = \nabla\log p_\theta(\ell)`. :math:`E[\hat g_\text{none}] = \sum_\ell q(\ell)(\bar R -
    b) s` with :math:`q` = :func:`refimpl.selected_pmf` (biased), :math:`E[\hat g_\text{HT}] = \nabla
    J` exactly (claim :ref:`LRN1 <lrn1>`), Hájek is biased for finite :math:`k`. Mean and variance are finite sums
    over the compositions :math:`\beta` of :math:`k` (probability as in
    :func:`refimpl.ipw_estimator_moments`), with the Bernoulli reward noise included.

    Parameters
    ----------
    pmf : array_like (M,) or sequence of Fraction
        :math:`p_\theta`.
    scores : array_like (M, d)
        :math:`\nabla\log p_\theta(\ell)`.
    quality : array_like (M,)
        :math:`Q(\ell)`.
    n, k : int
        Launched and trained per step, :math:`1 \le k \le n`.
    correction : {'none', 'horvitz_thompson', 'hajek', 'clipped_ht'}
        The length-bias correction.
    penalty, baseline : float or Fraction
        As in :func:`gradient_moments`.
    clip : float or Fraction, optional
        :math:`C > 0`, the cap of ``clipped_ht``'s weights (required for it, refused otherwise).

    Returns
    -------
    GradientMoments
        ``trace_variance`` is that of the *batch* estimate (members of a batch are dependent).

    Raises
    ------
    ValueError
        For an unknown correction, ``k > n``, or more than 200 000 compositions.

    Examples
    --------
    >>> from fractions import Fraction as F
    >>> h = [F(1, 2), F(1)]
    >>> p, s = hazard_length_pmf(h), token_scores(h, [[1], [1]]).sum(axis=1)
    >>> Q = [F(1, 4), F(3, 4)]
    >>> first_k_gradient(p, s, Q, n=2, k=1).mean.tolist()  # the length bias cancels the gradient
    [Fraction(0, 1)]
    >>> first_k_gradient(p, s, Q, n=2, k=1, correction="horvitz_thompson").mean.tolist()
    [Fraction(-1, 8)]
    >>> first_k_gradient(p, s, Q, n=2, k=1, correction="clipped_ht", clip=F(1)).mean.tolist()
    [Fraction(-1, 32)]
    """
    if correction not in FIRST_K_CORRECTIONS:
        raise invalid(
            "correction", f"be one of {FIRST_K_CORRECTIONS}", correction, "Pick one of them."
        )
    if (clip is None) != (correction != "clipped_ht"):
        raise invalid(
            "clip",
            "be given exactly when correction='clipped_ht' (the cap of its weights)",
            clip,
            "Pass clip=C > 0 with correction='clipped_ht', and no clip otherwise.",
        )
    n_ = as_int(n, name="n", minimum=1, meaning="rollouts launched per step")
    k_ = as_int(k, name="k", minimum=1, meaning="batch size")
    if k_ > n_:
        raise invalid("k", f"be <= n={n_}", k_, "Pass k <= n.")
    p, exact_p = _as_array(pmf, name="pmf", ndim=1)
    s, exact_s = _as_array(scores, name="scores", ndim=2)
    r, var, exact_r = _reward(quality, penalty, p.size)
    exact = exact_p and exact_s and exact_r
    num: Any = Fraction if exact else float
    b: Any = Fraction(baseline) if exact else as_real(baseline, name="baseline")
    if exact:
        pi: list[Any] = list(inclusion_probability_pmf(list(p), n=n_, k=k_))
    else:
        p, s, r, var = (x.astype(np.float64) for x in (p, s, r, var))
        pi = list(inclusion_probability_pmf(p / p.sum(), n=n_, k=k_))
    support = [j for j in range(p.size) if p[j] > 0]
    count = math.comb(k_ + len(support) - 1, len(support) - 1)
    if count > _MAX_COMPOSITIONS:
        raise invalid(
            "k",
            f"give at most {_MAX_COMPOSITIONS} batch compositions for exact enumeration",
            k_,
            f"(k={k_} over {len(support)} support points gives {count}); use a smaller k or M.",
        )
    exact = exact and (clip is None or (isinstance(clip, (Fraction, int)) and clip > 0))
    if not exact and isinstance(p[0], Fraction):
        p, s, r, var = (x.astype(np.float64) for x in (p, s, r, var))
        pi = [float(x) for x in pi]
        num, b = float, float(b)
    dtype: Any = object if exact else np.float64
    w = np.array([num(k_) / (num(n_) * pi[j]) for j in support], dtype=dtype)
    if clip is not None:
        cap = Fraction(clip) if exact else as_real(clip, name="clip", low=0.0, low_open=True)
        w = np.array([min(x, cap) for x in w], dtype=dtype)
    adv = np.array([r[j] - b for j in support], dtype=dtype)
    sv = s[support]
    sq = (sv * sv).sum(axis=1)
    vr = var[support]
    counts, prob = _composition_table(tuple(p[j] for j in range(p.size)), n_, k_, exact)
    cm = counts.astype(dtype)
    if correction == "none":
        unit = np.full(cm.shape, num(1) / k_, dtype=dtype)
    elif correction in ("horvitz_thompson", "clipped_ht"):
        unit = np.broadcast_to(w / k_, cm.shape)
    else:
        unit = w[None, :] / (cm @ w)[:, None]
    coef = cm * unit  # (compositions, support): weight of each length in each batch
    est = (coef * adv[None, :]) @ sv  # (compositions, d)
    noise = (cm * unit * unit * (vr * sq)[None, :]).sum(axis=1)
    mean = prob @ est
    second = prob @ ((est * est).sum(axis=1) + noise)
    trace = second - (mean * mean).sum()
    if not exact:
        return GradientMoments(np.asarray(mean, dtype=np.float64), float(trace))
    return GradientMoments(np.asarray(mean, dtype=object), trace)


@functools.lru_cache(maxsize=16)
def _composition_table(
    p: tuple[Any, ...], n: int, k: int, exact: bool
) -> tuple[NDArray[np.int64], AnyArray]:
    r"""Batch compositions of ``k`` over the support of ``p`` and their probabilities.

    With :math:`m` the longest length in the batch :math:`\beta` (``b_m`` members),
    :math:`P(\beta) = n! \prod_{j<m} p_j^{b_j}/b_j! \sum_{c=b_m}^{n-k+b_m}
    p_m^c S_m^{n-k+b_m-c}/(c!(n-k+b_m-c)!)` (as in :func:`refimpl.ipw_estimator_moments`).
    """
    zero: Any = Fraction(0) if exact else 0.0
    num: Any = Fraction if exact else float
    support = [j for j in range(len(p)) if p[j] > 0]
    surv = [zero] * len(p)
    acc = zero
    for j in range(len(p) - 1, -1, -1):
        surv[j] = acc
        acc = acc + p[j]
    fact = [math.factorial(i) for i in range(n + 1)]
    rows = []
    probs = []
    for comp in _compositions(k, len(support)):
        last = max(i for i, c in enumerate(comp) if c > 0)
        m = support[last]
        coef = num(fact[n])
        for i in range(last):
            if comp[i]:
                coef = coef * p[support[i]] ** comp[i] / fact[comp[i]]
        rest = n - k + comp[last]
        tail = sum(
            (p[m] ** c * surv[m] ** (rest - c) / (fact[c] * fact[rest - c]))
            for c in range(comp[last], rest + 1)
        )
        rows.append(comp)
        probs.append(coef * tail)
    return np.asarray(rows, dtype=np.int64), np.asarray(
        probs, dtype=object if exact else np.float64
    )


class CarryMoments(NamedTuple):
    """The batch gradient of first-k dispatch with carried leftovers (:func:`first_k_carry_gradient`)."""

    mean: AnyArray
    """The expected batch gradient, shape (d,): float64, or ``object`` of ``Fraction``."""
    trace_variance: Any
    r""":math:`\operatorname{tr}\operatorname{Cov}` of the batch estimate."""
    trained_law: AnyArray
    r"""Joint law of (staleness :math:`s`, length :math:`\ell`) of a trained sample, shape
    (S + 1, M); its column sums are the trained length law."""
    step_time: Any
    """Expected time of one trainer step (zero trainer time, unit decode time per token)."""
    states: int
    """Number of carried-leftover states of the chain."""


_CarryItem = tuple[int, int, int]  # (remaining decode time, age in steps, length index)


def _carry_step(
    state: tuple[_CarryItem, ...], fresh: tuple[int, ...], k: int
) -> tuple[list[tuple[int, int]], int, tuple[_CarryItem, ...]]:
    """One first-k step: the batch ``[(length index, staleness)]``, its duration, the carried rest.

    Completion order is that of :mod:`refimpl.sim`: by finishing time, ties in launch order
    (older first; rollouts launched together are exchangeable). Rollouts finishing at the same
    instant as the k-th but beyond the batch are carried with remaining time 0.
    """
    items = list(state) + [(j + 1, 0, j) for j in fresh]
    items.sort(key=lambda it: (it[0], -it[1]))
    batch, rest = items[:k], items[k:]
    duration = batch[-1][0]
    carried = tuple(sorted((r - duration, a + 1, j) for r, a, j in rest))
    return [(j, a) for _, a, j in batch], duration, carried


def _solve_stationary(matrix: list[list[Any]], exact: bool) -> list[Any]:
    """``π P = π``, ``Σ π = 1`` by Gaussian elimination (Fractions) or ``numpy.linalg.solve``."""
    size = len(matrix)
    if not exact:
        af = np.asarray(matrix, dtype=np.float64).T - np.eye(size)
        af[-1] = 1.0
        e_last = np.zeros(size)
        e_last[-1] = 1.0
        return list(np.linalg.solve(af, e_last))
    a = [[matrix[c][r] - (1 if r == c else 0) for c in range(size)] for r in range(size)]
    a[-1] = [Fraction(1)] * size
    rhs: list[Any] = [Fraction(0)] * (size - 1) + [Fraction(1)]
    for col in range(size):
        piv = next((r for r in range(col, size) if a[r][col] != 0), None)
        if piv is None:
            raise invalid(
                "pmf",
                "give a carried-leftover chain with one recurrent class",
                "a singular stationarity system",
                "Report this law: the chain should be irreducible on its reachable states.",
            )
        a[col], a[piv] = a[piv], a[col]
        rhs[col], rhs[piv] = rhs[piv], rhs[col]
        inv = 1 / a[col][col]
        for r in range(size):
            if r != col and a[r][col] != 0:
                f = a[r][col] * inv
                row_r, row_c = a[r], a[col]
                for c in range(col, size):
                    if row_c[c] != 0:
                        row_r[c] -= f * row_c[c]
                rhs[r] -= f * rhs[col]
    return [rhs[i] / a[i][i] for i in range(size)]


_MAX_CARRY_STATES = 5_000


def first_k_carry_gradient(
    pmf: Any,
    scores: Any,
    quality: Any,
    *,
    n: int,
    k: int,
    penalty: Any = 0,
    baseline: Any = 0,
    step: int | None = None,
) -> CarryMoments:
    r"""Exact batch gradient of first-:math:`k`-of-:math:`n` dispatch whose leftovers are carried.

    Every step keeps :math:`n` rollouts in flight: the :math:`n - k` not among the first :math:`k`
    to finish keep running into the next step (as ``refimpl.sim`` with ``mode='first_k'``,
    ``leftovers='carry'``), which launches :math:`k` fresh ones from :math:`p_\theta`. The carried
    rollouts (remaining decode time, age, length) form a Markov chain; its exact law after
    ``step`` steps from a cold start, or its stationary law (``step=None``: the linear system
    :math:`\pi P = \pi` solved exactly), gives the law of every batch, hence the mean and the
    covariance trace of :math:`\hat g = \frac1k\sum_{i\in\beta}(R_i - b)\,s_i` at a fixed
    :math:`\theta` and the joint (staleness, length) law of the trained samples.

    In the stationary chain every launched rollout is trained exactly once, so the trained length
    law **is** :math:`p_\theta` and the uncorrected gradient is the on-policy one (claim
    :ref:`LRN5 <lrn5>`): carrying turns first-k's length bias into staleness, and that staleness
    grows with the length (a long rollout is carried over more steps). The transient of the first
    steps is short-biased.

    Parameters
    ----------
    pmf : array_like (M,) or sequence of Fraction
        :math:`p_\theta`.
    scores : array_like (M, d)
        :math:`\nabla\log p_\theta(\ell)`.
    quality : array_like (M,)
        :math:`Q(\ell)`.
    n, k : int
        Rollouts in flight and trained per step, :math:`1 \le k \le n`.
    penalty, baseline : float or Fraction
        As in :func:`gradient_moments`.
    step : int, optional
        Trainer step :math:`j \ge 0` from a cold start (all :math:`n` launched at time 0);
        ``None``: the stationary chain.

    Returns
    -------
    CarryMoments
        Exact (``Fraction``) when every input is.

    Raises
    ------
    ValueError
        If the chain has more than 5 000 states (use a smaller ``M`` or ``n - k``).

    Examples
    --------
    >>> from fractions import Fraction as F
    >>> h = [F(1, 2), F(1, 2), F(1)]
    >>> p, s = hazard_length_pmf(h), token_scores(h, np.eye(3, dtype=int).tolist()).sum(axis=1)
    >>> Q = [F(0), F(1, 2), F(1)]
    >>> c = first_k_carry_gradient(p, s, Q, n=2, k=1)
    >>> list(c.mean) == list(policy_gradient(p, s, Q).mean), c.trained_law.sum(axis=0).tolist()
    (True, [Fraction(1, 2), Fraction(1, 4), Fraction(1, 4)])
    >>> first_k_carry_gradient(p, s, Q, n=2, k=1, step=0).trained_law.sum(axis=0).tolist()
    [Fraction(3, 4), Fraction(3, 16), Fraction(1, 16)]
    """
    n_ = as_int(n, name="n", minimum=1, meaning="rollouts in flight per step")
    k_ = as_int(k, name="k", minimum=1, meaning="batch size")
    if k_ > n_:
        raise invalid("k", f"be <= n={n_}", k_, "Pass k <= n.")
    j_stop = None if step is None else as_int(step, name="step", minimum=0, meaning="step")
    p, exact_p = _as_array(pmf, name="pmf", ndim=1)
    sc, exact_s = _as_array(scores, name="scores", ndim=2)
    r, var, exact_r = _reward(quality, penalty, p.size)
    exact = exact_p and exact_s and exact_r
    b: Any = Fraction(baseline) if exact else as_real(baseline, name="baseline")
    if not exact:
        p, sc, r, var = (x.astype(np.float64) for x in (p, sc, r, var))
    m, d = p.size, sc.shape[1]
    zero: Any = Fraction(0) if exact else 0.0
    support = [j for j in range(m) if p[j] > 0]
    fact = [math.factorial(i) for i in range(n_ + 1)]
    p, sc, r, var = p.tolist(), sc.tolist(), r.tolist(), var.tolist()  # plain Python numbers

    def draws(count: int) -> list[tuple[tuple[int, ...], Any]]:
        out = []
        for comp in _compositions(count, len(support)):
            prob: Any = Fraction(fact[count]) if exact else float(fact[count])
            fresh: list[int] = []
            for c, j in zip(comp, support, strict=True):
                prob = prob * p[j] ** c / fact[c]
                fresh += [j] * c
            out.append((tuple(fresh), prob))
        return out

    adv = [r[j] - b for j in range(m)]
    noise_l = [var[j] * sum((sc[j][c] * sc[j][c] for c in range(d)), zero) for j in range(m)]
    cold: tuple[_CarryItem, ...] = ()
    steady_draws = draws(k_)
    # the reachable states and every transition out of them
    trans: dict[tuple[_CarryItem, ...], list[tuple[Any, list[tuple[int, int]], int, Any]]] = {}
    todo = [cold]
    while todo:
        st = todo.pop()
        if st in trans:
            continue
        outs = []
        for fresh, prob in draws(n_) if st == cold else steady_draws:
            batch, dur, nxt = _carry_step(st, fresh, k_)
            outs.append((prob, batch, dur, nxt))
            if nxt not in trans:
                todo.append(nxt)
        trans[st] = outs
        if len(trans) - 1 > _MAX_CARRY_STATES:  # the cold start is not a carried state
            raise invalid(
                "n",
                f"leave at most {_MAX_CARRY_STATES} carried-leftover states for exact solution",
                n_,
                "Use a smaller M or n - k.",
            )
    if j_stop is not None:
        dist: dict[tuple[_CarryItem, ...], Any] = {cold: Fraction(1) if exact else 1.0}
        for _ in range(j_stop):
            new: dict[tuple[_CarryItem, ...], Any] = {}
            for st, w in dist.items():
                for prob, _, _, nxt in trans[st]:
                    new[nxt] = new.get(nxt, zero) + w * prob
            dist = new
    elif n_ == k_:  # nothing is carried: every step is the cold start's
        dist = {cold: Fraction(1) if exact else 1.0}
    else:
        states = [st for st in trans if st != cold]
        index = {st: i for i, st in enumerate(states)}
        matrix = [[zero] * len(states) for _ in states]
        for st in states:
            row = matrix[index[st]]
            for prob, _, _, nxt in trans[st]:
                row[index[nxt]] += prob
        dist = dict(zip(states, _solve_stationary(matrix, exact), strict=True))
    s_max = max((a for st in dist for _, batch, _, _ in trans[st] for _, a in batch), default=0)
    law = np.empty((s_max + 1, m), dtype=object if exact else np.float64)
    law[...] = zero
    mean: list[Any] = [zero] * d
    second = zero
    duration = zero
    for st, w in dist.items():
        if w == 0:
            continue
        for prob, batch, dur, _ in trans[st]:
            pw = w * prob
            est = [sum((adv[j] * sc[j][c] for j, _ in batch), zero) / k_ for c in range(d)]
            noise = sum((noise_l[j] for j, _ in batch), zero) / (k_ * k_)
            for j, age in batch:
                law[age, j] += pw / k_
            mean = [x + pw * e for x, e in zip(mean, est, strict=True)]
            second += pw * (sum((e * e for e in est), zero) + noise)
            duration += pw * dur
    trace = second - sum((x * x for x in mean), zero)
    if exact:
        return CarryMoments(np.asarray(mean, dtype=object), trace, law, duration, len(trans) - 1)
    return CarryMoments(
        np.asarray(mean, dtype=np.float64), float(trace), law, float(duration), len(trans) - 1
    )


# ---------------------------------------------------------------------------------------------
# continuous asynchronous dispatch: fluid model, stale behaviour, corrections
# ---------------------------------------------------------------------------------------------


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


def corrected_scores(
    theta: ArrayLike,
    behaviour: ArrayLike,
    features: ArrayLike,
    *,
    correction: str = "none",
    cap: float = 2.0,
    low: float = 0.5,
    high: float = 2.0,
) -> FloatArray:
    r"""Weighted scores :math:`G(\ell)` of rollouts sampled by ``behaviour`` and trained at ``theta``.

    With token ratios :math:`\rho_t = \pi_\theta(a_t)/\mu(a_t)` and token scores :math:`s_t` at
    :math:`\theta` (:func:`token_scores`):

    ======================  ==============================================================
    ``none``                :math:`\sum_t s_t`
    ``sequence_is``         :math:`\prod_t\rho_t\,\sum_t s_t` (uncapped: unbiased)
    ``token_tis``           :math:`\sum_t \min(\rho_t, C)\,s_t`
    ``sequence_tis``        :math:`\min(\prod_t\rho_t, C)\sum_t s_t`
    ``geometric``           :math:`\min((\prod_t\rho_t)^{1/\ell}, C)\sum_t s_t`
    ``icepop``              :math:`\sum_t \rho_t 1[\alpha\le\rho_t\le\beta]\,s_t`
    ``decoupled_ppo``       :math:`\sum_t (\pi_\text{prox}/\mu)\,1[\pi_\text{prox}/\mu \le C]\,s_t`
    ======================  ==============================================================

    The weights come from :func:`refimpl.truncated_is_weights`, :func:`refimpl.masked_is_weights`
    and :func:`refimpl.decoupled_ppo_weights`. Only ``sequence_is`` is unbiased for a stale
    behaviour; the bias of token TIS, in closed form, is claim :ref:`LRN2 <lrn2>`. Decoupled PPO is evaluated at its proximal point
    (:math:`\pi_\text{prox} = \pi_\theta`, where the PPO ratio is 1 and unclipped), so its gradient
    is the behaviour-weighted token score.

    Parameters
    ----------
    theta, behaviour : array_like (d,)
        Target (trainer) and behaviour (rollout) parameters.
    features : array_like (M, d)
    correction : str
        One of :data:`CORRECTIONS`.
    cap : float
        :math:`C \ge 1` (TIS, geometric, decoupled PPO).
    low, high : float
        :math:`[\alpha, \beta]` of IcePop.

    Returns
    -------
    ndarray of float64, shape (M, d)

    Examples
    --------
    >>> phi = length_features(3, degree=1)
    >>> g0 = corrected_scores([0.0, 0.0], [0.0, 0.0], phi, correction="token_tis")
    >>> np.allclose(g0, token_scores(stop_hazard([0.0, 0.0], phi), phi).sum(axis=1))
    True
    """
    if correction not in CORRECTIONS:
        raise invalid("correction", f"be one of {CORRECTIONS}", correction, "Pick one of them.")
    h_t = stop_hazard(theta, features)
    phi = as_float_array(features, name="features", ndim=2)
    tok = np.asarray(token_scores(h_t, phi), dtype=np.float64)
    seq = tok.sum(axis=1)
    if correction == "none":
        return np.asarray(seq, dtype=np.float64)
    lt, mask = _token_log_probs_from_logits(theta, phi)
    lb, _ = _token_log_probs_from_logits(behaviour, phi)
    if correction == "sequence_is":
        w = np.exp(np.minimum(((lt - lb) * mask).sum(axis=1), _LOG_MAX))
        return np.asarray(w[:, None] * seq, dtype=np.float64)
    if correction in ("sequence_tis", "geometric"):
        level: Any = "sequence" if correction == "sequence_tis" else "geometric"
        w = truncated_is_weights(lt, lb, cap=cap, level=level, mask=mask)
        return np.asarray(w[:, None] * seq, dtype=np.float64)
    if correction == "token_tis":
        wt = truncated_is_weights(lt, lb, cap=cap, level="token", mask=mask)
    elif correction == "icepop":
        wt = masked_is_weights(lt, lb, low=low, high=high, level="token", mask=mask)
    else:
        wt = decoupled_ppo_weights(lt, lb, cap=cap, mask=mask)
    return np.asarray((wt[:, :, None] * tok).sum(axis=1), dtype=np.float64)


def async_gradient(
    theta: ArrayLike,
    features: ArrayLike,
    quality: ArrayLike,
    *,
    slots: int,
    batch: int,
    lag: ArrayLike | None = None,
    eta: int | None = None,
    correction: str = "none",
    penalty: float = 0.0,
    baseline: float = 0.0,
    cap: float = 2.0,
    low: float = 0.5,
    high: float = 2.0,
    mask_ipw: bool = False,
    ipw_clip: float | None = None,
) -> GradientMoments:
    r"""Expected per-sample gradient of continuous asynchronous dispatch in the fluid model.

    A sample trained at :math:`\theta` with staleness :math:`s` was generated by the behaviour
    version :math:`\theta_s = \theta - s\,\delta` (the policy moved by ``lag`` :math:`= \delta` per
    version). In the fluid model the trained (length, staleness) law is

    .. math::

        q(\ell, s) \propto p_{\theta_s}(\ell)\, P(s \mid \ell)\, 1[s \le \eta],

    with :math:`P(s \mid \ell)` = :func:`fluid_staleness_pmf` at the step time :math:`\Delta` =
    :func:`fluid_step_time` of :math:`p_\theta` (the mask at :math:`\eta` lengthens it: dropped
    rollouts do not fill batches; the mask itself is :func:`refimpl.staleness_mask`). Each
    component gets the weighted scores of :func:`corrected_scores`, and :func:`gradient_moments`
    sums them.

    Approximation: launches are taken at a constant rate over the few versions a rollout spans, and
    :math:`\Delta` is that of the current law. With ``lag = 0`` every behaviour equals the target,
    and the only bias left is the length bias of the mask.

    Parameters
    ----------
    theta : array_like (d,)
    features : array_like (M, d)
    quality : array_like (M,)
    slots, batch : int
        :math:`N`, :math:`B`.
    lag : array_like (d,), optional
        :math:`\delta`; default 0.
    eta : int, optional
        Staleness bound of the mask; ``None``: nothing dropped.
    correction : str
        One of :data:`CORRECTIONS`.
    penalty, baseline, cap, low, high : float
        As in :func:`gradient_moments` and :func:`corrected_scores`.
    mask_ipw : bool
        Inverse propensity for the mask: weight each kept sample by
        :math:`w(\ell) = \kappa/\mathrm{keep}(\ell)`, with :math:`\mathrm{keep}(\ell) =
        P(s \le \eta \mid \ell)` of the fluid model and :math:`\kappa` the kept fraction
        :math:`B\,E[L]/(N\Delta)`, on top of ``correction``. Without lag it makes the expected
        gradient :math:`\sum_{\ell:\,\mathrm{keep}(\ell)>0} p(\ell)(\bar R - b)s(\ell)`: the
        on-policy gradient minus the lengths the mask never keeps (:math:`\ell \ge
        (\eta+1)\Delta`), which no weight can bring back. Needs ``eta``.
    ipw_clip : float, optional
        Cap :math:`C > 0` of the mask's weights, :math:`\min(w, C)` (``mask_ipw`` only).

    Returns
    -------
    GradientMoments
        Per-draw mean and covariance trace (the samples of the fluid limit are independent, so a
        batch of :math:`B` has :math:`1/B` of it). Float64: the hazards are logistic
        (irrational); :func:`async_gradient_exact` gives the same quantities in Fractions for
        rational hazards.

    Examples
    --------
    Without lag and without a mask the fluid trained law is :math:`p_\theta` itself, so the
    expected gradient is the on-policy one:

    >>> phi = length_features(8, degree=1)
    >>> Q = np.linspace(0.2, 0.9, 8)
    >>> h = stop_hazard([-1.0, 0.0], phi)
    >>> on = policy_gradient(hazard_length_pmf(h), token_scores(h, phi).sum(axis=1), Q)
    >>> asy = async_gradient([-1.0, 0.0], phi, Q, slots=4, batch=4)
    >>> bool(np.allclose(asy.mean, on.mean))
    True
    """
    th = as_float_array(theta, name="theta", ndim=1)
    phi = as_float_array(features, name="features", ndim=2)
    delta_vec = np.zeros_like(th) if lag is None else as_float_array(lag, name="lag", ndim=1)
    _check_mask_ipw(mask_ipw, ipw_clip, eta)
    m = phi.shape[0]
    p = hazard_length_pmf(stop_hazard(th, phi))
    step = fluid_step_time(p, slots=slots, batch=batch, eta=eta)
    ell = np.arange(1, m + 1, dtype=np.float64)
    s_max = math.ceil(m / step)
    cond = fluid_staleness_pmf(ell, step_time=step, max_staleness=s_max)  # (M, S+1)
    s_values = np.arange(s_max + 1, dtype=np.float64)
    keep = np.ones(s_max + 1) if eta is None else staleness_mask(s_values, eta=eta)
    laws = []
    scores = []
    for s in range(s_max + 1):
        if keep[s] == 0 or not np.any(cond[:, s] > 0):
            continue
        beh = th - s * delta_vec
        laws.append(hazard_length_pmf(stop_hazard(beh, phi)) * cond[:, s])
        scores.append(
            corrected_scores(th, beh, phi, correction=correction, cap=cap, low=low, high=high)
        )
    law = np.stack(laws)
    law = law / law.sum()
    g = np.stack(scores)
    if mask_ipw:
        assert eta is not None
        keep_l = fluid_keep_probability(ell, step_time=step, eta=eta)
        kappa = batch * float(p @ ell) / (slots * step)
        w = np.where(keep_l > 0, kappa / np.where(keep_l > 0, keep_l, 1.0), 0.0)
        if ipw_clip is not None:
            w = np.minimum(w, ipw_clip)
        g = g * w[None, :, None]
    return gradient_moments(law, g, quality, penalty=penalty, baseline=baseline)


def _check_mask_ipw(mask_ipw: bool, ipw_clip: Any, eta: int | None) -> None:
    if mask_ipw and eta is None:
        raise invalid(
            "mask_ipw",
            "need a mask (eta) whose keep probability it inverts",
            mask_ipw,
            "Pass eta=η with mask_ipw=True, or mask_ipw=False.",
        )
    if ipw_clip is not None and (not mask_ipw or not ipw_clip > 0):
        raise invalid(
            "ipw_clip",
            "be > 0 and come with mask_ipw=True (the cap of the mask's weights)",
            ipw_clip,
            "Pass mask_ipw=True and ipw_clip=C > 0, or no ipw_clip.",
        )


def _exact_ratio_weights(
    target: list[Fraction],
    behaviour: list[Fraction],
    correction: str,
    cap: Any,
    low: Any,
    high: Any,
) -> tuple[list[Fraction] | None, Fraction]:
    """Token weights (or ``None``) and a sequence weight of one rollout, from its token probabilities."""
    rho = [a / b for a, b in zip(target, behaviour, strict=True)]
    seq = Fraction(1)
    for x in rho:
        seq *= x
    if correction == "none":
        return None, Fraction(1)
    if correction == "sequence_is":
        return None, seq
    if correction == "sequence_tis":
        return None, min(seq, cap)
    if correction == "token_tis":
        return [min(x, cap) for x in rho], Fraction(1)
    if correction == "icepop":
        return [x if low <= x <= high else Fraction(0) for x in rho], Fraction(1)
    # decoupled PPO at its proximal point: π_prox/μ, masked above the cap
    return [x if x <= cap else Fraction(0) for x in rho], Fraction(1)


#: The corrections :func:`async_gradient_exact` computes in Fractions (``geometric`` needs an
#: :math:`\ell`-th root, irrational in general: it stays in :func:`async_gradient`, float64).
EXACT_CORRECTIONS: tuple[str, ...] = tuple(c for c in CORRECTIONS if c != "geometric")


def async_gradient_exact(
    hazard: Any,
    behaviours: Any,
    features: Any,
    quality: Any,
    *,
    slots: int,
    batch: int,
    eta: int | None = None,
    correction: str = "none",
    penalty: Any = 0,
    baseline: Any = 0,
    cap: Any = 2,
    low: Any = Fraction(1, 2),
    high: Any = 2,
    mask_ipw: bool = False,
    ipw_clip: Any = None,
) -> GradientMoments:
    r""":func:`async_gradient` in exact arithmetic, for rational hazards.

    The same fluid model: trained law :math:`q(\ell, s) \propto p_{\mu_s}(\ell)\,P(s \mid \ell)\,
    1[s \le \eta]` with :math:`P(s\mid\ell)` from the keep law at the step time :math:`\Delta` of
    :math:`p_\theta` (:func:`fluid_step_time`, exact for a rational pmf), behaviour
    :math:`\mu_s` = ``behaviours[s]`` (the hazards of the version :math:`s` steps before the
    target), and the weights of each correction computed from the token probabilities
    :math:`h(t)`, :math:`1 - h(t)` as Fractions. Every quantity is a finite sum of rational terms,
    so the result is exact. Irrational cases are refused, not rounded: ``geometric``
    (:math:`(\prod_t\rho_t)^{1/\ell}`) and logistic hazards (:math:`\exp`) stay in
    :func:`async_gradient` (float64; it agrees with this function to about :math:`10^{-12}`
    relative on the same rational hazards, the rounding of float64 sums over the support).

    Parameters
    ----------
    hazard : sequence of Fraction (M,)
        The target's hazards :math:`h_\theta(t)`, last entry 1.
    behaviours : sequence of sequences of Fraction (S + 1, M)
        ``behaviours[s]``: the hazards of the behaviour of a sample :math:`s` versions stale;
        ``behaviours[0]`` must equal ``hazard``. :math:`S` must reach :math:`\lceil M/\Delta\rceil`.
    features : array_like of int or Fraction (M, d)
        :math:`\phi(t)` (the identity: the tabular policy).
    quality : sequence of Fraction (M,)
    slots, batch : int
    eta : int, optional
    correction : str
        One of :data:`EXACT_CORRECTIONS`.
    penalty, baseline, cap, low, high : Fraction or int
    mask_ipw : bool
    ipw_clip : Fraction, optional
        As in :func:`async_gradient`.

    Returns
    -------
    GradientMoments
        Exact.

    Examples
    --------
    >>> from fractions import Fraction as F
    >>> h = [F(1, 2), F(1, 2), F(1)]
    >>> stale = [h, [F(1, 3), F(1, 2), F(1)], [F(1, 4), F(1, 2), F(1)], [F(1, 5), F(1, 2), F(1)]]
    >>> eye = np.eye(3, dtype=int).tolist()
    >>> Q = [F(0), F(1, 2), F(1)]
    >>> g = async_gradient_exact(h, stale, eye, Q, slots=2, batch=2, correction="sequence_is")
    >>> on = policy_gradient(hazard_length_pmf(h), token_scores(h, eye).sum(axis=1), Q).mean
    >>> [a / b for a, b in zip(g.mean, on) if b]  # the direction of ∇J, exactly
    [Fraction(28, 31), Fraction(28, 31)]
    """
    if correction not in EXACT_CORRECTIONS:
        raise invalid(
            "correction",
            f"be one of {EXACT_CORRECTIONS} (geometric's l-th root is irrational in general)",
            correction,
            "Use async_gradient (float64) for geometric.",
        )
    _check_mask_ipw(mask_ipw, ipw_clip, eta)
    h, exact_h = _as_array(hazard, name="hazard", ndim=1)
    phi, exact_phi = _as_array(features, name="features", ndim=2)
    q, exact_q = _as_array(quality, name="quality", ndim=1)
    params = (penalty, baseline, cap, low, high) + (() if ipw_clip is None else (ipw_clip,))
    exact_params = all(isinstance(x, (Fraction, int)) and not isinstance(x, bool) for x in params)
    rows = [_as_array(b, name="behaviours", ndim=1) for b in behaviours]
    if not (exact_h and exact_phi and exact_q and exact_params and all(e for _, e in rows)):
        raise invalid(
            "hazard",
            "be rational, with every behaviour, feature, quality and parameter (exact mode)",
            hazard,
            "Pass Fractions or ints everywhere, or use async_gradient (float64).",
        )
    m = h.size
    if any(b.size != m for b, _ in rows) or not rows or list(rows[0][0]) != list(h):
        raise invalid(
            "behaviours",
            f"be a list of hazard vectors of length {m}, the first equal to hazard",
            behaviours,
            "Pass behaviours[0] = hazard and one row per staleness.",
        )
    pmf = hazard_length_pmf(list(h))
    step = fluid_step_time(pmf, slots=slots, batch=batch, eta=eta)
    s_need = math.ceil(Fraction(m) / step)
    if len(rows) < s_need + 1:
        raise invalid(
            "behaviours",
            f"cover every staleness up to ceil(M/Δ) = {s_need}",
            len(rows),
            f"Pass {s_need + 1} behaviour rows (s = 0..{s_need}).",
        )
    cap_, low_, high_ = Fraction(cap), Fraction(low), Fraction(high)
    tok = token_scores(list(h), phi)  # (M, M, d) exact
    d = phi.shape[1]

    def probs(hz: Any, ell: int) -> list[Fraction]:
        return [1 - hz[t] for t in range(ell - 1)] + [hz[ell - 1]]

    zero = Fraction(0)

    def keep_m(ell: int, mm: int) -> Fraction:
        return _exact_keep(ell, step, mm) if mm >= 0 else zero

    laws: list[list[Fraction]] = []
    scores: list[Any] = []
    for s_ in range(s_need + 1):
        if eta is not None and s_ > eta:
            break
        beh = list(rows[s_][0])
        p_b = hazard_length_pmf(beh)
        law_s = [p_b[ell - 1] * (keep_m(ell, s_) - keep_m(ell, s_ - 1)) for ell in range(1, m + 1)]
        if not any(x > 0 for x in law_s):
            continue
        g_s = np.empty((m, d), dtype=object)
        for ell in range(1, m + 1):
            tw, sw = _exact_ratio_weights(
                probs(list(h), ell), probs(beh, ell), correction, cap_, low_, high_
            )
            for c in range(d):
                col = [tok[ell - 1, t, c] for t in range(ell)]
                if tw is None:
                    g_s[ell - 1, c] = sw * sum(col, zero)
                else:
                    g_s[ell - 1, c] = sum((w * x for w, x in zip(tw, col, strict=True)), zero)
        laws.append(law_s)
        scores.append(g_s)
    total = sum((x for row in laws for x in row), zero)
    law = np.array([[x / total for x in row] for row in laws], dtype=object)
    g = np.stack(scores)
    if mask_ipw:
        assert eta is not None
        kappa = Fraction(batch) * expected_length(pmf) / (slots * step)
        w = [kappa / keep_m(ell, eta) if keep_m(ell, eta) > 0 else zero for ell in range(1, m + 1)]
        if ipw_clip is not None:
            w = [min(x, Fraction(ipw_clip)) for x in w]
        g = g * np.array(w, dtype=object)[None, :, None]
    return gradient_moments(law, g, list(q), penalty=penalty, baseline=baseline)


# ---------------------------------------------------------------------------------------------
# training: the real loop through refimpl.sim
# ---------------------------------------------------------------------------------------------


class TrainingRun(NamedTuple):
    """A training run of the toy policy through the simulator (see :func:`train_policy`)."""

    thetas: FloatArray
    """Parameters of every version ``0..steps``, shape (steps + 1, d)."""
    publish_times: FloatArray
    """Simulated time at which version ``j + 1`` was published, shape (steps,)."""
    mean_length: FloatArray
    r""":math:`E_{\theta_j}[L]`, exact, per version."""
    expected_reward: FloatArray
    r""":math:`J(\theta_j)`, exact, per version."""
    gradients: FloatArray
    r"""The corrected batch estimate :math:`\hat g_j` of every step, shape (steps, d)."""
    iterations: int
    """Passes of the consistency fixed point (simulate, train, redraw lengths) until stable."""
    trace: Any
    """The final :class:`refimpl.sim.SimTrace`."""


def _token_version_matrix(trace: Any, rows: NDArray[np.int64], m: int) -> NDArray[np.int64]:
    """Version of every token ``1..M`` of each row (token ``t`` starts after ``t − 1`` tokens)."""
    out = np.empty((rows.size, m), dtype=np.int64)
    starts_all = trace.segment_tokens
    vers_all = trace.segment_versions
    offs = trace.segment_offsets
    pos = np.arange(m, dtype=np.float64)
    for i, row in enumerate(rows):
        a, b = int(offs[row]), int(offs[row + 1])
        if b - a == 1:
            out[i] = vers_all[a]
            continue
        idx = np.searchsorted(starts_all[a:b], pos, side="right") - 1
        out[i] = vers_all[a:b][np.maximum(idx, 0)]
    return out


def _lengths_from_uniforms(
    hazards: FloatArray, versions: NDArray[np.int64], uniforms: FloatArray
) -> NDArray[np.int64]:
    """First ``t`` with ``u_t < h_{v_t}(t)``: the length each row's token decisions give."""
    m = uniforms.shape[1]
    h = hazards[versions, np.arange(m)[None, :]]
    stop = uniforms < h
    stop[:, -1] = True
    return np.asarray(np.argmax(stop, axis=1) + 1, dtype=np.int64)


def train_policy(
    theta0: ArrayLike,
    features: ArrayLike,
    quality: ArrayLike,
    *,
    slots: int,
    batch: int,
    steps: int,
    learning_rate: float,
    mode: str = "async",
    eta: int | None = None,
    partial: str = "none",
    launch: int | None = None,
    correction: str = "none",
    penalty: float = 0.0,
    baseline: str | float = "batch",
    cap: float = 2.0,
    low: float = 0.5,
    high: float = 2.0,
    seed: int = 0,
    max_iterations: int = 500,
    schedule: ArrayLike | None = None,
    leftovers: str = "drop",
    durations: ArrayLike | None = None,
) -> TrainingRun:
    r"""Train the toy policy on the batches that :func:`refimpl.sim.simulate` forms.

    The simulator decides which version launches each rollout, which versions generate its tokens
    (``partial`` rollouts mix versions), when it finishes and which batch trains it; the trainer at
    step :math:`j` holds :math:`\theta_j` and applies

    .. math::

        \theta_{j+1} = \theta_j + \alpha\,\frac1B \sum_{i \in \text{batch } j}
        (R_i - b_j)\,G_i, \qquad G_i = \sum_t w_{i,t}\,\nabla\log\pi_{\theta_j}(a_{i,t}),

    with :math:`w` the correction's weights between :math:`\pi_{\theta_j}` and the versions that
    generated each token (:func:`corrected_scores`; ``horvitz_thompson``/``hajek`` for
    ``mode='first_k'``), :math:`b_j` the batch mean reward (``baseline='batch'``) or 0.

    Each rollout carries seeded uniforms :math:`u_{t}` (one per position) and :math:`v` (its
    success): it stops at the first :math:`t` with :math:`u_t < h_{\theta_{v_t}}(t)` and succeeds
    iff :math:`v < Q(\ell)`. Lengths depend on versions and versions on lengths (through the
    timing), so the run is the fixed point of: simulate with the current lengths, train, redraw every
    launched rollout's length from its own token versions; repeated until no length changes. At the
    fixed point each rollout's length is exactly what its token versions' hazards decide, so the run
    is a realisation of the causal loop. Seeded: bit-for-bit reproducible.

    Parameters
    ----------
    theta0 : array_like (d,)
    features : array_like (M, d)
    quality : array_like (M,)
    slots, batch, steps : int
        :math:`N`, :math:`B` and trainer steps.
    learning_rate : float
        :math:`\alpha > 0`.
    mode : {'async', 'sync', 'first_k'}
        The simulator's dispatch; ``first_k`` launches ``launch`` rollouts per step.
    eta : int, optional
        Staleness bound: samples staler than it are dropped at consumption (the staleness mask of
        conventions §staleness-bound, ``over_bound='drop'``).
    partial : {'none', 'recompute', 'keep_kv'}
        Partial rollouts (async only).
    launch : int, optional
        ``first_k``: rollouts launched per step.
    correction : str
        One of :data:`CORRECTIONS`, or ``horvitz_thompson``/``hajek``/``clipped_ht`` (``first_k``;
        ``clipped_ht`` clips the weights at ``cap``).
    penalty, cap, low, high : float
        As in :func:`gradient_moments` and :func:`corrected_scores`.
    baseline : {'batch', 'none'} or float
        The batch mean reward, no baseline, or a constant.
    seed : int
    max_iterations : int
        Bound on the fixed-point passes; an error names it if reached.
    schedule : array_like (steps + 1, d), optional
        Replay a fixed policy path instead of training: version :math:`j` is ``schedule[j]``
        (``schedule[0]`` must equal ``theta0``); the estimates :math:`\hat g_j` are computed and
        recorded but not applied (a closed-form check of the expected gradient with stale
        behaviours). ``baseline`` may then be a number, a constant :math:`b`.
    leftovers : {'drop', 'carry'}
        ``first_k``: the rollouts not among the first ``batch`` are dropped or carried into the
        next step (their tokens stay those of the version that launched them: stale behaviours).
    durations : array_like (M,), optional
        Simulated time a rollout of ``ℓ`` tokens takes, ``durations[ℓ − 1]`` (non-decreasing,
        > 0); default ``ℓ`` itself (one unit per token). It maps a length law of another scale or
        shape onto the toy policy without changing which rollouts finish first. Needs
        ``partial='none'`` (a partial rollout's versions change at token positions).

    Returns
    -------
    TrainingRun

    Examples
    --------
    >>> phi = length_features(6, degree=1)
    >>> run = train_policy([0.0, -2.0], phi, np.linspace(0.1, 0.9, 6), slots=4, batch=4, steps=5,
    ...                    learning_rate=0.5, seed=1)
    >>> run.thetas.shape, bool(np.all(np.diff(run.publish_times) > 0))
    ((6, 2), True)
    """
    import refimpl.sim as rsim

    th0 = as_float_array(theta0, name="theta0", ndim=1)
    phi = as_float_array(features, name="features", ndim=2)
    qual = as_float_array(quality, name="quality", ndim=1)
    m = phi.shape[0]
    if qual.size != m:
        raise invalid("quality", f"have one value per length ({m})", qual, "Pass Q(1..M).")
    lr = as_real(learning_rate, name="learning_rate", low=0.0, low_open=True)
    n_steps = as_int(steps, name="steps", minimum=1, meaning="trainer steps")
    b_ = as_int(batch, name="batch", minimum=1, meaning="samples per step")
    n_ = as_int(slots, name="slots", minimum=1, meaning="generation slots")
    seed = as_int(seed, name="seed", minimum=0, meaning="random seed")
    allowed = CORRECTIONS + (FIRST_K_CORRECTIONS[1:] if mode == "first_k" else ())
    if correction not in allowed:
        raise invalid(
            "correction", f"be one of {allowed} for mode={mode!r}", correction, "Pick one."
        )
    if isinstance(baseline, str):
        if baseline not in ("batch", "none"):
            raise invalid("baseline", "be 'batch', 'none' or a number", baseline, "Pick one.")
    else:
        baseline = as_real(baseline, name="baseline")
    path: FloatArray | None = None
    if schedule is not None:
        path = as_float_array(schedule, name="schedule", ndim=2)
        if path.shape != (n_steps + 1, th0.size) or not np.array_equal(path[0], th0):
            raise invalid(
                "schedule",
                f"have shape (steps + 1, d) = ({n_steps + 1}, {th0.size}) and start at theta0",
                path,
                "Pass the parameters of versions 0..steps, the first equal to theta0.",
            )
    c = as_real(penalty, name="penalty", low=0.0)
    dur: FloatArray | None = None
    if durations is not None:
        dur = as_float_array(durations, name="durations", ndim=1)
        if dur.size != m or not np.all(dur > 0) or np.any(np.diff(dur) < 0) or partial != "none":
            raise invalid(
                "durations",
                f"have {m} positive non-decreasing entries, with partial='none'",
                dur,
                "Pass the simulated time of each length 1..M (sorted), and no partial rollouts.",
            )
    per_slot = n_steps * b_ / n_ if mode in ("async", "admission") else n_steps
    columns = math.ceil(per_slot * 1.5) + 16
    while True:
        try:
            return _train(
                th0,
                phi,
                qual,
                n_,
                b_,
                n_steps,
                lr,
                mode,
                eta,
                partial,
                launch,
                correction,
                c,
                baseline,
                cap,
                low,
                high,
                seed,
                max_iterations,
                columns,
                path,
                leftovers,
                dur,
            )
        except rsim.OutOfLengths:
            columns *= 2


def _uniforms(seed: int, slots: int, columns: int, m: int) -> tuple[FloatArray, FloatArray]:
    """Per-slot token and success uniforms; more columns extend the same streams (prefix-stable)."""
    tok = np.empty((slots, columns, m))
    suc = np.empty((slots, columns))
    for i in range(slots):
        tok[i] = np.random.default_rng([seed, i, 0]).random((columns, m))
        suc[i] = np.random.default_rng([seed, i, 1]).random(columns)
    return tok, suc


def _train(
    th0: FloatArray,
    phi: FloatArray,
    qual: FloatArray,
    n_: int,
    b_: int,
    n_steps: int,
    lr: float,
    mode: str,
    eta: int | None,
    partial: str,
    launch: int | None,
    correction: str,
    c: float,
    baseline: str | float,
    cap: float,
    low: float,
    high: float,
    seed: int,
    max_iterations: int,
    columns: int,
    path: FloatArray | None,
    leftovers: str = "drop",
    dur: FloatArray | None = None,
) -> TrainingRun:
    import refimpl.sim as rsim

    m = phi.shape[0]
    uniforms, success_u = _uniforms(seed, n_, columns, m)
    h0 = stop_hazard(th0, phi)
    lengths = _lengths_from_uniforms(
        h0[None, :], np.zeros((n_ * columns, m), dtype=np.int64), uniforms.reshape(-1, m)
    ).reshape(n_, columns)
    over = "drop" if eta is not None else "keep"
    reward_mean = qual - c * np.arange(1, m + 1)
    for iteration in range(1, max_iterations + 1):
        cfg = rsim.SimConfig(
            slots=n_,
            batch=b_,
            steps=n_steps,
            mode=mode,
            lengths=lengths.astype(np.float64) if dur is None else dur[lengths - 1],
            eta=eta,
            over_bound=over,
            partial=partial,
            launch=launch,
            leftovers=leftovers,
            seed=seed,
        )
        trace = rsim.simulate(cfg)
        order = trace.training_order()
        rows_all = np.arange(len(trace), dtype=np.int64)
        versions = _token_version_matrix(trace, rows_all, m)
        thetas = np.empty((n_steps + 1, th0.size))
        thetas[0] = th0
        hazards = np.empty((n_steps + 1, m))
        hazards[0] = h0
        log_stop = np.empty((n_steps + 1, m))
        log_cont = np.empty((n_steps + 1, m))
        log_stop[0], log_cont[0] = _log_hazards(th0, phi)
        step_of = trace.step[order]
        slot_col = (trace.slot[order], trace.index[order])
        # the token length of each trained rollout (the trace holds its duration)
        ell = np.asarray(trace.length[order] if dur is None else lengths[slot_col], dtype=np.int64)
        succ = success_u[slot_col] < qual[ell - 1]
        rewards = succ.astype(np.float64) - c * ell
        grads = np.zeros((n_steps, th0.size))
        for j in range(n_steps):
            sel = np.flatnonzero(step_of == j)
            th = thetas[j]
            h_j = hazards[j]
            g = np.zeros(th.size)
            if sel.size:
                rows = order[sel]
                r = rewards[sel]
                if isinstance(baseline, str):
                    adv = r - r.mean() if baseline == "batch" else r
                else:
                    adv = r - baseline
                gi = _sample_scores(
                    j,
                    hazards,
                    log_stop,
                    log_cont,
                    phi,
                    versions[rows],
                    ell[sel],
                    correction,
                    cap,
                    low,
                    high,
                )
                if correction in ("horvitz_thompson", "hajek", "clipped_ht"):
                    pi = inclusion_probability_pmf(
                        hazard_length_pmf(h_j), n=int(launch or n_), k=b_
                    )
                    wk = b_ / ((launch or n_) * pi[ell[sel] - 1])
                    if correction == "clipped_ht":
                        wk = np.minimum(wk, cap)
                    scale = wk / wk.sum() if correction == "hajek" else wk / b_
                    g = (scale * adv) @ gi
                else:
                    g = (adv @ gi) / b_
            grads[j] = g
            thetas[j + 1] = th + lr * g if path is None else path[j + 1]
            hazards[j + 1] = stop_hazard(thetas[j + 1], phi)
            log_stop[j + 1], log_cont[j + 1] = _log_hazards(thetas[j + 1], phi)
        implied = _lengths_from_uniforms(hazards, versions, uniforms[trace.slot, trace.index])
        new = lengths.copy()
        new[trace.slot, trace.index] = implied
        if np.array_equal(new, lengths):
            pmfs = [hazard_length_pmf(h) for h in hazards]
            return TrainingRun(
                thetas,
                np.asarray(trace.publish_times, dtype=np.float64),
                np.asarray([expected_length(p) for p in pmfs], dtype=np.float64),
                np.asarray([float(p @ reward_mean) for p in pmfs], dtype=np.float64),
                grads,
                iteration,
                trace,
            )
        lengths = new
    raise invalid(
        "max_iterations",
        "be large enough for the lengths to reach their fixed point",
        max_iterations,
        "Pass a larger max_iterations (or a smaller learning_rate).",
    )


def _sample_scores(
    version: int,
    hazards: FloatArray,
    log_stop: FloatArray,
    log_cont: FloatArray,
    features: FloatArray,
    versions: NDArray[np.int64],
    lengths: NDArray[np.int64],
    correction: str,
    cap: float,
    low: float,
    high: float,
) -> FloatArray:
    """``G_i`` of each trained sample: corrected score at ``version`` given its token versions."""
    hazard = hazards[version]
    m = hazard.size
    t = np.arange(m)
    valid = (t[None, :] < lengths[:, None]).astype(np.float64)
    is_stop = t[None, :] == (lengths[:, None] - 1)
    ht = hazard[None, :]
    tok = np.where(is_stop[:, :, None], (1.0 - ht)[:, :, None] * features[None], 0.0)
    tok = tok + np.where(
        (valid > 0)[:, :, None] & ~is_stop[:, :, None], -ht[:, :, None] * features[None], 0.0
    )
    if correction in ("none", "horvitz_thompson", "hajek", "clipped_ht"):
        return np.asarray(tok.sum(axis=1), dtype=np.float64)
    lt = np.where(is_stop, log_stop[version][None, :], log_cont[version][None, :])
    lb = np.where(is_stop, log_stop[versions, t[None, :]], log_cont[versions, t[None, :]])
    lt = np.where(valid > 0, lt, 0.0)
    lb = np.where(valid > 0, lb, 0.0)
    seq = tok.sum(axis=1)
    if correction == "sequence_is":
        w = np.exp(np.minimum(((lt - lb) * valid).sum(axis=1), _LOG_MAX))
        return np.asarray(w[:, None] * seq, dtype=np.float64)
    if correction in ("sequence_tis", "geometric"):
        level: Any = "sequence" if correction == "sequence_tis" else "geometric"
        w = truncated_is_weights(lt, lb, cap=cap, level=level, mask=valid)
        return np.asarray(w[:, None] * seq, dtype=np.float64)
    if correction == "token_tis":
        wt = truncated_is_weights(lt, lb, cap=cap, level="token", mask=valid)
    elif correction == "icepop":
        wt = masked_is_weights(lt, lb, low=low, high=high, level="token", mask=valid)
    else:
        wt = decoupled_ppo_weights(lt, lb, cap=cap, mask=valid)
    return np.asarray((wt[:, :, None] * tok).sum(axis=1), dtype=np.float64)
