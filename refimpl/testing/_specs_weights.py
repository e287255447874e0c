"""Specs of the importance weights: TIS, masked IS / IcePop, decoupled-PPO behaviour weights.

One family, three levels (token, sequence, geometric), with the conventions frameworks differ by
(verl, AReaL, TRL and SkyRL as read from their installed sources, see the docs' conventions page):
the value at padding, a log-ratio clamp before ``exp``, two-sided truncation, a band on ``π/μ`` or
on its reciprocal, the weight a kept entry gets, non-finite log-ratios, the aggregation of a
sequence (sum or mean), the output layout and packed inputs. The conventions are declared in
``_specs_weights_conventions``, the calls drawn in ``_specs_weights_calls``; here: the reference
under the conventions, the checks and the specs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

import refimpl
from refimpl.testing._arrays import ArrayBridge
from refimpl.testing._engine import Call, Case, Check, Conventions, Spec
from refimpl.testing._specs_weights_calls import (
    _calls,
    _edges,
    _Family,
    _from_call,
    _mixed_calls,
    _padded_draw,
    _to_call,
)
from refimpl.testing._specs_weights_conventions import (
    ABOVE_CAP,
    AGGREGATE,
    BAND_ON,
    CLAMP,
    CLAMP_AT,
    COMPUTE,
    EMPTY_BATCH,
    EMPTY_ROWS,
    INPUTS,
    LAYOUT,
    LOWER,
    NONFINITE,
    OUTPUT,
    PADDING,
    WEIGHT,
    Array,
    Level,
    _conventions,
)
from refimpl.testing.tolerances import largest_finite, summation_factor

__all__ = [
    "ABOVE_CAP",
    "AGGREGATE",
    "BAND_ON",
    "CLAMP",
    "CLAMP_AT",
    "COMPUTE",
    "EMPTY_BATCH",
    "EMPTY_ROWS",
    "INPUTS",
    "LAYOUT",
    "LOWER",
    "NONFINITE",
    "OUTPUT",
    "PADDING",
    "SPECS",
    "WEIGHT",
    "_from_call",
    "_layout_hint",
    "_padded_draw",
]

# ---------------------------------------------------------------------------------------------
# the reference under the conventions, its layout, and the rounding-error model
# ---------------------------------------------------------------------------------------------


def _reference_kwargs(fam: _Family, conv: Conventions, params: dict[str, Any]) -> dict[str, Any]:
    kw: dict[str, Any] = {
        "log_ratio_clamp": conv["log_ratio_clamp"],
        "nonfinite": conv["nonfinite"],
    }
    if fam.family == "tis":
        kw.update(cap=params["cap"], lower=conv["lower"])
    elif fam.family == "mis":
        kw.update(low=params["low"], high=params["high"], band_on=conv["band_on"])
        kw["weight"] = conv["weight"]
    else:
        kw.update(cap=params["cap"], above_cap=conv["above_cap"], lower=conv["lower"])
    if fam.family != "ppo":
        kw["level"] = fam.effective_level(conv)
    if fam.level != "token":
        kw["clamp_at"] = conv["clamp_at"]
    return kw


def _reference_fn(fam: _Family) -> Callable[..., Any]:
    if fam.family == "tis":
        return refimpl.truncated_is_weights
    if fam.family == "mis":
        return refimpl.masked_is_weights
    return refimpl.decoupled_ppo_weights


def _pad_value(conv: Conventions) -> float:
    return 1.0 if conv["padding"] == "one" else 0.0


def _layout(fam: _Family, conv: Conventions, per_row: Array, mask: Array) -> Array:
    """A per-row or per-token (B, T) result in the declared output layout."""
    token_shaped = fam.token_shaped(conv)
    if per_row.ndim == 1 and token_shaped:
        per_row = np.broadcast_to(per_row[:, None], mask.shape)
    if per_row.ndim == 2:
        out = np.where(mask > 0, per_row, _pad_value(conv))
        return out[mask > 0] if conv["layout"] == "packed" else out
    empty = mask.sum(axis=1) == 0
    out = np.where(empty, _pad_value(conv), per_row)
    return out[:, None] if conv["output"] == "B1" else out


def _per_row(fam: _Family, call: Call, conv: Conventions) -> tuple[Array, Array]:
    """The reference as (B,) or (B, T), all-padding rows filled with 0; and the mask."""
    target, behavior, mask, params = _from_call(call, conv)
    kw = _reference_kwargs(fam, conv, params)
    fn = _reference_fn(fam)
    rows = mask.sum(axis=1) > 0
    token_out = fam.level == "token" or (
        fam.family == "mis" and conv["weight"] in ("token", "geometric")
    )
    out = np.zeros(mask.shape if token_out else mask.shape[:1])
    if rows.any():
        out[rows] = fn(target[rows], behavior[rows], mask=mask[rows], **kw)
    return out, mask


def _expected(fam: _Family) -> Callable[[Call, Conventions], Array]:
    def expected(call: Call, conv: Conventions) -> Array:
        out, mask = _per_row(fam, call, conv)
        return _layout(fam, conv, out, mask)

    return expected


def _log_ratio(call: Call, conv: Conventions) -> tuple[Array, Array]:
    target, behavior, mask, _ = _from_call(call, conv)
    with np.errstate(invalid="ignore"):
        d = target - behavior
    d = np.where(np.isfinite(d), d, 0.0)
    c = conv["log_ratio_clamp"]
    if c is not None and conv.get("clamp_at") == "token":
        d = np.clip(d, -c, c)
    return d, mask


def _statistic_error(level: Level, call: Call, conv: Conventions) -> tuple[Array, Array]:
    """Per row or token: the log-ratio statistic and the first-order bound of its rounding error
    in units of ``u`` (an elementwise difference: ``|d|``; a pairwise sum of ``n`` terms:
    ``(⌈log₂ n⌉ + 1)·Σ|d|``; a mean: that over ``n``, plus ``|mean|`` for the division).

    A candidate that computes in a coarser ``compute_dtype`` than it is given first rounds each
    log-probability to it, an absolute error ``u·|log π|``: the difference then carries
    ``|log π| + |log μ|`` instead of ``|d|`` (log-probabilities near −500 make a ratio near 1
    uncertain by ``3e-5`` in float32, whatever the ratio)."""
    d, mask = _log_ratio(call, conv)
    size = np.abs(d)
    if conv.get("compute_dtype") is not None:
        target, behavior, _, _ = _from_call(call, conv)
        with np.errstate(invalid="ignore"):
            cast = np.abs(target) + np.abs(behavior)
        size = np.maximum(size, np.where(np.isfinite(cast), cast, 0.0))
    if level == "token":
        return d, size + 1.0
    n = mask.sum(axis=1)
    total = (d * mask).sum(axis=1)
    factor = np.array([summation_factor(int(k)) for k in n])
    err = factor * (size * mask).sum(axis=1) + 1.0
    if level == "geometric":
        mean = total / np.maximum(n, 1)
        return mean, err / np.maximum(n, 1) + np.abs(mean) + 1.0
    return total, err


def _condition(fam: _Family) -> Callable[[Call, Conventions, Array], Array]:
    def condition(call: Call, conv: Conventions, expected: Array) -> Array:
        _, mask = _log_ratio(call, conv)
        level = fam.effective_level(conv)
        if fam.family == "mis" and conv["weight"] == "token":
            level = "token"
        elif fam.family == "mis" and conv["weight"] == "geometric":
            level = "geometric"
        _, err = _statistic_error(level, call, conv)
        # exp turns an absolute error of the log-ratio into a relative one; + the rounding of exp,
        # of the comparison with the cap and of the output cast
        rel = _layout(fam, conv, err + 3.0, mask)
        return np.asarray(rel * np.abs(expected), dtype=np.float64)

    return condition


def _edge_zone(fam: _Family, case: Case, i: int = 0) -> NDArray[np.bool_]:
    """Entries whose kept-or-dropped decision sits within rounding of a band edge or cap: a
    correct candidate in the declared dtype may decide either way there."""
    conv = case.conventions
    call = case.calls[i]
    _, _, mask, params = _from_call(call, conv)
    level = fam.effective_level(conv)
    statistic, err = _statistic_error(level, call, conv)
    edges = _edges(fam.family, params, conv)[1:]
    if fam.family == "tis" or (fam.family == "ppo" and conv["above_cap"] == "clip"):
        edges = []  # truncation is continuous: no decision to take either way
    near = np.zeros(statistic.shape, dtype=bool)
    for e in edges:
        near |= np.abs(statistic - e) <= case.allowed(1.0, err + 2.0)
    # padding is never in the zone (filled with 0 whatever the padding value is)
    zone = _layout(fam, {**conv, "padding": "zero"}, near.astype(np.float64), mask)
    return np.asarray(zone > 0, dtype=np.bool_)


def _ignored(fam: _Family, case: Case, i: int = 0) -> NDArray[np.bool_]:
    """Output entries the conventions leave free (padding with ``padding='ignored'``)."""
    free: NDArray[np.bool_] = ~_valid(fam, case, i) & (case.conventions["padding"] == "ignored")
    return free


def _valid(fam: _Family, case: Case, i: int = 0) -> NDArray[np.bool_]:
    """Output entries that belong to real tokens (or to rows with a real token)."""
    conv = case.conventions
    _, _, mask, _ = _from_call(case.calls[i], conv)
    if fam.token_shaped(conv):
        if conv["layout"] == "packed":
            return np.ones(int(mask.sum()), dtype=np.bool_)
        return np.asarray(mask > 0, dtype=np.bool_)
    rows = np.asarray(mask.sum(axis=1) > 0, dtype=np.bool_)
    return rows[:, None] if conv["output"] == "B1" else rows


def _ratio(fam: _Family, case: Case, i: int = 0) -> Array:
    """The ratio that a kept entry's weight equals, in the output layout."""
    conv = dict(case.conventions)
    call = case.calls[i]
    _, _, mask, _ = _from_call(call, conv)
    level = fam.effective_level(conv)
    if fam.family == "mis" and conv["weight"] == "token":
        level = "token"
    elif fam.family == "mis" and conv["weight"] == "geometric":
        level = "geometric"
    statistic, _ = _statistic_error(level, call, conv)
    c = conv["log_ratio_clamp"]
    if c is not None and (level == "token" or conv.get("clamp_at") != "token"):
        statistic = np.clip(statistic, -c, c)
    with np.errstate(over="ignore"):
        ratio = np.exp(np.minimum(statistic, 709.0))
    if fam.family == "mis" and conv["weight"] == "indicator":
        ratio = np.ones_like(ratio)
    return _layout(fam, conv, ratio, mask)


