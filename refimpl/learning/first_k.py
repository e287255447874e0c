r"""First-:math:`k`-of-:math:`n` dispatch: the exact batch gradient, dropped or carried leftovers."""

from __future__ import annotations

import functools
import itertools
import math
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from refimpl._validation import as_int, as_real, invalid
from refimpl.dispatch import inclusion_probability_pmf
from refimpl.learning._common import AnyArray, _as_array
from refimpl.learning.moments import GradientMoments, _reward

#: The length-bias corrections of :func:`first_k_gradient` (conventions §first-k-of-n).
FIRST_K_CORRECTIONS: tuple[str, ...] = ("none", "horvitz_thompson", "hajek", "clipped_ht")

_MAX_COMPOSITIONS = 200_000


def _compositions(total: int, parts: int) -> Any:
    for bars in itertools.combinations(range(total + parts - 1), parts - 1):
        prev = -1
        out = []
        for b in bars:
            out.append(b - prev - 1)
            prev = b
        out.append(total + parts - 2 - prev)
        yield tuple(out)


def first_k_gradient(
    pmf: Any,
    scores: Any,
    quality: Any,
    *,
    n: int,
    k: int,
    correction: str = "none",
    penalty: Any = 0,
    baseline: Any = 0,
    clip: Any = None,
) -> GradientMoments:
    r"""Exact mean and covariance trace of the batch gradient under first-:math:`k`-of-:math:`n` dispatch.

    :math:`n` rollouts are launched from :math:`p_\theta`, the first :math:`k` to finish form the
    batch (ties broken uniformly: the batch *multiset* :math:`\beta` is a function of the lengths).
    The estimates are

    .. math::

        \hat g_\text{none} = \frac1k\sum_{i\in\beta}(R_i - b)\,s_i, \quad
        \hat g_\text{HT} = \frac1k\sum_{i\in\beta} w_i (R_i - b)\,s_i, \quad
        \hat g_\text{Hájek} = \frac{\sum_{i\in\beta} w_i (R_i - b)\,s_i}{\sum_{i\in\beta} w_i},

    with :math:`w = k/(n\pi)` (:func:`refimpl.inclusion_probability_pmf`; ``clipped_ht`` is
    :math:`\hat g_\text{HT}` with :math:`w = \min(k/(n\pi), C)`, as
    :func:`refimpl.ipw_weights` with ``clip``: biased towards the uncorrected gradient wherever a
    weight is clipped, unbiased when :math:`C \ge \max_\ell k/(n\pi(\ell))`) and
    :math:`s = \nabla\log p_\theta(\ell)`. :math:`E[\hat g_\text{none}] = \sum_\ell q(\ell)(\bar R -
    b) s` with :math:`q` = :func:`refimpl.selected_pmf` (biased), :math:`E[\hat g_\text{HT}] = \nabla
    J` exactly (claim :ref:`LRN1 <lrn1>`), Hájek is biased for finite :math:`k`. Mean and variance are finite sums
    over the compositions :math:`\beta` of :math:`k` (probability as in
    :func:`refimpl.ipw_estimator_moments`), with the Bernoulli reward noise included.

    Parameters
    ----------
    pmf : array_like (M,) or sequence of Fraction
        :math:`p_\theta`.
    scores : array_like (M, d)
        :math:`\nabla\log p_\theta(\ell)`.
    quality : array_like (M,)
        :math:`Q(\ell)`.
    n, k : int
        Launched and trained per step, :math:`1 \le k \le n`.
    correction : {'none', 'horvitz_thompson', 'hajek', 'clipped_ht'}
        The length-bias correction.
    penalty : float or Fraction
        As in :func:`gradient_moments`.
    baseline : float, Fraction or 'batch'
        A constant :math:`b`, or ``'batch'``: :math:`b = \bar R`, the mean reward of the batch
        itself (as :func:`train_policy` uses it). The batch baseline depends on the batch, so
        none of the estimators is unbiased with it: on-policy it scales the gradient by
        :math:`1 - 1/k`; with first-:math:`k` weights the members are dependent and the bias is
        not a scaling (claim :ref:`LRN7 <lrn7>`; :func:`estimator_bias` states it).
    clip : float or Fraction, optional
        :math:`C > 0`, the cap of ``clipped_ht``'s weights (required for it, refused otherwise).

    Returns
    -------
    GradientMoments
        ``trace_variance`` is that of the *batch* estimate (members of a batch are dependent).

    Raises
    ------
    ValueError
        For an unknown correction, ``k > n``, or more than 200 000 compositions.

    Examples
    --------
    >>> from refimpl.learning import hazard_length_pmf, token_scores
    >>> from fractions import Fraction as F
    >>> h = [F(1, 2), F(1)]
    >>> p, s = hazard_length_pmf(h), token_scores(h, [[1], [1]]).sum(axis=1)
    >>> Q = [F(1, 4), F(3, 4)]
    >>> first_k_gradient(p, s, Q, n=2, k=1).mean.tolist()  # the length bias cancels the gradient
    [Fraction(0, 1)]
    >>> first_k_gradient(p, s, Q, n=2, k=1, correction="horvitz_thompson").mean.tolist()
    [Fraction(-1, 8)]
    >>> first_k_gradient(p, s, Q, n=2, k=1, correction="clipped_ht", clip=F(1)).mean.tolist()
    [Fraction(-1, 32)]
    """
    if correction not in FIRST_K_CORRECTIONS:
        raise invalid(
            "correction", f"be one of {FIRST_K_CORRECTIONS}", correction, "Pick one of them."
        )
    if (clip is None) != (correction != "clipped_ht"):
        raise invalid(
            "clip",
            "be given exactly when correction='clipped_ht' (the cap of its weights)",
            clip,
            "Pass clip=C > 0 with correction='clipped_ht', and no clip otherwise.",
        )
    n_ = as_int(n, name="n", minimum=1, meaning="rollouts launched per step")
    k_ = as_int(k, name="k", minimum=1, meaning="batch size")
    if k_ > n_:
        raise invalid("k", f"be <= n={n_}", k_, "Pass k <= n.")
    p, exact_p = _as_array(pmf, name="pmf", ndim=1)
    s, exact_s = _as_array(scores, name="scores", ndim=2)
    r, var, exact_r = _reward(quality, penalty, p.size)
    exact = exact_p and exact_s and exact_r
    num: Any = Fraction if exact else float
    batch_baseline = _batch_baseline(baseline)
    b: Any = 0 if batch_baseline else baseline
    b = Fraction(b) if exact else as_real(b, name="baseline")
    if exact:
        pi: list[Any] = list(inclusion_probability_pmf(list(p), n=n_, k=k_))
    else:
        p, s, r, var = (x.astype(np.float64) for x in (p, s, r, var))
        pi = list(inclusion_probability_pmf(p / p.sum(), n=n_, k=k_))
    support = [j for j in range(p.size) if p[j] > 0]
    count = math.comb(k_ + len(support) - 1, len(support) - 1)
    if count > _MAX_COMPOSITIONS:
        raise invalid(
            "k",
            f"give at most {_MAX_COMPOSITIONS} batch compositions for exact enumeration",
            k_,
            f"(k={k_} over {len(support)} support points gives {count}); use a smaller k or M.",
        )
    exact = exact and (clip is None or (isinstance(clip, (Fraction, int)) and clip > 0))
    if not exact and isinstance(p[0], Fraction):
        p, s, r, var = (x.astype(np.float64) for x in (p, s, r, var))
        pi = [float(x) for x in pi]
        num, b = float, float(b)
    dtype: Any = object if exact else np.float64
    w = np.array([num(k_) / (num(n_) * pi[j]) for j in support], dtype=dtype)
    if clip is not None:
        cap = Fraction(clip) if exact else as_real(clip, name="clip", low=0.0, low_open=True)
        w = np.array([min(x, cap) for x in w], dtype=dtype)
    adv = np.array([r[j] - b for j in support], dtype=dtype)
    sv = s[support]
    sq = (sv * sv).sum(axis=1)
    vr = var[support]
    counts, prob = _composition_table(tuple(p[j] for j in range(p.size)), n_, k_, exact)
    cm = counts.astype(dtype)
    if correction == "none":
        unit = np.full(cm.shape, num(1) / k_, dtype=dtype)
    elif correction in ("horvitz_thompson", "clipped_ht"):
        unit = np.broadcast_to(w / k_, cm.shape)
    else:
        unit = w[None, :] / (cm @ w)[:, None]
    coef = cm * unit  # (compositions, support): weight of each length in each batch
    if batch_baseline:
        est, noise = _batch_baseline_terms(cm, unit, adv, sv, vr, k_)
    else:
        est = (coef * adv[None, :]) @ sv  # (compositions, d)
        noise = (cm * unit * unit * (vr * sq)[None, :]).sum(axis=1)
    mean = prob @ est
    second = prob @ ((est * est).sum(axis=1) + noise)
    trace = second - (mean * mean).sum()
    if not exact:
        return GradientMoments(np.asarray(mean, dtype=np.float64), float(trace))
    return GradientMoments(np.asarray(mean, dtype=object), trace)


