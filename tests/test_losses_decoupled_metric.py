"""Decoupled PPO rejected on a KL estimate (``metric=``) and by a row's largest ratio (``level="max"``).

Exact values on hand-worked rows (behaviour ratios that are powers of two, so every weight and
product is exact, and bounds that separate the three estimators, the three row statistics and
AReaL's clamp of only the rows out of bounds); properties, each run against a wrong variant it
must reject (a KL row weighed by its geometric mean, the k3 estimate of the other direction, the
clamp applied to every row); the spec ``decoupled_ppo_clip`` passes the reference under each new
convention and rejects a candidate with the wrong estimator or statistic; refusals name the
parameter.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects, run_property
from hypothesis import assume, given
from hypothesis import strategies as st
from numpy.typing import NDArray
from strategies_losses import TokenBatch, token_batches

from refimpl.losses import LossTerms, decoupled_ppo_loss
from refimpl.testing import check_conformance

Array = NDArray[np.float64]
Loss = Callable[..., LossTerms]

LN2 = math.log(2.0)


def _on_policy(k: list[list[float]], mask: list[list[float]] | None = None, **kw: Any) -> Array:
    """The gradient −w (A = 1, π_θ = π_prox = 1) with log2 of π_prox/μ given per token."""
    zero = np.zeros((len(k), len(k[0])))
    behav = -LN2 * np.array(k)
    terms = decoupled_ppo_loss(zero, zero, behav, np.ones_like(zero), mask=mask, **kw)
    np.testing.assert_array_equal(terms.loss, terms.grad)  # on policy: loss = grad = −w
    return np.asarray(terms.grad)


# ---------------------------------------------------------------------------------------------
# (1) exact values
# ---------------------------------------------------------------------------------------------


def test_each_estimator_rejects_its_own_tokens() -> None:
    # d = ln 2 · (1, −1, 2, −2): weights 2, 1/2, 4, 1/4;
    # k1 = d: .69, −.69, 1.39, −1.39; k2 = d²/2: .24, .24, .96, .96;
    # k3 = e^−d − 1 + d: .19, .31, .64, 1.61; bound 1: each metric keeps another set
    k = [[1.0, -1.0, 2.0, -2.0]]
    assert _on_policy(k, cap=1.0, metric="kl_k1").tolist() == [[-2.0, -0.5, 0.0, -0.25]]
    assert _on_policy(k, cap=1.0, metric="kl_k2").tolist() == [[-2.0, -0.5, -4.0, -0.25]]
    assert _on_policy(k, cap=1.0, metric="kl_k3").tolist() == [[-2.0, -0.5, -4.0, 0.0]]
    assert _on_policy(k, cap=1.0).tolist() == [[0.0, -0.5, 0.0, -0.25]]  # the ratio <= 1
    # a lower bound: k1 >= −1 drops the −1.39; k2 >= 0.5 keeps only the .96
    assert _on_policy(k, cap=1.0, lower=-1.0, metric="kl_k1").tolist() == [[-2, -0.5, 0, 0]]
    assert _on_policy(k, cap=1.0, lower=0.5, metric="kl_k2").tolist() == [[0, 0, -4, -0.25]]


def test_the_bounds_are_inclusive_for_a_kl_estimate() -> None:
    # d = ln 2 exactly: k1 = ln 2 is kept at cap = ln 2 and at lower = ln 2, refused just past
    k = [[1.0]]
    assert _on_policy(k, cap=LN2, lower=LN2, metric="kl_k1").tolist() == [[-2.0]]
    assert _on_policy(k, cap=math.nextafter(LN2, 0.0), metric="kl_k1").tolist() == [[0.0]]
    up = math.nextafter(LN2, 1.0)
    assert _on_policy(k, cap=1.0, lower=up, metric="kl_k1").tolist() == [[0.0]]


def test_the_row_statistics_of_a_kl_estimate() -> None:
    # k2 per token: row 1 (d = ln 2, −ln 2, padding): .24, .24 → mean .24, sum .48, max .24;
    # row 2 (d = 2 ln 2, 0, 0, 0): .96, 0, 0, 0 → mean .24, sum .96, max .96. Bound 0.3.
    k = [[1.0, -1.0, 0.0, 0.0], [2.0, 0.0, 0.0, 0.0]]
    mask = [[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]]
    row1, row2 = [-2.0, -0.5, 0.0, 0.0], [-4.0, -1.0, -1.0, -1.0]  # own ratios, not the mean
    none = [0.0] * 4
    want = {"geometric": [row1, row2], "sequence": [none, none], "max": [row1, none]}
    for level, rows in want.items():
        got = _on_policy(k, mask, cap=0.3, level=level, metric="kl_k2")
        assert got.tolist() == rows, level


def test_a_kl_row_with_negative_estimates() -> None:
    # k1 per token: (1, −2)·ln 2 → sum −ln 2 < mean −ln 2/2 < max ln 2; bounds [−0.5, 0.5]:
    # the sum is below, the mean inside, the max above
    k, mask = [[1.0, -2.0]], [[1.0, 1.0]]
    kw: dict[str, Any] = {"cap": 0.5, "lower": -0.5, "metric": "kl_k1"}
    assert _on_policy(k, mask, level="geometric", **kw).tolist() == [[-2.0, -0.25]]
    assert _on_policy(k, mask, level="sequence", **kw).tolist() == [[0.0, 0.0]]
    assert _on_policy(k, mask, level="max", **kw).tolist() == [[0.0, 0.0]]


def test_the_maximum_of_negative_estimates_ignores_padding() -> None:
    # k1 of (−1, −2)·ln 2 and a padded token: the maximum is −ln 2 ≤ −0.5, kept; a padded 0
    # taking part would make it 0 > −0.5 and reject the row
    k, mask = [[-1.0, -2.0, 0.0]], [[1.0, 1.0, 0.0]]
    got = _on_policy(k, mask, cap=-0.5, level="max", metric="kl_k1")
    assert got.tolist() == [[-0.5, -0.25, 0.0]]


def test_the_largest_ratio_decides_a_row() -> None:
    # log2 of π_prox/μ: rows (2, 0), (1, 1), (3, −3): largest ratios 4, 2, 8, geometric means
    # 2, 2, 1. Cap 2: only the second row is kept, weighted by its geometric mean.
    k = [[2.0, 0.0], [1.0, 1.0], [3.0, -3.0]]
    got = _on_policy(k, cap=2.0, level="max")
    assert got.tolist() == [[0.0, 0.0], [-2.0, -2.0], [0.0, 0.0]]
    # an all-padding row has no tokens: nothing to weigh
    assert _on_policy(k, [[0.0, 0.0]] * 3, cap=2.0, level="max").tolist() == [[0.0, 0.0]] * 3


def test_the_clamp_at_the_largest_ratio_spares_the_rows_inside() -> None:
    # rows (2, 0): max 4 > 1.5, mean 2 → clamped to 1.5; (0, −2): max 1 inside [3/4, 3/2],
    # mean 1/2 < 3/4 but the row is inside: kept at 1/2 (AReaL clamps only the rows outside);
    # (−1, −1): max 1/2 < 3/4 → mean 1/2 clamped to 3/4
    k = [[2.0, 0.0], [0.0, -2.0], [-1.0, -1.0]]
    got = _on_policy(k, cap=1.5, lower=0.75, level="max", above_cap="clip")
    assert got.tolist() == [[-1.5, -1.5], [-0.5, -0.5], [-0.75, -0.75]]
    # the mask at the same bounds: only the second row kept
    got = _on_policy(k, cap=1.5, lower=0.75, level="max")
    assert got.tolist() == [[0.0, 0.0], [-0.5, -0.5], [0.0, 0.0]]


# ---------------------------------------------------------------------------------------------
# (2) properties, each seen to reject a wrong variant
# ---------------------------------------------------------------------------------------------


def _behaviour(batch: TokenBatch, shifts: list[float]) -> Array:
    s = np.resize(np.asarray(shifts, dtype=np.float64), batch.logp_old.size)
    return np.asarray(batch.logp_old - s.reshape(batch.logp_old.shape), dtype=np.float64)


def _right(lp: Any, lq: Any, lb: Any, a: Any, **k: Any) -> LossTerms:
    return decoupled_ppo_loss(lp, lq, lb, a, **k)


def _geometric_weight(lp: Any, lq: Any, lb: Any, a: Any, **k: Any) -> LossTerms:
    """A KL row weighed by its geometric-mean ratio (as the ratio metric does)."""
    kept = decoupled_ppo_loss(lp, lq, lb, a, **k).grad != 0.0
    rows = {**k, "metric": "ratio", "cap": 1e300, "lower": None, "level": "geometric"}
    own = decoupled_ppo_loss(lp, lq, lb, a, **rows)
    return LossTerms(np.where(kept, own.loss, 0.0), np.where(kept, own.grad, 0.0))


def check_kl_rows_keep_their_own_ratios(loss: Loss) -> Callable[[], None]:
    @given(
        token_batches(),
        st.lists(st.floats(-1.0, 1.0, allow_nan=False), min_size=1),
        st.sampled_from(["kl_k1", "kl_k2", "kl_k3"]),
        st.sampled_from(["geometric", "sequence", "max"]),
    )
    def prop(batch: TokenBatch, shifts: list[float], metric: str, level: str) -> None:
        lq = batch.logp_old
        lb = _behaviour(batch, shifts)
        a = np.ones_like(lq)
        terms = loss(lq, lq, lb, a, cap=0.5, metric=metric, level=level, mask=batch.mask)
        kept = terms.grad != 0.0
        for row, m in zip(kept, batch.mask, strict=True):
            assert row[m > 0].all() or not row[m > 0].any()  # a row's fate is shared
        own = np.exp(np.where(batch.mask > 0, lq - lb, 0.0))
        np.testing.assert_allclose(-terms.grad[kept], own[kept], rtol=1e-14)

    return prop


def test_kl_rows_keep_their_own_ratios() -> None:
    run_property(check_kl_rows_keep_their_own_ratios(_right))


def test_kl_row_property_rejects_the_geometric_mean_weight() -> None:
    rejects(check_kl_rows_keep_their_own_ratios(_geometric_weight))


def _k3_other_direction(lp: Any, lq: Any, lb: Any, a: Any, **k: Any) -> LossTerms:
    """k3 of log(μ/π_prox) instead of log(π_prox/μ): e^d − 1 − d."""
    lq, lb = np.asarray(lq), np.asarray(lb)
    keep = decoupled_ppo_loss(lp, lb, lq, a, **k).grad != 0.0  # the swapped estimate decides
    out = decoupled_ppo_loss(lp, lq, lb, a, **{**k, "metric": "ratio", "cap": None})
    return LossTerms(np.where(keep, out.loss, 0.0), np.where(keep, out.grad, 0.0))


def check_a_token_is_kept_iff_its_estimate_is_inside(loss: Loss) -> Callable[[], None]:
    @given(
        st.lists(st.floats(-3.0, 3.0, allow_nan=False), min_size=1, max_size=8),
        st.floats(0.01, 2.0),
    )
    def prop(ds: list[float], cap: float) -> None:
        d = np.asarray([ds])
        k3 = np.asarray([math.expm1(-x) + x for x in ds])
        assume(np.all(np.abs(k3 - cap) > 1e-9))  # no estimate within rounding of the bound
        zero = np.zeros_like(d)
        terms = loss(zero, zero, -d, np.ones_like(d), cap=cap, metric="kl_k3")
        assert ((terms.grad[0] != 0.0) == (k3 <= cap)).all()

    return prop


def test_a_token_is_kept_iff_its_estimate_is_inside() -> None:
    run_property(check_a_token_is_kept_iff_its_estimate_is_inside(_right))


def test_k3_property_rejects_the_other_direction() -> None:
    rejects(check_a_token_is_kept_iff_its_estimate_is_inside(_k3_other_direction))


def _clamp_every_row(lp: Any, lq: Any, lb: Any, a: Any, **k: Any) -> LossTerms:
    """Every row's geometric mean clamped to [lower, cap], also the rows inside the bounds."""
    return decoupled_ppo_loss(lp, lq, lb, a, **{**k, "level": "geometric"})


