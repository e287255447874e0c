r"""Per-token KL estimators against a reference policy, and their importance-weighted form.

With :math:`d = \log\pi_\theta(y) - \log\pi_{\text{ref}}(y)` at a sampled token :math:`y`
(Schulman's "Approximating KL divergence", 2020):

=========  =============================================  =========================================
name       value                                          derivative in :math:`\log\pi_\theta`
=========  =============================================  =========================================
``k1``     :math:`d`                                      :math:`1`
``abs``    :math:`|d|`                                    :math:`\mathrm{sign}(d)` (0 at 0)
``k2``     :math:`d^2/2`                                  :math:`d`
``k3``     :math:`e^{-d} + d - 1`                         :math:`1 - e^{-d}`
``X+``     the value of ``X``                             :math:`d` (the derivative of ``k2``)
=========  =============================================  =========================================

Under samples from :math:`\pi_\theta`, ``k1`` and ``k3`` are unbiased for the reverse KL
:math:`\mathrm{KL}(\pi_\theta\,\|\,\pi_{\text{ref}})`, ``k2`` only to second order; the expected
per-sample gradient of ``k2`` (and of every ``X+``) is the gradient of that KL, the one of ``k3`` is
the gradient of the forward KL :math:`\mathrm{KL}(\pi_{\text{ref}}\,\|\,\pi_\theta)`, the one of
``k1`` is zero (claims KL1-KL6 of :mod:`proofs.loss_kl`).

Accepted aliases (verl 0.9.1 ``kl_penalty_forward``): ``"kl"`` is ``"k1"``, ``"mse"`` is ``"k2"``,
each also with ``+``; ``"low_var_kl"`` is verl's clamped ``k3`` (log-ratio clamped to
``[-20, 20]``, value to ``[-10, 10]``), also with ``+``. verl's own ``"k3"`` carries the same clamps:
reproduce it with ``"low_var_kl"`` or with ``"k3"`` and explicit clamps.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import as_real, invalid, mismatch, require_ordered
from refimpl.losses._common import (
    LossTerms,
    as_choice,
    like_tokens,
    masked,
    token_array,
    token_cotangent,
    token_mask,
)

__all__ = ["importance_weighted_kl", "kl_penalty"]

Array = NDArray[np.float64]
Bounds = tuple[float, float]

_BASE = ("k1", "abs", "k2", "k3")
_ALIASES = {"kl": "k1", "mse": "k2"}
_VERL_LOW_VAR: tuple[Bounds, Bounds] = ((-20.0, 20.0), (-10.0, 10.0))
ESTIMATORS: tuple[str, ...] = (
    *_BASE,
    *(f"{e}+" for e in _BASE),
    *_ALIASES,
    *(f"{e}+" for e in _ALIASES),
    "low_var_kl",
    "low_var_kl+",
)
WEIGHTINGS = ("detached", "differentiable", "gradient_only")


def _as_bounds(value: Any, *, name: str, meaning: str) -> Bounds | None:
    """``None``, a half-width ``c > 0`` (meaning ``[-c, c]``), or a pair ``(low, high)``."""
    if value is None:
        return None
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise invalid(
                name,
                f"be c > 0 or a pair (low, high) ({meaning})",
                value,
                f"Pass {name}=(low, high) with None for an open end.",
            )
        low = -math.inf if value[0] is None else as_real(value[0], name=f"{name}[0]")
        high = math.inf if value[1] is None else as_real(value[1], name=f"{name}[1]")
        require_ordered(low, high, names=(f"{name}[0]", f"{name}[1]"), meaning=meaning)
        return low, high
    c = as_real(value, name=name, low=0.0, low_open=True, meaning=meaning)
    return -c, c


def _estimator(
    estimator: Any, clamp: Bounds | None, log_clamp: Bounds | None
) -> tuple[str, bool, Bounds | None, Bounds | None]:
    """``(base estimator, straight-through?, value clamp, log-ratio clamp)``."""
    name = as_choice(estimator, name="estimator", choices=ESTIMATORS)
    straight = name.endswith("+")
    stem = name.rstrip("+")
    if stem == "low_var_kl":
        if clamp is not None or log_clamp is not None:
            raise mismatch(
                ("estimator", "clamp/log_ratio_clamp"),
                'not both be given ("low_var_kl" fixes verl\'s clamps: log-ratio to [-20, 20], '
                "value to [-10, 10])",
                f"estimator={estimator!r}, clamp={clamp!r} and log_ratio_clamp={log_clamp!r}",
                'Pass estimator="k3" (or "k3+") with your own clamps, or drop the clamps.',
            )
        return "k3", straight, _VERL_LOW_VAR[1], _VERL_LOW_VAR[0]
    return _ALIASES.get(stem, stem), straight, clamp, log_clamp


def _k3_value(d: Array) -> Array:
    """``e^{-d} + d - 1`` to full relative accuracy (series near 0); inf where ``e^{-d}`` overflows."""
    small = np.abs(d) < 1.0
    x = np.where(small, -d, 0.0)
    term, series = x * x / 2.0, np.zeros_like(d)
    for n in range(3, 27):  # Σ_{n>=2} x^n/n!, |x| < 1: the remainder is below 1e-26
        series += term
        term = term * x / n
    with np.errstate(over="ignore"):
        direct = np.expm1(-np.where(small, 0.0, d)) + d
    return np.where(small, series, direct)


def _base_terms(base: str, d: Array) -> tuple[Array, Array]:
    """The estimator's value and its derivative in ``d``."""
    if base == "k1":
        return d, np.ones_like(d)
    if base == "abs":
        return np.abs(d), np.sign(d)
    if base == "k2":
        return 0.5 * d * d, d
    with np.errstate(over="ignore"):
        return _k3_value(d), -np.expm1(-d)


