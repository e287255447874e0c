"""Policy versions and the staleness of a sample (conventions §staleness, §admission-and-partial).

The version in force at a time (:func:`policy_version`, with the tie rule of conventions
§tie-rule), the staleness ``s = j − min_t v_t`` of each sample trained at step ``j``
(:func:`sample_staleness`: the oldest token version decides), and the admission rule that bounds
it on average (:func:`admission_capacity`).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import (
    as_float_array,
    as_int,
    as_int_array,
    invalid,
    mismatch,
    require_in_range,
    wrong_type,
)
from refimpl.staleness._checks import StalenessCount, _as_count, _as_mask, _require_integral

__all__ = ["Staleness", "admission_capacity", "policy_version", "sample_staleness"]


class Staleness(NamedTuple):
    """Staleness of a batch trained at one step (see :func:`sample_staleness`).

    Attributes
    ----------
    sample : ndarray, shape (B,)
        ``s = j − min_t v_t`` per sample (the oldest valid token decides).
    token : ndarray, shape (B, T)
        ``s_t = j − v_t`` per token; ``0.0`` at padding positions (check ``mask``).
    mask : ndarray, shape (B, T)
        1.0 where ``token`` holds a real token, 0.0 at padding.
    """

    sample: NDArray[np.float64]
    token: NDArray[np.float64]
    mask: NDArray[np.float64]


def _as_staleness(s: ArrayLike, *, name: str = "s") -> NDArray[Any]:
    """Staleness as exact integers (int64, or Python ints past int64): compared as integers."""
    if isinstance(s, Staleness):  # a tuple of three arrays: numpy would call it "inhomogeneous"
        raise wrong_type(
            name,
            "an array of staleness values",
            s,
            "sample_staleness returns a Staleness (sample, token, mask): pass its .sample for "
            "one value per sample, or its .token (with .mask) for one per token.",
        )
    arr = as_float_array(s, name=name)
    require_in_range(
        arr,
        name=name,
        low=0.0,
        meaning="staleness s = j − min_t v_t counts versions behind the trainer",
        fix=": a token version is newer than the trainer step that trains it. Compute s with "
        "sample_staleness(trained_step, token_versions).",
    )
    _require_integral(arr, name=name, meaning="staleness counts policy versions")
    return as_int_array(s, name=name)  # exact beyond 2^53, where the floats above round


def _exact(arr: NDArray[Any], bound: int) -> NDArray[Any]:
    """``arr`` as int64 when every value it will be combined with stays below ``bound`` < 2^62,
    else as an object array of Python ints (exact at any size)."""
    if arr.dtype != object and bound < 2**62:
        return arr.astype(np.int64)
    out = np.empty(arr.size, dtype=object)
    out[:] = [int(x) for x in arr.ravel()]
    return out.reshape(arr.shape)


def policy_version(times: ArrayLike, *, publish_times: ArrayLike) -> NDArray[np.float64]:
    r"""Policy version in force at each time, with the tie rule of conventions §tie-rule.

    .. math::

        v(t) = \#\{k : \tau_k < t\},

    where :math:`\tau_k` is the time at which version :math:`k+1` is published (version 0 is the
    initial weights). The inequality is strict: a rollout launched at the exact instant a new version
    is published sees the **old** version (conventions §tie-rule).

    Parameters
    ----------
    times : array_like
        Launch (or token) times, any shape, finite.
    publish_times : array_like, shape (K,)
        Publication times of versions ``1..K``, finite and non-decreasing.

    Returns
    -------
    ndarray of float64
        The version at each time, same shape as ``times``.

    Raises
    ------
    ValueError
        If an input is non-finite or ``publish_times`` is not 1-D or decreases somewhere.

    Notes
    -----
    ``v`` is non-decreasing and left-continuous in ``t``: it jumps just *after*
    each publication time.

    Examples
    --------
    >>> import refimpl
    >>> refimpl.policy_version([0.0, 1.0, 1.5, 2.0, 3.0], publish_times=[1.0, 2.0])
    array([0., 0., 1., 1., 2.])
    """
    t = as_float_array(times, name="times")
    pub = as_float_array(publish_times, name="publish_times", ndim=1)
    if pub.size > 1 and np.any(np.diff(pub) < 0):
        first = int(np.flatnonzero(np.diff(pub) < 0)[0])
        raise invalid(
            "publish_times",
            "be non-decreasing (version k+1 is published at publish_times[k])",
            pub,
            f"publish_times[{first + 1}] < publish_times[{first}]; sort them.",
        )
    return np.searchsorted(pub, t, side="left").astype(np.float64)


def _token_version_rows(
    token_versions: Any, mask: ArrayLike | None
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Padded ``(B, T)`` versions and a 0/1 mask from ragged, padded or per-sample input."""
    ragged = (
        isinstance(token_versions, (list, tuple))
        and len(token_versions) > 0
        and all(
            not isinstance(row, (str, bytes)) and isinstance(row, (Sequence, np.ndarray))
            for row in token_versions
        )
    )
    if ragged:
        if mask is not None:
            raise invalid(
                "mask",
                "be None for ragged token_versions (a list of 1-D arrays has no padding)",
                mask,
                "Drop mask, or pass token_versions as a padded 2-D array with its mask.",
            )
        rows = []
        for i, row in enumerate(token_versions):
            try:
                arr = np.asarray(row, dtype=np.float64)
            except (TypeError, ValueError):
                raise wrong_type(
                    f"token_versions[{i}]",
                    "an array of integer versions",
                    row,
                    "Pass each sample's token versions as a 1-D numeric array.",
                ) from None
            if arr.ndim != 1:
                raise invalid(
                    f"token_versions[{i}]",
                    "be 1-D (one version per token)",
                    arr,
                    f"Pass a 1-D array per sample (got shape {arr.shape}).",
                )
            if arr.size == 0:
                raise invalid(
                    f"token_versions[{i}]",
                    "hold at least one token version (every sample has a generated token)",
                    arr,
                    f"Sample {i} is empty; drop it, or pass the versions of its tokens.",
                )
            rows.append(arr)
        counts = np.array([row.size for row in rows])
        flat = as_float_array(np.concatenate(rows), name="token_versions (concatenated)")
        width = int(counts.max())
        m = (np.arange(width)[None, :] < counts[:, None]).astype(np.float64)
        versions = np.zeros((len(rows), width), dtype=np.float64)
        versions[m > 0] = flat  # row-major order is the order of concatenation
        return versions, m
    versions = as_float_array(token_versions, name="token_versions", ndim=(1, 2))
    if versions.ndim == 1:
        if mask is not None:
            raise invalid(
                "mask",
                "be None when token_versions is 1-D (one version per sample)",
                mask,
                "Drop mask, or pass token_versions as a padded 2-D array (B, T).",
            )
        versions = versions[:, None]
    m = _as_mask(mask, versions.shape, like="token_versions")
    return versions, m


