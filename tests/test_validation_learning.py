"""Bad calls to refimpl.learning and the messages they give (see tests/_validation_table.py).

Every refusal must also be an instance of :class:`refimpl.RefimplError`.
"""

from __future__ import annotations

import pytest
from _validation_table import Case, check_refusal

from refimpl import learning as lrn

CASES: list[Case] = [
    Case(
        "learning-max-length-zero",
        lambda: lrn.length_features(0),
        ValueError,
        r"max_length must be >= 1 \(longest length\); got max_length=0",
    ),
    Case(
        "learning-degree-negative",
        lambda: lrn.length_features(4, degree=-1),
        ValueError,
        r"degree must be >= 0 \(polynomial degree\); got degree=-1",
    ),
    Case(
        "learning-penalty-negative",
        lambda: lrn.mean_reward([0.5, 0.5], [1.0, 1.0], penalty=-1.0),
        ValueError,
        r"penalty must be >= 0; got penalty=-1\.0",
    ),
    Case(
        "learning-quality-length",
        lambda: lrn.mean_reward([0.5, 0.5], [1.0], penalty=0.0),
        ValueError,
        r"quality must have one value per length \(2\); got quality=\[1\.0\]",
    ),
    Case(
        "learning-features-1d",
        lambda: lrn.stop_hazard([0.0], [1.0]),
        ValueError,
        r"features must be 2-D; got features=array of shape \(1,\)",
    ),
    Case(
        "learning-clip-without-clipped-ht",
        lambda: lrn.first_k_gradient([0.5, 0.5], [[1.0], [-1.0]], [0.5, 0.5], n=2, k=1, clip=2.0),
        ValueError,
        r"clip must be given exactly when correction='clipped_ht'.*got clip=2\.0",
    ),
    Case(
        "learning-carry-k-above-n",
        lambda: lrn.first_k_carry_gradient([0.5, 0.5], [[1.0], [-1.0]], [0.5, 0.5], n=1, k=2),
        ValueError,
        r"k must be <= n=1; got k=2",
    ),
    Case(
        "learning-mask-ipw-without-eta",
        lambda: lrn.async_gradient(
            [0.0, 0.0],
            lrn.length_features(4, degree=1),
            [0.5] * 4,
            slots=2,
            batch=2,
            mask_ipw=True,
        ),
        ValueError,
        r"mask_ipw must need a mask \(eta\) whose keep probability it inverts; got mask_ipw=True",
    ),
    Case(
        "learning-exact-geometric",
        lambda: lrn.async_gradient_exact(
            [1], [[1]], [[1]], [1], slots=1, batch=1, correction="geometric"
        ),
        ValueError,
        r"correction must be one of .* \(geometric's l-th root is irrational in general\)",
    ),
    Case(
        "learning-exact-float-input",
        lambda: lrn.async_gradient_exact([1.0], [[1.0]], [[1]], [1], slots=1, batch=1),
        ValueError,
        r"hazard must be rational, with every behaviour",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_call_raises_a_message_that_says_how_to_fix_it(case: Case) -> None:
    check_refusal(case)
