"""Bad calls to refimpl.penalties and the messages they give (see tests/_validation_table.py).

Each case is ``(id, call, exception type, regex the message must match)``; every refusal must also
be an instance of :class:`refimpl.RefimplError`.
"""

from __future__ import annotations

import numpy as np
import pytest
from _validation_table import Case, as_any, check_refusal

import refimpl as r


def _penalties_cases() -> list[Case]:
    return [
        Case(
            "dapo-cache-above-max",
            lambda: r.dapo_overlong_penalty([1.0], max_length=100, cache_length=200),
            ValueError,
            r"cache_length must be <= max_length=100\.0",
        ),
        Case(
            "dapo-cache-zero",
            lambda: r.dapo_overlong_penalty([1.0], max_length=100, cache_length=0),
            ValueError,
            r"cache_length must be > 0",
        ),
        Case(
            "dapo-max-negative",
            lambda: r.dapo_overlong_penalty([1.0], max_length=-5, cache_length=1),
            ValueError,
            r"max_length must be > 0",
        ),
        Case(
            "dapo-negative-length",
            lambda: r.dapo_overlong_penalty([-1.0], max_length=100, cache_length=10),
            ValueError,
            r"lengths must be >= 0 \(token counts\)",
        ),
        Case(
            "dapo-floor-not-bool",
            lambda: r.dapo_overlong_penalty(
                [1.0], max_length=100, cache_length=10, floor=as_any("no")
            ),
            TypeError,
            r"floor must be a bool",
        ),
        Case(
            "dapo-negative-factor",
            lambda: r.dapo_overlong_penalty(
                [1.0], max_length=100, cache_length=10, penalty_factor=-1.0
            ),
            ValueError,
            r"penalty_factor must be >= 0",
        ),
        Case(
            "kimi-shape-mismatch",
            lambda: r.kimi_length_reward([1.0, 2.0], [True]),
            ValueError,
            r"lengths and correct must have the same shape",
        ),
        Case(
            "kimi-correct-not-binary",
            lambda: r.kimi_length_reward([1.0, 2.0], [1, 2]),
            ValueError,
            r"correct must contain only booleans or 0/1",
        ),
        Case(
            "kimi-length-nan",
            lambda: r.kimi_length_reward([1.0, np.nan], [True, True]),
            ValueError,
            r"lengths must contain only finite values",
        ),
        Case(
            "kimi-bad-scope",
            lambda: r.kimi_length_reward([1.0, 2.0], [True, True], scope=as_any("group")),
            ValueError,
            r"scope must be \"problem\" or \"batch\"",
        ),
        Case(
            "kimi-groups-shape",
            lambda: r.kimi_length_reward([1.0, 2.0], [True, True], groups=[0]),
            ValueError,
            r"groups must have the shape of lengths",
        ),
        Case(
            "kimi-groups-2d",
            lambda: r.kimi_length_reward([[1.0, 2.0]], [[True, True]], groups=[0, 0]),
            ValueError,
            r"groups must be given only with 1-D lengths",
        ),
        Case(
            "cosine-min-above-max-correct",
            lambda: r.cosine_length_reward(
                [1.0], [True], max_length=10, min_value_correct=2.0, max_value_correct=1.0
            ),
            ValueError,
            r"min_value_correct must be <= max_value_correct=1\.0",
        ),
        Case(
            "cosine-min-above-max-wrong",
            lambda: r.cosine_length_reward(
                [1.0], [True], max_length=10, min_value_wrong=0.0, max_value_wrong=-1.0
            ),
            ValueError,
            r"min_value_wrong must be <= max_value_wrong",
        ),
        Case(
            "cosine-max-length-zero",
            lambda: r.cosine_length_reward([1.0], [True], max_length=0),
            ValueError,
            r"max_length must be > 0",
        ),
        Case(
            "l1-targets-shape",
            lambda: r.l1_exact_reward([1.0, 2.0], [True, True], [1.0, 2.0, 3.0]),
            ValueError,
            r"target_lengths must be a scalar or have the shape of lengths",
        ),
        Case(
            "l1-alpha-negative",
            lambda: r.l1_exact_reward([1.0], [True], 1.0, alpha=-0.1),
            ValueError,
            r"alpha must be >= 0",
        ),
        Case(
            "l1-delta-above-one",
            lambda: r.l1_max_reward([1.0], [True], 1.0, delta=1.5),
            ValueError,
            r"delta must be <= 1",
        ),
        Case(
            "l1-negative-target",
            lambda: r.l1_max_reward([1.0], [True], -1.0),
            ValueError,
            r"target_lengths must be >= 0",
        ),
        Case(
            "kimi-complex-correct",
            lambda: r.kimi_length_reward([1.0], [1 + 2j]),
            TypeError,
            r"correct must be a boolean array.*imaginary part",
        ),
        Case(
            "kimi-ragged-groups",
            lambda: r.kimi_length_reward([1.0, 2.0], [1, 1], groups=as_any([[1], [1, 2]])),
            TypeError,
            r"groups must be a 1-D array of comparable labels",
        ),
        Case(
            "l1-exact-reward-beyond-float64",
            lambda: r.l1_exact_reward([1.0], [True], 1e308, alpha=2.0),
            ValueError,
            r"alpha must keep alpha \* \|target_lengths - lengths\| within float64's range",
        ),
        Case(
            "dapo-unfloored-beyond-float64",
            lambda: r.dapo_overlong_penalty(
                [4e11], max_length=3e11, cache_length=1e-300, floor=False
            ),
            ValueError,
            r"cache_length must be large enough that the unfloored penalty fits in float64.*floor=True",
        ),
        # the toy policy
    ]


CASES: list[Case] = _penalties_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_call_raises_a_message_that_says_how_to_fix_it(case: Case) -> None:
    check_refusal(case)
