"""Properties of refimpl.losses.rejection.divergence_rejection_mask (verl's rollout rejection).

Hand-worked masks on dyadic log-ratios (k1 and k2 statistics exact in float64, so a bound equal
to a statistic tests inclusiveness), agreement with an independent torch transcription of the
rule on Hypothesis-drawn batches, and properties each run against a deliberately wrong variant.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from _wrong_variants import rejects, run_property
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy.typing import NDArray

import refimpl
import refimpl.losses.rejection as R
from refimpl.errors import InvalidArgument

Array = NDArray[np.float64]
Mask = Callable[..., Array]

ESTIMATORS = ("k1", "k2", "k3")
REDUCES = ("token", "sum", "mean", "max")

# d = log π − log μ by rows; the last token of row 1 is padding (its 3.0 must not count)
D = np.array([[0.5, -0.25, 1.0], [-0.5, 0.0, 3.0]])
M = np.array([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])

# ---------------------------------------------------------------------------------------------
# strategies
# ---------------------------------------------------------------------------------------------

LOGP = st.one_of(
    st.sampled_from([0.0, -0.5, -1.0, -3.0, -25.0]),
    st.floats(-30.0, 0.0, allow_nan=False, allow_subnormal=False),
)


@st.composite
def batches(draw: st.DrawFn) -> tuple[Array, Array, Array]:
    """``(logp_target, logp_behavior, mask)`` of shape (B, T); padding holds garbage."""
    shape = draw(st.tuples(st.integers(1, 4), st.integers(1, 6)))
    a = draw(hnp.arrays(np.float64, shape, elements=LOGP))
    b = draw(hnp.arrays(np.float64, shape, elements=LOGP))
    m = draw(hnp.arrays(np.bool_, shape)).astype(np.float64)
    garbage = draw(st.sampled_from([0.0, 1e6, -7.0]))
    return np.where(m > 0, a, garbage), np.where(m > 0, b, -garbage), m


OPTIONS = st.tuples(
    st.sampled_from(ESTIMATORS),
    st.sampled_from(REDUCES),
    st.sampled_from([0.0, 0.001, 0.125, 1.0, 4.0, 30.0]),
    st.sampled_from([None, -2.0, -0.125, 0.0]),
    st.sampled_from([None, 20.0]),
)


def _torch_mask(
    a: Array,
    b: Array,
    m: Array,
    *,
    estimator: str,
    reduce: str,
    upper: float,
    lower: float | None,
    log_ratio_clamp: float | None,
) -> tuple[Array, Array]:
    """An independent transcription: (keep mask, statistic broadcast to (B, T))."""
    d = torch.tensor(a, dtype=torch.float64) - torch.tensor(b, dtype=torch.float64)
    mt = torch.tensor(m, dtype=torch.float64)
    d = torch.where(mt > 0, d, torch.zeros_like(d))
    if log_ratio_clamp is not None:
        d = d.clamp(-log_ratio_clamp, log_ratio_clamp)
    k = {"k1": -d, "k2": 0.5 * d * d, "k3": torch.expm1(d) - d}[estimator]
    if reduce == "token":
        s = k
    else:
        n = mt.sum(-1)
        if reduce == "sum":
            r = (k * mt).sum(-1)
        elif reduce == "mean":
            r = torch.where(n > 0, (k * mt).sum(-1) / n.clamp(min=1.0), torch.zeros_like(n))
        else:
            top = k.masked_fill(mt == 0, -math.inf).max(-1).values
            r = torch.where(n > 0, top, torch.zeros_like(n))
        s = r[:, None].expand_as(k)
    lo = -math.inf if lower is None else lower
    keep = (s >= lo) & (s <= upper) & (mt > 0)
    return keep.double().numpy(), s.numpy()


# ---------------------------------------------------------------------------------------------
# wrong variants
# ---------------------------------------------------------------------------------------------


def strict_upper(a: Any, b: Any, **kw: Any) -> Array:
    """Wrong: keeps statistic < upper (verl keeps <=)."""
    at_bound = R.divergence_rejection_mask(a, b, **kw)
    shifted = dict(kw, upper=float(np.nextafter(kw["upper"], -math.inf)))
    if kw.get("lower") is not None and shifted["upper"] < kw["lower"]:
        return np.zeros_like(at_bound)
    return R.divergence_rejection_mask(a, b, **shifted)


def keeps_above(a: Any, b: Any, **kw: Any) -> Array:
    """Wrong: keeps the statistics above the bound instead of below."""
    kept = R.divergence_rejection_mask(a, b, **kw)
    m = np.ones_like(kept) if kw.get("mask") is None else np.asarray(kw["mask"], float)
    return np.asarray((1.0 - kept) * m, dtype=np.float64)


def padding_counts(a: Any, b: Any, **kw: Any) -> Array:
    """Wrong: the statistic reads padding tokens; only the output is masked afterwards."""
    m = kw.pop("mask", None)
    kept = R.divergence_rejection_mask(a, b, **kw)
    return kept if m is None else np.asarray(kept * np.asarray(m, float), dtype=np.float64)


def k3_wrong_sign(a: Any, b: Any, **kw: Any) -> Array:
    """Wrong: k3 as e^d − 1 + d."""
    if kw["estimator"] != "k3" or kw["reduce"] != "token":
        return R.divergence_rejection_mask(a, b, **kw)
    d = np.asarray(a, float) - np.asarray(b, float)
    m = np.ones_like(d) if kw.get("mask") is None else np.asarray(kw["mask"], float)
    with np.errstate(over="ignore"):
        s = np.expm1(d) + d
    return np.asarray((s <= kw["upper"]) & (m > 0), dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# exact values
# ---------------------------------------------------------------------------------------------

# d = [[0.5, -0.25, 1.0], [-0.5, 0.0, pad]]:
#   k1 = [[-0.5, 0.25, -1.0], [0.5, 0]]: sums −1.25, 0.5; means −5/12, 0.25; maxes 0.25, 0.5
#   k2 = [[0.125, 0.03125, 0.5], [0.125, 0]]: sums 0.65625, 0.125; means 0.21875, 0.0625
#   k3 = [[0.1487, 0.0288, 0.7183], [0.1065, 0]]: sums 0.8958, 0.1065; means 0.2986, 0.0533
BY_HAND = [
    ("k2", "token", 0.125, None, [[1, 1, 0], [1, 1, 0]]),
    ("k2", "sum", 0.125, None, [[0, 0, 0], [1, 1, 0]]),
    ("k2", "mean", 0.0625, None, [[0, 0, 0], [1, 1, 0]]),
    ("k2", "max", 0.5, None, [[1, 1, 1], [1, 1, 0]]),
    ("k1", "token", 0.25, -0.5, [[1, 1, 0], [0, 1, 0]]),
    ("k1", "sum", 0.0, -1.25, [[1, 1, 1], [0, 0, 0]]),
    ("k1", "mean", 0.25, -0.25, [[0, 0, 0], [1, 1, 0]]),
    ("k1", "max", 0.25, None, [[1, 1, 1], [0, 0, 0]]),
    ("k3", "token", 0.1, None, [[0, 1, 0], [0, 1, 0]]),
    ("k3", "sum", 0.2, None, [[0, 0, 0], [1, 1, 0]]),
    ("k3", "mean", 0.06, None, [[0, 0, 0], [1, 1, 0]]),
    ("k3", "max", 0.7, None, [[0, 0, 0], [1, 1, 0]]),
]


@pytest.mark.parametrize(("estimator", "reduce", "upper", "lower", "expected"), BY_HAND)
def test_divergence_rejection_mask_by_hand(
    estimator: str, reduce: str, upper: float, lower: float | None, expected: list[list[int]]
) -> None:
    found = refimpl.divergence_rejection_mask(
        D,
        np.zeros_like(D),
        estimator=estimator,  # type: ignore[arg-type]
        reduce=reduce,  # type: ignore[arg-type]
        upper=upper,
        lower=lower,
        mask=M,
    )
    assert found.dtype == np.float64
    assert found.tolist() == expected


def test_clamp_and_overflow() -> None:
    d = np.array([[800.0, 0.0]])
    # k3 of 800 exceeds float64: rejected by any finite bound; clipped to 20 it is e^20 − 21
    assert R.divergence_rejection_mask(
        d, np.zeros_like(d), estimator="k3", reduce="token", upper=1e300
    ).tolist() == [[0.0, 1.0]]
    bound = math.exp(20.0) - 21.0
    kept = R.divergence_rejection_mask(
        d, np.zeros_like(d), estimator="k3", reduce="max", upper=bound, log_ratio_clamp=20.0
    )
    assert kept.tolist() == [[1.0, 1.0]]
    # k2 of a clipped 30 is 200: kept at 200, rejected just below
    d = np.array([[-30.0]])
    for upper, want in ((200.0, 1.0), (199.9, 0.0)):
        got = R.divergence_rejection_mask(
            d, np.zeros_like(d), estimator="k2", reduce="sum", upper=upper, log_ratio_clamp=20.0
        )
        assert got.tolist() == [[want]]


def test_empty_rows_are_zero() -> None:
    d = np.array([[5.0, 5.0], [0.0, 0.0]])
    m = np.array([[0.0, 0.0], [1.0, 0.0]])
    for reduce in REDUCES:
        got = R.divergence_rejection_mask(
            d,
            np.zeros_like(d),
            estimator="k2",
            reduce=reduce,  # type: ignore[arg-type]
            upper=1.0,
            mask=m,
        )
        assert got.tolist() == [[0.0, 0.0], [1.0, 0.0]]


def test_statistic_is_sequence_divergence() -> None:
    """The sequence statistic is sequence_divergence's: a bound at it keeps, just below rejects."""
    lp, lq = np.log([[0.5, 0.25, 0.9]]), np.log([[0.25, 0.25, 0.1]])
    m = [[1, 1, 0]]
    for est in ESTIMATORS:
        for red in ("sum", "mean", "max"):
            s = float(R.sequence_divergence(lp, lq, estimator=est, reduce=red, mask=m)[0])  # type: ignore[arg-type]
            kw: dict[str, Any] = {"estimator": est, "reduce": red, "mask": m}
            assert R.divergence_rejection_mask(lp, lq, upper=s, **kw).tolist() == [[1, 1, 0]]
            below = float(np.nextafter(s, -math.inf))
            assert R.divergence_rejection_mask(lp, lq, upper=below, **kw).tolist() == [[0, 0, 0]]
            assert R.divergence_rejection_mask(lp, lq, upper=s + 1, lower=s, **kw).sum() == 2


