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
the product ``exp(Σ log-ratio)``, with the bounds, and the row is dropped (mask) or its weight
clamped (clamp, only in rows out of bounds).
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


def _rejection(cap: Any, lower: Any, action: str) -> Any:
    """The ``RejectionSamplingConfig`` of a drawn cap and lower bound. AReaL refuses ``upper <= 1``
    and ``lower <= 0`` for the ratio metric: the next double above 1 keeps the same float32
    weights, and a lower bound of 0 bounds nothing (a weight is >= 0), as ``lower=None`` does (the
    clamp's default minimum is 0). No cap is ``upper=inf``."""
    from areal.api.cli_args import RejectionSamplingConfig

    upper = math.inf if cap is None else max(float(cap), math.nextafter(1.0, 2.0))
    low = None if lower is None or float(lower) == 0.0 else float(lower)
    return RejectionSamplingConfig(
        level="token", action=action, metric="ratio", upper=upper, lower=low
    )


def _sequence_rejection(cap: Any, lower: Any, action: str, agg: str) -> Any:
    """The sequence-level ``RejectionSamplingConfig`` (``metric="ratio"``) of a drawn cap and
    lower bound, with the token level's mapping of the bounds (:func:`_rejection`)."""
    from areal.api.cli_args import RejectionSamplingConfig

    upper = math.inf if cap is None else max(float(cap), math.nextafter(1.0, 2.0))
    low = None if lower is None or float(lower) == 0.0 else float(lower)
    return RejectionSamplingConfig(
        level="sequence", action=action, metric="ratio", agg=agg, upper=upper, lower=low
    )


def areal_decoupled_ppo_mask(
    logp: Any,
    logp_prox: Any,
    logp_behavior: Any,
    advantages: Any,
    *,
    eps_low: Any,
    eps_high: Any,
    dual_clip: Any,
    cap: Any,
    lower: Any,
    mask: Any,
) -> Any:
    """``ppo_actor_loss_fn(rejection_sampling={level: token, action: mask, metric: ratio,
    upper: cap, lower})`` with π_prox and μ both given (``use_decoupled_loss=True``)."""
    from areal.utils.functional import ppo_actor_loss_fn

    loss, _ = ppo_actor_loss_fn(
        logprobs=logp,
        proximal_logprobs=logp_prox,
        old_logprobs=logp_behavior,
        advantages=advantages,
        eps_clip=eps_low,
        loss_mask=mask > 0,
        eps_clip_higher=eps_high,
        c_clip=dual_clip,
        rejection_sampling=_rejection(cap, lower, "mask"),
    )
    return loss


def areal_decoupled_ppo_clamp(
    logp: Any,
    logp_prox: Any,
    logp_behavior: Any,
    advantages: Any,
    *,
    eps_low: Any,
    eps_high: Any,
    dual_clip: Any,
    cap: Any,
    lower: Any,
    mask: Any,
) -> Any:
    """``ppo_actor_loss_fn(rejection_sampling={level: token, action: clamp, metric: ratio,
    upper: cap, lower})``: the weight truncated to ``[lower or 0, cap]``, no token dropped."""
    from areal.utils.functional import ppo_actor_loss_fn

    loss, _ = ppo_actor_loss_fn(
        logprobs=logp,
        proximal_logprobs=logp_prox,
        old_logprobs=logp_behavior,
        advantages=advantages,
        eps_clip=eps_low,
        loss_mask=mask > 0,
        eps_clip_higher=eps_high,
        c_clip=dual_clip,
        rejection_sampling=_rejection(cap, lower, "clamp"),
    )
    return loss


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


