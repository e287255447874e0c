r"""Stale behaviours and their corrections: corrected scores and the asynchronous gradient."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from refimpl._validation import as_float_array, invalid
from refimpl.dispatch import fluid_keep_probability
from refimpl.learning._common import _LOG_MAX, AnyArray, FloatArray, _as_array
from refimpl.learning.fluid import _exact_keep, fluid_staleness_pmf, fluid_step_time
from refimpl.learning.moments import GradientMoments, expected_length, gradient_moments
from refimpl.learning.policy import (
    _token_log_probs_from_logits,
    hazard_length_pmf,
    stop_hazard,
    token_scores,
)
from refimpl.staleness import (
    decoupled_ppo_weights,
    masked_is_weights,
    staleness_mask,
    truncated_is_weights,
)

#: The off-policy corrections of :func:`corrected_scores` (conventions §masks-and-weights), plus
#: ``sequence_is``: the full, uncapped sequence ratio, the unbiased reference.
CORRECTIONS: tuple[str, ...] = (
    "none",
    "sequence_is",
    "token_tis",
    "sequence_tis",
    "geometric",
    "icepop",
    "decoupled_ppo",
)


def corrected_scores(
    theta: ArrayLike,
    behaviour: ArrayLike,
    features: ArrayLike,
    *,
    correction: str = "none",
    cap: float = 2.0,
    low: float = 0.5,
    high: float = 2.0,
) -> FloatArray:
    r"""Weighted scores :math:`G(\ell)` of rollouts sampled by ``behaviour`` and trained at ``theta``.

    With token ratios :math:`\rho_t = \pi_\theta(a_t)/\mu(a_t)` and token scores :math:`s_t` at
    :math:`\theta` (:func:`token_scores`):

    ======================  ==============================================================
    ``none``                :math:`\sum_t s_t`
    ``sequence_is``         :math:`\prod_t\rho_t\,\sum_t s_t` (uncapped: unbiased)
    ``token_tis``           :math:`\sum_t \min(\rho_t, C)\,s_t`
    ``sequence_tis``        :math:`\min(\prod_t\rho_t, C)\sum_t s_t`
    ``geometric``           :math:`\min((\prod_t\rho_t)^{1/\ell}, C)\sum_t s_t`
    ``icepop``              :math:`\sum_t \rho_t 1[\alpha\le\rho_t\le\beta]\,s_t`
    ``decoupled_ppo``       :math:`\sum_t (\pi_\text{prox}/\mu)\,1[\pi_\text{prox}/\mu \le C]\,s_t`
    ======================  ==============================================================

    The weights come from :func:`refimpl.truncated_is_weights`, :func:`refimpl.masked_is_weights`
    and :func:`refimpl.decoupled_ppo_weights`. Only ``sequence_is`` is unbiased for a stale
    behaviour; the bias of token TIS, in closed form, is claim :ref:`LRN2 <lrn2>`. Decoupled PPO is evaluated at its proximal point
    (:math:`\pi_\text{prox} = \pi_\theta`, where the PPO ratio is 1 and unclipped), so its gradient
    is the behaviour-weighted token score.

    Parameters
    ----------
    theta, behaviour : array_like (d,)
        Target (trainer) and behaviour (rollout) parameters.
    features : array_like (M, d)
    correction : str
        One of :data:`CORRECTIONS`.
    cap : float
        :math:`C \ge 1` (TIS, geometric, decoupled PPO).
    low, high : float
        :math:`[\alpha, \beta]` of IcePop.

    Returns
    -------
    ndarray of float64, shape (M, d)

    Examples
    --------
    >>> from refimpl.learning import length_features
    >>> phi = length_features(3, degree=1)
    >>> g0 = corrected_scores([0.0, 0.0], [0.0, 0.0], phi, correction="token_tis")
    >>> np.allclose(g0, token_scores(stop_hazard([0.0, 0.0], phi), phi).sum(axis=1))
    True
    """
    if correction not in CORRECTIONS:
        raise invalid("correction", f"be one of {CORRECTIONS}", correction, "Pick one of them.")
    h_t = stop_hazard(theta, features)
    phi = as_float_array(features, name="features", ndim=2)
    tok = np.asarray(token_scores(h_t, phi), dtype=np.float64)
    seq = tok.sum(axis=1)
    if correction == "none":
        return np.asarray(seq, dtype=np.float64)
    lt, mask = _token_log_probs_from_logits(theta, phi)
    lb, _ = _token_log_probs_from_logits(behaviour, phi)
    return _weighted_scores(tok, lt, lb, mask, correction=correction, cap=cap, low=low, high=high)


def _weighted_scores(
    tok: FloatArray,
    lt: FloatArray,
    lb: FloatArray,
    mask: FloatArray,
    *,
    correction: str,
    cap: float,
    low: float,
    high: float,
) -> FloatArray:
    """Each sample's score under an importance-weighting ``correction`` (not ``none``): ``tok``
    (samples, tokens, d) the token scores, ``lt``/``lb`` the target's and behaviour's token
    log-probabilities, ``mask`` the valid tokens. Sequence-level weights scale the summed score;
    token-level ones weight each token's score."""
    seq = tok.sum(axis=1)
    if correction == "sequence_is":
        w = np.exp(np.minimum(((lt - lb) * mask).sum(axis=1), _LOG_MAX))
        return np.asarray(w[:, None] * seq, dtype=np.float64)
    if correction in ("sequence_tis", "geometric"):
        level: Any = "sequence" if correction == "sequence_tis" else "geometric"
        w = truncated_is_weights(lt, lb, cap=cap, level=level, mask=mask)
        return np.asarray(w[:, None] * seq, dtype=np.float64)
    if correction == "token_tis":
        wt = truncated_is_weights(lt, lb, cap=cap, level="token", mask=mask)
    elif correction == "icepop":
        wt = masked_is_weights(lt, lb, low=low, high=high, level="token", mask=mask)
    else:
        wt = decoupled_ppo_weights(lt, lb, cap=cap, mask=mask)
    return np.asarray((wt[:, :, None] * tok).sum(axis=1), dtype=np.float64)


