"""verl (verl 0.9.1): its losses, aggregation, KL, advantage and log-probability functions.

Read from ``verl/trainer/ppo/core_algos.py``. Every registered policy loss
(``@register_policy_loss``) takes ``(old_log_prob, log_prob, advantages, response_mask,
loss_agg_mode, config, rollout_is_weights)`` and returns ``(pg_loss, metrics)``: the per-token
loss aggregated by ``agg_loss`` with ``**config.global_batch_info`` (empty in a bare
``ActorConfig``: the micro-batch's own counts; the trainer's ``ppo_loss`` fills in ``dp_size``,
``batch_num_tokens`` and ``global_batch_size``, see :mod:`._verl_losses_agg`). The clipped losses
clamp the log-ratio to ±20 before ``exp`` (``vanilla``, ``dppo_*``, ``sapo``, ``cispo``); ``gspo``
caps the token log-ratio at 10 from above only; ``clip_cov``, ``kl_cov`` and ``geo_mean`` do not
clamp. ``vanilla`` always applies the dual clip at ``clip_ratio_c`` (3.0 in ``ActorConfig``);
``sapo`` aggregates ``seq-mean-token-mean`` whatever ``loss_agg_mode`` says; ``geo_mean`` ignores
``loss_agg_mode`` and takes ``torch.mean`` over every row. The candidates build the smallest
``ActorConfig`` its ``__post_init__`` accepts and pass the spec's hyperparameters under verl's
names.
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter, Divergence

_CORE = "verl.trainer.ppo.core_algos"
#: agg_loss's token-mean and seq-mean modes divide by the batch's own counts: 0/0 on a batch with
#: no valid token, which verl's trainer never builds.
_SCALAR = {"output": "scalar", "empty_batch": "excluded"}


def verl_policy_loss_vanilla(
    logp: Any, logp_old: Any, advantages: Any, *, eps_low: float, eps_high: Any, mask: Any
) -> Any:
    """verl ``policy_loss.loss_mode="vanilla"``, ``loss_agg_mode="token-mean"``.

    ``clip_ratio_low=eps_low``, ``clip_ratio_high=eps_high`` (clip-higher; ``eps_low`` when None)
    and the dual clip at ``clip_ratio_c=3.0``, ActorConfig's default, always on.
    """
    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla
    from verl.workers.config import ActorConfig

    high = eps_low if eps_high is None else eps_high
    config = ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=float(eps_low),
        clip_ratio_low=float(eps_low),
        clip_ratio_high=float(high),
        clip_ratio_c=3.0,
    )
    loss, _ = compute_policy_loss_vanilla(
        old_log_prob=logp_old,
        log_prob=logp,
        advantages=advantages,
        response_mask=mask,
        loss_agg_mode="token-mean",
        config=config,
    )
    return loss


def verl_policy_loss_dppo_tv(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    *,
    delta_low: float,
    delta_high: Any,
    cap: Any,
    mask: Any,
) -> Any:
    """verl ``loss_mode="dppo_tv"``: ``clip_ratio_low/high`` are the TV thresholds, ``clip_ratio_c``
    the truncation of the detached ratio (``inf`` for the spec's ``cap=None``)."""
    from verl.trainer.ppo.core_algos import compute_policy_loss_dppo_tv
    from verl.workers.config import ActorConfig

    high = delta_low if delta_high is None else delta_high
    config = ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=float(delta_low),
        clip_ratio_low=float(delta_low),
        clip_ratio_high=float(high),
        clip_ratio_c=float("inf") if cap is None else float(cap),
    )
    loss, _ = compute_policy_loss_dppo_tv(
        old_log_prob=logp_old,
        log_prob=logp,
        advantages=advantages,
        response_mask=mask,
        loss_agg_mode="token-mean",
        config=config,
    )
    return loss


