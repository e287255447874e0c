"""Section 4: debugging over-masking — the off-by-one and the too-tight IS mask, and their diagnostics.

Closed forms: :func:`refimpl.fluid_keep_probability` (what a correct mask keeps, by length) and
:func:`refimpl.fluid_steady_state`. Library tools: :func:`refimpl.sample_staleness`,
:func:`refimpl.staleness_mask`, :func:`refimpl.masking_diagnostics`,
:func:`refimpl.over_masking_scenarios`. Simulation: :func:`refimpl.sim.simulate`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

import refimpl
import refimpl.sim as rsim
from refimpl.lab._common import (
    TOL_RULE,
    Z_TOL,
    binned_rate,
    block_mean_and_se,
    log_bins,
    lognormal,
    seed,
)
from refimpl.lab._plot import COLORS, closed, new_figure, sim
from refimpl.lab.config import LabConfig
from refimpl.lab.report import Section, fmt

__all__ = ["build"]

STREAM = 4
FLUID_RULE = "fluid model: 0.02 absolute (its approximation error) + " + TOL_RULE


def _diag_row(name: str, d: Any) -> tuple[Any, ...]:
    return (
        name,
        float(d.kept_fraction),
        float(d.on_policy_dropped_fraction),
        int(d.on_policy_count),
        float(d.effective_sample_size),
        float(d.keep_rate_by_length[0]) if d.keep_rate_by_length.size else float("nan"),
        float(d.keep_rate_by_length[-1]) if d.keep_rate_by_length.size else float("nan"),
        "**ALARM**" if d.on_policy_dropped_fraction > 0 else "ok",
    )


DIAG_COLUMNS = (
    "weights",
    "kept fraction",
    "on-policy dropped",
    "on-policy samples",
    "ESS",
    "keep rate, shortest quartile",
    "keep rate, longest quartile",
    "diagnosis",
)


class _Run(NamedTuple):
    """An asynchronous run's trained samples after warm-up: their lengths, correct and off-by-one
    staleness, steps, and the run's fluid step time."""

    lengths: Any
    s_ref: Any
    s_bug: Any
    steps_col: Any
    warm: int
    batch: int
    delta: float


def _off_by_one_run(section: Section, config: LabConfig, progress: Callable[[str], None]) -> _Run:
    """Simulate one asynchronous run and count each sample's staleness right and off by one."""
    dist = lognormal(median=float(np.exp(6.0)), sigma=1.0)
    n, b = config.async_slots, config.async_batch
    steps = config.async_steps
    warm = steps // 5
    progress(f"off-by-one: async run, N = {n}, B = {b}, {steps} steps")
    trace = rsim.simulate(
        rsim.SimConfig(slots=n, batch=b, steps=steps, lengths=dist, seed=seed(config, STREAM, 0))
    )
    order = trace.training_order()
    order = order[np.asarray(trace.step)[order] >= warm]
    lengths = np.asarray(trace.length, dtype=np.float64)[order]
    steps_col = np.asarray(trace.step, dtype=np.int64)[order]
    versions = [trace.token_versions(int(r))[1].astype(np.float64) for r in order]
    s_ref = np.empty(order.size)
    s_bug = np.empty(order.size)
    for j in np.unique(steps_col):
        rows = np.flatnonzero(steps_col == j)
        batch_versions = [versions[r] for r in rows]
        s_ref[rows] = refimpl.sample_staleness(int(j), batch_versions).sample
        s_bug[rows] = refimpl.sample_staleness(int(j) + 1, batch_versions).sample
    delta = float(refimpl.fluid_steady_state(dist, slots=n, batch=b).step_time)
    section.metric(
        "setting", {"slots": n, "batch": b, "samples": int(order.size), "step_time": delta}
    )

    return _Run(lengths, s_ref, s_bug, steps_col, warm, b, delta)


