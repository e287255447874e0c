"""Run sizes of the lab: the default run (about 3 minutes of CPU) and ``--quick`` (about 14 s)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["LabConfig", "lab_config"]


class LabConfig(NamedTuple):
    """Sizes and seed of one lab run.

    Attributes
    ----------
    quick : bool
        Whether this is the ``--quick`` run (same sections, smaller sizes).
    seed : int
        Root seed; each section draws from its own stream ``SeedSequence([seed, section_index])``, so
        a section's numbers do not depend on which other sections ran.
    first_k_batches : int
        Number of independent first-k-of-n launches simulated per (k, n, law).
    async_steps : int
        Trainer steps simulated per asynchronous run.
    async_slots : int
        Generation slots ``N`` of the asynchronous runs.
    async_batch : int
        Trained samples per step ``B`` of the asynchronous runs.
    estimator_reps : int
        Replicate batches used to measure the bias and variance of the IPW/Hájek/clipped estimators.
    speedup_steps : int
        Synchronous steps simulated per length law to measure ``E[max]``.
    """

    quick: bool
    seed: int
    first_k_batches: int
    async_steps: int
    async_slots: int
    async_batch: int
    estimator_reps: int
    speedup_steps: int

    def rng(self, stream: int) -> np.random.Generator:
        """The generator of one section (or sub-stream), independent of every other stream."""
        return np.random.default_rng(np.random.SeedSequence([self.seed, stream]))


def lab_config(*, quick: bool, seed: int) -> LabConfig:
    """The sizes of a default or a ``--quick`` run.

    Examples
    --------
    >>> lab_config(quick=True, seed=0).quick
    True
    >>> lab_config(quick=False, seed=0).async_steps > lab_config(quick=True, seed=0).async_steps
    True
    """
    if quick:
        return LabConfig(
            quick=True,
            seed=seed,
            first_k_batches=2_000,
            async_steps=120,
            async_slots=32,
            async_batch=64,
            estimator_reps=2_000,
            speedup_steps=2_000,
        )
    return LabConfig(
        quick=False,
        seed=seed,
        first_k_batches=40_000,
        async_steps=600,
        async_slots=128,
        async_batch=256,
        estimator_reps=20_000,
        speedup_steps=20_000,
    )
