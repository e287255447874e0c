"""Properties of refimpl.dispatch, checked against brute-force enumeration in exact arithmetic.

The oracle enumerates every ``n``-tuple of launched lengths over a small support (ties included) with
``fractions.Fraction`` probabilities; it never uses the multinomial or tie-interval formulas. Every
property is also shown to *reject* a deliberately wrong variant (``test_*_rejects_*``), so none of
them can pass vacuously.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import scipy.integrate
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

import refimpl

# ---------------------------------------------------------------------------------------------
# strategies and the brute-force oracle
# ---------------------------------------------------------------------------------------------


@st.composite
def exact_pmfs(draw: st.DrawFn, max_support: int = 4) -> list[Fraction]:
    """A pmf of Fractions over 1..M (zeros allowed, at least one positive entry)."""
    size = draw(st.integers(1, max_support))
    weights = draw(st.lists(st.integers(0, 6), min_size=size, max_size=size))
    if sum(weights) == 0:
        weights[draw(st.integers(0, size - 1))] = 1
    total = sum(weights)
    return [Fraction(w, total) for w in weights]


@st.composite
def launches(draw: st.DrawFn, max_n: int = 5) -> tuple[int, int]:
    n = draw(st.integers(1, max_n))
    return n, draw(st.integers(1, n))


def _tuples(pmf: Sequence[Fraction], n: int) -> list[tuple[Fraction, tuple[int, ...]]]:
    """Every n-tuple of lengths (0-based indices) with its probability."""
    support = [i for i, p in enumerate(pmf) if p > 0]
    out = []
    for tup in itertools.product(support, repeat=n):
        prob = Fraction(1)
        for i in tup:
            prob *= pmf[i]
        out.append((prob, tup))
    return out


def brute_inclusion(
    pmf: Sequence[Fraction],
    n: int,
    k: int,
    *,
    tie_share: Callable[[int, int, int], Fraction] | None = None,
) -> list[Fraction | None]:
    """π(ℓ) = P(rollout 0 trained | L_0 = ℓ) by enumeration; None where p(ℓ) = 0.

    Rollout 0 has ``a`` others strictly shorter and ``e`` equally long; a uniform tie-break puts it
    at each of the ``e + 1`` positions ``a, ..., a + e`` with equal chance; count the positions
    below ``k``.
    """
    share = tie_share or (
        lambda a, e, k_: Fraction(sum(1 for j in range(e + 1) if a + j < k_), e + 1)
    )
    joint = [Fraction(0)] * len(pmf)
    for prob, tup in _tuples(pmf, n):
        mine = tup[0]
        a = sum(1 for x in tup[1:] if x < mine)
        e = sum(1 for x in tup[1:] if x == mine)
        joint[mine] += prob * share(a, e, k)
    return [joint[i] / p if p > 0 else None for i, p in enumerate(pmf)]


def brute_selected(pmf: Sequence[Fraction], n: int, k: int) -> list[Fraction]:
    """q(ℓ) = E[#batch members of length ℓ]/k, the batch being the k shortest (a multiset)."""
    q = [Fraction(0)] * len(pmf)
    for prob, tup in _tuples(pmf, n):
        for i in sorted(tup)[:k]:
            q[i] += prob / k
    return q


def mean(pmf: Sequence[Fraction]) -> Fraction:
    return sum(((i + 1) * p for i, p in enumerate(pmf)), Fraction(0))


# ---------------------------------------------------------------------------------------------
# inclusion probability and the trained law against enumeration
# ---------------------------------------------------------------------------------------------


@given(exact_pmfs(), launches())
def test_inclusion_probability_pmf_equals_enumeration_of_every_tuple(
    pmf: list[Fraction], nk: tuple[int, int]
) -> None:
    n, k = nk
    found = refimpl.inclusion_probability_pmf(pmf, n=n, k=k)
    assert all(isinstance(x, Fraction) for x in found)
    for got, want in zip(found, brute_inclusion(pmf, n, k), strict=True):
        if want is not None:
            assert got == want


@given(exact_pmfs(), launches())
def test_inclusion_probability_at_zero_mass_is_the_continuous_limit(
    pmf: list[Fraction], nk: tuple[int, int]
) -> None:
    n, k = nk
    pi = refimpl.inclusion_probability_pmf(pmf, n=n, k=k)
    cdf = Fraction(0)
    for p, x in zip(pmf, pi, strict=True):
        if p == 0:  # P(Bin(n-1, F(ℓ)) <= k-1), computed from scipy's binomial cdf
            assert float(x) == pytest.approx(
                scipy.stats.binom.cdf(k - 1, n - 1, float(cdf)), rel=1e-12, abs=1e-15
            )
        cdf += p


@given(exact_pmfs(), launches())
def test_selected_pmf_equals_the_enumerated_batch_composition(
    pmf: list[Fraction], nk: tuple[int, int]
) -> None:
    n, k = nk
    assert refimpl.selected_pmf(pmf, n=n, k=k) == brute_selected(pmf, n, k)


@given(exact_pmfs(max_support=8), launches(max_n=12))
def test_selected_pmf_sums_to_one_exactly(pmf: list[Fraction], nk: tuple[int, int]) -> None:
    n, k = nk
    assert sum(refimpl.selected_pmf(pmf, n=n, k=k), Fraction(0)) == 1


@given(exact_pmfs(max_support=8), launches(max_n=12))
def test_float_mode_matches_exact_mode(pmf: list[Fraction], nk: tuple[int, int]) -> None:
    n, k = nk
    exact = refimpl.inclusion_probability_pmf(pmf, n=n, k=k)
    floats = refimpl.inclusion_probability_pmf(np.array([float(p) for p in pmf]), n=n, k=k)
    for e, f in zip(exact, floats, strict=True):
        assert f == pytest.approx(float(e), rel=1e-11, abs=1e-300)


def test_brute_force_oracle_rejects_wrong_tie_rules() -> None:
    """The enumeration oracle tells the uniform tie-break from ties broken toward the rollout and
    from an off-by-one batch size, so the equality property above can fail."""
    pmf = [Fraction(1, 3), Fraction(2, 3)]
    found = refimpl.inclusion_probability_pmf(pmf, n=3, k=2)
    toward = brute_inclusion(pmf, 3, 2, tie_share=lambda a, e, k: Fraction(int(a < k)))
    off_by_one = brute_inclusion(pmf, 3, 1)
    assert found != toward
    assert found != off_by_one
    assert found == brute_inclusion(pmf, 3, 2)


# ---------------------------------------------------------------------------------------------
# shape of the bias: q stochastically smaller, monotone in k and n, equality cases
# ---------------------------------------------------------------------------------------------


def _ratio_is_non_increasing(pmf: Sequence[Fraction], q: Sequence[Fraction]) -> bool:
    ratios = [x / p for x, p in zip(q, pmf, strict=True) if p > 0]
    return all(a >= b for a, b in itertools.pairwise(ratios))


@given(exact_pmfs(max_support=8), launches(max_n=12))
def test_q_over_p_is_non_increasing_so_q_is_stochastically_smaller(
    pmf: list[Fraction], nk: tuple[int, int]
) -> None:
    n, k = nk
    q = refimpl.selected_pmf(pmf, n=n, k=k)
    assert _ratio_is_non_increasing(pmf, q)
    cq = cp = Fraction(0)
    for x, p in zip(q, pmf, strict=True):  # F_q >= F_p everywhere
        cq, cp = cq + x, cp + p
        assert cq >= cp


def test_q_over_p_monotonicity_rejects_ties_broken_toward_the_long_rollout() -> None:
    pmf = [Fraction(1, 2), Fraction(1, 2)]
    # a wrong law: the *longest* k of n are trained (the tie rule reversed in time)
    wrong = refimpl.selected_pmf(pmf[::-1], n=3, k=1)[::-1]
    assert not _ratio_is_non_increasing(pmf, wrong)


@given(exact_pmfs(max_support=6), st.integers(2, 10))
def test_selected_mean_is_non_decreasing_in_k(pmf: list[Fraction], n: int) -> None:
    means = [mean(refimpl.selected_pmf(pmf, n=n, k=k)) for k in range(1, n + 1)]
    assert all(a <= b for a, b in itertools.pairwise(means))
    assert means[-1] == mean(pmf)


@given(exact_pmfs(max_support=6), st.integers(1, 5))
def test_selected_mean_is_non_increasing_in_n(pmf: list[Fraction], k: int) -> None:
    means = [mean(refimpl.selected_pmf(pmf, n=n, k=k)) for n in range(k, k + 6)]
    assert all(a >= b for a, b in itertools.pairwise(means))


def test_monotonicity_in_k_rejects_the_k_minus_one_variant() -> None:
    pmf = [Fraction(1, 4), Fraction(1, 4), Fraction(1, 2)]
    n = 4
    # the off-by-one variant (batch of k-1 when asked for k; k=1 gives the true law) breaks it
    wrong = [
        mean(refimpl.selected_pmf(pmf, n=n, k=max(k - 1, 1))) if k > 1 else mean(pmf)
        for k in range(1, n + 1)
    ]
    assert not all(a <= b for a, b in itertools.pairwise(wrong))


@given(exact_pmfs(max_support=6), launches(max_n=8))
def test_selected_mean_equals_true_mean_iff_k_is_n_or_law_is_degenerate(
    pmf: list[Fraction], nk: tuple[int, int]
) -> None:
    n, k = nk
    degenerate = sum(1 for p in pmf if p > 0) == 1
    bias = refimpl.length_bias(pmf, n=n, k=k)
    assert (bias.selected_mean == bias.true_mean) == (k == n or degenerate)
    assert bias.ratio <= 1
    assert (bias.total_variation == 0) == (k == n or degenerate)
    assert bias.kl_divergence >= 0


def test_length_bias_float_mode_matches_exact_mode() -> None:
    pmf = [Fraction(1, 10), Fraction(3, 10), Fraction(2, 5), Fraction(1, 5)]
    exact = refimpl.length_bias(pmf, n=6, k=3)
    floats = refimpl.length_bias([float(p) for p in pmf], n=6, k=3)
    for e, f in zip(exact, floats, strict=True):
        assert f == pytest.approx(float(e), rel=1e-12)


# ---------------------------------------------------------------------------------------------
# inverse-propensity correction: exact moments over the random batch
# ---------------------------------------------------------------------------------------------


def brute_estimator_moments(
    pmf: Sequence[Fraction], g: Sequence[Fraction], n: int, k: int, clip: Fraction
) -> dict[str, tuple[Fraction, Fraction]]:
    """(mean, variance) of HT, Hájek and clipped estimates by enumerating every n-tuple."""
    pi = brute_inclusion(pmf, n, k)
    out: dict[str, list[tuple[Fraction, Fraction]]] = {"ht": [], "hajek": [], "clipped": []}
    for prob, tup in _tuples(pmf, n):
        batch = sorted(tup)[:k]
        inv = [1 / Fraction(pi[i] or 0) for i in batch]
        w = [Fraction(k, n) * x for x in inv]
        out["ht"].append(
            (prob, sum((wi * g[i] for wi, i in zip(w, batch, strict=True)), Fraction(0)) / k)
        )
        out["hajek"].append(
            (prob, sum((x * g[i] for x, i in zip(inv, batch, strict=True)), Fraction(0)) / sum(inv))
        )
        out["clipped"].append(
            (
                prob,
                sum((min(wi, clip) * g[i] for wi, i in zip(w, batch, strict=True)), Fraction(0))
                / k,
            )
        )
    result = {}
    for name, pairs in out.items():
        m = sum((p * x for p, x in pairs), Fraction(0))
        result[name] = (m, sum((p * (x - m) ** 2 for p, x in pairs), Fraction(0)))
    return result


@given(exact_pmfs(), launches(max_n=4), st.data())
def test_estimator_moments_equal_enumeration_and_ht_is_exactly_unbiased(
    pmf: list[Fraction], nk: tuple[int, int], data: st.DataObject
) -> None:
    n, k = nk
    g = [Fraction(data.draw(st.integers(-3, 5))) for _ in pmf]
    clip = Fraction(data.draw(st.integers(1, 8)), 4)
    m = refimpl.ipw_estimator_moments(pmf, g, n=n, k=k, clip=clip)
    brute = brute_estimator_moments(pmf, g, n, k, clip)
    assert m.target == sum((p * x for p, x in zip(pmf, g, strict=True)), Fraction(0))
    assert m.horvitz_thompson.bias == 0
    assert (m.horvitz_thompson.mean, m.horvitz_thompson.variance) == brute["ht"]
    assert (m.hajek.mean, m.hajek.variance) == brute["hajek"]
    assert m.clipped is not None
    assert (m.clipped.mean, m.clipped.variance) == brute["clipped"]
    assert m.hajek.mse == m.hajek.variance + m.hajek.bias**2


@given(exact_pmfs(), launches(max_n=5), st.data())
def test_per_draw_variance_is_the_variance_of_w_g_under_q(
    pmf: list[Fraction], nk: tuple[int, int], data: st.DataObject
) -> None:
    n, k = nk
    g = [Fraction(data.draw(st.integers(-3, 5))) for _ in pmf]
    m = refimpl.ipw_estimator_moments(pmf, g, n=n, k=k)
    q = refimpl.selected_pmf(pmf, n=n, k=k)
    pi = refimpl.inclusion_probability_pmf(pmf, n=n, k=k)
    wg = [Fraction(k, n) / x * y if x > 0 else Fraction(0) for x, y in zip(pi, g, strict=True)]
    first = sum((a * b for a, b in zip(q, wg, strict=True)), Fraction(0))
    second = sum((a * b * b for a, b in zip(q, wg, strict=True)), Fraction(0))
    assert first == m.target  # E_q[w g] = E_p[g]
    assert m.per_draw_variance == second - first**2
    if k == 1:  # a batch of one is one draw from q
        assert m.horvitz_thompson.variance == m.per_draw_variance


@given(exact_pmfs(), launches(max_n=5), st.data())
def test_clipping_from_above_biases_non_negative_g_downward(
    pmf: list[Fraction], nk: tuple[int, int], data: st.DataObject
) -> None:
    n, k = nk
    g = [Fraction(data.draw(st.integers(0, 5))) for _ in pmf]
    m = refimpl.ipw_estimator_moments(pmf, g, n=n, k=k, clip=Fraction(1))
    assert m.clipped is not None
    assert m.clipped.bias <= 0


def test_clipping_property_rejects_clip_applied_from_below() -> None:
    pmf = [Fraction(1, 2), Fraction(1, 2)]
    g = [Fraction(1), Fraction(2)]
    n, k = 3, 2
    pi = refimpl.inclusion_probability_pmf(pmf, n=n, k=k)
    # wrong variant: max(w, c) instead of min(w, c), mean over the batch law by enumeration
    wrong_mean = Fraction(0)
    for prob, tup in _tuples(pmf, n):
        batch = sorted(tup)[:k]
        wrong_mean += prob * sum(max(Fraction(k, n) / pi[i], Fraction(1)) * g[i] for i in batch) / k
    assert wrong_mean - mean(pmf) > 0  # positive bias: the property above would fail


def test_batch_estimators_match_their_formulas() -> None:
    values = np.array([[1.0, 3.0], [2.0, 2.0]])
    pi = np.array([[1.0, 0.5], [0.5, 0.25]])
    ht = refimpl.horvitz_thompson_estimate(values, pi, n=4, k=2)
    np.testing.assert_allclose(ht, [(1 / 1 + 3 / 0.5) / 4, (2 / 0.5 + 2 / 0.25) / 4], rtol=1e-15)
    hj = refimpl.hajek_estimate(values, pi)
    np.testing.assert_allclose(hj, [(1 + 6) / (1 + 2), 2.0], rtol=1e-15)
    cl = refimpl.clipped_ipw_estimate(values, pi, n=4, k=2, clip=1.0)
    w = np.minimum(2 / (4 * pi), 1.0)
    np.testing.assert_allclose(cl, (w * values).sum(-1) / 2, rtol=1e-15)
    np.testing.assert_allclose(refimpl.ipw_weights(pi, n=4, k=2), 2 / (4 * pi), rtol=1e-15)


# ---------------------------------------------------------------------------------------------
# continuous laws
# ---------------------------------------------------------------------------------------------


@given(st.integers(1, 30), st.data())
def test_inclusion_probability_is_the_binomial_cdf(n: int, data: st.DataObject) -> None:
    k = data.draw(st.integers(1, n))
    cdf = np.array(data.draw(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=5)))
    found = refimpl.inclusion_probability(cdf, n=n, k=k)
    np.testing.assert_allclose(
        found, scipy.stats.binom.cdf(k - 1, n - 1, cdf), rtol=1e-11, atol=1e-300
    )


