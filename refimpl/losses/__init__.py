"""Policy losses one level below the importance weights: aggregation, surrogates, KL estimators,
advantages, rejection statistics and log-probability semantics, each with its gradient.

One module per family; this package re-exports their public names, and so does the flat
``refimpl`` namespace:

- :mod:`refimpl.losses.aggregation`: token-sum, token-mean, sequence means, the Dr GRPO constant
  and the group mean, as weight matrices; :mod:`refimpl.losses.partition`: the same weights
  after a split into micro-batches and ranks under a framework's scaling rule.
- :mod:`refimpl.losses.clipped` (PPO-clip, dual-clip, CISPO, SAPO, DPPO),
  :mod:`refimpl.losses.policy_gradient` (REINFORCE, importance-weighted PG, the quadratic
  log-ratio penalty), :mod:`refimpl.losses.band_masked` (the band-masked importance-weighted
  PG), :mod:`refimpl.losses.likelihood` (the negative log-likelihood) and
  :mod:`refimpl.losses.sequence` (GSPO, GSPO-token, GMPO) and
  :mod:`refimpl.losses.sequence_product` (PPO-clip on the sequence-likelihood ratio),
  :mod:`refimpl.losses.sequence_soft` (CISPO and SAPO on the sequence ratio) and
  :mod:`refimpl.losses.sequence_gamma` (VESPO's gamma-kernel weight) and
  :mod:`refimpl.losses.decoupled` (decoupled PPO: the PPO clip times the behaviour weight;
  :mod:`refimpl.losses.proximal` approximates its proximal log-probabilities) and
  :mod:`refimpl.losses.distillation` (the reverse KL to a teacher as a reward): the surrogates;
  :mod:`refimpl.losses.entropy_mask`: the high-entropy token mask.
- :mod:`refimpl.losses.kl`: the k1, |k1|, k2, k3 and straight-through estimators, on- and
  off-policy; :mod:`refimpl.losses.kl_reward`: the KL penalty folded into per-token rewards, and RLOO on the KL-penalised
  sequence reward; :mod:`refimpl.losses.kl_control`: the adaptive KL coefficient of Ziegler et
  al. 2019.
- :mod:`refimpl.losses.advantages`: GRPO, Dr GRPO, RLOO, REINFORCE++;
  :mod:`refimpl.losses.advantages_normalized`: RLOO standardised over the batch;
  :mod:`refimpl.losses.advantages_baselines`: GPG, OPO, ReMax, MaxRL, Pass@k;
  :mod:`refimpl.losses.advantages_tokens`: GDPO (several rewards) and the optimal token baseline;
  :mod:`refimpl.losses.optimal_advantage`: A*-PO's optimal value estimate and its regression loss;
  :mod:`refimpl.losses.gae`: GAE advantages and returns from per-token rewards and a critic.
- :mod:`refimpl.losses.rejection`: per-sequence divergences, the any-token veto, IS batch
  normalisation, the off-policy sequence mask and M2PO's mask;
  :mod:`refimpl.losses.divergence_gate`: importance weights gated by the binary KL or total
  variation of the sampled token's probabilities.
- :mod:`refimpl.losses.logprobs`: a token's log-probability under temperature and top-k / top-p
  as a sampler assigns it, and the ratio that a sampler/trainer mismatch leaves on identical
  weights; :mod:`refimpl.losses.collision`: the collision probability Σπ² of the tempered
  softmax and its gradient.

Every loss returns :class:`LossTerms` (the per-token loss and the gradient with respect to the
current log-probabilities, as a vector–Jacobian product with the aggregation's weights); see
:mod:`refimpl.losses._common` for the conventions all families share.
"""

from __future__ import annotations

