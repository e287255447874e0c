"""Measure how far the fluid model of continuous dispatch is from the simulator, against the slots.

:func:`refimpl.fluid_steady_state` treats the ``N`` slots as a continuum: completions arrive as a
steady stream and a rollout's launch phase is uniform within its version. With few slots neither
holds exactly: a version ends after exactly ``B`` completions, and a long rollout blocks its slot.
This script simulates continuous dispatch with a drop at ``η`` (``refimpl.sim``, lognormal(6, 1)
lengths, one time unit per token) over a range of ``N`` at two ratios ``N/B``, and prints, as a
Markdown table, the trained mean length predicted by the fluid model and the simulated one (mean of
``R`` seeded replications, each after a 10 % cold start, with a 95 % t interval) as fractions of
``E[L]``, and the relative error of the fluid model.

Usage (outside the CI gate; about a minute)::

    .venv/bin/python tools/fluid_error_table.py            # the table in docs/concepts/staleness.md

The numbers are reproducible: every replication has its own fixed seed.
"""

from __future__ import annotations

import argparse
import math
from typing import NamedTuple

import numpy as np
import scipy.stats

import refimpl
from refimpl.sim import SimConfig, simulate

MU, SIGMA = 6.0, 1.0
SLOTS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
RATIOS = (2.0, 0.5)  # N / B
ETAS = (0, 1)
REPLICATIONS = 4
TRAINED = 60_000  # trained rollouts per replication


class Row(NamedTuple):
    slots: int
    batch: int
    eta: int
    fluid: float  # E_q[L] / E[L], fluid model
    simulated: float  # E_q[L] / E[L], mean over replications
    half_width: float  # 95 % t half-width of ``simulated``

    @property
    def relative_error(self) -> float:
        return (self.fluid - self.simulated) / self.simulated


def measure(slots: int, batch: int, eta: int, *, replications: int = REPLICATIONS) -> Row:
    """One row: the fluid prediction and ``replications`` seeded simulations of one setting."""
    law = scipy.stats.lognorm(s=SIGMA, scale=math.exp(MU))
    mean = float(law.mean())
    fluid = refimpl.fluid_steady_state(law, slots=slots, batch=batch, eta=eta)
    means = []
    for seed in range(replications):
        cfg = SimConfig(
            slots=slots,
            batch=batch,
            rollouts=TRAINED,
            eta=eta,
            over_bound="drop",
            lognormal_mu=MU,
            lognormal_sigma=SIGMA,
            seed=seed,
        )
        trace = simulate(cfg)
        order = trace.training_order()
        tail = order[order.size // 10 :]
        means.append(float(trace.length[tail].mean()) / mean)
    m = np.array(means)
    half = float(scipy.stats.t.ppf(0.975, m.size - 1) * m.std(ddof=1) / math.sqrt(m.size))
    return Row(slots, batch, eta, fluid.trained_mean_length / mean, float(m.mean()), half)


def rows() -> list[Row]:
    out = []
    for ratio in RATIOS:
        for eta in ETAS:
            for slots in SLOTS:
                batch = max(1, round(slots / ratio))
                out.append(measure(slots, batch, eta))
    return out


def markdown(table: list[Row]) -> str:
    lines = [
        "| N | B | η | fluid E_q[L]/E[L] | simulated | fluid error |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in table:
        lines.append(
            f"| {r.slots} | {r.batch} | {r.eta} | {r.fluid:.3f} | {r.simulated:.3f} ± "
            f"{r.half_width:.3f} | {100 * r.relative_error:+.1f} % |"
        )
    return "\n".join(lines)


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    print(markdown(rows()))


if __name__ == "__main__":
    main()
