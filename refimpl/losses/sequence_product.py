r"""PPO-clip on the sequence's likelihood ratio: the product of its token ratios.

When a whole completion is one action (RLOO's view of generation as a bandit, Ahmadian et al.
2024), the importance ratio of sequence ``b`` is the ratio of the sequence likelihoods,

.. math::

    S_b = \frac{\pi(y_b \mid x_b)}{\pi^{\text{old}}(y_b \mid x_b)}
        = \exp\Bigl(\sum_{t \in b} (\log\pi_{bt} - \log\pi^{\text{old}}_{bt})\Bigr),

the *product* of the token ratios, where GSPO (:mod:`refimpl.losses.sequence`) takes their
geometric mean. For a constant per-token log-ratio :math:`\delta` the product is
:math:`e^{L_b\delta}`: a long sequence leaves the clip range first. TRL 1.16.0's
``RLOOTrainer._compute_loss`` clips this ratio, PPO-style, once per sequence.

Conventions (see :mod:`refimpl.losses._common`): the loss is minimised; padding has loss 0 and
gradient 0; a sequence made only of padding has loss 0. At a kink the returned gradient is the one
torch autograd gives: ``torch.clamp`` passes the gradient on its closed interval (bounds included)
and ``torch.maximum`` splits it equally between tied arguments.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl.losses._common import LossTerms, masked
from refimpl.losses.sequence import _clip_range, _inputs, _ppo_branch, _require_finite

__all__ = ["sequence_ppo_clip_loss"]

Array = NDArray[np.float64]

#: How to mend an overflowing product ratio (its log is the sum over tokens, not their mean).
_SUM_FIX = " (the sum over a sequence's tokens, not their mean)."


def sequence_ppo_clip_loss(
    logp: ArrayLike,
    logp_old: ArrayLike,
    advantages: ArrayLike,
    *,
    eps_low: float,
    eps_high: float | None = None,
    mask: ArrayLike | None = None,
    cotangent: ArrayLike | None = None,
) -> LossTerms:
    r"""PPO's clipped surrogate on the sequence-likelihood ratio (the product of token ratios).

    .. math::

        S_b = \exp\Bigl(\sum_{t \in b} (\log\pi_{bt} - \log\pi^{\text{old}}_{bt})\Bigr),
        \qquad
        \ell_{bt} = \max\bigl(-A_{bt}\, S_b,\; -A_{bt}\,\mathrm{clip}(S_b, 1-\epsilon_{\text{low}},
        1+\epsilon_{\text{high}})\bigr)

    at every valid token. With one advantage per sequence every valid token carries the sequence
    loss :math:`\ell_b`, so the ``seq_mean_token_mean`` aggregation gives the batch mean of
    :math:`\ell_b` (TRL's ``per_sequence_loss.mean()``). Where the unclipped term is active,
    :math:`\partial\ell_{bt}/\partial\log\pi_{bt'} = -A_{bt}\,S_b` for each valid :math:`t'`:
    no :math:`1/L_b`, unlike GSPO.

    Parameters
    ----------
    logp, logp_old : array_like, shape (B, T)
        Current and old (behaviour) log-probabilities of the sampled tokens; finite.
    advantages : array_like, shape (B,) or (B, T)
        One advantage per sequence (RLOO), or per token: then each token's surrogate uses its own
        advantage with the shared sequence ratio.
    eps_low : float
        Lower clip width, ``0 <= eps_low <= 1`` (the ratio is clipped below at ``1 - eps_low``).
    eps_high : float, optional
        Upper clip width ``>= 0``; default ``eps_low``.
    mask : array_like, shape (B, T), optional
        0/1 padding mask; default all tokens valid.
    cotangent : array_like, shape (B, T), optional
        Weights ``c`` of the vector–Jacobian product; default the mask.

    Returns
    -------
    LossTerms
        ``loss`` (B, T) and ``grad = ∂(Σ_bt c_bt loss_bt)/∂logp``, both 0 at padding:
        ``grad_bt' = Σ_t c_bt·(−A_bt)·f_bt·S_b`` at each valid ``t'``, with ``f`` the clip factor
        (1 unclipped, 0 clipped, ½ at a tie of the two branches).

    Raises
    ------
    ValueError
        Bad shapes or values, ``eps_low`` outside [0, 1], a negative ``eps_high``, a non-0/1 mask,
        or a ratio that overflows float64 where the surrogate is not clipped.

    Notes
    -----
    An all-padding sequence contributes 0 (loss and gradient): its summed log-ratio is 0, so a
    framework that keeps the row's ``−A·1`` in a mean over rows (TRL 1.16.0 ``RLOOTrainer``)
    shifts the loss value by :math:`-A_b/B`, not the gradient. At the clip bounds (``S`` exactly
    ``1 ± eps``) the gradient is the unclipped one (``torch.clamp`` includes its bounds). The
    gradient region by region is claim SP1, the length dependence claim SP2.

    References
    ----------
    Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style Optimization for Learning
    from Human Feedback in LLMs", arXiv 2402.14740 (a completion as one action); Schulman et al.
    2017, "Proximal Policy Optimization Algorithms", arXiv 1707.06347 (the clipped surrogate).

    Examples
    --------
    >>> import numpy as np
    >>> from refimpl.losses.sequence_product import sequence_ppo_clip_loss
    >>> lp = np.log([[0.5, 0.5], [0.5, 1.0]])
    >>> old = np.log([[0.5, 0.5], [0.25, 1.0]])  # row 1: S = 2, clipped at 1.2 for A > 0
    >>> terms = sequence_ppo_clip_loss(lp, old, [1.0, 1.0], eps_low=0.2)
    >>> terms.loss
    array([[-1. , -1. ],
           [-1.2, -1.2]])
    >>> terms.grad  # row 0 on-policy: Σ_t c_bt (−A_b) S_b = −2 at each token
    array([[-2., -2.],
           [ 0.,  0.]])
    """
    d, a, m, c, _ = _inputs(logp, logp_old, advantages, mask, cotangent)
    low, high = _clip_range(eps_low, eps_high, ratio_space=True)
    log_ratio = np.asarray(d.sum(axis=1), dtype=np.float64)
    with np.errstate(over="ignore"):
        s = np.exp(log_ratio)
    s_bt = np.broadcast_to(s[:, None], d.shape)
    with np.errstate(over="ignore", invalid="ignore"):
        loss, f = _ppo_branch(a, s_bt, low, high)
        loss = masked(loss, m)
    _require_finite(loss, log_ratio, what="loss", reduce="summed", fix=_SUM_FIX)
    with np.errstate(invalid="ignore", over="ignore"):
        per_token = np.where(f * c != 0.0, -a * f * c * s_bt, 0.0)
        row = per_token.sum(axis=1)
    grad = masked(np.broadcast_to(row[:, None], d.shape), m)
    _require_finite(grad, log_ratio, what="gradient", reduce="summed", fix=_SUM_FIX)
    return LossTerms(loss, grad)
