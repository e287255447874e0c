"""Section 3: effort conditioning — ``k(b)``, ``L*(b)``, the frontier, and a mix of problems.

One class first (the special case): closed forms :func:`refimpl.effort_penalty`,
:func:`refimpl.optimal_length`, :func:`refimpl.effort_frontier`, against the argmax of
:func:`refimpl.shaped_reward` over a fine length grid (same quality model,
:func:`refimpl.saturating_quality`) and one effort-conditioned toy policy trained by policy gradient
(:func:`refimpl.train_effort_policy`).

Then a mix of problems (difficulty classes with their own ``λ_d``): the adaptive frontier
(:func:`refimpl.effort_frontier` with ``weights``, :func:`refimpl.frontier_quality`), the fixed-budget
curve (:func:`refimpl.budget_frontier`), their gap (:func:`refimpl.adaptive_gap`) for a few mixes
including log-normal ``λ`` (:func:`refimpl.difficulty_mix`), every published penalty of
:mod:`refimpl.penalties` on the mix, and one checkpoint trained on the mix, conditioned on the effort
and on the problem with Bernoulli successes (:func:`refimpl.train_conditioned_policy`). A penalty's
point on a mix is the per-class length that a policy maximising that penalty's expected reward would
choose (a grid argmax per class), averaged with the class weights; Kimi k1.5's reward depends on the
group's lengths and has no fixed length (EM6), so it is trained instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

import refimpl
from refimpl.lab._plot import COLORS, closed, new_figure, sim
from refimpl.lab.config import LabConfig
from refimpl.lab.effort_mix import (
    GAP_MIXES,
    MIX,
    MIX_PENALTY,
    PenaltyPoint,
    kimi_points,
    mix_part,
    penalty_points,
)
from refimpl.lab.report import Section, fmt

__all__ = [
    "GAP_MIXES",
    "MIX",
    "MIX_PENALTY",
    "PROBLEM",
    "PenaltyPoint",
    "build",
    "kimi_points",
    "penalty_points",
]

#: The quality model and penalty of the section (the effort module's documented example problem).
PROBLEM = {"q_max": 1.0, "lam": 100.0, "k0": 0.005, "b_min": 0.0, "tau": 1.0}
B_MAX = 4.0
#: Policy-gradient steps of the effort-conditioned toy policy.
POLICY_STEPS = 600


def build(section: Section, config: LabConfig, progress: Callable[[str], None]) -> None:
    """Fill the effort section."""
    p = PROBLEM
    section.metric("problem", {**p, "b_max": B_MAX})
    section.text(
        "The effort penalty prices every generated token at `k(b) = k0·exp(−(b − b_min)/τ)`; the "
        "shaped reward is `Q(ℓ) − k(b)·ℓ`. Under the saturating quality model "
        "`Q(ℓ) = q_max·(1 − exp(−ℓ/λ))` the best length is `L*(b) = λ·ln(q_max/(λ·k(b)))`: linear in "
        f"the effort with slope `λ/τ`. Here `q_max = {fmt(p['q_max'])}`, `λ = {fmt(p['lam'])}` tokens, "
        f"`k0 = {fmt(p['k0'])}`, `τ = {fmt(p['tau'])}`, efforts `b ∈ [{fmt(p['b_min'])}, {fmt(B_MAX)}]`."
    )

    _frontier(section, progress, _one_class(section, config, progress))
    mix_part(section, config, progress)
    section.takeaway(
        "The best length grows by {optimal_length_slope} tokens per unit of effort, and one "
        "policy trained on every effort level stays within "
        "{policy_max_relative_length_error:%} of it; on a mix of easy, medium and hard problems "
        "one checkpoint sits at most {conditioned_policy_max_distance} in quality below the "
        "adaptive frontier.",
        "Conditioning on the effort (and the problem) buys more quality per token than a fixed "
        "budget; the published length penalties fall short of the frontier by up to "
        "{worst_penalty_shortfall} in quality on the mix.",
    )


class _OneClass(NamedTuple):
    """What the one-class part measured, which the frontier reuses."""

    policy: Any
    b_line: NDArray[np.float64]
    b_pts: NDArray[np.float64]
    l_pts: NDArray[np.float64]
    argmax: NDArray[np.float64]
    policy_len: NDArray[np.float64]


def _one_class(section: Section, config: LabConfig, progress: Callable[[str], None]) -> _OneClass:
    """k(b) and L*(b): the closed forms against a grid argmax and a trained toy policy."""
    p = PROBLEM
    penalty = {k: p[k] for k in ("k0", "b_min", "tau")}
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
    policy = _trained_policy(config, progress)
    policy_len = policy.mean_length(b_pts)
    l_pts = refimpl.optimal_length(b_pts, **p)

    fig, (ax1, ax2) = new_figure(2)
    closed(ax1, b_line, k_line, label="k(b) = k0·exp(−(b − b_min)/τ)")
    ax1.set_yscale("log")
    for j in range(1, int(B_MAX) + 1):
        ax1.axvline(p["b_min"] + j * p["tau"], color="0.7", linewidth=0.8, zorder=0)
    ax1.set_title("Price per token k(b): ÷ e per τ of effort")
    ax1.set_xlabel("effort b")
    ax1.set_ylabel("k(b): reward per token (log scale)")
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
        label=f"trained toy policy E[ℓ | b] ({POLICY_STEPS} steps)",
    )
    ax2.set_title("Optimal length L*(b): linear, slope λ/τ")
    ax2.set_xlabel("effort b")
    ax2.set_ylabel("length (tokens)")
    ax2.legend()
    section.figure(
        fig,
        "penalty-and-length",
        "Left: the penalty k(b), the reward charged per generated token; between two grey "
        "lines (one τ of effort apart) it falls by a factor e. Right: the closed form L*(b) "
        "(line) against the numerical argmax of the shaped reward (squares) and the mean length "
        "of one policy trained on all efforts (dots): all three lie on one straight line of "
        "slope λ/τ tokens per unit of effort.",
    )

    rel = float(np.max(np.abs(policy_len / l_pts - 1.0)))
    slope = float((l_pts[-1] - l_pts[0]) / (b_pts[-1] - b_pts[0]))
    section.metric("policy_max_relative_length_error", rel)
    section.metric("optimal_length_slope", slope)
    section.headline(
        f"the optimal length grows by {fmt(slope)} tokens per unit of effort; one policy trained "
        f"on all efforts stays within {fmt(100 * rel, 2)}% of L*(b)."
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
    return _OneClass(policy, b_line, b_pts, l_pts, argmax, policy_len)


def _trained_policy(config: LabConfig, progress: Callable[[str], None]) -> Any:
    """The effort-conditioned toy policy, trained by policy gradient on the section's problem."""
    p = PROBLEM
    progress("training the effort-conditioned toy policy (policy gradient)")
    policy = refimpl.train_effort_policy(
        q_max=p["q_max"],
        lam=p["lam"],
        k0=p["k0"],
        b_min=p["b_min"],
        tau=p["tau"],
        b_max=B_MAX,
        rng=config.rng(3),
        steps=POLICY_STEPS,
    )
    return policy


