"""Pinned behaviours of refimpl.effort that a sampled mutation run (``tools/mutate.py``, seed
2026) found no test holding: each test names the mutant it was seen to fail on."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from _validation_table import Case, check_refusal

import refimpl as r


def test_frontier_quality_where_only_the_cheaper_class_spends() -> None:
    # Two classes, weights 1/2, q_max = 1, λ = (20, 200): class d spends iff u > ln λ_d, so at
    # mean cost c = 10 only the first does, with 10 = (1/2)·20·(u − ln 20), i.e. u = ln 20 + 1,
    # and the mix's quality is (1/2)(1 − 20 e^{−u}) + (1/2)·0 = (1 − 1/e)/2 (mutant: the bisection's
    # midpoint (lo + hi)/2 made (lo − hi)/2, which returns the starting upper bracket u = ln 200
    # and the quality 0.45; the closed-form start is exact only when every class spends).
    quality = r.frontier_quality([10.0], q_max=1.0, lam=[20.0, 200.0], weights=[0.5, 0.5])
    assert float(quality[0]) == pytest.approx((1.0 - math.exp(-1.0)) / 2.0, rel=1e-14)


TRAIN: dict[str, Any] = {
    "q_max": 1.0,
    "b_min": 0.0,
    "tau": 1.0,
    "b_max": 1.0,
    "steps": 1,
    "batch": 1,
}

CASES = [
    # mutant: the raise of train_conditioned_policy's k0 check removed (it trained on k0 = 0)
    Case(
        "train_conditioned-k0-zero",
        lambda: r.train_conditioned_policy(
            lam=[10.0, 20.0], weights=[0.5, 0.5], k0=0.0, rng=0, **TRAIN
        ),
        ValueError,
        r"k0 must be > 0 to train a policy \(k0 = 0 has no optimum\); got k0=0\.0",
    ),
    # mutant: the seed check `int(rng) >= 0` made `>= -1` (numpy's own ValueError came out)
    Case(
        "train-rng-negative",
        lambda: r.train_effort_policy(lam=10.0, k0=0.1, rng=-1, **TRAIN),
        TypeError,
        r"rng must be a numpy\.random\.Generator or a non-negative int seed; got rng=-1",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_call_raises_a_message_that_says_how_to_fix_it(case: Case) -> None:
    check_refusal(case)


def test_seed_zero_is_a_seed() -> None:
    # the boundary of `int(rng) >= 0`: 0 is accepted and is the same stream as default_rng(0)
    a = r.train_effort_policy(lam=10.0, k0=0.1, rng=0, **TRAIN)
    b = r.train_effort_policy(lam=10.0, k0=0.1, rng=np.random.default_rng(0), **TRAIN)
    assert a.reward_history.tolist() == b.reward_history.tolist()


def test_a_group_of_two_is_the_smallest_leave_one_out_group() -> None:
    # RLOO needs >= 2 lengths per problem, and 2 is enough (mutant: train_conditioned_policy's
    # minimum group made 3); the same boundary for train_effort_policy
    mix: dict[str, Any] = {"lam": [10.0, 20.0], "weights": [0.5, 0.5], "k0": 0.1}
    policy = r.train_conditioned_policy(rng=0, group=2, **mix, **TRAIN)
    assert policy.reward_history.shape == (1,)
    assert np.all(np.isfinite(policy.mean_coef))
    single = r.train_effort_policy(lam=10.0, k0=0.1, rng=0, group=2, **TRAIN)
    assert single.reward_history.shape == (1,)
    check_refusal(
        Case(
            "train_conditioned-group-one",
            lambda: r.train_conditioned_policy(rng=0, group=1, **mix, **TRAIN),
            ValueError,
            r"group must be >= 2 \(lengths per problem; RLOO needs >= 2\); got group=1",
        )
    )


class _TopUniform(np.random.Generator):
    """A generator whose uniforms are all the largest float below 1 (normals as PCG64's)."""

    def uniform(self, low: Any = 0.0, high: Any = 1.0, size: Any = None) -> Any:
        return np.full(size, np.nextafter(1.0, 0.0))


def test_a_class_draw_above_the_float_sum_of_the_weights_is_the_last_class() -> None:
    # weights may sum to 1 within 1e-9; a uniform above their float cumsum (1 - 5e-10 here) is
    # the last class, exactly as with weights summing to 1 (mutant: the clamp to w.size - 1 made
    # w.size, an IndexError on such a draw)
    run: dict[str, Any] = {"lam": [10.0, 20.0], "k0": 0.1, "success": "expected", "group": 2}
    short = r.train_conditioned_policy(
        weights=[0.5, 0.5 - 5e-10], rng=_TopUniform(np.random.PCG64(0)), **run, **TRAIN
    )
    exact = r.train_conditioned_policy(
        weights=[0.5, 0.5], rng=_TopUniform(np.random.PCG64(0)), **run, **TRAIN
    )
    assert short.reward_history.tolist() == exact.reward_history.tolist()


class _ZeroLength(np.random.Generator):
    """Uniforms all 0.0 (the smallest value of [0, 1)), normals all -1e4 (lengths e^{-5000} = 0)."""

    def uniform(self, low: Any = 0.0, high: Any = 1.0, size: Any = None) -> Any:
        return np.zeros(size)

    def standard_normal(self, size: Any = None, *args: Any, **kwargs: Any) -> Any:
        return np.full(size, -1e4)


def test_a_rollout_of_quality_zero_never_succeeds_even_on_a_zero_draw() -> None:
    # success ~ Bernoulli(Q) is drawn as u < Q with u in [0, 1): P(u < Q) = Q exactly, so Q = 0
    # (a length of 0) never succeeds, even on u = 0; the reward is then 0 - k·0 = 0 (mutant:
    # u <= Q, which counts that draw as a success and gives reward 1)
    policy = r.train_conditioned_policy(
        lam=[10.0, 20.0], weights=[0.5, 0.5], k0=0.1, rng=_ZeroLength(np.random.PCG64(0)), **TRAIN
    )
    assert policy.reward_history.tolist() == [0.0]
