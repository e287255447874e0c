"""refimpl.dispatch tested by class of hole, not by survivor.

Written after a fresh mutation sample of ``refimpl/dispatch`` (seed 4031890827, drawn before any
of these tests existed) survived at 7 of 30 mutants. Five of the seven changed a term of the
midpoint expansion of ``_pi_float`` (the float path of ``inclusion_probability_pmf`` on narrow tie
intervals): its results moved by 4e-11 relative at most, so no test at a looser accuracy than the
function reaches could see them. The classes, each covered across the module:

- **accuracy as a test**: the float path against the 360-digit reference of
  ``tests/test_dispatch_accuracy.py`` on laws where each branch of ``_pi_float`` is taken (the
  midpoint expansion in the lower and the upper half, the antiderivative differences), at the
  accuracy it reaches there, so that a wrong correction term fails;
- **data without symmetry**: the estimators of ``ipw.py`` against their formulas evaluated in
  ``Fraction`` on propensities that are pairwise distinct and values of both signs (with every
  ``π`` equal, ``v/π`` and ``v·π`` agree up to a common factor that the Hájek ratio cancels), and
  the float path of ``inclusion_probability_pmf`` against its exact path on pmfs whose masses are
  pairwise distinct;
- **outputs of degenerate branches**: shape, dtype and value where a shortcut returns early
  (``k == n``, an empty sample, a single support point).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import mpmath as mp
import numpy as np
import pytest
import scipy.integrate
import scipy.stats
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray
from strategies_asymmetric import asymmetric_pmfs, distinct_values, propensities
from test_dispatch_accuracy import reference_pi
from test_dispatch_user_laws import hidden_inverse

import refimpl
import refimpl.dispatch.ipw as ipw_module

Array = NDArray[np.float64]

# --- accuracy as a test -----------------------------------------------------------------------

#: Laws on which the midpoint expansion of ``_pi_float`` (``S_Y(m) - h²/24 f' - h⁴/1920 f'''``) is
#: taken, with the indices around where its fourth-order term is largest. Measured error of refimpl
#: against the reference there (5 December 2026): at most 5.1e-14 relative. A wrong sign or power
#: inside the h⁴ term moves these values by 5e-13 to 4e-11.
EXPANSION_CASES = [
    ("lower-k", 10_000, 3_000, 150, [531, 551, 571, 591, 611]),
    ("middle-k", 10_000, 1_000, 300, [3_072, 3_092, 3_112, 3_132, 3_152]),
    ("upper-k", 3_000, 3_000, 2_100, [1_945, 1_965, 1_985, 2_005, 2_025]),
    # Where the third derivative is dominated by its survival-side term 2(n-k-1)/s^3 (s = 1 - t
    # near 0.29): a wrong operator there moved pi by 6.3e-12 at index 7086 (measured error 3.6e-14).
    ("survival-side", 10_000, 10_000, 7_000, [7_066, 7_076, 7_086, 7_096]),
    # A long support (10^5 points, n = 1000, k = 300) where the h⁴ term is accepted by its own
    # error estimate far from F = k/n: h⁴·1920 instead of h⁴/1920 sent these intervals to the
    # cancelling differences, 8.1e-12 off (measured error 1.9e-14; fresh sample of seed 1298847614).
    ("long-support", 100_000, 1_000, 300, [32_484, 32_485, 32_487, 32_488]),
]
#: Four times the worst error measured on these cases: below it, every correction term must be right.
REACHED = 2e-13


@pytest.mark.parametrize(
    ("support", "n", "k", "indices"),
    [c[1:] for c in EXPANSION_CASES],
    ids=[c[0] for c in EXPANSION_CASES],
)
def test_the_midpoint_expansion_reaches_its_measured_accuracy(
    support: int, n: int, k: int, indices: list[int]
) -> None:
    pmf = np.full(support, 1.0 / support)
    found = refimpl.inclusion_probability_pmf(pmf, n=n, k=k)
    for i, want in zip(indices, reference_pi(pmf, n, k, indices), strict=True):
        rel = abs((mp.mpf(float(found[i])) - want) / want)
        assert rel <= REACHED, f"index {i}: refimpl {found[i]!r}, reference {mp.nstr(want, 20)}"


def test_the_accuracy_bound_rejects_a_dropped_fourth_order_term() -> None:
    """The same check fails on the expansion without its h⁴ term (a deliberately wrong variant:
    the second-order expansion alone, evaluated here)."""
    from scipy import special

    support, n, k, indices = EXPANSION_CASES[0][1:]
    af, kf = float(n - k), float(k)
    h = 1.0 / support
    ref = reference_pi(np.full(support, h), n, k, indices)

    def second_order(i: int) -> float:
        mt, ms = (i + 0.5) * h, 1.0 - (i + 0.5) * h
        dens = np.exp(
            special.xlogy(kf - 1, mt) + special.xlogy(af - 1, ms) - special.betaln(kf, af)
        )
        g1 = (kf - 1.0) / mt - (af - 1.0) / ms
        return float(special.betainc(af, kf, ms) - h**2 / 24.0 * dens * g1)

    worst = max(abs((mp.mpf(second_order(i)) - w) / w) for i, w in zip(indices, ref, strict=True))
    assert worst > REACHED


# --- data without symmetry: the estimators in Fraction ----------------------------------------


def _exact_ht(values: list[Fraction], pi: list[Fraction], n: int) -> Fraction:
    return sum((v / p for v, p in zip(values, pi, strict=True)), Fraction(0)) / n


def _exact_hajek(values: list[Fraction], pi: list[Fraction]) -> Fraction:
    num = sum((v / p for v, p in zip(values, pi, strict=True)), Fraction(0))
    return num / sum((1 / p for p in pi), Fraction(0))


def _exact_clipped(
    values: list[Fraction], pi: list[Fraction], n: int, k: int, clip: Fraction
) -> Fraction:
    weights = [min(Fraction(k, n) / p, clip) for p in pi]
    return sum((w * v for w, v in zip(weights, values, strict=True)), Fraction(0)) / k


def _close(found: float, want: Fraction, scale: Fraction, *, ulps: int = 8) -> bool:
    """``found`` within ``ulps`` float64 ulps of ``scale`` (the sum of the terms' magnitudes)."""
    return abs(Fraction(found) - want) <= ulps * Fraction(2.0**-52) * scale


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[Fraction], list[Fraction], int, int]:
    k = draw(st.integers(2, 6))
    n = draw(st.integers(k, 3 * k))
    return draw(distinct_values(size=k)), draw(propensities(size=k)), n, k


