"""One valid call of every public function of the formula modules: the table the rule tests start from.

``tests/test_validation_rules.py`` runs each call with the validation builders recorded
(``tests/_rules.py``), so that every rule a function applies to a user argument is found, then
moves that argument to each side of the rule's boundary. A call therefore sets the optional
parameters that carry rules (a cap, a clamp, a lower bound) to valid values: a rule that the
valid call never reaches is a rule that no generated test checks. Most calls are the function's
doctest Example, with its optional parameters added.

Keys are ``"<module> <name>"`` as in ``tests/data/public_api.txt``; a function may have several
calls (each one reaches rules the others do not). A public function of the formula modules with
no call here fails ``test_every_public_function_has_a_valid_call``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np
import scipy.stats
from _rules import Rule, hand_rule

from refimpl.losses import LogprobSemantics

__all__ = ["ALSO_PUBLISHED", "FORMULA_MODULES", "HAND_RULES", "VALID_CALLS", "Call"]

#: The packages whose public functions must each have a valid call.
FORMULA_MODULES = (
    "refimpl.dispatch",
    "refimpl.staleness",
    "refimpl.effort",
    "refimpl.penalties",
    "refimpl.losses",
)

#: Functions of the formula packages published only under another package's name (the framework
#: settings of ``refimpl/staleness/frameworks.py``, re-exported as ``refimpl.frameworks``; that
#: package's own adapters are not formulas): each needs a valid call like a formula function.
ALSO_PUBLISHED = tuple(
    f"refimpl.frameworks {name}"
    for name in (
        "areal_staleness_bound",
        "framework_staleness_bound",
        "skyrl_staleness_bound",
        "trl_staleness_bound",
        "verl_off_policy_bound",
        "verl_staleness_bound",
    )
)


class Call(NamedTuple):
    """Positional arrays and keyword parameters of one valid call (copied before each use)."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def _c(*args: Any, **kwargs: Any) -> Call:
    return Call(args, kwargs)


_LP = np.log([[0.5, 0.6, 0.9], [0.4, 0.3, 0.2]])
_LQ = np.log([[0.5, 0.3, 0.1], [0.3, 0.4, 0.2]])
_MASK = [[1, 1, 1], [1, 1, 0]]
_ADV = [1.0, -0.5]
_Z = np.log([[[4.0, 2.0, 1.0, 1.0], [1.0, 3.0, 2.0, 2.0]]])
_HALF = Fraction(1, 2)
_EFFORT = {"q_max": 1.0, "lam": 100.0, "k0": 0.005, "b_min": 0.0, "tau": 1.0}
_MIX = {"q_max": 1.0, "lam": [20.0, 200.0], "weights": [0.25, 0.75]}

