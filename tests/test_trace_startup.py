"""What ``refimpl check`` imports: the trace path loads neither Hypothesis nor SciPy nor pandas.

Each check runs in a fresh interpreter and prints the heavy modules it found in ``sys.modules``
afterwards: a statement about imports, not a timing (the start-up time itself is measured by
``benchmarks/bench_trace_gate.py`` and quoted on the trace how-to page).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

#: modules a trace check must not import: the conformance machinery and what it brings
HEAVY = ("hypothesis", "scipy.stats", "pandas", "refimpl.testing._conformance")

# The probe runs the ``refimpl`` command's own entry point (``refimpl.cli.console``), which runs the
# ``atexit`` handlers and then leaves without the interpreter's teardown; the probe's report is one of
# those handlers. Calling ``main`` and returning instead would add a teardown that the command never
# runs, and with it the native thread pools' destructors (pyarrow's can abort a process at exit:
# apache/arrow#34314).
_PROBE = """
import atexit, json, sys
{preload}
from refimpl.cli import console
atexit.register(lambda: print(json.dumps([m for m in {heavy!r} if m in sys.modules]), flush=True))
console()
"""


def run_isolated(*argv: str, preload: str = "") -> dict[str, object]:
    """``refimpl`` run with ``argv`` in a fresh interpreter (after ``import preload``, if given):
    its exit code and the heavy modules loaded by the end."""
    code = _PROBE.format(heavy=HEAVY, preload=f"import {preload}" if preload else "")
    done = subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    heavy: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return {"code": done.returncode, "heavy": heavy, "stderr": done.stderr}


TRACES = {
    "tis": ("csv", "logp_target,logp_behavior,weight\n-1,-1,1.0\n", ["--param", "cap=2"]),
    "staleness_mask": ("csv", "staleness,weight\n0,1\n", ["--param", "eta=1"]),
    "staleness": ("csv", "trained_step,versions,staleness\n3,2 3,1\n", []),
    "tis_sequence": (
        "csv",
        'logp_target,logp_behavior,weight\n"[-1,-2]","[-1,-2]",1.0\n',
        ["--param", "cap=2"],
    ),
    "masked_is_geometric": (
        "csv",
        "logp_target,logp_behavior,weight\n-1 -2,-1 -2,1.0\n",
        ["--param", "low=0.5", "--param", "high=2"],
    ),
    "effective_sample_size": (
        "jsonl",
        '{"weight": [1.0, 1.0], "ess": 1.0}\n',
        ["--param", "ess=fraction", "--dtype", "float32"],
    ),
    "masking_diagnostics": (
        "jsonl",
        '{"staleness": [0, 1], "weight": [1.0, 0.0], "effective_sample_size": 1.0}\n',
        ["--param", "statistic=effective_sample_size"],
    ),
    "kimi_length_reward": (
        "jsonl",
        '{"length": [10, 30], "correct": [1, 0], "reward": [0.5, -0.5]}\n',
        ["--param", "scope=batch", "--dtype", "float32"],
    ),
    "vtrace": (
        "jsonl",
        '{"v_tm1": [0.0], "v_t": [0.0], "r_t": [1.0], "discount_t": [0.9], "rho_tm1": [1.0], '
        '"pg_advantage": [1.0]}\n',
        ["--param", "output=pg_advantage", "--param", "lambda_=0.9"],
    ),
}


@pytest.mark.parametrize("spec", sorted(TRACES))
def test_a_one_row_check_imports_neither_hypothesis_nor_scipy_stats(
    spec: str, tmp_path: Path
) -> None:
    suffix, text, params = TRACES[spec]
    trace = tmp_path / f"t.{suffix}"
    trace.write_text(text)
    got = run_isolated("check", str(trace), "--spec", spec, "--no-progress", *params)
    assert (got["code"], got["heavy"]) == (0, []), got["stderr"]


def test_help_imports_nothing_heavy() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\nfrom refimpl.cli import main\n"
            "try:\n    main(['check', '--help'])\nexcept SystemExit:\n    pass\n"
            f"print([m for m in {HEAVY!r} if m in sys.modules])",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stderr


def test_the_probe_sees_an_import_of_the_conformance_machinery(tmp_path: Path) -> None:
    """The check above can fail: a check whose specs loaded the conformance spec of ESS (as the
    batch specs once did) would bring Hypothesis, and the probe reports it."""
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"weight": [1.0, 1.0], "ess": 2.0}\n')
    argv = ("check", str(trace), "--spec", "effective_sample_size", "--no-progress")
    got = run_isolated(*argv, preload="refimpl.testing._specs_more")
    assert got["code"] == 0, got["stderr"]
    assert "hypothesis" in got["heavy"]  # type: ignore[operator]


def test_refimpl_testing_loads_its_names_on_first_use() -> None:
    code = (
        "import sys, refimpl.testing as t\n"
        "before = 'hypothesis' in sys.modules\n"
        "f = t.check_conformance\n"
        "print(before, 'hypothesis' in sys.modules, f.__module__, t.PartitionReport.__module__,"
        " sorted(set(t.__all__) - set(dir(t))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.split() == ["False", "True", "refimpl.testing", "refimpl.testing", "[]"]


def test_an_unknown_name_of_refimpl_testing_is_an_attribute_error() -> None:
    import refimpl.testing

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        refimpl.testing.nope  # noqa: B018


def test_each_reference_is_found_in_its_own_module_as_the_flat_name() -> None:
    """The check resolves a spec's reference from the module that defines it (not the whole flat
    API, which loads SciPy); it must be the very object ``refimpl.NAME`` is."""
    import refimpl
    from refimpl.testing._trace_spec import References
    from refimpl.testing._trace_specs import SPECS

    found = References()
    for spec in SPECS.values():
        assert getattr(found, spec.reference) is getattr(refimpl, spec.reference), spec.name
    with pytest.raises(AttributeError, match="no reference named 'nope'"):
        found.nope  # noqa: B018
