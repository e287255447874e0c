r"""Partition invariance: the gradient of one optimizer step under micro-batches and ranks.

One optimizer step's batch is split over ``R`` data-parallel ranks, each running ``K``
micro-batches (gradient-accumulation steps). Each micro-batch's loss is normalised and scaled by
the framework, its gradient is accumulated (``loss.backward()`` sums), and the ranks' gradients are
all-reduced (DDP and FSDP average them). A :class:`ScalingRule` states those three choices; with
it, :func:`split_weights` gives the weight each token *effectively* gets in the accumulated
gradient, and :func:`partition_gap` compares it with the full-batch weights of
:func:`refimpl.losses.aggregation.aggregation_weights`.

For a token-level surrogate the per-token gradient is elementwise, so equal effective weights
⇔ equal accumulated gradients for every loss (claim AG4): comparing weights is comparing
gradients.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import invalid, wrong_type
from refimpl.losses._common import as_choice, token_array, token_mask
from refimpl.losses.aggregation import AGGREGATION_MODES, aggregation_weights

__all__ = [
    "SCALING_RULES",
    "PartitionGap",
    "ScalingRule",
    "partition_gap",
    "split_weights",
]

Array = NDArray[np.float64]
Splits = Sequence[Sequence[ArrayLike]]
#: How a rank combines its micro-batch losses (:attr:`ScalingRule.accumulation`).
ACCUMULATIONS = ("sum", "mean", "token_share", "sequence_share", "microbatch_mean")
#: The accumulations that state an average of micro-batch averages (split intent when local).
_AVERAGES = ("sequence_share", "microbatch_mean")


@dataclass(frozen=True)
class ScalingRule:
    """How a framework turns micro-batch losses into one optimizer step's gradient.

    Attributes
    ----------
    denominator : {"global", "local", "across_ranks"}
        The counts each micro-batch's loss is normalised by: the whole step's (``global``: every
        micro-batch of every rank, e.g. verl's ``batch_num_tokens``), the micro-batch's own
        (``local``), or the micro-batch's summed over the ranks that run it at the same
        accumulation step (``across_ranks``: an all-reduce per micro-batch, not per step).
    accumulation : {"sum", "mean", "token_share", "sequence_share", "microbatch_mean"}
        How micro-batch losses combine on one rank: summed (the loss already carries the
        normalisation), divided by the number of accumulation steps ``K`` (``mean``), weighted
        by the micro-batch's share of the step's valid tokens (``token_share``, AReaL), or by its
        share of the rank's sequences, every row counted, empty ones too (``sequence_share``:
        SkyRL's worker weighs its KL and entropy terms by ``len(microbatch) / len(data)``), or
        averaged over the rank's micro-batches that hold rows (``microbatch_mean``: SkyRL's
        Megatron wrapper, whose padding micro-batches do not count).
    ranks : {"mean", "sum"}
        How the all-reduce combines the ranks' gradients: averaged (DDP, FSDP, DeepSpeed) or
        summed.
    world_scale : bool
        Whether each micro-batch loss is multiplied by the world size ``R`` (verl's ``dp_size``,
        SkyRL's ``grad_sum_correction_factor``), which cancels the ranks' mean.
    name : str
        A label for reports (the preset's name).
    """

    denominator: Literal["global", "local", "across_ranks"] = "global"
    accumulation: Literal["sum", "mean", "token_share", "sequence_share", "microbatch_mean"] = "sum"
    ranks: Literal["mean", "sum"] = "mean"
    world_scale: bool = True
    name: str = ""

    def __post_init__(self) -> None:
        as_choice(self.denominator, name="denominator", choices=("global", "local", "across_ranks"))
        as_choice(self.accumulation, name="accumulation", choices=ACCUMULATIONS)
        as_choice(self.ranks, name="ranks", choices=("mean", "sum"))
        if not isinstance(self.world_scale, bool):
            raise wrong_type(
                "world_scale", "a bool", self.world_scale, "Pass world_scale=True or False."
            )

    def describe(self) -> str:
        """One line: the preset's name (if any) and the three choices."""
        label = f"{self.name}: " if self.name else ""
        scale = ", loss x world size" if self.world_scale else ""
        return (
            f"{label}{self.denominator} denominators, micro-batches {self.accumulation}, "
            f"ranks {self.ranks}{scale}"
        )


#: The scaling rules read from the frameworks' sources (the docs page cites file and function).
SCALING_RULES: dict[str, ScalingRule] = {
    rule.name: rule
    for rule in (
        ScalingRule("global", "sum", "mean", True, "verl"),
        ScalingRule("global", "sum", "mean", True, "openrlhf"),
        ScalingRule("global", "sum", "mean", True, "skyrl"),
        ScalingRule("local", "mean", "mean", False, "skyrl_token_mean_legacy"),
        ScalingRule("local", "sequence_share", "mean", False, "skyrl_worker_terms"),
        ScalingRule("local", "microbatch_mean", "mean", False, "skyrl_megatron_terms"),
        ScalingRule("local", "token_share", "mean", True, "areal"),
        ScalingRule("global", "sum", "mean", True, "trl_dapo"),
        ScalingRule("local", "mean", "mean", False, "trl_bnpo"),
        ScalingRule("local", "mean", "mean", False, "trl_grpo"),
        ScalingRule("local", "mean", "mean", False, "trl_dr_grpo"),
        ScalingRule("local", "mean", "mean", False, "local_mean"),
    )
}


def as_rule(rule: Any) -> ScalingRule:
    """A :class:`ScalingRule`, or the preset of that name."""
    if isinstance(rule, ScalingRule):
        return rule
    if isinstance(rule, str) and rule in SCALING_RULES:
        return SCALING_RULES[rule]
    shown = ", ".join(map(repr, SCALING_RULES))
    raise invalid(
        "rule",
        f"be a ScalingRule or one of the presets {shown}",
        rule,
        "Pass e.g. rule='verl', or ScalingRule(denominator='global', ...).",
    )


def as_splits(splits: Any, rows: int) -> list[list[NDArray[np.int64]]]:
    """``splits[r][k]``: the row indices of micro-batch ``k`` of rank ``r``, validated: every row
    exactly once, and the same number of micro-batches on every rank."""
    fix = (
        "Pass splits as a list over ranks of lists of micro-batches, each a list of row "
        "indices, e.g. [[[0, 1], [2]], [[3], [4]]]."
    )
    if not isinstance(splits, Sequence) or isinstance(splits, (str, bytes)) or not splits:
        raise invalid("splits", "be a non-empty list of ranks", splits, fix)
    out: list[list[NDArray[np.int64]]] = []
    for rank in splits:
        if not isinstance(rank, Sequence) or isinstance(rank, (str, bytes)) or not rank:
            raise invalid("splits", "list at least one micro-batch for every rank", splits, fix)
        out.append([_indices(mb, rows, fix) for mb in rank])
    steps = {len(rank) for rank in out}
    if len(steps) != 1:
        raise invalid(
            "splits",
            "give every rank the same number of micro-batches (the ranks all-reduce once per "
            "step, after the same number of accumulation steps)",
            [len(rank) for rank in out],
            "Add empty micro-batches ([]) to the shorter ranks.",
        )
    seen = np.concatenate([mb for rank in out for mb in rank])
    if seen.size != rows or np.unique(seen).size != rows:
        raise invalid(
            "splits",
            f"hold every row 0..{rows - 1} exactly once",
            sorted(seen.tolist()),
            "Assign each sequence of the step to exactly one micro-batch of one rank.",
        )
    return out


def _indices(mb: Any, rows: int, fix: str) -> NDArray[np.int64]:
    arr = np.asarray(mb if len(mb) else np.zeros(0), dtype=np.float64).ravel()
    if arr.size and (np.any(arr != np.round(arr)) or arr.min() < 0 or arr.max() >= rows):
        raise invalid("splits", f"hold integer row indices in [0, {rows})", mb, fix)
    return arr.astype(np.int64)


def _microbatch_counts(
    m: Array, splits: list[list[NDArray[np.int64]]], rank: int, step: int, rule: ScalingRule
) -> NDArray[np.int64]:
    """The rows whose counts normalise micro-batch (rank, step) under a local rule."""
    if rule.denominator == "across_ranks":
        return np.concatenate([r[step] for r in splits])
    return splits[rank][step]


def split_weights(
    mask: ArrayLike,
    *,
    splits: Splits,
    mode: str,
    rule: ScalingRule | str,
    **options: Any,
) -> Array:
    r"""The weight each token effectively gets in the step's accumulated gradient.

    .. math::

        w^{\text{eff}}_{bt} = c_{\text{rank}}\; c_{\text{world}}\; a_{k}\;
        w^{(k)}_{bt}, \qquad b \in I_{r,k},

    where :math:`w^{(k)}` is :func:`aggregation_weights` of micro-batch :math:`I_{r,k}` with the
    rule's counts (global: the full batch's, so :math:`w^{(k)} = w^{\text{full}}` on its rows;
    local: the micro-batch's own; across ranks: those of :math:`\bigcup_r I_{r,k}`),
    :math:`a_k = 1` (sum), :math:`1/K` (mean), :math:`N_{r,k}/N` (token share) or
    :math:`|I_{r,k}| / |I_r|` (sequence share: the micro-batch's rows over the rank's, empty
    rows counted) or :math:`1/K_r` (micro-batch mean: :math:`K_r` the rank's micro-batches
    holding rows),
    :math:`c_{\text{world}} = R` when the loss is scaled by the world size, and
    :math:`c_{\text{rank}} = 1/R` when the all-reduce averages.

    Parameters
    ----------
    mask : array_like, shape (B, T)
        0/1 padding mask of the whole step's batch.
    splits : list over ranks of lists of micro-batches (each a list of row indices)
        Every row exactly once; every rank the same number ``K`` of micro-batches; empty
        micro-batches and micro-batches (or ranks) without a valid token allowed.
    mode : str
        The aggregation mode (:data:`refimpl.losses.aggregation.AGGREGATION_MODES`).
    rule : ScalingRule or str
        The scaling rule, or a preset name of :data:`SCALING_RULES`.
    **options
        ``constant``, ``group``, ``empty_rows``, ``rejection``, ``denominator`` as in
        :func:`aggregation_weights` (the counts come from the batch and the rule, so
        ``token_count`` and ``sequence_count`` are refused).

    Returns
    -------
    ndarray of float64, shape (B, T)
        The effective weights; 0 at padding. Never NaN: an empty micro-batch contributes 0.

    Raises
    ------
    ValueError
        If ``splits`` does not cover every row exactly once or the ranks differ in ``K``, the
        rule is unknown, or as :func:`aggregation_weights`.

    Examples
    --------
    >>> import numpy as np
    >>> from refimpl.losses.partition import split_weights
    >>> mask = np.array([[1, 1, 1], [1, 0, 0]])
    >>> split = [[[0], [1]]]  # one rank, two micro-batches of 3 and 1 tokens
    >>> split_weights(mask, splits=split, mode="token_mean", rule="verl")[:, 0]
    array([0.25, 0.25])
    >>> split_weights(mask, splits=split, mode="token_mean", rule="trl_bnpo")[:, 0]
    array([0.16666667, 0.5       ])

    SkyRL's worker terms: each micro-batch's token mean weighted by its share of the rank's
    rows, here 1/3 and 2/3, so the tokens weigh 1/9 and 2/9 where the batch's token mean
    gives 1/6 to each:

    >>> mask = np.array([[1, 1, 1], [1, 0, 0], [1, 1, 0]])
    >>> split_weights(mask, splits=[[[0], [1, 2]]], mode="token_mean", rule="skyrl_worker_terms")
    array([[0.11111111, 0.11111111, 0.11111111],
           [0.22222222, 0.        , 0.        ],
           [0.22222222, 0.22222222, 0.        ]])
    """
    m = token_mask(token_array(mask, name="mask"), np.shape(mask), like="mask")
    as_choice(mode, name="mode", choices=AGGREGATION_MODES)
    chosen = as_rule(rule)
    for key in ("token_count", "sequence_count"):
        if key in options:
            raise invalid(
                key,
                "not be passed to split_weights (the counts come from the batch and the rule)",
                options[key],
                f"Drop {key}=.",
            )
    parts = as_splits(splits, m.shape[0])
    full = aggregation_weights(m, mode=mode, **options)
    tokens = _counting_mask(m, options)
    n_ranks, n_steps = len(parts), len(parts[0])
    world = float(n_ranks) if chosen.world_scale else 1.0
    rank_factor = 1.0 / n_ranks if chosen.ranks == "mean" else 1.0
    out = np.zeros_like(m)
    for r, rank in enumerate(parts):
        for k, rows in enumerate(rank):
            if rows.size == 0:
                continue
            if chosen.denominator == "global":
                base = full[rows]
            else:
                pool = _microbatch_counts(m, parts, r, k, chosen)
                pooled = aggregation_weights(m[pool], mode=mode, **_sub(options, pool))
                where = np.zeros(m.shape[0], dtype=np.int64)
                where[pool] = np.arange(pool.size)
                base = pooled[where[rows]]
            acc = _accumulation_factor(chosen, rows, rank, tokens, n_steps)
            out[rows] = rank_factor * world * acc * base
    return out


def _accumulation_factor(
    rule: ScalingRule,
    rows: NDArray[np.int64],
    rank: list[NDArray[np.int64]],
    tokens: Array,
    n_steps: int,
) -> float:
    """``a_k`` of micro-batch ``rows`` on ``rank``: 1 (sum), ``1/K`` (mean), its share of the
    step's counted tokens (token share) or of the rank's rows (sequence share), or one over the
    rank's micro-batches that hold rows (micro-batch mean)."""
    if rule.accumulation == "mean":
        return 1.0 / n_steps
    if rule.accumulation == "token_share":
        total = float(tokens.sum())
        return float(tokens[rows].sum()) / total if total > 0 else 0.0
    if rule.accumulation == "sequence_share":  # rows is non-empty, so the rank's count is >= 1
        return rows.size / sum(mb.size for mb in rank)
    if rule.accumulation == "microbatch_mean":
        return 1.0 / sum(1 for mb in rank if mb.size)
    return 1.0


def _counting_mask(m: Array, options: dict[str, Any]) -> Array:
    """The tokens the counts are taken from (the mask, after rejection if so declared)."""
    if options.get("denominator") == "after_rejection" and options.get("rejection") is not None:
        return aggregation_weights(m, mode="token_sum", rejection=options["rejection"])
    return m


def _sub(options: dict[str, Any], rows: NDArray[np.int64]) -> dict[str, Any]:
    """The aggregation options restricted to ``rows`` (per-row arrays sliced)."""
    out = dict(options)
    for key in ("group", "rejection"):
        if out.get(key) is not None:
            out[key] = np.asarray(out[key])[rows]
    return out


class PartitionGap(NamedTuple):
    """How far a split's accumulated gradient is from the full-batch aggregation.

    Attributes
    ----------
    weights : ndarray of float64, shape (B, T)
        The effective weights under the split and rule (:func:`split_weights`).
    reference : ndarray of float64, shape (B, T)
        The full-batch weights (:func:`~refimpl.losses.aggregation.aggregation_weights`).
    max_relative_difference : float
        :math:`\\max_{bt} |w^{\\text{eff}}_{bt} - w_{bt}| / w_{bt}` over the weighted tokens
        (0 when invariant; ``inf`` if a token with full weight 0 gets a weight).
    sequence_ratio : ndarray of float64, shape (B,)
        Each row's total effective weight over its full-batch weight (1 where both are 0).
    intent : {"global", "split"}
        ``global``: the mode and rule mean a quantity of the whole step (a token mean or sum,
        or global denominators), so any gap is a bug. ``split``: a per-sequence mode with local
        counts, whose value legitimately depends on how many sequences each micro-batch holds,
        or any mode under a sequence-share or micro-batch-mean rule with local counts (an
        average of micro-batch averages).
    invariant : bool
        True when the effective weights equal the full-batch ones (relative ``1e-12``).
    dependence : str
        The exact dependence on the split in words and numbers ("" when invariant).
    """

    weights: Array
    reference: Array
    max_relative_difference: float
    sequence_ratio: Array
    intent: Literal["global", "split"]
    invariant: bool
    dependence: str


def intent_of(mode: str, rule: ScalingRule) -> Literal["global", "split"]:
    """``global`` for token means and sums and for global denominators, else ``split``; and
    ``split`` for every mode whose micro-batches are weighted by their share of the rank's
    sequences, or averaged over the rank's micro-batches, with local counts: such a rule states
    an average of micro-batch averages (SkyRL: "we just average them across microbatches and DP
    workers"), a quantity of the split."""
    if rule.accumulation in _AVERAGES and rule.denominator != "global":
        return "split"
    if mode in ("token_sum", "token_mean") or rule.denominator == "global":
        return "global"
    return "split"


def partition_gap(
    mask: ArrayLike,
    *,
    splits: Splits,
    mode: str,
    rule: ScalingRule | str,
    **options: Any,
) -> PartitionGap:
    r"""Compare the step's accumulated gradient under a split with the full-batch aggregation.

    .. math::

        \text{gap} = \max_{bt:\,w_{bt}>0} \frac{|w^{\text{eff}}_{bt} - w_{bt}|}{w_{bt}}

    Since a token-level surrogate's gradient is :math:`w_{bt}\,\partial\ell_{bt}/\partial
    \log\pi_{bt}`, a gap of 0 means the same accumulated gradient for every loss and every
    input, and a positive gap a different one for some loss (claim AG4).

    Parameters
    ----------
    mask, splits, mode, rule, **options
        As in :func:`split_weights`.

    Returns
    -------
    PartitionGap
        The gap, the per-sequence ratios, the intent and the stated dependence.

    Raises
    ------
    ValueError
        As :func:`split_weights`.

    Notes
    -----
    With local token counts and micro-batch losses averaged (``local`` / ``mean`` / ranks
    ``mean``), a token of micro-batch :math:`(r,k)` with :math:`N_{r,k}` valid tokens gets
    :math:`1/(K R N_{r,k})` instead of :math:`1/N`: equal for every split iff all micro-batches
    hold :math:`N/(KR)` tokens (claim AG3). With global counts the frameworks' rules give
    exactly the full-batch weights (claim AG5).

    Examples
    --------
    >>> import numpy as np
    >>> from refimpl.losses.partition import partition_gap
    >>> mask = np.array([[1, 1, 1], [1, 0, 0]])
    >>> gap = partition_gap(mask, splits=[[[0], [1]]], mode="token_mean", rule="trl_bnpo")
    >>> gap.intent, gap.invariant, gap.sequence_ratio.round(3).tolist()
    ('global', False, [0.667, 2.0])
    >>> partition_gap(mask, splits=[[[0], [1]]], mode="token_mean", rule="verl").invariant
    True
    """
    chosen = as_rule(rule)
    eff = split_weights(mask, splits=splits, mode=mode, rule=chosen, **options)
    ref = aggregation_weights(mask, mode=mode, **options)
    weighted = ref != 0
    if np.any((~weighted) & (eff != 0)):
        gap = float("inf")
    elif np.any(weighted):
        gap = float(np.max(np.abs(eff[weighted] - ref[weighted]) / np.abs(ref[weighted])))
    else:
        gap = 0.0
    row_eff, row_ref = eff.sum(axis=1), ref.sum(axis=1)
    ratio = np.where(row_ref != 0, row_eff / np.where(row_ref != 0, row_ref, 1.0), 1.0)
    ratio = np.where((row_ref == 0) & (row_eff != 0), np.inf, ratio)
    invariant = gap <= 1e-12
    intent = intent_of(mode, chosen)
    parts = as_splits(splits, np.shape(mask)[0])
    text = "" if invariant else _dependence(mode, chosen, parts, ratio, ref)
    return PartitionGap(eff, ref, gap, np.asarray(ratio, dtype=np.float64), intent, invariant, text)


def _dependence(
    mode: str,
    rule: ScalingRule,
    parts: list[list[NDArray[np.int64]]],
    ratio: Array,
    ref: Array,
) -> str:
    """The split dependence in words: the law, then each micro-batch's weight ratio."""
    counted = ref.sum(axis=1) != 0
    shown = []
    for r, rank in enumerate(parts):
        for k, rows in enumerate(rank):
            live = rows[counted[rows]]
            if live.size == 0:
                continue
            values = np.unique(np.round(ratio[live], 12))
            value = (
                f"{values[0]:.6g}"
                if values.size == 1
                else f"{values.min():.6g}..{values.max():.6g}"
            )
            shown.append(f"rank {r} micro-batch {k}: x{value}")
    ranks, steps = len(parts), len(parts[0])
    if rule.accumulation == "sequence_share" and rule.denominator != "global":
        law = _SEQUENCE_SHARE_LAW.get(mode, _SEQUENCE_SHARE_LAW["other"])
    elif rule.accumulation == "microbatch_mean" and rule.denominator != "global":
        law = _MICROBATCH_MEAN_LAW
    elif rule.denominator == "global" or mode == "token_sum":
        law = (
            "every token's weight is scaled by the same factor: the rule's scaling (1/K "
            f"accumulation mean with K={steps}, world size R={ranks}, ranks mean or sum) does "
            "not cancel, so the step's gradient is a multiple of the full-batch one"
        )
    elif mode == "token_mean":
        law = (
            "each micro-batch's tokens are divided by that micro-batch's own token count "
            "instead of the step's: a token of a micro-batch with fewer valid tokens weighs "
            "more; equal to the global token mean only when every micro-batch holds the same "
            "number of valid tokens"
        )
    elif mode == "group_mean":
        law = (
            "each micro-batch averages over its own groups and their tokens in it: a group "
            "split over micro-batches, or micro-batches holding different numbers of groups, "
            "change the weights"
        )
    else:
        law = (
            "each micro-batch averages over its own sequences, so a sequence's weight is "
            "divided by its micro-batch's counted sequences instead of the step's: invariant "
            "only when every micro-batch holds the same number of counted sequences"
        )
    return f"{mode} under {rule.describe()}: {law}. Weight ratios: " + "; ".join(shown)


#: The split dependence of a sequence-share rule with local counts, by mode (rank r holding
#: n_r rows; micro-batch k holding n_k rows and N_k valid tokens; the step B rows, N tokens).
_SEQUENCE_SHARE_LAW = {
    "token_mean": (
        "each micro-batch's token mean is weighted by its share of the rank's rows, so a token "
        "of micro-batch k weighs n_k / (R n_r N_k) instead of 1/N: equal to the step's token "
        "mean only when n_k N = R n_r N_k for every micro-batch (under an even dispatch, "
        "n_r = B/R: when every micro-batch's tokens per row N_k / n_k equal the step's N/B)"
    ),
    "seq_mean_token_mean": (
        "each micro-batch's mean over its rows is weighted by its share of the rank's rows, so "
        "(empty rows counted) the micro-batches of a rank add up to the rank's mean over rows "
        "whatever their sizes; "
        "a row of rank r weighs 1/(R n_r) instead of 1/B: equal only when every rank holds B/R "
        "rows (an even dispatch)"
    ),
    "other": (
        "each micro-batch's own aggregate is weighted by its share of the rank's rows: "
        "invariant only when that aggregate's counts are proportional to the micro-batch's rows "
        "and every rank holds the same number of rows"
    ),
}

#: The split dependence of a micro-batch mean over the rank's micro-batches that hold rows.
_MICROBATCH_MEAN_LAW = (
    "each micro-batch's own aggregate is averaged over the rank's K_r micro-batches that hold "
    "rows, whatever their rows or tokens: a token (or row) of micro-batch k weighs 1/(R K_r) "
    "times its weight in that micro-batch alone, equal to the step's only when every "
    "micro-batch holds the same share of the step's counted tokens (or rows)"
)
