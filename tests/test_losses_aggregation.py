"""Loss aggregation: exact weights, autograd agreement, length dependence, validation.

Every property is also run against a deliberately wrong aggregation, which it must reject.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import torch
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

from refimpl.losses.aggregation import (
    AGGREGATION_MODES,
    aggregate_loss,
    aggregation_weights,
    length_weight,
)

Array = NDArray[np.float64]
Weights = Callable[..., Array]

MASK = np.array([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 0, 0]], dtype=np.float64)
H = 8


def _exact(mask: Array, mode: str, empty_rows: str = "excluded") -> list[list[Fraction]]:
    """The weights by hand, in Fractions, from the definitions."""
    rows = [[int(x) for x in row] for row in mask]
    lengths = [sum(r) for r in rows]
    n = sum(lengths)
    s = sum(1 for L in lengths if L > 0) if empty_rows == "excluded" else len(rows)
    out = []
    for row, L in zip(rows, lengths, strict=True):
        per = {
            "token_sum": Fraction(1),
            "token_mean": Fraction(1, n),
            "seq_mean_token_mean": Fraction(1, s * L) if L else Fraction(0),
            "seq_mean_token_sum": Fraction(1, s),
            "token_sum_norm": Fraction(1, s * H),
        }[mode]
        out.append([per * x for x in row])
    return out


@pytest.mark.parametrize("mode", [m for m in AGGREGATION_MODES if m != "group_mean"])
@pytest.mark.parametrize("empty_rows", ["excluded", "counted"])
def test_weights_equal_the_hand_worked_fractions(mode: str, empty_rows: str) -> None:
    constant = H if mode == "token_sum_norm" else None
    w = aggregation_weights(MASK, mode=mode, constant=constant, empty_rows=empty_rows)
    expected = _exact(MASK, mode, empty_rows)
    for b in range(4):
        for t in range(4):
            assert w[b, t] == float(expected[b][t])


def test_group_mean_is_a_token_mean_within_each_group_then_a_mean_over_groups() -> None:
    # groups {0, 1}: 4 tokens; {2, 3}: 2 tokens (row 2 empty). G = 2.
    w = aggregation_weights(MASK, mode="group_mean", group=[0, 0, 1, 1])
    assert w[0, 0] == float(Fraction(1, 2 * 4))
    assert w[1, 0] == float(Fraction(1, 8))
    assert w[3, 0] == float(Fraction(1, 2 * 2))
    assert w[2].sum() == 0.0
    # a group with no valid token: excluded from G, or counted
    solo = aggregation_weights(MASK, mode="group_mean", group=[0, 0, 1, 2])
    assert solo[0, 0] == float(Fraction(1, 2 * 4))
    counted = aggregation_weights(MASK, mode="group_mean", group=[0, 0, 1, 2], empty_rows="counted")
    assert counted[0, 0] == float(Fraction(1, 3 * 4))


def test_declared_global_counts_replace_the_batch_counts() -> None:
    w = aggregation_weights(MASK, mode="token_mean", token_count=12)
    assert w[0, 0] == 1 / 12
    w = aggregation_weights(MASK, mode="seq_mean_token_mean", sequence_count=6)
    assert w[1, 0] == float(Fraction(1, 6))
    assert w[0, 0] == float(Fraction(1, 18))


def test_rejection_denominator_before_or_after() -> None:
    reject = np.ones_like(MASK)
    reject[0, 0] = 0.0
    before = aggregation_weights(MASK, mode="token_mean", rejection=reject)
    after = aggregation_weights(
        MASK, mode="token_mean", rejection=reject, denominator="after_rejection"
    )
    assert before[0, 0] == 0.0
    assert before[0, 1] == 1 / 6
    assert after[0, 0] == 0.0
    assert after[0, 1] == 1 / 5
    rows = aggregation_weights(
        MASK, mode="seq_mean_token_mean", rejection=[0, 1, 1, 1], denominator="after_rejection"
    )
    assert rows[0].sum() == 0.0
    assert rows[1, 0] == 0.5
    kept = aggregation_weights(MASK, mode="seq_mean_token_mean", rejection=[0, 1, 1, 1])
    assert kept[1, 0] == float(Fraction(1, 3))


def test_no_valid_token_gives_zero_weights_not_nan() -> None:
    for mode in AGGREGATION_MODES:
        extra: dict[str, Any] = {"constant": 4} if mode == "token_sum_norm" else {}
        if mode == "group_mean":
            extra = {"group": [0, 1]}
        w = aggregation_weights(np.zeros((2, 3)), mode=mode, **extra)
        assert np.all(w == 0.0)


# ---------------------------------------------------------------------------------------------
# against torch autograd (an independent implementation of each mode, framework style)
# ---------------------------------------------------------------------------------------------


@st.composite
def batches(draw: Any) -> tuple[Array, Array, Array, Array, Array]:
    rows = draw(st.integers(1, 6))
    width = draw(st.integers(1, 6))
    flat = st.lists(st.booleans(), min_size=rows * width, max_size=rows * width)
    mask = np.array(draw(flat), dtype=np.float64).reshape(rows, width)
    real = st.floats(-3.0, 0.0, allow_nan=False)
    cells = st.lists(real, min_size=rows * width, max_size=rows * width)
    logp = np.array(draw(cells)).reshape(rows, width)
    old = np.array(draw(cells)).reshape(rows, width)
    adv = np.array(draw(st.lists(st.floats(-2, 2), min_size=rows, max_size=rows)))
    group = np.array(draw(st.lists(st.integers(0, 2), min_size=rows, max_size=rows)))
    return mask, logp, old, adv, group.astype(np.float64)


def _torch_aggregate(loss: Any, mask: Any, mode: str, group: Any) -> Any:
    lengths = mask.sum(-1)
    nonempty = (lengths > 0).double()
    s = nonempty.sum().clamp(min=1.0)
    if mode == "token_sum":
        return (loss * mask).sum()
    if mode == "token_mean":
        return (loss * mask).sum() / mask.sum().clamp(min=1.0)
    if mode == "seq_mean_token_mean":
        return ((loss * mask).sum(-1) / lengths.clamp(min=1.0) * nonempty).sum() / s
    if mode == "seq_mean_token_sum":
        return ((loss * mask).sum(-1) * nonempty).sum() / s
    if mode == "token_sum_norm":
        return (loss * mask).sum() / (s * H)
    total = (loss * 0.0).sum()
    labels = [float(g) for g in torch.unique(group)]
    live = [g for g in labels if float(mask[group == g].sum()) > 0]
    for g in live:
        rows = group == g
        total = total + (loss[rows] * mask[rows]).sum() / mask[rows].sum()
    return total / max(len(live), 1)


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
@given(batch=batches())
def test_gradient_of_the_aggregate_is_the_vjp_with_the_weights(
    mode: str, batch: tuple[Array, Array, Array, Array, Array]
) -> None:
    mask, logp, old, adv, group = batch
    extra: dict[str, Any] = {"constant": H} if mode == "token_sum_norm" else {}
    if mode == "group_mean":
        extra["group"] = group
    w = aggregation_weights(mask, mode=mode, **extra)
    rho = np.exp(logp - old)
    ref_grad = w * (-adv[:, None] * rho)  # the VJP of −A·ρ with cotangent w
    x = torch.tensor(logp, requires_grad=True)
    loss = -torch.tensor(adv)[:, None] * torch.exp(x - torch.tensor(old))
    value = _torch_aggregate(loss, torch.tensor(mask), mode, torch.tensor(group))
    value.backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), ref_grad, rtol=1e-12, atol=1e-15)
    found = aggregate_loss(-adv[:, None] * rho, mask, mode=mode, **extra)
    assert found == pytest.approx(float(value.detach()), rel=1e-12, abs=1e-15)


@given(
    batch=batches(),
    mode=st.sampled_from(AGGREGATION_MODES),
    b=st.integers(0, 5),
    t=st.integers(0, 5),
)
def test_finite_difference_of_the_aggregate_is_the_weight(
    batch: tuple[Array, Array, Array, Array, Array], mode: str, b: int, t: int
) -> None:
    mask, logp, _old, _adv, group = batch
    b, t = b % mask.shape[0], t % mask.shape[1]
    extra: dict[str, Any] = {"constant": H} if mode == "token_sum_norm" else {}
    if mode == "group_mean":
        extra["group"] = group
    h = 1e-3
    up, down = logp.copy(), logp.copy()
    up[b, t] += h
    down[b, t] -= h
    slope = (
        aggregate_loss(up, mask, mode=mode, **extra)
        - aggregate_loss(down, mask, mode=mode, **extra)
    ) / (2 * h)
    w = aggregation_weights(mask, mode=mode, **extra)
    assert slope == pytest.approx(w[b, t], rel=1e-8, abs=1e-10)


# ---------------------------------------------------------------------------------------------
# properties, each paired with a wrong variant
# ---------------------------------------------------------------------------------------------


def _unmasked(mask: Any, *, mode: str, **kw: Any) -> Array:
    """Wrong: the row weights broadcast over padding too."""
    w = aggregation_weights(mask, mode=mode, **kw)
    per_row = w.max(axis=1, keepdims=True)
    return np.asarray(np.broadcast_to(per_row, w.shape), dtype=np.float64)


def _padded_width(mask: Any, *, mode: str, **kw: Any) -> Array:
    """Wrong: Dr GRPO dividing by the padded width T instead of the declared H."""
    m = np.asarray(mask, dtype=np.float64)
    if mode == "token_sum_norm":
        kw = dict(kw, constant=m.shape[1])
    return aggregation_weights(m, mode=mode, **kw)


def _check_padding_carries_no_weight(weights: Weights) -> Callable[[], None]:
    @given(batch=batches(), mode=st.sampled_from(AGGREGATION_MODES), junk=st.floats(-50, 50))
    def check(batch: tuple[Array, Array, Array, Array, Array], mode: str, junk: float) -> None:
        mask, logp, _o, _a, group = batch
        extra: dict[str, Any] = {"constant": H} if mode == "token_sum_norm" else {}
        if mode == "group_mean":
            extra["group"] = group
        w = weights(mask, mode=mode, **extra)
        moved = np.where(mask > 0, logp, junk)
        assert np.all(w[mask == 0] == 0.0)
        assert np.sum(w * moved) == pytest.approx(np.sum(w * np.where(mask > 0, logp, 0.0)))

    return check


def test_padding_carries_no_weight() -> None:
    run_property(_check_padding_carries_no_weight(aggregation_weights))
    rejects(_check_padding_carries_no_weight(_unmasked))


def _check_token_sum_norm_ignores_padded_width(weights: Weights) -> Callable[[], None]:
    @given(batch=batches(), extra_columns=st.integers(1, 4))
    def check(batch: tuple[Array, Array, Array, Array, Array], extra_columns: int) -> None:
        mask = batch[0]
        wider = np.hstack([mask, np.zeros((mask.shape[0], extra_columns))])
        narrow = weights(mask, mode="token_sum_norm", constant=H)
        wide = weights(wider, mode="token_sum_norm", constant=H)
        np.testing.assert_array_equal(wide[:, : mask.shape[1]], narrow)

    return check


def test_token_sum_norm_does_not_depend_on_the_padded_width() -> None:
    run_property(_check_token_sum_norm_ignores_padded_width(aggregation_weights))
    rejects(_check_token_sum_norm_ignores_padded_width(_padded_width))


def _check_length_weight_is_the_row_total(weights: Weights) -> Callable[[], None]:
    @given(batch=batches(), mode=st.sampled_from(AGGREGATION_MODES[:-1]))
    def check(batch: tuple[Array, Array, Array, Array, Array], mode: str) -> None:
        mask = batch[0]
        if mask.sum() == 0:
            return
        lengths = mask.sum(axis=1)
        s = int(np.count_nonzero(lengths))
        extra: dict[str, Any] = {"constant": H} if mode == "token_sum_norm" else {}
        rows = weights(mask, mode=mode, **extra).sum(axis=1)
        n = int(mask.sum()) if mode == "token_mean" else None
        total = length_weight(
            lengths.astype(int), mode=mode, sequence_count=s, token_count=n, **extra
        )
        np.testing.assert_allclose(rows, total, rtol=1e-12)

    return check


def _seq_mean_by_padded_width(mask: Any, *, mode: str, **kw: Any) -> Array:
    """Wrong: a sequence's token mean divided by the padded width instead of its length."""
    m = np.asarray(mask, dtype=np.float64)
    if mode != "seq_mean_token_mean":
        return aggregation_weights(m, mode=mode, **kw)
    s = max(np.count_nonzero(m.sum(axis=1)), 1)
    return np.asarray(m / (s * m.shape[1]), dtype=np.float64)


