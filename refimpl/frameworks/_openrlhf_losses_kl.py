"""OpenRLHF (openrlhf 0.11.2): the KL estimators, log-probabilities and entropy, read from its sources.

``openrlhf/models/utils.py``:

- ``compute_approx_kl(log_probs, log_probs_base, log_probs_old=None, kl_estimator, unbiased_gradient)``
  casts both log-probabilities to float32 (``.float()``), takes ``d = log π − log π_ref`` and returns
  ``k1 = d``, ``k2 = d²/2`` or ``k3 = exp(−d') − 1 + d'`` with ``d' = max(d, −10)``, each clamped to
  ``[−10, 10]`` (``value.clamp(min=-10, max=10)``). The ``−10`` floor on ``k3``'s log-ratio is
  invisible: ``k3(−10) ≈ 2.2e4`` is far above the value clamp, which already makes the value 10 and
  its gradient 0 for every ``d < −2.6``. The per-token estimate is not masked (the trainer masks
  it in ``aggregate_loss``). With ``unbiased_gradient=True`` it returns the clamped value with
  the gradient of ``sg[w]·d²/2`` (straight-through), ``w = min(exp(log π − log π_old), 10)``
  detached (``KL_IS_WEIGHT_CLIP``), or ``w = 1`` without ``log_probs_old``.
- ``log_probs_from_logits(logits, labels, temperature=1.0)`` divides the logits by the temperature
  **in place** (``logits.div_``), then (no flash-attn installed) ``gather − logsumexp`` for
  float32/float64 logits, ``log_softmax`` row by row otherwise. No top-k or top-p.
- ``masked_mean(tensor, mask, dim=None)``: ``Σ tensor·mask / Σ mask`` (no guard against 0/0).
- ``compute_entropy(logits)`` (``@torch.compile``): ``logsumexp(z) − Σ softmax(z)·z``; the actor
  (``openrlhf/models/actor.py:Actor.forward``) divides the logits by the temperature first.

``openrlhf/trainer/ppo_utils/kl_controller.py:AdaptiveKLController(init_kl_coef, target,
horizon)``: ``update(current, n_steps)`` multiplies ``value`` by ``1 + clip(current/target − 1,
−0.2, 0.2)·n_steps/horizon`` (``ppo_trainer.py`` passes the rollout batch size times the samples
per prompt as ``n_steps``).

Importing ``openrlhf.models.utils`` needs two stubs (``deepspeed`` is not installed; the package
``openrlhf.models`` imports ``flash_attn`` through ``actor.py``): see the report of this round.
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter

_UTILS = "openrlhf.models.utils"
# .float(): float64 inputs are computed in float32; the value is clamped to ±10; not masked.
_KL = {"compute_dtype": "float32", "clamp": 10.0, "padding": "ignored"}


def openrlhf_kl_k1(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """OpenRLHF ``compute_approx_kl(kl_estimator="k1")`` (the KL loss's per-token term)."""
    from openrlhf.models.utils import compute_approx_kl

    return compute_approx_kl(logp, logp_ref, kl_estimator="k1")


def openrlhf_kl_k2(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """OpenRLHF ``compute_approx_kl(kl_estimator="k2")``."""
    from openrlhf.models.utils import compute_approx_kl

    return compute_approx_kl(logp, logp_ref, kl_estimator="k2")


def openrlhf_kl_k3(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """OpenRLHF ``compute_approx_kl(kl_estimator="k3")``."""
    from openrlhf.models.utils import compute_approx_kl

    return compute_approx_kl(logp, logp_ref, kl_estimator="k3")


def openrlhf_kl_k1_unbiased(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """OpenRLHF ``compute_approx_kl(kl_estimator="k1", unbiased_gradient=True)``, no old log-probs."""
    from openrlhf.models.utils import compute_approx_kl

    return compute_approx_kl(logp, logp_ref, kl_estimator="k1", unbiased_gradient=True)


def openrlhf_kl_k2_unbiased(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """OpenRLHF ``compute_approx_kl(kl_estimator="k2", unbiased_gradient=True)``, no old log-probs."""
    from openrlhf.models.utils import compute_approx_kl

    return compute_approx_kl(logp, logp_ref, kl_estimator="k2", unbiased_gradient=True)


def openrlhf_kl_k3_unbiased(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """OpenRLHF ``compute_approx_kl(kl_estimator="k3", unbiased_gradient=True)``, no old log-probs."""
    from openrlhf.models.utils import compute_approx_kl

    return compute_approx_kl(logp, logp_ref, kl_estimator="k3", unbiased_gradient=True)


def openrlhf_kl_k1_off_policy(logp: Any, logp_ref: Any, logp_behavior: Any, *, mask: Any) -> Any:
    """``compute_approx_kl(kl_estimator="k1", unbiased_gradient=True, log_probs_old=logp_behavior)``.

    As the actor trainer calls it (``ppo_actor.py:training_step``, ``log_probs_old`` the old
    policy's log-probabilities of the sampled tokens).
    """
    from openrlhf.models.utils import compute_approx_kl

    return compute_approx_kl(
        logp, logp_ref, log_probs_old=logp_behavior, kl_estimator="k1", unbiased_gradient=True
    )


def openrlhf_kl_k2_off_policy(logp: Any, logp_ref: Any, logp_behavior: Any, *, mask: Any) -> Any:
    """``compute_approx_kl(kl_estimator="k2", unbiased_gradient=True, log_probs_old=logp_behavior)``."""
    from openrlhf.models.utils import compute_approx_kl

    return compute_approx_kl(
        logp, logp_ref, log_probs_old=logp_behavior, kl_estimator="k2", unbiased_gradient=True
    )


def openrlhf_kl_k3_off_policy(logp: Any, logp_ref: Any, logp_behavior: Any, *, mask: Any) -> Any:
    """``compute_approx_kl(kl_estimator="k3", unbiased_gradient=True, log_probs_old=logp_behavior)``."""
    from openrlhf.models.utils import compute_approx_kl

    return compute_approx_kl(
        logp, logp_ref, log_probs_old=logp_behavior, kl_estimator="k3", unbiased_gradient=True
    )


def openrlhf_log_probs(logits: Any, tokens: Any, *, temperature: float, mask: Any) -> Any:
    """OpenRLHF ``log_probs_from_logits(logits, labels, temperature)`` (no top-k, no top-p).

    It divides its ``logits`` argument in place (``logits.div_``), which autograd refuses on a
    leaf: the actor passes the model's output (not a leaf), so a copy is passed here.
    """
    from openrlhf.models.utils import log_probs_from_logits

    return log_probs_from_logits(logits.clone(), tokens, temperature=float(temperature))


def openrlhf_masked_mean(loss: Any, mask: Any) -> Any:
    """OpenRLHF ``masked_mean(tensor, mask, dim=None)`` (``aggregate_loss`` without counts)."""
    from openrlhf.models.utils import masked_mean

    return masked_mean(loss, mask, dim=None)


def openrlhf_entropy(logits: Any) -> Any:
    """OpenRLHF ``compute_entropy(logits)`` (``@torch.compile``; the actor divides by T first)."""
    from openrlhf.models.utils import compute_entropy

    return compute_entropy(logits)


def openrlhf_adaptive_kl_controller(
    coef: Any, current_kl: Any, *, target: Any, horizon: Any, n_steps: Any
) -> float:
    """``AdaptiveKLController(coef, target, horizon)``, one ``update(current_kl, n_steps)``, then
    its ``value``."""
    from openrlhf.trainer.ppo_utils.kl_controller import AdaptiveKLController

    ctrl = AdaptiveKLController(float(coef), float(target), int(horizon))
    ctrl.update(float(current_kl), int(n_steps))
    return float(ctrl.value)


def _kl(estimator: str, candidate: Any, *, unbiased: bool = False) -> Adapter:
    name = estimator + ("_unbiased_gradient" if unbiased else "")
    return Adapter(
        key=f"openrlhf.kl_{name}",
        framework="openrlhf",
        function=f"{_UTILS}:compute_approx_kl",
        settings={"kl_estimator": estimator, "unbiased_gradient": unbiased},
        spec="kl_penalty",
        conventions={**_KL, "estimator": estimator + ("+" if unbiased else "")},
        candidate=candidate,
        note=(
            f"{estimator} in float32, clamped to ±10, unmasked"
            + ("; the gradient is k2's (w = 1 without log_probs_old)." if unbiased else ".")
        ),
    )


def _kl_off_policy(estimator: str, candidate: Any) -> Adapter:
    return Adapter(
        key=f"openrlhf.kl_{estimator}_unbiased_gradient_off_policy",
        framework="openrlhf",
        function=f"{_UTILS}:compute_approx_kl",
        settings={"kl_estimator": estimator, "unbiased_gradient": True, "log_probs_old": "given"},
        spec="importance_weighted_kl",
        conventions={
            **_KL,
            "estimator": estimator + "+",
            "weighting": "gradient_only",
            "weight_cap": 10.0,
        },
        candidate=candidate,
        note=f"value {estimator} (clamped ±10); gradient min(π/π_old, 10)·d, the weight detached.",
    )


ADAPTERS: tuple[Adapter, ...] = (
    _kl("k1", openrlhf_kl_k1),
    _kl("k2", openrlhf_kl_k2),
    _kl("k3", openrlhf_kl_k3),
    _kl("k1", openrlhf_kl_k1_unbiased, unbiased=True),
    _kl("k2", openrlhf_kl_k2_unbiased, unbiased=True),
    _kl("k3", openrlhf_kl_k3_unbiased, unbiased=True),
    _kl_off_policy("k1", openrlhf_kl_k1_off_policy),
    _kl_off_policy("k2", openrlhf_kl_k2_off_policy),
    _kl_off_policy("k3", openrlhf_kl_k3_off_policy),
    Adapter(
        key="openrlhf.log_probs_from_logits",
        framework="openrlhf",
        function=f"{_UTILS}:log_probs_from_logits",
        settings={"temperature": "temperature"},
        spec="token_logprobs",
        conventions={"padding": "ignored", "truncation": "none"},
        candidate=openrlhf_log_probs,
        note="z/T then gather − logsumexp over the full vocabulary; no top-k/top-p, unmasked.",
    ),
    Adapter(
        key="openrlhf.masked_mean",
        framework="openrlhf",
        function=f"{_UTILS}:masked_mean",
        settings={"dim": None},
        spec="aggregation",
        conventions={"mode": "token_mean", "empty_batch": "excluded"},
        candidate=openrlhf_masked_mean,
        note="Σ tensor·mask / Σ mask (0/0 on a batch without a valid token).",
    ),
    Adapter(
        key="openrlhf.compute_entropy",
        framework="openrlhf",
        function=f"{_UTILS}:compute_entropy",
        settings={},
        spec="token_entropy",
        conventions={"temperature": "none", "mask": "none", "padding": "ignored"},
        candidate=openrlhf_entropy,
        note="lse(z) − Σ softmax(z)·z at every position; the caller divides by T and masks.",
    ),
    Adapter(
        key="openrlhf.adaptive_kl_controller",
        framework="openrlhf",
        function="openrlhf.trainer.ppo_utils.kl_controller:AdaptiveKLController.update",
        settings={"kl_target": "target", "kl_horizon": "horizon"},
        spec="adaptive_kl_coefficient",
        conventions={},
        candidate=openrlhf_adaptive_kl_controller,
        note="value·(1 + clip(KL/target − 1, ±0.2)·n_steps/horizon).",
    ),
)

__all__ = ["ADAPTERS"]