def check_a_row_inside_keeps_its_mean(loss: Loss) -> Callable[[], None]:
    @given(st.lists(st.integers(-3, 3), min_size=1, max_size=4), st.integers(-2, 0))
    def prop(ks: list[int], low: int) -> None:
        lb = [[-k * LN2 for k in ks]]
        zero = [[0.0] * len(ks)]
        terms = loss(
            zero, zero, lb, [[1.0] * len(ks)],
            cap=2.0, lower=2.0**low, level="max", above_cap="clip",
        )  # fmt: skip
        mean = 2.0 ** (sum(ks) / len(ks))
        inside = 2.0**low <= 2.0 ** max(ks) <= 2.0
        want = mean if inside else min(max(mean, 2.0**low), 2.0)
        np.testing.assert_allclose(-terms.grad[0], want, rtol=1e-14)

    return prop


def test_a_row_inside_keeps_its_mean() -> None:
    run_property(check_a_row_inside_keeps_its_mean(_right))


def test_row_clamp_property_rejects_clamping_every_row() -> None:
    rejects(check_a_row_inside_keeps_its_mean(_clamp_every_row))


# ---------------------------------------------------------------------------------------------
# (3) the spec under the new conventions
# ---------------------------------------------------------------------------------------------


def _candidate(conv: dict[str, str], wrong: dict[str, str] | None = None) -> Callable[..., Any]:
    def candidate(*arrays: Any, cotangent: Any = None, **kw: Any) -> tuple[Array, Array]:
        options: dict[str, Any] = {**kw, **conv, **(wrong or {})}
        t = decoupled_ppo_loss(*arrays, cotangent=cotangent, **options)
        return t.loss, t.grad

    return candidate


