"""The oracle against torch: a correct float32, bfloat16 and float16 implementation of every spec passes
with one call, a planted bug in it is caught, and every check of every spec is seen to fail on some
planted bug.

The implementations below are written the way a framework writes them (torch ops in the input
dtype, ``torch.where`` rather than a product with the mask, so that an overflowed ratio at a padding
position cannot turn into NaN). torch is an optional test dependency, installed with the pin of
``constraints.txt``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import test_testing  # the numpy suite: its NUMPY_SPECS
import torch

from refimpl.testing import ConformanceReport, check_conformance, check_names, spec_names

EXAMPLES = 10
#: Planted bugs that only a rarer draw exposes to every check they target get more examples:
#: with 10 derandomized examples one of their checks does not meet the bug, with 30 each does
#: (measured); the budget is twice that, or the suite's 100 where it was set before.
BUDGET = {
    "tis_geometric_divides_by_t": 100,
    "ppo_product_with_mask": 100,
    "mis_sequence_nan_overflow": 60,
    "mis_geometric_sum": 60,
    "shaped_adds_price": 60,
}
Tensor = torch.Tensor

# ---------------------------------------------------------------------------------------------
# correct implementations (torch, computing in the input dtype)
# ---------------------------------------------------------------------------------------------


def _zero(x: Tensor) -> Tensor:
    return torch.zeros_like(x)


def effort_penalty(b: Tensor, *, k0: float, b_min: float, tau: float) -> Tensor:
    return k0 * torch.exp(-(b - b_min) / tau)


def inclusion_probability(cdf: Tensor, *, n: int, k: int) -> Tensor:
    f = cdf.double()  # a sum of up to 64 binomial terms: computed in float64, returned as given
    j = torch.arange(k, dtype=torch.float64)
    log_binom = (
        torch.lgamma(torch.tensor(n, dtype=torch.float64))
        - torch.lgamma(j + 1)
        - (torch.lgamma(torch.tensor(n, dtype=torch.float64) - j))
    )
    terms = torch.exp(
        log_binom + torch.xlogy(j, f[:, None]) + torch.xlogy(n - 1 - j, 1 - f[:, None])
    )
    return terms.sum(-1).to(cdf.dtype)


def staleness_mask(s: Tensor, *, eta: int) -> Tensor:
    return (s <= eta).to(torch.float32)


def staleness(trained_step: int, token_versions: list[Tensor]) -> Tensor:
    return torch.stack([trained_step - v.min() for v in token_versions])


def vtrace(
    v_tm1: Tensor,
    v_t: Tensor,
    r_t: Tensor,
    discount_t: Tensor,
    rho_tm1: Tensor,
    *,
    lambda_: float,
    clip_rho_threshold: float,
    clip_pg_rho_threshold: float,
) -> tuple[Tensor, Tensor, Tensor]:
    rho_bar = torch.clamp(rho_tm1, max=clip_rho_threshold)
    c = lambda_ * torch.clamp(rho_tm1, max=1.0)
    delta = rho_bar * (r_t + discount_t * v_t - v_tm1)
    errors = torch.zeros_like(delta)
    acc = torch.zeros((), dtype=delta.dtype)
    for i in reversed(range(delta.shape[-1])):
        acc = delta[i] + discount_t[i] * c[i] * acc
        errors[i] = acc
    targets = v_tm1 + errors
    nxt = torch.cat([lambda_ * targets[1:] + (1 - lambda_) * v_tm1[1:], v_t[-1:]])
    q = r_t + discount_t * nxt
    pg = torch.clamp(rho_tm1, max=clip_pg_rho_threshold) * (q - v_tm1)
    return errors, pg, q


def tis(logp_target: Tensor, logp_behavior: Tensor, *, cap: float, mask: Tensor) -> Tensor:
    w = torch.clamp(torch.exp(logp_target - logp_behavior), max=cap)
    return torch.where(mask > 0, w, _zero(w))


def _sequence_sum(d: Tensor, mask: Tensor) -> Tensor:
    return torch.where(mask > 0, d, _zero(d)).float().sum(-1)


def tis_sequence(logp_target: Tensor, logp_behavior: Tensor, *, cap: float, mask: Tensor) -> Tensor:
    s = _sequence_sum(logp_target - logp_behavior, mask)
    w = torch.exp(torch.clamp(s, max=float(np.log(cap))))
    return torch.where(mask.sum(-1) > 0, torch.clamp(w, max=cap), _zero(w)).to(logp_target.dtype)


def tis_geometric(
    logp_target: Tensor, logp_behavior: Tensor, *, cap: float, mask: Tensor
) -> Tensor:
    n = mask.float().sum(-1)
    g = _sequence_sum(logp_target - logp_behavior, mask) / torch.clamp(n, min=1.0)
    w = torch.clamp(torch.exp(torch.clamp(g, max=float(np.log(cap)))), max=cap)
    return torch.where(n > 0, w, _zero(w)).to(logp_target.dtype)


def masked_is(
    logp_target: Tensor, logp_behavior: Tensor, *, low: float, high: float, mask: Tensor
) -> Tensor:
    r = torch.exp(torch.clamp(logp_target - logp_behavior, max=50.0))
    keep = (r >= low) & (r <= high) & (mask > 0)
    return torch.where(keep, r, _zero(r))


def _band(s: Tensor, low: float, high: float, rows: Tensor) -> Tensor:
    r = torch.exp(torch.clamp(s, max=50.0))
    keep = (r >= low) & (r <= high) & rows
    return torch.where(keep, r, _zero(r))


def masked_is_sequence(
    logp_target: Tensor, logp_behavior: Tensor, *, low: float, high: float, mask: Tensor
) -> Tensor:
    s = _sequence_sum(logp_target - logp_behavior, mask)
    return _band(s, low, high, mask.sum(-1) > 0).to(logp_target.dtype)


def masked_is_geometric(
    logp_target: Tensor, logp_behavior: Tensor, *, low: float, high: float, mask: Tensor
) -> Tensor:
    n = mask.float().sum(-1)
    g = _sequence_sum(logp_target - logp_behavior, mask) / torch.clamp(n, min=1.0)
    return _band(g, low, high, n > 0).to(logp_target.dtype)


def decoupled_ppo(
    logp_prox: Tensor, logp_behavior: Tensor, *, cap: float | None, mask: Tensor
) -> Tensor:
    d = logp_prox - logp_behavior
    if cap is None:
        w = torch.exp(d)
        return torch.where(mask > 0, w, _zero(w))
    w = torch.exp(torch.clamp(d, max=50.0))
    return torch.where((mask > 0) & (w <= cap), w, _zero(w))


def staleness_decay(s: Tensor, *, gamma: float) -> Tensor:
    return torch.pow(torch.tensor(gamma), s.to(torch.float32))


def admission_capacity(
    *, eta: int, version: int, batch: int, accepted: int, running: int, max_concurrent: int
) -> int:
    return min(max_concurrent - running, (eta + version + 1) * batch - (accepted + running))


def effective_sample_size(w: Tensor) -> Tensor:
    x = w / w.max()
    return x.sum() ** 2 / (x * x).sum()


def masking_diagnostics(s: Tensor, w: Tensor) -> dict[str, Any]:
    kept = w > 0
    on = s == 0
    dropped = (on & ~kept).sum() / on.sum() if bool(on.any()) else torch.tensor(0.0)
    x = w / w.max() if bool(w.max() > 0) else w
    ess = x.sum() ** 2 / (x * x).sum() if bool(w.max() > 0) else torch.tensor(0.0)
    return {
        "kept_fraction": kept.float().mean(),
        "on_policy_dropped_fraction": dropped,
        "effective_sample_size": ess,
    }


def shaped_reward(
    quality: Tensor,
    length: Tensor,
    b: Tensor,
    *,
    k0: float,
    b_min: float,
    tau: float,
    length_scale: float,
) -> Tensor:
    return quality - k0 * torch.exp(-(b - b_min) / tau) * length / length_scale


def dapo_overlong(
    lengths: Tensor, *, max_length: int, cache_length: int, penalty_factor: float
) -> Tensor:
    ramp = (max_length - cache_length - lengths.float()) / cache_length
    return torch.clamp(ramp, min=-1.0, max=0.0) * penalty_factor


def kimi_length_reward(lengths: Tensor, correct: Tensor) -> Tensor:
    ell = lengths.float()
    lo = ell.min(-1, keepdim=True).values
    hi = ell.max(-1, keepdim=True).values
    spread = hi - lo
    lam = torch.where(spread > 0, 0.5 - (ell - lo) / torch.clamp(spread, min=1.0), _zero(ell))
    return torch.where(correct, lam, torch.clamp(lam, max=0.0))


def cosine_length_reward(lengths: Tensor, correct: Tensor, *, max_length: int) -> Tensor:
    progress = torch.clamp(lengths.float(), max=max_length) / max_length
    c = 0.5 * (1 + torch.cos(torch.pi * progress))
    return torch.where(correct, 0.5 + 0.5 * c, -0.5 - 0.5 * c)


def l1_exact(lengths: Tensor, correct: Tensor, target_lengths: Tensor, *, alpha: float) -> Tensor:
    return correct.float() - alpha * (target_lengths - lengths).abs().float()


def l1_max(
    lengths: Tensor, correct: Tensor, target_lengths: Tensor, *, alpha: float, delta: float
) -> Tensor:
    score = torch.clamp(alpha * (target_lengths - lengths).float() + delta, 0.0, 1.0)
    return torch.where(correct, score, torch.zeros_like(score))


CORRECT: dict[str, Callable[..., Any]] = {
    "effort_penalty": effort_penalty,
    "inclusion_probability": inclusion_probability,
    "staleness_mask": staleness_mask,
    "tis": tis,
    "masked_is": masked_is,
    "staleness": staleness,
    "vtrace": vtrace,
    "tis_sequence": tis_sequence,
    "tis_geometric": tis_geometric,
    "masked_is_sequence": masked_is_sequence,
    "masked_is_geometric": masked_is_geometric,
    "decoupled_ppo": decoupled_ppo,
    "staleness_decay": staleness_decay,
    "admission_capacity": admission_capacity,
    "effective_sample_size": effective_sample_size,
    "masking_diagnostics": masking_diagnostics,
    "shaped_reward": shaped_reward,
    "dapo_overlong": dapo_overlong,
    "kimi_length_reward": kimi_length_reward,
    "cosine_length_reward": cosine_length_reward,
    "l1_exact": l1_exact,
    "l1_max": l1_max,
}

# ---------------------------------------------------------------------------------------------
# planted bugs (each a real kind of mistake)
# ---------------------------------------------------------------------------------------------


def tis_no_cap(logp_target: Tensor, logp_behavior: Tensor, *, cap: float, mask: Tensor) -> Tensor:
    return torch.exp(logp_target - logp_behavior) * mask  # forgets the cap; inf·0 at padding


def tis_drops_at_cap(
    logp_target: Tensor, logp_behavior: Tensor, *, cap: float, mask: Tensor
) -> Tensor:
    r = torch.exp(torch.clamp(logp_target - logp_behavior, max=50.0))
    return torch.where((r < cap) & (mask > 0), r, _zero(r))  # masks instead of truncating


def tis_one_at_padding(
    logp_target: Tensor, logp_behavior: Tensor, *, cap: float, mask: Tensor
) -> Tensor:
    return torch.clamp(torch.exp(torch.clamp(logp_target - logp_behavior, max=50.0)), max=cap)


def tis_sequence_ignores_mask(
    logp_target: Tensor, logp_behavior: Tensor, *, cap: float, mask: Tensor
) -> Tensor:
    s = (logp_target - logp_behavior).float().sum(-1)  # padding garbage enters the product
    return torch.clamp(torch.exp(torch.clamp(s, max=50.0)), max=cap).to(logp_target.dtype)


def tis_sequence_two_sided(
    logp_target: Tensor, logp_behavior: Tensor, *, cap: float, mask: Tensor
) -> Tensor:
    w = tis_sequence(logp_target, logp_behavior, cap=cap, mask=mask)
    return torch.where(mask.sum(-1) > 0, torch.clamp(w, min=1.0 / cap), w)  # clip(ρ, 1/C, C)


def tis_sequence_no_cap(
    logp_target: Tensor, logp_behavior: Tensor, *, cap: float, mask: Tensor
) -> Tensor:
    s = _sequence_sum(logp_target - logp_behavior, mask)
    return torch.exp(s).to(logp_target.dtype) * (mask.sum(-1) > 0)


def tis_sequence_strict_cap(
    logp_target: Tensor, logp_behavior: Tensor, *, cap: float, mask: Tensor
) -> Tensor:
    s = _sequence_sum(logp_target - logp_behavior, mask)
    w = torch.exp(torch.clamp(s, max=50.0))
    keep = (w < cap) & (mask.sum(-1) > 0)
    return torch.where(keep, w, _zero(w)).to(logp_target.dtype)  # drops at the cap


def tis_sequence_one_if_empty(
    logp_target: Tensor, logp_behavior: Tensor, *, cap: float, mask: Tensor
) -> Tensor:
    s = _sequence_sum(logp_target - logp_behavior, mask)
    return torch.clamp(torch.exp(torch.clamp(s, max=50.0)), max=cap).to(logp_target.dtype)


def tis_geometric_divides_by_t(
    logp_target: Tensor, logp_behavior: Tensor, *, cap: float, mask: Tensor
) -> Tensor:
    g = _sequence_sum(logp_target - logp_behavior, mask) / mask.shape[-1]  # T, not the count
    w = torch.clamp(torch.exp(torch.clamp(g, max=50.0)), max=cap)
    return torch.where(mask.sum(-1) > 0, w, _zero(w)).to(logp_target.dtype)


def tis_geometric_no_cap(
    logp_target: Tensor, logp_behavior: Tensor, *, cap: float, mask: Tensor
) -> Tensor:
    n = mask.float().sum(-1)
    g = _sequence_sum(logp_target - logp_behavior, mask) / torch.clamp(n, min=1.0)
    w = torch.exp(g)
    return (w * (n > 0)).to(logp_target.dtype)


def tis_geometric_one_if_empty(
    logp_target: Tensor, logp_behavior: Tensor, *, cap: float, mask: Tensor
) -> Tensor:
    n = mask.float().sum(-1)
    g = _sequence_sum(logp_target - logp_behavior, mask) / torch.clamp(n, min=1.0)
    return torch.clamp(torch.exp(torch.clamp(g, max=50.0)), max=cap).to(logp_target.dtype)


def tis_geometric_drops_at_cap(
    logp_target: Tensor, logp_behavior: Tensor, *, cap: float, mask: Tensor
) -> Tensor:
    n = mask.float().sum(-1)
    g = _sequence_sum(logp_target - logp_behavior, mask) / torch.clamp(n, min=1.0)
    w = torch.exp(torch.clamp(g, max=50.0))
    return torch.where((w < cap) & (n > 0), w, _zero(w)).to(logp_target.dtype)


def tis_geometric_nan_if_empty(
    logp_target: Tensor, logp_behavior: Tensor, *, cap: float, mask: Tensor
) -> Tensor:
    g = _sequence_sum(logp_target - logp_behavior, mask) / mask.float().sum(-1)  # 0/0 if empty
    return torch.clamp(torch.exp(torch.clamp(g, max=50.0)), max=cap).to(logp_target.dtype)


def capacity_version_backwards(
    *, eta: int, version: int, batch: int, accepted: int, running: int, max_concurrent: int
) -> int:
    return min(max_concurrent - running, (eta + 1 - version) * batch - (accepted + running))


def mis_clipped(
    logp_target: Tensor, logp_behavior: Tensor, *, low: float, high: float, mask: Tensor
) -> Tensor:
    w = torch.clamp(torch.exp(logp_target - logp_behavior), low, high)  # clips instead of dropping
    return torch.where(mask > 0, w, _zero(w))


def mis_inverted(
    logp_target: Tensor, logp_behavior: Tensor, *, low: float, high: float, mask: Tensor
) -> Tensor:
    r = torch.exp(torch.clamp(logp_target - logp_behavior, max=50.0))
    keep = ((r < low) | (r > high)) & (mask > 0)
    return torch.where(keep, r, _zero(r))


def mis_naive_ratio(
    logp_target: Tensor, logp_behavior: Tensor, *, low: float, high: float, mask: Tensor
) -> Tensor:
    r = torch.exp(logp_target) / torch.exp(logp_behavior)  # 0/0 for log-probs below −104
    return torch.where((r >= low) & (r <= high), r, _zero(r)) * mask


def mis_sequence_clipped(
    logp_target: Tensor, logp_behavior: Tensor, *, low: float, high: float, mask: Tensor
) -> Tensor:
    s = _sequence_sum(logp_target - logp_behavior, mask)
    w = torch.clamp(torch.exp(torch.clamp(s, max=50.0)), low, high)
    return (w * (mask.sum(-1) > 0)).to(logp_target.dtype)


def mis_sequence_inverted(
    logp_target: Tensor, logp_behavior: Tensor, *, low: float, high: float, mask: Tensor
) -> Tensor:
    s = _sequence_sum(logp_target - logp_behavior, mask)
    r = torch.exp(torch.clamp(s, max=50.0))
    keep = ((r < low) | (r > high)) & (mask.sum(-1) > 0)
    return torch.where(keep, r, _zero(r)).to(logp_target.dtype)


def mis_sequence_nan_overflow(
    logp_target: Tensor, logp_behavior: Tensor, *, low: float, high: float, mask: Tensor
) -> Tensor:
    s = _sequence_sum(logp_target - logp_behavior, mask)
    r = torch.exp(s)  # inf for a sum beyond 88; inf·0 = NaN
    return (r * ((r >= low) & (r <= high))).to(logp_target.dtype)


def mis_sequence_one_if_empty(
    logp_target: Tensor, logp_behavior: Tensor, *, low: float, high: float, mask: Tensor
) -> Tensor:
    s = _sequence_sum(logp_target - logp_behavior, mask)
    return _band(s, low, high, torch.ones_like(s, dtype=torch.bool)).to(logp_target.dtype)


def mis_geometric_clipped(
    logp_target: Tensor, logp_behavior: Tensor, *, low: float, high: float, mask: Tensor
) -> Tensor:
    n = mask.float().sum(-1)
    g = _sequence_sum(logp_target - logp_behavior, mask) / torch.clamp(n, min=1.0)
    w = torch.clamp(torch.exp(g), low, high)
    return (w * (n > 0)).to(logp_target.dtype)


def mis_geometric_inverted(
    logp_target: Tensor, logp_behavior: Tensor, *, low: float, high: float, mask: Tensor
) -> Tensor:
    n = mask.float().sum(-1)
    g = _sequence_sum(logp_target - logp_behavior, mask) / torch.clamp(n, min=1.0)
    r = torch.exp(torch.clamp(g, max=50.0))
    keep = ((r < low) | (r > high)) & (n > 0)
    return torch.where(keep, r, _zero(r)).to(logp_target.dtype)


def mis_geometric_sum(
    logp_target: Tensor, logp_behavior: Tensor, *, low: float, high: float, mask: Tensor
) -> Tensor:
    s = _sequence_sum(logp_target - logp_behavior, mask)  # the product, not the geometric mean
    r = torch.exp(s)
    return (r * ((r >= low) & (r <= high)) * (mask.sum(-1) > 0)).to(logp_target.dtype)


def mis_geometric_one_if_empty(
    logp_target: Tensor, logp_behavior: Tensor, *, low: float, high: float, mask: Tensor
) -> Tensor:
    n = mask.float().sum(-1)
    g = _sequence_sum(logp_target - logp_behavior, mask) / torch.clamp(n, min=1.0)
    return _band(g, low, high, torch.ones_like(g, dtype=torch.bool)).to(logp_target.dtype)


def ppo_clipped(
    logp_prox: Tensor, logp_behavior: Tensor, *, cap: float | None, mask: Tensor
) -> Tensor:
    w = torch.exp(torch.clamp(logp_prox - logp_behavior, max=50.0))
    if cap is not None:
        w = torch.clamp(w, max=cap)  # clips instead of masking
    return torch.where(mask > 0, w, _zero(w))


def ppo_strict(
    logp_prox: Tensor, logp_behavior: Tensor, *, cap: float | None, mask: Tensor
) -> Tensor:
    w = torch.exp(torch.clamp(logp_prox - logp_behavior, max=50.0))
    keep = (mask > 0) & (w < (cap if cap is not None else float("inf")))
    return torch.where(keep, w, _zero(w))  # drops a weight equal to the cap (and ratio 1 at C=1)


def ppo_product_with_mask(
    logp_prox: Tensor, logp_behavior: Tensor, *, cap: float | None, mask: Tensor
) -> Tensor:
    w = torch.exp(logp_prox - logp_behavior)
    if cap is not None:
        w = w * (w <= cap)
    return w * mask  # inf·0 = NaN at padding


def ppo_swapped(
    logp_prox: Tensor, logp_behavior: Tensor, *, cap: float | None, mask: Tensor
) -> Tensor:
    return decoupled_ppo(logp_behavior, logp_prox, cap=cap, mask=mask)  # μ/π_prox


def ppo_ones_at_padding(
    logp_prox: Tensor, logp_behavior: Tensor, *, cap: float | None, mask: Tensor
) -> Tensor:
    w = decoupled_ppo(logp_prox, logp_behavior, cap=cap, mask=torch.ones_like(mask))
    return torch.where(mask > 0, w, torch.ones_like(w))


def ppo_ignores_cap(
    logp_prox: Tensor, logp_behavior: Tensor, *, cap: float | None, mask: Tensor
) -> Tensor:
    return decoupled_ppo(logp_prox, logp_behavior, cap=None, mask=mask)  # forgets the cap


def decay_linear(s: Tensor, *, gamma: float) -> Tensor:
    return torch.clamp(1 - (1 - gamma) * s.to(torch.float32), min=0.0)


def decay_off_by_one(s: Tensor, *, gamma: float) -> Tensor:
    return torch.pow(torch.tensor(gamma), s.to(torch.float32) + 1)


def decay_grows(s: Tensor, *, gamma: float) -> Tensor:
    return torch.pow(torch.tensor(gamma), -s.to(torch.float32))


def capacity_no_running(
    *, eta: int, version: int, batch: int, accepted: int, running: int, max_concurrent: int
) -> int:
    return min(max_concurrent - running, (eta + version + 1) * batch - accepted)


def capacity_versions_spanned(
    *, eta: int, version: int, batch: int, accepted: int, running: int, max_concurrent: int
) -> int:
    return min(max_concurrent - running, (eta + version) * batch - (accepted + running))


def capacity_inverted(
    *, eta: int, version: int, batch: int, accepted: int, running: int, max_concurrent: int
) -> int:
    return min(max_concurrent + running, (version + 1 - eta) * batch + running - accepted)


def ess_mean_squared(w: Tensor) -> Tensor:
    return w.mean() ** 2 / (w * w).mean()  # the fraction, not the count


def ess_unsquared(w: Tensor) -> Tensor:
    return w.sum() / (w * w).sum()


def diagnostics_counts_dropped(s: Tensor, w: Tensor) -> dict[str, Any]:
    out = masking_diagnostics(s, w)
    on = s == 0
    out["on_policy_dropped_fraction"] = (on & (w > 0)).sum() / torch.clamp(on.sum(), min=1)
    return out


def diagnostics_percent(s: Tensor, w: Tensor) -> dict[str, Any]:
    out = masking_diagnostics(s, w)
    out["kept_fraction"] = 100 * out["kept_fraction"]
    return out


def shaped_adds_price(
    quality: Tensor,
    length: Tensor,
    b: Tensor,
    *,
    k0: float,
    b_min: float,
    tau: float,
    length_scale: float,
) -> Tensor:
    return quality + k0 * torch.exp(-(b - b_min) / tau) * length / length_scale


def shaped_price_grows(
    quality: Tensor,
    length: Tensor,
    b: Tensor,
    *,
    k0: float,
    b_min: float,
    tau: float,
    length_scale: float,
) -> Tensor:
    return quality - (k0 + 1e-3) * torch.exp((b - b_min) / tau) * length / length_scale


def dapo_off_by_cache(
    lengths: Tensor, *, max_length: int, cache_length: int, penalty_factor: float
) -> Tensor:
    ramp = (max_length - lengths.float()) / cache_length  # starts the ramp at max_length
    return torch.clamp(ramp, min=-1.0, max=0.0) * penalty_factor


def dapo_positive(
    lengths: Tensor, *, max_length: int, cache_length: int, penalty_factor: float
) -> Tensor:
    ramp = (max_length - cache_length - lengths.float()) / cache_length
    return torch.clamp(ramp, min=-1.0) * penalty_factor  # rewards short answers


def dapo_unfloored(
    lengths: Tensor, *, max_length: int, cache_length: int, penalty_factor: float
) -> Tensor:
    ramp = (max_length - cache_length - lengths.float()) / cache_length
    return torch.clamp(ramp, max=0.0) * penalty_factor  # verl's variant, undeclared


def dapo_rises_again(
    lengths: Tensor, *, max_length: int, cache_length: int, penalty_factor: float
) -> Tensor:
    ramp = (max_length - cache_length - lengths.float()) / cache_length
    w = torch.clamp(ramp, min=-1.0, max=0.0) * penalty_factor
    return torch.where(lengths > max_length, _zero(w), w)  # forgives truncated answers


def kimi_no_wrong_clamp(lengths: Tensor, correct: Tensor) -> Tensor:
    ell = lengths.float()
    lo, hi = ell.min(-1, keepdim=True).values, ell.max(-1, keepdim=True).values
    return torch.where(hi > lo, 0.5 - (ell - lo) / torch.clamp(hi - lo, min=1.0), _zero(ell))


def kimi_divides_by_zero(lengths: Tensor, correct: Tensor) -> Tensor:
    ell = lengths.float()
    lo, hi = ell.min(-1, keepdim=True).values, ell.max(-1, keepdim=True).values
    lam = 0.5 - (ell - lo) / (hi - lo)  # 0/0 when every response is equally long
    return torch.where(correct, lam, torch.clamp(lam, max=0.0))


def kimi_unit_range(lengths: Tensor, correct: Tensor) -> Tensor:
    return 2 * kimi_length_reward(lengths, correct)


def cosine_swapped(lengths: Tensor, correct: Tensor, *, max_length: int) -> Tensor:
    return cosine_length_reward(lengths, ~correct, max_length=max_length)


def cosine_wrong_falls(lengths: Tensor, correct: Tensor, *, max_length: int) -> Tensor:
    progress = torch.clamp(lengths.float(), max=max_length) / max_length
    c = 0.5 * (1 + torch.cos(torch.pi * progress))
    return torch.where(correct, 0.5 + 0.5 * c, -1.0 + 0.5 * c)  # wrong: longer is worse


def cosine_correct_rises(lengths: Tensor, correct: Tensor, *, max_length: int) -> Tensor:
    progress = torch.clamp(lengths.float(), max=max_length) / max_length
    c = 0.5 * (1 - torch.cos(torch.pi * progress))
    return torch.where(correct, 0.5 + 0.5 * c, -0.5 - 0.5 * (1 - c))


def l1_exact_signed(
    lengths: Tensor, correct: Tensor, target_lengths: Tensor, *, alpha: float
) -> Tensor:
    return correct.float() - alpha * (target_lengths - lengths).float()  # no absolute value


def l1_exact_bonus(
    lengths: Tensor, correct: Tensor, target_lengths: Tensor, *, alpha: float
) -> Tensor:
    return correct.float() + 0.1 - alpha * (target_lengths - lengths).abs().float()


def l1_max_unclipped(
    lengths: Tensor, correct: Tensor, target_lengths: Tensor, *, alpha: float, delta: float
) -> Tensor:
    score = alpha * (target_lengths - lengths).float() + delta
    return torch.where(correct, score, torch.zeros_like(score))


def l1_max_wrong_scored(
    lengths: Tensor, correct: Tensor, target_lengths: Tensor, *, alpha: float, delta: float
) -> Tensor:
    return torch.clamp(alpha * (target_lengths - lengths).float() + delta, 0.0, 1.0)


def effort_wrong_sign(b: Tensor, *, k0: float, b_min: float, tau: float) -> Tensor:
    return k0 * torch.exp((b - b_min) / tau)


def mask_strict(s: Tensor, *, eta: int) -> Tensor:
    return (s < eta).to(torch.float32)


def staleness_newest(trained_step: int, token_versions: list[Tensor]) -> Tensor:
    return torch.stack([trained_step - v.max() for v in token_versions])


def vtrace_no_discount(*args: Tensor, **kwargs: float) -> tuple[Tensor, Tensor, Tensor]:
    v_tm1, v_t, r_t, discount_t, rho = args
    return vtrace(v_tm1, v_t, r_t, torch.ones_like(discount_t), rho, **kwargs)


def inclusion_counts_itself(cdf: Tensor, *, n: int, k: int) -> Tensor:
    return inclusion_probability(cdf, n=n + 1, k=k)


PLANTED: dict[str, list[tuple[Callable[..., Any], set[str]]]] = {
    "effort_penalty": [
        (effort_wrong_sign, {"agrees_with_reference"}),
    ],
    "inclusion_probability": [
        (inclusion_counts_itself, {"agrees_with_reference"}),
    ],
    "staleness_mask": [
        (mask_strict, {"keeps_at_bound"}),
    ],
    "staleness": [
        (staleness_newest, {"agrees_with_reference"}),
    ],
    "vtrace": [
        (vtrace_no_discount, {"agrees_with_reference"}),
    ],
    "tis": [
        (tis_no_cap, {"agrees_with_reference", "never_exceeds_cap", "finite_and_non_negative"}),
        (tis_drops_at_cap, {"agrees_with_reference", "on_policy_weight_is_one"}),
        (tis_one_at_padding, {"agrees_with_reference", "zero_at_padding"}),
    ],
    "masked_is": [
        (mis_clipped, {"agrees_with_reference", "zero_outside_band"}),
        (
            mis_inverted,
            {
                "agrees_with_reference",
                "on_policy_weight_is_one",
                "zero_outside_band",
                "equals_ratio_inside_band",
            },
        ),
        (mis_naive_ratio, {"agrees_with_reference"}),
    ],
    "tis_sequence": [
        (
            tis_sequence_ignores_mask,
            {"agrees_with_reference", "zero_at_padding"},
        ),
        (tis_sequence_two_sided, {"agrees_with_reference", "equals_ratio_below_cap"}),
        (
            tis_sequence_no_cap,
            {"agrees_with_reference", "never_exceeds_cap", "finite_and_non_negative"},
        ),
        (tis_sequence_strict_cap, {"agrees_with_reference", "on_policy_weight_is_one"}),
        (tis_sequence_one_if_empty, {"agrees_with_reference", "zero_at_padding"}),
    ],
    "tis_geometric": [
        (tis_geometric_divides_by_t, {"agrees_with_reference", "equals_ratio_below_cap"}),
        (tis_geometric_no_cap, {"agrees_with_reference", "never_exceeds_cap"}),
        (tis_geometric_one_if_empty, {"agrees_with_reference", "zero_at_padding"}),
        (tis_geometric_drops_at_cap, {"agrees_with_reference", "on_policy_weight_is_one"}),
        (
            tis_geometric_nan_if_empty,
            {
                "agrees_with_reference",
                "never_exceeds_cap",
                "finite_and_non_negative",
                "zero_at_padding",
            },
        ),
    ],
    "masked_is_sequence": [
        (mis_sequence_clipped, {"agrees_with_reference", "zero_outside_band"}),
        (
            mis_sequence_inverted,
            {
                "agrees_with_reference",
                "on_policy_weight_is_one",
                "zero_outside_band",
                "equals_ratio_inside_band",
            },
        ),
        (
            mis_sequence_nan_overflow,
            {
                "agrees_with_reference",
                "zero_outside_band",
                "finite_and_non_negative",
                "zero_at_padding",
            },
        ),
        (mis_sequence_one_if_empty, {"agrees_with_reference", "zero_at_padding"}),
    ],
    "masked_is_geometric": [
        (mis_geometric_clipped, {"agrees_with_reference", "zero_outside_band"}),
        (
            mis_geometric_inverted,
            {
                "agrees_with_reference",
                "on_policy_weight_is_one",
                "zero_outside_band",
                "equals_ratio_inside_band",
            },
        ),
        (
            mis_geometric_sum,
            {"agrees_with_reference", "zero_outside_band", "finite_and_non_negative"},
        ),
        (mis_geometric_one_if_empty, {"agrees_with_reference", "zero_at_padding"}),
    ],
    "decoupled_ppo": [
        (ppo_clipped, {"agrees_with_reference", "zero_above_cap"}),
        (ppo_strict, {"on_policy_weight_is_one"}),
        (ppo_product_with_mask, {"agrees_with_reference", "finite_and_non_negative"}),
        (ppo_swapped, {"agrees_with_reference", "zero_above_cap", "equals_ratio_up_to_cap"}),
        (ppo_ones_at_padding, {"agrees_with_reference", "zero_at_padding"}),
        (ppo_ignores_cap, {"agrees_with_reference", "never_exceeds_cap"}),
    ],
    "staleness_decay": [
        (decay_linear, {"agrees_with_reference"}),
        (decay_off_by_one, {"agrees_with_reference", "one_when_on_policy"}),
        (decay_grows, {"agrees_with_reference", "non_increasing_in_staleness", "in_unit_interval"}),
    ],
    "admission_capacity": [
        (capacity_no_running, {"agrees_with_reference"}),
        (capacity_versions_spanned, {"agrees_with_reference"}),
        (
            capacity_inverted,
            {"agrees_with_reference", "non_decreasing_in_eta", "non_increasing_in_running"},
        ),
        (capacity_version_backwards, {"agrees_with_reference", "non_decreasing_in_version"}),
    ],
    "effective_sample_size": [
        (ess_mean_squared, {"agrees_with_reference", "n_for_equal_weights", "between_one_and_n"}),
        (
            ess_unsquared,
            {
                "agrees_with_reference",
                "n_for_equal_weights",
                "invariant_to_scaling",
                "between_one_and_n",
            },
        ),
    ],
    "masking_diagnostics": [
        (
            diagnostics_counts_dropped,
            {"agrees_with_reference", "no_on_policy_dropped_by_a_staleness_mask"},
        ),
        (diagnostics_percent, {"agrees_with_reference", "fractions_in_unit_interval"}),
    ],
    "shaped_reward": [
        (
            shaped_adds_price,
            {"agrees_with_reference", "non_increasing_in_length", "non_decreasing_in_effort"},
        ),
        (
            shaped_price_grows,
            {"agrees_with_reference", "quality_when_the_price_is_zero", "non_decreasing_in_effort"},
        ),
    ],
    "dapo_overlong": [
        (dapo_off_by_cache, {"agrees_with_reference"}),
        (
            dapo_positive,
            {"agrees_with_reference", "zero_up_to_the_soft_limit", "between_minus_factor_and_zero"},
        ),
        (dapo_unfloored, {"agrees_with_reference", "between_minus_factor_and_zero"}),
        (dapo_rises_again, {"agrees_with_reference", "non_increasing_in_length"}),
    ],
    "kimi_length_reward": [
        (kimi_no_wrong_clamp, {"agrees_with_reference", "wrong_answers_never_rewarded"}),
        (
            kimi_divides_by_zero,
            {
                "agrees_with_reference",
                "wrong_answers_never_rewarded",
                "zero_without_length_spread",
                "between_minus_and_plus_half",
            },
        ),
        (kimi_unit_range, {"agrees_with_reference", "between_minus_and_plus_half"}),
    ],
    "cosine_length_reward": [
        (
            cosine_swapped,
            {
                "agrees_with_reference",
                "correct_shorter_is_better",
                "wrong_longer_is_better",
                "correct_beats_wrong",
            },
        ),
        (cosine_wrong_falls, {"agrees_with_reference", "wrong_longer_is_better"}),
        (cosine_correct_rises, {"agrees_with_reference", "correct_shorter_is_better"}),
    ],
    "l1_exact": [
        (l1_exact_signed, {"agrees_with_reference", "never_above_correctness"}),
        (
            l1_exact_bonus,
            {"agrees_with_reference", "correctness_at_the_target", "never_above_correctness"},
        ),
    ],
    "l1_max": [
        (l1_max_unclipped, {"agrees_with_reference", "in_unit_interval"}),
        (l1_max_wrong_scored, {"agrees_with_reference", "zero_when_wrong"}),
    ],
}


def test_every_spec_has_a_torch_implementation_and_planted_bugs() -> None:
    assert set(CORRECT) == set(spec_names()) == set(PLANTED)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("spec", spec_names())
def test_a_correct_torch_implementation_passes_with_one_call(spec: str, dtype: str) -> None:
    report = check_conformance(
        CORRECT[spec], spec=spec, xp="torch", dtype=dtype, max_examples=EXAMPLES
    )
    report.raise_if_failed()
    assert report.array == f"torch {dtype}"


@pytest.fixture(scope="module")
def planted_reports() -> dict[str, ConformanceReport]:
    """Each planted bug against the checks that must catch it (only those run, and unshrunk: the
    gate's cost; the numpy suite of test_testing.py shrinks its planted bugs)."""
    return {
        f.__name__: check_conformance(
            f,
            spec=spec,
            xp="torch",
            dtype="float32",
            max_examples=BUDGET.get(f.__name__, EXAMPLES),
            checks=must_fail,
            shrink=False,
        )
        for spec, planted in PLANTED.items()
        for f, must_fail in planted
    }


PLANTED_CASES = [(s, f, m) for s, fs in PLANTED.items() for f, m in fs]


@pytest.mark.parametrize(
    ("spec", "candidate", "must_fail"),
    PLANTED_CASES,
    ids=[f.__name__ for _, f, _ in PLANTED_CASES],
)
def test_a_planted_bug_is_caught_by_the_checks_that_target_it(
    spec: str,
    candidate: Callable[..., Any],
    must_fail: set[str],
    planted_reports: dict[str, ConformanceReport],
) -> None:
    report = planted_reports[candidate.__name__]
    failed = {r.name for r in report.results if r.status in ("failed", "raised")}
    assert failed == must_fail, report.summary()
    for r in report.failures:
        assert r.message
        assert r.counterexample
        assert "reproduce(candidate, " in r.reproduction


# The specs of the numpy suite (tests/test_testing.py) show every check failing there.
NEW_SPECS = [s for s in spec_names() if s not in test_testing.NUMPY_SPECS]


@pytest.mark.parametrize("spec", NEW_SPECS)
def test_every_check_fails_on_some_planted_bug(spec: str) -> None:
    shown = set().union(*(m for f, m in PLANTED[spec]))
    assert shown == set(check_names(spec))


# In float16 (tolerances 8 192 times float32's) one planted bug per spec: the first, except where
# another wrong-value bug is found in fewer draws (chosen when these runs shrank; now they do not).
FLOAT16_PLANTED = {spec: planted[0][0] for spec, planted in PLANTED.items()} | {
    "tis": tis_drops_at_cap,
    "masked_is": mis_naive_ratio,
    "tis_sequence": tis_sequence_strict_cap,
    "tis_geometric": tis_geometric_drops_at_cap,
    "masked_is_sequence": mis_sequence_nan_overflow,
    "masked_is_geometric": mis_geometric_one_if_empty,
    "decoupled_ppo": ppo_product_with_mask,
    "l1_max": l1_max_wrong_scored,
    "kimi_length_reward": kimi_divides_by_zero,
}


@pytest.mark.parametrize("spec", spec_names())
def test_a_planted_bug_is_caught_in_float16(spec: str) -> None:
    """A planted bug of every spec still fails agreement with the reference in float16."""
    candidate = FLOAT16_PLANTED[spec]
    assert any(candidate is f for f, _ in PLANTED[spec])
    report = check_conformance(
        candidate,
        spec=spec,
        xp="torch",
        dtype="float16",
        max_examples=EXAMPLES,
        checks=["agrees_with_reference"],
        shrink=False,
    )
    assert report["agrees_with_reference"].status in ("failed", "raised"), report.summary()
