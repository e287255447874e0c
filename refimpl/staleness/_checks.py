"""Shared checks and log-space helpers of the staleness formulas (private).

Converting staleness counts, masks and log-probabilities, the choices (``level``, ``nonfinite``,
``staleness_count``) and bounds the weight functions share, and the capped exponential that keeps
every product of ratios finite.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import (
    as_float_array,
    as_real,
    invalid,
    require_entries,
    require_one_of,
    require_same_shape,
)

__all__: list[str] = []

Level = Literal["token", "sequence", "geometric"]
_LEVELS = ("token", "sequence", "geometric")

#: ``exp(x)`` is finite in float64 exactly when ``x <= _LOG_MAX``.
_LOG_MAX = float(np.log(np.finfo(np.float64).max))


def _require_integral(arr: NDArray[np.float64], *, name: str, meaning: str) -> None:
    require_entries(
        arr,
        arr != np.round(arr),
        name=name,
        rule=f"hold whole numbers ({meaning})",
        fix="; pass integer counts.",
    )


def _as_mask(mask: ArrayLike | None, shape: tuple[int, ...], *, like: str) -> NDArray[np.float64]:
    if mask is None:
        return np.ones(shape, dtype=np.float64)
    m = as_float_array(mask, name="mask")
    require_same_shape(m, np.empty(shape), names=("mask", like))
    require_entries(
        m,
        (m != 0.0) & (m != 1.0),
        name="mask",
        rule="hold only 0 and 1 (1 = a real token, 0 = padding)",
        fix="; pass a boolean or 0/1 padding mask.",
    )
    return m


def _log_ratio(
    logp_target: ArrayLike,
    logp_behavior: ArrayLike,
    mask: ArrayLike | None,
    *,
    names: tuple[str, str],
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Validated ``log π − log μ`` and the padding mask, both of shape (T,) or (B, T)."""
    a = as_float_array(logp_target, name=names[0], ndim=(1, 2))
    b = as_float_array(logp_behavior, name=names[1], ndim=(1, 2))
    require_same_shape(a, b, names=names)
    if a.shape[-1] == 0:
        raise invalid(
            names[0], "have at least one token", a, "Pass arrays of shape (T,) or (B, T), T >= 1."
        )
    m = _as_mask(mask, a.shape, like=names[0])
    return a - b, m


NonFinite = Literal["error", "one"]
StalenessCount = Literal["versions_behind", "versions_spanned"]


def _as_choice(value: Any, *, name: str, choices: tuple[str, ...], fix: str) -> Any:
    if not isinstance(value, str) or value not in choices:
        raise invalid(name, f"be one of {', '.join(map(repr, choices))}", value, fix)
    return value


def _nonfinite_log_ratio(
    logp_target: ArrayLike,
    logp_behavior: ArrayLike,
    mask: ArrayLike | None,
    *,
    names: tuple[str, str],
    nonfinite: Any,
    ndim: tuple[int, ...] | None = (1, 2),
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Validated log-ratio and mask; with ``nonfinite="one"`` a non-finite log-ratio (a NaN or an
    infinite log-probability) becomes 0, i.e. ratio 1 (AReaL's and TRL's convention)."""
    mode = _as_choice(
        nonfinite,
        name="nonfinite",
        choices=("error", "one"),
        fix="Pass nonfinite='error' (reject NaN and infinities) or 'one' (ratio 1 there).",
    )
    if mode == "error":
        if ndim is None:
            a = as_float_array(logp_target, name=names[0])
            b = as_float_array(logp_behavior, name=names[1])
            require_same_shape(a, b, names=names)
            return a - b, _as_mask(mask, a.shape, like=names[0])
        return _log_ratio(logp_target, logp_behavior, mask, names=names)
    raw_a = np.asarray(logp_target, dtype=np.float64)
    raw_b = np.asarray(logp_behavior, dtype=np.float64)
    if ndim is None:
        a = as_float_array(np.where(np.isfinite(raw_a), raw_a, 0.0), name=names[0])
        b = as_float_array(np.where(np.isfinite(raw_b), raw_b, 0.0), name=names[1])
        require_same_shape(a, b, names=names)
        m = _as_mask(mask, a.shape, like=names[0])
    else:
        _, m = _log_ratio(
            np.where(np.isfinite(raw_a), raw_a, 0.0),
            np.where(np.isfinite(raw_b), raw_b, 0.0),
            mask,
            names=names,
        )
    with np.errstate(invalid="ignore"):
        d = raw_a - raw_b
    return np.where(np.isfinite(d), d, 0.0), m


def _as_clamp(log_ratio_clamp: Any) -> float:
    if log_ratio_clamp is None:
        return math.inf
    return as_real(
        log_ratio_clamp,
        name="log_ratio_clamp",
        low=0.0,
        low_open=True,
        meaning="the log-ratio is clipped to [-c, c] before exp (verl and SkyRL: 20)",
    )


def _as_clamp_at(clamp_at: Any) -> str:
    out: str = _as_choice(
        clamp_at,
        name="clamp_at",
        choices=("level", "token"),
        fix="Pass clamp_at='level' (clamp the sum or mean) or 'token' (clamp each token).",
    )
    return out


def _as_lower(lower: Any) -> float:
    if lower is None:
        return 0.0
    return as_real(
        lower,
        name="lower",
        low=0.0,
        high=1.0,
        meaning="lower truncation level of clip(ρ, lower, C); above 1 it would change ratio 1",
    )


def _as_level(level: Any) -> Level:
    require_one_of(
        level,
        _LEVELS,
        name="level",
        fix="Pass level='token' (per-token ratios), 'sequence' (product over the sequence) or "
        "'geometric' (geometric mean over the valid tokens).",
    )
    out: Level = level
    return out


def _sequence_log_ratio(
    d: NDArray[np.float64], m: NDArray[np.float64], level: Level
) -> NDArray[np.float64]:
    """Per-sequence log-ratio: ``Σ_t m_t d_t`` (sequence) or its mean over valid tokens."""
    counts = m.sum(axis=-1)
    if np.any(counts == 0):
        first = int(np.flatnonzero(np.atleast_1d(counts == 0))[0])
        raise invalid(
            "mask",
            f"leave at least one valid token in every sequence (level={level!r})",
            m,
            f"Sequence {first} is all padding; drop empty sequences before weighting them.",
        )
    total = np.where(m > 0, d, 0.0).sum(axis=-1)
    if level == "geometric":
        total = total / counts
    return np.asarray(total, dtype=np.float64)


def _as_cap(cap: Any, *, name: str = "cap") -> float:
    return as_real(
        cap,
        name=name,
        low=1.0,
        meaning="a cap below 1 would change the weight of an on-policy token whose ratio is "
        "exactly 1",
    )


def _capped_exp(log_ratio: NDArray[np.float64], cap: float) -> NDArray[np.float64]:
    """``min(exp(x), cap)`` without overflow, and exactly ``cap`` when ``x >= log(cap)``."""
    return np.minimum(np.exp(np.minimum(log_ratio, math.log(cap))), cap)


def _as_count(staleness_count: Any) -> int:
    """0 for ``"versions_behind"`` (``s``), 1 for ``"versions_spanned"`` (``s + 1``)."""
    mode = _as_choice(
        staleness_count,
        name="staleness_count",
        choices=("versions_behind", "versions_spanned"),
        fix="Pass staleness_count='versions_behind' (s = j − v, refimpl's and TRL's) or "
        "'versions_spanned' (s + 1, verl's max_off_policy_threshold).",
    )
    return 0 if mode == "versions_behind" else 1
