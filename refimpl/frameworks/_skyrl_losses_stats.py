"""SkyRL (skyrl 0.3.0): its loss reductions, KL estimators, advantages and log-probabilities.

**Loss reduction.** ``RayPPOTrainer._normalize_advantages`` (``skyrl/train/trainer.py``) divides each
mini-batch's advantages by ``apply_loss_reduction_to_advantages_minibatch`` (``ppo_utils.py``):
``token_mean`` by the mini-batch's valid tokens (clamped at 1); ``token_mean_legacy`` by each
micro-batch's own tokens and by the number of micro-batches ``batch_size // micro_batch_size``;
``sequence_mean`` by ``batch_size`` (every row, empty ones included) times the row's tokens (clamped
at 1); ``seq_mean_token_sum_norm`` by ``batch_size · max_seq_len``; ``prompt_mean`` by the number of
prompts times the prompt's tokens. The loss is then the plain sum ``reduce_loss`` of every
micro-batch, times ``grad_sum_correction_factor = dp_size`` (``workers/worker.py:
_forward_backward_micro``), accumulated by ``loss.backward()`` and averaged by the data-parallel
all-reduce: the presets ``skyrl`` (global counts) and ``skyrl_token_mean_legacy`` (local counts,
``1/(K·R)``) of :data:`refimpl.losses.partition.SCALING_RULES`. Every registered policy loss is linear
in the advantages for a positive scale, so the aggregation adapter is ``reduce_loss(loss · s, mask)``
with ``s`` the function's scale of unit advantages.

The partition candidates run the real ``apply_loss_reduction_to_advantages_minibatch`` on a
*stand-in mini-batch*: the micro-batch's rows first, then zero rows holding the rest of the step's
valid tokens (or rows), so the counts the function reads (the mini-batch's tokens and rows, the
micro-batch's own row lengths) are the real step's; then ``ppo_policy_loss`` and the ``dp_size``
factor. **KL**: ``compute_approx_kl`` (``k1``, ``k2``, ``abs``; ``k3`` clamps the log-ratio to ±20 and
the estimate to ±10); **advantages**: the registered GRPO, RLOO, REINFORCE++ and GAE estimators
(MaxRL has no spec); **log-probs**: ``torch_utils.logprobs_from_logits`` (its flash-attn branch is
not installed here: ``logprobs_from_logits_v2``), after the model wrapper's
``logits.div_(temperature)``; **entropy**: ``chunked_entropy_from_logits`` as the worker calls it
(``requires_grad`` when the entropy loss is on, the attention mask multiplied in).
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter, Divergence, Partition

_PPO = "skyrl.backends.skyrl_train.utils.ppo_utils"
_TORCH_UTILS = "skyrl.backends.skyrl_train.utils.torch_utils"
_NORMALIZE = "skyrl/train/trainer.py:RayPPOTrainer._normalize_advantages"
_WORKER = "skyrl/backends/skyrl_train/workers/worker.py:PolicyWorkerBase._forward_backward_micro"


def skyrl_reduction_token_mean(loss: Any, mask: Any) -> Any:
    """``loss_reduction="token_mean"``: the real scale of unit advantages, then ``reduce_loss``."""
    import torch

    from refimpl.frameworks import load_from_source

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    scale = ppo["apply_loss_reduction_to_advantages_minibatch"](
        torch.ones_like(loss), mask, "token_mean", loss.shape[0], loss.shape[-1]
    )
    return ppo["reduce_loss"](loss * scale, mask)


def skyrl_reduction_token_mean_legacy(loss: Any, mask: Any) -> Any:
    """``loss_reduction="token_mean_legacy"`` with the batch as one micro-batch
    (``micro_batch_size = B``)."""
    import torch

    from refimpl.frameworks import load_from_source

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    scale = ppo["apply_loss_reduction_to_advantages_minibatch"](
        torch.ones_like(loss), mask, "token_mean_legacy", loss.shape[0], loss.shape[-1]
    )
    return ppo["reduce_loss"](loss * scale, mask)


def skyrl_reduction_sequence_mean(loss: Any, mask: Any) -> Any:
    """``loss_reduction="sequence_mean"``."""
    import torch

    from refimpl.frameworks import load_from_source

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    scale = ppo["apply_loss_reduction_to_advantages_minibatch"](
        torch.ones_like(loss), mask, "sequence_mean", loss.shape[0], loss.shape[-1]
    )
    return ppo["reduce_loss"](loss * scale, mask)


def skyrl_reduction_seq_mean_token_sum_norm(loss: Any, mask: Any, *, constant: Any) -> Any:
    """``loss_reduction="seq_mean_token_sum_norm"`` with ``max_seq_len=constant``."""
    import torch

    from refimpl.frameworks import load_from_source

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    scale = ppo["apply_loss_reduction_to_advantages_minibatch"](
        torch.ones_like(loss), mask, "seq_mean_token_sum_norm", loss.shape[0], constant
    )
    return ppo["reduce_loss"](loss * scale, mask)


def skyrl_reduction_prompt_mean(loss: Any, mask: Any, *, group: Any) -> Any:
    """``loss_reduction="prompt_mean"``: the rows sorted by prompt label (stable) so that each
    prompt is one contiguous ``prompt_boundaries`` slice, as the trainer's batches are."""
    import torch

    from refimpl.frameworks import load_from_source

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    order = torch.argsort(torch.as_tensor(group), stable=True)
    _, counts = torch.unique_consecutive(torch.as_tensor(group)[order], return_counts=True)
    ends = torch.cumsum(counts, 0).tolist()
    bounds = list(zip([0, *ends[:-1]], ends, strict=True))
    scale = ppo["apply_loss_reduction_to_advantages_minibatch"](
        torch.ones_like(loss), mask[order], "prompt_mean", loss.shape[0], loss.shape[-1], bounds
    )
    return ppo["reduce_loss"](loss[order] * scale, mask[order])


