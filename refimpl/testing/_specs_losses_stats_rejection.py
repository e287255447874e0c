r"""Specs of the rejection statistics against refimpl.losses.rejection (value only).

``sequence_divergence`` (a sequence's sum, mean or max of a token KL estimator), ``any_token_veto``
(one token below the floor rejects its sequence), ``is_batch_normalize`` (weights divided by their
mean over the valid entries), ``off_policy_sequence_mask`` (DeepSeek-V3.2's OPSM) and
``m2po_mask`` (drop the largest squared log-ratios until the mean is below τ). A candidate is
called with the reference's signature: arrays positional, ``mask=`` and the thresholds keyword-only.

Derived tolerances: the log-ratio :math:`d = \log\pi - \log\mu` of float inputs rounds by
:math:`u(|\log\pi| + |\log\mu|)`; ``k1`` carries it, ``k2`` multiplies it by :math:`|d|`, ``k3``
by :math:`|e^d - 1|` (plus :math:`e^d + |d| + 1` for its own operations); a sum adds
``summation_factor`` times the sum of magnitudes. A decision (a veto, a kept sequence, a dropped
token) whose statistic is within that rounding of its threshold may go either way and is not
compared.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st
from numpy.typing import NDArray

from refimpl.losses.rejection import (
    any_token_veto,
    is_batch_normalize,
    m2po_mask,
    off_policy_sequence_mask,
    sequence_divergence,
)
from refimpl.testing._arrays import ArrayBridge
from refimpl.testing._engine import Call, Case, Check, Convention, Conventions, Spec
from refimpl.testing._specs_losses_stats import Array, Strategy, padding_mask
from refimpl.testing.tolerances import SAFETY, summation_factor

__all__ = ["rejection_specs"]

Bools = NDArray[np.bool_]

EMPTY_ROWS = Convention(
    "empty_rows",
    "drawn",
    ("drawn", "excluded"),
    "rows without a valid token: drawn (divergence 0, kept), or never drawn",
    who="excluded: verl 0.9.1 compute_rollout_rejection_mask (raises on an all-padding mask)",
)
ESTIMATOR = Convention(
    "estimator",
    "k1",
    ("k1", "k2", "k3"),
    "the token estimator: k1 = −d, k2 = d²/2, k3 = e^d − 1 − d (d = log π − log μ)",
    who="verl 0.9.1 rollout_corr_helper: seq_sum_k1 / seq_mean_k2 / seq_max_k3 …",
)
REDUCE = Convention(
    "reduce",
    "sum",
    ("sum", "mean", "max"),
    "how a sequence's valid tokens are reduced",
    who="sum, mean, max (k2, k3): verl 0.9.1 compute_rollout_rejection_mask",
)
CLAMP = Convention(
    "log_ratio_clamp",
    None,
    (None,),
    "c > 0: d is clipped to [−c, c] before the estimator",
    number=True,
    who="20: verl 0.9.1 (SAFETY_BOUND)",
)
UPPER = Convention(
    "upper",
    "absent",
    ("absent", "given", "only"),
    "'given': the candidate also rejects a sequence with a token ratio above upper= (drawn); "
    "'only': it is called with threshold=None and rejects only above upper= (no floor)",
    who="given: SkyRL 0.3.0 compute_outlier_token_mask (outlier_token_is_threshold_high); only: "
    "the same with outlier_token_is_threshold_low unset",
)
LEVEL = Convention(
    "level",
    "token",
    ("token", "sequence"),
    "the mean divided by: over valid tokens, or over non-empty sequences of their per-token mean",
    who="verl 0.9.1 rollout_is_batch_normalize with rollout_is='token' / 'sequence'",
)
STRICT = Convention(
    "strict",
    True,
    (True, False),
    "the kept mean of squared log-ratios must be < τ (True) or <= τ (False)",
    who="True: AReaL 1.0.4 _get_m2po_loss_mask",
)

GARBAGE = (-1e4, 5e3, -7.0, 0.0)

# ---------------------------------------------------------------------------------------------
# draws
# ---------------------------------------------------------------------------------------------


@st.composite
def _pair(
    draw: st.DrawFn,
    conv: Conventions,
    *,
    spread: float = 3.0,
    big: bool = False,
    empty: bool = True,
) -> tuple[Array, Array, Array]:
    """(logp_target, logp_behavior, mask) with garbage at padding."""
    batch, time = draw(st.integers(1, 4)), draw(st.integers(1, 7))
    low = 1 if (conv.get("empty_rows") == "excluded" or not empty) else 0
    lengths = np.asarray(
        draw(st.lists(st.integers(low, time), min_size=batch, max_size=batch)), dtype=np.int64
    )
    lengths[0] = max(int(lengths[0]), 1)
    mask = padding_mask(lengths, time)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    behavior = -rng.exponential(2.0, (batch, time))
    scale = draw(st.sampled_from([spread, spread / 10, spread / 1000]))
    d = rng.uniform(-scale, scale, (batch, time))
    if big:
        d = np.where(rng.random((batch, time)) < 0.3, rng.choice([25.0, -25.0], d.shape), d)
    target = behavior + d
    pad = rng.choice(GARBAGE, (batch, time))
    return np.where(mask > 0, target, pad), np.where(mask > 0, behavior, pad * 0.5), mask


def _regarbage(call: Call) -> Call:
    """The same call with other values at padding."""
    args, kwargs = call
    mask = np.asarray(kwargs["mask"])
    new = tuple(
        np.where(mask > 0, a, -3.0 * a - 11.0) if np.shape(a) == mask.shape else a for a in args
    )
    return new, dict(kwargs)


def _with_garbage(strategy: Strategy) -> Strategy:
    return lambda conv: strategy(conv).map(lambda calls: [*calls, _regarbage(calls[0])])


# ---------------------------------------------------------------------------------------------
# shared reading and checks
# ---------------------------------------------------------------------------------------------


def _found(case: Case, i: int, shape: tuple[int, ...]) -> Array:
    found = np.asarray(case.found[i], dtype=np.float64)
    assert found.shape == shape, f"output of shape {found.shape}, expected {shape}"
    return found


def _shape(case: Case, i: int) -> tuple[int, ...]:
    return tuple(np.shape(case.expected(i)))


def _exempt(case: Case, i: int) -> Bools:
    """Entries whose decision is within rounding of its threshold (set per spec by edge())."""
    edge = EDGES.get(case.spec.name)
    if edge is None:
        return np.zeros(_shape(case, i), dtype=np.bool_)
    return edge(case, i)


def _agrees(case: Case) -> None:
    for i in range(len(case.calls)):
        found = _found(case, i, _shape(case, i))
        case.show("found:   ", found)
        case.show("expected:", case.expected(i))
        case.assert_close(
            found, case.expected(i), case.condition(i), "the statistics", either=_exempt(case, i)
        )


def _padding_ignored(case: Case) -> None:
    """Other garbage at padding changes nothing (both calls agree with the reference)."""
    _agrees(case)
    a, b = np.asarray(case.found[0]), np.asarray(case.found[1])
    exempt = _exempt(case, 0) | _exempt(case, 1)
    free = np.abs(case.expected(0) - case.expected(1)) > 0
    bad = (a != b) & ~exempt & ~free
    same = case.close(a, b, case.condition(0)) | ~bad
    assert same.all(), f"changing only the padding changed {a[~same]} to {b[~same]}"


def _d(call: Call) -> tuple[Array, Array, Array]:
    (lt, lb, *_), kwargs = call
    x, y = np.asarray(lt, dtype=np.float64), np.asarray(lb, dtype=np.float64)
    mask = np.asarray(kwargs["mask"], dtype=np.float64)
    return np.where(mask > 0, x - y, 0.0), np.where(mask > 0, np.abs(x) + np.abs(y), 0.0), mask


def _value_spec(
    name: str,
    signature: str,
    expected: Callable[[Call, Conventions], Array],
    condition: Callable[[Call, Conventions, Any], Array],
    checks: list[Check],
    conventions: tuple[Convention, ...],
) -> Spec:
    return Spec(
        name=name,
        reference=f"losses.rejection.{name}",
        signature=signature,
        read=lambda raw, call, conv: ArrayBridge.to_numpy(raw),
        expected=expected,
        condition=condition,
        checks=tuple(checks),
        conventions=conventions,
    )


def _common(name: str, strategy: Strategy) -> list[Check]:
    return [
        Check(
            "values",
            f"the output agrees with refimpl.losses.rejection.{name} (a decision within rounding "
            "of its threshold may go either way)",
            strategy,
            _agrees,
        ),
        Check(
            "padding_ignored",
            "values at padding (garbage, large) change nothing",
            _with_garbage(strategy),
            _padding_ignored,
        ),
    ]


# ---------------------------------------------------------------------------------------------
# sequence_divergence
# ---------------------------------------------------------------------------------------------


def _div_calls(conv: Conventions) -> st.SearchStrategy[list[Call]]:
    big = conv["log_ratio_clamp"] is not None
    return _pair(conv, big=big).map(lambda p: [((p[0], p[1]), {"mask": p[2]})])


def _div_expected(call: Call, conv: Conventions) -> Array:
    (lt, lb), kwargs = call
    return sequence_divergence(
        lt,
        lb,
        estimator=conv["estimator"],
        reduce=conv["reduce"],
        mask=kwargs["mask"],
        log_ratio_clamp=conv["log_ratio_clamp"],
    )


def _token_terms(call: Call, conv: Conventions) -> tuple[Array, Array, Array]:
    """Per token: the estimator k, its rounding condition, and the mask."""
    d, size, mask = _d(call)
    c = conv["log_ratio_clamp"]
    d = d if c is None else np.clip(d, -c, c)
    err = size + np.abs(d) + 1.0
    est = conv["estimator"]
    if est == "k1":
        k, cond = -d, err
    elif est == "k2":
        k, cond = 0.5 * d * d, np.abs(d) * err + d * d
    else:
        e = np.exp(d)
        k, cond = e - 1.0 - d, np.abs(e - 1.0) * err + 2.0 * e + np.abs(d) + 2.0
    return np.where(mask > 0, k, 0.0), np.where(mask > 0, cond, 0.0), mask


def _div_condition(call: Call, conv: Conventions, expected: Any) -> Array:
    k, cond, mask = _token_terms(call, conv)
    n = mask.sum(axis=1)
    f = np.asarray([summation_factor(max(int(x), 1)) for x in n])
    out = np.abs(np.asarray(expected))
    if conv["reduce"] == "max":
        return np.asarray(cond.max(axis=1, initial=0.0) + out, dtype=np.float64)
    total = cond.sum(axis=1) + f * np.abs(k).sum(axis=1)
    if conv["reduce"] == "mean":
        total = total / np.maximum(n, 1.0) + out
    return np.asarray(total + out, dtype=np.float64)


def _doubled(call: Call) -> Call:
    """Each row's valid tokens twice, in a row twice as wide (the padding after them)."""
    (lt, lb), kwargs = call
    mask = np.asarray(kwargs["mask"])
    rows, width = mask.shape
    out_t, out_b = np.zeros((rows, 2 * width)), np.zeros((rows, 2 * width))
    n = mask.sum(axis=1).astype(int)
    for b in range(rows):
        out_t[b, : 2 * n[b]] = np.tile(np.asarray(lt)[b, : n[b]], 2)
        out_b[b, : 2 * n[b]] = np.tile(np.asarray(lb)[b, : n[b]], 2)
    return (out_t, out_b), {"mask": padding_mask(2 * n.astype(np.int64), 2 * width)}


