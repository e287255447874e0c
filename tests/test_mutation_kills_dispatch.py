"""Pinned behaviours of refimpl.dispatch that a sampled mutation run (``tools/mutate.py``, seed
101) found no test holding: each test names the mutant it was seen to fail on."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
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


def _rare_long_mixture_max_exact(n: int, p: Fraction, theta: int) -> Fraction:
    # E[max of n] = ∫ 1 - (1 - S)^n dx with S(x) = (1 - p) e^{-x} + p e^{-x/θ}: expand (1 - S)^n
    # and S^j binomially; each term e^{-x (i + (j - i)/θ)} integrates to 1 / (i + (j - i)/θ).
    total = Fraction(0)
    for j in range(1, n + 1):
        integral_sj = sum(
            (
                math.comb(j, i) * (1 - p) ** i * p ** (j - i) / (i + Fraction(j - i, theta))
                for i in range(j + 1)
            ),
            Fraction(0),
        )
        total += (-1) ** (j + 1) * math.comb(n, j) * integral_sj
    return total


def test_a_rare_long_component_of_a_law_without_inverse_is_integrated() -> None:
    # Exp(1) with probability 1 - 2e-6, Exp(mean 10^4) with 2e-6, as a user-written law (sf only):
    # its 1 - 1e-6 quantile (about 6 931) is the only break of the length integral between the
    # 0.999 quantile (about 6.9) and the 1 - 1e-9 one (about 76 000), so without it the 16 panels
    # of that piece miss the long component's mass (mutant: 1 - 1e-6 -> 0 - 1e-6, a break
    # quantile dropped: the mean came out 1.0190000 instead of 1.019998, E[max of 8] 2.8e-3 low).
    p, theta = Fraction(2, 10**6), 10**4

    class RareLong(scipy.stats.rv_continuous):
        def _sf(self, x: Any, *args: Any) -> Any:
            return (1 - float(p)) * np.exp(-x) + float(p) * np.exp(-x / theta)

        def _cdf(self, x: Any, *args: Any) -> Any:
            return 1.0 - self._sf(x)

        def _pdf(self, x: Any, *args: Any) -> Any:
            return (1 - float(p)) * np.exp(-x) + float(p) / theta * np.exp(-x / theta)

    law = RareLong(a=0.0, name="rare-long")()
    mean = (1 - p) * 1 + p * theta  # 1.019998
    assert refimpl.expected_max(law, n=1) == pytest.approx(float(mean), rel=1e-9)
    exact = _rare_long_mixture_max_exact(8, p, theta)
    assert refimpl.expected_max(law, n=8) == pytest.approx(float(exact), rel=1e-9)
