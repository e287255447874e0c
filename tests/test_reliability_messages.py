"""User code's own text in a report: an exception whose ``__str__`` raises, a 10 MB message.

A candidate's or a sweep cell's exception becomes a message (a check's status, a cell's error
column). ``str(exc)`` is user code too: one that raises escaped ``check_conformance`` and ended a
sweep with a traceback, and a message of megabytes was copied whole into the report, the results
table and the journal. Both are now quoted through ``refimpl._io.user_text``: never raising, at
most a short excerpt. Each property also runs against the wrong variant (plain ``str``/``repr``,
as before) and must reject it.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects
from numpy.typing import ArrayLike

from refimpl import sweep
from refimpl.sweep import cells
from refimpl.testing import _conformance_guard as guard
from refimpl.testing import _conformance_runner as runner
from refimpl.testing import check_conformance

_HERE = __name__
_HUGE = 10 << 20  # a 10 MB message
_SHORT = 4000  # a report's message stays far below this


class BrokenStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


class BrokenRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def _raise(how: str) -> None:
    if how == "broken_str":
        raise BrokenStr
    if how == "huge":
        raise ValueError("z" * _HUGE)
    if how == "exit_broken":
        sys.exit(BrokenRepr())  # type: ignore[arg-type]
    if how == "exit_huge":
        sys.exit("q" * _HUGE)


_HOWS = ["broken_str", "huge", "exit_broken", "exit_huge"]


def cell(params: dict[str, Any], seed: int) -> dict[str, float]:
    _raise(params["how"])
    return {"ok": 1.0}


def check_a_candidate_s_text_is_quoted_safely() -> None:
    for how in _HOWS:

        def candidate(s: ArrayLike, *, eta: int, how: str = how) -> Any:
            _raise(how)
            return (np.asarray(s) <= eta).astype(np.float64)

        try:
            report = check_conformance(
                candidate, spec="staleness_mask", max_examples=2, checks=["keeps_at_bound"]
            )
        except RuntimeError as exc:
            raise AssertionError(f"{how}: the candidate's str() escaped: {exc!r}") from None
        (result,) = report.results
        assert result.status == "raised", (how, result.render())
        assert len(result.message) < _SHORT, (how, len(result.message))
        assert len(report.summary()) < 2 * _SHORT, (how, len(report.summary()))


def test_a_candidate_whose_exception_cannot_be_printed_or_is_huge_is_reported_briefly() -> None:
    check_a_candidate_s_text_is_quoted_safely()


def test_the_candidate_text_check_rejects_plain_str(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = lambda value, *, quoted=False, limit=0: repr(value) if quoted else str(value)  # noqa: E731
    monkeypatch.setattr(runner, "user_text", plain)
    monkeypatch.setattr(guard, "user_text", plain)
    rejects(check_a_candidate_s_text_is_quoted_safely)


def check_a_cell_s_text_is_quoted_safely() -> None:
    grid = {"sweep": {"kind": f"{_HERE}:cell"}, "axes": {"how": _HOWS}}
    try:
        rows = sweep.run(grid, engine="serial").to_pylist()
    except RuntimeError as exc:
        raise AssertionError(f"a cell's str() ended the sweep: {exc!r}") from None
    assert [r["status"] for r in rows] == ["error"] * len(_HOWS), rows
    for r in rows:
        assert len(r["error"]) < _SHORT, (r["how"], len(r["error"]))
    broken = next(r["error"] for r in rows if r["how"] == "broken_str")
    assert broken.startswith("BrokenStr: <a BrokenStr whose str() raised RuntimeError>"), broken


def test_a_cell_whose_exception_cannot_be_printed_or_is_huge_is_an_error_row() -> None:
    check_a_cell_s_text_is_quoted_safely()


def test_the_cell_text_check_rejects_plain_str(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = lambda value, *, quoted=False, limit=0: repr(value) if quoted else str(value)  # noqa: E731
    monkeypatch.setattr(cells, "user_text", plain)
    rejects(check_a_cell_s_text_is_quoted_safely)
