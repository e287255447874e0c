"""refimpl.testing: the conformance suite passes on refimpl and rejects deliberately wrong candidates.

The wrong candidates below are module-level functions, so that the reproduction a report prints can
import them (``from test_testing import mask_strict as candidate``) and be executed here.
"""

from __future__ import annotations

import contextlib
import io
import json
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from numpy.typing import ArrayLike, NDArray
from scipy import stats

import refimpl
from refimpl.testing import (
    CheckResult,
    ConformanceError,
    ConformanceReport,
    check_conformance,
    check_names,
    spec_names,
)

# Few examples: each wrong candidate below is caught within a handful (the searches are
# derandomized, so these runs are reproducible), and refimpl itself passes at any count.
EXAMPLES = 40
#: Wrong candidates that only a rarer draw exposes get check_conformance's default budget. A
#: masked IS weight that forgets its lower edge fails only where a real token's ratio falls below
#: a positive lower edge: 40 derandomized examples found one or not depending on which modules
#: were loaded (Hypothesis draws constants from the local modules' source), 60 to 400 always did.
BUDGET = {"mis_no_lower_edge": 100}

# ---------------------------------------------------------------------------------------------
# deliberately wrong candidates (each one a real kind of bug)
# ---------------------------------------------------------------------------------------------

Array = NDArray[np.float64]


def penalty_wrong_sign(b: ArrayLike, *, k0: float, b_min: float, tau: float) -> Any:
    return k0 * np.exp((np.asarray(b, dtype=float) - b_min) / tau)


def penalty_ignores_b_min(b: ArrayLike, *, k0: float, b_min: float, tau: float) -> Any:
    return k0 * np.exp(-np.asarray(b, dtype=float) / tau)


def penalty_tau_multiplies(b: ArrayLike, *, k0: float, b_min: float, tau: float) -> Any:
    return k0 * np.exp(-(np.asarray(b, dtype=float) - b_min) * tau)


def inclusion_off_by_one(cdf: ArrayLike, *, n: int, k: int) -> Any:
    return np.asarray(
        stats.binom.cdf(k, n - 1, np.asarray(cdf, dtype=float)), dtype=float
    )  # ≤ k instead of ≤ k − 1


def inclusion_counts_itself(cdf: ArrayLike, *, n: int, k: int) -> Any:
    return np.asarray(
        stats.binom.cdf(k - 1, n, np.asarray(cdf, dtype=float)), dtype=float
    )  # n others instead of n − 1


def inclusion_reversed(cdf: ArrayLike, *, n: int, k: int) -> Any:
    return 1.0 - refimpl.inclusion_probability(cdf, n=n, k=k)


def inclusion_scaled(cdf: ArrayLike, *, n: int, k: int) -> Any:
    return 1.5 * refimpl.inclusion_probability(cdf, n=n, k=k)


def mask_strict(s: ArrayLike, *, eta: int) -> Any:
    return (np.asarray(s) < eta).astype(float)  # the off-by-one: s < η drops s == η


def mask_one_too_many(s: ArrayLike, *, eta: int) -> Any:
    return (np.asarray(s) <= eta + 1).astype(float)


def mask_decay(s: ArrayLike, *, eta: int) -> Any:
    return np.asarray(0.5 ** np.asarray(s, dtype=float))


def mask_readmits_very_stale(s: ArrayLike, *, eta: int) -> Any:
    s = np.asarray(s)
    return ((s <= eta) | (s > 2 * eta + 3)).astype(float)


def mask_raises(s: ArrayLike, *, eta: int) -> Any:
    if eta == 0:
        raise ZeroDivisionError("eta must be positive")
    return (np.asarray(s) <= eta).astype(float)


def tis_without_cap(
    logp_target: ArrayLike, logp_behavior: ArrayLike, *, cap: float, mask: Any = None
) -> Any:
    return np.exp(np.asarray(logp_target) - np.asarray(logp_behavior))


def tis_two_sided(
    logp_target: ArrayLike, logp_behavior: ArrayLike, *, cap: float, mask: Any = None
) -> Any:
    ratio = np.exp(np.asarray(logp_target) - np.asarray(logp_behavior))
    return np.clip(ratio, 1.0 / cap, cap)


