r"""Spec of RLOO on the KL-penalised sequence reward (value only).

``rloo_kl_advantages`` checks a candidate against
:func:`refimpl.losses.kl_reward.rloo_kl_advantages`: the penalised reward
:math:`\tilde r_b = \operatorname{clip}(R_b) - \beta\sum_t m_{bt}(\log\pi_{bt} - \log\pi^{\text{ref}}_{bt})`,
then the leave-one-out advantages of :math:`\tilde r` (and, under ``normalize='batch'``, their
standardisation over the batch). Value only: the advantages come from detached log-probabilities
(TRL computes them under ``torch.no_grad``).

Draws: the ``rloo_advantages`` spec's rewards and groups (its ``groups`` convention), with rows of
1..T real tokens, log-probabilities in [−20, 0] and garbage at padding, ``beta`` in [0, 2] and a
clip range or none. Derived tolerance (units of :math:`u`, before the engine's safety factor):
the penalised reward rounds by :math:`e_b = \beta(f_T + 2)\sum_t|\log\pi_{bt} -
\log\pi^{\text{ref}}_{bt}| + \beta(|\Sigma_b| + \dots)` with :math:`f_T` the pairwise sum's factor
(each difference, the sum, the product and the subtraction round once), and the RLOO condition of
the ``rloo_advantages`` spec applies to :math:`\tilde r` with :math:`e_b + \max_j e_j` added (a
sequence's own error and its siblings'); standardised, both are divided by :math:`s + \varepsilon`
as in the ``rloo_normalized_advantages`` spec.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

from refimpl.losses.kl_reward import rloo_kl_advantages
from refimpl.testing._arrays import ArrayBridge
from refimpl.testing._engine import Call, Case, Check, Convention, Conventions, Spec
from refimpl.testing._specs_losses_advantages_normalized import EPS
from refimpl.testing._specs_losses_advantages_normalized import _condition as _normalized_condition
from refimpl.testing._specs_losses_stats import Array, padding_mask
from refimpl.testing._specs_losses_stats_advantages import (
    GROUPS,
    _adv_condition,
    _adv_found,
    _rewards_draw,
)
from refimpl.testing.tolerances import summation_factor

__all__ = ["rloo_kl_spec"]

NORMALIZE = Convention(
    "normalize",
    "none",
    ("none", "batch"),
    "the leave-one-out advantages as they are, or standardised over the batch "
    "((A − mean) / (sample std + eps))",
    who="batch: TRL 1.16.0 RLOOTrainer with normalize_advantages=True (default False)",
)


def _floats(low: float, high: float) -> st.SearchStrategy[float]:
    return st.floats(low, high, allow_nan=False, allow_infinity=False, allow_subnormal=False)


@st.composite
def _draw(draw: st.DrawFn, conv: Conventions, beyond_clip: bool = False) -> Call:
    """``(rewards, logp, logp_ref), {group, beta, reward_clip, mask}``."""
    rewards, group = draw(_rewards_draw(dict(conv, singleton="excluded")))
    rows, time = rewards.size, draw(st.integers(1, 5))
    lengths = np.asarray(draw(st.lists(st.integers(1, time), min_size=rows, max_size=rows)))
    mask = padding_mask(lengths.astype(np.int64), time)
    cells = rows * time
    base = np.asarray(draw(st.lists(_floats(-20.0, 0.0), min_size=cells, max_size=cells)))
    step = np.asarray(draw(st.lists(_floats(-2.0, 2.0), min_size=cells, max_size=cells)))
    logp = np.minimum(base + step, 0.0).reshape(rows, time)
    garbage = draw(st.sampled_from([0.0, 1e3, -7.0]))
    beta = draw(st.one_of(st.sampled_from([0.0, 0.05, 1.0]), _floats(0.0, 2.0)))
    clip = draw(st.one_of(st.none(), st.just((-1.0, 1.0)), st.tuples(_floats(-5.0, 0.0),
                                                                       _floats(0.0, 5.0))))  # fmt: skip
    if beyond_clip:
        clip = clip or (-1.0, 1.0)
        rewards = np.where(rewards >= 0, clip[1] + 1.0 + np.abs(rewards), clip[0] - 1.0)
    kwargs = {"group": group, "beta": beta, "reward_clip": clip, "mask": mask}
    return (
        rewards,
        np.where(mask > 0, logp, garbage),
        np.where(mask > 0, base.reshape(rows, time), -garbage),
    ), kwargs


def _calls(conv: Conventions) -> st.SearchStrategy[list[Call]]:
    return _draw(conv).map(lambda c: [c])


def _padding_calls(conv: Conventions) -> st.SearchStrategy[list[Call]]:
    """The call, and the same with other garbage at padding."""

    def moved(call: Call) -> list[Call]:
        (rewards, logp, ref), kw = call
        m = np.asarray(kw["mask"]) > 0
        return [call, ((rewards, np.where(m, logp, 5.0), np.where(m, ref, -3e2)), dict(kw))]

    return _draw(conv).map(moved)


def _sibling_calls(conv: Conventions) -> st.SearchStrategy[list[Call]]:
    """The call, and the same with one more nat of log-ratio on row 0's first token."""

    def moved(call: Call) -> list[Call]:
        (rewards, logp, ref), kw = call
        lp = np.asarray(logp).copy()
        ref2 = np.asarray(ref).copy()
        ref2[0, 0] -= 1.0
        return [call, ((rewards, lp, ref2), dict(kw))]

    return _draw(conv).map(moved)


