"""verl (verl 0.9.1): the advantage estimators and the log-probability helpers.

``verl/trainer/ppo/core_algos.py``: each ``@register_adv_est`` estimator takes
``token_level_rewards`` ``(B, T)`` (the outcome reward on one token), ``response_mask`` and, for
the grouped ones, ``index``: the trainer's ``non_tensor_batch["uid"]``, a numpy object array of
prompt ids (strings). The candidates put each reward on a one-token response (the grouped
estimators sum the row) or, for REINFORCE++, on the last valid token of the spec's mask, pass the
group labels as strings, and return the advantage of each row's first token.

``compute_grpo_outcome_advantage``: ``(r − mean)/(torch.std + epsilon)`` per group (sample std,
ε = 1e-6 added to it); a group of one gets mean 0 and std 1, so its advantage is its raw reward.
``compute_grpo_vectorized_outcome_advantage`` computes the group statistics with
``verl/utils/groupwise.py:group_mean_std``, in float32 whatever the input dtype.
``compute_rloo_outcome_advantage`` leaves a singleton's reward as it is;
``compute_rloo_vectorized_outcome_advantage`` multiplies it by ``(c > 1)``: 0.
``compute_reinforce_plus_plus_outcome_advantage`` (γ from ``AlgoConfig``) and
``_baseline_outcome_advantage`` (group-centred first, singletons raw) whiten over the batch's
tokens with ``verl/utils/torch_functional.py:masked_whiten``.

The estimators with other baselines (``core_algos.py``, each read there): ``gpg`` multiplies the
group-centred reward by ``α = B / max(count_nonzero(scores), 1)`` (a float32 tensor) over
``f_norm``, a singleton keeping ``α·r``; ``opo`` subtracts the length-weighted group mean
(``response_mask`` row sums), a singleton keeping ``r``; ``remax`` subtracts
``reward_baselines`` from the reward-to-go at every valid token; ``grpo_passk`` gives only each
group's best response ``(r_max − r_second)/(torch.std + ε)`` (``torch.topk``; raises on a group of
one); ``gdpo`` reads each reward component of ``gdpo_reward_keys`` from ``non_tensor_batch`` as
float32 onto the last valid token, runs ``compute_grpo_outcome_advantage`` on each, sums them with
``gdpo_reward_weights`` and whitens with ``masked_whiten``; ``optimal_token_baseline`` and
``tir_optimal_token_baseline`` subtract ``Σ G·W / (Σ W + 1e-8)`` per group and position, ``W`` the
cumulative ``1 − 2π + Σπ²``.

``verl/utils/torch_functional.py``: ``logprobs_from_logits`` uses flash-attn's cross-entropy or
NPU's when available, else (CPU) ``logprobs_from_logits_v2`` (gather − logsumexp per row);
``logprobs_from_logits_naive`` is ``log_softmax`` + gather. The logits are divided by the
temperature before (``verl/workers/engine/fsdp/transformer_impl.py:
_scale_logits_by_temperature``); no top-k or top-p is applied when training.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from refimpl.frameworks._registry import Adapter, Divergence

_CORE = "verl.trainer.ppo.core_algos"
_TF = "verl.utils.torch_functional"


# ---------------------------------------------------------------------------------------------
# advantages
# ---------------------------------------------------------------------------------------------


def verl_grpo_advantages(rewards: Any, *, group: Any) -> Any:
    """verl ``adv_estimator="grpo"``, ``norm_adv_by_std_in_grpo=True``."""
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    from refimpl.frameworks._advantage_inputs import outcome_batch

    advantages, _ = compute_grpo_outcome_advantage(
        **outcome_batch(rewards, group),
        norm_adv_by_std_in_grpo=True,
    )
    return advantages[:, 0]


def verl_grpo_advantages_no_std(rewards: Any, *, group: Any) -> Any:
    """verl ``adv_estimator="grpo"``, ``norm_adv_by_std_in_grpo=False`` (Dr GRPO)."""
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    from refimpl.frameworks._advantage_inputs import outcome_batch

    advantages, _ = compute_grpo_outcome_advantage(
        **outcome_batch(rewards, group),
        norm_adv_by_std_in_grpo=False,
    )
    return advantages[:, 0]


def verl_grpo_vectorized_advantages(rewards: Any, *, group: Any) -> Any:
    """verl ``adv_estimator="grpo_vectorized"``, ``norm_adv_by_std_in_grpo=True``."""
    from verl.trainer.ppo.core_algos import compute_grpo_vectorized_outcome_advantage

    from refimpl.frameworks._advantage_inputs import outcome_batch

    advantages, _ = compute_grpo_vectorized_outcome_advantage(
        **outcome_batch(rewards, group),
        norm_adv_by_std_in_grpo=True,
    )
    return advantages[:, 0]


def verl_grpo_vectorized_advantages_no_std(rewards: Any, *, group: Any) -> Any:
    """verl ``adv_estimator="grpo_vectorized"``, ``norm_adv_by_std_in_grpo=False``."""
    from verl.trainer.ppo.core_algos import compute_grpo_vectorized_outcome_advantage

    from refimpl.frameworks._advantage_inputs import outcome_batch

    advantages, _ = compute_grpo_vectorized_outcome_advantage(
        **outcome_batch(rewards, group),
        norm_adv_by_std_in_grpo=False,
    )
    return advantages[:, 0]


def verl_rloo_advantages(rewards: Any, *, group: Any) -> Any:
    """verl ``adv_estimator="rloo"``."""
    from verl.trainer.ppo.core_algos import compute_rloo_outcome_advantage

    from refimpl.frameworks._advantage_inputs import outcome_batch

    advantages, _ = compute_rloo_outcome_advantage(**outcome_batch(rewards, group))
    return advantages[:, 0]


def verl_rloo_vectorized_advantages(rewards: Any, *, group: Any) -> Any:
    """verl ``adv_estimator="rloo_vectorized"``."""
    from verl.trainer.ppo.core_algos import compute_rloo_vectorized_outcome_advantage

    from refimpl.frameworks._advantage_inputs import outcome_batch

    advantages, _ = compute_rloo_vectorized_outcome_advantage(**outcome_batch(rewards, group))
    return advantages[:, 0]


def verl_reinforce_pp_advantages(rewards: Any, *, mask: Any) -> Any:
    """verl ``adv_estimator="reinforce_plus_plus"``, ``gamma=1.0``: the outcome reward on each
    row's last valid token."""
    import torch
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.core_algos import compute_reinforce_plus_plus_outcome_advantage

    m = torch.as_tensor(mask)
    r = torch.as_tensor(rewards).reshape(-1)
    last = (m.sum(dim=-1).long() - 1).clamp(min=0)
    token_rewards = torch.zeros_like(m, dtype=r.dtype)
    token_rewards[torch.arange(m.shape[0]), last] = r
    advantages, _ = compute_reinforce_plus_plus_outcome_advantage(
        token_level_rewards=token_rewards, response_mask=m.to(r.dtype), config=AlgoConfig(gamma=1.0)
    )
    return advantages[:, 0]


