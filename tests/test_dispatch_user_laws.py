"""Continuous laws written by a user: ``rv_continuous`` subclasses with no quantile function.

scipy inverts such a law's cdf by a root search, one point at a time, so the survival-coordinate
quadrature (``dist.isf`` at about 12,900 nodes) and scipy's own ``mean`` (``ppf`` integrated over
``(0, 1)``) took minutes for a two-component mixture. refimpl integrates such laws in the length
coordinate instead, with ``sf`` only. These tests wrap scipy's built-in laws so that they hide
their inverse, and require the length-coordinate results to equal the built-in path's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.stats

import refimpl
from refimpl.dispatch import _has_own_inverse


def hidden_inverse(law: Any) -> Any:
    """The same law as an ``rv_continuous`` subclass that defines only ``_pdf``, ``_cdf``, ``_sf``."""

    class Hidden(scipy.stats.rv_continuous):
        def _pdf(self, x: Any, *args: Any) -> Any:
            return np.asarray(law.pdf(x))

        def _cdf(self, x: Any, *args: Any) -> Any:
            return np.asarray(law.cdf(x))

        def _sf(self, x: Any, *args: Any) -> Any:
            return np.asarray(law.sf(x))

    low, high = law.support()
    return Hidden(a=float(low), b=float(high), name="hidden")()


LAWS = {
    "exponential": scipy.stats.expon(scale=100.0),
    "lognormal(6, 1)": scipy.stats.lognorm(s=1.0, scale=np.exp(6.0)),
    "gamma(2)": scipy.stats.gamma(a=2.0, scale=300.0),
    "pareto(3), shifted support": scipy.stats.pareto(b=3.0, scale=50.0),
    "uniform(100, 900)": scipy.stats.uniform(loc=100.0, scale=800.0),
}


def test_the_wrapper_hides_the_inverse_and_builtin_laws_keep_theirs() -> None:
    for law in LAWS.values():
        assert _has_own_inverse(law)
        assert not _has_own_inverse(hidden_inverse(law))


@pytest.mark.parametrize("name", sorted(LAWS))
@pytest.mark.parametrize(("n", "k"), [(2, 1), (16, 8), (64, 60), (256, 3)])
def test_a_law_without_its_own_inverse_gives_the_builtin_values(name: str, n: int, k: int) -> None:
    law, hidden = LAWS[name], hidden_inverse(LAWS[name])
    assert refimpl.selected_mean(hidden, n=n, k=k) == pytest.approx(
        refimpl.selected_mean(law, n=n, k=k), rel=1e-9
    )
    assert refimpl.expected_max(hidden, n=n) == pytest.approx(
        refimpl.expected_max(law, n=n), rel=1e-9
    )
    got, want = refimpl.length_bias(hidden, n=n, k=k), refimpl.length_bias(law, n=n, k=k)
    assert got.true_mean == pytest.approx(want.true_mean, rel=1e-9)
    assert got.ratio == pytest.approx(want.ratio, rel=1e-9)


def test_a_wrong_tail_is_seen() -> None:
    # The check above can fail: a law whose tail beyond the last break quantile is cut off (S = 0
    # past its 1 - 1e-9 quantile) gives a visibly different expected maximum for n = 256.
    law = scipy.stats.lognorm(s=1.0, scale=np.exp(6.0))
    cut = float(law.ppf(1 - 1e-9))

    class Cut(scipy.stats.rv_continuous):
        def _cdf(self, x: Any, *args: Any) -> Any:
            return np.where(x < cut, law.cdf(x), 1.0)

        def _sf(self, x: Any, *args: Any) -> Any:
            return np.where(x < cut, law.sf(x), 0.0)

        def _pdf(self, x: Any, *args: Any) -> Any:
            return np.where(x < cut, law.pdf(x), 0.0)

    truncated = Cut(a=0.0, name="cut")()
    assert refimpl.expected_max(truncated, n=256) != pytest.approx(
        refimpl.expected_max(law, n=256), rel=1e-9
    )
