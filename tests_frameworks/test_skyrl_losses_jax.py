"""SkyRL's JAX backend losses (``skyrl/tinker/loss_fns.py``) through their adapters, by hand.

Inputs are powers of two and log-ratios 0 or ±4 (a ratio of 1, or one that every threshold clips),
so each loss and its gradient (``jax.grad`` through the real function) is exact in float32. The
matrix runs every check of the spec; these pin the calls: the thresholds ``1 − ε_low`` and
``1 + ε_high``, the argument order ``(target_logprobs, loss_mask, sampling_logprobs, advantages,
config)``, the detached CISPO weight and the zero at a masked token.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import pytest

from refimpl.frameworks import SOURCE_LOADS, adapters, load_function
from refimpl.frameworks._skyrl_losses_jax import (
    skyrl_jax_cispo,
    skyrl_jax_cross_entropy,
    skyrl_jax_importance_sampling,
    skyrl_jax_ppo,
)

F32 = jnp.float32
# one row: a token at ratio 1, a token at ratio e^4, a token at ratio e^-4, a masked token
LOGP = jnp.array([[-0.5, -0.5, -0.5, -0.5]], F32)
LOGP_OLD = jnp.array([[-0.5, -4.5, 3.5, -0.5]], F32)
MASK = jnp.array([[1.0, 1.0, 1.0, 0.0]], F32)


def _value_and_grad(loss: Any, *args: Any, **kwargs: Any) -> tuple[list[float], list[float]]:
    value = loss(LOGP, *args, **kwargs)
    grad = jax.grad(lambda logp: loss(logp, *args, **kwargs).sum())(LOGP)
    return value[0].tolist(), grad[0].tolist()


def test_the_four_losses_load_from_the_installed_file_with_jax() -> None:
    (entry,) = [e for e in SOURCE_LOADS if e.source == "skyrl.tinker.loss_fns"]
    for name in ("cross_entropy_loss", "importance_sampling_loss", "ppo_loss", "cispo_loss"):
        assert name in entry.names
        assert callable(load_function(f"skyrl.tinker.loss_fns:{name}"))
    assert jax.__version__ == "0.10.2"


def test_the_jax_adapters_are_the_four_losses_and_the_model_log_probabilities() -> None:
    jax_adapters = [a for a in adapters("skyrl") if a.xp == "jax.numpy"]
    assert sorted(a.key for a in jax_adapters) == [
        "skyrl.jax_cispo_loss",
        "skyrl.jax_cross_entropy_loss",
        "skyrl.jax_importance_sampling_loss",
        "skyrl.jax_ppo_loss",
        "skyrl.tx_logprobs",  # the JAX models' log-probabilities (test_skyrl_tx_logprobs.py)
        "skyrl.tx_logprobs_chunked",
    ]
    assert {a.dtype for a in jax_adapters} == {"float32"}


def test_ppo_clips_at_one_minus_and_one_plus_epsilon() -> None:
    a = jnp.array([[2.0, 2.0, -2.0, 2.0]], F32)
    value, grad = _value_and_grad(skyrl_jax_ppo, LOGP_OLD, a, eps_low=0.25, eps_high=0.5, mask=MASK)
    # ratio 1: −A; e^4, A > 0: clipped at 1.5, −1.5·2; e^−4, A < 0: clipped at 0.75, −0.75·(−2)
    assert value == [-2.0, -3.0, 1.5, 0.0]
    assert grad == [-2.0, 0.0, 0.0, 0.0]


def test_cispo_weighs_the_log_likelihood_by_the_detached_clipped_ratio() -> None:
    a = jnp.array([[2.0, 2.0, 2.0, 2.0]], F32)
    value, grad = _value_and_grad(
        skyrl_jax_cispo, LOGP_OLD, a, eps_high=0.25, eps_low=0.5, mask=MASK
    )
    # −w·A·logp with w = 1, 1.25, 0.5: the gradient is −w·A (the weight is detached)
    assert value == [1.0, 1.25, 0.5, 0.0]
    assert grad == [-2.0, -2.5, -1.0, 0.0]
    # without a lower clip the threshold is 0: the ratio e^−4 is kept
    value, _ = _value_and_grad(skyrl_jax_cispo, LOGP_OLD, a, eps_high=0.25, eps_low=None, mask=MASK)
    assert value[2] == pytest.approx(float(jnp.exp(F32(-4.0))), rel=2**-20)


def test_importance_sampling_is_minus_rho_a_without_a_cap() -> None:
    a = jnp.array([[2.0, 2.0, 2.0, 2.0]], F32)
    value, grad = _value_and_grad(skyrl_jax_importance_sampling, LOGP, a, cap=2.0, mask=MASK)
    assert value == [-2.0, -2.0, -2.0, 0.0]  # ratio 1 everywhere; the cap 2 changes nothing
    assert grad == [-2.0, -2.0, -2.0, 0.0]


def test_cross_entropy_is_the_masked_negative_log_likelihood() -> None:
    value, grad = _value_and_grad(skyrl_jax_cross_entropy, mask=MASK)
    assert value == [0.5, 0.5, 0.5, 0.0]
    assert grad == [-1.0, -1.0, -1.0, 0.0]
