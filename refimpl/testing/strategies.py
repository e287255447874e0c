"""Hypothesis strategies for the inputs of refimpl's reference functions.

Downstream tests import these to generate valid inputs for their own implementation and compare it
with the reference::

    from hypothesis import given
    import refimpl
    from refimpl.testing import strategies as rst
    from refimpl.testing.tolerances import FUNCTION, agree

    @given(rst.staleness_arrays(), rst.staleness_bounds())
    def test_my_mask_matches_refimpl(s, eta):
        assert agree(my_mask(s, eta=eta), refimpl.staleness_mask(s, eta=eta),
                     FUNCTION["staleness_mask"]).all()

Every strategy draws inputs that the reference accepts (finite, in its domain), shrinks towards
small, simple cases (short arrays, on-policy tokens, staleness 0), and takes keyword-only bounds.
The conformance checks of :func:`refimpl.testing.check_conformance` are built from the same
strategies.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy.typing import NDArray

__all__ = [
    "EffortCase",
    "EffortParameters",
    "LogProbPair",
    "VTraceInputs",
    "VersionedBatch",
    "cdf_values",
    "effort_cases",
    "effort_parameters",
    "exact_length_pmfs",
    "is_bands",
    "is_caps",
    "length_distributions",
    "length_pmfs",
    "logprob_pairs",
    "n_k_pairs",
    "staleness_arrays",
    "staleness_bounds",
    "token_versions",
    "vtrace_inputs",
]


class LogProbPair(NamedTuple):
    """Log-probabilities of the same tokens under two policies, with a padding mask.

    Attributes
    ----------
    logp_target : ndarray of float64, shape (B, T)
        ``log π`` (trainer policy); at padding positions arbitrary finite values (padding garbage).
    logp_behavior : ndarray of float64, shape (B, T)
        ``log μ`` (rollout policy).
    mask : ndarray of float64, shape (B, T)
        1.0 for a real token, 0.0 for padding (right padding; every row has a real token).
    """

    logp_target: NDArray[np.float64]
    logp_behavior: NDArray[np.float64]
    mask: NDArray[np.float64]


class EffortParameters(NamedTuple):
    """Parameters of the effort penalty ``k(b) = k0·exp(−(b − b_min)/τ)``."""

    k0: float
    b_min: float
    tau: float


class EffortCase(NamedTuple):
    """Efforts ``b >= b_min`` together with the penalty parameters."""

    b: NDArray[np.float64]
    params: EffortParameters


class VersionedBatch(NamedTuple):
    """A batch trained at one step with the policy version of every token.

    Attributes
    ----------
    trained_step : int
        The trainer step ``j`` that consumes the batch.
    token_versions : list of ndarray of int64
        One 1-D array per sample: non-decreasing versions in ``[0, j]`` (a rollout interrupted by
        weight updates continues with newer versions).
    """

    trained_step: int
    token_versions: list[NDArray[np.int64]]


class VTraceInputs(NamedTuple):
    """One trajectory of V-trace inputs with rlax's names, each of shape ``(T,)``."""

    v_tm1: NDArray[np.float64]
    v_t: NDArray[np.float64]
    r_t: NDArray[np.float64]
    discount_t: NDArray[np.float64]
    rho_tm1: NDArray[np.float64]


def _floats(low: float, high: float) -> st.SearchStrategy[float]:
    return st.floats(low, high, allow_nan=False, allow_infinity=False, allow_subnormal=False)


def _weights(max_length: int) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(0, 20), min_size=1, max_size=max_length).filter(
        lambda w: sum(w) > 0
    )


def length_pmfs(*, max_length: int = 12) -> st.SearchStrategy[NDArray[np.float64]]:
    """Float pmfs over lengths ``1..M`` (``M <= max_length``), summing to 1 within a few ulp.

    Entries may be zero (gaps in the support), but the pmf always has some mass.

    Examples
    --------
    >>> from hypothesis import given
    >>> from refimpl.testing import strategies as rst
    >>> @given(rst.length_pmfs(max_length=5))
    ... def test_length_pmfs(pmf):
    ...     assert abs(pmf.sum() - 1.0) < 1e-12 and pmf.size <= 5
    >>> test_length_pmfs()
    """
    return _weights(max_length).map(lambda w: np.asarray(w, dtype=np.float64) / float(sum(w)))


