"""Staleness weights (conventions §masks-and-weights): the hard mask ``1[s ≤ η]`` and the decay ``γ^s``."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import (
    as_int,
    as_real,
)
from refimpl.staleness._checks import StalenessCount, _as_count
from refimpl.staleness.versions import _as_staleness

__all__ = ["staleness_decay", "staleness_mask"]


def staleness_mask(
    s: ArrayLike, *, eta: int, staleness_count: StalenessCount = "versions_behind"
) -> NDArray[np.float64]:
    r"""Hard staleness mask: keep a sample iff its staleness is at most ``η``.

    .. math::

        w(s) = \mathbb{1}[s \le \eta].

    Parameters
    ----------
    s : array_like
        Staleness per sample (or per token), any shape, whole numbers ``>= 0``
        (see :func:`sample_staleness`).
    eta : int
        Staleness bound ``η >= 0``; ``η = 0`` admits only on-policy samples.
    staleness_count : {"versions_behind", "versions_spanned"}
        What ``eta`` bounds: ``s`` (default), or the versions a sample spans, ``s + 1`` (verl's
        ``max_off_policy_threshold``: dropped iff ``s + 1 > threshold``; then ``eta >= 1``).

    Returns
    -------
    ndarray of float64
        1.0 where kept, 0.0 where dropped; same shape as ``s``.

    Raises
    ------
    ValueError
        If ``s`` is negative, non-integral or non-finite, or ``eta < 0``.
    TypeError
        If ``eta`` is not an integer, or ``s`` holds booleans or a float past ``2^53`` (which
        integer was meant is lost: pass ints).

    Notes
    -----
    Compared on exact integers: ``s`` and ``eta`` may be any size (``s = 2^53 + 1`` is above
    ``eta = 2^53``, though both are the same float64).

    Non-increasing in ``s``; never drops an on-policy sample (``s = 0``), whatever ``η``. The
    comparison is ``<=``: TRL's ``max_staleness`` keeps a sample whose staleness equals the bound
    (so does prime-rl's ``max_off_policy_steps``, read from its repository and not checked in CI). Dropping by staleness drops long rollouts more often
    (conventions §async-dispatch, "masking turns staleness into length bias"); see :func:`masking_diagnostics`.

    Examples
    --------
    >>> import refimpl
    >>> refimpl.staleness_mask([0, 1, 2, 3], eta=1)
    array([1., 1., 0., 0.])
    """
    arr = _as_staleness(s)
    shift = _as_count(staleness_count)
    e = as_int(
        eta,
        name="eta",
        minimum=shift,
        meaning="staleness bound in versions"
        + (": counting versions spanned, 1 admits only on-policy samples" if shift else ""),
    )
    bound = e - shift  # s + shift <= eta, decided on exact integers (s may pass 2^53)
    if arr.dtype != object and bound >= np.iinfo(np.int64).max:
        return np.ones(arr.shape, dtype=np.float64)
    return np.asarray(arr <= bound, dtype=np.float64)


def staleness_decay(s: ArrayLike, *, gamma: float) -> NDArray[np.float64]:
    r"""Soft staleness weight: geometric decay in the number of versions behind.

    .. math::

        w(s) = \gamma^{s}, \qquad 0 < \gamma \le 1.

    Parameters
    ----------
    s : array_like
        Staleness, any shape, whole numbers ``>= 0``.
    gamma : float
        Decay per version, in ``(0, 1]``; ``γ = 1`` weights every sample 1.

    Returns
    -------
    ndarray of float64
        Weights in ``(0, 1]`` (they underflow to 0.0 for very large ``s``), same shape as ``s``.

    Raises
    ------
    ValueError
        If ``s`` is negative or non-integral, or ``gamma`` is outside ``(0, 1]``.

    Notes
    -----
    Non-increasing in ``s``; ``w(0) = 1``. Nothing is dropped, so no rollout length is excluded
    outright, but long (hence stale) rollouts still get less weight.

    Examples
    --------
    >>> import refimpl
    >>> refimpl.staleness_decay([0, 1, 2], gamma=0.5)
    array([1.  , 0.5 , 0.25])
    """
    arr = _as_staleness(s)
    g = as_real(gamma, name="gamma", low=0.0, high=1.0, low_open=True, meaning="decay per version")
    # gamma^s for s past 2^1000 is gamma^(2^1000) in float64 (0.0, or 1.0 when gamma = 1)
    exponent = np.minimum(arr, 2**1000) if arr.dtype == object else arr
    return np.power(g, np.asarray(exponent, dtype=np.float64))