def sample_staleness(
    trained_step: ArrayLike,
    token_versions: Any,
    *,
    mask: ArrayLike | None = None,
    staleness_count: StalenessCount = "versions_behind",
) -> Staleness:
    r"""Staleness of each sample trained at step ``j``: the oldest token version decides.

    .. math::

        s = j - \min_t v_t, \qquad s_t = j - v_t .

    Time a finished rollout spends waiting in a queue counts, because ``j`` is the step that
    *trains* it. A rollout interrupted by a weight update (partial rollout, conventions §admission-and-partial) mixes
    versions; its staleness is that of its oldest token.

    Parameters
    ----------
    trained_step : int or array_like of int, shape (B,)
        The trainer step ``j >= 0`` that consumes the batch (the trainer then holds version ``j``),
        or one step per sample.
    token_versions : array_like or list of array_like
        The policy version that generated each token, in one of three layouts:

        - ragged: a list of ``B`` 1-D arrays, one per sample (lengths may differ);
        - padded: a 2-D array ``(B, T)``, with ``mask`` marking the real tokens;
        - per sample: a 1-D array ``(B,)`` of launch versions (rollouts never interrupted).

        Whole numbers in ``[0, j]``.
    mask : array_like, shape (B, T), optional
        0/1 padding mask for the padded layout (1 = a real token). Default: every entry is real.
    staleness_count : {"versions_behind", "versions_spanned"}
        ``"versions_spanned"``: count the versions a sample spans, ``s + 1`` (and ``s_t + 1`` per
        real token), as verl's ``max_off_policy_threshold`` does.

    Returns
    -------
    Staleness
        ``sample`` (B,), ``token`` (B, T) (0 at padding) and ``mask`` (B, T), all float64.

    Raises
    ------
    ValueError
        If a version is negative, not a whole number, or newer than the trainer step (``v_t > j``:
        a sample cannot be generated by weights the trainer has not produced yet); if a sample has
        no valid token; if shapes disagree.
    TypeError
        If ``trained_step`` is not an integer, or a version or step is a float past ``2^53``
        (which integer was meant is lost: pass ints).

    Notes
    -----
    Invariants: ``s >= 0``; ``s = max_t s_t`` over the valid tokens; a rollout generated entirely by
    version ``j`` has ``s = 0`` (on-policy). Tie rule (conventions §tie-rule): a rollout launched at the instant a
    new version is published sees the old version; :func:`policy_version` applies it to launch times.

    Frameworks differ: TRL measures ``current − v_launch``, which equals ``s`` for a rollout that is
    never interrupted; AReaL and SkyRL bound staleness only at admission (:func:`admission_capacity`).

    References
    ----------
    conventions §staleness; AReaL (arXiv 2505.24298).

    Examples
    --------
    A sample launched at version 3 and interrupted by an update to version 4, trained at step 5:

    >>> import refimpl
    >>> st = refimpl.sample_staleness(5, [[3, 3, 4, 4], [5, 5]])
    >>> st.sample
    array([2., 0.])
    >>> st.token
    array([[2., 2., 1., 1.],
           [0., 0., 0., 0.]])
    >>> st.mask
    array([[1., 1., 1., 1.],
           [1., 1., 0., 0.]])
    """
    shift = _as_count(staleness_count)
    versions, m = _token_version_rows(token_versions, mask)
    step = _trained_steps(trained_step, versions)
    valid = _valid_tokens(versions, m)
    exact = _exact_versions(token_versions, versions, valid)
    _check_versions(versions, valid, exact, step)
    top = int(max(step.max(), exact.max()))
    behind = np.where(valid, _exact(step, top)[:, None] - _exact(exact, top) + shift, 0)
    # s = max_t s_t over the real tokens (padding holds 0 <= every s_t)
    return Staleness(
        sample=np.asarray(behind.max(axis=1), dtype=np.float64),
        token=np.asarray(behind, dtype=np.float64),
        mask=m,
    )


