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

DISPATCH_CASES: list[Case] = []


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

SIM_CASES: list[Case] = []


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
