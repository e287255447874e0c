"""``refimpl check TRACE --spec NAME``: compare a logged trace with the reference, row by row.

A trainer logs, per sample or per token, the inputs of a quantity and the value it used; this command
recomputes the value with refimpl and reports every row that disagrees beyond the documented
tolerance (:data:`refimpl.testing.tolerances.TRACE`, or ``--rtol``/``--atol``).

=========================  ==========================================  ========================
spec                       columns (inputs → logged value)             parameters
=========================  ==========================================  ========================
``staleness_mask``         ``staleness`` → ``weight``                  ``eta`` (int)
``tis``                    ``logp_target``, ``logp_behavior`` →        ``cap``
                           ``weight`` (token level)
``masked_is``              ``logp_target``, ``logp_behavior`` →        ``low``, ``high``
                           ``weight`` (token level)
``effort_penalty``         ``b`` → ``penalty``                         ``k0``, ``b_min``, ``tau``
``inclusion_probability``  ``cdf`` → ``pi``                            ``n``, ``k`` (int)
``staleness``              ``trained_step`` and ``min_version`` (or    none
                           ``versions``, a list per row) →
                           ``staleness``
``effective_sample_size``  ``weight`` (a list per batch) → ``ess``     ``ess`` (option)
``masking_diagnostics``    ``staleness``, ``weight`` (lists per        ``statistic``, ``ess``
                           batch) → ``kept_fraction`` (or the          (options)
                           ``statistic`` named)
``kimi_length_reward``     ``length``, ``correct`` (lists per          ``scope`` (option)
                           problem) → ``reward`` (a list)
``vtrace``                 ``v_tm1``, ``v_t``, ``r_t``,                ``output``, ``lambda_``,
                           ``discount_t``, ``rho_tm1`` (lists per      thresholds (options)
                           trajectory) → ``errors`` (or the
                           ``output`` named; a list)
``policy_loss``            ``step``, ``advantage``, ``logp`` and       ``surrogate``,
                           ``logp_old`` (lists per sequence;           ``aggregation``;
                           optional ``mask``, ``micro_batch``,         surrogate, KL and
                           ``logp_ref``) → ``loss`` of the step        denominator (options)
=========================  ==========================================  ========================

The table lists the first specs; ``refimpl check --help`` lists all of them (every spec of
:func:`refimpl.testing.spec_names`). A logged value that is a list agrees when every element does.

Exit codes: **0** every row agrees within tolerance; **1** at least one row disagrees (a logged NaN or
infinity where the reference is finite counts as a mismatch); **2** the input is unusable: unknown
spec or parameter, missing or invalid parameter, unknown format, a ``--report`` path that cannot
be written (checked before the trace is read), missing column, a row that cannot be
parsed or whose inputs the reference rejects (NaN log-probability, negative staleness, a version
newer than its trainer step), with its line number (CSV, JSONL) or row number (Parquet), and an
**empty trace** (no rows: a gate that checked nothing must not pass).

The trace may be ``-``, standard input (also a pipe or a device such as ``/dev/null``): it is copied
to a temporary file first, and its format is ``--format``, else sniffed from its first bytes
(Parquet's magic ``PAR1``, a JSON object ``{``, else CSV). A file that is not text where text is
expected (NUL bytes, bytes that are not UTF-8: a binary file given as CSV) is refused as "not a CSV
text file" without echoing its bytes; a directory is refused as such.

The ``staleness`` spec reads steps and versions as integers and computes ``s = j − min_t v_t`` in
exact integer arithmetic (int64, or Python integers beyond it in JSONL and CSV): no float64 round
trip, which would merge versions beyond 2**53. It follows the definition and the domain of
:func:`refimpl.sample_staleness`.

Large traces are streamed in chunks (CSV blocks cut at row boundaries, each parsed by
``pyarrow.csv.read_csv``; ``ParquetFile.iter_batches``; blocks of JSONL lines), so memory stays bounded whatever the number of rows; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from refimpl._validation import invalid
from refimpl.errors import InvalidArgument, RefimplError
from refimpl.testing import _trace_losses as losses
from refimpl.testing._engine import Call, Spec
from refimpl.testing._specs_basic import VTRACE
from refimpl.testing._specs_more import DIAGNOSTICS, ESS, KIMI
from refimpl.testing._traces import (
    _SUFFIXES as _SUFFIX_FORMAT,
)
from refimpl.testing._traces import (
    FORMATS,
    Chunk,
    TraceError,
    detect_format,
    read_chunks,
    sniff_format,
)
from refimpl.testing.tolerances import TRACE, Tolerance, agree

__all__ = ["EXIT_MISMATCH", "EXIT_OK", "EXIT_UNUSABLE", "configure", "run"]

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_UNUSABLE = 2

Columns = dict[str, Any]


@dataclass(frozen=True)
class _TraceSpec:
    name: str
    reference: str
    inputs: tuple[str, ...]
    found: str
    params: dict[str, type]
    expected: Callable[[Any, Columns, dict[str, Any]], NDArray[np.float64]]
    probe: Callable[[Any, dict[str, Any]], object]
    lists: tuple[str, ...] = ()
    either: Callable[[Columns, dict[str, Any], NDArray[np.float64]], NDArray[np.bool_]] | None = (
        None
    )
    notes: str = ""
    exact: bool = False  # integers read and compared exactly (no float64 round trip)
    #: optional parameters (framework conventions), passed to the reference when given
    options: dict[str, type] = field(default_factory=dict)
    #: per row, the magnitude the rounding error of a correct computation scales with
    #: (``--dtype``: |found − expected| <= SAFETY·u·condition + smallest normal)
    condition: (
        Callable[[Columns, dict[str, Any], NDArray[np.float64]], NDArray[np.float64]] | None
    ) = None
    #: the logged value is a list per row (a trajectory, a problem's responses), compared
    #: element by element; a row agrees when all its elements do
    found_list: bool = False
    #: the option whose value names the logged column (an output of several, e.g. vtrace's
    #: ``output=pg_advantage``); ``found`` is its default
    found_from: str | None = None
    found_choices: tuple[str, ...] = ()
    #: columns read when the trace has them (``--column`` may map them too)
    optional: tuple[str, ...] = ()
    #: ``(trace, format, --column mapping, params) -> (numeric, list columns)`` to read, when
    #: they depend on the trace (optional columns, a column that is a number or a list)
    layout: (
        Callable[[Path, str, dict[str, str], dict[str, Any]], tuple[list[str], list[str]]] | None
    ) = None
    #: ``(chunks, refimpl, params) -> chunks``: the rows regrouped into the units checked (one
    #: per training step), whose rows are then compared like any spec's
    regroup: Callable[[Iterator[Chunk], Any, dict[str, Any]], Iterator[Chunk]] | None = None
    #: what one checked row is, in the summary
    unit: str = "rows"


#: the unit roundoff that the band-edge zone is computed with (``--dtype``; float64 by default)
_EDGE_DTYPE = {"dtype": "float64"}


def _mis_edge(
    cols: Columns, params: dict[str, Any], found: NDArray[np.float64]
) -> NDArray[np.bool_]:
    """Rows whose ratio sits at a band edge to the rounding of the trace's dtype (``--dtype``;
    1e-9 relative in float64): kept or dropped both agree."""
    from refimpl.testing.tolerances import SAFETY, unit_roundoff

    d = cols["logp_target"] - cols["logp_behavior"]
    if params.get("band_on") == "reciprocal":
        d = -d
    u = unit_roundoff(_EDGE_DTYPE["dtype"])
    zone = max(1e-9, SAFETY * u) * (np.abs(d) + 2.0)
    edge = np.zeros(d.shape, dtype=bool)
    for e in (params["low"], params["high"]):
        if e > 0:
            edge |= np.abs(d - np.log(e)) <= zone
    with np.errstate(over="ignore"):
        ratio = np.exp(np.minimum(d, 700.0))
    near = np.abs(found - ratio) <= zone * np.abs(ratio) + 1e-300
    return np.asarray(edge & ((found == 0) | near | (found == 1.0)), dtype=np.bool_)


def _ratio_condition(
    cols: Columns, params: dict[str, Any], expected: NDArray[np.float64]
) -> NDArray[np.float64]:
    """A token weight ``exp(log π − log μ)``: ``(|d| + 3)·|w|`` (see the tolerances page)."""
    with np.errstate(invalid="ignore"):
        d = np.abs(
            cols["logp_target" if "logp_target" in cols else "logp_prox"] - cols["logp_behavior"]
        )
    return np.asarray((np.where(np.isfinite(d), d, 0.0) + 3.0) * np.abs(expected), dtype=np.float64)


def _sequence_log_ratios(cols: Columns) -> list[NDArray[np.float64]]:
    out = []
    for i, (a, b) in enumerate(zip(cols["logp_target"], cols["logp_behavior"], strict=True)):
        if len(a) != len(b) or len(a) == 0:
            raise InvalidArgument(
                f"logp_target and logp_behavior must be lists of one length >= 1 per sequence; "
                f"row {i} has {len(a)} and {len(b)}."
            )
        out.append(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))
    return out


def _sequence_condition(
    mean: bool,
) -> Callable[[Columns, dict[str, Any], NDArray[np.float64]], NDArray[np.float64]]:
    from refimpl.testing.tolerances import summation_factor

    def condition(
        cols: Columns, params: dict[str, Any], expected: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        rows = _sequence_log_ratios(cols)
        err = np.array(
            [summation_factor(d.size) * np.abs(d).sum() / (d.size if mean else 1) for d in rows]
        )
        return np.asarray((err + 4.0) * np.abs(expected), dtype=np.float64)

    return condition


def _sequence_weights(
    r: Any, cols: Columns, p: dict[str, Any], fn: str, level: str
) -> NDArray[np.float64]:
    rows = _sequence_log_ratios(cols)
    kw = dict(p)
    out = np.empty(len(rows))
    for i, d in enumerate(rows):
        out[i] = getattr(r, fn)(d, np.zeros_like(d), level=level, **kw)
    return out


def _elementwise(
    *names: str,
) -> Callable[[Columns, dict[str, Any], NDArray[np.float64]], NDArray[np.float64]]:
    """The condition ``Σ |column| + |expected| + 2`` (sums and products of a few terms)."""

    def condition(
        cols: Columns, params: dict[str, Any], expected: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        total = np.abs(expected) + 2.0
        for n in names:
            total = total + np.abs(np.asarray(cols[n], dtype=np.float64))
        return np.asarray(total, dtype=np.float64)

    return condition


def _scaled_lengths(
    cols: Columns, params: dict[str, Any], expected: NDArray[np.float64]
) -> NDArray[np.float64]:
    ell = np.abs(np.asarray(cols["length"], dtype=np.float64))
    scale = float(params.get("cache_length", params.get("max_length", 1.0)))
    top = float(params.get("max_length", 0.0))
    return np.asarray(((ell + top) / scale + 4.0) * (np.abs(expected) + 1.0), dtype=np.float64)


def _effort_condition(
    cols: Columns, params: dict[str, Any], expected: NDArray[np.float64]
) -> NDArray[np.float64]:
    b = np.abs(np.asarray(cols["b"], dtype=np.float64))
    x = np.abs(b - params["b_min"]) / params["tau"]
    return np.asarray(((b + abs(params["b_min"])) / params["tau"] + 2 * x + 3) * np.abs(expected))


def _l1_condition(
    cols: Columns, params: dict[str, Any], expected: NDArray[np.float64]
) -> NDArray[np.float64]:
    ell = np.abs(np.asarray(cols["length"], dtype=np.float64))
    t = np.abs(np.asarray(cols["target_length"], dtype=np.float64))
    return np.asarray(3 * params.get("alpha", 3e-4) * (ell + t) + np.abs(expected) + 3.0)


def _correct(cols: Columns) -> NDArray[np.bool_]:
    c = np.asarray(cols["correct"], dtype=np.float64)
    return np.asarray(c != 0, dtype=np.bool_)


def _staleness_expected(r: Any, cols: Columns, p: dict[str, Any]) -> NDArray[Any]:
    """``s = trained_step - oldest version`` in exact integer arithmetic, whatever the size.

    The definition and the domain of :func:`refimpl.sample_staleness` (whole numbers, versions
    ``>= 0`` and ``<= trained_step``, a sample has a version), computed on int64 or Python ints
    instead of float64, which rounds integers beyond 2**53 (a staleness of 2 between versions
    near 2**60 would come out 0). Raises ``ValueError`` as the reference does.
    """
    steps = cols["trained_step"]
    if "versions" in cols:
        oldest: NDArray[Any] = np.empty(len(steps), dtype=object)
        for i, row in enumerate(cols["versions"]):
            if len(row) == 0:
                raise InvalidArgument(
                    "token_versions must hold at least one token version (every sample has a "
                    f"generated token); sample {i} is empty."
                )
            for v in row.tolist():
                _whole(v, "token_versions", "versions count optimizer steps")
            oldest[i] = min(row.tolist())
    else:
        oldest = cols["min_version"]
    if steps.dtype != np.int64 or oldest.dtype != np.int64:
        steps, oldest = steps.astype(object), oldest.astype(object)
        for j, v in zip(steps, oldest, strict=True):
            _whole(j, "trained_step", "trainer steps are counted")
            _whole(v, "token_versions", "versions count optimizer steps")
    if np.any(steps < 0):
        j = steps[np.flatnonzero(steps < 0)[0]]
        raise InvalidArgument(f"trained_step must be >= 0 (trainer steps start at 0); got {j}.")
    if np.any(oldest < 0):
        v = oldest[np.flatnonzero(oldest < 0)[0]]
        raise InvalidArgument(
            f"token_versions must be >= 0 (the initial weights are version 0); got version {v}."
        )
    newer = oldest > steps
    if np.any(newer):
        k = int(np.flatnonzero(newer)[0])
        raise InvalidArgument(
            "token_versions must be <= trained_step (the trainer at step j holds version j; no "
            f"token can come from a newer version); got version {oldest[k]} > trained_step "
            f"{steps[k]}: check for an off-by-one (the version published *after* step j is j + 1)."
        )
    out: NDArray[Any] = steps - oldest
    return out


def _whole(value: Any, name: str, meaning: str) -> None:
    if not isinstance(value, (int, np.integer)):
        raise InvalidArgument(f"{name} must hold whole numbers ({meaning}); got {value!r}.")


# --- specs whose rows are lists: a batch (ESS, diagnostics), a problem (Kimi), a trajectory ----


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
    conv = _conventions_of(ESS, p, ("ess",))
    rows = _list_rows(cols, ("weight",))
    return np.array([float(ESS.expected(((w,), {}), conv)) for (w,) in rows])


def _ess_condition(
    cols: Columns, params: dict[str, Any], expected: NDArray[np.float64]
) -> NDArray[np.float64]:
    conv = _conventions_of(ESS, params, ("ess",))
    rows = _list_rows(cols, ("weight",))
    return np.array(
        [float(ESS.condition(((w,), {}), conv, e)) for (w,), e in zip(rows, expected, strict=True)]
    )


_DIAGNOSTIC_FIELDS = ("kept_fraction", "on_policy_dropped_fraction", "effective_sample_size")


def _statistic(params: dict[str, Any]) -> int:
    return _DIAGNOSTIC_FIELDS.index(params.get("statistic", _DIAGNOSTIC_FIELDS[0]))


def _diagnostics_expected(r: Any, cols: Columns, p: dict[str, Any]) -> NDArray[np.float64]:
    conv = _conventions_of(DIAGNOSTICS, p, ("ess",))
    k = _statistic(p)
    rows = _list_rows(cols, ("staleness", "weight"))
    for i, (s, _) in enumerate(rows):
        if not (np.all(s >= 0) and np.all(s == np.round(s))):
            raise InvalidArgument(
                f"staleness must hold whole numbers >= 0 (versions behind); row {i} has {s}."
            )
    return np.array([float(DIAGNOSTICS.expected(((s, w), {}), conv)[k]) for s, w in rows])


def _diagnostics_condition(
    cols: Columns, params: dict[str, Any], expected: NDArray[np.float64]
) -> NDArray[np.float64]:
    conv = _conventions_of(DIAGNOSTICS, params, ("ess",))
    k = _statistic(params)
    rows = _list_rows(cols, ("staleness", "weight"))
    out = []
    for (s, w), e in zip(rows, expected, strict=True):
        full = np.zeros(3)
        full[k] = e
        out.append(float(DIAGNOSTICS.condition(((s, w), {}), conv, full)[k]))
    return np.asarray(out, dtype=np.float64)


def _kimi_rows(cols: Columns) -> list[list[NDArray[np.float64]]]:
    return _list_rows(cols, ("length", "correct"))


def _kimi_expected(r: Any, cols: Columns, p: dict[str, Any]) -> NDArray[Any]:
    conv = _conventions_of(KIMI, p, ("scope",))
    out: NDArray[Any] = np.empty(len(cols["length"]), dtype=object)
    for i, (ell, correct) in enumerate(_kimi_rows(cols)):
        out[i] = np.asarray(KIMI.expected(((ell, correct != 0), {}), conv), dtype=np.float64)
    return out


def _kimi_condition(cols: Columns, params: dict[str, Any], expected: NDArray[Any]) -> NDArray[Any]:
    conv = _conventions_of(KIMI, params, ("scope",))
    out: NDArray[Any] = np.empty(len(expected), dtype=object)
    for i, ((ell, correct), e) in enumerate(zip(_kimi_rows(cols), expected, strict=True)):
        out[i] = np.asarray(KIMI.condition(((ell, correct != 0), {}), conv, e), dtype=np.float64)
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
        out[i] = np.asarray(VTRACE.expected(call, {})[k], dtype=np.float64)
    return out


def _vtrace_condition(
    cols: Columns, params: dict[str, Any], expected: NDArray[Any]
) -> NDArray[Any]:
    k = _VTRACE_OUTPUTS.index(params.get("output", "errors"))
    calls = _vtrace_calls(cols, params)
    out: NDArray[Any] = np.empty(len(calls), dtype=object)
    for i, call in enumerate(calls):
        out[i] = np.asarray(VTRACE.condition(call, {}, None)[k], dtype=np.float64)
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
    return _conventions_of(DIAGNOSTICS, p, ("ess",))


SPECS: dict[str, _TraceSpec] = {
    s.name: s
    for s in (
        _TraceSpec(
            name="staleness_mask",
            reference="staleness_mask",
            inputs=("staleness",),
            found="weight",
            params={"eta": int},
            expected=lambda r, c, p: r.staleness_mask(c["staleness"], **p),
            probe=lambda r, p: r.staleness_mask([0], **p),
            options={"staleness_count": str},
        ),
        _TraceSpec(
            name="tis",
            reference="truncated_is_weights",
            inputs=("logp_target", "logp_behavior"),
            found="weight",
            params={"cap": float},
            expected=lambda r, c, p: r.truncated_is_weights(
                c["logp_target"], c["logp_behavior"], **p
            ),
            probe=lambda r, p: r.truncated_is_weights([0.0], [0.0], **p),
            options={"lower": float, "log_ratio_clamp": float},
            condition=_ratio_condition,
            notes="token level: one row per token",
        ),
        _TraceSpec(
            name="masked_is",
            reference="masked_is_weights",
            inputs=("logp_target", "logp_behavior"),
            found="weight",
            params={"low": float, "high": float},
            expected=lambda r, c, p: r.masked_is_weights(c["logp_target"], c["logp_behavior"], **p),
            probe=lambda r, p: r.masked_is_weights([0.0], [0.0], **p),
            options={"band_on": str, "weight": str, "log_ratio_clamp": float},
            condition=_ratio_condition,
            either=_mis_edge,
            notes="token level; a ratio at a band edge (to 1e-9) may be kept or dropped",
        ),
        _TraceSpec(
            name="effort_penalty",
            reference="effort_penalty",
            inputs=("b",),
            found="penalty",
            params={"k0": float, "b_min": float, "tau": float},
            expected=lambda r, c, p: r.effort_penalty(c["b"], **p),
            probe=lambda r, p: r.effort_penalty([p["b_min"]], **p),
            condition=_effort_condition,
        ),
        _TraceSpec(
            name="inclusion_probability",
            reference="inclusion_probability",
            inputs=("cdf",),
            found="pi",
            params={"n": int, "k": int},
            expected=lambda r, c, p: r.inclusion_probability(c["cdf"], **p),
            probe=lambda r, p: r.inclusion_probability([0.5], **p),
            condition=lambda c, p, e: p["n"] * (np.abs(e) + 1e-3),
        ),
        _TraceSpec(
            name="staleness",
            reference="sample_staleness",
            inputs=("trained_step", "min_version"),
            found="staleness",
            params={},
            expected=_staleness_expected,
            probe=lambda r, p: None,
            notes="s = trained_step − oldest token version; versions may be a list per row",
            exact=True,
        ),
        _TraceSpec(
            name="decoupled_ppo",
            reference="decoupled_ppo_weights",
            inputs=("logp_prox", "logp_behavior"),
            found="weight",
            params={"cap": float},
            expected=lambda r, c, p: r.decoupled_ppo_weights(
                c["logp_prox"], c["logp_behavior"], **p
            ),
            probe=lambda r, p: r.decoupled_ppo_weights([0.0], [0.0], **p),
            options={"above_cap": str, "lower": float, "log_ratio_clamp": float},
            condition=_ratio_condition,
            notes="token level: one row per token (AReaL's behaviour weight)",
        ),
        _TraceSpec(
            name="tis_sequence",
            reference="truncated_is_weights",
            inputs=(),
            lists=("logp_target", "logp_behavior"),
            found="weight",
            params={"cap": float},
            expected=lambda r, c, p: _sequence_weights(r, c, p, "truncated_is_weights", "sequence"),
            probe=lambda r, p: r.truncated_is_weights([0.0], [0.0], **p),
            options={"lower": float, "log_ratio_clamp": float},
            condition=_sequence_condition(mean=False),
            notes="one row per sequence: lists of its valid tokens' log-probabilities",
        ),
        _TraceSpec(
            name="tis_geometric",
            reference="truncated_is_weights",
            inputs=(),
            lists=("logp_target", "logp_behavior"),
            found="weight",
            params={"cap": float},
            expected=lambda r, c, p: _sequence_weights(
                r, c, p, "truncated_is_weights", "geometric"
            ),
            probe=lambda r, p: r.truncated_is_weights([0.0], [0.0], **p),
            options={"lower": float, "log_ratio_clamp": float},
            condition=_sequence_condition(mean=True),
            notes="one row per sequence: lists of its valid tokens' log-probabilities",
        ),
        _TraceSpec(
            name="masked_is_sequence",
            reference="masked_is_weights",
            inputs=(),
            lists=("logp_target", "logp_behavior"),
            found="weight",
            params={"low": float, "high": float},
            expected=lambda r, c, p: _sequence_weights(r, c, p, "masked_is_weights", "sequence"),
            probe=lambda r, p: r.masked_is_weights([0.0], [0.0], **p),
            options={"band_on": str, "weight": str, "log_ratio_clamp": float},
            condition=_sequence_condition(mean=False),
            notes="one row per sequence; a ratio at a band edge (to rounding) may be kept or dropped",
        ),
        _TraceSpec(
            name="masked_is_geometric",
            reference="masked_is_weights",
            inputs=(),
            lists=("logp_target", "logp_behavior"),
            found="weight",
            params={"low": float, "high": float},
            expected=lambda r, c, p: _sequence_weights(r, c, p, "masked_is_weights", "geometric"),
            probe=lambda r, p: r.masked_is_weights([0.0], [0.0], **p),
            options={"band_on": str, "weight": str, "log_ratio_clamp": float},
            condition=_sequence_condition(mean=True),
            notes="one row per sequence; a ratio at a band edge (to rounding) may be kept or dropped",
        ),
        _TraceSpec(
            name="staleness_decay",
            reference="staleness_decay",
            inputs=("staleness",),
            found="weight",
            params={"gamma": float},
            expected=lambda r, c, p: r.staleness_decay(c["staleness"], **p),
            probe=lambda r, p: r.staleness_decay([0], **p),
            condition=lambda c, p, e: (
                (np.abs(c["staleness"] * math.log(p["gamma"])) + np.abs(c["staleness"]) + 3)
                * np.abs(e)
            ),
        ),
        _TraceSpec(
            name="admission_capacity",
            reference="admission_capacity",
            inputs=("version", "accepted", "running"),
            found="capacity",
            params={"eta": int, "batch": int, "max_concurrent": int},
            expected=lambda r, c, p: np.array(
                [
                    float(
                        r.admission_capacity(version=int(v), accepted=int(a), running=int(n), **p)
                    )
                    for v, a, n in zip(c["version"], c["accepted"], c["running"], strict=True)
                ]
            ),
            probe=lambda r, p: r.admission_capacity(version=0, accepted=0, running=0, **p),
            options={"staleness_count": str},
            notes="one row per admission decision; counts compared exactly",
        ),
        _TraceSpec(
            name="shaped_reward",
            reference="shaped_reward",
            inputs=("quality", "length", "b"),
            found="reward",
            params={"k0": float, "b_min": float, "tau": float},
            expected=lambda r, c, p: r.shaped_reward(c["quality"], c["length"], c["b"], **p),
            probe=lambda r, p: r.shaped_reward([0.0], [0.0], [p["b_min"]], **p),
            options={"length_scale": float},
            condition=_elementwise("quality", "length", "b"),
        ),
        _TraceSpec(
            name="dapo_overlong",
            reference="dapo_overlong_penalty",
            inputs=("length",),
            found="penalty",
            params={"max_length": float, "cache_length": float},
            expected=lambda r, c, p: r.dapo_overlong_penalty(
                c["length"], **{k: (bool(v) if k == "floor" else v) for k, v in p.items()}
            ),
            probe=lambda r, p: r.dapo_overlong_penalty(
                [0.0], **{k: (bool(v) if k == "floor" else v) for k, v in p.items()}
            ),
            options={"floor": int, "penalty_factor": float},
            condition=_scaled_lengths,
            notes="--param floor=0 for verl's and AReaL's unfloored ramp",
        ),
        _TraceSpec(
            name="cosine_length_reward",
            reference="cosine_length_reward",
            inputs=("length", "correct"),
            found="reward",
            params={"max_length": float},
            expected=lambda r, c, p: r.cosine_length_reward(c["length"], _correct(c), **p),
            probe=lambda r, p: r.cosine_length_reward([0.0], [True], **p),
            options={
                "min_value_wrong": float,
                "max_value_wrong": float,
                "min_value_correct": float,
                "max_value_correct": float,
            },
            condition=lambda c, p, e: (
                np.pi * (np.abs(c["length"]) / p["max_length"] + 1) + np.abs(e) + 2
            ),
        ),
        _TraceSpec(
            name="l1_exact",
            reference="l1_exact_reward",
            inputs=("length", "correct", "target_length"),
            found="reward",
            params={},
            expected=lambda r, c, p: r.l1_exact_reward(
                c["length"], _correct(c), c["target_length"], **p
            ),
            probe=lambda r, p: r.l1_exact_reward([0.0], [True], [1.0], **p),
            options={"alpha": float},
            condition=_l1_condition,
        ),
        _TraceSpec(
            name="l1_max",
            reference="l1_max_reward",
            inputs=("length", "correct", "target_length"),
            found="reward",
            params={},
            expected=lambda r, c, p: r.l1_max_reward(
                c["length"], _correct(c), c["target_length"], **p
            ),
            probe=lambda r, p: r.l1_max_reward([0.0], [True], [1.0], **p),
            options={"alpha": float, "delta": float},
            condition=_l1_condition,
        ),
        _TraceSpec(
            name="effective_sample_size",
            reference="effective_sample_size",
            inputs=(),
            lists=("weight",),
            found="ess",
            params={},
            expected=_ess_expected,
            probe=lambda r, p: _conventions_of(ESS, p, ("ess",)),
            options={"ess": str},
            condition=_ess_condition,
            notes="one row per batch: the list of its weights; ess=fraction for (Σw)²/(nΣw²)",
        ),
        _TraceSpec(
            name="masking_diagnostics",
            reference="masking_diagnostics",
            inputs=(),
            lists=("staleness", "weight"),
            found="kept_fraction",
            params={},
            expected=_diagnostics_expected,
            probe=_probe_diagnostics,
            options={"statistic": str, "ess": str},
            condition=_diagnostics_condition,
            found_from="statistic",
            found_choices=_DIAGNOSTIC_FIELDS,
            notes="one row per batch: lists of its staleness and weights; --param statistic= "
            "names the logged diagnostic (kept_fraction by default)",
        ),
        _TraceSpec(
            name="kimi_length_reward",
            reference="kimi_length_reward",
            inputs=(),
            lists=("length", "correct"),
            found="reward",
            params={},
            expected=_kimi_expected,
            probe=lambda r, p: _conventions_of(KIMI, p, ("scope",)),
            options={"scope": str},
            condition=_kimi_condition,
            found_list=True,
            notes="one row per problem: lists of its responses' lengths, correctness and rewards",
        ),
        _TraceSpec(
            name="vtrace",
            reference="vtrace",
            inputs=(),
            lists=_VTRACE_INPUTS,
            found="errors",
            params={},
            expected=_vtrace_expected,
            probe=_probe_vtrace,
            options={"output": str, **dict.fromkeys(_VTRACE_OPTIONS, float)},
            condition=_vtrace_condition,
            found_list=True,
            found_from="output",
            found_choices=_VTRACE_OUTPUTS,
            notes="one row per trajectory: lists over time; --param output= names the logged "
            "output (errors by default, pg_advantage, q_estimate)",
        ),
        _TraceSpec(
            name="policy_loss",
            reference="losses",
            inputs=(losses.STEP, losses.ADV),
            lists=(losses.LOGP, losses.OLD),
            optional=(losses.MASK, losses.MICRO, losses.REF),
            found=losses.LOSS,
            params=losses.PARAMS,
            options=losses.OPTIONS,
            expected=losses.policy_loss_expected,
            probe=losses.policy_loss_probe,
            condition=losses.policy_loss_condition,
            layout=losses.policy_loss_columns,
            regroup=losses.policy_loss_units,
            unit="logged losses",
            notes="one row per sequence (token lists); the loss of each step (or micro-batch) "
            "is recomputed with refimpl.losses and compared",
        ),
    )
}

#: The trace-only specs: those with no conformance spec of the same name in
#: :func:`refimpl.testing.spec_names` (every other spec has one). ``policy_loss`` checks a logged
#: scalar loss; the per-surrogate value and gradient it is built on are the loss conformance specs,
#: ``spec_names(losses=True)``.
TRACE_ONLY: tuple[str, ...] = ("policy_loss",)


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``refimpl check`` to ``parser``."""
    parser.description = (
        "Recompute every row of a logged trace (CSV, JSONL or Parquet) with refimpl and report the "
        "rows that disagree beyond the documented tolerance (refimpl.testing.tolerances.TRACE, or "
        "--rtol/--atol)."
    )
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (
        "specs: "
        + "; ".join(
            f"{s.name} ({' or '.join(_input_sets(s))} -> {s.found}"
            + (f"; params {', '.join(s.params)})" if s.params else ")")
            for s in SPECS.values()
        )
        + ".\nexit codes: 0 all rows agree, 1 a mismatch, 2 unusable input (incl. an empty trace)."
    )
    parser.add_argument(
        "trace",
        type=Path,
        help="the logged trace: .csv, .jsonl or .parquet; - reads standard input (the format from "
        "--format, else sniffed: Parquet's magic bytes, a JSON object per line, else CSV)",
    )
    parser.add_argument("--spec", required=True, help=f"required; one of: {', '.join(SPECS)}")
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a parameter of the spec (repeat), e.g. --param eta=1 (default: none; the spec "
        "says which it needs)",
    )
    parser.add_argument(
        "--report", type=Path, help="write a JSON report to this file (default: no report)"
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        help="trace format (default: from the suffix; for - or a pipe, sniffed from the content)",
    )
    parser.add_argument(
        "--dtype",
        choices=("float64", "float32", "bfloat16", "float16"),
        help="the dtype the trainer computed in: the tolerance is derived from it and the "
        "operation, row by row (see the tolerances page); default: tolerances.TRACE",
    )
    parser.add_argument(
        "--column",
        action="append",
        default=[],
        metavar="NAME=TRACE_COLUMN",
        help="read the spec's column NAME from the trace's column TRACE_COLUMN (repeat), e.g. "
        "--column weight=rollout_is_weights (default: the spec's own names)",
    )
    parser.add_argument(
        "--rtol", type=float, help="relative tolerance (default: per spec, tolerances.TRACE)"
    )
    parser.add_argument(
        "--atol", type=float, help="absolute tolerance (default: per spec, tolerances.TRACE)"
    )
    parser.add_argument(
        "--max-show",
        type=_count,
        default=10,
        metavar="N",
        help="mismatching rows to show and to put in the report, N >= 0 (default 10; 0 shows "
        "none: the summary and the exit code only)",
    )
    parser.add_argument(
        "--chunk-rows", type=int, default=1 << 18, help="rows per streamed chunk (default 262144)"
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show progress on stderr (default: when stderr is a terminal)",
    )