def tis_naive_ratio(
    logp_target: ArrayLike, logp_behavior: ArrayLike, *, cap: float, mask: Any = None
) -> Any:
    ratio = np.exp(np.asarray(logp_target)) / np.exp(np.asarray(logp_behavior))  # 0/0 = NaN
    out = np.minimum(ratio, cap)
    return out if mask is None else out * np.asarray(mask)


def tis_masks_at_cap(
    logp_target: ArrayLike, logp_behavior: ArrayLike, *, cap: float, mask: Any = None
) -> Any:
    ratio = np.exp(np.minimum(np.asarray(logp_target) - np.asarray(logp_behavior), 50.0))
    return ratio * (ratio < cap)  # drops instead of truncating, strictly: ratio 1 dropped at cap 1


def mis_clipped(
    logp_target: ArrayLike, logp_behavior: ArrayLike, *, low: float, high: float, mask: Any = None
) -> Any:
    return np.clip(np.exp(np.asarray(logp_target) - np.asarray(logp_behavior)), low, high)


def mis_no_lower_edge(
    logp_target: ArrayLike, logp_behavior: ArrayLike, *, low: float, high: float, mask: Any = None
) -> Any:
    ratio = np.exp(np.minimum(np.asarray(logp_target) - np.asarray(logp_behavior), 50.0))
    out = ratio * (ratio <= high)
    return out if mask is None else out * np.asarray(mask)


def mis_inverted(
    logp_target: ArrayLike, logp_behavior: ArrayLike, *, low: float, high: float, mask: Any = None
) -> Any:
    ratio = np.exp(np.minimum(np.asarray(logp_target) - np.asarray(logp_behavior), 50.0))
    return ratio * ((ratio < low) | (ratio > high))


def mis_naive_ratio(
    logp_target: ArrayLike, logp_behavior: ArrayLike, *, low: float, high: float, mask: Any = None
) -> Any:
    ratio = np.exp(np.asarray(logp_target)) / np.exp(np.asarray(logp_behavior))
    out = ratio * ((ratio >= low) & (ratio <= high))
    return out if mask is None else out * np.asarray(mask)


def staleness_newest_token(trained_step: int, token_versions: list[ArrayLike]) -> Any:
    return np.array([trained_step - np.max(v) for v in token_versions], dtype=float)


def staleness_counts_the_published_version(
    trained_step: int, token_versions: list[ArrayLike]
) -> Any:
    # off by one: counts from version j + 1, the one published after step j
    return np.array([trained_step + 1 - np.min(v) for v in token_versions], dtype=float)


def staleness_against_newest_in_batch(trained_step: int, token_versions: list[ArrayLike]) -> Any:
    # measures against the newest version seen in the batch instead of the trainer step
    newest = max(int(np.max(v)) for v in token_versions)
    return np.array([newest - np.min(v) for v in token_versions], dtype=float)


VTraceArgs = tuple[ArrayLike, ArrayLike, ArrayLike, ArrayLike, ArrayLike]


def vtrace_pg_unclipped(*args: Any, **kwargs: Any) -> tuple[Array, Array, Array]:
    out = refimpl.vtrace(*args, **kwargs)
    return out.errors, np.asarray(args[4]) * (out.q_estimate - np.asarray(args[0])), out.q_estimate


def vtrace_no_discount(*args: Any, **kwargs: Any) -> tuple[Array, Array, Array]:
    v_tm1, v_t, r_t, discount_t, rho = args
    return tuple(refimpl.vtrace(v_tm1, v_t, r_t, np.ones_like(discount_t), rho, **kwargs))  # type: ignore[return-value]


def vtrace_rho_bar_in_traces(*args: Any, **kwargs: Any) -> tuple[Array, Array, Array]:
    """Cuts traces with the clip threshold ρ̄ instead of c̄ = 1 (TD errors otherwise right)."""
    v_tm1, v_t, r_t, discount_t, rho = (np.asarray(a, dtype=float) for a in args)
    lam, rho_bar = kwargs["lambda_"], kwargs["clip_rho_threshold"]
    c = lam * np.minimum(rho_bar, rho)
    td = np.minimum(rho_bar, rho) * (r_t + discount_t * v_t - v_tm1)
    errors = np.empty_like(td)
    err = 0.0
    for i in reversed(range(td.size)):
        err = td[i] + discount_t[i] * c[i] * err
        errors[i] = err
    ref = refimpl.vtrace(v_tm1, v_t, r_t, discount_t, rho, **kwargs)
    return errors, ref.pg_advantage, ref.q_estimate


