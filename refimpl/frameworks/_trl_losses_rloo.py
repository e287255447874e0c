"""TRL (trl 1.16.0): ``RLOOTrainer``'s loss, read from its installed sources.

- ``trl/trainer/rloo_trainer.py`` ``RLOOTrainer._compute_loss``: one ratio per sequence, the
  sequence-likelihood ratio ``coef_1 = exp(Σ_t m·logp − old_logps)`` (``old_logps`` is
  ``(old_per_token_logps * completion_mask).sum(1)``, set in ``_generate_and_score_completions``),
  clipped PPO-style, ``coef_2 = clamp(coef_1, 1 − epsilon, 1 + epsilon_high)``,
  ``per_sequence_loss = −min(coef_1·A, coef_2·A)``, and ``loss = per_sequence_loss.mean()`` over
  every row; no log-ratio clamp, no dual clip, no KL term (RLOO puts ``beta``'s KL in the reward).
  The HF Trainer divides the returned loss by the accumulation steps.
- ``RLOOTrainer._generate_and_score_completions`` with ``normalize_advantages=True``: the
  leave-one-out advantages (float32 rewards, contiguous groups of ``num_generations``), then
  ``(A − nanmean(A)) / (nanstd(A) + 1e-4)`` over the generation batch (``nanstd`` Bessel-corrected).
- The same method with ``beta > 0`` and ``reward_clip_range``: the float32 rewards clamped to the
  range, then ``rewards − beta·kl`` with ``kl = ((old_per_token_logps − ref_per_token_logps) *
  completion_mask).sum(-1)`` (the k1 estimate summed over the completion, the RLOO paper's
  sequence-level penalty; the clamp does not touch it), then the leave-one-out baseline on the
  penalised rewards (:func:`refimpl.losses.kl_reward.rloo_kl_advantages`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from refimpl.frameworks._registry import Adapter, Divergence, Partition
from refimpl.losses.partition import ScalingRule

_RLOO = "trl.trainer.rloo_trainer:RLOOTrainer._compute_loss"
_SCORE = "trl.trainer.rloo_trainer:RLOOTrainer._generate_and_score_completions"


def trl_rloo_loss(
    logp: Any, logp_old: Any, advantages: Any, *, eps_low: Any, eps_high: Any, mask: Any
) -> Any:
    """TRL's ``RLOOTrainer._compute_loss`` (``epsilon=eps_low``, ``epsilon_high=eps_high``, falling
    back to ``epsilon`` as ``__init__`` does) on an instance made with ``__new__``: its model
    forward ``_get_per_token_logps_and_entropies`` returns ``logp`` (zero entropies, read only by
    metrics), ``old_logps`` is the masked sum of ``logp_old`` as the trainer stores it, the
    advantages are the (B,) per sequence (the spec's are constant along each row), an empty
    prompt, a single-process accelerator stand-in (metrics only)."""
    import collections
    import types

    import torch
    from trl.trainer.rloo_trainer import RLOOTrainer

    trainer = RLOOTrainer.__new__(RLOOTrainer)
    trainer.epsilon_low = float(eps_low)
    trainer.epsilon_high = float(eps_low if eps_high is None else eps_high)
    trainer.aux_loss_enabled = False
    trainer.model = types.SimpleNamespace(training=True)
    trainer._metrics = {"train": collections.defaultdict(list)}
    trainer.accelerator = types.SimpleNamespace(
        gather=lambda t: t, gather_for_metrics=lambda t: t, reduce=lambda t, reduction="sum": t
    )

    def forward(*_args: Any, **_kwargs: Any) -> tuple[Any, Any, None]:
        return logp, torch.zeros_like(logp.detach()), None

    trainer._get_per_token_logps_and_entropies = forward
    m = (torch.as_tensor(mask) > 0).to(torch.long)
    inputs = {
        "prompt_ids": torch.zeros((m.shape[0], 0), dtype=torch.long),
        "prompt_mask": torch.zeros((m.shape[0], 0), dtype=torch.long),
        "completion_ids": torch.zeros_like(m),
        "completion_mask": m,
        "old_logps": (logp_old * m).sum(1),
        "advantages": advantages[:, 0],
    }
    return trainer._compute_loss(None, inputs)


def trl_rloo_micro_batch(
    logp: Any, logp_old: Any, advantages: Any, mask: Any, *, accumulation_steps: Any
) -> Any:
    """One micro-batch of ``RLOOTrainer``'s step: the real ``_compute_loss`` (through
    :func:`trl_rloo_loss`, clip range ``ε = 1`` on both sides so that no drawn sequence ratio is
    clipped) divided by the accumulation steps, as transformers 5.10's ``Trainer.training_step``
    does for a trainer with ``loss_is_scaled_for_ga = False`` (``loss /
    current_gradient_accumulation_steps``); DDP then averages the ranks' gradients."""
    from refimpl.frameworks._trl_losses_rloo import trl_rloo_loss

    loss = trl_rloo_loss(logp, logp_old, advantages[:, None], eps_low=1.0, eps_high=1.0, mask=mask)
    return loss / accumulation_steps


