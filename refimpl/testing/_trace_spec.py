"""What a trace spec of ``refimpl check`` is, and the per-row helpers the specs share.

A :class:`_TraceSpec` names the reference, the columns it reads, the logged column it compares, its
``--param`` set and, for ``--dtype``, the rounding condition of each row. The table of specs is
:mod:`refimpl.testing._trace_specs`; the specs whose rows are lists (a sequence, a batch, a
trajectory) compute with :mod:`refimpl.testing._trace_lists`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from refimpl.errors import InvalidArgument
from refimpl.testing._traces import Chunk, ListColumn
from refimpl.testing.tolerances import SAFETY, unit_roundoff

Columns = dict[str, Any]


class References:
    """refimpl's flat names, each found in the formula module that defines it, imported on first
    use: the cheapest modules are tried first, so a staleness check does not load the dispatch
    module's SciPy and pandas (``refimpl.NAME`` loads every formula module at once)."""

    #: searched in this order; ``losses`` is also the name of the ``policy_loss`` reference
    HOMES = ("staleness", "staleness.frameworks", "penalties", "losses", "effort", "dispatch")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name == "losses":
            return importlib.import_module("refimpl.losses")
        for home in self.HOMES:
            module = importlib.import_module(f"refimpl.{home}")
            if name in getattr(module, "__all__", ()):
                value = getattr(module, name)
                setattr(self, name, value)
                return value
        raise AttributeError(f"refimpl has no reference named {name!r}")


@dataclass(frozen=True)
class _TraceSpec:
    """One spec of ``refimpl check``: its reference, columns, parameters and tolerance rule."""

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
    #: each row's expected value depends on that row's inputs alone (an elementwise reference):
    #: a long chunk's halves are then computed on two threads, their values the whole's
    rowwise: bool = False


#: the unit roundoff that the band-edge zone is computed with (``--dtype``; float64 by default)
_EDGE_DTYPE = {"dtype": "float64"}


def _mis_edge(
    cols: Columns, params: dict[str, Any], found: NDArray[np.float64]
) -> NDArray[np.bool_]:
    """Rows whose ratio sits at a band edge to the rounding of the trace's dtype (``--dtype``;
    1e-9 relative in float64): kept or dropped both agree."""
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
    oldest = _oldest_versions(cols["versions"]) if "versions" in cols else cols["min_version"]
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


def _oldest_versions(versions: ListColumn) -> NDArray[Any]:
    """Each sample's oldest token version (a segment minimum), refused if a sample has none or a
    version is not a whole number."""
    sizes = versions.sizes()
    if np.any(sizes == 0):
        i = int(np.flatnonzero(sizes == 0)[0])
        raise InvalidArgument(
            "token_versions must hold at least one token version (every sample has a "
            f"generated token); sample {i} is empty."
        )
    values = versions.values
    if values.dtype == np.int64:
        out: NDArray[Any] = np.minimum.reduceat(values, versions.offsets[:-1])
        return out
    oldest: NDArray[Any] = np.empty(len(versions), dtype=object)
    for i, row in enumerate(versions):
        for v in row.tolist():
            _whole(v, "token_versions", "versions count optimizer steps")
        oldest[i] = min(row.tolist())
    return oldest


def _whole(value: Any, name: str, meaning: str) -> None:
    if not isinstance(value, (int, np.integer)):
        raise InvalidArgument(f"{name} must hold whole numbers ({meaning}); got {value!r}.")


# --- specs whose rows are lists: a batch (ESS, diagnostics), a problem (Kimi), a trajectory ----
