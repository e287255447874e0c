"""Hypothesis profiles for the test suite.

- ``ci``: derandomized (same examples every run), no deadline; loaded when the ``CI`` variable is set.
- ``dev``: the default for local runs: random examples, fewer of them, no deadline.
- ``thorough``: many examples, for runs outside the gate:
  ``HYPOTHESIS_PROFILE=thorough pytest``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=60,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev",
    deadline=None,
    max_examples=40,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],  # a wall-clock check: load would decide it
)
settings.register_profile(
    "thorough", deadline=None, max_examples=2_000, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))
