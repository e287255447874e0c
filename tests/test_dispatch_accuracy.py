"""Float64 accuracy of ``inclusion_probability_pmf`` at large ``n`` against a 360-digit reference.

The reference evaluates the tie-interval closed form (claim LB2) with mpmath at 360 significant
digits, computing the binomial cdfs as sums of non-negative terms, so the difference
``G(F(ℓ)) - G(F(ℓ-1))`` keeps at least 60 correct digits for every ``π > 1e-280``. The pmf is
taken exactly as the float64 values passed to refimpl. The cases are the ones that exposed
cancellation while the float path was developed (tiny tie intervals, the upper tail, ``k`` near
``n``). Bound asserted: relative error ``<= 1e-10`` for ``n <= 10^4`` (measured worst over 90 random
cases: 4e-12); the condition number alone is about ``(n - k)·ε`` in the upper tail, where ``π``
scales as ``S(ℓ)^{n-k}``.
"""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest

import refimpl


def _binomial_terms(m: int, x: mp.mpf) -> list[mp.mpf]:
    if x == 0:
        return [mp.mpf(1)] + [mp.mpf(0)] * m
    if x == 1:
        return [mp.mpf(0)] * m + [mp.mpf(1)]
    y = 1 - x
    term = y**m
    out = [term]
    ratio = x / y
    for j in range(m):
        term = term * (m - j) / (j + 1) * ratio
        out.append(term)
    return out


def reference_pi(pmf: np.ndarray, n: int, k: int, indices: list[int]) -> list[mp.mpf]:
    """π at the given support indices, 360 digits, from the float64 pmf as given."""
    with mp.workdps(360):
        probs = [mp.mpf(float(x)) for x in pmf]
        total = mp.fsum(probs)
        probs = [x / total for x in probs]

        def g(x: mp.mpf) -> mp.mpf:
            below = _binomial_terms(n - 1, x)
            full = _binomial_terms(n, x)
            return x * mp.fsum(below[:k]) + mp.mpf(k) / n * mp.fsum(full[k + 1 :])

        out = []
        for i in indices:
            low = mp.fsum(probs[:i])
            out.append((g(low + probs[i]) - g(low)) / probs[i])
        return out


def _normed(values: list[float]) -> np.ndarray:
    arr = np.array(values, dtype=np.float64)
    return np.asarray(arr / arr.sum(), dtype=np.float64)


CASES = [
    # (name, pmf, n, k)
    ("upper-tail-closed-form", np.array([0.95193676, 0.04806324]), 10_000, 9409),
    ("deep-upper-tail", np.array([0.87477017, 0.12522983]), 10_000, 8097),
    ("tiny-and-large-mixed", _normed([3e-11, 0.4, 2e-9, 0.35, 1e-12, 0.25]), 1_000, 482),
    ("many-narrow-intervals", np.full(2_000, 1 / 2_000), 10_000, 5_000),
    ("k-is-one", _normed([4e-7, 0.3, 0.7]), 1_000, 1),
]


@pytest.mark.parametrize(("pmf", "n", "k"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_float_inclusion_probability_is_accurate_at_large_n(
    pmf: np.ndarray, n: int, k: int
) -> None:
    found = refimpl.inclusion_probability_pmf(pmf, n=n, k=k)
    indices = list(range(pmf.size)) if pmf.size <= 10 else [0, 999, 1000, 1150]
    for i, want in zip(indices, reference_pi(pmf, n, k, indices), strict=True):
        if want > mp.mpf(10) ** -280:
            rel = abs((mp.mpf(float(found[i])) - want) / want)
            assert rel <= 1e-10, f"index {i}: refimpl {found[i]!r}, reference {mp.nstr(want, 20)}"


def test_accuracy_reference_rejects_the_naive_difference() -> None:
    """The naive float difference G(F(ℓ)) - G(F(ℓ-1)) fails the same bound (so the test can fail)."""
    from scipy import special

    pmf, n, k = CASES[1][1], CASES[1][2], CASES[1][3]
    cdf = np.concatenate(([0.0], np.cumsum(pmf)))
    g = (k / n) * special.betainc(k + 1.0, n - k, cdf) + cdf * special.betainc(n - k, k, 1 - cdf)
    naive = (g[1:] - g[:-1]) / pmf
    want = reference_pi(pmf, n, k, [1])[0]
    assert abs((mp.mpf(float(naive[1])) - want) / want) > 1e-10
