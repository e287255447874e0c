"""The ``policy_loss`` spec of ``refimpl check``: a trainer's logged loss, recomputed step by step.

A trainer logs one row per sequence of a loss computation: its ``step`` (any integer naming the
loss evaluation: the optimizer step, or the mini-batch within it), the per-token lists ``logp``
(current log-probabilities), ``logp_old`` (the ones the ratio is taken against) and optionally
``mask`` (1 = a token the loss counts, 0 = padding; without it every listed token counts), its
``advantage`` (one number per sequence, or a list per token), optionally ``logp_ref`` (when a KL
term is in the loss) and ``micro_batch`` (when each micro-batch logs its own loss), and ``loss``:
the scalar loss the trainer computed for the step (or the micro-batch), repeated on each of its
rows. The rows of a step are contiguous; a chunk boundary may fall anywhere inside a step.

For each unit (a step, or a step's micro-batch) the reference is

.. math::

    J = \\sum_{b,t} w_{bt}\\,\\bigl(\\ell_{bt} + \\beta\\,k_{bt}\\bigr),

with :math:`\\ell` the surrogate's per-token loss (``--param surrogate=``, a function of
:mod:`refimpl.losses`), :math:`k` the KL estimator against ``logp_ref`` (``kl_coef`` =
:math:`\\beta`, ``kl_estimator``), and :math:`w` :func:`refimpl.losses.aggregation.aggregation_weights`
of the unit's mask (``--param aggregation=``). With a ``micro_batch`` column the counts of
:math:`w` are the micro-batch's own (``denominator=micro_batch``, the default: TRL's ``grpo``,
``bnpo``, ``dr_grpo``) or the whole step's (``denominator=step``: verl 0.9.1's engine path, whose
micro-batch losses divide by the step's ``batch_num_tokens`` and are summed).

:func:`policy_loss_units` turns the streamed rows into one :class:`UnitChunk` row per unit, with
the reference value and the rounding condition of a correct computation in hidden columns, so that
``check_cli`` compares and reports them like any other spec's rows.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from refimpl._validation import invalid
from refimpl.errors import InvalidArgument
from refimpl.testing._trace_loss_params import (
    _AGGREGATIONS,
    _DENOMINATORS,
    _EMPTY_ROWS,
    _NUMERIC,
)
from refimpl.testing._trace_loss_params import OPTIONS as OPTIONS
from refimpl.testing._trace_loss_params import PARAMS as PARAMS
from refimpl.testing._trace_loss_rows import (
    ADV as ADV,
)
from refimpl.testing._trace_loss_rows import (
    LOGP as LOGP,
)
from refimpl.testing._trace_loss_rows import (
    LOSS as LOSS,
)
from refimpl.testing._trace_loss_rows import (
    MASK as MASK,
)
from refimpl.testing._trace_loss_rows import (
    MICRO as MICRO,
)
from refimpl.testing._trace_loss_rows import (
    OLD as OLD,
)
from refimpl.testing._trace_loss_rows import (
    REF as REF,
)
from refimpl.testing._trace_loss_rows import (
    STEP as STEP,
)
from refimpl.testing._trace_loss_rows import (
    Batch,
    batch,
    check_rows,
    same_loss,
    step_rows,
    units,
)
from refimpl.testing._trace_loss_rows import Segment as _Segment
from refimpl.testing._trace_loss_rows import span as _range
from refimpl.testing._trace_loss_rows import whole as _int
from refimpl.testing._traces import Chunk, TraceError, dataset_columns, dataset_files
from refimpl.testing.tolerances import summation_factor

__all__ = [
    "COLUMNS",
    "OPTIONS",
    "PARAMS",
    "SURROGATES",
    "UnitChunk",
    "policy_loss_columns",
    "policy_loss_condition",
    "policy_loss_expected",
    "policy_loss_probe",
    "policy_loss_units",
]

Array = NDArray[np.float64]

#: surrogate name -> (module, function, sequence level): the closed list ``--param surrogate=``
#: maps to; a sequence-level surrogate's token loss depends on its whole sequence's log-ratio.
SURROGATES: dict[str, tuple[str, str, bool]] = {
    "ppo_clip": ("refimpl.losses.clipped", "ppo_clip_loss", False),
    "cispo": ("refimpl.losses.clipped", "cispo_loss", False),
    "sapo": ("refimpl.losses.clipped", "sapo_loss", False),
    "importance_pg": ("refimpl.losses.policy_gradient", "importance_weighted_pg_loss", False),
    "gspo": ("refimpl.losses.sequence", "gspo_loss", True),
    "gspo_token": ("refimpl.losses.sequence", "gspo_token_loss", True),
    "gmpo": ("refimpl.losses.sequence", "gmpo_loss", True),
}

#: every column the spec reads (``--column`` may map any of them)
COLUMNS = (STEP, MICRO, LOGP, OLD, MASK, ADV, REF)
#: the hidden columns of a unit row: the reference value and its rounding condition
_EXPECTED, _CONDITION = "_expected", "_condition"


# --- parameters -----------------------------------------------------------------------------


def _surrogate(params: dict[str, Any]) -> Callable[..., Any]:
    module, name, _ = SURROGATES[params["surrogate"]]
    fn: Callable[..., Any] = getattr(importlib.import_module(module), name)
    return fn


def _surrogate_kwargs(params: dict[str, Any]) -> dict[str, float]:
    return {k: params[k] for k in _NUMERIC if k in params}


def _kl() -> Callable[..., Any]:
    fn: Callable[..., Any] = importlib.import_module("refimpl.losses.kl").kl_penalty
    return fn


def _aggregation_kwargs(params: dict[str, Any]) -> dict[str, Any]:
    kw: dict[str, Any] = {"mode": params["aggregation"]}
    if "constant" in params:
        kw["constant"] = params["constant"]
    if "empty_rows" in params:
        kw["empty_rows"] = params["empty_rows"]
    return kw


def _weights(mask: Array, params: dict[str, Any], counts: dict[str, int]) -> Array:
    from refimpl.losses.aggregation import aggregation_weights

    kw: dict[str, Any] = {**_aggregation_kwargs(params), **counts}
    return aggregation_weights(mask, **kw)


def _choice(params: dict[str, Any], key: str, choices: tuple[str, ...], fix: str) -> None:
    if key in params and params[key] not in choices:
        shown = ", ".join(choices)
        raise invalid(f"--param {key}", f"be one of {shown}", params[key], fix)


def policy_loss_probe(r: Any, params: dict[str, Any]) -> object:
    """Validate the ``--param`` set before the trace is read (a ``ValueError`` names the fix)."""
    _choice(
        params,
        "surrogate",
        tuple(SURROGATES),
        "It names the refimpl.losses surrogate the trainer's per-token loss follows.",
    )
    _choice(
        params,
        "aggregation",
        _AGGREGATIONS,
        "It names how the trainer reduces the per-token losses to its scalar (verl "
        "loss_agg_mode token-mean = token_mean, seq-mean-token-mean = seq_mean_token_mean; Dr "
        "GRPO = token_sum_norm with constant=).",
    )
    _choice(
        params,
        "denominator",
        _DENOMINATORS,
        "micro_batch divides each micro-batch's loss by its own counts, step by the whole "
        "step's (verl's batch_num_tokens).",
    )
    _choice(params, "empty_rows", _EMPTY_ROWS, "excluded is verl's rule, counted TRL's grpo.")
    fn = _surrogate(params)
    accepted = inspect.signature(fn).parameters
    for key in _surrogate_kwargs(params):
        if key not in accepted:
            own = [k for k in _NUMERIC if k in accepted]
            raise invalid(
                f"--param {key}",
                f"be a parameter of surrogate={params['surrogate']} (refimpl.losses."
                f"{fn.__name__} takes {', '.join(own) or 'none of them'})",
                params[key],
                f"Drop --param {key}, or pick the surrogate that has it.",
            )
    required = [
        k
        for k, p in accepted.items()
        if p.kind is p.KEYWORD_ONLY and p.default is p.empty and k in _NUMERIC
    ]
    missing = [k for k in required if k not in params]
    if missing:
        raise InvalidArgument(
            f"surrogate={params['surrogate']} needs --param {missing[0]} (refimpl.losses."
            f"{fn.__name__} has no default for it): add --param {missing[0]}=... with the "
            "trainer's configured value."
        )
    if ("kl_estimator" in params or "kl_clamp" in params) and "kl_coef" not in params:
        raise InvalidArgument(
            "--param kl_estimator and kl_clamp describe a KL term, which needs --param kl_coef "
            "(its weight in the loss): add --param kl_coef=..., or drop them."
        )
    if "kl_coef" in params and "kl_estimator" not in params:
        raise InvalidArgument(
            "--param kl_coef needs --param kl_estimator (which estimator the KL term uses): add "
            "--param kl_estimator=k1, k2, k3, low_var_kl, ... as refimpl.losses.kl_penalty names "
            "them."
        )
    tiny = np.zeros((1, 1))
    fn(tiny, tiny, np.zeros(1), **_surrogate_kwargs(params))
    _weights(np.ones((1, 1)), params, {})
    if "kl_coef" in params:
        if not math.isfinite(params["kl_coef"]):
            raise invalid("--param kl_coef", "be finite", params["kl_coef"], "Pass e.g. 0.001.")
        _kl()(tiny, tiny, **_kl_kwargs(params))
    return None


def _kl_kwargs(params: dict[str, Any]) -> dict[str, Any]:
    kw: dict[str, Any] = {"estimator": params["kl_estimator"]}
    if "kl_clamp" in params:
        kw["clamp"] = params["kl_clamp"]
    return kw


# --- which columns to read -------------------------------------------------------------------


def _fields(path: Path, fmt: str) -> dict[str, bool | None] | None:
    """The trace's column names, each with whether it holds lists (None: unknown, in CSV)."""
    if path.is_dir() and fmt == "parquet":  # a dataset: its first file's, and partition keys
        names, keys = dataset_columns(path)
        if not names:
            return None
        path = dataset_files(path)[0]
        found = _fields(path, fmt)
        return None if found is None else {**found, **dict.fromkeys(keys, False)}
    if not path.is_file():
        return None
    try:
        if fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            schema = pq.ParquetFile(path).schema_arrow
            return {
                f.name: pa.types.is_list(f.type) or pa.types.is_large_list(f.type) for f in schema
            }
        with path.open("rb") as fh:
            for raw in fh:
                if not raw.strip():
                    continue
                if fmt == "csv":
                    import csv

                    names = next(csv.reader([raw.decode("utf-8-sig")]), [])
                    return dict.fromkeys(names)
                obj = json.loads(raw)
                if not isinstance(obj, dict):
                    return None
                return {k: isinstance(v, list) for k, v in obj.items()}
    except Exception:  # an unreadable trace: the reader names the problem
        return None
    return None


