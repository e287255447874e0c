r"""Outcome advantages with other baselines and scales: GPG, OPO, ReMax, MaxRL and Pass@k.

Each function takes one outcome reward per sequence, ``rewards`` of shape ``(B,)``, and returns
one advantage per sequence, shape ``(B,)``, as :mod:`refimpl.losses.advantages` does for GRPO and
RLOO (whose conventions for ``group`` and ``singleton`` these share: see that module). They differ
in the baseline subtracted and the scale divided by:

===========================  =====================================  ==============================
estimator                    baseline :math:`b_i`                   scale
===========================  =====================================  ==============================
:func:`gpg_advantages`       group mean                             :math:`\alpha / F`
:func:`opo_advantages`       length-weighted group mean             1
:func:`remax_advantages`     the greedy response's reward           1
:func:`maxrl_advantages`     group mean :math:`p`                   :math:`1/(p + \varepsilon)`
:func:`passk_advantages`     second-best reward (best response)     :math:`1/D(\sigma)`
===========================  =====================================  ==============================

The per-token and multi-reward estimators (GDPO, the optimal token baseline) are in
:mod:`refimpl.losses.advantages_tokens`.

**Exact mode.** Rewards given as a sequence of :class:`fractions.Fraction` (ints allowed, at least
one ``Fraction``) give a ``list`` of exact ``Fraction`` advantages wherever the formula is
rational: GPG, OPO, ReMax, MaxRL with ``eps=0`` and Pass@k with ``std="none"``.

None of these is differentiated: advantages are computed from rewards under ``torch.no_grad()``
in every framework, so they have a value and no gradient.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import as_float_array, as_real, exact_list, invalid, mismatch
from refimpl.losses._common import as_choice
from refimpl.losses.advantages import (
    _as_eps,
    _as_groups,
    _as_rewards,
    _divide,
    _exact_centred,
    _float_centred_and_variance,
    _group_means,
    _refuse_singletons,
    _scale,
)

__all__ = [
    "gpg_advantages",
    "maxrl_advantages",
    "opo_advantages",
    "passk_advantages",
    "remax_advantages",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.intp]
Singleton = Literal["zero", "raw", "error"]
Std = Literal["sample", "population", "none"]

_SINGLETONS = ("zero", "raw", "error")
_STDS = ("sample", "population", "none")


# ---------------------------------------------------------------------------------------------
# GPG
# ---------------------------------------------------------------------------------------------


def _gpg_alpha(alpha: Any, rewards: FloatArray) -> Fraction | float:
    """``B / max(#{r_i != 0}, 1)`` for ``alpha="nonzero"``, else the given positive number."""
    if isinstance(alpha, str):
        as_choice(alpha, name="alpha", choices=("nonzero",))
        return Fraction(rewards.size, max(int(np.count_nonzero(rewards)), 1))
    value = as_real(alpha, name="alpha", low=0.0, low_open=True, meaning="the gradient scale")
    return Fraction(alpha) if isinstance(alpha, Fraction | int) else value


def gpg_advantages(
    rewards: ArrayLike | Sequence[Fraction],
    *,
    group: ArrayLike,
    f_norm: float = 1.0,
    alpha: float | Literal["nonzero"] = "nonzero",
    singleton: Singleton = "zero",
) -> Any:
    r"""GPG advantages: the group-centred reward, scaled by the batch factor :math:`\alpha/F`.

    .. math::

        A_i = \frac{\alpha}{F}\,\bigl(r_i - \bar r_{g(i)}\bigr), \qquad
        \alpha = \frac{B}{\max(M, 1)}, \quad M = \#\{i : r_i \neq 0\}
        \ (\texttt{alpha="nonzero"}).

    :math:`\alpha` rescales the batch so that the sequences with a non-zero reward carry the
    gradient a batch of :math:`M` sequences would (the GPG paper's "accurate gradient estimation"
    corrects for sequences that contribute nothing); a number passed as ``alpha`` fixes it.

    .. warning::

        verl 0.9.1 (``core_algos.compute_gpg_outcome_advantage``) recomputes
        :math:`\alpha = B/\max(M, 1)` from the batch's rewards whatever ``alpha`` it is passed, and
        gives a group of one mean 0: its advantage is :math:`\alpha r_i / F`
        (``singleton="raw"``).

    Parameters
    ----------
    rewards : array_like, shape (B,), or sequence of Fraction
        One outcome reward per sequence; finite.
    group : array_like of int, shape (B,)
        Prompt id of each sequence (equal ids form a group; sizes may differ).
    f_norm : float
        :math:`F > 0`, a constant divisor.
    alpha : "nonzero" or float
        ``"nonzero"`` (default): :math:`B/\max(M, 1)` from the rewards; or a fixed :math:`\alpha > 0`.
    singleton : {"zero", "raw", "error"}
        What a group of one sequence gets: 0, :math:`\alpha r_i/F` (baseline 0), or a refusal.

    Returns
    -------
    ndarray of float64, shape (B,), or list of Fraction
        The advantages; exact Fractions when ``rewards`` are Fractions.

    Raises
    ------
    ValueError
        If ``rewards`` is empty or not finite, ``group`` is not one integer per reward,
        ``f_norm <= 0`` (or so small that an advantage leaves float64), ``alpha`` is neither
        ``"nonzero"`` nor positive, or a group is a singleton with ``singleton="error"``.

    Notes
    -----
    Each group's advantages sum to 0 (claim AB1); with :math:`\alpha = F = 1` they are Dr GRPO's.

    References
    ----------
    Chu et al. 2025, "GPG: A Simple and Strong Reinforcement Learning Baseline for Model
    Reasoning" (arXiv 2504.02546).

    Examples
    --------
    >>> from fractions import Fraction
    >>> import refimpl.losses.advantages_baselines as ab
    >>> ab.gpg_advantages([1.0, 0.0, 0.0, 0.0], group=[0, 0, 1, 1])
    array([ 2., -2.,  0.,  0.])
    >>> ab.gpg_advantages([Fraction(1), Fraction(0), Fraction(1)], group=[0, 0, 0], f_norm=2.0)
    [Fraction(1, 4), Fraction(-1, 2), Fraction(1, 4)]
    """
    r, exact = _as_rewards(rewards)
    inverse, counts = _as_groups(group, r.size)
    norm = as_real(f_norm, name="f_norm", low=0.0, low_open=True, meaning="a constant divisor")
    a = _gpg_alpha(alpha, r)
    rule = as_choice(singleton, name="singleton", choices=_SINGLETONS)
    _refuse_singletons(counts, inverse, rule, group)
    alone = counts[inverse] == 1
    if exact is not None:
        factor = Fraction(a) / Fraction(norm)
        centred = _exact_centred(exact, inverse, counts)
        return [
            factor * ((x if rule == "raw" else Fraction(0)) if s else c)
            for x, s, c in zip(exact, alone, centred, strict=True)
        ]
    centred_f = r - _group_means(r, inverse, counts)[inverse]
    base = np.where(alone, r if rule == "raw" else 0.0, centred_f)
    with np.errstate(over="ignore"):
        out = float(a) * base / norm
    if not np.all(np.isfinite(out)):  # a tiny f_norm (or huge rewards): α(r − r̄)/F leaves float64
        raise mismatch(
            ("rewards", "f_norm"),
            "keep every advantage alpha·(r − mean)/f_norm finite in float64",
            f"f_norm={norm!r} and alpha={float(a)!r}",
            "Pass a larger f_norm (the paper's is 1), or rescale the rewards.",
        )
    return np.asarray(out, dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# OPO
# ---------------------------------------------------------------------------------------------


def _as_lengths(lengths: ArrayLike, size: int) -> FloatArray:
    arr = as_float_array(lengths, name="lengths", ndim=1)
    if arr.shape != (size,):
        raise mismatch(
            ("lengths", "rewards"),
            "have the same length (one response length per reward)",
            f"lengths.shape={arr.shape} and rewards.shape={(size,)}",
            "Pass the number of valid tokens of each sequence (the row sums of its mask).",
        )
    if np.any(arr < 0):
        first = int(np.flatnonzero(arr < 0)[0])
        raise invalid(
            "lengths",
            "be >= 0 (a number of tokens)",
            arr,
            f"Entry {first} is {arr[first]!r}; pass the row sums of the response mask.",
        )
    return arr


def opo_advantages(
    rewards: ArrayLike | Sequence[Fraction],
    *,
    group: ArrayLike,
    lengths: ArrayLike,
    singleton: Singleton = "zero",
) -> Any:
    r"""OPO advantages: each reward minus its group's length-weighted mean reward.

    .. math::

        A_i = r_i - b_{g(i)}, \qquad b_g = \frac{\sum_{j \in g} \ell_j r_j}{\sum_{j \in g} \ell_j},

    with :math:`\ell_j` the number of tokens of response :math:`j`. With the sequence-level loss
    summed over tokens, this is the baseline that minimises the gradient's variance under OPO's
    approximation (the score's squared norm proportional to the length); equal lengths give the
    group mean (Dr GRPO).

    .. warning::

        verl 0.9.1 (``core_algos.compute_opo_outcome_advantage``) gives a group of one baseline 0,
        so its advantage is its raw reward (``singleton="raw"``); a group whose lengths are all 0
        divides 0 by 0 there (refused here).

    Parameters
    ----------
    rewards : array_like, shape (B,), or sequence of Fraction
        One outcome reward per sequence; finite.
    group : array_like of int, shape (B,)
        Prompt id of each sequence.
    lengths : array_like, shape (B,)
        :math:`\ell_i >= 0`, the number of valid tokens of each response; every group of two or
        more needs a positive total.
    singleton : {"zero", "raw", "error"}
        What a group of one sequence gets: 0, its raw reward (baseline 0), or a refusal.

    Returns
    -------
    ndarray of float64, shape (B,), or list of Fraction
        The advantages; exact Fractions when ``rewards`` are Fractions and ``lengths`` integers.

    Raises
    ------
    ValueError
        If ``rewards`` is empty or not finite, ``group`` or ``lengths`` do not match the rewards,
        a length is negative, a group's lengths sum to 0, or a group is a singleton with
        ``singleton="error"``.

    Notes
    -----
    :math:`\sum_{i \in g} \ell_i A_i = 0`: the length-weighted advantages of a group cancel
    (claim AB2).

    References
    ----------
    OPO, as verl 0.9.1 cites it: arXiv 2505.23585.

    Examples
    --------
    >>> from fractions import Fraction
    >>> import refimpl.losses.advantages_baselines as ab
    >>> ab.opo_advantages([1.0, 0.0], group=[0, 0], lengths=[1, 3])
    array([ 0.75, -0.25])
    >>> ab.opo_advantages([Fraction(1), Fraction(0)], group=[0, 0], lengths=[1, 3])
    [Fraction(3, 4), Fraction(-1, 4)]
    """
    r, exact = _as_rewards(rewards)
    inverse, counts = _as_groups(group, r.size)
    lens = _as_lengths(lengths, r.size)
    rule = as_choice(singleton, name="singleton", choices=_SINGLETONS)
    _refuse_singletons(counts, inverse, rule, group)
    total = np.bincount(inverse, weights=lens, minlength=counts.size)
    empty = (total == 0) & (counts >= 2)
    if np.any(empty):
        raise invalid(
            "lengths",
            "sum to more than 0 in every group of two or more (the baseline weights by length)",
            lens,
            f"Group {int(np.flatnonzero(empty)[0])} (in sorted id order) has no token; drop "
            "empty responses before computing advantages.",
        )
    alone = counts[inverse] == 1
    if exact is not None and np.all(lens == np.round(lens)):
        ints = [int(x) for x in lens]
        num = [Fraction(0)] * counts.size
        for x, n, g in zip(exact, ints, inverse, strict=True):
            num[g] += n * x
        tot = [int(t) for t in total]
        return [
            (x if rule == "raw" else Fraction(0)) if s else x - num[g] / tot[g]
            for x, s, g in zip(exact, alone, inverse, strict=True)
        ]
    lo = np.full(counts.size, np.inf)
    np.minimum.at(lo, inverse, r)
    shifted = np.bincount(inverse, weights=lens * (r - lo[inverse]), minlength=counts.size)
    baseline = lo + np.divide(shifted, total, out=np.zeros_like(total), where=total > 0)
    out = np.where(alone, r if rule == "raw" else 0.0, r - baseline[inverse])
    return np.asarray(out, dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# ReMax
# ---------------------------------------------------------------------------------------------


def _rationals(values: Any) -> list[Fraction] | None:
    """The entries as Fractions when every one is a Fraction or an int (not a bool), else None."""
    return None if isinstance(values, np.ndarray) else exact_list([*list(values), Fraction(0)])


def remax_advantages(rewards: Any, *, baselines: Any) -> Any:
    r"""ReMax advantages: each reward minus the reward of the greedy response to its prompt.

    .. math::

        A_i = r_i - b_i, \qquad b_i = r(x_i, \bar y_i), \quad
        \bar y_i = \text{greedy decoding of } \pi(\cdot \mid x_i).

    The baseline does not depend on the sampled response, so the estimate stays unbiased.

    .. warning::

        verl 0.9.1 (``core_algos.compute_remax_outcome_advantage``) subtracts the baseline at
        every valid token from the reward-to-go; for an outcome reward (one reward on the last
        valid token) that is :math:`r_i - b_i` at every valid token, as here.

    Parameters
    ----------
    rewards : array_like, shape (B,), or sequence of Fraction
        One outcome reward per sampled sequence; finite.
    baselines : array_like, shape (B,), or sequence of Fraction
        The reward of the greedy response to the same prompt; finite.

    Returns
    -------
    ndarray of float64, shape (B,), or list of Fraction
        The advantages; exact Fractions when both are Fractions (ints allowed).

    Raises
    ------
    ValueError
        If either is empty or not finite, or their shapes differ.

    References
    ----------
    ReMax, as verl 0.9.1 cites it: arXiv 2310.10505.

    Examples
    --------
    >>> from fractions import Fraction
    >>> import refimpl.losses.advantages_baselines as ab
    >>> ab.remax_advantages([1.0, 0.0], baselines=[0.5, 0.5])
    array([ 0.5, -0.5])
    >>> ab.remax_advantages([Fraction(1, 3)], baselines=[Fraction(1, 2)])
    [Fraction(-1, 6)]
    """
    r, exact = _as_rewards(rewards)
    b = as_float_array(baselines, name="baselines", ndim=1)
    if b.shape != r.shape:
        raise mismatch(
            ("baselines", "rewards"),
            "have the same shape (one greedy reward per sampled sequence)",
            f"baselines.shape={b.shape} and rewards.shape={r.shape}",
            "Pass the greedy response's reward of each sequence's prompt.",
        )
    if exact is not None or exact_list(baselines) is not None:
        xs, ys = _rationals(rewards), _rationals(baselines)
        if xs is not None and ys is not None:
            return [x - y for x, y in zip(xs[:-1], ys[:-1], strict=True)]
    return np.asarray(r - b, dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# MaxRL
# ---------------------------------------------------------------------------------------------


def maxrl_advantages(
    rewards: ArrayLike | Sequence[Fraction],
    *,
    group: ArrayLike,
    eps: float = 1e-6,
    singleton: Singleton = "zero",
) -> Any:
    r"""MaxRL advantages: the group-centred reward divided by the group's mean reward.

    .. math::

        A_i = \frac{r_i - p_{g(i)}}{p_{g(i)} + \varepsilon}, \qquad
        p_g = \frac{1}{n_g}\sum_{j \in g} r_j,

    with :math:`0/0 := 0` when :math:`\varepsilon = 0` (a group with no success). For binary
    rewards :math:`p_g` is the group's pass rate, and with :math:`K = n_g p_g` successes
    :math:`\frac{1}{n_g}\sum_i A_i\nabla\log\pi(y_i) = \frac1K\sum_{i:\,r_i = 1}
    \nabla\log\pi(y_i) - \frac{1}{n_g}\sum_i\nabla\log\pi(y_i)` (0 for a group with no
    success), whose expectation is the gradient of the maximum-likelihood objective
    :math:`\log p_\theta = -\sum_k (1 - p_\theta)^k/k` truncated at :math:`n_g - 1` terms,
    where REINFORCE's is :math:`\nabla p_\theta` (the first term): a prompt solved rarely
    weighs about :math:`1/p_\theta` times more.

    .. warning::

        SkyRL 0.3.0 (``ppo_utils.compute_maxrl_advantage``) adds ``epsilon = 1e-6`` to the mean
        and gives a group of one its raw reward (mean 0, no division: ``singleton="raw"``); its
        group mean is ``torch.mean(torch.tensor(list))`` of the scores.

    Parameters
    ----------
    rewards : array_like, shape (B,), or sequence of Fraction
        One outcome reward per sequence; finite and ``>= 0`` (the mean is a success rate).
    group : array_like of int, shape (B,)
        Prompt id of each sequence.
    eps : float
        ``ε >= 0`` added to the mean.
    singleton : {"zero", "raw", "error"}
        What a group of one sequence gets: 0, its raw reward, or a refusal.

    Returns
    -------
    ndarray of float64, shape (B,), or list of Fraction
        The advantages; exact Fractions when ``rewards`` are Fractions and ``eps`` is 0.

    Raises
    ------
    ValueError
        If ``rewards`` is empty, not finite or negative, ``group`` is not one integer per reward,
        ``eps < 0``, or a group is a singleton with ``singleton="error"``.

    Notes
    -----
    Each group's advantages sum to 0, and multiplying every reward by :math:`c > 0` leaves them
    unchanged when :math:`\varepsilon = 0` (claim AB3). For binary rewards the expected update
    :math:`\mathbb{E}[\frac1n\sum_i A_i\nabla\log\pi(y_i)]` is
    :math:`\nabla(-\sum_{k=1}^{n-1}(1 - p_\theta)^k/k)` (claim AB4).

    References
    ----------
    Tajwar et al. 2026, "Maximum Likelihood Reinforcement Learning" (arXiv 2602.02710).

    Examples
    --------
    >>> from fractions import Fraction
    >>> import refimpl.losses.advantages_baselines as ab
    >>> ab.maxrl_advantages([1.0, 0.0, 0.0, 0.0], group=[0, 0, 0, 0], eps=0.0)
    array([ 3., -1., -1., -1.])
    >>> ab.maxrl_advantages([Fraction(1), Fraction(1), Fraction(0)], group=[0, 0, 0], eps=0.0)
    [Fraction(1, 2), Fraction(1, 2), Fraction(-1, 1)]
    """
    r, exact = _as_rewards(rewards)
    if np.any(r < 0):
        first = int(np.flatnonzero(r < 0)[0])
        raise invalid(
            "rewards",
            "be >= 0 (MaxRL divides by the group mean, a success rate)",
            r,
            f"Entry {first} is {r[first]!r}; pass rewards in [0, 1] (1 = correct).",
        )
    inverse, counts = _as_groups(group, r.size)
    e = _as_eps(eps)
    rule = as_choice(singleton, name="singleton", choices=_SINGLETONS)
    _refuse_singletons(counts, inverse, rule, group)
    alone = counts[inverse] == 1
    if exact is not None and e == 0.0:
        centred = _exact_centred(exact, inverse, counts)
        means = [x - c for x, c in zip(exact, centred, strict=True)]
        return [
            (x if rule == "raw" else Fraction(0)) if s else (c / m if m else Fraction(0))
            for x, s, c, m in zip(exact, alone, centred, means, strict=True)
        ]
    mean = _group_means(r, inverse, counts)[inverse]
    out = _divide(r - mean, mean + e)
    return np.asarray(np.where(alone, r if rule == "raw" else 0.0, out), dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# Pass@k
# ---------------------------------------------------------------------------------------------


def _best_and_gap(
    r: FloatArray, inverse: IntArray, counts: IntArray
) -> tuple[IntArray, FloatArray]:
    """Per group: the index of its first best reward, and ``r_max − r_second``."""
    best = np.full(counts.size, -1, dtype=np.intp)
    gap = np.zeros(counts.size)
    for g in range(counts.size):
        members = np.flatnonzero(inverse == g)
        order = members[np.argsort(-r[members], kind="stable")]
        best[g] = order[0]
        gap[g] = r[order[0]] - r[order[1]]
    return best, gap


def _exact_passk(values: list[Fraction], inverse: IntArray, groups: int) -> list[Fraction]:
    """Pass@k without division, in exact arithmetic (ties broken by position, as a stable sort)."""
    out = [Fraction(0)] * len(values)
    for g in range(groups):
        members = sorted(np.flatnonzero(inverse == g).tolist(), key=lambda i: -values[i])
        out[members[0]] = values[members[0]] - values[members[1]]
    return out


def passk_advantages(
    rewards: ArrayLike | Sequence[Fraction],
    *,
    group: ArrayLike,
    std: Std = "sample",
    eps: float = 1e-6,
) -> Any:
    r"""Pass@k advantages (GRPO-style): only each group's best response gets a non-zero advantage.

    .. math::

        A_i = \begin{cases}
            \dfrac{r_{(1)} - r_{(2)}}{\sigma_{g(i)} + \varepsilon} &
                i = \arg\max_{j \in g(i)} r_j, \\[1ex]
            0 & \text{otherwise,}
        \end{cases}

    with :math:`r_{(1)} \ge r_{(2)}` the two largest rewards of the group and :math:`\sigma` its
    sample (``std="sample"``) or population standard deviation (``std="none"``: no division).
    The group's reward is the best of its :math:`k` responses (pass@k); the best response's
    marginal contribution to it is :math:`r_{(1)} - r_{(2)}`. When the two best are tied every
    advantage is 0, so which of them is "the" best does not matter.

    .. warning::

        verl 0.9.1 (``core_algos.compute_grpo_passk_outcome_advantage``) divides by
        ``torch.std`` (sample) plus ``epsilon = 1e-6`` when ``norm_adv_by_std_in_grpo`` is true,
        and raises on a group of one (as here).

    Parameters
    ----------
    rewards : array_like, shape (B,), or sequence of Fraction
        One outcome reward per sequence; finite.
    group : array_like of int, shape (B,)
        Prompt id of each sequence; every group needs at least two sequences.
    std : {"sample", "population", "none"}
        The group standard deviation divided by, or none.
    eps : float
        ``ε >= 0`` added to the standard deviation (``0/0 := 0``).

    Returns
    -------
    ndarray of float64, shape (B,), or list of Fraction
        The advantages; exact Fractions when ``rewards`` are Fractions and ``std="none"``.

    Raises
    ------
    ValueError
        If ``rewards`` is empty or not finite, ``group`` is not one integer per reward, a group
        has one sequence, ``eps < 0``, or ``std`` is unknown.

    Notes
    -----
    A group's advantages sum to :math:`(r_{(1)} - r_{(2)})/D \ge 0`; at most one is non-zero
    (claim AB5).

    References
    ----------
    The Pass@k advantage as verl 0.9.1 cites it: arXiv 2503.19595.

    Examples
    --------
    >>> import refimpl.losses.advantages_baselines as ab
    >>> ab.passk_advantages([1.0, 0.0, 0.5, 2.0], group=[0, 0, 1, 1], std="none")
    array([1. , 0. , 0. , 1.5])
    >>> ab.passk_advantages([1.0, 0.0], group=[0, 0], std="population", eps=0.0)
    array([2., 0.])
    """
    r, exact = _as_rewards(rewards)
    inverse, counts = _as_groups(group, r.size)
    kind = as_choice(std, name="std", choices=_STDS)
    e = _as_eps(eps)
    if np.any(counts == 1):
        first = int(np.flatnonzero(counts[inverse] == 1)[0])
        raise invalid(
            "group",
            "put at least two sequences in every group (Pass@k compares the best response of a "
            "group with its second best)",
            group,
            f"Sequence {first} is alone in its group; sample k >= 2 responses per prompt.",
        )
    best, gap = _best_and_gap(r, inverse, counts)
    is_best = np.zeros(r.size, dtype=bool)
    is_best[best] = True
    if exact is not None and kind == "none":
        return _exact_passk(exact, inverse, counts.size)
    if kind == "none":
        return np.asarray(np.where(is_best, gap[inverse], 0.0), dtype=np.float64)
    ddof = 1 if kind == "sample" else 0
    _, variance = _float_centred_and_variance(r, exact, inverse, counts, ddof)
    scaled = _divide(gap[inverse], _scale(variance, eps=e, placement="std"))
    return np.asarray(np.where(is_best, scaled, 0.0), dtype=np.float64)
