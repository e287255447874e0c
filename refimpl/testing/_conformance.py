"""The conformance suite: named property checks of a spec, run against a candidate function.

Each check is a Hypothesis strategy of *calls* (positional and keyword arguments for the candidate)
and a few lines of Python, the *assertion*, that inspect the candidate's outputs ``found`` (and may
call the reference ``refimpl.NAME``). The same assertion text is executed while searching for a
counterexample and printed in the reproduction, so the reproduction shows exactly the failure that
was found.
"""

from __future__ import annotations

import json
import math
import textwrap
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

import numpy as np
from hypothesis import HealthCheck, Phase, Verbosity, find, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample
from numpy.typing import NDArray

from refimpl._imports import import_object, split_reference
from refimpl.errors import InvalidArgumentType, RefimplError
from refimpl.testing import strategies as rst
from refimpl.testing.tolerances import FUNCTION, Tolerance

__all__ = [
    "CheckResult",
    "ConformanceError",
    "ConformanceReport",
    "check_conformance",
    "check_names",
    "spec_names",
]

Call = tuple[tuple[Any, ...], dict[str, Any]]
Status = Literal["passed", "failed", "xfailed", "xpassed", "error"]

# ---------------------------------------------------------------------------------------------
# the registry
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Check:
    name: str
    description: str
    strategy: Callable[[], st.SearchStrategy[list[Call]]]
    assertion: str


@dataclass(frozen=True)
class _Spec:
    name: str
    reference: str
    signature: str
    output: Literal["array", "tuple", "sample"]
    checks: tuple[_Check, ...]

    def check(self, name: str) -> _Check:
        return next(c for c in self.checks if c.name == name)


_SPECS: dict[str, _Spec] = {}

_ARRAY_OUTPUT = (
    "found = [np.asarray(candidate(*args, **kwargs), dtype=np.float64) for args, kwargs in calls]"
)
_SAMPLE_OUTPUT = (
    "found = [np.asarray(getattr(out, 'sample', out), dtype=np.float64)\n"
    "         for out in (candidate(*args, **kwargs) for args, kwargs in calls)]"
)
_TUPLE_OUTPUT = (
    "found = [tuple(np.asarray(x, dtype=np.float64) for x in candidate(*args, **kwargs))\n"
    "         for args, kwargs in calls]"
)


def _register(spec: _Spec) -> None:
    names = [c.name for c in spec.checks]
    assert len(set(names)) == len(names), f"duplicate check names in {spec.name}"
    _SPECS[spec.name] = spec


def _agreement(reference: str, *, tuple_output: bool = False) -> str:
    if tuple_output:
        return f"""
expected = refimpl.{reference}(*calls[0][0], **calls[0][1])
for field_name, f, e in zip(expected._fields, found[0], expected):
    show(field_name, "found:   ", f)
    show(field_name, "expected:", e)
    np.testing.assert_allclose(f, e, rtol=RTOL, atol=ATOL, equal_nan=False, err_msg=field_name)
"""
    return f"""
expected = refimpl.{reference}(*calls[0][0], **calls[0][1])
show("found:   ", found[0])
show("expected:", expected)
np.testing.assert_allclose(found[0], expected, rtol=RTOL, atol=ATOL, equal_nan=False)
"""


_FINITE_NON_NEGATIVE = """
w = found[0]
show("found:", w)
assert np.all(np.isfinite(w)), f"non-finite weights at {np.argwhere(~np.isfinite(w)).tolist()}: {w[~np.isfinite(w)]}"
assert np.all(w >= 0), f"negative weights: {w[w < 0]}"
"""


def _one(args: tuple[Any, ...], **kwargs: Any) -> list[Call]:
    return [(args, kwargs)]


# --- effort_penalty -----------------------------------------------------------------------


def _effort_calls(sort: bool = False) -> st.SearchStrategy[list[Call]]:
    def build(case: rst.EffortCase) -> list[Call]:
        b = np.sort(case.b) if sort else case.b
        return _one((b,), **case.params._asdict())

    return rst.effort_cases().map(build)


def _effort_at_b_min() -> st.SearchStrategy[list[Call]]:
    return rst.effort_parameters().map(lambda p: _one((np.array([p.b_min]),), **p._asdict()))


def _effort_shifted() -> st.SearchStrategy[list[Call]]:
    def build(case: rst.EffortCase) -> list[Call]:
        p = case.params
        return [((case.b,), p._asdict()), ((case.b + p.tau,), p._asdict())]

    return rst.effort_cases(max_range=20.0).map(build)


_register(
    _Spec(
        name="effort_penalty",
        reference="effort_penalty",
        signature="candidate(b, *, k0, b_min, tau)",
        output="array",
        checks=(
            _Check(
                "agrees_with_reference",
                "k(b) agrees with refimpl.effort_penalty within the documented tolerance",
                _effort_calls,
                _agreement("effort_penalty"),
            ),
            _Check(
                "equals_k0_at_b_min",
                "k(b_min) = k0 (claim EF1)",
                _effort_at_b_min,
                """
k0 = calls[0][1]["k0"]
show("found:", found[0], "k0:", k0)
np.testing.assert_allclose(found[0], k0, rtol=RTOL, atol=ATOL, err_msg="k(b_min) must equal k0")
""",
            ),
            _Check(
                "non_increasing_in_effort",
                "k(b) is non-increasing in b (more effort, a lower length price)",
                lambda: _effort_calls(sort=True),
                """
b, k = calls[0][0][0], found[0]
show("b:", b)
show("k:", k)
rise = np.diff(k) > ATOL + RTOL * np.abs(k[:-1])
assert not rise.any(), f"k increases from b={b[:-1][rise]} to b={b[1:][rise]}: {k[:-1][rise]} -> {k[1:][rise]}"
""",
            ),
            _Check(
                "divided_by_e_per_tau",
                "k(b + tau) = k(b)/e (claim EF3)",
                _effort_shifted,
                """
show("k(b):      ", found[0])
show("k(b + tau):", found[1])
np.testing.assert_allclose(found[1], found[0] / np.e, rtol=RTOL, atol=ATOL,
                           err_msg="k(b + tau) must equal k(b)/e")
""",
            ),
            _Check(
                "between_zero_and_k0",
                "0 <= k(b) <= k0 for b >= b_min, and finite",
                _effort_calls,
                """
k, k0 = found[0], calls[0][1]["k0"]
show("k:", k, "k0:", k0)
assert np.all(np.isfinite(k)), f"non-finite penalties: {k[~np.isfinite(k)]}"
assert np.all(k >= 0), f"negative penalties: {k[k < 0]}"
assert np.all(k <= k0 * (1 + RTOL) + ATOL), f"penalties above k0={k0}: {k[k > k0 * (1 + RTOL) + ATOL]}"
""",
            ),
        ),
    )
)

