"""TRL (trl 1.16.0): its GRPO losses, aggregation and KL term, read from its installed sources.

TRL computes its GRPO loss inside ``trl/trainer/grpo_trainer.py`` ``GRPOTrainer._compute_loss`` (called
by ``compute_loss``). The adapters drive that REAL method on an instance made with
``GRPOTrainer.__new__(GRPOTrainer)`` (:func:`grpo_trainer`): only the attributes the method reads are
set, and ``_get_per_token_logps_and_entropies`` (the model forward) is replaced on the instance by one
returning the given ``logp``. What the method does, as read:

- ``log_ratio = logp − old_per_token_logps`` (no clamp); ``importance_sampling_level="token"`` uses it
  per token, ``"sequence"`` (GSPO) its masked mean per row ``Σ m·d / max(Σ m, 1)`` as a ``(B, 1)``
  weight; ``coef_1 = exp(·)``.
- ``loss_type`` in grpo/bnpo/dr_grpo/dapo/luspo: ``−min(coef_1·A, clip(coef_1, 1−ε_low, 1+ε_high)·A)``
  with ``delta`` (two-sided clipping) clamping ``coef_1`` above at δ *before* the product, for both
  signs of ``A``; cispo ``−sg[min(coef_1, epsilon_high)]·A·logp`` (``epsilon_high`` is the cap itself);
  sapo ``−A·(4/τ)·σ(τ(coef_1 − 1))`` with ``τ = sapo_temperature_pos`` if ``A > 0`` else ``_neg``.
- ``beta > 0`` adds ``beta·k3(ref, logp)`` per token (``exp(ref − logp) − (ref − logp) − 1``), times
  the *differentiable* ``coef_1`` under ``args.use_bias_correction_kl``.
- aggregation: grpo/sapo ``mean_b(Σ_t m·ℓ / max(L_b, 1))`` (every row counted) / K; bnpo
  ``Σ m·ℓ / max(Σ m, 1)`` / K; dr_grpo ``Σ m·ℓ / (B·max_completion_length)`` / K; dapo/cispo/vespo
  ``Σ m·ℓ / (num_items_in_batch / num_processes · K / steps_per_generation)``; luspo
  ``mean_b(Σ_t m·ℓ)`` / K, with ``K = current_gradient_accumulation_steps`` (training mode).
  ``loss_is_scaled_for_ga = True``: the HF ``Trainer.training_step`` does not rescale it, and DDP
  averages the ranks' gradients.

``num_items_in_batch`` is ``accelerator.gather(loss_mask.sum()).sum()`` over the whole *generation*
batch (``_generate_and_score_completions``), which ``_prepare_inputs`` splits into
``steps_per_generation`` micro-batches (default ``steps_per_generation = gradient_accumulation_steps``).
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter, Divergence

_GRPO = "trl.trainer.grpo_trainer:GRPOTrainer._compute_loss"
_TRAINER = "trl/trainer/grpo_trainer.py:GRPOTrainer._compute_loss"


def grpo_trainer(
    logp: Any,
    *,
    loss_type: str,
    level: str = "token",
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    delta: float | None = None,
    beta: float = 0.0,
    use_bias_correction_kl: bool = False,
    sapo_temperature_pos: float = 1.0,
    sapo_temperature_neg: float = 1.05,
    max_completion_length: int = 1,
    accumulation_steps: int = 1,
    world_size: int = 1,
    steps_per_generation: int | None = None,
    trainer_class: Any = None,
) -> Any:
    """A ``GRPOTrainer`` made with ``__new__``, holding only what ``_compute_loss`` reads.

    ``trainer_class`` is a subclass to make instead (``GMPOTrainer``, which overrides only
    ``_compute_loss`` and reads a subset of these attributes).

    The settings are TRL's names (``GRPOConfig``); ``epsilon_high=None`` falls back to ``epsilon``
    as ``GRPOTrainer.__init__`` does. The model forward ``_get_per_token_logps_and_entropies`` returns
    ``logp`` (and zero entropies, read only by metrics here: ``top_entropy_quantile = 1``).
    ``steps_per_generation`` defaults to ``accumulation_steps`` (``GRPOConfig.__post_init__``).
    The accelerator is a single-process stand-in whose ``gather``/``reduce`` (metrics only) return
    their input; ``num_processes`` is ``world_size``.
    """
    import collections
    import types

    import torch
    from trl.trainer.grpo_trainer import GRPOTrainer

    cls = GRPOTrainer if trainer_class is None else trainer_class
    trainer = cls.__new__(cls)
    trainer.loss_type = loss_type
    trainer.importance_sampling_level = level
    trainer.epsilon_low = float(epsilon)
    trainer.epsilon_high = float(epsilon if epsilon_high is None else epsilon_high)
    trainer.beta = float(beta)
    trainer.top_entropy_quantile = 1.0
    trainer.off_policy_mask_threshold = None
    trainer.aux_loss_enabled = False
    trainer.use_vllm = False
    trainer.vllm_importance_sampling_correction = False
    trainer._entropy_bonus_enabled = False
    trainer.max_completion_length = int(max_completion_length)
    trainer.current_gradient_accumulation_steps = int(accumulation_steps)
    trainer.model = types.SimpleNamespace(training=True)
    trainer._metrics = {
        "train": collections.defaultdict(list),
        "eval": collections.defaultdict(list),
    }
    trainer.args = types.SimpleNamespace(
        delta=None if delta is None else float(delta),
        use_bias_correction_kl=bool(use_bias_correction_kl),
        sapo_temperature_pos=float(sapo_temperature_pos),
        sapo_temperature_neg=float(sapo_temperature_neg),
        steps_per_generation=int(steps_per_generation or accumulation_steps),
    )
    trainer.accelerator = types.SimpleNamespace(
        num_processes=int(world_size),
        gather=lambda t: t,
        gather_for_metrics=lambda t: t,
        reduce=lambda t, reduction="sum": t,
    )

    def forward(*_args: Any, **_kwargs: Any) -> tuple[Any, Any, None]:
        return logp, torch.zeros_like(logp.detach()), None

    trainer._get_per_token_logps_and_entropies = forward
    return trainer


def grpo_inputs(
    logp: Any,
    mask: Any,
    advantages: Any,
    *,
    logp_old: Any = None,
    logp_ref: Any = None,
    num_items_in_batch: Any = None,
) -> dict[str, Any]:
    """The ``inputs`` dict ``_compute_loss`` reads: an empty prompt, the completion mask as TRL's
    integer ``completion_mask``, ``advantages`` ((B,) or (B, T): the method unsqueezes a (B,) one),
    and the optional old / reference log-probabilities and ``num_items_in_batch`` (default: this
    batch's valid tokens, as for one micro-batch on one rank)."""
    import torch

    m = (torch.as_tensor(mask) > 0).to(torch.long)
    rows = m.shape[0]
    inputs: dict[str, Any] = {
        "prompt_ids": torch.zeros((rows, 0), dtype=torch.long),
        "prompt_mask": torch.zeros((rows, 0), dtype=torch.long),
        "completion_ids": torch.zeros_like(m),
        "completion_mask": m,
        "advantages": advantages,
        "num_items_in_batch": torch.as_tensor(
            m.sum() if num_items_in_batch is None else num_items_in_batch
        ),
    }
    if logp_old is not None:
        inputs["old_per_token_logps"] = logp_old
    if logp_ref is not None:
        inputs["ref_per_token_logps"] = logp_ref
    return inputs


# ---------------------------------------------------------------------------------------------
# the clipped surrogate, token level, one adapter per loss_type (its own aggregation)
# ---------------------------------------------------------------------------------------------


def trl_grpo_loss(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    *,
    eps_low: Any,
    eps_high: Any,
    dual_clip: Any,
    mask: Any,
) -> Any:
    """TRL ``loss_type="grpo"``, ``importance_sampling_level="token"``, ``epsilon=eps_low``,
    ``epsilon_high=eps_high``, ``delta=dual_clip``: the real ``GRPOTrainer._compute_loss`` (token
    ratio, clipped branch, grpo aggregation, K = 1)."""
    from refimpl.frameworks._trl_losses import grpo_inputs, grpo_trainer

    trainer = grpo_trainer(
        logp, loss_type="grpo", epsilon=eps_low, epsilon_high=eps_high, delta=dual_clip
    )
    return trainer._compute_loss(None, grpo_inputs(logp, mask, advantages, logp_old=logp_old))


def trl_bnpo_loss(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    *,
    eps_low: Any,
    eps_high: Any,
    dual_clip: Any,
    mask: Any,
) -> Any:
    """TRL ``loss_type="bnpo"`` (token level, ``delta=dual_clip``): the real
    ``GRPOTrainer._compute_loss`` (clipped branch, bnpo aggregation over the local tokens, K = 1)."""
    from refimpl.frameworks._trl_losses import grpo_inputs, grpo_trainer

    trainer = grpo_trainer(
        logp, loss_type="bnpo", epsilon=eps_low, epsilon_high=eps_high, delta=dual_clip
    )
    return trainer._compute_loss(None, grpo_inputs(logp, mask, advantages, logp_old=logp_old))


def trl_dr_grpo_loss(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    *,
    eps_low: Any,
    eps_high: Any,
    dual_clip: Any,
    mask: Any,
) -> Any:
    """TRL ``loss_type="dr_grpo"`` (token level, ``delta=dual_clip``) with ``max_completion_length``
    the padded width T: the real ``GRPOTrainer._compute_loss`` (clipped branch, Σ m·ℓ / (B·T), K = 1)."""
    from refimpl.frameworks._trl_losses import grpo_inputs, grpo_trainer

    trainer = grpo_trainer(
        logp,
        loss_type="dr_grpo",
        epsilon=eps_low,
        epsilon_high=eps_high,
        delta=dual_clip,
        max_completion_length=logp.shape[-1],
    )
    return trainer._compute_loss(None, grpo_inputs(logp, mask, advantages, logp_old=logp_old))


def trl_dapo_loss(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    *,
    eps_low: Any,
    eps_high: Any,
    dual_clip: Any,
    mask: Any,
) -> Any:
    """TRL ``loss_type="dapo"`` (the default; token level, ``delta=dual_clip``), one micro-batch on one
    rank: the real ``GRPOTrainer._compute_loss`` (clipped branch, Σ m·ℓ / num_items_in_batch with
    ``num_items_in_batch`` this batch's valid tokens)."""
    from refimpl.frameworks._trl_losses import grpo_inputs, grpo_trainer

    trainer = grpo_trainer(
        logp, loss_type="dapo", epsilon=eps_low, epsilon_high=eps_high, delta=dual_clip
    )
    return trainer._compute_loss(None, grpo_inputs(logp, mask, advantages, logp_old=logp_old))


def trl_cispo_loss(logp: Any, logp_old: Any, advantages: Any, *, eps_high: Any, mask: Any) -> Any:
    """TRL ``loss_type="cispo"`` (token level) with ``epsilon_high = 1 + eps_high`` (TRL's is the cap
    ε_max itself): the real ``GRPOTrainer._compute_loss`` (cispo branch, dapo-style aggregation).
    TRL has no lower bound on the weight (``lower_bound=None``; ``epsilon`` is not read by it)."""
    from refimpl.frameworks._trl_losses import grpo_inputs, grpo_trainer

    trainer = grpo_trainer(logp, loss_type="cispo", epsilon_high=1.0 + float(eps_high))
    return trainer._compute_loss(None, grpo_inputs(logp, mask, advantages, logp_old=logp_old))


def trl_sapo_loss(
    logp: Any, logp_old: Any, advantages: Any, *, tau_pos: Any, tau_neg: Any, mask: Any
) -> Any:
    """TRL ``loss_type="sapo"`` (token level), ``sapo_temperature_pos=tau_pos``,
    ``sapo_temperature_neg=tau_neg``: the real ``GRPOTrainer._compute_loss`` (sapo branch, grpo
    aggregation)."""
    from refimpl.frameworks._trl_losses import grpo_inputs, grpo_trainer

    trainer = grpo_trainer(
        logp, loss_type="sapo", sapo_temperature_pos=tau_pos, sapo_temperature_neg=tau_neg
    )
    return trainer._compute_loss(None, grpo_inputs(logp, mask, advantages, logp_old=logp_old))


# ---------------------------------------------------------------------------------------------
# GSPO: importance_sampling_level="sequence", one adapter per loss_type's aggregation
# ---------------------------------------------------------------------------------------------


def trl_gspo_grpo_loss(
    logp: Any, logp_old: Any, advantages: Any, *, eps_low: Any, eps_high: Any, mask: Any
) -> Any:
    """TRL ``importance_sampling_level="sequence"`` (GSPO), ``loss_type="grpo"`` (the GSPO paper's
    setup): the real ``GRPOTrainer._compute_loss`` (sequence weight exp(masked mean log-ratio) as
    (B, 1), clipped branch, grpo aggregation)."""
    from refimpl.frameworks._trl_losses import grpo_inputs, grpo_trainer

    trainer = grpo_trainer(
        logp, loss_type="grpo", level="sequence", epsilon=eps_low, epsilon_high=eps_high
    )
    return trainer._compute_loss(None, grpo_inputs(logp, mask, advantages, logp_old=logp_old))


def trl_gspo_bnpo_loss(
    logp: Any, logp_old: Any, advantages: Any, *, eps_low: Any, eps_high: Any, mask: Any
) -> Any:
    """TRL ``importance_sampling_level="sequence"``, ``loss_type="bnpo"``: the real
    ``GRPOTrainer._compute_loss`` (sequence weight, clipped branch, bnpo aggregation)."""
    from refimpl.frameworks._trl_losses import grpo_inputs, grpo_trainer

    trainer = grpo_trainer(
        logp, loss_type="bnpo", level="sequence", epsilon=eps_low, epsilon_high=eps_high
    )
    return trainer._compute_loss(None, grpo_inputs(logp, mask, advantages, logp_old=logp_old))


def trl_gspo_dr_grpo_loss(
    logp: Any, logp_old: Any, advantages: Any, *, eps_low: Any, eps_high: Any, mask: Any
) -> Any:
    """TRL ``importance_sampling_level="sequence"``, ``loss_type="dr_grpo"``,
    ``max_completion_length`` = T: the real ``GRPOTrainer._compute_loss`` (sequence weight,
    clipped branch, Σ m·ℓ / (B·T))."""
    from refimpl.frameworks._trl_losses import grpo_inputs, grpo_trainer

    trainer = grpo_trainer(
        logp,
        loss_type="dr_grpo",
        level="sequence",
        epsilon=eps_low,
        epsilon_high=eps_high,
        max_completion_length=logp.shape[-1],
    )
    return trainer._compute_loss(None, grpo_inputs(logp, mask, advantages, logp_old=logp_old))


def trl_gspo_dapo_loss(
    logp: Any, logp_old: Any, advantages: Any, *, eps_low: Any, eps_high: Any, mask: Any
) -> Any:
    """TRL ``importance_sampling_level="sequence"``, ``loss_type="dapo"``, one micro-batch on one
    rank: the real ``GRPOTrainer._compute_loss`` (sequence weight, clipped branch, Σ m·ℓ /
    num_items_in_batch)."""
    from refimpl.frameworks._trl_losses import grpo_inputs, grpo_trainer

    trainer = grpo_trainer(
        logp, loss_type="dapo", level="sequence", epsilon=eps_low, epsilon_high=eps_high
    )
    return trainer._compute_loss(None, grpo_inputs(logp, mask, advantages, logp_old=logp_old))


def trl_luspo_loss(
    logp: Any, logp_old: Any, advantages: Any, *, eps_low: Any, eps_high: Any, mask: Any
) -> Any:
    """TRL ``loss_type="luspo"`` with ``importance_sampling_level="sequence"`` (the setting TRL warns
    for otherwise): the real ``GRPOTrainer._compute_loss`` (sequence weight, clipped branch,
    mean_b Σ_t m·ℓ: each sequence's loss times its length)."""
    from refimpl.frameworks._trl_losses import grpo_inputs, grpo_trainer

    trainer = grpo_trainer(
        logp, loss_type="luspo", level="sequence", epsilon=eps_low, epsilon_high=eps_high
    )
    return trainer._compute_loss(None, grpo_inputs(logp, mask, advantages, logp_old=logp_old))


# ---------------------------------------------------------------------------------------------
# the KL term (beta > 0)
# ---------------------------------------------------------------------------------------------


def trl_kl_k3(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """TRL ``beta=1``, ``loss_type="bnpo"``, on-policy (no ``old_per_token_logps``: the method uses
    ``logp.detach()``, so ``coef_1 = 1``) with zero advantages: the real
    ``GRPOTrainer._compute_loss`` returns the bnpo mean of its ``per_token_kl`` (k3) alone."""
    import torch

    from refimpl.frameworks._trl_losses import grpo_inputs, grpo_trainer

    trainer = grpo_trainer(logp, loss_type="bnpo", beta=1.0)
    zero = torch.zeros(logp.shape[0], dtype=logp.dtype)
    return trainer._compute_loss(None, grpo_inputs(logp, mask, zero, logp_ref=logp_ref))


def trl_kl_bias_corrected(logp: Any, logp_ref: Any, logp_behavior: Any, *, mask: Any) -> Any:
    """TRL ``beta=1``, ``use_bias_correction_kl=True``, ``loss_type="bnpo"``, ``old_per_token_logps =
    logp_behavior``, zero advantages: the real ``GRPOTrainer._compute_loss`` returns the bnpo mean of
    ``per_token_kl · coef_1`` (k3 times the differentiable token ratio π/π_old) alone."""
    import torch

    from refimpl.frameworks._trl_losses import grpo_inputs, grpo_trainer

    trainer = grpo_trainer(logp, loss_type="bnpo", beta=1.0, use_bias_correction_kl=True)
    zero = torch.zeros(logp.shape[0], dtype=logp.dtype)
    inputs = grpo_inputs(logp, mask, zero, logp_old=logp_behavior, logp_ref=logp_ref)
    return trainer._compute_loss(None, inputs)


# ---------------------------------------------------------------------------------------------
# the registry
# ---------------------------------------------------------------------------------------------

_NO_CLAMP = (
    "TRL exponentiates the log-ratio without a clamp (GRPOTrainer._compute_loss: coef_1 = "
    "exp(log_importance_weights)) and masks the per-token loss by multiplication when it "
    "aggregates (per_token_loss * mask): "
)
_OVERFLOW = {
    "huge_log_ratios_stay_finite": Divergence(
        "numerical limit",
        _NO_CLAMP + "a log-ratio beyond ~709 (float64; ~88 in float32) overflows exp, and inf·0 "
        "(a zero advantage, or the mask) is NaN in the value or the gradient. verl, SkyRL and "
        "OpenRLHF clamp it to ±20 first.",
    ),
    "padding_contributes_nothing": Divergence(
        "numerical limit",
        _NO_CLAMP + "a huge padded log-probability overflows exp at a masked position and "
        "inf·0 is NaN in the gradient. TRL's own padded log-probabilities are the model's (finite, "
        "<= 0), so only an input outside TRL's range reaches it.",
    ),
}
_KL_TEXT = (
    "TRL's per_token_kl = exp(ref − logp) − (ref − logp) − 1 (GRPOTrainer._compute_loss) "
    "exponentiates without a clamp and is masked by multiplication when aggregated: "
)
_KL_OVERFLOW = {
    "huge_log_ratios_stay_finite": Divergence(
        "numerical limit",
        _KL_TEXT + "a log-ratio beyond ~709 (float64; ~88 in float32) overflows exp, and inf·0 "
        "(the mask) is NaN in the value or the gradient.",
    ),
    "padding_contributes_nothing": Divergence(
        "numerical limit",
        _KL_TEXT + "a huge padded log-probability overflows exp at a masked position and inf·0 is "
        "NaN. TRL's padded log-probabilities are the models' (finite, <= 0).",
    ),
}
_IW_TEXT = (
    "Under use_bias_correction_kl TRL multiplies per_token_kl = exp(ref − logp) − (ref − logp) − 1 "
    "by coef_1 = exp(logp − old) (GRPOTrainer._compute_loss), both exponentiated without a clamp, "
    "and masks by multiplication when aggregating: "
)
_IW_OVERFLOW = {
    "huge_log_ratios_stay_finite": Divergence(
        "numerical limit",
        _IW_TEXT + "a log-ratio beyond ~709 (float64; ~88 in float32) overflows exp, and inf·0 "
        "(the mask, or the zero advantage of the policy term) is NaN.",
    ),
    "padding_contributes_nothing": Divergence(
        "numerical limit",
        _IW_TEXT + "a huge padded log-probability overflows exp at a masked position and inf·0 is "
        "NaN. TRL's padded log-probabilities are the models' (finite, <= 0).",
    ),
}
_DELTA = Divergence(
    "convention",
    "TRL's delta (INTELLECT-2 two-sided clipping) clamps coef_1 above at δ for both signs of A "
    "before min(coef_1·A, clip(coef_1)·A) (GRPOTrainer._compute_loss): for δ > 1 + epsilon_high "
    "this is dual clip with c = δ, but for δ <= 1 + epsilon_high it also caps a positive "
    "advantage's ratio at δ. GRPOConfig documents delta as 'recommended to be greater than 1 + ε'.",
)
_SAPO_TAU = Divergence(
    "numerical limit",
    "TRL builds the temperatures as torch.where(advantages > 0, sapo_temperature_pos, "
    "sapo_temperature_neg) from two Python floats (GRPOTrainer._compute_loss), a tensor of torch's "
    "default dtype, float32: with float64 inputs τ is rounded to float32 (1.05 → 1.0499999523), a "
    "relative change of ~5e-8 in the loss and its gradient; with float32 or bfloat16 inputs it is "
    "exact.",
)
_SCALAR = {"output": "scalar", "padding": "ignored"}


def _clip_adapter(
    name: str, candidate: Any, loss_type: str, aggregation: dict[str, Any], note: str
) -> Adapter:
    return Adapter(
        key=f"trl.{name}",
        framework="trl",
        function=_GRPO,
        settings={
            "loss_type": loss_type,
            "importance_sampling_level": "token",
            "epsilon": "eps_low",
            "epsilon_high": "eps_high",
            "delta": "dual_clip",
        },
        spec="ppo_clip",
        conventions={**_SCALAR, **aggregation, "dual_clip": "drawn"},
        candidate=candidate,
        # the delta divergence needs δ <= 1 + ε_high and a positive advantage's ratio above δ:
        # 25 examples do not meet it, 100 do (tests_frameworks/test_trl_losses.py pins it too)
        divergences={**_OVERFLOW, "values": _DELTA, "gradient": _DELTA},
        max_examples=100,
        note=note + " delta maps to dual_clip only for delta > 1 + epsilon_high (TRL's recommended "
        "range): below, TRL also caps a positive advantage's ratio at delta.",
    )


def _gspo_adapter(
    name: str, candidate: Any, loss_type: str, aggregation: dict[str, Any], note: str
) -> Adapter:
    return Adapter(
        key=f"trl.{name}",
        framework="trl",
        function=_GRPO,
        settings={
            "loss_type": loss_type,
            "importance_sampling_level": "sequence",
            "epsilon": "eps_low",
            "epsilon_high": "eps_high",
        },
        spec="gspo",
        conventions={**_SCALAR, **aggregation},
        candidate=candidate,
        divergences={"huge_log_ratios_stay_finite": _OVERFLOW["huge_log_ratios_stay_finite"]},
        note=note,
    )


_SEQ_ALL = {"aggregation": "seq_mean_token_mean", "sequence_count": "all"}
_TOKEN_MEAN = {"aggregation": "token_mean"}
_SUM_NORM = {"aggregation": "token_sum_norm", "sequence_count": "all"}

ADAPTERS: tuple[Adapter, ...] = (
    _clip_adapter(
        "grpo",
        trl_grpo_loss,
        "grpo",
        _SEQ_ALL,
        "The clipped surrogate through _compute_loss, averaged per sequence then over every row.",
    ),
    _clip_adapter(
        "bnpo",
        trl_bnpo_loss,
        "bnpo",
        _TOKEN_MEAN,
        "The clipped surrogate through _compute_loss, averaged over the batch's valid tokens.",
    ),
    _clip_adapter(
        "dr_grpo",
        trl_dr_grpo_loss,
        "dr_grpo",
        _SUM_NORM,
        "The clipped surrogate through _compute_loss, summed and divided by B·max_completion_length "
        "(= the padded width here).",
    ),
    _clip_adapter(
        "dapo",
        trl_dapo_loss,
        "dapo",
        _TOKEN_MEAN,
        "The clipped surrogate through _compute_loss, summed and divided by num_items_in_batch "
        "(one micro-batch, one rank: its valid tokens).",
    ),
    Adapter(
        key="trl.cispo",
        framework="trl",
        function=_GRPO,
        settings={"loss_type": "cispo", "epsilon_high": "1 + eps_high"},
        spec="cispo",
        conventions={**_SCALAR, **_TOKEN_MEAN, "lower_bound": None},
        candidate=trl_cispo_loss,
        note="−sg[min(ρ, ε_max)]·A·logp through _compute_loss (ε_max = 1 + eps_high), dapo-style "
        "token mean; TRL has no lower bound (eps_low is not passed).",
    ),
    Adapter(
        key="trl.sapo",
        framework="trl",
        function=_GRPO,
        settings={
            "loss_type": "sapo",
            "sapo_temperature_pos": "tau_pos",
            "sapo_temperature_neg": "tau_neg",
        },
        spec="sapo",
        conventions={**_SCALAR, **_SEQ_ALL},
        candidate=trl_sapo_loss,
        divergences={**_OVERFLOW, "values": _SAPO_TAU, "gradient": _SAPO_TAU},
        note="The sigmoid gate through _compute_loss with grpo's aggregation.",
    ),
    _gspo_adapter(
        "gspo_grpo",
        trl_gspo_grpo_loss,
        "grpo",
        _SEQ_ALL,
        "GSPO (sequence ratio = exp of the masked mean log-ratio, (B, 1)) with grpo's aggregation.",
    ),
    _gspo_adapter(
        "gspo_bnpo",
        trl_gspo_bnpo_loss,
        "bnpo",
        _TOKEN_MEAN,
        "GSPO's (B, 1) loss broadcast over the tokens and averaged over the valid tokens.",
    ),
    _gspo_adapter(
        "gspo_dr_grpo",
        trl_gspo_dr_grpo_loss,
        "dr_grpo",
        _SUM_NORM,
        "GSPO's (B, 1) loss broadcast, summed, divided by B·max_completion_length (= T here).",
    ),
    _gspo_adapter(
        "gspo_dapo",
        trl_gspo_dapo_loss,
        "dapo",
        _TOKEN_MEAN,
        "GSPO's (B, 1) loss broadcast, summed, divided by num_items_in_batch (this batch's tokens).",
    ),
    _gspo_adapter(
        "luspo",
        trl_luspo_loss,
        "luspo",
        {"aggregation": "seq_mean_token_sum", "sequence_count": "all"},
        "LUSPO: GSPO's (B, 1) loss times each sequence's length, averaged over every row.",
    ),
    Adapter(
        key="trl.kl_k3",
        framework="trl",
        function=_GRPO,
        settings={"beta": 1.0, "loss_type": "bnpo", "use_bias_correction_kl": False},
        spec="kl_penalty",
        conventions={**_SCALAR, **_TOKEN_MEAN, "estimator": "k3"},
        candidate=trl_kl_k3,
        divergences=dict(_KL_OVERFLOW),
        note="per_token_kl = exp(ref − logp) − (ref − logp) − 1 alone (A = 0, on-policy), bnpo mean.",
    ),
    Adapter(
        key="trl.kl_bias_corrected",
        framework="trl",
        function=_GRPO,
        settings={"beta": 1.0, "loss_type": "bnpo", "use_bias_correction_kl": True},
        spec="importance_weighted_kl",
        conventions={**_SCALAR, **_TOKEN_MEAN, "estimator": "k3", "weighting": "differentiable"},
        candidate=trl_kl_bias_corrected,
        divergences=dict(_IW_OVERFLOW),
        note="per_token_kl · coef_1 (π/π_old, not detached) alone (A = 0), bnpo mean.",
    ),
)


from refimpl.frameworks._trl_losses_a2po import ADAPTERS as _A2PO  # noqa: E402
from refimpl.frameworks._trl_losses_advantages import ADAPTERS as _ADVANTAGES  # noqa: E402
from refimpl.frameworks._trl_losses_aggregation import ADAPTERS as _AGGREGATION  # noqa: E402
from refimpl.frameworks._trl_losses_fused import ADAPTERS as _FUSED  # noqa: E402
from refimpl.frameworks._trl_losses_gdpo import ADAPTERS as _GDPO  # noqa: E402
from refimpl.frameworks._trl_losses_more import ADAPTERS as _MORE  # noqa: E402
from refimpl.frameworks._trl_losses_rloo import ADAPTERS as _RLOO  # noqa: E402
from refimpl.frameworks._trl_losses_sequence_soft import ADAPTERS as _SOFT  # noqa: E402
from refimpl.frameworks._trl_losses_vllm_is import ADAPTERS as _VLLM_IS  # noqa: E402

ADAPTERS = (
    *ADAPTERS, *_AGGREGATION, *_MORE, *_ADVANTAGES, *_RLOO, *_SOFT, *_GDPO, *_FUSED, *_A2PO,
    *_VLLM_IS,
)  # fmt: skip

__all__ = ["ADAPTERS", "grpo_inputs", "grpo_trainer"]
