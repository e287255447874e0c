"""Bad calls to refimpl.dispatch and the messages they give (see tests/_validation_table.py).

Each case is ``(id, call, exception type, regex the message must match)``; every refusal must also
be an instance of :class:`refimpl.RefimplError`.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import scipy.stats
from _validation_table import Case, check_refusal

import refimpl as r


def _dispatch_cases() -> list[Case]:
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
            "dispatch-moments-exact-clip-zero",  # the exact path's own check (a mutant loosened it)
            lambda: r.ipw_estimator_moments(
                [Fraction(1, 2), Fraction(1, 2)], [1, 2], n=2, k=1, clip=Fraction(0)
            ),
            ValueError,
            r"clip must be > 0 \(upper bound on the weights\)",
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
            "dispatch-mle-unbiased-not-bool",  # 1 would be read as True (a mutant dropped the check)
            lambda: r.exponential_rate_mle([1.0, 2.0, 3.0], [1, 1, 0], unbiased=1),  # type: ignore[arg-type]
            TypeError,
            r"unbiased must be a bool",
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
        Case(
            "dispatch-exact-n-too-large",
            lambda: r.inclusion_probability_pmf([Fraction(1, 2), Fraction(1, 2)], n=2001, k=1),
            ValueError,
            r"n must be <= 2000 with an exact \(Fraction\) pmf.*Pass the pmf as floats",
        ),
        Case(
            "dispatch-float-n-past-2-53",
            lambda: r.selected_pmf([0.5, 0.5], n=2**53 + 1, k=1),
            ValueError,
            r"n must be <= 2\^53",
        ),
        Case(
            "dispatch-ipw-weight-beyond-float64",
            lambda: r.ipw_weights([5e-324], n=1, k=1),
            ValueError,
            r"pi must be large enough for the weights k/\(n π\) to fit in float64.*pass clip",
        ),
        Case(
            "dispatch-ht-estimate-beyond-float64",
            lambda: r.horvitz_thompson_estimate([1.0], [5e-324], n=1, k=1),
            ValueError,
            r"values and pi must give an estimate within float64's range.*hajek_estimate",
        ),
        Case(
            "dispatch-moments-float-budget",
            lambda: r.ipw_estimator_moments([0.5, 0.5], [1.0, 2.0], n=2**40, k=2),
            ValueError,
            r"n must keep the float enumeration within 20000000 terms",
        ),
        Case(
            "dispatch-fluid-eta-huge",
            lambda: r.fluid_steady_state(scipy.stats.pareto(b=1.5), slots=1, batch=1, eta=2**21),
            ValueError,
            r"eta must be <= 1048576 unless the law has no mass past eta \* step_time",
        ),
        Case(
            "dispatch-quadrature-n-too-large",
            lambda: r.selected_mean(scipy.stats.expon(), n=10**8, k=2),
            ValueError,
            r"n must be <= 10000000 for a continuous law",
        ),
    ]


CASES: list[Case] = _dispatch_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_call_raises_a_message_that_says_how_to_fix_it(case: Case) -> None:
    check_refusal(case)
