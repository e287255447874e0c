r"""The collision probability :math:`\sum_v \pi_v^2` of each next-token distribution, and its gradient.

For :math:`\pi = \mathrm{softmax}(z/T)` over the vocabulary, :math:`S = \sum_v \pi_v^2` is the
probability that two independent draws from :math:`\pi` coincide (:math:`e^{-H_2}`, the Rényi
entropy of order 2). It enters the variance of the score function: with the sampled token
:math:`x`, :math:`\lVert\nabla_z \log\pi_x\rVert^2 = 1 - 2\pi_x + S` (at :math:`T = 1`), the
per-token weight of verl 0.9.1's optimal token baseline
(:func:`refimpl.losses.optimal_token_baseline_advantages`, whose ``sum_pi_squared`` is this
quantity) and of its W-score metric.

Computed from the log-softmax: :math:`S = \sum_v \exp(2\log\pi_v)` with
:math:`\log\pi_v = y_v - \max_j y_j - \log\sum_j e^{y_j - \max y}`, finite for any finite logits
(no :math:`e^{z}` of a large logit is ever formed).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import invalid
from refimpl.losses._common import token_cotangent, token_mask
from refimpl.losses.logprobs import _as_logits, _as_temperature, _scaled

__all__ = ["token_sum_pi_squared", "token_sum_pi_squared_grad"]

Array = NDArray[np.float64]


def _log_softmax(
    logits: ArrayLike, temperature: float, mask: ArrayLike | None
) -> tuple[Array, Array, float]:
    """``(log π, mask, T)`` of the tempered logits, after validation (0 rows at padding)."""
    z = _as_logits(logits)
    m = token_mask(mask, (z.shape[0], z.shape[1]), like="logits[..., 0]")
    t = _as_temperature(temperature)
    y = _scaled(z, t, m)
    shift = y - np.max(y, axis=-1, keepdims=True)
    log_pi = shift - np.log(np.sum(np.exp(shift), axis=-1, keepdims=True))
    return np.asarray(log_pi, dtype=np.float64), m, t


def token_sum_pi_squared(
    logits: ArrayLike, *, temperature: float = 1.0, mask: ArrayLike | None = None
) -> Array:
    r"""Collision probability :math:`\sum_v \pi_v^2` of :math:`\pi = \mathrm{softmax}(z/T)` per token.

    .. math::

        S_{bt} = \sum_{v} \pi_{bt,v}^2 = \sum_v \exp\bigl(2\log\pi_{bt,v}\bigr)
              = \exp\bigl(\operatorname{lse}(2y_{bt}) - 2\operatorname{lse}(y_{bt})\bigr),
        \qquad y = z/T.

    verl 0.9.1 ``calculate_sum_pi_squared_from_logits`` (``verl/utils/torch_functional.py``)
    computes the last form on logits its FSDP engine has already divided by the temperature
    (``_scale_logits_by_temperature``); it takes no temperature itself. Forgetting that division
    (``S`` of ``softmax(z)``) is a different number whenever :math:`T \ne 1`.

    Parameters
    ----------
    logits : array_like, shape (B, T, V)
        Finite logits ``z``.
    temperature : float
        ``T > 0``; the logits are divided by it.
    mask : array_like, shape (B, T), optional
        0/1 padding mask; the result is 0 at padding (whatever its logits hold).

    Returns
    -------
    ndarray of float64, shape (B, T)
        ``S`` in ``[1/V, 1]`` at real positions (``1/V`` for equal logits, 1 for a point mass);
        0 at padding.

    Raises
    ------
    TypeError, ValueError
        If ``logits`` is not a finite (B, T, V) array with B, T, V >= 1, ``mask`` is not a 0/1
        (B, T) array, ``temperature`` is not a real number > 0, or ``logits/temperature``
        overflows float64 at a real position.

    Notes
    -----
    Claim CO1 shows the three forms above equal and derives the gradient
    of :func:`token_sum_pi_squared_grad`. Accuracy: each :math:`\log\pi_v` is accurate to about
    :math:`u(|y_v - \max y| + \log V + 3)`, so :math:`S` to a relative
    :math:`2u\max_v(|y_v - \max y| + \log V + 3)` over the tokens that carry its mass, plus the sum.

    References
    ----------
    Rényi 1961, "On measures of entropy and information" (the order-2 entropy
    :math:`-\log\sum_v\pi_v^2`).

    Examples
    --------
    >>> import numpy as np
    >>> from refimpl.losses.collision import token_sum_pi_squared
    >>> token_sum_pi_squared(np.log([[[2.0, 1.0, 1.0]]]))   # (1/2)² + 2·(1/4)²
    array([[0.375]])
    >>> token_sum_pi_squared(np.zeros((1, 1, 4)), temperature=0.5)   # equal logits: 1/V
    array([[0.25]])
    >>> token_sum_pi_squared([[[1e4, 0.0]]])   # no overflow: a point mass
    array([[1.]])
    """
    log_pi, m, _ = _log_softmax(logits, temperature, mask)
    s = np.sum(np.exp(2.0 * log_pi), axis=-1)
    return np.asarray(np.where(m > 0, np.minimum(s, 1.0), 0.0), dtype=np.float64)


def token_sum_pi_squared_grad(
    logits: ArrayLike,
    *,
    temperature: float = 1.0,
    cotangent: ArrayLike | None = None,
    mask: ArrayLike | None = None,
) -> Array:
    r"""Gradient of :math:`\sum_{bt} c_{bt} S_{bt}` with respect to the logits (a VJP).

    .. math::

        \frac{\partial}{\partial z_{bt,j}} \sum_{b't'} c_{b't'} S_{b't'}
        = \frac{2c_{bt}}{T}\,\pi_{bt,j}\bigl(\pi_{bt,j} - S_{bt}\bigr),
        \qquad S = \sum_v \pi_v^2,

    (claim CO1). Each row sums to 0 (adding a constant to the logits changes nothing); the
    gradient raises the logits of tokens more probable than the :math:`\pi`-average
    :math:`\sum_v \pi_v\cdot\pi_v = S`, which sharpens the distribution.

    Parameters
    ----------
    logits : array_like, shape (B, T, V)
        Finite logits ``z``.
    temperature : float
        ``T > 0``; the logits are divided by it.
    cotangent : array_like, shape (B, T), optional
        The weight ``c`` of each token's ``S``; default the padding mask.
    mask : array_like, shape (B, T), optional
        0/1 padding mask; the gradient is 0 at padding.

    Returns
    -------
    ndarray of float64, shape (B, T, V)
        The gradient; 0 at padding.

    Raises
    ------
    TypeError, ValueError
        As :func:`token_sum_pi_squared`, and if ``cotangent`` is not a finite (B, T) array or
        ``cotangent/temperature`` leaves float64.

    Notes
    -----
    Accuracy: each entry is :math:`2c/T` times a product of numbers in :math:`[0, 1]` and a
    difference of two of them, accurate to a few ulp of :math:`|c|\pi_j(\pi_j + S)/T`.

    Examples
    --------
    >>> import numpy as np
    >>> from refimpl.losses.collision import token_sum_pi_squared_grad
    >>> token_sum_pi_squared_grad(np.log([[[2.0, 1.0, 1.0]]]))   # S = 3/8
    array([[[ 0.125 , -0.0625, -0.0625]]])
    >>> token_sum_pi_squared_grad(np.zeros((1, 1, 4)))   # equal logits: a stationary point
    array([[[0., 0., 0., 0.]]])
    """
    log_pi, m, t = _log_softmax(logits, temperature, mask)
    c = token_cotangent(cotangent, m)
    with np.errstate(over="ignore"):
        scale = 2.0 * c / t
    if not np.all(np.isfinite(scale)):
        raise invalid(
            "temperature",
            "be large enough that the gradient 2·cotangent/temperature stays finite in float64",
            temperature,
            "Pass a larger temperature (or a smaller cotangent).",
        )
    pi = np.exp(log_pi)
    s = np.sum(pi * pi, axis=-1, keepdims=True)
    return np.asarray(scale[..., None] * pi * (pi - s), dtype=np.float64)
