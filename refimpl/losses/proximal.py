r"""The proximal policy's log-probabilities approximated from the behaviour and current policies.

Decoupled PPO (:mod:`refimpl.losses.decoupled`) takes the proximal log-probabilities
:math:`\log\pi_{\text{prox}}` as an input: the weights before this update, which cost a forward
pass to recompute. A-3PO (Li, Wu and Shen 2025, "A-3PO: Accelerating Asynchronous LLM Training
with Staleness-aware Proximal Policy Approximation", arXiv:2512.06547; AReaL's
``prox_logp_method="loglinear"``) skips that pass: each token's proximal log-probability is
interpolated between the behaviour policy that sampled it (version :math:`v_b`) and the current
policy (version :math:`v_\theta`), at the proximal version :math:`v_p`'s place between them,

.. math::

    \alpha = \frac{v_p - v_b}{v_\theta - v_b}, \qquad
    \log\pi_{\text{prox}} \approx \log\mu + \alpha\,(\log\pi_\theta - \log\mu).

With :math:`v_p = v_\theta - 1` a token of staleness :math:`s = v_\theta - v_b` gets
:math:`\alpha = 1 - 1/s`: the behaviour log-probability for a token one version old, half-way for
two. Interpolating the probabilities instead (``"linear"``) and the behaviour policy itself
(``"rollout"``) are the two comparisons AReaL logs next to it.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import (
    as_int,
    as_int_array,
    as_real,
    invalid,
    require_in_range,
)
from refimpl.losses._common import as_choice, like_tokens, token_array

__all__ = [
    "PROXIMAL_METHODS",
    "ProximalLogprobs",
    "proximal_interpolation_weight",
    "proximal_logprobs",
]

Array = NDArray[np.float64]

#: The approximations: interpolate the log-probabilities, the probabilities, or none (behaviour).
PROXIMAL_METHODS: tuple[str, ...] = ("loglinear", "linear", "rollout")


class ProximalLogprobs(NamedTuple):
    """Approximate proximal log-probabilities and their derivative in the current ones.

    Attributes
    ----------
    logp_prox : ndarray of float64, shape (B, T)
        The approximation of :math:`\\log\\pi_{\\text{prox}}` at every token.
    grad : ndarray of float64, shape (B, T)
        :math:`\\partial \\log\\pi_{\\text{prox},bt} / \\partial \\log\\pi_{\\theta,bt}` (each
        token depends on its own current log-probability only).
    """

    logp_prox: Array
    grad: Array


def proximal_interpolation_weight(
    versions: ArrayLike, *, current_version: int, proximal_version: int | None = None
) -> Array:
    r"""Each token's interpolation weight :math:`\alpha` from its behaviour policy's version.

    .. math::

        \alpha_{bt} = \begin{cases}
            \operatorname{clip}\!\left(\dfrac{v_p - v_{bt}}{v_\theta - v_{bt}}, 0, 1\right)
                & 0 \le v_{bt} < v_\theta, \\
            0 & \text{otherwise}.
        \end{cases}

    Parameters
    ----------
    versions : array_like of int, shape (B, T)
        The policy version that generated each token; a negative version marks a token that no
        policy generated (the prompt, padding), whose weight is 0.
    current_version : int
        :math:`v_\theta`, the version being trained; no token is newer.
    proximal_version : int, optional
        :math:`v_p`, at most ``current_version``. Default ``current_version - 1`` (AReaL's
        assumption: the proximal policy is one update behind the current one).

    Returns
    -------
    ndarray of float64, shape (B, T)
        The weights, in :math:`[0, 1)` for the default proximal version.

    Raises
    ------
    ValueError
        A version above ``current_version``, or ``proximal_version > current_version``.
    TypeError
        Versions that are not integers.

    Notes
    -----
    A token sampled by the current version itself (:math:`v_{bt} = v_\theta`) has the 0/0 form;
    its weight is 0, the behaviour log-probability, as in AReaL 1.0.4. A token sampled after
    the proximal version (:math:`v_p < v_{bt}`) would have a negative weight, clipped to 0.

    Examples
    --------
    >>> from refimpl.losses import proximal_interpolation_weight
    >>> proximal_interpolation_weight([[-1, 4, 3, 2, 0]], current_version=4)
    array([[0.  , 0.  , 0.  , 0.5 , 0.75]])
    """
    v, theta, prox = _versions(versions, current_version, proximal_version)
    return _weight(v, theta, prox)


def proximal_logprobs(
    logp: ArrayLike,
    logp_behavior: ArrayLike,
    versions: ArrayLike,
    *,
    current_version: int,
    method: Literal["loglinear", "linear", "rollout"] = "loglinear",
    proximal_version: int | None = None,
    floor: float = 0.0,
) -> ProximalLogprobs:
    r"""The proximal log-probabilities interpolated between behaviour and current policy.

    With :math:`\alpha` of :func:`proximal_interpolation_weight`, :math:`\ell = \log\pi_\theta`
    and :math:`b = \log\mu`:

    .. math::

        \text{loglinear:}\quad & b + \alpha\,(\ell - b), \\
        \text{linear:}\quad & \log\!\big((1 - \alpha)\,e^{b} + \alpha\,e^{\ell} + f\big), \\
        \text{rollout:}\quad & b,

    with :math:`f` the ``floor`` (0 by default), and the derivatives in :math:`\ell`
    :math:`\alpha`, :math:`\alpha e^{\ell} / ((1 - \alpha) e^{b} + \alpha e^{\ell} + f)` and 0.

    Parameters
    ----------
    logp : array_like, shape (B, T)
        :math:`\log\pi_\theta`, the current policy's log-probabilities; finite.
    logp_behavior : array_like, shape (B, T)
        :math:`\log\mu`, the behaviour policy's (the inference engine's); finite.
    versions : array_like of int, shape (B, T)
        The version that generated each token (negative: none, the prompt or padding).
    current_version : int
        :math:`v_\theta`; every version is at most this.
    method : {"loglinear", "linear", "rollout"}
        The approximation (AReaL's ``PROX_APPROX_METHOD_*``).
    proximal_version : int, optional
        :math:`v_p`, default ``current_version - 1``.
    floor : float, optional
        :math:`f \ge 0` added to the probability before its logarithm (``"linear"`` only;
        AReaL adds ``1e-10``). Default 0, the exact interpolation.

    Returns
    -------
    ProximalLogprobs
        ``(logp_prox, grad)``, both (B, T).

    Raises
    ------
    ValueError
        A non-finite or mismatched array, a version above ``current_version``, a proximal
        version above it, an unknown method, or ``floor < 0``.
    TypeError
        Versions that are not integers.

    Notes
    -----
    AReaL 1.0.4 ``areal/trainer/ppo/actor.py:compute_prox_logp_approximations(old_logp,
    logprobs, versions, current_version, method)`` computes these with
    :math:`v_p = v_\theta - 1` (its docs, ``docs/algorithms/prox_approx.md``, give the
    interpolation above); ``"linear"`` there is ``log(p_arith + 1e-10)``, ``floor=1e-10`` here.
    Its loss function ``grpo_loss_fn`` (``prox_logp_method="loglinear"``) calls it on
    ``logprobs.detach()``: in training the approximation is a constant, the decoupled loss
    differentiates only its own ratio :math:`\pi_\theta/\pi_{\text{prox}}`, and ``grad`` here
    is the derivative of the approximation itself (what autograd gives when it is not detached).
    ``"linear"`` is computed in log space (``logaddexp``), so it neither overflows nor
    underflows; at :math:`\alpha = 0` it is exactly :math:`b` when ``floor = 0``.

    Examples
    --------
    >>> from refimpl.losses import proximal_logprobs
    >>> proximal_logprobs([[-1.0, -1.0]], [[-3.0, -3.0]], [[2, 0]], current_version=4).logp_prox
    array([[-2. , -1.5]])
    >>> proximal_logprobs([[-1.0, -1.0]], [[-3.0, -3.0]], [[2, 0]], current_version=4).grad
    array([[0.5 , 0.75]])
    """
    lp = token_array(logp, name="logp")
    shape = (lp.shape[0], lp.shape[1])
    lb = like_tokens(logp_behavior, shape, name="logp_behavior", like="logp")
    v, theta, prox = _versions(versions, current_version, proximal_version, shape=shape)
    m = as_choice(method, name="method", choices=PROXIMAL_METHODS)
    f = as_real(floor, name="floor", low=0.0, meaning="added to the probability (AReaL: 1e-10)")
    alpha = _weight(v, theta, prox)
    if m == "rollout":
        return ProximalLogprobs(lb.copy(), np.zeros(shape))
    if m == "loglinear":
        return ProximalLogprobs(lb + alpha * (lp - lb), alpha.copy())
    return _linear(lp, lb, alpha, f)


def _linear(lp: Array, lb: Array, alpha: Array, floor: float) -> ProximalLogprobs:
    """``log((1 − α)·e^b + α·e^ℓ + f)`` and its derivative in ℓ, in log space."""
    with np.errstate(divide="ignore"):
        log_a, log_1ma = np.log(alpha), np.log1p(-alpha)
        log_f = np.log(floor) if floor > 0 else -np.inf
    mixed = np.logaddexp(log_1ma + lb, log_a + lp)
    out = np.logaddexp(mixed, log_f)
    grad = np.exp(log_a + lp - out)
    return ProximalLogprobs(np.asarray(out, dtype=np.float64), np.asarray(grad, dtype=np.float64))


def _versions(
    versions: ArrayLike,
    current_version: int,
    proximal_version: int | None,
    *,
    shape: tuple[int, int] | None = None,
) -> tuple[Array, int, int]:
    """The versions (as float64, exact below 2^53), ``v_θ`` and ``v_p``, validated."""
    theta = as_int(current_version, name="current_version")
    prox = theta - 1
    if proximal_version is not None:
        prox = as_int(
            proximal_version,
            name="proximal_version",
            maximum=theta,
            meaning="current_version: the proximal policy is not newer than the current one",
        )
    v = as_int_array(versions, name="versions", ndim=2)
    if v.shape[0] == 0 or v.shape[1] == 0:
        raise invalid(
            "versions",
            "have at least one sequence and one token",
            v,
            f"Pass a (B, T) array with B >= 1 and T >= 1 (got shape {v.shape}).",
        )
    if shape is not None and v.shape != shape:
        raise invalid(
            "versions",
            f"have the shape of logp {shape}",
            v,
            "Pass one version per token (negative for prompt and padding tokens).",
        )
    out = np.asarray(v, dtype=np.float64)
    require_in_range(
        out,
        name="versions",
        high=theta,
        meaning="current_version: no token comes from a newer policy",
        fix="; pass the trainer's version as current_version, or the versions of the tokens.",
    )
    return out, theta, prox


def _weight(v: Array, theta: int, prox: int) -> Array:
    generated = (v >= 0) & (v < theta)
    with np.errstate(divide="ignore", invalid="ignore"):
        alpha = np.where(generated, (prox - v) / np.where(generated, theta - v, 1.0), 0.0)
    return np.asarray(np.clip(alpha, 0.0, 1.0), dtype=np.float64) + 0.0
