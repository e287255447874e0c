"""The second step of a conformance run: the user's arguments, checked and converted once.

:func:`prepare_run` turns the arguments of :func:`~refimpl.testing.check_conformance` into a
:class:`Run`: the candidate resolved (a callable, an import string, or a name that ``setup``
defines), the array bridge, the conventions, the tolerance override, the declared expected
failures, the checks selected, the Hypothesis settings and the explicit examples. Every refusal
happens here, before a check runs.
"""

from __future__ import annotations

import inspect
import math
import textwrap
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
from hypothesis import Phase, settings

from refimpl._imports import import_object, split_reference
from refimpl._io import user_text
from refimpl._validation import invalid, wrong_type
from refimpl.errors import InvalidArgument, InvalidArgumentType
from refimpl.testing._arrays import ArrayBridge
from refimpl.testing._conformance_guard import CandidateMisbehaved, call_candidate, user_interrupts
from refimpl.testing._conformance_runner import _search
from refimpl.testing._engine import Call, Spec
from refimpl.testing.tolerances import Tolerance

__all__ = ["MAX_EXAMPLES", "Run", "prepare_run"]

#: the largest ``max_examples`` accepted: a million draws per check is hours of search already,
#: and a larger number (``10**20``) would never end
MAX_EXAMPLES = 10**6


@dataclass(frozen=True)
class Run:
    """Everything a conformance run needs, checked: what the checks and the report read."""

    spec: Spec
    candidate: Callable[..., Any]
    label: str
    import_line: str
    setup: str | None
    bridge: ArrayBridge
    xp_name: str
    conventions: dict[str, Any]
    given: dict[str, Any]
    override: Tolerance | None
    assume: Callable[[dict[str, Any]], bool] | None
    declared: dict[str, str]
    checks: tuple[str, ...]
    settings: settings
    examples: list[list[Call]]


def prepare_run(
    the_spec: Spec,
    candidate: Callable[..., Any] | str,
    *,
    xp: Any,
    dtype: str | None,
    conventions: Mapping[str, Any] | None,
    setup: str | None,
    rtol: float | None,
    atol: float | None,
    assume: Callable[[dict[str, Any]], bool] | None,
    expected_failures: Mapping[str, str] | Iterable[str] | None,
    max_examples: int,
    checks: Iterable[str] | None,
    derandomize: bool,
    shrink: bool,
    examples: Iterable[Sequence[Call]] | None,
) -> Run:
    """Check and convert the arguments of ``check_conformance`` (same names, same refusals)."""
    if (
        isinstance(max_examples, bool)
        or not isinstance(max_examples, int)
        or not 1 <= max_examples <= MAX_EXAMPLES
    ):
        raise invalid(
            "max_examples",
            f"be an int >= 1 and <= {MAX_EXAMPLES}",
            max_examples,
            "Pass e.g. max_examples=100.",
        )
    if assume is not None and not callable(assume):
        raise wrong_type(
            "assume",
            "a callable (or None)",
            assume,
            "Pass a function of the call's keyword arguments, e.g. "
            "assume=lambda kw: kw['low'] > 0.",
        )
    for name, flag in (("shrink", shrink), ("derandomize", derandomize)):
        if not isinstance(flag, bool):
            raise wrong_type(name, "a bool", flag, f"Pass {name}=True or {name}=False.")
    func, label, import_line = _candidate(candidate, _run_setup(setup))
    bridge = ArrayBridge(xp, dtype)
    resolved = the_spec.resolve(conventions)
    override = _override(rtol, atol)
    declared = _expected(the_spec, expected_failures)
    selected = _selected(the_spec, checks)
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if shrink else [])
    return Run(
        spec=the_spec,
        candidate=func,
        label=label,
        import_line=import_line,
        setup=setup,
        bridge=bridge,
        xp_name=_xp_name(xp),
        conventions=resolved,
        given=dict((conventions or {}).items()),
        override=override,
        assume=assume,
        declared=declared,
        checks=selected,
        settings=_search(max_examples, derandomize=derandomize, phases=phases),
        examples=_explicit(examples, the_spec, resolved, bridge),
    )


def _candidate(
    candidate: Callable[..., Any] | str, namespace: dict[str, Any]
) -> tuple[Callable[..., Any], str, str]:
    """The callable, its label and its import line; a bare name may be one that setup defined."""
    if isinstance(candidate, str) and ":" not in candidate and candidate in namespace:
        return (
            namespace[candidate],
            candidate,
            f"candidate = {candidate}  # defined by the setup above",
        )
    return _resolve(candidate)


