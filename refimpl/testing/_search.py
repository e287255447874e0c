"""The counterexample searches of the conformance checks, independent of the code around them.

Hypothesis (6.131 and later) mixes into its draws the numeric and string literals it finds in the
*local* modules loaded at the time (any module outside site-packages: an editable install of
refimpl, the user's own package, the tests' helpers). That helps a user's own tests find edge cases,
but it makes a derandomized search depend on what else happens to be imported and on every literal
anywhere in the checkout: adding an unrelated constant to refimpl, or importing one more module
before a check, changes the examples drawn, and with them a borderline verdict or the shrunk
counterexample committed in the conformance matrix.

:func:`find` runs :func:`hypothesis.find` with the local constants set aside, so a check's draws
depend only on its strategy, its settings and the installed Hypothesis. Hypothesis's own global
constants (``0.5``, ``1e-5``, ``2**63``, …) are still drawn. The set-aside uses a private hook of
Hypothesis; where a version lacks it, nothing is changed (such versions draw no local constants).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import hypothesis
from hypothesis import settings as Settings
from hypothesis.strategies import SearchStrategy

__all__ = ["find", "without_local_constants"]

T = TypeVar("T")


def _providers() -> Any:
    try:
        return importlib.import_module("hypothesis.internal.conjecture.providers")
    except ImportError:  # a Hypothesis without the module has no local constants either
        return None


@contextmanager
def without_local_constants() -> Iterator[None]:
    """Within the block, Hypothesis draws no constants taken from local modules' source.

    Examples
    --------
    >>> from hypothesis.internal.conjecture import providers
    >>> import refimpl.losses  # its literals count as local constants in an editable install
    >>> with without_local_constants():
    ...     len(providers._get_local_constants())
    0
    """
    providers = _providers()
    original = getattr(providers, "_get_local_constants", None)
    if original is None or not hasattr(providers, "Constants"):
        yield
        return
    empty = providers.Constants()
    # The permitted-constants cache holds local constants by key: empty it on the way in and out.
    providers.CONSTANTS_CACHE.cache.clear()
    providers._get_local_constants = lambda: empty
    try:
        yield
    finally:
        providers._get_local_constants = original
        providers.CONSTANTS_CACHE.cache.clear()


def find(strategy: SearchStrategy[T], condition: Callable[[T], bool], *, settings: Settings) -> T:
    """:func:`hypothesis.find` with the local constants set aside (see the module docstring)."""
    with without_local_constants():
        return hypothesis.find(strategy, condition, settings=settings)
