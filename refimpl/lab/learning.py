"""Section: learning under asynchrony — what the length bias, staleness and corrections do to the gradient.

Closed forms: :mod:`refimpl.learning` (exact expected gradients on the finite support: first-k by
enumeration of batch compositions, the fluid model for continuous dispatch, every correction of
:mod:`refimpl.staleness`). Simulations: :func:`refimpl.sim.simulate` at a fixed policy (the
closed-form checks) and :func:`refimpl.learning.train_policy` (the training runs, whose batches the
simulator forms). The section is built in steps, one module each: the policy
(:mod:`refimpl.lab.learning_policy`), the exact gradients and their checks at a fixed policy
(:mod:`refimpl.lab.learning_exact`), the moving policy (:mod:`refimpl.lab.learning_moving`), the
finite-N composition (:mod:`refimpl.lab.learning_composition`), the estimators
(:mod:`refimpl.lab.learning_estimators`) and the training runs (:mod:`refimpl.lab.learning_runs`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from refimpl import learning as lrn
from refimpl.lab._plot import COLORS, label_points, legend_below, new_figure
from refimpl.lab.config import LabConfig
from refimpl.lab.learning_composition import _composition_checks
from refimpl.lab.learning_estimators import estimator_table
from refimpl.lab.learning_exact import (
    CARRY,
    IPW_CLIP,
    MASK_CLIP,
    _async_checks,
    _carry_checks,
    _first_k_checks,
    _gradient_table,
    _Pair,
)
from refimpl.lab.learning_exact import _cond_check as _cond_check
from refimpl.lab.learning_moving import _carry_lag_checks, _lag_checks
from refimpl.lab.learning_policy import LAG, PENALTY, M, _Policy
from refimpl.lab.learning_policy import THETA0 as THETA0
from refimpl.lab.learning_policy import _policy as _policy
from refimpl.lab.learning_policy import quality as quality
from refimpl.lab.learning_runs import training_runs
from refimpl.lab.report import Section, fmt

__all__ = ["build", "quality"]


def build(section: Section, config: LabConfig, progress: Callable[[str], None]) -> None:
    """Fill the learning section."""
    q = quality()
    rbar = q - PENALTY * np.arange(1, M + 1, dtype=np.float64)
    j_star, l_star = float(rbar.max()), int(np.argmax(rbar) + 1)
    _intro(section, j_star, l_star)
    progress("exact gradients under every dispatch and correction")
    rows, pol = _gradient_table(section, q)
    _bias_texts(section, q, pol, rows)
    _bias_figure(section, rows)
    estimator_table(section, pol.pmf, pol.scores, q, penalty=PENALTY, clip=IPW_CLIP)
    progress("closed forms against simulations at the fixed policy")
    pairs = _simulation_checks(section, config, q, pol, progress)
    _closed_vs_sim_figure(section, pairs)
    progress("training runs through the simulator")
    training_runs(section, config, q, j_star, l_star)
    section.metric("first_k_cosine", float(rows[1][1]))
    section.takeaway(
        "First-k's uncorrected gradient has cosine {first_k_cosine} to ∇J and pushes towards "
        "shorter outputs; Horvitz–Thompson weights remove the bias exactly with a constant "
        "baseline, but with the batch-mean baseline the gradient is scaled by "
        "{ht_batch_scale} and turned.",
        "Pair length weights with a baseline that does not depend on the batch, correct stale "
        "samples with the full sequence ratio, and check an estimator with "
        "refimpl.learning.estimator_status before training with it.",
    )
    section.text(
        "**When is asynchrony worth it?** The section *async-worth* answers on equal terms: the "
        "same slots, batch, optimizer steps and estimator for synchronous and asynchronous "
        "training of this toy policy, read on three clocks (steps, samples, wall-clock), with the "
        "throughput gain separated from the per-step cost of staleness and length bias."
    )
    section.headline(
        f"Learning: first-k's uncorrected gradient has cosine {fmt(rows[1][1])} to ∇J and pushes "
        f"towards shorter outputs; IPW with a constant baseline removes the bias exactly, with "
        f"the batch baseline it does not (estimator table); the async-worth section gives the "
        f"fair verdict."
    )


def _intro(section: Section, j_star: float, l_star: int) -> None:
    section.text(
        f"A toy policy whose length emerges token by token: at position t it stops with hazard "
        f"h_θ(t) = σ(θ₀ + θ₁ t/M) (M = {M}), so its length law is p_θ(ℓ) = h(ℓ) Π_{{t<ℓ}}(1 − h(t)) "
        f"and every token has a probability under every version (`refimpl.learning`). A rollout "
        f"succeeds with probability Q(ℓ) = 0.9 σ((ℓ − 7)/1.5) and pays {fmt(PENALTY)} per token "
        f"(the effort penalty k(b)ℓ/ℓ_scale). The best this family can do is to stop at "
        f"ℓ* = {l_star}: J* = {fmt(j_star)}. Everything at a fixed θ is exact (finite sums over the "
        f"support); the training runs use the batches that `refimpl.sim` forms."
    )


def _bias_texts(section: Section, q: Any, pol: _Policy, rows: list[tuple[Any, ...]]) -> None:
    # direction of the bias without a baseline (claim LRN3/LRN4's condition is on the advantage)
    raw = lrn.first_k_gradient(pol.pmf, pol.scores, q, n=8, k=4, penalty=PENALTY).mean
    raw_on = lrn.policy_gradient(pol.pmf, pol.scores, q, penalty=PENALTY).mean
    along_raw = float((np.asarray(raw) - np.asarray(raw_on)) @ pol.dlen / np.linalg.norm(pol.dlen))
    section.metric("first_k_bias_along_length_no_baseline", along_raw)
    fk = rows[1]
    section.text(
        f"**Does length bias push towards shorter outputs?** Yes here: first 4 of 8, uncorrected, "
        f"has cosine {fmt(fk[1])} to ∇J and a bias of {fmt(fk[3])} ‖∇J‖ along ∇E[L] with the "
        f"baseline, {fmt(along_raw / float(np.linalg.norm(pol.grad)))} ‖∇J‖ without. Claim LRN3 "
        f"gives the condition: the bias has a component ≥ 0 along a direction u whenever "
        f"ℓ ↦ A(ℓ) u·∇log p(ℓ) is non-increasing (A the advantage), because the trained law is "
        f"stochastically shorter; for a length-neutral positive advantage it always points to "
        f"shorter outputs, for a negative one (baseline above every reward) to longer ones (LRN4). "
        f"Inverse propensity (HT) removes the bias exactly (LRN1) at a variance "
        f"{fmt(rows[2][5] / max(rows[0][5], 1e-300))}× that of the on-policy batch (the rare long"
        f" rollouts get weights up to k/(nπ(M))); Hájek's self-normalisation tames the variance "
        f"and brings the bias back ({fmt(rows[3][4])} ‖∇J‖ against {fmt(fk[4])} uncorrected). "
        f"For stale behaviours, only the full sequence ratio restores the "
        f"direction exactly; token TIS, IcePop and decoupled PPO correct each token's own "
        f"probability, not those before it, and stay biased even without a cap (LRN2)."
    )
    clipped, carried, ipw0 = rows[4], rows[5], rows[-2]
    section.text(
        f"**Clipped IPW, carried leftovers, IPW for the mask.** Clipping the first-k weights at "
        f"C = {fmt(IPW_CLIP)} cuts the batch variance to {fmt(clipped[5])} ‖∇J‖² (HT: "
        f"{fmt(rows[2][5])}) and brings back a bias of {fmt(clipped[4])} ‖∇J‖. Carrying the "
        f"leftovers (first {CARRY[1]} of {CARRY[0]}, exact stationary chain) leaves no length bias "
        f"at all (relative bias {fmt(carried[4])}, LRN5): every launched rollout is trained once, "
        f"and the length bias becomes staleness, longer rollouts carried over more steps. Inverse "
        f"propensity for the mask (weights κ/keep(ℓ)) recovers only the lengths the mask can keep "
        f"(LRN6): at η = 0 it leaves a relative bias of {fmt(ipw0[4])} against "
        f"{fmt(rows[-5][4])} without the weights (stale behaviours as in the rows above): "
        f"unbiased on the kept lengths is not unbiased, when the lengths the mask never keeps "
        f"carry much of ∇J."
    )


def _bias_figure(section: Section, rows: list[tuple[Any, ...]]) -> None:
    fig, (ax1, ax2) = new_figure(2, height=6.2)
    colors = [COLORS[0]] + [COLORS[1]] * 5 + [COLORS[2]] * 7 + [COLORS[3]] * 5
    for i, r in enumerate(rows):
        ax1.scatter(r[4], r[5], color=colors[i], s=30, zorder=3)
    ax1.set_yscale("log")
    ax1.margins(x=0.1)  # room for the labels of the rightmost points
    # token TIS, IcePop and decoupled PPO coincide exactly: one label "9, 12, 13" for them
    label_points(ax1, [(r[4], r[5]) for r in rows], [str(i + 1) for i in range(len(rows))])
    ax1.set_xlabel("relative bias ‖E ĝ − ∇J‖/‖∇J‖ (exact)")
    ax1.set_ylabel("tr Cov(ĝ)/‖∇J‖² (exact)")
    ax1.set_title("Bias against variance, each dispatch × correction")
    y = np.arange(len(rows))
    ax2.barh(y, [r[3] for r in rows], color=colors)
    short = [
        f"{i + 1}. "
        + r[0].replace("async N/B = 2: ", "async: ").replace("first 4 of 8: ", "first-k: ")
        for i, r in enumerate(rows)
    ]
    ax2.set_yticks(y, short, fontsize=9)
    ax2.invert_yaxis()
    ax2.axvline(0.0, color="0.3", linewidth=1)
    ax2.set_xlabel("bias along ∇E[L] ÷ ‖∇J‖ (< 0: shorter)")
    ax2.set_title("Which way the bias pushes the length")
    from matplotlib.patches import Patch

    legend_below(
        fig,
        [
            Patch(color=COLORS[0], label="on-policy"),
            Patch(color=COLORS[1], label="first k of n"),
            Patch(color=COLORS[2], label="async, stale behaviour + correction"),
            Patch(color=COLORS[3], label="async, staleness mask"),
        ],
        ncol=4,
    )
    section.figure(
        fig,
        "bias-variance",
        "Left: each dispatch × correction at the fixed policy, its exact relative bias against "
        "the exact trace of its batch covariance (numbers as in the table's rows; an unbiased "
        "estimator sits at the left edge). Right: the bias's component along ∇E[L]: negative "
        "bars push the policy towards shorter outputs.",
    )


def _simulation_checks(
    section: Section, config: LabConfig, q: Any, pol: _Policy, progress: Callable[[str], None]
) -> list[_Pair]:
    """Every closed form or exact conditional mean against the simulated batches."""
    asy, asy_err = _async_checks(section, config, q, pol)
    lag_pairs, lag_err = _lag_checks(section, config, q, pol)
    carry_pairs, carry_err = _carry_lag_checks(section, config, q, pol)
    pairs = (
        [_Pair(*p) for p in _first_k_checks(section, config, q, pol)]
        + [_Pair(*p) for p in _carry_checks(section, config, q, pol)]
        + asy
        + lag_pairs
        + carry_pairs
    )
    model_errors = asy_err + lag_err + carry_err
    sep = float(section.metrics["lag_min_separation"])
    section.text(
        "**What the simulator is checked against.** First k of n and continuous dispatch without "
        "a mask: their exact closed forms. The mask, the moving policy and carried leftovers under "
        "it: the exact conditional mean given the trained samples: each sample's length, "
        "behaviour and target version fix its weighted score G (from `corrected_scores`, not the "
        "trainer's code), so the mean batch gradient has mean Σ(R̄(ℓ) − b)G/(B·n_b) and variance "
        "Σ Q(1 − Q)G²/(B·n_b)², and the check holds it to 4.5 of those standard errors. Weighted "
        f"by any other correction's weights, the same samples are at least {fmt(sep)} standard "
        "errors away (table lag-separation): the check tells the corrections apart. Which lengths "
        "and staleness the simulator trains at these sizes (32 slots) is predicted only by the "
        "fluid model and the fixed-θ chain, whose errors are measured in the table below, not "
        "tolerated; at small N it is checked exactly (figure composition, below)."
    )
    section.table(
        "model-errors",
        "Labelled models beside the simulation (not checks): the fluid model of the mask and of a "
        "moving policy, and the fixed-θ carry chain under a moving policy, against the simulated "
        "mean gradient of the same runs (÷ ‖∇J‖)",
        ("model", "‖model‖", "‖simulated mean‖", "‖model − simulated‖", "SE of the simulated mean"),
        [tuple(e) for e in model_errors],
        note=(
            "The checks of these runs compare the simulated batch gradients with their exact "
            "conditional mean given the trained samples (lengths, behaviour and target versions), "
            "which is what the simulator's batches imply exactly; the models predict the "
            "composition itself, approximately: their error is measured here, not tolerated."
        ),
    )
    section.metric("model_errors", {e.label: {"error": e.error, "se": e.se} for e in model_errors})
    progress("which samples continuous dispatch trains: exact finite-N law against simulation")
    _composition_checks(section, config)
    return pairs


def _closed_vs_sim_figure(section: Section, pairs: list[_Pair]) -> None:
    fig, (ax,) = new_figure(1, width=9.8, height=5.4)
    x = np.arange(len(pairs))
    ax.plot(
        x,
        [p.exact for p in pairs],
        color="black",
        marker="_",
        markersize=18,
        linestyle="none",
        markeredgewidth=2.5,
        label="exact (closed form, or conditional mean given the samples)",
    )
    ax.plot(
        x,
        [p.model for p in pairs],
        color=COLORS[3],
        marker="x",
        markersize=7,
        linestyle="none",
        label="model (fluid; fixed-θ carry chain)",
    )
    ax.errorbar(
        x,
        [p.sim for p in pairs],
        yerr=[2 * p.se for p in pairs],
        fmt="o",
        color=COLORS[0],
        ms=4,
        capsize=2,
        label="simulation (±2 SE of the check)",
    )
    ax.set_xticks(x, [p.label for p in pairs], rotation=40, ha="right", fontsize=9)
    # the axis follows the closed forms: HT's heavy-tailed weights give error bars far beyond it
    cf = np.asarray([p.exact for p in pairs])
    pad = 0.25 * float(cf.max() - cf.min()) + 0.05
    ax.set_ylim(float(cf.min()) - pad, float(cf.max()) + pad)
    ax.set_ylabel("E ĝ component ÷ ‖∇J‖")
    ax.set_title("Expected gradient: exact against refimpl.sim batches, models beside")
    ax.legend(loc="best", fontsize=9)
    section.figure(
        fig,
        "closed-vs-sim",
        "Each component of the expected batch gradient: the exact value (black) against the mean "
        "over simulated batches (dots, ±2 SE): first 4 of 8 (uncorrected, HT, Hájek, clipped "
        "IPW) and first 1 of 2 with carried leftovers (exact closed forms at a fixed policy), "
        "continuous dispatch on 32 slots, batch 16, without a mask (its long-run limit ∇J), with "
        f"the mask at η = 0 and 1, without IPW, with unclipped IPW and with IPW clipped at "
        f"{fmt(MASK_CLIP)}; a policy path that moves {fmt(LAG)} per version along ∇J replayed "
        "through the simulator (stale behaviours: uncorrected, token TIS, sequence IS) and carried "
        "leftovers under that moving policy. Where the exact value is the conditional mean given "
        "the trained samples, the model that predicts it (crosses: fluid model, fixed-θ chain) "
        "is shown beside with its error measured, not tolerated (table model-errors).",
    )