from refimpl.losses._common import LossTerms
from refimpl.losses.advantages import (
    grpo_advantages,
    reinforce_pp_advantages,
    rloo_advantages,
)
from refimpl.losses.advantages_baselines import (
    gpg_advantages,
    maxrl_advantages,
    opo_advantages,
    passk_advantages,
    remax_advantages,
)
from refimpl.losses.advantages_normalized import rloo_normalized_advantages
from refimpl.losses.advantages_tokens import gdpo_advantages, optimal_token_baseline_advantages
from refimpl.losses.aggregation import (
    AGGREGATION_MODES,
    aggregate_loss,
    aggregation_weights,
    length_weight,
)
from refimpl.losses.band_masked import band_masked_pg_loss
from refimpl.losses.clipped import (
    cispo_loss,
    dppo_loss,
    ppo_clip_loss,
    sapo_loss,
)
from refimpl.losses.collision import token_sum_pi_squared, token_sum_pi_squared_grad
from refimpl.losses.decoupled import decoupled_ppo_loss
from refimpl.losses.distillation import reverse_kl_distillation_loss
from refimpl.losses.divergence_gate import divergence_gated_weights
from refimpl.losses.entropy_mask import high_entropy_mask
from refimpl.losses.gae import (
    GAE,
    ExactGAE,
    gae_advantages,
)
from refimpl.losses.kl import (
    importance_weighted_kl,
    kl_penalty,
)
from refimpl.losses.kl_control import adaptive_kl_coefficient
from refimpl.losses.kl_reward import kl_penalized_rewards, rloo_kl_advantages
from refimpl.losses.likelihood import nll_loss
from refimpl.losses.logprobs import (
    LogprobMismatch,
    LogprobSemantics,
    logprob_mismatch,
    token_entropy,
    token_logprobs,
    token_logprobs_grad,
)
from refimpl.losses.optimal_advantage import (
    optimal_advantage_regression_loss,
    optimal_value_estimate,
)
from refimpl.losses.partition import (
    SCALING_RULES,
    PartitionGap,
    ScalingRule,
    partition_gap,
    split_weights,
)
from refimpl.losses.policy_gradient import (
    importance_weighted_pg_loss,
    log_ratio_penalty_loss,
    reinforce_loss,
)
from refimpl.losses.proximal import (
    PROXIMAL_METHODS,
    ProximalLogprobs,
    proximal_interpolation_weight,
    proximal_logprobs,
)
from refimpl.losses.rejection import (
    any_token_veto,
    divergence_rejection_mask,
    is_batch_normalize,
    m2po_mask,
    off_policy_sequence_mask,
    sequence_divergence,
)
from refimpl.losses.sequence import (
    gmpo_loss,
    gspo_loss,
    gspo_token_loss,
)
from refimpl.losses.sequence_gamma import vespo_loss
from refimpl.losses.sequence_product import sequence_ppo_clip_loss
from refimpl.losses.sequence_soft import cispo_sequence_loss, sapo_sequence_loss

__all__ = [
    "AGGREGATION_MODES",
    "GAE",
    "PROXIMAL_METHODS",
    "SCALING_RULES",
    "ExactGAE",
    "LogprobMismatch",
    "LogprobSemantics",
    "LossTerms",
    "PartitionGap",
    "ProximalLogprobs",
    "ScalingRule",
    "adaptive_kl_coefficient",
    "aggregate_loss",
    "aggregation_weights",
    "any_token_veto",
    "band_masked_pg_loss",
    "cispo_loss",
    "cispo_sequence_loss",
    "decoupled_ppo_loss",
    "divergence_gated_weights",
    "divergence_rejection_mask",
    "dppo_loss",
    "gae_advantages",
    "gdpo_advantages",
    "gmpo_loss",
    "gpg_advantages",
    "grpo_advantages",
    "gspo_loss",
    "gspo_token_loss",
    "high_entropy_mask",
    "importance_weighted_kl",
    "importance_weighted_pg_loss",
    "is_batch_normalize",
    "kl_penalized_rewards",
    "kl_penalty",
    "length_weight",
    "log_ratio_penalty_loss",
    "logprob_mismatch",
    "m2po_mask",
    "maxrl_advantages",
    "nll_loss",
    "off_policy_sequence_mask",
    "opo_advantages",
    "optimal_advantage_regression_loss",
    "optimal_token_baseline_advantages",
    "optimal_value_estimate",
    "partition_gap",
    "passk_advantages",
    "ppo_clip_loss",
    "proximal_interpolation_weight",
    "proximal_logprobs",
    "reinforce_loss",
    "reinforce_pp_advantages",
    "remax_advantages",
    "reverse_kl_distillation_loss",
    "rloo_advantages",
    "rloo_kl_advantages",
    "rloo_normalized_advantages",
    "sapo_loss",
    "sapo_sequence_loss",
    "sequence_divergence",
    "sequence_ppo_clip_loss",
    "split_weights",
    "token_entropy",
    "token_logprobs",
    "token_logprobs_grad",
    "token_sum_pi_squared",
    "token_sum_pi_squared_grad",
    "vespo_loss",
]