def vtrace_batched_shape(*args: Any, **kwargs: Any) -> tuple[Array, Array, Array]:
    out = refimpl.vtrace(*args, **kwargs)
    return out.errors[None, :], out.pg_advantage[None, :], out.q_estimate[None, :]


def _per_row(function: Callable[..., Array], *arrays: ArrayLike, mask: ArrayLike, **kw: Any) -> Any:
    """refimpl's sequence-level weight, 0 for an all-padding row (which refimpl refuses)."""
    m = np.asarray(mask, dtype=float)
    rows = m.sum(axis=1) > 0
    out = np.zeros(m.shape[0])
    if rows.any():
        out[rows] = function(*(np.asarray(a)[rows] for a in arrays), mask=m[rows], **kw)
    return out


def tis_sequence(
    logp_target: ArrayLike, logp_behavior: ArrayLike, *, cap: float, mask: ArrayLike
) -> Any:
    return _per_row(
        refimpl.truncated_is_weights,
        logp_target,
        logp_behavior,
        mask=mask,
        cap=cap,
        level="sequence",
    )


def tis_geometric(
    logp_target: ArrayLike, logp_behavior: ArrayLike, *, cap: float, mask: ArrayLike
) -> Any:
    return _per_row(
        refimpl.truncated_is_weights,
        logp_target,
        logp_behavior,
        mask=mask,
        cap=cap,
        level="geometric",
    )


def mis_sequence(
    logp_target: ArrayLike, logp_behavior: ArrayLike, *, low: float, high: float, mask: ArrayLike
) -> Any:
    return _per_row(
        refimpl.masked_is_weights,
        logp_target,
        logp_behavior,
        mask=mask,
        low=low,
        high=high,
        level="sequence",
    )


def mis_geometric(
    logp_target: ArrayLike, logp_behavior: ArrayLike, *, low: float, high: float, mask: ArrayLike
) -> Any:
    return _per_row(
        refimpl.masked_is_weights,
        logp_target,
        logp_behavior,
        mask=mask,
        low=low,
        high=high,
        level="geometric",
    )


REFERENCE: dict[str, Callable[..., Any]] = {
    "tis_sequence": tis_sequence,
    "tis_geometric": tis_geometric,
    "masked_is_sequence": mis_sequence,
    "masked_is_geometric": mis_geometric,
    "decoupled_ppo": refimpl.decoupled_ppo_weights,
    "staleness_decay": refimpl.staleness_decay,
    "admission_capacity": refimpl.admission_capacity,
    "effective_sample_size": refimpl.effective_sample_size,
    "masking_diagnostics": refimpl.masking_diagnostics,
    "shaped_reward": refimpl.shaped_reward,
    "dapo_overlong": refimpl.dapo_overlong_penalty,
    "kimi_length_reward": refimpl.kimi_length_reward,
    "cosine_length_reward": refimpl.cosine_length_reward,
    "l1_exact": refimpl.l1_exact_reward,
    "l1_max": refimpl.l1_max_reward,
    "effort_penalty": refimpl.effort_penalty,
    "staleness_mask": refimpl.staleness_mask,
    "tis": refimpl.truncated_is_weights,
    "masked_is": refimpl.masked_is_weights,
    "vtrace": refimpl.vtrace,
    "staleness": refimpl.sample_staleness,
}
if hasattr(refimpl, "inclusion_probability"):
    REFERENCE["inclusion_probability"] = refimpl.inclusion_probability

