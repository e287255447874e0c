"""Policy losses one level below the importance weights: aggregation, surrogates, KL estimators,
advantages, rejection statistics and log-probability semantics, each with its gradient.

One module per family; this package re-exports their public names, and so does the flat
``refimpl`` namespace. Every loss returns :class:`LossTerms` (the per-token loss and the gradient
with respect to the current log-probabilities, as a vector–Jacobian product with the aggregation's
weights); see :mod:`refimpl.losses._common` for the conventions all families share.
"""

from __future__ import annotations

from refimpl.losses._common import LossTerms

__all__ = ["LossTerms"]