# --- inclusion_probability ----------------------------------------------------------------


def _inclusion_calls(sort: bool = False) -> st.SearchStrategy[list[Call]]:
    def build(args: tuple[NDArray[np.float64], tuple[int, int]]) -> list[Call]:
        u, (n, k) = args
        return _one((np.sort(u) if sort else u,), n=n, k=k)

    return st.tuples(rst.cdf_values(), rst.n_k_pairs()).map(build)


def _inclusion_k_equals_n() -> st.SearchStrategy[list[Call]]:
    return st.tuples(rst.cdf_values(), st.integers(1, 64)).map(
        lambda a: _one((a[0],), n=a[1], k=a[1])
    )


def _inclusion_quadrature() -> st.SearchStrategy[list[Call]]:
    def build(nk: tuple[int, int]) -> list[Call]:
        n, k = nk
        nodes, _ = np.polynomial.legendre.leggauss(n // 2 + 1)
        return _one(((nodes + 1.0) / 2.0,), n=n, k=k)

    return rst.n_k_pairs().map(build)


def _inclusion_median() -> st.SearchStrategy[list[Call]]:
    return st.integers(1, 32).map(lambda k: _one((np.array([0.5]),), n=2 * k, k=k))


def _inclusion_endpoints() -> st.SearchStrategy[list[Call]]:
    return (
        rst.n_k_pairs()
        .filter(lambda nk: nk[1] < nk[0])
        .map(lambda nk: _one((np.array([0.0, 1.0]),), n=nk[0], k=nk[1]))
    )


_register(
    _Spec(
        name="inclusion_probability",
        reference="inclusion_probability",
        signature="candidate(cdf, *, n, k)",
        output="array",
        checks=(
            _Check(
                "agrees_with_reference",
                "π(F) agrees with refimpl.inclusion_probability within the documented tolerance",
                _inclusion_calls,
                _agreement("inclusion_probability"),
            ),
            _Check(
                "in_unit_interval",
                "0 <= π <= 1",
                _inclusion_calls,
                """
pi = found[0]
show("pi:", pi)
assert np.all((pi >= 0) & (pi <= 1)), f"values outside [0, 1]: {pi[~((pi >= 0) & (pi <= 1))]}"
""",
            ),
            _Check(
                "non_increasing_in_cdf",
                "π is non-increasing in F(ℓ): longer rollouts are less likely to be in the batch",
                lambda: _inclusion_calls(sort=True),
                """
u, pi = calls[0][0][0], found[0]
show("cdf:", u)
show("pi: ", pi)
rise = np.diff(pi) > ATOL + RTOL * np.abs(pi[:-1])
assert not rise.any(), f"pi increases from F={u[:-1][rise]} to F={u[1:][rise]}: {pi[:-1][rise]} -> {pi[1:][rise]}"
""",
            ),
            _Check(
                "one_when_k_equals_n",
                "π ≡ 1 when every launched rollout is trained (k = n)",
                _inclusion_k_equals_n,
                """
show("pi:", found[0])
np.testing.assert_allclose(found[0], 1.0, rtol=RTOL, atol=ATOL, err_msg="k == n must give pi == 1")
""",
            ),
            _Check(
                "averages_to_k_over_n",
                "E[π(F(L))] = ∫₀¹ π(u) du = k/n (Gauss–Legendre, exact for this polynomial)",
                _inclusion_quadrature,
                """
u, n, k = calls[0][0][0], calls[0][1]["n"], calls[0][1]["k"]
_, weights = np.polynomial.legendre.leggauss(len(u))
mean = float(weights @ found[0]) / 2.0
show("integral of pi:", mean, "k/n:", k / n)
assert abs(mean - k / n) <= 1e-9, f"the mean inclusion probability is {mean!r}, not k/n = {k / n!r}"
""",
            ),
            _Check(
                "half_at_median_when_n_is_2k",
                "π(1/2) = 1/2 when n = 2k (the worked check of conventions §first-k-of-n: n = 8, k = 4)",
                _inclusion_median,
                """
show("pi(1/2):", found[0])
np.testing.assert_allclose(found[0], 0.5, rtol=RTOL, atol=ATOL)
""",
            ),
            _Check(
                "one_at_zero_and_zero_at_one",
                "π(0) = 1 (the shortest is always trained) and π(1) = 0 when k < n",
                _inclusion_endpoints,
                """
show("pi(0), pi(1):", found[0])
np.testing.assert_allclose(found[0], [1.0, 0.0], rtol=RTOL, atol=ATOL)
""",
            ),
        ),
    )
)

# --- staleness_mask -----------------------------------------------------------------------


def _mask_calls(sort: bool = False) -> st.SearchStrategy[list[Call]]:
    return st.tuples(rst.staleness_arrays(), rst.staleness_bounds()).map(
        lambda a: _one((np.sort(a[0]) if sort else a[0],), eta=a[1])
    )


def _mask_around_bound() -> st.SearchStrategy[list[Call]]:
    def build(a: tuple[NDArray[np.int64], int]) -> list[Call]:
        s, eta = a
        return _one((np.concatenate([s, [0, eta, eta + 1]]).astype(np.int64),), eta=eta)

    return st.tuples(rst.staleness_arrays(max_size=8), rst.staleness_bounds()).map(build)


_register(
    _Spec(
        name="staleness_mask",
        reference="staleness_mask",
        signature="candidate(s, *, eta)",
        output="array",
        checks=(
            _Check(
                "agrees_with_reference",
                "1[s <= eta] agrees exactly with refimpl.staleness_mask",
                _mask_calls,
                _agreement("staleness_mask"),
            ),
            _Check(
                "keeps_on_policy",
                "an on-policy sample (s = 0) is never dropped, whatever eta",
                _mask_around_bound,
                """
s, w = calls[0][0][0], found[0]
show("s:", s)
show("w:", w)
assert np.all(w[s == 0] == 1.0), f"on-policy samples (s == 0) got weights {w[s == 0]}"
""",
            ),
            _Check(
                "keeps_at_bound",
                "a sample with s = eta is kept (the bound is inclusive: catches s < eta)",
                _mask_around_bound,
                """
s, eta, w = calls[0][0][0], calls[0][1]["eta"], found[0]
show("s:", s, "eta:", eta)
show("w:", w)
assert np.all(w[s == eta] == 1.0), f"samples with s == eta == {eta} got weights {w[s == eta]}"
""",
            ),
            _Check(
                "drops_beyond_bound",
                "a sample with s > eta gets weight 0",
                _mask_around_bound,
                """
s, eta, w = calls[0][0][0], calls[0][1]["eta"], found[0]
show("s:", s, "eta:", eta)
show("w:", w)
assert np.all(w[s > eta] == 0.0), f"samples with s > eta = {eta} got weights {w[s > eta]} (s = {s[s > eta]})"
""",
            ),
            _Check(
                "binary",
                "every weight is 0.0 or 1.0",
                _mask_calls,
                """
w = found[0]
show("w:", w)
assert np.all((w == 0.0) | (w == 1.0)), f"weights other than 0 and 1: {w[(w != 0.0) & (w != 1.0)]}"
""",
            ),
            _Check(
                "non_increasing_in_staleness",
                "the weight is non-increasing in s",
                lambda: _mask_calls(sort=True),
                """
s, w = calls[0][0][0], found[0]
show("s:", s)
show("w:", w)
rise = np.diff(w) > 0
assert not rise.any(), f"the weight rises from s={s[:-1][rise]} to s={s[1:][rise]}"
""",
            ),
        ),
    )
)

# --- tis and masked_is --------------------------------------------------------------------


def _pair_calls(
    params: st.SearchStrategy[dict[str, float]],
    *,
    max_abs_logp: float = 20.0,
    with_mask: bool = False,
) -> st.SearchStrategy[list[Call]]:
    def build(a: tuple[rst.LogProbPair, dict[str, float]]) -> list[Call]:
        pair, kw = a
        if with_mask:
            return _one((pair.logp_target, pair.logp_behavior), **kw, mask=pair.mask)
        return _one((pair.logp_target, pair.logp_behavior), **kw)

    pairs = rst.logprob_pairs(max_batch=3, max_time=8, max_abs_logp=max_abs_logp, padded=with_mask)
    return st.tuples(pairs, params).map(build)


def _caps() -> st.SearchStrategy[dict[str, float]]:
    return rst.is_caps().map(lambda c: {"cap": c})


def _bands() -> st.SearchStrategy[dict[str, float]]:
    return rst.is_bands().map(lambda b: {"low": b[0], "high": b[1]})


_ON_POLICY_ONE = """
lt, lb = calls[0][0]
w = found[0]
on = lt == lb
show("on-policy tokens:", on)
show("w:", w)
assert np.all(w[on] == 1.0), f"tokens with ratio exactly 1 got weights {w[on]}"
"""

_ZERO_AT_PADDING = """
mask, w = calls[0][1]["mask"], found[0]
show("mask:", mask)
show("w:   ", w)
assert w.shape == mask.shape, f"token-level weights must have the input shape {mask.shape}; got {w.shape}"
assert np.all(w[mask == 0] == 0.0), f"padding tokens got weights {w[mask == 0]}"
"""

_register(
    _Spec(
        name="tis",
        reference="truncated_is_weights",
        signature="candidate(logp_target, logp_behavior, *, cap[, mask]) (token level)",
        output="array",
        checks=(
            _Check(
                "agrees_with_reference",
                "min(π/μ, C) agrees with refimpl.truncated_is_weights (token level)",
                lambda: _pair_calls(_caps()),
                _agreement("truncated_is_weights"),
            ),
            _Check(
                "on_policy_weight_is_one",
                "a token whose ratio is exactly 1 gets weight 1",
                lambda: _pair_calls(_caps()),
                _ON_POLICY_ONE,
            ),
            _Check(
                "never_exceeds_cap",
                "no weight exceeds the cap C (catches TIS without its cap)",
                lambda: _pair_calls(_caps()),
                """
w, cap = found[0], calls[0][1]["cap"]
show("w:", w, "cap:", cap)
assert np.all(w <= cap * (1 + RTOL)), f"weights above the cap {cap}: {w[w > cap * (1 + RTOL)]}"
""",
            ),
            _Check(
                "equals_ratio_below_cap",
                "below the cap the weight is the ratio π/μ itself (truncation is one-sided)",
                lambda: _pair_calls(_caps()),
                """
lt, lb = calls[0][0]
w, cap = found[0], calls[0][1]["cap"]
ratio = np.exp(lt - lb)
below = ratio < cap
show("ratio:", ratio)
show("w:    ", w)
np.testing.assert_allclose(w[below], ratio[below], rtol=RTOL, atol=ATOL,
                           err_msg="below the cap the weight must equal the ratio")
""",
            ),
            _Check(
                "finite_and_non_negative",
                "weights are finite and >= 0, also for log-ratios of several hundred",
                lambda: _pair_calls(_caps(), max_abs_logp=1000.0),
                _FINITE_NON_NEGATIVE,
            ),
            _Check(
                "zero_at_padding",
                "with mask=, padding tokens get weight 0 and valid ones the unmasked weight",
                lambda: _pair_calls(_caps(), with_mask=True),
                _ZERO_AT_PADDING,
            ),
        ),
    )
)

_register(
    _Spec(
        name="masked_is",
        reference="masked_is_weights",
        signature="candidate(logp_target, logp_behavior, *, low, high[, mask]) (token level)",
        output="array",
        checks=(
            _Check(
                "agrees_with_reference",
                "ρ·1[α <= ρ <= β] agrees with refimpl.masked_is_weights (token level; a ratio "
                "within the tolerance of a band edge may be kept or dropped)",
                lambda: _pair_calls(_bands()),
                """
lt, lb = calls[0][0]
low, high = calls[0][1]["low"], calls[0][1]["high"]
expected = refimpl.masked_is_weights(lt, lb, low=low, high=high)
ratio = np.exp(lt - lb)
edge = np.isclose(ratio, low, rtol=1e-9, atol=0) | np.isclose(ratio, high, rtol=1e-9, atol=0)
either = edge & ((found[0] == 0) | np.isclose(found[0], ratio, rtol=RTOL, atol=ATOL))
show("found:   ", found[0])
show("expected:", expected)
np.testing.assert_allclose(np.where(either, expected, found[0]), expected, rtol=RTOL, atol=ATOL,
                           equal_nan=False)
""",
            ),
            _Check(
                "on_policy_weight_is_one",
                "a token whose ratio is exactly 1 gets weight 1 (the band contains 1)",
                lambda: _pair_calls(_bands()),
                _ON_POLICY_ONE,
            ),
            _Check(
                "zero_outside_band",
                "a ratio outside [α, β] is dropped (weight 0), not clipped to the edge",
                lambda: _pair_calls(_bands()),
                """
lt, lb = calls[0][0]
low, high, w = calls[0][1]["low"], calls[0][1]["high"], found[0]
ratio = np.exp(lt - lb)
outside = (ratio < low * (1 - 1e-9)) | (ratio > high * (1 + 1e-9))
show("ratio:", ratio, "band:", (low, high))
show("w:    ", w)
assert np.all(w[outside] == 0.0), f"ratios {ratio[outside]} outside [{low}, {high}] got weights {w[outside]}"
""",
            ),
            _Check(
                "equals_ratio_inside_band",
                "inside [α, β] the weight is the ratio π/μ itself",
                lambda: _pair_calls(_bands()),
                """
lt, lb = calls[0][0]
low, high, w = calls[0][1]["low"], calls[0][1]["high"], found[0]
ratio = np.exp(lt - lb)
inside = (ratio > low * (1 + 1e-9)) & (ratio < high * (1 - 1e-9))
show("ratio:", ratio, "band:", (low, high))
show("w:    ", w)
np.testing.assert_allclose(w[inside], ratio[inside], rtol=RTOL, atol=ATOL,
                           err_msg="inside the band the weight must equal the ratio")
""",
            ),
            _Check(
                "finite_and_non_negative",
                "weights are finite and >= 0, also for log-ratios of several hundred",
                lambda: _pair_calls(_bands(), max_abs_logp=1000.0),
                _FINITE_NON_NEGATIVE,
            ),
            _Check(
                "zero_at_padding",
                "with mask=, padding tokens get weight 0",
                lambda: _pair_calls(_bands(), with_mask=True),
                _ZERO_AT_PADDING,
            ),
        ),
    )
)

# --- staleness ----------------------------------------------------------------------------


def _staleness_calls() -> st.SearchStrategy[list[Call]]:
    return rst.token_versions().map(lambda b: _one((b.trained_step, b.token_versions)))


def _staleness_on_policy() -> st.SearchStrategy[list[Call]]:
    def build(b: rst.VersionedBatch) -> list[Call]:
        return _one((b.trained_step, [np.full_like(v, b.trained_step) for v in b.token_versions]))

    return rst.token_versions().map(build)


def _staleness_next_step() -> st.SearchStrategy[list[Call]]:
    def build(b: rst.VersionedBatch) -> list[Call]:
        return [
            ((b.trained_step, b.token_versions), {}),
            ((b.trained_step + 1, b.token_versions), {}),
        ]

    return rst.token_versions().map(build)


_register(
    _Spec(
        name="staleness",
        reference="sample_staleness",
        signature="candidate(trained_step, token_versions) -> s per sample (or .sample)",
        output="sample",
        checks=(
            _Check(
                "agrees_with_reference",
                "s per sample agrees exactly with refimpl.sample_staleness(...).sample",
                _staleness_calls,
                """
expected = refimpl.sample_staleness(*calls[0][0], **calls[0][1]).sample
show("found:   ", found[0])
show("expected:", expected)
np.testing.assert_allclose(found[0], expected, rtol=RTOL, atol=ATOL, equal_nan=False)
""",
            ),
            _Check(
                "oldest_token_decides",
                "s = j − min_t v_t: the oldest token version decides (queue time counts)",
                _staleness_calls,
                """
step, versions = calls[0][0]
oldest = np.array([step - np.min(v) for v in versions], dtype=np.float64)
show("found:          ", found[0])
show("j - min_t v_t:  ", oldest)
np.testing.assert_array_equal(found[0], oldest)
""",
            ),
            _Check(
                "on_policy_is_zero",
                "a sample generated entirely by version j, trained at step j, has s = 0",
                _staleness_on_policy,
                """
show("found:", found[0])
assert np.all(found[0] == 0.0), f"on-policy samples got staleness {found[0]}"
""",
            ),
            _Check(
                "grows_by_one_per_trainer_step",
                "the same sample trained one step later is exactly one version staler",
                _staleness_next_step,
                """
show("trained at j:    ", found[0])
show("trained at j + 1:", found[1])
np.testing.assert_array_equal(found[1], found[0] + 1.0)
""",
            ),
        ),
    )
)

# --- vtrace -------------------------------------------------------------------------------


def _vtrace_params() -> st.SearchStrategy[dict[str, float]]:
    lam = st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0.0, 1.0))
    thr = st.one_of(st.just(1.0), st.floats(0.25, 5.0))
    return st.builds(
        lambda a, b, c: {"lambda_": a, "clip_rho_threshold": b, "clip_pg_rho_threshold": c},
        lam,
        thr,
        thr,
    )


