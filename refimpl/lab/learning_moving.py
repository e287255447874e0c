"""The learning section under a moving policy: a replayed path through the simulator, checked
exactly against the conditional mean given the trained samples (stale behaviours, carried
leftovers)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from refimpl import learning as lrn
from refimpl.lab._common import seed
from refimpl.lab.config import LabConfig
from refimpl.lab.learning_exact import (
    CARRY,
    _cond_check,
    _conditional,
    _mean_staleness,
    _ModelError,
    _Pair,
)
from refimpl.lab.learning_policy import CAP, LAG, PENALTY, STREAM, THETA_FIXED, _Policy, _policy
from refimpl.lab.report import Section, fmt


def _path(pol: _Policy, steps: int) -> NDArray[np.float64]:
    lag = LAG * pol.grad / np.linalg.norm(pol.grad)
    return np.asarray(
        THETA_FIXED[None, :] + (np.arange(steps + 1) - steps // 2)[:, None] * lag[None, :],
        dtype=np.float64,
    )


#: Corrections of the moving-policy replay (the check must tell them apart).
LAG_CORRECTIONS = ("none", "token_tis", "sequence_is")


#: The first step of a replayed path that the moving-policy checks use (the rest is warm-up).
LAG_FIRST = 8


def _lag_checks(
    section: Section, config: LabConfig, q: NDArray[np.float64], pol: _Policy
) -> tuple[list[_Pair], list[_ModelError]]:
    """Replay a policy path that moves by δ per version through the simulator, each correction.

    Pass/fail: each correction's simulated batch gradients against their exact conditional mean
    given the trained (length, behaviour version, target version) of every sample, computed with
    :func:`refimpl.learning.corrected_scores` (not the trainer's code). The same trace weighted by
    every other correction gives the separation table: a check that could not tell the corrections
    apart would show small off-diagonal distances. The fluid model of a moving policy (first order
    in the lag) is shown beside, as a model, with its measured error.
    """
    slots, batch, steps, first = 32, 16, 24, LAG_FIRST
    # enough replicates that every off-diagonal distance of the separation table exceeds 4.5
    reps = 10 if config.quick else 16
    path = _path(pol, steps)
    norm = float(np.linalg.norm(pol.grad))
    out: list[_Pair] = []
    errors: list[_ModelError] = []
    cache: dict[tuple[str, int, int], NDArray[np.float64]] = {}

    def weighted(corr: str, target: int, behaviour: int) -> NDArray[np.float64]:
        key = (corr, target, behaviour)
        if key not in cache:
            cache[key] = lrn.corrected_scores(
                path[target], path[behaviour], pol.phi, correction=corr, cap=CAP
            )
        return cache[key]

    fluid_all = _lag_fluid(q, pol, path, slots=slots, batch=batch, first=first)
    separation: list[tuple[Any, ...]] = []
    for corr in LAG_CORRECTIONS:
        sims, samples = _lag_runs(config, q, pol, path, corr, slots=slots, batch=batch, reps=reps)
        sim_all = np.concatenate(sims)
        sim = sim_all.mean(axis=0)
        ell = np.concatenate([a for a, _, _ in samples])
        tgt = np.concatenate([b for _, b, _ in samples])
        beh = np.concatenate([c for _, _, c in samples])
        nb = sim_all.shape[0]

        # every correction's weights on the same trained samples (the diagonal is the check)
        conds = {
            w: _conditional(
                ell,
                np.stack(
                    [
                        weighted(w, int(j_), int(v_))[int(e_) - 1]
                        for e_, j_, v_ in zip(ell, tgt, beh, strict=True)
                    ]
                ),
                q,
                pol.baseline,
                batch,
                nb,
            )
            for w in LAG_CORRECTIONS
        }
        mean, var = conds[corr]
        out += _cond_check(
            section,
            f"async-lag-{corr}",
            f"async N = {slots}, B = {batch}, policy moving {fmt(LAG)} per version, {corr}",
            sim,
            mean,
            var,
            norm,
            fluid_all[corr],
            f"async lag {corr}",
        )
        dist = [
            float(np.max(np.abs(sim - conds[w][0]) / np.sqrt(conds[w][1]))) for w in LAG_CORRECTIONS
        ]
        separation.append((corr, *dist))
        # the fluid model's error: its gap to the simulated mean, with the replicate SE beside
        per_rep = np.asarray([x.mean(axis=0) for x in sims])
        se = float(np.linalg.norm(per_rep.std(axis=0, ddof=1)) / np.sqrt(reps))
        errors.append(
            _ModelError(
                f"fluid model of a moving policy, {corr}",
                float(np.linalg.norm(fluid_all[corr])) / norm,
                float(np.linalg.norm(sim)) / norm,
                float(np.linalg.norm(fluid_all[corr] - sim)) / norm,
                se / norm,
            )
        )
    _lag_separation_table(section, separation)
    return out, errors


def _lag_fluid(
    q: NDArray[np.float64],
    pol: _Policy,
    path: NDArray[np.float64],
    *,
    slots: int,
    batch: int,
    first: int,
) -> dict[str, NDArray[np.float64]]:
    """The fluid model's mean gradient of each correction over the checked steps (a model)."""
    lag, steps = path[1] - path[0], path.shape[0] - 1
    return {
        corr: np.asarray(
            [
                lrn.async_gradient(
                    path[j],
                    pol.phi,
                    q,
                    slots=slots,
                    batch=batch,
                    lag=lag,
                    penalty=PENALTY,
                    baseline=pol.baseline,
                    correction=corr,
                    cap=CAP,
                ).mean
                for j in range(first, steps)
            ]
        ).mean(axis=0)
        for corr in LAG_CORRECTIONS
    }


def _lag_runs(
    config: LabConfig,
    q: NDArray[np.float64],
    pol: _Policy,
    path: NDArray[np.float64],
    corr: str,
    *,
    slots: int,
    batch: int,
    reps: int,
) -> tuple[
    list[NDArray[np.float64]], list[tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]]
]:
    """Replay ``path`` through the simulator ``reps`` times: the batch gradients of the checked
    steps and each trained sample's (length, target version, behaviour version)."""
    steps, first = path.shape[0] - 1, LAG_FIRST
    sims: list[NDArray[np.float64]] = []
    samples: list[tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]] = []
    for rep in range(reps):
        run = lrn.train_policy(
            path[0],
            pol.phi,
            q,
            slots=slots,
            batch=batch,
            steps=steps,
            learning_rate=1.0,
            penalty=PENALTY,
            baseline=pol.baseline,
            schedule=path,
            correction=corr,
            cap=CAP,
            seed=seed(config, STREAM, 500 + rep),
            allow_biased=True,  # the biased corrections are what this check tells apart
        )
        sims.append(run.gradients[first:])
        tr = run.trace
        order = tr.training_order()
        order = order[np.asarray(tr.step)[order] >= first]
        samples.append(
            (
                np.asarray(tr.length[order], dtype=np.int64),
                np.asarray(tr.step[order], dtype=np.int64),
                np.asarray(tr.launch_version[order], dtype=np.int64),
            )
        )
    return sims, samples


