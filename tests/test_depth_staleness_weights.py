"""The three importance-weight functions against a plain-Python model, over every option at once.

One property per function draws log-probabilities without symmetry (distinct per token and per
row, rows of unequal valid lengths, a 1-D sequence or a batch), a padding mask, and every value of
every option together (``level``, ``clamp_at``, ``band_on``, ``weight``, ``above_cap``,
``nonfinite`` with an infinite log-probability planted, ``lower``, ``log_ratio_clamp`` and the
cap or band), and compares the result with a model written token by token from the docstrings:
``d_t = log π_t − log μ_t`` (0 where non-finite with ``nonfinite="one"``), the sequence statistic
``Σ d_t`` or its mean over the valid tokens, the clamp where ``clamp_at`` puts it, the cap, the
band and the weight of a kept entry. So an option branch inverted, a clamp applied at the wrong
place, a sum read as a mean or the padding read as a token changes some drawn case. Cases whose
statistic lies within 1e-9 of a band edge or a cap (where the rounding of ``log`` decides) are
left to the boundary tests of ``tests/test_depth_staleness.py``.

Each property is also run against the model with one defect, which it must reject.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects, run_property
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

import refimpl

Array = NDArray[np.float64]
EDGE = 1e-9
#: Every option value crossed with every other: more draws than the profile's default (each is
#: a few milliseconds), so that each pair of option values meets in several drawn cases.
MANY = settings(max_examples=250)


@st.composite
def log_probs(draw: st.DrawFn, *, plant: bool) -> dict[str, Any]:
    """``lp``, ``lq`` (B, T) or (T,), a mask with >= 1 valid token per row and unequal counts."""
    batch = draw(st.integers(1, 3))
    width = draw(st.integers(1, 4))
    value = st.floats(-3.0, 0.0, allow_nan=False).map(lambda x: round(x, 3))
    lp = [[draw(value) for _ in range(width)] for _ in range(batch)]
    lq = [[draw(value) for _ in range(width)] for _ in range(batch)]
    counts = [draw(st.integers(1, width)) for _ in range(batch)]
    mask = [[1.0 if t < counts[b] else 0.0 for t in range(width)] for b in range(batch)]
    if plant and draw(st.booleans()):
        b, t = draw(st.integers(0, batch - 1)), draw(st.integers(0, width - 1))
        (lp if draw(st.booleans()) else lq)[b][t] = draw(st.sampled_from([-math.inf, math.nan]))
    one_d = batch == 1 and draw(st.booleans())
    return {"lp": lp, "lq": lq, "mask": mask, "one_d": one_d}


def _log_ratio(case: dict[str, Any]) -> list[list[float]]:
    out = []
    for row_p, row_q in zip(case["lp"], case["lq"], strict=True):
        row = []
        for a, b in zip(row_p, row_q, strict=True):
            d = a - b if math.isfinite(a) and math.isfinite(b) else math.nan
            row.append(d if math.isfinite(d) else 0.0)
        out.append(row)
    return out


def _clip(x: float, c: float) -> float:
    return min(max(x, -c), c)


def _arrays(case: dict[str, Any]) -> tuple[Array, Array, Array]:
    lp, lq, m = (np.array(case[k], dtype=np.float64) for k in ("lp", "lq", "mask"))
    if case["one_d"]:
        return lp[0], lq[0], m[0]
    return lp, lq, m


def _statistic(row: list[float], mask: list[float], level: str, clamp: float) -> float:
    valid = [d for d, w in zip(row, mask, strict=True) if w > 0]
    total = sum(valid) / (len(valid) if level == "geometric" else 1)
    return _clip(total, clamp)


def _shape(case: dict[str, Any], per_token: bool, values: list[list[float]]) -> Array:
    out = np.array(values if per_token else [v[0] for v in values], dtype=np.float64)
    return out[0] if case["one_d"] else out


def _close(got: Array, want: Array) -> None:
    assert got.dtype == np.float64
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0.0)


# --- truncated_is_weights -------------------------------------------------------------------


def truncated_model(case: dict[str, Any], opts: dict[str, Any]) -> Array:
    d = _log_ratio(case)
    clamp = math.inf if opts["log_ratio_clamp"] is None else opts["log_ratio_clamp"]
    low = opts["lower"] or 0.0
    cap = opts["cap"]
    out = []
    for row, mask in zip(d, case["mask"], strict=True):
        if opts["level"] == "token":
            out.append(
                [
                    max(min(math.exp(_clip(x, clamp)), cap), low) if w > 0 else 0.0
                    for x, w in zip(row, mask, strict=True)
                ]
            )
            continue
        if opts["clamp_at"] == "token":
            row, clamp_seq = [_clip(x, clamp) for x in row], math.inf
        else:
            clamp_seq = clamp
        z = _statistic(row, mask, opts["level"], clamp_seq)
        out.append([max(math.exp(min(z, math.log(cap))), low)])
    return _shape(case, opts["level"] == "token", out)


truncated_options = st.fixed_dictionaries(
    {
        "cap": st.sampled_from([1.0, 1.5, 3.0]),
        "level": st.sampled_from(["token", "sequence", "geometric"]),
        "lower": st.sampled_from([None, 0.0, 0.3, 1.0]),
        "log_ratio_clamp": st.sampled_from([None, 0.4, 2.0]),
        "nonfinite": st.sampled_from(["error", "one"]),
        "clamp_at": st.sampled_from(["level", "token"]),
    }
)


def _model_property(
    options: st.SearchStrategy[dict[str, Any]],
    model: Callable[[dict[str, Any], dict[str, Any]], Array],
    fn: Callable[..., Array],
    pin: dict[str, Any] | None = None,
) -> Callable[[], None]:
    """``fn`` equals ``model`` on drawn options and log-probabilities; ``pin`` fixes some options
    (a defect's own), so that every draw exercises them."""

    @given(st.data())
    def prop(data: st.DataObject) -> None:
        opts = {**data.draw(options), **(pin or {})}
        case = data.draw(log_probs(plant=opts["nonfinite"] == "one"))
        lp, lq, m = _arrays(case)
        _close(np.asarray(fn(lp, lq, mask=m, **opts)), model(case, opts))

    return prop


def _case(lp: Array, lq: Array, mask: Array) -> dict[str, Any]:
    """The model's case (rows as lists) of a call's arrays."""
    lp2, lq2, m2 = (np.atleast_2d(x).tolist() for x in (lp, lq, mask))
    return {"lp": lp2, "lq": lq2, "mask": m2, "one_d": lp.ndim == 1}


def _truncated_property(
    fn: Callable[..., Array], pin: dict[str, Any] | None = None
) -> Callable[[], None]:
    return _model_property(truncated_options, truncated_model, fn, pin)


def _truncated_via_model(defect: str) -> Callable[..., Array]:
    def run(lp: Array, lq: Array, *, mask: Array, **opts: Any) -> Array:
        case = _case(lp, lq, mask)
        if defect == "clamp_at ignored":
            opts = {**opts, "clamp_at": "level"}
        elif defect == "geometric as the product":
            opts = {**opts, "level": "sequence" if opts["level"] == "geometric" else opts["level"]}
        elif defect == "lower ignored":
            opts = {**opts, "lower": None}
        elif defect == "padding read":
            case["mask"] = [[1.0] * len(row) for row in case["mask"]]
            out = truncated_model(case, opts)
            return np.where(mask > 0, out, 0.0) if opts["level"] == "token" else out
        return truncated_model(case, opts)

    return run


def test_truncated_is_weights_is_the_model_for_every_option() -> None:
    run_property(MANY(_truncated_property(refimpl.truncated_is_weights)))


_TRUNCATED_PINS: dict[str, dict[str, Any]] = {
    "clamp_at ignored": {"clamp_at": "token", "level": "sequence", "log_ratio_clamp": 0.4},
    "geometric as the product": {"level": "geometric"},
    "lower ignored": {"lower": 1.0},
    "padding read": {},
}


@pytest.mark.parametrize("defect", sorted(_TRUNCATED_PINS))
def test_the_truncated_property_rejects_a_defect(defect: str) -> None:
    rejects(_truncated_property(_truncated_via_model(defect), _TRUNCATED_PINS[defect]))


def test_the_truncated_model_without_a_defect_passes() -> None:
    run_property(_truncated_property(_truncated_via_model("")))


# --- masked_is_weights ----------------------------------------------------------------------


def masked_model(case: dict[str, Any], opts: dict[str, Any]) -> Array:
    d = _log_ratio(case)
    clamp = math.inf if opts["log_ratio_clamp"] is None else opts["log_ratio_clamp"]
    lo, hi, level, kind = opts["low"], opts["high"], opts["level"], opts["weight"]
    per_token = level == "token" or kind in ("token", "geometric")
    out = []
    for row, mask in zip(d, case["mask"], strict=True):
        row_clamp = clamp
        if level != "token" and opts["clamp_at"] == "token":
            row, row_clamp = [_clip(x, clamp) for x in row], math.inf
        zs = (
            [_clip(x, row_clamp) for x in row]
            if level == "token"
            else [_statistic(row, mask, level, row_clamp)]
        )
        stats = [z if opts["band_on"] == "ratio" else -z for z in zs]
        for s in stats:
            assume(abs(s - math.log(hi)) > EDGE)
            assume(lo == 0.0 or abs(s - math.log(lo)) > EDGE)
        keep = [(lo == 0.0 or s >= math.log(lo)) and s <= math.log(hi) for s in stats]
        if kind == "ratio":
            values = [math.exp(z) for z in zs]
        elif kind == "indicator":
            values = [1.0 for _ in zs]
        elif kind == "token":
            values = [math.exp(_clip(x, row_clamp)) for x in row]
        else:
            values = [math.exp(_statistic(row, mask, "geometric", row_clamp))] * len(row)
        if not per_token:
            out.append([values[0] if keep[0] else 0.0])
            continue
        kept = keep if level == "token" else keep * len(row)
        out.append(
            [
                v if k and w > 0 else 0.0
                for v, k, w in zip(
                    values if len(values) == len(row) else values * len(row),
                    kept,
                    mask,
                    strict=True,
                )
            ]
        )
    return _shape(case, per_token, out)


masked_options = st.fixed_dictionaries(
    {
        "low": st.sampled_from([0.0, 0.25, 0.8, 1.0]),
        "high": st.sampled_from([1.0, 1.3, 4.0]),
        "level": st.sampled_from(["token", "sequence", "geometric"]),
        "band_on": st.sampled_from(["ratio", "reciprocal"]),
        "weight": st.sampled_from(["ratio", "indicator", "token", "geometric"]),
        "log_ratio_clamp": st.sampled_from([None, 0.4, 2.0]),
        "nonfinite": st.sampled_from(["error", "one"]),
        "clamp_at": st.sampled_from(["level", "token"]),
    }
)


def _masked_property(
    fn: Callable[..., Array], pin: dict[str, Any] | None = None
) -> Callable[[], None]:
    return _model_property(masked_options, masked_model, fn, pin)


def _masked_via_model(defect: str) -> Callable[..., Array]:
    def run(lp: Array, lq: Array, *, mask: Array, **opts: Any) -> Array:
        case = _case(lp, lq, mask)
        swap = {
            "clamp_at ignored": ("clamp_at", "level"),
            "band on the ratio always": ("band_on", "ratio"),
            "token weight as the ratio": ("weight", "ratio" if opts["weight"] == "token" else None),
            "geometric weight as the token": (
                "weight",
                "token" if opts["weight"] == "geometric" else None,
            ),
            "geometric level as the sequence": (
                "level",
                "sequence" if opts["level"] == "geometric" else None,
            ),
        }.get(defect)
        if swap is not None and swap[1] is not None:
            opts = {**opts, swap[0]: swap[1]}
        return masked_model(case, opts)

    return run


def test_masked_is_weights_is_the_model_for_every_option() -> None:
    run_property(MANY(_masked_property(refimpl.masked_is_weights)))


_MASKED_PINS: dict[str, dict[str, Any]] = {
    "clamp_at ignored": {"clamp_at": "token", "level": "sequence", "log_ratio_clamp": 0.4},
    "band on the ratio always": {"band_on": "reciprocal"},
    "token weight as the ratio": {"weight": "token"},
    "geometric weight as the token": {"weight": "geometric"},
    "geometric level as the sequence": {"level": "geometric"},
}


@pytest.mark.parametrize("defect", sorted(_MASKED_PINS))
def test_the_masked_property_rejects_a_defect(defect: str) -> None:
    rejects(_masked_property(_masked_via_model(defect), _MASKED_PINS[defect]))


def test_the_masked_model_without_a_defect_passes() -> None:
    run_property(_masked_property(_masked_via_model("")))


# --- decoupled_ppo_weights ------------------------------------------------------------------


def decoupled_model(case: dict[str, Any], opts: dict[str, Any]) -> Array:
    d = _log_ratio(case)
    clamp = math.inf if opts["log_ratio_clamp"] is None else opts["log_ratio_clamp"]
    low = opts["lower"] or 0.0
    cap = opts["cap"]
    out = []
    for row, mask in zip(d, case["mask"], strict=True):
        values = []
        for x, w in zip(row, mask, strict=True):
            x = _clip(x, clamp)
            if opts["above_cap"] == "clip":
                values.append(max(min(math.exp(x), cap), low) if w > 0 else 0.0)
                continue
            assume(low == 0.0 or abs(x - math.log(low)) > EDGE)
            assume(cap is None or abs(x - math.log(cap)) > EDGE)
            kept = w > 0 and (low == 0.0 or x >= math.log(low))
            kept = kept and (cap is None or x <= math.log(cap))
            values.append(math.exp(x) if kept else 0.0)
        out.append(values)
    return _shape(case, True, out)


decoupled_options = st.fixed_dictionaries(
    {
        "cap": st.sampled_from([None, 1.0, 1.5, 3.0]),
        "above_cap": st.sampled_from(["mask", "clip"]),
        "lower": st.sampled_from([None, 0.0, 0.3, 1.0]),
        "log_ratio_clamp": st.sampled_from([None, 0.4, 2.0]),
        "nonfinite": st.sampled_from(["error", "one"]),
    }
).filter(lambda o: o["cap"] is not None or o["above_cap"] == "mask")


def _decoupled_property(
    fn: Callable[..., Array], pin: dict[str, Any] | None = None
) -> Callable[[], None]:
    return _model_property(decoupled_options, decoupled_model, fn, pin)


def _decoupled_via_model(defect: str) -> Callable[..., Array]:
    def run(lp: Array, lq: Array, *, mask: Array, **opts: Any) -> Array:
        case = _case(lp, lq, mask)
        if defect == "clip read as mask":
            opts = {**opts, "above_cap": "mask"}
        elif defect == "lower ignored":
            opts = {**opts, "lower": None}
        elif defect == "clamp ignored":
            opts = {**opts, "log_ratio_clamp": None}
        return decoupled_model(case, opts)

    return run


def test_decoupled_ppo_weights_is_the_model_for_every_option() -> None:
    run_property(MANY(_decoupled_property(refimpl.decoupled_ppo_weights)))


_DECOUPLED_PINS: dict[str, dict[str, Any]] = {
    "clip read as mask": {"above_cap": "clip", "cap": 1.5},
    "lower ignored": {"lower": 1.0},
    "clamp ignored": {"log_ratio_clamp": 0.4},
}


@pytest.mark.parametrize("defect", sorted(_DECOUPLED_PINS))
def test_the_decoupled_property_rejects_a_defect(defect: str) -> None:
    rejects(_decoupled_property(_decoupled_via_model(defect), _DECOUPLED_PINS[defect]))


def test_clip_without_a_cap_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match=r"cap must be given with above_cap='clip'.*cap=5.0"):
        refimpl.decoupled_ppo_weights([0.0], [0.0], above_cap="clip")
