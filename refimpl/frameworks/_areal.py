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

import numpy as np

from refimpl.frameworks._registry import Adapter

_FUNCTIONAL = "areal.utils.functional"
_RATIO = {"nonfinite": "one", "padding": "zero"}
# apply_rejection_sampling casts both log-prob arrays with .float() before subtracting: a float64
# call is computed in float32 (functional.py l.230).
_FLOAT32 = {**_RATIO, "compute_dtype": "float32"}


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
    ('decoupled_ppo', {'cap': 5.0}, {'nonfinite': 'one', 'padding': 'zero', 'compute_dtype': 'float32'})
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
            return "decoupled_ppo", {"cap": upper}, dict(_FLOAT32)
        return "masked_is", {"low": lower, "high": upper}, dict(_FLOAT32)
    if level == "token":
        conv = dict(_FLOAT32) if lower is None else {**_FLOAT32, "lower": lower}
        return "tis", {"cap": upper}, conv
    spec = "masked_is_geometric" if agg == "mean" else "masked_is_sequence"
    conv = {**_FLOAT32, "weight": "geometric", "output": "BT", "aggregate": agg}
    return spec, {"low": 0.0 if lower is None else lower, "high": upper}, conv


def areal_token_mask(logp_prox: Any, logp_behavior: Any, *, cap: float | None, mask: Any) -> Any:
    """AReaL ``rejection_sampling: {level: token, action: mask, metric: ratio, upper: cap}``."""
    import math

    from areal.api.cli_args import RejectionSamplingConfig
    from areal.utils.functional import apply_rejection_sampling

    # No cap: a bound nothing exceeds. AReaL refuses upper <= 1 for the ratio metric; for cap = 1
    # the next double above 1 keeps the same tokens, since AReaL compares float32 ratios with it.
    upper = math.inf if cap is None else max(float(cap), math.nextafter(1.0, 2.0))
    config = RejectionSamplingConfig(level="token", action="mask", metric="ratio", upper=upper)
    result = apply_rejection_sampling(logp_prox, logp_behavior, mask, None, config)
    return result.behave_imp_weight


def areal_token_clamp(logp_prox: Any, logp_behavior: Any, *, cap: float, mask: Any) -> Any:
    """AReaL ``rejection_sampling: {level: token, action: clamp, metric: ratio, upper: cap, lower: 0.5}``."""
    import math

    from areal.api.cli_args import RejectionSamplingConfig
    from areal.utils.functional import apply_rejection_sampling

    # AReaL refuses upper <= 1; the next double above 1 clamps float32 ratios as 1 does.
    upper = max(float(cap), math.nextafter(1.0, 2.0))
    config = RejectionSamplingConfig(
        level="token", action="clamp", metric="ratio", upper=upper, lower=0.5
    )
    result = apply_rejection_sampling(logp_prox, logp_behavior, mask, None, config)
    return result.behave_imp_weight


def areal_sequence_mask_mean(
    logp_prox: Any, logp_behavior: Any, *, low: float, high: float, mask: Any
) -> Any:
    """AReaL ``rejection_sampling: {level: sequence, action: mask, metric: ratio, agg: mean}``."""
    import math

    from areal.api.cli_args import RejectionSamplingConfig
    from areal.utils.functional import apply_rejection_sampling

    config = RejectionSamplingConfig(
        level="sequence",
        action="mask",
        metric="ratio",
        agg="mean",
        # AReaL refuses upper <= 1: for high = 1 the next double (the same band up to rounding).
        upper=math.nextafter(1.0, 2.0) if high == 1 else float(high),
        lower=float(low) if low > 0 else None,
    )
    result = apply_rejection_sampling(logp_prox, logp_behavior, mask, None, config)
    return result.behave_imp_weight


def areal_sequence_mask_sum(
    logp_prox: Any, logp_behavior: Any, *, low: float, high: float, mask: Any
) -> Any:
    """AReaL ``rejection_sampling: {level: sequence, action: mask, metric: ratio, agg: sum}``."""
    import math

    from areal.api.cli_args import RejectionSamplingConfig
    from areal.utils.functional import apply_rejection_sampling

    config = RejectionSamplingConfig(
        level="sequence",
        action="mask",
        metric="ratio",
        agg="sum",
        # AReaL refuses upper <= 1: for high = 1 the next double (the same band up to rounding).
        upper=math.nextafter(1.0, 2.0) if high == 1 else float(high),
        lower=float(low) if low > 0 else None,
    )
    result = apply_rejection_sampling(logp_prox, logp_behavior, mask, None, config)
    return result.behave_imp_weight


