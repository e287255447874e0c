"""refimpl.staleness by class of hole: vtrace against an exact recursion, the documented recipe of
the over-masking scenarios, the framework settings' refusals and routes, the version rules at
their boundaries.

Each class is tested across the package, not per mutant:

- **arithmetic on asymmetric data**: :func:`refimpl.vtrace` against an independent exact
  ``Fraction`` computation written as the closed sum of the paper (not the backward recursion),
  on ratios above and below both clip thresholds, unequal thresholds ``ρ̄ ≠ ρ̄_pg``, a ``λ`` per
  time step and discounts that are neither 0 nor 1, at every length from 1 (the last index is
  the first) to 5, in one sequence and in a batch;
- **a documented recipe**: :func:`refimpl.over_masking_scenarios` reproduced from the draws its
  Notes describe (lengths ``1 + Geometric(1/200)``, launch ``j − Poisson(0.7)`` clipped at 0, the
  mismatch noise), so that a constant of the recipe moved changes an output;
- **refusals no valid call reaches**: a framework or setting of the wrong type, an unknown one, a
  ragged row that is not numeric at its first and at its last index, a refusal that quotes the
  versions with padding (no invented negative version);
- **option routes**: every ``(framework, setting)`` of :func:`refimpl.framework_staleness_bound`
  gives what its own function gives, and names are matched without case.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

import refimpl
from refimpl.errors import RefimplError

F = Fraction
Array = NDArray[np.float64]

# --- vtrace against the closed sum, exactly -----------------------------------------------------


def _vtrace_exact(
    v_tm1: Sequence[F],
    v_t: Sequence[F],
    r: Sequence[F],
    disc: Sequence[F],
    rho: Sequence[F],
    lam: Sequence[F],
    rho_bar: F,
    pg_bar: F,
) -> tuple[list[F], list[F], list[F]]:
    """Errors, advantages and Q estimates of one sequence, as IMPALA's sums (rlax's layout).

    ``v_s − V(x_s) = Σ_{t≥s} (Π_{i=s}^{t−1} γ_i c_i) δ_t`` with ``c_i = λ_i min(1, ρ_i)`` and
    ``δ_t = min(ρ̄, ρ_t)(r_t + γ_t v_t[t] − V(x_t))``; the Q estimate bootstraps on
    ``λ_s v_{s+1} + (1 − λ_s) V(x_{s+1})`` and on ``v_t`` at the last step.
    """
    n = len(v_tm1)
    c = [lam[i] * min(F(1), rho[i]) for i in range(n)]
    delta = [min(rho_bar, rho[t]) * (r[t] + disc[t] * v_t[t] - v_tm1[t]) for t in range(n)]
    errors = []
    for s in range(n):
        total = F(0)
        for t in range(s, n):
            weight = F(1)
            for i in range(s, t):
                weight *= disc[i] * c[i]
            total += weight * delta[t]
        errors.append(total)
    targets = [errors[s] + v_tm1[s] for s in range(n)]
    boot = [lam[s] * targets[s + 1] + (1 - lam[s]) * v_tm1[s + 1] for s in range(n - 1)]
    boot.append(v_t[n - 1])
    q = [r[s] + disc[s] * boot[s] for s in range(n)]
    pg = [min(pg_bar, rho[s]) * (q[s] - v_tm1[s]) for s in range(n)]
    return errors, pg, q


def _eighths(low: int, high: int) -> st.SearchStrategy[F]:
    """Multiples of 1/8 in [low/8, high/8]: exact in float64, so the inputs are the Fractions."""
    return st.integers(low, high).map(lambda k: F(k, 8))


@st.composite
def vtrace_cases(draw: st.DrawFn) -> dict[str, Any]:
    """A batch of B sequences of length T (1..5) with no accidental symmetry: ratios drawn from
    both sides of each threshold, thresholds that differ, discounts and λ strictly inside (0, 1)
    as well as at the ends, and a λ per time step."""
    t_len = draw(st.integers(1, 5))
    batch = draw(st.integers(1, 3))

    def rows(values: st.SearchStrategy[F]) -> list[list[F]]:
        return [[draw(values) for _ in range(t_len)] for _ in range(batch)]

    rho_bar, pg_bar = draw(
        st.tuples(_eighths(2, 20), _eighths(2, 20)).filter(lambda p: p[0] != p[1])
    )
    return {
        "v_tm1": rows(_eighths(-24, 24)),
        "v_t": rows(_eighths(-24, 24)),
        "r": rows(_eighths(-16, 16)),
        "disc": rows(_eighths(0, 8)),
        "rho": rows(_eighths(0, 24)),
        "lam": [draw(_eighths(0, 8)) for _ in range(t_len)],
        "rho_bar": rho_bar,
        "pg_bar": pg_bar,
        "one_d": batch == 1 and draw(st.booleans()),
    }


def _floats(rows: list[list[F]], one_d: bool) -> Array:
    out = np.array([[float(x) for x in row] for row in rows], dtype=np.float64)
    return out[0] if one_d else out


def _vtrace_property(vtrace_of: Callable[..., Any]) -> Callable[[], None]:
    """``vtrace_of`` agrees with the exact sums to 1e-12 of the data's scale (float64 rounding of
    at most 5 steps of a few products: ~1e-15 relative)."""

    @given(vtrace_cases())
    def prop(case: dict[str, Any]) -> None:
        one_d = case["one_d"]
        args = [_floats(case[k], one_d) for k in ("v_tm1", "v_t", "r", "disc", "rho")]
        lam = np.array([float(x) for x in case["lam"]])
        out = vtrace_of(
            *args,
            lambda_=lam,
            clip_rho_threshold=float(case["rho_bar"]),
            clip_pg_rho_threshold=float(case["pg_bar"]),
        )
        for b in range(len(case["v_tm1"])):
            errors, pg, q = _vtrace_exact(
                case["v_tm1"][b],
                case["v_t"][b],
                case["r"][b],
                case["disc"][b],
                case["rho"][b],
                case["lam"],
                case["rho_bar"],
                case["pg_bar"],
            )
            for got, want in ((out.errors, errors), (out.pg_advantage, pg), (out.q_estimate, q)):
                row = got if one_d else got[b]
                assert row.dtype == np.float64
                assert row.shape == (len(want),)
                scale = 1.0 + max(abs(float(x)) for x in want)
                assert np.max(np.abs(row - np.array([float(x) for x in want]))) <= 1e-12 * scale

    return prop


def test_vtrace_is_the_exact_closed_sum_on_asymmetric_data() -> None:
    run_property(_vtrace_property(refimpl.vtrace))


def test_vtrace_td_error_and_advantage_is_the_same_closed_sum() -> None:
    run_property(_vtrace_property(refimpl.vtrace_td_error_and_advantage))


def _vtrace_variant(defect: str) -> Callable[..., Any]:
    """A numpy V-trace with one deliberate defect (the right one with ``defect=""``)."""

    def run(
        *args: Any, lambda_: Any, clip_rho_threshold: float, clip_pg_rho_threshold: float
    ) -> Any:
        v_tm1, v_t, r, disc, rho = (np.asarray(a, dtype=float) for a in args)
        lam = np.broadcast_to(np.asarray(lambda_, dtype=float), v_tm1.shape)
        rho_bar, pg_bar = clip_rho_threshold, clip_pg_rho_threshold
        if defect == "thresholds swapped":
            rho_bar, pg_bar = pg_bar, rho_bar
        c = lam * (rho if defect == "c unclipped" else np.minimum(1.0, rho))
        with np.errstate(divide="ignore", invalid="ignore"):
            gap = r + disc * v_t - v_tm1
            td = np.minimum(rho_bar, rho) * (gap if defect != "divide" else 1.0 / gap)
        td = np.where(np.isfinite(td), td, 0.0)
        errors = np.empty_like(td)
        err = np.zeros(td.shape[:-1])
        for i in range(td.shape[-1] - 1, -1, -1):
            err = td[..., i] + disc[..., i] * c[..., i] * err
            errors[..., i] = err
        boot = np.empty_like(td)
        ahead = v_t[..., :-1] if defect == "bootstrap on v_t" else v_tm1[..., 1:]
        boot[..., :-1] = lam[..., :-1] * (errors + v_tm1)[..., 1:] + (1 - lam[..., :-1]) * ahead
        boot[..., -1] = v_t[..., -1]
        q = r + disc * boot
        return refimpl.VTraceOutput(errors, np.minimum(pg_bar, rho) * (q - v_tm1), q)

    return run


def test_the_numpy_variant_without_a_defect_passes() -> None:
    run_property(_vtrace_property(_vtrace_variant("")))


@pytest.mark.parametrize(
    "defect", ["divide", "thresholds swapped", "c unclipped", "bootstrap on v_t"]
)
def test_the_vtrace_property_rejects_a_wrong_variant(defect: str) -> None:
    rejects(_vtrace_property(_vtrace_variant(defect)))


def test_vtrace_of_one_step_is_the_clipped_one_step_target() -> None:
    """T = 1: the last index is the first; nothing recurses, the bootstrap is ``v_t``."""
    out = refimpl.vtrace(
        [0.5], [2.0], [1.0], [0.75], [3.0], clip_rho_threshold=1.5, clip_pg_rho_threshold=0.5
    )
    td = 1.5 * (1.0 + 0.75 * 2.0 - 0.5)  # min(ρ̄, 3) (r + γ v_t − V) = 1.5 · 2
    assert out.errors.tolist() == [td]
    assert out.q_estimate.tolist() == [1.0 + 0.75 * 2.0]
    assert out.pg_advantage.tolist() == [0.5 * (2.5 - 0.5)]


def test_vtrace_refuses_zero_time_steps_and_accepts_one() -> None:
    empty = np.zeros((2, 0))
    with pytest.raises(ValueError, match=r"v_tm1 must have at least one time step.*Pass T >= 1"):
        refimpl.vtrace(empty, empty, empty, empty, np.ones((2, 0)))
    one = np.zeros((2, 1))
    out = refimpl.vtrace(one, one, one, one, np.ones((2, 1)))
    assert out.errors.shape == (2, 1)


def test_vtrace_lambda_of_every_accepted_shape_and_the_refusals() -> None:
    """λ as a scalar, one per step (T,) or the full (B, T) give the same as the broadcast array;
    another shape, and λ just outside [0, 1], are refused naming lambda_."""
    v_tm1 = np.array([[0.5, -0.25, 1.0], [0.0, 0.75, -1.0]])
    v_t = np.array([[-0.25, 1.0, 0.5], [0.75, -1.0, 0.25]])
    r = np.array([[1.0, 0.0, -0.5], [0.25, 0.5, 2.0]])
    disc = np.array([[0.5, 0.25, 0.75], [1.0, 0.5, 0.125]])
    rho = np.array([[2.0, 0.5, 1.25], [0.25, 3.0, 1.0]])

    def run(lam: Any) -> Any:
        return refimpl.vtrace(v_tm1, v_t, r, disc, rho, lambda_=lam)

    per_step = np.array([0.25, 0.5, 1.0])
    for lam, same in (
        (per_step, np.broadcast_to(per_step, (2, 3)).copy()),
        (0.5, np.full((2, 3), 0.5)),
    ):
        a, b = run(lam), run(same)
        assert a.errors.tolist() == b.errors.tolist()
        assert a.q_estimate.tolist() == b.q_estimate.tolist()
    assert run(per_step).errors.tolist() != run(0.5).errors.tolist()
    with pytest.raises(ValueError, match=r"lambda_.*compatible shapes.*scalar lambda_"):
        run(np.array([0.5, 0.5]))
    for bad in (math.nextafter(1.0, 2.0), math.nextafter(0.0, -1.0)):
        with pytest.raises(ValueError, match=r"lambda_ must lie in \[0, 1\].*0 <= lambda_ <= 1"):
            run(bad)
    for edge in (0.0, 1.0):
        assert np.all(np.isfinite(run(edge).errors))


# --- the over-masking scenarios: the recipe of their Notes ---------------------------------------


@pytest.mark.parametrize("seed", [0, 7])
def test_over_masking_scenarios_follow_the_documented_recipe(seed: int) -> None:
    """Re-drawn from the same generator in the documented order: lengths ``1 + Geometric(1/200)``;
    launch versions ``j − Poisson(0.7)`` clipped at 0 (the staleness is ``j − launch``: an
    interrupted row keeps its first half at the launch version); a third interrupted; then the
    behaviour log-probabilities ``log U(0.05, 1)`` and the mismatch ``N(0, σ²)`` per token."""
    n, j, sigma, delta = 64, 4, 0.02, 0.03
    a, b = refimpl.over_masking_scenarios(
        np.random.default_rng(seed), batch=n, trained_step=j, mismatch_std=sigma, tight_band=delta
    )
    rng = np.random.default_rng(seed)
    lengths = 1.0 + rng.geometric(1.0 / 200.0, size=n).astype(np.float64)
    launch = np.maximum(j - rng.poisson(0.7, size=n), 0)
    rng.random(n)  # which rollouts are interrupted: no effect on the oldest version
    assert a.lengths.tolist() == lengths.tolist()
    assert b.lengths.tolist() == lengths.tolist()
    assert a.staleness.tolist() == (j - launch).astype(float).tolist()
    assert a.weights_correct.tolist() == (j - launch == 0).astype(float).tolist()
    assert a.weights_buggy.tolist() == [0.0] * n
    width = int(lengths.max())
    pad = (np.arange(width)[None, :] < lengths[:, None]).astype(float)
    lq = np.log(rng.uniform(0.05, 1.0, size=(n, width)))
    lp = lq + rng.normal(0.0, sigma, size=(n, width))
    seq = (np.where(pad > 0, lp - lq, 0.0)).sum(axis=1)
    assert b.staleness.tolist() == [0.0] * n
    want_ok = np.where((seq >= math.log(0.5)) & (seq <= math.log(2.0)), np.exp(seq), 0.0)
    np.testing.assert_allclose(b.weights_correct, want_ok, rtol=1e-13, atol=0.0)
    kept = (seq >= math.log(1.0 - delta)) & (seq <= math.log(1.0 + delta))
    assert (b.weights_buggy > 0).tolist() == kept.tolist()
    assert a.correct.on_policy_dropped_fraction == 0.0
    assert a.buggy.on_policy_dropped_fraction == (1.0 if np.any(j - launch == 0) else 0.0)


def test_over_masking_scenarios_at_their_smallest_batch_and_step() -> None:
    """``batch = 4`` and ``trained_step = 3`` are accepted (their minimums); 3 and 2 refused."""
    a, b = refimpl.over_masking_scenarios(np.random.default_rng(1), batch=4, trained_step=3)
    assert a.staleness.shape == (4,)
    assert b.weights_buggy.shape == (4,)
    with pytest.raises(ValueError, match=r"batch must be >= 4"):
        refimpl.over_masking_scenarios(np.random.default_rng(1), batch=3)
    with pytest.raises(ValueError, match=r"trained_step must be >= 3"):
        refimpl.over_masking_scenarios(np.random.default_rng(1), trained_step=2)
    with pytest.raises(TypeError, match=r"rng.*numpy.random.Generator.*default_rng"):
        refimpl.over_masking_scenarios(1)  # type: ignore[arg-type]


# --- the framework settings: refusals and routes -------------------------------------------------

_ROUTES: list[tuple[str, str | None, str, Callable[..., Any], int]] = [
    ("areal", None, "max_head_offpolicyness", refimpl.areal_staleness_bound, 0),
    ("areal", "max_head_offpolicyness", "max_head_offpolicyness", refimpl.areal_staleness_bound, 0),
    ("skyrl", None, "max_staleness_steps", refimpl.skyrl_staleness_bound, 0),
    ("trl", None, "max_staleness", refimpl.trl_staleness_bound, 0),
    ("verl", None, "staleness_threshold", refimpl.verl_staleness_bound, 0),
    ("verl", "staleness_threshold", "staleness_threshold", refimpl.verl_staleness_bound, 0),
    (
        "verl",
        "max_off_policy_threshold",
        "max_off_policy_threshold",
        refimpl.verl_off_policy_bound,
        1,
    ),
]


@pytest.mark.parametrize(("framework", "setting", "own", "direct", "minimum"), _ROUTES)
def test_every_framework_setting_routes_to_its_own_function(
    framework: str, setting: str | None, own: str, direct: Callable[..., Any], minimum: int
) -> None:
    """The same record as the framework's own function, at its minimum and above; the name is
    matched without case; one below the minimum is refused by the setting's own rule."""
    for value in (minimum, minimum + 3):
        want = direct(**{own: value})
        for name in (framework, framework.upper()):
            got = refimpl.framework_staleness_bound(framework=name, value=value, setting=setting)
            assert got == want
            assert got.setting == own
    with pytest.raises(ValueError, match=rf"{own} must be >= {minimum}"):
        refimpl.framework_staleness_bound(framework=framework, value=minimum - 1, setting=setting)


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"framework": 3}, r"framework.*a framework name \(a string\).*'areal', 'skyrl'"),
        ({"framework": ["verl"]}, r"framework.*a framework name \(a string\).*'trl', 'verl'"),
        ({"framework": "verl", "setting": 2}, r"setting.*a setting name.*Pass the setting's name"),
        ({"framework": "verl", "setting": b"x"}, r"setting.*a setting name.*Pass the setting's"),
    ],
)
def test_a_framework_or_setting_of_the_wrong_type_is_refused(
    kwargs: dict[str, Any], pattern: str
) -> None:
    with pytest.raises(TypeError, match=pattern) as info:
        refimpl.framework_staleness_bound(value=1, **kwargs)
    assert isinstance(info.value, RefimplError)