def policy_loss_columns(
    path: Path, fmt: str, mapping: dict[str, str], params: dict[str, Any]
) -> tuple[list[str], list[str]]:
    """The scalar and the list columns to read: the required ones, and the optional ``mask``,
    ``micro_batch`` and ``logp_ref`` when the trace has them. ``advantage`` is read as a list
    unless the trace says it holds numbers (JSONL, Parquet); in CSV a single number is a list of
    one, which means one advantage for the sequence."""
    fields = _fields(path, fmt)

    def has(name: str) -> bool:
        return fields is not None and mapping.get(name, name) in fields

    numeric, lists = [STEP], [LOGP, OLD]
    if has(MICRO):
        numeric.append(MICRO)
    elif "denominator" in params and fields is not None:
        raise TraceError(
            f"--param denominator={params['denominator']} applies to a trace with a "
            f"{MICRO!r} column (one loss logged per micro-batch), and this trace has none. Log "
            "each row's micro-batch id, or drop --param denominator."
        )
    if has(MASK):
        lists.append(MASK)
    scalar = fields is not None and fields.get(mapping.get(ADV, ADV)) is False
    (numeric if scalar else lists).append(ADV)
    if "kl_coef" in params:
        if fields is not None and not has(REF):
            raise TraceError(
                f"--param kl_coef={params['kl_coef']} needs the reference policy's "
                f"log-probabilities: log them per token as a list column {REF!r} (or map yours "
                f"with --column {REF}=NAME)."
            )
        lists.append(REF)
    return numeric, lists


