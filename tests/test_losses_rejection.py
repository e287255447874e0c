"""Properties of refimpl.losses.rejection: sequence divergences, veto, batch normalisation, OPSM, M2PO.

Values are checked exactly on hand-worked cases (dyadic log-ratios, exact in float64), against
independent torch implementations on Hypothesis-drawn batches, and by properties that are each
run against a deliberately wrong variant (which they must reject).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import mpmath
import numpy as np
import pytest
import torch
from _wrong_variants import rejects, run_property
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy.typing import NDArray

import refimpl.losses.rejection as R

Array = NDArray[np.float64]

# ---------------------------------------------------------------------------------------------
# strategies
# ---------------------------------------------------------------------------------------------

LOGP = st.one_of(
    st.sampled_from([0.0, -0.5, -1.0, -3.0, -20.0]),
    st.floats(-30.0, 0.0, allow_nan=False, allow_subnormal=False),
)
SHAPES = st.tuples(st.integers(1, 4), st.integers(1, 6))


@st.composite
def batches(draw: st.DrawFn, *, empty_rows: bool = False) -> tuple[Array, Array, Array]:
    """``(logp_target, logp_behavior, mask)`` of shape (B, T); padding holds garbage."""
    shape = draw(SHAPES)
    a = draw(hnp.arrays(np.float64, shape, elements=LOGP))
    b = draw(hnp.arrays(np.float64, shape, elements=LOGP))
    m = draw(hnp.arrays(np.bool_, shape)).astype(np.float64)
    if not empty_rows:
        m[:, 0] = 1.0
    garbage = draw(st.sampled_from([0.0, 1e6, -7.0]))
    return np.where(m > 0, a, garbage), np.where(m > 0, b, -garbage), m


def _torch_log_ratio(a: Array, b: Array) -> torch.Tensor:
    return torch.tensor(a, dtype=torch.float64) - torch.tensor(b, dtype=torch.float64)


# ---------------------------------------------------------------------------------------------
# wrong variants
# ---------------------------------------------------------------------------------------------


def divergence_unmasked(a: Any, b: Any, *, estimator: str, reduce: str, mask: Any) -> Array:
    """Wrong: the padding is summed too."""
    return R.sequence_divergence(a, b, estimator=estimator, reduce=reduce)  # type: ignore[arg-type]


def k3_naive(d: Array) -> Array:
    """Wrong: ``exp(d) − 1 − d`` evaluated directly (cancellation near 0)."""
    return np.asarray(np.exp(d) - 1.0 - d, dtype=np.float64)


def _k3_refimpl(d: Array) -> Array:
    return R.sequence_divergence(d[:, None], np.zeros((d.size, 1)), estimator="k3")


def veto_by_mean(a: Any, b: Any, *, threshold: float, mask: Any) -> Array:
    """Wrong: rejects when the *mean* log-ratio is below ``log τ``, not any token."""
    mean_k1 = R.sequence_divergence(a, b, estimator="k1", reduce="mean", mask=mask)
    return np.asarray(-mean_k1 >= math.log(threshold), dtype=np.float64)


def normalize_by_padded_count(w: Any, *, mask: Any) -> Array:
    """Wrong: the mean divides by every entry, padding included."""
    w, m = np.asarray(w, dtype=np.float64), np.asarray(mask, dtype=np.float64)
    mean = float((w * m).sum() / m.size)
    return np.asarray(w * m / mean if mean > 0 else w * m, dtype=np.float64)


def m2po_smallest_first(a: Any, b: Any, *, tau: float, mask: Any) -> Array:
    """Wrong: drops the *smallest* squared log-ratios first."""
    m = np.asarray(mask, dtype=np.float64)
    d = (np.asarray(a) - np.asarray(b)) * m
    valid = np.flatnonzero(m.ravel() > 0)
    v = d.ravel()[valid] ** 2
    order = np.argsort(v, kind="stable")
    keep = np.zeros(m.size)
    keep[valid] = 1.0
    for j in range(valid.size):
        rest = np.delete(v, order[:j])
        if rest.mean() < tau:
            break
        keep[valid[order[j]]] = 0.0
    return keep.reshape(m.shape)


def opsm_ignoring_advantage(a: Any, b: Any, adv: Any, *, delta: float, mask: Any) -> Array:
    """Wrong: drops every drifted sequence, whatever its advantage."""
    mean_k1 = R.sequence_divergence(a, b, estimator="k1", reduce="mean", mask=mask)
    return np.asarray(mean_k1 <= delta, dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# (1) exact values on hand-worked cases
# ---------------------------------------------------------------------------------------------

D = np.array([[0.5, -0.25, 9.0], [0.0, 0.0, 0.0]])
M = np.array([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])


@pytest.mark.parametrize(
    ("estimator", "reduce", "first"),
    [
        ("k1", "sum", -0.25),
        ("k1", "mean", -0.125),
        ("k1", "max", 0.25),
        ("k2", "sum", 0.15625),
        ("k2", "mean", 0.078125),
        ("k2", "max", 0.125),
        ("k3", "sum", math.expm1(0.5) - 0.5 + math.expm1(-0.25) + 0.25),
        ("k3", "max", math.expm1(0.5) - 0.5),
    ],
)
def test_sequence_divergence_by_hand(
    estimator: R.Estimator, reduce: R.Reduce, first: float
) -> None:
    out = R.sequence_divergence(D, np.zeros_like(D), estimator=estimator, reduce=reduce, mask=M)
    assert out[0] == pytest.approx(first, rel=1e-15)
    assert out[1] == 0.0  # a row without a valid token: 0, as verl


def test_sequence_divergence_clamp_and_overflow() -> None:
    d = np.array([[30.0, -30.0]])
    clamped = R.sequence_divergence(d, np.zeros_like(d), reduce="max", log_ratio_clamp=20.0)
    assert clamped[0] == 20.0  # k1 = −d, clipped to [−20, 20]
    huge = np.array([[800.0, 0.0]])
    assert R.sequence_divergence(huge, np.zeros_like(huge), estimator="k3")[0] == math.inf
    assert R.sequence_divergence(huge, np.zeros_like(huge), estimator="k3", log_ratio_clamp=20.0)[
        0
    ] == pytest.approx(math.expm1(20.0) - 20.0, rel=1e-15)


def test_any_token_veto_by_hand_with_the_boundary_kept() -> None:
    lp = np.log([[0.5, 0.5], [0.5, 0.2], [0.5, 0.25]])
    lq = np.log([[0.5, 0.5], [0.5, 0.5], [0.5, 0.5]])
    # ratios: (1, 1), (1, 0.4), (1, 0.5): threshold 0.5 keeps ρ = 0.5 exactly
    np.testing.assert_array_equal(R.any_token_veto(lp, lq, threshold=0.5), [1.0, 0.0, 1.0])
    np.testing.assert_array_equal(
        R.any_token_veto(lq, lp, threshold=0.5, upper=2.0), [1.0, 0.0, 1.0]
    )
    np.testing.assert_array_equal(
        R.any_token_veto(lq, lp, threshold=0.1, upper=2.4), [1.0, 0.0, 1.0]
    )
    assert (
        R.any_token_veto(lp, lq, threshold=0.5, mask=[[1, 1], [1, 0], [0, 0]]).tolist() == [1.0] * 3
    )


def test_is_batch_normalize_by_hand() -> None:
    w = np.array([[1.0, 3.0, 50.0], [2.0, 2.0, 2.0]])
    m = np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    # token mean (1 + 3 + 2 + 2 + 2)/5 = 2
    np.testing.assert_array_equal(
        R.is_batch_normalize(w, mask=m), [[0.5, 1.5, 0.0], [1.0, 1.0, 1.0]]
    )
    # sequence mean: row means 2 and 2 -> 2
    seq = np.array([[4.0, 4.0, 7.0], [1.0, 1.0, 1.0], [5.0, 5.0, 5.0]])
    ms = np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    out = R.is_batch_normalize(seq, mask=ms, level="sequence")
    np.testing.assert_allclose(out, [[1.6, 1.6, 0.0], [0.4, 0.4, 0.4], [0.0, 0.0, 0.0]], rtol=1e-15)
    assert R.is_batch_normalize([0.0, 0.0]).tolist() == [0.0, 0.0]


def test_off_policy_sequence_mask_by_hand() -> None:
    d = np.array([[-1.0, -0.5], [-1.0, -0.5], [-0.5, -0.5], [-2.0, 9.0]])
    adv = np.array([-1.0, 0.0, -2.0, -1.0])
    m = np.array([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    # mean k1 = 0.75, 0.75, 0.5, 2.0; δ = 0.5 keeps the mean exactly at δ and A = 0
    out = R.off_policy_sequence_mask(d, np.zeros_like(d), adv, delta=0.5, mask=m)
    np.testing.assert_array_equal(out, [0.0, 1.0, 1.0, 0.0])


def test_m2po_by_hand_strict_fallback_and_ties() -> None:
    d = np.array([[0.5, 0.25, 0.0, 0.25]])  # squares 1/4, 1/16, 0, 1/16
    z = np.zeros_like(d)
    # all: mean 3/32 ≥ 1/16; drop 1/4: mean 1/24 < 1/16
    np.testing.assert_array_equal(R.m2po_mask(d, z, tau=1 / 16), [[0.0, 1.0, 1.0, 1.0]])
    # τ = 1/24: strict needs one more (the earlier of the tied 1/16), not strict stops
    np.testing.assert_array_equal(R.m2po_mask(d, z, tau=1 / 24), [[0.0, 0.0, 1.0, 1.0]])
    np.testing.assert_array_equal(
        R.m2po_mask(d, z, tau=1 / 24, strict=False), [[0.0, 1.0, 1.0, 1.0]]
    )
    # τ = 0.03: the two 1/16 leave a mean of 1/32 ≥ 0.03, so the later one goes too
    np.testing.assert_array_equal(R.m2po_mask(d, z, tau=0.03), [[0.0, 0.0, 1.0, 0.0]])
    # nothing qualifies under a strict 0-ish bound: keep only the smallest
    big = np.array([[1.0, 2.0, 3.0]])
    np.testing.assert_array_equal(R.m2po_mask(big, np.zeros_like(big), tau=0.5), [[1.0, 0.0, 0.0]])
    assert R.m2po_mask(big, np.zeros_like(big), tau=0.5, mask=[[0, 0, 0]]).sum() == 0.0


# ---------------------------------------------------------------------------------------------
# (2) against independent torch implementations
# ---------------------------------------------------------------------------------------------


def torch_divergence(a: Array, b: Array, m: Array, estimator: str, reduce: str) -> Array:
    mask = torch.tensor(m, dtype=torch.float64)
    d = _torch_log_ratio(a, b).masked_fill(mask == 0, 0.0)
    k = {"k1": -d, "k2": 0.5 * d**2, "k3": torch.exp(d) - 1.0 - d}[estimator]
    if reduce == "sum":
        return (k * mask).sum(-1).numpy()
    if reduce == "mean":
        return ((k * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).numpy()
    top = k.masked_fill(mask == 0, float("-inf")).max(dim=-1).values
    return torch.where(torch.isinf(top), torch.zeros_like(top), top).numpy()


@given(
    batch=batches(empty_rows=True),
    estimator=st.sampled_from(["k1", "k2", "k3"]),
    reduce=st.sampled_from(["sum", "mean", "max"]),
)
def test_sequence_divergence_matches_torch(
    batch: tuple[Array, Array, Array], estimator: R.Estimator, reduce: R.Reduce
) -> None:
    a, b, m = batch
    found = R.sequence_divergence(a, b, estimator=estimator, reduce=reduce, mask=m)
    expected = torch_divergence(a, b, m, estimator, reduce)
    # torch's k3 cancels near d = 0 (absolute error ~ ε·e^|d| per token); refimpl's is accurate
    spread = np.where(m > 0, np.exp(np.where(m > 0, np.abs(a - b), 0.0)), 0.0).sum(axis=1)
    atol = 64 * np.finfo(np.float64).eps * (1.0 + spread)
    assert np.all(np.abs(found - expected) <= 1e-12 * np.abs(expected) + atol), (found, expected)


@given(batch=batches(empty_rows=True), threshold=st.sampled_from([0.01, 0.1, 0.5, 0.9, 1.0]))
def test_any_token_veto_matches_torch(batch: tuple[Array, Array, Array], threshold: float) -> None:
    a, b, m = batch
    ratio = torch.exp(_torch_log_ratio(a, b))
    assume(bool(torch.all((ratio - threshold).abs() > 1e-9 * threshold)))
    bad = (ratio < threshold) & (torch.tensor(m) > 0)
    expected = (~bad.any(dim=-1)).double().numpy()
    np.testing.assert_array_equal(R.any_token_veto(a, b, threshold=threshold, mask=m), expected)


@given(
    w=hnp.arrays(np.float64, SHAPES, elements=st.floats(0.0, 10.0, allow_subnormal=False)),
    data=st.data(),
    level=st.sampled_from(["token", "sequence"]),
)
def test_is_batch_normalize_matches_torch(w: Array, data: st.DataObject, level: R.Level) -> None:
    m = data.draw(hnp.arrays(np.bool_, w.shape)).astype(np.float64)
    m[0, 0] = 1.0
    wt, mt = torch.tensor(w), torch.tensor(m)
    if level == "token":
        mean = (wt * mt).sum() / mt.sum()
    else:
        rows = mt.sum(-1) > 0
        mean = ((wt * mt).sum(-1)[rows] / mt.sum(-1)[rows]).mean()
    expected = (wt * mt / mean).numpy() if float(mean) > 0 else (wt * mt).numpy()
    np.testing.assert_allclose(R.is_batch_normalize(w, mask=m, level=level), expected, rtol=1e-13)


@given(batch=batches(empty_rows=True), data=st.data(), delta=st.sampled_from([0.0, 0.1, 0.5, 2.0]))
def test_off_policy_sequence_mask_matches_torch(
    batch: tuple[Array, Array, Array], data: st.DataObject, delta: float
) -> None:
    a, b, m = batch
    adv = np.array(
        data.draw(
            st.lists(st.sampled_from([-1.0, 0.0, 0.5]), min_size=a.shape[0], max_size=a.shape[0])
        )
    )
    kl = torch.tensor(b) - torch.tensor(a)  # TRL: sampling logps − current logps
    mt = torch.tensor(m)
    avg = (kl * mt).sum(-1) / mt.sum(-1).clamp(min=1.0)
    assume(bool(torch.all((avg - delta).abs() > 1e-12)))
    expected = ((torch.tensor(adv) >= 0) | (avg <= delta)).double().numpy()
    np.testing.assert_array_equal(
        R.off_policy_sequence_mask(a, b, adv, delta=delta, mask=m), expected
    )


def torch_m2po(a: Array, b: Array, m: Array, tau: float) -> Array:
    """AReaL's recipe, re-written: suffix means of the descending squares, first one below τ."""
    d = _torch_log_ratio(a, b)
    flat = torch.tensor(m).reshape(-1) > 0
    v = (d * d).reshape(-1)[flat]
    ordered, idx = torch.sort(v, descending=True)
    suffix = ordered.flip(0).cumsum(0).flip(0) / torch.arange(v.numel(), 0, -1, dtype=torch.float64)
    below = torch.nonzero(suffix < tau).flatten()
    k = int(below[0]) if below.numel() else v.numel() - 1
    keep_sorted = torch.ones(v.numel(), dtype=torch.bool)
    keep_sorted[:k] = False
    keep = torch.zeros(flat.numel(), dtype=torch.float64)
    keep[flat] = keep_sorted[torch.argsort(idx)].double()
    return keep.reshape(m.shape).numpy()