def areal_packed_sequence_mask_mean(
    logp_prox: Any, logp_behavior: Any, *, low: float, high: float, cu_seqlens: Any
) -> Any:
    """AReaL's packed 1-D layout: the same sequence mask on the valid tokens and ``cu_seqlens``."""
    import math

    import torch
    from areal.api.cli_args import RejectionSamplingConfig
    from areal.utils.functional import apply_rejection_sampling

    config = RejectionSamplingConfig(
        level="sequence",
        action="mask",
        metric="ratio",
        agg="mean",
        # AReaL refuses upper <= 1: for high = 1 the next double (the same band up to rounding).
        upper=math.nextafter(1.0, 2.0) if high == 1 else float(high),
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

    # AReaL refuses upper <= 1; the next double above 1 keeps the same float32 ratios as 1 does.
    upper = math.inf if cap is None else max(float(cap), math.nextafter(1.0, 2.0))
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


#: Log-probabilities near −513 with a ratio at the lower bound, tried before every search: AReaL
#: rounds them to float32 (a ratio uncertain by 3e-5), which the oracle's float32 tolerance must
#: cover. A rare draw, which once failed the comparison before the tolerance counted that rounding.
_LOWER_EDGE_IN_FLOAT32 = [
    (
        (
            np.array([[0.0] * 4, [0.0] * 4, [-513.4989057573221] + [-0.6931471805599453] * 3]),
            np.array([[0.0] * 4, [0.0] * 4, [-512.8057585767622, 0.0, 0.0, 0.0]]),
        ),
        {"cap": 1.0, "mask": np.array([[0.0] * 4, [0.0] * 4, [1.0, 0.0, 0.0, 0.0]])},
    )
]

ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="areal.rs_token_mask",
        framework="areal",
        function=f"{_FUNCTIONAL}:apply_rejection_sampling",
        settings={"level": "token", "action": "mask", "metric": "ratio", "upper": "cap"},
        spec="decoupled_ppo",
        conventions=_FLOAT32,
        candidate=areal_token_mask,
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
        conventions={**_FLOAT32, "lower": 0.5},
        candidate=areal_token_clamp,
        examples=(_LOWER_EDGE_IN_FLOAT32,),
        note="Two-sided truncation clip(ρ, 0.5, C) (the old token_truncate with a lower bound).",
    ),
    Adapter(
        key="areal.rs_sequence_mask_mean",
        framework="areal",
        function=f"{_FUNCTIONAL}:apply_rejection_sampling",
        settings={"level": "sequence", "action": "mask", "metric": "ratio", "agg": "mean"},
        spec="masked_is_geometric",
        conventions={**_FLOAT32, "weight": "geometric", "output": "BT", "aggregate": "mean"},
        candidate=areal_sequence_mask_mean,
        note="A sequence filter on the geometric mean of ρ, and the geometric mean as every "
        "token's weight.",
    ),
    Adapter(
        key="areal.rs_sequence_mask_sum",
        framework="areal",
        function=f"{_FUNCTIONAL}:apply_rejection_sampling",
        settings={"level": "sequence", "action": "mask", "metric": "ratio", "agg": "sum"},
        spec="masked_is_sequence",
        conventions={**_FLOAT32, "weight": "geometric", "output": "BT", "aggregate": "sum"},
        candidate=areal_sequence_mask_sum,
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
            **_FLOAT32,
            "weight": "geometric",
            "output": "BT",
            "aggregate": "mean",
            "layout": "packed",
        },
        candidate=areal_packed_sequence_mask_mean,
        note="The same rule on AReaL's packed 1-D layout with cu_seqlens.",
    ),
    Adapter(
        key="areal.ppo_actor_behave_weight",
        framework="areal",
        function=f"{_FUNCTIONAL}:ppo_actor_loss_fn",
        settings={"rejection_sampling": {"level": "token", "action": "mask", "upper": "cap"}},
        spec="decoupled_ppo",
        conventions=_FLOAT32,
        candidate=areal_ppo_actor_behave_weight,
        note="The behaviour weight inside the decoupled-PPO loss (stat['behave_imp_weight']).",
    ),
)

__all__ = ["ADAPTERS", "rejection_sampling_to_refimpl"]


def areal_capacity(
    *, eta: int, version: int, batch: int, accepted: int, running: int, max_concurrent: int
) -> int:
    """AReaL's ``StalenessManager(max_staleness=eta).get_capacity()`` with the given counters."""
    from areal.infra.staleness_manager import StalenessManager

    class Version:
        def get_version(self) -> int:
            return version

    manager = StalenessManager(Version(), max_concurrent, batch, eta)
    manager.rollout_stat.accepted = accepted
    manager.rollout_stat.running = running
    capacity: int = manager.get_capacity()
    return capacity


def areal_overlong_penalty(
    lengths: Any, *, max_length: int, cache_length: int, penalty_factor: float
) -> Any:
    """AReaL's ``reward_overlong_penalty`` on zero float32 rewards (torch's default dtype, as in training).

    Each response's ``loss_mask`` row sums to its length, which is how AReaL reads it.
    """
    import torch
    from areal.utils.functional import reward_overlong_penalty

    ell = torch.as_tensor(lengths).to(torch.int64).reshape(-1)
    width = max(int(ell.max()) if ell.numel() else 0, 1)
    loss_mask = (torch.arange(width)[None, :] < ell[:, None]).to(torch.int64)
    data = {
        "rewards": torch.zeros(ell.numel()),
        "input_ids": torch.zeros((ell.numel(), 1), dtype=torch.int64),
        "loss_mask": loss_mask,
    }
    out = reward_overlong_penalty(
        data,
        overlong_tokens=int(cache_length),
        overlong_penalty_factor=float(penalty_factor),
        max_response_length=int(max_length),
    )
    return out["rewards"]


ADAPTERS = (
    *ADAPTERS,
    Adapter(
        key="areal.staleness_manager_capacity",
        framework="areal",
        function="areal.infra.staleness_manager:StalenessManager.get_capacity",
        settings={"max_head_offpolicyness": "eta", "consumer_batch_size": "batch"},
        spec="admission_capacity",
        conventions={},
        candidate=areal_capacity,
        note="The admission rule of max_head_offpolicyness, with the counters set directly.",
    ),
    Adapter(
        key="areal.reward_overlong_penalty",
        framework="areal",
        function=f"{_FUNCTIONAL}:reward_overlong_penalty",
        settings={"overlong_tokens": "cache_length", "overlong_penalty_factor": "penalty_factor"},
        spec="dapo_overlong",
        conventions={"floor": False},
        candidate=areal_overlong_penalty,
        dtype="float32",  # AReaL computes the penalty in torch's default float32
        note="DAPO's penalty without the floor at −1 (copied from verl's DAPO reward manager): "
        "beyond max_response_length it keeps falling.",
    ),
)
