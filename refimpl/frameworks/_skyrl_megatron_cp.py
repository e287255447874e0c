"""SkyRL (skyrl 0.3.0): the Megatron backend's packed log-probabilities and entropies with context
parallelism, run on two gloo ranks on CPU.

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

:func:`context_parallel_ranks` runs this for real on a :class:`RankPool`: two processes started
by multiprocessing's fork server, which imports torch and megatron once (:data:`PRELOAD`) and forks
each rank from its own single thread. Forking this process instead would copy a process that may
run other threads (JAX's, where the JAX entries ran first, which then warns that the fork may
deadlock), and spawning a rank would import torch and megatron again, about 9 s of CPU a rank.
Each pool is a gloo group over a file store, megatron's model-parallel state with
``context_parallel_size=2`` (tensor-parallel size 1, the whole vocabulary on each rank). Each call
is sent to both ranks over pipes; each rank pads every row to a multiple of 4, keeps its two chunks
of each with SkyRL's ``_get_tokens_on_this_cp_rank`` (the same layout as ``preprocess_packed_seqs``,
which pads only the last axis and so takes token ids, not logits), calls the function with the full
packed targets and the all-ones attention mask, back-propagates the cotangent to its share of the
logits, and answers its gathered values and its gradient; the gradient is the sum of the ranks'.
The packed targets are built as ``_build_packed_targets`` builds them (each row's tokens at its
``cu_seqlens_padded`` offset), by hand: ``megatron_model_wrapper`` imports ``skyrl_gym``, which is
not installed.

The pool lives for one :func:`context_parallel_session` (the adapters' :attr:`Adapter.session`, so
a whole check starts its ranks once, about a second after the fork server's start, which a process
pays once); a call outside a session starts and stops its own pool, and a script that makes one
needs Python's ``if __name__ == "__main__":`` guard, as any script starting processes without
``fork`` does (each rank imports the script's main module). Every wait has a timeout
(:data:`WAIT`); a rank that dies raises with its exit code, one that raises sends its traceback;
after any failure the pool is torn down (and started again by the next call), and at the
session's end no rank is left.

The packed entropies (``vocab_parallel_entropy_packed_sequences``,
``from_parallel_hidden_to_entropy_packed_sequences``; ``distributed/megatron/model_utils.py``) get
``cp_group`` too; each rank returns ``(entropy, entropy_for_loss)``: the metric (both ranks' sums
over both ranks' count, all-reduced: the same on each) and its own tokens' ``Σ m·H`` over the
all-reduced count. The step's entropy term across the ranks, as read from the pinned code:

- ``workers/megatron/megatron_model_wrapper.py``,
  ``MegatronModelWrapper.forward_backward_mini_batch``'s ``loss_func``: l. 787 calls the function
  with ``mpu.get_context_parallel_group()``, l. 804
  ``entropy_loss_term = entropy_for_loss * entropy_loss_coef``, l. 839–843 subtract it (times
  ``num_microbatches / num_real_microbatches``, 1 without padding micro-batches) from the rank's
  loss, l. 886 ``return loss, metrics``: two outputs;
- megatron-core 0.16.1 ``pipeline_parallel/schedules.py``, ``forward_step_calc_loss``, l. 266–269:
  a two-output loss is multiplied by ``cp_group_size`` and divided by ``num_microbatches`` before
  the backward (``calculate_per_token_loss``, default False in ``transformer_config.py`` l. 233, is
  never set by SkyRL, and only the three-output branch reads it);
- ``distributed/distributed_data_parallel.py``, ``DistributedDataParallel.__init__``, l. 281–282
  and 291–292: with ``average_in_collective`` (True in SkyRL's ``MegatronDDPConfig``,
  ``skyrl/train/config/config.py`` l. 199) no pre-scaling, and
  ``param_and_grad_buffer.py``, ``_ParamAndGradBucketGroup.start_grad_sync``, l. 395–397,
  all-reduces the gradients with ``ReduceOp.AVG`` over the data-parallel×context-parallel group.

With one data-parallel rank and one micro-batch, the step's gradient is therefore the mean over the
two ranks of ``∂(2·entropy_for_loss_r)``, that is ``∂ Σ_r entropy_for_loss_r``: the gradient of the
token mean ``Σ m·H / max(Σ m, 1)`` over both ranks' tokens, the one-rank entries' quantity. Each
rank here back-propagates ``CP · entropy_for_loss`` (the schedule's scale) to its share of the
logits; :func:`context_parallel_entropy` averages the ranks' terms and gradients (DDP's average).
The wrapper refuses ``use_entropy_loss`` with the fused LM head (l. 547, "the fused entropy is a
no-grad metric"), so ``from_parallel_hidden_to_entropy_packed_sequences``' loss term is never
differentiated in SkyRL's step: its entry checks the function under the same combination, as the
one-rank entry checks it on one rank.

The fused entries run chunks of 64 positions, not the three of the one-rank fused entries (which
check the chunking itself): a drawn row of 4096 positions gives each rank 2050, crossed by 32
chunk boundaries and ending in a chunk of two, at about a tenth of the CPU of chunks of three
(0.08 s against 0.8 s of the ranks' CPU per call).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from refimpl.frameworks._registry import Adapter
from refimpl.frameworks._skyrl_losses_megatron_packed import _LOGPROBS, _PACKED_ENTROPY, _UTILS

CP = 2  # the context-parallel size (and number of ranks)
ALIGN = 2 * CP  # tp · cp · 2 with tp = 1
WAIT = 120.0  # seconds: the longest wait for a rank's start or answer, and gloo's timeout
IDLE = 900.0  # seconds: a rank that hears nothing this long (its parent hung) exits
#: What the fork server imports before it forks any rank: torch and megatron are most of a rank's
#: start (about 9.4 s of CPU, paid once per process that starts ranks); SkyRL's module, which
#: needs refimpl's stubs, each rank imports itself (about 0.1 s).
PRELOAD = ["torch", "torch.distributed", "megatron.core.parallel_state"]


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


def _answer(rank: int, request: tuple[Any, ...], groups: dict[str, Any]) -> tuple[Any, Any]:
    """One call on one rank: its output (the gathered log-probabilities, or its entropy loss
    term) and its share of the gradient of ``Σ cotangent·output`` with respect to the
    (unsharded) logits, as numpy arrays."""
    import torch

    kind, function, head, keywords, divisor, logits, data, cotangent = request
    z = torch.from_numpy(logits).requires_grad_(True)
    rows, width, vocab = (int(n) for n in z.shape)
    padded = -(-width // ALIGN) * ALIGN
    cu = torch.arange(rows + 1, dtype=torch.int32) * padded
    weight = (torch.eye(vocab, dtype=z.dtype),) if head else ()  # hidden states = logits
    mask = torch.ones(rows, width, dtype=torch.bool)
    share = _sharded(z / divisor, rank)
    if kind == "entropy":
        tp = {"tp_group": groups["group"]} if head else {}
        _, for_loss = function(
            share, *weight, cu, width, width - 1, mask, torch.from_numpy(data),
            groups["cp_group"], **tp, **keywords,
        )  # fmt: skip
        out = for_loss * CP  # megatron's schedule scales a two-output loss by the CP size
    else:
        targets = torch.nn.functional.pad(torch.from_numpy(data), (0, padded - width))
        out = function(
            share, *weight, targets.reshape(1, -1), cu, width, 0, vocab,
            attention_mask=mask, **groups, **keywords,
        )  # fmt: skip
    cot = torch.from_numpy(cotangent).to(out.dtype)
    (grad,) = torch.autograd.grad(out, z, grad_outputs=cot)
    return out.detach().numpy(), grad.numpy()


def _serve(rank: int, store: str, conn: Any) -> None:
    """One context-parallel rank (forked by the fork server): join the group, then answer each
    request until told to stop, the parent's end closes, or :data:`IDLE` passes without one."""
    import datetime
    import importlib
    import traceback
    import warnings

    import torch
    import torch.distributed as dist

    from refimpl.frameworks import install_stubs

    install_stubs()  # before a request's SkyRL function is unpickled (its module imports them)
    torch.set_num_threads(1)  # the two ranks share the machine's cores
    warnings.simplefilter("ignore")
    mpu = importlib.import_module("megatron.core.parallel_state")
    files = dist.FileStore(store, CP)  # type: ignore[attr-defined]
    timeout = datetime.timedelta(seconds=WAIT)
    dist.init_process_group("gloo", store=files, rank=rank, world_size=CP, timeout=timeout)
    mpu.initialize_model_parallel(context_parallel_size=CP)
    try:
        groups = {
            "group": mpu.get_tensor_model_parallel_group(),
            "inference_only": False,
            "cp_group": mpu.get_context_parallel_group(),
        }
        conn.send("ready")
        while conn.poll(IDLE):
            request = conn.recv()
            if request is None:
                break
            try:
                conn.send(("ok", _answer(rank, request, groups)))
            except Exception:
                conn.send(("raised", traceback.format_exc()))
    except EOFError:  # the parent is gone
        pass
    finally:
        mpu.destroy_model_parallel()
        dist.destroy_process_group()


