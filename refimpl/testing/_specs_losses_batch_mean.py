r"""The spec ``batch_mean_advantages``: each reward minus the mean reward of the whole batch.

The single-rollout regime (one response per prompt) has no prompt group to centre in; the baseline
is the batch's mean reward, with no scaling: :math:`A_i = r_i - \frac{1}{B}\sum_j r_j`. That is
:func:`refimpl.losses.grpo_advantages` with the batch as one group and ``std="none"`` (Dr GRPO's
centring), which is the reference here. OpenRLHF 0.11.2 ships it as
``advantage.estimator="flash_reinforce"`` (FlashREINFORCE).

With ``std="sample"`` or ``"population"`` the centred rewards are divided by the batch's
standard deviation plus ``eps`` (GRPO's z-score with the batch as one group): AReaL 1.0.4's
``Normalization`` with ``mean_level = std_level = "batch"`` (its ``reward_norm`` and ``adv_norm``).

Value only: advantages are computed under ``torch.no_grad()``.

Derived tolerance (per entry, units of :math:`u`, before the engine's safety factor): the mean of
:math:`B` rewards is off by at most :math:`(f_B + 2)\,\overline{|r|}` (``summation_factor``), the
difference adds :math:`|r_i|` and its own rounding :math:`|A_i|`. With a standard deviation the
condition is GRPO's (``_adv_condition``) on the batch as one group.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

from refimpl.losses.advantages import grpo_advantages
from refimpl.testing._arrays import ArrayBridge
from refimpl.testing._engine import Call, Case, Check, Convention, Conventions, Spec
from refimpl.testing._specs_losses_stats import Array
from refimpl.testing._specs_losses_stats_advantages import _adv_condition
from refimpl.testing.tolerances import summation_factor

__all__ = ["batch_mean_spec"]

STD = Convention(
    "std",
    "none",
    ("none", "sample", "population"),
    "divide the centred rewards by the batch's standard deviation (sample: N − 1, population: N) "
    "plus eps, or not at all",
    who="none: OpenRLHF 0.11.2 flash_reinforce, AReaL 1.0.4 Normalization(std_level=None); "
    "sample: AReaL Normalization(mean_level='batch', std_level='batch') (std_unbiased=True)",
)
EPS = Convention(
    "eps",
    0.0,
    (0.0,),
    "ε >= 0 added to the standard deviation",
    number=True,
    who="1e-5: AReaL 1.0.4 NormConfig.eps",
)


def _rewards(shift: bool = False, constant: bool = False) -> Any:
    def strategy(conv: Conventions) -> st.SearchStrategy[list[Call]]:
        one = st.one_of(
            st.sampled_from([0.0, 1.0, -1.0, 0.5]),
            st.floats(-10.0, 10.0, allow_nan=False, allow_subnormal=False),
        )
        size = st.integers(1, 12)

        @st.composite
        def draw(d: st.DrawFn) -> list[Call]:
            n = max(d(size), 1 if conv["std"] == "none" else 2)
            if constant:
                r = np.full(n, d(one))
            else:
                r = np.asarray(d(st.lists(one, min_size=n, max_size=n)), dtype=np.float64)
            calls: list[Call] = [((r,), {})]
            if shift:
                c = float(d(st.sampled_from([1.0, -5.0, 3.0, 0.5])))
                calls.append(((r + c,), {}))
            return calls

        return draw()

    return strategy


def _expected(call: Call, conv: Conventions) -> Array:
    (rewards,), _ = call
    r = np.asarray(rewards, dtype=np.float64)
    one = np.zeros(r.size, dtype=np.int64)
    if conv["std"] == "none":
        return np.asarray(grpo_advantages(r, group=one, std="none"))
    return np.asarray(grpo_advantages(r, group=one, std=conv["std"], eps=float(conv["eps"])))


def _condition(call: Call, conv: Conventions, expected: Any) -> Array:
    (rewards,), _ = call
    if conv["std"] != "none":
        grouped: Call = ((rewards,), {"group": np.zeros(np.asarray(rewards).size, np.int64)})
        full = {**conv, "eps_placement": "std", "std_scope": "group"}
        return _adv_condition("grpo")(grouped, full, expected)
    a = np.abs(np.asarray(rewards, dtype=np.float64))
    f = summation_factor(int(a.size))
    return np.asarray(a + (f + 2.0) * a.mean() + np.abs(np.asarray(expected)), dtype=np.float64)


def _found(case: Case, i: int = 0) -> Array:
    found = np.asarray(case.found[i], dtype=np.float64)
    want = np.asarray(case.expected(i)).shape
    assert found.shape == want, f"advantages of shape {found.shape}, expected {want}"
    return found


def _agrees(case: Case) -> None:
    for i in range(len(case.calls)):
        found = _found(case, i)
        case.show("found:   ", found, "expected:", case.expected(i))
        case.assert_close(found, case.expected(i), case.condition(i), "the advantages")


def _sums_to_zero(case: Case) -> None:
    found = _found(case)
    err = case.allowed(case.expected(), case.condition())
    f = summation_factor(int(found.size))
    allowed = float(err.sum()) + f * case.u * float(np.abs(found).sum())
    total = float(found.sum())
    assert abs(total) <= allowed, f"the advantages sum to {total!r}, not 0 (allowed {allowed:.3g})"


def _constant_is_zero(case: Case) -> None:
    found = _found(case)
    assert np.all(np.abs(found) <= case.allowed(case.expected(), case.condition())), (
        f"equal rewards got advantages {found.tolist()}, not 0"
    )


def _unchanged(case: Case) -> None:
    a, b = _found(case, 0), _found(case, 1)
    allowed = (
        case.allowed(case.expected(0), case.condition(0))
        + case.allowed(case.expected(1), case.condition(1))
        + np.abs(case.expected(1) - case.expected(0))
    )
    bad = np.abs(a - b) > allowed
    assert not bad.any(), f"shifting the rewards changed {a[bad].tolist()} to {b[bad].tolist()}"


def batch_mean_spec() -> Spec:
    """The spec ``batch_mean_advantages`` (value only)."""
    return Spec(
        name="batch_mean_advantages",
        reference="losses.advantages.grpo_advantages",
        signature="candidate(rewards) -> (B,) (grpo_advantages with the batch as one group, std='none')",
        read=lambda raw, call, conv: ArrayBridge.to_numpy(raw),
        expected=_expected,
        condition=_condition,
        checks=(
            Check(
                "values",
                "the advantages are r − mean(r) over the batch (divided by the batch's std + eps "
                "with std= declared)",
                _rewards(),
                _agrees,
            ),
            Check("zero_sum", "the advantages of the batch sum to 0", _rewards(), _sums_to_zero),
            Check(
                "constant_batch_is_zero",
                "a batch whose rewards are all equal gets advantage 0",
                _rewards(constant=True),
                _constant_is_zero,
            ),
            Check(
                "shift_invariance",
                "adding one constant to every reward leaves the advantages unchanged",
                _rewards(shift=True),
                _unchanged,
            ),
        ),
        conventions=(STD, EPS),
    )