def _div_length(case: Case) -> None:
    """Doubling each sequence (its tokens twice) doubles a sum and keeps a mean and a max."""
    one, two = _found(case, 0, _shape(case, 0)), _found(case, 1, _shape(case, 1))
    factor = 2.0 if case.conventions["reduce"] == "sum" else 1.0
    allowed = 2.0 * case.allowed(case.expected(1), case.condition(1))
    case.show("once:", one, "twice:", two)
    bad = np.abs(two - factor * one) > allowed
    assert not bad.any(), (
        f"a sequence repeated twice gave {two[bad].tolist()}, expected {factor:g} × "
        f"{one[bad].tolist()} (reduce={case.conventions['reduce']!r})"
    )


def _divergence() -> Spec:
    return _value_spec(
        "sequence_divergence",
        "candidate(logp_target, logp_behavior, *, mask) -> (B,) (estimator, reduce: conventions)",
        _div_expected,
        _div_condition,
        [
            *_common("sequence_divergence", _div_calls),
            Check(
                "length_scaling",
                "a sequence whose tokens are repeated twice has twice the sum, the same mean "
                "and the same max",
                lambda conv: _div_calls(conv).map(lambda c: [c[0], _doubled(c[0])]),
                _div_length,
            ),
            _empty_rows_check(0.0, _div_calls),
        ],
        (ESTIMATOR, REDUCE, CLAMP, EMPTY_ROWS),
    )


