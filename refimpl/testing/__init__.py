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
"""

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

# Shown as refimpl.testing.NAME in tracebacks and reprs, where users import them from.
for _public in (
    CheckResult,
    ConformanceError,
    ConformanceReport,
    Convention,
    PartitionReport,
    check_conformance,
    check_names,
    check_partition_invariance,
    conventions,
    reproduce,
    spec_names,
):
    _public.__module__ = __name__
del _public

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