def exact_length_pmfs(*, max_length: int = 8) -> st.SearchStrategy[list[Fraction]]:
    """Pmfs over lengths ``1..M`` as lists of :class:`fractions.Fraction` summing exactly to 1.

    Passing such a pmf to refimpl's pmf functions selects exact mode (``Fraction`` results).

    Examples
    --------
    >>> from hypothesis import given
    >>> from refimpl.testing import strategies as rst
    >>> @given(rst.exact_length_pmfs())
    ... def test_exact_length_pmfs(pmf):
    ...     assert sum(pmf) == 1  # exactly
    >>> test_exact_length_pmfs()
    """
    return _weights(max_length).map(lambda w: [Fraction(x, sum(w)) for x in w])


def length_distributions() -> st.SearchStrategy[Any]:
    """Frozen ``scipy.stats`` length laws with positive support.

    Lognormal (``s`` in [0.2, 2], median ``e^μ``, ``μ`` in [0, 7]), exponential, gamma, Weibull and
    uniform laws with parameters in ranges typical of rollout lengths (tens to thousands of tokens).
    The strategy's values are ``scipy.stats`` frozen distributions (``rv_continuous_frozen``).

    Examples
    --------
    >>> from hypothesis import given
    >>> from refimpl.testing import strategies as rst
    >>> @given(rst.length_distributions())
    ... def test_length_distributions(dist):
    ...     assert dist.cdf(0.0) == 0.0 and dist.mean() > 0
    >>> test_length_distributions()
    """
    from scipy import stats

    scales = _floats(1.0, 2_000.0)
    lognorm = st.builds(
        lambda s, mu: stats.lognorm(s=s, scale=float(np.exp(mu))),
        _floats(0.2, 2.0),
        _floats(0.0, 7.0),
    )
    expon = st.builds(lambda scale: stats.expon(scale=scale), scales)
    gamma = st.builds(lambda a, scale: stats.gamma(a, scale=scale), _floats(0.5, 10.0), scales)
    weibull = st.builds(
        lambda c, scale: stats.weibull_min(c, scale=scale), _floats(0.5, 3.0), scales
    )
    uniform = st.builds(
        lambda loc, width: stats.uniform(loc=loc, scale=width), _floats(1.0, 100.0), scales
    )
    return st.one_of(expon, lognorm, gamma, weibull, uniform)


def n_k_pairs(*, max_n: int = 64) -> st.SearchStrategy[tuple[int, int]]:
    """``(n, k)`` with ``1 <= k <= n <= max_n``: launch ``n`` rollouts, train the first ``k``.

    Examples
    --------
    >>> from hypothesis import given
    >>> from refimpl.testing import strategies as rst
    >>> @given(rst.n_k_pairs(max_n=8))
    ... def test_n_k_pairs(nk):
    ...     n, k = nk
    ...     assert 1 <= k <= n <= 8
    >>> test_n_k_pairs()
    """
    return st.integers(1, max_n).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n)))


def cdf_values(*, max_size: int = 16) -> st.SearchStrategy[NDArray[np.float64]]:
    """1-D arrays of CDF values ``F(ℓ)`` in ``[0, 1]`` (endpoints and ``1/2`` included often).

    Examples
    --------
    >>> from hypothesis import given
    >>> from refimpl.testing import strategies as rst
    >>> @given(rst.cdf_values())
    ... def test_cdf_values(u):
    ...     assert ((u >= 0) & (u <= 1)).all()
    >>> test_cdf_values()
    """
    element = st.one_of(st.sampled_from([0.0, 0.5, 1.0]), _floats(0.0, 1.0))
    return hnp.arrays(np.float64, st.integers(1, max_size), elements=element)