def test_an_unknown_framework_or_setting_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match=r"framework must be one of 'areal', 'skyrl', 'trl', 'v"):
        refimpl.framework_staleness_bound(framework="prime-rl", value=1)
    with pytest.raises(ValueError, match=r"setting must name one of verl's settings: 'staleness_t"):
        refimpl.framework_staleness_bound(framework="verl", value=1, setting="max_staleness")
    with pytest.raises(ValueError, match=r"one of trl's settings: 'max_staleness'.*omit setting"):
        refimpl.framework_staleness_bound(framework="trl", value=1, setting="staleness_threshold")


# --- version rules at their boundaries -----------------------------------------------------------


@pytest.mark.parametrize("at", [0, 1, 2])
def test_a_ragged_row_that_is_not_numeric_is_refused_naming_its_index(at: int) -> None:
    """First, middle and last row: the refusal names the row (no earlier row is read in its
    place) and says how to pass it."""
    rows: list[Any] = [[1, 2], [3], [2, 2, 2]]
    rows[at] = ["a", "b"]
    with pytest.raises(TypeError, match=rf"token_versions\[{at}\].*1-D numeric array") as info:
        refimpl.sample_staleness(5, rows)
    assert isinstance(info.value, RefimplError)


def test_a_ragged_row_that_is_not_1d_or_is_empty_is_refused_naming_its_index() -> None:
    with pytest.raises(ValueError, match=r"token_versions\[2\] must be 1-D"):
        refimpl.sample_staleness(5, [[1], [2], [[3, 3]]])
    with pytest.raises(ValueError, match=r"token_versions\[1\] must hold at least one token"):
        refimpl.sample_staleness(5, [[1], []])


