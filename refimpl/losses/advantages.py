r"""Outcome advantages from one scalar reward per sequence: GRPO, RLOO and REINFORCE++.

Every function here takes the outcome rewards ``rewards`` of shape ``(B,)`` (one per generated
sequence) and returns one advantage per sequence, shape ``(B,)``. Broadcasting to tokens is the
caller's: every loss of :mod:`refimpl.losses` accepts per-sequence advantages.

``group`` holds one integer prompt id per sequence: sequences with the same id were sampled from the
same prompt and form a *group*. Groups may be of unequal size and need not be contiguous.

A group of one sequence has no baseline of its own; frameworks disagree on what it gets, so every
function that uses groups declares it with ``singleton=``:

- ``"zero"`` (default): the advantage is 0 (the group mean is the reward itself). TRL 1.16.0 gives
  the same (``r − mean = 0``) when ``num_generations = 1``; verl 0.9.1's
  ``compute_rloo_vectorized_outcome_advantage`` also gives 0.
- ``"raw"``: the sequence keeps its raw reward, as if its group had mean 0 and standard deviation 1
  (verl 0.9.1: ``compute_grpo_outcome_advantage``, ``compute_rloo_outcome_advantage``,
  ``compute_reinforce_plus_plus_baseline_outcome_advantage``, ``group_mean_std``).
- ``"error"``: refuse the call (OpenRLHF 0.11.2 divides by zero there).

**Exact mode.** Rewards given as a sequence of :class:`fractions.Fraction` (ints allowed, at least one
``Fraction``) give a ``list`` of exact ``Fraction`` advantages wherever the formula is rational: the
mean-centred GRPO advantage (``std="none"``) and RLOO. A standard deviation is a square root, so the
z-score and REINFORCE++ return float64 even then (computed from the exact mean and variance).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any, Literal, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import (
    as_float_array,
    as_int_array,
    as_real,
    exact_list,
    invalid,
    mismatch,
    require_entries,
    wrong_type,
)
from refimpl.losses._common import as_choice

__all__ = ["grpo_advantages", "reinforce_pp_advantages", "rloo_advantages"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.intp]
Std = Literal["sample", "population", "none"]
EpsPlacement = Literal["std", "variance", "floor"]
Singleton = Literal["zero", "raw", "error"]
StdScope = Literal["group", "batch"]

_STDS = ("sample", "population", "none")
_PLACEMENTS = ("std", "variance", "floor")
_SINGLETONS = ("zero", "raw", "error")
_SCOPES = ("group", "batch")


# ---------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------


def _as_rewards(rewards: Any) -> tuple[FloatArray, list[Fraction] | None]:
    """Rewards as a non-empty finite 1-D float64 array, and as Fractions in exact mode."""
    exact = exact_list(rewards)
    arr = as_float_array(rewards, name="rewards", ndim=1)
    if arr.size == 0:
        raise invalid(
            "rewards",
            "hold at least one reward",
            arr,
            "Pass one outcome reward per sequence, shape (B,) with B >= 1.",
        )
    return arr, exact


def _as_groups(group: ArrayLike, size: int) -> tuple[IntArray, IntArray]:
    """``(inverse, counts)``: each sequence's group index 0..G-1 and each group's size."""
    try:
        raw = np.asarray(group)
    except (TypeError, ValueError):  # ragged nesting: numpy refuses it in its own words
        raise wrong_type(
            "group",
            "a 1-D array of integer prompt ids",
            group,
            "Pass one integer prompt id per sequence (a flat list, not nested lists).",
        ) from None
    if raw.dtype.kind == "b":
        raise invalid(
            "group",
            "hold integer prompt ids",
            raw,
            "Pass one integer prompt id per sequence (booleans are not ids).",
        )
    if raw.dtype.kind in "iu" and raw.ndim == 1:
        ids: NDArray[Any] = raw
    else:
        ids = as_float_array(group, name="group", ndim=1)
        require_entries(
            ids,
            ids != np.round(ids),
            name="group",
            rule="hold integer prompt ids",
            fix="; pass one integer id per sequence (equal ids = same prompt).",
        )
        ids = as_int_array(group, name="group", ndim=1)  # ids past 2^53 stay distinct
    if ids.shape != (size,):
        raise mismatch(
            ("group", "rewards"),
            "have the same length (one prompt id per reward)",
            f"group.shape={ids.shape} and rewards.shape={(size,)}",
            "Pass one prompt id per sequence.",
        )
    _, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
    return inverse.astype(np.intp), counts.astype(np.intp)


def _as_eps(eps: Any) -> float:
    return as_real(eps, name="eps", low=0.0, meaning="added to the standard deviation or variance")


def _refuse_singletons(
    counts: IntArray, inverse: IntArray, singleton: str, group: ArrayLike
) -> None:
    if singleton != "error":
        return
    alone = counts[inverse] == 1
    if np.any(alone):
        first = int(np.flatnonzero(alone)[0])
        raise invalid(
            "group",
            "put at least two sequences in every group when singleton='error'",
            group,
            f"Sequence {first} is alone in its group; sample more than one response per prompt, "
            "or pass singleton='zero' (advantage 0) or singleton='raw' (verl: mean 0, std 1).",
        )


# ---------------------------------------------------------------------------------------------
# shared arithmetic
# ---------------------------------------------------------------------------------------------


def _scale(variance: FloatArray, *, eps: float, placement: str) -> FloatArray:
    """The denominator: ``σ + ε``, ``√(σ² + ε)`` or ``√max(σ², ε)``."""
    if placement == "std":
        return np.asarray(np.sqrt(variance) + eps, dtype=np.float64)
    if placement == "variance":
        return np.asarray(np.sqrt(variance + eps), dtype=np.float64)
    return np.asarray(np.sqrt(np.maximum(variance, eps)), dtype=np.float64)


def _divide(centred: FloatArray, scale: FloatArray) -> FloatArray:
    """``centred / scale``, with ``0/0 := 0`` (a zero scale only occurs with zero numerators)."""
    out = np.zeros(np.broadcast(centred, scale).shape, dtype=np.float64)
    np.divide(centred, scale, out=out, where=np.broadcast_to(scale, out.shape) > 0)
    return out


def _group_means(r: FloatArray, inverse: IntArray, counts: IntArray) -> FloatArray:
    """Group means, shifted by each group's smallest reward: a constant group's mean is exact."""
    ref = np.full(counts.size, np.inf)
    np.minimum.at(ref, inverse, r)
    return np.asarray(
        ref + np.bincount(inverse, weights=r - ref[inverse]) / counts, dtype=np.float64
    )


def _shifted_mean(x: FloatArray, w: FloatArray) -> float:
    """``Σ w x / Σ w`` shifted by the smallest ``x`` of positive weight (exact for constant ``x``)."""
    ref = float(np.min(x[w > 0]))
    return ref + float(np.sum(w * (x - ref)) / np.sum(w))


def _group_variances(
    centred: FloatArray, inverse: IntArray, counts: IntArray, ddof: int
) -> FloatArray:
    """Per-group variance of the centred rewards; 0 where the group has ``<= ddof`` members."""
    ss = np.bincount(inverse, weights=centred * centred)
    dof = counts - ddof
    return np.asarray(np.where(dof > 0, ss / np.maximum(dof, 1), 0.0), dtype=np.float64)


def _exact_centred(values: list[Fraction], inverse: IntArray, counts: IntArray) -> list[Fraction]:
    """``r_i − mean_g`` in exact arithmetic."""
    sums = [Fraction(0)] * len(counts)
    for x, g in zip(values, inverse, strict=True):
        sums[g] += x
    return [x - sums[g] / int(counts[g]) for x, g in zip(values, inverse, strict=True)]


def _float_centred_and_variance(
    rewards: FloatArray,
    exact: list[Fraction] | None,
    inverse: IntArray,
    counts: IntArray,
    ddof: int,
) -> tuple[FloatArray, FloatArray]:
    """Group-centred rewards and the per-sequence group variance (exact mean/variance if given)."""
    if exact is None:
        centred = rewards - _group_means(rewards, inverse, counts)[inverse]
        return centred, _group_variances(centred, inverse, counts, ddof)[inverse]
    c = _exact_centred(exact, inverse, counts)
    ss = [Fraction(0)] * len(counts)
    for x, g in zip(c, inverse, strict=True):
        ss[g] += x * x
    var = [s / int(n - ddof) if n > ddof else Fraction(0) for s, n in zip(ss, counts, strict=True)]
    return (
        np.array([float(x) for x in c], dtype=np.float64),
        np.array([float(var[g]) for g in inverse], dtype=np.float64),
    )


def _batch_variance(rewards: FloatArray, exact: list[Fraction] | None, ddof: int) -> float:
    """Variance of the raw rewards over the whole batch (0 when there are ``<= ddof`` rewards)."""
    n = rewards.size
    if n <= ddof:
        return 0.0
    if exact is None:
        mean = _shifted_mean(rewards, np.ones(n))
        return float(np.sum((rewards - mean) ** 2) / (n - ddof))
    centre = sum(exact, Fraction(0)) / n
    return float(sum(((x - centre) ** 2 for x in exact), Fraction(0)) / (n - ddof))


# ---------------------------------------------------------------------------------------------
# GRPO
# ---------------------------------------------------------------------------------------------


@overload
def grpo_advantages(
    rewards: Sequence[Fraction],
    *,
    group: ArrayLike,
    std: Literal["none"],
    eps: float = ...,
    eps_placement: EpsPlacement = ...,
    std_scope: StdScope = ...,
    singleton: Singleton = ...,
) -> list[Fraction]: ...
@overload
def grpo_advantages(
    rewards: Sequence[Fraction],
    *,
    group: ArrayLike,
    std: Literal["sample", "population"] = ...,
    eps: float = ...,
    eps_placement: EpsPlacement = ...,
    std_scope: StdScope = ...,
    singleton: Singleton = ...,
) -> FloatArray: ...
@overload
def grpo_advantages(
    rewards: ArrayLike,
    *,
    group: ArrayLike,
    std: Std = ...,
    eps: float = ...,
    eps_placement: EpsPlacement = ...,
    std_scope: StdScope = ...,
    singleton: Singleton = ...,
) -> FloatArray: ...
def grpo_advantages(
    rewards: Any,
    *,
    group: ArrayLike,
    std: Std = "sample",
    eps: float = 1e-6,
    eps_placement: EpsPlacement = "std",
    std_scope: StdScope = "group",
    singleton: Singleton = "zero",
) -> FloatArray | list[Fraction]:
    r"""Group-normalised outcome advantages (GRPO), with the variants frameworks differ in.

    .. math::

        A_i = \frac{r_i - \bar r_{g(i)}}{D(\sigma)}, \qquad
        \bar r_g = \frac{1}{n_g}\sum_{j \in g} r_j, \qquad
        \sigma^2_g = \frac{1}{n_g - \delta}\sum_{j \in g}(r_j - \bar r_g)^2,

    with :math:`\delta = 1` (``std="sample"``) or :math:`0` (``"population"``), and the denominator
    :math:`D(\sigma) = \sigma + \varepsilon` (``eps_placement="std"``),
    :math:`\sqrt{\sigma^2 + \varepsilon}` (``"variance"``) or
    :math:`\sqrt{\max(\sigma^2, \varepsilon)}` (``"floor"``). ``std="none"`` is the mean-centred
    form :math:`A_i = r_i - \bar r_{g(i)}` (Dr GRPO). ``std_scope="batch"`` keeps the group mean but
    takes :math:`\sigma` over every reward of the batch.

    .. warning::

        Defaults differ between frameworks (read in the pinned sources): verl 0.9.1
        (``core_algos.compute_grpo_outcome_advantage``) uses the sample std, ``ε = 1e-6`` added to
        the std, and mean 0 / std 1 for a singleton group (``singleton="raw"``); TRL 1.16.0
        (``GRPOTrainer._generate_and_score_completions``) uses the sample std with ``ε = 1e-4``
        added to it and ``scale_rewards="batch"`` for the batch std of the raw rewards; OpenRLHF
        0.11.2 (``experience_maker``, ``group_norm``) uses the sample std with ``ε = 1e-9``.

    Parameters
    ----------
    rewards : array_like, shape (B,), or sequence of Fraction
        One outcome reward per sequence; finite.
    group : array_like of int, shape (B,)
        Prompt id of each sequence (equal ids form a group; sizes may differ).
    std : {"sample", "population", "none"}
        Divide by the sample (ddof 1) or population (ddof 0) standard deviation, or do not divide.
    eps : float
        ``ε >= 0``; placed according to ``eps_placement``. Ignored when ``std="none"``.
    eps_placement : {"std", "variance", "floor"}
        ``σ + ε`` (verl, TRL, OpenRLHF GRPO), ``√(σ² + ε)``, or ``√max(σ², ε)``.
    std_scope : {"group", "batch"}
        Standard deviation per group, or over the whole batch (TRL ``scale_rewards="batch"``).
    singleton : {"zero", "raw", "error"}
        What a group of one sequence gets: advantage 0, its reward as if mean 0 and std 1 (verl),
        or a refusal. See the module docstring.

    Returns
    -------
    ndarray of float64, shape (B,), or list of Fraction
        The advantages; exact Fractions when ``rewards`` are Fractions and ``std="none"``.

    Raises
    ------
    ValueError
        If ``rewards`` is empty or not finite, ``group`` is not one integer per reward, ``eps < 0``,
        an option is unknown, or a group is a singleton with ``singleton="error"``.

    Notes
    -----
    With ``ε = 0`` every group of ``n >= 2`` with distinct rewards has advantages of mean 0 and of
    standard deviation 1 in the declared convention (claim AD1). A group whose rewards are all equal
    has :math:`\sigma = 0` and all numerators 0; its advantages are 0 (``0/0 := 0`` when ``ε = 0``).
    Dividing by :math:`\sigma_g` multiplies a group's weight by :math:`1/(\sigma_g + \varepsilon)`
    relative to Dr GRPO: low-variance groups (nearly all right or all wrong) are up-weighted
    (claim AD5). Accuracy: two-pass mean and variance, a few ulps per entry.

    References
    ----------
    Shao et al. 2024 (DeepSeekMath, GRPO); Liu et al. 2025, "Understanding R1-Zero-Like Training"
    (Dr GRPO, arXiv 2503.20783).

    Examples
    --------
    >>> from fractions import Fraction
    >>> import refimpl.losses.advantages as adv
    >>> adv.grpo_advantages([1.0, 0.0, 0.0, 1.0], group=[0, 0, 0, 0], eps=0.0)
    array([ 0.8660254, -0.8660254, -0.8660254,  0.8660254])
    >>> adv.grpo_advantages([1.0, 0.0, 0.0, 1.0], group=[0, 0, 0, 0], std="population", eps=0.0)
    array([ 1., -1., -1.,  1.])
    >>> adv.grpo_advantages([Fraction(1), Fraction(0), Fraction(1, 2)], group=[7, 7, 3], std="none")
    [Fraction(1, 2), Fraction(-1, 2), Fraction(0, 1)]
    """
    r, exact = _as_rewards(rewards)
    inverse, counts = _as_groups(group, r.size)
    kind = as_choice(std, name="std", choices=_STDS)
    e = _as_eps(eps)
    placement = as_choice(eps_placement, name="eps_placement", choices=_PLACEMENTS)
    scope = as_choice(std_scope, name="std_scope", choices=_SCOPES)
    alone_rule = as_choice(singleton, name="singleton", choices=_SINGLETONS)
    _refuse_singletons(counts, inverse, alone_rule, group)
    alone = counts[inverse] == 1
    if kind == "none":
        if exact is not None:
            c = _exact_centred(exact, inverse, counts)
            raw = alone_rule == "raw"
            return [
                (x if raw else Fraction(0)) if a else ci
                for x, a, ci in zip(exact, alone, c, strict=True)
            ]
        centred = r - _group_means(r, inverse, counts)[inverse]
        return np.asarray(
            np.where(alone, r if alone_rule == "raw" else 0.0, centred), dtype=np.float64
        )
    ddof = 1 if kind == "sample" else 0
    centred, variance = _float_centred_and_variance(r, exact, inverse, counts, ddof)
    if scope == "batch":
        variance = np.full(r.size, _batch_variance(r, exact, ddof))
    out = _divide(centred, _scale(variance, eps=e, placement=placement))
    if alone_rule == "raw":
        out = np.where(alone, _divide(r, _scale(np.ones(1), eps=e, placement=placement)), out)
    else:
        out = np.where(alone, 0.0, out)
    return np.asarray(out, dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# RLOO
# ---------------------------------------------------------------------------------------------


@overload
def rloo_advantages(
    rewards: Sequence[Fraction], *, group: ArrayLike, singleton: Singleton = ...
) -> list[Fraction]: ...
@overload
def rloo_advantages(
    rewards: ArrayLike, *, group: ArrayLike, singleton: Singleton = ...
) -> FloatArray: ...
def rloo_advantages(
    rewards: Any, *, group: ArrayLike, singleton: Singleton = "zero"
) -> FloatArray | list[Fraction]:
    r"""Leave-one-out (RLOO) advantages: each reward minus the mean of the others in its group.

    .. math::

        A_i = r_i - \frac{1}{n_g - 1}\sum_{j \in g,\, j \neq i} r_j
            = \frac{n_g}{n_g - 1}\,\bigl(r_i - \bar r_g\bigr).

    The baseline of sequence :math:`i` does not contain :math:`r_i`, so for i.i.d. samples
    :math:`\mathbb{E}[A_i \nabla\log\pi(y_i)] = \mathbb{E}[r_i \nabla\log\pi(y_i)]`: the estimate is
    unbiased (claim AD3), where the mean-centred form (Dr GRPO) is scaled by
    :math:`(n - 1)/n` (claim AD4).

    .. warning::

        A singleton group has no other member. verl 0.9.1 is inconsistent there:
        ``core_algos.compute_rloo_outcome_advantage`` leaves the raw reward (``singleton="raw"``)
        while ``compute_rloo_vectorized_outcome_advantage`` gives 0 (``"zero"``, the default here);
        OpenRLHF 0.11.2 (``experience_maker``, ``rloo``) divides by ``n − 1 = 0``.

    Parameters
    ----------
    rewards : array_like, shape (B,), or sequence of Fraction
        One outcome reward per sequence; finite.
    group : array_like of int, shape (B,)
        Prompt id of each sequence (sizes may differ).
    singleton : {"zero", "raw", "error"}
        What a group of one sequence gets: 0, its raw reward (baseline 0), or a refusal.

    Returns
    -------
    ndarray of float64, shape (B,), or list of Fraction
        The advantages; exact Fractions when ``rewards`` are Fractions.

    Raises
    ------
    ValueError
        If ``rewards`` is empty or not finite, ``group`` is not one integer per reward, or a group
        is a singleton with ``singleton="error"``.

    Notes
    -----
    The advantages of a group sum to 0, and :math:`A_i - r_i` does not depend on :math:`r_i`
    (claims AD2, AD3). Accuracy: a few ulps per entry (one mean, one product).

    References
    ----------
    Kool et al. 2019, "Buy 4 REINFORCE samples, get a baseline for free!"; Ahmadian et al. 2024,
    "Back to basics" (arXiv 2402.14740).

    Examples
    --------
    >>> from fractions import Fraction
    >>> import refimpl.losses.advantages as adv
    >>> adv.rloo_advantages([1.0, 0.0, 0.0, 5.0], group=[0, 0, 0, 1])
    array([ 1. , -0.5, -0.5,  0. ])
    >>> adv.rloo_advantages([Fraction(1), Fraction(0), Fraction(0)], group=[0, 0, 0])
    [Fraction(1, 1), Fraction(-1, 2), Fraction(-1, 2)]
    """
    r, exact = _as_rewards(rewards)
    inverse, counts = _as_groups(group, r.size)
    alone_rule = as_choice(singleton, name="singleton", choices=_SINGLETONS)
    _refuse_singletons(counts, inverse, alone_rule, group)
    n = counts[inverse]
    if exact is not None:
        c = _exact_centred(exact, inverse, counts)
        raw = alone_rule == "raw"
        return [
            (x if raw else Fraction(0)) if k == 1 else Fraction(int(k), int(k) - 1) * ci
            for x, k, ci in zip(exact, n, c, strict=True)
        ]
    centred = r - _group_means(r, inverse, counts)[inverse]
    loo = n / np.maximum(n - 1, 1) * centred
    alone = r if alone_rule == "raw" else 0.0
    return np.asarray(np.where(n == 1, alone, loo), dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# REINFORCE++
# ---------------------------------------------------------------------------------------------


def _as_sequence_weights(mask: ArrayLike | None, size: int) -> FloatArray:
    """The number of valid tokens of each sequence (all ones when ``mask`` is None)."""
    if mask is None:
        return np.ones(size, dtype=np.float64)
    m = as_float_array(mask, name="mask", ndim=2)
    if m.shape[0] != size:
        raise mismatch(
            ("mask", "rewards"),
            "have one row per sequence",
            f"mask.shape={m.shape} and rewards.shape={(size,)}",
            "Pass the (B, T) padding mask of the same B sequences.",
        )
    require_entries(
        m,
        (m != 0.0) & (m != 1.0),
        name="mask",
        rule="hold only 0 and 1 (1 = a real token, 0 = padding)",
        fix="; pass a boolean or 0/1 padding mask.",
    )
    return np.asarray(m.sum(axis=1), dtype=np.float64)


def _refuse_too_few(total: float, *, ddof: int, kind: str, value: Any, masked: bool) -> None:
    """The batch statistics need ``N > ddof`` (token-weighted with a mask, else per sequence)."""
    if not masked:  # at least one reward is always there: only std='sample' can fail
        raise invalid(
            "rewards",
            f"hold at least two rewards for a batch std='{kind}'",
            value,
            f"Found {total:g}; pass a larger batch, or std='population'.",
        )
    if ddof:
        raise invalid(
            "mask",
            f"leave at least two valid tokens in the batch (std='{kind}')",
            value,
            f"Found {total:g}; pass a batch with more tokens, or std='population'.",
        )
    raise invalid(
        "mask",
        f"leave at least one valid token in the batch (std='{kind}')",
        value,
        "Found none; pass a mask with at least one 1.",
    )


def reinforce_pp_advantages(
    rewards: ArrayLike | Sequence[Fraction],
    *,
    group: ArrayLike | None = None,
    mask: ArrayLike | None = None,
    std: Std = "sample",
    eps: float = 1e-8,
    eps_placement: EpsPlacement = "variance",
    singleton: Singleton = "zero",
) -> FloatArray:
    r"""REINFORCE++ advantages: batch whitening of the outcome rewards (optionally group-centred).

    With :math:`x_i = r_i` (REINFORCE++), or :math:`x_i = r_i - \bar r_{g(i)}` when ``group`` is
    given (REINFORCE++-baseline), and :math:`w_i` the number of valid tokens of sequence :math:`i`
    (1 each when ``mask`` is None),

    .. math::

        A_i = \frac{x_i - m}{D(s)}, \qquad
        m = \frac{\sum_i w_i x_i}{N}, \qquad
        s^2 = \frac{\sum_i w_i (x_i - m)^2}{N - \delta}, \qquad N = \sum_i w_i,

    with :math:`\delta = 1` (``std="sample"``) or :math:`0` (``"population"``) and :math:`D` as in
    :func:`grpo_advantages` (default :math:`\sqrt{s^2 + \varepsilon}`). ``std="none"`` only
    subtracts :math:`m`. The statistics are over tokens: with an outcome reward and
    :math:`\gamma = 1` every valid token of a sequence carries the same return, so a long sequence
    weighs :math:`w_i` times in the batch mean and variance, as in both frameworks below.

    .. warning::

        verl 0.9.1 (``core_algos.compute_reinforce_plus_plus_outcome_advantage`` and
        ``_baseline_outcome_advantage``, via ``torch_functional.masked_whiten``) uses the sample
        variance over tokens and :math:`\sqrt{s^2 + 10^{-8}}` (the defaults here). Its mean
        divides by ``N + 1e-8``, which is not reproduced: it shifts each advantage by about
        :math:`10^{-8}|m|/(N D)`, up to :math:`10^{-4}|m|/N` in a batch whose tokens all carry the
        same value (0 here). OpenRLHF 0.11.2
        (``experience_maker``, ``reinforce`` / ``reinforce_baseline``) uses the population variance
        and :math:`\sqrt{\max(s^2, 10^{-8})}`: pass ``std="population", eps_placement="floor"``.
        Only outcome rewards with :math:`\gamma = 1` are covered (no per-token rewards).

    Parameters
    ----------
    rewards : array_like, shape (B,)
        One outcome reward per sequence; finite (Fractions are accepted and converted to float).
    group : array_like of int, shape (B,), optional
        Prompt ids: subtract each group's mean before whitening (the "baseline" variant).
    mask : array_like, shape (B, T), optional
        0/1 padding mask; its row sums weight the batch statistics. Default: weight 1 per sequence.
    std : {"sample", "population", "none"}
        Batch standard deviation convention, or no division.
    eps : float
        ``ε >= 0`` in the denominator.
    eps_placement : {"std", "variance", "floor"}
        ``s + ε``, ``√(s² + ε)`` (verl) or ``√max(s², ε)`` (OpenRLHF).
    singleton : {"zero", "raw", "error"}
        With ``group``: what a group of one sequence contributes as :math:`x_i` (0, its reward as in
        verl's baseline variant, or a refusal).

    Returns
    -------
    ndarray of float64, shape (B,)
        The advantages; 0 for a sequence with no valid token.

    Raises
    ------
    ValueError
        If ``rewards`` is empty or not finite, ``group`` or ``mask`` do not match the rewards,
        ``mask`` is not 0/1, the batch has no valid token, ``std="sample"`` has fewer than two
        (token-weighted) entries, ``eps < 0``, or an option is unknown.

    Notes
    -----
    The token-weighted mean of the result is 0 and, with ``ε = 0`` and :math:`s > 0`, its weighted
    standard deviation is 1 in the declared convention.

    References
    ----------
    Hu 2025, "REINFORCE++" (arXiv 2501.03262).

    Examples
    --------
    >>> import refimpl.losses.advantages as adv
    >>> adv.reinforce_pp_advantages([1.0, 0.0, 0.0, 1.0], std="population", eps=0.0)
    array([ 1., -1., -1.,  1.])
    >>> mask = [[1, 1, 1], [1, 0, 0]]
    >>> adv.reinforce_pp_advantages([1.0, 0.0], mask=mask, std="population", eps=0.0)
    array([ 0.57735027, -1.73205081])
    """
    r, exact = _as_rewards(rewards)
    kind = as_choice(std, name="std", choices=_STDS)
    e = _as_eps(eps)
    placement = as_choice(eps_placement, name="eps_placement", choices=_PLACEMENTS)
    alone_rule = as_choice(singleton, name="singleton", choices=_SINGLETONS)
    w = _as_sequence_weights(mask, r.size)
    if group is None:
        x = r
    else:
        inverse, counts = _as_groups(group, r.size)
        _refuse_singletons(counts, inverse, alone_rule, group)
        x, _ = _float_centred_and_variance(r, exact, inverse, counts, 0)
        if alone_rule == "raw":
            x = np.where(counts[inverse] == 1, r, x)
    total = float(w.sum())
    ddof = 1 if kind == "sample" else 0
    if total <= ddof:
        shown = r if mask is None else np.asarray(mask)
        _refuse_too_few(total, ddof=ddof, kind=kind, value=shown, masked=mask is not None)
    mean = _shifted_mean(x, w)
    centred = x - mean
    if kind == "none":
        out = centred
    else:
        var = float(np.sum(w * centred * centred) / (total - ddof))
        out = _divide(centred, _scale(np.array([var]), eps=e, placement=placement))
    return np.asarray(np.where(w > 0, out, 0.0), dtype=np.float64)