# ---------------------------------------------------------------------------------------------
# properties
# ---------------------------------------------------------------------------------------------


def _keywords(options: tuple[str, str, float, float | None, float | None]) -> dict[str, Any]:
    """The keyword arguments of one drawn ``OPTIONS`` tuple."""
    return dict(
        zip(("estimator", "reduce", "upper", "lower", "log_ratio_clamp"), options, strict=True)
    )


def _check_matches_torch(fn: Mask) -> Callable[[], None]:
    @given(batches(), OPTIONS)
    def check(
        batch: tuple[Array, Array, Array],
        options: tuple[str, str, float, float | None, float | None],
    ) -> None:
        a, b, m = batch
        kw = _keywords(options)
        want, stat = _torch_mask(a, b, m, **kw)
        got = fn(a, b, mask=m, **kw)
        # a statistic within rounding of a bound may go either way (torch's expm1 vs a series)
        near = np.zeros_like(stat, dtype=bool)
        for bound in (kw["upper"], kw["lower"]):
            if bound is not None:
                with np.errstate(invalid="ignore"):
                    near |= np.abs(stat - bound) <= 1e-12 * (1.0 + np.abs(stat))
        assert np.array_equal(got[~near], want[~near]), (got, want)

    return check


def test_matches_an_independent_torch_transcription() -> None:
    run_property(_check_matches_torch(R.divergence_rejection_mask))
    rejects(_check_matches_torch(keeps_above))
    rejects(_check_matches_torch(k3_wrong_sign))