def trl_rloo_normalized_advantages(rewards: Any, *, group: Any) -> Any:
    """TRL ``RLOOTrainer`` with ``normalize_advantages=True``: the real
    ``RLOOTrainer._generate_and_score_completions`` on the scoring stand-in of
    :func:`refimpl.frameworks._trl_losses_advantages.scoring_trainer`, its ``advantages``."""
    from trl.trainer.rloo_trainer import RLOOTrainer

    from refimpl.frameworks._trl_losses_advantages import _prompts, scoring_trainer

    t = scoring_trainer(RLOOTrainer, rewards, group, normalize_advantages=True)
    return t._generate_and_score_completions(_prompts(rewards))["advantages"]


def trl_rloo_kl_advantages(
    rewards: Any, logp: Any, logp_ref: Any, *, group: Any, beta: Any, reward_clip: Any, mask: Any
) -> Any:
    """TRL ``RLOOTrainer`` with ``beta > 0`` and ``reward_clip_range``: the real
    ``RLOOTrainer._generate_and_score_completions`` on the scoring stand-in of
    :func:`refimpl.frameworks._trl_losses_advantages.scoring_trainer`, its ``advantages``, with
    :func:`_with_completions` giving each row its completion length and log-probabilities."""
    from trl.trainer.rloo_trainer import RLOOTrainer

    from refimpl.frameworks._trl_losses_advantages import _prompts, scoring_trainer
    from refimpl.frameworks._trl_losses_rloo import _with_completions

    t = scoring_trainer(
        RLOOTrainer, rewards, group, normalize_advantages=False, beta=float(beta),
        reward_clip_range=None if reward_clip is None else tuple(reward_clip),
    )  # fmt: skip
    _with_completions(t, logp, logp_ref, mask)
    return t._generate_and_score_completions(_prompts(rewards))["advantages"]


def trl_rloo_kl_normalized_advantages(
    rewards: Any, logp: Any, logp_ref: Any, *, group: Any, beta: Any, reward_clip: Any, mask: Any
) -> Any:
    """As :func:`trl_rloo_kl_advantages` with ``normalize_advantages=True``."""
    from trl.trainer.rloo_trainer import RLOOTrainer

    from refimpl.frameworks._trl_losses_advantages import _prompts, scoring_trainer
    from refimpl.frameworks._trl_losses_rloo import _with_completions

    t = scoring_trainer(
        RLOOTrainer, rewards, group, normalize_advantages=True, beta=float(beta),
        reward_clip_range=None if reward_clip is None else tuple(reward_clip),
    )  # fmt: skip
    _with_completions(t, logp, logp_ref, mask)
    return t._generate_and_score_completions(_prompts(rewards))["advantages"]


def _with_completions(t: Any, logp: Any, logp_ref: Any, mask: Any) -> None:
    """Give the scoring stand-in completions of each row's length (``mask``'s valid prefix; TRL
    pads them on the right into ``completion_mask``), a reference model, and a forward
    ``_get_per_token_logps_and_entropies`` that returns ``logp`` for the policy and ``logp_ref``
    for ``ref_model``, cut to the padded width; the accelerator's ``reduce`` (read only for the
    logged mean KL) is the single-process identity."""
    lengths = [int(n) for n in mask.sum(dim=1).tolist()]
    width = max(lengths)

    def generate(prompts: Any) -> tuple[Any, ...]:
        return [[1]] * len(lengths), [[1] * n for n in lengths], ["c"] * len(lengths)

    def logps(model: Any, *_args: Any, **_kwargs: Any) -> tuple[Any, None, None]:
        chosen = logp_ref if model is t.ref_model else logp
        return chosen[:, :width], None, None

    t.ref_model = object()
    t.accelerator.reduce = lambda x, reduction="sum": x  # the logged KL metric, one process
    t._generate = generate
    t._get_per_token_logps_and_entropies = logps