def test_continuous_inclusion_probability_averages_to_k_over_n() -> None:
    from scipy import integrate

    for n, k in [(8, 4), (20, 3), (5, 5), (50, 49)]:
        value, _ = integrate.quad(
            lambda u, n=n, k=k: float(refimpl.inclusion_probability(u, n=n, k=k)), 0, 1
        )
        assert value == pytest.approx(k / n, rel=1e-10)


def test_selected_mean_of_exponential_lengths_is_the_order_statistic_average() -> None:
    lam = 0.01
    dist = scipy.stats.expon(scale=1 / lam)
    for n, k in [(4, 1), (8, 4), (16, 15), (64, 16)]:
        h = [sum(Fraction(1, i) for i in range(1, m + 1)) for m in range(n + 1)]
        want = sum(float(h[n] - h[n - j]) for j in range(1, k + 1)) / (k * lam)
        assert refimpl.selected_mean(dist, n=n, k=k) == pytest.approx(want, rel=1e-9)
        assert refimpl.length_bias(dist, n=n, k=k).ratio == pytest.approx(want * lam, rel=1e-9)


def test_continuous_total_variation_and_kl_do_not_depend_on_the_law() -> None:
    laws = [scipy.stats.expon(scale=3.0), scipy.stats.lognorm(s=1.0, scale=np.exp(6.0))]
    a, b = (refimpl.length_bias(law, n=10, k=3) for law in laws)
    assert a.total_variation == pytest.approx(b.total_variation, rel=1e-12)
    assert a.kl_divergence == pytest.approx(b.kl_divergence, rel=1e-8)
    # and match a fine discretisation of the uniform law on (0, 1) in the u coordinate
    m = 4000
    fine = refimpl.length_bias(np.full(m, 1 / m), n=10, k=3)
    assert fine.total_variation == pytest.approx(a.total_variation, rel=1e-3)
    assert fine.kl_divergence == pytest.approx(a.kl_divergence, rel=1e-3)