def verl_policy_loss_dppo_kl(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    *,
    delta_low: float,
    delta_high: Any,
    cap: Any,
    mask: Any,
) -> Any:
    """verl ``loss_mode="dppo_kl"``: ``clip_ratio_low/high`` are the binary-KL thresholds,
    ``clip_ratio_c`` the truncation of the detached ratio (``inf`` for ``cap=None``)."""
    from verl.trainer.ppo.core_algos import compute_policy_loss_dppo_kl
    from verl.workers.config import ActorConfig

    high = delta_low if delta_high is None else delta_high
    config = ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=float(delta_low),
        clip_ratio_low=float(delta_low),
        clip_ratio_high=float(high),
        clip_ratio_c=float("inf") if cap is None else float(cap),
    )
    loss, _ = compute_policy_loss_dppo_kl(
        old_log_prob=logp_old,
        log_prob=logp,
        advantages=advantages,
        response_mask=mask,
        loss_agg_mode="token-mean",
        config=config,
    )
    return loss


def verl_policy_loss_gspo(
    logp: Any, logp_old: Any, advantages: Any, *, eps_low: float, eps_high: Any, mask: Any
) -> Any:
    """verl ``loss_mode="gspo"`` with its own default ``loss_agg_mode="seq-mean-token-mean"``."""
    from verl.trainer.ppo.core_algos import compute_policy_loss_gspo
    from verl.workers.config import ActorConfig

    high = eps_low if eps_high is None else eps_high
    config = ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=float(eps_low),
        clip_ratio_low=float(eps_low),
        clip_ratio_high=float(high),
    )
    loss, _ = compute_policy_loss_gspo(
        old_log_prob=logp_old,
        log_prob=logp,
        advantages=advantages,
        response_mask=mask,
        loss_agg_mode="seq-mean-token-mean",
        config=config,
    )
    return loss


def verl_policy_loss_gspo_token_mean(
    logp: Any, logp_old: Any, advantages: Any, *, eps_low: float, eps_high: Any, mask: Any
) -> Any:
    """verl ``loss_mode="gspo"`` with the trainer's default ``loss_agg_mode="token-mean"``."""
    from verl.trainer.ppo.core_algos import compute_policy_loss_gspo
    from verl.workers.config import ActorConfig

    high = eps_low if eps_high is None else eps_high
    config = ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=float(eps_low),
        clip_ratio_low=float(eps_low),
        clip_ratio_high=float(high),
    )
    loss, _ = compute_policy_loss_gspo(
        old_log_prob=logp_old,
        log_prob=logp,
        advantages=advantages,
        response_mask=mask,
        loss_agg_mode="token-mean",
        config=config,
    )
    return loss


def verl_policy_loss_sapo(
    logp: Any, logp_old: Any, advantages: Any, *, tau_pos: float, tau_neg: float, mask: Any
) -> Any:
    """verl ``loss_mode="sapo"`` (``tau_pos``, ``tau_neg``); it aggregates
    ``seq-mean-token-mean`` whatever ``loss_agg_mode`` is passed."""
    from verl.trainer.ppo.core_algos import compute_policy_loss_sapo
    from verl.workers.config import ActorConfig

    config = ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        tau_pos=float(tau_pos),
        tau_neg=float(tau_neg),
    )
    loss, _ = compute_policy_loss_sapo(
        old_log_prob=logp_old,
        log_prob=logp,
        advantages=advantages,
        response_mask=mask,
        loss_agg_mode="token-mean",
        config=config,
    )
    return loss


def verl_policy_loss_gpg(logp: Any, advantages: Any, *, mask: Any) -> Any:
    """verl ``loss_mode="gpg"``: ``-log_prob * advantages``, ``loss_agg_mode="token-mean"``."""
    from verl.trainer.ppo.core_algos import compute_policy_loss_gpg
    from verl.workers.config import ActorConfig

    config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1)
    loss, _ = compute_policy_loss_gpg(
        old_log_prob=logp.detach(),
        log_prob=logp,
        advantages=advantages,
        response_mask=mask,
        loss_agg_mode="token-mean",
        config=config,
    )
    return loss


