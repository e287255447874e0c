"""The oracle on losses: value *and* gradient of a candidate against refimpl.losses.

Correct torch implementations (written as the frameworks write them, in the input dtype) pass every
check in float32 and bfloat16; refimpl's own functions pass with ``gradient='returned'`` (the suite
checking itself); planted bugs fail the check that targets them, with a message that says what is
wrong. jax runs in its own interpreter (``tests/jax_loss_cases.py``).
"""

from __future__ import annotations

import functools
import json
import math
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import refimpl.losses.advantages as adv
import refimpl.losses.advantages_baselines as ab
import refimpl.losses.advantages_tokens as at
import refimpl.losses.aggregation as agg
import refimpl.losses.band_masked as bm
import refimpl.losses.clipped as cl
import refimpl.losses.collision as collision_mod
import refimpl.losses.divergence_gate as dg
import refimpl.losses.entropy_mask as em_mod
import refimpl.losses.gae as gae_mod
import refimpl.losses.kl as kl
import refimpl.losses.kl_reward as kr
import refimpl.losses.likelihood as lk
import refimpl.losses.logprobs as lp_mod
import refimpl.losses.optimal_advantage as oa
import refimpl.losses.policy_gradient as pg
import refimpl.losses.rejection as rj
import refimpl.losses.sequence as sq
import refimpl.losses.sequence_gamma as sg_mod
import refimpl.losses.sequence_product as sp_mod
import refimpl.losses.sequence_soft as ss_mod
from refimpl.losses.advantages_normalized import rloo_normalized_advantages
from refimpl.losses.decoupled import decoupled_ppo_loss
from refimpl.losses.distillation import reverse_kl_distillation_loss
from refimpl.losses.kl_control import adaptive_kl_coefficient
from refimpl.losses.proximal import proximal_logprobs
from refimpl.testing import ConformanceReport, check_conformance, check_names, spec_names
from refimpl.testing._specs_losses_entropy import token_entropy_vjp

EXAMPLES = 8
Tensor = torch.Tensor
CLAMP = {"log_ratio_clamp": 20.0}

# ---------------------------------------------------------------------------------------------
# correct torch implementations (the frameworks' formulas, in the input dtype)
# ---------------------------------------------------------------------------------------------


def _masked(loss: Tensor, mask: Tensor) -> Tensor:
    return torch.where(mask > 0, loss, torch.zeros_like(loss))


def _ratio(logp: Tensor, logp_old: Tensor) -> Tensor:
    return torch.exp(torch.clamp(logp - logp_old, -20.0, 20.0))  # verl: clamp before exp


def ppo_clip(
    logp: Tensor,
    logp_old: Tensor,
    advantages: Tensor,
    *,
    eps_low: float,
    eps_high: float | None,
    dual_clip: float | None,
    mask: Tensor,
) -> Tensor:
    r = _ratio(logp, logp_old)
    high = eps_low if eps_high is None else eps_high
    loss = torch.maximum(-advantages * r, -advantages * torch.clamp(r, 1 - eps_low, 1 + high))
    if dual_clip is not None:
        floor = torch.minimum(loss, -advantages * dual_clip)
        loss = torch.where(advantages < 0, floor, loss)
    return _masked(loss, mask)


def cispo(
    logp: Tensor,
    logp_old: Tensor,
    advantages: Tensor,
    *,
    eps_high: float,
    eps_low: float | None,
    mask: Tensor,
) -> Tensor:
    low = 0.0 if eps_low is None else 1 - eps_low
    w = torch.clamp(_ratio(logp, logp_old), low, 1 + eps_high).detach()
    return _masked(-w * advantages * logp, mask)


def sapo(
    logp: Tensor, logp_old: Tensor, advantages: Tensor, *, tau_pos: float, tau_neg: float,
    mask: Tensor,
) -> Tensor:  # fmt: skip
    r = _ratio(logp, logp_old)
    tau = torch.where(advantages > 0, torch.full_like(r, tau_pos), torch.full_like(r, tau_neg))
    gate = torch.sigmoid(tau * (r - 1)) * (4.0 / tau)
    return _masked(-gate * advantages, mask)


def _clean(x: Tensor, mask: Tensor) -> Tensor:
    """Padding replaced by 0 before anything is computed from it (exp of 1e30 is inf)."""
    return torch.where(mask > 0, x, torch.zeros_like(x))


