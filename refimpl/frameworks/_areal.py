"""AReaL 1.0.4: decoupled-PPO behaviour weights (``rejection_sampling``), read from its installed sources.

AReaL 1.0 configures the behaviour-weight cap through ``rejection_sampling``
(``areal.api.cli_args.RejectionSamplingConfig``: ``level``, ``action``, ``metric``, ``agg``,
``upper``, ``lower``); the old ``behave_imp_weight_cap`` / ``behave_imp_weight_mode`` keys are
refused. ``areal.utils.functional.apply_rejection_sampling`` computes ``π_prox/μ`` in float32 or
wider, maps a non-finite log-ratio to ratio 1, and returns weights that are 0 where the updated
loss mask is 0.
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter, Divergence

_FUNCTIONAL = "areal.utils.functional"
_RATIO = {"nonfinite": "one", "padding": "zero"}


def rejection_sampling_to_refimpl(
    *,
    level: str = "token",
    action: str = "mask",
    metric: str = "ratio",
    agg: str = "mean",
    upper: float = 5.0,
    lower: float | None = None,
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """An AReaL ``rejection_sampling`` setting as ``(spec, parameters, conventions)`` in refimpl's terms.

    Only the ``metric="ratio"`` settings have a refimpl spec; the KL metrics filter on a
    divergence estimate that no refimpl weight computes.

    Parameters
    ----------
    level, action, metric, agg, upper, lower
        The fields of AReaL 1.0.4's ``RejectionSamplingConfig``, with its defaults.

    Returns
    -------
    tuple
        The spec name (:func:`refimpl.testing.spec_names`), the keyword parameters of the
        reference, and the conventions that make the reference compute AReaL's weight.

    Raises
    ------
    ValueError
        For a KL metric, ``agg="max"`` or a clamped sequence level (no refimpl spec).

    Examples
    --------
    >>> from refimpl.frameworks import rejection_sampling_to_refimpl
    >>> rejection_sampling_to_refimpl(level="token", action="mask", upper=5.0)
    ('decoupled_ppo', {'cap': 5.0}, {'nonfinite': 'one', 'padding': 'zero'})
    >>> spec, params, conv = rejection_sampling_to_refimpl(level="sequence", agg="mean", upper=2.0)
    >>> spec, conv["weight"]
    ('masked_is_geometric', 'geometric')
    """
    from refimpl._validation import invalid

    if metric != "ratio" or agg == "max" or (level == "sequence" and action == "clamp"):
        raise invalid(
            "rejection_sampling",
            "use metric='ratio', agg 'sum' or 'mean', and action='mask' at sequence level",
            {"level": level, "action": action, "metric": metric, "agg": agg},
            "Only these settings have a refimpl spec; check the others by their own tests.",
        )
    if level == "token" and action == "mask":
        if lower is None:
            return "decoupled_ppo", {"cap": upper}, dict(_RATIO)
        return "masked_is", {"low": lower, "high": upper}, dict(_RATIO)
    if level == "token":
        conv = dict(_RATIO) if lower is None else {**_RATIO, "lower": lower}
        return "tis", {"cap": upper}, conv
    spec = "masked_is_geometric" if agg == "mean" else "masked_is_sequence"
    conv = {**_RATIO, "weight": "geometric", "output": "BT", "aggregate": agg}
    return spec, {"low": 0.0 if lower is None else lower, "high": upper}, conv


def areal_token_mask(logp_prox: Any, logp_behavior: Any, *, cap: float | None, mask: Any) -> Any:
    """AReaL ``rejection_sampling: {level: token, action: mask, metric: ratio, upper: cap}``."""
    import math

    from areal.api.cli_args import RejectionSamplingConfig
    from areal.utils.functional import apply_rejection_sampling

    upper = math.inf if cap is None else float(cap)  # no cap: a bound nothing exceeds
    config = RejectionSamplingConfig(level="token", action="mask", metric="ratio", upper=upper)
    result = apply_rejection_sampling(logp_prox, logp_behavior, mask, None, config)
    return result.behave_imp_weight


def areal_token_clamp(logp_prox: Any, logp_behavior: Any, *, cap: float, mask: Any) -> Any:
    """AReaL ``rejection_sampling: {level: token, action: clamp, metric: ratio, upper: cap, lower: 0.5}``."""
    from areal.api.cli_args import RejectionSamplingConfig
    from areal.utils.functional import apply_rejection_sampling

    config = RejectionSamplingConfig(
        level="token", action="clamp", metric="ratio", upper=float(cap), lower=0.5
    )
    result = apply_rejection_sampling(logp_prox, logp_behavior, mask, None, config)
    return result.behave_imp_weight


def areal_sequence_mask_mean(
    logp_prox: Any, logp_behavior: Any, *, low: float, high: float, mask: Any
) -> Any:
    """AReaL ``rejection_sampling: {level: sequence, action: mask, metric: ratio, agg: mean}``."""
    from areal.api.cli_args import RejectionSamplingConfig
    from areal.utils.functional import apply_rejection_sampling

    config = RejectionSamplingConfig(
        level="sequence",
        action="mask",
        metric="ratio",
        agg="mean",
        upper=float(high),
        lower=float(low) if low > 0 else None,
    )
    result = apply_rejection_sampling(logp_prox, logp_behavior, mask, None, config)
    return result.behave_imp_weight


def areal_sequence_mask_sum(
    logp_prox: Any, logp_behavior: Any, *, low: float, high: float, mask: Any
) -> Any:
    """AReaL ``rejection_sampling: {level: sequence, action: mask, metric: ratio, agg: sum}``."""
    from areal.api.cli_args import RejectionSamplingConfig
    from areal.utils.functional import apply_rejection_sampling

    config = RejectionSamplingConfig(
        level="sequence",
        action="mask",
        metric="ratio",
        agg="sum",
        upper=float(high),
        lower=float(low) if low > 0 else None,
    )
    result = apply_rejection_sampling(logp_prox, logp_behavior, mask, None, config)
    return result.behave_imp_weight


def areal_packed_sequence_mask_mean(
    logp_prox: Any, logp_behavior: Any, *, low: float, high: float, cu_seqlens: Any
) -> Any:
    """AReaL's packed 1-D layout: the same sequence mask on the valid tokens and ``cu_seqlens``."""
    import torch
    from areal.api.cli_args import RejectionSamplingConfig
    from areal.utils.functional import apply_rejection_sampling

    config = RejectionSamplingConfig(
        level="sequence",
        action="mask",
        metric="ratio",
        agg="mean",
        upper=float(high),
        lower=float(low) if low > 0 else None,
    )
    loss_mask = torch.ones_like(logp_prox)
    cu = torch.as_tensor(cu_seqlens, dtype=torch.int64)
    result = apply_rejection_sampling(logp_prox, logp_behavior, loss_mask, cu, config)
    return result.behave_imp_weight


