r"""The table of loss specs: one :class:`~refimpl.testing._specs_losses.LossDesc` per loss function.

Each entry names the reference in :mod:`refimpl.losses`, the hyperparameters a candidate receives
(drawn), the conventions frameworks differ by (with ``who=`` read from their pinned sources), and
the rounding-error model of the loss and of its gradient, derived from the operation (module
docstring of ``_specs_losses``). Notation: :math:`d` the log-ratio as the candidate computes it
(after a declared clamp), :math:`\delta = |d| + 1` its absolute rounding error plus ``exp``'s in
units of :math:`u`, :math:`\ell` the loss, :math:`g` the gradient, :math:`c` the cotangent:

=====================  ==========================================  =================================
loss                   condition of the loss                       condition of the gradient
=====================  ==========================================  =================================
PPO-clip, IS-PG        :math:`|\partial\ell/\partial d|(\delta+1) + 2|\ell|`   :math:`|g|(\delta + 3)`
CISPO, DPPO (log)      :math:`|A\log\pi| \rho\,[\text{unclipped}](\delta+1) + 3|\ell|`   :math:`|g|(\delta+3)`
SAPO                   :math:`|\partial\ell/\partial d|(\delta+2) + 4|A|\sigma\bar\sigma|\rho-1| + 3|\ell|`   see ``_sapo``
GSPO, GMPO             the sequence mean's :math:`K_b` in place of :math:`\delta`   summed over the row
KL k1/abs/k2/k3        :math:`|\partial k/\partial d|\,|d| + e^{-d}(2) + \dots`   see ``_kl``
token log-probs        :math:`|y_x| + \max|y| + \log V + |\ell| + 3`   :math:`\frac{|c|}{T}\mu_j(\dots)`
=====================  ==========================================  =================================
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import strategies as st
from numpy.typing import NDArray

from refimpl.testing._engine import Convention, Conventions, Spec
from refimpl.testing._specs_losses import (
    LossDesc,
    Parts,
    Terms,
    ratio_error,
    resolve,
    row_error,
    shift_ratio,
)
from refimpl.testing._specs_losses_advantages_more import more_advantage_specs
from refimpl.testing._specs_losses_advantages_normalized import normalized_advantage_specs
from refimpl.testing._specs_losses_advantages_tokens import token_advantage_specs
from refimpl.testing._specs_losses_band_masked import band_masked_specs
from refimpl.testing._specs_losses_batch_mean import batch_mean_spec
from refimpl.testing._specs_losses_checks import loss_spec
from refimpl.testing._specs_losses_collision import sum_pi_squared_spec
from refimpl.testing._specs_losses_decoupled import decoupled_specs
from refimpl.testing._specs_losses_distillation import distillation_specs
from refimpl.testing._specs_losses_divergence_gate import divergence_gate_specs
from refimpl.testing._specs_losses_entropy import entropy_spec
from refimpl.testing._specs_losses_entropy_mask import entropy_mask_specs
from refimpl.testing._specs_losses_gae import gae_spec
from refimpl.testing._specs_losses_kl import kl_descs
from refimpl.testing._specs_losses_kl_control import adaptive_kl_spec
from refimpl.testing._specs_losses_kl_reward import kl_reward_spec
from refimpl.testing._specs_losses_logprobs import logprobs_spec
from refimpl.testing._specs_losses_optimal_advantage import optimal_advantage_specs
from refimpl.testing._specs_losses_proximal import proximal_logprobs_spec
from refimpl.testing._specs_losses_rejection_mask import rejection_mask_specs
from refimpl.testing._specs_losses_rloo_kl import rloo_kl_spec
from refimpl.testing._specs_losses_sequence_gamma import vespo_specs
from refimpl.testing._specs_losses_sequence_soft import sequence_soft_specs
from refimpl.testing._specs_losses_stats import aggregation_spec
from refimpl.testing._specs_losses_stats_advantages import advantage_specs
from refimpl.testing._specs_losses_stats_rejection import rejection_specs
from refimpl.testing._specs_losses_trl_more import sequence_product_specs
from refimpl.testing.tolerances import summation_factor

Array = NDArray[np.float64]

# ---------------------------------------------------------------------------------------------
# conventions of the loss families
# ---------------------------------------------------------------------------------------------

LOG_RATIO_CLAMP = Convention(
    "log_ratio_clamp",
    None,
    (None,),
    "c > 0: the log-ratio is clipped to [−c, c] before exp (no gradient beyond it)",
    number=True,
    who="20: verl 0.9.1 compute_policy_loss_vanilla/_cispo/_sapo/_dppo_*, SkyRL 0.3.0 "
    "safe_exp_delta, OpenRLHF 0.11.2 PolicyLoss; none: AReaL 1.0.4, TRL 1.16.0",
)
DUAL_CLIP = Convention(
    "dual_clip",
    "drawn",
    ("drawn", 3.0, None),
    "'drawn': the candidate receives dual_clip= (None or c > 1); a number c: it always applies "
    "dual-clip with its own constant c and receives no dual_clip=; None: it has no dual clip "
    "and receives no dual_clip=",
    number=True,
    who="3.0: verl 0.9.1 compute_policy_loss_vanilla (clip_ratio_c, always applied), SkyRL 0.3.0 "
    "ppo_policy_loss with policy_loss_type='dual_clip'; drawn: AReaL c_clip, OpenRLHF dual_clip "
    "(both off by default); None: TRL 1.16.0 AsyncGRPOTrainer.compute_loss",
)
LOG_RATIO_CAP = Convention(
    "log_ratio_cap",
    None,
    (None,),
    "c > 0: the sequence log-ratio is clamped from above at c before exp",
    number=True,
    who="10: verl 0.9.1 compute_policy_loss_gspo, SkyRL 0.3.0 gspo_policy_loss",
)
DIVERGENCE = Convention(
    "divergence",
    "tv",
    ("tv", "kl"),
    "DPPO's trust region: binary total variation p − p_old, or binary KL",
    who="tv: verl 0.9.1 compute_policy_loss_dppo_tv; kl: compute_policy_loss_dppo_kl",
)
SURROGATE = Convention(
    "surrogate",
    "log",
    ("log", "ratio"),
    "DPPO's surrogate on kept tokens: −A·sg[min(ρ, C)]·logp, or −A·ρ",
    who="log: verl 0.9.1; ratio: SkyRL 0.3.0 dppo_policy_loss",
)


def _floats(low: float, high: float) -> st.SearchStrategy[float]:
    return st.floats(low, high, allow_nan=False, allow_infinity=False, allow_subnormal=False)


def _clamp(conv: Conventions) -> float:
    c = conv.get("log_ratio_clamp")
    return math.inf if c is None else float(c)


def _d(p: Parts, conv: Conventions, anchor: str = "logp_old") -> Array:
    """The log-ratio as the candidate computes it (after the declared clamp), 0 at padding."""
    x, y = np.asarray(p.arrays["logp"]), np.asarray(p.arrays[anchor])
    d = np.where(p.mask > 0, x - y, 0.0)
    return np.asarray(np.clip(d, -_clamp(conv), _clamp(conv)), dtype=np.float64)


def _local(desc: str, p: Parts, conv: Conventions) -> Array:
    """∂ℓ_t/∂logp_t of a token-level loss: its VJP with the mask as cotangent."""
    _, grad = TERMS[desc](p._replace(cotangent=p.mask), conv)
    return grad


def _adv(p: Parts) -> Array:
    return np.where(p.mask > 0, np.asarray(p.arrays["advantages"], dtype=np.float64), 0.0)


def _ref(name: str, p: Parts, arrays: tuple[str, ...], **kw: Any) -> Terms:
    loss, grad = resolve(name)(
        *(p.arrays[a] for a in arrays), mask=p.mask, cotangent=p.cotangent, **kw
    )
    return np.asarray(loss), np.asarray(grad)


RATIO = ("logp", "logp_old", "advantages")

# ---------------------------------------------------------------------------------------------
# token-level surrogates
# ---------------------------------------------------------------------------------------------


def _dual(p: Parts, conv: Conventions) -> Any:
    return p.params.get("dual_clip") if conv["dual_clip"] == "drawn" else conv["dual_clip"]


def _ppo_terms(p: Parts, conv: Conventions) -> Terms:
    kw = {k: v for k, v in p.params.items() if k in ("eps_low", "eps_high")}
    return _ref(
        "losses.clipped.ppo_clip_loss",
        p,
        RATIO,
        **kw,
        dual_clip=_dual(p, conv),
        log_ratio_clamp=conv["log_ratio_clamp"],
    )


_OPEN = {"eps_low": 1.0 - 2.0**-40, "eps_high": 1e300}


def _ppo_open(p: Parts, conv: Conventions) -> Terms:
    return _ref(
        "losses.clipped.ppo_clip_loss", p, RATIO, **_OPEN, log_ratio_clamp=conv["log_ratio_clamp"]
    )


def _ppo_branches(p: Parts, conv: Conventions) -> list[tuple[Array, Array]]:
    """(−Aρ, −A·clip(ρ)) and, with dual-clip and A < 0, (the clipped loss, −A·c)."""
    a = _adv(p)
    with np.errstate(over="ignore", invalid="ignore"):
        rho = np.exp(_d(p, conv))
        low = float(p.params.get("eps_low", 0.2))
        high = low if p.params.get("eps_high") is None else float(p.params["eps_high"])
        one, other = -a * rho, -a * np.clip(rho, 1.0 - low, 1.0 + high)
    inside = (rho > 1.0 - low) & (rho < 1.0 + high)  # there both branches carry the gradient
    pairs = [(one, np.where(inside, np.inf, other))]
    dual = _dual(p, conv)
    if dual is not None:
        floor = np.where(a < 0, -a * dual, np.inf)
        pairs.append((np.maximum(one, other), floor))
    return pairs


def _seq_branches(p: Parts, conv: Conventions) -> list[tuple[Array, Array]]:
    """(−A s, −A·clip(s)) with s the sequence ratio."""
    a = _adv(p)
    s, _, _ = _sequence_ratio(p, conv)
    low = float(p.params["eps_low"])
    high = low if p.params.get("eps_high") is None else float(p.params["eps_high"])
    inside = (s > 1.0 - low) & (s < 1.0 + high)
    with np.errstate(over="ignore", invalid="ignore"):
        return [(-a * s, np.where(inside, np.inf, -a * np.clip(s, 1.0 - low, 1.0 + high)))]


def _seq_open(name: str) -> Any:
    def terms(p: Parts, conv: Conventions) -> Terms:
        return _ref(
            f"losses.sequence.{name}", p, RATIO, **_OPEN, log_ratio_cap=conv["log_ratio_cap"]
        )

    return terms


def _ratio_condition(name: str) -> Any:
    """ℓ a function of the ratio (PPO, IS-PG): |∂ℓ/∂d|·(|d| + 2) + 2|ℓ|; the gradient |g|(|d| + 4)."""

    def condition(p: Parts, conv: Conventions, loss: Array, grad: Array) -> Terms:
        k = ratio_error(p, conv)  # |d| + 3
        sens = np.abs(_local(name, p, conv))
        return sens * (k - 1.0) + 2.0 * np.abs(loss), np.abs(grad) * (k + 1.0)

    return condition


def _ppo_params(conv: Conventions) -> st.SearchStrategy[dict[str, Any]]:
    eps = st.one_of(st.sampled_from([0.2, 0.1, 0.28]), _floats(0.01, 0.6))
    high = st.one_of(st.none(), st.sampled_from([0.28, 0.2]), _floats(0.01, 1.0))
    dual = st.one_of(st.none(), st.just(3.0), _floats(1.1, 10.0))
    if conv["dual_clip"] != "drawn":
        return st.builds(lambda e, h: {"eps_low": e, "eps_high": h}, eps, high)
    return st.builds(lambda e, h, c: {"eps_low": e, "eps_high": h, "dual_clip": c}, eps, high, dual)


def _ppo_edges(params: dict[str, Any], conv: Conventions) -> list[float]:
    low = float(params.get("eps_low", 0.2))
    high = low if params.get("eps_high") is None else float(params["eps_high"])
    out = [math.log1p(-low), math.log1p(high)]
    dual = params.get("dual_clip") if conv["dual_clip"] == "drawn" else conv["dual_clip"]
    if dual is not None:
        out.append(math.log(dual))
    if conv["log_ratio_clamp"] is not None:
        out += [conv["log_ratio_clamp"], -conv["log_ratio_clamp"]]
    return out


CISPO_LOWER = Convention(
    "lower_bound",
    "drawn",
    ("drawn", None),
    "'drawn': the candidate receives eps_low= (None or a lower clip of the weight at 1 − eps_low); "
    "None: the weight has no lower bound and the candidate receives no eps_low=",
    who="None: TRL 1.16.0 GRPOTrainer._compute_loss with loss_type='cispo' (clamp(coef_1, "
    "max=epsilon_high) only); drawn: verl 0.9.1 compute_policy_loss_cispo, SkyRL 0.3.0 "
    "compute_policy_loss_cispo (cispo_eps_clip_low)",
)


def _cispo_params(conv: Conventions) -> st.SearchStrategy[dict[str, Any]]:
    high = st.one_of(st.sampled_from([0.28, 0.2, 4.0]), _floats(0.0, 5.0))
    if conv["lower_bound"] is None:
        return st.builds(lambda h: {"eps_high": h}, high)
    low = st.one_of(st.none(), st.just(0.2), _floats(0.0, 0.9))
    return st.builds(lambda h, lo: {"eps_high": h, "eps_low": lo}, high, low)


def _cispo_terms(p: Parts, conv: Conventions) -> Terms:
    return _ref(
        "losses.clipped.cispo_loss", p, RATIO, **p.params, log_ratio_clamp=conv["log_ratio_clamp"]
    )


def _weighted_log_condition(
    p: Parts, conv: Conventions, loss: Array, grad: Array, lo: float, hi: float
) -> Terms:
    """ℓ = −A·sg[w]·logp with w = clip(ρ, lo, hi): the weight's rounding where it is the ratio."""
    d = _d(p, conv)
    k = ratio_error(p, conv)
    with np.errstate(over="ignore"):
        rho = np.exp(d)
    live = (rho >= lo) & (rho <= hi)
    lp = np.asarray(p.arrays["logp"], dtype=np.float64)
    sens = np.abs(_adv(p) * np.where(p.mask > 0, lp, 0.0)) * np.where(live, rho, 0.0)
    return sens * (k + 1.0) + 3.0 * np.abs(loss), np.abs(grad) * (k + 3.0)