def test_length_weight_is_the_total_weight_of_a_row() -> None:
    run_property(_check_length_weight_is_the_row_total(aggregation_weights))
    rejects(_check_length_weight_is_the_row_total(_seq_mean_by_padded_width))


def test_seq_mean_token_mean_upweights_short_sequences_per_token() -> None:
    short, long = 2, 10
    w = length_weight([short, long], mode="seq_mean_token_mean", sequence_count=2)
    per_token = w / np.array([short, long])
    assert per_token[0] / per_token[1] == pytest.approx(long / short)
    flat = length_weight([short, long], mode="token_mean", sequence_count=2, token_count=12)
    assert flat[0] / short == pytest.approx(flat[1] / long, rel=1e-15)


# ---------------------------------------------------------------------------------------------
# validation: a call just inside and just outside each rule
# ---------------------------------------------------------------------------------------------


def test_token_sum_norm_refuses_a_missing_constant_and_says_why() -> None:
    assert aggregation_weights(MASK, mode="token_sum_norm", constant=1e-9)[0, 0] > 0
    with pytest.raises(ValueError, match=r"constant must be given for mode='token_sum_norm'.*"):
        aggregation_weights(MASK, mode="token_sum_norm")
    with pytest.raises(ValueError, match=r"never by the padded width T"):
        aggregation_weights(MASK, mode="token_sum_norm")
    with pytest.raises(ValueError, match=r"constant must be > 0"):
        aggregation_weights(MASK, mode="token_sum_norm", constant=0.0)
    with pytest.raises(ValueError, match=r"constant must be None unless mode='token_sum_norm'"):
        aggregation_weights(MASK, mode="token_mean", constant=4)


