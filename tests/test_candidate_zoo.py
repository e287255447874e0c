"""A zoo of hostile candidates: each is reported by check_conformance, none escapes it.

A candidate is user code. It may leave by doors other than a return value (``sys.exit``, its own
``KeyboardInterrupt`` or another ``BaseException``, megabytes of printing, editing its inputs in
place) or return the wrong kind of thing (complex, strings, objects, booleans, a wrong shape that
broadcasts, a scalar for an array, NaN where the reference is finite). Each is that check's own
status with a message and a reproduction: never a pass, never an exception out of
``check_conformance``, never a changed input of the next check. The clean candidate beside them is
the control: the same code without the misbehaviour passes every check.
"""

from __future__ import annotations

import os
import signal
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects
from numpy.typing import ArrayLike

from refimpl import staleness_mask
from refimpl.errors import InvalidArgument
from refimpl.losses.clipped import ppo_clip_loss
from refimpl.losses.rejection import (
    any_token_veto,
    m2po_mask,
    off_policy_sequence_mask,
)
from refimpl.testing import CheckResult, ConformanceReport, check_conformance, spec_names
from refimpl.testing import _conformance_guard as guard
from refimpl.testing import _conformance_runner as runner
from refimpl.testing._specs_parts import MASK_OUTPUTS

_ORDER = ["staleness_mask", "any_token_veto", "off_policy_sequence_mask", "m2po_mask"]

Candidate = Callable[..., Any]


def _mask(s: ArrayLike, eta: int) -> np.ndarray[Any, np.dtype[np.float64]]:
    return (np.asarray(s) <= eta).astype(np.float64)


def clean(s: ArrayLike, *, eta: int) -> Any:
    return _mask(s, eta)


def _run(candidate: Candidate | str, **kwargs: Any) -> ConformanceReport:
    options: dict[str, Any] = {"spec": "staleness_mask", "max_examples": 25, **kwargs}
    return check_conformance(candidate, **options)


def _not_ok(report: ConformanceReport) -> list[CheckResult]:
    bad = [r for r in report.results if r.status in ("failed", "raised")]
    assert not report.ok, report.summary()
    assert bad, report.summary()
    for r in bad:
        assert r.message, r.render()
        assert r.reproduction, r.render()
        assert r.counterexample, r.render()
    return bad


def test_the_clean_candidate_passes_every_check() -> None:
    report = _run(clean)
    assert report.ok, report.summary()
    assert {r.status for r in report.results} == {"passed"}


# --- leaving by another door ------------------------------------------------------------------


def exits(s: ArrayLike, *, eta: int) -> Any:
    if np.size(s) > 2:
        sys.exit(3)
    return _mask(s, eta)


def raises_keyboard_interrupt(s: ArrayLike, *, eta: int) -> Any:
    if np.size(s) > 2:
        raise KeyboardInterrupt
    return _mask(s, eta)


class OwnBaseException(BaseException):
    """A BaseException of the candidate's own."""


def raises_own_base_exception(s: ArrayLike, *, eta: int) -> Any:
    if np.size(s) > 2:
        raise OwnBaseException("not an Exception")
    return _mask(s, eta)


def raises_generator_exit(s: ArrayLike, *, eta: int) -> Any:
    if np.size(s) > 2:
        raise GeneratorExit
    return _mask(s, eta)


@pytest.mark.parametrize(
    ("candidate", "said"),
    [
        (exits, "called sys.exit(3) (SystemExit"),
        (raises_keyboard_interrupt, "raised KeyboardInterrupt itself (no Ctrl-C arrived)"),
        (raises_own_base_exception, "raised (OwnBaseException: not an Exception)"),
        (raises_generator_exit, "raised (GeneratorExit"),
    ],
    ids=["sys_exit", "keyboard_interrupt", "own_base_exception", "generator_exit"],
)
def test_a_candidate_that_exits_or_raises_a_base_exception_is_reported_raised(
    candidate: Candidate, said: str
) -> None:
    bad = _not_ok(_run(candidate))  # returns: nothing escapes check_conformance
    assert all(r.status == "raised" for r in bad)
    assert said in bad[0].message, bad[0].message
    assert "check_conformance" not in said  # the message says how to fix the candidate instead
    assert "ValueError" in bad[0].message


