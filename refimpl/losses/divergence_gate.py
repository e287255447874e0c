r"""Importance weights gated by a divergence of the sampled token's probability (a trust region).

The importance ratio :math:`\rho_t = \pi_t/\mu_t` between the trainer's policy :math:`\pi` and the
behaviour (rollout) policy :math:`\mu` corrects the mismatch between them. Instead of a band on the
ratio (:func:`refimpl.masked_is_weights`), a trust region reads a divergence between the two
probabilities of the sampled token, :math:`p = \mu(y_t)` and :math:`q = \pi(y_t)`, as two
Bernoulli distributions (the token, or any other token):

.. math::

    D_{\text{KL}}(p\,\|\,q) = p\log\frac{p}{q} + (1-p)\log\frac{1-p}{1-q}, \qquad
    D_{\text{TV}} = |p - q|,

and drops the token (or, at sequence level, the sequence whose mean divergence is too large) when
:math:`D > \delta`; a kept token keeps its ratio :math:`\rho_t`.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import as_real, invalid
from refimpl.losses._common import as_choice, like_tokens, masked, token_array, token_mask

__all__ = ["divergence_gated_weights"]

Array = NDArray[np.float64]


def divergence_gated_weights(
    logp_target: ArrayLike,
    logp_behavior: ArrayLike,
    *,
    delta: float,
    divergence: Literal["binary_kl", "tv"] = "binary_kl",
    level: Literal["token", "sequence"] = "token",
    prob_clamp: float | None = None,
    mask: ArrayLike | None = None,
) -> Array:
    r"""The ratio :math:`\pi/\mu` of each token kept where the divergence of its probabilities is <= δ.

    .. math::

        w_t = \rho_t\,\mathbb 1[S \le \delta], \qquad \rho_t = e^{\log\pi_t - \log\mu_t},
        \qquad S = D_t \ \text{(token)} \ \text{or} \
        \frac{1}{L_b}\sum_{s} D_s \ \text{(sequence)},

    with :math:`D_t` the binary KL :math:`D_{\text{KL}}(p_t\,\|\,q_t)` or the total variation
    :math:`|p_t - q_t|` of :math:`p_t = \mu(y_t)`, :math:`q_t = \pi(y_t)` (both clipped to
    ``[prob_clamp, 1 - prob_clamp]`` first if a clamp is given).

    Parameters
    ----------
    logp_target : array_like, shape (B, T)
        :math:`\log\pi` of the sampled tokens under the trainer's policy; <= 0 at real tokens.
    logp_behavior : array_like, shape (B, T)
        :math:`\log\mu` under the behaviour (rollout) policy; <= 0 at real tokens.
    delta : float
        The trust region's radius, ``delta >= 0``: a divergence above it drops the unit.
    divergence : {"binary_kl", "tv"}
        The binary KL :math:`D_{\text{KL}}(p\,\|\,q)` (behaviour first) or the total variation.
    level : {"token", "sequence"}
        Gate each token on its own divergence, or each sequence on the mean over its real tokens.
    prob_clamp : float, optional
        ``0 < c < 1/2``: clip both probabilities to ``[c, 1 - c]`` before the divergence (keeps the
        binary KL's logarithms finite at probability 1). Default: none; a probability of exactly 1
        with a different other one then gives an infinite KL, and the unit is dropped.
    mask : array_like, shape (B, T), optional
        0/1 padding mask. Default: every token is real.

    Returns
    -------
    ndarray of float64, shape (B, T)
        The weights, 0 at padding and at dropped units.

    Raises
    ------
    ValueError
        Non-finite or mismatched arrays, a positive log-probability at a real token, ``delta < 0``,
        ``prob_clamp`` outside ``(0, 1/2)``, or a ratio that overflows float64 at a kept token.

    Notes
    -----
    OpenRLHF 0.11.2 ``openrlhf/models/loss.py:PolicyLoss.forward`` with
    ``is_correction_gating="binary_kl"`` or ``"tv"`` (``is_correction_mode="mask"``,
    ``is_correction_level`` token or seq, threshold ``(0, δ)``: the CLI's single value is the
    upper bound) multiplies each token's PPO loss by this weight, with ``prob_clamp=1e-6``,
    :math:`\pi` its old (trainer) policy and :math:`\mu` the vLLM rollout policy; it is
    FlashREINFORCE's trust region (binary KL at sequence level). A unit exactly at :math:`\delta`
    is kept. The binary KL is 0 exactly when :math:`p = q` and grows as they part in either
    direction, so the gate is a region around :math:`p`; unlike DPPO (:func:`refimpl.dppo_loss`)
    it does not look at the advantage's sign. Derivation: ``proofs/loss_divergence_gate.py``.

    Examples
    --------
    >>> import numpy as np
    >>> import refimpl.losses.divergence_gate as dg
    >>> lt, lb = np.log([[0.5, 0.9, 0.25]]), np.log([[0.5, 0.3, 0.5]])  # TV 0, 0.6, 0.25
    >>> dg.divergence_gated_weights(lt, lb, delta=0.3, divergence="tv")
    array([[1. , 0. , 0.5]])
    >>> dg.divergence_gated_weights(lt, lb, delta=0.3, divergence="tv", level="sequence")
    array([[1. , 3. , 0.5]])
    >>> dg.divergence_gated_weights(lt, lb, delta=0.25, divergence="tv", level="sequence")
    array([[0., 0., 0.]])
    """
    lt = token_array(logp_target, name="logp_target")
    shape = (lt.shape[0], lt.shape[1])
    lb = like_tokens(logp_behavior, shape, name="logp_behavior", like="logp_target")
    m = token_mask(mask, shape, like="logp_target")
    d = as_real(delta, name="delta", low=0.0, meaning="the trust region's radius")
    kind = as_choice(divergence, name="divergence", choices=("binary_kl", "tv"))
    unit = as_choice(level, name="level", choices=("token", "sequence"))
    _require_probabilities(lt, m, "logp_target")
    _require_probabilities(lb, m, "logp_behavior")
    p, q = np.exp(np.where(m > 0, lb, 0.0)), np.exp(np.where(m > 0, lt, 0.0))
    if prob_clamp is not None:
        c = as_real(
            prob_clamp,
            name="prob_clamp",
            low=0.0,
            high=0.5,
            low_open=True,
            high_open=True,
            meaning="both probabilities are clipped to [c, 1 - c]",
        )
        p, q = np.clip(p, c, 1.0 - c), np.clip(q, c, 1.0 - c)
    stat = masked(_binary_kl(p, q) if kind == "binary_kl" else np.abs(p - q), m)
    if unit == "sequence":
        counts = m.sum(axis=1, keepdims=True)
        sums = np.where(np.isinf(stat), np.inf, stat).sum(axis=1, keepdims=True)
        row = np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)
        stat = np.broadcast_to(row, shape)
    keep = (stat <= d) & (m > 0)
    with np.errstate(over="ignore"):
        rho = np.exp(np.where(keep, lt - lb, 0.0))
    if np.any(keep & ~np.isfinite(rho)):
        b, t = (int(i) for i in np.argwhere(keep & ~np.isfinite(rho))[0])
        raise invalid(
            "logp_target",
            "keep the ratio exp(logp_target - logp_behavior) of a kept token finite in float64",
            lt,
            f"Token (b={b}, t={t}) is kept (its divergence is within delta) with a ratio beyond "
            "float64; pass a smaller delta.",
        )
    return masked(np.where(keep, rho, 0.0), m) + 0.0


def _binary_kl(p: Array, q: Array) -> Array:
    """``p log(p/q) + (1 − p) log((1 − p)/(1 − q))`` with ``0·log 0 = 0`` (inf where q hits 0 or 1)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        first = np.where(p > 0, p * (np.log(p) - np.log(q)), 0.0)
        rest_p, rest_q = 1.0 - p, 1.0 - q
        second = np.where(rest_p > 0, rest_p * (np.log(rest_p) - np.log(rest_q)), 0.0)
        out = first + second
    return np.asarray(np.where(np.isnan(out), np.inf, np.maximum(out, 0.0)), dtype=np.float64)


def _require_probabilities(lp: Array, m: Array, name: str) -> None:
    bad = (m > 0) & (lp > 0.0)
    if np.any(bad):
        b, t = (int(i) for i in np.argwhere(bad)[0])
        raise invalid(
            name,
            "hold log-probabilities <= 0 at every real token",
            lp,
            f"Token (b={b}, t={t}) is {float(lp[b, t])!r}; pass log-probabilities of the sampled "
            "tokens.",
        )