def _batch_baseline(baseline: Any) -> bool:
    """``True`` for ``baseline='batch'``; any other string is refused."""
    if isinstance(baseline, str):
        if baseline != "batch":
            raise invalid(
                "baseline",
                "be a number (a constant b) or 'batch' (the batch's mean reward)",
                baseline,
                "Pass baseline=b or baseline='batch'.",
            )
        return True
    return False


def _batch_baseline_terms(
    cm: AnyArray, unit: AnyArray, adv: AnyArray, sv: AnyArray, vr: AnyArray, k: int
) -> tuple[AnyArray, AnyArray]:
    r"""Conditional mean and reward-noise trace of each batch's estimate with the batch baseline.

    :math:`\hat g = \sum_i u_i (R_i - \bar R)\,s_i = \sum_j R_j (u_j s_j - V/k)` with
    :math:`V = \sum_i u_i s_i`: given the batch, the mean is :math:`\sum_j (r_j - \bar r)\,u_j s_j`
    and the noise is :math:`\sum_j \mathrm{Var}(R_j)\,\lVert u_j s_j - V/k\rVert^2`.
    """
    r_bar = (cm @ adv) / k  # (compositions,)
    coef = cm * unit
    est = (coef * (adv[None, :] - r_bar[:, None])) @ sv
    big_v = coef @ sv  # (compositions, d)
    sq = (sv * sv).sum(axis=1)
    cross = big_v @ sv.T  # (compositions, support): V · s_j
    vv = (big_v * big_v).sum(axis=1)
    per = unit * unit * sq[None, :] - 2 * unit * cross / k + vv[:, None] / (k * k)
    noise = (cm * per * vr[None, :]).sum(axis=1)
    return est, noise


