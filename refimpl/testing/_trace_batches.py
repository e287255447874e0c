"""The specs of ``refimpl check`` whose rows are batches, problems or trajectories: the effective
sample size and the masking diagnostics of a batch, the Kimi length reward of a problem's
responses, the V-trace outputs of a trajectory.

Each row is one call of the reference (:func:`refimpl.effective_sample_size`,
:func:`refimpl.masking_diagnostics`, :func:`refimpl.kimi_length_reward`, :func:`refimpl.vtrace`):
such rows are few (one per batch or trajectory, not per token). The conventions (``--param ess``,
``scope``) and the rounding condition of each value (``--dtype``) are those of the conformance
spec of the same name, computed here with numpy alone, so a trace check imports neither
Hypothesis nor the conformance machinery (the tests hold the two equal).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from refimpl._validation import invalid
from refimpl.errors import InvalidArgument
from refimpl.testing._trace_spec import Columns
from refimpl.testing.tolerances import summation_factor

Array = NDArray[np.float64]

#: ``--param ess``: ``(Σw)²/Σw²`` as a count in ``[1, n]``, or divided by ``n`` (a fraction)
ESS_SCALES = ("count", "fraction")
#: ``--param scope`` of the Kimi reward: min and max lengths per problem (a row), or over the
#: row as a batch (the two agree on one problem per row)
KIMI_SCOPES = ("problem", "batch")
DIAGNOSTIC_FIELDS = ("kept_fraction", "on_policy_dropped_fraction", "effective_sample_size")
VTRACE_INPUTS = ("v_tm1", "v_t", "r_t", "discount_t", "rho_tm1")
VTRACE_OUTPUTS = ("errors", "pg_advantage", "q_estimate")
VTRACE_OPTIONS = ("lambda_", "clip_rho_threshold", "clip_pg_rho_threshold")


def choice(params: dict[str, Any], key: str, choices: tuple[str, ...], meaning: str) -> str:
    """``params[key]`` (default: the first choice), refused unless one of ``choices``."""
    value = params.get(key, choices[0])
    if value not in choices:
        raise invalid(
            f"--param {key}",
            f"be one of {', '.join(choices)} ({meaning})",
            value,
            f"Pass e.g. --param {key}={choices[1]}, or leave it out for {choices[0]}.",
        )
    return str(value)


def _ess_scale(params: dict[str, Any]) -> str:
    return choice(params, "ess", ESS_SCALES, "(Σw)²/Σw² as a count, or divided by n")


def list_rows(cols: Columns, names: tuple[str, ...]) -> list[list[Array]]:
    """Per row, the list columns ``names`` as float64 arrays of one length >= 1."""
    out = []
    for i, row in enumerate(zip(*(cols[n] for n in names), strict=True)):
        arrays = [np.asarray(a, dtype=np.float64) for a in row]
        sizes = {a.size for a in arrays}
        if len(sizes) != 1 or 0 in sizes:
            shown = ", ".join(f"{n} {a.size}" for n, a in zip(names, arrays, strict=True))
            raise InvalidArgument(
                f"{', '.join(names)} must be lists of one length >= 1 per row; row {i} has "
                f"{shown} values."
            )
        out.append(arrays)
    return out


def _sum_condition(n: int, value: float) -> float:
    """Two sums of ``n`` terms and a quotient: ``(2(⌈log₂ n⌉ + 1) + 4)·|value|``."""
    return float((2 * summation_factor(n) + 4) * abs(value))


# --- effective_sample_size: one row per batch, the list of its weights ------------------------


def ess_expected(r: Any, cols: Columns, p: dict[str, Any]) -> Array:
    scale = _ess_scale(p)
    rows = list_rows(cols, ("weight",))
    return np.array([float(r.effective_sample_size(w, ess=scale)) for (w,) in rows])


def ess_condition(cols: Columns, params: dict[str, Any], expected: Array) -> Array:
    rows = list_rows(cols, ("weight",))
    return np.array(
        [_sum_condition(w.size, e) for (w,), e in zip(rows, expected, strict=True)],
        dtype=np.float64,
    )


def probe_ess(r: Any, p: dict[str, Any]) -> object:
    return _ess_scale(p)


# --- masking_diagnostics: one row per batch, its staleness and weights ------------------------


def _statistic(params: dict[str, Any]) -> int:
    return DIAGNOSTIC_FIELDS.index(
        choice(params, "statistic", DIAGNOSTIC_FIELDS, "the logged diagnostic to check")
    )


def diagnostics_expected(r: Any, cols: Columns, p: dict[str, Any]) -> Array:
    scale, k = _ess_scale(p), _statistic(p)
    rows = list_rows(cols, ("staleness", "weight"))
    for i, (s, _) in enumerate(rows):
        if not (np.all(s >= 0) and np.all(s == np.round(s))):
            raise InvalidArgument(
                f"staleness must hold whole numbers >= 0 (versions behind); row {i} has {s}."
            )
    out = []
    for s, w in rows:
        d = r.masking_diagnostics(s, w, ess=scale)
        out.append(
            float((d.kept_fraction, d.on_policy_dropped_fraction, d.effective_sample_size)[k])
        )
    return np.asarray(out, dtype=np.float64)


def diagnostics_condition(cols: Columns, params: dict[str, Any], expected: Array) -> Array:
    """The fractions: 2 (a count over a count); the ESS: that of :func:`ess_condition`."""
    if _statistic(params) < 2:
        return np.full(len(expected), 2.0)
    rows = list_rows(cols, ("staleness", "weight"))
    return np.array(
        [_sum_condition(s.size, e) for (s, _), e in zip(rows, expected, strict=True)],
        dtype=np.float64,
    )


def probe_diagnostics(r: Any, p: dict[str, Any]) -> object:
    return _statistic(p), _ess_scale(p)


# --- kimi_length_reward: one row per problem, its responses' lengths and correctness ----------


def _kimi_scope(params: dict[str, Any]) -> str:
    return choice(params, "scope", KIMI_SCOPES, "min and max lengths per problem or per batch")


def kimi_expected(r: Any, cols: Columns, p: dict[str, Any]) -> NDArray[Any]:
    scope = _kimi_scope(p)
    rows = list_rows(cols, ("length", "correct"))
    out: NDArray[Any] = np.empty(len(rows), dtype=object)
    for i, (ell, correct) in enumerate(rows):
        reward = r.kimi_length_reward(ell, correct != 0, scope=scope)
        out[i] = np.asarray(reward, dtype=np.float64)
    return out


def kimi_condition(cols: Columns, params: dict[str, Any], expected: NDArray[Any]) -> NDArray[Any]:
    """``2(max ℓ + 1)/max(max ℓ − min ℓ, 1) + 1`` for every response of the problem."""
    out: NDArray[Any] = np.empty(len(expected), dtype=object)
    for i, (ell, _) in enumerate(list_rows(cols, ("length", "correct"))):
        spread = max(float(ell.max() - ell.min()), 1.0)
        out[i] = np.full(ell.shape, 2.0 * (ell.max() + 1) / spread + 1)
    return out


def probe_kimi(r: Any, p: dict[str, Any]) -> object:
    return _kimi_scope(p)


# --- vtrace: one row per trajectory, lists over time ------------------------------------------


def _vtrace_output(params: dict[str, Any]) -> int:
    return VTRACE_OUTPUTS.index(
        choice(params, "output", VTRACE_OUTPUTS, "the logged output to check")
    )


def _vtrace_options(params: dict[str, Any]) -> dict[str, Any]:
    return {k: params[k] for k in VTRACE_OPTIONS if k in params}


def vtrace_expected(r: Any, cols: Columns, p: dict[str, Any]) -> NDArray[Any]:
    k, kw = _vtrace_output(p), _vtrace_options(p)
    rows = list_rows(cols, VTRACE_INPUTS)
    out: NDArray[Any] = np.empty(len(rows), dtype=object)
    for i, row in enumerate(rows):
        out[i] = np.asarray(r.vtrace(*row, **kw)[k], dtype=np.float64)
    return out


def vtrace_magnitude(row: list[Array], kw: dict[str, Any]) -> Array:
    """The V-trace recursion run on absolute values: a running error bound of every output (each
    term's rounding is relative to its magnitude), times the number of steps."""
    v_tm1, v_t, r_t, discount_t, rho = (np.abs(a) for a in row)
    lam = kw.get("lambda_", 1.0)
    rho_bar = np.minimum(kw.get("clip_rho_threshold", 1.0), rho)
    c = lam * np.minimum(1.0, rho)
    delta = rho_bar * (r_t + discount_t * v_t + v_tm1)
    acc = np.zeros_like(delta)
    run = 0.0
    for t in reversed(range(delta.size)):
        run = delta[t] + discount_t[t] * c[t] * run
        acc[t] = run
    return np.asarray((delta.size + 2.0) * (acc + v_tm1 + r_t + v_t), dtype=np.float64)


def vtrace_condition(cols: Columns, params: dict[str, Any], expected: NDArray[Any]) -> NDArray[Any]:
    """Per output: the magnitude bound; for ``pg_advantage`` times ``(max(ρ̄_pg, 1)·|ρ| + 1)``
    and with ``|v_tm1|`` added (the advantage is a clipped ratio times ``q − v``)."""
    k, kw = _vtrace_output(params), _vtrace_options(params)
    rows = list_rows(cols, VTRACE_INPUTS)
    out: NDArray[Any] = np.empty(len(rows), dtype=object)
    for i, row in enumerate(rows):
        m = vtrace_magnitude(row, kw)
        if k == 1:
            pg = max(kw.get("clip_pg_rho_threshold", 1.0), 1.0) * np.abs(row[4])
            m = (pg + 1.0) * (m + np.abs(row[0]))
        out[i] = m
    return out


def probe_vtrace(r: Any, p: dict[str, Any]) -> object:
    _vtrace_output(p)
    return r.vtrace([0.0], [0.0], [0.0], [1.0], [1.0], **_vtrace_options(p))
