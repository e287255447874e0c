"""Bad calls to refimpl.sweep (and the ``module:function`` resolver) and the messages they give.

See tests/_validation_table.py; every refusal must also be an instance of
:class:`refimpl.RefimplError`.
"""

from __future__ import annotations

import pytest
from _validation_table import Case, as_any, check_refusal

from refimpl import sweep
from refimpl._imports import import_object
from refimpl.sweep import GridError, parse_grid
from refimpl.sweep.kinds import check_parameters, resolve_kind

BUSY = {"sweep": {"kind": "busy"}, "fixed": {"draws": 10}}


def _sweep_cases() -> list[Case]:
    return [
        Case(
            "sweep-engine-unknown",
            lambda: sweep.run(BUSY, engine="gpu"),
            ValueError,
            r"engine must be one of local, dask, serial; got engine='gpu'",
        ),
        Case(
            "sweep-workers-zero",
            lambda: sweep.run(BUSY, workers=0),
            ValueError,
            r"workers must be an integer in \[1, 1024\] \(processes to start\); got workers=0",
        ),
        Case(
            "sweep-grid-not-a-grid",
            lambda: sweep.run(as_any(42)),
            TypeError,
            r"grid must be a Grid, a table \(dict\) or the path of a grid file; got grid=42 of type int",
        ),
        Case(
            "sweep-grid-empty-axis",
            lambda: parse_grid({"sweep": {"kind": "busy"}, "axes": {"eta": []}}),
            GridError,
            r"axes.eta must be a non-empty list",
        ),
        Case(
            "sweep-kind-unknown",
            lambda: resolve_kind("nope"),
            ValueError,
            r"unknown cell kind 'nope'; built-in kinds: busy",
        ),
        Case(
            "sweep-kind-no-module",
            lambda: resolve_kind("no_such_module_xyz:f"),
            ValueError,
            r"cell kind module 'no_such_module_xyz' cannot be imported",
        ),
        Case(
            "sweep-kind-not-callable",
            lambda: resolve_kind("os:sep"),
            TypeError,
            r"cell kind must be callable; got cell kind='os:sep', which names a str",
        ),
        Case(
            "sweep-busy-without-draws",
            lambda: sweep.kinds.busy({}, 0),
            ValueError,
            r"busy needs the parameter draws",
        ),
        Case(
            "sweep-law-not-a-name",
            lambda: check_parameters("closed_form", {"function": "expected_max", "law": 3}),
            TypeError,
            r"law must be the name of a scipy.stats distribution; got law=3 of type int",
        ),
        Case(
            "sweep-law-args-not-a-table",
            lambda: sweep.kinds.closed_form(
                {"function": "expected_max", "law": "expon", "law_args": 1, "n": 2}, 0
            ),
            TypeError,
            r"law_args must be a table of the law's parameters; got law_args=1",
        ),
        Case(
            "imports-no-colon",
            lambda: import_object("os.path.join", what="candidate"),
            ValueError,
            r'candidate must read "module:function" with both parts given.*Separate the module',
        ),
        Case(
            "imports-no-attribute",
            lambda: import_object("os.path:nope", what="candidate"),
            ValueError,
            r"candidate must name an attribute of its module; got candidate='os.path:nope', and module 'os.path' has no attribute 'nope'",
        ),
    ]


CASES: list[Case] = _sweep_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_call_raises_a_message_that_says_how_to_fix_it(case: Case) -> None:
    check_refusal(case)
