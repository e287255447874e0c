r"""The band-masked importance-weighted policy gradient: a detached ratio kept only inside a band.

A token's importance ratio :math:`\rho = \pi_\theta/\pi_{\text{old}}` (``logp_old`` is whatever
the ratio is taken against: SkyRL takes the rollout engine's log-probabilities) weighs its
REINFORCE term, detached, while :math:`1-\varepsilon_{\text{low}} < \rho < 1+\varepsilon_{\text{high}}`;
outside that open band the weight is 0, so the token contributes neither loss nor gradient. It is
CISPO's estimator with the clip replaced by a mask: CISPO keeps an out-of-band token at the bound's
weight, this loss drops it, as PPO's clip drops the gradient of a token moving the wrong way.

Each function returns :class:`~refimpl.losses.LossTerms` (the per-token loss, minimised, and its
gradient with respect to ``logp`` as a vector–Jacobian product with ``cotangent``).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import as_real
from refimpl.losses._common import LossTerms, masked
from refimpl.losses.policy_gradient import _ratio_inputs, _require_finite, _times, _vjp

__all__ = ["band_masked_pg_loss"]

Array = NDArray[np.float64]


def band_masked_pg_loss(
    logp: ArrayLike,
    logp_old: ArrayLike,
    advantages: ArrayLike,
    *,
    eps_low: float,
    eps_high: float,
    log_ratio_clamp: float | None = None,
    mask: ArrayLike | None = None,
    cotangent: ArrayLike | None = None,
) -> LossTerms:
    r"""The policy gradient weighted by a detached ratio that is zeroed outside an open band.

    .. math::

        \ell_t = -\operatorname{sg}[w_t]\,A_t \log\pi_\theta(y_t), \qquad
        \frac{\partial\ell_t}{\partial\log\pi_\theta(y_t)} = -w_t A_t,

        w_t = \rho_t\,\mathbb{1}\bigl[1-\varepsilon_{\text{low}} < \rho_t
        < 1+\varepsilon_{\text{high}}\bigr], \qquad
        \rho_t = \exp(\log\pi_\theta(y_t) - \log\pi_{\text{old}}(y_t)).

    Both ends of the band are open: a ratio exactly at :math:`1\pm\varepsilon` is dropped.

    Parameters
    ----------
    logp : array_like, shape (B, T)
        Current log-probabilities; the gradient is with respect to them.
    logp_old : array_like, shape (B, T)
        Log-probabilities the ratio is taken against (SkyRL: the rollout engine's); no gradient.
    advantages : array_like, shape (B,) or (B, T)
        Per-sequence or per-token advantages.
    eps_low : float
        ``0 <= eps_low <= 1``: the band's lower end ``1 - eps_low`` (1: no lower end).
    eps_high : float
        ``eps_high >= 0``: the band's upper end ``1 + eps_high``.
    log_ratio_clamp : float, optional
        ``c > 0``: clip the log-ratio to ``[-c, c]`` before ``exp`` (SkyRL's ``safe_exp_delta``:
        20). It changes only the weight, which carries no gradient. Default: exact.
    mask, cotangent : array_like, shape (B, T), optional
        Padding mask and VJP weights (default: the mask).

    Returns
    -------
    LossTerms
        Per-token loss and ``grad``, both 0 at padding and at every out-of-band token.

    Raises
    ------
    ValueError
        Invalid arrays (non-finite, shape, mask); ``eps_low`` outside ``[0, 1]``; ``eps_high < 0``;
        ``log_ratio_clamp <= 0``.

    Notes
    -----
    SkyRL 0.3.0 ``rollout_is_policy_loss`` (``policy_loss_type="rollout_is"``) computes this loss
    with ``logp_old`` its rollout log-probabilities, ``eps_clip_low``/``eps_clip_high`` (default
    0.2 each) as the band, and the clamp 20. Its docstring calls it CISPO with the rollout policy
    as the anchor and "hard zero instead of clamping": the CISPO paper (MiniMax-M1,
    arXiv:2506.13585) clips the weight, so the two agree inside the band only. The weight is at
    most :math:`1+\varepsilon_{\text{high}}`, so nothing overflows.

    At ratio 1 (inside the band whenever both widths are positive) the gradient is the policy
    gradient :math:`-A`; out of the band it is exactly 0 (derivation: ``proofs/band_masked_pg.py``).

    Examples
    --------
    >>> import numpy as np
    >>> import refimpl.losses.band_masked as bm
    >>> lp, lq = np.log([[0.3, 0.1, 0.25]]), np.log([[0.25, 0.2, 0.25]])   # ratios 1.2, 0.5, 1
    >>> bm.band_masked_pg_loss(lp, lq, [1.0], eps_low=0.2, eps_high=0.28).grad
    array([[-1.2,  0. , -1. ]])
    >>> bm.band_masked_pg_loss(lp, lq, [1.0], eps_low=0.2, eps_high=0.1).grad  # 1.2 is past 1.1
    array([[ 0.,  0., -1.]])
    """
    r = _ratio_inputs(logp, logp_old, advantages, mask, cotangent, log_ratio_clamp)
    low = as_real(
        eps_low,
        name="eps_low",
        low=0.0,
        high=1.0,
        meaning="the band's lower end 1 - eps_low is a ratio in [0, 1]",
    )
    high = as_real(eps_high, name="eps_high", low=0.0, meaning="the band's upper end 1 + eps_high")
    inside = (r.rho > 1.0 - low) & (r.rho < 1.0 + high)
    local = np.where(inside, _times(-r.a, r.rho), 0.0)  # +0.0 out of the band, never -0.0
    loss = _times(local, r.lp)
    _require_finite(loss, r.m, r.lr, what="the loss -w*A*logp", fix="Check the inputs' scale.")
    return LossTerms(masked(loss, r.m), _vjp(r.c, local, r.m))
