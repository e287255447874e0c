"""The learning section at a fixed policy: exact gradients of every dispatch and correction, and
the closed forms against simulated batches (first-k, carried leftovers, continuous dispatch)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

import refimpl
from refimpl import learning as lrn
from refimpl.lab._common import TOL_RULE, Z_TOL, seed
from refimpl.lab.config import LabConfig
from refimpl.lab.learning_policy import (
    BAND,
    CAP,
    LAG,
    PENALTY,
    STREAM,
    T_RULE,
    THETA_FIXED,
    M,
    _Policy,
    _policy,
    t_tolerance,
)
from refimpl.lab.report import Section, fmt


def _row(name: str, mean: Any, trace: float, pol: _Policy) -> tuple[Any, ...]:
    g = np.asarray(mean, dtype=np.float64)
    on = pol.grad
    norm = float(np.linalg.norm(on))
    cos = float(g @ on / (np.linalg.norm(g) * norm)) if np.linalg.norm(g) > 0 else 0.0
    bias = g - on
    along = float(bias @ pol.dlen / (np.linalg.norm(pol.dlen) * norm))
    rel_bias = float(np.linalg.norm(bias) / norm)
    return (
        name,
        cos,
        float(np.linalg.norm(g) / norm - 1.0),
        along,
        rel_bias,
        float(trace) / norm**2,
        (rel_bias**2 + float(trace) / norm**2),
    )


def _async_rows(
    pol: _Policy, q: NDArray[np.float64], *, slots: int, batch: int
) -> list[tuple[Any, ...]]:
    """The fluid model's rows of the gradient table: every correction at N/B = 2, the staleness
    masks, and the masks with inverse-propensity weights."""
    rows: list[tuple[Any, ...]] = []
    lag = LAG * pol.grad / np.linalg.norm(pol.grad)
    names = {
        "none": "uncorrected",
        "sequence_is": "sequence IS (uncapped)",
        "token_tis": f"token TIS (C = {fmt(CAP)})",
        "sequence_tis": f"sequence TIS (C = {fmt(CAP)})",
        "geometric": f"geometric (C = {fmt(CAP)})",
        "icepop": f"IcePop [{fmt(BAND[0])}, {fmt(BAND[1])}]",
        "decoupled_ppo": f"decoupled PPO (cap {fmt(CAP)})",
    }
    common: dict[str, Any] = {
        "slots": slots,
        "batch": batch,
        "lag": lag,
        "penalty": PENALTY,
        "baseline": pol.baseline,
        "cap": CAP,
        "low": BAND[0],
        "high": BAND[1],
    }
    for corr in lrn.CORRECTIONS:
        g = lrn.async_gradient(THETA_FIXED, pol.phi, q, correction=corr, **common)
        rows.append(
            _row(f"async N/B = 2: {names[corr]}", g.mean, float(g.trace_variance) / batch, pol)
        )
    for eta in (0, 1, 2):
        g = lrn.async_gradient(THETA_FIXED, pol.phi, q, eta=eta, **common)
        rows.append(
            _row(f"async N/B = 2: mask η = {eta}", g.mean, float(g.trace_variance) / batch, pol)
        )
    for eta in (0, 1):
        g = lrn.async_gradient(THETA_FIXED, pol.phi, q, eta=eta, mask_ipw=True, **common)
        rows.append(
            _row(
                f"async N/B = 2: mask η = {eta} + IPW 1/keep",
                g.mean,
                float(g.trace_variance) / batch,
                pol,
            )
        )
    return rows


def _gradient_table(
    section: Section, q: NDArray[np.float64]
) -> tuple[list[tuple[Any, ...]], _Policy]:
    pol = _policy(THETA_FIXED, q)
    n, k, slots, batch = 8, 4, 8, 4
    rows: list[tuple[Any, ...]] = []
    on = lrn.policy_gradient(pol.pmf, pol.scores, q, penalty=PENALTY, baseline=pol.baseline)
    rows.append(_row("on-policy (B = 4)", on.mean, float(on.trace_variance) / batch, pol))
    for corr, label in (
        ("none", "uncorrected"),
        ("horvitz_thompson", "IPW (HT)"),
        ("hajek", "IPW (Hájek)"),
        ("clipped_ht", f"IPW clipped at C = {fmt(IPW_CLIP)}"),
    ):
        fk = lrn.first_k_gradient(
            pol.pmf,
            pol.scores,
            q,
            n=n,
            k=k,
            correction=corr,
            penalty=PENALTY,
            baseline=pol.baseline,
            clip=IPW_CLIP if corr == "clipped_ht" else None,
        )
        rows.append(_row(f"first {k} of {n}: {label}", fk.mean, float(fk.trace_variance), pol))
    carry = _carry(pol, q)
    rows.append(
        _row(
            f"first {CARRY[1]} of {CARRY[0]}: leftovers carried",
            carry.mean,
            float(carry.trace_variance),
            pol,
        )
    )
    rows += _async_rows(pol, q, slots=slots, batch=batch)
    section.table(
        "gradient-bias",
        f"The expected gradient at a fixed policy (E[L] = {fmt(lrn.expected_length(pol.pmf))} "
        f"tokens), exactly: its cosine to the on-policy gradient ∇J, the relative error of its "
        f"norm, the bias's component along ∇E[L] (negative: it pushes towards shorter outputs), "
        f"and the trace of the batch estimate's covariance (B = {batch})",
        (
            "dispatch: correction",
            "cos(E ĝ, ∇J)",
            "‖E ĝ‖/‖∇J‖ − 1",
            "bias along ∇E[L] (÷ ‖∇J‖)",
            "‖E ĝ − ∇J‖/‖∇J‖",
            "tr Cov(ĝ)/‖∇J‖²",
            "(bias² + variance)/‖∇J‖²",
        ),
        rows,
        note=(
            f"Baseline b = J(θ) = {fmt(pol.baseline)}. Stale behaviours: the policy moved "
            f"{fmt(LAG)} per version along ∇J, so a sample s versions stale was drawn by θ − s·δ. "
            "First-k variances are of the whole batch (its members are dependent, enumerated "
            "exactly); async variances are per draw ÷ B (the fluid limit's samples are independent). "
            f"Carried leftovers: the stationary chain of the {CARRY[0] - CARRY[1]} carried "
            f"rollout(s), solved exactly ({carry.states} states), at a fixed policy: no length "
            "bias (every launched rollout is trained once, LRN5); the price is staleness, mean "
            f"{fmt(_mean_staleness(carry))} versions, growing with the length. Mask + IPW: each "
            "kept sample weighted by (kept fraction)/keep(ℓ) of the fluid model; lengths the mask "
            "never keeps stay lost."
        ),
    )
    return rows, pol


#: First k of n with carried leftovers in the table: (n, k); one carried rollout keeps the exact
#: chain small (832 states at M = 16).
CARRY = (2, 1)
#: Cap of the clipped inverse-propensity weights.
IPW_CLIP = 2.0
#: Cap of the staleness mask's inverse-propensity weights in the simulation check.
MASK_CLIP = 4.0


def _carry(pol: _Policy, q: NDArray[np.float64]) -> lrn.CarryMoments:
    return lrn.first_k_carry_gradient(
        pol.pmf, pol.scores, q, n=CARRY[0], k=CARRY[1], penalty=PENALTY, baseline=pol.baseline
    )


def _mean_staleness(c: lrn.CarryMoments) -> float:
    law = np.asarray(c.trained_law, dtype=np.float64)
    return float((law.sum(axis=1) * np.arange(law.shape[0])).sum())


def _first_k_checks(
    section: Section, config: LabConfig, q: NDArray[np.float64], pol: _Policy
) -> list[tuple[str, float, float, float]]:
    import refimpl.sim as rsim

    n, k = 8, 4
    reps = 3_000 if config.quick else 20_000
    tr = rsim.simulate(
        rsim.SimConfig(
            slots=n,
            batch=k,
            mode="first_k",
            launch=n,
            steps=reps,
            lengths=pol.pmf,
            seed=seed(config, STREAM, 1),
        )
    )
    order = tr.training_order()
    ell = np.asarray(tr.length[order], dtype=np.int64).reshape(reps, k)
    rng = config.rng(STREAM * 100 + 1)
    reward = (rng.random(ell.shape) < q[ell - 1]) - PENALTY * ell
    adv = reward - pol.baseline
    pi = refimpl.inclusion_probability_pmf(pol.pmf, n=n, k=k)
    w = k / (n * pi[ell - 1])
    sc = pol.scores[ell - 1]  # (reps, k, 2)
    norm = float(np.linalg.norm(pol.grad))
    out: list[tuple[str, float, float, float]] = []
    for corr, unit in (
        ("none", np.full(ell.shape, 1.0 / k)),
        ("horvitz_thompson", w / k),
        ("hajek", w / w.sum(axis=1, keepdims=True)),
        ("clipped_ht", np.minimum(w, IPW_CLIP) / k),
    ):
        est = ((unit * adv)[:, :, None] * sc).sum(axis=1)  # (reps, 2)
        exact = lrn.first_k_gradient(
            pol.pmf,
            pol.scores,
            q,
            n=n,
            k=k,
            correction=corr,
            penalty=PENALTY,
            baseline=pol.baseline,
            clip=IPW_CLIP if corr == "clipped_ht" else None,
        )
        # the standard error from the exact covariance trace (an upper bound on each component's
        # variance): the sample variance of HT's heavy-tailed weights underestimates it
        se = float(np.sqrt(float(exact.trace_variance) / reps))
        for c in range(2):
            m = float(est[:, c].mean())
            section.check(
                f"first-k-{corr}-{c}",
                f"E ĝ[{c}] ÷ ‖∇J‖, first {k} of {n}, {corr}",
                closed_form=float(exact.mean[c]) / norm,
                simulation=m / norm,
                tolerance=Z_TOL * se / norm,
                rule=TOL_RULE + " (SE from the exact tr Cov, an upper bound per component)",
            )
            out.append((f"first-k {corr} [{c}]", float(exact.mean[c]) / norm, m / norm, se / norm))
        if corr == "horvitz_thompson":
            continue  # its fourth moment is so heavy that no sample gives an honest SE of the trace
        dev = ((est - np.asarray(exact.mean, dtype=np.float64)) ** 2).sum(axis=1)
        vm, vse = float(dev.mean()), float(dev.std(ddof=1) / np.sqrt(reps))
        section.check(
            f"first-k-{corr}-trace",
            f"tr Cov(ĝ) ÷ ‖∇J‖², first {k} of {n}, {corr}",
            closed_form=float(exact.trace_variance) / norm**2,
            simulation=vm / norm**2,
            tolerance=Z_TOL * vse / norm**2,
            rule=TOL_RULE + " (mean of ‖ĝ − E ĝ‖² about the exact mean)",
        )
    return out


def _carry_checks(
    section: Section, config: LabConfig, q: NDArray[np.float64], pol: _Policy
) -> list[tuple[str, float, float, float]]:
    """First k of n with carried leftovers: the exact stationary chain against refimpl.sim."""
    import refimpl.sim as rsim

    n, k = CARRY
    steps = 4_000 if config.quick else 20_000
    warm = 50
    tr = rsim.simulate(
        rsim.SimConfig(
            slots=n,
            batch=k,
            mode="first_k",
            launch=n,
            leftovers="carry",
            steps=steps,
            lengths=pol.pmf,
            seed=seed(config, STREAM, 2),
        )
    )
    order = tr.training_order()
    order = order[np.asarray(tr.step)[order] >= warm]
    ell = np.asarray(tr.length[order], dtype=np.int64)
    stale = np.asarray(tr.staleness[order], dtype=np.float64)
    rng = config.rng(STREAM * 100 + 2)
    adv = (rng.random(ell.size) < q[ell - 1]) - PENALTY * ell - pol.baseline
    per = (adv[:, None] * pol.scores[ell - 1]).reshape(-1, k, 2).mean(axis=1)
    exact = _carry(pol, q)
    norm = float(np.linalg.norm(pol.grad))
    out: list[tuple[str, float, float, float]] = []
    blocks_n = 20
    rule = T_RULE.format(count=f"{blocks_n} batch means (consecutive steps share carried rollouts)")
    values = [
        (f"E ĝ[{c}] ÷ ‖∇J‖", float(exact.mean[c]) / norm, per[:, c] / norm, f"carry [{c}]")
        for c in range(2)
    ]
    values.append(("mean staleness", _mean_staleness(exact), stale, "carry staleness"))
    for name, cf, series, short in values:
        cut = (series.size // blocks_n) * blocks_n
        blocks = series[:cut].reshape(blocks_n, -1).mean(axis=1)
        m, se = float(series.mean()), float(blocks.std(ddof=1) / np.sqrt(blocks_n))
        section.check(
            f"first-k-carry-{short.split()[-1].strip('[]')}",
            f"{name}, first {k} of {n}, leftovers carried (stationary chain, exact)",
            closed_form=cf,
            simulation=m,
            tolerance=t_tolerance(blocks_n - 1) * se,
            rule=rule,
        )
        if short != "carry staleness":
            out.append((short, cf, m, se))
    return out


COND_RULE = (
    "exact conditional mean given the trained lengths and behaviour versions; 4.5 × the exact "
    "conditional SE of the Bernoulli rewards (false alarm ≈ 7e-6 per check, normal approximation)"
)


class _Pair(NamedTuple):
    """One point of the closed-form-against-simulation figure (÷ ‖∇J‖)."""

    label: str
    exact: float
    sim: float
    se: float
    model: float = float("nan")


class _ModelError(NamedTuple):
    """A labelled model beside the simulation: its value, the simulated one and their gap."""

    label: str
    model: float
    sim: float
    error: float
    se: float


def _block_se(per: NDArray[np.float64], blocks: int = 20) -> float:
    """Standard error of the mean vector's components (20 batch means), as one norm."""
    cut = (per.shape[0] // blocks) * blocks
    means = per[:cut].reshape(blocks, -1, per.shape[1]).mean(axis=1)
    return float(np.linalg.norm(means.std(axis=0, ddof=1)) / np.sqrt(blocks))


def _conditional(
    ell: NDArray[np.int64],
    scores: NDArray[np.float64],
    q: NDArray[np.float64],
    baseline: float,
    batch: int,
    batches: int,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Exact mean and variance of the mean batch gradient given the trained samples.

    Given each trained sample's length ``ℓ`` and weighted score ``G`` (fixed by the trace), the
    only randomness left is the Bernoulli success with probability ``Q(ℓ)``: the mean over
    ``batches`` batches of ``Σ (R − b) G / B`` has mean ``Σ (R̄(ℓ) − b) G / (B·batches)`` and
    variance ``Σ Q(1 − Q) G² / (B·batches)²`` per component.
    """
    qq = q[ell - 1]
    adv = qq - PENALTY * ell - baseline
    denom = float(batch * batches)
    mean = (adv[:, None] * scores).sum(axis=0) / denom
    var = ((qq * (1.0 - qq))[:, None] * scores**2).sum(axis=0) / denom**2
    return np.asarray(mean, dtype=np.float64), np.asarray(var, dtype=np.float64)


def _cond_check(
    section: Section,
    key: str,
    quantity: str,
    sim: NDArray[np.float64],
    mean: NDArray[np.float64],
    var: NDArray[np.float64],
    norm: float,
    model: Any,
    short: str,
) -> list[_Pair]:
    out: list[_Pair] = []
    for c in range(2):
        se = float(np.sqrt(var[c]))
        section.check(
            f"{key}-{c}",
            f"E ĝ[{c}] ÷ ‖∇J‖, {quantity} (given the trained samples)",
            closed_form=float(mean[c]) / norm,
            simulation=float(sim[c]) / norm,
            tolerance=Z_TOL * se / norm,
            rule=COND_RULE,
        )
        mod = float("nan") if model is None else float(model[c]) / norm
        out.append(
            _Pair(f"{short} [{c}]", float(mean[c]) / norm, float(sim[c]) / norm, se / norm, mod)
        )
    return out


def _async_checks(
    section: Section, config: LabConfig, q: NDArray[np.float64], pol: _Policy
) -> tuple[list[_Pair], list[_ModelError]]:
    """Continuous dispatch at a fixed policy: without a mask against ∇J, with one given the samples."""
    import refimpl.sim as rsim

    slots, batch = 32, 16
    steps = 600 if config.quick else 3_000
    warm = steps // 10
    out: list[_Pair] = []
    errors: list[_ModelError] = []
    for i, eta in enumerate((None, 0, 1)):
        tr = rsim.simulate(
            rsim.SimConfig(
                slots=slots,
                batch=batch,
                steps=steps,
                lengths=pol.pmf,
                eta=eta,
                over_bound="keep" if eta is None else "drop",
                seed=seed(config, STREAM, 10 + i),
            )
        )
        order = tr.training_order()
        order = order[np.asarray(tr.step)[order] >= warm]
        ell = np.asarray(tr.length[order], dtype=np.int64)
        rng = config.rng(STREAM * 100 + 10 + i)
        adv = (rng.random(ell.size) < q[ell - 1]) - PENALTY * ell - pol.baseline
        common: dict[str, Any] = {
            "slots": slots,
            "batch": batch,
            "eta": eta,
            "penalty": PENALTY,
            "baseline": pol.baseline,
        }
        if eta is None:
            out += _async_nomask(section, pol, ell, adv, slots=slots, batch=batch)
            continue
        step_t = lrn.fluid_step_time(pol.pmf, slots=slots, batch=batch, eta=eta)
        _mask_ipw_exact(section, q, pol, eta, step_t, slots=slots, batch=batch)
        pairs, errs = _mask_variants(section, q, pol, eta, step_t, ell, adv, common)
        out += pairs
        errors += errs
    return out, errors


def _async_nomask(
    section: Section,
    pol: _Policy,
    ell: NDArray[np.int64],
    adv: NDArray[np.float64],
    *,
    slots: int,
    batch: int,
) -> list[_Pair]:
    """Without a mask every launched rollout is trained once: the long-run mean is ∇J itself."""
    norm = float(np.linalg.norm(pol.grad))
    out: list[_Pair] = []
    # no mask: every launched rollout is trained once, so the long-run mean is ∇J itself
    per = ((adv[:, None] * pol.scores[ell - 1]).reshape(-1, batch, 2)).mean(axis=1)
    for c in range(2):
        blocks = per[: (per.shape[0] // 20) * 20, c].reshape(20, -1).mean(axis=1)
        m, se = float(per[:, c].mean()), float(blocks.std(ddof=1) / np.sqrt(20))
        section.check(
            f"async-nomask-{c}",
            f"E ĝ[{c}] ÷ ‖∇J‖, async N = {slots}, B = {batch}, no mask, lag 0",
            closed_form=float(pol.grad[c]) / norm,
            simulation=m / norm,
            tolerance=t_tolerance(19) * se / norm,
            rule=T_RULE.format(count="20 batch means")
            + " (the long-run limit: every launched rollout is trained once)",
        )
        out.append(_Pair(f"async no mask [{c}]", float(pol.grad[c]) / norm, m / norm, se / norm))
    return out


def _mask_ipw_exact(
    section: Section,
    q: NDArray[np.float64],
    pol: _Policy,
    eta: int,
    step_t: float,
    *,
    slots: int,
    batch: int,
) -> None:
    """Unclipped IPW for the mask (fluid) against the finite sum over the kept lengths (LRN6)."""
    norm = float(np.linalg.norm(pol.grad))
    # unclipped IPW for the mask, closed form against the finite sum over the lengths the
    # fluid mask keeps (LRN6): Σ_{keep(ℓ) > 0} p(ℓ)(R̄(ℓ) − b) s(ℓ), derived independently
    support = np.arange(1, M + 1)
    kept = refimpl.fluid_keep_probability(support, step_time=step_t, eta=eta) > 0
    adv_l = q - PENALTY * support - pol.baseline
    partial = ((pol.pmf * adv_l * kept)[:, None] * pol.scores).sum(axis=0)
    ipw = lrn.async_gradient(
        THETA_FIXED,
        pol.phi,
        q,
        slots=slots,
        batch=batch,
        eta=eta,
        penalty=PENALTY,
        baseline=pol.baseline,
        mask_ipw=True,
    ).mean
    for c in range(2):
        section.check(
            f"mask-ipw-exact-eta{eta}-{c}",
            f"E ĝ[{c}] ÷ ‖∇J‖, mask η = {eta} + unclipped IPW (fluid), against "
            f"Σ over the {int(kept.sum())} kept lengths of p (R̄ − b) s",
            closed_form=float(ipw[c]) / norm,
            simulation=float(partial[c]) / norm,
            tolerance=1e-12,
            rule="exact finite sum (float64 rounding over 16 terms, 1e-12)",
        )


def _mask_variants(
    section: Section,
    q: NDArray[np.float64],
    pol: _Policy,
    eta: int,
    step_t: float,
    ell: NDArray[np.int64],
    adv: NDArray[np.float64],
    common: dict[str, Any],
) -> tuple[list[_Pair], list[_ModelError]]:
    """The mask without weights, with unclipped and with clipped IPW, given the trained samples."""
    slots, batch = common["slots"], common["batch"]
    nb = ell.size // batch
    norm = float(np.linalg.norm(pol.grad))
    out: list[_Pair] = []
    errors: list[_ModelError] = []
    keep = refimpl.fluid_keep_probability(ell, step_time=step_t, eta=eta)
    kappa = batch * lrn.expected_length(pol.pmf) / (slots * step_t)
    # unclipped weights κ/keep(ℓ) are finite where the fluid model keeps ℓ; the simulator also
    # trains a few lengths it never keeps (keep = 0: infinite weight), weighted 0 as in LRN6
    raw = np.where(keep > 0, kappa / np.maximum(keep, 1e-300), 0.0)
    never = int(np.sum(keep == 0))
    section.metric(f"mask_eta{eta}_trained_never_kept", {"count": never, "of": int(ell.size)})
    label = f"mask η = {eta}"
    for tag, w, kw in (
        ("", np.ones(ell.size), {}),
        (" + IPW", raw, {"mask_ipw": True}),
        (
            f" + IPW (C = {fmt(MASK_CLIP)})",
            np.minimum(raw, MASK_CLIP),
            {"mask_ipw": True, "ipw_clip": MASK_CLIP},
        ),
    ):
        sc = w[:, None] * pol.scores[ell - 1]
        cut = nb * batch
        sim = (adv[:cut, None] * sc[:cut]).sum(axis=0) / cut
        mean, var = _conditional(ell[:cut], sc[:cut], q, pol.baseline, batch, nb)
        fluid = lrn.async_gradient(THETA_FIXED, pol.phi, q, **common, **kw).mean
        key = f"async-eta{eta}" + ("" if not tag else "-ipw" + ("-clip" if "C" in tag else ""))
        out += _cond_check(
            section,
            key,
            f"async N = {slots}, B = {batch}, {label}{tag}, lag 0",
            sim,
            mean,
            var,
            norm,
            fluid,
            f"async {label}{tag}",
        )
        gap = np.asarray(fluid, dtype=np.float64) - sim
        per = (adv[:cut, None] * sc[:cut]).reshape(nb, batch, 2).mean(axis=1)
        errors.append(
            _ModelError(
                f"fluid model, async {label}{tag}",
                float(np.linalg.norm(fluid)) / norm,
                float(np.linalg.norm(sim)) / norm,
                float(np.linalg.norm(gap)) / norm,
                _block_se(per) / norm,
            )
        )
    return out, errors