Estimator = Callable[..., Any]


def _estimator_property(ht: Estimator, hajek: Estimator, clipped: Estimator) -> Callable[[], None]:
    """The three estimators against their exact formulas (a Hypothesis test to run)."""

    @given(batches(), st.integers(1, 4096))
    def prop(batch: tuple[list[Fraction], list[Fraction], int, int], c: int) -> None:
        values, pi, n, k = batch
        clip = Fraction(c, 256)
        v, p = np.array(values, dtype=np.float64), np.array(pi, dtype=np.float64)
        scale = sum((abs(x) / q for x, q in zip(values, pi, strict=True)), Fraction(0))
        found = float(ht(v, p, n=n, k=k))
        assert _close(found, _exact_ht(values, pi, n), scale / n), (found, values, pi)
        found = float(hajek(v, p))
        assert _close(found, _exact_hajek(values, pi), Fraction(max(abs(x) for x in values)))
        found = float(clipped(v, p, n=n, k=k, clip=float(clip)))
        assert _close(found, _exact_clipped(values, pi, n, k, clip), scale * clip)

    return prop


def test_the_estimators_equal_their_formulas_on_unequal_propensities() -> None:
    run_property(
        _estimator_property(
            refimpl.horvitz_thompson_estimate, refimpl.hajek_estimate, refimpl.clipped_ipw_estimate
        )
    )


def _hajek_times_pi(values: Array, pi: Array) -> Array:
    """Weights by π instead of 1/π: the same as Hájek whenever every π is equal."""
    v, p = np.asarray(values), np.asarray(pi)
    return np.asarray(np.sum(v * p, axis=-1) / np.sum(p, axis=-1))


def _ht_by_k(values: Array, pi: Array, *, n: int, k: int) -> Array:
    """Divides by k instead of n: the same whenever the whole population is the batch."""
    return np.asarray(np.sum(np.asarray(values) / np.asarray(pi), axis=-1) / k)


