"""verl (verl 0.9.1): the KL penalty in the reward, read from its installed sources.

- ``verl/trainer/ppo/ray_trainer.py:apply_kl_penalty(data, kl_ctrl, kl_penalty="kl")`` (the
  trainer's path when ``algorithm.use_kl_in_reward=True``): ``kld = kl_penalty(old_log_probs,
  ref_log_prob, kl_penalty) · response_mask`` and ``token_level_rewards = token_level_scores −
  kl_ctrl.value · kld``; the controller is then updated with the batch's mean per-row KL (a
  ``FixedKLController`` keeps its value). No reward clip; padding carries 0.
- ``verl/trainer/ppo/core_algos.py:compute_rewards(token_level_scores, old_log_prob,
  ref_log_prob, kl_ratio)``: ``token_level_scores − (old_log_prob − ref_log_prob) · kl_ratio``
  with no mask (padding carries ``−kl_ratio·kl``); no caller in verl 0.9.1 uses it.

- ``verl/trainer/ppo/core_algos.py:AdaptiveKLController(init_kl_coef, target_kl, horizon)``
  (``algorithm.kl_ctrl.type="adaptive"``): ``update(current_kl, n_steps)`` multiplies ``value`` by
  ``1 + clip(current_kl/target − 1, −0.2, 0.2)·n_steps/horizon``; ``apply_kl_penalty`` calls it
  with the batch size as ``n_steps``.

The outcome enters as verl's reward managers write it, on each row's last valid token
(``valid_response_length − 1``); the KL as k1 against a reference log-probability of 0.
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter


def verl_outcome_scores(rewards: Any, mask: Any) -> Any:
    """``token_level_scores``: each row's outcome on its last valid token, 0 elsewhere (a row
    without a valid token carries nothing)."""
    import torch

    m = torch.as_tensor(mask, dtype=torch.float64)
    last = (m.shape[1] - 1 - torch.flip(m, dims=[1]).argmax(dim=1)).clamp(min=0)
    scores = torch.zeros_like(m)
    scores[torch.arange(m.shape[0]), last] = torch.as_tensor(rewards, dtype=torch.float64)
    return scores * m


def verl_apply_kl_penalty(
    rewards: Any, kl: Any, *, beta: float, reward_clip: Any, mask: Any
) -> Any:
    """``apply_kl_penalty(data, FixedKLController(beta), kl_penalty="kl")`` on a ``DataProto``
    holding the scores, ``old_log_probs = kl``, ``ref_log_prob = 0`` and the response mask;
    ``reward_clip`` is always None (verl has none)."""
    import torch
    from verl import DataProto
    from verl.trainer.ppo.core_algos import FixedKLController
    from verl.trainer.ppo.ray_trainer import apply_kl_penalty

    from refimpl.frameworks._verl_losses_reward import verl_outcome_scores

    tensors = {
        "token_level_scores": verl_outcome_scores(rewards, mask),
        "old_log_probs": torch.as_tensor(kl, dtype=torch.float64),
        "ref_log_prob": torch.zeros_like(torch.as_tensor(kl, dtype=torch.float64)),
        "response_mask": torch.as_tensor(mask, dtype=torch.float64),
    }
    data, _ = apply_kl_penalty(DataProto.from_dict(tensors=tensors), FixedKLController(float(beta)))
    return data.batch["token_level_rewards"]


def verl_compute_rewards(rewards: Any, kl: Any, *, beta: float, reward_clip: Any, mask: Any) -> Any:
    """``compute_rewards(scores, old_log_prob=kl, ref_log_prob=0, kl_ratio=beta)``."""
    import torch
    from verl.trainer.ppo.core_algos import compute_rewards

    from refimpl.frameworks._verl_losses_reward import verl_outcome_scores

    kl = torch.as_tensor(kl, dtype=torch.float64)
    return compute_rewards(
        verl_outcome_scores(rewards, mask), kl, torch.zeros_like(kl), float(beta)
    )


def verl_adaptive_kl_controller(
    coef: Any, current_kl: Any, *, target: Any, horizon: Any, n_steps: Any
) -> float:
    """``AdaptiveKLController(init_kl_coef=coef, target_kl=target, horizon=horizon)``, one
    ``update(current_kl, n_steps)``, then its ``value``."""
    from verl.trainer.ppo.core_algos import AdaptiveKLController

    ctrl = AdaptiveKLController(float(coef), float(target), int(horizon))
    ctrl.update(current_kl=float(current_kl), n_steps=int(n_steps))
    return float(ctrl.value)


ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="verl.apply_kl_penalty",
        framework="verl",
        function="verl.trainer.ppo.ray_trainer:apply_kl_penalty",
        settings={"use_kl_in_reward": True, "kl_penalty": "kl", "kl_ctrl.type": "fixed"},
        spec="kl_reward",
        conventions={"reward_clip": "none"},
        candidate=verl_apply_kl_penalty,
        note="token_level_scores − β·k1·mask, the outcome on the last valid token; no reward clip.",
    ),
    Adapter(
        key="verl.compute_rewards",
        framework="verl",
        function="verl.trainer.ppo.core_algos:compute_rewards",
        settings={"kl_ratio": "beta"},
        spec="kl_reward",
        conventions={"reward_clip": "none", "padding": "ignored"},
        candidate=verl_compute_rewards,
        note="token_level_scores − (old − ref)·kl_ratio, unmasked (no caller in verl 0.9.1).",
    ),
    Adapter(
        key="verl.adaptive_kl_controller",
        framework="verl",
        function="verl.trainer.ppo.core_algos:AdaptiveKLController.update",
        settings={"kl_ctrl.type": "adaptive", "kl_ctrl.target_kl": "target"},
        spec="adaptive_kl_coefficient",
        conventions={},
        candidate=verl_adaptive_kl_controller,
        note="value·(1 + clip(KL/target − 1, ±0.2)·n_steps/horizon); n_steps the batch size.",
    ),
)

__all__ = ["ADAPTERS"]
