"""The numba kernels mean the same thing as plain Python (``NUMBA_DISABLE_JIT=1``).

numba types a kernel's integers itself: a value read from an ``int16`` or ``int32`` column is
widened to 64 bits before ``+ 1`` or ``<< 34``. Run as plain Python, the same expression is a
numpy scalar of the column's width, which wraps or loses its high bits. Two such spots in the
agent kernel made it, run as Python, give other traces: every event's rollout id shifted out
(``ref << 34`` of an ``int32``), and a call count of ``MAX_TURNS - 1`` overflowing ``int16 + 1``.
(The plain kernel's event refs are 64-bit already.) The mutation tool's ``--no-jit`` mode, and
anyone who debugs a kernel with the JIT disabled, rely on the two being the same code.

The test runs one fixed set of configurations (every mode of the plain simulator, the vectorized
engine's compiled ordering on continuous and on tied times, and agent runs
with faults, admission, retries and a call count at the ``int16`` edge) through the compiled
engines in this process and through the same engines with the JIT disabled in a child process,
and compares a SHA-256 of every column, dtype and shape included, and every total.

Seen to fail (by hand) with each widening undone: without ``np.int64(ref) << 34`` on the
``faults`` and ``queue-abort`` runs, without ``np.int64(RI[_R_CALLS][r]) + 1`` on ``int16-edge``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]

# Executed here and, with NUMBA_DISABLE_JIT=1, in a child process: prints one JSON object that
# maps a configuration's name to the digest of its compiled run (or to the error it ended with).
_RUNS = r"""
import dataclasses, hashlib, json, math
import numpy as np
import scipy.stats as st
from refimpl.sim import SimConfig, simulate
from refimpl.sim.agent import AgentConfig, simulate_agent
from refimpl.sim.agent._config import MAX_TURNS

def digest(obj):
    h = hashlib.sha256()
    items = (
        [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)]
        if dataclasses.is_dataclass(obj)
        else [(part, getattr(obj, part)) for part in ("rollouts", "calls", "attempts", "shards")]
        + [("summary", obj.summary)]
    )
    for name, value in items:
        if name == "config":
            continue
        if hasattr(value, "_fields"):  # a NamedTuple of columns (agent traces) or the summary
            for sub in value._fields:
                items.append((f"{name}.{sub}", getattr(value, sub)))
            continue
        h.update(name.encode())
        if isinstance(value, np.ndarray):
            h.update(f"{value.dtype}{value.shape}".encode())
            h.update(np.ascontiguousarray(value).tobytes())
        else:
            h.update(repr(value).encode())
    return h.hexdigest()

lengths = st.lognorm(1.0, scale=math.e)
plain = {
    "async": dict(),
    "sync": dict(mode="sync"),
    "drop-eta1": dict(eta=1, over_bound="drop"),
    "first_k-carry": dict(mode="first_k", launch=11, leftovers="carry"),
    "first_k-drop": dict(mode="first_k", launch=10, leftovers="drop"),
    "keep_kv": dict(eta=1, partial="keep_kv", reprefill_token_time=0.1),
    "recompute": dict(eta=1, partial="recompute", reprefill_token_time=0.5),
    "restart": dict(eta=1, partial="restart"),
    "preemption": dict(preempt_rate=0.2, preempt_duration=2.0, persist_kv=False),
    "admission": dict(mode="admission", eta=1, trainer_time=0.7),
}
out = {}
for name, kw in plain.items():
    cfg = SimConfig(slots=6, batch=8, steps=12, lengths=lengths, seed=11, **kw)
    out[name] = digest(simulate(cfg, engine="compiled"))
# the vectorized engine's compiled ordering (engine "auto"): continuous times, and integer ones
# with chained ties (a length of 1e-300 adds nothing to a time)
ties = np.random.default_rng(3).integers(1, 4, size=(6, 40)).astype(float)
ties[np.random.default_rng(4).random(size=ties.shape) < 0.3] = 1e-300
# (made worth it whatever the size: a short run orders with numpy unless they are compiled here)
from refimpl.sim import _vector_compiled
rule = _vector_compiled.worth_compiling
_vector_compiled.worth_compiling = lambda config: True
try:
    for name, kw in {"vector-auto": dict(lengths=lengths, seed=11), "vector-ties": dict(lengths=ties)}.items():
        out[name] = digest(simulate(SimConfig(slots=6, batch=4, steps=20, **kw), engine="auto"))
finally:
    _vector_compiled.worth_compiling = rule
agent = {
    "faults": AgentConfig(
        slots=6, batch=4, steps=30, lengths=st.expon(scale=6.0), turns=st.poisson(2.0),
        tool_latency=st.expon(scale=1.5), shards=3, capacity=2, admission="redirect",
        refresh=2.0, cold_start=0.5, keepalive=3.0, crash_rate=0.08, timeout=6.0,
        recovery="reexecute", seed=9,
    ),
    "queue-abort": AgentConfig(
        slots=4, batch=4, steps=10, lengths=st.expon(scale=3.0), turns=1, tool_latency=1.0,
        capacity=1, crash_rate=0.3, max_attempts=2, on_failure="abort", eta=1, seed=5,
    ),
    "int16-edge": AgentConfig(
        slots=1, batch=1, steps=1, lengths=st.expon(), turns=st.bernoulli(1.0, loc=MAX_TURNS - 1),
    ),
}
for name, cfg in agent.items():
    try:
        out[name] = digest(simulate_agent(cfg, engine="compiled"))
    except (ValueError, RuntimeError) as err:
        out[name] = f"{type(err).__name__}: {err}"
from refimpl.sim import _aot
out["machine code"] = sorted(name for name, path in _aot.PATHS.items() if path != "jit")
print(json.dumps(out))
"""


def _digests_compiled() -> dict[str, Any]:
    """The digests of the compiled runs, in this process (its kernels, compiled once per suite)."""
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        exec(_RUNS, {})
    result: dict[str, Any] = json.loads(text.getvalue())
    return result


def _digests_as_python() -> dict[str, Any]:
    """The same runs in a child process with the JIT disabled (every kernel as plain Python)."""
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _RUNS],
        cwd=_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_the_kernels_run_as_plain_python_give_the_compiled_traces() -> None:
    compiled = _digests_compiled()
    as_python = _digests_as_python()
    # the child ran Python, not the ahead-of-time entries that this process may have built
    assert as_python.pop("machine code") == []
    compiled.pop("machine code")
    assert len(compiled) == 15
    assert len(set(compiled.values())) == 15  # every configuration ran to a trace of its own
    differ = sorted(name for name in compiled if compiled[name] != as_python[name])
    assert not differ, f"the kernels as plain Python give other traces for {differ}"
