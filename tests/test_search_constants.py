"""The conformance searches draw the same examples whatever literals the loaded local modules hold."""

from __future__ import annotations

from typing import Any

import hypothesis
import pytest
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample
from hypothesis.internal.conjecture import providers
from hypothesis.internal.constants_ast import Constants

from refimpl.testing._search import find, without_local_constants

#: a literal no module here holds, planted as if a local module had it in its source
PLANTED = 7.123456789


def _draws(search: Any) -> list[float]:
    seen: list[float] = []

    def never(x: float) -> bool:
        seen.append(x)
        return False

    config = settings(max_examples=300, derandomize=True, database=None, phases=[Phase.generate])
    with pytest.raises(NoSuchExample):
        search(st.floats(-10.0, 10.0), never, settings=config)
    return seen


def _plant(monkeypatch: pytest.MonkeyPatch, *values: float) -> None:
    """Local constants for every search that follows, as new literals in refimpl's source would be."""
    constants = Constants(floats=set(values))
    monkeypatch.setattr(providers, "_get_local_constants", lambda: constants)
    providers.CONSTANTS_CACHE.cache.clear()


def test_the_search_ignores_local_constants(monkeypatch: pytest.MonkeyPatch) -> None:
    _plant(monkeypatch, PLANTED)
    with_planted = _draws(find)
    _plant(monkeypatch, 0.3, 2.75)
    assert PLANTED not in with_planted
    assert _draws(find) == with_planted


def test_a_plain_hypothesis_search_draws_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """The wrong variant: without the set-aside, the planted literal is drawn and the draws move."""
    _plant(monkeypatch, PLANTED)
    with_planted = _draws(hypothesis.find)
    _plant(monkeypatch, 0.3, 2.75)
    assert PLANTED in with_planted
    assert _draws(hypothesis.find) != with_planted


def test_the_hook_is_restored_after_the_block() -> None:
    before = providers._get_local_constants
    with without_local_constants():
        assert len(providers._get_local_constants()) == 0
    assert providers._get_local_constants is before
