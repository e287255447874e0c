r"""The spec ``proximal_logprobs``: the proximal policy's log-probabilities approximated between
the behaviour and current policies from the token versions, against
:func:`refimpl.losses.proximal_logprobs`.

A candidate is called as ``candidate(logp, logp_behavior, versions, *, current_version)`` and
returns the (B, T) approximation (the proximal version is ``current_version - 1``, or
``current_version`` itself under ``proximal_version='engine'``, the current policy then one version
past it); its gradient
with respect to ``logp`` comes from its own autograd (cotangent 1: each token's derivative), or
it returns ``(logp_prox, grad)`` itself (``gradient='returned'``). The method (log-linear, linear
in probability, the behaviour policy) and the floor added to the probability are conventions.

Derived tolerances (per entry, units of :math:`u`, before the engine's safety factor): the
log-linear value rounds the weight, the difference, the product and the sum, at most
:math:`|y| + 3\alpha|\ell - b|`, and its derivative (the weight) :math:`2\alpha`; the linear
value rounds two exponentials, the weighted sum and the floor (no cancellation: every term is
positive) before the logarithm, at most :math:`|y| + 6`, and its derivative
:math:`8|\partial y|`; the behaviour policy is copied exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

from refimpl.losses.proximal import (
    PROXIMAL_METHODS,
    proximal_interpolation_weight,
    proximal_logprobs,
)
from refimpl.testing._arrays import ArrayBridge
from refimpl.testing._engine import Call, Case, Check, Convention, Conventions, Spec
from refimpl.testing._specs_losses_stats import Array

__all__ = ["proximal_logprobs_spec"]

METHOD = Convention(
    "method",
    "loglinear",
    PROXIMAL_METHODS,
    "the approximation: the log-probabilities interpolated (loglinear), the probabilities "
    "(linear), or the behaviour policy as it is (rollout)",
    who="AReaL 1.0.4 compute_prox_logp_approximations: method='loglinear' (what "
    "prox_logp_method='loglinear' trains on), 'linear' and 'rollout' (logged for comparison)",
)
FLOOR = Convention(
    "floor",
    0.0,
    (0.0,),
    "a positive number f added to the interpolated probability before its logarithm "
    "(method='linear' only)",
    number=True,
    who="1e-10: AReaL 1.0.4 compute_prox_logp_approximations (torch.log(p_arithmetic + 1e-10))",
)
GRADIENT = Convention(
    "gradient",
    "autodiff",
    ("autodiff", "returned", "none", "stopped"),
    "'autodiff': d logp_prox / d logp by torch or jax autograd; 'returned': the candidate "
    "returns (logp_prox, grad) itself; 'none': the value only; 'stopped': autograd, and the "
    "candidate declares the approximation detached from logp (its derivative must be 0)",
    who="returned: refimpl (proximal_logprobs); stopped: AReaL 1.0.4 grpo_loss_fn (it "
    "approximates from logprobs.detach())",
)
PROXIMAL_VERSION = Convention(
    "proximal_version",
    "previous",
    ("previous", "engine"),
    "which version the proximal policy is: 'previous', current_version − 1 (the current policy "
    "one version past it); 'engine', current_version itself, the version of the weights the "
    "exact proximal log-probs are recomputed with, the policy being trained one version past it",
    who="previous: AReaL 1.0.4 compute_prox_logp_approximations (v_proximal = current_version "
    "- 1); engine: AReaL 1.0.4's trainer, which passes engine.get_version() "
    "(PPOActor.ppo_update) and recomputes prox_logp with those weights (rl_trainer.py)",
)

HUGE = (-1e30, -1e4, -700.0, -120.0, -90.0)


def _versions_kw(kw: dict[str, Any], conv: Conventions) -> dict[str, Any]:
    """The reference's version keywords: under ``proximal_version='engine'`` the drawn
    ``current_version`` is the proximal one, and the current policy one version past it."""
    if conv["proximal_version"] == "previous":
        return dict(kw)
    engine = int(kw["current_version"])
    return {"current_version": engine + 1, "proximal_version": engine}


def _floats(low: float, high: float) -> st.SearchStrategy[float]:
    return st.floats(low, high, allow_nan=False, allow_infinity=False, allow_subnormal=False)


@st.composite
def _draw(draw: st.DrawFn, conv: Conventions, *, huge: bool = False) -> list[Call]:
    """One call: log-probabilities (some extreme with ``huge``), versions of every staleness
    from 0 to ``current_version`` and prompt tokens (−1)."""
    batch, time = draw(st.integers(1, 4)), draw(st.integers(1, 6))
    theta = draw(st.integers(0, 12))
    n = batch * time
    logp = st.one_of(st.sampled_from([0.0, -0.5, -2.0]), _floats(-30.0, 0.0))
    if huge:
        logp = st.one_of(st.sampled_from(HUGE), logp)
    lp = np.asarray(draw(st.lists(logp, min_size=n, max_size=n))).reshape(batch, time)
    lb = np.asarray(draw(st.lists(logp, min_size=n, max_size=n))).reshape(batch, time)
    stale = st.one_of(st.just(None), st.integers(0, theta))
    v = [-1 if s is None else theta - s for s in draw(st.lists(stale, min_size=n, max_size=n))]
    versions = np.asarray(v, dtype=np.int64).reshape(batch, time)
    return [((lp, lb, versions), {"current_version": theta})]


def _calls(huge: bool = False) -> Any:
    return lambda conv: _draw(conv, huge=huge)


def _reference(call: Call, conv: Conventions) -> tuple[Array, Array]:
    (lp, lb, v), kw = call
    floor = float(conv["floor"]) if conv["method"] == "linear" else 0.0
    out = proximal_logprobs(lp, lb, v, method=conv["method"], floor=floor, **_versions_kw(kw, conv))
    if conv["gradient"] == "stopped":  # sg[·]: the value, and no derivative
        return out.logp_prox, np.zeros_like(out.grad)
    return out.logp_prox, out.grad


def _condition(call: Call, conv: Conventions, expected: Any) -> tuple[Array, Array]:
    (lp, lb, v), kw = call
    value, grad = expected
    if conv["method"] == "rollout":
        cond = np.abs(value), np.zeros_like(grad)
    elif conv["method"] == "linear":
        cond = np.abs(value) + 6.0, 8.0 * np.abs(grad)
    else:
        alpha = proximal_interpolation_weight(v, **_versions_kw(kw, conv))
        cond = np.abs(value) + 3.0 * alpha * np.abs(np.asarray(lp) - np.asarray(lb)), 2.0 * alpha
    if conv["gradient"] == "stopped":  # a detached approximation's derivative is exactly 0
        return cond[0], np.zeros_like(grad)
    return cond


def _read(raw: Any, call: Call, conv: Conventions) -> tuple[Array, Array | None]:
    if conv["gradient"] == "none":
        return ArrayBridge.to_numpy(raw), None
    value, grad = raw
    return ArrayBridge.to_numpy(value), ArrayBridge.to_numpy(grad)


def _vjp(call: Call, conv: Conventions) -> tuple[Call, Any]:
    if conv["gradient"] not in ("autodiff", "stopped"):
        return call, None
    return call, np.ones(np.asarray(call[0][0]).shape)


def _found(case: Case) -> tuple[Array, Array | None]:
    value, grad = case.found[0]
    want = case.expected()[0].shape
    assert value.shape == want, f"logp_prox of shape {value.shape}, expected {want}"
    return value, grad


def _values(case: Case) -> None:
    value, _ = _found(case)
    case.show("found:   ", value)
    case.show("expected:", case.expected()[0])
    case.assert_close(value, case.expected()[0], case.condition()[0], "the proximal log-probs")


def _gradient(case: Case) -> None:
    _, grad = _found(case)
    assert grad is not None
    case.show("gradient:", grad, "expected:", case.expected()[1])
    case.assert_close(grad, case.expected()[1], case.condition()[1], "d logp_prox / d logp")


def _no_gradient_without_a_step(case: Case) -> None:
    """Where α = 0 (prompt tokens, tokens not older than the proximal policy) the approximation
    is the behaviour policy: its derivative in the current log-probabilities is exactly 0."""
    _, grad = _found(case)
    assert grad is not None
    (_, _, v), kw = case.calls[0]
    still = proximal_interpolation_weight(v, **_versions_kw(kw, case.conventions)) == 0.0
    bad = still & (grad != 0.0)
    assert not bad.any(), (
        f"tokens without a policy step between behaviour and proximal version got gradients "
        f"{grad[bad].tolist()} (expected 0: the approximation is the behaviour log-probability)"
    )


def _huge(case: Case) -> None:
    value, grad = _found(case)
    assert np.all(np.isfinite(value)), f"non-finite proximal log-probs {value.tolist()}"
    _values(case)
    if grad is not None:
        assert np.all(np.isfinite(grad)), f"non-finite gradients {grad.tolist()}"
        _gradient(case)


def _with_gradient(conv: Conventions) -> str | None:
    return "the candidate declares gradient='none'" if conv["gradient"] == "none" else None


def proximal_logprobs_spec() -> Spec:
    """The spec ``proximal_logprobs`` (value and derivative in ``logp``)."""
    return Spec(
        name="proximal_logprobs",
        reference="losses.proximal.proximal_logprobs",
        signature="candidate(logp, logp_behavior, versions, *, current_version) -> (B, T)",
        read=_read,
        expected=_reference,
        condition=_condition,
        vjp=_vjp,
        fields=("logp_prox", "grad"),
        checks=(
            Check(
                "values",
                "the approximation agrees with refimpl.proximal_logprobs (proximal version "
                "current_version − 1, or current_version under proximal_version='engine')",
                _calls(),
                _values,
            ),
            Check(
                "gradient",
                "d logp_prox / d logp agrees with the reference's derivative (0 where the "
                "candidate declares gradient='stopped')",
                _calls(),
                _gradient,
                applies=_with_gradient,
            ),
            Check(
                "no_gradient_without_a_step",
                "prompt tokens and tokens that are not older than the proximal policy (α = 0) "
                "have derivative exactly 0",
                _calls(),
                _no_gradient_without_a_step,
                applies=_with_gradient,
            ),
            Check(
                "huge_log_ratios_stay_finite",
                "extreme log-probabilities (down to −1e30, where exp underflows) give finite "
                "values and derivatives that agree with the reference",
                _calls(huge=True),
                _huge,
            ),
        ),
        conventions=(METHOD, FLOOR, GRADIENT, PROXIMAL_VERSION),
    )
