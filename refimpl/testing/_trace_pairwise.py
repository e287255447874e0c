"""numpy's sum of every segment of a flat array, bit for bit, in a few passes over all segments.

A sequence-level weight sums the log-ratios of a sequence's tokens, and the reference sums them
with numpy. numpy adds a contiguous run of float64 in a fixed order (``pairwise_sum`` in its
ufunc loops), and a different order rounds differently: ``np.add.reduceat``, which adds left to
right, disagrees with it in the last bits. The order, for ``n`` values:

- ``n < 8``: left to right from ``0.0``;
- ``8 <= n <= 128``: eight running sums, the ``k``-th taking every eighth value from the ``k``-th
  on, up to the last multiple of 8; then ``((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))``;
  then the ``n % 8`` values left over, left to right;
- ``n > 128``: the sum of the first ``h`` values plus the sum of the rest, each in this order,
  with ``h`` half of ``n`` rounded down to a multiple of 8.

:func:`segment_sums` follows that order for all segments at once: the long ones are split level
by level, each step of the short pieces (leaves) is one vectorized addition over every leaf it
applies to, and the halves are then added back level by level. :func:`numpy_order_holds` checks
the rule against the installed numpy once per process (on segments of 1 to 136 values and longer
ones); a caller uses the sums only when it holds.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
from numpy.typing import NDArray

#: numpy's unrolling of the pairwise sum and its largest leaf (``PW_BLOCKSIZE``)
UNROLL = 8
BLOCK = 128


def segment_sums(values: NDArray[np.float64], offsets: NDArray[np.integer]) -> NDArray[np.float64]:
    """``np.sum(values[offsets[i]:offsets[i + 1]])`` for every ``i``, bit for bit (segments of
    at least one value)."""
    bounds: NDArray[np.intp] = np.asarray(offsets, dtype=np.intp)
    starts = bounds[:-1]
    sizes = bounds[1:] - bounds[:-1]
    levels: list[tuple[NDArray[np.intp], NDArray[np.intp], NDArray[np.bool_]]] = []
    while True:
        split = sizes > BLOCK
        levels.append((starts, sizes, split))
        if not split.any():
            break
        half = sizes[split] // 2
        half -= half % UNROLL
        starts = np.concatenate([starts[split], starts[split] + half])
        sizes = np.concatenate([half, sizes[split] - half])
    values = np.asarray(values, dtype=np.float64)
    below = np.empty(0)
    for starts, sizes, split in reversed(levels):
        out = np.empty(len(starts))
        leaf = ~split
        out[leaf] = _leaf_sums(values, starts[leaf], sizes[leaf])
        halves = int(np.count_nonzero(split))
        out[split] = below[:halves] + below[halves:]
        below = out
    return below


def _leaf_sums(
    values: NDArray[np.float64], starts: NDArray[np.intp], sizes: NDArray[np.intp]
) -> NDArray[np.float64]:
    """The sums of segments of at most ``BLOCK`` values."""
    out = np.empty(len(starts))
    short = sizes < UNROLL
    out[short] = _left_to_right(values, starts[short], sizes[short], np.zeros(int(short.sum())))
    long = ~short
    out[long] = _unrolled(values, starts[long], sizes[long])
    return out


def _left_to_right(
    values: NDArray[np.float64],
    starts: NDArray[np.intp],
    sizes: NDArray[np.intp],
    total: NDArray[np.float64],
) -> NDArray[np.float64]:
    """``total`` plus each segment's values (fewer than 8), added left to right."""
    total = total.copy()
    for j in range(int(sizes.max()) if len(sizes) else 0):
        on = sizes > j
        total[on] = total[on] + values[starts[on] + j]
    return total


def _unrolled(
    values: NDArray[np.float64], starts: NDArray[np.intp], sizes: NDArray[np.intp]
) -> NDArray[np.float64]:
    """The sums of segments of 8 to ``BLOCK`` values, with numpy's eight running sums (the
    segments taken longest first, so that each block of 8 adds to a prefix of the rows)."""
    if not len(starts):
        return np.empty(0)
    whole = sizes - sizes % UNROLL
    order = np.argsort(-whole, kind="stable")
    first, longest = starts[order], whole[order]
    lanes = np.arange(UNROLL)
    r = values[first[:, None] + lanes]
    for block in range(UNROLL, int(longest[0]), UNROLL):
        rows = int(np.count_nonzero(longest > block))
        r[:rows] += values[first[:rows, None] + (block + lanes)]
    total = np.empty(len(starts))
    total[order] = ((r[:, 0] + r[:, 1]) + (r[:, 2] + r[:, 3])) + (
        (r[:, 4] + r[:, 5]) + (r[:, 6] + r[:, 7])
    )
    return _left_to_right(values, starts + whole, sizes - whole, total)


@functools.cache
def numpy_order_holds() -> bool:
    """Whether the installed numpy sums segments as :func:`segment_sums` does (checked once, on
    every length up to 136 and a few longer ones)."""
    sizes = np.concatenate([np.arange(1, 137), [255, 256, 257, 1031, 4097]])
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    # values of both signs and 13 magnitudes, whose sums round differently in another order
    # (not drawn with numpy.random: importing it took 10 ms of a check's start-up)
    n = int(offsets[-1])
    values = np.sin(np.arange(n) * 12.9898) * np.resize(10.0 ** np.arange(-6.0, 7.0), n)
    want = np.array([np.sum(values[a:b]) for a, b in itertools.pairwise(offsets)])
    return bool(segment_sums(values, offsets).tobytes() == want.tobytes())
