"""TRL (trl 1.16.0): CISPO and SAPO at sequence level, read from its installed sources.

``trl/trainer/grpo_trainer.py`` ``GRPOTrainer._compute_loss`` with
``importance_sampling_level="sequence"`` computes ``log_importance_weights = (log_ratio * mask)
.sum(-1) / mask.sum(-1).clamp(min=1.0)`` as ``(B, 1)`` and ``coef_1 = exp(...)`` before the loss
type's branch, so:

- ``loss_type="cispo"``: ``clamped_ratios = clamp(coef_1, max=epsilon_high).detach()`` (the cap is
  ``epsilon_high`` itself, no lower bound), ``per_token_loss = −clamped_ratios · A · logp``,
  summed over the valid tokens and divided by ``num_items_in_batch / num_processes`` (times
  ``K / steps_per_generation``);
- ``loss_type="sapo"``: ``σ(τ(coef_1 − 1))·4/τ`` with ``τ = where(A > 0, sapo_temperature_pos,
  sapo_temperature_neg)``, ``per_token_loss = −gate · A``, averaged per sequence then over every
  row (``grpo``'s aggregation), the gate differentiated through the sequence mean.

Neither clamps the log-ratio before ``exp``.

- ``loss_type="vespo"``: ``phi_seq = get_gamma_weights(...)`` (a ``@torch.no_grad()``
  staticmethod): each token's log-ratio clamped to ±20, summed over the sequence (not averaged),
  the sum clamped to ``[log 1e-8, 20]``, ``φ = exp(λ + k·log w − λ·w)`` with ``(k, λ)`` by
  ``A >= 0`` (``λ`` raised to at least 1e-4), NaN/inf set to 0; ``per_token_loss = −φ · A · logp``,
  aggregated like ``cispo`` (Σ over the valid tokens / ``num_items_in_batch``).
- ``top_entropy_quantile < 1``: ``get_high_entropy_mask(entropies, mask, 1 − top_entropy_quantile)``
  takes the valid entropies as float32 (``.float()``), gathers them over the ranks, and keeps the
  valid tokens with ``entropies · mask >= torch.quantile(gathered, threshold)``.
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter, Divergence

_GRPO = "trl.trainer.grpo_trainer:GRPOTrainer._compute_loss"


def trl_cispo_sequence_loss(
    logp: Any, logp_old: Any, advantages: Any, *, eps_high: Any, mask: Any
) -> Any:
    """TRL ``loss_type="cispo"``, ``importance_sampling_level="sequence"``, ``epsilon_high = 1 +
    eps_high`` (TRL's is the cap itself): the real ``GRPOTrainer._compute_loss`` on the instance of
    :func:`refimpl.frameworks._trl_losses.grpo_trainer`, one micro-batch on one rank
    (``num_items_in_batch`` = its valid tokens). The advantages are the (B,) per sequence."""
    from refimpl.frameworks._trl_losses import grpo_inputs, grpo_trainer

    trainer = grpo_trainer(
        logp, loss_type="cispo", level="sequence", epsilon_high=1.0 + float(eps_high)
    )
    inputs = grpo_inputs(logp, mask, advantages[:, 0], logp_old=logp_old)
    return trainer._compute_loss(None, inputs)


def trl_sapo_sequence_loss(
    logp: Any, logp_old: Any, advantages: Any, *, tau_pos: Any, tau_neg: Any, mask: Any
) -> Any:
    """TRL ``loss_type="sapo"``, ``importance_sampling_level="sequence"``,
    ``sapo_temperature_pos=tau_pos``, ``sapo_temperature_neg=tau_neg``: the real
    ``GRPOTrainer._compute_loss`` (the gate on the (B, 1) sequence ratio, grpo's aggregation).
    The advantages are the (B,) per sequence."""
    from refimpl.frameworks._trl_losses import grpo_inputs, grpo_trainer

    trainer = grpo_trainer(
        logp, loss_type="sapo", level="sequence", sapo_temperature_pos=tau_pos,
        sapo_temperature_neg=tau_neg,
    )  # fmt: skip
    inputs = grpo_inputs(logp, mask, advantages[:, 0], logp_old=logp_old)
    return trainer._compute_loss(None, inputs)


def trl_vespo_loss(
    logp: Any, logp_old: Any, advantages: Any, *, k_pos: Any, lambda_pos: Any, k_neg: Any,
    lambda_neg: Any, mask: Any,
) -> Any:  # fmt: skip
    """TRL ``loss_type="vespo"`` (``vespo_k_pos=k_pos``, ...): the real
    ``GRPOTrainer._compute_loss`` and its ``get_gamma_weights``, no vLLM importance ratio, one
    micro-batch on one rank. The advantages are the (B,) per sequence."""
    from refimpl.frameworks._trl_losses import grpo_inputs, grpo_trainer

    trainer = grpo_trainer(logp, loss_type="vespo")
    trainer.args.vespo_k_pos, trainer.args.vespo_lambda_pos = float(k_pos), float(lambda_pos)
    trainer.args.vespo_k_neg, trainer.args.vespo_lambda_neg = float(k_neg), float(lambda_neg)
    inputs = grpo_inputs(logp, mask, advantages[:, 0], logp_old=logp_old)
    return trainer._compute_loss(None, inputs)


def trl_high_entropy_mask(entropies: Any, *, top_fraction: Any, mask: Any) -> Any:
    """TRL's ``GRPOTrainer.get_high_entropy_mask(entropies, mask, 1 − top_fraction)`` as
    ``_compute_loss`` calls it (``top_entropy_quantile = top_fraction``), on an instance made with
    ``__new__`` whose accelerator is a single-process stand-in (``pad_across_processes`` and
    ``gather`` return their input); the boolean mask as the entropies' dtype."""
    import types

    from trl.trainer.grpo_trainer import GRPOTrainer

    trainer = GRPOTrainer.__new__(GRPOTrainer)
    trainer.accelerator = types.SimpleNamespace(
        pad_across_processes=lambda t, dim=0, pad_index=0: t, gather=lambda t: t
    )
    kept = trainer.get_high_entropy_mask(entropies, mask, 1.0 - float(top_fraction))
    return kept.to(entropies.dtype)


_SCALAR = {"output": "scalar", "padding": "ignored"}
_KERNEL = Divergence(
    "numerical limit",
    "GRPOTrainer.get_gamma_weights builds k and λ as torch.where(advantages >= 0, k_pos, k_neg) "
    "from Python floats, tensors of torch's default dtype, float32: with float64 inputs a k or λ "
    "that float32 does not represent is rounded (relative ~6e-8), which moves log φ = λ + k log w "
    "− λw by that much times its terms (measured: 1e-9 relative in the loss and the gradient at "
    "k, λ = 2.1, 3.3, 2.9, 1.7; 1e-16, exact, at TRL's defaults 2, 3, 3, 2). The padding and "
    "huge-ratio checks compare the value too.",
)
_TAU = Divergence(
    "numerical limit",
    "TRL builds the temperatures as torch.where(advantages > 0, sapo_temperature_pos, "
    "sapo_temperature_neg) from two Python floats (GRPOTrainer._compute_loss), a tensor of torch's "
    "default dtype, float32: with float64 inputs τ is rounded to float32 (1.05 → 1.0499999523), a "
    "relative change of ~5e-8 in the loss (the padding check compares the value too); with "
    "float32 or bfloat16 inputs it is exact.",
)
_OVERFLOW = Divergence(
    "numerical limit",
    "GRPOTrainer._compute_loss exponentiates the sequence's mean log-ratio without a clamp: past "
    "~709 (float64; ~88 in float32) coef_1 is inf, the gate σ(τ(inf − 1)) is 1 and the loss "
    "finite, but its backward multiplies σ'(x) = 0 by ∂coef_1 = inf: NaN in the gradient, where "
    "the reference (log space) gives 0.",
)

ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="trl.cispo_sequence",
        framework="trl",
        function=_GRPO,
        settings={
            "loss_type": "cispo",
            "importance_sampling_level": "sequence",
            "epsilon_high": "1 + eps_high",
        },
        spec="cispo_sequence",
        conventions={**_SCALAR, "aggregation": "token_mean"},
        candidate=trl_cispo_sequence_loss,
        note="−sg[min(s, ε_max)]·A·logp with s the sequence's geometric-mean ratio, dapo-style "
        "token mean.",
    ),
    Adapter(
        key="trl.sapo_sequence",
        framework="trl",
        function=_GRPO,
        settings={
            "loss_type": "sapo",
            "importance_sampling_level": "sequence",
            "sapo_temperature_pos": "tau_pos",
            "sapo_temperature_neg": "tau_neg",
        },
        spec="sapo_sequence",
        conventions={**_SCALAR, "aggregation": "seq_mean_token_mean", "sequence_count": "all"},
        candidate=trl_sapo_sequence_loss,
        divergences={
            "values": _TAU,
            "padding_contributes_nothing": _TAU,
            "huge_log_ratios_stay_finite": _OVERFLOW,
        },
        note="The sigmoid gate on the sequence's geometric-mean ratio, grpo's aggregation.",
    ),
    Adapter(
        key="trl.vespo",
        framework="trl",
        function=_GRPO,
        settings={
            "loss_type": "vespo",
            "vespo_k_pos": "k_pos",
            "vespo_lambda_pos": "lambda_pos",
            "vespo_k_neg": "k_neg",
            "vespo_lambda_neg": "lambda_neg",
        },
        spec="vespo",
        conventions={
            **_SCALAR,
            "aggregation": "token_mean",
            "log_ratio_clamp": 20.0,
            "log_weight_range": "trl",
        },
        candidate=trl_vespo_loss,
        divergences=dict.fromkeys(
            ("values", "gradient", "padding_contributes_nothing", "huge_log_ratios_stay_finite"),
            _KERNEL,
        ),
        note="−sg[φ(w)]·A·logp with φ the gamma kernel of the summed (clamped) sequence "
        "log-ratio, dapo-style token mean.",
    ),
    Adapter(
        key="trl.high_entropy_mask",
        framework="trl",
        function="trl.trainer.grpo_trainer:GRPOTrainer.get_high_entropy_mask",
        settings={"top_entropy_quantile": "top_fraction"},
        spec="high_entropy_mask",
        conventions={"threshold_dtype": "float32"},
        candidate=trl_high_entropy_mask,
        note="The (1 − ρ)-quantile of the valid entropies (float32, linear interpolation); valid "
        "tokens at or above it kept.",
    ),
)

__all__ = ["ADAPTERS"]