def _clipped_after_scaling(values: Array, pi: Array, *, n: int, k: int, clip: float) -> Array:
    """Clips 1/π before the k/n scale: the same whenever k = n."""
    w = np.minimum(1.0 / np.asarray(pi), clip) * (k / n)
    return np.asarray(np.sum(w * np.asarray(values), axis=-1) / k)


@pytest.mark.parametrize("wrong", ["hajek", "ht", "clipped"])
def test_the_estimator_property_rejects_wrong_variants(wrong: str) -> None:
    ht, hajek, clipped = (
        refimpl.horvitz_thompson_estimate,
        refimpl.hajek_estimate,
        refimpl.clipped_ipw_estimate,
    )
    variants = {
        "hajek": (ht, _hajek_times_pi, clipped),
        "ht": (_ht_by_k, hajek, clipped),
        "clipped": (ht, hajek, _clipped_after_scaling),
    }
    rejects(_estimator_property(*variants[wrong]))


# --- data without symmetry: the float path against the exact path ------------------------------


def _float_path_property(pi_of: Callable[..., Any]) -> Callable[[], None]:
    """The float path against the exact one (a Hypothesis test to run)."""

    @given(asymmetric_pmfs(min_size=2, max_size=7), st.data())
    def prop(pmf: list[Fraction], data: st.DataObject) -> None:
        n = data.draw(st.integers(1, 12))
        k = data.draw(st.integers(1, n))
        exact = refimpl.inclusion_probability_pmf(pmf, n=n, k=k)
        found = pi_of(np.array(pmf, dtype=np.float64), n=n, k=k)
        assert found.dtype == np.float64
        assert found.shape == (len(pmf),)
        for f, e in zip(found, exact, strict=True):
            assert abs(Fraction(float(f)) - e) <= Fraction(2e-11) * e + Fraction(1e-300), (
                pmf,
                n,
                k,
            )

    return prop


def test_the_float_path_equals_the_exact_one_on_unequal_masses() -> None:
    run_property(_float_path_property(refimpl.inclusion_probability_pmf))


def _pi_mirrored(pmf: Array, *, n: int, k: int) -> Array:
    """Reads the pmf from the long end: right only for a pmf that is its own mirror image."""
    return np.asarray(refimpl.inclusion_probability_pmf(pmf[::-1], n=n, k=k)[::-1])


def test_the_float_path_property_rejects_a_mirrored_law() -> None:
    rejects(_float_path_property(_pi_mirrored))


# --- outputs of degenerate branches ------------------------------------------------------------


def test_k_equal_to_n_includes_every_length_in_both_paths() -> None:
    pmf = [Fraction(1, 7), Fraction(2, 7), Fraction(4, 7)]
    assert refimpl.inclusion_probability_pmf(pmf, n=5, k=5) == [Fraction(1)] * 3
    found = refimpl.inclusion_probability_pmf(np.array([0.25, 0.5, 0.25]), n=5, k=5)
    assert found.dtype == np.float64
    assert found.shape == (3,)
    assert np.array_equal(found, np.ones(3))


def test_a_single_support_point_is_included_with_probability_k_over_n() -> None:
    # every rollout ties: a uniform tie-break keeps each with probability k/n
    assert refimpl.inclusion_probability_pmf([Fraction(1)], n=7, k=3) == [Fraction(3, 7)]
    found = refimpl.inclusion_probability_pmf(np.array([1.0]), n=7, k=3)
    assert found.shape == (1,)
    assert found.dtype == np.float64
    assert abs(found[0] - 3 / 7) <= 4e-16


def test_an_empty_censored_sample_gives_empty_float_arrays() -> None:
    km = refimpl.kaplan_meier(np.empty(0), np.empty(0))
    for part in km:
        assert isinstance(part, np.ndarray)
        assert part.dtype == np.float64
        assert part.shape == (0,)


def test_kaplan_meier_on_unequal_steps() -> None:
    """Events at 2, 3 (twice) and 7, censored at 3 and 5: S = 5/6, then 5/6·(3/5)... by hand.

    At t=2: 6 at risk, 1 event: S = 5/6. At t=3: 5 at risk (the censored 3 counts as at risk at 3),
    2 events: S = 5/6 · 3/5 = 1/2. At t=7: 1 at risk, 1 event: S = 0.
    """
    durations = np.array([2.0, 3.0, 3.0, 3.0, 5.0, 7.0])
    observed = np.array([1.0, 1.0, 1.0, 0.0, 0.0, 1.0])
    km = refimpl.kaplan_meier(durations, observed)
    assert km[0].tolist() == [2.0, 3.0, 7.0]
    assert np.allclose(km[1], [5 / 6, 1 / 2, 0.0], rtol=0, atol=1e-15)


