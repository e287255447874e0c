"""AReaL 1.0.4: decoupled PPO with rejection sampling inside ``ppo_actor_loss_fn``.

Read from ``areal/utils/functional/functional.py:ppo_actor_loss_fn`` (``use_decoupled_loss=True``:
``proximal_logprobs`` is the trainer's recomputed π_prox, ``old_logprobs`` the inference
engine's μ): the count ``loss_mask.count_nonzero() or 1`` is taken *before* rejection;
``apply_rejection_sampling`` (token level, ``metric="ratio"``) computes ``w = exp(prox − old)``
from ``.float()`` copies (float32 even for float64 inputs; a non-finite log-ratio gives 1) and,
with ``action="mask"``, drops the tokens with ``w`` outside ``[lower, upper]`` from the loss mask
(``_check_bounds``, inclusive), or with ``action="clamp"`` clamps ``w`` to ``[lower or 0, upper]``;
``w`` is 0 where the updated mask is 0. The PPO loss on ``r = exp(logp − prox)``
(``torch.where(loss_mask, exp, 0)`` with the updated mask; clip-higher; dual clip
``min(loss, c|A|)``) is multiplied by ``w`` and summed over the updated mask, divided by the
count before rejection: a rejected token still counts in the denominator. At
``level="sequence"`` (2-D padded layout) every valid token carries its row's geometric-mean
weight ``exp(Σ log-ratio / max(count, 1))``; ``agg="mean"`` compares that mean, ``agg="sum"``
the product ``exp(Σ log-ratio)``, ``agg="max"`` the largest ratio ``exp(max log-ratio)``, with
the bounds, and the row is dropped (mask) or its weight clamped (clamp, only in rows out of
bounds). With ``metric="kl_k1"|"kl_k2"|"kl_k3"`` the estimate
``KLEstimator._compute_approx_kl(proximal, old, apply_clamp=False)`` (``d = prox.float() −
old.float()``: ``d``, ``d²/2``, ``e^{−d} − 1 + d``) is compared with the bounds instead, per token
or by the row's arithmetic sum, mean or maximum over its valid tokens (0 for a row without one),
the weight staying the token's own ``exp(d)``; the config refuses ``action="clamp"`` with a KL
metric. On the packed 1-D layout (``cu_seqlens``) the same rules run with ``scatter_add_`` /
``scatter_reduce_`` per sequence.

Every adapter is one call of :func:`rejection_loss`, which maps the spec's bounds onto
``RejectionSamplingConfig`` and calls ``ppo_actor_loss_fn``; a candidate names the real function
and its config (level, action, metric, agg).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from refimpl.frameworks._registry import Adapter, Divergence

_FUNCTIONAL = "areal.utils.functional"
_SCALAR = {"output": "scalar", "aggregation": "token_mean"}

_PADDING_NAN = Divergence(
    "defect",
    "With rejection sampling the PPO ratio is still torch.where(loss_mask, exp(logprobs - "
    "proximal_logprobs), 0) (functional.py ppo_actor_loss_fn): a padded or rejected entry whose "
    "log-ratio overflows exp gives inf, and the backward pass multiplies the 0 the where sends "
    "there by inf: the step's gradient is NaN. The defect is the one of areal.ppo_actor_loss "
    "(same line); rejection does not mask the log-ratio before exp either.",
    draft_report=(
        "areal/utils/functional/functional.py: ppo_actor_loss_fn with rejection_sampling "
        "(use_decoupled_loss=True) computes the PPO ratio as `torch.where(loss_mask, "
        "torch.exp(logprobs - proximal_logprobs), 0)` after apply_rejection_sampling has updated "
        "loss_mask. A padded token, or one that rejection removed, whose log-ratio overflows exp "
        "(above ~88 in float32) leaves the loss finite but makes the gradient NaN: torch.where's "
        "backward sends 0 to the masked entry and exp's backward multiplies it by inf. Masked "
        "and rejected tokens should not reach the gradient; selecting the log-ratio before exp "
        "(`torch.exp(torch.where(loss_mask, logprobs - proximal_logprobs, 0))`), as "
        "apply_rejection_sampling already sanitises its own log-ratio, keeps it at 0. Failing "
        "input: one padded token with logprobs - proximal_logprobs = 100."
    ),
)
_OVERFLOW = Divergence(
    "defect",
    "The smallest failing input is a padded token with a log-ratio of ±100: the padding defect "
    "above (exp before the mask). A real token beyond float32's exp range whose clipped branch, "
    "zero advantage or underflowed behaviour weight multiplies the inf or 0 ratio is NaN too "
    "where the exact value is finite, a numerical limit of the unclamped log-ratio.",
    draft_report="See padding_contributes_nothing: the same line, torch.where(loss_mask, "
    "torch.exp(logprobs - proximal_logprobs), 0) in ppo_actor_loss_fn.",
)

OVERFLOW_PACKED = Divergence(
    "numerical limit",
    "On the packed layout padding never reaches the loss (only valid tokens are packed), so the "
    "padding defect does not show; a real token whose log-ratio is beyond float32's exp range "
    "(logprobs - proximal_logprobs = 100: the ratio is inf) with a zero advantage gives "
    "0·inf = NaN where the exact loss is 0: the numerical limit of the unclamped exp.",
)

REJECTED_NAN_PACKED = Divergence(
    "defect",
    "On the packed layout the smallest failing input is a real token that rejection drops (its "
    "KL estimate above the cap) while logprobs - proximal_logprobs = 100: "
    "torch.where(loss_mask, exp(logprobs - proximal_logprobs), 0) with the updated mask sends 0 "
    "to exp's inf and the gradient is NaN where the exact one is 0 (the padding defect's line, "
    "reached by a rejected token).",
    draft_report="See padding_contributes_nothing of the padded adapters: the same line, "
    "torch.where(loss_mask, torch.exp(logprobs - proximal_logprobs), 0) in ppo_actor_loss_fn, "
    "evaluated after apply_rejection_sampling has removed the token from loss_mask. Failing "
    "input: one packed token with proximal_logprobs - old_logprobs = -100 (rejected by "
    "metric='kl_k3') and logprobs - proximal_logprobs = 100.",
)


def rejection_loss(
    loss_fn: Any,
    arrays: tuple[Any, Any, Any, Any],
    params: dict[str, Any],
    *,
    level: str,
    action: str = "mask",
    metric: str = "ratio",
    agg: str = "mean",
    packed: bool = False,
) -> Any:
    """``loss_fn`` (AReaL's ``ppo_actor_loss_fn``) on the spec's arrays with
    ``rejection_sampling=RejectionSamplingConfig(level, action, metric, agg, upper=cap,
    lower=lower)``, π_prox and μ both given (``use_decoupled_loss=True``); ``packed``: the valid
    tokens of every row concatenated with ``cu_seqlens`` (as ``pack_tensor_dict`` builds them).

    AReaL refuses ``upper <= 1`` and ``lower <= 0`` for the ratio metric: the next double above 1
    keeps the same float32 weights, a lower bound of 0 bounds nothing (a weight is >= 0), as
    ``lower=None`` does (the clamp's default minimum is 0), and no cap is ``upper=inf``. A KL
    metric takes the drawn bounds as they are."""
    import torch
    from areal.api.cli_args import RejectionSamplingConfig

    logp, logp_prox, logp_behavior, advantages = arrays
    cap, lower, mask = params["cap"], params["lower"], params["mask"] > 0
    if metric == "ratio":
        cap = math.inf if cap is None else max(float(cap), math.nextafter(1.0, 2.0))
        lower = None if lower is None or float(lower) == 0.0 else float(lower)
    config = RejectionSamplingConfig(
        level=level, action=action, metric=metric, agg=agg, upper=cap, lower=lower
    )
    cu_seqlens = None
    if packed:
        lengths = mask.sum(dim=1).to(torch.int32)
        cu_seqlens = torch.nn.functional.pad(torch.cumsum(lengths, 0, dtype=torch.int32), (1, 0))
        logp, logp_prox, logp_behavior = logp[mask], logp_prox[mask], logp_behavior[mask]
        advantages, mask = advantages.expand_as(mask)[mask], mask[mask]
    loss, _ = loss_fn(
        logprobs=logp,
        proximal_logprobs=logp_prox,
        old_logprobs=logp_behavior,
        advantages=advantages,
        eps_clip=params["eps_low"],
        loss_mask=mask,
        eps_clip_higher=params["eps_high"],
        c_clip=params["dual_clip"],
        rejection_sampling=config,
        cu_seqlens=cu_seqlens,
    )
    return loss


def areal_decoupled_ppo_mask(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Token level, ``action="mask"``: the tokens with ``π_prox/μ`` outside the bounds dropped."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    return rejection_loss(ppo_actor_loss_fn, arrays, params, level="token")


def areal_decoupled_ppo_clamp(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Token level, ``action="clamp"``: the weight truncated to ``[lower or 0, cap]``."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    return rejection_loss(ppo_actor_loss_fn, arrays, params, level="token", action="clamp")


def areal_decoupled_ppo_sequence_mean(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``agg="mean"``, mask: the row's geometric-mean ratio weighs and decides."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    return rejection_loss(ppo_actor_loss_fn, arrays, params, level="sequence")


def areal_decoupled_ppo_sequence_sum(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``agg="sum"``, mask: the row's product of ratios decides."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    return rejection_loss(ppo_actor_loss_fn, arrays, params, level="sequence", agg="sum")


def areal_decoupled_ppo_sequence_max(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``agg="max"``, mask: the row's largest ratio decides."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    return rejection_loss(ppo_actor_loss_fn, arrays, params, level="sequence", agg="max")


def areal_decoupled_ppo_sequence_clamp_mean(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``agg="mean"``, clamp: the weight of a row out of bounds clamped."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    return rejection_loss(ppo_actor_loss_fn, arrays, params, level="sequence", action="clamp")


def areal_decoupled_ppo_sequence_clamp_sum(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``agg="sum"``, clamp: the rows whose product leaves the bounds clamped."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    return rejection_loss(
        ppo_actor_loss_fn, arrays, params, level="sequence", action="clamp", agg="sum"
    )


def areal_decoupled_ppo_sequence_clamp_max(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``agg="max"``, clamp: the rows whose largest ratio leaves the bounds
    clamped (a row inside keeps its geometric mean, even below ``lower``)."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    return rejection_loss(
        ppo_actor_loss_fn, arrays, params, level="sequence", action="clamp", agg="max"
    )


def areal_decoupled_ppo_kl_k1(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Token level, ``metric="kl_k1"``, mask: the tokens whose estimate leaves the bounds dropped."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    return rejection_loss(ppo_actor_loss_fn, arrays, params, level="token", metric="kl_k1")


def areal_decoupled_ppo_kl_k2(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Token level, ``metric="kl_k2"``, mask: the tokens whose estimate leaves the bounds dropped."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    return rejection_loss(ppo_actor_loss_fn, arrays, params, level="token", metric="kl_k2")


def areal_decoupled_ppo_kl_k3(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Token level, ``metric="kl_k3"``, mask: the tokens whose estimate leaves the bounds dropped."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    return rejection_loss(ppo_actor_loss_fn, arrays, params, level="token", metric="kl_k3")


def areal_decoupled_ppo_sequence_kl_k3_mean(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``metric="kl_k3"``, ``agg="mean"``, mask: the row's arithmetic mean of
    the k3 estimates decides, each token weighed by its own ratio."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    config: dict[str, Any] = {"level": "sequence", "metric": "kl_k3", "agg": "mean"}
    return rejection_loss(ppo_actor_loss_fn, arrays, params, **config)


def areal_decoupled_ppo_sequence_kl_k3_sum(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``metric="kl_k3"``, ``agg="sum"``, mask: the row's arithmetic sum of
    the k3 estimates decides, each token weighed by its own ratio."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    config: dict[str, Any] = {"level": "sequence", "metric": "kl_k3", "agg": "sum"}
    return rejection_loss(ppo_actor_loss_fn, arrays, params, **config)


def areal_decoupled_ppo_sequence_kl_k3_max(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``metric="kl_k3"``, ``agg="max"``, mask: the row's arithmetic max of
    the k3 estimates decides, each token weighed by its own ratio."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    config: dict[str, Any] = {"level": "sequence", "metric": "kl_k3", "agg": "max"}
    return rejection_loss(ppo_actor_loss_fn, arrays, params, **config)


def areal_decoupled_ppo_sequence_mean_packed(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``agg="mean"``, mask, on the packed 1-D layout with ``cu_seqlens``."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    return rejection_loss(ppo_actor_loss_fn, arrays, params, level="sequence", packed=True)


def areal_decoupled_ppo_sequence_max_packed(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``agg="max"``, mask, packed: the largest ratio by ``scatter_reduce_``."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    return rejection_loss(
        ppo_actor_loss_fn, arrays, params, level="sequence", agg="max", packed=True
    )


def areal_decoupled_ppo_sequence_clamp_mean_packed(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``agg="mean"``, clamp, packed: the rows out of bounds clamped."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    config: dict[str, Any] = {"level": "sequence", "action": "clamp", "packed": True}
    return rejection_loss(ppo_actor_loss_fn, arrays, params, **config)


def areal_decoupled_ppo_sequence_kl_k3_sum_packed(
    logp: Any, logp_prox: Any, logp_behavior: Any, advantages: Any, **params: Any
) -> Any:
    """Sequence level, ``metric="kl_k3"``, ``agg="sum"``, mask, packed: the k3 sum per sequence."""
    from areal.utils.functional import ppo_actor_loss_fn

    from refimpl.frameworks._areal_losses_decoupled import rejection_loss

    arrays = (logp, logp_prox, logp_behavior, advantages)
    config: dict[str, Any] = {"level": "sequence", "metric": "kl_k3", "agg": "sum", "packed": True}
    return rejection_loss(ppo_actor_loss_fn, arrays, params, **config)


#: Weights 2, 1 and 10 (π_prox/μ) on ratios 1.1, 1, 1: with cap 5 the third token is rejected
#: (mask) or clamped to 5 (clamp), and the token mean divides by 3, the count before rejection.
_REJECTED = [
    (
        (
            np.log([[0.55, 0.5, 0.5]]),
            np.log([[0.5, 0.5, 0.5]]),
            np.log([[0.25, 0.5, 0.05]]),
            np.array([[1.0, -1.0, 1.0]]),
        ),
        {
            "eps_low": 0.2,
            "eps_high": None,
            "dual_clip": None,
            "cap": 5.0,
            "lower": None,
            "mask": np.ones((1, 3)),
        },
    )
]


_SETTINGS = {
    "use_decoupled_loss": True,
    "eps_clip": "eps_low",
    "eps_clip_higher": "eps_high",
    "c_clip": "dual_clip",
    "importance_sampling_level": "token",
}

_DIVERGENCES = {
    "padding_contributes_nothing": _PADDING_NAN,
    "huge_log_ratios_stay_finite": _OVERFLOW,
}


def decoupled_adapter(
    key: str,
    candidate: Any,
    note: str,
    *,
    level: str = "token",
    action: str = "mask",
    metric: str = "ratio",
    agg: str | None = None,
    **extra: Any,
) -> Adapter:
    """The adapter of one ``RejectionSamplingConfig`` (settings and conventions read from it)."""
    refimpl_level = {None: "token", "mean": "geometric", "sum": "sequence", "max": "max"}[agg]
    settings = {
        **_SETTINGS,
        # flat keys: a rejection_sampling dict marks a weight-level adapter (test_adapters)
        "rejection_sampling.level": level,
        "rejection_sampling.action": action,
        "rejection_sampling.metric": metric,
        **({"rejection_sampling.agg": agg} if agg else {}),
        "rejection_sampling.upper": "cap",
        "rejection_sampling.lower": "lower",
        **extra.pop("settings", {}),
    }
    conventions = {**_SCALAR, "above_cap": "mask" if action == "mask" else "clip"}
    if agg:
        conventions["level"] = refimpl_level
    if metric != "ratio":
        conventions["metric"] = metric
    return Adapter(
        key=f"areal.ppo_actor_loss_decoupled_{key}",
        framework="areal",
        function=f"{_FUNCTIONAL}:ppo_actor_loss_fn",
        settings=settings,
        spec="decoupled_ppo_clip",
        conventions=conventions,
        candidate=candidate,
        # apply_rejection_sampling computes the weight from .float() copies: float32 throughout
        dtype="float32",
        divergences=extra.pop("divergences", _DIVERGENCES),
        note=note,
        **extra,
    )


_ROW = "Decoupled PPO with sequence-level rejection sampling: the row's geometric-mean weight on "
_KL = "Decoupled PPO rejected on a KL estimate of log(π_prox/μ), the weight the token's own ratio: "

ADAPTERS: tuple[Adapter, ...] = (
    decoupled_adapter(
        "mask",
        areal_decoupled_ppo_mask,
        "Decoupled PPO: the PPO clip on π_θ/π_prox times the behaviour weight π_prox/μ, tokens "
        "with the weight outside [lower, cap] rejected, divided by the count before rejection.",
        examples=(_REJECTED,),
    ),
    decoupled_adapter(
        "clamp",
        areal_decoupled_ppo_clamp,
        "Decoupled PPO with the behaviour weight clamped to [lower, cap] (truncated IS).",
        action="clamp",
        examples=(_REJECTED,),
    ),
    *(
        decoupled_adapter(
            f"sequence_{'' if action == 'mask' else 'clamp_'}{agg}",
            candidate,
            f"{_ROW}every token, the row {'dropped' if action == 'mask' else 'clamped'} when its "
            f"{what} leaves [lower, cap].",
            level="sequence",
            action=action,
            agg=agg,
        )
        for action, agg, candidate, what in (
            ("mask", "mean", areal_decoupled_ppo_sequence_mean, "geometric mean"),
            ("mask", "sum", areal_decoupled_ppo_sequence_sum, "product of ratios"),
            ("mask", "max", areal_decoupled_ppo_sequence_max, "largest ratio"),
            ("clamp", "mean", areal_decoupled_ppo_sequence_clamp_mean, "geometric mean"),
            ("clamp", "sum", areal_decoupled_ppo_sequence_clamp_sum, "product"),
            ("clamp", "max", areal_decoupled_ppo_sequence_clamp_max, "largest ratio"),
        )
    ),
    *(
        decoupled_adapter(
            metric,
            candidate,
            f"{_KL}tokens with {what} outside [lower, cap] dropped.",
            metric=metric,
        )
        for metric, candidate, what in (
            ("kl_k1", areal_decoupled_ppo_kl_k1, "d = log(π_prox/μ)"),
            ("kl_k2", areal_decoupled_ppo_kl_k2, "d²/2"),
            ("kl_k3", areal_decoupled_ppo_kl_k3, "e^-d − 1 + d"),
        )
    ),
    *(
        decoupled_adapter(
            f"sequence_kl_k3_{agg}",
            candidate,
            f"{_KL}rows whose {agg} of k3 = e^-d − 1 + d leaves [lower, cap] dropped.",
            level="sequence",
            metric="kl_k3",
            agg=agg,
        )
        for agg, candidate in (
            ("mean", areal_decoupled_ppo_sequence_kl_k3_mean),
            ("sum", areal_decoupled_ppo_sequence_kl_k3_sum),
            ("max", areal_decoupled_ppo_sequence_kl_k3_max),
        )
    ),
    decoupled_adapter(
        "sequence_mean_packed",
        areal_decoupled_ppo_sequence_mean_packed,
        f"{_ROW}every token, the row dropped when its geometric mean leaves [lower, cap], on the "
        "packed 1-D layout (valid tokens concatenated, cu_seqlens per row).",
        level="sequence",
        agg="mean",
        settings={"layout": "packed (cu_seqlens)"},
        divergences={"huge_log_ratios_stay_finite": OVERFLOW_PACKED},
    ),
    *(
        decoupled_adapter(
            f"{key}_packed",
            candidate,
            f"{note}, on the packed 1-D layout (valid tokens concatenated, cu_seqlens per row).",
            level="sequence",
            settings={"layout": "packed (cu_seqlens)"},
            divergences={"huge_log_ratios_stay_finite": huge},
            **config,
        )
        for key, candidate, note, config, huge in (
            (
                "sequence_max",
                areal_decoupled_ppo_sequence_max_packed,
                f"{_ROW}every token, the row dropped when its largest ratio leaves [lower, cap]",
                {"agg": "max"},
                OVERFLOW_PACKED,
            ),
            (
                "sequence_clamp_mean",
                areal_decoupled_ppo_sequence_clamp_mean_packed,
                f"{_ROW}every token, clamped in the rows whose geometric mean leaves [lower, cap]",
                {"agg": "mean", "action": "clamp"},
                OVERFLOW_PACKED,
            ),
            (
                "sequence_kl_k3_sum",
                areal_decoupled_ppo_sequence_kl_k3_sum_packed,
                f"{_KL}rows whose sum of k3 = e^-d − 1 + d leaves [lower, cap] dropped",
                {"agg": "sum", "metric": "kl_k3"},
                REJECTED_NAN_PACKED,
            ),
        )
    ),
)

__all__ = [
    "ADAPTERS",
    "OVERFLOW_PACKED",
    "REJECTED_NAN_PACKED",
    "decoupled_adapter",
    "rejection_loss",
]
