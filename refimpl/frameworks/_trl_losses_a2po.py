"""TRL (trl 1.16.0): A*-PO, ``trl/experimental/a2po/a2po_trainer.py`` ``A2POTrainer``, as read.

- ``A2POTrainer._estimate_optimal_values`` (stage 1): for each batch of prompts, ``n =
  num_value_samples`` completions from ``ref_model.generate``, their float32 rewards from
  ``_calculate_rewards`` viewed as ``(prompts, n)``, and ``v_star = beta1 *
  (torch.logsumexp(rewards / beta1, dim=1) − math.log(n))`` cached per prompt text.
- ``A2POTrainer.compute_loss`` (stage 2): ``policy_logps = _get_sequence_logps(model, ...)``
  (the log-softmax of the sampled tokens summed over the completion mask), ``implicit_reward =
  beta2 * (policy_logps − ref_logps)``, ``target = rewards − v_star``, ``loss = ((implicit_reward
  − target) ** 2).mean()`` over the batch's sequences.
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter

_VALUE = "trl.experimental.a2po.a2po_trainer:A2POTrainer._estimate_optimal_values"
_LOSS = "trl.experimental.a2po.a2po_trainer:A2POTrainer.compute_loss"


def trl_a2po_optimal_values(rewards: Any, *, beta1: Any) -> Any:
    """TRL's ``A2POTrainer._estimate_optimal_values`` on an instance made with ``__new__`` and a
    real single-process CPU ``accelerate.Accelerator``: one prompt text per row of ``rewards``
    ``(P, n)``, ``num_value_samples = n``, one batch of ``P`` prompts, a stand-in reference model
    whose ``generate`` returns one token per completion, a stand-in tokenizer, and one reward
    function returning ``rewards`` row by row (TRL repeats each prompt ``n`` times); returns the
    cached ``_optimal_values`` in prompt order. ``filter_all_incorrect`` is off (it filters the
    dataset, not V*)."""
    import types

    import torch
    from accelerate import Accelerator
    from trl.experimental.a2po.a2po_trainer import A2POTrainer

    prompts, n = int(rewards.shape[0]), int(rewards.shape[1])
    flat = [float(x) for x in rewards.reshape(-1).tolist()]

    class Tokens(dict):  # type: ignore[type-arg]
        def to(self, device: Any) -> Any:
            return self

    class Reference(torch.nn.Module):
        is_gradient_checkpointing = False

        def generate(self, input_ids: Any, **_kwargs: Any) -> Any:
            ids = input_ids.repeat_interleave(n, dim=0)
            return torch.cat([ids, torch.ones(ids.shape[0], 1, dtype=torch.long)], dim=1)

    class Tokenizer:
        def __call__(self, texts: Any, **_kwargs: Any) -> Any:
            ids = torch.ones(len(texts), 1, dtype=torch.long)
            return Tokens(input_ids=ids, attention_mask=torch.ones_like(ids))

        def batch_decode(self, ids: Any, **_kwargs: Any) -> list[str]:
            return ["c"] * len(ids)

    t = A2POTrainer.__new__(A2POTrainer)
    t.accelerator = Accelerator(cpu=True)
    t.args = types.SimpleNamespace(
        beta1=float(beta1), num_value_samples=n, per_device_train_batch_size=prompts,
        max_prompt_length=None, filter_all_incorrect=False,
    )  # fmt: skip
    t.train_dataset = [{"prompt": f"prompt {i}"} for i in range(prompts)]
    t.eval_dataset = None
    t.processing_class = Tokenizer()
    t.ref_model = Reference()
    t.value_generation_config = None
    t.reward_funcs = [lambda prompts, completions, **_kw: flat]
    t.reward_weights = torch.ones(1, dtype=torch.float32)
    t._estimate_optimal_values()
    return torch.tensor([t._optimal_values[f"prompt {i}"] for i in range(prompts)])


def trl_a2po_loss(logp: Any, logp_ref: Any, advantages: Any, *, beta2: Any, mask: Any) -> Any:
    """TRL's ``A2POTrainer.compute_loss`` on an instance made with ``__new__`` (``args.beta2``):
    its ``_get_sequence_logps`` — the model forward, the log-softmax of the sampled tokens and
    their sum over the completion mask — is replaced by one returning ``Σ_t mask·logp`` (a
    finite-logit model cannot give a token log-probability 0 a gradient; the framework test
    checks the real one's sum on a stand-in model), ``ref_logps`` is ``Σ_t mask·logp_ref`` as
    ``_prepare_inputs`` stores it, ``rewards`` the optimal advantages (the spec's ``(B, T)``,
    constant along each row) and ``v_star`` 0: the target ``r − V*`` is the advantage."""
    import collections
    import types

    import torch
    from trl.experimental.a2po.a2po_trainer import A2POTrainer

    trainer = A2POTrainer.__new__(A2POTrainer)
    trainer.args = types.SimpleNamespace(beta2=float(beta2))
    trainer.model = types.SimpleNamespace(training=True)
    trainer._metrics = {"train": collections.defaultdict(list)}
    m = torch.as_tensor(mask).to(logp.dtype)

    def sequence_logps(model: Any, input_ids: Any, attention_mask: Any, keep: Any) -> Any:
        return (torch.where(m > 0, logp, torch.zeros_like(logp))).sum(dim=1)

    trainer._get_sequence_logps = sequence_logps
    inputs = {
        "input_ids": None,
        "attention_mask": None,
        "logits_to_keep": logp.shape[1],
        "ref_logps": torch.where(m > 0, logp_ref, torch.zeros_like(logp_ref)).sum(dim=1),
        "rewards": advantages[:, 0],
        "v_star": torch.zeros_like(advantages[:, 0]),
    }
    return trainer.compute_loss(None, inputs)


ADAPTERS: tuple[Adapter, ...] = (
    Adapter(
        key="trl.a2po_optimal_values",
        framework="trl",
        function=_VALUE,
        settings={"beta1": "beta1", "num_value_samples": "n (the rewards' columns)"},
        spec="optimal_value_estimate",
        conventions={},
        candidate=trl_a2po_optimal_values,
        dtype="float32",
        note="beta1·(logsumexp(r/beta1) − log n) per prompt over its n reference samples, "
        "float32 rewards.",
    ),
    Adapter(
        key="trl.a2po_loss",
        framework="trl",
        function=_LOSS,
        settings={"beta2": "beta2"},
        spec="optimal_advantage_regression",
        conventions={
            "output": "scalar",
            "aggregation": "seq_mean_token_mean",
            "sequence_count": "all",
            # _prepare_inputs: completion_mask = (index <= first EOS), the first token included
            "empty_rows": "excluded",
            "empty_batch": "excluded",
        },
        candidate=trl_a2po_loss,
        # An all-padding row never reaches compute_loss (_prepare_inputs keeps each completion's
        # first token: empty_rows='excluded'); given one, compute_loss would count it in its mean
        # over the sequences as (0 − A)², where the reference gives 0. The matrix's padding
        # check draws none under this declaration.
        note="(beta2·(Σ m·logp − ref_logps) − (r − V*))², mean over the sequences.",
    ),
)

__all__ = ["ADAPTERS"]