def verl_reinforce_pp_baseline_advantages(rewards: Any, *, mask: Any, group: Any) -> Any:
    """verl ``adv_estimator="reinforce_plus_plus_baseline"``: the outcome reward on each row's
    last valid token, the group labels as ``index``."""
    import torch
    from verl.trainer.ppo.core_algos import (
        compute_reinforce_plus_plus_baseline_outcome_advantage,
    )

    from refimpl.frameworks._advantage_inputs import group_index

    m = torch.as_tensor(mask)
    r = torch.as_tensor(rewards).reshape(-1)
    last = (m.sum(dim=-1).long() - 1).clamp(min=0)
    token_rewards = torch.zeros_like(m, dtype=r.dtype)
    token_rewards[torch.arange(m.shape[0]), last] = r
    index = group_index(group)
    advantages, _ = compute_reinforce_plus_plus_baseline_outcome_advantage(
        token_level_rewards=token_rewards, response_mask=m.to(r.dtype), index=index
    )
    return advantages[:, 0]


_SINGLETON_EPSILON = Divergence(
    "numerical limit",
    "compute_grpo_outcome_advantage gives a group of one mean torch.tensor(0.0) and std "
    "torch.tensor(1.0) and then divides like any group, (r − 0)/(1 + epsilon), with the std a "
    "float32 tensor: a singleton's advantage is r/(1 + 1e-6 rounded in float32), a relative "
    "9.5e-7 below its raw reward.",
)
_WHITEN_EPSILON = Divergence(
    "numerical limit",
    "masked_whiten's mean and variance are verl_F.masked_mean, which divides by mask.sum() + "
    "1e-8 (torch_functional.py masked_mean): the batch mean is shrunk by a relative 1e-8/N, so "
    "the advantages are shifted by about 1e-8·|m|/(N·D), their mean is not exactly 0 and their "
    "std not exactly s/D; in a batch whose rewards are all equal to c the advantages are "
    "c·1e-4/N instead of 0, so a shift of every reward moves them.",
)
_WHITEN_CHECKS = ("values", "zero_group_mean", "unit_std", "shift_invariance")

