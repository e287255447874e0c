"""refimpl's V-trace against golden values computed by rlax itself.

``tests/data/vtrace_rlax/vtrace_rlax.json`` holds the inputs and the float64 outputs of
``rlax.vtrace_td_error_and_advantage`` and ``rlax.vtrace`` for 13 cases (one step, long horizons,
episode boundaries, a zero ratio, scalar and per-step ``λ``, both clip thresholds, next-state
values that are not the shifted values), with the versions that computed them; ``generate.py``
beside it is the recipe (run in a throwaway environment: rlax and jax are not dependencies).

Tolerance: both sides are float64 and compute the same operations; the backward recursion of
``T`` steps rounds at most twice per step, and rlax re-rounds the errors through
``(errors + v_tm1) − v_tm1`` (its ``stop_gradient``), so every output must agree within
``4·T·ε·scale``, with ``scale = max(1, the largest magnitude of the case)``. The largest difference
seen is below one ulp of the scale.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

import refimpl
from refimpl.staleness import VTraceOutput

GOLDEN = json.loads(
    (Path(__file__).parent / "data" / "vtrace_rlax" / "vtrace_rlax.json").read_text()
)
CASES: list[dict[str, Any]] = GOLDEN["cases"]
FIELDS = ("errors", "pg_advantage", "q_estimate")
Array = NDArray[np.float64]


def _args(case: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    i = case["inputs"]
    arrays = [i[k] for k in ("v_tm1", "v_t", "r_t", "discount_t", "rho_tm1")]
    keywords = {k: i[k] for k in ("lambda_", "clip_rho_threshold", "clip_pg_rho_threshold")}
    return arrays, keywords


def _tolerance(case: dict[str, Any]) -> float:
    values = [np.abs(np.asarray(v, dtype=float)).max() for v in case["inputs"].values()]
    values += [np.abs(np.asarray(v)).max() for v in case["vtrace_td_error_and_advantage"].values()]
    t = len(case["inputs"]["v_tm1"])
    return 4.0 * t * float(np.finfo(np.float64).eps) * float(max(1.0, *values))


def mismatches(vtrace_fn: Any) -> list[str]:
    """The cases and fields where ``vtrace_fn`` disagrees with rlax (empty when it agrees)."""
    found = []
    for case in CASES:
        arrays, keywords = _args(case)
        out = vtrace_fn(*arrays, **keywords)
        tol = _tolerance(case)
        for field in FIELDS:
            want = np.asarray(case["vtrace_td_error_and_advantage"][field])
            if not hasattr(out, field):  # e.g. a bare array of errors
                found.append(f"{case['name']}.{field}")
                continue
            got = np.asarray(getattr(out, field))
            if got.shape != want.shape or not np.all(np.abs(got - want) <= tol):
                found.append(f"{case['name']}.{field}")
    return found


def test_the_golden_file_says_what_made_it() -> None:
    assert GOLDEN["generated_by"] == "tests/data/vtrace_rlax/generate.py"
    assert GOLDEN["jax_enable_x64"] is True
    assert set(GOLDEN["versions"]) >= {"rlax", "jax", "jaxlib", "numpy"}
    assert len(CASES) == 13


def test_vtrace_agrees_with_rlax_vtrace_td_error_and_advantage() -> None:
    assert mismatches(refimpl.vtrace) == []


def test_the_rlax_named_function_agrees_with_rlax() -> None:
    assert mismatches(refimpl.vtrace_td_error_and_advantage) == []


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_vtrace_errors_are_what_rlax_vtrace_returns(case: dict[str, Any]) -> None:
    arrays, keywords = _args(case)
    keywords.pop("clip_pg_rho_threshold")  # rlax.vtrace has no advantage, so no pg threshold
    got = refimpl.vtrace(*arrays, **keywords).errors
    np.testing.assert_allclose(got, case["vtrace"], rtol=0, atol=_tolerance(case))


# --- wrong variants: each must disagree with rlax somewhere --------------------------------------


def _transcribed(
    v_tm1: Any,
    v_t: Any,
    r_t: Any,
    discount_t: Any,
    rho_tm1: Any,
    *,
    lambda_: Any,
    clip_rho_threshold: float,
    clip_pg_rho_threshold: float,
    cut_traces_at_rho_bar: bool = False,
    bootstrap_q_from_v_t: bool = False,
) -> VTraceOutput:
    """V-trace written out again, with switches for two bugs seen in ports of it."""
    v, nv, r, g, rho = (np.asarray(a, dtype=float) for a in (v_tm1, v_t, r_t, discount_t, rho_tm1))
    lam = np.broadcast_to(np.asarray(lambda_, dtype=float), v.shape)
    c = lam * np.minimum(clip_rho_threshold if cut_traces_at_rho_bar else 1.0, rho)
    td = np.minimum(clip_rho_threshold, rho) * (r + g * nv - v)
    errors, acc = np.empty_like(td), 0.0
    for s in range(len(td) - 1, -1, -1):
        acc = td[s] + g[s] * c[s] * acc
        errors[s] = acc
    targets = errors + v
    following = nv[:-1] if bootstrap_q_from_v_t else v[1:]
    q_boot = np.append(lam[:-1] * targets[1:] + (1 - lam[:-1]) * following, nv[-1])
    q = r + g * q_boot
    return VTraceOutput(errors, np.minimum(clip_pg_rho_threshold, rho) * (q - v), q)


def test_the_transcription_agrees_when_its_switches_are_off() -> None:
    assert mismatches(_transcribed) == []


def test_the_comparison_rejects_traces_cut_at_rho_bar() -> None:
    # TorchBeast-style c̄ = ρ̄: differs from rlax (c̄ = 1) wherever ρ̄ != 1
    found = mismatches(lambda *a, **k: _transcribed(*a, **k, cut_traces_at_rho_bar=True))
    assert {"clip-rho-2-pg-0.5.errors", "clip-rho-0.3.errors"} <= set(found)


def test_the_comparison_rejects_a_q_bootstrap_from_v_t() -> None:
    # rlax mixes in v_tm1[1:], not v_t[:-1]: only visible when they differ
    found = mismatches(lambda *a, **k: _transcribed(*a, **k, bootstrap_q_from_v_t=True))
    assert found == ["independent-next-values.pg_advantage", "independent-next-values.q_estimate"]


def test_the_comparison_rejects_the_errors_only_return_of_rlax_vtrace() -> None:
    # the name trap: rlax.vtrace's return (the errors alone, a bare array) where the triple of
    # rlax.vtrace_td_error_and_advantage is expected
    def errors_only(*arrays: Any, **keywords: Any) -> Any:
        return refimpl.vtrace(*arrays, **keywords).errors

    found = mismatches(errors_only)
    assert len(found) == len(FIELDS) * len(CASES)


@pytest.mark.parametrize(
    "names",
    [("lambda-scalar", "lambda-per-step"), ("on-policy-lambda-returns", "independent-next-values")],
)
def test_a_batch_of_rows_agrees_with_rlax_row_by_row(names: tuple[str, str]) -> None:
    # rlax takes one trajectory; refimpl's (B, T) batch must give each row's golden values
    cases = [next(c for c in CASES if c["name"] == n) for n in names]
    rows = [_args(c) for c in cases]
    assert all(r[1]["clip_rho_threshold"] == rows[0][1]["clip_rho_threshold"] for r in rows)
    assert all(r[1]["clip_pg_rho_threshold"] == rows[0][1]["clip_pg_rho_threshold"] for r in rows)
    t = len(rows[0][0][0])
    stacked = [np.array([r[0][i] for r in rows]) for i in range(5)]
    lam = np.array([np.broadcast_to(np.asarray(r[1]["lambda_"], dtype=float), (t,)) for r in rows])
    out = refimpl.vtrace(
        *stacked,
        lambda_=lam,
        clip_rho_threshold=rows[0][1]["clip_rho_threshold"],
        clip_pg_rho_threshold=rows[0][1]["clip_pg_rho_threshold"],
    )
    for b, case in enumerate(cases):
        for field in FIELDS:
            want = case["vtrace_td_error_and_advantage"][field]
            np.testing.assert_allclose(getattr(out, field)[b], want, rtol=0, atol=_tolerance(case))