# ---------------------------------------------------------------------------------------------
# any_token_veto
# ---------------------------------------------------------------------------------------------


@st.composite
def _veto_call(draw: st.DrawFn, conv: Conventions, *, lone: bool = False) -> list[Call]:
    lt, lb, mask = draw(_pair(conv))
    tau = draw(st.sampled_from([0.5, 0.1, 0.9]))
    kwargs: dict[str, Any] = {"mask": mask, "threshold": None if conv["upper"] == "only" else tau}
    if conv["upper"] != "absent":
        kwargs["upper"] = draw(st.sampled_from([2.0, 10.0, 200.0]))
    if lone and conv["upper"] == "only":  # one token far above U, every other one far below 1
        lt = np.where(mask > 0, lb - 8.0, lt)
        _lone_token(draw, lt, lb, mask, math.log(kwargs["upper"]) + 2.0)
    elif lone:  # one token far below τ, every other one well above it (and below the ceiling)
        up = min(math.log(kwargs.get("upper", 200.0)), 6.0) * 0.5
        lt = np.where(mask > 0, lb + up, lt)
        _lone_token(draw, lt, lb, mask, math.log(tau) - 2.0)
    return [((lt, lb), kwargs)]


def _lone_token(draw: st.DrawFn, lt: Array, lb: Array, mask: Array, log_ratio: float) -> None:
    """Give one drawn valid token (if its row has one) the log-ratio ``log_ratio``, in place."""
    b = draw(st.integers(0, mask.shape[0] - 1))
    t = draw(st.integers(0, max(int(mask[b].sum()) - 1, 0)))
    if mask[b, t] > 0:
        lt[b, t] = lb[b, t] + log_ratio