_GRPO = {"std": "sample", "eps": 1e-6, "eps_placement": "std", "singleton": "raw"}

ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="verl.adv_grpo",
        framework="verl",
        function=f"{_CORE}:compute_grpo_outcome_advantage",
        settings={"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": True},
        spec="grpo_advantages",
        conventions=_GRPO,
        candidate=verl_grpo_advantages,
        divergences={"values": _SINGLETON_EPSILON, "singleton_groups": _SINGLETON_EPSILON},
        note="(r − mean)/(sample std + 1e-6) per uid group; a group of one keeps its reward.",
    ),
    Adapter(
        key="verl.adv_grpo_no_std",
        framework="verl",
        function=f"{_CORE}:compute_grpo_outcome_advantage",
        settings={"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": False},
        spec="grpo_advantages",
        conventions={**_GRPO, "std": "none"},
        candidate=verl_grpo_advantages_no_std,
        note="Dr GRPO: r − group mean; a group of one keeps its reward.",
    ),
    Adapter(
        key="verl.adv_grpo_vectorized",
        framework="verl",
        function=f"{_CORE}:compute_grpo_vectorized_outcome_advantage",
        settings={"adv_estimator": "grpo_vectorized", "norm_adv_by_std_in_grpo": True},
        spec="grpo_advantages",
        conventions=_GRPO,
        candidate=verl_grpo_vectorized_advantages,
        dtype="float32",
        note="As grpo, with the group mean and std computed in float32 (group_mean_std).",
    ),
    Adapter(
        key="verl.adv_grpo_vectorized_no_std",
        framework="verl",
        function=f"{_CORE}:compute_grpo_vectorized_outcome_advantage",
        settings={"adv_estimator": "grpo_vectorized", "norm_adv_by_std_in_grpo": False},
        spec="grpo_advantages",
        conventions={**_GRPO, "std": "none"},
        candidate=verl_grpo_vectorized_advantages_no_std,
        dtype="float32",
        note="r − group mean (float32 mean); a group of one keeps its reward.",
    ),
    Adapter(
        key="verl.adv_rloo",
        framework="verl",
        function=f"{_CORE}:compute_rloo_outcome_advantage",
        settings={"adv_estimator": "rloo"},
        spec="rloo_advantages",
        conventions={"singleton": "raw"},
        candidate=verl_rloo_advantages,
        note="r·n/(n − 1) − mean·n/(n − 1) per group; a group of one keeps its reward.",
    ),
    Adapter(
        key="verl.adv_rloo_vectorized",
        framework="verl",
        function=f"{_CORE}:compute_rloo_vectorized_outcome_advantage",
        settings={"adv_estimator": "rloo_vectorized"},
        spec="rloo_advantages",
        conventions={"singleton": "zero"},
        candidate=verl_rloo_vectorized_advantages,
        note="(c·r − Σ)/(c − 1)·(c > 1): a group of one gets 0, unlike 'rloo'.",
    ),
    Adapter(
        key="verl.adv_reinforce_plus_plus",
        framework="verl",
        function=f"{_CORE}:compute_reinforce_plus_plus_outcome_advantage",
        settings={"adv_estimator": "reinforce_plus_plus", "gamma": 1.0},
        spec="reinforce_pp_advantages",
        conventions={"baseline": "none", "std": "sample", "eps": 1e-8, "eps_placement": "variance"},
        candidate=verl_reinforce_pp_advantages,
        divergences=dict.fromkeys(_WHITEN_CHECKS, _WHITEN_EPSILON),
        note="γ = 1 returns (the reward at every valid token) whitened over the batch's tokens "
        "by masked_whiten (sample variance, rsqrt(var + 1e-8)).",
    ),
    Adapter(
        key="verl.adv_reinforce_plus_plus_baseline",
        framework="verl",
        function=f"{_CORE}:compute_reinforce_plus_plus_baseline_outcome_advantage",
        settings={"adv_estimator": "reinforce_plus_plus_baseline"},
        spec="reinforce_pp_advantages",
        conventions={
            "baseline": "group",
            "std": "sample",
            "eps": 1e-8,
            "eps_placement": "variance",
            "singleton": "raw",
        },
        candidate=verl_reinforce_pp_baseline_advantages,
        divergences=dict.fromkeys(_WHITEN_CHECKS, _WHITEN_EPSILON),
        note="r − group mean (a singleton keeps r) on every valid token, whitened over the "
        "batch's tokens by masked_whiten.",
    ),
)