VALID_CALLS: dict[str, tuple[Call, ...]] = {
    # dispatch
    "refimpl.dispatch async_speedup": (_c(scipy.stats.uniform(loc=0.0, scale=1.0), n=3),),
    "refimpl.dispatch clipped_ipw_estimate": (_c([1.0, 3.0], [1.0, 0.5], n=4, k=2, clip=0.75),),
    "refimpl.dispatch expected_max": (_c(scipy.stats.expon(), n=3),),
    "refimpl.dispatch exponential_rate_mle": (
        _c([1.0, 2.0, 3.0, 3.0], [1, 1, 1, 0]),
        _c([1.0, 2.0, 3.0, 3.0], [1, 1, 1, 0], unbiased=True),
    ),
    "refimpl.dispatch fluid_keep_probability": (
        _c([0.0, 50.0, 100.0, 150.0], step_time=100.0, eta=1),
    ),
    "refimpl.dispatch fluid_steady_state": (
        _c(scipy.stats.expon(scale=100.0), slots=8, batch=4, eta=1),
        # a unit exponential with 2^22 slots and batch 1: the step time is 2^-22, so the law has
        # mass past eta times it up to the cap on eta (2^20 * 2^-22 = 1/4), where the cap applies
        _c(scipy.stats.expon(), slots=2**22, batch=1, eta=1),
    ),
    "refimpl.dispatch hajek_estimate": (_c([1.0, 3.0], [1.0, 0.5]),),
    "refimpl.dispatch horvitz_thompson_estimate": (_c([1.0, 3.0], [1.0, 0.5], n=4, k=2),),
    "refimpl.dispatch inclusion_probability": (_c([0.0, 0.5, 1.0], n=8, k=4),),
    "refimpl.dispatch inclusion_probability_pmf": (
        _c([Fraction(1, 4), Fraction(3, 4)], n=3, k=2),
        _c([0.25, 0.75], n=3, k=2),
    ),
    "refimpl.dispatch ipw_estimator_moments": (
        _c([Fraction(1, 4), Fraction(3, 4)], [1, 2], n=3, k=2, clip=Fraction(3, 2)),
        _c([0.25, 0.75], [1.0, 2.0], n=3, k=2, clip=1.5),
    ),
    "refimpl.dispatch ipw_weights": (_c([0.5, 1.0, 0.25], n=8, k=4, clip=1.5),),
    "refimpl.dispatch kaplan_meier": (_c([1, 2, 2, 3, 4], [1, 1, 0, 1, 0]),),
    "refimpl.dispatch length_bias": (
        _c([Fraction(1, 4), Fraction(3, 4)], n=3, k=2),
        _c(scipy.stats.expon(), n=3, k=2),
    ),
    "refimpl.dispatch selected_mean": (_c(scipy.stats.expon(), n=3, k=2),),
    "refimpl.dispatch selected_pmf": (
        _c([Fraction(1, 4), Fraction(3, 4)], n=3, k=2),
        _c([0.25, 0.75], n=3, k=2),
    ),
    # staleness
    "refimpl.staleness admission_capacity": (
        _c(eta=1, version=2, batch=4, accepted=5, running=3, max_concurrent=8),
    ),
    "refimpl.staleness decoupled_ppo_weights": (
        _c(_LP, _LQ, cap=5.0, mask=_MASK, lower=0.1, log_ratio_clamp=20.0),
        _c(_LP, _LQ, cap=1.5, above_cap="clip", nonfinite="one"),
    ),
    "refimpl.staleness effective_sample_size": (_c([1.0, 0.5, 0.0, 3.0]),),
    "refimpl.staleness masked_is_weights": (
        _c(_LP, _LQ, low=0.5, high=2.0, mask=_MASK, log_ratio_clamp=20.0),
        _c(_LP, _LQ, low=0.5, high=2.0, level="geometric", log_ratio_clamp=1.0, clamp_at="token"),
    ),
    "refimpl.staleness masking_diagnostics": (
        _c([0, 0, 1, 2, 3], [1, 1, 1, 0, 0], lengths=[10, 20, 30, 40, 50], length_bins=2),
    ),
    "refimpl.staleness over_masking_scenarios": (
        _c(np.random.default_rng(0), batch=16, trained_step=3, mismatch_std=0.01, tight_band=0.05),
    ),
    "refimpl.staleness policy_version": (_c([0.0, 1.0, 1.5, 2.0, 3.0], publish_times=[1.0, 2.0]),),
    "refimpl.staleness sample_staleness": (
        _c(5, np.array([[3, 3, 4, 4], [5, 5, 4, 4]]), mask=[[1, 1, 1, 0], [1, 1, 0, 0]]),
        _c(5, [[3, 3, 4, 4], [5, 5]], staleness_count="versions_spanned"),
    ),
    "refimpl.staleness staleness_decay": (_c([0, 1, 2], gamma=0.5),),
    "refimpl.staleness staleness_mask": (_c([0, 1, 2, 3], eta=1),),
    "refimpl.staleness truncated_is_weights": (
        _c(_LP, _LQ, cap=2.0, mask=_MASK, lower=0.1, log_ratio_clamp=20.0),
        _c(_LP, _LQ, cap=2.0, level="sequence", log_ratio_clamp=1.0, clamp_at="token"),
    ),
    "refimpl.staleness vtrace": (
        _c(
            [0.5, 0.25],
            [0.25, 0.0],
            [1.0, 0.5],
            [0.9, 0.8],
            [1.5, 0.5],
            lambda_=0.9,
            clip_rho_threshold=1.2,
            clip_pg_rho_threshold=1.1,
        ),
    ),
    "refimpl.staleness vtrace_td_error_and_advantage": (
        _c(
            [0.5, 0.25],
            [0.25, 0.0],
            [1.0, 0.5],
            [0.9, 0.8],
            [1.5, 0.5],
            lambda_=0.9,
            clip_rho_threshold=1.2,
            clip_pg_rho_threshold=1.1,
        ),
    ),
    # the framework settings (refimpl/staleness/frameworks.py, published as refimpl.frameworks)
    "refimpl.frameworks areal_staleness_bound": (_c(max_head_offpolicyness=2),),
    "refimpl.frameworks framework_staleness_bound": (
        _c(framework="areal", value=2),
        _c(framework="verl", value=8, setting="max_off_policy_threshold"),
        _c(framework="verl", value=0.5),
    ),
    "refimpl.frameworks skyrl_staleness_bound": (_c(max_staleness_steps=2),),
    "refimpl.frameworks trl_staleness_bound": (_c(max_staleness=2),),
    "refimpl.frameworks verl_off_policy_bound": (_c(max_off_policy_threshold=3),),
    "refimpl.frameworks verl_staleness_bound": (_c(staleness_threshold=0.5),),
    # effort
    "refimpl.effort adaptive_gap": (_c([0.5, 1.0], k0=0.005, b_min=0.0, tau=1.0, **_MIX),),
    "refimpl.effort budget_frontier": (_c([50.0, 150.0], **_MIX),),
    "refimpl.effort difficulty_mix": (_c(median=100.0, sigma=1.0, q_max=0.9, nodes=3),),
    "refimpl.effort effort_frontier": (
        _c([0.0, 1.0, 2.0], **_EFFORT),
        _c([1.0, 2.0], k0=0.005, b_min=0.0, tau=1.0, **_MIX),
    ),
    "refimpl.effort effort_penalty": (_c([0.5, 1.0, 2.0], k0=0.5, b_min=0.5, tau=1.0),),
    "refimpl.effort frontier_quality": (_c([0.0, 133.0], **_MIX),),
    "refimpl.effort optimal_length": (_c([0.0, 1.0, 2.0], **_EFFORT),),
    "refimpl.effort pareto_front": (_c([3.0, 1.0, 2.0, 2.0, 1.0], [0.9, 0.5, 0.5, 0.7, 0.5]),),
    "refimpl.effort saturating_quality": (_c([0.0, 100.0, 1e9], q_max=1.0, lam=100.0),),
    "refimpl.effort shaped_reward": (
        _c([1.0, 0.5], [100.0, 200.0], [0.0, 1.0], k0=0.002, b_min=0.0, tau=1.0, length_scale=2.0),
    ),
    "refimpl.effort train_conditioned_policy": (
        _c(
            q_max=1.0,
            lam=[25.0, 400.0],
            weights=[0.5, 0.5],
            k0=0.002,
            b_min=0.0,
            tau=1.0,
            b_max=3.0,
            rng=0,
            steps=2,
            batch=4,
            group=2,
            degree=2,
            feature_degree=1,
            learning_rate=0.01,
            success="expected",
            initial_spread=0.5,
        ),
    ),
    "refimpl.effort train_effort_policy": (
        _c(
            **_EFFORT,
            b_max=4.0,
            rng=0,
            steps=2,
            batch=4,
            group=2,
            degree=2,
            learning_rate=0.05,
            noise=0.1,
            initial_spread=0.5,
        ),
    ),
    # penalties
    "refimpl.penalties cosine_length_reward": (
        _c(
            [0, 500, 1000, 0, 1200],
            [True, True, True, False, False],
            max_length=1000,
            exceed_value=-2.0,
        ),
    ),
    "refimpl.penalties dapo_overlong_penalty": (
        _c([100, 800, 900, 1000, 1200], max_length=1000, cache_length=200, penalty_factor=0.5),
        _c([1200], max_length=1000, cache_length=200, floor=False),
    ),
    "refimpl.penalties kimi_length_reward": (
        _c([100, 200, 300, 150], [True, True, False, False], groups=[0, 0, 1, 1]),
        _c([100, 200, 300, 150], [True, True, False, False], scope="batch"),
    ),
    "refimpl.penalties l1_exact_reward": (
        _c([1000, 2000, 1000], [True, True, False], 1000, alpha=0.001),
    ),
    "refimpl.penalties l1_max_reward": (
        _c([1000, 2000, 3000, 500], [True, True, True, False], 2000, alpha=0.001, delta=0.25),
    ),
    # losses
    "refimpl.losses aggregate_loss": (
        _c([[1.0, 3.0, 2.0], [5.0, 99.0, 7.0]], _MASK, mode="seq_mean_token_mean"),
    ),
    "refimpl.losses aggregation_weights": (
        _c(np.array(_MASK), mode="token_sum_norm", constant=4),
        _c(np.array(_MASK), mode="token_mean", token_count=5),
    ),
    "refimpl.losses any_token_veto": (
        _c(_LP, _LQ, threshold=0.1, mask=_MASK, upper=10.0),
        _c(_LP, _LQ, threshold=None, mask=_MASK, upper=10.0),
    ),
    "refimpl.losses band_masked_pg_loss": (
        _c(_LP, _LQ, _ADV, eps_low=0.2, eps_high=0.28, log_ratio_clamp=20.0, mask=_MASK),
    ),
    "refimpl.losses cispo_loss": (
        _c(_LP, _LQ, _ADV, eps_high=0.28, eps_low=0.2, log_ratio_clamp=20.0, mask=_MASK),
    ),
    "refimpl.losses decoupled_ppo_loss": (
        _c(
            _LP,
            _LQ,
            _LQ,
            _ADV,
            eps_low=0.2,
            eps_high=0.28,
            dual_clip=3.0,
            cap=5.0,
            lower=0.1,
            mask=_MASK,
            cotangent=_MASK,
        ),
        _c(_LP, _LQ, _LP, _ADV, cap=1.5, above_cap="clip"),
        _c(_LP, _LQ, _LQ, _ADV, cap=2.0, lower=0.5, level="geometric", mask=_MASK),
        _c(_LP, _LQ, _LP, _ADV, cap=0.5, lower=0.1, level="max", metric="kl_k2", mask=_MASK),
        _c(_LP, _LQ, _LP, _ADV, cap=-0.5, lower=-1.0, metric="kl_k1"),
    ),
    "refimpl.losses reverse_kl_distillation_loss": (
        _c(_LP, _LQ, _LQ, mask=_MASK, cotangent=_MASK),
    ),
    "refimpl.losses divergence_gated_weights": (
        _c(_LP, _LQ, delta=0.1, divergence="binary_kl", level="sequence", prob_clamp=1e-6),
    ),
    "refimpl.losses dppo_loss": (
        _c(_LP, _LQ, _ADV, delta_low=0.2, delta_high=0.3, cap=5.0, log_ratio_clamp=20.0),
    ),
    "refimpl.losses gae_advantages": (
        _c([[0.0, 0.5, 1.0]], [[0.5, 0.25, 0.5]], gamma=0.9, lam=0.8, mask=[[1, 1, 0]]),
        _c([[0, 0, 1]], [[_HALF] * 3], gamma=1, lam=_HALF),
    ),
    "refimpl.losses gdpo_advantages": (
        _c(
            [[1.0, 0.0], [0.0, 0.5], [1.0, 1.0], [0.0, 1.0]],
            group=[0, 0, 1, 1],
            weights=[0.25, 0.75],
            eps=1e-6,
            whiten_eps=1e-8,
        ),
    ),
    "refimpl.losses gpg_advantages": (
        _c([1.0, 0.0, 0.5, 0.0], group=[0, 0, 1, 1], f_norm=2.0),
        _c([1.0, 0.0, 0.5, 0.0], group=[0, 0, 1, 1], alpha=0.5),
    ),
    "refimpl.losses maxrl_advantages": (_c([1.0, 0.0, 0.5, 0.0], group=[0, 0, 0, 0], eps=1e-6),),
    "refimpl.losses kl_penalized_rewards": (
        _c(_ADV, _LQ, beta=0.05, mask=_MASK, reward_clip=(-1.0, 1.0)),
        _c(_ADV, _LQ, beta=0.05, reward_clip=(-5.0, 5.0), reward_bias=-0.5, reward_scaling=2.0),
    ),
    "refimpl.losses proximal_logprobs": (
        _c(_LP, _LQ, [[2, 3, -1], [0, 4, 4]], current_version=4, method="loglinear"),
        _c(_LP, _LQ, [[2, 3, -1], [0, 4, 4]], current_version=4, method="linear", floor=1e-10),
        _c(_LP, _LQ, [[2, 3, -1], [0, 1, 1]], current_version=4, proximal_version=2),
    ),
    "refimpl.losses proximal_interpolation_weight": (
        _c([[2, 3, -1], [0, 1, 1]], current_version=4, proximal_version=3),
    ),
    "refimpl.losses rloo_kl_advantages": (
        _c(_ADV, _LP, _LQ, group=[0, 0], beta=0.05, mask=_MASK, reward_clip=(-1.0, 1.0)),
        _c(_ADV, _LP, _LQ, group=[0, 0], beta=0.05, normalize=True, eps=1e-4),
    ),
    "refimpl.losses adaptive_kl_coefficient": (
        _c(0.5, 0.11, target=0.1, horizon=10.0, n_steps=2, error_clip=0.2),
    ),
    "refimpl.losses optimal_value_estimate": (_c([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]], beta1=0.5),),
    "refimpl.losses optimal_advantage_regression_loss": (
        _c(_LP, _LQ, _ADV, beta2=0.5, mask=_MASK, cotangent=_MASK),
    ),
    "refimpl.losses nll_loss": (_c(_LP, mask=_MASK, cotangent=_MASK),),
    "refimpl.losses opo_advantages": (_c([1.0, 0.0, 0.5], group=[0, 0, 0], lengths=[1, 3, 2]),),
    "refimpl.losses optimal_token_baseline_advantages": (
        _c(
            [[0.0, 1.0], [0.5, 0.0]],
            [[-1.0, -2.0], [-0.5, -1.5]],
            [[0.25, 0.5], [0.75, 0.125]],
            group=[0, 0],
            mask=[[1, 1], [1, 0]],
            is_weights=[[1.0, 0.5], [2.0, 1.0]],
            eps=1e-6,
        ),
    ),
    "refimpl.losses passk_advantages": (_c([1.0, 0.0, 0.5, 2.0], group=[0, 0, 1, 1], eps=1e-6),),
    "refimpl.losses remax_advantages": (_c([1.0, 0.0], baselines=[0.5, 0.25]),),
    "refimpl.losses gmpo_loss": (_c(_LP, _LQ, _ADV, eps_low=0.4, eps_high=0.3, mask=_MASK),),
    "refimpl.losses grpo_advantages": (_c([1.0, 0.0, 0.5, 1.0], group=[0, 0, 1, 1], eps=1e-6),),
    "refimpl.losses cispo_sequence_loss": (
        _c(_LP, _LQ, _ADV, eps_high=0.28, eps_low=0.2, mask=_MASK, cotangent=_MASK),
    ),
    "refimpl.losses sapo_sequence_loss": (
        _c(_LP, _LQ, _ADV, tau_pos=1.0, tau_neg=1.05, mask=_MASK, cotangent=_MASK),
    ),
    "refimpl.losses high_entropy_mask": (
        _c([[0.1, 2.0, 0.5], [1.0, 3.0, 9.0]], top_fraction=0.5, mask=_MASK),
    ),
    "refimpl.losses vespo_loss": (
        _c(
            _LP,
            _LQ,
            _ADV,
            k_pos=2.0,
            lambda_pos=3.0,
            k_neg=3.0,
            lambda_neg=2.0,
            log_ratio_clamp=20.0,
            log_weight_range=(-18.0, 20.0),
            mask=_MASK,
            cotangent=_MASK,
        ),
    ),
    "refimpl.losses sequence_ppo_clip_loss": (
        _c(_LP, _LQ, _ADV, eps_low=0.2, eps_high=0.28, mask=_MASK, cotangent=_MASK),
    ),
    "refimpl.losses gspo_loss": (
        _c(_LP, _LQ, _ADV, eps_low=0.2, eps_high=0.3, log_ratio_cap=10.0, mask=_MASK),
    ),
    "refimpl.losses gspo_token_loss": (
        _c(
            _LP,
            _LQ,
            [[1.0, -1.0, 0.5], [0.5, 0.5, 0.5]],
            eps_low=0.2,
            eps_high=0.3,
            log_ratio_cap=10.0,
            mask=_MASK,
        ),
    ),
    "refimpl.losses importance_weighted_kl": (
        _c(_LP, _LQ, _LQ, estimator="k3", weight_cap=5.0, clamp=10.0, log_ratio_clamp=20.0),
    ),
    "refimpl.losses importance_weighted_pg_loss": (
        _c(_LP, _LQ, _ADV, cap=1.5, log_ratio_clamp=20.0, mask=_MASK),
    ),
    "refimpl.losses is_batch_normalize": (
        _c([[1.0, 3.0, 9.0], [2.0, 2.0, 9.0]], mask=[[1, 1, 0], [1, 1, 0]]),
    ),
    "refimpl.losses kl_penalty": (
        _c(_LP, _LQ, estimator="k3", clamp=10.0, log_ratio_clamp=20.0, mask=_MASK),
    ),
    "refimpl.losses length_weight": (
        _c([1, 4], mode="token_mean", sequence_count=2, token_count=5),
        _c([1, 4], mode="token_sum_norm", sequence_count=2, constant=4.0),
    ),
    "refimpl.losses log_ratio_penalty_loss": (_c(_LP, _LQ, _ADV, tau=0.5, mask=_MASK),),
    "refimpl.losses logprob_mismatch": (
        _c(
            _Z,
            [[0, 1]],
            sampler=LogprobSemantics(top_k=2),
            trainer=LogprobSemantics(),
            tolerance=1e-3,
        ),
    ),
    "refimpl.losses m2po_mask": (_c(_LP, _LQ, tau=0.02, mask=_MASK),),
    "refimpl.losses off_policy_sequence_mask": (_c(_LP, _LQ, _ADV, delta=0.5, mask=_MASK),),
    "refimpl.losses partition_gap": (
        _c(np.array(_MASK), splits=[[[0], [1]]], mode="token_mean", rule="trl_bnpo"),
    ),
    "refimpl.losses ppo_clip_loss": (
        _c(
            _LP,
            _LQ,
            _ADV,
            eps_low=0.2,
            eps_high=0.28,
            dual_clip=3.0,
            log_ratio_clamp=20.0,
            mask=_MASK,
        ),
    ),
    "refimpl.losses reinforce_loss": (_c(_LP, _ADV, mask=_MASK),),
    "refimpl.losses reinforce_pp_advantages": (
        _c([1.0, 0.0, 0.5, 1.0], group=[0, 0, 1, 1], eps=1e-6),
    ),
    "refimpl.losses rloo_advantages": (_c([1.0, 0.0, 0.5, 5.0], group=[0, 0, 0, 1]),),
    "refimpl.losses rloo_normalized_advantages": (
        _c([1.0, 0.0, 0.5, 5.0], group=[0, 0, 1, 1], eps=1e-4, std="sample"),
    ),
    "refimpl.losses sapo_loss": (
        _c(_LP, _LQ, _ADV, tau_pos=1.0, tau_neg=1.05, log_ratio_clamp=20.0, mask=_MASK),
    ),
    "refimpl.losses divergence_rejection_mask": (
        _c(_LP, _LQ, estimator="k1", reduce="mean", upper=0.5, lower=-0.5, mask=_MASK),
        _c(_LP, _LQ, estimator="k3", reduce="token", upper=0.1, log_ratio_clamp=20.0),
    ),
    "refimpl.losses sequence_divergence": (
        _c(_LP, _LQ, estimator="k3", reduce="max", mask=_MASK, log_ratio_clamp=20.0),
    ),
    "refimpl.losses split_weights": (
        _c(np.array(_MASK), splits=[[[0], [1]]], mode="token_mean", rule="verl"),
    ),
    "refimpl.losses token_entropy": (_c(_Z, temperature=0.9, top_k=3, top_p=0.95, mask=[[1, 1]]),),
    "refimpl.losses token_logprobs": (
        _c(_Z, [[0, 1]], temperature=0.9, top_k=3, top_p=0.95, mask=[[1, 1]]),
    ),
    "refimpl.losses token_logprobs_grad": (
        _c(
            _Z,
            [[0, 1]],
            temperature=0.9,
            top_k=3,
            top_p=0.95,
            cotangent=[[1.0, 0.5]],
            mask=[[1, 1]],
        ),
    ),
    "refimpl.losses token_sum_pi_squared": (_c(_Z, temperature=0.9, mask=[[1, 1]]),),
    "refimpl.losses token_sum_pi_squared_grad": (
        _c(_Z, temperature=0.9, cotangent=[[1.0, 0.5]], mask=[[1, 1]]),
    ),
}


