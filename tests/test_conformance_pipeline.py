"""Each step of check_conformance alone: resolve the spec, convert the arguments, run a check,
classify a counterexample, report; and the guard that calls a candidate.

check_conformance is ``resolve_spec`` → ``prepare_run`` → ``run_check`` per check (which finds a
counterexample and classifies it) → ``_report``. Each step is tested here on its own inputs, with
the wrong variant that it must tell apart.
"""

from __future__ import annotations

import re
import signal
import types
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import Phase
from numpy.typing import ArrayLike

import refimpl
from refimpl.errors import InvalidArgument, InvalidArgumentType
from refimpl.testing import check_conformance, check_names
from refimpl.testing._conformance import _report
from refimpl.testing._conformance_checks import classify, find_counterexample, run_check
from refimpl.testing._conformance_guard import (
    OUTPUT_LIMIT,
    CandidateMisbehaved,
    call_candidate,
    found_problem,
    fresh_copy,
    output_kind_problem,
    user_interrupts,
)
from refimpl.testing._conformance_plan import Run, prepare_run
from refimpl.testing._conformance_runner import _Runner
from refimpl.testing._conformance_specs import resolve_spec, spec_names


def mask(s: ArrayLike, *, eta: int) -> Any:
    return (np.asarray(s) <= eta).astype(np.float64)


def strict_mask(s: ArrayLike, *, eta: int) -> Any:
    return (np.asarray(s) < eta).astype(np.float64)


def raising_mask(s: ArrayLike, *, eta: int) -> Any:
    raise RuntimeError("not implemented")


_DEFAULTS: dict[str, Any] = {
    "xp": None,
    "dtype": None,
    "conventions": None,
    "setup": None,
    "rtol": None,
    "atol": None,
    "assume": None,
    "expected_failures": None,
    "max_examples": 20,
    "checks": None,
    "derandomize": True,
    "shrink": True,
    "examples": None,
}


def _prepare(candidate: Any, spec: str = "staleness_mask", **options: Any) -> Run:
    return prepare_run(resolve_spec(spec), candidate, **{**_DEFAULTS, **options})


# --- step 1: resolve the spec ---------------------------------------------------------------


def test_resolve_spec_gives_the_spec_of_each_name() -> None:
    for name in (*spec_names(), *spec_names(losses=True)):
        assert resolve_spec(name).name == name


@pytest.mark.parametrize("name", ["staleness-mask", "", None, 3])
def test_resolve_spec_refuses_an_unknown_name_and_lists_the_known(name: Any) -> None:
    with pytest.raises(InvalidArgument, match=r"spec must be one of 'effort_penalty'.*Pass the"):
        resolve_spec(name)


# --- step 2: convert the arguments ----------------------------------------------------------


def test_prepare_run_converts_every_argument_once() -> None:
    run = _prepare(
        mask,
        checks=["staleness_mask.binary", "keeps_at_bound"],
        expected_failures={"binary": "known"},
        shrink=False,
        rtol=1e-3,
        examples=[[((np.array([0, 1]),), {"eta": 1})]],
    )
    assert run.candidate is mask
    assert run.label == f"{__name__}:mask"
    assert run.import_line == f"from {__name__} import mask as candidate"
    assert run.checks == ("binary", "keeps_at_bound")  # the order given, short names
    assert run.declared == {"binary": "known"}
    assert run.conventions == resolve_spec("staleness_mask").resolve(None)
    assert run.override is not None
    assert (run.override.rtol, run.override.atol) == (1e-3, 0.0)
    assert Phase.shrink not in run.settings.phases
    assert run.settings.max_examples == 20
    assert run.xp_name == "numpy"
    assert run.bridge.describe() == "numpy float64"
    assert [[(a[0].tolist(), k) for a, k in ex] for ex in run.examples] == [[([0, 1], {"eta": 1})]]


def test_prepare_run_takes_a_candidate_that_setup_defines() -> None:
    setup = "import numpy as np\ndef mine(s, *, eta):\n    return (np.asarray(s) <= eta) * 1.0\n"
    run = _prepare("mine", setup=setup)
    assert run.label == "mine"
    assert "defined by the setup above" in run.import_line
    assert run.candidate(np.array([0, 3]), eta=1).tolist() == [1.0, 0.0]


