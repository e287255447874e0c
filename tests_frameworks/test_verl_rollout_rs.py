"""verl 0.9.1's rollout rejection on a k2/k3 statistic: the real compute_rollout_rejection_mask on
hand-worked inputs, against refimpl.divergence_rejection_mask.

The conformance checks (the matrix) search for disagreements; these tests pin the rules read in
verl's code on inputs chosen for them: the threshold kept inclusively, the ±20 clamp of the
log-ratio before each token's estimator, padding ignored, and the seq-mean epsilon (a mean over
n + 1e-8) that keeps a sequence the exact mean rejects.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

import refimpl
from refimpl.frameworks import adapter

OPTIONS = (
    "token_k2",
    "token_k3",
    "seq_sum_k2",
    "seq_sum_k3",
    "seq_mean_k2",
    "seq_mean_k3",
    "seq_max_k2",
    "seq_max_k3",
)

# d = log π − log μ by rows; the last token of row 1 is padding (its 30.0 must not count)
D = [[0.5, -0.25, 1.0], [-0.5, 0.0, 30.0]]
M = [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]


def _run(option: str, d: Any, mask: Any, upper: float) -> list[list[float]]:
    t = torch.tensor(d, dtype=torch.float64)
    found = adapter(f"verl.rollout_rs_{option}").candidate(
        t, torch.zeros_like(t), upper=upper, mask=torch.tensor(mask, dtype=torch.float64)
    )
    return [[float(v) for v in row] for row in found.tolist()]


def _reference(option: str, d: Any, mask: Any, upper: float) -> list[list[float]]:
    level, estimator = option.rsplit("_", 1)
    reduce = "token" if level == "token" else level.removeprefix("seq_")
    a = np.asarray(d, dtype=np.float64)
    options: dict[str, Any] = {"estimator": estimator, "reduce": reduce}
    out = refimpl.divergence_rejection_mask(
        a, np.zeros_like(a), upper=upper, mask=mask, log_ratio_clamp=20.0, **options
    )
    return [[float(v) for v in row] for row in out]


@pytest.mark.parametrize("option", OPTIONS)
@pytest.mark.parametrize("upper", [0.03125, 0.1, 0.125, 0.5, 0.65625, 0.9])
def test_each_option_agrees_with_the_reference_by_hand(option: str, upper: float) -> None:
    # k2 statistics here (0.125, 0.03125, 0.5; sums 0.65625, 0.125) are exact: bounds equal to
    # them test that verl keeps a statistic equal to its threshold
    assert _run(option, D, M, upper) == _reference(option, D, M, upper)


def test_the_threshold_is_inclusive() -> None:
    assert _run("token_k2", D, M, 0.125) == [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]]
    assert _run("seq_sum_k2", D, M, 0.65625) == [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]
    assert _run("seq_max_k2", D, M, 0.125) == [[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]]


def test_the_log_ratio_is_clamped_to_20_before_the_estimator() -> None:
    # k2 of −30 clamped to −20 is 200: kept at 200, rejected just below; k3 of 800 is e^20 − 21
    assert _run("token_k2", [[-30.0]], [[1.0]], 200.0) == [[1.0]]
    assert _run("token_k2", [[-30.0]], [[1.0]], 199.9) == [[0.0]]
    assert _run("seq_max_k3", [[800.0, 0.0]], [[1.0, 1.0]], math.exp(20.0) - 20.0) == [[1.0, 1.0]]


@pytest.mark.parametrize(
    ("option", "upper"), [("seq_mean_k2", 0.4999999999), ("seq_mean_k3", 0.7182818284)]
)
def test_the_mean_epsilon_keeps_a_sequence_just_above_the_threshold(
    option: str, upper: float
) -> None:
    # one token with log ρ = 1 (k2 = 0.5, k3 = e − 2): the exact mean is 1e-10 above upper
    assert _reference(option, [[1.0]], [[1.0]], upper) == [[0.0]]
    assert _run(option, [[1.0]], [[1.0]], upper) == [[1.0]]


def test_each_option_has_its_adapter() -> None:
    for option in OPTIONS:
        a = adapter(f"verl.rollout_rs_{option}")
        assert a.spec == "divergence_rejection_mask"
        assert a.settings["rollout_rs"] == option
        assert a.conventions["log_ratio_clamp"] == 20.0
