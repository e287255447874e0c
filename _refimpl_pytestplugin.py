"""pytest plugin entry point for refimpl (registered under ``pytest11``).

Kept as a top-level module, like Hypothesis's ``_hypothesis_pytestplugin``, so that loading the plugin
imports nothing from refimpl (nor numpy/scipy/hypothesis) unless the user asks for a conformance run::

    pytest --refimpl-target=mypkg.ops:staleness_mask --refimpl-spec=staleness_mask \
           [--refimpl-xp=torch] [--refimpl-dtype=float32] [--refimpl-convention=KEY=VALUE ...] \
           [--refimpl-rtol=R] [--refimpl-atol=A] \
           [--refimpl-xfail=CHECK[:reason] ...] [--refimpl-max-examples=N] \
           [--refimpl-only] [--refimpl-report=conformance.json]

adds one pytest item per check of the spec (``refimpl::staleness_mask::keeps_at_bound``), run
against the target function. A failing item shows the smallest counterexample and a runnable
reproduction; a declared expected failure (``--refimpl-xfail``) is reported as xfail, and as a
failure if it passes (strict: the declaration is stale). Items can be selected with ``-k`` as usual.

The shipped adapters of :mod:`refimpl.frameworks` run the same way, against the installed framework::

    pytest --refimpl-framework=verl [--refimpl-framework=trl ...] [--refimpl-only]

adds one item per adapter and applicable check (``refimpl::verl.rollout_is_token_tis::never_exceeds_cap``),
each run as the conformance matrix runs it (its conventions, dtype and number of examples). A
divergence the adapter records is an expected failure (xfail, with its classification); one that no
longer fails, or any other failure, fails the run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

_KEY: pytest.StashKey[dict[str, Any]] = pytest.StashKey()
_FRAMEWORKS: pytest.StashKey[tuple[str, ...]] = pytest.StashKey()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("refimpl", "refimpl conformance checks")
    group.addoption(
        "--refimpl-target",
        metavar="MODULE:FUNCTION",
        help="the function to check against refimpl, e.g. mypkg.ops:staleness_mask",
    )
    group.addoption(
        "--refimpl-spec",
        metavar="NAME",
        help="the spec it implements (refimpl.testing.spec_names()), e.g. staleness_mask",
    )
    group.addoption(
        "--refimpl-xp",
        metavar="LIBRARY",
        help="the target's array library: numpy (default), torch, jax.numpy",
    )
    group.addoption(
        "--refimpl-dtype",
        metavar="DTYPE",
        help="the dtype of its inputs: float64 (default), float32, bfloat16, float16",
    )
    group.addoption(
        "--refimpl-convention",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="declare a convention (repeat); refimpl.testing.conventions(spec) lists them",
    )
    group.addoption(
        "--refimpl-rtol",
        type=float,
        metavar="R",
        help="replace the tolerance derived from the dtype by atol + rtol·|expected|",
    )
    group.addoption(
        "--refimpl-atol",
        type=float,
        metavar="A",
        help="see --refimpl-rtol",
    )
    group.addoption(
        "--refimpl-xfail",
        action="append",
        default=[],
        metavar="CHECK[:REASON]",
        help="declare an expected failure (repeat); strict: it fails the run if it passes",
    )
    group.addoption(
        "--refimpl-max-examples",
        type=int,
        default=100,
        metavar="N",
        help="Hypothesis examples per check (default 100)",
    )
    group.addoption(
        "--refimpl-framework",
        action="append",
        default=[],
        metavar="NAME",
        help="run refimpl.frameworks' shipped adapters of this framework against its installed "
        "code (repeat; 'all' for every one): verl, trl, areal, skyrl, openrlhf",
    )
    group.addoption(
        "--refimpl-only",
        action="store_true",
        help="run only the conformance checks (deselect the other collected tests)",
    )
    group.addoption(
        "--refimpl-report",
        metavar="FILE.json",
        help="write every check's result (with reproductions) to this JSON file",
    )


def _options(config: pytest.Config) -> tuple[str | None, str | None]:
    return config.getoption("--refimpl-target"), config.getoption("--refimpl-spec")


def pytest_configure(config: pytest.Config) -> None:
    _configure_frameworks(config)
    target, spec = _options(config)
    if target is None and spec is None:
        return  # inert: nothing imported, nothing added
    if not target or not spec:
        raise pytest.UsageError(
            "--refimpl-target and --refimpl-spec go together: pass both, e.g. "
            "--refimpl-target=mypkg.ops:staleness_mask --refimpl-spec=staleness_mask"
        )
    from refimpl.testing import check_names, spec_names

    if spec not in spec_names():
        raise pytest.UsageError(
            f"--refimpl-spec must be one of {', '.join(spec_names())}; got {spec!r}"
        )
    declared: dict[str, str] = {}
    for item in config.getoption("--refimpl-xfail"):
        name, _, reason = item.partition(":")
        name = name.strip().removeprefix(f"{spec}.")
        if name not in check_names(spec):
            raise pytest.UsageError(
                f"--refimpl-xfail names no check of spec {spec!r}: {name!r}. "
                f"Checks: {', '.join(check_names(spec))}"
            )
        declared[name] = reason.strip() or "declared with --refimpl-xfail"
    if config.getoption("--refimpl-max-examples") < 1:
        raise pytest.UsageError("--refimpl-max-examples must be >= 1")
    from refimpl.testing import conventions as spec_conventions

    known = {c.key: c for c in spec_conventions(spec)}
    declared_conventions: dict[str, Any] = {}
    for item in config.getoption("--refimpl-convention"):
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or key not in known:
            raise pytest.UsageError(
                f"--refimpl-convention must be KEY=VALUE with a key of spec {spec!r} "
                f"({', '.join(known) or 'none'}); got {item!r}"
            )
        declared_conventions[key] = _convention_value(text.strip(), known[key].choices)
    options = {
        "xp": config.getoption("--refimpl-xp"),
        "dtype": config.getoption("--refimpl-dtype"),
        "conventions": declared_conventions,
        "rtol": config.getoption("--refimpl-rtol"),
        "atol": config.getoption("--refimpl-atol"),
    }
    try:
        from refimpl.testing._arrays import ArrayBridge

        ArrayBridge(options["xp"], options["dtype"])
        from refimpl.testing._conformance import _override, _spec

        _spec(spec).resolve(declared_conventions)
        _override(options["rtol"], options["atol"])
    except (ValueError, TypeError) as exc:
        raise pytest.UsageError(f"refimpl: {exc}") from None
    config.stash[_KEY] = {
        "target": target,
        "spec": spec,
        "declared": declared,
        "results": [],
        "options": options,
    }


def _configure_frameworks(config: pytest.Config) -> None:
    """``--refimpl-framework``: check the names (and that each framework is installed)."""
    asked = [n.strip() for item in config.getoption("--refimpl-framework") for n in item.split(",")]
    if not asked:
        return
    from refimpl.frameworks import TESTED_VERSIONS, installed_version

    names = list(TESTED_VERSIONS) if "all" in asked else list(dict.fromkeys(asked))
    for name in names:
        if name not in TESTED_VERSIONS:
            raise pytest.UsageError(
                f"--refimpl-framework must name a framework with shipped adapters "
                f"({', '.join(TESTED_VERSIONS)}, or all); got {name!r}"
            )
        if installed_version(name) is None:
            dist, tested = TESTED_VERSIONS[name]
            raise pytest.UsageError(
                f"--refimpl-framework={name}: {dist} is not installed, and the adapters check the "
                f"installed code; install it (tested: pip install {dist}=={tested})"
            )
    config.stash[_FRAMEWORKS] = tuple(names)


def pytest_report_header(config: pytest.Config) -> list[str]:
    names = config.stash.get(_FRAMEWORKS, ())
    if not names:
        return []
    from refimpl.frameworks import TESTED_VERSIONS, installed_version

    found = []
    for name in names:
        version, tested = installed_version(name), TESTED_VERSIONS[name][1]
        found.append(f"{name} {version}" + ("" if version == tested else f" (tested: {tested})"))
    return ["refimpl frameworks: " + ", ".join(found)]


def _framework_items(session: pytest.Session, names: tuple[str, ...]) -> list[pytest.Item]:
    """One item per shipped adapter of ``names`` and check of its spec that applies under its
    conventions (a check that does not apply is not collected: the matrix records it skipped)."""
    from refimpl.frameworks import adapters, load_function
    from refimpl.testing import check_names
    from refimpl.testing._conformance import _spec

    items: list[pytest.Item] = []
    for name in names:
        for a in adapters(name):
            try:
                load_function(a.function)
            except Exception as exc:  # a framework whose module fails to import: one message
                raise pytest.UsageError(
                    f"--refimpl-framework={name}: cannot import {a.function} "
                    f"({type(exc).__name__}: {exc})"
                ) from None
            spec = _spec(a.spec)
            resolved = spec.resolve(dict(a.conventions))
            for check in check_names(a.spec):
                if spec.check(check).applies(resolved) is not None:
                    continue
                items.append(
                    RefimplAdapterItem.from_parent(
                        session,
                        name=f"{a.key}::{check}",
                        nodeid=f"refimpl::{a.key}::{check}",
                        key=a.key,
                        check=check,
                    )
                )
            if a.partition is not None:
                items.append(
                    RefimplPartitionItem.from_parent(
                        session,
                        name=f"{a.key}::partition",
                        nodeid=f"refimpl::{a.key}::partition",
                        key=a.key,
                    )
                )
    return items


def _convention_value(text: str, choices: tuple[Any, ...]) -> Any:
    """A convention value from the command line: one of the choices by its text, else a number."""
    for choice in choices:
        if str(choice) == text:
            return choice
    try:
        return float(text)
    except ValueError:
        return text


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    state = config.stash.get(_KEY, None)
    frameworks = config.stash.get(_FRAMEWORKS, ())
    if state is None and not frameworks:
        return
    if state is not None:
        _require_importable(state["target"])
    if config.getoption("--refimpl-only") and items:
        config.hook.pytest_deselected(items=list(items))
        items.clear()
    items.extend(_framework_items(session, frameworks))
    if state is None:
        return
    from refimpl.testing import check_names

    spec = state["spec"]
    for name in check_names(spec):
        items.append(
            RefimplCheckItem.from_parent(
                session, name=f"{spec}::{name}", nodeid=f"refimpl::{spec}::{name}", check=name
            )
        )


def _require_importable(target: str) -> None:
    """Import ``--refimpl-target`` once, after collection (when the test directories are on
    ``sys.path``); a target that cannot be loaded is a usage error (exit code 4) with one message,
    not the same traceback in every conformance item."""
    from refimpl.testing._conformance import _resolve

    try:
        _resolve(target)
    except (ValueError, TypeError) as exc:  # also a module that raises while it is imported
        raise pytest.UsageError(f"--refimpl-target: {exc}") from None


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash.get(_KEY, None)
    path = session.config.getoption("--refimpl-report")
    if state is None or not path:
        return
    data = {
        "target": state["target"],
        "spec": state["spec"],
        "ok": all(r["status"] in ("passed", "xfailed") for r in state["results"]),
        "results": state["results"],
    }
    Path(path).write_text(json.dumps(data, indent=2) + "\n")


class RefimplCheckFailure(Exception):
    """A conformance check failed; the message holds the counterexample and reproduction."""


class RefimplCheckItem(pytest.Item):
    """One conformance check of the spec, run against the target."""

    def __init__(self, *, check: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.check = check

    def runtest(self) -> None:
        from refimpl.testing import check_conformance

        state = self.config.stash[_KEY]
        reason = state["declared"].get(self.check)
        report = check_conformance(
            state["target"],
            spec=state["spec"],
            checks=[self.check],
            expected_failures={self.check: reason} if reason else None,
            max_examples=self.config.getoption("--refimpl-max-examples"),
            **state["options"],
        )
        (result,) = report.results
        state["results"].append(result.to_dict())
        if result.status == "xfailed":
            pytest.xfail(f"{result.id}: {reason}")
        if result.status != "passed":
            first = (result.message or result.status).splitlines()[0]
            raise RefimplCheckFailure(f"{first}\n\n{result.render()}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, RefimplCheckFailure):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"refimpl conformance {self.name}"


class RefimplAdapterItem(pytest.Item):
    """One check of a shipped adapter's spec, run on the installed framework function as the
    conformance matrix runs it; the adapter's recorded divergences are strict expected failures."""

    def __init__(self, *, key: str, check: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.key = key
        self.check = check

    def runtest(self) -> None:
        from refimpl.frameworks import adapter, check
        from refimpl.frameworks._matrix import MATRIX_EXAMPLES

        a = adapter(self.key)
        known = a.divergences.get(self.check)
        reason = f"{known.classification}: {known.explanation}" if known else ""
        report = check(
            a.key,
            checks=[self.check],
            max_examples=max(MATRIX_EXAMPLES, a.max_examples or 0),
            expected_failures={self.check: reason} if known else None,
        )
        (result,) = report.results
        if result.status == "xfailed":
            pytest.xfail(f"{a.key}: {reason}")
        if result.status == "xpassed":
            raise RefimplCheckFailure(
                f"{a.key}: {self.check} passes, but the adapter records it as a divergence "
                f"({reason}); the framework changed: update the adapter's divergences and the "
                "matrix (refimpl conformance --write)"
            )
        if result.status != "passed":
            first = (result.message or result.status).splitlines()[0]
            raise RefimplCheckFailure(f"{a.key}: {first}\n\n{result.render()}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, RefimplCheckFailure):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"refimpl adapter {self.name}"


class RefimplPartitionItem(pytest.Item):
    """The partition check of a shipped aggregation adapter, on the framework's own scaling path
    (as the matrix runs it); its recorded divergences are strict expected failures."""

    def __init__(self, *, key: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.key = key

    def runtest(self) -> None:
        from refimpl.frameworks import adapter, check_partition
        from refimpl.frameworks._matrix import MATRIX_EXAMPLES

        a = adapter(self.key)
        assert a.partition is not None
        known = a.partition.divergences
        report = check_partition(a.key, max_examples=max(MATRIX_EXAMPLES, a.max_examples or 0))
        failed = {r.name for r in report.failures}
        if failed and failed <= set(known):
            reasons = "; ".join(f"{n}: {known[n].classification}" for n in sorted(failed))
            pytest.xfail(f"{a.key} partition: {reasons}")
        if set(known) - failed:
            raise RefimplCheckFailure(
                f"{a.key}: partition checks {sorted(set(known) - failed)} pass, but the adapter "
                "records them as divergences; the framework changed: update the adapter's "
                "partition divergences and the matrix (refimpl conformance --write)"
            )
        if failed:
            raise RefimplCheckFailure(f"{a.key}: partition\n\n{report.summary()}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, RefimplCheckFailure):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"refimpl adapter {self.name}"