def async_gradient(
    theta: ArrayLike,
    features: ArrayLike,
    quality: ArrayLike,
    *,
    slots: int,
    batch: int,
    lag: ArrayLike | None = None,
    eta: int | None = None,
    correction: str = "none",
    penalty: float = 0.0,
    baseline: float = 0.0,
    cap: float = 2.0,
    low: float = 0.5,
    high: float = 2.0,
    mask_ipw: bool = False,
    ipw_clip: float | None = None,
) -> GradientMoments:
    r"""Expected per-sample gradient of continuous asynchronous dispatch in the fluid model.

    A sample trained at :math:`\theta` with staleness :math:`s` was generated by the behaviour
    version :math:`\theta_s = \theta - s\,\delta` (the policy moved by ``lag`` :math:`= \delta` per
    version). In the fluid model the trained (length, staleness) law is

    .. math::

        q(\ell, s) \propto p_{\theta_s}(\ell)\, P(s \mid \ell)\, 1[s \le \eta],

    with :math:`P(s \mid \ell)` = :func:`fluid_staleness_pmf` at the step time :math:`\Delta` =
    :func:`fluid_step_time` of :math:`p_\theta` (the mask at :math:`\eta` lengthens it: dropped
    rollouts do not fill batches; the mask itself is :func:`refimpl.staleness_mask`). Each
    component gets the weighted scores of :func:`corrected_scores`, and :func:`gradient_moments`
    sums them.

    Approximation: launches are taken at a constant rate over the few versions a rollout spans, and
    :math:`\Delta` is that of the current law. With ``lag = 0`` every behaviour equals the target,
    and the only bias left is the length bias of the mask.

    Parameters
    ----------
    theta : array_like (d,)
    features : array_like (M, d)
    quality : array_like (M,)
    slots, batch : int
        :math:`N`, :math:`B`.
    lag : array_like (d,), optional
        :math:`\delta`; default 0.
    eta : int, optional
        Staleness bound of the mask; ``None``: nothing dropped.
    correction : str
        One of :data:`CORRECTIONS`.
    penalty, baseline, cap, low, high : float
        As in :func:`gradient_moments` and :func:`corrected_scores`.
    mask_ipw : bool
        Inverse propensity for the mask: weight each kept sample by
        :math:`w(\ell) = \kappa/\mathrm{keep}(\ell)`, with :math:`\mathrm{keep}(\ell) =
        P(s \le \eta \mid \ell)` of the fluid model and :math:`\kappa` the kept fraction
        :math:`B\,E[L]/(N\Delta)`, on top of ``correction``. Without lag it makes the expected
        gradient :math:`\sum_{\ell:\,\mathrm{keep}(\ell)>0} p(\ell)(\bar R - b)s(\ell)`: the
        on-policy gradient minus the lengths the mask never keeps (:math:`\ell \ge
        (\eta+1)\Delta`), which no weight can bring back. Needs ``eta``.
    ipw_clip : float, optional
        Cap :math:`C > 0` of the mask's weights, :math:`\min(w, C)` (``mask_ipw`` only).

    Returns
    -------
    GradientMoments
        Per-draw mean and covariance trace (the samples of the fluid limit are independent, so a
        batch of :math:`B` has :math:`1/B` of it). Float64: the hazards are logistic
        (irrational); :func:`async_gradient_exact` gives the same quantities in Fractions for
        rational hazards.

    Examples
    --------
    Without lag and without a mask the fluid trained law is :math:`p_\theta` itself, so the
    expected gradient is the on-policy one:

    >>> from refimpl.learning import length_features, policy_gradient
    >>> phi = length_features(8, degree=1)
    >>> Q = np.linspace(0.2, 0.9, 8)
    >>> h = stop_hazard([-1.0, 0.0], phi)
    >>> on = policy_gradient(hazard_length_pmf(h), token_scores(h, phi).sum(axis=1), Q)
    >>> asy = async_gradient([-1.0, 0.0], phi, Q, slots=4, batch=4)
    >>> bool(np.allclose(asy.mean, on.mean))
    True
    """
    th = as_float_array(theta, name="theta", ndim=1)
    phi = as_float_array(features, name="features", ndim=2)
    delta_vec = np.zeros_like(th) if lag is None else as_float_array(lag, name="lag", ndim=1)
    _check_mask_ipw(mask_ipw, ipw_clip, eta)
    m = phi.shape[0]
    p = hazard_length_pmf(stop_hazard(th, phi))
    step = fluid_step_time(p, slots=slots, batch=batch, eta=eta)
    ell = np.arange(1, m + 1, dtype=np.float64)
    s_max = math.ceil(m / step)
    cond = fluid_staleness_pmf(ell, step_time=step, max_staleness=s_max)  # (M, S+1)
    s_values = np.arange(s_max + 1, dtype=np.float64)
    keep = np.ones(s_max + 1) if eta is None else staleness_mask(s_values, eta=eta)
    laws = []
    scores = []
    for s in range(s_max + 1):
        if keep[s] == 0 or not np.any(cond[:, s] > 0):
            continue
        beh = th - s * delta_vec
        laws.append(hazard_length_pmf(stop_hazard(beh, phi)) * cond[:, s])
        scores.append(
            corrected_scores(th, beh, phi, correction=correction, cap=cap, low=low, high=high)
        )
    law = np.stack(laws)
    law = law / law.sum()
    g = np.stack(scores)
    if mask_ipw:
        assert eta is not None
        keep_l = fluid_keep_probability(ell, step_time=step, eta=eta)
        kappa = batch * float(p @ ell) / (slots * step)
        w = np.where(keep_l > 0, kappa / np.where(keep_l > 0, keep_l, 1.0), 0.0)
        if ipw_clip is not None:
            w = np.minimum(w, ipw_clip)
        g = g * w[None, :, None]
    return gradient_moments(law, g, quality, penalty=penalty, baseline=baseline)


