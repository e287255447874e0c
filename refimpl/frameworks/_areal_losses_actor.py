"""AReaL 1.0.4: the loss-level helpers of ``areal/trainer/ppo/actor.py`` (M2PO, the KDRL term, GAE).

``_apply_m2po_masking(old_logp, prox_logp, loss_mask, m2_threshold)`` (``actor.m2_threshold``,
applied by ``grpo_loss_fn`` before the PPO or SAPO loss): the squared ``old_logp − prox_logp`` of
the batch's valid tokens, sorted in descending order; ``_get_m2po_loss_mask`` drops the largest
until the mean of the rest is ``< m2_threshold`` (strictly), keeping at least one token.
``grpo_loss_fn`` with ``teacher_logp`` in the batch and ``rl_loss_weight != 0`` adds
``distill_loss_weight · Σ (logprobs − teacher_logp)·mask / mask.sum().clamp(min=1)`` to the PPO
loss (``rl_loss_weight = 0``, pure distillation, is the importance-weighted REINFORCE form
``−distill_loss_weight · Σ exp(logprobs − old_logp)·(teacher_logp − sg[logprobs])·mask /
max(Σ mask, 1)`` instead).
``PPOActor._compute_advantages`` computes the rewards (the outcome reward at the last response
token, ``−kl_ctl·KL`` at every token, 0 after EOS) and GAE inline: a backward loop over the
rolled loss mask that carries ``nextvalues`` and ``lastgaelam`` across masked positions (a
masked position is skipped, its advantage is the carried one), starting from the value at the
last position for a row without EOS (``seqlens == max_seqlen``) and 0 otherwise; the returns are
``advantages + values``, before ``adv_norm``.

``areal.trainer.ppo.actor`` cannot be imported as installed: the package ``areal.trainer``'s
``__init__`` imports ``dpo_trainer`` → ``areal.utils.stats_logger`` → ``swanlab``, which is not
installed (and the actor needs none of it). With ``areal.trainer`` stubbed (its ``__init__``
skipped, every submodule still loaded from its file) the module imports; until
:data:`refimpl.frameworks.STUBS` has that stub these adapters are not registered, since the
framework stage's conftest loads every adapter's function.
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter, Divergence
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


def areal_pure_distillation(logp: Any, logp_old: Any, logp_teacher: Any, *, mask: Any) -> Any:
    """``grpo_loss_fn`` with ``teacher_logp`` in the batch, ``rl_loss_weight = 0`` (pure KD) and
    ``distill_loss_weight = 1``: ``−Σ exp(logp − old)·(teacher − sg[logp])·mask / max(Σ mask, 1)``
    (the PPO loss it also computes on zero advantages is discarded). π_prox = π_old."""
    import torch
    from areal.trainer.ppo.actor import grpo_loss_fn

    data = {
        "logprobs": logp_old,
        "prox_logp": logp_old,
        "advantages": torch.zeros_like(logp_old),
        "loss_mask": mask > 0,
        "teacher_logp": logp_teacher,
        "rl_loss_weight": 0.0,
        "distill_loss_weight": 1.0,
    }
    return grpo_loss_fn(
        logp, torch.zeros_like(logp_old), data, eps_clip=0.2, eps_clip_higher=None, c_clip=None
    )


def _compute_advantages(
    rewards: Any, values: Any, mask: Any, *, gamma: Any, lam: Any, adv_norm: Any
) -> Any:
    """``PPOActor._compute_advantages`` on an instance with only the attributes it reads (no
    reward bias, scaling, clip or reward normalisation, ``kl_ctl = 1`` and the estimator
    ``KLEstimator("k1")`` as ``PPOActor.__init__`` builds it). AReaL's layout has one prompt token
    before the T response tokens; ``loss_mask`` is rolled by −1 there, so position t of the
    rolled arrays is response token t. The per-token rewards enter as the KL reward
    ``−kl_ctl·k1(logprobs = 0, ref_logp = r)``, the outcome reward is 0, the value at the extra
    last position (the bootstrap of a row without EOS) is 0. Returns (advantages, returns)."""
    import torch
    from areal.trainer.ppo.actor import PPOActor
    from areal.utils.data import KLEstimator

    class Config:
        overlong_reward_penalty = False
        use_decoupled_loss = False
        recompute_logprob = False

    actor = PPOActor.__new__(PPOActor)
    actor.config = Config()
    actor.reward_bias, actor.reward_scaling, actor.reward_clip = 0.0, 1.0, 1e30
    actor.reward_norm, actor.adv_norm = None, adv_norm
    actor.kl_ctl, actor.kl_estimator = 1.0, KLEstimator("k1")
    actor.discount, actor.gae_lambda, actor.mask_no_eos_with_zero = gamma, lam, False
    batch, time = rewards.shape
    one = torch.zeros((batch, 1), dtype=rewards.dtype)
    last = (mask > 0).float().cumsum(-1).argmax(-1)  # each row's last valid token (0 if none)
    seqlens = torch.where((mask > 0).any(-1), last + 2, 1)  # prompt + response up to it
    data = {
        "input_ids": torch.zeros((batch, time + 1), dtype=torch.long),
        "rewards": torch.zeros(batch, dtype=rewards.dtype),
        "loss_mask": torch.cat([one, (mask > 0).to(rewards.dtype)], dim=1),
        "logprobs": torch.zeros((batch, time + 1), dtype=rewards.dtype),
        "ref_logp": torch.cat([rewards, one], dim=1),
        "values": torch.cat([values, one], dim=1),
        "attention_mask": (torch.arange(time + 1)[None, :] < seqlens[:, None]).long(),
    }
    out = actor._compute_advantages(data)
    return out["advantages"][:, :time], out["returns"][:, :time]


def areal_gae(rewards: Any, values: Any, *, gamma: Any, lam: Any, mask: Any) -> Any:
    """GAE inline in ``PPOActor._compute_advantages`` with ``adv_norm=None``."""
    return _compute_advantages(rewards, values, mask, gamma=gamma, lam=lam, adv_norm=None)


def areal_gae_adv_norm(rewards: Any, values: Any, *, gamma: Any, lam: Any, mask: Any) -> Any:
    """GAE in ``PPOActor._compute_advantages`` followed by ``adv_norm`` (``Normalization`` with
    ``mean_level = std_level = "batch"``, its defaults: sample std, ``eps = 1e-5`` added to it)
    over the rolled loss mask."""
    from areal.api.cli_args import NormConfig
    from areal.utils.data import Normalization

    norm = Normalization(NormConfig(mean_level="batch", std_level="batch"))
    return _compute_advantages(rewards, values, mask, gamma=gamma, lam=lam, adv_norm=norm)


def areal_kl_reward(
    rewards: Any,
    kl: Any,
    *,
    beta: Any,
    reward_clip: Any,
    mask: Any,
    reward_bias: Any,
    reward_scaling: Any,
) -> Any:
    """``PPOActor._compute_advantages``'s ``tot_rewards``: ``kl_ctl = beta``, the estimator
    ``KLEstimator("k1")`` on ``logprobs`` holding ``kl`` (rolled by −1 onto the response tokens)
    against ``ref_logp = 0``, the outcome ``rewards`` shaped by the actor's own
    ``clip((r + reward_bias) * reward_scaling, ±reward_clip)`` (``reward_clip = c`` for the
    spec's symmetric ``(−c, c)``, ``inf`` for none), in the layout of
    :func:`_compute_advantages` (one prompt token, then the T response tokens)."""
    import math

    import torch
    from areal.trainer.ppo.actor import PPOActor
    from areal.utils.data import KLEstimator

    class Config:
        overlong_reward_penalty = False
        use_decoupled_loss = False
        recompute_logprob = False

    actor = PPOActor.__new__(PPOActor)
    actor.config = Config()
    actor.reward_bias, actor.reward_scaling = float(reward_bias), float(reward_scaling)
    actor.reward_clip = math.inf if reward_clip is None else float(reward_clip[1])
    actor.reward_norm, actor.adv_norm = None, None
    actor.kl_ctl, actor.kl_estimator = float(beta), KLEstimator("k1")
    actor.discount, actor.gae_lambda, actor.mask_no_eos_with_zero = 1.0, 1.0, False
    batch, time = kl.shape
    one = torch.zeros((batch, 1), dtype=kl.dtype)
    last = (mask > 0).float().cumsum(-1).argmax(-1)  # each row's last valid token (0 if none)
    seqlens = torch.where((mask > 0).any(-1), last + 2, 1)  # prompt + response up to it
    data = {
        "input_ids": torch.zeros((batch, time + 1), dtype=torch.long),
        "rewards": torch.as_tensor(rewards, dtype=kl.dtype),
        "loss_mask": torch.cat([one, (mask > 0).to(kl.dtype)], dim=1),
        "logprobs": torch.cat([one, kl], dim=1),
        "attention_mask": (torch.arange(time + 1)[None, :] < seqlens[:, None]).long(),
    }
    return actor._compute_advantages(data)["tot_rewards"][:, :time]


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
    Adapter(
        key="areal.grpo_loss_pure_distillation",
        framework="areal",
        function="areal.trainer.ppo.actor:grpo_loss_fn",
        settings={
            "teacher_logp": "logp_teacher",
            "rl_loss_weight": 0.0,
            "distill_loss_weight": 1.0,
        },
        spec="reverse_kl_distillation",
        conventions={"output": "scalar", "aggregation": "token_mean"},
        candidate=areal_pure_distillation,
        dtype="float32",  # grpo_loss_fn's stats_tracker.stat refuses float64 tensors
        divergences={
            "padding_contributes_nothing": Divergence(
                "defect",
                "grpo_loss_fn's pure-distillation branch multiplies by the mask after exp "
                "(importance_weight * rkl_reward * loss_mask): a padded entry whose log-ratio "
                "overflows exp gives inf·0 = NaN in the loss and in the gradient.",
                draft_report=(
                    "areal/trainer/ppo/actor.py: grpo_loss_fn with teacher_logp and "
                    "rl_loss_weight == 0 computes `importance_weight = torch.exp(logprobs - "
                    "old_logp)` at every position and masks with `* loss_mask` afterwards. A "
                    "padded position whose logprobs - old_logp exceeds ~88 (float32) makes "
                    "importance_weight inf, and inf * 0 is NaN: the loss and the step's gradient "
                    "are NaN although the position is masked. Selecting before exp "
                    "(`torch.exp(torch.where(loss_mask, logprobs - old_logp, 0))`), as "
                    "apply_rejection_sampling does for its own log-ratio, keeps padding inert. "
                    "Failing input: one padded token with logprobs - old_logp = 1e30."
                ),
            ),
            "huge_log_ratios_stay_finite": Divergence(
                "defect",
                "The smallest failing input is a padded token with log-ratio 100: the padding "
                "defect above (inf·0 after exp). A real token beyond float32's exp range whose "
                "reward is 0 (teacher = student) is NaN too where the exact loss is 0, a "
                "numerical limit of the unclamped ratio.",
                draft_report="See padding_contributes_nothing: the same line, "
                "importance_weight * rkl_reward * loss_mask in grpo_loss_fn.",
            ),
        },
        note="Pure distillation (rl_loss_weight = 0): the importance-weighted policy gradient of "
        "the reward log π_T − sg[log π], token-mean over the mask.",
    ),
    Adapter(
        key="areal.kl_reward",
        framework="areal",
        function="areal.trainer.ppo.actor:PPOActor._compute_advantages",
        settings={
            "kl_ctl": "beta",
            "kl_estimator": "k1",
            "reward_bias": "reward_bias",
            "reward_scaling": "reward_scaling",
            "reward_clip": "c of the spec's (−c, c), inf for none",
            "mask_no_eos_with_zero": False,
        },
        spec="kl_reward",
        conventions={
            "reward_clip": "symmetric",
            "reward_shaping": "bias_scale",
            "padding": "ignored",
        },
        candidate=areal_kl_reward,
        dtype="float32",  # KLEstimator computes the KL from .float() copies
        note="tot_rewards: −kl_ctl·k1 at every valid token, the outcome shaped as "
        "clip((r + reward_bias)·reward_scaling, ±reward_clip) added at the last one; a row without a response token carries its outcome at a masked position (GAE skips it).",
    ),
    Adapter(
        key="areal.gae",
        framework="areal",
        function="areal.trainer.ppo.actor:PPOActor._compute_advantages",
        settings={
            "discount": "gamma",
            "gae_lambda": "lam",
            "adv_norm": None,
            "reward_norm": None,
            "kl_ctl": 1.0,
            "kl_estimator": "k1",
            "mask_no_eos_with_zero": False,
        },
        spec="gae_advantages",
        conventions={
            "output": "both",
            "gaps": "skip",
            "bootstrap": "zero",
            "padding": "ignored",
        },
        candidate=areal_gae,
        dtype="float32",  # KLEstimator computes the KL reward from .float() copies
        note="The GAE recursion inline in the actor (masked positions skipped, the value after a "
        "row's last valid token 0), on per-token rewards given as its KL reward.",
    ),
    Adapter(
        key="areal.gae_adv_norm",
        framework="areal",
        function="areal.trainer.ppo.actor:PPOActor._compute_advantages",
        settings={
            "discount": "gamma",
            "gae_lambda": "lam",
            "adv_norm": {"mean_level": "batch", "std_level": "batch"},
            "reward_norm": None,
            "kl_ctl": 1.0,
            "kl_estimator": "k1",
            "mask_no_eos_with_zero": False,
        },
        spec="gae_advantages",
        conventions={
            "output": "both",
            "whiten": "batch",
            "whiten_std": "sample",
            "whiten_eps": 1e-5,
            "eps_placement": "std",
            "gaps": "skip",
            "bootstrap": "zero",
            "padding": "ignored",
        },
        candidate=areal_gae_adv_norm,
        dtype="float32",
        note="GAE whitened over the batch's valid tokens by adv_norm (sample std + 1e-5); the "
        "returns are the raw advantages plus the values.",
    ),
)

ADAPTERS: tuple[Adapter, ...] = (
    _ADAPTERS if any(s.package == "areal.trainer" for s in STUBS) else ()
)

__all__ = ["ADAPTERS"]
