r"""The spec ``divergence_rejection_mask``: a 0/1 keep mask on a token's or a sequence's KL
estimator statistic, against :func:`refimpl.losses.rejection.divergence_rejection_mask`.

A candidate is called as ``candidate(logp_target, logp_behavior, *, upper, mask[, lower])`` and
returns the (B, T) keep mask (1 = kept, 0 = rejected or padding); the estimator (k1/k2/k3), the
reduction (token, or a sequence's sum/mean/max) and a clamp of the log-ratio are conventions.
Value only: the mask multiplies a loss mask.

Derived tolerances: the statistic's rounding is ``sequence_divergence``'s (per token
:math:`u(|\log\pi| + |\log\mu|)` carried by the estimator, a sum adding ``summation_factor``
times its magnitudes). A unit whose statistic is within ``SAFETY`` times that rounding of a bound
may be kept or rejected: both outcomes are accepted there, and only there.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st
from numpy.typing import NDArray

from refimpl.losses.rejection import divergence_rejection_mask, sequence_divergence
from refimpl.testing._arrays import ArrayBridge
from refimpl.testing._engine import Call, Case, Check, Convention, Conventions, Spec
from refimpl.testing._specs_losses_stats import Array
from refimpl.testing._specs_losses_stats_rejection import (
    CLAMP,
    EMPTY_ROWS,
    ESTIMATOR,
    _div_condition,
    _pair,
    _token_terms,
)
from refimpl.testing.tolerances import SAFETY

__all__ = ["rejection_mask_specs"]

Bools = NDArray[np.bool_]

REDUCE = Convention(
    "reduce",
    "token",
    ("token", "sum", "mean", "max"),
    "the statistic: each token's estimator, or a sequence's sum, mean or max of it (the "
    "sequence's decision on each of its valid tokens)",
    who="verl 0.9.1 compute_rollout_rejection_mask: token_k*, seq_sum_k*, seq_mean_k*, seq_max_k*",
)
LOWER = Convention(
    "lower",
    "absent",
    ("absent", "given"),
    "'given': the candidate also takes lower= and keeps only statistics >= lower (drawn)",
    who="given: verl 0.9.1 k1 options (bounds log lo, log hi on −d); k2/k3 take only an upper bound",
)


@st.composite
def _calls(draw: st.DrawFn, conv: Conventions, *, exact: bool = False) -> list[Call]:
    """One call: log-probs with garbage at padding, an upper bound (and a lower one)."""
    lt, lb, mask = draw(_pair(conv, big=conv["log_ratio_clamp"] is not None))
    if exact:  # dyadic log-ratios: k1, k2 and their sums and maxes are exact in float64
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        lb = np.where(mask > 0, -rng.integers(0, 64, lb.shape) / 8.0, lb)
        lt = np.where(mask > 0, lb + rng.integers(-24, 25, lb.shape) / 8.0, lt)
    stat = _statistic(lt, lb, mask, conv)
    valid = stat[mask > 0]
    if conv["estimator"] != "k1":  # k2, k3 >= 0: a positive bound (verl refuses others)
        valid = valid[valid > 0]
    kwargs: dict[str, Any] = {"mask": mask}
    if exact and valid.size:  # a bound exactly at a drawn unit's statistic (else 0.125)
        kwargs["upper"] = float(valid[draw(st.integers(0, valid.size - 1))])
    else:
        quantile = draw(st.sampled_from([0.0, 0.3, 0.5, 0.8, 1.0]))
        kwargs["upper"] = float(np.quantile(valid, quantile)) if valid.size else 0.125
        kwargs["upper"] += draw(st.sampled_from([0.0, 1e-3, -1e-3, 0.25]))
        if conv["estimator"] != "k1":
            kwargs["upper"] = max(kwargs["upper"], 1e-3)
    if conv["lower"] == "given":
        below = draw(st.sampled_from([0.0, 0.5, 2.0, 1e-3]))
        kwargs["lower"] = kwargs["upper"] - below if not exact else kwargs["upper"]
    return [((lt, lb), kwargs)]


def _statistic(lt: Array, lb: Array, mask: Array, conv: Conventions) -> Array:
    """The reference's statistic broadcast to (B, T)."""
    if conv["reduce"] == "token":
        k, _, _ = _token_terms(((lt, lb), {"mask": mask}), conv)
        return k
    seq = sequence_divergence(
        lt,
        lb,
        estimator=conv["estimator"],
        reduce=conv["reduce"],
        mask=mask,
        log_ratio_clamp=conv["log_ratio_clamp"],
    )
    return np.broadcast_to(seq[:, None], mask.shape)


def _expected(call: Call, conv: Conventions) -> Array:
    (lt, lb), kwargs = call
    return divergence_rejection_mask(
        lt,
        lb,
        estimator=conv["estimator"],
        reduce=conv["reduce"],
        log_ratio_clamp=conv["log_ratio_clamp"],
        **kwargs,
    )


def _edge(case: Case, i: int) -> Bools:
    """Units whose statistic is within rounding of a bound (either decision is accepted)."""
    call = case.calls[i]
    (lt, lb), kwargs = call
    conv = case.conventions
    mask = np.asarray(kwargs["mask"], dtype=np.float64)
    stat = _statistic(np.asarray(lt), np.asarray(lb), mask, conv)
    if conv["reduce"] == "token":
        _, cond, _ = _token_terms(call, conv)
        cond = cond + np.abs(stat)
    else:
        seq = _div_condition(call, conv, stat[:, 0])
        cond = np.broadcast_to(seq[:, None], mask.shape)
    zone = SAFETY * case.u * cond
    near = np.zeros(mask.shape, dtype=np.bool_)
    for key in ("upper", "lower"):
        if key in kwargs:
            with np.errstate(invalid="ignore"):
                near |= np.abs(stat - kwargs[key]) <= zone
    return near & (mask > 0)


