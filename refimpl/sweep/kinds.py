"""Cell kinds: what a cell runs.

A kind is a top-level (picklable) function ``(params: dict, seed: int) -> dict[str, float]``. It gets
the cell's parameters (the grid's fixed parameters plus the cell's axis values) and the cell's seed,
and returns named metrics. It validates its parameters and raises ``ValueError``/``TypeError`` for
bad ones; the sweep records the message in the cell's ``error`` column and carries on.

A built-in kind also declares the parameters it takes and the metrics it returns, read from what
it calls (``SimConfig``'s fields, the dispatch functions' signatures and return types, the keys of
the simulator's summary), so that :func:`refimpl.sweep.parse_grid` refuses a typo in a parameter
or metric name before any cell runs. A kind of your own declares nothing and is not checked.

Built-in kinds live in :data:`KINDS`. Your own kind is named in the grid as ``"module:function"``; the
module must be importable where the cells run (every Dask worker, for a cluster).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np
import scipy.stats

import refimpl
from refimpl import dispatch
from refimpl._imports import import_object
from refimpl._validation import as_int, wrong_type
from refimpl.errors import InvalidArgument
from refimpl.sim import SimConfig
from refimpl.sim import simulate as run_simulation

__all__ = [
    "CLOSED_FORMS",
    "KINDS",
    "busy",
    "closed_form",
    "resolve_kind",
    "simulate",
]

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
    draws = _busy_draws(params)
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


def _busy_draws(params: Mapping[str, Any]) -> int:
    if "draws" not in params:
        raise InvalidArgument(
            "busy needs the parameter draws (number of normal draws); got the parameters "
            f"{sorted(params)}. Add draws = N."
        )
    return as_int(params["draws"], name="draws", minimum=1, meaning="number of normal draws")


# --- length laws in a grid ------------------------------------------------------------------


def _law_family(name: Any) -> tuple[Any, list[str]]:
    """The ``scipy.stats`` family named ``name`` and the arguments it takes (shapes, loc, scale)."""
    if not isinstance(name, str):
        raise wrong_type(
            "law", "the name of a scipy.stats distribution", name, 'Pass e.g. law = "lognorm".'
        )
    family = getattr(scipy.stats, name, None)
    if not isinstance(family, scipy.stats.rv_continuous):
        raise InvalidArgument(
            f"law={name!r} is not a continuous scipy.stats distribution; use e.g. "
            '"lognorm", "expon", "gamma", "weibull_min", "pareto", "uniform".'
        )
    shapes = [s.strip() for s in (family.shapes or "").split(",") if s.strip()]
    return family, [*shapes, "loc", "scale"]


def _length_law(params: dict[str, Any]) -> Any:
    """Pop the length-law parameters from ``params`` and build the law (or ``None``).

    ``law = "NAME"`` names a continuous ``scipy.stats`` distribution; its parameters come from the
    table ``law_args`` and from parameters ``law_ARG`` (so that ``law_s`` can be an axis);
    ``pmf = [p1, p2, ...]`` is a pmf over lengths ``1..M`` instead.
    """
    name = params.pop("law", None)
    args = params.pop("law_args", {})
    if not isinstance(args, Mapping):
        raise wrong_type(
            "law_args",
            "a table of the law's parameters",
            args,
            "Pass e.g. law_args = {s = 1.0, scale = 400.0}.",
        )
    args = dict(args)
    for key in [k for k in params if k.startswith("law_")]:
        args[key[4:]] = params.pop(key)
    pmf = params.pop("pmf", None)
    if pmf is not None:
        if name is not None or args:
            raise InvalidArgument(
                "give the length law either as pmf = [...] or as law = NAME (with law_args), "
                "not both."
            )
        return np.asarray(pmf, dtype=np.float64)
    if name is None:
        if args:
            raise InvalidArgument(
                f"law parameters {sorted(args)} were given without law = NAME; add e.g. "
                'law = "lognorm".'
            )
        return None
    family, allowed = _law_family(name)
    unknown = [a for a in args if a not in allowed]
    if unknown:
        raise InvalidArgument(
            f"law={name!r} has no parameter {unknown[0]!r}; it takes {', '.join(allowed)} "
            f"(give them as law_args = {{...}} or law_NAME)."
        )
    missing = [a for a in allowed[:-2] if a not in args]  # the shapes (not loc, scale)
    if missing:
        raise InvalidArgument(
            f"law={name!r} needs its shape parameter {missing[0]!r}; add law_{missing[0]} = VALUE."
        )
    return family(**args)


def _flatten(name: str, result: Any) -> dict[str, float]:
    """Metrics of a result: a NamedTuple's fields, a scalar under ``name``, an array as name_1..."""
    if isinstance(result, tuple) and hasattr(result, "_fields"):
        return {f: float(getattr(result, f)) for f in result._fields}
    arr = np.asarray(result, dtype=np.float64)
    if arr.ndim == 0:
        return {name: float(arr)}
    return {f"{name}_{i + 1}": float(x) for i, x in enumerate(arr.ravel())}


