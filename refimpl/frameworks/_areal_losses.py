"""AReaL (areal 1.0.4): its losses, aggregation, KL, advantage and log-probability functions.

Read from the installed sources:

- ``areal/utils/functional/functional.py:ppo_actor_loss_fn``: the PPO ratio ``exp(logp − prox)``
  without a clamp of the log-ratio, ``torch.where(loss_mask, ratio, 0)`` at padding, the clip
  ``[1 − eps_clip, 1 + (eps_clip_higher or eps_clip)]``, dual clip ``min(loss, c_clip·|A|)``
  (``sign(A)·c_clip·A``, for every sign: for ``A > 0`` the PPO loss is negative and the min keeps
  it), the behaviour weight of ``rejection_sampling`` (``areal.ppo_actor_behave_weight`` in
  :mod:`refimpl.frameworks._areal`), and the sum over the valid tokens divided by
  ``loss_mask.count_nonzero() or 1`` (the count before rejection sampling). With
  ``importance_sampling_level="sequence"`` (GSPO) the ratio is the geometric mean of the row
  (``_compute_sequence_level_ratio_and_advantages``) and every token's advantage is the row's mean
  advantage. ``sapo_loss_fn``: the sigmoid gate ``4/τ·σ(τ(ρ − 1))`` (``τ_pos`` where ``A > 0``), the
  ratio ``exp(logp − old)`` unmasked, the same sum over the mask count.
- The trainer (``areal/trainer/ppo/actor.py:PPOActor._ppo_update``) passes
  ``loss_weight_fn=lambda x: x["loss_mask"].count_nonzero()``; the engine
  (``areal/engine/fsdp_engine.py:FSDPEngine.train_batch``) sums it over the rank's micro-batches
  and all-reduces it (``areal/engine/core/train_engine.py:compute_total_loss_weight``, float32),
  and ``_compute_logprobs_and_loss`` multiplies each micro-batch loss by
  ``local_weight / total_loss_weight * dp_size`` (the ``areal`` scaling rule: local
  denominators, token-share accumulation, loss × world size, ranks averaged).
- ``areal/utils/data.py:KLEstimator``: ``k1 = d``, ``k2 = d²/2``, ``k3 = e^{−d} − 1 + d`` with
  ``d = logp.float() − base.float()``, clamped to ``[−10, 10]`` (``apply_clamp=True``, as
  ``PPOActor`` builds it); used as a reward (``−kl_ctl·KL``), not differentiated by AReaL.
- ``areal/utils/data.py:Normalization`` (``reward_norm``, ``adv_norm``): mean over the batch or
  over contiguous groups of ``group_size`` rows (leave-one-out optional), std over the batch or
  the group (``std_unbiased``, default True), computed in float64, ``x_centred / (std + eps)``
  with ``eps = 1e-5``, returned in float32. ``areal/utils/functional/functional.py:
  masked_normalization``: the masked batch whitening (population std by default, eps 1e-5).
- ``areal/utils/functional/vocab_parallel.py:gather_logprobs`` / ``gather_logprobs_entropy``:
  ``log_softmax(logits.float() / temperature)`` gathered at the labels (``torch.compile``-d),
  no top-k / top-p.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from refimpl.frameworks import (
    _areal_losses_actor,
    _areal_losses_decoupled,
    _areal_losses_decoupled_sequence,
    _areal_losses_proximal,
    _areal_losses_sequence,
)
from refimpl.frameworks._registry import Adapter, Divergence, Partition

_FUNCTIONAL = "areal.utils.functional"
_SCALAR = {"output": "scalar", "aggregation": "token_mean"}

_PADDING_NAN = Divergence(
    "defect",
    "ppo_actor_loss_fn computes torch.exp(logprobs - proximal_logprobs) on every entry and masks the "
    "ratio afterwards (torch.where(loss_mask, exp(...), 0), functional.py l.509); sapo_loss_fn takes "
    "torch.exp(log_ratio) unmasked (l.601). A padded entry whose log-ratio overflows exp gives inf, "
    "and the backward pass multiplies the 0 the where sends there by inf: the gradient is NaN at "
    "padding and the whole step's gradient is NaN.",
    draft_report=(
        "areal/utils/functional/functional.py: ppo_actor_loss_fn (importance_sampling_level='token') "
        "and sapo_loss_fn exponentiate the log-ratio at every position and apply loss_mask only to "
        "the result (`torch.where(loss_mask, torch.exp(logprobs - proximal_logprobs), 0)`; "
        "`ratio = torch.exp(log_ratio)` in sapo_loss_fn). With a padded 2-D batch whose masked "
        "positions hold arbitrary values (a log-ratio above ~88 in float32, ~709 in float64) the "
        "loss is finite but the gradient is NaN: torch.where's backward sends 0 to the masked "
        "entry and exp's backward multiplies it by inf. Masked positions should not contribute "
        "to the gradient; selecting the log-ratio first (`torch.where(loss_mask, logprobs - "
        "proximal_logprobs, 0)` before exp), as apply_rejection_sampling already sanitises its "
        "own log-ratio and as the GSPO branch (_compute_sequence_level_ratio_and_advantages) "
        "masks it before exp, keeps the gradient at 0. Failing input: one masked token with "
        "logprobs - proximal_logprobs = 1000 (or 1e30 padding)."
    ),
)
_OVERFLOW = Divergence(
    "numerical limit",
    "AReaL does not clamp the log-ratio before exp: at a log-ratio beyond the dtype's exp range "
    "(±1000 here) the ratio is inf or 0, and where the clipped branch (or the zero advantage) "
    "multiplies it the loss or the gradient is NaN where the exact value is finite.",
)


# --- policy losses ------------------------------------------------------------------------------


def areal_ppo_actor_loss(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    *,
    eps_low: Any,
    eps_high: Any,
    dual_clip: Any,
    mask: Any,
) -> Any:
    """``ppo_actor_loss_fn`` at token level without rejection sampling (``use_decoupled_loss=False``:
    the proximal log-probs are the old ones, as ``PPOActor._compute_advantages`` sets them)."""
    from areal.utils.functional import ppo_actor_loss_fn

    loss, _ = ppo_actor_loss_fn(
        logprobs=logp,
        proximal_logprobs=logp_old,
        old_logprobs=logp_old,
        advantages=advantages,
        eps_clip=eps_low,
        loss_mask=mask > 0,
        eps_clip_higher=eps_high,
        c_clip=dual_clip,
    )
    return loss


def areal_ppo_actor_loss_gspo(
    logp: Any, logp_old: Any, advantages: Any, *, eps_low: Any, eps_high: Any, mask: Any
) -> Any:
    """``ppo_actor_loss_fn(importance_sampling_level="sequence")``: GSPO on the padded 2-D layout."""
    from areal.utils.functional import ppo_actor_loss_fn

    loss, _ = ppo_actor_loss_fn(
        logprobs=logp,
        proximal_logprobs=logp_old,
        old_logprobs=logp_old,
        advantages=advantages,
        eps_clip=eps_low,
        loss_mask=mask > 0,
        eps_clip_higher=eps_high,
        importance_sampling_level="sequence",
    )
    return loss


def areal_sapo_loss(
    logp: Any, logp_old: Any, advantages: Any, *, tau_pos: Any, tau_neg: Any, mask: Any
) -> Any:
    """``sapo_loss_fn`` at token level (``actor.use_sapo_loss=True``)."""
    from areal.utils.functional import sapo_loss_fn

    loss, _ = sapo_loss_fn(
        logprobs=logp,
        old_logprobs=logp_old,
        advantages=advantages,
        tau_pos=tau_pos,
        tau_neg=tau_neg,
        loss_mask=mask > 0,
    )
    return loss


# --- aggregation and its scaling path -----------------------------------------------------------


def areal_token_mean(loss: Any, mask: Any) -> Any:
    """The aggregation inside ``ppo_actor_loss_fn`` (``Σ_mask pg_loss / (count_nonzero or 1)``), on a
    given loss matrix: at ratio 1 the PPO loss is ``−A``, so ``A = −loss`` (AReaL does not detach
    the advantages, so the gradient reaches ``loss``)."""
    import torch
    from areal.utils.functional import ppo_actor_loss_fn

    zero = torch.zeros_like(loss)
    out, _ = ppo_actor_loss_fn(
        logprobs=zero,
        proximal_logprobs=zero,
        old_logprobs=zero,
        advantages=-loss,
        eps_clip=0.2,
        loss_mask=mask > 0,
    )
    return out


def areal_token_mean_microbatch(
    logp: Any, logp_old: Any, advantages: Any, mask: Any, *, global_tokens: Any, world_size: Any
) -> Any:
    """One micro-batch through ``FSDPEngine._compute_logprobs_and_loss`` (the real scale
    ``local_weight / total_loss_weight * dp_size``) with PPOActor's ``loss_weight_fn`` and a loss_fn
    calling ``ppo_actor_loss_fn`` as ``grpo_loss_fn`` does; the engine's log-prob computation is
    replaced on the instance by one returning ``logp``, and ``total_loss_weight`` is the step's
    valid-token count in float32, as ``compute_total_loss_weight`` all-reduces it."""
    import torch
    from areal.engine.fsdp_engine import FSDPEngine, FSDPTrainContext
    from areal.utils.functional import ppo_actor_loss_fn

    class Config:
        is_critic = False

    class Parallel:
        sp_size = 1  # no Ulysses sequence parallelism

    engine = FSDPEngine.__new__(FSDPEngine)
    engine.config = Config()
    engine.parallel_helper = Parallel()
    engine.enable_tree_training = False
    engine._compute_logprobs_entropy = lambda logits, inputs, pad=0: (logp, torch.zeros_like(logp))
    adv = advantages[:, None].expand_as(logp)
    batch = {"logprobs": logp_old, "advantages": adv, "loss_mask": mask > 0}

    def loss_fn(logprobs: Any, entropy: Any, input_data: Any, **_: Any) -> Any:
        loss, _ = ppo_actor_loss_fn(
            logprobs=logprobs,
            proximal_logprobs=input_data["logprobs"],
            old_logprobs=input_data["logprobs"],
            advantages=input_data["advantages"],
            eps_clip=0.2,
            loss_mask=input_data["loss_mask"].bool(),
        )
        return loss

    return engine._compute_logprobs_and_loss(
        logp.sum().reshape(1),  # the model's logits: only their mean is read, for an empty batch
        FSDPTrainContext(model_inputs={}, mb_input=batch),
        loss_fn,
        lambda x: x["loss_mask"].count_nonzero(),
        torch.tensor(float(global_tokens), dtype=torch.float32),
        loss_multiplier=world_size,
    )


# --- KL estimators ------------------------------------------------------------------------------


def areal_kl_k1(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """``KLEstimator("k1")`` as ``PPOActor`` builds it (``apply_clamp=True``), masked as AReaL masks
    the log-probs (``old_logp *= loss_mask``, ``ref_logp *= loss_mask``)."""
    from areal.utils.data import KLEstimator

    return KLEstimator("k1")(logp * mask, logp_ref * mask)


def areal_kl_k2(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """``KLEstimator("k2")`` (``apply_clamp=True``) on masked log-probs."""
    from areal.utils.data import KLEstimator

    return KLEstimator("k2")(logp * mask, logp_ref * mask)


def areal_kl_k3(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """``KLEstimator("k3")`` (``apply_clamp=True``) on masked log-probs."""
    from areal.utils.data import KLEstimator

    return KLEstimator("k3")(logp * mask, logp_ref * mask)


_KL = {"clamp": 10.0, "compute_dtype": "float32"}


# --- advantages ---------------------------------------------------------------------------------


def areal_group_norm(rewards: Any, *, group: Any) -> Any:
    """``Normalization(mean_level="group", std_level="group")`` (``actor.reward_norm``), the group
    size read from the contiguous labels."""
    from areal.api.cli_args import NormConfig
    from areal.utils.data import Normalization

    size = int((group == group[0]).sum())
    config = NormConfig(mean_level="group", std_level="group", group_size=size)
    return Normalization(config)(rewards)


def areal_group_norm_population(rewards: Any, *, group: Any) -> Any:
    """``Normalization(mean_level="group", std_level="group", std_unbiased=False)``."""
    from areal.api.cli_args import NormConfig
    from areal.utils.data import Normalization

    size = int((group == group[0]).sum())
    config = NormConfig(mean_level="group", std_level="group", std_unbiased=False, group_size=size)
    return Normalization(config)(rewards)


def areal_group_mean(rewards: Any, *, group: Any) -> Any:
    """``Normalization(mean_level="group", std_level=None)``: the mean-centred form (Dr GRPO)."""
    from areal.api.cli_args import NormConfig
    from areal.utils.data import Normalization

    size = int((group == group[0]).sum())
    config = NormConfig(mean_level="group", std_level=None, group_size=size)
    return Normalization(config)(rewards)


def areal_group_leave_one_out(rewards: Any, *, group: Any) -> Any:
    """``Normalization(mean_level="group", mean_leave1out=True, std_level=None)``: RLOO."""
    from areal.api.cli_args import NormConfig
    from areal.utils.data import Normalization

    size = int((group == group[0]).sum())
    config = NormConfig(mean_level="group", mean_leave1out=True, std_level=None, group_size=size)
    return Normalization(config)(rewards)


def areal_adv_norm_batch(rewards: Any, *, mask: Any) -> Any:
    """``Normalization(mean_level="batch", std_level="batch")`` as ``actor.adv_norm`` applies it to
    the token advantages with the loss mask; with ``discount = gae_lambda = 1``, no critic and no
    KL reward, GAE gives every valid token its sequence's reward (REINFORCE++). The row's value is
    read at its first valid token (0 for a row without one)."""
    from areal.api.cli_args import NormConfig
    from areal.utils.data import Normalization

    config = NormConfig(mean_level="batch", std_level="batch")
    out = Normalization(config)(rewards[:, None] * mask, mask)
    return out.gather(1, mask.argmax(-1, keepdim=True))[:, 0]


def areal_adv_norm_group_mean(rewards: Any, *, mask: Any, group: Any) -> Any:
    """``Normalization(mean_level="group", std_level="batch")`` as ``actor.adv_norm`` on the token
    advantages of outcome rewards (REINFORCE++-baseline's shape); the row's value at its first
    valid token."""
    from areal.api.cli_args import NormConfig
    from areal.utils.data import Normalization

    size = int((group == group[0]).sum())
    config = NormConfig(mean_level="group", std_level="batch", group_size=size)
    out = Normalization(config)(rewards[:, None] * mask, mask)
    return out.gather(1, mask.argmax(-1, keepdim=True))[:, 0]


def areal_masked_normalization(rewards: Any, *, mask: Any) -> Any:
    """``masked_normalization(x, mask)`` with its defaults (population std, eps 1e-5) on the
    token advantages of outcome rewards; the row's value at its first valid token."""
    from areal.utils.functional import masked_normalization

    out = masked_normalization(rewards[:, None] * mask, mask)
    return out.gather(1, mask.argmax(-1, keepdim=True))[:, 0]


# --- log-probabilities --------------------------------------------------------------------------


def areal_gather_logprobs(logits: Any, tokens: Any, *, temperature: Any, mask: Any) -> Any:
    """``gather_logprobs(logits, labels, temperature)`` (no tensor parallelism); AReaL has no
    top-k / top-p in the trainer's log-probs, and masks them with the loss mask downstream."""
    import torch
    from areal.utils.functional import gather_logprobs

    logp = gather_logprobs(logits, tokens.long(), temperature=float(temperature))
    return torch.where(mask > 0, logp, 0.0)


def areal_gather_logprobs_entropy(logits: Any, tokens: Any, *, temperature: Any, mask: Any) -> Any:
    """The log-probs of ``gather_logprobs_entropy`` (what the engine passes the actor's loss)."""
    import torch
    from areal.utils.functional import gather_logprobs_entropy

    logp, _ = gather_logprobs_entropy(logits, tokens.long(), temperature=float(temperature))
    return torch.where(mask > 0, logp, 0.0)


def areal_entropy(logits: Any, *, temperature: Any) -> Any:
    """The entropy of ``gather_logprobs_entropy`` (``−Σ p·log p`` of ``softmax(logits.float() / T)``);
    the labels only select the log-probs, so any in-vocabulary labels do."""
    import torch
    from areal.utils.functional import gather_logprobs_entropy

    labels = torch.zeros(logits.shape[:-1], dtype=torch.long)
    _, entropy = gather_logprobs_entropy(logits, labels, temperature=float(temperature))
    return entropy


ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="areal.ppo_actor_loss",
        framework="areal",
        function=f"{_FUNCTIONAL}:ppo_actor_loss_fn",
        settings={
            "eps_clip": "eps_low",
            "eps_clip_higher": "eps_high",
            "c_clip": "dual_clip",
            "importance_sampling_level": "token",
            "rejection_sampling": None,
            "use_decoupled_loss": False,
        },
        spec="ppo_clip",
        conventions=_SCALAR,
        candidate=areal_ppo_actor_loss,
        divergences={
            "padding_contributes_nothing": _PADDING_NAN,
            "huge_log_ratios_stay_finite": _OVERFLOW,
        },
        note="PPO clip (clip-higher and dual clip drawn) on π_θ/π_old, summed over the mask and "
        "divided by its count.",
    ),
    Adapter(
        key="areal.ppo_actor_loss_gspo",
        framework="areal",
        function=f"{_FUNCTIONAL}:ppo_actor_loss_fn",
        settings={
            "eps_clip": "eps_low",
            "eps_clip_higher": "eps_high",
            "importance_sampling_level": "sequence",
            "rejection_sampling": None,
        },
        spec="gspo",
        conventions=_SCALAR,
        candidate=areal_ppo_actor_loss_gspo,
        divergences={"huge_log_ratios_stay_finite": _OVERFLOW},
        note="GSPO: the row's geometric-mean ratio, the row's mean advantage, token-mean aggregate.",
    ),
    Adapter(
        key="areal.sapo_loss",
        framework="areal",
        function=f"{_FUNCTIONAL}:sapo_loss_fn",
        settings={"sapo_tau_pos": "tau_pos", "sapo_tau_neg": "tau_neg", "level": "token"},
        spec="sapo",
        conventions=_SCALAR,
        candidate=areal_sapo_loss,
        divergences={
            "padding_contributes_nothing": _PADDING_NAN,
            "huge_log_ratios_stay_finite": _OVERFLOW,
        },
        note="SAPO's gate 4/τ·σ(τ(ρ − 1)) per token, token-mean aggregate.",
    ),
    Adapter(
        key="areal.token_mean",
        framework="areal",
        function=f"{_FUNCTIONAL}:ppo_actor_loss_fn",
        settings={"aggregation": "sum over loss_mask / (count_nonzero or 1)"},
        spec="aggregation",
        conventions={"mode": "token_mean"},
        candidate=areal_token_mean,
        note="The aggregation inside ppo_actor_loss_fn (there is no separate function), driven at "
        "ratio 1 with A = −loss.",
        partition=Partition(
            candidate=areal_token_mean_microbatch,
            mode="token_mean",
            rule="areal",
            # compute_total_loss_weight holds the step's count in float32 and the engine divides
            # the micro-batch count by it and multiplies by dp_size in float32: the scale is
            # rounded twice to float32 (relative 2·2^-24 each way), whatever the loss's dtype.
            rtol=4 * 2.0**-24,
            trainer="areal/trainer/ppo/actor.py:PPOActor._ppo_update passes loss_weight_fn = "
            "loss_mask.count_nonzero(); areal/engine/fsdp_engine.py:FSDPEngine.train_batch sums it "
            "over the rank's micro-batches and all-reduces it (engine/core/train_engine.py:"
            "compute_total_loss_weight) and _compute_logprobs_and_loss scales each micro-batch "
            "loss by local_weight / total_loss_weight * dp_size",
        ),
    ),
    Adapter(
        key="areal.kl_k1",
        framework="areal",
        function="areal.utils.data:KLEstimator",
        settings={"kl_estimator": "k1", "apply_clamp": True},
        spec="kl_penalty",
        conventions={"estimator": "k1", **_KL},
        candidate=areal_kl_k1,
        note="k1 = logp − logp_ref in float32, clamped to ±10 (the KL reward's estimator).",
    ),
    Adapter(
        key="areal.kl_k2",
        framework="areal",
        function="areal.utils.data:KLEstimator",
        settings={"kl_estimator": "k2", "apply_clamp": True},
        spec="kl_penalty",
        conventions={"estimator": "k2", **_KL},
        candidate=areal_kl_k2,
        note="k2 = d²/2 in float32, clamped to ±10.",
    ),
    Adapter(
        key="areal.kl_k3",
        framework="areal",
        function="areal.utils.data:KLEstimator",
        settings={"kl_estimator": "k3", "apply_clamp": True},
        spec="kl_penalty",
        conventions={"estimator": "k3", **_KL},
        candidate=areal_kl_k3,
        divergences={
            "huge_log_ratios_stay_finite": Divergence(
                "numerical limit",
                "k3 computes exp(−d) in float32 before the clamp to ±10: for d <= −89 exp "
                "overflows to inf, the clamp returns 10 and its zero gradient times inf is NaN. "
                "AReaL uses the estimate only as a reward (−kl_ctl·KL in "
                "PPOActor._compute_advantages), never differentiated, so the value (10) is what "
                "it uses.",
            )
        },
        note="k3 = e^{−d} − 1 + d in float32, clamped to ±10.",
    ),
)