def _count(text: str) -> int:
    """An integer >= 0 (argparse rejects anything else with exit code 2 and this message)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be an integer >= 0; got {text!r}. Pass e.g. --max-show 10."
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(
            f"must be >= 0; got {value}. Pass 0 to show no rows, or e.g. --max-show 10."
        )
    return value


def _input_sets(spec: _TraceSpec) -> list[str]:
    if spec.name == "staleness":
        return ["trained_step, min_version", "trained_step, versions"]
    shown = ", ".join([*spec.inputs, *(f"{n} (lists)" for n in spec.lists)])
    return [shown + (f"; optional {', '.join(spec.optional)}" if spec.optional else "")]


class _Unusable(RefimplError):
    """The command cannot run as asked (exit code 2): a member of refimpl's exception family."""


def _parse_params(spec: _TraceSpec, raw: list[str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for item in raw:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise _Unusable(f"--param must be KEY=VALUE; got {item!r}. Write e.g. --param eta=1.")
        kinds = {**spec.params, **spec.options}
        if key not in kinds:
            valid = ", ".join(kinds) or "none"
            raise _Unusable(
                f"unknown parameter {key!r} for spec {spec.name!r} (its parameters: {valid})."
            )
        if key in params:
            raise _Unusable(
                f"--param {key} is given twice (last {item!r}); pass each parameter once."
            )
        kind = kinds[key]
        if kind is str:
            params[key] = value.strip()
            continue
        try:
            params[key] = int(value) if kind is int else float(value)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise _Unusable(
                f"--param {key} must be {what}; got {key}={value!r}. Pass e.g. {key}=1."
            ) from None
    missing = [k for k in spec.params if k not in params]
    if missing:
        example = " ".join(f"--param {k}=..." for k in missing)
        raise _Unusable(
            f"spec {spec.name!r} needs parameter(s) {', '.join(missing)}: add {example}."
        )
    return params


def _fmt(x: float) -> str:
    return format(float(x), ".10g")


@dataclass
class _Tally:
    rows: int = 0
    mismatches: int = 0
    max_abs_error: float = 0.0
    shown: list[dict[str, Any]] = field(default_factory=list)


def _first_rejected(reference: Callable[[Columns], Any], cols: Columns, n: int) -> int:
    """The first row the reference rejects (bisection on prefixes)."""

    def take(stop: int, start: int = 0) -> Columns:
        return {k: v[start:stop] for k, v in cols.items()}

    lo, hi = 0, n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            reference(take(mid))
            lo = mid
        except (ValueError, TypeError):
            hi = mid
    return lo


def _check_chunk(
    spec: _TraceSpec,
    refimpl: Any,
    chunk: Chunk,
    params: dict[str, Any],
    tol: Tolerance,
    tally: _Tally,
    max_show: int,
    dtype: str | None = None,
) -> None:
    cols = {k: v for k, v in chunk.columns.items() if k != spec.found}

    def reference(c: Columns) -> NDArray[Any]:
        out = spec.expected(refimpl, c, params)
        return out if spec.exact or spec.found_list else np.asarray(out, dtype=np.float64)

    try:
        with np.errstate(all="ignore"):
            expected = reference(cols)
    except (ValueError, TypeError):
        i = _first_rejected(reference, cols, chunk.size)
        try:
            reference({k: v[i : i + 1] for k, v in cols.items()})
            why = "the reference rejects it"
        except (ValueError, TypeError) as exc:
            why = str(exc)
        shown = ", ".join(f"{k}={_show_value(v[i])}" for k, v in cols.items())
        raise TraceError(
            f"{chunk.where(i)}: the inputs ({shown}) are outside the domain of "
            f"refimpl.{spec.reference}: {why}"
        ) from None
    if spec.found_list:
        found, ok, err = _list_agree(spec, chunk, cols, expected, params, tol, dtype)
        bad = np.flatnonzero(~ok)
        err = err[bad]
    elif spec.exact:
        found, ok, err = _exact_agree(chunk.columns[spec.found], expected, tol)
        bad = np.flatnonzero(~ok)
        err = err[bad]
    else:
        found = np.asarray(chunk.columns[spec.found], dtype=np.float64)
        if dtype is not None and spec.condition is not None:
            ok = _derived_agree(found, expected, spec.condition(cols, params, expected), dtype)
        else:
            ok = agree(found, expected, tol)
        if spec.either is not None:
            ok |= spec.either(cols, params, found)
        bad = np.flatnonzero(~ok)
        with np.errstate(invalid="ignore"):
            err = np.abs(found[bad] - expected[bad])
    tally.rows += chunk.size
    tally.mismatches += int(bad.size)
    if bad.size:
        finite = err[np.isfinite(err)]
        worst = math.inf if finite.size < err.size else float(finite.max(initial=0.0))
        tally.max_abs_error = max(tally.max_abs_error, worst)
    for i in bad[: max(0, max_show - len(tally.shown))]:
        row = {
            "row": chunk.row_start + int(i),
            "where": chunk.where(int(i)),
            "inputs": {k: _json_value(v[i]) for k, v in cols.items() if not k.startswith("_")},
            "expected": _json_value(expected[i]),
            "found": _json_value(found[i]),
        }
        if chunk.lines is not None:
            row["line"] = int(chunk.lines[i])
        tally.shown.append(row)


def _list_agree(
    spec: _TraceSpec,
    chunk: Chunk,
    cols: Columns,
    expected: NDArray[Any],
    params: dict[str, Any],
    tol: Tolerance,
    dtype: str | None,
) -> tuple[NDArray[Any], NDArray[np.bool_], NDArray[np.float64]]:
    """Rows whose logged value is a list: each element within tolerance; the row's error is its
    largest (infinite where a logged value is not finite and the reference's is)."""
    found = chunk.columns[spec.found]
    for i, (f, e) in enumerate(zip(found, expected, strict=True)):
        if np.size(f) != np.size(e):
            raise TraceError(
                f"{chunk.where(i)}: {spec.found} has {np.size(f)} values, expected "
                f"{np.size(e)} (one per element of {spec.lists[0]})."
            )
    sizes = [int(np.size(e)) for e in expected]
    flat_f = np.concatenate([np.asarray(f, dtype=np.float64).ravel() for f in found])
    flat_e = np.concatenate([np.asarray(e, dtype=np.float64).ravel() for e in expected])
    if dtype is not None and spec.condition is not None:
        cond = spec.condition(cols, params, expected)
        flat_c = np.concatenate([np.asarray(c, dtype=np.float64).ravel() for c in cond])
        elementwise = _derived_agree(flat_f, flat_e, flat_c, dtype)
    else:
        elementwise = agree(flat_f, flat_e, tol)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    ok = np.logical_and.reduceat(elementwise, starts)
    with np.errstate(invalid="ignore"):
        diff = np.where(elementwise, 0.0, np.abs(flat_f - flat_e))
    diff = np.where(np.isnan(diff), np.inf, diff)
    err = np.maximum.reduceat(diff, starts)
    shown: NDArray[Any] = np.empty(len(found), dtype=object)
    for i, f in enumerate(found):
        shown[i] = np.asarray(f, dtype=np.float64)
    return shown, np.asarray(ok, dtype=np.bool_), np.asarray(err, dtype=np.float64)


def _derived_agree(
    found: NDArray[np.float64],
    expected: NDArray[np.float64],
    condition: NDArray[np.float64],
    dtype: str,
) -> NDArray[np.bool_]:
    """``|found − expected| <= SAFETY·u·condition + smallest normal`` (beyond the dtype's largest
    finite number, the same infinity agrees)."""
    from refimpl.testing.tolerances import SAFETY, largest_finite, smallest_normal, unit_roundoff

    allowed = SAFETY * unit_roundoff(dtype) * np.abs(condition) + smallest_normal(dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        close = np.abs(found - expected) <= allowed
        overflow = np.isinf(found) & (np.abs(expected) > largest_finite(dtype))
    finite = np.isfinite(found) & np.isfinite(expected)
    return np.asarray((finite & close) | (np.isinf(found) & (found == expected)) | overflow)


def _exact_agree(
    found: NDArray[Any], expected: NDArray[Any], tol: Tolerance
) -> tuple[NDArray[Any], NDArray[np.bool_], NDArray[np.float64]]:
    """Exact comparison of integers (int64 or Python ints): ``found == expected``, or within
    ``tol`` when one is given (computed exactly on the integers); the errors as float64."""
    if found.dtype != np.int64 or expected.dtype != np.int64:
        found, expected = found.astype(object), expected.astype(object)  # Python int and float
    with np.errstate(invalid="ignore", over="ignore"):
        if found.dtype == object:
            diff = np.array(
                [
                    abs(f - e) if not isinstance(f, float) or math.isfinite(f) else math.inf
                    for f, e in zip(found, expected, strict=True)
                ],
                dtype=object,
            )
        else:
            diff = np.abs(found.astype(object) - expected.astype(object))
        limit = [tol.atol + tol.rtol * abs(e) for e in expected] if tol.atol or tol.rtol else 0
        ok = np.asarray(diff <= np.asarray(limit, dtype=object), dtype=np.bool_)
    err = np.array([float(d) for d in diff], dtype=np.float64)
    return found, ok, err


def _show_value(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return "[" + ", ".join(_show_value(x) for x in v.tolist()) + "]"
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return str(int(v))  # exactly, whatever its size
    x = float(v)
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else _fmt(x)


def _json_value(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return [_json_value(x) for x in v.tolist()]
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return int(v)  # JSON integers are exact
    x = float(v)
    return x if math.isfinite(x) else str(x)  # JSON has no NaN/inf: write "nan", "inf"


def run(args: argparse.Namespace) -> int:
    """Check the trace; print a summary; return the exit code (0, 1 or 2)."""
    report: dict[str, Any] = {
        "trace": str(args.trace),
        "spec": args.spec,
        "params": {},
    }
    if args.report is not None:
        problem = _unwritable(args.report)
        if problem is not None:  # found before reading the trace, not after checking it all
            print(f"refimpl check: error: {problem}", file=sys.stderr)
            return EXIT_UNUSABLE
    try:
        code = _run(args, report)
    except (TraceError, _Unusable) as exc:
        report.update(status="unusable", exit_code=EXIT_UNUSABLE, error=str(exc))
        print(f"refimpl check: error: {exc}", file=sys.stderr)
        code = EXIT_UNUSABLE
    if args.report is not None:
        try:
            args.report.write_text(json.dumps(report, indent=2) + "\n")
        except OSError as exc:  # e.g. the disk filled up while checking
            print(
                f"refimpl check: error: --report {str(args.report)!r} could not be written "
                f"({exc.strerror or exc}). Pass a --report path in a writable directory.",
                file=sys.stderr,
            )
            return EXIT_UNUSABLE
    return code


def _unwritable(path: Path) -> str | None:
    """Why ``--report path`` cannot be written (``None`` if it can)."""
    directory = path.parent
    fix = "Pass a --report path in an existing, writable directory (or create the directory)."
    if path.is_dir():
        return f"--report {str(path)!r} is a directory, not a file. {fix}"
    if not directory.is_dir():
        return f"--report {str(path)!r}: the directory {str(directory)!r} does not exist. {fix}"
    if not os.access(directory, os.W_OK | os.X_OK) or (
        path.exists() and not os.access(path, os.W_OK)
    ):
        return f"--report {str(path)!r}: no permission to write there. {fix}"
    return None


def _run(args: argparse.Namespace, report: dict[str, Any]) -> int:
    spec = SPECS.get(args.spec)
    if spec is None:
        raise _Unusable(f"unknown spec {args.spec!r}; use one of: {', '.join(SPECS)}.")
    params = _parse_params(spec, args.param)
    report["params"] = params
    import refimpl

    if not hasattr(refimpl, spec.reference):
        raise _Unusable(
            f"refimpl.{spec.reference} is not available in the installed refimpl; upgrade it."
        )
    try:
        spec.probe(refimpl, params)
    except (ValueError, TypeError) as exc:
        raise _Unusable(f"invalid --param for spec {spec.name!r}: {exc}") from None
    if spec.found_from is not None and spec.found_from in params:
        spec = replace(spec, found=params[spec.found_from])
    default = TRACE.get(spec.name, Tolerance(rtol=1e-5, atol=1e-8))
    tol = Tolerance(
        rtol=default.rtol if args.rtol is None else args.rtol,
        atol=default.atol if args.atol is None else args.atol,
    )
    for option, value in (("--rtol", args.rtol), ("--atol", args.atol)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise _Unusable(
                f"{option} must be finite and >= 0 (a tolerance); got {option} {value}. Pass e.g. "
                f"{option} 1e-9, or leave it out for the spec's default ({default._asdict()})."
            )
    if args.chunk_rows < 1:
        raise _Unusable(f"--chunk-rows must be >= 1; got {args.chunk_rows}.")
    report["columns"] = _parse_columns(spec, args.column)
    report["dtype"] = args.dtype
    _EDGE_DTYPE["dtype"] = args.dtype or "float64"
    with tempfile.TemporaryDirectory(prefix="refimpl-check-") as spool:
        trace = _readable(args.trace, Path(spool))
        try:
            return _check(args, report, spec, params, tol, trace)
        except TraceError as exc:
            if trace != args.trace:  # name what the user passed, not the spooled copy
                raise TraceError(str(exc).replace(repr(str(trace)), _shown(args.trace))) from None
            raise


def _parse_columns(spec: _TraceSpec, raw: list[str]) -> dict[str, str]:
    """``--column NAME=TRACE_COLUMN``: the spec's column names and the trace's."""
    known = [*spec.inputs, *spec.lists, *spec.optional, *(spec.found_choices or (spec.found,))]
    if spec.name == "staleness":
        known += ["min_version", "versions"]
    out: dict[str, str] = {}
    for item in raw:
        name, sep, column = (x.strip() for x in item.partition("="))
        if not sep or not name or not column:
            raise _Unusable(
                f"--column must be NAME=TRACE_COLUMN; got {item!r}. Write e.g. "
                "--column weight=rollout_is_weights."
            )
        if name not in known:
            raise _Unusable(
                f"--column names {name!r}, which spec {spec.name!r} does not read (its columns: "
                f"{', '.join(known)})."
            )
        if name in out:
            raise _Unusable(f"--column {name} is given twice; map each column once.")
        out[name] = column
    return out


def _shown(trace: Path) -> str:
    return "standard input" if str(trace) == "-" else repr(str(trace))


def _readable(trace: Path, spool: Path) -> Path:
    """A regular file with the trace: the path itself, or a copy of standard input (``-``), of a
    pipe or of a device (``/dev/null``, ``<(...)``), which cannot be read twice or seeked."""
    if str(trace) != "-" and (trace.is_file() or not trace.exists() or trace.is_dir()):
        return trace  # read_chunks names a missing file or a directory
    copy = spool / "trace"
    try:
        with copy.open("wb") as out:
            if str(trace) == "-":
                shutil.copyfileobj(sys.stdin.buffer, out, 1 << 20)
            else:
                with trace.open("rb") as source:
                    shutil.copyfileobj(source, out, 1 << 20)
    except OSError as exc:
        raise TraceError(
            f"{_shown(trace)} could not be read ({exc.strerror or exc}). Pass a readable trace."
        ) from None
    return copy


def _check(
    args: argparse.Namespace,
    report: dict[str, Any],
    spec: _TraceSpec,
    params: dict[str, Any],
    tol: Tolerance,
    trace: Path,
) -> int:
    import refimpl

    if args.format is not None or (trace == args.trace and str(trace) != "-"):
        fmt = detect_format(trace, args.format)
    else:  # standard input or a pipe: the suffix, else the first bytes
        fmt = _SUFFIX_FORMAT.get(args.trace.suffix.lower()) or sniff_format(trace) or "csv"
    report.update(format=fmt, tolerance=tol._asdict(), reference=f"refimpl.{spec.reference}")
    inputs = list(spec.inputs)
    lists: list[str] = list(spec.lists)
    mapping: dict[str, str] = report.get("columns", {})
    if spec.name == "staleness":
        inputs, lists = _staleness_columns(trace, fmt, mapping)
    elif spec.layout is not None:
        inputs, lists = spec.layout(trace, fmt, mapping, params)

    from tqdm import tqdm

    total = trace.stat().st_size if trace.is_file() else 0
    unit = "rows" if fmt == "parquet" else "B"
    if fmt == "parquet":
        total = _parquet_rows(trace)
    tally = _Tally()
    with tqdm(
        total=total,
        unit=unit,
        unit_scale=True,
        file=sys.stderr,
        disable=None if args.progress is None else not args.progress,
        desc=f"refimpl check {spec.name}",
        leave=False,
    ) as bar:

        def progress(done: int) -> None:
            bar.update(done - bar.n)

        back = {mapping.get(n, n): n for n in [*inputs, *lists, spec.found]}

        def chunks() -> Iterator[Chunk]:
            for chunk in read_chunks(
                trace,
                fmt,
                [mapping.get(n, n) for n in [*inputs, *([] if spec.found_list else [spec.found])]],
                [mapping.get(n, n) for n in [*lists, *([spec.found] if spec.found_list else [])]],
                chunk_rows=args.chunk_rows,
                on_progress=progress,
                exact=spec.exact,
            ):
                chunk.columns = {back.get(k, k): v for k, v in chunk.columns.items()}
                yield chunk

        units = chunks() if spec.regroup is None else spec.regroup(chunks(), refimpl, params)
        for chunk in units:
            _check_chunk(spec, refimpl, chunk, params, tol, tally, args.max_show, args.dtype)
    if tally.rows == 0:
        raise TraceError(
            f"{_shown(args.trace)} has no rows: nothing was checked, and an empty trace cannot "
            "pass the gate. Check that the trainer wrote the trace."
        )
    code = EXIT_MISMATCH if tally.mismatches else EXIT_OK
    report.update(
        status="mismatch" if tally.mismatches else "ok",
        exit_code=code,
        rows=tally.rows,
        mismatches=tally.mismatches,
        max_abs_error=_json_value(tally.max_abs_error),
        first_mismatches=tally.shown,
    )
    _print_summary(spec, params, tol, tally, args.trace, fmt, args.dtype)
    return code


def _staleness_columns(
    path: Path, fmt: str, mapping: dict[str, str] | None = None
) -> tuple[list[str], list[str]]:
    """``trained_step`` plus ``versions`` (list column) if the trace has it, else ``min_version``."""
    names = _column_names(path, fmt)
    mapping = mapping or {}
    if names is not None and mapping.get("versions", "versions") in names:
        return ["trained_step"], ["versions"]
    if names is not None and names and mapping.get("min_version", "min_version") not in names:
        raise TraceError(
            f"{str(path)!r} has neither a 'min_version' nor a 'versions' column (columns found: "
            f"{', '.join(map(repr, names))}). Log the oldest token version of each sample as "
            "min_version, or every token's version as a list in versions."
        )
    return ["trained_step", "min_version"], []


def _column_names(path: Path, fmt: str) -> list[str] | None:
    if not path.is_file():
        return None
    if fmt == "csv":
        import csv

        with path.open("rb") as f:
            head = f.readline()
        if b"\x00" in head:
            return None  # not text: the reader says so
        try:
            return next(csv.reader([head.decode("utf-8-sig")]), [])
        except UnicodeDecodeError:
            return None
    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            names: list[str] = pq.ParquetFile(path).schema_arrow.names
        except Exception:
            return None
        return names
    with path.open("rb") as f:
        for raw in f:
            if raw.strip():
                try:
                    obj = json.loads(raw)
                except ValueError:
                    return None
                return list(obj) if isinstance(obj, dict) else None
    return None


def _parquet_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    try:
        rows: int = pq.ParquetFile(path).metadata.num_rows
    except Exception:
        return 0
    return rows


def _print_summary(
    spec: _TraceSpec,
    params: dict[str, Any],
    tol: Tolerance,
    tally: _Tally,
    trace: Path,
    fmt: str,
    dtype: str | None = None,
) -> None:
    shown_params = ", ".join(f"{k}={v}" for k, v in params.items())
    print(
        f"refimpl check {trace} ({fmt}): spec {spec.name}"
        + (f" ({shown_params})" if params else "")
    )
    exact = " (in exact integer arithmetic)" if spec.exact else ""
    if dtype is not None and spec.condition is not None:
        from refimpl.testing.tolerances import SAFETY, unit_roundoff

        rule = (
            f"derived from {dtype}: |found - expected| <= {SAFETY:g}*u*condition, "
            f"u = {unit_roundoff(dtype):.3g}"
        )
    else:
        rule = f"|found - expected| <= {tol.atol:g} + {tol.rtol:g}*|expected|"
    print(f"reference refimpl.{spec.reference}{exact}; tolerance {rule}")
    if not tally.mismatches:
        print(f"OK: all {tally.rows:,} {spec.unit} agree with the reference.")
        return
    share = tally.mismatches / tally.rows
    print(
        f"MISMATCH: {tally.mismatches:,} of {tally.rows:,} {spec.unit} ({share:.3%}) disagree "
        f"(largest absolute error {_fmt(tally.max_abs_error)})."
    )
    if not tally.shown:
        return
    print(f"first {len(tally.shown)} mismatching {spec.unit}:")
    for row in tally.shown:
        inputs = ", ".join(f"{k}={_show_json(v)}" for k, v in row["inputs"].items())
        print(
            f"  {row['where']}: {inputs} -> expected {spec.found}={_show_json(row['expected'])}, "
            f"found {spec.found}={_show_json(row['found'])}"
        )


def _show_json(v: Any) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(_show_json(x) for x in v) + "]"
    if isinstance(v, str):
        return v
    return _show_value(v)
