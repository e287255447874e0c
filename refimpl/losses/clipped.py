r"""Token-level trust-region surrogates: PPO-clip (clip-higher, dual-clip), CISPO, SAPO, DPPO.

Each function returns :class:`~refimpl.losses.LossTerms`: the per-token loss (minimised; 0 at
padding) and ``grad = ∂(Σ c·loss)/∂logp`` with the cotangent ``c`` (the padding mask by default).
``logp_old`` is the policy the ratio is taken against (old, proximal or rollout): no gradient.

**Ratio and clamp.** :math:`\rho = \exp(\log\pi - \log\pi_{\text{old}})`. With
``log_ratio_clamp=c`` the log-ratio is clipped to :math:`[-c, c]` *before* ``exp`` (verl 0.9.1 in
``compute_policy_loss_vanilla``, ``_dppo_tv``, ``_dppo_kl``, ``_sapo`` and ``_cispo``; SkyRL 0.3.0
through ``safe_exp_delta``; OpenRLHF 0.11.2 in ``PolicyLoss``: all with :math:`c = 20`; AReaL 1.0.4
and TRL 1.16.0 do not clamp), and the gradient of the ratio is zero where :math:`|\log\rho| > c`.
Without a clamp the ratio is exact; a real token whose loss overflows float64 is refused (clipped
branches never evaluate the overflowing ratio into the result).

**Kinks** (a ratio exactly on a clip bound): the gradient returned is the one torch autograd
gives for the frameworks' formula: ``torch.clamp`` passes the gradient on its closed interval,
and ``torch.maximum``/``torch.minimum`` (``torch.max``/``torch.min`` of two tensors) give half of
it to each of two tied arguments.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import as_real, invalid, require_entries
from refimpl.losses._common import LossTerms, as_choice, masked
from refimpl.losses.policy_gradient import (
    _ratio_inputs,
    _require_finite,
    _times,
    _vjp,
    _where_passes,
)

__all__ = ["cispo_loss", "dppo_loss", "ppo_clip_loss", "sapo_loss"]

Array = NDArray[np.float64]

_OVERFLOW_FIX = (
    "Pass log_ratio_clamp= (verl, SkyRL and OpenRLHF clip the log-ratio at 20), or dual_clip= to "
    "bound the loss of negative advantages."
)


def _eps(eps_low: Any, eps_high: Any) -> tuple[float, float]:
    """Validated ``(eps_low, eps_high)``: ``0 <= eps_low < 1``, ``eps_high >= 0`` (default low)."""
    low = as_real(
        eps_low,
        name="eps_low",
        low=0.0,
        high=1.0,
        high_open=True,
        meaning="the ratio is clipped below at 1 - eps_low > 0",
    )
    if eps_high is None:
        return low, low
    high = as_real(eps_high, name="eps_high", low=0.0, meaning="upper clip at 1 + eps_high")
    return low, high


def _tie_select(
    first: Array, second: Array, d_first: Array, d_second: Array, *, keep: str
) -> Array:
    """Gradient of ``max`` (keep="max") or ``min`` of two branches with torch's tie rule (halves)."""
    win = first > second if keep == "max" else first < second
    lose = first < second if keep == "max" else first > second
    with np.errstate(over="ignore", invalid="ignore"):
        tie = 0.5 * d_first + 0.5 * d_second
    return np.asarray(np.where(win, d_first, np.where(lose, d_second, tie)), dtype=np.float64)