def _off_by_one_panel(section: Section, ax1: Any, run: _Run) -> list[tuple[Any, ...]]:
    """Correct and off-by-one masks at η = 0 and 1 against the fluid keep(ℓ); their rows."""
    lengths, s_ref, s_bug, steps_col, warm, b, delta = run
    rows_tab = []
    edges = log_bins(lengths, 20)
    xx = np.geomspace(edges[0], edges[-1], 300)
    for i, eta in enumerate((0, 1)):
        w_ok = refimpl.staleness_mask(s_ref, eta=eta)
        w_bad = refimpl.staleness_mask(s_bug, eta=eta)
        d_ok = refimpl.masking_diagnostics(s_ref, w_ok, lengths=lengths)
        d_bad = refimpl.masking_diagnostics(s_ref, w_bad, lengths=lengths)
        rows_tab.append(_diag_row(f"η = {eta}, correct", d_ok))
        rows_tab.append(_diag_row(f"η = {eta}, off-by-one", d_bad))
        color = COLORS[2 * i]
        closed(
            ax1,
            xx,
            refimpl.fluid_keep_probability(xx, step_time=delta, eta=eta),
            color=color,
            label=f"η = {eta}: fluid keep(ℓ), correct",
        )
        centre, rate, _ = binned_rate(lengths, w_ok > 0, edges)
        sim(ax1, centre, rate, color=color, label=f"η = {eta}: correct mask")
        bug_color = COLORS[2 * i + 1]
        if eta >= 1:
            closed(
                ax1,
                xx,
                refimpl.fluid_keep_probability(xx, step_time=delta, eta=eta - 1),
                color=bug_color,
                linestyle="--",
                label=f"η = {eta}: fluid keep(ℓ) at η − 1",
            )
        centre, rate, _ = binned_rate(lengths, w_bad > 0, edges)
        sim(ax1, centre, rate, color=bug_color, marker="x", label=f"η = {eta}: off-by-one mask")
        predicted = float(
            np.mean(refimpl.fluid_keep_probability(lengths, step_time=delta, eta=eta))
        )
        per_step = np.bincount(steps_col - warm, weights=(w_ok > 0).astype(np.float64)) / b
        _, se = block_mean_and_se(per_step)
        section.check(
            f"kept-eta{eta}",
            f"kept fraction of the correct mask, η = {eta}",
            closed_form=predicted,
            simulation=float(d_ok.kept_fraction),
            tolerance=0.02 + Z_TOL * se,
            rule=FLUID_RULE,
        )
        predicted_bug = (
            float(np.mean(refimpl.fluid_keep_probability(lengths, step_time=delta, eta=eta - 1)))
            if eta >= 1
            else 0.0
        )
        section.check(
            f"kept-off-by-one-eta{eta}",
            f"kept fraction of the off-by-one mask, η = {eta} (= correct mask at η − 1)",
            closed_form=predicted_bug,
            simulation=float(d_bad.kept_fraction),
            tolerance=0.02 + Z_TOL * se,
            rule=FLUID_RULE,
        )
        section.metric(
            f"on_policy_dropped_eta{eta}",
            {
                "correct": d_ok.on_policy_dropped_fraction,
                "off_by_one": d_bad.on_policy_dropped_fraction,
            },
        )
    d0 = section.metrics["on_policy_dropped_eta0"]
    section.headline(
        f"an off-by-one in version counting drops {fmt(100 * d0['off_by_one'])}% of on-policy "
        f"samples at η = 0 (a correct mask: {fmt(100 * d0['correct'])}%); "
        "`masking_diagnostics` flags it."
    )
    ax1.set_xscale("log")
    ax1.set_title("Off-by-one: the mask behaves like η − 1")
    ax1.set_xlabel("rollout length ℓ (tokens, log scale)")
    ax1.set_ylabel("fraction kept")
    ax1.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)

    return rows_tab