@given(batch=batches(empty_rows=False), tau=st.sampled_from([0.01, 0.04, 1.0, 25.0]))
def test_m2po_matches_torch_when_squares_are_distinct(
    batch: tuple[Array, Array, Array], tau: float
) -> None:
    a, b, m = batch
    v = ((a - b) ** 2)[m > 0]
    assume(np.unique(v).size == v.size)
    np.testing.assert_array_equal(R.m2po_mask(a, b, tau=tau, mask=m), torch_m2po(a, b, m, tau))


# ---------------------------------------------------------------------------------------------
# (3) properties, each rejecting a wrong variant
# ---------------------------------------------------------------------------------------------


def _check_padding_is_ignored(impl: Callable[..., Array]) -> Callable[[], None]:
    @given(
        batch=batches(empty_rows=True),
        estimator=st.sampled_from(["k1", "k2", "k3"]),
        reduce=st.sampled_from(["sum", "mean", "max"]),
    )
    def check(batch: tuple[Array, Array, Array], estimator: str, reduce: str) -> None:
        a, b, m = batch
        assume(np.any(m == 0))
        base = impl(a, b, estimator=estimator, reduce=reduce, mask=m)
        moved = impl(
            np.where(m > 0, a, -5.0),
            np.where(m > 0, b, 0.0),
            estimator=estimator,
            reduce=reduce,
            mask=m,
        )
        np.testing.assert_array_equal(base, moved)

    return check


