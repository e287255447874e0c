"""TRL (trl 1.16.0): the GRPO and RLOO advantages, computed inside ``_generate_and_score_completions``.

Neither trainer has an advantage function: ``GRPOTrainer._generate_and_score_completions`` and
``RLOOTrainer._generate_and_score_completions`` (``trl/trainer/grpo_trainer.py``,
``trl/trainer/rloo_trainer.py``) generate, score and normalise in one method. The adapters run that
REAL method on an instance made with ``__new__`` (:func:`scoring_trainer`): ``_generate`` is replaced
on the instance by one returning one-token prompts and completions, the real
``_calculate_rewards`` calls one plain reward function returning the given rewards (TRL stores
them in a float32 ``rewards_per_func``), and the advantages are read from the returned batch. As
read:

- GRPO (``multi_objective_aggregation="sum_then_normalize"``): rewards viewed as
  ``(-1, num_generations)`` (contiguous equal groups), ``nanmean`` per group; ``scale_rewards``
  ``"group"``: divided by the group's ``nanstd`` (Bessel-corrected) ``+ 1e-4``; ``"batch"``: by the
  batch's ``nanstd + 1e-4`` (group means kept); ``"none"``: centred only; ``num_generations = 1``:
  std 0, advantage 0.
- RLOO: ``r − (Σ_group r − r) / (n − 1)``; ``normalize_advantages=True`` then standardises over the
  batch (``(A − mean) / (nanstd + 1e-4)``); its ``_get_per_token_logps_and_entropies`` (old
  log-probabilities, always computed) is replaced by one returning zeros (read only with
  ``beta > 0``).
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter

_GRPO = "trl.trainer.grpo_trainer:GRPOTrainer._generate_and_score_completions"
_RLOO = "trl.trainer.rloo_trainer:RLOOTrainer._generate_and_score_completions"


def scoring_trainer(
    trainer_class: Any, rewards: Any, group: Any, *, weights: Any = None, **settings: Any
) -> Any:
    """A ``trainer_class`` made with ``__new__`` holding what ``_generate_and_score_completions``
    reads on the text-only, single-process, on-policy path (no tools, images, vLLM or KL), with
    ``num_generations`` the size of the first group (TRL's groups are contiguous and equal),
    one reward function per column of ``rewards`` ((B,) or (B, K)) returning it, ``weights`` as
    ``reward_weights`` (default all 1), and ``settings`` (TRL's names) set on it."""
    import collections
    import types

    import torch
    from accelerate import PartialState

    PartialState()  # accelerate's gather / gather_object need the (single-process) state
    table = torch.as_tensor(rewards, dtype=torch.float64)
    columns = [table.reshape(-1)] if table.ndim < 2 else list(table.T)
    labels = torch.as_tensor(group).reshape(-1).tolist()
    rows = len(columns[0])

    def reward_function(column: Any) -> Any:
        values = [float(v) for v in column.tolist()]
        return lambda prompts, completions, **_kwargs: values

    def generate(prompts: Any) -> tuple[Any, ...]:
        ids, completions = [[1]] * rows, ["c"] * rows
        if trainer_class.__name__ == "RLOOTrainer":  # its _generate returns three lists
            return ids, ids, completions
        return ids, ids, None, completions, None, {}, None, None

    def logps(*_args: Any, **_kwargs: Any) -> tuple[Any, None, None]:
        return torch.zeros(rows, 1), None, None

    t = trainer_class.__new__(trainer_class)
    t.accelerator = types.SimpleNamespace(
        device=torch.device("cpu"),
        process_index=0,
        num_processes=1,
        is_main_process=True,
        gather=lambda x: x,
    )
    t.model = types.SimpleNamespace(training=True, is_gradient_checkpointing=False)
    t.args = types.SimpleNamespace(
        per_device_train_batch_size=rows,
        per_device_eval_batch_size=rows,
        steps_per_generation=1,
        gradient_accumulation_steps=1,
        gradient_checkpointing_kwargs=None,
        report_to=[],
    )
    t.state = types.SimpleNamespace(global_step=0)
    t.environment_factories, t.tools, t.environments = None, [], None
    t._tokenizer = types.SimpleNamespace(pad_token_id=0)
    t.pad_to_multiple_of, t.mask_truncated_completions = None, False
    t.num_iterations, t.use_vllm, t.vllm_importance_sampling_correction = 1, False, False
    t.beta, t.reward_clip_range, t.log_completions = 0.0, None, False
    t.num_generations = t.num_generations_eval = labels.count(labels[0]) if rows else 1
    t.reward_funcs = [reward_function(c) for c in columns]
    t.reward_processing_classes = [None] * len(columns)
    t.reward_func_names = (
        ["given"] if len(columns) == 1 else [f"given_{k}" for k in range(len(columns))]
    )
    t.reward_weights = (
        torch.ones(len(columns), dtype=torch.float32)
        if weights is None
        else torch.as_tensor(weights, dtype=torch.float32).reshape(-1)
    )
    t._metrics = {"train": collections.defaultdict(list), "eval": collections.defaultdict(list)}
    t._logs = {
        "prompt": [],
        "completion": [],
        "rewards": collections.defaultdict(list),
        "advantages": [],
        "extra": collections.defaultdict(list),
    }
    t._pending_extra_logs, t._pending_metrics = {}, {}
    t._generate = generate
    t._get_per_token_logps_and_entropies = logps
    for name, value in settings.items():
        setattr(t, name, value)
    return t


def _prompts(rewards: Any) -> list[dict[str, str]]:
    """One (placeholder) prompt per row of ``rewards``."""
    import torch

    return [{"prompt": "p"} for _ in range(torch.as_tensor(rewards).shape[0])]


def trl_grpo_advantages_group(rewards: Any, *, group: Any) -> Any:
    """TRL ``scale_rewards="group"`` (the default): the real
    ``GRPOTrainer._generate_and_score_completions``, its ``advantages``."""
    from trl.trainer.grpo_trainer import GRPOTrainer

    from refimpl.frameworks._trl_losses_advantages import _prompts, scoring_trainer

    t = scoring_trainer(
        GRPOTrainer, rewards, group, scale_rewards="group",
        multi_objective_aggregation="sum_then_normalize",
    )  # fmt: skip
    return t._generate_and_score_completions(_prompts(rewards))["advantages"]


def trl_grpo_advantages_batch(rewards: Any, *, group: Any) -> Any:
    """TRL ``scale_rewards="batch"``: the real ``GRPOTrainer._generate_and_score_completions``."""
    from trl.trainer.grpo_trainer import GRPOTrainer

    from refimpl.frameworks._trl_losses_advantages import _prompts, scoring_trainer

    t = scoring_trainer(
        GRPOTrainer, rewards, group, scale_rewards="batch",
        multi_objective_aggregation="sum_then_normalize",
    )  # fmt: skip
    return t._generate_and_score_completions(_prompts(rewards))["advantages"]


def trl_grpo_advantages_none(rewards: Any, *, group: Any) -> Any:
    """TRL ``scale_rewards="none"`` (Dr GRPO): the real ``GRPOTrainer._generate_and_score_completions``."""
    from trl.trainer.grpo_trainer import GRPOTrainer

    from refimpl.frameworks._trl_losses_advantages import _prompts, scoring_trainer

    t = scoring_trainer(
        GRPOTrainer, rewards, group, scale_rewards="none",
        multi_objective_aggregation="sum_then_normalize",
    )  # fmt: skip
    return t._generate_and_score_completions(_prompts(rewards))["advantages"]


def trl_rloo_advantages(rewards: Any, *, group: Any) -> Any:
    """TRL ``RLOOTrainer`` with ``normalize_advantages=False`` (the default): the real
    ``RLOOTrainer._generate_and_score_completions``, its ``advantages``."""
    from trl.trainer.rloo_trainer import RLOOTrainer

    from refimpl.frameworks._trl_losses_advantages import _prompts, scoring_trainer

    t = scoring_trainer(RLOOTrainer, rewards, group, normalize_advantages=False)
    return t._generate_and_score_completions(_prompts(rewards))["advantages"]


_CONTIGUOUS = {"groups": "contiguous", "singleton": "zero"}

ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="trl.grpo_advantages_group",
        framework="trl",
        function=_GRPO,
        settings={"scale_rewards": "group", "num_generations": "the group size"},
        spec="grpo_advantages",
        conventions={**_CONTIGUOUS, "eps": 1e-4},
        candidate=trl_grpo_advantages_group,
        dtype="float32",
        note="(r − group mean) / (group nanstd + 1e-4) on float32 rewards, groups contiguous.",
    ),
    Adapter(
        key="trl.grpo_advantages_batch",
        framework="trl",
        function=_GRPO,
        settings={"scale_rewards": "batch", "num_generations": "the group size"},
        spec="grpo_advantages",
        conventions={**_CONTIGUOUS, "eps": 1e-4, "std_scope": "batch"},
        candidate=trl_grpo_advantages_batch,
        dtype="float32",
        note="(r − group mean) / (batch nanstd + 1e-4) on float32 rewards.",
    ),
    Adapter(
        key="trl.grpo_advantages_none",
        framework="trl",
        function=_GRPO,
        settings={"scale_rewards": "none", "num_generations": "the group size"},
        spec="grpo_advantages",
        conventions={**_CONTIGUOUS, "std": "none"},
        candidate=trl_grpo_advantages_none,
        dtype="float32",
        note="r − group mean on float32 rewards (Dr GRPO).",
    ),
    Adapter(
        key="trl.rloo_advantages",
        framework="trl",
        function=_RLOO,
        settings={"normalize_advantages": False, "num_generations": "the group size"},
        spec="rloo_advantages",
        conventions=dict(_CONTIGUOUS),
        candidate=trl_rloo_advantages,
        dtype="float32",
        note="r − mean of the other n − 1 rewards of its group, float32.",
    ),
)

__all__ = ["ADAPTERS", "scoring_trainer"]
