"""Section 2: staleness masking — staleness by length, the trained law under a drop, corrections.

Closed forms: :func:`refimpl.fluid_steady_state` and :func:`refimpl.fluid_keep_probability` (the
fluid model of continuous dispatch, docs ``concepts/length-bias``), :func:`refimpl.selected_pmf`,
:func:`refimpl.inclusion_probability_pmf` and :func:`refimpl.ipw_weights` (first-k-of-n).
Simulations: :func:`refimpl.sim.simulate` (``async`` with ``over_bound='drop'``, ``admission``,
partial rollouts, ``first_k``).
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
    mean_and_se,
    seed,
    support,
    trained,
)
from refimpl.lab._plot import COLORS, closed, new_figure, series_legend, sim
from refimpl.lab.config import LabConfig
from refimpl.lab.report import Section, fmt, nonnegative

__all__ = ["build"]

STREAM = 2
ETAS = (0, 1, 2, 4)
FLUID_TOL = 0.02
FLUID_RULE = (
    "fluid model: 2% of the value (an allowance for the approximation error of the fluid model) + "
    + TOL_RULE
)


def _law() -> Any:
    return lognormal(median=float(np.exp(6.0)), sigma=1.0)


def _consumed(trace: Any, warm: int) -> dict[str, Any]:
    """Samples the trainer consumed (trained or dropped over the bound) from step ``warm`` on."""
    st = np.asarray(trace.step)
    ok = st >= warm
    status = np.asarray(trace.status)[ok]
    return {
        "length": np.asarray(trace.length, dtype=np.float64)[ok],
        "step": st[ok].astype(np.int64),
        "staleness": np.asarray(trace.staleness, dtype=np.int64)[ok],
        "kept": status == rsim.STATUS["trained"],
    }


class _Setup(NamedTuple):
    """The section's runs: their length law, slots, batch, steps and warm-up."""

    dist: Any
    mean_l: float
    n: int
    b: int
    steps: int
    warm: int


def build(section: Section, config: LabConfig, progress: Callable[[str], None]) -> None:
    """Fill the staleness-masking section."""
    setup = _setup(section, config)
    fig, (ax1, ax2) = new_figure(2)
    delta0 = _staleness_by_length(section, config, progress, setup, ax1)
    runs = _drop_runs(section, config, progress, setup, (fig, ax2, delta0))
    _keep_by_length(section, setup, runs)
    _corrections(section, config, progress, runs)
    _alternatives(section, config, progress)
    section.takeaway(
        "Dropping samples staler than η = {tightest_drop.eta} trains a mean length of "
        "{eta0_trained_mean_ratio_simulated} × E[L]: rollouts longer than "
        "{tightest_drop.never_trained_above} tokens ({tightest_drop.launched_mass_never_trained:%} "
        "of launches) are never trained.",
        "Reweighting by the inverse keep probability brings the estimate only to "
        "{tightest_drop_ipw_ratio} × E[L], "
        "since no weight brings back a sample that is never seen; a larger η, admission control "
        "or partial rollouts keep the long tail (tables alternatives and alternatives-cost: at "
        "what token cost).",
    )


def _setup(section: Section, config: LabConfig) -> _Setup:
    """The runs' settings, recorded and explained (the two step times the section uses)."""
    dist = _law()
    mean_l = float(dist.mean())
    n, b = config.async_slots, config.async_batch
    steps = config.async_steps
    warm = steps // 5
    delta_free = float(refimpl.fluid_steady_state(dist, slots=n, batch=b).step_time)
    delta_eta0 = float(refimpl.fluid_steady_state(dist, slots=n, batch=b, eta=0).step_time)
    section.metric(
        "setting",
        {
            "slots": n,
            "batch": b,
            "steps": steps,
            "warm_up_steps": warm,
            "law": "lognormal(6, 1)",
            "E[L]": mean_l,
        },
    )
    section.text(
        f"Continuous asynchronous dispatch with `N = {n}` slots and `B = {b}` samples per step, "
        f"lognormal(6, 1) lengths (`E[L] = {fmt(mean_l)}` tokens), {steps} trainer steps per run "
        f"(the first {warm} are discarded as warm-up). The fluid model of continuous dispatch "
        "(docs page `concepts/length-bias`, *Continuous asynchronous dispatch and the fluid model*) "
        "predicts the staleness of a rollout "
        "from its length alone: a rollout of length `ℓ` spans about `ℓ/Δ` trainer steps, where "
        "`Δ` is the step time in token times. **Two step times appear below:** `Δ` of the run "
        f"without a bound ({fmt(delta_free)} tokens/step, `B·E[L]/N`), and `Δ_η` of a run that "
        "drops samples staler than `η` — longer, because a dropped sample does not fill the "
        f"batch, so more rollouts must finish per step (at `η = 0`, {fmt(delta_eta0)} tokens/step)."
    )

    return _Setup(dist, mean_l, n, b, steps, warm)


