"""A mix of problems: adaptive effort against one fixed length budget for all
(claims EM1–EM6 of ``proofs/effort_mix.py``).

:func:`budget_frontier` (one length for every problem: budget forcing), :func:`adaptive_gap`
(the gap between the adaptive frontier and that curve, at each effort), :func:`frontier_quality`
(the adaptive frontier's mean quality at a given mean cost) and :func:`difficulty_mix` (a
log-normal law of difficulty as equally likely classes).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import (
    as_float_array,
    as_int,
    as_real,
    invalid,
    mismatch,
)
from refimpl.effort._checks import _out, _require_nonnegative
from refimpl.effort._mix import _class_optimum, _class_quality, _mix, _mix_effort, _mix_mean
from refimpl.effort.frontier import EffortFrontier, effort_frontier
from refimpl.effort.reward import saturating_quality

__all__ = [
    "AdaptiveGap",
    "DifficultyMix",
    "adaptive_gap",
    "budget_frontier",
    "difficulty_mix",
    "frontier_quality",
]


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
        Number of classes, ``1 <= nodes <= 10^6`` (the rule errs by about ``1/nodes``).

    Returns
    -------
    DifficultyMix
        ``q_max``, ``lam`` (increasing) and ``weights`` (each ``1/nodes``, as float64).

    Raises
    ------
    TypeError
        If a parameter has the wrong type.
    ValueError
        If a parameter is outside its domain, or a class's ``λ`` leaves float64's range (it
        overflows, or underflows to 0).

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
    if n > _MAX_NODES:
        raise invalid(
            "nodes",
            f"be <= {_MAX_NODES} (the rule errs by about 1/nodes: a million classes is plenty)",
            nodes,
            f"Pass nodes <= {_MAX_NODES}.",
        )
    z = _normal_quantile((np.arange(n) + 0.5) / n)
    return DifficultyMix(
        q_max=_out(np.full(n, q)), lam=_class_scales(m, s, z), weights=_out(np.full(n, 1.0 / n))
    )


#: Classes of :func:`difficulty_mix`: its mid-quantile rule errs by about 1/nodes (1.1e-3 at 64),
#: so more than a million classes change nothing measurable and only allocate memory.
_MAX_NODES = 1_000_000


def _class_scales(m: float, s: float, z: NDArray[np.float64]) -> NDArray[np.float64]:
    """``λ_i = m e^{σ z_i}``, refused unless every one is a positive, finite float64."""
    with np.errstate(over="ignore", under="ignore"):
        # the product is exact where e^{σz} is a normal float; the log form where it is not
        direct = m * np.exp(s * z)
        lam = np.where(np.abs(s * z) < 700.0, direct, np.exp(np.log(m) + s * z))
    bad = ~np.isfinite(lam) | (lam <= 0.0)
    if np.any(bad):
        side = "overflows" if np.any(~np.isfinite(lam)) else "underflows to 0"
        raise mismatch(
            ("median", "sigma"),
            "keep every class's λ = median·exp(sigma·z) a positive, finite float64",
            f"median={m!r} and sigma={s!r}, where λ {side} (z spans ±{float(np.max(np.abs(z))):.3g})",
            "Pass a smaller sigma (a spread of ln λ that wide has no meaning in tokens) or a "
            "median nearer 1.",
        )
    return _out(lam)


def _normal_quantile(p: NDArray[np.float64]) -> NDArray[np.float64]:
    from scipy.special import ndtri

    return _out(ndtri(p))


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
    # class d spends iff u > threshold_d; in log form, as λ/q_max can leave float64
    threshold = np.log(mix.lam) - np.log(mix.q_max)
    lo = np.full(c.shape, float(threshold.min()))
    total = float(np.dot(w, mix.lam))
    share = w * mix.lam / total  # a weighted mean of the thresholds needs no λ·threshold product
    with np.errstate(over="ignore"):  # C/Σwλ beyond float64: the root is too (every class spends)
        hi = np.maximum(c / total + float(np.dot(share, threshold)), float(threshold.max()))

    def mean_cost(u: NDArray[np.float64]) -> Any:
        with np.errstate(over="ignore"):  # a cost beyond float64 is inf: above every finite C
            return np.maximum(u[..., None] - threshold, 0.0) @ (w * mix.lam)

    for _ in range(1100):
        mid = 0.5 * (lo + hi)
        if np.all((mid == lo) | (mid == hi)):
            break
        short = mean_cost(mid) < c
        lo = np.where(short, mid, lo)
        hi = np.where(short, hi, mid)
    u = hi
    spends = u[..., None] > threshold
    with np.errstate(over="ignore", under="ignore"):  # λ e^{−u} = q_max e^{threshold − u}
        quality = np.where(
            spends, np.maximum(-mix.q_max * np.expm1(threshold - u[..., None]), 0.0), 0.0
        )
    return _out(np.where(c > 0.0, quality @ w, 0.0))