def verl_policy_loss_clip_cov(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    *,
    eps_low: float,
    eps_high: Any,
    dual_clip: Any,
    mask: Any,
) -> Any:
    """verl ``loss_mode="clip_cov"`` at its defaults (``clip_cov_ratio=0.0002``, ``lb=1``,
    ``ub=5``), ``loss_agg_mode="token-mean"``; the random choice among the tokens whose
    covariance is in (lb, ub) is seeded (``torch.manual_seed(0)``). verl has no dual clip here:
    ``dual_clip`` is received and not applied."""
    import torch
    from verl.trainer.ppo.core_algos import compute_policy_loss_clip_cov
    from verl.workers.config import ActorConfig

    high = eps_low if eps_high is None else eps_high
    config = ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=float(eps_low),
        clip_ratio_low=float(eps_low),
        clip_ratio_high=float(high),
    )
    torch.manual_seed(0)
    loss, _ = compute_policy_loss_clip_cov(
        old_log_prob=logp_old,
        log_prob=logp,
        advantages=advantages,
        response_mask=mask,
        loss_agg_mode="token-mean",
        config=config,
    )
    return loss


def verl_policy_loss_kl_cov(
    logp: Any, logp_old: Any, advantages: Any, *, cap: Any, mask: Any
) -> Any:
    """verl ``loss_mode="kl_cov"`` at its defaults (``kl_cov_ratio=0.0002``,
    ``ppo_kl_coef=0.1``), ``loss_agg_mode="token-mean"``: ``-A·ρ`` (no clip, no clamp), plus
    ``0.1·|log ρ|`` on the token of largest covariance. verl has no cap: ``cap`` is received and
    not applied."""
    from verl.trainer.ppo.core_algos import compute_policy_loss_kl_cov
    from verl.workers.config import ActorConfig

    config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1)
    loss, _ = compute_policy_loss_kl_cov(
        old_log_prob=logp_old,
        log_prob=logp,
        advantages=advantages,
        response_mask=mask,
        loss_agg_mode="token-mean",
        config=config,
    )
    return loss


def verl_policy_loss_geo_mean(
    logp: Any, logp_old: Any, advantages: Any, *, eps_low: float, eps_high: Any, mask: Any
) -> Any:
    """verl ``loss_mode="geo_mean"`` (GMPO): ``clip_ratio_low/high`` clip the log-ratio;
    ``loss_agg_mode`` is not read (``torch.mean`` over every row)."""
    from verl.trainer.ppo.core_algos import compute_policy_loss_geo_mean
    from verl.workers.config import ActorConfig

    high = eps_low if eps_high is None else eps_high
    config = ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=float(eps_low),
        clip_ratio_low=float(eps_low),
        clip_ratio_high=float(high),
    )
    loss, _ = compute_policy_loss_geo_mean(
        old_log_prob=logp_old,
        log_prob=logp,
        advantages=advantages,
        response_mask=mask,
        loss_agg_mode="token-mean",
        config=config,
    )
    return loss


def verl_policy_loss_dro(
    logp: Any, logp_old: Any, advantages: Any, *, tau: float, mask: Any
) -> Any:
    """verl ``loss_mode="dro"``: ``-(log_prob·A − ½·dro_beta·(log ρ)²)``, ``dro_beta=tau``,
    ``loss_agg_mode="token-mean"``."""
    from verl.trainer.ppo.core_algos import compute_policy_loss_dro
    from verl.workers.config import ActorConfig, PolicyLossConfig

    config = ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        policy_loss=PolicyLossConfig(loss_mode="dro", dro_beta=float(tau)),
    )
    loss, _ = compute_policy_loss_dro(
        old_log_prob=logp_old,
        log_prob=logp,
        advantages=advantages,
        response_mask=mask,
        loss_agg_mode="token-mean",
        config=config,
    )
    return loss