def _check_bound_is_inclusive(fn: Mask) -> Callable[[], None]:
    @given(batches(), st.sampled_from(ESTIMATORS), st.sampled_from(REDUCES), st.data())
    def check(batch: tuple[Array, Array, Array], est: str, red: str, data: st.DataObject) -> None:
        a, b, m = batch
        assume(m.sum() > 0)
        valid = np.argwhere(m > 0)
        i, j = valid[data.draw(st.integers(0, len(valid) - 1))]
        kw: dict[str, Any] = {"estimator": est, "reduce": red, "mask": m}
        if red == "token":  # the token's estimator is a one-token sequence's sum
            one = (a[i : i + 1, j : j + 1], b[i : i + 1, j : j + 1])
            s = float(R.sequence_divergence(*one, estimator=est, reduce="sum")[0])  # type: ignore[arg-type]
        else:
            s = float(R.sequence_divergence(a, b, estimator=est, reduce=red, mask=m)[i])  # type: ignore[arg-type]
        assert fn(a, b, upper=s, **kw)[i, j] == 1.0
        assert fn(a, b, upper=s, lower=s, **kw)[i, j] == 1.0

    return check


def test_a_statistic_equal_to_the_bound_is_kept() -> None:
    run_property(_check_bound_is_inclusive(R.divergence_rejection_mask))
    rejects(_check_bound_is_inclusive(strict_upper))