def _vtrace_calls() -> st.SearchStrategy[list[Call]]:
    return st.tuples(rst.vtrace_inputs(max_time=6), _vtrace_params()).map(
        lambda a: _one(tuple(a[0]), **a[1])
    )


def _vtrace_on_policy() -> st.SearchStrategy[list[Call]]:
    def build(x: rst.VTraceInputs) -> list[Call]:
        v_t = np.concatenate([x.v_tm1[1:], x.v_t[-1:]])  # consistent next-state values
        ones = np.ones_like(x.rho_tm1)
        args = (x.v_tm1, v_t, x.r_t, x.discount_t, ones)
        return _one(args, lambda_=1.0, clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0)

    return rst.vtrace_inputs(max_time=6).map(build)


def _vtrace_zero_td() -> st.SearchStrategy[list[Call]]:
    def build(a: tuple[rst.VTraceInputs, dict[str, float]]) -> list[Call]:
        x, kw = a
        r_t = x.v_tm1 - x.discount_t * x.v_t  # every TD error r + γ v_t − v_tm1 is zero
        return _one((x.v_tm1, x.v_t, r_t, x.discount_t, x.rho_tm1), **kw)

    return st.tuples(rst.vtrace_inputs(max_time=6), _vtrace_params()).map(build)


_register(
    _Spec(
        name="vtrace",
        reference="vtrace",
        signature=(
            "candidate(v_tm1, v_t, r_t, discount_t, rho_tm1, *, lambda_, clip_rho_threshold, "
            "clip_pg_rho_threshold) -> (errors, pg_advantage, q_estimate)"
        ),
        output="tuple",
        checks=(
            _Check(
                "agrees_with_reference",
                "(errors, pg_advantage, q_estimate) agree with refimpl.vtrace (rlax semantics)",
                _vtrace_calls,
                _agreement("vtrace", tuple_output=True),
            ),
            _Check(
                "on_policy_targets_are_discounted_returns",
                "with ρ ≡ 1, λ = 1 and consistent values, v_tm1 + errors is the discounted return "
                "bootstrapped from v_t[-1]",
                _vtrace_on_policy,
                """
v_tm1, v_t, r_t, discount_t, _ = calls[0][0]
returns = np.empty_like(r_t)
g = v_t[-1]
for i in reversed(range(len(r_t))):
    g = r_t[i] + discount_t[i] * g
    returns[i] = g
targets = v_tm1 + found[0][0]
show("targets:", targets)
show("returns:", returns)
np.testing.assert_allclose(targets, returns, rtol=RTOL, atol=ATOL)
""",
            ),
            _Check(
                "zero_td_errors_give_zero_errors",
                "when every TD error r + γ·v_t − v_tm1 is 0 the V-trace errors are 0, for any ρ",
                _vtrace_zero_td,
                """
show("errors:", found[0][0])
np.testing.assert_allclose(found[0][0], 0.0, rtol=0, atol=ATOL)
""",
            ),
            _Check(
                "advantage_is_clipped_ratio_times_q_minus_v",
                "pg_advantage = min(ρ̄_pg, ρ)·(q_estimate − v_tm1)",
                _vtrace_calls,
                """
v_tm1, rho = calls[0][0][0], calls[0][0][4]
_, pg_advantage, q_estimate = found[0]
clipped = np.minimum(calls[0][1]["clip_pg_rho_threshold"], rho)
show("pg_advantage:", pg_advantage)
show("min(pg_bar, rho) * (q - v):", clipped * (q_estimate - v_tm1))
np.testing.assert_allclose(pg_advantage, clipped * (q_estimate - v_tm1), rtol=RTOL, atol=ATOL)
""",
            ),
            _Check(
                "finite_outputs",
                "errors, advantages and Q estimates are finite and of the input shape",
                _vtrace_calls,
                """
shape = np.shape(calls[0][0][0])
for name, x in zip(("errors", "pg_advantage", "q_estimate"), found[0]):
    show(name, x)
    assert x.shape == shape, f"{name} has shape {x.shape}, expected {shape}"
    assert np.all(np.isfinite(x)), f"{name} is not finite: {x}"
""",
            ),
        ),
    )
)


