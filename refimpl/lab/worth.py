r"""Is asynchrony worth it? A fair comparison on three clocks, a verdict with its noise, a map.

Both sides run the same hardware and the same optimizer: :math:`N` slots, batches of :math:`B`,
the same learning rate, estimator and seeds (common random numbers: seed :math:`i` gives both runs
the same rollout uniforms).

- **synchronous** (``mode='sync_minibatch'``): launch :math:`N` rollouts from the current version,
  wait for the longest, take :math:`N/B` optimizer steps of :math:`B` samples each (how
  synchronous PPO/GRPO trainers split a rollout batch into minibatches);
- **asynchronous** (``mode='async'``): every slot relaunches as soon as it finishes; the trainer
  takes completions :math:`B` at a time.

Each run is read on three clocks: optimizer steps, samples generated (rollouts launched) and
simulated wall-clock time to the reward target. On seed :math:`i` the wall-clock speedup factors
exactly into the throughput gain and the per-step cost,

.. math::

    \frac{T^\text{sync}_i}{T^\text{async}_i} =
    \underbrace{\frac{T^\text{sync}_i / S^\text{sync}_i}{T^\text{async}_i / S^\text{async}_i}}_{
    \text{throughput gain } G_i}
    \Big/ \underbrace{\frac{S^\text{async}_i}{S^\text{sync}_i}}_{\text{step cost } C_i},

:math:`S` the optimizer steps and :math:`T` the time to the target: :math:`G` is what removing the
idle slots buys, :math:`C` what staleness and length bias cost per optimizer step.

**The verdict rule.** With :math:`d_i = \log(T^\text{sync}_i / T^\text{async}_i)` over
:math:`n` seeds, mean :math:`\bar d`, standard error :math:`s/\sqrt n` and the one-sided Student
quantile :math:`t = t_{n-1}(0.95)`: *worth it* when :math:`\bar d - t\,s/\sqrt n > \log m`,
*not worth it* when :math:`\bar d + t\,s/\sqrt n < \log m` (:math:`m` = :data:`MARGIN`), undecided
otherwise. A seed on which only one side reaches the target counts as :math:`\pm\infty` when the
other side reached it before that run ended (a certain loss), as undecided otherwise; with an
infinite seed the verdict needs every seed on the same side of :math:`\log m`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray
from scipy import stats

from refimpl import learning as lrn

__all__ = [
    "CONFIDENCE",
    "MARGIN",
    "Cell",
    "Clocks",
    "boundary",
    "clocks",
    "decide",
    "fair_cell",
    "shared_sync",
    "toy_durations",
]

#: Asynchrony must reach the target at least this many times sooner to be worth its complexity.
MARGIN = 1.2
#: One-sided confidence of the verdict: a verdict is wrong at most this often when the true
#: speedup sits at the margin (per cell).
CONFIDENCE = 0.95


class Clocks(NamedTuple):
    """One run's cost of reaching the target on the three clocks (linear between versions)."""

    steps: float
    """Optimizer steps."""
    samples: float
    """Rollouts launched before the target version was published."""
    time: float
    """Simulated wall-clock time."""


def clocks(run: lrn.TrainingRun, target: float) -> Clocks | None:
    """Steps, samples and time at which ``run``'s exact :math:`J(\\theta_j)` first reaches ``target``.

    Linear interpolation between the versions around the crossing; ``None`` if never reached.

    Examples
    --------
    >>> run = lrn.TrainingRun(np.zeros((3, 1)), np.array([2.0, 4.0]), np.zeros(3),
    ...                       np.array([0.0, 0.5, 1.0]), np.zeros((2, 1)), 1, None,
    ...                       samples=np.array([4.0, 8.0]))
    >>> clocks(run, 0.75)
    Clocks(steps=1.5, samples=6.0, time=3.0)
    """
    j_curve = run.expected_reward
    hit = np.flatnonzero(j_curve >= target)
    if not hit.size:
        return None
    j = int(hit[0])
    if j == 0:
        return Clocks(0.0, 0.0, 0.0)
    time = np.concatenate([[0.0], run.publish_times])
    gen = np.concatenate([[0.0], run.samples if run.samples is not None else np.zeros(j)])
    f = float((target - j_curve[j - 1]) / (j_curve[j] - j_curve[j - 1]))
    return Clocks(
        j - 1 + f,
        float(gen[j - 1] + f * (gen[j] - gen[j - 1])),
        float(time[j - 1] + f * (time[j] - time[j - 1])),
    )


