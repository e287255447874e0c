"""Section 1: the length bias of dispatch.

Closed forms: :func:`refimpl.selected_pmf` (first-k-of-n trained law, discrete, ties uniform),
:func:`refimpl.selected_mean` (continuous), :func:`refimpl.fluid_steady_state` (continuous dispatch
with a staleness drop). Simulations: :func:`refimpl.sim.simulate` in ``first_k`` and ``async`` modes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import refimpl
import refimpl.sim as rsim
from refimpl.lab._common import (
    TOL_RULE,
    Z_TOL,
    discretized_lognormal,
    lognormal,
    mean_and_se,
    seed,
    support,
    trained,
)
from refimpl.lab._plot import (
    COLORS,
    closed,
    legend_below,
    new_figure,
    series_handles,
    sim,
    sim_with_error,
)
from refimpl.lab.config import LabConfig
from refimpl.lab.report import Section, fmt, nonnegative

__all__ = ["build"]

STREAM = 1
MEDIAN = 100.0
MAX_LENGTH = 1024
N_LAUNCH = 8
KS = (1, 2, 4, 8)
TAILS = {"light tail (σ = 0.5)": 0.5, "heavy tail (σ = 1.25)": 1.25}


def build(section: Section, config: LabConfig, progress: Callable[[str], None]) -> None:
    """Fill the length-bias section."""
    section.text(
        "**First k of n.** Launch `n` rollouts at once and train on the first `k` to finish: a "
        "rollout of length `ℓ` is kept with probability `π(ℓ)`, so the trained law is "
        "`q(ℓ) = (n/k)·p(ℓ)·π(ℓ)` — short rollouts are over-represented. Lengths here are "
        f"discretised lognormals with median {fmt(MEDIAN)} tokens on `1..{MAX_LENGTH}`, `n = {N_LAUNCH}`; "
        "the lines are `selected_pmf`, the markers the simulator (`mode='first_k'`)."
    )
    _first_k(section, config, progress)
    _transient(section, config, progress)
    _magnitude(section, config, progress)
    section.takeaway(
        "Training on the rollouts that finish first over-represents short ones: keeping the "
        "first of {setting.n} trains a mean length of {heavy_tail_first_1_ratio} × E[L] on a "
        "heavy-tailed law (simulated: {heavy_tail_first_1_simulated_ratio}), and continuous "
        "dispatch from a cold start trains short batches before it settles at "
        "{steady_state_ratio} × E[L].",
        "Whenever fewer rollouts are trained than launched, the trained length law is not the "
        "launched one; `length_bias` gives the shift for your law and settings, and "
        "inverse-probability weights remove it (next section).",
    )


def _first_k_one(
    section: Section,
    config: LabConfig,
    ax: Any,
    law: tuple[int, str, float],
    kth: tuple[int, int],
) -> tuple[Any, ...]:
    """One law and one ``k``: the closed form against the simulator, drawn and checked; its row."""
    t, tail_name, sigma = law
    i, k = kth
    steps = config.first_k_batches
    pmf = discretized_lognormal(median=MEDIAN, sigma=sigma, max_length=MAX_LENGTH)
    q = np.asarray(refimpl.selected_pmf(pmf, n=N_LAUNCH, k=k), dtype=np.float64)
    bias = refimpl.length_bias(pmf, n=N_LAUNCH, k=k)
    mean_p, mean_q = float(bias.true_mean), float(bias.selected_mean)
    trace = rsim.simulate(
        rsim.SimConfig(
            slots=N_LAUNCH,
            batch=k,
            mode="first_k",
            launch=N_LAUNCH,
            lengths=pmf,
            steps=steps,
            seed=seed(config, STREAM, 10 * t + i),
        )
    )
    tr = trained(trace)
    sim_mean, se = mean_and_se(tr.length.reshape(steps, k).mean(axis=1))
    closed(ax, support(pmf), np.cumsum(q), color=COLORS[i])
    grid = np.unique(np.geomspace(1, MAX_LENGTH, 28).round())
    emp = np.searchsorted(np.sort(tr.length), grid, side="right") / tr.length.size
    sim(ax, grid, emp, color=COLORS[i])
    section.check(
        f"first-k-mean-s{sigma:g}-k{k}",
        f"E_q[L], {tail_name}, k = {k} of n = {N_LAUNCH} (tokens)",
        closed_form=mean_q,
        simulation=sim_mean,
        tolerance=Z_TOL * se,
        rule=TOL_RULE,
    )
    return (
        tail_name,
        N_LAUNCH,
        k,
        mean_p,
        mean_q,
        sim_mean,
        float(bias.ratio),
        nonnegative(float(bias.total_variation), name="TV(q, p)"),
        nonnegative(float(bias.kl_divergence), name="KL(q‖p)"),
    )


def _first_k(section: Section, config: LabConfig, progress: Callable[[str], None]) -> None:
    """First k of n on a light and a heavy tail: the trained law's CDF, its table, its headline."""
    steps = config.first_k_batches
    section.metric(
        "setting",
        {
            "median": MEDIAN,
            "max_length": MAX_LENGTH,
            "n": N_LAUNCH,
            "k": list(KS),
            "sigmas": list(TAILS.values()),
            "launches": steps,
        },
    )
    rows = []
    fig, axes = new_figure(2, height=4.4)
    for t, ((tail_name, sigma), ax) in enumerate(zip(TAILS.items(), axes, strict=True)):
        series: list[tuple[str, str]] = []
        for i, k in enumerate(KS):
            progress(f"first {k} of {N_LAUNCH}, {tail_name}: {steps} launches")
            rows.append(_first_k_one(section, config, ax, (t, tail_name, sigma), (i, k)))
            series.append(("p (k = n: no bias)" if k == N_LAUNCH else f"k = {k}", COLORS[i]))
        ax.set_xscale("log")
        ax.set_title(f"Trained length law, first k of {N_LAUNCH}, {tail_name}")
        ax.set_xlabel("rollout length ℓ (tokens, log scale)")
        ax.set_ylabel("P(trained length ≤ ℓ)")
    legend_below(fig, series_handles(series, closed_label="selected_pmf"), ncol=6)
    section.figure(
        fig,
        "first-k-cdf",
        "Cumulative trained length law of first-k-of-n dispatch: lines are the closed form "
        "`selected_pmf`, markers the simulator. Smaller k pushes the law to the left (shorter).",
    )
    section.table(
        "first-k-table",
        "First k of n: trained mean length and total variation distance from the launched law",
        (
            "law",
            "n",
            "k",
            "E_p[L]",
            "E_q[L] closed form",
            "E_q[L] simulated",
            "mean ratio",
            "TV(q, p)",
            "KL(q‖p) (nats)",
        ),
        rows,
    )
    heavy_k1 = next(r for r in rows if r[0].startswith("heavy") and r[2] == 1)
    sim_ratio = section.metric("heavy_tail_first_1_simulated_ratio", heavy_k1[5] / heavy_k1[3])
    section.headline(
        f"training on the first 1 of {N_LAUNCH} rollouts gives a mean length of "
        f"{fmt(heavy_k1[6])} × E[L] on the heavy tail (simulated {fmt(sim_ratio)})."
    )
    section.metric("heavy_tail_first_1_ratio", heavy_k1[6])


