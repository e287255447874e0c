r"""The KL penalty folded into the per-token reward: the outcome on the last token, −β·KL on each.

RLHF as Ziegler et al. 2019 set it up ("Fine-Tuning Language Models from Human Preferences",
arXiv:1909.08593), and InstructGPT after them, does not add a KL term to the loss: it subtracts
:math:`\beta` times the divergence from the reference policy from the *reward*. PPO
implementations (OpenRLHF's ``compute_reward``) do it per token: :math:`-\beta` times a per-token
estimate on each token, and the sequence's outcome reward on its last token, so that returns and
advantages computed from these token rewards carry the penalty. The per-token
estimate ``kl`` is any estimator of :mod:`refimpl.losses.kl` (k1, k2, k3) evaluated outside this
function; here it is an input.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import as_float_array, as_real, invalid
from refimpl.losses._common import masked, token_array, token_mask

__all__ = ["kl_penalized_rewards"]

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
    r = as_float_array(rewards, name="rewards", ndim=1)
    if r.shape[0] != shape[0]:
        raise invalid(
            "rewards",
            f"hold one reward per row of kl ({shape[0]})",
            r,
            f"Pass rewards of shape ({shape[0]},), one outcome reward per sequence.",
        )
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