def _check_mask_ipw(mask_ipw: bool, ipw_clip: Any, eta: int | None) -> None:
    if mask_ipw and eta is None:
        raise invalid(
            "mask_ipw",
            "need a mask (eta) whose keep probability it inverts",
            mask_ipw,
            "Pass eta=η with mask_ipw=True, or mask_ipw=False.",
        )
    if ipw_clip is not None and (not mask_ipw or not ipw_clip > 0):
        raise invalid(
            "ipw_clip",
            "be > 0 and come with mask_ipw=True (the cap of the mask's weights)",
            ipw_clip,
            "Pass mask_ipw=True and ipw_clip=C > 0, or no ipw_clip.",
        )


def _exact_ratio_weights(
    target: list[Fraction],
    behaviour: list[Fraction],
    correction: str,
    cap: Any,
    low: Any,
    high: Any,
) -> tuple[list[Fraction] | None, Fraction]:
    """Token weights (or ``None``) and a sequence weight of one rollout, from its token probabilities."""
    rho = [a / b for a, b in zip(target, behaviour, strict=True)]
    seq = Fraction(1)
    for x in rho:
        seq *= x
    if correction == "none":
        return None, Fraction(1)
    if correction == "sequence_is":
        return None, seq
    if correction == "sequence_tis":
        return None, min(seq, cap)
    if correction == "token_tis":
        return [min(x, cap) for x in rho], Fraction(1)
    if correction == "icepop":
        return [x if low <= x <= high else Fraction(0) for x in rho], Fraction(1)
    # decoupled PPO at its proximal point: π_prox/μ, masked above the cap
    return [x if x <= cap else Fraction(0) for x in rho], Fraction(1)


