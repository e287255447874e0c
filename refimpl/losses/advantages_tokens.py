r"""Advantages beyond one scalar per sequence: GDPO (several rewards) and the optimal token baseline.

:func:`gdpo_advantages` takes ``K`` outcome rewards per sequence, shape ``(B, K)``, normalises
each within its groups as GRPO does, sums them with weights and whitens the sum over the batch's
tokens; it returns one advantage per sequence, shape ``(B,)``.
:func:`optimal_token_baseline_advantages` takes per-token rewards and the sampler's per-token
statistics, shape ``(B, T)``, and returns one advantage per token, shape ``(B, T)`` (0 at padding).

Groups and singletons follow :mod:`refimpl.losses.advantages`. Neither is differentiated (every
framework computes advantages under ``torch.no_grad()``).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import as_float_array, as_real, invalid, mismatch, require_entries
from refimpl.losses._common import as_choice, token_array
from refimpl.losses.advantages import (
    _PLACEMENTS,
    EpsPlacement,
    _as_groups,
    _as_sequence_weights,
    grpo_advantages,
    reinforce_pp_advantages,
)

__all__ = ["gdpo_advantages", "optimal_token_baseline_advantages"]

FloatArray = NDArray[np.float64]
Singleton = Literal["zero", "raw", "error"]
Std = Literal["sample", "population", "none"]


# ---------------------------------------------------------------------------------------------
# GDPO
# ---------------------------------------------------------------------------------------------


def _as_reward_matrix(rewards: ArrayLike) -> FloatArray:
    r = as_float_array(rewards, name="rewards", ndim=2)
    if r.shape[0] == 0 or r.shape[1] == 0:
        raise invalid(
            "rewards",
            "hold at least one sequence and one reward component",
            r,
            "Pass shape (B, K): one row per sequence, one column per reward component.",
        )
    return r


def _as_weights(weights: ArrayLike | None, k: int) -> FloatArray:
    if weights is None:
        return np.ones(k, dtype=np.float64)
    w = as_float_array(weights, name="weights", ndim=1)
    if w.shape != (k,):
        raise mismatch(
            ("weights", "rewards"),
            "give one weight per reward component (column of rewards)",
            f"weights.shape={w.shape} and rewards.shape[1]={k}",
            "Pass K weights for rewards of shape (B, K), or None for equal weights.",
        )
    return w


def gdpo_advantages(
    rewards: ArrayLike,
    *,
    group: ArrayLike,
    weights: ArrayLike | None = None,
    mask: ArrayLike | None = None,
    std: Std = "sample",
    eps: float = 1e-6,
    singleton: Singleton = "zero",
    whiten_eps: float = 1e-8,
    whiten_placement: EpsPlacement = "variance",
) -> FloatArray:
    r"""GDPO advantages: each reward component normalised in its group, summed, then whitened.

    .. math::

        A^{(k)}_i = \mathrm{GRPO}\bigl(r^{(k)}\bigr)_i, \qquad
        S_i = \sum_k w_k A^{(k)}_i, \qquad
        A_i = \frac{S_i - m}{D(s)},

    with :math:`D(s) = \sqrt{s^2 + \varepsilon_w}` (``whiten_placement="variance"``),
    :math:`s + \varepsilon_w` (``"std"``) or :math:`\sqrt{\max(s^2, \varepsilon_w)}`
    (``"floor"``), where :math:`\mathrm{GRPO}` is :func:`~refimpl.grpo_advantages` with
    ``std``, ``eps`` (added to the std) and ``singleton``, and :math:`m, s^2` are the
    token-weighted batch mean and sample variance of :math:`S` (each sequence weighs its number of
    valid tokens; 1 each without ``mask``), as in
    :func:`~refimpl.reinforce_pp_advantages`. Normalising each component before
    summing keeps a high-variance reward from drowning the others, which a GRPO of the summed
    reward does not.

    .. warning::

        verl 0.9.1 (``core_algos.compute_gdpo_outcome_advantage``) calls
        ``compute_grpo_outcome_advantage`` on each component (sample std, ``ε = 1e-6``, a
        singleton keeps its reward: ``singleton="raw"``), reads the components as float32
        (``np.asarray(comp, dtype=np.float32)``) and whitens with ``masked_whiten`` (sample
        variance over tokens, ``rsqrt(var + 1e-8)``, its mean divided by ``N + 1e-8``).
        TRL 1.16.0 (``GRPOTrainer._generate_and_score_completions`` with
        ``multi_objective_aggregation="normalize_then_sum"``) z-scores each reward function's
        float32 outputs in its group (sample std, ``ε = 1e-4`` added to it; a group of one gets
        0), sums them with ``reward_weights`` and standardises the sum over the *sequences* of
        the batch with ``ε_w = 1e-4`` added to the sample std: ``mask=None``, ``eps=1e-4``,
        ``whiten_eps=1e-4``, ``whiten_placement="std"``. It ignores ``scale_rewards`` on that
        path.

    Parameters
    ----------
    rewards : array_like, shape (B, K)
        ``K >= 1`` outcome reward components per sequence; finite.
    group : array_like of int, shape (B,)
        Prompt id of each sequence.
    weights : array_like, shape (K,), optional
        :math:`w_k`; default all 1.
    mask : array_like, shape (B, T), optional
        0/1 padding mask; its row sums weight the batch whitening. Default: 1 per sequence.
    std, eps, singleton
        The per-component GRPO's options (:func:`~refimpl.grpo_advantages`).
    whiten_eps : float
        :math:`\varepsilon_w >= 0` in the batch denominator, placed by ``whiten_placement``.
    whiten_placement : {"variance", "std", "floor"}
        :math:`\sqrt{s^2 + \varepsilon_w}` (verl), :math:`s + \varepsilon_w` (TRL) or
        :math:`\sqrt{\max(s^2, \varepsilon_w)}`.

    Returns
    -------
    ndarray of float64, shape (B,)
        The advantages; 0 for a sequence with no valid token.

    Raises
    ------
    ValueError
        If ``rewards`` is not a finite non-empty ``(B, K)`` array, ``group``, ``weights`` or
        ``mask`` do not match it, the batch has fewer than two valid tokens, an ``eps`` is
        negative, or an option is unknown.

    Notes
    -----
    With one component, :math:`w = 1` and ``mask=None``, the result is GRPO's advantages
    re-standardised over the batch (claim AB6). The token-weighted mean of the result is 0.
    With :math:`\varepsilon_w > 0` the batch standard deviation of the result is
    :math:`s/D(s)`: 1 up to :math:`\varepsilon_w/(2s^2)` under ``"variance"`` but up to
    :math:`\varepsilon_w/s` under ``"std"``, and a batch whose sums :math:`S` spread by
    :math:`s \le \varepsilon_w` is floored at 1 under ``"floor"`` (claim GD1).

    References
    ----------
    GDPO: Group reward-Decoupled Normalization Policy Optimization (arXiv 2601.05242, as cited by
    verl).

    Examples
    --------
    >>> import refimpl.losses.advantages_tokens as at
    >>> r = [[1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.0, 1.0]]
    >>> at.gdpo_advantages(r, group=[0, 0, 1, 1], eps=0.0, whiten_eps=0.0)
    array([ 0.8660254, -0.8660254,  0.8660254, -0.8660254])
    >>> at.gdpo_advantages(r, group=[0, 0, 1, 1], eps=0.0, whiten_eps=1.0, whiten_placement="std")
    array([ 0.38926954, -0.38926954,  0.38926954, -0.38926954])
    """
    r = _as_reward_matrix(rewards)
    w = _as_weights(weights, r.shape[1])
    _as_groups(group, r.shape[0])
    if mask is not None:
        _as_sequence_weights(mask, r.shape[0])
    e_w = as_real(whiten_eps, name="whiten_eps", low=0.0, meaning="in the batch denominator")
    as_choice(whiten_placement, name="whiten_placement", choices=_PLACEMENTS)  # named refusal
    total = np.zeros(r.shape[0], dtype=np.float64)
    for k in range(r.shape[1]):
        a = grpo_advantages(r[:, k], group=group, std=std, eps=eps, singleton=singleton)
        total = total + w[k] * np.asarray(a, dtype=np.float64)
    return reinforce_pp_advantages(
        total, mask=mask, std="sample", eps=e_w, eps_placement=whiten_placement
    )


# ---------------------------------------------------------------------------------------------
# optimal token baseline
# ---------------------------------------------------------------------------------------------


def _as_token_array(value: ArrayLike, *, name: str, shape: tuple[int, ...]) -> FloatArray:
    arr = as_float_array(value, name=name, ndim=2)
    if arr.shape != shape:
        raise mismatch(
            (name, "token_rewards"),
            "have the same (B, T) shape",
            f"{name}.shape={arr.shape} and token_rewards.shape={shape}",
            f"Pass {name} with one entry per token of every sequence.",
        )
    return arr


def _as_mask(mask: ArrayLike, shape: tuple[int, ...]) -> FloatArray:
    m = _as_token_array(mask, name="mask", shape=shape)
    require_entries(
        m,
        (m != 0.0) & (m != 1.0),
        name="mask",
        rule="hold only 0 and 1 (1 = a real token, 0 = padding)",
        fix="; pass a boolean or 0/1 response mask.",
    )
    return m


def _token_inputs(
    token_rewards: ArrayLike,
    logp_old: ArrayLike,
    sum_pi_squared: ArrayLike,
    mask: ArrayLike,
    is_weights: ArrayLike | None,
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """``(rewards, per-token weight w_t, mask, lengths)`` after validation.

    Padding is never read: the rules hold at real tokens only, and ``w_t`` is 0 at padding
    whatever the arrays hold there (so any finite value is accepted).
    """
    r = token_array(token_rewards, name="token_rewards")
    shape = r.shape
    logp = _as_token_array(logp_old, name="logp_old", shape=shape)
    s2 = _as_token_array(sum_pi_squared, name="sum_pi_squared", shape=shape)
    m = _as_mask(mask, shape)
    real = m > 0
    require_entries(
        logp,
        real & (logp > 0),
        name="logp_old",
        rule="be <= 0 at real tokens (a log-probability)",
        fix="; pass the sampler's log-probabilities of the sampled tokens.",
    )
    require_entries(
        s2,
        real & ((s2 < 0) | (s2 > 1)),
        name="sum_pi_squared",
        rule="lie in [0, 1] at real tokens (a sum of squared probabilities)",
        fix="; pass Σ_v π(v)² of the sampler's distribution at each position.",
    )
    pi = np.exp(np.where(real, logp, 0.0))
    w = np.where(real, 1.0 - 2.0 * pi + s2, 0.0)
    if is_weights is not None:
        rho = _as_token_array(is_weights, name="is_weights", shape=shape)
        rho = np.where(real, rho, 0.0)
        w = w * rho * rho
    return r, w, m, m.sum(axis=1)


def _zero_tail(baselines: FloatArray, members: NDArray[np.intp], lengths: FloatArray) -> None:
    """The unique longest response's baseline is 0 past the second-longest length."""
    lens = lengths[members]
    order = np.sort(lens)
    longest, second = order[-1], order[-2]
    top = members[lens == longest]
    if top.size == 1 and longest > second:
        baselines[top[0], int(second) :] = 0.0