class RankPool:
    """Two context-parallel ranks kept alive across calls, each served over a pipe.

    Started by the first :meth:`call`; :meth:`close` stops and reaps both (also after a
    failure, which :meth:`call` follows with a close, so the next call starts afresh)."""

    def __init__(self) -> None:
        self.ranks: list[Any] = []
        self.conns: list[Any] = []
        self.folder: tempfile.TemporaryDirectory[str] | None = None

    def start(self) -> None:
        """Start the ranks and wait until both have joined the group."""
        import multiprocessing

        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)  # read when this process first starts its server
        self.folder = tempfile.TemporaryDirectory()
        store = str(Path(self.folder.name) / "store")
        pipes = [context.Pipe() for _ in range(CP)]
        self.conns = [mine for mine, _ in pipes]
        for rank, (_, theirs) in enumerate(pipes):
            process = context.Process(target=_serve, args=(rank, store, theirs))
            process.daemon = True  # never outlives this process, whatever happens
            process.start()
            theirs.close()
            self.ranks.append(process)
        self._answers()

    def call(self, request: tuple[Any, ...]) -> list[Any]:
        """Each rank's answer to ``request`` (:func:`_answer`'s), in rank order."""
        try:
            if not self.ranks:
                self.start()
            for conn in self.conns:
                with contextlib.suppress(OSError):  # a rank that died: _answers names its code
                    conn.send(request)
            answers = self._answers()
        except BaseException:
            self.close(wait=0.0)
            raise
        raised = [a[1] for a in answers if a[0] != "ok"]
        if raised:
            self.close(wait=0.0)  # the other rank may wait in a collective
            raise RuntimeError(f"a context-parallel rank raised:\n{raised[0]}")
        return [a[1] for a in answers]

    def _answers(self) -> list[Any]:
        """One message from each rank, or an error naming the exit codes of the ranks that died
        (their traceback is on stderr), or a timeout after :data:`WAIT` seconds."""
        import time
        from multiprocessing.connection import wait

        answers: dict[int, Any] = {}
        deadline = time.monotonic() + WAIT
        while len(answers) < CP:
            left = deadline - time.monotonic()
            waiting = [self.conns[r] for r in range(CP) if r not in answers]
            ready = wait(waiting + [p.sentinel for p in self.ranks], timeout=max(left, 0.0))
            for rank, conn in enumerate(self.conns):
                if conn in ready:
                    try:
                        answers[rank] = conn.recv()
                    except (EOFError, OSError):  # the rank is gone: its exit code below
                        self.ranks[rank].join(5.0)
            if len(answers) == CP:
                break
            dead = [p.exitcode for p in self.ranks if p.exitcode is not None]
            if dead:
                raise RuntimeError(
                    f"a context-parallel rank exited, exit codes {dead} (its traceback, if any, "
                    f"is on stderr; 0: it heard nothing for {IDLE:.0f} s)"
                )
            if left <= 0.0:
                raise TimeoutError(f"the context-parallel ranks did not answer in {WAIT:.0f} s")
        return [answers[r] for r in range(CP)]

    def close(self, wait: float = 10.0) -> None:
        """Ask each rank to stop; terminate, then kill, any still alive after ``wait`` s."""
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.send(None)
            conn.close()
        for process in self.ranks:
            process.join(wait)
            if process.is_alive():
                process.terminate()
                process.join(5.0)
            if process.is_alive():
                process.kill()
                process.join(5.0)
        if self.folder is not None:
            self.folder.cleanup()
        self.ranks, self.conns, self.folder = [], [], None