_EMPTY_ROW = [
    (
        (np.array([[0.0]]), np.array([[0.0]]), np.array([[1.0]])),
        {"eps_low": 0.2, "eps_high": None, "mask": np.array([[0.0]])},
    )
]
_CANCELLATION = (
    "With empty rows excluded the value still differs on long rows (T = 4096, by ~5e-13 "
    "relative in float64), a numerical limit: RLOOTrainer sums each side's log-probabilities over the sequence before subtracting "
    "(logps = (per_token_logps * completion_mask).sum(1); old_logps likewise in "
    "_generate_and_score_completions; log_ratio = logps − old_logps): the rounding of the two "
    "sums scales with Σ_t |log π| (thousands of nats for a long completion), not with the "
    "log-ratios, so the sequence ratio carries a relative error of about u·Σ_t|log π|. Measured "
    "on T = 4096 tokens of log-probability about −2 and log-ratios of 1e-3: in float32 the "
    "summed log-ratio is off by up to 8.9e-4 (ratio off by ~0.09%), against 9.4e-9 when the "
    "per-token differences are summed; in float64 by about 1e-12."
)
_EMPTY = (
    "RLOOTrainer._compute_loss gives a completion without a valid token (e.g. one zeroed by "
    "mask_truncated_completions=True, which keeps its advantage) the log-ratio 0 − 0, coef = 1, "
    "and per_sequence_loss = −A enters per_sequence_loss.mean(): the loss value carries −A/B for "
    "every empty completion (the gradient is unaffected), where the reference gives 0. "
)
_EMPTY_REPORT = (
    "trl 1.16.0, trl/trainer/rloo_trainer.py RLOOTrainer._compute_loss: for a completion whose "
    "completion_mask has no valid token (mask_truncated_completions=True zeroes a truncated "
    "completion's mask in _generate_and_score_completions but keeps its advantage), logps = "
    "(per_token_logps * completion_mask).sum(1) and old_logps are 0, coef_1 = exp(0) = 1, and "
    "per_sequence_loss = -min(A, clamp(1)·A) = -A enters per_sequence_loss.mean(). The gradient "
    "is unaffected (no token depends on it), but the returned and logged loss is shifted by "
    "-A/B per empty completion. Failing input: one row, mask [[0]], advantage 1: the loss is "
    "-1.0, expected 0. Multiplying per_sequence_loss by (completion_mask.sum(1) > 0) would make "
    "it 0."
)
_OVERFLOW = Divergence(
    "numerical limit",
    "Also, RLOOTrainer._compute_loss exponentiates the summed log-ratio without a clamp (coef_1 = "
    "torch.exp(log_ratio)): a sequence whose log-ratio sum passes ~709 (float64; ~88 in "
    "float32) overflows exp, and inf·0 (a zero advantage) is NaN. The sum over a sequence "
    "reaches that with far smaller per-token log-ratios than a token-level ratio does.",
)

ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="trl.rloo",
        framework="trl",
        function=_RLOO,
        settings={"epsilon": "eps_low", "epsilon_high": "eps_high"},
        spec="sequence_ppo_clip",
        conventions={
            "output": "scalar",
            "aggregation": "seq_mean_token_mean",
            "sequence_count": "all",
        },
        candidate=trl_rloo_loss,
        divergences={
            "values": Divergence("defect", _EMPTY + _CANCELLATION, _EMPTY_REPORT),
            **{
                check: Divergence("defect", _EMPTY, _EMPTY_REPORT)
                for check in ("padding_contributes_nothing", "ratios_at_clip_boundaries")
            },
            "huge_log_ratios_stay_finite": Divergence(
                "defect", _EMPTY + _OVERFLOW.explanation, _EMPTY_REPORT
            ),
        },
        examples=(_EMPTY_ROW,),
        note="PPO-clip once per sequence on exp(Σ m·logp − old_logps), −min(coef·A, clip·A), "
        "mean over every row.",
        partition=Partition(
            candidate=trl_rloo_micro_batch,
            mode="seq_mean_token_mean",
            rule=ScalingRule("local", "mean", "mean", False, "trl_rloo"),
            empty_rows="counted",
            ratio="sequence",
            trainer="trl/trainer/rloo_trainer.py:RLOOTrainer._compute_loss (per_sequence_loss."
            "mean() over the micro-batch's rows, empty ones included) and transformers/trainer.py:"
            "Trainer.training_step (loss / current_gradient_accumulation_steps, since "
            "loss_is_scaled_for_ga = False); DDP averages the ranks",
            divergences={"value": Divergence("defect", _EMPTY, _EMPTY_REPORT)},
        ),
    ),
    Adapter(
        key="trl.rloo_advantages_normalized",
        framework="trl",
        function=_SCORE,
        settings={"normalize_advantages": True, "num_generations": "the group size"},
        spec="rloo_normalized_advantages",
        conventions={"groups": "contiguous", "singleton": "zero", "eps": 1e-4},
        candidate=trl_rloo_normalized_advantages,
        dtype="float32",
        note="Leave-one-out advantages, then (A − nanmean) / (nanstd + 1e-4) over the batch, "
        "float32.",
    ),
    Adapter(
        key="trl.rloo_kl_advantages",
        framework="trl",
        function=_SCORE,
        settings={
            "beta": "beta",
            "reward_clip_range": "reward_clip",
            "normalize_advantages": False,
            "num_generations": "the group size",
        },
        spec="rloo_kl_advantages",
        conventions={"groups": "contiguous", "normalize": "none"},
        candidate=trl_rloo_kl_advantages,
        dtype="float32",
        note="clamp(r, *reward_clip_range) − beta·Σ m·(old − ref logps), then leave-one-out, "
        "float32.",
    ),
    Adapter(
        key="trl.rloo_kl_advantages_normalized",
        framework="trl",
        function=_SCORE,
        settings={
            "beta": "beta",
            "reward_clip_range": "reward_clip",
            "normalize_advantages": True,
            "num_generations": "the group size",
        },
        spec="rloo_kl_advantages",
        conventions={"groups": "contiguous", "normalize": "batch", "eps": 1e-4},
        candidate=trl_rloo_kl_normalized_advantages,
        dtype="float32",
        note="The KL-penalised leave-one-out advantages standardised over the batch (nanstd + "
        "1e-4), float32.",
    ),
)

__all__ = ["ADAPTERS"]
