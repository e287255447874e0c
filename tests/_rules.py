"""Record the validation rules a public function applies, by running it with the builders wrapped.

Every common rule of refimpl is applied by a builder of ``refimpl/_validation.py`` (an integer
``>= minimum``, a real in an open or closed interval, entries in a range, two parameters in
order, a value among choices) or by the two choice helpers of the formula packages
(``refimpl.losses._common.as_choice``, ``refimpl.staleness._checks._as_choice``). A builder call
already says everything a boundary test needs: the argument's name, the kind of rule, the bound
and whether it is open. :func:`recording` replaces each builder, in every loaded ``refimpl``
module that holds it, by a wrapper that notes the call (and the refusal it raised, if any) and then
runs the original unchanged; on exit the originals are put back. ``refimpl`` itself knows nothing
of this: the recording lives in the tests.

:func:`discover` runs one valid call and returns the rules applied to the call's own arguments
(:class:`Rule`, with the parameter the builder's ``name=`` stands for). A rule on a derived value
(a length, a field of a record) is returned with ``direct=False``: a boundary test cannot move it
by moving one argument.
"""

from __future__ import annotations

import copy
import functools
import importlib
import inspect
import pkgutil
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

import refimpl._validation as _v
from refimpl.errors import RefimplError

__all__ = [
    "Recorder",
    "Rule",
    "bind",
    "call_with",
    "declared",
    "discover",
    "hand_rule",
    "load_formula_modules",
    "public_function",
    "recording",
    "spying",
    "table_lines",
]


@dataclass(frozen=True)
class Rule:
    """One application of a builder: what it checked, on which argument, with which bound.

    ``kind`` is ``"int"`` (:func:`as_int`), ``"int_array"`` (:func:`as_int_array`, entries
    ``>= low``), ``"real"`` (:func:`as_real`), ``"range"`` (:func:`require_in_range`, entries in
    the closed ``[low, high]``), ``"ordered"`` (:func:`require_ordered` on ``names``) or
    ``"choice"``. ``value`` is what the builder received (not part of the rule's identity).
    """

    builder: str
    kind: str
    name: str
    low: Any = None
    high: Any = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[Any, ...] = ()
    names: tuple[str, ...] = ()
    strict: bool = False
    value: Any = field(default=None, compare=False, hash=False)
    value2: Any = field(default=None, compare=False, hash=False)

    def describe(self) -> str:
        """A short human reading of the rule, for failure messages (``by hand`` when declared)."""
        text = self._describe()
        return f"{text} (by hand)" if self.builder == "hand" else text

    def _describe(self) -> str:
        if self.kind == "choice":
            return f"{self.name} in {self.choices!r}"
        if self.kind == "ordered":
            op = "<" if self.strict else "<="
            return f"{self.names[0]} {op} {self.names[1]}"
        if self.kind == "count":
            return f"count: nonzero entries of {self.name} >= {self.low!r}"
        if self.kind == "sum":
            return f"sum: {self.name} sums to > {self.low!r}"
        parts = []
        if self.low is not None:
            parts.append(f"{self.name} {'>' if self.low_open else '>='} {self.low!r}")
        if self.high is not None:
            parts.append(f"{self.name} {'<' if self.high_open else '<='} {self.high!r}")
        return f"{self.kind}: " + " and ".join(parts or [self.name])


def _rule_of(builder: str, arguments: dict[str, Any]) -> Rule:
    """The :class:`Rule` a builder call describes, from its bound arguments."""
    a = arguments
    if builder == "as_int":
        return Rule(builder, "int", a["name"], a["minimum"], a["maximum"], value=a["value"])
    if builder == "as_int_array":
        return Rule(builder, "int_array", a["name"], a["minimum"], value=a["value"])
    if builder == "as_real":
        return Rule(
            builder,
            "real",
            a["name"],
            a["low"],
            a["high"],
            bool(a["low_open"]),
            bool(a["high_open"]),
            value=a["value"],
        )
    if builder == "require_in_range":
        return Rule(builder, "range", a["name"], a["low"], a["high"], value=a["arr"])
    if builder == "require_ordered":
        names = tuple(a["names"])
        return Rule(
            builder,
            "ordered",
            names[0],
            names=names,
            strict=bool(a["strict"]),
            value=a["low"],
            value2=a["high"],
        )
    if builder == "require_one_of":
        return Rule(builder, "choice", a["name"], choices=tuple(a["choices"]), value=a["value"])
    # the choice helpers of refimpl.losses and refimpl.staleness
    return Rule(builder, "choice", a["name"], choices=tuple(a["choices"]), value=a["value"])