# --- grouping the streamed rows into steps ---------------------------------------------------


@dataclass
class _Steps:
    """Cuts the stream of rows into steps (runs of equal ``step``), across chunk boundaries."""

    pending: list[_Segment] = field(default_factory=list)
    value: float = math.nan
    seen: dict[float, str] = field(default_factory=dict)

    def add(self, chunk: Chunk) -> list[list[_Segment]]:
        step = _ids(chunk, STEP)
        cuts = np.flatnonzero(step[1:] != step[:-1]) + 1
        bounds = [0, *cuts.tolist(), chunk.size]
        done = []
        for a, b in itertools.pairwise(bounds):
            if self.pending and step[a] == self.value:
                self.pending.append(_Segment(chunk, a, b))
                continue
            if self.pending:
                done.append(self._close())
            if float(step[a]) in self.seen:
                raise repeated_step(chunk.where(a), float(step[a]), self.seen[float(step[a])])
            self.pending, self.value = [_Segment(chunk, a, b)], float(step[a])
        return done

    def _close(self) -> list[_Segment]:
        segments, self.pending = self.pending, []
        self.seen[self.value] = _span(segments)
        return segments

    def finish(self) -> list[list[_Segment]]:
        return [self._close()] if self.pending else []


def repeated_step(where: str, value: float, earlier: str) -> TraceError:
    """The refusal of a step whose rows start again at ``where`` after other steps' rows."""
    return TraceError(
        f"{where}: step {_int(value)} appears again after other steps (its rows were at "
        f"{earlier}). The rows of a step must be contiguous: write each step's rows together, or "
        "sort the trace by step (a stable sort keeps their order)."
    )


