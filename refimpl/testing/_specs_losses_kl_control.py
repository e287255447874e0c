r"""The spec ``adaptive_kl_coefficient`` (value only): one step of the adaptive KL controller.

Checks a candidate ``candidate(coef, current_kl, *, target, horizon, n_steps) -> float`` against
:func:`refimpl.losses.kl_control.adaptive_kl_coefficient` (Ziegler et al. 2019, section 2.2:
:math:`\beta' = \beta(1 + \mathrm{clip}(\mathrm{KL}/\mathrm{KL}_{\text{target}} - 1, \pm 0.2)
\,n/H)`), on KL at and around the target (exactly at it, at the clip's edges, far above, 0),
integer horizons and step counts ``0 <= n <= H`` as the frameworks pass them (the batch size).
Derived tolerance (units of :math:`u`): the quotient and the subtraction of 1 round at the scale
of :math:`\mathrm{KL}/\mathrm{KL}_{\text{target}} + 1`; the gain, the sum with 1 and the product
with :math:`\beta` add a rounding each at the scale of the result, so the condition is
:math:`\beta\,(n/H)(\mathrm{KL}/\mathrm{KL}_{\text{target}} + 1) + 3|\beta'|`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

from refimpl.losses.kl_control import adaptive_kl_coefficient
from refimpl.testing._engine import Call, Case, Check, Conventions, Spec

__all__ = ["adaptive_kl_spec"]

#: KL / target: at the target, inside the band, at the clip's edges, beyond them, none
_RATIOS = (1.0, 1.1, 0.9, 1.2, 0.8, 3.0, 0.0, 0.5, 10.0)


def _floats(low: float, high: float) -> st.SearchStrategy[float]:
    return st.floats(low, high, allow_nan=False, allow_infinity=False, allow_subnormal=False)


@st.composite
def _call(draw: st.DrawFn, conv: Conventions, side: str = "any") -> list[Call]:
    coef = draw(st.one_of(st.sampled_from([0.001, 0.05, 0.2, 1.0]), _floats(1e-4, 10.0)))
    target = draw(st.one_of(st.sampled_from([0.1, 6.0, 0.01]), _floats(1e-3, 10.0)))
    ratio = draw(st.one_of(st.sampled_from(_RATIOS), _floats(0.0, 20.0)))
    if side == "above":
        ratio = draw(_floats(1.0 + 2.0**-20, 20.0))
    elif side == "below":
        ratio = draw(_floats(0.0, 1.0 - 2.0**-20))
    horizon = draw(st.one_of(st.sampled_from([10000, 64, 8]), st.integers(1, 10000)))
    n_steps = draw(st.integers(0 if side == "any" else 1, horizon))
    kl = target * ratio  # exact at ratio 1: the target itself
    return [((coef, kl), {"target": target, "horizon": horizon, "n_steps": n_steps})]


def _expected(call: Call, conv: Conventions) -> float:
    (coef, kl), kw = call
    return adaptive_kl_coefficient(float(coef), float(kl), **kw)


def _condition(call: Call, conv: Conventions, expected: Any) -> float:
    (coef, kl), kw = call
    gain = float(kw["n_steps"]) / float(kw["horizon"])
    return float(coef) * gain * (abs(float(kl)) / float(kw["target"]) + 1.0) + 3.0 * abs(
        float(expected)
    )


def _read(raw: Any, call: Call, conv: Conventions) -> float:
    found = np.asarray(raw, dtype=np.float64)
    assert found.size == 1, f"a coefficient of shape {found.shape}, expected a scalar"
    return float(found.reshape(()))


def _agrees(case: Case) -> None:
    case.show("found:", case.found[0], "expected:", case.expected())
    case.assert_close(case.found[0], case.expected(), case.condition(), "the next coefficient")


def _toward_target(case: Case) -> None:
    """n >= 1: the coefficient grows when KL exceeds the target and shrinks below it."""
    (coef, kl), kw = case.calls[0]
    found, target = float(case.found[0]), float(kw["target"])
    slack = float(case.allowed(case.expected(), case.condition()))
    case.show("coef:", coef, "found:", found, "KL:", kl, "target:", target)
    if kl > target:
        assert found > float(coef) - slack, f"KL {kl} > target {target}: {coef} fell to {found}"
    elif kl < target:
        assert found < float(coef) + slack, f"KL {kl} < target {target}: {coef} rose to {found}"


def _bounded_step(case: Case) -> None:
    """|β' − β| <= 0.2·β·n/H: the error is clipped to [−0.2, 0.2]."""
    (coef, _), kw = case.calls[0]
    bound = 0.2 * float(coef) * float(kw["n_steps"]) / float(kw["horizon"])
    step = abs(float(case.found[0]) - float(coef))
    slack = float(case.allowed(case.expected(), case.condition()))
    case.show("step:", step, "bound 0.2·β·n/H:", bound)
    assert step <= bound + slack, f"the step {step} exceeds 0.2·coef·n_steps/horizon = {bound}"


def adaptive_kl_spec() -> Spec:
    """The ``adaptive_kl_coefficient`` spec: the next KL coefficient (value only)."""
    return Spec(
        name="adaptive_kl_coefficient",
        reference="losses.kl_control.adaptive_kl_coefficient",
        signature="candidate(coef, current_kl, *, target, horizon, n_steps) -> float",
        read=_read,
        expected=_expected,
        condition=_condition,
        checks=(
            Check(
                "values",
                "the next coefficient agrees with refimpl.losses.kl_control."
                "adaptive_kl_coefficient",
                lambda conv: _call(conv),
                _agrees,
            ),
            Check(
                "grows_above_target",
                "with KL above the target the coefficient grows",
                lambda conv: _call(conv, side="above"),
                _toward_target,
            ),
            Check(
                "shrinks_below_target",
                "with KL below the target the coefficient shrinks",
                lambda conv: _call(conv, side="below"),
                _toward_target,
            ),
            Check(
                "error_clipped",
                "the relative step is at most 0.2·n_steps/horizon, however far the KL is",
                lambda conv: _call(conv),
                _bounded_step,
            ),
        ),
    )
