"""The inputs verl's and SkyRL's outcome-advantage estimators take, built from a spec's call.

Both frameworks' estimators (verl ``core_algos.compute_*_outcome_advantage``, SkyRL
``ppo_utils.compute_*_advantage``) take per-token rewards ``token_level_rewards`` (B, T), a
``response_mask`` and the prompt of each row as ``index``, a numpy array whose equal entries form
a group (verl's trainer passes the prompts' uid strings). A spec's advantage call gives one reward
per row and integer group labels: :func:`outcome_batch` makes the one-token batch, and
:func:`group_index` the labels as uid strings. Imports are inside, as in the candidates.
"""

from __future__ import annotations

from typing import Any

__all__ = ["group_index", "outcome_batch"]


def group_index(group: Any) -> Any:
    """The group labels as the framework's ``index``: one uid string per row (an object array)."""
    import numpy as np

    return np.array([str(int(g)) for g in np.asarray(group).reshape(-1)], dtype=object)


def outcome_batch(rewards: Any, group: Any) -> dict[str, Any]:
    """One reward per row as a one-token response: ``token_level_rewards`` (B, 1) (a copy),
    its all-ones ``response_mask`` and the rows' ``index``, as keywords of the estimator."""
    import torch

    r = torch.as_tensor(rewards).reshape(-1, 1).clone()
    return {
        "token_level_rewards": r,
        "response_mask": torch.ones_like(r),
        "index": group_index(group),
    }
