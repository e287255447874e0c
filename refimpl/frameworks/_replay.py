"""The committed matrix's counterexamples, tried first when a fresh run is checked against it.

A divergent check costs a search and then a shrink to the smallest failing input, and the shrink
is most of it (verl's ``policy_loss_clip_cov``: 34 s of CPU with it, 0.9 s without). When CI
checks that a fresh run agrees with the committed matrix, each check that diverged there is run
again with its committed counterexample as the first explicit example
(``check_conformance(examples=...)``): if it still fails, that input is the check's
counterexample, exactly as committed, and no search runs; if it now passes, the check searches
as in a full run, and whatever it finds differs from the commit. Checks that passed are searched
in full every time, so a framework or refimpl change that breaks one is found as before.

What the replay does not notice: a search that would now shrink to a different input while the
committed one still fails (for instance after a change to refimpl's strategies). That changes
no verdict, only the counterexample shown; ``refimpl conformance --write`` always searches from
scratch and shows it.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import numpy as np

__all__ = ["counterexamples", "parse_calls"]


def parse_calls(source: str) -> list[Any]:
    """The calls a report's counterexample text rebuilds (``calls = [((args), {kwargs}), ...]``).

    Examples
    --------
    >>> calls = parse_calls("calls = [\\n    ((np.array([0.5], dtype=np.float64),), {'cap': 2.0}),\\n]")
    >>> calls[0][0][0].dtype.name, calls[0][1]
    ('float64', {'cap': 2.0})
    """
    namespace: dict[str, Any] = {"__builtins__": {"float": float}, "np": np}
    namespace["Fraction"] = Fraction
    exec(compile(source, "<committed counterexample>", "exec"), namespace)
    calls: list[Any] = namespace["calls"]
    return calls


def counterexamples(entry: Mapping[str, Any]) -> dict[str, list[Any]]:
    """A committed entry's counterexample of each divergent check (the partition's are not
    replayed: its check takes no explicit examples), by check name.

    Examples
    --------
    >>> entry = {"divergences": [{"check": "values", "counterexample": "calls = [((), {})]"}]}
    >>> counterexamples(entry)
    {'values': [((), {})]}
    """
    return {
        d["check"]: parse_calls(d["counterexample"])
        for d in entry.get("divergences", [])
        if d.get("counterexample")
    }
