"""Partition invariance of a framework's loss: micro-batches and ranks against the full batch.

:func:`check_partition_invariance` draws (Hypothesis) one optimizer step's batch with uneven
lengths and a random split of its rows over simulated data-parallel ranks and accumulation steps
(uneven token counts, micro-batches and ranks without a valid token), calls the candidate once
per micro-batch in its own array library with ``logp`` requiring a gradient, accumulates the
gradients as training does (summed over a rank's micro-batches, then averaged or summed over the
ranks as the rule's all-reduce says), and compares the step's gradient and value with the
full-batch reference :func:`refimpl.losses.aggregation.aggregation_weights`.

The candidate is the framework's loss on *one micro-batch*::

    candidate(logp, logp_old, advantages, mask, *, global_tokens, global_sequences,
              accumulation_steps, world_size) -> scalar

with ``logp``, ``logp_old``, ``mask`` of shape ``(b, T)`` (the micro-batch's rows), ``advantages``
of shape ``(b,)``, ``global_tokens`` the step's valid tokens over every micro-batch and rank,
``global_sequences`` the step's counted sequences (or groups, for ``group_mean``), and the number
of accumulation steps and ranks. Only the keywords the candidate's signature accepts are passed
(all of them if it takes ``**kwargs``); ``rank_sequences`` (the rows on this micro-batch's
rank, empty rows included: what a worker that splits its own shard sees as ``len(data)``),
``rank_microbatches`` (that rank's micro-batches holding rows: SkyRL's Megatron
``num_real_microbatches``),
``step_tokens`` (the valid tokens of this micro-batch's
accumulation step summed over the ranks, what a framework that all-reduces its count per
micro-batch divides by), ``constant`` (Dr GRPO's ``H``), ``group`` and ``group_tokens``
(``group_mean``: each row's label and its group's token count in the step) are passed when
accepted. verl's ``agg_loss`` wraps in three lines::

    def candidate(logp, logp_old, advantages, mask, *, global_tokens, world_size, **_):
        loss_mat = -advantages[:, None] * torch.exp(logp - logp_old)
        return agg_loss(loss_mat, mask, "token-mean", dp_size=world_size,
                        batch_num_tokens=global_tokens)

The reference is :func:`refimpl.losses.clipped.ppo_clip_loss` with cotangent ``w`` (its VJP is
the aggregated gradient). The draws keep ``|log ρ| <= 0.09`` on valid tokens
(``ρ = exp(logp − logp_old)``), strictly inside any PPO clip range ``ε >= 0.1``, where every
clipped surrogate (PPO, DAPO's clip-higher, dual clip) equals the policy gradient ``−A·ρ`` in
value and gradient: the candidate may compute any of them, or ``−A·ρ`` itself. Advantages have ``|A| >= 0.25``, so the weight the candidate gives each token can be read
back from its gradient, ``w = grad / (−A·ρ)``, and a failure names the scaling rule the candidate
actually implements.

A loss with one ratio per *sequence* (``ratio="sequence"``: TRL's ``RLOOTrainer``, PPO-clip on
the sequence-likelihood ratio ``S_b = exp(Σ_t m·(logp − logp_old))``) is compared with
:func:`refimpl.losses.sequence_product.sequence_ppo_clip_loss` instead: every valid token of row
``b`` gets the gradient ``−A_b·S_b`` times the row's total weight ``Σ_t w_bt``, so what the split
can change is each row's weight, read back as ``grad / (−A·S)``. With at most 5 tokens of
``|log ρ| <= 0.09`` the drawn ``S`` lies in ``[e^{−0.45}, e^{0.45}] ⊂ [0.63, 1.57]``: the
candidate's clip range must be wider (e.g. ``ε = 1`` on both sides), where the clipped surrogate
is ``−A·S``.
"""

from __future__ import annotations

import inspect
import itertools
import warnings
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import numpy as np
from hypothesis import Phase
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample
from numpy.typing import NDArray