def _selected(spec: Spec, checks: Iterable[str] | None) -> tuple[str, ...]:
    """The checks to run, short names, in the order given (default: all of the spec's)."""
    known = [c.name for c in spec.checks]
    if isinstance(checks, (str, bytes)):
        raise wrong_type(
            "checks",
            "a list of check names (a string would be read letter by letter)",
            checks,
            f"Pass a list, e.g. checks=[{checks!r}].",
        )
    if checks is None:
        return tuple(known)
    selected = [str(c).removeprefix(f"{spec.name}.") for c in checks]
    for name in selected:
        if name not in known:
            raise invalid(
                "checks",
                f"name only checks that spec {spec.name!r} has",
                name,
                f"Use one of: {', '.join(known)}.",
            )
    return tuple(dict.fromkeys(selected))  # a name given twice runs once


def _resolve(candidate: Any) -> tuple[Callable[..., Any], str, str]:
    """The callable, its label, and the source line that imports it as ``candidate``."""
    if isinstance(candidate, str):
        module_name, qualname = split_reference(candidate, what="candidate")
        obj = _guarded_import(candidate, module_name)
        return obj, candidate, _import_line(module_name, qualname)
    if not callable(candidate):
        raise InvalidArgumentType(
            f"candidate must be a callable or 'package.module:function'; got {candidate!r} of "
            f"type {type(candidate).__name__}. Pass your function itself."
        )
    home = getattr(candidate, "__module__", None)
    where = getattr(candidate, "__qualname__", None)
    if isinstance(home, str) and isinstance(where, str) and "<" not in where and home != "__main__":
        return candidate, f"{home}:{where}", _import_line(home, where)
    label = repr(candidate)
    line = f"candidate = ...  # your function ({label} cannot be imported by name: define it here)"
    return candidate, label, line


def _guarded_import(candidate: str, module_name: str) -> Any:
    """``import_object(candidate)`` run as a candidate call is: a module that calls ``sys.exit``,
    raises ``GeneratorExit``, its own ``KeyboardInterrupt`` or another ``BaseException``, or
    prints more than a megabyte while it is imported is refused, naming the module and what it
    did (``import_object`` itself refuses an ``Exception`` at import)."""
    with user_interrupts():
        try:
            return call_candidate(
                import_object, (candidate,), {"what": "candidate"}, watch_inputs=False
            )
        except CandidateMisbehaved as exc:
            what = exc.message.removeprefix("the candidate ")
            for advice in (", which would", ": a function must", ". A reference function"):
                what = what.split(advice)[0]  # the advice is for a function, not a module
            raise invalid(
                "candidate",
                "name a module that imports without exiting, interrupting or flooding the output",
                candidate,
                f"Module {module_name!r}, while it was imported, {what}. Remove that from the "
                "module's top level (importing it should only define things), or name another.",
            ) from None


def _import_line(module_name: str, qualname: str) -> str:
    if "." not in qualname:
        return f"from {module_name} import {qualname} as candidate"
    return f"import {module_name}\ncandidate = {module_name}.{qualname}"


def _override(rtol: Any, atol: Any) -> Tolerance | None:
    if rtol is None and atol is None:
        return None
    values = []
    for name, value in (("rtol", rtol), ("atol", atol)):
        if value is None:
            values.append(0.0)
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not (math.isfinite(value) and value >= 0)
        ):
            raise invalid(
                name,
                "be a finite number >= 0 (a tolerance)",
                value,
                f"Pass e.g. {name}=1e-6, or leave it out for the tolerance derived from the dtype.",
            )
        values.append(float(value))
    return Tolerance(rtol=values[0], atol=values[1])


def _xp_name(xp: Any) -> str:
    if xp is None:
        return "numpy"
    if isinstance(xp, ModuleType):
        return xp.__name__
    return str(xp)


def _run_setup(setup: Any) -> dict[str, Any]:
    if setup is None:
        return {}
    if not isinstance(setup, str):
        raise wrong_type(
            "setup", "a string of Python code", setup, "Pass e.g. setup='import mypkg'."
        )
    namespace: dict[str, Any] = {"__name__": "__refimpl_setup__"}
    try:
        code = compile(setup, "<refimpl setup>", "exec")
    except SyntaxError as exc:
        fix = f"Fix its syntax: {exc.msg} (line {exc.lineno} of the setup code)."
        raise invalid("setup", "be Python code", setup, fix) from None
    with user_interrupts():  # user code, guarded as a candidate is
        try:
            call_candidate(exec, (code, namespace), {}, watch_inputs=False)
        except CandidateMisbehaved as exc:
            what = exc.message.removeprefix("the candidate ").split(" (")[0].split(":")[0]
            fix = f"It {what}: remove that from the setup code."
            raise invalid("setup", "run to its end and return", setup, fix) from None
        except Exception as exc:
            fix = f"It raised {type(exc).__name__}: {user_text(exc)}. Fix the setup code."
            raise invalid("setup", "run without an error", setup, fix) from exc
    return namespace


