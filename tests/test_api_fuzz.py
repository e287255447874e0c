"""Fuzzing the Python API: generated and hostile arguments thrown at every public function.

The CLI fuzz (tests/test_cli_fuzz.py) holds the command line to its contract; this holds the flat
``refimpl`` API to its own. Every case calls one public function with arguments drawn for its
signature and must:

1. return, or raise one of refimpl's refusals (:class:`refimpl.RefimplError`: an
   ``InvalidArgument``, which is a ``ValueError``, or an ``InvalidArgumentType``, a ``TypeError``)
   whose message names the parameter; never another exception (numpy's own ``ValueError``, an
   ``IndexError``, ``ZeroDivisionError``, ``OverflowError``, ``RecursionError``: a traceback the
   caller cannot act on);
2. raise no warning (``RuntimeWarning`` from an overflow or a 0/0, ``ComplexWarning`` from a dropped
   imaginary part, a ``DeprecationWarning``): numpy's error state warns on division by zero,
   overflow and invalid operations (underflow to zero stays silent, numpy's default), and every
   warning fails the case;
3. return no NaN: a bad input is refused, never answered with NaN;
4. end before the hang guard fires (``HANG_GUARD_CPU_S`` of this process's CPU time, so that a loaded
   machine cannot make it fire; it only turns a hang into a failure).

Arguments are drawn per parameter from what its name and annotation say (arrays of log-probabilities,
probabilities, lengths, masks, groups and tokens of one shared shape; integers, reals, choices),
and, for one parameter in three, replaced by a hostile object: a boolean, a complex number, text, a
date or a duration, ``None``, NaN and infinities, integers past 2^53 and 2^63 and past float64's
range, a ``Decimal`` or ``Fraction``, a ragged or empty or 0-d array, a complex, datetime, text or
uint64 array, a dict, a set, a generator, ``Ellipsis``, an ``object()``; or a value drawn by
``st.from_type`` for the annotation. The families are the modules of the flat API, each with its
own derandomized budget (a few seconds each in CI); ``HYPOTHESIS_PROFILE=thorough`` runs
``THOROUGH`` examples per family, randomized, outside the gate.

Defects the fuzz found in modules this change does not own are listed in ``KNOWN_DEFECTS``, each
with a minimal reproduction and a predicate recognizing the inputs that hit it: the function stays
in its family, and only those inputs are skipped until the owner fixes it.
``test_known_defects_still_reproduce`` keeps the list honest (an entry that no longer reproduces
fails, so that it is removed and those inputs fuzzed again).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import inspect
import math
import os
import signal
import warnings
from collections.abc import Callable, Iterator
from decimal import Decimal
from fractions import Fraction
from types import FrameType
from typing import Any, NamedTuple

import numpy as np
import pytest
import scipy.stats
from hypothesis import HealthCheck, Phase, assume, given, note, settings
from hypothesis import strategies as st

import refimpl
from refimpl.errors import RefimplError

HANG_GUARD_CPU_S = 10
_THOROUGH = os.environ.get("HYPOTHESIS_PROFILE") == "thorough"


def _family(module: str) -> str:
    return module.split(".")[1]


def _public_functions() -> dict[str, Callable[..., Any]]:
    found: dict[str, Callable[..., Any]] = {}
    for name in refimpl.__all__:
        obj = getattr(refimpl, name)
        if inspect.isfunction(obj) and obj.__module__.startswith("refimpl."):
            found[name] = obj
    return found


FUNCTIONS = _public_functions()

#: Functions left out of the fuzz: they run a whole training loop or simulation by design (their
#: own tests bound their sizes), so a valid draw is seconds of work, not a fuzz case.
HEAVY = frozenset({"train_effort_policy", "train_conditioned_policy", "over_masking_scenarios"})


class Defect(NamedTuple):
    """A defect the fuzz found in a module this change does not own, until its owner fixes it."""

    why: str
    reproduce: Callable[[], Any]
    hits: Callable[[list[Any], dict[str, Any]], bool]


#: Defects found by this fuzz in modules this change does not own. The fuzz keeps calling these
#: functions, but skips the inputs that ``hits`` recognizes as the known defect; each reproduction
#: is checked to still fail (an entry that no longer reproduces must be removed). Empty: every
#: defect found so far is fixed, and its reproduction kept in ``FIXED_DEFECTS`` below.
KNOWN_DEFECTS: dict[str, Defect] = {}


def _as_any(value: Any) -> Any:
    return value


BUDGET = {"dispatch": 150, "effort": 120, "penalties": 120, "staleness": 200, "losses": 300}
THOROUGH = dict.fromkeys(BUDGET, 3_000)


def _members(family: str) -> list[str]:
    return sorted(
        n for n, f in FUNCTIONS.items() if _family(f.__module__) == family and n not in HEAVY
    )


# --- hostile objects ------------------------------------------------------------------------------


def _generator() -> Iterator[int]:
    yield from range(3)


HOSTILE: list[Callable[[], Any]] = [
    lambda: True,
    lambda: np.bool_(False),
    lambda: 1 + 2j,
    lambda: np.complex128(1.0),
    lambda: "1",
    lambda: b"1",
    lambda: None,
    lambda: object(),
    lambda: Ellipsis,
    lambda: float("nan"),
    lambda: float("inf"),
    lambda: -float("inf"),
    lambda: -0.0,
    lambda: 5e-324,
    lambda: 1e308,
    lambda: 2**53 + 1,
    lambda: 2**63,
    lambda: -(2**63) - 1,
    lambda: 10**400,
    lambda: Decimal("1.5"),
    lambda: Fraction(1, 3),
    lambda: dt.timedelta(days=1),
    lambda: dt.datetime(2020, 1, 1),
    lambda: np.datetime64("2020-01-01"),
    lambda: np.timedelta64(1, "s"),
    lambda: np.float16(1.0),
    lambda: np.int64(-1),
    lambda: [],
    lambda: [[1.0], [1.0, 2.0]],
    lambda: np.array([], dtype=np.float64),
    lambda: np.array(np.nan),
    lambda: np.array(1.0),
    lambda: np.array(["a", "b"]),
    lambda: np.array([1 + 1j, 2.0]),
    lambda: np.array(["2020-01-01"], dtype="datetime64[D]"),
    lambda: np.array([1, 2], dtype="timedelta64[s]"),
    lambda: np.array([2**63, 1], dtype=np.uint64),
    lambda: np.array([True, False]),
    lambda: np.array([1.0, np.nan]),
    lambda: np.array([[1.0, 2.0], [3.0, np.inf]]),
    lambda: np.array([1.0, 2.0], dtype=object),
    lambda: [Fraction(1, 2), 0.5],
    lambda: {"a": 1},
    lambda: {1, 2},
    lambda: _generator(),
    lambda: scipy.stats.expon,  # a family, not a frozen distribution
    lambda: scipy.stats.norm(loc=0.0, scale=1.0),  # negative lengths
]


# --- plausible values by parameter name -------------------------------------------------------


def _floats(low: float, high: float) -> st.SearchStrategy[float]:
    return st.floats(low, high, allow_nan=False, allow_infinity=False)


def _array(draw: st.DrawFn, shape: tuple[int, ...], elements: st.SearchStrategy[Any]) -> Any:
    size = math.prod(shape)
    values = draw(st.lists(elements, min_size=size, max_size=size))
    return np.array(values, dtype=np.float64 if size == 0 else None).reshape(shape)


_ARRAY_KINDS: list[tuple[tuple[str, ...], st.SearchStrategy[Any]]] = [
    (("mask", "correct", "observed"), st.sampled_from([0.0, 1.0])),
    (("logp", "logits", "log"), _floats(-30.0, 0.0)),
    (("pi", "cdf", "prob", "discount", "lambda", "rho", "w"), _floats(0.0, 1.0)),
    (
        ("length", "lengths", "b", "cost", "durations", "times", "target", "quality"),
        _floats(0.0, 4096.0),
    ),
    (("group", "groups", "tokens"), st.integers(0, 3)),
    (("s", "version", "step"), st.integers(0, 5)),
]


def _array_elements(name: str) -> st.SearchStrategy[Any]:
    for keys, strategy in _ARRAY_KINDS:
        if any(name == k or name.startswith(k) or name.endswith(k) for k in keys):
            return strategy
    return _floats(-10.0, 10.0)


_SCALARS: dict[str, st.SearchStrategy[Any]] = {
    "n": st.integers(1, 8),
    "k": st.integers(1, 8),
    "eta": st.integers(0, 4),
    "slots": st.integers(1, 8),
    "batch": st.integers(1, 8),
    "nodes": st.integers(1, 16),
    "steps": st.integers(1, 5),
    "length_bins": st.integers(1, 6),
    "top_k": st.one_of(st.none(), st.integers(1, 4)),
    "token_count": st.integers(1, 10),
    "sequence_count": st.integers(1, 10),
    "temperature": _floats(0.1, 3.0),
    "top_p": _floats(0.05, 1.0),
    "gamma": _floats(0.0, 1.0),
    "lam": _floats(0.0, 1.0),
    "clip": _floats(0.5, 50.0),
    "cap": _floats(0.5, 50.0),
}


def _dist(draw: st.DrawFn) -> Any:
    scale = draw(_floats(1.0, 500.0))
    return draw(
        st.sampled_from(
            [
                scipy.stats.expon(scale=scale),
                scipy.stats.lognorm(s=1.0, scale=scale),
                scipy.stats.uniform(loc=1.0, scale=scale),
            ]
        )
    )


def _pmf(draw: st.DrawFn) -> Any:
    m = draw(st.integers(1, 6))
    weights = draw(st.lists(st.integers(0, 5), min_size=m, max_size=m).filter(any))
    total = sum(weights)
    exact = [Fraction(w, total) for w in weights]
    return exact if draw(st.booleans()) else [float(x) for x in exact]


def _choices(annotation: str) -> list[str]:
    """The strings of a ``Literal[...]`` annotation (empty when it is none)."""
    if "Literal[" not in annotation:
        return []
    inside = annotation.split("Literal[", 1)[1].split("]", 1)[0]
    return [part.strip().strip("'\"") for part in inside.split(",")]


def _plausible(
    draw: st.DrawFn, param: inspect.Parameter, shape: tuple[int, ...], positional: bool
) -> Any:
    name = param.name
    annotation = str(param.annotation)
    if name in ("dist", "law"):
        return _dist(draw)
    if name in ("pmf", "g"):
        return _pmf(draw)
    if name == "rng":
        return np.random.default_rng(draw(st.integers(0, 10)))
    if name in _SCALARS:
        return draw(_SCALARS[name])
    choices = _choices(annotation)
    if choices:
        return draw(st.sampled_from([*choices, "nope"]))
    if positional or "ArrayLike" in annotation:
        if name.startswith("logits"):
            return _array(draw, (*shape, 3), _array_elements(name))
        return _array(draw, shape, _array_elements(name))
    if "bool" in annotation:
        return draw(st.booleans())
    if annotation.startswith("int"):
        return draw(st.integers(0, 10))
    if "float" in annotation:
        return draw(_floats(-2.0, 10.0))
    if param.default is not inspect.Parameter.empty:
        return param.default
    return draw(_floats(0.0, 10.0))


_FROM_TYPE = {"int": int, "float": float, "bool": bool, "str": str}


def _hostile(draw: st.DrawFn, param: inspect.Parameter) -> Any:
    annotation = str(param.annotation).split(" ")[0].split("[")[0]
    if annotation in _FROM_TYPE and draw(st.booleans()):
        return draw(st.from_type(_FROM_TYPE[annotation]))
    return draw(st.sampled_from(HOSTILE))()


@st.composite
def calls(draw: st.DrawFn, names: list[str]) -> tuple[str, list[Any], dict[str, Any]]:
    """``(name, args, kwargs)``: one call of a public function, hostile in one argument in three."""
    name = draw(st.sampled_from(names))
    signature = inspect.signature(FUNCTIONS[name])
    shape = draw(st.sampled_from([(0,), (1,), (3,), (2, 3), (1, 4)]))
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
            continue
        positional = param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD)
        required = param.default is inspect.Parameter.empty
        if not required and not draw(st.booleans()):
            continue  # the default
        value = (
            _hostile(draw, param)
            if draw(st.integers(0, 2)) == 0
            else _plausible(draw, param, shape, positional)
        )
        if positional:
            args.append(value)
        else:
            kwargs[param.name] = value
    return name, args, kwargs


# --- the contract -----------------------------------------------------------------------------------


class _Hang(BaseException):
    """The hang guard fired (a BaseException: no ``except Exception`` in the code can swallow it)."""


@contextlib.contextmanager
def _cpu_guard(seconds: int) -> Iterator[None]:
    def fire(signum: int, frame: FrameType | None) -> None:
        raise _Hang(f"the call did not end within {seconds} s of CPU time")

    previous = signal.signal(signal.SIGPROF, fire)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def _nan_in(result: Any, depth: int = 0) -> str | None:
    """Where the result holds a NaN (``None`` when nowhere)."""
    if depth > 4:
        return None
    if isinstance(result, np.ndarray) and result.dtype.kind in "fc":
        return "an array" if np.isnan(result).any() else None
    if isinstance(result, (float, np.floating)):
        return "a float" if math.isnan(result) else None
    if isinstance(result, tuple):  # NamedTuples too
        fields = getattr(result, "_fields", None) or range(len(result))
        for field, value in zip(fields, result, strict=True):
            where = _nan_in(value, depth + 1)
            if where is not None:
                return f"{field}: {where}"
    return None


def call_keeps_the_contract(
    function: Callable[..., Any],
    args: list[Any],
    kwargs: dict[str, Any],
    *,
    guard_seconds: int = HANG_GUARD_CPU_S,
) -> None:
    """The contract of the module docstring, for one call."""
    outcome: Any = None
    # numpy's defaults made loud: underflow to 0 is not an error (numpy ignores it by default)
    errors = np.errstate(divide="warn", over="warn", invalid="warn", under="ignore")
    with warnings.catch_warnings(record=True) as caught, errors:
        warnings.simplefilter("always")
        try:
            with _cpu_guard(guard_seconds):
                outcome = function(*args, **kwargs)
        except RefimplError as exc:
            outcome = exc
        except _Hang as exc:
            raise AssertionError(str(exc)) from None
        except Exception as exc:
            raise AssertionError(
                f"{type(exc).__module__}.{type(exc).__qualname__} escaped (not a refimpl "
                f"refusal): {exc}"
            ) from exc
    shown = [f"{w.category.__name__}: {w.message}" for w in caught]
    assert not shown, f"warnings reached the caller: {shown}"
    if isinstance(outcome, RefimplError):
        message = str(outcome)
        assert " must " in message or "got " in message, f"a refusal without its rule: {message}"
        return
    where = _nan_in(outcome)
    assert where is None, f"NaN returned ({where}) instead of a refusal or an answer"


def _run(call: tuple[str, list[Any], dict[str, Any]]) -> None:
    name, args, kwargs = call
    known = KNOWN_DEFECTS.get(name)
    assume(known is None or not known.hits(args, kwargs))
    note(f"refimpl.{name}(*{args!r}, **{kwargs!r})")
    call_keeps_the_contract(FUNCTIONS[name], args, kwargs)


def _settings(family: str) -> settings:
    return settings(
        max_examples=(THOROUGH if _THOROUGH else BUDGET)[family],
        derandomize=not _THOROUGH,
        database=None,
        deadline=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
        ],
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
    )


# --- the families -------------------------------------------------------------------------------------


def test_every_public_function_is_fuzzed_or_listed() -> None:
    families = {_family(f.__module__) for f in FUNCTIONS.values()}
    assert families == set(BUDGET), families
    assert HEAVY | set(KNOWN_DEFECTS) <= set(FUNCTIONS)
    fuzzed = {n for family in BUDGET for n in _members(family)}
    assert fuzzed | HEAVY == set(FUNCTIONS)


@_settings("dispatch")
@given(call=calls(_members("dispatch")))
def test_fuzz_dispatch(call: tuple[str, list[Any], dict[str, Any]]) -> None:
    _run(call)


@_settings("effort")
@given(call=calls(_members("effort")))
def test_fuzz_effort(call: tuple[str, list[Any], dict[str, Any]]) -> None:
    _run(call)


@_settings("penalties")
@given(call=calls(_members("penalties")))
def test_fuzz_penalties(call: tuple[str, list[Any], dict[str, Any]]) -> None:
    _run(call)


@_settings("staleness")
@given(call=calls(_members("staleness")))
def test_fuzz_staleness(call: tuple[str, list[Any], dict[str, Any]]) -> None:
    _run(call)


@_settings("losses")
@given(call=calls(_members("losses")))
def test_fuzz_losses(call: tuple[str, list[Any], dict[str, Any]]) -> None:
    _run(call)


# --- the contract can fail -----------------------------------------------------------------------


def _warns(x: Any) -> Any:
    return np.asarray(x, dtype=np.float64) / 0.0  # RuntimeWarning: divide by zero


def _numpy_error(x: Any) -> Any:
    return np.asarray(x, dtype=np.float64).reshape(7)  # numpy's own ValueError


def _nan_answer(x: Any) -> Any:
    return np.full(2, np.nan)


def _spins(x: Any) -> Any:
    while True:
        pass


@pytest.mark.parametrize(
    ("wrong", "match"),
    [
        (_warns, "warnings reached the caller"),
        (_numpy_error, "escaped"),
        (_nan_answer, "NaN returned"),
        (lambda x: complex(x), "escaped"),
    ],
)
def test_the_contract_rejects_a_warning_a_foreign_error_and_a_nan(
    wrong: Callable[[Any], Any], match: str
) -> None:
    with pytest.raises(AssertionError, match=match):
        call_keeps_the_contract(wrong, [[1.0, 2.0]], {})


def test_the_hang_guard_turns_a_spin_into_a_failure() -> None:
    with pytest.raises(_Hang, match="did not end within 1 s of CPU time"), _cpu_guard(1):
        _spins(None)


def test_the_contract_accepts_a_refusal_and_an_answer() -> None:
    call_keeps_the_contract(refimpl.staleness_mask, [[0, 1, 2]], {"eta": 1})
    call_keeps_the_contract(refimpl.staleness_mask, [[0, 1, 2]], {"eta": True})


def test_known_defects_still_reproduce() -> None:
    for name, defect in KNOWN_DEFECTS.items():
        with pytest.raises(AssertionError):
            call_keeps_the_contract(defect.reproduce, [], {}, guard_seconds=1)
        assert name in FUNCTIONS


_TINY_PI = [[1.0, 5e-324]]

#: The reproductions of defects this fuzz found and that were fixed: each must keep the contract
#: (each broke it before its fix: a warning, a foreign exception or a hang).
FIXED_DEFECTS: dict[str, Callable[[], Any]] = {
    "cosine_length_reward": lambda: refimpl.cosine_length_reward([1.0], [1 + 2j], max_length=10.0),
    "kimi_length_reward": lambda: refimpl.kimi_length_reward([1.0], [1 + 2j]),
    "kimi_length_reward ragged": lambda: refimpl.kimi_length_reward([[1.0], [1.0, 2.0]], [1]),
    "l1_exact_reward": lambda: refimpl.l1_exact_reward([1.0], [1], [1e308], alpha=2.0),
    "l1_max_reward": lambda: refimpl.l1_max_reward([1.0], [1], [1.0], alpha=1e308),
    "l1_max_reward huge int": lambda: refimpl.l1_max_reward([1.0], [2**1100], [1.0]),
    "dapo_overlong_penalty": lambda: refimpl.dapo_overlong_penalty(
        [1.0], max_length=269159647051.0, cache_length=1.4972502360355677e-297
    ),
    "difficulty_mix": lambda: refimpl.difficulty_mix(median=1.0, sigma=294.0),
    "difficulty_mix median": lambda: refimpl.difficulty_mix(median=1e308, sigma=1.0),
    "difficulty_mix nodes": lambda: refimpl.difficulty_mix(median=1.0, sigma=1.0, nodes=2**40),
    "hajek_estimate": lambda: refimpl.hajek_estimate([0.0, 0.0, 0.0], [1.0, 1.0, 2.22507386e-311]),
    "horvitz_thompson_estimate": lambda: refimpl.horvitz_thompson_estimate(
        [[0.0, 1.0]], _TINY_PI, n=2, k=2
    ),
    "clipped_ipw_estimate": lambda: refimpl.clipped_ipw_estimate(
        [[0.0, 0.0]], [[1.0, 2.2e-309]], n=2, k=2, clip=1.0
    ),
    "fluid_keep_probability": lambda: refimpl.fluid_keep_probability(
        [[0.0, 2.0]], step_time=1.1125e-308, eta=0
    ),
    "fluid_steady_state": lambda: refimpl.fluid_steady_state(
        scipy.stats.expon(scale=10.0), slots=1, batch=1, eta=14_880_618_571_628_543
    ),
    "ipw_weights": lambda: refimpl.ipw_weights([5e-324], n=1, k=1),
    "ipw_estimator_moments": lambda: refimpl.ipw_estimator_moments(
        [0.5, 0.5], [1.0, 2.0], n=2**62, k=2
    ),
    "ipw_estimator_moments exact": lambda: refimpl.ipw_estimator_moments(
        [Fraction(1, 2), Fraction(1, 2)], [1, 2], n=10**5, k=1
    ),
    "ipw_estimator_moments n=200": lambda: refimpl.ipw_estimator_moments(
        [0.5, 0.5], [1.0, 2.0], n=200, k=2
    ),
    "inclusion_probability_pmf": lambda: refimpl.inclusion_probability_pmf(
        [Fraction(1, 2), Fraction(1, 2)], n=2_815_470_189, k=1
    ),
    "inclusion_probability_pmf float": lambda: refimpl.inclusion_probability_pmf(
        [0.5, 0.5], n=2**64, k=2
    ),
    "selected_pmf": lambda: refimpl.selected_pmf(
        [Fraction(0), Fraction(0), Fraction(0), Fraction(1, 5), Fraction(4, 5)], n=2_341_048, k=1
    ),
    "grpo_advantages": lambda: refimpl.grpo_advantages(
        [0.0, 0.0, 0.0], group=_as_any([[1.0], [1.0, 2.0]])
    ),
    "rloo_advantages": lambda: refimpl.rloo_advantages(
        [0.0, 0.0, 0.0], group=_as_any([[1.0], [1.0, 2.0]])
    ),
    "framework_staleness_bound": lambda: refimpl.framework_staleness_bound(
        framework=_as_any([]), value=1
    ),
    "masking_diagnostics": lambda: refimpl.masking_diagnostics(
        [0], [0.0], lengths=[0.0], length_bins=2**40
    ),
    "length_bias": lambda: refimpl.length_bias(scipy.stats.expon(), n=6_291_587_969, k=2),
    "effort_frontier": lambda: refimpl.effort_frontier(
        [1.0], q_max=1.0, lam=_as_any([[1.0], [1.0, 2.0]]), k0=0.0, b_min=0.0, tau=1.0
    ),
}


@pytest.mark.parametrize("name", sorted(FIXED_DEFECTS))
def test_fixed_defects_keep_the_contract(name: str) -> None:
    call_keeps_the_contract(FIXED_DEFECTS[name], [], {}, guard_seconds=HANG_GUARD_CPU_S)