def _reject_unknown(kind: str, params: Mapping[str, Any], allowed: Any) -> None:
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise InvalidArgument(
            f"{kind} takes no parameter {unknown[0]!r}; it takes {', '.join(sorted(allowed))}. "
            "Remove it from [fixed] or [axes]."
        )


#: How each closed_form function takes its length law (its keywords come from its signature).
_FIRST_ARGUMENT = {
    "length_bias": "law or pmf",
    "selected_mean": "law",
    "selected_pmf": "pmf",
    "expected_max": "law",
    "async_speedup": "law",
    "fluid_steady_state": "law",
}


def _keywords(function: Callable[..., Any]) -> tuple[str, ...]:
    """The keyword-only parameters of ``function``, read from its signature."""
    parameters = inspect.signature(function).parameters.values()
    return tuple(p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY)


def _required_keywords(name: str) -> frozenset[str]:
    """The keyword-only parameters of ``refimpl.dispatch.NAME`` without a default."""
    parameters = inspect.signature(getattr(dispatch, name)).parameters.values()
    return frozenset(
        p.name
        for p in parameters
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is inspect.Parameter.empty
    )


def _closed_forms() -> dict[str, tuple[str, tuple[str, ...]]]:
    return {
        name: (first, _keywords(getattr(dispatch, name))) for name, first in _FIRST_ARGUMENT.items()
    }


#: closed_form's functions: what their first argument is, and their keyword parameters (read
#: from the function's signature, so they cannot drift from it).
CLOSED_FORMS: dict[str, tuple[str, tuple[str, ...]]] = _closed_forms()


def closed_form(params: dict[str, Any], seed: int) -> dict[str, float]:
    r"""A closed-form computation of :mod:`refimpl.dispatch`, called with the cell's parameters.

    .. math::

        \text{metrics} = \texttt{refimpl.FUNCTION}(\text{law}, **\text{params})

    The function is one of :data:`CLOSED_FORMS`: ``length_bias``, ``selected_mean``,
    ``selected_pmf``, ``expected_max``, ``async_speedup``, ``fluid_steady_state``. The result
    becomes the metrics: a NamedTuple's fields (``length_bias`` gives ``true_mean``,
    ``selected_mean``, ``ratio``, ``total_variation``, ``kl_divergence``), a number under the
    function's name, an array as ``NAME_1, NAME_2, ...`` (per length).

    Parameters
    ----------
    params : dict
        ``function`` (the name); the length law as ``law = "NAME"`` (a continuous
        ``scipy.stats`` distribution) with its parameters in ``law_args = {...}`` or as ``law_ARG``
        (so ``law_s`` can be an axis), or as ``pmf = [p1, ..., pM]``; then the function's keyword
        parameters (``n``, ``k``; or ``slots``, ``batch``, ``eta``).
    seed : int
        Not used: closed forms are deterministic (replicates give identical rows).

    Returns
    -------
    dict
        The metrics.

    Raises
    ------
    ValueError, TypeError
        An unknown function or parameter, a missing or malformed law, and whatever the function
        raises for its arguments (its message says how to fix them).

    Notes
    -----
    This kind only wires a grid to :mod:`refimpl.dispatch`; the formulas and their proofs live
    there.

    Examples
    --------
    >>> m = closed_form({"function": "length_bias", "law": "expon", "n": 2, "k": 1}, 0)
    >>> round(m["ratio"], 10)
    0.5
    >>> closed_form({"function": "length_bias", "pmf": [0.5, 0.5], "n": 2, "k": 1}, 0)["selected_mean"]
    1.25
    """
    name, law, arguments = _closed_form_arguments(params)
    result = getattr(refimpl, name)(law, **arguments)
    return _flatten(name, result)


