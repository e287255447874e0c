"""What every loss family shares: the result type and the validation of (B, T) token arrays.

Every per-token loss in :mod:`refimpl.losses` is a function of the current log-probabilities
``logp`` (the trainer's ``log π_θ``, shape ``(B, T)``) and returns :class:`LossTerms`: the per-token
loss matrix and its gradient. The gradient is a vector–Jacobian product: with a *cotangent* matrix
``c`` (the weight the aggregation gives each token, :func:`refimpl.losses.aggregation_weights`),
``grad = ∂(Σ_bt c_bt · loss_bt)/∂logp``. For a token-level loss this is ``c · ∂loss_bt/∂logp_bt``;
for a sequence-level loss (GSPO, GMPO) a token's loss depends on every token of its sequence and the
product carries that coupling. The default cotangent is the padding mask, so ``grad`` is then the
gradient of the plain sum of the per-token losses.

Conventions shared by all families (the docs' conventions page states them for readers):

- the loss is the quantity *minimised* (a policy-gradient surrogate carries its minus sign);
- padding (``mask == 0``) has loss 0 and gradient 0, whatever values it holds;
- ``advantages`` may be per sequence ``(B,)`` or per token ``(B, T)``;
- stop-gradients are part of the definition: a factor written ``sg[·]`` in a docstring contributes
  its value and no gradient.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import (
    as_float_array,
    invalid,
    require_entries,
    require_same_shape,
)

__all__ = ["LossTerms"]

Array = NDArray[np.float64]


class LossTerms(NamedTuple):
    """A per-token loss matrix and its gradient with respect to the current log-probabilities.

    Attributes
    ----------
    loss : ndarray of float64, shape (B, T)
        The per-token loss (the quantity minimised); 0 at padding.
    grad : ndarray of float64, shape (B, T)
        ``∂(Σ_bt c_bt · loss_bt)/∂logp_bt'`` for the cotangent ``c`` the call was given (the
        padding mask by default); 0 at padding.
    """

    loss: Array
    grad: Array


def token_array(value: ArrayLike, *, name: str) -> Array:
    """A finite float64 array of shape (B, T) with T >= 1 and B >= 1."""
    arr = as_float_array(value, name=name, ndim=2)
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise invalid(
            name,
            "have at least one sequence and one token",
            arr,
            f"Pass a (B, T) array with B >= 1 and T >= 1 (got shape {arr.shape}).",
        )
    return arr


def like_tokens(value: ArrayLike, shape: tuple[int, int], *, name: str, like: str) -> Array:
    """A second (B, T) array, finite, of the same shape as ``like``."""
    arr = as_float_array(value, name=name, ndim=2)
    require_same_shape(arr, np.empty(shape), names=(name, like))
    return arr


def token_mask(mask: ArrayLike | None, shape: tuple[int, int], *, like: str = "logp") -> Array:
    """The 0/1 padding mask (1 = a real token); all ones when ``mask`` is None."""
    if mask is None:
        return np.ones(shape, dtype=np.float64)
    m = as_float_array(mask, name="mask", ndim=2)
    require_same_shape(m, np.empty(shape), names=("mask", like))
    require_entries(
        m,
        (m != 0.0) & (m != 1.0),
        name="mask",
        rule="hold only 0 and 1 (1 = a real token, 0 = padding)",
        fix="; pass a boolean or 0/1 padding mask.",
    )
    return m


def token_advantages(advantages: ArrayLike, shape: tuple[int, int]) -> Array:
    """Advantages per sequence ``(B,)`` broadcast to ``(B, T)``, or per token ``(B, T)``."""
    a = as_float_array(advantages, name="advantages", ndim=(1, 2))
    if a.ndim == 1:
        if a.shape[0] != shape[0]:
            raise invalid(
                "advantages",
                f"have one entry per sequence (B = {shape[0]}) or one per token {shape}",
                a,
                "Pass advantages of shape (B,) or (B, T).",
            )
        return np.asarray(np.broadcast_to(a[:, None], shape), dtype=np.float64)
    require_same_shape(a, np.empty(shape), names=("advantages", "logp"))
    return a


class PolicyInputs(NamedTuple):
    """The validated arrays every policy loss starts from, all (B, T)."""

    logp: Array
    logp_old: Array
    advantages: Array
    mask: Array
    cotangent: Array


def policy_inputs(
    logp: ArrayLike,
    logp_old: ArrayLike,
    advantages: ArrayLike,
    mask: ArrayLike | None,
    cotangent: ArrayLike | None,
) -> PolicyInputs:
    """Validate a policy loss's arrays in the fixed order: ``logp``, ``logp_old``, ``advantages``
    (per sequence or per token, broadcast), ``mask``, ``cotangent``."""
    lp = token_array(logp, name="logp")
    shape = (lp.shape[0], lp.shape[1])
    lq = like_tokens(logp_old, shape, name="logp_old", like="logp")
    a = token_advantages(advantages, shape)
    m = token_mask(mask, shape)
    return PolicyInputs(lp, lq, a, m, token_cotangent(cotangent, m))


def token_cotangent(cotangent: ArrayLike | None, mask: Array) -> Array:
    """The cotangent of the gradient, zeroed at padding; the mask itself when None."""
    if cotangent is None:
        return mask
    c = as_float_array(cotangent, name="cotangent", ndim=2)
    require_same_shape(c, mask, names=("cotangent", "mask"))
    return np.asarray(c * mask, dtype=np.float64)


def masked(values: Array, mask: Array) -> Array:
    """``values`` with padding set to exactly 0 (also where ``values`` is inf or NaN there)."""
    return np.asarray(np.where(mask > 0, values, 0.0), dtype=np.float64)


def masked_product(a: Array, b: Array, mask: Array) -> tuple[Array, tuple[int, int] | None]:
    """``a·b`` at real tokens (exactly 0 where ``a == 0``, whatever ``b`` holds; 0 at padding),
    and the first real token ``(b, t)`` where the product is not finite (``None`` if none is),
    which the caller refuses in its own words."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = masked(np.asarray(np.where(a == 0.0, 0.0, a * b), dtype=np.float64), mask)
    bad = np.argwhere(~np.isfinite(out))  # padding is 0 already
    return out, (int(bad[0][0]), int(bad[0][1])) if bad.size else None


def as_choice(value: Any, *, name: str, choices: tuple[str, ...]) -> str:
    """One of ``choices`` (strings), or the standard refusal listing them."""
    if not isinstance(value, str) or value not in choices:
        shown = ", ".join(repr(c) for c in choices)
        raise invalid(name, f"be one of {shown}", value, f"Pass {name}= one of {shown}.")
    return value