def skyrl_microbatch_token_mean(
    logp: Any, logp_old: Any, advantages: Any, mask: Any, *, global_tokens: Any, world_size: Any
) -> Any:
    """One micro-batch under ``token_mean``: the real scale on a stand-in mini-batch (the
    micro-batch, then zero rows holding the step's other valid tokens), ``ppo_policy_loss`` on the
    scaled advantages, times ``grad_sum_correction_factor = dp_size``."""
    import torch
    from omegaconf import OmegaConf

    from refimpl.frameworks import load_from_source

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    b, t = mask.shape
    rest = int(global_tokens) - int(mask.sum())
    filler = (torch.arange(-(-rest // t) * t) < rest).to(mask.dtype).reshape(-1, t)
    stand_in = torch.cat([mask, filler])
    ones = torch.ones_like(stand_in)
    scale = ppo["apply_loss_reduction_to_advantages_minibatch"](ones, stand_in, "token_mean", b, t)
    config = OmegaConf.create(
        {
            "policy_loss_type": "regular",
            "eps_clip_low": 0.2,
            "eps_clip_high": 0.2,
            "off_policy_correction": None,
        }
    )
    scaled = advantages[:, None] * scale[:b]
    loss, _ = ppo["ppo_policy_loss"](logp, logp_old, scaled, config, loss_mask=mask)
    return loss * world_size


def skyrl_microbatch_token_mean_legacy(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    mask: Any,
    *,
    accumulation_steps: Any,
    world_size: Any,
) -> Any:
    """One micro-batch under ``token_mean_legacy``: the real scale on a stand-in mini-batch of
    ``K·R`` micro-batches of this one's size (this one first, the others zero), then
    ``ppo_policy_loss`` and ``dp_size``."""
    import torch
    from omegaconf import OmegaConf

    from refimpl.frameworks import load_from_source

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    b, t = mask.shape
    others = torch.zeros((b * (accumulation_steps * world_size - 1), t), dtype=mask.dtype)
    stand_in = torch.cat([mask, others])
    scale = ppo["apply_loss_reduction_to_advantages_minibatch"](
        torch.ones_like(stand_in), stand_in, "token_mean_legacy", b, t
    )
    config = OmegaConf.create(
        {
            "policy_loss_type": "regular",
            "eps_clip_low": 0.2,
            "eps_clip_high": 0.2,
            "off_policy_correction": None,
        }
    )
    scaled = advantages[:, None] * scale[:b]
    loss, _ = ppo["ppo_policy_loss"](logp, logp_old, scaled, config, loss_mask=mask)
    return loss * world_size


def skyrl_microbatch_sequence_mean(
    logp: Any, logp_old: Any, advantages: Any, mask: Any, *, global_sequences: Any, world_size: Any
) -> Any:
    """One micro-batch under ``sequence_mean``: the real scale on a stand-in mini-batch (the
    micro-batch, then zero rows up to the step's rows), ``ppo_policy_loss``, ``dp_size``."""
    import torch
    from omegaconf import OmegaConf

    from refimpl.frameworks import load_from_source

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    b, t = mask.shape
    stand_in = torch.cat([mask, torch.zeros((int(global_sequences) - b, t), dtype=mask.dtype)])
    scale = ppo["apply_loss_reduction_to_advantages_minibatch"](
        torch.ones_like(stand_in), stand_in, "sequence_mean", b, t
    )
    config = OmegaConf.create(
        {
            "policy_loss_type": "regular",
            "eps_clip_low": 0.2,
            "eps_clip_high": 0.2,
            "off_policy_correction": None,
        }
    )
    scaled = advantages[:, None] * scale[:b]
    loss, _ = ppo["ppo_policy_loss"](logp, logp_old, scaled, config, loss_mask=mask)
    return loss * world_size


def skyrl_microbatch_seq_mean_token_sum_norm(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    mask: Any,
    *,
    global_sequences: Any,
    constant: Any,
    world_size: Any,
) -> Any:
    """One micro-batch under ``seq_mean_token_sum_norm`` (``max_seq_len=constant``): as
    ``sequence_mean``'s stand-in."""
    import torch
    from omegaconf import OmegaConf

    from refimpl.frameworks import load_from_source

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    b, t = mask.shape
    stand_in = torch.cat([mask, torch.zeros((int(global_sequences) - b, t), dtype=mask.dtype)])
    scale = ppo["apply_loss_reduction_to_advantages_minibatch"](
        torch.ones_like(stand_in), stand_in, "seq_mean_token_sum_norm", b, constant
    )
    config = OmegaConf.create(
        {
            "policy_loss_type": "regular",
            "eps_clip_low": 0.2,
            "eps_clip_high": 0.2,
            "off_policy_correction": None,
        }
    )
    scaled = advantages[:, None] * scale[:b]
    loss, _ = ppo["ppo_policy_loss"](logp, logp_old, scaled, config, loss_mask=mask)
    return loss * world_size


def skyrl_microbatch_prompt_mean(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    mask: Any,
    *,
    global_sequences: Any,
    group: Any,
    group_tokens: Any,
    world_size: Any,
) -> Any:
    """One micro-batch under ``prompt_mean``: a stand-in mini-batch of ``global_sequences`` prompts
    (one row per prompt holding its step's token count, ``group_tokens``; the others empty) gives
    the real scale of each prompt, read back for the micro-batch's rows; ``ppo_policy_loss``,
    ``dp_size``."""
    import torch
    from omegaconf import OmegaConf

    from refimpl.frameworks import load_from_source

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    _, first = torch.unique(torch.as_tensor(group), return_inverse=True)
    counts = torch.zeros(int(global_sequences), dtype=mask.dtype)
    counts[first] = torch.as_tensor(group_tokens, dtype=mask.dtype)
    width = max(int(counts.max()), 1)
    stand_in = (torch.arange(width)[None, :] < counts[:, None]).to(mask.dtype)
    bounds = [(p, p + 1) for p in range(int(global_sequences))]
    scale = ppo["apply_loss_reduction_to_advantages_minibatch"](
        torch.ones_like(stand_in), stand_in, "prompt_mean", 1, width, bounds
    )
    config = OmegaConf.create(
        {
            "policy_loss_type": "regular",
            "eps_clip_low": 0.2,
            "eps_clip_high": 0.2,
            "off_policy_correction": None,
        }
    )
    scaled = advantages[:, None] * scale[first, :1]
    loss, _ = ppo["ppo_policy_loss"](logp, logp_old, scaled, config, loss_mask=mask)
    return loss * world_size


def skyrl_kl_k1(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """``compute_approx_kl(kl_estimator_type="k1")``."""
    from refimpl.frameworks import load_from_source

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    return ppo["compute_approx_kl"](logp, logp_ref, loss_mask=mask, kl_estimator_type="k1")


def skyrl_kl_k2(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """``compute_approx_kl(kl_estimator_type="k2")``."""
    from refimpl.frameworks import load_from_source

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    return ppo["compute_approx_kl"](logp, logp_ref, loss_mask=mask, kl_estimator_type="k2")


def skyrl_kl_k3(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """``compute_approx_kl(kl_estimator_type="k3")``."""
    from refimpl.frameworks import load_from_source

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    return ppo["compute_approx_kl"](logp, logp_ref, loss_mask=mask, kl_estimator_type="k3")


def skyrl_kl_abs(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """``compute_approx_kl(kl_estimator_type="abs")``."""
    from refimpl.frameworks import load_from_source

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    return ppo["compute_approx_kl"](logp, logp_ref, loss_mask=mask, kl_estimator_type="abs")


def skyrl_grpo(rewards: Any, *, group: Any) -> Any:
    """``compute_grpo_outcome_advantage`` (``grpo_norm_by_std=True``, ``epsilon=1e-6``), one reward
    per row as a one-token ``token_level_rewards``; the (B, 1) advantages squeezed."""
    from refimpl.frameworks import load_from_source
    from refimpl.frameworks._advantage_inputs import outcome_batch

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    scores, _ = ppo["compute_grpo_outcome_advantage"](**outcome_batch(rewards, group), epsilon=1e-6)
    return scores[:, 0]


def skyrl_grpo_no_std(rewards: Any, *, group: Any) -> Any:
    """``compute_grpo_outcome_advantage`` with ``grpo_norm_by_std=False`` (mean-centred)."""
    from refimpl.frameworks import load_from_source
    from refimpl.frameworks._advantage_inputs import outcome_batch

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    scores, _ = ppo["compute_grpo_outcome_advantage"](
        **outcome_batch(rewards, group), grpo_norm_by_std=False
    )
    return scores[:, 0]


def skyrl_rloo(rewards: Any, *, group: Any) -> Any:
    """``compute_rloo_outcome_advantage``, one reward per row."""
    from refimpl.frameworks import load_from_source
    from refimpl.frameworks._advantage_inputs import outcome_batch

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    scores, _ = ppo["compute_rloo_outcome_advantage"](**outcome_batch(rewards, group))
    return scores[:, 0]


def skyrl_reinforce_pp(rewards: Any, *, mask: Any) -> Any:
    """``compute_reinforce_plus_plus_outcome_advantage`` (``gamma=1``): each reward at its row's
    last valid token; the (equal) advantage of a row's tokens read at that token (0 if empty)."""
    import torch

    from refimpl.frameworks import load_from_source

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    lengths = mask.sum(-1).long()
    last = (lengths - 1).clamp(min=0)[:, None]
    token_rewards = torch.zeros_like(mask, dtype=rewards.dtype)
    token_rewards.scatter_(1, last, (rewards * (lengths > 0))[:, None])
    advantages, _ = ppo["compute_reinforce_plus_plus_outcome_advantage"](
        token_rewards, mask.to(rewards.dtype), gamma=1.0
    )
    return advantages.gather(1, last)[:, 0] * (lengths > 0)


def skyrl_logprobs(logits: Any, tokens: Any, *, temperature: Any, mask: Any) -> Any:
    """``logprobs_from_logits`` of the logits divided by the temperature (the policy model
    wrapper's ``logits_BSV.div_(temperature)``); SkyRL's trainer applies no top-k/top-p
    (``truncation="none"``)."""
    from skyrl.backends.skyrl_train.utils.torch_utils import logprobs_from_logits

    return logprobs_from_logits(logits / temperature, tokens.long())


def skyrl_logprobs_v2(logits: Any, tokens: Any, *, temperature: Any, mask: Any) -> Any:
    """``logprobs_from_logits_v2`` of ``logits / temperature``: its bfloat16/float16 branch is a
    per-row ``log_softmax`` and gather (float32/float64: gather − ``logsumexp``)."""
    from skyrl.backends.skyrl_train.utils.torch_utils import logprobs_from_logits_v2

    return logprobs_from_logits_v2(logits / temperature, tokens.long())


def skyrl_entropy(logits: Any, *, mask: Any) -> Any:
    """``chunked_entropy_from_logits`` with ``requires_grad=True`` (the worker's
    ``entropy_requires_grad = use_entropy_loss``) and ``attention_mask=mask``; the model wrapper
    divides the logits by the temperature before."""
    from skyrl.backends.skyrl_train.utils.torch_utils import chunked_entropy_from_logits

    return chunked_entropy_from_logits(logits, requires_grad=True, attention_mask=mask)


def skyrl_gae(rewards: Any, values: Any, *, gamma: Any, lam: Any, mask: Any) -> Any:
    """``compute_gae_advantage_return`` (``advantage_estimator="gae"``): whitened advantages and
    the raw returns."""
    from refimpl.frameworks import load_from_source

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    advantages, returns = ppo["compute_gae_advantage_return"](
        token_level_rewards=rewards, values=values, response_mask=mask, gamma=gamma, lambd=lam
    )
    return advantages, returns


_BF16_HUGE_LOGITS = Divergence(
    "numerical limit",
    "In bfloat16, logits / T of about 1000 are rounded to a multiple of 8 before the softmax, so "
    "a token's probability of about e^-76 moves by a factor up to e^4: its gradient (of order "
    "1e-33) is off by more than the first-order tolerance allows. The gradients that matter "
    "(probabilities above the bfloat16 resolution) agree; float32 and float64 inputs take "
    "logprobs_from_logits_v2's logsumexp branch and pass.",
)
#: ppo_policy_loss's ratio is safe_exp_delta's float32 exp (one float32 rounding per token)
_F32_RATIO = 1e-6
_LEGACY = Divergence(
    "convention",
    "token_mean_legacy divides each micro-batch by its own valid tokens and by the number of "
    "micro-batches (mini-batch rows // micro_train_batch_size_per_gpu, empty ones included), so "
    "a token's weight depends on the split (0.673 on refimpl's stated workload); SkyRL keeps it "
    "as the legacy option next to the global token_mean.",
)
_SINGLETON_EPS = Divergence(
    "numerical limit",
    "A singleton group gets mean 0 and std torch.tensor(1.0) (float32), so its advantage is "
    "r/(1 + ε) with 1 + 1e-6 rounded to float32, a relative 1e-6 from the raw reward.",
)
_STEP = f"{_NORMALIZE} (apply_loss_reduction_to_advantages_minibatch on each mini-batch), then {_WORKER} (policy_loss * grad_sum_correction_factor, dp_size)"


def _agg(
    name: str, mode: str, candidate: Any, partition: Partition, note: str, **extra: Any
) -> Adapter:
    return Adapter(
        key=f"skyrl.loss_reduction_{name}",
        framework="skyrl",
        function=f"{_PPO}:apply_loss_reduction_to_advantages_minibatch",
        settings={"loss_reduction": name},
        spec="aggregation",
        conventions={"mode": mode, **extra},
        candidate=candidate,
        partition=partition,
        note=note,
    )


def _kl(name: str, candidate: Any, **extra: Any) -> Adapter:
    return Adapter(
        key=f"skyrl.kl_{name}",
        framework="skyrl",
        function=f"{_PPO}:compute_approx_kl",
        settings={"kl_estimator_type": name},
        spec="kl_penalty",
        conventions={"estimator": name, **extra},
        candidate=candidate,
        note=f"compute_approx_kl({name}); masked with where(mask, kl·mask, 0).",
    )


ADAPTERS: tuple[Adapter, ...] = (
    _agg(
        "token_mean",
        "token_mean",
        skyrl_reduction_token_mean,
        Partition(
            candidate=skyrl_microbatch_token_mean,
            mode="token_mean",
            rule="skyrl",
            rtol=_F32_RATIO,
            trainer=f"{_STEP}; the mini-batch's token count.",
        ),
        "Σ loss·mask / max(N, 1).",
    ),
    _agg(
        "token_mean_legacy",
        "token_mean",
        skyrl_reduction_token_mean_legacy,
        Partition(
            candidate=skyrl_microbatch_token_mean_legacy,
            mode="token_mean",
            rule="skyrl_token_mean_legacy",
            rtol=_F32_RATIO,
            divergences={"gradient": _LEGACY},
            trainer=f"{_STEP}; each micro-batch's own tokens and num_micro_batches = "
            "mini-batch rows // micro_train_batch_size_per_gpu (K·R).",
        ),
        "One micro-batch (micro_batch_size = B): Σ loss·mask / max(N, 1).",
    ),
    _agg(
        "sequence_mean",
        "seq_mean_token_mean",
        skyrl_reduction_sequence_mean,
        Partition(
            candidate=skyrl_microbatch_sequence_mean,
            mode="seq_mean_token_mean",
            rule="skyrl",
            rtol=_F32_RATIO,
            empty_rows="counted",
            trainer=f"{_STEP}; the mini-batch's row count (empty rows included) and each row's tokens.",
        ),
        "Σ_b (Σ_t loss·mask)/max(L_b, 1) / B, every row counted.",
        empty_rows="counted",
    ),
    _agg(
        "seq_mean_token_sum_norm",
        "token_sum_norm",
        skyrl_reduction_seq_mean_token_sum_norm,
        Partition(
            candidate=skyrl_microbatch_seq_mean_token_sum_norm,
            mode="token_sum_norm",
            rule="skyrl",
            rtol=_F32_RATIO,
            constant=8.0,
            empty_rows="counted",
            trainer=f"{_STEP}; the mini-batch's row count (empty rows included) and "
            "algorithm.max_seq_len.",
        ),
        "Σ loss·mask / (B·max_seq_len), every row counted.",
        empty_rows="counted",
    ),
    _agg(
        "prompt_mean",
        "group_mean",
        skyrl_reduction_prompt_mean,
        Partition(
            candidate=skyrl_microbatch_prompt_mean,
            mode="group_mean",
            rule="skyrl",
            rtol=_F32_RATIO,
            empty_rows="counted",
            trainer=f"{_STEP}; the mini-batch's prompt count (prompt_boundaries) and each "
            "prompt's tokens.",
        ),
        "Σ_p (Σ loss·mask over prompt p) / (P·max(N_p, 1)), every prompt counted.",
        empty_rows="counted",
    ),
    _kl("k1", skyrl_kl_k1),
    _kl("k2", skyrl_kl_k2),
    _kl("abs", skyrl_kl_abs),
    _kl("k3", skyrl_kl_k3, clamp=10.0, log_ratio_clamp=20.0),
    Adapter(
        key="skyrl.advantage_grpo",
        framework="skyrl",
        function=f"{_PPO}:compute_grpo_outcome_advantage",
        settings={"advantage_estimator": "grpo", "grpo_norm_by_std": True},
        spec="grpo_advantages",
        conventions={"std": "sample", "eps": 1e-6, "eps_placement": "std", "singleton": "raw"},
        candidate=skyrl_grpo,
        divergences={"values": _SINGLETON_EPS, "singleton_groups": _SINGLETON_EPS},
        note="(r − mean_g)/(std_g + 1e-6), sample std; a singleton group gets mean 0, std 1.",
    ),
    Adapter(
        key="skyrl.advantage_grpo_no_std",
        framework="skyrl",
        function=f"{_PPO}:compute_grpo_outcome_advantage",
        settings={"advantage_estimator": "grpo", "grpo_norm_by_std": False},
        spec="grpo_advantages",
        conventions={"std": "none", "singleton": "raw"},
        candidate=skyrl_grpo_no_std,
        note="r − mean_g; a singleton group's mean is 0 (its raw reward).",
    ),
    Adapter(
        key="skyrl.advantage_rloo",
        framework="skyrl",
        function=f"{_PPO}:compute_rloo_outcome_advantage",
        settings={"advantage_estimator": "rloo"},
        spec="rloo_advantages",
        conventions={"singleton": "zero"},
        candidate=skyrl_rloo,
        note="(r − mean_g)·n/(n − 1); a singleton group gets 0.",
    ),
    Adapter(
        key="skyrl.advantage_reinforce_pp",
        framework="skyrl",
        function=f"{_PPO}:compute_reinforce_plus_plus_outcome_advantage",
        settings={"advantage_estimator": "reinforce++", "gamma": 1.0},
        spec="reinforce_pp_advantages",
        conventions={"std": "sample", "eps": 1e-8, "eps_placement": "variance"},
        candidate=skyrl_reinforce_pp,
        note="Token returns (γ = 1) whitened over the batch's valid tokens (masked_whiten).",
    ),
    Adapter(
        key="skyrl.logprobs_from_logits",
        framework="skyrl",
        function=f"{_TORCH_UTILS}:logprobs_from_logits",
        settings={"temperature": "temperature"},
        spec="token_logprobs",
        conventions={"padding": "ignored", "truncation": "none"},
        candidate=skyrl_logprobs,
        note="log_softmax(z/T)[x] by gather − logsumexp (logprobs_from_logits_v2); padding not masked.",
    ),
    Adapter(
        key="skyrl.logprobs_from_logits_v2_bfloat16",
        framework="skyrl",
        function=f"{_TORCH_UTILS}:logprobs_from_logits_v2",
        settings={"temperature": "temperature"},
        spec="token_logprobs",
        conventions={"padding": "ignored", "truncation": "none"},
        candidate=skyrl_logprobs_v2,
        divergences={"huge_log_ratios_stay_finite": _BF16_HUGE_LOGITS},
        dtype="bfloat16",
        note="The bfloat16 branch: log_softmax(z/T) row by row, gathered; padding not masked.",
    ),
    Adapter(
        key="skyrl.logprobs_from_logits_v2_float32",
        framework="skyrl",
        function=f"{_TORCH_UTILS}:logprobs_from_logits_v2",
        settings={"temperature": "temperature"},
        spec="token_logprobs",
        conventions={"padding": "ignored", "truncation": "none"},
        candidate=skyrl_logprobs_v2,
        dtype="float32",
        note="The float32 branch on float32 logits (the model wrapper passes the model's logits "
        "uncast): gather − logsumexp row by row; padding not masked.",
    ),
    Adapter(
        key="skyrl.chunked_entropy_from_logits",
        framework="skyrl",
        function=f"{_TORCH_UTILS}:chunked_entropy_from_logits",
        settings={"use_entropy_loss": True},
        spec="token_entropy",
        conventions={"temperature": "none", "mask": "keyword"},
        candidate=skyrl_entropy,
        note="−Σ p·log p of log_softmax, in chunks of 1024 positions, times the attention mask.",
    ),
    Adapter(
        key="skyrl.advantage_gae",
        framework="skyrl",
        function=f"{_PPO}:compute_gae_advantage_return",
        settings={"advantage_estimator": "gae"},
        spec="gae_advantages",
        conventions={
            "output": "both",
            "whiten": "batch",
            "whiten_std": "sample",
            "whiten_eps": 1e-8,
            "eps_placement": "variance",
            "gaps": "excluded",
            "bootstrap": "zero",
            "padding_inputs": "zero",
            "padding": "ignored",
        },
        candidate=skyrl_gae,
        note="The GAE recursion over every position (no mask in it), returns = A + V, then "
        "masked_whiten of the advantages over the valid tokens.",
    ),
)

__all__ = ["ADAPTERS"]
