"""SkyRL (skyrl 0.3.0): the KL and entropy terms of the policy worker's micro-batch step, read from
``skyrl/backends/skyrl_train/workers/worker.py`` ``PolicyWorkerBase._forward_backward_micro``.

On the RL path (any ``policy_loss_type`` but ``"cross_entropy"``) the method computes, after the
registered policy loss:

- the entropy term: the model's per-position entropy ``output["entropy"]`` sliced to the positions
  that predict the response, ``entropy_BS[:, -num_actions - 1 : -1]``, reduced by
  ``masked_mean(entropy_BS, loss_mask)`` (no ``dim``: ``Σ H·m / max(Σ m, 1)`` over the whole
  micro-batch, a token mean), times ``entropy_loss_coef`` when ``use_entropy_loss``;
- the KL term: ``compute_approx_kl(action_log_probs, base_action_log_probs, loss_mask=loss_mask,
  kl_estimator_type=kl_estimator_type)`` then ``masked_mean(kl, loss_mask, dim=-1).mean()`` (each
  row's token mean ``Σ_t k·m / max(Σ_t m, 1)``, averaged over *every* row of the micro-batch, an
  empty row counted with 0), times ``kl_loss_coef`` when ``use_kl_loss``;
- ``loss = policy_loss · dp_size + (kl_term − entropy_term) · microbatch_weight`` with
  ``microbatch_weight = len(microbatch) / len(data)`` (``forward_backward``), handed to
  ``strategy.backward``. The two terms are not pre-scaled like the policy loss, so they are a
  sequence-count-weighted average of the micro-batches' means.

Only the total reaches ``backward``, so each adapter isolates one term with the others zeroed by
their own switches: zero advantages make the ``"regular"`` policy loss 0 with gradient 0 (its
ratio is 1, the old log-probs being the detached current ones), ``use_kl_loss=False`` /
``use_entropy_loss=False`` make the other term ``torch.tensor(0.0)``. The
method runs on ``PolicyWorkerBase.__new__`` (:func:`policy_worker`): ``cfg.algorithm`` holds the
options it reads, ``mesh_rank.dp_size = 1``, the model is a stand-in returning the given log-probs
and entropies, the strategy records the loss ``backward`` receives, and ``Experience`` is SkyRL's
own record (``skyrl/train/dataset/replay_buffer.py``). The method calls
``torch.cuda.current_device()`` (an error on a CPU build) for ``experience.to_device``: it is
answered with ``"cpu"`` for the call; its ``torch.autocast(device_type="cuda")`` disables itself
on CPU with a warning, silenced for the call.

The entries: ``skyrl.worker_kl_<estimator>`` (``kl_penalty``, the term as a scalar:
``seq_mean_token_mean`` with every row counted), ``skyrl.worker_kl_reduction`` (the same
reduction as an ``aggregation``: ``k1`` against reference log-probs 0 reduces the given matrix
itself) and ``skyrl.worker_entropy`` (``aggregation``, ``token_mean``: the per-token entropy is the
model's, checked where SkyRL computes it, ``chunked_entropy_from_logits``). Their partitions run
the step once per micro-batch with ``microbatch_weight = len(microbatch) / len(data)``, ``data``
the rank's shard (the partition's ``rank_sequences``): the rule ``skyrl_worker_terms`` (local
reductions, micro-batches weighted by their share of the rank's rows, ranks averaged, no
``dp_size`` factor). The KL term's row means then add up to the rank's mean over rows, equal to
the step's when every rank holds the same number of rows; the entropy term's token means are
weighed by their share of rows, not of tokens, so the step depends on the split.

How SkyRL 0.3.0 splits a mini-batch, as read:

- over ranks, ``MeshDispatch.stage_chunks`` (``skyrl/backends/skyrl_train/distributed/
  dispatch.py``; ``MeshDispatch.dispatch`` asserts the same divisibility) pads each mini-batch
  to a multiple of ``dp_size`` with ``pad_training_input_batch`` (copies of row 0 with
  ``loss_mask = 0``; only step-wise training needs any) and cuts it into ``dp_size`` contiguous
  chunks of equal length: every rank's ``len(data)`` is the same, padding rows included (they
  count in the KL term's mean over rows with 0, as empty rows);
- over micro-batches, ``PolicyWorkerBase.forward_backward`` takes
  ``get_microbatch_iterator`` (``skyrl/backends/skyrl_train/workers/worker_utils.py``): chunks
  of ``micro_train_batch_size_per_gpu`` rows (``validate_batch_sizes`` in
  ``skyrl/train/utils/utils.py`` requires the rank's mini-batch to divide into them: equal
  micro-batches), or with ``max_tokens_per_microbatch > 0`` the ``TokenBasedBatchIterator``,
  which bin-packs rows by token count (micro-batches of uneven rows and tokens) and appends
  one-row padding micro-batches with ``loss_mask = 0`` so every rank runs as many (they add 0:
  both terms are 0 on them).

So uneven micro-batches happen (token-based batching), uneven ranks do not: the partition's
drawn splits with uneven ranks go beyond SkyRL's dispatch, and the candidates take the rank's
real row count, so that the check compares the rule itself.
"""

