"""Run a property against a deliberately wrong variant: the property must fail on it.

A test that cannot fail is a defect. Each property of the suite is therefore also run against a
wrong implementation (a sign error, a strict inequality, a time-major batch, ...), and must
reject it. These helpers are what every test module uses for that:

- :func:`rejects` runs a property (a Hypothesis test, or a plain check with its arguments) and
  passes only if the property fails;
- :func:`run_property` runs a Hypothesis property as it is (on the right implementation).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import Phase, settings

__all__ = ["QUICK_REJECTION", "rejects", "run_property"]

#: The search for a counterexample against a wrong variant: no shrinking (only finding one
#: matters, which keeps it fast), derandomized with a fixed budget so that the outcome does not
#: depend on the Hypothesis profile (a rejection that depended on luck would be a flaky test).
QUICK_REJECTION = settings(
    phases=[Phase.explicit, Phase.generate], database=None, derandomize=True, max_examples=200
)


def run_property(test: Callable[[], None]) -> None:
    """Run a Hypothesis test function (a zero-argument callable made by ``given``)."""
    test()


def rejects(check: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """The property ``check`` must fail (raise ``AssertionError``) on a wrong variant.

    ``check`` is either a Hypothesis test made by ``given`` (run with :data:`QUICK_REJECTION`;
    Hypothesis re-raises the falsifying error, or an ``ExceptionGroup`` of several) or a plain
    function, called with ``args`` and ``kwargs``.
    """
    run = QUICK_REJECTION(check) if hasattr(check, "hypothesis") else check
    with pytest.raises((AssertionError, ExceptionGroup)):
        run(*args, **kwargs)
