"""Properties of refimpl.learning: exact expected gradients against brute-force batch enumeration.

The oracle enumerates every ``n``-tuple of launched lengths (``Fraction`` probabilities), takes the
first ``k`` by length with ties broken uniformly (each tied rollout is in the batch with the tied
share of the free places), and averages the estimate; it uses neither ``selected_pmf`` nor the
composition formula. The policy is *tabular* (features = identity: the parameters are the logits of
each hazard), so rational hazards give rational scores and every comparison is exact. Every
property is seen to reject a wrong variant (``test_*_rejects_*``).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from fractions import Fraction
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects
from hypothesis import given
from hypothesis import strategies as st

import refimpl
from refimpl import learning as lrn
from refimpl.learning import training as lrn_training

F = Fraction
ZERO = Fraction(0)


@st.composite
def rational_hazards(draw: st.DrawFn, max_length: int = 3) -> list[Fraction]:
    """Hazards in (0, 1) with denominators up to 6, the last one 1."""
    m = draw(st.integers(2, max_length))
    return [F(draw(st.integers(1, 5)), 6) for _ in range(m - 1)] + [F(1)]


@st.composite
def rational_qualities(draw: st.DrawFn, m: int) -> list[Fraction]:
    return [F(draw(st.integers(0, 4)), 4) for _ in range(m)]


def _tabular(h: Sequence[Fraction]) -> tuple[list[Fraction], Any]:
    m = len(h)
    eye = [[int(i == j) for j in range(m)] for i in range(m)]
    return lrn.hazard_length_pmf(list(h)), lrn.token_scores(list(h), eye).sum(axis=1)


def _brute_force(
    pmf: Sequence[Fraction],
    scores: Any,
    quality: Sequence[Fraction],
    *,
    n: int,
    k: int,
    correction: str,
    penalty: Fraction = ZERO,
    baseline: Fraction = ZERO,
    clip: Fraction | None = None,
) -> tuple[list[Fraction], Fraction]:
    """Mean and covariance trace of the batch estimate, by enumerating every launched n-tuple."""
    m = len(pmf)
    d = scores.shape[1]
    pi = _inclusion_by_enumeration(pmf, n=n, k=k)
    w = [F(k, n) / pi[j] if pi[j] > 0 else F(0) for j in range(m)]
    if clip is not None:
        w = [x if x <= clip else clip for x in w]
    rbar = [quality[j] - penalty * (j + 1) - baseline for j in range(m)]
    var = [quality[j] * (1 - quality[j]) for j in range(m)]
    mean = [F(0)] * d
    second = F(0)
    for tup in itertools.product(range(m), repeat=n):
        prob = F(1)
        for j in tup:
            prob *= pmf[j]
        if prob == 0:
            continue
        chosen = sorted(tup)[:k]  # the batch multiset (ties share the free places)
        if correction == "none":
            unit = [F(1, k)] * k
        elif correction in ("horvitz_thompson", "clipped_ht"):
            unit = [w[j] / k for j in chosen]
        else:
            total = sum((w[j] for j in chosen), F(0))
            unit = [w[j] / total for j in chosen]
        est = [
            sum((u * rbar[j] * scores[j][c] for u, j in zip(unit, chosen, strict=True)), F(0))
            for c in range(d)
        ]
        noise = sum(
            (
                u * u * var[j] * sum((scores[j][c] ** 2 for c in range(d)), F(0))
                for u, j in zip(unit, chosen, strict=True)
            ),
            F(0),
        )
        mean = [a + prob * e for a, e in zip(mean, est, strict=True)]
        second += prob * (sum((e * e for e in est), F(0)) + noise)
    return mean, second - sum((a * a for a in mean), F(0))


def _inclusion_by_enumeration(pmf: Sequence[Fraction], *, n: int, k: int) -> list[Fraction]:
    """P(rollout 0 is in the batch | its length), ties broken uniformly, by enumeration."""
    m = len(pmf)
    out = []
    for ell in range(m):
        total = F(0)
        for rest in itertools.product(range(m), repeat=n - 1):
            prob = F(1)
            for j in rest:
                prob *= pmf[j]
            shorter = sum(1 for j in rest if j < ell)
            equal = sum(1 for j in rest if j == ell)
            total += prob * min(max(F(k - shorter, equal + 1), F(0)), F(1))
        out.append(total)
    return out


# ---------------------------------------------------------------------------------------------
# the policy
# ---------------------------------------------------------------------------------------------


@given(rational_hazards(max_length=5))
def test_hazard_pmf_sums_to_one_and_scores_have_mean_zero(h: list[Fraction]) -> None:
    p, s = _tabular(h)
    assert sum(p) == 1
    assert list((np.array(p, dtype=object)[:, None] * s).sum(axis=0)) == [0] * len(h)


def test_token_scores_are_the_derivative_of_the_log_pmf() -> None:
    phi = lrn.length_features(6, degree=2)
    theta = np.array([-0.4, 0.3, -1.1])
    eps = 1e-6
    score = lrn.token_scores(lrn.stop_hazard(theta, phi), phi).sum(axis=1)
    for c in range(3):
        up, dn = theta.copy(), theta.copy()
        up[c] += eps
        dn[c] -= eps
        lp_up = np.log(lrn.hazard_length_pmf(lrn.stop_hazard(up, phi)))
        lp_dn = np.log(lrn.hazard_length_pmf(lrn.stop_hazard(dn, phi)))
        np.testing.assert_allclose(score[:, c], (lp_up - lp_dn) / (2 * eps), rtol=1e-7, atol=1e-9)


def test_token_log_probs_sum_to_the_log_pmf() -> None:
    h = lrn.stop_hazard([0.2, -1.0], lrn.length_features(7, degree=1))
    lp, mask = lrn.token_log_probs(h)
    np.testing.assert_allclose(lp.sum(axis=1), np.log(lrn.hazard_length_pmf(h)), rtol=1e-13)
    assert np.array_equal(mask, np.tril(np.ones((7, 7))))


# ---------------------------------------------------------------------------------------------
# first k of n: exact, against brute force
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("correction", lrn.FIRST_K_CORRECTIONS)
@pytest.mark.parametrize(("n", "k"), [(1, 1), (2, 1), (3, 1), (3, 2), (3, 3), (4, 2)])
def test_first_k_gradient_equals_brute_force_enumeration(correction: str, n: int, k: int) -> None:
    h = [F(1, 3), F(1, 2), F(1)]
    p, s = _tabular(h)
    q = [F(1, 4), F(1, 2), F(3, 4)]
    clip = F(6, 5) if correction == "clipped_ht" else None
    got = lrn.first_k_gradient(
        p, s, q, n=n, k=k, correction=correction, penalty=F(1, 20), baseline=F(1, 3), clip=clip
    )
    mean, trace = _brute_force(
        p, s, q, n=n, k=k, correction=correction, penalty=F(1, 20), baseline=F(1, 3), clip=clip
    )
    assert list(got.mean) == mean
    assert got.trace_variance == trace


@given(rational_hazards(), st.integers(1, 3), st.data())
def test_horvitz_thompson_first_k_gradient_is_the_on_policy_gradient(
    h: list[Fraction], n: int, data: st.DataObject
) -> None:
    k = data.draw(st.integers(1, n))
    p, s = _tabular(h)
    q = data.draw(rational_qualities(len(h)))
    ht = lrn.first_k_gradient(p, s, q, n=n, k=k, correction="horvitz_thompson")
    assert list(ht.mean) == list(lrn.policy_gradient(p, s, q).mean)


@given(rational_hazards(), st.integers(1, 3), st.data())
def test_uncorrected_first_k_gradient_is_the_selected_pmf_sum(
    h: list[Fraction], n: int, data: st.DataObject
) -> None:
    k = data.draw(st.integers(1, n))
    p, s = _tabular(h)
    q = data.draw(rational_qualities(len(h)))
    sel = refimpl.selected_pmf(p, n=n, k=k)
    expect = lrn.gradient_moments(sel, s, q).mean
    assert list(lrn.first_k_gradient(p, s, q, n=n, k=k).mean) == list(expect)


def test_uncorrected_and_hajek_first_k_gradients_are_biased_but_not_at_k_equal_n() -> None:
    h = [F(1, 3), F(1, 2), F(1)]
    p, s = _tabular(h)
    q = [F(1, 4), F(1, 2), F(3, 4)]
    on = list(lrn.policy_gradient(p, s, q).mean)
    for corr in ("none", "hajek"):
        assert list(lrn.first_k_gradient(p, s, q, n=3, k=1, correction=corr).mean) != on
        assert list(lrn.first_k_gradient(p, s, q, n=3, k=3, correction=corr).mean) == on


def test_first_k_exactness_rejects_a_wrong_inclusion_probability() -> None:
    # HT with the inclusion probabilities of the wrong n (n + 1) is no longer unbiased
    h = [F(1, 3), F(1, 2), F(1)]
    p, s = _tabular(h)
    q = [F(1, 4), F(1, 2), F(3, 4)]
    pi_wrong = refimpl.inclusion_probability_pmf(p, n=4, k=2)
    sel = refimpl.selected_pmf(p, n=3, k=2)
    w = [F(2, 3) / x for x in pi_wrong]
    wrong = lrn.gradient_moments(sel, np.array([[w[j] * x for x in s[j]] for j in range(3)]), q)
    assert list(wrong.mean) != list(lrn.policy_gradient(p, s, q).mean)
    # ... and the oracle tells the uncorrected mean from the on-policy one (it can fail)
    mean, _ = _brute_force(p, s, q, n=3, k=2, correction="none")
    assert mean == list(lrn.first_k_gradient(p, s, q, n=3, k=2).mean)
    assert mean != list(lrn.gradient_moments(p, s, q).mean)


def test_clipped_ipw_is_biased_exactly_where_a_weight_is_clipped() -> None:
    # a cap above every weight is HT (unbiased); below the largest weight it is biased, and the
    # brute force agrees that the clip, not the enumeration, makes the difference
    h = [F(1, 3), F(1, 2), F(1)]
    p, s = _tabular(h)
    q = [F(1, 4), F(1, 2), F(3, 4)]
    pi = refimpl.inclusion_probability_pmf(p, n=3, k=1)
    w_max = max(F(1, 3) / x for x in pi)
    on = list(lrn.policy_gradient(p, s, q).mean)
    wide = lrn.first_k_gradient(p, s, q, n=3, k=1, correction="clipped_ht", clip=w_max)
    assert list(wide.mean) == on
    ht = lrn.first_k_gradient(p, s, q, n=3, k=1, correction="horvitz_thompson")
    assert wide.trace_variance == ht.trace_variance
    tight = lrn.first_k_gradient(p, s, q, n=3, k=1, correction="clipped_ht", clip=w_max * F(9, 10))
    assert list(tight.mean) != on
    assert tight.trace_variance < ht.trace_variance
    # wrong variant: a brute force that ignores the clip rejects the exact clipped value
    mean, _ = _brute_force(p, s, q, n=3, k=1, correction="clipped_ht", clip=None)
    assert mean != list(tight.mean)
    with pytest.raises(ValueError, match="clip must be given exactly when"):
        lrn.first_k_gradient(p, s, q, n=3, k=1, correction="clipped_ht")


# ---------------------------------------------------------------------------------------------
# first k of n with carried leftovers (claim LRN5)
# ---------------------------------------------------------------------------------------------


def _carry_brute_force(
    pmf: Sequence[Fraction],
    scores: Any,
    quality: Sequence[Fraction],
    *,
    n: int,
    k: int,
    step: int,
    newest_first: bool = False,
) -> tuple[list[Fraction], Fraction, dict[tuple[int, int], Fraction]]:
    """Batch ``step`` from a cold start, by enumerating every length of every launched rollout.

    An absolute timeline: rollout ``i`` launched at time ``t_i`` finishes at ``t_i + ℓ_i``; each
    step trains the ``k`` unfinished-and-untrained ones that finish first (ties: launch order) and
    launches ``k`` fresh ones when it ends. ``newest_first`` is the wrong tie rule.
    """
    m, d = len(pmf), scores.shape[1]
    rbar = list(quality)
    var = [quality[j] * (1 - quality[j]) for j in range(m)]
    mean = [F(0)] * d
    second = F(0)
    law: dict[tuple[int, int], Fraction] = {}
    for tup in itertools.product(range(m), repeat=n + step * k):
        prob = F(1)
        for j in tup:
            prob *= pmf[j]
        if prob == 0:
            continue
        # (finish time, launch sequence, length index, launch step)
        pending = [(tup[i] + 1, i, tup[i], 0) for i in range(n)]
        seq = n
        for j in range(step + 1):
            sign = -1 if newest_first else 1
            pending.sort(key=lambda x: (x[0], sign * x[1]))
            batch, pending = pending[:k], pending[k:]
            end = batch[-1][0]
            if j == step:
                break
            for _ in range(k):
                pending.append((end + tup[seq] + 1, seq, tup[seq], j + 1))
                seq += 1
        est = [sum((rbar[x[2]] * scores[x[2]][c] for x in batch), F(0)) / k for c in range(d)]
        noise = sum(
            (var[x[2]] * sum((scores[x[2]][c] ** 2 for c in range(d)), F(0)) for x in batch), F(0)
        ) / (k * k)
        mean = [a + prob * e for a, e in zip(mean, est, strict=True)]
        second += prob * (sum((e * e for e in est), F(0)) + noise)
        for x in batch:
            key = (step - x[3], x[2])
            law[key] = law.get(key, F(0)) + prob / k
    return mean, second - sum((a * a for a in mean), F(0)), law


def _check_carry_against_brute_force(n: int, k: int, step: int, newest_first: bool) -> None:
    h = [F(1, 3), F(1, 2), F(1)]
    p, s = _tabular(h)
    q = [F(1, 4), F(1, 2), F(3, 4)]
    got = lrn.first_k_carry_gradient(p, s, q, n=n, k=k, step=step)
    mean, trace, law = _carry_brute_force(p, s, q, n=n, k=k, step=step, newest_first=newest_first)
    assert list(got.mean) == mean
    assert got.trace_variance == trace
    for (age, j), x in law.items():
        assert got.trained_law[age, j] == x
    assert sum(law.values()) == got.trained_law.sum() == 1


@pytest.mark.parametrize(("n", "k", "step"), [(2, 1, 0), (2, 1, 3), (3, 1, 3), (3, 2, 2)])
def test_carried_first_k_gradient_equals_brute_force_enumeration(n: int, k: int, step: int) -> None:
    _check_carry_against_brute_force(n, k, step, newest_first=False)


def test_carried_first_k_brute_force_rejects_the_wrong_tie_rule() -> None:
    # newest-first at equal finishing times changes which rollout a full batch carries
    rejects(_check_carry_against_brute_force, 3, 2, 2, True)


@given(rational_hazards(max_length=3), st.sampled_from([(2, 1), (3, 2), (4, 3)]), st.data())
def test_carried_leftovers_train_the_launched_law_with_mean_staleness_n_minus_k_over_k(
    h: list[Fraction], nk: tuple[int, int], data: st.DataObject
) -> None:
    # claim LRN5: in the stationary chain every launched rollout is trained once, so the trained
    # length law is p and the uncorrected gradient is the on-policy one; by Little's law the n − k
    # carried rollouts each add one version of staleness per step: E[s] = (n − k)/k
    # (the chain of n − k = 1 carried rollout keeps the exact solve cheap; the claim is general)
    n, k = nk
    p, s = _tabular(h)
    q = data.draw(rational_qualities(len(h)))
    c = lrn.first_k_carry_gradient(p, s, q, n=n, k=k)
    assert list(c.trained_law.sum(axis=0)) == list(p)
    assert list(c.mean) == list(lrn.policy_gradient(p, s, q).mean)
    ages = sum((a * x for a, row in enumerate(c.trained_law) for x in row), F(0))
    assert ages == F(n - k, k)
    assert c.step_time > 0


def test_carry_properties_reject_dropped_leftovers_and_the_cold_start() -> None:
    # wrong variants of the stationary claim: dropping the leftovers (plain first k) and the first
    # batch of a cold start are short-biased
    h = [F(1, 3), F(1, 2), F(1)]
    p, s = _tabular(h)
    q = [F(1, 4), F(1, 2), F(3, 4)]
    on = list(lrn.policy_gradient(p, s, q).mean)
    assert list(lrn.first_k_gradient(p, s, q, n=3, k=2).mean) != on
    cold = lrn.first_k_carry_gradient(p, s, q, n=3, k=2, step=0)
    assert list(cold.trained_law.sum(axis=0)) == list(refimpl.selected_pmf(p, n=3, k=2))
    assert list(cold.mean) != on


# ---------------------------------------------------------------------------------------------
# direction of the length bias (claim LRN4)
# ---------------------------------------------------------------------------------------------


@given(rational_hazards(max_length=4), st.integers(2, 3), st.data())
def test_length_neutral_reward_under_first_k_pushes_towards_shorter_outputs(
    h: list[Fraction], n: int, data: st.DataObject
) -> None:
    # one parameter: the common logit of every hazard (features all ones); a constant positive
    # reward has on-policy gradient 0, and first-k's gradient points to shorter outputs
    k = data.draw(st.integers(1, n - 1))
    m = len(h)
    s = lrn.token_scores(h, [[1]] * m).sum(axis=1)
    p = lrn.hazard_length_pmf(h)
    q = [F(1, 2)] * m
    assert list(lrn.policy_gradient(p, s, q).mean) == [0]
    bias = lrn.first_k_gradient(p, s, q, n=n, k=k).mean
    along = (bias * lrn.length_gradient(p, s)).sum()
    # strictly negative unless the law is degenerate (one length carries all the mass)
    assert along <= 0
    if sum(1 for x in p if x > 0) > 1:
        assert along < 0


def test_direction_of_bias_rejects_a_negative_advantage() -> None:
    # the condition of LRN4 is on (R̄ − b)·s: a baseline above every reward makes the advantage
    # negative, (R̄ − b)·s non-decreasing, and the bias then pushes towards *longer* outputs
    h = [F(1, 3), F(1, 2), F(1)]
    s = lrn.token_scores(h, [[1]] * 3).sum(axis=1)
    p = lrn.hazard_length_pmf(h)
    q = [F(1, 4)] * 3
    bias = lrn.first_k_gradient(p, s, q, n=3, k=1, baseline=F(1, 2)).mean
    assert list(lrn.policy_gradient(p, s, q, baseline=F(1, 2)).mean) == [0]
    assert (bias * lrn.length_gradient(p, s)).sum() > 0


# ---------------------------------------------------------------------------------------------
# asynchronous dispatch: the fluid model and the corrections
# ---------------------------------------------------------------------------------------------

PHI = lrn.length_features(10, degree=1)
Q10 = 0.9 * (1 - np.exp(-np.arange(1, 11) / 4.0))
THETA = np.array([-1.2, 0.4])


def _on_policy(theta: np.ndarray = THETA, penalty: float = 0.0) -> np.ndarray:
    h = lrn.stop_hazard(theta, PHI)
    return np.asarray(
        lrn.policy_gradient(
            lrn.hazard_length_pmf(h), lrn.token_scores(h, PHI).sum(axis=1), Q10, penalty=penalty
        ).mean,
        dtype=np.float64,
    )


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("correction", lrn.CORRECTIONS)
def test_without_lag_every_correction_is_the_on_policy_gradient(correction: str) -> None:
    g = lrn.async_gradient(THETA, PHI, Q10, slots=8, batch=4, correction=correction, penalty=0.01)
    np.testing.assert_allclose(g.mean, _on_policy(penalty=0.01), rtol=1e-12, atol=1e-15)


def test_stale_behaviour_biases_the_uncorrected_gradient_and_sequence_is_restores_its_direction() -> (
    None
):
    lag = np.array([0.3, -0.2])
    on = _on_policy()
    none = lrn.async_gradient(THETA, PHI, Q10, slots=8, batch=4, lag=lag).mean
    seq = lrn.async_gradient(THETA, PHI, Q10, slots=8, batch=4, lag=lag, correction="sequence_is")
    assert _cos(none, on) < 1 - 1e-3
    assert _cos(seq.mean, on) == pytest.approx(1.0, abs=1e-12)


def test_token_level_corrections_do_not_remove_the_staleness_bias() -> None:
    lag = np.array([0.3, -0.2])
    on = _on_policy()
    for corr in ("token_tis", "decoupled_ppo"):
        g = lrn.async_gradient(
            THETA, PHI, Q10, slots=8, batch=4, lag=lag, correction=corr, cap=1e6
        ).mean
        assert _cos(g, on) < 1 - 1e-6, corr
    # a band no ratio leaves: IcePop is uncapped token IS, biased the same way
    wide = lrn.async_gradient(
        THETA, PHI, Q10, slots=8, batch=4, lag=lag, correction="icepop", low=1e-6, high=1e6
    ).mean
    assert _cos(wide, on) < 1 - 1e-6


def test_capped_sequence_level_corrections_are_biased_and_uncapped_ones_are_not() -> None:
    # a cap no sequence ratio reaches makes sequence TIS the full sequence ratio (direction exact);
    # a cap of 1 truncates every up-weighted sequence and leaves a bias; the geometric mean is not
    # the sequence ratio even uncapped
    lag = np.array([0.3, -0.2])
    on = _on_policy()
    args: dict[str, Any] = {"slots": 8, "batch": 4, "lag": lag}
    free = lrn.async_gradient(THETA, PHI, Q10, correction="sequence_tis", cap=1e12, **args).mean
    exact = lrn.async_gradient(THETA, PHI, Q10, correction="sequence_is", **args).mean
    np.testing.assert_allclose(free, exact, rtol=1e-12)
    tight = lrn.async_gradient(THETA, PHI, Q10, correction="sequence_tis", cap=1.0, **args).mean
    assert _cos(tight, on) < 1 - 1e-6
    geo = lrn.async_gradient(THETA, PHI, Q10, correction="geometric", cap=1e12, **args).mean
    assert _cos(geo, on) < 1 - 1e-6


def test_a_staleness_mask_without_lag_is_the_length_bias_of_the_fluid_keep_law() -> None:
    h = lrn.stop_hazard(THETA, PHI)
    p = lrn.hazard_length_pmf(h)
    s = lrn.token_scores(h, PHI).sum(axis=1)
    delta = lrn.fluid_step_time(p, slots=8, batch=4, eta=0)
    keep = refimpl.fluid_keep_probability(np.arange(1, 11), step_time=delta, eta=0)
    q = p * keep / (p @ keep)
    g = lrn.async_gradient(THETA, PHI, Q10, slots=8, batch=4, eta=0).mean
    np.testing.assert_allclose(g, lrn.gradient_moments(q, s, Q10).mean, rtol=1e-12)
    # the fixed point: Δ = B E[L] / (N E[keep])
    assert delta == pytest.approx(4 * lrn.expected_length(p) / (8 * (p @ keep)), rel=1e-12)
    # a bound no rollout reaches changes nothing
    big = lrn.async_gradient(THETA, PHI, Q10, slots=8, batch=4, eta=50).mean
    np.testing.assert_allclose(big, _on_policy(), rtol=1e-12)


def test_fluid_staleness_pmf_has_mean_length_over_step_time() -> None:
    ell = np.arange(1, 11, dtype=np.float64)
    cond = lrn.fluid_staleness_pmf(ell, step_time=2.5, max_staleness=4)
    np.testing.assert_allclose(cond.sum(axis=1), 1.0)
    np.testing.assert_allclose(cond @ np.arange(5), ell / 2.5, rtol=1e-12)
    with pytest.raises(ValueError, match="max_staleness must cover"):
        lrn.fluid_staleness_pmf(ell, step_time=2.5, max_staleness=3)


# ---------------------------------------------------------------------------------------------
# training through the simulator
# ---------------------------------------------------------------------------------------------

PHI8 = lrn.length_features(8, degree=1)
Q8 = 0.9 * (1 - np.exp(-np.arange(1, 9) / 3.0))


def _run(**kw: Any) -> lrn.TrainingRun:
    args: dict[str, Any] = {
        "slots": 4,
        "batch": 4,
        "steps": 12,
        "learning_rate": 1.0,
        "penalty": 0.02,
        "seed": 5,
        # the mechanics under test are those of the uncorrected batch-baseline estimator
        "correction": "none",
        "baseline": "batch",
        "allow_biased": True,
    }
    args.update(kw)
    return lrn.train_policy(np.array([-1.0, 0.0]), PHI8, Q8, **args)


def test_training_is_bit_for_bit_reproducible() -> None:
    a = _run(partial="keep_kv", correction="token_tis")
    b = _run(partial="keep_kv", correction="token_tis")
    assert a.thetas.tobytes() == b.thetas.tobytes()
    assert a.publish_times.tobytes() == b.publish_times.tobytes()
    c = _run(partial="keep_kv", correction="token_tis", seed=6)
    assert a.thetas.tobytes() != c.thetas.tobytes()


@pytest.mark.parametrize("partial", ["none", "keep_kv"])
def test_every_rollout_length_is_what_its_token_versions_decide(partial: str) -> None:
    run = _run(partial=partial)
    tr = run.trace
    hazards = np.stack([lrn.stop_hazard(t, PHI8) for t in run.thetas])
    tok, _ = lrn_training._uniforms(5, 4, int(tr.index.max()) + 1, 8)
    mixed = 0
    for row in range(len(tr)):
        starts, versions = tr.token_versions(row)
        mixed += len(versions) > 1
        u = tok[tr.slot[row], tr.index[row]]
        ell = 8
        for t in range(1, 9):
            v = versions[np.searchsorted(starts, t - 1, side="right") - 1]
            if u[t - 1] < hazards[v][t - 1]:
                ell = t
                break
        assert tr.length[row] == ell
    assert (mixed > 0) == (partial == "keep_kv")


def test_synchronous_training_is_plain_on_policy_sgd_on_the_simulated_batches() -> None:
    run = _run(mode="sync")
    tr = run.trace
    order = tr.training_order()
    assert np.all(tr.staleness[order] == 0)
    _, suc = lrn_training._uniforms(5, 4, int(tr.index.max()) + 1, 8)
    theta = np.array([-1.0, 0.0])
    for j in range(12):
        rows = order[tr.step[order] == j]
        h = lrn.stop_hazard(theta, PHI8)
        s = lrn.token_scores(h, PHI8).sum(axis=1)
        ell = tr.length[rows].astype(int)
        r = (suc[tr.slot[rows], tr.index[rows]] < Q8[ell - 1]) - 0.02 * ell
        theta = theta + 1.0 * ((r - r.mean()) @ s[ell - 1]) / 4
        np.testing.assert_allclose(run.thetas[j + 1], theta, rtol=1e-12, atol=1e-14)


def test_exact_curves_are_those_of_the_trained_parameters() -> None:
    run = _run(eta=0)
    for th, el, j in zip(run.thetas, run.mean_length, run.expected_reward, strict=True):
        p = lrn.hazard_length_pmf(lrn.stop_hazard(th, PHI8))
        assert el == pytest.approx(lrn.expected_length(p), rel=1e-14)
        assert j == pytest.approx(lrn.mean_reward(p, Q8, penalty=0.02), rel=1e-14)
    tr = run.trace
    order = tr.training_order()
    assert np.all(tr.staleness[order] <= 0)


def test_training_arguments_are_validated() -> None:
    with pytest.raises(ValueError, match="correction must be one of"):
        _run(correction="horvitz_thompson")
    with pytest.raises(ValueError, match="baseline must be"):
        _run(baseline="mean")


def test_the_lab_section_flags_a_first_k_gradient_without_length_bias(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    # the lab's closed-form checks can fail: a first-k gradient that forgets the length bias
    # (the on-policy gradient for every correction) disagrees with the simulated batches
    from refimpl.lab import learning_exact as lab
    from refimpl.lab import learning_policy as lab_policy
    from refimpl.lab.config import lab_config
    from refimpl.lab.report import Section

    config = lab_config(quick=True, seed=0)
    q = lab_policy.quality()
    pol = lab_policy._policy(lab_policy.THETA_FIXED, q)

    def run(checks: Any = lab._first_k_checks) -> set[str]:
        section = Section(key="learning", number=1, title="t", docs=(), figures_dir=tmp_path)
        checks(section, config, q, pol)
        return {c.name for c in section.checks if not c.passed}

    assert run() == set()
    assert run(lab._carry_checks) == set()

    def unbiased(pmf: Any, scores: Any, quality: Any, **kw: Any) -> lrn.GradientMoments:
        for key in ("n", "k", "correction", "clip"):
            kw.pop(key, None)
        return lrn.policy_gradient(pmf, scores, quality, **kw)

    real_first_k = lrn.first_k_gradient
    monkeypatch.setattr(lrn, "first_k_gradient", unbiased)
    assert {"first-k-none-0", "first-k-hajek-0", "first-k-clipped_ht-0"} <= run()

    # wrong variant of the carried-leftover chain: the dropped-leftover law (plain first k)
    real_carry = lrn.first_k_carry_gradient

    def dropped(pmf: Any, scores: Any, quality: Any, **kw: Any) -> lrn.CarryMoments:
        biased = real_first_k(pmf, scores, quality, **kw)
        return real_carry(pmf, scores, quality, **kw)._replace(mean=biased.mean)

    monkeypatch.setattr(lrn, "first_k_gradient", real_first_k)
    monkeypatch.setattr(lrn, "first_k_carry_gradient", dropped)
    assert "first-k-carry-0" in run(lab._carry_checks)


@pytest.mark.parametrize("correction", ["none", "horvitz_thompson", "hajek", "clipped_ht"])
def test_first_k_training_applies_the_length_bias_correction_to_the_simulated_batches(
    correction: str,
) -> None:
    run = _run(mode="first_k", slots=4, batch=2, launch=4, correction=correction)
    tr = run.trace
    order = tr.training_order()
    _, suc = lrn_training._uniforms(5, 4, int(tr.index.max()) + 1, 8)
    theta = np.array([-1.0, 0.0])
    for j in range(12):
        rows = order[tr.step[order] == j]
        h = lrn.stop_hazard(theta, PHI8)
        s = lrn.token_scores(h, PHI8).sum(axis=1)
        ell = tr.length[rows].astype(int)
        r = (suc[tr.slot[rows], tr.index[rows]] < Q8[ell - 1]) - 0.02 * ell
        pi = refimpl.inclusion_probability_pmf(lrn.hazard_length_pmf(h), n=4, k=2)
        ht = 2 / (4 * pi[ell - 1])
        w = {"none": np.ones(2), "horvitz_thompson": ht, "clipped_ht": np.minimum(ht, 2.0)}.get(
            correction
        )
        if w is None:  # Hájek: self-normalised
            w = 2 * (1 / pi[ell - 1]) / (1 / pi[ell - 1]).sum()
        theta = theta + 1.0 * ((w * (r - r.mean())) @ s[ell - 1]) / 2
        np.testing.assert_allclose(run.thetas[j + 1], theta, rtol=1e-12, atol=1e-14)


# ---------------------------------------------------------------------------------------------
# exact asynchronous corrections and inverse propensity for the mask
# ---------------------------------------------------------------------------------------------

H5 = [F(1, 4), F(1, 3), F(1, 2), F(2, 5), F(1)]
EYE5 = [[int(i == j) for j in range(5)] for i in range(5)]
Q5 = [F(0), F(1, 5), F(1, 2), F(4, 5), F(9, 10)]
#: Per-position exponents c_t: the behaviour s versions stale has odds h/(1−h) · 2^(−s c_t), so its
#: hazards stay rational and equal the float model's σ(logit h − s·c·log 2).
SHIFT = [1, -1, 2, 0, 0]


def _stale(s: int) -> list[Fraction]:
    out = [h / (h + (1 - h) * F(2) ** (s * c)) for h, c in zip(H5[:-1], SHIFT, strict=False)]
    return [*out, F(1)]


def _float_args() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    h = np.array([float(x) for x in H5[:-1]])
    theta = np.concatenate([np.log(h / (1 - h)), [0.0]])
    return theta, np.asarray(SHIFT, dtype=np.float64) * np.log(2.0), np.eye(5)


@pytest.mark.parametrize("correction", lrn.EXACT_CORRECTIONS)
@pytest.mark.parametrize(("eta", "ipw"), [(None, False), (0, False), (1, False), (1, True)])
def test_exact_async_gradient_matches_the_float_fluid_model(
    correction: str, eta: int | None, ipw: bool
) -> None:
    # float64 sums over ≤ M·(S+1) = 5·6 terms of logistic hazards: 1e-12 relative is ~1e4 ulps
    stale = [_stale(s) for s in range(6)]
    ex = lrn.async_gradient_exact(
        H5,
        stale,
        EYE5,
        Q5,
        slots=3,
        batch=2,
        eta=eta,
        correction=correction,
        mask_ipw=ipw,
        penalty=F(1, 50),
        baseline=F(1, 3),
        cap=F(3, 2),
        low=F(2, 3),
        high=F(3, 2),
    )
    assert all(isinstance(x, Fraction) for x in ex.mean)
    theta, lag, phi = _float_args()
    fl = lrn.async_gradient(
        theta,
        phi,
        np.array([float(x) for x in Q5]),
        slots=3,
        batch=2,
        eta=eta,
        lag=lag,
        correction=correction,
        mask_ipw=ipw,
        penalty=0.02,
        baseline=1 / 3,
        cap=1.5,
        low=2 / 3,
        high=1.5,
    )
    np.testing.assert_allclose(
        fl.mean, np.asarray(ex.mean, dtype=np.float64), rtol=1e-12, atol=1e-15
    )
    assert float(fl.trace_variance) == pytest.approx(float(ex.trace_variance), rel=1e-12)


def test_exact_and_float_async_models_disagree_on_a_behaviour_one_version_off() -> None:
    # wrong variant of the agreement test: behaviours one version staler than the float model's
    off = [H5] + [_stale(s + 1) for s in range(1, 6)]
    ex = lrn.async_gradient_exact(H5, off, EYE5, Q5, slots=3, batch=2)
    theta, lag, phi = _float_args()
    fl = lrn.async_gradient(theta, phi, np.array([float(x) for x in Q5]), slots=3, batch=2, lag=lag)
    assert not np.allclose(fl.mean, np.asarray(ex.mean, dtype=np.float64), rtol=1e-6)


def test_exact_sequence_is_restores_the_direction_and_token_tis_does_not() -> None:
    stale = [_stale(s) for s in range(6)]
    p, s = _tabular(H5)
    on = list(lrn.policy_gradient(p, s, Q5).mean)
    seq = lrn.async_gradient_exact(H5, stale, EYE5, Q5, slots=3, batch=2, correction="sequence_is")
    ratios = {a / b for a, b in zip(seq.mean, on, strict=True) if b}
    assert len(ratios) == 1
    assert all(a == 0 for a, b in zip(seq.mean, on, strict=True) if not b)
    tis = lrn.async_gradient_exact(
        H5, stale, EYE5, Q5, slots=3, batch=2, correction="token_tis", cap=F(10**6)
    )
    assert len({a / b for a, b in zip(tis.mean, on, strict=True) if b}) > 1
    with pytest.raises(ValueError, match="geometric's l-th root is irrational"):
        lrn.async_gradient_exact(H5, stale, EYE5, Q5, slots=3, batch=2, correction="geometric")


def _mask_ipw_target(eta: int, slots: int, batch: int) -> list[Fraction]:
    """Σ over the lengths the mask can keep of p(ℓ) R̄(ℓ) s(ℓ): written from the claim, not the code."""
    p, s = _tabular(H5)
    delta = lrn.fluid_step_time(p, slots=slots, batch=batch, eta=eta)
    return [
        sum((p[j] * Q5[j] * s[j][c] for j in range(5) if j + 1 < (eta + 1) * delta), F(0))
        for c in range(5)
    ]


@pytest.mark.parametrize(("eta", "slots"), [(0, 2), (0, 3), (0, 6), (1, 6), (2, 8)])
def test_mask_ipw_recovers_every_length_the_mask_can_keep(eta: int, slots: int) -> None:
    stale = [H5] * 12
    got = lrn.async_gradient_exact(
        H5, stale, EYE5, Q5, slots=slots, batch=2, eta=eta, mask_ipw=True
    )
    assert list(got.mean) == _mask_ipw_target(eta, slots, 2)
    none = lrn.async_gradient_exact(H5, stale, EYE5, Q5, slots=slots, batch=2, eta=eta)
    assert list(none.mean) != list(got.mean)


def test_mask_ipw_properties_reject_the_wrong_bound_and_a_tight_clip() -> None:
    stale = [H5] * 12
    got = lrn.async_gradient_exact(H5, stale, EYE5, Q5, slots=6, batch=2, eta=0, mask_ipw=True)
    # wrong variants: the lengths another step time keeps (3 slots: ℓ ≤ 4; 6 slots: only
    # ℓ ≤ 3), and the on-policy gradient itself: IPW cannot bring back what the mask never keeps
    assert list(got.mean) != _mask_ipw_target(0, 3, 2)
    p, s = _tabular(H5)
    assert list(got.mean) != list(lrn.policy_gradient(p, s, Q5).mean)
    clipped = lrn.async_gradient_exact(
        H5, stale, EYE5, Q5, slots=6, batch=2, eta=0, mask_ipw=True, ipw_clip=F(1)
    )
    assert list(clipped.mean) != list(got.mean)
    assert clipped.trace_variance < got.trace_variance
    with pytest.raises(ValueError, match="mask_ipw must need a mask"):
        lrn.async_gradient_exact(H5, stale, EYE5, Q5, slots=3, batch=2, mask_ipw=True)


@given(rational_hazards(max_length=6), st.integers(0, 3), st.integers(1, 6), st.integers(1, 4))
def test_exact_fluid_step_time_solves_the_fixed_point(
    h: list[Fraction], eta: int, slots: int, batch: int
) -> None:
    p = lrn.hazard_length_pmf(h)
    delta = lrn.fluid_step_time(p, slots=slots, batch=batch, eta=eta)
    kept = sum(
        (x * min(max(eta + 1 - F(i + 1) / delta, F(0)), F(1)) for i, x in enumerate(p)), F(0)
    )
    assert isinstance(delta, Fraction)
    assert delta * kept == F(batch) * lrn.expected_length(p) / slots
    assert float(delta) == pytest.approx(
        lrn.fluid_step_time([float(x) for x in p], slots=slots, batch=batch, eta=eta), rel=1e-12
    )


# ---------------------------------------------------------------------------------------------
# durations, carried leftovers in training, and the lab's exact conditional checks
# ---------------------------------------------------------------------------------------------


def test_durations_rescale_time_and_keep_what_is_trained() -> None:
    # one unit per token is the default; a uniform scale changes the clock, not the order
    base = _run()
    same = _run(durations=np.arange(1.0, 9.0))
    assert same.thetas.tobytes() == base.thetas.tobytes()
    assert same.publish_times.tobytes() == base.publish_times.tobytes()
    slow = _run(durations=3.0 * np.arange(1.0, 9.0))
    np.testing.assert_array_equal(slow.thetas, base.thetas)
    np.testing.assert_allclose(slow.publish_times, 3.0 * base.publish_times, rtol=1e-15)
    # wrong variant: a duration law that is not a rescaling changes which rollouts finish first
    bent = _run(durations=np.array([1.0, 2, 3, 4, 50, 60, 70, 80]))
    assert not np.array_equal(bent.thetas, base.thetas)
    with pytest.raises(ValueError, match="durations must have 8 positive non-decreasing"):
        _run(durations=np.array([2.0, 1, 3, 4, 5, 6, 7, 8]))


def test_carried_leftovers_train_every_rollout_once_with_the_version_that_launched_it() -> None:
    run = _run(mode="first_k", slots=3, batch=1, launch=3, leftovers="carry", steps=20)
    tr = run.trace
    order = tr.training_order()
    assert np.unique(order).size == order.size
    stale = np.asarray(tr.staleness[order])
    # carried rollouts are stale (launched by an older version); dropped ones never are
    assert stale.max() >= 1
    assert np.array_equal(stale, tr.step[order] - tr.launch_version[order])
    dropped = _run(mode="first_k", slots=3, batch=1, launch=3, steps=20).trace
    assert int(dropped.staleness[dropped.training_order()].max()) == 0


def test_conditional_mean_and_variance_equal_the_enumeration_of_every_reward() -> None:
    # exact oracle: every success pattern of 4 samples (2 batches of 2), in Fractions
    from refimpl.lab import learning_exact as lab
    from refimpl.lab import learning_policy as lab_policy

    q = lab_policy.quality()
    ell = np.array([3, 7, 9, 16])
    scores = np.array([[0.5, -1.0], [2.0, 0.25], [-1.5, 1.0], [0.75, 3.0]])
    b = 0.2
    mean, var = lab._conditional(ell, scores, q, b, batch=2, batches=2)
    qf = [F(float(q[e - 1])) for e in ell]
    sf = [[F(float(x)) for x in row] for row in scores]
    m_ex = [ZERO, ZERO]
    s2_ex = [ZERO, ZERO]
    for succ in itertools.product((0, 1), repeat=4):
        pr = F(1)
        for s_, qq in zip(succ, qf, strict=True):
            pr *= qq if s_ else 1 - qq
        for c in range(2):
            g = (
                sum(
                    (
                        (s_ - F(lab_policy.PENALTY) * int(e) - F(b)) * row[c]
                        for s_, e, row in zip(succ, ell, sf, strict=True)
                    ),
                    ZERO,
                )
                / 4
            )
            m_ex[c] += pr * g
            s2_ex[c] += pr * g * g
    for c in range(2):
        assert mean[c] == pytest.approx(float(m_ex[c]), rel=1e-12)
        assert var[c] == pytest.approx(float(s2_ex[c] - m_ex[c] ** 2), rel=1e-12)
    # wrong variant: the samples read as one batch of 2 (the sum of two batch means)
    w_mean, w_var = lab._conditional(ell, scores, q, b, batch=2, batches=1)
    assert w_mean[0] != pytest.approx(float(m_ex[0]), rel=1e-3)
    assert w_var[0] != pytest.approx(float(s2_ex[0] - m_ex[0] ** 2), rel=1e-3)


def test_moving_policy_check_passes_and_tells_the_corrections_apart(tmp_path: Any) -> None:
    # each correction's simulated gradients agree with their own exact conditional mean, and the
    # same samples weighted by any other correction's weights are rejected (the wrong variants)
    from refimpl.lab import learning_moving as lab_moving
    from refimpl.lab import learning_policy as lab_policy
    from refimpl.lab._common import Z_TOL
    from refimpl.lab.config import lab_config
    from refimpl.lab.report import Section

    config = lab_config(quick=True, seed=0)
    q = lab_policy.quality()
    pol = lab_policy._policy(lab_policy.THETA_FIXED, q)
    section = Section(key="learning", number=1, title="t", docs=(), figures_dir=tmp_path)
    lab_moving._lag_checks(section, config, q, pol)
    assert [c.name for c in section.checks if not c.passed] == []
    assert len(section.checks) == 2 * len(lab_moving.LAG_CORRECTIONS)
    sep = section.metrics["lag_separation"]
    for i, corr in enumerate(lab_moving.LAG_CORRECTIONS):
        assert sep[corr][i] <= Z_TOL
        assert all(d > Z_TOL for k, d in enumerate(sep[corr]) if k != i)


def test_carried_leftovers_under_a_moving_policy_reject_scores_at_the_launching_version(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    # wrong variant of the trainer: each carried sample scored at the version that launched it
    # (its behaviour) instead of the trainer's; the exact conditional check must reject it (the
    # unpatched run passes in the quick lab: tests/test_lab.py::test_closed_forms_agree...)
    from refimpl.lab import learning_moving as lab_moving
    from refimpl.lab import learning_policy as lab_policy
    from refimpl.lab.config import lab_config
    from refimpl.lab.report import Section

    real = lrn_training._sample_scores

    def at_launch(
        version: int, hazards: Any, ls: Any, lc: Any, phi: Any, versions: Any, lengths: Any, *a: Any
    ) -> Any:
        out = np.empty((lengths.size, phi.shape[1]))
        launch = versions[:, 0]
        for v in np.unique(launch):
            rows = launch == v
            out[rows] = real(int(v), hazards, ls, lc, phi, versions[rows], lengths[rows], *a)
        return out

    # the fixed-θ chain (a model beside the check, half a second per solve) is not under test here
    monkeypatch.setattr(
        lrn,
        "first_k_carry_gradient",
        lambda *a, **k: SimpleNamespace(mean=np.zeros(2), trained_law=np.ones((1, 1))),
    )
    monkeypatch.setattr(lrn_training, "_sample_scores", at_launch)
    config = lab_config(quick=True, seed=0)
    q = lab_policy.quality()
    pol = lab_policy._policy(lab_policy.THETA_FIXED, q)
    section = Section(key="learning", number=1, title="t", docs=(), figures_dir=tmp_path)
    lab_moving._carry_lag_checks(section, config, q, pol)
    assert {c.name for c in section.checks if not c.passed} == {"carry-lag-0", "carry-lag-1"}


def test_unclipped_mask_ipw_is_checked_exactly_and_rejects_clipped_weights(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    # the lab's exact check of the unclipped mask IPW (finite where the fluid mask keeps ℓ)
    # passes, and a library whose unclipped weights were silently clipped at 4 fails it
    from refimpl.lab import learning_exact as lab
    from refimpl.lab import learning_policy as lab_policy
    from refimpl.lab.config import lab_config
    from refimpl.lab.report import Section

    config = lab_config(quick=True, seed=0)
    q = lab_policy.quality()
    pol = lab_policy._policy(lab_policy.THETA_FIXED, q)

    def failed() -> set[str]:
        section = Section(key="learning", number=1, title="t", docs=(), figures_dir=tmp_path)
        lab._async_checks(section, config, q, pol)
        return {c.name for c in section.checks if not c.passed}

    assert failed() == set()
    real = lrn.async_gradient

    def clipped(*a: Any, **kw: Any) -> lrn.GradientMoments:
        if kw.get("mask_ipw") and kw.get("ipw_clip") is None:
            kw["ipw_clip"] = 4.0
        return real(*a, **kw)

    monkeypatch.setattr(lrn, "async_gradient", clipped)
    assert {"mask-ipw-exact-eta0-0", "mask-ipw-exact-eta1-0"} <= failed()
