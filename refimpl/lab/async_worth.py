"""Section 5: when asynchrony is not worth it.

The verdict is **measured**: for each of the section's six length laws, the toy policy of
:mod:`refimpl.lab.learning` is trained on the simulator's batches with the law mapped onto it
(:func:`toy_durations`: a rollout of ``ℓ`` tokens takes the law's quantile at ``ℓ``'s mid-quantile
under the starting policy), and synchronous dispatch is compared with asynchronous dispatch (its
best correction) by the simulated time each needs to reach a reward target, over several seeds
(:func:`measured_verdict`). Closed forms beside it: :func:`refimpl.expected_max`,
:func:`refimpl.async_speedup` (the speedup bound ``E[max of n]/E[L]``) and
:func:`refimpl.fluid_steady_state` (what a staleness drop keeps). Secondary, labelled as the model
it is: the value ``γ^s`` of a stale sample (:func:`refimpl.staleness_decay`, **assumed**).
Simulations: :func:`refimpl.sim.simulate` in ``sync`` and ``async`` modes on the same slots.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import stats

import refimpl
import refimpl.sim as rsim
from refimpl.lab._common import TOL_RULE, Z_TOL, block_mean_and_se, lognormal, seed
from refimpl.lab._plot import COLORS, legend_below, new_figure, sim_with_error
from refimpl.lab.config import LabConfig
from refimpl.lab.report import Section, fmt

__all__ = ["GAMMA", "MARGIN", "build", "laws", "measured_verdict", "toy_durations", "verdict"]

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


def toy_durations(dist: Any, pmf: Any) -> NDArray[np.float64]:
    r"""Simulated time of a toy rollout of each length: the law's quantile at its mid-quantile.

    With :math:`F` the cdf of the toy's starting length law ``pmf`` on :math:`1..M`, a rollout of
    :math:`\ell` tokens takes :math:`d(\ell) = F_\text{law}^{-1}\bigl(F(\ell - 1) +
    p(\ell)/2\bigr)`: at the start the rollouts' times follow the law (discretised to :math:`M`
    atoms), longer rollouts take longer (which finish first is unchanged), and as the policy
    learns other lengths their times follow the law's quantiles.

    Examples
    --------
    >>> d = toy_durations(stats.uniform(loc=0.0, scale=4.0), [0.25, 0.25, 0.25, 0.25])
    >>> d.tolist()
    [0.5, 1.5, 2.5, 3.5]
    """
    p = np.asarray(pmf, dtype=np.float64)
    mid = np.cumsum(p) - p / 2.0
    return np.asarray(dist.ppf(mid), dtype=np.float64)


#: N/B of the measured verdict (B = ``WORTH_BATCH``; synchronous dispatch trains all N per step).
WORTH_RATIOS = (1, 4)
WORTH_BATCH = 8
#: Synchronous trainer steps per run (quick, default); asynchronous runs take N/B × as many.
WORTH_STEPS = (20, 30)


def measured_verdict(verdicts: list[str]) -> str:
    """One law's measured verdict from its cells (one per N/B), each from :func:`~refimpl.lab.learning.verdict`.

    *Worth it* when some N/B is worth it on every seed (the trainer can pick that ratio), *not
    worth it* when every N/B is not worth it on every seed, *undecided* otherwise.

    Examples
    --------
    >>> measured_verdict(["not worth it", "worth it"]), measured_verdict(["not worth it"] * 2)
    ('worth it', 'not worth it')
    >>> measured_verdict(["not worth it", "undecided (the seeds straddle the threshold)"])
    'undecided'
    """
    if "worth it" in verdicts:
        return "worth it"
    if all(v == "not worth it" for v in verdicts):
        return "not worth it"
    return "undecided"


def verdict(effective_speedup: float, mean_ratio: float) -> str:
    """The secondary *model* verdict of the section (assumed sample value ``γ^s``), from two numbers.

    This is a model, not a measurement: the value ``γ^s`` of a stale sample is assumed. The
    section's verdict is :func:`measured_verdict` (reward per unit of simulated time).

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