def verl_policy_loss_cispo(
    logp: Any, logp_old: Any, advantages: Any, *, eps_high: float, eps_low: Any, mask: Any
) -> Any:
    """verl ``loss_mode="cispo"``: ``-sg[clip(ρ, 1 − clip_ratio_low, 1 + clip_ratio_high)]·A·logp``,
    ``loss_agg_mode="token-mean"``. The spec's ``eps_low=None`` (no lower clip) is passed as
    ``clip_ratio_low=1.0`` (a ratio is never below 0)."""
    from verl.trainer.ppo.core_algos import compute_policy_loss_cispo
    from verl.workers.config import ActorConfig

    low = 1.0 if eps_low is None else eps_low
    config = ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=float(eps_high),
        clip_ratio_low=float(low),
        clip_ratio_high=float(eps_high),
    )
    loss, _ = compute_policy_loss_cispo(
        old_log_prob=logp_old,
        log_prob=logp,
        advantages=advantages,
        response_mask=mask,
        loss_agg_mode="token-mean",
        config=config,
    )
    return loss


def verl_policy_loss_bypass_ppo_clip(
    logp: Any, logp_old: Any, advantages: Any, *, eps_low: float, eps_high: Any, mask: Any
) -> Any:
    """verl ``loss_mode="bypass_mode"`` with ``rollout_correction.loss_type="ppo_clip"`` and no
    IS weight nor rejection (``rollout_is=None``, ``rollout_rs=None``): ``old_log_prob`` is the
    rollout's, and the loss is ``compute_policy_loss_vanilla``'s."""
    from verl.trainer.config import RolloutCorrectionConfig
    from verl.trainer.ppo.core_algos import compute_policy_loss_bypass_mode
    from verl.workers.config import ActorConfig, PolicyLossConfig

    high = eps_low if eps_high is None else eps_high
    config = ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=float(eps_low),
        clip_ratio_low=float(eps_low),
        clip_ratio_high=float(high),
        policy_loss=PolicyLossConfig(
            loss_mode="bypass_mode",
            rollout_correction=RolloutCorrectionConfig(
                rollout_is=None, rollout_rs=None, loss_type="ppo_clip"
            ),
        ),
    )
    loss, _ = compute_policy_loss_bypass_mode(
        old_log_prob=logp_old,
        log_prob=logp,
        advantages=advantages,
        response_mask=mask,
        loss_agg_mode="token-mean",
        config=config,
    )
    return loss


def verl_policy_loss_bypass_reinforce(
    logp: Any, logp_old: Any, advantages: Any, *, cap: Any, mask: Any
) -> Any:
    """verl ``loss_mode="bypass_mode"`` with ``rollout_correction.loss_type="reinforce"``,
    ``rollout_is="token"``, ``rollout_is_threshold=cap`` (``inf`` for ``cap=None``): the
    REINFORCE loss ``-A·logp·w`` with the token weight ``w = min(π/μ, C)`` computed under
    ``no_grad`` by ``compute_rollout_correction_and_rejection_mask``, ``loss_agg_mode="token-mean"``."""
    from verl.trainer.config import RolloutCorrectionConfig
    from verl.trainer.ppo.core_algos import compute_policy_loss_bypass_mode
    from verl.workers.config import ActorConfig, PolicyLossConfig

    config = ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        policy_loss=PolicyLossConfig(
            loss_mode="bypass_mode",
            rollout_correction=RolloutCorrectionConfig(
                rollout_is="token",
                rollout_is_threshold=float("inf") if cap is None else float(cap),
                rollout_rs=None,
                loss_type="reinforce",
            ),
        ),
    )
    loss, _ = compute_policy_loss_bypass_mode(
        old_log_prob=logp_old,
        log_prob=logp,
        advantages=advantages,
        response_mask=mask,
        loss_agg_mode="token-mean",
        config=config,
    )
    return loss


def _each(checks: str, divergence: Divergence) -> dict[str, Divergence]:
    return dict.fromkeys(checks.split(), divergence)