def _transient(section: Section, config: LabConfig, progress: Callable[[str], None]) -> None:
    """Continuous async dispatch from a cold start: early batches are short-biased."""
    n, b = config.async_slots, config.async_batch
    reps = 8 if config.quick else 32
    steps = 40
    warm = 20
    dist = lognormal(median=float(np.exp(6.0)), sigma=1.0)
    mean_p = float(dist.mean())
    progress(f"async cold start: {reps} runs of {steps} steps, N = {n}, B = {b}")
    per_step = np.empty((reps, steps))
    for r in range(reps):
        trace = rsim.simulate(
            rsim.SimConfig(slots=n, batch=b, steps=steps, seed=seed(config, STREAM, 100 + r))
        )
        tr = trained(trace)
        per_step[r] = tr.length.reshape(steps, b).mean(axis=1)
    ratio = per_step / mean_p
    mean_ratio = ratio.mean(axis=0)
    se_ratio = ratio.std(axis=0, ddof=1) / np.sqrt(reps)
    steady, steady_se = mean_and_se(per_step[:, warm:].mean(axis=1))
    fig, (ax,) = new_figure(1, width=7.0, height=4.0)
    j = np.arange(steps)
    closed(ax, j, np.ones(steps), label="steady state: trained law = p (renewal–reward)")
    sim_with_error(
        ax,
        j,
        mean_ratio,
        se_ratio,
        color=COLORS[0],
        label=f"simulation, mean of {reps} runs (±2 SE)",
    )
    ax.axvspan(warm - 0.5, steps - 0.5, color="0.9", zorder=0, label="steady-state window")
    ax.set_title(f"Async dispatch from a cold start (N = {n} slots, B = {b}, lognormal(6, 1))")
    ax.set_xlabel("trainer step j")
    ax.set_ylabel("mean trained length / E[L]")
    ax.legend(loc="lower right")
    section.figure(
        fig,
        "async-transient",
        "The first batches after a cold start are short-biased (the short rollouts of the first "
        "wave finish first); once the slots desynchronise the trained law is the launched law.",
    )
    section.metric(
        "transient",
        {
            "slots": n,
            "batch": b,
            "runs": reps,
            "E[L]": mean_p,
            "mean_ratio_by_step": mean_ratio.tolist(),
            "first_batch_ratio": float(mean_ratio[0]),
        },
    )
    steady_ratio = section.metric("steady_state_ratio", steady / mean_p)
    section.text(
        f"With nothing dropped, continuous dispatch trains the launched law in steady state. The "
        f"first batch's mean length is {fmt(float(mean_ratio[0]))} × E[L]; from step {warm} on the "
        f"mean is {fmt(steady_ratio)} × E[L]."
    )
    section.headline(
        f"continuous dispatch from a cold start: the first batch averages {fmt(float(mean_ratio[0]))}"
        f" × E[L]; from step {warm} on, {fmt(steady_ratio)} × E[L] (closed form: 1)."
    )
    section.check(
        "async-steady-mean",
        f"steady-state trained mean length, steps ≥ {warm} (tokens)",
        closed_form=mean_p,
        simulation=steady,
        tolerance=Z_TOL * steady_se,
        rule=TOL_RULE,
    )


