"""Properties of refimpl.staleness: staleness, masks, importance weights, V-trace, diagnostics.

Each Hypothesis property is written once as a function of the implementation under test
(``_check_*``) and run twice: against refimpl (it must hold) and against a deliberately wrong variant
(it must fail), so that no property here is one that cannot fail.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy.typing import NDArray

import refimpl
import refimpl.staleness as S
from refimpl.staleness._checks import Level

Array = NDArray[np.float64]

# ---------------------------------------------------------------------------------------------
# strategies
# ---------------------------------------------------------------------------------------------

#: Finite log-probabilities including the extremes ±1e4 (per-token log-ratios up to ±2e4).
LOGP = st.one_of(
    st.sampled_from([-1e4, 1e4, 0.0, -1e-12]),
    st.floats(-1e4, 1e4, allow_nan=False, allow_infinity=False),
)
SHAPES = st.tuples(st.integers(1, 5), st.integers(1, 7))


@st.composite
def logp_batches(draw: st.DrawFn) -> tuple[Array, Array, Array]:
    """``(logp_target, logp_behavior, mask)`` of shape (B, T), every row with a valid token."""
    shape = draw(SHAPES)
    a = draw(hnp.arrays(np.float64, shape, elements=LOGP))
    b = draw(hnp.arrays(np.float64, shape, elements=LOGP))
    m = draw(hnp.arrays(np.bool_, shape)).astype(np.float64)
    m[:, 0] = 1.0
    return a, b, m


@st.composite
def on_policy_batches(draw: st.DrawFn) -> tuple[Array, Array]:
    """``(logp, mask)``: on-policy, so target and behaviour log-probabilities are identical."""
    shape = draw(SHAPES)
    a = draw(hnp.arrays(np.float64, shape, elements=LOGP))
    m = draw(hnp.arrays(np.bool_, shape)).astype(np.float64)
    m[:, 0] = 1.0
    return a, m


LEVELS: tuple[Level, ...] = ("token", "sequence", "geometric")
SEQUENCE_LEVELS: tuple[Level, ...] = ("sequence", "geometric")
STALENESS = hnp.arrays(np.float64, st.integers(1, 30), elements=st.integers(0, 12).map(float))
BOUNDARY_REALS = st.one_of(st.sampled_from([0.0, 0.5, 1.0]), st.floats(0.0, 1.0))


# ---------------------------------------------------------------------------------------------
# wrong variants (each is a bug seen in the wild, or a plausible one)
# ---------------------------------------------------------------------------------------------


def mask_strict(s: Any, *, eta: int) -> Array:
    """Wrong: ``s < η`` instead of ``s <= η`` (drops on-policy samples at η = 0)."""
    return (np.asarray(s, dtype=np.float64) < eta).astype(np.float64)


def decay_sign_error(s: Any, *, gamma: float) -> Array:
    """Wrong: ``γ^{-s}`` (grows with staleness)."""
    return np.power(gamma, -np.asarray(s, dtype=np.float64))


def masked_is_strict_band(
    logp_target: Any, logp_behavior: Any, *, low: float, high: float, **kw: Any
) -> Array:
    """Wrong: an open band ``α < ρ < β`` (drops ratio-1 tokens when α = 1)."""
    d = np.asarray(logp_target) - np.asarray(logp_behavior)
    rho = np.exp(np.minimum(d, math.log(high)))
    return np.where((rho > low) & (rho < high), rho, 0.0)


def tis_sequence_linear_space(
    logp_target: Any, logp_behavior: Any, *, cap: float, **kw: Any
) -> Array:
    """Wrong: ``min(Π exp(d_t), C)`` in linear space (overflow: inf·0 = NaN)."""
    m = kw.get("mask")
    d = np.asarray(logp_target) - np.asarray(logp_behavior)
    with np.errstate(all="ignore"):
        rho = np.where(np.asarray(m) > 0, np.exp(d), 1.0)
        return np.asarray(np.minimum(np.prod(rho, axis=-1), cap), dtype=np.float64)


def decoupled_clipped(logp_prox: Any, logp_behavior: Any, *, cap: float, **kw: Any) -> Array:
    """Wrong: clipping at the cap instead of masking above it."""
    d = np.asarray(logp_prox) - np.asarray(logp_behavior)
    return np.asarray(np.exp(np.minimum(d, math.log(cap))), dtype=np.float64)


def vtrace_time_axis_first(*args: Any, **kw: Any) -> S.VTraceOutput:
    """Wrong: treats a (B, T) batch as time-major (T, B), recursing over the batch."""
    out = S.vtrace(*(np.asarray(a).T for a in args), **kw)
    return S.VTraceOutput(*(x.T for x in out))


def vtrace_trace_without_discount(
    v_tm1: Any,
    v_t: Any,
    r_t: Any,
    discount_t: Any,
    rho_tm1: Any,
    *,
    lambda_: float = 1.0,
    **kw: Any,
) -> S.VTraceOutput:
    """Wrong: the trace ``err_s = δ_s + c_s err_{s+1}`` forgets the discount."""
    v_tm1, v_t, r_t, d, rho = (
        np.asarray(x, dtype=np.float64) for x in (v_tm1, v_t, r_t, discount_t, rho_tm1)
    )
    c = lambda_ * np.minimum(1.0, rho)
    td = np.minimum(1.0, rho) * (r_t + d * v_t - v_tm1)
    err = np.zeros(td.shape[:-1])
    errors = np.empty_like(td)
    for i in range(td.shape[-1] - 1, -1, -1):
        err = td[..., i] + c[..., i] * err
        errors[..., i] = err
    return S.VTraceOutput(errors, errors, errors + v_tm1)


def vtrace_ignores_lambda(*args: Any, lambda_: float = 1.0, **kw: Any) -> S.VTraceOutput:
    """Wrong: ``c = min(1, ρ)`` without ``λ``."""
    return S.vtrace(*args, **kw)


# ---------------------------------------------------------------------------------------------
# sample_staleness, policy_version, admission_capacity: exact examples and identities
# ---------------------------------------------------------------------------------------------


def test_sample_staleness_is_the_oldest_token_version_behind_the_trainer() -> None:
    st_ = S.sample_staleness(7, [[5, 6, 7], [7], [2, 2, 3, 4, 5]])
    np.testing.assert_array_equal(st_.sample, [2.0, 0.0, 5.0])
    np.testing.assert_array_equal(st_.token[2], [5.0, 5.0, 4.0, 3.0, 2.0])
    np.testing.assert_array_equal(st_.mask.sum(axis=1), [3.0, 1.0, 5.0])


def test_sample_staleness_layouts_agree() -> None:
    ragged = [[3, 4], [5, 5, 5], [1]]
    padded = np.array([[3, 4, 0], [5, 5, 5], [1, 9, 9]], dtype=float)
    mask = np.array([[1, 1, 0], [1, 1, 1], [1, 0, 0]])
    a = S.sample_staleness(5, ragged)
    b = S.sample_staleness(5, padded, mask=mask)
    np.testing.assert_array_equal(a.sample, b.sample)
    np.testing.assert_array_equal(a.token * a.mask, b.token * b.mask)
    c = S.sample_staleness(5, [3, 5, 1])  # one launch version per sample
    np.testing.assert_array_equal(c.sample, [2.0, 0.0, 4.0])
    d = S.sample_staleness([5, 6, 5], [3, 5, 1])  # one trained step per sample
    np.testing.assert_array_equal(d.sample, [2.0, 1.0, 4.0])


@pytest.mark.parametrize("ragged", [[[3, 4], []], [[], []]])
def test_an_empty_ragged_sample_is_named_by_its_index(ragged: list[list[int]]) -> None:
    # The caller passed no mask, so the message must name token_versions[i] (it named ``mask``).
    i = ragged.index([])
    with pytest.raises(
        ValueError, match=rf"token_versions\[{i}\] must hold at least one token"
    ) as exc:
        S.sample_staleness(5, ragged)
    assert "mask" not in str(exc.value).split(";")[0]


@given(
    versions=st.lists(st.lists(st.integers(0, 20), min_size=1, max_size=6), min_size=1, max_size=6),
    extra=st.integers(0, 5),
)
def test_sample_staleness_is_the_max_token_staleness_and_non_negative(
    versions: list[list[int]], extra: int
) -> None:
    j = max(max(row) for row in versions) + extra
    result = S.sample_staleness(j, versions)
    for i, row in enumerate(versions):
        assert result.sample[i] == j - min(row)
        assert result.sample[i] == max(j - v for v in row) >= 0


def test_policy_version_applies_the_tie_rule() -> None:
    # Version k+1 is published at publish_times[k]; a launch at that very instant sees version k.
    v = S.policy_version([0.0, 1.0, 1.0 + 1e-12, 2.0, 2.5], publish_times=[1.0, 2.0, 2.0])
    np.testing.assert_array_equal(v, [0.0, 0.0, 1.0, 1.0, 3.0])


@given(
    eta=st.integers(0, 5),
    version=st.integers(0, 10),
    batch=st.integers(1, 8),
    accepted=st.integers(0, 100),
    running=st.integers(0, 30),
    max_concurrent=st.integers(1, 40),
)
def test_admission_capacity_is_the_areal_rule_and_blocks_at_the_bound(
    eta: int, version: int, batch: int, accepted: int, running: int, max_concurrent: int
) -> None:
    cap = S.admission_capacity(
        eta=eta,
        version=version,
        batch=batch,
        accepted=accepted,
        running=running,
        max_concurrent=max_concurrent,
    )
    # Launching one at a time while capacity > 0 stops exactly at the staleness or slot limit.
    launched = 0
    while (
        accepted + running + launched < (eta + version + 1) * batch
        and running + launched < max_concurrent
    ):
        launched += 1
    assert max(cap, 0) == launched
    more = S.admission_capacity(
        eta=eta + 1,
        version=version,
        batch=batch,
        accepted=accepted,
        running=running,
        max_concurrent=max_concurrent,
    )
    assert more >= cap


# ---------------------------------------------------------------------------------------------
# properties shared by every weight function
# ---------------------------------------------------------------------------------------------


def _check_on_policy_weight_is_one(
    mask_fn: Callable[..., Array], masked_fn: Callable[..., Array]
) -> Callable[[], None]:
    @given(
        batch=on_policy_batches(),
        eta=st.integers(0, 3),
        low=BOUNDARY_REALS,
        cap=st.floats(1.0, 10.0),
    )
    def check(batch: tuple[Array, Array], eta: int, low: float, cap: float) -> None:
        logp, m = batch
        valid = m > 0
        assert mask_fn(np.zeros(3), eta=eta).tolist() == [1.0, 1.0, 1.0]
        assert S.staleness_decay(np.zeros(3), gamma=0.3).tolist() == [1.0, 1.0, 1.0]
        for level in LEVELS:
            w = S.truncated_is_weights(logp, logp, cap=cap, level=level, mask=m)
            assert np.all(w[valid] == 1.0) if level == "token" else np.all(w == 1.0)
        w = masked_fn(logp, logp, low=low, high=max(1.0, 2.0 * low), mask=m)
        assert np.all(w[valid] == 1.0)
        for level in SEQUENCE_LEVELS:
            w = S.masked_is_weights(logp, logp, low=low, high=1.0, level=level, mask=m)
            assert np.all(w == 1.0)
        w = S.decoupled_ppo_weights(logp, logp, cap=cap, mask=m)
        assert np.all(w[valid] == 1.0)
        assert np.all(S.decoupled_ppo_weights(logp, logp, mask=m)[valid] == 1.0)

    return check


def test_on_policy_sample_with_ratio_one_gets_weight_one() -> None:
    run_property(_check_on_policy_weight_is_one(S.staleness_mask, S.masked_is_weights))


def test_on_policy_weight_property_rejects_strict_inequalities() -> None:
    rejects(_check_on_policy_weight_is_one(mask_strict, S.masked_is_weights))
    rejects(_check_on_policy_weight_is_one(S.staleness_mask, masked_is_strict_band))


def test_vtrace_on_policy_advantage_weight_is_one() -> None:
    rng = np.random.default_rng(3)
    v_tm1, v_t, r = rng.normal(size=(3, 6))
    out = S.vtrace(v_tm1, v_t, r, np.full(6, 0.9), np.ones(6), lambda_=0.7)
    np.testing.assert_array_equal(out.pg_advantage, out.q_estimate - v_tm1)


def _check_staleness_weights_non_increasing(
    mask_fn: Callable[..., Array], decay_fn: Callable[..., Array]
) -> Callable[[], None]:
    @given(
        s=STALENESS,
        eta=st.integers(0, 12),
        gamma=st.one_of(st.just(1.0), st.floats(1e-3, 1.0, exclude_min=False)),
    )
    def check(s: Array, eta: int, gamma: float) -> None:
        order = np.argsort(s, kind="stable")
        for w in (mask_fn(s, eta=eta), decay_fn(s, gamma=gamma)):
            assert np.all(np.diff(w[order]) <= 0.0)

    return check


def test_staleness_weights_are_non_increasing_in_staleness() -> None:
    run_property(_check_staleness_weights_non_increasing(S.staleness_mask, S.staleness_decay))


def test_non_increasing_property_rejects_decay_sign_error() -> None:
    rejects(_check_staleness_weights_non_increasing(S.staleness_mask, decay_sign_error))


def _check_mask_eta_zero_keeps_on_policy(mask_fn: Callable[..., Array]) -> Callable[[], None]:
    @given(s=STALENESS)
    def check(s: Array) -> None:
        w = mask_fn(s, eta=0)
        assert np.all(w[s == 0] == 1.0)
        assert np.all(w[s > 0] == 0.0)

    return check


def test_staleness_mask_with_eta_zero_never_drops_on_policy() -> None:
    run_property(_check_mask_eta_zero_keeps_on_policy(S.staleness_mask))


def test_eta_zero_property_rejects_strict_comparison() -> None:
    rejects(_check_mask_eta_zero_keeps_on_policy(mask_strict))


def _check_weights_finite_non_negative(
    tis_sequence: Callable[..., Array], decoupled: Callable[..., Array]
) -> Callable[[], None]:
    @given(batch=logp_batches(), cap=st.floats(1.0, 1e6), band=st.floats(0.0, 1.0))
    def check(batch: tuple[Array, Array, Array], cap: float, band: float) -> None:
        a, b, m = batch
        outs = [
            S.truncated_is_weights(a, b, cap=cap, level="token", mask=m),
            tis_sequence(a, b, cap=cap, level="sequence", mask=m),
            S.truncated_is_weights(a, b, cap=cap, level="geometric", mask=m),
            decoupled(a, b, cap=cap, mask=m),
        ]
        for level in LEVELS:
            outs.append(
                S.masked_is_weights(a, b, low=band, high=1.0 / max(band, 1e-3), level=level, mask=m)
            )
        for w in outs:
            assert np.all(np.isfinite(w))
            assert np.all(w >= 0.0)
        for w in outs[:4]:
            assert np.all(w <= cap)  # truncation and the decoupled mask never exceed the cap
        for w in outs[4:]:
            assert np.all(w <= 1.0 / max(band, 1e-3))  # masked weights stay inside the band

    return check


def test_weights_are_finite_and_non_negative_for_any_finite_log_probabilities() -> None:
    run_property(
        _check_weights_finite_non_negative(S.truncated_is_weights, S.decoupled_ppo_weights)
    )


def test_finite_property_rejects_linear_space_product() -> None:
    rejects(_check_weights_finite_non_negative(tis_sequence_linear_space, S.decoupled_ppo_weights))


def test_sequence_weights_from_huge_log_ratios_are_exact() -> None:
    # Log-ratios +1e4, -1e4, 0.5 cancel to 0.5: the sequence ratio is e^0.5 (a linear-space
    # product gives inf · 0 = NaN here).
    a = np.array([[1e4, -1e4, 0.5]])
    b = np.zeros((1, 3))
    w = S.truncated_is_weights(a, b, cap=10.0, level="sequence")
    assert w[0] == pytest.approx(math.exp(0.5), rel=1e-12)
    g = S.truncated_is_weights(a, b, cap=10.0, level="geometric")
    assert g[0] == pytest.approx(math.exp(0.5 / 3), rel=1e-12)
    assert S.masked_is_weights(a, b, low=0.5, high=2.0, level="sequence")[0] == pytest.approx(
        math.exp(0.5), rel=1e-12
    )
    assert S.decoupled_ppo_weights(a, b, cap=5.0).tolist() == [
        [0.0, 0.0, pytest.approx(math.exp(0.5))]
    ]


def test_decoupled_weights_mask_above_the_cap_and_keep_the_cap_itself() -> None:
    lp = np.log([0.2, 0.4, 0.8, 0.9])
    lq = np.log([0.1, 0.1, 0.1, 0.1])
    w = S.decoupled_ppo_weights(lp, lq, cap=4.0)
    np.testing.assert_allclose(w, [2.0, 4.0, 0.0, 0.0], rtol=1e-12)


def _check_decoupled_masks_not_clips(decoupled: Callable[..., Array]) -> Callable[[], None]:
    @given(batch=logp_batches(), cap=st.floats(1.0, 100.0))
    def check(batch: tuple[Array, Array, Array], cap: float) -> None:
        a, b, m = batch
        w = decoupled(a, b, cap=cap, mask=m)
        over = (m > 0) & (a - b > math.log(cap))
        assert np.all(w[over] == 0.0)

    return check


def test_decoupled_weights_drop_tokens_above_the_cap() -> None:
    run_property(_check_decoupled_masks_not_clips(S.decoupled_ppo_weights))


def test_decoupled_mask_property_rejects_clipping() -> None:
    rejects(_check_decoupled_masks_not_clips(decoupled_clipped))


def test_truncated_weights_match_exact_ratios() -> None:
    # Ratios that are exact binary fractions, so the expected values are exact.
    p = [
        [Fraction(1, 2), Fraction(1, 4), Fraction(3, 4)],
        [Fraction(1, 8), Fraction(1, 2), Fraction(1, 2)],
    ]
    q = [
        [Fraction(1, 4), Fraction(1, 4), Fraction(3, 8)],
        [Fraction(1, 2), Fraction(1, 2), Fraction(1, 4)],
    ]
    lp = np.log(np.array(p, dtype=float))
    lq = np.log(np.array(q, dtype=float))
    for cap in (Fraction(1), Fraction(3, 2), Fraction(4), Fraction(100)):
        tok = S.truncated_is_weights(lp, lq, cap=float(cap))
        seq = S.truncated_is_weights(lp, lq, cap=float(cap), level="sequence")
        for i in range(2):
            ratios = [p[i][t] / q[i][t] for t in range(3)]
            np.testing.assert_allclose(tok[i], [float(min(r, cap)) for r in ratios], rtol=1e-14)
            prod = math.prod(ratios, start=Fraction(1))
            assert seq[i] == pytest.approx(float(min(prod, cap)), rel=1e-14)


def test_masked_weights_keep_the_band_edges_and_drop_outside() -> None:
    lp = np.log([0.5, 0.5, 0.5, 0.5, 0.5])
    lq = np.log([1.0, 0.25, 0.5, 0.2, 0.6])  # ratios 0.5, 2, 1, 2.5, 0.8333
    w = S.masked_is_weights(lp, lq, low=0.5, high=2.0)
    np.testing.assert_allclose(w, [0.5, 2.0, 1.0, 0.0, 0.5 / 0.6], rtol=1e-12)


@given(batch=logp_batches(), low=BOUNDARY_REALS, high=st.floats(1.0, 50.0))
def test_masked_weights_are_zero_or_inside_the_band(
    batch: tuple[Array, Array, Array], low: float, high: float
) -> None:
    a, b, m = batch
    for level in LEVELS:
        w = S.masked_is_weights(a, b, low=low, high=high, level=level, mask=m)
        kept = w[w > 0]
        assert np.all(kept >= low)
        assert np.all(kept <= high)


def test_padding_gets_weight_zero_and_does_not_enter_sequence_weights() -> None:
    lp = np.array([[-1.0, -2.0, -50.0]])
    lq = np.array([[-1.5, -2.0, 0.0]])
    m = np.array([[1, 1, 0]])
    assert S.truncated_is_weights(lp, lq, cap=9.0, mask=m)[0, 2] == 0.0
    assert S.truncated_is_weights(lp, lq, cap=9.0, level="sequence", mask=m)[0] == pytest.approx(
        math.exp(0.5)
    )
    assert S.truncated_is_weights(lp, lq, cap=9.0, level="geometric", mask=m)[0] == pytest.approx(
        math.exp(0.25)
    )
    single = S.truncated_is_weights(lp[0, :2], lq[0, :2], cap=9.0, level="sequence")
    assert single.shape == ()
    assert float(single) == pytest.approx(math.exp(0.5))


# ---------------------------------------------------------------------------------------------
# permutation invariance
# ---------------------------------------------------------------------------------------------


@st.composite
def vtrace_batches(draw: st.DrawFn, *, min_b: int = 1) -> tuple[Array, ...]:
    b = draw(st.integers(min_b, 4))
    t = draw(st.integers(1, 6))
    real = st.floats(-10.0, 10.0)
    v_tm1, v_t, r = (draw(hnp.arrays(np.float64, (b, t), elements=real)) for _ in range(3))
    disc = draw(hnp.arrays(np.float64, (b, t), elements=st.sampled_from([0.0, 0.5, 0.9, 1.0])))
    rho = draw(hnp.arrays(np.float64, (b, t), elements=st.floats(0.0, 5.0)))
    return v_tm1, v_t, r, disc, rho


def _check_permutation_invariance(vtrace_fn: Callable[..., S.VTraceOutput]) -> Callable[[], None]:
    @given(
        logp=logp_batches(),
        vt=vtrace_batches(min_b=2),
        s=STALENESS,
        data=st.data(),
    )
    def check(
        logp: tuple[Array, Array, Array], vt: tuple[Array, ...], s: Array, data: st.DataObject
    ) -> None:
        a, b, m = logp
        perm = np.asarray(data.draw(st.permutations(range(a.shape[0]))))
        for level in LEVELS:
            w = S.truncated_is_weights(a, b, cap=3.0, level=level, mask=m)
            wp = S.truncated_is_weights(a[perm], b[perm], cap=3.0, level=level, mask=m[perm])
            np.testing.assert_array_equal(w[perm], wp)
            w = S.masked_is_weights(a, b, low=0.5, high=2.0, level=level, mask=m)
            wp = S.masked_is_weights(a[perm], b[perm], low=0.5, high=2.0, level=level, mask=m[perm])
            np.testing.assert_array_equal(w[perm], wp)
        w = S.decoupled_ppo_weights(a, b, cap=3.0, mask=m)
        np.testing.assert_array_equal(
            w[perm], S.decoupled_ppo_weights(a[perm], b[perm], cap=3.0, mask=m[perm])
        )
        vperm = np.asarray(data.draw(st.permutations(range(vt[0].shape[0]))))
        out = vtrace_fn(*vt, lambda_=0.8)
        outp = vtrace_fn(*(x[vperm] for x in vt), lambda_=0.8)
        for x, y in zip(out, outp, strict=True):
            np.testing.assert_allclose(x[vperm], y, rtol=1e-12, atol=1e-12)
        sperm = np.asarray(data.draw(st.permutations(range(s.size))))
        w = S.staleness_mask(s, eta=2)
        lengths = np.arange(s.size, dtype=float) % 5 + 1
        d = S.masking_diagnostics(s, w, lengths=lengths)
        dp = S.masking_diagnostics(s[sperm], w[sperm], lengths=lengths[sperm])
        for field, other in zip(d, dp, strict=True):
            np.testing.assert_allclose(np.asarray(field), np.asarray(other), rtol=1e-12)
        assert S.effective_sample_size(w + 0.5) == pytest.approx(
            S.effective_sample_size(w[sperm] + 0.5), rel=1e-12
        )

    return check


def test_results_are_invariant_under_permuting_the_batch() -> None:
    run_property(_check_permutation_invariance(S.vtrace))


def test_permutation_property_rejects_time_major_confusion() -> None:
    rejects(_check_permutation_invariance(vtrace_time_axis_first))


# ---------------------------------------------------------------------------------------------
# V-trace
# ---------------------------------------------------------------------------------------------


def rlax_transcription(
    v_tm1: Array,
    v_t: Array,
    r_t: Array,
    discount_t: Array,
    rho_tm1: Array,
    lam: Array,
    rho_bar: float,
    pg_bar: float,
) -> tuple[list[float], list[float], list[float]]:
    """rlax's vtrace_td_error_and_advantage, one scalar at a time (an independent re-derivation)."""
    n = len(v_tm1)
    errors = [0.0] * n
    acc = 0.0
    for i in reversed(range(n)):
        delta = min(rho_bar, rho_tm1[i]) * (r_t[i] + discount_t[i] * v_t[i] - v_tm1[i])
        acc = delta + discount_t[i] * lam[i] * min(1.0, rho_tm1[i]) * acc
        errors[i] = acc
    q = []
    for i in range(n):
        if i < n - 1:
            boot = lam[i] * (errors[i + 1] + v_tm1[i + 1]) + (1 - lam[i]) * v_tm1[i + 1]
        else:
            boot = v_t[-1]
        q.append(r_t[i] + discount_t[i] * boot)
    adv = [min(pg_bar, rho_tm1[i]) * (q[i] - v_tm1[i]) for i in range(n)]
    return errors, adv, q


