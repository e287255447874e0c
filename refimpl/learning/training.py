r"""Training the toy policy through the simulator: the causal loop as a fixed point."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import as_float_array, as_int, as_real, invalid
from refimpl.dispatch import inclusion_probability_pmf
from refimpl.learning._common import _LOG_MAX, FloatArray
from refimpl.learning.asynchronous import CORRECTIONS
from refimpl.learning.first_k import FIRST_K_CORRECTIONS
from refimpl.learning.moments import expected_length
from refimpl.learning.policy import _log_hazards, hazard_length_pmf, stop_hazard
from refimpl.staleness import (
    decoupled_ppo_weights,
    masked_is_weights,
    truncated_is_weights,
)


class TrainingRun(NamedTuple):
    """A training run of the toy policy through the simulator (see :func:`train_policy`)."""

    thetas: FloatArray
    """Parameters of every version ``0..steps``, shape (steps + 1, d)."""
    publish_times: FloatArray
    """Simulated time at which version ``j + 1`` was published, shape (steps,)."""
    mean_length: FloatArray
    r""":math:`E_{\theta_j}[L]`, exact, per version."""
    expected_reward: FloatArray
    r""":math:`J(\theta_j)`, exact, per version."""
    gradients: FloatArray
    r"""The corrected batch estimate :math:`\hat g_j` of every step, shape (steps, d)."""
    iterations: int
    """Passes of the consistency fixed point (simulate, train, redraw lengths) until stable."""
    trace: Any
    """The final :class:`refimpl.sim.SimTrace`."""


def _token_version_matrix(trace: Any, rows: NDArray[np.int64], m: int) -> NDArray[np.int64]:
    """Version of every token ``1..M`` of each row (token ``t`` starts after ``t − 1`` tokens)."""
    out = np.empty((rows.size, m), dtype=np.int64)
    starts_all = trace.segment_tokens
    vers_all = trace.segment_versions
    offs = trace.segment_offsets
    pos = np.arange(m, dtype=np.float64)
    for i, row in enumerate(rows):
        a, b = int(offs[row]), int(offs[row + 1])
        if b - a == 1:
            out[i] = vers_all[a]
            continue
        idx = np.searchsorted(starts_all[a:b], pos, side="right") - 1
        out[i] = vers_all[a:b][np.maximum(idx, 0)]
    return out


def _lengths_from_uniforms(
    hazards: FloatArray, versions: NDArray[np.int64], uniforms: FloatArray
) -> NDArray[np.int64]:
    """First ``t`` with ``u_t < h_{v_t}(t)``: the length each row's token decisions give."""
    m = uniforms.shape[1]
    h = hazards[versions, np.arange(m)[None, :]]
    stop = uniforms < h
    stop[:, -1] = True
    return np.asarray(np.argmax(stop, axis=1) + 1, dtype=np.int64)