def dppo(
    logp: Tensor, logp_old: Tensor, advantages: Tensor, *, delta_low: float,
    delta_high: float | None, cap: float | None, mask: Tensor,
) -> Tensor:  # fmt: skip
    logp, logp_old, advantages = (_clean(x, mask) for x in (logp, logp_old, advantages))
    r = _ratio(logp, logp_old)
    w = (r if cap is None else torch.clamp(r, max=cap)).detach()
    diff = torch.exp(logp) - torch.exp(logp_old)
    high = delta_low if delta_high is None else delta_high
    keep = torch.where(advantages > 0, diff <= high, diff >= -delta_low).detach()
    loss = -advantages * w * logp
    return _masked(torch.where(keep, loss, torch.zeros_like(loss)), mask)


def importance_weighted_pg(
    logp: Tensor, logp_old: Tensor, advantages: Tensor, *, cap: float | None, mask: Tensor
) -> Tensor:
    r = _ratio(logp, logp_old)
    if cap is None:  # SkyRL's importance_sampling_loss
        return _masked(-advantages * r, mask)
    return _masked(-torch.clamp(r, max=cap).detach() * advantages * logp, mask)  # verl bypass


def log_ratio_penalty(
    logp: Tensor, logp_old: Tensor, advantages: Tensor, *, tau: float, mask: Tensor
) -> Tensor:
    return _masked(-advantages * logp + 0.5 * tau * (logp - logp_old) ** 2, mask)


def reinforce(logp: Tensor, advantages: Tensor, *, mask: Tensor) -> Tensor:
    return _masked(-advantages * logp, mask)


def _sequence_log_ratio(logp: Tensor, logp_old: Tensor, mask: Tensor) -> Tensor:
    d = torch.where(mask > 0, logp - logp_old, torch.zeros_like(logp))
    return d.sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1)


def gspo_token(
    logp: Tensor,
    logp_old: Tensor,
    advantages: Tensor,
    *,
    eps_low: float,
    eps_high: float | None,
    mask: Tensor,
) -> Tensor:
    mean = _sequence_log_ratio(logp, logp_old, mask)
    log_s = torch.clamp(logp - logp.detach() + mean.detach(), max=10.0)  # verl: cap 10
    s = torch.exp(log_s)
    high = eps_low if eps_high is None else eps_high
    loss = torch.maximum(-advantages * s, -advantages * torch.clamp(s, 1 - eps_low, 1 + high))
    return _masked(loss, mask)


def gspo(
    logp: Tensor, logp_old: Tensor, advantages: Tensor, *, eps_low: float,
    eps_high: float | None, mask: Tensor,
) -> Tensor:  # fmt: skip
    s = torch.exp(torch.clamp(_sequence_log_ratio(logp, logp_old, mask), max=10.0))
    high = eps_low if eps_high is None else eps_high
    loss = torch.maximum(-advantages * s, -advantages * torch.clamp(s, 1 - eps_low, 1 + high))
    return _masked(loss, mask)


def gmpo(
    logp: Tensor, logp_old: Tensor, advantages: Tensor, *, eps_low: float,
    eps_high: float | None, mask: Tensor,
) -> Tensor:  # fmt: skip
    d = _clean(logp - logp_old, mask)
    a = _clean(advantages, mask)
    sign = torch.sign(a)
    high = eps_low if eps_high is None else eps_high
    kept = sign * torch.minimum(sign * d, sign * torch.clamp(d, -eps_low, high))
    n = mask.sum(-1, keepdim=True).clamp(min=1)
    ratio = torch.exp(kept.sum(-1, keepdim=True) / n)
    loss = -(a.sum(-1, keepdim=True) / n) * ratio
    return _masked(loss.expand_as(logp), mask)


def kl_k3_plus(logp: Tensor, logp_ref: Tensor, *, mask: Tensor) -> Tensor:
    d = logp - logp_ref
    k3 = torch.exp(-d) + d - 1
    k2 = 0.5 * d * d
    return _masked(k2 - k2.detach() + k3.detach(), mask)  # verl's straight-through "k3+"


def bias_corrected_kl(
    logp: Tensor, logp_ref: Tensor, logp_behavior: Tensor, *, mask: Tensor
) -> Tensor:
    """TRL 1.16.0's use_bias_correction_kl (k3 times the live ratio), with padding cleaned and the
    log-ratio clamped at 20 first (TRL does neither: it overflows at a log-ratio of -100)."""
    logp, logp_ref, logp_behavior = (_clean(x, mask) for x in (logp, logp_ref, logp_behavior))
    d = torch.clamp(logp - logp_ref, -20.0, 20.0)
    coef = torch.exp(logp - logp_behavior)  # differentiated, as TRL does
    return _masked((torch.exp(-d) + d - 1) * coef, mask)


