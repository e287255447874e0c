"""Each framework's staleness setting in refimpl's terms: defined in :mod:`refimpl.staleness.frameworks`.

Re-exported here so that :mod:`refimpl.frameworks` keeps them beside its adapters; the statements
are about staleness, and the root API flattens them from the staleness package, below the
frameworks.
"""

from __future__ import annotations

from refimpl.staleness.frameworks import _FRAMEWORKS as _FRAMEWORKS
from refimpl.staleness.frameworks import (
    FrameworkStalenessBound,
    areal_staleness_bound,
    framework_staleness_bound,
    skyrl_staleness_bound,
    trl_staleness_bound,
    verl_off_policy_bound,
    verl_staleness_bound,
)

__all__ = [
    "FrameworkStalenessBound",
    "areal_staleness_bound",
    "framework_staleness_bound",
    "skyrl_staleness_bound",
    "trl_staleness_bound",
    "verl_off_policy_bound",
    "verl_staleness_bound",
]
