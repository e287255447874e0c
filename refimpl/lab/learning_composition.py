"""The learning section's exact finite-N law of which samples continuous dispatch trains, against
the simulator."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
from scipy import stats

from refimpl import learning as lrn
from refimpl import learning_async as la
from refimpl.lab._common import TOL_RULE, Z_TOL, seed
from refimpl.lab._plot import COLORS, legend_below, new_figure
from refimpl.lab.config import LabConfig
from refimpl.lab.learning_policy import STREAM
from refimpl.lab.report import Section

# -- which samples continuous dispatch trains: the exact finite-N law against the simulator ---------
COMPOSITION_PMF = (Fraction(1, 2), Fraction(1, 4), Fraction(1, 4))
COMPOSITION_CASES: tuple[tuple[str, int | None], ...] = (("no mask", None), ("η = 1", 1))
COMPOSITION: dict[str, Any] = {"slots": 3, "batch": 2, "steps": 6, "first_step": 2}
COMPOSITION_REPS = (400, 4_000)
#: false-failure rate of each chi-square check, the section's normal-approximation rate at 4.5 SE
CHI2_ALPHA = float(2 * stats.norm.sf(Z_TOL))


def _law_moments(values: list[tuple[float, Fraction]]) -> tuple[float, float]:
    mean = sum((q * Fraction(v) for v, q in values), Fraction(0))
    second = sum((q * Fraction(v) ** 2 for v, q in values), Fraction(0))
    return float(mean), float(np.sqrt(float(second - mean**2)))


def _chi_square(section: Section, key: str, what: str, chi: Any, reps: int) -> None:
    """One check of a Pearson chi-square result (:class:`refimpl.learning_async.ChiSquare`) of
    ``reps`` multinomial draws: the statistic against its quantile, the rule saying which."""
    section.check(
        key,
        what,
        closed_form=0.0,
        simulation=chi.statistic,
        tolerance=chi.threshold,
        rule=(
            f"Pearson X² of {reps} multinomial draws (one per seeded run) against the exact law, "
            f"{chi.cells} cells after pooling expected counts < 5; fails above the χ²({chi.df}) "
            f"quantile at 1 − {CHI2_ALPHA:.1e}"
        ),
    )


def _composition_checks(section: Section, config: LabConfig) -> None:
    """The joint (length, staleness) law and the drops of continuous dispatch at N = 3, exactly.

    :func:`refimpl.learning_async.continuous_dispatch_law` against one draw from each of ``R``
    independent seeded simulations (multinomial counts): Pearson's chi-square of the cells, and
    the mean length, staleness and drops per step against their exact values (SE from the exact
    variance). The same counts are tested against wrong variants of the model (table
    *composition-variants*).
    """
    section.text(
        "**Which samples continuous dispatch trains, exactly.** At small N the composition itself "
        "has an exact law: `refimpl.learning_async.continuous_dispatch_law` follows the ordered "
        "states of the slots (length, remaining time, staleness) through every instant, with the "
        "simulator's rules (completions at one instant in launch order, a launch at a publication "
        "sees the old version), in exact rational arithmetic, and gives the joint law of a trained "
        "sample's (length, staleness) and of the samples dropped per step. Each of R independent "
        "seeded simulations contributes one draw (a uniformly chosen trained sample and step), so "
        "the counts are multinomial: Pearson's X² against the exact law, at the section's false-"
        f"failure rate {CHI2_ALPHA:.1e}, and the mean length, staleness and drops against their "
        "exact values. The same counts reject wrong variants of the rules (table "
        "composition-variants); the fluid model, first order, is shown beside."
    )

    reps = COMPOSITION_REPS[0] if config.quick else COMPOSITION_REPS[1]
    fig, axes = new_figure(len(COMPOSITION_CASES) + 1, height=4.6)
    variant_rows: list[tuple[Any, ...]] = []
    for ci, (label, eta) in enumerate(COMPOSITION_CASES):
        law = la.continuous_dispatch_law(list(COMPOSITION_PMF), eta=eta, **COMPOSITION)
        cells = la.simulated_dispatch_cells(
            list(COMPOSITION_PMF), eta=eta, replications=reps,
            seed=seed(config, STREAM, 900 + ci), **COMPOSITION,
        )  # fmt: skip
        chi = _sample_checks(section, label, eta, law, cells, reps)
        if eta is not None:
            _drop_checks(section, label, eta, law, cells, reps, axes[-1])
        _cells_panel(section, axes[ci], label, eta, law, cells, reps)
        variant_rows += _variant_rows(label, eta, law, cells, chi)
    _composition_report(section, fig, axes, variant_rows, reps)


def _tag(eta: int | None) -> str:
    return "none" if eta is None else f"eta{eta}"


def _sample_checks(
    section: Section, label: str, eta: int | None, law: Any, cells: Any, reps: int
) -> Any:
    """X² of the trained (length, staleness) cells and their mean length and staleness."""
    tag, n, b = _tag(eta), COMPOSITION["slots"], COMPOSITION["batch"]
    chi = la.chi_square_check(cells.sample, law.sample, alpha=CHI2_ALPHA)
    _chi_square(
        section,
        f"composition-{tag}-chi2",
        f"X², (length, staleness) of a trained sample, N = {n}, B = {b}, {label}",
        chi,
        reps,
    )
    sim = cells.sample.astype(np.float64)
    ell_idx, s_idx = np.nonzero(sim >= 0)
    counts = sim[ell_idx, s_idx]
    flat = [(ell, s, q) for ell, row in enumerate(law.sample, start=1) for s, q in enumerate(row)]
    for name, pick, exact_values in (
        ("length", ell_idx + 1, [(float(ell), q) for ell, _, q in flat]),
        ("staleness", s_idx, [(float(s), q) for _, s, q in flat]),
    ):
        mu, sd = _law_moments(exact_values)
        mean = float(np.sum(counts * pick) / reps)
        section.check(
            f"composition-{tag}-{name}",
            f"mean {name} of a trained sample, N = {n}, B = {b}, {label}",
            closed_form=mu,
            simulation=mean,
            tolerance=Z_TOL * sd / np.sqrt(reps),
            rule=TOL_RULE + " (SE from the exact law's variance)",
        )
    return chi


def _drop_checks(
    section: Section, label: str, eta: int, law: Any, cells: Any, reps: int, drop_ax: Any
) -> None:
    """X² and mean of the samples dropped per step, and their panel."""
    tag, n, b = _tag(eta), COMPOSITION["slots"], COMPOSITION["batch"]
    _chi_square(
        section,
        f"composition-{tag}-dropped-chi2",
        f"X², samples dropped in a step, N = {n}, B = {b}, {label}",
        la.chi_square_check(cells.dropped, law.dropped, alpha=CHI2_ALPHA),
        reps,
    )
    mu, sd = _law_moments([(float(d), q) for d, q in enumerate(law.dropped)])
    drawn = cells.dropped.astype(np.float64)
    section.check(
        f"composition-{tag}-dropped",
        f"mean samples dropped per step, N = {n}, B = {b}, {label}",
        closed_form=mu,
        simulation=float(np.sum(drawn * np.arange(drawn.size)) / reps),
        tolerance=Z_TOL * sd / np.sqrt(reps),
        rule=TOL_RULE + " (SE from the exact law's variance)",
    )
    section.metric(f"composition_{tag}_dropped_mean", float(law.dropped_mean))
    d = np.arange(len(law.dropped))
    exact_d = np.array([float(q) for q in law.dropped])
    drop_ax.bar(d, exact_d, width=0.7, color="0.85", label="exact")
    freq = np.zeros(len(law.dropped))
    freq[: min(drawn.size, freq.size)] = drawn[: freq.size] / reps
    drop_ax.errorbar(
        d,
        freq,
        yerr=2 * np.sqrt(exact_d * (1 - exact_d) / reps),
        fmt="o",
        color=COLORS[0],
        ms=4,
        capsize=2,
        label=f"simulation ({reps} runs, ±2 SE)",
    )
    drop_ax.set_xlabel(f"samples dropped in a step ({label})")
    drop_ax.set_ylabel("probability")
    drop_ax.set_title("Drops per step")


def _cells_panel(
    section: Section, ax: Any, label: str, eta: int | None, law: Any, cells: Any, reps: int
) -> None:
    """The exact, simulated and fluid-model (length, staleness) cells of one case."""
    tag, n, b = _tag(eta), COMPOSITION["slots"], COMPOSITION["batch"]
    pmf, m = list(COMPOSITION_PMF), len(COMPOSITION_PMF)
    sim = cells.sample.astype(np.float64)
    # the fluid model of the same case (first order; a labelled model, not a check)
    delta = float(lrn.fluid_step_time(np.array([float(x) for x in pmf]), slots=n, batch=b, eta=eta))
    s_cols = len(law.sample[0])
    reach = max(s_cols - 1, int(np.ceil(m / delta)))
    fl = lrn.fluid_staleness_pmf(
        np.arange(1, m + 1, dtype=np.float64), step_time=delta, max_staleness=reach
    )
    fluid = np.zeros((m, max(s_cols, reach + 1)))
    fluid[:, : reach + 1] = np.array([float(x) for x in pmf])[:, None] * fl
    if eta is not None:
        fluid[:, eta + 1 :] = 0.0
    fluid = fluid[:, :s_cols]
    fluid /= fluid.sum()
    exact = np.array([[float(q) for q in row] for row in law.sample])
    freq = np.zeros_like(exact)
    rows_c = min(sim.shape[1], exact.shape[1])
    freq[:, :rows_c] = sim[:, :rows_c] / reps
    xs = np.arange(exact.size)
    ax.bar(xs, exact.ravel(), width=0.7, color="0.85", label="exact (finite N)")
    ax.plot(xs, fluid.ravel(), "x", color=COLORS[3], ms=7, label="fluid model")
    ax.errorbar(
        xs,
        freq.ravel(),
        yerr=2 * np.sqrt(exact.ravel() * (1 - exact.ravel()) / reps),
        fmt="o",
        color=COLORS[0],
        ms=4,
        capsize=2,
        label=f"simulation ({reps} runs, ±2 SE)",
    )
    ax.set_xticks(
        xs,
        [f"{ell},{s}" for ell in range(1, m + 1) for s in range(exact.shape[1])],
        fontsize=9,
        rotation=60,
    )
    ax.set_xlabel("cell (length ℓ, staleness s)")
    ax.set_ylabel("probability")
    ax.set_title(f"Trained (ℓ, s), {label}")
    tv_fluid = 0.5 * float(np.abs(fluid - exact).sum())
    section.metric(f"composition_{tag}_fluid_tv", tv_fluid)
    section.metric(f"composition_{tag}_states", law.states)


def _variant_rows(
    label: str, eta: int | None, law: Any, cells: Any, chi: Any
) -> list[tuple[Any, ...]]:
    """The same counts against wrong variants of the rules: X² and threshold of each."""
    pmf = list(COMPOSITION_PMF)
    variant_rows: list[tuple[Any, ...]] = []
    variant_rows.append((label, "simulator's rules (the check)", chi.statistic, chi.threshold))
    variants: list[tuple[str, Any]] = [
        (
            "newest completion first",
            la.continuous_dispatch_law(pmf, eta=eta, completion_order="reverse", **COMPOSITION),
        ),
        (
            "launch at a publication sees the new version",
            la.continuous_dispatch_law(pmf, eta=eta, launch_version="new", **COMPOSITION),
        ),
    ]
    if eta is not None:
        variants.append(
            (
                f"mask at η = {eta + 1}",
                la.continuous_dispatch_law(pmf, eta=eta + 1, **COMPOSITION),
            )
        )
    variants.append(
        (
            "staleness one higher",
            law._replace(sample=tuple((Fraction(0), *r) for r in law.sample)),
        )
    )
    for vname, vlaw in variants:
        a = la.chi_square_check(cells.sample, vlaw.sample, alpha=CHI2_ALPHA)
        stat, thr = a.statistic, a.threshold
        if eta is not None:
            bd = la.chi_square_check(cells.dropped, vlaw.dropped, alpha=CHI2_ALPHA)
            if bd.statistic / bd.threshold > stat / thr:
                stat, thr = bd.statistic, bd.threshold
        if a.impossible:
            stat = float("inf")
        variant_rows.append((label, vname, stat, thr))
    return variant_rows


def _composition_report(
    section: Section, fig: Any, axes: Any, variant_rows: list[tuple[Any, ...]], reps: int
) -> None:
    """The figure and the variants table."""
    n, b = COMPOSITION["slots"], COMPOSITION["batch"]
    handles, _ = axes[0].get_legend_handles_labels()
    legend_below(fig, handles, ncol=3)  # in a panel, it covered the tallest cells
    section.figure(
        fig,
        "composition",
        f"Which samples continuous dispatch trains at finite N: N = {n} slots, B = {b}, lengths "
        f"1, 2, 3 with probabilities 1/2, 1/4, 1/4, trainer steps 2–5 of a cold start, no mask and "
        f"a mask at η = 1. Grey bars: the exact law of a trained sample's (length, staleness) "
        f"(`refimpl.learning_async.continuous_dispatch_law`, Fractions); dots: one draw from each "
        f"of {reps} independent seeded simulations (±2 SE); crosses: the fluid model (first order). "
        f"Right: the exact law of the samples dropped in a step, at η = 1.",
    )
    section.table(
        "composition-variants",
        "The same simulated counts against the exact law and against wrong variants of it "
        "(X² and the rejection threshold; a variant is rejected when X² exceeds it, in the "
        "(length, staleness) cells or, with a mask, in the drops per step)",
        ("case", "model", "X²", "threshold"),
        variant_rows,
        note=(
            "∞: the simulation put samples in a cell the variant gives probability 0. The wrong "
            "variants must all be rejected for the check to tell the rules apart."
        ),
    )
    worst = min(r[2] / r[3] for r in variant_rows if r[1] != "simulator's rules (the check)")
    section.metric("composition_min_variant_ratio", worst)