_CONVENTIONS = [
    {"metric": "kl_k1", "level": "token"},
    {"metric": "kl_k2", "level": "geometric"},
    {"metric": "kl_k3", "level": "max"},
    {"metric": "kl_k2", "level": "sequence"},
    {"metric": "ratio", "level": "max"},
    {"metric": "ratio", "level": "max", "above_cap": "clip"},
]


@pytest.mark.parametrize("conv", _CONVENTIONS, ids=lambda c: "-".join(c.values()))
def test_the_spec_passes_the_reference(conv: dict[str, str]) -> None:
    report = check_conformance(
        _candidate(conv),
        spec="decoupled_ppo_clip",
        conventions={"gradient": "returned", **conv},
        max_examples=15,
    )
    assert report.ok, report


@pytest.mark.parametrize(
    ("conv", "wrong"),
    [
        ({"metric": "kl_k3", "level": "token"}, {"metric": "kl_k2"}),
        ({"metric": "kl_k2", "level": "max"}, {"level": "geometric"}),
        ({"metric": "ratio", "level": "max"}, {"level": "geometric"}),
    ],
)
def test_the_spec_rejects_a_wrong_candidate(conv: dict[str, str], wrong: dict[str, str]) -> None:
    report = check_conformance(
        _candidate(conv, wrong),
        spec="decoupled_ppo_clip",
        conventions={"gradient": "returned", **conv},
        checks=["values"],
        max_examples=40,
        shrink=False,  # the verdict is the same; shrinking is most of a failure's cost
    )
    assert not report.ok, report