def _magnitude(section: Section, config: LabConfig, progress: Callable[[str], None]) -> None:
    """Bias magnitude against tail heaviness and against over-provisioning N/B (or n/k)."""
    _bias_vs_tail(section, config, progress)
    _bias_vs_provisioning(section, config, progress)


def _bias_vs_tail(section: Section, config: LabConfig, progress: Callable[[str], None]) -> None:
    """First 4 and 2 of 8 on lognormals of growing σ: the mean ratio follows the tail."""
    steps = config.first_k_batches // 2
    sigmas = (0.25, 0.5, 1.0, 1.5) if config.quick else (0.25, 0.5, 0.75, 1.0, 1.25, 1.5)
    fig, (ax1,) = new_figure(1, width=6.0, height=4.0)
    rows = []
    for i, (n, k) in enumerate(((8, 4), (8, 2))):
        cf, sm, err = [], [], []
        for s_i, sigma in enumerate(sigmas):
            dist = lognormal(median=MEDIAN, sigma=sigma)
            lb = refimpl.length_bias(dist, n=n, k=k)
            c = float(lb.ratio)
            cf.append(c)
            progress(f"bias vs tail: first {k} of {n}, σ = {sigma}")
            trace = rsim.simulate(
                rsim.SimConfig(
                    slots=n,
                    batch=k,
                    mode="first_k",
                    launch=n,
                    lengths=dist,
                    steps=steps,
                    seed=seed(config, STREAM, 200 + 10 * i + s_i),
                )
            )
            tr = trained(trace)
            m, se = mean_and_se(tr.length.reshape(steps, k).mean(axis=1) / float(dist.mean()))
            sm.append(m)
            err.append(se)
            section.check(
                f"tail-ratio-n{n}-k{k}-s{sigma:g}",
                f"E_q[L]/E_p[L], first {k} of {n}, lognormal σ = {sigma:g}",
                closed_form=c,
                simulation=m,
                tolerance=Z_TOL * se,
                rule=TOL_RULE,
            )
            tv = nonnegative(float(lb.total_variation), name="TV(q, p)")
            rows.append((f"first {k} of {n}", sigma, c, m, se, tv))
        if config.quick:  # the line through the marker abscissae: no extra quadratures
            s_line, line = np.asarray(sigmas), cf
        else:
            s_line = np.linspace(sigmas[0], sigmas[-1], 16)
            line = [
                float(refimpl.length_bias(lognormal(median=MEDIAN, sigma=s), n=n, k=k).ratio)
                for s in s_line
            ]
        closed(ax1, s_line, line, color=COLORS[i], label=f"k/n = {k}/{n}: closed form")
        sim_with_error(
            ax1, sigmas, sm, err, color=COLORS[i], label=f"k/n = {k}/{n}: simulation (±2 SE)"
        )
    ax1.set_title("Bias grows with the tail (first k of n)")
    ax1.set_xlabel("tail heaviness: lognormal σ")
    ax1.set_ylabel("trained mean / launched mean")
    ax1.legend()
    section.figure(
        fig,
        "bias-vs-tail",
        "The trained mean length relative to the launched mean against the tail heaviness σ of a "
        "lognormal law, for first k of n dispatch (lines: the closed form `length_bias`; markers: "
        "the simulator). The heavier the tail, the shorter what is trained; training on fewer of "
        "the launched rollouts (k/n = 2/8) makes it worse.",
    )
    section.table(
        "tail-table",
        "Mean ratio E_q[L]/E_p[L] against the tail (continuous lengths), and the total variation",
        (
            "dispatch",
            "σ",
            "mean ratio (closed form)",
            "mean ratio (simulation)",
            "simulation SE",
            "TV(q, p)",
        ),
        rows,
    )
    section.text(
        "The mean ratio is what the tail drives. The total variation distance between the trained "
        "and the launched law does not move with σ at all: for a continuous law it depends on "
        "`(n, k)` only (`length_bias`; the rank distortion is the same for every law)."
    )