def test_sequence_divergence_ignores_padding() -> None:
    run_property(_check_padding_is_ignored(R.sequence_divergence))


def test_padding_property_rejects_an_unmasked_reduction() -> None:
    rejects(_check_padding_is_ignored(divergence_unmasked))


def _check_k3_relative_accuracy(impl: Callable[[Array], Array]) -> Callable[[], None]:
    @given(
        d=st.one_of(
            st.sampled_from([1e-8, -1e-5, 1e-3, -0.3, 0.49, 0.5, 2.0]),
            st.floats(-3.0, 3.0, allow_subnormal=False).filter(lambda x: abs(x) > 1e-150),
        )
    )
    def check(d: float) -> None:
        found = float(impl(np.array([d]))[0])
        with mpmath.workdps(60):
            x = mpmath.mpf(d)
            if abs(d) < 1.0:  # the series: no cancellation at any magnitude of d
                exact = float(mpmath.fsum(x**k / mpmath.factorial(k) for k in range(2, 60)))
            else:
                exact = float(mpmath.expm1(x) - x)
        assert found == pytest.approx(exact, rel=1e-14, abs=0.0)

    return check


def test_k3_is_accurate_near_on_policy() -> None:
    run_property(_check_k3_relative_accuracy(_k3_refimpl))


