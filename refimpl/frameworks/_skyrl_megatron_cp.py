"""SkyRL (skyrl 0.3.0): the Megatron backend's packed log-probabilities with context parallelism,
run on two gloo ranks on CPU.

``MegatronModelWrapper.forward_backward_mini_batch`` (``workers/megatron/megatron_model_wrapper.py``)
calls ``from_parallel_logits_to_logprobs_packed_sequences`` (or, with the fused LM head,
``from_parallel_hidden_to_logprobs_packed_sequences``) with
``cp_group=mpu.get_context_parallel_group()``. With a context-parallel size ``cp`` above one, each
rank holds the logits of its share of every packed sequence: each sequence is padded to a multiple
of ``tp · cp · 2`` (``packing_utils.get_packed_seq_align_size``) and cut into ``2 cp`` chunks, rank
``r`` keeping chunks ``r`` and ``2 cp − 1 − r`` (``preprocess_packed_seqs``, load balancing for
causal attention). The function rolls the full packed targets, keeps the rank's own, computes the
rank's log-probabilities, and gathers them with ``AllGatherPackedCPTensor``
(``distributed/megatron/model_utils.py``): its forward all-gathers the ranks' shares and puts each
position back in sequence order; its backward hands each rank the cotangent of its own positions
only (every rank holds the same gathered output and loss, so each logit's gradient is counted once,
on the rank that owns it).

:func:`context_parallel_logprobs` runs this for real: two spawned processes, a gloo group over a
file store, megatron's model-parallel state with ``context_parallel_size=2`` (tensor-parallel size
1, the whole vocabulary on each rank). Each rank pads every row to a multiple of 4, keeps its two
chunks of each with SkyRL's ``_get_tokens_on_this_cp_rank`` (the same layout as
``preprocess_packed_seqs``, which pads only the last axis and so takes token ids, not logits),
calls the function with the full packed targets and the all-ones attention mask, and
back-propagates the cotangent to its share of the logits; the gradient is the sum of the ranks'.
The packed targets are built as ``_build_packed_targets`` builds them (each row's tokens at its
``cu_seqlens_padded`` offset), by hand: ``megatron_model_wrapper`` imports ``skyrl_gym``, which is
not installed. Spawning two processes that import torch, megatron and SkyRL takes about 25 s of
wall, so the path is checked by a framework test on a fixed input, not by a matrix entry (a
Hypothesis check would pay it per example, or need a pool of ranks kept alive across calls).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

CP = 2  # the context-parallel size (and number of ranks)
ALIGN = 2 * CP  # tp · cp · 2 with tp = 1


def _sharded(x: Any, rank: int) -> Any:
    """``(B, S, …)`` → the rank's share of the packed row, ``(1, B·P / CP, …)``."""
    import warnings

    import torch
    from skyrl.backends.skyrl_train.distributed.megatron.model_utils import (
        _get_tokens_on_this_cp_rank,
    )

    width = -(-int(x.shape[1]) // ALIGN) * ALIGN
    pad = [0, 0] * (x.dim() - 2) + [0, width - int(x.shape[1])]
    padded = torch.nn.functional.pad(x, pad)
    with warnings.catch_warnings():  # torch warns of its list-of-slices indexing
        warnings.simplefilter("ignore", UserWarning)
        shares = [_get_tokens_on_this_cp_rank(padded[i : i + 1], rank, CP) for i in range(len(x))]
    return torch.cat(shares, dim=1)


def _rank(rank: int, store: str, args: tuple[Any, Any, Any], queue: Any) -> None:
    """One context-parallel rank: each function's value and this rank's share of its gradient."""
    import importlib
    import warnings

    import torch
    import torch.distributed as dist

    from refimpl.frameworks import install_stubs

    warnings.simplefilter("ignore")
    install_stubs()
    # megatron is imported by name: it is installed only with the Megatron extra
    mpu = importlib.import_module("megatron.core.parallel_state")
    from skyrl.backends.skyrl_train.distributed.megatron import model_utils

    logits, sequences, cotangent = args
    files = dist.FileStore(store, CP)  # type: ignore[attr-defined]
    dist.init_process_group("gloo", store=files, rank=rank, world_size=CP)
    mpu.initialize_model_parallel(context_parallel_size=CP)
    try:
        rows, width, vocab = (int(n) for n in logits.shape)
        padded = -(-width // ALIGN) * ALIGN
        cu = torch.arange(rows + 1, dtype=torch.int32) * padded
        targets = torch.nn.functional.pad(sequences, (0, padded - width)).reshape(1, -1)
        groups = {
            "group": mpu.get_tensor_model_parallel_group(),
            "inference_only": False,
            "cp_group": mpu.get_context_parallel_group(),
            "attention_mask": torch.ones(rows, width, dtype=torch.bool),
        }
        eye = torch.eye(vocab, dtype=logits.dtype)  # the fused head: hidden states = logits
        calls: dict[str, Callable[[Any], Any]] = {
            "logits": lambda z: model_utils.from_parallel_logits_to_logprobs_packed_sequences(
                _sharded(z, rank), targets, cu, width, 0, vocab, **groups
            ),
            "fused_hidden": lambda z: model_utils.from_parallel_hidden_to_logprobs_packed_sequences(
                _sharded(z, rank), eye, targets, cu, width, 0, vocab, chunk_size=3, **groups
            ),
        }
        for name, call in calls.items():
            z = logits.detach().clone().requires_grad_(True)
            logp = call(z)
            (grad,) = torch.autograd.grad(logp, z, grad_outputs=cotangent.to(logp.dtype))
            queue.put((name, rank, logp.detach().double().tolist(), grad.double().tolist()))
    finally:
        mpu.destroy_model_parallel()
        dist.destroy_process_group()


def context_parallel_logprobs(
    logits: Any, sequences: Any, cotangent: Any
) -> dict[str, tuple[list[Any], Any]]:
    """The packed log-probabilities of ``sequences`` (``(B, S)``: position ``t`` scores token
    ``t + 1``) under ``logits`` (``(B, S, V)``) on two context-parallel gloo ranks: for each
    function, each rank's value and the gradient of ``Σ cotangent·logp`` (``(B, S − 1)``) summed
    over the ranks.

    ``"logits"`` is ``from_parallel_logits_to_logprobs_packed_sequences``; ``"fused_hidden"`` is
    ``from_parallel_hidden_to_logprobs_packed_sequences`` (the torch fused LM head, chunks of three
    positions) with the logits as the hidden states and the identity as the weight.
    """
    import torch
    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    queue = context.Queue()
    with tempfile.TemporaryDirectory() as folder:
        store = str(Path(folder) / "store")
        args = (logits.detach(), sequences, cotangent)
        ranks = [context.Process(target=_rank, args=(r, store, args, queue)) for r in range(CP)]
        for process in ranks:
            process.start()
        results = sorted(_collect(queue, ranks, 2 * CP))
    out: dict[str, tuple[list[Any], Any]] = {}
    for name in ("logits", "fused_hidden"):
        mine = [(value, grad) for n, _, value, grad in results if n == name]
        values = [torch.tensor(value, dtype=torch.float64) for value, _ in mine]
        out[name] = values, sum(torch.tensor(grad, dtype=torch.float64) for _, grad in mine)
    return out


def _collect(queue: Any, ranks: list[Any], count: int) -> list[Any]:
    """Each rank's result, or the exit codes of the ranks that failed (their traceback is on
    stderr) rather than a wait for results that will not come."""
    import queue as queues

    results: list[Any] = []
    while len(results) < count:
        try:
            results.append(queue.get(timeout=1.0))
        except queues.Empty:
            failed = [p.exitcode for p in ranks if p.exitcode not in (None, 0)]
            if failed:
                raise RuntimeError(f"a context-parallel rank failed, exit codes {failed}") from None
    for process in ranks:
        process.join()
    return results


__all__ = ["context_parallel_logprobs"]
