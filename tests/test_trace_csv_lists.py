"""CSV list cells written ``[a,b,c]`` are split at the commas and parsed by one cast; that route
reads exactly what the byte scan reads (the same numbers, the same rows), and hands anything
else (blanks, ``;``, inner brackets, empty pieces or lists, words) back to the scan. A split
that trusts an empty piece, or one that keeps a blank, is caught."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st

from refimpl.testing import _trace_csv
from refimpl.testing._trace_arrow import ListColumn

NUMBERS = st.sampled_from(
    ["1", "-2.5", "3e-7", "+1", ".5", "5.", "nan", "inf", "-inf", "1E300", "0", "-0", "x"]
)
SEPARATORS = st.sampled_from([",", ",", ",", ", ", ";", " ", ",,", "]["])
CELLS = st.builds(
    lambda nums, seps, brackets: (
        ("[" if brackets else "")
        + "".join(n + s for n, s in zip(nums, seps, strict=False))[: -len(seps[-1]) or None]
        + ("]" if brackets else "")
    ),
    st.lists(NUMBERS, min_size=0, max_size=5),
    st.lists(SEPARATORS, min_size=5, max_size=5),
    st.booleans(),
)


def _scan(col: Any) -> ListColumn | None:
    tokens, offsets = _trace_csv._csv_list_tokens(col)
    try:
        values = pc.cast(tokens, pa.float64())
    except pa.ArrowInvalid:
        return None
    return ListColumn(values.to_numpy(zero_copy_only=False), offsets)


def _same_as_scan(split: Callable[[Any], ListColumn | None]) -> Callable[[], None]:
    @given(st.lists(CELLS, min_size=1, max_size=8))
    def check(cells: list[str]) -> None:
        col = pa.array(cells, type=pa.string())
        got = split(col)
        if got is None:
            return
        want = _scan(col)
        assert want is not None
        assert got.offsets.tolist() == want.offsets.tolist()
        assert np.array_equal(got.values, want.values, equal_nan=True)
        assert np.signbit(got.values).tolist() == np.signbit(want.values).tolist()

    return check


def test_the_comma_split_reads_as_the_scan() -> None:
    run_property(_same_as_scan(_trace_csv._comma_lists))


def test_the_comma_split_takes_plain_lists_itself() -> None:
    col = pa.array(["[1,-2.5,3e-7]", "[4]", "5,6"])
    got = _trace_csv._comma_lists(col)
    assert got is not None
    assert got.offsets.tolist() == [0, 3, 4, 6]
    assert got.values.tolist() == [1.0, -2.5, 3e-7, 4.0, 5.0, 6.0]
    for odd in (["[1, 2]"], ["[]"], ["[1,,2]"], ["1;2"], ["[[1],[2]]"]):
        assert _trace_csv._comma_lists(pa.array(odd)) is None


def _empty_pieces_dropped(col: Any) -> ListColumn | None:
    parts = pc.split_pattern(pc.utf8_trim(col, characters="[]"), pattern=",")
    flat = [p for p in parts.values.to_pylist() if p != ""]
    try:
        values = pc.cast(pa.array(flat, type=pa.string()), pa.float64())
    except pa.ArrowInvalid:
        return None
    offsets = np.asarray(parts.offsets.to_pylist(), dtype=np.int64)  # offsets not recounted
    return ListColumn(values.to_numpy(zero_copy_only=False), offsets)


def _blanks_stripped(col: Any) -> ListColumn | None:
    """Blanks deleted before the split: ``1 2`` becomes ``12``."""
    return _trace_csv._comma_lists(pc.replace_substring(col, " ", ""))


def test_wrong_variants_are_caught() -> None:
    rejects(_same_as_scan(_empty_pieces_dropped))
    rejects(_same_as_scan(_blanks_stripped))
