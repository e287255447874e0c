"""The conformance suite: named property checks of a spec, run against a candidate function.

A spec (:func:`spec_names`) is a function family with a reference in refimpl, the conventions a
candidate may declare (:func:`conventions`) and named checks (:func:`check_names`). Each check is a
Hypothesis strategy of *calls* and an ordinary typed function that inspects the candidate's outputs
(``refimpl/testing/_specs_*.py``). The candidate receives the calls in its own array library and
dtype (``xp=``, ``dtype=``); the reference is evaluated on the inputs as the candidate saw them, and
every comparison uses a tolerance derived from the dtype and the operation
(:mod:`refimpl.testing.tolerances`).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import math
import textwrap
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from types import ModuleType
from typing import Any, Literal

import numpy as np
from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis.errors import NoSuchExample

from refimpl._imports import import_object, split_reference
from refimpl._validation import invalid, wrong_type
from refimpl.errors import InvalidArgument, InvalidArgumentType, RefimplError
from refimpl.testing._arrays import ArrayBridge
from refimpl.testing._engine import Call, Case, Check, Convention, Spec
from refimpl.testing._search import find
from refimpl.testing._specs_basic import SPECS as _BASIC
from refimpl.testing._specs_losses_table import specs as _loss_table
from refimpl.testing._specs_more import SPECS as _MORE
from refimpl.testing._specs_weights import SPECS as _WEIGHTS
from refimpl.testing.tolerances import Tolerance, unit_roundoff

__all__ = [
    "CheckResult",
    "ConformanceError",
    "ConformanceReport",
    "Convention",
    "check_conformance",
    "check_names",
    "conventions",
    "reproduce",
    "spec_names",
]

Status = Literal["passed", "failed", "raised", "skipped", "xfailed", "xpassed", "error"]

_ORDER = (
    "effort_penalty",
    "inclusion_probability",
    "staleness_mask",
    "tis",
    "masked_is",
    "staleness",
    "vtrace",
)
_ALL = {s.name: s for s in (*_BASIC, *_WEIGHTS, *_MORE)}
_SPECS: dict[str, Spec] = {name: _ALL[name] for name in _ORDER}
_SPECS.update({name: s for name, s in _ALL.items() if name not in _SPECS})
#: the loss specs (value and gradient against refimpl.losses), listed by spec_names(losses=True)
_LOSSES: dict[str, Spec] = {s.name: s for s in _loss_table()}
_SPECS.update(_LOSSES)


for _s in _SPECS.values():
    assert len({c.name for c in _s.checks}) == len(_s.checks), f"duplicate checks in {_s.name}"
# ---------------------------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one named check.

    Attributes
    ----------
    spec : str
        The spec the check belongs to.
    name : str
        The check's stable name (``id`` is ``"{spec}.{name}"``).
    description : str
        The property, in one sentence.
    status : {"passed", "failed", "raised", "skipped", "xfailed", "xpassed", "error"}
        ``raised``: the candidate raised an exception (the counterexample is the smallest input
        that makes it raise); ``skipped``: the check does not apply under the declared
        conventions (the message says why); ``xfailed``: failed, as declared in
        ``expected_failures``; ``xpassed``: declared as an expected failure but passed (remove the
        declaration); ``error``: the check could not run (e.g. the installed refimpl lacks the
        reference function).
    message : str
        Why it failed (empty when it passed).
    counterexample : str
        The smallest failing calls found by Hypothesis, as Python source (empty when it passed).
    reproduction : str
        A runnable Python snippet that calls the candidate on the counterexample and fails the
        same way (empty when it passed).
    reason : str
        The reason given for a declared expected failure (empty otherwise).
    """

    spec: str
    name: str
    description: str
    status: Status
    message: str = ""
    counterexample: str = ""
    reproduction: str = ""
    reason: str = ""

    @property
    def id(self) -> str:
        """The stable check id, ``"{spec}.{name}"``."""
        return f"{self.spec}.{self.name}"

    @property
    def ok(self) -> bool:
        """True for ``passed``, ``skipped`` and ``xfailed`` (a declared, still failing expected
        failure)."""
        return self.status in ("passed", "skipped", "xfailed")

    def to_dict(self) -> dict[str, str]:
        """A JSON-ready dict of every field plus ``id``."""
        return {
            "id": self.id,
            "spec": self.spec,
            "name": self.name,
            "description": self.description,
            "status": self.status,
            "message": self.message,
            "counterexample": self.counterexample,
            "reproduction": self.reproduction,
            "reason": self.reason,
        }

    def render(self) -> str:
        """A human-readable account: status line, message and reproduction."""
        head = f"{self.status.upper():8s} {self.id}: {self.description}"
        if self.status == "passed":
            return head
        if self.status == "skipped":
            return f"{head}\n  {self.message}"
        parts = [head]
        if self.reason:
            parts.append(f"  declared expected failure: {self.reason}")
        if self.status == "xpassed":
            parts.append(
                "  it passed: remove it from expected_failures (the declaration is stale)."
            )
        if self.message:
            parts.append(textwrap.indent(self.message, "  "))
        if self.reproduction:
            parts.append("  reproduction:")
            parts.append(textwrap.indent(self.reproduction, "    "))
        return "\n".join(parts)


