"""The trace gate's agreement test on float64 rows gives ``tolerances.agree``'s verdict on every
pair: finite numbers, infinities, NaN, numbers whose difference overflows, and tolerances of
zero, of every size, infinite or NaN. Two wrong variants (one that lets a finite bound pass an
infinite found value, one without the equal-infinities rule) are caught."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

from refimpl.testing._trace_compare import agree_float64
from refimpl.testing.tolerances import Tolerance, agree

Agree = Callable[[NDArray[np.float64], NDArray[np.float64], Tolerance], NDArray[np.bool_]]

SPECIAL = [0.0, -0.0, 1.0, 1.0 + 2**-52, 1e-310, 1.7e308, -1.7e308, np.inf, -np.inf, np.nan]
FLOATS = st.one_of(st.sampled_from(SPECIAL), st.floats(allow_nan=True, allow_infinity=True))
TOLERANCES = st.one_of(
    st.sampled_from([0.0, 1e-8, 1e-5, 1.0, 1e300, np.inf, np.nan]),
    st.floats(min_value=0.0, max_value=1e10),
)
PAIRS = st.lists(st.tuples(FLOATS, FLOATS), min_size=1, max_size=40)


def _same_as_agree(fast: Agree) -> Callable[[], None]:
    @given(PAIRS, TOLERANCES, TOLERANCES)
    def check(pairs: list[tuple[float, float]], rtol: float, atol: float) -> None:
        f = np.array([p[0] for p in pairs], dtype=np.float64)
        e = np.array([p[1] for p in pairs], dtype=np.float64)
        tol = Tolerance(rtol=rtol, atol=atol)
        assert fast(f, e, tol).tolist() == agree(f, e, tol).tolist()

    return check


def test_agree_float64_is_agree() -> None:
    run_property(_same_as_agree(agree_float64))


def test_exact_values() -> None:
    inf, nan = np.inf, np.nan
    f = np.array([1.0, 1.1, nan, inf, inf, 1e308, 1.0 + 1e-9])
    e = np.array([1.0, 1.0, nan, inf, -inf, inf, 1.0])
    got = agree_float64(f, e, Tolerance(rtol=1e-6, atol=0.0))
    assert got.tolist() == [True, False, False, True, False, False, True]
    assert agree_float64(f, e, Tolerance(rtol=0.0, atol=0.0)).tolist() == [
        True,
        False,
        False,
        True,
        False,
        False,
        False,
    ]


def _no_finite_found(
    f: NDArray[np.float64], e: NDArray[np.float64], tol: Tolerance
) -> NDArray[np.bool_]:
    with np.errstate(invalid="ignore", over="ignore"):
        close = np.abs(f - e) <= tol.atol + tol.rtol * np.abs(e)
    return np.asarray((close & np.isfinite(e)) | (f == e))


def _no_same_infinity(
    f: NDArray[np.float64], e: NDArray[np.float64], tol: Tolerance
) -> NDArray[np.bool_]:
    with np.errstate(invalid="ignore", over="ignore"):
        close = np.abs(f - e) <= tol.atol + tol.rtol * np.abs(e)
    return np.asarray(close & np.isfinite(e) & np.isfinite(f))


def test_wrong_variants_are_caught() -> None:
    rejects(_same_as_agree(_no_finite_found))
    rejects(_same_as_agree(_no_same_infinity))
