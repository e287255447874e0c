"""Specs of the staleness decay, admission capacity, effective sample size and masking
diagnostics: typed checks over the calls as the candidate saw them."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy.typing import NDArray

import refimpl
from refimpl.testing import strategies as rst
from refimpl.testing._arrays import ArrayBridge
from refimpl.testing._engine import Call, Case, Check, Convention, Conventions, Spec
from refimpl.testing._specs_basic import STALENESS_COUNT
from refimpl.testing._specs_parts import (
    Array,
    Strategy,
    _agrees,
    _array,
    _f,
    _fixed,
    _floats,
    _non_increasing,
    _one,
)
from refimpl.testing.tolerances import smallest_normal, summation_factor

# --- staleness_decay ----------------------------------------------------------------------


def _decay_calls(sort: bool = False) -> Strategy:
    gamma = st.one_of(st.sampled_from([1.0, 0.5, 0.99]), _floats(1e-3, 1.0))

    def build(a: tuple[NDArray[np.int64], float]) -> list[Call]:
        s = np.concatenate([a[0], [0]]).astype(np.int64)
        return _one((np.sort(s) if sort else s,), gamma=a[1])

    return _fixed(st.tuples(rst.staleness_arrays(max_staleness=200), gamma).map(build))


def _decay_condition(call: Call, conv: Conventions, expected: Any) -> Array:
    """``γ^s = exp(s·log γ)``: the rounding of ``log γ`` times ``s``, then exp's, relative."""
    s = np.asarray(call[0][0], dtype=np.float64)
    g = call[1]["gamma"]
    return np.asarray((np.abs(s * math.log(g)) + s + 3.0) * np.abs(expected), dtype=np.float64)


def _decay_one_on_policy(case: Case) -> None:
    s, w = case.calls[0][0][0], _f(case)
    case.show("s:", s)
    case.show("w:", w)
    assert np.all(w[s == 0] == 1.0), f"on-policy samples (s == 0) got weights {w[s == 0]}"


def _in_unit_interval(case: Case) -> None:
    w = _f(case)
    case.show("w:", w)
    s = case.slack(1.0)
    bad = ~((w >= 0) & (w <= 1 + s))
    assert not bad.any(), f"weights outside [0, 1]: {w[bad]}"


DECAY = Spec(
    name="staleness_decay",
    reference="staleness_decay",
    signature="candidate(s, *, gamma)",
    read=_array,
    expected=lambda call, conv: refimpl.staleness_decay(*call[0], **call[1]),
    condition=_decay_condition,
    checks=(
        Check(
            "agrees_with_reference",
            "γ^s agrees with refimpl.staleness_decay within the derived tolerance",
            _decay_calls(),
            _agrees,
        ),
        Check(
            "one_when_on_policy",
            "an on-policy sample (s = 0) gets weight 1",
            _decay_calls(),
            _decay_one_on_policy,
        ),
        Check(
            "non_increasing_in_staleness",
            "the weight is non-increasing in s",
            _decay_calls(sort=True),
            _non_increasing,
        ),
        Check("in_unit_interval", "0 <= γ^s <= 1", _decay_calls(), _in_unit_interval),
    ),
)

# --- admission_capacity -------------------------------------------------------------------

_ADMISSION_KEYS = ("eta", "version", "batch", "accepted", "running", "max_concurrent")


def _admission_calls(conv: Conventions, vary: str | None = None) -> st.SearchStrategy[list[Call]]:
    low = 1 if conv["staleness_count"] == "versions_spanned" else 0
    params = st.fixed_dictionaries(
        {
            "eta": st.integers(low, 8),
            "version": st.integers(0, 50),
            "batch": st.integers(1, 64),
            "accepted": st.integers(0, 2000),
            "running": st.integers(0, 500),
            "max_concurrent": st.integers(1, 600),
        }
    )

    def build(p: dict[str, int]) -> list[Call]:
        if vary is None:
            return [((), p)]
        return [((), p), ((), {**p, vary: p[vary] + 1})]

    return params.map(build)


def _scalar(raw: Any, call: Call, conv: Conventions) -> Array:
    return ArrayBridge.to_numpy(raw).reshape(())


def _admission_expected(call: Call, conv: Conventions) -> Array:
    count: Any = conv["staleness_count"]
    return np.asarray(float(refimpl.admission_capacity(**call[1], staleness_count=count)))


def _admission_agrees(case: Case) -> None:
    expected = case.expected()
    case.show("found:   ", _f(case))
    case.show("expected:", expected)
    if float(_f(case)) == float(expected):
        return
    hint = ""
    count: Any = (
        "versions_spanned"
        if case.conventions["staleness_count"] == "versions_behind"
        else "versions_behind"
    )
    kw = case.calls[0][1]
    # computed directly: (η + v)·B counting versions spanned, (η + v + 1)·B versions behind
    shift = 0 if count == "versions_spanned" else 1
    window = (kw["eta"] + kw["version"] + shift) * kw["batch"] - (kw["accepted"] + kw["running"])
    if float(_f(case)) == float(min(kw["max_concurrent"] - kw["running"], window)):
        hint = (
            f": the bound counts {count.replace('_', ' ')}: pass "
            f"conventions={{'staleness_count': '{count}'}} if that is intended"
        )
    raise AssertionError(f"capacity {float(_f(case))!r}, expected {float(expected)!r}{hint}")


