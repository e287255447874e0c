"""TRL (trl 1.16.0): the vLLM importance-sampling correction in ``_generate_and_score_completions``.

With ``use_vllm=True`` and ``vllm_importance_sampling_correction=True``,
``GRPOTrainer._generate_and_score_completions`` (``trl/trainer/grpo_trainer.py``) weighs each
completion by ``π_old/μ``, the trainer's recomputed log-probabilities against vLLM's sampling
ones, in about forty inline lines between generation and reward scoring: there is no function to
import. The adapters run that method itself on the trainer
:func:`~refimpl.frameworks._trl_losses_advantages.scoring_trainer` builds (made with ``__new__``:
text only, single process, no environments, tools, images or KL), with the correction switched
on, ``_generate`` returning each row's completion (its valid prefix of ``mask``) and the drawn
``log μ`` of its tokens (a NaN as ``None``, as vLLM's ``extract_logprobs`` hands it over), and
``_get_per_token_logps_and_entropies`` returning the drawn ``log π_old`` (the ``logits_to_keep``
columns a model returns); ``pad_to_multiple_of`` is the batch's width ``T``, so TRL pads the
completions to it. The adapters read the returned ``importance_sampling_ratio``. As read there
(``vllm_importance_sampling_mode``):

- the sampling log-probabilities become a float32 tensor (``torch.tensor`` of vLLM's floats,
  ``None`` mapped to NaN), right-padded with 0;
- ``d = nan_to_num((log π_old − log μ)·mask, nan=0)``: a NaN (vLLM's missing log-probability, or
  any NaN at padding) gives ratio 1; ``nan_to_num`` also maps ``±inf`` to ``±`` the dtype's
  largest value, so an infinite log-probability is not neutralised;
- ``token_*``: ``ρ = exp(d)`` per token, ``(B, T)``, 1 at padding; ``sequence_*``:
  ``exp(Σ_t d)`` as ``(B, 1)``, 1 for a row without a token;
- ``*_truncate``: ``clamp(ρ, clip_min, clip_max)`` (``clip_min`` defaults to ``None``: one-sided);
  ``*_mask``: ``ρ`` where ``clip_min <= ρ <= clip_max``, else 0.

The ratio is computed under ``torch.no_grad()``: a detached weight, so the weight specs compare
values only (as for every other framework's weights).
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter, Divergence

_GRPO = "trl.trainer.grpo_trainer:GRPOTrainer._generate_and_score_completions"


def vllm_is_ratio(
    logp_old: Any, logp_sampling: Any, mask: Any, *, mode: str, clip_min: Any, clip_max: Any
) -> Any:
    """The ``importance_sampling_ratio`` of the real ``GRPOTrainer._generate_and_score_completions``
    with ``vllm_importance_sampling_mode=mode`` and the clip bounds, on the stand-in trainer the
    module docstring describes (``mask``: each row's valid prefix, TRL's right-padded completions).
    """
    import math

    import torch
    from trl.trainer.grpo_trainer import GRPOTrainer

    from refimpl.frameworks._trl_losses_advantages import _prompts, scoring_trainer

    old = torch.as_tensor(logp_old)
    rows, width = old.shape
    lengths = [int(n) for n in torch.as_tensor(mask).sum(dim=-1).tolist()]
    sampled = [
        [None if math.isnan(x) else x for x in row[:n]]
        for row, n in zip(torch.as_tensor(logp_sampling).tolist(), lengths, strict=True)
    ]

    def generate(prompts: Any) -> tuple[Any, ...]:
        completion_ids = [[1] * n for n in lengths]
        return [[1]] * rows, completion_ids, None, ["c"] * rows, sampled, {}, None, None

    def old_logps(model: Any, ids: Any, attention: Any, logits_to_keep: int, **_: Any) -> Any:
        return old[:, :logits_to_keep], None, None

    zeros = torch.zeros(rows)
    t = scoring_trainer(
        GRPOTrainer, zeros, zeros, scale_rewards="group",
        multi_objective_aggregation="sum_then_normalize", use_vllm=True,
        vllm_importance_sampling_correction=True, vllm_importance_sampling_mode=mode,
        vllm_importance_sampling_clip_min=clip_min, vllm_importance_sampling_clip_max=clip_max,
        pad_to_multiple_of=width,
    )  # fmt: skip
    t._generate, t._get_per_token_logps_and_entropies = generate, old_logps
    return t._generate_and_score_completions(_prompts(zeros))["importance_sampling_ratio"]


def trl_vllm_is_token_truncate(old: Any, sampled: Any, *, cap: float, mask: Any) -> Any:
    """``vllm_importance_sampling_mode="token_truncate"``, ``clip_max=cap`` (``clip_min`` unset):
    :func:`vllm_is_ratio` on the real ``GRPOTrainer._generate_and_score_completions``."""
    from refimpl.frameworks._trl_losses_vllm_is import vllm_is_ratio

    return vllm_is_ratio(old, sampled, mask, mode="token_truncate", clip_min=None, clip_max=cap)


def trl_vllm_is_sequence_truncate(old: Any, sampled: Any, *, cap: float, mask: Any) -> Any:
    """``vllm_importance_sampling_mode="sequence_truncate"``, ``clip_max=cap`` (``clip_min``
    unset): :func:`vllm_is_ratio` on the real ``GRPOTrainer._generate_and_score_completions``."""
    from refimpl.frameworks._trl_losses_vllm_is import vllm_is_ratio

    return vllm_is_ratio(old, sampled, mask, mode="sequence_truncate", clip_max=cap, clip_min=None)


def trl_vllm_is_token_mask(old: Any, sampled: Any, *, low: float, high: float, mask: Any) -> Any:
    """``vllm_importance_sampling_mode="token_mask"``, ``clip_min=low``, ``clip_max=high``:
    :func:`vllm_is_ratio` on the real ``GRPOTrainer._generate_and_score_completions``."""
    from refimpl.frameworks._trl_losses_vllm_is import vllm_is_ratio

    return vllm_is_ratio(old, sampled, mask, mode="token_mask", clip_min=low, clip_max=high)


def trl_vllm_is_sequence_mask(old: Any, sampled: Any, *, low: float, high: float, mask: Any) -> Any:
    """``vllm_importance_sampling_mode="sequence_mask"`` (TRL's default), ``clip_min=low``,
    ``clip_max=high``: :func:`vllm_is_ratio` on the real
    ``GRPOTrainer._generate_and_score_completions``."""
    from refimpl.frameworks._trl_losses_vllm_is import vllm_is_ratio

    return vllm_is_ratio(old, sampled, mask, mode="sequence_mask", clip_max=high, clip_min=low)


#: As read (grpo_trainer.py, _generate_and_score_completions): a NaN difference gives ratio 1, and
#: a padded position's difference is multiplied by the mask (0) before, so it gives 1 too; TRL
#: rounds vLLM's sampling log-probabilities to float32 (checked in float32, as the trainer runs).
_READ = {"nonfinite": "one", "padding": "one"}
_INFINITE = Divergence(
    "convention",
    "TRL neutralises a NaN log-probability only: nan_to_num(nan=0.0) (grpo_trainer.py, "
    "_generate_and_score_completions) maps a NaN difference to 0 (ratio 1, vLLM's missing "
    "log-probability) but ±inf to ± the dtype's largest value, so an infinite log-probability "
    "follows exp: log π_old = −inf gives ratio 0 and log μ = −inf a ratio of +inf, truncated to "
    "clip_max or masked to 0. refimpl's nonfinite='one' counts every non-finite log-ratio as 1; "
    "TRL's ratio is the limit of π_old/μ there, so this is TRL's convention, not a defect.",
)
#: The token modes' ratio is as wide as the longest completion: with no completion token in the
#: batch it has no column (``(B, 0)``), where the spec's layout keeps ``T``.
_TOKEN = {**_READ, "empty_batch": "excluded"}
_SEQUENCE = {**_READ, "output": "B1"}


def _adapter(mode: str, spec: str, candidate: Any, note: str) -> Adapter:
    """The adapter of ``vllm_importance_sampling_mode=mode``: the truncate modes take the spec's
    cap as ``clip_max`` (``clip_min`` unset, TRL's default), the mask modes the band."""
    truncate = mode.endswith("truncate")
    # the checks an infinite log-probability fails under nonfinite='one' (a weight read as 1)
    failing = (
        "agrees_with_reference",
        "on_policy_weight_is_one",
        "equals_ratio_below_cap" if truncate else "equals_ratio_inside_band",
    )
    return Adapter(
        key=f"trl.vllm_is_{mode}",
        framework="trl",
        function=_GRPO,
        settings={
            "use_vllm": True,
            "vllm_importance_sampling_correction": True,
            "vllm_importance_sampling_mode": mode,
            "vllm_importance_sampling_clip_min": "None (default)" if truncate else "low",
            "vllm_importance_sampling_clip_max": "cap" if truncate else "high",
        },
        spec=spec,
        conventions=_TOKEN if mode.startswith("token") else _SEQUENCE,
        candidate=candidate,
        divergences=dict.fromkeys(failing, _INFINITE),
        dtype="float32",
        note=note,
    )


ADAPTERS: tuple[Adapter, ...] = (
    _adapter(
        "token_truncate", "tis", trl_vllm_is_token_truncate,
        "min(π_old/μ, C) per token, 1 at padding and where log μ is NaN.",
    ),
    _adapter(
        "token_mask", "masked_is", trl_vllm_is_token_mask,
        "π_old/μ per token where low <= ρ <= high, else 0; 1 at padding and where log μ is NaN.",
    ),
    _adapter(
        "sequence_truncate", "tis_sequence", trl_vllm_is_sequence_truncate,
        "min(exp(Σ log π_old − log μ), C) as (B, 1); a NaN token adds 0 to the sum.",
    ),
    _adapter(
        "sequence_mask", "masked_is_sequence", trl_vllm_is_sequence_mask,
        "The sequence ratio exp(Σ log π_old − log μ) as (B, 1) where it is in [low, high], else 0 "
        "(TRL's default mode).",
    ),
)  # fmt: skip

__all__ = ["ADAPTERS", "vllm_is_ratio"]
