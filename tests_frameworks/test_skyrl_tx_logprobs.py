"""SkyRL's JAX-model log-probabilities (``skyrl/tx/utils/logits_processor.py``) on fixed logits whose
softmax is a table of powers of two.

Each row's logits are ``ln p`` (plus 4 on one row, which the logsumexp must remove), so each
log-probability is ``ln p[x]`` and its gradient with respect to the logits is ``c·(onehot(x) − p)``
for the cotangent ``c`` of the position, each exact up to float32 rounding of ``ln p``. Two rows of
two positions are four positions: with chunks of three, the chunked path runs one full chunk and
one chunk of one position padded with two zeros, and the cotangents differ at every position, so
a position scored in the wrong chunk slot shows in the value and the gradient.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from refimpl.frameworks._skyrl_losses_tx import (
    identity_head_model,
    skyrl_tx_logprobs,
    skyrl_tx_logprobs_chunked,
)

# the softmax of each position (rows of powers of two summing to 1)
P = np.array(
    [
        [[1 / 2, 1 / 4, 1 / 8, 1 / 8], [1 / 8, 1 / 8, 1 / 4, 1 / 2]],
        [[1 / 4, 1 / 4, 1 / 4, 1 / 4], [1 / 2, 1 / 8, 1 / 4, 1 / 8]],
    ]
)
SHIFT = np.array([[[0.0], [4.0]], [[0.0], [0.0]]])  # a constant per position changes nothing
TOKENS = np.array([[0, 3], [2, 1]])
COTANGENT = np.array([[1.0, -0.5], [2.0, 0.25]])
MASK = jnp.array([[1.0, 0.0], [1.0, 1.0]], jnp.float32)  # never read: padding is scored too
TOL = 2**-19  # float32: ln p rounded at 2^-24 relative, the logsumexp near 4


def _run(candidate: Any) -> tuple[np.ndarray, np.ndarray]:
    logits = jnp.asarray(np.log(P) + SHIFT, jnp.float32)
    tokens = jnp.asarray(TOKENS)

    def call(z: Any) -> Any:
        return candidate(z, tokens, mask=MASK)  # no temperature: none on SkyRL's JAX path

    value, pullback = jax.vjp(call, logits)
    (grad,) = pullback(jnp.asarray(COTANGENT, jnp.float32))
    return np.asarray(value, np.float64), np.asarray(grad, np.float64)


def _expected() -> tuple[np.ndarray, np.ndarray]:
    onehot = np.eye(4)[TOKENS]
    value = np.log(np.take_along_axis(P, TOKENS[..., None], axis=-1))[..., 0]
    return value, COTANGENT[..., None] * (onehot - P)


@pytest.mark.parametrize("candidate", [skyrl_tx_logprobs, skyrl_tx_logprobs_chunked])
def test_the_log_probability_is_ln_p_and_its_gradient_onehot_minus_p(candidate: Any) -> None:
    value, grad = _run(candidate)
    expected_value, expected_grad = _expected()
    # the masked position (row 0, position 1) is scored like the others
    assert value == pytest.approx(expected_value, abs=TOL)
    assert grad == pytest.approx(expected_grad, abs=TOL)


def test_the_chunked_model_runs_chunks_of_three_under_checkpointing() -> None:
    config = identity_head_model(3).get_model_config()
    assert (config.loss_chunk_size, config.gradient_checkpointing) == (3, True)
    hidden = jnp.asarray(np.log(P), jnp.float32)
    assert identity_head_model(3).get_lm_head()(hidden, None) is hidden


def test_the_static_method_applies_no_temperature_of_its_own() -> None:
    from skyrl.tx.utils.logits_processor import LogitsProcessorMixin

    logits = jnp.asarray(2 * np.log(P), jnp.float32)  # ln p², renormalised by the logsumexp
    value = LogitsProcessorMixin.logits_to_logprobs(logits, jnp.asarray(TOKENS))
    squared = P**2 / (P**2).sum(-1, keepdims=True)
    expected = np.log(np.take_along_axis(squared, TOKENS[..., None], axis=-1))[..., 0]
    assert np.asarray(value, np.float64) == pytest.approx(expected, abs=TOL)