_NORM = "areal.utils.data:Normalization"
#: Groups of three rows, one of them two tokens long in a group with rewards 0, 0, 1: AReaL's
#: token-weighted group mean (1/2) differs from the rewards' mean (1/3), and every advantage moves.
_UNEVEN_GROUP_CALL = (
    (np.array([0.0] * 8 + [1.0]),),
    {
        "group": np.array([0, 0, 0, 1, 1, 1, 2, 2, 2]),
        "mask": np.array([[1.0, 0.0]] * 8 + [[1.0, 1.0]]),
    },
)
# with the same rewards shifted by 1: the spec's shift_invariance compares a pair of calls
_UNEVEN_GROUP = [
    _UNEVEN_GROUP_CALL,
    ((_UNEVEN_GROUP_CALL[0][0] + 1.0,), _UNEVEN_GROUP_CALL[1]),
]
_GROUP = {"groups": "contiguous", "eps": 1e-5, "eps_placement": "std"}

ADAPTERS = (
    *ADAPTERS,
    Adapter(
        key="areal.group_norm",
        framework="areal",
        function=_NORM,
        settings={"mean_level": "group", "std_level": "group", "std_unbiased": True, "eps": 1e-5},
        spec="grpo_advantages",
        conventions={**_GROUP, "std": "sample"},
        candidate=areal_group_norm,
        dtype="float32",  # Normalization returns float32 (computed in float64)
        note="GRPO's group z-score (sample std + 1e-5) over contiguous groups of group_size rows.",
    ),
    Adapter(
        key="areal.group_norm_population",
        framework="areal",
        function=_NORM,
        settings={"mean_level": "group", "std_level": "group", "std_unbiased": False, "eps": 1e-5},
        spec="grpo_advantages",
        conventions={**_GROUP, "std": "population"},
        candidate=areal_group_norm_population,
        dtype="float32",
        note="The group z-score with the population std.",
    ),
    Adapter(
        key="areal.group_mean",
        framework="areal",
        function=_NORM,
        settings={"mean_level": "group", "std_level": None},
        spec="grpo_advantages",
        conventions={"groups": "contiguous", "std": "none", "eps": 0.0},
        candidate=areal_group_mean,
        dtype="float32",
        note="Dr GRPO's group-mean-centred rewards (std_level=None sets eps to 0).",
    ),
    Adapter(
        key="areal.group_leave_one_out",
        framework="areal",
        function=_NORM,
        settings={"mean_level": "group", "mean_leave1out": True, "std_level": None},
        spec="rloo_advantages",
        conventions={"groups": "contiguous", "singleton": "raw"},
        candidate=areal_group_leave_one_out,
        dtype="float32",
        note="RLOO: each reward minus the mean of the others in its group (group_size 1: mean 0).",
    ),
    Adapter(
        key="areal.adv_norm_batch",
        framework="areal",
        function=_NORM,
        settings={
            "adv_norm": {"mean_level": "batch", "std_level": "batch"},
            "discount": 1.0,
            "gae_lambda": 1.0,
        },
        spec="reinforce_pp_advantages",
        conventions={"std": "sample", "eps": 1e-5, "eps_placement": "std"},
        candidate=areal_adv_norm_batch,
        dtype="float32",
        note="REINFORCE++: token-weighted batch whitening of the outcome reward each valid token "
        "carries (sample std + 1e-5).",
    ),
    Adapter(
        key="areal.masked_normalization",
        framework="areal",
        function=f"{_FUNCTIONAL}:masked_normalization",
        settings={"unbiased": False, "eps": 1e-5},
        spec="reinforce_pp_advantages",
        conventions={"std": "population", "eps": 1e-5, "eps_placement": "std"},
        candidate=areal_masked_normalization,
        dtype="float32",
        note="The functional batch whitening (population std + 1e-5) on the outcome rewards' tokens.",
    ),
    Adapter(
        key="areal.gather_logprobs",
        framework="areal",
        function=f"{_FUNCTIONAL}:gather_logprobs",
        settings={"temperature": "temperature", "tp_group": None},
        spec="token_logprobs",
        conventions={"compute_dtype": "float32", "truncation": "none"},
        candidate=areal_gather_logprobs,
        note="log_softmax(logits.float() / T) at the labels.",
    ),
    Adapter(
        key="areal.gather_logprobs_entropy",
        framework="areal",
        function=f"{_FUNCTIONAL}:gather_logprobs_entropy",
        settings={"temperature": "temperature", "tp_group": None},
        spec="token_logprobs",
        conventions={"compute_dtype": "float32", "truncation": "none"},
        candidate=areal_gather_logprobs_entropy,
        note="The log-probs of the fused log-prob/entropy pass the FSDP engine uses for training.",
    ),
)

