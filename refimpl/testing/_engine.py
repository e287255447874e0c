"""The machinery of the conformance suite: specs, checks, conventions, the case a check inspects.

A *spec* names a function family (``tis``, ``staleness_mask``, …): the reference, the conventions a
candidate may declare, and its *checks*. A check is an ordinary typed Python function
``check(case: Case) -> None`` that inspects the candidate's outputs ``case.found`` on the calls
``case.calls`` (the inputs exactly as the candidate received them, rounded to its dtype) and raises
``AssertionError`` when a property fails. Hypothesis draws the calls from the check's strategy and
shrinks a failure to the smallest one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import invalid, wrong_type
from refimpl.testing._arrays import ArrayBridge
from refimpl.testing.tolerances import (
    SAFETY,
    Tolerance,
    largest_finite,
    smallest_normal,
    unit_roundoff,
)

__all__ = ["Call", "Case", "Check", "Convention", "Spec"]

Call = tuple[tuple[Any, ...], dict[str, Any]]
Conventions = Mapping[str, Any]


@dataclass(frozen=True)
class Convention:
    """One declared convention of a spec: a key, its default, its allowed values and meaning.

    ``choices`` lists the allowed values; ``None`` in ``choices`` is a value like any other. A
    convention with ``number=True`` also accepts a positive float (e.g. a log-ratio clamp).
    ``who`` says which frameworks follow a non-default value (read from their sources).
    """

    key: str
    default: Any
    choices: tuple[Any, ...]
    meaning: str
    number: bool = False
    who: str = ""

    def validate(self, value: Any, spec: str) -> Any:
        for choice in self.choices:
            if value is choice or (type(value) is type(choice) and value == choice):
                return choice
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        if self.number and numeric and math.isfinite(value) and value > 0:
            return float(value)
        shown = ", ".join(map(repr, self.choices)) + (
            " or a positive number" if self.number else ""
        )
        raise invalid(
            f"conventions[{self.key!r}]",
            f"be one of {shown} for spec {spec!r} ({self.meaning})",
            value,
            f"See refimpl.testing.conventions({spec!r}).",
        )


@dataclass(frozen=True)
class Check:
    """A named property of a spec: a strategy of calls and a typed check function."""

    name: str
    description: str
    strategy: Callable[[Conventions], st.SearchStrategy[list[Call]]]
    function: Callable[[Case], None]
    #: ``None`` when the check applies under the conventions, else why it does not.
    applies: Callable[[Conventions], str | None] = field(default=lambda c: None)
    #: short draws only: tried again when the counterexample found is large (T = 4096), since
    #: the shrinker does not move between the branches of a mixed strategy
    small: Callable[[Conventions], st.SearchStrategy[list[Call]]] | None = None


@dataclass(frozen=True)
class Spec:
    """A function family: reference, candidate signature, output reader, tolerance model."""

    name: str
    reference: str  # the refimpl function(s), for messages
    signature: str
    #: the candidate's raw output (already numpy) -> the normalised found value; may raise
    #: AssertionError for a wrong layout
    read: Callable[[Any, Call, Conventions], Any]
    #: the reference value on one call (inputs as the candidate saw them) under the conventions
    expected: Callable[[Call, Conventions], Any]
    #: per element, the magnitude that the rounding error of a correct computation scales with
    #: (|ŷ − y| <= SAFETY · u · condition); same structure as the expected value
    condition: Callable[[Call, Conventions, Any], Any]
    checks: tuple[Check, ...]
    conventions: tuple[Convention, ...] = ()
    #: outputs that are tuples/named tuples: field names (for messages)
    fields: tuple[str, ...] = ()
    #: exact integer outputs: compared exactly whatever the dtype
    exact: bool = False
    #: library accuracy floor (relative), for special functions whose float64 implementations
    #: differ by more than their rounding analysis (betainc vs a binomial sum)
    floor_rtol: float = 0.0
    #: the same call expressed under other conventions (inputs, layout): ``recast(call, from,
    #: to)``; lets a failure be explained by a convention that changes the signature
    recast: Callable[[Call, Conventions, Conventions], Call] | None = None
    #: numeric convention values that would explain what the candidate returned (e.g. the clamp
    #: ``c`` read off a weight ``e^-c``): ``guesses(calls, found, conventions) -> {key: values}``
    guesses: Callable[[list[Call], list[Any], Conventions], dict[str, list[float]]] | None = None
    #: why a candidate that raises on these calls may follow a convention that excludes them
    #: from the draws (an all-padding row): the hint, or None
    raised_hint: Callable[[list[Call], Conventions], str | None] | None = None
    #: a spec whose candidates are differentiated (the losses): ``vjp(call, conventions) ->
    #: (call handed to the candidate, cotangent)``. With a cotangent the candidate is called
    #: through :meth:`ArrayBridge.value_and_vjp` (with respect to its first argument) and its raw
    #: output is ``(output, vjp)``; with None it is called plainly and returns its own gradient
    vjp: Callable[[Call, Conventions], tuple[Call, Any]] | None = None

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)

    def resolve(self, conventions: Any) -> dict[str, Any]:
        if conventions is None:
            conventions = {}
        if not isinstance(conventions, Mapping):
            raise wrong_type(
                "conventions",
                "a mapping {key: value}",
                conventions,
                f"Pass e.g. conventions={{'padding': 'one'}}; keys: "
                f"refimpl.testing.conventions({self.name!r}).",
            )
        known = {c.key: c for c in self.conventions}
        out = {c.key: c.default for c in self.conventions}
        for key, value in conventions.items():
            if key not in known:
                keys = ", ".join(known) or "none"
                raise invalid(
                    "conventions",
                    f"use only the convention keys of spec {self.name!r} ({keys})",
                    key,
                    f"See refimpl.testing.conventions({self.name!r}).",
                )
            out[key] = known[key].validate(value, self.name)
        return out


def _as_tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, tuple) else (value,)


@dataclass
class Case:
    """What a check inspects: the calls as the candidate saw them and what it returned.

    Attributes
    ----------
    spec : Spec
        The spec.
    calls : list of Call
        ``(args, kwargs)`` per call, numpy, floats rounded to the candidate's dtype.
    found : list
        The candidate's output of each call, normalised by the spec (float64 numpy arrays, or
        tuples of them).
    conventions : dict
        Every convention key of the spec with its value for this run.
    dtype : str
        The candidate's dtype (``"float32"``, …).
    override : Tolerance or None
        ``rtol``/``atol`` given by the user: replaces the derived tolerance.
    """

    spec: Spec
    calls: list[Call]
    found: list[Any]
    conventions: dict[str, Any]
    dtype: str
    override: Tolerance | None = None
    printer: Callable[..., None] | None = None
    _expected: dict[int, Any] = field(default_factory=dict)

    @property
    def u(self) -> float:
        """Unit roundoff of the candidate's dtype."""
        return unit_roundoff(self.dtype)

    def show(self, *values: Any) -> None:
        """Print values in a reproduction (silent while searching)."""
        if self.printer is not None:
            self.printer(*values)

    def expected(self, i: int = 0) -> Any:
        """The reference value of call ``i`` under the declared conventions."""
        if i not in self._expected:
            self._expected[i] = self.spec.expected(self.calls[i], self.conventions)
        return self._expected[i]

    def allowed(self, reference: ArrayLike, condition: ArrayLike) -> NDArray[np.float64]:
        """Allowed absolute error at each element: ``SAFETY·u·condition`` (the derived tolerance,
        see :mod:`refimpl.testing.tolerances`), or ``atol + rtol·|reference|`` when overridden."""
        ref = np.abs(np.asarray(reference, dtype=np.float64))
        if self.override is not None:
            return np.asarray(self.override.atol + self.override.rtol * ref, dtype=np.float64)
        cond = np.abs(np.asarray(condition, dtype=np.float64))
        floor = self.spec.floor_rtol * ref + smallest_normal(self.dtype)
        return np.asarray(SAFETY * self.u * cond + floor, dtype=np.float64)

    def slack(self, value: ArrayLike) -> NDArray[np.float64]:
        """Allowed error of a value that a correct candidate merely rounds (a cap, an edge, 1)."""
        return self.allowed(value, value)

    def condition(self, i: int = 0) -> Any:
        return self.spec.condition(self.calls[i], self.conventions, self.expected(i))

    def close(
        self, found: ArrayLike, expected: ArrayLike, condition: ArrayLike
    ) -> NDArray[np.bool_]:
        """Elementwise agreement within :meth:`allowed`; NaN never agrees, an infinity only with
        itself."""
        f = np.asarray(found, dtype=np.float64)
        e = np.asarray(expected, dtype=np.float64)
        if self.spec.exact and self.override is None:
            return np.asarray(f == e, dtype=np.bool_)
        with np.errstate(invalid="ignore", over="ignore"):
            ok = np.abs(f - e) <= self.allowed(e, condition)
            # beyond the dtype's largest finite value a correct candidate can only return ±inf
            overflow = (
                np.isinf(f) & (np.abs(e) > largest_finite(self.dtype)) & (np.sign(f) == np.sign(e))
            )
        return np.asarray(
            (np.isfinite(f) & np.isfinite(e) & ok) | (np.isinf(f) & (f == e)) | overflow
        )

    def assert_close(
        self,
        found: ArrayLike,
        expected: ArrayLike,
        condition: ArrayLike,
        what: str = "values",
        either: ArrayLike | None = None,
    ) -> None:
        """Assert agreement (shape first); ``either`` marks elements exempt (e.g. at a band edge)."""
        f = np.asarray(found, dtype=np.float64)
        e = np.asarray(expected, dtype=np.float64)
        assert f.shape == e.shape, f"{what}: shape {f.shape}, expected {e.shape}"
        ok = self.close(f, e, np.broadcast_to(np.asarray(condition, dtype=np.float64), e.shape))
        if either is not None:
            ok = ok | np.asarray(either, dtype=np.bool_)
        if not ok.all():
            bad = np.argwhere(~ok) if ok.ndim else np.zeros((1, 0), dtype=int)
            where = [tuple(int(j) for j in b) for b in bad[:5]]
            fb, eb = (f[~ok], e[~ok]) if ok.ndim else (f.reshape(1), e.reshape(1))
            allowed = self.allowed(e, condition)
            ab = allowed[~ok] if allowed.ndim and ok.ndim else np.atleast_1d(allowed)
            raise AssertionError(
                f"{what} differ from the reference at {len(bad) if ok.ndim else 1} of {ok.size} "
                f"entries (first at {where}): found {fb[:5].tolist()}, expected "
                f"{eb[:5].tolist()} (allowed error {ab[:5].tolist()}; {self.tolerance_text()})"
            )

    def tolerance_text(self) -> str:
        if self.override is not None:
            return f"tolerance atol={self.override.atol:g} + rtol={self.override.rtol:g}·|expected|"
        return f"tolerance {SAFETY:g}·u·condition, u = {self.u:.3g} ({self.dtype})"


def read_array(raw: Any, call: Call, conventions: Conventions) -> NDArray[np.float64]:
    return ArrayBridge.to_numpy(raw)


def read_tuple(raw: Any, call: Call, conventions: Conventions) -> tuple[NDArray[np.float64], ...]:
    return tuple(ArrayBridge.to_numpy(x) for x in raw)


def first_call(calls: Sequence[Call]) -> Call:
    return calls[0]