#: The corrections :func:`async_gradient_exact` computes in Fractions (``geometric`` needs an
#: :math:`\ell`-th root, irrational in general: it stays in :func:`async_gradient`, float64).
EXACT_CORRECTIONS: tuple[str, ...] = tuple(c for c in CORRECTIONS if c != "geometric")


def _exact_inputs(
    hazard: Any,
    behaviours: Any,
    features: Any,
    quality: Any,
    params: tuple[Any, ...],
    *,
    slots: int,
    batch: int,
    eta: int | None,
) -> tuple[AnyArray, AnyArray, AnyArray, list[tuple[AnyArray, bool]], Any, Fraction, int]:
    """:func:`async_gradient_exact`'s inputs checked rational and consistent: the hazards, features,
    quality, behaviour rows, the length pmf, the exact step time and the largest staleness the rows
    must cover."""
    h, exact_h = _as_array(hazard, name="hazard", ndim=1)
    phi, exact_phi = _as_array(features, name="features", ndim=2)
    q, exact_q = _as_array(quality, name="quality", ndim=1)
    exact_params = all(isinstance(x, (Fraction, int)) and not isinstance(x, bool) for x in params)
    rows = [_as_array(b, name="behaviours", ndim=1) for b in behaviours]
    if not (exact_h and exact_phi and exact_q and exact_params and all(e for _, e in rows)):
        raise invalid(
            "hazard",
            "be rational, with every behaviour, feature, quality and parameter (exact mode)",
            hazard,
            "Pass Fractions or ints everywhere, or use async_gradient (float64).",
        )
    m = h.size
    if any(b.size != m for b, _ in rows) or not rows or list(rows[0][0]) != list(h):
        raise invalid(
            "behaviours",
            f"be a list of hazard vectors of length {m}, the first equal to hazard",
            behaviours,
            "Pass behaviours[0] = hazard and one row per staleness.",
        )
    pmf = hazard_length_pmf(list(h))
    step = fluid_step_time(pmf, slots=slots, batch=batch, eta=eta)
    s_need = math.ceil(Fraction(m) / step)
    if len(rows) < s_need + 1:
        raise invalid(
            "behaviours",
            f"cover every staleness up to ceil(M/Δ) = {s_need}",
            len(rows),
            f"Pass {s_need + 1} behaviour rows (s = 0..{s_need}).",
        )
    return h, phi, q, rows, pmf, step, s_need