def train_policy(
    theta0: ArrayLike,
    features: ArrayLike,
    quality: ArrayLike,
    *,
    slots: int,
    batch: int,
    steps: int,
    learning_rate: float,
    mode: str = "async",
    eta: int | None = None,
    partial: str = "none",
    launch: int | None = None,
    correction: str = "none",
    penalty: float = 0.0,
    baseline: str | float = "batch",
    cap: float = 2.0,
    low: float = 0.5,
    high: float = 2.0,
    seed: int = 0,
    max_iterations: int = 500,
    schedule: ArrayLike | None = None,
    leftovers: str = "drop",
    durations: ArrayLike | None = None,
) -> TrainingRun:
    r"""Train the toy policy on the batches that :func:`refimpl.sim.simulate` forms.

    The simulator decides which version launches each rollout, which versions generate its tokens
    (``partial`` rollouts mix versions), when it finishes and which batch trains it; the trainer at
    step :math:`j` holds :math:`\theta_j` and applies

    .. math::

        \theta_{j+1} = \theta_j + \alpha\,\frac1B \sum_{i \in \text{batch } j}
        (R_i - b_j)\,G_i, \qquad G_i = \sum_t w_{i,t}\,\nabla\log\pi_{\theta_j}(a_{i,t}),

    with :math:`w` the correction's weights between :math:`\pi_{\theta_j}` and the versions that
    generated each token (:func:`corrected_scores`; ``horvitz_thompson``/``hajek`` for
    ``mode='first_k'``), :math:`b_j` the batch mean reward (``baseline='batch'``) or 0.

    Each rollout carries seeded uniforms :math:`u_{t}` (one per position) and :math:`v` (its
    success): it stops at the first :math:`t` with :math:`u_t < h_{\theta_{v_t}}(t)` and succeeds
    iff :math:`v < Q(\ell)`. Lengths depend on versions and versions on lengths (through the
    timing), so the run is the fixed point of: simulate with the current lengths, train, redraw every
    launched rollout's length from its own token versions; repeated until no length changes. At the
    fixed point each rollout's length is exactly what its token versions' hazards decide, so the run
    is a realisation of the causal loop. Seeded: bit-for-bit reproducible.

    Parameters
    ----------
    theta0 : array_like (d,)
    features : array_like (M, d)
    quality : array_like (M,)
    slots, batch, steps : int
        :math:`N`, :math:`B` and trainer steps.
    learning_rate : float
        :math:`\alpha > 0`.
    mode : {'async', 'sync', 'first_k'}
        The simulator's dispatch; ``first_k`` launches ``launch`` rollouts per step.
    eta : int, optional
        Staleness bound: samples staler than it are dropped at consumption (the staleness mask of
        conventions §staleness-bound, ``over_bound='drop'``).
    partial : {'none', 'recompute', 'keep_kv'}
        Partial rollouts (async only).
    launch : int, optional
        ``first_k``: rollouts launched per step.
    correction : str
        One of :data:`CORRECTIONS`, or ``horvitz_thompson``/``hajek``/``clipped_ht`` (``first_k``;
        ``clipped_ht`` clips the weights at ``cap``).
    penalty, cap, low, high : float
        As in :func:`gradient_moments` and :func:`corrected_scores`.
    baseline : {'batch', 'none'} or float
        The batch mean reward, no baseline, or a constant.
    seed : int
    max_iterations : int
        Bound on the fixed-point passes; an error names it if reached.
    schedule : array_like (steps + 1, d), optional
        Replay a fixed policy path instead of training: version :math:`j` is ``schedule[j]``
        (``schedule[0]`` must equal ``theta0``); the estimates :math:`\hat g_j` are computed and
        recorded but not applied (a closed-form check of the expected gradient with stale
        behaviours). ``baseline`` may then be a number, a constant :math:`b`.
    leftovers : {'drop', 'carry'}
        ``first_k``: the rollouts not among the first ``batch`` are dropped or carried into the
        next step (their tokens stay those of the version that launched them: stale behaviours).
    durations : array_like (M,), optional
        Simulated time a rollout of ``ℓ`` tokens takes, ``durations[ℓ − 1]`` (non-decreasing,
        > 0); default ``ℓ`` itself (one unit per token). It maps a length law of another scale or
        shape onto the toy policy without changing which rollouts finish first. Needs
        ``partial='none'`` (a partial rollout's versions change at token positions).

    Returns
    -------
    TrainingRun

    Examples
    --------
    >>> from refimpl.learning import length_features
    >>> phi = length_features(6, degree=1)
    >>> run = train_policy([0.0, -2.0], phi, np.linspace(0.1, 0.9, 6), slots=4, batch=4, steps=5,
    ...                    learning_rate=0.5, seed=1)
    >>> run.thetas.shape, bool(np.all(np.diff(run.publish_times) > 0))
    ((6, 2), True)
    """
    import refimpl.sim as rsim

    th0 = as_float_array(theta0, name="theta0", ndim=1)
    phi = as_float_array(features, name="features", ndim=2)
    qual = as_float_array(quality, name="quality", ndim=1)
    m = phi.shape[0]
    if qual.size != m:
        raise invalid("quality", f"have one value per length ({m})", qual, "Pass Q(1..M).")
    lr = as_real(learning_rate, name="learning_rate", low=0.0, low_open=True)
    n_steps = as_int(steps, name="steps", minimum=1, meaning="trainer steps")
    b_ = as_int(batch, name="batch", minimum=1, meaning="samples per step")
    n_ = as_int(slots, name="slots", minimum=1, meaning="generation slots")
    seed = as_int(seed, name="seed", minimum=0, meaning="random seed")
    allowed = CORRECTIONS + (FIRST_K_CORRECTIONS[1:] if mode == "first_k" else ())
    if correction not in allowed:
        raise invalid(
            "correction", f"be one of {allowed} for mode={mode!r}", correction, "Pick one."
        )
    if isinstance(baseline, str):
        if baseline not in ("batch", "none"):
            raise invalid("baseline", "be 'batch', 'none' or a number", baseline, "Pick one.")
    else:
        baseline = as_real(baseline, name="baseline")
    path: FloatArray | None = None
    if schedule is not None:
        path = as_float_array(schedule, name="schedule", ndim=2)
        if path.shape != (n_steps + 1, th0.size) or not np.array_equal(path[0], th0):
            raise invalid(
                "schedule",
                f"have shape (steps + 1, d) = ({n_steps + 1}, {th0.size}) and start at theta0",
                path,
                "Pass the parameters of versions 0..steps, the first equal to theta0.",
            )
    c = as_real(penalty, name="penalty", low=0.0)
    dur: FloatArray | None = None
    if durations is not None:
        dur = as_float_array(durations, name="durations", ndim=1)
        if dur.size != m or not np.all(dur > 0) or np.any(np.diff(dur) < 0) or partial != "none":
            raise invalid(
                "durations",
                f"have {m} positive non-decreasing entries, with partial='none'",
                dur,
                "Pass the simulated time of each length 1..M (sorted), and no partial rollouts.",
            )
    per_slot = n_steps * b_ / n_ if mode in ("async", "admission") else n_steps
    columns = math.ceil(per_slot * 1.5) + 16
    while True:
        try:
            return _train(
                th0,
                phi,
                qual,
                n_,
                b_,
                n_steps,
                lr,
                mode,
                eta,
                partial,
                launch,
                correction,
                c,
                baseline,
                cap,
                low,
                high,
                seed,
                max_iterations,
                columns,
                path,
                leftovers,
                dur,
            )
        except rsim.OutOfLengths:
            columns *= 2


