"""Specs of the effort penalty, the inclusion probability, the staleness mask and staleness, and
V-trace: typed check functions over the calls as the candidate saw them."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st
from numpy.typing import NDArray

import refimpl
from refimpl.testing import strategies as rst
from refimpl.testing._arrays import ArrayBridge
from refimpl.testing._engine import Call, Case, Check, Convention, Conventions, Spec
from refimpl.testing.tolerances import summation_factor

Array = NDArray[np.float64]
Strategy = Callable[[Conventions], st.SearchStrategy[list[Call]]]


def _one(args: tuple[Any, ...], **kwargs: Any) -> list[Call]:
    return [(args, kwargs)]


def _fixed(strategy: Callable[[], st.SearchStrategy[list[Call]]]) -> Strategy:
    return lambda conv: strategy()


def _array(raw: Any, call: Call, conv: Conventions) -> Array:
    return ArrayBridge.to_numpy(raw)


def _f(case: Case, i: int = 0) -> Array:
    out: Array = case.found[i]
    return out


def _agrees(case: Case) -> None:
    expected = np.asarray(case.expected(), dtype=np.float64)
    case.show("found:   ", _f(case))
    case.show("expected:", expected)
    case.assert_close(_f(case), expected, case.condition(), "values")


STALENESS_COUNT = Convention(
    "staleness_count",
    "versions_behind",
    ("versions_behind", "versions_spanned"),
    "what the bound counts: s = j − v (versions behind), or s + 1 (versions spanned)",
    who="versions_spanned: verl (max_off_policy_threshold); versions_behind: TRL (and prime-rl, read from its repository)",
)

# --- effort_penalty -----------------------------------------------------------------------


def _effort_calls(sort: bool = False) -> st.SearchStrategy[list[Call]]:
    def build(case: rst.EffortCase) -> list[Call]:
        b = np.sort(case.b) if sort else case.b
        return _one((b,), **case.params._asdict())

    return rst.effort_cases().map(build)


def _effort_condition(call: Call, conv: Conventions, expected: Any) -> Array:
    """``k0·exp(−x)``, ``x = (b − b_min)/τ``: the subtraction errs by ``u·(|b| + |b_min|)``, the
    division and exp add ``|x|·u`` each, relative to ``k``."""
    (b,), kw = call
    x = (np.asarray(b) - kw["b_min"]) / kw["tau"]
    scale = (np.abs(b) + abs(kw["b_min"])) / kw["tau"]
    return np.asarray((scale + 2 * np.abs(x) + 3) * np.abs(expected), dtype=np.float64)


def _k0_at_b_min(case: Case) -> None:
    k0 = case.calls[0][1]["k0"]
    case.show("found:", _f(case), "k0:", k0)
    case.assert_close(_f(case), np.full_like(_f(case), k0), 4 * abs(k0), "k(b_min) vs k0")


def _non_increasing(what: str) -> Callable[[Case], None]:
    def non_increasing(case: Case) -> None:
        x, y = case.calls[0][0][0], _f(case)
        case.show("x:", x)
        case.show("y:", y)
        rise = np.diff(y) > case.allowed(y[:-1], case.condition()[:-1] + case.condition()[1:])
        assert not rise.any(), (
            f"{what} increases from {x[:-1][rise]} to {x[1:][rise]}: {y[:-1][rise]} -> "
            f"{y[1:][rise]}"
        )

    return non_increasing


def _divided_by_e(case: Case) -> None:
    case.show("k(b):      ", _f(case, 0))
    case.show("k(b + tau):", _f(case, 1))
    cond = case.condition(0) + math.e * case.condition(1)
    case.assert_close(_f(case, 1) * math.e, _f(case, 0), cond, "e·k(b + tau) vs k(b)")


def _between_zero_and_k0(case: Case) -> None:
    k, k0 = _f(case), case.calls[0][1]["k0"]
    case.show("k:", k, "k0:", k0)
    assert np.all(np.isfinite(k)), f"non-finite penalties: {k[~np.isfinite(k)]}"
    assert np.all(k >= 0), f"negative penalties: {k[k < 0]}"
    top = k0 + case.slack(k0)
    assert np.all(k <= top), f"penalties above k0={k0}: {k[k > top]}"


def _effort_shifted() -> st.SearchStrategy[list[Call]]:
    def build(case: rst.EffortCase) -> list[Call]:
        p = case.params
        return [((case.b,), p._asdict()), ((case.b + p.tau,), p._asdict())]

    return rst.effort_cases(max_range=20.0).map(build)


EFFORT = Spec(
    name="effort_penalty",
    reference="effort_penalty",
    signature="candidate(b, *, k0, b_min, tau)",
    read=_array,
    expected=lambda call, conv: refimpl.effort_penalty(*call[0], **call[1]),
    condition=_effort_condition,
    checks=(
        Check(
            "agrees_with_reference",
            "k(b) agrees with refimpl.effort_penalty within the derived tolerance",
            _fixed(_effort_calls),
            _agrees,
        ),
        Check(
            "equals_k0_at_b_min",
            "k(b_min) = k0 (claim EF1)",
            _fixed(
                lambda: rst.effort_parameters().map(
                    lambda p: _one((np.array([p.b_min]),), **p._asdict())
                )
            ),
            _k0_at_b_min,
        ),
        Check(
            "non_increasing_in_effort",
            "k(b) is non-increasing in b (more effort, a lower length price)",
            _fixed(lambda: _effort_calls(sort=True)),
            _non_increasing("k"),
        ),
        Check(
            "divided_by_e_per_tau",
            "k(b + tau) = k(b)/e (claim EF3)",
            _fixed(_effort_shifted),
            _divided_by_e,
        ),
        Check(
            "between_zero_and_k0",
            "0 <= k(b) <= k0 for b >= b_min, and finite",
            _fixed(_effort_calls),
            _between_zero_and_k0,
        ),
    ),
)

# --- inclusion_probability ----------------------------------------------------------------


def _inclusion_calls(sort: bool = False) -> st.SearchStrategy[list[Call]]:
    def build(args: tuple[Array, tuple[int, int]]) -> list[Call]:
        u, (n, k) = args
        return _one((np.sort(u) if sort else u,), n=n, k=k)

    return st.tuples(rst.cdf_values(), rst.n_k_pairs()).map(build)


def _inclusion_condition(call: Call, conv: Conventions, expected: Any) -> Array:
    """A sum of ``n`` binomial terms (or a continued fraction) of total ``π``: ``n·u`` absolute,
    with ``n·u·|log F|`` for the powers ``F^j``."""
    (u,), kw = call
    n = kw["n"]
    return np.asarray(n * (np.abs(expected) + 1e-3) + 0.0 * np.asarray(u), dtype=np.float64)


def _in_unit_interval(case: Case) -> None:
    pi = _f(case)
    case.show("pi:", pi)
    s = case.slack(1.0)
    bad = ~((pi >= -s) & (pi <= 1 + s))
    assert not bad.any(), f"values outside [0, 1]: {pi[bad]}"


def _one_when_k_is_n(case: Case) -> None:
    case.show("pi:", _f(case))
    case.assert_close(_f(case), np.ones_like(_f(case)), 4.0, "k == n must give pi == 1")


def _averages_to_k_over_n(case: Case) -> None:
    u, n, k = case.calls[0][0][0], case.calls[0][1]["n"], case.calls[0][1]["k"]
    _, weights = np.polynomial.legendre.leggauss(len(u))
    mean = float(weights @ _f(case)) / 2.0
    case.show("integral of pi:", mean, "k/n:", k / n)
    allowed = max(1e-9, float(case.allowed(1.0, 4.0 * n)))
    assert abs(mean - k / n) <= allowed, (
        f"the mean inclusion probability is {mean!r}, not k/n = {k / n!r}"
    )


def _half_at_median(case: Case) -> None:
    case.show("pi(1/2):", _f(case))
    n = case.calls[0][1]["n"]
    case.assert_close(_f(case), np.full_like(_f(case), 0.5), float(n), "pi(1/2) vs 1/2")


def _endpoints(case: Case) -> None:
    case.show("pi(0), pi(1):", _f(case))
    case.assert_close(_f(case), np.array([1.0, 0.0]), 4.0, "pi(0), pi(1) vs 1, 0")


def _inclusion_quadrature() -> st.SearchStrategy[list[Call]]:
    def build(nk: tuple[int, int]) -> list[Call]:
        n, k = nk
        nodes, _ = np.polynomial.legendre.leggauss(n // 2 + 1)
        return _one(((nodes + 1.0) / 2.0,), n=n, k=k)

    return rst.n_k_pairs().map(build)


INCLUSION = Spec(
    name="inclusion_probability",
    reference="inclusion_probability",
    signature="candidate(cdf, *, n, k)",
    read=_array,
    expected=lambda call, conv: refimpl.inclusion_probability(*call[0], **call[1]),
    condition=_inclusion_condition,
    floor_rtol=1e-10,
    checks=(
        Check(
            "agrees_with_reference",
            "π(F) agrees with refimpl.inclusion_probability within the derived tolerance",
            _fixed(_inclusion_calls),
            _agrees,
        ),
        Check("in_unit_interval", "0 <= π <= 1", _fixed(_inclusion_calls), _in_unit_interval),
        Check(
            "non_increasing_in_cdf",
            "π is non-increasing in F(ℓ): longer rollouts are less likely to be in the batch",
            _fixed(lambda: _inclusion_calls(sort=True)),
            _non_increasing("pi"),
        ),
        Check(
            "one_when_k_equals_n",
            "π ≡ 1 when every launched rollout is trained (k = n)",
            _fixed(
                lambda: st.tuples(rst.cdf_values(), st.integers(1, 64)).map(
                    lambda a: _one((a[0],), n=a[1], k=a[1])
                )
            ),
            _one_when_k_is_n,
        ),
        Check(
            "averages_to_k_over_n",
            "E[π(F(L))] = ∫₀¹ π(u) du = k/n (Gauss–Legendre, exact for this polynomial)",
            _fixed(_inclusion_quadrature),
            _averages_to_k_over_n,
        ),
        Check(
            "half_at_median_when_n_is_2k",
            "π(1/2) = 1/2 when n = 2k (the worked check of conventions §first-k-of-n: n = 8, k = 4)",
            _fixed(
                lambda: st.integers(1, 32).map(lambda k: _one((np.array([0.5]),), n=2 * k, k=k))
            ),
            _half_at_median,
        ),
        Check(
            "one_at_zero_and_zero_at_one",
            "π(0) = 1 (the shortest is always trained) and π(1) = 0 when k < n",
            _fixed(
                lambda: (
                    rst.n_k_pairs()
                    .filter(lambda nk: nk[1] < nk[0])
                    .map(lambda nk: _one((np.array([0.0, 1.0]),), n=nk[0], k=nk[1]))
                )
            ),
            _endpoints,
        ),
    ),
)

# --- staleness_mask -----------------------------------------------------------------------


def _mask_calls(sort: bool = False) -> Strategy:
    def strategy(conv: Conventions) -> st.SearchStrategy[list[Call]]:
        low = 1 if conv["staleness_count"] == "versions_spanned" else 0
        return st.tuples(rst.staleness_arrays(), rst.staleness_bounds()).map(
            lambda a: _one((np.sort(a[0]) if sort else a[0],), eta=max(a[1], low))
        )

    return strategy


def _mask_around_bound(conv: Conventions) -> st.SearchStrategy[list[Call]]:
    shift = 1 if conv["staleness_count"] == "versions_spanned" else 0

    def build(a: tuple[NDArray[np.int64], int]) -> list[Call]:
        s, eta = a
        eta = max(eta, shift)
        bound = eta - shift
        extra = [0, bound, bound + 1]
        return _one((np.concatenate([s, extra]).astype(np.int64),), eta=eta)

    return st.tuples(rst.staleness_arrays(max_size=8), rst.staleness_bounds()).map(build)


def _mask_expected(call: Call, conv: Conventions) -> Array:
    count: Any = conv["staleness_count"]
    return refimpl.staleness_mask(*call[0], **call[1], staleness_count=count)


def _shift(case: Case) -> int:
    return 1 if case.conventions["staleness_count"] == "versions_spanned" else 0


def _mask_agrees(case: Case) -> None:
    expected = case.expected()
    case.show("found:   ", _f(case))
    case.show("expected:", expected)
    if np.array_equal(_f(case), expected):
        return
    s, eta = case.calls[0][0][0], case.calls[0][1]["eta"]
    other: Any = "versions_spanned" if _shift(case) == 0 else "versions_behind"
    # computed directly: at eta = 0 counting versions spanned keeps nothing (s + 1 <= 0)
    alt = (s + (1 - _shift(case)) <= eta).astype(np.float64)
    hint = ""
    if np.array_equal(_f(case), alt):
        hint = (
            f": the mask counts staleness as {other.replace('_', ' ')}: pass "
            f"conventions={{'staleness_count': '{other}'}} if that is intended"
        )
    bad = _f(case) != expected
    raise AssertionError(
        f"weights differ from the reference at s={s[bad]}, eta={eta}: found {_f(case)[bad]}, "
        f"expected {expected[bad]}{hint}"
    )


def _keeps_on_policy(case: Case) -> None:
    s, w = case.calls[0][0][0], _f(case)
    case.show("s:", s)
    case.show("w:", w)
    assert np.all(w[s == 0] == 1.0), f"on-policy samples (s == 0) got weights {w[s == 0]}"


def _keeps_at_bound(case: Case) -> None:
    s, eta, w = case.calls[0][0][0], case.calls[0][1]["eta"], _f(case)
    bound = eta - _shift(case)
    case.show("s:", s, "eta:", eta)
    case.show("w:", w)
    assert np.all(w[s == bound] == 1.0), (
        f"samples with s == {bound} (eta = {eta}) got weights {w[s == bound]}"
    )


def _drops_beyond(case: Case) -> None:
    s, eta, w = case.calls[0][0][0], case.calls[0][1]["eta"], _f(case)
    bound = eta - _shift(case)
    case.show("s:", s, "eta:", eta)
    case.show("w:", w)
    assert np.all(w[s > bound] == 0.0), (
        f"samples with s > {bound} (eta = {eta}) got weights {w[s > bound]} (s = {s[s > bound]})"
    )


def _binary(case: Case) -> None:
    w = _f(case)
    case.show("w:", w)
    assert np.all((w == 0.0) | (w == 1.0)), f"weights other than 0 and 1: {w[(w != 0) & (w != 1)]}"


def _non_increasing_exact(case: Case) -> None:
    s, w = case.calls[0][0][0], _f(case)
    case.show("s:", s)
    case.show("w:", w)
    rise = np.diff(w) > 0
    assert not rise.any(), f"the weight rises from s={s[:-1][rise]} to s={s[1:][rise]}"


MASK = Spec(
    name="staleness_mask",
    reference="staleness_mask",
    signature="candidate(s, *, eta)",
    read=_array,
    expected=_mask_expected,
    condition=lambda call, conv, e: np.zeros_like(e),
    exact=True,
    conventions=(STALENESS_COUNT,),
    checks=(
        Check(
            "agrees_with_reference",
            "1[s <= eta] agrees exactly with refimpl.staleness_mask",
            _mask_calls(),
            _mask_agrees,
        ),
        Check(
            "keeps_on_policy",
            "an on-policy sample (s = 0) is never dropped, whatever eta",
            _mask_around_bound,
            _keeps_on_policy,
        ),
        Check(
            "keeps_at_bound",
            "a sample with s = eta is kept (the bound is inclusive: catches s < eta)",
            _mask_around_bound,
            _keeps_at_bound,
        ),
        Check(
            "drops_beyond_bound",
            "a sample with s > eta gets weight 0",
            _mask_around_bound,
            _drops_beyond,
        ),
        Check("binary", "every weight is 0.0 or 1.0", _mask_calls(), _binary),
        Check(
            "non_increasing_in_staleness",
            "the weight is non-increasing in s",
            _mask_calls(sort=True),
            _non_increasing_exact,
        ),
    ),
)

# --- staleness ----------------------------------------------------------------------------


def _sample(raw: Any, call: Call, conv: Conventions) -> Array:
    return ArrayBridge.to_numpy(getattr(raw, "sample", raw))


def _staleness_expected(call: Call, conv: Conventions) -> Array:
    count: Any = conv["staleness_count"]
    return refimpl.sample_staleness(*call[0], **call[1], staleness_count=count).sample


def _staleness_agrees(case: Case) -> None:
    expected = case.expected()
    case.show("found:   ", _f(case))
    case.show("expected:", expected)
    if np.array_equal(_f(case), expected):
        return
    hint = ""
    if np.array_equal(_f(case), expected + 1 - 2 * _shift(case)):
        other = "versions_spanned" if _shift(case) == 0 else "versions_behind"
        hint = (
            f": staleness is off by one everywhere, as if counted as {other.replace('_', ' ')}: "
            f"pass conventions={{'staleness_count': '{other}'}} if that is intended"
        )
    raise AssertionError(f"staleness {_f(case)} differs from the reference {expected}{hint}")


def _oldest_decides(case: Case) -> None:
    step, versions = case.calls[0][0]
    oldest = np.array([step - np.min(v) + _shift(case) for v in versions], dtype=np.float64)
    case.show("found:        ", _f(case))
    case.show("j - min_t v_t:", oldest)
    assert np.array_equal(_f(case), oldest), f"found {_f(case)}, j − min_t v_t = {oldest}"


def _on_policy_zero(case: Case) -> None:
    case.show("found:", _f(case))
    assert np.all(_f(case) == _shift(case)), f"on-policy samples got staleness {_f(case)}"


def _grows_by_one(case: Case) -> None:
    case.show("trained at j:    ", _f(case, 0))
    case.show("trained at j + 1:", _f(case, 1))
    assert np.array_equal(_f(case, 1), _f(case, 0) + 1.0), (
        f"one step later the staleness is {_f(case, 1)}, not {_f(case, 0) + 1.0}"
    )


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


STALENESS = Spec(
    name="staleness",
    reference="sample_staleness",
    signature="candidate(trained_step, token_versions) -> s per sample (or .sample)",
    read=_sample,
    expected=_staleness_expected,
    condition=lambda call, conv, e: np.zeros_like(e),
    exact=True,
    conventions=(STALENESS_COUNT,),
    checks=(
        Check(
            "agrees_with_reference",
            "s per sample agrees exactly with refimpl.sample_staleness(...).sample",
            _fixed(_staleness_calls),
            _staleness_agrees,
        ),
        Check(
            "oldest_token_decides",
            "s = j − min_t v_t: the oldest token version decides (queue time counts)",
            _fixed(_staleness_calls),
            _oldest_decides,
        ),
        Check(
            "on_policy_is_zero",
            "a sample generated entirely by version j, trained at step j, has s = 0",
            _fixed(_staleness_on_policy),
            _on_policy_zero,
        ),
        Check(
            "grows_by_one_per_trainer_step",
            "the same sample trained one step later is exactly one version staler",
            _fixed(_staleness_next_step),
            _grows_by_one,
        ),
    ),
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


def _vtrace_magnitude(call: Call) -> Array:
    """The V-trace recursion run on absolute values: a running error bound of every output
    (each term's rounding is relative to its magnitude), times the number of steps."""
    v_tm1, v_t, r_t, discount_t, rho = (np.abs(np.asarray(a, dtype=np.float64)) for a in call[0])
    kw = call[1]
    lam = kw.get("lambda_", 1.0)
    rho_bar = np.minimum(kw.get("clip_rho_threshold", 1.0), rho)
    c = lam * np.minimum(1.0, rho)
    delta = rho_bar * (r_t + discount_t * v_t + v_tm1)
    acc = np.zeros_like(delta)
    run = np.zeros(delta.shape[:-1])
    for t in reversed(range(delta.shape[-1])):
        run = delta[..., t] + discount_t[..., t] * c[..., t] * run
        acc[..., t] = run
    steps = float(delta.shape[-1]) + 2.0
    return np.asarray(steps * (acc + v_tm1 + r_t + v_t), dtype=np.float64)


def _vtrace_condition(call: Call, conv: Conventions, expected: Any) -> tuple[Array, ...]:
    m = _vtrace_magnitude(call)
    pg = max(call[1].get("clip_pg_rho_threshold", 1.0), 1.0) * np.abs(np.asarray(call[0][4]))
    return (m, (pg + 1.0) * (m + np.abs(call[0][0])), m)


def _tuple(raw: Any, call: Call, conv: Conventions) -> tuple[Array, ...]:
    return tuple(ArrayBridge.to_numpy(x) for x in raw)


def _vtrace_agrees(case: Case) -> None:
    expected = case.expected()
    cond = case.condition()
    found = case.found[0]
    assert len(found) == 3, f"expected (errors, pg_advantage, q_estimate); got {len(found)} values"
    for name, f, e, c in zip(expected._fields, found, expected, cond, strict=True):
        case.show(name, "found:   ", f)
        case.show(name, "expected:", e)
        case.assert_close(f, e, c, name)


def _on_policy_returns(case: Case) -> None:
    v_tm1, v_t, r_t, discount_t, _ = case.calls[0][0]
    returns = np.empty_like(r_t)
    g = v_t[-1]
    for i in reversed(range(len(r_t))):
        g = r_t[i] + discount_t[i] * g
        returns[i] = g
    targets = v_tm1 + case.found[0][0]
    case.show("targets:", targets)
    case.show("returns:", returns)
    case.assert_close(targets, returns, case.condition()[0] + np.abs(v_tm1), "targets vs returns")


def _zero_errors(case: Case) -> None:
    case.show("errors:", case.found[0][0])
    errors = case.found[0][0]
    case.assert_close(errors, np.zeros_like(errors), case.condition()[0], "errors vs 0")


def _advantage(case: Case) -> None:
    v_tm1, rho = case.calls[0][0][0], case.calls[0][0][4]
    _, pg_advantage, q_estimate = case.found[0]
    clipped = np.minimum(case.calls[0][1]["clip_pg_rho_threshold"], rho)
    case.show("pg_advantage:", pg_advantage)
    case.show("min(pg_bar, rho) * (q - v):", clipped * (q_estimate - v_tm1))
    case.assert_close(
        pg_advantage, clipped * (q_estimate - v_tm1), case.condition()[1], "pg_advantage"
    )


def _finite_outputs(case: Case) -> None:
    shape = np.shape(case.calls[0][0][0])
    for name, x in zip(("errors", "pg_advantage", "q_estimate"), case.found[0], strict=False):
        case.show(name, x)
        assert x.shape == shape, f"{name} has shape {x.shape}, expected {shape}"
        assert np.all(np.isfinite(x)), f"{name} is not finite: {x}"


VTRACE = Spec(
    name="vtrace",
    reference="vtrace",
    signature=(
        "candidate(v_tm1, v_t, r_t, discount_t, rho_tm1, *, lambda_, clip_rho_threshold, "
        "clip_pg_rho_threshold) -> (errors, pg_advantage, q_estimate)"
    ),
    read=_tuple,
    expected=lambda call, conv: refimpl.vtrace(*call[0], **call[1]),
    condition=_vtrace_condition,
    checks=(
        Check(
            "agrees_with_reference",
            "(errors, pg_advantage, q_estimate) agree with refimpl.vtrace (rlax semantics)",
            _fixed(_vtrace_calls),
            _vtrace_agrees,
        ),
        Check(
            "on_policy_targets_are_discounted_returns",
            "with ρ ≡ 1, λ = 1 and consistent values, v_tm1 + errors is the discounted return "
            "bootstrapped from v_t[-1]",
            _fixed(_vtrace_on_policy),
            _on_policy_returns,
        ),
        Check(
            "zero_td_errors_give_zero_errors",
            "when every TD error r + γ·v_t − v_tm1 is 0 the V-trace errors are 0, for any ρ",
            _fixed(_vtrace_zero_td),
            _zero_errors,
        ),
        Check(
            "advantage_is_clipped_ratio_times_q_minus_v",
            "pg_advantage = min(ρ̄_pg, ρ)·(q_estimate − v_tm1)",
            _fixed(_vtrace_calls),
            _advantage,
        ),
        Check(
            "finite_outputs",
            "errors, advantages and Q estimates are finite and of the input shape",
            _fixed(_vtrace_calls),
            _finite_outputs,
        ),
    ),
)

SPECS: tuple[Spec, ...] = (EFFORT, INCLUSION, MASK, STALENESS, VTRACE)
_ = summation_factor