def _staleness_by_length(
    section: Section,
    config: LabConfig,
    progress: Callable[[str], None],
    setup: _Setup,
    ax1: Any,
) -> float:
    """One run without a bound: the probability of each staleness by length, against the fluid
    model, and the mean staleness; returns the run's step time Δ."""
    dist, _, n, b, steps, warm = setup
    progress(f"staleness by length: async, N = {n}, B = {b}, {steps} steps")
    trace = rsim.simulate(
        rsim.SimConfig(slots=n, batch=b, steps=steps, lengths=dist, seed=seed(config, STREAM, 0))
    )
    c = _consumed(trace, warm)
    fluid0 = refimpl.fluid_steady_state(dist, slots=n, batch=b)
    delta0 = float(fluid0.step_time)
    per_step_s = np.bincount(c["step"] - warm, weights=c["staleness"]) / b
    s_mean, s_se = block_mean_and_se(per_step_s)
    section.check(
        "mean-staleness",
        "mean staleness E[s] (steps)",
        closed_form=float(fluid0.mean_staleness),
        simulation=s_mean,
        tolerance=FLUID_TOL * float(fluid0.mean_staleness) + Z_TOL * s_se,
        rule=FLUID_RULE,
    )
    edges = log_bins(c["length"], 24)
    x = np.geomspace(edges[0], edges[-1], 300)
    for m in (1, 2, 3):
        p_line = 1.0 - refimpl.fluid_keep_probability(x, step_time=delta0, eta=m - 1)
        closed(ax1, x, p_line, color=COLORS[m - 1])
        centre, rate, _se = binned_rate(c["length"], c["staleness"] >= m, edges)
        sim(ax1, centre, rate, color=COLORS[m - 1])
    ax1.set_xscale("log")
    ax1.set_title(f"Staleness grows with length (no bound: Δ = {fmt(delta0)} tokens/step)")
    ax1.set_xlabel("rollout length ℓ (tokens, log scale)")
    ax1.set_ylabel("probability")
    series_legend(
        ax1,
        [(f"P(s ≥ {m} | ℓ)", COLORS[m - 1]) for m in (1, 2, 3)],
        closed_label="fluid model",
        loc="upper left",
    )
    section.metric("step_time_no_bound", delta0)
    section.metric(
        "mean_staleness",
        {"fluid": float(fluid0.mean_staleness), "simulation": s_mean, "N/B": n / b},
    )
    return delta0


