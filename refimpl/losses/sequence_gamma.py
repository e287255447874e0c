r"""VESPO: the policy gradient weighted by a gamma kernel of the sequence's importance weight.

VESPO (Shen et al. 2026) reshapes the sequence-level importance weight
:math:`w_b = \exp(\sum_t (\log\pi_{bt} - \log\pi^{\text{old}}_{bt}))` (the product of the token
ratios, no length normalisation) by the kernel

.. math::

    \phi(w) = e^{\lambda}\,w^{k}\,e^{-\lambda w} = \exp(\lambda + k\log w - \lambda w),

normalised so that :math:`\phi(1) = 1`, with :math:`(k, \lambda)` chosen by the sign of the
advantage, and uses it as a detached weight of the policy gradient:
:math:`\ell_{bt} = -\mathrm{sg}[\phi(w_b)]\,A_{bt}\log\pi_{bt}`. The kernel rises like
:math:`w^k` and decays like :math:`e^{-\lambda w}`: its peak is at :math:`w = k/\lambda`.
TRL 1.16.0 implements it as ``loss_type="vespo"`` (``GRPOTrainer.get_gamma_weights``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import as_real, invalid
from refimpl.losses._common import LossTerms, masked
from refimpl.losses.sequence import _inputs

__all__ = ["vespo_loss"]

Array = NDArray[np.float64]


def _range(log_weight_range: Any) -> tuple[float, float]:
    if log_weight_range is None:
        return -np.inf, np.inf
    try:
        low, high = (float(v) for v in log_weight_range)
    except (TypeError, ValueError):
        raise invalid(
            "log_weight_range",
            "be a pair (low, high) of floats",
            log_weight_range,
            "Pass e.g. (math.log(1e-8), 20.0) as TRL 1.16.0 does, or None.",
        ) from None
    if not low < high:
        raise invalid(
            "log_weight_range",
            "have low < high",
            log_weight_range,
            "Pass the bounds of the sequence's log-weight in increasing order.",
        )
    return low, high


def vespo_loss(
    logp: ArrayLike,
    logp_old: ArrayLike,
    advantages: ArrayLike,
    *,
    k_pos: float = 2.0,
    lambda_pos: float = 3.0,
    k_neg: float = 3.0,
    lambda_neg: float = 2.0,
    log_ratio_clamp: float | None = None,
    log_weight_range: tuple[float, float] | None = None,
    mask: ArrayLike | None = None,
    cotangent: ArrayLike | None = None,
) -> LossTerms:
    r"""VESPO's loss: the policy gradient with the detached gamma weight of the sequence ratio.

    .. math::

        \log w_b = \sum_{t\in b} d_{bt}, \qquad
        \phi_{bt} = \exp\bigl(\lambda_{bt} + k_{bt}\log w_b - \lambda_{bt}\,w_b\bigr), \qquad
        \ell_{bt} = -\mathrm{sg}[\phi_{bt}]\,A_{bt}\log\pi_{bt},

    with :math:`(k, \lambda) = (k_{\text{pos}}, \lambda_{\text{pos}})` where :math:`A_{bt} \ge 0`
    and :math:`(k_{\text{neg}}, \lambda_{\text{neg}})` otherwise. The gradient is
    :math:`-c_{bt}\,\phi_{bt}A_{bt}`: the weight carries none.

    Parameters
    ----------
    logp, logp_old : array_like, shape (B, T)
        Current and old log-probabilities; finite.
    advantages : array_like, shape (B,) or (B, T)
        Per-sequence or per-token advantages.
    k_pos, lambda_pos, k_neg, lambda_neg : float
        The kernel's power ``k >= 0`` and decay ``lambda > 0`` for non-negative and for negative
        advantages (TRL's ``vespo_k_pos``, ... with the same defaults).
    log_ratio_clamp : float, optional
        ``c > 0``: clip each token's log-ratio to ``[-c, c]`` before the sum (TRL: 20).
    log_weight_range : (float, float), optional
        Clip the sequence's log-weight to ``[low, high]`` (TRL: ``(log 1e-8, 20)``).
    mask, cotangent : array_like, shape (B, T), optional
        Padding mask (default all valid) and VJP weights (default the mask).

    Returns
    -------
    LossTerms
        Per-token loss and ``grad``, both 0 at padding.

    Raises
    ------
    ValueError
        Invalid arrays; a negative ``k``, a ``lambda <= 0``, a ``log_ratio_clamp <= 0``, a
        ``log_weight_range`` that is not an increasing pair, or a kernel that overflows float64.

    Notes
    -----
    The kernel is evaluated in log space: a huge weight gives :math:`\phi = 0`
    (:math:`-\lambda w` wins), a tiny one :math:`\phi \to 0` for ``k > 0``; nothing overflows.
    At ``logp == logp_old``, :math:`\phi = 1` and the gradient is the policy gradient
    :math:`-cA`. TRL also raises :math:`\lambda` to at least ``1e-4``. Claim VS1.

    References
    ----------
    Shen et al. 2026, "VESPO: Variational Sequence-level Soft Policy Optimization for Off-Policy
    LLM Training", arXiv 2602.10693.

    Examples
    --------
    >>> import numpy as np
    >>> from refimpl.losses.sequence_gamma import vespo_loss
    >>> lp = np.log([[0.5, 0.5]])
    >>> vespo_loss(lp, lp, [1.0]).grad  # w = 1: φ = 1, the policy gradient
    array([[-1., -1.]])
    >>> w2 = vespo_loss(lp, lp - np.log([[2.0, 1.0]]), [1.0]).grad  # w = 2: φ = e^{3}·4·e^{-6}
    >>> bool(np.allclose(w2, -4 * np.exp(-3.0)))
    True
    """
    d, a, m, c, _ = _inputs(logp, logp_old, advantages, mask, cotangent)
    kp = as_real(k_pos, name="k_pos", low=0.0, meaning="the kernel's power")
    kn = as_real(k_neg, name="k_neg", low=0.0, meaning="the kernel's power")
    lam_p = as_real(lambda_pos, name="lambda_pos", low=0.0, low_open=True, meaning="decay")
    lam_n = as_real(lambda_neg, name="lambda_neg", low=0.0, low_open=True, meaning="decay")
    if log_ratio_clamp is not None:
        clamp = as_real(log_ratio_clamp, name="log_ratio_clamp", low=0.0, low_open=True,
                        meaning="token log-ratio clip")  # fmt: skip
        d = masked(np.clip(d, -clamp, clamp), m)
    low, high = _range(log_weight_range)
    log_w = np.clip(d.sum(axis=1, keepdims=True), low, high)
    k = np.where(a >= 0.0, kp, kn)
    lam = np.where(a >= 0.0, lam_p, lam_n)
    with np.errstate(over="ignore", invalid="ignore"):
        log_phi = lam + np.where(k != 0.0, k * log_w, 0.0) - lam * np.exp(log_w)
        phi = np.where(m > 0, np.exp(log_phi), 0.0)
    if not np.all(np.isfinite(phi)):
        row = int(np.flatnonzero(~np.all(np.isfinite(phi), axis=1))[0])
        positive = bool(np.any(~np.isfinite(phi[row]) & (a[row] >= 0)))
        raise invalid(
            "k_pos" if positive else "k_neg",
            "keep the kernel e^(λ + k log w − λw) finite in float64",
            kp if positive else kn,
            f"Sequence {row} has log-weight {float(log_w[row, 0])!r} and the kernel overflows; "
            "pass a smaller k, or log_weight_range= to bound the log-weight (TRL: (log 1e-8, 20)).",
        )
    lp = masked(np.asarray(logp, dtype=np.float64), m)
    with np.errstate(over="ignore", invalid="ignore"):
        loss, grad = np.where(m > 0, -phi * a * lp, 0.0), np.where(m > 0, -c * phi * a, 0.0)
    if not (np.all(np.isfinite(loss)) and np.all(np.isfinite(grad))):
        raise invalid(
            "advantages",
            "keep the weighted loss and gradient finite in float64",
            "a product of advantages, weights and log-probabilities beyond ~1.8e308",
            "Check the scale of advantages, logp and cotangent.",
        )
    return LossTerms(loss, grad)
