"""Agentic rollouts with sandboxed tool calls: a discrete-event simulator.

An agentic rollout alternates **decode segments** with **tool calls** that run in containers of a
sharded **sandbox pool**. The tool side shapes rollout latency as much as length does, so in
continuous asynchronous dispatch (conventions §async-dispatch) "first completed" now means "lowest latency", not only
"shortest". This module simulates that queue (it does not build a cluster).

The model, following conventions §vocabulary and the plain simulator:

- ``N`` generation slots. A slot launches a rollout, which decodes ``turns + 1`` segments of equal
  token count (decode time ``tokens · token_time``) separated by ``turns`` tool calls. **A slot is
  occupied for the whole rollout, including while the rollout waits for its tools** (the KV cache and
  the conversation stay on the slot); when the rollout ends the slot relaunches at once.
- The trainer takes completed rollouts in completion order, ``B`` per step, trains instantly and
  publishes version ``j + 1`` after step ``j``. Tie rule: a rollout launched at the instant a version
  is published sees the **old** version (publication is processed after every other event of that
  instant). A rollout never changes version, so its staleness is ``j − v_launch``. With a bound
  ``eta``, a rollout whose staleness exceeds it when the trainer consumes it is dropped and does not
  fill the batch (conventions §async-dispatch).
- Each call has a service time drawn once from ``tool_latency`` (the same work on every attempt). An
  attempt is routed to a shard by a router that picks the least loaded shard (queued + busy) in its
  **view**; the view is refreshed every ``refresh = δ`` time units (``δ = 0``: a consistent, exact
  view; ``δ > 0``: a snapshot taken at ``0, δ, 2δ, …`` that counts what happened strictly before the
  refresh and is *not* updated by the router's own decisions).
- **Local admission**: a shard admits an attempt if one of its ``capacity`` containers is free; else,
  with ``admission='queue'``, the attempt waits in the shard's FIFO queue, and with
  ``admission='redirect'`` the shard sends it (instantly) to the least loaded shard it has not
  visited among those that the router's view shows with a free container, up to ``max_redirects``
  times; when the view shows none (or the budget is spent) it queues where it is. With a consistent
  view (``δ = 0``) the router's first choice is full only when every shard is, so ``redirect`` then
  behaves exactly as ``queue``; redirection repairs the errors of a stale view.
- A container starts in ``cold_start`` time units if it is new, crashed, killed or idle for longer than
  ``keepalive``; else in ``warm_start`` (a free shard hands out its most recently released container).
- **Faults**: while occupied, a container crashes at rate ``crash_rate`` (Poisson). A crashed or
  timed-out attempt (``timeout`` counts from the attempt's routing, queueing included) is retried
  after ``retry_delay`` up to ``max_attempts`` attempts in all; a retry first restores the
  trajectory's sandbox state: ``recovery='replay'`` fast-forwards the earlier tool results from the
  log (``replay_cost`` per earlier call), ``recovery='reexecute'`` re-runs the earlier calls (the sum
  of their service times). A call that exhausts its attempts is **reported failed**; the rollout then
  continues with the error as the tool result (``on_failure='continue'``) or is aborted and not
  trained (``on_failure='abort'``).
- The run stops launching once ``steps · B`` rollouts are trained, then drains: every rollout in flight
  finishes, so every call ends completed or failed (nothing is lost, and every pool is empty at both
  ends of the run, which makes Little's law an identity on the sample path).

Parts, each small enough to read at once: ``_config`` (:class:`AgentConfig` and the codes the
parts share); the reference engine in three layers, ``_pool`` (the sharded sandbox pool with its
router and local admission), ``_calls`` (the tool-call model: attempts, crashes, timeouts, retries
and recovery) and ``_engine`` (the slots, the rollouts and the trainer over one heap of events, and
:func:`simulate_agent`); ``_compiled`` (the same loop compiled with numba, ``engine='compiled'``,
bit for bit the reference); ``_results`` (the accounting: the traces and their summary) and
``_cli`` (the ``refimpl simulate --tool-turns`` options).

Use :class:`AgentConfig` to describe a run, :func:`simulate_agent` to run it and
:func:`agent_summary_dict` for a JSON-able summary; :func:`configure_agent_options`,
:func:`agent_config_from_args` and :func:`run_agent_cli` wire it into ``refimpl simulate``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from refimpl.sim import _lengthfiles

if TYPE_CHECKING:  # what the type checker and readers see; at run time __getattr__ loads them
    # _engine, _typed_pmf and the event codes: for the tests, which reach into the engine, and the CLI
    from refimpl.sim.agent import _engine as _engine
    from refimpl.sim.agent import _pool as _pool
    from refimpl.sim.agent._cli import (
        agent_config_from_args,
        configure_agent_options,
        run_agent_cli,
    )
    from refimpl.sim.agent._config import _PRIO_EVENT as _PRIO_EVENT
    from refimpl.sim.agent._config import _RETRY as _RETRY
    from refimpl.sim.agent._config import _SEG_END as _SEG_END
    from refimpl.sim.agent._config import (
        ADMISSION_POLICIES,
        ATTEMPT_OUTCOMES,
        CALL_STATUSES,
        FAILURE_ACTIONS,
        RECOVERY_MODES,
        ROLLOUT_STATUSES,
        AgentConfig,
    )
    from refimpl.sim.agent._engine import _Engine as _Engine
    from refimpl.sim.agent._engine import (
        simulate_agent,
    )
    from refimpl.sim.agent._results import (
        AgentResult,
        AgentSummary,
        AttemptTrace,
        CallTrace,
        RolloutTrace,
        ShardStats,
        agent_summary_dict,
    )

#: The part that holds each name. The package loads a part on first use: ``refimpl simulate``
#: builds its ``--tool-*`` options from ``_cli`` on every call, and a run without tool calls
#: then loads no agent engine, kernel or results code (about 0.01 s of CPU time).
_HOME: dict[str, str] = {
    "agent_config_from_args": "_cli",
    "configure_agent_options": "_cli",
    "run_agent_cli": "_cli",
    "_PRIO_EVENT": "_config",
    "_RETRY": "_config",
    "_SEG_END": "_config",
    "ADMISSION_POLICIES": "_config",
    "ATTEMPT_OUTCOMES": "_config",
    "CALL_STATUSES": "_config",
    "FAILURE_ACTIONS": "_config",
    "RECOVERY_MODES": "_config",
    "ROLLOUT_STATUSES": "_config",
    "AgentConfig": "_config",
    "_Engine": "_engine",
    "simulate_agent": "_engine",
    "AgentResult": "_results",
    "AgentSummary": "_results",
    "AttemptTrace": "_results",
    "CallTrace": "_results",
    "RolloutTrace": "_results",
    "ShardStats": "_results",
    "agent_summary_dict": "_results",
}


def __getattr__(name: str) -> Any:
    """Load the part that holds ``name`` (a part itself, such as ``_engine``, by its name)."""
    home = _HOME.get(name)
    if home is None:
        if not name.startswith("_") or name.startswith("__"):
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        try:
            part = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
        return part
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))


_typed_pmf = _lengthfiles.typed_pmf  # shown as typed by the CLI's messages

__all__ = [
    "ADMISSION_POLICIES",
    "ATTEMPT_OUTCOMES",
    "CALL_STATUSES",
    "FAILURE_ACTIONS",
    "RECOVERY_MODES",
    "ROLLOUT_STATUSES",
    "AgentConfig",
    "AgentResult",
    "AgentSummary",
    "AttemptTrace",
    "CallTrace",
    "RolloutTrace",
    "ShardStats",
    "agent_config_from_args",
    "agent_summary_dict",
    "configure_agent_options",
    "run_agent_cli",
    "simulate_agent",
]
