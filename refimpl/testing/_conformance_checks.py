"""The third and fourth steps of a conformance run: run each check, and classify what it found.

:func:`run_check` gives one :class:`CheckResult`: ``error`` when the installed refimpl lacks the
reference, ``skipped`` when the check does not apply under the declared conventions, ``passed``
(or ``xpassed``) when no counterexample is found, else the counterexample :func:`classify` turns
into ``failed``, ``raised`` or ``xfailed`` with its message, hint and reproduction.
"""

from __future__ import annotations

import contextlib
from types import ModuleType

from hypothesis.errors import NoSuchExample

from refimpl.testing._conformance_plan import Run, _describe
from refimpl.testing._conformance_report import CheckResult, Status
from refimpl.testing._conformance_runner import _Runner
from refimpl.testing._conformance_source import (
    _assume_reproduction,
    _calls_source,
    _reproduction,
    _size,
)
from refimpl.testing._conformance_specs import _available
from refimpl.testing._engine import Call, Check
from refimpl.testing._search import find

__all__ = ["classify", "find_counterexample", "run_check"]


def run_check(run: Run, check: Check, package: ModuleType) -> CheckResult:
    """The result of one check of ``run`` (``package``: the refimpl whose reference is used)."""
    reason = run.declared.get(check.name, "")
    blocked = _blocked(run, check, package, reason)
    if blocked is not None:
        return blocked
    runner = _Runner(
        run.candidate, run.spec, check, run.bridge, run.conventions, run.override, run.assume
    )
    example = find_counterexample(run, runner, check)
    if example is None:
        status: Status = "xpassed" if reason else "passed"
        return CheckResult(**_names(run, check), status=status, reason=reason)
    return classify(run, runner, example, reason)


def _names(run: Run, check: Check) -> dict[str, str]:
    return {"spec": run.spec.name, "name": check.name, "description": check.description}


def _blocked(run: Run, check: Check, package: ModuleType, reason: str) -> CheckResult | None:
    """An ``error`` result when the reference is missing, ``skipped`` when the check does not
    apply under the declared conventions, else None (the check runs)."""
    if not _available(package, run.spec.reference):
        message = (
            f"refimpl.{run.spec.reference} is not available in the installed refimpl; "
            "upgrade refimpl."
        )
        return CheckResult(**_names(run, check), status="error", message=message, reason=reason)
    why_not = check.applies(run.conventions)
    if why_not is None:
        return None
    message = f"not applicable: {why_not}"
    return CheckResult(**_names(run, check), status="skipped", message=message, reason=reason)


def find_counterexample(run: Run, runner: _Runner, check: Check) -> list[Call] | None:
    """The first explicit example that fails, else the one Hypothesis finds (shrunk as
    configured; a small one preferred when a long one was found), else None."""
    given = next((list(ex) for ex in run.examples if runner.fails(list(ex))), None)
    if given is not None:
        return given
    try:
        example = find(check.strategy(run.conventions), runner.fails, settings=run.settings)
    except NoSuchExample:
        return None
    if check.small is not None and _size(example) > 256:
        with contextlib.suppress(NoSuchExample):  # only long inputs fail: keep the long one
            example = find(check.small(run.conventions), runner.fails, settings=run.settings)
    return example


def classify(run: Run, runner: _Runner, example: list[Call], reason: str) -> CheckResult:
    """A counterexample as a result: ``raised`` (the candidate raised or exited), ``failed``
    (a wrong or ill-formed output), or ``xfailed`` when declared, with the message, a hint
    naming a convention that would explain it, and the reproduction."""
    outcome = runner.evaluate(example)
    if outcome is not None and outcome.kind == "invalid":
        outcome = None
    message = outcome.message if outcome is not None else "the failure did not repeat"
    raised = outcome is not None and outcome.kind == "raised"
    if message.startswith("assume="):  # the user's assume= misbehaved: nothing to explain
        return CheckResult(
            **_names(run, runner.check),
            status="xfailed" if reason else "raised",
            message=message,
            counterexample=_calls_source(example),
            reproduction=_assume_reproduction(
                f"{run.spec.name}.{runner.check.name}", example, _describe(run.assume)
            ),
            reason=reason,
        )
    if outcome is not None and "conventions=" not in message:
        hint = runner.explain(example, raised=raised)
        message = f"{message}\n{hint}" if hint else message
    failed: Status = "raised" if raised else "failed"
    return CheckResult(
        **_names(run, runner.check),
        status="xfailed" if reason else failed,
        message=message,
        counterexample=_calls_source(example),
        reproduction=_reproduction(
            runner, example, run.import_line, run.setup, run.xp_name, run.given
        ),
        reason=reason,
    )
