"""SkyRL's Megatron packed log-probabilities and entropies with context parallelism, on two gloo
ranks, and the pool of ranks that serves the entries ``skyrl.megatron_logprobs_packed_cp``,
``skyrl.megatron_hidden_logprobs_packed_cp``, ``skyrl.megatron_entropy_packed_cp`` and
``skyrl.megatron_hidden_entropy_packed_cp``.

``AllGatherPackedCPTensor`` is reached only with a context-parallel size above one, which the
one-rank session of the Megatron entries cannot give. A fixed input pins the path (value and
gradient) against the reference: two rows of five positions (four scored: position ``t`` scores
token ``t + 1``, the last position is dropped) are padded to eight, so each rank holds chunks of
two positions of each row (rank 0 positions 0–1 and 6–7, rank 1 positions 2–5), and the gathered
log-probabilities must come back in sequence order. The softmax of each scored position is a table
of powers of two (logits ``ln p``, plus 4 at one position), so each log-probability is
``ln p[x]`` and its gradient ``c·(onehot(x) − p)``, and the unscored last position gets none.

The packed entropies on the same logits, under a loss mask with one zero (seven tokens): each
rank's loss term is twice (megatron's schedule scales a two-output loss by the context-parallel
size) its own tokens' ``Σ m·H`` over the count of both, ``H = −Σ p ln p`` a multiple of ``ln 2``;
the step (their mean, as DDP averages the ranks' gradients) is the token mean ``Σ m·H / 7`` and its
gradient ``−(m/7)·p·(ln p + H)``, each rank's nonzero only at its own positions.

The pool's own tests: one pair of ranks serves a session's calls and none is left after it (nor
after a check), a call without a session starts and stops its own, a rank that dies, hangs or
raises ends the call with its exit code, a timeout or its traceback, and two wrong variants (the
ranks' shares swapped, the gradient of one rank only) fail the entry's checks.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from typing import Any

import numpy as np
import pytest
import torch

from refimpl.frameworks import _skyrl_megatron_cp as cp
from refimpl.frameworks import adapter, check, install_stubs
from refimpl.losses.logprobs import token_entropy, token_logprobs, token_logprobs_grad
from refimpl.testing._specs_losses_entropy import token_entropy_vjp

install_stubs()
from skyrl.backends.skyrl_train.distributed.megatron import model_utils  # noqa: E402

P = np.array(
    [
        [[1 / 2, 1 / 4, 1 / 8, 1 / 8], [1 / 8, 1 / 8, 1 / 4, 1 / 2], [1 / 4] * 4, [1 / 2, 1 / 8, 1 / 4, 1 / 8]],
        [[1 / 8, 1 / 2, 1 / 8, 1 / 4], [1 / 4, 1 / 4, 1 / 2, 0], [1 / 2, 1 / 4, 1 / 8, 1 / 8], [1 / 4] * 4],
    ]
)  # fmt: skip
P[1, 1] = [1 / 4, 1 / 4, 1 / 4, 1 / 4]  # no zero probability: ln 0 is not a logit
SHIFT = np.zeros((2, 4, 1))
SHIFT[0, 1] = 4.0  # a constant per position changes nothing
# position 4 of each row is never scored: its logits are anything, its gradient must be 0
LOGITS = torch.tensor(
    np.concatenate([np.log(P) + SHIFT, [[[1.0, -2.0, 0.5, 8.0]], [[0.0, 0.0, 0.0, 16.0]]]], axis=1)
)
SEQUENCES = torch.tensor([[3, 0, 3, 2, 1], [2, 1, 0, 0, 3]])  # scored tokens: SEQUENCES[:, 1:]
COTANGENT = torch.tensor([[1.0, -0.5, 2.0, 0.25], [-1.0, 4.0, 0.5, -2.0]], dtype=torch.float64)
TOL = 2**-19  # float32 inside (DistributedLogprob upcasts): ln p rounded at 2^-24, logsumexp near 4


def _expected() -> tuple[np.ndarray, np.ndarray]:
    tokens = SEQUENCES[:, 1:].numpy()
    value = np.log(np.take_along_axis(P, tokens[..., None], axis=-1))[..., 0]
    grad = np.zeros((2, 5, 4))
    grad[:, :4] = COTANGENT.numpy()[..., None] * (np.eye(4)[tokens] - P)
    return value, grad


FUNCTIONS: dict[str, tuple[Any, dict[str, Any]]] = {
    "logits": (model_utils.from_parallel_logits_to_logprobs_packed_sequences, {}),
    "fused_hidden": (  # the torch fused LM head, chunks of three positions
        model_utils.from_parallel_hidden_to_logprobs_packed_sequences,
        {"head": True, "chunk_size": 3},
    ),
}


@pytest.fixture(scope="module")
def ranks() -> dict[str, tuple[list[torch.Tensor], torch.Tensor]]:
    out = {}
    with cp.context_parallel_session():
        for name, (function, options) in FUNCTIONS.items():
            values, grads = cp.context_parallel_ranks(
                function, LOGITS, SEQUENCES, COTANGENT, **options
            )
            out[name] = values, sum(grads[1:], grads[0])
    return out


@pytest.fixture(params=["logits", "fused_hidden"])
def run(
    request: pytest.FixtureRequest, ranks: dict[str, tuple[list[torch.Tensor], torch.Tensor]]
) -> tuple[list[torch.Tensor], torch.Tensor]:
    return ranks[request.param]


def test_each_rank_gathers_the_log_probabilities_in_sequence_order(
    run: tuple[list[torch.Tensor], torch.Tensor],
) -> None:
    values, _ = run
    expected, _ = _expected()
    reference = token_logprobs(np.log(P) + SHIFT, SEQUENCES[:, 1:].numpy())
    assert np.asarray(reference) == pytest.approx(expected, abs=2**-40)
    assert len(values) == 2
    for value in values:  # both ranks hold the whole gathered result
        assert value.numpy() == pytest.approx(expected, abs=TOL)


def test_the_gradient_summed_over_the_ranks_is_each_logits_once(
    run: tuple[list[torch.Tensor], torch.Tensor],
) -> None:
    _, grad = run
    _, expected = _expected()
    assert grad.numpy() == pytest.approx(expected, abs=TOL)


MASK = torch.tensor([[1.0, 1.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]], dtype=torch.float64)
OWN = [[0, 1], [2, 3]]  # the scored positions each rank holds (position 4 is not scored)

ENTROPIES: dict[str, tuple[Any, dict[str, Any]]] = {
    "logits": (model_utils.vocab_parallel_entropy_packed_sequences, {}),
    "fused_hidden": (  # the torch fused LM head, chunks of three positions
        model_utils.from_parallel_hidden_to_entropy_packed_sequences,
        {"head": True, "chunk_size": 3},
    ),
}


def _entropies() -> np.ndarray:
    """``H = −Σ p ln p`` of each scored position, as a multiple of ``ln 2`` (``p`` is 2^-k)."""
    return np.asarray(-(P * np.log2(P)).sum(axis=-1) * np.log(2.0), dtype=np.float64)


@pytest.fixture(scope="module")
def entropy_ranks() -> dict[str, tuple[list[torch.Tensor], list[torch.Tensor]]]:
    with cp.context_parallel_session():
        return {
            name: cp.context_parallel_entropy_ranks(function, LOGITS, MASK, **options)
            for name, (function, options) in ENTROPIES.items()
        }


@pytest.fixture(params=["logits", "fused_hidden"])
def entropy_run(
    request: pytest.FixtureRequest,
    entropy_ranks: dict[str, tuple[list[torch.Tensor], list[torch.Tensor]]],
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    return entropy_ranks[request.param]


def test_each_ranks_entropy_term_is_twice_its_tokens_sum_over_the_count_of_both(
    entropy_run: tuple[list[torch.Tensor], list[torch.Tensor]],
) -> None:
    values, grads = entropy_run
    weighted = MASK.numpy() * _entropies()
    count = float(MASK.sum())
    assert len(values) == len(grads) == cp.CP
    for rank, (value, grad) in enumerate(zip(values, grads, strict=True)):
        assert float(value) == pytest.approx(2.0 * weighted[:, OWN[rank]].sum() / count, abs=TOL)
        others = [t for t in range(5) if t not in OWN[rank]]
        assert not grad[:, others].any(), f"rank {rank} has a gradient at positions it lacks"


def test_the_step_is_the_token_mean_entropy_and_its_gradient(
    entropy_run: tuple[list[torch.Tensor], list[torch.Tensor]],
) -> None:
    values, grads = entropy_run
    weights = MASK.numpy() / float(MASK.sum())
    z, m = np.log(P) + SHIFT, MASK.numpy()
    expected = (m * _entropies()).sum() / m.sum()
    assert (weights * token_entropy(z, mask=m)).sum() == pytest.approx(expected, abs=2**-40)
    want = np.zeros((2, 5, 4))
    want[:, :4] = -weights[..., None] * P * (np.log(P) + _entropies()[..., None])
    assert token_entropy_vjp(z, temperature=1.0, cotangent=weights, mask=m) == pytest.approx(
        want[:, :4], abs=2**-40
    )
    assert float(sum(values) / cp.CP) == pytest.approx(expected, abs=TOL)
    assert (sum(grads[1:], grads[0]) / cp.CP).numpy() == pytest.approx(want, abs=TOL)


def test_each_rank_holds_the_first_and_last_chunk_of_its_index() -> None:
    positions = torch.arange(10).reshape(2, 5, 1) + 1  # 0 marks padding
    shares = [cp._sharded(positions, rank)[0, :, 0].tolist() for rank in (0, 1)]
    assert shares == [[1, 2, 0, 0, 6, 7, 0, 0], [3, 4, 5, 0, 8, 9, 10, 0]]


def _children() -> list[int]:
    """The ranks this process started that are still alive (multiprocessing's own record: the
    fork server that forks them lives on between pools and is not a rank)."""
    return [p.pid for p in multiprocessing.active_children() if p.pid is not None]


def _call(**keywords: Any) -> tuple[torch.Tensor, torch.Tensor]:
    function = model_utils.from_parallel_logits_to_logprobs_packed_sequences
    return cp.context_parallel(function, LOGITS, SEQUENCES, COTANGENT, **keywords)


def test_a_session_serves_every_call_from_one_pair_of_ranks_and_leaves_none() -> None:
    assert _children() == []
    with cp.context_parallel_session():
        value, _ = _call()
        started = _children()
        with cp.context_parallel_session():  # re-entrant: the outer pool serves the inner block
            again, _ = _call()
        assert _children() == started
        assert len(started) == cp.CP
    assert _children() == []
    assert torch.equal(value, again)


def test_a_check_leaves_no_rank_alive() -> None:
    report = check("skyrl.megatron_logprobs_packed_cp", max_examples=5, checks=["values"])
    assert report.ok, report
    assert _children() == []


def test_a_call_without_a_session_starts_and_stops_its_own_ranks() -> None:
    value, grad = _call()
    expected_value, expected_grad = _expected()
    assert value.numpy() == pytest.approx(expected_value, abs=TOL)
    assert grad.numpy() == pytest.approx(expected_grad, abs=TOL)
    assert _children() == []


@pytest.mark.parametrize(
    "key", ["skyrl.megatron_logprobs_packed_cp", "skyrl.megatron_hidden_logprobs_packed_cp"]
)
def test_the_reproductions_candidate_runs_without_a_session(key: str) -> None:
    namespace: dict[str, Any] = {}
    exec(adapter(key).setup, namespace)  # the adapter's source, as a reproduction pastes it
    logits, tokens = LOGITS[:, :4], SEQUENCES[:, 1:]  # position t scores tokens[t] here
    value, grad = namespace["candidate"](
        logits, tokens, temperature=0.5, mask=torch.ones(2, 4), cotangent=COTANGENT
    )
    z, x = logits.numpy(), tokens.numpy()
    assert value.numpy() == pytest.approx(token_logprobs(z, x, temperature=0.5), abs=TOL)
    want = token_logprobs_grad(z, x, temperature=0.5, cotangent=COTANGENT.numpy())
    assert grad.numpy() == pytest.approx(want, abs=TOL)
    assert _children() == []


@pytest.mark.parametrize(
    ("key", "temperature"),
    [("skyrl.megatron_entropy_packed_cp", 1.0), ("skyrl.megatron_hidden_entropy_packed_cp", 0.5)],
)
def test_the_entropy_reproductions_candidate_runs_without_a_session(
    key: str, temperature: float
) -> None:
    namespace: dict[str, Any] = {}
    exec(adapter(key).setup, namespace)  # the adapter's source, as a reproduction pastes it
    keywords = {"temperature": temperature} if temperature != 1.0 else {}
    value, grad = namespace["candidate"](LOGITS[:, :4], mask=MASK, **keywords)
    z, m = LOGITS[:, :4].numpy(), MASK.numpy()
    weights = m / m.sum()
    expected = (weights * token_entropy(z, temperature=temperature, mask=m)).sum()
    assert float(value) == pytest.approx(expected, abs=TOL)
    want = token_entropy_vjp(z, temperature=temperature, cotangent=weights, mask=m)
    assert grad.numpy() == pytest.approx(want, abs=TOL)
    assert _children() == []


def test_the_ranks_start_after_megatron_ran_here_and_inside_its_group() -> None:
    from refimpl.frameworks._skyrl_losses_megatron import megatron_on_cpu

    # the ranks come from the fork server, not from this process: what megatron's state and gloo
    # hold here (a group, or what destroy_model_parallel leaves) never reaches them
    with megatron_on_cpu():
        value, _ = _call()
    assert value.numpy() == pytest.approx(_expected()[0], abs=TOL)
    value, _ = _call()
    assert value.numpy() == pytest.approx(_expected()[0], abs=TOL)
    assert _children() == []


def test_a_rank_that_dies_fails_the_call_with_its_exit_code() -> None:
    with cp.context_parallel_session():
        _call()
        (victim, _) = _children()
        os.kill(victim, signal.SIGKILL)
        with pytest.raises(RuntimeError, match=r"exit codes \[-9\]"):
            _call()
        value, _ = _call()  # the next call starts a new pair
        assert value.numpy() == pytest.approx(_expected()[0], abs=TOL)
    assert _children() == []


def test_a_rank_that_does_not_answer_fails_the_call_after_the_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import time

    monkeypatch.setattr(cp, "WAIT", 2.0)
    with cp.context_parallel_session():
        _call()
        (victim, _) = _children()
        os.kill(victim, signal.SIGSTOP)  # alive, and silent
        start = time.monotonic()
        with pytest.raises(TimeoutError, match="did not answer in 2 s"):
            _call()
        assert time.monotonic() - start < 30.0
    assert _children() == []


def test_a_rank_that_raises_fails_the_call_with_its_traceback() -> None:
    function = model_utils.from_parallel_logits_to_logprobs_packed_sequences
    with pytest.raises(RuntimeError, match=r"(?s)rank raised.*Traceback.*grad"):
        cp.context_parallel(function, LOGITS, SEQUENCES, COTANGENT[:, :2])  # a wrong cotangent
    assert _children() == []


def test_the_ranks_shares_swapped_fail_the_value_check(monkeypatch: pytest.MonkeyPatch) -> None:
    ranks = cp.context_parallel_ranks

    def swapped(*args: Any, **keywords: Any) -> tuple[list[Any], list[Any]]:
        # what each rank computing the other's share gives: rank r holds chunks r and 2·CP − 1 − r
        # of every padded row, so chunk 0 trades places with chunk 1 and chunk 2 with chunk 3
        # (a position whose partner is padding keeps its own value)
        values, grads = ranks(*args, **keywords)
        n = int(values[0].shape[1])
        width = -(-(n + 1) // cp.ALIGN) * cp.ALIGN
        chunks = torch.arange(width).reshape(cp.ALIGN, width // cp.ALIGN)
        partner = chunks[[1, 0, 3, 2]].reshape(-1)[:n]
        partner = torch.where(partner < n, partner, torch.arange(n))
        return [v[:, partner] for v in values], grads

    monkeypatch.setattr(cp, "context_parallel_ranks", swapped)
    report = check("skyrl.megatron_logprobs_packed_cp", max_examples=10, checks=["values"])
    assert report["values"].status == "failed", report


def test_the_gradient_of_one_rank_only_fails_the_gradient_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ranks = cp.context_parallel_ranks

    def one_rank(*args: Any, **keywords: Any) -> tuple[list[Any], list[Any]]:
        values, grads = ranks(*args, **keywords)
        return values, [grads[0], *(torch.zeros_like(g) for g in grads[1:])]

    monkeypatch.setattr(cp, "context_parallel_ranks", one_rank)
    report = check("skyrl.megatron_logprobs_packed_cp", max_examples=10, checks=["gradient"])
    assert report["gradient"].status == "failed", report


def test_one_ranks_entropy_term_only_fails_the_value_and_gradient_checks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ranks = cp.context_parallel_entropy_ranks

    def one_rank(*args: Any, **keywords: Any) -> tuple[list[Any], list[Any]]:
        values, grads = ranks(*args, **keywords)
        zeros = [torch.zeros_like(v) for v in values[1:]], [torch.zeros_like(g) for g in grads[1:]]
        return [values[0], *zeros[0]], [grads[0], *zeros[1]]

    monkeypatch.setattr(cp, "context_parallel_entropy_ranks", one_rank)
    checks = ["values", "gradient"]
    report = check("skyrl.megatron_entropy_packed_cp", max_examples=10, checks=checks)
    assert report["values"].status == "failed", report
    assert report["gradient"].status == "failed", report