def _keep(y: Tensor, top_k: int | None, top_p: float | None) -> Tensor:
    keep = torch.ones_like(y, dtype=torch.bool)
    if top_k is not None:
        kth = torch.topk(y, top_k, dim=-1).values[..., -1:]
        keep = y >= kth
    if top_p is not None and top_p < 1.0:  # p = 1 keeps everything (a float sum may miss 1)
        probs = torch.softmax(y.masked_fill(~keep, -math.inf).float(), dim=-1)
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        before = torch.cumsum(sorted_p, dim=-1) - sorted_p
        keep_sorted = before < top_p
        keep = keep & torch.zeros_like(keep).scatter(-1, order, keep_sorted)
    return keep


def token_logprobs(
    logits: Tensor,
    tokens: Tensor,
    *,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    mask: Tensor,
) -> Tensor:
    y = logits / temperature  # temperature on the logits (vLLM's order)
    with torch.no_grad():
        keep = _keep(y, top_k, top_p)
    logp = torch.log_softmax(y.masked_fill(~keep, -math.inf), dim=-1)
    return _masked(logp.gather(-1, tokens[..., None])[..., 0], mask)


# ---------------------------------------------------------------------------------------------
# planted bugs
# ---------------------------------------------------------------------------------------------


def ppo_clip_wrong_side(
    logp: Tensor, logp_old: Tensor, advantages: Tensor, *, eps_low: float, eps_high: float | None,
    dual_clip: float | None, mask: Tensor,
) -> Tensor:  # fmt: skip
    r = _ratio(logp, logp_old)
    high = eps_low if eps_high is None else eps_high
    loss = torch.minimum(-advantages * r, -advantages * torch.clamp(r, 1 - eps_low, 1 + high))
    return _masked(loss, mask)


def ppo_dual_clip_on_positive(
    logp: Tensor, logp_old: Tensor, advantages: Tensor, *, eps_low: float, eps_high: float | None,
    dual_clip: float | None, mask: Tensor,
) -> Tensor:  # fmt: skip
    r = _ratio(logp, logp_old)
    high = eps_low if eps_high is None else eps_high
    loss = torch.maximum(-advantages * r, -advantages * torch.clamp(r, 1 - eps_low, 1 + high))
    if dual_clip is not None:
        loss = torch.minimum(loss, -advantages * dual_clip)  # no `where(advantages < 0, ...)`
    return _masked(loss, mask)


def ppo_clamp_after_exp(
    logp: Tensor, logp_old: Tensor, advantages: Tensor, *, eps_low: float, eps_high: float | None,
    dual_clip: float | None, mask: Tensor,
) -> Tensor:  # fmt: skip
    r = torch.clamp(torch.exp(logp - logp_old), math.exp(-20.0), math.exp(20.0))
    high = eps_low if eps_high is None else eps_high
    loss = torch.maximum(-advantages * r, -advantages * torch.clamp(r, 1 - eps_low, 1 + high))
    if dual_clip is not None:
        loss = torch.where(advantages < 0, torch.minimum(loss, -advantages * dual_clip), loss)
    return _masked(loss, mask)


def ppo_token_mean_over_padded_width(
    logp: Tensor, logp_old: Tensor, advantages: Tensor, *, eps_low: float, eps_high: float | None,
    dual_clip: float | None, mask: Tensor,
) -> Tensor:  # fmt: skip
    per_token = ppo_clip(
        logp,
        logp_old,
        advantages,
        eps_low=eps_low,
        eps_high=eps_high,
        dual_clip=dual_clip,
        mask=mask,
    )
    return per_token.sum() / mask.numel()  # B·T, not the number of real tokens


def ppo_seq_mean_counts_empty_rows(
    logp: Tensor, logp_old: Tensor, advantages: Tensor, *, eps_low: float, eps_high: float | None,
    dual_clip: float | None, mask: Tensor,
) -> Tensor:  # fmt: skip
    per_token = ppo_clip(
        logp,
        logp_old,
        advantages,
        eps_low=eps_low,
        eps_high=eps_high,
        dual_clip=dual_clip,
        mask=mask,
    )
    rows = per_token.sum(-1) / mask.sum(-1).clamp(min=1)
    return rows.mean()  # every row counted, all-padding ones too