def optimal_token_baseline_advantages(
    token_rewards: ArrayLike,
    logp_old: ArrayLike,
    sum_pi_squared: ArrayLike,
    *,
    group: ArrayLike,
    mask: ArrayLike,
    is_weights: ArrayLike | None = None,
    zero_tail: bool = True,
    eps: float = 0.0,
    positions: Literal["column", "valid"] = "column",
) -> FloatArray:
    r"""Per-token advantages with the optimal token baseline (OTB) of each group and position.

    With :math:`G_{i,t} = \sum_{s \ge t} m_{i,s} r_{i,s}` the reward-to-go,
    :math:`\pi_{i,t} = e^{\log\pi_\text{old}}` the sampled token's probability and
    :math:`\Sigma_{i,t} = \sum_v \pi(v)^2` at that position,

    .. math::

        w_{i,t} = \bigl(1 - 2\pi_{i,t} + \Sigma_{i,t}\bigr)\,\rho_{i,t}^2, \qquad
        W_{i,t} = \sum_{s \le t} m_{i,s} w_{i,s}, \qquad
        B_{g,t} = \frac{\sum_{i \in g} m_{i,t} W_{i,t} G_{i,t}}
                       {\sum_{i \in g} m_{i,t} W_{i,t} + \varepsilon},

    and :math:`A_{i,t} = m_{i,t}\,(G_{i,t} - B_{g(i),t})`. :math:`w` is
    :math:`\lVert\nabla_z \log\mathrm{softmax}(z)_y\rVert^2` at the logits (the squared norm of the
    score of one token), so :math:`W_t` is the realised path variance up to :math:`t`; the
    baseline minimising the gradient's variance weighs each trajectory's return by it.
    :math:`\rho` is the importance weight (1 without ``is_weights``). A group of one gets baseline
    0 (advantage = return); ``0/0 := 0`` when :math:`\varepsilon = 0`.

    With ``zero_tail`` (default), where one response of a group is strictly the longest, its
    baseline is 0 from column :math:`L_{(2)}` (the second-longest length) on: there it is alone,
    and its own return as baseline would cancel its advantage.

    ``positions`` says which tokens of different rows share a baseline: ``"column"`` (default)
    the same column :math:`t`; ``"valid"`` the :math:`k`-th valid token of each row (a multi-turn
    mask with gaps is compacted first; a row with no valid token is left out of its group). The
    two agree on right-padded masks.

    .. warning::

        verl 0.9.1 (``core_algos.compute_optimal_token_baseline_advantage``,
        ``adv_estimator="optimal_token_baseline"``) adds ``epsilon = 1e-8`` to the denominator;
        its multi-turn variant ``compute_multi_turn_optimal_token_baseline_advantage`` aligns the
        valid tokens of each row and leaves rows with no token out of their group
        (``positions="valid"``).

    Parameters
    ----------
    token_rewards : array_like, shape (B, T)
        Per-token rewards (an outcome reward sits on the last valid token); finite.
    logp_old : array_like, shape (B, T)
        The sampler's log-probability of each sampled token, ``<= 0``.
    sum_pi_squared : array_like, shape (B, T)
        :math:`\sum_v \pi(v)^2` of the sampler's distribution at each position, in [0, 1].
    group : array_like of int, shape (B,)
        Prompt id of each sequence.
    mask : array_like, shape (B, T)
        0/1 response mask.
    is_weights : array_like, shape (B, T), optional
        Per-token (truncated) importance weights :math:`\rho`; :math:`w` is scaled by
        :math:`\rho^2`.
    zero_tail : bool
        Zero the unique longest response's baseline past the second-longest length.
    eps : float
        ``ε >= 0`` added to the denominator.
    positions : {"column", "valid"}
        Share a baseline by column, or by the rank of the token among its row's valid tokens.

    Returns
    -------
    ndarray of float64, shape (B, T)
        The advantages; 0 at padding.

    Raises
    ------
    ValueError
        If an array is not finite or not of the rewards' ``(B, T)`` shape, ``logp_old > 0`` or
        ``sum_pi_squared`` outside [0, 1] at a real token (padding may hold any finite value),
        ``mask`` not 0/1, ``group`` not one integer per row, ``eps < 0``, or ``positions`` is
        unknown.

    Notes
    -----
    When every :math:`W` of a group at :math:`t` is equal the baseline is the group's mean
    return there (with :math:`\varepsilon = 0`); and
    :math:`\sum_{i \in g} m_{i,t} W_{i,t} A_{i,t} = \varepsilon B_{g,t}`: the
    :math:`W`-weighted advantages cancel (claim AB7).

    References
    ----------
    The verl documentation of the optimal token baseline ("B_t* = E[G_t W_t] / E[W_t]"); Greensmith
    et al. 2004, "Variance reduction techniques for gradient estimates in reinforcement learning"
    (the optimal baseline weighted by the score's squared norm).

    Examples
    --------
    >>> import refimpl.losses.advantages_tokens as at
    >>> r = [[0.0, 1.0], [0.0, 0.0]]
    >>> logp = [[-1e9, -1e9], [-1e9, -1e9]]  # pi = 0: w = 1 + Σπ²
    >>> s2 = [[0.0, 0.0], [0.0, 0.0]]
    >>> at.optimal_token_baseline_advantages(r, logp, s2, group=[0, 0], mask=[[1, 1], [1, 1]])
    array([[ 0.5,  0.5],
           [-0.5, -0.5]])
    """
    r, w, m, lengths = _token_inputs(token_rewards, logp_old, sum_pi_squared, mask, is_weights)
    inverse, counts = _as_groups(group, r.shape[0])
    e = as_real(eps, name="eps", low=0.0, meaning="added to the baseline's denominator")
    if not isinstance(zero_tail, bool | np.bool_):
        raise invalid("zero_tail", "be a bool", zero_tail, "Pass zero_tail=True or False.")
    where = as_choice(positions, name="positions", choices=("column", "valid"))
    returns = np.cumsum((r * m)[:, ::-1], axis=1)[:, ::-1]
    big_w = np.cumsum(w * m, axis=1)
    if where == "column":
        baselines = _baselines(returns, big_w, m, inverse, counts, lengths, e, zero_tail)
        return np.asarray(np.where(m > 0, returns - baselines, 0.0), dtype=np.float64)
    return _valid_positions(returns, big_w, m, inverse, lengths, e, zero_tail)


