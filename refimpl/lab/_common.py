"""Small helpers shared by the section modules: length laws, trace columns, standard errors.

Nothing here is a model formula: the laws are the lab's chosen inputs, and the statistics are sample
means and their standard errors.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray
from scipy import stats

from refimpl.lab.config import LabConfig

__all__ = [
    "TOL_RULE",
    "Z_TOL",
    "Trained",
    "binned_rate",
    "block_mean_and_se",
    "discretized_lognormal",
    "log_bins",
    "lognormal",
    "mean_and_se",
    "seed",
    "support",
    "trained",
]

#: Monte Carlo checks are held to ``Z_TOL`` standard errors: under the normal approximation a correct
#: closed form is flagged with probability ``2·(1 − Φ(4.5)) ≈ 7e-6`` per check, so a run of ~100
#: checks raises a false alarm with probability below 1e-3.
Z_TOL = 4.5
TOL_RULE = "4.5 standard errors (false alarm ≈ 7e-6 per check under the normal approximation)"


def seed(config: LabConfig, stream: int, index: int = 0) -> int:
    """An integer seed for :class:`refimpl.sim.SimConfig`, unique per (root seed, stream, index)."""
    ss = np.random.SeedSequence([config.seed, stream, index])
    return int(ss.generate_state(1)[0] & 0x7FFFFFFF)


def lognormal(*, median: float, sigma: float) -> Any:
    """The frozen lognormal law with the given median (tokens) and log-scale ``sigma``."""
    return stats.lognorm(s=sigma, scale=median)


def discretized_lognormal(*, median: float, sigma: float, max_length: int) -> NDArray[np.float64]:
    """A pmf over lengths ``1..max_length``: lognormal mass of ``(ℓ − 1, ℓ]``, truncated, renormalised."""
    edges = np.arange(max_length + 1, dtype=np.float64)
    mass = np.diff(lognormal(median=median, sigma=sigma).cdf(edges))
    out: NDArray[np.float64] = mass / mass.sum()
    return out


def support(pmf: NDArray[np.float64]) -> NDArray[np.float64]:
    """The lengths ``1..M`` of a pmf over ``1..M``."""
    return np.arange(1, pmf.size + 1, dtype=np.float64)


class Trained(NamedTuple):
    """Trained samples of a run in training order."""

    length: NDArray[np.float64]
    step: NDArray[np.int64]
    staleness: NDArray[np.int64]


def trained(trace: Any) -> Trained:
    """The trained samples of a :class:`refimpl.sim.SimTrace`, in the order the trainer took them."""
    order = trace.training_order()
    return Trained(
        np.asarray(trace.length[order], dtype=np.float64),
        np.asarray(trace.step[order], dtype=np.int64),
        np.asarray(trace.staleness[order], dtype=np.int64),
    )


def mean_and_se(groups: NDArray[np.float64]) -> tuple[float, float]:
    """Mean of independent replicate values and its standard error ``sd/√n``."""
    g = np.asarray(groups, dtype=np.float64)
    return float(g.mean()), float(g.std(ddof=1) / np.sqrt(g.size))


def block_mean_and_se(per_step: NDArray[np.float64], *, blocks: int = 20) -> tuple[float, float]:
    """Mean of a per-step series and its batch-means standard error (``blocks`` contiguous blocks).

    Consecutive steps of one run are correlated; means of long contiguous blocks are nearly
    independent, so their spread gives an honest standard error.
    """
    x = np.asarray(per_step, dtype=np.float64)
    nb = max(2, min(blocks, x.size // 2))
    usable = x[: (x.size // nb) * nb].reshape(nb, -1).mean(axis=1)
    return float(x.mean()), float(usable.std(ddof=1) / np.sqrt(nb))


def log_bins(values: NDArray[np.float64], count: int) -> NDArray[np.float64]:
    """``count`` log-spaced bins covering the 0.5%–99.5% range of ``values``."""
    lo, hi = np.quantile(values, [0.005, 0.995])
    return np.geomspace(max(lo, 1e-9), hi, count + 1)


def binned_rate(
    x: NDArray[np.float64],
    hit: NDArray[np.bool_],
    edges: NDArray[np.float64],
    *,
    min_count: int = 30,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Per-bin centre (geometric), rate of ``hit`` and its binomial standard error (bins with enough data)."""
    idx = np.digitize(x, edges) - 1
    ok = (idx >= 0) & (idx < edges.size - 1)
    count = np.bincount(idx[ok], minlength=edges.size - 1).astype(np.float64)
    hits = np.bincount(idx[ok], weights=hit[ok].astype(np.float64), minlength=edges.size - 1)
    keep = count >= min_count
    rate = hits[keep] / count[keep]
    se = np.sqrt(np.maximum(rate * (1 - rate), 0.25 / count[keep]) / count[keep])
    centre = np.sqrt(edges[:-1] * edges[1:])[keep]
    return centre, rate, se
