"""Generate the golden V-trace values of vtrace_rlax.json with rlax itself (not with refimpl).

rlax and jax are not refimpl dependencies: run this in a throwaway environment, e.g.::

    python3 -m venv /tmp/rlaxenv
    /tmp/rlaxenv/bin/pip install rlax 'jax[cpu]'
    /tmp/rlaxenv/bin/python tests/data/vtrace_rlax/generate.py

It writes ``vtrace_rlax.json`` beside itself: the inputs of each case (drawn from a fixed seed), the
outputs of ``rlax.vtrace_td_error_and_advantage`` and of ``rlax.vtrace`` in float64 (``jax_enable_x64``),
and the versions of Python, jax, jaxlib, rlax and numpy that computed them. ``tests/test_vtrace_rlax.py``
compares refimpl against the file; rerun this only to regenerate it (and say why in the changelog).
"""

from __future__ import annotations

import json
import platform
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import rlax  # noqa: E402

SEED = 20261201
OUT = Path(__file__).with_name("vtrace_rlax.json")


def _case(rng: np.random.Generator, name: str, t: int, **kind: Any) -> dict[str, Any]:
    v_tm1 = rng.normal(0.0, 1.0, t)
    v_t = np.append(v_tm1[1:], rng.normal(0.0, 1.0))  # next-state values, bootstrap at the end
    if kind.get("independent_v_t"):  # e.g. a target network: V(x_{s+1}) is not v_tm1[s + 1]
        v_t = rng.normal(0.0, 1.0, t)
    r_t = rng.normal(0.0, 1.0, t)
    discount_t = np.full(t, 0.9) if kind.get("constant_discount") else rng.uniform(0.0, 1.0, t)
    if kind.get("boundaries"):
        discount_t[rng.random(t) < 0.3] = 0.0  # episode boundaries
    rho_tm1 = np.exp(rng.normal(0.0, 1.0, t))  # ratios on both sides of 1
    if kind.get("zero_ratio"):
        rho_tm1[rng.integers(t)] = 0.0
    if kind.get("on_policy"):
        rho_tm1 = np.ones(t)
    lambda_ = rng.uniform(0.0, 1.0, t) if kind.get("lambda_vector") else kind.get("lambda_", 1.0)
    clip_rho = kind.get("clip_rho_threshold", 1.0)
    clip_pg = kind.get("clip_pg_rho_threshold", 1.0)
    args = [jnp.asarray(a, dtype=jnp.float64) for a in (v_tm1, v_t, r_t, discount_t, rho_tm1)]
    lam = jnp.asarray(lambda_, dtype=jnp.float64)
    out = rlax.vtrace_td_error_and_advantage(
        *args, lambda_=lam, clip_rho_threshold=clip_rho, clip_pg_rho_threshold=clip_pg
    )
    errors_only = rlax.vtrace(*args, lambda_=lam, clip_rho_threshold=clip_rho)
    return {
        "name": name,
        "inputs": {
            "v_tm1": v_tm1.tolist(),
            "v_t": v_t.tolist(),
            "r_t": r_t.tolist(),
            "discount_t": discount_t.tolist(),
            "rho_tm1": rho_tm1.tolist(),
            "lambda_": lambda_.tolist() if isinstance(lambda_, np.ndarray) else lambda_,
            "clip_rho_threshold": clip_rho,
            "clip_pg_rho_threshold": clip_pg,
        },
        "vtrace_td_error_and_advantage": {
            "errors": np.asarray(out.errors).tolist(),
            "pg_advantage": np.asarray(out.pg_advantage).tolist(),
            "q_estimate": np.asarray(out.q_estimate).tolist(),
        },
        "vtrace": np.asarray(errors_only).tolist(),
    }


def main() -> None:
    rng = np.random.default_rng(SEED)
    cases = [
        _case(rng, "one-step", 1),
        _case(rng, "defaults-T4", 4),
        _case(rng, "defaults-T16", 16),
        _case(rng, "on-policy-lambda-returns", 8, on_policy=True, lambda_=0.7),
        _case(rng, "episode-boundaries", 12, boundaries=True),
        _case(rng, "zero-ratio", 6, zero_ratio=True),
        _case(rng, "lambda-scalar", 10, lambda_=0.5),
        _case(rng, "lambda-per-step", 10, lambda_vector=True),
        _case(rng, "clip-rho-2-pg-0.5", 9, clip_rho_threshold=2.0, clip_pg_rho_threshold=0.5),
        _case(rng, "clip-rho-0.3", 7, clip_rho_threshold=0.3, clip_pg_rho_threshold=3.0),
        _case(rng, "independent-next-values", 8, independent_v_t=True, lambda_=0.8),
        _case(rng, "constant-discount-T32", 32, constant_discount=True, lambda_=0.95),
        _case(
            rng,
            "all-options-T20",
            20,
            boundaries=True,
            zero_ratio=True,
            lambda_vector=True,
            clip_rho_threshold=1.5,
            clip_pg_rho_threshold=1.2,
        ),
    ]
    doc = {
        "about": "Golden V-trace values computed by rlax itself (float64), for tests/test_vtrace_rlax.py.",
        "generated_by": "tests/data/vtrace_rlax/generate.py",
        "seed": SEED,
        "versions": {
            "python": platform.python_version(),
            **{pkg: version(pkg) for pkg in ("rlax", "jax", "jaxlib", "numpy", "chex")},
        },
        "jax_enable_x64": True,
        "jax_backend": jax.default_backend(),
        "cases": cases,
    }
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {len(cases)} cases to {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