def test_expected_max_and_speedup_closed_forms() -> None:
    for n in [1, 2, 7, 100, 1000]:
        h_n = math.fsum(1 / i for i in range(1, n + 1))
        assert refimpl.expected_max(scipy.stats.expon(scale=2.0), n=n) == pytest.approx(
            2 * h_n, rel=1e-9
        )
        assert refimpl.async_speedup(scipy.stats.expon(), n=n) == pytest.approx(h_n, rel=1e-9)
        a, b = 10.0, 30.0
        uniform = scipy.stats.uniform(loc=a, scale=b - a)
        assert refimpl.async_speedup(uniform, n=n) == pytest.approx(
            (a + (b - a) * n / (n + 1)) / ((a + b) / 2), rel=1e-9
        )


def test_expected_max_of_heavy_tailed_pareto_lengths() -> None:
    # Pareto(b) on [1, inf): E[max of n] = Γ(n+1) Γ(1-1/b) / Γ(n+1-1/b); the singular upper tail
    # takes the adaptive fallback of the quadrature.
    for b in (1.5, 3.0):
        for n in (1, 2, 50):
            want = math.exp(
                math.lgamma(n + 1) + math.lgamma(1 - 1 / b) - math.lgamma(n + 1 - 1 / b)
            )
            found = refimpl.expected_max(scipy.stats.pareto(b=b), n=n)
            assert found == pytest.approx(want, rel=1e-8)


