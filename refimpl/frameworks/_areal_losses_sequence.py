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

Batch-level reward normalisation: ``PPOActor._compute_advantages`` (``trainer/ppo/actor.py``) applies
``self.reward_norm = Normalization(config.reward_norm)`` to the (biased, scaled, clipped) rewards,
one per sequence, with no mask. ``areal/utils/data.py:Normalization`` with
``mean_level="batch"`` subtracts the batch mean (high precision, float64) and with
``std_level="batch"`` divides by the batch std (``std_unbiased``, default True) ``+ eps``
(default 1e-5); ``std_level=None`` does not divide (and sets ``eps`` to 0). It returns float32.
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


def areal_reward_norm_batch(rewards: Any) -> Any:
    """``Normalization(NormConfig(mean_level="batch", std_level="batch"))(rewards)``: the batch
    z-score, sample std + 1e-5 (``PPOActor``'s ``reward_norm``)."""
    from areal.api.cli_args import NormConfig
    from areal.utils.data import Normalization

    return Normalization(NormConfig(mean_level="batch", std_level="batch"))(rewards)


def areal_reward_norm_batch_mean(rewards: Any) -> Any:
    """``Normalization(NormConfig(mean_level="batch", std_level=None))(rewards)``: the batch mean
    subtracted, not scaled."""
    from areal.api.cli_args import NormConfig
    from areal.utils.data import Normalization

    return Normalization(NormConfig(mean_level="batch", std_level=None))(rewards)


_NORM = "areal.utils.data:Normalization"

_SCATTER_SUM = Divergence(
    "numerical limit",
    "On the packed layout _compute_sequence_level_ratio_and_advantages sums each sequence's "
    "log-ratios and advantages with scatter_add_, one addition after another: on a 4096-token "
    "row its rounding grows with the length (a relative error of about 5e-14 in float64 here), "
    "beyond the tolerance derived for a pairwise sum; the padded layout's .sum(dim=1) stays within it.",
)
_OVERFLOW_PACKED = Divergence(
    "numerical limit",
    "As on the padded layout: the sequence's mean log-ratio is not clamped before exp, so at a "
    "mean of ±1000 the ratio is inf or 0 and a zero advantage (or the clipped branch) multiplies "
    "it: NaN where the exact loss is 0.",
)


def areal_gspo_packed(
    logp: Any, logp_old: Any, advantages: Any, *, eps_low: Any, eps_high: Any, mask: Any
) -> Any:
    """``ppo_actor_loss_fn(importance_sampling_level="sequence")`` on AReaL's packed 1-D layout:
    the valid tokens of every row concatenated, with ``cu_seqlens`` (as ``pack_tensor_dict``
    builds it; a row without a valid token is a sequence of length 0)."""
    import torch
    from areal.utils.functional import ppo_actor_loss_fn

    valid = mask > 0
    lengths = valid.sum(dim=1).to(torch.int32)
    cu_seqlens = torch.nn.functional.pad(torch.cumsum(lengths, 0, dtype=torch.int32), (1, 0))
    loss, _ = ppo_actor_loss_fn(
        logprobs=logp[valid],
        proximal_logprobs=logp_old[valid],
        old_logprobs=logp_old[valid],
        advantages=advantages[valid],
        eps_clip=eps_low,
        loss_mask=torch.ones_like(lengths.new_empty(int(lengths.sum())), dtype=torch.bool),
        eps_clip_higher=eps_high,
        importance_sampling_level="sequence",
        cu_seqlens=cu_seqlens,
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
    Adapter(
        key="areal.ppo_actor_loss_gspo_packed",
        framework="areal",
        function=f"{_FUNCTIONAL}:ppo_actor_loss_fn",
        settings={
            "eps_clip": "eps_low",
            "eps_clip_higher": "eps_high",
            "importance_sampling_level": "sequence",
            "layout": "packed (cu_seqlens)",
        },
        spec="gspo",
        conventions={"output": "scalar", "aggregation": "token_mean"},
        candidate=areal_gspo_packed,
        divergences={
            "values": _SCATTER_SUM,
            "gradient": _SCATTER_SUM,
            "huge_log_ratios_stay_finite": _OVERFLOW_PACKED,
        },
        note="GSPO on the packed layout: valid tokens concatenated, cu_seqlens per row.",
    ),
    Adapter(
        key="areal.reward_norm_batch",
        framework="areal",
        function=_NORM,
        settings={"reward_norm": {"mean_level": "batch", "std_level": "batch"}},
        spec="batch_mean_advantages",
        conventions={"std": "sample", "eps": 1e-5},
        candidate=areal_reward_norm_batch,
        dtype="float32",  # Normalization returns float32 (computed in float64)
        note="(r − batch mean)/(batch sample std + 1e-5) over the sequences' rewards.",
    ),
    Adapter(
        key="areal.reward_norm_batch_mean",
        framework="areal",
        function=_NORM,
        settings={"reward_norm": {"mean_level": "batch", "std_level": None}},
        spec="batch_mean_advantages",
        conventions={},
        candidate=areal_reward_norm_batch_mean,
        dtype="float32",
        note="r − batch mean over the sequences' rewards, not scaled.",
    ),
)

__all__ = ["ADAPTERS"]