# ---------------------------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one named check.

    Attributes
    ----------
    spec : str
        The spec the check belongs to.
    name : str
        The check's stable name (``id`` is ``"{spec}.{name}"``).
    description : str
        The property, in one sentence.
    status : {"passed", "failed", "xfailed", "xpassed", "error"}
        ``xfailed``: failed, as declared in ``expected_failures``; ``xpassed``: declared as an
        expected failure but passed (remove the declaration); ``error``: the check could not run
        (e.g. the installed refimpl lacks the reference function).
    message : str
        Why it failed (empty when it passed).
    counterexample : str
        The smallest failing calls found by Hypothesis, as Python source (empty when it passed).
    reproduction : str
        A runnable Python snippet that calls the candidate on the counterexample and fails the
        same way (empty when it passed).
    reason : str
        The reason given for a declared expected failure (empty otherwise).
    """

    spec: str
    name: str
    description: str
    status: Status
    message: str = ""
    counterexample: str = ""
    reproduction: str = ""
    reason: str = ""

    @property
    def id(self) -> str:
        """The stable check id, ``"{spec}.{name}"``."""
        return f"{self.spec}.{self.name}"

    @property
    def ok(self) -> bool:
        """True for ``passed`` and ``xfailed`` (a declared, still failing expected failure)."""
        return self.status in ("passed", "xfailed")

    def to_dict(self) -> dict[str, str]:
        """A JSON-ready dict of every field plus ``id``."""
        return {
            "id": self.id,
            "spec": self.spec,
            "name": self.name,
            "description": self.description,
            "status": self.status,
            "message": self.message,
            "counterexample": self.counterexample,
            "reproduction": self.reproduction,
            "reason": self.reason,
        }

    def render(self) -> str:
        """A human-readable account: status line, message and reproduction."""
        head = f"{self.status.upper():8s} {self.id}: {self.description}"
        if self.status == "passed":
            return head
        parts = [head]
        if self.reason:
            parts.append(f"  declared expected failure: {self.reason}")
        if self.status == "xpassed":
            parts.append(
                "  it passed: remove it from expected_failures (the declaration is stale)."
            )
        if self.message:
            parts.append(textwrap.indent(self.message, "  "))
        if self.reproduction:
            parts.append("  reproduction:")
            parts.append(textwrap.indent(self.reproduction, "    "))
        return "\n".join(parts)


class ConformanceError(RefimplError, AssertionError):
    """Raised by :meth:`ConformanceReport.raise_if_failed`; its message is the full report."""


@dataclass(frozen=True)
class ConformanceReport:
    """What :func:`check_conformance` found: one :class:`CheckResult` per check.

    Attributes
    ----------
    spec : str
        The spec checked.
    candidate : str
        The candidate, as ``module:qualname`` where it can be imported.
    results : tuple of CheckResult
        In the spec's check order.
    """

    spec: str
    candidate: str
    results: tuple[CheckResult, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        """True when every check passed or failed as declared (no failure, error or xpass)."""
        return all(r.ok for r in self.results)

    @property
    def failures(self) -> tuple[CheckResult, ...]:
        """The results that make the report not ok (failed, xpassed, error)."""
        return tuple(r for r in self.results if not r.ok)

    def __getitem__(self, name: str) -> CheckResult:
        """The result of the check ``name`` (short name or ``spec.name``)."""
        short = name.removeprefix(f"{self.spec}.")
        for r in self.results:
            if r.name == short:
                return r
        raise KeyError(
            f"no check {name!r} in this report; checks: {[r.name for r in self.results]}"
        )

    def summary(self) -> str:
        """One line per check, then the details of every check that is not ``passed``."""
        counts: dict[str, int] = {}
        for r in self.results:
            counts[r.status] = counts.get(r.status, 0) + 1
        tally = ", ".join(f"{v} {k}" for k, v in counts.items())
        lines = [f"refimpl conformance of {self.candidate} to spec {self.spec!r}: {tally}"]
        lines += [f"  {r.status:8s} {r.id}" for r in self.results]
        details = [r.render() for r in self.results if r.status != "passed"]
        return "\n".join(lines + (["", *details] if details else []))

    def __str__(self) -> str:
        return self.summary()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: spec, candidate, ok and the results."""
        return {
            "spec": self.spec,
            "candidate": self.candidate,
            "ok": self.ok,
            "results": [r.to_dict() for r in self.results],
        }

    def to_json(self, **kwargs: Any) -> str:
        """:meth:`to_dict` as JSON (keyword arguments go to :func:`json.dumps`)."""
        return json.dumps(self.to_dict(), **kwargs)

    def raise_if_failed(self) -> None:
        """Raise :class:`ConformanceError` (an ``AssertionError``) unless :attr:`ok`.

        The message is :meth:`summary`, with the reproduction of every failure.
        """
        if not self.ok:
            raise ConformanceError(self.summary())


