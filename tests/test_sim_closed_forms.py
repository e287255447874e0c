"""The simulator against the closed forms of conventions §dispatch, with tolerances from a stated false-failure rate.

Each test runs independent replications (seeds) and compares the replication mean with the closed
form by a t-test: with ``R`` replications the tolerance is ``t_{1-α/2, R-1} · se`` with ``α = 1e-3``
(one false failure in a thousand runs of the test, were the seeds random; the CI profile fixes them,
so the test is deterministic). Where the closed form is an idealisation (steady state, fluid limit)
the tolerance adds the stated size of what it neglects.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats

from refimpl.sim import STATUS, SimConfig, closed_form, simulate

ALPHA = 1e-3  # false-failure rate of each test


def t_tolerance(samples: np.ndarray) -> float:
    """Half-width of the two-sided (1 - ALPHA) t interval for the mean of iid ``samples``."""
    r = samples.size
    se = float(samples.std(ddof=1)) / float(np.sqrt(r))
    return float(scipy.stats.t.ppf(1 - ALPHA / 2, r - 1)) * se


@pytest.mark.parametrize(("slots", "batch"), [(16, 32), (64, 16), (8, 64)])
def test_mean_staleness_of_continuous_dispatch_is_slots_over_batch(slots: int, batch: int) -> None:
    """conventions §async-dispatch: E[s] = N/B in steady state (lognormal(6, 1) lengths, unit decode time).

    Each replication drops the first 10% of its samples (cold start). Edge effect of a finite window:
    the N rollouts in flight at the end are missing from it; in flight, lengths are size-biased, so
    their staleness averages about E[L²]/E[L]² · N/B = e^{σ²} N/B (+1 for the step in progress).
    Allowing for both edges, the window mean is off by about 2·N·(e·N/B + 1)/n, which is added to
    the t tolerance."""
    means, edge = [], []
    for seed in range(6):
        trace = simulate(SimConfig(slots=slots, batch=batch, rollouts=60_000, seed=seed))
        s = trace.staleness[trace.training_order()].astype(np.float64)
        s = s[s.size // 10 :]
        means.append(s.mean())
        edge.append(2 * slots * (math.e * slots / batch + 1) / s.size)
    m = np.array(means)
    tol = t_tolerance(m) + max(edge)
    assert abs(m.mean() - slots / batch) <= tol, (m.mean(), slots / batch, tol)
    # the test can fail: N/B off by one slot is outside the tolerance
    assert abs(m.mean() - (slots + 1) / batch) > tol


# ---------------------------------------------------------------------------------------------
# against refimpl.dispatch (selected_pmf, expected_max, fluid_steady_state) via closed_form
# ---------------------------------------------------------------------------------------------


def test_first_k_trained_lengths_follow_selected_pmf() -> None:
    """conventions §first-k-of-n: with dropped leftovers the trained law is q = (n/k) p π (refimpl.selected_pmf).

    Steps are independent (every step launches afresh), so the share of each length in a step's
    batch is iid across steps with mean q(ℓ). Each of the M lengths gets a t test at ALPHA / M
    (Bonferroni: the whole test fails falsely with probability <= ALPHA)."""
    import refimpl

    pmf = np.full(5, 0.2)  # every q(ℓ) >= 0.006, so each length is seen ~100 times or more
    n, k, steps = 6, 3, 6_000
    cfg = SimConfig(slots=n, batch=k, steps=steps, mode="first_k", lengths=pmf, seed=9)
    trace = simulate(cfg)
    trained = trace.status == STATUS["trained"]
    step = trace.step[trained]
    length = trace.length[trained].astype(np.int64)
    share = np.zeros((steps, pmf.size))
    np.add.at(share, (step, length - 1), 1.0 / k)
    q = refimpl.selected_pmf(pmf, n=n, k=k)
    crit = scipy.stats.t.ppf(1 - ALPHA / (2 * pmf.size), steps - 1)
    se = share.std(axis=0, ddof=1) / np.sqrt(steps)
    assert np.all(np.abs(share.mean(axis=0) - q) <= crit * se)
    # the test can fail: the launched law p is rejected
    assert np.any(np.abs(share.mean(axis=0) - pmf) > crit * se)


def test_sync_step_time_is_expected_max() -> None:
    """conventions §sync-dispatch: the sync step time is E[max of B lengths] (refimpl.expected_max); step times
    are iid across steps; t test at ALPHA."""
    law = scipy.stats.lognorm(s=0.5, scale=100.0)
    cfg = SimConfig(slots=8, batch=8, steps=3_000, mode="sync", lengths=law, seed=3)
    trace = simulate(cfg)
    step_times = np.diff(trace.publish_times, prepend=0.0)
    want = closed_form(cfg)
    assert want.formula == "D0 expected max"
    tol = t_tolerance(step_times)
    assert abs(step_times.mean() - want.step_time) <= tol
    # the test can fail: the max of 7 is rejected
    import refimpl

    assert abs(step_times.mean() - refimpl.expected_max(law, n=7)) > tol


def test_async_with_drop_follows_the_fluid_steady_state() -> None:
    """conventions §async-dispatch: dropping s > η keeps ℓ w.p. clip(η + 1 − ℓ/Δ, 0, 1); lognormal(6, 1), N = 128,
    B = 256, η = 0: the trained mean is about 58% of E[L] and the fluid model predicts it within
    about 1%. Tolerance: t interval over 4 replications (ALPHA) plus a 2% model allowance (the fluid
    limit ignores the discreteness of slots and publications)."""
    cfg0 = SimConfig(slots=128, batch=256, rollouts=40_000, eta=0, over_bound="drop")
    want = closed_form(cfg0)
    assert want.formula == "D2 fluid"
    means, kept = [], []
    for seed in range(4):
        cfg = SimConfig(slots=128, batch=256, rollouts=40_000, eta=0, over_bound="drop", seed=seed)
        trace = simulate(cfg)
        s = trace.summary()
        order = trace.training_order()
        tail = order[order.size // 10 :]  # after the cold start
        means.append(float(trace.length[tail].mean()))
        kept.append(s.trained / (s.trained + s.dropped))
    m = np.array(means)
    tol = t_tolerance(m) + 0.02 * want.trained_length_mean
    assert abs(m.mean() - want.trained_length_mean) <= tol
    assert abs(np.mean(kept) - want.kept_fraction) <= 0.02
    # the test can fail: the prediction for eta = 1 is rejected
    cfg1 = SimConfig(slots=128, batch=256, rollouts=40_000, eta=1, over_bound="drop")
    assert abs(m.mean() - closed_form(cfg1).trained_length_mean) > tol


def test_closed_form_refuses_what_has_no_closed_form() -> None:
    with pytest.raises(ValueError, match="admission control and partial rollouts"):
        closed_form(SimConfig(slots=4, batch=4, rollouts=64, mode="admission", eta=1))
    with pytest.raises(ValueError, match="be a law"):
        closed_form(SimConfig(slots=2, batch=2, rollouts=8, lengths=np.ones((2, 9))))
