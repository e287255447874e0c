"""Published length penalties that effort conditioning is compared with (conventions §effort-conditioning).

Each function computes the length term of a published reward exactly as its source defines it, with the
source's conventions and its known variants selectable, and a warning where public implementations
differ:

- :func:`kimi_length_reward`: Kimi k1.5 (arXiv 2501.12599), relative to the shortest and longest
  response of a problem (or of the batch, open-r1's ``len_reward``).
- :func:`dapo_overlong_penalty`: DAPO's soft overlong punishment (arXiv 2503.14476), with the paper's
  −1 floor beyond the maximum length or verl's unfloored ramp.
- :func:`cosine_length_reward`: the cosine-scaled reward of "Demystifying Long Chain-of-Thought
  Reasoning in LLMs" (arXiv 2502.03373), in open-r1's ``get_cosine_scaled_reward`` parameterisation.
- :func:`l1_exact_reward`, :func:`l1_max_reward`: L1 / LCPO (arXiv 2503.04697), rewards for hitting or
  staying under a target length given in the prompt.

Lengths are token counts (finite, ``>= 0``; fractional values are accepted as a continuous
approximation). ``correct`` is a boolean array (or 0/1 numbers) of the same shape.

Claim ids (``proofs/penalties.py``): PEN1–PEN7.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import (
    as_float_array,
    as_real,
    invalid,
    require_entries,
    require_in_range,
    require_same_shape,
    wrong_type,
)

__all__ = [
    "cosine_length_reward",
    "dapo_overlong_penalty",
    "kimi_length_reward",
    "l1_exact_reward",
    "l1_max_reward",
]


# ---------------------------------------------------------------------------------------------
# validation helpers (private)
# ---------------------------------------------------------------------------------------------


def _lengths(lengths: ArrayLike, *, name: str = "lengths") -> NDArray[np.float64]:
    arr = as_float_array(lengths, name=name)
    require_in_range(
        arr, name=name, low=0.0, meaning="token counts", fix="; pass non-negative lengths."
    )
    return arr


def _correct(correct: ArrayLike, like: NDArray[np.float64]) -> NDArray[np.bool_]:
    try:  # as_float_array refuses text, complex, dates and ragged nesting; booleans become 0/1
        values = as_float_array(correct, name="correct")
    except TypeError as exc:
        raise wrong_type(
            "correct", "a boolean array", correct, f"Pass correct as booleans (or 0/1): {exc}"
        ) from None
    require_entries(
        values,
        (values != 0.0) & (values != 1.0),
        name="correct",
        rule="contain only booleans or 0/1",
        fix="; pass True/False per response.",
    )
    flags = values == 1.0
    require_same_shape(like, flags, names=("lengths", "correct"))
    return np.asarray(flags, dtype=np.bool_)


def _labels(groups: ArrayLike, shape: tuple[int, ...]) -> NDArray[np.intp]:
    """Each response's problem index (0, 1, ...) from its label in ``groups``."""
    refusal = wrong_type(
        "groups",
        "a 1-D array of comparable labels",
        groups,
        "Pass one label (an int or a string) per response, all of one kind.",
    )
    try:
        labels = np.asarray(groups)
    except (TypeError, ValueError):  # ragged nesting
        raise refusal from None
    if labels.shape != shape:
        raise invalid(
            "groups",
            f"have the shape of lengths {shape}",
            labels,
            "Pass one problem label per response.",
        )
    try:
        _, inverse = np.unique(labels, return_inverse=True)
    except TypeError:  # labels numpy cannot order (mixed kinds, objects)
        raise refusal from None
    return np.asarray(inverse, dtype=np.intp).reshape(-1)


