"""The KL penalty in the reward (refimpl.losses.kl_penalized_rewards) and the batch-mean baseline
(the spec ``batch_mean_advantages``).

Exact values on hand-worked batches (Fractions); properties (the γ = 1 returns, padding inert,
linear in β), each run against a wrong variant it must reject; the specs ``kl_reward`` and
``batch_mean_advantages`` refuse wrong candidates; validation.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

from refimpl.errors import RefimplError
from refimpl.losses import kl_penalized_rewards
from refimpl.testing import check_conformance

Array = NDArray[np.float64]
Rewards = Callable[..., Array]

# ---------------------------------------------------------------------------------------------
# (1) exact values
# ---------------------------------------------------------------------------------------------


def test_hand_worked_batch() -> None:
    got = kl_penalized_rewards(
        [2.0, -3.0, 5.0],
        [[0.5, 0.25, 9.0], [1.0, -1.0, 4.0], [8.0, 8.0, 8.0]],
        beta=0.5,
        mask=[[1, 1, 0], [1, 1, 1], [0, 0, 0]],
        reward_clip=(-2.0, 2.0),
    )
    want = [
        [float(-Fraction(1, 4)), float(-Fraction(1, 8) + 2), 0.0],
        [-0.5, 0.5, float(-2 - 2)],
        [0.0, 0.0, 0.0],  # a row without a real token gets nothing
    ]
    assert got.tolist() == want


def test_beta_zero_puts_the_outcome_on_the_last_real_token() -> None:
    got = kl_penalized_rewards([1.5], [[3.0, 3.0, 3.0, 3.0]], beta=0.0, mask=[[1, 1, 1, 0]])
    assert got.tolist() == [[0.0, 0.0, 1.5, 0.0]]


def test_reward_shaping_shifts_then_scales_then_clips() -> None:
    got = kl_penalized_rewards(
        [3.0, -1.0, 0.5],
        [[0.5, 0.0], [0.0, 2.0], [0.0, 0.0]],
        beta=0.25,
        mask=[[1, 1], [1, 0], [1, 1]],
        reward_bias=-0.5,
        reward_scaling=4.0,
        reward_clip=(-5.0, 5.0),
    )
    shaped = [min(max((Fraction(r) - Fraction(1, 2)) * 4, -5), 5) for r in (3, -1, Fraction(1, 2))]
    assert shaped == [5, -5, 0]  # (3 - 1/2)·4 = 10 → 5; (−1 − 1/2)·4 = −6 → −5; 0
    want = [[-0.125, 5.0], [-5.0, 0.0], [0.0, 0.0]]
    assert got.tolist() == want


def test_identity_shaping_is_the_unshaped_reward() -> None:
    args = ([1.5, -2.0], [[0.5, 0.25], [1.0, 3.0]])
    plain = kl_penalized_rewards(*args, beta=0.5)
    shaped = kl_penalized_rewards(*args, beta=0.5, reward_bias=0.0, reward_scaling=1.0)
    assert shaped.tolist() == plain.tolist()


# ---------------------------------------------------------------------------------------------
# (2) properties, each paired with a wrong variant it rejects
# ---------------------------------------------------------------------------------------------


@st.composite
def batches(draw: st.DrawFn) -> tuple[Array, Array, Array, float]:
    """Dyadic rewards and KL (sums exact in float64), rows of 0..T real tokens, dyadic β."""
    b, t = draw(st.integers(1, 4)), draw(st.integers(1, 6))
    dyadic = st.integers(-64, 64).map(lambda k: k / 8.0)
    rewards = np.asarray(draw(st.lists(dyadic, min_size=b, max_size=b)))
    kl = np.asarray(draw(st.lists(dyadic, min_size=b * t, max_size=b * t))).reshape(b, t)
    lengths = draw(st.lists(st.integers(0, t), min_size=b, max_size=b))
    mask = (np.arange(t)[None, :] < np.asarray(lengths)[:, None]).astype(np.float64)
    beta = draw(st.sampled_from([0.0, 0.25, 0.5, 2.0]))
    return rewards, kl, mask, beta


def _wrong_first_token(rewards: Any, kl: Any, *, beta: float, mask: Any) -> Array:
    """The outcome on the first real token instead of the last."""
    m = np.asarray(mask)
    out = -beta * np.where(m > 0, np.asarray(kl), 0.0)
    first = np.argmax(m > 0, axis=1)
    rows = np.flatnonzero(m.any(axis=1))
    out[rows, first[rows]] += np.asarray(rewards)[rows]
    return out


def _wrong_unmasked(rewards: Any, kl: Any, *, beta: float, mask: Any) -> Array:
    """The KL term not masked (OpenRLHF's compute_reward, whose padding its returns mask)."""
    m = np.asarray(mask)
    out = kl_penalized_rewards(rewards, kl, beta=beta, mask=m)
    return out - beta * np.where(m > 0, 0.0, np.asarray(kl))


def check_returns(fn: Rewards) -> Callable[[], None]:
    @given(batches())
    def prop(batch: tuple[Array, Array, Array, float]) -> None:
        rewards, kl, mask, beta = batch
        got = fn(rewards, kl, beta=beta, mask=mask)
        returns = np.cumsum(np.where(mask > 0, got, 0.0)[:, ::-1], axis=1)[:, ::-1]
        tail_kl = np.cumsum((kl * mask)[:, ::-1], axis=1)[:, ::-1]
        want = np.where(mask > 0, rewards[:, None] - beta * tail_kl, 0.0)
        np.testing.assert_array_equal(np.where(mask > 0, returns, 0.0), want)

    return prop


def test_returns_carry_the_outcome_and_the_tail_kl() -> None:
    run_property(check_returns(kl_penalized_rewards))


def test_returns_property_rejects_the_outcome_on_the_first_token() -> None:
    rejects(check_returns(_wrong_first_token))


def check_padding_is_zero(fn: Rewards) -> Callable[[], None]:
    @given(batches())
    def prop(batch: tuple[Array, Array, Array, float]) -> None:
        rewards, kl, mask, beta = batch
        got = fn(rewards, kl + 100.0 * (mask == 0), beta=beta, mask=mask)
        assert np.all(got[mask == 0] == 0.0), got

    return prop


def test_padding_is_zero() -> None:
    run_property(check_padding_is_zero(kl_penalized_rewards))


def test_padding_property_rejects_an_unmasked_kl_term() -> None:
    rejects(check_padding_is_zero(_wrong_unmasked))


@st.composite
def shaped_batches(draw: st.DrawFn) -> tuple[Array, Array, Array, float, float, float, float]:
    """:func:`batches` with a dyadic bias, a power-of-two scaling and a symmetric clip."""
    rewards, kl, mask, beta = draw(batches())
    bias = draw(st.integers(-16, 16).map(lambda k: k / 4.0))
    scaling = draw(st.sampled_from([0.25, 0.5, 2.0, 4.0, -1.0]))
    clip = draw(st.sampled_from([0.5, 2.0, 8.0, 1e9]))
    return rewards, kl, mask, beta, bias, scaling, clip


def _wrong_scale_first(
    rewards: Any,
    kl: Any,
    *,
    beta: float,
    mask: Any,
    reward_bias: float,
    reward_scaling: float,
    reward_clip: tuple[float, float],
) -> Array:
    """Scales before it shifts: ``r·s + c``."""
    r = np.asarray(rewards) * reward_scaling + reward_bias
    return kl_penalized_rewards(r, kl, beta=beta, mask=mask, reward_clip=reward_clip)


def _wrong_clip_first(
    rewards: Any,
    kl: Any,
    *,
    beta: float,
    mask: Any,
    reward_bias: float,
    reward_scaling: float,
    reward_clip: tuple[float, float],
) -> Array:
    """Clips the raw reward, then shifts and scales it."""
    r = (np.clip(np.asarray(rewards), *reward_clip) + reward_bias) * reward_scaling
    return kl_penalized_rewards(r, kl, beta=beta, mask=mask)


def check_shaped_outcome(fn: Rewards) -> Callable[[], None]:
    @given(shaped_batches())
    def prop(batch: tuple[Array, Array, Array, float, float, float, float]) -> None:
        rewards, kl, mask, beta, bias, scaling, clip = batch
        got = fn(
            rewards,
            kl,
            beta=beta,
            mask=mask,
            reward_bias=bias,
            reward_scaling=scaling,
            reward_clip=(-clip, clip),
        )
        rows = mask.any(axis=1)
        returns = np.where(mask > 0, got, 0.0).sum(axis=1)
        c = Fraction(clip)
        outcome = [
            min(max((Fraction(r) + Fraction(bias)) * Fraction(scaling), -c), c) for r in rewards
        ]
        want = np.asarray([float(o) for o in outcome]) - beta * (kl * mask).sum(axis=1)
        np.testing.assert_array_equal(returns[rows], want[rows])

    return prop


def test_shaped_outcome_is_clip_of_shift_then_scale() -> None:
    run_property(check_shaped_outcome(kl_penalized_rewards))


@pytest.mark.parametrize("wrong", [_wrong_scale_first, _wrong_clip_first])
def test_shaped_outcome_property_rejects_a_wrong_order(wrong: Rewards) -> None:
    rejects(check_shaped_outcome(wrong))


# ---------------------------------------------------------------------------------------------
# (3) the specs refuse wrong candidates
# ---------------------------------------------------------------------------------------------

EXAMPLES = 40


def test_kl_reward_spec_refuses_the_outcome_on_the_first_token() -> None:
    def first(rewards: Any, kl: Any, *, beta: float, reward_clip: Any, mask: Any) -> Array:
        r = np.asarray(rewards)
        if reward_clip is not None:
            r = np.clip(r, reward_clip[0], reward_clip[1])
        return _wrong_first_token(r, kl, beta=beta, mask=mask)

    report = check_conformance(
        first,
        spec="kl_reward",
        checks=("values", "outcome_on_last_token"),
        max_examples=EXAMPLES,
        shrink=False,
    )
    failed = {r.name for r in report.results if r.status == "failed"}
    assert failed == {"values", "outcome_on_last_token"}, report.summary()


def test_kl_reward_spec_tells_an_unmasked_kl_term_to_declare_padding_ignored() -> None:
    def unmasked(rewards: Any, kl: Any, *, beta: float, reward_clip: Any, mask: Any) -> Array:
        out = kl_penalized_rewards(rewards, kl, beta=beta, reward_clip=reward_clip, mask=mask)
        return out - beta * np.where(np.asarray(mask) > 0, 0.0, np.asarray(kl))

    strict = check_conformance(unmasked, spec="kl_reward", max_examples=EXAMPLES, shrink=False)
    assert "zero_at_padding" in {r.name for r in strict.results if r.status == "failed"}
    declared = check_conformance(
        unmasked, spec="kl_reward", conventions={"padding": "ignored"}, max_examples=EXAMPLES
    )
    declared.raise_if_failed()


def test_kl_reward_spec_tells_a_candidate_without_a_clip_to_declare_reward_clip_none() -> None:
    def unclipped(rewards: Any, kl: Any, *, beta: float, reward_clip: Any, mask: Any) -> Array:
        return kl_penalized_rewards(rewards, kl, beta=beta, mask=mask)

    strict = check_conformance(unclipped, spec="kl_reward", max_examples=EXAMPLES, shrink=False)
    assert "values" in {r.name for r in strict.results if r.status == "failed"}
    declared = check_conformance(
        unclipped, spec="kl_reward", conventions={"reward_clip": "none"}, max_examples=EXAMPLES
    )
    declared.raise_if_failed()

    # The declaration only narrows the draws: a candidate that mistakes β for −β still fails.
    def flipped(rewards: Any, kl: Any, *, beta: float, reward_clip: Any, mask: Any) -> Array:
        return kl_penalized_rewards(rewards, -np.asarray(kl), beta=beta, mask=mask)

    wrong = check_conformance(
        flipped,
        spec="kl_reward",
        conventions={"reward_clip": "none"},
        max_examples=EXAMPLES,
        shrink=False,
    )
    assert "values" in {r.name for r in wrong.results if r.status == "failed"}


SHAPED = {"reward_shaping": "bias_scale", "reward_clip": "symmetric"}


def test_kl_reward_spec_passes_the_reference_with_shaping_and_a_symmetric_clip() -> None:
    report = check_conformance(
        kl_penalized_rewards, spec="kl_reward", conventions=SHAPED, max_examples=EXAMPLES
    )
    report.raise_if_failed()


def test_kl_reward_spec_refuses_shaping_in_the_wrong_order_or_ignored() -> None:
    def scale_first(rewards: Any, kl: Any, *, reward_bias: float, **kw: Any) -> Array:
        r = np.asarray(rewards) * kw["reward_scaling"] + reward_bias
        return kl_penalized_rewards(r, kl, **{**kw, "reward_scaling": 1.0})

    def unshaped(
        rewards: Any, kl: Any, *, reward_bias: float, reward_scaling: float, **kw: Any
    ) -> Array:
        return kl_penalized_rewards(rewards, kl, **kw)

    for wrong in (scale_first, unshaped):
        report = check_conformance(
            wrong, spec="kl_reward", conventions=SHAPED, max_examples=EXAMPLES, shrink=False
        )
        failed = {r.name for r in report.results if r.status == "failed"}
        assert {"values", "row_sum_is_the_return"} <= failed, report.summary()


def test_batch_mean_spec_refuses_whitening_and_a_group_mean() -> None:
    def whitened(r: Any) -> Array:
        x = np.asarray(r, dtype=np.float64)
        return np.asarray((x - x.mean()) / (x.std() + 1e-8), dtype=np.float64)

    def median(r: Any) -> Array:
        x = np.asarray(r, dtype=np.float64)
        return x - float(np.median(x))

    for wrong, must in ((whitened, {"values", "constant_batch_is_zero"}), (median, {"values"})):
        report = check_conformance(
            wrong, spec="batch_mean_advantages", max_examples=EXAMPLES, shrink=False
        )
        failed = {r.name for r in report.results if r.status == "failed"}
        assert must <= failed, report.summary()


# ---------------------------------------------------------------------------------------------
# (4) validation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"beta": -1e-12}, "beta"),
        ({"beta": 0.1, "reward_clip": (1.0, -1.0)}, "reward_clip"),
        ({"beta": 0.1, "reward_clip": (1.0,)}, "reward_clip"),
        ({"beta": 0.1, "reward_bias": float("nan")}, "reward_bias"),
        ({"beta": 0.1, "reward_scaling": float("inf")}, "reward_scaling"),
        ({"beta": 0.1, "reward_bias": 1e308, "reward_scaling": 10.0}, "reward_scaling"),
    ],
)
def test_parameters_are_validated(kwargs: dict[str, Any], name: str) -> None:
    with pytest.raises(RefimplError, match=name):
        kl_penalized_rewards([1.0], [[0.0]], **kwargs)


def test_one_reward_per_row_is_required() -> None:
    with pytest.raises(RefimplError, match="rewards"):
        kl_penalized_rewards([1.0, 2.0], [[0.0]], beta=0.1)