def _clip_calls(conv: Conventions) -> st.SearchStrategy[list[Call]]:
    """Rewards beyond the clip range, and the same rewards set at the bounds."""

    def at_bounds(call: Call) -> list[Call]:
        (rewards, logp, ref), kw = call
        low, high = kw["reward_clip"]
        return [call, ((np.clip(rewards, low, high), logp, ref), dict(kw))]

    return _draw(conv, beyond_clip=True).map(at_bounds)


def _expected(call: Call, conv: Conventions) -> Array:
    (rewards, logp, ref), kw = call
    return rloo_kl_advantages(
        rewards, logp, ref, **kw, normalize=conv["normalize"] == "batch", eps=float(conv["eps"])
    )


def _penalised(call: Call) -> tuple[Array, Array]:
    """The penalised rewards (float64) and their rounding e_b in units of u."""
    (rewards, logp, ref), kw = call
    m = np.asarray(kw["mask"]) > 0
    beta = float(kw["beta"])
    r = np.asarray(rewards, dtype=np.float64)
    if kw["reward_clip"] is not None:
        r = np.clip(r, *kw["reward_clip"])
    d = np.where(m, np.asarray(logp) - np.asarray(ref), 0.0)
    total = d.sum(axis=1)
    f = summation_factor(int(m.shape[1]))
    spread = np.where(m, np.abs(logp) + np.abs(ref), 0.0).sum(axis=1)
    penalised = r - beta * total
    err = beta * ((f + 2.0) * np.abs(d).sum(axis=1) + spread) + np.abs(r) + np.abs(penalised)
    return penalised, err


def _condition(call: Call, conv: Conventions, expected: Any) -> Array:
    penalised, err = _penalised(call)
    (_, _, _), kw = call
    inner: Call = ((penalised,), {"group": kw["group"]})
    extra = err + float(np.max(err))
    if conv["normalize"] == "none":
        return np.asarray(_adv_condition("rloo")(inner, conv, expected) + extra)
    base = _normalized_condition(inner, conv, expected)
    a = rloo_kl_advantages(*call[0], **kw)
    d = (float(np.std(a, ddof=1)) if a.size > 1 else 0.0) + float(conv["eps"])
    if d == 0.0:
        return np.asarray(base + extra)
    found = np.abs(np.asarray(expected, dtype=np.float64))
    return np.asarray(base + extra / d + found * 2.0 * float(np.max(extra)) / d)