# ---------------------------------------------------------------------------------------------
# censoring
# ---------------------------------------------------------------------------------------------


def brute_product_limit(durations: Sequence[float], observed: Sequence[int]) -> dict[float, float]:
    """Product-limit by a plain loop: at each event time, survival *= 1 - d/r, with r counting
    everyone whose duration is >= t (censored at t still at risk)."""
    survival = 1.0
    out = {}
    for t in sorted({d for d, o in zip(durations, observed, strict=True) if o}):
        at_risk = sum(1 for d in durations if d >= t)
        events = sum(1 for d, o in zip(durations, observed, strict=True) if o and d == t)
        survival *= 1 - events / at_risk
        out[t] = survival
    return out


small_lengths = st.lists(st.integers(1, 6), min_size=1, max_size=12)


@given(small_lengths)
def test_kaplan_meier_without_censoring_is_the_empirical_survival(lengths: list[int]) -> None:
    km = refimpl.kaplan_meier(lengths, [1] * len(lengths))
    arr = np.array(lengths)
    assert list(km.times) == sorted(set(lengths))
    np.testing.assert_allclose(km.survival, [(arr > t).mean() for t in km.times], atol=1e-15)


@given(small_lengths, st.data())
def test_kaplan_meier_equals_a_brute_force_product_limit(
    lengths: list[int], data: st.DataObject
) -> None:
    observed = data.draw(st.lists(st.integers(0, 1), min_size=len(lengths), max_size=len(lengths)))
    km = refimpl.kaplan_meier(lengths, observed)
    brute = brute_product_limit(lengths, observed)
    assert list(km.times) == list(brute)
    np.testing.assert_allclose(km.survival, list(brute.values()), rtol=1e-14)