def _out(value: Any) -> NDArray[np.float64]:
    return np.asarray(value, dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# Kimi k1.5
# ---------------------------------------------------------------------------------------------


def kimi_length_reward(
    lengths: ArrayLike,
    correct: ArrayLike,
    *,
    groups: ArrayLike | None = None,
    scope: Literal["problem", "batch"] = "problem",
) -> NDArray[np.float64]:
    r"""Kimi k1.5 length reward: relative to the shortest and longest response of the problem.

    .. math::

        \lambda_i = \frac12 - \frac{\ell_i - \ell_\text{min}}{\ell_\text{max} - \ell_\text{min}},
        \qquad
        r_i = \begin{cases} \lambda_i & \text{correct} \\ \min(0, \lambda_i) & \text{wrong,} \end{cases}

    where :math:`\ell_\text{min}, \ell_\text{max}` are the shortest and longest of the responses
    sampled for the same problem (correct and wrong alike).

    Parameters
    ----------
    lengths : array_like of float, shape (k,) or (problems, k)
        Response lengths, ``>= 0``. A 2-D array holds one problem per row.
    correct : array_like of bool, same shape as ``lengths``
        Whether each response is correct.
    groups : array_like of int, shape (n,), optional
        Problem label of each response of a 1-D ``lengths`` (ragged groups). Without it, the problem
        is the last axis (a 1-D array is one problem).
    scope : {"problem", "batch"}, default "problem"
        ``"problem"``: min/max per problem (the paper). ``"batch"``: one min/max over every response
        passed (open-r1's ``len_reward``, which receives a whole batch of completions).

    Returns
    -------
    ndarray of float64
        The length reward, shape of ``lengths``, in ``[−0.5, 0.5]``.

    Raises
    ------
    TypeError
        If an input is not numeric / boolean, or ``scope`` is not a string.
    ValueError
        On shape mismatch, negative or non-finite lengths, non-0/1 ``correct``, ``groups`` with a
        2-D ``lengths`` or a wrong shape, or an unknown ``scope``.

    Notes
    -----
    The shortest response of its group gets :math:`\lambda = 1/2` (so the shortest, if correct,
    gets 0.5), the longest :math:`-1/2`; wrong responses never get a positive reward (PEN1, PEN2).
    The reward is linear and decreasing in the length within a group.

    *Degenerate group* (all lengths equal, :math:`\ell_\text{max} = \ell_\text{min}`): the formula is
    0/0; this function returns 0 for every response of the group (no length signal), as open-r1's
    ``len_reward`` does. The paper does not state a convention.

    The paper adds this term to the correctness reward with a weight (and warms it up); this function
    returns the length term only. Other implementations differ in the scope of min/max (problem vs
    batch) and in measuring length in characters (open-r1) rather than tokens.

    References
    ----------
    Kimi Team, "Kimi k1.5: Scaling Reinforcement Learning with LLMs", arXiv 2501.12599, §2.3.3
    (length penalty). open-r1 ``src/open_r1/rewards.py::len_reward``.

    Examples
    --------
    >>> from refimpl import kimi_length_reward
    >>> kimi_length_reward([100, 200, 300, 150], [True, True, False, False])
    array([ 0.5,  0. , -0.5,  0. ])
    >>> kimi_length_reward([[100, 300], [50, 50]], [[True, True], [True, False]])
    array([[ 0.5, -0.5],
           [ 0. ,  0. ]])
    """
    ell = _lengths(lengths)
    ok = _correct(correct, ell)
    if not isinstance(scope, str):
        raise wrong_type("scope", 'the string "problem" or "batch"', scope, 'Pass scope="problem".')
    if scope not in ("problem", "batch"):
        raise invalid(
            "scope", 'be "problem" or "batch"', scope, 'Pass scope="problem" (paper) or "batch".'
        )
    if ell.size == 0:
        return _out(np.zeros(ell.shape))
    if scope == "batch":
        lo = np.full(ell.shape, ell.min())
        hi = np.full(ell.shape, ell.max())
    elif groups is not None:
        if ell.ndim != 1:
            raise invalid(
                "groups",
                "be given only with 1-D lengths",
                groups,
                "Pass a 1-D lengths with one label per response, or a 2-D lengths without groups.",
            )
        inverse = _labels(groups, ell.shape)
        n_groups = int(inverse.max()) + 1
        lo_g = np.full(n_groups, np.inf)
        hi_g = np.full(n_groups, -np.inf)
        np.minimum.at(lo_g, inverse, ell)
        np.maximum.at(hi_g, inverse, ell)
        lo, hi = lo_g[inverse], hi_g[inverse]
    else:
        lo = np.broadcast_to(ell.min(axis=-1, keepdims=True), ell.shape)
        hi = np.broadcast_to(ell.max(axis=-1, keepdims=True), ell.shape)
    spread = hi - lo
    safe = np.where(spread > 0, spread, 1.0)
    lam = np.where(spread > 0, 0.5 - (ell - lo) / safe, 0.0)
    return _out(np.where(ok, lam, np.minimum(lam, 0.0)))


# ---------------------------------------------------------------------------------------------
# DAPO
# ---------------------------------------------------------------------------------------------


def dapo_overlong_penalty(
    lengths: ArrayLike,
    *,
    max_length: float,
    cache_length: float,
    floor: bool = True,
    penalty_factor: float = 1.0,
) -> NDArray[np.float64]:
    r"""DAPO soft overlong punishment: 0 up to ``L_max − L_cache``, then a linear ramp down.

    .. math::

        R(\ell) = \begin{cases}
          0 & \ell \le L_\text{max} - L_\text{cache} \\
          \dfrac{(L_\text{max} - L_\text{cache}) - \ell}{L_\text{cache}}
            & L_\text{max} - L_\text{cache} < \ell \le L_\text{max} \\
          -1 & L_\text{max} < \ell \quad (\text{floor=True})
        \end{cases}

    times ``penalty_factor``.

    Parameters
    ----------
    lengths : array_like of float, any shape
        Response lengths, ``>= 0``.
    max_length : float
        :math:`L_\text{max}`, ``> 0``.
    cache_length : float
        :math:`L_\text{cache}`, the soft-punishment interval, ``0 < cache_length <= max_length``.
    floor : bool, default True
        ``True``: the paper's −1 beyond ``max_length``. ``False``: no floor: the ramp continues
        linearly beyond ``max_length`` (below −1), as verl's DAPO reward manager computes
        ``min(−(ℓ − (L_max − L_cache))/L_cache · factor, 0)``.
    penalty_factor : float, default 1.0
        Scale of the penalty, ``>= 0`` (verl's ``overlong_buffer.penalty_factor``; the paper uses 1).

    Returns
    -------
    ndarray of float64
        The penalty (``<= 0``), shape of ``lengths``.

    Raises
    ------
    TypeError
        If an input is not numeric or ``floor`` is not a bool.
    ValueError
        If a length is negative or non-finite, ``max_length <= 0``, ``cache_length <= 0``,
        ``cache_length > max_length`` or ``penalty_factor < 0``; with ``floor=False``, if the
        unfloored penalty is beyond float64's range (a tiny ``cache_length``).

    Notes
    -----
    Zero for :math:`\ell \le L_\text{max} - L_\text{cache}`, non-increasing in the length, continuous
    (at :math:`L_\text{max}` the ramp reaches exactly −1, so the floor joins it without a jump), and
    in ``[−penalty_factor, 0]`` with the floor (PEN3, PEN4). The two variants agree on
    :math:`\ell \le L_\text{max}`: they differ only where generation was not truncated at
    :math:`L_\text{max}` (in verl it always is, so the floor never binds there). OpenRLHF caps the
    excess at the buffer length, which is ``floor=True``, and so is TRL 1.16.0's
    ``get_soft_overlong_punishment(max_completion_len, soft_punish_cache)`` (−1 beyond the maximum;
    its length is the number of completion tokens). On the ramp the penalty is a price
    :math:`1/L_\text{cache}` per token; under the saturating quality model the optimal length is
    :math:`\operatorname{clip}(\lambda\ln(q_\text{max}L_\text{cache}/\lambda),
    L_\text{max} - L_\text{cache}, L_\text{max})` (PEN4).

    References
    ----------
    Yu et al., "DAPO: An Open-Source LLM Reinforcement Learning System at Scale", arXiv 2503.14476,
    §3.4, Eq. (13). verl ``verl/workers/reward_manager/dapo.py``.

    Examples
    --------
    >>> from refimpl import dapo_overlong_penalty
    >>> dapo_overlong_penalty([100, 800, 900, 1000, 1200], max_length=1000, cache_length=200)
    array([ 0. ,  0. , -0.5, -1. , -1. ])
    >>> dapo_overlong_penalty([1200], max_length=1000, cache_length=200, floor=False)
    array([-2.])
    """
    ell = _lengths(lengths)
    l_max = as_real(max_length, name="max_length", low=0.0, low_open=True, meaning="L_max")
    l_cache = as_real(
        cache_length,
        name="cache_length",
        low=0.0,
        low_open=True,
        meaning="soft punishment interval",
    )
    if l_cache > l_max:
        raise invalid(
            "cache_length",
            f"be <= max_length={l_max!r} (the interval lies inside [0, max_length])",
            cache_length,
            "Pass a cache_length no larger than max_length.",
        )
    if not isinstance(floor, (bool, np.bool_)):
        raise wrong_type("floor", "a bool", floor, "Pass floor=True (paper) or floor=False (verl).")
    factor = as_real(penalty_factor, name="penalty_factor", low=0.0, meaning="penalty scale")
    over = np.maximum(ell - (l_max - l_cache), 0.0)  # tokens into the interval, and past it
    if floor:  # clipped before the division: a tiny cache_length cannot overflow
        return _out(factor * -(np.minimum(over, l_cache) / l_cache) + 0.0)  # + 0.0: no -0.0
    if factor == 0.0:
        return _out(np.zeros(ell.shape))
    with np.errstate(over="ignore"):
        penalty = factor * -(over / l_cache) + 0.0
    if not np.all(np.isfinite(penalty)):
        raise invalid(
            "cache_length",
            "be large enough that the unfloored penalty fits in float64",
            cache_length,
            "Pass floor=True (the paper's penalty stops at -penalty_factor) or a larger "
            "cache_length.",
        )
    return _out(penalty)


# ---------------------------------------------------------------------------------------------
# cosine
# ---------------------------------------------------------------------------------------------


def cosine_length_reward(
    lengths: ArrayLike,
    correct: ArrayLike,
    *,
    max_length: float,
    min_value_wrong: float = -1.0,
    max_value_wrong: float = -0.5,
    min_value_correct: float = 0.5,
    max_value_correct: float = 1.0,
    exceed_value: float | None = None,
) -> NDArray[np.float64]:
    r"""Cosine-scaled length reward: shorter is better when correct, longer is better when wrong.

    With :math:`c(\ell) = \tfrac12\left(1 + \cos(\pi \min(\ell, L)/L)\right)`, falling from 1 at
    :math:`\ell = 0` to 0 at :math:`\ell = L` (``max_length``):

    .. math::

        r(\ell) = \begin{cases}
          r^c_\text{min} + (r^c_\text{max} - r^c_\text{min})\, c(\ell) & \text{correct} \\
          r^w_\text{max} + (r^w_\text{min} - r^w_\text{max})\, c(\ell) & \text{wrong.}
        \end{cases}

    A correct answer gets ``max_value_correct`` at length 0 and ``min_value_correct`` at
    ``max_length``; a wrong one gets ``min_value_wrong`` at length 0 and ``max_value_wrong`` at
    ``max_length``.

    Parameters
    ----------
    lengths : array_like of float, any shape
        Response lengths, ``>= 0``.
    correct : array_like of bool, same shape
        Whether each response is correct.
    max_length : float
        :math:`L > 0`, where the cosine reaches its end.
    min_value_wrong, max_value_wrong : float, default -1.0, -0.5
        Reward range of wrong answers, ``min_value_wrong <= max_value_wrong``.
    min_value_correct, max_value_correct : float, default 0.5, 1.0
        Reward range of correct answers, ``min_value_correct <= max_value_correct``.
    exceed_value : float, optional
        If given, every response with :math:`\ell \ge L` (it hit the generation cap, i.e. was
        truncated) gets this value instead (the paper's exceed-length penalty :math:`r_e`).

    Returns
    -------
    ndarray of float64
        The reward, shape of ``lengths``.

    Raises
    ------
    TypeError
        If an input is not numeric.
    ValueError
        On shape mismatch, negative or non-finite input, ``max_length <= 0``, or a min above its max.

    Notes
    -----
    Correct rewards are non-increasing and wrong rewards non-decreasing in the length; both stay in
    their ranges (PEN5). Defaults are open-r1's ``get_cosine_scaled_reward`` defaults.

    Warning, conventions differ: open-r1 does not clip the progress :math:`\ell/L`, so beyond
    ``max_length`` its cosine turns back up (at :math:`2L` a correct answer gets
    ``max_value_correct`` again) and it measures length in characters; this function clips at
    :math:`L` (the value at ``max_length`` persists) and takes whatever length unit you pass. The
    paper's reference code (demystify-long-cot) replaces the reward by an exceed-length penalty at
    the cap: pass ``exceed_value``. TRL 1.16.0's ``trl.rewards.get_cosine_scaled_reward`` (same
    defaults, ``max_len``) clamps the progress at 1 as this function does and counts completion
    tokens; it gives ``None`` when the gold answer cannot be parsed.

    References
    ----------
    Yeo et al., "Demystifying Long Chain-of-Thought Reasoning in LLMs", arXiv 2502.03373, §4 and
    Appendix (cosine reward). open-r1 ``src/open_r1/rewards.py::get_cosine_scaled_reward``.

    Examples
    --------
    >>> from refimpl import cosine_length_reward
    >>> cosine_length_reward([0, 500, 1000, 0, 1000], [True, True, True, False, False],
    ...                      max_length=1000)
    array([ 1.  ,  0.75,  0.5 , -1.  , -0.5 ])
    """
    ell = _lengths(lengths)
    ok = _correct(correct, ell)
    length_cap = as_real(max_length, name="max_length", low=0.0, low_open=True)
    lo_w = as_real(min_value_wrong, name="min_value_wrong")
    hi_w = as_real(max_value_wrong, name="max_value_wrong")
    lo_c = as_real(min_value_correct, name="min_value_correct")
    hi_c = as_real(max_value_correct, name="max_value_correct")
    if lo_w > hi_w:
        raise invalid(
            "min_value_wrong",
            f"be <= max_value_wrong={hi_w!r}",
            min_value_wrong,
            "Swap the two values (min_value_wrong is the reward of the shortest wrong answer).",
        )
    if lo_c > hi_c:
        raise invalid(
            "min_value_correct",
            f"be <= max_value_correct={hi_c!r}",
            min_value_correct,
            "Swap the two values (min_value_correct is the reward at max_length).",
        )
    exceed = None if exceed_value is None else as_real(exceed_value, name="exceed_value")
    progress = np.minimum(ell, length_cap) / length_cap
    cosine = np.cos(np.pi * progress)
    c, rest = 0.5 * (1.0 + cosine), 0.5 * (1.0 - cosine)
    # convex combinations: no difference of the two ends, which could overflow float64
    reward = np.where(ok, hi_c * c + lo_c * rest, lo_w * c + hi_w * rest)
    if exceed is not None:
        reward = np.where(ell >= length_cap, exceed, reward)
    return _out(reward)


# ---------------------------------------------------------------------------------------------
# L1 / LCPO
# ---------------------------------------------------------------------------------------------


def _targets(target_lengths: ArrayLike, ell: NDArray[np.float64]) -> NDArray[np.float64]:
    target = _lengths(target_lengths, name="target_lengths")
    if target.ndim != 0 and target.shape != ell.shape:
        raise invalid(
            "target_lengths",
            f"be a scalar or have the shape of lengths {ell.shape}",
            target,
            "Pass one target n_gold per response (or one for all).",
        )
    return np.asarray(np.broadcast_to(target, ell.shape), dtype=np.float64)


def l1_exact_reward(
    lengths: ArrayLike, correct: ArrayLike, target_lengths: ArrayLike, *, alpha: float = 0.0003
) -> NDArray[np.float64]:
    r"""L1-Exact (LCPO-Exact) reward: correctness minus the distance to the target length.

    .. math::

        r = \mathbb 1[\text{correct}] - \alpha\, |n_\text{gold} - n_y|.

    Parameters
    ----------
    lengths : array_like of float, any shape
        Generated lengths :math:`n_y`, ``>= 0``.
    correct : array_like of bool, same shape
        Whether each answer is correct.
    target_lengths : array_like of float, scalar or same shape
        The target :math:`n_\text{gold}` given in the prompt ("Think for n tokens"), ``>= 0``.
    alpha : float, default 0.0003
        Price per token of deviation, ``>= 0`` (the paper's value).

    Returns
    -------
    ndarray of float64
        The reward, shape of ``lengths``: at most 1, unbounded below.

    Raises
    ------
    TypeError
        If an input is not numeric.
    ValueError
        On shape mismatch, negative or non-finite input, or ``alpha < 0``; or if the reward is
        beyond float64's range (``alpha * |target - length|`` past 1.8e308).

    Notes
    -----
    Maximal at :math:`n_y = n_\text{gold}`, symmetric around it, linear with slope ``∓alpha``:
    over- and under-shooting are penalised alike. Above the target it is the constant price
    ``alpha`` per token, so under the saturating quality model the optimal length is
    :math:`\max(n_\text{gold}, \lambda \ln(q_\text{max}/(\lambda\alpha)))`: shorter targets are
    overshot (PEN6).

    References
    ----------
    Aggarwal and Welleck, "L1: Controlling How Long A Reasoning Model Thinks With Reinforcement
    Learning", arXiv 2503.04697, §3 (LCPO), Eq. for LCPO-Exact.

    Examples
    --------
    >>> from refimpl import l1_exact_reward
    >>> l1_exact_reward([1000, 2000, 1000], [True, True, False], 1000)
    array([1. , 0.7, 0. ])
    """
    ell = _lengths(lengths)
    ok = _correct(correct, ell)
    target = _targets(target_lengths, ell)
    a = as_real(alpha, name="alpha", low=0.0, meaning="price per token of deviation")
    with np.errstate(over="ignore"):
        reward = ok.astype(np.float64) - a * np.abs(target - ell)
    if not np.all(np.isfinite(reward)):
        raise invalid(
            "alpha",
            "keep alpha * |target_lengths - lengths| within float64's range",
            alpha,
            "Pass a smaller alpha or target_lengths (the reward is below -1.8e308).",
        )
    return _out(reward)


def l1_max_reward(
    lengths: ArrayLike,
    correct: ArrayLike,
    target_lengths: ArrayLike,
    *,
    alpha: float = 0.0003,
    delta: float = 0.5,
) -> NDArray[np.float64]:
    r"""L1-Max (LCPO-Max) reward: correctness scaled by a soft budget on the length.

    .. math::

        r = \mathbb 1[\text{correct}] \cdot
            \operatorname{clip}\!\left(\alpha\,(n_\text{gold} - n_y) + \delta,\ 0,\ 1\right).

    Parameters
    ----------
    lengths : array_like of float, any shape
        Generated lengths :math:`n_y`, ``>= 0``.
    correct : array_like of bool, same shape
        Whether each answer is correct.
    target_lengths : array_like of float, scalar or same shape
        The budget :math:`n_\text{gold}` given in the prompt, ``>= 0``.
    alpha : float, default 0.0003
        Slope per token, ``>= 0``.
    delta : float, default 0.5
        Reward of a correct answer exactly at the budget, in ``[0, 1]``: a correct answer slightly
        over budget still earns a positive reward (the paper's δ = 0.5).

    Returns
    -------
    ndarray of float64
        The reward in ``[0, 1]``, shape of ``lengths``; 0 for every wrong answer.

    Raises
    ------
    TypeError
        If an input is not numeric.
    ValueError
        On shape mismatch, negative or non-finite input, ``alpha < 0`` or ``delta`` outside [0, 1].

    Notes
    -----
    Non-increasing in the length; a correct answer gets 1 once
    :math:`n_y \le n_\text{gold} - (1 - \delta)/\alpha` and 0 once
    :math:`n_y \ge n_\text{gold} + \delta/\alpha` (PEN7).

    References
    ----------
    Aggarwal and Welleck, arXiv 2503.04697, §3 (LCPO-Max).

    Examples
    --------
    >>> from refimpl import l1_max_reward
    >>> l1_max_reward([1000, 2000, 3000, 500], [True, True, True, False], 2000)
    array([0.8, 0.5, 0.2, 0. ])
    """
    ell = _lengths(lengths)
    ok = _correct(correct, ell)
    target = _targets(target_lengths, ell)
    a = as_real(alpha, name="alpha", low=0.0, meaning="slope per token")
    d = as_real(delta, name="delta", low=0.0, high=1.0, meaning="reward at the budget")
    with np.errstate(over="ignore"):  # an overflow to +-inf is clipped to 1 or 0: still exact
        budget = np.clip(a * (target - ell) + d, 0.0, 1.0)
    return _out(np.where(ok, budget, 0.0))
