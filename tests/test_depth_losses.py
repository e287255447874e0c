"""Depth tests of refimpl.losses: a loss check checks the gradient as well as the value, for every
loss and every value of every option, on data without accidental symmetry.

- **gradients of every option**: each loss's ``grad`` against central differences of
  ``Σ c·loss`` (non-unit cotangent, padded rows of unequal length, mixed-sign per-token
  advantages, asymmetric bands, clamps small enough to bind). A factor written ``sg[·]`` is held
  still by moving ``logp_old`` (or the behaviour log-probabilities) with ``logp``: the ratio, and
  so the detached weight, stays fixed while ``logp`` moves. Tokens at a kink (where central
  differences at two step sizes disagree) are left out.
- **degenerate outputs**: padding holds exact zeros in loss and gradient, shapes and dtypes.

Each property is also run against a deliberately wrong variant, which it must reject.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from _rules import bind, call_with, public_function
from _valid_calls import VALID_CALLS, Call
from _wrong_variants import rejects, run_property
from hypothesis import assume, given
from hypothesis import strategies as st
from numpy.typing import NDArray
from strategies_losses import (
    TokenBatch,
    asymmetric_bands,
    non_unit_weights,
    token_batches,
    unequal_groups,
)

from refimpl.losses import (
    AGGREGATION_MODES,
    LossTerms,
    aggregation_weights,
    cispo_loss,
    dppo_loss,
    gmpo_loss,
    grpo_advantages,
    gspo_loss,
    importance_weighted_kl,
    importance_weighted_pg_loss,
    is_batch_normalize,
    kl_penalty,
    log_ratio_penalty_loss,
    partition_gap,
    ppo_clip_loss,
    reinforce_loss,
    reinforce_pp_advantages,
    rloo_advantages,
    sapo_loss,
    token_entropy,
    token_logprobs,
    token_logprobs_grad,
)

Array = NDArray[np.float64]


def batch(seed: int, *, shape: tuple[int, int] = (3, 5), spread: float = 0.9) -> TokenBatch:
    """A fixed asymmetric batch: rows of lengths 5, 3 and 1, log-ratios up to ``spread``."""
    rng = np.random.default_rng(seed)
    lq = rng.uniform(-3.0, -0.2, size=shape)
    lp = np.minimum(lq + rng.uniform(-spread, spread, size=shape), -1e-3)
    a = rng.uniform(0.2, 2.5, size=shape) * rng.choice([-1.0, 1.0], size=shape)
    lengths = np.array([shape[1], max(1, shape[1] - 2), 1])[: shape[0]]
    mask = (np.arange(shape[1])[None, :] < lengths[:, None]).astype(np.float64)
    c = rng.uniform(0.3, 2.0, size=shape)
    return TokenBatch(lp, lq, a, mask, c)


#: A loss as a function of (logp, logp_old, batch); ``frozen`` says that logp_old moves with logp
#: in the differences (the loss's weight is a stop-gradient of the ratio).
Case = tuple[str, Callable[[Array, Array, TokenBatch], LossTerms], bool]


def _ppo(**kw: Any) -> Callable[[Array, Array, TokenBatch], LossTerms]:
    return lambda lp, lq, b: ppo_clip_loss(
        lp, lq, b.advantages, mask=b.mask, cotangent=b.cotangent, **kw
    )


def _seq(
    fn: Callable[..., LossTerms], **kw: Any
) -> Callable[[Array, Array, TokenBatch], LossTerms]:
    return lambda lp, lq, b: fn(lp, lq, b.advantages, mask=b.mask, cotangent=b.cotangent, **kw)


CASES: list[Case] = [
    (
        "reinforce",
        lambda lp, lq, b: reinforce_loss(lp, b.advantages, mask=b.mask, cotangent=b.cotangent),
        False,
    ),
    ("iw", _seq(importance_weighted_pg_loss), False),
    ("iw clamp", _seq(importance_weighted_pg_loss, log_ratio_clamp=0.35), False),
    ("iw cap", _seq(importance_weighted_pg_loss, cap=1.3), True),
    ("dro", _seq(log_ratio_penalty_loss, tau=0.37), False),
    ("ppo", _ppo(eps_low=0.15, eps_high=0.3), False),
    ("ppo dual", _ppo(eps_low=0.15, eps_high=0.3, dual_clip=1.6), False),
    ("ppo clamp", _ppo(eps_low=0.25, eps_high=0.1, log_ratio_clamp=0.4), False),
    ("ppo no low clip", _ppo(eps_low=0.0, eps_high=0.45), False),
    ("cispo", _seq(cispo_loss, eps_high=0.2), True),
    ("cispo two-sided", _seq(cispo_loss, eps_high=0.2, eps_low=0.3), True),
    ("cispo clamp", _seq(cispo_loss, eps_high=2.0, log_ratio_clamp=0.3), True),
    ("sapo", _seq(sapo_loss, tau_pos=1.7, tau_neg=0.6), False),
    ("sapo clamp", _seq(sapo_loss, tau_pos=0.8, tau_neg=2.5, log_ratio_clamp=0.3), False),
    ("dppo tv log", _seq(dppo_loss, delta_low=0.05, delta_high=0.12), True),
    ("dppo tv log cap", _seq(dppo_loss, delta_low=0.05, delta_high=0.12, cap=1.2), True),
    ("dppo kl log", _seq(dppo_loss, divergence="kl", delta_low=0.01, delta_high=0.04), True),
    ("dppo tv ratio", _seq(dppo_loss, delta_low=0.08, delta_high=0.03, surrogate="ratio"), False),
    (
        "dppo kl ratio clamp",
        _seq(dppo_loss, divergence="kl", delta_low=0.03, surrogate="ratio", log_ratio_clamp=0.4),
        False,
    ),
    ("gspo", _seq(gspo_loss, eps_low=0.1, eps_high=0.25), False),
    ("gspo cap", _seq(gspo_loss, eps_low=0.3, eps_high=0.05, log_ratio_cap=0.2), False),
    ("gmpo", _seq(gmpo_loss, eps_low=0.2, eps_high=0.35), False),
    ("gmpo narrow", _seq(gmpo_loss, eps_low=0.05, eps_high=0.02), False),
]

KL_BASE = ("k1", "abs", "k2", "k3", "kl", "mse", "low_var_kl")
KL_CLAMPS: list[dict[str, Any]] = [
    {},
    {"clamp": (-0.3, 0.2)},
    {"log_ratio_clamp": 0.4},
    {"clamp": 0.25, "log_ratio_clamp": (-0.5, None)},
]


def _kl(estimator: str, options: dict[str, Any]) -> Callable[[Array, Array, TokenBatch], LossTerms]:
    def loss(lp: Array, lq: Array, b: TokenBatch) -> LossTerms:
        return kl_penalty(
            lp, lq, estimator=estimator, mask=b.mask, cotangent=b.cotangent, **options
        )

    return loss


def _iw_kl(
    estimator: str, cap: float | None, weighting: str
) -> Callable[[Array, Array, TokenBatch], LossTerms]:
    def loss(lp: Array, lq: Array, b: TokenBatch) -> LossTerms:
        reference = b.logp_old + 0.3 * b.advantages  # fixed; the behaviour is the moving lq
        return importance_weighted_kl(
            lp, reference, lq, estimator=estimator, weighting=weighting,  # type: ignore[arg-type]
            weight_cap=cap, mask=b.mask, cotangent=b.cotangent,
        )  # fmt: skip

    return loss


for _est in KL_BASE:
    for _i, _kw in enumerate(KL_CLAMPS if _est != "low_var_kl" else KL_CLAMPS[:1]):
        CASES.append((f"kl {_est} {_i}", _kl(_est, _kw), False))
for _cap in (None, 1.4):
    for _est in ("k1", "k2", "k3", "abs"):
        for _weighting, _frozen in (("differentiable", False), ("detached", True)):
            _name = f"iw-kl {_weighting} {_est} cap={_cap}"
            CASES.append((_name, _iw_kl(_est, _cap, _weighting), _frozen))


def central(
    total: Callable[[Array, Array], float], lp: Array, lq: Array, frozen: bool, h: float
) -> Array:
    out = np.zeros_like(lp)
    for idx in np.ndindex(lp.shape):
        up, down = lp.copy(), lp.copy()
        up[idx] += h
        down[idx] -= h
        uq, dq = lq.copy(), lq.copy()
        if frozen:
            uq[idx] += h
            dq[idx] -= h
        out[idx] = (total(up, uq) - total(down, dq)) / (2 * h)
    return out


def check_gradient(case: Case, b: TokenBatch) -> int:
    """``grad`` against central differences; returns how many tokens were compared."""
    _, loss, frozen = case
    terms = loss(b.logp, b.logp_old, b)

    def total(lp: Array, lq: Array) -> float:
        return float(np.sum(b.cotangent * b.mask * loss(lp, lq, b).loss))

    fd = central(total, b.logp, b.logp_old, frozen, 1e-6)
    fd_fine = central(total, b.logp, b.logp_old, frozen, 2.5e-7)
    smooth = np.abs(fd - fd_fine) <= 1e-5 * (1.0 + np.abs(fd))
    real = (b.mask > 0) & smooth
    np.testing.assert_allclose(terms.grad[real], fd[real], rtol=2e-5, atol=2e-6)
    assert np.all(terms.grad[b.mask == 0] == 0.0)
    assert np.all(terms.loss[b.mask == 0] == 0.0)
    assert terms.loss.dtype == terms.grad.dtype == np.float64
    assert terms.loss.shape == terms.grad.shape == b.logp.shape
    return int(np.sum(real))


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_every_loss_option_has_the_gradient_of_its_value(case: Case) -> None:
    compared = sum(check_gradient(case, batch(seed)) for seed in (3, 8))
    assert compared >= 10  # most real tokens (18 over both batches) are away from kinks


def test_gradient_check_rejects_a_wrong_gradient() -> None:
    def ppo_with_unweighted_grad(lp: Array, lq: Array, b: TokenBatch) -> LossTerms:
        terms = ppo_clip_loss(lp, lq, b.advantages, eps_low=0.15, eps_high=0.3, mask=b.mask)
        return LossTerms(terms.loss, terms.grad)  # the cotangent forgotten

    def sapo_with_one_temperature(lp: Array, lq: Array, b: TokenBatch) -> LossTerms:
        value = sapo_loss(lp, lq, b.advantages, tau_pos=1.7, tau_neg=0.6, mask=b.mask).loss
        grad = sapo_loss(lp, lq, b.advantages, tau_pos=1.7, tau_neg=1.7, mask=b.mask,
                         cotangent=b.cotangent).grad  # fmt: skip
        return LossTerms(value, grad)

    def cispo_without_stop_gradient(lp: Array, lq: Array, b: TokenBatch) -> LossTerms:
        terms = cispo_loss(lp, lq, b.advantages, eps_high=0.2, mask=b.mask, cotangent=b.cotangent)
        rho = np.exp(lp - lq)
        live = (rho < 1.2) * b.cotangent * b.mask * terms.loss  # d(w)/dlogp = w where unclipped
        return LossTerms(terms.loss, terms.grad + live)

    for wrong, frozen in (
        (ppo_with_unweighted_grad, False),
        (sapo_with_one_temperature, False),
        (cispo_without_stop_gradient, True),
    ):
        rejects(check_gradient, ("wrong", wrong, frozen), batch(3))


@pytest.mark.parametrize("estimator", ["k1", "abs", "k2", "k3", "kl", "mse", "low_var_kl"])
def test_straight_through_estimators_have_the_value_of_theirs_and_the_gradient_of_k2(
    estimator: str,
) -> None:
    b = batch(5)
    kw: dict[str, Any] = {"mask": b.mask, "cotangent": b.cotangent}
    plain = kl_penalty(b.logp, b.logp_old, estimator=estimator, **kw)
    straight = kl_penalty(b.logp, b.logp_old, estimator=estimator + "+", **kw)
    k2 = kl_penalty(b.logp, b.logp_old, estimator="k2", **kw)
    assert straight.loss.tolist() == plain.loss.tolist()
    np.testing.assert_allclose(straight.grad, k2.grad, rtol=1e-15, atol=0)
    assert np.any(straight.grad != plain.grad) or estimator in ("k2", "mse")


@pytest.mark.parametrize("cap", [None, 1.4])
def test_gradient_only_weighting_has_the_value_of_k_and_the_detached_gradient(
    cap: float | None,
) -> None:
    b = batch(6)
    ref = b.logp_old + 0.3 * b.advantages
    kw: dict[str, Any] = {"weight_cap": cap, "mask": b.mask, "cotangent": b.cotangent}
    only = importance_weighted_kl(
        b.logp, ref, b.logp_old, estimator="k3", weighting="gradient_only", **kw
    )
    detached = importance_weighted_kl(b.logp, ref, b.logp_old, estimator="k3", **kw)
    plain = kl_penalty(b.logp, ref, estimator="k3", mask=b.mask, cotangent=b.cotangent)
    np.testing.assert_allclose(only.loss, plain.loss, rtol=1e-15, atol=1e-300)
    np.testing.assert_allclose(only.grad, detached.grad, rtol=1e-15, atol=0)
    w = np.minimum(np.exp(b.logp - b.logp_old), np.inf if cap is None else cap)
    np.testing.assert_allclose(detached.loss, w * plain.loss, rtol=1e-14, atol=0)


# ---------------------------------------------------------------------------------------------
# values on data without accidental symmetry: unequal groups, asymmetric bands, non-unit weights
# ---------------------------------------------------------------------------------------------


def grpo_reference(
    rewards: Array, group: NDArray[np.int64], *, std: str, eps: float, placement: str, scope: str
) -> Array:
    out = np.zeros(rewards.size)
    ddof = {"sample": 1, "population": 0, "none": 0}[std]
    for i, g in enumerate(group):
        members = rewards[group == g]
        centred = rewards[i] - members.mean()
        pool = members if scope == "group" else rewards
        var = float(np.sum((pool - pool.mean()) ** 2) / (pool.size - ddof))
        if std == "none":
            out[i] = centred
        elif placement == "std":
            out[i] = centred / (np.sqrt(var) + eps)
        elif placement == "variance":
            out[i] = centred / np.sqrt(var + eps)
        else:
            out[i] = centred / np.sqrt(max(var, eps))
    return out


GrpoFn = Callable[..., Any]


def check_grpo_on_unequal_groups(grpo: GrpoFn) -> Any:
    @given(
        unequal_groups(),
        st.sampled_from(["sample", "population", "none"]),
        st.sampled_from(["std", "variance", "floor"]),
        st.sampled_from(["group", "batch"]),
        st.sampled_from([1e-6, 0.3]),
    )
    def prop(
        data: tuple[Array, NDArray[np.int64]], std: str, placement: str, scope: str, eps: float
    ) -> None:
        rewards, group = data
        got = grpo(rewards, group=group, std=std, eps=eps, eps_placement=placement, std_scope=scope)
        want = grpo_reference(rewards, group, std=std, eps=eps, placement=placement, scope=scope)
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12)

    return prop


def test_grpo_every_option_on_unequal_groups() -> None:
    run_property(check_grpo_on_unequal_groups(grpo_advantages))


def test_grpo_property_rejects_a_mean_over_the_average_group_size() -> None:
    # a group's sum divided by the batch's average group size: right only when every group has
    # the same size, which the strategy never draws
    def wrong(rewards: Array, *, group: NDArray[np.int64], **kw: Any) -> Array:
        size = rewards.size / len(set(group.tolist()))
        means = np.array([rewards[group == g].sum() / size for g in group])
        shift = np.asarray(grpo_advantages(rewards - means, group=group, **kw))
        return shift if kw["std"] != "none" else rewards - means

    rejects(check_grpo_on_unequal_groups(wrong))


def check_rloo_exact(rloo: GrpoFn) -> Any:
    @given(unequal_groups())
    def prop(data: tuple[Array, NDArray[np.int64]]) -> None:
        rewards, group = data
        exact = [Fraction(float(r)).limit_denominator(64) for r in rewards]
        got = rloo(exact, group=group)
        for i, g in enumerate(group):
            others = [exact[j] for j in range(len(exact)) if group[j] == g and j != i]
            assert got[i] == exact[i] - sum(others, Fraction(0)) / len(others)

    return prop


def test_rloo_is_exact_leave_one_out_on_unequal_groups() -> None:
    run_property(check_rloo_exact(rloo_advantages))


def test_rloo_property_rejects_a_baseline_that_keeps_the_sample() -> None:
    def wrong(rewards: list[Fraction], *, group: Any) -> list[Fraction]:
        return [
            r
            - sum((x for x, g in zip(rewards, group, strict=True) if g == gi), Fraction(0))
            / sum(1 for g in group if g == gi)
            for r, gi in zip(rewards, group, strict=True)
        ]

    rejects(check_rloo_exact(wrong))


def check_ppo_values(ppo: Callable[..., LossTerms]) -> Any:
    @given(token_batches(), asymmetric_bands(), st.sampled_from([None, 1.7]))
    def prop(b: TokenBatch, band: tuple[float, float], dual: float | None) -> None:
        low, high = band
        got = ppo(b.logp, b.logp_old, b.advantages, eps_low=low, eps_high=high, dual_clip=dual,
                  mask=b.mask).loss  # fmt: skip
        rho = np.exp(b.logp - b.logp_old)
        a = b.advantages
        want = np.maximum(-a * rho, -a * np.clip(rho, 1.0 - low, 1.0 + high))
        if dual is not None:
            want = np.where(a < 0, np.minimum(want, -dual * a), want)
        np.testing.assert_allclose(got, np.where(b.mask > 0, want, 0.0), rtol=1e-13, atol=1e-14)

    return prop


def test_ppo_values_with_asymmetric_bands() -> None:
    run_property(check_ppo_values(ppo_clip_loss))


def test_ppo_value_property_rejects_swapped_bands() -> None:
    def swapped(lp: Array, lq: Array, a: Array, *, eps_low: float, eps_high: float,
                **kw: Any) -> LossTerms:  # fmt: skip
        return ppo_clip_loss(lp, lq, a, eps_low=min(eps_high, 0.9), eps_high=eps_low, **kw)

    rejects(check_ppo_values(swapped))


def check_batch_normalize(normalize: Callable[..., Array]) -> Any:
    @given(non_unit_weights(size=6), st.sampled_from(["token", "sequence"]))
    def prop(w: Array, level: str) -> None:
        weights = w.reshape(2, 3)
        mask = np.array([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
        got = normalize(weights, mask=mask, level=level)
        if level == "token":
            mean = float(np.sum(weights * mask) / 4.0)
        else:
            mean = float((weights[0].mean() + weights[1, 0]) / 2.0)
        np.testing.assert_allclose(got, weights * mask / mean, rtol=1e-14, atol=0)

    return prop


def test_batch_normalisation_on_non_unit_weights() -> None:
    run_property(check_batch_normalize(is_batch_normalize))


def test_batch_normalisation_property_rejects_the_padded_mean() -> None:
    def padded(w: Array, *, mask: Array, level: str) -> Array:
        return np.asarray(w * mask / np.mean(w), dtype=np.float64)

    rejects(check_batch_normalize(padded))


# ---------------------------------------------------------------------------------------------
# aggregation: every mode and option in exact arithmetic, on unequal rows and groups
# ---------------------------------------------------------------------------------------------


def aggregation_reference(
    mask: Array, *, mode: str, group: list[int], empty_rows: str, rejection: Array,
    denominator: str, extra_tokens: int, extra_sequences: int, constant: int,
) -> list[list[Fraction]]:  # fmt: skip
    kept = mask * rejection
    counts = kept if denominator == "after_rejection" else mask
    lengths = [int(row.sum()) for row in counts]
    rows = len(lengths)
    n = sum(lengths) + extra_tokens
    if mode == "group_mean":
        tokens = {g: sum(L for L, h in zip(lengths, group, strict=True) if h == g) for g in group}
        counted = [g for g in tokens if tokens[g] > 0 or empty_rows == "counted"]
        s = len(counted) + extra_sequences
    else:
        s = sum(1 for L in lengths if L > 0 or empty_rows == "counted") + extra_sequences
    out = []
    for b in range(rows):
        row = []
        for t in range(mask.shape[1]):
            if kept[b, t] == 0 or lengths[b] == 0:
                row.append(Fraction(0))
                continue
            weight = {
                "token_sum": Fraction(1),
                "token_mean": Fraction(1, n),
                "seq_mean_token_mean": Fraction(1, s * lengths[b]),
                "seq_mean_token_sum": Fraction(1, s),
                "token_sum_norm": Fraction(1, s * constant),
                "group_mean": Fraction(1, s * tokens.get(group[b], 1)) if mode == "group_mean"
                else Fraction(0),
            }[mode]  # fmt: skip
            row.append(weight)
        out.append(row)
    return out


@st.composite
def aggregation_cases(draw: st.DrawFn) -> dict[str, Any]:
    rows = draw(st.integers(3, 5))
    width = draw(st.integers(2, 4))
    lengths = draw(st.lists(st.integers(0, width), min_size=rows, max_size=rows))
    assume(len(set(lengths)) > 1)
    mask = (np.arange(width)[None, :] < np.asarray(lengths)[:, None]).astype(np.float64)
    rejection = np.asarray(
        draw(
            st.lists(st.sampled_from([0.0, 1.0, 1.0]), min_size=rows * width, max_size=rows * width)
        )
    ).reshape(rows, width)
    return {
        "mask": mask,
        "group": draw(st.lists(st.sampled_from([4, 9, 2]), min_size=rows, max_size=rows)),
        "empty_rows": draw(st.sampled_from(["excluded", "counted"])),
        "rejection": rejection,
        "denominator": draw(st.sampled_from(["before_rejection", "after_rejection"])),
        "extra_tokens": draw(st.sampled_from([0, 3])),
        "extra_sequences": draw(st.sampled_from([0, 2])),
        "constant": draw(st.sampled_from([3, 7])),
    }


def check_aggregation(weights_of: Callable[..., Array]) -> Any:
    @given(aggregation_cases(), st.sampled_from(AGGREGATION_MODES))
    def prop(case: dict[str, Any], mode: str) -> None:
        kw: dict[str, Any] = {
            "mode": mode,
            "empty_rows": case["empty_rows"],
            "rejection": case["rejection"],
            "denominator": case["denominator"],
        }
        extra_tokens = case["extra_tokens"] if mode == "token_mean" else 0
        extra_sequences = case["extra_sequences"] if mode in SEQUENCE_MODES else 0
        if mode == "group_mean":
            kw["group"] = case["group"]
        if mode == "token_sum_norm":
            kw["constant"] = case["constant"]
        if extra_tokens:
            kw["token_count"] = int(_counts(case).sum()) + extra_tokens
        if extra_sequences:
            kw["sequence_count"] = _own_count(case, mode) + extra_sequences
        want = aggregation_reference(
            mode=mode, **{**case, "extra_tokens": extra_tokens, "extra_sequences": extra_sequences}
        )
        got = weights_of(case["mask"], **kw)
        assert got.shape == case["mask"].shape
        assert got.dtype == np.float64
        for b, row in enumerate(want):
            for t, w in enumerate(row):
                assert abs(Fraction(float(got[b, t])) - w) <= Fraction(math.ulp(float(w) or 1.0))

    return prop


SEQUENCE_MODES = ("seq_mean_token_mean", "seq_mean_token_sum", "token_sum_norm", "group_mean")


def _counts(case: dict[str, Any]) -> Array:
    kept = case["mask"] * case["rejection"]
    return np.asarray(kept if case["denominator"] == "after_rejection" else case["mask"])


def _own_count(case: dict[str, Any], mode: str) -> int:
    lengths = _counts(case).sum(axis=1)
    if mode == "group_mean":
        groups = dict.fromkeys(case["group"], 0.0)
        for g, length in zip(case["group"], lengths, strict=True):
            groups[g] += length
        return sum(1 for v in groups.values() if v > 0 or case["empty_rows"] == "counted")
    return int(sum(1 for v in lengths if v > 0 or case["empty_rows"] == "counted"))


def test_aggregation_every_mode_and_option_in_exact_arithmetic() -> None:
    run_property(check_aggregation(aggregation_weights))


def test_aggregation_property_rejects_counting_padded_tokens_after_rejection() -> None:
    def wrong(mask: Array, **kw: Any) -> Array:
        kw["denominator"] = "before_rejection"  # the option ignored
        return aggregation_weights(mask, **kw)

    rejects(check_aggregation(wrong))


# ---------------------------------------------------------------------------------------------
# exact rewards through every GRPO option; all-empty masks; gradients exactly at a bound
# ---------------------------------------------------------------------------------------------


@given(
    unequal_groups(),
    st.sampled_from(["sample", "population"]),
    st.sampled_from(["std", "variance", "floor"]),
    st.sampled_from(["group", "batch"]),
)
def test_grpo_on_fraction_rewards_is_the_float_formula_for_every_option(
    data: tuple[Array, NDArray[np.int64]], std: str, placement: str, scope: str
) -> None:
    rewards, group = data
    exact = [Fraction(float(r)).limit_denominator(16) for r in rewards]
    floats = np.array([float(x) for x in exact])
    got = grpo_advantages(exact, group=group, std=std, eps_placement=placement, std_scope=scope)  # type: ignore[call-overload]
    want = grpo_reference(floats, group, std=std, eps=1e-6, placement=placement, scope=scope)
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
def test_an_all_padding_batch_gets_zero_weights_in_every_mode(mode: str) -> None:
    kw: dict[str, Any] = {"mode": mode}
    if mode == "group_mean":
        kw["group"] = [1, 2, 1]
    if mode == "token_sum_norm":
        kw["constant"] = 5
    for empty_rows in ("excluded", "counted"):
        got = aggregation_weights(np.zeros((3, 4)), empty_rows=empty_rows, **kw)
        assert got.shape == (3, 4)
        assert got.dtype == np.float64
        assert np.all(got == 0.0)
        assert not np.any(np.signbit(got))
    rejected = aggregation_weights(
        np.ones((3, 4)), rejection=np.zeros((3, 4)), denominator="after_rejection", **kw
    )
    assert np.all(rejected == 0.0)


def _bound_and_inside(bound: float) -> tuple[Array, Array, Array]:
    """logp_old, and logp with the log-ratio exactly at ``±bound`` and ``2^-30`` inside it."""
    lq = np.full((1, 4), -2.0)
    step = bound - 2.0**-30
    at = lq + np.array([[bound, -bound, 0.0, 0.0]])
    inside = lq + np.array([[step, -step, 0.0, 0.0]])
    assert (at - lq)[0, :2].tolist() == [bound, -bound]  # exact in float64
    assert (inside - lq)[0, :2].tolist() == [step, -step]
    return lq, at, inside


BOUND_CASES: list[tuple[str, Callable[[Array, Array, Array], Array]]] = [
    ("gmpo", lambda lp, lq, a: gmpo_loss(lp, lq, a, eps_low=0.25, eps_high=0.25).grad),
    (
        "iw clamp",
        lambda lp, lq, a: importance_weighted_pg_loss(lp, lq, a, log_ratio_clamp=0.25).grad,
    ),
    (
        "ppo clamp",
        lambda lp, lq, a: (
            ppo_clip_loss(lp, lq, a, eps_low=0.9, eps_high=5.0, log_ratio_clamp=0.25).grad
        ),
    ),
    (
        "sapo clamp",
        lambda lp, lq, a: sapo_loss(lp, lq, a, tau_pos=1.0, tau_neg=1.0, log_ratio_clamp=0.25).grad,
    ),
    (
        "kl log-ratio clamp",
        lambda lp, lq, a: kl_penalty(lp, lq, estimator="k2", log_ratio_clamp=0.25).grad,
    ),
    ("kl value clamp", lambda lp, lq, a: kl_penalty(lp, lq, estimator="k1", clamp=0.25).grad),
]


@pytest.mark.parametrize("case", BOUND_CASES, ids=[c[0] for c in BOUND_CASES])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_bound_passes_the_gradient_as_torch_clamp_does(
    case: tuple[str, Callable[[Array, Array, Array], Array]], sign: float
) -> None:
    # torch.clamp passes the gradient at its bounds: exactly at a bound the gradient is the one
    # just inside it (up to the 2^-30 move of the ratio), never half of it or 0
    _, grad_of = case
    lq, at, inside = _bound_and_inside(0.25)
    a = np.full((1, 4), 1.5 * sign)
    on_bound, near = grad_of(at, lq, a), grad_of(inside, lq, a)
    np.testing.assert_allclose(on_bound, near, rtol=1e-8, atol=0)
    assert np.all(on_bound[0, :2] != 0.0)


def test_bound_check_rejects_a_half_gradient_at_the_bound() -> None:
    def halved(lp: Array, lq: Array, a: Array) -> Array:  # a tie split although clamp passes
        grad = gmpo_loss(lp, lq, a, eps_low=0.25, eps_high=0.25).grad
        return np.where(np.abs(lp - lq) == 0.25, 0.5, 1.0) * grad

    rejects(test_a_bound_passes_the_gradient_as_torch_clamp_does, ("halved", halved), 1.0)


def test_fraction_grpo_check_rejects_a_batch_variance_about_the_wrong_centre() -> None:
    def wrong(rewards: list[Fraction], **kw: Any) -> Array:
        right = np.asarray(grpo_advantages(rewards, **kw), dtype=np.float64)
        if kw["std_scope"] != "batch":
            return right
        return right * 1.5  # any other variance, e.g. about −mean instead of the mean

    def check(data: tuple[Array, NDArray[np.int64]]) -> None:
        rewards, group = data
        exact = [Fraction(float(r)).limit_denominator(16) for r in rewards]
        floats = np.array([float(x) for x in exact])
        got = wrong(exact, group=group, std="sample", eps_placement="std", std_scope="batch")
        want = grpo_reference(floats, group, std="sample", eps=1e-6, placement="std", scope="batch")
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)

    rewards = np.array([0.5, 2.0, -1.0, 0.25, 3.0])
    rejects(check, (rewards, np.array([7, 7, 3, 3, 3], dtype=np.int64)))


def reinforce_pp_reference(
    rewards: Array, group: NDArray[np.int64] | None, lengths: Array, *, std: str, eps: float,
    placement: str,
) -> Array:  # fmt: skip
    x = rewards.copy()
    if group is not None:
        x = np.array([r - rewards[group == g].mean() for r, g in zip(rewards, group, strict=True)])
    total = float(lengths.sum())
    mean = float(np.sum(lengths * x) / total)
    centred = x - mean
    if std == "none":
        return np.where(lengths > 0, centred, 0.0)
    ddof = 1 if std == "sample" else 0
    var = float(np.sum(lengths * centred**2) / (total - ddof))
    scale = {"std": np.sqrt(var) + eps, "variance": np.sqrt(var + eps),
             "floor": np.sqrt(max(var, eps))}[placement]  # fmt: skip
    return np.where(lengths > 0, centred / scale, 0.0)


def check_reinforce_pp(fn: Callable[..., Array]) -> Any:
    @given(
        unequal_groups(),
        st.booleans(),
        st.sampled_from(["sample", "population", "none"]),
        st.sampled_from(["std", "variance", "floor"]),
        st.data(),
    )
    def prop(
        data: tuple[Array, NDArray[np.int64]], grouped: bool, std: str, placement: str,
        more: st.DataObject,
    ) -> None:  # fmt: skip
        rewards, group = data
        lengths = np.asarray(more.draw(st.lists(st.integers(0, 4), min_size=rewards.size,
                                                max_size=rewards.size)), dtype=np.float64)  # fmt: skip
        assume(lengths.sum() >= 3 and len(set(lengths.tolist())) > 1)
        mask = (np.arange(4)[None, :] < lengths[:, None]).astype(np.float64)
        got = fn(rewards, group=group if grouped else None, mask=mask, std=std, eps=0.01,
                 eps_placement=placement)  # fmt: skip
        want = reinforce_pp_reference(rewards, group if grouped else None, lengths, std=std,
                                      eps=0.01, placement=placement)  # fmt: skip
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12)

    return prop


def test_reinforce_pp_every_option_with_token_weights() -> None:
    run_property(check_reinforce_pp(reinforce_pp_advantages))


def test_reinforce_pp_property_rejects_sequence_weights() -> None:
    def per_sequence(rewards: Array, *, mask: Array, **kw: Any) -> Array:
        out = reinforce_pp_advantages(rewards, mask=(mask.sum(axis=1, keepdims=True) > 0)
                                      * np.ones((1, 1)), **kw)  # fmt: skip
        return np.where(mask.sum(axis=1) > 0, out, 0.0)

    rejects(check_reinforce_pp(per_sequence))


def test_every_law_of_a_split_dependence_is_stated_for_its_own_case() -> None:
    # each branch of the stated dependence, checked on the case it describes (and only there)
    mask = np.array([[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 1]])
    splits = [[[0, 1], [2], [3]]]  # one rank, three micro-batches of unequal sizes
    expected = {
        ("token_sum", "trl_bnpo", None): "scaled by the same factor",
        ("token_mean", "trl_bnpo", None): "own token count",
        ("group_mean", "trl_bnpo", (5, 5, 8, 8)): "its own groups",
        ("seq_mean_token_mean", "trl_grpo", None): "same number of counted sequences",
    }
    for (mode, rule, group), words in expected.items():
        kw: dict[str, Any] = {} if group is None else {"group": list(group)}
        gap = partition_gap(mask, splits=splits, mode=mode, rule=rule, **kw)
        assert not gap.invariant
        assert gap.dependence.startswith(f"{mode} under ")
        assert words in gap.dependence
        others = [w for w in expected.values() if w != words]
        assert not any(w in gap.dependence for w in others)
        assert "Weight ratios: rank 0 micro-batch 0: x" in gap.dependence
    same = partition_gap(mask, splits=splits, mode="token_mean", rule="verl")
    assert same.invariant
    assert same.dependence == ""


def test_padding_may_hold_any_logits_and_any_token_id() -> None:
    # padding positions (mask 0) hold logits that would overflow at the temperature and ids
    # outside the vocabulary: never read, never refused; a vocabulary of one token included
    logits = np.array([[[2.0, 0.5, -1.0], [1e308, -1e308, 3.0]]])
    tokens = np.array([[2, -100]])
    mask = np.array([[1.0, 0.0]])
    for kw in ({}, {"top_k": 2}, {"top_p": 0.7}):
        lp = token_logprobs(logits, tokens, temperature=0.5, mask=mask, **kw)
        assert lp.shape == (1, 2)
        assert lp[0, 1] == 0.0
        grad = token_logprobs_grad(logits, tokens, temperature=0.5, mask=mask, **kw)
        assert np.all(grad[0, 1] == 0.0)
        entropy = token_entropy(logits, temperature=0.5, mask=mask, **kw)
        assert entropy[0, 1] == 0.0
    y = logits[0, 0] / 0.5
    want = y[2] - np.log(np.sum(np.exp(y)))
    full = token_logprobs(logits, tokens, temperature=0.5, mask=mask)
    assert float(full[0, 0]) == pytest.approx(float(want), rel=1e-14)
    one = token_logprobs(np.array([[[4.0], [7.0]]]), np.array([[0, 3]]), mask=np.array([[1, 0]]))
    assert one.tolist() == [[0.0, 0.0]]


def test_a_rejection_per_sequence_on_a_non_square_batch() -> None:
    # B != T: a (B,) rejection is one flag per sequence, broadcast over its tokens; a (T,) one
    # is refused (square test batches could not tell the two apart)
    mask = np.array([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    per_sequence = aggregation_weights(mask, mode="token_mean", rejection=[1.0, 0.0])
    per_token = aggregation_weights(
        mask, mode="token_mean", rejection=np.array([[1.0] * 4, [0.0] * 4])
    )
    assert per_sequence.tolist() == per_token.tolist()
    assert per_sequence[0].tolist() == [0.2, 0.2, 0.2, 0.0]
    with pytest.raises(ValueError, match=r"rejection must have one entry per sequence \(2,\)"):
        aggregation_weights(mask, mode="token_mean", rejection=[1.0, 0.0, 1.0, 1.0])


def test_the_stated_weight_ratio_of_a_micro_batch_is_one_number_or_a_range() -> None:
    mask = np.array([[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 1]])
    gap = partition_gap(mask, splits=[[[0, 1], [2], [3]]], mode="token_mean", rule="trl_bnpo")
    shown = gap.dependence.split("Weight ratios: ")[1].split("; ")
    assert len(shown) == 3
    for part in shown:  # each micro-batch has one ratio here: one number, no range
        assert ".." not in part
    ratios = gap.sequence_ratio
    assert shown[1] == f"rank 0 micro-batch 1: x{ratios[2]:.6g}"


# --- padding may hold any finite value: every function with a mask, from the valid-call table ----

#: Calls with padding for functions whose valid call has none.
_PADDED_EXTRA = {
    "refimpl.losses divergence_gated_weights": Call(
        (np.log([[0.5, 0.6, 0.9], [0.4, 0.3, 0.2]]), np.log([[0.5, 0.3, 0.1], [0.3, 0.4, 0.2]])),
        {
            "delta": 0.5,
            "divergence": "binary_kl",
            "level": "sequence",
            "mask": [[1, 1, 0], [1, 0, 0]],
        },
    ),
}


def _padded_calls() -> list[tuple[str, Call]]:
    out = []
    for key, calls in sorted(
        {**VALID_CALLS, **{k: (c,) for k, c in _PADDED_EXTRA.items()}}.items()
    ):
        if not key.startswith(("refimpl.losses", "refimpl.staleness")):
            continue
        for call in calls:
            mask = call.kwargs.get("mask")
            if mask is not None and np.ndim(mask) == 2 and np.min(mask) == 0:
                out.append((key, call))
    return out


def _outputs(x: Any) -> list[NDArray[np.float64]]:
    parts = x if isinstance(x, tuple) else (x,)
    return [
        np.asarray(v, dtype=np.float64) for v in parts if v is not None and not isinstance(v, str)
    ]


@pytest.mark.parametrize(("key", "call"), _padded_calls(), ids=[k for k, _ in _padded_calls()])
def test_padding_may_hold_any_finite_value(key: str, call: Call) -> None:
    """Each (B, T) array of the call set to 3.0 at padding (an impossible log-probability, a
    version or reward no real token has): the results are the same, to the bit."""
    fn = public_function(key)
    arguments = bind(fn, call.args, call.kwargs)
    mask = np.asarray(arguments["mask"], dtype=np.float64)
    moved = dict(arguments)
    for name, value in arguments.items():
        if name == "mask" or isinstance(value, (str, bool)) or value is None:
            continue
        arr = np.array(value, dtype=np.float64) if np.shape(value) == mask.shape else None
        if arr is not None:
            arr[mask == 0] = 3.0
            moved[name] = arr
    assert moved.keys() == arguments.keys()
    want, got = _outputs(call_with(fn, dict(arguments))), _outputs(call_with(fn, moved))
    assert len(want) == len(got)
    for w, g in zip(want, got, strict=True):
        assert np.array_equal(w, g), key
        if w.shape == mask.shape:  # a per-token output is exactly +0.0 at padding
            assert np.all(w[mask == 0] == 0.0), key
            assert not np.any(np.signbit(w[mask == 0])), f"{key}: -0.0 at padding"
            assert not np.any(np.signbit(g[mask == 0])), f"{key}: -0.0 at padding (moved)"


@pytest.mark.parametrize("std", ["sample", "population", "none"])
def test_a_sequence_without_tokens_changes_no_other_advantage(std: Any) -> None:
    """A row of the mask with no valid token weighs 0 in the batch statistics: whatever reward it
    holds, the other rows' advantages are the same bits, and constant rewards over the valid
    rows give exactly 0 (the batch mean is shifted by the smallest reward *of positive weight*;
    shifting by the empty row's reward left 4e-16, 4e-13 after the std)."""
    from refimpl.losses import reinforce_pp_advantages

    mask = [[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 0]]
    for c in (0.1, 0.3, 0.7, 2.9):
        got = [
            reinforce_pp_advantages([c, c, c, empty], mask=mask, std=std, eps=1e-6)
            for empty in (-7.3, 0.0, 1e6)
        ]
        for g in got:
            assert g.tolist() == [0.0, 0.0, 0.0, 0.0], (c, g)
    varied = [
        reinforce_pp_advantages([0.1, 0.4, 0.25, empty], mask=mask, std=std, eps=1e-6)
        for empty in (-7.3, 0.0, 1e6)
    ]
    assert all(np.array_equal(v, varied[0]) for v in varied)


def test_vespo_refuses_a_gradient_past_float64_naming_advantages() -> None:
    """Advantages of 1e308 and a cotangent of 1e10: the gradient c·φ·A is past float64; the
    refusal names advantages (without it the call returned inf)."""
    call = VALID_CALLS["refimpl.losses vespo_loss"][0]
    kwargs = {**call.kwargs, "cotangent": [[1e10] * 3, [1e10] * 3]}
    logp, logp_old, _ = call.args
    with pytest.raises(ValueError, match=r"^advantages must keep the weighted loss and gradient"):
        public_function("refimpl.losses vespo_loss")(logp, logp_old, [1e308, -1e308], **kwargs)


@pytest.mark.parametrize("positions", ["column", "valid"])
def test_optimal_token_baseline_never_reads_padding(positions: Any) -> None:
    """Padding of every (B, T) array may hold any finite value, even one whose weight would
    overflow (exp(800), a squared importance weight of 1e300): the advantages are the same bits,
    while the same values at a real token are still refused, naming the array."""
    from refimpl.losses import optimal_token_baseline_advantages as otb

    mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 1, 0]], dtype=np.float64)
    rng = np.random.default_rng(5)
    r = rng.uniform(-1.0, 2.0, size=mask.shape)
    logp = rng.uniform(-3.0, -0.1, size=mask.shape)
    s2 = rng.uniform(0.05, 0.9, size=mask.shape)
    rho = rng.uniform(0.3, 2.5, size=mask.shape)
    kw: dict[str, Any] = {"group": [0, 0, 0], "eps": 1e-6, "positions": positions}
    want = otb(r, logp, s2, mask=mask, is_weights=rho, **kw)
    pad = mask == 0
    wild = [np.where(pad, v, a) for a, v in ((r, 1e300), (logp, 800.0), (s2, -5.0), (rho, 1e300))]
    got = otb(wild[0], wild[1], wild[2], mask=mask, is_weights=wild[3], **kw)
    assert np.array_equal(got, want)
    assert np.all(got[pad] == 0.0)
    assert np.all(want[~pad] != 0.0)  # the baseline is a real one: nothing trivially zero
    bad_logp, bad_s2 = logp.copy(), s2.copy()
    bad_logp[2, 2], bad_s2[1, 1] = 0.5, 1.5
    with pytest.raises(ValueError, match=r"^logp_old must be <= 0 at real tokens.*Entry 10 is 0.5"):
        otb(r, bad_logp, s2, mask=mask, **kw)
    with pytest.raises(ValueError, match=r"^sum_pi_squared must lie in \[0, 1\] at real tokens"):
        otb(r, logp, bad_s2, mask=mask, **kw)