class ConformanceError(RefimplError, AssertionError):
    """Raised by :meth:`ConformanceReport.raise_if_failed`; its message is the full report."""


@dataclass(frozen=True)
class ConformanceReport:
    """What :func:`check_conformance` found: one :class:`CheckResult` per check.

    Attributes
    ----------
    spec : str
        The spec checked.
    candidate : str
        The candidate, as ``module:qualname`` where it can be imported.
    results : tuple of CheckResult
        In the spec's check order.
    array : str
        The candidate's array library and dtype, e.g. ``"torch float32"``.
    assumed : str
        The source of the ``assume=`` predicate that restricted the draws (empty: none).
    conventions : dict
        Every convention key of the spec with the value the run used.
    """

    spec: str
    candidate: str
    results: tuple[CheckResult, ...] = field(default_factory=tuple)
    array: str = "numpy float64"
    conventions: dict[str, Any] = field(default_factory=dict)
    assumed: str = ""

    @property
    def ok(self) -> bool:
        """True when every check passed or failed as declared (no failure, error or xpass)."""
        return all(r.ok for r in self.results)

    @property
    def failures(self) -> tuple[CheckResult, ...]:
        """The results that make the report not ok (failed, xpassed, error)."""
        return tuple(r for r in self.results if not r.ok)

    def __getitem__(self, name: str) -> CheckResult:
        """The result of the check ``name`` (short name or ``spec.name``)."""
        short = name.removeprefix(f"{self.spec}.")
        for r in self.results:
            if r.name == short:
                return r
        raise KeyError(
            f"no check {name!r} in this report; checks: {[r.name for r in self.results]}"
        )

    def summary(self) -> str:
        """One line per check, then the details of every check that is not ``passed``."""
        counts: dict[str, int] = {}
        for r in self.results:
            counts[r.status] = counts.get(r.status, 0) + 1
        tally = ", ".join(f"{v} {k}" for k, v in counts.items())
        lines = [f"refimpl conformance of {self.candidate} to spec {self.spec!r}: {tally}"]
        lines.append(f"  candidate arrays: {self.array}; conventions: {self.conventions}")
        if self.assumed:
            lines.append(f"  draws restricted by assume: {self.assumed}")
        lines += [f"  {r.status:8s} {r.id}" for r in self.results]
        details = [r.render() for r in self.results if r.status not in ("passed", "skipped")]
        return "\n".join(lines + (["", *details] if details else []))

    def __str__(self) -> str:
        return self.summary()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: spec, candidate, ok and the results."""
        return {
            "spec": self.spec,
            "candidate": self.candidate,
            "array": self.array,
            "conventions": dict(self.conventions.items()),
            "ok": self.ok,
            "results": [r.to_dict() for r in self.results],
        }

    def to_json(self, **kwargs: Any) -> str:
        """:meth:`to_dict` as JSON (keyword arguments go to :func:`json.dumps`)."""
        return json.dumps(self.to_dict(), **kwargs)

    def raise_if_failed(self) -> None:
        """Raise :class:`ConformanceError` (an ``AssertionError``) unless :attr:`ok`.

        The message is :meth:`summary`, with the reproduction of every failure.
        """
        if not self.ok:
            raise ConformanceError(self.summary())


# ---------------------------------------------------------------------------------------------
# running
# ---------------------------------------------------------------------------------------------


def spec_names(*, losses: bool = False) -> tuple[str, ...]:
    """The specs that :func:`check_conformance` knows, in a stable order (new ones at the end).

    With ``losses=True``: the loss specs instead (``ppo_clip``, ``gspo``, ``kl_penalty``, …),
    whose checks compare the value *and* the gradient of a candidate with :mod:`refimpl.losses`.

    Examples
    --------
    >>> from refimpl.testing import spec_names
    >>> spec_names()[:7]  # doctest: +NORMALIZE_WHITESPACE
    ('effort_penalty', 'inclusion_probability', 'staleness_mask', 'tis', 'masked_is', 'staleness',
     'vtrace')
    >>> "tis_geometric" in spec_names() and "decoupled_ppo" in spec_names()
    True
    >>> spec_names(losses=True)[:3]
    ('ppo_clip', 'cispo', 'sapo')
    """
    if losses:
        return tuple(_LOSSES)
    return tuple(name for name in _SPECS if name not in _LOSSES)


def _spec(name: Any) -> Spec:
    if not isinstance(name, str) or name not in _SPECS:
        raise invalid(
            "spec",
            f"be one of {', '.join(map(repr, _SPECS))}",
            name,
            "Pass the name of the function family your candidate implements.",
        )
    return _SPECS[name]


def check_names(spec: str) -> tuple[str, ...]:
    """The stable names of the checks of ``spec``, in the order they run.

    Examples
    --------
    >>> from refimpl.testing import check_names
    >>> check_names("staleness_mask")  # doctest: +NORMALIZE_WHITESPACE
    ('agrees_with_reference', 'keeps_on_policy', 'keeps_at_bound', 'drops_beyond_bound',
     'binary', 'non_increasing_in_staleness')
    """
    return tuple(c.name for c in _spec(spec).checks)


def conventions(spec: str) -> tuple[Convention, ...]:
    """The convention keys a candidate of ``spec`` may declare: key, default, values, meaning.

    A framework that differs from refimpl's default only by convention declares it in one
    argument, ``check_conformance(..., conventions={key: value})``; the reference then computes
    that variant exactly. ``who`` names the frameworks that follow a non-default value (read from
    their installed sources).

    Examples
    --------
    >>> from refimpl.testing import conventions
    >>> [c.key for c in conventions("staleness_mask")]
    ['staleness_count']
    >>> pad = next(c for c in conventions("tis") if c.key == "padding")
    >>> pad.default, pad.choices
    ('zero', ('zero', 'one', 'ignored'))
    """
    return _spec(spec).conventions


def _resolve(candidate: Any) -> tuple[Callable[..., Any], str, str]:
    """The callable, its label, and the source line that imports it as ``candidate``."""
    if isinstance(candidate, str):
        module_name, qualname = split_reference(candidate, what="candidate")
        obj = import_object(candidate, what="candidate")
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


def _import_line(module_name: str, qualname: str) -> str:
    if "." not in qualname:
        return f"from {module_name} import {qualname} as candidate"
    return f"import {module_name}\ncandidate = {module_name}.{qualname}"


def _literal(value: Any) -> str:
    """Python source that rebuilds ``value`` (numpy arrays, floats, Fractions, containers)."""
    if isinstance(value, np.ndarray):
        return f"np.array({_literal(value.tolist())}, dtype=np.{value.dtype.name})"
    if isinstance(value, np.generic):
        return _literal(value.item())
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f"float({str(value)!r})"
    if isinstance(value, Fraction):
        return f"Fraction({value.numerator}, {value.denominator})"
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    if isinstance(value, tuple):
        inner = ", ".join(_literal(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_literal(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _calls_source(calls: Sequence[Call]) -> str:
    rows = [f"    ({_literal(args)}, {_literal(kwargs)})," for args, kwargs in calls]
    return "calls = [\n" + "\n".join(rows) + "\n]"


def _size(calls: list[Call]) -> int:
    """The number of array elements in the calls."""
    total = 0
    for args, kwargs in calls:
        for v in (*args, *kwargs.values()):
            total += int(np.size(v)) if isinstance(v, np.ndarray) else 1
    return total


class _InvalidExample(Exception):
    """The reference rejects the inputs as the candidate saw them (e.g. rounded below a bound)."""


@dataclass(frozen=True)
class _Outcome:
    kind: Literal["failed", "raised", "invalid"]
    message: str


class _Runner:
    """Evaluates one check of one spec against one candidate in one array library and dtype."""

    def __init__(
        self,
        candidate: Callable[..., Any],
        spec: Spec,
        check: Check,
        bridge: ArrayBridge,
        conventions: dict[str, Any],
        override: Tolerance | None,
        assume: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        self.assume = assume
        self.candidate = candidate
        self.spec = spec
        self.check = check
        self.bridge = bridge
        self.conventions = conventions
        self.override = override
        self.kind: str | None = None  # the first kind of failure found; shrinking keeps it

    def _dtype(self, conventions: Mapping[str, Any]) -> str:
        compute = conventions.get("compute_dtype")
        own = self.bridge.dtype_name
        if compute is not None and unit_roundoff(compute) > unit_roundoff(own):
            return str(compute)
        return own

    def outputs(
        self,
        calls: list[Call],
        *,
        reraise: bool = False,
        conventions: Mapping[str, Any] | None = None,
    ) -> tuple[list[Call], list[Any]]:
        conv = self.conventions if conventions is None else conventions
        seen: list[Call] = []
        raw: list[Any] = []
        for args, kwargs in calls:
            seen.append((self.bridge.seen(args), self.bridge.seen(kwargs)))
            raw.append(self._call(args, kwargs, conv))
        return seen, raw

    def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any], conv: Mapping[str, Any]) -> Any:
        """The candidate's raw output on one call; for a differentiated spec (``spec.vjp``) the
        pair (output, vector–Jacobian product) from the bridge's autodiff."""
        if self.spec.vjp is None:
            given = (self.bridge.to_candidate(args), self.bridge.to_candidate(kwargs))
            return self.candidate(*given[0], **given[1])
        (hand_args, hand_kwargs), cotangent = self.spec.vjp((args, kwargs), conv)
        a, k = self.bridge.to_candidate(hand_args), self.bridge.to_candidate(hand_kwargs)
        if cotangent is None:  # the candidate returns its own gradient
            return self.candidate(*a, **k)
        return self.bridge.value_and_vjp(self.candidate, a, k, wrt=0, cotangent=cotangent)

    def _reference_rejects(self, calls: list[Call], conv: Mapping[str, Any]) -> bool:
        """True when the reference refuses the inputs as the candidate saw them (a candidate
        that raises there is not wrong: e.g. an overflow that refimpl refuses as well)."""
        for args, kwargs in calls:
            try:
                self.spec.expected((self.bridge.seen(args), self.bridge.seen(kwargs)), conv)
            except (ValueError, TypeError):
                return True
        return False

    def evaluate(
        self,
        calls: list[Call],
        conventions: Mapping[str, Any] | None = None,
        *,
        printer: Callable[..., None] | None = None,
        reraise: bool = False,
    ) -> _Outcome | None:
        conv = dict(self.conventions if conventions is None else conventions)
        if self.assume is not None and not all(self.assume(dict(kw)) for _, kw in calls):
            return _Outcome("invalid", "outside the domain declared by assume=")
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            try:
                seen, raw = self.outputs(calls, reraise=reraise, conventions=conv)
            except Exception as exc:
                if reraise:
                    raise
                if self._reference_rejects(calls, conv):
                    return _Outcome("invalid", "the reference rejects these inputs too")
                return _Outcome("raised", f"the candidate raised {type(exc).__name__}: {exc}")
            try:
                found = [self.spec.read(r, c, conv) for r, c in zip(raw, seen, strict=True)]
            except AssertionError as exc:
                return _Outcome("failed", str(exc).strip() or "wrong output layout")
            except Exception as exc:
                return _Outcome(
                    "failed",
                    f"the candidate's output could not be read: {type(exc).__name__}: {exc}",
                )
            spec = self.spec

            def reference(call: Call, c: Mapping[str, Any]) -> Any:
                try:
                    return spec.expected(call, c)
                except (ValueError, TypeError) as exc:
                    raise _InvalidExample(str(exc)) from None

            case = Case(
                spec=Spec(**{**spec.__dict__, "expected": reference}),
                calls=seen,
                found=found,
                conventions=conv,
                dtype=self._dtype(conv),
                override=self.override,
                printer=printer,
            )
            try:
                self.check.function(case)
            except _InvalidExample as exc:
                return _Outcome("invalid", str(exc))
            except AssertionError as exc:
                return _Outcome("failed", str(exc).strip() or "assertion failed")
            except Exception as exc:
                return _Outcome(
                    "failed",
                    f"the candidate's output could not be checked: {type(exc).__name__}: {exc}",
                )
        return None

    def fails(self, calls: list[Call]) -> bool:
        outcome = self.evaluate(calls)
        if outcome is None or outcome.kind == "invalid":
            return False
        if self.kind is None:
            self.kind = outcome.kind
        return outcome.kind == self.kind

    def explain(self, calls: list[Call], raised: bool = False) -> str:
        """The conventions under which this counterexample passes, as a hint (or "").

        Every single-key alternative that explains the counterexample is named, not only the
        first found: one counterexample can be explained by two conventions (a ratio of ``e^30``
        kept by a band on the reciprocal also sits on a guessed clamp at 30), and which one a
        reader needs depends on their implementation, not on the order the keys are tried in.
        A candidate that raises is also explained by an alternative under which refimpl refuses
        the counterexample too, provided the candidate passes the check on inputs drawn under
        that alternative (:meth:`_rejected_under`).
        """
        guesses = self._guesses(calls) if self.spec.guesses is not None else {}
        found: list[str] = []
        rejected: list[str] = []
        for convention in self.spec.conventions:
            key = convention.key
            if key in ("inputs", "layout") and self.spec.recast is None:
                continue
            if key == "compute_dtype":
                values: list[Any] = _coarser(self._dtype(self.conventions))
            else:
                values = [v for v in convention.choices if v != self.conventions[key]]
            if convention.number:
                values += [v for v in (20.0, *guesses.get(key, ())) if v != self.conventions[key]]
            for value in dict.fromkeys(values):
                alt = {**self.conventions, key: value}
                if self._passes(calls, alt, recast=key in ("inputs", "layout")):
                    found.append(f"conventions={{{key!r}: {value!r}}}")
                elif raised and self._rejected_under(calls, alt):
                    rejected.append(f"conventions={{{key!r}: {value!r}}}")
        if found or rejected:
            intends = (
                "pass it if that is what your implementation intends"
                if len(found) + len(rejected) == 1
                else "pass the one that your implementation intends"
            )
            passes = f"this counterexample passes under {' or '.join(found)}" if found else ""
            refused = (
                f"refimpl refuses this input too under {' or '.join(rejected)}" if rejected else ""
            )
            return f"{'; '.join(p for p in (passes, refused) if p)}: {intends}"
        if raised and self.spec.raised_hint is not None:
            return self.spec.raised_hint(calls, self.conventions) or ""
        return ""

    def _passes(self, calls: list[Call], alt: dict[str, Any], *, recast: bool) -> bool:
        """True when the check, and agreement with the reference, pass under ``alt``."""
        try:
            if recast and self.spec.recast is not None:
                calls = [self.spec.recast(c, self.conventions, alt) for c in calls]
            if self.check.applies(alt) is not None:
                return False
            passes = self.evaluate(calls, alt) is None
            agrees = self.spec.checks[0]
            if passes and agrees.name != self.check.name:
                other = _Runner(self.candidate, self.spec, agrees, self.bridge, alt, self.override)
                passes = other.evaluate(calls) is None
        except Exception:
            return False
        return passes

    def _rejected_under(self, calls: list[Call], alt: dict[str, Any]) -> bool:
        """True when a raise is explained by ``alt``: the reference rejects the counterexample
        under ``alt`` (e.g. ``eta = 0`` counting versions spanned), and the candidate passes the
        check on ``_CONFIRM`` inputs drawn under ``alt`` (so that a candidate that raises on
        everything is not told it follows ``alt``)."""
        if self.check.applies(alt) is not None or not self._reference_rejects(calls, alt):
            return False
        runner = _Runner(self.candidate, self.spec, self.check, self.bridge, alt, self.override)
        config = _search(_CONFIRM, derandomize=True, phases=[Phase.generate])
        try:
            find(self.check.strategy(alt), runner.fails, settings=config)
        except NoSuchExample:
            return True
        return False

    def _guesses(self, calls: list[Call]) -> dict[str, list[float]]:
        assert self.spec.guesses is not None
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                seen, raw = self.outputs(calls)
                found = [
                    self.spec.read(r, c, self.conventions) for r, c in zip(raw, seen, strict=True)
                ]
                return self.spec.guesses(seen, found, self.conventions)
        except Exception:
            return {}