def test_a_refusal_quoting_padded_versions_shows_no_negative_version() -> None:
    """A float past 2^53 is refused with the versions quoted, padding shown as 0 (the value that
    padding holds in ``Staleness.token``): never a negative number, which would read as the
    negative version the caller must hunt for. The padding here holds 9.5, not 0."""
    versions = np.array([[2.0**54, 9.5], [5.0, 7.0]])
    with pytest.raises(TypeError, match=r"float past 2\^53") as info:
        refimpl.sample_staleness(2**60, versions, mask=[[1, 0], [1, 1]])
    message = str(info.value)
    assert "-1" not in message
    assert "9.5" not in message
    assert "[[1.8014398509481984e+16 0]" in message


@pytest.mark.parametrize("count", [0, 1, 2, 3])
def test_policy_version_with_zero_to_three_publications(count: int) -> None:
    """Each publication time counted strictly (a launch at the instant sees the old version),
    with 0, 1, 2 and 3 versions published, and the last one decreasing refused at its index."""
    pub = [1.0, 2.0, 2.0][:count]
    times = [0.5, 1.0, 1.5, 2.0, 2.5]
    want = [float(sum(tau < t for tau in pub)) for t in times]
    assert refimpl.policy_version(times, publish_times=pub).tolist() == want
    if count >= 2:
        bad = [*pub[:-1], pub[-2] - 0.25]
        with pytest.raises(ValueError, match=rf"publish_times\[{count - 1}\] < publish_times"):
            refimpl.policy_version(times, publish_times=bad)