# ---------------------------------------------------------------------------------------------
# the checks (typed functions)
# ---------------------------------------------------------------------------------------------


def _found(case: Case, i: int = 0) -> Array:
    out: Array = case.found[i]
    return out


def _shape_first(case: Case, i: int = 0) -> None:
    expected = case.expected(i)
    found = _found(case, i)
    layout = case.conventions.get("output", "token")
    assert found.shape == expected.shape, (
        f"the weights have shape {found.shape}; expected {expected.shape} "
        f"(layout {case.conventions.get('layout')!r}, output {layout!r}){_layout_hint(case)}"
    )


def _layout_hint(case: Case) -> str:
    """The output conventions that the found shape matches, as a hint (or "").

    Every layout the shape matches is named: with one token per row (``T = 1``) a ``(B, 1)``
    output is both ``'B1'`` and ``'BT'``, and the counterexample cannot tell them apart.
    """
    conv = case.conventions
    if "output" not in conv:
        return ""
    _, _, mask, _ = _from_call(case.calls[0], conv)
    shape = _found(case).shape
    rows = mask.shape[0]
    tokens = mask.shape if conv["layout"] == "padded" else (int(mask.sum()),)
    layouts = {"B": (rows,), "B1": (rows, 1), "BT": tokens}
    named = [k for k, v in layouts.items() if v == shape and k != conv["output"]]
    if not named:
        return ""
    other = ""
    if "BT" in named and "weight" in conv:
        other = (
            " (or conventions={'weight': 'token'} / conventions={'weight': 'geometric'} "
            "if a kept token gets its own or the geometric ratio)"
        )
    shown = " or ".join(f"conventions={{'output': {k!r}}}" for k in named)
    which = "that layout is" if len(named) == 1 else "one of these layouts is"
    return f": pass {shown}{other} if {which} intended"


