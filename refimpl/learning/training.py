r"""Training the toy policy through the simulator: the causal loop as a fixed point."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import as_float_array, as_int, as_real, invalid
from refimpl.dispatch import inclusion_probability_pmf
from refimpl.learning._common import FloatArray
from refimpl.learning.asynchronous import CORRECTIONS, _weighted_scores
from refimpl.learning.estimators import estimator_status
from refimpl.learning.first_k import FIRST_K_CORRECTIONS
from refimpl.learning.moments import expected_length
from refimpl.learning.policy import _log_hazards, hazard_length_pmf, stop_hazard


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
    """The final :class:`refimpl.sim.SimTrace` (for ``sync_minibatch``: one simulator step per
    round of ``N/B`` optimizer steps)."""
    estimator: str = ""
    """The estimator and its kind (:func:`estimator_status`), e.g. ``'sequence_is +
    leave-one-out baseline, async: scaled'``; a biased one ends in ``(opt-in)``."""
    biased: bool = False
    """Whether the estimator is biased (run only with ``allow_biased=True``)."""
    staleness: FloatArray | None = None
    """Staleness of every trained sample in optimizer steps, in training order."""
    samples: FloatArray | None = None
    """Rollouts generated (launched) by the publication of each version ``1..steps``."""


class _Setup(NamedTuple):
    """The validated arguments of one call of :func:`train_policy`."""

    th0: FloatArray
    phi: FloatArray
    qual: FloatArray
    slots: int
    batch: int
    steps: int
    lr: float
    mode: str
    eta: int | None
    partial: str
    launch: int | None
    correction: str
    penalty: float
    baseline: str | float
    weights: tuple[float, float, float]
    seed: int
    max_iterations: int
    path: FloatArray | None
    leftovers: str
    durations: FloatArray | None
    label: str
    biased: bool

    @property
    def per_round(self) -> int:
        """Optimizer steps per simulator step: ``N/B`` for ``sync_minibatch``, else 1."""
        return self.slots // self.batch if self.mode == "sync_minibatch" else 1


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
    correction: str = "sequence_is",
    penalty: float = 0.0,
    baseline: str | float = "leave_one_out",
    cap: float = 2.0,
    low: float = 0.5,
    high: float = 2.0,
    seed: int = 0,
    max_iterations: int = 500,
    schedule: ArrayLike | None = None,
    leftovers: str = "drop",
    durations: ArrayLike | None = None,
    allow_biased: bool = False,
) -> TrainingRun:
    r"""Train the toy policy on the batches that :func:`refimpl.sim.simulate` forms.

    The simulator decides which version launches each rollout, which versions generate its tokens
    (``partial`` rollouts mix versions), when it finishes and which batch trains it; the trainer at
    step :math:`j` holds :math:`\theta_j` and applies

    .. math::

        \theta_{j+1} = \theta_j + \alpha\,\frac1B \sum_{i \in \text{batch } j}
        (R_i - b_{j,i})\,G_i, \qquad G_i = \sum_t w_{i,t}\,\nabla\log\pi_{\theta_j}(a_{i,t}),

    with :math:`w` the correction's weights between :math:`\pi_{\theta_j}` and the versions that
    generated each token (:func:`corrected_scores`; ``horvitz_thompson``/``hajek``/``clipped_ht``
    for ``mode='first_k'``) and :math:`b_{j,i}` the baseline: the mean reward of the *other*
    members (``'leave_one_out'``, the default), of the whole batch (``'batch'``), 0 (``'none'``)
    or a constant.

    **Estimators.** The default (full sequence ratio, leave-one-out baseline) is unbiased for
    ``sync`` and ``sync_minibatch`` and a positive multiple of :math:`\nabla J` in the fluid
    model of ``async``. :func:`estimator_status` classifies every combination; a *biased* one
    (e.g. no correction under staleness, Horvitz–Thompson with a batch baseline, a staleness
    bound) is refused unless ``allow_biased=True``, and the run's :attr:`TrainingRun.estimator`
    says what it is. Length weights with carried leftovers, or outside ``first_k``, are refused.

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
        :math:`N`, :math:`B` and optimizer steps.
    learning_rate : float
        :math:`\alpha > 0`.
    mode : {'async', 'sync', 'sync_minibatch', 'first_k', 'admission'}
        The dispatch. ``sync``: the simulator's synchronous step (launch :math:`B`, wait for all,
        train). ``sync_minibatch``: synchronous on all :math:`N` slots, the way synchronous
        PPO/GRPO trainers split a rollout batch into minibatches: launch :math:`N` from the
        current version, wait for all, then take :math:`N/B` optimizer steps of :math:`B`
        samples each (in slot order, which does not depend on the lengths); needs :math:`B`
        to divide :math:`N` and ``steps``. It is the fair synchronous peer of ``async`` on the
        same hardware: same slots, same batch, same optimizer steps. ``first_k`` launches
        ``launch`` rollouts per step.
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
    baseline : {'leave_one_out', 'batch', 'none'} or float
        See above.
    seed : int
    max_iterations : int
        Bound on the fixed-point passes; an error names it if reached.
    schedule : array_like (steps + 1, d), optional
        Replay a fixed policy path instead of training: version :math:`j` is ``schedule[j]``
        (``schedule[0]`` must equal ``theta0``); the estimates :math:`\hat g_j` are computed and
        recorded but not applied (a closed-form check of the expected gradient with stale
        behaviours).
    leftovers : {'drop', 'carry'}
        ``first_k``: the rollouts not among the first ``batch`` are dropped or carried into the
        next step (their tokens stay those of the version that launched them: stale behaviours).
    durations : array_like (M,), optional
        Simulated time a rollout of ``ℓ`` tokens takes, ``durations[ℓ − 1]`` (non-decreasing,
        > 0); default ``ℓ`` itself (one unit per token). It maps a length law of another scale or
        shape onto the toy policy without changing which rollouts finish first. Needs
        ``partial='none'`` (a partial rollout's versions change at token positions).
    allow_biased : bool
        Run a biased estimator (labelled as such in the result).

    Returns
    -------
    TrainingRun

    Raises
    ------
    ValueError
        For an argument out of its domain, a refused estimator, or a biased one without
        ``allow_biased=True``.

    Examples
    --------
    >>> from refimpl.learning import length_features
    >>> phi = length_features(6, degree=1)
    >>> run = train_policy([0.0, -2.0], phi, np.linspace(0.1, 0.9, 6), slots=4, batch=4, steps=5,
    ...                    learning_rate=0.5, seed=1)
    >>> run.thetas.shape, bool(np.all(np.diff(run.publish_times) > 0)), run.estimator
    ((6, 2), True, 'sequence_is + leave-one-out baseline, async: scaled')
    """
    import refimpl.sim as rsim

    setup = _validated(
        theta0, features, quality, slots=slots, batch=batch, steps=steps,
        learning_rate=learning_rate, mode=mode, eta=eta, partial=partial, launch=launch,
        correction=correction, penalty=penalty, baseline=baseline, weights=(cap, low, high),
        seed=seed, max_iterations=max_iterations, schedule=schedule, leftovers=leftovers,
        durations=durations, allow_biased=allow_biased,
    )  # fmt: skip
    rounds = setup.steps // setup.per_round
    per_slot = rounds * setup.batch * setup.per_round / setup.slots
    columns = math.ceil((per_slot if mode in ("async", "admission") else rounds) * 1.5) + 16
    while True:
        try:
            return _train(setup, columns)
        except rsim.OutOfLengths:
            columns *= 2