def presses_ctrl_c(s: ArrayLike, *, eta: int) -> Any:
    """Stands for a user pressing Ctrl-C while the candidate runs: a real SIGINT."""
    if np.size(s) > 2:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10**6):  # the handler runs between bytecodes, here
            pass
    return _mask(s, eta)


@pytest.mark.skipif(not hasattr(signal, "SIGINT"), reason="no SIGINT on this platform")
@pytest.mark.usefixtures("python_ctrl_c")
def test_a_real_ctrl_c_during_a_candidate_call_still_stops_the_run() -> None:
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        _run(presses_ctrl_c)
    assert signal.getsignal(signal.SIGINT) is before  # the handler is restored


def prints_megabytes(s: ArrayLike, *, eta: int) -> Any:
    print("x" * (3 << 20))
    return _mask(s, eta)


def prints_a_line(s: ArrayLike, *, eta: int) -> Any:
    print("debugging", eta, file=sys.stderr)
    print("debugging", eta)
    return _mask(s, eta)


def test_a_candidate_that_prints_megabytes_fails_and_the_terminal_stays_clean(
    capfd: pytest.CaptureFixture[str],
) -> None:
    bad = _not_ok(_run(prints_megabytes, checks=["agrees_with_reference"]))
    assert bad[0].status == "failed"
    assert "wrote more than 1048576 characters to stdout" in bad[0].message
    assert "'xxxx" in bad[0].message
    assert len(bad[0].message) < 1000
    out, err = capfd.readouterr()
    assert "xxxxxxxxxx" not in out + err


def test_a_candidate_that_prints_a_little_passes_and_prints_nothing_to_the_terminal(
    capfd: pytest.CaptureFixture[str],
) -> None:
    assert _run(prints_a_line).ok
    out, err = capfd.readouterr()
    assert "debugging" not in out + err


def zeroes_its_input(s: ArrayLike, *, eta: int) -> Any:
    out = _mask(s, eta)
    np.asarray(s)[...] = 0  # after computing: the output is right, the caller's array is not
    return out


def test_a_candidate_that_modifies_its_input_in_place_fails_and_corrupts_nothing() -> None:
    s = np.array([0, 1, 2, 3, 4, 5, 6])
    example = [((s,), {"eta": 2})]
    bad = _not_ok(_run(zeroes_its_input, examples=[example]))
    assert {r.status for r in bad} == {"failed"}
    assert "modified its input args[0] in place" in bad[0].message, bad[0].message
    assert s.tolist() == [0, 1, 2, 3, 4, 5, 6]  # the user's example is as it was given


def halves_a_float_input(lt: Any, lb: Any, *, cap: float, mask: Any) -> Any:
    w = np.minimum(np.exp(np.asarray(lt) - np.asarray(lb)), cap) * np.asarray(mask)
    lt *= 0.5
    return w


def test_a_float_input_modified_in_place_is_named_by_position() -> None:
    report = check_conformance(
        halves_a_float_input, spec="tis", max_examples=10, checks=["agrees_with_reference"]
    )
    bad = _not_ok(report)
    assert "modified its input args[0] in place" in bad[0].message, bad[0].message


# --- the wrong kind of thing ------------------------------------------------------------------


def complex_weights(s: ArrayLike, *, eta: int) -> Any:
    return _mask(s, eta).astype(np.complex128)  # imaginary part 0: the real part is right


def string_weights(s: ArrayLike, *, eta: int) -> Any:
    return _mask(s, eta).astype(str)


def object_weights(s: ArrayLike, *, eta: int) -> Any:
    return _mask(s, eta).astype(object)


def boolean_mask(s: ArrayLike, *, eta: int) -> Any:
    return np.asarray(s) <= eta