#: Rules the functions check by hand (``if ...: raise invalid(name, ...)``), which the builders
#: cannot record: declared here, by function (every valid call that passes their arguments) or by
#: call (``"<function> #<i>"``: a cap of one evaluation path), and tested at their boundaries like
#: the recorded ones. The caps: exact (Fraction) evaluation stops at n = 2000, float evaluation of
#: a pmf at n = 2^53, the quadrature over a continuous law at n = 10^7, the fluid model at
#: eta = 2^20 when the law has mass past eta times the step time.
_K_LE_N = hand_rule("ordered", "k", names=("k", "n"))
_TOP = (
    hand_rule("int", "top_k", low=1),
    hand_rule("int", "top_k", high=4),  # the vocabulary of the valid calls' logits
    hand_rule("real", "top_p", low=0.0, low_open=True, high=1.0),
)
_EXACT_N = hand_rule("int", "n", high=2000)
_FLOAT_N = hand_rule("int", "n", high=2**53)
_QUADRATURE_N = hand_rule("int", "n", high=10**7)
HAND_RULES: dict[str, tuple[Rule, ...]] = {
    **{
        f"refimpl.dispatch {name}": (_K_LE_N,)
        for name in (
            "clipped_ipw_estimate",
            "horvitz_thompson_estimate",
            "inclusion_probability",
            "inclusion_probability_pmf",
            "ipw_estimator_moments",
            "ipw_weights",
            "length_bias",
            "selected_mean",
            "selected_pmf",
        )
    },
    **{
        f"refimpl.dispatch {name} #0": (_EXACT_N,)
        for name in (
            "inclusion_probability_pmf",
            "ipw_estimator_moments",
            "length_bias",
            "selected_pmf",
        )
    },
    "refimpl.dispatch inclusion_probability #0": (_FLOAT_N,),
    "refimpl.dispatch inclusion_probability_pmf #1": (_FLOAT_N,),
    "refimpl.dispatch selected_pmf #1": (_FLOAT_N,),
    "refimpl.dispatch length_bias #1": (_QUADRATURE_N,),
    "refimpl.dispatch selected_mean #0": (_QUADRATURE_N,),
    "refimpl.dispatch fluid_steady_state #1": (hand_rule("int", "eta", high=2**20),),
    # censoring: finished rollouts (1 for the estimate, 2 unbiased) and a positive total time
    "refimpl.dispatch exponential_rate_mle": (hand_rule("sum", "durations", low=0),),
    "refimpl.dispatch exponential_rate_mle #0": (hand_rule("count", "observed", low=1),),
    "refimpl.dispatch exponential_rate_mle #1": (hand_rule("count", "observed", low=2),),
    "refimpl.staleness masked_is_weights": (hand_rule("real", "high", low=1.0),),
    "refimpl.effort effort_penalty": (hand_rule("range", "b", low=0.5),),  # b >= b_min = 0.5
    "refimpl.losses aggregation_weights": (hand_rule("int", "token_count", low=5),),  # 5 tokens
    "refimpl.losses token_entropy": _TOP,
    "refimpl.losses token_logprobs": _TOP,
    "refimpl.losses token_logprobs_grad": _TOP,
    "refimpl.penalties dapo_overlong_penalty": (
        hand_rule("ordered", "cache_length", names=("cache_length", "max_length")),
    ),
    "refimpl.penalties cosine_length_reward": (
        hand_rule("ordered", "min_value_wrong", names=("min_value_wrong", "max_value_wrong")),
        hand_rule("ordered", "min_value_correct", names=("min_value_correct", "max_value_correct")),
    ),
}
