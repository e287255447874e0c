r"""Continuous asynchronous dispatch at finite :math:`N`, exactly: which samples the trainer trains.

The fluid model of conventions §async-dispatch (:func:`refimpl.learning.fluid_staleness_pmf`) is a
first-order approximation; at a small number of slots it is measurably off. This module computes, in
exact rational arithmetic, the joint law of the **length and staleness of the trained samples** and
the law of the **number dropped per trainer step** for continuous dispatch with :math:`N` slots, batch
:math:`B`, i.i.d. integer lengths with a rational pmf, zero trainer time and an optional staleness
mask at :math:`\eta` (samples with :math:`s > \eta` dropped when consumed and replaced), and checks
:func:`refimpl.sim.simulate` against it:

- :func:`continuous_dispatch_law`: the exact law over trainer steps ``first_step .. steps - 1`` of a
  cold start (every slot launched at time 0 by version 0), by dynamic programming over the ordered
  states of the slots;
- :func:`simulated_dispatch_cells`: one draw per independent seeded simulation (a uniformly random
  trained sample of the window and a uniformly random step), so the counts over replications are
  exactly multinomial with the cell probabilities of the exact law;
- :func:`chi_square_check`: Pearson's test of such counts against the law, at a stated false-failure
  rate.

References
----------
conventions §async-dispatch, §tie-rule, §staleness; :func:`refimpl.sim.simulate` for the rules the
model copies.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from fractions import Fraction
from math import gcd
from typing import Any, Literal, NamedTuple

import numpy as np
from numpy.typing import NDArray
from scipy import stats

from refimpl._validation import as_int, as_pmf, invalid, require_one_of

__all__ = [
    "ChiSquare",
    "DispatchCells",
    "DispatchLaw",
    "chi_square_check",
    "continuous_dispatch_law",
    "simulated_dispatch_cells",
]

#: Largest number of distinct slot states :func:`continuous_dispatch_law` visits before it refuses.
MAX_STATES = 200_000


class DispatchLaw(NamedTuple):
    r"""The exact law of what continuous dispatch trains over a window of trainer steps.

    Attributes
    ----------
    sample : tuple of tuple of Fraction
        ``sample[l - 1][s]``: probability that a trained sample drawn uniformly from the window
        (``(steps - first_step) * batch`` of them) has length ``l`` and staleness ``s``.
    dropped : tuple of Fraction
        ``dropped[d]``: probability that a step drawn uniformly from the window dropped ``d`` samples
        (over the mask) while its batch was filled; ``(1,)`` without a mask.
    dropped_mean, length_mean, staleness_mean : Fraction
        Expected number dropped per step, and the mean length and staleness of a trained sample.
    states : int
        Distinct (slot state, step) pairs the dynamic programme visited.
    """

    sample: tuple[tuple[Fraction, ...], ...]
    dropped: tuple[Fraction, ...]
    dropped_mean: Fraction
    length_mean: Fraction
    staleness_mean: Fraction
    states: int


# A slot: (length, remaining time, staleness if consumed at the current step).
_Slot = tuple[int, int, int]
# An exact weight num / D**e (D the common denominator of the pmf).
_Weight = tuple[int, int]


def _add(x: _Weight, y: _Weight, den: int) -> _Weight:
    (a, e), (c, f) = x, y
    if e < f:
        return a * den ** (f - e) + c, f
    return a + c * den ** (e - f), e


def _value(x: _Weight, den: int) -> Fraction:
    return Fraction(x[0], den ** x[1])


# A node of the programme: (slots in launch order, accepted in the batch being filled, dropped in it).
_Node = tuple[tuple[_Slot, ...], int, int]


def continuous_dispatch_law(
    pmf: Sequence[Fraction],
    *,
    slots: int,
    batch: int,
    steps: int,
    first_step: int = 0,
    eta: int | None = None,
    completion_order: Literal["launch", "reverse"] = "launch",
    launch_version: Literal["old", "new"] = "old",
) -> DispatchLaw:
    r"""Exact joint law of (length, staleness) of the samples continuous dispatch trains.

    :math:`N` slots each run one rollout at a time and relaunch as soon as it finishes; lengths are
    i.i.d. integers with the rational pmf :math:`p` on :math:`1..M` (one token per time unit); the
    trainer takes the completions :math:`B` at a time in completion order, with zero trainer time,
    and publishes version :math:`j + 1` when batch :math:`j` is full. A sample consumed at step
    :math:`j` has staleness :math:`s = j - v_\text{launch}`; with a mask it is dropped if
    :math:`s > \eta` and does not count towards the batch. The rules at one instant are those of
    :func:`refimpl.sim.simulate` (conventions §tie-rule): completions are consumed in launch order
    and a rollout launched at the instant of a publication sees the **old** version.

    The state just after an instant is the ordered tuple of the slots (length, remaining time,
    staleness-if-consumed-now) in launch order, with the batch fill and the drops of the current
    step; the next instant is the smallest remaining time, its completions are consumed in order
    (deterministic), and the relaunched slots draw their lengths from :math:`p`. Every instant
    raises :math:`(j, \text{fill}, \#\{s = 0\})` lexicographically (a drop replaces an over-bound
    rollout by one with :math:`s = 0`), so the states are processed in that order, each once, and
    the programme ends when step ``steps`` is reached: the result is exact, not truncated.

    Parameters
    ----------
    pmf : sequence of Fraction
        Length pmf over :math:`1..M` (``Fraction`` or ``int`` entries, summing to 1 exactly).
    slots, batch : int
        :math:`N \ge 1` and :math:`B \ge 1`.
    steps : int
        Trainer steps simulated (:math:`\ge 1`).
    first_step : int
        First step of the window (``0 <= first_step < steps``): the law is over the samples trained,
        and the steps taken, at steps ``first_step .. steps - 1`` (a later start drops the cold
        start's short-biased first batches).
    eta : int, optional
        Staleness bound :math:`\eta \ge 0` (samples over it dropped when consumed); ``None``: no mask.
    completion_order : {'launch', 'reverse'}
        Order of the completions at one instant: ``'launch'`` (the simulator's rule) or
        ``'reverse'`` (newest first), a different tie rule to test a check against.
    launch_version : {'old', 'new'}
        Version seen by a rollout launched at the instant of a publication: ``'old'`` (the
        simulator's rule) or ``'new'``.

    Returns
    -------
    DispatchLaw
        The law of a uniformly drawn trained sample of the window, and of the drops of a uniformly
        drawn step.

    Raises
    ------
    ValueError, TypeError
        For a pmf that is not exact, a parameter out of its domain, or more than
        :data:`MAX_STATES` states (use fewer slots, a shorter support or fewer steps).

    Examples
    --------
    Two slots, batch 1, lengths 1 or 2 with equal probability: the first step trains a length-1
    sample whenever one exists (probability 3/4), and everything trained at step 0 is fresh.

    >>> from fractions import Fraction as F
    >>> law = continuous_dispatch_law([F(1, 2), F(1, 2)], slots=2, batch=1, steps=1)
    >>> law.sample
    ((Fraction(3, 4),), (Fraction(1, 4),))
    >>> law.length_mean, law.staleness_mean
    (Fraction(5, 4), Fraction(0, 1))
    """
    p, exact = as_pmf(pmf)
    if not exact:
        raise invalid(
            "pmf",
            "have Fraction (or int) entries (the law is computed exactly)",
            pmf,
            "Pass e.g. [Fraction(1, 2), Fraction(1, 4), Fraction(1, 4)].",
        )
    probs = list(p)
    n = as_int(slots, name="slots", minimum=1, meaning="generation slots")
    b = as_int(batch, name="batch", minimum=1, meaning="samples per trainer step")
    k = as_int(steps, name="steps", minimum=1, meaning="trainer steps")
    j0 = as_int(first_step, name="first_step", minimum=0, meaning="first step of the window")
    if j0 >= k:
        raise invalid(
            "first_step", f"be < steps={k} (the window is first_step..steps-1)", j0, "Lower it."
        )
    mask = None if eta is None else as_int(eta, name="eta", minimum=0, meaning="staleness bound")
    require_one_of(completion_order, ("launch", "reverse"), name="completion_order")
    require_one_of(launch_version, ("old", "new"), name="launch_version")
    m = len(probs)

    den, draw_table = _draw_table(probs, n)
    sample: dict[tuple[int, int], _Weight] = {}
    dropped: dict[int, _Weight] = {}
    pending: dict[tuple[int, _Node], _Weight] = {}
    heap: list[tuple[int, int, int, _Node]] = []

    def push(j: int, node: _Node, weight: _Weight) -> None:
        key = (j, node)
        if key in pending:
            pending[key] = _add(pending[key], weight, den)
            return
        pending[key] = weight
        fresh = sum(1 for slot in node[0] if slot[2] == 0)
        heapq.heappush(heap, (j, node[1], fresh, node))

    for lengths, a in draw_table[n]:
        push(0, (tuple((ell, ell, 0) for ell in lengths), 0, 0), (a, n))
    visited = 0
    while heap:
        j, _, _, node = heapq.heappop(heap)
        weight = pending.pop((j, node))
        visited += 1
        if visited > MAX_STATES:
            raise invalid(
                "slots",
                f"give at most {MAX_STATES} states (slots={n}, batch={b}, steps={k}, M={m})",
                n,
                "Use fewer slots, a shorter support or fewer steps.",
            )
        running, fill, drops = node
        dt = min(slot[1] for slot in running)
        done = [slot for slot in running if slot[1] == dt]
        if completion_order == "reverse":
            done.reverse()
        jj = j
        finished = False
        for ell, _, s_now in done:
            s = s_now + jj - j
            if mask is not None and s > mask:
                drops += 1
                continue
            if jj >= j0:
                sample[ell, s] = _add(sample.get((ell, s), (0, 0)), weight, den)
            fill += 1
            if fill == b:
                if jj >= j0:
                    dropped[drops] = _add(dropped.get(drops, (0, 0)), weight, den)
                fill, drops, jj = 0, 0, jj + 1
                if jj == k:
                    finished = True
                    break
        if finished:
            continue
        fresh_s = jj - j if launch_version == "old" else 0
        kept = tuple((ell, r - dt, s_now + jj - j) for ell, r, s_now in running if r != dt)
        num, e = weight
        e_next = e + len(done)
        for lengths, a in draw_table[len(done)]:
            launched = tuple((ell, ell, fresh_s) for ell in lengths)
            push(jj, (kept + launched, fill, drops), (num * a, e_next))

    return _dispatch_law(
        sample, dropped, den, m=m, samples=(k - j0) * b, steps=k - j0, visited=visited
    )


def _draw_table(
    probs: list[Fraction], n: int
) -> tuple[int, dict[int, list[tuple[tuple[int, ...], int]]]]:
    """The pmf's common denominator D and, for each count c <= n, every ordered draw of c lengths
    with its integer weight (its probability times D**c).

    Weights are exact integers over a power of D: (num, e) is num / D**e (a path with e draws),
    added by scaling to the larger power: the arithmetic of Fractions without a gcd at every step.
    """
    den = 1
    for q in probs:
        den = den * q.denominator // gcd(den, q.denominator)
    support = [(ell, int(q * den)) for ell, q in enumerate(probs, start=1) if q != 0]

    def draws(count: int) -> list[tuple[tuple[int, ...], int]]:
        out = []
        for combo in itertools.product(support, repeat=count):
            weight = 1
            for _, a in combo:
                weight *= a
            out.append((tuple(ell for ell, _ in combo), weight))
        return out

    return den, {c: draws(c) for c in range(n + 1)}


def _dispatch_law(
    sample: dict[tuple[int, int], _Weight],
    dropped: dict[int, _Weight],
    den: int,
    *,
    m: int,
    samples: int,
    steps: int,
    visited: int,
) -> DispatchLaw:
    """The accumulated weights of the window as probabilities, and their means."""
    s_max = max(s for _, s in sample)
    table = tuple(
        tuple(_value(sample.get((ell, s), (0, 0)), den) / samples for s in range(s_max + 1))
        for ell in range(1, m + 1)
    )
    d_max = max(dropped)
    drop_law = tuple(_value(dropped.get(d, (0, 0)), den) / steps for d in range(d_max + 1))
    length_mean = sum((ell * q for ell, row in enumerate(table, start=1) for q in row), Fraction(0))
    staleness_mean = sum((s * q for row in table for s, q in enumerate(row)), Fraction(0))
    dropped_mean = sum((d * q for d, q in enumerate(drop_law)), Fraction(0))
    return DispatchLaw(table, drop_law, dropped_mean, length_mean, staleness_mean, visited)


class DispatchCells(NamedTuple):
    """Counts of one draw per seeded simulation (see :func:`simulated_dispatch_cells`).

    Attributes
    ----------
    sample : int64 array, shape (M, S)
        ``sample[l - 1, s]``: replications whose drawn trained sample had length ``l``, staleness ``s``.
    dropped : int64 array
        ``dropped[d]``: replications whose drawn step dropped ``d`` samples.
    dropped_total : int
        Samples dropped at the window's steps, summed over every replication (not one draw each).
    """

    sample: NDArray[np.int64]
    dropped: NDArray[np.int64]
    dropped_total: int


def simulated_dispatch_cells(
    pmf: Sequence[Fraction],
    *,
    slots: int,
    batch: int,
    steps: int,
    first_step: int = 0,
    eta: int | None = None,
    replications: int,
    seed: int = 0,
) -> DispatchCells:
    r"""Run :func:`refimpl.sim.simulate` once per replication and draw one cell from each run.

    Replication :math:`r` simulates ``SimConfig(mode='async', lengths=pmf, seed=seed + r)`` (with
    ``eta`` and ``over_bound='drop'`` for a mask) and, with a separate generator seeded
    ``(seed, r)``, draws one trained sample uniformly from the window's steps and one step uniformly
    from the window. The replications are independent and each contributes one draw, so the counts
    are multinomial with the probabilities of :func:`continuous_dispatch_law` (same parameters)
    when the simulator follows its rules.

    Parameters
    ----------
    pmf, slots, batch, steps, first_step, eta
        As in :func:`continuous_dispatch_law`.
    replications : int
        Independent simulations (:math:`\ge 1`).
    seed : int
        First simulation seed.

    Returns
    -------
    DispatchCells
    """
    from refimpl.sim import STATUS, SimConfig, simulate

    p, _ = as_pmf(pmf)
    m = len(p)
    k = as_int(steps, name="steps", minimum=1, meaning="trainer steps")
    j0 = as_int(first_step, name="first_step", minimum=0, meaning="first step of the window")
    reps = as_int(replications, name="replications", minimum=1, meaning="independent simulations")
    base = as_int(seed, name="seed", minimum=0)
    floats = np.array([float(x) for x in p])
    extra: dict[str, Any] = {} if eta is None else {"eta": eta, "over_bound": "drop"}
    cells: dict[tuple[int, int], int] = {}
    drops: dict[int, int] = {}
    total = 0
    for r in range(reps):
        cfg = SimConfig(slots=slots, batch=batch, steps=k, lengths=floats, seed=base + r, **extra)
        trace = simulate(cfg)
        rng = np.random.default_rng([base, r])
        window = (trace.status == STATUS["trained"]) & (trace.step >= j0)
        rows = np.flatnonzero(window)
        row = int(rows[rng.integers(rows.size)])
        key = (int(trace.length[row]), int(trace.staleness[row]))
        cells[key] = cells.get(key, 0) + 1
        over = (trace.status == STATUS["dropped"]) & (trace.step >= j0)
        step = j0 + int(rng.integers(k - j0))
        d = int(np.count_nonzero(over & (trace.step == step)))
        drops[d] = drops.get(d, 0) + 1
        total += int(np.count_nonzero(over))
    s_max = max(s for _, s in cells)
    sample = np.zeros((m, s_max + 1), dtype=np.int64)
    for (ell, s), c in cells.items():
        sample[ell - 1, s] = c
    dropped = np.zeros(max(drops) + 1, dtype=np.int64)
    for d, c in drops.items():
        dropped[d] = c
    return DispatchCells(sample, dropped, total)


class ChiSquare(NamedTuple):
    """Pearson's chi-square test of multinomial counts against exact probabilities.

    Attributes
    ----------
    statistic : float
        :math:`\\sum_c (n_c - R\\,q_c)^2 / (R\\,q_c)` over the pooled cells.
    df : int
        Pooled cells minus one.
    threshold : float
        The chi-square quantile at ``1 - alpha``: the test fails above it.
    cells : int
        Cells after pooling those with expected count below 5.
    impossible : int
        Counts in cells of probability 0 (any makes the test fail).
    passed : bool
    """

    statistic: float
    df: int
    threshold: float
    cells: int
    impossible: int
    passed: bool


def chi_square_check(counts: Any, probabilities: Any, *, alpha: float) -> ChiSquare:
    r"""Pearson's test of counts against exact cell probabilities, at false-failure rate ``alpha``.

    Cells are compared after padding both arrays to a common shape. Cells of probability 0 must be
    empty (a count there fails the test outright); cells whose expected count :math:`R q_c` is below
    5 are pooled into one (and that pool into the smallest other cell while it is below 5), so the
    chi-square law with ``cells - 1`` degrees of freedom is a fair approximation and the test
    fails a correct simulator with probability about ``alpha``.

    Parameters
    ----------
    counts : array_like of int
        Observed counts (any shape).
    probabilities : array_like
        Cell probabilities (Fractions allowed), summing to 1.
    alpha : float
        False-failure rate, in (0, 1).

    Returns
    -------
    ChiSquare

    Examples
    --------
    >>> chi_square_check([52, 48], [0.5, 0.5], alpha=1e-3).passed
    True
    >>> chi_square_check([90, 10], [0.5, 0.5], alpha=1e-3).passed
    False
    """
    if not 0 < alpha < 1:
        raise invalid("alpha", "lie in (0, 1) (a false-failure rate)", alpha, "Pass e.g. 1e-6.")
    c = np.asarray(counts, dtype=np.int64)
    q = np.asarray(
        np.vectorize(float, otypes=[np.float64])(np.asarray(probabilities, dtype=object))
    )
    shape = tuple(max(a, b) for a, b in itertools.zip_longest(c.shape, q.shape, fillvalue=1))
    cp = np.zeros(shape, dtype=np.int64)
    qp = np.zeros(shape)
    cp[tuple(slice(0, s) for s in c.shape)] = c
    qp[tuple(slice(0, s) for s in q.shape)] = q
    cf, qf = cp.ravel(), qp.ravel()
    total = int(cf.sum())
    impossible = int(cf[qf == 0].sum())
    live = qf > 0
    obs, exp = list(cf[live].astype(float)), list(qf[live] * total)
    small = [i for i, e in enumerate(exp) if e < 5]
    big = [i for i, e in enumerate(exp) if e >= 5]
    cells_obs = [obs[i] for i in big]
    cells_exp = [exp[i] for i in big]
    if small:
        po, pe = sum(obs[i] for i in small), sum(exp[i] for i in small)
        while pe < 5 and cells_exp:
            i = int(np.argmin(cells_exp))
            po, pe = po + cells_obs.pop(i), pe + cells_exp.pop(i)
        cells_obs.append(po)
        cells_exp.append(pe)
    o, e = np.array(cells_obs), np.array(cells_exp)
    statistic = float(np.sum((o - e) ** 2 / e))
    df = max(len(e) - 1, 1)
    threshold = float(stats.chi2.isf(alpha, df))
    passed = impossible == 0 and statistic <= threshold
    return ChiSquare(statistic, df, threshold, len(e), impossible, passed)