def ppo_clip_loss(
    logp: ArrayLike,
    logp_old: ArrayLike,
    advantages: ArrayLike,
    *,
    eps_low: float = 0.2,
    eps_high: float | None = None,
    dual_clip: float | None = None,
    log_ratio_clamp: float | None = None,
    mask: ArrayLike | None = None,
    cotangent: ArrayLike | None = None,
) -> LossTerms:
    r"""The PPO clipped surrogate, with clip-higher and optional dual-clip, per token.

    .. math::

        \ell_t = \max\bigl(-A_t\rho_t,\; -A_t\operatorname{clip}(\rho_t, 1-\varepsilon_{\text{low}},
        1+\varepsilon_{\text{high}})\bigr), \qquad
        \ell_t^{\text{dual}} = \min(\ell_t,\, -c A_t) \ \text{ where } A_t < 0 .

    The gradient is piecewise: :math:`-A_t\rho_t` where the unclipped branch is active
    (:math:`A > 0, \rho \le 1+\varepsilon_{\text{high}}` or :math:`A < 0, \rho \ge
    1-\varepsilon_{\text{low}}`), and 0 where the clip or the dual-clip is active
    (:math:`A > 0, \rho > 1+\varepsilon_{\text{high}}`; :math:`A < 0, \rho < 1-\varepsilon_{\text{low}}`;
    :math:`A < 0, \rho > c`). For :math:`A < 0` the dual-clipped loss is
    :math:`|A|\operatorname{clip}(\rho, 1-\varepsilon_{\text{low}}, c) \le -cA`.

    Parameters
    ----------
    logp : array_like, shape (B, T)
        Current log-probabilities; the gradient is with respect to them.
    logp_old : array_like, shape (B, T)
        Log-probabilities the ratio is taken against (π_old, or AReaL's proximal policy).
    advantages : array_like, shape (B,) or (B, T)
        Per-sequence or per-token advantages.
    eps_low : float
        Lower clip ``0 <= eps_low < 1`` (ratio clipped below at ``1 - eps_low``). Default 0.2.
    eps_high : float, optional
        Upper clip ``eps_high >= 0``; defaults to ``eps_low``. Larger than ``eps_low`` is DAPO's
        clip-higher (verl ``clip_ratio_high``, AReaL ``eps_clip_higher``, OpenRLHF
        ``clip_eps_high``, SkyRL ``eps_clip_high``, TRL ``epsilon_high``).
    dual_clip : float, optional
        ``c > 1``: dual-clip for negative advantages only (verl's ``clip_ratio_c``, AReaL's
        ``c_clip``, OpenRLHF's ``dual_clip``). Default: none.
    log_ratio_clamp : float, optional
        ``c > 0``: clip the log-ratio to ``[-c, c]`` before ``exp`` (verl, SkyRL, OpenRLHF: 20).
    mask, cotangent : array_like, shape (B, T), optional
        Padding mask and VJP weights (default: the mask).

    Returns
    -------
    LossTerms
        Per-token loss and ``grad``, both 0 at padding.

    Raises
    ------
    ValueError
        Invalid arrays; ``eps_low`` outside ``[0, 1)``; ``eps_high < 0``; ``dual_clip <= 1``;
        ``log_ratio_clamp <= 0``; a real token with ``A < 0`` in the unclipped branch whose loss
        ``|A|·ρ`` overflows float64 (no clamp, no dual-clip).

    Notes
    -----
    Kinks, as torch autograd gives them for verl's formula (``torch.clamp``, ``torch.maximum``,
    ``torch.min``, ``torch.where``): at :math:`\rho = 1\pm\varepsilon` exactly both branches of the
    max agree and carry the gradient :math:`-A\rho` (the clamp passes it at its bounds), so the full
    unclipped gradient is returned; at :math:`\rho = c` exactly (:math:`A < 0`) the dual-clip min
    is a tie and **half** of :math:`-A\rho` is returned. A token with :math:`A = 0` has loss and
    gradient 0.

    Frameworks (as read): verl 0.9.1 ``compute_policy_loss_vanilla`` always applies the dual-clip
    (``clip_ratio_c``, default 3.0) and clamps the log-ratio at 20; OpenRLHF 0.11.2 ``PolicyLoss``
    and SkyRL 0.3.0 ``ppo_policy_loss`` (``policy_loss_type="dual_clip"``) apply it to ``A < 0``
    only; AReaL 1.0.4 ``ppo_actor_loss_fn`` takes ``min(loss, c|A|)`` at every token, which equals
    this for ``A >= 0`` (the clipped loss of a positive advantage is ``<= 0 < c|A|``). TRL 1.16.0
    (``loss_type="grpo"``/``"dapo"``) has no dual-clip and no clamp.

    Claims: the gradient region by region :ref:`PS1 <ps1>`, the dual-clip bound :ref:`PS2 <ps2>`,
    the on-policy reduction :ref:`PS3 <ps3>`, the clamp :ref:`PS9 <ps9>`.

    Examples
    --------
    >>> import numpy as np
    >>> import refimpl.losses.clipped as cl
    >>> lp = np.log([[1.5, 1.0, 0.5, 5.0]])          # ratios 1.5, 1.0, 0.5, 5.0 (logp_old = 0)
    >>> adv = [[1.0, 1.0, -1.0, -1.0]]
    >>> terms = cl.ppo_clip_loss(lp, np.zeros((1, 4)), adv, eps_low=0.2, eps_high=0.28, dual_clip=3.0)
    >>> terms.loss
    array([[-1.28, -1.  ,  0.8 ,  3.  ]])
    >>> terms.grad
    array([[ 0., -1.,  0.,  0.]])
    """
    r = _ratio_inputs(logp, logp_old, advantages, mask, cotangent, log_ratio_clamp)
    e_low, e_high = _eps(eps_low, eps_high)
    c_dual = None
    if dual_clip is not None:
        c_dual = as_real(
            dual_clip, name="dual_clip", low=1.0, low_open=True, meaning="dual-clip bound -c*A"
        )
    lo, hi = 1.0 - e_low, 1.0 + e_high
    surr = _times(-r.a, r.rho)
    surr_clip = _times(-r.a, np.clip(r.rho, lo, hi))
    d_surr = _where_passes(r, surr)  # ∂(−Aρ)/∂logp = −Aρ·1[clamp passes]
    d_clip = np.where((r.rho >= lo) & (r.rho <= hi), d_surr, 0.0)
    loss = np.maximum(surr, surr_clip)
    local = _tie_select(surr, surr_clip, d_surr, d_clip, keep="max")
    if c_dual is not None:
        floor = _times(-r.a, np.full_like(r.a, c_dual))
        dual_local = _tie_select(loss, floor, local, np.zeros_like(local), keep="min")
        negative = r.a < 0
        loss = np.where(negative, np.minimum(loss, floor), loss)
        local = np.where(negative, dual_local, local)
    _require_finite(loss, r.m, r.lr, what="the loss max(-A*ratio, ...)", fix=_OVERFLOW_FIX)
    return LossTerms(masked(loss, r.m), _vjp(r.c, local, r.m))


