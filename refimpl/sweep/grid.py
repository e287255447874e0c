"""Grid files: parsing, validation, expansion into cells, and deterministic per-cell seeds.

A grid is a TOML file with three tables::

    [sweep]                       # required
    kind = "busy"                 # what each cell runs: a built-in kind or "module:function"
    replicates = 3                # cells per parameter point (replicate index 0..replicates-1)
    seed = 0                      # root of every cell's seed
    metrics = ["mean"]            # which metrics to keep (default: all the kind returns)
    name = "demo"                 # a label (not part of any seed)

    [fixed]                       # parameters passed unchanged to every cell
    draws = 1000

    [axes]                        # the parameter axes: lists or ranges
    eta = [0, 1, 2]
    scale = {start = 0.5, stop = 2.0, num = 4}            # 4 evenly spaced values, both ends included
    n = {start = 8, stop = 64, num = 4, log = true}       # 4 log-spaced values
    k = {start = 1, stop = 7, step = 2}                   # 1, 3, 5, 7 (stop included when reached)

The cells are the Cartesian product of the axes (in file order, the last axis fastest) times the
replicates (fastest of all). Every error names the key path (``axes.eta[2]``) and what is allowed.
For a built-in kind, parameters it does not take and metrics it does not return are grid errors
too (each kind declares them); a kind given as ``"module:function"`` is not checked for them.
"""

from __future__ import annotations

import datetime
import difflib
import hashlib
import itertools
import json
import math
import os
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from refimpl.errors import InvalidArgument
from refimpl.sweep.cells import resolve_kind_guarded
from refimpl.sweep.kinds import (
    _SELECTORS,
    KINDS,
    _ParameterError,
    _signature,
    check_parameters,
)

__all__ = ["Cell", "Grid", "GridError", "expand", "load_grid", "parse_grid"]

#: Columns every results table has; axis and metric names may not use them.
RESERVED_COLUMNS = ("cell_id", "replicate", "seed", "status", "error", "wall_time_s")

_SWEEP_KEYS = ("kind", "replicates", "seed", "metrics", "name")
_TOP_KEYS = ("sweep", "fixed", "axes")
_RANGE_KEYS = ("start", "stop", "step", "num", "log")
_MAX_AXIS_VALUES = 1_000_000
_MAX_CELLS = 10_000_000
#: Values of one axis checked one by one before a run (see ``_checked_indices``).
_MAX_CHECKED_VALUES = 10_000
#: Levels of arrays and tables a fixed parameter may nest.
_MAX_DEPTH = 32
#: Parameter points of a built-in kind checked one by one before a run; beyond, each axis value
#: is checked with the other axes at their first value.
_MAX_CHECKED_POINTS = 100_000
#: Version of the seed derivation; bumping it changes every seed (a changelog entry).
_SEED_SCHEME = 1

Scalar = int | float | str | bool


class GridError(InvalidArgument):
    """A grid file or grid table that cannot be run.

    The message names the key path (``path``, e.g. ``axes.eta[2]``), the rule and the fix.

    Examples
    --------
    >>> from refimpl.sweep import parse_grid
    >>> parse_grid({"sweep": {"kind": "busy"}, "axes": {"eta": []}})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    refimpl.sweep.grid.GridError: axes.eta must be a non-empty list of values or a range table ...
    """

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


def _fail(path: str, rule: str, value: Any, fix: str) -> GridError:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return GridError(path, f"{path} must {rule}; got {shown}. {fix}")