def _veto_expected(call: Call, conv: Conventions) -> Array:
    (lt, lb), kwargs = call
    return any_token_veto(lt, lb, **kwargs)


def _veto_edge(case: Case, i: int) -> Bools:
    d, size, mask = _d(case.calls[i])
    _, kwargs = case.calls[i]
    zone = SAFETY * case.u * (size + np.abs(d) + 1.0)
    near = np.zeros(d.shape, dtype=np.bool_)
    if kwargs["threshold"] is not None:
        near |= np.abs(d - math.log(kwargs["threshold"])) <= zone
    if "upper" in kwargs:
        near |= np.abs(d - math.log(kwargs["upper"])) <= zone
    return np.asarray((near & (mask > 0)).any(axis=1), dtype=np.bool_)


def _veto_any(case: Case) -> None:
    found = _found(case, 0, _shape(case, 0))
    expected = case.expected()
    bad = (found != expected) & ~_exempt(case, 0)
    case.show("found:", found, "expected:", expected)
    assert not bad.any(), (
        f"rows {np.flatnonzero(bad).tolist()} with one token past a threshold (the others "
        f"well inside, or below 1 without a floor) got {found[bad].tolist()}, expected "
        f"{expected[bad].tolist()}: one token must veto its sequence, not the mean ratio, and "
        "without a floor no low ratio may"
    )


def _veto() -> Spec:
    calls: Strategy = lambda conv: _veto_call(conv)  # noqa: E731
    return _value_spec(
        "any_token_veto",
        "candidate(logp_target, logp_behavior, *, threshold, mask[, upper]) -> (B,) 1 = kept "
        "(threshold=None under upper='only')",
        _veto_expected,
        lambda call, conv, expected: np.zeros(np.shape(expected)),
        [
            *_common("any_token_veto", calls),
            Check(
                "any_token_vetoes",
                "a single token below the threshold rejects its sequence however high the "
                "others (and their mean) are; without a floor, a single token above the ceiling "
                "does, and tokens of ratio e^-8 do not",
                lambda conv: _veto_call(conv, lone=True),
                _veto_any,
            ),
            _on_policy_check(calls),
            _empty_rows_check(1.0, calls),
        ],
        (UPPER, EMPTY_ROWS),
    )


# ---------------------------------------------------------------------------------------------
# is_batch_normalize
# ---------------------------------------------------------------------------------------------


@st.composite
def _norm_call(draw: st.DrawFn, conv: Conventions) -> list[Call]:
    lt, lb, mask = draw(_pair(conv, spread=2.0))
    w = np.exp(np.clip(lt - lb, -30.0, 30.0))
    if conv["level"] == "sequence":  # one weight per sequence, on each of its tokens
        w = np.repeat(w[:, :1], w.shape[1], axis=1)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    w = np.where(mask > 0, w, rng.choice([0.0, 1e6, 3.0], w.shape))
    return [((w,), {"mask": mask})]


