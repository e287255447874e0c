"""AReaL's proximal log-probability approximation on fixed inputs, and the actor path that trains
on it: ``grpo_loss_fn`` with ``prox_logp_method="loglinear"`` and no recomputed ``prox_logp``.

The matrix runs ``compute_prox_logp_approximations`` against the ``proximal_logprobs`` spec; these
pin the weights by hand and show, on the trainer's loss function, that the approximation enters
the decoupled loss detached (the gradient is the one of the decoupled loss with π_prox a constant).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from refimpl.frameworks import STUBS
from refimpl.losses import aggregate_loss, decoupled_ppo_loss, proximal_logprobs

pytestmark = pytest.mark.skipif(
    not any(s.package == "areal.trainer" for s in STUBS),
    reason="needs the areal.trainer stub in refimpl.frameworks.STUBS (actor.py's package imports "
    "swanlab)",
)

F32 = torch.float32


def test_the_loglinear_weights_by_hand() -> None:
    from refimpl.frameworks._areal_losses_proximal import areal_prox_loglinear

    # v_θ = 4: a prompt token, staleness 0, 1, 2, 4 → α = 0, 0, 0, 1/2, 3/4; ℓ − b = 4
    lp = torch.full((1, 5), -0.5, dtype=F32, requires_grad=True)
    lb = torch.full((1, 5), -4.5, dtype=F32)
    versions = torch.tensor([[-1, 4, 3, 2, 0]])
    got = areal_prox_loglinear(lp, lb, versions, current_version=4)
    assert got.tolist() == [[-4.5, -4.5, -4.5, -2.5, -1.5]]
    got.sum().backward()
    assert lp.grad is not None
    assert lp.grad.tolist() == [[0.0, 0.0, 0.0, 0.5, 0.75]]  # differentiable when not detached


def test_the_linear_approximation_adds_1e_10() -> None:
    from refimpl.frameworks._areal_losses_proximal import areal_prox_linear

    # α = 1/2 on p_θ = μ = 2^-40: log(2^-40 + 1e-10), not −40 log 2
    lp = torch.full((1, 1), -40 * math.log(2.0), dtype=torch.float64)
    got = areal_prox_linear(lp, lp.clone(), torch.tensor([[2]]), current_version=4)
    want = proximal_logprobs(lp.numpy(), lp.numpy(), [[2]], current_version=4, method="linear")
    floored = proximal_logprobs(
        lp.numpy(), lp.numpy(), [[2]], current_version=4, method="linear", floor=1e-10
    )
    assert got.item() == pytest.approx(float(floored.logp_prox[0, 0]), rel=1e-6)
    assert abs(got.item() - float(want.logp_prox[0, 0])) > 1e-3


def test_the_actor_trains_on_the_detached_approximation() -> None:
    """``grpo_loss_fn`` (decoupled, ``prox_logp_method="loglinear"``, ``prox_logp`` None) against
    refimpl: the decoupled PPO loss on π_prox = proximal_logprobs(sg[log π_θ]), token mean. Its
    gradient is the one with π_prox constant; a differentiable π_prox would give another."""
    from areal.api.cli_args import RejectionSamplingConfig
    from areal.trainer.ppo.actor import grpo_loss_fn
    from areal.utils import stats_tracker  # a scope of its own: earlier calls leave statistics

    lp_np = np.asarray([[-0.25, -1.5, -0.5, -2.0], [-1.0, -0.75, -3.0, -0.5]])
    lb_np = np.asarray([[-0.5, -1.0, -1.0, -1.5], [-2.0, -1.0, -2.5, -0.25]])
    adv_np = np.asarray([[1.0, -1.0, 0.5, 2.0], [-0.5, 1.0, 1.0, -2.0]])
    versions = [[-1, 2, 1, 0], [0, 0, 3, -1]]
    mask_np = np.asarray([[1, 1, 1, 1], [1, 1, 1, 0]], dtype=float)
    lp = torch.tensor(lp_np, dtype=F32, requires_grad=True)
    data = {
        "logprobs": torch.tensor(lb_np, dtype=F32),
        "advantages": torch.tensor(adv_np, dtype=F32),
        "loss_mask": torch.tensor(mask_np > 0),
        "versions": torch.tensor(versions),
    }
    with stats_tracker.scope("test_the_actor_trains_on_the_detached_approximation"):
        loss = grpo_loss_fn(
            lp,
            torch.zeros_like(lp),
            data,
            eps_clip=0.2,
            eps_clip_higher=None,
            c_clip=None,
            rejection_sampling=RejectionSamplingConfig(
                level="token", action="mask", metric="ratio", upper=math.inf
            ),
            current_version=4,
            prox_logp_method="loglinear",
            use_decoupled_loss=True,
        )
    loss.backward()
    assert lp.grad is not None

    seen = lp.detach().double().numpy()  # the float32 inputs as AReaL saw them
    lb = data["logprobs"].double().numpy()
    prox = proximal_logprobs(seen, lb, versions, current_version=4).logp_prox
    weights = mask_np / mask_np.sum()
    terms = decoupled_ppo_loss(seen, prox, lb, adv_np, eps_low=0.2, mask=mask_np, cotangent=weights)
    assert loss.item() == pytest.approx(
        aggregate_loss(terms.loss, mask_np, mode="token_mean"), rel=1e-6
    )
    np.testing.assert_allclose(lp.grad.double().numpy(), terms.grad, rtol=1e-5, atol=1e-7)

    # a differentiable π_prox adds d loss/d prox · α at the tokens with α > 0 (here all unclipped)
    alpha = proximal_logprobs(seen, lb, versions, current_version=4).grad
    eps = 1e-6
    bumped = decoupled_ppo_loss(
        seen, prox + eps * alpha, lb, adv_np, eps_low=0.2, mask=mask_np, cotangent=weights
    )
    through_prox = (bumped.loss * weights).sum() - (terms.loss * weights).sum()
    assert abs(through_prox) > 1e-8  # the attached variant would differ: AReaL detaches


def test_the_actor_path_entry_fails_if_declared_differentiable() -> None:
    """areal.grpo_loss_prox_loglinear passes with gradient='stopped' (the matrix) and fails the
    gradient check under 'autodiff': the approximation reaches the loss detached."""
    from refimpl.frameworks import check

    report = check(
        "areal.grpo_loss_prox_loglinear",
        max_examples=10,
        conventions={"method": "loglinear", "gradient": "autodiff"},
    )
    assert report["gradient"].status == "failed", report.summary()
    assert report["values"].status == "passed", report.summary()


def _source(module: str) -> str:
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec(module)
    assert spec is not None
    assert spec.origin is not None
    return Path(spec.origin).read_text(encoding="utf-8")


def test_the_trainer_passes_the_version_of_the_proximal_weights() -> None:
    """What ``areal.ppo_update_prox_loglinear`` declares (``proximal_version="engine"``), read
    from the pinned sources: ``ppo_update`` passes the engine's version; the training loop
    recomputes ``prox_logp`` with the current weights, then updates them, broadcasts them as
    ``global_step + 1`` and sets that version, so during a step the engine's version is the
    proximal weights'. The approximation still assumes the one before it."""
    actor, loop = _source("areal.trainer.ppo.actor"), _source("areal.trainer.rl_trainer")
    update = actor[actor.index("    def ppo_update(") :]
    assert "current_version = self.engine.get_version()" in update
    assert "current_version=current_version," in update
    assert "    v_proximal = current_version - 1\n" in actor
    order = [
        loop.index("prox_logps = self.actor.compute_logp(rollout_batch)"),
        loop.index("self.actor.ppo_update(adv_batch)"),
        loop.index("new_version = global_step + 1"),
        loop.index("self.actor.update_weights(versioned_meta)"),
        loop.index("self.actor.set_version(new_version)"),
        loop.index("self.rollout.set_version(new_version)"),
    ]
    assert order == sorted(order), order


def test_the_trainers_versions_shift_every_stale_tokens_weight_by_one_version() -> None:
    """The defect's failing input by hand: engine version 1, a token of version 0, ℓ = 0,
    μ = −1. AReaL's actor path returns μ (α = 0); with the proximal policy at the engine's
    version and the trained one past it, α = 1/2."""
    from refimpl.frameworks._areal_losses_proximal import areal_grpo_loss_prox_loglinear

    lp, lb = torch.zeros((1, 1), dtype=F32), torch.full((1, 1), -1.0, dtype=F32)
    got = areal_grpo_loss_prox_loglinear(lp, lb, torch.tensor([[0]]), current_version=1)
    assert got.tolist() == [[-1.0]]
    aligned = proximal_logprobs(
        lp.numpy(), lb.numpy(), [[0]], current_version=2, proximal_version=1
    )
    assert aligned.logp_prox.tolist() == [[-0.5]]