# --- the diagnostics against an exact model --------------------------------------------------


def _diagnostics_model(s: list[int], w: list[F], lengths: list[int], bins: int) -> dict[str, Any]:
    """Every field of :class:`refimpl.MaskingDiagnostics` from its definition, in Fractions: the
    length bins' interior edges are the ``i/bins`` quantiles of ``method="inverted_cdf"`` (the
    sorted value at index ``ceil(q n) − 1``), without duplicates or the maximum; a length falls in
    the bin of the interior edges strictly below it."""
    n = len(s)
    kept = [x > 0 for x in w]
    on = [i for i in range(n) if s[i] == 0]
    values = sorted(set(s))
    by_s = [[i for i in range(n) if s[i] == v] for v in values]
    bins = min(bins, n)
    ordered = sorted(lengths)
    qs = [F(i, bins) for i in range(1, bins)]
    interior = sorted({ordered[math.ceil(q * n) - 1] for q in qs} - {max(lengths)})
    edges = [min(lengths), *interior, max(lengths)]
    index = [sum(e < ell for e in interior) for ell in lengths]
    members = [[i for i in range(n) if index[i] == b] for b in range(len(edges) - 1)]
    total = sum(w, F(0))
    squares = sum((x * x for x in w), F(0))
    return {
        "kept_fraction": F(sum(kept), n),
        "on_policy_dropped_fraction": F(sum(not kept[i] for i in on), len(on)) if on else F(0),
        "on_policy_count": len(on),
        "effective_sample_size": total * total / squares if squares else F(0),
        "staleness_values": values,
        "keep_rate_by_staleness": [F(sum(kept[i] for i in g), len(g)) for g in by_s],
        "count_by_staleness": [len(g) for g in by_s],
        "length_edges": edges,
        "keep_rate_by_length": [F(sum(kept[i] for i in g), len(g)) for g in members],
        "count_by_length": [len(g) for g in members],
    }