def _measured(
    section: Section, config: LabConfig, progress: Callable[[str], None]
) -> dict[str, str]:
    """The measured verdict of every law: time to a reward target, sync against best async."""
    from refimpl.lab import learning as lab

    q = lab.quality()
    reward = q - lab.PENALTY * np.arange(1, lab.M + 1)
    j_star = float(reward.max())
    start = lab._policy(lab.THETA0, q)
    ratios = (2,) if config.quick else WORTH_RATIOS
    # every synchronous run of the default table reaches the target within about 15 steps
    steps = WORTH_STEPS[0] if config.quick else WORTH_STEPS[1]
    candidates: tuple[tuple[str, dict[str, Any]], ...] = (
        ("uncorrected", {}),
        ("sequence TIS", {"correction": "sequence_tis"}),
    )
    rows: list[tuple[Any, ...]] = []
    cells: dict[str, list[str]] = {}
    index = 0
    for name, dist in laws():
        progress(f"{name}: measured verdict (toy policy, {lab.WORTH_SEEDS} seeds per N/B)")
        dur = toy_durations(dist, start.pmf)
        for r_nb in ratios:
            n_slots = WORTH_BATCH * r_nb
            t_sync: list[float] = []
            times: dict[str, list[float]] = {label: [] for label, _ in candidates}
            target = 0.0
            for _rep in range(lab.WORTH_SEEDS):
                common: dict[str, Any] = {"durations": dur, "index": 2000 + index}
                index += 1
                run = lab._train(
                    "sync",
                    config,
                    q,
                    lab.THETA0,
                    mode="sync",
                    slots=n_slots,
                    batch=n_slots,
                    steps=steps,
                    **common,
                )
                j0 = float(run.reward[0])
                target = j0 + lab.TARGET_SHARE * (j_star - j0)
                t_sync.append(lab._time_to(run, target) / MEAN)
                for label, kw in candidates:
                    a_run = lab._train(
                        label,
                        config,
                        q,
                        lab.THETA0,
                        slots=n_slots,
                        batch=WORTH_BATCH,
                        steps=steps * r_nb,
                        **common,
                        **kw,
                    )
                    times[label].append(lab._time_to(a_run, target) / MEAN)
            best = min(times, key=lambda lab_: float(np.mean(times[lab_])))
            speed = [lab._ratio(a, b) for a, b in zip(t_sync, times[best], strict=True)]
            v = lab.verdict(speed)
            cells.setdefault(name, []).append(v)
            sp_mean, sp_sd = lab._spread(speed)
            rows.append(
                (
                    name,
                    float(r_nb),
                    lab._pm(*lab._spread(t_sync)),
                    *(lab._pm(*lab._spread(times[label])) for label, _ in candidates),
                    best,
                    f"{lab._pm(sp_mean, sp_sd)} ({fmt(min(speed))} – {fmt(max(speed))})",
                    v,
                )
            )
    section.table(
        "measured",
        f"The measured verdict: simulated time (in units of the law's mean, {fmt(MEAN)} tokens) "
        f"for the toy policy to go {fmt(100 * lab.TARGET_SHARE)}% of the way from J(θ0) to J*, "
        f"synchronous (all N slots per step) against asynchronous (B = {WORTH_BATCH}) with each "
        f"correction, {lab.WORTH_SEEDS} seeds per cell (mean ± standard deviation), the speedup "
        "sync ÷ best async (mean ± sd, min – max over the seeds), and the cell's verdict",
        (
            "length law",
            "N/B",
            "sync",
            "async",
            "async + seq. TIS",
            "best async",
            "speedup (×)",
            "verdict",
        ),
        rows,
        note=(
            f"Each length law is mapped onto the toy policy of the learning section (M = {lab.M} "
            "tokens): a rollout of ℓ tokens takes the law's quantile at ℓ's mid-quantile under "
            "the starting policy (toy_durations), so the starting policy's rollout times follow "
            "the law and which rollout finishes first is unchanged. A cell is worth it when every "
            f"seed's best asynchronous run reaches the target at least {lab.MARGIN}× sooner, not "
            "worth it when none does, undecided when the seeds straddle the threshold; inf: not "
            f"reached within {steps} synchronous steps (N/B × as many asynchronous "
            "ones). A law is worth it when some N/B is (the trainer picks N), not worth it when "
            "no N/B is on any seed, undecided otherwise. It measures this toy, not a law of "
            "nature; no sample value is assumed."
        ),
    )
    out = {name: measured_verdict(v) for name, v in cells.items()}
    section.metric("measured_verdicts", out)
    section.metric(
        "measured_cells",
        [{"law": r[0], "N/B": r[1], "best": r[5], "verdict": r[-1]} for r in rows],
    )
    return out