from __future__ import annotations

import contextlib
import unittest.mock
import warnings
from collections.abc import Iterator
from typing import Any

from refimpl.frameworks._registry import Adapter, Partition

_STEP = "skyrl.backends.skyrl_train.workers.worker:PolicyWorkerBase._forward_backward_micro"
_TRAINER = "skyrl/backends/skyrl_train/workers/worker.py:PolicyWorkerBase._forward_backward_micro"


def policy_worker(
    logp: Any,
    *,
    entropy: Any = None,
    use_kl_loss: bool = False,
    kl_loss_coef: float = 0.0,
    kl_estimator_type: str = "k3",
    use_entropy_loss: bool = False,
    entropy_loss_coef: float = 0.0,
) -> Any:
    """A ``PolicyWorkerBase`` made with ``__new__``, holding only what ``_forward_backward_micro``
    reads; its model returns ``logp`` and, as the per-position entropy, ``entropy`` ``(B, T)``
    placed at the positions the method slices (zeros when ``None``). ``worker.strategy.losses``
    records what ``backward`` receives. The settings are SkyRL's ``AlgorithmConfig`` names."""
    import types

    import torch
    from omegaconf import OmegaConf

    from refimpl.frameworks import install_stubs, load_from_source

    install_stubs()
    cls = load_from_source("skyrl.backends.skyrl_train.workers.worker")["PolicyWorkerBase"]
    ppo = load_from_source("skyrl.backends.skyrl_train.utils.ppo_utils")
    worker = cls.__new__(cls)
    worker.cfg = types.SimpleNamespace(
        algorithm=OmegaConf.create(
            {
                "policy_loss_type": "regular",
                "eps_clip_low": 0.2,
                "eps_clip_high": 0.2,
                "clip_ratio_c": 3.0,
                "off_policy_correction": None,
                "temperature": 1.0,
                "use_kl_loss": bool(use_kl_loss),
                "kl_loss_coef": float(kl_loss_coef),
                "kl_estimator_type": kl_estimator_type,
                "use_entropy_loss": bool(use_entropy_loss),
                "entropy_loss_coef": float(entropy_loss_coef),
            }
        )
    )
    worker.policy_loss_fn = ppo["PolicyLossRegistry"].get("regular")  # as __init__ sets it
    worker.mesh_rank = types.SimpleNamespace(dp_size=1)
    worker.optimizer = None
    worker.scheduler = types.SimpleNamespace(get_last_lr=lambda: [0.0])
    losses: list[Any] = []
    worker.strategy = types.SimpleNamespace(
        backward=lambda loss, model, optimizer: losses.append(loss), losses=losses
    )
    h = torch.zeros_like(logp.detach()) if entropy is None else entropy
    # position t predicts token t + 1: the response's entropies sit one position early
    full = torch.cat([h, torch.zeros_like(h[:, :1])], dim=1)
    worker.model = _Model(logp, full)
    return worker


class _Model:
    """The model stand-in: ``model(sequences, num_actions, ...)`` returns the given log-probs and
    ``{"entropy": …}``; ``train()`` does nothing."""

    def __init__(self, logp: Any, entropy: Any) -> None:
        self.logp, self.entropy = logp, entropy

    def train(self) -> None:
        """Nothing to switch."""

    def __call__(self, *_args: Any, **_kwargs: Any) -> tuple[Any, dict[str, Any]]:
        return self.logp, {"entropy": self.entropy}


def worker_experience(logp: Any, mask: Any, *, logp_ref: Any = None, advantages: Any = None) -> Any:
    """SkyRL's ``Experience`` for one micro-batch of responses ``(B, T)`` after a one-token prompt:
    old log-probs are ``logp`` detached, ``advantages`` default to 0 (the policy loss is then 0
    with gradient 0), ``base_action_log_probs`` are ``logp_ref``."""
    import torch

    from refimpl.frameworks import install_stubs

    install_stubs()
    from skyrl.train.dataset.replay_buffer import Experience

    rows, width = logp.shape
    m = torch.as_tensor(mask).to(logp.dtype)
    return Experience(
        sequences=torch.zeros((rows, width + 1), dtype=torch.long),
        action_log_probs=logp.detach().clone(),
        base_action_log_probs=logp_ref,
        values=None,
        returns=None,
        advantages=torch.zeros_like(m) if advantages is None else advantages,
        attention_mask=torch.ones((rows, width + 1), dtype=torch.long),
        loss_mask=m,
        action_mask=(m > 0).to(torch.long),
        rollout_logprobs=None,
        rollout_expert_indices=None,
        num_actions=width,
        info={},
    )