# --- data without symmetry: pmfs that sum to 1 only within the tolerance ------------------------

#: A float pmf is accepted when it sums to 1 within 1e-9 and is normalised before use; a pmf that
#: sums to exactly 1 cannot tell ``p / sum(p)`` from ``p * sum(p)`` or from no normalisation.
OFF_ONE = 1.0 + 5e-10


@pytest.mark.parametrize(
    "of",
    [
        lambda p: refimpl.selected_pmf(p, n=5, k=2),
        lambda p: refimpl.inclusion_probability_pmf(p, n=5, k=2),
        lambda p: np.array(refimpl.length_bias(p, n=5, k=2), dtype=np.float64),
    ],
    ids=["selected_pmf", "inclusion_probability_pmf", "length_bias"],
)
def test_a_pmf_off_one_within_tolerance_gives_the_normalised_result(
    of: Callable[[Array], Array],
) -> None:
    pmf = np.array([0.125, 0.5, 0.25, 0.125])
    want, found = of(pmf), of(pmf * OFF_ONE)
    assert found.dtype == np.float64
    assert np.allclose(found, want, rtol=4e-16 * 8, atol=0.0), (found, want)


def test_the_normalisation_check_rejects_a_missing_normalisation() -> None:
    def unnormalised(p: Array) -> Array:
        return np.asarray((5 / 2) * p * refimpl.inclusion_probability_pmf(p / p.sum(), n=5, k=2))

    pmf = np.array([0.125, 0.5, 0.25, 0.125])
    assert not np.allclose(unnormalised(pmf * OFF_ONE), unnormalised(pmf), rtol=3.2e-15, atol=0)


# --- outputs of degenerate branches: the fluid model with unequal slots and batch ----------------


def test_the_fluid_model_with_no_mass_past_the_bound_is_the_unmasked_one() -> None:
    """No length reaches ηΔ: the mask drops nothing, and every field equals the η = None state.
    Slots and batch are unequal (with slots = batch = 1, slots/batch and slots·batch agree)."""
    import scipy.stats

    law = scipy.stats.uniform(loc=1.0, scale=9.0)  # lengths in [1, 10], mean 5.5
    got = refimpl.fluid_steady_state(law, slots=6, batch=4, eta=3)  # ηΔ = 3·(4·5.5/6) = 11 > 10
    assert got == refimpl.fluid_steady_state(law, slots=6, batch=4, eta=None)
    assert got.step_time == pytest.approx(4 * 5.5 / 6, rel=1e-15)
    assert got.kept_fraction == 1.0
    assert got.mean_staleness == 6 / 4
    assert got.trained_mean_length == pytest.approx(5.5, rel=1e-15)


# --- one argument's length like another's, on every path -------------------------------------

#: ``ipw_estimator_moments`` takes an exact path (Fraction pmf with integer or Fraction ``g``) and
#: a float path; each checks that ``g`` has one value per support point before anything is summed.
G_KINDS: dict[str, Callable[[int], Any]] = {
    "Fraction g": lambda m: [Fraction(3 * j + 1, 2) for j in range(m)],
    "integer g": lambda m: [3 * j - 2 for j in range(m)],
    "float g": lambda m: np.linspace(-1.5, 2.0, m),
}
PMF_KINDS: dict[str, Any] = {
    "exact pmf": [Fraction(1, 6), Fraction(1, 2), Fraction(1, 3)],
    "float pmf": np.array([1 / 6, 1 / 2, 1 / 3]),
}


def _refuses_g_of_other_length(moments: Callable[..., Any], pmf: Any, g_of: Any) -> None:
    for size in (2, 4):
        try:
            moments(pmf, g_of(size), n=3, k=2)
        except ValueError as error:
            message = str(error)
        else:
            raise AssertionError(f"a g of {size} values for 3 support points was accepted")
        assert message.startswith("g must have one value per support point (3, like pmf)")
    moments(pmf, g_of(3), n=3, k=2)  # the right length is accepted