def list_of_strings(s: ArrayLike, *, eta: int) -> Any:
    return [str(x) for x in _mask(s, eta)]


def none(s: ArrayLike, *, eta: int) -> Any:
    return None


def durations(s: ArrayLike, *, eta: int) -> Any:
    return _mask(s, eta).astype("timedelta64[s]")  # reads as 1.0 and 0.0: seconds, not weights


def dates(s: ArrayLike, *, eta: int) -> Any:
    return _mask(s, eta).astype("datetime64[s]")


def all_masked(s: ArrayLike, *, eta: int) -> Any:
    out = _mask(s, eta)  # the right numbers under the mask, but no entry has a value
    return np.ma.masked_array(out, mask=np.ones(out.shape, dtype=bool))


@pytest.mark.parametrize(
    ("candidate", "kind"),
    [
        (complex_weights, "complex"),
        (string_weights, "string"),
        (object_weights, "object"),
        (none, "None"),
        (durations, "duration"),
        (dates, "date"),
        (all_masked, "masked"),
    ],
)
def test_an_output_of_the_wrong_kind_fails_with_a_message(candidate: Candidate, kind: str) -> None:
    bad = _not_ok(_run(candidate))
    assert {r.status for r in bad} == {"failed"}
    assert f"the candidate returned a {kind} value" in bad[0].message, bad[0].message


def boolean_veto(lt: Any, lb: Any, *, threshold: float, mask: Any, upper: Any = None) -> Any:
    return any_token_veto(lt, lb, threshold=threshold, mask=mask, upper=upper) > 0


def boolean_weights(lt: Any, lb: Any, *, cap: float, mask: Any) -> Any:
    return np.minimum(np.exp(np.asarray(lt) - np.asarray(lb)), cap) * np.asarray(mask) > 0


# Booleans are accepted exactly by the specs that declare a 0/1 mask as their reference's output
# (MASK_OUTPUTS), and refused by every other spec whatever the values: on this draw the tis weights
# are all 0 or 1 (equal log-probabilities, a padded token), so only the declaration tells them apart.
_LT = np.array([[-1.0, -2.0, -0.5], [-0.3, -0.7, -1.1]])
_ALL_0_OR_1 = [
    ((_LT, _LT.copy()), {"cap": 2.0, "mask": np.array([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])})
]


def check_booleans_are_accepted_exactly_where_the_spec_declares_a_mask() -> None:
    assert _run(boolean_mask).ok, "s <= eta, the staleness mask itself, was refused"
    veto = check_conformance(boolean_veto, spec="any_token_veto", max_examples=10)
    assert veto.ok, veto.summary()
    tis = check_conformance(
        boolean_weights,
        spec="tis",
        checks=["agrees_with_reference"],
        examples=[_ALL_0_OR_1],
        max_examples=1,
    )
    (result,) = tis.results
    assert result.status == "failed", f"boolean tis weights passed: {result.render()}"
    assert "the candidate returned a boolean value (bool)" in result.message, result.message
    assert "accepted only by the specs whose reference is a 0/1 mask" in result.message


def test_booleans_are_accepted_exactly_where_the_spec_declares_a_mask() -> None:
    check_booleans_are_accepted_exactly_where_the_spec_declares_a_mask()


