"""The specs of ``refimpl check`` whose rows are lists: a sequence's tokens, a batch's weights, a
problem's responses, a trajectory.

Sequence-level importance weights (``tis_sequence`` and the like) are segment reductions: the rows
of a chunk are grouped by their number of tokens, and each group is one call of the reference on a
``(rows, tokens)`` array, whose row sums numpy computes exactly as it does for one sequence (the
same pairwise order), so the weights equal the reference's called row by row, bit for bit. The
batch, problem and trajectory specs call the conformance spec's reference per row (their rows are
few: one per batch or trajectory); the conformance machinery loads only for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from refimpl._validation import invalid
from refimpl.errors import InvalidArgument
from refimpl.testing._trace_spec import Columns
from refimpl.testing._traces import ListColumn
from refimpl.testing.tolerances import summation_factor

if TYPE_CHECKING:
    from refimpl.testing._engine import Call, Spec


def _conformance(name: str) -> Spec:
    """The conformance spec ``name`` (``ESS``, ``DIAGNOSTICS``, ``KIMI``, ``VTRACE``), loaded on
    first use: its module brings Hypothesis, which the other trace specs do not need."""
    from refimpl.testing import _specs_basic, _specs_more

    spec: Spec = getattr(_specs_basic if name == "VTRACE" else _specs_more, name)
    return spec


# --- sequence-level importance weights: one row per sequence, lists of its tokens ------------


def sequence_log_ratios(cols: Columns) -> ListColumn:
    """``logp_target − logp_behavior`` of every token, per sequence (lists of one length >= 1)."""
    a, b = cols["logp_target"], cols["logp_behavior"]
    sa, sb = a.sizes(), b.sizes()
    bad = (sa != sb) | (sa == 0)
    if np.any(bad):
        i = int(np.flatnonzero(bad)[0])
        raise InvalidArgument(
            f"logp_target and logp_behavior must be lists of one length >= 1 per sequence; "
            f"row {i} has {sa[i]} and {sb[i]}."
        )
    with np.errstate(invalid="ignore"):
        return ListColumn(np.asarray(a.values - b.values, dtype=np.float64), a.offsets)


def by_length(lists: ListColumn) -> Iterator[tuple[NDArray[np.intp], NDArray[Any]]]:
    """The rows grouped by their length: each group's row indices and its ``(rows, length)``
    values (a gather, no padding: a row's sum is then computed as for the row alone)."""
    sizes = lists.sizes()
    order = np.argsort(sizes, kind="stable")
    cuts = np.flatnonzero(np.diff(sizes[order])) + 1
    for group in np.split(order, cuts):
        if group.size:
            n = int(sizes[group[0]])
            yield group, lists.values[lists.offsets[group][:, None] + np.arange(n)]


def sequence_weights(
    r: Any, cols: Columns, p: dict[str, Any], fn: str, level: str
) -> NDArray[np.float64]:
    """The reference's weight of every sequence (``level`` sequence or geometric), one call per
    group of sequences of one length."""
    d = sequence_log_ratios(cols)
    reference = getattr(r, fn)
    out = np.empty(len(d))
    for group, values in by_length(d):
        out[group] = reference(values, np.zeros_like(values), level=level, **p)
    return out


def sequence_condition(
    mean: bool,
) -> Callable[[Columns, dict[str, Any], NDArray[np.float64]], NDArray[np.float64]]:
    """The rounding condition of a sequence weight: ``((⌈log₂ n⌉ + 1)·Σ|d| (/ n) + 4)·|w|``."""

    def condition(
        cols: Columns, params: dict[str, Any], expected: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        d = sequence_log_ratios(cols)
        err = np.empty(len(d))
        for group, values in by_length(d):
            n = values.shape[1]
            err[group] = summation_factor(n) * np.abs(values).sum(axis=1) / (n if mean else 1)
        return np.asarray((err + 4.0) * np.abs(expected), dtype=np.float64)

    return condition


# --- batches, problems and trajectories --------------------------------------------------------


def _list_rows(cols: Columns, names: tuple[str, ...]) -> list[list[NDArray[np.float64]]]:
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


def _conventions_of(spec: Spec, params: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """The conformance spec's conventions from the --param options among ``keys``."""
    return spec.resolve({k: params[k] for k in keys if k in params})


def _ess_expected(r: Any, cols: Columns, p: dict[str, Any]) -> NDArray[np.float64]:
    conv = _conventions_of(_conformance("ESS"), p, ("ess",))
    rows = _list_rows(cols, ("weight",))
    return np.array([float(_conformance("ESS").expected(((w,), {}), conv)) for (w,) in rows])


def _ess_condition(
    cols: Columns, params: dict[str, Any], expected: NDArray[np.float64]
) -> NDArray[np.float64]:
    conv = _conventions_of(_conformance("ESS"), params, ("ess",))
    rows = _list_rows(cols, ("weight",))
    return np.array(
        [
            float(_conformance("ESS").condition(((w,), {}), conv, e))
            for (w,), e in zip(rows, expected, strict=True)
        ]
    )


_DIAGNOSTIC_FIELDS = ("kept_fraction", "on_policy_dropped_fraction", "effective_sample_size")


def _statistic(params: dict[str, Any]) -> int:
    return _DIAGNOSTIC_FIELDS.index(params.get("statistic", _DIAGNOSTIC_FIELDS[0]))


def _diagnostics_expected(r: Any, cols: Columns, p: dict[str, Any]) -> NDArray[np.float64]:
    conv = _conventions_of(_conformance("DIAGNOSTICS"), p, ("ess",))
    k = _statistic(p)
    rows = _list_rows(cols, ("staleness", "weight"))
    for i, (s, _) in enumerate(rows):
        if not (np.all(s >= 0) and np.all(s == np.round(s))):
            raise InvalidArgument(
                f"staleness must hold whole numbers >= 0 (versions behind); row {i} has {s}."
            )
    return np.array(
        [float(_conformance("DIAGNOSTICS").expected(((s, w), {}), conv)[k]) for s, w in rows]
    )


def _diagnostics_condition(
    cols: Columns, params: dict[str, Any], expected: NDArray[np.float64]
) -> NDArray[np.float64]:
    conv = _conventions_of(_conformance("DIAGNOSTICS"), params, ("ess",))
    k = _statistic(params)
    rows = _list_rows(cols, ("staleness", "weight"))
    out = []
    for (s, w), e in zip(rows, expected, strict=True):
        full = np.zeros(3)
        full[k] = e
        out.append(float(_conformance("DIAGNOSTICS").condition(((s, w), {}), conv, full)[k]))
    return np.asarray(out, dtype=np.float64)


def _kimi_rows(cols: Columns) -> list[list[NDArray[np.float64]]]:
    return _list_rows(cols, ("length", "correct"))


def _kimi_expected(r: Any, cols: Columns, p: dict[str, Any]) -> NDArray[Any]:
    conv = _conventions_of(_conformance("KIMI"), p, ("scope",))
    out: NDArray[Any] = np.empty(len(cols["length"]), dtype=object)
    for i, (ell, correct) in enumerate(_kimi_rows(cols)):
        out[i] = np.asarray(
            _conformance("KIMI").expected(((ell, correct != 0), {}), conv), dtype=np.float64
        )
    return out


def _kimi_condition(cols: Columns, params: dict[str, Any], expected: NDArray[Any]) -> NDArray[Any]:
    conv = _conventions_of(_conformance("KIMI"), params, ("scope",))
    out: NDArray[Any] = np.empty(len(expected), dtype=object)
    for i, ((ell, correct), e) in enumerate(zip(_kimi_rows(cols), expected, strict=True)):
        out[i] = np.asarray(
            _conformance("KIMI").condition(((ell, correct != 0), {}), conv, e), dtype=np.float64
        )
    return out


_VTRACE_INPUTS = ("v_tm1", "v_t", "r_t", "discount_t", "rho_tm1")
_VTRACE_OUTPUTS = ("errors", "pg_advantage", "q_estimate")
_VTRACE_OPTIONS = ("lambda_", "clip_rho_threshold", "clip_pg_rho_threshold")


def _vtrace_calls(cols: Columns, p: dict[str, Any]) -> list[Call]:
    kw = {k: p[k] for k in _VTRACE_OPTIONS if k in p}
    return [(tuple(row), kw) for row in _list_rows(cols, _VTRACE_INPUTS)]


def _vtrace_expected(r: Any, cols: Columns, p: dict[str, Any]) -> NDArray[Any]:
    k = _VTRACE_OUTPUTS.index(p.get("output", "errors"))
    calls = _vtrace_calls(cols, p)
    out: NDArray[Any] = np.empty(len(calls), dtype=object)
    for i, call in enumerate(calls):
        out[i] = np.asarray(_conformance("VTRACE").expected(call, {})[k], dtype=np.float64)
    return out


def _vtrace_condition(
    cols: Columns, params: dict[str, Any], expected: NDArray[Any]
) -> NDArray[Any]:
    k = _VTRACE_OUTPUTS.index(params.get("output", "errors"))
    calls = _vtrace_calls(cols, params)
    out: NDArray[Any] = np.empty(len(calls), dtype=object)
    for i, call in enumerate(calls):
        out[i] = np.asarray(_conformance("VTRACE").condition(call, {}, None)[k], dtype=np.float64)
    return out


def _probe_choice(p: dict[str, Any], key: str, choices: tuple[str, ...]) -> None:
    if key in p and p[key] not in choices:
        raise invalid(
            f"--param {key}",
            f"be one of {', '.join(choices)}",
            p[key],
            f"It names the logged column to check, e.g. --param {key}={choices[1]}.",
        )


def _probe_vtrace(r: Any, p: dict[str, Any]) -> object:
    _probe_choice(p, "output", _VTRACE_OUTPUTS)
    kw = {k: p[k] for k in _VTRACE_OPTIONS if k in p}
    return r.vtrace([0.0], [0.0], [0.0], [1.0], [1.0], **kw)


def _probe_diagnostics(r: Any, p: dict[str, Any]) -> object:
    _probe_choice(p, "statistic", _DIAGNOSTIC_FIELDS)
    return _conventions_of(_conformance("DIAGNOSTICS"), p, ("ess",))


def _probe_ess(r: Any, p: dict[str, Any]) -> object:
    return _conventions_of(_conformance("ESS"), p, ("ess",))


def _probe_kimi(r: Any, p: dict[str, Any]) -> object:
    return _conventions_of(_conformance("KIMI"), p, ("scope",))