@pytest.mark.parametrize("g_kind", sorted(G_KINDS))
@pytest.mark.parametrize("pmf_kind", sorted(PMF_KINDS))
def test_g_of_another_length_than_pmf_is_refused_on_every_path(pmf_kind: str, g_kind: str) -> None:
    _refuses_g_of_other_length(refimpl.ipw_estimator_moments, PMF_KINDS[pmf_kind], G_KINDS[g_kind])


def test_the_length_check_rejects_a_variant_that_truncates_g() -> None:
    def truncating(pmf: Any, g: Any, **kw: Any) -> Any:
        return refimpl.ipw_estimator_moments(
            pmf, list(g)[: len(pmf)] + [0] * (len(pmf) - len(g)), **kw
        )

    for pmf in PMF_KINDS.values():
        rejects(_refuses_g_of_other_length, truncating, pmf, G_KINDS["integer g"])


# --- caps on a derived count: the count quoted, and the cap just inside and outside -----------


def _moments_call(exact: bool, masses: int, *, n: int, k: int) -> Any:
    """Moments on ``masses`` support points with positive mass plus one point of mass 0 (which
    does not count as support), uniform masses, values of both signs."""
    size = masses + 1
    if exact:
        pmf: Any = [Fraction(1, masses)] * masses + [Fraction(0)]
        g: Any = [Fraction(2 * j - 3, 3) for j in range(size)]
    else:
        pmf = np.array([1.0 / masses] * masses + [0.0])
        g = np.linspace(-2.0, 3.0, size)
    return refimpl.ipw_estimator_moments(pmf, g, n=n, k=k)


def test_the_documented_caps_are_the_ones_applied() -> None:
    doc = refimpl.ipw_estimator_moments.__doc__ or ""
    assert "200 000 batch compositions" in doc
    assert "2e7 in float mode" in doc
    assert (ipw_module._MAX_COMPOSITIONS, ipw_module._MAX_EXACT_TERMS) == (200_000, 200_000)
    assert ipw_module._MAX_FLOAT_TERMS == 20_000_000


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "float"])
def test_each_cap_is_inclusive_at_the_count_of_the_call(
    exact: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 4 support points (and one of mass 0), k = 2: C(5, 3) = 10 compositions of 5 - 2 + 1 = 4
    # tail terms each: 40 terms. The caps are lowered to the call's own counts (the real caps take
    # seconds to reach), then one below.
    budget = "_MAX_EXACT_TERMS" if exact else "_MAX_FLOAT_TERMS"
    monkeypatch.setattr(ipw_module, "_MAX_COMPOSITIONS", 10)
    monkeypatch.setattr(ipw_module, budget, 40)
    inside = _moments_call(exact, 4, n=5, k=2)
    assert inside.horvitz_thompson.bias == pytest.approx(0.0, abs=1e-15)
    monkeypatch.setattr(ipw_module, budget, 39)
    with pytest.raises(ValueError, match=r"This call needs 40;"):
        _moments_call(exact, 4, n=5, k=2)
    monkeypatch.setattr(ipw_module, budget, 40)
    monkeypatch.setattr(ipw_module, "_MAX_COMPOSITIONS", 9)
    with pytest.raises(ValueError, match=r"over 4 support points gives 10\)"):
        _moments_call(exact, 4, n=5, k=2)


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "float"])
def test_a_refusal_past_a_cap_quotes_the_count_of_its_call(exact: bool) -> None:
    # (After the test above: a wrong count that let these calls through would run for minutes.)
    # k = 3 over 110 support points: C(112, 109) = 227 920 compositions, past 200 000.
    with pytest.raises(ValueError, match=r"^k must give at most 200000 batch compositions") as e:
        _moments_call(exact, 110, n=5, k=3)
    assert f"over 110 support points gives {math.comb(112, 109)})" in str(e.value)
    # k = 2 over 20 points: 210 compositions, times n - k + 1 tail terms each.
    n = 1000 if exact else 100_000
    terms = math.comb(21, 19) * (n - 2 + 1)
    with pytest.raises(
        ValueError, match=r"^n must keep the (exact \(Fraction\)|float) enumeration"
    ):
        _moments_call(exact, 20, n=n, k=2)
    with pytest.raises(ValueError, match=rf"This call needs {terms};"):
        _moments_call(exact, 20, n=n, k=2)


# --- the integration path each kind of law takes ------------------------------------------------