def test_declared_counts_must_cover_the_batch() -> None:
    assert aggregation_weights(MASK, mode="token_mean", token_count=6)[0, 0] == 1 / 6
    with pytest.raises(ValueError, match=r"token_count must be >= the valid tokens of this batch"):
        aggregation_weights(MASK, mode="token_mean", token_count=5)
    assert aggregation_weights(MASK, mode="seq_mean_token_sum", sequence_count=3)[1, 0] == 1 / 3
    with pytest.raises(ValueError, match=r"sequence_count must be >= the counted sequences"):
        aggregation_weights(MASK, mode="seq_mean_token_sum", sequence_count=2)
    with pytest.raises(ValueError, match=r"token_count must be >= 1"):
        aggregation_weights(np.zeros((1, 2)), mode="token_mean", token_count=0)
    with pytest.raises(TypeError, match=r"token_count must be an integer"):
        aggregation_weights(MASK, mode="token_mean", token_count=6.5)  # type: ignore[arg-type]


def test_mask_mode_and_choices_are_validated() -> None:
    with pytest.raises(ValueError, match=r"mask must hold only 0 and 1"):
        aggregation_weights([[1, 0.5]], mode="token_mean")
    with pytest.raises(ValueError, match=r"mode must be one of 'token_sum'"):
        aggregation_weights(MASK, mode="token-mean")
    with pytest.raises(ValueError, match=r"empty_rows must be one of 'excluded', 'counted'"):
        aggregation_weights(MASK, mode="token_mean", empty_rows="dropped")
    with pytest.raises(ValueError, match=r"denominator must be one of 'before_rejection'"):
        aggregation_weights(MASK, mode="token_mean", denominator="after")
    with pytest.raises(ValueError, match=r"mask must be 2-D"):
        aggregation_weights([1, 0], mode="token_mean")


