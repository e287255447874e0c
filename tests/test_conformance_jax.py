"""The oracle against jax: ``xp="jax.numpy"`` hands the candidate jax arrays (float32, jax's
default precision on CPU) and reads its outputs back; a correct implementation passes, a planted bug
fails. jax is an optional test dependency (the ``test-jax`` extra, pinned in ``constraints.txt``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import pytest

from refimpl.testing import check_conformance

EXAMPLES = 4  # jax compiles every operation for each new shape: few, small draws
Array = Any  # jax.Array


def effort_penalty(b: Array, *, k0: float, b_min: float, tau: float) -> Array:
    return k0 * jnp.exp(-(b - b_min) / tau)


def staleness_mask(s: Array, *, eta: int) -> Array:
    return (s <= eta).astype(jnp.float32)


def tis(logp_target: Array, logp_behavior: Array, *, cap: float, mask: Array) -> Array:
    w = jnp.minimum(jnp.exp(logp_target - logp_behavior), cap)
    return jnp.where(mask > 0, w, 0.0)


def effort_wrong_sign(b: Array, *, k0: float, b_min: float, tau: float) -> Array:
    return k0 * jnp.exp((b - b_min) / tau)


def mask_strict(s: Array, *, eta: int) -> Array:
    return (s < eta).astype(jnp.float32)


def tis_one_at_padding(
    logp_target: Array, logp_behavior: Array, *, cap: float, mask: Array
) -> Array:
    return jnp.minimum(jnp.exp(logp_target - logp_behavior), cap)


CASES: list[tuple[str, Callable[..., Any], Callable[..., Any]]] = [
    ("effort_penalty", effort_penalty, effort_wrong_sign),
    ("staleness_mask", staleness_mask, mask_strict),
    ("tis", tis, tis_one_at_padding),
]


@pytest.mark.parametrize(("spec", "correct", "planted"), CASES, ids=[c[0] for c in CASES])
def test_a_jax_implementation_passes_and_a_planted_bug_fails(
    spec: str, correct: Callable[..., Any], planted: Callable[..., Any]
) -> None:
    report = check_conformance(
        correct, spec=spec, xp="jax.numpy", dtype="float32", max_examples=EXAMPLES
    )
    report.raise_if_failed()
    assert report.array == "jax.numpy float32"
    bad = check_conformance(
        planted,
        spec=spec,
        xp="jax.numpy",
        dtype="float32",
        max_examples=EXAMPLES,
        checks=["agrees_with_reference"],
    )
    assert bad["agrees_with_reference"].status == "failed", bad.summary()


def test_jax_arrays_reach_the_candidate() -> None:
    seen: list[str] = []

    def spy(s: Array, *, eta: int) -> Array:
        seen.append(type(s).__module__.split(".")[0])
        return staleness_mask(s, eta=eta)

    report = check_conformance(
        spy, spec="staleness_mask", xp="jax.numpy", dtype="float32", max_examples=2
    )
    report.raise_if_failed()
    assert set(seen) == {"jaxlib"} or set(seen) == {"jax"}, seen


def test_float64_without_jax_x64_is_refused_not_silently_rounded() -> None:
    with pytest.raises(ValueError, match="jax_enable_x64"):
        check_conformance(staleness_mask, spec="staleness_mask", xp="jax.numpy", dtype="float64")
