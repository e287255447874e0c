r"""The KL penalty folded into the per-token reward: the outcome on the last token, −β·KL on each.

RLHF as Ziegler et al. 2019 set it up ("Fine-Tuning Language Models from Human Preferences",
arXiv:1909.08593), and InstructGPT after them, does not add a KL term to the loss: it subtracts
:math:`\beta` times the divergence from the reference policy from the *reward*. PPO
implementations (OpenRLHF's ``compute_reward``) do it per token: :math:`-\beta` times a per-token
estimate on each token, and the sequence's outcome reward on its last token, so that returns and
advantages computed from these token rewards carry the penalty. The per-token
estimate ``kl`` is any estimator of :mod:`refimpl.losses.kl` (k1, k2, k3) evaluated outside this
function; here it is an input.

RLOO (Ahmadian et al. 2024) takes the penalty at the sequence level instead: the reward of a
completion is :math:`r - \beta\log(\pi(y|x)/\pi_{\text{ref}}(y|x))`, the k1 estimate summed over
its tokens, and the leave-one-out baseline is taken on that penalised reward
(:func:`rloo_kl_advantages`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import as_float_array, as_real, invalid
from refimpl.losses._common import like_tokens, masked, token_array, token_mask
from refimpl.losses.advantages import rloo_advantages
from refimpl.losses.advantages_normalized import rloo_normalized_advantages

__all__ = ["kl_penalized_rewards", "rloo_kl_advantages"]

Array = NDArray[np.float64]


def kl_penalized_rewards(
    rewards: ArrayLike,
    kl: ArrayLike,
    *,
    beta: float,
    mask: ArrayLike | None = None,
    reward_clip: tuple[float, float] | None = None,
    reward_bias: float = 0.0,
    reward_scaling: float = 1.0,
) -> Array:
    r"""Per-token rewards: the outcome reward on each row's last real token, minus β·KL on every one.

    .. math::

        r_{bt} = -\beta\,\mathrm{kl}_{bt} + \mathbb{1}[t = t_b]\,\operatorname{clip}\big((R_b
        + c)\,s, \ell, h\big), \qquad t_b = \max\{t : m_{bt} = 1\},

    with the bias :math:`c` and the scaling :math:`s` (0 and 1 by default), and
    :math:`r_{bt} = 0` at padding. A row with no real token gets no reward at all.

    Parameters
    ----------
    rewards : array_like, shape (B,)
        One outcome reward per sequence; finite.
    kl : array_like, shape (B, T)
        A per-token KL estimate between the policy and the reference; finite (its value at
        padding does not enter).
    beta : float
        The KL coefficient, ``beta >= 0``.
    mask : array_like, shape (B, T), optional
        0/1 padding mask (1 = a real token). Default: every token is real.
    reward_clip : (float, float), optional
        ``(low, high)`` with ``low <= high``: clip each (shifted and scaled) outcome reward to it.
        Default: none.
    reward_bias : float, optional
        Added to each outcome reward first (AReaL: ``reward_bias``); finite, default 0.
    reward_scaling : float, optional
        Multiplies the shifted outcome reward before the clip (AReaL: ``reward_scaling``);
        finite, default 1.

    Returns
    -------
    ndarray of float64, shape (B, T)
        The token rewards, 0 at padding.

    Raises
    ------
    ValueError
        A non-finite entry, mismatched shapes, a mask that is not 0/1, ``beta < 0``, a clip
        range with ``low > high``, a non-finite bias or scaling, or a shaped reward
        :math:`(R_b + c)\,s` that overflows float64.

    Notes
    -----
    OpenRLHF 0.11.2 ``openrlhf/models/utils.py:compute_reward`` computes this (``kl_coef`` is β; a
    coefficient ``<= 0`` is replaced by 0; ``reward_clip_range`` clips first) for every advantage
    estimator, before its returns (``get_cumulative_returns``) or GAE. It does not mask the KL
    term, and puts an all-padding row's reward on its last position; both sit at padding, which
    its returns and GAE multiply by the mask. With γ = 1 the return from the first token is
    :math:`\operatorname{clip}(R_b) - \beta\sum_t \mathrm{kl}_{bt}`: with ``kl`` the k1 estimate
    :math:`\log\pi - \log\pi_{\text{ref}}` it is the sampled sequence's log-ratio, whose expectation
    under the policy is :math:`\mathrm{KL}(\pi\,\|\,\pi_{\text{ref}})` (derivation:
    ``proofs/loss_kl_reward.py``).

    AReaL 1.0.4 ``areal/trainer/ppo/actor.py:PPOActor._compute_advantages`` shapes the outcome
    in this order, ``clip((r + reward_bias) * reward_scaling, -reward_clip, reward_clip)``
    (a symmetric clip, default ``reward_clip = 20``), before its optional ``reward_norm``; pass
    ``reward_clip=(-c, c)``. OpenRLHF and SkyRL neither shift nor scale.

    Examples
    --------
    >>> import refimpl.losses.kl_reward as kr
    >>> kr.kl_penalized_rewards([1.0, 2.0], [[0.5, 0.25, 9.0], [1.0, 1.0, 1.0]], beta=0.5,
    ...                         mask=[[1, 1, 0], [1, 1, 1]])
    array([[-0.25 ,  0.875,  0.   ],
           [-0.5  , -0.5  ,  1.5  ]])
    >>> kr.kl_penalized_rewards([3.0], [[0.0, 0.0]], beta=0.1, reward_clip=(-1.0, 1.0))
    array([[0., 1.]])
    >>> kr.kl_penalized_rewards([1.0, 0.0], [[0.0], [0.0]], beta=0.1, reward_bias=-0.5,
    ...                         reward_scaling=4.0, reward_clip=(-1.0, 1.0))
    array([[ 1.],
           [-1.]])
    """
    k = token_array(kl, name="kl")
    shape = (k.shape[0], k.shape[1])
    m = token_mask(mask, shape, like="kl")
    r = _sequence_rewards(rewards, shape[0])
    b = as_real(beta, name="beta", low=0.0, meaning="the KL coefficient (OpenRLHF: kl_coef)")
    r = _clipped(_shaped(r, reward_bias, reward_scaling), reward_clip)
    last = _last_token(m)
    with np.errstate(over="ignore", invalid="ignore"):
        out = -b * np.where(m > 0, k, 0.0) + last * r[:, None]
    if not np.all(np.isfinite(out)):
        raise invalid(
            "kl",
            "keep beta * kl + reward finite in float64",
            k,
            "Check the scale of kl, beta and rewards.",
        )
    return masked(np.asarray(out, dtype=np.float64), m) + 0.0


def _shaped(r: Array, bias: Any, scaling: Any) -> Array:
    """``(r + bias) * scaling``, refused where it overflows."""
    c = as_real(bias, name="reward_bias", meaning="added to each outcome reward")
    s = as_real(scaling, name="reward_scaling", meaning="multiplies the shifted outcome reward")
    if c == 0.0 and s == 1.0:
        return r
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.asarray((r + c) * s, dtype=np.float64)
    if not np.all(np.isfinite(out)):
        raise invalid(
            "reward_scaling",
            "keep (rewards + reward_bias) * reward_scaling finite in float64",
            scaling,
            "Check the scale of rewards, reward_bias and reward_scaling.",
        )
    return out


def rloo_kl_advantages(
    rewards: ArrayLike,
    logp: ArrayLike,
    logp_ref: ArrayLike,
    *,
    group: ArrayLike,
    beta: float,
    mask: ArrayLike | None = None,
    reward_clip: tuple[float, float] | None = None,
    normalize: bool = False,
    eps: float = 1e-4,
) -> Array:
    r"""RLOO advantages of the KL-penalised sequence reward ``clip(R) − β·Σ_t (logp − logp_ref)``.

    .. math::

        \tilde r_b = \operatorname{clip}(R_b, \ell, h)
            - \beta \sum_t m_{bt}\,(\log\pi_{bt} - \log\pi^{\text{ref}}_{bt}), \qquad
        A_b = \tilde r_b - \frac{1}{n_g - 1}\sum_{j \in g,\, j \neq b} \tilde r_j,

    then, with ``normalize=True``, :math:`(A_b - \bar A)/(s + \varepsilon)` over the batch
    (sample std, :func:`~refimpl.losses.advantages_normalized.rloo_normalized_advantages`).

    Parameters
    ----------
    rewards : array_like, shape (B,)
        One outcome reward per sequence; finite.
    logp, logp_ref : array_like, shape (B, T)
        Log-probabilities of the sampled tokens under the sampling policy and the reference
        policy; finite (their values at padding do not enter).
    group : array_like of int, shape (B,)
        Prompt id of each sequence (sizes may differ); a singleton group gets advantage 0.
    beta : float
        The KL coefficient, ``beta >= 0``.
    mask : array_like, shape (B, T), optional
        0/1 padding mask (1 = a real token). Default: every token is real.
    reward_clip : (float, float), optional
        ``(low, high)`` with ``low <= high``: clip each outcome reward to it before the penalty
        is subtracted (the penalty itself is not clipped). Default: none.
    normalize : bool
        Standardise the advantages over the batch (TRL: ``normalize_advantages``).
    eps : float
        ``>= 0``, added to the batch standard deviation when ``normalize`` (TRL 1.16.0: 1e-4).

    Returns
    -------
    ndarray of float64, shape (B,)
        The advantages.

    Raises
    ------
    ValueError
        As :func:`kl_penalized_rewards` and
        :func:`~refimpl.losses.advantages.rloo_advantages`; a penalised reward that is not
        finite in float64.

    Notes
    -----
    TRL 1.16.0 ``trl/trainer/rloo_trainer.py:RLOOTrainer._generate_and_score_completions``
    computes this with ``beta > 0`` (``per_token_kl = old_per_token_logps −
    ref_per_token_logps``, summed over the completion mask, ``rewards − beta·kl`` after the
    ``reward_clip_range`` clamp), as the RLOO paper defines the reward: the sequence log-ratio is
    the k1 estimate of :math:`\mathrm{KL}(\pi\,\|\,\pi_{\text{ref}})`, unbiased, and can be
    negative. Because the penalty enters the reward, it also enters the other sequences'
    baselines: :math:`A_b` moves by :math:`-\beta` per nat of its own log-ratio and by
    :math:`+\beta/(n_g - 1)` per nat of a sibling's; the advantages of a group still sum to 0.
    With ``beta = 0`` and no clip this is :func:`~refimpl.losses.advantages.rloo_advantages`.

    References
    ----------
    Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style Optimization for Learning
    from Human Feedback in LLMs", arXiv 2402.14740 (section 3: the KL-penalised sequence reward
    and its leave-one-out baseline).

    Examples
    --------
    >>> import refimpl.losses.kl_reward as kr
    >>> kr.rloo_kl_advantages([1.0, 0.0], [[-1.0, -1.0], [-2.0, -9.0]], [[-2.0, -1.0], [-2.0, 0.0]],
    ...                       group=[0, 0], beta=0.5, mask=[[1, 1], [1, 0]])
    array([ 0.5, -0.5])
    >>> kr.rloo_kl_advantages([3.0, 0.0], [[0.0], [0.0]], [[0.0], [0.0]], group=[0, 0], beta=0.5,
    ...                       reward_clip=(-1.0, 1.0))
    array([ 1., -1.])
    """
    lp = token_array(logp, name="logp")
    shape = (lp.shape[0], lp.shape[1])
    ref = like_tokens(logp_ref, shape, name="logp_ref", like="logp")
    m = token_mask(mask, shape, like="logp")
    r = _clipped(_sequence_rewards(rewards, shape[0]), reward_clip)
    b = as_real(beta, name="beta", low=0.0, meaning="the KL coefficient (TRL: beta)")
    if not isinstance(normalize, bool | np.bool_):
        raise invalid("normalize", "be a bool", normalize, "Pass normalize=True or False.")
    e = as_real(eps, name="eps", low=0.0, meaning="added to the batch standard deviation")
    with np.errstate(over="ignore", invalid="ignore"):
        penalised = r - b * np.where(m > 0, lp - ref, 0.0).sum(axis=1)
    if not np.all(np.isfinite(penalised)):
        raise invalid(
            "logp",
            "keep reward − beta·Σ(logp − logp_ref) finite in float64",
            lp,
            "Check the scale of logp, logp_ref, beta and rewards.",
        )
    if normalize:
        return rloo_normalized_advantages(penalised, group=group, eps=e)
    return np.asarray(rloo_advantages(penalised, group=group), dtype=np.float64)


def _sequence_rewards(rewards: ArrayLike, rows: int) -> Array:
    r = as_float_array(rewards, name="rewards", ndim=1)
    if r.shape[0] != rows:
        raise invalid(
            "rewards",
            f"hold one reward per row of the token arrays ({rows})",
            r,
            f"Pass rewards of shape ({rows},), one outcome reward per sequence.",
        )
    return r


def _clipped(r: Array, reward_clip: Any) -> Array:
    if reward_clip is None:
        return r
    bounds = as_float_array(reward_clip, name="reward_clip", ndim=1)
    if bounds.shape != (2,) or not bounds[0] <= bounds[1]:
        raise invalid(
            "reward_clip",
            "be a (low, high) pair with low <= high",
            reward_clip,
            "Pass reward_clip=(low, high), e.g. (-10.0, 10.0), or None for no clip.",
        )
    return np.asarray(np.clip(r, bounds[0], bounds[1]), dtype=np.float64)


def _last_token(m: Array) -> Array:
    """1.0 at each row's last real token, 0 elsewhere (a row without one has none)."""
    t = m.shape[1]
    last = t - 1 - np.argmax(m[:, ::-1] > 0, axis=1)
    out = np.zeros_like(m)
    rows = np.flatnonzero(m.any(axis=1))
    out[rows, last[rows]] = 1.0
    return out