from refimpl._validation import as_int, as_real, invalid
from refimpl.losses._common import as_choice
from refimpl.losses.aggregation import AGGREGATION_MODES, aggregation_weights
from refimpl.losses.clipped import ppo_clip_loss
from refimpl.losses.partition import (
    ACCUMULATIONS,
    SCALING_RULES,
    ScalingRule,
    as_rule,
    intent_of,
    partition_gap,
    split_weights,
)
from refimpl.losses.sequence_product import sequence_ppo_clip_loss
from refimpl.testing._arrays import ArrayBridge
from refimpl.testing._conformance import (
    CheckResult,
    _literal,
    _resolve,
    _search,
)
from refimpl.testing._partition_report import PartitionReport
from refimpl.testing._search import find
from refimpl.testing.tolerances import summation_factor, unit_roundoff

__all__ = [
    "STATED_WORKLOAD",
    "PartitionCase",
    "PartitionOutcome",
    "PartitionReport",
    "check_partition_invariance",
    "partition_case_outcome",
    "partition_cases",
    "split_dependence",
]

Array = NDArray[np.float64]
_KEYWORDS = (
    "global_tokens",
    "step_tokens",
    "global_sequences",
    "rank_sequences",
    "rank_microbatches",
    "accumulation_steps",
    "world_size",
    "constant",
    "group",
    "group_tokens",
)
_CHECKS = {
    "finite": "every micro-batch's loss and gradient are finite (no 0/0 on empty micro-batches)",
    "gradient": "the accumulated gradient equals the full-batch aggregation's",
    "value": "the accumulated loss equals the full-batch aggregated loss",
}
_LOG_RATIO = 0.09  # |log ρ| bound on valid tokens: inside every clip range ε >= 0.1
#: the references by the level of the candidate's ratio: one per token, or one per sequence
RATIOS = ("token", "sequence")


class PartitionCase(NamedTuple):
    """One drawn optimizer step: the batch and its split over ranks and micro-batches.

    ``splits[r][k]`` lists the rows of micro-batch ``k`` of rank ``r``; ``group`` labels the
    prompt of each row (used by ``group_mean`` only).
    """

    logp: Array
    logp_old: Array
    advantages: Array
    mask: Array
    splits: list[list[list[int]]]
    group: NDArray[np.int64]


@st.composite
def partition_cases(draw: Any, *, max_ranks: int = 3, max_steps: int = 3) -> PartitionCase:
    """Hypothesis strategy of :class:`PartitionCase`: uneven lengths (empty rows included), at
    least one valid token in the step, random splits with uneven token counts, sometimes a
    micro-batch or a whole rank without a valid token."""
    ranks = draw(st.integers(1, max_ranks))
    steps = draw(st.integers(1, max_steps))
    rows = draw(st.integers(ranks * steps, ranks * steps + 4))
    width = draw(st.integers(1, 5))
    lengths = np.array(draw(st.lists(st.integers(0, width), min_size=rows, max_size=rows)))
    order = np.array(draw(st.permutations(range(rows))))
    extra = draw(st.lists(st.integers(0, ranks * steps - 1), min_size=rows, max_size=rows))
    slot = [i if i < ranks * steps else extra[i] for i in range(rows)]
    splits: list[list[list[int]]] = [[[] for _ in range(steps)] for _ in range(ranks)]
    for position, row in enumerate(order):
        splits[slot[position] // steps][slot[position] % steps].append(int(row))
    empty = draw(st.sampled_from(["none", "micro-batch", "rank"]))
    if empty == "rank" and ranks > 1:
        lengths[[row for mb in splits[0] for row in mb]] = 0
    elif empty == "micro-batch":
        lengths[splits[-1][-1]] = 0
    if lengths.sum() == 0:  # the step needs one valid token: outside the drawn empty part
        emptied = {row for mb in splits[0] for row in mb} if empty == "rank" else set()
        emptied |= set(splits[-1][-1]) if empty == "micro-batch" else set()
        free = [row for row in range(rows) if row not in emptied] or [0]
        lengths[free[0]] = width
    mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.float64)
    real = st.floats(-4.0, -0.05, allow_nan=False, width=64)
    old = np.array(draw(st.lists(real, min_size=rows * width, max_size=rows * width)))
    step = st.floats(-_LOG_RATIO, _LOG_RATIO, allow_nan=False)
    delta = np.array(draw(st.lists(step, min_size=rows * width, max_size=rows * width)))
    pad = st.floats(-8.0, 0.0, allow_nan=False)
    junk = np.array(draw(st.lists(pad, min_size=rows * width, max_size=rows * width)))
    logp_old = old.reshape(rows, width)
    logp = np.where(mask > 0, logp_old + delta.reshape(rows, width), junk.reshape(rows, width))
    size = st.floats(0.25, 2.0, allow_nan=False)
    signs = draw(st.lists(st.sampled_from([-1.0, 1.0]), min_size=rows, max_size=rows))
    advantages = np.array(draw(st.lists(size, min_size=rows, max_size=rows))) * np.array(signs)
    n_groups = draw(st.integers(1, rows))
    group = np.array(draw(st.lists(st.integers(0, n_groups - 1), min_size=rows, max_size=rows)))
    return PartitionCase(logp, logp_old, advantages, mask, splits, group.astype(np.int64))