def _cispo_condition(p: Parts, conv: Conventions, loss: Array, grad: Array) -> Terms:
    lo = 0.0 if p.params.get("eps_low") is None else 1.0 - p.params["eps_low"]
    return _weighted_log_condition(p, conv, loss, grad, lo, 1.0 + p.params["eps_high"])


def _cispo_edges(params: dict[str, Any], conv: Conventions) -> list[float]:
    out = [math.log1p(params.get("eps_high", 0.28))]
    if params.get("eps_low") is not None and params["eps_low"] < 1.0:
        out.append(math.log1p(-params["eps_low"]))
    return out


def _sapo_params(conv: Conventions) -> st.SearchStrategy[dict[str, Any]]:
    tau = st.one_of(st.sampled_from([1.0, 1.05, 0.5, 10.0]), _floats(0.1, 10.0))
    return st.builds(lambda a, b: {"tau_pos": a, "tau_neg": b}, tau, tau)


def _sapo_terms(p: Parts, conv: Conventions) -> Terms:
    return _ref(
        "losses.clipped.sapo_loss", p, RATIO, **p.params, log_ratio_clamp=conv["log_ratio_clamp"]
    )


def _sapo_condition(p: Parts, conv: Conventions, loss: Array, grad: Array) -> Terms:
    a = _adv(p)
    d = _d(p, conv)
    k = ratio_error(p, conv)
    tau = np.where(a > 0, p.params["tau_pos"], p.params["tau_neg"])
    with np.errstate(over="ignore", invalid="ignore"):
        rho = np.exp(d)
        x = tau * (rho - 1.0)
        sig = np.exp(-np.logaddexp(0.0, -x))
        bell = np.exp(-np.logaddexp(0.0, -x) - np.logaddexp(0.0, x))  # σ(1 − σ)
        sens = 4.0 * np.abs(a) * bell * rho
        cv = sens * (k + 2.0) + 4.0 * np.abs(a) * bell * np.abs(rho - 1.0) + 3.0 * np.abs(loss)
        # σ(1−σ): relative error |1 − 2σ|·|δx| with δx = τρ·K + |x|; 1 − σ rounds absolutely
        spread = np.abs(1.0 - 2.0 * sig) * (tau * rho * (k + 2.0) + np.abs(x))
        cg = np.abs(grad) * (spread + k + 5.0) + 8.0 * np.abs(p.cotangent * a) * sig * rho
    return np.where(p.mask > 0, cv, 0.0), np.where(p.mask > 0, cg, 0.0)


