"""AReaL (areal 1.0.4): SAPO at sequence level, read from
``areal/utils/functional/functional.py:sapo_loss_fn``.

With ``importance_sampling_level="sequence"`` (``actor.importance_sampling_level``) ``sapo_loss_fn``
takes the ratio and the advantages from ``_compute_sequence_level_ratio_and_advantages`` (the
GSPO branch): each row's log-ratio is averaged over its valid tokens (masked before ``exp``) and
exponentiated, ``s_b = exp(mean_t log ρ)``, not detached, and each row's advantages are replaced by
their mean over its valid tokens; the gate ``4/τ·σ(τ(s_b − 1))`` (``τ`` by the sign of the mean
advantage) multiplies ``−A`` per token and the loss is ``Σ_mask / (count_nonzero or 1)``, the
token mean. The spec ``sapo_sequence`` draws advantages constant per sequence, so the mean is the
advantage itself.
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter, Divergence

_FUNCTIONAL = "areal.utils.functional.functional"

_OVERFLOW = Divergence(
    "numerical limit",
    "AReaL does not clamp the sequence's mean log-ratio before exp: at a mean beyond the dtype's "
    "exp range (±1000 here) s_b is inf or 0, and where the advantage is 0 (loss and gradient 0 "
    "exactly) the gate's derivative multiplies it: the gradient is 0·inf = NaN.",
)


def areal_sapo_sequence(
    logp: Any, logp_old: Any, advantages: Any, *, tau_pos: Any, tau_neg: Any, mask: Any
) -> Any:
    """``sapo_loss_fn(..., importance_sampling_level="sequence")`` on the padded 2-D layout."""
    from areal.utils.functional import sapo_loss_fn

    loss, _ = sapo_loss_fn(
        logprobs=logp,
        old_logprobs=logp_old,
        advantages=advantages,
        tau_pos=tau_pos,
        tau_neg=tau_neg,
        loss_mask=mask > 0,
        importance_sampling_level="sequence",
    )
    return loss


ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="areal.sapo_loss_sequence",
        framework="areal",
        function=f"{_FUNCTIONAL}:sapo_loss_fn",
        settings={
            "sapo_tau_pos": "tau_pos",
            "sapo_tau_neg": "tau_neg",
            "importance_sampling_level": "sequence",
        },
        spec="sapo_sequence",
        conventions={"output": "scalar", "aggregation": "token_mean"},
        candidate=areal_sapo_sequence,
        divergences={"huge_log_ratios_stay_finite": _OVERFLOW},
        note="SAPO's gate on the geometric-mean sequence ratio (differentiated), token mean.",
    ),
)

__all__ = ["ADAPTERS"]
