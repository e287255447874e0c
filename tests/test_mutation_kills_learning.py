"""Pinned behaviours of refimpl.learning and refimpl.learning_async that a sampled mutation run
(``tools/mutate.py``, seeds 3101 and 3102) found no test holding: each test names the mutant it
was seen to fail on."""

from __future__ import annotations

import heapq
from fractions import Fraction
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from _validation_table import Case, check_refusal

from refimpl import learning as lrn
from refimpl import learning_async as lasync
from refimpl.learning import first_k as lrn_first_k
from refimpl.learning import training as lrn_training

F = Fraction

#: The exact fluid model's case of tests/test_learning.py: Δ = B E[L] / N = 2 · (53/20) / 3 = 53/30,
#: so ceil(M/Δ) = ceil(150/53) = 3 and the behaviours must cover s = 0..3 (four rows).
H5 = [F(1, 4), F(1, 3), F(1, 2), F(2, 5), F(1)]
EYE5 = [[int(i == j) for j in range(5)] for i in range(5)]
Q5 = [F(0), F(1, 5), F(1, 2), F(4, 5), F(9, 10)]
STALE = [
    H5,
    [F(1, 3), F(1, 3), F(1, 2), F(2, 5), F(1)],
    [F(1, 2)] * 4 + [F(1)],
    [F(1, 5)] * 4 + [F(1)],
]

PHI4 = lrn.length_features(4, degree=1)
Q4 = np.linspace(0.2, 0.8, 4)


def _train(**kw: Any) -> lrn.TrainingRun:
    args: dict[str, Any] = {"slots": 2, "batch": 2, "steps": 2, "learning_rate": 0.1}
    args.update(kw)
    return lrn.train_policy([0.0, 0.0], PHI4, Q4, **args)


def test_exact_async_gradient_case_needs_four_behaviour_rows() -> None:
    # the recipe of the refusals below: Δ = 53/30 exactly, ceil(5/Δ) = 3
    step = lrn.fluid_step_time(lrn.hazard_length_pmf(H5), slots=3, batch=2)
    assert step == F(53, 30)
    got = lrn.async_gradient_exact(H5, STALE, EYE5, Q5, slots=3, batch=2)
    assert all(isinstance(x, Fraction) for x in got.mean)