def test_product_limit_oracle_rejects_censored_leaving_before_events() -> None:
    lengths, observed = [1, 2, 2, 3], [1, 1, 0, 1]
    km = refimpl.kaplan_meier(lengths, observed)
    # wrong convention: a rollout censored at t is no longer at risk at t
    wrong, s = [], 1.0
    for t in (1, 2, 3):
        r = sum(1 for d, o in zip(lengths, observed, strict=True) if d > t or (d == t and o))
        s *= 1 - sum(1 for d, o in zip(lengths, observed, strict=True) if o and d == t) / r
        wrong.append(s)
    assert not np.allclose(km.survival, wrong)


def test_unbiased_exponential_rate_is_unbiased_under_type_two_censoring() -> None:
    # Monte Carlo: R = 4000 steps of first-k-of-n with exponential lengths (rate 2). The estimate
    # (k-1)/T has sd λ/sqrt(k-2) = sqrt(2); the mean of R draws has sd 0.0224; a tolerance of
    # 5 sd = 0.112 gives a two-sided false-failure rate below 1e-6 (normal approximation).
    rng = np.random.default_rng(20261129)
    lam, n, k, reps = 2.0, 8, 4, 4000
    x = np.sort(rng.exponential(1 / lam, size=(reps, n)), axis=1)
    durations = np.where(np.arange(n) < k, x, x[:, k - 1 : k])  # censored at the cut-off x_(k)
    observed = np.arange(n) < k
    unbiased = [refimpl.exponential_rate_mle(d, observed, unbiased=True) for d in durations]
    mle = [refimpl.exponential_rate_mle(d, observed) for d in durations]
    tol = 5 * lam / math.sqrt(k - 2) / math.sqrt(reps)
    assert float(np.mean(unbiased)) == pytest.approx(lam, abs=tol)
    # the MLE k/T is biased up by the factor k/(k-1) (+0.67 here): the same test rejects it
    assert abs(float(np.mean(mle)) - lam) > tol


