"""refimpl.learning_async: the exact finite-N law of what continuous dispatch trains, against the simulator.

Two checks, each seen to fail on wrong variants (a different tie rule, launches at a publication
seeing the new version, a mask at eta + 1, staleness off by one):

- exact: the simulator run on every length matrix of a tiny case, weighted by its probability,
  gives the dynamic programme's law exactly (Fractions, no Monte Carlo);
- statistical: one draw from each of R independent seeded simulations of a larger case, so the
  counts are multinomial, against the exact law by Pearson's chi-square at a stated false-failure
  rate.
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from refimpl import InvalidArgument
from refimpl.learning_async import (
    DispatchLaw,
    chi_square_check,
    continuous_dispatch_law,
    simulated_dispatch_cells,
)
from refimpl.sim import STATUS, SimConfig, simulate

F = Fraction
ALPHA = (
    1e-6  # false-failure rate of each chi-square check (seeds are fixed: the run is reproducible)
)


def _enumerated_law(
    pmf: list[Fraction],
    *,
    slots: int,
    batch: int,
    steps: int,
    first_step: int,
    eta: int | None,
    columns: int,
) -> tuple[dict[tuple[int, int], Fraction], dict[int, Fraction]]:
    """The simulator's exact law: every slots x columns length matrix, weighted by its probability."""
    support = [(ell, q) for ell, q in enumerate(pmf, start=1) if q]
    extra: dict[str, Any] = {} if eta is None else {"eta": eta, "over_bound": "drop"}
    sample: dict[tuple[int, int], Fraction] = {}
    drops: dict[int, Fraction] = {}
    window = steps - first_step
    for combo in itertools.product(support, repeat=slots * columns):
        weight = F(1)
        for _, q in combo:
            weight *= q
        matrix = np.array([ell for ell, _ in combo], dtype=np.float64).reshape(slots, columns)
        trace = simulate(SimConfig(slots=slots, batch=batch, steps=steps, lengths=matrix, **extra))
        trained = np.flatnonzero((trace.status == STATUS["trained"]) & (trace.step >= first_step))
        for row in trained:
            key = (int(trace.length[row]), int(trace.staleness[row]))
            sample[key] = sample.get(key, F(0)) + weight / (window * batch)
        over = (trace.status == STATUS["dropped"]) & (trace.step >= first_step)
        for step in range(first_step, steps):
            d = int(np.count_nonzero(over & (trace.step == step)))
            drops[d] = drops.get(d, F(0)) + weight / window
    return sample, drops


def _as_dicts(law: DispatchLaw) -> tuple[dict[tuple[int, int], Fraction], dict[int, Fraction]]:
    sample = {
        (ell, s): q for ell, row in enumerate(law.sample, start=1) for s, q in enumerate(row) if q
    }
    return sample, {d: q for d, q in enumerate(law.dropped) if q}


TINY: list[dict[str, Any]] = [
    # lengths 1 or 3 (ties and staleness up to 2), two slots, batch 1
    {
        "pmf": [F(1, 3), F(0), F(2, 3)],
        "slots": 2,
        "batch": 1,
        "steps": 3,
        "first_step": 1,
        "eta": None,
        "columns": 4,
    },
    {
        "pmf": [F(1, 3), F(0), F(2, 3)],
        "slots": 2,
        "batch": 1,
        "steps": 2,
        "first_step": 0,
        "eta": 0,
        "columns": 4,
    },
]


@pytest.mark.parametrize("case", TINY)
def test_law_is_the_simulators_exactly(case: dict[str, Any]) -> None:
    """The programme equals the simulator's own law, summed over every length matrix."""
    kw = {k: v for k, v in case.items() if k != "columns"}
    law = continuous_dispatch_law(**kw)
    sample, drops = _enumerated_law(**case)
    assert _as_dicts(law) == (sample, drops)
    assert sum(q for row in law.sample for q in row) == 1
    assert sum(law.dropped) == 1
    # wrong variants give a different law (each is seen to fail this test)
    wrong = [
        continuous_dispatch_law(**kw, completion_order="reverse"),
        continuous_dispatch_law(**kw, launch_version="new"),
    ]
    if kw["eta"] is not None:
        wrong.append(continuous_dispatch_law(**{**kw, "eta": kw["eta"] + 1}))
    for variant in wrong:
        assert _as_dicts(variant) != (sample, drops)
    shifted = {(ell, s + 1): q for (ell, s), q in sample.items()}
    assert _as_dicts(law)[0] != shifted


