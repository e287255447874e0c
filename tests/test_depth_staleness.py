"""refimpl.staleness tested by class of hole, not by survivor.

Written after a fresh mutation sample of ``refimpl/staleness`` (seed 3138912810, drawn before any
of these tests existed). Its survivors that were not equivalent fell in these classes, each
covered here across the module:

- **a refusal's boundary**: the largest value a rule accepts must be accepted and give the right
  output, the next float refused (``decoupled_ppo_weights`` without a cap accepted a log-ratio of
  exactly ``log(float64 max)`` and the mutant ``>=`` refusing it survived);
- **data without symmetry**: versions past 2^53 (the exact integer path) on ragged rows whose
  count differs from their longest length (a square batch hid a ``shape[0]`` read as
  ``shape[-1]``), compared with Python integers; masked-IS bands that are not symmetric, so that
  swapping ``low`` and ``high`` or reading the band on the reciprocal shows;
- **outputs of degenerate branches**: shape, dtype and value of what each function returns on a
  single token, an all-on-policy batch and ``cap`` equal to the ratio.

Validation rules generated from the builders' table (a ``raise`` removed, a bound moved by one) are
another file's class (``tests/test_validation_*``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray
from strategies_asymmetric import asymmetric_bands, unequal_classes

import refimpl

Array = NDArray[np.float64]
LOG_MAX = math.log(np.finfo(np.float64).max)

# --- a refusal's boundary ---------------------------------------------------------------------


def test_the_largest_log_ratio_without_a_cap_is_accepted() -> None:
    """``exp(x)`` is finite exactly when ``x <= log(float64 max)``: that value is the last one a
    weight without a cap can take, and the next float is refused with the fix (pass ``cap=``)."""
    assert math.isfinite(math.exp(LOG_MAX))
    found = refimpl.decoupled_ppo_weights(np.array([LOG_MAX, 0.0]), np.array([0.0, 0.0]))
    assert found.dtype == np.float64
    assert found.tolist() == [math.exp(LOG_MAX), 1.0]
    beyond = math.nextafter(LOG_MAX, math.inf)
    with pytest.raises(ValueError, match=r"without a cap .*pass cap="):
        refimpl.decoupled_ppo_weights(np.array([beyond]), np.array([0.0]))


def test_a_weight_equal_to_the_cap_is_kept_and_one_above_is_masked() -> None:
    """The docstring's invariant at its boundary, in both actions above the cap."""
    lp = np.log(np.array([0.5, 0.5, 0.5]))
    lq = np.log(np.array([0.25, 0.125, 0.5]))  # ratios 2, 4 and 1
    assert refimpl.decoupled_ppo_weights(lp, lq, cap=2.0).tolist() == [2.0, 0.0, 1.0]
    clipped = refimpl.decoupled_ppo_weights(lp, lq, cap=2.0, above_cap="clip")
    assert clipped.tolist() == [2.0, 2.0, 1.0]
    # the lower bound at its boundary: a ratio equal to it is kept, below it masked
    lower = refimpl.decoupled_ppo_weights(lq, lp, cap=4.0, lower=0.5)  # ratios 1/2, 1/4, 1
    assert lower.tolist() == [0.5, 0.0, 1.0]


# --- data without symmetry: exact versions past 2^53 ------------------------------------------

BIG = 2**60


@st.composite
def ragged_huge_versions(draw: st.DrawFn) -> tuple[int, list[list[int]]]:
    """A trained step past 2^53 and ragged rows of versions at most that step, with a row count
    that differs from the longest row (no square batch)."""
    sizes = draw(unequal_classes(classes=draw(st.integers(2, 4)), min_size=1, max_size=6))
    if len(sizes) == max(sizes):
        sizes = [*sizes, 1]
    step = BIG + draw(st.integers(0, 2**20))
    rows = [[step - draw(st.integers(0, 2**12)) for _ in range(size)] for size in sizes]
    return step, rows


def _exact_staleness_property(staleness_of: Callable[..., Any]) -> Callable[[], None]:
    """Staleness past 2^53 against Python integers (a Hypothesis test to run)."""

    @given(ragged_huge_versions())
    def prop(case: tuple[int, list[list[int]]]) -> None:
        step, rows = case
        found = staleness_of(step, rows)
        want = [step - min(row) for row in rows]  # Python integers: exact at any size
        assert found.sample.dtype == np.float64
        assert found.sample.tolist() == [float(w) for w in want]
        width = max(len(row) for row in rows)
        assert found.token.shape == (len(rows), width)
        for i, row in enumerate(rows):
            assert found.token[i, : len(row)].tolist() == [float(step - v) for v in row]
            assert found.mask[i].tolist() == [1.0] * len(row) + [0.0] * (width - len(row))

    return prop


