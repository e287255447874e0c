"""A framework adapter in jax (``Adapter.xp="jax.numpy"``), run in a fresh interpreter by
``tests/test_frameworks_xp.py``.

SkyRL's JAX backend computes its losses on jax arrays: its adapters declare ``xp="jax.numpy"``,
and :func:`refimpl.frameworks.check`, :func:`refimpl.frameworks.check_partition` and the matrix
(:func:`refimpl.frameworks._matrix.matrix_entry`) must hand them jax arrays, differentiate them
with jax and say so in the reproduction and the entry. The adapter here is a probe (no framework
is installed in the test environment): a correct per-token negative log-likelihood and a
token-mean micro-batch loss that record the array library they receive, and a planted wrong sign.
jax runs in its own interpreter for the reason ``tests/jax_cases.py`` gives; this module prints
one JSON object, which the test module reads.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import refimpl.frameworks as frameworks
from refimpl.frameworks import Adapter, Partition, check, check_partition
from refimpl.frameworks._matrix import matrix_entry

EXAMPLES = 3  # jax compiles every operation for each new shape: few, small draws
SEEN: list[str] = []


def jax_nll(logp: Any, *, mask: Any) -> Any:
    """The per-token negative log-likelihood in jax, padding 0."""
    import jax.numpy as jnp

    SEEN.append(type(logp).__module__.split(".")[0])
    return -jnp.where(mask != 0, logp, 0.0)


def jax_nll_wrong_sign(logp: Any, *, mask: Any) -> Any:
    """The planted bug: the log-likelihood itself, not its negative."""
    import jax.numpy as jnp

    return jnp.where(mask != 0, logp, 0.0)


def jax_token_mean(
    logp: Any, logp_old: Any, advantages: Any, mask: Any, *, global_tokens: Any, world_size: Any
) -> Any:
    """A micro-batch's −A·ρ summed over its valid tokens, over the step's tokens, times the ranks
    (verl's token-mean rule)."""
    import jax.numpy as jnp

    SEEN.append(type(logp).__module__.split(".")[0])
    loss = -advantages[:, None] * jnp.exp(logp - logp_old)
    return jnp.where(mask != 0, loss, 0.0).sum() / global_tokens * world_size


def probe(candidate: Any) -> Adapter:
    return Adapter(
        key="verl.jax_probe",
        framework="verl",
        function="math:floor",  # importable everywhere: check() imports the function first
        settings={},
        spec="nll",
        conventions={},
        candidate=candidate,
        dtype="float32",
        xp="jax.numpy",
        partition=Partition(candidate=jax_token_mean, mode="token_mean", rule="verl"),
    )


def libraries() -> list[str]:
    seen = sorted(set(SEEN))
    SEEN.clear()
    return seen


def run() -> dict[str, Any]:
    """Each path's outcome, as plain data for the test module."""
    out: dict[str, Any] = {}
    right, wrong = probe(jax_nll), probe(jax_nll_wrong_sign)
    frameworks.adapter = lambda key: wrong if key == "verl.jax_probe_wrong" else right
    report = check("verl.jax_probe", max_examples=EXAMPLES)
    out["check"] = {"failed": [r.name for r in report.failures], "seen": libraries()}
    bad = check("verl.jax_probe_wrong", max_examples=EXAMPLES, checks=["values"])
    out["wrong"] = {"status": bad["values"].status, "reproduction": bad["values"].reproduction}
    partition = check_partition("verl.jax_probe", max_examples=EXAMPLES)
    out["partition"] = {"ok": partition.ok, "summary": str(partition), "seen": libraries()}
    entry = matrix_entry(right, max_examples=EXAMPLES)
    out["entry"] = {
        "xp": entry.get("xp"),
        "verdict": entry["verdict"],
        "partition": entry["partition"]["verdict"],
        "seen": libraries(),
    }
    out["torch_imported"] = "torch" in sys.modules
    return out


if __name__ == "__main__":
    print(json.dumps(run()))
