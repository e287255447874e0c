"""SkyRL's Megatron packed log-probabilities with context parallelism, run on two gloo ranks.

``AllGatherPackedCPTensor`` is reached only with a context-parallel size above one, which the
one-rank session of the Megatron entries cannot give; two spawned processes take about 25 s of
wall, too slow for a Hypothesis check per example, so this fixed input pins the path (value and
gradient) against the reference. Two rows of five positions (four scored: position ``t`` scores
token ``t + 1``, the last position is dropped) are padded to eight, so each rank holds chunks of
two positions of each row (rank 0 positions 0–1 and 6–7, rank 1 positions 2–5), and the gathered
log-probabilities must come back in sequence order. The softmax of each scored position is a table
of powers of two (logits ``ln p``, plus 4 at one position), so each log-probability is
``ln p[x]`` and its gradient ``c·(onehot(x) − p)``, and the unscored last position gets none.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from refimpl.frameworks._skyrl_megatron_cp import _sharded, context_parallel_logprobs
from refimpl.losses.logprobs import token_logprobs

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


@pytest.fixture(scope="module")
def ranks() -> dict[str, tuple[list[torch.Tensor], torch.Tensor]]:
    return context_parallel_logprobs(LOGITS, SEQUENCES, COTANGENT)


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


def test_each_rank_holds_the_first_and_last_chunk_of_its_index() -> None:
    from refimpl.frameworks import install_stubs

    install_stubs()
    positions = torch.arange(10).reshape(2, 5, 1) + 1  # 0 marks padding
    shares = [_sharded(positions, rank)[0, :, 0].tolist() for rank in (0, 1)]
    assert shares == [[1, 2, 0, 0, 6, 7, 0, 0], [3, 4, 5, 0, 8, 9, 10, 0]]
