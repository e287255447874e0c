"""SkyRL's JAX sampler (``skyrl/tx/utils/generator.py``, ``GeneratorMixin._prefill_and_decode``)
reports the untempered, untruncated log-probability of the token it samples.

Each decode step samples from ``s.logits / temperature`` after ``apply_top_k_batch`` and
``apply_top_p_batch`` (``jax.random.categorical``), and records
``model.logits_to_logprobs(s.logits, next_token)``: the full softmax of the untempered logits.
The tinker API returns that value as the sequence's ``logprobs``, the value its losses
(``skyrl/tinker/loss_fns.py``) read as the sampler's ``sampling_logprobs``, ``log q(x)``.

The real, jitted ``_prefill_and_decode`` runs here on a stand-in model: a subclass of SkyRL's
``GeneratorMixin`` and ``LogitsProcessorMixin`` (its ``compute_logits`` and
``logits_to_logprobs``) whose LM head is the identity and whose forward pass returns the same
fixed logits ``ln p`` at every position (``p`` a table of powers of two), with SkyRL's own
``KVCache.update`` and no layers. Its module imports ``skyrl.tx.utils.models`` (optax, flax: not in
the framework environment) and ``skyrl.tinker.types`` (refused by pydantic on Python < 3.12) for
``generate`` alone; the test stands empty modules in for them while it imports the module, and
``_prefill_and_decode`` reads neither. Every reported value is compared with refimpl's
``token_logprobs`` of the token the sampler drew, in float64.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from refimpl.losses.logprobs import token_logprobs

P = np.array([[1 / 2, 1 / 4, 1 / 8, 1 / 8], [1 / 8, 1 / 8, 1 / 4, 1 / 2]])
Z = np.log(P)
STEPS = 32  # decode steps per row, each a draw from the same distribution
PROMPT = 3
TOL = 2**-19  # float32: ln p rounded at 2^-24 relative


def _generator_module() -> Any:
    """``skyrl.tx.utils.generator``, imported with empty stand-ins for the two modules it needs
    only for ``generate`` (removed again afterwards)."""
    names = ("skyrl.tx.utils.models", "skyrl.tinker.types")
    stand_ins = {n: types.ModuleType(n) for n in names if n not in sys.modules}
    sys.modules.update(stand_ins)
    try:
        import skyrl.tx.utils.generator as generator
    finally:
        for name in stand_ins:
            sys.modules.pop(name, None)
    return generator


def _stand_in_model() -> Any:
    """A generator model whose every position's logits are ``Z`` (identity LM head, no layers)."""
    from skyrl.tx.utils.logits_processor import LogitsProcessorMixin

    generator = _generator_module()
    hidden = jnp.asarray(Z, jnp.float32)

    def forward(self: Any, ids: Any, *, attention_mask: Any, positions: Any = None,
                kv_cache: Any = None, **_: Any) -> Any:  # fmt: skip
        if positions is None:  # prefill
            positions = jnp.broadcast_to(jnp.arange(ids.shape[1]), ids.shape)
        cache = generator.KVCache.update(kv_cache, [], [], positions, attention_mask)
        states = jnp.broadcast_to(hidden[:, None, :], (*ids.shape, hidden.shape[-1]))
        return types.SimpleNamespace(last_hidden_state=states, kv_cache=cache)

    methods = {
        "__call__": forward,
        "get_model_config": lambda self: None,
        "get_lm_head": lambda self: lambda states, adapter_indices: states,
        "get_decode_layers": lambda self: None,
    }
    cls = type("StandIn", (generator.GeneratorMixin, LogitsProcessorMixin), methods)
    jax.tree_util.register_static(cls)  # a jit argument without arrays, as nnx models are pytrees
    return cls()


MODEL = _stand_in_model()


def _sample(temperature: float, top_k: int, top_p: float) -> tuple[np.ndarray, np.ndarray]:
    """(sampled tokens, reported log-probabilities), each ``(2, STEPS)``, from the real
    ``_prefill_and_decode`` with SkyRL's static flags as ``generate`` derives them."""
    rows = Z.shape[0]
    tokens, logprobs, _, _ = MODEL._prefill_and_decode(
        MODEL,
        jnp.zeros((rows, PROMPT), jnp.int32),
        jnp.ones((rows, PROMPT), jnp.int32),
        PROMPT + STEPS,
        STEPS,
        None,
        jnp.full((rows,), temperature, jnp.float32),
        jax.vmap(jax.random.PRNGKey)(jnp.arange(rows)),
        jnp.full((rows, 1), -1, jnp.int32),  # no stop token
        jnp.full((rows,), top_k, jnp.int32),
        jnp.full((rows,), top_p, jnp.float32),
        max(top_k, 0),
        top_p < 1.0,
    )
    return np.asarray(tokens, np.int64), np.asarray(logprobs, np.float64)


def _reference(tokens: np.ndarray, **semantics: Any) -> np.ndarray:
    logits = np.repeat(Z[:, None, :], tokens.shape[1], axis=1)
    return np.asarray(token_logprobs(logits, tokens, **semantics))


@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_at_a_temperature_it_reports_the_untempered_log_probability(temperature: float) -> None:
    tokens, reported = _sample(temperature, 0, 1.0)
    untempered = _reference(tokens, temperature=1.0)
    sampled_from = _reference(tokens, temperature=temperature)
    assert reported == pytest.approx(untempered, abs=TOL)
    # log q(x) of the distribution it sampled from differs at every drawn token of these rows
    assert np.abs(reported - sampled_from).min() > 0.04  # ln(1/4) against ln q = −1.3425 at T = 2


@pytest.mark.parametrize(("top_k", "top_p"), [(1, 1.0), (0, 0.4)])
def test_with_one_token_kept_it_reports_log_p_not_zero(top_k: int, top_p: float) -> None:
    # top_k = 1, or top_p = 0.4 on rows whose top probability is 1/2: only the top token is kept,
    # sampled with probability 1 (log q = 0); the sampler reports ln 1/2
    tokens, reported = _sample(1.0, top_k, top_p)
    assert (tokens == np.argmax(P, axis=-1)[:, None]).all()
    assert _reference(tokens, temperature=1.0, top_k=top_k or None, top_p=top_p) == pytest.approx(
        np.zeros(tokens.shape), abs=1e-15
    )
    assert reported == pytest.approx(np.full(tokens.shape, np.log(0.5)), abs=TOL)


def test_at_temperature_one_without_truncation_it_reports_log_q() -> None:
    tokens, reported = _sample(1.0, -1, 1.0)  # SkyRL's defaults: top_k=-1, top_p=1.0
    assert reported == pytest.approx(_reference(tokens, temperature=1.0), abs=TOL)