def _baselines(
    returns: FloatArray,
    big_w: FloatArray,
    m: FloatArray,
    inverse: NDArray[np.intp],
    counts: NDArray[np.intp],
    lengths: FloatArray,
    eps: float,
    zero_tail: bool,
) -> FloatArray:
    """``B_{g,t}`` per row and column (0 for a group of one), the zero tail applied."""
    baselines = np.zeros_like(returns)
    for g in np.flatnonzero(counts >= 2):
        members = np.flatnonzero(inverse == g)
        num = np.sum(returns[members] * big_w[members] * m[members], axis=0)
        den = np.sum(big_w[members] * m[members], axis=0) + eps
        baselines[members] = np.divide(num, den, out=np.zeros_like(num), where=den > 0)
        if zero_tail:
            _zero_tail(baselines, members, lengths)
    return baselines


def _valid_positions(
    returns: FloatArray,
    big_w: FloatArray,
    m: FloatArray,
    inverse: NDArray[np.intp],
    lengths: FloatArray,
    eps: float,
    zero_tail: bool,
) -> FloatArray:
    """The baseline over each row's valid tokens aligned (the k-th valid token of every row share
    a position); rows with no valid token are left out of their group."""
    out = np.zeros_like(returns)
    keep = np.flatnonzero(lengths > 0)
    if keep.size == 0:
        return out
    width = int(lengths.max())
    g_c = np.zeros((keep.size, width))
    w_c = np.zeros((keep.size, width))
    for row, i in enumerate(keep):
        idx = np.flatnonzero(m[i])
        g_c[row, : idx.size] = returns[i, idx]
        w_c[row, : idx.size] = big_w[i, idx]
    lens = lengths[keep]
    m_c = (np.arange(width)[None, :] < lens[:, None]).astype(np.float64)
    _, sub, counts = np.unique(inverse[keep], return_inverse=True, return_counts=True)
    b_c = _baselines(
        g_c, w_c, m_c, sub.astype(np.intp), counts.astype(np.intp), lens, eps, zero_tail
    )
    for row, i in enumerate(keep):
        idx = np.flatnonzero(m[i])
        out[i, idx] = g_c[row, : idx.size] - b_c[row, : idx.size]
    return out