_POOL: list[RankPool] = []  # the session's pool, while one is open


@contextlib.contextmanager
def context_parallel_session() -> Iterator[None]:
    """Within the block, every :func:`context_parallel_ranks` call is served by one
    :class:`RankPool`, closed at the end. Re-entrant: an inner block uses the outer's pool."""
    if _POOL:
        yield
        return
    pool = RankPool()
    _POOL.append(pool)
    try:
        yield
    finally:
        _POOL.clear()
        pool.close()


def _plain(x: Any, dtype: Any) -> Any:
    """``x`` as a contiguous numpy array (numpy crosses the pipe by value, a tensor by handle)."""
    import numpy as np
    import torch

    return np.ascontiguousarray(torch.as_tensor(x).detach().cpu().numpy(), dtype=dtype)


def _served(request: tuple[Any, ...]) -> tuple[list[Any], list[Any]]:
    """Each rank's output and gradient for ``request``, from the session's pool or, outside a
    session (a reproduction), from a pool of its own, stopped after."""
    import torch

    if _POOL:
        answers = _POOL[0].call(request)
    else:
        pool = RankPool()
        try:
            answers = pool.call(request)
        finally:
            pool.close()
    return [torch.from_numpy(v) for v, _ in answers], [torch.from_numpy(g) for _, g in answers]


