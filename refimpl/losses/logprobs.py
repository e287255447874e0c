r"""Log-probabilities of sampled tokens as a sampler assigns them and as a trainer assigns them.

An RL trainer for language models compares two numbers for every sampled token: the log-probability
``log μ`` the *sampler* (vLLM, SGLang) reported when it drew the token, and the log-probability
``log π`` the *trainer* recomputes from its own logits. On identical weights their ratio should be
exactly 1. It is not when the two sides give the logits different *semantics*:

- **temperature**: a sampler draws from ``softmax(z/T)``; a trainer that divides the
  log-probabilities instead (``log_softmax(z)/T``) gets numbers that are not log-probabilities of
  any normalised distribution;
- **top-k / top-p**: a sampler that truncates the vocabulary renormalises the distribution over the
  kept tokens, so a kept token's probability *rises* by ``1/(kept mass)``; a trainer that scores the
  full softmax does not, and the ratio is ``π/μ = (kept mass) < 1`` on every truncated step.

This module fixes the sampler's semantics exactly (:func:`token_logprobs`), their gradient
(:func:`token_logprobs_grad`), the entropy of the tempered distribution (:func:`token_entropy`), and
the mismatch between two semantics on the same logits (:func:`logprob_mismatch`).

The semantics implemented (the order of vLLM's V1 sampler, PyTorch path):

1. temperature: ``y = z/T`` (the logits are divided, never the log-probabilities);
2. top-k: keep the tokens whose tempered logit is ``>=`` the k-th largest one (every token tied
   with the k-th is kept, so more than ``k`` tokens may survive);
3. top-p, on the distribution renormalised over the top-k support: keep the smallest prefix of the
   tokens sorted by decreasing probability whose cumulative probability is ``>= p``, and every token
   tied with the last one of that prefix;
4. the log-probability of a kept token is ``y_i − logsumexp_{j kept} y_j``; a token outside the kept
   support has log-probability ``−inf`` (the sampler could not have drawn it).

Frameworks differ on steps 2–3 in the ways the docs page lists (tie-breaking, top-p before top-k,
top-p on the un-renormalised mass). Everything is computed in float64 with a max-shifted
log-sum-exp.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import (
    as_float_array,
    as_int,
    as_real,
    invalid,
    require_entries,
    wrong_type,
)
from refimpl.losses._common import as_choice, token_cotangent, token_mask

__all__ = [
    "LogprobMismatch",
    "LogprobSemantics",
    "logprob_mismatch",
    "token_entropy",
    "token_logprobs",
    "token_logprobs_grad",
]

Array = NDArray[np.float64]
Bools = NDArray[np.bool_]
TemperatureOn = Literal["logits", "logprobs"]

_TEMPERATURE_ON: tuple[str, ...] = ("logits", "logprobs")


# ---------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------


def _as_temperature(value: Any, *, name: str = "temperature") -> float:
    return as_real(value, name=name, low=0.0, low_open=True, meaning="the logits are divided by it")


def _as_top_k(value: Any, *, name: str = "top_k") -> int | None:
    if value is None:
        return None
    k = as_int(value, name=name)
    if k < 1:
        raise invalid(
            name,
            "be >= 1 (the number of most probable tokens kept)",
            value,
            f"Pass {name} >= 1, or {name}=None to disable top-k (what vLLM's -1 and TRL's 0 mean).",
        )
    return k


def _as_top_p(value: Any, *, name: str = "top_p") -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise wrong_type(name, "a real number in (0, 1] or None", value, f"Pass {name} as a float.")
    p = float(value)
    if not (0.0 < p <= 1.0):
        raise invalid(
            name,
            "lie in (0, 1] (the cumulative probability kept; 1 keeps every token)",
            value,
            f"Pass 0 < {name} <= 1, or {name}=None to disable top-p.",
        )
    return p


def _check_top_k(top_k: int | None, vocab: int, *, name: str = "top_k") -> None:
    if top_k is not None and top_k > vocab:
        raise invalid(
            name,
            f"be <= the vocabulary size V = {vocab} (logits.shape[-1])",
            top_k,
            f"Pass 1 <= {name} <= {vocab}, or {name}=None to keep every token.",
        )


def _as_logits(logits: ArrayLike) -> Array:
    z = as_float_array(logits, name="logits", ndim=3)
    if 0 in z.shape:
        raise invalid(
            "logits",
            "have at least one sequence, one token and one vocabulary entry",
            z,
            f"Pass a (B, T, V) array with B, T, V >= 1 (got shape {z.shape}).",
        )
    return z


def _as_tokens(tokens: ArrayLike, shape: tuple[int, int], mask: Array, vocab: int) -> NDArray[Any]:
    """Integer token ids of shape (B, T), in [0, V) at the real positions; 0 at padding."""
    try:
        raw = tokens if isinstance(tokens, np.ndarray) else np.asarray(tokens)
    except (TypeError, ValueError):
        raw = np.asarray([None], dtype=object)
    if raw.dtype.kind not in "iu":
        raise wrong_type(
            "tokens",
            "an integer array of token ids",
            tokens,
            "Pass tokens as an int array (e.g. np.int64); integral floats must be cast first.",
        )
    if raw.shape != shape:
        raise invalid(
            "tokens",
            f"have shape (B, T) = logits.shape[:2] = {shape}",
            raw,
            f"Pass one token id per position (got shape {raw.shape}).",
        )
    bad = ((raw < 0) | (raw >= vocab)) & (mask > 0)
    require_entries(
        raw,
        bad,
        name="tokens",
        rule=f"hold token ids in [0, V) = [0, {vocab}) at the real positions",
        fix="; pass the sampled ids (a padding position, mask 0, may hold any integer, e.g. -100).",
    )
    return np.where(mask > 0, raw, 0).astype(np.int64)


def _scaled(z: Array, temperature: float, mask: Array, *, name: str = "temperature") -> Array:
    """``z/T``, refused where it overflows at a real position; 0 at padding (whatever it holds)."""
    real = (mask > 0)[..., None]
    with np.errstate(over="ignore"):  # an overflow is reported below, with the fix
        y = np.where(real, z / temperature, 0.0)
    if not np.all(np.isfinite(y)):
        largest = float(np.max(np.abs(np.where(real, z, 0.0))))
        raise invalid(
            name,
            "be large enough that logits/temperature stays finite in float64",
            temperature,
            f"The largest |logit| at a real position is {largest!r}; pass a larger {name}.",
        )
    return np.asarray(y, dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# the kept support and its log-normaliser
# ---------------------------------------------------------------------------------------------


def _log_normaliser(y: Array, keep: Bools) -> tuple[Array, Array]:
    """``(m, log s)`` with ``logsumexp_{kept} y = m + log s``, ``m`` the largest kept logit.

    Both have shape (..., 1); every row keeps at least one token, so ``s >= 1``.
    """
    ym = np.where(keep, y, -np.inf)
    m = np.max(ym, axis=-1, keepdims=True)
    s = np.sum(np.exp(ym - m), axis=-1, keepdims=True)
    return m, np.log(s)


def _top_k_support(y: Array, top_k: int) -> Bools:
    """Tokens whose logit is ``>=`` the k-th largest (every tie with the k-th is kept)."""
    vocab = y.shape[-1]
    kth = np.partition(y, vocab - top_k, axis=-1)[..., vocab - top_k : vocab - top_k + 1]
    return np.asarray(y >= kth)


def _top_p_support(y: Array, keep: Bools, top_p: float) -> Bools:
    """The nucleus of the distribution renormalised over ``keep``, widened to its boundary ties.

    Sorted by decreasing probability, a token is in the minimal nucleus iff the mass strictly
    before it is ``< top_p``; the kept set is every token whose logit is ``>=`` the logit of the
    last such token.
    """
    m, log_s = _log_normaliser(y, keep)
    ym = np.where(keep, y, -np.inf)
    order = np.argsort(-ym, axis=-1, kind="stable")
    y_sorted = np.take_along_axis(ym, order, axis=-1)
    p_sorted = np.exp((y_sorted - m) - log_s)
    inclusive = np.cumsum(p_sorted, axis=-1)
    before = np.concatenate([np.zeros_like(inclusive[..., :1]), inclusive[..., :-1]], axis=-1)
    count = np.sum(before < top_p, axis=-1, keepdims=True)
    count = np.clip(count, 1, np.sum(keep, axis=-1, keepdims=True))
    boundary = np.take_along_axis(y_sorted, count - 1, axis=-1)
    return np.asarray(keep & (y >= boundary))


def _support(y: Array, top_k: int | None, top_p: float | None) -> Bools:
    """The tokens a sampler keeps after top-k then top-p (all True when neither truncates)."""
    keep = np.ones(y.shape, dtype=bool)
    if top_k is not None and top_k < y.shape[-1]:
        keep = _top_k_support(y, top_k)
    if top_p is not None and top_p < 1.0:
        keep = _top_p_support(y, keep, top_p)
    return keep


def _gather(values: NDArray[Any], ids: NDArray[Any]) -> NDArray[Any]:
    return np.take_along_axis(values, ids[..., None], axis=-1)[..., 0]


def _logprobs_of(
    z: Array,
    ids: NDArray[Any],
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    mask: Array,
    *,
    name: str = "temperature",
) -> tuple[Array, Bools]:
    """Per-token log-probabilities (−inf outside the support) and whether each token is kept."""
    y = _scaled(z, temperature, mask, name=name)
    keep = _support(y, top_k, top_p)
    m, log_s = _log_normaliser(y, keep)
    kept = _gather(keep, ids)
    value = (_gather(y, ids) - m[..., 0]) - log_s[..., 0]
    return np.where(kept, value, -np.inf), np.asarray(kept)


# ---------------------------------------------------------------------------------------------
# public functions
# ---------------------------------------------------------------------------------------------


def token_logprobs(
    logits: ArrayLike,
    tokens: ArrayLike,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    mask: ArrayLike | None = None,
) -> Array:
    r"""Log-probability of each token under the tempered, truncated and renormalised distribution.

    .. math::

        y = z/T, \qquad
        \log \mu(x_{bt}) =
        \begin{cases}
            y_{bt,x} - \log\sum_{j\in S_{bt}} e^{y_{bt,j}} & x \in S_{bt},\\
            -\infty & x \notin S_{bt},
        \end{cases}

    where :math:`S_{bt}` is the kept support: the whole vocabulary, cut by top-k (every token with
    :math:`y \ge` the k-th largest :math:`y`), then by top-p on the distribution renormalised over
    the top-k support (the smallest prefix by decreasing probability whose cumulative probability
    is :math:`\ge p`, widened to the tokens tied with its last one). On the support this is
    :math:`\log p_x - \log P(S)` with :math:`p = \mathrm{softmax}(y)` (claim LP2).

    .. warning::

        The order is temperature, then top-k, then top-p, as in vLLM's V1 sampler. Other samplers
        differ: some apply top-p to the un-renormalised mass, and some break ties at the top-k or
        top-p boundary by index (``torch.topk`` keeps exactly ``k`` tokens, and a sort-based top-p
        keeps whichever tied token its sort puts first). refimpl keeps every tied token, so the
        result depends on the logits alone, not on their order.

    Parameters
    ----------
    logits : array_like, shape (B, T, V)
        Finite logits ``z`` (before temperature).
    tokens : array_like of int, shape (B, T)
        Sampled token ids, in ``[0, V)`` at the real positions (any integer at padding).
    temperature : float
        ``T > 0``: the logits are divided by it.
    top_k : int, optional
        ``1 <= k <= V``; None (default) keeps every token (vLLM's ``-1``, TRL's ``0``).
    top_p : float, optional
        ``0 < p <= 1``; None (default) or 1 keeps every token.
    mask : array_like, shape (B, T), optional
        0/1 padding mask (1 = a real token); default all real.

    Returns
    -------
    ndarray of float64, shape (B, T)
        ``log μ(x_bt)``: ``<= 0``, ``−inf`` for a token outside the kept support (the information a
        caller needs: the sampler could not have drawn it), 0 at padding.

    Raises
    ------
    TypeError
        If ``tokens`` is not an integer array, or a parameter has the wrong type.
    ValueError
        If ``logits`` is not a finite (B, T, V) array, ``tokens`` or ``mask`` has another shape, a
        real token id is outside ``[0, V)``, ``temperature <= 0`` (or so small that ``z/T``
        overflows), ``top_k`` is outside ``[1, V]``, or ``top_p`` is outside ``(0, 1]``.

    Notes
    -----
    Invariants: ``Σ_x exp(log μ(x)) = 1`` over the vocabulary for every position (claim LP1 for the
    tempered softmax, LP2 with truncation); ``top_p=1`` and ``top_k=V`` change nothing.
    Accuracy: the log-sum-exp is shifted by the largest kept logit, so the result is accurate to a
    few ulp of ``|y_x − max y| + log V``. The top-p boundary is decided on float64 cumulative sums
    of the sorted probabilities: a token whose preceding mass equals ``p`` to within float64
    rounding (``~1e-16``) may fall on either side. Ties are exact comparisons of the tempered logits.

    Examples
    --------
    >>> import numpy as np
    >>> from refimpl.losses.logprobs import token_logprobs
    >>> z = np.log([[[4.0, 2.0, 1.0, 1.0]]])   # probabilities 1/2, 1/4, 1/8, 1/8
    >>> np.exp(token_logprobs(z, [[1]])).round(6)
    array([[0.25]])
    >>> np.exp(token_logprobs(z, [[1]], top_k=2)).round(6)   # renormalised over {0, 1}
    array([[0.333333]])
    >>> token_logprobs(z, [[2]], top_k=2)                  # outside the kept support
    array([[-inf]])
    >>> np.exp(token_logprobs(z, [[0]], temperature=0.5)).round(6)   # ∝ 16, 4, 1, 1
    array([[0.727273]])
    """
    z = _as_logits(logits)
    shape = (z.shape[0], z.shape[1])
    m = token_mask(mask, shape, like="tokens")
    ids = _as_tokens(tokens, shape, m, z.shape[-1])
    t = _as_temperature(temperature)
    k = _as_top_k(top_k)
    p = _as_top_p(top_p)
    _check_top_k(k, z.shape[-1])
    value, _ = _logprobs_of(z, ids, t, k, p, m)
    return np.asarray(np.where(m > 0, value, 0.0), dtype=np.float64)


def token_logprobs_grad(
    logits: ArrayLike,
    tokens: ArrayLike,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    cotangent: ArrayLike | None = None,
    mask: ArrayLike | None = None,
) -> Array:
    r"""Gradient of :math:`\sum_{bt} c_{bt}\log\mu(x_{bt})` with respect to the logits (a VJP).

    .. math::

        \frac{\partial}{\partial z_{bt,j}} \sum_{b't'} c_{b't'} \log\mu(x_{b't'})
        = \frac{c_{bt}}{T}\bigl(\mathbb{1}[j = x_{bt}]\,\mathbb{1}[x_{bt}\in S_{bt}]
          - \mu_{bt,j}\bigr),

    with :math:`\mu_{bt,\cdot}` the renormalised distribution over the kept support
    :math:`S_{bt}` (0 outside it). Without truncation this is the familiar
    :math:`c\,(\text{onehot} - \mathrm{softmax}(z/T))/T` that every trainer back-propagates
    (claim LP5).

    With top-k or top-p the support is **held fixed**: it is piecewise constant in the logits, so
    this is the gradient everywhere except on the measure-zero set where a logit crosses a
    support boundary. It equals torch autograd of ``log_softmax(y.masked_fill(~keep, -inf))``
    gathered at the token, with ``keep`` computed without gradient. For a token outside the
    support (log-probability ``−inf``) that autograd value is ``−c·μ/T``: it is returned as such,
    although the value it differentiates is infinite.

    Parameters
    ----------
    logits : array_like, shape (B, T, V)
        Finite logits ``z``.
    tokens : array_like of int, shape (B, T)
        Token ids (validated as in :func:`token_logprobs`).
    temperature, top_k, top_p : as in :func:`token_logprobs`
    cotangent : array_like, shape (B, T), optional
        The weight ``c`` of each token's log-probability; default the padding mask.
    mask : array_like, shape (B, T), optional
        0/1 padding mask; the cotangent is zeroed at padding.

    Returns
    -------
    ndarray of float64, shape (B, T, V)
        The gradient; every row sums to 0 where the token is kept, and is 0 at padding.

    Raises
    ------
    TypeError, ValueError
        As :func:`token_logprobs`, and if ``cotangent`` is not a finite (B, T) array or
        ``cotangent/temperature`` leaves float64.

    Notes
    -----
    Claim LP5 derives the formula for every support held fixed. Accuracy: each entry is a
    difference of two numbers in ``[0, 1]`` scaled by ``c/T``, accurate to a few ulp of ``|c|/T``.

    Examples
    --------
    >>> import numpy as np
    >>> from refimpl.losses.logprobs import token_logprobs_grad
    >>> z = np.log([[[2.0, 1.0, 1.0]]])          # softmax 1/2, 1/4, 1/4
    >>> token_logprobs_grad(z, [[0]], temperature=1.0).round(6)
    array([[[ 0.5 , -0.25, -0.25]]])
    >>> token_logprobs_grad(z, [[0]], temperature=1.0, top_k=1).round(6)
    array([[[0., 0., 0.]]])
    """
    z = _as_logits(logits)
    shape = (z.shape[0], z.shape[1])
    m = token_mask(mask, shape, like="tokens")
    ids = _as_tokens(tokens, shape, m, z.shape[-1])
    c = token_cotangent(cotangent, m)
    t = _as_temperature(temperature)
    k = _as_top_k(top_k)
    p = _as_top_p(top_p)
    _check_top_k(k, z.shape[-1])
    y = _scaled(z, t, m)
    keep = _support(y, k, p)
    shift, log_s = _log_normaliser(y, keep)
    probs = np.where(keep, np.exp((y - shift) - log_s), 0.0)
    onehot = np.zeros_like(probs)
    np.put_along_axis(onehot, ids[..., None], _gather(keep, ids)[..., None].astype(float), axis=-1)
    with np.errstate(over="ignore"):
        scale = c / t
    if not np.all(np.isfinite(scale)):  # the gradient itself is beyond float64
        raise invalid(
            "temperature",
            "be large enough that the gradient cotangent/temperature stays finite in float64",
            temperature,
            "Pass a larger temperature (or a smaller cotangent).",
        )
    return np.asarray(scale[..., None] * (onehot - probs), dtype=np.float64)


def token_entropy(
    logits: ArrayLike,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    mask: ArrayLike | None = None,
) -> Array:
    r"""Entropy of the tempered (and optionally truncated, renormalised) next-token distribution.

    .. math::

        H_{bt} = -\sum_{j\in S_{bt}} \mu_{bt,j}\log\mu_{bt,j}
              = \log\sum_{j\in S_{bt}} e^{y_{bt,j}} - \sum_{j\in S_{bt}} \mu_{bt,j}\,y_{bt,j},
        \qquad y = z/T.

    verl's ``entropy_from_logits`` (``verl/utils/torch_functional.py``, 0.9.1) computes the second
    form on logits already divided by the temperature; refimpl sums ``−μ·log μ`` with the
    log-probabilities taken relative to the largest logit, which avoids the cancellation of the
    two large terms of the second form when the logits are large.

    Parameters
    ----------
    logits : array_like, shape (B, T, V)
        Finite logits ``z``.
    temperature, top_k, top_p : as in :func:`token_logprobs`
    mask : array_like, shape (B, T), optional
        0/1 padding mask; the entropy is 0 at padding.

    Returns
    -------
    ndarray of float64, shape (B, T)
        ``H`` in nats, in ``[0, log |S|]``; 0 at padding.

    Raises
    ------
    TypeError, ValueError
        As :func:`token_logprobs` (no ``tokens`` here).

    Notes
    -----
    The two forms above are equal (claim LP6). With truncation this is the entropy of the
    distribution the sampler draws from, not of the trainer's full softmax.

    Examples
    --------
    >>> import numpy as np
    >>> from refimpl.losses.logprobs import token_entropy
    >>> z = np.zeros((1, 1, 4))
    >>> float(token_entropy(z)[0, 0]) == float(np.log(4.0))
    True
    >>> token_entropy(np.log([[[2.0, 1.0, 1.0]]])).round(6)   # 1.5 log 2
    array([[1.039721]])
    """
    z = _as_logits(logits)
    shape = (z.shape[0], z.shape[1])
    m = token_mask(mask, shape, like="logits[..., 0]")
    t = _as_temperature(temperature)
    k = _as_top_k(top_k)
    p = _as_top_p(top_p)
    _check_top_k(k, z.shape[-1])
    y = _scaled(z, t, m)
    keep = _support(y, k, p)
    shift, log_s = _log_normaliser(y, keep)
    logp = np.where(keep, (y - shift) - log_s, 0.0)
    h = -np.sum(np.where(keep, np.exp(logp) * logp, 0.0), axis=-1)
    return np.asarray(np.where(m > 0, np.maximum(h, 0.0), 0.0), dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# sampler / trainer mismatch
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogprobSemantics:
    r"""How one side (sampler or trainer) turns logits into a token's log-probability.

    Attributes
    ----------
    temperature : float
        ``T > 0``.
    top_k : int or None
        ``k >= 1`` (checked against ``V`` when used), or None: no top-k.
    top_p : float or None
        ``0 < p <= 1``, or None: no top-p.
    temperature_on : {"logits", "logprobs"}
        ``"logits"`` (correct): :func:`token_logprobs`, i.e. ``log_softmax(z/T)`` with the
        truncation. ``"logprobs"`` models the bug of dividing the log-probabilities:
        ``log μ_1(x)/T`` with ``μ_1`` the distribution at temperature 1 (truncated and renormalised
        at temperature 1 when top-k/top-p are set). That is **not a normalised distribution**:
        :math:`\sum_x \mu_1(x)^{1/T} = e^{\Delta}` with
        :math:`\Delta = \mathrm{lse}(z/T) - \mathrm{lse}(z)/T`, which is 0 only at ``T = 1``
        (claims LP3, LP4).

    Examples
    --------
    >>> from refimpl.losses.logprobs import LogprobSemantics
    >>> LogprobSemantics(temperature=0.7, top_p=0.95)
    LogprobSemantics(temperature=0.7, top_k=None, top_p=0.95, temperature_on='logits')
    """

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    temperature_on: TemperatureOn = "logits"

    def __post_init__(self) -> None:
        object.__setattr__(self, "temperature", _as_temperature(self.temperature))
        object.__setattr__(self, "top_k", _as_top_k(self.top_k))
        object.__setattr__(self, "top_p", _as_top_p(self.top_p))
        as_choice(self.temperature_on, name="temperature_on", choices=_TEMPERATURE_ON)


class LogprobMismatch(NamedTuple):
    """The per-token log-ratio between trainer and sampler semantics, and its summaries.

    Attributes
    ----------
    log_ratio : ndarray of float64, shape (B, T)
        ``log π_trainer − log π_sampler``: 0 at padding; ``+inf`` where only the sampler excludes
        the token, ``−inf`` where only the trainer does, NaN where both do (0/0: undefined).
    logp_trainer, logp_sampler : ndarray of float64, shape (B, T)
        Each side's log-probability (``−inf`` outside its support, 0 at padding).
    max_abs_log_ratio : float
        The largest ``|log_ratio|`` over the real tokens where it is defined (``inf`` if a token is
        in one support only; 0 if no token is in both).
    fraction_ratio_off : float
        The fraction of real tokens whose ratio ``exp(log_ratio)`` departs from 1 by more than
        ``tolerance`` (undefined ratios count as departing).
    fraction_outside_trainer, fraction_outside_sampler : float
        The fraction of real tokens outside the trainer's, resp. the sampler's, kept support. A
        token outside the sampler's support cannot have been drawn by it: a nonzero
        ``fraction_outside_sampler`` says the stated sampler semantics are not the ones used.
    tolerance : float
        The tolerance the fraction was counted with.
    """

    log_ratio: Array
    logp_trainer: Array
    logp_sampler: Array
    max_abs_log_ratio: float
    fraction_ratio_off: float
    fraction_outside_trainer: float
    fraction_outside_sampler: float
    tolerance: float


def _as_semantics(value: Any, *, name: str) -> LogprobSemantics:
    if isinstance(value, LogprobSemantics):
        return value
    if isinstance(value, Mapping):
        fields = ("temperature", "top_k", "top_p", "temperature_on")
        unknown = [key for key in value if key not in fields]
        if unknown:
            raise invalid(
                name,
                "only have the keys temperature, top_k, top_p, temperature_on",
                dict(value),
                f"Remove {unknown[0]!r}.",
            )
        return LogprobSemantics(**value)
    raise wrong_type(
        name,
        "a LogprobSemantics (or a mapping of its fields)",
        value,
        f"Pass {name}=LogprobSemantics(temperature=..., top_k=..., top_p=...).",
    )


def _side_logprobs(
    z: Array, ids: NDArray[Any], sem: LogprobSemantics, mask: Array, *, name: str
) -> Array:
    k = sem.top_k
    _check_top_k(k, z.shape[-1], name=f"{name}.top_k")
    t_name = f"{name}.temperature"
    if sem.temperature_on == "logits":
        value, _ = _logprobs_of(z, ids, sem.temperature, k, sem.top_p, mask, name=t_name)
        return value
    value, kept = _logprobs_of(z, ids, 1.0, k, sem.top_p, mask)
    with np.errstate(over="ignore"):  # an overflow is reported below, with the fix
        divided = value / sem.temperature
    if not np.all(np.isfinite(divided[kept & (mask > 0)])):
        raise invalid(
            t_name,
            "be large enough that log-probability/temperature stays finite in float64",
            sem.temperature,
            f"Pass a larger {t_name}.",
        )
    return np.asarray(divided, dtype=np.float64)


def _as_tolerance(value: Any) -> float:
    return as_real(value, name="tolerance", low=0.0, meaning="allowed |ratio − 1|")


def logprob_mismatch(
    logits: ArrayLike,
    tokens: ArrayLike,
    *,
    sampler: LogprobSemantics | Mapping[str, Any],
    trainer: LogprobSemantics | Mapping[str, Any],
    mask: ArrayLike | None = None,
    tolerance: float = 1e-6,
) -> LogprobMismatch:
    r"""The log-ratio ``log π_trainer − log π_sampler`` when both sides see the same logits.

    .. math::

        r_{bt} = \log\pi_{\text{trainer}}(x_{bt}) - \log\pi_{\text{sampler}}(x_{bt}),
        \qquad
        \text{off} = \frac{1}{N}\sum_{bt} m_{bt}\,\mathbb{1}\bigl[|e^{r_{bt}} - 1| > \varepsilon\bigr],

    with each side's log-probability from its :class:`LogprobSemantics` and ``N`` the number of
    real tokens. On identical weights a correct pipeline has ``r = 0`` everywhere. Two mismatches
    have closed forms:

    - trainer without truncation, sampler with top-k/top-p, same temperature: on a kept token
      ``r = log P(S) <= 0``, the log of the kept mass (claim LP2);
    - trainer dividing log-probabilities by ``T`` (``temperature_on="logprobs"``), sampler
      correct, no truncation: ``r = lse(z/T) − lse(z)/T = log Σ_x p_x^{1/T}`` (``p = softmax(z)``)
      for every token of a position, the same value whatever the token: negative for ``T < 1``,
      positive for ``T > 1``, 0 only at ``T = 1`` (claims LP3, LP4).

    The ratio test is done in log space (``r > log1p(ε)`` or ``r < log1p(−ε)``), so a huge
    log-ratio never overflows.

    Parameters
    ----------
    logits : array_like, shape (B, T, V)
        Finite logits, the same for both sides.
    tokens : array_like of int, shape (B, T)
        The sampled token ids.
    sampler, trainer : LogprobSemantics or mapping
        Each side's semantics (a mapping is passed to :class:`LogprobSemantics`).
    mask : array_like, shape (B, T), optional
        0/1 padding mask; must mark at least one real token.
    tolerance : float
        ``ε >= 0``, the allowed ``|ratio − 1|`` (default ``1e-6``: far above float64 rounding of
        two correct computations, far below any semantic mismatch).

    Returns
    -------
    LogprobMismatch

    Raises
    ------
    TypeError, ValueError
        As :func:`token_logprobs` (with the parameter named ``sampler.top_k`` etc.), if a side is
        not a :class:`LogprobSemantics` or mapping of its fields, if ``tolerance < 0``, or if the
        mask has no real token.

    Examples
    --------
    >>> import numpy as np
    >>> from refimpl.losses.logprobs import LogprobSemantics, logprob_mismatch
    >>> z = np.log([[[4.0, 2.0, 1.0, 1.0], [4.0, 2.0, 1.0, 1.0]]])
    >>> out = logprob_mismatch(z, [[0, 1]], sampler=LogprobSemantics(top_k=2),
    ...                        trainer=LogprobSemantics())
    >>> np.exp(out.log_ratio).round(6)      # the kept mass 3/4 on both tokens
    array([[0.75, 0.75]])
    >>> out.fraction_ratio_off, out.fraction_outside_sampler
    (1.0, 0.0)
    """
    z = _as_logits(logits)
    shape = (z.shape[0], z.shape[1])
    m = token_mask(mask, shape, like="tokens")
    ids = _as_tokens(tokens, shape, m, z.shape[-1])
    s_sem = _as_semantics(sampler, name="sampler")
    t_sem = _as_semantics(trainer, name="trainer")
    eps = _as_tolerance(tolerance)
    real = m > 0
    if not np.any(real):
        raise invalid("mask", "mark at least one real token", m, "Pass a mask with some 1s.")
    lp_s = _side_logprobs(z, ids, s_sem, m, name="sampler")
    lp_t = _side_logprobs(z, ids, t_sem, m, name="trainer")
    out_s, out_t = np.isneginf(lp_s), np.isneginf(lp_t)
    with np.errstate(invalid="ignore"):
        r = np.where(out_s & out_t, np.nan, lp_t - lp_s)
    r = np.where(real, r, 0.0)
    upper = np.log1p(eps)
    lower = np.log1p(-eps) if eps < 1.0 else -np.inf
    with np.errstate(invalid="ignore"):
        off = np.isnan(r) | (r > upper) | (r < lower)
    n = float(np.sum(real))
    defined = real & ~np.isnan(r)
    largest = float(np.max(np.abs(r[defined]))) if np.any(defined) else 0.0
    return LogprobMismatch(
        log_ratio=np.asarray(r, dtype=np.float64),
        logp_trainer=np.asarray(np.where(real, lp_t, 0.0), dtype=np.float64),
        logp_sampler=np.asarray(np.where(real, lp_s, 0.0), dtype=np.float64),
        max_abs_log_ratio=largest,
        fraction_ratio_off=float(np.sum(off & real)) / n,
        fraction_outside_trainer=float(np.sum(out_t & real)) / n,
        fraction_outside_sampler=float(np.sum(out_s & real)) / n,
        tolerance=eps,
    )
