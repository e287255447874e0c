"""Bad calls to refimpl.staleness and the messages they give (see tests/_validation_table.py).

Each case is ``(id, call, exception type, regex the message must match)``; every refusal must also
be an instance of :class:`refimpl.RefimplError`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _validation_table import Case, check_refusal

import refimpl.staleness as st


def _staleness_cases() -> list[Case]:
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
            "st-version-newer-than-step-past-2-53",  # equal as floats, one apart as integers
            lambda: st.sample_staleness(2**53, [[2**53 + 1]]),
            ValueError,
            r"version 9007199254740993 > trained_step 9007199254740992",
        ),
        Case(
            "st-staleness-float-past-2-53",
            lambda: st.staleness_mask([2.0**60], eta=1),
            TypeError,
            r"s must be an array of integers.*a float past 2\^53 is not exact",
        ),
        Case(
            "st-staleness-booleans",
            lambda: st.staleness_mask([True, False], eta=1),
            TypeError,
            r"s must be an array of integers.*not booleans",
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
            "st-vtrace-lambda-shape",
            lambda: st.vtrace(one, one, one, one, one, lambda_=[0.5, 0.5]),
            ValueError,
            r"lambda_ and v_tm1 must have compatible shapes .*got lambda_.shape=\(2,\) and "
            r"v_tm1.shape=\(3,\)\. Pass a scalar lambda_ or one per time step",
        ),
        Case(
            "st-vtrace-rlax-name-discount",
            lambda: st.vtrace_td_error_and_advantage(one, one, one, -one, one),
            ValueError,
            r"discount_t must lie in \[0, 1\] \(0 marks an episode boundary\).*Entry 0 is -1\.0\.",
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
    ]


CASES: list[Case] = _staleness_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_call_raises_a_message_that_says_how_to_fix_it(case: Case) -> None:
    check_refusal(case)