@given(
    vt=vtrace_batches(),
    lam=st.floats(0.0, 1.0),
    rho_bar=st.floats(0.1, 3.0),
    pg_bar=st.floats(0.1, 3.0),
)
def test_vtrace_matches_a_scalar_transcription_of_rlax(
    vt: tuple[Array, ...], lam: float, rho_bar: float, pg_bar: float
) -> None:
    out = S.vtrace(*vt, lambda_=lam, clip_rho_threshold=rho_bar, clip_pg_rho_threshold=pg_bar)
    for row in range(vt[0].shape[0]):
        v_tm1, v_t, r, disc, rho = (x[row] for x in vt)
        single = S.vtrace(
            v_tm1,
            v_t,
            r,
            disc,
            rho,
            lambda_=lam,
            clip_rho_threshold=rho_bar,
            clip_pg_rho_threshold=pg_bar,
        )
        lams = np.full(v_tm1.size, lam)
        errors, adv, q = rlax_transcription(v_tm1, v_t, r, disc, rho, lams, rho_bar, pg_bar)
        for got, batch_row, want in zip(
            single, (o[row] for o in out), (errors, adv, q), strict=True
        ):
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
            np.testing.assert_array_equal(got, batch_row)


def _check_split_at_episode_boundary(
    vtrace_fn: Callable[..., S.VTraceOutput],
) -> Callable[[], None]:
    @given(vt=vtrace_batches(), cut=st.integers(0, 5), lam=st.floats(0.0, 1.0))
    def check(vt: tuple[Array, ...], cut: int, lam: float) -> None:
        v_tm1, v_t, r, disc, rho = (x[0] for x in vt)
        t = v_tm1.size
        if t < 2:
            return
        cut = cut % (t - 1)  # the episode ends after step `cut`; the rest is a new episode
        disc = disc.copy()
        disc[cut] = 0.0
        whole = vtrace_fn(v_tm1, v_t, r, disc, rho, lambda_=lam)
        left = vtrace_fn(*(x[: cut + 1] for x in (v_tm1, v_t, r, disc, rho)), lambda_=lam)
        right = vtrace_fn(*(x[cut + 1 :] for x in (v_tm1, v_t, r, disc, rho)), lambda_=lam)
        for w, lft, rgt in zip(whole, left, right, strict=True):
            np.testing.assert_allclose(w, np.concatenate([lft, rgt]), rtol=1e-12, atol=1e-12)

    return check


