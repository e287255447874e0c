r"""A*-PO: the optimal value estimated from reference samples, and the regression onto it.

A*-PO (Brantley et al. 2025, "Accelerating RL for LLM Reasoning with Optimal Advantage
Regression", arXiv 2505.20686) trains in two stages. Stage 1 samples :math:`n` completions per
prompt from the reference policy and estimates the optimal value of the KL-regularised problem,
:math:`V^*(x) = \beta_1 \log \mathbb{E}_{y\sim\pi_{\text{ref}}}[\exp(r(x, y)/\beta_1)]`, by its
sample version (:func:`optimal_value_estimate`). Stage 2 samples one completion per prompt from the
current policy and regresses the implicit reward :math:`\beta_2\log(\pi/\pi_{\text{ref}})` onto the
optimal advantage :math:`r - \hat V^*` by least squares
(:func:`optimal_advantage_regression_loss`).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import as_float_array, as_real, invalid
from refimpl.losses._common import (
    LossTerms,
    like_tokens,
    masked,
    token_advantages,
    token_array,
    token_cotangent,
    token_mask,
)

__all__ = ["optimal_advantage_regression_loss", "optimal_value_estimate"]

Array = NDArray[np.float64]


def optimal_value_estimate(rewards: ArrayLike, *, beta1: float) -> Array:
    r"""The optimal value of each prompt from ``n`` reference samples: a soft maximum of rewards.

    .. math::

        \hat V^*(x) = \beta_1 \Bigl(\log\sum_{i=1}^{n} e^{r_i/\beta_1} - \log n\Bigr)
                    = \beta_1 \log \frac{1}{n}\sum_{i=1}^{n} e^{r_i/\beta_1}.

    Parameters
    ----------
    rewards : array_like, shape (P, n)
        The rewards of ``n >= 1`` completions sampled from the reference policy for each of
        ``P`` prompts; finite.
    beta1 : float
        The temperature ``> 0`` of the estimate (TRL: ``beta1``; the paper's :math:`\beta_1`).

    Returns
    -------
    ndarray of float64, shape (P,)
        :math:`\hat V^*` per prompt.

    Raises
    ------
    ValueError
        A non-finite reward, a shape other than (P, n) with ``P, n >= 1``, or ``beta1 <= 0``.

    Notes
    -----
    :math:`\min_i r_i \le \bar r \le \hat V^* \le \max_i r_i` (the mean by Jensen); as
    :math:`\beta_1 \to 0` the estimate tends to :math:`\max_i r_i`, as :math:`\beta_1 \to \infty`
    to the mean; it is decreasing in :math:`\beta_1`, and a shift of every reward by :math:`c`
    shifts it by :math:`c` (claims OV1–OV4, ``proofs/loss_optimal_value.py``). Computed as
    :math:`\max_i r_i + \beta_1\,\mathrm{log1p}\bigl(\frac1n\sum_i
    \mathrm{expm1}((r_i - \max r)/\beta_1)\bigr)`, which neither overflows nor loses the maximum
    when :math:`\beta_1` is small, nor loses the mean to the rounding of a logarithm near 1 when
    :math:`\beta_1` is large; accuracy a few ulps of :math:`\max_i |r_i| + \max_i r_i - \min_i r_i`.

    References
    ----------
    Brantley et al. 2025, arXiv 2505.20686 (stage 1, the estimate of :math:`V^*`).

    Examples
    --------
    >>> from refimpl.losses.optimal_advantage import optimal_value_estimate
    >>> optimal_value_estimate([[0.0, 0.0], [1.0, 1.0]], beta1=0.5)
    array([0., 1.])
    >>> float(optimal_value_estimate([[0.0, 1.0]], beta1=1e-3)[0])  # close to the maximum
    0.9993068528194401
    """
    r = as_float_array(rewards, name="rewards", ndim=2)
    if r.shape[0] == 0 or r.shape[1] == 0:
        raise invalid(
            "rewards",
            "hold at least one prompt and one sample per prompt",
            r,
            "Pass rewards of shape (P, n) with P >= 1 prompts and n >= 1 samples each.",
        )
    b = as_real(beta1, name="beta1", low=0.0, low_open=True, meaning="the temperature of V*")
    top = r.max(axis=1)
    with np.errstate(under="ignore", over="ignore"):  # a tiny beta1: e^{-inf} − 1 = −1, exact
        below = np.expm1((r - top[:, None]) / b).mean(axis=1)  # mean of e^x − 1, x <= 0
    return np.asarray(top + b * np.log1p(below), dtype=np.float64)


def optimal_advantage_regression_loss(
    logp: ArrayLike,
    logp_ref: ArrayLike,
    advantages: ArrayLike,
    *,
    beta2: float,
    mask: ArrayLike | None = None,
    cotangent: ArrayLike | None = None,
) -> LossTerms:
    r"""A*-PO's least-squares loss: the implicit reward regressed onto the optimal advantage.

    .. math::

        D_b = \sum_t m_{bt}\,(\log\pi_{bt} - \log\pi^{\text{ref}}_{bt}), \qquad
        \ell_{bt} = \bigl(\beta_2 D_b - A_{bt}\bigr)^2

    at every valid token, with :math:`A_b = r_b - \hat V^*(x_b)` the optimal advantage
    (:func:`optimal_value_estimate`). With one advantage per sequence every valid token carries the
    sequence's loss, so the ``seq_mean_token_mean`` aggregation gives the batch mean of
    :math:`(\beta_2 D_b - A_b)^2` (TRL's ``((implicit_reward − target) ** 2).mean()``).

    Parameters
    ----------
    logp, logp_ref : array_like, shape (B, T)
        Log-probabilities of the sampled tokens under the current and the reference policy;
        finite.
    advantages : array_like, shape (B,) or (B, T)
        The optimal advantage :math:`r - \hat V^*` per sequence (or per token: each token's loss
        then uses its own with the shared :math:`D_b`); finite.
    beta2 : float
        The scale ``> 0`` of the implicit reward (TRL: ``beta2``).
    mask : array_like, shape (B, T), optional
        0/1 padding mask; default all tokens valid.
    cotangent : array_like, shape (B, T), optional
        Weights ``c`` of the vector–Jacobian product; default the mask.

    Returns
    -------
    LossTerms
        ``loss`` (B, T) and ``grad = ∂(Σ_bt c_bt loss_bt)/∂logp``, both 0 at padding:
        ``grad_bt' = Σ_t c_bt · 2β₂(β₂D_b − A_bt)`` at each valid ``t'``.

    Raises
    ------
    ValueError
        Bad shapes or values, ``beta2 <= 0``, a non-0/1 mask, or a loss that overflows float64.

    Notes
    -----
    The gradient is the same at every valid token of a row (the sequence log-probability is a sum)
    and vanishes where :math:`\beta_2 D_b = A_b`; the minimiser over a policy class that contains
    it is :math:`\pi^*(y|x) \propto \pi_{\text{ref}}(y|x)\,e^{r(x,y)/\beta_2}` when
    :math:`\hat V^*` is exact and :math:`\beta_1 = \beta_2`. An all-padding row has
    :math:`D_b = 0` and contributes 0 here.

    References
    ----------
    Brantley et al. 2025, "Accelerating RL for LLM Reasoning with Optimal Advantage Regression",
    arXiv 2505.20686 (stage 2, the least-squares regression).

    Examples
    --------
    >>> import numpy as np
    >>> from refimpl.losses.optimal_advantage import optimal_advantage_regression_loss
    >>> terms = optimal_advantage_regression_loss(
    ...     [[-1.0, -1.0]], [[-1.5, -1.0]], [1.0], beta2=0.5, mask=[[1, 1]]
    ... )
    >>> terms.loss  # (0.5·0.5 − 1)² at each token
    array([[0.5625, 0.5625]])
    >>> terms.grad  # Σ_t c·2·0.5·(0.25 − 1) = −1.5 at each token
    array([[-1.5, -1.5]])
    """
    lp = token_array(logp, name="logp")
    shape = (lp.shape[0], lp.shape[1])
    ref = like_tokens(logp_ref, shape, name="logp_ref", like="logp")
    a = token_advantages(advantages, shape)
    m = token_mask(mask, shape)
    c = token_cotangent(cotangent, m)
    b = as_real(beta2, name="beta2", low=0.0, low_open=True, meaning="the implicit reward's scale")
    with np.errstate(over="ignore", invalid="ignore"):
        d = np.where(m > 0, lp - ref, 0.0).sum(axis=1, keepdims=True)
        error = b * d - a
        loss = masked(error * error, m)
        grad = masked(np.broadcast_to((2.0 * b * error * c).sum(axis=1, keepdims=True), m.shape), m)
    if not (np.all(np.isfinite(loss)) and np.all(np.isfinite(grad))):
        raise invalid(
            "logp",
            "keep (beta2·Σ(logp − logp_ref) − advantages)² finite in float64",
            lp,
            "Check the scale of logp, logp_ref, beta2 and advantages.",
        )
    return LossTerms(loss, grad)