class PartitionOutcome(NamedTuple):
    """What one case gave: the candidate's accumulated value and gradient, the reference's, and
    the first failed check (``""`` when none) with its message."""

    value: float
    grad: Array
    reference_value: float
    reference_grad: Array
    failed: str
    message: str


def _accepted(candidate: Callable[..., Any]) -> set[str]:
    """The driver's keywords that the candidate's signature takes."""
    try:
        params = inspect.signature(candidate).parameters.values()
    except (TypeError, ValueError):
        return set(_KEYWORDS)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return set(_KEYWORDS)
    names = {p.name for p in params}
    return {k for k in _KEYWORDS if k in names}


def _surrogate(case: PartitionCase, weights: Array, ratio: str = "token") -> tuple[float, Array]:
    """Value and gradient of ``Σ w·ℓ`` for the PPO clipped surrogate ``ℓ`` (the reference's
    VJP with cotangent ``w``); on the drawn ratios it is ``−A·ρ``, clipped by no range
    ``ε >= 0.1`` (``ratio="sequence"``: ``−A·S`` on the sequence ratio, unclipped at ε = 1)."""
    if ratio == "sequence":
        terms = sequence_ppo_clip_loss(
            case.logp, case.logp_old, case.advantages, eps_low=1.0, eps_high=1.0,
            mask=case.mask, cotangent=weights,
        )  # fmt: skip
        return float(np.sum(weights * terms.loss)), terms.grad
    terms = ppo_clip_loss(
        case.logp,
        case.logp_old,
        case.advantages,
        eps_low=_LOG_RATIO + 0.01,
        mask=case.mask,
        cotangent=weights,
    )
    return float(np.sum(weights * terms.loss)), terms.grad


def _step_counts(case: PartitionCase, mode: str, empty_rows: str) -> tuple[int, int, Array]:
    """The step's valid tokens, counted sequences (groups for group_mean), and each row's
    group token count."""
    lengths = case.mask.sum(axis=1)
    _, inverse = np.unique(case.group, return_inverse=True)
    group_tokens = np.bincount(inverse, weights=lengths)
    if mode == "group_mean":
        sequences = int(
            np.count_nonzero(group_tokens > 0) if empty_rows == "excluded" else group_tokens.size
        )
    else:
        sequences = int(np.count_nonzero(lengths > 0) if empty_rows == "excluded" else lengths.size)
    return int(lengths.sum()), sequences, np.asarray(group_tokens[inverse], dtype=np.float64)


def _tolerance(dtype: str, case: PartitionCase, rtol: float | None = None) -> float:
    """Relative tolerance: a few roundings per operation plus the sum's error bound, unless
    overridden."""
    if rtol is not None:
        return rtol
    return 4.0 * unit_roundoff(dtype) * (summation_factor(case.mask.size) + 4.0)