def _norm_expected(call: Call, conv: Conventions) -> Array:
    (w,), kwargs = call
    return is_batch_normalize(w, mask=kwargs["mask"], level=conv["level"])


def _norm_condition(call: Call, conv: Conventions, expected: Any) -> Array:
    _, kwargs = call
    n = int(np.asarray(kwargs["mask"]).sum())
    return np.asarray(np.abs(expected) * (summation_factor(max(n, 1)) + 4.0), dtype=np.float64)


def _norm_mean(case: Case) -> None:
    """The normalised weights have mean 1 over the valid entries (token), or over the non-empty
    sequences' per-token means (sequence)."""
    found = _found(case, 0, _shape(case, 0))
    _, kwargs = case.calls[0]
    mask = np.asarray(kwargs["mask"])
    if not (case.expected() > 0).any():
        return
    if case.conventions["level"] == "sequence":
        n = mask.sum(axis=1)
        rows = n > 0
        mean = float(((found * mask).sum(axis=1)[rows] / n[rows]).mean())
    else:
        mean = float((found * mask).sum() / mask.sum())
    allowed = float(case.allowed(case.expected(), case.condition()).max()) + case.u * (
        summation_factor(int(mask.sum())) + 2.0
    )
    case.show("mean:", mean, "allowed:", allowed)
    assert abs(mean - 1.0) <= allowed, (
        f"the normalised weights have mean {mean} over the valid entries, not 1 (a mean over "
        "the padded count, or padding in the sum, moves it)"
    )


def _normalize() -> Spec:
    calls: Strategy = lambda conv: _norm_call(conv)  # noqa: E731
    return _value_spec(
        "is_batch_normalize",
        "candidate(w, *, mask) -> (B, T) (level: a convention)",
        _norm_expected,
        _norm_condition,
        [
            *_common("is_batch_normalize", calls),
            Check(
                "valid_mean_is_one",
                "the result has mean 1 over the valid entries (the divisor counts valid entries, "
                "not the padded width)",
                calls,
                _norm_mean,
            ),
            Check(
                "scale_invariance",
                "multiplying every weight by one constant leaves the result unchanged",
                lambda conv: _norm_call(conv).map(
                    lambda c: [c[0], ((c[0][0][0] * 8.0,), dict(c[0][1]))]
                ),
                _scale_invariant,
            ),
        ],
        (LEVEL, EMPTY_ROWS),
    )


# ---------------------------------------------------------------------------------------------
# off_policy_sequence_mask
# ---------------------------------------------------------------------------------------------


@st.composite
def _opsm_call(draw: st.DrawFn, conv: Conventions) -> list[Call]:
    lt, lb, mask = draw(_pair(conv, spread=1.0))
    rows = mask.shape[0]
    advantages = np.asarray(
        draw(st.lists(st.sampled_from([-1.0, 0.0, 1.0, -0.5, 2.0]), min_size=rows, max_size=rows))
    )
    delta = draw(st.sampled_from([0.5, 0.1, 0.0]))
    return [((lt, lb, advantages), {"mask": mask, "delta": delta})]


def _opsm_expected(call: Call, conv: Conventions) -> Array:
    (lt, lb, a), kwargs = call
    return off_policy_sequence_mask(lt, lb, a, **kwargs)


def _opsm_edge(case: Case, i: int) -> Bools:
    d, size, mask = _d(case.calls[i])
    _, kwargs = case.calls[i]
    n = mask.sum(axis=1)
    f = np.asarray([summation_factor(max(int(x), 1)) for x in n])
    mean = -d.sum(axis=1) / np.maximum(n, 1.0)
    zone = SAFETY * case.u * (((size + np.abs(d)).sum(axis=1)) * f / np.maximum(n, 1.0) + 1.0)
    return np.asarray(np.abs(mean - kwargs["delta"]) <= zone, dtype=np.bool_)


def _opsm_keeps(case: Case) -> None:
    found = _found(case, 0, _shape(case, 0))
    (_, _, a), _ = case.calls[0]
    positive = np.asarray(a) >= 0
    case.show("advantages:", a, "kept:", found)
    assert np.all(found[positive] == 1.0), (
        f"sequences with advantage >= 0 were dropped: {np.flatnonzero(positive & (found != 1))}"
    )