# ---------------------------------------------------------------------------------------------
# running
# ---------------------------------------------------------------------------------------------


def spec_names() -> tuple[str, ...]:
    """The specs that :func:`check_conformance` knows, in a stable order.

    Examples
    --------
    >>> from refimpl.testing import spec_names
    >>> spec_names()  # doctest: +NORMALIZE_WHITESPACE
    ('effort_penalty', 'inclusion_probability', 'staleness_mask', 'tis', 'masked_is', 'staleness',
     'vtrace')
    """
    return tuple(_SPECS)


def _spec(name: Any) -> _Spec:
    if not isinstance(name, str) or name not in _SPECS:
        raise ValueError(
            f"spec must be one of {', '.join(map(repr, _SPECS))}; got spec={name!r}. "
            "Pass the name of the function family your candidate implements."
        )
    return _SPECS[name]


def check_names(spec: str) -> tuple[str, ...]:
    """The stable names of the checks of ``spec``, in the order they run.

    Examples
    --------
    >>> from refimpl.testing import check_names
    >>> check_names("staleness_mask")  # doctest: +NORMALIZE_WHITESPACE
    ('agrees_with_reference', 'keeps_on_policy', 'keeps_at_bound', 'drops_beyond_bound',
     'binary', 'non_increasing_in_staleness')
    """
    return tuple(c.name for c in _spec(spec).checks)