def ppo_times_mask(
    logp: Tensor, logp_old: Tensor, advantages: Tensor, *, eps_low: float, eps_high: float | None,
    dual_clip: float | None, mask: Tensor,
) -> Tensor:  # fmt: skip
    loss = ppo_clip(
        logp, logp_old, advantages, eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip,
        mask=torch.ones_like(mask),
    )  # fmt: skip
    return loss * mask  # inf·0 is NaN where a padded entry overflowed


def ppo_inverted_ratio(
    logp: Tensor, logp_old: Tensor, advantages: Tensor, *, eps_low: float, eps_high: float | None,
    dual_clip: float | None, mask: Tensor,
) -> Tensor:  # fmt: skip
    return ppo_clip(
        logp_old, logp, advantages, eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip,
        mask=mask,
    )  # fmt: skip


def ppo_straight_through_clip(
    logp: Tensor, logp_old: Tensor, advantages: Tensor, *, eps_low: float, eps_high: float | None,
    dual_clip: float | None, mask: Tensor,
) -> Tensor:  # fmt: skip
    r = _ratio(logp, logp_old)
    high = eps_low if eps_high is None else eps_high
    clipped = r + (torch.clamp(r, 1 - eps_low, 1 + high) - r).detach()  # the clip keeps a gradient
    loss = torch.maximum(-advantages * r, -advantages * clipped)
    return _masked(loss, mask)


def ppo_ignores_eps_high(
    logp: Tensor, logp_old: Tensor, advantages: Tensor, *, eps_low: float, eps_high: float | None,
    dual_clip: float | None, mask: Tensor,
) -> Tensor:  # fmt: skip
    return ppo_clip(
        logp, logp_old, advantages, eps_low=eps_low, eps_high=None, dual_clip=dual_clip, mask=mask
    )


def cispo_without_detach(
    logp: Tensor, logp_old: Tensor, advantages: Tensor, *, eps_high: float, eps_low: float | None,
    mask: Tensor,
) -> Tensor:  # fmt: skip
    low = 0.0 if eps_low is None else 1 - eps_low
    w = torch.clamp(_ratio(logp, logp_old), low, 1 + eps_high)
    return _masked(-w * advantages * logp, mask)


def gspo_token_without_detach(
    logp: Tensor, logp_old: Tensor, advantages: Tensor, *, eps_low: float, eps_high: float | None,
    mask: Tensor,
) -> Tensor:  # fmt: skip
    s = torch.exp(torch.clamp(_sequence_log_ratio(logp, logp_old, mask), max=10.0))
    high = eps_low if eps_high is None else eps_high
    loss = torch.maximum(-advantages * s, -advantages * torch.clamp(s, 1 - eps_low, 1 + high))
    return _masked(loss, mask)


def gspo_mean_over_padded_width(
    logp: Tensor, logp_old: Tensor, advantages: Tensor, *, eps_low: float,
    eps_high: float | None, mask: Tensor,
) -> Tensor:  # fmt: skip
    d = torch.where(mask > 0, logp - logp_old, torch.zeros_like(logp))
    s = torch.exp(torch.clamp(d.mean(-1, keepdim=True), max=10.0))  # divides by T, not L
    high = eps_low if eps_high is None else eps_high
    loss = torch.maximum(-advantages * s, -advantages * torch.clamp(s, 1 - eps_low, 1 + high))
    return _masked(loss, mask)


def verl_vanilla(
    logp: Tensor, logp_old: Tensor, advantages: Tensor, *, eps_low: float,
    eps_high: float | None, mask: Tensor,
) -> Tensor:  # fmt: skip
    """verl 0.9.1 compute_policy_loss_vanilla's per-token pg_losses, as read: the log-ratio
    clamped at ±20, dual-clip always on with clip_ratio_c = 3, padding left to agg_loss."""
    ratio = torch.exp(torch.clamp(logp - logp_old, min=-20.0, max=20.0))
    high = eps_low if eps_high is None else eps_high
    losses1 = -advantages * ratio
    losses2 = -advantages * torch.clamp(ratio, 1 - eps_low, 1 + high)
    clip1 = torch.maximum(losses1, losses2)
    clip2 = torch.min(-advantages * 3.0, clip1)
    return torch.where(advantages < 0, clip2, clip1)


VERL = {"log_ratio_clamp": 20.0, "dual_clip": 3.0, "padding": "ignored"}


