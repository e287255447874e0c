"""Framework conventions are declared in one argument instead of failing.

Each candidate below is written the way a framework writes it (the convention it follows is named
next to it, as read from the installed sources: see the docs' conventions page). Without the
declaration it fails, and the message names the convention when one explains the counterexample;
with the declaration it passes in float32.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from refimpl.testing import check_conformance, conventions

EXAMPLES = 15
Tensor = torch.Tensor


def verl_token_tis(log_ratio: Tensor, *, cap: float, mask: Tensor) -> Tensor:
    """verl: one log-ratio input, clamped to ±20 before exp, zero at padding."""
    w = torch.exp(torch.clamp(log_ratio, -20.0, 20.0))
    return torch.where(mask > 0, torch.clamp(w, max=cap), torch.zeros_like(w))


def verl_sequence_tis(log_ratio: Tensor, *, cap: float, mask: Tensor) -> Tensor:
    """verl: the sequence sum clamped to ±20, broadcast to every token, zero at padding."""
    s = torch.clamp(torch.where(mask > 0, log_ratio, 0.0).sum(-1, keepdim=True), -20.0, 20.0)
    w = torch.clamp(torch.exp(s), max=cap).expand_as(mask)
    return torch.where(mask > 0, w, torch.zeros_like(w))


def skyrl_sequence_tis(
    logp_target: Tensor, logp_behavior: Tensor, *, cap: float, mask: Tensor
) -> Tensor:
    """SkyRL: (B, 1), the sum clamped to ±20 and exp in float32; an empty row gets exp(0) = 1."""
    s = torch.where(mask > 0, logp_target - logp_behavior, 0.0).sum(-1, keepdim=True)
    return torch.clamp(torch.exp(torch.clamp(s.float(), -20, 20)), max=cap).to(logp_target.dtype)


def skyrl_token_mask(
    logp_target: Tensor, logp_behavior: Tensor, *, low: float, high: float, mask: Tensor
) -> Tensor:
    """SkyRL: a 0/1 indicator of lo <= ρ <= hi, 1 at padding."""
    r = torch.exp(torch.clamp(logp_target - logp_behavior, -20, 20))
    return (((r >= low) & (r <= high)) | (mask == 0)).to(logp_target.dtype)


def verl_k1_sequence_mask(log_ratio: Tensor, *, low: float, high: float, mask: Tensor) -> Tensor:
    """verl seq_sum_k1: each token's log ρ clamped to ±20, k1 = −Σ log ρ in [log lo, log hi]."""
    k1 = -torch.where(mask > 0, torch.clamp(log_ratio, -20.0, 20.0), 0.0).sum(-1)
    keep = (k1 >= torch.log(torch.tensor(low))) & (k1 <= torch.log(torch.tensor(high)))
    return keep.to(log_ratio.dtype)


def ppo_row_means(
    logp: Tensor, logp_old: Tensor, advantages: Tensor, *, eps_low: float, eps_high: float | None,
    dual_clip: float | None, mask: Tensor,
) -> Tensor:  # fmt: skip
    """PPO's clipped loss, each row's token mean as OpenRLHF 0.11.2's ``masked_mean(dim=-1)``
    takes it (``openrlhf/models/utils.py``: ``(x·mask).sum(-1) / mask.sum(-1)``, no guard: an
    empty row is 0/0), averaged over the rows; the log-ratio clamped to ±20."""
    r = torch.exp(torch.clamp(logp - logp_old, -20.0, 20.0))
    high = eps_low if eps_high is None else eps_high
    loss = torch.maximum(-advantages * r, -advantages * torch.clamp(r, 1 - eps_low, 1 + high))
    if dual_clip is not None:
        loss = torch.where(advantages < 0, torch.minimum(loss, -advantages * dual_clip), loss)
    loss = torch.where(mask > 0, loss, torch.zeros_like(loss))
    return (loss.sum(-1) / mask.sum(-1)).mean()