# ---------------------------------------------------------------------------------------------
# log-probabilities of the sampled tokens
# ---------------------------------------------------------------------------------------------


def verl_logprobs_from_logits(logits: Any, tokens: Any, *, temperature: float, mask: Any) -> Any:
    """verl ``logprobs_from_logits`` on the logits divided by the temperature (as the engine's
    ``_scale_logits_by_temperature``), over the full vocabulary: verl's training log-probability
    applies none of the sampler's top-k and top-p (``truncation="none"``)."""
    from verl.utils.torch_functional import logprobs_from_logits

    return logprobs_from_logits(logits / temperature, tokens.long())


def verl_logprobs_from_logits_v2(logits: Any, tokens: Any, *, temperature: float, mask: Any) -> Any:
    """verl ``logprobs_from_logits_v2`` (gather − per-row logsumexp) on the tempered logits."""
    from verl.utils.torch_functional import logprobs_from_logits_v2

    return logprobs_from_logits_v2(logits / temperature, tokens.long())


def verl_logprobs_from_logits_naive(
    logits: Any, tokens: Any, *, temperature: float, mask: Any
) -> Any:
    """verl ``logprobs_from_logits_naive`` (log_softmax + gather) on the tempered logits."""
    from verl.utils.torch_functional import logprobs_from_logits_naive

    return logprobs_from_logits_naive(logits / temperature, tokens.long())


ADAPTERS = (
    *ADAPTERS,
    Adapter(
        key="verl.logprobs_from_logits",
        framework="verl",
        function=f"{_TF}:logprobs_from_logits",
        settings={"rollout.temperature": "temperature", "VERL_DISABLE_FLASH_ATTN_CE": "unset"},
        spec="token_logprobs",
        conventions={"padding": "ignored", "truncation": "none"},
        candidate=verl_logprobs_from_logits,
        note="The training log-probability: log_softmax of logits / T at the token (CPU: the "
        "logsumexp path of logprobs_from_logits_v2), over the full vocabulary.",
    ),
    Adapter(
        key="verl.logprobs_from_logits_v2",
        framework="verl",
        function=f"{_TF}:logprobs_from_logits_v2",
        settings={"rollout.temperature": "temperature"},
        spec="token_logprobs",
        conventions={"padding": "ignored", "truncation": "none"},
        candidate=verl_logprobs_from_logits_v2,
        note="gather(logits / T) − logsumexp(logits / T) row by row (float32/float64 inputs).",
    ),
    Adapter(
        key="verl.logprobs_from_logits_naive",
        framework="verl",
        function=f"{_TF}:logprobs_from_logits_naive",
        settings={"rollout.temperature": "temperature"},
        spec="token_logprobs",
        conventions={"padding": "ignored", "truncation": "none"},
        candidate=verl_logprobs_from_logits_naive,
        note="log_softmax(logits / T) gathered at the token.",
    ),
)


