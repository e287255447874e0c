"""Test refimpl's contracts against your own implementation.

refimpl is an oracle: this subpackage is what a downstream project imports to check its own code
against it, in three ways (see the how-to guides):

- in its own tests, with the Hypothesis strategies of :mod:`refimpl.testing.strategies` and the
  tolerances of :mod:`refimpl.testing.tolerances`;
- with the conformance suite :func:`check_conformance`, which runs the named property checks of a spec
  against a candidate function and reports the smallest counterexample with a runnable reproduction
  (also available as a pytest plugin: ``pytest --refimpl-target=pkg.mod:fn --refimpl-spec=NAME``);
- on traces a trainer logged, with ``refimpl check TRACE --spec NAME`` (the CI gate);
- for a loss, whether the step's gradient depends on how the batch is split into micro-batches and
  ranks, with :func:`check_partition_invariance`.

The names load on first use (PEP 562): ``refimpl check`` imports :mod:`refimpl.testing.check_cli`
through this package, and a trace check needs neither Hypothesis nor the conformance machinery.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from refimpl.testing._conformance import (
        CheckResult,
        ConformanceError,
        ConformanceReport,
        Convention,
        check_conformance,
        check_names,
        conventions,
        reproduce,
        spec_names,
    )
    from refimpl.testing._partition import PartitionReport, check_partition_invariance

#: public name -> the private module that defines it
_HOME = {
    "CheckResult": "_conformance",
    "ConformanceError": "_conformance",
    "ConformanceReport": "_conformance",
    "Convention": "_conformance",
    "check_conformance": "_conformance",
    "check_names": "_conformance",
    "conventions": "_conformance",
    "reproduce": "_conformance",
    "spec_names": "_conformance",
    "PartitionReport": "_partition",
    "check_partition_invariance": "_partition",
}

__all__ = [
    "CheckResult",
    "ConformanceError",
    "ConformanceReport",
    "Convention",
    "PartitionReport",
    "check_conformance",
    "check_names",
    "check_partition_invariance",
    "conventions",
    "reproduce",
    "spec_names",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    # Shown as refimpl.testing.NAME in tracebacks and reprs, where users import them from.
    value.__module__ = __name__
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
