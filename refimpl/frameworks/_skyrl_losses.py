"""SkyRL (skyrl 0.3.0): its policy losses, read from ``skyrl/backends/skyrl_train/utils/ppo_utils.py``.

Every policy loss of ``PolicyLossRegistry`` returns ``reduce_loss(loss, loss_mask)``, the plain sum
``(loss * loss_mask).sum()``: SkyRL reduces by *pre-scaling the advantages*
(``apply_loss_reduction_to_advantages_minibatch``, called by ``RayPPOTrainer._normalize_advantages``
on each mini-batch before it is sharded), then the worker multiplies the micro-batch's sum by
``grad_sum_correction_factor = dp_size`` (``workers/worker.py:_forward_backward_micro``) and the
data-parallel all-reduce averages. Every registered loss is linear in the advantages for a positive
scale (the clip, dual clip, SAPO gate and DPPO mask depend on the sign of ``A`` only), so the
adapters compare the loss with the raw advantages as ``output="scalar"``, ``aggregation="token_sum"``;
the aggregation modes are :mod:`refimpl.frameworks._skyrl_losses_stats`.

``ppo_utils`` cannot be imported here (it imports ``skyrl.train.config``, whose import needs
``skyrl_gym``, not a dependency of the ``skyrl`` distribution), so the functions are executed from
its installed file by :func:`refimpl.frameworks.load_from_source`; the registry and its decorators
are loaded with them, so each function is the registered wrapper, exactly as
``PolicyLossRegistry.get(name)`` returns it. The ratio of ``regular``/``dual_clip``/``cispo``/``dppo``
is ``safe_exp_delta`` (float32, log-ratio clamped to ±20); SAPO clamps to ±20 in the input dtype;
GSPO caps the token log-weight at 10; ``clip_cov``, ``kl_cov`` and ``importance_sampling``
exponentiate the unclamped log-ratio.

Two terms are not linear in the advantages, so the pre-scaling changes them (run on fixed inputs,
not a check: no spec has the selection): KL-Cov's ``ppo_kl_coef·|log ρ|`` is summed unscaled, so
under ``token_mean`` it weighs ``N`` times more than the mean of ``pg_losses_kl`` it is ported
from; Clip-Cov compares the covariance of the *scaled* advantages (``1/N`` of the raw one under
``token_mean``) with ``clip_cov_lb``/``clip_cov_ub`` (1 and 5), so it rarely selects a token. The
adapters fix the selection (``ppo_kl_coef = 0``; an empty band), where both are unaffected.
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter, Divergence
from refimpl.frameworks._skyrl_losses_adv import ADAPTERS as _ADV
from refimpl.frameworks._skyrl_losses_jax import ADAPTERS as _JAX
from refimpl.frameworks._skyrl_losses_megatron import ADAPTERS as _MEGATRON
from refimpl.frameworks._skyrl_losses_megatron_logprobs import ADAPTERS as _MEGATRON_LOGPROBS
from refimpl.frameworks._skyrl_losses_megatron_packed import ADAPTERS as _MEGATRON_PACKED
from refimpl.frameworks._skyrl_losses_more import ADAPTERS as _MORE
from refimpl.frameworks._skyrl_losses_normalize import ADAPTERS as _NORMALIZE
from refimpl.frameworks._skyrl_losses_reward import ADAPTERS as _REWARD
from refimpl.frameworks._skyrl_losses_stats import ADAPTERS as _STATS
from refimpl.frameworks._skyrl_losses_tx import ADAPTERS as _TX
from refimpl.frameworks._skyrl_losses_worker import ADAPTERS as _WORKER
from refimpl.frameworks._skyrl_megatron_cp import ADAPTERS as _MEGATRON_CP
from refimpl.frameworks._stubs import SOURCE_LOADS

_PPO = "skyrl.backends.skyrl_train.utils.ppo_utils"
_SCALAR = {"output": "scalar", "aggregation": "token_sum"}
_SAFE_EXP = {"log_ratio_clamp": 20.0, "compute_dtype": "float32"}


def skyrl_ppo_regular(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    *,
    eps_low: Any,
    eps_high: Any,
    dual_clip: Any,
    mask: Any,
) -> Any:
    """``ppo_policy_loss`` with ``policy_loss_type="regular"`` (``"dual_clip"`` with
    ``clip_ratio_c=dual_clip`` when a dual clip is drawn); returns its summed loss."""
    from omegaconf import OmegaConf

    from refimpl.frameworks import load_from_source

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    config = OmegaConf.create(
        {
            "policy_loss_type": "regular" if dual_clip is None else "dual_clip",
            "eps_clip_low": eps_low,
            "eps_clip_high": eps_low if eps_high is None else eps_high,
            "clip_ratio_c": 3.0 if dual_clip is None else float(dual_clip),
            "off_policy_correction": None,
        }
    )
    loss, _ = ppo["ppo_policy_loss"](logp, logp_old, advantages, config, loss_mask=mask)
    return loss


def skyrl_ppo_dual_clip(
    logp: Any, logp_old: Any, advantages: Any, *, eps_low: Any, eps_high: Any, mask: Any
) -> Any:
    """``ppo_policy_loss`` with ``policy_loss_type="dual_clip"`` and its default ``clip_ratio_c=3.0``."""
    from omegaconf import OmegaConf

    from refimpl.frameworks import load_from_source

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    config = OmegaConf.create(
        {
            "policy_loss_type": "dual_clip",
            "eps_clip_low": eps_low,
            "eps_clip_high": eps_low if eps_high is None else eps_high,
            "clip_ratio_c": 3.0,
            "off_policy_correction": None,
        }
    )
    loss, _ = ppo["ppo_policy_loss"](logp, logp_old, advantages, config, loss_mask=mask)
    return loss


def skyrl_gspo(
    logp: Any, logp_old: Any, advantages: Any, *, eps_low: Any, eps_high: Any, mask: Any
) -> Any:
    """``gspo_policy_loss`` (GSPO-token) with ``loss_reduction="sequence_mean"``; its summed loss."""
    from omegaconf import OmegaConf

    from refimpl.frameworks import load_from_source

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    config = OmegaConf.create(
        {
            "loss_reduction": "sequence_mean",
            "eps_clip_low": eps_low,
            "eps_clip_high": eps_low if eps_high is None else eps_high,
            "off_policy_correction": None,
        }
    )
    loss, _ = ppo["gspo_policy_loss"](logp, logp_old, advantages, config, loss_mask=mask)
    return loss


def skyrl_cispo(
    logp: Any, logp_old: Any, advantages: Any, *, eps_high: Any, eps_low: Any, mask: Any
) -> Any:
    """``compute_policy_loss_cispo``; no lower clip (``eps_low=None``) is ``cispo_eps_clip_low=1``
    (the clamp's lower bound 0 never binds a ratio)."""
    from omegaconf import OmegaConf

    from refimpl.frameworks import load_from_source

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    low = 1.0 if eps_low is None else float(eps_low)
    config = OmegaConf.create(
        {
            "cispo": {"cispo_eps_clip_low": low, "cispo_eps_clip_high": float(eps_high)},
            "off_policy_correction": None,
        }
    )
    loss, _ = ppo["compute_policy_loss_cispo"](logp, logp_old, advantages, config, loss_mask=mask)
    return loss


def skyrl_sapo(
    logp: Any, logp_old: Any, advantages: Any, *, tau_pos: Any, tau_neg: Any, mask: Any
) -> Any:
    """``sapo_policy_loss`` with ``loss_reduction="sequence_mean"``; its summed loss."""
    from omegaconf import OmegaConf

    from refimpl.frameworks import load_from_source

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    config = OmegaConf.create(
        {
            "loss_reduction": "sequence_mean",
            "sapo": {"tau_pos": float(tau_pos), "tau_neg": float(tau_neg)},
            "off_policy_correction": None,
        }
    )
    loss, _ = ppo["sapo_policy_loss"](logp, logp_old, advantages, config, loss_mask=mask)
    return loss


def skyrl_dppo_tv(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    *,
    delta_low: Any,
    delta_high: Any,
    cap: Any,
    mask: Any,
) -> Any:
    """``dppo_policy_loss`` with ``dppo_type="binary_tv"``, no rollout log-probs (μ = π_old)."""
    from omegaconf import OmegaConf

    from refimpl.frameworks import load_from_source

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    high = delta_low if delta_high is None else delta_high
    config = OmegaConf.create(
        {
            "dppo": {"dppo_type": "binary_tv", "delta_low": delta_low, "delta_high": high},
            "off_policy_correction": None,
        }
    )
    loss, _ = ppo["dppo_policy_loss"](logp, logp_old, advantages, config, loss_mask=mask)
    return loss


def skyrl_dppo_kl(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    *,
    delta_low: Any,
    delta_high: Any,
    cap: Any,
    mask: Any,
) -> Any:
    """``dppo_policy_loss`` with ``dppo_type="binary_kl"``, no rollout log-probs (μ = π_old)."""
    from omegaconf import OmegaConf

    from refimpl.frameworks import load_from_source

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    high = delta_low if delta_high is None else delta_high
    config = OmegaConf.create(
        {
            "dppo": {"dppo_type": "binary_kl", "delta_low": delta_low, "delta_high": high},
            "off_policy_correction": None,
        }
    )
    loss, _ = ppo["dppo_policy_loss"](logp, logp_old, advantages, config, loss_mask=mask)
    return loss


def skyrl_clip_cov(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    *,
    eps_low: Any,
    eps_high: Any,
    dual_clip: Any,
    mask: Any,
) -> Any:
    """``compute_policy_loss_clip_cov`` with an empty covariance band (``clip_cov_lb = clip_cov_ub``):
    no token is selected, so the random selection (seeded) is fixed and the loss is its PPO part."""
    import torch
    from omegaconf import OmegaConf

    from refimpl.frameworks import load_from_source

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    config = OmegaConf.create(
        {
            "eps_clip_low": eps_low,
            "eps_clip_high": eps_low if eps_high is None else eps_high,
            "clip_cov": {"clip_ratio": 0.0002, "clip_cov_lb": 1.0, "clip_cov_ub": 1.0},
        }
    )
    torch.manual_seed(0)
    loss, _ = ppo["compute_policy_loss_clip_cov"](
        logp, logp_old, advantages, config, loss_mask=mask
    )
    return loss


def skyrl_kl_cov(logp: Any, logp_old: Any, advantages: Any, *, cap: Any, mask: Any) -> Any:
    """``compute_policy_loss_kl_cov`` with ``ppo_kl_coef=0``: the selected tokens' |log ρ| term is
    0, so the top-k selection does not change the loss, ``−A·ρ`` (no clip); ``cap`` is ignored."""
    from omegaconf import OmegaConf

    from refimpl.frameworks import load_from_source

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    config = OmegaConf.create({"kl_cov": {"kl_cov_frac": 0.2, "ppo_kl_coef": 0.0}})
    loss, _ = ppo["compute_policy_loss_kl_cov"](logp, logp_old, advantages, config, loss_mask=mask)
    return loss


def skyrl_importance_sampling(
    logp: Any, logp_old: Any, advantages: Any, *, cap: Any, mask: Any
) -> Any:
    """``importance_sampling_loss`` (Tinker's ``importance_sampling``): ``Σ −ρ·A·mask``; ``cap`` is
    ignored (SkyRL has none)."""
    from refimpl.frameworks import load_from_source

    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    loss, _ = ppo["importance_sampling_loss"](logp, logp_old, advantages, None, loss_mask=mask)
    return loss


_NO_CAP = Divergence(
    "convention",
    "SkyRL never caps the importance ratio; the spec draws a cap C (min(ρ, C), a log surrogate) "
    "that the candidate cannot pass, and no convention declares 'no cap'.",
)
_NO_DUAL_CLIP = Divergence(
    "convention",
    "compute_policy_loss_clip_cov never applies a dual clip; the spec draws one (dual_clip=c) "
    "that the candidate cannot pass, and no convention declares 'no dual clip'.",
)
_OVERFLOW = Divergence(
    "defect",
    "The ratio is torch.exp(log_probs - old_log_probs) of the unclamped log-ratio and the mask is "
    "applied by multiplication ((loss * loss_mask).sum()), so an overflowing ratio at a padded "
    "position, or at a token with A = 0, gives inf·0 = NaN in the loss and the gradient.",
    draft_report=(
        "skyrl 0.3.0, skyrl/backends/skyrl_train/utils/ppo_utils.py: compute_policy_loss_clip_cov, "
        "compute_policy_loss_kl_cov and importance_sampling_loss compute the importance ratio as "
        "torch.exp(log_probs - old_log_probs) without clamping the log-ratio, whereas "
        "ppo_policy_loss, compute_policy_loss_cispo and dppo_policy_loss use "
        "safe_exp_delta(clip=20.0) ('Clamp the delta before exponentiating to avoid potential "
        "overflow') and sapo_policy_loss clamps the log-ratio to [-20, 20] 'for stability'. The "
        "loss is then masked by multiplication (reduce_loss: (loss * loss_mask).sum(); "
        "importance_sampling_loss: (elementwise_loss * loss_mask).sum()), so a log-ratio that "
        "overflows exp (above ~88.7 in float32) at a padded position, or at a valid token whose "
        "advantage is 0, yields inf * 0 = NaN in the loss and in the gradient. Failing input: a "
        "padded position whose log_probs - old_log_probs is very large (1e30 in the check; any "
        "value above ~88.7 in float32), or a valid token with advantage 0 and log-ratio 1000: "
        "the loss is NaN where masked positions should contribute nothing. Computing the ratio "
        "with safe_exp_delta, as the other losses do, and selecting with torch.where before the "
        "sum would keep it finite."
    ),
)

#: The uncapped ratio surrogates of an unclamped log-ratio (compute_policy_loss_kl_cov and
#: importance_sampling_loss): the spec's drawn cap is a convention they cannot take, the overflow a
#: defect.
_UNCAPPED_UNCLAMPED = {
    "values": _NO_CAP,
    "gradient": _NO_CAP,
    "ratios_at_clip_boundaries": _NO_CAP,
    "padding_contributes_nothing": _OVERFLOW,
    "huge_log_ratios_stay_finite": _OVERFLOW,
}
_UNCLAMPED = "exp(logp − logp_old) of the unclamped log-ratio"

ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="skyrl.policy_loss_regular",
        framework="skyrl",
        function=f"{_PPO}:ppo_policy_loss",
        settings={
            "policy_loss_type": "regular",
            "eps_clip_low": "eps_low",
            "eps_clip_high": "eps_high",
        },
        spec="ppo_clip",
        conventions={**_SCALAR, **_SAFE_EXP},
        candidate=skyrl_ppo_regular,
        note="Summed clipped surrogate; a drawn dual clip c selects policy_loss_type='dual_clip' "
        "with clip_ratio_c=c.",
    ),
    Adapter(
        key="skyrl.policy_loss_dual_clip",
        framework="skyrl",
        function=f"{_PPO}:ppo_policy_loss",
        settings={"policy_loss_type": "dual_clip", "clip_ratio_c": 3.0},
        spec="ppo_clip",
        conventions={**_SCALAR, **_SAFE_EXP, "dual_clip": 3.0},
        candidate=skyrl_ppo_dual_clip,
        note="Summed dual-clip surrogate at SkyRL's default clip_ratio_c = 3.",
    ),
    Adapter(
        key="skyrl.policy_loss_gspo",
        framework="skyrl",
        function=f"{_PPO}:gspo_policy_loss",
        settings={"policy_loss_type": "gspo", "loss_reduction": "sequence_mean"},
        spec="gspo_token",
        conventions={**_SCALAR, "log_ratio_cap": 10.0},
        candidate=skyrl_gspo,
        note="GSPO-token, s = sg[exp(masked mean log ρ)]·π/sg[π], token log-weight capped at 10, summed.",
    ),
    Adapter(
        key="skyrl.policy_loss_cispo",
        framework="skyrl",
        function=f"{_PPO}:compute_policy_loss_cispo",
        settings={"policy_loss_type": "cispo"},
        spec="cispo",
        conventions={**_SCALAR, **_SAFE_EXP},
        candidate=skyrl_cispo,
        note="−A·sg[clamp(ρ, 1−ε_l, 1+ε_h)]·logp summed; eps_low=None maps to cispo_eps_clip_low=1.",
    ),
    Adapter(
        key="skyrl.policy_loss_sapo",
        framework="skyrl",
        function=f"{_PPO}:sapo_policy_loss",
        settings={"policy_loss_type": "sapo", "loss_reduction": "sequence_mean"},
        spec="sapo",
        conventions={**_SCALAR, "log_ratio_clamp": 20.0},
        candidate=skyrl_sapo,
        note="−A·(4/τ)·σ(τ(ρ−1)) with τ by the sign of A, summed.",
    ),
    Adapter(
        key="skyrl.policy_loss_dppo_binary_tv",
        framework="skyrl",
        function=f"{_PPO}:dppo_policy_loss",
        settings={"policy_loss_type": "dppo", "dppo_type": "binary_tv"},
        spec="dppo",
        conventions={**_SCALAR, **_SAFE_EXP, "divergence": "tv", "surrogate": "ratio"},
        candidate=skyrl_dppo_tv,
        note="−A·ρ·mask_TV summed, μ = π_old (no rollout log-probs passed).",
    ),
    Adapter(
        key="skyrl.policy_loss_dppo_binary_kl",
        framework="skyrl",
        function=f"{_PPO}:dppo_policy_loss",
        settings={"policy_loss_type": "dppo", "dppo_type": "binary_kl"},
        spec="dppo",
        conventions={**_SCALAR, **_SAFE_EXP, "divergence": "kl", "surrogate": "ratio"},
        candidate=skyrl_dppo_kl,
        note="−A·ρ·mask_KL summed, μ = π_old; the binary KL adds 1e-8 inside its log.",
    ),
    Adapter(
        key="skyrl.policy_loss_clip_cov",
        framework="skyrl",
        function=f"{_PPO}:compute_policy_loss_clip_cov",
        settings={"policy_loss_type": "clip_cov", "clip_cov_lb": 1.0, "clip_cov_ub": 1.0},
        spec="ppo_clip",
        conventions={**_SCALAR},
        candidate=skyrl_clip_cov,
        divergences={
            "values": _NO_DUAL_CLIP,
            "gradient": _NO_DUAL_CLIP,
            "padding_contributes_nothing": _OVERFLOW,
            "huge_log_ratios_stay_finite": _OVERFLOW,
        },
        note=f"Empty covariance band: the PPO part, max(−Aρ, −A·clip(ρ)) with {_UNCLAMPED}, summed.",
    ),
    Adapter(
        key="skyrl.policy_loss_kl_cov",
        framework="skyrl",
        function=f"{_PPO}:compute_policy_loss_kl_cov",
        settings={"policy_loss_type": "kl_cov", "ppo_kl_coef": 0.0},
        spec="importance_weighted_pg",
        conventions={**_SCALAR},
        candidate=skyrl_kl_cov,
        divergences=_UNCAPPED_UNCLAMPED,
        note=f"ppo_kl_coef = 0: −A·ρ with {_UNCLAMPED}, summed.",
    ),
    Adapter(
        key="skyrl.policy_loss_importance_sampling",
        framework="skyrl",
        function=f"{_PPO}:importance_sampling_loss",
        settings={"policy_loss_type": "importance_sampling"},
        spec="importance_weighted_pg",
        conventions={**_SCALAR},
        candidate=skyrl_importance_sampling,
        divergences=_UNCAPPED_UNCLAMPED,
        note=f"Σ −A·ρ·mask with {_UNCLAMPED}.",
    ),
)

#: Whether :data:`refimpl.frameworks.SOURCE_LOADS` executes ``ppo_utils`` from its file (an entry
#: asked for in this round's report); until it does, only the ``torch_utils`` adapters (log-probs,
#: entropy) are registered, since every other one calls a function of ``ppo_utils``.
PPO_UTILS_LOADED = any(e.source == _PPO for e in SOURCE_LOADS)

ADAPTERS = tuple(
    a
    for a in (
        *ADAPTERS,
        *_MORE,
        *_STATS,
        *_ADV,
        *_WORKER,
        *_MEGATRON,
        *_MEGATRON_LOGPROBS,
        *_MEGATRON_PACKED,
        *_MEGATRON_CP,
        *_NORMALIZE,
        *_REWARD,
        *_JAX,
        *_TX,
    )
    if PPO_UTILS_LOADED or not a.function.startswith(f"{_PPO}:")
)

__all__ = ["ADAPTERS", "PPO_UTILS_LOADED"]