def _exact_versions(
    token_versions: Any, versions: NDArray[np.float64], valid: NDArray[np.bool_]
) -> NDArray[Any]:
    """The real tokens' versions as exact integers, padded with 0, shape ``versions.shape``.

    ``versions`` is the float64 reading of the input (its checks follow in
    :func:`_check_versions`); past 2^53 this re-reads the input, so that an integer there is the
    integer given, not its nearest float (a float past 2^53 is refused: which one was meant is lost)."""
    if np.all(versions[valid] < 2**53):  # below 2^53 the float is the integer that was given
        return np.where(valid, versions, 0.0).astype(np.int64)
    if isinstance(token_versions, (list, tuple)) and versions.shape[0] == len(token_versions):
        rows = [np.asarray(row, dtype=object).reshape(-1) for row in token_versions]
        if all(row.size <= versions.shape[1] for row in rows):
            objects = np.zeros(versions.shape, dtype=object)
            for i, row in enumerate(rows):
                objects[i, : row.size] = row
            objects[~valid] = 0
            return as_int_array(objects, name="token_versions")
    objects = np.asarray(token_versions, dtype=object).reshape(versions.shape)
    objects[~valid] = 0
    return as_int_array(objects, name="token_versions")


def _trained_steps(trained_step: Any, versions: NDArray[np.float64]) -> NDArray[Any]:
    """The trainer step of each sample: one int for the batch, or one whole number >= 0 each."""
    batch = versions.shape[0]
    if isinstance(trained_step, numbers.Integral) and not isinstance(trained_step, bool):
        step_int = as_int(trained_step, name="trained_step", minimum=0)
        return _exact(np.full(batch, step_int, dtype=object), step_int)
    if not isinstance(trained_step, (list, tuple, np.ndarray)):
        raise wrong_type(
            "trained_step",
            "an integer or a 1-D array of integers",
            trained_step,
            "Pass the trainer step j (an int) that consumes the batch.",
        )
    step = as_float_array(trained_step, name="trained_step", ndim=1)
    if step.shape != (batch,):
        raise mismatch(
            ("trained_step", "token_versions"),
            "have one entry per sample",
            f"trained_step.shape={step.shape} and token_versions.shape={versions.shape}",
            "Pass one trained step per sample, or a single int.",
        )
    _require_integral(step, name="trained_step", meaning="trainer steps are counted")
    if np.any(step < 0):
        raise invalid("trained_step", "be >= 0", step, "Trainer steps start at 0.")
    return as_int_array(trained_step, name="trained_step", ndim=1)  # exact beyond 2^53