def _drop_run(
    section: Section, config: LabConfig, setup: _Setup, eta: int, ax2: Any, color: str
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """One run dropping samples staler than ``eta``: its trained law drawn, checked; its row."""
    dist, mean_l, n, b, steps, warm = setup
    lx = np.geomspace(20, 20000, 400)
    tr = rsim.simulate(
        rsim.SimConfig(
            slots=n,
            batch=b,
            steps=steps,
            lengths=dist,
            eta=eta,
            over_bound="drop",
            seed=seed(config, STREAM, 10 + eta),
        )
    )
    ce = _consumed(tr, warm)
    fl = refimpl.fluid_steady_state(dist, slots=n, batch=b, eta=eta)
    delta = float(fl.step_time)
    kept_frac = float(fl.kept_fraction)
    keep_line = refimpl.fluid_keep_probability(lx, step_time=delta, eta=eta)
    closed(ax2, lx, lx * dist.pdf(lx) * keep_line / kept_frac, color=color)
    kept_len = ce["length"][ce["kept"]]
    h_edges = np.geomspace(20, 20000, 41)
    counts, _ = np.histogram(kept_len, bins=h_edges)
    dens = counts / (kept_len.size * np.diff(np.log(h_edges)))
    centre = np.sqrt(h_edges[:-1] * h_edges[1:])
    show = counts > 0
    sim(ax2, centre[show], dens[show], color=color)
    # per-step statistics for standard errors
    st_idx = ce["step"] - warm
    per_mean = np.bincount(st_idx[ce["kept"]], weights=kept_len, minlength=steps - warm) / b
    consumed_per = np.bincount(st_idx, minlength=steps - warm).astype(np.float64)
    per_kept = b / consumed_per
    tm, tm_se = block_mean_and_se(per_mean)
    kf_sim = float(ce["kept"].mean())
    _, kf_se = block_mean_and_se(per_kept)
    section.check(
        f"trained-mean-eta{eta}",
        f"trained mean length, drop over η = {eta} (tokens)",
        closed_form=float(fl.trained_mean_length),
        simulation=tm,
        tolerance=FLUID_TOL * float(fl.trained_mean_length) + Z_TOL * tm_se,
        rule=FLUID_RULE,
    )
    section.check(
        f"kept-fraction-eta{eta}",
        f"kept fraction, drop over η = {eta}",
        closed_form=kept_frac,
        simulation=kf_sim,
        tolerance=FLUID_TOL * kept_frac + Z_TOL * kf_se,
        rule=FLUID_RULE,
    )
    never = (eta + 1) * delta
    lost_mass = float(dist.sf(never))
    trained_beyond = float((kept_len > never).mean())
    ce["delta"] = delta
    row = (
        eta,
        delta,
        kept_frac,
        kf_sim,
        float(fl.trained_mean_length),
        tm,
        float(fl.trained_mean_length) / mean_l,
        never,
        lost_mass,
        trained_beyond,
    )
    return row, ce


def _drop_runs(
    section: Section,
    config: LabConfig,
    progress: Callable[[str], None],
    setup: _Setup,
    figure: tuple[Any, Any, float],
) -> dict[int, dict[str, Any]]:
    """Runs dropping at each η: the trained law (the figure's right panel), its tables, what is
    never trained."""
    fig, ax2, delta0 = figure
    dist, mean_l, steps = setup.dist, setup.mean_l, setup.steps
    rows = []
    runs: dict[int, dict[str, Any]] = {}
    lx = np.geomspace(20, 20000, 400)
    closed(ax2, lx, lx * dist.pdf(lx), color="0.55", linestyle=":")
    for i, eta in enumerate(ETAS):
        progress(f"drop over η = {eta}: async, {steps} steps (event engine)")
        row, runs[eta] = _drop_run(section, config, setup, eta, ax2, COLORS[i])
        rows.append(row)
    ax2.set_xscale("log")
    ax2.set_title("Trained length law under a drop at s > η")
    ax2.set_xlabel("rollout length ℓ (tokens, log scale)")
    ax2.set_ylabel("density of ln ℓ")
    ax2.set_ylim(0, 1.6 * ax2.get_ylim()[1])  # room for the legend above the curves
    from matplotlib.lines import Line2D  # lazy: matplotlib is heavy

    series_legend(
        ax2,
        [(f"η = {eta}", COLORS[i]) for i, eta in enumerate(ETAS)],
        closed_label="fluid q_η",
        loc="upper center",
        ncol=2,
        extra=[Line2D([], [], color="0.55", linestyle=":", linewidth=2, label="launched law p")],
    )
    section.figure(
        fig,
        "staleness-and-drop",
        "Left: the probability that a rollout is at least m steps stale, by its length, in the "
        f"run without a bound (step time Δ = {fmt(delta0)} tokens/step): a rollout longer than "
        "m·Δ tokens is always at least m steps stale. Right: the length law that is actually "
        "trained when samples staler than η are dropped (density of ln ℓ); the dotted grey line "
        "is the launched law. Look at the right tail: at η = 0 the trained law loses every "
        "rollout longer than Δ_0, and each larger η gives back one more step time.",
    )
    section.table(
        "drop-table",
        "Dropping at s > η: fluid model against the simulator (Δ_η: the step time with the drop; "
        f"without a bound Δ = {fmt(delta0)} tokens/step)",
        (
            "η",
            "Δ_η (tokens/step)",
            "kept fraction (fluid)",
            "kept fraction (sim)",
            "trained mean, fluid (tokens)",
            "trained mean, sim (tokens)",
            "trained mean / E[L] (fluid)",
        ),
        [r[:7] for r in rows],
    )
    section.table(
        "lost-table",
        "What the drop loses: rollouts longer than (η + 1)·Δ_η are never trained",
        (
            "η",
            "(η + 1)·Δ_η (tokens)",
            "launched mass above it",
            "trained mass above it (sim)",
        ),
        [(r[0], *r[7:]) for r in rows],
        note="Launched mass: the probability that a launched rollout is longer (the input law); "
        "trained mass: the share of trained samples longer, in the simulation (the fluid model "
        "says 0; step times fluctuate in the simulation, so a few get through).",
    )
    r0 = rows[0]
    sim_ratio0 = section.metric("eta0_trained_mean_ratio_simulated", r0[5] / mean_l)
    section.metric(
        "tightest_drop",
        {"eta": r0[0], "never_trained_above": r0[7], "launched_mass_never_trained": r0[8]},
    )
    section.headline(
        f"dropping samples staler than η = 0 trains a mean length of {fmt(sim_ratio0)} × E[L] "
        f"(fluid model {fmt(r0[6])}); rollouts longer than {fmt(r0[7])} tokens "
        f"({fmt(100 * r0[8])}% of launches) are never trained."
    )
    section.text(
        "**What is lost.** A rollout longer than `(η + 1)·Δ_η` is never trained: by the time it "
        "finishes, the policy has moved on more than η versions. The column *launched mass above it* "
        "is the probability of such a rollout; no importance weight can bring back a sample that is "
        "never seen — only a larger η, admission control or partial rollouts can."
    )

    return runs


def _keep_by_length(section: Section, setup: _Setup, runs: dict[int, dict[str, Any]]) -> None:
    """The probability that a consumed rollout survives each drop, by length."""
    fig, (ax,) = new_figure(1, width=7.0, height=4.2)
    for i, eta in enumerate(ETAS):
        ce = runs[eta]
        e2 = log_bins(ce["length"], 22)
        xx = np.geomspace(e2[0], e2[-1], 300)
        closed(
            ax,
            xx,
            refimpl.fluid_keep_probability(xx, step_time=ce["delta"], eta=eta),
            color=COLORS[i],
        )
        centre, rate, _ = binned_rate(ce["length"], ce["kept"], e2)
        sim(ax, centre, rate, color=COLORS[i])
    ax.set_xscale("log")
    ax.set_title("Masking turns staleness into length bias: keep rate by length")
    ax.set_xlabel("rollout length ℓ (tokens, log scale)")
    ax.set_ylabel("P(kept | ℓ)")
    series_legend(
        ax,
        [(f"η = {eta}", COLORS[i]) for i, eta in enumerate(ETAS)],
        closed_label="fluid_keep_probability",
        loc="lower left",
    )
    section.figure(
        fig,
        "keep-by-length",
        "The probability that a consumed rollout survives the staleness drop, by length: "
        "`fluid_keep_probability` (lines) against the simulator (markers).",
    )


#: The corrections' two first-k settings: (label, n, k, support points, geometric ratio).
_ESTIMATOR_SETTINGS = (
    ("mild", 4, 2, 4, 1.0),
    ("tail", 8, 4, 8, 0.8),
)
_DESCRIBED = {
    "mild": "uniform on {100, 200, 300, 400} tokens, first 2 of 4",
    "tail": "geometric(0.8) on {100, 200, ..., 800} tokens, first 4 of 8",
}
#: The clipped estimator's weight cap.
_CLIP = 5.0


def _estimator_setting(
    section: Section, config: LabConfig, progress: Callable[[str], None], s_i: int
) -> list[tuple[Any, ...]]:
    """One setting: each estimator's simulated bias and variance against the exact moments."""
    label, n, k, points, ratio = _ESTIMATOR_SETTINGS[s_i]
    reps, clip, described = config.estimator_reps, _CLIP, _DESCRIBED
    rows: list[tuple[Any, ...]] = []
    pmf = np.zeros(100 * points)
    pmf[np.arange(1, points + 1) * 100 - 1] = ratio ** np.arange(points)
    pmf /= pmf.sum()
    ell = support(pmf)
    mean_p = float(ell @ pmf)
    q = np.asarray(refimpl.selected_pmf(pmf, n=n, k=k), dtype=np.float64)
    mean_q = float(ell @ q)
    pi = np.asarray(refimpl.inclusion_probability_pmf(pmf, n=n, k=k), dtype=np.float64)
    progress(f"corrections: {label}, {reps} batches")
    trace = rsim.simulate(
        rsim.SimConfig(
            slots=n,
            batch=k,
            mode="first_k",
            launch=n,
            lengths=pmf,
            steps=reps,
            seed=seed(config, STREAM, 50 + s_i),
        )
    )
    L = trained(trace).length.reshape(reps, k)
    pi_b = pi[L.astype(np.int64) - 1]
    exact = refimpl.ipw_estimator_moments(pmf, ell, n=n, k=k, clip=clip)
    assert exact.clipped is not None
    estimates = {
        "naive (batch mean)": (L.mean(axis=1), None),
        "IPW (Horvitz–Thompson)": (
            refimpl.horvitz_thompson_estimate(L, pi_b, n=n, k=k),
            exact.horvitz_thompson,
        ),
        "Hájek (self-normalised)": (refimpl.hajek_estimate(L, pi_b), exact.hajek),
        f"clipped IPW (w ≤ {fmt(clip)})": (
            refimpl.clipped_ipw_estimate(L, pi_b, n=n, k=k, clip=clip),
            exact.clipped,
        ),
    }
    for name, (est, mom) in estimates.items():
        m, se = mean_and_se(est)
        var = float(est.var(ddof=1))
        var_se = float(np.sqrt(max(np.mean((est - est.mean()) ** 4) - var**2, 0.0) / est.size))
        bias_cf = float(mom.bias) if mom is not None else mean_q - mean_p
        var_cf = nonnegative(float(mom.variance), name="variance") if mom is not None else 0.0
        rows.append(
            (
                label,
                name,
                bias_cf,
                m - mean_p,
                se,
                var_cf if mom is not None else "—",
                var,
                float(np.mean((est - mean_p) ** 2)),
            )
        )
        short = name.split(" (")[0]
        # Bounded estimators (naive, Hájek, clipped) have reliable standard errors everywhere;
        # HT only where its weights are moderate (the mild setting).
        if s_i == 0 or mom is None or "Horvitz" not in name:
            section.check(
                f"bias-{s_i}-{short}",
                f"{short} estimate of E_p[L] (tokens), {label}",
                closed_form=mean_p + bias_cf,
                simulation=m,
                tolerance=Z_TOL * se,
                rule=TOL_RULE,
            )
        if s_i == 0 and mom is not None:
            section.check(
                f"variance-{s_i}-{short}",
                f"{short} variance over batches (tokens²), {label}",
                closed_form=var_cf,
                simulation=var,
                tolerance=Z_TOL * var_se,
                rule=TOL_RULE,
            )
    section.metric(
        f"estimator_setting_{s_i}",
        {
            "label": f"{label}: {described[label]}",
            "E_p[L]": mean_p,
            "E_q[L]": mean_q,
            "max_ipw_weight": float((k / (n * pi[pmf > 0])).max()),
            "per_draw_variance": float(exact.per_draw_variance),
        },
    )
    return rows


def _corrections(
    section: Section,
    config: LabConfig,
    progress: Callable[[str], None],
    runs: dict[int, dict[str, Any]],
) -> None:
    """IPW, Hájek and clipped estimates of E_p[L]: bias and variance."""
    reps = config.estimator_reps
    described = _DESCRIBED
    rows = []
    for s_i in range(len(_ESTIMATOR_SETTINGS)):
        rows += _estimator_setting(section, config, progress, s_i)
    section.text(
        "**Corrections.** Two settings: *mild* is "
        + described["mild"]
        + "; *tail* is "
        + described["tail"]
        + ". Where the inclusion probability `π(ℓ)` is known and positive, "
        "inverse-propensity weights `w = k/(n·π(ℓ))` undo the bias: the Horvitz–Thompson estimate "
        "(`horvitz_thompson_estimate`) is unbiased on a finite support. Its variance is the price: "
        "`π` is tiny for the longest lengths, so their weights are huge. Hájek "
        "(`hajek_estimate`) and clipped weights (`clipped_ipw_estimate`) trade that variance for "
        "bias. The exact bias and variance come from `ipw_estimator_moments` (a finite sum over "
        f"batch compositions); the simulated ones from {reps} first-k-of-n batches per setting. In "
        "the tail setting the largest weight is "
        f"{fmt(section.metrics['estimator_setting_1']['max_ipw_weight'])}: the simulated IPW mean is "
        "driven by rare batches, so it is shown but not checked."
    )
    section.table(
        "estimators-first-k",
        "Estimating E_p[L] from first-k-of-n batches: exact bias and variance against the simulation",
        (
            "setting",
            "estimator",
            "bias (exact)",
            "bias (sim)",
            "bias SE (sim)",
            "variance (exact)",
            "variance (sim)",
            "MSE (sim)",
        ),
        rows,
        note="Bias and its SE in tokens (estimate − E_p[L]); variance and MSE in tokens². The "
        "naive batch mean has no exact variance in the library (—).",
    )

    _corrections_under_drop(section, runs)


def _corrections_under_drop(section: Section, runs: dict[int, dict[str, Any]]) -> None:
    """Under the staleness drop, weights 1/keep(ℓ) cannot reach the never-kept tail: the naive,
    IPW and Hájek estimates of E[L] against the truth."""
    dist = _law()
    mean_l = float(dist.mean())
    mrows = []
    for eta in ETAS:
        ce = runs[eta]
        keep = refimpl.fluid_keep_probability(ce["length"], step_time=ce["delta"], eta=eta)
        kept = ce["kept"] & (keep > 0)
        wk = np.zeros_like(keep)
        wk[kept] = refimpl.ipw_weights(keep[kept], n=1, k=1)
        per_step = ce["step"]
        steps_u = np.unique(per_step)
        idx = np.searchsorted(steps_u, per_step)
        launched = np.bincount(idx, minlength=steps_u.size).astype(np.float64)
        num = np.bincount(idx, weights=wk * ce["length"], minlength=steps_u.size)
        den = np.bincount(idx, weights=wk, minlength=steps_u.size)
        naive = np.bincount(
            idx, weights=np.where(ce["kept"], ce["length"], 0.0), minlength=steps_u.size
        ) / np.bincount(idx, weights=ce["kept"].astype(float), minlength=steps_u.size)
        ht = num / launched
        hj = num / den
        mrows.append(
            (
                eta,
                block_mean_and_se(naive)[0] / mean_l,
                block_mean_and_se(ht)[0] / mean_l,
                block_mean_and_se(hj)[0] / mean_l,
                float(dist.sf((eta + 1) * ce["delta"])),
                # share of E[L] carried by the never-kept tail: an integral of the input law
                float(dist.expect(lambda x: x, lb=(eta + 1) * ce["delta"])) / mean_l,
            )
        )
    section.metric("tightest_drop_ipw_ratio", mrows[0][2])
    section.table(
        "estimators-drop",
        "Under the staleness drop, reweighting by 1/keep(ℓ) (fluid) cannot recover what is never "
        "kept: estimates of E[L] relative to the truth",
        (
            "η",
            "naive / E[L]",
            "IPW / E[L]",
            "Hájek / E[L]",
            "launched mass never kept",
            "share of E[L] never kept",
        ),
        mrows,
    )
    section.text(
        "Reweighting the kept samples by `1/keep(ℓ)` (`ipw_weights` with `π = keep`) moves the "
        "estimate towards E[L] but stops short by about the share of E[L] that the never-kept tail "
        "carries: a few percent of the rollouts hold a large part of the tokens."
    )


def _alternative_row(
    name: str, tr: Any, warm: int, mean_l: float
) -> tuple[tuple[Any, ...], tuple[float, float]]:
    """One strategy's trained mean, staleness, drops, waste and recomputation; and its rates of
    trained samples and tokens per token time (the table shows them relative to plain async)."""
    s = tr.summary()
    c = _consumed(tr, warm)
    tm = float(c["length"][c["kept"]].mean())
    status = np.asarray(tr.status)
    length = np.asarray(tr.length, dtype=np.float64)
    tokens_trained = float(length[status == rsim.STATUS["trained"]].sum())
    # Every token a slot decoded: rollouts that finished (trained, dropped or still waiting in
    # the buffer) and the partial work of aborted ones (wasted_tokens).
    finished = np.isin(status, [rsim.STATUS[k] for k in ("trained", "dropped", "pending")])
    tokens_dropped = float(length[status == rsim.STATUS["dropped"]].sum())
    decoded = float(length[finished].sum()) + float(s.wasted_tokens)
    kept_stale = c["staleness"][c["kept"]]
    row = (
        name,
        tm / mean_l,
        float(kept_stale.mean()),
        int(kept_stale.max()),
        1.0 - float(c["kept"].mean()),
        (float(s.wasted_tokens) + tokens_dropped) / decoded,
        s.recomputed_tokens / tokens_trained,
    )
    # trained samples and trained tokens per token time
    return row, (s.trained / s.end_time, tokens_trained / s.end_time)


def _stalest_recomputed(section: Section, tr: Any, warm: int) -> dict[str, Any]:
    """The stalest trained sample of the recompute run: how long it generated, what it recomputed."""
    s = tr.summary()
    length = np.asarray(tr.length, dtype=np.float64)
    trained_mask = np.asarray(tr.status) == rsim.STATUS["trained"]
    ids = np.flatnonzero(trained_mask & (np.asarray(tr.step) >= warm))
    worst = int(ids[np.argmax(np.asarray(tr.staleness)[ids])])
    gen_time = float(tr.finish_time[worst] - tr.launch_time[worst])
    step_time = float(s.end_time) / s.steps
    stalest: dict[str, Any] = section.metric(
        "recompute_stalest_sample",
        {
            "length": float(length[worst]),
            "staleness": int(np.asarray(tr.staleness)[worst]),
            "generation_time": gen_time,
            "generation_steps": gen_time / step_time,
            "recomputed_tokens": float(np.asarray(tr.recomputed_tokens)[worst]),
            "mean_step_time": step_time,
            "reprefill_token_time": 0.1,
        },
    )
    return stalest


def _alternatives(section: Section, config: LabConfig, progress: Callable[[str], None]) -> None:
    """Admission control and partial rollouts against the drop, with their token costs."""
    dist = _law()
    mean_l = float(dist.mean())
    n, b = config.async_slots, config.async_batch
    steps = config.async_steps
    warm = steps // 5
    eta = 1
    variants: list[tuple[str, dict[str, Any]]] = [
        ("async, no bound", {}),
        (f"async, drop over η = {eta}", {"eta": eta, "over_bound": "drop"}),
        (f"admission control, η = {eta}", {"mode": "admission", "eta": eta}),
        ("partial: restart", {"partial": "restart"}),
        ("partial: recompute", {"partial": "recompute", "reprefill_token_time": 0.1}),
        ("partial: keep_kv", {"partial": "keep_kv"}),
    ]
    rows = []
    base: tuple[float, float] | None = None
    stalest: dict[str, Any] = {}
    for i, (name, kw) in enumerate(variants):
        progress(f"alternatives: {name}")
        tr = rsim.simulate(
            rsim.SimConfig(
                slots=n, batch=b, steps=steps, lengths=dist, seed=seed(config, STREAM, 70 + i), **kw
            )
        )
        row, rates = _alternative_row(name, tr, warm, mean_l)
        base = rates if base is None else base
        rows.append((*row, rates[0] / base[0], rates[1] / base[1]))
        c = _consumed(tr, warm)
        if name.startswith("partial: recompute"):
            stalest = _stalest_recomputed(section, tr, warm)
        if name.startswith("admission"):
            per = np.bincount(c["step"][c["kept"]] - warm, weights=c["length"][c["kept"]]) / b
            m, se = block_mean_and_se(per)
            section.check(
                "admission-trained-mean",
                f"admission control (η = {eta}): trained mean length = E[L] (tokens)",
                closed_form=mean_l,
                simulation=m,
                tolerance=Z_TOL * se,
                rule=TOL_RULE,
            )
    section.table(
        "alternatives",
        f"Alternatives to dropping (N = {n}, B = {b}, lognormal(6, 1)): what each strategy trains",
        (
            "strategy",
            "trained mean / E[L]",
            "mean staleness (steps)",
            "max staleness (steps)",
            "dropped (share of consumed)",
        ),
        [r[:5] for r in rows],
    )
    section.table(
        "alternatives-cost",
        "What each strategy costs: tokens and throughput relative to async without a bound",
        (
            "strategy",
            "wasted (share of decoded tokens)",
            "recomputed tokens per trained token",
            "trained samples/time (× async)",
            "trained tokens/time (× async)",
        ),
        [(r[0], *r[5:]) for r in rows],
        note="Wasted tokens are those of dropped samples and the partial work of aborted "
        "(`restart`) rollouts. Throughputs are trained samples (or their tokens) per token time, "
        "divided by the same rate of *async, no bound*; a slot decodes one token per token time.",
    )
    restart = next(r for r in rows if r[0] == "partial: restart")
    section.text(
        "Admission control drops nothing, so it keeps the launched length law (the check below), but "
        "bounds staleness only on average; `restart` bounds it by throwing work away: it aborts "
        "every rollout in flight at each publication, so only rollouts shorter than one step time "
        "finish. It trains more *samples* per time than async "
        f"({fmt(restart[7])}×) because they are short (trained mean {fmt(restart[1])} × E[L]), "
        f"but fewer *tokens* ({fmt(restart[8])}×): its slots decode as many tokens per time as "
        f"async, and the share {fmt(restart[5])} of them is thrown away "
        f"(1 − {fmt(restart[5])} = {fmt(1 - restart[5])}, against {fmt(restart[8])}). "
        "`recompute` and `keep_kv` keep the work but train samples whose tokens come from several "
        "versions; staleness counts the oldest token (docs page `concepts/conventions`)."
    )
    if stalest:
        section.text(
            "**Why `recompute` has a large maximum staleness.** At every publication `recompute` "
            "re-prefills the prompt and the whole generated prefix under the new weights, at "
            f"`reprefill_token_time = {fmt(stalest['reprefill_token_time'])}` token times per "
            "token: a rollout `k` tokens in loses `0.1·k` of each step time Δ and advances only "
            "`Δ − 0.1·k` tokens per step, so rollouts approaching `10·Δ` tokens crawl, and longer "
            "ones cannot finish while steps stay that short (the cost is quadratic in the length). "
            f"The stalest trained sample here has {fmt(stalest['length'])} tokens, took "
            f"{fmt(stalest['generation_steps'])} mean step times "
            f"({fmt(stalest['mean_step_time'])} token times each) to generate and re-prefilled "
            f"{fmt(stalest['recomputed_tokens'])} tokens; since staleness counts its oldest token, "
            f"it is {stalest['staleness']} steps stale. This follows the simulator's documented "
            "semantics (docs page `concepts/sim-staleness-partial`), not a bug; mean staleness is "
            "close to async, and `keep_kv`, which pays nothing, stays near async's maximum."
        )
