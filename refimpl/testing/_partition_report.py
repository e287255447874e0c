"""What :func:`refimpl.testing.check_partition_invariance` returns: the partition report."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import Literal

from refimpl.losses.partition import ScalingRule
from refimpl.testing._conformance import CheckResult, ConformanceError

__all__ = ["PartitionReport"]


@dataclass(frozen=True)
class PartitionReport:
    """What :func:`check_partition_invariance` found.

    Attributes
    ----------
    candidate : str
        The candidate, as ``module:qualname`` where it can be imported.
    mode : str
        The aggregation mode checked.
    rule : ScalingRule
        The scaling rule the run assumed (its all-reduce is how ranks were combined).
    array : str
        The candidate's array library and dtype.
    intent : {"global", "split"}
        ``global``: compared with the full-batch aggregation (any gap fails). ``split``: a
        per-sequence mode with local counts, compared with the rule's own weights; the
        dependence on the split is then reported, not failed.
    results : tuple of CheckResult
        ``finite``, ``gradient``, ``value``. The search stops at the first failing example;
        the checks that did not fail on it are reported passed.
    max_gap : float
        The largest relative gap between the rule's weights and the full-batch weights over the
        examples run (``split`` intent; 0 for ``global``).
    dependence : str
        The stated dependence of the example with the largest gap ("" when none).
    """

    candidate: str
    mode: str
    rule: ScalingRule
    array: str
    intent: Literal["global", "split"]
    results: tuple[CheckResult, ...] = field(default_factory=tuple)
    max_gap: float = 0.0
    dependence: str = ""

    @property
    def ok(self) -> bool:
        """True when every check passed."""
        return all(r.ok for r in self.results)

    @property
    def failures(self) -> tuple[CheckResult, ...]:
        """The results that did not pass."""
        return tuple(r for r in self.results if not r.ok)

    def __getitem__(self, name: str) -> CheckResult:
        """The result of check ``name`` (``finite``, ``gradient``, ``value``)."""
        short = name.removeprefix("partition.")
        for r in self.results:
            if r.name == short:
                return r
        raise KeyError(f"no check {name!r}; checks: {[r.name for r in self.results]}")

    def summary(self) -> str:
        """One line per check, the split dependence, then each failure with its reproduction."""
        lines = [
            f"refimpl partition invariance of {self.candidate} ({self.array}), mode "
            f"{self.mode!r}, rule {self.rule.describe()!r}, intent {self.intent}:"
        ]
        lines += [f"  {r.status:8s} {r.id}" for r in self.results]
        if self.dependence:
            lines.append(f"  the value depends on the split (max relative gap {self.max_gap:.3g}):")
            lines.append(textwrap.indent(self.dependence, "    "))
        lines += [r.render() for r in self.results if r.status != "passed"]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def raise_if_failed(self) -> None:
        """Raise :class:`~refimpl.testing.ConformanceError` with the summary unless ok."""
        if not self.ok:
            raise ConformanceError(self.summary())