@contextlib.contextmanager
def on_cpu() -> Iterator[None]:
    """The worker step on a CPU build: ``torch.cuda.current_device()`` answers ``"cpu"`` (the
    step only passes it to ``experience.to_device``) and autocast's warning that it disables
    itself without CUDA is silenced."""
    with (
        warnings.catch_warnings(),
        unittest.mock.patch("torch.cuda.current_device", return_value="cpu"),
    ):
        warnings.filterwarnings("ignore", message=".*Disabling autocast", category=UserWarning)
        yield


def kl_term(logp: Any, logp_ref: Any, mask: Any, *, estimator: str) -> Any:
    """The loss ``PolicyWorkerBase._forward_backward_micro`` hands to ``strategy.backward`` with
    only its KL term on (``kl_estimator_type=estimator``, ``kl_loss_coef=1``, zero advantages, one
    micro-batch of weight 1)."""
    worker = policy_worker(logp, use_kl_loss=True, kl_loss_coef=1.0, kl_estimator_type=estimator)
    with on_cpu():
        worker._forward_backward_micro(worker_experience(logp, mask, logp_ref=logp_ref), 1.0)
    return worker.strategy.losses[0]


def skyrl_worker_kl_k1(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """``PolicyWorkerBase._forward_backward_micro``'s KL term alone, ``kl_estimator_type="k1"``."""
    from refimpl.frameworks._skyrl_losses_worker import kl_term

    return kl_term(logp, logp_ref, mask, estimator="k1")


def skyrl_worker_kl_k2(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """``PolicyWorkerBase._forward_backward_micro``'s KL term alone, ``kl_estimator_type="k2"``."""
    from refimpl.frameworks._skyrl_losses_worker import kl_term

    return kl_term(logp, logp_ref, mask, estimator="k2")


def skyrl_worker_kl_k3(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """``PolicyWorkerBase._forward_backward_micro``'s KL term alone, ``kl_estimator_type="k3"``."""
    from refimpl.frameworks._skyrl_losses_worker import kl_term

    return kl_term(logp, logp_ref, mask, estimator="k3")


def skyrl_worker_kl_abs(logp: Any, logp_ref: Any, *, mask: Any) -> Any:
    """``PolicyWorkerBase._forward_backward_micro``'s KL term alone, ``kl_estimator_type="abs"``."""
    from refimpl.frameworks._skyrl_losses_worker import kl_term

    return kl_term(logp, logp_ref, mask, estimator="abs")


def skyrl_worker_entropy(loss: Any, mask: Any) -> Any:
    """``PolicyWorkerBase._forward_backward_micro`` with only its entropy term on
    (``use_entropy_loss=True``, ``entropy_loss_coef=1``, no KL term, zero advantages, one
    micro-batch): the model's entropies are ``loss``; returns minus the loss handed to
    ``strategy.backward`` (the step subtracts the entropy bonus)."""
    from refimpl.frameworks._skyrl_losses_worker import on_cpu, policy_worker, worker_experience

    logp = loss.detach() * 0.0
    worker = policy_worker(logp, entropy=loss, use_entropy_loss=True, entropy_loss_coef=1.0)
    with on_cpu():
        worker._forward_backward_micro(worker_experience(logp, mask), 1.0)
    return -worker.strategy.losses[0]


def skyrl_worker_kl_reduction(loss: Any, mask: Any) -> Any:
    """The KL term's reduction alone: ``PolicyWorkerBase._forward_backward_micro`` with
    ``kl_estimator_type="k1"`` against reference log-probs 0, so that the per-token KL it reduces
    is ``loss`` itself (the model returns ``loss`` as its log-probs; zero advantages)."""
    import torch

    from refimpl.frameworks._skyrl_losses_worker import on_cpu, policy_worker, worker_experience

    worker = policy_worker(loss, use_kl_loss=True, kl_loss_coef=1.0, kl_estimator_type="k1")
    experience = worker_experience(loss, mask, logp_ref=torch.zeros_like(loss.detach()))
    with on_cpu():
        worker._forward_backward_micro(experience, 1.0)
    return worker.strategy.losses[0]


def skyrl_microbatch_worker_kl(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    mask: Any,
    *,
    rank_sequences: Any,
) -> Any:
    """One micro-batch's KL term as the worker weighs it: ``k1`` against reference 0 of the
    per-token ``−A·ρ`` (the model's log-probs), ``microbatch_weight = len(microbatch) /
    len(data)``, ``len(data)`` the rows of the rank's shard."""
    import torch

    from refimpl.frameworks._skyrl_losses_worker import on_cpu, policy_worker, worker_experience

    per_token = -advantages[:, None] * torch.exp(logp - logp_old)
    worker = policy_worker(per_token, use_kl_loss=True, kl_loss_coef=1.0, kl_estimator_type="k1")
    experience = worker_experience(per_token, mask, logp_ref=torch.zeros_like(logp.detach()))
    weight = mask.shape[0] / int(rank_sequences)
    with on_cpu():
        worker._forward_backward_micro(experience, weight)
    return worker.strategy.losses[0]


def skyrl_microbatch_worker_entropy(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    mask: Any,
    *,
    rank_sequences: Any,
) -> Any:
    """One micro-batch's entropy term as the worker weighs it: the model's entropies are the
    per-token ``−A·ρ``, ``microbatch_weight = len(microbatch) / len(data)``, ``len(data)`` the
    rows of the rank's shard; minus the loss handed to ``backward``."""
    import torch

    from refimpl.frameworks._skyrl_losses_worker import on_cpu, policy_worker, worker_experience

    per_token = -advantages[:, None] * torch.exp(logp - logp_old)
    zero = torch.zeros_like(logp.detach())
    worker = policy_worker(zero, entropy=per_token, use_entropy_loss=True, entropy_loss_coef=1.0)
    weight = mask.shape[0] / int(rank_sequences)
    with on_cpu():
        worker._forward_backward_micro(worker_experience(zero, mask), weight)
    return -worker.strategy.losses[0]


#: The KL and entropy terms' scaling (the preset ``skyrl_worker_terms``): each micro-batch's own
#: reduction times its share of the rank's rows, not scaled by dp_size, averaged over the ranks.
_TERMS = (
    f"{_TRAINER} (microbatch_weight, passed by PolicyWorkerBase.forward_backward as "
    "len(microbatch) / len(data); no dp_size factor on the KL and entropy terms)"
)


def _kl(name: str, candidate: Any, **extra: Any) -> Adapter:
    return Adapter(
        key=f"skyrl.worker_kl_{name}",
        framework="skyrl",
        function=_STEP,
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
        note=f"the worker step's KL term: compute_approx_kl({name}), each row's token mean, "
        "the mean over every row; the policy loss (zero advantages) and entropy term off.",
    )


ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="skyrl.worker_kl_reduction",
        framework="skyrl",
        function=_STEP,
        settings={"use_kl_loss": True, "kl_estimator_type": "k1", "kl_loss_coef": 1.0},
        spec="aggregation",
        conventions={"mode": "seq_mean_token_mean", "empty_rows": "counted"},
        candidate=skyrl_worker_kl_reduction,
        partition=Partition(
            candidate=skyrl_microbatch_worker_kl,
            mode="seq_mean_token_mean",
            rule="skyrl_worker_terms",
            empty_rows="counted",
            trainer=_TERMS,
        ),
        note="the worker step's KL reduction: masked_mean(kl, loss_mask, dim=-1).mean(), every "
        "row counted; k1 against reference 0 makes the reduced KL the spec's loss.",
    ),
    _kl("k1", skyrl_worker_kl_k1),
    _kl("k2", skyrl_worker_kl_k2),
    _kl("abs", skyrl_worker_kl_abs),
    _kl("k3", skyrl_worker_kl_k3, clamp=10.0, log_ratio_clamp=20.0),
    Adapter(
        key="skyrl.worker_entropy",
        framework="skyrl",
        function=_STEP,
        settings={"use_entropy_loss": True, "entropy_loss_coef": 1.0},
        spec="aggregation",
        conventions={"mode": "token_mean"},
        candidate=skyrl_worker_entropy,
        partition=Partition(
            candidate=skyrl_microbatch_worker_entropy,
            mode="token_mean",
            rule="skyrl_worker_terms",
            trainer=_TERMS,
        ),
        note="the worker step's entropy term: masked_mean over the micro-batch's tokens of the "
        "model's entropies (the spec's loss), subtracted; the policy loss and KL term off.",
    ),
)

__all__ = ["ADAPTERS", "kl_term", "on_cpu", "policy_worker", "worker_experience"]