def _opsm() -> Spec:
    calls: Strategy = lambda conv: _opsm_call(conv)  # noqa: E731
    return _value_spec(
        "off_policy_sequence_mask",
        "candidate(logp_target, logp_behavior, advantages, *, delta, mask) -> (B,) 1 = kept",
        _opsm_expected,
        lambda call, conv, expected: np.zeros(np.shape(expected)),
        [
            *_common("off_policy_sequence_mask", calls),
            Check(
                "keeps_non_negative_advantages",
                "a sequence with advantage >= 0 is always kept",
                calls,
                _opsm_keeps,
            ),
            _on_policy_check(calls),
            _empty_rows_check(1.0, calls),
        ],
        (EMPTY_ROWS,),
    )


# ---------------------------------------------------------------------------------------------
# m2po_mask
# ---------------------------------------------------------------------------------------------


@st.composite
def _m2po_call(draw: st.DrawFn, conv: Conventions) -> list[Call]:
    lt, lb, mask = draw(_pair(conv, spread=0.6))
    tau = draw(st.sampled_from([0.04, 0.01, 0.1]))
    return [((lt, lb), {"mask": mask, "tau": tau})]


def _m2po_expected(call: Call, conv: Conventions) -> Array:
    (lt, lb), kwargs = call
    return m2po_mask(lt, lb, strict=conv["strict"], **kwargs)


def _v_error(case: Case, i: int) -> tuple[Array, Array, Array]:
    """Squared log-ratios, their rounding bound, the mask."""
    d, size, mask = _d(case.calls[i])
    v = d * d
    return v, SAFETY * case.u * (2.0 * np.abs(d) * (size + np.abs(d)) + v), mask


def _m2po_counts(case: Case, i: int) -> tuple[int, int]:
    """The fewest and most tokens a correct candidate may drop (τ moved by the mean's rounding)."""
    v, err, mask = _v_error(case, i)
    n = int(mask.sum())
    slack = float(err.max(initial=0.0)) + SAFETY * case.u * summation_factor(max(n, 1)) * float(
        v.max(initial=0.0)
    )
    (lt, lb), kwargs = case.calls[i]
    tau = float(kwargs["tau"])
    strict = case.conventions["strict"]
    few = m2po_mask(lt, lb, mask=mask, tau=tau + slack, strict=strict)
    many = m2po_mask(lt, lb, mask=mask, tau=max(tau - slack, 1e-300), strict=strict)
    return n - int(few.sum()), n - int(many.sum())


def _m2po_edge(case: Case, i: int) -> Bools:
    """Tokens whose square is within rounding of the boundary between kept and dropped."""
    v, err, mask = _v_error(case, i)
    expected = case.expected(i)
    valid = mask > 0
    kept, dropped = valid & (expected > 0), valid & (expected == 0)
    if not dropped.any() or not kept.any():
        return np.zeros(mask.shape, dtype=np.bool_)
    lo_count, hi_count = _m2po_counts(case, i)
    order = np.sort(v[valid])[::-1]
    top = order[max(lo_count - 1, 0)]
    bottom = order[min(hi_count, order.size - 1)]
    e = float(err.max())
    return np.asarray(valid & (v >= bottom - 2 * e) & (v <= top + 2 * e), dtype=np.bool_)


def _m2po_largest_first(case: Case) -> None:
    """Every dropped token's square is at least every kept token's (within rounding)."""
    found = _found(case, 0, _shape(case, 0))
    v, err, mask = _v_error(case, 0)
    valid = mask > 0
    dropped, kept = valid & (found == 0), valid & (found == 1)
    assert np.all(found[~valid] == 0), "padding tokens were kept"
    if dropped.any() and kept.any():
        low, high = float(v[dropped].min()), float(v[kept].max())
        e = 2.0 * float(err.max())
        case.show("smallest dropped:", low, "largest kept:", high)
        assert low >= high - e, (
            f"a token with squared log-ratio {low} was dropped while one with {high} was kept: "
            "M2PO drops the largest first"
        )
    few, many = _m2po_counts(case, 0)
    count = int(dropped.sum())
    assert few <= count <= many, (
        f"{count} tokens dropped; the fewest that bring the mean below τ is {few}"
        + (f" (up to {many} within rounding)" if many != few else "")
    )


