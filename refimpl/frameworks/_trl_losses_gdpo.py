"""TRL (trl 1.16.0): GDPO, ``GRPOTrainer`` with ``multi_objective_aggregation="normalize_then_sum"``.

``GRPOTrainer._generate_and_score_completions`` (``trl/trainer/grpo_trainer.py``) holds the
rewards of its ``K`` reward functions in a float32 ``rewards_per_func`` of shape ``(B, K)``. On the
``normalize_then_sum`` path, as read: viewed as ``(-1, num_generations, K)`` (contiguous equal
groups), each reward is centred by its group's ``nanmean`` and divided by its group's ``nanstd``
(Bessel-corrected) ``+ 1e-4`` (``num_generations = 1``: std 0); the z-scores are summed with
``reward_weights`` (``nansum``), and the sum is standardised over the batch's *sequences*,
``(s − nanmean s) / (nanstd s + 1e-4)`` — ``scale_rewards`` is not read on this path. The
adapter runs that REAL method on the trainer :func:`~refimpl.frameworks._trl_losses_advantages.
scoring_trainer` builds, with one plain reward function per column of the given rewards and the
given weights as ``reward_weights``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from refimpl.frameworks._registry import Adapter

_GRPO = "trl.trainer.grpo_trainer:GRPOTrainer._generate_and_score_completions"


def trl_gdpo_advantages(rewards: Any, *, group: Any, weights: Any, mask: Any) -> Any:
    """TRL ``multi_objective_aggregation="normalize_then_sum"``: the real
    ``GRPOTrainer._generate_and_score_completions`` with one reward function per column of
    ``rewards`` and ``reward_weights = weights``, its ``advantages`` (``mask`` is not read: TRL
    standardises over sequences)."""
    from trl.trainer.grpo_trainer import GRPOTrainer

    from refimpl.frameworks._trl_losses_advantages import _prompts, scoring_trainer

    t = scoring_trainer(
        GRPOTrainer, rewards, group, weights=weights, scale_rewards="group",
        multi_objective_aggregation="normalize_then_sum",
    )  # fmt: skip
    return t._generate_and_score_completions(_prompts(rewards))["advantages"]


# Rewards 1e-6 apart: each group's z-score is ~5e-3 (ε dominates its std), so the batch std of
# the sums is ~6e-3 and s + 1e-4 (TRL) and √(s² + 1e-4) (verl) differ by a factor of ~2.
_SMALL_SPREAD = [
    (
        (np.array([[0.0], [1e-6], [0.0], [1e-6]]),),
        {
            "group": np.array([0, 0, 1, 1]),
            "weights": np.array([1.0]),
            "mask": np.ones((4, 1)),
        },
    )
]

ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="trl.gdpo_advantages",
        framework="trl",
        function=_GRPO,
        settings={
            "multi_objective_aggregation": "normalize_then_sum",
            "num_generations": "the group size",
            "reward_weights": "the given weights",
        },
        spec="gdpo_advantages",
        conventions={
            "groups": "contiguous",
            "eps": 1e-4,
            "whiten_eps": 1e-4,
            "whiten_placement": "std",
            "whiten_weights": "sequences",
        },
        candidate=trl_gdpo_advantages,
        dtype="float32",
        examples=(_SMALL_SPREAD,),
        note="Each reward's (r − group mean)/(group nanstd + 1e-4) on float32 rewards, summed "
        "with reward_weights, then (s − batch mean)/(batch nanstd + 1e-4) over sequences.",
    ),
)

__all__ = ["ADAPTERS"]