def cispo_loss(
    logp: ArrayLike,
    logp_old: ArrayLike,
    advantages: ArrayLike,
    *,
    eps_high: float,
    eps_low: float | None = None,
    log_ratio_clamp: float | None = None,
    mask: ArrayLike | None = None,
    cotangent: ArrayLike | None = None,
) -> LossTerms:
    r"""CISPO: the policy gradient weighted by a clipped, stop-gradient importance ratio.

    .. math::

        \ell_t = -\operatorname{sg}[w_t]\,A_t \log\pi_\theta(y_t), \qquad
        \frac{\partial\ell_t}{\partial\log\pi_\theta} = -w_t A_t,

        w_t = \min(\rho_t, 1+\varepsilon_{\text{high}}) \ \text{(eps_low=None)}, \qquad
        w_t = \operatorname{clip}(\rho_t, 1-\varepsilon_{\text{low}}, 1+\varepsilon_{\text{high}}).

    Unlike PPO, a token whose ratio is clipped keeps its gradient, weighted by the bound: the clip
    never zeroes a gradient.

    Parameters
    ----------
    logp : array_like, shape (B, T)
        Current log-probabilities; the gradient is with respect to them.
    logp_old : array_like, shape (B, T)
        Log-probabilities the ratio is taken against; no gradient.
    advantages : array_like, shape (B,) or (B, T)
        Per-sequence or per-token advantages.
    eps_high : float
        Upper cap ``1 + eps_high`` of the weight, ``eps_high >= 0``. TRL's ``epsilon_high`` for
        ``loss_type="cispo"`` is the cap itself (ScaleRL's ε_max): pass ``eps_high = ε_max - 1``.
    eps_low : float, optional
        ``0 <= eps_low < 1``: also clip the weight below at ``1 - eps_low`` (verl, SkyRL). Default:
        upper cap only (the MiniMax-M1 paper, TRL).
    log_ratio_clamp : float, optional
        ``c > 0``: clip the log-ratio to ``[-c, c]`` before ``exp`` (verl, SkyRL: 20). It changes
        only the weight (which carries no gradient).
    mask, cotangent : array_like, shape (B, T), optional
        Padding mask and VJP weights (default: the mask).

    Returns
    -------
    LossTerms
        Per-token loss and ``grad``, both 0 at padding.

    Raises
    ------
    ValueError
        Invalid arrays; ``eps_high < 0``; ``eps_low`` outside ``[0, 1)``; ``log_ratio_clamp <= 0``.

    Notes
    -----
    Frameworks (as read): verl 0.9.1 ``compute_policy_loss_cispo`` clips two-sided with
    ``clip_ratio_low``/``clip_ratio_high`` and clamps the log-ratio at 20; SkyRL 0.3.0
    ``compute_policy_loss_cispo`` clips two-sided with ``cispo_eps_clip_low``/``_high`` (clamp 20);
    TRL 1.16.0 (``loss_type="cispo"``) caps above only, ``min(ρ, epsilon_high)``, without a
    clamp. All three detach the weight. The weight is bounded, so nothing overflows.

    The defaults differ by one: SkyRL's ``cispo_eps_clip_low=0.0, cispo_eps_clip_high=5.0`` is
    ``eps_low=0.0, eps_high=5.0`` here (weight ``clip(ρ, 1, 6)``: ratios below 1 are raised to 1),
    while TRL's recommended ``epsilon_high=5.0`` is the cap 5, i.e. ``eps_high=4.0`` here.

    Claims: the gradient is the clipped-weight policy gradient (and differs from it without the
    stop-gradient) :ref:`PS4 <ps4>`; at ratio 1 it is ``-A`` :ref:`PS3 <ps3>`.

    Examples
    --------
    >>> import numpy as np
    >>> import refimpl.losses.clipped as cl
    >>> lp, lq = np.log([[0.6, 0.1]]), np.log([[0.2, 0.2]])   # ratios 3 and 0.5
    >>> cl.cispo_loss(lp, lq, [1.0], eps_high=0.28).grad
    array([[-1.28, -0.5 ]])
    >>> cl.cispo_loss(lp, lq, [1.0], eps_high=0.28, eps_low=0.2).grad
    array([[-1.28, -0.8 ]])
    """
    r = _ratio_inputs(logp, logp_old, advantages, mask, cotangent, log_ratio_clamp)
    e_high = as_real(
        eps_high, name="eps_high", low=0.0, meaning="the weight is capped at 1 + eps_high"
    )
    lo = 0.0
    if eps_low is not None:
        lo = 1.0 - _eps(eps_low, e_high)[0]
    w = np.clip(r.rho, lo, 1.0 + e_high)
    local = _times(-r.a, w)
    loss = local * r.lp
    _require_finite(loss, r.m, r.lr, what="the loss -w*A*logp", fix="Check the inputs' scale.")
    return LossTerms(masked(loss, r.m), _vjp(r.c, local, r.m))


