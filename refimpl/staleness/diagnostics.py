"""What a mask or a weighting kept and dropped, and the over-masking bug it reveals.

:func:`effective_sample_size` (Kish), :func:`masking_diagnostics` (kept fraction, on-policy
samples dropped, the length of what was kept) and :func:`over_masking_scenarios`, two worked
bugs (an off-by-one mask and an importance mask tighter than the numeric mismatch) beside their
correct weighting.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import (
    as_float_array,
    as_int,
    as_real,
    invalid,
    require_in_range,
    require_same_shape,
    wrong_type,
)
from refimpl.staleness._checks import _as_choice
from refimpl.staleness.importance_weights import masked_is_weights
from refimpl.staleness.masks import staleness_mask
from refimpl.staleness.versions import _as_staleness, sample_staleness

__all__ = [
    "MaskingDiagnostics",
    "OverMaskingScenario",
    "effective_sample_size",
    "masking_diagnostics",
    "over_masking_scenarios",
]


class MaskingDiagnostics(NamedTuple):
    """What a mask or weighting kept and dropped (see :func:`masking_diagnostics`).

    Attributes
    ----------
    kept_fraction : float
        Fraction of samples with weight ``> 0``.
    on_policy_dropped_fraction : float
        Fraction of on-policy samples (``s = 0``) with weight 0. Positive for a staleness mask means
        over-masking (e.g. an off-by-one in version counting); ``0.0`` when there is no on-policy
        sample (see ``on_policy_count``).
    on_policy_count : int
        Number of samples with ``s = 0``.
    effective_sample_size : float
        ``(Σw)²/Σw²`` (0.0 when every weight is 0).
    staleness_values : ndarray
        The distinct staleness values present, increasing.
    keep_rate_by_staleness : ndarray
        Fraction kept among the samples with each staleness value.
    count_by_staleness : ndarray of int64
        Number of samples with each staleness value.
    length_edges : ndarray
        Edges of the length-quantile bins (empty when ``lengths`` is not given): ``edges[0]`` is the
        shortest length, ``edges[-1]`` the longest, and bin ``i`` holds the lengths in
        ``(edges[i], edges[i+1]]`` (the first bin also ``edges[0]``). Interior edges are data
        points, so no bin is empty; ties can merge bins.
    keep_rate_by_length : ndarray
        Fraction kept in each length bin (empty when ``lengths`` is not given).
    count_by_length : ndarray of int64
        Number of samples in each length bin.
    """

    kept_fraction: float
    on_policy_dropped_fraction: float
    on_policy_count: int
    effective_sample_size: float
    staleness_values: NDArray[np.float64]
    keep_rate_by_staleness: NDArray[np.float64]
    count_by_staleness: NDArray[np.int64]
    length_edges: NDArray[np.float64]
    keep_rate_by_length: NDArray[np.float64]
    count_by_length: NDArray[np.int64]


class OverMaskingScenario(NamedTuple):
    """One worked over-masking bug: a correct and a buggy weighting of the same batch.

    Attributes
    ----------
    name : str
        ``"off_by_one"`` or ``"is_mask_tighter_than_mismatch"``.
    description : str
        What the bug is, in one sentence.
    staleness : ndarray, shape (B,)
        The reference staleness of each sample (:func:`sample_staleness`).
    lengths : ndarray, shape (B,)
        Generated length of each sample.
    weights_correct, weights_buggy : ndarray, shape (B,)
        Per-sample weights from the correct and from the buggy configuration.
    correct, buggy : MaskingDiagnostics
        :func:`masking_diagnostics` of each, given the reference staleness and the lengths.
    """

    name: str
    description: str
    staleness: NDArray[np.float64]
    lengths: NDArray[np.float64]
    weights_correct: NDArray[np.float64]
    weights_buggy: NDArray[np.float64]
    correct: MaskingDiagnostics
    buggy: MaskingDiagnostics


def _as_weights(w: ArrayLike, *, name: str = "w") -> NDArray[np.float64]:
    arr = as_float_array(w, name=name, ndim=1)
    if arr.size == 0:
        raise invalid(name, "hold at least one weight", arr, "Pass a non-empty 1-D array.")
    require_in_range(arr, name=name, low=0.0, meaning="importance weights", fix=".")
    return arr


def effective_sample_size(w: ArrayLike, *, ess: Literal["count", "fraction"] = "count") -> float:
    r"""Kish's effective sample size of a set of non-negative weights.

    .. math::

        \mathrm{ESS}(w) = \frac{\bigl(\sum_i w_i\bigr)^2}{\sum_i w_i^2}.

    Parameters
    ----------
    w : array_like, shape (n,)
        Weights, finite and ``>= 0``, ``n >= 1``.
    ess : {"count", "fraction"}
        ``"fraction"``: the ESS divided by ``n``, in ``(0, 1]`` (verl's
        ``rollout_is_eff_sample_size``). Default: the count.

    Returns
    -------
    float
        The ESS, in ``[1, n]`` when some weight is positive; ``0.0`` when every weight is 0 (nothing
        is kept).

    Raises
    ------
    ValueError
        If ``w`` is empty, not 1-D, negative or non-finite.

    Notes
    -----
    .. warning::

        This is Kish's ESS, a **count** in ``[1, n]``. verl 0.9.1's metric
        ``rollout_is_eff_sample_size`` is the **fraction** ``ESS / n`` in ``(0, 1]`` (computed as
        ``1 / mean((w / mean(w))²)`` over the valid tokens, on the truncated weights): divide by
        ``n`` before comparing.

    ``ESS = n`` iff all weights are equal (and positive); ``ESS = 1`` iff one weight is positive;
    invariant to scaling ``w`` and to permuting it (claims ESS1–ESS3). Computed on ``w / max(w)`` so
    that huge weights do not overflow.

    Examples
    --------
    >>> import refimpl
    >>> refimpl.effective_sample_size([1.0, 1.0, 1.0, 1.0])
    4.0
    >>> refimpl.effective_sample_size([1.0, 0.0, 0.0, 3.0])
    1.6
    """
    arr = _as_weights(w)
    scale = _as_choice(
        ess,
        name="ess",
        choices=("count", "fraction"),
        fix="Pass ess='count' ((Σw)²/Σw²) or 'fraction' (divided by n).",
    )
    top = float(arr.max())
    if top == 0.0:
        return 0.0
    x = arr / top
    value = float(x.sum() ** 2 / np.square(x).sum())
    return value / arr.size if scale == "fraction" else value


def _length_bins(
    lengths: NDArray[np.float64], bins: int
) -> tuple[NDArray[np.float64], NDArray[np.intp]]:
    """Quantile bins ``(e_i, e_{i+1}]`` whose interior edges are data points; none is empty.

    The interior edges are the ``i/bins`` quantiles (``method="inverted_cdf"``, so each is a data
    point), duplicates and edges equal to the maximum removed; each bin then holds its right edge.
    """
    bins = min(bins, lengths.size)  # more bins than samples split nothing further
    probs = np.arange(1, bins) / bins
    interior = np.unique(np.quantile(lengths, probs, method="inverted_cdf"))
    top = float(lengths.max())
    interior = interior[interior < top]
    edges = np.concatenate([[float(lengths.min())], interior, [top]])
    index = np.searchsorted(interior, lengths, side="left")
    return edges.astype(np.float64), index


def masking_diagnostics(
    s: ArrayLike,
    w: ArrayLike,
    *,
    lengths: ArrayLike | None = None,
    length_bins: int = 4,
    ess: Literal["count", "fraction"] = "count",
) -> MaskingDiagnostics:
    r"""What a mask or a weighting keeps: overall, among on-policy samples, by staleness, by length.

    .. math::

        \text{kept} = \frac{1}{n}\sum_i \mathbb{1}[w_i > 0], \qquad
        \text{on-policy dropped} = \frac{\sum_i \mathbb{1}[s_i = 0,\, w_i = 0]}
                                        {\sum_i \mathbb{1}[s_i = 0]}, \qquad
        \mathrm{ESS} = \frac{(\sum_i w_i)^2}{\sum_i w_i^2}.

    Parameters
    ----------
    s : array_like of int, shape (n,)
        The **reference** staleness of each sample (:func:`sample_staleness` on the recorded token
        versions), not the staleness the code under test computed: comparing the two is the point.
    w : array_like, shape (n,)
        The per-sample weight the code under test applied (0 = dropped); for token-level weights
        pass a per-sample summary (e.g. the sequence-level weight).
    lengths : array_like, shape (n,), optional
        Generated length of each sample, for the keep rate by length quantile.
    length_bins : int
        Number of length-quantile bins (``>= 1``); bins whose edges coincide are merged.
    ess : {"count", "fraction"}
        The ESS as a count in ``[1, n]`` (default), or divided by ``n`` (verl's
        ``rollout_is_eff_sample_size``), as in :func:`effective_sample_size`.

    Returns
    -------
    MaskingDiagnostics
        Kept fraction, on-policy dropped fraction (and count), ESS, keep rate by staleness value,
        keep rate by length-quantile bin.

    Raises
    ------
    ValueError
        If shapes differ (the message shows both), ``s`` is negative or non-integral, ``w`` is
        negative, or a value is non-finite.

    Notes
    -----
    A correct staleness mask has ``on_policy_dropped_fraction == 0``; a positive value is the
    over-masking bug (:func:`over_masking_scenarios`). A keep rate that falls with length is the
    length trap: what is dropped cannot be reweighted back (conventions §async-dispatch). Invariant under permuting
    the samples.

    Examples
    --------
    An off-by-one that counts every sample one version too stale, with ``η = 0``:

    >>> import refimpl
    >>> s = [0, 0, 1, 2]
    >>> buggy = refimpl.staleness_mask([1, 1, 2, 3], eta=0)
    >>> d = refimpl.masking_diagnostics(s, buggy)
    >>> d.kept_fraction, d.on_policy_dropped_fraction
    (0.0, 1.0)
    >>> d = refimpl.masking_diagnostics(s, refimpl.staleness_mask(s, eta=1), lengths=[10, 20, 30, 40])
    >>> d.keep_rate_by_staleness
    array([1., 1., 0.])
    >>> d.keep_rate_by_length
    array([1., 1., 1., 0.])
    >>> refimpl.masking_diagnostics(s, [1, 1, 1, 0], ess="fraction").effective_sample_size
    0.75
    """
    s_arr = _as_staleness(s)
    if s_arr.ndim != 1:
        raise invalid("s", "be 1-D (one staleness per sample)", s_arr, "Pass shape (n,).")
    w_arr = _as_weights(w)
    require_same_shape(s_arr, w_arr, names=("s", "w"))
    nb = as_int(length_bins, name="length_bins", minimum=1, meaning="number of length bins")
    kept = w_arr > 0
    n = s_arr.size
    on_policy = s_arr == 0
    n_on = int(on_policy.sum())
    dropped_on = float((on_policy & ~kept).sum() / n_on) if n_on else 0.0
    values, inverse, counts = np.unique(s_arr, return_inverse=True, return_counts=True)
    kept_by_s = np.bincount(inverse, weights=kept.astype(np.float64), minlength=values.size)
    if lengths is None:
        edges = np.empty(0, dtype=np.float64)
        rate_len = np.empty(0, dtype=np.float64)
        count_len = np.empty(0, dtype=np.int64)
    else:
        ell = as_float_array(lengths, name="lengths", ndim=1)
        require_same_shape(s_arr, ell, names=("s", "lengths"))
        edges, index = _length_bins(ell, nb)
        nbins = edges.size - 1
        count_len = np.bincount(index, minlength=nbins).astype(np.int64)
        kept_len = np.bincount(index, weights=kept.astype(np.float64), minlength=nbins)
        rate_len = kept_len / count_len
    return MaskingDiagnostics(
        kept_fraction=float(kept.sum() / n),
        on_policy_dropped_fraction=dropped_on,
        on_policy_count=n_on,
        effective_sample_size=effective_sample_size(w_arr, ess=ess),
        staleness_values=values.astype(np.float64),
        keep_rate_by_staleness=kept_by_s / counts,
        count_by_staleness=counts.astype(np.int64),
        length_edges=edges,
        keep_rate_by_length=rate_len,
        count_by_length=count_len,
    )


def over_masking_scenarios(
    rng: np.random.Generator,
    *,
    batch: int = 512,
    trained_step: int = 10,
    mismatch_std: float = 1e-3,
    tight_band: float = 1e-2,
) -> tuple[OverMaskingScenario, OverMaskingScenario]:
    r"""The two worked over-masking bugs, built with the library, with their diagnostics.

    (a) ``off_by_one``: the trainer compares token versions against the version it is about to
    *publish* (``j + 1``) instead of the one it holds (``j``), so every sample looks one version
    staler; with ``η = 0`` the mask drops everything, on-policy samples included. Correct:
    ``staleness_mask(sample_staleness(j, v).sample, eta=0)``; buggy: the same with ``j + 1``.

    (b) ``is_mask_tighter_than_mismatch``: every sample is on-policy, but the trainer and the
    inference engine compute log-probabilities with different kernels, so the per-token log-ratio
    is noise :math:`\varepsilon_t \sim N(0, \sigma^2)` rather than exactly 0. A sequence-level
    masked-IS band :math:`[1-\delta, 1+\delta]` tighter than that noise (the sequence log-ratio has
    standard deviation :math:`\sigma\sqrt{T}`) drops on-policy sequences, long ones first. Correct:
    a band ``[0.5, 2]``, far wider than the mismatch.

    Parameters
    ----------
    rng : numpy.random.Generator
        Source of randomness (lengths, launch versions, mismatch noise).
    batch : int
        Samples per scenario, ``>= 4``.
    trained_step : int
        Trainer step ``j >= 3`` of the batch.
    mismatch_std : float
        ``σ > 0``, per-token standard deviation of the train/inference log-probability mismatch.
    tight_band : float
        ``δ`` in ``(0, 0.5)``: the buggy band is ``[1 − δ, 1 + δ]``.

    Returns
    -------
    tuple of OverMaskingScenario
        ``(off_by_one, is_mask_tighter_than_mismatch)``.

    Raises
    ------
    ValueError
        If a parameter is out of range.

    Notes
    -----
    Lengths are ``1 + Geometric(1/200)`` (mean 201 tokens); in (a) launch versions are drawn
    ``j − Poisson(0.7)`` (clipped at 0) and a third of the rollouts are interrupted by one update
    (mixed versions). In both scenarios :func:`masking_diagnostics` of the buggy weights reports
    ``on_policy_dropped_fraction > 0`` (1.0 in (a)) while the correct weights give 0.

    Examples
    --------
    >>> import numpy as np, refimpl
    >>> a, b = refimpl.over_masking_scenarios(np.random.default_rng(0))
    >>> a.correct.on_policy_dropped_fraction, a.buggy.on_policy_dropped_fraction
    (0.0, 1.0)
    >>> b.correct.on_policy_dropped_fraction, b.buggy.on_policy_dropped_fraction > 0.2
    (0.0, True)
    >>> bool(b.buggy.keep_rate_by_length[0] > b.buggy.keep_rate_by_length[-1])
    True
    """
    if not isinstance(rng, np.random.Generator):
        raise wrong_type(
            "rng", "a numpy.random.Generator", rng, "Pass rng=np.random.default_rng(seed)."
        )
    n = as_int(batch, name="batch", minimum=4, meaning="samples per scenario")
    j = as_int(trained_step, name="trained_step", minimum=3, meaning="trainer step")
    sigma = as_real(mismatch_std, name="mismatch_std", low=0.0, low_open=True, meaning="σ")
    delta = as_real(
        tight_band,
        name="tight_band",
        low=0.0,
        high=0.5,
        low_open=True,
        high_open=True,
        meaning="δ of the buggy band [1 − δ, 1 + δ]",
    )
    lengths = 1.0 + rng.geometric(1.0 / 200.0, size=n).astype(np.float64)

    # (a) off-by-one in version counting.
    launch = np.maximum(j - rng.poisson(0.7, size=n), 0)
    interrupted = rng.random(n) < 1.0 / 3.0
    versions: list[NDArray[np.float64]] = []
    for ell, v0, cut in zip(lengths.astype(int), launch, interrupted, strict=True):
        row = np.full(ell, float(v0))
        if cut and v0 < j and ell > 1:
            row[ell // 2 :] = v0 + 1.0
        versions.append(row)
    s_true = sample_staleness(j, versions).sample
    s_buggy = sample_staleness(j + 1, versions).sample
    w_ok = staleness_mask(s_true, eta=0)
    w_bad = staleness_mask(s_buggy, eta=0)
    off_by_one = OverMaskingScenario(
        name="off_by_one",
        description="staleness counted against the version published after step j (j + 1), so "
        "every on-policy sample looks one version stale and eta=0 drops it",
        staleness=s_true,
        lengths=lengths,
        weights_correct=w_ok,
        weights_buggy=w_bad,
        correct=masking_diagnostics(s_true, w_ok, lengths=lengths),
        buggy=masking_diagnostics(s_true, w_bad, lengths=lengths),
    )

    # (b) an IS band tighter than the train/inference mismatch, on on-policy samples.
    width = int(lengths.max())
    pad = np.arange(width)[None, :] < lengths[:, None]
    logp_behavior = np.log(rng.uniform(0.05, 1.0, size=(n, width)))
    logp_target = logp_behavior + rng.normal(0.0, sigma, size=(n, width))
    s_zero = np.zeros(n)
    w_ok_b = masked_is_weights(
        logp_target, logp_behavior, low=0.5, high=2.0, level="sequence", mask=pad
    )
    w_bad_b = masked_is_weights(
        logp_target, logp_behavior, low=1.0 - delta, high=1.0 + delta, level="sequence", mask=pad
    )
    tight = OverMaskingScenario(
        name="is_mask_tighter_than_mismatch",
        description="a sequence-level masked-IS band [1 - δ, 1 + δ] tighter than the "
        "train/inference log-probability mismatch drops on-policy sequences, long ones first",
        staleness=s_zero,
        lengths=lengths,
        weights_correct=w_ok_b,
        weights_buggy=w_bad_b,
        correct=masking_diagnostics(s_zero, w_ok_b, lengths=lengths),
        buggy=masking_diagnostics(s_zero, w_bad_b, lengths=lengths),
    )
    return off_by_one, tight