def _monotone(key: str, sign: int) -> Callable[[Case], None]:
    def monotone(case: Case) -> None:
        a, b = float(_f(case, 0)), float(_f(case, 1))
        case.show(f"capacity at {key}:", a, f"at {key} + 1:", b)
        ok = b >= a if sign > 0 else b <= a
        word = "non-decreasing" if sign > 0 else "non-increasing"
        assert ok, f"the capacity must be {word} in {key}: {a} -> {b} when {key} grows by 1"

    return monotone


ADMISSION = Spec(
    name="admission_capacity",
    reference="admission_capacity",
    signature="candidate(*, eta, version, batch, accepted, running, max_concurrent) -> int",
    read=_scalar,
    expected=_admission_expected,
    condition=lambda call, conv, e: np.zeros_like(e),
    exact=True,
    conventions=(STALENESS_COUNT,),
    checks=(
        Check(
            "agrees_with_reference",
            "min(N_max − running, (η + v + 1)·B − (accepted + running)) exactly",
            _admission_calls,
            _admission_agrees,
        ),
        Check(
            "non_decreasing_in_eta",
            "a looser staleness bound never admits fewer rollouts",
            lambda conv: _admission_calls(conv, "eta"),
            _monotone("eta", +1),
        ),
        Check(
            "non_decreasing_in_version",
            "a newer policy version never admits fewer rollouts",
            lambda conv: _admission_calls(conv, "version"),
            _monotone("version", +1),
        ),
        Check(
            "non_increasing_in_running",
            "more rollouts in flight never admit more",
            lambda conv: _admission_calls(conv, "running"),
            _monotone("running", -1),
        ),
    ),
)

# --- effective_sample_size ----------------------------------------------------------------

ESS_SCALE = Convention(
    "ess",
    "count",
    ("count", "fraction"),
    "(Σw)²/Σw² as a count in [1, n], or divided by n (a fraction in (0, 1])",
    who="fraction: verl's rollout_is_eff_sample_size",
)


def _weights(max_size: int = 16) -> st.SearchStrategy[Array]:
    element = st.one_of(st.sampled_from([0.0, 1.0]), _floats(0.0, 100.0), _floats(0.0, 1e-3))
    return hnp.arrays(np.float64, st.integers(1, max_size), elements=element).filter(
        lambda w: bool(w.max() > 0)
    )


def _ess_expected(call: Call, conv: Conventions) -> Array:
    scale: Any = conv["ess"]
    return np.asarray(refimpl.effective_sample_size(*call[0], ess=scale))


def _ess_condition(call: Call, conv: Conventions, expected: Any) -> Array:
    """Two sums of ``n`` terms and a quotient: ``(2(⌈log₂ n⌉ + 1) + 3)`` relative."""
    n = np.size(call[0][0])
    return np.asarray((2 * summation_factor(n) + 4) * np.abs(expected), dtype=np.float64)


def _ess_equal(case: Case) -> None:
    n = np.size(case.calls[0][0][0])
    target = float(n) if case.conventions["ess"] == "count" else 1.0
    case.show("ess:", _f(case), "n:", n)
    case.assert_close(_f(case), np.asarray(target), case.condition(), "ESS of equal weights")


def _ess_scale(case: Case) -> None:
    case.show("ess(w):", _f(case, 0), "ess(c·w):", _f(case, 1))
    largest = [float(np.max(call[0][0])) for call in case.calls]
    if min(largest) < smallest_normal(case.dtype):
        return  # every weight rounds to 0 (or a subnormal) in the dtype: ESS is 0/0 there

    cond = case.condition(0) + case.condition(1)
    case.assert_close(_f(case, 1), _f(case, 0), cond, "ESS of scaled weights")


def _ess_bounds(case: Case) -> None:
    n = np.size(case.calls[0][0][0])
    e = float(_f(case))
    lo, hi = (1.0, float(n)) if case.conventions["ess"] == "count" else (1.0 / n, 1.0)
    s = float(case.slack(hi))
    case.show("ess:", e, "bounds:", (lo, hi))
    assert lo - s <= e <= hi + s, f"ESS {e} outside [{lo}, {hi}] (n = {n})"


