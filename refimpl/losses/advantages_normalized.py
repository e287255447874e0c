r"""Leave-one-out advantages standardised over the batch (RLOO with advantage normalisation).

RLOO's advantage of a sequence is its reward minus the mean of the other rewards of its group
(:func:`refimpl.losses.advantages.rloo_advantages`). Some trainers then standardise these
advantages over the whole batch, as TRL 1.16.0's ``RLOOTrainer`` does with
``normalize_advantages=True`` (``(A − nanmean(A)) / (nanstd(A) + 1e-4)`` in
``_generate_and_score_completions``). Because the advantages of every group sum to 0, the batch
mean is 0 whenever no group is a singleton left at its raw reward, and the standardisation is a
division by the batch's standard deviation: it rescales the whole update, not the ranking of the
sequences.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import as_real, invalid
from refimpl.losses._common import as_choice
from refimpl.losses.advantages import rloo_advantages

__all__ = ["rloo_normalized_advantages"]

FloatArray = NDArray[np.float64]


def _mean_and_variance(values: Any, ddof: int) -> tuple[float, float]:
    """Batch mean and variance, exact when ``values`` are Fractions."""
    if isinstance(values, list):
        n = len(values)
        centre = sum(values, Fraction(0)) / n
        return float(centre), float(
            sum(((x - centre) ** 2 for x in values), Fraction(0)) / (n - ddof)
        )
    a = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        centre = float(np.mean(a))
        variance = float(np.sum((a - centre) ** 2) / (a.size - ddof))
    if not np.isfinite(variance):
        raise invalid(
            "rewards",
            "have leave-one-out advantages whose batch variance is finite in float64",
            "advantages beyond ~1e154",
            "Rescale the rewards (the standardised advantages do not depend on their scale).",
        )
    return centre, variance


def rloo_normalized_advantages(
    rewards: ArrayLike | Sequence[Fraction],
    *,
    group: ArrayLike,
    eps: float = 1e-4,
    std: Literal["sample", "population"] = "sample",
    singleton: Literal["zero", "raw", "error"] = "zero",
) -> FloatArray:
    r"""RLOO advantages standardised over the batch: ``(A − mean A) / (std A + eps)``.

    .. math::

        A_i = r_i - \frac{1}{n_g - 1}\sum_{j \in g,\, j \neq i} r_j, \qquad
        \hat A_i = \frac{A_i - \bar A}{s + \varepsilon}, \qquad
        s^2 = \frac{1}{B - \delta}\sum_i (A_i - \bar A)^2,

    with :math:`\bar A` the mean over the :math:`B` sequences of the batch and :math:`\delta = 1`
    (``std="sample"``, Bessel's correction) or 0 (``"population"``).

    Parameters
    ----------
    rewards : array_like, shape (B,), or sequence of Fraction
        One outcome reward per sequence; finite. Fractions make the advantages, their mean and
        their variance exact (the square root and the division are then rounded once each).
    group : array_like of int, shape (B,)
        Prompt id of each sequence (sizes may differ).
    eps : float
        ``>= 0``, added to the standard deviation (TRL 1.16.0: ``1e-4``).
    std : {"sample", "population"}
        The batch standard deviation's divisor, ``B − 1`` or ``B``.
    singleton : {"zero", "raw", "error"}
        What a group of one sequence gets before the standardisation, as in
        :func:`~refimpl.losses.advantages.rloo_advantages`.

    Returns
    -------
    ndarray of float64, shape (B,)
        The standardised advantages; all 0 when the advantages are all equal and ``eps = 0``.

    Raises
    ------
    ValueError
        As :func:`~refimpl.losses.advantages.rloo_advantages`; a negative ``eps``; an unknown
        ``std``; a single reward with ``std="sample"``.

    Notes
    -----
    With every group of two sequences or more (or ``singleton="zero"``), each group's advantages
    sum to 0, so :math:`\bar A = 0`: a group whose rewards are all equal keeps advantage 0, and
    shifting every reward by a constant changes nothing. Accuracy: a few ulps of
    :math:`(|A_i| + \max_j |A_j|)/(s + \varepsilon)` per entry.

    References
    ----------
    Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style Optimization for Learning
    from Human Feedback in LLMs", arXiv 2402.14740 (the leave-one-out baseline).

    Examples
    --------
    >>> from refimpl.losses.advantages_normalized import rloo_normalized_advantages
    >>> rloo_normalized_advantages([1.0, 0.0, 3.0, 3.0], group=[0, 0, 1, 1], eps=0.0)
    array([ 1.22474487, -1.22474487,  0.        ,  0.        ])
    """
    kind = as_choice(std, name="std", choices=("sample", "population"))
    e = as_real(eps, name="eps", low=0.0, meaning="added to the batch standard deviation")
    advantages = rloo_advantages(rewards, group=group, singleton=singleton)
    size = len(advantages)
    ddof = 1 if kind == "sample" else 0
    if size <= ddof:
        raise invalid(
            "rewards",
            "hold at least two rewards for a batch std='sample'",
            rewards,
            "Found 1; pass a larger batch, or std='population'.",
        )
    mean, variance = _mean_and_variance(advantages, ddof)
    scale = float(np.sqrt(variance)) + e
    if isinstance(advantages, list):  # Fractions: the centring is exact, rounded once
        centre = sum(advantages, Fraction(0)) / size
        centred = np.asarray([float(a - centre) for a in advantages], dtype=np.float64)
    else:
        centred = np.asarray(advantages, dtype=np.float64) - mean
    if scale == 0.0:  # every advantage equal and eps = 0: nothing to standardise
        return np.zeros(size, dtype=np.float64)
    return np.asarray(centred / scale, dtype=np.float64)