def test_small_case_by_hand() -> None:
    """Two slots, batch 1, lengths 1 or 2 (1/2 each): the sample of step 1, worked out by hand.

    Both drew 1 (1/4): both finish at t = 1, slot 0's trains step 0, slot 1's step 1 with
    staleness 1 (launched by version 0): (1, 1). Otherwise (3/4) a length-2 rollout launched at
    t = 0 is still running when step 0 is trained; it finishes at t = 2, before (or beside, and
    ahead of in launch order) any relaunch, and trains step 1 with staleness 1: (2, 1). Every
    sample of step 1 is one version stale.
    """
    law = continuous_dispatch_law([F(1, 2), F(1, 2)], slots=2, batch=1, steps=2, first_step=1)
    assert law.sample == ((F(0), F(1, 4)), (F(0), F(3, 4)))
    assert law.staleness_mean == 1
    assert law.dropped == (F(1),)


CASES: dict[str, dict[str, Any]] = {
    "no mask": {"slots": 3, "batch": 2, "steps": 6, "first_step": 2, "eta": None},
    "mask at 1": {"slots": 3, "batch": 2, "steps": 6, "first_step": 2, "eta": 1},
}
PMF = [F(1, 2), F(1, 4), F(1, 4)]
REPLICATIONS = 600


@pytest.mark.parametrize("name", list(CASES))
def test_simulator_against_exact_law(name: str) -> None:
    """Pearson's chi-square of one draw per seeded simulation, at false-failure rate 1e-6 per check."""
    kw = CASES[name]
    law = continuous_dispatch_law(PMF, **kw)
    cells = simulated_dispatch_cells(PMF, replications=REPLICATIONS, seed=0, **kw)
    assert chi_square_check(cells.sample, law.sample, alpha=ALPHA).passed
    assert chi_square_check(cells.dropped, law.dropped, alpha=ALPHA).passed
    # the same counts reject every wrong variant (seen to fail: each statistic is far above the
    # threshold)
    eta = kw["eta"]
    wrong = {
        "newest first": continuous_dispatch_law(PMF, **kw, completion_order="reverse"),
        "launch sees new version": continuous_dispatch_law(PMF, **kw, launch_version="new"),
    }
    if eta is not None:
        wrong["mask at eta + 1"] = continuous_dispatch_law(PMF, **{**kw, "eta": eta + 1})
    for variant_name, variant in wrong.items():
        a = chi_square_check(cells.sample, variant.sample, alpha=ALPHA)
        b = chi_square_check(cells.dropped, variant.dropped, alpha=ALPHA)
        assert not (a.passed and b.passed), variant_name
    shifted = tuple((F(0), *row) for row in law.sample)
    assert not chi_square_check(cells.sample, shifted, alpha=ALPHA).passed


def test_refusals() -> None:
    with pytest.raises(InvalidArgument, match="Fraction"):
        continuous_dispatch_law([0.5, 0.5], slots=2, batch=1, steps=2)  # type: ignore[list-item]
    with pytest.raises(InvalidArgument, match="first_step"):
        continuous_dispatch_law([F(1)], slots=2, batch=1, steps=2, first_step=2)
    with pytest.raises(InvalidArgument, match="completion_order"):
        continuous_dispatch_law([F(1)], slots=2, batch=1, steps=2, completion_order="newest")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="alpha"):
        chi_square_check([1, 2], [0.5, 0.5], alpha=0.0)


def test_chi_square_pools_and_flags_impossible_cells() -> None:
    probs = [F(1, 2), F(1, 2) - F(1, 1000), F(1, 1000), F(0)]
    ok = chi_square_check([500, 499, 1, 0], probs, alpha=1e-6)
    assert ok.passed
    assert ok.cells == 2
    assert ok.impossible == 0
    bad = chi_square_check([500, 499, 0, 1], probs, alpha=1e-6)
    assert not bad.passed
    assert bad.impossible == 1