def test_k3_accuracy_property_rejects_the_naive_formula() -> None:
    rejects(_check_k3_relative_accuracy(k3_naive))


def _check_one_bad_token_vetoes(impl: Callable[..., Array]) -> Callable[[], None]:
    @given(batch=batches(), threshold=st.sampled_from([0.05, 0.5]), where=st.integers(0, 5))
    def check(batch: tuple[Array, Array, Array], threshold: float, where: int) -> None:
        a, b, m = batch
        a = np.where(m > 0, b, a)  # on-policy everywhere ...
        row_len = a.shape[1]
        t = where % row_len
        m[0, t] = 1.0
        a[0, t] = b[0, t] + math.log(threshold) - 1e-3  # ... but one token just below τ
        keep = impl(a, b, threshold=threshold, mask=m)
        assert keep[0] == 0.0
        assert np.all(keep[1:] == 1.0)

    return check


def _veto(a: Any, b: Any, *, threshold: float, mask: Any) -> Array:
    return R.any_token_veto(a, b, threshold=threshold, mask=mask)


def test_one_token_below_the_threshold_vetoes_its_sequence() -> None:
    run_property(_check_one_bad_token_vetoes(_veto))


def test_veto_property_rejects_a_veto_by_the_mean() -> None:
    rejects(_check_one_bad_token_vetoes(veto_by_mean))