def _first_k_nk(
    section: Section, config: LabConfig, dist: Any, k: int, ratios: tuple[float, ...]
) -> tuple[list[float], list[float], list[float], list[float]]:
    """First ``k`` of ``k·r`` for each ratio ``r``: closed form, simulated mean and SE, TV."""
    steps = config.first_k_batches // 2
    cf, sm, err, tvs = [], [], [], []
    for r_i, r in enumerate(ratios):
        n = round(k * r)
        lb_nk = refimpl.length_bias(dist, n=n, k=k)
        cf.append(float(lb_nk.ratio))
        tvs.append(nonnegative(float(lb_nk.total_variation), name="TV(q, p)"))
        trace = rsim.simulate(
            rsim.SimConfig(
                slots=n,
                batch=k,
                mode="first_k",
                launch=n,
                lengths=dist,
                steps=steps,
                seed=seed(config, STREAM, 300 + r_i),
            )
        )
        m, se = mean_and_se(
            trained(trace).length.reshape(steps, k).mean(axis=1) / float(dist.mean())
        )
        sm.append(m)
        err.append(se)
        section.check(
            f"nk-ratio-{r}",
            f"E_q[L]/E_p[L], first {k} of {n} (n/k = {r})",
            closed_form=cf[-1],
            simulation=m,
            tolerance=Z_TOL * se,
            rule=TOL_RULE,
        )
    return cf, sm, err, tvs