def _valid_tokens(versions: NDArray[np.float64], m: NDArray[np.float64]) -> NDArray[np.bool_]:
    """The real (unpadded) tokens; at least one sample, each with at least one real token."""
    valid = m > 0
    if versions.shape[0] == 0:
        raise invalid("token_versions", "hold at least one sample", versions, "Pass B >= 1.")
    empty = ~valid.any(axis=1)
    if np.any(empty):
        raise invalid(
            "mask",
            "leave at least one valid token per sample",
            m,
            f"Sample {int(np.flatnonzero(empty)[0])} is all padding; drop it.",
        )
    return valid


def _check_versions(
    versions: NDArray[np.float64],
    valid: NDArray[np.bool_],
    exact: NDArray[Any],
    step: NDArray[Any],
) -> None:
    """The real tokens' versions must be whole, >= 0 and <= their sample's trained step (padding
    may hold anything finite); the last rule is decided on the exact integers."""
    flat = versions[valid]

    def _at(k: int) -> str:
        i, t = (int(x) for x in np.argwhere(valid)[k])  # (sample, token) of entry k of ``flat``
        shown = f"{flat[k]:g}" if flat[k] != np.floor(flat[k]) else str(exact[i, t])
        return f"Sample {i}, token {t} has version {shown}"

    fractional = flat != np.floor(flat)
    if np.any(fractional):
        raise invalid(
            "token_versions",
            "hold whole numbers (versions count optimizer steps)",
            versions,
            f"{_at(int(np.flatnonzero(fractional)[0]))}; pass integer versions.",
        )
    if np.any(flat < 0):
        raise invalid(
            "token_versions",
            "be >= 0 (the initial weights are version 0)",
            versions,
            f"{_at(int(np.flatnonzero(flat < 0)[0]))}; count versions from 0 (the number of "
            "optimizer steps applied).",
        )
    step_flat = np.broadcast_to(step[:, None], versions.shape)[valid]
    newer = np.asarray(exact[valid] > step_flat, dtype=bool)
    if np.any(newer):
        k = int(np.flatnonzero(newer)[0])
        raise invalid(
            "token_versions",
            "be <= trained_step (the trainer at step j holds version j; no token can come from a "
            "newer version)",
            versions,
            f"{_at(k)} > trained_step {step_flat[k]}: check for an off-by-one (the version "
            "published *after* step j is j + 1).",
        )


