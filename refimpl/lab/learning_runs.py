"""The learning section's training runs through the simulator: each correction and mask, on
trainer steps and simulated time."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from refimpl import learning as lrn
from refimpl.lab._common import seed
from refimpl.lab._plot import COLORS, legend_below, new_figure
from refimpl.lab.config import LabConfig
from refimpl.lab.learning_policy import (
    BAND,
    CAP,
    LEARNING_RATE,
    PENALTY,
    STREAM,
    TARGET_SHARE,
    THETA0,
    M,
)
from refimpl.lab.report import Section, fmt


class _Run(NamedTuple):
    label: str
    steps: NDArray[np.float64]
    time: NDArray[np.float64]
    length: NDArray[np.float64]
    reward: NDArray[np.float64]
    staleness: float
    kept: float
    estimator: str


def _train(
    label: str,
    config: LabConfig,
    q: NDArray[np.float64],
    theta0: NDArray[np.float64],
    *,
    index: int,
    **kw: Any,
) -> _Run:
    import refimpl.sim as rsim

    run = lrn.train_policy(
        theta0,
        lrn.length_features(M, degree=1),
        q,
        learning_rate=LEARNING_RATE,
        penalty=PENALTY,
        cap=CAP,
        low=BAND[0],
        high=BAND[1],
        seed=seed(config, STREAM, 1000 + index),
        allow_biased=True,  # the table compares biased corrections too, each labelled
        **kw,
    )
    tr = run.trace
    order = tr.training_order()
    trained = int(order.size)
    dropped = int(np.sum(np.asarray(tr.status) == rsim.STATUS["dropped"]))
    return _Run(
        label,
        np.arange(run.thetas.shape[0], dtype=np.float64),
        np.concatenate([[0.0], run.publish_times]),
        run.mean_length,
        run.expected_reward,
        float(np.mean(tr.staleness[order])),
        trained / max(trained + dropped, 1),
        run.estimator,
    )


def _time_to(run: _Run, target: float) -> float:
    hit = np.flatnonzero(run.reward >= target)
    return float(run.time[hit[0]]) if hit.size else float("inf")


def training_runs(
    section: Section, config: LabConfig, q: NDArray[np.float64], j_star: float, l_star: int
) -> None:
    """Train the toy policy with each correction and mask; the table and the curves."""
    steps = 30 if config.quick else 100
    slots, batch = 16, 8
    plan: list[tuple[str, dict[str, Any]]] = [
        ("sync (N/B minibatch steps per round)", {"mode": "sync_minibatch"}),
        ("async, uncorrected", {"correction": "none"}),
        ("async + sequence IS", {"correction": "sequence_is"}),
        ("async + token TIS", {"correction": "token_tis"}),
    ]
    if not config.quick:
        plan += [
            ("async + sequence TIS", {"correction": "sequence_tis"}),
            ("async + geometric", {"correction": "geometric"}),
            ("async + IcePop", {"correction": "icepop"}),
            ("async + decoupled PPO", {"correction": "decoupled_ppo"}),
            (
                "async, partial (keep KV) + token TIS",
                {"partial": "keep_kv", "correction": "token_tis"},
            ),
        ]
    plan += [(f"async, mask η = {e}", {"eta": e}) for e in ((0, 1) if config.quick else (0, 1, 2))]
    runs: list[_Run] = []
    for i, (label, kw) in enumerate(plan):
        args = {"slots": slots, "batch": batch, "steps": steps, **kw}
        runs.append(_train(label, config, q, THETA0, index=i, **args))
    j0 = float(runs[0].reward[0])
    target = j0 + TARGET_SHARE * (j_star - j0)
    section.table(
        "training",
        f"Where each run ends after {steps} optimizer steps (N = {slots} slots, B = {batch}; sync "
        f"launches all {slots} per round and takes {slots // batch} steps of {batch} on them), "
        f"from E[L] = {fmt(runs[0].length[0])}, J = {fmt(j0)}; "
        f"the on-policy optimum of the family is ℓ* = {l_star}, J* = {fmt(j_star)}",
        (
            "run",
            "final E[L]",
            "final J",
            "J* − J",
            "simulated time",
            f"time to J ≥ {fmt(target)}",
            "mean staleness",
            "kept fraction",
            "estimator",
        ),
        [
            (
                r.label,
                float(r.length[-1]),
                float(r.reward[-1]),
                j_star - float(r.reward[-1]),
                float(r.time[-1]),
                _time_to(r, target),
                r.staleness,
                r.kept,
                r.estimator,
            )
            for r in runs
        ],
        note=(
            "E[L] and J are exact for the trained parameters of each version; one seeded run "
            "each. Estimator: correction + baseline (leave-one-out: the mean reward of the other "
            "members), and its kind (refimpl.learning.estimator_status); a biased one ran with "
            "allow_biased=True and says so."
        ),
    )
    stuck = [r.label for r in runs if float(r.reward[-1]) < target]
    section.metric("runs_below_target", stuck)
    if stuck:
        section.text(
            f"**Runs that did not reach J ≥ {fmt(target)}:** {', '.join(stuck)}. A tight mask "
            "trains only the rollouts that finish within η + 1 versions, the short ones: the "
            "length bias it creates can hold a policy that must learn to think longer at short "
            "outputs (one seeded run: a measurement of this toy, not a law)."
        )
    section.metric("optimum", {"length": l_star, "reward": j_star})
    _training_figure(section, runs, j_star, l_star)


def _training_figure(section: Section, runs: list[_Run], j_star: float, l_star: int) -> None:
    """Exact E[L] and J of every version against optimizer steps and simulated time."""
    fig, flat = new_figure(2, nrows=2, height=7.6)
    panels = [flat[:2], flat[2:]]
    axes_spec = (("steps", "trainer steps"), ("time", "simulated time (tokens)"))
    for row, (xkey, xlabel) in enumerate(axes_spec):
        a1, a2 = panels[row]
        for i, r in enumerate(runs):
            xs = getattr(r, xkey)
            style = "--" if "mask" in r.label else "-"
            color = COLORS[i % len(COLORS)]
            a1.plot(xs, r.length, style, color=color, linewidth=1.4, label=r.label)
            a2.plot(xs, r.reward, style, color=color, linewidth=1.4)
        a1.axhline(l_star, color="black", linestyle=":", linewidth=1.2)
        a2.axhline(j_star, color="black", linestyle=":", linewidth=1.2)
        for ax in (a1, a2):
            ax.set_xlabel(xlabel)
        a1.set_ylabel("E_θ[L] (exact)")
        a2.set_ylabel("J(θ) (exact)")
        a1.set_title(f"Mean length against {xlabel.split(' (')[0]}")
        a2.set_title(f"Expected reward against {xlabel.split(' (')[0]}")
    handles, _ = panels[0][0].get_legend_handles_labels()
    legend_below(fig, handles, ncol=4)
    section.figure(
        fig,
        "training",
        f"Training the toy policy on the simulator's batches: exact E_θ[L] and J(θ) of each "
        f"version against trainer steps (top) and simulated time (bottom); dotted: the on-policy "
        f"optimum ℓ* = {l_star}, J* = {fmt(j_star)}; dashed: the staleness masks.",
    )
