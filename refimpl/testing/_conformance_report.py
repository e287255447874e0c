"""The results of a conformance run: one :class:`CheckResult` per check, gathered in a
:class:`ConformanceReport` that renders itself, serialises to JSON and turns into a test failure.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field
from typing import Any, Literal

from refimpl.errors import RefimplError

__all__ = ["CheckResult", "ConformanceError", "ConformanceReport", "Status"]

Status = Literal["passed", "failed", "raised", "skipped", "xfailed", "xpassed", "error"]


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


# Shown as refimpl.testing.NAME in tracebacks and reprs, where users import them from (and where
# pickle finds them), before refimpl.testing's lazy loader has been asked for them.
for _cls in (CheckResult, ConformanceError, ConformanceReport):
    _cls.__module__ = "refimpl.testing"
