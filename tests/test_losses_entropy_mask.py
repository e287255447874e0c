"""Tests of refimpl.losses.entropy_mask: the high-entropy token mask.

Hand-worked masks (ties, padding, empty batch), an independent sort-based formula, and properties
each rejecting a deliberately wrong variant.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

from refimpl.errors import InvalidArgument
from refimpl.losses.entropy_mask import high_entropy_mask

Array = NDArray[np.float64]
Mask = Callable[..., Array]


@st.composite
def batches(draw: st.DrawFn) -> tuple[Array, Array, float]:
    rows, width = draw(st.integers(1, 3)), draw(st.integers(1, 6))
    values = st.one_of(st.sampled_from([0.0, 1.0, 2.0]), st.floats(0.0, 5.0))
    h = np.asarray(draw(st.lists(values, min_size=rows * width, max_size=rows * width)))
    lengths = np.asarray(draw(st.lists(st.integers(0, width), min_size=rows, max_size=rows)))
    mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.float64)
    return h.reshape(rows, width), mask, draw(st.floats(0.0, 1.0))


def sorted_formula(h: Array, mask: Array, rho: float) -> Array:
    """Independent: the linear-interpolation quantile written from the sorted valid entropies."""
    valid = sorted(h[mask > 0].tolist())
    if not valid:
        return np.zeros(h.shape)
    pos = (1.0 - rho) * (len(valid) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    theta = valid[lo] + (pos - lo) * (valid[hi] - valid[lo])
    return np.asarray((h >= theta) & (mask > 0), dtype=np.float64)


def test_hand_worked_masks() -> None:
    h = np.array([[0.1, 2.0, 0.5], [1.0, 3.0, 9.0]])
    mask = np.array([[1, 1, 1], [1, 1, 0]])
    # valid entropies 0.1, 0.5, 1.0, 2.0, 3.0: the median is 1.0, kept 1.0, 2.0, 3.0
    np.testing.assert_array_equal(
        high_entropy_mask(h, top_fraction=0.5, mask=mask), [[0, 1, 0], [1, 1, 0]]
    )
    # ρ = 0.2: position 0.8·4 = 3.2, θ = 2.0 + 0.2·1.0 = 2.2: only 3.0
    np.testing.assert_array_equal(
        high_entropy_mask(h, top_fraction=0.2, mask=mask), [[0, 0, 0], [0, 1, 0]]
    )
    # ties at the threshold are all kept
    np.testing.assert_array_equal(
        high_entropy_mask([[1.0, 1.0, 1.0]], top_fraction=0.2), [[1, 1, 1]]
    )
    assert not high_entropy_mask(h, top_fraction=0.5, mask=np.zeros((2, 3))).any()


def test_refusals_name_the_parameter() -> None:
    with pytest.raises(InvalidArgument, match="top_fraction"):
        high_entropy_mask([[1.0]], top_fraction=1.5)
    with pytest.raises(InvalidArgument, match="mask"):
        high_entropy_mask([[1.0]], top_fraction=0.5, mask=[[2.0]])


def padding_in_quantile(h: Any, *, top_fraction: float, mask: Any) -> Array:
    """Wrong: the quantile over every entry, padding included."""
    h, m = np.asarray(h), np.asarray(mask)
    theta = float(np.quantile(h, 1.0 - top_fraction))
    return np.asarray((h >= theta) & (m > 0), dtype=np.float64)


def strict_threshold(h: Any, *, top_fraction: float, mask: Any) -> Array:
    """Wrong: a strict comparison (ties at the threshold dropped)."""
    h, m = np.asarray(h), np.asarray(mask)
    valid = h[m > 0]
    if valid.size == 0:
        return np.zeros(h.shape)
    theta = float(np.quantile(valid, 1.0 - top_fraction))
    return np.asarray((h > theta) & (m > 0), dtype=np.float64)


def matches_sorted(fn: Mask) -> Callable[[], None]:
    @given(batches())
    def check(batch: tuple[Array, Array, float]) -> None:
        h, mask, rho = batch
        found = fn(h, top_fraction=rho, mask=mask)
        np.testing.assert_array_equal(found, sorted_formula(h, mask, rho))

    return check


def test_matches_the_sorted_formula() -> None:
    run_property(matches_sorted(high_entropy_mask))
    rejects(matches_sorted(padding_in_quantile))


def keeps_enough(fn: Mask) -> Callable[[], None]:
    @given(batches())
    def check(batch: tuple[Array, Array, float]) -> None:
        h, mask, rho = batch
        n = int(mask.sum())
        kept = int(fn(h, top_fraction=rho, mask=mask).sum())
        # the quantile's position as numpy computes it: a position just past an integer k (as
        # 1 - rho = 1.1e-16 gives) puts the threshold above the k-th value, which is dropped
        assert kept >= n - math.ceil((1.0 - rho) * (n - 1)) if n else kept == 0

    return check


def test_keeps_at_least_the_bound() -> None:
    run_property(keeps_enough(high_entropy_mask))
    rejects(keeps_enough(strict_threshold))