#: draws under a convention that must pass before a raise is explained by it
_CONFIRM = 10


def _search(max_examples: int, *, derandomize: bool, phases: list[Phase]) -> settings:
    """Hypothesis settings of a search for a counterexample (quiet, no database, no deadline)."""
    return settings(
        max_examples=max_examples,
        derandomize=derandomize,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
        phases=phases,
    )


def _coarser(dtype: str) -> list[str]:
    """The next coarser dtype that a candidate may compute in (float64 → float32 → float16 →
    bfloat16): suggested only one step coarser, so that a real error is not explained away."""
    order = ["float64", "float32", "float16", "bfloat16"]
    i = order.index(dtype)
    return order[i + 1 : i + 2]


def _reproduction(
    runner: _Runner,
    calls: list[Call],
    import_line: str,
    setup: str | None,
    xp_name: str,
    declared: Mapping[str, Any],
) -> str:
    source = _calls_source(calls)
    options = [f"spec={runner.spec.name!r}", f"check={runner.check.name!r}", "calls=calls"]
    if xp_name != "numpy":
        options.append(f"xp={xp_name!r}")
    if runner.bridge.dtype_name != "float64":
        options.append(f"dtype={runner.bridge.dtype_name!r}")
    if declared:
        options.append(f"conventions={dict(declared)!r}")
    if runner.override is not None:
        options.append(f"rtol={runner.override.rtol!r}, atol={runner.override.atol!r}")
    try:
        check_source = inspect.getsource(runner.check.function)
    except (OSError, TypeError):
        check_source = f"{runner.check.function.__qualname__} (source not available)\n"
    lines = [
        f"# refimpl conformance check {runner.spec.name}.{runner.check.name}:",
        f"# {runner.check.description}",
        f"# candidate arrays: {runner.bridge.describe()}; conventions: {runner.conventions}",
        *([setup.strip(), ""] if setup else []),
        *(["from fractions import Fraction"] if "Fraction(" in source else []),
        "import numpy as np",
        "",
        "from refimpl.testing import reproduce",
        import_line,
        "",
        source,
        "reproduce(candidate, " + ", ".join(options) + ")",
        "",
        "# the check that fails (refimpl.testing):",
        textwrap.indent(textwrap.dedent(check_source).strip(), "# "),
    ]
    return "\n".join(lines) + "\n"


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
    exec(compile(setup, "<refimpl setup>", "exec"), namespace)
    return namespace