def context_parallel_ranks(
    function: Callable[..., Any],
    logits: Any,
    sequences: Any,
    cotangent: Any,
    *,
    divisor: float = 1.0,
    head: bool = False,
    **keywords: Any,
) -> tuple[list[Any], list[Any]]:
    """Each rank's gathered values and share of the gradient of ``function``, SkyRL's packed
    log-probabilities of ``sequences`` (``(B, S)``: position ``t`` scores token ``t + 1``) under
    ``logits / divisor`` (``(B, S, V)``), with ``cotangent`` (``(B, S − 1)``), on two
    context-parallel ranks.

    With ``head``, ``function`` takes hidden states and an LM-head weight: it gets the logits as
    the hidden states and the identity as the weight (``keywords`` pass ``chunk_size`` and
    ``temperature``)."""
    import numpy as np

    request = (
        "logprobs", function, head, keywords, float(divisor), _plain(logits, np.float64),
        _plain(sequences, np.int64), _plain(cotangent, np.float64),
    )  # fmt: skip
    return _served(request)


def context_parallel_entropy_ranks(
    function: Callable[..., Any], logits: Any, mask: Any, *, head: bool = False, **keywords: Any
) -> tuple[list[Any], list[Any]]:
    """Each rank's entropy loss term and its gradient with respect to the (unsharded) logits:
    ``function``, SkyRL's packed entropy, of ``logits`` (``(B, S, V)``) under ``mask``
    (``(B, S − 1)``: the loss mask of positions ``0 … S − 2``), on two context-parallel ranks.

    A rank's term is its ``entropy_for_loss`` (its own tokens' ``Σ m·H`` over the count all-reduced
    over the ranks) times ``CP``, as megatron's schedule scales the loss a two-output loss function
    returns before the backward. With ``head``, as :func:`context_parallel_ranks`."""
    import numpy as np

    request = (
        "entropy", function, head, keywords, 1.0, _plain(logits, np.float64),
        _plain(mask, np.float64), np.ones(()),
    )  # fmt: skip
    return _served(request)