def partition_case_outcome(
    candidate: Callable[..., Any],
    case: PartitionCase,
    *,
    mode: str,
    rule: ScalingRule | str,
    xp: Any = "torch",
    dtype: str = "float32",
    constant: float | None = None,
    empty_rows: str = "excluded",
    rtol: float | None = None,
    ratio: str = "token",
) -> PartitionOutcome:
    """Run one case: call the candidate per micro-batch, accumulate, compare with the reference.

    The reference is the full-batch aggregation for a mode whose intent is global (see
    :func:`refimpl.losses.partition.partition_gap`), and the rule's own effective weights
    (:func:`refimpl.losses.partition.split_weights`) for a per-sequence mode with local counts,
    applied to the PPO surrogate of one ratio per token or per sequence (``ratio``).
    """
    chosen = as_rule(rule)
    bridge = ArrayBridge(xp, dtype)
    seen = case._replace(
        logp=bridge.seen(case.logp),
        logp_old=bridge.seen(case.logp_old),
        advantages=bridge.seen(case.advantages),
    )
    tokens, sequences, group_tokens = _step_counts(seen, mode, empty_rows)
    keywords = _accepted(candidate)
    ranks, steps = len(case.splits), len(case.splits[0])
    given: dict[str, Any] = {
        "global_tokens": tokens,
        "global_sequences": sequences,
        "accumulation_steps": steps,
        "world_size": ranks,
        "constant": constant,
    }
    grad = np.zeros_like(case.mask)
    value = 0.0
    # the valid tokens of accumulation step k over every rank (an all-reduce per micro-batch)
    step_tokens = [
        int(sum(case.mask[rank[k]].sum() for rank in case.splits if rank[k])) for k in range(steps)
    ]
    for r, rank in enumerate(case.splits):
        for k, rows in enumerate(rank):
            if not rows:
                continue
            idx = np.asarray(rows, dtype=np.int64)
            extra = {
                "rank_sequences": sum(len(mb) for mb in rank),
                "rank_microbatches": sum(1 for mb in rank if mb),
                "group": case.group[idx],
                "group_tokens": group_tokens[idx],
                "step_tokens": step_tokens[k],
            }
            kwargs = {key: val for key, val in {**given, **extra}.items() if key in keywords}
            args = tuple(
                bridge.to_candidate(a[idx])
                for a in (case.logp, case.logp_old, case.advantages, case.mask)
            )
            raw, g = bridge.value_and_vjp(
                candidate, args, bridge.to_candidate(kwargs), wrt=0, cotangent=np.ones(())
            )
            v = float(bridge.to_numpy(raw))
            if not (np.isfinite(v) and np.all(np.isfinite(g))):
                n_mb = int(case.mask[idx].sum())
                message = (
                    f"rank {r}, micro-batch {k} (rows {rows}, {n_mb} valid tokens) returned a "
                    f"non-finite loss or gradient (loss={v}): a 0/0 on a micro-batch or rank "
                    "without valid tokens. Divide by the step's global count (which is >= 1), "
                    "or clamp a local denominator, e.g. mask.sum().clamp(min=1)."
                )
                return PartitionOutcome(v, grad, float("nan"), grad, "finite", message)
            share = 1.0 / ranks if chosen.ranks == "mean" else 1.0
            grad[idx] += share * g
            value += share * v
    options: dict[str, Any] = {"constant": constant, "empty_rows": empty_rows}
    if mode == "group_mean":
        options["group"] = case.group
    if intent_of(mode, chosen) == "global":
        weights = aggregation_weights(seen.mask, mode=mode, **options)
    else:
        weights = split_weights(seen.mask, splits=case.splits, mode=mode, rule=chosen, **options)
    ref_value, ref_grad = _surrogate(seen, weights, ratio)
    rtol = _tolerance(bridge.dtype_name, case, rtol)
    scale = float(np.max(np.abs(ref_grad))) if ref_grad.size else 0.0
    if np.any(np.abs(grad - ref_grad) > rtol * (scale + np.abs(ref_grad))):
        message = _gradient_message(seen, grad, ref_grad, mode, chosen, options, rtol)
        return PartitionOutcome(value, grad, ref_value, ref_grad, "gradient", message)
    total = float(np.sum(np.abs(ref_grad)))
    if abs(value - ref_value) > rtol * (total + abs(ref_value)) + rtol * scale:
        message = (
            f"the accumulated loss is {value!r}, the full-batch aggregated loss {ref_value!r}, "
            "although the gradients agree: the value is scaled differently from the loss that "
            "is differentiated (e.g. a metric-only rescaling). Return the loss whose gradient "
            "you train on."
        )
        return PartitionOutcome(value, grad, ref_value, ref_grad, "value", message)
    return PartitionOutcome(value, grad, ref_value, ref_grad, "", "")


def _all_rules() -> list[ScalingRule]:
    """Every combination of the rule's choices (for naming what a candidate implements)."""
    return [
        ScalingRule(d, a, r, w)  # type: ignore[arg-type]
        for d, a, r, w in itertools.product(
            ("global", "local", "across_ranks"),
            ACCUMULATIONS,
            ("mean", "sum"),
            (True, False),
        )
    ]