ADAPTERS = (
    *ADAPTERS,
    Adapter(
        key="areal.entropy",
        framework="areal",
        function=f"{_FUNCTIONAL}:gather_logprobs_entropy",
        settings={"temperature": "temperature", "tp_group": None},
        spec="token_entropy",
        conventions={"mask": "none", "padding": "ignored", "compute_dtype": "float32"},
        candidate=areal_entropy,
        note="The entropy the FSDP engine computes with the log-probs (logged by the actor, "
        "detached there), at every position.",
    ),
)

ADAPTERS = (
    *ADAPTERS,
    Adapter(
        key="areal.adv_norm_group_mean_batch_std",
        framework="areal",
        function=_NORM,
        settings={
            "adv_norm": {"mean_level": "group", "std_level": "batch"},
            "discount": 1.0,
            "gae_lambda": 1.0,
        },
        spec="reinforce_pp_advantages",
        conventions={
            "baseline": "group",
            "groups": "contiguous",
            "std": "sample",
            "eps": 1e-5,
            "eps_placement": "std",
        },
        candidate=areal_adv_norm_group_mean,
        dtype="float32",
        divergences={
            "values": Divergence(
                "convention",
                "Normalization._compute_mean with mean_level='group' averages the group's valid "
                "tokens (a sequence weighs its length), and the batch std is taken around that "
                "mean with no second centring (data.py Normalization.__call__); the reference "
                "subtracts the unweighted mean of the group's rewards, then the token-weighted "
                "batch mean. They agree when a group's sequences have equal lengths.",
            )
        },
        examples=(_UNEVEN_GROUP,),
        note="Group-centred token advantages whitened by the batch's token std (sample + 1e-5).",
    ),
)

# M2PO's mask lives in areal/trainer/ppo/actor.py, importable only with the areal.trainer stub
ADAPTERS = (*ADAPTERS, *_areal_losses_actor.ADAPTERS, *_areal_losses_sequence.ADAPTERS)
ADAPTERS = (
    *ADAPTERS,
    *_areal_losses_decoupled.ADAPTERS,
    *_areal_losses_decoupled_sequence.ADAPTERS,
    *_areal_losses_proximal.ADAPTERS,
)

__all__ = ["ADAPTERS"]