def _async_nb(
    config: LabConfig, dist: Any, nb: tuple[float, ...]
) -> tuple[list[float], list[float], list[float]]:
    """Continuous dispatch dropping at η = 0 for each N/B: the fluid model and the simulated mean."""
    slots = config.async_slots
    fl, am, aerr = [], [], []
    for b_i, x in enumerate(nb):
        batch = round(slots / x)
        st = refimpl.fluid_steady_state(dist, slots=slots, batch=batch, eta=0)
        fl.append(float(st.trained_mean_length) / float(dist.mean()))
        a_steps = max(config.async_steps // 2, 60)
        trace = rsim.simulate(
            rsim.SimConfig(
                slots=slots,
                batch=batch,
                steps=a_steps,
                lengths=dist,
                eta=0,
                over_bound="drop",
                seed=seed(config, STREAM, 400 + b_i),
            )
        )
        tr = trained(trace)
        warm = a_steps // 4
        keep = tr.step >= warm
        per_step = np.bincount(tr.step[keep] - warm, weights=tr.length[keep]) / batch
        m, se = mean_and_se(per_step / float(dist.mean()))
        am.append(m)
        aerr.append(se)
    return fl, am, aerr


def _bias_vs_provisioning(
    section: Section, config: LabConfig, progress: Callable[[str], None]
) -> None:
    """First k of n with n/k = N/B, and async with an η = 0 drop: both fall with provisioning."""
    progress("bias vs N/B: first-k-of-n and async with η = 0")
    dist = lognormal(median=MEDIAN, sigma=1.0)
    ratios = (1, 1.25, 1.5, 2, 4, 8)
    k = 4
    cf, sm, err, tvs = _first_k_nk(section, config, dist, k, ratios)
    nb = (0.25, 0.5, 1.0, 2.0)
    fl, am, aerr = _async_nb(config, dist, nb)
    slots = config.async_slots
    fig, (ax2, ax3) = new_figure(2)
    closed(ax2, ratios, cf, color=COLORS[0], label=f"first {k} of n: closed form", marker="")
    sim_with_error(
        ax2, ratios, sm, err, color=COLORS[0], label=f"first {k} of n: simulation (±2 SE)"
    )
    ax2.set_xscale("log", base=2)
    ax2.set_title(f"First {k} of n: launching more per trained sample")
    ax2.set_xlabel("n/k: rollouts launched per trained sample (log scale)")
    ax2.set_ylabel("trained mean / launched mean")
    ax2.legend()
    closed(ax3, nb, fl, color=COLORS[1], linestyle="--", label="fluid model (approximation)")
    sim_with_error(ax3, nb, am, aerr, color=COLORS[1], label="simulation (±2 SE)", fmt="s")
    ax3.set_xscale("log", base=2)
    ax3.set_title(f"Async, drop over η = 0: more slots per batch ({slots} slots)")
    ax3.set_xlabel("N/B: generation slots per trained sample (log scale)")
    ax3.set_ylabel("trained mean / launched mean")
    ax3.legend()
    section.figure(
        fig,
        "bias-vs-provisioning",
        "Over-provisioning biases the trained lengths in both dispatch policies (lognormal σ = 1): "
        "left, first 4 of n against n/k (solid line: the closed form `length_bias`); right, "
        "continuous dispatch that drops samples staler than η = 0, against N/B (dashed line: the "
        "fluid model `fluid_steady_state`, an approximation). Markers are the simulator. Both "
        "fall as more rollouts compete for each trained sample, but the two x axes are different "
        "quantities, so they are drawn on separate panels.",
    )
    section.table(
        "nb-table",
        "Mean ratio E_q[L]/E_p[L] against over-provisioning (lognormal σ = 1)",
        (
            "dispatch",
            "n/k",
            "N/B",
            "mean ratio (closed form)",
            "mean ratio (simulation)",
            "simulation SE",
            "TV(q, p)",
        ),
        [
            (f"first {k} of n", r, "—", c, m, e, tv)
            for r, c, m, e, tv in zip(ratios, cf, sm, err, tvs, strict=True)
        ]
        + [
            ("async, η = 0 drop (fluid model)", "—", x, c, m, e, "—")
            for x, c, m, e in zip(nb, fl, am, aerr, strict=True)
        ],
        note="n/k applies to first k of n, N/B to continuous dispatch; TV(q, p) of the fluid "
        "model is not in the library (—).",
    )
    for x, c, m, e in zip(nb, fl, am, aerr, strict=True):
        section.check(
            f"fluid-eta0-nb{x:g}",
            f"trained mean / E[L], async η = 0 drop, N/B = {x:g}",
            closed_form=c,
            simulation=m,
            tolerance=0.02 + Z_TOL * e,
            rule="fluid model: 0.02 (an allowance for its approximation error) + " + TOL_RULE,
        )