def verl_entropy_from_logits(logits: Any) -> Any:
    """verl ``entropy_from_logits``: ``logsumexp(z) − Σ softmax(z)·z`` per position (the FSDP
    engine divides the logits by the temperature before)."""
    from verl.utils.torch_functional import entropy_from_logits

    return entropy_from_logits(logits)


def verl_sum_pi_squared(logits: Any) -> Any:
    """verl ``calculate_sum_pi_squared_from_logits``: ``exp(logsumexp(2z) − 2·logsumexp(z))`` per
    position, no temperature, no mask. Its callers (the FSDP engine's forward, padded and
    no-padding paths, under ``actor.calculate_sum_pi_squared``) divide the logits by the
    temperature first; it feeds the optimal token baseline's ``sum_pi_squared``."""
    from verl.utils.torch_functional import calculate_sum_pi_squared_from_logits

    return calculate_sum_pi_squared_from_logits(logits)


def verl_entropy_from_logits_with_chunking(logits: Any) -> Any:
    """verl ``entropy_from_logits_with_chunking`` on the (B·T, V) rows, reshaped to (B, T)."""
    from verl.utils.torch_functional import entropy_from_logits_with_chunking

    rows = logits.reshape(-1, logits.shape[-1])
    return entropy_from_logits_with_chunking(rows, chunk_size=2048).reshape(logits.shape[:-1])


def verl_gae_advantages(rewards: Any, values: Any, *, gamma: float, lam: float, mask: Any) -> Any:
    """verl ``adv_estimator="gae"``: ``compute_gae_advantage_return`` (whitened advantages, raw
    returns)."""
    from verl.trainer.ppo.core_algos import compute_gae_advantage_return

    advantages, returns = compute_gae_advantage_return(
        token_level_rewards=rewards, values=values, response_mask=mask, gamma=gamma, lam=lam
    )
    return advantages, returns


_ENTROPY = {"temperature": "none", "mask": "none", "padding": "ignored"}

ADAPTERS = (
    *ADAPTERS,
    Adapter(
        key="verl.entropy_from_logits",
        framework="verl",
        function=f"{_TF}:entropy_from_logits",
        settings={"actor.entropy_from_logits_with_chunking": False},
        spec="token_entropy",
        conventions=_ENTROPY,
        candidate=verl_entropy_from_logits,
        note="logsumexp(z) − Σ softmax(z)·z at every position (no mask), in the logits' dtype.",
    ),
    Adapter(
        key="verl.entropy_from_logits_with_chunking",
        framework="verl",
        function=f"{_TF}:entropy_from_logits_with_chunking",
        settings={"actor.entropy_from_logits_with_chunking": True},
        spec="token_entropy",
        conventions={**_ENTROPY, "compute_dtype": "float32"},
        candidate=verl_entropy_from_logits_with_chunking,
        note="The same formula over chunks of 2048 rows, each cast to float32, written into a "
        "float32 tensor.",
    ),
    Adapter(
        key="verl.sum_pi_squared_from_logits",
        framework="verl",
        function=f"{_TF}:calculate_sum_pi_squared_from_logits",
        settings={"actor.calculate_sum_pi_squared": True},
        spec="token_sum_pi_squared",
        conventions=_ENTROPY,
        candidate=verl_sum_pi_squared,
        note="exp(logsumexp(2z) − 2·logsumexp(z)) at every position (no mask), in the logits' "
        "dtype; the caller divides the logits by the temperature.",
    ),
    Adapter(
        key="verl.adv_gae",
        framework="verl",
        function=f"{_CORE}:compute_gae_advantage_return",
        settings={"adv_estimator": "gae"},
        spec="gae_advantages",
        conventions={
            "output": "both",
            "whiten": "batch",
            "whiten_std": "sample",
            "whiten_eps": 1e-8,
            "eps_placement": "variance",
            "gaps": "skip",
            "bootstrap": "zero",
            "padding": "ignored",
        },
        candidate=verl_gae_advantages,
        divergences=dict.fromkeys(
            (
                "values",
                "padding_contributes_nothing",
                "lambda_zero_is_td_error",
                "lambda_one_is_discounted_return",
                "gaps_in_the_mask",
                "whitened_mean_and_std",
            ),
            _WHITEN_EPSILON,
        ),
        note="GAE with masked positions skipped (values and advantages carried across them), "
        "advantages whitened over the batch's valid tokens by masked_whiten, returns A + V "
        "before whitening.",
    ),
)