def _dppo_params(conv: Conventions) -> st.SearchStrategy[dict[str, Any]]:
    if conv["divergence"] == "tv":
        delta = st.one_of(st.sampled_from([0.2, 0.1]), _floats(0.001, 0.6))
    else:
        delta = st.one_of(st.sampled_from([0.05, 0.01]), _floats(0.0005, 0.5))
    cap = (
        st.none()
        if conv["surrogate"] == "ratio"
        else st.one_of(st.none(), st.just(20.0), _floats(1.0, 50.0))
    )
    return st.builds(
        lambda lo, hi, c: {"delta_low": lo, "delta_high": hi, "cap": c},
        delta,
        st.one_of(st.none(), delta),
        cap,
    )


def _dppo_terms(p: Parts, conv: Conventions) -> Terms:
    return _ref(
        "losses.clipped.dppo_loss",
        p,
        RATIO,
        **p.params,
        divergence=conv["divergence"],
        surrogate=conv["surrogate"],
        log_ratio_clamp=conv["log_ratio_clamp"],
    )


def _dppo_condition(p: Parts, conv: Conventions, loss: Array, grad: Array) -> Terms:
    if conv["surrogate"] == "ratio":
        out: Terms = _ratio_condition("dppo")(p, conv, loss, grad)
        return out
    cap = p.params.get("cap")
    return _weighted_log_condition(p, conv, loss, grad, 0.0, math.inf if cap is None else cap)


