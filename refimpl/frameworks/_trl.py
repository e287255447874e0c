"""TRL 1.16.0: the async GRPO staleness rule, read from its installed sources.

``trl.experimental.async_grpo.async_grpo_trainer.RolloutQueueDataset`` takes scored samples from the
rollout queue and drops one iff ``model_version_fn() − sample.model_version > max_staleness``: the
trainer's version minus the version the rollout was launched with, refimpl's ``s`` for a rollout
that is not interrupted.
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter, Divergence

_ASYNC = "trl.experimental.async_grpo.async_grpo_trainer"


def trl_rollout_queue_mask(s: Any, *, eta: int) -> Any:
    """Feed samples of staleness ``s`` through TRL's ``RolloutQueueDataset(max_staleness=eta)``: 1 = kept."""
    import collections
    import queue
    import types

    import torch
    from accelerate import PartialState
    from trl.experimental.async_grpo.async_grpo_trainer import RolloutQueueDataset

    PartialState()  # TRL logs through accelerate, which needs its (single-process) state, as in training
    stale = torch.as_tensor(s)
    values = [int(v) for v in stale.reshape(-1).tolist()]
    current = 8 * (max(values, default=0) // 8 + 1) + 1  # >= every s, and off TRL's trace step
    rollouts: queue.Queue[Any] = queue.Queue()
    for i, staleness in enumerate(values):
        rollouts.put(
            types.SimpleNamespace(
                model_version=current - staleness,
                enqueued_at=None,
                input_ids=[i],
                completion_mask=None,
                old_log_probs=None,
                advantage=0.0,
                group_id=i,
                metrics={},
            )
        )

    class Drained(Exception):
        pass

    def check_health(_stale_after_s: float) -> None:
        raise Drained  # the queue is empty: every sample has been taken or dropped

    dataset = RolloutQueueDataset(
        rollouts,
        model_version_fn=lambda: current,
        check_health_fn=check_health,
        stale_after_s=0.0,
        metrics=collections.defaultdict(list),
        max_staleness=int(eta),
        poll_interval_s=0.0,
    )
    kept: set[int] = set()
    try:
        for sample in dataset:
            kept.add(sample["input_ids"][0])
    except Drained:
        pass
    flags = [1.0 if i in kept else 0.0 for i in range(len(values))]
    return torch.tensor(flags, dtype=torch.float64).reshape(stale.shape)


ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="trl.async_max_staleness",
        framework="trl",
        function=f"{_ASYNC}:RolloutQueueDataset",
        settings={"max_staleness": "eta"},
        spec="staleness_mask",
        conventions={},
        candidate=trl_rollout_queue_mask,
        note="Samples launched s versions ago go through the real dataset's __iter__; kept = 1.",
    ),
)

__all__ = ["ADAPTERS"]


def trl_soft_overlong_punishment(
    lengths: Any, *, max_length: int, cache_length: int, penalty_factor: float
) -> Any:
    """TRL's ``get_soft_overlong_punishment(max_length, cache_length)`` on completions of these lengths.

    TRL has no penalty factor of its own: ``GRPOConfig.reward_weights`` weights each reward
    function, and ``penalty_factor`` is applied as that weight.
    """
    import torch
    from trl.rewards import get_soft_overlong_punishment

    reward = get_soft_overlong_punishment(int(max_length), int(cache_length))
    ell = [int(v) for v in torch.as_tensor(lengths).reshape(-1).tolist()]
    rewards = reward([[0] * n for n in ell])
    return torch.tensor(rewards, dtype=torch.float64) * float(penalty_factor)


ADAPTERS = (
    *ADAPTERS,
    Adapter(
        key="trl.soft_overlong_punishment",
        framework="trl",
        function="trl.rewards:get_soft_overlong_punishment",
        settings={
            "max_completion_len": "max_length",
            "soft_punish_cache": "cache_length",
            "reward_weights": "[penalty_factor]",
        },
        spec="dapo_overlong",
        conventions={"floor": True},
        candidate=trl_soft_overlong_punishment,
        note="DAPO's Eq. 13 with the floor at −1 beyond max_completion_len; the reward weight "
        "scales it.",
    ),
)


_ONE_SIDED = Divergence(
    "convention",
    "TRL's off-policy sequence mask has one edge: it drops a negative-advantage sequence iff the "
    "mean of log μ − log π exceeds off_policy_mask_threshold (grpo_trainer.py, "
    "get_off_policy_mask), so a sequence whose geometric μ/π is below the band's lower edge is "
    "kept. Deliberate (DeepSeek-V3.2's rule, only policy drift in one direction is masked); "
    "refimpl's band always has a lower edge, and with low = 0 TRL agrees.",
)


def trl_off_policy_mask(
    logp_target: Any, logp_behavior: Any, *, low: float, high: float, mask: Any
) -> Any:
    """TRL's ``GRPOTrainer.get_off_policy_mask`` (``off_policy_mask_threshold=log(high)``), every
    advantage negative: 1 = the sequence is kept.

    TRL keeps a sequence iff its advantage is ``>= 0`` or the mean over its tokens of
    ``log μ − log π`` is ``<= off_policy_mask_threshold``; with negative advantages only the second
    test decides, a one-sided band ``μ/π ≤ high`` on the geometric mean. TRL has no lower edge:
    ``low`` cannot be passed.
    """
    import math

    import torch
    from trl.trainer.grpo_trainer import GRPOTrainer

    target = torch.as_tensor(logp_target)
    advantages = -torch.ones(target.shape[0], 1, dtype=target.dtype)
    threshold = math.log(float(high)) if high > 0 else -math.inf
    kept = GRPOTrainer.get_off_policy_mask(
        advantages,
        target,
        torch.as_tensor(logp_behavior),
        torch.as_tensor(mask).to(target.dtype),
        off_policy_threshold=threshold,
    )
    return kept


ADAPTERS = (
    *ADAPTERS,
    Adapter(
        key="trl.off_policy_mask",
        framework="trl",
        function="trl.trainer.grpo_trainer:GRPOTrainer.get_off_policy_mask",
        settings={"off_policy_mask_threshold": "log(high)", "advantages": "< 0"},
        spec="masked_is_geometric",
        conventions={
            "band_on": "reciprocal",
            "weight": "indicator",
            "output": "B1",
            "padding": "one",  # a row with no valid token has mean 0 <= threshold: kept
        },
        candidate=trl_off_policy_mask,
        divergences=dict.fromkeys(("agrees_with_reference", "zero_outside_band"), _ONE_SIDED),
        note="DeepSeek-V3.2's off-policy sequence mask: a sequence with a negative advantage is "
        "dropped iff the mean of log μ − log π over its tokens exceeds the threshold; TRL's "
        "band is one-sided (no lower edge) and a sequence with advantage >= 0 is always kept.",
    ),
)