class _Counted(scipy.stats.rv_continuous):
    """Exponential lengths (mean 100) with an inverse of their own, counting ``isf`` calls."""

    isf_calls = 0

    def _pdf(self, x: Any, *args: Any) -> Any:
        return np.exp(-x / 100.0) / 100.0

    def _cdf(self, x: Any, *args: Any) -> Any:
        return -np.expm1(-x / 100.0)

    def _sf(self, x: Any, *args: Any) -> Any:
        return np.exp(-x / 100.0)

    def _ppf(self, q: Any, *args: Any) -> Any:
        return -100.0 * np.log1p(-q)

    def _isf(self, q: Any, *args: Any) -> Any:
        type(self).isf_calls += 1
        return -100.0 * np.log(q)

    def _stats(self, *args: Any) -> Any:  # type: ignore[override]
        return 100.0, 100.0**2, None, None


class _NoInverse(scipy.stats.rv_continuous):
    """The same law without a quantile function: scipy would root-search ``_cdf`` point by point.

    It has no moments of its own either, so its mean is ``∫ S`` too (scipy's generic mean would
    integrate the root-searched ``ppf``). The length-coordinate path needs 14 quantiles per
    integral (a few hundred scalar ``_cdf`` calls); the survival-coordinate path or scipy's mean
    would need thousands of root searches, so a budget stops them early."""

    scalar_cdf_calls = 0

    def _pdf(self, x: Any, *args: Any) -> Any:
        return np.exp(-x / 100.0) / 100.0

    def _cdf(self, x: Any, *args: Any) -> Any:
        if np.ndim(x) == 0 or np.size(x) == 1:
            type(self).scalar_cdf_calls += 1
            if type(self).scalar_cdf_calls > 5000:
                raise AssertionError("a law without an inverse was root-searched node by node")
        return -np.expm1(-np.asarray(x) / 100.0)

    def _sf(self, x: Any, *args: Any) -> Any:
        return np.exp(-np.asarray(x) / 100.0)


#: Exponential lengths of mean 100: E[max of 5] = 100 H_5, and the first 3 of 5 have the means
#: 100 (1/5), 100 (1/5 + 1/4), 100 (1/5 + 1/4 + 1/3) (claims OS1 and the spacings of exponentials).
_EXPON_CASES: dict[str, tuple[Callable[[Any], float], float]] = {
    "expected_max": (lambda law: refimpl.expected_max(law, n=5), 100.0 * 137.0 / 60.0),
    "selected_mean": (
        lambda law: refimpl.selected_mean(law, n=5, k=3),
        100.0 * ((1 / 5) * 3 + (1 / 4) * 2 + (1 / 3) * 1) / 3,
    ),
    "length_bias": (
        lambda law: float(refimpl.length_bias(law, n=5, k=3).selected_mean),
        100.0 * ((1 / 5) * 3 + (1 / 4) * 2 + (1 / 3) * 1) / 3,
    ),
}


@pytest.mark.parametrize("name", sorted(_EXPON_CASES))
def test_a_law_with_an_inverse_is_integrated_in_the_survival_coordinate(name: str) -> None:
    of, want = _EXPON_CASES[name]
    _Counted.isf_calls = 0
    assert of(_Counted(a=0.0, name="counted")()) == pytest.approx(want, rel=1e-12)
    assert _Counted.isf_calls > 0


@pytest.mark.parametrize("name", sorted(_EXPON_CASES))
def test_a_law_without_an_inverse_is_integrated_in_the_length_coordinate(name: str) -> None:
    of, want = _EXPON_CASES[name]
    _NoInverse.scalar_cdf_calls = 0
    assert of(_NoInverse(a=0.0, name="no inverse")()) == pytest.approx(want, rel=1e-9)
    assert 0 < _NoInverse.scalar_cdf_calls <= 5000


# --- hand-written caps: the values at the bounds ------------------------------------------------
# Each cap (n = 2000 exact, 2^53 float, 10^7 continuous, eta = 2^20 in the fluid model) and each
# censoring check is a hand rule of tests/_valid_calls.py (HAND_RULES), tested just inside and
# just outside with its message by tests/test_validation_rules.py; here, the results at the bounds.

_THIRDS = [Fraction(1, 3), Fraction(2, 3)]
_UNIT_EXPON = scipy.stats.expon()