def _iwpg_params(conv: Conventions) -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(st.none(), st.just(2.0), _floats(1.0, 10.0)).map(lambda c: {"cap": c})


def _iwpg_terms(p: Parts, conv: Conventions) -> Terms:
    return _ref(
        "losses.policy_gradient.importance_weighted_pg_loss",
        p,
        RATIO,
        **p.params,
        log_ratio_clamp=conv["log_ratio_clamp"],
    )


def _iwpg_condition(p: Parts, conv: Conventions, loss: Array, grad: Array) -> Terms:
    cap = p.params.get("cap")
    if cap is None:
        out: Terms = _ratio_condition("importance_weighted_pg")(p, conv, loss, grad)
        return out
    return _weighted_log_condition(p, conv, loss, grad, 0.0, cap)


def _penalty_terms(p: Parts, conv: Conventions) -> Terms:
    return _ref("losses.policy_gradient.log_ratio_penalty_loss", p, RATIO, **p.params)


def _penalty_condition(p: Parts, conv: Conventions, loss: Array, grad: Array) -> Terms:
    a, d = _adv(p), _d(p, conv)
    lp = np.where(p.mask > 0, np.asarray(p.arrays["logp"], dtype=np.float64), 0.0)
    tau = p.params["tau"]
    derr = ratio_error(p, conv) - 3.0
    cv = 2.0 * np.abs(a * lp) + tau * np.abs(d) * (derr + 2.0 * np.abs(d)) + np.abs(loss)
    cg = np.abs(p.cotangent) * (np.abs(a) + 2.0 * tau * (derr + np.abs(d))) + np.abs(grad)
    return cv, cg


