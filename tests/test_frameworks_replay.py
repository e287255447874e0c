"""The committed counterexamples that `refimpl conformance --check` replays are the inputs the
search found, bit for bit: the text a report writes parses back to the same calls."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from refimpl.frameworks._replay import counterexamples, parse_calls
from refimpl.testing._conformance_source import _calls_source

_arrays = st.one_of(
    hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=2, max_side=3)),
    hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=2, max_side=3)),
    hnp.arrays(np.int64, hnp.array_shapes(min_dims=1, max_dims=2, max_side=3)),
    hnp.arrays(np.bool_, hnp.array_shapes(min_dims=1, max_dims=2, max_side=3)),
)
_scalars = st.one_of(
    st.floats(), st.integers(-(2**70), 2**70), st.booleans(), st.none(), st.fractions()
)
_calls = st.lists(
    st.tuples(
        st.lists(_arrays, max_size=2).map(tuple),
        st.dictionaries(st.sampled_from(["mask", "cap", "eta", "group"]), _arrays | _scalars),
    ),
    min_size=1,
    max_size=2,
)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray):
        if not (isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape):
            return False
        if a.dtype.kind != "f":
            return bool(np.array_equal(a, b))
        # every value, NaN where NaN (a NaN's sign and payload are not kept), the sign of zeros
        numbers = ~np.isnan(a)
        same_sign = (np.signbit(a) == np.signbit(b))[numbers].all()
        return bool(np.array_equal(a, b, equal_nan=True) and same_sign)
    if isinstance(a, float) and a != a:
        return isinstance(b, float) and b != b
    if isinstance(a, float) and a == 0.0:
        return isinstance(b, float) and str(a) == str(b)  # the sign of zero
    return type(a) is type(b) and bool(a == b)


@given(_calls)
@example(  # what the search's edges draw: non-finite values, signed zeros, exact parameters
    [((np.array([np.nan, np.inf, -np.inf, -0.0]),), {"cap": float("nan"), "eta": Fraction(1, 3)})]
)
def test_a_counterexamples_text_parses_back_to_the_same_calls(calls: list[Any]) -> None:
    parsed = parse_calls(_calls_source(calls))
    assert len(parsed) == len(calls)
    for (args, kwargs), (p_args, p_kwargs) in zip(calls, parsed, strict=True):
        assert len(p_args) == len(args)
        assert all(map(_same, args, p_args))
        assert p_kwargs.keys() == kwargs.keys()
        assert all(_same(v, p_kwargs[k]) for k, v in kwargs.items())


def test_only_the_checks_that_diverged_are_replayed_and_not_the_partitions() -> None:
    source = _calls_source([((np.array([0.5]),), {"cap": Fraction(1, 3)})])
    entry = {
        "checks": {"values": "failed", "gradient": "passed"},
        "divergences": [{"check": "values", "counterexample": source}],
        "partition": {"divergences": [{"check": "partition.x", "counterexample": source}]},
    }
    replay = counterexamples(entry)
    assert list(replay) == ["values"]
    assert replay["values"][0][1]["cap"] == Fraction(1, 3)