#: The builders recorded: (module, attribute). ``require_in_unit_interval`` is not listed: it
#: calls ``require_in_range`` through its module, which is recorded.
BUILDERS: tuple[tuple[str, str], ...] = (
    ("refimpl._validation", "as_int"),
    ("refimpl._validation", "as_int_array"),
    ("refimpl._validation", "as_real"),
    ("refimpl._validation", "require_in_range"),
    ("refimpl._validation", "require_ordered"),
    ("refimpl._validation", "require_one_of"),
    ("refimpl.losses._common", "as_choice"),
    ("refimpl.staleness._checks", "_as_choice"),
)


@dataclass
class Recorder:
    """What the wrapped builders saw during a :func:`recording` block."""

    rules: list[Rule] = field(default_factory=list)
    refused: list[tuple[Rule, BaseException]] = field(default_factory=list)

    def raised_by(self, error: BaseException) -> list[Rule]:
        """The rules whose builder raised ``error`` itself (the object, not a copy)."""
        return [rule for rule, e in self.refused if e is error]


def load_formula_modules(packages: tuple[str, ...]) -> None:
    """Import every module of ``packages`` (so that each holds its builders before wrapping)."""
    for name in packages:
        pkg = importlib.import_module(name)
        for info in pkgutil.walk_packages(getattr(pkg, "__path__", []), prefix=f"{name}."):
            importlib.import_module(info.name)


