"""V-trace (Espeholt et al., 2018): off-policy value targets with truncated ratios.

:func:`vtrace` gives the targets, :func:`vtrace_td_error_and_advantage` the TD errors and the
policy-gradient advantages, with rlax's argument names and order.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import (
    as_float_array,
    as_real,
    invalid,
    mismatch,
    require_in_range,
    require_in_unit_interval,
    require_same_shape,
)

__all__ = ["VTraceOutput", "vtrace", "vtrace_td_error_and_advantage"]


class VTraceOutput(NamedTuple):
    """V-trace targets, with rlax's field names (see :func:`vtrace`).

    Attributes
    ----------
    errors : ndarray
        ``v_s − V(x_s)``: the V-trace target minus the value estimate (the critic's TD error).
    pg_advantage : ndarray
        ``min(ρ̄_pg, ρ_s) (r_s + γ_s q̃_{s+1} − V(x_s))``: the policy-gradient advantage.
    q_estimate : ndarray
        ``r_s + γ_s q̃_{s+1}``: the estimate of ``Q(x_s, a_s)`` used in the advantage.
    """

    errors: NDArray[np.float64]
    pg_advantage: NDArray[np.float64]
    q_estimate: NDArray[np.float64]


def vtrace(
    v_tm1: ArrayLike,
    v_t: ArrayLike,
    r_t: ArrayLike,
    discount_t: ArrayLike,
    rho_tm1: ArrayLike,
    *,
    lambda_: ArrayLike = 1.0,
    clip_rho_threshold: float = 1.0,
    clip_pg_rho_threshold: float = 1.0,
) -> VTraceOutput:
    r"""V-trace targets and policy-gradient advantages (IMPALA), with rlax's semantics.

    .. warning::

        ``refimpl.vtrace`` returns the triple ``(errors, pg_advantage, q_estimate)``, as
        ``rlax.vtrace_td_error_and_advantage`` does (also offered under that name:
        :func:`vtrace_td_error_and_advantage`). ``rlax.vtrace`` returns **only the errors**: its
        counterpart here is ``refimpl.vtrace(...).errors``. Compare like with like when you check
        an rlax-based implementation against this one.

    With truncated ratios :math:`\bar\rho_s = \min(\bar\rho, \rho_s)` and
    :math:`c_s = \lambda_s \min(1, \rho_s)`, the temporal differences
    :math:`\delta_s = \bar\rho_s (r_s + \gamma_s V(x_{s+1}) - V(x_s))` and

    .. math::

        v_s - V(x_s) = \sum_{t \ge s} \Bigl(\prod_{i=s}^{t-1} \gamma_i c_i\Bigr) \delta_t,

    computed by the backward recursion ``err_s = δ_s + γ_s c_s err_{s+1}``. The Q estimate and the
    advantage are

    .. math::

        q_s = r_s + \gamma_s \bigl(\lambda_s v_{s+1} + (1 - \lambda_s) V(x_{s+1})\bigr), \quad
        A_s = \min(\bar\rho_\text{pg}, \rho_s)\,(q_s - V(x_s)),

    with :math:`V(x_{T})` (``v_t[-1]``) in place of the bracket at the last step.

    Parameters
    ----------
    v_tm1 : array_like, shape (T,) or (B, T)
        Values :math:`V(x_s)` at the states where the actions were taken.
    v_t : array_like, same shape
        Values :math:`V(x_{s+1})` at the next states (``v_t[..., -1]`` bootstraps the end).
    r_t : array_like, same shape
        Rewards :math:`r_s`.
    discount_t : array_like, same shape
        Discounts :math:`\gamma_s \in [0, 1]`; 0 marks an episode boundary.
    rho_tm1 : array_like, same shape
        Importance **ratios** :math:`\pi/\mu \ge 0` (not log-ratios), as in rlax.
    lambda_ : float or array_like
        Mixing parameter in ``[0, 1]``: a scalar, shape ``(T,)``, or the full shape.
    clip_rho_threshold : float
        :math:`\bar\rho > 0` for the TD errors.
    clip_pg_rho_threshold : float
        :math:`\bar\rho_\text{pg} > 0` for the advantage.

    Returns
    -------
    VTraceOutput
        ``(errors, pg_advantage, q_estimate)``, each of the input shape. Rows of a ``(B, T)`` batch
        are independent sequences.

    Raises
    ------
    ValueError
        If shapes differ, a value is non-finite, a discount is outside ``[0, 1]``, a ratio is
        negative, ``lambda_`` is outside ``[0, 1]`` or a threshold is ``<= 0``.

    Notes
    -----
    Follows ``rlax.vtrace_td_error_and_advantage`` (rlax 0.1.9): the trace cutting uses
    ``min(1, ρ)`` (``c̄ = 1`` fixed), ``errors`` are the targets minus ``v_tm1`` (rlax's
    ``stop_target_gradients`` only affects gradients, so it has no counterpart here, nor has its
    ``sample_mask``). Golden values computed by rlax itself pin this (tests/data/vtrace_rlax/). Some implementations (e.g. TorchBeast,
    scalable_agent) take log-ratios and a separate ``c̄``; convert with ``rho = exp(log_rho)``.
    Invariants: with ``ρ ≡ 1`` and clip thresholds ``>= 1`` the targets are the λ-returns; a
    discount of 0 separates independent episodes (claims VT1–VT3).

    References
    ----------
    Espeholt et al. 2018, IMPALA (arXiv 1802.01561); rlax ``vtrace.py``.

    Examples
    --------
    >>> import refimpl
    >>> out = refimpl.vtrace([0.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.9, 0.9], [1.0, 1.0])
    >>> out.errors
    array([1.9, 1. ])
    >>> out.q_estimate
    array([1.9, 1. ])
    """
    names = ("v_tm1", "v_t", "r_t", "discount_t", "rho_tm1")
    arrays = [
        as_float_array(x, name=n, ndim=(1, 2))
        for x, n in zip((v_tm1, v_t, r_t, discount_t, rho_tm1), names, strict=True)
    ]
    for arr, name in zip(arrays[1:], names[1:], strict=True):
        require_same_shape(arrays[0], arr, names=("v_tm1", name))
    v_tm1_a, v_t_a, r_a, disc, rho = arrays
    if v_tm1_a.shape[-1] == 0:
        raise invalid("v_tm1", "have at least one time step", v_tm1_a, "Pass T >= 1.")
    require_in_unit_interval(
        disc, name="discount_t", meaning="0 marks an episode boundary", fix="."
    )
    require_in_range(
        rho,
        name="rho_tm1",
        low=0.0,
        meaning="importance ratios π/μ, not log-ratios",
        fix="; if you have log-ratios pass np.exp(them).",
    )
    lam = as_float_array(lambda_, name="lambda_")
    if lam.ndim > 0 and lam.shape not in (v_tm1_a.shape, v_tm1_a.shape[-1:]):
        raise mismatch(
            ("lambda_", "v_tm1"),
            "have compatible shapes (lambda_ is a scalar, (T,) or the full shape)",
            f"lambda_.shape={lam.shape} and v_tm1.shape={v_tm1_a.shape}",
            "Pass a scalar lambda_ or one per time step.",
        )
    if np.any((lam < 0) | (lam > 1)):
        raise invalid("lambda_", "lie in [0, 1] (trace mixing)", lam, "Pass 0 <= lambda_ <= 1.")
    lam = np.broadcast_to(lam, v_tm1_a.shape)
    rho_bar = as_real(
        clip_rho_threshold, name="clip_rho_threshold", low=0.0, low_open=True, meaning="ρ̄"
    )
    pg_bar = as_real(
        clip_pg_rho_threshold, name="clip_pg_rho_threshold", low=0.0, low_open=True, meaning="ρ̄_pg"
    )

    c = lam * np.minimum(1.0, rho)
    td = np.minimum(rho_bar, rho) * (r_a + disc * v_t_a - v_tm1_a)
    errors = np.empty_like(td)
    err = np.zeros(td.shape[:-1])
    for i in range(td.shape[-1] - 1, -1, -1):
        err = td[..., i] + disc[..., i] * c[..., i] * err
        errors[..., i] = err
    targets = errors + v_tm1_a
    q_bootstrap = np.empty_like(td)
    q_bootstrap[..., :-1] = (
        lam[..., :-1] * targets[..., 1:] + (1.0 - lam[..., :-1]) * v_tm1_a[..., 1:]
    )
    q_bootstrap[..., -1] = v_t_a[..., -1]
    q_estimate = r_a + disc * q_bootstrap
    pg_advantage = np.minimum(pg_bar, rho) * (q_estimate - v_tm1_a)
    return VTraceOutput(errors=errors, pg_advantage=pg_advantage, q_estimate=q_estimate)


def vtrace_td_error_and_advantage(
    v_tm1: ArrayLike,
    v_t: ArrayLike,
    r_t: ArrayLike,
    discount_t: ArrayLike,
    rho_tm1: ArrayLike,
    *,
    lambda_: ArrayLike = 1.0,
    clip_rho_threshold: float = 1.0,
    clip_pg_rho_threshold: float = 1.0,
) -> VTraceOutput:
    r"""V-trace errors, advantages and Q estimates, under rlax's name for them.

    The same function as :func:`vtrace` (the formulas, parameters, validation and claims are
    documented there), named as rlax names it, so that a port of rlax code finds it.

    .. warning::

        Which returns what: ``rlax.vtrace_td_error_and_advantage``, this function and
        ``refimpl.vtrace`` all return ``(errors, pg_advantage, q_estimate)``; ``rlax.vtrace``
        returns only ``errors`` (``refimpl.vtrace(...).errors`` here).

    Parameters
    ----------
    v_tm1, v_t, r_t, discount_t, rho_tm1 : array_like, shape (T,) or (B, T)
        As in :func:`vtrace`.
    lambda_, clip_rho_threshold, clip_pg_rho_threshold : float or array_like
        As in :func:`vtrace`.

    Returns
    -------
    VTraceOutput
        ``(errors, pg_advantage, q_estimate)``, each of the input shape.

    Raises
    ------
    ValueError
        As :func:`vtrace`.

    Examples
    --------
    >>> import refimpl
    >>> args = ([0.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.9, 0.9], [1.0, 1.0])
    >>> out = refimpl.vtrace_td_error_and_advantage(*args)
    >>> out.errors, out.q_estimate
    (array([1.9, 1. ]), array([1.9, 1. ]))
    """
    return vtrace(
        v_tm1,
        v_t,
        r_t,
        discount_t,
        rho_tm1,
        lambda_=lambda_,
        clip_rho_threshold=clip_rho_threshold,
        clip_pg_rho_threshold=clip_pg_rho_threshold,
    )
