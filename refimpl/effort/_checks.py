"""Shared checks of the effort formulas (private): the penalty's parameters, effort arrays, the
scaled effort ``(b − b_min)/τ``, and the float64 output they all return.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import (
    as_float_array,
    as_real,
    invalid,
)

__all__: list[str] = []


def _penalty_parameters(k0: Any, b_min: Any, tau: Any) -> tuple[float, float, float]:
    k0_ = as_real(k0, name="k0", low=0.0, meaning="length price at the lowest effort")
    b_min_ = as_real(b_min, name="b_min", meaning="lowest effort")
    tau_ = as_real(tau, name="tau", low=0.0, low_open=True, meaning="decay length in effort units")
    return k0_, b_min_, tau_


def _effort_array(b: ArrayLike, b_min: float) -> NDArray[np.float64]:
    arr = as_float_array(b, name="b")
    below = arr < b_min
    if np.any(below):
        first = int(np.flatnonzero(below.ravel())[0])
        raise invalid(
            "b",
            f"be >= b_min={b_min!r} (effort is measured from its minimum)",
            arr,
            f"Entry {first} is {float(arr.ravel()[first])!r}; pass efforts >= b_min or lower b_min.",
        )
    return arr


def _scaled_effort(b: NDArray[np.float64], b_min: float, tau: float) -> NDArray[np.float64]:
    """``(b − b_min)/τ`` ≥ 0; may be ``+inf`` for huge ratios (never a warning)."""
    with np.errstate(over="ignore"):
        return np.asarray((b - b_min) / tau, dtype=np.float64)


def _out(value: Any) -> NDArray[np.float64]:
    return np.asarray(value, dtype=np.float64)


def _require_nonnegative(arr: NDArray[np.float64], *, name: str, meaning: str) -> None:
    bad = arr < 0
    if np.any(bad):
        first = int(np.flatnonzero(bad.ravel())[0])
        raise invalid(
            name,
            f"be >= 0 ({meaning})",
            arr,
            f"Entry {first} is {float(arr.ravel()[first])!r}; pass non-negative values.",
        )


def _quality_parameters(q_max: Any, lam: Any) -> tuple[float, float]:
    q_max_ = as_real(q_max, name="q_max", low=0.0, low_open=True, meaning="saturation quality")
    lam_ = as_real(lam, name="lam", low=0.0, low_open=True, meaning="quality length scale")
    return q_max_, lam_