def _found(case: Case, i: int) -> Array:
    found = np.asarray(case.found[i], dtype=np.float64)
    shape = np.shape(case.expected(i))
    assert found.shape == shape, f"output of shape {found.shape}, expected {shape}"
    return found


def _agrees(case: Case) -> None:
    for i in range(len(case.calls)):
        found, expected = _found(case, i), case.expected(i)
        case.show("found:   ", found, "expected:", expected)
        bad = (found != expected) & ~_edge(case, i)
        assert not bad.any(), (
            f"kept {found[bad].tolist()} where the reference keeps {expected[bad].tolist()} "
            f"(upper={case.calls[i][1]['upper']!r}, lower={case.calls[i][1].get('lower')!r})"
        )


def _padding_ignored(case: Case) -> None:
    """Other garbage at padding changes nothing; padding is 0."""
    _agrees(case)
    mask = np.asarray(case.calls[0][1]["mask"])
    a, b = _found(case, 0), _found(case, 1)
    assert np.all(a[mask == 0] == 0.0), f"padding got {a[mask == 0].tolist()}, expected 0"
    bad = (a != b) & ~_edge(case, 0) & ~_edge(case, 1)
    assert not bad.any(), f"changing only the padding changed {a[bad]} to {b[bad]}"


def _with_garbage(calls: list[Call]) -> list[Call]:
    (lt, lb), kwargs = calls[0]
    mask = np.asarray(kwargs["mask"])
    regarbage = tuple(np.where(mask > 0, x, -3.0 * x - 11.0) for x in (lt, lb))
    return [calls[0], (regarbage, dict(kwargs))]


def _bound_kept(case: Case) -> None:
    """A unit whose statistic equals the bound exactly is kept (both bounds inclusive)."""
    found, expected = _found(case, 0), case.expected(0)
    case.show("found:", found, "expected:", expected)
    bad = found != expected
    assert not bad.any(), (
        f"a statistic equal to the bound upper={case.calls[0][1]['upper']!r} got "
        f"{found[bad].tolist()}, expected {expected[bad].tolist()}: the bounds are inclusive"
    )


def _inexact(conv: Conventions) -> str | None:
    if conv["estimator"] == "k3":
        return "k3 = e^d − 1 − d is not exact in float64"
    if conv["reduce"] == "mean":
        return "a mean divides by the count (not exact in float64)"
    return None


def _empty_rows(case: Case) -> None:
    found = _found(case, 0)
    mask = np.asarray(case.calls[0][1]["mask"])
    empty = mask.sum(axis=1) == 0
    assert np.all(found[empty] == 0.0), f"rows without a valid token got {found[empty].tolist()}"
    _agrees(case)


def _pad_row(calls: list[Call]) -> list[Call]:
    (lt, lb), kwargs = calls[0]
    mask = np.asarray(kwargs["mask"])
    grow = [
        np.concatenate([np.asarray(x), np.full((1, mask.shape[1]), v)])
        for x, v in ((lt, -4.0), (lb, 9.0))
    ]
    new_mask = np.concatenate([mask, np.zeros((1, mask.shape[1]))])
    return [((grow[0], grow[1]), {**kwargs, "mask": new_mask})]


def _spec() -> Spec:
    return Spec(
        name="divergence_rejection_mask",
        reference="losses.rejection.divergence_rejection_mask",
        signature="candidate(logp_target, logp_behavior, *, upper, mask[, lower]) -> (B, T) "
        "1 = kept (estimator, reduce, log_ratio_clamp: conventions)",
        read=lambda raw, call, conv: ArrayBridge.to_numpy(raw),
        expected=_expected,
        condition=lambda call, conv, expected: np.zeros(np.shape(expected)),
        checks=(
            Check(
                "values",
                "the mask agrees with refimpl.losses.rejection.divergence_rejection_mask (a unit "
                "whose statistic is within rounding of a bound may go either way)",
                lambda conv: _calls(conv),
                _agrees,
            ),
            Check(
                "padding_ignored",
                "values at padding (garbage, large) change nothing; padding is 0",
                lambda conv: _calls(conv).map(_with_garbage),
                _padding_ignored,
            ),
            Check(
                "bound_inclusive",
                "a unit whose statistic equals a bound exactly (dyadic log-ratios) is kept",
                lambda conv: _calls(conv, exact=True),
                _bound_kept,
                applies=_inexact,
            ),
            Check(
                "empty_rows",
                "a row without a valid token is all 0",
                lambda conv: _calls(conv).map(_pad_row),
                _empty_rows,
                applies=lambda conv: (
                    "empty_rows='excluded' is declared"
                    if conv["empty_rows"] == "excluded"
                    else None
                ),
            ),
        ),
        conventions=(ESTIMATOR, REDUCE, LOWER, CLAMP, EMPTY_ROWS),
    )


def rejection_mask_specs() -> list[Spec]:
    """The rejection-mask spec (value only)."""
    return [_spec()]