# ---------------------------------------------------------------------------------------------
# the estimators with other baselines: GPG, OPO, ReMax, Pass@k, GDPO, the optimal token baseline
# ---------------------------------------------------------------------------------------------


def verl_gpg_advantages(rewards: Any, *, group: Any) -> Any:
    """verl ``adv_estimator="gpg"``: ``compute_gpg_outcome_advantage`` (``f_norm=1.0``), one
    reward per row as a one-token response."""
    from verl.trainer.ppo.core_algos import compute_gpg_outcome_advantage

    from refimpl.frameworks._advantage_inputs import outcome_batch

    advantages, _ = compute_gpg_outcome_advantage(**outcome_batch(rewards, group))
    return advantages[:, 0]


def verl_opo_advantages(rewards: Any, *, group: Any, mask: Any) -> Any:
    """verl ``adv_estimator="opo"``: the outcome reward on each row's last valid token, the
    spec's mask as ``response_mask``; the advantage of each row's first token."""
    import torch
    from verl.trainer.ppo.core_algos import compute_opo_outcome_advantage

    from refimpl.frameworks._advantage_inputs import group_index

    m = torch.as_tensor(mask)
    r = torch.as_tensor(rewards).reshape(-1)
    token_rewards = torch.zeros_like(m, dtype=r.dtype)
    token_rewards[torch.arange(m.shape[0]), m.sum(dim=-1).long() - 1] = r
    index = group_index(group)
    advantages, _ = compute_opo_outcome_advantage(
        token_level_rewards=token_rewards, response_mask=m.to(r.dtype), index=index
    )
    return advantages[:, 0]


def verl_remax_advantages(rewards: Any, *, baselines: Any) -> Any:
    """verl ``adv_estimator="remax"``: ``compute_remax_outcome_advantage`` with the greedy
    rewards as ``reward_baselines``, one reward per row as a one-token response."""
    import torch
    from verl.trainer.ppo.core_algos import compute_remax_outcome_advantage

    r = torch.as_tensor(rewards).reshape(-1, 1).clone()
    advantages, _ = compute_remax_outcome_advantage(
        token_level_rewards=r,
        reward_baselines=torch.as_tensor(baselines).reshape(-1),
        response_mask=torch.ones_like(r),
    )
    return advantages[:, 0]


def _verl_passk(rewards: Any, group: Any, *, norm: bool) -> Any:
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.core_algos import compute_grpo_passk_outcome_advantage

    from refimpl.frameworks._advantage_inputs import outcome_batch

    advantages, _ = compute_grpo_passk_outcome_advantage(
        **outcome_batch(rewards, group),
        config=AlgoConfig(norm_adv_by_std_in_grpo=norm),
    )
    return advantages[:, 0]


def verl_grpo_passk_advantages(rewards: Any, *, group: Any) -> Any:
    """verl ``adv_estimator="grpo_passk"``, ``norm_adv_by_std_in_grpo=True``: the real
    ``compute_grpo_passk_outcome_advantage`` (read in ``_verl_passk``)."""
    return _verl_passk(rewards, group, norm=True)


def verl_grpo_passk_advantages_no_std(rewards: Any, *, group: Any) -> Any:
    """verl ``adv_estimator="grpo_passk"``, ``norm_adv_by_std_in_grpo=False``: the real
    ``compute_grpo_passk_outcome_advantage`` (read in ``_verl_passk``)."""
    return _verl_passk(rewards, group, norm=False)