def _uniforms(seed: int, slots: int, columns: int, m: int) -> tuple[FloatArray, FloatArray]:
    """Per-slot token and success uniforms; more columns extend the same streams (prefix-stable)."""
    tok = np.empty((slots, columns, m))
    suc = np.empty((slots, columns))
    for i in range(slots):
        tok[i] = np.random.default_rng([seed, i, 0]).random((columns, m))
        suc[i] = np.random.default_rng([seed, i, 1]).random(columns)
    return tok, suc


def _train(
    th0: FloatArray,
    phi: FloatArray,
    qual: FloatArray,
    n_: int,
    b_: int,
    n_steps: int,
    lr: float,
    mode: str,
    eta: int | None,
    partial: str,
    launch: int | None,
    correction: str,
    c: float,
    baseline: str | float,
    cap: float,
    low: float,
    high: float,
    seed: int,
    max_iterations: int,
    columns: int,
    path: FloatArray | None,
    leftovers: str = "drop",
    dur: FloatArray | None = None,
) -> TrainingRun:
    import refimpl.sim as rsim

    m = phi.shape[0]
    uniforms, success_u = _uniforms(seed, n_, columns, m)
    h0 = stop_hazard(th0, phi)
    lengths = _lengths_from_uniforms(
        h0[None, :], np.zeros((n_ * columns, m), dtype=np.int64), uniforms.reshape(-1, m)
    ).reshape(n_, columns)
    over = "drop" if eta is not None else "keep"
    reward_mean = qual - c * np.arange(1, m + 1)
    for iteration in range(1, max_iterations + 1):
        cfg = rsim.SimConfig(
            slots=n_,
            batch=b_,
            steps=n_steps,
            mode=mode,
            lengths=lengths.astype(np.float64) if dur is None else dur[lengths - 1],
            eta=eta,
            over_bound=over,
            partial=partial,
            launch=launch,
            leftovers=leftovers,
            seed=seed,
        )
        trace = rsim.simulate(cfg)
        order = trace.training_order()
        rows_all = np.arange(len(trace), dtype=np.int64)
        versions = _token_version_matrix(trace, rows_all, m)
        thetas = np.empty((n_steps + 1, th0.size))
        thetas[0] = th0
        hazards = np.empty((n_steps + 1, m))
        hazards[0] = h0
        log_stop = np.empty((n_steps + 1, m))
        log_cont = np.empty((n_steps + 1, m))
        log_stop[0], log_cont[0] = _log_hazards(th0, phi)
        step_of = trace.step[order]
        slot_col = (trace.slot[order], trace.index[order])
        # the token length of each trained rollout (the trace holds its duration)
        ell = np.asarray(trace.length[order] if dur is None else lengths[slot_col], dtype=np.int64)
        succ = success_u[slot_col] < qual[ell - 1]
        rewards = succ.astype(np.float64) - c * ell
        grads = np.zeros((n_steps, th0.size))
        for j in range(n_steps):
            sel = np.flatnonzero(step_of == j)
            th = thetas[j]
            h_j = hazards[j]
            g = np.zeros(th.size)
            if sel.size:
                rows = order[sel]
                r = rewards[sel]
                if isinstance(baseline, str):
                    adv = r - r.mean() if baseline == "batch" else r
                else:
                    adv = r - baseline
                gi = _sample_scores(
                    j,
                    hazards,
                    log_stop,
                    log_cont,
                    phi,
                    versions[rows],
                    ell[sel],
                    correction,
                    cap,
                    low,
                    high,
                )
                if correction in ("horvitz_thompson", "hajek", "clipped_ht"):
                    pi = inclusion_probability_pmf(
                        hazard_length_pmf(h_j), n=int(launch or n_), k=b_
                    )
                    wk = b_ / ((launch or n_) * pi[ell[sel] - 1])
                    if correction == "clipped_ht":
                        wk = np.minimum(wk, cap)
                    scale = wk / wk.sum() if correction == "hajek" else wk / b_
                    g = (scale * adv) @ gi
                else:
                    g = (adv @ gi) / b_
            grads[j] = g
            thetas[j + 1] = th + lr * g if path is None else path[j + 1]
            hazards[j + 1] = stop_hazard(thetas[j + 1], phi)
            log_stop[j + 1], log_cont[j + 1] = _log_hazards(thetas[j + 1], phi)
        implied = _lengths_from_uniforms(hazards, versions, uniforms[trace.slot, trace.index])
        new = lengths.copy()
        new[trace.slot, trace.index] = implied
        if np.array_equal(new, lengths):
            pmfs = [hazard_length_pmf(h) for h in hazards]
            return TrainingRun(
                thetas,
                np.asarray(trace.publish_times, dtype=np.float64),
                np.asarray([expected_length(p) for p in pmfs], dtype=np.float64),
                np.asarray([float(p @ reward_mean) for p in pmfs], dtype=np.float64),
                grads,
                iteration,
                trace,
            )
        lengths = new
    raise invalid(
        "max_iterations",
        "be large enough for the lengths to reach their fixed point",
        max_iterations,
        "Pass a larger max_iterations (or a smaller learning_rate).",
    )


