"""OpenRLHF 0.11.2: the DAPO overlong penalty, read from its installed sources.

``openrlhf.trainer.ppo_utils.length_penalty.apply_overlong_penalty`` adds
``−min(ℓ − (L_max − L_buf), L_buf) / L_buf · factor`` to each experience's reward when positive:
DAPO's ramp, floored at ``−factor``.
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter


def openrlhf_overlong_penalty(
    lengths: Any, *, max_length: int, cache_length: int, penalty_factor: float
) -> Any:
    """OpenRLHF's ``apply_overlong_penalty`` on one experience with zero rewards."""
    import types

    import torch
    from openrlhf.trainer.ppo_utils.length_penalty import apply_overlong_penalty

    ell = torch.as_tensor(lengths).to(torch.int64).reshape(-1)
    experience = types.SimpleNamespace(
        response_length=ell, rewards=torch.zeros(ell.numel(), dtype=torch.float64)
    )
    apply_overlong_penalty(
        [experience],
        max_new_tokens=int(max_length),
        overlong_buffer_len=float(cache_length),
        overlong_penalty_factor=float(penalty_factor),
    )
    return experience.rewards


ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="openrlhf.apply_overlong_penalty",
        framework="openrlhf",
        function="openrlhf.trainer.ppo_utils.length_penalty:apply_overlong_penalty",
        settings={
            "max_new_tokens": "max_length",
            "overlong_buffer_len": "cache_length",
            "overlong_penalty_factor": "penalty_factor",
        },
        spec="dapo_overlong",
        conventions={"floor": True},
        candidate=openrlhf_overlong_penalty,
        note="DAPO's ramp with the excess capped at the buffer: floored at −factor.",
    ),
)

__all__ = ["ADAPTERS"]