def _clamped(values: Array, bounds: Bounds | None) -> tuple[Array, Array]:
    """``torch.clamp`` of ``values`` and its gradient factor (1 on the closed interval)."""
    if bounds is None:
        return values, np.ones_like(values)
    low, high = bounds
    return np.clip(values, low, high), ((values >= low) & (values <= high)).astype(np.float64)


def _estimate(
    d: Array, base: str, straight: bool, clamp: Bounds | None, log_clamp: Bounds | None
) -> tuple[Array, Array]:
    """Value and derivative in ``d`` of the (clamped, possibly straight-through) estimator."""
    dc, inner = _clamped(d, log_clamp)
    raw, slope = _base_terms(base, dc)
    value, outer = _clamped(raw, clamp)
    if straight:
        return value, d  # the gradient of k2 on the unclamped log-ratio (verl, OpenRLHF)
    with np.errstate(invalid="ignore"):
        deriv = np.where(outer * inner != 0.0, slope * inner * outer, 0.0)
    return value, deriv


def _refuse_overflow(values: Array, d: Array, *, what: str) -> None:
    if np.all(np.isfinite(values)):
        return
    first = int(np.flatnonzero(~np.isfinite(values.ravel()))[0])
    raise invalid(
        "logp",
        f"give a finite {what} (exp of the log-ratio overflows float64)",
        float(d.ravel()[first]),
        f"Entry {first} has log-ratio logp - logp_ref = {float(d.ravel()[first])!r}; pass "
        "log_ratio_clamp= (verl clamps to [-20, 20]) or clamp= (verl and OpenRLHF use 10).",
    )


