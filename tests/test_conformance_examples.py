"""Two properties of the oracle itself: explicit ``examples=`` are tried before every search, and
a declared coarser ``compute_dtype`` counts the rounding of the inputs the candidate casts.

Both were needed by the framework matrix: a divergence that the search meets only by chance moved
between checks (or vanished) when new modules changed the constants Hypothesis mixes into its
draws, and AReaL's float32 cast of log-probabilities near −513 moved a ratio by 3e-5, beyond a
tolerance that counted only the log-ratio's own size.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from refimpl.testing import check_conformance

#: A ratio of 1 (log-ratio 0) at log-probabilities far from 0, with a cap above it. The value
#: appears in no refimpl module, so Hypothesis never draws it as a constant of local source.
FAR = -777.2490234375
FAR_FROM_ZERO = [
    (
        (np.array([[FAR, -1.0]]), np.array([[FAR + 0.0625, -1.0]])),
        {"cap": 2.0, "mask": np.array([[1.0, 1.0]])},
    )
]

#: Log-probabilities near −513 that float32 does not represent: the cast alone moves the ratio
#: by about 3e-5 (AReaL's input to its float32 rejection sampling).
CAST_MATTERS = [
    (
        (np.array([[-513.4989057573221, -1.0]]), np.array([[-512.8057585767622, -1.0]])),
        {"cap": 2.0, "mask": np.array([[1.0, 1.0]])},
    )
]


def tis_in_float32(logp_target: Any, logp_behavior: Any, *, cap: float, mask: Any) -> Any:
    """A correct truncated-IS weight that, like AReaL and SkyRL, computes in float32."""
    d = np.asarray(logp_target, dtype=np.float32) - np.asarray(logp_behavior, dtype=np.float32)
    return np.minimum(np.exp(d.astype(np.float32)), np.float32(cap)) * np.asarray(mask)


def tis_wrong_far_from_zero(logp_target: Any, logp_behavior: Any, *, cap: float, mask: Any) -> Any:
    """Wrong only at one log-probability (a bug no draw reaches; an example does)."""
    t, b = np.asarray(logp_target), np.asarray(logp_behavior)
    w = np.minimum(np.exp(t - b), cap) * np.asarray(mask)
    return np.where(t == FAR, w * 1.01, w)


def test_an_explicit_example_finds_a_bug_the_search_does_not() -> None:
    searched = check_conformance(
        tis_wrong_far_from_zero, spec="tis", checks=["agrees_with_reference"], max_examples=30
    )
    assert searched.ok, "the search met the example's input: the test needs a rarer bug"
    given = check_conformance(
        tis_wrong_far_from_zero,
        spec="tis",
        checks=["agrees_with_reference"],
        max_examples=30,
        examples=[FAR_FROM_ZERO],
    )
    result = given["agrees_with_reference"]
    assert result.status == "failed"
    assert repr(FAR) in result.counterexample


def test_an_example_that_passes_changes_no_verdict() -> None:
    plain = check_conformance(tis_in_float32, spec="tis", dtype="float32", max_examples=20)
    given = check_conformance(
        tis_in_float32, spec="tis", dtype="float32", max_examples=20, examples=[FAR_FROM_ZERO]
    )
    assert [r.status for r in plain.results] == [r.status for r in given.results]


def test_a_float32_computation_of_float64_inputs_passes_with_its_compute_dtype() -> None:
    report = check_conformance(
        tis_in_float32,
        spec="tis",
        conventions={"compute_dtype": "float32"},
        checks=["agrees_with_reference"],
        max_examples=20,
        examples=[CAST_MATTERS],
    )
    report.raise_if_failed()
    # the example needs the allowance: without the declared compute dtype it fails
    undeclared = check_conformance(
        tis_in_float32,
        spec="tis",
        checks=["agrees_with_reference"],
        max_examples=20,
        examples=[CAST_MATTERS],
    )
    assert undeclared["agrees_with_reference"].status == "failed"
    assert "-513.4989057573221" in undeclared["agrees_with_reference"].counterexample


def test_the_compute_dtype_allowance_still_rejects_an_error_beyond_the_cast() -> None:
    def biased(logp_target: Any, logp_behavior: Any, *, cap: float, mask: Any) -> Any:
        return tis_in_float32(logp_target, logp_behavior, cap=cap, mask=mask) * 1.001

    report = check_conformance(
        biased,
        spec="tis",
        conventions={"compute_dtype": "float32"},
        checks=["agrees_with_reference"],
        max_examples=20,
        examples=[CAST_MATTERS],
    )
    assert report["agrees_with_reference"].status == "failed"


@pytest.mark.parametrize(
    ("examples", "match"),
    [
        ("calls", r"examples must be an iterable of lists of calls"),
        ([[]], r"examples must hold non-empty lists of \(args tuple, kwargs dict\)"),
        ([[((np.zeros((1, 1)),), "cap")]], r"examples must hold non-empty lists"),
    ],
)
def test_malformed_examples_are_refused_with_the_fix(examples: Any, match: str) -> None:
    with pytest.raises((ValueError, TypeError), match=match):
        check_conformance(tis_in_float32, spec="tis", examples=examples)
