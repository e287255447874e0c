"""Tests of GDPO's batch denominator (refimpl.losses.advantages_tokens.gdpo_advantages).

``whiten_placement`` chooses where ε_w sits in the batch stage: ``√(s² + ε_w)`` (verl),
``s + ε_w`` (TRL's ``normalize_then_sum``) or ``√max(s², ε_w)``. Exact hand-worked values where
the batch's standard deviation is rational; properties against an independent loop (per-reward
group z-scores, weighted sum, batch z-score over sequences), the batch standard deviation
``s/D(s)``, the placements' agreement at ε_w = 0 and the conformance spec under TRL's declared
conventions, each shown to reject a deliberately wrong variant.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

from refimpl.errors import InvalidArgument
from refimpl.losses.advantages_tokens import gdpo_advantages
from refimpl.testing import check_conformance

Array = NDArray[np.float64]
Labels = NDArray[np.int64]
Gdpo = Callable[..., Array]
Batch = tuple[Array, Labels, Array]

#: TRL 1.16.0's normalize_then_sum, as conventions of the gdpo_advantages spec
TRL = {
    "groups": "contiguous",
    "eps": 1e-4,
    "whiten_eps": 1e-4,
    "whiten_placement": "std",
    "whiten_weights": "sequences",
}

# Two groups whose first reward is (1, 0) (population z-scores ±1), a second reward that moves
# only in group 1, and a singleton (z = 0): with weights (1, 6) the sums are (1, −1, 7, −7, 0),
# of mean 0 and sample variance (1 + 1 + 49 + 49)/4 = 25, so s = 5 exactly.
REWARDS = [[1.0, 5.0], [0.0, 5.0], [1.0, 1.0], [0.0, 0.0], [7.0, 2.0]]
GROUP = [0, 0, 1, 1, 2]
WEIGHTS = [1.0, 6.0]
SUMS = [Fraction(1), Fraction(-1), Fraction(7), Fraction(-7), Fraction(0)]


@pytest.mark.parametrize(
    ("placement", "whiten_eps", "denominator"),
    [
        ("std", 0.25, Fraction(21, 4)),  # 5 + 1/4
        ("std", 0.0, Fraction(5)),
        ("variance", 11.0, Fraction(6)),  # √(25 + 11)
        ("floor", 4.0, Fraction(5)),  # √max(25, 4)
        ("floor", 49.0, Fraction(7)),  # √max(25, 49)
    ],
)
def test_hand_worked_values(placement: Any, whiten_eps: float, denominator: Fraction) -> None:
    out = gdpo_advantages(
        REWARDS,
        group=GROUP,
        weights=WEIGHTS,
        std="population",
        eps=0.0,
        whiten_eps=whiten_eps,
        whiten_placement=placement,
    )
    # one rounded division (or none) per entry: equal to the correctly rounded quotient
    assert out.tolist() == [float(s / denominator) for s in SUMS]


def test_component_eps_by_hand() -> None:
    # population std 1/2 + ε = 1: each moving group's z-scores are ±1/2; sums (1/2, −1/2, 7/2,
    # −7/2, 0), Σ S² = 25, sample variance 25/4, s = 5/2: the std placement divides by 5/2 + 1/2
    out = gdpo_advantages(
        REWARDS, group=GROUP, weights=WEIGHTS, std="population", eps=0.5,
        whiten_eps=0.5, whiten_placement="std",
    )  # fmt: skip
    sums = [Fraction(1, 2), Fraction(-1, 2), Fraction(7, 2), Fraction(-7, 2), Fraction(0)]
    assert out.tolist() == [float(x / 3) for x in sums]


def test_an_unknown_placement_is_refused_by_name() -> None:
    with pytest.raises(InvalidArgument, match="whiten_placement must be one of"):
        gdpo_advantages(REWARDS, group=GROUP, whiten_placement="sqrt")  # type: ignore[arg-type]


@st.composite
def batches(draw: st.DrawFn) -> Batch:
    """Rewards (B, K), contiguous group labels (groups of 2–5) and K weights."""
    sizes = draw(st.lists(st.integers(2, 5), min_size=1, max_size=4))
    k = draw(st.integers(1, 3))
    b = sum(sizes)
    values = draw(st.lists(st.floats(-5.0, 5.0, allow_subnormal=False), min_size=b * k,
                           max_size=b * k))  # fmt: skip
    weights = draw(st.lists(st.sampled_from([1.0, 0.5, 2.0, -1.0, 3.0]), min_size=k, max_size=k))
    group = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)
    return np.asarray(values).reshape(b, k), group, np.asarray(weights)


def summed(rewards: Array, group: Labels, weights: Array, eps: float) -> list[float]:
    """Independent: each reward's z-score in its group (sample std + ε) by loops, summed with
    the weights."""
    b, k = rewards.shape
    sums = [0.0] * b
    for c in range(k):
        for i in range(b):
            peers = [rewards[j, c] for j in range(b) if group[j] == group[i]]
            mean = sum(peers) / len(peers)
            sd = math.sqrt(sum((x - mean) ** 2 for x in peers) / (len(peers) - 1))
            if sd + eps > 0:
                sums[i] += weights[c] * (rewards[i, c] - mean) / (sd + eps)
    return sums


def sample_std(values: list[float]) -> float:
    centre = sum(values) / len(values)
    return math.sqrt(sum((x - centre) ** 2 for x in values) / (len(values) - 1))


def loop_formula(rewards: Array, group: Labels, weights: Array, eps: float, whiten: float) -> Array:
    """Independent: the summed z-scores, then (S − mean)/(sample std + ε_w) over sequences."""
    sums = summed(rewards, group, weights, eps)
    centre, s = sum(sums) / len(sums), sample_std(sums)
    if s + whiten == 0:
        return np.zeros(len(sums))
    return np.asarray([(x - centre) / (s + whiten) for x in sums])


def trl_reference(
    rewards: Any, *, group: Any, weights: Any, eps: float, whiten_eps: float
) -> Array:
    return gdpo_advantages(
        rewards, group=group, weights=weights, eps=eps, whiten_eps=whiten_eps,
        whiten_placement="std",
    )  # fmt: skip


def variance_placement(
    rewards: Any, *, group: Any, weights: Any, eps: float, whiten_eps: float
) -> Array:
    """Wrong for TRL: ε_w under the square root (verl's placement)."""
    return gdpo_advantages(
        rewards, group=group, weights=weights, eps=eps, whiten_eps=whiten_eps,
        whiten_placement="variance",
    )  # fmt: skip


def population_batch_std(
    rewards: Any, *, group: Any, weights: Any, eps: float, whiten_eps: float
) -> Array:
    """Wrong: the batch stage divides by the population std (n, not n − 1)."""
    sums = np.asarray(summed(rewards, group, weights, eps))
    return np.asarray((sums - sums.mean()) / (float(np.std(sums)) + whiten_eps))


def matches_loop(fn: Gdpo) -> Callable[[], None]:
    @given(batches(), st.sampled_from([1e-4, 0.5]), st.sampled_from([1e-4, 0.5, 2.0]))
    def check(batch: Batch, eps: float, whiten: float) -> None:
        rewards, group, weights = batch
        expected = loop_formula(rewards, group, weights, eps, whiten)
        found = fn(rewards, group=group, weights=weights, eps=eps, whiten_eps=whiten)
        scale = 1.0 + float(np.max(np.abs(expected)))
        np.testing.assert_allclose(found, expected, rtol=1e-9, atol=1e-9 * scale)

    return check


def test_the_std_placement_matches_an_independent_loop() -> None:
    run_property(matches_loop(trl_reference))
    rejects(matches_loop(variance_placement))


def batch_std_is_s_over_s_plus_eps(fn: Gdpo) -> Callable[[], None]:
    @given(batches(), st.sampled_from([1e-4, 0.5, 2.0]))
    def check(batch: Batch, whiten: float) -> None:
        rewards, group, weights = batch
        s = sample_std(summed(rewards, group, weights, 1e-4))
        out = fn(rewards, group=group, weights=weights, eps=1e-4, whiten_eps=whiten)
        std = float(np.std(out, ddof=1))
        assert math.isclose(std, s / (s + whiten), rel_tol=1e-9, abs_tol=1e-12), (std, s)

    return check


def test_the_batch_std_is_s_over_s_plus_eps() -> None:
    run_property(batch_std_is_s_over_s_plus_eps(trl_reference))
    rejects(batch_std_is_s_over_s_plus_eps(population_batch_std))


def placements_agree_without_eps(fn: Callable[..., Array]) -> Callable[[], None]:
    @given(batches())
    def check(batch: Batch) -> None:
        rewards, group, weights = batch
        base = gdpo_advantages(rewards, group=group, weights=weights, whiten_eps=0.0)
        other = fn(rewards, group=group, weights=weights)
        np.testing.assert_allclose(other, base, rtol=1e-12, atol=1e-12)

    return check


@pytest.mark.parametrize("placement", ["std", "floor"])
def test_the_placements_agree_at_zero_eps(placement: Any) -> None:
    def at_zero(rewards: Any, *, group: Any, weights: Any) -> Array:
        return gdpo_advantages(rewards, group=group, weights=weights, whiten_eps=0.0,
                               whiten_placement=placement)  # fmt: skip

    def eps_kept(rewards: Any, *, group: Any, weights: Any) -> Array:
        """Wrong: ε_w = 1e-4 left in the std placement."""
        return gdpo_advantages(rewards, group=group, weights=weights, whiten_eps=1e-4,
                               whiten_placement=placement)  # fmt: skip

    run_property(placements_agree_without_eps(at_zero))
    rejects(placements_agree_without_eps(eps_kept))


def _trl_like(rewards: Any, *, group: Any, weights: Any, mask: Any) -> Array:
    """TRL's normalize_then_sum through the reference (mask not read)."""
    return trl_reference(rewards, group=group, weights=weights, eps=1e-4, whiten_eps=1e-4)


def _verl_like(rewards: Any, *, group: Any, weights: Any, mask: Any) -> Array:
    """Wrong for TRL's conventions: the verl batch stage (token-weighted, ε under the root)."""
    return gdpo_advantages(rewards, group=group, weights=weights, mask=mask, eps=1e-4,
                           whiten_eps=1e-4)  # fmt: skip


def test_the_spec_passes_trls_form_under_its_conventions_and_rejects_verls() -> None:
    good = check_conformance(_trl_like, spec="gdpo_advantages", conventions=TRL, max_examples=30)
    good.raise_if_failed()
    bad = check_conformance(_verl_like, spec="gdpo_advantages", conventions=TRL, max_examples=30)
    assert not bad.ok
    failed = {r.name for r in bad.results if r.status == "failed"}
    assert "values" in failed


@pytest.mark.parametrize(
    "fault",
    [{"std": "bogus"}, {"eps": -1.0}, {"whiten_eps": -1.0}, {"whiten_placement": "bogus"}],
)
def test_a_mask_of_other_sequences_is_refused_before_any_option(fault: dict[str, Any]) -> None:
    """The mask's shape is checked first (shape before domain), so a call with a wrong mask and a
    wrong option is sent to the mask, before any reward column is normalized."""
    r, group = [[1.0, 0.0], [0.0, 0.5], [1.0, 1.0]], [0, 0, 1]
    with pytest.raises(InvalidArgument, match=r"^mask and rewards must have one row per sequence"):
        gdpo_advantages(r, group=group, mask=[[1, 1], [1, 0]], **fault)
    with pytest.raises(InvalidArgument, match=rf"^{next(iter(fault))} "):
        gdpo_advantages(r, group=group, mask=[[1, 1], [1, 0], [1, 1]], **fault)
