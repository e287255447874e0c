"""The ``proximal_logprobs`` spec: refimpl's own approximation passes under every method, a torch
transcription passes through autograd, and each check fails a candidate wrong in the way it
targets (the weight inverted, the log-linear derivative under method='linear', a prompt token
interpolated, the probabilities exponentiated without a floor)."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
import torch
from test_losses_proximal import _inverted as inverted
from test_losses_proximal import _prompt_interpolated as prompt_interpolated

from refimpl.losses import ProximalLogprobs, proximal_interpolation_weight, proximal_logprobs
from refimpl.testing import check_conformance, check_names, conventions, spec_names

SPEC_NAME = "proximal_logprobs"
EXAMPLES = 30


def test_the_spec_is_listed_with_its_checks_and_conventions() -> None:
    assert SPEC_NAME in spec_names(losses=True)
    assert check_names(SPEC_NAME) == (
        "values",
        "gradient",
        "no_gradient_without_a_step",
        "huge_log_ratios_stay_finite",
    )
    assert {c.key: c.default for c in conventions(SPEC_NAME)} == {
        "method": "loglinear",
        "floor": 0.0,
        "gradient": "autodiff",
        "proximal_version": "previous",
    }


@pytest.mark.parametrize(
    ("method", "floor"), [("loglinear", 0.0), ("linear", 0.0), ("linear", 1e-10), ("rollout", 0.0)]
)
def test_refimpls_own_approximation_passes(method: Any, floor: float) -> None:
    candidate = functools.partial(proximal_logprobs, method=method, floor=floor)
    conv = {"method": method, "floor": floor, "gradient": "returned"}
    report = check_conformance(candidate, spec=SPEC_NAME, conventions=conv, max_examples=EXAMPLES)
    report.raise_if_failed()


def torch_loglinear(lp: Any, lb: Any, v: Any, *, current_version: int) -> Any:
    """A torch transcription of the documented formula, differentiated by autograd."""
    vb = v.to(lp.dtype)
    gen = (v >= 0) & (v < current_version)
    safe = torch.where(gen, current_version - vb, torch.ones_like(vb))
    alpha = torch.where(gen, (current_version - 1 - vb) / safe, torch.zeros_like(vb))
    return lb + alpha * (lp - lb)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_torch_transcription_passes_through_autograd(dtype: str) -> None:
    report = check_conformance(
        torch_loglinear, spec=SPEC_NAME, xp="torch", dtype=dtype, max_examples=EXAMPLES
    )
    report.raise_if_failed()


def loglinear_derivative(lp: Any, lb: Any, v: Any, *, current_version: int) -> ProximalLogprobs:
    """Wrong under method='linear': the linear value with the log-linear derivative α."""
    out = proximal_logprobs(lp, lb, v, current_version=current_version, method="linear")
    a = proximal_interpolation_weight(v, current_version=current_version)
    return ProximalLogprobs(out.logp_prox, a)


def naive_linear(lp: Any, lb: Any, v: Any, *, current_version: int) -> ProximalLogprobs:
    """Wrong on extreme log-probabilities: log of the exponentials, no floor (log 0 = −inf)."""
    a = proximal_interpolation_weight(v, current_version=current_version)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        mean = (1.0 - a) * np.exp(np.asarray(lb)) + a * np.exp(np.asarray(lp))
        return ProximalLogprobs(np.log(mean), a * np.exp(np.asarray(lp)) / mean)


@pytest.mark.parametrize(
    ("candidate", "method", "check"),
    [
        (inverted, "loglinear", "values"),
        (loglinear_derivative, "linear", "gradient"),
        (prompt_interpolated, "loglinear", "no_gradient_without_a_step"),
        (naive_linear, "linear", "huge_log_ratios_stay_finite"),
    ],
)
def test_each_check_fails_its_wrong_variant(candidate: Any, method: str, check: str) -> None:
    conv = {"method": method, "gradient": "returned"}
    report = check_conformance(
        candidate, spec=SPEC_NAME, conventions=conv, max_examples=50, shrink=False
    )
    assert report[check].status == "failed", report.summary()


def test_a_floor_must_be_declared() -> None:
    """AReaL's log(p + 1e-10) fails the exact interpolation and passes with floor=1e-10."""
    floored = functools.partial(proximal_logprobs, method="linear", floor=1e-10)
    strict = check_conformance(
        floored,
        spec=SPEC_NAME,
        conventions={"method": "linear", "gradient": "returned"},
        max_examples=EXAMPLES,
        shrink=False,
    )
    assert strict["values"].status == "failed", strict.summary()
    declared = check_conformance(
        floored,
        spec=SPEC_NAME,
        conventions={"method": "linear", "floor": 1e-10, "gradient": "returned"},
        max_examples=EXAMPLES,
    )
    declared.raise_if_failed()


def test_a_stopped_gradient_is_checked_as_zero() -> None:
    """gradient='stopped': a detached transcription passes, the differentiable one fails."""

    def detached(lp: Any, lb: Any, v: Any, *, current_version: int) -> Any:
        return torch_loglinear(lp.detach(), lb, v, current_version=current_version)

    stopped = {"gradient": "stopped"}
    ok = check_conformance(
        detached, spec=SPEC_NAME, xp="torch", conventions=stopped, max_examples=EXAMPLES
    )
    ok.raise_if_failed()
    wrong = check_conformance(
        torch_loglinear,
        spec=SPEC_NAME,
        xp="torch",
        conventions=stopped,
        max_examples=EXAMPLES,
        shrink=False,
    )
    assert wrong["gradient"].status == "failed", wrong.summary()
    assert wrong["values"].status == "passed", wrong.summary()


def engine_loglinear(lp: Any, lb: Any, v: Any, *, current_version: int) -> ProximalLogprobs:
    """The log-linear approximation with the proximal policy at ``current_version`` itself (the
    engine's version) and the current policy one version past it."""
    return proximal_logprobs(
        lp, lb, v, current_version=current_version + 1, proximal_version=current_version
    )


def test_the_engines_version_as_the_proximal_one_hand_worked() -> None:
    """Engine version 4: a token generated at 4 is the proximal policy's own (α = 0), one at 3
    is half-way to the policy being trained (version 5), one at 2 two thirds, a prompt token 0."""
    lp, lb = np.full((1, 4), -1.0), np.full((1, 4), -4.0)
    out = engine_loglinear(lp, lb, np.array([[4, 3, 2, -1]]), current_version=4)
    assert out.grad.tolist() == [[0.0, 0.5, 2.0 / 3.0, 0.0]]
    assert out.logp_prox.tolist() == [[-4.0, -2.5, -2.0, -4.0]]


@pytest.mark.parametrize(
    ("candidate", "declared", "ok"),
    [
        (engine_loglinear, "engine", True),
        (engine_loglinear, "previous", False),
        (proximal_logprobs, "engine", False),
    ],
)
def test_the_declared_proximal_version_is_the_one_checked(
    candidate: Any, declared: str, ok: bool
) -> None:
    """Each bookkeeping passes under its own declaration and fails under the other's: a token
    one version older than the engine's gets α = 0 under 'previous' and 1/2 under 'engine'."""
    conv = {"gradient": "returned", "proximal_version": declared}
    report = check_conformance(candidate, spec=SPEC_NAME, conventions=conv, max_examples=EXAMPLES)
    assert report.ok is ok, str(report)
    if not ok:
        assert report["values"].status == "failed"