@st.composite
def diagnostics_cases(draw: st.DrawFn) -> tuple[list[int], list[F], list[int], int]:
    """Unequal classes: staleness values with unequal counts, weights that are 0 or not 1,
    lengths with ties, and any number of bins (more than samples included)."""
    n = draw(st.integers(1, 9))
    s = [draw(st.sampled_from([0, 0, 1, 3])) for _ in range(n)]
    w = [draw(st.sampled_from([F(0), F(1, 4), F(3, 2), F(5)])) for _ in range(n)]
    lengths = [draw(st.sampled_from([1, 2, 7, 7, 30, 64])) for _ in range(n)]
    return s, w, lengths, draw(st.integers(1, 12))


def _diagnostics_property(diagnose: Callable[..., Any]) -> Callable[[], None]:
    @given(diagnostics_cases())
    def prop(case: tuple[list[int], list[F], list[int], int]) -> None:
        s, w, lengths, bins = case
        got = diagnose(s, [float(x) for x in w], lengths=lengths, length_bins=bins)
        want = _diagnostics_model(s, w, lengths, bins)
        for name, value in want.items():
            found = getattr(got, name)
            if isinstance(value, list):
                assert np.asarray(found).tolist() == [float(x) for x in value], name
            elif name == "effective_sample_size":
                assert math.isclose(found, float(value), rel_tol=1e-15), name  # a few roundings
            else:
                assert found == float(value), name

    return prop


