"""Importance weights gated by the binary KL or TV of the sampled token's probabilities
(refimpl.losses.divergence_gated_weights).

Exact values on hand-worked tokens; torch on OpenRLHF's formula written here (clamped
probabilities, ``keep = (stat >= 0) & (stat <= δ)``); properties (a kept unit keeps its ratio,
on-policy weight 1, monotone in δ, padding inert), each run against a wrong variant it must reject;
the specs refuse wrong candidates; validation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import pytest
import torch
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

from refimpl.errors import RefimplError
from refimpl.losses import divergence_gated_weights
from refimpl.testing import check_conformance

Array = NDArray[np.float64]
Gate = Callable[..., Array]

# ---------------------------------------------------------------------------------------------
# (1) exact values
# ---------------------------------------------------------------------------------------------


def test_hand_worked_tv_token_and_sequence() -> None:
    lt, lb = np.log([[0.5, 0.9, 0.25]]), np.log([[0.5, 0.3, 0.5]])  # TV 0, 0.6, 0.25
    tok = divergence_gated_weights(lt, lb, delta=0.25, divergence="tv")
    assert tok.tolist() == [[1.0, 0.0, 0.5]]  # 0.25 is kept: the region is closed
    seq = divergence_gated_weights(lt, lb, delta=0.3, divergence="tv", level="sequence")
    assert np.allclose(seq, [[1.0, 3.0, 0.5]], rtol=1e-15, atol=0.0)


def test_hand_worked_binary_kl() -> None:
    # KL(1/2 || 1/4) = (1/2)log 2 + (1/2)log(2/3)
    kl = 0.5 * math.log(2.0) + 0.5 * math.log(2.0 / 3.0)
    lt, lb = np.log([[0.25]]), np.log([[0.5]])
    assert divergence_gated_weights(lt, lb, delta=kl * (1 + 1e-12)).tolist() == [[0.5]]
    assert divergence_gated_weights(lt, lb, delta=kl * (1 - 1e-12)).tolist() == [[0.0]]


def test_an_empty_row_and_padding_get_zero() -> None:
    got = divergence_gated_weights(
        [[-1.0, -1.0], [-1.0, -1.0]], [[-1.0, -1.0], [-1.0, -1.0]], delta=0.1, mask=[[0, 0], [1, 0]]
    )
    assert got.tolist() == [[0.0, 0.0], [1.0, 0.0]]


# ---------------------------------------------------------------------------------------------
# (2) against torch on OpenRLHF's formula
# ---------------------------------------------------------------------------------------------


@st.composite
def batches(draw: st.DrawFn) -> tuple[Array, Array, Array]:
    b, t = draw(st.integers(1, 3)), draw(st.integers(1, 5))
    logp = st.floats(-6.0, 0.0, allow_subnormal=False)
    lb = np.asarray(draw(st.lists(logp, min_size=b * t, max_size=b * t))).reshape(b, t)
    lt = np.asarray(draw(st.lists(logp, min_size=b * t, max_size=b * t))).reshape(b, t)
    lengths = draw(st.lists(st.integers(1, t), min_size=b, max_size=b))
    mask = (np.arange(t)[None, :] < np.asarray(lengths)[:, None]).astype(np.float64)
    return lt, lb, mask


def _torch_gate(lt: Array, lb: Array, mask: Array, delta: float, kind: str, seq: bool) -> Array:
    p = torch.tensor(lb).exp().clamp(1e-6, 1 - 1e-6)
    q = torch.tensor(lt).exp().clamp(1e-6, 1 - 1e-6)
    if kind == "binary_kl":
        stat = p * (p / q).log() + (1 - p) * ((1 - p) / (1 - q)).log()
    else:
        stat = (p - q).abs()
    m = torch.tensor(mask)
    if seq:
        stat = ((stat * m).sum(-1) / m.sum(-1)).unsqueeze(-1).expand_as(stat)
    keep = (stat >= 0) & (stat <= delta)
    return (torch.where(keep, torch.tensor(lt - lb).exp(), 0.0) * m).numpy()


@given(batches(), st.sampled_from(["binary_kl", "tv"]), st.booleans(), st.floats(0.0, 0.5))
def test_matches_torch_on_openrlhfs_formula(
    batch: tuple[Array, Array, Array], kind: str, seq: bool, delta: float
) -> None:
    lt, lb, mask = batch
    got = divergence_gated_weights(
        lt,
        lb,
        delta=delta,
        divergence="binary_kl" if kind == "binary_kl" else "tv",
        level="sequence" if seq else "token",
        prob_clamp=1e-6,
        mask=mask,
    )
    want = _torch_gate(lt, lb, mask, delta, kind, seq)
    same = np.isclose(got, want, rtol=1e-13, atol=0.0)
    # a unit within rounding of delta may go either way (a different summation order)
    either = (got == 0.0) | (want == 0.0)
    assert np.all(same | either), (got, want)
    assert np.sum(~same) <= mask.shape[1] if seq else np.sum(~same) <= 1


# ---------------------------------------------------------------------------------------------
# (3) properties, each paired with a wrong variant it rejects
# ---------------------------------------------------------------------------------------------


def _reverse_kl(lt: Any, lb: Any, *, delta: float, mask: Any = None) -> Array:
    """The binary KL with its arguments swapped: D(q || p) instead of D(p || q)."""
    swapped = divergence_gated_weights(lb, lt, delta=delta, mask=mask)
    d = np.asarray(lt, dtype=np.float64) - np.asarray(lb, dtype=np.float64)
    return np.asarray(swapped * np.exp(2.0 * d), dtype=np.float64)


def _indicator(lt: Any, lb: Any, *, delta: float, mask: Any = None) -> Array:
    """The gate's indicator as the weight (1 instead of the ratio)."""
    w = divergence_gated_weights(lt, lb, delta=delta, mask=mask)
    return np.asarray((w > 0).astype(np.float64))


