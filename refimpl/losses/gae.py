r"""Generalised advantage estimation (GAE) over the valid tokens of each sequence.

A PPO trainer with a critic turns per-token rewards :math:`r_t` (usually the outcome reward on the
last token plus a per-token KL penalty) and the critic's values :math:`V_t` into per-token
advantages by the backward recursion of Schulman et al. (2016):

.. math::

    \delta_t = r_t + \gamma V_{t+1} - V_t, \qquad
    A_t = \delta_t + \gamma\lambda A_{t+1}, \qquad R_t = A_t + V_t,

which equals the closed form :math:`A_t = \sum_{l \ge 0} (\gamma\lambda)^l \delta_{t+l}`
(claim GAE1). ``λ = 1`` gives the discounted return minus the value (GAE2), ``λ = 0`` the
one-step TD error (GAE3).

What "next" means on a padded batch is the point where frameworks differ; this module fixes it:

- the recursion runs over the **valid tokens** of a row (``mask == 1``), in order; padded
  positions hold arbitrary finite values that are never read, and get advantage and return 0;
- the value after the **last** valid token is ``bootstrap`` (default 0: the sequence ended, as at
  an EOS); a truncated sequence passes the critic's value of the state after it;
- a **gap** (mask 0 between two valid tokens, e.g. an observation in a multi-turn rollout) is,
  with ``gaps="skip"`` (default), not a step: the token before it bootstraps from the value of the
  next valid token, discounted once, and its reward is never read (verl 0.9.1
  ``compute_gae_advantage_return``, AReaL 1.0.4 ``PPOActor.compute_advantages``). With
  ``gaps="steps"`` every gap position is a step with reward 0 and value 0, as OpenRLHF 0.11.2
  ``get_advantages_and_returns`` computes after multiplying rewards and values by the mask.

**Exact mode.** Rewards and values given as nested sequences of :class:`fractions.Fraction` and
``int`` (at least one Fraction among them, ``gamma`` and ``lam``), with rational ``gamma``,
``lam`` and ``bootstrap``, give :class:`ExactGAE` with ``Fraction`` entries: every operation of
the recursion is rational.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any, Literal, NamedTuple, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import as_float_array, as_real, mismatch
from refimpl.losses._common import as_choice, like_tokens, token_array, token_mask

__all__ = ["GAE", "ExactGAE", "gae_advantages"]

Array = NDArray[np.float64]
Gaps = Literal["skip", "steps"]
_GAPS = ("skip", "steps")


class GAE(NamedTuple):
    """Per-token GAE advantages and returns (float64, shape (B, T), 0 at padding).

    Attributes
    ----------
    advantages : ndarray of float64, shape (B, T)
        :math:`A_t`, not whitened.
    returns : ndarray of float64, shape (B, T)
        :math:`R_t = A_t + V_t` (the critic's regression target).
    """

    advantages: Array
    returns: Array


class ExactGAE(NamedTuple):
    """:class:`GAE` in exact mode: nested lists (B rows of T) of :class:`fractions.Fraction`."""

    advantages: list[list[Fraction]]
    returns: list[list[Fraction]]


# ---------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------


def _rational(value: Any) -> bool:
    return isinstance(value, (Fraction, int)) and not isinstance(value, bool)


def _exact_rows(value: Any) -> list[list[Fraction]] | None:
    """The entries of a nested (B, T) sequence of Fraction/int, or None (not exact)."""
    if isinstance(value, (np.ndarray, str, bytes)) or not isinstance(value, Sequence):
        return None
    rows = list(value)
    if not rows or not all(
        isinstance(row, Sequence) and not isinstance(row, (str, bytes)) for row in rows
    ):
        return None
    if not all(_rational(x) for row in rows for x in row):
        return None
    return [[Fraction(x) for x in row] for row in rows]


def _as_discount(value: Any, *, name: str, meaning: str) -> float:
    return as_real(value, name=name, low=0.0, high=1.0, meaning=meaning)


def _as_bootstrap(bootstrap: ArrayLike | None, batch: int) -> Array:
    if bootstrap is None:
        return np.zeros(batch, dtype=np.float64)
    b = as_float_array(bootstrap, name="bootstrap", ndim=1)
    if b.shape != (batch,):
        raise mismatch(
            ("bootstrap", "rewards"),
            "have one entry per sequence",
            f"bootstrap.shape={b.shape} and rewards.shape[0]={batch}",
            "Pass the value of the state after each row's last valid token, shape (B,) "
            "(0 where the sequence ended).",
        )
    return b


def _exact_bootstrap(bootstrap: Any, batch: int) -> list[Fraction] | None:
    if bootstrap is None:
        return [Fraction(0)] * batch
    if isinstance(bootstrap, (np.ndarray, str, bytes)) or not isinstance(bootstrap, Sequence):
        return None
    items = list(bootstrap)
    if len(items) != batch or not all(_rational(x) for x in items):
        return None
    return [Fraction(x) for x in items]


# ---------------------------------------------------------------------------------------------
# the recursion (one implementation, for floats and for Fractions)
# ---------------------------------------------------------------------------------------------


def _row(
    r: Sequence[Any],
    v: Sequence[Any],
    m: Sequence[bool],
    gamma: Any,
    lam: Any,
    after: Any,
    gaps: str,
    zero: Any,
) -> list[Any]:
    """A_t of one row by the backward recursion (``zero`` at padding and gaps)."""
    out = [zero] * len(r)
    valid = [t for t, keep in enumerate(m) if keep]
    if not valid:
        return out
    next_value, next_adv = after, zero
    for t in range(valid[-1], -1, -1):
        if m[t]:
            reward, value = r[t], v[t]
        elif gaps == "steps":
            reward, value = zero, zero
        else:  # a gap is not a step
            continue
        adv = (reward + gamma * next_value - value) + gamma * lam * next_adv
        if m[t]:
            out[t] = adv
        next_value, next_adv = value, adv
    return out


# ---------------------------------------------------------------------------------------------
# public function
# ---------------------------------------------------------------------------------------------


@overload
def gae_advantages(
    rewards: Sequence[Sequence[Fraction | int]],
    values: Sequence[Sequence[Fraction | int]],
    *,
    gamma: Fraction | int,
    lam: Fraction | int,
    mask: ArrayLike | None = ...,
    bootstrap: Sequence[Fraction | int] | None = ...,
    gaps: Gaps = ...,
) -> ExactGAE: ...
@overload
def gae_advantages(
    rewards: ArrayLike,
    values: ArrayLike,
    *,
    gamma: float,
    lam: float,
    mask: ArrayLike | None = ...,
    bootstrap: ArrayLike | None = ...,
    gaps: Gaps = ...,
) -> GAE: ...
def gae_advantages(
    rewards: Any,
    values: Any,
    *,
    gamma: Any,
    lam: Any,
    mask: ArrayLike | None = None,
    bootstrap: Any = None,
    gaps: Gaps = "skip",
) -> GAE | ExactGAE:
    r"""GAE advantages and returns by the backward recursion over each row's valid tokens.

    .. math::

        \delta_t = r_t + \gamma V_{t^+} - V_t, \qquad
        A_t = \delta_t + \gamma\lambda A_{t^+}, \qquad R_t = A_t + V_t,

    where :math:`t^+` is the next valid token of the row (``gaps="skip"``) or the next position
    (``gaps="steps"``, a gap position having :math:`r = V = 0`), :math:`V` after the last valid
    token is ``bootstrap`` (default 0) and :math:`A` there is 0. Equivalently
    :math:`A_t = \sum_{l\ge0}(\gamma\lambda)^l\delta_{t+l}` over the following steps (claim GAE1).

    .. warning::

        Frameworks read padding differently. verl 0.9.1 ``compute_gae_advantage_return`` and AReaL
        1.0.4 carry the recursion across masked positions (``gaps="skip"``); OpenRLHF 0.11.2
        ``get_advantages_and_returns`` zeroes rewards and values at masked positions and steps
        through them (``gaps="steps"``); SkyRL 0.3.0 ``compute_gae_advantage_return`` applies no
        mask at all, so the value the critic gives a padded position is the bootstrap of the last
        valid token (it agrees with this function only when padded rewards and values are 0).
        verl, SkyRL and OpenRLHF (later, in the experience maker) whiten the advantages; this
        function does not (see :func:`refimpl.losses.reinforce_pp_advantages` for the
        token-weighted whitening, and the docs page for each framework's variance and ε).
        OpenRLHF's ``reinforce`` estimator at ``advantage.gamma < 1`` is this function at
        ``values = 0``, ``lam = 1``, ``gaps="steps"`` (the discounted return), then whitened.

    Parameters
    ----------
    rewards : array_like, shape (B, T)
        Per-token rewards :math:`r_t`; finite (any finite value at padding).
    values : array_like, shape (B, T)
        The critic's values :math:`V_t` of the state before token :math:`t`; finite.
    gamma : float
        Discount :math:`\gamma \in [0, 1]`.
    lam : float
        GAE :math:`\lambda \in [0, 1]`.
    mask : array_like, shape (B, T), optional
        0/1 mask (1 = a valid token); default all valid.
    bootstrap : array_like, shape (B,), optional
        The value after each row's last valid token; default 0 (the sequence ended).
    gaps : {"skip", "steps"}
        What a masked position between two valid tokens is (see above).

    Returns
    -------
    GAE
        ``(advantages, returns)``, float64 (B, T), 0 at padding; :class:`ExactGAE` in exact mode.

    Raises
    ------
    TypeError
        If an array is not numeric, or ``gamma``/``lam`` is not a real number.
    ValueError
        If ``rewards`` is not a finite (B, T) array with B, T >= 1, ``values`` or ``mask`` has
        another shape, ``mask`` is not 0/1, ``gamma`` or ``lam`` is outside [0, 1],
        ``bootstrap`` is not a finite (B,) array, or ``gaps`` is unknown.

    Notes
    -----
    Claims GAE1–GAE3 (the closed form, λ = 1, λ = 0) and GAE4 (a gap under ``"skip"`` changes
    nothing but the rewards it would have read) back the recursion; GAE5 checks this function
    against the closed form in exact arithmetic. A row without valid tokens gets zeros. Accuracy:
    each step adds a few roundings, so :math:`A_t` is accurate to about
    :math:`(n_t + 4)\,u\sum_l(\gamma\lambda)^l(|r| + \gamma|V'| + |V|)_{t+l}`, :math:`n_t` the
    number of steps from :math:`t` to the end of the row.

    References
    ----------
    Schulman, Moritz, Levine, Jordan, Abbeel 2016, "High-Dimensional Continuous Control Using
    Generalized Advantage Estimation" (arXiv 1506.02438).

    Examples
    --------
    >>> from fractions import Fraction
    >>> from refimpl.losses.gae import gae_advantages
    >>> out = gae_advantages([[0.0, 0.0, 1.0]], [[0.5, 0.5, 0.5]], gamma=1.0, lam=1.0)
    >>> out.advantages        # λ = γ = 1: the return (1) minus the value
    array([[0.5, 0.5, 0.5]])
    >>> out.returns
    array([[1., 1., 1.]])
    >>> gae_advantages([[0, 0, 1]], [[Fraction(1, 2)] * 3], gamma=1, lam=Fraction(1, 2)).advantages
    [[Fraction(1, 8), Fraction(1, 4), Fraction(1, 2)]]
    >>> gae_advantages([[1.0, 9.0, 1.0]], [[0.0, 9.0, 0.0]], gamma=1.0, lam=1.0,
    ...                mask=[[1, 0, 1]]).advantages   # the gap is skipped
    array([[2., 0., 1.]])
    """
    r = token_array(rewards, name="rewards")
    shape = (r.shape[0], r.shape[1])
    v = like_tokens(values, shape, name="values", like="rewards")
    m = token_mask(mask, shape, like="rewards")
    g = _as_discount(gamma, name="gamma", meaning="the discount of the next value")
    lm = _as_discount(lam, name="lam", meaning="the GAE trace decay")
    boot = _as_bootstrap(bootstrap, shape[0])
    rule = as_choice(gaps, name="gaps", choices=_GAPS)
    valid = m > 0
    exact_r, exact_v = _exact_rows(rewards), _exact_rows(values)
    exact_b = _exact_bootstrap(bootstrap, shape[0])
    if (
        exact_r is not None
        and exact_v is not None
        and exact_b is not None
        and _rational(gamma)
        and _rational(lam)
        and any(isinstance(x, Fraction) for x in (gamma, lam, *_flat(rewards), *_flat(values)))
    ):
        zero = Fraction(0)
        adv = [
            _row(
                exact_r[b],
                exact_v[b],
                list(valid[b]),
                Fraction(gamma),
                Fraction(lam),
                exact_b[b],
                rule,
                zero,
            )
            for b in range(shape[0])
        ]
        ret = [
            [a + val if keep else zero for a, val, keep in zip(ra, rv, rm, strict=True)]
            for ra, rv, rm in zip(adv, exact_v, valid, strict=True)
        ]
        return ExactGAE(adv, ret)
    adv_f = np.asarray(
        [
            _row(list(r[b]), list(v[b]), list(valid[b]), g, lm, float(boot[b]), rule, 0.0)
            for b in range(shape[0])
        ],
        dtype=np.float64,
    )
    returns = np.where(valid, adv_f + v, 0.0)
    return GAE(np.asarray(adv_f, dtype=np.float64), np.asarray(returns, dtype=np.float64))


def _flat(value: Any) -> list[Any]:
    return [x for row in value for x in row]
