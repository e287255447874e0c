"""Evaluating one check of a spec against a candidate, and explaining a failure.

A :class:`_Runner` calls the candidate on a list of calls (through
:func:`~refimpl.testing._conformance_guard.call_candidate`, so that a candidate that exits,
interrupts, floods the terminal or edits its inputs is reported instead of taking the suite down),
reads its outputs, refuses outputs of the wrong kind or shape, and runs the check's property.
:meth:`_Runner.explain` names the conventions under which a counterexample would pass.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis.errors import NoSuchExample

from refimpl._io import user_text
from refimpl.testing._arrays import ArrayBridge
from refimpl.testing._conformance_guard import (
    CandidateMisbehaved,
    call_candidate,
    found_problem,
    fresh_copy,
    nan_where_finite,
    output_kind_problem,
)
from refimpl.testing._engine import Call, Case, Check, Spec
from refimpl.testing._search import find
from refimpl.testing._specs_parts import MASK_OUTPUTS
from refimpl.testing.tolerances import Tolerance, largest_finite, smallest_normal, unit_roundoff

__all__: list[str] = []


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
        self, calls: list[Call], *, conventions: Mapping[str, Any] | None = None
    ) -> tuple[list[Call], list[Any]]:
        """The calls as the candidate saw them (numpy) and its raw output on each."""
        conv = self.conventions if conventions is None else conventions
        seen: list[Call] = []
        raw: list[Any] = []
        for args, kwargs in calls:
            seen.append((self.bridge.seen(args), self.bridge.seen(kwargs)))
            raw.append(self._call(args, kwargs, conv))
        return seen, raw

    def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any], conv: Mapping[str, Any]) -> Any:
        """The candidate's raw output on one call; for a differentiated spec (``spec.vjp``) the
        pair (output, vector–Jacobian product) from the bridge's autodiff.

        The candidate gets its own copies of the inputs and runs under
        :func:`~refimpl.testing._conformance_guard.call_candidate`: whatever it does to them, the
        calls of the search stay as drawn."""

        def kind(out: Any) -> str | None:
            mask = self.spec.name in MASK_OUTPUTS  # booleans only where the spec says so
            return output_kind_problem(out, mask=mask)

        if self.spec.vjp is not None:
            (args, kwargs), cotangent = self.spec.vjp((args, kwargs), conv)
        a = self.bridge.to_candidate(fresh_copy(args))
        k = self.bridge.to_candidate(fresh_copy(kwargs))
        if self.spec.vjp is None or cotangent is None:  # None: it returns its own gradient
            return call_candidate(self.candidate, a, k, kind=kind)

        def guarded(*x: Any, **y: Any) -> Any:  # traced by the autodiff: inputs not compared
            return call_candidate(self.candidate, x, y, watch_inputs=False, kind=kind)

        return self.bridge.value_and_vjp(guarded, a, k, wrt=0, cotangent=cotangent)

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
        if self.assume is not None:
            refused = self._assumed(calls)
            if refused is not None:
                return refused
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            try:
                seen, raw = self.outputs(calls, conventions=conv)
            except CandidateMisbehaved as exc:  # exited, interrupted, flooded, edited its inputs
                return _Outcome(exc.kind, exc.message)
            except Exception as exc:
                if reraise:
                    raise
                if self._reference_rejects(calls, conv):
                    return _Outcome("invalid", "the reference rejects these inputs too")
                return _Outcome(
                    "raised", f"the candidate raised {type(exc).__name__}: {user_text(exc)}"
                )
            degenerate = [
                _rounded_away(c, v, self._dtype(conv)) for c, v in zip(calls, seen, strict=True)
            ]
            return self._inspect(seen, raw, conv, printer, degenerate)

    def _assumed(self, calls: list[Call]) -> _Outcome | None:
        """None when ``assume=`` accepts every call; ``invalid`` when it declines one. It is user
        code, run as the candidate is: one that raises, exits or floods the output is that
        check's ``raised`` (or ``failed``), with the message naming ``assume=``."""
        assert self.assume is not None
        try:
            for _, kwargs in calls:
                keep = call_candidate(self.assume, (fresh_copy(dict(kwargs)),), {})
                if not keep:
                    return _Outcome("invalid", "outside the domain declared by assume=")
        except CandidateMisbehaved as exc:
            what = exc.message.removeprefix("the candidate ")
            return _Outcome(exc.kind, f"assume= (not the candidate) {what}")
        except Exception as exc:
            return _Outcome(
                "raised",
                f"assume= (not the candidate) raised {type(exc).__name__}: {user_text(exc)}; it must "
                "return True or False for every call: fix the assume function.",
            )
        return None

    def _reference(self) -> Callable[[Call, Mapping[str, Any]], Any]:
        """The spec's reference, raising :class:`_InvalidExample` where it refuses the inputs."""
        spec = self.spec

        def reference(call: Call, c: Mapping[str, Any]) -> Any:
            try:
                return spec.expected(call, c)
            except (ValueError, TypeError) as exc:
                raise _InvalidExample(str(exc)) from None

        return reference

    def _read(self, raw: list[Any], seen: list[Call], conv: Mapping[str, Any]) -> list[Any]:
        """The outputs as numbers. Reading an output runs the candidate's code too (an array
        type's ``__array__``, a lazy tensor): it is guarded as a call of the candidate is, so
        that an exit, an interrupt or a flood there is this check's status."""

        def read() -> list[Any]:
            return [self.spec.read(r, c, conv) for r, c in zip(raw, seen, strict=True)]

        return list(call_candidate(read, (), {}, watch_inputs=False))

    def _inspect(
        self,
        seen: list[Call],
        raw: list[Any],
        conv: dict[str, Any],
        printer: Callable[..., None] | None,
        degenerate: list[bool] | None = None,
    ) -> _Outcome | None:
        """Read the outputs, run the check's property on them, then hold them to the rules every
        check shares: no NaN where the reference is finite (except on the ``degenerate`` calls,
        whose inputs the candidate's dtype rounded to 0), and the reference's shape."""
        reference = self._reference()
        try:
            found = self._read(raw, seen, conv)
        except CandidateMisbehaved as exc:
            return _Outcome(exc.kind, f"while its output was read, {exc.message}")
        except AssertionError as exc:
            return _Outcome("failed", str(exc).strip() or "wrong output layout")
        except Exception as exc:
            return _Outcome(
                "failed",
                f"the candidate's output could not be read: {type(exc).__name__}: {user_text(exc)}",
            )
        case = Case(
            spec=Spec(**{**self.spec.__dict__, "expected": reference}),
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
        except Exception as exc:  # the check could not index the output: its shape says why
            return self._shapes(case) or _Outcome(
                "failed",
                f"the candidate's output could not be checked: {type(exc).__name__}: {user_text(exc)}",
            )
        nan = self._nan_where_finite(case, degenerate or [False] * len(case.found))
        if nan is not None:
            return _Outcome("failed", nan)
        return self._shapes(case)

    def _nan_where_finite(self, case: Case, degenerate: list[bool]) -> str | None:
        """The rule every check shares, after its property held: an output that is NaN where
        the reference is finite fails (a property of NaN can hold: ``NaN > x`` is false, so an
        all-NaN output is "non-increasing"). A check that fails says why in its own words first.

        A differentiated spec's gradient is held to it too (a NaN gradient passes "the clipped
        region's gradient is 0": ``abs(NaN) > tiny`` is false), except where the reference's loss
        is not finite within the candidate's dtype: there the Jacobian overflows, and a zero
        cotangent times it is NaN in any autodiff (:func:`_gradient_free`). At a kink every
        one-sided gradient of a finite loss is finite, so none of them excuses a NaN.

        Not held to it: a call whose inputs the candidate's dtype rounded from nonzero to 0 or a
        subnormal (a ratio of them is 0/0 there, which refimpl defines and a candidate may not),
        entries the conventions leave free, and values past the dtype's range."""
        for i, found in enumerate(case.found):
            if degenerate[i]:
                continue
            try:
                expected = case.expected(i)
            except _InvalidExample:
                continue  # the check decides what an input the reference refuses means
            wrong = self._nan_in_call(case, i, found, expected)
            if wrong is not None:
                return wrong if len(case.found) == 1 else f"call {i}: {wrong}"
        return None

    def _nan_in_call(self, case: Case, i: int, found: Any, expected: Any) -> str | None:
        """:meth:`_nan_where_finite` on call ``i``: the output, then a differentiated spec's
        (value, gradient) pair part by part, the gradient with its own free entries."""
        free = _free(case, i)
        parts = [("", found, expected, free)]
        if self.spec.vjp is not None and isinstance(found, tuple) and isinstance(expected, tuple):
            parts = [("", found[0], expected[0], free)]  # another layout: its value only
            if len(found) == len(expected) == 2:
                parts = [
                    ("the value: ", found[0], expected[0], free),
                    (
                        "the gradient: ",
                        found[1],
                        expected[1],
                        _gradient_free(expected[0], case.dtype, free),
                    ),
                ]
        for what, f, e, loose in parts:
            wrong = nan_where_finite(f, e, dtype=case.dtype, free=loose)
            if wrong is not None:
                case.show("found:   ", f)
                case.show("expected:", e)
                return what + wrong
        return None

    def _shapes(self, case: Case) -> _Outcome | None:
        """After the property held: an output whose shape is not the reference's still fails
        (a property of some entries can hold on an output that merely broadcasts)."""
        for i, found in enumerate(case.found):
            expected = case._expected.get(i)
            if expected is None:
                try:
                    expected = self.spec.expected(case.calls[i], case.conventions)
                except (ValueError, TypeError):
                    continue
            wrong = found_problem(found, expected)
            if wrong is not None:
                return _Outcome("failed", wrong)
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
                found = self._read(raw, seen, self.conventions)
                return self.spec.guesses(seen, found, self.conventions)
        except Exception:
            return {}


def _leaves(value: Any) -> list[Any]:
    """The arrays and numbers of a call (its arguments and keyword values), in order."""
    if isinstance(value, list | tuple):
        return [leaf for v in value for leaf in _leaves(v)]
    if isinstance(value, Mapping):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    return [value]


def _rounded_away(drawn: Call, seen: Call, dtype: str) -> bool:
    """Whether the candidate's dtype rounded an input that was drawn nonzero to 0 or to a
    subnormal (where a sum of such inputs, and a ratio of sums, is no longer determined)."""
    tiny = smallest_normal(dtype)
    for a, b in zip(_leaves(drawn), _leaves(seen), strict=False):
        try:
            x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        except (TypeError, ValueError):
            continue
        if x.shape == y.shape and bool(np.any((x != 0) & (np.abs(y) < tiny))):
            return True
    return False


def _free(case: Case, i: int) -> Callable[[tuple[int, ...]], Any] | None:
    """The output entries of call ``i`` that the conventions leave free: under
    ``padding='ignored'``, those at ``mask == 0`` (every entry of an output laid out otherwise
    than the mask, whose padding cannot be told apart here)."""
    if case.conventions.get("padding") != "ignored":
        return None
    mask = case.calls[i][1].get("mask")

    def free(shape: tuple[int, ...]) -> Any:
        if mask is not None and np.shape(mask) == shape:
            return np.asarray(mask) == 0
        return np.ones(shape, dtype=np.bool_)

    return free


def _gradient_free(
    loss: Any, dtype: str, free: Callable[[tuple[int, ...]], Any] | None
) -> Callable[[tuple[int, ...]], Any]:
    """The gradient entries not held to the NaN rule: those the conventions leave free, and
    those whose reference loss is not finite within ``dtype`` (per entry when the loss has the
    gradient's shape, else every entry when any entry of the loss is out of range). There the
    Jacobian overflows in the candidate's dtype, and a zero cotangent times it is NaN."""
    try:
        value = np.asarray(loss, dtype=np.float64)
    except (TypeError, ValueError):
        value = np.full((), np.nan)
    with np.errstate(all="ignore"):
        out = ~(np.isfinite(value) & (np.abs(value) <= largest_finite(dtype)))

    def loose(got: tuple[int, ...]) -> Any:
        undefined = out if out.shape == got else np.full(got, bool(out.any()))
        if free is not None:
            undefined = undefined | np.asarray(free(got), dtype=np.bool_)
        return undefined

    return loose


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