def _closed_form_arguments(params: Mapping[str, Any]) -> tuple[str, Any, dict[str, Any]]:
    """closed_form's function name, length law and keyword arguments, checked; nothing computed."""
    params = dict(params)
    name = params.pop("function", None)
    if name is None:
        raise InvalidArgument(
            f"closed_form needs function = NAME, one of {', '.join(CLOSED_FORMS)}; add it to "
            "[fixed]."
        )
    if name not in CLOSED_FORMS:
        raise InvalidArgument(
            f"closed_form has no function {name!r}; it offers {', '.join(CLOSED_FORMS)}."
        )
    first, keywords = CLOSED_FORMS[name]
    law = _length_law(params)
    _reject_unknown(f"closed_form function {name!r}", params, keywords)
    is_pmf = isinstance(law, np.ndarray)
    if law is None or (first == "law" and is_pmf) or (first == "pmf" and not is_pmf):
        how = {
            "law": 'law = "NAME" (a scipy.stats distribution)',
            "pmf": "pmf = [p1, ..., pM]",
            "law or pmf": 'law = "NAME" or pmf = [p1, ..., pM]',
        }[first]
        raise InvalidArgument(f"closed_form function {name!r} needs its length law as {how}.")
    return name, law, params


def simulate(params: dict[str, Any], seed: int) -> dict[str, float]:
    r"""One run of the rollout-queue simulator (:func:`refimpl.sim.simulate`) and its summary.

    .. math::

        \text{metrics} = \texttt{simulate}(\texttt{SimConfig}(**\text{params},
        \ \text{seed}=\text{cell seed})).\texttt{summary()}

    Parameters
    ----------
    params : dict
        The fields of :class:`refimpl.sim.SimConfig` (``slots``, ``batch``, ``rollouts`` or
        ``steps``, ``mode``, ``eta``, ``over_bound``, ``partial``, ...), except ``seed`` (the
        sweep's) and ``slowdown``; the lengths as ``law = "NAME"`` with ``law_args``/``law_ARG``
        (a continuous ``scipy.stats`` law), or ``pmf = [...]``, or neither (the lognormal of
        ``lognormal_mu`` and ``lognormal_sigma``, drawn as the SimPy peer draws it).
    seed : int
        The cell's seed, the run's ``SimConfig.seed``.

    Returns
    -------
    dict
        The numbers of ``SimSummary.to_json_dict()`` (the keys of ``refimpl simulate --json``):
        ``throughput``, ``staleness_mean``, ``length_mean``, ``length_ratio``, ``length_tv``,
        ``dropped``, ...; a table of numbers, if any, flattened as ``KEY_SUB``; histograms left
        out.

    Raises
    ------
    ValueError, TypeError
        A ``seed`` parameter, an unknown parameter, a malformed law, and whatever ``SimConfig``
        rejects (its message names the field and the fix).

    Examples
    --------
    >>> m = simulate({"slots": 4, "batch": 8, "rollouts": 64}, 1)
    >>> m["trained_rollouts"], m == simulate({"slots": 4, "batch": 8, "rollouts": 64}, 1)
    (64.0, True)
    """
    summary = run_simulation(_simulate_config(params, seed)).summary().to_json_dict()
    metrics: dict[str, float] = {}
    for key, value in summary.items():
        parts = value.items() if isinstance(value, Mapping) else [("", value)]
        for sub, x in parts:  # a table of numbers becomes KEY_SUB; lists (histograms) are left out
            if isinstance(x, (int, float)) and not isinstance(x, bool):
                metrics[f"{key}_{sub}" if sub else key] = float(x)
    return metrics


def _simulate_config(params: Mapping[str, Any], seed: int) -> Any:
    """The ``SimConfig`` of a simulate cell (validated by its constructor); nothing is run."""
    params = dict(params)
    if "seed" in params:
        raise InvalidArgument(
            "simulate takes its seed from the sweep (one per cell); remove the seed parameter "
            "and set sweep.seed for the root of all seeds."
        )
    lengths = _length_law(params)
    _reject_unknown("simulate", params, _simulate_parameters())
    return SimConfig(**params, lengths=lengths, seed=seed)