@pytest.mark.parametrize(
    "declared",
    [frozenset(), frozenset({"staleness_mask", "any_token_veto", "tis"})],
    ids=["no_spec_declares_a_mask", "tis_declared_a_mask"],
)
def test_the_mask_check_rejects_a_wrong_declaration(
    declared: frozenset[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "MASK_OUTPUTS", declared)
    rejects(check_booleans_are_accepted_exactly_where_the_spec_declares_a_mask)


def test_the_mask_check_rejects_the_rule_that_reads_the_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the wrong variant that was there: booleans accepted wherever the values are 0/1 (which
    # booleans always are), whatever the spec declares
    real = guard.output_kind_problem
    monkeypatch.setattr(runner, "output_kind_problem", lambda out, *, mask: real(out, mask=True))
    rejects(check_booleans_are_accepted_exactly_where_the_spec_declares_a_mask)


def test_the_declared_masks_are_specs_whose_reference_is_a_0_1_mask() -> None:
    known = set(spec_names()) | set(spec_names(losses=True))
    assert known >= MASK_OUTPUTS, MASK_OUTPUTS - known
    rng = np.random.default_rng(5)
    lt, lb = -rng.exponential(size=(3, 5)), -rng.exponential(size=(3, 5))
    mask = np.ones((3, 5))
    values = [
        staleness_mask(np.array([0, 1, 2, 3]), eta=1),
        any_token_veto(lt, lb, threshold=0.5, mask=mask),
        off_policy_sequence_mask(lt, lb, rng.normal(size=3), delta=0.1, mask=mask),
        m2po_mask(lt, lb, tau=0.01, mask=mask),
    ]
    for name, value in zip(sorted(MASK_OUTPUTS, key=_ORDER.index), values, strict=True):
        assert set(np.unique(value).tolist()) <= {0.0, 1.0}, (name, value)


def test_a_list_of_strings_fails() -> None:
    bad = _not_ok(_run(list_of_strings))
    assert {r.status for r in bad} == {"failed"}


def row_for_column(s: ArrayLike, *, eta: int) -> Any:
    return _mask(s, eta)[None, :]  # (1, B): broadcasts against (B,)


def first_value_only(s: ArrayLike, *, eta: int) -> Any:
    return float(_mask(s, eta).reshape(-1)[0])  # a scalar for an array


def nan_at_the_bound(s: ArrayLike, *, eta: int) -> Any:
    out = _mask(s, eta)
    out[np.asarray(s) == eta] = np.nan
    return out


@pytest.mark.parametrize(
    ("candidate", "said"),
    [
        (row_for_column, "shape (1, "),
        (first_value_only, "shape ()"),
        (nan_at_the_bound, "found [nan]"),
    ],
    ids=["broadcasting_shape", "scalar_for_array", "nan_where_finite"],
)
def test_a_wrong_shape_a_scalar_or_a_nan_fails_the_agreement_check_with_a_message(
    candidate: Candidate, said: str
) -> None:
    bad = _not_ok(_run(candidate))
    assert {r.status for r in bad} == {"failed"}
    agree = [r for r in bad if r.name == "agrees_with_reference"]
    assert agree, [r.name for r in bad]
    assert said in agree[0].message, agree[0].message


def all_nan_penalty(b: ArrayLike, *, k0: float, b_min: float, tau: float) -> Any:
    return np.full(np.shape(b), np.nan)  # every comparison with NaN is false: "non-increasing"


def all_nan_mask(s: ArrayLike, *, eta: int) -> Any:
    return np.full(np.shape(s), np.nan)


def check_nan_where_the_reference_is_finite_fails_a_property_check_run_alone() -> None:
    cases: list[tuple[Candidate, str, str]] = [
        (all_nan_penalty, "effort_penalty", "non_increasing_in_effort"),
        (all_nan_mask, "staleness_mask", "non_increasing_in_staleness"),
    ]
    for candidate, spec, check in cases:
        report = check_conformance(candidate, spec=spec, checks=[check], max_examples=10)
        (result,) = report.results
        assert result.status == "failed", f"{spec}.{check} passed an all-NaN candidate"
        assert "returned NaN at" in result.message, result.message
        assert "where the reference is finite" in result.message, result.message
        assert result.reproduction, result.render()


def test_nan_where_the_reference_is_finite_fails_a_property_check_run_alone() -> None:
    check_nan_where_the_reference_is_finite_fails_a_property_check_run_alone()


def test_the_nan_check_rejects_a_pipeline_without_the_shared_rule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the wrong variant: NaN left to each check's property (as before)
    monkeypatch.setattr(runner._Runner, "_nan_where_finite", lambda self, case, degenerate: None)
    rejects(check_nan_where_the_reference_is_finite_fails_a_property_check_run_alone)


def nan_in_the_clipped_region(*args: Any, **kwargs: Any) -> Any:
    loss, grad = ppo_clip_loss(*args, **kwargs)
    g = np.array(grad, dtype=np.float64)
    g[(g == 0.0) & (np.asarray(kwargs["mask"]) > 0)] = np.nan  # abs(NaN) > tiny is False
    return loss, g


def check_a_nan_gradient_where_the_reference_is_finite_fails_a_gradient_check_run_alone() -> None:
    report = check_conformance(
        nan_in_the_clipped_region,
        spec="ppo_clip",
        conventions={"gradient": "returned"},
        checks=["clipped_region_has_zero_gradient"],
        max_examples=10,
    )
    result = report["clipped_region_has_zero_gradient"]
    assert result.status == "failed", report.summary()
    assert "the gradient: the candidate returned NaN at" in result.message, result.message


def test_a_nan_gradient_where_the_reference_is_finite_fails_a_gradient_check_run_alone() -> None:
    check_a_nan_gradient_where_the_reference_is_finite_fails_a_gradient_check_run_alone()


def test_the_gradient_nan_check_rejects_a_rule_that_exempts_every_gradient(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the wrong variant: a differentiated spec's gradient left to each check (as before)
    monkeypatch.setattr(runner, "_gradient_free", lambda loss, dtype, free: lambda s: True)
    rejects(check_a_nan_gradient_where_the_reference_is_finite_fails_a_gradient_check_run_alone)


def zero_times_overflow(*args: Any, **kwargs: Any) -> Any:
    loss, grad = ppo_clip_loss(*args, **kwargs)
    with np.errstate(over="ignore"):
        loss32 = np.asarray(loss, dtype=np.float32)
    g = np.array(grad, dtype=np.float64)
    g[~np.isfinite(loss32) & (np.asarray(kwargs["cotangent"]) == 0.0)] = np.nan  # 0 · inf
    return loss32, g


def check_a_nan_gradient_where_the_loss_overflows_the_dtype_is_left_to_the_checks() -> None:
    # exp(100) · 1 overflows float32: the Jacobian there is infinite, and the cotangent 0 times
    # it is NaN in any float32 autodiff, though the reference's exact product is 0
    call = (
        (np.array([[100.0, 0.5]]), np.array([[0.0, 0.0]]), np.array([[-1.0, 1.0]])),
        {
            "eps_low": 0.2,
            "eps_high": None,
            "dual_clip": None,
            "mask": np.array([[1.0, 1.0]]),
            "cotangent": np.array([[0.0, 1.0]]),
        },
    )
    report = check_conformance(
        zero_times_overflow,
        spec="ppo_clip",
        dtype="float32",
        conventions={"gradient": "returned"},
        checks=["gradient"],
        examples=[[call]],
        max_examples=5,
    )
    assert report.ok, report.summary()


def test_a_nan_gradient_where_the_loss_overflows_the_dtype_is_left_to_the_checks() -> None:
    check_a_nan_gradient_where_the_loss_overflows_the_dtype_is_left_to_the_checks()


def test_the_overflow_exemption_rejects_a_gradient_rule_without_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the wrong variant: the gradient held to the rule wherever its own reference is finite
    monkeypatch.setattr(runner, "_gradient_free", lambda loss, dtype, free: free)
    rejects(check_a_nan_gradient_where_the_loss_overflows_the_dtype_is_left_to_the_checks)


def ess_float32(w: ArrayLike) -> Any:
    x = np.asarray(w, dtype=np.float32)
    return np.float32(x.sum() ** 2 / (x * x).sum())  # 0/0 = NaN when every weight rounds to 0


def check_nan_on_inputs_the_dtype_rounds_to_zero_is_left_to_the_check() -> None:
    # 1e-50 is 0 in float32: ESS is 0/0 there, which refimpl defines (0) and a candidate may not
    tiny: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((np.array([1e-50, 2e-50]),), {}),
        ((np.array([1e-47, 2e-47]),), {}),
    ]
    report = check_conformance(
        ess_float32,
        spec="effective_sample_size",
        dtype="float32",
        checks=["invariant_to_scaling"],
        examples=[tiny],
        max_examples=5,
    )
    assert report.ok, report.summary()


def test_nan_on_inputs_the_dtype_rounds_to_zero_is_left_to_the_check() -> None:
    check_nan_on_inputs_the_dtype_rounds_to_zero_is_left_to_the_check()


def test_the_rounding_check_rejects_a_nan_rule_without_the_exemption(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runner, "_rounded_away", lambda drawn, seen, dtype: False)
    rejects(check_nan_on_inputs_the_dtype_rounds_to_zero_is_left_to_the_check)


@pytest.mark.parametrize(
    ("candidate", "shape"),
    [(row_for_column, "(1, "), (first_value_only, "()")],
    ids=["broadcasting_shape", "scalar_for_array"],
)
def test_a_wrong_shape_fails_a_check_whose_property_holds_on_it(
    candidate: Candidate, shape: str
) -> None:
    # "binary" asks only that every value be 0 or 1, which a broadcast row or one scalar is:
    # only the shape gives the candidate away
    bad = _not_ok(_run(candidate, checks=["binary"]))
    said = f"the candidate's output has shape {shape}"
    assert said in bad[0].message, bad[0].message


# --- the setup code is user code too -----------------------------------------------------------


@pytest.mark.parametrize(
    ("setup", "said"),
    [
        ("import sys\nsys.exit(2)", "It called sys.exit(2): remove that"),
        ("raise KeyboardInterrupt", "It raised KeyboardInterrupt itself: remove that"),
        ("print('z' * (2 << 20))", "It wrote more than 1048576 characters to stdout"),
        ("import refimpl_no_such_module", "It raised ModuleNotFoundError: No module named"),
        ("def f(:\n", "setup must be Python code"),
    ],
    ids=["sys_exit", "keyboard_interrupt", "flood", "import_error", "syntax_error"],
)
def test_a_setup_that_leaves_or_fails_is_refused_with_a_message(setup: str, said: str) -> None:
    spy: list[int] = []

    def candidate(s: ArrayLike, *, eta: int) -> Any:
        spy.append(1)
        return _mask(s, eta)

    with pytest.raises(InvalidArgument, match="setup must") as info:
        _run(candidate, setup=setup)
    assert said in str(info.value)
    assert spy == []  # refused before any check ran


def test_a_setup_that_runs_defines_the_candidate() -> None:
    setup = "import numpy as np\ndef mine(s, *, eta):\n    return (np.asarray(s) <= eta) * 1.0\n"
    assert _run("mine", setup=setup).ok


# A candidate named "module:function" whose module misbehaves while it is imported: each is a
# refusal naming the module and what it did, before any check runs (nothing escapes).
@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("import sys\nsys.exit(0)\n", "while it was imported, called sys.exit(0) (SystemExit: 0)"),
        ("raise GeneratorExit\n", "while it was imported, raised (GeneratorExit"),
        ("class Own(BaseException):\n    pass\nraise Own('boom')\n", "(Own: boom)"),
        ("raise KeyboardInterrupt\n", "raised KeyboardInterrupt itself (no Ctrl-C arrived)"),
        ("print('z' * (2 << 20))\n", "wrote more than 1048576 characters to stdout"),
        ("1 / 0\n", "failed while it was imported (ZeroDivisionError"),
    ],
    ids=[
        "sys_exit",
        "generator_exit",
        "own_base_exception",
        "keyboard_interrupt",
        "flood",
        "error",
    ],
)
def test_a_candidate_module_that_misbehaves_at_import_is_refused_naming_it(
    body: str,
    said: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = f"zoo_import_{zlib.crc32(body.encode())}"
    (tmp_path / f"{name}.py").write_text(body + "def f(s, *, eta):\n    return s\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(InvalidArgument) as info:
        _run(f"{name}:f")
    message = str(info.value)
    assert said in message, message
    assert f"candidate='{name}:f'" in message
    assert len(capsys.readouterr().out) < 1000  # the flood stayed out of the terminal


def _assume_exits(kwargs: dict[str, Any]) -> bool:
    raise SystemExit(0)


def _assume_divides_by_zero(kwargs: dict[str, Any]) -> bool:
    return bool(1 / 0)


def _assume_interrupts(kwargs: dict[str, Any]) -> bool:
    raise KeyboardInterrupt


@pytest.mark.parametrize(
    ("assume", "said"),
    [
        (_assume_exits, "called sys.exit(0)"),
        (_assume_divides_by_zero, "raised ZeroDivisionError: division by zero"),
        (_assume_interrupts, "raised KeyboardInterrupt itself"),
    ],
    ids=["sys_exit", "error", "keyboard_interrupt"],
)
def test_an_assume_that_exits_or_raises_is_the_check_s_status_with_a_reproduction(
    assume: Callable[[dict[str, Any]], bool], said: str
) -> None:
    report = _run(clean, assume=assume, checks=["binary"], max_examples=5)
    (result,) = report.results  # returns: nothing escapes check_conformance
    assert result.status == "raised", result.render()
    assert result.message.startswith("assume= (not the candidate)"), result.message
    assert said in result.message, result.message
    assert "assume(kwargs)" in result.reproduction
    assert result.counterexample.startswith("calls = [")
    assert "conventions=" not in result.message  # no convention explains a broken assume


# --- an output whose reading runs the candidate's code --------------------------------------------


class _LazyMask:
    """An array-like output whose conversion (``__array__``) misbehaves as ``how`` says."""

    def __init__(self, how: str, value: np.ndarray[Any, np.dtype[np.float64]]) -> None:
        self.how, self.value = how, value

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        if self.how == "sys_exit":
            sys.exit(3)
        if self.how == "keyboard_interrupt":
            raise KeyboardInterrupt
        if self.how == "fd_flood":
            os.write(1, b"f" * (guard.OUTPUT_LIMIT + 1))
        return np.asarray(self.value, dtype=dtype)


_READ_DOORS = {
    "sys_exit": ("raised", "called sys.exit(3)"),
    "keyboard_interrupt": ("raised", "raised KeyboardInterrupt itself"),
    "fd_flood": ("failed", "bytes to file descriptors 1 and 2"),
}


def check_reading_an_output_is_guarded_as_a_call(hows: list[str]) -> None:
    for how in hows:

        def lazy(s: ArrayLike, *, eta: int, how: str = how) -> Any:
            return _LazyMask(how, _mask(s, eta))

        try:
            report = _run(lazy, checks=["keeps_at_bound"], max_examples=2)
        except BaseException as exc:  # what the wrong variant lets out: the assertion says so
            raise AssertionError(f"{how}: {type(exc).__name__} escaped check_conformance") from None
        (result,) = report.results
        status, said = _READ_DOORS[how]
        assert result.status == status, (how, result.render())
        assert result.message.startswith("while its output was read, "), result.message
        assert said in result.message, result.message


def test_an_output_whose_conversion_exits_interrupts_or_floods_is_the_check_s_status(
    capfd: pytest.CaptureFixture[str],
) -> None:
    check_reading_an_output_is_guarded_as_a_call(list(_READ_DOORS))
    out, err = capfd.readouterr()
    assert "f" * 1000 not in out + err


def _read_unguarded(self: Any, raw: list[Any], seen: list[Any], conv: Any) -> list[Any]:
    """The wrong variant: the outputs read outside the guard (as before)."""
    return [self.spec.read(r, c, conv) for r, c in zip(raw, seen, strict=True)]


def test_the_reading_check_rejects_outputs_read_outside_the_guard(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runner._Runner, "_read", _read_unguarded)
    rejects(check_reading_an_output_is_guarded_as_a_call, ["sys_exit"])
