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
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter

_UTILS = "openrlhf.models.utils"


def openrlhf_compute_reward(
    rewards: Any, kl: Any, *, beta: float, reward_clip: Any, mask: Any
) -> Any:
    """``compute_reward(rewards, kl_coef=beta, kl, action_mask=mask, reward_clip_range=...)``."""
    from openrlhf.models.utils import compute_reward

    return compute_reward(rewards, float(beta), kl, action_mask=mask, reward_clip_range=reward_clip)


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
)

__all__ = ["ADAPTERS"]