def reproduce(
    candidate: Callable[..., Any],
    *,
    spec: str,
    check: str,
    calls: list[Call],
    xp: Any = None,
    dtype: str | None = None,
    conventions: Mapping[str, Any] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
) -> None:
    """Run one check on given calls, printing what it compares; raise if it fails.

    This is what a report's reproduction calls: the candidate gets ``calls`` converted to ``xp``
    and ``dtype`` exactly as during the search; an exception of the candidate propagates as it is,
    a failed property raises :class:`ConformanceError` with the check's message.

    Examples
    --------
    >>> import numpy as np
    >>> from refimpl.testing import reproduce
    >>> def strict(s, *, eta):
    ...     return (np.asarray(s) < eta).astype(float)
    >>> reproduce(strict, spec="staleness_mask", check="keeps_at_bound",
    ...           calls=[((np.array([1]),), {"eta": 1})])
    Traceback (most recent call last):
    ...
    refimpl.testing.ConformanceError: samples with s == 1 (eta = 1) got weights [0.]
    """
    the_spec = _spec(spec)
    if check not in check_names(spec):
        raise invalid(
            "check",
            f"name a check of spec {spec!r}",
            check,
            f"Use one of: {', '.join(check_names(spec))}.",
        )
    bridge = ArrayBridge(xp, dtype)
    resolved = the_spec.resolve(conventions)
    runner = _Runner(
        candidate, the_spec, the_spec.check(check), bridge, resolved, _override(rtol, atol)
    )
    outcome = runner.evaluate(calls, printer=print, reraise=True)
    if outcome is not None and outcome.kind == "invalid":
        raise invalid(
            "calls",
            "be inputs that the reference accepts as the candidate sees them",
            calls,
            f"refimpl rejects them: {outcome.message}",
        )
    if outcome is not None:
        raise ConformanceError(outcome.message)


