"""AReaL 1.0.4: the proximal log-probabilities approximated from the token versions (A-3PO).

``areal/trainer/ppo/actor.py:compute_prox_logp_approximations(old_logp, logprobs, versions,
current_version, method)`` takes the proximal version to be ``current_version - 1`` and each
token's weight ``alpha = clamp((v_prox − v_behave)/(v_theta − v_behave), 0, 1)`` where
``v_theta − v_behave > 0`` and ``versions >= 0``, else 0 (``v_behave = versions.float()``).
``"loglinear"`` returns ``old_logp + alpha·(logprobs − old_logp)``, ``"linear"``
``log((1 − alpha)·exp(old_logp) + alpha·exp(logprobs) + 1e-10)``, ``"rollout"``
``old_logp.clone()``. ``grpo_loss_fn`` with ``prox_logp_method="loglinear"`` and no recomputed
``prox_logp`` trains on the ``"loglinear"`` one (``_resolve_proximal_logp``), computed from
``logprobs.detach()``: the decoupled loss treats it as a constant; ``"metrics"`` trains on the
recomputed one and logs all three.

Importable only with the ``areal.trainer`` stub (see :mod:`refimpl.frameworks._areal_losses_actor`).
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter, Divergence
from refimpl.frameworks._stubs import STUBS

_FUNCTION = "areal.trainer.ppo.actor:compute_prox_logp_approximations"


def _approximation(logp: Any, logp_behavior: Any, versions: Any, version: int, method: str) -> Any:
    """``compute_prox_logp_approximations(old_logp=μ, logprobs=π_θ, versions, current_version,
    method)[method]``: the one approximation, differentiable in ``logprobs``."""
    from areal.trainer.ppo.actor import compute_prox_logp_approximations

    out = compute_prox_logp_approximations(
        old_logp=logp_behavior,
        logprobs=logp,
        versions=versions,
        current_version=int(version),
        method=method,
    )
    return out[method]


def areal_prox_loglinear(
    logp: Any, logp_behavior: Any, versions: Any, *, current_version: Any
) -> Any:
    """``compute_prox_logp_approximations(..., method="loglinear")``: what
    ``prox_logp_method="loglinear"`` trains on."""
    return _approximation(logp, logp_behavior, versions, current_version, "loglinear")


def areal_prox_linear(logp: Any, logp_behavior: Any, versions: Any, *, current_version: Any) -> Any:
    """``compute_prox_logp_approximations(..., method="linear")``: the probabilities
    interpolated, ``log(p + 1e-10)`` (logged under ``prox_logp_method="metrics"``)."""
    return _approximation(logp, logp_behavior, versions, current_version, "linear")


def areal_prox_rollout(
    logp: Any, logp_behavior: Any, versions: Any, *, current_version: Any
) -> Any:
    """``compute_prox_logp_approximations(..., method="rollout")``: the behaviour log-probs
    (logged under ``prox_logp_method="metrics"``)."""
    return _approximation(logp, logp_behavior, versions, current_version, "rollout")


def areal_grpo_loss_prox_loglinear(
    logp: Any, logp_behavior: Any, versions: Any, *, current_version: Any
) -> Any:
    """``grpo_loss_fn`` (``use_decoupled_loss=True``, ``prox_logp_method="loglinear"``, no
    ``prox_logp`` in the batch, zero advantages): the proximal log-probs it hands to
    ``ppo_actor_loss_fn``, read by wrapping that function in the actor module for the call (the
    loss itself is discarded). The approximation comes from ``_resolve_proximal_logp`` on
    ``logprobs.detach()``, so autograd finds no path back to ``logp``. The call runs in a scope
    of its own of AReaL's stats tracker: the trainer exports (and resets) the tracker after each
    step, and statistics left by earlier calls of other shapes would fail its shape checks."""
    import uuid

    import torch
    from areal.trainer.ppo import actor
    from areal.utils import stats_tracker

    seen: list[Any] = []
    real = actor.ppo_actor_loss_fn

    def spy(**kwargs: Any) -> Any:
        seen.append(kwargs["proximal_logprobs"])
        return real(**kwargs)

    data = {
        "logprobs": logp_behavior,
        "advantages": torch.zeros_like(logp_behavior),
        "loss_mask": torch.ones_like(logp_behavior, dtype=torch.bool),
        "versions": versions,
    }
    actor.ppo_actor_loss_fn = spy
    try:
        with stats_tracker.scope(f"refimpl-{uuid.uuid4().hex}"):
            actor.grpo_loss_fn(
                logp,
                torch.zeros_like(logp),
                data,
                eps_clip=0.2,
                eps_clip_higher=None,
                c_clip=None,
                current_version=int(current_version),
                prox_logp_method="loglinear",
                use_decoupled_loss=True,
            )
    finally:
        actor.ppo_actor_loss_fn = real
    return seen[0]


def _adapter(method: str, candidate: Any, note: str, **conventions: Any) -> Adapter:
    # the weight comes from versions.float(): float32 whatever the log-probs' dtype, so the
    # interpolations are checked in float32 (the rollout copy has no weight: float64)
    dtype = "float64" if method == "rollout" else "float32"
    return Adapter(
        key=f"areal.prox_logp_{method}",
        framework="areal",
        function=_FUNCTION,
        settings={"method": method, "v_proximal": "current_version - 1"},
        spec="proximal_logprobs",
        conventions={"method": method, **conventions},
        candidate=candidate,
        dtype=dtype,
        note=note,
    )


_ADAPTERS: tuple[Adapter, ...] = (
    _adapter(
        "loglinear",
        areal_prox_loglinear,
        "A-3PO: the proximal log-probs interpolated in log space between behaviour and current "
        "policy by staleness, α = (v_θ − 1 − v_b)/(v_θ − v_b); what prox_logp_method='loglinear' "
        "trains on (detached there).",
    ),
    _adapter(
        "linear",
        areal_prox_linear,
        "The probabilities interpolated by the same α, log(p + 1e-10): a comparison logged under "
        "prox_logp_method='metrics'.",
        floor=1e-10,
    ),
    _adapter(
        "rollout",
        areal_prox_rollout,
        "The behaviour log-probs as the proximal ones: the baseline logged under "
        "prox_logp_method='metrics'.",
    ),
)

#: grpo_loss_fn's settings on the path that skips the recompute and approximates the proximal
#: log-probabilities.
_LOSS_PATH = {"use_decoupled_loss": True, "prox_logp_method": "loglinear", "prox_logp": None}

_ADAPTERS = (
    *_ADAPTERS,
    Adapter(
        key="areal.grpo_loss_prox_loglinear",
        framework="areal",
        function="areal.trainer.ppo.actor:grpo_loss_fn",
        settings={**_LOSS_PATH, "current_version": "current_version"},
        spec="proximal_logprobs",
        conventions={"method": "loglinear", "gradient": "stopped"},
        candidate=areal_grpo_loss_prox_loglinear,
        dtype="float32",  # grpo_loss_fn's stats_tracker.stat refuses float64 tensors
        note="The actor's path: the proximal log-probs grpo_loss_fn trains on when it skips the "
        "recompute, the log-linear approximation of logprobs.detach() (no gradient through it).",
    ),
)

#: What the trainer passes as ``current_version``, and which weights the proximal policy is.
_BOOKKEEPING = (
    "areal/trainer/ppo/actor.py:PPOActor.ppo_update passes current_version=self.engine.get_version(); "
    "areal/trainer/rl_trainer.py sets it, after each step's update_weights, to new_version = "
    "global_step + 1 on the actor and the rollout (so during step s it is s, the last broadcast), "
    "and recomputes prox_logp (actor.compute_logp) with those weights before ppo_update"
)

_ONE_VERSION_BEHIND = Divergence(
    "defect",
    "compute_prox_logp_approximations takes the proximal version to be current_version − 1 (its "
    "comment: 'the last broadcast'), but the trainer's current_version is the engine's version, "
    "the last broadcast itself and the weights prox_logp is recomputed with. A token generated one "
    "version before them gets α = 0, its behaviour log-probability, as the proximal one; with the "
    "trainer's versions (proximal = engine version, the policy being trained one past it) it is "
    "half-way, and every older token's weight is shifted the same way.",
    draft_report=(
        "areal/trainer/ppo/actor.py: compute_prox_logp_approximations sets `v_proximal = "
        "current_version - 1` ('Assume proximal version is current_version - 1 (last broadcast)'), "
        "and PPOActor.ppo_update passes `current_version = self.engine.get_version()`. In "
        "areal/trainer/rl_trainer.py, each step ends with `update_weights` of `new_version = "
        "global_step + 1` and `set_version(new_version)` on the actor and the rollout, so during "
        "step s the engine's version is s: the last broadcast is version s, not s − 1, and the "
        "recomputed `prox_logp` (actor.compute_logp before ppo_update, what prox_logp_method="
        "'metrics' trains on) is the log-probability under those version-s weights. The "
        "approximation therefore places the proximal policy one version too early: a token "
        "generated at version s − 1 gets alpha = 0 and its behaviour log-probability (version "
        "s − 1) stands for the version-s proximal log-probability; with the proximal policy at the "
        "engine version and the trained policy one past it, alpha = (v_prox − v_behave) / (v_theta "
        "− v_behave) is 1/2 for it, 2/3 for a token of version s − 2, and so on. Passing "
        "`current_version = self.engine.get_version() + 1` from ppo_update (or taking v_proximal "
        "= current_version) aligns the two. Failing input: current_version = 1 (engine version), "
        "one token of version 0, log-probabilities ℓ = 0, μ = −1: AReaL returns −1, the aligned "
        "approximation −0.5."
    ),
)

_ADAPTERS = (
    *_ADAPTERS,
    Adapter(
        key="areal.ppo_update_prox_loglinear",
        framework="areal",
        function="areal.trainer.ppo.actor:grpo_loss_fn",
        settings={
            **_LOSS_PATH,
            "current_version": "engine.get_version() (PPOActor.ppo_update)",
        },
        spec="proximal_logprobs",
        conventions={"method": "loglinear", "gradient": "stopped", "proximal_version": "engine"},
        candidate=areal_grpo_loss_prox_loglinear,
        dtype="float32",
        divergences={
            "values": _ONE_VERSION_BEHIND,
            "huge_log_ratios_stay_finite": _ONE_VERSION_BEHIND,
        },
        note="The actor's path with the trainer's versions: the current_version it is given is the "
        f"engine's, the proximal weights' ({_BOOKKEEPING}).",
    ),
)

ADAPTERS: tuple[Adapter, ...] = (
    _ADAPTERS if any(s.package == "areal.trainer" for s in STUBS) else ()
)

__all__ = ["ADAPTERS"]
