"""AReaL 1.0.4: the loss-level helpers of ``areal/trainer/ppo/actor.py`` (M2PO's token mask).

``_apply_m2po_masking(old_logp, prox_logp, loss_mask, m2_threshold)`` (``actor.m2_threshold``,
applied by ``grpo_loss_fn`` before the PPO or SAPO loss): the squared ``old_logp − prox_logp`` of
the batch's valid tokens, sorted in descending order; ``_get_m2po_loss_mask`` drops the largest
until the mean of the rest is ``< m2_threshold`` (strictly), keeping at least one token.

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
)

ADAPTERS: tuple[Adapter, ...] = (
    _ADAPTERS if any(s.package == "areal.trainer" for s in STUBS) else ()
)

__all__ = ["ADAPTERS"]
