"""The batch, problem and trajectory specs of ``refimpl check`` compute what the conformance specs do.

``effective_sample_size``, ``masking_diagnostics``, ``kimi_length_reward`` and ``vtrace`` are
checked on the trace path's own code (:mod:`refimpl.testing._trace_batches`, numpy and the
reference alone), so a trace check does not load Hypothesis. Their expected values and their
rounding conditions (``--dtype``) must be exactly those of the conformance spec of the same name,
row by row, under every convention; each property also rejects a deliberately wrong variant.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy.typing import NDArray

import refimpl
from refimpl.testing import _trace_batches as batches
from refimpl.testing._specs_basic import VTRACE
from refimpl.testing._specs_more import DIAGNOSTICS, ESS, KIMI
from refimpl.testing._traces import ListColumn
from refimpl.testing.tolerances import summation_factor

Rows = list[NDArray[np.float64]]
Condition = Callable[[dict[str, Any], dict[str, Any], Any], Any]

_finite = st.floats(0.0, 100.0, allow_nan=False)


def _rows(draw: st.DrawFn, columns: int, elements: st.SearchStrategy[float]) -> list[Rows]:
    """``columns`` list columns of 1 to 3 rows, each row of one length in 1..6."""
    sizes = draw(st.lists(st.integers(1, 6), min_size=1, max_size=3))
    return [
        [draw(hnp.arrays(np.float64, n, elements=elements)) for n in sizes] for _ in range(columns)
    ]


def _columns(names: tuple[str, ...], rows: list[Rows]) -> dict[str, Any]:
    return {n: ListColumn.from_rows(r) for n, r in zip(names, rows, strict=True)}


def _same(a: Any, b: Any) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(np.asarray(x, dtype=np.float64), np.asarray(y))


def ess_property(condition: Condition) -> Callable[[], None]:
    @given(st.data(), st.sampled_from(batches.ESS_SCALES))
    def prop(data: st.DataObject, scale: str) -> None:
        (w,) = data.draw(st.composite(lambda d: _rows(d, 1, _finite))())
        w = [np.where(np.arange(a.size) == 0, a + 1.0, a) for a in w]  # a positive weight
        cols, params = _columns(("weight",), [w]), {"ess": scale}
        conv = ESS.resolve(params)
        want = [float(ESS.expected(((a,), {}), conv)) for a in w]
        got = batches.ess_expected(refimpl, cols, params)
        _same(got, want)
        cond = [float(ESS.condition(((a,), {}), conv, e)) for a, e in zip(w, want, strict=True)]
        _same(condition(cols, params, got), cond)

    return prop


def diagnostics_property(condition: Condition) -> Callable[[], None]:
    @given(
        st.data(),
        st.sampled_from(batches.ESS_SCALES),
        st.sampled_from(batches.DIAGNOSTIC_FIELDS),
    )
    def prop(data: st.DataObject, scale: str, statistic: str) -> None:
        s, w = data.draw(st.composite(lambda d: _rows(d, 2, _finite))())
        s = [np.floor(a / 30.0) for a in s]  # staleness 0..3
        w = [np.where(np.arange(a.size) == 0, a + 1.0, a) for a in w]
        cols, params = _columns(("staleness", "weight"), [s, w]), {"ess": scale}
        params["statistic"] = statistic
        k = batches.DIAGNOSTIC_FIELDS.index(statistic)
        conv = DIAGNOSTICS.resolve({"ess": scale})
        full = [DIAGNOSTICS.expected(((a, b), {}), conv) for a, b in zip(s, w, strict=True)]
        got = batches.diagnostics_expected(refimpl, cols, params)
        _same(got, [float(f[k]) for f in full])
        cond = [
            float(DIAGNOSTICS.condition(((a, b), {}), conv, f)[k])
            for a, b, f in zip(s, w, full, strict=True)
        ]
        _same(condition(cols, params, got), cond)

    return prop


def kimi_property(condition: Condition) -> Callable[[], None]:
    @given(st.data(), st.sampled_from(batches.KIMI_SCOPES))
    def prop(data: st.DataObject, scope: str) -> None:
        ell, correct = data.draw(st.composite(lambda d: _rows(d, 2, _finite))())
        ell = [np.floor(a * 40.0) for a in ell]
        correct = [(a > 50.0).astype(np.float64) for a in correct]
        cols, params = _columns(("length", "correct"), [ell, correct]), {"scope": scope}
        conv = KIMI.resolve(params)
        calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
            ((a, b != 0), {}) for a, b in zip(ell, correct, strict=True)
        ]
        want = [KIMI.expected(c, conv) for c in calls]
        got = batches.kimi_expected(refimpl, cols, params)
        _same(got, want)
        cond = [KIMI.condition(c, conv, e) for c, e in zip(calls, want, strict=True)]
        _same(condition(cols, params, got), cond)

    return prop


def vtrace_property(condition: Condition) -> Callable[[], None]:
    @given(
        st.data(),
        st.sampled_from(batches.VTRACE_OUTPUTS),
        st.sampled_from([{}, {"lambda_": 0.9, "clip_rho_threshold": 2.0}, {"lambda_": 0.5}]),
        st.sampled_from([1.0, 0.5, 3.0]),
    )
    def prop(data: st.DataObject, output: str, kw: dict[str, float], pg: float) -> None:
        rows = data.draw(st.composite(lambda d: _rows(d, 5, st.floats(-10, 10)))())
        rows[3] = [np.clip(np.abs(a) / 10.0, 0.0, 1.0) for a in rows[3]]  # discounts in [0, 1]
        rows[4] = [np.abs(a) + 0.1 for a in rows[4]]  # ratios > 0
        kw = {**kw, "clip_pg_rho_threshold": pg}
        cols, params = _columns(batches.VTRACE_INPUTS, rows), {"output": output, **kw}
        k = batches.VTRACE_OUTPUTS.index(output)
        calls = [(tuple(r), kw) for r in zip(*rows, strict=True)]
        got = batches.vtrace_expected(refimpl, cols, params)
        _same(got, [VTRACE.expected(c, {})[k] for c in calls])
        _same(condition(cols, params, got), [VTRACE.condition(c, {}, None)[k] for c in calls])

    return prop


def _ess_single_sum(cols: dict[str, Any], params: dict[str, Any], expected: Any) -> Any:
    """Wrong: the rounding of one sum, not two (too tight a tolerance for --dtype)."""
    n = [a.size for a in cols["weight"]]
    return np.array([(summation_factor(m) + 4) * abs(e) for m, e in zip(n, expected, strict=True)])


def _diagnostics_count_only(cols: dict[str, Any], params: dict[str, Any], expected: Any) -> Any:
    """Wrong: the fractions' condition for every statistic, the ESS's too."""
    return np.full(len(expected), 2.0)


def _kimi_without_spread(cols: dict[str, Any], params: dict[str, Any], expected: Any) -> Any:
    """Wrong: forgets that a small spread of lengths amplifies their rounding."""
    return [np.full(np.size(e), 3.0) for e in expected]


def _vtrace_one_step(cols: dict[str, Any], params: dict[str, Any], expected: Any) -> Any:
    """Wrong: the magnitude bound without the factor of the number of steps."""
    out = batches.vtrace_condition(cols, params, expected)
    return [c / (np.size(c) + 2.0) for c in out]


def test_ess_is_the_conformance_specs() -> None:
    run_property(ess_property(batches.ess_condition))
    rejects(ess_property(_ess_single_sum))


def test_masking_diagnostics_is_the_conformance_specs() -> None:
    run_property(diagnostics_property(batches.diagnostics_condition))
    rejects(diagnostics_property(_diagnostics_count_only))


def test_kimi_length_reward_is_the_conformance_specs() -> None:
    run_property(kimi_property(batches.kimi_condition))
    rejects(kimi_property(_kimi_without_spread))


def test_vtrace_is_the_conformance_specs() -> None:
    run_property(vtrace_property(batches.vtrace_condition))
    rejects(vtrace_property(_vtrace_one_step))
