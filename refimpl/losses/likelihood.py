r"""The negative log-likelihood of the sampled tokens (cross-entropy against the data).

The supervised term some RL trainers register beside their policy losses (SFT steps, distillation
on teacher samples): a token's loss is :math:`-\log\pi_\theta(y_t)`, with no advantage, no ratio
and no anchor. It is REINFORCE with every advantage 1 (:func:`refimpl.losses.reinforce_loss`),
stated on its own so that a candidate that takes no advantages can be checked.
"""

from __future__ import annotations

from numpy.typing import ArrayLike

from refimpl.losses._common import LossTerms, masked, token_array, token_cotangent, token_mask

__all__ = ["nll_loss"]


def nll_loss(
    logp: ArrayLike,
    *,
    mask: ArrayLike | None = None,
    cotangent: ArrayLike | None = None,
) -> LossTerms:
    r"""The negative log-likelihood of the sampled tokens, per token.

    .. math::

        \ell_t = -\log\pi_\theta(y_t), \qquad
        \frac{\partial\ell_t}{\partial\log\pi_\theta(y_t)} = -1 .

    Parameters
    ----------
    logp : array_like, shape (B, T)
        Log-probabilities of the target tokens; finite.
    mask : array_like, shape (B, T), optional
        0/1 padding mask (1 = a real token). Default: every token is real.
    cotangent : array_like, shape (B, T), optional
        Weights ``c`` of the vector–Jacobian product (the aggregation's token weights). Default:
        the mask.

    Returns
    -------
    LossTerms
        ``loss`` (B, T), 0 at padding; ``grad = −c``, 0 at padding. Both are exact (a negation).

    Raises
    ------
    ValueError
        A non-finite entry, mismatched shapes, or a mask that is not 0/1.

    Notes
    -----
    SkyRL 0.3.0 ``cross_entropy_loss`` (``policy_loss_type="cross_entropy"``) returns the sum of
    this loss over the real tokens (``reduce_loss``: ``(loss * loss_mask).sum()``), Tinker's
    ``cross_entropy`` semantics. Its value is the cross-entropy between the data (one-hot targets)
    and the model, averaged by whatever weights the aggregation gives; derivation in
    ``proofs/nll_loss.py``.

    Examples
    --------
    >>> import refimpl.losses.likelihood as lk
    >>> terms = lk.nll_loss([[-0.5, -2.0]], mask=[[1, 0]])
    >>> terms.loss
    array([[0.5, 0. ]])
    >>> terms.grad
    array([[-1.,  0.]])
    """
    lp = token_array(logp, name="logp")
    m = token_mask(mask, (lp.shape[0], lp.shape[1]))
    c = token_cotangent(cotangent, m)
    return LossTerms(masked(-lp, m), masked(-c, m))