def areal_decoupled_ppo_sequence_mean(
    logp: Any,
    logp_prox: Any,
    logp_behavior: Any,
    advantages: Any,
    *,
    eps_low: Any,
    eps_high: Any,
    dual_clip: Any,
    cap: Any,
    lower: Any,
    mask: Any,
) -> Any:
    """``ppo_actor_loss_fn(rejection_sampling={level: sequence, action: mask, metric: ratio,
    agg: mean, upper: cap, lower})`` on the padded 2-D layout: every token weighted by its row's
    geometric-mean behaviour ratio, the row rejected when that mean leaves the bounds."""
    from areal.utils.functional import ppo_actor_loss_fn

    config = _sequence_rejection(cap, lower, "mask", "mean")
    loss, _ = ppo_actor_loss_fn(
        logprobs=logp,
        proximal_logprobs=logp_prox,
        old_logprobs=logp_behavior,
        advantages=advantages,
        eps_clip=eps_low,
        loss_mask=mask > 0,
        eps_clip_higher=eps_high,
        c_clip=dual_clip,
        rejection_sampling=config,
    )
    return loss


def areal_decoupled_ppo_sequence_sum(
    logp: Any,
    logp_prox: Any,
    logp_behavior: Any,
    advantages: Any,
    *,
    eps_low: Any,
    eps_high: Any,
    dual_clip: Any,
    cap: Any,
    lower: Any,
    mask: Any,
) -> Any:
    """``ppo_actor_loss_fn(rejection_sampling={level: sequence, action: mask, metric: ratio,
    agg: sum, ...})``: the row's product of ratios decides, the geometric mean weighs."""
    from areal.utils.functional import ppo_actor_loss_fn

    config = _sequence_rejection(cap, lower, "mask", "sum")
    loss, _ = ppo_actor_loss_fn(
        logprobs=logp,
        proximal_logprobs=logp_prox,
        old_logprobs=logp_behavior,
        advantages=advantages,
        eps_clip=eps_low,
        loss_mask=mask > 0,
        eps_clip_higher=eps_high,
        c_clip=dual_clip,
        rejection_sampling=config,
    )
    return loss


def areal_decoupled_ppo_sequence_clamp_mean(
    logp: Any,
    logp_prox: Any,
    logp_behavior: Any,
    advantages: Any,
    *,
    eps_low: Any,
    eps_high: Any,
    dual_clip: Any,
    cap: Any,
    lower: Any,
    mask: Any,
) -> Any:
    """``ppo_actor_loss_fn(rejection_sampling={level: sequence, action: clamp, metric: ratio,
    agg: mean, ...})``: the row's geometric-mean weight clamped to ``[lower or 0, cap]`` in the
    rows whose geometric mean leaves the bounds."""
    from areal.utils.functional import ppo_actor_loss_fn

    loss, _ = ppo_actor_loss_fn(
        logprobs=logp,
        proximal_logprobs=logp_prox,
        old_logprobs=logp_behavior,
        advantages=advantages,
        eps_clip=eps_low,
        loss_mask=mask > 0,
        eps_clip_higher=eps_high,
        c_clip=dual_clip,
        rejection_sampling=_sequence_rejection(cap, lower, "clamp", "mean"),
    )
    return loss


def areal_decoupled_ppo_sequence_clamp_sum(
    logp: Any,
    logp_prox: Any,
    logp_behavior: Any,
    advantages: Any,
    *,
    eps_low: Any,
    eps_high: Any,
    dual_clip: Any,
    cap: Any,
    lower: Any,
    mask: Any,
) -> Any:
    """``ppo_actor_loss_fn(rejection_sampling={level: sequence, action: clamp, metric: ratio,
    agg: sum, ...})``: the row's geometric-mean weight clamped to ``[lower or 0, cap]`` in the
    rows whose product of ratios leaves the bounds."""
    from areal.utils.functional import ppo_actor_loss_fn

    loss, _ = ppo_actor_loss_fn(
        logprobs=logp,
        proximal_logprobs=logp_prox,
        old_logprobs=logp_behavior,
        advantages=advantages,
        eps_clip=eps_low,
        loss_mask=mask > 0,
        eps_clip_higher=eps_high,
        c_clip=dual_clip,
        rejection_sampling=_sequence_rejection(cap, lower, "clamp", "sum"),
    )
    return loss