def _fixed_case(lengths: list[int], splits: list[list[list[int]]], width: int) -> PartitionCase:
    """A hand-made case for naming a candidate's rule (uneven counts everywhere)."""
    rows = len(lengths)
    mask = (np.arange(width)[None, :] < np.array(lengths)[:, None]).astype(np.float64)
    logp_old = -1.0 - 0.1 * np.arange(rows * width, dtype=np.float64).reshape(rows, width) / width
    delta = 0.05 * np.sin(np.arange(rows * width, dtype=np.float64)).reshape(rows, width)
    advantages = np.array([1.0, -0.5, 0.75, -1.25, 1.5, -0.25, 0.5, -2.0][:rows])
    group = np.arange(rows, dtype=np.int64) // 2
    return PartitionCase(logp_old + delta * mask, logp_old, advantages, mask, splits, group)


#: Cases on which every candidate rule gives different weights: they name the rule a failing
#: candidate implements when the shrunk counterexample cannot tell two rules apart.
_NAMING_CASES = (
    _fixed_case([4, 1, 3, 0, 2, 2, 4, 1], [[[0, 1], [2]], [[3, 4, 5], [6, 7]]], 4),
    _fixed_case([1, 4, 2, 3, 3], [[[0], [1, 2], [3, 4]]], 4),
)


#: The workload of :func:`split_dependence`: eight sequences of uneven lengths (1 to 34 tokens,
#: Fibonacci) over 2 ranks × 2 accumulation steps, the micro-batches holding 3, 1, 2 and 2
#: sequences and 37, 21, 16 and 13 tokens, so that every count a framework may normalise by
#: differs between micro-batches and ranks.
STATED_WORKLOAD = _fixed_case([1, 2, 3, 5, 8, 13, 21, 34], [[[0, 7, 1], [6]], [[2, 5], [3, 4]]], 34)


def split_dependence(
    candidate: Any,
    *,
    mode: str,
    rule: ScalingRule | str,
    xp: Any = "torch",
    dtype: str = "float64",
    constant: float | None = None,
    empty_rows: str = "excluded",
    ratio: str = "token",
) -> float:
    """How far a framework's step gradient is from the full-batch one on :data:`STATED_WORKLOAD`.

    The candidate (as for :func:`check_partition_invariance`) is run on each micro-batch of the
    stated split and its gradients are accumulated by ``rule``; the weight it gave each valid
    token (its gradient over that of ``−A·ρ``) is compared with the token's weight in the full
    batch aggregated by ``mode``. The result is the largest relative error of a token's weight,
    ``max |w / w_full − 1|``: 0 when the split does not matter, 0.67 when some token counts 67%
    more than it would in the full batch; ``nan`` when a micro-batch gave a non-finite loss.
    With ``ratio="sequence"`` the weight compared is each row's (all its tokens share one ratio).

    Examples
    --------
    >>> import torch
    >>> from refimpl.testing._partition import split_dependence
    >>> def local_token_mean(logp, logp_old, advantages, mask, *, accumulation_steps, **_):
    ...     loss = -advantages[:, None] * torch.exp(logp - logp_old)
    ...     return (loss * mask).sum() / mask.sum().clamp(min=1) / accumulation_steps
    >>> round(split_dependence(local_token_mean, mode="token_mean", rule="skyrl_token_mean_legacy"), 3)
    0.673
    """
    case = STATED_WORKLOAD
    out = partition_case_outcome(
        _resolve(candidate)[0], case, mode=mode, rule=rule, xp=xp, dtype=dtype,
        constant=constant, empty_rows=empty_rows, ratio=ratio,
    )  # fmt: skip
    if out.failed == "finite":
        return float("nan")
    options: dict[str, Any] = {"constant": constant, "empty_rows": empty_rows}
    if mode == "group_mean":
        options["group"] = case.group
    full = _comparable(aggregation_weights(case.mask, mode=mode, **options), case.mask, ratio)
    valid = case.mask > 0
    found = _effective_weights(case, out.grad, ratio)
    return float(np.max(np.abs(found[valid] / full[valid] - 1.0)))


def _comparable(weights: Array, mask: Array, ratio: str) -> Array:
    """Token weights as the gradient shows them: each token's own (one ratio per token), or its
    row's total at every valid token (one ratio per sequence)."""
    if ratio == "sequence":
        return np.asarray(mask * weights.sum(axis=1, keepdims=True), dtype=np.float64)
    return weights


