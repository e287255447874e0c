"""The conformance matrix, rerun on the installed frameworks, agrees with the committed file."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from refimpl.cli import main
from refimpl.frameworks._matrix import MATRIX_PATH, load_matrix
from refimpl.frameworks._registry import TESTED_VERSIONS


@pytest.mark.parametrize("framework", list(TESTED_VERSIONS))
def test_a_fresh_run_agrees_with_the_committed_matrix(
    framework: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # `refimpl conformance --check --framework F`, in this process (the frameworks are imported once
    # per worker), one framework a test so that the stage's two workers share the matrix.
    code = main(["conformance", "--check", "--framework", framework])
    out = capsys.readouterr().out
    assert code == 0, f"refimpl conformance --check --framework {framework} exited {code}:\n{out}"
    assert "no change against" in out


def test_the_matrix_holds_only_the_tested_frameworks() -> None:
    """Run framework by framework, the check would miss entries of a framework no longer tested."""
    found = {e["framework"] for e in load_matrix(MATRIX_PATH)["entries"]}
    assert found == set(TESTED_VERSIONS), found ^ set(TESTED_VERSIONS)


#: Runs each reproduction given on stdin (a JSON list) as a script of its own namespace, in one
#: interpreter (the frameworks are imported once), and prints what each raised.
_PASTE = """
import json, sys, traceback
out = []
for source in json.load(sys.stdin):
    try:
        exec(compile(source, "<reproduction>", "exec"), {"__name__": "__main__"})
        out.append(None)
    except BaseException:
        out.append(traceback.format_exc())
print(json.dumps(out))
"""


def test_each_defect_reproduction_fails_when_pasted() -> None:
    """A defect's reproduction is a bug report: run as a script, it fails the way the matrix says."""
    defects: dict[str, dict[str, Any]] = {}
    for e in load_matrix(MATRIX_PATH)["entries"]:
        for d in [*e["divergences"], *((e["partition"] or {}).get("divergences", []))]:
            if d["classification"] == "defect":
                defects.setdefault(e["key"], d)  # one per adapter: its checks share the failure
    assert defects, "the matrix records no defect: drop this test or the word from the docs"
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", _PASTE],
        input=json.dumps([d["reproduction"] for d in defects.values()]),
        capture_output=True,
        text=True,
        check=True,
    )
    raised = json.loads(done.stdout.strip().splitlines()[-1])
    for (key, d), error in zip(defects.items(), raised, strict=True):
        assert error is not None, f"{key}: the reproduction of {d['check']} passes"
        assert d["message"].split(":")[0].split()[-1] in error, error[-800:]


def _entry(key: str) -> dict[str, Any]:
    return next(e for e in load_matrix(MATRIX_PATH)["entries"] if e["key"] == key)


def test_a_replayed_counterexample_stands_for_the_search_and_a_stale_one_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`--check` tries each committed counterexample first. One that still fails is the check's
    counterexample and nothing is searched for it; one that now passes does not hide the
    divergence: the check searches and finds the committed counterexample again."""
    from refimpl.frameworks import adapter
    from refimpl.frameworks._matrix import changes, matrix_entry
    from refimpl.frameworks._replay import counterexamples
    from refimpl.testing import _conformance_checks
    from refimpl.testing._search import find

    committed = _entry("areal.kl_k3")  # one divergence: huge_log_ratios_stay_finite
    searched: list[str] = []

    def counted(strategy: Any, condition: Any, **kwargs: Any) -> Any:
        searched.append(condition.__self__.check.name)
        return find(strategy, condition, **kwargs)

    monkeypatch.setattr(_conformance_checks, "find", counted)
    replay = counterexamples(committed)
    fresh = matrix_entry(adapter("areal.kl_k3"), replay=replay)
    versions = {"versions": {"areal": committed["version"]}}
    assert changes({**versions, "entries": [fresh]}, {**versions, "entries": [committed]}) == []
    assert "huge_log_ratios_stay_finite" not in searched
    assert {"values", "gradient"} <= set(searched)  # the checks that passed are searched

    (args, kwargs), *_ = replay["huge_log_ratios_stay_finite"]
    benign = [((args[0] * 0.0, args[1] * 0.0), kwargs)]  # log-ratio 0: the check passes on it
    searched.clear()
    stale = matrix_entry(adapter("areal.kl_k3"), replay={"huge_log_ratios_stay_finite": benign})
    assert changes({**versions, "entries": [stale]}, {**versions, "entries": [committed]}) == []
    assert "huge_log_ratios_stay_finite" in searched