def step_span(first: str, last: str) -> str:
    """How a step's rows are named: ``row 4`` or ``rows 4-9``."""
    return _range(first, last)


def _ids(chunk: Chunk, name: str) -> Array:
    """An id column (step, micro-batch) as float64, refused unless whole numbers."""
    values = np.asarray(chunk.columns[name], dtype=np.float64)
    bad = ~np.isfinite(values) | (values != np.round(values))
    if np.any(bad):
        i = int(np.flatnonzero(bad)[0])
        raise TraceError(
            f"{chunk.where(i)}: {name} is {float(values[i])!r}, not a whole number. Log the {name} as an "
            "integer id, the same on every row of one loss computation."
        )
    return values


def _span(segments: list[_Segment]) -> str:
    first, last = segments[0], segments[-1]
    return _range(first.chunk.where(first.start), last.chunk.where(last.stop - 1))


# --- the reference value of one unit --------------------------------------------------------


@dataclass
class _Value:
    expected: float
    condition: float
    token_sum: float


def _value(b: Batch, params: dict[str, Any], counts: dict[str, int]) -> _Value:
    """The reference loss of a unit, its token sum and the rounding condition (see the docs:
    ``Σ |w|·|ℓ|·(|d| + sequence term + log₂ n + 6)`` plus the KL term's)."""
    terms = _surrogate(params)(b.logp, b.old, b.adv, mask=b.mask, **_surrogate_kwargs(params))
    loss = np.asarray(terms.loss, dtype=np.float64)
    w = _weights(b.mask, params, counts)
    d = np.abs(b.logp - b.old)
    n = int(b.mask.sum())
    factor = d + summation_factor(max(n, 1)) + 6.0
    if SURROGATES[params["surrogate"]][2]:
        lengths = np.maximum(b.mask.sum(axis=1, keepdims=True), 1.0)
        seq = np.array([summation_factor(int(x)) for x in lengths[:, 0]])[:, None]
        factor = factor + seq * (d * b.mask).sum(axis=1, keepdims=True) / lengths
    condition = float(np.sum(np.abs(w) * np.abs(loss) * factor))
    total = loss
    if "kl_coef" in params and b.ref is not None:
        k = np.asarray(_kl()(b.logp, b.ref, mask=b.mask, **_kl_kwargs(params)).loss)
        beta = float(params["kl_coef"])
        total = loss + beta * k
        delta = np.abs(b.logp - b.ref)
        kl_factor = (np.abs(k) + delta + 2.0) * (delta + summation_factor(max(n, 1)) + 4.0)
        condition += abs(beta) * float(np.sum(np.abs(w) * kl_factor * b.mask))
    return _Value(
        expected=float(np.sum(w * total)),
        condition=condition,
        token_sum=float(np.sum(b.mask * total)),
    )


@dataclass
class _Unit:
    place: str
    line: int | None
    step: float
    micro: float | None
    sequences: int
    tokens: int
    padded: int
    loss: float
    value: _Value


