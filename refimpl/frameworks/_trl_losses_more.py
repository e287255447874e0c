"""TRL (trl 1.16.0): its log-probability helper, the off-policy sequence mask, and the losses of its
other RL trainers that run on CPU, read from its installed sources.

- ``trl/trainer/utils.py`` ``selective_log_softmax(logits, index, temperature, row_mask)``: ``logits /
  temperature``, then the gathered logit minus a per-row ``logsumexp`` (float32/64) or a per-row
  ``log_softmax`` (other dtypes); no top-k / top-p (TRL scores the full distribution); the Triton
  kernel path needs CUDA, so CPU runs the torch path.
- ``GRPOTrainer.get_off_policy_mask`` (a staticmethod): keep a sequence iff ``A >= 0`` or the masked
  mean of ``sampling_logps − logp`` (count clamped to 1, NaN set to 0) is ``<= δ``.
- ``trl.experimental.gmpo.GMPOTrainer._compute_loss``: per-token log-ratios clamped to
  ``[−epsilon, epsilon_high]`` in log space, sign-aware (``min`` for ``A > 0``, ``max`` otherwise),
  their masked mean exponentiated (count clamped to 1), ``−coef·A`` per sequence, mean over every row,
  / K.
- ``trl.experimental.async_grpo.AsyncGRPOTrainer.compute_loss``: the model's log-probabilities of the
  selected (``token_index >= 0``) tokens of a packed row, the clipped surrogate per token, summed and
  divided by ``max(global_n_tokens / num_processes, 1)`` and K; ``global_n_tokens`` is the
  micro-batch's trained tokens over every rank (its collator).
- ``GRPOTrainer._compute_loss``'s entropy bonus (``entropy_coef != 0`` or
  ``use_adaptive_entropy``): ``loss − coef·Σ H·m / max(Σ m, 1) / K`` with ``m`` the completion
  mask (times the high-entropy mask when ``top_entropy_quantile < 1``), the same lines for every
  ``loss_type``; the adaptive controller changes only which coefficient applies next step.
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter, Divergence, Partition
from refimpl.losses.partition import ScalingRule

_UTILS = "trl.trainer.utils"
_GMPO = "trl.experimental.gmpo.gmpo_trainer:GMPOTrainer._compute_loss"
_ASYNC = "trl.experimental.async_grpo.async_grpo_trainer:AsyncGRPOTrainer.compute_loss"


def trl_selective_log_softmax(logits: Any, tokens: Any, *, temperature: Any, mask: Any) -> Any:
    """TRL's ``selective_log_softmax(logits, tokens, temperature=temperature)`` (torch path on CPU);
    TRL applies no top-k / top-p to a training log-probability (``truncation="none"``)."""
    import torch
    from trl.trainer.utils import selective_log_softmax

    index = torch.as_tensor(tokens).to(torch.long)
    return selective_log_softmax(logits, index, temperature=float(temperature))


def trl_entropy_from_logits(logits: Any) -> Any:
    """TRL's ``entropy_from_logits(logits)`` (torch path on CPU, chunks of 128 rows): no temperature
    (its callers divide first) and no mask."""
    from trl.trainer.utils import entropy_from_logits

    return entropy_from_logits(logits)


def trl_selective_log_softmax_and_entropy(logits: Any, *, temperature: Any, mask: Any) -> Any:
    """The entropy of TRL's ``selective_log_softmax_and_entropy(logits, index, temperature=temperature,
    row_mask=mask)`` (torch path on CPU), the tokens all 0 (they select only the log-probability)."""
    import torch
    from trl.trainer.utils import selective_log_softmax_and_entropy

    index = torch.zeros(logits.shape[:-1], dtype=torch.long)
    row_mask = torch.as_tensor(mask).to(torch.long)
    _, entropy = selective_log_softmax_and_entropy(
        logits, index, temperature=float(temperature), row_mask=row_mask
    )
    return entropy


def trl_entropy_bonus(logits: Any, *, temperature: Any, mask: Any) -> Any:
    """TRL ``entropy_coef=1`` (static): the real ``GRPOTrainer._compute_loss`` with zero
    advantages (its policy term is 0), the model forward replaced by TRL's own
    ``selective_log_softmax_and_entropy`` of ``logits`` at ``temperature`` (the trainer's forward
    computes the same entropies in its fused LM head, ``trl.fused_lm_head_entropy``); returns
    ``−loss``, the token-mean entropy the bonus subtracts."""
    import torch
    from trl.trainer.utils import selective_log_softmax_and_entropy

    from refimpl.frameworks._trl_losses import grpo_inputs, grpo_trainer

    index = torch.zeros(logits.shape[:-1], dtype=torch.long)
    logp, entropy = selective_log_softmax_and_entropy(logits, index, temperature=float(temperature))
    trainer = grpo_trainer(logp, loss_type="grpo")
    trainer._entropy_bonus_enabled, trainer.entropy_coef, trainer.use_adaptive_entropy = (
        True,
        1.0,
        False,
    )
    trainer._get_per_token_logps_and_entropies = lambda *_a, **_k: (logp, entropy, None)
    trainer.accelerator.sync_gradients = True  # read to log the coefficient
    zero = torch.zeros(logits.shape[0], dtype=logits.dtype)
    return -trainer._compute_loss(None, grpo_inputs(logp, mask, zero))


def trl_off_policy_sequence_mask(
    logp_target: Any, logp_behavior: Any, advantages: Any, *, delta: Any, mask: Any
) -> Any:
    """TRL's ``GRPOTrainer.get_off_policy_mask(advantages (B, 1), logp_target, logp_behavior, mask,
    off_policy_threshold=delta)`` as ``_compute_loss`` calls it, squeezed to (B,): 1 = kept."""
    import torch
    from trl.trainer.grpo_trainer import GRPOTrainer

    target = torch.as_tensor(logp_target)
    kept = GRPOTrainer.get_off_policy_mask(
        advantages=torch.as_tensor(advantages).unsqueeze(1),
        per_token_logps=target,
        sampling_per_token_logps=torch.as_tensor(logp_behavior),
        mask=torch.as_tensor(mask).to(target.dtype),
        off_policy_threshold=float(delta),
    )
    return kept.squeeze(1)


def trl_gmpo_loss(
    logp: Any, logp_old: Any, advantages: Any, *, eps_low: Any, eps_high: Any, mask: Any
) -> Any:
    """TRL's experimental ``GMPOTrainer._compute_loss`` (``epsilon=eps_low``,
    ``epsilon_high=eps_high``, log space), on an instance made with ``__new__``
    (:func:`refimpl.frameworks._trl_losses.grpo_trainer`), K = 1. The advantages are the (B,) per
    sequence TRL reads (the spec's are constant along each row: its first column)."""
    from trl.experimental.gmpo.gmpo_trainer import GMPOTrainer

    from refimpl.frameworks._trl_losses import grpo_inputs, grpo_trainer

    trainer = grpo_trainer(
        logp, loss_type="grpo", epsilon=eps_low, epsilon_high=eps_high, trainer_class=GMPOTrainer
    )
    inputs = grpo_inputs(logp, mask, advantages[:, 0], logp_old=logp_old)
    return trainer._compute_loss(None, inputs)


def async_grpo_loss(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    mask: Any,
    *,
    epsilon: float,
    epsilon_high: float | None = None,
    global_tokens: Any = None,
    accumulation_steps: int = 1,
    world_size: int = 1,
) -> Any:
    """``AsyncGRPOTrainer.compute_loss`` on one rank's micro-batch laid out as its collator packs it:
    one packed row holding the rows' valid tokens, ``token_index`` selecting them, a model stand-in
    whose ``log_probs`` are ``logp`` at those positions, ``global_n_tokens`` the micro-batch's
    tokens over every rank (default: these), ``current_gradient_accumulation_steps = K``,
    ``accelerator.num_processes = R``. ``advantages`` is (B,) or (B, T)."""
    import collections
    import types

    import torch
    from trl.experimental.async_grpo.async_grpo_trainer import AsyncGRPOTrainer

    m = torch.as_tensor(mask) > 0
    rows, width = m.shape
    n = int(m.sum())
    adv = advantages if advantages.dim() == 2 else advantages[:, None].expand(rows, width)
    flat = m.reshape(-1).nonzero().reshape(-1)  # the valid tokens, row-major
    segment = torch.arange(rows)[:, None].expand(rows, width)

    class Model:
        def __call__(self, **_kwargs: Any) -> Any:
            packed = logp.reshape(-1)[flat]
            return types.SimpleNamespace(
                log_probs=packed[None], entropy=torch.zeros_like(packed)[None]
            )

    trainer = AsyncGRPOTrainer.__new__(AsyncGRPOTrainer)
    trainer.epsilon_low = float(epsilon)
    trainer.epsilon_high = float(epsilon if epsilon_high is None else epsilon_high)
    trainer.aux_loss_enabled = False
    trainer.current_gradient_accumulation_steps = int(accumulation_steps)
    trainer._metrics = {"train": collections.defaultdict(list)}
    trainer.accelerator = types.SimpleNamespace(
        num_processes=int(world_size), reduce=lambda t, reduction="sum": t, gather=lambda t: t
    )
    for name in ("forward_tokens", "trained_tokens", "seq_len_weighted", "samples", "forward_s"):
        setattr(trainer, f"_step_{name}", 0.0)
    tokens = float(n if global_tokens is None else global_tokens)
    width_p = max(n, 1)  # the packed row (its padded tail is never selected: token_index -1)

    def packed(values: Any, fill: float = 0.0) -> Any:
        out = torch.full((1, width_p), fill, dtype=values.dtype)
        out[0, :n] = values.reshape(-1)[flat]
        return out

    index = -torch.ones((1, width_p), dtype=torch.long)
    index[0, :n] = torch.arange(n)
    inputs = {
        "attention_mask": torch.ones((1, width_p), dtype=torch.long),
        "input_ids": torch.zeros((1, width_p), dtype=torch.long),
        "position_ids": torch.zeros((1, width_p), dtype=torch.long),
        "shift_labels": torch.zeros((1, width_p), dtype=torch.long),
        "token_index": index,
        "old_log_probs": packed(logp_old),
        "advantages": packed(adv),
        "segment_id": packed(segment),
        "tree_kv_index": -torch.ones((1, 1), dtype=torch.long),
        "tree_cu_seqlens_q": -torch.ones((1, 1), dtype=torch.long),
        "tree_cu_seqlens_k": -torch.ones((1, 1), dtype=torch.long),
        "tree_max_seqlens": torch.zeros((1, 2), dtype=torch.long),
        "global_n_tokens": torch.tensor([tokens]),
        "global_n_forward_tokens": torch.tensor([float(width_p)]),
        "mean_seq_len": torch.tensor([1.0]),
    }
    return trainer.compute_loss(Model(), inputs)


def trl_async_grpo_loss(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    *,
    eps_low: Any,
    eps_high: Any,
    mask: Any,
) -> Any:
    """TRL's experimental ``AsyncGRPOTrainer.compute_loss`` (``epsilon=eps_low``,
    ``epsilon_high=eps_high``), one micro-batch on one rank, K = 1: the clipped surrogate over the
    packed valid tokens, summed, / their count. It has no dual clip (``dual_clip=None``)."""
    from refimpl.frameworks._trl_losses_more import async_grpo_loss

    return async_grpo_loss(logp, logp_old, advantages, mask, epsilon=eps_low, epsilon_high=eps_high)


_GMPO_EMPTY = (
    "GMPOTrainer._compute_loss takes a row's log-weight as Σ m·clip(d) / max(Σ m, 1), which is 0 "
    "for a row without a valid token, so coef = 1 and that row adds −A to the mean over rows (its "
    "gradient is 0): the loss value carries −A/B for every empty completion, where the reference "
    "(and GRPOTrainer's own losses, which sum m·ℓ) give 0."
)
_GMPO_REPORT = (
    "trl 1.16.0, trl/experimental/gmpo/gmpo_trainer.py GMPOTrainer._compute_loss: for a completion "
    "whose mask has no valid token (e.g. one zeroed by mask_truncated_completions=True), "
    "log_importance_weights = (clipped_log_ratio * seq_mask).sum(-1) / seq_mask.sum(-1).clamp(min=1.0) "
    "is 0, coef = exp(0) = 1, and per_sequence_loss = -coef * advantages = -A enters "
    "per_sequence_loss.mean(). The gradient is unaffected (no token depends on it), but the "
    "returned and logged loss is shifted by -A/B per empty completion; GRPOTrainer's loss types "
    "give such a row 0 (they sum per_token_loss * mask). Failing input: one row, mask [[0]], "
    "advantage 1: GMPO returns -1.0, expected 0. Masking the per-sequence loss by (mask.sum(-1) > 0) "
    "would make it 0."
)
_GMPO_EMPTY_ROWS = {
    check: Divergence("defect", _GMPO_EMPTY, _GMPO_REPORT)
    for check in (
        "values",
        "padding_contributes_nothing",
        "huge_log_ratios_stay_finite",
        "ratios_at_clip_boundaries",
    )
}


def trl_async_grpo_micro_batch(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    mask: Any,
    *,
    step_tokens: Any,
    accumulation_steps: Any,
    world_size: Any,
) -> Any:
    """TRL's ``AsyncGRPOTrainer.compute_loss`` on one rank's micro-batch, as its trainer runs it:
    ``global_n_tokens`` is the collated batch's trained tokens, which the dispatcher then splits
    over the ranks (``_collate``: one accumulation step's tokens over every rank),
    ``current_gradient_accumulation_steps = K``, ``num_processes = R``. A rank given no trained
    token never runs ``compute_loss`` (its packing has none); it contributes nothing."""
    from refimpl.frameworks._trl_losses_more import async_grpo_loss

    if float(mask.sum()) == 0.0:
        return (logp * 0.0).sum()
    return async_grpo_loss(
        logp, logp_old, advantages, mask, epsilon=0.2, global_tokens=step_tokens,
        accumulation_steps=accumulation_steps, world_size=world_size,
    )  # fmt: skip


_PER_STEP = Divergence(
    "convention",
    "AsyncGRPOTrainer.compute_loss divides each micro-batch's summed loss by its accumulation "
    "step's trained tokens over the ranks, global_n_tokens / world_size (set per collated batch in "
    "_collate), then by current_gradient_accumulation_steps: across ranks this is the token mean "
    "its comment intends, but with K > 1 accumulation steps each step's tokens weigh 1/(K·N_k), "
    "not 1/N, so a step with fewer tokens counts more per token. With K = 1 the step is the full "
    "batch's token mean.",
)
_ASYNC_OVERFLOW = Divergence(
    "numerical limit",
    "AsyncGRPOTrainer.compute_loss exponentiates the log-ratio without a clamp (coef_1 = "
    "torch.exp(log_probs - old_log_probs)): a log-ratio beyond ~709 (float64; ~88 in float32) overflows exp, "
    "and inf·0 (a zero advantage) is NaN. verl, SkyRL and OpenRLHF clamp it to ±20 first.",
)

ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="trl.selective_log_softmax",
        framework="trl",
        function=f"{_UTILS}:selective_log_softmax",
        settings={"temperature": "temperature"},
        spec="token_logprobs",
        conventions={"padding": "ignored", "truncation": "none"},
        candidate=trl_selective_log_softmax,
        note="log softmax(logits / T) at the tokens, over the full vocabulary (no top-k/top-p).",
    ),
    Adapter(
        key="trl.entropy_from_logits",
        framework="trl",
        function=f"{_UTILS}:entropy_from_logits",
        settings={},
        spec="token_entropy",
        conventions={"temperature": "none", "mask": "none", "padding": "ignored"},
        candidate=trl_entropy_from_logits,
        note="−Σ p log p of log_softmax(logits) per position, in chunks; no temperature, no mask.",
    ),
    Adapter(
        key="trl.selective_log_softmax_and_entropy",
        framework="trl",
        function=f"{_UTILS}:selective_log_softmax_and_entropy",
        settings={"temperature": "temperature", "row_mask": "mask"},
        spec="token_entropy",
        conventions={},
        candidate=trl_selective_log_softmax_and_entropy,
        note="The entropy output: logits / T, entropy_from_logits, zero where row_mask is 0.",
    ),
    Adapter(
        key="trl.entropy_bonus",
        framework="trl",
        function="trl.trainer.grpo_trainer:GRPOTrainer._compute_loss",
        settings={"entropy_coef": 1.0, "use_adaptive_entropy": False, "temperature": "temperature"},
        spec="token_entropy",
        conventions={"output": "scalar", "aggregation": "token_mean"},
        candidate=trl_entropy_bonus,
        note="The entropy bonus of _compute_loss: Σ H·m / max(Σ m, 1) of logits / T, subtracted "
        "from the policy loss times entropy_coef (K = 1).",
    ),
    Adapter(
        key="trl.off_policy_sequence_mask",
        framework="trl",
        function="trl.trainer.grpo_trainer:GRPOTrainer.get_off_policy_mask",
        settings={"off_policy_mask_threshold": "delta"},
        spec="off_policy_sequence_mask",
        conventions={},
        candidate=trl_off_policy_sequence_mask,
        note="DeepSeek-V3.2's OPSM as _compute_loss calls it; (B, 1) squeezed to (B,).",
    ),
    Adapter(
        key="trl.gmpo",
        framework="trl",
        function=_GMPO,
        settings={"epsilon": "eps_low", "epsilon_high": "eps_high"},
        spec="gmpo",
        conventions={
            "output": "scalar",
            "aggregation": "seq_mean_token_mean",
            "sequence_count": "all",
        },
        candidate=trl_gmpo_loss,
        divergences=_GMPO_EMPTY_ROWS,
        note="The geometric mean of sign-clipped token ratios, −coef·A per sequence, mean over "
        "every row.",
    ),
    Adapter(
        key="trl.async_grpo",
        framework="trl",
        function=_ASYNC,
        settings={"epsilon": "eps_low", "epsilon_high": "eps_high"},
        spec="ppo_clip",
        conventions={
            "output": "scalar",
            "aggregation": "token_mean",
            "dual_clip": None,
            "empty_batch": "excluded",
        },
        candidate=trl_async_grpo_loss,
        divergences={"huge_log_ratios_stay_finite": _ASYNC_OVERFLOW},
        partition=Partition(
            candidate=trl_async_grpo_micro_batch,
            mode="token_mean",
            rule=ScalingRule("across_ranks", "mean", "mean", True, "trl_async_grpo"),
            trainer="trl/experimental/async_grpo/async_grpo_trainer.py: _collate sets "
            "global_n_tokens to the collated batch's trained tokens (split over the ranks by the "
            "dispatcher); compute_loss divides by global_n_tokens / num_processes and by "
            "current_gradient_accumulation_steps",
            divergences={"gradient": _PER_STEP},
        ),
        note="The clipped surrogate on the packed valid tokens, summed / global_n_tokens (one rank); "
        "a micro-batch without a trained token is never packed (compute_loss's segment_id.max() "
        "needs one).",
    ),
)

__all__ = ["ADAPTERS"]
