"""The loss oracle against jax (``xp="jax.numpy"``, float32), run in a fresh interpreter by
``tests/test_conformance_losses.py``: a jax PPO-clip passes every check (its gradient from
``jax.vjp`` through the array bridge), a planted bug (the clip on the wrong side) fails.

A separate interpreter for the reason ``tests/jax_cases.py`` gives: jax's thread pool makes a later
``os.fork`` in the test process warn. jax is imported only when the cases run, so that collecting
this module (pytest's doctest collection) does not start it. Prints one JSON object on its last line.
"""

from __future__ import annotations

import importlib
import json
from typing import Any

from refimpl.testing import check_conformance

EXAMPLES = 4  # jax compiles every operation for each new shape: few draws
Array = Any  # jax.Array
jnp: Any = None  # jax.numpy, imported by run()


def ppo_clip(
    logp: Array,
    logp_old: Array,
    advantages: Array,
    *,
    eps_low: float,
    eps_high: float | None,
    dual_clip: float | None,
    mask: Array,
) -> Array:
    r = jnp.exp(jnp.clip(logp - logp_old, -20.0, 20.0))
    high = eps_low if eps_high is None else eps_high
    loss = jnp.maximum(-advantages * r, -advantages * jnp.clip(r, 1 - eps_low, 1 + high))
    if dual_clip is not None:
        loss = jnp.where(advantages < 0, jnp.minimum(loss, -advantages * dual_clip), loss)
    return jnp.where(mask > 0, loss, 0.0)


def ppo_clip_wrong_side(
    logp: Array,
    logp_old: Array,
    advantages: Array,
    *,
    eps_low: float,
    eps_high: float | None,
    dual_clip: float | None,
    mask: Array,
) -> Array:
    r = jnp.exp(jnp.clip(logp - logp_old, -20.0, 20.0))
    high = eps_low if eps_high is None else eps_high
    loss = jnp.minimum(-advantages * r, -advantages * jnp.clip(r, 1 - eps_low, 1 + high))
    return jnp.where(mask > 0, loss, 0.0)


def run() -> dict[str, Any]:
    global jnp
    jnp = importlib.import_module("jax.numpy")
    conventions = {"log_ratio_clamp": 20.0}
    report = check_conformance(
        ppo_clip,
        spec="ppo_clip",
        xp="jax.numpy",
        dtype="float32",
        conventions=conventions,
        max_examples=EXAMPLES,
    )
    planted = check_conformance(
        ppo_clip_wrong_side,
        spec="ppo_clip",
        xp="jax.numpy",
        dtype="float32",
        conventions=conventions,
        max_examples=EXAMPLES * 3,
        checks=["values"],
        shrink=False,
    )
    return {
        "failed": [r.name for r in report.failures],
        "summary": report.summary(),
        "array": report.array,
        "planted": planted["values"].status,
        "planted_summary": planted.summary(),
    }


if __name__ == "__main__":
    print(json.dumps(run()))
