r"""Loss aggregation: how per-token losses become the one scalar a trainer differentiates.

Every aggregation mode used by the RL frameworks is *linear* in the per-token losses, so each one is
a weight matrix :math:`w` of shape ``(B, T)``:

.. math::

    J = \sum_{b,t} w_{bt}\, \ell_{bt}.

The gradient of an aggregated token-level loss is then the loss's vector–Jacobian product with the
cotangent :math:`w` (the losses' contract, :class:`refimpl.losses.LossTerms`)::

    w = aggregation_weights(mask, mode="token_mean")
    terms = some_loss(logp, ..., mask=mask, cotangent=w)
    value, grad = float((w * terms.loss).sum()), terms.grad

The modes, with :math:`m_{bt}` the 0/1 mask, :math:`L_b = \sum_t m_{bt}` the length of row
:math:`b`, :math:`N` the token count, :math:`S` the sequence count and :math:`H` a declared constant:

=========================  =====================================  ==============================
mode                       weight of a valid token                total weight of a row
=========================  =====================================  ==============================
``token_sum``              :math:`1`                              :math:`L_b`
``token_mean``             :math:`1/N`                            :math:`L_b/N`
``seq_mean_token_mean``    :math:`1/(S L_b)`                      :math:`1/S`
``seq_mean_token_sum``     :math:`1/S`                            :math:`L_b/S`
``token_sum_norm``         :math:`1/(S H)`                        :math:`L_b/(S H)`
``group_mean``             :math:`1/(G N_g)`                      :math:`L_b/(G N_g)`
=========================  =====================================  ==============================

(``group_mean``: :math:`G` groups, :math:`N_g` the tokens of the row's group.) The frameworks'
names for these modes are on the docs page *Loss aggregation and partition invariance*.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import as_float_array, as_int, as_real, invalid, require_entries
from refimpl.losses._common import as_choice, like_tokens, masked, token_array, token_mask

__all__ = ["AGGREGATION_MODES", "aggregate_loss", "aggregation_weights", "length_weight"]

Array = NDArray[np.float64]
Mode = Literal[
    "token_sum",
    "token_mean",
    "seq_mean_token_mean",
    "seq_mean_token_sum",
    "token_sum_norm",
    "group_mean",
]

#: Every aggregation mode, in the order of the table above.
AGGREGATION_MODES: tuple[str, ...] = (
    "token_sum",
    "token_mean",
    "seq_mean_token_mean",
    "seq_mean_token_sum",
    "token_sum_norm",
    "group_mean",
)
_EMPTY = ("excluded", "counted")
_DENOMINATOR = ("before_rejection", "after_rejection")


def _rejection(rejection: ArrayLike | None, shape: tuple[int, int]) -> Array:
    """The 0/1 rejection mask as (B, T) (1 = kept); all ones when None."""
    if rejection is None:
        return np.ones(shape, dtype=np.float64)
    r = as_float_array(rejection, name="rejection", ndim=(1, 2))
    if r.shape not in (shape, (shape[0],)):
        raise invalid(
            "rejection",
            f"have one entry per sequence ({shape[0]},) or one per token {shape}",
            r,
            "Pass a 0/1 rejection mask of shape (B,) or (B, T) (1 = kept).",
        )
    require_entries(
        r,
        (r != 0.0) & (r != 1.0),
        name="rejection",
        rule="hold only 0 and 1 (1 = kept, 0 = rejected)",
        fix="; pass a boolean or 0/1 mask.",
    )
    return np.asarray(np.broadcast_to(r[:, None], shape) if r.ndim == 1 else r, dtype=np.float64)


def _groups(group: ArrayLike | None, rows: int) -> NDArray[np.int64]:
    """Group labels (B,) as integers; required by ``group_mean``."""
    if group is None:
        raise invalid(
            "group",
            "be given for mode='group_mean' (the prompt each sequence answers)",
            group,
            "Pass group= an integer label per sequence, shape (B,), equal for the responses "
            "to one prompt.",
        )
    g = as_float_array(group, name="group", ndim=1)
    if g.shape[0] != rows:
        raise invalid(
            "group", f"have one label per sequence (B = {rows})", g, "Pass group of shape (B,)."
        )
    require_entries(
        g,
        g != np.round(g),
        name="group",
        rule="hold integer labels",
        fix="; pass one integer label per sequence.",
    )
    return np.asarray(g, dtype=np.int64)


def _declared_count(value: Any, *, name: str, least: float, meaning: str) -> float | None:
    """A declared global count (int >= 1 and >= this batch's own count), or None."""
    if value is None:
        return None
    count = as_int(value, name=name, minimum=1, meaning=meaning)
    if count < least:
        raise invalid(
            name,
            f"be >= the {meaning} of this batch ({least:g}): a global count covers every "
            "micro-batch and rank of the step, this one included",
            value,
            f"Pass the step's total {meaning}, or leave {name}=None to use this batch's own.",
        )
    return float(count)


def _constant(constant: Any, mode: str) -> float:
    """The Dr GRPO constant H: required by ``token_sum_norm``, refused by the other modes."""
    if mode != "token_sum_norm":
        if constant is not None:
            raise invalid(
                "constant",
                "be None unless mode='token_sum_norm' (only Dr GRPO divides by a constant)",
                constant,
                "Drop constant=, or pass mode='token_sum_norm'.",
            )
        return 1.0
    if constant is None:
        raise invalid(
            "constant",
            "be given for mode='token_sum_norm': Dr GRPO divides by a declared number of "
            "tokens H (TRL max_completion_length, verl loss_scale_factor, SkyRL max_seq_len), "
            "never by the padded width T, which changes from batch to batch and would bring "
            "the length bias back",
            constant,
            "Pass constant=H, the fixed generation budget in tokens.",
        )
    h = as_real(constant, name="constant", low=0.0, low_open=True, meaning="tokens H")
    if h < 1.0 / np.finfo(np.float64).max:  # the weights 1/(S·H) would overflow to infinity
        raise invalid(
            "constant",
            "be large enough that the weight 1/(sequences·constant) is finite in float64",
            constant,
            "Pass constant=H, the fixed generation budget in tokens.",
        )
    return h


def _row_weights(
    counts: Array,
    *,
    mode: str,
    token_count: Any,
    sequence_count: Any,
    constant: Any,
    group: ArrayLike | None,
    empty_rows: str,
) -> Array:
    """The weight of a valid token of each row (B,), from the counting mask."""
    lengths = counts.sum(axis=1)
    nonempty = lengths > 0
    rows = counts.shape[0]
    h = _constant(constant, mode)
    if mode == "group_mean":
        labels = _groups(group, rows)
        _, inverse = np.unique(labels, return_inverse=True)
        group_tokens = np.bincount(inverse, weights=lengths)
        local_groups = float(
            np.count_nonzero(group_tokens > 0) if empty_rows == "excluded" else group_tokens.size
        )
        n_groups = _declared_count(
            sequence_count, name="sequence_count", least=local_groups, meaning="groups"
        )
        g = local_groups if n_groups is None else n_groups
        tokens = group_tokens[inverse]
        if g == 0:
            return np.zeros(rows, dtype=np.float64)
        return np.where(tokens > 0, 1.0 / (g * np.where(tokens > 0, tokens, 1.0)), 0.0)
    if group is not None:
        raise invalid(
            "group",
            "be None unless mode='group_mean'",
            group,
            "Drop group=, or pass mode='group_mean'.",
        )
    total = float(lengths.sum())
    n = _declared_count(token_count, name="token_count", least=total, meaning="valid tokens")
    local_seqs = float(np.count_nonzero(nonempty) if empty_rows == "excluded" else rows)
    s = _declared_count(
        sequence_count, name="sequence_count", least=local_seqs, meaning="counted sequences"
    )
    n = total if n is None else n
    s = local_seqs if s is None else s
    safe_len = np.where(nonempty, lengths, 1.0)
    ones = np.ones(rows)
    per_token = {
        "token_sum": ones,
        "token_mean": ones / n if n > 0 else 0.0 * ones,
        "seq_mean_token_mean": 1.0 / (s * safe_len) if s > 0 else 0.0 * ones,
        "seq_mean_token_sum": ones / s if s > 0 else 0.0 * ones,
        "token_sum_norm": ones / (s * h) if s > 0 else 0.0 * ones,
    }[mode]
    return np.asarray(np.where(nonempty, per_token, 0.0), dtype=np.float64)


def aggregation_weights(
    mask: ArrayLike,
    *,
    mode: str,
    token_count: int | None = None,
    sequence_count: int | None = None,
    constant: float | None = None,
    group: ArrayLike | None = None,
    empty_rows: str = "excluded",
    rejection: ArrayLike | None = None,
    denominator: str = "before_rejection",
) -> Array:
    r"""The weight each token gets in an aggregated loss: :math:`J = \sum_{bt} w_{bt}\ell_{bt}`.

    .. math::

        w^{\text{token_mean}}_{bt} = \frac{m_{bt}}{N},

        w^{\text{seq_mean_token_mean}}_{bt} = \frac{m_{bt}}{S\,L_b},

        w^{\text{seq_mean_token_sum}}_{bt} = \frac{m_{bt}}{S},

        w^{\text{token_sum_norm}}_{bt} = \frac{m_{bt}}{S\,H},

        w^{\text{group_mean}}_{bt} = \frac{m_{bt}}{G\,N_{g(b)}},

    and :math:`w^{\text{token_sum}} = m`, with :math:`L_b = \sum_t m_{bt}`, :math:`N` the token
    count (``token_count``, or this batch's :math:`\sum_b L_b`), :math:`S` the sequence count
    (``sequence_count``, or this batch's count under ``empty_rows``), :math:`G` the group count
    and :math:`N_g` the tokens of group :math:`g`. With a ``rejection`` mask :math:`r` the weight
    is multiplied by :math:`r_{bt}`, and the counts are taken from :math:`m` or :math:`m r`
    (``denominator``).

    Parameters
    ----------
    mask : array_like, shape (B, T)
        0/1 padding mask (1 = a real token).
    mode : str
        The aggregation, one of ``AGGREGATION_MODES``: ``"token_sum"``, ``"token_mean"``,
        ``"seq_mean_token_mean"``, ``"seq_mean_token_sum"``, ``"token_sum_norm"``,
        ``"group_mean"`` (see the module's table; the frameworks' names are on the docs page).
    token_count : int, optional
        The declared token count :math:`N` of ``token_mean``: the whole optimizer step's valid
        tokens (over every micro-batch and rank), ``>=`` this batch's own count. Default: this
        batch's count. Used by ``token_mean`` only.
    sequence_count : int, optional
        The declared sequence count :math:`S` (``group_mean``: the group count :math:`G`): the
        step's global count, ``>=`` this batch's. Default: this batch's count. Used by the
        sequence modes, ``token_sum_norm`` and ``group_mean``.
    constant : float, optional
        :math:`H > 0`, required by ``token_sum_norm`` (Dr GRPO's fixed token budget) and refused
        by the other modes.
    group : array_like of int, shape (B,), optional
        The prompt (group) label of each row; required by ``group_mean`` only.
    empty_rows : {"excluded", "counted"}
        Whether a row with no valid token counts in :math:`S` (or a group with no valid token in
        :math:`G`): verl and OpenRLHF exclude it (``seq_mask``), TRL's ``grpo`` counts it (its
        mean over rows divides by every row).
    rejection : array_like, shape (B,) or (B, T), optional
        0/1 mask (1 = kept) multiplied into the weights: a rejection-sampling mask.
    denominator : {"before_rejection", "after_rejection"}
        Whether :math:`N`, :math:`L_b`, :math:`S` count the tokens before the rejection mask
        (AReaL's choice: dropping tokens then does not inflate the others) or after it.

    Returns
    -------
    ndarray of float64, shape (B, T)
        The weights; 0 at padding and at rejected tokens. A count of zero (no valid token at
        all) gives weight 0, never ``0/0``.

    Raises
    ------
    ValueError
        If ``mask`` or ``rejection`` is not 0/1 or has the wrong shape, ``mode`` /
        ``empty_rows`` / ``denominator`` is unknown, a declared count is below this batch's own
        count, ``constant`` is missing for ``token_sum_norm`` (or given for another mode, or so
        small that ``1/(S·H)`` leaves float64), or ``group`` is missing for ``group_mean``.

    Notes
    -----
    The total weight of a row of length :math:`L` is :func:`length_weight`: ``token_mean`` gives
    a row weight proportional to its length (each token counts the same), ``seq_mean_token_mean``
    gives every row :math:`1/S` whatever its length, so one token of a short row weighs
    :math:`L_{\text{long}}/L_{\text{short}}` times a token of a long one (claims AG1, AG2).
    Aggregating the per-token losses with these weights is the value the frameworks compute;
    its gradient is the losses' VJP with cotangent ``w`` (claim AG4).

    Examples
    --------
    >>> import numpy as np
    >>> from refimpl.losses.aggregation import aggregation_weights
    >>> mask = np.array([[1, 1, 1, 1], [1, 0, 0, 0]])
    >>> aggregation_weights(mask, mode="token_mean")[:, 0]
    array([0.2, 0.2])
    >>> aggregation_weights(mask, mode="seq_mean_token_mean")[:, 0]
    array([0.125, 0.5  ])
    >>> aggregation_weights(mask, mode="token_sum_norm", constant=4)[:, 0]
    array([0.125, 0.125])
    """
    m = token_mask(token_array(mask, name="mask"), np.shape(mask), like="mask")
    as_choice(mode, name="mode", choices=AGGREGATION_MODES)
    as_choice(empty_rows, name="empty_rows", choices=_EMPTY)
    as_choice(denominator, name="denominator", choices=_DENOMINATOR)
    r = _rejection(rejection, m.shape)
    kept = m * r
    counts = kept if denominator == "after_rejection" else m
    per_row = _row_weights(
        counts,
        mode=mode,
        token_count=token_count,
        sequence_count=sequence_count,
        constant=constant,
        group=group,
        empty_rows=empty_rows,
    )
    return np.asarray(per_row[:, None] * kept, dtype=np.float64)


def aggregate_loss(loss: ArrayLike, mask: ArrayLike, *, mode: str, **options: Any) -> float:
    r"""The aggregated loss :math:`J = \sum_{bt} w_{bt}\,\ell_{bt}` with the weights of
    :func:`aggregation_weights`.

    .. math::

        J = \sum_{b,t} w_{bt}\,\ell_{bt}

    Parameters
    ----------
    loss : array_like, shape (B, T)
        Per-token losses; finite (padding may hold any finite value: it gets weight 0).
    mask : array_like, shape (B, T)
        0/1 padding mask.
    mode : str
        The aggregation mode (see :func:`aggregation_weights`).
    **options
        The keywords of :func:`aggregation_weights` (``token_count``, ``sequence_count``,
        ``constant``, ``group``, ``empty_rows``, ``rejection``, ``denominator``).

    Returns
    -------
    float
        The aggregated loss.

    Raises
    ------
    ValueError
        As :func:`aggregation_weights`, or if ``loss`` is not finite or its shape differs from
        ``mask``'s.

    Examples
    --------
    >>> from refimpl.losses.aggregation import aggregate_loss
    >>> aggregate_loss([[1.0, 3.0], [5.0, 99.0]], [[1, 1], [1, 0]], mode="seq_mean_token_mean")
    3.5
    """
    values = token_array(loss, name="loss")
    m = like_tokens(mask, values.shape, name="mask", like="loss")
    w = aggregation_weights(m, mode=mode, **options)
    return float(np.sum(w * masked(values, m)))


def length_weight(
    lengths: ArrayLike,
    *,
    mode: str,
    sequence_count: int,
    token_count: int | None = None,
    constant: float | None = None,
) -> Array:
    r"""The total weight one sequence of length :math:`L` gets under ``mode``: its share of
    :math:`J`.

    .. math::

        W^{\text{token_sum}}(L) = L,

        W^{\text{token_mean}}(L) = \frac{L}{N},

        W^{\text{seq_mean_token_mean}}(L) = \frac{1}{S},

        W^{\text{seq_mean_token_sum}}(L) = \frac{L}{S},

        W^{\text{token_sum_norm}}(L) = \frac{L}{S H},

    and :math:`W(0) = 0`. The weight of *one token* of the sequence is :math:`W(L)/L`: constant
    in :math:`L` for every mode but ``seq_mean_token_mean``, where it is :math:`1/(S L)`, so a
    token of a sequence of length :math:`L_1` weighs :math:`L_2/L_1` times a token of one of
    length :math:`L_2` (claim AG1).

    Parameters
    ----------
    lengths : array_like of int
        Sequence lengths :math:`L \ge 0` (valid tokens).
    mode : str
        Any mode of :func:`aggregation_weights` but ``group_mean`` (whose weight depends on the
        group's other sequences).
    sequence_count : int
        :math:`S \ge 1`, the number of sequences the mode averages over.
    token_count : int, optional
        :math:`N \ge 1`, required by ``token_mean``.
    constant : float, optional
        :math:`H > 0`, required by ``token_sum_norm``.

    Returns
    -------
    ndarray of float64, same shape as ``lengths``
        :math:`W(L)`.

    Raises
    ------
    ValueError
        If a length is negative or not an integer, ``mode`` is unknown or ``group_mean``,
        ``sequence_count < 1``, or a mode's required count or constant is missing (or the
        constant so small that ``1/(S·H)`` leaves float64).

    Examples
    --------
    >>> from refimpl.losses.aggregation import length_weight
    >>> length_weight([1, 4], mode="seq_mean_token_mean", sequence_count=2)
    array([0.5, 0.5])
    >>> length_weight([1, 4], mode="token_mean", sequence_count=2, token_count=5)
    array([0.2, 0.8])
    """
    lens = as_float_array(lengths, name="lengths")
    require_entries(
        lens,
        (lens < 0) | (lens != np.round(lens)),
        name="lengths",
        rule="hold integer lengths >= 0",
        fix="; pass the number of valid tokens of each sequence.",
    )
    as_choice(mode, name="mode", choices=AGGREGATION_MODES[:-1])
    s = float(as_int(sequence_count, name="sequence_count", minimum=1, meaning="sequences"))
    h = _constant(constant, mode)
    if mode == "token_mean":
        if token_count is None:
            raise invalid(
                "token_count",
                "be given for mode='token_mean' (the N of L/N)",
                token_count,
                "Pass token_count= the number of valid tokens the mean divides by.",
            )
        n = float(as_int(token_count, name="token_count", minimum=1, meaning="valid tokens"))
    elif token_count is not None:
        raise invalid(
            "token_count",
            "be None unless mode='token_mean'",
            token_count,
            "Drop token_count=, or pass mode='token_mean'.",
        )
    if mode == "token_sum":
        out = lens
    elif mode == "token_mean":
        out = lens / n
    elif mode == "seq_mean_token_mean":
        out = np.where(lens > 0, 1.0 / s, 0.0)
    elif mode == "seq_mean_token_sum":
        out = lens / s
    else:
        out = lens / (s * h)
    return np.asarray(out, dtype=np.float64)
