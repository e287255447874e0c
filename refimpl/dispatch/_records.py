"""The records that the dispatch formulas return, in a module that imports nothing heavy.

The simulator's summary carries a :class:`LengthBias` of its own measurements; it imports the
record from here, so that ``refimpl simulate`` does not load SciPy (which the formulas of
:mod:`refimpl.dispatch.length_bias` need) only to name a tuple.
"""

from __future__ import annotations

from fractions import Fraction
from typing import NamedTuple

__all__ = ["LengthBias"]

Real = float | Fraction


class LengthBias(NamedTuple):
    """Summary of the length bias of first-``k``-of-``n`` dispatch (see :func:`length_bias`)."""

    true_mean: Real
    """:math:`E_p[L]`."""
    selected_mean: Real
    """:math:`E_q[L]`."""
    ratio: Real
    """:math:`E_q[L] / E_p[L]` (at most 1)."""
    total_variation: Real
    r""":math:`\mathrm{TV}(q, p) = \frac12 \sum |q - p|`."""
    kl_divergence: float
    r""":math:`\mathrm{KL}(q \,\|\, p) = E_q[\log(q/p)]` in nats (always a float)."""