def check_conformance(
    candidate: Callable[..., Any] | str,
    *,
    spec: str,
    xp: Any = None,
    dtype: str | None = None,
    conventions: Mapping[str, Any] | None = None,
    setup: str | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    assume: Callable[[dict[str, Any]], bool] | None = None,
    expected_failures: Mapping[str, str] | Iterable[str] | None = None,
    max_examples: int = 100,
    checks: Iterable[str] | None = None,
    derandomize: bool = True,
    shrink: bool = True,
    examples: Iterable[Sequence[Call]] | None = None,
) -> ConformanceReport:
    """Run the named property checks of ``spec`` against ``candidate``; return the report.

    Each check draws valid inputs with :mod:`refimpl.testing.strategies` (edges included: log-ratios
    far beyond ±20, rows where everything is rejected, single rows, ratios at and one ulp from band
    edges, ``low = 0``, ``cap = 1``, all-padding rows, ``T = 4096``), converts them to the
    candidate's array library ``xp`` and ``dtype``, calls it with the reference's signature (arrays
    positional, parameters keyword-only) and asserts a property: agreement with the reference
    evaluated on the inputs as the candidate saw them, within a tolerance derived from the dtype
    and the operation (:mod:`refimpl.testing.tolerances`), or an invariant of the spec (on-policy
    weight 1, monotone, bounded, finite). Hypothesis shrinks a failure to the smallest input; the
    report carries it and a runnable reproduction.

    The specs and the candidate signatures are listed by :func:`spec_names` and in the docs
    (``docs/api/testing.md``); the checks of each by :func:`check_names`, its conventions by
    :func:`conventions`.

    Parameters
    ----------
    candidate : callable or str
        The function under test, or ``"package.module:function"`` (then the reproduction imports
        it by that name), or the name of a function that ``setup`` defines. A callable defined at
        module level is located by its ``__module__`` and ``__qualname__``.
    spec : str
        One of :func:`spec_names`.
    xp : str or module, optional
        The candidate's array library: ``"numpy"`` (default), ``"torch"``, ``"jax.numpy"``, or an
        array-API module. Inputs are converted to it; outputs are read back from any library or
        device.
    dtype : {"float64", "float32", "bfloat16", "float16"}, optional
        The floating-point dtype of the inputs (default float64). Integer inputs stay int64.
    conventions : mapping, optional
        Declared conventions, ``{key: value}`` (:func:`conventions` lists them): the reference
        computes the declared variant, and the report prints the values used.
    setup : str, optional
        Python code run before anything else (imports, fixtures, ``sys.path``); the reproduction
        runs it first too.
    rtol, atol : float, optional
        Replace the derived tolerance by ``atol + rtol·|expected|`` in every comparison.
    assume : callable, optional
        ``assume(kwargs) -> bool`` on the keyword arguments of each drawn call (numpy values):
        draws where it is False are not used, for a candidate that deliberately refuses part of
        the domain (e.g. ``lambda kw: kw["low"] > 0``). The report's ``assumed`` says so.
    expected_failures : mapping or iterable of str, optional
        Checks that are known to fail, as ``{name: reason}`` or names (short or ``"spec.name"``).
        A declared failure that fails is ``xfailed``; one that passes is ``xpassed`` and makes the
        report fail (the declaration is stale).
    max_examples : int
        Examples Hypothesis tries per check before declaring it passed.
    checks : iterable of str, optional
        Run only these checks (default: all, see :func:`check_names`).
    derandomize : bool
        Use a fixed seed, so that a CI run is reproducible (default).
    shrink : bool
        Shrink each failure to the smallest failing input (default). ``False`` reports the first
        failing input found, unshrunk: the verdict of every check is the same, and a failing report
        comes back many times sooner (shrinking is most of the cost of a failing check; about 15×
        for the planted bugs of the test suite), for a gate that needs only pass or fail.
    examples : iterable of list, optional
        Inputs every check tries first, before its search, as Hypothesis's ``@example`` does:
        each is a list of calls ``((args, kwargs), ...)`` in the candidate's signature (numpy
        arrays; a counterexample printed by a report has this form). The first that fails a
        check is that check's counterexample, found whatever the search would draw: a known
        divergence stays found when the random draws change (a new Hypothesis, new modules whose
        constants Hypothesis mixes into its draws). An example outside the spec's domain is
        skipped by the checks it does not fit.

    Returns
    -------
    ConformanceReport
        Per-check :class:`CheckResult`; :meth:`ConformanceReport.raise_if_failed` turns it into a
        test failure.

    Raises
    ------
    ValueError
        For an unknown spec, check name, convention or expected failure, an unimportable
        candidate string or array library, a dtype the library lacks, or ``max_examples < 1``.
    TypeError
        If ``candidate`` is not callable, or ``shrink`` is not a bool.

    Notes
    -----
    Check names are stable: a check is never renamed or given a new meaning; new checks may be
    added (declare them as expected failures while you fix your implementation). A failure that a
    single convention would explain says so in its message.

    Examples
    --------
    A staleness mask with the classic off-by-one (``s < eta`` instead of ``s <= eta``):

    >>> import numpy as np
    >>> from refimpl.testing import check_conformance
    >>> def strict_mask(s, *, eta):
    ...     return (np.asarray(s) < eta).astype(float)
    >>> report = check_conformance(strict_mask, spec="staleness_mask", max_examples=30)
    >>> report.ok
    False
    >>> report["keeps_at_bound"].status
    'failed'
    >>> print(report["keeps_on_policy"].message)
    on-policy samples (s == 0) got weights [0. 0. 0.]

    A float32 truncated-IS weight in torch, checked with one call:

    >>> import torch  # doctest: +SKIP
    >>> def tis(lt, lb, *, cap, mask):  # doctest: +SKIP
    ...     return torch.clamp(torch.exp(lt - lb), max=cap) * mask
    >>> check_conformance(tis, spec="tis", xp="torch", dtype="float32").ok  # doctest: +SKIP
    True
    """
    the_spec = _spec(spec)
    if isinstance(max_examples, bool) or not isinstance(max_examples, int) or max_examples < 1:
        raise invalid("max_examples", "be an int >= 1", max_examples, "Pass e.g. max_examples=100.")
    if not isinstance(shrink, bool):
        raise wrong_type("shrink", "a bool", shrink, "Pass shrink=True or shrink=False.")
    namespace = _run_setup(setup)
    if isinstance(candidate, str) and ":" not in candidate and candidate in namespace:
        func, label = namespace[candidate], candidate
        import_line = f"candidate = {candidate}  # defined by the setup above"
    else:
        func, label, import_line = _resolve(candidate)
    bridge = ArrayBridge(xp, dtype)
    resolved = the_spec.resolve(conventions)
    override = _override(rtol, atol)
    declared = _expected(the_spec, expected_failures)
    known = [c.name for c in the_spec.checks]
    selected = known if checks is None else [str(c).removeprefix(f"{spec}.") for c in checks]
    for name in selected:
        if name not in known:
            raise invalid(
                "checks",
                f"name only checks that spec {spec!r} has",
                name,
                f"spec {spec!r} does not have; got {name!r}. Use one of: {', '.join(known)}.",
            )
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if shrink else [])
    config = _search(max_examples, derandomize=derandomize, phases=phases)
    explicit = _explicit(examples)
    import refimpl

    given = dict((conventions or {}).items())
    results = []
    for check in (the_spec.check(name) for name in selected):
        reason = declared.get(check.name, "")
        common = {"spec": the_spec.name, "name": check.name, "description": check.description}
        if not _available(refimpl, the_spec.reference):
            results.append(
                CheckResult(
                    **common,
                    status="error",
                    message=f"refimpl.{the_spec.reference} is not available in the installed "
                    "refimpl; upgrade refimpl.",
                    reason=reason,
                )
            )
            continue
        why_not = check.applies(resolved)
        if why_not is not None:
            results.append(
                CheckResult(
                    **common, status="skipped", message=f"not applicable: {why_not}", reason=reason
                )
            )
            continue
        runner = _Runner(func, the_spec, check, bridge, resolved, override, assume)
        given_first = next((list(ex) for ex in explicit if runner.fails(list(ex))), None)
        try:
            example = given_first or find(check.strategy(resolved), runner.fails, settings=config)
        except NoSuchExample:
            status: Status = "xpassed" if reason else "passed"
            results.append(CheckResult(**common, status=status, reason=reason))
            continue
        if given_first is None and check.small is not None and _size(example) > 256:
            with contextlib.suppress(NoSuchExample):  # only long inputs fail: keep the long one
                example = find(check.small(resolved), runner.fails, settings=config)
        outcome = runner.evaluate(example)
        if outcome is not None and outcome.kind == "invalid":
            outcome = None
        message = outcome.message if outcome is not None else "the failure did not repeat"
        if outcome is not None and "conventions=" not in message:
            hint = runner.explain(example, raised=outcome.kind == "raised")
            message = f"{message}\n{hint}" if hint else message
        failed: Status = "raised" if outcome is not None and outcome.kind == "raised" else "failed"
        results.append(
            CheckResult(
                **common,
                status="xfailed" if reason else failed,
                message=message,
                counterexample=_calls_source(example),
                reproduction=_reproduction(
                    runner, example, import_line, setup, _xp_name(xp), given
                ),
                reason=reason,
            )
        )
    return ConformanceReport(
        spec=the_spec.name,
        candidate=label,
        results=tuple(results),
        array=bridge.describe(),
        conventions=resolved,
        assumed=_describe(assume),
    )


def _available(package: ModuleType, reference: str) -> bool:
    """Whether ``refimpl.<reference>`` exists: a flat name, or ``module.path.name`` (the losses'
    references are named by their module, ``losses.clipped.ppo_clip_loss``)."""
    if "." not in reference:
        return hasattr(package, reference)
    module, _, name = reference.rpartition(".")
    try:
        return hasattr(importlib.import_module(f"{package.__name__}.{module}"), name)
    except ImportError:
        return False


def _explicit(examples: Iterable[Sequence[Call]] | None) -> list[list[Call]]:
    """The ``examples=`` of :func:`check_conformance`, validated: lists of ``(args, kwargs)``."""
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
        out.append([(tuple(a), dict(k)) for a, k in calls])
    return out


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
