r"""CISPO and SAPO with GSPO's sequence ratio (the geometric mean of the token ratios).

TRL 1.16.0's ``GRPOTrainer._compute_loss`` with ``importance_sampling_level="sequence"`` replaces
each token's ratio by its sequence's
:math:`s_b = \exp(\frac{1}{L_b}\sum_t (\log\pi_{bt} - \log\pi^{\text{old}}_{bt}))` (shape
``(B, 1)``) before the loss type is applied, so ``loss_type="cispo"`` and ``"sapo"`` become:

- **CISPO, sequence level**: :math:`\ell_{bt} = -\mathrm{sg}[w_b]\,A_{bt}\log\pi_{bt}` with the
  weight :math:`w_b = \min(s_b, 1+\epsilon_{\text{high}})` (or clipped two-sided) *detached*: the
  gradient at a token is :math:`-c_{bt}w_bA_{bt}`, no coupling across tokens;
- **SAPO, sequence level**: :math:`\ell_{bt} = -A_{bt}\frac{4}{\tau}\sigma(\tau(s_b - 1))` with the
  gate differentiated through :math:`s_b`: every valid token of the sequence receives
  :math:`-\sum_t c_{bt}A_{bt}\,4\sigma(x_{bt})\sigma(-x_{bt})\,s_b/L_b`, :math:`x = \tau(s_b - 1)`.

Conventions as in :mod:`refimpl.losses.sequence`: the loss is minimised, padding has loss and
gradient 0, an all-padding row has ratio 1 (its loss is 0 because every token is padding).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import as_real, invalid
from refimpl.losses._common import LossTerms, masked
from refimpl.losses.sequence import _inputs, _mean_log_ratio

__all__ = ["cispo_sequence_loss", "sapo_sequence_loss"]

Array = NDArray[np.float64]


def _require_finite_product(loss: Array, grad: Array) -> None:
    """Refuse a weighted loss or gradient that overflows float64 (huge advantages or logp)."""
    if np.all(np.isfinite(loss)) and np.all(np.isfinite(grad)):
        return
    raise invalid(
        "advantages",
        "keep the weighted loss and gradient finite in float64",
        "a product of advantages, weights and log-probabilities beyond ~1.8e308",
        "Check the scale of advantages, logp and cotangent.",
    )


def cispo_sequence_loss(
    logp: ArrayLike,
    logp_old: ArrayLike,
    advantages: ArrayLike,
    *,
    eps_high: float,
    eps_low: float | None = None,
    mask: ArrayLike | None = None,
    cotangent: ArrayLike | None = None,
) -> LossTerms:
    r"""CISPO with the sequence ratio: a detached, clipped geometric-mean weight per sequence.

    .. math::

        s_b = \exp\Bigl(\frac{1}{L_b}\sum_{t\in b} d_{bt}\Bigr), \qquad
        w_b = \min(s_b, 1+\epsilon_{\text{high}}) \ \text{(eps_low=None)}, \qquad
        \ell_{bt} = -\mathrm{sg}[w_b]\,A_{bt}\log\pi_{bt},

    with :math:`w_b = \mathrm{clip}(s_b, 1-\epsilon_{\text{low}}, 1+\epsilon_{\text{high}})` when
    ``eps_low`` is given. The gradient is :math:`-c_{bt}\,w_b\,A_{bt}`: the weight carries none.

    Parameters
    ----------
    logp, logp_old : array_like, shape (B, T)
        Current and old log-probabilities; finite.
    advantages : array_like, shape (B,) or (B, T)
        Per-sequence or per-token advantages.
    eps_high : float
        ``>= 0``: the weight is capped at ``1 + eps_high``. TRL's ``epsilon_high`` for
        ``loss_type="cispo"`` is the cap itself: pass ``eps_high = epsilon_high − 1``.
    eps_low : float, optional
        ``0 <= eps_low < 1``: also clip the weight below at ``1 − eps_low``. Default: no lower
        bound (TRL).
    mask, cotangent : array_like, shape (B, T), optional
        Padding mask (default all valid) and VJP weights (default the mask).

    Returns
    -------
    LossTerms
        Per-token loss and ``grad``, both 0 at padding.

    Raises
    ------
    ValueError
        Invalid arrays; ``eps_high < 0``; ``eps_low`` outside ``[0, 1)``.

    Notes
    -----
    The weight is bounded above, so nothing overflows: a sequence whose mean log-ratio is huge
    gets the cap, one whose mean log-ratio is very negative the weight 0 (``exp`` underflows).
    With one valid token per sequence this is :func:`refimpl.losses.clipped.cispo_loss`. Claim
    SS1 (gradient).

    References
    ----------
    MiniMax 2025, "MiniMax-M1", arXiv 2506.13585 (CISPO); Zheng et al. 2025, "Group Sequence
    Policy Optimization", arXiv 2507.18071 (the sequence ratio).

    Examples
    --------
    >>> import numpy as np
    >>> from refimpl.losses.sequence_soft import cispo_sequence_loss
    >>> lp = np.log([[0.5, 0.5], [0.5, 0.5]])
    >>> old = np.log([[0.125, 0.5], [0.5, 0.5]])  # row 0: s = sqrt(4) = 2, capped at 1.5
    >>> cispo_sequence_loss(lp, old, [1.0, -1.0], eps_high=0.5).grad
    array([[-1.5, -1.5],
           [ 1. ,  1. ]])
    """
    d, a, m, c, lengths = _inputs(logp, logp_old, advantages, mask, cotangent)
    high = as_real(
        eps_high, name="eps_high", low=0.0, meaning="the weight is capped at 1 + eps_high"
    )
    low = 0.0
    if eps_low is not None:
        low = 1.0 - as_real(
            eps_low, name="eps_low", low=0.0, high=1.0, high_open=True,
            meaning="the weight is clipped below at 1 - eps_low",
        )  # fmt: skip
    with np.errstate(over="ignore"):
        s = np.exp(_mean_log_ratio(d, lengths))
    w = np.broadcast_to(np.clip(s, low, 1.0 + high)[:, None], d.shape)
    lp = masked(np.asarray(logp, dtype=np.float64), m)
    with np.errstate(over="ignore", invalid="ignore"):
        loss, grad = np.where(m > 0, -w * a * lp, 0.0), np.where(m > 0, -c * w * a, 0.0)
    _require_finite_product(loss, grad)
    return LossTerms(loss, grad)


def sapo_sequence_loss(
    logp: ArrayLike,
    logp_old: ArrayLike,
    advantages: ArrayLike,
    *,
    tau_pos: float,
    tau_neg: float,
    mask: ArrayLike | None = None,
    cotangent: ArrayLike | None = None,
) -> LossTerms:
    r"""SAPO with the sequence ratio: a sigmoid gate on the geometric mean of the token ratios.

    .. math::

        s_b = \exp\Bigl(\frac{1}{L_b}\sum_{t\in b} d_{bt}\Bigr), \qquad
        \ell_{bt} = -A_{bt}\,\frac{4}{\tau_{bt}}\,\sigma\bigl(\tau_{bt}(s_b - 1)\bigr),

    with :math:`\tau_{bt} = \tau_{\text{pos}}` if :math:`A_{bt} > 0` else :math:`\tau_{\text{neg}}`.
    The gate is differentiated through :math:`s_b`:
    :math:`\partial\ell_{bt}/\partial\log\pi_{bt'} = -4A_{bt}\,\sigma(x_{bt})\sigma(-x_{bt})\,s_b/L_b`
    at every valid :math:`t'`, :math:`x_{bt} = \tau_{bt}(s_b - 1)`.

    Parameters
    ----------
    logp, logp_old : array_like, shape (B, T)
        Current and old log-probabilities; finite.
    advantages : array_like, shape (B,) or (B, T)
        Per-sequence or per-token advantages.
    tau_pos, tau_neg : float
        Gate temperatures ``> 0`` (TRL's ``sapo_temperature_pos``/``_neg``, 1.0 and 1.05).
    mask, cotangent : array_like, shape (B, T), optional
        Padding mask (default all valid) and VJP weights (default the mask).

    Returns
    -------
    LossTerms
        Per-token loss and ``grad = ∂(Σ_bt c_bt loss_bt)/∂logp``, both 0 at padding.

    Raises
    ------
    ValueError
        Invalid arrays; ``tau_pos <= 0`` or ``tau_neg <= 0``; a temperature so small that
        ``4/τ`` overflows the loss.

    Notes
    -----
    The gate and its slope are evaluated in log space, so a huge mean log-ratio gives the finite
    loss ``−4A/τ`` (or 0) and a gradient that underflows to 0, never NaN. At ``s_b = 1`` every
    valid token's gradient is :math:`-\sum_t c_{bt}A_{bt}/L_b`. Claim SS2 (gradient).

    References
    ----------
    Gao et al. 2025, "Soft Adaptive Policy Optimization", arXiv 2511.20347 (SAPO); Zheng et al.
    2025, "Group Sequence Policy Optimization", arXiv 2507.18071 (the sequence ratio).

    Examples
    --------
    >>> import numpy as np
    >>> from refimpl.losses.sequence_soft import sapo_sequence_loss
    >>> lp = np.zeros((1, 2))
    >>> terms = sapo_sequence_loss(lp, lp, [[2.0, -1.0]], tau_pos=1.0, tau_neg=1.05)
    >>> terms.grad  # on-policy: −Σ_t c A / L = −(2 − 1)/2 at each token
    array([[-0.5, -0.5]])
    """
    d, a, m, c, lengths = _inputs(logp, logp_old, advantages, mask, cotangent)
    t_pos = as_real(tau_pos, name="tau_pos", low=0.0, low_open=True, meaning="gate temperature")
    t_neg = as_real(tau_neg, name="tau_neg", low=0.0, low_open=True, meaning="gate temperature")
    tau = np.where(a > 0, t_pos, t_neg)
    mean = _mean_log_ratio(d, lengths)[:, None]
    with np.errstate(over="ignore", invalid="ignore"):
        s = np.exp(mean)
        x = tau * (s - 1.0)
        log_sig = -np.logaddexp(0.0, -x)
        gate = (4.0 / tau) * np.exp(log_sig)
        slope = 4.0 * np.exp(log_sig - np.logaddexp(0.0, x) + mean)  # 4σ(x)σ(−x)·s
        loss = np.where((a != 0.0) & (m > 0), -a * gate, 0.0)
    if not np.all(np.isfinite(loss)):
        name = "tau_pos" if np.any(~np.isfinite(loss) & (a > 0)) else "tau_neg"
        value = t_pos if name == "tau_pos" else t_neg
        raise invalid(
            name,
            "give a finite gated loss (4/τ·σ(τ(s − 1)) overflows float64)",
            value,
            f"Pass a {name} of a usual scale (TRL's defaults: 1.0 and 1.05), or smaller "
            "advantages.",
        )
    with np.errstate(over="ignore", invalid="ignore"):
        per_token = np.where((a != 0.0) & (c != 0.0), -a * c * slope, 0.0)
        row = per_token.sum(axis=1) / np.maximum(lengths, 1.0)
    grad = np.where(m > 0, np.broadcast_to(row[:, None], d.shape), 0.0)
    _require_finite_product(loss, grad)
    return LossTerms(loss, grad)
