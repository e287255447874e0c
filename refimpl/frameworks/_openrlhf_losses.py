"""OpenRLHF (openrlhf 0.11.2): its policy losses and aggregation, read from its installed sources.

``openrlhf/models/loss.py``:

- ``PolicyLoss.forward`` (``policy_loss_type="ppo"``) clamps ``log π − log π_old`` to ``[−20, 20]``
  before ``exp``, takes ``−min(ρA, clip(ρ, 1 − ε_low, 1 + ε_high)A)`` and, with ``dual_clip=c``,
  ``−max(min(…), cA)`` where ``A < 0``; then ``aggregate_loss``. ``policy_loss_type="gspo"``
  forces the sequence-level loss and uses ``s = exp(Σ_t d·m / max(L, 1))`` broadcast over the
  row (times the mask), with no cap on the mean log-ratio before ``exp``. The vLLM mismatch
  correction (``is_correction_level``/``_mode``/``_gating``) multiplies the per-token loss by a
  detached weight of ``π_old/π_rollout`` before aggregation (not covered here: no spec for the
  product of a PPO loss and a masked or clamped IS weight; see the report).
- ``aggregate_loss(loss, mask, token_level_loss, dp_size, batch_num_tokens, global_batch_size)``:
  token level ``Σ loss·m / batch_num_tokens · dp_size`` (``masked_mean`` when no count is given);
  sequence level ``Σ_b [Σ_t loss·m / (L_b + 1e-8)]·[L_b > 0] / global_batch_size · dp_size``
  (rows without a valid token excluded; the ``1e-8`` moves each row's mean by ``1e-8/L_b``).

The trainer (``openrlhf/trainer/ray/ppo_actor.py:PPOActorTrainer``, non-dynamic batches) passes
``iter_grad_accum_global_norm``'s numbers (``openrlhf/utils/loss_utils.py:_optimizer_step_loss_norm``):
the step's valid tokens and non-empty sequences summed over every micro-batch of the DeepSpeed
accumulation window and every data-parallel rank, each **divided by gas** (the accumulation
steps), and ``dp_size``; DeepSpeed's ``backward`` then scales each micro-batch loss by ``1/gas``
and all-reduces the ranks' gradients by their mean. One rank and one micro-batch
(``get_loss_batch_info`` without ``torch.distributed``) give the batch's own counts.

Importing ``openrlhf.models.loss`` needs two stubs (``deepspeed`` is not installed; the package
``openrlhf.models`` imports ``flash_attn`` through ``actor.py``): see the report of this round.
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks import _openrlhf_losses_kl
from refimpl.frameworks._registry import Adapter, Divergence, Partition
from refimpl.losses.partition import ScalingRule

_LOSS = "openrlhf.models.loss"
_TRAINER = (
    "openrlhf/trainer/ray/ppo_actor.py:PPOActorTrainer.ppo_train (iter_grad_accum_global_norm → "
    "openrlhf/utils/loss_utils.py:_optimizer_step_loss_norm: batch_num_tokens = step tokens over "
    "every rank / gas, global_batch_size = step non-empty sequences over every rank / gas, dp_size); "
    "DeepSpeed's engine.backward divides each micro-batch loss by gas, ranks averaged"
)
#: DeepSpeed divides every backward loss by gas (accumulation "mean"); OpenRLHF's denominators
#: carry the same 1/gas and its dp_size cancels the ranks' mean. The preset ``openrlhf``
#: ("global", "sum", "mean", world scale) is the net effect once the two gas factors cancel; this
#: is the path as the code runs it.
_DEEPSPEED = ScalingRule("global", "mean", "mean", True, "openrlhf_deepspeed")
_EPS_1E8 = Divergence(
    "numerical limit",
    "aggregate_loss's sequence level divides each row's sum by L_b + 1e-8 "
    "(openrlhf/models/loss.py:aggregate_loss), a relative error of 1e-8/L_b, far above float64's "
    "rounding.",
)


def openrlhf_ppo_token_level(
    logp: Any, logp_old: Any, advantages: Any, *, eps_low: float, eps_high: Any, dual_clip: Any, mask: Any
) -> Any:
    """OpenRLHF ``PolicyLoss(policy_loss_type="ppo", token_level_loss=True).forward``.

    With the counts its trainer passes on one rank and one micro-batch (``get_loss_batch_info``).
    """
    from openrlhf.models.loss import PolicyLoss
    from openrlhf.utils.loss_utils import get_loss_batch_info

    loss_fn = PolicyLoss(
        clip_eps_low=float(eps_low),
        clip_eps_high=float(eps_low if eps_high is None else eps_high),
        dual_clip=None if dual_clip is None else float(dual_clip),
        token_level_loss=True,
    )
    loss, *_ = loss_fn(logp, logp_old, advantages, action_mask=mask, **get_loss_batch_info(None, mask))
    return loss


def openrlhf_ppo_sequence_level(
    logp: Any, logp_old: Any, advantages: Any, *, eps_low: float, eps_high: Any, dual_clip: Any, mask: Any
) -> Any:
    """OpenRLHF ``PolicyLoss(token_level_loss=False).forward`` (``loss_agg_mode`` not token-mean)."""
    from openrlhf.models.loss import PolicyLoss
    from openrlhf.utils.loss_utils import get_loss_batch_info

    loss_fn = PolicyLoss(
        clip_eps_low=float(eps_low),
        clip_eps_high=float(eps_low if eps_high is None else eps_high),
        dual_clip=None if dual_clip is None else float(dual_clip),
        token_level_loss=False,
    )
    loss, *_ = loss_fn(logp, logp_old, advantages, action_mask=mask, **get_loss_batch_info(None, mask))
    return loss


def openrlhf_gspo(
    logp: Any, logp_old: Any, advantages: Any, *, eps_low: float, eps_high: Any, mask: Any
) -> Any:
    """OpenRLHF ``PolicyLoss(policy_loss_type="gspo").forward`` (sequence-level loss, forced)."""
    from openrlhf.models.loss import PolicyLoss
    from openrlhf.utils.loss_utils import get_loss_batch_info

    loss_fn = PolicyLoss(
        clip_eps_low=float(eps_low),
        clip_eps_high=float(eps_low if eps_high is None else eps_high),
        policy_loss_type="gspo",
    )
    loss, *_ = loss_fn(logp, logp_old, advantages, action_mask=mask, **get_loss_batch_info(None, mask))
    return loss


def openrlhf_aggregate_token_level(loss: Any, mask: Any) -> Any:
    """OpenRLHF ``aggregate_loss(token_level_loss=True)`` with one rank's counts."""
    from openrlhf.models.loss import aggregate_loss
    from openrlhf.utils.loss_utils import get_loss_batch_info

    return aggregate_loss(loss, mask, token_level_loss=True, **get_loss_batch_info(None, mask))