@functools.lru_cache(maxsize=16)
def _composition_table(
    p: tuple[Any, ...], n: int, k: int, exact: bool
) -> tuple[NDArray[np.int64], AnyArray]:
    r"""Batch compositions of ``k`` over the support of ``p`` and their probabilities.

    With :math:`m` the longest length in the batch :math:`\beta` (``b_m`` members),
    :math:`P(\beta) = n! \prod_{j<m} p_j^{b_j}/b_j! \sum_{c=b_m}^{n-k+b_m}
    p_m^c S_m^{n-k+b_m-c}/(c!(n-k+b_m-c)!)` (as in :func:`refimpl.ipw_estimator_moments`).
    """
    zero: Any = Fraction(0) if exact else 0.0
    num: Any = Fraction if exact else float
    support = [j for j in range(len(p)) if p[j] > 0]
    surv = [zero] * len(p)
    acc = zero
    for j in range(len(p) - 1, -1, -1):
        surv[j] = acc
        acc = acc + p[j]
    fact = [math.factorial(i) for i in range(n + 1)]
    rows = []
    probs = []
    for comp in _compositions(k, len(support)):
        last = max(i for i, c in enumerate(comp) if c > 0)
        m = support[last]
        coef = num(fact[n])
        for i in range(last):
            if comp[i]:
                coef = coef * p[support[i]] ** comp[i] / fact[comp[i]]
        rest = n - k + comp[last]
        tail = sum(
            (p[m] ** c * surv[m] ** (rest - c) / (fact[c] * fact[rest - c]))
            for c in range(comp[last], rest + 1)
        )
        rows.append(comp)
        probs.append(coef * tail)
    return np.asarray(rows, dtype=np.int64), np.asarray(
        probs, dtype=object if exact else np.float64
    )