def test_rejection_and_group_are_validated() -> None:
    assert aggregation_weights(MASK, mode="token_sum", rejection=[1, 1, 1, 0])[3].sum() == 0
    with pytest.raises(ValueError, match=r"rejection must have one entry per sequence"):
        aggregation_weights(MASK, mode="token_sum", rejection=[1, 1, 1])
    with pytest.raises(ValueError, match=r"rejection must hold only 0 and 1"):
        aggregation_weights(MASK, mode="token_sum", rejection=[1, 1, 1, 2])
    assert aggregation_weights(MASK, mode="group_mean", group=[0, 0, 1, 1]).sum() > 0
    with pytest.raises(ValueError, match=r"group must be given for mode='group_mean'"):
        aggregation_weights(MASK, mode="group_mean")
    with pytest.raises(ValueError, match=r"group must have one label per sequence"):
        aggregation_weights(MASK, mode="group_mean", group=[0, 0, 1])
    with pytest.raises(ValueError, match=r"group must hold integer labels"):
        aggregation_weights(MASK, mode="group_mean", group=[0, 0, 1, 1.5])
    with pytest.raises(ValueError, match=r"group must be None unless mode='group_mean'"):
        aggregation_weights(MASK, mode="token_mean", group=[0, 0, 1, 1])


def test_aggregate_loss_and_length_weight_validate() -> None:
    assert aggregate_loss([[2.0, 9.0]], [[1, 0]], mode="token_mean") == 2.0
    with pytest.raises(ValueError, match=r"mask and loss must have the same shape"):
        aggregate_loss([[2.0, 9.0]], [[1, 0, 0]], mode="token_mean")
    with pytest.raises(ValueError, match=r"loss must contain only finite values"):
        aggregate_loss([[np.nan, 9.0]], [[1, 0]], mode="token_mean")
    assert length_weight([0], mode="token_sum", sequence_count=1)[0] == 0.0
    with pytest.raises(ValueError, match=r"lengths must hold integer lengths >= 0"):
        length_weight([-1], mode="token_sum", sequence_count=1)
    with pytest.raises(ValueError, match=r"token_count must be given for mode='token_mean'"):
        length_weight([1], mode="token_mean", sequence_count=1)
    with pytest.raises(ValueError, match=r"token_count must be None unless mode='token_mean'"):
        length_weight([1], mode="token_sum", sequence_count=1, token_count=3)
    with pytest.raises(ValueError, match=r"mode must be one of"):
        length_weight([1], mode="group_mean", sequence_count=1)
    with pytest.raises(ValueError, match=r"sequence_count must be >= 1"):
        length_weight([1], mode="token_sum", sequence_count=0)
