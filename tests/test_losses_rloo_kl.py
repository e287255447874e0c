"""RLOO on the KL-penalised sequence reward (refimpl.losses.kl_reward.rloo_kl_advantages).

The reference is checked against an exact Fraction computation of the paper's definition on
dyadic inputs (rewards in quarters, log-probabilities in eighths), and by properties that each
reject a plausible wrong variant: the clip applied after the penalty, the penalty averaged over
the tokens, the penalty kept out of the siblings' baselines, the penalty added.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects
from hypothesis import given
from hypothesis import strategies as st

from refimpl.errors import RefimplError
from refimpl.losses import rloo_advantages, rloo_kl_advantages

Case = dict[str, Any]
Impl = Callable[..., Any]


@st.composite
def _cases(draw: st.DrawFn) -> Case:
    """Contiguous groups of 2–4, rows of 1..T real tokens, dyadic values, garbage at padding."""
    sizes = draw(st.lists(st.integers(2, 4), min_size=1, max_size=3))
    rows, time = sum(sizes), draw(st.integers(1, 4))
    lengths = draw(st.lists(st.integers(1, time), min_size=rows, max_size=rows))
    mask = (np.arange(time)[None, :] < np.asarray(lengths)[:, None]).astype(np.float64)
    eighths = st.integers(-24, 0).map(lambda k: k / 8)
    logp = np.asarray(draw(st.lists(eighths, min_size=rows * time, max_size=rows * time)))
    ref = np.asarray(draw(st.lists(eighths, min_size=rows * time, max_size=rows * time)))
    garbage = draw(st.sampled_from([0.0, -1e3, 7.0]))
    return {
        "rewards": np.asarray(draw(st.lists(st.integers(-8, 8), min_size=rows, max_size=rows))) / 4,
        "logp": np.where(mask > 0, logp.reshape(rows, time), garbage),
        "logp_ref": np.where(mask > 0, ref.reshape(rows, time), 0.0),
        "group": np.repeat(np.arange(len(sizes)), sizes),
        "beta": draw(st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0])),
        "mask": mask,
        "reward_clip": draw(st.sampled_from([None, (-1.0, 1.0), (-0.5, 0.25)])),
    }


def _call(fn: Impl, c: Case) -> Any:
    return np.asarray(
        fn(
            c["rewards"],
            c["logp"],
            c["logp_ref"],
            group=c["group"],
            beta=c["beta"],
            mask=c["mask"],
            reward_clip=c["reward_clip"],
        )
    )


def _exact(c: Case) -> list[Fraction]:
    """The paper's definition in Fractions: r̃ = clip(R) − β·Σ m(logp − logp_ref), then RLOO."""
    beta, m = Fraction(c["beta"]), c["mask"]
    penalised = []
    for b, reward in enumerate(c["rewards"]):
        r = Fraction(reward)
        if c["reward_clip"] is not None:
            low, high = (Fraction(x) for x in c["reward_clip"])
            r = min(max(r, low), high)
        kl = sum(
            (Fraction(c["logp"][b, t]) - Fraction(c["logp_ref"][b, t])
             for t in range(m.shape[1]) if m[b, t] > 0),
            Fraction(0),
        )  # fmt: skip
        penalised.append(r - beta * kl)
    out = []
    for b, g in enumerate(c["group"]):
        others = [penalised[j] for j, h in enumerate(c["group"]) if h == g and j != b]
        out.append(penalised[b] - sum(others, Fraction(0)) / len(others))
    return out


def _agrees_with_exact(fn: Impl, c: Case) -> None:
    got, want = _call(fn, c), np.asarray([float(x) for x in _exact(c)])
    assert np.allclose(got, want, rtol=1e-14, atol=1e-14), f"{got} != exact {want}"


def _groups_sum_to_zero(fn: Impl, c: Case) -> None:
    got = _call(fn, c)
    for g in np.unique(c["group"]):
        total = float(got[c["group"] == g].sum())
        assert abs(total) <= 1e-12, f"group {g}'s advantages sum to {total}, not 0"


def _sibling_moves_baseline(fn: Impl, c: Case) -> None:
    """One more nat of log-ratio on row 0 lowers A_0 by β and raises each sibling's by β/(n−1)."""
    moved = dict(c, logp=c["logp"].copy())
    moved["logp"][0, 0] += 1.0
    delta = _call(fn, moved) - _call(fn, c)
    n = int((c["group"] == c["group"][0]).sum())
    want = np.where(c["group"] == c["group"][0], c["beta"] / (n - 1), 0.0)
    want[0] = -c["beta"]
    assert np.allclose(delta, want, atol=1e-12), f"moves {delta}, expected {want}"


# --- wrong variants: each is the reference with one plausible mistake -----------------------------


def _clip_after_penalty(rewards: Any, logp: Any, logp_ref: Any, **kw: Any) -> Any:
    """The clip applied to the penalised reward (the penalty clipped with it)."""
    clip, beta, m = kw.pop("reward_clip"), kw.pop("beta"), np.asarray(kw.pop("mask"))
    r = np.asarray(rewards) - beta * (m * (np.asarray(logp) - logp_ref)).sum(axis=1)
    r = r if clip is None else np.clip(r, *clip)
    return rloo_advantages(r, **kw)