def test_masking_diagnostics_is_the_exact_model() -> None:
    run_property(_diagnostics_property(refimpl.masking_diagnostics))


def _bins_closed_on_the_left(s: Any, w: Any, *, lengths: Any, length_bins: int) -> Any:
    """A length equal to an interior edge counted in the bin above it (``side="right"``)."""
    out = refimpl.masking_diagnostics(s, w, lengths=lengths, length_bins=length_bins)
    interior = out.length_edges[1:-1]
    ell = np.asarray(lengths, dtype=float)
    index = np.searchsorted(interior, ell, side="right")
    nb = out.length_edges.size - 1
    kept = np.asarray(w, dtype=float) > 0
    count = np.bincount(index, minlength=nb)[:nb]
    rate = np.bincount(index, weights=kept, minlength=nb)[:nb] / np.maximum(count, 1)
    return out._replace(keep_rate_by_length=rate, count_by_length=count)


def _dropped_over_all_samples(s: Any, w: Any, *, lengths: Any, length_bins: int) -> Any:
    """The on-policy dropped fraction divided by n instead of the on-policy count."""
    out = refimpl.masking_diagnostics(s, w, lengths=lengths, length_bins=length_bins)
    return out._replace(
        on_policy_dropped_fraction=out.on_policy_dropped_fraction * out.on_policy_count / len(s)
    )