class _Spy:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, s: ArrayLike, *, eta: int) -> Any:
        self.calls += 1
        return mask(s, eta=eta)


@pytest.mark.parametrize(
    ("options", "error", "said"),
    [
        ({"max_examples": 0}, InvalidArgument, "max_examples must be an int >= 1 and <= 1000000"),
        ({"max_examples": True}, InvalidArgument, "max_examples must be an int >= 1 and <="),
        # a search that would never end: 10**20 examples
        ({"max_examples": 10**20}, InvalidArgument, "got max_examples=100000000000000000000"),
        ({"max_examples": 10**6 + 1}, InvalidArgument, "got max_examples=1000001"),
        ({"shrink": "yes"}, InvalidArgumentType, "shrink must be a bool"),
        ({"derandomize": "no"}, InvalidArgumentType, "derandomize must be a bool"),
        ({"derandomize": None}, InvalidArgumentType, "Pass derandomize=True or derandomize="),
        ({"checks": ["keeps_at_bund"]}, InvalidArgument, "checks must name only checks"),
        # a string is not iterated letter by letter ("got checks='b'")
        ({"checks": "binary"}, InvalidArgumentType, "Pass a list, e.g. checks=['binary']"),
        ({"checks": b"binary"}, InvalidArgumentType, "checks must be a list of check names"),
        # an example the reference refuses would be skipped by every check, and the report say ok
        (
            {"examples": [[((np.array([0, 1]),), {"etaa": 1})]]},
            InvalidArgument,
            "unexpected keyword argument 'etaa'",
        ),
        (
            {"examples": [[((np.array([0.0, np.nan]),), {"eta": 1})]]},
            InvalidArgument,
            "refimpl refuses it: InvalidArgument: s must contain only finite values",
        ),
        (
            {"examples": [[((np.array([0]),), {"eta": 1}), ((np.array([0]),), {"eta": -1})]]},
            InvalidArgument,
            "refimpl refuses call 1 of it",
        ),
        ({"expected_failures": "binary"}, InvalidArgumentType, "Wrap it in a list"),
        ({"rtol": -1.0}, InvalidArgument, "rtol must be a finite number >= 0"),
        ({"dtype": "float8"}, InvalidArgument, "dtype must be one of"),
        ({"examples": [[(1, 2)]]}, InvalidArgument, "examples must hold non-empty lists"),
    ],
)
def test_prepare_run_refuses_before_the_candidate_is_called(
    options: dict[str, Any], error: type[Exception], said: str
) -> None:
    spy = _Spy()
    with pytest.raises(error, match=re.escape(said)):
        _prepare(spy, **options)
    with pytest.raises(error, match=re.escape(said)):
        check_conformance(spy, spec="staleness_mask", **{**_DEFAULTS, **options})
    assert spy.calls == 0


# --- steps 3 and 4: run a check, classify its counterexample -------------------------------


def test_run_check_passes_a_correct_candidate_and_xpasses_a_stale_declaration() -> None:
    check = resolve_spec("staleness_mask").check("keeps_at_bound")
    assert run_check(_prepare(mask), check, refimpl).status == "passed"
    declared = _prepare(mask, expected_failures={"keeps_at_bound": "off by one"})
    result = run_check(declared, check, refimpl)
    assert (result.status, result.reason) == ("xpassed", "off by one")


def test_run_check_is_an_error_when_the_installed_refimpl_lacks_the_reference() -> None:
    check = resolve_spec("staleness_mask").check("binary")
    bare = types.ModuleType("refimpl")
    result = run_check(_prepare(mask), check, bare)
    assert result.status == "error"
    assert "refimpl.staleness_mask is not available" in result.message
    assert run_check(_prepare(mask), check, refimpl).status == "passed"  # the control


def test_run_check_skips_a_check_the_conventions_make_moot() -> None:
    check = resolve_spec("tis").check("zero_at_padding")
    result = run_check(_prepare(mask, "tis", conventions={"padding": "ignored"}), check, refimpl)
    assert result.status == "skipped"
    assert "not applicable: padding='ignored'" in result.message


def _runner(run: Run, check: str) -> _Runner:
    return _Runner(
        run.candidate,
        run.spec,
        run.spec.check(check),
        run.bridge,
        run.conventions,
        run.override,
        run.assume,
    )