def test_the_caps_at_their_bounds_give_the_closed_forms() -> None:
    # The first of n i.i.d. lengths from (1/3, 2/3) is length 2 only if all n are: P = (2/3)^n.
    # At n = 2000 that mass is about 1e-352, below float64: the KL term of it is computed from
    # the Fraction ratio (it was refused by math.log as a 'math domain error').
    lb = refimpl.length_bias(_THIRDS, n=2000, k=1)
    q2 = Fraction(2, 3) ** 2000
    assert lb.selected_mean == 1 + q2
    assert lb.total_variation == Fraction(2, 3) - q2
    # KL(q || p) = (1 - q2) ln((1 - q2) / (1/3)) + q2 ln(q2 / (2/3)); the second term is ~1e-349.
    assert lb.kl_divergence == pytest.approx(math.log(3.0), rel=1e-15)
    # Mean of the first two of n = 10^7 unit exponentials: (1/n + (1/n + 1/(n - 1))) / 2.
    n = 10**7
    want = (2 / n + 1 / (n - 1)) / 2
    assert refimpl.selected_mean(_UNIT_EXPON, n=n, k=2) == pytest.approx(want, rel=1e-10)
    assert refimpl.length_bias(_UNIT_EXPON, n=n, k=2).ratio == pytest.approx(want, rel=1e-10)


# --- the length scale: every quadrature is relative, so results scale with the lengths ----------

_SHAPES: dict[str, Callable[[float], Any]] = {
    "pareto(1.5)": lambda c: scipy.stats.pareto(b=1.5, scale=c),  # heavy tail: a real tail part
    "lognormal(0, 1)": lambda c: scipy.stats.lognorm(s=1.0, scale=c),
    "exponential": lambda c: scipy.stats.expon(scale=c),
}


def _scaled_results(law: Any) -> tuple[float, float, float]:
    return (
        refimpl.selected_mean(law, n=16, k=8),
        refimpl.expected_max(law, n=16),
        float(refimpl.length_bias(law, n=4, k=2).true_mean),
    )


@pytest.mark.parametrize("hidden", [False, True], ids=["own inverse", "no inverse"])
@pytest.mark.parametrize("shape", sorted(_SHAPES))
def test_results_scale_with_the_lengths(shape: str, hidden: bool) -> None:
    """Lengths in units of 1e-6 or 1e6 give the unit law's results times the unit: a tolerance
    that is absolute somewhere (not relative to the whole) shows up at one of the two scales."""

    def law(c: float) -> Any:
        return hidden_inverse(_SHAPES[shape](c)) if hidden else _SHAPES[shape](c)

    unit = _scaled_results(law(1.0))
    if shape == "pareto(1.5)":
        assert unit[2] == pytest.approx(3.0, rel=1e-12)  # b/(b - 1)
    for c in (1e-6, 1e6):
        got = _scaled_results(law(c))
        assert got == pytest.approx(tuple(c * x for x in unit), rel=1e-9), c


# --- the censoring estimate at its bounds: finished rollouts and total time --------------------


@pytest.mark.parametrize("unbiased", [False, True])
def test_the_rate_estimate_at_its_fewest_finished_rollouts(unbiased: bool) -> None:
    need = 2 if unbiased else 1  # the fewest the estimate takes (a hand rule of the table)
    durations = [3.0, 1.5, 2.5]  # T = 7
    at_bound = [1] * need + [0] * (3 - need)
    assert refimpl.exponential_rate_mle(durations, at_bound, unbiased=unbiased) == 1 / 7


def test_the_rate_estimate_refuses_a_zero_total_and_a_rate_past_float64() -> None:
    with pytest.raises(ValueError, match=r"^durations must have a positive sum"):
        refimpl.exponential_rate_mle([0.0, 0.0], [1, 1])
    smallest = 5e-324  # the smallest positive total: 1 / 5e-324 is past float64
    with pytest.raises(ValueError, match=r"^durations must have a sum large enough for the rate"):
        refimpl.exponential_rate_mle([smallest], [1])
    assert refimpl.exponential_rate_mle([1e-300], [1]) == pytest.approx(1e300, rel=1e-15)
    assert refimpl.exponential_rate_mle([0.0, 1e-300], [1, 1], unbiased=True) == 1 / 1e-300


# --- the float moments where a weight squared leaves float64 ----------------------------------