def test_ceiling_only_veto_by_hand() -> None:
    # ratios 2^e, exact in float64: rows (1, 1/1024), (1, 4), (2, 1/2^40), (8, 1/8) with 8 padded
    e = np.array([[0, -10], [0, 2], [1, -40], [3, -3]], dtype=np.float64)
    lq = np.zeros(e.shape)
    lp = np.log(2.0**e)  # d = lp exactly, and log(2^1) is the reference's log(upper)
    mask = [[1, 1], [1, 1], [1, 1], [0, 1]]
    # no floor: only ρ > 2 vetoes (ρ = 2 is kept; ρ = 2^-40 is kept, as is padding's 8)
    found = R.any_token_veto(lp, lq, threshold=None, upper=2.0, mask=mask)
    np.testing.assert_array_equal(found, [1.0, 0.0, 1.0, 1.0])
    # the same ceiling with a floor of 1/16 also vetoes rows 0 and 2 (row 3 has 1/8)
    both = R.any_token_veto(lp, lq, threshold=0.0625, upper=2.0, mask=mask)
    np.testing.assert_array_equal(both, [0.0, 0.0, 0.0, 1.0])
    assert (
        R.any_token_veto(lp, lq, threshold=None, upper=2.0, mask=np.zeros((4, 2))).tolist()
        == [1.0] * 4
    )


