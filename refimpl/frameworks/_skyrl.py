"""SkyRL (skyrl 0.3.0): off-policy correction (TIS, token, outlier-token and sequence masks), read
from its installed sources.

``skyrl.backends.skyrl_train.utils.off_policy_correction_utils`` computes ``π_old/π_rollout`` with
``safe_exp_delta`` (``skyrl_train/utils/torch_utils.py``): the log-ratio is cast to float32, clamped
to ±20 and exponentiated, then cast back, so a float64 call gets float32 accuracy. Its sequence
results are ``(B, 1)``. Importing it needs the stub of :mod:`refimpl.frameworks._stubs`.

``compute_outlier_token_mask`` (on whenever ``outlier_token_is_threshold_low`` or ``..._high`` is
set; ``compute_off_policy_correction`` multiplies it into the loss mask before the token mask, the
TIS ratio and the sequence mask) keeps a row when no valid token has ``ρ < low`` or ``ρ > high``:
the any-token veto, ``any_token_veto(threshold=low, upper=high)``, decided on the float32
``exp(clamp(d, ±20))`` rather than in log space. An unset threshold checks nothing on its side:
``low`` unset is ``any_token_veto(threshold=None, upper=high)``, the ceiling alone.
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter
from refimpl.frameworks._stubs import load_from_source

_UTILS = "skyrl.backends.skyrl_train.utils.off_policy_correction_utils"
_SAFE_EXP = {"log_ratio_clamp": 20.0, "compute_dtype": "float32"}


def skyrl_token_tis(logp_old: Any, logp_rollout: Any, *, cap: float, mask: Any) -> Any:
    """SkyRL ``tis_ratio_type="token"``, ``token_tis_ratio_clip_high=cap``."""
    from omegaconf import OmegaConf
    from skyrl.backends.skyrl_train.utils.off_policy_correction_utils import compute_tis_ratio

    config = OmegaConf.create({"token_tis_ratio_clip_high": float(cap)})
    ratio, _ = compute_tis_ratio(logp_old, logp_rollout, mask, "token", config)
    return ratio


def skyrl_sequence_tis(logp_old: Any, logp_rollout: Any, *, cap: float, mask: Any) -> Any:
    """SkyRL ``tis_ratio_type="sequence"``, ``sequence_tis_ratio_clip_high=cap``."""
    from omegaconf import OmegaConf
    from skyrl.backends.skyrl_train.utils.off_policy_correction_utils import compute_tis_ratio

    config = OmegaConf.create({"sequence_tis_ratio_clip_high": float(cap)})
    ratio, _ = compute_tis_ratio(logp_old, logp_rollout, mask, "sequence", config)
    return ratio


def skyrl_token_mask(
    logp_old: Any, logp_rollout: Any, *, low: float, high: float, mask: Any
) -> Any:
    """SkyRL ``token_mask_is_threshold_low=low``, ``token_mask_is_threshold_high=high``."""
    from omegaconf import OmegaConf
    from skyrl.backends.skyrl_train.utils.off_policy_correction_utils import compute_token_mask

    config = OmegaConf.create(
        {"token_mask_is_threshold_low": float(low), "token_mask_is_threshold_high": float(high)}
    )
    kept, _ = compute_token_mask(logp_old, logp_rollout, mask, config)
    return kept


def skyrl_outlier_token_mask(
    logp_old: Any,
    logp_rollout: Any,
    *,
    threshold: float | None,
    mask: Any,
    upper: float | None = None,
) -> Any:
    """SkyRL ``compute_outlier_token_mask`` with ``outlier_token_is_threshold_low=threshold`` and
    ``outlier_token_is_threshold_high=upper`` (each unset when ``None``); its ``(B, 1)`` mask
    squeezed."""
    from omegaconf import OmegaConf
    from skyrl.backends.skyrl_train.utils.off_policy_correction_utils import (
        compute_outlier_token_mask,
    )

    low = None if threshold is None else float(threshold)
    high = None if upper is None else float(upper)
    config = OmegaConf.create(
        {"outlier_token_is_threshold_low": low, "outlier_token_is_threshold_high": high}
    )
    kept, _ = compute_outlier_token_mask(logp_old, logp_rollout, mask, config)
    return kept[:, 0]


def skyrl_geometric_sequence_mask(
    logp_old: Any, logp_rollout: Any, *, low: float, high: float, mask: Any
) -> Any:
    """SkyRL ``sequence_mask_metric="geometric"``, ``geo_mask_low=low``, ``geo_mask_high=high``."""
    from omegaconf import OmegaConf
    from skyrl.backends.skyrl_train.utils.off_policy_correction_utils import compute_sequence_mask

    config = OmegaConf.create({"geo_mask_low": float(low), "geo_mask_high": float(high)})
    kept, _ = compute_sequence_mask(logp_old, logp_rollout, mask, "geometric", config)
    return kept


def skyrl_product_sequence_mask(
    logp_old: Any, logp_rollout: Any, *, low: float, high: float, mask: Any
) -> Any:
    """SkyRL ``sequence_mask_metric="product"``, ``product_mask_low=low``, ``product_mask_high=high``."""
    from omegaconf import OmegaConf
    from skyrl.backends.skyrl_train.utils.off_policy_correction_utils import compute_sequence_mask

    config = OmegaConf.create({"product_mask_low": float(low), "product_mask_high": float(high)})
    kept, _ = compute_sequence_mask(logp_old, logp_rollout, mask, "product", config)
    return kept


ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="skyrl.tis_token",
        framework="skyrl",
        function=f"{_UTILS}:compute_tis_ratio",
        settings={"tis_ratio_type": "token", "token_tis_ratio_clip_high": "cap"},
        spec="tis",
        conventions={**_SAFE_EXP, "padding": "ignored"},
        candidate=skyrl_token_tis,
        note="min(ρ, C) per token; padding is not masked (the loss mask is applied later).",
    ),
    Adapter(
        key="skyrl.tis_sequence",
        framework="skyrl",
        function=f"{_UTILS}:compute_tis_ratio",
        settings={"tis_ratio_type": "sequence", "sequence_tis_ratio_clip_high": "cap"},
        spec="tis_sequence",
        conventions={**_SAFE_EXP, "output": "B1", "padding": "one"},
        candidate=skyrl_sequence_tis,
        note="min(exp(clip(Σ log ρ, ±20)), C) as (B, 1); an all-padding row has Σ = 0, weight 1.",
    ),
    Adapter(
        key="skyrl.token_mask",
        framework="skyrl",
        function=f"{_UTILS}:compute_token_mask",
        settings={"token_mask_is_threshold_low": "low", "token_mask_is_threshold_high": "high"},
        spec="masked_is",
        conventions={**_SAFE_EXP, "weight": "indicator", "padding": "one"},
        candidate=skyrl_token_mask,
        note="A 0/1 mask lo ≤ ρ ≤ hi per token, 1 at padding (multiplied into the loss mask).",
    ),
    Adapter(
        key="skyrl.outlier_token_mask",
        framework="skyrl",
        function=f"{_UTILS}:compute_outlier_token_mask",
        settings={
            "outlier_token_is_threshold_low": "threshold",
            "outlier_token_is_threshold_high": "upper",
        },
        spec="any_token_veto",
        conventions={"upper": "given"},
        candidate=skyrl_outlier_token_mask,
        note="A row is kept when no valid token has ρ < low or ρ > high, ρ = exp(clamp(d, ±20)) in "
        "float32 (a ratio within float32 rounding of a threshold may go the other way); the (B, 1) "
        "mask squeezed.",
    ),
    Adapter(
        key="skyrl.outlier_token_mask_low",
        framework="skyrl",
        function=f"{_UTILS}:compute_outlier_token_mask",
        settings={"outlier_token_is_threshold_low": "threshold"},
        spec="any_token_veto",
        conventions={"upper": "absent"},
        candidate=skyrl_outlier_token_mask,
        note="outlier_token_is_threshold_high unset: a row is kept when no valid token has "
        "ρ < low (float32 ρ, as above); the (B, 1) mask squeezed.",
    ),
    Adapter(
        key="skyrl.outlier_token_mask_high",
        framework="skyrl",
        function=f"{_UTILS}:compute_outlier_token_mask",
        settings={"outlier_token_is_threshold_high": "upper"},
        spec="any_token_veto",
        conventions={"upper": "only"},
        candidate=skyrl_outlier_token_mask,
        note="outlier_token_is_threshold_low unset: a row is kept when no valid token has "
        "ρ > high (float32 ρ, as above), however low its other ratios; the (B, 1) mask squeezed.",
    ),
    Adapter(
        key="skyrl.sequence_mask_geometric",
        framework="skyrl",
        function=f"{_UTILS}:compute_sequence_mask",
        settings={
            "sequence_mask_metric": "geometric",
            "geo_mask_low": "low",
            "geo_mask_high": "high",
        },
        spec="masked_is_geometric",
        conventions={**_SAFE_EXP, "weight": "indicator", "output": "B1", "padding": "ignored"},
        candidate=skyrl_geometric_sequence_mask,
        note="A (B, 1) 0/1 mask on exp(clip(mean log ρ, ±20)); an all-padding row is judged at ratio 1.",
    ),
    Adapter(
        key="skyrl.sequence_mask_product",
        framework="skyrl",
        function=f"{_UTILS}:compute_sequence_mask",
        settings={
            "sequence_mask_metric": "product",
            "product_mask_low": "low",
            "product_mask_high": "high",
        },
        spec="masked_is_sequence",
        conventions={**_SAFE_EXP, "weight": "indicator", "output": "B1", "padding": "ignored"},
        candidate=skyrl_product_sequence_mask,
        note="A (B, 1) 0/1 mask on exp(clip(Σ log ρ, ±20)).",
    ),
)

__all__ = ["ADAPTERS"]


def skyrl_capacity(
    *, eta: int, version: int, batch: int, accepted: int, running: int, max_concurrent: int
) -> int:
    """SkyRL's ``_AsyncStalenessManager._compute_capacity_unlocked`` (loaded from its installed file)."""
    manager_class = load_from_source("skyrl.train.fully_async_trainer")["_AsyncStalenessManager"]
    manager = manager_class(
        max_concurrent_generation_groups=max_concurrent,
        mini_batch_size=batch,
        max_staleness_steps=eta,
    )
    manager._current_global_step = version + 1  # SkyRL counts the step being worked on, from 1
    manager._stat.accepted = accepted
    manager._stat.running = running
    capacity: int = manager._compute_capacity_unlocked()
    return capacity


ADAPTERS = (
    *ADAPTERS,
    Adapter(
        key="skyrl.async_staleness_capacity",
        framework="skyrl",
        function="skyrl.train.fully_async_trainer:_AsyncStalenessManager._compute_capacity_unlocked",
        settings={"max_staleness_steps": "eta", "mini_batch_size": "batch"},
        spec="admission_capacity",
        conventions={},
        candidate=skyrl_capacity,
        note="(S + g)·B with g = version + 1; the class is executed from its installed file "
        "(refimpl.frameworks.SOURCE_LOADS: its module cannot be imported on Python 3.11).",
    ),
)