def _reinforce_terms(p: Parts, conv: Conventions) -> Terms:
    return _ref("losses.policy_gradient.reinforce_loss", p, ("logp", "advantages"))


def _reinforce_condition(p: Parts, conv: Conventions, loss: Array, grad: Array) -> Terms:
    extra: Any = 0.0
    if conv["compute_dtype"] is not None:
        extra = np.abs(_adv(p) * np.where(p.mask > 0, np.asarray(p.arrays["logp"]), 0.0))
    return 2.0 * np.abs(loss) + extra, 2.0 * np.abs(grad)


# ---------------------------------------------------------------------------------------------
# sequence-level surrogates
# ---------------------------------------------------------------------------------------------


def _seq_params(gmpo: bool) -> Any:
    def params(conv: Conventions) -> st.SearchStrategy[dict[str, Any]]:
        if gmpo:
            eps = st.one_of(st.sampled_from([0.4, 0.2]), _floats(0.01, 1.5))
        else:
            eps = st.one_of(st.sampled_from([3e-4, 0.2]), _floats(0.0, 0.6))
        high = st.one_of(st.none(), st.sampled_from([4e-4, 0.28]), _floats(0.0, 1.0))
        return st.builds(lambda e, h: {"eps_low": e, "eps_high": h}, eps, high)

    return params