def _sample_scores(
    version: int,
    hazards: FloatArray,
    log_stop: FloatArray,
    log_cont: FloatArray,
    features: FloatArray,
    versions: NDArray[np.int64],
    lengths: NDArray[np.int64],
    correction: str,
    cap: float,
    low: float,
    high: float,
) -> FloatArray:
    """``G_i`` of each trained sample: corrected score at ``version`` given its token versions."""
    hazard = hazards[version]
    m = hazard.size
    t = np.arange(m)
    valid = (t[None, :] < lengths[:, None]).astype(np.float64)
    is_stop = t[None, :] == (lengths[:, None] - 1)
    ht = hazard[None, :]
    tok = np.where(is_stop[:, :, None], (1.0 - ht)[:, :, None] * features[None], 0.0)
    tok = tok + np.where(
        (valid > 0)[:, :, None] & ~is_stop[:, :, None], -ht[:, :, None] * features[None], 0.0
    )
    if correction in ("none", "horvitz_thompson", "hajek", "clipped_ht"):
        return np.asarray(tok.sum(axis=1), dtype=np.float64)
    lt = np.where(is_stop, log_stop[version][None, :], log_cont[version][None, :])
    lb = np.where(is_stop, log_stop[versions, t[None, :]], log_cont[versions, t[None, :]])
    lt = np.where(valid > 0, lt, 0.0)
    lb = np.where(valid > 0, lb, 0.0)
    seq = tok.sum(axis=1)
    if correction == "sequence_is":
        w = np.exp(np.minimum(((lt - lb) * valid).sum(axis=1), _LOG_MAX))
        return np.asarray(w[:, None] * seq, dtype=np.float64)
    if correction in ("sequence_tis", "geometric"):
        level: Any = "sequence" if correction == "sequence_tis" else "geometric"
        w = truncated_is_weights(lt, lb, cap=cap, level=level, mask=valid)
        return np.asarray(w[:, None] * seq, dtype=np.float64)
    if correction == "token_tis":
        wt = truncated_is_weights(lt, lb, cap=cap, level="token", mask=valid)
    elif correction == "icepop":
        wt = masked_is_weights(lt, lb, low=low, high=high, level="token", mask=valid)
    else:
        wt = decoupled_ppo_weights(lt, lb, cap=cap, mask=valid)
    return np.asarray((wt[:, :, None] * tok).sum(axis=1), dtype=np.float64)