def check_kept_units_keep_their_ratio(gate: Gate) -> Callable[[], None]:
    @given(batches(), st.floats(0.0, 2.0))
    def prop(batch: tuple[Array, Array, Array], delta: float) -> None:
        lt, lb, mask = batch
        got = gate(lt, lb, delta=delta, mask=mask)
        kept = got > 0
        np.testing.assert_allclose(got[kept], np.exp(lt - lb)[kept], rtol=1e-14, atol=0.0)

    return prop


def test_kept_units_keep_their_ratio() -> None:
    run_property(check_kept_units_keep_their_ratio(divergence_gated_weights))


def test_kept_property_rejects_the_indicator() -> None:
    rejects(check_kept_units_keep_their_ratio(_indicator))


def check_monotone_in_delta(gate: Gate) -> Callable[[], None]:
    """A larger radius keeps at least the units a smaller one keeps; the binary KL's region for a
    token is the set of q around p, so D(p || q) is what is compared (not D(q || p))."""

    @given(batches(), st.floats(0.0, 1.0), st.floats(0.0, 1.0))
    def prop(batch: tuple[Array, Array, Array], a: float, b: float) -> None:
        lt, lb, mask = batch
        small, large = min(a, b), max(a, b)
        lo = gate(lt, lb, delta=small, mask=mask) > 0
        hi = gate(lt, lb, delta=large, mask=mask) > 0
        assert np.all(hi | ~lo)
        want = divergence_gated_weights(lt, lb, delta=large, mask=mask) > 0
        np.testing.assert_array_equal(hi, want)

    return prop


def test_monotone_in_delta() -> None:
    run_property(check_monotone_in_delta(divergence_gated_weights))


def test_monotone_property_rejects_the_reversed_kl() -> None:
    rejects(check_monotone_in_delta(_reverse_kl))


# ---------------------------------------------------------------------------------------------
# (4) the specs refuse wrong candidates
# ---------------------------------------------------------------------------------------------

EXAMPLES = 40


@pytest.mark.parametrize("spec", ["divergence_gated_is", "divergence_gated_is_sequence"])
def test_the_specs_refuse_the_indicator_and_the_reversed_kl(spec: str) -> None:
    level: Literal["token", "sequence"] = "token" if spec == "divergence_gated_is" else "sequence"

    def indicator(lt: Any, lb: Any, *, delta: float, mask: Any) -> Array:
        w = divergence_gated_weights(lt, lb, delta=delta, mask=mask, level=level)
        return np.asarray((w > 0).astype(np.float64))

    def reversed_kl(lt: Any, lb: Any, *, delta: float, mask: Any) -> Array:
        keep = divergence_gated_weights(lb, lt, delta=delta, mask=mask, level=level) > 0
        ratio = np.exp(np.asarray(lt, dtype=np.float64) - np.asarray(lb, dtype=np.float64))
        return np.asarray(np.where(keep, ratio, 0.0) * np.asarray(mask), dtype=np.float64)

    for wrong, check in ((indicator, "kept_weight_is_the_ratio"), (reversed_kl, "values")):
        report = check_conformance(
            wrong, spec=spec, checks=(check,), max_examples=EXAMPLES, shrink=False
        )
        assert [r.status for r in report.results] == ["failed"], report.summary()


# ---------------------------------------------------------------------------------------------
# (5) validation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"delta": -1e-12}, "delta"),
        ({"delta": 0.1, "divergence": "kl"}, "divergence"),
        ({"delta": 0.1, "level": "geometric"}, "level"),
        ({"delta": 0.1, "prob_clamp": 0.5}, "prob_clamp"),
        ({"delta": 0.1, "prob_clamp": 0.0}, "prob_clamp"),
    ],
)
def test_parameters_are_validated(kwargs: dict[str, Any], name: str) -> None:
    with pytest.raises(RefimplError, match=name):
        divergence_gated_weights([[-1.0]], [[-1.0]], **kwargs)


def test_a_positive_log_probability_is_refused_naming_the_token() -> None:
    with pytest.raises(RefimplError, match=r"logp_behavior.*b=0, t=1"):
        divergence_gated_weights([[-1.0, -1.0]], [[-1.0, 0.5]], delta=0.1)


def test_a_kept_ratio_beyond_float64_is_refused() -> None:
    with pytest.raises(RefimplError, match="smaller delta"):
        divergence_gated_weights([[0.0]], [[-800.0]], delta=1.0, divergence="tv")