class CarryMoments(NamedTuple):
    """The batch gradient of first-k dispatch with carried leftovers (:func:`first_k_carry_gradient`)."""

    mean: AnyArray
    """The expected batch gradient, shape (d,): float64, or ``object`` of ``Fraction``."""
    trace_variance: Any
    r""":math:`\operatorname{tr}\operatorname{Cov}` of the batch estimate."""
    trained_law: AnyArray
    r"""Joint law of (staleness :math:`s`, length :math:`\ell`) of a trained sample, shape
    (S + 1, M); its column sums are the trained length law."""
    step_time: Any
    """Expected time of one trainer step (zero trainer time, unit decode time per token)."""
    states: int
    """Number of carried-leftover states of the chain."""


_CarryItem = tuple[int, int, int]  # (remaining decode time, age in steps, length index)


def _carry_step(
    state: tuple[_CarryItem, ...], fresh: tuple[int, ...], k: int
) -> tuple[list[tuple[int, int]], int, tuple[_CarryItem, ...]]:
    """One first-k step: the batch ``[(length index, staleness)]``, its duration, the carried rest.

    Completion order is that of :mod:`refimpl.sim`: by finishing time, ties in launch order
    (older first; rollouts launched together are exchangeable). Rollouts finishing at the same
    instant as the k-th but beyond the batch are carried with remaining time 0.
    """
    items = list(state) + [(j + 1, 0, j) for j in fresh]
    items.sort(key=lambda it: (it[0], -it[1]))
    batch, rest = items[:k], items[k:]
    duration = batch[-1][0]
    carried = tuple(sorted((r - duration, a + 1, j) for r, a, j in rest))
    return [(j, a) for _, a, j in batch], duration, carried


def _solve_stationary(matrix: list[list[Any]], exact: bool) -> list[Any]:
    """``π P = π``, ``Σ π = 1`` by Gaussian elimination (Fractions) or ``numpy.linalg.solve``."""
    size = len(matrix)
    if not exact:
        af = np.asarray(matrix, dtype=np.float64).T - np.eye(size)
        af[-1] = 1.0
        e_last = np.zeros(size)
        e_last[-1] = 1.0
        return list(np.linalg.solve(af, e_last))
    a = [[matrix[c][r] - (1 if r == c else 0) for c in range(size)] for r in range(size)]
    a[-1] = [Fraction(1)] * size
    rhs: list[Any] = [Fraction(0)] * (size - 1) + [Fraction(1)]
    for col in range(size):
        piv = next((r for r in range(col, size) if a[r][col] != 0), None)
        if piv is None:
            raise invalid(
                "pmf",
                "give a carried-leftover chain with one recurrent class",
                "a singular stationarity system",
                "Report this law: the chain should be irreducible on its reachable states.",
            )
        a[col], a[piv] = a[piv], a[col]
        rhs[col], rhs[piv] = rhs[piv], rhs[col]
        inv = 1 / a[col][col]
        for r in range(size):
            if r != col and a[r][col] != 0:
                f = a[r][col] * inv
                row_r, row_c = a[r], a[col]
                for c in range(col, size):
                    if row_c[c] != 0:
                        row_r[c] -= f * row_c[c]
                rhs[r] -= f * rhs[col]
    return [rhs[i] / a[i][i] for i in range(size)]


_MAX_CARRY_STATES = 5_000