def _seq_terms(name: str, cap: bool) -> Any:
    def terms(p: Parts, conv: Conventions) -> Terms:
        kw = {"log_ratio_cap": conv["log_ratio_cap"]} if cap else {}
        return _ref(f"losses.sequence.{name}", p, RATIO, **p.params, **kw)

    return terms


def _sequence_ratio(p: Parts, conv: Conventions) -> tuple[Array, Array, Array]:
    """(s_b per token, K_b per token, L_b per token) of the geometric-mean ratio."""
    m = p.mask
    k = ratio_error(p, conv)
    kb = row_error(p, conv, k) + 3.0
    lengths = np.maximum(m.sum(axis=1, keepdims=True), 1.0)
    mean = (_d(p, conv) * m).sum(axis=1, keepdims=True) / lengths
    cap = conv.get("log_ratio_cap")
    if cap is not None:
        mean = np.minimum(mean, cap)
    with np.errstate(over="ignore"):
        s = np.broadcast_to(np.exp(mean), m.shape)
    return np.asarray(s), kb, np.broadcast_to(lengths, m.shape)


def _seq_condition(token: bool) -> Any:
    def condition(p: Parts, conv: Conventions, loss: Array, grad: Array) -> Terms:
        s, kb, lengths = _sequence_ratio(p, conv)
        a = _adv(p)
        lo = 1.0 - p.params["eps_low"]
        high = p.params["eps_high"] if p.params["eps_high"] is not None else p.params["eps_low"]
        live = ((a > 0) & (s <= 1.0 + high)) | ((a < 0) & (s >= lo))
        with np.errstate(invalid="ignore", over="ignore"):
            cv = np.where(live, np.abs(a) * s * kb, 0.0) + 2.0 * np.abs(loss)
            if token:
                return cv, np.abs(grad) * (kb + 4.0)
            weight = np.abs(a * p.cotangent) * live
            row = np.where(weight > 0, weight * s, 0.0).sum(axis=1, keepdims=True) / lengths[:, :1]
            factor = summation_factor(int(p.mask.shape[1]))
            cg = np.broadcast_to(row, p.mask.shape) * (kb + factor + 3.0) * p.mask
        return np.where(p.mask > 0, cv, 0.0), cg + np.abs(grad)

    return condition


def _gmpo_condition(p: Parts, conv: Conventions, loss: Array, grad: Array) -> Terms:
    m = p.mask
    k = ratio_error(p, conv)
    kb = row_error(p, conv, k) + 3.0
    lengths = np.maximum(m.sum(axis=1, keepdims=True), 1.0)
    factor = np.array([summation_factor(int(n)) for n in m.sum(axis=1)])[:, None]
    a = _adv(p)
    abs_a = np.abs(a).sum(axis=1, keepdims=True) / lengths
    r = np.abs(loss) / np.maximum(np.abs(a.sum(axis=1, keepdims=True) / lengths), 1e-300)
    r = np.where(np.abs(loss) > 0, r, 1.0) * m
    with np.errstate(invalid="ignore", over="ignore"):
        cv = np.abs(loss) * (kb + 3.0) + r * (factor + 1.0) * abs_a
        csum = np.abs(p.cotangent).sum(axis=1, keepdims=True) / lengths
        cg = r * csum * abs_a * (kb + 2.0 * factor + 4.0) + np.abs(grad)
    return np.where(m > 0, cv, 0.0), np.where(m > 0, cg, 0.0)


def _seq_edges(log_space: bool) -> Any:
    def edges(params: dict[str, Any], conv: Conventions) -> list[float]:
        low = float(params.get("eps_low", 0.2))
        high = low if params.get("eps_high") is None else float(params["eps_high"])
        if log_space:
            return [-low, high]
        out = [math.log1p(-low) if low < 1.0 else -30.0, math.log1p(high)]
        if conv.get("log_ratio_cap") is not None:
            out.append(conv["log_ratio_cap"])
        return out

    return edges


