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

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import refimpl
from refimpl._validation import invalid
from refimpl.testing._arrays import ArrayBridge
from refimpl.testing._conformance_checks import run_check
from refimpl.testing._conformance_guard import user_interrupts
from refimpl.testing._conformance_plan import Run, _describe, prepare_run
from refimpl.testing._conformance_plan import _override as _override
from refimpl.testing._conformance_plan import _resolve as _resolve
from refimpl.testing._conformance_report import CheckResult, ConformanceError, ConformanceReport
from refimpl.testing._conformance_report import Status as Status
from refimpl.testing._conformance_runner import _Runner as _Runner
from refimpl.testing._conformance_runner import _search as _search
from refimpl.testing._conformance_source import _literal as _literal
from refimpl.testing._conformance_specs import _LOSSES as _LOSSES
from refimpl.testing._conformance_specs import _SPECS as _SPECS
from refimpl.testing._conformance_specs import check_names, conventions, resolve_spec, spec_names
from refimpl.testing._engine import Call, Convention

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
# Also importable from here, as before the pipeline was split into steps (``import X as X``):
# _resolve, _search and _literal (refimpl.testing._partition), _spec, _override and _resolve
# (the pytest plugin), _SPECS and _Runner (tests).
_spec = resolve_spec


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
    a failed property raises :class:`ConformanceError` with the check's message, and so does a
    candidate that exits, raises its own ``KeyboardInterrupt``, floods the terminal or modifies
    its inputs (as :func:`check_conformance` reports them).

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
    the_spec = resolve_spec(spec)
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
    with user_interrupts():
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
        the domain (e.g. ``lambda kw: kw["low"] > 0``). The report's ``assumed`` says so. It is
        user code, guarded as the candidate is: one that raises, exits or floods the output makes
        that check ``raised`` (or ``failed``), with a message beginning ``assume= (not the
        candidate)`` and a reproduction that calls it.
    expected_failures : mapping or iterable of str, optional
        Checks that are known to fail, as ``{name: reason}`` or names (short or ``"spec.name"``).
        A declared failure that fails is ``xfailed``; one that passes is ``xpassed`` and makes the
        report fail (the declaration is stale).
    max_examples : int
        Examples Hypothesis tries per check before declaring it passed, from 1 to 10**6
        (a million draws per check is hours already; a larger number would never end).
    checks : iterable of str, optional
        Run only these checks (default: all, see :func:`check_names`), as a list: a single
        string is refused (it would be read letter by letter); a name given twice runs once.
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
        constants Hypothesis mixes into its draws). An example whose calls the reference
        refuses (a keyword the spec does not take, a NaN where the reference wants finite
        values) is refused before any check runs, with the reference's message: skipped, it
        would leave the report ``ok`` without having been tried.

    Returns
    -------
    ConformanceReport
        Per-check :class:`CheckResult`; :meth:`ConformanceReport.raise_if_failed` turns it into a
        test failure.

    Raises
    ------
    ValueError
        For an unknown spec, check name, convention or expected failure, an unimportable
        candidate string (or one whose module exits, raises or prints more than a megabyte
        while it is imported) or array library, a dtype the library lacks, an example the
        reference refuses, or ``max_examples`` outside 1 to 10**6.
    TypeError
        If ``candidate`` is not callable, ``checks`` is a string, or ``shrink`` or
        ``derandomize`` is not a bool.

    Notes
    -----
    Check names are stable: a check is never renamed or given a new meaning; new checks may be
    added (declare them as expected failures while you fix your implementation). A failure that a
    single convention would explain says so in its message.

    The run is a pipeline of named steps: resolve the spec, convert the arguments (every refusal
    happens there, before a check runs), run each check, classify each counterexample, report.

    The candidate is user code, and it cannot take the run down with it. It gets its own copies
    of the inputs; a candidate that modifies them in place fails that check (the next check's
    inputs are untouched). Its output to ``sys.stdout``/``sys.stderr`` is kept out of the
    terminal, and one that writes more than a megabyte in one call is stopped and fails. One that
    calls ``sys.exit`` or raises ``SystemExit``, ``GeneratorExit``, its own ``KeyboardInterrupt``
    or another ``BaseException`` has that check ``raised``, with a reproduction. A real Ctrl-C is
    told apart by its signal: a ``SIGINT`` that arrives while the candidate runs (main thread,
    Python's own handler or one of yours) stops the run with ``KeyboardInterrupt`` as usual; a
    ``KeyboardInterrupt`` raised with no ``SIGINT`` is the candidate's. An output of the wrong kind
    (complex, strings, objects, ``None``, durations, dates, masked entries; booleans, except for a
    spec whose reference is a 0/1 mask, such as ``staleness_mask``) fails the check with a
    message, and so does an output whose shape is not the reference's, even where the property
    holds on it. A NaN where the reference is finite fails every check, a property check run
    alone included (inputs that the candidate's dtype rounds to 0, entries the conventions leave
    free and a loss's gradient are left to the checks).

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
    the_spec = resolve_spec(spec)
    run = prepare_run(
        the_spec,
        candidate,
        xp=xp,
        dtype=dtype,
        conventions=conventions,
        setup=setup,
        rtol=rtol,
        atol=atol,
        assume=assume,
        expected_failures=expected_failures,
        max_examples=max_examples,
        checks=checks,
        derandomize=derandomize,
        shrink=shrink,
        examples=examples,
    )
    with user_interrupts():
        results = tuple(run_check(run, the_spec.check(name), refimpl) for name in run.checks)
    return _report(run, results)


def _report(run: Run, results: tuple[CheckResult, ...]) -> ConformanceReport:
    """The last step: the results, with what the run used (candidate, arrays, conventions)."""
    return ConformanceReport(
        spec=run.spec.name,
        candidate=run.label,
        results=results,
        array=run.bridge.describe(),
        conventions=run.conventions,
        assumed=_describe(run.assume),
    )
