"""A mix of difficulty classes (private): per-class parameters broadcast against their weights,
and each class's optimal length and quality at a price, which the frontier, the adaptive mix and
the conditioned policy share.
"""

from __future__ import annotations

import numbers
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import (
    as_float_array,
    as_pmf,
    as_real,
    invalid,
)
from refimpl.effort._checks import _effort_array, _out, _penalty_parameters, _scaled_effort

__all__: list[str] = []


class _Mix(NamedTuple):
    """Validated classes: per-class ``q_max`` and ``λ`` (shape (D,)) and the weights, if any."""

    q_max: NDArray[np.float64]
    lam: NDArray[np.float64]
    weights: NDArray[np.float64] | list[Fraction] | None


def _class_parameter(value: Any, *, name: str, meaning: str) -> NDArray[np.float64]:
    """A positive scalar or a non-empty 1-D array of positive values (one per class)."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return np.asarray([as_real(value, name=name, low=0.0, low_open=True, meaning=meaning)])
    arr = np.atleast_1d(as_float_array(value, name=name, ndim=(0, 1)))
    if arr.size == 0:
        raise invalid(
            name, "be non-empty (one value per class)", arr, f"Pass one {name} per class."
        )
    bad = arr <= 0.0
    if np.any(bad):
        first = int(np.flatnonzero(bad)[0])
        raise invalid(
            name,
            f"be > 0 ({meaning})",
            arr,
            f"Entry {first} is {float(arr[first])!r}; pass positive values.",
        )
    return arr


def _is_scalar(value: Any) -> bool:
    if isinstance(value, (str, bytes)):
        return True
    try:
        return bool(np.ndim(value) == 0)
    except (TypeError, ValueError):  # ragged nesting: not a scalar, refused as an array later
        return False


def _mix(q_max: Any, lam: Any, weights: Any) -> _Mix | None:
    """The classes of a call, or ``None`` for the one-curve call (scalar ``q_max``, ``lam``, no weights)."""
    if weights is None and _is_scalar(q_max) and _is_scalar(lam):
        return None
    q = _class_parameter(q_max, name="q_max", meaning="saturation quality of each class")
    lm = _class_parameter(lam, name="lam", meaning="quality length scale of each class")
    w: NDArray[np.float64] | list[Fraction] | None = None
    if weights is not None:
        w, _ = as_pmf(weights, name="weights")
    sizes = {"q_max": q.size, "lam": lm.size}
    if w is not None:
        sizes["weights"] = len(w)
    n = max(sizes.values())
    for name, size in sizes.items():
        if size != n and (size != 1 or name == "weights"):
            shown = ", ".join(f"{k}: {v}" for k, v in sizes.items())
            raise invalid(
                name,
                f"have one entry per class ({n} classes; q_max and lam may also have one for all)",
                {"q_max": q, "lam": lm, "weights": weights}[name],
                f"Give q_max, lam and weights the same length (got {shown}).",
            )
    return _Mix(np.broadcast_to(q, (n,)).copy(), np.broadcast_to(lm, (n,)).copy(), w)


def _mix_mean(values: NDArray[np.float64], weights: NDArray[np.float64] | list[Fraction]) -> Any:
    """``Σ_d w_d v[..., d]``; with ``Fraction`` weights the sum is exact, rounded once."""
    if isinstance(weights, list):
        flat = values.reshape(-1, values.shape[-1])
        exact = [
            float(
                sum(
                    (Fraction(float(v)) * w for v, w in zip(row, weights, strict=True)), Fraction(0)
                )
            )
            for row in flat
        ]
        return np.asarray(exact, dtype=np.float64).reshape(values.shape[:-1])
    return values @ weights


def _class_optimum(
    arr: NDArray[np.float64], mix: _Mix, k0: float, b_min: float, tau: float
) -> NDArray[np.float64]:
    """``ℓ*_d(b)`` for every class, shape ``(*b.shape, D)`` (log form, never forms ``k(b)``)."""
    x = _scaled_effort(arr, b_min, tau)[..., None]
    intercept = np.log(mix.q_max) - np.log(mix.lam) - np.log(k0)
    with np.errstate(over="ignore", invalid="ignore"):
        length = np.maximum(mix.lam * (intercept + x), 0.0)
    if not np.all(np.isfinite(length)):
        raise invalid(
            "b",
            "give a finite optimal length (λ·(b − b_min)/τ overflows float64)",
            arr,
            "Pass smaller efforts or a larger tau.",
        )
    return _out(length)


def _class_quality(length: NDArray[np.float64], mix: _Mix) -> NDArray[np.float64]:
    """``Q_d(ℓ_d)`` for lengths with a class axis last."""
    with np.errstate(over="ignore", under="ignore"):
        return _out(-mix.q_max * np.expm1(-(length / mix.lam)))


def _mix_effort(b: ArrayLike, k0: Any, b_min: Any, tau: Any) -> tuple[float, float, float, Any]:
    k0_, b_min_, tau_ = _penalty_parameters(k0, b_min, tau)
    if k0_ == 0.0:
        raise invalid(
            "k0",
            "be > 0 for an optimal length (with k0 = 0 longer is always better: L* = inf)",
            k0,
            "Pass a positive k0.",
        )
    return k0_, b_min_, tau_, _effort_array(b, b_min_)