def test_the_float_moments_keep_a_variance_whose_weights_square_past_float64() -> None:
    """n = 2000, k = 2 on lengths (1/4, 3/4): the long length is trained with probability about
    (3/4)^1998, so its weight 1/π is about 1e250 and its square is past float64, yet its share of
    the Horvitz–Thompson variance (probability times squared deviation) is about 2.5e247. The
    float mode squared the deviation first (inf and a RuntimeWarning); it must agree with the
    exact (Fraction) mode."""
    exact = refimpl.ipw_estimator_moments(
        [Fraction(1, 4), Fraction(3, 4)], [1, 2], n=2000, k=2, clip=Fraction(3, 2)
    )
    floats = refimpl.ipw_estimator_moments([0.25, 0.75], [1.0, 2.0], n=2000, k=2, clip=1.5)
    want = float(exact.horvitz_thompson.variance)
    assert 1e247 < want < 1e248
    assert float(floats.horvitz_thompson.variance) == pytest.approx(want, rel=1e-11)
    assert float(floats.horvitz_thompson.mse) == pytest.approx(
        float(exact.horvitz_thompson.mse), rel=1e-11
    )


# --- adaptive quad's acceptance: an error estimate at the bound is accepted, one ulp past refused


@pytest.mark.parametrize(("value", "bound"), [(3.0, 3e-9), (0.0, 1e-300)])
def test_quad_accepts_an_error_estimate_at_its_bound_and_refuses_one_past(
    monkeypatch: pytest.MonkeyPatch, value: float, bound: float
) -> None:
    """``_quad`` returns ``value`` when the error estimate is at most ``rtol·|value|`` (``1e-9``
    relative; ``1e-300`` absolute at a zero value) and raises ArithmeticError past it. quad is
    replaced by a stand-in returning a chosen (value, error) pair: no integrand reaches the bound
    exactly."""
    from refimpl.dispatch import _numerics

    at_bound = max(1e-9 * abs(value), 1e-300)
    assert at_bound == pytest.approx(bound, rel=1e-15)
    for err, accepted in ((at_bound, True), (float(np.nextafter(at_bound, np.inf)), False)):
        monkeypatch.setattr(scipy.integrate, "quad", lambda *a, e=err, **k: (value, e))
        if accepted:
            assert _numerics._quad(math.exp, 0.0, 1.0, what="a test") == value
        else:
            with pytest.raises(ArithmeticError, match="did not converge"):
                _numerics._quad(math.exp, 0.0, 1.0, what="a test")


class _ExponWithMoments(scipy.stats.rv_continuous):
    """A unit exponential with its moments but no inverse: its mean is its own (no integral),
    and expected_max integrates it in the length coordinate."""

    def _sf(self, x: Any, *args: Any) -> Any:
        return np.exp(-np.asarray(x))

    def _cdf(self, x: Any, *args: Any) -> Any:
        return -np.expm1(-np.asarray(x))

    def _pdf(self, x: Any, *args: Any) -> Any:
        return np.exp(-np.asarray(x))

    def _stats(self, *args: Any, **kwargs: Any) -> tuple[float, float, None, None]:
        return 1.0, 1.0, None, None


def test_the_length_integral_accepts_a_tail_error_at_its_bound_and_refuses_one_past(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A law without its own inverse is integrated in the length coordinate: a body by panels,
    then the tail past the last quantile by adaptive quad, accepted when quad's error estimate is
    at most ``1e-9`` of the whole. quad is replaced by a stand-in: with a zero tail the result is
    the body itself, and an error estimate of exactly ``1e-9`` times it is accepted, one ulp more
    refused."""
    law = _ExponWithMoments(a=0.0, name="expon with moments")()
    err = 0.0
    monkeypatch.setattr(scipy.integrate, "quad", lambda *a, **k: (0.0, err))
    body = refimpl.expected_max(law, n=4)  # the panels alone (the body's rule is accepted)
    assert body == pytest.approx(1 + 1 / 2 + 1 / 3 + 1 / 4, rel=1e-6)  # H_4, less the tail
    err = 1e-9 * body
    assert refimpl.expected_max(law, n=4) == body
    err = float(np.nextafter(1e-9 * body, np.inf))
    with pytest.raises(ArithmeticError, match="did not converge"):
        refimpl.expected_max(law, n=4)