def _agrees(fam: _Family) -> Callable[[Case], None]:
    def agrees_with_reference(case: Case) -> None:
        _shape_first(case)
        expected = case.expected()
        free = _ignored(fam, case) | _edge_zone(fam, case)
        case.show("found:   ", _found(case))
        case.show("expected:", expected)
        case.assert_close(_found(case), expected, case.condition(), "the weights", either=free)

    return agrees_with_reference


def _on_policy_one(fam: _Family) -> Callable[[Case], None]:
    def on_policy_weight_is_one(case: Case) -> None:
        _shape_first(case)
        conv = case.conventions
        d, mask = _log_ratio(case.calls[0], conv)
        zero = (d == 0) | (mask == 0)
        if fam.token_shaped(conv) and fam.level == "token":
            on = _layout(fam, conv, (d == 0).astype(np.float64), mask) > 0
        else:
            rows = (zero.all(axis=1) & (mask.sum(axis=1) > 0)).astype(np.float64)
            on = _layout(fam, conv, rows, mask) > 0
        on &= _valid(fam, case)
        w = _found(case)
        case.show("on-policy:", on)
        case.show("w:", w)
        assert np.all(w[on] == 1.0), f"entries with ratio exactly 1 got weights {w[on]}"

    return on_policy_weight_is_one