def _mean_penalty(rewards: Any, logp: Any, logp_ref: Any, **kw: Any) -> Any:
    """The per-token log-ratio averaged over the row instead of summed."""
    m = np.asarray(kw["mask"])
    lengths = m.sum(axis=1, keepdims=True)
    return rloo_kl_advantages(rewards, logp_ref + (np.asarray(logp) - logp_ref) / lengths,
                              logp_ref, **kw)  # fmt: skip


def _penalty_outside_baseline(rewards: Any, logp: Any, logp_ref: Any, **kw: Any) -> Any:
    """RLOO of the clipped outcome, then −β·KL of the sequence's own (no sibling's)."""
    m = np.asarray(kw["mask"])
    own = kw["beta"] * (m * (np.asarray(logp) - logp_ref)).sum(axis=1)
    plain = rloo_kl_advantages(rewards, logp_ref, logp_ref, **kw)
    return plain - own


def _penalty_added(rewards: Any, logp: Any, logp_ref: Any, **kw: Any) -> Any:
    return rloo_kl_advantages(rewards, logp_ref, logp, **kw)


@given(_cases())
def test_rloo_kl_agrees_with_the_exact_definition(case: Case) -> None:
    _agrees_with_exact(rloo_kl_advantages, case)


@given(_cases())
def test_rloo_kl_groups_sum_to_zero(case: Case) -> None:
    _groups_sum_to_zero(rloo_kl_advantages, case)


@given(_cases())
def test_rloo_kl_a_sibling_log_ratio_moves_the_baseline(case: Case) -> None:
    _sibling_moves_baseline(rloo_kl_advantages, case)


@pytest.mark.parametrize(
    "variant", [_clip_after_penalty, _mean_penalty, _penalty_outside_baseline, _penalty_added]
)
def test_the_exact_check_rejects_wrong_variants(variant: Impl) -> None:
    rejects(given(_cases())(lambda case: _agrees_with_exact(variant, case)))


def test_the_group_sum_rejects_a_penalty_outside_the_baseline() -> None:
    rejects(given(_cases())(lambda case: _groups_sum_to_zero(_penalty_outside_baseline, case)))


@pytest.mark.parametrize("variant", [_penalty_outside_baseline, _penalty_added, _mean_penalty])
def test_the_sibling_check_rejects_wrong_variants(variant: Impl) -> None:
    rejects(given(_cases())(lambda case: _sibling_moves_baseline(variant, case)))


def test_rloo_kl_by_hand() -> None:
    """Group of three, β = 1/2, clip (−1, 1): R = (3, 0, −1/2) → clip (1, 0, −1/2); Σ log-ratios
    (1, −1/2, 0) → r̃ = (1/2, 1/4, −1/2); A = r̃ − mean of the others = (5/8, 1/4, −7/8)
    (the reference's n/(n − 1)·(r̃ − mean) rounds the third of 1/4 once)."""
    got = rloo_kl_advantages(
        [3.0, 0.0, -0.5],
        [[-1.0, -0.5], [-1.0, -4.0], [-2.0, -2.0]],
        [[-2.0, -0.5], [-0.5, 0.0], [-2.0, -2.0]],
        group=[0, 0, 0],
        beta=0.5,
        mask=[[1, 1], [1, 0], [1, 1]],
        reward_clip=(-1.0, 1.0),
    )
    assert np.allclose(got, [0.625, 0.25, -0.875], rtol=2**-50, atol=0.0)


def test_rloo_kl_with_beta_zero_is_rloo_and_normalize_standardises() -> None:
    lp, ref = [[-1.0], [-3.0], [-0.5], [-1.5]], [[0.0], [0.0], [-4.0], [-4.0]]
    plain = rloo_advantages([1.0, 0.0, 2.0, 2.0], group=[0, 0, 1, 1])
    assert rloo_kl_advantages([1.0, 0.0, 2.0, 2.0], lp, ref, group=[0, 0, 1, 1],
                              beta=0.0).tolist() == plain.tolist()  # fmt: skip
    # β = 1: r̃ = (2, 3, −1.5, −0.5); A = (−1, 1, −1, 1); batch sample std 2/√3, eps 0
    got = rloo_kl_advantages([1.0, 0.0, 2.0, 2.0], lp, ref, group=[0, 0, 1, 1], beta=1.0,
                             normalize=True, eps=0.0)  # fmt: skip
    assert np.allclose(got, np.asarray([-1.0, 1.0, -1.0, 1.0]) * 3**0.5 / 2, rtol=1e-15)


def test_rloo_kl_refusals_name_the_parameter() -> None:
    lp = [[-1.0], [-2.0]]
    with pytest.raises(RefimplError, match="beta"):
        rloo_kl_advantages([1.0, 0.0], lp, lp, group=[0, 0], beta=-1.0)
    with pytest.raises(RefimplError, match="rewards"):
        rloo_kl_advantages([1.0], lp, lp, group=[0, 0], beta=1.0)
    with pytest.raises(RefimplError, match="normalize"):
        rloo_kl_advantages([1.0, 0.0], lp, lp, group=[0, 0], beta=1.0, normalize="yes")  # type: ignore[arg-type]
    with pytest.raises(RefimplError, match="reward_clip"):
        rloo_kl_advantages([1.0, 0.0], lp, lp, group=[0, 0], beta=1.0, reward_clip=(1.0, -1.0))
    with pytest.raises(RefimplError, match="logp"):
        rloo_kl_advantages([1.0, 0.0], [[1e308], [0.0]], [[-1e308], [0.0]], group=[0, 0], beta=1.0)
