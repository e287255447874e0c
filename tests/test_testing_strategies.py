"""refimpl.testing.strategies and tolerances: what they promise downstream tests.

Every strategy draws inputs inside the documented domain, which the reference accepts. The domain
checks are plain functions so that they can be shown to reject a deliberately wrong strategy.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

import refimpl
from refimpl.testing import strategies as rst
from refimpl.testing.tolerances import EXACT, FUNCTION, TRACE, Tolerance, agree


def pmf_ok(pmf: NDArray[np.float64]) -> None:
    assert pmf.ndim == 1
    assert pmf.size >= 1
    assert np.all(pmf >= 0)
    assert abs(pmf.sum() - 1.0) < 1e-12
    refimpl.inclusion_probability_pmf(pmf, n=3, k=2)


def exact_pmf_ok(pmf: list[Fraction]) -> None:
    assert all(isinstance(p, Fraction) and p >= 0 for p in pmf)
    assert sum(pmf) == 1
    assert all(isinstance(x, Fraction) for x in refimpl.inclusion_probability_pmf(pmf, n=3, k=2))


def staleness_ok(s: NDArray[np.int64]) -> None:
    assert s.dtype == np.int64
    assert np.all(s >= 0)
    refimpl.staleness_mask(s, eta=0)


def versions_ok(batch: rst.VersionedBatch) -> None:
    for row in batch.token_versions:
        assert np.all(np.diff(row) >= 0), "versions only grow during a rollout"
        assert row.min() >= 0
        assert row.max() <= batch.trained_step
    refimpl.sample_staleness(batch.trained_step, batch.token_versions)


def pair_ok(pair: rst.LogProbPair) -> None:
    assert pair.logp_target.shape == pair.logp_behavior.shape == pair.mask.shape
    assert pair.logp_target.ndim == 2
    assert np.all(pair.logp_behavior <= 0)
    assert np.all(pair.logp_target <= 0)
    assert set(np.unique(pair.mask)) <= {0.0, 1.0}
    assert np.all(pair.mask[:, 0] == 1.0), "every row has a real token"
    assert np.all(np.diff(pair.mask, axis=1) <= 0), "right padding"
    refimpl.truncated_is_weights(
        pair.logp_target, pair.logp_behavior, mask=pair.mask, cap=2.0, level="sequence"
    )


def effort_ok(case: rst.EffortCase) -> None:
    assert np.all(case.b >= case.params.b_min)
    assert case.params.k0 >= 0
    assert case.params.tau > 0
    refimpl.effort_penalty(case.b, **case.params._asdict())


def vtrace_ok(x: rst.VTraceInputs) -> None:
    assert len({a.shape for a in x}) == 1
    assert np.all((x.discount_t >= 0) & (x.discount_t <= 1))
    assert np.all(x.rho_tm1 >= 0)
    refimpl.vtrace(*x)


@given(rst.length_pmfs())
def test_length_pmfs_are_float_pmfs_the_reference_accepts(pmf: NDArray[np.float64]) -> None:
    pmf_ok(pmf)


@given(rst.exact_length_pmfs())
def test_exact_length_pmfs_sum_to_one_exactly_and_select_exact_mode(pmf: list[Fraction]) -> None:
    exact_pmf_ok(pmf)


@settings(max_examples=20)
@given(rst.length_distributions())
def test_length_distributions_are_frozen_laws_on_positive_lengths(dist: Any) -> None:
    assert dist.cdf(0.0) == 0.0
    assert np.isfinite(dist.mean())
    assert dist.mean() > 0
    refimpl.selected_mean(dist, n=4, k=2)


@given(rst.n_k_pairs(max_n=10))
def test_n_k_pairs_launch_at_least_as_many_as_they_train(nk: tuple[int, int]) -> None:
    n, k = nk
    assert 1 <= k <= n <= 10
    refimpl.inclusion_probability([0.5], n=n, k=k)


@given(rst.cdf_values())
def test_cdf_values_lie_in_the_unit_interval(u: NDArray[np.float64]) -> None:
    assert np.all((u >= 0) & (u <= 1))
    refimpl.inclusion_probability(u, n=4, k=2)


@given(rst.staleness_arrays(), rst.staleness_bounds())
def test_staleness_arrays_and_bounds_are_whole_and_non_negative(
    s: NDArray[np.int64], eta: int
) -> None:
    staleness_ok(s)
    assert eta >= 0


@given(rst.token_versions())
def test_token_versions_never_exceed_the_trainer_step(batch: rst.VersionedBatch) -> None:
    versions_ok(batch)


@given(rst.logprob_pairs())
def test_logprob_pairs_are_log_probabilities_with_right_padding(pair: rst.LogProbPair) -> None:
    pair_ok(pair)


@given(rst.logprob_pairs(padded=False))
def test_unpadded_logprob_pairs_have_an_all_ones_mask(pair: rst.LogProbPair) -> None:
    assert np.all(pair.mask == 1.0)


@given(rst.is_caps(), rst.is_bands())
def test_caps_and_bands_keep_ratio_one(cap: float, band: tuple[float, float]) -> None:
    low, high = band
    assert cap >= 1.0
    assert 0.0 <= low <= 1.0 <= high
    assert refimpl.truncated_is_weights([0.0], [0.0], cap=cap)[0] == 1.0
    assert refimpl.masked_is_weights([0.0], [0.0], low=low, high=high)[0] == 1.0


@given(rst.effort_cases())
def test_effort_cases_respect_b_min(case: rst.EffortCase) -> None:
    effort_ok(case)


@given(rst.vtrace_inputs())
def test_vtrace_inputs_are_valid_trajectories(x: rst.VTraceInputs) -> None:
    vtrace_ok(x)


# The domain checks above can fail: each rejects a deliberately wrong strategy's draw.
WRONG: list[tuple[Callable[[Any], None], Any]] = [
    (pmf_ok, np.array([0.5, 0.6])),
    (exact_pmf_ok, [Fraction(1, 2), Fraction(1, 3)]),
    (staleness_ok, np.array([0, -1], dtype=np.int64)),
    (versions_ok, rst.VersionedBatch(2, [np.array([1, 3], dtype=np.int64)])),
    (
        pair_ok,
        rst.LogProbPair(np.zeros((1, 2)), np.zeros((1, 2)), np.array([[0.0, 1.0]])),
    ),
    (effort_ok, rst.EffortCase(np.array([-1.0]), rst.EffortParameters(1.0, 0.0, 1.0))),
    (vtrace_ok, rst.VTraceInputs(*(np.ones(2),) * 3, np.array([1.0, 1.5]), np.ones(2))),
]


@pytest.mark.parametrize(("domain_check", "bad"), WRONG, ids=[c.__name__ for c, _ in WRONG])
def test_domain_checks_reject_a_wrong_strategys_draw(
    domain_check: Callable[[Any], None], bad: Any
) -> None:
    with pytest.raises((AssertionError, ValueError)):
        domain_check(bad)


# ---------------------------------------------------------------------------------------------
# tolerances
# ---------------------------------------------------------------------------------------------


def test_agree_applies_atol_plus_rtol_times_expected() -> None:
    tol = Tolerance(rtol=1e-3, atol=1e-6)
    found = [1.0 + 0.9e-3, 1.0 + 1.1e-3, 0.5e-6, 2e-6]
    assert agree(found, [1.0, 1.0, 0.0, 0.0], tol).tolist() == [True, False, True, False]


def test_agree_never_accepts_nan_and_accepts_infinity_only_for_itself() -> None:
    tol = Tolerance(rtol=1.0, atol=1.0)
    found = [np.nan, np.inf, np.inf, -np.inf, 1.0]
    expected = [np.nan, np.inf, -np.inf, -np.inf, np.inf]
    assert agree(found, expected, tol).tolist() == [False, True, False, True, False]


def test_exact_tolerance_rejects_the_smallest_difference() -> None:
    assert not agree([np.nextafter(1.0, 2.0)], [1.0], EXACT)[0]


def test_every_spec_has_documented_tolerances() -> None:
    from refimpl.testing import spec_names
    from refimpl.testing.check_cli import SPECS

    assert set(spec_names()) <= set(FUNCTION)
    assert set(SPECS) <= set(TRACE)
    assert all(t.rtol >= 0 and t.atol >= 0 for t in [*FUNCTION.values(), *TRACE.values()])
    assert TRACE["staleness_mask"] == TRACE["staleness"] == EXACT


@given(st.floats(-1e6, 1e6), st.floats(1e-12, 1e-3))
def test_agree_accepts_relative_errors_below_rtol(x: float, rel: float) -> None:
    tol = Tolerance(rtol=1e-3, atol=0.0)
    assert agree([x * (1 + rel / 2)], [x], tol)[0]