def test_find_counterexample_tries_the_given_examples_first() -> None:
    given = [((np.array([5, 3]),), {"eta": 3})]
    run = _prepare(strict_mask, examples=[given])
    found = find_counterexample(
        run, _runner(run, "keeps_at_bound"), run.spec.check("keeps_at_bound")
    )
    assert found is not None
    assert found[0][0][0].tolist() == [5, 3]
    clean = _prepare(mask, examples=[given])
    assert (
        find_counterexample(
            clean, _runner(clean, "keeps_at_bound"), clean.spec.check("keeps_at_bound")
        )
        is None
    )


def test_classify_tells_a_raise_from_a_wrong_value_and_honours_a_declaration() -> None:
    example = [((np.array([1]),), {"eta": 1})]
    wrong = _prepare(strict_mask)
    failed = classify(wrong, _runner(wrong, "keeps_at_bound"), example, "")
    assert failed.status == "failed"
    assert "got weights [0.]" in failed.message
    assert (
        "reproduce(candidate, spec='staleness_mask', check='keeps_at_bound'" in failed.reproduction
    )
    assert failed.counterexample.startswith("calls = [")
    raising = _prepare(raising_mask)
    raised = classify(raising, _runner(raising, "keeps_at_bound"), example, "")
    assert raised.status == "raised"
    assert "RuntimeError: not implemented" in raised.message
    xfailed = classify(wrong, _runner(wrong, "keeps_at_bound"), example, "known")
    assert (xfailed.status, xfailed.reason) == ("xfailed", "known")


def test_classify_of_an_example_that_passes_says_the_failure_did_not_repeat() -> None:
    run = _prepare(mask)
    result = classify(run, _runner(run, "keeps_at_bound"), [((np.array([1]),), {"eta": 1})], "")
    assert result.status == "failed"
    assert result.message == "the failure did not repeat"


# --- step 5: report ---------------------------------------------------------------------------


def test_the_report_carries_what_the_run_used() -> None:
    run = _prepare(mask, dtype="float32", assume=lambda kw: kw["eta"] > 0)
    results = tuple(run_check(run, run.spec.check(n), refimpl) for n in run.checks)
    report = _report(run, results)
    assert report.spec == "staleness_mask"
    assert report.candidate == f"{__name__}:mask"
    assert report.array == "numpy float32"
    assert report.conventions == run.conventions
    assert 'kw["eta"] > 0' in report.assumed
    assert [r.name for r in report.results] == list(check_names("staleness_mask"))
    assert report.ok


# --- the guard around each call ------------------------------------------------------------


def test_fresh_copy_copies_every_array_and_rebuilds_containers() -> None:
    a, b = np.zeros(2), np.ones(3)
    copied = fresh_copy(((a,), {"w": [b, 2.0]}))
    assert copied[0][0] is not a
    assert copied[1]["w"][0] is not b
    assert copied[0][0].tolist() == [0.0, 0.0]
    assert copied[1]["w"][1] == 2.0


def test_call_candidate_returns_the_output_and_passes_ordinary_exceptions_through() -> None:
    assert call_candidate(lambda x, *, k: x * k, (np.array([2.0]),), {"k": 3}).tolist() == [6.0]
    with pytest.raises(ZeroDivisionError):
        call_candidate(lambda: 1 / 0, (), {})


def _edits(x: Any, *, mask: Any) -> Any:
    mask[0] = 0
    return x


def test_call_candidate_names_the_input_edited_in_place_unless_told_not_to_watch() -> None:
    args, kwargs = (torch.ones(2),), {"mask": torch.ones(2)}
    with pytest.raises(CandidateMisbehaved, match=r"modified its input kwargs\['mask'\] in place"):
        call_candidate(_edits, args, kwargs)
    call_candidate(_edits, (torch.ones(2),), {"mask": torch.ones(2)}, watch_inputs=False)


def test_call_candidate_stops_a_flood_at_the_limit_and_keeps_a_short_excerpt() -> None:
    def flood() -> None:
        while True:
            print("y" * 4096)

    with pytest.raises(CandidateMisbehaved, match=f"more than {OUTPUT_LIMIT} characters") as info:
        call_candidate(flood, (), {})
    assert info.value.kind == "failed"
    assert len(info.value.message) < 600


