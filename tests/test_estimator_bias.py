"""Honest estimators: exact bias of every combination, refusals, opt-in and labels.

Exact values come from brute-force enumeration (every launched tuple and every reward outcome in
Fractions, ``proofs.estimator_bias.brute_force_first_k``), an implementation independent of the
composition tables of ``refimpl.learning.first_k``.
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st

from proofs.estimator_bias import brute_force_first_k, lrn_inclusion
from refimpl import learning as lrn
from refimpl.lab.learning_estimators import SMALL_LAW, estimator_rows, fluid_rows

F = Fraction
EYE3 = np.eye(3, dtype=int).tolist()


def _law(h: list[Fraction]) -> tuple[list[Fraction], list[list[Fraction]]]:
    return list(lrn.hazard_length_pmf(h)), lrn.token_scores(h, EYE3).sum(axis=1).tolist()


H, Q = SMALL_LAW
PMF, SCORES = _law(H)

rational = st.fractions(min_value=F(1, 10), max_value=F(9, 10), max_denominator=12)
laws = st.tuples(rational, rational).map(lambda x: [x[0], x[1], F(1)])
qualities = st.lists(
    st.fractions(min_value=0, max_value=1, max_denominator=6), min_size=3, max_size=3
)


@pytest.mark.parametrize("correction", ["none", "horvitz_thompson", "hajek", "clipped_ht"])
@pytest.mark.parametrize("baseline", [F(1, 3), "batch", "leave_one_out"])
@pytest.mark.parametrize(("n", "k"), [(2, 1), (3, 2), (4, 2), (3, 3)])
def test_first_k_bias_equals_brute_force_enumeration(
    correction: str, baseline: Any, n: int, k: int
) -> None:
    if baseline == "leave_one_out" and k == 1:
        return  # refused: tested below
    clip = F(1) if correction == "clipped_ht" else None
    want = brute_force_first_k(
        PMF, SCORES, Q, n=n, k=k, correction=correction, baseline=baseline, clip=clip
    )
    got = lrn.estimator_bias(
        PMF, SCORES, Q, n=n, k=k, correction=correction, baseline=baseline, clip=clip
    )
    assert list(got.expected) == want
    assert list(got.bias) == [a - b for a, b in zip(want, got.gradient, strict=True)]


def test_batch_baseline_moments_equal_brute_force_enumeration() -> None:
    # the batch baseline's covariance trace too (reward noise conditioned on the batch)
    n, k = 3, 2
    total = [F(0)] * 3
    second = F(0)
    incl = lrn_inclusion(PMF, n, k)
    for tup in itertools.product(range(3), repeat=n):
        prob = PMF[tup[0]] * PMF[tup[1]] * PMF[tup[2]]
        batch = sorted(tup)[:k]
        w = [F(k, n) / incl[j] / k for j in batch]
        for rewards in itertools.product((0, 1), repeat=k):
            pr = prob
            for j, x in zip(batch, rewards, strict=True):
                pr *= Q[j] if x else 1 - Q[j]
            mean = F(sum(rewards), k)
            est = [
                sum(w[i] * (rewards[i] - mean) * SCORES[j][c] for i, j in enumerate(batch))
                for c in range(3)
            ]
            total = [t + pr * e for t, e in zip(total, est, strict=True)]
            second += pr * sum(e * e for e in est)
    g = lrn.first_k_gradient(
        PMF, SCORES, Q, n=n, k=k, correction="horvitz_thompson", baseline="batch"
    )
    assert list(g.mean) == total
    assert g.trace_variance == second - sum(t * t for t in total)


def _independent_draws_scale(first_k: Any) -> Any:
    @given(laws, qualities, st.integers(min_value=2, max_value=4))
    def check(h: list[Fraction], q: list[Fraction], k: int) -> None:
        pmf, scores = _law(h)
        on = lrn.policy_gradient(pmf, scores, q).mean
        batch = first_k(pmf, scores, q, n=k, k=k, baseline="batch").mean
        assert list(batch) == [(1 - F(1, k)) * x for x in on]

    return check


def test_batch_baseline_scales_independent_draws_by_one_minus_one_over_k() -> None:
    run_property(_independent_draws_scale(lrn.first_k_gradient))


def test_the_scaling_property_rejects_a_batch_baseline_that_is_silently_ignored() -> None:
    def ignored(*a: Any, baseline: Any, **kw: Any) -> lrn.GradientMoments:
        return lrn.first_k_gradient(*a, baseline=0, **kw)

    rejects(_independent_draws_scale(ignored))


def _ht_unbiased_with(baseline: Any) -> Any:
    @given(laws, qualities, st.sampled_from([(2, 1), (3, 1), (3, 2), (4, 2)]))
    def check(h: list[Fraction], q: list[Fraction], nk: tuple[int, int]) -> None:
        pmf, scores = _law(h)
        e = lrn.estimator_bias(
            pmf, scores, q, n=nk[0], k=nk[1], correction="horvitz_thompson", baseline=baseline
        )
        assert all(x == 0 for x in e.bias)

    return check


def test_horvitz_thompson_with_a_constant_baseline_is_unbiased() -> None:
    run_property(_ht_unbiased_with(F(1, 2)))


def test_the_unbiasedness_property_rejects_the_batch_baseline() -> None:
    rejects(_ht_unbiased_with("batch"))


def test_the_exact_statements_on_the_small_law() -> None:
    rows = {(r[0], r[1], r[2]): r for r in estimator_rows(PMF, SCORES, Q, clip=F(1))}
    ht_batch = rows["first 2 of 4", "horvitz_thompson", "batch"]
    assert ht_batch[4] == F(1021139, 2553395)
    assert not ht_batch[5]
    assert rows["first 2 of 4", "horvitz_thompson", "J(θ)"][4] == 1
    assert rows["sync, B = 4", "none", "batch"][4] == F(3, 4)
    assert rows["sync, B = 4", "none", "leave_one_out"][6] == 0
    # clipping the HT weights leaves more bias than no correction at all here
    assert rows["first 2 of 4", "clipped_ht", "J(θ)"][6] > rows["first 2 of 4", "none", "J(θ)"][6]
    assert rows["first 1 of 2, carried", "none", "J(θ)"][6] == 0


def test_estimator_bias_refuses_what_it_cannot_state() -> None:
    with pytest.raises(ValueError, match="leftovers must be 'carry' only with correction='none'"):
        lrn.estimator_bias(
            PMF, SCORES, Q, n=2, k=1, correction="horvitz_thompson", leftovers="carry"
        )
    with pytest.raises(ValueError, match="leftovers must be 'carry' only with"):
        lrn.estimator_bias(PMF, SCORES, Q, n=2, k=1, baseline="batch", leftovers="carry")
    with pytest.raises(ValueError, match="baseline must be 'leave_one_out' only with k >= 2"):
        lrn.estimator_bias(PMF, SCORES, Q, n=2, k=1, baseline="leave_one_out")
    with pytest.raises(ValueError, match="baseline must be a number"):
        lrn.first_k_gradient(PMF, SCORES, Q, n=2, k=1, baseline="mean")


# ---------------------------------------------------------------------------------------------
# what train_policy accepts
# ---------------------------------------------------------------------------------------------

PHI = lrn.length_features(5, degree=1)
Q5 = np.linspace(0.1, 0.9, 5)


def _train(**kw: Any) -> lrn.TrainingRun:
    args: dict[str, Any] = {"slots": 4, "batch": 2, "steps": 4, "learning_rate": 0.3, "seed": 1}
    args.update(kw)
    return lrn.train_policy([0.0, -1.0], PHI, Q5, **args)


MODES = ("async", "sync", "sync_minibatch", "first_k")
CORRECTIONS = (*lrn.CORRECTIONS, "horvitz_thompson", "hajek", "clipped_ht")
BASELINES = (0.25, "none", "batch", "leave_one_out")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("correction", CORRECTIONS)
@pytest.mark.parametrize("baseline", BASELINES)
@pytest.mark.parametrize("leftovers", ["drop", "carry"])
def test_every_accepted_combination_is_classified_or_refused(
    mode: str, correction: str, baseline: Any, leftovers: str
) -> None:
    if leftovers == "carry" and mode != "first_k":
        return
    length_weight = correction in ("horvitz_thompson", "hajek", "clipped_ht")
    kw: dict[str, Any] = {
        "mode": mode, "correction": correction, "baseline": baseline, "leftovers": leftovers,
    }  # fmt: skip
    if length_weight and (mode != "first_k" or leftovers == "carry"):
        with pytest.raises(ValueError, match="correction must be"):
            _train(**kw)
        return
    status = lrn.estimator_status(
        mode=mode, correction=correction, baseline=baseline, leftovers=leftovers, slots=4, batch=2
    )
    assert status.kind in ("unbiased", "scaled", "biased")
    assert status.statement
    if status.kind == "biased":
        with pytest.raises(ValueError, match="allow_biased must be True to run a biased"):
            _train(**kw)
        run = _train(allow_biased=True, **kw)
        assert run.biased
        assert run.estimator == status.label + " (opt-in)"
    else:
        run = _train(**kw)
        assert not run.biased
        assert run.estimator == status.label


def test_the_default_estimator_is_not_biased_in_any_mode_without_a_length_selection() -> None:
    for mode in ("async", "sync", "sync_minibatch"):
        assert not _train(mode=mode).biased
    with pytest.raises(ValueError, match="correction='horvitz_thompson' with a constant baseline"):
        _train(mode="first_k")
    assert not _train(mode="first_k", correction="horvitz_thompson", baseline=0.0).biased


def test_a_staleness_bound_needs_the_opt_in() -> None:
    with pytest.raises(ValueError, match="length bias"):
        _train(eta=0)
    assert _train(eta=0, allow_biased=True).estimator.endswith("biased (opt-in)")


def test_leave_one_out_is_the_batch_advantage_scaled_by_b_over_b_minus_one() -> None:
    a = _train(mode="sync", baseline="batch", slots=3, batch=3)
    b = _train(mode="sync", baseline="leave_one_out", slots=3, batch=3)
    np.testing.assert_allclose(b.gradients[0], a.gradients[0] * 3 / 2, rtol=1e-13, atol=1e-15)


def test_fluid_model_statements_keep_the_direction_only_with_the_full_ratio() -> None:
    rows = {(r[0], r[1]): r for r in fluid_rows()}
    assert rows["sequence_is", "none"][3]  # parallel: a scaling by the fluid model's ratio
    assert rows["sequence_is", "none"][2] == F(204977500, 186528477)
    for corr in ("none", "token_tis", "sequence_tis", "icepop", "decoupled_ppo"):
        assert not rows[corr, "none"][3], corr
    # the mask at η = 0 trains only fresh samples: every correction is then the same estimator
    assert len({rows[c, "η = 0"][2] for c in lrn.EXACT_CORRECTIONS}) == 1


def test_gradient_bias_is_exact_and_checks_its_shapes() -> None:
    b = lrn.gradient_bias([F(3), F(0)], [F(1), F(1)])
    assert b.scale == F(3, 2)
    assert not b.parallel
    assert list(b.bias) == [2, -1]
    zero = lrn.gradient_bias([0.0, 0.0], [0.0, 0.0])
    assert zero.scale is None
    assert zero.relative_bias == 0.0
    with pytest.raises(ValueError, match="expected must be 1-D with the shape of gradient"):
        lrn.gradient_bias([1.0, 2.0, 3.0], [1.0, 2.0])


def _biased_runs_need_the_opt_in(train: Any) -> None:
    for kw in (
        {"mode": "async", "correction": "none"},
        {"mode": "first_k", "correction": "horvitz_thompson", "baseline": "batch"},
        {"mode": "first_k", "correction": "hajek", "baseline": 0.0},
        {"mode": "async", "eta": 0},
    ):
        try:
            train(**kw)
        except ValueError as err:
            message = str(err)
        else:
            raise AssertionError(f"a biased estimator ran without the opt-in: {kw}")
        assert "allow_biased" in message, message


def test_no_biased_combination_runs_silently() -> None:
    _biased_runs_need_the_opt_in(_train)


def test_the_opt_in_property_rejects_a_trainer_that_accepts_biased_estimators_silently() -> None:
    def silent(**kw: Any) -> lrn.TrainingRun:  # wrong variant: the former behaviour
        return _train(allow_biased=True, **kw)

    rejects(_biased_runs_need_the_opt_in, silent)