def _resolve(candidate: Any) -> tuple[Callable[..., Any], str, str]:
    """The callable, its label, and the source line that imports it as ``candidate``."""
    if isinstance(candidate, str):
        module_name, qualname = split_reference(candidate, what="candidate")
        obj = import_object(candidate, what="candidate")
        return obj, candidate, _import_line(module_name, qualname)
    if not callable(candidate):
        raise InvalidArgumentType(
            f"candidate must be a callable or 'package.module:function'; got {candidate!r} of "
            f"type {type(candidate).__name__}. Pass your function itself."
        )
    home = getattr(candidate, "__module__", None)
    where = getattr(candidate, "__qualname__", None)
    if isinstance(home, str) and isinstance(where, str) and "<" not in where and home != "__main__":
        return candidate, f"{home}:{where}", _import_line(home, where)
    label = repr(candidate)
    line = f"candidate = ...  # your function ({label} cannot be imported by name: define it here)"
    return candidate, label, line


def _import_line(module_name: str, qualname: str) -> str:
    if "." not in qualname:
        return f"from {module_name} import {qualname} as candidate"
    return f"import {module_name}\ncandidate = {module_name}.{qualname}"


def _literal(value: Any) -> str:
    """Python source that rebuilds ``value`` (numpy arrays, floats, Fractions, containers)."""
    if isinstance(value, np.ndarray):
        return f"np.array({_literal(value.tolist())}, dtype=np.{value.dtype.name})"
    if isinstance(value, np.generic):
        return _literal(value.item())
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f"float({str(value)!r})"
    if isinstance(value, Fraction):
        return f"Fraction({value.numerator}, {value.denominator})"
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    if isinstance(value, tuple):
        inner = ", ".join(_literal(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_literal(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _calls_source(calls: Sequence[Call]) -> str:
    rows = [f"    ({_literal(args)}, {_literal(kwargs)})," for args, kwargs in calls]
    return "calls = [\n" + "\n".join(rows) + "\n]"


def _quiet(*args: Any) -> None:
    return None


class _Runner:
    """Evaluates one check of one spec against one candidate."""

    def __init__(
        self, candidate: Callable[..., Any], spec: _Spec, check: _Check, tolerance: Tolerance
    ) -> None:
        import refimpl

        self.candidate = candidate
        self.spec = spec
        self.check = check
        self.tolerance = tolerance
        self.refimpl = refimpl
        self.output_code = {
            "array": _ARRAY_OUTPUT,
            "tuple": _TUPLE_OUTPUT,
            "sample": _SAMPLE_OUTPUT,
        }[spec.output]
        where = f"<refimpl.testing {spec.name}.{check.name}>"
        self._output = compile(self.output_code, where, "exec")
        self._assertion = compile(textwrap.dedent(check.assertion), where, "exec")

    def violation(self, calls: list[Call]) -> str | None:
        namespace: dict[str, Any] = {
            "np": np,
            "refimpl": self.refimpl,
            "Fraction": Fraction,
            "candidate": self.candidate,
            "calls": calls,
            "RTOL": self.tolerance.rtol,
            "ATOL": self.tolerance.atol,
            "show": _quiet,
        }
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            try:
                exec(self._output, namespace)
            except Exception as exc:
                return f"the candidate raised {type(exc).__name__}: {exc}"
            try:
                exec(self._assertion, namespace)
            except AssertionError as exc:
                return str(exc).strip() or "assertion failed"
            except Exception as exc:
                return f"the candidate's output could not be checked: {type(exc).__name__}: {exc}"
        return None

    def fails(self, calls: list[Call]) -> bool:
        return self.violation(calls) is not None

    def reproduction(self, calls: list[Call], import_line: str) -> str:
        source = _calls_source(calls)
        header = [
            f"# refimpl conformance check {self.spec.name}.{self.check.name}:",
            f"# {self.check.description}",
            *(["from fractions import Fraction", ""] if "Fraction(" in source else []),
            "import numpy as np",
            "",
            "import refimpl",
            import_line,
            "",
            f"RTOL, ATOL = {self.tolerance.rtol!r}, {self.tolerance.atol!r}",
            "show = print",
            source,
            self.output_code,
        ]
        return "\n".join(header) + "\n" + textwrap.dedent(self.check.assertion).strip() + "\n"


def _expected(
    spec: _Spec, expected_failures: Mapping[str, str] | Iterable[str] | None
) -> dict[str, str]:
    if expected_failures is None:
        return {}
    if isinstance(expected_failures, str):
        raise TypeError(
            f"expected_failures must be a mapping {{check name: reason}} or an iterable of check "
            f"names; got the string {expected_failures!r}. Wrap it in a list: "
            f"[{expected_failures!r}]."
        )
    if isinstance(expected_failures, Mapping):
        declared = {str(k): str(v) for k, v in expected_failures.items()}
    else:
        declared = {str(k): "declared expected failure" for k in expected_failures}
    known = [c.name for c in spec.checks]
    out: dict[str, str] = {}
    for name, reason in declared.items():
        short = name.removeprefix(f"{spec.name}.")
        if short not in known:
            raise ValueError(
                f"expected_failures names a check that spec {spec.name!r} does not have; got "
                f"{name!r}. Use one of: {', '.join(known)}."
            )
        out[short] = reason
    return out


def check_conformance(
    candidate: Callable[..., Any] | str,
    *,
    spec: str,
    expected_failures: Mapping[str, str] | Iterable[str] | None = None,
    max_examples: int = 100,
    checks: Iterable[str] | None = None,
    derandomize: bool = True,
) -> ConformanceReport:
    """Run the named property checks of ``spec`` against ``candidate``; return the report.

    Each check draws valid inputs with :mod:`refimpl.testing.strategies`, calls the candidate with
    the reference's signature (arrays positional, parameters keyword-only, numpy float64 inputs)
    and asserts a property: agreement with the reference within
    :data:`refimpl.testing.tolerances.FUNCTION`, or an invariant of the spec that holds whatever the
    reference says (on-policy weight 1, monotone, bounded, finite). Hypothesis searches for a
    counterexample and shrinks it; the report carries the smallest one and a runnable reproduction.

    The specs and the candidate signatures (those of the reference):

    - ``effort_penalty``: ``f(b, *, k0, b_min, tau)`` (``refimpl.effort_penalty``);
    - ``inclusion_probability``: ``f(cdf, *, n, k)`` (``refimpl.inclusion_probability``);
    - ``staleness_mask``: ``f(s, *, eta)`` (``refimpl.staleness_mask``);
    - ``tis``: ``f(logp_target, logp_behavior, *, cap[, mask])``, token level
      (``refimpl.truncated_is_weights``);
    - ``masked_is``: ``f(logp_target, logp_behavior, *, low, high[, mask])``, token level
      (``refimpl.masked_is_weights``);
    - ``staleness``: ``f(trained_step, token_versions)`` with ragged per-token versions, returning
      ``s`` per sample or an object with a ``.sample`` attribute (``refimpl.sample_staleness``);
    - ``vtrace``: ``f(v_tm1, v_t, r_t, discount_t, rho_tm1, *, lambda_, clip_rho_threshold,
      clip_pg_rho_threshold)`` returning ``(errors, pg_advantage, q_estimate)`` (``refimpl.vtrace``).

    Parameters
    ----------
    candidate : callable or str
        The function under test, or ``"package.module:function"`` (then the reproduction imports
        it by that name). A callable defined at module level is located by its ``__module__`` and
        ``__qualname__``. Wrap a function with another signature or array type in a module-level
        adapter.
    spec : str
        One of :func:`spec_names`.
    expected_failures : mapping or iterable of str, optional
        Checks that are known to fail, as ``{name: reason}`` or names (short or ``"spec.name"``).
        They are still run: a declared failure that fails is ``xfailed``, one that passes is
        ``xpassed`` and makes the report fail (the declaration is stale).
    max_examples : int
        Examples Hypothesis tries per check before declaring it passed.
    checks : iterable of str, optional
        Run only these checks (default: all, see :func:`check_names`).
    derandomize : bool
        Use a fixed seed, so that a CI run is reproducible (default). ``False`` explores new
        examples on every run.

    Returns
    -------
    ConformanceReport
        Per-check :class:`CheckResult`; :meth:`ConformanceReport.raise_if_failed` turns it into a
        test failure.

    Raises
    ------
    ValueError
        For an unknown spec, check name or expected failure, an unimportable candidate string, or
        ``max_examples < 1``.
    TypeError
        If ``candidate`` is not callable.

    Notes
    -----
    Check names are stable: a check is never renamed or given a new meaning; new checks may be
    added (declare them as expected failures while you fix your implementation). A check whose
    reference function is missing from the installed refimpl reports ``error``.

    Examples
    --------
    A staleness mask with the classic off-by-one (``s < eta`` instead of ``s <= eta``):

    >>> import numpy as np
    >>> from refimpl.testing import check_conformance
    >>> def strict_mask(s, *, eta):
    ...     return (np.asarray(s) < eta).astype(float)
    >>> report = check_conformance(strict_mask, spec="staleness_mask", max_examples=30)
    >>> report.ok
    False
    >>> report["keeps_at_bound"].status
    'failed'
    >>> print(report["keeps_on_policy"].message)
    on-policy samples (s == 0) got weights [0. 0. 0.]
    """
    the_spec = _spec(spec)
    if isinstance(max_examples, bool) or not isinstance(max_examples, int) or max_examples < 1:
        raise ValueError(
            f"max_examples must be an int >= 1; got max_examples={max_examples!r}. "
            "Pass e.g. max_examples=100."
        )
    func, label, import_line = _resolve(candidate)
    declared = _expected(the_spec, expected_failures)
    known = [c.name for c in the_spec.checks]
    selected = known if checks is None else [str(c).removeprefix(f"{spec}.") for c in checks]
    for name in selected:
        if name not in known:
            raise ValueError(
                f"checks names a check that spec {spec!r} does not have; got {name!r}. "
                f"Use one of: {', '.join(known)}."
            )
    tolerance = FUNCTION[the_spec.name]
    config = settings(
        max_examples=max_examples,
        derandomize=derandomize,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
    )
    import refimpl

    results = []
    for check in (the_spec.check(name) for name in selected):
        reason = declared.get(check.name, "")
        common = {"spec": the_spec.name, "name": check.name, "description": check.description}
        if "refimpl." in check.assertion and not hasattr(refimpl, the_spec.reference):
            results.append(
                CheckResult(
                    **common,
                    status="error",
                    message=f"refimpl.{the_spec.reference} is not available in the installed "
                    "refimpl; upgrade refimpl.",
                    reason=reason,
                )
            )
            continue
        runner = _Runner(func, the_spec, check, tolerance)
        try:
            example = find(check.strategy(), runner.fails, settings=config)
        except NoSuchExample:
            status: Status = "xpassed" if reason else "passed"
            results.append(CheckResult(**common, status=status, reason=reason))
            continue
        results.append(
            CheckResult(
                **common,
                status="xfailed" if reason else "failed",
                message=runner.violation(example) or "",
                counterexample=_calls_source(example),
                reproduction=runner.reproduction(example, import_line),
                reason=reason,
            )
        )
    return ConformanceReport(spec=the_spec.name, candidate=label, results=tuple(results))
