r"""Which gradient estimators are unbiased, and the exact bias of those that are not.

An estimator of the training loop is a combination of a *correction* (the weights of each sample),
a *baseline* (what is subtracted from its reward) and, under first-:math:`k` dispatch, a
*leftover policy*. Its expected batch gradient :math:`E[\hat g]` is compared with the on-policy
gradient :math:`\nabla J(\theta)`:

- **unbiased**: :math:`E[\hat g] = \nabla J` exactly;
- **scaled**: :math:`E[\hat g] = c\,\nabla J` with a stated :math:`c > 0` (a change of step size,
  not of direction): the batch-mean baseline on independent draws gives :math:`c = 1 - 1/B`;
  continuous asynchronous dispatch with the full sequence ratio gives the :math:`c` of the fluid
  model (:func:`async_gradient_exact` computes it);
- **biased**: anything else. :func:`estimator_bias` computes the bias exactly where the batch law
  is a finite enumeration (first-:math:`k` with dropped leftovers, synchronous batches, carried
  leftovers with a constant baseline); :func:`async_gradient_exact` computes it in the fluid model
  of continuous dispatch.

:func:`estimator_status` classifies a combination the way :func:`train_policy` accepts it: a
biased one runs only with ``allow_biased=True``, and some combinations are refused outright.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np

from refimpl._validation import invalid
from refimpl.learning._common import AnyArray
from refimpl.learning.asynchronous import CORRECTIONS
from refimpl.learning.first_k import (
    FIRST_K_CORRECTIONS,
    first_k_carry_gradient,
    first_k_gradient,
)
from refimpl.learning.moments import policy_gradient

__all__ = [
    "BASELINES",
    "EstimatorBias",
    "EstimatorStatus",
    "estimator_bias",
    "estimator_status",
    "gradient_bias",
]

#: The baselines of :func:`train_policy` besides a constant number: ``'none'`` (:math:`b = 0`),
#: ``'batch'`` (the batch's mean reward, the sample itself included) and ``'leave_one_out'`` (the
#: mean reward of the *other* members of the batch, :math:`\frac{B}{B-1}(R_i - \bar R)`).
BASELINES: tuple[str, ...] = ("none", "batch", "leave_one_out")

_LENGTH_WEIGHTS = FIRST_K_CORRECTIONS[1:]


class EstimatorStatus(NamedTuple):
    """How an estimator combination relates to :math:`\\nabla J` (see :func:`estimator_status`)."""

    kind: str
    """``'unbiased'``, ``'scaled'`` or ``'biased'``."""
    label: str
    """The combination and its kind, as every output of the training loop prints it."""
    statement: str
    """Why, under which conditions, and which function computes the bias exactly."""


def _baseline_kind(baseline: Any) -> str:
    if isinstance(baseline, str):
        if baseline not in BASELINES:
            raise invalid(
                "baseline", f"be one of {BASELINES} or a number", baseline, "Pick one of them."
            )
        return "constant" if baseline == "none" else baseline
    return "constant"


def _status(kind: str, name: str, statement: str) -> EstimatorStatus:
    return EstimatorStatus(kind, f"{name}: {kind}", statement)


def estimator_status(
    *,
    mode: str,
    correction: str,
    baseline: Any,
    leftovers: str = "drop",
    eta: int | None = None,
    slots: int = 1,
    batch: int = 1,
) -> EstimatorStatus:
    r"""Classify a training-loop estimator: unbiased, scaled (with its factor) or biased.

    ==========================  ====================================  =============================
    dispatch                    unbiased or scaled                    biased (opt-in)
    ==========================  ====================================  =============================
    ``sync`` (on-policy)        any correction (every ratio is 1);    —
                                batch baseline: :math:`1 - 1/B`
    ``sync_minibatch``          ``sequence_is``                       other corrections (stale
                                                                      minibatches)
    ``async``/``admission``     ``sequence_is``, no :math:`\eta`      other corrections; any
                                (scaled: fluid model)                 :math:`\eta` (length bias)
    ``first_k``, drop           ``horvitz_thompson``, constant        the rest; batch or
                                baseline (claim LRN1)                 leave-one-out baselines
    ``first_k``, carry          ``sequence_is``, constant baseline    the rest
                                (stationary chain)
    ==========================  ====================================  =============================

    Refused: length weights (``horvitz_thompson``, ``hajek``, ``clipped_ht``) with carried
    leftovers (carrying already trains every launched rollout once, claim LRN5: the weights
    correct a selection that no longer happens) and outside ``first_k`` (no selection to invert).

    Parameters
    ----------
    mode : {'async', 'admission', 'sync', 'sync_minibatch', 'first_k'}
    correction : str
        One of :data:`CORRECTIONS` or of :data:`FIRST_K_CORRECTIONS`.
    baseline : str or float
        One of :data:`BASELINES` or a constant.
    leftovers : {'drop', 'carry'}
    eta : int, optional
        Staleness bound (samples staler are dropped).
    slots, batch : int
        :math:`N` and :math:`B` (the factor of the batch baseline, whether minibatches are stale).

    Returns
    -------
    EstimatorStatus

    Raises
    ------
    ValueError
        For a refused combination, with what to use instead.

    Examples
    --------
    >>> estimator_status(mode="sync", correction="none", baseline="batch", batch=4).label
    'none + batch baseline, sync: scaled'
    >>> estimator_status(mode="first_k", correction="horvitz_thompson", baseline=0).kind
    'unbiased'
    >>> estimator_status(mode="first_k", correction="horvitz_thompson", baseline="batch").kind
    'biased'
    """
    base = _baseline_kind(baseline)
    if correction not in CORRECTIONS + _LENGTH_WEIGHTS:
        raise invalid(
            "correction",
            f"be one of {CORRECTIONS + _LENGTH_WEIGHTS}",
            correction,
            "Pick one of them.",
        )
    where = mode + (f" ({leftovers} leftovers)" if mode == "first_k" else "")
    name = f"{correction} + {base.replace('_', '-')} baseline, {where}"
    if correction in _LENGTH_WEIGHTS and (mode != "first_k" or leftovers == "carry"):
        raise invalid(
            "correction",
            "be a length weight only under first_k with dropped leftovers (it inverts the "
            "first-k selection; carried leftovers are all trained once, claim LRN5, and other "
            "modes select nothing)",
            correction,
            "Use correction='sequence_is' (carried leftovers are stale, not length-selected), "
            "or mode='first_k' with leftovers='drop'.",
        )
    if mode == "first_k":
        return _first_k_status(name, correction, base, leftovers)
    batch_factor = f"1 - 1/B = {1 - 1 / batch:.6g}" if base == "batch" else "1"
    if mode == "sync":
        kind = "scaled" if base == "batch" else "unbiased"
        return _status(
            kind,
            name,
            f"every sample is on-policy (ratio 1): E[g] = ({batch_factor}) ∇J exactly "
            "(estimator_bias with n = k).",
        )
    stale = mode != "sync_minibatch" or slots > batch
    if correction != "sequence_is" and stale:
        return _status(
            "biased",
            name,
            "stale samples without their full likelihood ratio: biased by the staleness "
            "(async_gradient_exact states it in the fluid model; claim LRN2 for token TIS).",
        )
    if mode == "sync_minibatch":
        kind = "scaled" if base == "batch" else "unbiased"
        return _status(
            kind,
            name,
            "each minibatch is drawn i.i.d. from the round's version, before the steps that use "
            f"it: the full ratio makes E[g] = ({batch_factor}) ∇J exactly.",
        )
    if eta is not None:
        return _status(
            "biased",
            name,
            f"the staleness bound η = {eta} drops long rollouts more often: length bias "
            "(async_gradient with eta states it in the fluid model).",
        )
    return _status(
        "scaled",
        name,
        "the full ratio makes each trained (length, staleness) pair count as on-policy: "
        f"E[g] = c ({batch_factor}) ∇J with c > 0 the fluid model's launched/trained ratio "
        "(async_gradient_exact computes it); exact only in the fluid model.",
    )


def _first_k_status(name: str, correction: str, base: str, leftovers: str) -> EstimatorStatus:
    if leftovers == "carry":
        if correction == "sequence_is" and base == "constant":
            return _status(
                "unbiased",
                name,
                "in the stationary chain every launched rollout is trained once (claim LRN5) and "
                "the full ratio removes its staleness: E[g] = ∇J.",
            )
        return _status(
            "biased",
            name,
            "carried rollouts are stale (uncorrected, or corrected but with a baseline that "
            "depends on a dependent batch); at a fixed θ with a constant baseline and no "
            "correction, first_k_carry_gradient states the stationary chain's gradient exactly.",
        )
    if correction == "horvitz_thompson" and base == "constant":
        return _status(
            "unbiased",
            name,
            "inverse inclusion probabilities with a constant baseline: E[g] = ∇J (claim LRN1).",
        )
    return _status(
        "biased",
        name,
        "first-k keeps the short rollouts; this combination does not undo it exactly "
        "(estimator_bias states the bias, claim LRN7).",
    )


class EstimatorBias(NamedTuple):
    """The exact expected gradient of an estimator against :math:`\\nabla J` (see :func:`estimator_bias`)."""

    expected: AnyArray
    r""":math:`E[\hat g]`, shape (d,)."""
    gradient: AnyArray
    r""":math:`\nabla J`, shape (d,)."""
    bias: AnyArray
    r""":math:`E[\hat g] - \nabla J`."""
    scale: Any
    r"""Projection :math:`\langle E[\hat g], \nabla J\rangle / \lVert\nabla J\rVert^2` (1 when
    unbiased; ``None`` when :math:`\nabla J = 0`)."""
    parallel: bool
    r""":math:`E[\hat g] = c\,\nabla J` exactly for some :math:`c` (a scaling, not a turn)."""
    relative_bias: Any
    r""":math:`\lVert E[\hat g] - \nabla J\rVert / \lVert\nabla J\rVert` (float; ``inf`` when
    :math:`\nabla J = 0` and the bias is not)."""


def estimator_bias(
    pmf: Any,
    scores: Any,
    quality: Any,
    *,
    n: int,
    k: int,
    correction: str = "none",
    baseline: Any = 0,
    leftovers: str = "drop",
    penalty: Any = 0,
    clip: Any = None,
) -> EstimatorBias:
    r"""Exact bias of a batch estimator under first-:math:`k`-of-:math:`n` dispatch at a fixed :math:`\theta`.

    :math:`E[\hat g]` from :func:`first_k_gradient` (dropped leftovers: every batch composition
    enumerated, Bernoulli rewards included, the batch baseline conditioned on the batch) or from
    the stationary chain of :func:`first_k_carry_gradient` (carried leftovers, constant baseline,
    no correction: at a fixed :math:`\theta` staleness changes nothing), against
    :math:`\nabla J` of :func:`policy_gradient`. ``n = k`` is a synchronous batch of :math:`k`
    independent on-policy draws. The leave-one-out baseline is exactly
    :math:`\frac{k}{k-1}` times the batch baseline's estimate (:math:`R_i - \frac1{k-1}
    \sum_{j\ne i}R_j = \frac{k}{k-1}(R_i - \bar R)`).

    Statements this computes (claim :ref:`LRN7 <lrn7>`): on independent draws the batch baseline
    scales the gradient by :math:`1 - 1/k` and leave-one-out is unbiased; under first-:math:`k`
    with :math:`k < n`, Horvitz–Thompson is unbiased only with a constant baseline, its batch
    baseline turns the gradient (the members are dependent), Hájek is biased for finite
    :math:`k`, and clipped HT lies between the uncorrected and the HT gradient only in the
    weights it leaves unclipped.

    Parameters
    ----------
    pmf, scores, quality : array_like or sequences of Fraction
        :math:`p_\theta` (M,), :math:`\nabla\log p_\theta(\ell)` (M, d), :math:`Q(\ell)` (M,).
    n, k : int
        Launched (or in flight) and trained per step.
    correction : str
        One of :data:`FIRST_K_CORRECTIONS`.
    baseline : float, Fraction or str
        A constant, ``'none'``, ``'batch'`` or ``'leave_one_out'``.
    leftovers : {'drop', 'carry'}
    penalty : float or Fraction
    clip : float or Fraction, optional
        The cap of ``clipped_ht``.

    Returns
    -------
    EstimatorBias
        Exact (``Fraction``) when every input is.

    Raises
    ------
    ValueError
        For carried leftovers with a length weight or a batch-dependent baseline (the chain is
        solved for a constant baseline only), or ``leave_one_out`` with ``k = 1``.

    Examples
    --------
    >>> from fractions import Fraction as F
    >>> from refimpl.learning import hazard_length_pmf, token_scores
    >>> h = [F(1, 2), F(1, 3), F(1)]
    >>> eye = np.eye(3, dtype=int).tolist()
    >>> p, s = hazard_length_pmf(h), token_scores(h, eye).sum(axis=1)
    >>> Q = [F(0), F(1, 2), F(1)]
    >>> estimator_bias(p, s, Q, n=4, k=4, baseline="batch").scale  # independent draws: 1 - 1/k
    Fraction(3, 4)
    >>> ht = estimator_bias(p, s, Q, n=4, k=2, correction="horvitz_thompson", baseline="batch")
    >>> ht.parallel, round(float(ht.scale), 3)
    (False, 0.4)
    """
    base = _baseline_kind(baseline)
    if leftovers not in ("drop", "carry"):
        raise invalid("leftovers", "be 'drop' or 'carry'", leftovers, "Pick one.")
    if base == "leave_one_out" and k < 2:
        raise invalid(
            "baseline",
            "be 'leave_one_out' only with k >= 2 (it averages the other members)",
            baseline,
            "Pass k >= 2, or a constant baseline.",
        )
    on = policy_gradient(pmf, scores, quality, penalty=penalty).mean
    if leftovers == "carry":
        if correction != "none" or base != "constant":
            raise invalid(
                "leftovers",
                "be 'carry' only with correction='none' and a constant baseline (the exact chain "
                "is solved for those; length weights double-correct carried leftovers)",
                leftovers,
                "Pass correction='none' and baseline=b with leftovers='carry'.",
            )
        b = 0 if baseline == "none" else baseline
        mean = first_k_carry_gradient(pmf, scores, quality, n=n, k=k, penalty=penalty, baseline=b)
        expected = np.asarray(mean.mean)
    else:
        b = {"constant": 0 if baseline == "none" else baseline}.get(base, "batch")
        g = first_k_gradient(
            pmf, scores, quality, n=n, k=k, correction=correction, penalty=penalty,
            baseline=b, clip=clip,
        )  # fmt: skip
        expected = np.asarray(g.mean)
        if base == "leave_one_out":
            expected = expected * (Fraction(k, k - 1) if expected.dtype == object else k / (k - 1))
    return _bias(expected, np.asarray(on))


def gradient_bias(expected: Any, gradient: Any) -> EstimatorBias:
    r"""Compare an expected gradient with :math:`\nabla J`: bias, projection scale, parallel or not.

    For the expected gradients the reference computes elsewhere: :func:`async_gradient_exact`
    (continuous dispatch in the fluid model, every correction, a staleness mask) against
    :func:`policy_gradient`. Exact when both are ``Fraction`` arrays.

    Examples
    --------
    >>> from fractions import Fraction as F
    >>> b = gradient_bias([F(1), F(2)], [F(2), F(4)])
    >>> b.scale, b.parallel, b.relative_bias
    (Fraction(1, 2), True, 0.5)
    """
    e = np.asarray(expected, dtype=object if _all_fractions(expected) else np.float64)
    g = np.asarray(gradient, dtype=object if _all_fractions(gradient) else np.float64)
    if e.shape != g.shape or e.ndim != 1:
        raise invalid(
            "expected",
            f"be 1-D with the shape of gradient {g.shape}",
            expected,
            "Pass E[g] and ∇J as vectors of the same length.",
        )
    return _bias(e, g)


def _all_fractions(x: Any) -> bool:
    return all(isinstance(v, (Fraction, int)) and not isinstance(v, bool) for v in np.ravel(x))


def _bias(expected: AnyArray, on: AnyArray) -> EstimatorBias:
    exact = expected.dtype == object and on.dtype == object
    zero: Any = Fraction(0) if exact else 0.0
    norm2 = sum((x * x for x in on), zero)
    bias = expected - on
    dot = sum((x * y for x, y in zip(expected, on, strict=True)), zero)
    scale = None if norm2 == 0 else dot / norm2
    if exact:
        parallel = scale is not None and all(
            x == scale * y for x, y in zip(expected, on, strict=True)
        )
    else:
        ref = np.asarray(on, dtype=np.float64)
        resid = np.asarray(expected, dtype=np.float64) - (0.0 if scale is None else scale) * ref
        parallel = bool(np.linalg.norm(resid) <= 1e-12 * max(float(np.linalg.norm(ref)), 1e-300))
    bias_norm = float(np.sqrt(float(sum((x * x for x in bias), zero))))
    rel = (
        bias_norm / float(np.sqrt(float(norm2)))
        if norm2 != 0
        else (0.0 if bias_norm == 0 else np.inf)
    )
    return EstimatorBias(expected, on, bias, scale, bool(parallel), rel)