def kl_k3_plus_as_plain_k3(logp: Tensor, logp_ref: Tensor, *, mask: Tensor) -> Tensor:
    d = logp - logp_ref
    return _masked(torch.exp(-d) + d - 1, mask)


def token_logprobs_tempered_logprobs(
    logits: Tensor, tokens: Tensor, *, temperature: float, top_k: int | None,
    top_p: float | None, mask: Tensor,
) -> Tensor:  # fmt: skip
    with torch.no_grad():
        keep = _keep(logits / temperature, top_k, top_p)
    logp = torch.log_softmax(logits.masked_fill(~keep, -math.inf), dim=-1) / temperature
    return _masked(logp.gather(-1, tokens[..., None])[..., 0], mask)


# ---------------------------------------------------------------------------------------------
# correct implementations pass
# ---------------------------------------------------------------------------------------------

SCALAR = {"output": "scalar", "aggregation": "token_mean"}
CORRECT: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {
    "ppo_clip": (ppo_clip, CLAMP),
    "cispo": (cispo, CLAMP),
    "sapo": (sapo, CLAMP),
    "dppo": (dppo, CLAMP),
    "importance_weighted_pg": (importance_weighted_pg, CLAMP),
    "log_ratio_penalty": (log_ratio_penalty, {}),
    "reinforce": (reinforce, {}),
    "gspo": (gspo, {"log_ratio_cap": 10.0}),
    "gmpo": (gmpo, {}),
    "gspo_token": (gspo_token, {"log_ratio_cap": 10.0}),
    "kl_penalty": (kl_k3_plus, {"estimator": "k3+"}),
    "importance_weighted_kl": (bias_corrected_kl, {"weighting": "differentiable", **CLAMP}),
    "token_logprobs": (token_logprobs, {}),
}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("spec", sorted(CORRECT))
def test_a_correct_torch_loss_passes_every_check(spec: str, dtype: str) -> None:
    candidate, conventions = CORRECT[spec]
    report = check_conformance(
        candidate,
        spec=spec,
        xp="torch",
        dtype=dtype,
        conventions=conventions,
        max_examples=EXAMPLES,
    )
    report.raise_if_failed()
    assert all(r.status in ("passed", "skipped") for r in report.results)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_verls_policy_loss_passes_with_verls_conventions(dtype: str) -> None:
    report = check_conformance(
        verl_vanilla, spec="ppo_clip", xp="torch", dtype=dtype, conventions=VERL,
        max_examples=EXAMPLES,
    )  # fmt: skip
    report.raise_if_failed()


def test_a_missing_convention_is_named_by_the_failure() -> None:
    undeclared = {k: v for k, v in VERL.items() if k != "dual_clip"}
    result = check_conformance(
        verl_vanilla, spec="ppo_clip", xp="torch", dtype="float32", conventions=undeclared,
        max_examples=EXAMPLES, checks=["values"],
    )["values"]  # fmt: skip
    assert result.status == "raised"  # it takes no dual_clip= keyword
    assert "conventions={'dual_clip': 3.0}" in result.message


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_scalar_loss_is_checked_with_the_steps_gradient(dtype: str) -> None:
    def ppo_token_mean(*args: Tensor, mask: Tensor, **kwargs: Any) -> Tensor:
        return ppo_clip(*args, mask=mask, **kwargs).sum() / mask.sum().clamp(min=1)

    report = check_conformance(
        ppo_token_mean,
        spec="ppo_clip",
        xp="torch",
        dtype=dtype,
        conventions={**CLAMP, **SCALAR, "empty_batch": "excluded"},
        max_examples=EXAMPLES,
    )
    report.raise_if_failed()


# ---------------------------------------------------------------------------------------------
# refimpl's own functions pass with gradient="returned" (the suite checks itself)
# ---------------------------------------------------------------------------------------------


def _logprobs_terms(logits: Any, tokens: Any, **kwargs: Any) -> tuple[Any, Any]:
    cotangent = kwargs.pop("cotangent")
    value = lp_mod.token_logprobs(logits, tokens, **kwargs)
    return value, lp_mod.token_logprobs_grad(logits, tokens, cotangent=cotangent, **kwargs)


def _entropy_terms(logits: Any, **kwargs: Any) -> tuple[Any, Any]:
    cotangent = kwargs.pop("cotangent")
    value = lp_mod.token_entropy(logits, **kwargs)
    return value, token_entropy_vjp(np.asarray(logits), cotangent=cotangent, **kwargs)