def _step_units(segments: list[_Segment], params: dict[str, Any]) -> list[_Unit]:
    rows = step_rows(segments)
    step = float(np.asarray(segments[0].chunk.columns[STEP])[segments[0].start])
    check_rows(rows)
    row_tokens = np.bincount(rows.row_ids(), weights=rows.mask.values, minlength=rows.size)
    step_tokens = int(row_tokens.sum())
    step_seqs = int(np.count_nonzero(row_tokens > 0))
    if params.get("empty_rows") == "counted":
        step_seqs = rows.size
    global_counts = rows.micro is not None and params.get("denominator") == "step"
    out = []
    for name, a, b in units(rows, step):
        batch_ = batch(rows, a, b)
        place = f"{name} ({_range(rows.where(a), rows.where(b - 1))})"
        found = same_loss(rows, a, b, name)
        tokens = int(batch_.mask.sum())
        counted = step_tokens if global_counts else tokens
        if counted == 0 and params["aggregation"] != "token_sum":
            scope = f"step {_int(step)}" if global_counts else name
            raise TraceError(
                f"{place}: {scope} has no valid token ({MASK} is 0 everywhere), so its loss under "
                f"aggregation={params['aggregation']} is 0/0. Drop the empty "
                f"{'step' if global_counts or rows.micro is None else 'micro-batch'} from the "
                "trace (trainers skip it), or log its tokens with mask 1."
            )
        counts = (
            {"token_count": max(step_tokens, 1), "sequence_count": max(step_seqs, 1)}
            if global_counts
            else {}
        )
        try:
            value = _value(batch_, params, counts)
        except (ValueError, TypeError) as exc:
            raise TraceError(
                f"{place}: the inputs are outside the domain of the reference "
                f"(surrogate={params['surrogate']}): {exc}"
            ) from None
        out.append(
            _Unit(
                place=place,
                line=None if rows.lines is None else int(rows.lines[a]),
                step=step,
                micro=None if rows.micro is None else float(rows.micro[a]),
                sequences=b - a,
                tokens=tokens,
                padded=int(batch_.mask.size),
                loss=found,
                value=value,
            )
        )
    return out


# --- the unit rows check_cli compares -------------------------------------------------------


@dataclass
class UnitChunk(Chunk):
    """One row per unit (a step or a micro-batch); ``where`` names the unit and its rows."""

    places: list[str] = field(default_factory=list)

    def where(self, i: int) -> str:
        return self.places[i]


def _unit_chunk(units: list[_Unit], start: int) -> UnitChunk:
    columns: dict[str, Any] = {STEP: np.array([u.step for u in units], dtype=np.int64)}
    if units[0].micro is not None:
        columns[MICRO] = np.array([u.micro for u in units], dtype=np.int64)
    columns["sequences"] = np.array([u.sequences for u in units], dtype=np.int64)
    columns["tokens"] = np.array([u.tokens for u in units], dtype=np.int64)
    columns["padded_tokens"] = np.array([u.padded for u in units], dtype=np.int64)
    columns["token_sum"] = np.array([u.value.token_sum for u in units])
    columns[LOSS] = np.array([u.loss for u in units])
    columns[_EXPECTED] = np.array([u.value.expected for u in units])
    columns[_CONDITION] = np.array([u.value.condition for u in units])
    lines = [u.line for u in units]
    return UnitChunk(
        columns=columns,
        row_start=start,
        lines=None if None in lines else np.array(lines, dtype=np.int64),
        places=[u.place for u in units],
    )


def policy_loss_units(
    chunks: Iterable[Chunk], refimpl: Any, params: dict[str, Any]
) -> Iterator[Chunk]:
    """The streamed rows regrouped into units, one :class:`UnitChunk` per input chunk that
    completes at least one step (the last step is completed by the end of the trace)."""
    steps = _Steps()
    start = 0
    for chunk in chunks:
        units = [u for segs in steps.add(chunk) for u in _step_units(segs, params)]
        if units:
            yield _unit_chunk(units, start)
            start += len(units)
    units = [u for segs in steps.finish() for u in _step_units(segs, params)]
    if units:
        yield _unit_chunk(units, start)


def policy_loss_expected(r: Any, cols: dict[str, Any], params: dict[str, Any]) -> Array:
    """The reference loss of each unit row (computed while grouping)."""
    return np.asarray(cols[_EXPECTED], dtype=np.float64)


def policy_loss_condition(cols: dict[str, Any], params: dict[str, Any], expected: Array) -> Array:
    """The rounding condition of each unit row (``--dtype``)."""
    return np.asarray(cols[_CONDITION], dtype=np.float64)
