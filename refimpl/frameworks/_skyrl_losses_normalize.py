"""SkyRL (skyrl 0.3.0): ``advantage_batch_normalize``, read from ``skyrl/train/trainer.py``
``RayPPOTrainer._normalize_advantages``.

With ``trainer.algorithm.advantage_batch_normalize`` the method z-scores the token advantages
``(B, T)`` of the whole training batch before the loss reduction pre-scales them per mini-batch:
``mean = advantages.mean()`` over *every* position of the padded matrix, padding included,
``var = Σ (A − mean)²·response_mask / response_mask.sum()`` over the response tokens only, and
``A ← (A − mean) · rsqrt(max(var, 1e-8))`` (the population variance floored at 1e-8; padding
positions become ``−mean·rsqrt``, zeroed later by the loss mask). It then runs step 2, the loss
reduction (``apply_loss_reduction_to_advantages_minibatch`` per mini-batch, here
``loss_reduction="token_mean"`` over one mini-batch: ``A / Σ loss_mask``), which the candidates
undo by multiplying by the batch's valid-token count, so that they return step 1.

The method runs on ``RayPPOTrainer.__new__`` (:func:`normalizing_trainer`) with the options it reads
in ``cfg.trainer``, on SkyRL's own ``TrainingInputBatch``; each reward of the spec is the advantage
of a one-token response (SkyRL's outcome estimators broadcast the reward over the response tokens
and write 0 at padding). The padded variant pads every response to two positions, as a batch
whose longest response is longer: the padding's zeros then enter the mean.
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter, Divergence

_NORMALIZE = "skyrl.train.trainer:RayPPOTrainer._normalize_advantages"


def normalizing_trainer() -> Any:
    """A ``RayPPOTrainer`` made with ``__new__`` holding only the ``cfg.trainer`` options
    ``_normalize_advantages`` reads: ``advantage_batch_normalize=True``,
    ``loss_reduction="token_mean"`` (its scaling is undone by the candidates)."""
    import types

    from refimpl.frameworks import install_stubs, load_from_source

    install_stubs()
    cls = load_from_source("skyrl.train.trainer")["RayPPOTrainer"]
    trainer = cls.__new__(cls)
    algorithm = types.SimpleNamespace(
        advantage_batch_normalize=True, loss_reduction="token_mean", max_seq_len=1
    )
    trainer.cfg = types.SimpleNamespace(
        trainer=types.SimpleNamespace(algorithm=algorithm, micro_train_batch_size_per_gpu=1)
    )
    return trainer


def advantage_batch(rewards: Any, *, width: int) -> Any:
    """SkyRL's ``TrainingInputBatch`` of one-token responses padded to ``width`` positions: the
    reward at the first position, 0 at padding, response and loss masks 1 on the first."""
    import torch

    from refimpl.frameworks import install_stubs

    install_stubs()
    from skyrl.backends.skyrl_train.training_batch import TrainingInputBatch

    r = torch.as_tensor(rewards, dtype=torch.float64)
    mask = torch.zeros((r.shape[0], width), dtype=torch.float64)
    mask[:, 0] = 1.0
    advantages = torch.zeros_like(mask)
    advantages[:, 0] = r
    return TrainingInputBatch(
        {"advantages": advantages, "response_mask": mask, "loss_mask": mask.clone()}
    )


def skyrl_advantage_batch_normalize(rewards: Any) -> Any:
    """``RayPPOTrainer._normalize_advantages`` with ``advantage_batch_normalize=True`` on one
    mini-batch of one-token responses, unpadded; the token-mean pre-scaling undone."""
    from refimpl.frameworks._skyrl_losses_normalize import advantage_batch, normalizing_trainer

    data = advantage_batch(rewards, width=1)
    rows = len(data["advantages"])
    out = normalizing_trainer()._normalize_advantages(data, [(0, rows)])
    return out["advantages"][:, 0] * out["loss_mask"].sum()


def skyrl_advantage_batch_normalize_padded(rewards: Any) -> Any:
    """``RayPPOTrainer._normalize_advantages`` with ``advantage_batch_normalize=True`` on one
    mini-batch of one-token responses padded to two positions; the pre-scaling undone."""
    from refimpl.frameworks._skyrl_losses_normalize import advantage_batch, normalizing_trainer

    data = advantage_batch(rewards, width=2)
    rows = len(data["advantages"])
    out = normalizing_trainer()._normalize_advantages(data, [(0, rows)])
    return out["advantages"][:, 0] * out["loss_mask"].sum()


_PADDED_MEAN = Divergence(
    "defect",
    "advantage_batch_normalize centres on advantages.mean() over every position of the padded "
    "(B, T) matrix, padding included, while its variance is over the response tokens only: "
    "with any padding the advantages are not centred (they do not sum to 0, a constant batch "
    "is not 0 but (c − c·N/(B·T))·1e4, and a shift of the rewards moves them).",
    draft_report=(
        "skyrl 0.3.0, skyrl/train/trainer.py, RayPPOTrainer._normalize_advantages: with "
        "trainer.algorithm.advantage_batch_normalize=True the 'Z-score normalization' computes "
        "mean = advantages.mean() over the whole padded (batch, seq_len) tensor, padding "
        "positions included, but std = ((advantages - mean).pow(2) * response_mask).sum() / "
        "response_mask.sum() over response tokens only. Responses of unequal length leave "
        "padding (the outcome estimators write 0 there), so the mean is pulled toward 0 by "
        "the padding share and the normalized advantages of the valid tokens are not centred. "
        "Example: three one-token responses with rewards 1, 2, 3 in a batch padded to two "
        "positions give mean 1 (not 2) and advantages 0, 0.775, 1.549 instead of the "
        "z-scores -1.225, 0, 1.225; equal rewards c give c/2·1e4 (the variance is then "
        "floored at 1e-8) instead of 0. A masked mean, (advantages * response_mask).sum() / "
        "num_actions, would match the masked variance."
    ),
)

_VARIANCE_FLOOR = Divergence(
    "numerical limit",
    "the variance is floored at 1e-8 (rsqrt(max(var, 1e-8))): rewards whose spread is below 1e-4 "
    "are multiplied by 1e4 instead of divided by their standard deviation, and equal rewards keep "
    "the mean's rounding residue times 1e4 where the z-score is 0; the spec's eps adds to the "
    "standard deviation and cannot express a floor on the variance.",
)

ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="skyrl.advantage_batch_normalize",
        framework="skyrl",
        function=_NORMALIZE,
        settings={"advantage_batch_normalize": True},
        spec="batch_mean_advantages",
        conventions={"std": "population"},
        candidate=skyrl_advantage_batch_normalize,
        divergences={
            "constant_batch_is_zero": _VARIANCE_FLOOR,
            "shift_invariance": _VARIANCE_FLOOR,
        },
        note="each reward a one-token response, no padding: (r − mean)·rsqrt(max(var, 1e-8)), "
        "population variance; the loss reduction's 1/N undone.",
    ),
    Adapter(
        key="skyrl.advantage_batch_normalize_padded",
        framework="skyrl",
        function=_NORMALIZE,
        settings={"advantage_batch_normalize": True},
        spec="batch_mean_advantages",
        conventions={"std": "population"},
        candidate=skyrl_advantage_batch_normalize_padded,
        divergences={
            "values": _PADDED_MEAN,
            "zero_sum": _PADDED_MEAN,
            "constant_batch_is_zero": _PADDED_MEAN,
            "shift_invariance": _PADDED_MEAN,
        },
        note="each reward a one-token response padded to two positions (0 at padding): the "
        "padding enters the mean, not the variance.",
    ),
)

__all__ = ["ADAPTERS", "advantage_batch", "normalizing_trainer"]