def _m2po() -> Spec:
    calls: Strategy = lambda conv: _m2po_call(conv)  # noqa: E731
    return _value_spec(
        "m2po_mask",
        "candidate(logp_target, logp_behavior, *, tau, mask) -> (B, T) 1 = kept",
        _m2po_expected,
        lambda call, conv, expected: np.zeros(np.shape(expected)),
        [
            *_common("m2po_mask", calls),
            Check(
                "drops_the_fewest_largest_first",
                "the dropped tokens are the largest squared log-ratios, and no more of them than "
                "bring the kept mean below τ",
                calls,
                _m2po_largest_first,
            ),
            _on_policy_check(calls),
        ],
        (STRICT, EMPTY_ROWS),
    )


# ---------------------------------------------------------------------------------------------
# invariants shared by several statistics
# ---------------------------------------------------------------------------------------------


def _on_policy(strategy: Strategy) -> Strategy:
    """The drawn calls with π = μ on every valid token (log-ratio exactly 0)."""

    def same(call: Call) -> Call:
        (lt, lb, *rest), kwargs = call
        mask = np.asarray(kwargs["mask"])
        return (np.where(mask > 0, lb, lt), lb, *rest), dict(kwargs)

    return lambda conv: strategy(conv).map(lambda calls: [same(c) for c in calls])


def _all_kept(case: Case) -> None:
    found = _found(case, 0, _shape(case, 0))
    _, kwargs = case.calls[0]
    mask = np.asarray(kwargs["mask"])
    valid = mask > 0 if found.shape == mask.shape else np.ones(found.shape, dtype=np.bool_)
    case.show("kept:", found)
    assert np.all(found[valid] == 1.0), (
        f"with π = μ on every token (log-ratio 0) entries {np.argwhere(valid & (found != 1)).tolist()}"
        " were rejected; they must all be kept"
    )


def _on_policy_check(strategy: Strategy) -> Check:
    return Check(
        "on_policy_is_kept",
        "with π = μ on every token (log-ratio exactly 0) everything is kept",
        _on_policy(strategy),
        _all_kept,
    )


def _empty_rows_check(value: float, strategy: Strategy) -> Check:
    def empty_rows(case: Case) -> None:
        found = _found(case, 0, _shape(case, 0))
        _, kwargs = case.calls[0]
        empty = np.asarray(kwargs["mask"]).sum(axis=1) == 0
        case.show("empty rows:", empty, "found:", found)
        assert np.all(found[empty] == value), (
            f"rows without a valid token got {found[empty].tolist()}, expected {value:g}"
        )

    return Check(
        "empty_rows",
        f"a row without a valid token gets {value:g}",
        lambda conv: strategy(conv).map(lambda calls: [_pad_row(calls[0])]),
        empty_rows,
        applies=lambda conv: (
            "empty_rows='excluded' is declared" if conv["empty_rows"] == "excluded" else None
        ),
    )


def _pad_row(call: Call) -> Call:
    """Append an all-padding row (garbage values; advantage −1) to a call."""
    args, kwargs = call
    mask = np.asarray(kwargs["mask"])
    grown: list[Array] = []
    for a in args:
        a = np.asarray(a, dtype=np.float64)
        row = np.full((1, *a.shape[1:]), -4.0 - len(grown)) if a.ndim == 2 else np.asarray([-1.0])
        grown.append(np.concatenate([a, row]))
    return tuple(grown), {**kwargs, "mask": np.concatenate([mask, np.zeros((1, mask.shape[1]))])}


def _scale_invariant(case: Case) -> None:
    a, b = _found(case, 0, _shape(case, 0)), _found(case, 1, _shape(case, 1))
    allowed = case.allowed(case.expected(0), case.condition(0)) + case.allowed(
        case.expected(1), case.condition(1)
    )
    allowed = allowed + np.abs(case.expected(1) - case.expected(0))
    bad = np.abs(a - b) > allowed
    case.show("w:", a, "c·w:", b)
    assert not bad.any(), f"scaling every weight changed {a[bad].tolist()} to {b[bad].tolist()}"


EDGES: dict[str, Callable[[Case, int], Bools]] = {
    "any_token_veto": _veto_edge,
    "off_policy_sequence_mask": _opsm_edge,
    "m2po_mask": _m2po_edge,
}


def rejection_specs() -> list[Spec]:
    """The rejection statistics' specs (value only)."""
    return [_divergence(), _veto(), _normalize(), _opsm(), _m2po()]