def sapo_loss(
    logp: ArrayLike,
    logp_old: ArrayLike,
    advantages: ArrayLike,
    *,
    tau_pos: float,
    tau_neg: float,
    log_ratio_clamp: float | None = None,
    mask: ArrayLike | None = None,
    cotangent: ArrayLike | None = None,
) -> LossTerms:
    r"""SAPO: a smooth sigmoid gate on the ratio in place of the hard clip.

    .. math::

        \ell_t = -A_t\,\frac{4}{\tau_t}\,\sigma\bigl(\tau_t(\rho_t - 1)\bigr), \qquad
        \frac{\partial\ell_t}{\partial\log\pi_\theta} = -4 A_t\,\sigma(x_t)\,\sigma(-x_t)\,\rho_t,
        \quad x_t = \tau_t(\rho_t - 1),

    with :math:`\tau_t = \tau_{\text{pos}}` if :math:`A_t > 0` and :math:`\tau_{\text{neg}}`
    otherwise. At :math:`\rho = 1` the gradient is :math:`-A` (the factor :math:`4/\tau` makes the
    gate's slope 1 there); far from 1 it decays like :math:`\rho e^{-\tau|\rho - 1|}`.

    Parameters
    ----------
    logp : array_like, shape (B, T)
        Current log-probabilities; the gradient is with respect to them.
    logp_old : array_like, shape (B, T)
        Log-probabilities the ratio is taken against; no gradient.
    advantages : array_like, shape (B,) or (B, T)
        Per-sequence or per-token advantages.
    tau_pos, tau_neg : float
        Gate temperatures ``> 0`` for positive and for non-positive advantages (verl's
        ``tau_pos``/``tau_neg``, defaults 1.0 and 1.05; TRL's ``sapo_temperature_pos``/``_neg``).
    log_ratio_clamp : float, optional
        ``c > 0``: clip the log-ratio to ``[-c, c]`` before ``exp`` (verl, SkyRL: 20).
    mask, cotangent : array_like, shape (B, T), optional
        Padding mask and VJP weights (default: the mask).

    Returns
    -------
    LossTerms
        Per-token loss and ``grad``, both 0 at padding.

    Raises
    ------
    ValueError
        Invalid arrays; ``tau_pos <= 0`` or ``tau_neg <= 0``; ``log_ratio_clamp <= 0``.

    Notes
    -----
    The gate and its slope are evaluated in log space (:math:`\log\sigma(x) + \log\sigma(-x) +
    \log\rho`), so huge log-ratios give a finite loss (``-4A/τ`` or 0) and a gradient that
    underflows to 0, never NaN. Frameworks (as read): verl 0.9.1 ``compute_policy_loss_sapo`` and
    SkyRL 0.3.0 ``sapo_policy_loss`` clamp the log-ratio at 20; AReaL 1.0.4 ``sapo_loss_fn`` and
    TRL 1.16.0 (``loss_type="sapo"``) do not. All four pick ``tau_pos`` only for ``A > 0``.
    Claims :ref:`PS5 <ps5>` (gradient) and :ref:`PS3 <ps3>` (ratio 1).

    Examples
    --------
    >>> import refimpl.losses.clipped as cl
    >>> terms = cl.sapo_loss([[0.0, 0.0]], [[0.0, 0.0]], [[2.0, -1.0]], tau_pos=1.0, tau_neg=1.05)
    >>> terms.grad
    array([[-2.,  1.]])
    """
    r = _ratio_inputs(logp, logp_old, advantages, mask, cotangent, log_ratio_clamp)
    t_pos = as_real(tau_pos, name="tau_pos", low=0.0, low_open=True, meaning="gate temperature")
    t_neg = as_real(tau_neg, name="tau_neg", low=0.0, low_open=True, meaning="gate temperature")
    tau = np.where(r.a > 0, t_pos, t_neg)
    with np.errstate(over="ignore", invalid="ignore"):
        x = tau * (r.rho - 1.0)
        log_sig = -np.logaddexp(0.0, -x)
        log_sig_neg = -np.logaddexp(0.0, x)
        gate = (4.0 / tau) * np.exp(log_sig)
        slope = 4.0 * np.exp(log_sig + log_sig_neg + r.log_rho)
    loss = _times(-r.a, gate)
    local = _where_passes(r, _times(-r.a, slope))
    _require_finite(loss, r.m, r.lr, what="the gated loss", fix="Check the scale of advantages.")
    return LossTerms(masked(loss, r.m), _vjp(r.c, local, r.m))