def _clipped_always(conv: Conventions) -> str | None:
    return None


def _clamp_only(conv: Conventions) -> str | None:
    if conv["log_ratio_clamp"] is None:
        return "without log_ratio_clamp no token has a zero gradient"
    return None


def _no_params(conv: Conventions) -> st.SearchStrategy[dict[str, Any]]:
    return st.just({})


# ---------------------------------------------------------------------------------------------
# the table
# ---------------------------------------------------------------------------------------------

TERMS = {
    "ppo_clip": _ppo_terms,
    "importance_weighted_pg": _iwpg_terms,
    "dppo": _dppo_terms,
}

_SIG = "candidate(logp, logp_old, advantages, *, {}, mask)"


def _descs() -> list[tuple[LossDesc, Any]]:
    """Every loss of the table with the parameters that a convention fixes, in the registry's
    order: the clipped ratio losses, the policy gradients, the sequence-level losses."""
    return [*_clipped_descs(), *_policy_gradient_descs(), *_sequence_descs()]


def _nothing_fixed(conv: Conventions) -> tuple[str, ...]:
    """No parameter is fixed by a convention."""
    return ()


def _fixed_dual(conv: Conventions) -> tuple[str, ...]:
    """``dual_clip`` is fixed unless the ``dual_clip`` convention says it is drawn."""
    return ("dual_clip",) if conv["dual_clip"] != "drawn" else ()


def _clipped_descs() -> list[tuple[LossDesc, Any]]:
    """The clipped ratio losses: PPO-clip, CISPO, SAPO, DPPO."""
    return [
        (
            LossDesc(
                "ppo_clip",
                "losses.clipped.ppo_clip_loss",
                _SIG.format("eps_low, eps_high, dual_clip"),
                RATIO,
                _ppo_terms,
                _ratio_condition("ppo_clip"),
                _ppo_params,
                conventions=(LOG_RATIO_CLAMP, DUAL_CLIP),
                edges=_ppo_edges,
                clips=_clipped_always,
                shifted=shift_ratio,
                guesses={"log_ratio_clamp": [20.0], "dual_clip": [3.0]},
                unclipped=_ppo_open,
                branches=_ppo_branches,
            ),
            _fixed_dual,
        ),
        (
            LossDesc(
                "cispo",
                "losses.clipped.cispo_loss",
                _SIG.format("eps_high, eps_low"),
                RATIO,
                _cispo_terms,
                _cispo_condition,
                _cispo_params,
                conventions=(LOG_RATIO_CLAMP, CISPO_LOWER),
                edges=_cispo_edges,
                shifted=shift_ratio,
                guesses={"log_ratio_clamp": [20.0]},
            ),
            lambda conv: ("eps_low",) if conv["lower_bound"] is None else (),
        ),
        (
            LossDesc(
                "sapo",
                "losses.clipped.sapo_loss",
                _SIG.format("tau_pos, tau_neg"),
                RATIO,
                _sapo_terms,
                _sapo_condition,
                _sapo_params,
                conventions=(LOG_RATIO_CLAMP,),
                boundaries=False,
                guesses={"log_ratio_clamp": [20.0]},
            ),
            _nothing_fixed,
        ),
        (
            LossDesc(
                "dppo",
                "losses.clipped.dppo_loss",
                _SIG.format("delta_low, delta_high, cap"),
                RATIO,
                _dppo_terms,
                _dppo_condition,
                _dppo_params,
                conventions=(LOG_RATIO_CLAMP, DIVERGENCE, SURROGATE),
                edges=lambda p, c: [math.log(p["cap"])] if p.get("cap") else [],
                clips=_clipped_always,
                shifted=shift_ratio,
                guesses={"log_ratio_clamp": [20.0]},
            ),
            _nothing_fixed,
        ),
    ]