def test_staleness_past_2_53_is_exact_on_ragged_rows() -> None:
    run_property(_exact_staleness_property(refimpl.sample_staleness))


def _staleness_via_floats(step: int, rows: list[list[int]]) -> Any:
    """Passes the values through float64 first: rounds them past 2^53 (by up to 128 near 2^60)."""
    return refimpl.sample_staleness(
        int(float(step)), [[int(float(v)) for v in row] for row in rows]
    )


def test_the_exact_staleness_property_rejects_reading_floats() -> None:
    rejects(_exact_staleness_property(_staleness_via_floats))


# --- data without symmetry: asymmetric masked-IS bands ----------------------------------------


def _band_property(weights_of: Callable[..., Any]) -> Callable[[], None]:
    """Masked IS weights on an asymmetric band, exactly (a Hypothesis test to run)."""

    @given(
        asymmetric_bands(max_eps=Fraction(1, 2)),
        st.lists(st.integers(-400, 400), min_size=1, max_size=12),
    )
    def prop(band: tuple[Fraction, Fraction], steps: list[int]) -> None:
        low, high = 1 - band[0], 1 + band[1]
        ratios = [math.exp(s / 512) for s in steps]  # log-ratios in [-0.78, 0.78]
        d = np.log(np.array(ratios))
        found = weights_of(d, np.zeros_like(d), low=float(low), high=float(high))
        assert found.dtype == np.float64
        assert found.shape == d.shape
        for r, w, dd in zip(ratios, found, d, strict=True):
            rho = math.exp(dd)
            if abs(rho - float(low)) < 1e-12 or abs(rho - float(high)) < 1e-12:
                continue  # on an edge: decided by the last bit of exp
            inside = float(low) <= rho <= float(high)
            assert w == (pytest.approx(rho, rel=1e-15) if inside else 0.0), (r, low, high)

    return prop


def test_masked_is_weights_keep_exactly_the_band_when_it_is_not_symmetric() -> None:
    run_property(_band_property(refimpl.masked_is_weights))


def _band_swapped(target: Array, behavior: Array, *, low: float, high: float) -> Array:
    """Reads the band mirrored about 1 (``[2 - high, 2 - low]``): right only for a symmetric band."""
    return refimpl.masked_is_weights(target, behavior, low=2.0 - high, high=2.0 - low)


def _band_on_reciprocal(target: Array, behavior: Array, *, low: float, high: float) -> Array:
    """Tests 1/ρ against the band: right only for a band symmetric in log space."""
    return refimpl.masked_is_weights(target, behavior, low=low, high=high, band_on="reciprocal")


@pytest.mark.parametrize("wrong", [_band_swapped, _band_on_reciprocal])
def test_the_band_property_rejects_symmetric_readings(wrong: Callable[..., Array]) -> None:
    rejects(_band_property(wrong))


# --- outputs of degenerate branches ------------------------------------------------------------


def test_one_token_on_policy_gives_weight_one_of_float64_in_every_weighting() -> None:
    """Token level: the inputs' shape; sequence level: one weight per sample (the docstrings)."""
    zero = np.zeros((1, 1))
    token = (
        refimpl.truncated_is_weights(zero, zero, cap=2.0),
        refimpl.masked_is_weights(zero, zero, low=0.5, high=2.0),
        refimpl.masked_is_weights(zero, zero, low=0.5, high=2.0, weight="token", level="sequence"),
        refimpl.decoupled_ppo_weights(zero, zero, cap=1.0),
        refimpl.decoupled_ppo_weights(zero, zero),
    )
    sequence = (
        refimpl.truncated_is_weights(zero, zero, cap=2.0, level="sequence"),
        refimpl.masked_is_weights(zero, zero, low=0.5, high=2.0, level="sequence"),
    )
    for found, shape in [(t, (1, 1)) for t in token] + [(q, (1,)) for q in sequence]:
        assert found.dtype == np.float64
        assert found.shape == shape
        assert found.ravel().tolist() == [1.0]