def _carry_distribution(
    trans: dict[tuple[_CarryItem, ...], list[tuple[Any, list[tuple[int, int]], int, Any]]],
    *,
    j_stop: int | None,
    carried: bool,
    exact: bool,
) -> dict[tuple[_CarryItem, ...], Any]:
    """The law of the carried leftovers: after ``j_stop`` steps from the cold start (the empty
    state), or the stationary law of the chain ``trans`` (``j_stop=None``)."""
    cold: tuple[_CarryItem, ...] = ()
    zero: Any = Fraction(0) if exact else 0.0
    if j_stop is not None:
        dist: dict[tuple[_CarryItem, ...], Any] = {cold: Fraction(1) if exact else 1.0}
        for _ in range(j_stop):
            new: dict[tuple[_CarryItem, ...], Any] = {}
            for st, w in dist.items():
                for prob, _, _, nxt in trans[st]:
                    new[nxt] = new.get(nxt, zero) + w * prob
            dist = new
    elif not carried:  # nothing is carried: every step is the cold start's
        dist = {cold: Fraction(1) if exact else 1.0}
    else:
        states = [st for st in trans if st != cold]
        index = {st: i for i, st in enumerate(states)}
        matrix = [[zero] * len(states) for _ in states]
        for st in states:
            row = matrix[index[st]]
            for prob, _, _, nxt in trans[st]:
                row[index[nxt]] += prob
        dist = dict(zip(states, _solve_stationary(matrix, exact), strict=True))
    return dist