@pytest.mark.parametrize("wrong", [_bins_closed_on_the_left, _dropped_over_all_samples])
def test_the_diagnostics_property_rejects_a_wrong_variant(wrong: Callable[..., Any]) -> None:
    rejects(_diagnostics_property(wrong))


def test_masking_diagnostics_refuses_a_2d_staleness() -> None:
    with pytest.raises(
        ValueError, match=r"s must be 1-D \(one staleness per sample\).*shape \(n,\)"
    ):
        refimpl.masking_diagnostics([[0, 1]], [[1.0, 1.0]])


@pytest.mark.parametrize("scale", [2.0**-1000, 1.0, 2.0**1000, 5e307])
def test_effective_sample_size_is_exact_at_any_scale(scale: float) -> None:
    """The Notes' claim: computed on ``w / max(w)``, so weights near the float64 limits neither
    overflow (``w²`` of 1.5e308) nor underflow (``w²`` of 2^-1000) and the ESS stays the exact
    81/41 of ``[1, 0, 3, 1/2]`` to a rounding or two, and 81/164 as a fraction."""
    w = np.array([1.0, 0.0, 3.0, 0.5]) * scale
    assert math.isclose(refimpl.effective_sample_size(w), 81 / 41, rel_tol=1e-15)
    frac = refimpl.effective_sample_size(w, ess="fraction")
    assert math.isclose(frac, 81 / 164, rel_tol=1e-15)


# --- refusals no valid call reaches --------------------------------------------------------------


def test_ragged_versions_with_a_mask_and_an_empty_batch_are_refused() -> None:
    with pytest.raises(ValueError, match=r"mask must be None for ragged token_versions.*Drop mask"):
        refimpl.sample_staleness(5, [[1, 2], [3]], mask=[[1, 1], [1, 0]])
    with pytest.raises(ValueError, match=r"token_versions must hold at least one sample.*B >= 1"):
        refimpl.sample_staleness(5, np.zeros((0, 3)))
    one = refimpl.sample_staleness(5, np.array([[2.0]]))
    assert one.sample.tolist() == [3.0]


def test_a_refusal_quoting_ragged_versions_shows_padding_as_zero() -> None:
    """The same refusal reached from ragged rows (the exact re-read of each row), whose padding
    the function makes itself."""
    with pytest.raises(TypeError, match=r"float past 2\^53") as info:
        refimpl.sample_staleness(2**60, [[2.0**54], [5.0, 7.0]])
    message = str(info.value)
    assert "-1" not in message
    assert "[[1.8014398509481984e+16 0]" in message