def context_parallel(
    function: Callable[..., Any], logits: Any, sequences: Any, cotangent: Any, **options: Any
) -> tuple[Any, Any]:
    """:func:`context_parallel_ranks`' gathered values (the same on every rank, else an error)
    and the gradient summed over the ranks (each logit is owned by one rank)."""
    values, grads = context_parallel_ranks(function, logits, sequences, cotangent, **options)
    for rank, value in enumerate(values[1:], start=1):
        if not bool((value == values[0]).logical_or(value.isnan() & values[0].isnan()).all()):
            raise RuntimeError(f"context-parallel rank {rank} gathered other values than rank 0")
    return values[0], sum(grads[1:], grads[0])


def context_parallel_entropy(
    function: Callable[..., Any], logits: Any, mask: Any, **options: Any
) -> tuple[Any, Any]:
    """The step's entropy term across the ranks and its gradient: the mean over the ranks of
    :func:`context_parallel_entropy_ranks`' terms and gradients (the data-parallel size is one,
    so the data-parallel×context-parallel group is the two ranks, whose gradients DDP averages);
    with the schedule's ``× CP``, ``Σ_r entropy_for_loss_r``, the token mean over both ranks."""
    values, grads = context_parallel_entropy_ranks(function, logits, mask, **options)
    return sum(values[1:], values[0]) / CP, sum(grads[1:], grads[0]) / CP


def skyrl_megatron_logprobs_packed_cp(
    logits: Any, tokens: Any, *, temperature: Any, mask: Any, cotangent: Any
) -> tuple[Any, Any]:
    """``from_parallel_logits_to_logprobs_packed_sequences`` of ``logits / temperature`` (the
    wrapper's ``logits.div_``) on two context-parallel ranks: ``DistributedLogprob`` on each
    rank's share, gathered by ``AllGatherPackedCPTensor``."""
    from skyrl.backends.skyrl_train.distributed.megatron.model_utils import (
        from_parallel_logits_to_logprobs_packed_sequences as function,
    )

    from refimpl.frameworks._skyrl_losses_megatron_packed import appended, shifted_tokens
    from refimpl.frameworks._skyrl_megatron_cp import context_parallel

    rows = (appended(logits), shifted_tokens(tokens), cotangent)
    value, grad = context_parallel(function, *rows, divisor=temperature)
    return value, grad[:, :-1]


def skyrl_megatron_hidden_logprobs_packed_cp(
    logits: Any, tokens: Any, *, temperature: Any, mask: Any, cotangent: Any
) -> tuple[Any, Any]:
    """``from_parallel_hidden_to_logprobs_packed_sequences`` (hidden = the packed logits,
    weight = ``I``), ``chunk_size=64``, ``fused_backend="torch"``, on two context-parallel ranks."""
    from skyrl.backends.skyrl_train.distributed.megatron.model_utils import (
        from_parallel_hidden_to_logprobs_packed_sequences as function,
    )

    from refimpl.frameworks._skyrl_losses_megatron_packed import appended, shifted_tokens
    from refimpl.frameworks._skyrl_megatron_cp import context_parallel

    rows = (appended(logits), shifted_tokens(tokens), cotangent)
    value, grad = context_parallel(
        function, *rows, head=True, chunk_size=64, temperature=float(temperature)
    )
    return value, grad[:, :-1]


def skyrl_megatron_entropy_packed_cp(logits: Any, *, mask: Any) -> tuple[Any, Any]:
    """``vocab_parallel_entropy_packed_sequences`` on two context-parallel ranks, each on its
    share of the packed logits: the step's entropy term ``Σ_r CP·entropy_for_loss_r / CP`` and
    its gradient, the mean of the ranks' (:func:`context_parallel_entropy`)."""
    from skyrl.backends.skyrl_train.distributed.megatron.model_utils import (
        vocab_parallel_entropy_packed_sequences as function,
    )

    from refimpl.frameworks._skyrl_losses_megatron_packed import appended
    from refimpl.frameworks._skyrl_megatron_cp import context_parallel_entropy

    value, grad = context_parallel_entropy(function, appended(logits), mask)
    return value, grad[:, :-1]