def _frontier(section: Section, progress: Callable[[str], None], one: _OneClass) -> None:
    """The cost/quality frontier: the closed form, the trained policy and the published penalties."""
    p = PROBLEM
    penalty = {k: p[k] for k in ("k0", "b_min", "tau")}
    policy, b_line, b_pts, l_pts, argmax, policy_len = one
    progress("cost/quality frontier")
    front_line = refimpl.effort_frontier(b_line, **p)
    front_pts = refimpl.effort_frontier(b_pts, **p)
    pol = policy.evaluate(b_pts)
    fig, (ax,) = new_figure(1, width=7.0, height=4.6)
    closed(ax, front_line.cost, front_line.quality, label="analytic frontier (L*(b), Q(L*(b)))")
    sim(ax, pol.cost, pol.quality, color=COLORS[1], label="trained toy policy, one point per b")
    published = _published_points(section)
    ell_all = np.linspace(0.0, 700.0, 300)
    ax.plot(
        ell_all,
        refimpl.saturating_quality(ell_all, q_max=p["q_max"], lam=p["lam"]),
        color="0.6",
        linestyle=":",
        linewidth=1.5,
        label="quality model Q(ℓ), any fixed length",
    )
    families = list(dict.fromkeys(name for name, _, _ in published))
    markers = ("D", "^", "v", "P")
    for i, fam in enumerate(families):
        pts = [(c, q) for name, c, q in published if name == fam]
        ax.plot(
            [c for c, _ in pts],
            [q for _, q in pts],
            marker=markers[i % 4],
            linestyle="none",
            color=COLORS[2 + i],
            markersize=8,
            markerfacecolor="none",
            markeredgewidth=1.6,
            label=f"{fam}: one optimum per setting",
        )
    costs = np.concatenate([pol.cost, [c for _, c, _ in published]])
    quals = np.concatenate([pol.quality, [q for _, _, q in published]])
    front_idx = refimpl.pareto_front(costs, quals)
    ax.set_title("Cost/quality frontier under the same quality model")
    ax.set_xlabel("expected length (tokens)")
    ax.set_ylabel(f"expected quality Q (max {fmt(p['q_max'])})")
    ax.legend(loc="lower right")
    section.figure(
        fig,
        "frontier",
        "The analytic frontier (line), the trained policy's points (one per effort value of the "
        "same checkpoint) and, as hollow markers, where each published penalty puts the optimum "
        "for four settings of its knob.",
    )
    section.metric("pareto_front_indices", front_idx.tolist())
    section.text(
        "Under a fixed-length quality model every method lands on the same curve `Q(ℓ)`: what "
        "differs is which point each knob can reach. The effort price moves the optimum linearly "
        "with `b` across the whole range; DAPO's ramp only acts near its cap, L1-Exact overshoots "
        "every target below the length its own price `α` would choose, and the cosine schedule "
        f"moves with its horizon `L`. All points lie on one increasing curve, so `pareto_front` keeps "
        f"{len(front_idx)} of the {costs.size} trained-policy and published points."
    )
    section.table(
        "effort-table",
        "Closed form vs numerics, per effort b",
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
        note="b: effort (dimensionless); k(b): reward charged per generated token; L*(b), the "
        "grid argmax and the policy's mean length E[ℓ|b]: tokens; Q: expected quality, at most "
        "q_max = 1.",
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


def _capped(
    reward: NDArray[np.float64], grid: NDArray[np.float64], cap: float
) -> NDArray[np.float64]:
    """The reward with lengths beyond the generation cap made unreachable."""
    out: NDArray[np.float64] = np.where(grid <= cap, reward, -np.inf)
    return out


def _published_points(section: Section) -> list[tuple[str, float, float]]:
    """Where each published penalty puts the optimum under the same quality model.

    ``Q(ℓ)`` is read as the probability of a correct answer; the expected reward of a response of
    length ``ℓ`` is ``Q(ℓ)·r(ℓ, correct) + (1 − Q(ℓ))·r(ℓ, wrong)`` with ``r`` the library's penalty
    (plus the correctness reward where the source adds one). Its argmax over a fine grid is the
    length that penalty trains towards; the point is ``(ℓ*, Q(ℓ*))``.
    """
    p = PROBLEM
    grid = np.arange(0.0, 1000.0 + 0.5, 0.5)
    quality = refimpl.saturating_quality(grid, q_max=p["q_max"], lam=p["lam"])
    yes = np.ones(grid.size, dtype=bool)
    no = np.zeros(grid.size, dtype=bool)
    alpha = 0.0003

    def expected(
        r_correct: NDArray[np.float64], r_wrong: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        out: NDArray[np.float64] = quality * r_correct + (1.0 - quality) * r_wrong
        return out

    families: list[tuple[str, str, list[tuple[float, NDArray[np.float64]]]]] = [
        (
            "DAPO overlong (L_cache = L_max/4)",
            "L_max",
            [
                (
                    m,
                    _capped(
                        quality
                        + refimpl.dapo_overlong_penalty(grid, max_length=m, cache_length=m / 4),
                        grid,
                        m,
                    ),
                )
                for m in (128.0, 256.0, 384.0, 512.0)
            ],
        ),
        (
            "cosine (open-r1 defaults)",
            "L",
            [
                (
                    m,
                    _capped(
                        expected(
                            refimpl.cosine_length_reward(grid, yes, max_length=m),
                            refimpl.cosine_length_reward(grid, no, max_length=m),
                        ),
                        grid,
                        m,
                    ),
                )
                for m in (128.0, 256.0, 512.0, 1024.0)
            ],
        ),
        (
            f"L1-Exact (α = {alpha:g})",
            "n_gold",
            [
                (
                    t,
                    expected(
                        refimpl.l1_exact_reward(grid, yes, t, alpha=alpha),
                        refimpl.l1_exact_reward(grid, no, t, alpha=alpha),
                    ),
                )
                for t in (100.0, 200.0, 400.0, 600.0)
            ],
        ),
        (
            f"L1-Max (α = {alpha:g}, δ = 0.5)",
            "n_gold",
            [
                (
                    t,
                    expected(
                        refimpl.l1_max_reward(grid, yes, t, alpha=alpha),
                        refimpl.l1_max_reward(grid, no, t, alpha=alpha),
                    ),
                )
                for t in (100.0, 200.0, 400.0, 600.0)
            ],
        ),
    ]
    points: list[tuple[str, float, float]] = []
    rows = []
    for family, knob, settings in families:
        for value, reward in settings:
            i = int(np.argmax(reward))
            points.append((family, float(grid[i]), float(quality[i])))
            rows.append((family, f"{knob} = {value:g}", float(grid[i]), float(quality[i])))
    section.table(
        "published-penalties",
        "Published length penalties under the same quality model: the length each setting trains "
        "towards (argmax of the expected reward on a 0.5-token grid; DAPO's L_max and the cosine's L "
        "are generation caps) and its quality",
        ("penalty", "setting", "optimal length (tokens)", "quality Q"),
        rows,
    )
    return points