def _effective_weights(case: PartitionCase, grad: Array, ratio: str = "token") -> Array:
    """The weight the candidate gave each token: its gradient over ``∂(−A·ρ)/∂logp`` (over
    ``−A·S``, ``S`` the row's sequence ratio, when ``ratio="sequence"``)."""
    d = np.where(case.mask > 0, case.logp - case.logp_old, 0.0)
    if ratio == "sequence":
        d = np.broadcast_to(d.sum(axis=1, keepdims=True), d.shape)
    per_token = -case.advantages[:, None] * np.exp(d)
    return np.where(case.mask > 0, grad / np.where(case.mask > 0, per_token, 1.0), 0.0)


def _matching_rules(
    case: PartitionCase,
    grad: Array,
    mode: str,
    options: dict[str, Any],
    rtol: float,
    ratio: str = "token",
) -> list[ScalingRule]:
    """The scaling rules whose effective weights equal the candidate's on ``case``."""
    weights = _effective_weights(case, grad, ratio)
    found = []
    for other in _all_rules():
        opts = dict(options, group=case.group) if mode == "group_mean" else options
        eff = split_weights(case.mask, splits=case.splits, mode=mode, rule=other, **opts)
        eff = _comparable(eff, case.mask, ratio)
        scale = float(np.max(np.abs(eff))) if eff.size else 0.0
        if np.all(np.abs(weights - eff) <= 8 * rtol * (scale + np.abs(eff))):
            found.append(other)
    return found


def _gradient_message(
    case: PartitionCase,
    grad: Array,
    ref_grad: Array,
    mode: str,
    rule: ScalingRule,
    options: dict[str, Any],
    rtol: float,
) -> str:
    """What differs at the worst token, with the gradient seen there."""
    worst = np.unravel_index(int(np.argmax(np.abs(grad - ref_grad))), grad.shape)
    rel = abs(grad[worst] - ref_grad[worst]) / max(abs(ref_grad[worst]), 1e-300)
    return (
        f"the accumulated gradient differs from the full-batch {mode} gradient under rule "
        f"{rule.describe()!r}: at token {tuple(int(i) for i in worst)} it is "
        f"{grad[worst]:.17g}, expected {ref_grad[worst]:.17g} (relative difference {rel:.3g}, "
        f"tolerance {rtol:.3g})."
    )


def _diagnosis(
    func: Callable[..., Any], example: PartitionCase, outcome: PartitionOutcome, run: dict[str, Any]
) -> str:
    """The rule the candidate implements (its weights on the counterexample and on the naming
    cases), the exact split dependence it causes, and the fix."""
    mode: str = run["mode"]
    options: dict[str, Any] = {"constant": run["constant"], "empty_rows": run["empty_rows"]}
    rtol = _tolerance(run["dtype"], example, run["rtol"])
    bridge = ArrayBridge(run["xp"], run["dtype"])
    seen = example._replace(logp=bridge.seen(example.logp), logp_old=bridge.seen(example.logp_old))
    seen = seen._replace(advantages=bridge.seen(example.advantages))
    ratio: str = run.get("ratio", "token")
    candidates = _matching_rules(seen, outcome.grad, mode, options, rtol, ratio)
    named = _NAMING_CASES[0]
    for case in _NAMING_CASES:
        if not candidates:
            break
        try:
            got = partition_case_outcome(func, case, **run)
        except Exception:
            continue
        if got.failed == "finite":
            continue
        seen = case._replace(logp=bridge.seen(case.logp), logp_old=bridge.seen(case.logp_old))
        seen = seen._replace(advantages=bridge.seen(case.advantages))
        here = _matching_rules(seen, got.grad, mode, options, rtol, ratio)
        narrowed = [r for r in candidates if r in here]
        if narrowed:
            candidates, named = narrowed, case
    if not candidates:
        return "The weights it gives the tokens match no scaling rule refimpl knows."
    found = candidates[0]
    opts = dict(options, group=named.group) if mode == "group_mean" else options
    gap = partition_gap(named.mask, splits=named.splits, mode=mode, rule=found, **opts)
    return (
        f"The weights it gives the tokens are those of the rule {found.describe()!r}, on this "
        f"example and on a fixed case with uneven counts ({gap.dependence}). {_fix(found)}"
    ).strip()