def _finite(fam: _Family) -> Callable[[Case], None]:
    def finite_and_non_negative(case: Case) -> None:
        w = _found(case)
        # a weight beyond the dtype's largest finite value can only be +inf there
        keep = ~_ignored(fam, case) & ~(np.abs(case.expected()) > largest_finite(case.dtype))
        w = w[keep] if keep.shape == w.shape else w
        case.show("w:", w)
        assert np.all(np.isfinite(w)), f"non-finite weights: {w[~np.isfinite(w)]}"
        assert np.all(w >= 0), f"negative weights: {w[w < 0]}"

    return finite_and_non_negative


def _at_padding(fam: _Family) -> Callable[[Case], None]:
    def zero_at_padding(case: Case) -> None:
        _shape_first(case)
        valid = _valid(fam, case)
        w = _found(case)
        value = _pad_value(case.conventions)
        case.show("valid:", valid)
        case.show("w:    ", w)
        pad = w[~valid]
        if np.all(pad == value):
            return
        other = 1.0 - value
        if np.all(pad == other):
            key = "one" if other == 1.0 else "zero"
            hint = (
                f": weights are {other:g} at padding: pass conventions={{'padding': '{key}'}} if "
                "that is intended"
            )
        else:
            hint = (
                ": pass conventions={'padding': 'ignored'} if the values at padding are never "
                "used (e.g. multiplied by the mask later)"
            )
        raise AssertionError(f"padding entries got weights {pad} instead of {value:g}{hint}")

    return zero_at_padding


def _not_at_ignored_padding(conv: Conventions) -> str | None:
    return (
        "padding='ignored' declares any value at padding" if conv["padding"] == "ignored" else None
    )


def _never_exceeds_cap(fam: _Family) -> Callable[[Case], None]:
    def never_exceeds_cap(case: Case) -> None:
        cap = case.calls[0][1]["cap"]
        if cap is None:
            return
        w = _found(case)
        w = w[~_ignored(fam, case)] if w.shape == _ignored(fam, case).shape else w
        limit = cap + case.slack(cap)
        case.show("w:", w, "cap:", cap)
        assert np.all(w <= limit), f"weights above the cap {cap}: {w[w > limit]}"

    return never_exceeds_cap


