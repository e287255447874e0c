r"""# The high-entropy token mask keeps at least the top fraction

Sort the $n$ valid entropies, $x_{(0)} \le \dots \le x_{(n-1)}$. The quantile with linear
interpolation at level $q = 1 - \rho$ sits at position $h = q(n-1)$:
$\theta = x_{(\lfloor h\rfloor)} + (h - \lfloor h\rfloor)(x_{(\lceil h\rceil)} - x_{(\lfloor h\rfloor)})$,
so $x_{(\lfloor h\rfloor)} \le \theta \le x_{(\lceil h\rceil)}$.

**Claim HE1.** Every token of rank $\ge \lceil h\rceil$ has entropy $\ge x_{(\lceil h\rceil)} \ge \theta$
and is kept: at least $n - \lceil (1-\rho)(n-1)\rceil$ tokens survive, about $\rho n$ (ties at the
threshold may add more). A larger $\rho$ lowers $\theta$, so the kept sets are nested.

The check enumerates every multiset of small integer entropies and computes the bound and the
threshold in exact arithmetic (Fractions), against `refimpl.losses.entropy_mask`.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np

from proofs._framework import claim
from refimpl.losses.entropy_mask import high_entropy_mask


def _threshold(values: list[int], rho: Fraction) -> Fraction:
    xs = sorted(Fraction(v) for v in values)
    h = (1 - rho) * (len(xs) - 1)
    lo, hi = math.floor(h), math.ceil(h)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])


@claim(
    "HE1",
    r"The mask keeps at least $n - \lceil(1-\rho)(n-1)\rceil$ of the $n$ valid tokens, exactly "
    r"those with entropy $\ge \theta$, and a larger $\rho$ keeps a superset.",
    method="exact",
    scope="every multiset of 1 to 5 entropies in {0, 1, 2, 3}, rho in {0, 1/5, 1/4, 1/2, 3/4, 1}",
)
def keeps_the_top_fraction() -> None:
    fractions = [
        Fraction(0),
        Fraction(1, 5),
        Fraction(1, 4),
        Fraction(1, 2),
        Fraction(3, 4),
        Fraction(1),
    ]
    for n in range(1, 6):
        for values in itertools.combinations_with_replacement(range(4), n):
            previous = np.zeros((1, n))
            for rho in fractions:
                theta = _threshold(list(values), rho)
                expected = np.array([[1.0 if Fraction(v) >= theta else 0.0 for v in values]])
                found = high_entropy_mask(np.array([values], dtype=float), top_fraction=float(rho))
                assert np.array_equal(found, expected), (values, rho)
                bound = n - math.ceil((1 - rho) * (n - 1))
                assert found.sum() >= bound, (values, rho)
                assert np.all(found >= previous), (values, rho)
                previous = found