class Grid(NamedTuple):
    """A validated grid (see :func:`parse_grid`); build it with :func:`load_grid` or :func:`parse_grid`.

    Attributes
    ----------
    kind : str
        The cell kind: a name in :data:`refimpl.sweep.KINDS` or ``"module:function"``.
    fixed : dict
        Parameters passed unchanged to every cell.
    axes : dict of str to tuple
        The expanded values of each axis, in file order.
    replicates : int
        Cells per parameter point (``>= 1``).
    seed : int
        Root of every cell's seed (``>= 0``).
    metrics : tuple of str or None
        The metrics to keep, or ``None`` for all that the kind returns.
    name : str
        A label for the sweep; not part of any seed or cell id.
    """

    kind: str
    fixed: dict[str, Any]
    axes: dict[str, tuple[Scalar, ...]]
    replicates: int
    seed: int
    metrics: tuple[str, ...] | None
    name: str

    @property
    def n_cells(self) -> int:
        """Number of cells: the product of the axis lengths times ``replicates``."""
        return math.prod(len(v) for v in self.axes.values()) * self.replicates

    def canonical(self) -> dict[str, Any]:
        """The grid as a JSON-ready table (axes expanded); its hash is the grid's fingerprint."""
        return {
            "kind": self.kind,
            "fixed": self.fixed,
            "axes": {k: list(v) for k, v in self.axes.items()},
            "replicates": self.replicates,
            "seed": self.seed,
            "metrics": None if self.metrics is None else list(self.metrics),
            "name": self.name,
        }

    @property
    def fingerprint(self) -> str:
        """sha256 of the canonical JSON of :meth:`canonical`: any change to the grid changes it."""
        return hashlib.sha256(_canonical_json(self.canonical()).encode()).hexdigest()


class Cell(NamedTuple):
    """One unit of work: a parameter point and a replicate, with its own seed.

    Attributes
    ----------
    cell_id : str
        20 hex digits of sha256 over the kind, the parameters, the replicate and the grid seed.
    position : int
        Position in grid order (results tables are sorted by it).
    kind : str
        The cell kind (see :attr:`Grid.kind`).
    params : dict
        The parameters the kind receives: the fixed parameters and this cell's axis values.
    axes : dict
        This cell's axis values only (the parameter columns of the results table).
    replicate : int
        Replicate index, ``0 <= replicate < grid.replicates``.
    seed : int
        The cell's seed in ``[0, 2**63)``: a function of the grid seed, the kind, the parameters and
        the replicate, never of the execution order.
    metrics : tuple of str or None
        The metrics to keep.
    """

    cell_id: str
    position: int
    kind: str
    params: dict[str, Any]
    axes: dict[str, Scalar]
    replicate: int
    seed: int
    metrics: tuple[str, ...] | None


def _canonical_json(value: Any) -> str:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    )


def cell_identity(
    *, kind: str, params: Mapping[str, Any], replicate: int, root_seed: int
) -> tuple[str, int]:
    """``(cell_id, seed)`` of a cell: both from sha256 of a canonical JSON of what defines it.

    The seed is drawn from ``numpy.random.SeedSequence`` seeded with the full 256-bit digest, so
    cells that differ in any parameter, the replicate, the kind or the grid seed get unrelated seeds.

    Examples
    --------
    >>> cid, seed = cell_identity(kind="busy", params={"draws": 10}, replicate=0, root_seed=0)
    >>> len(cid), 0 <= seed < 2**63
    (20, True)
    >>> cell_identity(kind="busy", params={"draws": 10}, replicate=0, root_seed=0) == (cid, seed)
    True
    """
    payload = {
        "scheme": _SEED_SCHEME,
        "kind": kind,
        "params": dict(params),
        "replicate": replicate,
        "root_seed": root_seed,
    }
    digest = hashlib.sha256(_canonical_json(payload).encode()).digest()
    state = np.random.SeedSequence(int.from_bytes(digest, "big")).generate_state(1, np.uint64)
    seed = int(state[0]) >> 1  # 63 bits: fits a signed int64 column
    return digest.hex()[:20], seed


# --- parsing ---------------------------------------------------------------------------------