@pytest.mark.parametrize("offset", [-1, 0, 1])
def test_versions_at_two_to_the_53_are_read_exactly(offset: int) -> None:
    """At ``2^53 + 1`` the float reading rounds (to ``2^53``): the exact path must take over from
    ``2^53`` on, so that a version equal to the trainer step is staleness 0, not 1."""
    v = 2**53 + offset
    for rows in ([[v, v]], [[v], [v, v]], np.array([[v, v]], dtype=np.int64)):
        got = refimpl.sample_staleness(v, rows)
        assert got.sample.tolist() == [0.0] * len(rows)
        got = refimpl.sample_staleness(v + 2, rows)
        assert got.sample.tolist() == [2.0] * len(rows)


def test_staleness_at_padding_is_positive_zero_in_every_layout() -> None:
    """``Staleness.token`` is 0.0 at padding (its sign bit clear), whatever the padding holds and
    whether the function pads (ragged rows) or the caller does (a mask), below and past 2^53."""
    big = 2**60
    cases: list[tuple[int, Any, Any]] = [
        (5, [[3, 4], [5]], None),
        (5, np.array([[3.0, 4.0], [5.0, 9.0]]), [[1, 1], [1, 0]]),
        (big, [[big - 3, big], [big]], None),
        (big, np.array([[big - 3, big], [big, 7]]), [[1, 1], [1, 0]]),
    ]
    for step, rows, mask in cases:
        token = refimpl.sample_staleness(step, rows, mask=mask).token
        assert token[1, 1] == 0.0
        assert not np.signbit(token[1, 1])
        spanned = refimpl.sample_staleness(
            step, rows, mask=mask, staleness_count="versions_spanned"
        ).token
        assert spanned[1, 1] == 0.0
        assert not np.signbit(spanned[1, 1])


@pytest.mark.parametrize("ndim", [0, 3])
def test_arrays_of_another_rank_are_refused_naming_them(ndim: int) -> None:
    """Every (T,) or (B, T) input refuses a scalar and a 3-D array, naming the argument."""
    arr = np.zeros((1,) * ndim)
    ok = np.zeros((1,) * 2)
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("logp_target", lambda: refimpl.truncated_is_weights(arr, arr, cap=2.0)),
        ("logp_behavior", lambda: refimpl.truncated_is_weights(ok, arr, cap=2.0)),
        ("logp_target", lambda: refimpl.masked_is_weights(arr, arr, low=0.5, high=2.0)),
        ("logp_behavior", lambda: refimpl.masked_is_weights(ok, arr, low=0.5, high=2.0)),
        ("v_tm1", lambda: refimpl.vtrace(arr, arr, arr, arr, arr)),
        ("rho_tm1", lambda: refimpl.vtrace(ok, ok, ok, ok, arr)),
        ("token_versions", lambda: refimpl.sample_staleness(3, arr)),
    ]
    for name, call in calls:
        with pytest.raises(ValueError, match=rf"{name} must") as info:
            call()
        assert isinstance(info.value, RefimplError)


@pytest.mark.parametrize(
    ("rows", "mask", "where"),
    [
        ([[0, 3, -2]], None, "Sample 0, token 2 has version -2"),
        ([[0], [0, 0, -1]], None, "Sample 1, token 2 has version -1"),
        (
            np.array([[0.0, -7.0], [0.0, -1.0]]),
            [[1, 0], [1, 1]],
            "Sample 1, token 1 has version -1",
        ),
    ],
)
def test_a_negative_version_is_named_past_versions_at_zero(
    rows: Any, mask: Any, where: str
) -> None:
    """Version 0 (the initial weights) is valid: the refusal of a negative version names the first
    negative one, not a version-0 token before it, nor a negative one at padding."""
    with pytest.raises(ValueError, match=r"token_versions must be >= 0") as info:
        refimpl.sample_staleness(5, rows, mask=mask)
    assert where in str(info.value)