def _tight_mask_panel(section: Section, config: LabConfig, ax2: Any) -> list[tuple[Any, ...]]:
    """The library's two over-masking scenarios; the too-tight IS band's keep rate by length."""
    rows_tab = []
    off_by_one, tight = refimpl.over_masking_scenarios(config.rng(STREAM * 100 + 1))
    for scen in (off_by_one, tight):
        rows_tab.append(_diag_row(f"{scen.name}: correct (library scenario)", scen.correct))
        rows_tab.append(_diag_row(f"{scen.name}: buggy (library scenario)", scen.buggy))
    section.metric(
        "tight_is_mask_on_policy_dropped",
        {
            "correct": tight.correct.on_policy_dropped_fraction,
            "buggy": tight.buggy.on_policy_dropped_fraction,
        },
    )
    nbins = tight.correct.keep_rate_by_length.size
    pos = np.arange(nbins)
    ax2.bar(
        pos - 0.2,
        tight.correct.keep_rate_by_length,
        width=0.4,
        color=COLORS[0],
        label="IcePop band [0.5, 2] (correct)",
    )
    ax2.bar(
        pos + 0.2,
        tight.buggy.keep_rate_by_length,
        width=0.4,
        color=COLORS[1],
        label="band tighter than the mismatch (bug)",
    )
    e = tight.correct.length_edges
    ax2.set_xticks(pos, [f"{fmt(e[i], 2)}–{fmt(e[i + 1], 2)}" for i in range(nbins)])
    ax2.set_ylim(0, 1.3)
    ax2.set_title("Too-tight IS mask: drops on-policy samples")
    ax2.set_xlabel("length quartile (tokens); every sample is on-policy")
    ax2.set_ylabel("fraction kept")
    ax2.legend(loc="upper center", ncol=1)
    return rows_tab


def build(section: Section, config: LabConfig, progress: Callable[[str], None]) -> None:
    """Fill the debugging section."""
    section.text(
        "Two bugs that silently drop too much, on a batch where the right answer is known. "
        "**Off-by-one:** the trainer counts staleness against the version it is about to publish "
        "(`j + 1`) instead of the one it holds (`j`), so every sample looks one step staler and "
        "`η = 0` drops every on-policy sample. **Too-tight IS mask:** an importance-sampling band "
        "narrower than the train/inference log-probability mismatch drops on-policy sequences, the "
        "long ones first. The diagnostic that catches both is `masking_diagnostics(...)."
        "on_policy_dropped_fraction`: a correct staleness mask never drops an on-policy sample, so "
        "any positive value is an alarm."
    )
    run = _off_by_one_run(section, config, progress)
    fig, (ax1, ax2) = new_figure(2, height=5.0)
    rows_tab = _off_by_one_panel(section, ax1, run)
    progress("too-tight IS mask: over_masking_scenarios")
    rows_tab += _tight_mask_panel(section, config, ax2)
    section.figure(
        fig,
        "over-masking",
        "Left: an off-by-one in version counting keeps exactly what a correct mask one step tighter "
        "keeps — look at the purple crosses on the blue η = 0 curve (dashed: the fluid "
        "prediction at η − 1; at η = 0 the buggy mask keeps nothing, red crosses at 0). Right: "
        "an importance-sampling band tighter than the numerical train/inference mismatch drops "
        "on-policy sequences, the longer the more (red bars fall with the length quartile) — "
        "a correct mask keeps every on-policy sample (blue bars at 1).",
    )
    section.table(
        "diagnostics",
        "masking_diagnostics of correct and buggy weights",
        DIAG_COLUMNS,
        rows_tab,
        note="kept fraction: share of all samples with a non-zero weight; on-policy dropped: "
        "share of the on-policy samples (s = 0) given weight 0 — any positive value is an "
        "ALARM; ESS: effective sample size (Σw)²/Σw² over all samples (stale ones included, so "
        "it can exceed the on-policy count); keep rates by length quartile: the shortest and "
        "longest quarter of the samples.",
    )
    section.metric("tightest_eta", 0)
    section.takeaway(
        "An off-by-one in version counting drops {on_policy_dropped_eta0.off_by_one:%} of the "
        "on-policy samples at η = {tightest_eta} (a correct mask: "
        "{on_policy_dropped_eta0.correct:%}), and an importance-sampling band tighter than the "
        "train/inference mismatch drops {tight_is_mask_on_policy_dropped.buggy:%}.",
        "`masking_diagnostics` flags both from the weights alone: any on-policy sample with "
        "weight zero is an alarm, whatever the staleness bound.",
    )
    section.text(
        "Read the table from the *on-policy dropped* column: it is 0 for every correct weighting and "
        "positive for every bug. The keep rate by length quartile tells the two bugs apart from a "
        "legitimate mask: a staleness mask may drop long rollouts (they are staler), but it never "
        "drops an on-policy one."
    )