def _explicit(
    examples: Iterable[Sequence[Call]] | None,
    spec: Spec,
    conventions: dict[str, Any],
    bridge: ArrayBridge,
) -> list[list[Call]]:
    """The ``examples=`` of :func:`check_conformance`, validated: lists of ``(args, kwargs)``
    that the reference accepts under the declared conventions, as the candidate receives them
    (its floats rounded to ``bridge``'s dtype). An example the reference refuses (a keyword the
    spec does not take, or a value that is valid in float64 but not once rounded: ``-1e5``
    becomes ``-inf`` in float16) would be skipped by every check: silently unused."""
    if examples is None:
        return []
    fix = "Pass examples=[[((array, ...), {'name': value}), ...], ...]: lists of calls."
    if isinstance(examples, (str, bytes)) or not isinstance(examples, Iterable):
        raise wrong_type("examples", "an iterable of lists of calls", examples, fix)
    out = []
    for example in examples:
        calls = list(example) if isinstance(example, (list, tuple)) else None
        if not calls or not all(
            isinstance(c, tuple)
            and len(c) == 2
            and isinstance(c[0], tuple)
            and isinstance(c[1], Mapping)
            for c in calls
        ):
            raise invalid(
                "examples", "hold non-empty lists of (args tuple, kwargs dict)", example, fix
            )
        given = [(tuple(a), dict(k)) for a, k in calls]
        _reference_accepts(given, spec, conventions, example, bridge)
        out.append(given)
    return out


def _reference_accepts(
    calls: list[Call], spec: Spec, conventions: dict[str, Any], example: Any, bridge: ArrayBridge
) -> None:
    """Refuse an example whose calls the reference refuses as the candidate receives them, with
    the reference's message (and, when only the rounding to the candidate's dtype makes it
    invalid, the argument that the rounding changed)."""
    for i, (args, kwargs) in enumerate(calls):
        where = f"call {i} of it" if len(calls) > 1 else "it"
        try:
            spec.expected((args, kwargs), conventions)
        except (ValueError, TypeError) as exc:
            raise invalid(
                "examples",
                f"hold calls that the reference of spec {spec.name!r} accepts",
                example,
                f"refimpl refuses {where}: {type(exc).__name__}: {exc}. Fix the example's "
                "arguments (their names and values are those of the candidate's signature).",
            ) from None
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")  # the overflow of the cast is the refusal below
            seen = (bridge.seen(args), bridge.seen(kwargs))
        try:
            spec.expected(seen, conventions)
        except (ValueError, TypeError) as exc:
            dtype = bridge.dtype_name
            raise invalid(
                "examples",
                f"hold calls that the reference of spec {spec.name!r} accepts in {dtype}, the "
                "dtype the candidate receives them in",
                example,
                f"{where.capitalize()} is valid in float64, but rounding "
                f"{_rounded(args, kwargs, seen)} to {dtype} makes refimpl refuse it: "
                f"{type(exc).__name__}: {str(exc).rstrip('.')}. Pass values that {dtype} "
                "represents, or a wider dtype=.",
            ) from None


def _rounded(args: tuple[Any, ...], kwargs: dict[str, Any], seen: Call) -> str:
    """The arguments that the rounding to the candidate's dtype changed, named for a message."""
    named = [
        (f"positional argument {j}", a, b)
        for j, (a, b) in enumerate(zip(args, seen[0], strict=True))
    ]
    named += [(f"keyword argument {k!r}", v, seen[1][k]) for k, v in kwargs.items()]
    changed = [name for name, before, after in named if not _same(before, after)]
    return " and ".join(changed) if changed else "the arguments"


def _same(before: Any, after: Any) -> bool:
    """Whether an argument is unchanged by the rounding (NaN equal to NaN)."""
    try:
        return bool(np.array_equal(np.asarray(before), np.asarray(after), equal_nan=True))
    except (TypeError, ValueError):
        return before is after


def _describe(assume: Callable[..., Any] | None) -> str:
    if assume is None:
        return ""
    try:
        return textwrap.dedent(inspect.getsource(assume)).strip()
    except (OSError, TypeError):
        return repr(assume)


def _expected(
    spec: Spec, expected_failures: Mapping[str, str] | Iterable[str] | None
) -> dict[str, str]:
    if expected_failures is None:
        return {}
    if isinstance(expected_failures, str):
        raise InvalidArgumentType(
            f"expected_failures must be a mapping {{check name: reason}} or an iterable of check "
            f"names; got the string {expected_failures!r}. Wrap it in a list: "
            f"[{expected_failures!r}]."
        )
    if isinstance(expected_failures, Mapping):
        declared = {str(k): str(v) for k, v in expected_failures.items()}
    else:
        declared = {str(k): "declared expected failure" for k in expected_failures}
    known = [c.name for c in spec.checks]
    out: dict[str, str] = {}
    for name, reason in declared.items():
        short = name.removeprefix(f"{spec.name}.")
        if short not in known:
            raise InvalidArgument(
                f"expected_failures names a check that spec {spec.name!r} does not have; got "
                f"{name!r}. Use one of: {', '.join(known)}."
            )
        out[short] = reason
    return out