def _lag_separation_table(section: Section, separation: list[tuple[Any, ...]]) -> None:
    section.table(
        "lag-separation",
        "Can the moving-policy check tell the corrections apart? Each row: the simulated batch "
        "gradients of one correction; each column: their distance, in exact conditional standard "
        "errors (largest component), to the conditional mean under that column's weights on the "
        "same trained samples. The diagonal is the check (≤ 4.5 passes); off the diagonal, a "
        "distance above 4.5 means the check rejects that correction's weights",
        ("simulated correction", *(f"vs {c}" for c in LAG_CORRECTIONS)),
        separation,
    )
    section.metric("lag_separation", {r[0]: list(r[1:]) for r in separation})
    off = [d for i, r in enumerate(separation) for k_, d in enumerate(r[1:]) if k_ != i]
    section.metric("lag_min_separation", min(off))


#: Replicate runs (quick, default) of the carried leftovers under a moving policy: enough that a
#: trainer taking the scores at the launching version fails the check (about 5 and 8 SE).
CARRY_LAG_REPS = (60, 150)


def _carry_lag_checks(
    section: Section, config: LabConfig, q: NDArray[np.float64], pol: _Policy
) -> tuple[list[_Pair], list[_ModelError]]:
    """Carried leftovers under a moving policy: measured, against the fixed-θ chain (a model).

    The policy path moves by δ per version (as in :func:`_lag_checks`); first ``k`` of ``n`` with
    the leftovers carried, uncorrected, through :func:`refimpl.learning.train_policy`. Pass/fail:
    the exact conditional mean given the trained samples. Beside it, as a labelled model, the
    exact stationary chain at each version's own θ (:func:`refimpl.learning.first_k_carry_gradient`,
    exact at a fixed policy only: it ignores that a carried rollout was drawn by an older version).
    """
    n, k = CARRY
    steps, first = 24, 8
    reps = CARRY_LAG_REPS[0] if config.quick else CARRY_LAG_REPS[1]
    path = _path(pol, steps)
    norm = float(np.linalg.norm(pol.grad))
    sims: list[NDArray[np.float64]] = []
    ell_l: list[NDArray[np.int64]] = []
    tgt_l: list[NDArray[np.int64]] = []
    stale_l: list[NDArray[np.float64]] = []
    for rep in range(reps):
        run = lrn.train_policy(
            path[0],
            pol.phi,
            q,
            slots=n,
            batch=k,
            launch=n,
            mode="first_k",
            leftovers="carry",
            steps=steps,
            learning_rate=1.0,
            penalty=PENALTY,
            baseline=pol.baseline,
            schedule=path,
            seed=seed(config, STREAM, 700 + rep),
            correction="none",
            allow_biased=True,  # uncorrected carried leftovers: the estimator under test
        )
        sims.append(run.gradients[first:])
        tr = run.trace
        order = tr.training_order()
        order = order[np.asarray(tr.step)[order] >= first]
        ell_l.append(np.asarray(tr.length[order], dtype=np.int64))
        tgt_l.append(np.asarray(tr.step[order], dtype=np.int64))
        stale_l.append(np.asarray(tr.staleness[order], dtype=np.float64))
    sim_all = np.concatenate(sims)
    sim = sim_all.mean(axis=0)
    ell, tgt = np.concatenate(ell_l), np.concatenate(tgt_l)
    scores = {j: _policy(path[j], q).scores for j in range(first, steps)}
    g = np.stack([scores[int(j)][int(e) - 1] for e, j in zip(ell, tgt, strict=True)])
    mean, var = _conditional(ell, g, q, pol.baseline, k, sim_all.shape[0])
    # the chain at the θ of every fourth version (the centre of each block of four, rounded up):
    # each exact chain costs about half a second
    # (every eighth in --quick, to keep its budget)
    nodes = range(first + 2, steps, 8 if config.quick else 4)
    chain = [
        lrn.first_k_carry_gradient(
            _policy(path[j], q).pmf,
            _policy(path[j], q).scores,
            q,
            n=n,
            k=k,
            penalty=PENALTY,
            baseline=pol.baseline,
        )
        for j in nodes
    ]
    model = np.mean([np.asarray(c.mean, dtype=np.float64) for c in chain], axis=0)
    out = _cond_check(
        section,
        "carry-lag",
        f"first {k} of {n}, leftovers carried, policy moving {fmt(LAG)} per version",
        sim,
        mean,
        var,
        norm,
        model,
        "carry lag",
    )
    per_rep = np.asarray([x.mean(axis=0) for x in sims])
    se = float(np.linalg.norm(per_rep.std(axis=0, ddof=1)) / np.sqrt(reps))
    stale = np.concatenate(stale_l)
    stale_model = float(np.mean([_mean_staleness(c) for c in chain]))
    errors = [
        _ModelError(
            f"fixed-θ carry chain, first {k} of {n}, policy moving",
            float(np.linalg.norm(model)) / norm,
            float(np.linalg.norm(sim)) / norm,
            float(np.linalg.norm(model - sim)) / norm,
            se / norm,
        )
    ]
    section.metric(
        "carry_moving_policy",
        {
            "gradient_gap_over_norm": errors[0].error,
            "replicate_se_over_norm": errors[0].se,
            "mean_staleness_sim": float(stale.mean()),
            "mean_staleness_chain": stale_model,
        },
    )
    return out, errors