def staleness_arrays(
    *, max_staleness: int = 16, max_size: int = 32
) -> st.SearchStrategy[NDArray[np.int64]]:
    """1-D arrays of staleness values ``s >= 0`` (whole numbers, int64).

    Examples
    --------
    >>> from hypothesis import given
    >>> from refimpl.testing import strategies as rst
    >>> @given(rst.staleness_arrays(max_staleness=3))
    ... def test_staleness_arrays(s):
    ...     assert (s >= 0).all() and (s <= 3).all()
    >>> test_staleness_arrays()
    """
    return hnp.arrays(np.int64, st.integers(1, max_size), elements=st.integers(0, max_staleness))


def staleness_bounds(*, max_eta: int = 16) -> st.SearchStrategy[int]:
    """Staleness bounds ``η`` in ``[0, max_eta]`` (``η = 0``: on-policy only).

    Examples
    --------
    >>> from hypothesis import given
    >>> from refimpl.testing import strategies as rst
    >>> @given(rst.staleness_bounds(max_eta=4))
    ... def test_staleness_bounds(eta):
    ...     assert 0 <= eta <= 4
    >>> test_staleness_bounds()
    """
    return st.integers(0, max_eta)


def token_versions(
    *, max_step: int = 20, max_batch: int = 6, max_tokens: int = 12
) -> st.SearchStrategy[VersionedBatch]:
    """A trainer step ``j`` and ragged per-token versions ``v_t`` in ``[0, j]``, non-decreasing.

    Examples
    --------
    >>> from hypothesis import given
    >>> from refimpl.testing import strategies as rst
    >>> @given(rst.token_versions())
    ... def test_token_versions(batch):
    ...     assert all(v.max() <= batch.trained_step for v in batch.token_versions)
    >>> test_token_versions()
    """

    def rows(step: int) -> st.SearchStrategy[VersionedBatch]:
        row = st.lists(st.integers(0, step), min_size=1, max_size=max_tokens).map(
            lambda xs: np.asarray(sorted(xs), dtype=np.int64)
        )
        return st.lists(row, min_size=1, max_size=max_batch).map(
            lambda rs: VersionedBatch(step, rs)
        )

    return st.integers(0, max_step).flatmap(rows)


def logprob_pairs(
    *,
    max_batch: int = 4,
    max_time: int = 16,
    max_abs_logp: float = 20.0,
    padded: bool = True,
) -> st.SearchStrategy[LogProbPair]:
    """Target and behaviour log-probabilities of shape ``(B, T)`` with a right-padding mask.

    Each token is on-policy (the two log-probabilities are equal, ratio exactly 1) with substantial
    probability, so the on-policy invariants are exercised; otherwise both are drawn independently in
    ``[−max_abs_logp, 0]``. With ``padded=False`` the mask is all ones.

    Examples
    --------
    >>> from hypothesis import given
    >>> from refimpl.testing import strategies as rst
    >>> @given(rst.logprob_pairs())
    ... def test_logprob_pairs(pair):
    ...     assert pair.logp_target.shape == pair.mask.shape
    ...     assert (pair.mask.sum(axis=1) >= 1).all()
    >>> test_logprob_pairs()
    """

    @st.composite
    def draw_pair(draw: st.DrawFn) -> LogProbPair:
        batch = draw(st.integers(1, max_batch))
        time = draw(st.integers(1, max_time))
        logp = _floats(-max_abs_logp, 0.0)
        behavior = draw(hnp.arrays(np.float64, (batch, time), elements=logp))
        other = draw(hnp.arrays(np.float64, (batch, time), elements=logp))
        same = draw(hnp.arrays(np.bool_, (batch, time)))
        target = np.where(same, behavior, other)
        if padded:
            lengths = draw(st.lists(st.integers(1, time), min_size=batch, max_size=batch))
            mask = (np.arange(time)[None, :] < np.asarray(lengths)[:, None]).astype(np.float64)
        else:
            mask = np.ones((batch, time), dtype=np.float64)
        return LogProbPair(target, behavior, mask)

    return draw_pair()


def is_caps(*, max_cap: float = 20.0) -> st.SearchStrategy[float]:
    """Truncation caps ``C`` in ``[1, max_cap]`` (``C >= 1`` keeps on-policy weights at 1).

    Examples
    --------
    >>> from hypothesis import given
    >>> from refimpl.testing import strategies as rst
    >>> @given(rst.is_caps())
    ... def test_is_caps(cap):
    ...     assert 1.0 <= cap <= 20.0
    >>> test_is_caps()
    """
    return st.one_of(st.sampled_from([1.0, 2.0, 5.0]), _floats(1.0, max_cap))