_SEQ_MEAN_EPSILON = Divergence(
    "numerical limit",
    "agg_loss 'seq-mean-token-mean' divides each row's token sum by its token count + 1e-8 "
    "(core_algos.py agg_loss), so every sequence's mean is shrunk by a relative 1e-8/L, far "
    "above float64 rounding, on every input with a nonzero loss (and its gradient likewise).",
)
_GMPO_EPSILON = Divergence(
    "numerical limit",
    "compute_policy_loss_geo_mean divides the row's summed clipped log-ratios and its summed "
    "advantages by L + 1e-8 (response_mask_sum + 1e-8), a relative 1e-8/L in the exponent and in "
    "the mean advantage, far above float64 rounding.",
)
_COV_SELECTION = Divergence(
    "convention",
    "compute_policy_loss_clip_cov multiplies by 0 the loss of max(1, ⌊clip_cov_ratio·N⌋) tokens "
    "drawn at random (torch.randperm) among those whose covariance (A − Ā)(logp − mean logp) "
    "lies in (clip_cov_lb, clip_cov_ub) and that the PPO clip does not already clip, and has no "
    "dual clip (a drawn dual_clip=c is received and not applied): no refimpl reference takes "
    "this selection (a ppo_clip with a given per-token keep mask and dual_clip=None would).",
)
_KL_COV_SELECTION = Divergence(
    "convention",
    "compute_policy_loss_kl_cov computes −A·ρ with no clip and adds ppo_kl_coef·|log ρ| at the "
    "max(1, ⌊kl_cov_ratio·N⌋) valid tokens of largest covariance (A − Ā)(logp − mean logp) "
    "(torch.topk): always at least one token, so the value and gradient differ there; the "
    "spec's cap=C is received and not applied. No refimpl reference takes this selection.",
)


def _no_clamp(name: str) -> Divergence:
    return Divergence(
        "defect",
        f"{name} computes ratio = torch.exp(log_prob - old_log_prob) without the ±20 clamp that "
        "compute_policy_loss_vanilla, _cispo, _sapo and _dppo_* apply 'for stability': a "
        "log-ratio above ~709 overflows to inf, and inf·0 in the backward of the max/where "
        "(or −A·inf with A = 0) makes the loss or the gradient NaN, also at padded entries "
        "that hold such values.",
        draft_report=f"verl 0.9.1, verl/trainer/ppo/core_algos.py:{name}: the importance ratio "
        "is torch.exp(log_prob - old_log_prob) with no clamp of the log-ratio, while "
        "compute_policy_loss_vanilla, _cispo, _sapo and _dppo_tv/_kl in the same file clamp it "
        "to [-20, 20] before exp ('Clamp negative_approx_kl for stability'). With a log-ratio "
        "beyond ~709 (a garbage value at a padded position, or a token whose probability moved "
        "that far) exp overflows; the masked aggregation then multiplies inf by 0 in the "
        "backward pass and the gradient is NaN (at padded positions too, where it should be 0). "
        "The reproduction below has such a log-ratio. Clamping negative_approx_kl as the other "
        "losses do would keep the loss and gradient finite.",
    )