def skyrl_megatron_hidden_entropy_packed_cp(
    logits: Any, *, temperature: Any, mask: Any
) -> tuple[Any, Any]:
    """``from_parallel_hidden_to_entropy_packed_sequences`` (hidden = the packed logits,
    weight = ``I``), ``chunk_size=64``, on two context-parallel ranks: the step's entropy term
    and its gradient as :func:`skyrl_megatron_entropy_packed_cp`'s."""
    from skyrl.backends.skyrl_train.distributed.megatron.model_utils import (
        from_parallel_hidden_to_entropy_packed_sequences as function,
    )

    from refimpl.frameworks._skyrl_losses_megatron_packed import appended
    from refimpl.frameworks._skyrl_megatron_cp import context_parallel_entropy

    options = {"head": True, "chunk_size": 64, "temperature": float(temperature)}
    value, grad = context_parallel_entropy(function, appended(logits), mask, **options)
    return value, grad[:, :-1]


def _adapter(
    key: str, function: str, spec: str, conventions: Any, candidate: Any, note: str
) -> Adapter:
    keyword = conventions.get("temperature", "keyword") == "keyword"
    temperature = {"temperature": "temperature"} if keyword else {}
    return Adapter(
        key=f"skyrl.{key}",
        framework="skyrl",
        function=f"{_UTILS}:{function}",
        settings={**temperature, "context_parallel_size": CP},
        spec=spec,
        conventions=conventions,  # the one-rank packed entries' (the same functions)
        candidate=candidate,
        session=context_parallel_session,
        note=note,
    )


_RETURNED = {"gradient": "returned"}  # the gradient crosses the pipe: the candidate returns it

ADAPTERS: tuple[Adapter, ...] = (
    _adapter(
        "megatron_logprobs_packed_cp",
        "from_parallel_logits_to_logprobs_packed_sequences",
        "token_logprobs",
        _LOGPROBS,
        skyrl_megatron_logprobs_packed_cp,
        "Packed rows on two context-parallel gloo ranks (each its two chunks of every row padded "
        "to a multiple of 4): DistributedLogprob per rank, AllGatherPackedCPTensor; the gradient "
        "summed over the ranks.",
    ),
    _adapter(
        "megatron_hidden_logprobs_packed_cp",
        "from_parallel_hidden_to_logprobs_packed_sequences",
        "token_logprobs",
        _LOGPROBS,
        skyrl_megatron_hidden_logprobs_packed_cp,
        "Fused LM head on packed rows on two context-parallel gloo ranks, hidden = logits and "
        "weight = I, chunks of 64 positions; the gradient summed over the ranks.",
    ),
    _adapter(
        "megatron_entropy_packed_cp",
        "vocab_parallel_entropy_packed_sequences",
        "token_entropy",
        {**_PACKED_ENTROPY, "temperature": "none", "compute_dtype": None, **_RETURNED},
        skyrl_megatron_entropy_packed_cp,
        "Packed rows on two context-parallel gloo ranks: each rank's entropy_for_loss (its "
        "tokens' Σ m·H over the all-reduced count) times 2 (megatron's schedule), gradients "
        "averaged over the two ranks (DDP): Σ m·H / max(Σ m, 1).",
    ),
    _adapter(
        "megatron_hidden_entropy_packed_cp",
        "from_parallel_hidden_to_entropy_packed_sequences",
        "token_entropy",
        {**_PACKED_ENTROPY, **_RETURNED},
        skyrl_megatron_hidden_entropy_packed_cp,
        "Fused LM head on packed rows on two context-parallel gloo ranks, hidden = logits and "
        "weight = I, chunks of 64 positions, in float32; each rank's term times 2, averaged.",
    ),
)

__all__ = [
    "ADAPTERS",
    "RankPool",
    "context_parallel",
    "context_parallel_entropy",
    "context_parallel_entropy_ranks",
    "context_parallel_ranks",
    "context_parallel_session",
]