def _binary_kl(lq: Array, lp: Array) -> Array:
    """``KL(Bern(p_old) || Bern(p))`` from log-probabilities, exact (no epsilon), ``inf`` if p = 1."""
    p_old = np.exp(lq)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log1m_old = np.log(-np.expm1(lq))  # log(1 - p_old), -inf at p_old = 1
        log1m = np.log(-np.expm1(lp))
        second = np.where(lq == 0.0, 0.0, (1.0 - p_old) * (log1m_old - log1m))
        return np.asarray(p_old * (lq - lp) + second, dtype=np.float64)


def dppo_loss(
    logp: ArrayLike,
    logp_old: ArrayLike,
    advantages: ArrayLike,
    *,
    divergence: Literal["tv", "kl"] = "tv",
    delta_low: float,
    delta_high: float | None = None,
    cap: float | None = None,
    surrogate: Literal["log", "ratio"] = "log",
    log_ratio_clamp: float | None = None,
    mask: ArrayLike | None = None,
    cotangent: ArrayLike | None = None,
) -> LossTerms:
    r"""DPPO: policy gradient with a divergence trust region on the sampled token's probability.

    A token is *kept* (:math:`k_t = 1`) unless it moved out of the trust region in the direction its
    advantage pushes, with :math:`p = \pi_\theta(y_t)`, :math:`p_{\text{old}} = \pi_{\text{old}}(y_t)`:

    - ``divergence="tv"``: dropped if :math:`A > 0` and :math:`p - p_{\text{old}} > \delta_{\text{high}}`,
      or :math:`A \le 0` and :math:`p - p_{\text{old}} < -\delta_{\text{low}}`;
    - ``divergence="kl"``: dropped if :math:`A > 0`, :math:`p > p_{\text{old}}` and
      :math:`D > \delta_{\text{high}}`, or :math:`A \le 0`, :math:`p < p_{\text{old}}` and
      :math:`D > \delta_{\text{low}}`, with the binary KL
      :math:`D = p_{\text{old}}\log\frac{p_{\text{old}}}{p} +
      (1-p_{\text{old}})\log\frac{1-p_{\text{old}}}{1-p}`.

    The mask carries no gradient. The surrogate on kept tokens:

    .. math::

        \text{surrogate="log"}:\ \ell_t = -k_t A_t\operatorname{sg}[w_t]\log\pi_\theta(y_t),\
        w_t = \min(\rho_t, C);\qquad
        \text{surrogate="ratio"}:\ \ell_t = -k_t A_t \rho_t,

    with gradients :math:`-k_t A_t w_t` and :math:`-k_t A_t \rho_t`.

    Parameters
    ----------
    logp : array_like, shape (B, T)
        Current log-probabilities, ``<= 0`` at real tokens (probabilities are compared).
    logp_old : array_like, shape (B, T)
        Log-probabilities of the trust region's anchor (verl: π_old; SkyRL: the rollout policy when
        available), ``<= 0`` at real tokens; no gradient.
    advantages : array_like, shape (B,) or (B, T)
        Per-sequence or per-token advantages.
    divergence : {"tv", "kl"}
        Binary total variation (probability difference) or binary KL.
    delta_low : float
        Threshold ``>= 0`` for non-positive advantages (verl ``clip_ratio_low``, SkyRL
        ``delta_low``).
    delta_high : float, optional
        Threshold ``>= 0`` for positive advantages; defaults to ``delta_low``.
    cap : float, optional
        ``C >= 1``: truncation of the detached weight (verl's ``clip_ratio_c``); only with
        ``surrogate="log"``. Default: no truncation.
    surrogate : {"log", "ratio"}
        ``"log"``: verl 0.9.1's ``-A·sg[min(ρ, C)]·logp``; ``"ratio"``: SkyRL 0.3.0's ``-A·ρ``.
    log_ratio_clamp : float, optional
        ``c > 0``: clip the log-ratio to ``[-c, c]`` before ``exp`` (verl, SkyRL: 20). The mask
        uses the exact probabilities either way.
    mask, cotangent : array_like, shape (B, T), optional
        Padding mask and VJP weights (default: the mask).

    Returns
    -------
    LossTerms
        Per-token loss and ``grad``, both 0 at padding and at dropped tokens.

    Raises
    ------
    ValueError
        Invalid arrays; a positive log-probability at a real token; unknown ``divergence`` or
        ``surrogate``; negative thresholds; ``cap < 1`` or a cap with ``surrogate="ratio"``;
        ``log_ratio_clamp <= 0``; an overflowing loss (no cap, no clamp).

    Notes
    -----
    Frameworks (as read): verl 0.9.1 ``compute_policy_loss_dppo_tv``/``_dppo_kl`` use the "log"
    surrogate with the detached weight truncated at ``config.get("clip_ratio_c", 20.0)``, which is
    the actor's ``clip_ratio_c`` (3.0 by default in ``ActorConfig``), and test ``A > 0`` against
    ``delta_high``, every other token against ``delta_low``. SkyRL 0.3.0 ``dppo_policy_loss`` uses
    the "ratio" surrogate, untruncated, and keeps ``A = 0`` tokens (their loss is 0 anyway). Both
    add ``1e-8`` inside the second logarithm of the binary KL; refimpl computes it exactly, so a
    decision can differ only for probabilities within about ``1e-6`` of 1. At a threshold exactly,
    the token is kept (both use non-strict comparisons for keeping). Claims :ref:`PS6 <ps6>`,
    :ref:`PS3 <ps3>`.

    Examples
    --------
    >>> import numpy as np
    >>> import refimpl.losses.clipped as cl
    >>> lp, lq = np.log([[0.9, 0.5]]), np.log([[0.5, 0.5]])   # p - p_old: 0.4 and 0
    >>> terms = cl.dppo_loss(lp, lq, [1.0], delta_low=0.2)
    >>> terms.grad                                            # the first token left the region
    array([[ 0., -1.]])
    """
    r = _ratio_inputs(logp, logp_old, advantages, mask, cotangent, log_ratio_clamp)
    kind = as_choice(divergence, name="divergence", choices=("tv", "kl"))
    form = as_choice(surrogate, name="surrogate", choices=("log", "ratio"))
    d_low = as_real(delta_low, name="delta_low", low=0.0, meaning="trust-region threshold")
    d_high = d_low
    if delta_high is not None:
        d_high = as_real(delta_high, name="delta_high", low=0.0, meaning="trust-region threshold")
    cap_value = _dppo_cap(cap, form)
    for arr, name in ((r.lp, "logp"), (r.lq, "logp_old")):
        require_entries(
            arr,
            (r.m > 0) & (arr > 0.0),
            name=name,
            rule="be <= 0 at real tokens (log-probabilities: DPPO compares probabilities)",
            fix="; pass log-probabilities of the sampled tokens.",
        )
    keep = _dppo_keep(r.lp, r.lq, r.a, kind, d_low, d_high)
    if form == "ratio":
        loss = np.where(keep, _times(-r.a, r.rho), 0.0)
        local = np.where(keep, _where_passes(r, loss), 0.0)
    else:
        w = np.minimum(r.rho, cap_value)
        local = np.where(keep, _times(-r.a, w), 0.0)
        loss = _times(local, r.lp)
    fix = "Pass log_ratio_clamp= (verl and SkyRL clip the log-ratio at 20) or cap=."
    _require_finite(loss, r.m, r.lr, what="the DPPO loss", fix=fix)
    return LossTerms(masked(loss, r.m), _vjp(r.c, local, r.m))


def _dppo_cap(cap: Any, form: str) -> float:
    if cap is None:
        return float("inf")
    if form == "ratio":
        raise invalid(
            "cap",
            'be None with surrogate="ratio" (SkyRL does not truncate its ratio)',
            cap,
            'Pass surrogate="log" to truncate the detached weight, or drop cap=.',
        )
    return as_real(cap, name="cap", low=1.0, meaning="a truncated weight keeps ratio 1")


def _dppo_keep(
    lp: Array, lq: Array, a: Array, kind: str, d_low: float, d_high: float
) -> NDArray[np.bool_]:
    """DPPO's keep mask (True = the token stays in the trust region)."""
    p, p_old = np.exp(lp), np.exp(lq)
    diff = p - p_old
    if kind == "tv":
        up_ok, down_ok = diff <= d_high, diff >= -d_low
    else:
        kl = _binary_kl(lq, lp)
        up_ok = (kl <= d_high) | (p <= p_old)
        down_ok = (kl <= d_low) | (p >= p_old)
    return np.asarray(np.where(a > 0, up_ok, down_ok), dtype=bool)
