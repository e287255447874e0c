"""The parts the simple specs are built from: one call, a strategy that ignores the conventions,
a found array read as float64, agreement with the reference within the tolerance, bounded
floats and response lengths (the specs of the staleness weights and of the length rewards)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy.typing import NDArray

from refimpl.testing._arrays import ArrayBridge
from refimpl.testing._engine import Call, Case, Conventions

Array = NDArray[np.float64]
Strategy = Callable[[Conventions], st.SearchStrategy[list[Call]]]

#: The specs whose reference returns a 0/1 mask (1 keeps a sample, a sequence or a token; 0 drops
#: it). Only for these may a candidate return booleans (``s <= eta`` is the mask itself: True
#: reads as 1, False as 0); for every other spec a boolean output is refused with a message,
#: whatever its values, since a boolean there would mean a weight silently rounded to 0 or 1.
MASK_OUTPUTS = frozenset(
    {"staleness_mask", "any_token_veto", "off_policy_sequence_mask", "m2po_mask"}
)


def _one(args: tuple[Any, ...], **kwargs: Any) -> list[Call]:
    return [(args, kwargs)]


def _fixed(strategy: st.SearchStrategy[list[Call]]) -> Strategy:
    return lambda conv: strategy


def _array(raw: Any, call: Call, conv: Conventions) -> Array:
    return ArrayBridge.to_numpy(raw)


def _f(case: Case, i: int = 0) -> Array:
    out: Array = np.asarray(case.found[i], dtype=np.float64)
    return out


def _agrees(case: Case) -> None:
    expected = np.asarray(case.expected(), dtype=np.float64)
    case.show("found:   ", _f(case))
    case.show("expected:", expected)
    case.assert_close(_f(case), expected, case.condition(), "values")


def _floats(low: float, high: float) -> st.SearchStrategy[float]:
    return st.floats(low, high, allow_nan=False, allow_infinity=False, allow_subnormal=False)


def _lengths(max_length: int = 5000, size: int = 12) -> st.SearchStrategy[NDArray[np.int64]]:
    return hnp.arrays(
        np.int64,
        st.integers(1, size),
        elements=st.one_of(st.integers(0, max_length), st.sampled_from([0, 1, max_length])),
    )


def _non_increasing(case: Case) -> None:
    x, y = case.calls[0][0][0], _f(case)
    case.show("x:", x)
    case.show("y:", y)
    cond = case.condition()
    rise = np.diff(y) > case.allowed(y[:-1], cond[:-1] + cond[1:])
    assert not rise.any(), (
        f"increases from {x[:-1][rise]} to {x[1:][rise]}: {y[:-1][rise]} -> {y[1:][rise]}"
    )