def _veto_floor_anyway(floor: float) -> Callable[..., Array]:
    """Wrong variant: ``threshold=None`` read as the floor ``floor``."""

    def veto(a: Any, b: Any, *, threshold: float | None, upper: float, mask: Any) -> Array:
        return R.any_token_veto(
            a, b, threshold=floor if threshold is None else threshold, upper=upper, mask=mask
        )

    return veto


def _check_ceiling_only_veto(impl: Callable[..., Array]) -> Callable[[], None]:
    """With no floor a sequence is kept exactly when no valid token's ratio 2^e exceeds 1.5·2^k."""

    @given(
        e=hnp.arrays(np.int64, SHAPES, elements=st.integers(-60, 8)),
        k=st.integers(0, 6),
        data=st.data(),
    )
    def check(e: NDArray[np.int64], k: int, data: st.DataObject) -> None:
        mask = data.draw(hnp.arrays(np.float64, e.shape, elements=st.sampled_from([0.0, 1.0])))
        lq = np.full(e.shape, -70.0 * math.log(2.0))
        lp = lq + e * math.log(2.0)  # ρ = 2^e within a few ulps: the ceiling 1.5·2^k is far
        over = (e > k) & (mask > 0)
        expected = [float(not row.any()) for row in over]
        found = impl(lp, lq, threshold=None, upper=1.5 * 2.0**k, mask=mask)
        assert found.tolist() == expected, (e.tolist(), mask.tolist(), k, found.tolist())

    return check


def test_ceiling_only_veto_is_the_ceiling() -> None:
    run_property(_check_ceiling_only_veto(R.any_token_veto))


@pytest.mark.parametrize("floor", [1.0, 2.0**-30])
def test_ceiling_only_property_rejects_a_floor_applied_anyway(floor: float) -> None:
    rejects(_check_ceiling_only_veto(_veto_floor_anyway(floor)))


def test_a_floor_of_zero_is_no_floor() -> None:
    # the other reading of "None": ρ < 0 never happens, so it is the same function, not a wrong one
    e = np.array([[-60.0, 0.0], [-1.0, 3.0]])
    lp, lq = e * math.log(2.0), np.zeros((2, 2))
    np.testing.assert_array_equal(
        R.any_token_veto(lp, lq, threshold=None, upper=4.0),
        (np.exp(lp - lq) <= 4.0).all(axis=1).astype(np.float64),
    )


def _check_normalized_mean_is_one(impl: Callable[..., Array]) -> Callable[[], None]:
    @given(
        w=hnp.arrays(np.float64, SHAPES, elements=st.floats(0.01, 10.0, allow_subnormal=False)),
        data=st.data(),
    )
    def check(w: Array, data: st.DataObject) -> None:
        m = data.draw(hnp.arrays(np.bool_, w.shape)).astype(np.float64)
        m[0, 0] = 1.0
        out = impl(w, mask=m)
        assert float(out[m > 0].mean()) == pytest.approx(1.0, rel=1e-12)
        assert np.all(out[m == 0] == 0.0)

    return check


def _normalize(w: Any, *, mask: Any) -> Array:
    return R.is_batch_normalize(w, mask=mask)


def test_batch_normalized_weights_have_mean_one_over_valid_tokens() -> None:
    run_property(_check_normalized_mean_is_one(_normalize))


def test_mean_one_property_rejects_dividing_by_the_padded_count() -> None:
    rejects(_check_normalized_mean_is_one(normalize_by_padded_count))