def _equals_ratio(fam: _Family) -> Callable[[Case], None]:
    def equals_ratio(case: Case) -> None:
        _shape_first(case)
        conv = case.conventions
        expected = case.expected()
        ratio = _ratio(fam, case)
        kept = (expected != 0) & _valid(fam, case) & ~_edge_zone(fam, case)
        if fam.family == "tis" or (fam.family == "ppo" and conv["above_cap"] == "clip"):
            # strictly between the truncation levels (PPO's cap may be None: no upper level)
            cap = case.calls[0][1]["cap"]
            low = conv["lower"] or 0.0
            kept &= ratio > low + case.slack(low)
            if cap is not None:
                kept &= ratio < cap - case.slack(cap)
        w = _found(case)
        case.show("ratio:", ratio)
        case.show("w:    ", w)
        case.assert_close(w[kept], ratio[kept], case.condition()[kept], "kept weights vs the ratio")

    return equals_ratio


def _zero_outside(fam: _Family) -> Callable[[Case], None]:
    def zero_outside_band(case: Case) -> None:
        _shape_first(case)
        expected = case.expected()
        dropped = (expected == 0) & _valid(fam, case) & ~_edge_zone(fam, case)
        w = _found(case)
        case.show("expected:", expected)
        case.show("w:       ", w)
        assert np.all(w[dropped] == 0.0), (
            f"entries outside the band got weights {w[dropped][w[dropped] != 0]} (dropped, "
            "not clipped, is the rule)"
        )

    return zero_outside_band


def _recast(call: Call, old: Conventions, new: Conventions) -> Call:
    """The call handed over under other ``inputs``/``layout`` conventions (same tokens)."""
    target, behavior, mask, params = _from_call(call, old)
    return _to_call(target, behavior, mask, params, new)


def _guesses(calls: list[Call], found: list[Any], conv: Conventions) -> dict[str, list[float]]:
    """A clamp ``c`` read off a weight ``e^±c``, a lower level off the smallest kept weight (or
    1): the values a framework's constant would have (rounded to 6 digits)."""
    w = np.asarray(found[0], dtype=np.float64).ravel()
    w = w[np.isfinite(w) & (w > 0)]
    clamps = sorted({float(f"{abs(math.log(x)):.6g}") for x in w if x != 1.0})
    # a level that drops what is below it (PPO's mask) lies above every dropped ratio and at
    # most the smallest kept weight (1 when nothing below 1 is kept, the largest level allowed)
    low = float(f"{w.min():.6g}") if w.size else 1.0
    return {"log_ratio_clamp": clamps[-3:], "lower": [min(low, 1.0)]}


def _excluded_rows(calls: list[Call], conv: Conventions) -> str | None:
    """The hint for a candidate that raises on an all-padding batch or row.

    An all-padding batch is also made of all-padding rows, so both conventions are named there:
    which one applies depends on whether a single all-padding row next to real ones raises too.
    """
    for call in calls:
        _, _, mask, _ = _from_call(call, conv)
        rows = mask.sum(axis=1)
        row = "conventions={'empty_rows': 'excluded'}"
        if conv["empty_batch"] == "drawn" and rows.sum() == 0:
            alternative = f" or {row} if a single all-padding row raises too"
            return (
                "the candidate raises where the batch is all padding: pass "
                "conventions={'empty_batch': 'excluded'} if only that raises"
                f"{alternative if conv['empty_rows'] == 'padding' else ''}"
            )
        if conv["empty_rows"] == "padding" and (rows == 0).any():
            return (
                f"the candidate raises where a row is all padding: pass {row} if your "
                "implementation requires a real token per row"
            )
    return None


def _weights_spec(name: str, fam: _Family, signature: str, checks: list[Check]) -> Spec:
    return Spec(
        name=name,
        reference={
            "tis": "truncated_is_weights",
            "mis": "masked_is_weights",
            "ppo": "decoupled_ppo_weights",
        }[fam.family],
        signature=signature,
        read=lambda raw, call, conv: ArrayBridge.to_numpy(raw),
        expected=_expected(fam),
        condition=_condition(fam),
        checks=tuple(checks),
        conventions=_conventions(fam.family, fam.level),
        recast=_recast,
        guesses=_guesses,
        raised_hint=_excluded_rows,
    )


