"""SkyRL (skyrl 0.3.0): the JAX backend's per-token losses, read from ``skyrl/tinker/loss_fns.py``.

``skyrl/backends/jax.py:JaxBackendImpl._create_loss_and_grad_fn`` defines ``loss_for_lora``,
which calls the loss of each example through ``jax.lax.switch(loss_fn_type, LOSS_FUNCTIONS,
...)`` under ``jax.vmap`` over the rows: each loss sees one row, ``(T,)``, with that row's
``LossFnConfig`` (``clip_low_threshold``, ``clip_high_threshold``: the ratio bounds ``1 − ε_low``
and ``1 + ε_high``, built as float32 by ``_build_loss_fn_config``; 0.8 and 1.2 by default). The
adapters call each loss the same way: ``jax.vmap`` over the rows, one config per row. Each
returns ``-safe_loss_mask(x, loss_mask)``, ``jnp.where(loss_mask != 0, loss_mask·x, 0)``: the
per-token loss with padding exactly 0 (``output="token"``, ``padding="zero"``). The ratio is
``jnp.exp(target_logprobs - sampling_logprobs)`` of the unclamped log-ratio; ``ppo_loss`` has no
dual clip; ``cispo_loss`` detaches the clipped ratio (``jax.lax.stop_gradient``).

Precision: ``_model_pass`` pads the loss mask, the sampling log-probs and the advantages as float32
(``pad_batch(..., np.float32)``), and the target log-probs are the model's (float32 for a float32
model; a bfloat16 model's are promoted to float32 by the subtraction), so the adapters are checked
in float32.

``loss_for_lora`` then reduces ``per_token_losses.sum(-1) / jnp.maximum(loss_mask.sum(-1), 1e-9)``
per row and sums the rows; the accumulated gradient is divided by the adapter's row count
(``AccumulatedGradients.get_mean``). It is a closure over a flax ``nnx`` model's forward pass
(``_model_forward``, the LoRA split of a loaded checkpoint), and ``skyrl.backends.jax`` imports
flax, optax and ``skyrl.tinker.types`` (refused by pydantic on Python < 3.12): it cannot be called
without a model, so it is not checked (``docs/howto/conformance.md`` lists it, with this reason).

``loss_fns`` cannot be imported here either (it imports ``skyrl.tinker.types`` for ``LOSS_TYPES``),
so its config class and losses are executed from the installed file by
:func:`refimpl.frameworks.load_from_source` (:data:`refimpl.frameworks.SOURCE_LOADS`).
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter, Divergence

_LOSS_FNS = "skyrl.tinker.loss_fns"


def skyrl_jax_ppo(
    logp: Any, logp_old: Any, advantages: Any, *, eps_low: Any, eps_high: Any, mask: Any
) -> Any:
    """``loss_fns.py:ppo_loss``, vmapped over the rows with a float32 ``LossFnConfig`` per row
    (``1 − eps_low``, ``1 + eps_high``), as ``loss_for_lora`` calls it; the per-token losses."""
    import jax
    import jax.numpy as jnp

    from refimpl.frameworks import load_from_source

    fns = load_from_source("skyrl.tinker.loss_fns")
    high = eps_low if eps_high is None else eps_high
    rows = logp.shape[0]
    config = fns["LossFnConfig"](
        clip_low_threshold=jnp.full((rows,), 1.0 - eps_low, jnp.float32),
        clip_high_threshold=jnp.full((rows,), 1.0 + high, jnp.float32),
    )
    weights = jnp.asarray(mask, jnp.float32)
    return jax.vmap(fns["ppo_loss"])(logp, weights, logp_old, advantages, config)


def skyrl_jax_cispo(
    logp: Any, logp_old: Any, advantages: Any, *, eps_high: Any, eps_low: Any, mask: Any
) -> Any:
    """``loss_fns.py:cispo_loss``, vmapped over the rows; no lower clip (``eps_low=None``) is
    ``clip_low_threshold = 0`` (a ratio is never below it)."""
    import jax
    import jax.numpy as jnp

    from refimpl.frameworks import load_from_source

    fns = load_from_source("skyrl.tinker.loss_fns")
    low = 0.0 if eps_low is None else 1.0 - eps_low
    rows = logp.shape[0]
    config = fns["LossFnConfig"](
        clip_low_threshold=jnp.full((rows,), low, jnp.float32),
        clip_high_threshold=jnp.full((rows,), 1.0 + eps_high, jnp.float32),
    )
    weights = jnp.asarray(mask, jnp.float32)
    return jax.vmap(fns["cispo_loss"])(logp, weights, logp_old, advantages, config)


def skyrl_jax_importance_sampling(
    logp: Any, logp_old: Any, advantages: Any, *, cap: Any, mask: Any
) -> Any:
    """``loss_fns.py:importance_sampling_loss``, vmapped over the rows: ``−ρ·A`` per token;
    ``cap`` is ignored (SkyRL has none), the config (backend defaults 0.8, 1.2) is unused."""
    import jax
    import jax.numpy as jnp

    from refimpl.frameworks import load_from_source

    fns = load_from_source("skyrl.tinker.loss_fns")
    rows = logp.shape[0]
    config = fns["LossFnConfig"](
        clip_low_threshold=jnp.full((rows,), 0.8, jnp.float32),
        clip_high_threshold=jnp.full((rows,), 1.2, jnp.float32),
    )
    weights = jnp.asarray(mask, jnp.float32)
    loss = fns["importance_sampling_loss"]
    return jax.vmap(loss)(logp, weights, logp_old, advantages, config)


def skyrl_jax_cross_entropy(logp: Any, *, mask: Any) -> Any:
    """``loss_fns.py:cross_entropy_loss``, vmapped over the rows: ``−logp`` per token; the
    sampling log-probs and advantages it ignores are zeros, the config (0.8, 1.2) is unused."""
    import jax
    import jax.numpy as jnp

    from refimpl.frameworks import load_from_source

    fns = load_from_source("skyrl.tinker.loss_fns")
    rows = logp.shape[0]
    config = fns["LossFnConfig"](
        clip_low_threshold=jnp.full((rows,), 0.8, jnp.float32),
        clip_high_threshold=jnp.full((rows,), 1.2, jnp.float32),
    )
    zeros = jnp.zeros_like(logp)
    weights = jnp.asarray(mask, jnp.float32)
    return jax.vmap(fns["cross_entropy_loss"])(logp, weights, zeros, zeros, config)


_NO_CAP = Divergence(
    "convention",
    "loss_fns.py:importance_sampling_loss is the uncapped ratio surrogate −ρ·A; the spec draws a "
    "cap C, under which the reference is the truncated log surrogate −sg[min(ρ, C)]·A·logp (another "
    "value everywhere, another gradient above C), and no convention declares 'no cap'.",
)
_TIES = Divergence(
    "convention",
    "At a ratio exactly on a clip threshold, jax differentiates ppo_loss's jnp.minimum(unclipped, "
    "clipped) and jnp.clip (a max then a min) by its own rule for ties: each tied operand gets half "
    "the cotangent. The gradient there is 0.5·(−ρA) + 0.5·0.5·(−ρA) = 0.75·(−ρA), within the "
    "Clarke subdifferential [0, −ρA] but neither one-sided gradient, which the spec requires; "
    "torch's clamp and minimum give the whole one (−ρA). Away from the thresholds the gradients agree.",
)
_OVERFLOW = Divergence(
    "defect",
    "The ratio is jnp.exp(target_logprobs - sampling_logprobs) of the unclamped log-ratio. "
    "safe_loss_mask's jnp.where keeps the value of a masked entry 0, but the gradient flows through "
    "both branches: a log-ratio that overflows exp (above ~88.7 in float32) at a masked entry, or in "
    "PPO's clipped region, gives 0·inf = NaN in the gradient.",
    draft_report=(
        "skyrl 0.3.0, skyrl/tinker/loss_fns.py: importance_sampling_loss and ppo_loss compute the "
        "ratio as jnp.exp(target_logprobs - sampling_logprobs) without clamping the log-ratio, and "
        "mask with safe_loss_mask, jnp.where(loss_mask != 0.0, loss_mask * loss_output, 0) "
        "('Strongly mask the loss_output to 0.0 if the loss_mask is zero'). The where keeps the "
        "loss value of a masked entry at 0, but jax.grad differentiates both branches: where the "
        "log-ratio exceeds ~88.7 (float32), exp gives inf and the masked branch's zero cotangent "
        "times the infinite derivative is NaN, which the backend's value_and_grad then sums into "
        "the LoRA gradients. The same happens at a valid token in PPO's clipped region (A > 0, "
        "ratio above the high threshold): the value is the finite clipped term, the gradient NaN "
        "instead of 0. Failing input (one token, LossFnConfig(0.8, 1.2)): loss_mask 0, "
        "target_logprobs 100, sampling_logprobs 0, advantage 1: both losses are 0 and their "
        "gradient NaN; with loss_mask 1, ppo_loss is -1.2 and its gradient NaN. The torch losses of the same release clamp the log-ratio first "
        "(ppo_utils.ppo_policy_loss: safe_exp_delta(clip=20.0)); doing the same here, or "
        "selecting the log-ratio with jnp.where before the exp (the double-where of jax's FAQ), "
        "keeps the gradient finite."
    ),
)
_FLUSH = Divergence(
    "numerical limit",
    "XLA's CPU backend flushes subnormal float32 results to zero: exp(−89) is 2.2e−39 (subnormal) "
    "in IEEE float32 and 0 in jax, so with no lower clip (threshold 0) a token whose log-ratio is "
    "below ~−87.3 gets the weight 0, and its loss −w·logp·A (about 2e−37 in the counterexample) "
    "becomes 0: an absolute error below the smallest normal float32 times |logp·A|.",
)

ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="skyrl.jax_ppo_loss",
        framework="skyrl",
        function=f"{_LOSS_FNS}:ppo_loss",
        settings={"loss_fn": "ppo", "clip_low_threshold": "1 - eps_low"},
        spec="ppo_clip",
        conventions={"dual_clip": None},
        candidate=skyrl_jax_ppo,
        divergences={
            "gradient": _TIES,
            "ratios_at_clip_boundaries": _TIES,
            "padding_contributes_nothing": _OVERFLOW,
            "huge_log_ratios_stay_finite": _OVERFLOW,
        },
        dtype="float32",
        xp="jax.numpy",
        note="−min(ρA, clip(ρ, 1−ε_l, 1+ε_h)·A) per token, ρ = exp of the unclamped log-ratio, "
        "padding 0 (safe_loss_mask); no dual clip.",
    ),
    Adapter(
        key="skyrl.jax_cispo_loss",
        framework="skyrl",
        function=f"{_LOSS_FNS}:cispo_loss",
        settings={"loss_fn": "cispo", "clip_high_threshold": "1 + eps_high"},
        spec="cispo",
        conventions={},
        candidate=skyrl_jax_cispo,
        divergences={"huge_log_ratios_stay_finite": _FLUSH},
        dtype="float32",
        xp="jax.numpy",
        note="−A·stop_gradient(clip(ρ, 1−ε_l, 1+ε_h))·logp per token; eps_low=None is a lower "
        "threshold 0.",
    ),
    Adapter(
        key="skyrl.jax_importance_sampling_loss",
        framework="skyrl",
        function=f"{_LOSS_FNS}:importance_sampling_loss",
        settings={"loss_fn": "importance_sampling"},
        spec="importance_weighted_pg",
        conventions={},
        candidate=skyrl_jax_importance_sampling,
        divergences={
            "values": _NO_CAP,
            "gradient": _NO_CAP,
            "ratios_at_clip_boundaries": _NO_CAP,
            "padding_contributes_nothing": _OVERFLOW,
            "huge_log_ratios_stay_finite": _OVERFLOW,
        },
        dtype="float32",
        xp="jax.numpy",
        note="−ρ·A per token, ρ = exp of the unclamped log-ratio, padding 0; no cap.",
    ),
    Adapter(
        key="skyrl.jax_cross_entropy_loss",
        framework="skyrl",
        function=f"{_LOSS_FNS}:cross_entropy_loss",
        settings={"loss_fn": "cross_entropy"},
        spec="nll",
        conventions={},
        candidate=skyrl_jax_cross_entropy,
        dtype="float32",
        xp="jax.numpy",
        note="−logp per token, padding 0 (the negative log-likelihood, unreduced).",
    ),
)

__all__ = ["ADAPTERS"]
