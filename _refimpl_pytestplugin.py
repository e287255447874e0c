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
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

_KEY: pytest.StashKey[dict[str, Any]] = pytest.StashKey()


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
    if state is None:
        return
    from refimpl.testing import check_names

    spec = state["spec"]
    _require_importable(state["target"])
    if config.getoption("--refimpl-only") and items:
        config.hook.pytest_deselected(items=list(items))
        items.clear()
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