def test_vtrace_split_at_an_episode_boundary_equals_the_whole() -> None:
    run_property(_check_split_at_episode_boundary(S.vtrace))


def test_split_property_rejects_a_trace_without_discount() -> None:
    rejects(_check_split_at_episode_boundary(vtrace_trace_without_discount))


def lambda_returns(v_tm1: Array, v_t: Array, r: Array, disc: Array, lam: float) -> list[float]:
    """G_s = r_s + γ_s((1 − λ) V(x_{s+1}) + λ G_{s+1}), bootstrapped with V(x_T) at the end."""
    g = [0.0] * len(r)
    nxt = v_t[-1]
    for s in reversed(range(len(r))):
        g[s] = (
            r[s] + disc[s] * ((1 - lam) * v_t[s] + lam * nxt)
            if s < len(r) - 1
            else r[s] + disc[s] * v_t[s]
        )
        nxt = g[s]
    return g


def _check_reduces_to_lambda_returns(
    vtrace_fn: Callable[..., S.VTraceOutput],
) -> Callable[[], None]:
    @given(vt=vtrace_batches(), lam=st.floats(0.0, 1.0))
    def check(vt: tuple[Array, ...], lam: float) -> None:
        v_tm1, _, r, disc, _ = (x[0] for x in vt)
        v_t = np.append(v_tm1[1:], vt[1][0, -1])  # consistent values: V(x_{s+1}) = v_tm1[s+1]
        out = vtrace_fn(v_tm1, v_t, r, disc, np.ones_like(r), lambda_=lam)
        g = lambda_returns(v_tm1, v_t, r, disc, lam)
        np.testing.assert_allclose(out.errors + v_tm1, g, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(out.q_estimate, g, rtol=1e-10, atol=1e-10)

    return check


def test_vtrace_with_unit_ratios_reduces_to_lambda_returns() -> None:
    run_property(_check_reduces_to_lambda_returns(S.vtrace))


def test_lambda_return_property_rejects_ignoring_lambda() -> None:
    rejects(_check_reduces_to_lambda_returns(vtrace_ignores_lambda))


def test_vtrace_accepts_per_step_lambda() -> None:
    rng = np.random.default_rng(0)
    v_tm1, v_t, r = rng.normal(size=(3, 2, 5))
    disc = np.full((2, 5), 0.9)
    rho = rng.uniform(0, 2, size=(2, 5))
    lam = np.array([1.0, 0.5, 0.0, 0.3, 1.0])
    a = S.vtrace(v_tm1, v_t, r, disc, rho, lambda_=lam)
    b = S.vtrace(v_tm1, v_t, r, disc, rho, lambda_=np.broadcast_to(lam, (2, 5)))
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


# ---------------------------------------------------------------------------------------------
# effective sample size and diagnostics
# ---------------------------------------------------------------------------------------------


@given(w=hnp.arrays(np.float64, st.integers(1, 20), elements=st.floats(0.0, 1e6)))
def test_ess_lies_between_one_and_n_and_is_n_only_for_equal_weights(w: Array) -> None:
    ess = S.effective_sample_size(w)
    if not np.any(w > 0):
        assert ess == 0.0
        return
    exact = sum((Fraction(x) for x in w), Fraction(0)) ** 2 / sum(
        (Fraction(x) ** 2 for x in w), Fraction(0)
    )
    assert ess == pytest.approx(float(exact), rel=1e-12)
    assert 1.0 - 1e-12 <= ess <= w.size * (1.0 + 1e-12)
    assert (exact == w.size) == bool(np.all(w == w[0]))


def test_masking_diagnostics_count_by_enumeration() -> None:
    s = [0, 0, 0, 1, 1, 2, 3, 3]
    w = [1.0, 0.0, 2.0, 1.0, 0.0, 0.0, 0.5, 0.0]
    lengths = [5, 1, 9, 3, 7, 2, 8, 4]
    d = S.masking_diagnostics(s, w, lengths=lengths, length_bins=2)
    assert d.kept_fraction == 4 / 8
    assert d.on_policy_dropped_fraction == 1 / 3
    assert d.on_policy_count == 3
    np.testing.assert_array_equal(d.staleness_values, [0, 1, 2, 3])
    np.testing.assert_array_equal(d.keep_rate_by_staleness, [2 / 3, 1 / 2, 0.0, 1 / 2])
    np.testing.assert_array_equal(d.count_by_staleness, [3, 2, 1, 2])
    # median (inverted CDF) of the lengths is 4: bins [1, 4] and (4, 9].
    np.testing.assert_array_equal(d.length_edges, [1.0, 4.0, 9.0])
    np.testing.assert_array_equal(d.count_by_length, [4, 4])
    np.testing.assert_array_equal(d.keep_rate_by_length, [1 / 4, 3 / 4])
    assert d.effective_sample_size == pytest.approx(4.5**2 / 6.25)


@given(
    lengths=hnp.arrays(np.float64, st.integers(1, 40), elements=st.integers(1, 6).map(float)),
    bins=st.integers(1, 6),
)
def test_length_bins_partition_the_samples_with_no_empty_bin(lengths: Array, bins: int) -> None:
    d = S.masking_diagnostics(
        np.zeros(lengths.size), np.ones(lengths.size), lengths=lengths, length_bins=bins
    )
    assert d.count_by_length.sum() == lengths.size
    assert np.all(d.count_by_length > 0)
    assert d.count_by_length.size <= bins
    edges = d.length_edges
    assert np.all(np.diff(edges[1:]) > 0)
    assert edges[0] <= edges[1]
    index = np.searchsorted(edges[1:-1], lengths, side="left")  # bin i is (edges[i], edges[i+1]]
    np.testing.assert_array_equal(np.bincount(index, minlength=edges.size - 1), d.count_by_length)


def test_over_masking_scenarios_are_caught_by_the_diagnostics() -> None:
    off_by_one, tight = S.over_masking_scenarios(np.random.default_rng(2026))
    assert off_by_one.correct.on_policy_dropped_fraction == 0.0
    assert off_by_one.buggy.on_policy_dropped_fraction == 1.0
    assert off_by_one.buggy.kept_fraction == 0.0
    assert off_by_one.correct.on_policy_count > 0
    assert tight.correct.kept_fraction == 1.0
    assert tight.buggy.on_policy_dropped_fraction > 0.2
    # The length trap: with a fixed seed the buggy keep rate falls across the length quartiles.
    rates = tight.buggy.keep_rate_by_length
    assert rates.size == 4
    assert np.all(np.diff(rates) < 0)


@given(
    versions=st.lists(st.lists(st.integers(0, 8), min_size=1, max_size=5), min_size=1, max_size=12),
    extra=st.integers(0, 3),
    eta=st.integers(0, 4),
)
def test_diagnostics_flag_an_off_by_one_and_pass_the_correct_mask(
    versions: list[list[int]], extra: int, eta: int
) -> None:
    j = max(max(row) for row in versions) + extra
    s = S.sample_staleness(j, versions).sample
    correct = S.masking_diagnostics(s, S.staleness_mask(s, eta=eta))
    assert correct.on_policy_dropped_fraction == 0.0
    expected = np.where(correct.staleness_values <= eta, 1.0, 0.0)
    np.testing.assert_array_equal(correct.keep_rate_by_staleness, expected)
    off_by_one = S.sample_staleness(j + 1, versions).sample
    buggy = S.masking_diagnostics(s, S.staleness_mask(off_by_one, eta=0))
    if np.any(s == 0):
        assert buggy.on_policy_dropped_fraction == 1.0
    assert buggy.kept_fraction == 0.0


@pytest.mark.parametrize(
    "use",
    [
        lambda s: S.staleness_mask(s, eta=1),
        lambda s: S.staleness_decay(s, gamma=0.5),
    ],
    ids=["staleness_mask", "staleness_decay"],
)
def test_a_staleness_result_passed_whole_says_to_pass_its_sample(use: Any) -> None:
    result = S.sample_staleness(5, [[3, 4], [5, 5]])
    with pytest.raises(TypeError, match=r"pass its \.sample for one value per sample"):
        use(result)
    assert use(result.sample).shape == (2,)  # the fix the message gives works


# --- exact integers past 2^53: staleness, versions and the bound are compared as integers --------


def test_staleness_past_two_to_the_53_is_exact() -> None:
    big = 2**53  # 2^53 + 1 has no float64: a float computation rounds it to 2^53
    assert S.sample_staleness(big + 1, [[big]]).sample.tolist() == [1.0]
    assert S.sample_staleness([big + 1, 3], [[big], [1, 2]]).sample.tolist() == [1.0, 2.0]
    assert S.sample_staleness(2**70, [[2**70 - 3, 2**70]]).token.tolist() == [[3.0, 0.0]]
    assert S.staleness_mask([big + 1, big], eta=big).tolist() == [0.0, 1.0]
    assert S.staleness_mask([big + 1], eta=big + 1, staleness_count="versions_spanned")[0] == 0.0
    assert S.staleness_mask([2**70], eta=2**64).tolist() == [0.0]
    assert S.staleness_decay([2**1010], gamma=1.0).tolist() == [1.0]
    with pytest.raises(
        ValueError, match=r"version 9007199254740993 > trained_step 9007199254740992"
    ):
        S.sample_staleness(big, [[big + 1]])
    with pytest.raises(TypeError, match=r"a float past 2\^53 is not exact"):
        S.staleness_mask([2.0**60], eta=1)
    with pytest.raises(TypeError, match=r"s must be an array of integers.*booleans"):
        S.staleness_mask([True], eta=1)


def _staleness_float_based(trained_step: int, token_versions: list[list[int]]) -> Array:
    """Wrong: the staleness computed in float64 (what the formula does if it converts first)."""
    oldest = np.min(np.asarray(token_versions, dtype=np.float64), axis=1)
    return np.asarray(float(trained_step) - oldest, dtype=np.float64)


def _check_staleness_is_exact_far_from_zero(
    staleness: Callable[[int, list[list[int]]], Array],
) -> Callable[[], None]:
    @given(
        base=st.integers(2**53, 2**80),
        behind=st.lists(st.integers(0, 5), min_size=1, max_size=4),
    )
    def check(base: int, behind: list[int]) -> None:
        step = base + 5
        s = staleness(step, [[step - b] for b in behind])
        assert s.tolist() == [float(b) for b in behind]
        kept = S.staleness_mask(s.astype(np.int64), eta=2)
        assert kept.tolist() == [1.0 if b <= 2 else 0.0 for b in behind]

    return check


def test_staleness_is_exact_far_from_zero() -> None:
    run_property(
        _check_staleness_is_exact_far_from_zero(lambda j, v: S.sample_staleness(j, v).sample)
    )


def test_exactness_property_rejects_a_float_computation() -> None:
    rejects(_check_staleness_is_exact_far_from_zero(_staleness_float_based))


def test_framework_names_and_settings_must_be_strings() -> None:
    odd: Any = []
    with pytest.raises(TypeError, match=r"framework must be a framework name \(a string\)"):
        refimpl.framework_staleness_bound(framework=odd, value=1)
    with pytest.raises(TypeError, match=r"setting must be a setting name"):
        refimpl.framework_staleness_bound(framework="verl", value=1, setting=odd)


def test_more_length_bins_than_samples_split_nothing_further() -> None:
    s, w, lengths = [0, 1, 2], [1.0, 0.0, 1.0], [30.0, 10.0, 20.0]
    few = S.masking_diagnostics(s, w, lengths=lengths, length_bins=3)
    many = S.masking_diagnostics(s, w, lengths=lengths, length_bins=2**40)  # no 8 TiB array
    np.testing.assert_array_equal(many.length_edges, few.length_edges)
    np.testing.assert_array_equal(many.length_edges, [10.0, 10.0, 20.0, 30.0])
    np.testing.assert_array_equal(many.keep_rate_by_length, [0.0, 1.0, 1.0])