def decide(d: Any, *, margin: float = MARGIN, confidence: float = CONFIDENCE) -> tuple[str, str]:
    """The verdict from per-seed log speedups ``d`` (sync time ÷ async time), and the numbers behind it.

    Examples
    --------
    >>> decide([0.9, 1.0, 1.1])[0], decide([-0.2, -0.1, 0.0])[0], decide([-0.5, 0.5, 1.5])[0]
    ('worth it', 'not worth it', 'undecided')
    >>> decide([float("inf"), 0.5])[0], decide([float("-inf"), 0.0])[0]
    ('worth it', 'not worth it')
    """
    x = np.asarray(d, dtype=np.float64)
    lm = math.log(margin)
    if np.any(np.isnan(x)):
        return (
            "undecided",
            "a seed with no ratio: a side missed the target before the other reached it",
        )
    if not np.all(np.isfinite(x)) or x.size < 2:
        if np.all(x > lm):
            return "worth it", f"every seed's log speedup > log {margin} (some unbounded)"
        if np.all(x < lm):
            return "not worth it", f"every seed's log speedup < log {margin} (some unbounded)"
        return "undecided", f"the seeds straddle log {margin}"
    mean = float(x.mean())
    half = float(stats.t.ppf(confidence, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    band = f"log speedup {mean:.3f} ± {half:.3f} (t × SE, {x.size} seeds) vs log {margin}"
    if mean - half > lm:
        return "worth it", band
    if mean + half < lm:
        return "not worth it", band
    return "undecided", band


class Cell(NamedTuple):
    """One regime's paired runs and verdict (see :func:`fair_cell`)."""

    law: str
    ratio: int
    eta: int | None
    estimator: str
    sync: list[Clocks | None]
    asyn: list[Clocks | None]
    log_speedup: NDArray[np.float64]
    staleness: float
    verdict: str
    reason: str

    def geo(self, which: str) -> float:
        """Geometric mean over the seeds where both reached: ``gain``, ``cost`` or ``speedup``."""
        vals = []
        for s, a in zip(self.sync, self.asyn, strict=True):
            if s is None or a is None or min(s.steps, a.steps) <= 0:
                continue
            gain = (s.time / s.steps) / (a.time / a.steps)
            cost = a.steps / s.steps
            vals.append({"gain": gain, "cost": cost, "speedup": gain / cost}[which])
        return float(np.exp(np.mean(np.log(vals)))) if vals else float("nan")

    def mean_log_speedup(self) -> float:
        """Mean log speedup over the seeds: ``±inf`` if a side never reached the target while the
        other did; ``nan`` if a seed's ratio is undefined or the seeds disagree on which side
        never reached."""
        d = self.log_speedup
        if np.any(np.isnan(d)) or (np.any(d == np.inf) and np.any(d == -np.inf)):
            return float("nan")
        return float(d.mean())

    def mean(self, side: str, clock: str) -> float:
        """Mean over the seeds of one side's clock (``nan`` if a seed did not reach the target)."""
        runs = self.sync if side == "sync" else self.asyn
        if any(c is None for c in runs):
            return float("nan")
        return float(np.mean([getattr(c, clock) for c in runs if c is not None]))


def _log_ratio(
    s: Clocks | None, a: Clocks | None, s_end: float = math.inf, a_end: float = math.inf
) -> float:
    """``log(sync time / async time)``; a side that did not reach the target by the end of its run
    (``*_end``) lost for certain (``±inf``) only if the other reached it no later; else ``nan``."""
    if s is None and a is None:
        return float("nan")
    if a is None:
        assert s is not None
        return float("-inf") if a_end >= s.time else float("nan")
    if s is None:
        return float("inf") if s_end >= a.time else float("nan")
    if a.time <= 0 or s.time <= 0:
        return 0.0 if a.time == s.time else (float("inf") if a.time < s.time else float("-inf"))
    return math.log(s.time / a.time)


def fair_cell(
    train: Any,
    *,
    law: str,
    ratio: int,
    batch: int,
    eta: int | None,
    seeds: list[int],
    steps: int,
    targets: list[float],
    async_steps: int | None = None,
) -> Cell:
    """Paired synchronous and asynchronous runs on ``N = ratio × batch`` slots, one pair per seed.

    ``train(mode, slots, batch, steps, eta, seed)`` returns a :class:`refimpl.learning.TrainingRun`
    (the caller fixes the policy, durations, learning rate and estimator). Seed ``i``'s statistic
    :math:`d_i` is the mean over ``targets`` of the log time ratio (several targets on one run
    average out where a single crossing falls between versions); the clocks are those of the last
    target. Each side runs long enough to reach the targets (``async_steps``, default ``steps``:
    the clocks count the cost *to the target*, not the length of the run).
    """
    n = ratio * batch
    sync: list[Clocks | None] = []
    asyn: list[Clocks | None] = []
    d: list[float] = []
    stale: list[float] = []
    label = ""
    for seed in seeds:
        s_run = train("sync_minibatch", n, batch, steps, None, seed)
        a_run = train("async", n, batch, async_steps or steps, eta, seed)
        label = a_run.estimator
        pairs = [(clocks(s_run, x), clocks(a_run, x)) for x in targets]
        sync.append(pairs[-1][0])
        asyn.append(pairs[-1][1])
        with np.errstate(invalid="ignore"):
            ends = (float(s_run.publish_times[-1]), float(a_run.publish_times[-1]))
            d.append(float(np.mean([_log_ratio(s, a, *ends) for s, a in pairs])))
        if a_run.staleness is not None and a_run.staleness.size:
            stale.append(float(a_run.staleness.mean()))
    verdict, reason = decide(d)
    return Cell(
        law, ratio, eta, label, sync, asyn, np.asarray(d), float(np.mean(stale)), verdict, reason
    )


def boundary(x: Any, means: Any, *, margin: float = MARGIN) -> float | None:
    """Where the mean log speedup crosses ``log margin`` (linear interpolation), from below.

    The first crossing along ``x`` (e.g. the tail heaviness σ) of the piecewise-linear interpolant
    of ``means`` through ``log margin``: async pays beyond it. ``None`` if no cell-to-cell crossing
    (the boundary lies outside the grid); ``nan`` means are skipped.

    Examples
    --------
    >>> round(boundary([0.0, 1.0, 2.0], [-0.2, 0.1, 0.8], margin=math.exp(0.3)), 6)
    1.285714
    >>> boundary([0.0, 1.0], [0.5, 0.9]) is None
    True
    """
    xs = np.asarray(x, dtype=np.float64)
    ys = np.asarray(means, dtype=np.float64) - math.log(margin)
    keep = np.isfinite(ys)
    xs, ys = xs[keep], ys[keep]
    for i in range(xs.size - 1):
        if ys[i] < 0 <= ys[i + 1]:
            return float(xs[i] + (0.0 - ys[i]) * (xs[i + 1] - xs[i]) / (ys[i + 1] - ys[i]))
    return None


def shared_sync(train: Callable[..., lrn.TrainingRun]) -> Callable[..., lrn.TrainingRun]:
    """``train`` that runs each synchronous run once: a bounded-η cell's synchronous side (no
    bound applies to it) is the unbounded cell's, seed for seed."""
    runs: dict[tuple[Any, ...], lrn.TrainingRun] = {}

    def shared(mode: str, n: int, b: int, steps: int, eta: int | None, k: int) -> lrn.TrainingRun:
        if mode != "sync_minibatch" or eta is not None:
            return train(mode, n, b, steps, eta, k)
        key = (n, b, steps, k)
        if key not in runs:
            runs[key] = train(mode, n, b, steps, eta, k)
        run: lrn.TrainingRun = runs[key]
        return run

    return shared


def toy_durations(dist: Any, pmf: Any) -> NDArray[np.float64]:
    r"""Simulated time of a toy rollout of each length: the law's quantile at its mid-quantile.

    With :math:`F` the cdf of the toy's starting length law ``pmf`` on :math:`1..M`, a rollout of
    :math:`\ell` tokens takes :math:`d(\ell) = F_\text{law}^{-1}\bigl(F(\ell - 1) +
    p(\ell)/2\bigr)`: at the start the rollouts' times follow the law (discretised to :math:`M`
    atoms), longer rollouts take longer (which finish first is unchanged), and as the policy
    learns other lengths their times follow the law's quantiles.

    Examples
    --------
    >>> d = toy_durations(stats.uniform(loc=0.0, scale=4.0), [0.25, 0.25, 0.25, 0.25])
    >>> d.tolist()
    [0.5, 1.5, 2.5, 3.5]
    """
    p = np.asarray(pmf, dtype=np.float64)
    mid = np.cumsum(p) - p / 2.0
    return np.asarray(dist.ppf(mid), dtype=np.float64)