def verl_gdpo_advantages(rewards: Any, *, group: Any, weights: Any, mask: Any) -> Any:
    """verl ``adv_estimator="gdpo"`` on its multi-reward path: each component passed as
    ``non_tensor_batch[key]`` with ``gdpo_reward_keys``/``gdpo_reward_weights`` in the config and
    a one-token prompt in ``batch`` (its ``attention_mask`` places each score on the row's last
    valid token); the advantage of each row's first token."""
    import torch
    from verl.trainer.ppo.core_algos import compute_gdpo_outcome_advantage

    from refimpl.frameworks._advantage_inputs import group_index

    m = torch.as_tensor(mask)
    r = torch.as_tensor(rewards)
    keys = [f"reward_{k}" for k in range(r.shape[1])]
    index = group_index(group)
    prompts = torch.zeros((m.shape[0], 1), dtype=torch.long)
    advantages, _ = compute_gdpo_outcome_advantage(
        token_level_rewards=torch.zeros_like(m, dtype=r.dtype),
        response_mask=m.to(torch.float32),
        index=index,
        config={"gdpo_reward_keys": keys, "gdpo_reward_weights": torch.as_tensor(weights).tolist()},
        non_tensor_batch={key: r[:, k].numpy() for k, key in enumerate(keys)},
        batch={
            "prompts": prompts,
            "attention_mask": torch.cat([torch.ones_like(prompts), m.long()], 1),
        },
    )
    return advantages[:, 0]


def verl_optimal_token_baseline_advantages(
    token_rewards: Any, logp_old: Any, sum_pi_squared: Any, *, group: Any, mask: Any
) -> Any:
    """verl ``adv_estimator="optimal_token_baseline"``: ``compute_optimal_token_baseline_advantage``
    (no rollout importance weights, ``handle_zero_tail=True``, ``epsilon=1e-8``)."""
    from verl.trainer.ppo.core_algos import compute_optimal_token_baseline_advantage

    from refimpl.frameworks._advantage_inputs import group_index

    index = group_index(group)
    advantages, _ = compute_optimal_token_baseline_advantage(
        token_level_rewards=token_rewards,
        response_mask=mask,
        index=index,
        old_log_probs=logp_old,
        sum_pi_squared=sum_pi_squared,
    )
    return advantages


def verl_tir_optimal_token_baseline_advantages(
    token_rewards: Any, logp_old: Any, sum_pi_squared: Any, *, group: Any, mask: Any
) -> Any:
    """verl ``adv_estimator="tir_optimal_token_baseline"``:
    ``compute_multi_turn_optimal_token_baseline_advantage`` (the valid tokens of each row aligned;
    no rollout importance weights, ``handle_zero_tail=True``, ``epsilon=1e-8``)."""
    from verl.trainer.ppo.core_algos import compute_multi_turn_optimal_token_baseline_advantage

    from refimpl.frameworks._advantage_inputs import group_index

    index = group_index(group)
    advantages, _ = compute_multi_turn_optimal_token_baseline_advantage(
        token_level_rewards=token_rewards,
        response_mask=mask,
        index=index,
        old_log_probs=logp_old,
        sum_pi_squared=sum_pi_squared,
    )
    return advantages


_OTB = {"eps": 1e-8, "zero_tail": True}
#: α = 4/3 (three non-zero rewards in four), two singletons: the float32 α shows in every entry
_GPG_THIRDS = [((np.array([1.0, 1.0, 0.0, 1.0]),), {"group": np.array([0, 1, 1, 2])})]
_GPG_ALPHA_FLOAT32 = Divergence(
    "numerical limit",
    "compute_gpg_outcome_advantage computes alpha = bsz / m.clamp(min=1) with m = "
    "torch.count_nonzero(scores), an int64 tensor: the true division of a Python int by it is a "
    "float32 tensor (torch's default dtype), so α is rounded to float32 (4/3 → 1.3333333730697632) "
    "whatever the rewards' dtype, and every advantage of a float64 batch is off by up to a "
    "relative 6e-8 when B/M is not a dyadic fraction.",
)