def check_parameters(kind: str, params: Mapping[str, Any]) -> None:
    """Check a cell's parameters as the built-in ``kind`` will, without running it.

    ``busy`` checks ``draws`` when it is given (the grid tests of the engines use busy with other
    parameters; without ``draws`` its cells fail when they run); ``simulate`` builds the cell's ``SimConfig``; ``closed_form``
    checks the function, the length law and the parameter names (the function's numeric arguments
    are checked by the function itself, when the cell runs). A kind of your own
    (``"module:function"``) is not checked.

    Raises
    ------
    ValueError, TypeError
        What the cell would fail with, naming the parameter, the rule and the fix.

    Examples
    --------
    >>> check_parameters("simulate", {"slots": 4, "batch": 8, "rollouts": 64})
    >>> check_parameters("simulate", {"slots": -1, "batch": 8, "rollouts": 64})
    Traceback (most recent call last):
    ...
    refimpl.errors.InvalidArgument: slots must be >= 1 (generation slots); got slots=-1. Pass slots >= 1.
    """
    if kind == "busy":
        if "draws" in params:
            _busy_draws(params)
    elif kind == "simulate":
        _simulate_config(params, 0)
    elif kind == "closed_form":
        _closed_form_arguments(params)


def _simulate_required() -> frozenset[str]:
    """The fields of ``SimConfig`` without a default."""
    return frozenset(
        f.name
        for f in dataclasses.fields(SimConfig)
        if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )


def _simulate_parameters() -> frozenset[str]:
    """The fields of ``SimConfig`` a grid may set (not the seed, the lengths or ``slowdown``)."""
    fields = {f.name for f in dataclasses.fields(SimConfig) if f.init}
    return frozenset(fields - {"seed", "slowdown", "lengths"})


# --- what the built-in kinds take and return, checked by parse_grid before any cell runs -------


class _Signature(NamedTuple):
    """What a built-in kind takes and returns, for given values of its selecting parameters."""

    parameters: frozenset[str] | None  # None: any (the kind ignores the others)
    metrics: tuple[str, ...]
    required: frozenset[str] = frozenset()


class _ParameterError(InvalidArgument):
    """A parameter (``key``) that makes every cell of the kind fail."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


#: Parameters whose value changes what a built-in kind takes or returns; an axis of one of them
#: is checked value by value.
_SELECTORS = ("function", "law")

_LAW_KEYS = frozenset({"law", "law_args", "pmf"})


def _law_parameters(params: Mapping[str, Any]) -> frozenset[str]:
    """The length-law parameters a cell may have: ``law_ARG`` only for the arguments of ``law``."""
    if "law" in params and "pmf" in params:
        raise _ParameterError(
            "pmf", "give the length law either as pmf = [...] or as law = NAME, not both."
        )
    if "law" not in params:
        return _LAW_KEYS
    try:
        _, allowed = _law_family(params["law"])
    except (TypeError, ValueError) as exc:
        raise _ParameterError("law", str(exc)) from None
    args = params.get("law_args", {})
    if isinstance(args, Mapping):
        for a in args:
            if a not in allowed:
                raise _ParameterError(
                    "law_args",
                    f"law={params['law']!r} has no parameter {a!r}; it takes "
                    f"{', '.join(allowed)}. Fix law_args.",
                )
    return _LAW_KEYS | {f"law_{a}" for a in allowed}


@functools.cache
def _busy_metrics() -> tuple[str, ...]:
    return tuple(busy({"draws": 1}, 0))  # what busy returns, read from a one-draw call


@functools.cache
def _simulate_metrics() -> tuple[str, ...]:
    # the flattened keys of SimSummary.to_json_dict, read from a one-rollout run (they do not
    # depend on the configuration)
    return tuple(simulate({"slots": 1, "batch": 1, "rollouts": 1}, 0))


def _closed_form_metrics(name: str, params: Mapping[str, Any]) -> tuple[str, ...]:
    """The metrics of closed_form for ``function = name``, from the function's return type."""
    returns = typing.get_type_hints(getattr(dispatch, name))["return"]
    if isinstance(returns, type) and issubclass(returns, tuple) and hasattr(returns, "_fields"):
        return tuple(returns._fields)
    if returns is float:
        return (name,)
    pmf = params.get("pmf")  # an array, one metric per length: NAME_1..NAME_M
    size = len(pmf) if isinstance(pmf, list) else 0
    return tuple(f"{name}_{i + 1}" for i in range(size))