ESS = Spec(
    name="effective_sample_size",
    reference="effective_sample_size",
    signature="candidate(w) -> float",
    read=_scalar,
    expected=_ess_expected,
    condition=_ess_condition,
    conventions=(ESS_SCALE,),
    checks=(
        Check(
            "agrees_with_reference",
            "(Σw)²/Σw² agrees with refimpl.effective_sample_size",
            _fixed(_weights().map(lambda w: _one((w,)))),
            _agrees,
        ),
        Check(
            "n_for_equal_weights",
            "equal positive weights give ESS = n (1 as a fraction)",
            _fixed(
                st.tuples(st.integers(1, 64), _floats(1e-3, 100.0)).map(
                    lambda a: _one((np.full(a[0], a[1]),))
                )
            ),
            _ess_equal,
        ),
        Check(
            "invariant_to_scaling",
            "ESS(c·w) = ESS(w) for c > 0",
            _fixed(
                st.tuples(_weights(), st.sampled_from([1e-3, 0.5, 3.0, 1e4])).map(
                    lambda a: [((a[0],), {}), ((a[0] * a[1],), {})]
                )
            ),
            _ess_scale,
        ),
        Check(
            "between_one_and_n",
            "1 <= ESS <= n when a weight is positive (1/n..1 as a fraction)",
            _fixed(_weights().map(lambda w: _one((w,)))),
            _ess_bounds,
        ),
    ),
)

# --- masking_diagnostics ------------------------------------------------------------------

_DIAG_FIELDS = ("kept_fraction", "on_policy_dropped_fraction", "effective_sample_size")


def _diagnostics(raw: Any, call: Call, conv: Conventions) -> Array:
    values = []
    for name in _DIAG_FIELDS:
        value = raw[name] if isinstance(raw, dict) else getattr(raw, name, None)
        assert value is not None, f"the diagnostics have no {name!r} (attribute or key)"
        values.append(float(ArrayBridge.to_numpy(value).reshape(())))
    return np.asarray(values)


def _diag_expected(call: Call, conv: Conventions) -> Array:
    scale: Any = conv["ess"]
    d = refimpl.masking_diagnostics(*call[0], **call[1], ess=scale)
    return np.asarray([d.kept_fraction, d.on_policy_dropped_fraction, d.effective_sample_size])


def _diag_condition(call: Call, conv: Conventions, expected: Any) -> Array:
    n = np.size(call[0][0])
    return np.asarray([2.0, 2.0, (2 * summation_factor(n) + 4) * abs(expected[2])])


def _diag_calls(mask: bool = False) -> Strategy:
    def build(a: tuple[NDArray[np.int64], Array, int]) -> list[Call]:
        s, w, eta = a
        w = np.resize(w, s.shape)
        if mask:
            w = refimpl.staleness_mask(s, eta=eta)
        return _one((s, w))

    return _fixed(
        st.tuples(
            rst.staleness_arrays(max_staleness=4),
            hnp.arrays(np.float64, 32, elements=st.one_of(st.just(0.0), _floats(0.0, 4.0))),
            rst.staleness_bounds(max_eta=3),
        ).map(build)
    )


def _diag_agrees(case: Case) -> None:
    expected = case.expected()
    case.show("found (kept, on-policy dropped, ESS):   ", _f(case))
    case.show("expected (kept, on-policy dropped, ESS):", expected)
    case.assert_close(_f(case), expected, case.condition(), "diagnostics")


def _diag_no_overmasking(case: Case) -> None:
    case.show("on_policy_dropped_fraction:", _f(case)[1])
    assert _f(case)[1] == 0.0, (
        f"a correct staleness mask dropped on-policy samples: on_policy_dropped_fraction = "
        f"{_f(case)[1]} (it must be 0)"
    )


def _diag_fractions(case: Case) -> None:
    kept, dropped, _ = _f(case)
    case.show("kept, on-policy dropped:", kept, dropped)
    assert 0.0 <= kept <= 1.0, f"the kept fraction {kept} is outside [0, 1]"
    assert 0.0 <= dropped <= 1.0, f"the on-policy dropped fraction {dropped} is outside [0, 1]"


DIAGNOSTICS = Spec(
    name="masking_diagnostics",
    reference="masking_diagnostics",
    signature="candidate(s, w) -> object with kept_fraction, on_policy_dropped_fraction, "
    "effective_sample_size (attributes or keys)",
    read=_diagnostics,
    expected=_diag_expected,
    condition=_diag_condition,
    conventions=(ESS_SCALE,),
    checks=(
        Check(
            "agrees_with_reference",
            "kept fraction, on-policy dropped fraction and ESS agree with "
            "refimpl.masking_diagnostics",
            _diag_calls(),
            _diag_agrees,
        ),
        Check(
            "no_on_policy_dropped_by_a_staleness_mask",
            "for w = 1[s <= η] the on-policy dropped fraction is 0 (catches the over-masking "
            "bug in the diagnostic itself)",
            _diag_calls(mask=True),
            _diag_no_overmasking,
        ),
        Check(
            "fractions_in_unit_interval",
            "the kept and the on-policy dropped fractions are in [0, 1]",
            _diag_calls(),
            _diag_fractions,
        ),
    ),
)
