r"""The high-entropy token mask: train only on the tokens whose entropy is in the top fraction.

Wang et al. 2025 ("Beyond the 80/20 Rule") find that the policy gradient of a small fraction of
high-entropy "forking" tokens carries most of RLVR's improvement, and train on the top 20% of the
tokens by entropy. TRL 1.16.0 implements it as ``top_entropy_quantile`` (``GRPOTrainer
.get_high_entropy_mask``): the threshold is the :math:`(1-\rho)`-quantile of the entropies of
every valid token of the batch (over all ranks), with linear interpolation (``torch.quantile``),
and a valid token is kept when its entropy is at least the threshold.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import as_real
from refimpl.losses._common import token_array, token_mask

__all__ = ["high_entropy_mask"]

Array = NDArray[np.float64]


def high_entropy_mask(
    entropies: ArrayLike, *, top_fraction: float, mask: ArrayLike | None = None
) -> Array:
    r"""1 at the valid tokens whose entropy is at least the :math:`(1-\rho)`-quantile, else 0.

    .. math::

        \theta = Q_{1-\rho}\bigl(\{H_{bt} : m_{bt} = 1\}\bigr), \qquad
        k_{bt} = m_{bt}\,\mathbb{1}[H_{bt} \ge \theta],

    with :math:`Q_q` the quantile with linear interpolation between order statistics (position
    :math:`q(n-1)` among the :math:`n` sorted valid entropies), as ``numpy.quantile`` and
    ``torch.quantile`` compute it by default.

    Parameters
    ----------
    entropies : array_like, shape (B, T)
        Per-token entropies; finite (an entropy is >= 0, but any finite value is accepted).
    top_fraction : float
        :math:`\rho \in [0, 1]`, the fraction of the valid tokens to keep (TRL's
        ``top_entropy_quantile``; the paper uses 0.2). ``1`` keeps every valid token.
    mask : array_like, shape (B, T), optional
        0/1 padding mask; default all valid.

    Returns
    -------
    ndarray of float64, shape (B, T)
        1 where a token is kept, 0 elsewhere (padding is never kept; a batch without a valid
        token keeps nothing).

    Raises
    ------
    ValueError
        Bad shapes or values, ``top_fraction`` outside ``[0, 1]``, a non-0/1 mask.

    Notes
    -----
    Ties at the threshold are all kept, so more than :math:`\rho n` tokens may be kept; at least
    :math:`n - \lceil (1-\rho)(n-1)\rceil` are (claim HE1). TRL computes the quantile in float32
    (``.float()``) and compares the float-typed entropies with it: a token within float32
    rounding of the threshold may go either way.

    References
    ----------
    Wang et al. 2025, "Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective
    Reinforcement Learning for LLM Reasoning", arXiv 2506.01939.

    Examples
    --------
    >>> from refimpl.losses.entropy_mask import high_entropy_mask
    >>> high_entropy_mask([[0.1, 2.0, 0.5], [1.0, 3.0, 9.0]], top_fraction=0.5,
    ...                   mask=[[1, 1, 1], [1, 1, 0]])
    array([[0., 1., 0.],
           [1., 1., 0.]])
    """
    h = token_array(entropies, name="entropies")
    m = token_mask(mask, h.shape, like="entropies")
    rho = as_real(top_fraction, name="top_fraction", low=0.0, high=1.0,
                  meaning="the fraction of valid tokens kept")  # fmt: skip
    valid = h[m > 0]
    if valid.size == 0:
        return np.zeros(h.shape, dtype=np.float64)
    threshold = float(np.quantile(valid, 1.0 - rho))
    return np.asarray((h >= threshold) & (m > 0), dtype=np.float64)