def is_bands(*, max_high: float = 20.0) -> st.SearchStrategy[tuple[float, float]]:
    """Masked-IS bands ``(α, β)`` with ``0 <= α <= 1 <= β`` (the band keeps ratio 1).

    Examples
    --------
    >>> from hypothesis import given
    >>> from refimpl.testing import strategies as rst
    >>> @given(rst.is_bands())
    ... def test_is_bands(band):
    ...     low, high = band
    ...     assert 0.0 <= low <= 1.0 <= high
    >>> test_is_bands()
    """
    low = st.one_of(st.sampled_from([0.0, 0.5, 1.0]), _floats(0.0, 1.0))
    high = st.one_of(st.sampled_from([1.0, 2.0, 5.0]), _floats(1.0, max_high))
    return st.tuples(low, high)


def effort_parameters() -> st.SearchStrategy[EffortParameters]:
    """``(k0, b_min, τ)`` with ``k0`` in [0, 10], ``b_min`` in [−10, 10], ``τ`` in [0.05, 50].

    Examples
    --------
    >>> from hypothesis import given
    >>> from refimpl.testing import strategies as rst
    >>> @given(rst.effort_parameters())
    ... def test_effort_parameters(p):
    ...     assert p.k0 >= 0 and p.tau > 0
    >>> test_effort_parameters()
    """
    return st.builds(
        EffortParameters,
        k0=st.one_of(st.sampled_from([0.0, 1.0]), _floats(0.0, 10.0)),
        b_min=st.one_of(st.just(0.0), _floats(-10.0, 10.0)),
        tau=st.one_of(st.just(1.0), _floats(0.05, 50.0)),
    )


def effort_cases(*, max_size: int = 16, max_range: float = 50.0) -> st.SearchStrategy[EffortCase]:
    """Efforts ``b`` in ``[b_min, b_min + max_range]`` with their penalty parameters.

    Examples
    --------
    >>> from hypothesis import given
    >>> from refimpl.testing import strategies as rst
    >>> @given(rst.effort_cases())
    ... def test_effort_cases(case):
    ...     assert (case.b >= case.params.b_min).all()
    >>> test_effort_cases()
    """

    def with_efforts(p: EffortParameters) -> st.SearchStrategy[EffortCase]:
        offsets = hnp.arrays(
            np.float64,
            st.integers(1, max_size),
            elements=st.one_of(st.just(0.0), _floats(0.0, max_range)),
        )
        return offsets.map(lambda o: EffortCase(p.b_min + o, p))

    return effort_parameters().flatmap(with_efforts)


def vtrace_inputs(*, max_time: int = 12) -> st.SearchStrategy[VTraceInputs]:
    """One trajectory of V-trace inputs: values and rewards in [−10, 10], discounts in [0, 1]
    (0 and 1 drawn often), ratios ``π/μ`` in [0, 4] (1 drawn often).

    Examples
    --------
    >>> from hypothesis import given
    >>> from refimpl.testing import strategies as rst
    >>> @given(rst.vtrace_inputs())
    ... def test_vtrace_inputs(x):
    ...     assert x.v_tm1.shape == x.rho_tm1.shape
    >>> test_vtrace_inputs()
    """

    @st.composite
    def draw_inputs(draw: st.DrawFn) -> VTraceInputs:
        time = draw(st.integers(1, max_time))

        def arr(elements: st.SearchStrategy[float]) -> NDArray[np.float64]:
            return draw(hnp.arrays(np.float64, time, elements=elements))

        value = _floats(-10.0, 10.0)
        return VTraceInputs(
            v_tm1=arr(value),
            v_t=arr(value),
            r_t=arr(value),
            discount_t=arr(st.one_of(st.sampled_from([0.0, 0.9, 1.0]), _floats(0.0, 1.0))),
            rho_tm1=arr(st.one_of(st.just(1.0), _floats(0.0, 4.0))),
        )

    return draw_inputs()