def _fix(found: ScalingRule) -> str:
    """How to turn the rule the candidate implements into a partition-invariant one."""
    steps = []
    if found.denominator != "global" and found.accumulation != "token_share":
        steps.append(
            "normalise every micro-batch by the step's global count (global_tokens / "
            "global_sequences: verl batch_num_tokens / global_batch_size, TRL "
            "num_items_in_batch) instead of its own"
        )
    if found.accumulation == "mean":
        steps.append("do not divide by accumulation_steps (the global count already does)")
    if found.ranks == "mean" and not found.world_scale:
        steps.append("multiply by world_size (the all-reduce averages the ranks)")
    if found.ranks == "sum" and found.world_scale:
        steps.append("do not multiply by world_size when the all-reduce sums")
    return ("Fix: " + "; ".join(steps) + ".") if steps else ""


def check_partition_invariance(
    candidate: Any,
    *,
    mode: str,
    rule: ScalingRule | str = "verl",
    xp: Any = "torch",
    dtype: str = "float32",
    max_examples: int = 60,
    constant: float | None = None,
    empty_rows: str = "excluded",
    max_ranks: int = 3,
    max_steps: int = 3,
    rtol: float | None = None,
    ratio: str = "token",
) -> PartitionReport:
    """Check that a framework's micro-batch loss accumulates to the full-batch gradient.

    Parameters
    ----------
    candidate : callable or "module:function"
        The loss on one micro-batch, ``candidate(logp, logp_old, advantages, mask, *,
        global_tokens, global_sequences, accumulation_steps, world_size) -> scalar`` (see the
        module docstring; only the keywords it accepts are passed).
    mode : str
        The aggregation it implements (:data:`refimpl.losses.aggregation.AGGREGATION_MODES`).
    rule : ScalingRule or str
        The framework's scaling rule or a preset (:data:`refimpl.losses.partition.SCALING_RULES`);
        its ``ranks`` says how the simulated all-reduce combines the ranks' gradients.
    xp, dtype
        The candidate's array library (with autograd: ``"torch"`` or ``"jax.numpy"``) and dtype.
    max_examples : int
        Hypothesis examples (``>= 1``); the search is derandomized (same examples every run).
    constant : float, optional
        Dr GRPO's ``H`` for ``token_sum_norm`` (also passed to the candidate if it takes it).
    empty_rows : {"excluded", "counted"}
        Whether rows without a valid token count in the sequence count.
    max_ranks, max_steps : int
        The largest number of simulated ranks and accumulation steps (``>= 1``).
    rtol : float, optional
        Relative tolerance of the comparisons (``>= 0``). Default: derived from the dtype,
        ``4 u (⌈log2 n⌉ + 5)`` with ``u`` its unit roundoff and ``n`` the batch's entries. A
        candidate that adds an epsilon to a denominator (verl's ``+ 1e-8``) needs a ``rtol``
        above that epsilon's relative size in float64.
    ratio : {"token", "sequence"}
        The candidate's importance ratio: one per token (the reference is
        :func:`refimpl.losses.clipped.ppo_clip_loss`), or one per sequence, the
        sequence-likelihood ratio (:func:`refimpl.losses.sequence_product.sequence_ppo_clip_loss`;
        the candidate's clip range must contain ``[0.63, 1.57]``, see the module docstring).

    Returns
    -------
    PartitionReport
        The checks, and for ``split`` intent the dependence on the split.

    Raises
    ------
    ValueError
        If the mode, rule, dtype or library is unknown, the library has no autodiff, a count is
        below 1, or ``constant`` is missing for ``token_sum_norm``.

    Examples
    --------
    >>> import torch
    >>> from refimpl.testing._partition import check_partition_invariance
    >>> def local_mean(logp, logp_old, advantages, mask, *, accumulation_steps, **_):
    ...     loss = -advantages[:, None] * torch.exp(logp - logp_old)
    ...     per_mb = (loss * mask).sum() / mask.sum().clamp(min=1)
    ...     return per_mb / accumulation_steps
    >>> report = check_partition_invariance(local_mean, mode="token_mean", max_examples=20)
    >>> report.ok, report["gradient"].status
    (False, 'failed')
    """
    func, label, _line = _resolve(candidate)
    as_choice(mode, name="mode", choices=AGGREGATION_MODES)
    as_choice(empty_rows, name="empty_rows", choices=("excluded", "counted"))
    as_choice(ratio, name="ratio", choices=RATIOS)
    chosen = as_rule(rule)
    examples = as_int(max_examples, name="max_examples", minimum=1)
    ranks = as_int(max_ranks, name="max_ranks", minimum=1)
    steps = as_int(max_steps, name="max_steps", minimum=1)
    aggregation_weights(np.ones((1, 1)), mode=mode, constant=constant, group=_probe_group(mode))
    bridge = ArrayBridge(xp, dtype)
    if bridge.autodiff is None:
        raise invalid(
            "xp",
            "be a library whose autograd refimpl drives (the gradient is what is checked)",
            xp,
            "Pass xp='torch' or xp='jax.numpy'.",
        )
    tolerance = None if rtol is None else as_real(rtol, name="rtol", low=0.0)
    run = {
        "mode": mode,
        "rule": chosen,
        "xp": xp,
        "dtype": dtype,
        "constant": constant,
        "empty_rows": empty_rows,
        "rtol": tolerance,
    }
    if ratio != "token":  # the token-level run (and its reproduction) stays as it was
        run["ratio"] = ratio
    widest: list[tuple[float, str]] = [(0.0, "")]

    def fails(case: PartitionCase) -> bool:
        if intent_of(mode, chosen) == "split":
            options: dict[str, Any] = {"constant": constant, "empty_rows": empty_rows}
            if mode == "group_mean":
                options["group"] = case.group
            gap = partition_gap(case.mask, splits=case.splits, mode=mode, rule=chosen, **options)
            if gap.max_relative_difference > widest[0][0]:
                widest[0] = (gap.max_relative_difference, gap.dependence)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return bool(partition_case_outcome(func, case, **run).failed)
        except Exception:
            return True

    config = _search(examples, derandomize=True, phases=[Phase.generate, Phase.shrink])
    strategy = partition_cases(max_ranks=ranks, max_steps=steps)
    try:
        example = find(strategy, fails, settings=config)
    except NoSuchExample:
        example = None
    results = _results(func, example, run, _line)
    return PartitionReport(
        label,
        mode,
        chosen,
        bridge.describe(),
        intent_of(mode, chosen),
        results,
        widest[0][0],
        widest[0][1],
    )