def _agrees(case: Case) -> None:
    for i in range(len(case.calls)):
        found = _adv_found(case, i)
        case.show("found:   ", found)
        case.show("expected:", case.expected(i))
        case.assert_close(found, case.expected(i), case.condition(i), "the advantages")


def _same_pair(what: str) -> Any:
    def same(case: Case) -> None:
        a, b = _adv_found(case, 0), _adv_found(case, 1)
        allowed = case.allowed(case.expected(0), case.condition(0)) + case.allowed(
            case.expected(1), case.condition(1)
        )
        case.show("first: ", a)
        case.show("second:", b)
        bad = np.abs(a - b) > allowed
        assert not bad.any(), f"{what}: {a[bad].tolist()} became {b[bad].tolist()}"

    return same


def _sibling(case: Case) -> None:
    """Row 0's log-ratio one nat larger: A_0 moves by −β, each sibling's by +β/(n − 1)."""
    a, b = _adv_found(case, 0), _adv_found(case, 1)
    _, inverse, counts = np.unique(
        np.asarray(case.calls[0][1]["group"]), return_inverse=True, return_counts=True
    )
    beta = float(case.calls[0][1]["beta"])
    same = inverse == inverse[0]
    want = np.where(same, beta / max(int(counts[inverse[0]]) - 1, 1), 0.0)
    want[0] = -beta
    # the moved anchor ref − 1 is rounded to the candidate's dtype: the nat is off by u·|ref − 1|
    moved = abs(float(np.asarray(case.calls[1][0][2])[0, 0])) + 1.0
    allowed = (
        case.allowed(case.expected(0), case.condition(0))
        + case.allowed(case.expected(1), case.condition(1))
        + case.allowed(want, np.abs(want) * moved)
    )
    case.show("moved by:", b - a, "expected:", want)
    bad = np.abs(b - a - want) > allowed
    assert not bad.any(), (
        f"one more nat of log-ratio on row 0 moved the advantages by {(b - a).tolist()}, not "
        f"−β on the row and +β/(n − 1) on its siblings {want.tolist()}"
    )


def _unnormalized(conv: Conventions) -> str | None:
    if conv["normalize"] != "none":
        return "normalize='batch' rescales the moves by the batch standard deviation"
    return None


def rloo_kl_spec() -> Spec:
    """The spec ``rloo_kl_advantages`` (value only)."""
    return Spec(
        name="rloo_kl_advantages",
        reference="losses.kl_reward.rloo_kl_advantages",
        signature="candidate(rewards, logp, logp_ref, *, group, beta, reward_clip, mask) -> (B,)",
        read=lambda raw, call, conv: ArrayBridge.to_numpy(raw),
        expected=_expected,
        condition=_condition,
        checks=(
            Check(
                "values",
                "the advantages agree with refimpl.losses.kl_reward.rloo_kl_advantages under the "
                "declared conventions",
                _calls,
                _agrees,
            ),
            Check(
                "padding_ignored",
                "the log-probabilities at padding do not move the advantages",
                _padding_calls,
                _same_pair("new garbage at padding moved the advantages"),
            ),
            Check(
                "penalty_enters_the_baseline",
                "one more nat of log-ratio on a sequence lowers its advantage by β and raises "
                "each sibling's by β/(n − 1) (the penalty is in the reward, so in the baselines)",
                _sibling_calls,
                _sibling,
                applies=_unnormalized,
            ),
            Check(
                "clip_before_penalty",
                "rewards beyond the clip range give the advantages of rewards at its bounds "
                "(the outcome is clipped, the penalty is not)",
                _clip_calls,
                _same_pair("rewards beyond the clip range differ from rewards at its bounds"),
            ),
        ),
        conventions=(NORMALIZE, EPS, GROUPS),
    )