def _check_padding_is_ignored(fn: Mask) -> Callable[[], None]:
    @given(batches(), OPTIONS, st.sampled_from([5.0, -40.0, 700.0]))
    def check(
        batch: tuple[Array, Array, Array],
        options: tuple[str, str, float, float | None, float | None],
        garbage: float,
    ) -> None:
        a, b, m = batch
        kw = {**_keywords(options), "mask": m}
        first = fn(a, b, **kw)
        second = fn(np.where(m > 0, a, garbage), b, **kw)
        assert np.array_equal(first, second)
        assert np.all(first[m == 0] == 0.0)
        assert set(np.unique(first)) <= {0.0, 1.0}

    return check


def test_padding_is_ignored() -> None:
    run_property(_check_padding_is_ignored(R.divergence_rejection_mask))
    rejects(_check_padding_is_ignored(padding_counts))


def _check_sequence_decisions_are_whole(fn: Mask) -> Callable[[], None]:
    @given(batches(), OPTIONS)
    def check(
        batch: tuple[Array, Array, Array],
        options: tuple[str, str, float, float | None, float | None],
    ) -> None:
        a, b, m = batch
        est, red, upper, lower, clamp = options
        assume(red != "token")
        got = fn(
            a, b, estimator=est, reduce=red, upper=upper, lower=lower, log_ratio_clamp=clamp, mask=m
        )
        for row, mrow in zip(got, m, strict=True):
            assert len(set(row[mrow > 0].tolist())) <= 1

    return check


def token_level_for_max(a: Any, b: Any, **kw: Any) -> Array:
    """Wrong: a sequence option judged token by token."""
    return R.divergence_rejection_mask(a, b, **dict(kw, reduce="token"))


def test_a_sequence_is_kept_or_rejected_whole() -> None:
    run_property(_check_sequence_decisions_are_whole(R.divergence_rejection_mask))
    rejects(_check_sequence_decisions_are_whole(token_level_for_max))


# ---------------------------------------------------------------------------------------------
# refusals
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"estimator": "k4", "reduce": "sum", "upper": 1.0}, "estimator must be one of"),
        ({"estimator": "k2", "reduce": "seq_sum", "upper": 1.0}, "reduce must be one of"),
        ({"estimator": "k2", "reduce": "sum", "upper": math.inf}, "upper must be"),
        ({"estimator": "k1", "reduce": "sum", "upper": 0.0, "lower": 0.5}, "lower must be"),
        (
            {"estimator": "k2", "reduce": "sum", "upper": 1.0, "log_ratio_clamp": 0.0},
            "log_ratio_clamp must be",
        ),
    ],
)
def test_refusals_name_the_parameter(kw: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidArgument, match=words):
        R.divergence_rejection_mask([[0.0]], [[0.0]], **kw)
    with pytest.raises(InvalidArgument, match="logp_target − logp_behavior"):
        R.divergence_rejection_mask([[1e308]], [[-1e308]], estimator="k2", reduce="sum", upper=1.0)