CASES = [
    # mutant: `len(rows) < s_need + 1` made `< s_need + 0` (one row short got through, and the
    # loop over s = 0..s_need then failed with an IndexError)
    Case(
        "exact-async-one-behaviour-row-short",
        lambda: lrn.async_gradient_exact(H5, STALE[:3], EYE5, Q5, slots=3, batch=2),
        ValueError,
        r"behaviours must cover every staleness up to ceil\(M/Δ\) = 3; got behaviours=3\. "
        r"Pass 4 behaviour rows \(s = 0\.\.3\)\.",
    ),
    # mutant: the behaviours check's `or`s made `and`s (a first row that is not the target's
    # hazard, or a row of the wrong length, was taken)
    Case(
        "exact-async-first-behaviour-not-the-target",
        lambda: lrn.async_gradient_exact(H5, [*STALE[1:], STALE[3]], EYE5, Q5, slots=3, batch=2),
        ValueError,
        r"behaviours must be a list of hazard vectors of length 5, the first equal to hazard",
    ),
    Case(
        "exact-async-behaviour-row-too-short",
        lambda: lrn.async_gradient_exact(
            H5, [H5, STALE[1], STALE[2], STALE[3][1:]], EYE5, Q5, slots=3, batch=2
        ),
        ValueError,
        r"behaviours must be a list of hazard vectors of length 5, the first equal to hazard",
    ),
    # mutant: the durations check `dur > 0` made `dur > -1` (a zero duration reached the
    # simulator, which refused it under another name)
    Case(
        "train-duration-zero",
        lambda: _train(durations=[0.0, 1.0, 2.0, 3.0]),
        ValueError,
        r"durations must have 4 positive non-decreasing entries, with partial='none'; "
        r"got durations=array of shape \(4,\)",
    ),
    # found on the way: a negative seed came out as numpy's own "expected non-negative integer"
    Case(
        "train-seed-negative",
        lambda: _train(seed=-1),
        ValueError,
        r"seed must be >= 0 \(random seed\); got seed=-1",
    ),
    # mutant: the carried-leftover chain's limit 5_000 made 4999. Uniform lengths 1..4 with n = 4,
    # k = 1 reach 5354 carried states (counted with the limit lifted), over the limit
    Case(
        "carry-chain-over-the-limit",
        lambda: lrn.first_k_carry_gradient(
            [0.25] * 4, np.zeros((4, 1)), [0.5] * 4, n=4, k=1, step=0
        ),
        ValueError,
        r"n must leave at most 5000 carried-leftover states for exact solution; got n=4\. "
        r"Use a smaller M or n - k\.",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_call_raises_a_message_that_says_how_to_fix_it(case: Case) -> None:
    check_refusal(case)


def test_train_policy_refuses_zero_steps_itself_before_drawing_anything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # mutant: train_policy's `steps` minimum 1 made 0; the simulator's own check then refused
    # steps=0 with the same words, but only after the rollouts' uniforms were drawn
    def drawn(*args: Any) -> Any:
        raise AssertionError("the uniforms were drawn before steps was checked")

    monkeypatch.setattr(lrn_training, "_uniforms", drawn)
    with pytest.raises(ValueError, match=r"steps must be >= 1 \(trainer steps\); got steps=0"):
        _train(steps=0)


def test_carry_chain_limit_counts_carried_states_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # uniform lengths 1..4, n = 4, k = 3: 14 carried states (the cold start is not one of them);
    # "at most" the limit is solved, one more is refused (found on the way: the cold start was
    # counted, so a chain of exactly the limit was refused)
    args: dict[str, Any] = {"n": 4, "k": 3, "step": 0}
    call = ([0.25] * 4, np.zeros((4, 1)), [0.5] * 4)
    assert lrn.first_k_carry_gradient(*call, **args).states == 14
    monkeypatch.setattr(lrn_first_k, "_MAX_CARRY_STATES", 14)
    assert lrn.first_k_carry_gradient(*call, **args).states == 14
    monkeypatch.setattr(lrn_first_k, "_MAX_CARRY_STATES", 13)
    with pytest.raises(ValueError, match="at most 13 carried-leftover states"):
        lrn.first_k_carry_gradient(*call, **args)


def test_carry_without_leftovers_is_first_k_with_n_equal_k() -> None:
    # found on the way: n = k carries nothing, and the stationary chain (no carried state) raised
    # an IndexError. Every step is then the cold start's: the batch is all n rollouts, so the law
    # is first_k_gradient's with k = n (composition enumeration, another path) and the trained
    # law is p itself; the step time is E[max(L1, L2)] = 1 + P(max > 1) + P(max > 2)
    # = 1 + (1 - 1/4) + (1 - (2/3)^2) = 83/36 for p = (1/2, 1/6, 1/3).
    h = [F(1, 2), F(1, 3), F(1)]
    p = lrn.hazard_length_pmf(h)
    s = lrn.token_scores(h, np.eye(3, dtype=int).tolist()).sum(axis=1)
    q = [F(0), F(1, 2), F(1)]
    got = lrn.first_k_carry_gradient(p, s, q, n=2, k=2)
    ref = lrn.first_k_gradient(p, s, q, n=2, k=2)
    assert list(got.mean) == list(ref.mean) == list(lrn.policy_gradient(p, s, q).mean)
    assert got.trace_variance == ref.trace_variance == F(683, 10368)
    assert got.trained_law.tolist() == [p]
    assert got.step_time == F(83, 36)
    assert got.states == 0


# ---------------------------------------------------------------------------------------------
# refimpl.learning_async (seed 3102)
# ---------------------------------------------------------------------------------------------


def test_dispatch_law_of_a_single_length_by_hand() -> None:
    # mutant: the support's `q != 0` made `q != 1` (a length of probability 1 left out, the
    # zero-probability ones kept). Every rollout has length 2: both slots finish at t = 2, slot 0's
    # trains step 0 fresh, slot 1's step 1 one version stale; nothing has length 1.
    law = lasync.continuous_dispatch_law([F(0), F(1)], slots=2, batch=1, steps=2)
    assert law.sample == ((F(0), F(0)), (F(1, 2), F(1, 2)))
    assert (law.length_mean, law.staleness_mean, law.dropped) == (F(2), F(1, 2), (F(1),))
    # one slot, lengths 1 or 3: step 0 trains the first rollout fresh; its relaunch, at the
    # instant version 1 is published, sees the old version, so step 1's is one version stale
    law = lasync.continuous_dispatch_law([F(1, 2), F(0), F(1, 2)], slots=1, batch=1, steps=2)
    assert law.sample == ((F(1, 4), F(1, 4)), (F(0), F(0)), (F(1, 4), F(1, 4)))


def test_dispatch_law_visits_each_state_once_and_counts_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # mutants: the heap's key (j, fill, #fresh) made (j, slots, #fresh) (states then come off the
    # heap before all their weight has arrived and are expanded twice: same law, 1569 visits
    # instead of 1158), and the visit count starting at -1. Every state the programme pops is
    # recorded; each must be distinct and `states` must be their number.
    popped: list[Any] = []

    def heappop(heap: list[Any]) -> Any:
        item = heapq.heappop(heap)
        popped.append((item[0], item[3]))
        return item

    monkeypatch.setattr(lasync, "heapq", SimpleNamespace(heappush=heapq.heappush, heappop=heappop))
    law = lasync.continuous_dispatch_law(
        [F(1, 2), F(1, 4), F(1, 4)], slots=3, batch=2, steps=6, first_step=2
    )
    assert len(set(popped)) == len(popped) == law.states


def test_simulated_cells_default_to_the_whole_run_from_seed_zero() -> None:
    # mutants: the defaults first_step = 0 made -1 (refused) and seed = 0 made 1
    kw: dict[str, Any] = {"slots": 3, "batch": 2, "steps": 3, "replications": 40}
    pmf = [F(1, 2), F(1, 4), F(1, 4)]
    got = lasync.simulated_dispatch_cells(pmf, **kw)
    same = lasync.simulated_dispatch_cells(pmf, first_step=0, seed=0, **kw)
    other = lasync.simulated_dispatch_cells(pmf, first_step=0, seed=1, **kw)
    assert got.sample.tolist() == same.sample.tolist()
    assert got.dropped.tolist() == same.dropped.tolist()
    assert got.sample.tolist() != other.sample.tolist()  # the seed is seen


def test_simulated_cells_take_one_replication_and_a_window_from_step_zero() -> None:
    # mutants: replications' minimum 1 made 2, first_step's minimum 0 made 1 (both refused a
    # valid call); one replication is one draw of each
    one = lasync.simulated_dispatch_cells(
        [F(1, 2), F(1, 2)], slots=2, batch=1, steps=2, first_step=0, replications=1
    )
    assert (int(one.sample.sum()), int(one.dropped.sum()), one.dropped_total) == (1, 1, 0)


def test_chi_square_statistic_cells_and_degrees_of_freedom_by_hand() -> None:
    # mutants: the small/big split's `e < 5` made `<= 5` and `e >= 5` made `> 5` (a cell of
    # expected count exactly 5 counted twice, or dropped), the pooling's `pe < 5` made `< 4`, and
    # df = max(cells - 1, 1) with its 1s made 2
    # R = 10 on (1/2, 1/2): expected 5 and 5, both kept; (1² + 1²)/5 = 0.4, one degree of freedom
    two = lasync.chi_square_check([6, 4], [F(1, 2), F(1, 2)], alpha=1e-3)
    assert two.statistic == pytest.approx(0.4, rel=1e-15)
    assert (two.df, two.cells, two.impossible) == (1, 2, 0)
    # R = 100 on (1/4, 1/2, 1/4): 25²/25 + 10²/50 + 5²/25 = 1 + 2 + 1 = 4; with 2 degrees of
    # freedom the chi-square quantile has the closed form -2 ln(alpha)
    three = lasync.chi_square_check([30, 40, 30], [F(1, 4), F(1, 2), F(1, 4)], alpha=1e-3)
    assert (three.statistic, three.df, three.cells) == (4.0, 2, 3)
    assert three.threshold == pytest.approx(-2 * np.log(1e-3), rel=1e-12)
    assert three.passed
    # R = 72 on (15/16, 1/32, 1/32): expected 67.5, 2.25, 2.25; the small pool (4.5) is under 5, so
    # it goes into the smallest other cell and one cell is left, with statistic 0
    pooled = lasync.chi_square_check([68, 2, 2], [F(15, 16), F(1, 32), F(1, 32)], alpha=1e-3)
    assert (pooled.statistic, pooled.df, pooled.cells) == (0.0, 1, 1)


def test_the_documented_state_limit_is_the_one_the_law_refuses_above() -> None:
    # the two survivors of seed 3102 left open by the sample (MAX_STATES 200_000 made 199_999
    # or 200_001): reaching the limit takes 200 001 states, about 7 s, so the limit is pinned
    # where a user reads it, the concept page, which must state the number the code uses
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs/concepts/learning.md").read_text()
    stated = re.search(r"it refuses above ([\d ]+)\s*\(`MAX_STATES`\)", page)
    assert stated is not None
    assert int(stated.group(1).replace(" ", "")) == lasync.MAX_STATES