def _validated(theta0: ArrayLike, features: ArrayLike, quality: ArrayLike, **kw: Any) -> _Setup:
    """Every argument checked and converted, the estimator classified (refused if it must be)."""
    th0 = as_float_array(theta0, name="theta0", ndim=1)
    phi = as_float_array(features, name="features", ndim=2)
    qual = as_float_array(quality, name="quality", ndim=1)
    m = phi.shape[0]
    if qual.size != m:
        raise invalid("quality", f"have one value per length ({m})", qual, "Pass Q(1..M).")
    lr = as_real(kw["learning_rate"], name="learning_rate", low=0.0, low_open=True)
    n_steps = as_int(kw["steps"], name="steps", minimum=1, meaning="trainer steps")
    b_ = as_int(kw["batch"], name="batch", minimum=1, meaning="samples per step")
    n_ = as_int(kw["slots"], name="slots", minimum=1, meaning="generation slots")
    seed = as_int(kw["seed"], name="seed", minimum=0, meaning="random seed")
    mode, correction, baseline = kw["mode"], kw["correction"], kw["baseline"]
    _check_minibatches(mode, n_, b_, n_steps)
    allowed = CORRECTIONS + (FIRST_K_CORRECTIONS[1:] if mode == "first_k" else ())
    if correction not in allowed:
        raise invalid(
            "correction", f"be one of {allowed} for mode={mode!r}", correction, "Pick one."
        )
    if not isinstance(baseline, str):
        baseline = as_real(baseline, name="baseline")
    status = estimator_status(
        mode=mode, correction=correction, baseline=baseline, leftovers=kw["leftovers"],
        eta=kw["eta"], slots=n_, batch=b_,
    )  # fmt: skip
    biased = status.kind == "biased"
    if biased and not kw["allow_biased"]:
        raise invalid(
            "allow_biased",
            f"be True to run a biased estimator ({status.label}: {status.statement})",
            kw["allow_biased"],
            "Use correction='sequence_is' with baseline='leave_one_out' (or, under first_k "
            "with dropped leftovers, correction='horvitz_thompson' with a constant baseline), "
            "or pass allow_biased=True to run it labelled as biased.",
        )
    path = _schedule(kw["schedule"], n_steps, th0)
    c = as_real(kw["penalty"], name="penalty", low=0.0)
    dur = _durations(kw["durations"], m, kw["partial"])
    label = status.label + (" (opt-in)" if biased else "")
    cap, low, high = kw["weights"]
    return _Setup(
        th0, phi, qual, n_, b_, n_steps, lr, mode, kw["eta"], kw["partial"], kw["launch"],
        correction, c, baseline, (cap, low, high), seed, kw["max_iterations"], path,
        kw["leftovers"], dur, label, biased,
    )  # fmt: skip