def first_k_carry_gradient(
    pmf: Any,
    scores: Any,
    quality: Any,
    *,
    n: int,
    k: int,
    penalty: Any = 0,
    baseline: Any = 0,
    step: int | None = None,
) -> CarryMoments:
    r"""Exact batch gradient of first-:math:`k`-of-:math:`n` dispatch whose leftovers are carried.

    Every step keeps :math:`n` rollouts in flight: the :math:`n - k` not among the first :math:`k`
    to finish keep running into the next step (as ``refimpl.sim`` with ``mode='first_k'``,
    ``leftovers='carry'``), which launches :math:`k` fresh ones from :math:`p_\theta`. The carried
    rollouts (remaining decode time, age, length) form a Markov chain; its exact law after
    ``step`` steps from a cold start, or its stationary law (``step=None``: the linear system
    :math:`\pi P = \pi` solved exactly), gives the law of every batch, hence the mean and the
    covariance trace of :math:`\hat g = \frac1k\sum_{i\in\beta}(R_i - b)\,s_i` at a fixed
    :math:`\theta` and the joint (staleness, length) law of the trained samples.

    In the stationary chain every launched rollout is trained exactly once, so the trained length
    law **is** :math:`p_\theta` and the uncorrected gradient is the on-policy one (claim
    :ref:`LRN5 <lrn5>`): carrying turns first-k's length bias into staleness, and that staleness
    grows with the length (a long rollout is carried over more steps). The transient of the first
    steps is short-biased.

    Parameters
    ----------
    pmf : array_like (M,) or sequence of Fraction
        :math:`p_\theta`.
    scores : array_like (M, d)
        :math:`\nabla\log p_\theta(\ell)`.
    quality : array_like (M,)
        :math:`Q(\ell)`.
    n, k : int
        Rollouts in flight and trained per step, :math:`1 \le k \le n`.
    penalty, baseline : float or Fraction
        As in :func:`gradient_moments`.
    step : int, optional
        Trainer step :math:`j \ge 0` from a cold start (all :math:`n` launched at time 0);
        ``None``: the stationary chain.

    Returns
    -------
    CarryMoments
        Exact (``Fraction``) when every input is.

    Raises
    ------
    ValueError
        If the chain has more than 5 000 states (use a smaller ``M`` or ``n - k``).

    Examples
    --------
    >>> from refimpl.learning import hazard_length_pmf, policy_gradient, token_scores
    >>> from fractions import Fraction as F
    >>> h = [F(1, 2), F(1, 2), F(1)]
    >>> p, s = hazard_length_pmf(h), token_scores(h, np.eye(3, dtype=int).tolist()).sum(axis=1)
    >>> Q = [F(0), F(1, 2), F(1)]
    >>> c = first_k_carry_gradient(p, s, Q, n=2, k=1)
    >>> list(c.mean) == list(policy_gradient(p, s, Q).mean), c.trained_law.sum(axis=0).tolist()
    (True, [Fraction(1, 2), Fraction(1, 4), Fraction(1, 4)])
    >>> first_k_carry_gradient(p, s, Q, n=2, k=1, step=0).trained_law.sum(axis=0).tolist()
    [Fraction(3, 4), Fraction(3, 16), Fraction(1, 16)]
    """
    n_ = as_int(n, name="n", minimum=1, meaning="rollouts in flight per step")
    k_ = as_int(k, name="k", minimum=1, meaning="batch size")
    if k_ > n_:
        raise invalid("k", f"be <= n={n_}", k_, "Pass k <= n.")
    j_stop = None if step is None else as_int(step, name="step", minimum=0, meaning="step")
    p, exact_p = _as_array(pmf, name="pmf", ndim=1)
    sc, exact_s = _as_array(scores, name="scores", ndim=2)
    r, var, exact_r = _reward(quality, penalty, p.size)
    exact = exact_p and exact_s and exact_r
    b: Any = Fraction(baseline) if exact else as_real(baseline, name="baseline")
    if not exact:
        p, sc, r, var = (x.astype(np.float64) for x in (p, sc, r, var))
    m, d = p.size, sc.shape[1]
    zero: Any = Fraction(0) if exact else 0.0
    support = [j for j in range(m) if p[j] > 0]
    fact = [math.factorial(i) for i in range(n_ + 1)]
    p, sc, r, var = p.tolist(), sc.tolist(), r.tolist(), var.tolist()  # plain Python numbers

    def draws(count: int) -> list[tuple[tuple[int, ...], Any]]:
        out = []
        for comp in _compositions(count, len(support)):
            prob: Any = Fraction(fact[count]) if exact else float(fact[count])
            fresh: list[int] = []
            for c, j in zip(comp, support, strict=True):
                prob = prob * p[j] ** c / fact[c]
                fresh += [j] * c
            out.append((tuple(fresh), prob))
        return out

    adv = [r[j] - b for j in range(m)]
    noise_l = [var[j] * sum((sc[j][c] * sc[j][c] for c in range(d)), zero) for j in range(m)]
    cold: tuple[_CarryItem, ...] = ()
    steady_draws = draws(k_)
    # the reachable states and every transition out of them
    trans: dict[tuple[_CarryItem, ...], list[tuple[Any, list[tuple[int, int]], int, Any]]] = {}
    todo = [cold]
    while todo:
        st = todo.pop()
        if st in trans:
            continue
        outs = []
        for fresh, prob in draws(n_) if st == cold else steady_draws:
            batch, dur, nxt = _carry_step(st, fresh, k_)
            outs.append((prob, batch, dur, nxt))
            if nxt not in trans:
                todo.append(nxt)
        trans[st] = outs
        if len(trans) - 1 > _MAX_CARRY_STATES:  # the cold start is not a carried state
            raise invalid(
                "n",
                f"leave at most {_MAX_CARRY_STATES} carried-leftover states for exact solution",
                n_,
                "Use a smaller M or n - k.",
            )
    dist = _carry_distribution(trans, j_stop=j_stop, carried=n_ > k_, exact=exact)
    s_max = max((a for st in dist for _, batch, _, _ in trans[st] for _, a in batch), default=0)
    law = np.empty((s_max + 1, m), dtype=object if exact else np.float64)
    law[...] = zero
    mean: list[Any] = [zero] * d
    second = zero
    duration = zero
    for st, w in dist.items():
        if w == 0:
            continue
        for prob, batch, dur, _ in trans[st]:
            pw = w * prob
            est = [sum((adv[j] * sc[j][c] for j, _ in batch), zero) / k_ for c in range(d)]
            noise = sum((noise_l[j] for j, _ in batch), zero) / (k_ * k_)
            for j, age in batch:
                law[age, j] += pw / k_
            mean = [x + pw * e for x, e in zip(mean, est, strict=True)]
            second += pw * (sum((e * e for e in est), zero) + noise)
            duration += pw * dur
    trace = second - sum((x * x for x in mean), zero)
    if exact:
        return CarryMoments(np.asarray(mean, dtype=object), trace, law, duration, len(trans) - 1)
    return CarryMoments(
        np.asarray(mean, dtype=np.float64), float(trace), law, float(duration), len(trans) - 1
    )
