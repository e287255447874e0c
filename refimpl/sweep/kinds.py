"""Cell kinds: what a cell runs.

A kind is a top-level (picklable) function ``(params: dict, seed: int) -> dict[str, float]``. It gets
the cell's parameters (the grid's fixed parameters plus the cell's axis values) and the cell's seed,
and returns named metrics. It validates its parameters and raises ``ValueError``/``TypeError`` for
bad ones; the sweep records the message in the cell's ``error`` column and carries on.

Built-in kinds live in :data:`KINDS`. Your own kind is named in the grid as ``"module:function"``; the
module must be importable where the cells run (every Dask worker, for a cluster).
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

__all__ = ["KINDS", "busy", "execute_cell", "resolve_kind"]

KindFunction = Callable[[dict[str, Any], int], Mapping[str, float]]

_BUSY_CHUNK = 65_536


def busy(params: dict[str, Any], seed: int) -> dict[str, float]:
    r"""A CPU-bound reference cell: the sample mean and mean square of standard normal draws.

    .. math::

        \bar X = \frac1D \sum_{i=1}^{D} X_i, \qquad \overline{X^2} = \frac1D \sum_{i=1}^{D} X_i^2,
        \qquad X_i \sim \mathcal N(0, 1) \text{ i.i.d. from } \texttt{default\_rng(seed)}.

    It exists to exercise and benchmark the sweep engines (its cost is proportional to ``draws``)
    and to check a cluster set-up: its metrics depend on the seed only, so any engine must give the
    same numbers.

    Parameters
    ----------
    params : dict
        ``draws`` (int, ``>= 1``): the number of draws ``D``. Other keys are ignored.
    seed : int
        The cell's seed.

    Returns
    -------
    dict
        ``mean`` (:math:`\bar X`, expectation 0) and ``mean_square`` (:math:`\overline{X^2}`,
        expectation 1).

    Raises
    ------
    ValueError, TypeError
        ``draws`` missing, not an integer, or ``< 1``.

    Examples
    --------
    >>> m = busy({"draws": 10_000}, 42)
    >>> m == busy({"draws": 10_000}, 42), sorted(m)
    (True, ['mean', 'mean_square'])
    >>> abs(m["mean"]) < 0.05 and abs(m["mean_square"] - 1) < 0.05
    True
    """
    from refimpl._validation import as_int

    if "draws" not in params:
        raise ValueError("busy needs the parameter draws (number of normal draws); add draws = N.")
    draws = as_int(params["draws"], name="draws", minimum=1, meaning="number of normal draws")
    rng = np.random.default_rng(seed)
    total = 0.0
    total_sq = 0.0
    left = draws
    while left > 0:
        x = rng.standard_normal(min(left, _BUSY_CHUNK))
        total += float(x.sum())
        total_sq += float(np.square(x).sum())  # not np.dot: BLAS threads would oversubscribe
        left -= x.size
    return {"mean": total / draws, "mean_square": total_sq / draws}


#: The built-in cell kinds, by the name a grid's ``sweep.kind`` uses.
KINDS: dict[str, KindFunction] = {
    "busy": busy,
}


def resolve_kind(kind: str) -> KindFunction:
    """The function of a kind: a name in :data:`KINDS`, or ``"module:function"``.

    Raises
    ------
    ValueError
        Unknown name; ``ImportError``/``AttributeError`` when ``module:function`` does not resolve;
        ``TypeError`` when it is not callable.

    Examples
    --------
    >>> resolve_kind("busy") is busy
    True
    >>> resolve_kind("refimpl.sweep.kinds:busy") is busy
    True
    >>> resolve_kind("nope")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: unknown cell kind 'nope'; built-in kinds: busy..., or "module:function" ...
    """
    if kind in KINDS:
        return KINDS[kind]
    if ":" not in kind:
        raise ValueError(
            f"unknown cell kind {kind!r}; built-in kinds: {', '.join(sorted(KINDS))}, or "
            '"module:function" for your own (importable where the cells run).'
        )
    from refimpl.sweep.grid import _import_dotted

    module_name, _, qualname = kind.partition(":")
    if not module_name or not qualname:
        raise ValueError(f'cell kind {kind!r} must read "module:function" with both parts given.')
    try:
        fn = _import_dotted(kind)
    except ImportError as exc:
        raise ImportError(
            f"cell kind {kind!r}: cannot import module {module_name!r} ({exc}). "
            "Install it or put it on PYTHONPATH where the cells run."
        ) from None
    except AttributeError:
        raise AttributeError(
            f"cell kind {kind!r}: module {module_name!r} has no {qualname!r}. Check the name."
        ) from None
    if not callable(fn):
        raise TypeError(f"cell kind {kind!r} is not callable; name a function (params, seed).")
    result: KindFunction = fn
    return result


def _describe(exc: BaseException) -> str:
    """``Type: message (at file:line in function)`` for the innermost frame."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = ""
    if frames:
        last = frames[-1]
        where = f" (at {last.filename.rsplit('/', 1)[-1]}:{last.lineno} in {last.name})"
    return f"{type(exc).__name__}: {exc}{where}"


def _select(out: Any, wanted: tuple[str, ...] | None, kind: str) -> dict[str, float]:
    if not isinstance(out, Mapping):
        raise TypeError(
            f"cell kind {kind!r} returned {type(out).__name__}, not a dict of metrics; "
            "return {name: float}."
        )
    names = list(out) if wanted is None else list(wanted)
    missing = [m for m in names if m not in out]
    if missing:
        raise KeyError(
            f"cell kind {kind!r} returned no metric {missing[0]!r}; it returns "
            f"{', '.join(map(str, out)) or 'nothing'}. Fix sweep.metrics."
        )
    metrics: dict[str, float] = {}
    for m in names:
        v = out[m]
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise TypeError(
                f"cell kind {kind!r} returned metric {m!r} = {v!r}, not a real number; "
                "metrics are floats."
            )
        metrics[str(m)] = float(v)
    return metrics


def execute_cell(cell: Any) -> dict[str, Any]:
    """Run one cell where it lands (a pool process, a Dask worker) and return its journal record.

    Exceptions of the kind become ``status="error"`` with the message; they never escape.

    Examples
    --------
    >>> from refimpl.sweep import parse_grid, expand
    >>> g = parse_grid({"sweep": {"kind": "busy"}, "axes": {"draws": [100, 0]}})
    >>> ok, bad = (execute_cell(c) for c in expand(g))
    >>> ok["status"], sorted(ok["metrics"])
    ('ok', ['mean', 'mean_square'])
    >>> bad["status"], bad["error"][:30]
    ('error', 'ValueError: draws must be >= 1')
    """
    start = time.perf_counter()
    try:
        fn = resolve_kind(cell.kind)
        metrics = _select(fn(dict(cell.params), cell.seed), cell.metrics, cell.kind)
        status, error = "ok", None
    except Exception as exc:
        metrics, status, error = {}, "error", _describe(exc)
    wall = time.perf_counter() - start
    return {
        "cell_id": cell.cell_id,
        "replicate": cell.replicate,
        "seed": cell.seed,
        "params": dict(cell.axes),
        "status": status,
        "error": error,
        "wall_time_s": wall,
        "metrics": metrics,
    }
