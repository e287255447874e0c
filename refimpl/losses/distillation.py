r"""On-policy distillation by the reverse KL as a reward: the importance-weighted score function.

A student :math:`\pi_\theta` learns from a teacher :math:`\pi_T` on its own samples by treating
the per-token log-ratio to the teacher, :math:`r_t = \log\pi_T(y_t) - \log\pi_\theta(y_t)`, as a
*reward* with no gradient of its own, and following the policy gradient of that reward from
samples of an older policy :math:`\pi_{\text{old}}` (importance-weighted). The expected gradient
on-policy is the gradient of the reverse KL :math:`\mathrm{KL}(\pi_\theta\,\|\,\pi_T)` per token
(the score-function form of it), which the k1 penalty :math:`\log\pi_\theta - \log\pi_T`
differentiated directly would not give (its gradient is 1 per token, whatever the sample).

It returns :class:`~refimpl.losses.LossTerms` (the per-token loss, minimised, 0 at padding, and
its gradient with respect to ``logp`` as a vector–Jacobian product with ``cotangent``).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from refimpl.losses._common import LossTerms, like_tokens, token_array
from refimpl.losses.policy_gradient import importance_weighted_pg_loss

__all__ = ["reverse_kl_distillation_loss"]


def reverse_kl_distillation_loss(
    logp: ArrayLike,
    logp_old: ArrayLike,
    logp_teacher: ArrayLike,
    *,
    mask: ArrayLike | None = None,
    cotangent: ArrayLike | None = None,
) -> LossTerms:
    r"""The importance-weighted policy gradient with the reverse-KL reward to a teacher.

    .. math::

        \ell_t = -\rho_t\,\operatorname{sg}\bigl[\log\pi_T(y_t) - \log\pi_\theta(y_t)\bigr],
        \qquad \rho_t = \exp(\log\pi_\theta(y_t) - \log\pi_{\text{old}}(y_t)),

        \frac{\partial\ell_t}{\partial\log\pi_\theta(y_t)}
        = \rho_t\,\bigl(\log\pi_\theta(y_t) - \log\pi_T(y_t)\bigr).

    It is :func:`refimpl.importance_weighted_pg_loss` with the advantage
    :math:`A_t = \log\pi_T - \log\pi_\theta` computed from ``logp`` itself (and detached). The
    value is the importance-weighted k1 estimate :math:`\rho\,(\log\pi_\theta - \log\pi_T)`; the
    gradient is the ratio's alone, so on-policy (:math:`\rho = 1`) it is the k1 estimate itself,
    whose expectation over :math:`y \sim \pi_\theta` is the gradient of
    :math:`\mathrm{KL}(\pi_\theta\,\|\,\pi_T)` (claim :ref:`DS1 <ds1>`).

    Parameters
    ----------
    logp : array_like, shape (B, T)
        Student log-probabilities :math:`\log\pi_\theta`; the gradient is with respect to them.
    logp_old : array_like, shape (B, T)
        Log-probabilities the ratio is taken against (the policy that sampled the tokens); no
        gradient.
    logp_teacher : array_like, shape (B, T)
        Teacher log-probabilities of the same tokens; no gradient.
    mask, cotangent : array_like, shape (B, T), optional
        Padding mask and VJP weights (default: the mask).

    Returns
    -------
    LossTerms
        Per-token loss and ``grad``, both 0 at padding.

    Raises
    ------
    ValueError
        Invalid arrays (non-finite, shape, mask); a real token whose loss ``ρ·|A|`` overflows
        float64.

    Notes
    -----
    Frameworks (as read): AReaL 1.0.4 ``grpo_loss_fn`` with ``teacher_logp`` in the batch and
    ``rl_loss_weight = 0`` ("pure KD") computes ``−distill_loss_weight · Σ exp(logprobs −
    old_logp)·(teacher_logp − logprobs.detach())·mask / max(Σ mask, 1)``: this loss, token-mean
    aggregated, times ``distill_loss_weight`` (default 0.005). With ``rl_loss_weight != 0`` AReaL
    adds the differentiated k1 penalty instead (:func:`refimpl.kl_penalty`, ``estimator="k1"``).

    References
    ----------
    Agarwal et al., "On-Policy Distillation of Language Models: Learning from Self-Generated
    Mistakes" (GKD, arXiv 2306.13649); Xu et al., "KDRL: Post-Training Reasoning LLMs via Unified
    Knowledge Distillation and Reinforcement Learning" (arXiv 2506.02208).

    Examples
    --------
    >>> import numpy as np, refimpl
    >>> logp = np.log([[0.5, 0.25]])
    >>> terms = refimpl.reverse_kl_distillation_loss(logp, logp, np.log([[0.25, 0.5]]))
    >>> terms.grad.round(6)   # on-policy: log π − log π_T = ±log 2
    array([[ 0.693147, -0.693147]])
    """
    lp = token_array(logp, name="logp")
    teacher = like_tokens(
        logp_teacher, (lp.shape[0], lp.shape[1]), name="logp_teacher", like="logp"
    )
    return importance_weighted_pg_loss(
        lp, logp_old, np.asarray(teacher - lp), mask=mask, cotangent=cotangent
    )
