"""SkyRL (skyrl 0.3.0): the KL and entropy terms of its Megatron copy of the loss step, read from
``skyrl/backends/skyrl_train/workers/megatron/megatron_model_wrapper.py``
``MegatronModelWrapper.forward_backward_mini_batch``.

The method hands megatron.core's pipeline schedule (``get_forward_backward_func``: with one
pipeline stage ``forward_backward_no_pipelining``) a ``forward_step`` and a ``loss_func``. On the
RL path ``loss_func`` computes, after the registered policy loss, the same two terms as the FSDP
worker (:mod:`refimpl.frameworks._skyrl_losses_worker`):

- the entropy term ``masked_mean(vocab_parallel_entropy(action_logits), loss_mask)`` (a token
  mean over the micro-batch), times ``entropy_loss_coef`` when ``use_entropy_loss``;
- the KL term ``masked_mean(compute_approx_kl(...), loss_mask, dim=-1).mean()`` (each row's
  token mean, averaged over every row), times ``kl_loss_coef`` when ``use_kl_loss``;
- ``loss = policy_loss · num_microbatches · dp_size + (kl_term − entropy_term) ·
  num_microbatches / max(1, num_real_microbatches)``; the schedule's ``forward_step_calc_loss``
  then multiplies by the context-parallel size and divides by ``num_microbatches`` before
  backward. So each micro-batch's terms weigh ``1 / num_real_microbatches`` whatever its rows,
  where the FSDP worker weighs them by the micro-batch's share of the rank's rows.

Each adapter runs one micro-batch through the REAL schedule and ``loss_func``
(:func:`megatron_loss`): ``torch.distributed`` on gloo with one rank (an in-memory store, torn
down after the call) and megatron's model-parallel state on it; the model is a stand-in returning
zero logits of a 2-token vocabulary, and the two functions that read the model's log-probs and
entropies from the logits (``from_parallel_logits_to_logprobs``, ``vocab_parallel_entropy``) are
answered with the given ones for the call, as the FSDP adapters' model returns them. The loss the
schedule differentiates is recorded by megatron's loss-scale hook (``config.grad_scale_func``,
which the schedule applies to each micro-batch's loss before backward). The schedule's one
CUDA-only line, its token counter ``torch.zeros([], dtype=torch.int, device="cuda")``
(``megatron/core/pipeline_parallel/schedules.py:forward_backward_no_pipelining``), is answered on
CPU for the call.

The partitions (on ``skyrl.megatron_kl_reduction`` and ``skyrl.megatron_entropy``) run the
schedule with the rank's ``accumulation_steps`` micro-batches, the given one and padding ones
with ``loss_mask`` 0, and ``num_real_microbatches`` the rank's micro-batches holding rows: the
rule ``skyrl_megatron_terms`` (local reductions, averaged over those micro-batches, ranks
averaged, no ``dp_size`` factor). SkyRL's Megatron worker
(``skyrl/backends/skyrl_train/workers/megatron/megatron_worker.py``) sets both counts per
micro-batch; its shards come from the same ``MeshDispatch`` as the FSDP worker's (equal rows per
rank), its micro-batches from the same ``get_microbatch_iterator``.

Needs megatron-core (0.16.1, pinned with ``--no-deps``: it imports and runs on the CPU build;
skyrl 0.3.0 declares no version) and the wrapper's source load (its module imports ppo_utils and
skyrl.train.config, which reach skyrl_gym; :data:`refimpl.frameworks.SOURCE_LOADS`).
"""

from __future__ import annotations

import contextlib
import importlib
import unittest.mock
import warnings
from collections.abc import Iterator
from typing import Any

from refimpl.frameworks._registry import Adapter, Partition

_MODULE = "skyrl.backends.skyrl_train.workers.megatron.megatron_model_wrapper"
_STEP = f"{_MODULE}:MegatronModelWrapper.forward_backward_mini_batch"