def load_grid(path: str | os.PathLike[str]) -> Grid:
    """Read and validate a grid file (TOML).

    Parameters
    ----------
    path : str or path-like
        The grid file.

    Returns
    -------
    Grid
        The validated grid.

    Raises
    ------
    GridError
        The file is not valid TOML, or a key is missing, unknown or out of range; the message starts
        with the file name and names the key path.
    FileNotFoundError
        No such file.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "g.toml"
    >>> _ = f.write_text('[sweep]\\nkind = "busy"\\nreplicates = 2\\n[axes]\\ndraws = [10, 20]\\n')
    >>> load_grid(f).n_cells
    4
    """
    p = Path(path)
    if p.is_dir():
        raise GridError("", f"{p} is a directory, not a grid file. Pass the path of a TOML file.")
    with p.open("rb") as fh:
        data = fh.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GridError(
            "",
            f"{p} is not a TOML text file (byte {exc.start} is not UTF-8). Pass a grid file "
            "written as UTF-8 text (see docs/howto/sweeps.md).",
        ) from None
    if "\x00" in text:
        raise GridError(
            "",
            f"{p} is not a TOML text file (it holds NUL bytes). Pass a grid file written as "
            "UTF-8 text (see docs/howto/sweeps.md).",
        )
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise GridError("", f"{p}: not valid TOML: {exc}. Fix the syntax at that line.") from None
    except RecursionError:  # the parser recurses once per level of nested arrays or tables
        raise GridError(
            "",
            f"{p}: arrays or inline tables nested too deep to parse (about a thousand levels). "
            f"Parameters nest a few levels at most: flatten them.",
        ) from None
    try:
        return parse_grid(table)
    except GridError as exc:
        raise GridError(exc.path, f"{p}: {exc}") from None


def parse_grid(table: Mapping[str, Any]) -> Grid:
    """Validate a grid given as a table (a parsed TOML file) and expand its ranges.

    Parameters
    ----------
    table : mapping
        With a required ``sweep`` table (``kind``; optional ``replicates``, ``seed``, ``metrics``,
        ``name``), and optional ``fixed`` and ``axes`` tables; see :mod:`refimpl.sweep.grid`.

    Returns
    -------
    Grid
        The validated grid; axes expanded to tuples of values.

    Raises
    ------
    GridError
        With the key path and what is allowed: unknown keys, missing ``sweep.kind``, an unknown
        kind, empty or mixed-type axes, non-finite numbers, bad ranges, a parameter both fixed and
        an axis, names clashing with the results columns; and, for a built-in kind, a parameter it
        does not take or needs (``fixed.slotz``, ``axes.kk``, ``fixed.k``), a ``function`` or
        ``law`` it does not know, or a metric it does not return (``sweep.metrics[3]``), so that no
        cell runs only to fail. Kinds given as ``"module:function"`` declare nothing and are not
        checked for these.

    Examples
    --------
    >>> g = parse_grid({"sweep": {"kind": "busy", "seed": 7},
    ...                 "axes": {"draws": {"start": 10, "stop": 30, "step": 10}}})
    >>> g.axes
    {'draws': (10, 20, 30)}
    >>> parse_grid({"sweep": {"kind": "busy"}, "axes": {"x": [1, "a"]}})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    refimpl.sweep.grid.GridError: axes.x[1] must have the type of axes.x[0] (int); got ...
    >>> parse_grid({"sweep": {"kind": "simulate"}, "fixed": {"slotz": 4}})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    refimpl.sweep.grid.GridError: fixed.slotz is not a parameter of kind 'simulate'; it takes ... Did you mean 'slots'?
    """
    if not isinstance(table, Mapping):
        raise _fail("(grid)", "be a table", table, "Pass the parsed TOML file (a dict).")
    _no_unknown_keys(table, _TOP_KEYS, "")
    if "sweep" not in table:
        raise GridError(
            "sweep",
            "sweep is missing: a grid needs a [sweep] table with at least kind = "
            '"NAME". Add it (see docs/howto/sweeps.md).',
        )
    sweep = _table(table["sweep"], "sweep")
    _no_unknown_keys(sweep, _SWEEP_KEYS, "sweep")
    kind = _kind(sweep)
    replicates = _int(sweep.get("replicates", 1), "sweep.replicates", 1, "cells per point")
    seed = _int(sweep.get("seed", 0), "sweep.seed", 0, "the root of every cell's seed")
    if seed >= 2**63:
        raise _fail("sweep.seed", "be < 2**63", seed, "Pass a smaller seed.")
    name = sweep.get("name", "")
    if not isinstance(name, str):
        raise _fail("sweep.name", "be a string", name, 'Write name = "my-sweep".')
    metrics = _metrics(sweep.get("metrics"))
    fixed = _table(table.get("fixed", {}), "fixed")
    for key, value in fixed.items():
        _plain_value(value, f"fixed.{key}")
    axes_table = _table(table.get("axes", {}), "axes")
    axes: dict[str, tuple[Scalar, ...]] = {}
    for key, spec in axes_table.items():
        path = f"axes.{key}"
        if key in fixed:
            raise GridError(
                path,
                f"{path} is also fixed.{key}: a parameter is either fixed or an axis. "
                "Remove one of them.",
            )
        if key in RESERVED_COLUMNS:
            raise GridError(
                path,
                f"{path} is a reserved column name ({', '.join(RESERVED_COLUMNS)}). "
                "Rename the parameter.",
            )
        axes[key] = _axis(spec, path)
    if metrics is not None:
        for i, m in enumerate(metrics):
            if m in RESERVED_COLUMNS or m in axes:
                raise GridError(
                    f"sweep.metrics[{i}]",
                    f"sweep.metrics[{i}] = {m!r} clashes with a column of the results table "
                    f"(reserved: {', '.join(RESERVED_COLUMNS)}; axes: {', '.join(axes) or 'none'}). "
                    "A metric cannot share a name with a parameter.",
                )
    _check_against_kind(kind, fixed, axes, metrics)
    grid = Grid(kind, dict(fixed), axes, replicates, seed, metrics, name)
    if grid.n_cells > _MAX_CELLS:
        raise GridError(
            "axes",
            f"axes and sweep.replicates give {grid.n_cells} cells, more than {_MAX_CELLS}. "
            "Split the sweep into several grids.",
        )
    _check_cells(grid)
    return grid