def build(section: Section, config: LabConfig, progress: Callable[[str], None]) -> None:
    """Fill the async-worth section."""
    n = 32
    steps = config.speedup_steps
    a_steps = config.async_steps
    warm = a_steps // 5
    section.text(
        "**The verdict is measured.** For each length law, a toy policy (that of the `learning` "
        "section) is trained on the simulator's batches with the law's rollout times, and "
        "asynchrony with its best correction is compared with synchronous dispatch by the "
        "simulated time each needs to reach a reward target, over several seeds per cell, with "
        "no assumed sample value (table *measured*). The tables after it say where the speedup "
        "comes from (closed forms against simulation) and, last and secondary, what a model with "
        "an *assumed* sample value γ^s would conclude."
    )
    measured = _measured(section, config, progress)
    section.text(
        f"Synchronous dispatch on `n = {n}` slots waits for the longest rollout: a step takes "
        f"`E[max of n]`. Asynchronous dispatch keeps every slot busy, so at best it is "
        f"`E[max]/E[L]` times faster (`async_speedup`). It pays for that with staleness: here the "
        f"asynchronous run drops samples staler than `η = {ETA}` (with `N = B = {n}`), and a kept "
        f"sample `s` steps stale is worth `γ^s` of a fresh one (`staleness_decay`, `γ = {GAMMA}`): "
        "an assumed value, the secondary model of the last table."
    )
    section.text(
        f"**The secondary γ^s model's rule.** Effective speedup = (trained samples per unit "
        f"time, async ÷ sync) × "
        f"mean `γ^s` of the trained samples. *Worth it* if the effective speedup is at least "
        f"{MARGIN} and the trained mean length is within {fmt(100 * BIAS_LIMIT)}% of the launched "
        f"mean; *worth it only with a fix for the length bias* if the speedup is there but the "
        f"drop shortens the trained lengths by more than that; *not worth it* if the effective "
        f"speedup is below {MARGIN}."
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
            "This verdict is that of the secondary γ^s model (assumed sample value); the "
            "section's verdict is the measured one (table measured)."
        ),
    )
    section.text(
        "\n".join(
            f"- **{name}**: measured: {measured[name]}; secondary model (assumed γ^s): {v} "
            f"(effective speedup {fmt(r[10])}, trained mean {fmt(r[8])} × E[L])."
            for name, v, r in zip(names, verdicts, rows, strict=True)
        )
    )

    by_verdict: dict[str, list[str]] = {}
    for name in names:
        by_verdict.setdefault(measured[name], []).append(name)
    section.headline(
        "Measured (reward reached per unit of simulated time, toy policy) — "
        + "; ".join(f"{v}: {', '.join(ns)}" for v, ns in by_verdict.items())
        + f". The model with an assumed sample value γ^s (γ = {GAMMA}) is secondary, listed per law."
    )
    section.metric("verdict_kind", "measured (time to a reward target); gamma^s model secondary")
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