def test_an_on_policy_batch_has_staleness_zero_everywhere() -> None:
    st_ = refimpl.sample_staleness(3, [[3, 3, 3], [3]])
    assert st_.sample.dtype == np.float64
    assert st_.sample.tolist() == [0.0, 0.0]
    assert st_.token.tolist() == [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    assert st_.mask.tolist() == [[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]


# --- refusals name the first offending row ------------------------------------------------------

#: Four sequences of three tokens; sequences 1 and 3 are all padding. A sequence-level weight
#: has no ratio for them: the refusal must name the first (1), not the last.
_LP4 = np.log(np.array([[0.5, 0.25, 0.5], [0.5, 0.5, 0.5], [0.25, 0.5, 0.125], [0.5, 0.5, 0.5]]))
_LQ4 = np.log(np.array([[0.25, 0.25, 0.5], [0.5, 0.5, 0.5], [0.5, 0.25, 0.25], [0.5, 0.5, 0.5]]))
_HOLES = np.array([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
_SEQUENCE_LEVEL: dict[str, Callable[[Any], Any]] = {
    "truncated_is_weights sequence": lambda m: refimpl.truncated_is_weights(
        _LP4, _LQ4, cap=2.0, mask=m, level="sequence"
    ),
    "truncated_is_weights geometric": lambda m: refimpl.truncated_is_weights(
        _LP4, _LQ4, cap=2.0, mask=m, level="geometric"
    ),
    "masked_is_weights sequence": lambda m: refimpl.masked_is_weights(
        _LP4, _LQ4, low=0.5, high=2.0, mask=m, level="sequence"
    ),
    "masked_is_weights geometric": lambda m: refimpl.masked_is_weights(
        _LP4, _LQ4, low=0.5, high=2.0, mask=m, level="geometric"
    ),
}


@pytest.mark.parametrize("name", sorted(_SEQUENCE_LEVEL))
def test_an_all_padding_sequence_is_refused_naming_the_first(name: str) -> None:
    call = _SEQUENCE_LEVEL[name]
    level = name.split()[-1]
    with pytest.raises(
        ValueError, match=r"^mask must leave at least one valid token in every"
    ) as e:
        call(_HOLES)
    assert f"sequence (level={level!r})" in str(e.value)
    assert "Sequence 1 is all padding" in str(e.value)
    ok = _HOLES.copy()
    ok[1, 2] = ok[3, 0] = 1.0  # one valid token each: accepted, finite, zero only at padding
    w = np.asarray(call(ok))
    assert w.dtype == np.float64
    assert np.all(np.isfinite(w))


def test_an_overflowing_ratio_without_a_cap_is_refused_naming_the_first_entry() -> None:
    # Entries 1 and 4 (flat) have log-ratios 800 and 900, past exp's range; 5 is padding.
    prox = np.array([[0.0, 800.0, -1.0], [0.0, 900.0, 1000.0]])
    behaviour = np.zeros((2, 3))
    mask = np.array([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    with pytest.raises(ValueError, match=r"^logp_prox - logp_behavior must be <= 709\.") as e:
        refimpl.decoupled_ppo_weights(prox, behaviour, mask=mask)
    assert "Entry 1 has log-ratio 800.0" in str(e.value)
    # Padding past the range is not refused; the valid entries' weights are exp(d).
    prox[0, 1], prox[1, 1] = 1.0, 2.0
    w = refimpl.decoupled_ppo_weights(prox, behaviour, mask=mask)
    np.testing.assert_allclose(w, [[1.0, math.e, math.exp(-1.0)], [1.0, math.exp(2.0), 0.0]])


#: The public weights that take two log-probability arrays, with the names their refusals use.
_TWO_ARRAYS: dict[str, tuple[Callable[..., Any], str, str, dict[str, Any]]] = {
    "truncated_is_weights": (
        refimpl.truncated_is_weights,
        "logp_target",
        "logp_behavior",
        {"cap": 2.0},
    ),
    "masked_is_weights": (
        refimpl.masked_is_weights,
        "logp_target",
        "logp_behavior",
        {"low": 0.5, "high": 2.0},
    ),
    "decoupled_ppo_weights": (
        refimpl.decoupled_ppo_weights,
        "logp_prox",
        "logp_behavior",
        {"cap": 5.0},
    ),
}


@pytest.mark.parametrize("name", sorted(_TWO_ARRAYS))
def test_a_nan_is_refused_naming_the_array_that_holds_it(name: str) -> None:
    fn, first, second, kwargs = _TWO_ARRAYS[name]
    good = np.log(np.array([[0.5, 0.25], [0.125, 0.5]]))
    bad = good.copy()
    bad[1, 0] = np.nan
    for args, named in (((bad, good), first), ((good, bad), second)):
        with pytest.raises(ValueError, match=rf"^{named} must contain only finite values"):
            fn(*args, **kwargs)


def test_a_version_newer_than_the_trainer_is_refused_naming_the_first() -> None:
    # Sample 0, token 1 (version 4) and sample 1, token 0 (version 6, step 5) are both too new.
    with pytest.raises(ValueError, match=r"^token_versions must be <= trained_step") as e:
        refimpl.sample_staleness([3, 5], [[1, 4, 2], [6, 0, 0]])
    assert "Sample 0, token 1 has version 4 > trained_step 3" in str(e.value)
    with pytest.raises(ValueError, match=r"Sample 1, token 0 has version 6 > trained_step 5"):
        refimpl.sample_staleness([4, 5], [[1, 4, 2], [6, 0, 0]])


@pytest.mark.parametrize("given", ["int", "int64 array"])
def test_staleness_at_the_top_of_int64_is_exact_and_positive(given: str) -> None:
    """versions_spanned adds 1 to step − version: at step 2^63 − 1 and version 0 that is 2^63,
    one past int64, so the difference must be taken in Python ints there (not wrap negative)."""
    top = 2**63 - 1
    step: Any = top if given == "int" else np.array([top], dtype=np.int64)
    versions = np.array([[0, 2**62]], dtype=np.int64)
    spanned = refimpl.sample_staleness(step, versions, staleness_count="versions_spanned")
    assert spanned.sample.tolist() == [float(2**63)]
    assert spanned.token.tolist() == [[float(2**63), float(top - 2**62 + 1)]]
    behind = refimpl.sample_staleness(step, versions, staleness_count="versions_behind")
    assert behind.sample.tolist() == [float(top)]


# --- over_masking_scenarios: scenario (a)'s staleness has the law its docstring states ----------


def test_the_off_by_one_scenario_has_the_staleness_law_it_states() -> None:
    """Launch versions ``j - Poisson(0.7)`` clipped at 0, a third of the rows interrupted by one
    update (their later tokens one version newer): the staleness, read from the oldest token, is
    ``min(Poisson(0.7), j)`` whatever the interruptions. At ``j = 3`` and 1000 rows each cell's
    fraction is within 5 standard errors of that law (a false failure below 1e-5 over the four
    cells; the seed is fixed); versions one *older* for the interrupted rows move the cell at 1
    by 7.7 standard errors, and a clip at -1 gives staleness 4."""
    from scipy import stats

    j, n = 3, 1000
    a, _ = refimpl.over_masking_scenarios(np.random.default_rng(20261205), batch=n, trained_step=j)
    s = a.staleness
    assert s.dtype == np.float64
    assert s.shape == (n,)
    assert np.array_equal(s, np.round(s))
    assert s.min() >= 0
    assert s.max() == j  # the clip at version 0 is reached, and nothing is staler
    law = stats.poisson(0.7)
    cells = [float(law.pmf(m)) for m in range(j)] + [float(law.sf(j - 1))]
    for m, p in enumerate(cells):
        got = float(np.mean(s == m))
        assert abs(got - p) <= 5 * math.sqrt(p * (1 - p) / n), (m, got, p)
    # every row is one sample at its reference staleness, whichever weights the bug gives it
    assert a.correct.on_policy_dropped_fraction == 0.0
    assert a.buggy.on_policy_dropped_fraction == 1.0


# --- the shape rules hold alike with nonfinite="error" and "one" ------------------------------

_TOKEN_LEVEL: dict[str, Callable[..., Any]] = {
    "truncated_is_weights": lambda a, b, nf: refimpl.truncated_is_weights(
        a, b, cap=5.0, nonfinite=nf
    ),
    "masked_is_weights": lambda a, b, nf: refimpl.masked_is_weights(
        a, b, low=0.5, high=3.0, nonfinite=nf
    ),
}


@pytest.mark.parametrize("nonfinite", ["error", "one"])
@pytest.mark.parametrize("name", sorted(_TOKEN_LEVEL))
def test_the_token_weights_refuse_the_same_shapes_in_both_nonfinite_modes(
    name: str, nonfinite: str
) -> None:
    """Arrays of shape (T,) or (B, T) with T >= 1, whichever way a non-finite entry is treated
    (the 'one' mode validates finite stand-ins: a wrong branch there skipped the shape rules)."""
    fn = _TOKEN_LEVEL[name]
    half, quarter = np.log(np.full((2, 2, 3), 0.5)), np.log(np.full((2, 2, 3), 0.25))
    for a, b in ((half, quarter), (np.float64(-0.5), np.float64(-1.0))):
        with pytest.raises(ValueError, match=r"^logp_target must be 1-D or 2-D"):
            fn(a, b, nonfinite)
    with pytest.raises(ValueError, match=r"^logp_target must have at least one token"):
        fn(np.zeros((2, 0)), np.zeros((2, 0)), nonfinite)
    got = fn(half[0], quarter[0], nonfinite)  # (B, T) = (2, 3), ratio 2 everywhere
    assert got.shape == (2, 3)


@pytest.mark.parametrize("nonfinite", ["error", "one"])
def test_decoupled_weights_take_any_shape_in_both_nonfinite_modes(nonfinite: Any) -> None:
    """decoupled_ppo_weights weighs entries one by one: any shape, kept, in either mode."""
    half, quarter = np.log(np.full((2, 2, 3), 0.5)), np.log(np.full((2, 2, 3), 0.25))
    got = refimpl.decoupled_ppo_weights(half, quarter, cap=5.0, nonfinite=nonfinite)
    assert got.shape == (2, 2, 3)
    np.testing.assert_allclose(got, 2.0, rtol=1e-15)
    empty = refimpl.decoupled_ppo_weights(half[..., :0], quarter[..., :0], nonfinite=nonfinite)
    assert empty.shape == (2, 2, 0)


# --- every row of ragged token versions is checked, the first and any later one ---------------

_NOT_NUMERIC_ROWS = (["a", "b"], [object()], [[1, 2], [3]])


def check_ragged_rows_refused(staleness_of: Callable[..., Any]) -> None:
    """A row numpy cannot read as numbers, at index 0 or at a later index, is refused as a type
    error naming that row (``token_versions[i]``): never skipped, never read as the row before."""
    for bad in _NOT_NUMERIC_ROWS:
        for rows, index in (([bad, [1, 2]], 0), ([[1, 2], [3], bad], 2)):
            with pytest.raises(TypeError, match=rf"^token_versions\[{index}\] must be an array of"):
                staleness_of(5, rows)


def test_a_ragged_row_that_is_not_numeric_is_refused_naming_it() -> None:
    check_ragged_rows_refused(refimpl.sample_staleness)


def test_the_ragged_row_check_rejects_skipping_a_bad_row() -> None:
    def skipping(step: int, rows: list[Any]) -> Any:
        kept = []
        for row in rows:
            try:
                kept.append(np.asarray(row, dtype=np.float64))
            except (TypeError, ValueError):
                continue
        return refimpl.sample_staleness(step, kept)

    with pytest.raises(pytest.fail.Exception):
        check_ragged_rows_refused(skipping)


# --- a refusal of token versions points at the offending token, not the first one -------------


def check_offender_named(staleness_of: Callable[..., Any]) -> None:
    """Each rule on the real tokens' versions, broken by one token after valid ones (and after
    padding holding anything): the message names that token's sample, position and version."""
    mask = [[1, 1, 0], [1, 1, 1]]
    cases = [
        ([[2, 3, 9], [1, 2, -3]], r"be >= 0 .*Sample 1, token 2 has version -3"),
        ([[2, 3, -9], [1, 2.5, 4]], r"hold whole numbers .*Sample 1, token 1 has version 2\.5"),
        ([[2, 3, -9], [6, 1, 2]], r"be <= trained_step .*Sample 1, token 0 has version 6"),
    ]
    for versions, message in cases:
        with pytest.raises(ValueError, match=rf"(?s)^token_versions must {message}"):
            staleness_of(5, np.array(versions, dtype=np.float64), mask=mask)


def test_a_refusal_of_token_versions_names_the_offending_token() -> None:
    check_offender_named(refimpl.sample_staleness)


def test_the_offender_check_rejects_a_message_naming_the_first_token() -> None:
    def first_token(step: int, versions: Any, **kw: Any) -> Any:
        try:
            return refimpl.sample_staleness(step, versions, **kw)
        except ValueError as error:
            text = re.sub(r"Sample \d+, token \d+", "Sample 0, token 0", str(error))
            raise ValueError(text) from None

    rejects(check_offender_named, first_token)