_CAP_NONE_SURROGATE = Divergence(
    "convention",
    "With no truncation (the spec's cap=None, passed as rollout_is_threshold=inf) verl still "
    "computes the REINFORCE form −A·sg[w]·logp, whose value is −A·w·logp and whose gradient "
    "beyond the ±20 clamp of the log-ratio is −A·e^{±20}, where the reference's cap=None is "
    "the ratio surrogate −A·ρ (value −A·ρ, gradient 0 beyond the clamp); with a finite cap "
    "both are the log form and agree.",
)

ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="verl.policy_loss_vanilla",
        framework="verl",
        function=f"{_CORE}:compute_policy_loss_vanilla",
        settings={
            "policy_loss.loss_mode": "vanilla",
            "loss_agg_mode": "token-mean",
            "clip_ratio_low": "eps_low",
            "clip_ratio_high": "eps_high",
            "clip_ratio_c": 3.0,
        },
        spec="ppo_clip",
        conventions={
            **_SCALAR,
            "aggregation": "token_mean",
            "log_ratio_clamp": 20.0,
            "dual_clip": 3.0,
        },
        candidate=verl_policy_loss_vanilla,
        note="PPO with clip-higher and the always-on dual clip (clip_ratio_c = 3), log-ratio "
        "clamped to ±20, aggregated token-mean over the batch's valid tokens.",
    ),
    Adapter(
        key="verl.policy_loss_dppo_tv",
        framework="verl",
        function=f"{_CORE}:compute_policy_loss_dppo_tv",
        settings={
            "policy_loss.loss_mode": "dppo_tv",
            "loss_agg_mode": "token-mean",
            "clip_ratio_low": "delta_low",
            "clip_ratio_high": "delta_high",
            "clip_ratio_c": "cap",
        },
        spec="dppo",
        conventions={
            **_SCALAR,
            "aggregation": "token_mean",
            "log_ratio_clamp": 20.0,
            "divergence": "tv",
            "surrogate": "log",
        },
        candidate=verl_policy_loss_dppo_tv,
        note="DPPO-Binary-TV: -A·sg[min(ρ, clip_ratio_c)]·logp on the tokens whose probability "
        "moved less than the threshold in the advantage's direction, token-mean.",
    ),
    Adapter(
        key="verl.policy_loss_dppo_kl",
        framework="verl",
        function=f"{_CORE}:compute_policy_loss_dppo_kl",
        settings={
            "policy_loss.loss_mode": "dppo_kl",
            "loss_agg_mode": "token-mean",
            "clip_ratio_low": "delta_low",
            "clip_ratio_high": "delta_high",
            "clip_ratio_c": "cap",
        },
        spec="dppo",
        conventions={
            **_SCALAR,
            "aggregation": "token_mean",
            "log_ratio_clamp": 20.0,
            "divergence": "kl",
            "surrogate": "log",
        },
        candidate=verl_policy_loss_dppo_kl,
        note="DPPO-Binary-KL: as dppo_tv with the binary KL of the sampled token's probability "
        "(1e-8 added inside its second logarithm) as the trust region.",
    ),
    Adapter(
        key="verl.policy_loss_gspo",
        framework="verl",
        function=f"{_CORE}:compute_policy_loss_gspo",
        settings={
            "policy_loss.loss_mode": "gspo",
            "loss_agg_mode": "seq-mean-token-mean",
            "clip_ratio_low": "eps_low",
            "clip_ratio_high": "eps_high",
        },
        spec="gspo_token",
        conventions={**_SCALAR, "aggregation": "seq_mean_token_mean", "log_ratio_cap": 10.0},
        candidate=verl_policy_loss_gspo,
        divergences=_each(
            "values gradient padding_contributes_nothing on_policy_is_policy_gradient "
            "huge_log_ratios_stay_finite ratios_at_clip_boundaries",
            _SEQ_MEAN_EPSILON,
        ),
        note="GSPO-token: sg[s_b]·π/sg[π] with the token log-ratio capped at 10 from above, "
        "PPO-clipped, aggregated seq-mean-token-mean (the function's default).",
    ),
    Adapter(
        key="verl.policy_loss_gspo_token_mean",
        framework="verl",
        function=f"{_CORE}:compute_policy_loss_gspo",
        settings={
            "policy_loss.loss_mode": "gspo",
            "loss_agg_mode": "token-mean",
            "clip_ratio_low": "eps_low",
            "clip_ratio_high": "eps_high",
        },
        spec="gspo_token",
        conventions={**_SCALAR, "aggregation": "token_mean", "log_ratio_cap": 10.0},
        candidate=verl_policy_loss_gspo_token_mean,
        note="GSPO-token as the trainer runs it by default (ActorConfig.loss_agg_mode = "
        "'token-mean'), without the seq-mean epsilon.",
    ),
    Adapter(
        key="verl.policy_loss_sapo",
        framework="verl",
        function=f"{_CORE}:compute_policy_loss_sapo",
        settings={"policy_loss.loss_mode": "sapo", "tau_pos": "tau_pos", "tau_neg": "tau_neg"},
        spec="sapo",
        conventions={**_SCALAR, "aggregation": "seq_mean_token_mean", "log_ratio_clamp": 20.0},
        candidate=verl_policy_loss_sapo,
        divergences=_each(
            "values gradient padding_contributes_nothing on_policy_is_policy_gradient "
            "huge_log_ratios_stay_finite",
            _SEQ_MEAN_EPSILON,
        ),
        note="SAPO's gate σ(τ(ρ − 1))·4/τ times −A, log-ratio clamped to ±20; aggregated "
        "seq-mean-token-mean although token-mean is passed (agg mode hard-coded).",
    ),
    Adapter(
        key="verl.policy_loss_gpg",
        framework="verl",
        function=f"{_CORE}:compute_policy_loss_gpg",
        settings={"policy_loss.loss_mode": "gpg", "loss_agg_mode": "token-mean"},
        spec="reinforce",
        conventions={**_SCALAR, "aggregation": "token_mean"},
        candidate=verl_policy_loss_gpg,
        note="GPG: −A·logp (old log-probs unused), token-mean.",
    ),
    Adapter(
        key="verl.policy_loss_clip_cov",
        framework="verl",
        function=f"{_CORE}:compute_policy_loss_clip_cov",
        settings={
            "policy_loss.loss_mode": "clip_cov",
            "loss_agg_mode": "token-mean",
            "clip_ratio_low": "eps_low",
            "clip_ratio_high": "eps_high",
            "policy_loss.clip_cov_ratio": 0.0002,
            "policy_loss.clip_cov_lb": 1.0,
            "policy_loss.clip_cov_ub": 5.0,
        },
        spec="ppo_clip",
        conventions={**_SCALAR, "aggregation": "token_mean"},
        candidate=verl_policy_loss_clip_cov,
        divergences={
            **_each(
                "values gradient on_policy_is_policy_gradient ratios_at_clip_boundaries",
                _COV_SELECTION,
            ),
            **_each(
                "padding_contributes_nothing huge_log_ratios_stay_finite",
                _no_clamp("compute_policy_loss_clip_cov"),
            ),
        },
        note="PPO without dual clip nor log-ratio clamp, with max(1, ⌊0.0002·N⌋) tokens whose "
        "covariance (A − Ā)(logp − mean logp) lies in (1, 5) chosen at random (seeded) and "
        "multiplied by 0.",
    ),
    Adapter(
        key="verl.policy_loss_kl_cov",
        framework="verl",
        function=f"{_CORE}:compute_policy_loss_kl_cov",
        settings={
            "policy_loss.loss_mode": "kl_cov",
            "loss_agg_mode": "token-mean",
            "policy_loss.kl_cov_ratio": 0.0002,
            "policy_loss.ppo_kl_coef": 0.1,
        },
        spec="importance_weighted_pg",
        conventions={**_SCALAR, "aggregation": "token_mean"},
        candidate=verl_policy_loss_kl_cov,
        divergences={
            **_each("values gradient ratios_at_clip_boundaries", _KL_COV_SELECTION),
            "padding_contributes_nothing": _no_clamp("compute_policy_loss_kl_cov"),
            "huge_log_ratios_stay_finite": _KL_COV_SELECTION,
        },
        note="−A·ρ (no clip, no clamp) with ppo_kl_coef·|log ρ| added at the max(1, "
        "⌊0.0002·N⌋) tokens of largest covariance (A − Ā)(logp − mean logp).",
    ),
    Adapter(
        key="verl.policy_loss_geo_mean",
        framework="verl",
        function=f"{_CORE}:compute_policy_loss_geo_mean",
        settings={
            "policy_loss.loss_mode": "geo_mean",
            "clip_ratio_low": "eps_low",
            "clip_ratio_high": "eps_high",
        },
        spec="gmpo",
        conventions={
            "output": "scalar",
            "aggregation": "seq_mean_token_mean",
            "sequence_count": "all",
        },
        candidate=verl_policy_loss_geo_mean,
        divergences=_each(
            "values gradient padding_contributes_nothing on_policy_is_policy_gradient "
            "huge_log_ratios_stay_finite ratios_at_clip_boundaries",
            _GMPO_EPSILON,
        ),
        note="GMPO: −Ā_b·exp(mean of the sign-clipped log-ratios) per row, torch.mean over every "
        "row (all-padding rows count as 0); loss_agg_mode is not read.",
    ),
    Adapter(
        key="verl.policy_loss_dro",
        framework="verl",
        function=f"{_CORE}:compute_policy_loss_dro",
        settings={
            "policy_loss.loss_mode": "dro",
            "policy_loss.dro_beta": "tau",
            "loss_agg_mode": "token-mean",
        },
        spec="log_ratio_penalty",
        conventions={**_SCALAR, "aggregation": "token_mean"},
        candidate=verl_policy_loss_dro,
        note="DRO: −A·logp + (β/2)(log ρ)², β = dro_beta, token-mean.",
    ),
    Adapter(
        key="verl.policy_loss_cispo",
        framework="verl",
        function=f"{_CORE}:compute_policy_loss_cispo",
        settings={
            "policy_loss.loss_mode": "cispo",
            "loss_agg_mode": "token-mean",
            "clip_ratio_low": "eps_low (1.0 for None)",
            "clip_ratio_high": "eps_high",
        },
        spec="cispo",
        conventions={**_SCALAR, "aggregation": "token_mean", "log_ratio_clamp": 20.0},
        candidate=verl_policy_loss_cispo,
        note="CISPO: −sg[clip(ρ, 1 − ε_low, 1 + ε_high)]·A·logp with the log-ratio clamped to "
        "±20, token-mean.",
    ),
    Adapter(
        key="verl.policy_loss_bypass_ppo_clip",
        framework="verl",
        function=f"{_CORE}:compute_policy_loss_bypass_mode",
        settings={
            "policy_loss.loss_mode": "bypass_mode",
            "rollout_correction.loss_type": "ppo_clip",
            "rollout_correction.rollout_is": None,
            "loss_agg_mode": "token-mean",
            "clip_ratio_low": "eps_low",
            "clip_ratio_high": "eps_high",
        },
        spec="ppo_clip",
        conventions={
            **_SCALAR,
            "aggregation": "token_mean",
            "log_ratio_clamp": 20.0,
            "dual_clip": 3.0,
        },
        candidate=verl_policy_loss_bypass_ppo_clip,
        note="Bypass mode (old log-probs = the rollout's), PPO-clip: compute_policy_loss_vanilla "
        "with no IS weight.",
    ),
    Adapter(
        key="verl.policy_loss_bypass_reinforce",
        framework="verl",
        function=f"{_CORE}:compute_policy_loss_bypass_mode",
        settings={
            "policy_loss.loss_mode": "bypass_mode",
            "rollout_correction.loss_type": "reinforce",
            "rollout_correction.rollout_is": "token",
            "rollout_correction.rollout_is_threshold": "cap",
            "loss_agg_mode": "token-mean",
        },
        spec="importance_weighted_pg",
        conventions={**_SCALAR, "aggregation": "token_mean", "log_ratio_clamp": 20.0},
        candidate=verl_policy_loss_bypass_reinforce,
        divergences=_each(
            "values padding_contributes_nothing clipped_region_has_zero_gradient "
            "huge_log_ratios_stay_finite ratios_at_clip_boundaries",
            _CAP_NONE_SURROGATE,
        ),
        note="Bypass mode, REINFORCE: −A·logp·sg[min(exp(clip(log π − log μ, ±20)), C)], "
        "token-mean.",
    ),
)

# agg_loss in every loss_agg_mode (with its partition on the trainer's path) and the KL estimators
from refimpl.frameworks import _verl_losses_agg  # noqa: E402

ADAPTERS = (*ADAPTERS, *_verl_losses_agg.ADAPTERS)

# the outcome advantage estimators, the log-probability helpers and the KL penalty in the reward
from refimpl.frameworks import _verl_losses_adv, _verl_losses_reward  # noqa: E402

ADAPTERS = (*ADAPTERS, *_verl_losses_adv.ADAPTERS, *_verl_losses_reward.ADAPTERS)
