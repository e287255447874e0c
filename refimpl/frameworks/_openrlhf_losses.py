"""OpenRLHF (openrlhf 0.11.2): its policy losses and aggregation, read from its installed sources.

``openrlhf/models/loss.py``:

- ``PolicyLoss.forward`` (``policy_loss_type="ppo"``) clamps ``log π − log π_old`` to ``[−20, 20]``
  before ``exp``, takes ``−min(ρA, clip(ρ, 1 − ε_low, 1 + ε_high)A)`` and, with ``dual_clip=c``,
  ``−max(min(…), cA)`` where ``A < 0``; then ``aggregate_loss``. ``policy_loss_type="gspo"``
  forces the sequence-level loss and uses ``s = exp(Σ_t d·m / max(L, 1))`` broadcast over the
  row (times the mask), with no cap on the mean log-ratio before ``exp``. The vLLM mismatch
  correction (``is_correction_level``/``_mode``/``_gating``) multiplies the per-token loss by a
  detached weight of ``π_old/π_rollout`` before aggregation (``_openrlhf_losses_correction``).
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

import numpy as np

from refimpl.frameworks import (
    _openrlhf_losses_advantages,
    _openrlhf_losses_correction,
    _openrlhf_losses_kl,
    _openrlhf_losses_reward,
)
from refimpl.frameworks._registry import Adapter, Divergence, Partition
from refimpl.frameworks._stubs import STUBS

_LOSS = "openrlhf.models.loss"
_TRAINER = (
    "openrlhf/trainer/ray/ppo_actor.py:PPOActorTrainer.ppo_train (iter_grad_accum_global_norm → "
    "openrlhf/utils/loss_utils.py:_optimizer_step_loss_norm: batch_num_tokens = step tokens over "
    "every rank / gas, global_batch_size = step non-empty sequences over every rank / gas, dp_size); "
    "DeepSpeed's engine.backward divides each micro-batch loss by gas, ranks averaged"
)
_EPS_1E8 = Divergence(
    "numerical limit",
    "aggregate_loss's sequence level divides each row's sum by L_b + 1e-8 "
    "(openrlhf/models/loss.py:aggregate_loss), a relative error of 1e-8/L_b, far above float64's "
    "rounding (checked in float32, where it is below the tolerance, every check passes).",
)
_SEQUENCE_CHECKS = (
    "values",
    "gradient",
    "padding_contributes_nothing",
    "on_policy_is_policy_gradient",
    "huge_log_ratios_stay_finite",
    "ratios_at_clip_boundaries",
)
_AGGREGATION_CHECKS = ("values", "gradient", "padding_contributes_nothing", "empty_rows")
#: GSPO's sequence ratio overflows: mean log-ratio 1000 with A = 0 gives exp(1000)·0 = NaN.
_GSPO_OVERFLOW = [
    (
        (np.array([[0.0]]), np.array([[-1000.0]]), np.array([[0.0]])),
        {"eps_low": 0.2, "eps_high": None, "mask": np.array([[1.0]])},
    )
]
_GSPO_REPORT = (
    "PolicyLoss.forward with policy_loss_type='gspo' (openrlhf/models/loss.py) computes the "
    "sequence ratio as exp(Σ_t (log π − log π_old)·m / L) with no bound on the mean log-ratio "
    "before exp, whereas the 'ppo' path of the same method clamps the log-ratio to [−20, 20] "
    "first. When the mean log-ratio of a sequence exceeds ~88.7 (float32) or ~709.8 (float64), "
    "the ratio is inf; surr1 = inf·A is then NaN where A = 0 (a group whose rewards are all "
    "equal), and the clipped branch's gradient is 0·inf = NaN, so one far-off-policy sequence "
    "makes the loss and the whole step's gradient NaN. GSPO's reference implementations bound it "
    "(verl's compute_policy_loss_gspo and SkyRL's gspo_policy_loss clamp the mean log-ratio at "
    "10). Failing input: one valid token with log π = 0, log π_old = −1000, A = 0."
)


def openrlhf_ppo_token_level(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    *,
    eps_low: float,
    eps_high: Any,
    dual_clip: Any,
    mask: Any,
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
    loss, *_ = loss_fn(
        logp, logp_old, advantages, action_mask=mask, **get_loss_batch_info(None, mask)
    )
    return loss


def openrlhf_ppo_sequence_level(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    *,
    eps_low: float,
    eps_high: Any,
    dual_clip: Any,
    mask: Any,
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
    loss, *_ = loss_fn(
        logp, logp_old, advantages, action_mask=mask, **get_loss_batch_info(None, mask)
    )
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
    loss, *_ = loss_fn(
        logp, logp_old, advantages, action_mask=mask, **get_loss_batch_info(None, mask)
    )
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
    return loss / accumulation_steps  # DeepSpeed's engine.backward scales the loss by 1 / gas


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
        global_batch_size=global_sequences
        / accumulation_steps,  # _optimizer_step_loss_norm's / gas
    )
    return loss / accumulation_steps  # DeepSpeed's engine.backward scales the loss by 1 / gas


_PPO = {"log_ratio_clamp": 20.0, "output": "scalar", "empty_batch": "excluded"}

_ADAPTERS: tuple[Adapter, ...] = (
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
        divergences=dict.fromkeys(_SEQUENCE_CHECKS, _EPS_1E8),
        note="PPO clip, each row's token mean (over L + 1e-8), averaged over non-empty rows.",
    ),
    Adapter(
        key="openrlhf.policy_loss_gspo",
        framework="openrlhf",
        function=f"{_LOSS}:PolicyLoss.forward",
        settings={
            "policy_loss_type": "gspo",
            "clip_eps_low": "eps_low",
            "clip_eps_high": "eps_high",
        },
        spec="gspo",
        conventions={
            "output": "scalar",
            "aggregation": "seq_mean_token_mean",
            "empty_batch": "excluded",
        },
        candidate=openrlhf_gspo,
        # The pinned overflow is tried first by every check, so each fails on it (NaN; the
        # clipped region's zero gradient too, NaN where the reference's is finite); the sequence
        # mean's 1e-8 (_EPS_1E8) fails them too, on any input.
        divergences=dict.fromkeys(
            (*_SEQUENCE_CHECKS, "clipped_region_has_zero_gradient"),
            Divergence(
                "defect",
                "No bound on GSPO's mean log-ratio before exp (PolicyLoss.forward, "
                "policy_loss_type='gspo'): exp overflows to inf and inf·0 is NaN in the loss "
                "(A = 0) and in the gradient of the clipped branch. Besides, the sequence "
                "mean's L + 1e-8 moves every value by 1e-8/L (a numerical limit).",
                _GSPO_REPORT,
            ),
        ),
        examples=(_GSPO_OVERFLOW,),
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
            rule="openrlhf",
            trainer=_TRAINER,
        ),
    ),
    Adapter(
        key="openrlhf.aggregate_loss_sequence_level",
        framework="openrlhf",
        function=f"{_LOSS}:aggregate_loss",
        settings={"token_level_loss": False},
        spec="aggregation",
        conventions={
            "mode": "seq_mean_token_mean",
            "empty_rows": "excluded",
            "empty_batch": "excluded",
        },
        candidate=openrlhf_aggregate_sequence_level,
        divergences=dict.fromkeys(_AGGREGATION_CHECKS, _EPS_1E8),
        note="Each row's token mean (L + 1e-8), summed over non-empty rows / global_batch_size.",
        partition=Partition(
            candidate=openrlhf_micro_batch_sequence_level,
            mode="seq_mean_token_mean",
            rule="openrlhf",
            trainer=_TRAINER,
            rtol=1e-7,
        ),
    ),
    *_openrlhf_losses_correction.ADAPTERS,
    *_openrlhf_losses_kl.ADAPTERS,
    *_openrlhf_losses_advantages.ADAPTERS,
    *_openrlhf_losses_reward.ADAPTERS,
)

#: ``openrlhf.models.loss`` and ``.utils`` import only with the package ``openrlhf.models`` stubbed
#: (its ``__init__`` imports ``actor.py`` → ``flash_attn``) and a ``deepspeed`` stand-in
#: (``utils.py`` imports it at the top; only ``set_z3_leaf_modules`` uses it). Until
#: :data:`refimpl.frameworks.STUBS` has them, the adapters are not registered: every adapter's
#: function is loaded by the framework stage's conftest, and these could not be.
ADAPTERS: tuple[Adapter, ...] = (
    _ADAPTERS if any(s.package == "openrlhf.models" for s in STUBS) else ()
)

__all__ = ["ADAPTERS"]
