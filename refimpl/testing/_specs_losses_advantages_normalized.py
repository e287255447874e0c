r"""Spec of the RLOO advantages standardised over the batch (value only).

``rloo_normalized_advantages`` checks a candidate against
:func:`refimpl.losses.advantages_normalized.rloo_normalized_advantages`:
:math:`\hat A_i = (A_i - \bar A)/(s + \varepsilon)` with :math:`A` the leave-one-out advantages,
:math:`\bar A` and :math:`s` (sample std) over the batch. Draws, group conventions and the
rounding model of :math:`A` are the ``rloo_advantages`` spec's; the standardisation adds, per
entry, the rounding of :math:`A_i` and of the batch mean over :math:`D = s + \varepsilon`
(:math:`c_i/D + \max_j c_j/D + f_B\,\overline{|A|}/D`, with :math:`c` the condition of
:math:`A` and :math:`f_B` the pairwise sum's factor over the batch), and :math:`|\hat A_i|` times
the relative rounding of :math:`s` (:math:`2\max_j c_j/D + f_B + 4`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from refimpl.losses.advantages_normalized import rloo_normalized_advantages
from refimpl.testing._arrays import ArrayBridge
from refimpl.testing._engine import Call, Case, Check, Convention, Conventions, Spec
from refimpl.testing._specs_losses_stats import Array
from refimpl.testing._specs_losses_stats_advantages import (
    GROUPS,
    SINGLETON,
    _adv_agrees,
    _adv_condition,
    _adv_expected,
    _adv_found,
    _adv_strategy,
    _constant_zero,
    _refimpl_singleton,
    _shift_invariant,
)
from refimpl.testing.tolerances import summation_factor

__all__ = ["normalized_advantage_specs"]

EPS = Convention(
    "eps",
    1e-4,
    (1e-4, 0.0),
    "ε >= 0 added to the batch standard deviation of the advantages",
    number=True,
    who="1e-4: TRL 1.16.0 RLOOTrainer (normalize_advantages=True)",
)


def _expected(call: Call, conv: Conventions) -> Array:
    (rewards,), kwargs = call
    return rloo_normalized_advantages(
        np.asarray(rewards, dtype=np.float64),
        group=kwargs["group"],
        eps=float(conv["eps"]),
        singleton=_refimpl_singleton(conv),
    )


def _scale(call: Call, conv: Conventions) -> tuple[Array, float]:
    """The RLOO advantages (float64) and the denominator D = s + ε."""
    a = _adv_expected("rloo")(call, conv)
    s = float(np.std(a, ddof=1)) if a.size > 1 else 0.0
    return a, s + float(conv["eps"])


def _condition(call: Call, conv: Conventions, expected: Any) -> Array:
    a, d = _scale(call, conv)
    cond_a = _adv_condition("rloo")(call, conv, a)
    f = summation_factor(a.size)
    if d == 0.0:
        return np.asarray(cond_a, dtype=np.float64)
    own = cond_a / d
    worst = float(np.max(own, initial=0.0))
    found = np.abs(np.asarray(expected, dtype=np.float64))
    mean_abs = float(np.mean(np.abs(a))) / d
    return np.asarray(own + worst + f * mean_abs + found * (2.0 * worst + f + 4.0))


def _zero_batch_mean(case: Case) -> None:
    """Σ_i Â_i = 0 (the batch mean is subtracted)."""
    found = _adv_found(case)
    err = case.allowed(case.expected(), case.condition())
    f = summation_factor(found.size)
    allowed = float(np.sum(err)) + f * case.u * float(np.sum(np.abs(found)))
    total = float(np.sum(found))
    case.show("Σ Â:", total, "allowed:", allowed)
    assert abs(total) <= allowed, f"the advantages sum to {total}, not 0 (allowed {allowed})"


def _unit_batch_std(case: Case) -> None:
    """The sample std of Â over the batch is s/(s + ε)."""
    found = _adv_found(case)
    a, d = _scale(case.calls[0], case.conventions)
    target = 0.0 if d == 0.0 else float(np.std(a, ddof=1)) / d
    std = float(np.std(found, ddof=1))
    err = case.allowed(case.expected(), case.condition())
    allowed = 2.0 * float(np.max(err)) + case.u * summation_factor(found.size) * target
    case.show("std:", std, "s/(s + ε):", target, "allowed:", allowed)
    assert abs(std - target) <= allowed, (
        f"the batch standard deviation of the advantages is {std}, not s/(s + ε) = {target}"
    )


def _no_raw_singletons(conv: Conventions) -> str | None:
    if conv["singleton"] == "raw":
        return "singleton='raw': a singleton's raw reward moves the batch mean"
    return None


def normalized_advantage_specs() -> tuple[Spec, ...]:
    """The spec ``rloo_normalized_advantages``."""
    strategy = _adv_strategy("rloo")
    checks = (
        Check(
            "values",
            "the advantages agree with refimpl.losses.advantages_normalized."
            "rloo_normalized_advantages under the declared conventions",
            strategy,
            _adv_agrees,
        ),
        Check(
            "zero_batch_mean", "the advantages sum to 0 over the batch", strategy, _zero_batch_mean
        ),
        Check(
            "unit_batch_std",
            "the batch's sample standard deviation of the advantages is s/(s + ε)",
            strategy,
            _unit_batch_std,
        ),
        Check(
            "constant_group_is_zero",
            "a group whose rewards are all equal gets advantage 0 (the batch mean is 0)",
            _adv_strategy("rloo", constant=True),
            _constant_zero,
            applies=_no_raw_singletons,
        ),
        Check(
            "shift_invariance",
            "adding one constant to every reward leaves the advantages unchanged",
            _adv_strategy("rloo", shift=True),
            _shift_invariant,
        ),
    )
    spec = Spec(
        name="rloo_normalized_advantages",
        reference="losses.advantages_normalized.rloo_normalized_advantages",
        signature="candidate(rewards, *, group) -> (B,) (eps: a convention)",
        read=lambda raw, call, conv: ArrayBridge.to_numpy(raw),
        expected=_expected,
        condition=_condition,
        checks=checks,
        conventions=(EPS, SINGLETON, GROUPS),
    )
    return (spec,)
