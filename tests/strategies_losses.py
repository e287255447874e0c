"""Hypothesis strategies for the loss tests, drawn without accidental symmetry.

Sampled mutants of refimpl.losses survive where the test data is too regular to tell an operator
from another: unit weights (multiplying and dividing by them agree), groups of equal size (a mean
over the group and over the batch agree), symmetric clip bands (``eps_low == eps_high`` hides a
swapped bound), advantages of one sign, masks without padding. The strategies here draw:

- :func:`token_batches`: ``(logp, logp_old, advantages, mask, cotangent)`` with rows of unequal
  valid lengths (at least one padded token when ``T > 1``), advantages per token of both signs
  and magnitudes other than 1, and a cotangent of non-unit weights;
- :func:`asymmetric_bands`: ``(eps_low, eps_high)`` with ``eps_low != eps_high``;
- :func:`unequal_groups`: rewards in groups of unequal sizes (2 to 5), labelled out of order,
  with non-integer rewards;
- :func:`non_unit_weights`: positive weights, none equal to 1, not all equal.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st
from numpy.typing import NDArray

__all__ = [
    "TokenBatch",
    "asymmetric_bands",
    "non_unit_weights",
    "token_batches",
    "unequal_groups",
]

Array = NDArray[np.float64]


class TokenBatch(NamedTuple):
    logp: Array
    logp_old: Array
    advantages: Array
    mask: Array
    cotangent: Array


def _finite(low: float, high: float) -> st.SearchStrategy[float]:
    return st.floats(low, high, allow_nan=False, allow_infinity=False, allow_subnormal=False)


@st.composite
def token_batches(
    draw: st.DrawFn, *, max_batch: int = 3, max_time: int = 5, max_log_ratio: float = 1.0
) -> TokenBatch:
    """A padded (B, T) batch: unequal row lengths, mixed-sign non-unit advantages, a cotangent."""
    batch = draw(st.integers(2, max_batch))
    time = draw(st.integers(2, max_time))
    lengths = draw(st.lists(st.integers(1, time), min_size=batch, max_size=batch))
    assume(len(set(lengths)) > 1 or min(lengths) < time)  # some padding, or unequal rows
    mask = (np.arange(time)[None, :] < np.asarray(lengths)[:, None]).astype(np.float64)
    size = batch * time
    logp_old = np.asarray(draw(st.lists(_finite(-4.0, -0.05), min_size=size, max_size=size)))
    ratio = np.asarray(
        draw(st.lists(_finite(-max_log_ratio, max_log_ratio), min_size=size, max_size=size))
    )
    logp = np.minimum(logp_old + ratio, -1e-3)
    magnitudes = draw(st.lists(_finite(0.1, 3.0), min_size=size, max_size=size))
    signs = draw(st.lists(st.sampled_from([-1.0, 1.0]), min_size=size, max_size=size))
    advantages = np.asarray(magnitudes) * np.asarray(signs)
    assume(np.any(advantages > 0) and np.any(advantages < 0))
    cot = np.asarray(draw(st.lists(_finite(0.2, 2.5), min_size=size, max_size=size)))
    assume(np.any(np.abs(cot - 1.0) > 0.05))
    shape = (batch, time)
    return TokenBatch(
        logp.reshape(shape),
        logp_old.reshape(shape),
        advantages.reshape(shape),
        mask,
        cot.reshape(shape),
    )


@st.composite
def asymmetric_bands(
    draw: st.DrawFn, *, max_low: float = 0.6, max_high: float = 1.0
) -> tuple[float, float]:
    """``(eps_low, eps_high)``, both in ``(0, max]``, never equal."""
    low = draw(_finite(0.02, max_low))
    high = draw(_finite(0.02, max_high))
    assume(abs(low - high) > 0.01)
    return low, high


@st.composite
def unequal_groups(draw: st.DrawFn, *, max_groups: int = 4) -> tuple[Array, NDArray[np.int64]]:
    """``(rewards, group)``: 2–``max_groups`` groups of sizes 2–5, not all equal, ids shuffled."""
    count = draw(st.integers(2, max_groups))
    sizes = draw(st.lists(st.integers(2, 5), min_size=count, max_size=count))
    assume(len(set(sizes)) > 1)
    labels = draw(st.lists(st.integers(0, 10**6), min_size=count, max_size=count, unique=True))
    group = np.repeat(np.asarray(labels, dtype=np.int64), sizes)
    order = draw(st.permutations(range(group.size)))
    rewards = np.asarray(
        draw(st.lists(_finite(-2.0, 3.0), min_size=group.size, max_size=group.size))
    )
    return rewards, group[list(order)]


@st.composite
def non_unit_weights(draw: st.DrawFn, *, size: int) -> Array:
    """``size`` positive weights in [0.1, 4], none within 0.05 of 1, not all equal."""
    values = draw(st.lists(_finite(0.1, 4.0), min_size=size, max_size=size))
    assume(all(abs(v - 1.0) > 0.05 for v in values))
    assume(size == 1 or max(values) - min(values) > 0.05)
    return np.asarray(values, dtype=np.float64)