def _sum_pi_squared_terms(logits: Any, **kwargs: Any) -> tuple[Any, Any]:
    value = collision_mod.token_sum_pi_squared(
        logits, temperature=kwargs["temperature"], mask=kwargs["mask"]
    )
    return value, collision_mod.token_sum_pi_squared_grad(logits, **kwargs)


def _gae_advantages(rewards: Any, values: Any, **kwargs: Any) -> Any:
    return gae_mod.gae_advantages(rewards, values, **kwargs).advantages


def _aggregate_terms(loss: Any, mask: Any, **kwargs: Any) -> tuple[float, Any]:
    value = agg.aggregate_loss(loss, mask, mode="token_mean", **kwargs)
    return value, agg.aggregation_weights(mask, mode="token_mean", **kwargs)


def _opo_advantages(r: Any, *, group: Any, mask: Any) -> Any:
    """OPO's spec gives the token mask; the reference takes each response's length."""
    return ab.opo_advantages(r, group=group, lengths=np.asarray(mask).sum(axis=1))


def _batch_mean(r: Any) -> Any:
    """The batch as one group, not scaled (the spec's reference)."""
    return adv.grpo_advantages(r, group=np.zeros(np.asarray(r).size, dtype=np.int64), std="none")


REFERENCE: dict[str, Callable[..., Any]] = {
    "ppo_clip": cl.ppo_clip_loss,
    "cispo": cl.cispo_loss,
    "sapo": cl.sapo_loss,
    "dppo": cl.dppo_loss,
    "importance_weighted_pg": pg.importance_weighted_pg_loss,
    "log_ratio_penalty": pg.log_ratio_penalty_loss,
    "reinforce": pg.reinforce_loss,
    "gspo": sq.gspo_loss,
    "gspo_token": sq.gspo_token_loss,
    "gmpo": sq.gmpo_loss,
    "sequence_ppo_clip": sp_mod.sequence_ppo_clip_loss,
    "cispo_sequence": ss_mod.cispo_sequence_loss,
    "sapo_sequence": ss_mod.sapo_sequence_loss,
    "vespo": sg_mod.vespo_loss,
    "high_entropy_mask": em_mod.high_entropy_mask,
    "kl_penalty": functools.partial(kl.kl_penalty, estimator="k3"),
    "importance_weighted_kl": functools.partial(kl.importance_weighted_kl, estimator="k3"),
    "token_logprobs": _logprobs_terms,
    # the loss statistics (tests/test_conformance_stats.py checks them in depth)
    "aggregation": _aggregate_terms,
    "grpo_advantages": adv.grpo_advantages,
    "rloo_advantages": adv.rloo_advantages,
    "reinforce_pp_advantages": adv.reinforce_pp_advantages,
    "sequence_divergence": rj.sequence_divergence,
    "any_token_veto": rj.any_token_veto,
    "is_batch_normalize": rj.is_batch_normalize,
    "off_policy_sequence_mask": rj.off_policy_sequence_mask,
    "m2po_mask": rj.m2po_mask,
    "divergence_rejection_mask": functools.partial(
        rj.divergence_rejection_mask, estimator="k1", reduce="token"
    ),
    "token_entropy": _entropy_terms,
    "token_sum_pi_squared": _sum_pi_squared_terms,
    "gae_advantages": _gae_advantages,
    "gpg_advantages": ab.gpg_advantages,
    "opo_advantages": _opo_advantages,
    "remax_advantages": ab.remax_advantages,
    "maxrl_advantages": functools.partial(ab.maxrl_advantages, eps=0.0),
    "passk_advantages": ab.passk_advantages,
    "gdpo_advantages": at.gdpo_advantages,
    "optimal_token_baseline_advantages": at.optimal_token_baseline_advantages,
    "band_masked_pg": bm.band_masked_pg_loss,
    "nll": lk.nll_loss,
    "kl_reward": kr.kl_penalized_rewards,
    "batch_mean_advantages": _batch_mean,
    "divergence_gated_is": functools.partial(dg.divergence_gated_weights, level="token"),
    "divergence_gated_is_sequence": functools.partial(
        dg.divergence_gated_weights, level="sequence"
    ),
    "rloo_normalized_advantages": rloo_normalized_advantages,
    "rloo_kl_advantages": kr.rloo_kl_advantages,
    "optimal_value_estimate": oa.optimal_value_estimate,
    "optimal_advantage_regression": oa.optimal_advantage_regression_loss,
    "adaptive_kl_coefficient": adaptive_kl_coefficient,
    "decoupled_ppo_clip": decoupled_ppo_loss,
    "reverse_kl_distillation": reverse_kl_distillation_loss,
    "proximal_logprobs": proximal_logprobs,
}
#: the declared conventions of refimpl's own candidate: a returned gradient where the spec has one
#: (the value-only statistics have none)
VALUE_ONLY = (
    "grpo_advantages",
    "rloo_advantages",
    "reinforce_pp_advantages",
    "sequence_divergence",
    "any_token_veto",
    "is_batch_normalize",
    "off_policy_sequence_mask",
    "m2po_mask",
    "divergence_rejection_mask",
    "gae_advantages",
    "gpg_advantages",
    "opo_advantages",
    "remax_advantages",
    "maxrl_advantages",
    "passk_advantages",
    "gdpo_advantages",
    "optimal_token_baseline_advantages",
    "kl_reward",
    "batch_mean_advantages",
    "divergence_gated_is",
    "divergence_gated_is_sequence",
    "rloo_normalized_advantages",
    "rloo_kl_advantages",
    "optimal_value_estimate",
    "high_entropy_mask",
    "adaptive_kl_coefficient",
)
OWN_CONVENTIONS: dict[str, dict[str, Any]] = {name: {} for name in VALUE_ONLY}
#: the specs of per-token losses, whose candidates return (loss, grad) terms
TERMS_SPECS = [s for s in spec_names(losses=True) if s not in {"aggregation", *VALUE_ONLY}]


