"""Hypothesis strategies without accidental symmetry: data on which a wrong operator shows.

Test data that is too regular hides whole classes of bugs. With weights all 1, multiplying and
dividing by a weight agree; with equal classes, a mean over classes equals a mean over items; with
a band symmetric about its centre, swapping its lower and upper bound changes nothing; with a
uniform law, a value and its mirror image are equally likely. Each strategy here draws the
opposite, and draws exact :class:`fractions.Fraction` values where the reference is rational, so a
test can compare with ``==`` (or within a few ulps of the float64 evaluation):

- :func:`asymmetric_pmfs`: a pmf whose masses are pairwise distinct (no two lengths equally likely);
- :func:`non_unit_weights`: positive weights, pairwise distinct, none equal to 1;
- :func:`distinct_values`: values pairwise distinct and not all of one sign;
- :func:`propensities`: probabilities in ``(0, 1]``, pairwise distinct and exactly representable as
  float64 (dyadic), so that the float path sees the same numbers as the exact reference;
- :func:`unequal_classes`: class sizes that are not all equal;
- :func:`asymmetric_bands`: a band ``[1 - low, 1 + high]`` with ``low != high``.
"""

from __future__ import annotations

from fractions import Fraction

from hypothesis import strategies as st

__all__ = [
    "asymmetric_bands",
    "asymmetric_pmfs",
    "distinct_values",
    "dyadic",
    "non_unit_weights",
    "propensities",
    "unequal_classes",
]


def dyadic(numerator: int, bits: int = 10) -> Fraction:
    """``numerator / 2**bits``: a rational that float64 holds exactly."""
    return Fraction(numerator, 2**bits)


def asymmetric_pmfs(*, min_size: int = 2, max_size: int = 6) -> st.SearchStrategy[list[Fraction]]:
    """Exact pmfs of ``min_size..max_size`` masses, pairwise distinct and all positive."""
    return st.lists(st.integers(1, 97), min_size=min_size, max_size=max_size, unique=True).map(
        lambda counts: [Fraction(c, sum(counts)) for c in counts]
    )


def non_unit_weights(*, size: int) -> st.SearchStrategy[list[Fraction]]:
    """``size`` positive dyadic weights in ``[1/1024, 8]``, pairwise distinct, none equal to 1."""
    return st.lists(
        st.integers(1, 8 * 1024).filter(lambda c: c != 1024),
        min_size=size,
        max_size=size,
        unique=True,
    ).map(lambda counts: [dyadic(c) for c in counts])


def distinct_values(*, size: int) -> st.SearchStrategy[list[Fraction]]:
    """``size`` dyadic values in ``[-8, 8]``, pairwise distinct, at least one of each sign when
    ``size >= 2`` (so that a dropped sign or an absolute value shows)."""
    return (
        st.lists(st.integers(-8 * 1024, 8 * 1024), min_size=size, max_size=size, unique=True)
        .filter(lambda c: size < 2 or (min(c) < 0 < max(c)))
        .map(lambda counts: [dyadic(c) for c in counts])
    )


def propensities(*, size: int) -> st.SearchStrategy[list[Fraction]]:
    """``size`` dyadic probabilities in ``[1/1024, 1]``, pairwise distinct (so at most one is 1)."""
    return st.lists(st.integers(1, 1024), min_size=size, max_size=size, unique=True).map(
        lambda counts: [dyadic(c) for c in counts]
    )


def unequal_classes(
    *, classes: int, min_size: int = 1, max_size: int = 6
) -> st.SearchStrategy[list[int]]:
    """``classes`` class sizes in ``[min_size, max_size]``, not all equal (``classes >= 2``)."""
    return st.lists(st.integers(min_size, max_size), min_size=classes, max_size=classes).filter(
        lambda sizes: len(set(sizes)) > 1
    )


def asymmetric_bands(
    *, max_eps: Fraction = Fraction(1, 2)
) -> st.SearchStrategy[tuple[Fraction, Fraction]]:
    """``(low, high)`` of a band ``[1 - low, 1 + high]``: dyadic, ``0 < low, high <= max_eps``,
    ``low != high``."""
    top = int(max_eps * 1024)
    return (
        st.tuples(st.integers(1, top), st.integers(1, top))
        .filter(lambda pair: pair[0] != pair[1])
        .map(lambda pair: (dyadic(pair[0]), dyadic(pair[1])))
    )