def _probe_group(mode: str) -> Any:
    return [0] if mode == "group_mean" else None


def _results(
    func: Callable[..., Any], example: PartitionCase | None, run: dict[str, Any], line: str
) -> tuple[CheckResult, ...]:
    """One CheckResult per check, from the failing example (if any)."""
    if example is None:
        return tuple(CheckResult("partition", n, d, "passed") for n, d in _CHECKS.items())
    status: Literal["failed", "raised"] = "failed"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outcome = partition_case_outcome(func, example, **run)
        failed, message = outcome.failed, outcome.message
        if failed == "gradient":
            message = f"{message} {_diagnosis(func, example, outcome, run)}"
    except Exception as exc:
        failed, message, status = "finite", f"{type(exc).__name__}: {exc}", "raised"
    source = _literal(example._asdict())
    reproduction = "\n".join(
        [
            "import numpy as np",
            "from refimpl.losses.partition import ScalingRule",
            "from refimpl.testing._partition import PartitionCase, partition_case_outcome",
            line,
            f"case = PartitionCase(**{source})",
            f"outcome = partition_case_outcome(candidate, case, **{_literal(_plain(run))})",
            "print(outcome.failed, outcome.message)",
        ]
    )
    out = []
    for name, description in _CHECKS.items():
        if name == failed:
            out.append(
                CheckResult(
                    "partition",
                    name,
                    description,
                    status,
                    message,
                    source,
                    reproduction,
                )
            )
        else:
            out.append(CheckResult("partition", name, description, "passed"))
    return tuple(out)


def _plain(run: dict[str, Any]) -> dict[str, Any]:
    """The run's keywords with the rule as the source that rebuilds it: a preset's name, or the
    :class:`ScalingRule` itself (a rule read from a trainer may carry a name no preset has)."""
    rule: ScalingRule = run["rule"]
    out = dict(run)
    out["rule"] = rule.name if rule.name in SCALING_RULES else rule
    return out
