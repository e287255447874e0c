"""Array conversion and types shared by the learning modules."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from refimpl._validation import as_float_array, invalid

FloatArray = NDArray[np.float64]
AnyArray = NDArray[Any]
#: Largest log-weight exponentiated (``exp`` overflows float64 beyond ``~709.78``).
_LOG_MAX = 700.0


def _as_array(values: Any, *, name: str, ndim: int | None = None) -> tuple[AnyArray, bool]:
    """``values`` as an object array of Fractions (exact) or a float64 array."""
    arr = np.asarray(values, dtype=object)
    flat = list(arr.ravel())
    if flat and all(
        isinstance(x, (Fraction, int)) and not isinstance(x, (bool, np.bool_)) for x in flat
    ):
        out = np.empty(arr.shape, dtype=object)
        out.ravel()[:] = [Fraction(x) for x in flat]
        if ndim is not None and out.ndim != ndim:
            raise invalid(name, f"be {ndim}-dimensional", values, f"Pass a {ndim}-D array.")
        return out, True
    return as_float_array(values, name=name, ndim=ndim), False