_SETTINGS = {
    "use_decoupled_loss": True,
    "eps_clip": "eps_low",
    "eps_clip_higher": "eps_high",
    "c_clip": "dual_clip",
    "importance_sampling_level": "token",
}

ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="areal.ppo_actor_loss_decoupled_mask",
        framework="areal",
        function=f"{_FUNCTIONAL}:ppo_actor_loss_fn",
        settings={
            **_SETTINGS,
            # flat keys: a rejection_sampling dict marks a weight-level adapter (test_adapters)
            "rejection_sampling.level": "token",
            "rejection_sampling.action": "mask",
            "rejection_sampling.metric": "ratio",
            "rejection_sampling.upper": "cap",
            "rejection_sampling.lower": "lower",
        },
        spec="decoupled_ppo_clip",
        conventions={**_SCALAR, "above_cap": "mask"},
        candidate=areal_decoupled_ppo_mask,
        # apply_rejection_sampling computes the weight from .float() copies: float32 throughout
        dtype="float32",
        divergences={
            "padding_contributes_nothing": _PADDING_NAN,
            "huge_log_ratios_stay_finite": _OVERFLOW,
        },
        examples=(_REJECTED,),
        note="Decoupled PPO: the PPO clip on π_θ/π_prox times the behaviour weight π_prox/μ, "
        "tokens with the weight outside [lower, cap] rejected, divided by the count before "
        "rejection.",
    ),
    Adapter(
        key="areal.ppo_actor_loss_decoupled_clamp",
        framework="areal",
        function=f"{_FUNCTIONAL}:ppo_actor_loss_fn",
        settings={
            **_SETTINGS,
            # flat keys: a rejection_sampling dict marks a weight-level adapter (test_adapters)
            "rejection_sampling.level": "token",
            "rejection_sampling.action": "clamp",
            "rejection_sampling.metric": "ratio",
            "rejection_sampling.upper": "cap",
            "rejection_sampling.lower": "lower",
        },
        spec="decoupled_ppo_clip",
        conventions={**_SCALAR, "above_cap": "clip"},
        candidate=areal_decoupled_ppo_clamp,
        dtype="float32",
        divergences={
            "padding_contributes_nothing": _PADDING_NAN,
            "huge_log_ratios_stay_finite": _OVERFLOW,
        },
        examples=(_REJECTED,),
        note="Decoupled PPO with the behaviour weight clamped to [lower, cap] (truncated IS).",
    ),
    *(
        Adapter(
            key=f"areal.ppo_actor_loss_decoupled_sequence_{'' if action == 'mask' else 'clamp_'}"
            f"{agg}",
            framework="areal",
            function=f"{_FUNCTIONAL}:ppo_actor_loss_fn",
            settings={
                **_SETTINGS,
                "rejection_sampling.level": "sequence",
                "rejection_sampling.action": action,
                "rejection_sampling.metric": "ratio",
                "rejection_sampling.agg": agg,
                "rejection_sampling.upper": "cap",
                "rejection_sampling.lower": "lower",
            },
            spec="decoupled_ppo_clip",
            conventions={
                **_SCALAR,
                "above_cap": "mask" if action == "mask" else "clip",
                "level": level,
            },
            candidate=candidate,
            dtype="float32",
            divergences={
                "padding_contributes_nothing": _PADDING_NAN,
                "huge_log_ratios_stay_finite": _OVERFLOW,
            },
            note=f"Decoupled PPO with sequence-level rejection sampling: the row's geometric-mean "
            f"weight on every token, the row {'dropped' if action == 'mask' else 'clamped'} when "
            f"its {what} leaves [lower, cap].",
        )
        for action, agg, level, candidate, what in (
            ("mask", "mean", "geometric", areal_decoupled_ppo_sequence_mean, "geometric mean"),
            ("mask", "sum", "sequence", areal_decoupled_ppo_sequence_sum, "product of ratios"),
            (
                "clamp",
                "mean",
                "geometric",
                areal_decoupled_ppo_sequence_clamp_mean,
                "geometric mean",
            ),
            ("clamp", "sum", "sequence", areal_decoupled_ppo_sequence_clamp_sum, "product"),
        )
    ),
)

__all__ = ["ADAPTERS"]
