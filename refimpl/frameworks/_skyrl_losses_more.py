"""SkyRL (skyrl 0.3.0): ``rollout_is_policy_loss`` and ``cross_entropy_loss``, read from
``skyrl/backends/skyrl_train/utils/ppo_utils.py``.

``rollout_is_policy_loss`` (``policy_loss_type="rollout_is"``) takes the ratio against the rollout
log-probabilities, ``safe_exp_delta(log_probs - rollout_logprobs, clip=20.0)`` (float32, log-ratio
clamped to ±20), keeps it only where ``1 - eps_clip_low < ratio < 1 + eps_clip_high`` (both ends
open; ``torch.where(in_range, ratio, 0)``), detaches it and returns
``reduce_loss(-(w * advantages * log_probs), loss_mask)``, the plain sum: the band-masked
importance-weighted policy gradient. It then calls ``apply_off_policy_correction`` with
``old_log_probs`` and the rollout log-probabilities; the adapter disables every correction
(``tis_ratio_type``, the sequence, outlier and token masks all ``None``), so that call returns the
loss and mask unchanged. ``cross_entropy_loss`` (``policy_loss_type="cross_entropy"``) ignores the
advantages and both anchors and returns ``reduce_loss(-log_probs, loss_mask)``.

Both are sums (SkyRL reduces by pre-scaling the advantages, see
:mod:`refimpl.frameworks._skyrl_losses`; the cross-entropy has no advantage to scale, so its sum is
the loss the worker multiplies by its ``dp_size`` factor), so the adapters declare
``output="scalar"``, ``aggregation="token_sum"``.
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter

_PPO = "skyrl.backends.skyrl_train.utils.ppo_utils"
_SCALAR = {"output": "scalar", "aggregation": "token_sum"}


def skyrl_rollout_is(
    logp: Any, logp_old: Any, advantages: Any, *, eps_low: Any, eps_high: Any, mask: Any
) -> Any:
    """``rollout_is_policy_loss`` with ``logp_old`` as both the rollout and the old log-probs and
    every off-policy correction off; returns its summed loss."""
    from omegaconf import OmegaConf

    from refimpl.frameworks import load_from_source

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    config = OmegaConf.create(
        {
            "eps_clip_low": float(eps_low),
            "eps_clip_high": float(eps_high),
            "off_policy_correction": {
                "tis_ratio_type": None,
                "sequence_mask_metric": None,
                "outlier_token_is_threshold_low": None,
                "outlier_token_is_threshold_high": None,
                "token_mask_is_threshold_low": None,
                "token_mask_is_threshold_high": None,
            },
        }
    )
    loss, _ = ppo["rollout_is_policy_loss"](
        logp, logp_old, advantages, config, loss_mask=mask, rollout_logprobs=logp_old
    )
    return loss


def skyrl_cross_entropy(logp: Any, *, mask: Any) -> Any:
    """``cross_entropy_loss``: the advantages and anchors it ignores are passed as zeros."""
    import torch

    from refimpl.frameworks import load_from_source

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    zeros = torch.zeros_like(logp)
    loss, _ = ppo["cross_entropy_loss"](logp, zeros, zeros, None, loss_mask=mask)
    return loss


ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="skyrl.policy_loss_rollout_is",
        framework="skyrl",
        function=f"{_PPO}:rollout_is_policy_loss",
        settings={
            "policy_loss_type": "rollout_is",
            "eps_clip_low": "eps_low",
            "eps_clip_high": "eps_high",
        },
        spec="band_masked_pg",
        conventions={**_SCALAR, "log_ratio_clamp": 20.0, "compute_dtype": "float32"},
        candidate=skyrl_rollout_is,
        note="Σ −sg[ρ·1(1−ε_l < ρ < 1+ε_h)]·A·logp with ρ against the rollout log-probs "
        "(safe_exp_delta), off-policy corrections off.",
    ),
    Adapter(
        key="skyrl.policy_loss_cross_entropy",
        framework="skyrl",
        function=f"{_PPO}:cross_entropy_loss",
        settings={"policy_loss_type": "cross_entropy"},
        spec="nll",
        conventions={**_SCALAR},
        candidate=skyrl_cross_entropy,
        note="Σ −logp·mask (Tinker's cross_entropy); advantages and anchors unused.",
    ),
)

__all__ = ["ADAPTERS"]
