"""Section 3: effort conditioning — ``k(b)``, ``L*(b)`` and the cost/quality frontier.

Closed forms: :func:`refimpl.effort_penalty`, :func:`refimpl.optimal_length`,
:func:`refimpl.effort_frontier`. Their numerical partners: the argmax of
:func:`refimpl.shaped_reward` over a fine length grid (same quality model,
:func:`refimpl.saturating_quality`), and one effort-conditioned toy policy trained by policy gradient
(:func:`refimpl.train_effort_policy`) and evaluated with :meth:`refimpl.EffortPolicy.evaluate`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import refimpl
from refimpl.lab._plot import COLORS, closed, new_figure, sim
from refimpl.lab.config import LabConfig
from refimpl.lab.report import Section, fmt

__all__ = ["PROBLEM", "build"]

#: The quality model and penalty of the section (the effort module's documented example problem).
PROBLEM = {"q_max": 1.0, "lam": 100.0, "k0": 0.005, "b_min": 0.0, "tau": 1.0}
B_MAX = 4.0


def build(section: Section, config: LabConfig, progress: Callable[[str], None]) -> None:
    """Fill the effort section."""
    p = PROBLEM
    section.metric("problem", {**p, "b_max": B_MAX})
    penalty = {k: p[k] for k in ("k0", "b_min", "tau")}
    section.text(
        "The effort penalty prices every generated token at `k(b) = k0·exp(−(b − b_min)/τ)`; the "
        "shaped reward is `Q(ℓ) − k(b)·ℓ`. Under the saturating quality model "
        "`Q(ℓ) = q_max·(1 − exp(−ℓ/λ))` the best length is `L*(b) = λ·ln(q_max/(λ·k(b)))`: linear in "
        f"the effort with slope `λ/τ`. Here `q_max = {fmt(p['q_max'])}`, `λ = {fmt(p['lam'])}` tokens, "
        f"`k0 = {fmt(p['k0'])}`, `τ = {fmt(p['tau'])}`, efforts `b ∈ [{fmt(p['b_min'])}, {fmt(B_MAX)}]`."
    )

    # -- k(b) and L*(b): closed form vs grid argmax vs trained policy -----------------------------
    progress("k(b), L*(b): closed form vs grid argmax")
    b_line = np.linspace(p["b_min"], B_MAX, 200)
    k_line = refimpl.effort_penalty(b_line, **penalty)
    l_line = refimpl.optimal_length(b_line, **p)
    b_pts = np.linspace(p["b_min"], B_MAX, 9)
    step = 0.25 if config.quick else 0.05
    grid = np.arange(0.0, 2000.0 + step, step)
    quality_grid = refimpl.saturating_quality(grid, q_max=p["q_max"], lam=p["lam"])
    argmax = np.array(
        [
            grid[int(np.argmax(refimpl.shaped_reward(quality_grid, grid, float(b), **penalty)))]
            for b in b_pts
        ]
    )
    progress("training the effort-conditioned toy policy (policy gradient)")
    rng = config.rng(3)
    steps = 600
    policy = refimpl.train_effort_policy(**p, b_max=B_MAX, rng=rng, steps=steps)
    policy_len = policy.mean_length(b_pts)
    l_pts = refimpl.optimal_length(b_pts, **p)

    fig, (ax1, ax2) = new_figure(2)
    closed(ax1, b_line, k_line, label="k(b) = k0·exp(−(b − b_min)/τ)")
    ax1.set_yscale("log")
    for j in range(1, int(B_MAX) + 1):
        ax1.axvline(p["b_min"] + j * p["tau"], color="0.7", linewidth=0.8, zorder=0)
    ax1.set_title("Effort penalty: each τ of effort divides the price by e")
    ax1.set_xlabel("effort b")
    ax1.set_ylabel("price per token k(b) (log scale)")
    ax1.legend()
    closed(ax2, b_line, l_line, label="L*(b), closed form")
    sim(
        ax2,
        b_pts,
        argmax,
        color=COLORS[0],
        marker="s",
        markersize=9,
        markerfacecolor="none",
        label="argmax of shaped reward (grid)",
    )
    sim(
        ax2,
        b_pts,
        policy_len,
        color=COLORS[1],
        label=f"trained toy policy E[ℓ | b] ({steps} steps)",
    )
    ax2.set_title("Optimal length grows linearly with effort (slope λ/τ)")
    ax2.set_xlabel("effort b")
    ax2.set_ylabel("length (tokens)")
    ax2.legend()
    section.figure(
        fig,
        "penalty-and-length",
        "Left: the penalty k(b). Right: the closed form L*(b) (line) against the numerical argmax "
        "of the shaped reward and the mean length of one policy trained on all efforts (markers).",
    )

    for b, lc, la in zip(b_pts, l_pts, argmax, strict=True):
        section.check(
            f"L*-grid-b{b:g}",
            f"L*(b={b:g}) vs grid argmax (tokens)",
            closed_form=lc,
            simulation=la,
            tolerance=step,
            rule="grid argmax: one grid step",
        )
    for b, lc, lp in zip(b_pts[::2], l_pts[::2], policy_len[::2], strict=True):
        section.check(
            f"L*-policy-b{b:g}",
            f"L*(b={b:g}) vs trained policy mean length (tokens)",
            closed_form=lc,
            simulation=lp,
            tolerance=0.05 * lc,
            rule="trained policy: 5% of L*(b) (the effort module documents < 2.5% at 600 steps)",
        )

    # -- the frontier ---------------------------------------------------------------------------
    progress("cost/quality frontier")
    front_line = refimpl.effort_frontier(b_line, **p)
    front_pts = refimpl.effort_frontier(b_pts, **p)
    pol = policy.evaluate(b_pts)
    fig, (ax,) = new_figure(1, width=7.0, height=4.6)
    closed(ax, front_line.cost, front_line.quality, label="analytic frontier (L*(b), Q(L*(b)))")
    sim(ax, pol.cost, pol.quality, color=COLORS[1], label="trained toy policy, one point per b")
    published = _published_points(section)
    for i, (name, cost, quality) in enumerate(published):
        ax.plot(
            cost,
            quality,
            marker="D",
            linestyle="none",
            color=COLORS[2 + i % 5],
            label=name,
            markersize=7,
        )
    costs = np.concatenate([pol.cost, [c for _, c, _ in published]])
    quals = np.concatenate([pol.quality, [q for _, _, q in published]])
    front_idx = refimpl.pareto_front(costs, quals)
    ax.set_title("Cost/quality frontier under the same quality model")
    ax.set_xlabel("expected length (tokens)")
    ax.set_ylabel(f"expected quality Q (max {fmt(p['q_max'])})")
    ax.legend(loc="lower right", fontsize=8)
    section.figure(
        fig,
        "frontier",
        "The analytic frontier (line) and the trained policy's points (markers), each point one "
        "effort value of the same checkpoint.",
    )
    section.metric("pareto_front_indices", front_idx.tolist())
    section.table(
        "effort-table",
        "Closed form vs numerics, per effort",
        ("b", "k(b)", "L*(b)", "grid argmax", "policy E[ℓ|b]", "Q(L*(b))", "policy E[Q|b]"),
        [
            (float(b), float(k), float(lc), float(la), float(lp), float(qa), float(qp))
            for b, k, lc, la, lp, qa, qp in zip(
                b_pts,
                refimpl.effort_penalty(b_pts, **penalty),
                l_pts,
                argmax,
                policy_len,
                front_pts.quality,
                pol.quality,
                strict=True,
            )
        ],
        digits=4,
    )
    for b, qa, qp in zip(b_pts[::2], front_pts.quality[::2], pol.quality[::2], strict=True):
        section.check(
            f"Q-policy-b{b:g}",
            f"Q(L*(b={b:g})) vs trained policy E[Q | b]",
            closed_form=qa,
            simulation=qp,
            tolerance=0.01 * p["q_max"],
            rule="trained policy quality: 1% of q_max (the effort module documents < 0.5%)",
        )


def _published_points(section: Section) -> list[tuple[str, float, float]]:
    return []