def _check_m2po_drops_largest_and_fewest(impl: Callable[..., Array]) -> Callable[[], None]:
    @given(batch=batches(), tau=st.sampled_from([0.01, 0.04, 1.0, 25.0]))
    def check(batch: tuple[Array, Array, Array], tau: float) -> None:
        a, b, m = batch
        keep = impl(a, b, tau=tau, mask=m)
        v = ((a - b) ** 2)[m > 0]
        kept, dropped = v[keep[m > 0] > 0], v[keep[m > 0] == 0]
        assert kept.size >= 1
        if dropped.size:
            assert dropped.min() >= kept.max()  # the largest are dropped
            fewer = np.append(kept, dropped.min())  # dropping one fewer does not suffice
            assert fewer.mean() >= tau
        if kept.size > 1:
            assert kept.mean() < tau

    return check


def _m2po(a: Any, b: Any, *, tau: float, mask: Any) -> Array:
    return R.m2po_mask(a, b, tau=tau, mask=mask)


def test_m2po_drops_the_largest_squares_and_no_more_than_needed() -> None:
    run_property(_check_m2po_drops_largest_and_fewest(_m2po))


def test_m2po_property_rejects_dropping_the_smallest() -> None:
    rejects(_check_m2po_drops_largest_and_fewest(m2po_smallest_first))


def _check_positive_advantage_is_kept(impl: Callable[..., Array]) -> Callable[[], None]:
    @given(batch=batches(), delta=st.sampled_from([0.0, 0.5]))
    def check(batch: tuple[Array, Array, Array], delta: float) -> None:
        a, b, m = batch
        b = b.copy()
        b[0] = a[0] + 5.0  # row 0 drifted far (mean k1 = 5 > δ) ...
        adv = np.full(a.shape[0], 1.0)  # ... but with a positive advantage
        assert impl(a, b, adv, delta=delta, mask=m)[0] == 1.0
        adv[0] = -1.0
        assert impl(a, b, adv, delta=delta, mask=m)[0] == 0.0

    return check


def _opsm(a: Any, b: Any, adv: Any, *, delta: float, mask: Any) -> Array:
    return R.off_policy_sequence_mask(a, b, adv, delta=delta, mask=mask)


def test_opsm_keeps_positive_advantages_and_drops_drifted_negative_ones() -> None:
    run_property(_check_positive_advantage_is_kept(_opsm))


def test_opsm_property_rejects_ignoring_the_advantage_sign() -> None:
    rejects(_check_positive_advantage_is_kept(opsm_ignoring_advantage))


# ---------------------------------------------------------------------------------------------
# (4) validation: each rule just inside and just outside
# ---------------------------------------------------------------------------------------------

LP = np.log([[0.5, 0.5]])


def test_log_probability_validation() -> None:
    R.sequence_divergence(LP, LP)
    with pytest.raises(ValueError, match=r"logp_target must contain only finite values"):
        R.sequence_divergence([[math.nan, 0.0]], LP)
    with pytest.raises(ValueError, match=r"logp_behavior and logp_target must have the same shape"):
        R.any_token_veto(LP, [[0.0]], threshold=0.5)
    with pytest.raises(ValueError, match=r"logp_target must be 2-D"):
        R.m2po_mask([0.0, 0.0], [0.0, 0.0], tau=1.0)
    with pytest.raises(
        ValueError,
        match=r"(?s)logp_target − logp_behavior must be finite at every real token.*Entry 0",
    ):
        R.sequence_divergence([[1e308]], [[-1e308]])
    R.sequence_divergence([[1e308]], [[-1e308]], mask=[[0]])  # padding may hold anything finite
    with pytest.raises(ValueError, match=r"(?s)mask must hold only 0 and 1.*Entry 1 is 2.0"):
        R.off_policy_sequence_mask(LP, LP, [1.0], delta=0.1, mask=[[1, 2]])


def test_option_validation() -> None:
    with pytest.raises(
        ValueError, match=r"estimator must be one of 'k1', 'k2', 'k3'; got estimator='kl'"
    ):
        R.sequence_divergence(LP, LP, estimator="kl")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"reduce must be one of 'sum', 'mean', 'max'"):
        R.sequence_divergence(LP, LP, reduce="min")  # type: ignore[arg-type]
    R.sequence_divergence(LP, LP, log_ratio_clamp=1e-300)
    with pytest.raises(ValueError, match=r"log_ratio_clamp must be > 0 .*verl uses 20"):
        R.sequence_divergence(LP, LP, log_ratio_clamp=0.0)