# ---------------------------------------------------------------------------------------------
# fluid model of continuous dispatch against a small event-driven simulation
# ---------------------------------------------------------------------------------------------


def simulate_continuous_dispatch(
    rng: np.random.Generator, *, slots: int, batch: int, eta: int, steps: int, warmup: int
) -> np.ndarray:
    """Mean trained length per step after ``warmup`` steps, lognormal(6, 1) decode times.

    Every slot relaunches the instant it finishes; completions are taken in time order; a
    completion with staleness ``current version - launch version > eta`` is dropped and does not
    fill the batch; a rollout launched at the instant a version is published sees the old one.
    """
    draws = iter(rng.lognormal(6.0, 1.0, size=(warmup + steps + 2) * batch * 4).tolist())
    length = [next(draws) for _ in range(slots)]
    heap = [(length[i], i, 0) for i in range(slots)]
    heapq.heapify(heap)
    version = filled = 0
    step_means: list[float] = []
    current: list[float] = []
    while version < warmup + steps:
        t, slot, launched_at = heapq.heappop(heap)
        relaunch_version = version
        if version - launched_at <= eta:
            filled += 1
            current.append(length[slot])
            if filled == batch:
                if version >= warmup:
                    step_means.append(math.fsum(current) / batch)
                current, filled, version = [], 0, version + 1
        length[slot] = next(draws)
        heapq.heappush(heap, (t + length[slot], slot, relaunch_version))
    return np.array(step_means)


def test_fluid_model_predicts_the_trained_mean_length_of_continuous_dispatch() -> None:
    # conventions §async-dispatch: lognormal(6, 1), N = 128, B = 256, eta = 0 -> trained mean about 58% of E[L].
    dist = scipy.stats.lognorm(s=1.0, scale=np.exp(6.0))
    mean_l = float(dist.mean())
    fluid = refimpl.fluid_steady_state(dist, slots=128, batch=256, eta=0)
    steps = simulate_continuous_dispatch(
        np.random.default_rng(7), slots=128, batch=256, eta=0, steps=200, warmup=30
    )
    simulated = float(steps.mean())
    # Tolerance: steps are correlated, so the standard error comes from 20 block means of 10
    # steps; 4.9 standard errors give a two-sided false-failure rate of 1e-6 (normal
    # approximation). The fluid limit itself is an approximation at N = 128: conventions §async-dispatch measures
    # its error at about 1%, allowed here as 1% of E[L] on top.
    blocks = steps.reshape(20, 10).mean(axis=1)
    se = float(blocks.std(ddof=1) / np.sqrt(blocks.size))
    tol = 4.9 * se + 0.01 * mean_l
    assert abs(simulated - fluid.trained_mean_length) <= tol
    assert fluid.trained_mean_length / mean_l == pytest.approx(0.58, abs=0.01)
    # Wrong variant: the step time without the masking feedback (Δ = B E[L]/N, no fixed point).
    base = 256 * mean_l / 128
    x = dist.rvs(size=400_000, random_state=np.random.default_rng(1))
    keep = refimpl.fluid_keep_probability(x, step_time=base, eta=0)
    wrong = float((x * keep).sum() / keep.sum())
    assert abs(simulated - wrong) > tol


def test_fluid_staleness_without_mask_is_slots_over_batch() -> None:
    dist = scipy.stats.gamma(a=2.0, scale=50.0)
    st_ = refimpl.fluid_steady_state(dist, slots=64, batch=16)
    assert st_ == (16 * 100.0 / 64, 1.0, 4.0, 100.0)
    # a very loose mask changes nothing
    loose = refimpl.fluid_steady_state(dist, slots=64, batch=16, eta=200)
    assert loose.kept_fraction == pytest.approx(1.0, abs=1e-12)
    assert loose.mean_staleness == pytest.approx(4.0, rel=1e-9)
    assert loose.trained_mean_length == pytest.approx(100.0, rel=1e-9)


