"""verl (verl 0.9.1): ``agg_loss`` in every ``loss_agg_mode`` on its real scaling path, and the KL estimators.

``verl/trainer/ppo/core_algos.py:agg_loss(loss_mat, loss_mask, loss_agg_mode, dp_size=1,
batch_num_tokens=None, global_batch_size=None, loss_scale_factor=None)``: ``token-mean`` is
``Σ mask·ℓ / batch_num_tokens · dp_size``, ``token-sum`` ``Σ mask·ℓ · dp_size``, the ``seq-mean``
modes ``Σ_rows s_b / global_batch_size · dp_size`` with ``s_b`` the row's token sum (or its token
mean, divided by ``count + 1e-8``), and ``seq-mean-token-sum-norm`` divides that by
``loss_scale_factor`` (the padded width ``loss_mask.shape[-1]`` when None). Without the global
numbers (``dp_size = 1``) they fall back to the micro-batch's own: ``loss_mask.sum()`` and the
number of rows with a valid token.

The trainer passes the global numbers: ``verl/workers/utils/losses.py:ppo_loss`` sets
``config.global_batch_info`` to ``dp_size``, ``batch_num_tokens``, ``global_batch_size`` (from the
micro-batch's data) and ``config.loss_scale_factor``, and every policy loss calls
``agg_loss(..., **config.global_batch_info)``;
``verl/workers/engine/fsdp/transformer_impl.py:FSDPEngine.forward_backward_batch`` all-reduces
``batch_num_tokens = loss_mask.sum()`` over the data-parallel group, sets ``dp_size`` and calls
``loss.backward()`` per micro-batch (the gradients sum; FSDP averages them over the ranks); and
``verl/trainer/ppo/v1/trainer_base.py:_update_actor`` passes ``global_batch_size =
ppo_mini_batch_size · rollout.n``, every row of the mini-batch, all-padding ones included.

``kl_penalty_forward(logprob, ref_logprob, kl_penalty)`` gives the per-token estimate (``kl``/
``k1``, ``abs``, ``mse``/``k2``, ``low_var_kl``/``k3``: ``exp(clip(ref − logp, ±20)) − clip(…) − 1``
clamped to ±10); ``kl_penalty`` strips a trailing ``+`` and then returns the value of that
estimator with the gradient of k2 (straight-through), except for ``k2``/``mse``.
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter, Divergence, Partition

_CORE = "verl.trainer.ppo.core_algos"
_TRAINER = (
    "verl/workers/utils/losses.py:ppo_loss (config.global_batch_info = dp_size, "
    "batch_num_tokens, global_batch_size, loss_scale_factor, passed to agg_loss by every policy "
    "loss); verl/workers/engine/fsdp/transformer_impl.py:FSDPEngine.forward_backward_batch "
    "(batch_num_tokens = loss_mask.sum() all-reduced over the dp group, dp_size, "
    "loss.backward() per micro-batch); verl/trainer/ppo/v1/trainer_base.py:_update_actor "
    "(global_batch_size = ppo_mini_batch_size * rollout.n, every row of the mini-batch)"
)


# ---------------------------------------------------------------------------------------------
# agg_loss: one adapter per loss_agg_mode, the value/gradient spec on the micro-batch's own
# counts (what agg_loss does without the trainer's numbers), the partition on the trainer's
# ---------------------------------------------------------------------------------------------


def verl_agg_token_mean(loss: Any, mask: Any) -> Any:
    """verl ``agg_loss(loss_mat, loss_mask, "token-mean")`` with no global numbers."""
    from verl.trainer.ppo.core_algos import agg_loss

    return agg_loss(loss_mat=loss, loss_mask=mask, loss_agg_mode="token-mean")


def verl_agg_token_sum(loss: Any, mask: Any) -> Any:
    """verl ``agg_loss(loss_mat, loss_mask, "token-sum")``."""
    from verl.trainer.ppo.core_algos import agg_loss

    return agg_loss(loss_mat=loss, loss_mask=mask, loss_agg_mode="token-sum")


def verl_agg_seq_mean_token_sum(loss: Any, mask: Any) -> Any:
    """verl ``agg_loss(loss_mat, loss_mask, "seq-mean-token-sum")`` with no global numbers."""
    from verl.trainer.ppo.core_algos import agg_loss

    return agg_loss(loss_mat=loss, loss_mask=mask, loss_agg_mode="seq-mean-token-sum")


def verl_agg_seq_mean_token_mean(loss: Any, mask: Any) -> Any:
    """verl ``agg_loss(loss_mat, loss_mask, "seq-mean-token-mean")`` with no global numbers."""
    from verl.trainer.ppo.core_algos import agg_loss

    return agg_loss(loss_mat=loss, loss_mask=mask, loss_agg_mode="seq-mean-token-mean")


def verl_agg_seq_mean_token_sum_norm(loss: Any, mask: Any, *, constant: float) -> Any:
    """verl ``agg_loss(..., "seq-mean-token-sum-norm", loss_scale_factor=constant)``."""
    from verl.trainer.ppo.core_algos import agg_loss

    return agg_loss(
        loss_mat=loss,
        loss_mask=mask,
        loss_agg_mode="seq-mean-token-sum-norm",
        loss_scale_factor=constant,
    )


def verl_agg_seq_mean_token_sum_norm_default(loss: Any, mask: Any, *, constant: float) -> Any:
    """verl ``agg_loss(..., "seq-mean-token-sum-norm")`` with ``loss_scale_factor=None`` (the
    ``ActorConfig`` default): ``constant`` is received and not used."""
    from verl.trainer.ppo.core_algos import agg_loss

    return agg_loss(loss_mat=loss, loss_mask=mask, loss_agg_mode="seq-mean-token-sum-norm")


def verl_partition_token_mean(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    mask: Any,
    *,
    global_tokens: int,
    global_sequences: int,
    world_size: int,
) -> Any:
    """One micro-batch of verl's actor update, ``loss_agg_mode="token-mean"``: the vanilla PPO loss
    with ``config.global_batch_info`` filled in as ``ppo_loss`` does, so ``agg_loss`` gets
    ``dp_size``, ``batch_num_tokens`` and ``global_batch_size``."""
    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla
    from verl.workers.config import ActorConfig

    config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1)
    config.global_batch_info.update(
        dp_size=world_size,
        batch_num_tokens=global_tokens,
        global_batch_size=global_sequences,
        loss_scale_factor=config.loss_scale_factor,
    )
    loss, _ = compute_policy_loss_vanilla(
        old_log_prob=logp_old,
        log_prob=logp,
        advantages=advantages[:, None].expand_as(logp),
        response_mask=mask,
        loss_agg_mode="token-mean",
        config=config,
    )
    return loss


def verl_partition_token_sum(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    mask: Any,
    *,
    global_tokens: int,
    global_sequences: int,
    world_size: int,
) -> Any:
    """One micro-batch of verl's actor update, ``loss_agg_mode="token-sum"`` (as
    :func:`verl_partition_token_mean`)."""
    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla
    from verl.workers.config import ActorConfig

    config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1)
    config.global_batch_info.update(
        dp_size=world_size,
        batch_num_tokens=global_tokens,
        global_batch_size=global_sequences,
        loss_scale_factor=config.loss_scale_factor,
    )
    loss, _ = compute_policy_loss_vanilla(
        old_log_prob=logp_old,
        log_prob=logp,
        advantages=advantages[:, None].expand_as(logp),
        response_mask=mask,
        loss_agg_mode="token-sum",
        config=config,
    )
    return loss


def verl_partition_seq_mean_token_sum(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    mask: Any,
    *,
    global_tokens: int,
    global_sequences: int,
    world_size: int,
) -> Any:
    """One micro-batch of verl's actor update, ``loss_agg_mode="seq-mean-token-sum"`` (as
    :func:`verl_partition_token_mean`)."""
    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla
    from verl.workers.config import ActorConfig

    config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1)
    config.global_batch_info.update(
        dp_size=world_size,
        batch_num_tokens=global_tokens,
        global_batch_size=global_sequences,
        loss_scale_factor=config.loss_scale_factor,
    )
    loss, _ = compute_policy_loss_vanilla(
        old_log_prob=logp_old,
        log_prob=logp,
        advantages=advantages[:, None].expand_as(logp),
        response_mask=mask,
        loss_agg_mode="seq-mean-token-sum",
        config=config,
    )
    return loss


def verl_partition_seq_mean_token_mean(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    mask: Any,
    *,
    global_tokens: int,
    global_sequences: int,
    world_size: int,
) -> Any:
    """One micro-batch of verl's actor update, ``loss_agg_mode="seq-mean-token-mean"`` (as
    :func:`verl_partition_token_mean`)."""
    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla
    from verl.workers.config import ActorConfig

    config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1)
    config.global_batch_info.update(
        dp_size=world_size,
        batch_num_tokens=global_tokens,
        global_batch_size=global_sequences,
        loss_scale_factor=config.loss_scale_factor,
    )
    loss, _ = compute_policy_loss_vanilla(
        old_log_prob=logp_old,
        log_prob=logp,
        advantages=advantages[:, None].expand_as(logp),
        response_mask=mask,
        loss_agg_mode="seq-mean-token-mean",
        config=config,
    )
    return loss


def verl_partition_seq_mean_token_sum_norm(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    mask: Any,
    *,
    global_tokens: int,
    global_sequences: int,
    world_size: int,
    constant: float,
) -> Any:
    """One micro-batch of verl's actor update, ``loss_agg_mode="seq-mean-token-sum-norm"`` with
    ``actor.loss_scale_factor=constant`` (as :func:`verl_partition_token_mean`)."""
    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla
    from verl.workers.config import ActorConfig

    config = ActorConfig(
        strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, loss_scale_factor=constant
    )
    config.global_batch_info.update(
        dp_size=world_size,
        batch_num_tokens=global_tokens,
        global_batch_size=global_sequences,
        loss_scale_factor=config.loss_scale_factor,
    )
    loss, _ = compute_policy_loss_vanilla(
        old_log_prob=logp_old,
        log_prob=logp,
        advantages=advantages[:, None].expand_as(logp),
        response_mask=mask,
        loss_agg_mode="seq-mean-token-sum-norm",
        config=config,
    )
    return loss


_SEQ_MEAN_EPSILON = Divergence(
    "numerical limit",
    "agg_loss 'seq-mean-token-mean' divides each row's token sum by its token count + 1e-8, so "
    "every sequence's mean is shrunk by a relative 1e-8/L (and the weights 1/(S·L) likewise), "
    "far above float64 rounding.",
)
_WIDTH_FOR_H = Divergence(
    "convention",
    "With loss_scale_factor=None (ActorConfig's default) agg_loss divides by "
    "loss_mask.shape[-1], the padded width of the micro-batch it is given, not a fixed H; the "
    "trainer pads each micro-batch to its own longest response (to_padded_tensor), so the "
    "divisor changes with the batch. Setting actor.loss_scale_factor fixes it (the other "
    "adapter).",
)

ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="verl.agg_loss_token_mean",
        framework="verl",
        function=f"{_CORE}:agg_loss",
        settings={"loss_agg_mode": "token-mean"},
        spec="aggregation",
        conventions={"mode": "token_mean", "empty_batch": "excluded"},
        candidate=verl_agg_token_mean,
        note="Σ mask·ℓ / loss_mask.sum() (0/0 on a batch without a valid token).",
        partition=Partition(
            candidate=verl_partition_token_mean,
            mode="token_mean",
            rule="verl",
            empty_rows="counted",
            trainer=_TRAINER,
        ),
    ),
    Adapter(
        key="verl.agg_loss_token_sum",
        framework="verl",
        function=f"{_CORE}:agg_loss",
        settings={"loss_agg_mode": "token-sum"},
        spec="aggregation",
        conventions={"mode": "token_sum"},
        candidate=verl_agg_token_sum,
        note="Σ mask·ℓ (times dp_size, 1 here).",
        partition=Partition(
            candidate=verl_partition_token_sum,
            mode="token_sum",
            rule="verl",
            empty_rows="counted",
            trainer=_TRAINER,
        ),
    ),
    Adapter(
        key="verl.agg_loss_seq_mean_token_sum",
        framework="verl",
        function=f"{_CORE}:agg_loss",
        settings={"loss_agg_mode": "seq-mean-token-sum"},
        spec="aggregation",
        conventions={
            "mode": "seq_mean_token_sum",
            "empty_rows": "excluded",
            "empty_batch": "excluded",
        },
        candidate=verl_agg_seq_mean_token_sum,
        note="Mean over the rows with a valid token of each row's token sum.",
        partition=Partition(
            candidate=verl_partition_seq_mean_token_sum,
            mode="seq_mean_token_sum",
            rule="verl",
            empty_rows="counted",
            trainer=_TRAINER,
        ),
    ),
    Adapter(
        key="verl.agg_loss_seq_mean_token_mean",
        framework="verl",
        function=f"{_CORE}:agg_loss",
        settings={"loss_agg_mode": "seq-mean-token-mean"},
        spec="aggregation",
        conventions={
            "mode": "seq_mean_token_mean",
            "empty_rows": "excluded",
            "empty_batch": "excluded",
        },
        candidate=verl_agg_seq_mean_token_mean,
        divergences=dict.fromkeys(
            ("values", "gradient", "padding_contributes_nothing", "empty_rows"), _SEQ_MEAN_EPSILON
        ),
        note="Mean over the rows with a valid token of each row's token mean (count + 1e-8).",
        partition=Partition(
            candidate=verl_partition_seq_mean_token_mean,
            mode="seq_mean_token_mean",
            rule="verl",
            empty_rows="counted",
            trainer=_TRAINER,
            rtol=1e-7,
        ),
    ),
    Adapter(
        key="verl.agg_loss_seq_mean_token_sum_norm",
        framework="verl",
        function=f"{_CORE}:agg_loss",
        settings={"loss_agg_mode": "seq-mean-token-sum-norm", "loss_scale_factor": "constant"},
        spec="aggregation",
        conventions={"mode": "token_sum_norm", "empty_batch": "excluded"},
        candidate=verl_agg_seq_mean_token_sum_norm,
        note="Σ_rows (row token sum) / (rows with a valid token) / loss_scale_factor.",
        partition=Partition(
            candidate=verl_partition_seq_mean_token_sum_norm,
            mode="token_sum_norm",
            rule="verl",
            constant=8.0,
            empty_rows="counted",
            trainer=_TRAINER + "; actor.loss_scale_factor = H",
        ),
    ),
    Adapter(
        key="verl.agg_loss_seq_mean_token_sum_norm_default",
        framework="verl",
        function=f"{_CORE}:agg_loss",
        settings={"loss_agg_mode": "seq-mean-token-sum-norm", "loss_scale_factor": None},
        spec="aggregation",
        conventions={"mode": "token_sum_norm", "empty_batch": "excluded"},
        candidate=verl_agg_seq_mean_token_sum_norm_default,
        divergences=dict.fromkeys(
            (
                "values",
                "gradient",
                "padding_contributes_nothing",
                "token_sum_norm_uses_the_constant",
                "empty_rows",
            ),
            _WIDTH_FOR_H,
        ),
        note="As seq-mean-token-sum-norm with loss_scale_factor=None: H is the padded width.",
    ),
)


# ---------------------------------------------------------------------------------------------
# KL estimators: kl_penalty (with the straight-through '+' forms) and kl_penalty_forward
# ---------------------------------------------------------------------------------------------


def verl_kl_penalty_k1(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """verl ``kl_penalty(logprob, ref_logprob, kl_penalty="k1")`` (per token, not masked)."""
    from verl.trainer.ppo.core_algos import kl_penalty

    return kl_penalty(logp, logp_ref, "k1")


def verl_kl_penalty_abs(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """verl ``kl_penalty(logprob, ref_logprob, kl_penalty="abs")`` (per token, not masked)."""
    from verl.trainer.ppo.core_algos import kl_penalty

    return kl_penalty(logp, logp_ref, "abs")


def verl_kl_penalty_k2(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """verl ``kl_penalty(logprob, ref_logprob, kl_penalty="k2")`` (per token, not masked)."""
    from verl.trainer.ppo.core_algos import kl_penalty

    return kl_penalty(logp, logp_ref, "k2")


def verl_kl_penalty_low_var_kl(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """verl ``kl_penalty(logprob, ref_logprob, kl_penalty="low_var_kl")`` (per token, not masked)."""
    from verl.trainer.ppo.core_algos import kl_penalty

    return kl_penalty(logp, logp_ref, "low_var_kl")


def verl_kl_penalty_k1_st(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """verl ``kl_penalty(logprob, ref_logprob, kl_penalty="k1+")`` (per token, not masked)."""
    from verl.trainer.ppo.core_algos import kl_penalty

    return kl_penalty(logp, logp_ref, "k1+")


def verl_kl_penalty_abs_st(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """verl ``kl_penalty(logprob, ref_logprob, kl_penalty="abs+")`` (per token, not masked)."""
    from verl.trainer.ppo.core_algos import kl_penalty

    return kl_penalty(logp, logp_ref, "abs+")


def verl_kl_penalty_k2_st(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """verl ``kl_penalty(logprob, ref_logprob, kl_penalty="k2+")`` (per token, not masked)."""
    from verl.trainer.ppo.core_algos import kl_penalty

    return kl_penalty(logp, logp_ref, "k2+")


def verl_kl_penalty_k3_st(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """verl ``kl_penalty(logprob, ref_logprob, kl_penalty="k3+")`` (per token, not masked)."""
    from verl.trainer.ppo.core_algos import kl_penalty

    return kl_penalty(logp, logp_ref, "k3+")


def verl_kl_penalty_forward_k1(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """verl ``kl_penalty_forward(logprob, ref_logprob, kl_penalty="kl")`` (per token)."""
    from verl.trainer.ppo.core_algos import kl_penalty_forward

    return kl_penalty_forward(logp, logp_ref, "kl")


def verl_kl_penalty_forward_abs(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """verl ``kl_penalty_forward(logprob, ref_logprob, kl_penalty="abs")`` (per token)."""
    from verl.trainer.ppo.core_algos import kl_penalty_forward

    return kl_penalty_forward(logp, logp_ref, "abs")


def verl_kl_penalty_forward_k2(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """verl ``kl_penalty_forward(logprob, ref_logprob, kl_penalty="mse")`` (per token)."""
    from verl.trainer.ppo.core_algos import kl_penalty_forward

    return kl_penalty_forward(logp, logp_ref, "mse")


def verl_kl_penalty_forward_k3(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """verl ``kl_penalty_forward(logprob, ref_logprob, kl_penalty="k3")`` (per token)."""
    from verl.trainer.ppo.core_algos import kl_penalty_forward

    return kl_penalty_forward(logp, logp_ref, "k3")


ADAPTERS = (
    *ADAPTERS,
    Adapter(
        key="verl.kl_penalty_k1",
        framework="verl",
        function=f"{_CORE}:kl_penalty",
        settings={"kl_loss_type": "k1"},
        spec="kl_penalty",
        conventions={"estimator": "k1", "padding": "ignored"},
        candidate=verl_kl_penalty_k1,
        note="The k1 estimator log π − log π_ref (aliases 'kl').",
    ),
    Adapter(
        key="verl.kl_penalty_abs",
        framework="verl",
        function=f"{_CORE}:kl_penalty",
        settings={"kl_loss_type": "abs"},
        spec="kl_penalty",
        conventions={"estimator": "abs", "padding": "ignored"},
        candidate=verl_kl_penalty_abs,
        note="|log π − log π_ref|.",
    ),
    Adapter(
        key="verl.kl_penalty_k2",
        framework="verl",
        function=f"{_CORE}:kl_penalty",
        settings={"kl_loss_type": "k2"},
        spec="kl_penalty",
        conventions={"estimator": "k2", "padding": "ignored"},
        candidate=verl_kl_penalty_k2,
        note="½(log π − log π_ref)² (aliases 'mse'; 'k2+' is the same).",
    ),
    Adapter(
        key="verl.kl_penalty_low_var_kl",
        framework="verl",
        function=f"{_CORE}:kl_penalty",
        settings={"kl_loss_type": "low_var_kl"},
        spec="kl_penalty",
        conventions={"estimator": "low_var_kl", "padding": "ignored"},
        candidate=verl_kl_penalty_low_var_kl,
        note="k3 with the log-ratio clamped to ±20 and the value to ±10 (aliases 'k3'); the default kl_loss_type.",
    ),
    Adapter(
        key="verl.kl_penalty_k1_st",
        framework="verl",
        function=f"{_CORE}:kl_penalty",
        settings={"kl_loss_type": "k1+"},
        spec="kl_penalty",
        conventions={"estimator": "k1+", "padding": "ignored"},
        candidate=verl_kl_penalty_k1_st,
        note="Straight-through: the value of k1, the gradient of k2 (aliases 'kl+').",
    ),
    Adapter(
        key="verl.kl_penalty_abs_st",
        framework="verl",
        function=f"{_CORE}:kl_penalty",
        settings={"kl_loss_type": "abs+"},
        spec="kl_penalty",
        conventions={"estimator": "abs+", "padding": "ignored"},
        candidate=verl_kl_penalty_abs_st,
        note="Straight-through: the value of |log ρ|, the gradient of k2.",
    ),
    Adapter(
        key="verl.kl_penalty_k2_st",
        framework="verl",
        function=f"{_CORE}:kl_penalty",
        settings={"kl_loss_type": "k2+"},
        spec="kl_penalty",
        conventions={"estimator": "k2+", "padding": "ignored"},
        candidate=verl_kl_penalty_k2_st,
        note="'k2+' returns the k2 forward unchanged (the '+' is ignored for k2/mse).",
    ),
    Adapter(
        key="verl.kl_penalty_k3_st",
        framework="verl",
        function=f"{_CORE}:kl_penalty",
        settings={"kl_loss_type": "k3+"},
        spec="kl_penalty",
        conventions={"estimator": "low_var_kl+", "padding": "ignored"},
        candidate=verl_kl_penalty_k3_st,
        note="Straight-through: the value of the clamped k3 (low_var_kl), the gradient of k2 (aliases 'low_var_kl+').",
    ),
    Adapter(
        key="verl.kl_penalty_forward_k1",
        framework="verl",
        function=f"{_CORE}:kl_penalty_forward",
        settings={"kl_penalty": "kl"},
        spec="kl_penalty",
        conventions={"estimator": "k1", "padding": "ignored"},
        candidate=verl_kl_penalty_forward_k1,
        note="log π − log π_ref.",
    ),
    Adapter(
        key="verl.kl_penalty_forward_abs",
        framework="verl",
        function=f"{_CORE}:kl_penalty_forward",
        settings={"kl_penalty": "abs"},
        spec="kl_penalty",
        conventions={"estimator": "abs", "padding": "ignored"},
        candidate=verl_kl_penalty_forward_abs,
        note="|log π − log π_ref|.",
    ),
    Adapter(
        key="verl.kl_penalty_forward_k2",
        framework="verl",
        function=f"{_CORE}:kl_penalty_forward",
        settings={"kl_penalty": "mse"},
        spec="kl_penalty",
        conventions={"estimator": "k2", "padding": "ignored"},
        candidate=verl_kl_penalty_forward_k2,
        note="½(log π − log π_ref)².",
    ),
    Adapter(
        key="verl.kl_penalty_forward_k3",
        framework="verl",
        function=f"{_CORE}:kl_penalty_forward",
        settings={"kl_penalty": "k3"},
        spec="kl_penalty",
        conventions={"estimator": "low_var_kl", "padding": "ignored"},
        candidate=verl_kl_penalty_forward_k3,
        note="exp(clip(log π_ref − log π, ±20)) − clip(…) − 1, clamped to ±10.",
    ),
)


_MASK_SUM_EPSILON = Divergence(
    "numerical limit",
    "masked_mean (verl/utils/torch_functional.py) divides the masked sum by mask.sum() + 1e-8, "
    "so the mean of N valid tokens is shrunk by a relative 1e-8/N (one token of value 1 gives "
    "0.99999999), and its gradient 1/(N + 1e-8) likewise: beyond float64's rounding, far below "
    "float32's. The epsilon keeps a batch without a valid token at 0 instead of 0/0.",
)


def verl_masked_mean(loss: Any, mask: Any) -> Any:
    """verl ``masked_mean(values, mask)`` (``axis=None``): the token mean its metrics and the
    rollout-correction statistics use."""
    from verl.utils.torch_functional import masked_mean

    return masked_mean(loss, mask)


ADAPTERS = (
    *ADAPTERS,
    Adapter(
        key="verl.masked_mean",
        framework="verl",
        function="verl.utils.torch_functional:masked_mean",
        settings={"axis": None},
        spec="aggregation",
        conventions={"mode": "token_mean"},
        candidate=verl_masked_mean,
        divergences=dict.fromkeys(
            ("values", "gradient", "padding_contributes_nothing", "empty_rows"), _MASK_SUM_EPSILON
        ),
        note="Σ where(mask, values, 0)·mask / (Σ mask + 1e-8): 0 on a batch without a valid token.",
    ),
)
