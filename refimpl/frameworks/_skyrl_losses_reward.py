"""SkyRL (skyrl 0.3.0): the KL penalty in the reward, read from ``skyrl/train/trainer.py``
``RayPPOTrainer.apply_reward_kl_penalty`` (``trainer.algorithm.use_kl_in_reward=True``, exclusive
with ``use_kl_loss``).

The method computes ``kl = compute_approx_kl(action_log_probs, base_action_log_probs,
loss_mask=loss_mask, kl_estimator_type=...)`` under ``torch.no_grad`` (0 where the loss mask is 0)
and replaces the token rewards ``data["rewards"]`` by ``rewards − kl · max(0, kl_loss_coef)``,
the coefficient being ``reward_kl_controller.value`` when a controller is set (``get_kl_controller``:
fixed at ``kl_loss_coef``, or adaptive between steps). The outcome reward is already a token
reward: SkyRL's generators give each response a list of per-token rewards, the scalar one on its
last token, which ``convert_prompts_responses_to_batch_tensors`` right-aligns. There is no reward
clipping: the spec's convention ``reward_clip="none"``.

The controller itself, ``skyrl/backends/skyrl_train/utils/ppo_utils.py:AdaptiveKLController``
(chosen by ``get_kl_controller`` when ``kl_ctrl.type == "adaptive"``, with ``init_kl_coef =
kl_loss_coef``, ``target = kl_ctrl.kl_target``, ``horizon = kl_ctrl.horizon``): ``update(current,
n_steps)`` multiplies ``value`` by ``1 + clip(current/target − 1, −0.2, 0.2)·n_steps/horizon``; the
trainer passes the batch's mean KL and the batch size. ``ppo_utils`` is loaded from its source
(see :mod:`refimpl.frameworks._skyrl_losses`).

The first adapter runs the method on ``RayPPOTrainer.__new__`` with ``reward_kl_controller = None`` (the
coefficient is then ``kl_loss_coef``, what the fixed controller holds), on SkyRL's own
``TrainingInputBatch``: the spec's outcome reward on each row's last valid token, 0 elsewhere, and
its per-token KL passed through ``kl_estimator_type="k1"`` as ``action_log_probs`` against base
log-probs 0 (``k1`` is their difference, masked).
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter

_PENALTY = "skyrl.train.trainer:RayPPOTrainer.apply_reward_kl_penalty"


def skyrl_reward_kl_penalty(
    rewards: Any, kl: Any, *, beta: float, reward_clip: Any, mask: Any
) -> Any:
    """``RayPPOTrainer.apply_reward_kl_penalty`` with ``kl_loss_coef=beta``, the outcome on each
    row's last valid token, the KL as k1 against base 0; ``reward_clip`` is always None (no clip)."""
    import types

    import torch

    from refimpl.frameworks import install_stubs, load_from_source

    install_stubs()
    from skyrl.backends.skyrl_train.training_batch import TrainingInputBatch

    cls = load_from_source("skyrl.train.trainer")["RayPPOTrainer"]
    trainer = cls.__new__(cls)
    algorithm = types.SimpleNamespace(kl_estimator_type="k1", kl_loss_coef=float(beta))
    trainer.cfg = types.SimpleNamespace(trainer=types.SimpleNamespace(algorithm=algorithm))
    trainer.reward_kl_controller = None
    trainer.all_metrics = {}
    m = torch.as_tensor(mask, dtype=torch.float64)
    last = (m.shape[1] - 1 - torch.flip(m, dims=[1]).argmax(dim=1)).clamp(min=0)
    outcome = torch.zeros_like(m)
    outcome[torch.arange(m.shape[0]), last] = torch.as_tensor(rewards, dtype=torch.float64)
    data = TrainingInputBatch(
        {
            "rewards": outcome * m,
            "loss_mask": m,
            "action_log_probs": torch.as_tensor(kl, dtype=torch.float64),
            "base_action_log_probs": torch.zeros_like(m),
        }
    )
    data.metadata = {}
    return trainer.apply_reward_kl_penalty(data)["rewards"]


def skyrl_adaptive_kl_controller(
    coef: Any, current_kl: Any, *, target: Any, horizon: Any, n_steps: Any
) -> float:
    """``get_kl_controller`` with ``kl_ctrl.type="adaptive"`` (an ``AdaptiveKLController``), one
    ``update(current_kl, n_steps)``, then its ``value``."""
    import types

    from refimpl.frameworks import load_from_source

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    kl_ctrl = types.SimpleNamespace(type="adaptive", kl_target=float(target), horizon=int(horizon))
    cfg = types.SimpleNamespace(kl_ctrl=kl_ctrl, kl_loss_coef=float(coef))
    ctrl = ppo["get_kl_controller"](cfg)
    assert isinstance(ctrl, ppo["AdaptiveKLController"]), type(ctrl)
    ctrl.update(current=float(current_kl), n_steps=int(n_steps))
    return float(ctrl.value)


ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="skyrl.reward_kl_penalty",
        framework="skyrl",
        function=_PENALTY,
        settings={"use_kl_in_reward": True, "kl_estimator_type": "k1", "kl_loss_coef": "beta"},
        spec="kl_reward",
        conventions={"reward_clip": "none"},
        candidate=skyrl_reward_kl_penalty,
        note="token rewards − k1·max(0, kl_loss_coef), the outcome on the last valid token; no "
        "reward clip.",
    ),
    Adapter(
        key="skyrl.adaptive_kl_controller",
        framework="skyrl",
        function="skyrl.backends.skyrl_train.utils.ppo_utils:AdaptiveKLController.update",
        settings={"kl_ctrl.type": "adaptive", "kl_ctrl.kl_target": "target"},
        spec="adaptive_kl_coefficient",
        conventions={},
        candidate=skyrl_adaptive_kl_controller,
        note="value·(1 + clip(KL/target − 1, ±0.2)·n_steps/horizon); n_steps the batch size.",
    ),
)

__all__ = ["ADAPTERS"]