def admission_capacity(
    *,
    eta: int,
    version: int,
    batch: int,
    accepted: int,
    running: int,
    max_concurrent: int,
    staleness_count: StalenessCount = "versions_behind",
) -> int:
    r"""How many new rollouts AReaL/SkyRL admission control lets the rollout side launch now.

    .. math::

        \text{capacity} = \min\bigl(N_\text{max} - \text{running},\;
            (\eta + v + 1)\,B - (\text{accepted} + \text{running})\bigr).

    Parameters
    ----------
    eta : int
        Staleness bound ``η >= 0`` (AReaL ``max_head_offpolicyness``, SkyRL ``max_staleness_steps``).
    version : int
        Current policy version ``v >= 0`` of the rollout workers.
    batch : int
        Trained samples per step ``B >= 1`` (AReaL ``consumer_batch_size``).
    accepted : int
        Finished rollouts accepted so far (cumulative since the start), ``>= 0``.
    running : int
        Rollouts in flight, ``>= 0``.
    max_concurrent : int
        Concurrency limit ``N_max >= 1`` (AReaL ``max_concurrent_rollouts``).
    staleness_count : {"versions_behind", "versions_spanned"}
        ``"versions_spanned"``: ``eta`` counts the versions a sample spans (``s + 1``), so the rule
        reads ``(η + v)·B`` and ``eta >= 1``.

    Returns
    -------
    int
        The capacity. It **can be negative** (more rollouts in flight or accepted than the rule
        allows); launch ``max(capacity, 0)``. A count, hence ``int`` rather than float64.

    Raises
    ------
    TypeError
        If an argument is not an integer.
    ValueError
        If an argument is out of its range.

    Notes
    -----
    SkyRL writes the same rule as ``(S + g)·B`` with ``g = v + 1``. The rule bounds staleness only
    on average: nothing is dropped, and a sample may still be trained with ``s > η`` (long
    rollouts, partial rollouts); no per-sample guarantee (conventions §staleness-bound, §admission-and-partial). Monotone: capacity is
    non-decreasing in ``eta``, ``version`` and ``max_concurrent``, non-increasing in ``accepted``
    and ``running``. AReaL 1.0.4 (``areal/infra/staleness_manager.py``) clamps the concurrency limit
    and the batch to at least 1 (``max(1, ·)``) where this function refuses values below 1.

    References
    ----------
    AReaL (arXiv 2505.24298), ``StalenessManager.get_capacity`` (read in AReaL 1.0.4).

    Examples
    --------
    >>> import refimpl
    >>> refimpl.admission_capacity(eta=1, version=0, batch=4, accepted=0, running=3,
    ...                            max_concurrent=16)
    5
    >>> refimpl.admission_capacity(eta=0, version=2, batch=4, accepted=10, running=4,
    ...                            max_concurrent=16)
    -2
    """
    shift = _as_count(staleness_count)
    e = as_int(eta, name="eta", minimum=shift, meaning="staleness bound in versions") - shift
    v = as_int(version, name="version", minimum=0, meaning="policy version")
    b = as_int(batch, name="batch", minimum=1, meaning="trained samples per step")
    acc = as_int(accepted, name="accepted", minimum=0, meaning="accepted rollouts")
    run = as_int(running, name="running", minimum=0, meaning="rollouts in flight")
    cap = as_int(max_concurrent, name="max_concurrent", minimum=1, meaning="concurrency limit")
    return _admission_capacity(e, v, b, acc, run, cap)


def _admission_capacity(
    eta: int, version: int, batch: int, accepted: int, running: int, max_concurrent: int
) -> int:
    """:func:`admission_capacity` on checked integers: plain arithmetic, so that the simulator's
    compiled engine compiles this very function instead of restating the rule."""
    return min(max_concurrent - running, (eta + version + 1) * batch - (accepted + running))