# (spec, wrong candidate, checks that must reject it)
MUTANTS: list[tuple[str, Callable[..., Any], set[str]]] = [
    (
        "effort_penalty",
        penalty_wrong_sign,
        {
            "agrees_with_reference",
            "non_increasing_in_effort",
            "divided_by_e_per_tau",
            "between_zero_and_k0",
        },
    ),
    ("effort_penalty", penalty_ignores_b_min, {"agrees_with_reference", "equals_k0_at_b_min"}),
    ("effort_penalty", penalty_tau_multiplies, {"agrees_with_reference", "divided_by_e_per_tau"}),
    (
        "inclusion_probability",
        inclusion_off_by_one,
        {"agrees_with_reference", "averages_to_k_over_n", "half_at_median_when_n_is_2k"},
    ),
    (
        "inclusion_probability",
        inclusion_counts_itself,
        {"agrees_with_reference", "one_when_k_equals_n", "half_at_median_when_n_is_2k"},
    ),
    (
        "inclusion_probability",
        inclusion_reversed,
        {"non_increasing_in_cdf", "one_at_zero_and_zero_at_one"},
    ),
    ("inclusion_probability", inclusion_scaled, {"in_unit_interval"}),
    (
        "staleness_mask",
        mask_strict,
        {"agrees_with_reference", "keeps_on_policy", "keeps_at_bound"},
    ),
    ("staleness_mask", mask_one_too_many, {"agrees_with_reference", "drops_beyond_bound"}),
    ("staleness_mask", mask_decay, {"agrees_with_reference", "binary", "drops_beyond_bound"}),
    ("staleness_mask", mask_readmits_very_stale, {"non_increasing_in_staleness"}),
    (
        "tis",
        tis_without_cap,
        {
            "agrees_with_reference",
            "never_exceeds_cap",
            "finite_and_non_negative",
            "zero_at_padding",
        },
    ),
    ("tis", tis_two_sided, {"agrees_with_reference", "equals_ratio_below_cap"}),
    ("tis", tis_naive_ratio, {"finite_and_non_negative"}),
    (
        "tis",
        tis_masks_at_cap,
        {"agrees_with_reference", "on_policy_weight_is_one"},
    ),
    (
        "masked_is",
        mis_clipped,
        {"agrees_with_reference", "zero_outside_band", "zero_at_padding"},
    ),
    ("masked_is", mis_no_lower_edge, {"agrees_with_reference", "zero_outside_band"}),
    (
        "masked_is",
        mis_inverted,
        {"agrees_with_reference", "on_policy_weight_is_one", "equals_ratio_inside_band"},
    ),
    ("masked_is", mis_naive_ratio, {"finite_and_non_negative"}),
    ("staleness", staleness_newest_token, {"agrees_with_reference", "oldest_token_decides"}),
    (
        "staleness",
        staleness_counts_the_published_version,
        {"agrees_with_reference", "oldest_token_decides", "on_policy_is_zero"},
    ),
    (
        "staleness",
        staleness_against_newest_in_batch,
        {"agrees_with_reference", "grows_by_one_per_trainer_step"},
    ),
    (
        "vtrace",
        vtrace_pg_unclipped,
        {"agrees_with_reference", "advantage_is_clipped_ratio_times_q_minus_v"},
    ),
    (
        "vtrace",
        vtrace_no_discount,
        {
            "agrees_with_reference",
            "on_policy_targets_are_discounted_returns",
            "zero_td_errors_give_zero_errors",
        },
    ),
    ("vtrace", vtrace_rho_bar_in_traces, {"agrees_with_reference"}),
    ("vtrace", vtrace_batched_shape, {"agrees_with_reference", "finite_outputs"}),
]