def _check_cells(grid: Grid) -> None:
    """Refuse a cell of a built-in kind whose parameters its kind rejects, before any cell runs.

    Each axis value is checked with the other axes at their first value, so that the message names
    the value to fix (``axes.slots[1] = -1: slots must be >= 1 ...``; for an axis of more than
    :data:`_MAX_CHECKED_VALUES` values, its first and last values); then every parameter point,
    when there are at most :data:`_MAX_CHECKED_POINTS` of them, for rules between parameters.
    """
    if grid.kind not in KINDS:
        return

    def problem(params: Mapping[str, Any]) -> str | None:
        try:
            check_parameters(grid.kind, params)
        except (ValueError, TypeError) as exc:
            return str(exc)
        return None

    base = {**grid.fixed, **{k: values[0] for k, values in grid.axes.items()}}
    first = problem(base)
    if first is not None:
        # The fixed parameters or a first axis value: our messages start with the parameter name.
        key = first.split(" ", 1)[0]
        if key in grid.axes:
            path = f"axes.{key}[0]"
            raise GridError(path, f"{path} = {grid.axes[key][0]!r}: {first}")
        path = f"fixed.{key}" if key in grid.fixed else "fixed"
        raise GridError(path, f"{path}: {first}")
    for key, values in grid.axes.items():
        for i in _checked_indices(len(values)):
            value = values[i]
            why = problem({**base, key: value})
            if why is not None:
                path = f"axes.{key}[{i}]"
                raise GridError(path, f"{path} = {value!r}: {why}")
    names = list(grid.axes)
    points = math.prod(len(v) for v in grid.axes.values())
    if len(names) < 2 or points > _MAX_CHECKED_POINTS:
        return
    for point in itertools.product(*grid.axes.values()):
        why = problem({**grid.fixed, **dict(zip(names, point, strict=True))})
        if why is not None:
            shown = ", ".join(f"{k} = {v!r}" for k, v in zip(names, point, strict=True))
            raise GridError("axes", f"axes: the cell with {shown}: {why}")


def _checked_indices(n: int) -> range | itertools.chain[int]:
    """Indices ``1..n-1`` of an axis's values to check one by one (index 0 is the base point).

    An axis of more than :data:`_MAX_CHECKED_VALUES` values is checked at its first and last
    ``_MAX_CHECKED_VALUES // 2`` values: the ends of a range, where a monotone rule (``>= 1``)
    fails first. This keeps the start of a sweep of millions of cells within about a second; a
    bad value in between fails its own cells, each with the message.
    """
    if n <= _MAX_CHECKED_VALUES:
        return range(1, n)
    half = _MAX_CHECKED_VALUES // 2
    return itertools.chain(range(1, half), range(n - half, n))


