"""AReaL 1.0.4: the sequence-level rejection combinations of ``ppo_actor_loss_fn`` beyond
:mod:`refimpl.frameworks._areal_losses_decoupled` (read there, from
``areal/utils/functional/functional.py:apply_rejection_sampling``).

- The KL metrics ``"kl_k1"`` and ``"kl_k2"`` by row on the padded layout: the estimate
  (``KLEstimator._compute_approx_kl``, ``apply_clamp=False``) is a step of its own, the row's
  arithmetic sum, mean (over ``max(count, 1)``) or maximum (0 for a row without a valid token) of
  it decides, and k1 = d can be negative: a row's mean or sum below ``lower`` is dropped, which k2
  and k3 (never negative) cannot show.
- Every other combination the packed 1-D branch (``cu_seqlens``) accepts: ``scatter_add_`` for
  the sum and the mean, ``scatter_reduce_(reduce="amax")`` for the maximum, per sequence index
  ``arange(B).repeat_interleave(lengths)``, then the row's decision gathered back to its tokens;
  with the ratio metric, the clamp of the rows out of bounds.

The token level runs the same lines on both layouts (``_check_bounds`` and the clamp are
elementwise, the loss a sum over the mask divided by its count), so it has no packed entry. Each
candidate is one :func:`~refimpl.frameworks._areal_losses_decoupled.rejection_loss` call.
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._areal_losses_decoupled import (
    OVERFLOW_PACKED,
    REJECTED_NAN_PACKED,
    decoupled_adapter,
)
from refimpl.frameworks._registry import Adapter


def areal_decoupled_ppo_sequence_kl_k1_mean(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``metric="kl_k1"``, ``agg="mean"``, mask: the row's arithmetic mean of d = log(π_prox/μ) decides."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    config: dict[str, Any] = {"level": "sequence", "metric": "kl_k1", "agg": "mean"}
    return rejection_loss(ppo_actor_loss_fn, arrays, params, **config)


def areal_decoupled_ppo_sequence_kl_k1_sum(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``metric="kl_k1"``, ``agg="sum"``, mask: the row's arithmetic sum of d = log(π_prox/μ) decides."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    config: dict[str, Any] = {"level": "sequence", "metric": "kl_k1", "agg": "sum"}
    return rejection_loss(ppo_actor_loss_fn, arrays, params, **config)


def areal_decoupled_ppo_sequence_kl_k1_max(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``metric="kl_k1"``, ``agg="max"``, mask: the row's max of d = log(π_prox/μ) decides."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    config: dict[str, Any] = {"level": "sequence", "metric": "kl_k1", "agg": "max"}
    return rejection_loss(ppo_actor_loss_fn, arrays, params, **config)


def areal_decoupled_ppo_sequence_kl_k2_mean(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``metric="kl_k2"``, ``agg="mean"``, mask: the row's arithmetic mean of d²/2 decides."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    config: dict[str, Any] = {"level": "sequence", "metric": "kl_k2", "agg": "mean"}
    return rejection_loss(ppo_actor_loss_fn, arrays, params, **config)


def areal_decoupled_ppo_sequence_kl_k2_sum(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``metric="kl_k2"``, ``agg="sum"``, mask: the row's arithmetic sum of d²/2 decides."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    config: dict[str, Any] = {"level": "sequence", "metric": "kl_k2", "agg": "sum"}
    return rejection_loss(ppo_actor_loss_fn, arrays, params, **config)


def areal_decoupled_ppo_sequence_kl_k2_max(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``metric="kl_k2"``, ``agg="max"``, mask: the row's max of d²/2 decides."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    config: dict[str, Any] = {"level": "sequence", "metric": "kl_k2", "agg": "max"}
    return rejection_loss(ppo_actor_loss_fn, arrays, params, **config)


def areal_decoupled_ppo_sequence_sum_packed(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``agg="sum"``, mask, packed: the rows whose product of ratios leaves the bounds dropped."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    config: dict[str, Any] = {"level": "sequence", "agg": "sum", "packed": True}
    return rejection_loss(ppo_actor_loss_fn, arrays, params, **config)


def areal_decoupled_ppo_sequence_clamp_sum_packed(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``agg="sum"``, clamp, packed: the rows whose product of ratios leaves the bounds clamped."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    config: dict[str, Any] = {"level": "sequence", "action": "clamp", "agg": "sum", "packed": True}
    return rejection_loss(ppo_actor_loss_fn, arrays, params, **config)


def areal_decoupled_ppo_sequence_clamp_max_packed(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``agg="max"``, clamp, packed: the rows whose largest ratio leaves the bounds clamped."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    config: dict[str, Any] = {"level": "sequence", "action": "clamp", "agg": "max", "packed": True}
    return rejection_loss(ppo_actor_loss_fn, arrays, params, **config)


def areal_decoupled_ppo_sequence_kl_k1_mean_packed(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``metric="kl_k1"``, ``agg="mean"``, mask, packed: the row's arithmetic mean of d = log(π_prox/μ) decides."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    config: dict[str, Any] = {"level": "sequence", "metric": "kl_k1", "agg": "mean", "packed": True}
    return rejection_loss(ppo_actor_loss_fn, arrays, params, **config)


def areal_decoupled_ppo_sequence_kl_k1_sum_packed(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``metric="kl_k1"``, ``agg="sum"``, mask, packed: the row's arithmetic sum of d = log(π_prox/μ) decides."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    config: dict[str, Any] = {"level": "sequence", "metric": "kl_k1", "agg": "sum", "packed": True}
    return rejection_loss(ppo_actor_loss_fn, arrays, params, **config)


def areal_decoupled_ppo_sequence_kl_k1_max_packed(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``metric="kl_k1"``, ``agg="max"``, mask, packed: the row's max of d = log(π_prox/μ) decides."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    config: dict[str, Any] = {"level": "sequence", "metric": "kl_k1", "agg": "max", "packed": True}
    return rejection_loss(ppo_actor_loss_fn, arrays, params, **config)


def areal_decoupled_ppo_sequence_kl_k2_mean_packed(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``metric="kl_k2"``, ``agg="mean"``, mask, packed: the row's arithmetic mean of d²/2 decides."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    config: dict[str, Any] = {"level": "sequence", "metric": "kl_k2", "agg": "mean", "packed": True}
    return rejection_loss(ppo_actor_loss_fn, arrays, params, **config)


def areal_decoupled_ppo_sequence_kl_k2_sum_packed(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``metric="kl_k2"``, ``agg="sum"``, mask, packed: the row's arithmetic sum of d²/2 decides."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    config: dict[str, Any] = {"level": "sequence", "metric": "kl_k2", "agg": "sum", "packed": True}
    return rejection_loss(ppo_actor_loss_fn, arrays, params, **config)


def areal_decoupled_ppo_sequence_kl_k2_max_packed(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``metric="kl_k2"``, ``agg="max"``, mask, packed: the row's max of d²/2 decides."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    config: dict[str, Any] = {"level": "sequence", "metric": "kl_k2", "agg": "max", "packed": True}
    return rejection_loss(ppo_actor_loss_fn, arrays, params, **config)


def areal_decoupled_ppo_sequence_kl_k3_mean_packed(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``metric="kl_k3"``, ``agg="mean"``, mask, packed: the row's arithmetic mean of e^-d − 1 + d decides."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    config: dict[str, Any] = {"level": "sequence", "metric": "kl_k3", "agg": "mean", "packed": True}
    return rejection_loss(ppo_actor_loss_fn, arrays, params, **config)


def areal_decoupled_ppo_sequence_kl_k3_max_packed(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``metric="kl_k3"``, ``agg="max"``, mask, packed: the row's max of e^-d − 1 + d decides."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    config: dict[str, Any] = {"level": "sequence", "metric": "kl_k3", "agg": "max", "packed": True}
    return rejection_loss(ppo_actor_loss_fn, arrays, params, **config)


_KL = "Decoupled PPO rejected on a KL estimate of log(π_prox/μ), the weight the token's own ratio: "
_ROW = "Decoupled PPO with sequence-level rejection sampling: the row's geometric-mean weight on "
_PACKED = ", on the packed 1-D layout (valid tokens concatenated, cu_seqlens per row)."
_WHAT = {"kl_k1": "k1 = d", "kl_k2": "k2 = d²/2", "kl_k3": "k3 = e^-d − 1 + d"}
_RATIO = {"mean": "geometric mean", "sum": "product of ratios", "max": "largest ratio"}


def _note(action: str, metric: str, agg: str, packed: bool) -> str:
    """The adapter's one-sentence note."""
    where = _PACKED if packed else "."
    if metric == "ratio":
        done = "dropped" if action == "mask" else "clamped"
        return (
            f"{_ROW}every token, the row {done} when its {_RATIO[agg]} leaves [lower, cap]{where}"
        )
    return f"{_KL}rows whose {agg} of {_WHAT[metric]} leaves [lower, cap] dropped{where}"


