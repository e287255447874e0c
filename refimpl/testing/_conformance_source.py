"""What a report shows of a failure: the counterexample as Python source, and a runnable
reproduction that calls the candidate on it through :func:`~refimpl.testing.reproduce`.
"""

from __future__ import annotations

import inspect
import math
import textwrap
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from refimpl.testing._conformance_runner import _Runner
from refimpl.testing._engine import Call

__all__: list[str] = []


def _literal(value: Any) -> str:
    """Python source that rebuilds ``value`` (numpy arrays, floats, Fractions, containers)."""
    if isinstance(value, np.ndarray):
        return f"np.array({_literal(value.tolist())}, dtype=np.{value.dtype.name})"
    if isinstance(value, np.generic):
        return _literal(value.item())
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f"float({str(value)!r})"
    if isinstance(value, Fraction):
        return f"Fraction({value.numerator}, {value.denominator})"
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    if isinstance(value, tuple):
        inner = ", ".join(_literal(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_literal(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _calls_source(calls: Sequence[Call]) -> str:
    rows = [f"    ({_literal(args)}, {_literal(kwargs)})," for args, kwargs in calls]
    return "calls = [\n" + "\n".join(rows) + "\n]"


def _size(calls: list[Call]) -> int:
    """The number of array elements in the calls."""
    total = 0
    for args, kwargs in calls:
        for v in (*args, *kwargs.values()):
            total += int(np.size(v)) if isinstance(v, np.ndarray) else 1
    return total


def _reproduction(
    runner: _Runner,
    calls: list[Call],
    import_line: str,
    setup: str | None,
    xp_name: str,
    declared: Mapping[str, Any],
) -> str:
    source = _calls_source(calls)
    options = [f"spec={runner.spec.name!r}", f"check={runner.check.name!r}", "calls=calls"]
    if xp_name != "numpy":
        options.append(f"xp={xp_name!r}")
    if runner.bridge.dtype_name != "float64":
        options.append(f"dtype={runner.bridge.dtype_name!r}")
    if declared:
        options.append(f"conventions={dict(declared)!r}")
    if runner.override is not None:
        options.append(f"rtol={runner.override.rtol!r}, atol={runner.override.atol!r}")
    try:
        check_source = inspect.getsource(runner.check.function)
    except (OSError, TypeError):
        check_source = f"{runner.check.function.__qualname__} (source not available)\n"
    lines = [
        f"# refimpl conformance check {runner.spec.name}.{runner.check.name}:",
        f"# {runner.check.description}",
        f"# candidate arrays: {runner.bridge.describe()}; conventions: {runner.conventions}",
        *([setup.strip(), ""] if setup else []),
        *(["from fractions import Fraction"] if "Fraction(" in source else []),
        "import numpy as np",
        "",
        "from refimpl.testing import reproduce",
        import_line,
        "",
        source,
        "reproduce(candidate, " + ", ".join(options) + ")",
        "",
        "# the check that fails (refimpl.testing):",
        textwrap.indent(textwrap.dedent(check_source).strip(), "# "),
    ]
    return "\n".join(lines) + "\n"


def _assume_reproduction(check: str, calls: list[Call], assume_source: str) -> str:
    """The source that calls ``assume=`` on a counterexample's keyword arguments: where it is
    ``assume=`` that raised, exited or flooded the output, not the candidate."""
    source = _calls_source(calls)
    lines = [
        f"# refimpl conformance check {check}: assume= (not the candidate) misbehaved on:",
        *(["from fractions import Fraction"] if "Fraction(" in source else []),
        "import numpy as np",
        "",
        "assume = ...  # your assume= function:",
        textwrap.indent(assume_source.strip(), "# "),
        "",
        source,
        "for _, kwargs in calls:",
        "    assume(kwargs)",
    ]
    return "\n".join(lines) + "\n"