def _check_against_kind(
    kind: str,
    fixed: Mapping[str, Any],
    axes: Mapping[str, tuple[Scalar, ...]],
    metrics: tuple[str, ...] | None,
) -> None:
    """Refuse parameters and metrics that would make every cell of a built-in kind fail.

    A built-in kind declares what it takes and returns (``refimpl.sweep.kinds._signature``); an
    axis of a selecting parameter (``function``, ``law``) is checked value by value. Kinds given as
    ``"module:function"`` declare nothing and are not checked.
    """
    selectors = [k for k in axes if k in _SELECTORS]
    base = {**fixed, **{k: values[0] for k, values in axes.items()}}
    names = [*fixed, *axes]
    for choice in itertools.product(*(range(len(axes[k])) for k in selectors)):
        params = {**base, **{k: axes[k][i] for k, i in zip(selectors, choice, strict=True)}}
        where = "".join(f" with {k} = {params[k]!r}" for k in selectors)
        try:
            signature = _signature(kind, params)
        except _ParameterError as exc:
            key = exc.key
            if key in selectors:
                path = f"axes.{key}[{choice[selectors.index(key)]}]"
            else:
                path = f"axes.{key}" if key in axes else f"fixed.{key}"
            raise GridError(path, f"{path}: {exc}") from None
        if signature is None:
            return
        allowed = signature.parameters
        for key in names:
            if allowed is not None and key not in allowed:
                path = f"fixed.{key}" if key in fixed else f"axes.{key}"
                raise GridError(
                    path,
                    f"{path} is not a parameter of kind {kind!r}{where}; it takes "
                    f"{', '.join(sorted(allowed))}.{_did_you_mean(key, allowed)}",
                )
        for key in sorted(signature.required - set(names)):
            path = f"fixed.{key}"
            raise GridError(
                path,
                f"{path} is missing: kind {kind!r}{where} needs it; add {key} = VALUE to [fixed] "
                "or [axes].",
            )
        for i, m in enumerate(metrics or ()):
            if m not in signature.metrics:
                path = f"sweep.metrics[{i}]"
                returns = ", ".join(signature.metrics) or "no metric"
                raise GridError(
                    path,
                    f"{path} = {m!r} is not a metric of kind {kind!r}{where}; it returns "
                    f"{returns}.{_did_you_mean(m, signature.metrics)}",
                )


def _did_you_mean(name: str, allowed: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(allowed), n=1)
    return f" Did you mean {close[0]!r}?" if close else " Remove or rename it."


def _no_unknown_keys(table: Mapping[str, Any], allowed: tuple[str, ...], prefix: str) -> None:
    for key in table:
        if key not in allowed:
            path = f"{prefix}.{key}" if prefix else str(key)
            where = f"in [{prefix}]" if prefix else "at the top level"
            raise GridError(
                path,
                f"{path} is not a known key; allowed {where}: {', '.join(allowed)}. "
                "Remove or rename it.",
            )