def _signature(kind: str, params: Mapping[str, Any]) -> _Signature | None:
    """What built-in ``kind`` takes and returns for these parameters (``None``: not declared).

    Only the values of :data:`_SELECTORS` matter; every other parameter counts by its name.
    Raises :class:`_ParameterError` for a parameter that makes every cell fail.

    Examples
    --------
    >>> sorted(_signature("busy", {}).metrics), _signature("busy", {}).parameters is None
    (['mean', 'mean_square'], True)
    >>> sig = _signature("closed_form", {"function": "expected_max", "law": "expon"})
    >>> sig.metrics, sorted(sig.parameters - _LAW_KEYS)
    (('expected_max',), ['function', 'law_loc', 'law_scale', 'n'])
    >>> _signature("mylab.cells:noisy_mean", {}) is None
    True
    """
    if kind == "busy":
        return _Signature(None, _busy_metrics())
    if "seed" in params and kind in KINDS:
        raise _ParameterError(
            "seed",
            "the seed of every cell comes from the sweep; remove the seed parameter and set "
            "sweep.seed for the root of all seeds.",
        )
    if kind == "simulate":
        parameters = _simulate_parameters() | _law_parameters(params)
        return _Signature(parameters, _simulate_metrics(), _simulate_required())
    if kind == "closed_form":
        name = params.get("function")
        if name is None:
            raise _ParameterError(
                "function",
                f"closed_form needs function = NAME, one of {', '.join(CLOSED_FORMS)}; add it "
                "to [fixed].",
            )
        if not isinstance(name, str) or name not in CLOSED_FORMS:
            raise _ParameterError(
                "function",
                f"closed_form has no function {name!r}; it offers {', '.join(CLOSED_FORMS)}.",
            )
        first, keywords = CLOSED_FORMS[name]
        has_law, has_pmf = "law" in params, "pmf" in params
        if (
            (first == "law" and not has_law)
            or (first == "pmf" and not has_pmf)
            or not (has_law or has_pmf)
        ):
            how = {
                "law": 'law = "NAME" (a scipy.stats distribution)',
                "pmf": "pmf = [p1, ..., pM]",
                "law or pmf": 'law = "NAME" or pmf = [p1, ..., pM]',
            }[first]
            key = "pmf" if first == "pmf" else "law"
            raise _ParameterError(
                key, f"closed_form function {name!r} needs its length law as {how}."
            )
        parameters = frozenset({"function", *keywords}) | _law_parameters(params)
        return _Signature(parameters, _closed_form_metrics(name, params), _required_keywords(name))
    return None


#: The built-in cell kinds, by the name a grid's ``sweep.kind`` uses.
KINDS: dict[str, KindFunction] = {
    "busy": busy,
    "closed_form": closed_form,
    "simulate": simulate,
}


def resolve_kind(kind: str) -> KindFunction:
    """The function of a kind: a name in :data:`KINDS`, or ``"module:function"``.

    Raises
    ------
    refimpl.errors.InvalidArgument
        Unknown name, or a ``module:function`` that does not resolve (the module cannot be
        imported, fails while it is imported, or has no such function).
    refimpl.errors.InvalidArgumentType
        When it names something that is not callable.

    Examples
    --------
    >>> resolve_kind("busy") is busy
    True
    >>> resolve_kind("refimpl.sweep.kinds:busy") is busy
    True
    >>> resolve_kind("nope")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    refimpl.errors.InvalidArgument: unknown cell kind 'nope'; built-in kinds: busy..., or "module:function" ...
    """
    if kind in KINDS:
        return KINDS[kind]
    if ":" not in kind:
        raise InvalidArgument(
            f"unknown cell kind {kind!r}; built-in kinds: {', '.join(sorted(KINDS))}, or "
            '"module:function" for your own (importable where the cells run); got '
            f"kind={kind!r}."
        )
    fn = import_object(kind, what="cell kind")
    result: KindFunction = fn
    return result