# ---------------------------------------------------------------------------------------------
# (4) refusals name the parameter
# ---------------------------------------------------------------------------------------------


def test_refusals_name_the_parameter() -> None:
    lp = np.zeros((1, 2))
    with pytest.raises(ValueError, match="metric"):
        decoupled_ppo_loss(lp, lp, lp, [1.0], cap=1.0, metric="kl")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"above_cap.*metric='kl_k2'"):
        decoupled_ppo_loss(lp, lp, lp, [1.0], cap=1.0, metric="kl_k2", above_cap="clip")
    with pytest.raises(ValueError, match=r"cap.*metric='kl_k3'"):
        decoupled_ppo_loss(lp, lp, lp, [1.0], metric="kl_k3")
    for metric in ("kl_k2", "kl_k3"):
        with pytest.raises(ValueError, match="cap"):
            decoupled_ppo_loss(lp, lp, lp, [1.0], cap=0.0, metric=metric)
    with pytest.raises(ValueError, match="lower"):
        decoupled_ppo_loss(lp, lp, lp, [1.0], cap=0.5, lower=0.6, metric="kl_k2")
    with pytest.raises(ValueError, match="cap"):
        decoupled_ppo_loss(lp, lp, lp, [1.0], cap=math.inf, metric="kl_k1")
    with pytest.raises(ValueError, match="level"):
        decoupled_ppo_loss(lp, lp, lp, [1.0], cap=2.0, level="Max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cap"):
        decoupled_ppo_loss(lp, lp, lp, [1.0], level="max")
    # k1 can be negative: a negative cap and lower are accepted
    got = decoupled_ppo_loss(lp, lp, lp - 1.0, [1.0], cap=-0.5, lower=-2.0, metric="kl_k1")
    assert got.grad.tolist() == [[0.0, 0.0]]  # k1 = 1 > −0.5: both rejected
