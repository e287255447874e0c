"""The A*-PO specs: refimpl's own estimate and loss pass, and each check fails a candidate wrong in
the way it targets (the log n left out, an unshifted exponential, rewards assumed binary, the
regression per token, a gradient without the factor 2, padding summed)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from refimpl.losses import optimal_advantage_regression_loss, optimal_value_estimate
from refimpl.testing import check_conformance, check_names, spec_names

VALUE, LOSS = "optimal_value_estimate", "optimal_advantage_regression"


def test_the_specs_are_listed_with_their_checks() -> None:
    assert {VALUE, LOSS} <= set(spec_names(losses=True))
    assert check_names(VALUE) == (
        "values",
        "between_mean_and_max",
        "shift_equivariance",
        "maximum_at_small_beta1",
    )
    assert check_names(LOSS)[:3] == ("values", "gradient", "padding_contributes_nothing")


def test_refimpls_own_estimate_and_loss_pass() -> None:
    check_conformance(optimal_value_estimate, spec=VALUE, max_examples=30).raise_if_failed()
    check_conformance(
        optimal_advantage_regression_loss, spec=LOSS, conventions={"gradient": "returned"},
        max_examples=30,
    ).raise_if_failed()  # fmt: skip


def without_log_n(rewards: Any, *, beta1: float) -> Any:
    r = np.asarray(rewards)
    top = r.max(axis=1)
    return top + beta1 * np.log(np.exp((r - top[:, None]) / beta1).sum(axis=1))


def unshifted(rewards: Any, *, beta1: float) -> Any:
    with np.errstate(over="ignore", invalid="ignore"):
        return beta1 * np.log(np.exp(np.asarray(rewards) / beta1).mean(axis=1))


def assumes_binary(rewards: Any, *, beta1: float) -> Any:
    return optimal_value_estimate(np.clip(rewards, 0.0, 1.0), beta1=beta1)


def per_token(logp: Any, logp_ref: Any, advantages: Any, *, beta2: float, mask: Any,
              cotangent: Any = None) -> Any:  # fmt: skip
    m = np.asarray(mask)
    c = m if cotangent is None else np.asarray(cotangent) * m
    e = beta2 * (np.asarray(logp) - logp_ref) - np.asarray(advantages)
    return np.where(m > 0, e * e, 0.0), np.where(m > 0, 2 * beta2 * e * c, 0.0)


def no_two(*args: Any, **kw: Any) -> Any:
    loss, grad = optimal_advantage_regression_loss(*args, **kw)
    return loss, grad / 2


def sums_padding(logp: Any, logp_ref: Any, advantages: Any, *, mask: Any, **kw: Any) -> Any:
    m = np.asarray(mask)
    loss, grad = optimal_advantage_regression_loss(logp, logp_ref, advantages, **kw)
    return loss * m, grad * m


@pytest.mark.parametrize(
    ("spec", "candidate", "check"),
    [
        (VALUE, without_log_n, "between_mean_and_max"),
        (VALUE, unshifted, "maximum_at_small_beta1"),
        (VALUE, assumes_binary, "shift_equivariance"),
        (LOSS, per_token, "values"),
        (LOSS, no_two, "gradient"),
        (LOSS, sums_padding, "padding_contributes_nothing"),
    ],
)
def test_each_check_fails_its_wrong_variant(spec: str, candidate: Any, check: str) -> None:
    conv = {"gradient": "returned"} if spec == LOSS else {}
    report = check_conformance(
        candidate, spec=spec, conventions=conv, max_examples=50, checks=[check], shrink=False
    )
    assert report[check].status == "failed", report.summary()
