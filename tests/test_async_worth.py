"""The fair verdict of asynchrony (refimpl.lab.worth): the rule, the boundary, and the comparison.

The rule and the boundary are pure functions: properties with Hypothesis, each also run against a
wrong variant. The comparison itself trains the toy policy through the simulator on fixed seeds
(bit-for-bit reproducible, no timing involved): constant lengths are not worth it, a heavy tail
with many slots per batch is, and the old comparison (synchronous dispatch given one optimizer step
per round of N, asynchronous N/B) is rejected by the first of these claims.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from refimpl import learning as lrn
from refimpl.lab import async_worth as aw
from refimpl.lab import learning_policy as lab
from refimpl.lab.worth import (
    CONFIDENCE,
    MARGIN,
    Clocks,
    _log_ratio,
    boundary,
    clocks,
    decide,
    fair_cell,
)

LOG_M = math.log(MARGIN)

spreads = st.lists(
    st.floats(min_value=-0.3, max_value=0.3, allow_nan=False), min_size=3, max_size=10
)


def _half_width(d: np.ndarray) -> float:
    return float(stats.t.ppf(CONFIDENCE, d.size - 1) * d.std(ddof=1) / math.sqrt(d.size))


def _verdict_is_outside_the_noise(rule: Callable[[Any], tuple[str, str]]) -> Any:
    @given(spreads)
    def check(noise: list[float]) -> None:
        d = np.asarray(noise)
        half = _half_width(d)
        verdict, _ = rule(d)
        if verdict == "worth it":
            assert d.mean() - half > LOG_M
        if verdict == "not worth it":
            assert d.mean() + half < LOG_M
        if verdict == "undecided":
            assert d.mean() - half <= LOG_M <= d.mean() + half

    return check


def test_a_verdict_is_given_only_outside_the_stated_noise() -> None:
    run_property(_verdict_is_outside_the_noise(decide))


def _every_seed_rule(d: Any) -> tuple[str, str]:
    """Wrong variant: the former rule, every seed on one side of the margin decides."""
    x = np.asarray(d)
    if np.all(x >= LOG_M):
        return "worth it", ""
    if np.all(x < LOG_M):
        return "not worth it", ""
    return "undecided", ""


def test_the_noise_rule_rejects_deciding_whenever_every_seed_is_on_one_side() -> None:
    rejects(_verdict_is_outside_the_noise(_every_seed_rule))


def _shift_flips(rule: Callable[[Any], tuple[str, str]]) -> Any:
    @given(spreads)
    def check(noise: list[float]) -> None:
        d = np.asarray(noise)
        half = _half_width(d)
        centred = d - d.mean()
        assert rule(centred + LOG_M + half + 1e-6)[0] == "worth it"
        assert rule(centred + LOG_M - half - 1e-6)[0] == "not worth it"

    return check


def test_moving_the_speedup_across_its_band_flips_the_verdict() -> None:
    run_property(_shift_flips(decide))


def test_the_flip_rejects_a_rule_without_a_noise_band() -> None:
    def mean_only(d: Any) -> tuple[str, str]:  # wrong variant: the mean alone decides
        return ("worth it" if float(np.mean(d)) > LOG_M + 0.5 else "not worth it"), ""

    rejects(_shift_flips(mean_only))


def test_unbounded_seeds_decide_only_when_all_agree() -> None:
    assert decide([math.inf, 0.5])[0] == "worth it"
    assert decide([-math.inf, 0.0])[0] == "not worth it"
    assert decide([math.inf, -math.inf])[0] == "undecided"
    assert decide([math.nan, 1.0])[0] == "undecided"


def _boundary_separates(find: Callable[..., float | None]) -> Any:
    increments = st.lists(st.floats(min_value=0.01, max_value=1.0), min_size=2, max_size=6)

    @given(st.floats(min_value=-2.0, max_value=0.0), increments)
    def check(start: float, steps: list[float]) -> None:
        means = start + np.concatenate([[0.0], np.cumsum(steps)])
        xs = np.arange(means.size, dtype=np.float64) * 0.5
        star = find(xs, means, margin=MARGIN)
        crosses = means[0] < LOG_M <= means[-1]
        assert (star is not None) == crosses
        if star is not None:
            interp = np.interp([star - 1e-9, star + 1e-9], xs, means)
            assert interp[0] < LOG_M + 1e-9
            assert interp[1] >= LOG_M - 1e-9

    return check


def test_the_computed_boundary_is_where_the_interpolated_statistic_crosses_the_margin() -> None:
    run_property(_boundary_separates(boundary))


def test_the_boundary_property_rejects_a_boundary_snapped_to_the_grid() -> None:
    def snapped(x: Any, means: Any, *, margin: float) -> float | None:  # "eyeballed": a grid point
        xs, ys = np.asarray(x), np.asarray(means) - math.log(margin)
        above = np.flatnonzero(ys >= 0)
        return float(xs[above[0]]) if above.size and above[0] > 0 else None

    rejects(_boundary_separates(snapped))


def test_a_run_that_misses_the_target_loses_only_if_the_other_reached_it_first() -> None:
    reached = Clocks(10.0, 80.0, 100.0)
    assert _log_ratio(reached, None, 500.0, 150.0) == -math.inf  # async ran past 100: lost
    assert math.isnan(_log_ratio(reached, None, 500.0, 60.0))  # async stopped early: unknown
    assert _log_ratio(None, reached, 120.0, 500.0) == math.inf
    assert math.isnan(_log_ratio(None, None, 1.0, 1.0))
    assert _log_ratio(Clocks(1.0, 1.0, 200.0), reached) == pytest.approx(math.log(2.0))


def test_clocks_interpolate_between_versions() -> None:
    run = lrn.TrainingRun(
        np.zeros((4, 1)),
        np.array([10.0, 10.0, 30.0]),
        np.zeros(4),
        np.array([0.0, 0.2, 0.6, 1.0]),
        np.zeros((3, 1)),
        1,
        None,
        samples=np.array([8.0, 8.0, 16.0]),
    )
    assert clocks(run, 0.4) == Clocks(1.5, 8.0, 10.0)
    assert clocks(run, 0.8) == Clocks(2.5, 12.0, 20.0)
    assert clocks(run, 1.5) is None
    assert clocks(run, -1.0) == Clocks(0.0, 0.0, 0.0)


# ---------------------------------------------------------------------------------------------
# the comparison itself, on fixed seeds
# ---------------------------------------------------------------------------------------------

SEEDS = [0, 1, 2, 3]
BATCH = 8
STEPS = 96


def _trainer(sigma: float, *, old: bool = False) -> Callable[..., lrn.TrainingRun]:
    q = lab.quality()
    phi = lrn.length_features(lab.M, degree=1)
    pmf0 = lrn.hazard_length_pmf(lrn.stop_hazard(lab.THETA0, phi))
    dur = aw.toy_durations(aw._lognormal_law(sigma), pmf0)

    def train(mode: str, n: int, b: int, steps: int, eta: int | None, k: int) -> lrn.TrainingRun:
        if old and mode == "sync_minibatch":  # the former comparison: one step per round of N
            mode, b, steps = "sync", n, steps // (n // b)
        return lrn.train_policy(
            lab.THETA0, phi, q, slots=n, batch=b, steps=steps, mode=mode, eta=eta,
            learning_rate=aw.WORTH_LEARNING_RATE, penalty=lab.PENALTY, durations=dur, seed=k,
        )  # fmt: skip

    return train


def _verdict(sigma: float, ratio: int, *, old: bool = False) -> str:
    cell = fair_cell(
        _trainer(sigma, old=old), law=str(sigma), ratio=ratio, batch=BATCH, eta=None,
        seeds=SEEDS, steps=STEPS, targets=aw._targets(),
    )  # fmt: skip
    return cell.verdict


def _constant_lengths_are_not_worth_it(old: bool) -> None:
    assert _verdict(0.0, 8, old=old) == "not worth it"


def test_moving_the_tail_across_the_boundary_flips_the_verdict() -> None:
    # constant lengths (σ = 0): asynchrony removes no idle time and adds staleness
    _constant_lengths_are_not_worth_it(old=False)
    # a heavy tail (σ = 2) with N ≫ B: the idle slots it removes pay for the staleness
    assert _verdict(2.0, 8) == "worth it"


def test_constant_lengths_reject_the_comparison_with_unequal_optimizer_steps() -> None:
    rejects(_constant_lengths_are_not_worth_it, old=True)


@pytest.mark.parametrize("ratio", [1, 2, 4])
def test_sync_minibatch_takes_n_over_b_steps_per_round_in_slot_order(ratio: int) -> None:
    phi = lrn.length_features(6, degree=1)
    q = np.linspace(0.1, 0.9, 6)
    run = lrn.train_policy(
        [0.0, -1.0], phi, q, slots=2 * ratio, batch=2, steps=4 * ratio, learning_rate=0.5,
        mode="sync_minibatch", seed=3,
    )  # fmt: skip
    rounds = np.asarray(run.trace.publish_times)
    assert rounds.size == 4
    np.testing.assert_array_equal(run.publish_times, np.repeat(rounds, ratio))
    assert run.staleness is not None
    assert run.samples is not None
    # minibatch i of a round trains rollouts of the round's first version: staleness i
    np.testing.assert_array_equal(np.unique(run.staleness), np.arange(ratio, dtype=float))
    np.testing.assert_array_equal(run.samples, np.repeat(2 * ratio * np.arange(1, 5), ratio))
    assert run.estimator == "sequence_is + leave-one-out baseline, sync_minibatch: unbiased"


def test_sync_minibatch_with_one_batch_per_round_is_plain_sync() -> None:
    phi = lrn.length_features(6, degree=1)
    q = np.linspace(0.1, 0.9, 6)
    args: dict[str, Any] = {"slots": 3, "batch": 3, "steps": 6, "learning_rate": 0.5, "seed": 2}
    a = lrn.train_policy([0.0, -1.0], phi, q, mode="sync_minibatch", **args)
    b = lrn.train_policy([0.0, -1.0], phi, q, mode="sync", **args)
    assert a.thetas.tobytes() == b.thetas.tobytes()


def test_sync_minibatch_needs_the_batch_to_divide_slots_and_steps() -> None:
    phi = lrn.length_features(4, degree=1)
    with pytest.raises(ValueError, match="batch must divide slots=6"):
        lrn.train_policy(
            [0.0, 0.0], phi, np.full(4, 0.5), slots=6, batch=4, steps=4, learning_rate=0.1,
            mode="sync_minibatch",
        )  # fmt: skip
