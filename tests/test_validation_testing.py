"""Bad calls to refimpl.testing (the conformance suite) and the messages they give.

See tests/_validation_table.py; every refusal must also be an instance of
:class:`refimpl.RefimplError`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _validation_table import Case, as_any, check_refusal

import refimpl
import refimpl.frameworks._registry as registry
from refimpl.cli import main
from refimpl.testing import ConformanceError, check_conformance


def _fails_conformance() -> None:
    def keeps_nothing(s: object, *, eta: int) -> object:
        return refimpl.staleness_mask(s, eta=eta) * 0.0  # type: ignore[arg-type]

    report = check_conformance(keeps_nothing, spec="staleness_mask", max_examples=10)
    report.raise_if_failed()


def _testing_cases() -> list[Case]:
    return [
        Case(
            "testing-unknown-spec",
            lambda: check_conformance(refimpl.staleness_mask, spec="nope"),
            ValueError,
            r"spec must be one of 'effort_penalty'",
        ),
        Case(
            "testing-max-examples-zero",
            lambda: check_conformance(
                refimpl.staleness_mask, spec="staleness_mask", max_examples=0
            ),
            ValueError,
            r"max_examples must be an int >= 1 and <= 1000000; got max_examples=0",
        ),
        Case(
            "testing-max-examples-that-never-ends",
            lambda: check_conformance(
                refimpl.staleness_mask, spec="staleness_mask", max_examples=10**20
            ),
            ValueError,
            r"max_examples must be an int >= 1 and <= 1000000; got max_examples=10{20}\. Pass",
        ),
        Case(
            "testing-checks-a-string",
            lambda: check_conformance(
                refimpl.staleness_mask, spec="staleness_mask", checks=as_any("binary")
            ),
            TypeError,
            r"checks must be a list of check names .*got checks='binary'.* checks=\['binary'\]",
        ),
        Case(
            "testing-derandomize-not-a-bool",
            lambda: check_conformance(
                refimpl.staleness_mask, spec="staleness_mask", derandomize=as_any("no")
            ),
            TypeError,
            r"derandomize must be a bool; got derandomize='no' of type str",
        ),
        Case(
            "testing-example-with-a-keyword-the-spec-lacks",
            lambda: check_conformance(
                refimpl.staleness_mask,
                spec="staleness_mask",
                examples=[[((np.array([0, 1]),), {"etaa": 1})]],
            ),
            ValueError,
            r"examples must hold calls that the reference of spec 'staleness_mask' accepts.*"
            r"unexpected keyword argument 'etaa'",
        ),
        Case(
            "testing-expected-failures-a-string",
            lambda: check_conformance(
                refimpl.staleness_mask, spec="staleness_mask", expected_failures="x"
            ),
            TypeError,
            r"expected_failures must be a mapping .* Wrap it in a list",
        ),
        Case(
            "testing-expected-failures-unknown-check",
            lambda: check_conformance(
                refimpl.staleness_mask, spec="staleness_mask", expected_failures=["nope"]
            ),
            ValueError,
            r"expected_failures names a check that spec 'staleness_mask' does not have",
        ),
        Case(
            "testing-unknown-dtype",
            lambda: check_conformance(
                refimpl.staleness_mask, spec="staleness_mask", dtype="float8"
            ),
            ValueError,
            r"dtype must be one of 'float64', 'float32', 'bfloat16', 'float16'",
        ),
        Case(
            "testing-unknown-convention",
            lambda: check_conformance(
                refimpl.staleness_mask, spec="staleness_mask", conventions={"zzz": 1}
            ),
            ValueError,
            r"conventions must use only the convention keys of spec 'staleness_mask'",
        ),
        Case(
            "testing-candidate-no-colon",
            lambda: check_conformance("no_colon", spec="staleness_mask"),
            ValueError,
            r'candidate must read "module:function".*Separate the module and the function',
        ),
        Case(
            "testing-candidate-not-callable",
            lambda: check_conformance(as_any(42), spec="staleness_mask"),
            TypeError,
            r"candidate must be a callable or 'package.module:function'; got 42",
        ),
        Case(
            "testing-failed-conformance",
            _fails_conformance,
            AssertionError,
            r"staleness_mask.* failed",
        ),
    ]


CASES: list[Case] = _testing_cases()


def test_a_failed_conformance_check_is_in_the_family_and_an_assertion() -> None:
    assert issubclass(ConformanceError, refimpl.RefimplError)
    assert issubclass(ConformanceError, AssertionError)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_call_raises_a_message_that_says_how_to_fix_it(case: Case) -> None:
    check_refusal(case)


def test_conformance_cli_refuses_a_bad_example_count_with_status_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for value in ("-5", "0", "1000001"):
        assert main(["conformance", "--max-examples", value]) == 2  # a usage error
        err = capsys.readouterr().err
        assert f"--max-examples must be >= 1 and <= 1000000; got --max-examples={value}" in err


def test_conformance_cli_without_the_frameworks_fails_the_gate_with_status_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # not a usage error (the call is right, this machine cannot run it), and not a pass
    monkeypatch.setattr(registry, "installed_version", lambda name: None)
    assert main(["conformance"]) == 1
    assert "none of the frameworks is installed" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "reads"),
    [("1e400", "infinity"), ("-1e400", "-infinity"), ("1e-400", "0")],
)
def test_check_cli_quotes_a_number_float64_cannot_hold(
    text: str, reads: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("log_prob_trainer,log_prob_behavior,weight\n0,0,1\n")
    params = ["--param", f"cap={text}"] if text != "1e-400" else ["--param", "cap=2"]
    params += ["--param", f"lower={text}"] if text == "1e-400" else []
    assert main(["check", "--spec", "tis", *params, str(trace)]) == 2
    err = capsys.readouterr().err
    assert f"={text!r}, which float64 reads as {reads}." in err, err
    assert "got cap=inf" not in err


def test_check_cli_leaves_an_inf_written_as_such_to_the_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("log_prob_trainer,log_prob_behavior,weight\n0,0,1\n")
    assert main(["check", "--spec", "tis", "--param", "cap=inf", str(trace)]) == 2
    err = capsys.readouterr().err
    assert "cap must be finite" in err, err  # the spec's own rule, on the value as written
    assert "float64 reads as" not in err
    main(["check", "--spec", "tis", "--param", "cap=2", "--param", "lower=0e5", str(trace)])
    assert "--param" not in capsys.readouterr().err  # 0e5 is 0 as written: accepted


def test_conformance_cli_without_its_committed_matrix_refuses_with_status_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # an unusable input, like a bad option: the run is refused before any framework is called
    monkeypatch.setattr(
        registry, "installed_version", lambda name: "1.0" if name == "trl" else None
    )
    missing = tmp_path / "no-matrix.json"
    assert main(["conformance", "--framework", "trl", "--matrix", str(missing)]) == 2
    assert f"no committed matrix at {missing}" in capsys.readouterr().err
