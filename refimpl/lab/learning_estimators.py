"""The learning section's estimator table: every combination train_policy accepts, and its bias.

Each correction × baseline × leftover policy is either stated exactly (:func:`refimpl.learning.
estimator_bias`: exact enumeration in Fractions on a small rational law, and in float64 at the
section's policy) or classified with the reason (:func:`refimpl.learning.estimator_status`).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from refimpl import learning as lrn
from refimpl.lab.report import Section

__all__ = ["FLUID_LAW", "SMALL_LAW", "estimator_rows", "estimator_table", "fluid_rows"]

#: A rational three-length law for the exact statements: hazards 1/2, 1/3, 1 (the tabular
#: policy), success probabilities 0, 1/2, 1.
SMALL_LAW = (
    [Fraction(1, 2), Fraction(1, 3), Fraction(1)],
    [Fraction(0), Fraction(1, 2), Fraction(1)],
)

#: (label, n, k, correction, baseline, leftovers); ``'J'`` is the constant baseline J(θ).
COMBINATIONS: tuple[tuple[str, int, int, str, Any, str], ...] = (
    ("sync, B = 4", 4, 4, "none", "J", "drop"),
    ("sync, B = 4", 4, 4, "none", "batch", "drop"),
    ("sync, B = 4", 4, 4, "none", "leave_one_out", "drop"),
    *(
        ("first 2 of 4", 4, 2, corr, base, "drop")
        for corr in ("none", "horvitz_thompson", "hajek", "clipped_ht")
        for base in ("J", "batch", "leave_one_out")
    ),
    ("first 1 of 2, carried", 2, 1, "none", "J", "carry"),
)


#: A rational five-length policy whose behaviour ``s`` versions stale has odds
#: ``h/(1 − h) · 2^(−s c_t)`` (hazards stay rational): the fluid model's exact statements.
FLUID_LAW = (
    [Fraction(1, 4), Fraction(1, 3), Fraction(1, 2), Fraction(2, 5), Fraction(1)],
    [Fraction(0), Fraction(1, 5), Fraction(1, 2), Fraction(4, 5), Fraction(9, 10)],
    [1, -1, 2, 0, 0],
)


def _stale(s: int) -> list[Fraction]:
    h, _, shift = FLUID_LAW
    out = [x / (x + (1 - x) * Fraction(2) ** (s * c)) for x, c in zip(h[:-1], shift, strict=False)]
    return [*out, Fraction(1)]


def fluid_rows(*, slots: int = 3, batch: int = 2) -> list[tuple[str, Any, Any, bool, float]]:
    """(estimator, η, scale, parallel, relative bias) of continuous dispatch in the fluid model.

    Exact: :func:`refimpl.learning.async_gradient_exact` (every correction it computes in
    Fractions, without a mask and with the mask at η = 0 with and without inverse propensity)
    against :func:`refimpl.learning.policy_gradient`, baseline J(θ).
    """
    h, q, _ = FLUID_LAW
    eye = np.eye(len(h), dtype=int).tolist()
    pmf = lrn.hazard_length_pmf(h)
    scores = lrn.token_scores(h, eye).sum(axis=1)
    j = lrn.mean_reward(pmf, q)
    on = lrn.policy_gradient(pmf, scores, q, baseline=j).mean
    stale = [_stale(s) for s in range(8)]
    rows = []
    for corr in lrn.EXACT_CORRECTIONS:
        for eta, ipw in ((None, False), (0, False), (0, True)):
            g = lrn.async_gradient_exact(
                h, stale, eye, q, slots=slots, batch=batch, eta=eta, correction=corr,
                baseline=j, mask_ipw=ipw,
            )  # fmt: skip
            b = lrn.gradient_bias(g.mean, on)
            mask = "none" if eta is None else f"η = {eta}" + (" + IPW" if ipw else "")
            rows.append((corr, mask, b.scale, b.parallel, float(b.relative_bias)))
    return rows


def _small() -> tuple[Any, Any, Any]:
    h, q = SMALL_LAW
    eye = np.eye(len(h), dtype=int).tolist()
    return lrn.hazard_length_pmf(h), lrn.token_scores(h, eye).sum(axis=1), q


def estimator_rows(
    pmf: Any, scores: Any, quality: Any, *, penalty: Any = 0, clip: Any = 1
) -> list[tuple[str, str, str, str, Any, bool, float]]:
    """(dispatch, correction, baseline, leftovers, scale, parallel, relative bias) per combination."""
    j = lrn.mean_reward(pmf, quality, penalty=penalty)
    rows = []
    for label, n, k, corr, base, left in COMBINATIONS:
        b = j if base == "J" else base
        e = lrn.estimator_bias(
            pmf, scores, quality, n=n, k=k, correction=corr, baseline=b, leftovers=left,
            penalty=penalty, clip=clip if corr == "clipped_ht" else None,
        )  # fmt: skip
        rows.append(
            (label, corr, "J(θ)" if base == "J" else base, left, e.scale, e.parallel,
             float(e.relative_bias))
        )  # fmt: skip
    return rows


def estimator_table(
    section: Section,
    pmf: NDArray[np.float64],
    scores: NDArray[np.float64],
    quality: NDArray[np.float64],
    *,
    penalty: float,
    clip: float,
) -> None:
    """Add the exact bias of every first-k/sync combination and the status of the async ones."""
    p, s, q = _small()
    exact = estimator_rows(p, s, q, clip=Fraction(1))
    here = estimator_rows(pmf, scores, quality, penalty=penalty, clip=clip)
    rows = [
        (*e[:4], str(e[4]), "yes" if e[5] else "no", e[6], h[4], h[6])
        for e, h in zip(exact, here, strict=True)
    ]
    section.table(
        "estimators",
        "Every first-k and synchronous estimator, exactly: E[ĝ] against ∇J as the projection "
        "scale ⟨E ĝ, ∇J⟩/‖∇J‖² and the relative bias ‖E ĝ − ∇J‖/‖∇J‖, on the rational law "
        "h = (1/2, 1/3, 1), Q = (0, 1/2, 1) in Fractions (exact enumeration of every batch and "
        "reward) and at this section's policy (float64)",
        (
            "dispatch",
            "correction",
            "baseline",
            "leftovers",
            "scale (exact)",
            "E ĝ ∥ ∇J",
            "relative bias (exact law)",
            "scale (section's policy)",
            "relative bias (section's policy)",
        ),
        rows,
        note=(
            "Unbiased: scale 1 and relative bias 0 (Horvitz–Thompson with a constant baseline; "
            "synchronous batches with a constant or leave-one-out baseline). The batch baseline "
            "scales independent draws by 1 − 1/B and turns the first-k estimators (the members "
            "of a first-k batch are dependent). Clipped HT (C = 1 on the exact law) and Hájek "
            "keep a bias. Carried leftovers at a fixed θ: the stationary chain trains the launched "
            "law (LRN5). train_policy refuses every biased combination unless "
            "allow_biased=True and labels the run."
        ),
    )
    section.table(
        "estimators-async",
        "Continuous dispatch in the fluid model, exactly: every correction's expected gradient "
        "(async_gradient_exact, Fractions) against ∇J, on a rational five-length policy whose "
        "behaviours move by a fixed lag per version, N = 3 slots, B = 2, baseline J(θ)",
        ("correction", "staleness mask", "scale (exact, rounded)", "E ĝ ∥ ∇J", "relative bias"),
        [(c, m, float(s), "yes" if par else "no", rb) for c, m, s, par, rb in fluid_rows()],
        note=(
            "Only the full sequence ratio keeps the direction of ∇J (scale: the fluid model's "
            "launched/trained ratio); every capped or token-level correction turns it, and a "
            "mask adds the length bias that inverse propensity removes only on the lengths the "
            "mask can keep (LRN6)."
        ),
    )
    statuses = [
        lrn.estimator_status(mode=mode, correction=corr, baseline=base, eta=eta, slots=8, batch=4)
        for mode, corr, base, eta in (
            ("async", "sequence_is", "leave_one_out", None),
            ("async", "none", "leave_one_out", None),
            ("async", "token_tis", "batch", None),
            ("async", "sequence_is", "leave_one_out", 1),
            ("sync_minibatch", "sequence_is", "leave_one_out", None),
            ("sync_minibatch", "none", "batch", None),
        )
    ]
    section.table(
        "estimator-status",
        "Asynchronous and minibatched estimators: what refimpl.learning.estimator_status says "
        "(their expected gradient is computed in the fluid model by async_gradient_exact)",
        ("estimator", "kind", "why"),
        [(st.label, st.kind, st.statement) for st in statuses],
    )
    ht_batch = next(
        h for e, h in zip(exact, here, strict=True) if e[1:3] == ("horvitz_thompson", "batch")
    )
    section.metric("ht_batch_scale", float(ht_batch[4]))
    section.metric(
        "estimator_bias",
        [{"estimator": f"{r[0]}: {r[1]} + {r[2]}", "scale": r[7], "bias": r[8]} for r in rows],
    )