def _check_minibatches(mode: str, n_: int, b_: int, n_steps: int) -> None:
    if mode == "sync_minibatch" and (n_ % b_ or n_steps % (n_ // b_)):
        raise invalid(
            "batch",
            f"divide slots={n_}, with steps a multiple of slots/batch (sync_minibatch takes "
            "slots/batch optimizer steps per round)",
            b_,
            "Pass a batch that divides slots and steps that are a multiple of slots // batch.",
        )


def _schedule(schedule: ArrayLike | None, n_steps: int, th0: FloatArray) -> FloatArray | None:
    if schedule is None:
        return None
    path = as_float_array(schedule, name="schedule", ndim=2)
    if path.shape != (n_steps + 1, th0.size) or not np.array_equal(path[0], th0):
        raise invalid(
            "schedule",
            f"have shape (steps + 1, d) = ({n_steps + 1}, {th0.size}) and start at theta0",
            path,
            "Pass the parameters of versions 0..steps, the first equal to theta0.",
        )
    return path


def _durations(durations: ArrayLike | None, m: int, partial: str) -> FloatArray | None:
    if durations is None:
        return None
    dur = as_float_array(durations, name="durations", ndim=1)
    if dur.size != m or not np.all(dur > 0) or np.any(np.diff(dur) < 0) or partial != "none":
        raise invalid(
            "durations",
            f"have {m} positive non-decreasing entries, with partial='none'",
            dur,
            "Pass the simulated time of each length 1..M (sorted), and no partial rollouts.",
        )
    return dur


class _Consumed(NamedTuple):
    """What the trainer consumes, in optimizer steps: the simulator's trace mapped onto them."""

    order: NDArray[np.int64]
    step: NDArray[np.int64]
    versions: NDArray[np.int64]
    all_versions: NDArray[np.int64]
    publish: FloatArray


def _simulate(s: _Setup, lengths: NDArray[np.int64], columns: int) -> tuple[Any, _Consumed]:
    """One simulated run with the current lengths, mapped onto optimizer steps."""
    import refimpl.sim as rsim

    k = s.per_round
    cfg = rsim.SimConfig(
        slots=s.slots,
        batch=s.batch * k,
        steps=s.steps // k,
        mode="sync" if s.mode == "sync_minibatch" else s.mode,
        lengths=lengths.astype(np.float64) if s.durations is None else s.durations[lengths - 1],
        eta=s.eta,
        over_bound="drop" if s.eta is not None else "keep",
        partial=s.partial,
        launch=s.launch,
        leftovers=s.leftovers,
        seed=s.seed,
    )
    trace = rsim.simulate(cfg)
    order = trace.training_order()
    m = s.phi.shape[0]
    versions = _token_version_matrix(trace, np.arange(len(trace), dtype=np.int64), m) * k
    step = np.asarray(trace.step[order], dtype=np.int64) * k
    publish = np.asarray(trace.publish_times, dtype=np.float64)
    if k > 1:  # minibatch i of a round: its members in slot order
        for r in np.unique(step):
            sel = np.flatnonzero(step == r)
            by_slot = sel[np.argsort(trace.slot[order[sel]], kind="stable")]
            step[by_slot] = r + np.arange(by_slot.size) // s.batch
        publish = np.repeat(publish, k)
    return trace, _Consumed(order, step, versions[order], versions, publish)


def _train(s: _Setup, columns: int) -> TrainingRun:
    """The causal loop's fixed point: simulate, train, redraw lengths, until they are stable."""
    m = s.phi.shape[0]
    uniforms, success_u = _uniforms(s.seed, s.slots, columns, m)
    h0 = stop_hazard(s.th0, s.phi)
    lengths = _lengths_from_uniforms(
        h0[None, :], np.zeros((s.slots * columns, m), dtype=np.int64), uniforms.reshape(-1, m)
    ).reshape(s.slots, columns)
    for iteration in range(1, s.max_iterations + 1):
        trace, eaten = _simulate(s, lengths, columns)
        slot_col = (trace.slot[eaten.order], trace.index[eaten.order])
        ell = np.asarray(
            trace.length[eaten.order] if s.durations is None else lengths[slot_col], dtype=np.int64
        )
        rewards = (success_u[slot_col] < s.qual[ell - 1]).astype(np.float64) - s.penalty * ell
        thetas, hazards, grads = _replay(s, eaten, ell, rewards)
        implied = _lengths_from_uniforms(
            hazards, eaten.all_versions, uniforms[trace.slot, trace.index]
        )
        new = lengths.copy()
        new[trace.slot, trace.index] = implied
        if np.array_equal(new, lengths):
            return _result(s, trace, eaten, thetas, hazards, grads, iteration)
        lengths = new
    raise invalid(
        "max_iterations",
        "be large enough for the lengths to reach their fixed point",
        s.max_iterations,
        "Pass a larger max_iterations (or a smaller learning_rate).",
    )


def _replay(
    s: _Setup, eaten: _Consumed, ell: NDArray[np.int64], rewards: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """The trainer's steps on the consumed batches: parameters, hazards and estimates."""
    m, d = s.phi.shape
    thetas = np.empty((s.steps + 1, d))
    thetas[0] = s.th0
    hazards = np.empty((s.steps + 1, m))
    hazards[0] = stop_hazard(s.th0, s.phi)
    log_stop = np.empty((s.steps + 1, m))
    log_cont = np.empty((s.steps + 1, m))
    log_stop[0], log_cont[0] = _log_hazards(s.th0, s.phi)
    grads = np.zeros((s.steps, d))
    for j in range(s.steps):
        sel = np.flatnonzero(eaten.step == j)
        if sel.size:
            gi = _sample_scores(
                j, hazards, log_stop, log_cont, s.phi, eaten.versions[sel], ell[sel],
                s.correction, *s.weights,
            )  # fmt: skip
            grads[j] = _batch_gradient(s, hazards[j], ell[sel], rewards[sel], gi)
        thetas[j + 1] = thetas[j] + s.lr * grads[j] if s.path is None else s.path[j + 1]
        hazards[j + 1] = stop_hazard(thetas[j + 1], s.phi)
        log_stop[j + 1], log_cont[j + 1] = _log_hazards(thetas[j + 1], s.phi)
    return thetas, hazards, grads


def _advantages(baseline: str | float, r: FloatArray) -> FloatArray:
    """Reward minus the baseline of each member of one batch."""
    if not isinstance(baseline, str):
        return np.asarray(r - baseline, dtype=np.float64)
    if baseline == "batch":
        return np.asarray(r - r.mean(), dtype=np.float64)
    if baseline == "leave_one_out":
        loo = (r - r.mean()) * (r.size / (r.size - 1)) if r.size > 1 else np.zeros_like(r)
        return np.asarray(loo, dtype=np.float64)
    return r


def _batch_gradient(
    s: _Setup, hazard: FloatArray, ell: NDArray[np.int64], r: FloatArray, gi: FloatArray
) -> FloatArray:
    """:math:`\\hat g_j` of one batch: advantages times corrected scores, length weights applied."""
    adv = _advantages(s.baseline, r)
    if s.correction not in FIRST_K_CORRECTIONS[1:]:
        return np.asarray((adv @ gi) / s.batch, dtype=np.float64)
    n = int(s.launch or s.slots)
    pi = inclusion_probability_pmf(hazard_length_pmf(hazard), n=n, k=s.batch)
    wk = s.batch / (n * pi[ell - 1])
    if s.correction == "clipped_ht":
        wk = np.minimum(wk, s.weights[0])
    scale = wk / wk.sum() if s.correction == "hajek" else wk / s.batch
    return np.asarray((scale * adv) @ gi, dtype=np.float64)


def _result(
    s: _Setup,
    trace: Any,
    eaten: _Consumed,
    thetas: FloatArray,
    hazards: FloatArray,
    grads: FloatArray,
    iterations: int,
) -> TrainingRun:
    reward_mean = s.qual - s.penalty * np.arange(1, s.phi.shape[0] + 1)
    pmfs = [hazard_length_pmf(h) for h in hazards]
    launch_version = eaten.all_versions[:, 0]
    samples = np.array([np.sum(launch_version < j) for j in range(1, s.steps + 1)], dtype=float)
    return TrainingRun(
        thetas,
        eaten.publish,
        np.asarray([expected_length(p) for p in pmfs], dtype=np.float64),
        np.asarray([float(p @ reward_mean) for p in pmfs], dtype=np.float64),
        grads,
        iterations,
        trace,
        s.label,
        s.biased,
        np.asarray(eaten.step - eaten.versions.min(axis=1), dtype=np.float64),
        samples,
    )


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


def _uniforms(seed: int, slots: int, columns: int, m: int) -> tuple[FloatArray, FloatArray]:
    """Per-slot token and success uniforms; more columns extend the same streams (prefix-stable)."""
    tok = np.empty((slots, columns, m))
    suc = np.empty((slots, columns))
    for i in range(slots):
        tok[i] = np.random.default_rng([seed, i, 0]).random((columns, m))
        suc[i] = np.random.default_rng([seed, i, 1]).random(columns)
    return tok, suc


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
    return _weighted_scores(tok, lt, lb, valid, correction=correction, cap=cap, low=low, high=high)