def async_gradient_exact(
    hazard: Any,
    behaviours: Any,
    features: Any,
    quality: Any,
    *,
    slots: int,
    batch: int,
    eta: int | None = None,
    correction: str = "none",
    penalty: Any = 0,
    baseline: Any = 0,
    cap: Any = 2,
    low: Any = Fraction(1, 2),
    high: Any = 2,
    mask_ipw: bool = False,
    ipw_clip: Any = None,
) -> GradientMoments:
    r""":func:`async_gradient` in exact arithmetic, for rational hazards.

    The same fluid model: trained law :math:`q(\ell, s) \propto p_{\mu_s}(\ell)\,P(s \mid \ell)\,
    1[s \le \eta]` with :math:`P(s\mid\ell)` from the keep law at the step time :math:`\Delta` of
    :math:`p_\theta` (:func:`fluid_step_time`, exact for a rational pmf), behaviour
    :math:`\mu_s` = ``behaviours[s]`` (the hazards of the version :math:`s` steps before the
    target), and the weights of each correction computed from the token probabilities
    :math:`h(t)`, :math:`1 - h(t)` as Fractions. Every quantity is a finite sum of rational terms,
    so the result is exact. Irrational cases are refused, not rounded: ``geometric``
    (:math:`(\prod_t\rho_t)^{1/\ell}`) and logistic hazards (:math:`\exp`) stay in
    :func:`async_gradient` (float64; it agrees with this function to about :math:`10^{-12}`
    relative on the same rational hazards, the rounding of float64 sums over the support).

    Parameters
    ----------
    hazard : sequence of Fraction (M,)
        The target's hazards :math:`h_\theta(t)`, last entry 1.
    behaviours : sequence of sequences of Fraction (S + 1, M)
        ``behaviours[s]``: the hazards of the behaviour of a sample :math:`s` versions stale;
        ``behaviours[0]`` must equal ``hazard``. :math:`S` must reach :math:`\lceil M/\Delta\rceil`.
    features : array_like of int or Fraction (M, d)
        :math:`\phi(t)` (the identity: the tabular policy).
    quality : sequence of Fraction (M,)
    slots, batch : int
    eta : int, optional
    correction : str
        One of :data:`EXACT_CORRECTIONS`.
    penalty, baseline, cap, low, high : Fraction or int
    mask_ipw : bool
    ipw_clip : Fraction, optional
        As in :func:`async_gradient`.

    Returns
    -------
    GradientMoments
        Exact.

    Examples
    --------
    >>> from refimpl.learning import policy_gradient
    >>> from fractions import Fraction as F
    >>> h = [F(1, 2), F(1, 2), F(1)]
    >>> stale = [h, [F(1, 3), F(1, 2), F(1)], [F(1, 4), F(1, 2), F(1)], [F(1, 5), F(1, 2), F(1)]]
    >>> eye = np.eye(3, dtype=int).tolist()
    >>> Q = [F(0), F(1, 2), F(1)]
    >>> g = async_gradient_exact(h, stale, eye, Q, slots=2, batch=2, correction="sequence_is")
    >>> on = policy_gradient(hazard_length_pmf(h), token_scores(h, eye).sum(axis=1), Q).mean
    >>> [a / b for a, b in zip(g.mean, on) if b]  # the direction of ∇J, exactly
    [Fraction(28, 31), Fraction(28, 31)]
    """
    if correction not in EXACT_CORRECTIONS:
        raise invalid(
            "correction",
            f"be one of {EXACT_CORRECTIONS} (geometric's l-th root is irrational in general)",
            correction,
            "Use async_gradient (float64) for geometric.",
        )
    _check_mask_ipw(mask_ipw, ipw_clip, eta)
    params = (penalty, baseline, cap, low, high) + (() if ipw_clip is None else (ipw_clip,))
    h, phi, q, rows, pmf, step, s_need = _exact_inputs(
        hazard, behaviours, features, quality, params, slots=slots, batch=batch, eta=eta
    )
    m = h.size
    cap_, low_, high_ = Fraction(cap), Fraction(low), Fraction(high)
    tok = token_scores(list(h), phi)  # (M, M, d) exact
    d = phi.shape[1]

    def probs(hz: Any, ell: int) -> list[Fraction]:
        return [1 - hz[t] for t in range(ell - 1)] + [hz[ell - 1]]

    zero = Fraction(0)

    def keep_m(ell: int, mm: int) -> Fraction:
        return _exact_keep(ell, step, mm) if mm >= 0 else zero

    laws: list[list[Fraction]] = []
    scores: list[Any] = []
    for s_ in range(s_need + 1):
        if eta is not None and s_ > eta:
            break
        beh = list(rows[s_][0])
        p_b = hazard_length_pmf(beh)
        law_s = [p_b[ell - 1] * (keep_m(ell, s_) - keep_m(ell, s_ - 1)) for ell in range(1, m + 1)]
        if not any(x > 0 for x in law_s):
            continue
        g_s = np.empty((m, d), dtype=object)
        for ell in range(1, m + 1):
            tw, sw = _exact_ratio_weights(
                probs(list(h), ell), probs(beh, ell), correction, cap_, low_, high_
            )
            for c in range(d):
                col = [tok[ell - 1, t, c] for t in range(ell)]
                if tw is None:
                    g_s[ell - 1, c] = sw * sum(col, zero)
                else:
                    g_s[ell - 1, c] = sum((w * x for w, x in zip(tw, col, strict=True)), zero)
        laws.append(law_s)
        scores.append(g_s)
    total = sum((x for row in laws for x in row), zero)
    law = np.array([[x / total for x in row] for row in laws], dtype=object)
    g = np.stack(scores)
    if mask_ipw:
        assert eta is not None
        kappa = Fraction(batch) * expected_length(pmf) / (slots * step)
        w = [kappa / keep_m(ell, eta) if keep_m(ell, eta) > 0 else zero for ell in range(1, m + 1)]
        if ipw_clip is not None:
            w = [min(x, Fraction(ipw_clip)) for x in w]
        g = g * np.array(w, dtype=object)[None, :, None]
    return gradient_moments(law, g, list(q), penalty=penalty, baseline=baseline)