# --- a reduction over a row's valid tokens never sees padding, whichever sign the values have --


@st.composite
def one_signed_rows(draw: st.DrawFn) -> tuple[Array, Array, Array]:
    """Padded rows (B != T, lengths unequal, one row may be empty) whose valid log-ratios all
    have one sign, drawn per row: a masked 0 at padding would win a max (or a min) there."""
    b = draw(st.integers(2, 4))
    t = draw(st.integers(2, 5).filter(lambda x: x != b))
    lengths = [draw(st.integers(0 if i == b - 1 else 1, t)) for i in range(b)]
    lb = np.array([[draw(st.integers(-40, -1)) / 16 for _ in range(t)] for _ in range(b)])
    sign = np.array([draw(st.sampled_from([-1.0, 1.0])) for _ in range(b)])[:, None]
    d = sign * np.array([[draw(st.integers(1, 24)) / 32 for _ in range(t)] for _ in range(b)])
    mask = (np.arange(t)[None, :] < np.array(lengths)[:, None]).astype(np.float64)
    return lb + d, lb, mask


def _max_over_valid(lt: Array, lb: Array, mask: Array, estimator: str) -> Array:
    d = lt - lb
    k = {"k1": -d, "k2": 0.5 * d * d, "k3": np.expm1(d) - d}[estimator]
    return np.array([float(np.max(k[i][mask[i] > 0])) if mask[i].any() else 0.0
                     for i in range(len(k))])  # fmt: skip


def check_max_reduction(divergence: Callable[..., Array]) -> Callable[[], None]:
    @given(one_signed_rows(), st.sampled_from(["k1", "k2", "k3"]))
    def prop(rows: tuple[Array, Array, Array], estimator: str) -> None:
        lt, lb, mask = rows
        found = divergence(lt, lb, estimator=estimator, reduce="max", mask=mask)
        want = _max_over_valid(lt, lb, mask, estimator)
        np.testing.assert_allclose(found, want, rtol=1e-13, atol=0.0)

    return prop


def test_a_max_over_valid_tokens_of_one_sign_is_theirs() -> None:
    from refimpl.losses import sequence_divergence

    run_property(check_max_reduction(sequence_divergence))


def test_the_max_reduction_property_rejects_a_max_that_sees_padding() -> None:
    from refimpl.losses import sequence_divergence

    def padded_max(lt: Array, lb: Array, *, mask: Array, **kw: Any) -> Array:
        out = sequence_divergence(lt, lb, mask=mask, **kw)
        padded = (mask == 0).any(axis=1) & (mask > 0).any(axis=1)
        return np.where(padded, np.maximum(out, 0.0), out)  # a masked 0 taking part

    rejects(check_max_reduction(padded_max))