def kl_penalty(
    logp: ArrayLike,
    logp_ref: ArrayLike,
    *,
    estimator: str,
    clamp: float | tuple[float | None, float | None] | None = None,
    log_ratio_clamp: float | tuple[float | None, float | None] | None = None,
    mask: ArrayLike | None = None,
    cotangent: ArrayLike | None = None,
) -> LossTerms:
    r"""A per-token KL estimator against the reference policy, as a loss term.

    .. math::

        d = \log\pi_\theta - \log\pi_{\text{ref}}, \quad
        k_1 = d,\; |d|,\; k_2 = \tfrac12 d^2,\; k_3 = e^{-d} + d - 1,

    and the straight-through ``X+`` whose value is ``X`` and whose gradient is ``k2``'s,
    :math:`d\,\partial\log\pi_\theta` (verl's ``+`` suffix).

    Parameters
    ----------
    logp, logp_ref : array_like, shape (B, T)
        Current and reference log-probabilities of the sampled tokens; finite.
    estimator : str
        ``"k1"``, ``"abs"``, ``"k2"``, ``"k3"``, any of them with ``"+"``, or verl's aliases
        ``"kl"`` (= k1), ``"mse"`` (= k2), ``"low_var_kl"`` (= k3 with verl's clamps), with or
        without ``"+"``.
    clamp : float or (low, high), optional
        Value clamp: ``c > 0`` means ``[-c, c]``; an end may be None. Outside it the value is the
        bound and the gradient 0 (``torch.clamp``; bounds included). verl's ``low_var_kl`` and
        OpenRLHF 0.11.2 (every estimator) use 10. Default none.
    log_ratio_clamp : float or (low, high), optional
        Clamp of ``d`` before the estimator, same rules (verl: ``[-20, 20]`` on ``k3``; OpenRLHF:
        ``(-10, None)`` on ``k3``). Default none.
    mask, cotangent : array_like, shape (B, T), optional
        Padding mask (default all valid) and VJP weights (default the mask).

    Returns
    -------
    LossTerms
        ``loss`` (B, T) the estimate per token, ``grad`` its VJP; both 0 at padding.

    Raises
    ------
    ValueError
        Bad shapes or values, an unknown estimator, a clamp with ``c <= 0`` or ``low > high``,
        clamps given with ``"low_var_kl"``, or ``k3`` overflowing without a clamp.

    Notes
    -----
    For ``X+`` the clamps act on the value only: the gradient is ``d`` on the unclamped log-ratio,
    as verl 0.9.1 ``kl_penalty`` and OpenRLHF 0.11.2 ``compute_approx_kl(unbiased_gradient=True)``
    compute it. Where a clamp is active the gradient is 0; there torch would give NaN when
    ``exp(-d)`` has overflowed (``0·inf``), which is why frameworks clamp ``d`` first. ``k3`` is
    computed by its series for ``|d| < 1`` (relative error a few ulp), where the naive formula
    ``exp(-d) + d - 1`` cancels and loses all digits as ``d → 0``. Expectations and gradients: claims KL1-KL6.

    References
    ----------
    J. Schulman, "Approximating KL divergence", 2020, http://joschu.net/blog/kl-approx.html.

    Examples
    --------
    >>> import numpy as np
    >>> from refimpl.losses.kl import kl_penalty
    >>> lp, ref = np.log([[0.5, 0.25]]), np.log([[0.25, 0.5]])
    >>> kl_penalty(lp, ref, estimator="k3").loss.round(6)
    array([[0.193147, 0.306853]])
    >>> kl_penalty(lp, ref, estimator="k3+").grad.round(6)  # the gradient of k2: d
    array([[ 0.693147, -0.693147]])
    """
    lp = token_array(logp, name="logp")
    lr = like_tokens(logp_ref, lp.shape, name="logp_ref", like="logp")
    m = token_mask(mask, (lp.shape[0], lp.shape[1]))
    c = token_cotangent(cotangent, m)
    base, straight, vclamp, lclamp = _estimator(
        estimator,
        _as_bounds(clamp, name="clamp", meaning="value clamp of the estimate"),
        _as_bounds(log_ratio_clamp, name="log_ratio_clamp", meaning="clamp of logp - logp_ref"),
    )
    d = masked(lp - lr, m)
    value, deriv = _estimate(d, base, straight, vclamp, lclamp)
    loss = masked(value, m)
    _refuse_overflow(loss, d, what="estimate")
    with np.errstate(invalid="ignore"):
        grad = masked(np.where(c != 0.0, c * deriv, 0.0), m)
    _refuse_overflow(grad, d, what="gradient")
    return LossTerms(loss, grad)