@settings(max_examples=15)
@given(st.integers(0, 3), st.integers(1, 64), st.integers(1, 64))
def test_fluid_fixed_point_holds_and_mask_shortens_the_trained_law(
    eta: int, slots: int, batch: int
) -> None:
    dist = scipy.stats.gamma(a=2.0, scale=50.0)
    st_ = refimpl.fluid_steady_state(dist, slots=slots, batch=batch, eta=eta)
    assert st_.step_time == pytest.approx(batch * 100.0 / (slots * st_.kept_fraction), rel=1e-9)
    x = np.linspace(0, 2000, 200_001)
    keep = refimpl.fluid_keep_probability(x, step_time=st_.step_time, eta=eta)
    pdf = dist.pdf(x)
    assert st_.kept_fraction == pytest.approx(np.trapezoid(pdf * keep, x), rel=1e-6)
    assert st_.trained_mean_length <= 100.0 + 1e-9
    assert 0.0 <= st_.mean_staleness <= eta


@pytest.mark.parametrize(
    "dist",
    [
        scipy.stats.uniform(loc=399.5, scale=1.0),  # all mass on one token, windows of ~400
        scipy.stats.gamma(a=4e6, scale=1000.0 / 4e6),  # mean 1000, sd 0.5
        scipy.stats.lognorm(s=0.001, scale=300.0),
        scipy.stats.gamma(a=1e6, scale=4e-4),  # mean 400, sd 0.4: the quadrature falls back
    ],
    ids=["uniform-narrow", "gamma-narrow", "lognormal-narrow", "gamma-fallback"],
)
@pytest.mark.parametrize("eta", [0, 1, 2])
@pytest.mark.parametrize(("slots", "batch"), [(32, 32), (128, 256)])
def test_fluid_model_resolves_laws_much_narrower_than_the_step_time(
    dist: Any, eta: int, slots: int, batch: int
) -> None:
    # Independent computation in quantile space (u = F(ℓ), where every law is smooth): at the
    # returned Δ, E_p[keep] and E_p[L keep] / E_p[keep] must match, and Δ must be the fixed point.
    # A quadrature that samples the length axis uniformly misses such a law's density entirely.
    got = refimpl.fluid_steady_state(dist, slots=slots, batch=batch, eta=eta)

    def keep(u: float) -> float:
        return float(np.clip(eta + 1 - dist.ppf(u) / got.step_time, 0.0, 1.0))

    kept = scipy.integrate.quad(keep, 0.0, 1.0, limit=200, epsabs=1e-13)[0]
    mean = scipy.integrate.quad(lambda u: dist.ppf(u) * keep(u), 0.0, 1.0, limit=200)[0] / kept
    assert got.kept_fraction == pytest.approx(kept, rel=1e-6)
    assert got.trained_mean_length == pytest.approx(mean, rel=1e-6)
    assert got.step_time == pytest.approx(batch * dist.mean() / (slots * kept), rel=1e-6)


def test_kaplan_meier_with_no_event_is_survival_one_everywhere() -> None:
    # Everything censored: no drop of the step function is observed, so S = 1 wherever evaluated;
    # the representation is the empty step list, and evaluating it with S = 1 before the first
    # event time (the documented convention) gives 1.
    km = refimpl.kaplan_meier([3.0, 5.0, 5.0], [0, 0, 0])
    assert km.times.size == km.survival.size == 0

    def survival_at(t: float) -> float:
        i = int(np.searchsorted(km.times, t, side="right"))
        return 1.0 if i == 0 else float(km.survival[i - 1])

    assert [survival_at(t) for t in (0.0, 3.0, 4.9)] == [1.0, 1.0, 1.0]
    one_event = refimpl.kaplan_meier([3.0, 5.0, 5.0], [1, 0, 0])  # and the first event drops it
    assert one_event.times.tolist() == [3.0]
    assert one_event.survival.tolist() == pytest.approx([2 / 3])


# --- hostile sizes: an exact answer or a refusal, never a warning, an overflow or a hang ---------


@pytest.fixture
def loud() -> Any:
    """Every floating-point warning an error (underflow to 0 stays silent, numpy's default)."""
    with np.errstate(all="raise", under="ignore"):
        yield