def test_a_keyboard_interrupt_is_the_candidate_s_only_inside_user_interrupts() -> None:
    def interrupt() -> None:
        raise KeyboardInterrupt

    with user_interrupts(), pytest.raises(CandidateMisbehaved, match="KeyboardInterrupt itself"):
        call_candidate(interrupt, (), {})
    with pytest.raises(KeyboardInterrupt):  # outside, one cannot tell: it is the user's
        call_candidate(interrupt, (), {})


@pytest.mark.usefixtures("python_ctrl_c")
def test_user_interrupts_restores_the_handler_it_wrapped() -> None:
    before = signal.getsignal(signal.SIGINT)
    with user_interrupts():
        assert signal.getsignal(signal.SIGINT) is not before
    assert signal.getsignal(signal.SIGINT) is before


# ``mask``: whether the spec declares a 0/1 mask as its reference's output (MASK_OUTPUTS).
@pytest.mark.parametrize(
    ("out", "mask", "kind"),
    [
        (np.zeros(2), False, None),
        (3.0, False, None),
        ([0.5, 1.0], False, None),
        ((np.zeros(2), None, "label"), False, None),  # a framework's extras beside its numbers
        (np.zeros(2, dtype=complex), False, "complex"),
        (torch.zeros(2, dtype=torch.complex64), False, "complex"),
        (np.array(["1.0"]), False, "string"),
        (["1.0", "0.0"], False, "string"),
        ("1.0", False, "string"),
        (np.array([1.0], dtype=object), False, "object"),
        (np.zeros(2, dtype=bool), False, "boolean"),
        (torch.zeros(2, dtype=torch.bool), False, "boolean"),
        ((np.zeros(2), np.zeros(2, dtype=bool)), False, "boolean"),
        (np.zeros(2, dtype=bool), True, None),  # a declared mask spec: booleans are its values
        (torch.zeros(2, dtype=torch.bool), True, None),
        ((np.zeros(2), np.zeros(2, dtype=bool)), True, None),
        (np.zeros(2, dtype=complex), True, "complex"),  # a mask spec still refuses the rest
        (None, True, "None"),
        (None, False, "None"),
    ],
)
def test_output_kind_problem_refuses_each_wrong_kind(
    out: Any, mask: bool, kind: str | None
) -> None:
    found = output_kind_problem(out, mask=mask)
    if kind is None:
        assert found is None
    else:
        assert found is not None
        assert f"returned a {kind} value" in found


def test_a_boolean_output_is_refused_by_its_declaration_not_by_its_values() -> None:
    # all zeros is 0/1, as a weight can be on one draw: without the declaration it is refused
    found = output_kind_problem(np.zeros(2, dtype=bool), mask=False)
    assert found is not None
    for name in ("staleness_mask", "any_token_veto", "off_policy_sequence_mask", "m2po_mask"):
        assert name in found  # the message names the four specs that accept booleans


def test_found_problem_refuses_a_shape_that_differs_and_leaves_nan_to_the_checks() -> None:
    e = np.array([1.0, 0.0])
    assert found_problem(np.array([1.0, 0.0]), e) is None
    assert "has shape (1, 2)" in str(found_problem(e[None, :], e))
    assert "has shape ()" in str(found_problem(np.float64(1.0), e))
    assert found_problem(np.array([1.0, np.nan]), e) is None  # a spec may accept 0/0
    pair = found_problem((e, e[:1]), (e, e))
    assert pair is not None
    assert pair.startswith("output 1: ")
    assert found_problem({"a": e[:1]}, {"a": e}) is None  # a layout left to the checks


def test_a_check_named_twice_runs_once_and_an_unknown_one_is_named_once() -> None:
    run = _prepare(mask, checks=["binary", "staleness_mask.binary", "keeps_on_policy"])
    assert run.checks == ("binary", "keeps_on_policy")
    with pytest.raises(InvalidArgument) as info:
        _prepare(mask, checks=["nope"])
    message = str(info.value)
    assert message.count("nope") == 1, message  # the rule, the value and the fix: said once
    assert "Use one of: agrees_with_reference" in message
