"""The shared parts of the validation tables (tests/test_validation_*.py, one per module).

Each case is ``(id, call, exception type, regex the message must match)``. Every message names the
parameter, the rule, the value received and the fix (see ``refimpl/_validation.py``), and every
refusal is an instance of refimpl's exception family (:class:`refimpl.RefimplError`), so that a
caller can catch "refimpl refused my input" in one clause.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest

from refimpl.errors import RefimplError


class Case(NamedTuple):
    id: str
    call: Callable[[], Any]
    error: type[Exception]
    match: str


def as_any(value: Any) -> Any:
    """A deliberately ill-typed argument, hidden from mypy."""
    return value


def check_refusal(case: Case) -> None:
    """The call raises ``case.error``, a member of the family, with a message that says the fix."""
    with pytest.raises(case.error) as info:
        case.call()
    assert isinstance(info.value, RefimplError), (
        f"{type(info.value).__module__}.{type(info.value).__qualname__} is not a "
        "refimpl.RefimplError: raise it through refimpl/_validation.py's builders"
    )
    message = str(info.value)
    assert re.search(case.match, message), f"message {message!r} does not match {case.match!r}"
    assert "got " in message or "must" in message, f"message does not state the rule: {message!r}"