def openrlhf_aggregate_sequence_level(loss: Any, mask: Any) -> Any:
    """OpenRLHF ``aggregate_loss(token_level_loss=False)`` with one rank's counts."""
    from openrlhf.models.loss import aggregate_loss
    from openrlhf.utils.loss_utils import get_loss_batch_info

    return aggregate_loss(loss, mask, token_level_loss=False, **get_loss_batch_info(None, mask))


def openrlhf_micro_batch_token_level(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    mask: Any,
    *,
    global_tokens: float,
    accumulation_steps: int,
    world_size: int,
) -> Any:
    """One micro-batch of ``PolicyLoss(token_level_loss=True)`` with the trainer's step counts."""
    from openrlhf.models.loss import PolicyLoss

    loss, *_ = PolicyLoss(token_level_loss=True)(
        logp,
        logp_old,
        advantages[:, None].expand_as(logp),
        action_mask=mask,
        dp_size=world_size,
        batch_num_tokens=global_tokens / accumulation_steps,  # _optimizer_step_loss_norm's / gas
    )
    return loss


def openrlhf_micro_batch_sequence_level(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    mask: Any,
    *,
    global_sequences: float,
    accumulation_steps: int,
    world_size: int,
) -> Any:
    """One micro-batch of ``PolicyLoss(token_level_loss=False)`` with the trainer's step counts."""
    from openrlhf.models.loss import PolicyLoss

    loss, *_ = PolicyLoss(token_level_loss=False)(
        logp,
        logp_old,
        advantages[:, None].expand_as(logp),
        action_mask=mask,
        dp_size=world_size,
        global_batch_size=global_sequences / accumulation_steps,  # _optimizer_step_loss_norm's / gas
    )
    return loss


