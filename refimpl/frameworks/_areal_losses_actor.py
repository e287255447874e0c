"""AReaL 1.0.4: the loss-level helpers of ``areal/trainer/ppo/actor.py`` (M2PO, the KDRL term).

``_apply_m2po_masking(old_logp, prox_logp, loss_mask, m2_threshold)`` (``actor.m2_threshold``,
applied by ``grpo_loss_fn`` before the PPO or SAPO loss): the squared ``old_logp − prox_logp`` of
the batch's valid tokens, sorted in descending order; ``_get_m2po_loss_mask`` drops the largest
until the mean of the rest is ``< m2_threshold`` (strictly), keeping at least one token.
``grpo_loss_fn`` with ``teacher_logp`` in the batch and ``rl_loss_weight != 0`` adds
``distill_loss_weight · Σ (logprobs − teacher_logp)·mask / mask.sum().clamp(min=1)`` to the PPO
loss (``rl_loss_weight = 0`` is a different, importance-weighted REINFORCE form).

``areal.trainer.ppo.actor`` cannot be imported as installed: the package ``areal.trainer``'s
``__init__`` imports ``dpo_trainer`` → ``areal.utils.stats_logger`` → ``swanlab``, which is not
installed (and the actor needs none of it). With ``areal.trainer`` stubbed (its ``__init__``
skipped, every submodule still loaded from its file) the module imports; until
:data:`refimpl.frameworks.STUBS` has that stub these adapters are not registered, since the
framework stage's conftest loads every adapter's function.
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter
from refimpl.frameworks._stubs import STUBS


def areal_m2po_mask(logp_target: Any, logp_behavior: Any, *, tau: Any, mask: Any) -> Any:
    """``_apply_m2po_masking(old_logp=μ, prox_logp=π_prox, loss_mask, m2_threshold=τ)``: the
    updated boolean loss mask, as 1.0 (kept) and 0.0 (dropped or padding)."""
    from areal.trainer.ppo.actor import _apply_m2po_masking

    kept = _apply_m2po_masking(
        old_logp=logp_behavior,
        prox_logp=logp_target,
        loss_mask=mask > 0,
        m2_threshold=float(tau),
    )
    return kept.to(logp_target.dtype)


def areal_kdrl_reverse_kl(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """``grpo_loss_fn`` with a teacher (``teacher_logp``, ``rl_loss_weight = 1``,
    ``distill_loss_weight = 1``) and zero advantages: the PPO term is 0 and the loss is the KDRL
    penalty ``Σ (logp − teacher)·mask / max(Σ mask, 1)``. π_prox = π_old = sg(π_θ)."""
    import torch
    from areal.trainer.ppo.actor import grpo_loss_fn

    old = logp.detach()
    data = {
        "logprobs": old,
        "prox_logp": old,
        "advantages": torch.zeros_like(old),
        "loss_mask": mask > 0,
        "teacher_logp": logp_ref,
        "rl_loss_weight": 1.0,
        "distill_loss_weight": 1.0,
    }
    return grpo_loss_fn(
        logp, torch.zeros_like(old), data, eps_clip=0.2, eps_clip_higher=None, c_clip=None
    )


_ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="areal.m2po_mask",
        framework="areal",
        function="areal.trainer.ppo.actor:_apply_m2po_masking",
        settings={"m2_threshold": "tau"},
        spec="m2po_mask",
        conventions={"strict": True},
        candidate=areal_m2po_mask,
        note="M2PO: drop the batch's largest squared behaviour/proximal log-ratios until the "
        "kept mean is below τ (at least one token kept).",
    ),
    Adapter(
        key="areal.grpo_loss_kdrl_reverse_kl",
        framework="areal",
        function="areal.trainer.ppo.actor:grpo_loss_fn",
        settings={"teacher_logp": "logp_ref", "rl_loss_weight": 1.0, "distill_loss_weight": 1.0},
        spec="kl_penalty",
        conventions={"estimator": "k1", "output": "scalar", "aggregation": "token_mean"},
        candidate=areal_kdrl_reverse_kl,
        dtype="float32",  # grpo_loss_fn's stats_tracker.stat refuses float64 tensors
        note="The joint distillation term of the actor's loss (KDRL): the k1 reverse KL to the "
        "teacher, token-mean over the mask, on the trainer's loss function.",
    ),
)

ADAPTERS: tuple[Adapter, ...] = (
    _ADAPTERS if any(s.package == "areal.trainer" for s in STUBS) else ()
)

__all__ = ["ADAPTERS"]