def areal_geometric(
    logp_prox: Tensor, logp_old: Tensor, *, low: float, high: float, cu_seqlens: Tensor
) -> Tensor:
    """AReaL: packed tokens, non-finite log ρ → 0, a geometric-mean filter and weight."""
    d = logp_prox.float() - logp_old.float()
    d = torch.where(torch.isfinite(d), d, torch.zeros_like(d))
    out = torch.zeros_like(d)
    for i in range(len(cu_seqlens) - 1):
        a, b = int(cu_seqlens[i]), int(cu_seqlens[i + 1])
        if b > a:
            g = torch.exp(d[a:b].mean())
            out[a:b] = torch.where((g >= low) & (g <= high), g, torch.zeros_like(g))
    return out.to(logp_prox.dtype)


def verl_drop_stale(s: Tensor, *, eta: int) -> Tensor:
    """verl's replay buffer: dropped iff s + 1 > max_off_policy_threshold."""
    return (s + 1 <= eta).to(torch.float32)


def verl_dapo(
    lengths: Tensor, *, max_length: int, cache_length: int, penalty_factor: float
) -> Tensor:
    """verl's DAPO reward manager: no floor at −1."""
    ramp = (max_length - cache_length - lengths.float()) / cache_length
    return torch.clamp(ramp, max=0.0) * penalty_factor


CASES: list[tuple[str, Any, dict[str, Any], str]] = [
    # the ±20 clamp changes only weights below e^-20 here: no hint expected
    ("tis", verl_token_tis, {"inputs": "log_ratio", "log_ratio_clamp": 20.0}, ""),
    (
        "tis_sequence",
        verl_sequence_tis,
        {"inputs": "log_ratio", "log_ratio_clamp": 20.0, "output": "BT"},
        "output",
    ),
    (
        "tis_sequence",
        skyrl_sequence_tis,
        {"log_ratio_clamp": 20.0, "output": "B1", "padding": "one", "compute_dtype": "float32"},
        "output",
    ),
    (
        "masked_is",
        skyrl_token_mask,
        {"log_ratio_clamp": 20.0, "weight": "indicator", "padding": "one"},
        "padding",
    ),
    (
        "masked_is_sequence",
        verl_k1_sequence_mask,
        {
            "inputs": "log_ratio",
            "band_on": "reciprocal",
            "weight": "indicator",
            "log_ratio_clamp": 20.0,
            "clamp_at": "token",
            "empty_rows": "excluded",
        },
        "",
    ),
    (
        "masked_is_geometric",
        areal_geometric,
        {"layout": "packed", "weight": "geometric", "nonfinite": "one"},
        "",
    ),
    (
        "ppo_clip",
        ppo_row_means,
        {
            "log_ratio_clamp": 20.0,
            "output": "scalar",
            "aggregation": "seq_mean_token_mean",
            "empty_rows": "excluded",
            "empty_batch": "excluded",
        },
        "",
    ),
    # the smallest counterexample has eta = 0, where counting versions spanned is undefined
    ("staleness_mask", verl_drop_stale, {"staleness_count": "versions_spanned"}, ""),
    ("dapo_overlong", verl_dapo, {"floor": False}, "floor"),
]


@pytest.mark.parametrize(
    ("spec", "candidate", "declared", "hint"), CASES, ids=[c[1].__name__ for c in CASES]
)
def test_a_framework_convention_is_declared_in_one_argument(
    spec: str, candidate: Any, declared: dict[str, Any], hint: str
) -> None:
    keys = {c.key for c in conventions(spec)}
    assert set(declared) <= keys
    report = check_conformance(
        candidate,
        spec=spec,
        xp="torch",
        dtype="float32",
        conventions=declared,
        max_examples=EXAMPLES,
    )
    report.raise_if_failed()
    assert report.conventions == {**{c.key: c.default for c in conventions(spec)}, **declared}
    if hint:  # undeclared, the failure is explained by the one convention
        partial = {k: v for k, v in declared.items() if k != hint and k in ("inputs", "layout")}
        bare = check_conformance(
            candidate,
            spec=spec,
            xp="torch",
            dtype="float32",
            conventions=partial,
            max_examples=EXAMPLES,
            checks=["agrees_with_reference"],
        )
        assert not bare.ok
        assert "conventions=" in bare.results[0].message, bare.summary()
