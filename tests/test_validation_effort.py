"""Bad calls to refimpl.effort and the messages they give (see tests/_validation_table.py).

Each case is ``(id, call, exception type, regex the message must match)``; every refusal must also
be an instance of :class:`refimpl.RefimplError`.
"""

from __future__ import annotations

import numpy as np
import pytest
from _validation_table import Case, as_any, check_refusal

import refimpl as r


def _effort_cases() -> list[Case]:
    pen = {"k0": 0.01, "b_min": 0.0, "tau": 1.0}
    mod = {"q_max": 1.0, "lam": 100.0, **pen}
    return [
        Case(
            "effort_penalty-b-below-b_min",
            lambda: r.effort_penalty([1.0, -0.5], **pen),
            ValueError,
            r"b must be >= b_min=0\.0.*Entry 1 is -0\.5",
        ),
        Case(
            "effort_penalty-tau-zero",
            lambda: r.effort_penalty(1.0, k0=0.01, b_min=0.0, tau=0.0),
            ValueError,
            r"tau must be > 0 \(decay length in effort units\); got tau=0\.0",
        ),
        Case(
            "effort_penalty-tau-negative",
            lambda: r.effort_penalty(1.0, k0=0.01, b_min=0.0, tau=-1.0),
            ValueError,
            r"tau must be > 0",
        ),
        Case(
            "effort_penalty-k0-negative",
            lambda: r.effort_penalty(1.0, k0=-0.1, b_min=0.0, tau=1.0),
            ValueError,
            r"k0 must be >= 0.*got k0=-0\.1",
        ),
        Case(
            "effort_penalty-b-nan",
            lambda: r.effort_penalty([0.0, float("nan")], **pen),
            ValueError,
            r"b must contain only finite values.*index 1",
        ),
        Case(
            "effort_penalty-b-inf",
            lambda: r.effort_penalty(float("inf"), **pen),
            ValueError,
            r"b must contain only finite values",
        ),
        Case(
            "effort_penalty-tau-inf",
            lambda: r.effort_penalty(1.0, k0=0.01, b_min=0.0, tau=float("inf")),
            ValueError,
            r"tau must be finite",
        ),
        Case(
            "effort_penalty-b_min-nan",
            lambda: r.effort_penalty(1.0, k0=0.01, b_min=float("nan"), tau=1.0),
            ValueError,
            r"b_min must be finite",
        ),
        Case(
            "effort_penalty-b-text",
            lambda: r.effort_penalty("high", **pen),
            TypeError,
            r"b must be an array of real numbers",
        ),
        Case(
            "effort_penalty-k0-text",
            lambda: r.effort_penalty(1.0, k0=as_any("0.1"), b_min=0.0, tau=1.0),
            TypeError,
            r"k0 must be a real number",
        ),
        Case(
            "shaped_reward-shape-mismatch",
            lambda: r.shaped_reward([1.0, 1.0], [1.0, 2.0, 3.0], 0.0, **pen),
            ValueError,
            r"quality and length must have the same shape",
        ),
        Case(
            "shaped_reward-b-shape",
            lambda: r.shaped_reward([1.0, 1.0], [1.0, 2.0], [0.0, 1.0, 2.0], **pen),
            ValueError,
            r"b must be a scalar or have the shape of quality",
        ),
        Case(
            "shaped_reward-negative-length",
            lambda: r.shaped_reward([1.0], [-3.0], 0.0, **pen),
            ValueError,
            r"length must be >= 0",
        ),
        Case(
            "shaped_reward-length_scale-zero",
            lambda: r.shaped_reward([1.0], [3.0], 0.0, length_scale=0.0, **pen),
            ValueError,
            r"length_scale must be > 0",
        ),
        Case(
            "shaped_reward-quality-nan",
            lambda: r.shaped_reward([np.nan], [3.0], 0.0, **pen),
            ValueError,
            r"quality must contain only finite values",
        ),
        Case(
            "shaped_reward-overflow",
            lambda: r.shaped_reward([1.0], [1e300], 0.0, k0=1e300, b_min=0.0, tau=1.0),
            ValueError,
            r"length must give a finite shaped reward",
        ),
        Case(
            "saturating_quality-lam-zero",
            lambda: r.saturating_quality([1.0], q_max=1.0, lam=0.0),
            ValueError,
            r"lam must be > 0",
        ),
        Case(
            "saturating_quality-negative-length",
            lambda: r.saturating_quality([-1.0], q_max=1.0, lam=1.0),
            ValueError,
            r"length must be >= 0",
        ),
        Case(
            "optimal_length-k0-zero",
            lambda: r.optimal_length(0.0, q_max=1.0, lam=1.0, k0=0.0, b_min=0.0, tau=1.0),
            ValueError,
            r"k0 must be > 0 for an optimal length",
        ),
        Case(
            "optimal_length-q_max-zero",
            lambda: r.optimal_length(0.0, q_max=0.0, lam=1.0, k0=0.1, b_min=0.0, tau=1.0),
            ValueError,
            r"q_max must be > 0",
        ),
        Case(
            "optimal_length-b-below-b_min",
            lambda: r.optimal_length(-1.0, **mod),
            ValueError,
            r"b must be >= b_min",
        ),
        Case(
            "optimal_length-overflow",
            lambda: r.optimal_length(1e300, q_max=1.0, lam=1e10, k0=0.1, b_min=0.0, tau=1e-10),
            ValueError,
            r"b must give a finite optimal length",
        ),
        Case(
            "effort_frontier-tau-zero",
            lambda: r.effort_frontier(0.0, q_max=1.0, lam=1.0, k0=0.1, b_min=0.0, tau=0.0),
            ValueError,
            r"tau must be > 0",
        ),
        Case(
            "pareto_front-shape-mismatch",
            lambda: r.pareto_front([1.0, 2.0], [1.0]),
            ValueError,
            r"cost and quality must have the same shape",
        ),
        Case(
            "pareto_front-2d",
            lambda: r.pareto_front([[1.0]], [[1.0]]),
            ValueError,
            r"cost must be 1-D",
        ),
        Case(
            "pareto_front-nan",
            lambda: r.pareto_front([1.0, 2.0], [1.0, np.nan]),
            ValueError,
            r"quality must contain only finite values",
        ),
        # published penalties
        Case(
            "train-b_max-below-b_min",
            lambda: r.train_effort_policy(
                q_max=1.0, lam=1.0, k0=0.1, b_min=1.0, tau=1.0, b_max=0.5, rng=0
            ),
            ValueError,
            r"b_max must be > b_min=1\.0",
        ),
        Case(
            "train-rng-float",
            lambda: r.train_effort_policy(
                q_max=1.0, lam=1.0, k0=0.1, b_min=0.0, tau=1.0, b_max=1.0, rng=as_any(0.5)
            ),
            TypeError,
            r"rng must be a numpy\.random\.Generator or a non-negative int seed",
        ),
        Case(
            "train-group-one",
            lambda: r.train_effort_policy(
                q_max=1.0, lam=1.0, k0=0.1, b_min=0.0, tau=1.0, b_max=1.0, rng=0, group=1
            ),
            ValueError,
            r"group must be >= 2",
        ),
        Case(
            "train-k0-zero",
            lambda: r.train_effort_policy(
                q_max=1.0, lam=1.0, k0=0.0, b_min=0.0, tau=1.0, b_max=1.0, rng=0
            ),
            ValueError,
            r"k0 must be > 0 to train a policy",
        ),
        Case(
            "difficulty_mix-median-zero",
            lambda: r.difficulty_mix(median=0.0, sigma=1.0),
            ValueError,
            r"median must be > 0 \(median of λ\); got median=0\.0",
        ),
        Case(
            "difficulty_mix-nodes-zero",
            lambda: r.difficulty_mix(median=100.0, sigma=1.0, nodes=0),
            ValueError,
            r"nodes must be >= 1 \(quadrature classes\)",
        ),
        Case(
            "budget_frontier-classes-differ",
            lambda: r.budget_frontier(
                [10.0], q_max=1.0, lam=[100.0, 200.0], weights=[0.5, 0.2, 0.3]
            ),
            ValueError,
            r"lam must have one entry per class \(3 classes",
        ),
        Case(
            "budget_frontier-weights-sum",
            lambda: r.budget_frontier([10.0], q_max=1.0, lam=[100.0, 200.0], weights=[0.7, 0.7]),
            ValueError,
            r"weights must sum to 1 \(within 1e-9\).*It sums to 1\.4",
        ),
        Case(
            "difficulty_mix-scale-overflows",
            lambda: r.difficulty_mix(median=1.0, sigma=294.0),
            ValueError,
            r"median and sigma must keep every class's λ = median·exp\(sigma·z\) a positive, "
            r"finite float64.*Pass a smaller sigma",
        ),
        Case(
            "difficulty_mix-nodes-too-many",
            lambda: r.difficulty_mix(median=1.0, sigma=1.0, nodes=2**40),
            ValueError,
            r"nodes must be <= 1000000 \(the rule errs by about 1/nodes",
        ),
    ]


CASES: list[Case] = _effort_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_call_raises_a_message_that_says_how_to_fix_it(case: Case) -> None:
    check_refusal(case)
