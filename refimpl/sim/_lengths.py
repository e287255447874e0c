"""Where rollout lengths come from: an explicit matrix, or blocks drawn from a seeded generator."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from refimpl._validation import invalid
from refimpl.errors import InvalidArgument
from refimpl.sim._config import SimConfig

__all__ = ["LengthSupply", "OutOfLengths"]


class OutOfLengths(InvalidArgument):
    """A slot needs more lengths than an explicit length matrix holds."""


class LengthSupply:
    """Per-slot lengths in launch order.

    A drawn law is drawn in ``N × K`` blocks (the first block exactly as the SimPy peer draws it);
    when a slot runs out, another block is drawn from the same generator, so every engine sees the same
    lengths. An explicit matrix cannot grow: running out raises :class:`OutOfLengths` saying how many
    lengths the slot needed.
    """

    __slots__ = ("_block", "_cfg", "_rng", "matrix")

    def __init__(self, cfg: SimConfig) -> None:
        self._cfg = cfg
        self._rng = np.random.default_rng(cfg.seed)
        if cfg.length_kind == "matrix":
            self.matrix: NDArray[np.float64] = cfg.lengths
            self._block = 0
        else:
            self._block = cfg.initial_columns()
            self.matrix = self._draw()

    @property
    def fixed(self) -> bool:
        """Whether the lengths are an explicit matrix (cannot be extended)."""
        return self._cfg.length_kind == "matrix"

    def _draw(self) -> NDArray[np.float64]:
        cfg, shape = self._cfg, (self._cfg.slots, self._block)
        if cfg.length_kind == "lognormal":
            out = self._rng.lognormal(cfg.lognormal_mu, cfg.lognormal_sigma, size=shape)
        elif cfg.length_kind == "pmf":
            pmf = cfg.lengths
            out = self._rng.choice(pmf.size, size=shape, p=pmf).astype(np.float64) + 1.0
        else:
            out = np.asarray(cfg.lengths.rvs(size=shape, random_state=self._rng), dtype=np.float64)
            if not np.all(np.isfinite(out) & (out > 0)):
                raise invalid(
                    "lengths",
                    "draw only finite lengths > 0",
                    cfg.lengths,
                    "Pass a law supported on (0, inf), e.g. shifted by 1 token.",
                )
        return np.ascontiguousarray(out, dtype=np.float64)

    def extend(self, *, slot: int, needed: int) -> None:
        """Grow the matrix by one block, or raise :class:`OutOfLengths` for an explicit matrix."""
        if self.fixed:
            k = self.matrix.shape[1]
            raise OutOfLengths(
                f"lengths must hold every rollout the run launches; got lengths with K={k} columns, "
                f"but slot {slot} needs at least {needed} lengths before the run ends. Pass a longer "
                f"N x K matrix (at least {needed} columns; the peer's rule ceil(1.25*R/N)+64 leaves "
                "ample margin for plain async runs), or fewer rollouts/steps."
            )
        self.matrix = np.concatenate([self.matrix, self._draw()], axis=1)