def _entry(key: str, candidate: Any, action: str, metric: str, agg: str) -> Adapter:
    """The adapter of one combination, its key ending in ``_packed`` on the packed layout."""
    packed = key.endswith("_packed")
    extra: dict[str, Any] = {}
    if packed:
        # k1 = d keeps a token with d = -100 under any cap; the smallest failing input is then a
        # kept token whose ratio overflows (0·inf), not a rejected one as for k2 and k3
        huge = OVERFLOW_PACKED if metric in ("ratio", "kl_k1") else REJECTED_NAN_PACKED
        extra = {
            "settings": {"layout": "packed (cu_seqlens)"},
            "divergences": {"huge_log_ratios_stay_finite": huge},
        }
    return decoupled_adapter(
        key,
        candidate,
        _note(action, metric, agg, packed),
        level="sequence",
        action=action,
        metric=metric,
        agg=agg,
        **extra,
    )


ADAPTERS: tuple[Adapter, ...] = tuple(
    _entry(key, candidate, action, metric, agg)
    for key, candidate, action, metric, agg in (
        ("sequence_kl_k1_mean", areal_decoupled_ppo_sequence_kl_k1_mean, "mask", "kl_k1", "mean"),
        ("sequence_kl_k1_sum", areal_decoupled_ppo_sequence_kl_k1_sum, "mask", "kl_k1", "sum"),
        ("sequence_kl_k1_max", areal_decoupled_ppo_sequence_kl_k1_max, "mask", "kl_k1", "max"),
        ("sequence_kl_k2_mean", areal_decoupled_ppo_sequence_kl_k2_mean, "mask", "kl_k2", "mean"),
        ("sequence_kl_k2_sum", areal_decoupled_ppo_sequence_kl_k2_sum, "mask", "kl_k2", "sum"),
        ("sequence_kl_k2_max", areal_decoupled_ppo_sequence_kl_k2_max, "mask", "kl_k2", "max"),
        ("sequence_sum_packed", areal_decoupled_ppo_sequence_sum_packed, "mask", "ratio", "sum"),
        (
            "sequence_clamp_sum_packed",
            areal_decoupled_ppo_sequence_clamp_sum_packed,
            "clamp",
            "ratio",
            "sum",
        ),
        (
            "sequence_clamp_max_packed",
            areal_decoupled_ppo_sequence_clamp_max_packed,
            "clamp",
            "ratio",
            "max",
        ),
        (
            "sequence_kl_k1_mean_packed",
            areal_decoupled_ppo_sequence_kl_k1_mean_packed,
            "mask",
            "kl_k1",
            "mean",
        ),
        (
            "sequence_kl_k1_sum_packed",
            areal_decoupled_ppo_sequence_kl_k1_sum_packed,
            "mask",
            "kl_k1",
            "sum",
        ),
        (
            "sequence_kl_k1_max_packed",
            areal_decoupled_ppo_sequence_kl_k1_max_packed,
            "mask",
            "kl_k1",
            "max",
        ),
        (
            "sequence_kl_k2_mean_packed",
            areal_decoupled_ppo_sequence_kl_k2_mean_packed,
            "mask",
            "kl_k2",
            "mean",
        ),
        (
            "sequence_kl_k2_sum_packed",
            areal_decoupled_ppo_sequence_kl_k2_sum_packed,
            "mask",
            "kl_k2",
            "sum",
        ),
        (
            "sequence_kl_k2_max_packed",
            areal_decoupled_ppo_sequence_kl_k2_max_packed,
            "mask",
            "kl_k2",
            "max",
        ),
        (
            "sequence_kl_k3_mean_packed",
            areal_decoupled_ppo_sequence_kl_k3_mean_packed,
            "mask",
            "kl_k3",
            "mean",
        ),
        (
            "sequence_kl_k3_max_packed",
            areal_decoupled_ppo_sequence_kl_k3_max_packed,
            "mask",
            "kl_k3",
            "max",
        ),
    )
)

__all__ = ["ADAPTERS"]
