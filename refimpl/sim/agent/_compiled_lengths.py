"""The compiled agent engine's launched lengths, sorted while its kernel runs.

The summary's Kolmogorov distance needs the trained lengths sorted (at :math:`10^6` rollouts the
summary's largest step). Where the lengths come from a law, the driver draws them ahead of the
kernel, in launch order: the first ``n`` draws are the launched lengths. So the draws are sorted
on another thread while the kernel runs (after the columns' pages are mapped, which that thread
does first), and the summary takes from the sorted launched lengths the few it did not train
(:func:`without`): the same sorted array, value for value, as sorting the trained lengths.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from refimpl.sim._background import in_background

__all__ = ["SortedDraws", "without"]


def without(ordered: NDArray[np.float64], values: NDArray[np.float64]) -> NDArray[np.float64]:
    """``ordered`` (sorted) without one occurrence of each of ``values`` (sorted; each value
    occurs in ``ordered`` at least as often as in ``values``): the sorted difference of the two
    multisets. Equal values to remove take the places after the first one's, one each.

    Examples
    --------
    >>> without(np.array([1.0, 2.0, 2.0, 2.0, 5.0]), np.array([2.0, 2.0, 5.0]))
    array([1., 2.])
    """
    first = np.searchsorted(ordered, values, side="left")
    copy_before = np.arange(values.size) - np.searchsorted(values, values, side="left")
    out: NDArray[np.float64] = np.delete(ordered, first + copy_before)
    return out


def _sorted_after(wait: Callable[[], None], draws: NDArray[np.float64]) -> NDArray[np.float64]:
    wait()  # one core for the kernel, the other for this thread's work, one job after the other
    return np.sort(draws)


class SortedDraws:
    """A law's length draws in the order drawn: the first chunk sorted on another thread from the
    start (after ``wait()`` returns), the chunks drawn later (when the kernel ran short) kept to
    be sorted at the end."""

    def __init__(self, first: NDArray[np.float64], wait: Callable[[], None]) -> None:
        self.chunks = [first]
        self._first_sorted = in_background(_sorted_after, wait, first)

    def add(self, chunk: NDArray[np.float64]) -> None:
        """Record the next chunk drawn."""
        self.chunks.append(chunk)

    def launched(self, n: int) -> NDArray[np.float64]:
        """The first ``n`` draws (the launched lengths), sorted."""
        parts = [self._first_sorted(), *(np.sort(c) for c in self.chunks[1:])]
        ordered = parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts), kind="stable")
        tail, start = [], 0  # the draws from the n-th on: drawn, not launched
        for chunk in self.chunks:
            if start + chunk.size > n:
                tail.append(chunk[max(0, n - start) :])
            start += chunk.size
        return without(ordered, np.sort(np.concatenate(tail)) if tail else ordered[:0])
