r"""The exact objective, its gradient, and the moments of a per-sample gradient estimator."""

from __future__ import annotations

from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np

from refimpl._validation import as_real, invalid
from refimpl.learning._common import AnyArray, _as_array


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
    >>> from refimpl.learning import hazard_length_pmf, token_scores
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
    >>> from refimpl.learning import hazard_length_pmf, token_scores
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
    >>> from refimpl.learning import hazard_length_pmf, token_scores
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