def importance_weighted_kl(
    logp: ArrayLike,
    logp_ref: ArrayLike,
    logp_behavior: ArrayLike,
    *,
    estimator: str,
    weighting: Literal["detached", "differentiable", "gradient_only"] = "detached",
    weight_cap: float | None = None,
    clamp: float | tuple[float | None, float | None] | None = None,
    log_ratio_clamp: float | tuple[float | None, float | None] | None = None,
    mask: ArrayLike | None = None,
    cotangent: ArrayLike | None = None,
) -> LossTerms:
    r"""A KL estimator weighted by the ratio :math:`w = \pi_\theta/\mu` for tokens sampled from ``μ``.

    .. math::

        w = \min\bigl(e^{\log\pi_\theta - \log\mu},\, C\bigr), \qquad
        \ell = w\,k(d) \;\text{(detached or differentiable } w\text{)}, \quad
        \text{or}\;\; \ell = k(d) + \mathrm{sg}[w]\,k(d) - \mathrm{sg}[w\,k(d)]\;\text{(gradient only)},

    with ``k`` the estimator of :func:`kl_penalty`. Under samples from :math:`\mu`,
    :math:`\mathbb{E}_\mu[w\,k] = \mathbb{E}_{\pi_\theta}[k]` (no cap), so ``k1``/``k3`` weighted
    estimate :math:`\mathrm{KL}(\pi_\theta\,\|\,\pi_{\text{ref}})` off-policy (claim KL7).

    Parameters
    ----------
    logp, logp_ref, logp_behavior : array_like, shape (B, T)
        Current, reference and behaviour (sampling) log-probabilities; finite.
    estimator : str
        As in :func:`kl_penalty`.
    weighting : {"detached", "differentiable", "gradient_only"}
        ``"detached"`` (default): value :math:`w k`, gradient :math:`w\,\partial k`.
        ``"differentiable"``: value :math:`w k`, gradient :math:`w(k\,\mathbb{1}[w<C\text{ or no cap}] +
        \partial k)`: TRL 1.16.0 ``use_bias_correction_kl`` (k3 times the live ratio).
        ``"gradient_only"``: value :math:`k`, gradient :math:`w\,\partial k`: OpenRLHF 0.11.2
        ``compute_approx_kl(unbiased_gradient=True)`` with ``estimator="k3+"``.
    weight_cap : float, optional
        Cap ``C >= 1`` of the weight (OpenRLHF: 10); above it the weight is ``C`` and, with
        ``"differentiable"``, passes no gradient (``torch.clamp``, bound included). Default none.
    clamp, log_ratio_clamp :
        As in :func:`kl_penalty` (they act on ``k``, not on the weight).
    mask, cotangent : array_like, shape (B, T), optional
        Padding mask (default all valid) and VJP weights (default the mask).

    Returns
    -------
    LossTerms
        ``loss`` and ``grad`` (B, T), 0 at padding.

    Raises
    ------
    ValueError
        As :func:`kl_penalty`; also an unknown ``weighting``, ``weight_cap < 1``, or a weight that
        overflows float64 without a cap.

    Notes
    -----
    With ``"detached"`` and ``k2`` (or any ``X+``), or ``"differentiable"`` and ``k3``, the
    expected gradient under ``μ`` is the gradient of :math:`\mathrm{KL}(\pi_\theta\,\|\,\pi_{\text{ref}})`
    (claim KL8); with ``"detached"`` and ``k3`` it is the forward KL's. On-policy (``μ = π_θ``,
    ``w = 1``) ``"detached"`` equals :func:`kl_penalty`. OpenRLHF also clamps the value of every
    estimator to ``[-10, 10]`` and ``d`` from below at -10 for ``k3``: pass
    ``clamp=10, log_ratio_clamp=(-10, None)``.

    Examples
    --------
    >>> import numpy as np
    >>> from refimpl.losses.kl import importance_weighted_kl
    >>> lp, ref, mu = np.log([[0.5]]), np.log([[0.25]]), np.log([[0.25]])
    >>> t = importance_weighted_kl(lp, ref, mu, estimator="k1")
    >>> t.loss.round(6), t.grad.round(6)
    (array([[1.386294]]), array([[2.]]))
    """
    lp = token_array(logp, name="logp")
    lr = like_tokens(logp_ref, lp.shape, name="logp_ref", like="logp")
    lb = like_tokens(logp_behavior, lp.shape, name="logp_behavior", like="logp")
    m = token_mask(mask, (lp.shape[0], lp.shape[1]))
    c = token_cotangent(cotangent, m)
    base, straight, vclamp, lclamp = _estimator(
        estimator,
        _as_bounds(clamp, name="clamp", meaning="value clamp of the estimate"),
        _as_bounds(log_ratio_clamp, name="log_ratio_clamp", meaning="clamp of logp - logp_ref"),
    )
    mode = as_choice(weighting, name="weighting", choices=WEIGHTINGS)
    cap = (
        math.inf
        if weight_cap is None
        else as_real(weight_cap, name="weight_cap", low=1.0, meaning="cap of the importance weight")
    )
    d = masked(lp - lr, m)
    lw = masked(lp - lb, m)
    with np.errstate(over="ignore"):
        w_raw = np.exp(lw)
    w = np.minimum(w_raw, cap)
    w_live = w_raw <= cap  # torch.clamp(max=C) passes the gradient at w = C
    value, deriv = _estimate(d, base, straight, vclamp, lclamp)
    _refuse_overflow(masked(value, m), d, what="estimate")
    with np.errstate(invalid="ignore", over="ignore"):
        loss = value if mode == "gradient_only" else np.where(value != 0.0, w * value, 0.0)
        slope = np.where(deriv != 0.0, w * deriv, 0.0)
        if mode == "differentiable":
            slope = slope + np.where(w_live & (value != 0.0), w * value, 0.0)
        grad = np.where(c != 0.0, c * slope, 0.0)
    loss, grad = masked(loss, m), masked(grad, m)
    if not (np.all(np.isfinite(loss)) and np.all(np.isfinite(grad))):
        raise invalid(
            "logp",
            "give a finite weighted estimate (the weight exp(logp - logp_behavior) overflows)",
            float(np.max(lw)),
            "Check logp against logp_behavior, or pass weight_cap= (OpenRLHF uses 10).",
        )
    return LossTerms(loss, grad)