def test_veto_threshold_validation() -> None:
    R.any_token_veto(LP, LP, threshold=1.0, upper=1.0)
    with pytest.raises(
        ValueError, match=r"threshold must be <= 1 \(a ratio floor\); got threshold=1.5"
    ):
        R.any_token_veto(LP, LP, threshold=1.5)
    with pytest.raises(ValueError, match=r"threshold must be > 0"):
        R.any_token_veto(LP, LP, threshold=0.0)
    with pytest.raises(ValueError, match=r"upper must be >= 1 \(a ratio ceiling\)"):
        R.any_token_veto(LP, LP, threshold=0.5, upper=0.99)
    with pytest.raises(
        ValueError,
        match=r"threshold must be a ratio floor in \(0, 1\] when upper is None; got threshold="
        r"None\. Pass threshold= .*upper= .*or both",
    ):
        R.any_token_veto(LP, LP, threshold=None)
    with pytest.raises(ValueError, match=r"upper must be >= 1 \(a ratio ceiling\)"):
        R.any_token_veto(LP, LP, threshold=None, upper=0.5)


def test_batch_normalize_validation() -> None:
    R.is_batch_normalize([0.0, 1.0], mask=[0, 1])
    with pytest.raises(
        ValueError, match=r"(?s)w must be >= 0 \(importance weights\).*Entry 1 is -0.5"
    ):
        R.is_batch_normalize([1.0, -0.5])
    with pytest.raises(ValueError, match=r"mask and w must have the same shape"):
        R.is_batch_normalize([1.0, 0.5], mask=[1, 1, 1])
    with pytest.raises(ValueError, match=r"mask must mark at least one valid entry"):
        R.is_batch_normalize([1.0, 0.5], mask=[0, 0])
    with pytest.raises(ValueError, match=r"w must be 1-D or 2-D"):
        R.is_batch_normalize(np.ones((1, 1, 1)))
    with pytest.raises(ValueError, match=r"level must be one of 'token', 'sequence'"):
        R.is_batch_normalize([1.0], level="batch")  # type: ignore[arg-type]


def test_opsm_validation() -> None:
    R.off_policy_sequence_mask(LP, LP, [0.0], delta=0.0)
    with pytest.raises(ValueError, match=r"delta must be >= 0"):
        R.off_policy_sequence_mask(LP, LP, [0.0], delta=-1e-9)
    with pytest.raises(ValueError, match=r"advantages must have one entry per sequence \(B = 1\)"):
        R.off_policy_sequence_mask(LP, LP, [0.0, 1.0], delta=0.5)
    with pytest.raises(ValueError, match=r"advantages must be 1-D"):
        R.off_policy_sequence_mask(LP, LP, [[0.0]], delta=0.5)


def test_m2po_validation() -> None:
    R.m2po_mask(LP, LP, tau=1e-300)
    with pytest.raises(
        ValueError, match=r"tau must be > 0 \(a mean squared log-ratio\); got tau=0"
    ):
        R.m2po_mask(LP, LP, tau=0)
    with pytest.raises(TypeError, match=r"strict must be a bool; got strict=1"):
        R.m2po_mask(LP, LP, tau=1.0, strict=1)  # type: ignore[arg-type]


def test_k3_is_finite_up_to_the_largest_log_ratio_whose_exp_is_finite() -> None:
    """k3 = e^d − 1 − d is finite, and exact to rounding, at the largest double d with a finite
    e^d, and +inf one double above it, where the true value exceeds every float64."""
    top = float(np.log(np.finfo(np.float64).max))
    assert math.isfinite(math.exp(top))
    with mpmath.workdps(40):
        exact = float(mpmath.exp(mpmath.mpf(top)) - 1 - mpmath.mpf(top))
    at_top = R.sequence_divergence([[top]], [[0.0]], estimator="k3", reduce="sum")
    assert at_top[0] == pytest.approx(exact, rel=1e-14)
    above = np.nextafter(top, math.inf)
    with np.errstate(over="ignore"):
        beyond = R.sequence_divergence([[above]], [[0.0]], estimator="k3", reduce="sum")
    assert beyond[0] == math.inf
