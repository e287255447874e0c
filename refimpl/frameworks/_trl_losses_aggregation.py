"""TRL (trl 1.16.0): each GRPO ``loss_type``'s aggregation and its real scaling path.

Each adapter feeds a given per-token loss through the aggregation branch of the real
``GRPOTrainer._compute_loss`` (see :mod:`refimpl.frameworks._trl_losses`), and its
:class:`~refimpl.frameworks.Partition` calls the same method on one micro-batch with the numbers
TRL's trainer passes: ``current_gradient_accumulation_steps = K``, ``accelerator.num_processes = R``,
``steps_per_generation = K`` (``GRPOConfig``'s default) and ``num_items_in_batch`` the step's
valid tokens. TRL sets ``loss_is_scaled_for_ga = True``, so transformers' ``Trainer.training_step``
does not divide by K again; DDP averages the ranks' gradients.
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter, Divergence, Partition

_GRPO = "trl.trainer.grpo_trainer:GRPOTrainer._compute_loss"
_TRAINER = "trl/trainer/grpo_trainer.py:GRPOTrainer._compute_loss"


# ---------------------------------------------------------------------------------------------
# aggregation: each loss_type's branch, fed a given per-token loss, and its real scaling path
# ---------------------------------------------------------------------------------------------


def aggregate_through(loss: Any, mask: Any, **settings: Any) -> Any:
    """``GRPOTrainer._compute_loss`` with ``per_token_loss = loss``: on-policy (``coef_1 = 1``, no
    ``old_per_token_logps``) the clipped branch gives ``−min(A, A) = −A`` per token, so the
    advantages are passed as ``−loss`` (B, T) and the method's aggregation branch of
    ``settings["loss_type"]`` is what differentiates ``loss``."""
    import torch

    logp = torch.zeros_like(loss.detach())
    from refimpl.frameworks._trl_losses import grpo_inputs, grpo_trainer

    trainer = grpo_trainer(logp, **settings)
    return trainer._compute_loss(None, grpo_inputs(logp, mask, -loss))


def trl_grpo_aggregation(loss: Any, mask: Any) -> Any:
    """TRL ``loss_type="grpo"`` aggregation (also sapo's): the real ``GRPOTrainer._compute_loss``
    fed ``loss`` through the on-policy clipped branch, K = 1."""
    from refimpl.frameworks._trl_losses_aggregation import aggregate_through

    return aggregate_through(loss, mask, loss_type="grpo")


def trl_bnpo_aggregation(loss: Any, mask: Any) -> Any:
    """TRL ``loss_type="bnpo"`` aggregation: the real ``GRPOTrainer._compute_loss`` fed ``loss``
    through the on-policy clipped branch, K = 1."""
    from refimpl.frameworks._trl_losses_aggregation import aggregate_through

    return aggregate_through(loss, mask, loss_type="bnpo")


def trl_dr_grpo_aggregation(loss: Any, mask: Any, *, constant: Any) -> Any:
    """TRL ``loss_type="dr_grpo"`` aggregation, ``max_completion_length=constant``: the real
    ``GRPOTrainer._compute_loss`` fed ``loss`` through the on-policy clipped branch, K = 1."""
    from refimpl.frameworks._trl_losses_aggregation import aggregate_through

    return aggregate_through(loss, mask, loss_type="dr_grpo", max_completion_length=constant)


def trl_dapo_aggregation(loss: Any, mask: Any) -> Any:
    """TRL ``loss_type="dapo"`` aggregation (also cispo's and vespo's), one micro-batch on one rank
    (``num_items_in_batch`` = its valid tokens): the real ``GRPOTrainer._compute_loss`` fed
    ``loss`` through the on-policy clipped branch."""
    from refimpl.frameworks._trl_losses_aggregation import aggregate_through

    return aggregate_through(loss, mask, loss_type="dapo")


def trl_luspo_aggregation(loss: Any, mask: Any) -> Any:
    """TRL ``loss_type="luspo"`` aggregation (token level, so ``per_token_loss`` is (B, T)): the
    real ``GRPOTrainer._compute_loss`` fed ``loss`` through the on-policy clipped branch, K = 1."""
    from refimpl.frameworks._trl_losses_aggregation import aggregate_through

    return aggregate_through(loss, mask, loss_type="luspo")


def trl_micro_batch(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    mask: Any,
    *,
    loss_type: str,
    accumulation_steps: int,
    world_size: int,
    global_tokens: Any = None,
    max_completion_length: int = 1,
) -> Any:
    """One micro-batch's loss as TRL's trainer computes it: ``GRPOTrainer._compute_loss`` in training
    mode with ``current_gradient_accumulation_steps = K``, ``accelerator.num_processes = R``,
    ``steps_per_generation = K`` (the default) and ``inputs["num_items_in_batch"]`` the step's valid
    tokens over every rank and micro-batch (``_generate_and_score_completions``)."""
    from refimpl.frameworks._trl_losses import grpo_inputs, grpo_trainer

    trainer = grpo_trainer(
        logp,
        loss_type=loss_type,
        accumulation_steps=accumulation_steps,
        world_size=world_size,
        max_completion_length=max_completion_length,
    )
    inputs = grpo_inputs(
        logp, mask, advantages, logp_old=logp_old, num_items_in_batch=global_tokens
    )
    return trainer._compute_loss(None, inputs)


def trl_grpo_micro_batch(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    mask: Any,
    *,
    accumulation_steps: Any,
    world_size: Any,
) -> Any:
    """TRL ``loss_type="grpo"`` on one micro-batch: ``GRPOTrainer._compute_loss`` / K."""
    from refimpl.frameworks._trl_losses_aggregation import trl_micro_batch

    return trl_micro_batch(
        logp, logp_old, advantages, mask, loss_type="grpo",
        accumulation_steps=accumulation_steps, world_size=world_size,
    )  # fmt: skip


def trl_bnpo_micro_batch(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    mask: Any,
    *,
    accumulation_steps: Any,
    world_size: Any,
) -> Any:
    """TRL ``loss_type="bnpo"`` on one micro-batch: ``GRPOTrainer._compute_loss`` / K."""
    from refimpl.frameworks._trl_losses_aggregation import trl_micro_batch

    return trl_micro_batch(
        logp, logp_old, advantages, mask, loss_type="bnpo",
        accumulation_steps=accumulation_steps, world_size=world_size,
    )  # fmt: skip


def trl_dr_grpo_micro_batch(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    mask: Any,
    *,
    accumulation_steps: Any,
    world_size: Any,
    constant: Any,
) -> Any:
    """TRL ``loss_type="dr_grpo"`` on one micro-batch, ``max_completion_length = constant``:
    ``GRPOTrainer._compute_loss`` (Σ m·ℓ / (b·H)) / K."""
    from refimpl.frameworks._trl_losses_aggregation import trl_micro_batch

    return trl_micro_batch(
        logp, logp_old, advantages, mask, loss_type="dr_grpo",
        accumulation_steps=accumulation_steps, world_size=world_size,
        max_completion_length=int(constant),
    )  # fmt: skip


def trl_dapo_micro_batch(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    mask: Any,
    *,
    global_tokens: Any,
    accumulation_steps: Any,
    world_size: Any,
) -> Any:
    """TRL ``loss_type="dapo"`` on one micro-batch: ``GRPOTrainer._compute_loss`` with
    ``num_items_in_batch`` the step's tokens (Σ m·ℓ / (N / R · K / K))."""
    from refimpl.frameworks._trl_losses_aggregation import trl_micro_batch

    return trl_micro_batch(
        logp, logp_old, advantages, mask, loss_type="dapo", global_tokens=global_tokens,
        accumulation_steps=accumulation_steps, world_size=world_size,
    )  # fmt: skip


def trl_luspo_micro_batch(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    mask: Any,
    *,
    accumulation_steps: Any,
    world_size: Any,
) -> Any:
    """TRL ``loss_type="luspo"`` (token level) on one micro-batch: ``GRPOTrainer._compute_loss`` / K."""
    from refimpl.frameworks._trl_losses_aggregation import trl_micro_batch

    return trl_micro_batch(
        logp, logp_old, advantages, mask, loss_type="luspo",
        accumulation_steps=accumulation_steps, world_size=world_size,
    )  # fmt: skip


def _aggregation_adapter(
    name: str,
    loss_type: str,
    mode: str,
    candidate: Any,
    partition: Any,
    rule: str,
    note: str,
    *,
    counted: bool,
    shared: str = "",
    divergences: dict[str, Divergence] | None = None,
) -> Adapter:
    empty = "counted" if counted else "excluded"
    return Adapter(
        key=f"trl.aggregation_{name}",
        framework="trl",
        function=_GRPO,
        settings={"loss_type": loss_type, **({"shared_by": shared} if shared else {})},
        spec="aggregation",
        conventions={"mode": mode, **({"empty_rows": "counted"} if counted else {})},
        candidate=candidate,
        note=note,
        partition=Partition(
            candidate=partition,
            mode=mode,
            rule=rule,
            constant=4.0 if mode == "token_sum_norm" else None,
            empty_rows=empty,
            trainer=f"{_TRAINER} (current_gradient_accumulation_steps, "
            "accelerator.num_processes, args.steps_per_generation); num_items_in_batch from "
            "trl/trainer/grpo_trainer.py:GRPOTrainer._generate_and_score_completions "
            "(accelerator.gather(loss_mask.sum()).sum() over the generation batch); "
            "loss_is_scaled_for_ga = True (transformers Trainer.training_step does not rescale)",
            divergences=divergences or {},
        ),
    )


_LOCAL_TOKENS = Divergence(
    "convention",
    "loss_type='bnpo' divides each micro-batch's token sum by that micro-batch's own valid tokens "
    "and the micro-batch losses by K (GRPOTrainer._compute_loss), so a token's weight is "
    "1/(K·N_k) (DDP averaging the ranks: 1/(K·R·N_rk)) instead of the step's 1/N: it depends on "
    "how the tokens fall into micro-batches. GRPOConfig documents it: 'normalization is performed "
    "over the local batch only, so results may slightly vary depending on the local batch size'.",
)
_FLOAT32_NORMALIZER = Divergence(
    "numerical limit",
    "loss_type='dapo' computes normalizer = num_items_in_batch.clamp(min=1.0) / num_processes "
    "(GRPOTrainer._compute_loss); num_items_in_batch is an integer tensor (the gathered sum of the "
    "long completion mask), and clamp with a float bound promotes it to torch's default dtype, "
    "float32: N / R (and · K / steps_per_generation) is rounded to float32, a relative change of up "
    "to ~6e-8 in every weight when R does not divide N. Exact in float32 training.",
)

ADAPTERS: tuple[Adapter, ...] = (
    _aggregation_adapter(
        "grpo", "grpo", "seq_mean_token_mean", trl_grpo_aggregation, trl_grpo_micro_batch,
        "trl_grpo",
        "mean over every row of Σ_t m·ℓ / max(L_b, 1), / K per micro-batch.",
        counted=True, shared="sapo",
    ),
    _aggregation_adapter(
        "bnpo", "bnpo", "token_mean", trl_bnpo_aggregation, trl_bnpo_micro_batch, "trl_bnpo",
        "Σ m·ℓ / max(Σ m, 1) over the micro-batch's tokens, / K.",
        counted=False, divergences={"gradient": _LOCAL_TOKENS},
    ),
    _aggregation_adapter(
        "dr_grpo", "dr_grpo", "token_sum_norm", trl_dr_grpo_aggregation,
        trl_dr_grpo_micro_batch, "trl_dr_grpo",
        "Σ m·ℓ / (B·max_completion_length) with B every row of the micro-batch, / K.",
        counted=True,
    ),
    _aggregation_adapter(
        "dapo", "dapo", "token_mean", trl_dapo_aggregation, trl_dapo_micro_batch, "trl_dapo",
        "Σ m·ℓ / (num_items_in_batch / R · K / steps_per_generation): the step's tokens.",
        counted=False, shared="cispo, vespo",
        divergences={"gradient": _FLOAT32_NORMALIZER},
    ),
    _aggregation_adapter(
        "luspo", "luspo", "seq_mean_token_sum", trl_luspo_aggregation, trl_luspo_micro_batch,
        "trl_grpo",
        "mean over every row of Σ_t m·ℓ, / K per micro-batch.",
        counted=True,
    ),
)  # fmt: skip


__all__ = ["ADAPTERS"]
