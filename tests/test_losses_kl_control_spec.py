"""The ``adaptive_kl_coefficient`` spec: refimpl's own controller passes, and each wrong variant
fails the checks that target it (the error without its clip, the error's sign flipped, the gain
inverted to horizon/n_steps)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from refimpl.losses import adaptive_kl_coefficient
from refimpl.testing import check_conformance, check_names, spec_names

NAME = "adaptive_kl_coefficient"


def test_the_spec_is_listed_with_its_checks() -> None:
    assert NAME in spec_names(losses=True)
    assert check_names(NAME) == (
        "values",
        "grows_above_target",
        "shrinks_below_target",
        "error_clipped",
    )


def test_refimpls_own_controller_passes() -> None:
    check_conformance(adaptive_kl_coefficient, spec=NAME, max_examples=60).raise_if_failed()


def unclipped(coef: float, kl: float, *, target: float, horizon: int, n_steps: int) -> float:
    return coef * (1.0 + (kl / target - 1.0) * n_steps / horizon)


def flipped(coef: float, kl: float, *, target: float, horizon: int, n_steps: int) -> float:
    return coef * (1.0 - float(np.clip(kl / target - 1.0, -0.2, 0.2)) * n_steps / horizon)


def inverted(coef: float, kl: float, *, target: float, horizon: int, n_steps: int) -> float:
    gain = horizon / n_steps if n_steps else 0.0
    return coef * (1.0 + float(np.clip(kl / target - 1.0, -0.2, 0.2)) * gain)


@pytest.mark.parametrize(
    ("candidate", "failing"),
    [
        (unclipped, {"values", "error_clipped"}),
        (flipped, {"values", "grows_above_target", "shrinks_below_target"}),
        (inverted, {"values", "error_clipped"}),
    ],
)
def test_each_wrong_variant_fails_its_checks(
    candidate: Callable[..., float], failing: set[str]
) -> None:
    report = check_conformance(candidate, spec=NAME, max_examples=60, shrink=False)
    failed = {r.name for r in report.results if r.status == "failed"}
    assert failed == failing, report.summary()
