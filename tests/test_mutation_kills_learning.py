"""Pinned behaviours of refimpl.learning and refimpl.learning_async that a sampled mutation run
(``tools/mutate.py``, seeds 3101 and 3102) found no test holding: each test names the mutant it
was seen to fail on."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from _validation_table import Case, check_refusal

from refimpl import learning as lrn

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

    monkeypatch.setattr(lrn, "_uniforms", drawn)
    with pytest.raises(ValueError, match=r"steps must be >= 1 \(trainer steps\); got steps=0"):
        _train(steps=0)


def test_carry_chain_limit_counts_carried_states_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # uniform lengths 1..4, n = 4, k = 3: 14 carried states (the cold start is not one of them);
    # "at most" the limit is solved, one more is refused (found on the way: the cold start was
    # counted, so a chain of exactly the limit was refused)
    args: dict[str, Any] = {"n": 4, "k": 3, "step": 0}
    call = ([0.25] * 4, np.zeros((4, 1)), [0.5] * 4)
    assert lrn.first_k_carry_gradient(*call, **args).states == 14
    monkeypatch.setattr(lrn, "_MAX_CARRY_STATES", 14)
    assert lrn.first_k_carry_gradient(*call, **args).states == 14
    monkeypatch.setattr(lrn, "_MAX_CARRY_STATES", 13)
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