def test_every_loss_spec_has_a_reference_candidate() -> None:
    assert set(REFERENCE) == set(spec_names(losses=True))


@pytest.mark.parametrize("spec", spec_names(losses=True))
def test_refimpls_own_loss_passes_with_its_returned_gradient(spec: str) -> None:
    report = check_conformance(
        REFERENCE[spec],
        spec=spec,
        conventions=OWN_CONVENTIONS.get(spec, {"gradient": "returned"}),
        max_examples=EXAMPLES,
    )
    report.raise_if_failed()
    ran = [r.status for r in report.results if r.status != "skipped"]
    assert ran == ["passed"] * len(ran)
    assert len(ran) >= 4


VALUE_CHECKS = {
    "values",
    "padding_contributes_nothing",
    "huge_log_ratios_stay_finite",
    "huge_logits_stay_finite",
}


@pytest.mark.parametrize("spec", TERMS_SPECS)
@pytest.mark.parametrize("wrong", ["value", "gradient"])
def test_every_check_of_every_loss_sees_its_half_of_the_terms(spec: str, wrong: str) -> None:
    """refimpl's own loss with its value (or gradient) off by 1 % + 0.5 fails exactly the checks
    that read it: no check passes vacuously, none reads the wrong half."""
    reference = REFERENCE[spec]

    def off(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
        loss, grad = reference(*args, **kwargs)
        if wrong == "value":
            return np.asarray(loss) * 1.01 + 0.5, grad
        return loss, np.asarray(grad) * 1.01 + 0.5

    report = check_conformance(
        off, spec=spec, conventions={"gradient": "returned"}, max_examples=EXAMPLES, shrink=False
    )
    failed = {r.name for r in report.results if r.status == "failed"}
    ran = {r.name for r in report.results if r.status != "skipped"}
    reads_value = VALUE_CHECKS | {"ratios_at_clip_boundaries"}
    expected = ran & reads_value if wrong == "value" else ran - {"values"}
    assert failed == expected, report.summary()


def test_a_numpy_candidate_without_a_returned_gradient_is_told_how_to_declare_it() -> None:
    report = check_conformance(cl.ppo_clip_loss, spec="ppo_clip", max_examples=2, checks=["values"])
    message = report["values"].message
    assert report["values"].status == "raised"
    assert "conventions={'gradient': 'returned'}" in message


# ---------------------------------------------------------------------------------------------
# planted bugs fail the check that targets them, with a useful message
# ---------------------------------------------------------------------------------------------

PLANTED: list[tuple[str, Callable[..., Any], dict[str, Any], str, str]] = [
    ("ppo_clip", ppo_clip_wrong_side, CLAMP, "values", "the losses differ"),
    ("ppo_clip", ppo_dual_clip_on_positive, CLAMP, "values", "the losses differ"),
    ("ppo_clip", ppo_clamp_after_exp, CLAMP, "huge_log_ratios_stay_finite", "non-finite gradients"),
    (
        "ppo_clip",
        ppo_token_mean_over_padded_width,
        {**CLAMP, **SCALAR},
        "values",
        "the losses differ",
    ),
    (
        "ppo_clip",
        ppo_seq_mean_counts_empty_rows,
        {**CLAMP, **SCALAR, "aggregation": "seq_mean_token_mean"},
        "values",
        "conventions={'sequence_count': 'all'}",
    ),
    ("ppo_clip", ppo_times_mask, CLAMP, "padding_contributes_nothing", "padding entries got"),
    (
        "ppo_clip",
        ppo_inverted_ratio,
        CLAMP,
        "on_policy_is_policy_gradient",
        "at logp == logp_old the gradient is not the policy gradient",
    ),
    (
        "ppo_clip",
        ppo_straight_through_clip,
        CLAMP,
        "clipped_region_has_zero_gradient",
        "tokens in a clipped region got gradients",
    ),
    ("ppo_clip", ppo_ignores_eps_high, CLAMP, "ratios_at_clip_boundaries", "at a clip boundary"),
    ("cispo", cispo_without_detach, CLAMP, "gradient", "the values agree; the gradients differ"),
    (
        "gspo_token",
        gspo_token_without_detach,
        {"log_ratio_cap": 10.0},
        "gradient",
        "the values agree; the gradients differ",
    ),
    (
        "kl_penalty",
        kl_k3_plus_as_plain_k3,
        {"estimator": "k3+"},
        "gradient",
        "conventions={'estimator': 'k3'}",
    ),
    ("token_logprobs", token_logprobs_tempered_logprobs, {}, "values", "the losses differ"),
    ("gspo", gspo_mean_over_padded_width, {"log_ratio_cap": 10.0}, "values", "the losses differ"),
]


@pytest.fixture(scope="module")
def planted_reports() -> dict[str, ConformanceReport]:
    return {
        f.__name__: check_conformance(
            f,
            spec=spec,
            xp="torch",
            dtype="float32",
            conventions=conv,
            max_examples=EXAMPLES * 3,
            checks=[check],
            shrink=False,  # the verdict is the same; shrinking is most of a failure's cost
        )
        for spec, f, conv, check, _ in PLANTED
    }


@pytest.mark.parametrize(
    ("spec", "candidate", "conv", "check", "says"),
    PLANTED,
    ids=[f.__name__ for _, f, _, _, _ in PLANTED],
)
def test_a_planted_bug_fails_the_check_that_targets_it(
    spec: str,
    candidate: Callable[..., Any],
    conv: dict[str, Any],
    check: str,
    says: str,
    planted_reports: dict[str, ConformanceReport],
) -> None:
    result = planted_reports[candidate.__name__][check]
    assert result.status == "failed", result.render()
    assert says in result.message, result.message
    assert "reproduce(candidate, " in result.reproduction


def test_the_how_to_pages_example_passes_as_shown() -> None:
    page = Path(__file__).resolve().parent.parent / "docs" / "howto" / "check-your-loss.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
    (source,) = [b for b in blocks if b.startswith("# tests/test_my_losses.py\n")]
    namespace: dict[str, Any] = {"__name__": "howto_check_your_loss"}
    exec(compile(source, "check-your-loss.md", "exec"), namespace)
    namespace["test_ppo_clip_matches_refimpl"]()


def test_every_check_of_ppo_clip_fails_on_a_planted_bug() -> None:
    shown = {check for spec, _, _, check, _ in PLANTED if spec == "ppo_clip"}
    assert shown | {"gradient"} == set(check_names("ppo_clip"))


def test_every_loss_check_name_is_stable() -> None:
    assert check_names("ppo_clip") == (
        "values",
        "gradient",
        "padding_contributes_nothing",
        "on_policy_is_policy_gradient",
        "clipped_region_has_zero_gradient",
        "huge_log_ratios_stay_finite",
        "ratios_at_clip_boundaries",
    )


# ---------------------------------------------------------------------------------------------
# jax, in its own interpreter (see tests/test_conformance_jax.py for why)
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jax_outcome() -> dict[str, Any]:
    cases = Path(__file__).with_name("jax_loss_cases.py")
    done = subprocess.run(
        [sys.executable, str(cases)], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_a_jax_ppo_clip_passes_and_its_planted_bug_fails(jax_outcome: dict[str, Any]) -> None:
    assert jax_outcome["failed"] == [], jax_outcome["summary"]
    assert jax_outcome["array"] == "jax.numpy float32"
    assert jax_outcome["planted"] == "failed", jax_outcome["planted_summary"]
    assert "jax" not in sys.modules
