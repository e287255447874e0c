"""Pinned behaviours of refimpl.dispatch that a sampled mutation run (``tools/mutate.py``, seed
101) found no test holding: each test names the mutant it was seen to fail on."""

from __future__ import annotations

import scipy.stats

import refimpl


def test_expected_max_of_one_rollout_is_the_law_s_own_mean_exactly() -> None:
    # n = 1 returns dist.mean() itself, not a quadrature of it (mutant: the shortcut taken at
    # n == 0 instead, which returns a quadrature within 1e-11 but not the same float)
    law = scipy.stats.lognorm(1.0, scale=100.0)
    assert refimpl.expected_max(law, n=1) == law.mean()
    gamma = scipy.stats.gamma(2.5, scale=40.0)
    assert refimpl.expected_max(gamma, n=1) == gamma.mean()


def test_estimator_moments_renormalise_a_float_pmf_that_sums_to_one_within_tolerance() -> None:
    # pmf sums to 1 + 9e-10 (accepted: within 1e-9); the moments are those of p / sum(p)
    # (mutant: p * sum(p), off by 1.8e-9 relative)
    excess = 9e-10
    m = refimpl.ipw_estimator_moments([0.25, 0.75 + excess], [1.0, 2.0], n=2, k=1)
    total = 1.0 + excess
    target = (0.25 * 1.0 + (0.75 + excess) * 2.0) / total
    assert abs(m.target - target) <= 4e-16 * target