ADAPTERS = (
    *ADAPTERS,
    Adapter(
        key="verl.adv_gpg",
        framework="verl",
        function=f"{_CORE}:compute_gpg_outcome_advantage",
        settings={"adv_estimator": "gpg"},
        spec="gpg_advantages",
        conventions={"f_norm": 1.0, "singleton": "raw"},
        candidate=verl_gpg_advantages,
        divergences={"values": _GPG_ALPHA_FLOAT32, "singleton_groups": _GPG_ALPHA_FLOAT32},
        examples=(_GPG_THIRDS,),
        note="α·(r − group mean)/f_norm with α = B/max(#nonzero rewards, 1); a group of one "
        "keeps α·r.",
    ),
    Adapter(
        key="verl.adv_opo",
        framework="verl",
        function=f"{_CORE}:compute_opo_outcome_advantage",
        settings={"adv_estimator": "opo"},
        spec="opo_advantages",
        conventions={"singleton": "raw"},
        candidate=verl_opo_advantages,
        note="r − Σ len·r / Σ len per uid group (lengths = response_mask row sums); a group of "
        "one keeps r.",
    ),
    Adapter(
        key="verl.adv_remax",
        framework="verl",
        function=f"{_CORE}:compute_remax_outcome_advantage",
        settings={"adv_estimator": "remax"},
        spec="remax_advantages",
        conventions={},
        candidate=verl_remax_advantages,
        note="The reward-to-go minus the greedy response's reward at every valid token.",
    ),
    Adapter(
        key="verl.adv_grpo_passk",
        framework="verl",
        function=f"{_CORE}:compute_grpo_passk_outcome_advantage",
        settings={"adv_estimator": "grpo_passk", "norm_adv_by_std_in_grpo": True},
        spec="passk_advantages",
        conventions={"std": "sample", "eps": 1e-6},
        candidate=verl_grpo_passk_advantages,
        note="(r_max − r_second)/(torch.std + 1e-6) on the group's best response, 0 elsewhere.",
    ),
    Adapter(
        key="verl.adv_grpo_passk_no_std",
        framework="verl",
        function=f"{_CORE}:compute_grpo_passk_outcome_advantage",
        settings={"adv_estimator": "grpo_passk", "norm_adv_by_std_in_grpo": False},
        spec="passk_advantages",
        conventions={"std": "none"},
        candidate=verl_grpo_passk_advantages_no_std,
        note="r_max − r_second on the group's best response, 0 elsewhere.",
    ),
    Adapter(
        key="verl.adv_gdpo",
        framework="verl",
        function=f"{_CORE}:compute_gdpo_outcome_advantage",
        settings={
            "adv_estimator": "gdpo",
            "gdpo_reward_keys": "K keys",
            "gdpo_reward_weights": "w",
        },
        spec="gdpo_advantages",
        conventions={"std": "sample", "eps": 1e-6, "singleton": "raw", "whiten_eps": 1e-8},
        candidate=verl_gdpo_advantages,
        dtype="float32",
        note="Each reward component (read as float32) through compute_grpo_outcome_advantage, "
        "weighted and summed, whitened over the batch's tokens by masked_whiten.",
    ),
    Adapter(
        key="verl.adv_optimal_token_baseline",
        framework="verl",
        function=f"{_CORE}:compute_optimal_token_baseline_advantage",
        settings={"adv_estimator": "optimal_token_baseline", "rollout_is_weights": None},
        spec="optimal_token_baseline_advantages",
        conventions=_OTB,
        candidate=verl_optimal_token_baseline_advantages,
        note="G_t − Σ G·W / (Σ W + 1e-8) per group and column, W the cumulative 1 − 2π + Σπ²; "
        "the unique longest response's baseline zeroed past the second-longest length.",
    ),
    Adapter(
        key="verl.adv_tir_optimal_token_baseline",
        framework="verl",
        function=f"{_CORE}:compute_multi_turn_optimal_token_baseline_advantage",
        settings={"adv_estimator": "tir_optimal_token_baseline", "rollout_is_weights": None},
        spec="optimal_token_baseline_advantages",
        conventions={**_OTB, "positions": "valid"},
        candidate=verl_tir_optimal_token_baseline_advantages,
        note="The same baseline with the k-th valid tokens of the rows aligned (a multi-turn "
        "mask's gaps skipped); rows with no valid token left out of their group.",
    ),
)