def _table(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(path, "be a table", value, f"Write it as a [{path}] table.")
    return value


def _int(value: Any, path: str, minimum: int, meaning: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(path, f"be an integer ({meaning})", value, "Write a whole number.")
    if value < minimum:
        raise _fail(path, f"be >= {minimum} ({meaning})", value, f"Write a number >= {minimum}.")
    return value


def _kind(sweep: Mapping[str, Any]) -> str:
    if "kind" not in sweep:
        raise GridError(
            "sweep.kind",
            f"sweep.kind is missing: say what each cell runs, one of {', '.join(sorted(KINDS))} "
            'or "module:function".',
        )
    kind = sweep["kind"]
    if not isinstance(kind, str):
        raise _fail("sweep.kind", "be a string", kind, 'Write kind = "NAME".')
    try:
        resolve_kind_guarded(kind)  # a module's sys.exit or flood at import is a grid error
    except (ValueError, TypeError) as exc:
        raise GridError("sweep.kind", f"sweep.kind: {exc}") from None
    return kind


def _metrics(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    path = "sweep.metrics"
    if not isinstance(value, list) or not value:
        raise _fail(
            path, "be a non-empty list of metric names", value, 'Write metrics = ["a", "b"].'
        )
    for i, m in enumerate(value):
        if not isinstance(m, str) or not m:
            raise _fail(f"{path}[{i}]", "be a non-empty string", m, "Write the metric's name.")
    if len(set(value)) != len(value):
        dup = next(m for i, m in enumerate(value) if m in value[:i])
        raise _fail(path, "list each metric once", value, f"Remove the repeated {dup!r}.")
    return tuple(value)


def _plain_value(value: Any, path: str, depth: int = 0) -> None:
    """Fixed parameters: strings, numbers, booleans, arrays and tables of those (JSON-able).

    Nested at most :data:`_MAX_DEPTH` levels: deeper (or a table that contains itself) is refused
    with its key path instead of exhausting the stack.
    """
    if depth > _MAX_DEPTH:
        shown = path if len(path) <= 80 else path[:40] + "..." + path[-30:]
        raise GridError(
            shown,
            f"{shown} is nested more than {_MAX_DEPTH} levels deep (arrays or tables within "
            "each other). Parameters nest a few levels at most: flatten it.",
        )
    if isinstance(value, (datetime.date, datetime.time)):
        raise _fail(
            path,
            "be a string, number, boolean, array or table (TOML dates and times are not supported)",
            value,
            "Write the date as a string.",
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise _fail(path, "be finite", value, "Write a finite number (no nan or inf).")
    _int64(value, path)
    if isinstance(value, list):
        for i, v in enumerate(value):
            _plain_value(v, f"{path}[{i}]", depth + 1)
    elif isinstance(value, Mapping):
        for k, v in value.items():
            _plain_value(v, f"{path}.{k}", depth + 1)


def _int64(value: Any, path: str) -> None:
    """Integers are int64 columns and parameters: refuse one that does not fit."""
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        raise _fail(
            path,
            "fit a 64-bit integer (-2**63 <= value < 2**63)",
            value,
            "Write a smaller integer, or a float (e.g. 1e20) if a float is meant.",
        )


def _type_name(value: Any) -> str:
    return type(value).__name__


def _axis(spec: Any, path: str) -> tuple[Scalar, ...]:
    if isinstance(spec, Mapping):
        return _range(spec, path)
    if not isinstance(spec, list) or not spec:
        raise _fail(
            path,
            "be a non-empty list of values or a range table {start, stop, step} or "
            "{start, stop, num[, log]}",
            spec,
            "Write e.g. [0, 1, 2] or {start = 0, stop = 2, step = 1}.",
        )
    values: list[Scalar] = []
    for i, v in enumerate(spec):
        p = f"{path}[{i}]"
        if isinstance(v, (bool, int, float, str)):
            if isinstance(v, float) and not math.isfinite(v):
                raise _fail(p, "be finite", v, "Write a finite number (no nan or inf).")
            _int64(v, p)
            values.append(v)
        else:
            raise _fail(
                p,
                "be a string, integer, float or boolean (axis values are table columns)",
                v,
                "Move structured values to [fixed], or name them with strings.",
            )
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    if numeric and any(isinstance(v, float) for v in values):
        values = [float(v) for v in values]  # ints and floats mix as floats
    else:
        first = type(values[0])
        for i, v in enumerate(values):
            if type(v) is not first:
                raise _fail(
                    f"{path}[{i}]",
                    f"have the type of {path}[0] ({first.__name__})",
                    v,
                    "An axis holds values of one type (ints and floats may mix).",
                )
    if len(set(values)) != len(values):
        dup = next(v for i, v in enumerate(values) if v in values[:i])
        raise _fail(path, "list each value once", spec, f"Remove the repeated {dup!r}.")
    return tuple(values)


def _range(spec: Mapping[str, Any], path: str) -> tuple[Scalar, ...]:
    _no_unknown_keys(spec, _RANGE_KEYS, path)
    for key in ("start", "stop"):
        if key not in spec:
            raise GridError(
                f"{path}.{key}",
                f"{path}.{key} is missing: a range needs start, stop and one of step or num. "
                "Write e.g. {start = 0, stop = 1, num = 5}.",
            )
        v = spec[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise _fail(f"{path}.{key}", "be a finite number", v, "Write a number.")
    start, stop = spec["start"], spec["stop"]
    if ("step" in spec) == ("num" in spec):
        raise GridError(
            path,
            f"{path} must give exactly one of step (arithmetic, stop included when reached) or "
            "num (that many evenly spaced values). Write e.g. {start = 0, stop = 1, num = 5}.",
        )
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise _fail(f"{path}.log", "be true or false", log, "Write log = true.")
    if "num" in spec:
        num = _int(spec["num"], f"{path}.num", 1, "number of values")
        if num > _MAX_AXIS_VALUES:
            raise _fail(f"{path}.num", f"be <= {_MAX_AXIS_VALUES}", num, "Use fewer values.")
        if log:
            if start <= 0 or stop <= 0:
                bad = "start" if start <= 0 else "stop"
                raise _fail(
                    f"{path}.{bad}",
                    "be > 0 when log = true (log-spaced values)",
                    spec[bad],
                    "Use positive ends, or log = false.",
                )
            arr = np.geomspace(float(start), float(stop), num)
        else:
            arr = np.linspace(float(start), float(stop), num)
        values: list[Scalar] = [float(x) for x in arr]
    else:
        if log:
            raise GridError(
                f"{path}.log",
                f"{path}.log = true needs num, not step (log-spaced values). Replace step by num.",
            )
        step = spec["step"]
        if isinstance(step, bool) or not isinstance(step, (int, float)) or not math.isfinite(step):
            raise _fail(f"{path}.step", "be a finite number", step, "Write a number.")
        if step == 0 or (stop - start) * step < 0:
            raise _fail(
                f"{path}.step",
                f"be non-zero and point from start={start!r} towards stop={stop!r}",
                step,
                "Flip its sign or swap start and stop.",
            )
        exact = all(isinstance(x, int) for x in (start, stop, step))
        if exact:
            count = (stop - start) // step + 1
        else:  # stop counts as reached within rounding: 0.0 to 0.3 by 0.1 gives 4 values
            count = math.floor((stop - start) / step * (1 + 1e-12) + 1e-9) + 1
        if count > _MAX_AXIS_VALUES:
            shown = str(count) if count < 10**12 else f"about {float(count):.3g}"
            raise _fail(
                f"{path}.step",
                f"give at most {_MAX_AXIS_VALUES} values (it gives {shown})",
                step,
                "Use a larger step.",
            )
        if exact:
            values = [start + i * step for i in range(count)]
        else:
            values = [float(start + i * step) for i in range(count)]
    if len(set(values)) != len(values):
        raise _fail(path, "give distinct values", spec, "Widen the range or use fewer values.")
    return tuple(values)


def expand(grid: Grid) -> Iterator[Cell]:
    """The cells of a grid, in grid order (axes in file order, last fastest; replicates fastest).

    Parameters
    ----------
    grid : Grid
        From :func:`load_grid` or :func:`parse_grid`.

    Yields
    ------
    Cell
        With its id, parameters and seed.

    Examples
    --------
    >>> g = parse_grid({"sweep": {"kind": "busy", "replicates": 2}, "axes": {"draws": [1, 2]}})
    >>> [(c.axes["draws"], c.replicate) for c in expand(g)]
    [(1, 0), (1, 1), (2, 0), (2, 1)]
    >>> len({c.seed for c in expand(g)})
    4
    """
    names = list(grid.axes)
    index = 0
    for point in np.ndindex(*(len(grid.axes[n]) for n in names)):
        axis_values = {n: grid.axes[n][i] for n, i in zip(names, point, strict=True)}
        params = {**grid.fixed, **axis_values}
        for r in range(grid.replicates):
            cid, seed = cell_identity(
                kind=grid.kind, params=params, replicate=r, root_seed=grid.seed
            )
            yield Cell(cid, index, grid.kind, params, axis_values, r, seed, grid.metrics)
            index += 1
