"""OpenRLHF (openrlhf 0.11.2): the KL penalty in the reward, read from
``openrlhf/models/utils.py:compute_reward``.

``compute_reward(r, kl_coef, kl, action_mask, reward_clip_range)`` replaces a ``kl_coef <= 0`` by
0, clamps ``r`` to ``reward_clip_range`` when one is given (the CLI's default is ``(-10, 10)``),
scatters each row's reward onto its last valid token (``size − 1 − argmax`` of the flipped mask)
and adds ``−kl_coef·kl`` at every position. The KL term is not masked, and a row without a valid
token gets its reward at position ``T − 1``: both are padding, which ``get_cumulative_returns``
(``rewards = action_mask * rewards``) and GAE multiply by the mask, so the adapter declares
``padding="ignored"``. ``RemoteExperienceMaker.compute_advantages_and_returns`` calls it for every
advantage estimator with ``self.kl_ctl.value`` and the experience's ``kl``.

The same method's ``advantage.estimator="flash_reinforce"`` (FlashREINFORCE, the single-rollout
regime) subtracts ``rewards.mean()`` over the whole rollout batch (the reshape to
``(-1, n_samples_per_prompt)`` does not enter), then builds the returns with γ = 1 and does not
whiten: every valid token carries ``r − mean(r)``.
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter

_UTILS = "openrlhf.models.utils"
_MAKER = "openrlhf.trainer.ppo_utils.experience_maker"


def openrlhf_compute_reward(
    rewards: Any, kl: Any, *, beta: float, reward_clip: Any, mask: Any
) -> Any:
    """``compute_reward(rewards, kl_coef=beta, kl, action_mask=mask, reward_clip_range=...)``."""
    from openrlhf.models.utils import compute_reward

    return compute_reward(rewards, float(beta), kl, action_mask=mask, reward_clip_range=reward_clip)


def openrlhf_flash_reinforce(rewards: Any) -> Any:
    """``RemoteExperienceMaker.compute_advantages_and_returns``, ``estimator="flash_reinforce"``,
    driven as the other estimators are (one experience, one token per row, KL 0)."""
    from refimpl.frameworks._openrlhf_losses_advantages import openrlhf_advantages

    return openrlhf_advantages("flash_reinforce", rewards, None, None)


ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="openrlhf.compute_reward",
        framework="openrlhf",
        function=f"{_UTILS}:compute_reward",
        settings={"kl_coef": "beta", "reward_clip_range": "reward_clip"},
        spec="kl_reward",
        conventions={"padding": "ignored"},
        candidate=openrlhf_compute_reward,
        note="clip(R) on the last valid token plus −kl_coef·kl everywhere (padding not masked).",
    ),
    Adapter(
        key="openrlhf.advantages_flash_reinforce",
        framework="openrlhf",
        function=f"{_MAKER}:RemoteExperienceMaker.compute_advantages_and_returns",
        settings={"advantage.estimator": "flash_reinforce"},
        spec="batch_mean_advantages",
        conventions={},
        candidate=openrlhf_flash_reinforce,
        note="r − mean(r) over the rollout batch at every valid token; no group, no whitening.",
    ),
)

__all__ = ["ADAPTERS"]
