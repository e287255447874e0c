"""SkyRL (skyrl 0.3.0): the MaxRL advantage estimator, read from
``skyrl/backends/skyrl_train/utils/ppo_utils.py``.

``compute_maxrl_advantage`` (registered as ``"maxrl"`` in ``AdvantageEstimatorRegistry``) sums
each row of ``token_level_rewards`` into a score, groups the scores by ``index``, takes each
group's ``torch.mean(torch.tensor(scores))`` and returns ``(r − mean)/(mean + epsilon)``
(``epsilon = 1e-6``) broadcast over the response mask; a group of one gets mean 0 and no division,
so it keeps its raw reward. ``ppo_utils`` is executed from its installed file by
:func:`refimpl.frameworks.load_from_source`, as for the other SkyRL adapters.
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter

_PPO = "skyrl.backends.skyrl_train.utils.ppo_utils"


def skyrl_maxrl(rewards: Any, *, group: Any) -> Any:
    """``compute_maxrl_advantage`` (``epsilon=1e-6``), one reward per row as a one-token
    ``token_level_rewards``; the (B, 1) advantages squeezed."""
    from refimpl.frameworks import load_from_source
    from refimpl.frameworks._advantage_inputs import outcome_batch

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    scores, _ = ppo["compute_maxrl_advantage"](**outcome_batch(rewards, group), epsilon=1e-6)
    return scores[:, 0]


ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="skyrl.advantage_maxrl",
        framework="skyrl",
        function=f"{_PPO}:compute_maxrl_advantage",
        settings={"advantage_estimator": "maxrl"},
        spec="maxrl_advantages",
        conventions={"eps": 1e-6, "singleton": "raw"},
        candidate=skyrl_maxrl,
        note="(r − group mean)/(group mean + 1e-6); a group of one keeps its reward.",
    ),
)

__all__ = ["ADAPTERS"]