def _common_checks(fam: _Family) -> list[Check]:
    return [
        Check(
            "agrees_with_reference",
            f"the weights agree with refimpl.{_reference_fn(fam).__name__} under the declared "
            "conventions (an entry within rounding of a band edge may be kept or dropped)",
            _mixed_calls(fam),
            _agrees(fam),
            small=_calls(fam, max_abs=1000.0),
        ),
        Check(
            "on_policy_weight_is_one",
            "an entry whose ratio is exactly 1 (a token, or every token of a sequence) gets "
            "weight 1",
            _calls(fam),
            _on_policy_one(fam),
        ),
    ]


def _tail_checks(fam: _Family) -> list[Check]:
    return [
        Check(
            "finite_and_non_negative",
            "weights are finite and >= 0, also for log-ratios of several hundred",
            _calls(fam, max_abs=1000.0),
            _finite(fam),
        ),
        Check(
            "zero_at_padding",
            "padding entries (and all-padding rows) get the declared padding value (0 by default)",
            _calls(fam),
            _at_padding(fam),
            applies=_not_at_ignored_padding,
        ),
    ]


def _tis(name: str, level: Level) -> Spec:
    fam = _Family("tis", level)
    return _weights_spec(
        name,
        fam,
        f"candidate(logp_target, logp_behavior, *, cap, mask) ({level} level)",
        [
            *_common_checks(fam),
            Check(
                "never_exceeds_cap",
                "no weight exceeds the cap C (beyond rounding of C to the dtype)",
                _calls(fam),
                _never_exceeds_cap(fam),
            ),
            Check(
                "equals_ratio_below_cap",
                "below the cap (and above a declared lower level) the weight is the ratio itself",
                _calls(fam),
                _equals_ratio(fam),
            ),
            *_tail_checks(fam),
        ],
    )


def _mis(name: str, level: Level) -> Spec:
    fam = _Family("mis", level)
    return _weights_spec(
        name,
        fam,
        f"candidate(logp_target, logp_behavior, *, low, high, mask) ({level} level)",
        [
            *_common_checks(fam),
            Check(
                "zero_outside_band",
                "a ratio outside [α, β] is dropped (weight 0), not clipped to the edge",
                _calls(fam),
                _zero_outside(fam),
            ),
            Check(
                "equals_ratio_inside_band",
                "inside [α, β] the weight is the ratio itself (or 1 with weight='indicator')",
                _calls(fam),
                _equals_ratio(fam),
            ),
            *_tail_checks(fam),
        ],
    )


def _ppo() -> Spec:
    fam = _Family("ppo", "token")
    return _weights_spec(
        "decoupled_ppo",
        fam,
        "candidate(logp_prox, logp_behavior, *, cap, mask) (cap may be None)",
        [
            *_common_checks(fam),
            Check(
                "zero_above_cap",
                "a weight above the cap is masked to 0 (with above_cap='mask'), not clipped",
                _calls(fam),
                _zero_outside(fam),
                applies=lambda c: "above_cap='clip'" if c["above_cap"] == "clip" else None,
            ),
            Check(
                "never_exceeds_cap",
                "no weight exceeds the cap C",
                _calls(fam),
                _never_exceeds_cap(fam),
            ),
            Check(
                "equals_ratio_up_to_cap",
                "a kept weight is the ratio π_prox/μ itself",
                _calls(fam),
                _equals_ratio(fam),
            ),
            *_tail_checks(fam),
        ],
    )


SPECS: tuple[Spec, ...] = (
    _tis("tis", "token"),
    _tis("tis_sequence", "sequence"),
    _tis("tis_geometric", "geometric"),
    _mis("masked_is", "token"),
    _mis("masked_is_sequence", "sequence"),
    _mis("masked_is_geometric", "geometric"),
    _ppo(),
)