@pytest.mark.usefixtures("loud")
def test_subnormal_inclusion_probabilities_answer_exactly_or_are_refused() -> None:
    tiny = 5e-324  # 1/tiny overflows float64
    with pytest.raises(ValueError, match=r"pi must be large enough for the weights"):
        refimpl.ipw_weights([tiny], n=1, k=1)
    assert refimpl.ipw_weights([tiny, 0.5], n=1, k=1, clip=3.0).tolist() == [3.0, 2.0]
    # Hájek is a weighted mean of the values: the tiny π member gets all the weight
    assert float(refimpl.hajek_estimate([0.0, 0.0, 0.0], [1.0, 1.0, 2.22507386e-311])) == 0.0
    assert float(refimpl.hajek_estimate([1.0, 5.0], [1.0, tiny])) == 5.0
    assert float(refimpl.hajek_estimate([1e308, 1e308], [1.0, 0.5])) == 1e308
    assert float(refimpl.hajek_estimate([1.0, 3.0], [1.0, 0.5])) == 7 / 3
    with pytest.raises(ValueError, match=r"values and pi must give an estimate within float64"):
        refimpl.horvitz_thompson_estimate([[0.0, 1.0]], [[1.0, tiny]], n=2, k=2)
    assert refimpl.horvitz_thompson_estimate([[0.0, 0.0]], [[1.0, tiny]], n=2, k=2).tolist() == [
        0.0
    ]
    clipped = refimpl.clipped_ipw_estimate([[0.0, 2.0]], [[1.0, 2.2e-309]], n=2, k=2, clip=1.0)
    assert clipped.tolist() == [1.0]
    assert refimpl.fluid_keep_probability([[0.0, 2.0]], step_time=1.1125e-308, eta=0).tolist() == [
        [1.0, 0.0]
    ]


def test_exact_mode_bounds_n_and_names_the_float_mode() -> None:
    half = [Fraction(1, 2), Fraction(1, 2)]
    for call in (refimpl.inclusion_probability_pmf, refimpl.selected_pmf):
        with pytest.raises(ValueError, match=r"n must be <= 2000 with an exact.*pmf as floats"):
            call(half, n=2_815_470_189, k=1)
        with pytest.raises(ValueError, match=r"n must be <= 2\^53"):
            call([0.5, 0.5], n=2**64, k=2)
    with pytest.raises(ValueError, match=r"n must be <= 2000 with an exact"):
        refimpl.ipw_estimator_moments(half, [1, 2], n=10**5, k=1)
    with pytest.raises(ValueError, match=r"n must keep the float enumeration within"):
        refimpl.ipw_estimator_moments([0.5, 0.5], [1.0, 2.0], n=2**62, k=2)


@pytest.mark.usefixtures("loud")
def test_float_estimator_moments_past_170_factorial_match_the_exact_ones() -> None:
    # n! overflows float64 past n = 170: the float mode works in log space
    pmf, g = [Fraction(1, 100), Fraction(1, 2), Fraction(49, 100)], [1, 2, 5]
    exact = refimpl.ipw_estimator_moments(pmf, g, n=200, k=3, clip=Fraction(3, 2))
    approx = refimpl.ipw_estimator_moments(
        [float(p) for p in pmf], [float(x) for x in g], n=200, k=3, clip=1.5
    )
    for name in ("horvitz_thompson", "hajek", "clipped"):
        want, got = getattr(exact, name), getattr(approx, name)
        assert want is not None
        assert got is not None
        assert float(got.mean) == pytest.approx(float(want.mean), rel=1e-11, abs=1e-300)
        assert float(got.variance) == pytest.approx(float(want.variance), rel=1e-9, abs=1e-300)


def test_a_staleness_bound_past_the_law_drops_nothing() -> None:
    law = scipy.stats.expon(scale=10.0)
    far = refimpl.fluid_steady_state(law, slots=1, batch=1, eta=14_880_618_571_628_543)
    assert far == refimpl.fluid_steady_state(law, slots=1, batch=1, eta=None)
    with pytest.raises(ValueError, match=r"eta must be <= 1048576 unless the law has no mass"):
        refimpl.fluid_steady_state(scipy.stats.pareto(b=1.5), slots=1, batch=1, eta=2**30)


def test_continuous_quadrature_refuses_an_n_too_large_to_resolve() -> None:
    # 1.5e-7 = E[mean of the first two of n] for unit exponentials, to 3e-11 at the bound
    at_bound = refimpl.selected_mean(scipy.stats.expon(), n=10**7, k=2)
    assert at_bound == pytest.approx((2 / 10**7 + 1 / (10**7 - 1)) / 2, rel=1e-10)
    with pytest.raises(ValueError, match=r"n must be <= 10000000 for a continuous law"):
        refimpl.length_bias(scipy.stats.expon(), n=6_291_587_969, k=2)