def _wrapper(builder: str, original: Callable[..., Any], rec: Recorder) -> Callable[..., Any]:
    signature = inspect.signature(original)

    def recorded(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        rule = _rule_of(builder, dict(bound.arguments))
        rec.rules.append(rule)
        try:
            return original(*args, **kwargs)
        except RefimplError as error:
            rec.refused.append((rule, error))
            raise

    return recorded


@contextmanager
def recording() -> Iterator[Recorder]:
    """Wrap every builder in every loaded ``refimpl`` module; put the originals back on exit."""
    rec = Recorder()
    before = set(sys.modules)
    originals = {
        id(getattr(importlib.import_module(mod), attr)): (
            attr,
            getattr(importlib.import_module(mod), attr),
        )
        for mod, attr in BUILDERS
    }
    wrappers = {key: _wrapper(attr, fn, rec) for key, (attr, fn) in originals.items()}
    patched: list[tuple[Any, str, Any]] = []
    try:
        for modname, module in list(sys.modules.items()):
            if module is None or not (modname == "refimpl" or modname.startswith("refimpl.")):
                continue
            for attr, value in list(vars(module).items()):
                if id(value) in originals and originals[id(value)][1] is value:
                    patched.append((module, attr, value))
                    setattr(module, attr, wrappers[id(value)])
        yield rec
    finally:
        for module, attr, value in patched:
            setattr(module, attr, value)
        back = {id(wrappers[key]): fn for key, (_, fn) in originals.items()}
        _unbind(wrappers.values(), back, before)


def _repo_modules() -> list[Any]:
    """The loaded modules of this repository (refimpl, the tests): where a stand-in can be bound."""
    root = str(Path(__file__).resolve().parent.parent)
    out = []
    for m in list(sys.modules.values()):
        path = getattr(m, "__file__", None)
        if isinstance(path, str) and path.startswith(root):
            out.append(m)
    return out


def _unbind(stand_ins: Any, originals: dict[int, Any], before: set[str]) -> None:
    """Put the original back wherever a module imported during the block (one not in ``before``)
    bound a stand-in with ``from ... import``."""
    ids = {id(s) for s in stand_ins}
    for name in set(sys.modules) - before:
        module = sys.modules[name]
        try:
            items = list(vars(module).items())
        except TypeError:
            continue
        for attr, value in items:
            if id(value) in ids:
                setattr(module, attr, originals[id(value)])


def public_function(key: str) -> Callable[..., Any]:
    """The function a ``"<module> <name>"`` key names."""
    module, name = key.split()
    fn: Callable[..., Any] = getattr(importlib.import_module(module), name)
    return fn


def bind(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments by parameter name, defaults included (``**options`` flattened)."""
    bound = inspect.signature(fn).bind(*copy.deepcopy(args), **copy.deepcopy(kwargs))
    bound.apply_defaults()
    out: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = inspect.signature(fn).parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        else:
            out[name] = value
    return out


def call_with(fn: Callable[..., Any], arguments: dict[str, Any]) -> Any:
    """Call ``fn`` with arguments by name (positional-only-in-spirit arrays passed positionally)."""
    params = inspect.signature(fn).parameters
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for name, value in copy.deepcopy(arguments).items():
        p = params.get(name)
        if p is not None and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            args.append(value)
        else:
            kwargs[name] = value
    return fn(*args, **kwargs)


def _same_value(received: Any, given: Any) -> bool:
    """Whether a builder received the argument as given (itself, or the same numbers)."""
    if received is given:
        return True
    try:
        a = np.asarray(received, dtype=np.float64)
        b = np.asarray(given, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        return False
    return a.shape == b.shape and bool(np.array_equal(a, b))


@dataclass(frozen=True)
class Found:
    """A rule found on a valid call: the parameter(s) it applies to, and whether directly."""

    rule: Rule
    params: tuple[str, ...]
    direct: bool


def discover(fn: Callable[..., Any], arguments: dict[str, Any]) -> list[Found]:
    """The distinct rules ``fn`` applies on the call ``arguments`` (which must be valid)."""
    with recording() as rec:
        call_with(fn, arguments)
    found: dict[Rule, Found] = {}
    for rule in rec.rules:
        if rule in found:
            continue
        names = rule.names if rule.kind == "ordered" else (rule.name,)
        params = tuple(n for n in names if n in arguments)
        if len(params) != len(names):
            found[rule] = Found(rule, params, direct=False)
            continue
        values = (rule.value, rule.value2) if rule.kind == "ordered" else (rule.value,)
        direct = all(_same_value(v, arguments[p]) for v, p in zip(values, params, strict=True))
        found[rule] = Found(rule, params, direct)
    return list(found.values())


# --- rules written by hand, declared ----------------------------------------------------------


def hand_rule(
    kind: str,
    name: str,
    *,
    low: Any = None,
    high: Any = None,
    low_open: bool = False,
    high_open: bool = False,
    names: tuple[str, str] | tuple[()] = (),
    strict: bool = False,
) -> Rule:
    """A rule a function checks with its own ``if ...: raise invalid(name, ...)``.

    The builders cannot record it, so it is declared (``tests/_valid_calls.py``). ``name`` is the
    parameter the refusal opens with; an ordered rule says ``names[0] <= names[1]``. Besides the
    builders' kinds, ``"count"`` (at least ``low`` nonzero entries of an array) and ``"sum"`` (the
    entries sum to more than ``low = 0``).
    """
    return Rule("hand", kind, name, low, high, low_open, high_open, (), tuple(names), strict)


def declared(rule: Rule, arguments: dict[str, Any]) -> Found | None:
    """The declared ``rule`` on a valid call (``None`` when the call does not pass its argument)."""
    params = rule.names if rule.kind == "ordered" else (rule.name,)
    if any(arguments.get(p) is None for p in params):
        return None
    if rule.kind == "ordered":
        rule = replace(rule, value=arguments[params[0]], value2=arguments[params[1]])
    else:
        rule = replace(rule, value=arguments[params[0]])
    return Found(rule, tuple(params), direct=True)


# --- boundary cases generated from a rule ---------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One generated call: ``changes`` applied to the valid call, and what must happen.

    ``expect`` is ``"accepted"`` (the call returns), ``"refused"`` (this rule's builder raises
    the error the caller sees, with a message naming the parameter, the bound and a fix) or
    ``"refused_any"`` (a refimpl error naming the parameter, from whichever check comes first:
    NaN and infinity are refused by the conversion before any bound).
    """

    label: str
    param: str
    changes: dict[str, Any]
    expect: str
    rule: Rule


def table_lines(key: str, index: int, found: list[Found]) -> list[str]:
    """The lines of the rule table for one valid call: ``<key> #<call> <direct|derived> <rule>``."""
    return [
        f"{key} #{index} {'direct' if f.direct else 'derived'} {f.rule.describe()}" for f in found
    ]


def _up(x: float) -> float:
    return float(np.nextafter(float(x), np.inf))


def _down(x: float) -> float:
    return float(np.nextafter(float(x), -np.inf))


def _is_integer_array(value: Any) -> bool:
    try:
        return np.asarray(value).dtype.kind in "iub"
    except (TypeError, ValueError):
        return False


def _with_entry(given: Any, new: Any, *, at: str) -> Any:
    """``given`` (a scalar or a rectangular array) with its smallest (``at="min"``) or largest
    entry replaced by ``new``; a scalar becomes ``new`` itself."""
    arr = np.array(given)
    if arr.ndim == 0:
        return new
    if isinstance(new, float) and arr.dtype.kind in "iub":
        arr = arr.astype(np.float64)
    flat = arr.reshape(-1)
    i = int(np.argmin(flat) if at == "min" else np.argmax(flat))
    flat[i] = new
    return flat.reshape(arr.shape)


def _bound_cases(found: Found, given: Any) -> list[Case]:
    rule, param = found.rule, found.params[0]
    integer = rule.kind in ("int", "int_array") or (
        rule.kind == "range" and _is_integer_array(given)
    )
    out: list[Case] = []
    inside: Any
    outside: Any
    for side in ("low", "high"):
        b = getattr(rule, side)
        if b is None:
            continue
        is_open = getattr(rule, f"{side}_open")
        if integer:
            edge = int(np.ceil(b)) if side == "low" else int(np.floor(b))
            if is_open:
                edge = edge + 1 if side == "low" else edge - 1
            inside, outside = edge, (edge - 1 if side == "low" else edge + 1)
        else:  # the next float on each side (nextafter), the bound itself on one of them
            step = _up if side == "low" else _down
            back = _down if side == "low" else _up
            inside, outside = (step(b), float(b)) if is_open else (float(b), back(b))
        at = "min" if side == "low" else "max"
        for label, value, expect in (
            ("inside", inside, "accepted"),
            ("outside", outside, "refused"),
        ):
            moved = _with_entry(given, value, at=at) if rule.kind != "int" else value
            out.append(
                Case(
                    f"{rule.describe()}: {side} {label} {value!r}",
                    param,
                    {param: moved},
                    expect,
                    rule,
                )
            )
    if rule.kind in ("real", "range"):
        for bad in (np.nan, np.inf):
            moved = _with_entry(given, bad, at="max") if rule.kind == "range" else bad
            out.append(
                Case(f"{rule.describe()}: {bad!r}", param, {param: moved}, "refused_any", rule)
            )
    return out


def near_miss(choice: Any, choices: tuple[Any, ...]) -> Any:
    """A value a caller could type for ``choice`` that is not a choice: upper case, else a space."""
    if isinstance(choice, str):
        for miss in (choice.upper(), f"{choice} "):
            if miss not in choices:
                return miss
    return f"{choice!r}"


def _choice_cases(found: Found) -> list[Case]:
    rule, param = found.rule, found.params[0]
    out = [Case(f"{param}={c!r}", param, {param: c}, "accepted", rule) for c in rule.choices]
    for c in rule.choices:
        miss = near_miss(c, rule.choices)
        out.append(Case(f"{param}={miss!r} (near miss)", param, {param: miss}, "refused", rule))
    return out


def _ordered_cases(found: Found) -> list[Case]:
    rule = found.rule
    a, b = found.params
    low, high = rule.value, rule.value2
    equal = "refused" if rule.strict else "accepted"
    what = rule.describe()
    out = [Case(f"{what}: equal", b, {b: low}, equal, rule)]
    if low != high:
        out.append(Case(f"{what}: swapped", b, {a: high, b: low}, "refused", rule))
    if rule.strict and isinstance(low, float):
        out.append(Case(f"{what}: just above", b, {b: _up(low)}, "accepted", rule))
    return out


def _count_cases(found: Found, given: Any) -> list[Case]:
    """A declared count of nonzero entries (finished rollouts, say): exactly ``low`` nonzero
    entries accepted, ``low - 1`` refused (the first entries set to 1, the rest to 0)."""
    rule, param = found.rule, found.params[0]
    shape = np.shape(given)
    out = []
    for label, count, expect in (
        ("inside", rule.low, "accepted"),
        ("outside", rule.low - 1, "refused"),
    ):
        flat = np.zeros(int(np.prod(shape)), dtype=np.asarray(given).dtype)
        flat[:count] = 1
        out.append(
            Case(
                f"{rule.describe()}: {label} {count}",
                param,
                {param: flat.reshape(shape)},
                expect,
                rule,
            )
        )
    return out


def _sum_cases(found: Found, given: Any) -> list[Case]:
    """A declared positive sum of non-negative entries: all zeros refused, and the same entries
    scaled to sum to ``1e-300`` accepted (the smallest positive sums, down to ``5e-324``, may
    meet another rule of the function first: a rate ``count / sum`` past float64, say)."""
    rule, param = found.rule, found.params[0]
    arr = np.asarray(given, dtype=np.float64)
    return [
        Case(
            f"{rule.describe()}: inside 1e-300",
            param,
            {param: arr * (1e-300 / arr.sum())},
            "accepted",
            rule,
        ),
        Case(f"{rule.describe()}: outside 0", param, {param: np.zeros_like(arr)}, "refused", rule),
    ]


def cases(found: Found, arguments: dict[str, Any]) -> list[Case]:
    """The boundary cases of one directly applied rule (none for a rule on a derived value)."""
    if not found.direct:
        return []
    if found.rule.kind == "choice":
        return _choice_cases(found)
    if found.rule.kind == "ordered":
        return _ordered_cases(found)
    if found.rule.kind == "count":
        return _count_cases(found, arguments[found.params[0]])
    if found.rule.kind == "sum":
        return _sum_cases(found, arguments[found.params[0]])
    return _bound_cases(found, arguments[found.params[0]])


# --- running a case -------------------------------------------------------------------------


def _names_the_fix(message: str, rule: Rule) -> str | None:
    """Why ``message`` is not a full refusal of ``rule`` (``None`` when it is one)."""
    name = rule.name
    if not message.startswith(f"{name} must ") and not message.startswith(f"{name} and "):
        return f"does not open with '{name} must'"
    if rule.kind == "choice":
        missing = [c for c in rule.choices if repr(c) not in message]
        if missing:
            return f"does not list the choices {missing!r}"
    elif rule.kind in ("real", "range"):
        bounds = [b for b in (rule.low, rule.high) if b is not None]
        if bounds and not any(f"{b:g}" in message for b in bounds):
            return f"does not state the bound {bounds!r}"
    elif rule.kind in ("int", "int_array"):
        bounds = [b for b in (rule.low, rule.high) if b is not None]
        if bounds and not any(str(b) in message for b in bounds):
            return f"does not state the bound {bounds!r}"
    shown = (
        f"{rule.names[1]}={rule.value2!r}"
        if rule.kind == "ordered"
        else f"{name}={_v._show(rule.value)}"
    )
    _, sep, tail = message.partition(f"got {shown}")
    if not sep:
        return f"does not show the value received ({shown})"
    if not any(ch.isalpha() for ch in tail):
        return "says no fix after the value received"
    return None


def _hand_outcome(case: Case, error: RefimplError, *, by_builder: bool) -> str | None:
    """The outcome of a refused case of a declared rule: its refusal opens with the parameter's
    name, comes from no builder, states the value received and then a fix."""
    message = str(error)
    mine = not by_builder and message.startswith(f"{case.rule.name} must ")
    if case.expect == "accepted":
        return f"refused: {message}"
    if case.expect == "refused_any":
        return None if case.param in message else f"message misses the name: {message}"
    if case.expect == "refused_by_other":
        return f"refused by this rule itself: {message}" if mine else None
    if not mine:
        return f"refused by another check, not this rule: {message}"
    if not re.search(r"; got .+\. \S", message, flags=re.S):
        return f"message shows no value received and fix: {message}"
    return None


def run_case(fn: Callable[..., Any], arguments: dict[str, Any], case: Case) -> str | None:
    """Run one case; ``None`` when it behaves as ``case.expect`` says, else why not."""
    moved = {**arguments, **case.changes}
    with recording() as rec:
        try:
            call_with(fn, moved)
        except RefimplError as error:
            if case.rule.builder == "hand":
                return _hand_outcome(case, error, by_builder=bool(rec.raised_by(error)))
            mine = [r for r in rec.raised_by(error) if r == case.rule]
            if case.expect == "accepted":
                return f"refused: {error}"
            if case.expect == "refused_any":
                return None if case.param in str(error) else f"message misses the name: {error}"
            if case.expect == "refused_by_other":
                return f"refused by this rule itself: {error}" if mine else None
            if not mine:
                return f"refused by another check, not this rule: {error}"
            why = _names_the_fix(str(error), mine[0])
            return None if why is None else f"message {why}: {error}"
        except Exception as error:
            return f"raised {type(error).__name__}, not a refimpl error: {error}"
    if case.expect == "accepted":
        return None
    return "accepted (the refusal did not happen)"


def main() -> None:
    """Print the rule table of every valid call (``tests/data/validation_rules.txt``)."""
    from _valid_calls import FORMULA_MODULES, VALID_CALLS

    load_formula_modules(FORMULA_MODULES)
    print(TABLE_HEADER, end="")
    for key in sorted(VALID_CALLS):
        fn = public_function(key)
        for i, call in enumerate(VALID_CALLS[key]):
            for line in table_lines(key, i, discover(fn, bind(fn, call.args, call.kwargs))):
                print(line)


TABLE_HEADER = """\
# Every validation rule each valid call of tests/_valid_calls.py applies, as the builders of
# refimpl/_validation.py record it: "<module> <function> #<call> <direct|derived> <rule>".
# tests/test_validation_rules.py compares it with what the code applies now: a bound moved, an
# open end made closed, a choice added or a rule dropped fails until this table says so.
# After a reviewed change of a rule, regenerate it:
#     .venv/bin/python tests/_rules.py > tests/data/validation_rules.txt
"""

if __name__ == "__main__":
    main()


# --- which calls a piece of code makes --------------------------------------------------------


@contextmanager
def spying(keys: list[str]) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """Record every call of the public functions ``keys`` (by any name any module holds them
    under, tests included) as ``(key, arguments by name with defaults)``; originals put back."""
    calls: list[tuple[str, dict[str, Any]]] = []
    before = set(sys.modules)
    targets = {id(public_function(k)): (k, public_function(k)) for k in keys}

    def spy(key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def spied(*args: Any, **kwargs: Any) -> Any:
            try:
                bound = signature.bind(*args, **kwargs)
                bound.apply_defaults()
                arguments = dict(bound.arguments)
                for name, p in signature.parameters.items():
                    if p.kind is p.VAR_KEYWORD:
                        arguments.update(arguments.pop(name))
                calls.append((key, arguments))
            except TypeError:
                pass  # a wrong call: the function itself says so
            return fn(*args, **kwargs)

        return spied

    spies = {i: spy(k, fn) for i, (k, fn) in targets.items()}
    patched: list[tuple[Any, str, Any]] = []
    try:
        for module in _repo_modules():
            for attr, value in list(vars(module).items()):
                if id(value) in targets and targets[id(value)][1] is value:
                    patched.append((module, attr, value))
                    setattr(module, attr, spies[id(value)])
        yield calls
    finally:
        for module, attr, value in patched:
            setattr(module, attr, value)
        _unbind(spies.values(), {id(spies[i]): fn for i, (_, fn) in targets.items()}, before)
