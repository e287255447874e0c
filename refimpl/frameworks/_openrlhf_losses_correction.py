"""OpenRLHF (openrlhf 0.11.2): the vLLM mismatch correction inside ``PolicyLoss.forward``.

``openrlhf/models/loss.py:PolicyLoss.forward`` with ``is_correction_level != "off"`` (``ppo`` only)
multiplies each token's PPO loss by a detached weight of ``ρ = π_old/π_rollout``
(``is_log_ratio = old_log_probs − rollout_log_probs``, no clamp before ``exp``), with
``is_correction_threshold = (low, high)``:

- ``mode="clip"`` (token level, ratio gating): ``clamp(ρ, low, high)``, a two-sided TIS;
- ``mode="mask"``, ratio gating: tokens (``level="token"``) or sequences (``level="seq"``, the
  statistic ``exp(masked_mean(log ρ))``, the geometric mean) outside ``[low, high]`` (bounds kept)
  get 0, the others keep their **token** ratio ``ρ``;
- ``binary_kl`` / ``tv`` gating (``mode="mask"``): the statistic is a divergence of the sampled
  token's probabilities ``p = exp(rollout_log_probs)``, ``q = exp(old_log_probs)``, both clamped
  to ``[1e-6, 1 − 1e-6]``: the binary KL ``p·log(p/q) + (1 − p)·log((1 − p)/(1 − q))`` or
  ``|p − q|``, per token or its ``masked_mean`` over the row (``level="seq"``); the constructor
  requires the lower threshold ``<= 0`` (the CLI's single value is the upper bound, low 0), so a
  unit is kept where the statistic is ``<= δ`` (and ``>= 0``), with its token ratio ``ρ``.

The weight is not returned: the loss is. Each candidate drives the real ``forward`` at
``log_probs = old_log_probs`` (PPO ratio 1, so each token's loss is ``−weight·A``) and reads the
weight back as ``−∂loss/∂A`` with ``batch_num_tokens = 1`` (the token-level sum): the weight of
every valid token, 0 at padding (where the loss mask drops it).
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter

_LOSS = "openrlhf.models.loss"


def openrlhf_is_token_clip(logp_target: Any, logp_behavior: Any, *, cap: float, mask: Any) -> Any:
    """``PolicyLoss(is_correction_level="token", is_correction_mode="clip")``, threshold (0.5, cap).

    The weight multiplying each token's loss in ``PolicyLoss.forward``, read as ``−∂loss/∂A``.
    """
    import torch
    from openrlhf.models.loss import PolicyLoss

    loss_fn = PolicyLoss(
        is_correction_level="token",
        is_correction_mode="clip",
        is_correction_threshold=(0.5, float(cap)),
    )
    advantages = torch.zeros_like(logp_target, requires_grad=True)
    old = logp_target.detach()
    loss, *_ = loss_fn.forward(
        old,
        old,
        advantages,
        action_mask=mask,
        rollout_log_probs=logp_behavior,
        batch_num_tokens=1.0,
    )
    (grad,) = torch.autograd.grad(loss, advantages)
    return -grad


def openrlhf_is_token_mask(
    logp_target: Any, logp_behavior: Any, *, low: float, high: float, mask: Any
) -> Any:
    """``PolicyLoss(is_correction_level="token", is_correction_mode="mask")``, threshold (low, high).

    The weight multiplying each token's loss in ``PolicyLoss.forward``, read as ``−∂loss/∂A``.
    """
    import torch
    from openrlhf.models.loss import PolicyLoss

    loss_fn = PolicyLoss(
        is_correction_level="token",
        is_correction_mode="mask",
        is_correction_threshold=(float(low), float(high)),
    )
    advantages = torch.zeros_like(logp_target, requires_grad=True)
    old = logp_target.detach()
    loss, *_ = loss_fn.forward(
        old,
        old,
        advantages,
        action_mask=mask,
        rollout_log_probs=logp_behavior,
        batch_num_tokens=1.0,
    )
    (grad,) = torch.autograd.grad(loss, advantages)
    return -grad


def openrlhf_is_seq_mask(
    logp_target: Any, logp_behavior: Any, *, low: float, high: float, mask: Any
) -> Any:
    """``PolicyLoss(is_correction_level="seq", is_correction_mode="mask")``, threshold (low, high).

    The weight multiplying each token's loss in ``PolicyLoss.forward``, read as ``−∂loss/∂A``.
    """
    import torch
    from openrlhf.models.loss import PolicyLoss

    loss_fn = PolicyLoss(
        is_correction_level="seq",
        is_correction_mode="mask",
        is_correction_threshold=(float(low), float(high)),
    )
    advantages = torch.zeros_like(logp_target, requires_grad=True)
    old = logp_target.detach()
    loss, *_ = loss_fn.forward(
        old,
        old,
        advantages,
        action_mask=mask,
        rollout_log_probs=logp_behavior,
        batch_num_tokens=1.0,
    )
    (grad,) = torch.autograd.grad(loss, advantages)
    return -grad


def openrlhf_is_divergence_gate(
    logp_target: Any,
    logp_behavior: Any,
    *,
    delta: float,
    mask: Any,
    gating: str = "binary_kl",
    level: str = "token",
) -> Any:
    """``PolicyLoss(is_correction_mode="mask", is_correction_gating=gating,
    is_correction_level=level)``, threshold ``(0, delta)`` as the CLI sets a single value.

    The weight multiplying each token's loss in ``PolicyLoss.forward``, read as ``−∂loss/∂A``.
    """
    import torch
    from openrlhf.models.loss import PolicyLoss

    loss_fn = PolicyLoss(
        is_correction_level=level,
        is_correction_mode="mask",
        is_correction_gating=gating,
        is_correction_threshold=(0.0, float(delta)),
    )
    advantages = torch.zeros_like(logp_target, requires_grad=True)
    old = logp_target.detach()
    loss, *_ = loss_fn.forward(
        old,
        old,
        advantages,
        action_mask=mask,
        rollout_log_probs=logp_behavior,
        batch_num_tokens=1.0,
    )
    (grad,) = torch.autograd.grad(loss, advantages)
    return -grad


def openrlhf_is_binary_kl_token(
    logp_target: Any, logp_behavior: Any, *, delta: float, mask: Any
) -> Any:
    """``PolicyLoss.forward`` with ``is_correction_gating="binary_kl"``, ``is_correction_level="token"``."""
    from refimpl.frameworks._openrlhf_losses_correction import openrlhf_is_divergence_gate

    return openrlhf_is_divergence_gate(
        logp_target, logp_behavior, delta=delta, mask=mask, gating="binary_kl", level="token"
    )


def openrlhf_is_binary_kl_seq(
    logp_target: Any, logp_behavior: Any, *, delta: float, mask: Any
) -> Any:
    """``PolicyLoss.forward`` with ``is_correction_gating="binary_kl"``, ``is_correction_level="seq"``."""
    from refimpl.frameworks._openrlhf_losses_correction import openrlhf_is_divergence_gate

    return openrlhf_is_divergence_gate(
        logp_target, logp_behavior, delta=delta, mask=mask, gating="binary_kl", level="seq"
    )


def openrlhf_is_tv_token(logp_target: Any, logp_behavior: Any, *, delta: float, mask: Any) -> Any:
    """``PolicyLoss.forward`` with ``is_correction_gating="tv"``, ``is_correction_level="token"``."""
    from refimpl.frameworks._openrlhf_losses_correction import openrlhf_is_divergence_gate

    return openrlhf_is_divergence_gate(
        logp_target, logp_behavior, delta=delta, mask=mask, gating="tv", level="token"
    )


def openrlhf_is_tv_seq(logp_target: Any, logp_behavior: Any, *, delta: float, mask: Any) -> Any:
    """``PolicyLoss.forward`` with ``is_correction_gating="tv"``, ``is_correction_level="seq"``."""
    from refimpl.frameworks._openrlhf_losses_correction import openrlhf_is_divergence_gate

    return openrlhf_is_divergence_gate(
        logp_target, logp_behavior, delta=delta, mask=mask, gating="tv", level="seq"
    )


_CANDIDATES = {
    ("binary_kl", "token"): openrlhf_is_binary_kl_token,
    ("binary_kl", "seq"): openrlhf_is_binary_kl_seq,
    ("tv", "token"): openrlhf_is_tv_token,
    ("tv", "seq"): openrlhf_is_tv_seq,
}


def _gate_adapter(gating: str, level: str) -> Adapter:
    return Adapter(
        key=f"openrlhf.is_correction_{gating}_{level}",
        framework="openrlhf",
        function=f"{_LOSS}:PolicyLoss.forward",
        settings={
            "is_correction_level": level,
            "is_correction_mode": "mask",
            "is_correction_gating": gating,
            "is_correction_threshold": "(0, delta)",
        },
        spec="divergence_gated_is" if level == "token" else "divergence_gated_is_sequence",
        conventions={"divergence": gating, "prob_clamp": 1e-6},
        candidate=_CANDIDATES[gating, level],
        note=f"Each token's ρ where the {gating} of its probabilities"
        f"{' (the row mean)' if level == 'seq' else ''} is within δ, else 0.",
    )


ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="openrlhf.is_correction_token_clip",
        framework="openrlhf",
        function=f"{_LOSS}:PolicyLoss.forward",
        settings={
            "is_correction_level": "token",
            "is_correction_mode": "clip",
            "is_correction_gating": "ratio",
            "is_correction_threshold": "(0.5, cap)",
        },
        spec="tis",
        conventions={"lower": 0.5},
        candidate=openrlhf_is_token_clip,
        note="clamp(π_old/π_rollout, 0.5, cap) per token, read from the loss's gradient in A.",
    ),
    Adapter(
        key="openrlhf.is_correction_token_mask",
        framework="openrlhf",
        function=f"{_LOSS}:PolicyLoss.forward",
        settings={
            "is_correction_level": "token",
            "is_correction_mode": "mask",
            "is_correction_gating": "ratio",
            "is_correction_threshold": "(low, high)",
        },
        spec="masked_is",
        conventions={"weight": "ratio"},
        candidate=openrlhf_is_token_mask,
        note="ρ where low <= ρ <= high, else 0, per token (IcePop), read from the gradient in A.",
    ),
    Adapter(
        key="openrlhf.is_correction_seq_mask",
        framework="openrlhf",
        function=f"{_LOSS}:PolicyLoss.forward",
        settings={
            "is_correction_level": "seq",
            "is_correction_mode": "mask",
            "is_correction_gating": "ratio",
            "is_correction_threshold": "(low, high)",
        },
        spec="masked_is_geometric",
        conventions={"weight": "token", "output": "BT", "aggregate": "mean"},
        candidate=openrlhf_is_seq_mask,
        note="Each token's ρ where the row's geometric-mean ratio is in [low, high], else 0.",
    ),
    *(_gate_adapter(g, lvl) for g in ("binary_kl", "tv") for lvl in ("token", "seq")),
)

__all__ = ["ADAPTERS"]