@contextlib.contextmanager
def _numpy_warnings_ignored() -> Iterator[None]:
    """The snippets run wrong candidates, which may overflow; pytest makes warnings errors."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


@pytest.fixture(scope="module")
def mutant_reports() -> dict[str, ConformanceReport]:
    # Unshrunk: each check's verdict is the same, and a failure still carries its counterexample
    # and reproduction (test_without_shrinking_the_verdicts_are_the_same_in_fewer_calls); shrinking
    # was most of the cost of these failing checks.
    return {
        f.__name__: check_conformance(
            f,
            spec=spec,
            max_examples=BUDGET.get(f.__name__, EXAMPLES),
            checks=must_fail,
            shrink=False,
        )
        for spec, f, must_fail in MUTANTS
    }


# ---------------------------------------------------------------------------------------------
# the suite on refimpl itself and on wrong candidates
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", spec_names())
def test_every_spec_passes_on_refimpls_own_function(spec: str) -> None:
    report = check_conformance(REFERENCE[spec], spec=spec, max_examples=EXAMPLES)
    report.raise_if_failed()
    assert [r.status for r in report.results] == ["passed"] * len(check_names(spec))


@pytest.mark.parametrize(
    ("spec", "candidate", "must_fail"), MUTANTS, ids=[f.__name__ for _, f, _ in MUTANTS]
)
def test_wrong_candidate_fails_the_checks_that_target_its_bug(
    spec: str,
    candidate: Callable[..., Any],
    must_fail: set[str],
    mutant_reports: dict[str, ConformanceReport],
) -> None:
    report = mutant_reports[candidate.__name__]
    failed = {r.name for r in report.results if r.status == "failed"}
    assert failed == must_fail, report.summary()
    assert not report.ok
    for r in report.results:
        if r.status == "failed":
            assert r.message
            assert r.counterexample
            assert r.reproduction


# The specs whose wrong candidates are here (numpy); the others are in test_conformance_torch.py.
NUMPY_SPECS = sorted({s for s, _, _ in MUTANTS})


@pytest.mark.parametrize("spec", NUMPY_SPECS)
def test_every_check_is_seen_to_reject_some_wrong_candidate(spec: str) -> None:
    shown = set().union(*(m for s, _, m in MUTANTS if s == spec))
    assert shown == set(check_names(spec))


@pytest.mark.parametrize(
    ("spec", "candidate", "must_fail"), MUTANTS, ids=[f.__name__ for _, f, _ in MUTANTS]
)
def test_printed_reproduction_runs_and_shows_the_mismatch(
    spec: str,
    candidate: Callable[..., Any],
    must_fail: set[str],
    mutant_reports: dict[str, ConformanceReport],
) -> None:
    result = mutant_reports[candidate.__name__][sorted(must_fail)[0]]
    assert f"from test_testing import {candidate.__name__} as candidate" in result.reproduction
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(AssertionError), _numpy_warnings_ignored():
        exec(compile(result.reproduction, "<reproduction>", "exec"), {})
    assert out.getvalue().strip(), "the reproduction prints the values it compares"


def test_candidate_that_raises_is_reported_with_its_exception() -> None:
    report = check_conformance(mask_raises, spec="staleness_mask", max_examples=EXAMPLES)
    result = report["agrees_with_reference"]
    assert result.status == "raised"
    assert result.message == "the candidate raised ZeroDivisionError: eta must be positive"
    assert "'eta': 0" in result.counterexample
    with pytest.raises(ZeroDivisionError):
        exec(compile(result.reproduction, "<reproduction>", "exec"), {})


def test_counterexample_is_shrunk_to_the_smallest_case() -> None:
    report = check_conformance(mask_strict, spec="staleness_mask", max_examples=EXAMPLES)
    assert report["agrees_with_reference"].counterexample == (
        "calls = [\n    ((np.array([0], dtype=np.int64),), {'eta': 0}),\n]"
    )


def test_runs_are_reproducible_when_derandomized() -> None:
    run = ["agrees_with_reference", "equals_ratio_below_cap", "on_policy_weight_is_one"]
    first = check_conformance(tis_two_sided, spec="tis", max_examples=EXAMPLES, checks=run)
    second = check_conformance(tis_two_sided, spec="tis", max_examples=EXAMPLES, checks=run)
    assert first.to_dict() == second.to_dict()


# ---------------------------------------------------------------------------------------------
# expected failures, the report, and bad calls
# ---------------------------------------------------------------------------------------------


def test_declared_expected_failure_that_fails_is_xfailed_and_the_report_is_ok() -> None:
    declared = {
        "agrees_with_reference": "we keep s == eta out on purpose",
        "keeps_on_policy": "same bug",
        "staleness_mask.keeps_at_bound": "same bug",
    }
    report = check_conformance(
        mask_strict, spec="staleness_mask", expected_failures=declared, max_examples=EXAMPLES
    )
    assert report.ok
    assert report["keeps_at_bound"].status == "xfailed"
    assert report["keeps_at_bound"].reason == "same bug"
    report.raise_if_failed()


def test_declared_expected_failure_that_passes_is_reported_and_fails_the_report() -> None:
    report = check_conformance(
        refimpl.staleness_mask,
        spec="staleness_mask",
        expected_failures=["binary"],
        max_examples=EXAMPLES,
    )
    assert report["binary"].status == "xpassed"
    assert not report.ok
    assert [r.name for r in report.failures] == ["binary"]
    with pytest.raises(ConformanceError, match="remove it from expected_failures"):
        report.raise_if_failed()


def test_raise_if_failed_message_carries_the_reproduction() -> None:
    report = check_conformance(penalty_wrong_sign, spec="effort_penalty", max_examples=EXAMPLES)
    with pytest.raises(ConformanceError) as info:
        report.raise_if_failed()
    text = str(info.value)
    assert "failed   effort_penalty.non_increasing_in_effort" in text
    assert "from test_testing import penalty_wrong_sign as candidate" in text


def test_report_serialises_to_json_with_stable_ids() -> None:
    report = check_conformance(mask_strict, spec="staleness_mask", max_examples=EXAMPLES)
    data = json.loads(report.to_json())
    assert data["ok"] is False
    assert data["candidate"] == "test_testing:mask_strict"
    assert [r["id"] for r in data["results"]] == [
        f"staleness_mask.{name}" for name in check_names("staleness_mask")
    ]
    assert str(report).startswith("refimpl conformance of test_testing:mask_strict")


def test_candidate_given_as_import_string_is_checked_and_reproduced_by_that_name() -> None:
    report = check_conformance(
        "test_testing:mask_strict", spec="staleness_mask", checks=["keeps_at_bound"]
    )
    (result,) = report.results
    assert isinstance(result, CheckResult)
    assert result.status == "failed"
    assert "from test_testing import mask_strict as candidate" in result.reproduction


def test_local_function_gets_a_placeholder_import_line() -> None:
    def local(s: ArrayLike, *, eta: int) -> Any:
        return (np.asarray(s) < eta).astype(float)

    report = check_conformance(local, spec="staleness_mask", checks=["keeps_at_bound"])
    assert "candidate = ...  # your function" in report.results[0].reproduction


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"spec": "nope"}, ValueError, "spec must be one of 'effort_penalty'"),
        ({"spec": "tis", "max_examples": 0}, ValueError, "max_examples must be an int >= 1"),
        ({"spec": "tis", "checks": ["nope"]}, ValueError, "spec 'tis' has; got checks='nope'"),
        ({"spec": "tis", "expected_failures": ["nope"]}, ValueError, "Use one of: agrees_with"),
        ({"spec": "tis", "expected_failures": "binary"}, TypeError, "Wrap it in a list"),
        ({"spec": "tis", "shrink": "no"}, TypeError, "shrink must be a bool; got shrink='no'"),
    ],
)
def test_bad_calls_say_how_to_fix_them(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        check_conformance(refimpl.truncated_is_weights, **kwargs)


def test_without_shrinking_the_verdicts_are_the_same_in_fewer_calls() -> None:
    """shrink=False stops at the first failing input: each check's status is unchanged, the failing
    ones still carry a counterexample and a reproduction, and the candidate is called fewer times."""
    calls = 0

    def counted(s: ArrayLike, *, eta: int) -> Any:
        nonlocal calls
        calls += 1
        return mask_strict(s, eta=eta)

    shrunk = check_conformance(counted, spec="staleness_mask", max_examples=EXAMPLES)
    calls_shrunk, calls = calls, 0
    unshrunk = check_conformance(
        counted, spec="staleness_mask", max_examples=EXAMPLES, shrink=False
    )
    assert [r.status for r in unshrunk.results] == [r.status for r in shrunk.results]
    assert not unshrunk.ok
    for r in unshrunk.failures:
        assert r.counterexample
        assert "reproduce(candidate, " in r.reproduction
    assert calls < calls_shrunk


@pytest.mark.parametrize(
    ("candidate", "error", "match"),
    [
        ("no_colon", ValueError, "Separate the module and the function with ':'"),
        ("no_such_module_xyz:f", ValueError, "cannot be imported"),
        ("test_testing:no_such_function", ValueError, "has no attribute 'no_such_function'"),
        ("test_testing:EXAMPLES", TypeError, "must be callable"),
        (42, TypeError, "Pass your function itself"),
    ],
)
def test_bad_candidates_say_how_to_fix_them(
    candidate: Any, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        check_conformance(candidate, spec="staleness_mask")


def test_masking_diagnostics_takes_the_ess_convention_with_an_exact_value() -> None:
    """(Σw)²/Σw² of w = (1, 1, 1, 0) is 9/3 = 3 samples, 3/4 of the batch as a fraction."""
    import refimpl

    s, w = [0, 0, 1, 2], [1.0, 1.0, 1.0, 0.0]
    assert refimpl.masking_diagnostics(s, w).effective_sample_size == 3.0
    assert refimpl.masking_diagnostics(s, w, ess="fraction").effective_sample_size == 0.75
    with pytest.raises(ValueError, match="ess"):
        refimpl.masking_diagnostics(s, w, ess="percent")  # type: ignore[arg-type]