def _policy_gradient_descs() -> list[tuple[LossDesc, Any]]:
    """The policy gradients: importance-weighted, with a log-ratio penalty, REINFORCE."""
    return [
        (
            LossDesc(
                "importance_weighted_pg",
                "losses.policy_gradient.importance_weighted_pg_loss",
                _SIG.format("cap"),
                RATIO,
                _iwpg_terms,
                _iwpg_condition,
                _iwpg_params,
                conventions=(LOG_RATIO_CLAMP,),
                edges=lambda p, c: [math.log(p["cap"])] if p.get("cap") else [0.0],
                clips=_clamp_only,
                shifted=shift_ratio,
                guesses={"log_ratio_clamp": [20.0]},
            ),
            _nothing_fixed,
        ),
        (
            LossDesc(
                "log_ratio_penalty",
                "losses.policy_gradient.log_ratio_penalty_loss",
                _SIG.format("tau"),
                RATIO,
                _penalty_terms,
                _penalty_condition,
                lambda conv: st.one_of(st.sampled_from([0.1, 1.0]), _floats(0.01, 10.0)).map(
                    lambda t: {"tau": t}
                ),
                boundaries=False,
            ),
            _nothing_fixed,
        ),
        (
            LossDesc(
                "reinforce",
                "losses.policy_gradient.reinforce_loss",
                "candidate(logp, advantages, *, mask)",
                ("logp", "advantages"),
                _reinforce_terms,
                _reinforce_condition,
                _no_params,
                boundaries=False,
            ),
            _nothing_fixed,
        ),
    ]


def _sequence_descs() -> list[tuple[LossDesc, Any]]:
    """The sequence-level losses: GSPO, GSPO-token, GMPO."""
    return [
        (
            LossDesc(
                "gspo",
                "losses.sequence.gspo_loss",
                _SIG.format("eps_low, eps_high"),
                RATIO,
                _seq_terms("gspo_loss", True),
                _seq_condition(token=False),
                _seq_params(False),
                conventions=(LOG_RATIO_CAP,),
                edges=_seq_edges(False),
                on_policy="sequence",
                clips=_clipped_always,
                sequence_ratio=True,
                sequence_advantages=True,
                shifted=shift_ratio,
                guesses={"log_ratio_cap": [10.0]},
                unclipped=_seq_open("gspo_loss"),
                branches=_seq_branches,
            ),
            _nothing_fixed,
        ),
        (
            LossDesc(
                "gspo_token",
                "losses.sequence.gspo_token_loss",
                _SIG.format("eps_low, eps_high"),
                RATIO,
                _seq_terms("gspo_token_loss", True),
                _seq_condition(token=True),
                _seq_params(False),
                conventions=(LOG_RATIO_CAP,),
                edges=_seq_edges(False),
                clips=_clipped_always,
                sequence_ratio=True,
                shifted=shift_ratio,
                guesses={"log_ratio_cap": [10.0]},
                unclipped=_seq_open("gspo_token_loss"),
                branches=_seq_branches,
            ),
            _nothing_fixed,
        ),
        (
            LossDesc(
                "gmpo",
                "losses.sequence.gmpo_loss",
                _SIG.format("eps_low, eps_high"),
                RATIO,
                _seq_terms("gmpo_loss", False),
                _gmpo_condition,
                _seq_params(True),
                edges=_seq_edges(True),
                on_policy="sequence",
                clips=_clipped_always,
                sequence_ratio=True,
                sequence_advantages=True,
                shifted=shift_ratio,
            ),
            _nothing_fixed,
        ),
    ]


def specs() -> tuple[Spec, ...]:
    table = [*_descs(), *((d, lambda conv: ()) for d in kl_descs())]
    return (
        *(loss_spec(d, fixed) for d, fixed in table),
        logprobs_spec(),
        aggregation_spec(),
        *advantage_specs(),
        *more_advantage_specs(),
        *token_advantage_specs(),
        *rejection_specs(),
        *rejection_mask_specs(),
        entropy_spec(),
        sum_pi_squared_spec(),
        gae_spec(),
        *sequence_product_specs(),
        *band_masked_specs(),
        kl_reward_spec(),
        *normalized_advantage_specs(),
        rloo_kl_spec(),
        batch_mean_spec(),
        *divergence_gate_specs(),
        *sequence_soft_specs(),
        *vespo_specs(),
        *entropy_mask_specs(),
        *decoupled_specs(),
        *distillation_specs(),
        proximal_logprobs_spec(),
        *optimal_advantage_specs(),
        adaptive_kl_spec(),
    )
