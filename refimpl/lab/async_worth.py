"""Section 5: when asynchrony is not worth it.

Closed forms: :func:`refimpl.expected_max`, :func:`refimpl.async_speedup` (the speedup bound
``E[max of n]/E[L]``) and :func:`refimpl.fluid_steady_state` (what a staleness drop keeps).
Value of a stale sample: :func:`refimpl.staleness_decay` — an **assumed** model, labelled so in the
report. The measured verdict, expected reward reached per unit of simulated time with no assumed
sample value, is the ``learning`` section's (several seeds per cell); it is the primary answer. Simulations: :func:`refimpl.sim.simulate`
in ``sync`` and ``async`` modes on the same slots.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from scipy import stats

import refimpl
import refimpl.sim as rsim
from refimpl.lab._common import TOL_RULE, Z_TOL, block_mean_and_se, lognormal, seed
from refimpl.lab._plot import COLORS, legend_below, new_figure, sim_with_error
from refimpl.lab.config import LabConfig
from refimpl.lab.report import Section, fmt

__all__ = ["GAMMA", "MARGIN", "build", "laws", "verdict"]

STREAM = 5
MEAN = 400.0
ETA = 1
#: A sample ``s`` steps stale is worth ``GAMMA**s`` of a fresh one (``staleness_decay``).
GAMMA = 0.9
#: Asynchrony must buy at least this much effective speedup to pay for its complexity.
MARGIN = 1.2
#: Largest tolerated relative change of the trained mean length.
BIAS_LIMIT = 0.1
FLUID_RULE = "fluid model: 3% of the value (its approximation error) + " + TOL_RULE


def laws() -> list[tuple[str, Any]]:
    """The length laws of the section, from constant to heavy-tailed, all with mean 400 tokens."""
    out: list[tuple[str, Any]] = [
        ("near-constant [380, 420]", stats.uniform(loc=MEAN - 20.0, scale=40.0)),
        ("uniform [200, 600]", stats.uniform(loc=200.0, scale=400.0)),
        ("lognormal σ = 0.5", lognormal(median=MEAN * np.exp(-0.125), sigma=0.5)),
        ("exponential", stats.expon(scale=MEAN)),
        ("lognormal σ = 1", lognormal(median=MEAN * np.exp(-0.5), sigma=1.0)),
        ("lognormal σ = 1.5", lognormal(median=MEAN * np.exp(-1.125), sigma=1.5)),
    ]
    return out


def verdict(effective_speedup: float, mean_ratio: float) -> str:
    """The *model* verdict of the section (assumed sample value ``γ^s``), from two numbers.

    This is a model, not a measurement: the value ``γ^s`` of a stale sample is assumed. The
    measured verdict is :func:`refimpl.lab.learning.verdict` (reward per unit of simulated time).

    Rule: asynchrony is *worth it* when its effective speedup (throughput of trained samples
    relative to synchronous dispatch on the same slots, times the value ``E[γ^s]`` of a stale
    sample) is at least ``MARGIN`` and the trained mean length stays within ``BIAS_LIMIT`` of the
    launched mean; *worth it only with a fix for the length bias* when the speedup is there but the
    drop biases the lengths; *not worth it* otherwise.

    Examples
    --------
    >>> verdict(1.0, 1.0)
    'not worth it'
    >>> verdict(2.0, 0.98)
    'worth it'
    >>> verdict(2.0, 0.6)
    'worth it only with a fix for the length bias'
    """
    if effective_speedup < MARGIN:
        return "not worth it"
    if abs(mean_ratio - 1.0) > BIAS_LIMIT:
        return "worth it only with a fix for the length bias"
    return "worth it"


def build(section: Section, config: LabConfig, progress: Callable[[str], None]) -> None:
    """Fill the async-worth section."""
    n = 32
    steps = config.speedup_steps
    a_steps = config.async_steps
    warm = a_steps // 5
    section.text(
        f"Synchronous dispatch on `n = {n}` slots waits for the longest rollout: a step takes "
        f"`E[max of n]`. Asynchronous dispatch keeps every slot busy, so at best it is "
        f"`E[max]/E[L]` times faster (`async_speedup`). It pays for that with staleness: here the "
        f"asynchronous run drops samples staler than `η = {ETA}` (with `N = B = {n}`), and a kept "
        f"sample `s` steps stale is worth `γ^s` of a fresh one (`staleness_decay`, `γ = {GAMMA}`)."
    )
    section.text(
        f"**Verdict rule.** Effective speedup = (trained samples per unit time, async ÷ sync) × "
        f"mean `γ^s` of the trained samples. *Worth it* if the effective speedup is at least "
        f"{MARGIN} and the trained mean length is within {fmt(100 * BIAS_LIMIT)}% of the launched "
        f"mean; *worth it only with a fix for the length bias* if the speedup is there but the "
        f"drop shortens the trained lengths by more than that; *not worth it* if the effective "
        f"speedup is below {MARGIN}."
    )
    section.text(
        "**This section's verdict is a model: the value γ^s of a stale sample is assumed, not "
        "measured.** The measured verdict is the `learning` section's table *worth*: a toy policy "
        "is trained on the simulator's batches, and asynchrony (with its best correction) is "
        "compared with synchronous dispatch by the expected reward it reaches per unit of "
        "simulated time, over several seeds per cell, with no assumed sample value. Read that one "
        "first; this model only says what the speedup and the drop would buy if a sample s steps "
        "stale were worth γ^s of a fresh one."
    )
    section.metric(
        "setting",
        {
            "slots": n,
            "eta": ETA,
            "gamma": GAMMA,
            "margin": MARGIN,
            "bias_limit": BIAS_LIMIT,
            "sync_steps": steps,
            "async_steps": a_steps,
            "mean_length": MEAN,
        },
    )
    rows: list[tuple[Any, ...]] = []
    failures: list[str] = []
    names: list[str] = []
    bound_cf: list[float] = []
    bound_sim: list[float] = []
    bound_err: list[float] = []
    eff_all: list[tuple[float, float, float]] = []
    verdicts: list[str] = []
    for i, (name, dist) in enumerate(laws()):
        progress(f"{name}: sync {steps} steps, async {a_steps} steps")
        mean_l = float(dist.mean())
        try:
            bound: float | None = float(refimpl.async_speedup(dist, n=n))
        except ArithmeticError as err:  # the library refuses an inaccurate value: say so
            bound = None
            failures.append(f"`expected_max`/`async_speedup` for {name}: {err}")
        tr_sync = rsim.simulate(
            rsim.SimConfig(
                slots=n,
                batch=n,
                mode="sync",
                steps=steps,
                lengths=dist,
                seed=seed(config, STREAM, i),
            )
        )
        step_times = np.diff(np.concatenate([[0.0], np.asarray(tr_sync.publish_times)]))
        st_mean = float(step_times.mean())
        st_se = float(step_times.std(ddof=1) / np.sqrt(step_times.size))
        if bound is not None:
            section.check(
                f"speedup-{i}",
                f"E[max of {n}]/E[L], {name}",
                closed_form=bound,
                simulation=st_mean / mean_l,
                tolerance=max(Z_TOL * st_se / mean_l, 1e-9),
                rule=TOL_RULE,
            )
        tr_async = rsim.simulate(
            rsim.SimConfig(
                slots=n,
                batch=n,
                steps=a_steps,
                lengths=dist,
                eta=ETA,
                over_bound="drop",
                seed=seed(config, STREAM, 100 + i),
            )
        )
        pub = np.asarray(tr_async.publish_times)
        async_rate = n * (a_steps - warm) / (pub[-1] - pub[warm - 1])
        sync_rate = n / st_mean
        order = tr_async.training_order()
        order = order[np.asarray(tr_async.step)[order] >= warm]
        s = np.asarray(tr_async.staleness)[order]
        lengths = np.asarray(tr_async.length)[order]
        value = float(np.mean(refimpl.staleness_decay(s, gamma=GAMMA)))
        status = np.asarray(tr_async.status)
        consumed = np.asarray(tr_async.step) >= warm
        kept_sim = float((status[consumed] == rsim.STATUS["trained"]).mean())
        fl = refimpl.fluid_steady_state(dist, slots=n, batch=n, eta=ETA)
        ratio_sim = async_rate / sync_rate
        ratio_cf = None if bound is None else bound * float(fl.kept_fraction)
        mean_ratio = float(lengths.mean()) / mean_l
        eff = ratio_sim * value
        v = verdict(eff, mean_ratio)
        per_step = np.bincount(np.asarray(tr_async.step)[order] - warm, weights=lengths) / n
        _, mr_se = block_mean_and_se(per_step / mean_l)
        rows.append(
            (
                name,
                "not computed" if bound is None else bound,
                st_mean / mean_l,
                float(fl.kept_fraction),
                kept_sim,
                "not computed" if ratio_cf is None else ratio_cf,
                ratio_sim,
                float(fl.trained_mean_length) / mean_l,
                mean_ratio,
                value,
                eff,
                v,
            )
        )
        section.check(
            f"trained-mean-{i}",
            f"trained mean / E[L], {name}, drop over η = {ETA}",
            closed_form=float(fl.trained_mean_length) / mean_l,
            simulation=mean_ratio,
            tolerance=0.03 * float(fl.trained_mean_length) / mean_l + Z_TOL * mr_se,
            rule=FLUID_RULE,
        )
        names.append(name)
        bound_cf.append(np.nan if bound is None else bound)
        bound_sim.append(st_mean / mean_l)
        bound_err.append(st_se / mean_l)
        eff_all.append((np.nan if ratio_cf is None else ratio_cf, ratio_sim, eff))
        verdicts.append(v)
    section.table(
        "throughput",
        f"What asynchrony could buy on {n} slots (mean length {fmt(MEAN)} tokens): the speedup "
        f"bound and what survives the drop over η = {ETA}",
        (
            "length law",
            "bound E[max]/E[L] (×)",
            "bound, sim (×)",
            "kept fraction (fluid)",
            "kept fraction (sim)",
            "trained samples/time, async ÷ sync: bound × kept (×)",
            "trained samples/time, async ÷ sync: sim (×)",
        ),
        [r[:7] for r in rows],
    )
    section.table(
        "verdicts",
        "What it is worth: the length bias of the drop, the value of stale samples, the verdict",
        (
            "length law",
            "trained mean / E[L] (fluid)",
            "trained mean / E[L] (sim)",
            "mean γ^s",
            "effective speedup (×)",
            f"model verdict (assumed γ^s, γ = {GAMMA})",
        ),
        [(r[0], *r[7:]) for r in rows],
        note=(
            "Effective speedup = trained samples per time (async ÷ sync, simulated) × mean γ^s. "
            "The verdict is that of the γ^s model (assumed sample value); the measured verdict is "
            "the learning section's."
        ),
    )
    section.text(
        "\n".join(
            f"- **{name}**: model verdict (assumed γ^s): {v} (effective speedup {fmt(r[10])}, "
            f"trained mean {fmt(r[8])} × E[L])."
            for name, v, r in zip(names, verdicts, rows, strict=True)
        )
    )

    by_verdict: dict[str, list[str]] = {}
    for name, v in zip(names, verdicts, strict=True):
        by_verdict.setdefault(v, []).append(name)
    section.headline(
        f"Model with an assumed sample value γ^s (γ = {GAMMA}), not a measurement — "
        + "; ".join(f"{v}: {', '.join(ns)}" for v, ns in by_verdict.items())
        + ". The measured verdict is in the learning section."
    )
    section.metric("verdict_kind", "model (assumed gamma^s); measured verdict: learning section")
    if failures:
        section.text(
            "**Closed forms not computed in this build.** The library refused to return these "
            "values (it raises rather than return an inaccurate number); their rows show the "
            "simulation only:\n" + "\n".join(f"- {f}" for f in failures)
        )
    section.metric("closed_form_failures", failures)

    fig, (ax1, ax2) = new_figure(2, height=5.6)
    x = np.arange(len(names))
    ax1.plot(
        x,
        bound_cf,
        color="black",
        marker="_",
        markersize=22,
        linestyle="none",
        markeredgewidth=2.5,
        label="closed form E[max]/E[L]",
    )
    sim_with_error(
        ax1,
        x,
        bound_sim,
        bound_err,
        color=COLORS[0],
        label="simulated sync step / E[L] (±2 SE)",
        ms=5,
    )
    ax1.set_xticks(x, names, rotation=25, ha="right")
    ax1.set_ylabel("speedup bound (×)")
    ax1.set_title(f"What asynchrony could buy ({n} slots)")
    ax1.legend(loc="upper left")
    colors = {
        "worth it": COLORS[2],
        "not worth it": COLORS[1],
        "worth it only with a fix for the length bias": COLORS[4],
    }
    ratios_cf = [e[0] for e in eff_all]
    ratios_sim = [e[1] for e in eff_all]
    effs = [e[2] for e in eff_all]
    ax2.bar(x, effs, color=[colors[v] for v in verdicts], alpha=0.8)
    ax2.plot(
        x,
        ratios_cf,
        color="black",
        marker="_",
        markersize=22,
        linestyle="none",
        markeredgewidth=2.5,
        label="bound × kept fraction (closed form)",
    )
    ax2.plot(
        x,
        ratios_sim,
        color=COLORS[0],
        marker="o",
        linestyle="none",
        label="trained samples per time, async ÷ sync (sim)",
    )
    ax2.axhline(
        MARGIN, color="0.3", linestyle="--", linewidth=1.2, label=f"verdict threshold {MARGIN}"
    )
    ax2.set_xticks(x, names, rotation=25, ha="right")
    ax2.set_ylabel("speedup (×)")
    ax2.set_title(f"What it buys after the drop (η = {ETA})")
    ax2.set_ylim(0, 1.12 * max(max(effs), np.nanmax(ratios_sim)))
    from matplotlib.patches import Patch  # lazy: matplotlib is heavy

    handles, _ = ax2.get_legend_handles_labels()
    handles += [
        Patch(color=c, alpha=0.8, label=f"effective speedup: {v}") for v, c in colors.items()
    ]
    legend_below(fig, handles, ncol=2)
    section.figure(
        fig,
        "speedup-vs-value",
        "Left: the speedup bound E[max of n]/E[L], closed form (black bars) against simulated "
        "synchronous step times (dots): the heavier the tail, the more a synchronous step waits "
        "for its longest rollout. Right: what is left after the drop — trained samples per "
        "time, async ÷ sync (dots; black: bound × kept fraction) — and, as coloured bars, the "
        "effective speedup once each sample is weighted by γ^s (green: worth it; orange: only "
        "with a fix for the length bias; red: not worth it). Bars below the dashed line "
        f"({MARGIN}×) do not pay for asynchrony.",
    )
    for i, (c, s_) in enumerate(zip(ratios_cf, ratios_sim, strict=True)):
        if np.isnan(c):
            continue
        section.check(
            f"throughput-ratio-{i}",
            f"trained/time async ÷ sync, {names[i]}",
            closed_form=c,
            simulation=s_,
            tolerance=0.05 * c,
            rule="throughput: 5% of the value (fluid kept fraction and finite runs)",
        )