_PPO = {"log_ratio_clamp": 20.0, "output": "scalar", "empty_batch": "excluded"}

ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="openrlhf.policy_loss_ppo_token_level",
        framework="openrlhf",
        function=f"{_LOSS}:PolicyLoss.forward",
        settings={
            "policy_loss_type": "ppo",
            "token_level_loss": True,
            "clip_eps_low": "eps_low",
            "clip_eps_high": "eps_high",
            "dual_clip": "dual_clip",
        },
        spec="ppo_clip",
        conventions={**_PPO, "aggregation": "token_mean"},
        candidate=openrlhf_ppo_token_level,
        note="PPO clip (dual clip optional), log-ratio clamped ±20, summed over the batch's tokens.",
    ),
    Adapter(
        key="openrlhf.policy_loss_ppo_sequence_level",
        framework="openrlhf",
        function=f"{_LOSS}:PolicyLoss.forward",
        settings={
            "policy_loss_type": "ppo",
            "token_level_loss": False,
            "clip_eps_low": "eps_low",
            "clip_eps_high": "eps_high",
            "dual_clip": "dual_clip",
        },
        spec="ppo_clip",
        conventions={**_PPO, "aggregation": "seq_mean_token_mean"},
        candidate=openrlhf_ppo_sequence_level,
        divergences={},
        note="PPO clip, each row's token mean (over L + 1e-8), averaged over non-empty rows.",
    ),
    Adapter(
        key="openrlhf.policy_loss_gspo",
        framework="openrlhf",
        function=f"{_LOSS}:PolicyLoss.forward",
        settings={"policy_loss_type": "gspo", "clip_eps_low": "eps_low", "clip_eps_high": "eps_high"},
        spec="gspo",
        conventions={"output": "scalar", "aggregation": "seq_mean_token_mean", "empty_batch": "excluded"},
        candidate=openrlhf_gspo,
        note="GSPO's sequence ratio exp(mean log ρ) broadcast per token, sequence-level loss forced.",
    ),
    Adapter(
        key="openrlhf.aggregate_loss_token_level",
        framework="openrlhf",
        function=f"{_LOSS}:aggregate_loss",
        settings={"token_level_loss": True},
        spec="aggregation",
        conventions={"mode": "token_mean", "empty_batch": "excluded"},
        candidate=openrlhf_aggregate_token_level,
        note="Σ loss·mask over the step's valid tokens (batch_num_tokens), times dp_size.",
        partition=Partition(
            candidate=openrlhf_micro_batch_token_level,
            mode="token_mean",
            rule=_DEEPSPEED,
            trainer=_TRAINER,
        ),
    ),
    Adapter(
        key="openrlhf.aggregate_loss_sequence_level",
        framework="openrlhf",
        function=f"{_LOSS}:aggregate_loss",
        settings={"token_level_loss": False},
        spec="aggregation",
        conventions={"mode": "seq_mean_token_mean", "empty_rows": "excluded", "empty_batch": "excluded"},
        candidate=openrlhf_aggregate_sequence_level,
        note="Each row's token mean (L + 1e-8), summed over non-empty rows / global_batch_size.",
        partition=Partition(
            candidate=openrlhf_micro_batch_sequence_level,
            mode="seq_mean_token_mean",
            rule=_DEEPSPEED,
            trainer=_TRAINER,
            rtol=1e-7,
        ),
    ),
    *_openrlhf_losses_kl.ADAPTERS,
)

__all__ = ["ADAPTERS"]