def areal_ppo_actor_behave_weight(
    logp_prox: Any, logp_behavior: Any, *, cap: float | None, mask: Any
) -> Any:
    """The behaviour weight ``ppo_actor_loss_fn`` multiplies its PPO term by (``stat["behave_imp_weight"]``)."""
    import math

    import torch
    from areal.api.cli_args import RejectionSamplingConfig
    from areal.utils.functional import ppo_actor_loss_fn

    upper = math.inf if cap is None else float(cap)
    config = RejectionSamplingConfig(level="token", action="mask", metric="ratio", upper=upper)
    _, stat = ppo_actor_loss_fn(
        logprobs=logp_prox,  # π_θ = π_prox: the PPO ratio is 1 and plays no part
        proximal_logprobs=logp_prox,
        old_logprobs=logp_behavior,
        advantages=torch.ones_like(logp_prox),
        eps_clip=0.2,
        loss_mask=mask > 0,
        rejection_sampling=config,
    )
    return stat["behave_imp_weight"]


_UPPER_ABOVE_ONE = Divergence(
    "convention",
    "AReaL's RejectionSamplingConfig refuses upper <= 1 for metric='ratio' (cli_args.py, "
    "__post_init__: 'otherwise all non-identical policy tokens will be filtered'): the spec's "
    "cap = 1 (or band top <= 1) raises ValueError by design.",
)

ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="areal.rs_token_mask",
        framework="areal",
        function=f"{_FUNCTIONAL}:apply_rejection_sampling",
        settings={"level": "token", "action": "mask", "metric": "ratio", "upper": "cap"},
        spec="decoupled_ppo",
        conventions=_RATIO,
        candidate=areal_token_mask,
        divergences={"agrees_with_reference": _UPPER_ABOVE_ONE},
        note="The old behave_imp_weight_cap (token_mask): π_prox/μ, 0 above the cap and at padding.",
    ),
    Adapter(
        key="areal.rs_token_clamp",
        framework="areal",
        function=f"{_FUNCTIONAL}:apply_rejection_sampling",
        settings={
            "level": "token",
            "action": "clamp",
            "metric": "ratio",
            "upper": "cap",
            "lower": 0.5,
        },
        spec="tis",
        conventions={**_RATIO, "lower": 0.5},
        candidate=areal_token_clamp,
        divergences={"agrees_with_reference": _UPPER_ABOVE_ONE},
        note="Two-sided truncation clip(ρ, 0.5, C) (the old token_truncate with a lower bound).",
    ),
    Adapter(
        key="areal.rs_sequence_mask_mean",
        framework="areal",
        function=f"{_FUNCTIONAL}:apply_rejection_sampling",
        settings={"level": "sequence", "action": "mask", "metric": "ratio", "agg": "mean"},
        spec="masked_is_geometric",
        conventions={**_RATIO, "weight": "geometric", "output": "BT", "aggregate": "mean"},
        candidate=areal_sequence_mask_mean,
        divergences={"agrees_with_reference": _UPPER_ABOVE_ONE},
        note="A sequence filter on the geometric mean of ρ, and the geometric mean as every "
        "token's weight.",
    ),
    Adapter(
        key="areal.rs_sequence_mask_sum",
        framework="areal",
        function=f"{_FUNCTIONAL}:apply_rejection_sampling",
        settings={"level": "sequence", "action": "mask", "metric": "ratio", "agg": "sum"},
        spec="masked_is_sequence",
        conventions={**_RATIO, "weight": "geometric", "output": "BT", "aggregate": "sum"},
        candidate=areal_sequence_mask_sum,
        divergences={"agrees_with_reference": _UPPER_ABOVE_ONE},
        note="A sequence filter on the product Πρ, with the geometric mean as the weight.",
    ),
    Adapter(
        key="areal.rs_sequence_mask_mean_packed",
        framework="areal",
        function=f"{_FUNCTIONAL}:apply_rejection_sampling",
        settings={
            "level": "sequence",
            "action": "mask",
            "metric": "ratio",
            "agg": "mean",
            "layout": "packed (cu_seqlens)",
        },
        spec="masked_is_geometric",
        conventions={
            **_RATIO,
            "weight": "geometric",
            "output": "BT",
            "aggregate": "mean",
            "layout": "packed",
        },
        candidate=areal_packed_sequence_mask_mean,
        divergences={"agrees_with_reference": _UPPER_ABOVE_ONE},
        note="The same rule on AReaL's packed 1-D layout with cu_seqlens.",
    ),
    Adapter(
        key="areal.ppo_actor_behave_weight",
        framework="areal",
        function=f"{_FUNCTIONAL}:ppo_actor_loss_fn",
        settings={"rejection_sampling": {"level": "token", "action": "mask", "upper": "cap"}},
        spec="decoupled_ppo",
        conventions=_RATIO,
        candidate=areal_ppo_actor_behave_weight,
        divergences={"agrees_with_reference": _UPPER_ABOVE_ONE},
        note="The behaviour weight inside the decoupled-PPO loss (stat['behave_imp_weight']).",
    ),
)

__all__ = ["ADAPTERS", "rejection_sampling_to_refimpl"]
