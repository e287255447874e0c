"""Bad calls and the messages they give: one table per module.

Each case is ``(call, exception type, regex the message must match)``. Every message names the
parameter, the rule, the value received and the fix (see ``refimpl/_validation.py``). The tables are in
separate sections so that each module's owner edits only its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest


class Case(NamedTuple):
    id: str
    call: Callable[[], Any]
    error: type[Exception]
    match: str


# ---------------------------------------------------------------------------------------------
# refimpl.dispatch
# ---------------------------------------------------------------------------------------------


def _dispatch_cases() -> list[Case]:
    from fractions import Fraction

    import numpy as np
    import scipy.stats

    import refimpl as r

    expon = scipy.stats.expon(scale=100.0)
    half = [0.5, 0.5]
    return [
        Case(
            "dispatch-n-zero",
            lambda: r.inclusion_probability([0.5], n=0, k=1),
            ValueError,
            r"n must be >= 1 \(number of rollouts launched at once\); got n=0",
        ),
        Case(
            "dispatch-n-float",
            lambda: r.inclusion_probability([0.5], n=2.5, k=1),  # type: ignore[arg-type]
            TypeError,
            r"n must be an integer; got n=2.5",
        ),
        Case(
            "dispatch-k-zero",
            lambda: r.inclusion_probability([0.5], n=4, k=0),
            ValueError,
            r"k must be >= 1 .*got k=0",
        ),
        Case(
            "dispatch-k-above-n",
            lambda: r.inclusion_probability_pmf(half, n=4, k=5),
            ValueError,
            r"k must be <= n=4 \(the batch is the first k of the n rollouts launched\); got k=5\. Pass k <= n",
        ),
        Case(
            "dispatch-cdf-above-one",
            lambda: r.inclusion_probability([0.5, 1.5], n=4, k=2),
            ValueError,
            r"cdf must lie in \[0, 1\] \(CDF values F\(length\)\).*Entry 1 is (np\.float64\()?1\.5",
        ),
        Case(
            "dispatch-cdf-negative",
            lambda: r.inclusion_probability([-0.1], n=4, k=2),
            ValueError,
            r"cdf must lie in \[0, 1\]",
        ),
        Case(
            "dispatch-cdf-nan",
            lambda: r.inclusion_probability([0.5, float("nan")], n=4, k=2),
            ValueError,
            r"cdf must contain only finite values .*first at flat index 1",
        ),
        Case(
            "dispatch-cdf-text",
            lambda: r.inclusion_probability(["a"], n=4, k=2),
            TypeError,
            r"cdf must be an array of real numbers",
        ),
        Case(
            "dispatch-pmf-negative",
            lambda: r.inclusion_probability_pmf([1.5, -0.5], n=2, k=1),
            ValueError,
            r"pmf must be non-negative.*Entry 1 is (np\.float64\()?-0\.5",
        ),
        Case(
            "dispatch-pmf-sum",
            lambda: r.selected_pmf([0.5, 0.4], n=2, k=1),
            ValueError,
            r"pmf must sum to 1 \(within 1e-9\).*It sums to 0.9; divide every entry by the total",
        ),
        Case(
            "dispatch-pmf-sum-exact",
            lambda: r.selected_pmf([Fraction(1, 2), Fraction(1, 3)], n=2, k=1),
            ValueError,
            r"pmf must sum to 1 exactly \(Fraction mode\).*It sums to 5/6",
        ),
        Case(
            "dispatch-pmf-negative-exact",
            lambda: r.selected_pmf([Fraction(3, 2), Fraction(-1, 2)], n=2, k=1),
            ValueError,
            r"pmf must be non-negative.*Entry 1 is -1/2",
        ),
        Case(
            "dispatch-pmf-empty",
            lambda: r.inclusion_probability_pmf([], n=2, k=1),
            ValueError,
            r"pmf must be non-empty",
        ),
        Case(
            "dispatch-pmf-inf",
            lambda: r.inclusion_probability_pmf([np.inf, 0.5], n=2, k=1),
            ValueError,
            r"pmf must contain only finite values",
        ),
        Case(
            "dispatch-pmf-2d",
            lambda: r.inclusion_probability_pmf([[1.0]], n=2, k=1),
            ValueError,
            r"pmf must be 1-D",
        ),
        Case(
            "dispatch-law-not-a-law",
            lambda: r.length_bias("lognormal", n=2, k=1),
            TypeError,
            r"law must be a pmf over lengths 1..M or a frozen scipy.stats distribution",
        ),
        Case(
            "dispatch-dist-unfrozen",
            lambda: r.selected_mean(scipy.stats.expon, n=2, k=1),
            TypeError,
            r"dist must be a frozen scipy.stats continuous distribution.*(Pass e.g.|Give the parameters)",
        ),
        Case(
            "dispatch-dist-number",
            lambda: r.expected_max(3.0, n=2),
            TypeError,
            r"dist must be a frozen scipy.stats continuous distribution",
        ),
        Case(
            "dispatch-dist-negative-support",
            lambda: r.async_speedup(scipy.stats.norm(), n=2),
            ValueError,
            r"dist must be supported on \[0, inf\) with a positive mean",
        ),
        Case(
            "dispatch-dist-infinite-mean",
            lambda: r.expected_max(scipy.stats.pareto(b=1.0), n=2),
            ValueError,
            r"dist must have a finite mean",
        ),
        Case(
            "dispatch-max-n-zero", lambda: r.expected_max(expon, n=0), ValueError, r"n must be >= 1"
        ),
        Case(
            "dispatch-pi-zero",
            lambda: r.ipw_weights([0.5, 0.0], n=4, k=2),
            ValueError,
            r"pi must be > 0 \(a rollout that is never trained has no finite inverse-propensity weight\).*Entry 1 is 0",
        ),
        Case(
            "dispatch-pi-above-one",
            lambda: r.ipw_weights([1.5], n=4, k=2),
            ValueError,
            r"pi must lie in \[0, 1\] \(inclusion probabilities\)",
        ),
        Case(
            "dispatch-clip-zero",
            lambda: r.ipw_weights([0.5], n=4, k=2, clip=0.0),
            ValueError,
            r"clip must be > 0 \(upper bound on the weights\); got clip=0.0",
        ),
        Case(
            "dispatch-clip-nan",
            lambda: r.clipped_ipw_estimate([1.0], [0.5], n=2, k=1, clip=float("nan")),
            ValueError,
            r"clip must be finite",
        ),
        Case(
            "dispatch-batch-axis",
            lambda: r.horvitz_thompson_estimate([1.0], [0.5], n=4, k=2),
            ValueError,
            r"values must have k=2 entries along its last axis",
        ),
        Case(
            "dispatch-batch-shape",
            lambda: r.hajek_estimate([1.0, 2.0], [0.5]),
            ValueError,
            r"values and pi must have the same shape",
        ),
        Case(
            "dispatch-moments-g-length",
            lambda: r.ipw_estimator_moments(half, [1.0], n=2, k=1),
            ValueError,
            r"g must have one value per support point \(2, like pmf\)",
        ),
        Case(
            "dispatch-moments-too-many",
            lambda: r.ipw_estimator_moments(np.full(40, 1 / 40), np.arange(40.0), n=60, k=50),
            ValueError,
            r"k must give at most 200000 batch compositions",
        ),
        Case(
            "dispatch-km-observed",
            lambda: r.kaplan_meier([1.0, 2.0], [1, 2]),
            ValueError,
            r"observed must be 0/1 or bool \(1 = finished, 0 = censored",
        ),
        Case(
            "dispatch-km-negative",
            lambda: r.kaplan_meier([-1.0, 2.0], [1, 1]),
            ValueError,
            r"durations must be >= 0 \(lengths\).*Entry 0 is -1.0",
        ),
        Case(
            "dispatch-km-shape",
            lambda: r.kaplan_meier([1.0, 2.0], [1]),
            ValueError,
            r"durations and observed must have the same shape",
        ),
        Case(
            "dispatch-km-nan",
            lambda: r.kaplan_meier([1.0, float("nan")], [1, 1]),
            ValueError,
            r"durations must contain only finite values",
        ),
        Case(
            "dispatch-mle-unbiased-one-event",
            lambda: r.exponential_rate_mle([1.0, 2.0], [1, 0], unbiased=True),
            ValueError,
            r"observed must contain at least 2 finished rollouts for the unbiased estimate",
        ),
        Case(
            "dispatch-eta-negative",
            lambda: r.fluid_keep_probability([1.0], step_time=1.0, eta=-1),
            ValueError,
            r"eta must be >= 0 \(staleness bound in versions\); got eta=-1",
        ),
        Case(
            "dispatch-eta-float",
            lambda: r.fluid_steady_state(expon, slots=4, batch=2, eta=0.5),  # type: ignore[arg-type]
            TypeError,
            r"eta must be an integer; got eta=0.5",
        ),
        Case(
            "dispatch-step-time-zero",
            lambda: r.fluid_keep_probability([1.0], step_time=0.0, eta=0),
            ValueError,
            r"step_time must be > 0 \(time between versions\); got step_time=0.0",
        ),
        Case(
            "dispatch-step-time-inf",
            lambda: r.fluid_keep_probability([1.0], step_time=float("inf"), eta=0),
            ValueError,
            r"step_time must be finite",
        ),
        Case(
            "dispatch-slots-zero",
            lambda: r.fluid_steady_state(expon, slots=0, batch=2),
            ValueError,
            r"slots must be >= 1 \(number of generation slots\)",
        ),
        Case(
            "dispatch-fluid-not-a-law",
            lambda: r.fluid_steady_state([0.5, 0.5], slots=4, batch=2),
            TypeError,
            r"dist must be a frozen scipy.stats continuous distribution",
        ),
        Case(
            "dispatch-hajek-empty-batch",
            lambda: r.hajek_estimate([], []),
            ValueError,
            r"values must hold at least one batch member",
        ),
        Case(
            "dispatch-cdf-as-strings",
            lambda: r.inclusion_probability(["0.5"], n=8, k=4),
            TypeError,
            r"cdf must be an array of real numbers; got cdf=.*'0.5'.* Pass cdf as a numeric array, not text",
        ),
        Case(
            "dispatch-unfrozen-family",
            lambda: r.expected_max(scipy.stats.expon, n=3),
            TypeError,
            r"dist must be a frozen scipy.stats continuous distribution \(parameters given\)",
        ),
    ]


DISPATCH_CASES: list[Case] = _dispatch_cases()


# ---------------------------------------------------------------------------------------------
# refimpl.staleness
# ---------------------------------------------------------------------------------------------


def _staleness_cases() -> list[Case]:
    import numpy as np

    import refimpl.staleness as st
    from refimpl import frameworks as fw

    z23, z32 = np.zeros((2, 3)), np.zeros((3, 2))
    nan = np.array([0.0, float("nan")])
    one = np.ones(3)
    # Wrongly typed arguments, deliberately (typed Any so that mypy lets the bad call through).
    bad_eta: Any = 0.5
    bad_level: Any = "tokens"
    bad_rng: Any = 0
    return [
        Case(
            "st-negative-staleness",
            lambda: st.staleness_mask([0, -1], eta=0),
            ValueError,
            r"s must be >= 0.*got s=.*-1",
        ),
        Case(
            "st-negative-staleness-decay",
            lambda: st.staleness_decay([-2], gamma=0.5),
            ValueError,
            r"s must be >= 0",
        ),
        Case(
            "st-fractional-staleness",
            lambda: st.staleness_mask([0.5], eta=0),
            ValueError,
            r"s must hold whole numbers",
        ),
        Case(
            "st-negative-eta",
            lambda: st.staleness_mask([0], eta=-1),
            ValueError,
            r"eta must be >= 0",
        ),
        Case(
            "st-float-eta",
            lambda: st.staleness_mask([0], eta=bad_eta),
            TypeError,
            r"eta must be an integer",
        ),
        Case(
            "st-version-newer-than-step",
            lambda: st.sample_staleness(3, [[2, 4]]),
            ValueError,
            r"token_versions must be <= trained_step.*version 4 > trained_step 3",
        ),
        Case(
            "st-negative-version",
            lambda: st.sample_staleness(3, [-1, 2]),
            ValueError,
            r"token_versions must be >= 0",
        ),
        Case(
            "st-fractional-version",
            lambda: st.sample_staleness(3, [[1, 2], [2, 2.5]]),
            ValueError,
            r"(?s)token_versions must hold whole numbers.*Sample 1, token 1 has version 2.5",
        ),
        Case(
            "st-ragged-row-not-1d",
            lambda: st.sample_staleness(3, [[1, 2], [[2, 2]]]),
            ValueError,
            r"token_versions\[1\] must be 1-D",
        ),
        Case(
            "st-trained-step-shape",
            lambda: st.sample_staleness([3, 3], [1, 2, 3]),
            ValueError,
            r"trained_step.shape=\(2,\) and token_versions.shape=\(3, 1\)",
        ),
        Case(
            "st-trained-step-type",
            lambda: st.sample_staleness(2.5, [1]),
            TypeError,
            r"trained_step must be an integer",
        ),
        Case(
            "st-empty-sample",
            lambda: st.sample_staleness(3, z23, mask=np.zeros((2, 3))),
            ValueError,
            r"mask must leave at least one valid token",
        ),
        Case(
            "st-shape-mismatch-tis",
            lambda: st.truncated_is_weights(z23, z32, cap=2.0),
            ValueError,
            r"logp_target.shape=\(2, 3\) and logp_behavior.shape=\(3, 2\)",
        ),
        Case(
            "st-shape-mismatch-mask",
            lambda: st.masked_is_weights(z23, z23, low=0.5, high=2.0, mask=z32),
            ValueError,
            r"mask.shape=\(3, 2\) and logp_target.shape=\(2, 3\)",
        ),
        Case(
            "st-shape-mismatch-decoupled",
            lambda: st.decoupled_ppo_weights(z23, z32),
            ValueError,
            r"logp_prox.shape=\(2, 3\) and logp_behavior.shape=\(3, 2\)",
        ),
        Case(
            "st-shape-mismatch-vtrace",
            lambda: st.vtrace(one, one, one, one, np.ones(2)),
            ValueError,
            r"v_tm1.shape=\(3,\) and rho_tm1.shape=\(2,\)",
        ),
        Case(
            "st-shape-mismatch-diagnostics",
            lambda: st.masking_diagnostics([0, 1], [1.0]),
            ValueError,
            r"s.shape=\(2,\) and w.shape=\(1,\)",
        ),
        Case(
            "st-cap-zero",
            lambda: st.truncated_is_weights(one, one, cap=0.0),
            ValueError,
            r"cap must be >= 1.*got cap=0.0",
        ),
        Case(
            "st-cap-negative",
            lambda: st.truncated_is_weights(one, one, cap=-2.0),
            ValueError,
            r"cap must be >= 1",
        ),
        Case(
            "st-decoupled-cap-zero",
            lambda: st.decoupled_ppo_weights(one, one, cap=0.0),
            ValueError,
            r"cap must be >= 1",
        ),
        Case(
            "st-vtrace-clip-zero",
            lambda: st.vtrace(one, one, one, one, one, clip_rho_threshold=0.0),
            ValueError,
            r"clip_rho_threshold must be > 0",
        ),
        Case(
            "st-low-above-high",
            lambda: st.masked_is_weights(one, one, low=0.9, high=0.5),
            ValueError,
            r"low must be <= high.*low=0.9 and high=0.5",
        ),
        Case(
            "st-high-below-one",
            lambda: st.masked_is_weights(one, one, low=0.2, high=0.5),
            ValueError,
            r"high must be >= 1",
        ),
        Case(
            "st-nan-logp-target",
            lambda: st.truncated_is_weights(nan, nan * 0, cap=2.0),
            ValueError,
            r"logp_target must contain only finite values",
        ),
        Case(
            "st-nan-logp-behavior",
            lambda: st.masked_is_weights(np.zeros(2), nan, low=0.5, high=2.0),
            ValueError,
            r"logp_behavior must contain only finite values.*flat index 1",
        ),
        Case(
            "st-nan-logp-prox",
            lambda: st.decoupled_ppo_weights(nan, np.zeros(2)),
            ValueError,
            r"logp_prox must contain only finite values",
        ),
        Case(
            "st-gamma-zero",
            lambda: st.staleness_decay([1], gamma=0.0),
            ValueError,
            r"gamma must be > 0",
        ),
        Case(
            "st-gamma-above-one",
            lambda: st.staleness_decay([1], gamma=1.5),
            ValueError,
            r"gamma must be <= 1",
        ),
        Case(
            "st-gamma-negative",
            lambda: st.staleness_decay([1], gamma=-0.5),
            ValueError,
            r"gamma must be > 0",
        ),
        Case(
            "st-unknown-level",
            lambda: st.truncated_is_weights(one, one, cap=2.0, level=bad_level),
            ValueError,
            r"level must be one of",
        ),
        Case(
            "st-mask-not-binary",
            lambda: st.truncated_is_weights(one, one, cap=2.0, mask=[1, 0.5, 1]),
            ValueError,
            r"mask must hold only 0 and 1",
        ),
        Case(
            "st-decoupled-overflow",
            lambda: st.decoupled_ppo_weights([800.0], [0.0]),
            ValueError,
            r"without a cap.*pass cap=",
        ),
        Case(
            "st-vtrace-discount",
            lambda: st.vtrace(one, one, one, one * 2, one),
            ValueError,
            r"discount_t must lie in \[0, 1\]",
        ),
        Case(
            "st-vtrace-negative-rho",
            lambda: st.vtrace(one, one, one, one, -one),
            ValueError,
            r"rho_tm1 must be >= 0.*log-ratios",
        ),
        Case(
            "st-vtrace-lambda",
            lambda: st.vtrace(one, one, one, one, one, lambda_=1.5),
            ValueError,
            r"lambda_ must lie in \[0, 1\]",
        ),
        Case(
            "st-ess-negative",
            lambda: st.effective_sample_size([1.0, -1.0]),
            ValueError,
            r"w must be >= 0",
        ),
        Case(
            "st-ess-empty",
            lambda: st.effective_sample_size([]),
            ValueError,
            r"w must hold at least one weight",
        ),
        Case(
            "st-admission-batch",
            lambda: st.admission_capacity(
                eta=0, version=0, batch=0, accepted=0, running=0, max_concurrent=1
            ),
            ValueError,
            r"batch must be >= 1",
        ),
        Case(
            "st-policy-version-unsorted",
            lambda: st.policy_version([1.0], publish_times=[2.0, 1.0]),
            ValueError,
            r"publish_times must be non-decreasing",
        ),
        Case(
            "st-rng-type",
            lambda: st.over_masking_scenarios(bad_rng),
            TypeError,
            r"rng must be a numpy.random.Generator",
        ),
        Case(
            "fw-unknown-framework",
            lambda: fw.framework_staleness_bound(framework="openrlhf", value=1),
            ValueError,
            r"framework must be one of",
        ),
        Case(
            "fw-areal-negative",
            lambda: fw.areal_staleness_bound(max_head_offpolicyness=-1),
            ValueError,
            r"max_head_offpolicyness must be >= 0",
        ),
        Case(
            "fw-verl-negative",
            lambda: fw.verl_staleness_bound(staleness_threshold=-0.1),
            ValueError,
            r"staleness_threshold must be >= 0",
        ),
    ]


STALENESS_CASES: list[Case] = _staleness_cases()


# ---------------------------------------------------------------------------------------------
# refimpl.effort and refimpl.penalties
# ---------------------------------------------------------------------------------------------


def _as_any(value: Any) -> Any:
    """A deliberately ill-typed argument, hidden from mypy."""
    return value


def _effort_cases() -> list[Case]:
    import numpy as np

    import refimpl as r

    pen = {"k0": 0.01, "b_min": 0.0, "tau": 1.0}
    mod = {"q_max": 1.0, "lam": 100.0, **pen}
    return [
        Case(
            "effort_penalty-b-below-b_min",
            lambda: r.effort_penalty([1.0, -0.5], **pen),
            ValueError,
            r"b must be >= b_min=0\.0.*Entry 1 is -0\.5",
        ),
        Case(
            "effort_penalty-tau-zero",
            lambda: r.effort_penalty(1.0, k0=0.01, b_min=0.0, tau=0.0),
            ValueError,
            r"tau must be > 0 \(decay length in effort units\); got tau=0\.0",
        ),
        Case(
            "effort_penalty-tau-negative",
            lambda: r.effort_penalty(1.0, k0=0.01, b_min=0.0, tau=-1.0),
            ValueError,
            r"tau must be > 0",
        ),
        Case(
            "effort_penalty-k0-negative",
            lambda: r.effort_penalty(1.0, k0=-0.1, b_min=0.0, tau=1.0),
            ValueError,
            r"k0 must be >= 0.*got k0=-0\.1",
        ),
        Case(
            "effort_penalty-b-nan",
            lambda: r.effort_penalty([0.0, float("nan")], **pen),
            ValueError,
            r"b must contain only finite values.*index 1",
        ),
        Case(
            "effort_penalty-b-inf",
            lambda: r.effort_penalty(float("inf"), **pen),
            ValueError,
            r"b must contain only finite values",
        ),
        Case(
            "effort_penalty-tau-inf",
            lambda: r.effort_penalty(1.0, k0=0.01, b_min=0.0, tau=float("inf")),
            ValueError,
            r"tau must be finite",
        ),
        Case(
            "effort_penalty-b_min-nan",
            lambda: r.effort_penalty(1.0, k0=0.01, b_min=float("nan"), tau=1.0),
            ValueError,
            r"b_min must be finite",
        ),
        Case(
            "effort_penalty-b-text",
            lambda: r.effort_penalty("high", **pen),
            TypeError,
            r"b must be an array of real numbers",
        ),
        Case(
            "effort_penalty-k0-text",
            lambda: r.effort_penalty(1.0, k0=_as_any("0.1"), b_min=0.0, tau=1.0),
            TypeError,
            r"k0 must be a real number",
        ),
        Case(
            "shaped_reward-shape-mismatch",
            lambda: r.shaped_reward([1.0, 1.0], [1.0, 2.0, 3.0], 0.0, **pen),
            ValueError,
            r"quality and length must have the same shape",
        ),
        Case(
            "shaped_reward-b-shape",
            lambda: r.shaped_reward([1.0, 1.0], [1.0, 2.0], [0.0, 1.0, 2.0], **pen),
            ValueError,
            r"b must be a scalar or have the shape of quality",
        ),
        Case(
            "shaped_reward-negative-length",
            lambda: r.shaped_reward([1.0], [-3.0], 0.0, **pen),
            ValueError,
            r"length must be >= 0",
        ),
        Case(
            "shaped_reward-length_scale-zero",
            lambda: r.shaped_reward([1.0], [3.0], 0.0, length_scale=0.0, **pen),
            ValueError,
            r"length_scale must be > 0",
        ),
        Case(
            "shaped_reward-quality-nan",
            lambda: r.shaped_reward([np.nan], [3.0], 0.0, **pen),
            ValueError,
            r"quality must contain only finite values",
        ),
        Case(
            "shaped_reward-overflow",
            lambda: r.shaped_reward([1.0], [1e300], 0.0, k0=1e300, b_min=0.0, tau=1.0),
            ValueError,
            r"length must give a finite shaped reward",
        ),
        Case(
            "saturating_quality-lam-zero",
            lambda: r.saturating_quality([1.0], q_max=1.0, lam=0.0),
            ValueError,
            r"lam must be > 0",
        ),
        Case(
            "saturating_quality-negative-length",
            lambda: r.saturating_quality([-1.0], q_max=1.0, lam=1.0),
            ValueError,
            r"length must be >= 0",
        ),
        Case(
            "optimal_length-k0-zero",
            lambda: r.optimal_length(0.0, q_max=1.0, lam=1.0, k0=0.0, b_min=0.0, tau=1.0),
            ValueError,
            r"k0 must be > 0 for an optimal length",
        ),
        Case(
            "optimal_length-q_max-zero",
            lambda: r.optimal_length(0.0, q_max=0.0, lam=1.0, k0=0.1, b_min=0.0, tau=1.0),
            ValueError,
            r"q_max must be > 0",
        ),
        Case(
            "optimal_length-b-below-b_min",
            lambda: r.optimal_length(-1.0, **mod),
            ValueError,
            r"b must be >= b_min",
        ),
        Case(
            "optimal_length-overflow",
            lambda: r.optimal_length(1e300, q_max=1.0, lam=1e10, k0=0.1, b_min=0.0, tau=1e-10),
            ValueError,
            r"b must give a finite optimal length",
        ),
        Case(
            "effort_frontier-tau-zero",
            lambda: r.effort_frontier(0.0, q_max=1.0, lam=1.0, k0=0.1, b_min=0.0, tau=0.0),
            ValueError,
            r"tau must be > 0",
        ),
        Case(
            "pareto_front-shape-mismatch",
            lambda: r.pareto_front([1.0, 2.0], [1.0]),
            ValueError,
            r"cost and quality must have the same shape",
        ),
        Case(
            "pareto_front-2d",
            lambda: r.pareto_front([[1.0]], [[1.0]]),
            ValueError,
            r"cost must be 1-D",
        ),
        Case(
            "pareto_front-nan",
            lambda: r.pareto_front([1.0, 2.0], [1.0, np.nan]),
            ValueError,
            r"quality must contain only finite values",
        ),
        # published penalties
        Case(
            "dapo-cache-above-max",
            lambda: r.dapo_overlong_penalty([1.0], max_length=100, cache_length=200),
            ValueError,
            r"cache_length must be <= max_length=100\.0",
        ),
        Case(
            "dapo-cache-zero",
            lambda: r.dapo_overlong_penalty([1.0], max_length=100, cache_length=0),
            ValueError,
            r"cache_length must be > 0",
        ),
        Case(
            "dapo-max-negative",
            lambda: r.dapo_overlong_penalty([1.0], max_length=-5, cache_length=1),
            ValueError,
            r"max_length must be > 0",
        ),
        Case(
            "dapo-negative-length",
            lambda: r.dapo_overlong_penalty([-1.0], max_length=100, cache_length=10),
            ValueError,
            r"lengths must be >= 0 \(token counts\)",
        ),
        Case(
            "dapo-floor-not-bool",
            lambda: r.dapo_overlong_penalty(
                [1.0], max_length=100, cache_length=10, floor=_as_any("no")
            ),
            TypeError,
            r"floor must be a bool",
        ),
        Case(
            "dapo-negative-factor",
            lambda: r.dapo_overlong_penalty(
                [1.0], max_length=100, cache_length=10, penalty_factor=-1.0
            ),
            ValueError,
            r"penalty_factor must be >= 0",
        ),
        Case(
            "kimi-shape-mismatch",
            lambda: r.kimi_length_reward([1.0, 2.0], [True]),
            ValueError,
            r"lengths and correct must have the same shape",
        ),
        Case(
            "kimi-correct-not-binary",
            lambda: r.kimi_length_reward([1.0, 2.0], [1, 2]),
            ValueError,
            r"correct must contain only booleans or 0/1",
        ),
        Case(
            "kimi-length-nan",
            lambda: r.kimi_length_reward([1.0, np.nan], [True, True]),
            ValueError,
            r"lengths must contain only finite values",
        ),
        Case(
            "kimi-bad-scope",
            lambda: r.kimi_length_reward([1.0, 2.0], [True, True], scope=_as_any("group")),
            ValueError,
            r"scope must be \"problem\" or \"batch\"",
        ),
        Case(
            "kimi-groups-shape",
            lambda: r.kimi_length_reward([1.0, 2.0], [True, True], groups=[0]),
            ValueError,
            r"groups must have the shape of lengths",
        ),
        Case(
            "kimi-groups-2d",
            lambda: r.kimi_length_reward([[1.0, 2.0]], [[True, True]], groups=[0, 0]),
            ValueError,
            r"groups must be given only with 1-D lengths",
        ),
        Case(
            "cosine-min-above-max-correct",
            lambda: r.cosine_length_reward(
                [1.0], [True], max_length=10, min_value_correct=2.0, max_value_correct=1.0
            ),
            ValueError,
            r"min_value_correct must be <= max_value_correct=1\.0",
        ),
        Case(
            "cosine-min-above-max-wrong",
            lambda: r.cosine_length_reward(
                [1.0], [True], max_length=10, min_value_wrong=0.0, max_value_wrong=-1.0
            ),
            ValueError,
            r"min_value_wrong must be <= max_value_wrong",
        ),
        Case(
            "cosine-max-length-zero",
            lambda: r.cosine_length_reward([1.0], [True], max_length=0),
            ValueError,
            r"max_length must be > 0",
        ),
        Case(
            "l1-targets-shape",
            lambda: r.l1_exact_reward([1.0, 2.0], [True, True], [1.0, 2.0, 3.0]),
            ValueError,
            r"target_lengths must be a scalar or have the shape of lengths",
        ),
        Case(
            "l1-alpha-negative",
            lambda: r.l1_exact_reward([1.0], [True], 1.0, alpha=-0.1),
            ValueError,
            r"alpha must be >= 0",
        ),
        Case(
            "l1-delta-above-one",
            lambda: r.l1_max_reward([1.0], [True], 1.0, delta=1.5),
            ValueError,
            r"delta must be <= 1",
        ),
        Case(
            "l1-negative-target",
            lambda: r.l1_max_reward([1.0], [True], -1.0),
            ValueError,
            r"target_lengths must be >= 0",
        ),
        # the toy policy
        Case(
            "train-b_max-below-b_min",
            lambda: r.train_effort_policy(
                q_max=1.0, lam=1.0, k0=0.1, b_min=1.0, tau=1.0, b_max=0.5, rng=0
            ),
            ValueError,
            r"b_max must be > b_min=1\.0",
        ),
        Case(
            "train-rng-float",
            lambda: r.train_effort_policy(
                q_max=1.0, lam=1.0, k0=0.1, b_min=0.0, tau=1.0, b_max=1.0, rng=_as_any(0.5)
            ),
            TypeError,
            r"rng must be a numpy\.random\.Generator or a non-negative int seed",
        ),
        Case(
            "train-group-one",
            lambda: r.train_effort_policy(
                q_max=1.0, lam=1.0, k0=0.1, b_min=0.0, tau=1.0, b_max=1.0, rng=0, group=1
            ),
            ValueError,
            r"group must be >= 2",
        ),
        Case(
            "train-k0-zero",
            lambda: r.train_effort_policy(
                q_max=1.0, lam=1.0, k0=0.0, b_min=0.0, tau=1.0, b_max=1.0, rng=0
            ),
            ValueError,
            r"k0 must be > 0 to train a policy",
        ),
    ]


EFFORT_CASES: list[Case] = _effort_cases()


# ---------------------------------------------------------------------------------------------
# refimpl.sim
# ---------------------------------------------------------------------------------------------


def _sim(**kw: Any) -> Any:
    from refimpl.sim import SimConfig

    base: dict[str, Any] = {"slots": 4, "batch": 4, "rollouts": 64}
    base.update(kw)
    return SimConfig(**base)


def _simulate(**kw: Any) -> Any:
    from refimpl.sim import simulate

    engine = kw.pop("engine", "auto")
    return simulate(_sim(**kw), engine=engine)


SIM_CASES: list[Case] = [
    Case("sim-batch-zero", lambda: _sim(batch=0), ValueError, r"batch must be >= 1.*got batch=0"),
    Case("sim-slots-zero", lambda: _sim(slots=0), ValueError, r"slots must be >= 1.*got slots=0"),
    Case("sim-slots-float", lambda: _sim(slots=2.5), TypeError, r"slots must be an integer"),
    Case(
        "sim-no-run-length",
        lambda: _sim(rollouts=None),
        ValueError,
        r"rollouts or steps must be given.*Pass rollouts=R",
    ),
    Case(
        "sim-steps-zero",
        lambda: _sim(rollouts=None, steps=0),
        ValueError,
        r"steps must be >= 1 \(trainer steps\); got steps=0",
    ),
    Case(
        "sim-rollouts-zero",
        lambda: _sim(rollouts=0),
        ValueError,
        r"rollouts must be >= 1 \(trained rollouts\); got rollouts=0",
    ),
    Case(
        "sim-steps-zero-with-rollouts",
        lambda: _sim(steps=0),
        ValueError,
        r"rollouts and steps must not both be given",
    ),
    Case(
        "sim-both-run-lengths",
        lambda: _sim(steps=3),
        ValueError,
        r"rollouts and steps must not both be given",
    ),
    Case(
        "sim-rollouts-below-batch",
        lambda: _sim(rollouts=3),
        ValueError,
        r"rollouts must be >= batch=4.*got rollouts=3",
    ),
    Case("sim-unknown-mode", lambda: _sim(mode="fifo"), ValueError, r"mode must be one of 'sync'"),
    Case(
        "sim-unknown-partial",
        lambda: _sim(partial="resume"),
        ValueError,
        r"partial must be one of .*'keep_kv'",
    ),
    Case(
        "sim-unknown-over-bound",
        lambda: _sim(eta=1, over_bound="clip"),
        ValueError,
        r"over_bound must be one of 'keep', 'drop'",
    ),
    Case(
        "sim-drop-without-eta",
        lambda: _sim(over_bound="drop"),
        ValueError,
        r"over_bound must be 'keep' when eta is None.*Pass eta",
    ),
    Case(
        "sim-admission-without-eta",
        lambda: _sim(mode="admission"),
        ValueError,
        r"eta must be given for mode='admission'",
    ),
    Case("sim-negative-eta", lambda: _sim(eta=-1), ValueError, r"eta must be >= 0"),
    Case(
        "sim-negative-prefill",
        lambda: _sim(prefill_time=-1.0),
        ValueError,
        r"prefill_time must be >= 0.*got prefill_time=-1.0",
    ),
    Case(
        "sim-zero-token-time",
        lambda: _sim(token_time=0.0),
        ValueError,
        r"token_time must be > 0",
    ),
    Case(
        "sim-negative-trainer-time",
        lambda: _sim(trainer_time=-2.0),
        ValueError,
        r"trainer_time must be >= 0",
    ),
    Case(
        "sim-trainer-law-negative",
        lambda: _sim(trainer_time=__import__("scipy.stats").stats.norm()),
        ValueError,
        r"trainer_time must have support in \[0, inf\)",
    ),
    Case(
        "sim-launch-below-batch",
        lambda: _sim(mode="first_k", launch=2),
        ValueError,
        r"launch must be >= 4",
    ),
    Case(
        "sim-launch-outside-first-k",
        lambda: _sim(launch=5),
        ValueError,
        r"launch must be None unless mode='first_k'",
    ),
    Case(
        "sim-partial-in-sync",
        lambda: _sim(mode="sync", partial="restart"),
        ValueError,
        r"partial must be 'none' for mode='sync'",
    ),
    Case(
        "sim-preempt-without-duration",
        lambda: _sim(preempt_rate=0.1),
        ValueError,
        r"preempt_duration must be > 0 when preempt_rate > 0",
    ),
    Case(
        "sim-bad-slowdown",
        lambda: _sim(slowdown=lambda busy: 0.0),
        ValueError,
        r"slowdown must return a finite factor > 0.*slowdown\(1\) returned 0.0",
    ),
    Case(
        "sim-matrix-wrong-rows",
        lambda: _sim(lengths=__import__("numpy").ones((3, 10))),
        ValueError,
        r"(?s)lengths must have one row per slot \(slots=4 rows\).*got 3 rows",
    ),
    Case(
        "sim-matrix-nonpositive",
        lambda: _sim(lengths=__import__("numpy").zeros((4, 10))),
        ValueError,
        r"(?s)lengths must be > 0.*Entry \[0, 0\]",
    ),
    Case(
        "sim-matrix-nan",
        lambda: _sim(lengths=__import__("numpy").full((4, 10), float("nan"))),
        ValueError,
        r"lengths must contain only finite values",
    ),
    Case(
        "sim-pmf-not-normalised",
        lambda: _sim(lengths=__import__("numpy").array([0.5, 0.2])),
        ValueError,
        r"lengths must sum to 1.*divide every entry by the total",
    ),
    Case(
        "sim-lengths-string",
        lambda: _sim(lengths="lognormal"),
        TypeError,
        r"lengths must be None, a frozen scipy.stats law",
    ),
    Case(
        "sim-matrix-too-short",
        lambda: _simulate(lengths=__import__("numpy").ones((4, 3))),
        ValueError,
        r"lengths must hold every rollout.*K=3 columns.*slot \d needs at least \d+ lengths",
    ),
    Case(
        "sim-vector-engine-unsupported",
        lambda: _simulate(eta=0, over_bound="drop", engine="vector"),
        ValueError,
        r"engine must be 'event' or 'auto' for this config",
    ),
    Case(
        "sim-config-not-a-config",
        lambda: __import__("refimpl.sim").sim.simulate({"slots": 4}),
        TypeError,
        r"config must be a SimConfig",
    ),
]


# ---------------------------------------------------------------------------------------------
# the whole table
# ---------------------------------------------------------------------------------------------

ALL_CASES = [*DISPATCH_CASES, *STALENESS_CASES, *EFFORT_CASES, *SIM_CASES]


@pytest.mark.parametrize("case", ALL_CASES, ids=[c.id for c in ALL_CASES])
def test_bad_call_raises_a_message_that_says_how_to_fix_it(case: Case) -> None:
    with pytest.raises(case.error) as info:
        case.call()
    message = str(info.value)
    assert re.search(case.match, message), f"message {message!r} does not match {case.match!r}"
    assert "got " in message or "must" in message, f"message does not state the rule: {message!r}"


def test_ids_are_unique() -> None:
    ids = [c.id for c in ALL_CASES]
    assert len(ids) == len(set(ids))