@contextlib.contextmanager
def megatron_on_cpu() -> Iterator[None]:
    """One gloo rank (an in-memory store, no port) with megatron's model-parallel state on it, the
    schedule's CUDA token counter made on CPU, each undone after; megatron's warnings silenced.

    Re-entrant: within an outer block it starts and tears down nothing, so the adapters' session
    (:attr:`Adapter.session`) holds one process group for a whole check, where a block per call
    pays gloo's teardown (about 0.1 s of waiting) on every call."""
    import torch
    import torch.distributed as dist

    zeros = torch.zeros

    def cpu_zeros(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("device") == "cuda":
            kwargs["device"] = "cpu"
        return zeros(*args, **kwargs)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # megatron is imported by name: it is installed only with the Megatron extra
        mpu = importlib.import_module("megatron.core.parallel_state")
        started = not dist.is_initialized()
        if started:
            store = dist.HashStore()  # type: ignore[attr-defined]
            dist.init_process_group("gloo", store=store, rank=0, world_size=1)
        owned = not mpu.model_parallel_is_initialized()
        if owned:
            mpu.initialize_model_parallel()
        try:
            with unittest.mock.patch("torch.zeros", cpu_zeros):
                yield
        finally:
            if owned:
                mpu.destroy_model_parallel()
            if started:
                dist.destroy_process_group()


class _Model:
    """The stand-in model: megatron reads its ``config`` and ``model_type``; it returns zero
    logits of a 2-token vocabulary (the log-probs and entropies are the given ones)."""

    def __init__(self, config: Any) -> None:
        model_type = importlib.import_module("megatron.core.enums").ModelType
        self.config, self.model_type = config, model_type.encoder_or_decoder

    def set_input_tensor(self, _tensor: Any) -> None:
        """One pipeline stage: nothing to set."""

    def __call__(self, sequences: Any, *_args: Any, **_kwargs: Any) -> Any:
        import torch

        return torch.zeros((*sequences.shape, 2), dtype=torch.float64)


def megatron_loss(
    logp: Any,
    mask: Any,
    *,
    entropy: Any = None,
    logp_ref: Any = None,
    micro_batches: int = 1,
    real_micro_batches: int = 1,
    **algorithm: Any,
) -> Any:
    """The loss megatron's schedule differentiates for one micro-batch ``(B, T)`` of responses
    after a one-token prompt, ``MegatronModelWrapper.forward_backward_mini_batch`` on
    ``__new__`` with only what it reads; ``algorithm`` are SkyRL's ``AlgorithmConfig`` names
    (zero advantages: the ``"regular"`` policy loss is 0 with gradient 0). With
    ``micro_batches`` K > 1 the schedule runs K micro-batches, this one and K − 1 padding ones
    (``loss_mask`` 0, as SkyRL's token-based batching appends), each carrying
    ``num_microbatches = K`` and ``num_real_microbatches`` as the worker sets them."""
    import types

    import torch
    from omegaconf import OmegaConf

    from refimpl.frameworks import install_stubs, load_from_source

    install_stubs()
    cls = load_from_source(_MODULE)["MegatronModelWrapper"]
    recorded: list[Any] = []

    def record(loss: Any) -> Any:  # the loss-scale hook: keep the loss, let backward run on a copy
        recorded.append(loss)
        return loss.detach().requires_grad_()

    with warnings.catch_warnings():  # megatron warns of its deprecated defaults
        warnings.simplefilter("ignore")
        transformer = importlib.import_module("megatron.core.transformer")
        config = transformer.TransformerConfig(num_layers=1, hidden_size=1, num_attention_heads=1)
    config.grad_scale_func = record
    wrapper = cls.__new__(cls)
    settings = {"policy_loss_type": "regular", "eps_clip_low": 0.2, "eps_clip_high": 0.2}
    settings |= {"clip_ratio_c": 3.0, "off_policy_correction": None, "temperature": 1.0}
    settings |= {"use_kl_loss": False, "kl_loss_coef": 0.0, "kl_estimator_type": "k3"}
    settings |= {"use_entropy_loss": False, "entropy_loss_coef": 0.0, **algorithm}
    mcfg = types.SimpleNamespace(mtp_loss_weight=0.0, mtp_loss_chunk_size=None, mtp_loss_topk=None)
    wrapper.cfg = types.SimpleNamespace(
        algorithm=OmegaConf.create(settings),
        policy=types.SimpleNamespace(megatron_config=mcfg),
        logprobs_chunk_size=None,
    )
    wrapper.actor_module = [_Model(config)]
    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    wrapper.policy_loss_fn = ppo["PolicyLossRegistry"].get("regular")
    wrapper._fused_lm_head = wrapper.remove_microbatch_padding = wrapper.is_vlm = False
    rows, width = logp.shape
    m = torch.as_tensor(mask).to(logp.dtype)
    h = torch.zeros_like(logp.detach()) if entropy is None else entropy
    ref = torch.zeros_like(logp.detach()) if logp_ref is None else logp_ref
    batches = [
        _micro_batch(logp, w, ref, micro_batches, real_micro_batches)
        for w in (m, *[torch.zeros_like(m)] * (micro_batches - 1))
    ]
    stand_ins = {
        "from_parallel_logits_to_logprobs": lambda *_a, **_k: logp,
        "vocab_parallel_entropy": lambda *_a, **_k: h,
    }
    step = cls.forward_backward_mini_batch
    with megatron_on_cpu(), unittest.mock.patch.dict(step.__globals__, stand_ins):
        step(wrapper, batches, seq_len=width + 1, micro_batch_size=rows)
    return recorded[0]


def _micro_batch(logp: Any, m: Any, ref: Any, total: int, real: int) -> dict[str, Any]:
    """The micro-batch dict ``forward_backward_mini_batch`` reads (as the Megatron worker builds
    it): responses after a one-token prompt, zero advantages, old log-probs ``logp`` detached."""
    import torch

    rows, width = logp.shape
    return {
        "sequences": torch.zeros((rows, width + 1), dtype=torch.long),
        "attention_mask": torch.ones((rows, width + 1), dtype=torch.long),
        "position_ids": torch.arange(width + 1).expand(rows, -1),
        "num_actions": width,
        "old_action_log_probs": logp.detach().clone(),
        "base_action_log_probs": ref,
        "advantages": torch.zeros_like(m),
        "loss_mask": m,
        "rollout_action_logprobs": None,
        "action_mask": (m > 0).to(torch.long),
        "num_microbatches": total,
        "num_real_microbatches": real,
    }


def skyrl_megatron_kl_k1(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """``MegatronModelWrapper.forward_backward_mini_batch``'s KL term alone,
    ``kl_estimator_type="k1"``."""
    from refimpl.frameworks._skyrl_losses_megatron import megatron_loss

    return megatron_loss(logp, mask, logp_ref=logp_ref, use_kl_loss=True, kl_loss_coef=1.0,
                         kl_estimator_type="k1")  # fmt: skip


def skyrl_megatron_kl_k2(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """``MegatronModelWrapper.forward_backward_mini_batch``'s KL term alone,
    ``kl_estimator_type="k2"``."""
    from refimpl.frameworks._skyrl_losses_megatron import megatron_loss

    return megatron_loss(logp, mask, logp_ref=logp_ref, use_kl_loss=True, kl_loss_coef=1.0,
                         kl_estimator_type="k2")  # fmt: skip


def skyrl_megatron_kl_k3(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """``MegatronModelWrapper.forward_backward_mini_batch``'s KL term alone,
    ``kl_estimator_type="k3"``."""
    from refimpl.frameworks._skyrl_losses_megatron import megatron_loss

    return megatron_loss(logp, mask, logp_ref=logp_ref, use_kl_loss=True, kl_loss_coef=1.0,
                         kl_estimator_type="k3")  # fmt: skip


def skyrl_megatron_kl_abs(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """``MegatronModelWrapper.forward_backward_mini_batch``'s KL term alone,
    ``kl_estimator_type="abs"``."""
    from refimpl.frameworks._skyrl_losses_megatron import megatron_loss

    return megatron_loss(logp, mask, logp_ref=logp_ref, use_kl_loss=True, kl_loss_coef=1.0,
                         kl_estimator_type="abs")  # fmt: skip


def skyrl_megatron_kl_reduction(loss: Any, mask: Any) -> Any:
    """The KL reduction of ``MegatronModelWrapper.forward_backward_mini_batch`` alone: ``k1``
    against reference log-probs 0, so the per-token KL it reduces is ``loss`` itself (the
    model's log-probs)."""
    from refimpl.frameworks._skyrl_losses_megatron import megatron_loss

    return megatron_loss(loss, mask, use_kl_loss=True, kl_loss_coef=1.0, kl_estimator_type="k1")


def skyrl_megatron_entropy(loss: Any, mask: Any) -> Any:
    """``MegatronModelWrapper.forward_backward_mini_batch`` with only its entropy term on
    (``entropy_loss_coef=1``): the model's
    entropies are ``loss``; returns minus what the schedule differentiates (a bonus)."""
    from refimpl.frameworks._skyrl_losses_megatron import megatron_loss

    zero = loss.detach() * 0.0
    return -megatron_loss(zero, mask, entropy=loss, use_entropy_loss=True, entropy_loss_coef=1.0)


def skyrl_microbatch_megatron_kl(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    mask: Any,
    *,
    accumulation_steps: Any,
    rank_microbatches: Any,
) -> Any:
    """One micro-batch's KL term as megatron's schedule scales it in
    ``MegatronModelWrapper.forward_backward_mini_batch``: ``k1`` against reference 0 of the
    per-token ``−A·ρ`` (the model's log-probs), one of the rank's ``accumulation_steps``
    micro-batches, ``rank_microbatches`` of which hold rows (``num_real_microbatches``)."""
    import torch

    from refimpl.frameworks._skyrl_losses_megatron import megatron_loss

    per_token = -advantages[:, None] * torch.exp(logp - logp_old)
    return megatron_loss(
        per_token, mask, use_kl_loss=True, kl_loss_coef=1.0, kl_estimator_type="k1",
        micro_batches=int(accumulation_steps), real_micro_batches=int(rank_microbatches),
    )  # fmt: skip


def skyrl_microbatch_megatron_entropy(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    mask: Any,
    *,
    accumulation_steps: Any,
    rank_microbatches: Any,
) -> Any:
    """One micro-batch's entropy term as megatron's schedule scales it in
    ``MegatronModelWrapper.forward_backward_mini_batch``: the model's entropies are the
    per-token ``−A·ρ``; minus the loss the schedule differentiates."""
    import torch

    from refimpl.frameworks._skyrl_losses_megatron import megatron_loss

    per_token = -advantages[:, None] * torch.exp(logp - logp_old)
    zero = logp.detach() * 0.0
    return -megatron_loss(
        zero, mask, entropy=per_token, use_entropy_loss=True, entropy_loss_coef=1.0,
        micro_batches=int(accumulation_steps), real_micro_batches=int(rank_microbatches),
    )  # fmt: skip


#: Where the two terms' scaling is computed and passed.
_TERMS = (
    "skyrl/backends/skyrl_train/workers/megatron/megatron_model_wrapper.py:"
    "MegatronModelWrapper.forward_backward_mini_batch (loss_func: kl_entropy_microbatch_scale = "
    "num_microbatches / max(1, num_real_microbatches), both set per micro-batch by "
    "skyrl/backends/skyrl_train/workers/megatron/megatron_worker.py; megatron.core's "
    "forward_step_calc_loss divides by num_microbatches; no dp_size factor on the two terms)"
)


def _kl(name: str, candidate: Any, **extra: Any) -> Adapter:
    return Adapter(
        key=f"skyrl.megatron_kl_{name}",
        framework="skyrl",
        function=_STEP,
        session=megatron_on_cpu,
        settings={"use_kl_loss": True, "kl_estimator_type": name, "kl_loss_coef": 1.0},
        spec="kl_penalty",
        conventions={
            "estimator": name,
            "output": "scalar",
            "aggregation": "seq_mean_token_mean",
            "sequence_count": "all",
            **extra,
        },
        candidate=candidate,
        note=f"the Megatron step's KL term through megatron's schedule: compute_approx_kl({name}), "
        "each row's token mean, the mean over every row; the policy loss and entropy term off.",
    )


ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="skyrl.megatron_kl_reduction",
        framework="skyrl",
        function=_STEP,
        session=megatron_on_cpu,
        settings={"use_kl_loss": True, "kl_estimator_type": "k1", "kl_loss_coef": 1.0},
        spec="aggregation",
        conventions={"mode": "seq_mean_token_mean", "empty_rows": "counted"},
        candidate=skyrl_megatron_kl_reduction,
        partition=Partition(
            candidate=skyrl_microbatch_megatron_kl,
            mode="seq_mean_token_mean",
            rule="skyrl_megatron_terms",
            empty_rows="counted",
            trainer=_TERMS,
        ),
        note="the Megatron step's KL reduction: masked_mean(kl, loss_mask, dim=-1).mean(), every "
        "row counted; k1 against reference 0 makes the reduced KL the spec's loss.",
    ),
    _kl("k1", skyrl_megatron_kl_k1),
    _kl("k2", skyrl_megatron_kl_k2),
    _kl("abs", skyrl_megatron_kl_abs),
    _kl("k3", skyrl_megatron_kl_k3, clamp=10.0, log_ratio_clamp=20.0),
    Adapter(
        key="skyrl.megatron_entropy",
        framework="skyrl",
        function=_STEP,
        session=megatron_on_cpu,
        settings={"use_entropy_loss": True, "entropy_loss_coef": 1.0},
        spec="aggregation",
        conventions={"mode": "token_mean"},
        candidate=skyrl_megatron_entropy,
        partition=Partition(
            candidate=skyrl_microbatch_megatron_entropy,
            mode="token_mean",
            rule="skyrl_megatron_terms",
            trainer=_TERMS,
        ),
        note="the Megatron step's entropy term: masked_mean over the micro-batch's tokens of the "
        "model's entropies (the spec's loss), subtracted; the policy loss and KL term off.",
    ),
)

__all__ = ["ADAPTERS", "megatron_loss", "megatron_on_cpu"]
