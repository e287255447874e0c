"""Agentic rollouts with sandboxed tool calls: a discrete-event simulator (issue 9).

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

Use :class:`AgentConfig` to describe a run, :func:`simulate_agent` to run it and
:func:`agent_summary_dict` for a JSON-able summary; :func:`configure_agent_options`,
:func:`agent_config_from_args` and :func:`run_agent_cli` wire it into ``refimpl simulate``.
"""

from __future__ import annotations

import argparse
import heapq
import math
import numbers
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from refimpl._validation import as_float_array, as_int, as_pmf, as_real, invalid, wrong_type
from refimpl.errors import InvalidArgument
from refimpl.sim._cliopts import default, given, plain
from refimpl.sim._config import MAX_LAUNCHED_ROLLOUTS, check_lognormal
from refimpl.sim._lengthfiles import load_lengths_npy, parse_pmf, typed_pmf
from refimpl.staleness import sample_staleness

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

ADMISSION_POLICIES: tuple[str, ...] = ("queue", "redirect")
RECOVERY_MODES: tuple[str, ...] = ("replay", "reexecute")
FAILURE_ACTIONS: tuple[str, ...] = ("continue", "abort")
#: Status codes of :attr:`RolloutTrace.status` (index = code), the plain simulator's codes. An agent
#: run has no staleness bound and drains, so only ``trained``, ``aborted`` (a failed call with
#: ``on_failure='abort'``) and ``pending`` (finished, never consumed: after the last step) occur.
ROLLOUT_STATUSES: tuple[str, ...] = ("trained", "dropped", "aborted", "unfinished", "pending")
#: Status codes of :attr:`CallTrace.status` (index = code; -1 would mean "lost": never produced).
CALL_STATUSES: tuple[str, ...] = ("completed", "failed")
#: Outcome codes of :attr:`AttemptTrace.outcome` (index = code).
ATTEMPT_OUTCOMES: tuple[str, ...] = ("completed", "crashed", "timed_out")

_TRAINED, _DROPPED, _ABORTED, _UNTRAINED = 0, 1, 2, 4
_COMPLETED, _FAILED = 0, 1
_CRASHED, _TIMED_OUT = 1, 2
_PENDING = -1

# Event kinds and priorities at equal times (router refresh first, publication last: tie rule).
_SEG_END, _DONE, _CRASH, _TIMEOUT, _RETRY, _REFRESH, _PUBLISH = range(7)
_PRIO_REFRESH, _PRIO_EVENT, _PRIO_PUBLISH = 0, 1, 2
# Attempt states.
_A_QUEUED, _A_SERVICE, _A_ENDED = 1, 2, 3


# ---------------------------------------------------------------------------------------------
# configuration
# ---------------------------------------------------------------------------------------------


def _is_frozen_law(obj: Any) -> bool:
    return all(callable(getattr(obj, a, None)) for a in ("rvs", "cdf", "ppf", "mean", "support"))


def _is_discrete(law: Any) -> bool:
    return callable(getattr(law, "pmf", None)) and not callable(getattr(law, "pdf", None))


def _as_law(value: Any, *, name: str, meaning: str, integer: bool = False) -> Any:
    """A constant ``>= 0`` (float, or int when ``integer``) or a frozen scipy.stats law on [0, inf)."""
    if _is_frozen_law(value):
        low = float(value.support()[0])
        if not low >= 0.0:
            raise invalid(
                name,
                f"be supported on [0, inf) ({meaning})",
                value,
                f"Its support starts at {low}; pass a law of non-negative values "
                "(e.g. scipy.stats.expon(scale=2.0)).",
            )
        if integer and not _is_discrete(value):
            raise wrong_type(
                name,
                "an int or a frozen discrete scipy.stats law",
                value,
                f"Pass {name} as an int >= 0 or e.g. scipy.stats.poisson(2.0).",
            )
        return value
    if integer:
        return as_int(value, name=name, minimum=0, meaning=meaning)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise wrong_type(
            name,
            "a number >= 0 or a frozen scipy.stats law",
            value,
            f"Pass {name} as a float or e.g. scipy.stats.expon(scale=2.0).",
        )
    return as_real(value, name=name, low=0.0, meaning=meaning)


def _choice(value: Any, *, name: str, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str):
        raise wrong_type(name, f"one of {allowed}", value, f"Pass {name} as a string.")
    if value not in allowed:
        raise invalid(
            name, f"be one of {', '.join(map(repr, allowed))}", value, f"Pick one of {allowed}."
        )
    return value


@dataclass(frozen=True, eq=False, slots=True)
class AgentConfig:
    """One run of the agentic rollout queue, validated on construction.

    Parameters
    ----------
    slots : int
        ``N >= 1`` generation slots (each holds one rollout for its whole life, tool waits included).
    batch : int
        ``B >= 1`` rollouts per trainer step.
    steps : int
        ``>= 1`` trainer steps to run; launches stop when ``steps · B`` rollouts are trained, then the
        rollouts in flight drain.
    lengths : frozen scipy.stats law or 2-D array
        Decoded tokens per rollout (all segments together). A law is drawn at each launch; an
        ``N × K`` array gives slot ``i``'s lengths in launch order (row ``i``), as the SimPy peer and
        ``refimpl simulate --lengths-npy`` do. Lengths must be > 0.
    turns : int or frozen discrete scipy.stats law
        Tool calls per rollout (``>= 0``); the rollout decodes ``turns + 1`` segments of
        ``length / (turns + 1)`` tokens each.
    token_time : float
        Decode time of one token, ``> 0``.
    tool_latency : float or frozen scipy.stats law
        Service time of one call in its container (``>= 0``), drawn once per call.
    shards : int
        Shards of the sandbox pool, ``>= 1``.
    capacity : int or None
        Containers per shard (``>= 1``); ``None`` = unlimited (no call ever queues).
    admission : {'queue', 'redirect'}
        What a shard with no free container does with an arriving attempt.
    max_redirects : int
        Redirects per attempt (``>= 0``; ``admission='redirect'`` only). ``None`` (default):
        ``shards − 1``, i.e. every other shard may be tried once.
    refresh : float
        ``δ >= 0``: the router's view of shard load is refreshed every ``δ`` (``0`` = consistent).
    cold_start, warm_start : float
        Container start times (``>= 0``) for a cold (new, crashed, killed, expired) and a warm
        (reused) container.
    keepalive : float
        A released container stays warm for this long (``> 0``; ``inf`` = forever).
    crash_rate : float
        Crashes per time unit of container occupancy (``>= 0``).
    timeout : float or None
        Per-attempt timeout (``> 0``), counted from routing (queueing included); ``None`` = none.
    max_attempts : int
        Attempts per call in all (``>= 1``); then the call is reported failed.
    retry_delay : float
        Back-off before a retry (``>= 0``).
    recovery : {'replay', 'reexecute'}
        How a retry restores the trajectory's sandbox state (see the module notes).
    replay_cost : float
        Time to fast-forward one earlier tool result from the log (``>= 0``).
    on_failure : {'continue', 'abort'}
        What a rollout does when one of its calls fails.
    eta : int or None
        Staleness bound ``η >= 0``: a rollout whose staleness ``j − v`` exceeds it when the trainer
        consumes it (at step ``j``) is **dropped** and does not fill the batch (conventions §async-dispatch, the
        ``over_bound='drop'`` of the plain simulator). ``None`` (default): no bound.
    seed : int
        Seed of every random draw (``>= 0``).

    Raises
    ------
    ValueError, TypeError
        For a field out of its domain, before anything runs; the message says what to change.

    Examples
    --------
    >>> import scipy.stats as st
    >>> cfg = AgentConfig(slots=4, batch=4, steps=3, lengths=st.expon(scale=10.0), turns=2)
    >>> cfg.capacity is None, cfg.admission, cfg.turns
    (True, 'queue', 2)
    >>> AgentConfig(slots=4, batch=4, steps=3, lengths=st.expon(scale=10.0), refresh=-1.0)
    Traceback (most recent call last):
    ...
    refimpl.errors.InvalidArgument: refresh must be >= 0 (router view refresh period δ; 0 = consistent view); got refresh=-1.0. Pass refresh >= 0.
    """

    slots: int
    batch: int
    steps: int
    lengths: Any
    turns: Any = 0
    token_time: float = 1.0
    tool_latency: Any = 0.0
    shards: int = 1
    capacity: int | None = None
    admission: str = "queue"
    max_redirects: int | None = None
    refresh: float = 0.0
    cold_start: float = 0.0
    warm_start: float = 0.0
    keepalive: float = math.inf
    crash_rate: float = 0.0
    timeout: float | None = None
    max_attempts: int = 3
    retry_delay: float = 0.0
    recovery: str = "replay"
    replay_cost: float = 0.0
    on_failure: str = "continue"
    eta: int | None = None
    seed: int = 0

    def _check_run_size(self) -> None:
        """At most ``MAX_LAUNCHED_ROLLOUTS`` (``refimpl.sim._config``) expected rows: one per trained
        rollout and one per tool call (``steps × batch × (1 + E[turns])``), each an event too."""
        turns = self.turns
        mean_turns = float(turns.mean()) if _is_frozen_law(turns) else float(turns)
        rows = self.steps * self.batch * (1.0 + mean_turns)
        if not rows <= MAX_LAUNCHED_ROLLOUTS:
            raise invalid(
                "turns",
                f"keep the run to at most {MAX_LAUNCHED_ROLLOUTS:.0e} rollouts and tool calls "
                "(a trace row and events each)",
                turns,
                f"{self.steps} steps of batch {self.batch} with {mean_turns:.4g} calls a rollout "
                f"make about {rows:.3g}; pass fewer turns, or fewer steps or a smaller batch.",
            )

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "slots", as_int(self.slots, name="slots", minimum=1, meaning="generation slots"))
        put(self, "batch", as_int(self.batch, name="batch", minimum=1, meaning="rollouts per step"))
        put(self, "steps", as_int(self.steps, name="steps", minimum=1, meaning="trainer steps"))
        if _is_frozen_law(self.lengths):
            law = _as_law(self.lengths, name="lengths", meaning="decoded tokens")
            if _is_discrete(law) and float(law.support()[0]) < 1.0:
                raise invalid(
                    "lengths",
                    "put no mass on 0 tokens (a discrete law must be supported on 1, 2, ...)",
                    law,
                    "Shift the law, e.g. scipy.stats.poisson(mu, loc=1), or use a continuous law.",
                )
            put(self, "lengths", law)
        elif self.lengths is None:
            raise invalid(
                "lengths",
                "be given (a frozen scipy.stats law or an N × K array of tokens per rollout)",
                None,
                "Pass e.g. lengths=scipy.stats.lognorm(s=1.0, scale=np.exp(6.0)).",
            )
        else:
            mat = as_float_array(self.lengths, name="lengths", ndim=2)
            if mat.shape[0] != self.slots:
                raise invalid(
                    "lengths",
                    f"have one row per slot (slots={self.slots})",
                    mat,
                    f"Pass an array of shape ({self.slots}, K); got shape {mat.shape}.",
                )
            if np.any(mat <= 0):
                raise invalid("lengths", "be > 0 (tokens)", mat, "Pass positive lengths.")
            need = -(-self.steps * self.batch // self.slots)
            if mat.shape[1] < need:
                raise invalid(
                    "lengths",
                    f"have at least ceil(steps·batch/slots) = {need} columns",
                    mat,
                    f"Pass more lengths per slot (got {mat.shape[1]} columns), or fewer steps.",
                )
            mat = mat.copy()
            mat.flags.writeable = False
            put(self, "lengths", mat)
        put(self, "turns", _as_law(self.turns, name="turns", meaning="tool calls", integer=True))
        self._check_run_size()
        put(
            self,
            "token_time",
            as_real(
                self.token_time, name="token_time", low=0.0, low_open=True, meaning="time per token"
            ),
        )
        put(
            self,
            "tool_latency",
            _as_law(self.tool_latency, name="tool_latency", meaning="call service time"),
        )
        put(self, "shards", as_int(self.shards, name="shards", minimum=1, meaning="pool shards"))
        if self.capacity is not None:
            put(
                self,
                "capacity",
                as_int(self.capacity, name="capacity", minimum=1, meaning="containers per shard"),
            )
        put(
            self, "admission", _choice(self.admission, name="admission", allowed=ADMISSION_POLICIES)
        )
        if self.max_redirects is not None:
            put(
                self,
                "max_redirects",
                as_int(self.max_redirects, name="max_redirects", minimum=0, meaning="per attempt"),
            )
        for name, meaning in (
            ("refresh", "router view refresh period δ; 0 = consistent view"),
            ("cold_start", "start time of a cold container"),
            ("warm_start", "start time of a warm container"),
            ("crash_rate", "crashes per unit of container occupancy"),
            ("retry_delay", "back-off before a retry"),
            ("replay_cost", "time to fast-forward one logged tool result"),
        ):
            put(self, name, as_real(getattr(self, name), name=name, low=0.0, meaning=meaning))
        keep = self.keepalive
        if not (isinstance(keep, numbers.Real) and not isinstance(keep, bool) and keep == math.inf):
            keep = as_real(keep, name="keepalive", low=0.0, low_open=True, meaning="warm period")
        put(self, "keepalive", float(keep))
        if self.timeout is not None:
            put(
                self,
                "timeout",
                as_real(
                    self.timeout,
                    name="timeout",
                    low=0.0,
                    low_open=True,
                    meaning="per-attempt timeout; None = no timeout",
                ),
            )
        put(
            self,
            "max_attempts",
            as_int(self.max_attempts, name="max_attempts", minimum=1, meaning="attempts per call"),
        )
        put(self, "recovery", _choice(self.recovery, name="recovery", allowed=RECOVERY_MODES))
        put(
            self, "on_failure", _choice(self.on_failure, name="on_failure", allowed=FAILURE_ACTIONS)
        )
        if self.eta is not None:
            put(self, "eta", as_int(self.eta, name="eta", minimum=0, meaning="staleness bound"))
        put(self, "seed", as_int(self.seed, name="seed", minimum=0, meaning="random seed"))


# ---------------------------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------------------------


class RolloutTrace(NamedTuple):
    """Per-rollout columns, in launch order (index = rollout id)."""

    slot: NDArray[np.int64]
    """Generation slot that ran the rollout."""
    launch_index: NDArray[np.int64]
    """k: the rollout is slot ``slot``'s k-th launch (column ``k`` of an ``N × K`` length matrix)."""
    launch_time: NDArray[np.float64]
    """When the slot launched it."""
    finish_time: NDArray[np.float64]
    """When it finished (or was aborted); every rollout finishes, the run drains."""
    length: NDArray[np.float64]
    """Decoded tokens (all segments)."""
    calls: NDArray[np.int64]
    """Tool calls it planned (``turns`` drawn at launch)."""
    version: NDArray[np.int64]
    """Policy version at launch (tie rule: a launch at a publication sees the old one)."""
    trained_step: NDArray[np.int64]
    """Trainer step that consumed the rollout (trained, or dropped over ``eta``), else ``-1``."""
    staleness: NDArray[np.int64]
    """``trained_step − version`` (``refimpl.sample_staleness``), ``-1`` if never consumed."""
    completion_rank: NDArray[np.int64]
    """Completion rank (0-based, over every finished rollout; without ``eta`` a trained rollout's
    rank is its position in training order), ``-1`` for an aborted rollout."""
    status: NDArray[np.int64]
    """Index into :data:`ROLLOUT_STATUSES`."""
    tool_time: NDArray[np.float64]
    """Time from issuing its calls to their results (waiting and execution)."""
    tool_exec_time: NDArray[np.float64]
    """Part of ``tool_time`` spent in a container (start, recovery, service, crashed work)."""


class CallTrace(NamedTuple):
    """Per-call columns, in issue order (index = call id)."""

    rollout: NDArray[np.int64]
    """Rollout id that issued the call."""
    turn: NDArray[np.int64]
    """0 for the rollout's first call, 1 for its second, ..."""
    issue_time: NDArray[np.float64]
    """When the call was issued (its decode segment ended)."""
    end_time: NDArray[np.float64]
    """When it completed or was reported failed."""
    service: NDArray[np.float64]
    """Its service time, drawn once (the same work on every attempt)."""
    attempts: NDArray[np.int64]
    """Attempts it took (``<= max_attempts``)."""
    status: NDArray[np.int64]
    """Index into :data:`CALL_STATUSES`."""
    exec_time: NDArray[np.float64]
    """Time its attempts spent inside containers."""


class AttemptTrace(NamedTuple):
    """Per-attempt columns, in routing order (index = attempt id)."""

    call: NDArray[np.int64]
    """Call id of the attempt."""
    number: NDArray[np.int64]
    """1 for a call's first attempt, 2 for its first retry, ..."""
    shard: NDArray[np.int64]
    """The shard where the attempt ended (after its redirects)."""
    redirects: NDArray[np.int64]
    """Times local admission forwarded it to another shard."""
    route_time: NDArray[np.float64]
    """When the router sent it."""
    arrive_time: NDArray[np.float64]
    """Arrival at ``shard`` (equals ``route_time``: routing and redirects are instantaneous)."""
    admit_time: NDArray[np.float64]
    """Admission into a container, NaN if never admitted (timed out in the queue)."""
    depart_time: NDArray[np.float64]
    """When it left its shard (completed, crashed or timed out)."""
    outcome: NDArray[np.int64]
    """Index into :data:`ATTEMPT_OUTCOMES`."""
    cold: NDArray[np.bool_]
    """Whether its container started cold."""
    recovery_cost: NDArray[np.float64]
    """Time spent restoring the trajectory's sandbox state (retries only)."""


class ShardStats(NamedTuple):
    """Per-shard counters and sample-path integrals over ``[0, drain_time]`` (arrays of length S).

    Every arrival ends one way: ``arrivals = completed + crashed + timed_out + redirected``.
    ``area`` is ``∫ (queued + busy) dt`` accumulated by the simulator's own counters; Little's law on
    the sample path says ``area = Σ (depart − arrive)`` over the shard's attempts.
    """

    arrivals: NDArray[np.int64]
    """Attempts that arrived (redirect visits included)."""
    completed: NDArray[np.int64]
    """Attempts that completed here."""
    crashed: NDArray[np.int64]
    """Attempts whose container crashed here."""
    timed_out: NDArray[np.int64]
    """Attempts that timed out here."""
    redirected: NDArray[np.int64]
    """Arrivals forwarded to another shard."""
    queued: NDArray[np.int64]
    """Attempts that had to wait in the shard's queue."""
    cold_starts: NDArray[np.int64]
    """Cold container starts."""
    containers: NDArray[np.int64]
    """Containers ever started (at most ``capacity``)."""
    area: NDArray[np.float64]
    """``∫ (queued + busy) dt`` from the simulator's counters."""
    busy_area: NDArray[np.float64]
    """``∫ busy dt``: busy container-time."""
    utilisation: NDArray[np.float64]
    """``busy_area / (capacity · drain_time)``; NaN when capacity is unlimited."""


class AgentSummary(NamedTuple):
    """What a run says (frozen). Latencies over finished, non-aborted rollouts; times in time units."""

    steps: int
    """Trainer steps run."""
    end_time: float
    """Time of the last trainer step (the plain simulator's end time)."""
    drain_time: float
    """Time the last in-flight rollout finished (the pools are empty from then on)."""
    rollouts_per_time: float
    """Trained rollouts per simulated time unit (up to ``end_time``)."""
    rollouts_launched: int
    """Rollouts launched."""
    rollouts_trained: int
    """Rollouts trained (``steps · B``)."""
    rollouts_dropped: int
    """Rollouts dropped over the staleness bound ``eta`` at consumption."""
    rollouts_aborted: int
    """Rollouts aborted by a failed call (``on_failure='abort'``)."""
    latency_p50: float
    """Median rollout latency (launch to finish)."""
    latency_p99: float
    """99th percentile of rollout latency."""
    tool_share: float
    """Share of rollout latency spent in tool calls (waiting and executing)."""
    tool_wait_share: float
    """Share spent waiting for tools (queueing, retry back-off), outside containers."""
    tool_exec_share: float
    """Share spent inside containers (start, recovery, service, crashed work)."""
    calls_issued: int
    """Tool calls issued."""
    calls_completed: int
    """Calls that completed."""
    calls_failed: int
    """Calls reported failed (attempts exhausted)."""
    attempts: int
    """Attempts, retries included."""
    queued_attempts: int
    """Attempts that waited in a shard queue."""
    redirected_attempts: int
    """Attempts forwarded at least once."""
    crashes: int
    """Container crashes."""
    timeouts: int
    """Attempt timeouts."""
    cold_starts: int
    """Cold container starts."""
    queue_wait_mean: float
    """Mean time an attempt spends in a shard queue (0 for one admitted at once)."""
    utilisation: float
    """Pool-wide busy container-time over capacity · drain_time; NaN when unlimited."""
    staleness_mean: float
    """Mean staleness of the trained rollouts."""
    staleness_hist: tuple[int, ...]
    """Counts of trained rollouts by staleness 0, 1, 2, ..."""
    launched_length_mean: float
    """Mean length of every launched rollout."""
    trained_length_mean: float
    """Mean length of the trained rollouts."""
    length_ratio: float
    """``trained_length_mean / launched_length_mean`` (1 = no length bias; < 1 short-biased)."""
    length_bias: float
    """``length_ratio − 1``, the plain simulator's relative bias of the trained mean length."""
    length_ks: float
    """Kolmogorov distance ``sup_ℓ |F_trained(ℓ) − F_launched(ℓ)|`` of the empirical length laws."""


class AgentResult(NamedTuple):
    """Everything one run produced."""

    config: AgentConfig
    """The configuration that produced the run."""
    summary: AgentSummary
    """The :class:`AgentSummary`."""
    rollouts: RolloutTrace
    """Per-rollout columns (:class:`RolloutTrace`)."""
    calls: CallTrace
    """Per-call columns (:class:`CallTrace`)."""
    attempts: AttemptTrace
    """Per-attempt columns (:class:`AttemptTrace`)."""
    shards: ShardStats
    """Per-shard statistics (:class:`ShardStats`)."""

    def to_arrow(self) -> dict[str, Any]:
        """The four traces as ``pyarrow.Table`` objects, keyed ``rollouts``, ``calls``,
        ``attempts`` and ``shards`` (status codes also as names; the config in the metadata)."""
        import pyarrow as pa

        names = {
            ("rollouts", "status"): ROLLOUT_STATUSES,
            ("calls", "status"): CALL_STATUSES,
            ("attempts", "outcome"): ATTEMPT_OUTCOMES,
        }
        meta = {"refimpl.sim.agent.config": repr(self.config)}
        tables = {}
        for key in ("rollouts", "calls", "attempts", "shards"):
            part = getattr(self, key)
            data = {field: pa.array(getattr(part, field)) for field in part._fields}
            for (owner, column), labels in names.items():
                if owner == key:
                    codes = getattr(part, column)
                    data[f"{column}_name"] = pa.array([labels[int(c)] for c in codes])
            tables[key] = pa.table(data).replace_schema_metadata(meta)
        return tables

    def to_parquet(self, directory: Any) -> None:
        """Write :meth:`to_arrow` as ``rollouts.parquet``, ``calls.parquet``, ``attempts.parquet``
        and ``shards.parquet`` in ``directory`` (created if missing)."""
        from pathlib import Path

        import pyarrow.parquet as pq

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        for key, table in self.to_arrow().items():
            pq.write_table(table, str(out / f"{key}.parquet"))


# ---------------------------------------------------------------------------------------------
# the engine
# ---------------------------------------------------------------------------------------------


class _Stream:
    """Draws from a constant or a frozen law with its own generator, in buffered chunks."""

    __slots__ = ("buf", "const", "gen", "law", "pos")

    def __init__(self, law: Any, gen: np.random.Generator) -> None:
        self.law = law if _is_frozen_law(law) else None
        self.const = None if self.law is not None else law
        self.gen = gen
        self.buf: list[Any] = []
        self.pos = 0

    def draw(self) -> Any:
        if self.law is None:
            return self.const
        if self.pos == len(self.buf):
            self.buf = np.asarray(self.law.rvs(size=512, random_state=self.gen)).tolist()
            self.pos = 0
        value = self.buf[self.pos]
        self.pos += 1
        return value


def _least_loaded(loads: list[int], allowed: list[int]) -> int:
    """The router's choice: the allowed shard with the smallest load in its view (lowest index)."""
    best = allowed[0]
    best_load = loads[best]
    for s in allowed[1:]:
        if loads[s] < best_load:
            best, best_load = s, loads[s]
    return best


class _Engine:
    """The event loop and all state; columns are Python lists until the run ends."""

    __slots__ = (
        "a_admit",
        "a_arrive",
        "a_box",
        "a_call",
        "a_cold",
        "a_depart",
        "a_number",
        "a_outcome",
        "a_recovery",
        "a_redirects",
        "a_route",
        "a_shard",
        "a_state",
        "a_visited",
        "aborted",
        "c_attempts",
        "c_end",
        "c_exec",
        "c_index",
        "c_issue",
        "c_rollout",
        "c_service",
        "c_status",
        "cap",
        "cfg",
        "completed",
        "cont_alive",
        "cont_release",
        "crash_gen",
        "end_time",
        "heap",
        "last_t",
        "launching",
        "len_stream",
        "max_redirects",
        "progress",
        "r_calls",
        "r_done_service",
        "r_exec",
        "r_finish",
        "r_issued",
        "r_k",
        "r_launch",
        "r_len",
        "r_rank",
        "r_seg",
        "r_slot",
        "r_status",
        "r_step",
        "r_tool",
        "r_version",
        "s_area",
        "s_arrivals",
        "s_busy",
        "s_busy_area",
        "s_cold",
        "s_completed",
        "s_crashed",
        "s_free",
        "s_nq",
        "s_queue",
        "s_queued",
        "s_redirected",
        "s_timed_out",
        "seq",
        "service_stream",
        "slot_k",
        "target",
        "trained",
        "turns_stream",
        "version",
        "view",
    )

    def __init__(self, cfg: AgentConfig) -> None:
        self.cfg = cfg
        gens = np.random.default_rng(cfg.seed).spawn(4)
        self.len_stream = _Stream(cfg.lengths, gens[0]) if _is_frozen_law(cfg.lengths) else None
        self.turns_stream = _Stream(cfg.turns, gens[1])
        self.service_stream = _Stream(cfg.tool_latency, gens[2])
        self.crash_gen = gens[3]
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.version = 0
        self.completed = 0
        self.trained = 0
        self.aborted = 0
        self.progress: Callable[[int], None] | None = None
        self.target = cfg.steps * cfg.batch
        self.launching = True
        self.max_redirects: int = cfg.shards - 1 if cfg.max_redirects is None else cfg.max_redirects
        self.end_time = math.nan
        self.slot_k = [0] * cfg.slots
        self.r_slot: list[int] = []
        self.r_k: list[int] = []
        self.r_calls: list[int] = []
        self.r_issued: list[int] = []
        self.r_version: list[int] = []
        self.r_step: list[int] = []
        self.r_rank: list[int] = []
        self.r_status: list[int] = []
        self.c_rollout: list[int] = []
        self.c_index: list[int] = []
        self.c_attempts: list[int] = []
        self.c_status: list[int] = []
        self.a_call: list[int] = []
        self.a_number: list[int] = []
        self.a_redirects: list[int] = []
        self.a_shard: list[int] = []
        self.a_outcome: list[int] = []
        self.a_box: list[int] = []
        self.a_state: list[int] = []
        self.a_visited: list[int] = []
        self.r_launch: list[float] = []
        self.r_finish: list[float] = []
        self.r_len: list[float] = []
        self.r_seg: list[float] = []
        self.r_tool: list[float] = []
        self.r_exec: list[float] = []
        self.r_done_service: list[float] = []
        self.c_issue: list[float] = []
        self.c_end: list[float] = []
        self.c_service: list[float] = []
        self.c_exec: list[float] = []
        self.a_route: list[float] = []
        self.a_arrive: list[float] = []
        self.a_admit: list[float] = []
        self.a_depart: list[float] = []
        self.a_recovery: list[float] = []
        self.a_cold: list[bool] = []
        n = cfg.shards
        self.cap = math.inf if cfg.capacity is None else float(cfg.capacity)
        self.s_queue: list[deque[int]] = [deque() for _ in range(n)]
        self.s_free: list[list[int]] = [[] for _ in range(n)]
        self.s_nq: list[int] = [0] * n
        self.s_busy: list[int] = [0] * n
        self.s_arrivals: list[int] = [0] * n
        self.s_completed: list[int] = [0] * n
        self.s_crashed: list[int] = [0] * n
        self.s_timed_out: list[int] = [0] * n
        self.s_redirected: list[int] = [0] * n
        self.s_queued: list[int] = [0] * n
        self.s_cold: list[int] = [0] * n
        self.s_area = [0.0] * n
        self.s_busy_area = [0.0] * n
        self.last_t = [0.0] * n
        self.cont_alive: list[bool] = []
        self.cont_release: list[float] = []
        self.view = [0] * n

    # -- bookkeeping ---------------------------------------------------------------------------

    def push(self, t: float, prio: int, kind: int, ref: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, prio, self.seq, kind, ref))

    def touch(self, s: int, t: float) -> None:
        """Accumulate shard ``s``'s integrals up to ``t`` (before any change of its counters)."""
        dt = t - self.last_t[s]
        if dt:
            busy = self.s_busy[s]
            self.s_area[s] += (self.s_nq[s] + busy) * dt
            self.s_busy_area[s] += busy * dt
        self.last_t[s] = t

    def loads(self) -> list[int]:
        if self.cfg.refresh == 0.0:
            return [q + b for q, b in zip(self.s_nq, self.s_busy, strict=True)]
        return self.view

    # -- rollouts ------------------------------------------------------------------------------

    def launch(self, slot: int, t: float) -> None:
        cfg = self.cfg
        k = self.slot_k[slot]
        self.slot_k[slot] = k + 1
        if self.len_stream is None:
            mat = cfg.lengths
            if k >= mat.shape[1]:
                raise InvalidArgument(
                    f"lengths must have a column for every launch; slot {slot} needed launch {k + 1} "
                    f"but lengths has {mat.shape[1]} columns. Pass a longer N × K matrix (the "
                    "SimPy peer's margin, ceil(1.25·rollouts/slots) + 64 columns, is ample when "
                    "tool latency is small)."
                )
            length = float(mat[slot, k])
        else:
            length = float(self.len_stream.draw())
            if not length > 0.0:
                raise InvalidArgument(
                    f"lengths must draw positive token counts; got {length!r} at launch {k} of slot "
                    f"{slot}. Pass a law supported on (0, inf)."
                )
        turns = int(self.turns_stream.draw())
        if turns < 0:
            raise InvalidArgument(
                f"turns must draw counts >= 0; got {turns}. Pass a law on {{0, 1, ...}}."
            )
        r = len(self.r_slot)
        self.r_slot.append(slot)
        self.r_k.append(k)
        self.r_launch.append(t)
        self.r_finish.append(math.nan)
        self.r_len.append(length)
        self.r_calls.append(turns)
        self.r_issued.append(0)
        self.r_seg.append(length * cfg.token_time / (turns + 1))
        self.r_version.append(self.version)
        self.r_step.append(-1)
        self.r_rank.append(-1)
        self.r_status.append(_PENDING)
        self.r_tool.append(0.0)
        self.r_exec.append(0.0)
        self.r_done_service.append(0.0)
        self.push(t + self.r_seg[r], _PRIO_EVENT, _SEG_END, r)

    def segment_end(self, r: int, t: float) -> None:
        issued = self.r_issued[r]
        if issued < self.r_calls[r]:
            self.r_issued[r] = issued + 1
            c = len(self.c_rollout)
            self.c_rollout.append(r)
            self.c_index.append(issued)
            self.c_issue.append(t)
            self.c_end.append(math.nan)
            self.c_service.append(float(self.service_stream.draw()))
            self.c_attempts.append(0)
            self.c_status.append(_PENDING)
            self.c_exec.append(0.0)
            self.start_attempt(c, t)
        else:
            self.finish_rollout(r, t)

    def finish_rollout(self, r: int, t: float) -> None:
        self.r_finish[r] = t
        n = self.completed
        self.completed = n + 1
        self.r_rank[r] = n
        m = self.trained
        if m < self.target:
            step = m // self.cfg.batch
            self.r_step[r] = step
            eta = self.cfg.eta
            if eta is not None and step - self.r_version[r] > eta:
                self.r_status[r] = _DROPPED  # over the bound at consumption: does not fill a batch
            else:
                self.trained = m + 1
                self.r_status[r] = _TRAINED
                if (m + 1) % self.cfg.batch == 0:
                    self.batch_full(t)
                if m + 1 == self.target:
                    self.launching = False
                    self.end_time = t
        else:
            self.r_status[r] = _UNTRAINED
        if self.launching:
            self.launch(self.r_slot[r], t)

    def batch_full(self, t: float) -> None:
        """Publish the next version at the end of instant ``t`` (tie rule: launches at ``t`` see the
        old version)."""
        self.push(t, _PRIO_PUBLISH, _PUBLISH, 0)

    def call_ended(self, c: int, t: float, status: int) -> None:
        self.c_status[c] = status
        self.c_end[c] = t
        r = self.c_rollout[c]
        self.r_tool[r] += t - self.c_issue[c]
        self.r_exec[r] += self.c_exec[c]
        self.r_done_service[r] += self.c_service[c]
        if status == _FAILED and self.cfg.on_failure == "abort":
            self.r_finish[r] = t
            self.r_status[r] = _ABORTED
            self.aborted += 1
            if self.aborted > 1000 + 100 * self.target:
                raise InvalidArgument(
                    f"on_failure='abort' must leave some rollouts to train; {self.aborted} "
                    f"rollouts were aborted while only {self.trained} of {self.target} trained. "
                    "Calls fail far more often than they succeed: raise timeout or max_attempts, "
                    "lower crash_rate, or pass on_failure='continue'."
                )
            if self.launching:
                self.launch(self.r_slot[r], t)
            return
        self.push(t + self.r_seg[r], _PRIO_EVENT, _SEG_END, r)

    # -- attempts ------------------------------------------------------------------------------

    def start_attempt(self, c: int, t: float) -> None:
        cfg = self.cfg
        a = len(self.a_call)
        number = self.c_attempts[c] + 1
        self.c_attempts[c] = number
        self.a_call.append(c)
        self.a_number.append(number)
        self.a_route.append(t)
        self.a_redirects.append(0)
        self.a_shard.append(-1)
        self.a_arrive.append(math.nan)
        self.a_admit.append(math.nan)
        self.a_depart.append(math.nan)
        self.a_outcome.append(_PENDING)
        self.a_cold.append(False)
        self.a_box.append(-1)
        self.a_state.append(0)
        recovery = 0.0
        if number > 1:
            if cfg.recovery == "replay":
                recovery = cfg.replay_cost * self.c_index[c]
            else:
                recovery = self.r_done_service[self.c_rollout[c]]
        self.a_recovery.append(recovery)
        if cfg.timeout is not None:
            self.push(t + cfg.timeout, _PRIO_EVENT, _TIMEOUT, a)
        shards = list(range(cfg.shards))
        s = _least_loaded(self.loads(), shards) if cfg.shards > 1 else 0
        self.a_visited.append(1 << s)
        self.arrive(a, s, t)

    def arrive(self, a: int, s: int, t: float) -> None:
        cfg = self.cfg
        self.s_arrivals[s] += 1
        if self.s_busy[s] < self.cap:
            self.a_shard[a] = s
            self.a_arrive[a] = t
            self.admit(a, s, t)
            return
        if cfg.admission == "redirect" and self.a_redirects[a] < self.max_redirects:
            visited = self.a_visited[a]
            loads = self.loads()
            others = [
                x for x in range(cfg.shards) if not (visited >> x) & 1 and loads[x] < self.cap
            ]
            if others:
                self.s_redirected[s] += 1
                target = _least_loaded(loads, others)
                self.a_redirects[a] += 1
                self.a_visited[a] = visited | (1 << target)
                self.arrive(a, target, t)
                return
        self.touch(s, t)
        self.a_shard[a] = s
        self.a_arrive[a] = t
        self.a_state[a] = _A_QUEUED
        self.s_nq[s] += 1
        self.s_queued[s] += 1
        self.s_queue[s].append(a)

    def admit(self, a: int, s: int, t: float) -> None:
        cfg = self.cfg
        self.touch(s, t)
        free = self.s_free[s]
        if free:
            box = free.pop()
            cold = (not self.cont_alive[box]) or (t - self.cont_release[box] > cfg.keepalive)
        else:
            box = len(self.cont_alive)
            self.cont_alive.append(True)
            self.cont_release.append(t)
            cold = True
        self.cont_alive[box] = True
        self.s_busy[s] += 1
        self.a_state[a] = _A_SERVICE
        self.a_admit[a] = t
        self.a_cold[a] = cold
        if cold:
            self.s_cold[s] += 1
        c = self.a_call[a]
        occupancy = (cfg.cold_start if cold else cfg.warm_start) + self.a_recovery[a]
        occupancy += self.c_service[c]
        self.a_box[a] = box
        if cfg.crash_rate > 0.0:
            life = float(self.crash_gen.exponential(1.0 / cfg.crash_rate))
            if life < occupancy:
                self.push(t + life, _PRIO_EVENT, _CRASH, a)
                return
        self.push(t + occupancy, _PRIO_EVENT, _DONE, a)

    def release(self, a: int, s: int, t: float, alive: bool) -> None:
        """Free attempt ``a``'s container on shard ``s`` and admit the next queued attempt."""
        box = self.a_box[a]
        self.touch(s, t)
        self.s_busy[s] -= 1
        self.cont_alive[box] = alive
        self.cont_release[box] = t
        self.s_free[s].append(box)
        self.c_exec[self.a_call[a]] += t - self.a_admit[a]
        queue = self.s_queue[s]
        while queue:
            nxt = queue.popleft()
            if self.a_state[nxt] == _A_QUEUED:
                self.s_nq[s] -= 1
                self.admit(nxt, s, t)
                break

    def leave_queue(self, s: int, t: float) -> None:
        """An attempt timed out while queued at ``s`` (lazily removed from the deque)."""
        self.touch(s, t)
        self.s_nq[s] -= 1

    def end_attempt(self, a: int, t: float, outcome: int) -> None:
        s = self.a_shard[a]
        state = self.a_state[a]
        self.a_state[a] = _A_ENDED
        if state == _A_SERVICE:
            self.release(a, s, t, alive=outcome == _COMPLETED)
        else:
            self.leave_queue(s, t)
        self.a_outcome[a] = outcome
        self.a_depart[a] = t
        c = self.a_call[a]
        if outcome == _COMPLETED:
            self.s_completed[s] += 1
            self.call_ended(c, t, _COMPLETED)
        else:
            if outcome == _CRASHED:
                self.s_crashed[s] += 1
            else:
                self.s_timed_out[s] += 1
            self.retry_or_fail(c, t)

    def retry_or_fail(self, c: int, t: float) -> None:
        if self.c_attempts[c] < self.cfg.max_attempts:
            self.push(t + self.cfg.retry_delay, _PRIO_EVENT, _RETRY, c)
        else:
            self.call_ended(c, t, _FAILED)

    # -- loop ----------------------------------------------------------------------------------

    def run(self) -> float:
        cfg = self.cfg
        for slot in range(cfg.slots):
            self.launch(slot, 0.0)
        if cfg.refresh > 0.0 and cfg.shards > 1:
            self.push(cfg.refresh, _PRIO_REFRESH, _REFRESH, 1)
        heap = self.heap
        pop = heapq.heappop
        last = 0.0  # time of the last event that changed anything (stale events are skipped)
        while heap:
            t, _prio, _seq, kind, ref = pop(heap)
            if kind == _SEG_END:
                self.segment_end(ref, t)
            elif kind in (_DONE, _CRASH):
                if self.a_state[ref] != _A_SERVICE:
                    continue
                self.end_attempt(ref, t, _COMPLETED if kind == _DONE else _CRASHED)
            elif kind == _TIMEOUT:
                if self.a_state[ref] == _A_ENDED:
                    continue
                self.end_attempt(ref, t, _TIMED_OUT)
            elif kind == _RETRY:
                self.start_attempt(ref, t)
            elif kind == _PUBLISH:
                self.version += 1
                if self.progress is not None:
                    self.progress(self.version)
            else:  # _REFRESH: the snapshot at ref·δ; the next one while anything else is pending
                if heap:
                    self.view = [q + b for q, b in zip(self.s_nq, self.s_busy, strict=True)]
                    self.push((ref + 1) * cfg.refresh, _PRIO_REFRESH, _REFRESH, ref + 1)
                continue
            last = t
        if self.trained < self.target:
            raise RuntimeError(
                f"internal error: the run stalled after {self.trained} of {self.target} rollouts "
                "(a rollout never finished); please report it with the config."
            )
        for s in range(cfg.shards):
            self.touch(s, last)
        return last


def _i64(values: list[Any]) -> NDArray[np.int64]:
    out = np.asarray(values, dtype=np.int64)
    out.flags.writeable = False
    return out


def _f64(values: list[Any]) -> NDArray[np.float64]:
    out = np.asarray(values, dtype=np.float64)
    out.flags.writeable = False
    return out


def _ro(arr: NDArray[Any]) -> NDArray[Any]:
    arr.flags.writeable = False
    return arr


def simulate_agent(
    config: AgentConfig, *, progress: Callable[[int], None] | None = None
) -> AgentResult:
    r"""Simulate one run of the agentic rollout queue with sandboxed tool calls.

    Rollout ``i`` launched at version :math:`v_i` and trained at step :math:`j_i` (the
    :math:`\lfloor n/B \rfloor` of its completion rank :math:`n`) has staleness

    .. math::

        s_i = j_i - v_i, \qquad v_i = \#\{k : T_k < t^{\text{launch}}_i\},

    with :math:`T_k` the publication of version :math:`k+1` (conventions §tie-rule). Its latency is its
    decode time :math:`\ell_i\, t_{\text{token}}` plus the time its calls take, queueing, starts,
    recovery, crashes and back-off included; on every shard the sample path obeys Little's law

    .. math::

        \int_0^{T} N_s(t)\,dt \;=\; \sum_{a \in s} (d_a - a_a)
        \quad\Longleftrightarrow\quad \bar L_s = \lambda_s \bar W_s ,

    because the pools are empty at :math:`0` and at the drain time :math:`T`.

    Parameters
    ----------
    config : AgentConfig
        The run (validated when it was built).
    progress : callable, optional
        Called with the number of trainer steps done after each step (e.g. to advance a progress
        bar); it must not touch the simulation.

    Returns
    -------
    AgentResult
        ``summary`` (:class:`AgentSummary`), per-rollout, per-call and per-attempt columnar traces,
        and per-shard statistics (:class:`ShardStats`). Seeded runs reproduce exactly.

    Raises
    ------
    TypeError
        If ``config`` is not an :class:`AgentConfig`.
    ValueError
        If an ``N × K`` length matrix runs out of columns for a slot (the message says how many
        launches it needed).

    Notes
    -----
    Invariants (tests/test_sim_agent.py): with unlimited capacity, zero tool latency and no faults the
    run equals the plain queue (SimPy peer) sample for sample; ``calls_issued = calls_completed +
    calls_failed`` and every call has one final status; on every shard ``arrivals = completed +
    crashed + timed_out + redirected`` and Little's law holds on the sample path to float rounding;
    averaged over seeds a consistent router view (``refresh = 0``) queues no longer than a stale one;
    mean staleness is at most ``(N/B)·(steps − 1)/steps`` (every slot holds one rollout at each
    publication: Little's law on the slots, whatever the tools do).

    The staleness and length measures follow conventions §vocabulary, §dispatch: the trained length law is compared with the
    launched one through ``length_ratio`` (``E_q[L] / E_p[L]``).

    References
    ----------
    DeepSeek DSec sandbox service (sharded pools, local admission, relaxed global consistency);
    Little, "A proof for the queuing formula L = λW" (1961); conventions §vocabulary, §async-dispatch.

    Examples
    --------
    Two calls per rollout, 0.5 time units each, on one shard of 2 containers:

    >>> import scipy.stats as st
    >>> cfg = AgentConfig(slots=4, batch=4, steps=5, lengths=st.expon(scale=4.0), turns=2,
    ...                   tool_latency=0.5, capacity=2, seed=3)
    >>> res = simulate_agent(cfg)
    >>> s = res.summary
    >>> s.rollouts_trained, s.calls_issued == s.calls_completed + s.calls_failed
    (20, True)
    >>> bool(abs(res.shards.area[0] - (res.attempts.depart_time - res.attempts.arrive_time).sum()) < 1e-9)
    True
    """
    if not isinstance(config, AgentConfig):
        raise wrong_type(
            "config", "an AgentConfig", config, "Build one with refimpl.sim.agent.AgentConfig(...)."
        )
    eng = _Engine(config)
    eng.progress = progress
    drain = eng.run()
    # staleness from refimpl.staleness (conventions §staleness): s = j − min_t v_t, one launch version per rollout
    status = np.asarray(eng.r_status, dtype=np.int64)
    step = np.asarray(eng.r_step, dtype=np.int64)
    version = np.asarray(eng.r_version, dtype=np.int64)
    staleness = np.full(status.size, -1, dtype=np.int64)
    consumed = (status == _TRAINED) | (status == _DROPPED)
    staleness[consumed] = sample_staleness(step[consumed], version[consumed]).sample.astype(
        np.int64
    )
    rollouts = RolloutTrace(
        slot=_i64(eng.r_slot),
        launch_index=_i64(eng.r_k),
        launch_time=_f64(eng.r_launch),
        finish_time=_f64(eng.r_finish),
        length=_f64(eng.r_len),
        calls=_i64(eng.r_calls),
        version=_i64(eng.r_version),
        trained_step=_i64(eng.r_step),
        staleness=_ro(staleness),
        completion_rank=_i64(eng.r_rank),
        status=_i64(eng.r_status),
        tool_time=_f64(eng.r_tool),
        tool_exec_time=_f64(eng.r_exec),
    )
    calls = CallTrace(
        rollout=_i64(eng.c_rollout),
        turn=_i64(eng.c_index),
        issue_time=_f64(eng.c_issue),
        end_time=_f64(eng.c_end),
        service=_f64(eng.c_service),
        attempts=_i64(eng.c_attempts),
        status=_i64(eng.c_status),
        exec_time=_f64(eng.c_exec),
    )
    attempts = AttemptTrace(
        call=_i64(eng.a_call),
        number=_i64(eng.a_number),
        shard=_i64(eng.a_shard),
        redirects=_i64(eng.a_redirects),
        route_time=_f64(eng.a_route),
        arrive_time=_f64(eng.a_arrive),
        admit_time=_f64(eng.a_admit),
        depart_time=_f64(eng.a_depart),
        outcome=_i64(eng.a_outcome),
        cold=_ro(np.asarray(eng.a_cold, dtype=np.bool_)),
        recovery_cost=_f64(eng.a_recovery),
    )
    cap = config.capacity
    busy_area = _f64(eng.s_busy_area)
    if cap is None or drain <= 0.0:
        util = np.full(config.shards, np.nan)
    else:
        util = np.asarray(busy_area) / (cap * drain)
    shards = ShardStats(
        arrivals=_i64(eng.s_arrivals),
        completed=_i64(eng.s_completed),
        crashed=_i64(eng.s_crashed),
        timed_out=_i64(eng.s_timed_out),
        redirected=_i64(eng.s_redirected),
        queued=_i64(eng.s_queued),
        cold_starts=_i64(eng.s_cold),
        containers=_i64([len(f) for f in eng.s_free]),
        area=_f64(eng.s_area),
        busy_area=busy_area,
        utilisation=_ro(util),
    )
    summary = _summarize(config, eng, rollouts, calls, attempts, shards, drain)
    return AgentResult(config, summary, rollouts, calls, attempts, shards)


def _summarize(
    cfg: AgentConfig,
    eng: _Engine,
    r: RolloutTrace,
    c: CallTrace,
    a: AttemptTrace,
    sh: ShardStats,
    drain: float,
) -> AgentSummary:
    trained = r.status == _TRAINED
    finished = r.status != _ABORTED
    latency = (r.finish_time - r.launch_time)[finished]
    total = float(latency.sum())
    tool = float(r.tool_time[finished].sum())
    exec_ = float(r.tool_exec_time[finished].sum())
    p50, p99 = (float(x) for x in np.percentile(latency, [50, 99]))
    admitted = ~np.isnan(a.admit_time)
    waits = np.where(admitted, a.admit_time, a.depart_time) - a.arrive_time
    stale = r.staleness[trained]
    hist = tuple(int(x) for x in np.bincount(stale))
    launched_mean = float(r.length.mean())
    trained_mean = float(r.length[trained].mean())
    util = math.nan
    if cfg.capacity is not None and drain > 0.0:
        util = float(sh.busy_area.sum()) / (cfg.capacity * cfg.shards * drain)
    return AgentSummary(
        steps=cfg.steps,
        end_time=float(eng.end_time),
        drain_time=float(drain),
        rollouts_per_time=float(eng.target / eng.end_time),
        rollouts_launched=int(r.slot.size),
        rollouts_trained=int(trained.sum()),
        rollouts_dropped=int((r.status == _DROPPED).sum()),
        rollouts_aborted=int((r.status == _ABORTED).sum()),
        latency_p50=p50,
        latency_p99=p99,
        tool_share=tool / total if total > 0 else 0.0,
        tool_wait_share=(tool - exec_) / total if total > 0 else 0.0,
        tool_exec_share=exec_ / total if total > 0 else 0.0,
        calls_issued=int(c.rollout.size),
        calls_completed=int((c.status == _COMPLETED).sum()),
        calls_failed=int((c.status == _FAILED).sum()),
        attempts=int(a.call.size),
        queued_attempts=int(sh.queued.sum()),
        redirected_attempts=int((a.redirects > 0).sum()),
        crashes=int(sh.crashed.sum()),
        timeouts=int(sh.timed_out.sum()),
        cold_starts=int(sh.cold_starts.sum()),
        queue_wait_mean=float(waits.mean()) if waits.size else 0.0,
        utilisation=util,
        staleness_mean=float(stale.mean()),
        staleness_hist=hist,
        launched_length_mean=launched_mean,
        trained_length_mean=trained_mean,
        length_ratio=trained_mean / launched_mean,
        length_bias=trained_mean / launched_mean - 1.0,
        length_ks=_kolmogorov_distance(r.length[trained], r.length),
    )


def _kolmogorov_distance(x: NDArray[np.float64], y: NDArray[np.float64]) -> float:
    """``sup |F_x − F_y|`` of two empirical CDFs (evaluated at every sample point)."""
    xs, ys = np.sort(x), np.sort(y)
    grid = np.concatenate([xs, ys])
    fx = np.searchsorted(xs, grid, side="right") / xs.size
    fy = np.searchsorted(ys, grid, side="right") / ys.size
    return float(np.max(np.abs(fx - fy)))


# ---------------------------------------------------------------------------------------------
# JSON summary and command line
# ---------------------------------------------------------------------------------------------


def agent_summary_dict(result: AgentResult) -> dict[str, Any]:
    """A JSON-able dict of a run's summary, plus the per-shard statistics.

    NaN (utilisation of an unlimited pool) becomes ``None`` so that ``json.dumps`` writes strict JSON.

    Parameters
    ----------
    result : AgentResult
        A finished run.

    Returns
    -------
    dict
        Every :class:`AgentSummary` field (``staleness_hist`` as a list), ``"mode": "agent"``,
        ``"length_mean"`` (the trained mean, as ``refimpl simulate`` reports it) and ``"shards"``: a
        list of per-shard dicts.

    Raises
    ------
    TypeError
        If ``result`` is not an :class:`AgentResult`.

    Examples
    --------
    >>> import json, scipy.stats as st
    >>> res = simulate_agent(AgentConfig(slots=2, batch=2, steps=2, lengths=st.expon(), seed=1))
    >>> d = agent_summary_dict(res)
    >>> d["rollouts_trained"], d["utilisation"], len(json.dumps(d)) > 0
    (4, None, True)
    """
    if not isinstance(result, AgentResult):
        raise wrong_type(
            "result", "an AgentResult", result, "Pass the value returned by simulate_agent."
        )

    def clean(x: Any) -> Any:
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, tuple):
            return [clean(v) for v in x]
        return x

    out: dict[str, Any] = {"mode": "agent"}
    out.update({k: clean(v) for k, v in result.summary._asdict().items()})
    out["length_mean"] = out["trained_length_mean"]
    sh = result.shards
    out["shards"] = [
        {k: clean(getattr(sh, k)[s].item()) for k in sh._fields}
        for s in range(result.config.shards)
    ]
    return out


def _law_from_text(text: str, *, option: str, integer: bool = False, positive: bool = False) -> Any:
    """``"2.5"`` -> 2.5; ``"expon:scale=2"`` -> ``scipy.stats.expon(scale=2.0)``, validated.

    A law must have finite parameters that scipy accepts, support in ``[0, inf)`` (``positive``:
    a discrete law from 1 on), an integer-valued (discrete) law when ``integer``, and a finite mean
    of at most ``2^53``; each failure is a ``ValueError`` naming ``option`` and quoting ``text``.
    """
    import scipy.stats

    shown = text
    text = text.strip()
    if not text:
        kind = "an integer" if integer else "a number"
        example = "2" if integer else "'expon:scale=2'"
        raise invalid(
            option,
            f"be {kind} or NAME:KEY=VALUE,... naming a scipy.stats law (not empty)",
            shown,
            f"Pass e.g. {option} {example}.",
        )
    if ":" not in text:
        try:
            value: Any = int(text) if integer else float(text)
        except ValueError:
            kind = "an integer" if integer else "a number"
            example = "'poisson:mu=2'" if integer else "'expon:scale=2'"
            raise invalid(
                option,
                f"be {kind} or NAME:KEY=VALUE,... naming a scipy.stats law",
                text,
                f"Pass e.g. {option} 2 or {option} {example}.",
            ) from None
        if integer and not 0 <= value <= 2**20:
            raise invalid(
                option,
                "be an integer in [0, 2^20] (tool calls per rollout)",
                value,
                f"Pass {option} 0, 1, 2, ...",
            )
        if not integer and not (math.isfinite(value) and 0 <= value <= 2.0**53):
            raise invalid(
                option,
                "be a number in [0, 2^53] (a time; 2^53 ≈ 9.0e15 keeps the clock exact)",
                value,
                f"Pass {option} >= 0, e.g. {option} 2.",
            )
        return value
    name, _, params = text.partition(":")
    name = name.strip()
    maker = getattr(scipy.stats, name, None)
    if maker is None or not callable(getattr(maker, "freeze", None)):
        raise invalid(
            option,
            "name a scipy.stats distribution",
            text,
            f"{name!r} is not one; use e.g. expon, lognorm, gamma, poisson.",
        )
    kwargs: dict[str, float] = {}
    for item in (p.strip() for p in params.split(",")):
        key, eq, number = item.partition("=")
        key = key.strip()
        try:
            if not eq or not key:
                raise ValueError
            kwargs_value = float(number)
        except ValueError:
            raise invalid(
                option,
                "give parameters as KEY=NUMBER separated by commas",
                text,
                f"Write e.g. {option} 'lognorm:s=1,scale=400'.",
            ) from None
        if key in kwargs:
            raise invalid(
                option, "give each parameter once", text, f"{key!r} is given twice; keep one."
            )
        if not math.isfinite(kwargs_value):
            raise invalid(
                option,
                "give finite parameters",
                text,
                f"{key}={number.strip()} is not finite; pass a finite number.",
            )
        kwargs[key] = kwargs_value
    fix = f"Check each parameter's domain in the scipy.stats.{name} documentation."
    try:
        law = maker(**kwargs)
        with np.errstate(all="ignore"):
            low, high = (float(x) for x in law.support())
            mean = float(law.mean())
    except (TypeError, ValueError) as err:
        raise invalid(
            option, f"give valid parameters to scipy.stats.{name}", text, f"scipy says: {err}"
        ) from None
    if math.isnan(low) or math.isnan(high):
        raise invalid(
            option,
            f"give parameters that scipy.stats.{name} accepts (shape and scale parameters are "
            "usually > 0)",
            text,
            fix,
        )
    if integer and not _is_discrete(law):
        raise invalid(
            option,
            "be an integer or a discrete scipy.stats law (tool calls are counted)",
            text,
            f"Pass e.g. {option} 'poisson:mu=2'.",
        )
    floor = 1.0 if positive and _is_discrete(law) else 0.0
    if not low >= floor:
        rule = (
            "put no mass on 0 tokens (support 1, 2, ...)" if floor else "be supported on [0, inf)"
        )
        raise invalid(
            option,
            rule,
            text,
            f"Its support starts at {low:g}; "
            + (
                f"shift it with loc (e.g. loc={floor - low:g}) or pick a law of non-negative values."
                if math.isfinite(low)
                else "pick a law of non-negative values, e.g. expon, lognorm or gamma."
            ),
        )
    limit = 2.0**20 if integer else 2.0**53
    if not mean <= limit:
        raise invalid(
            option,
            f"have a finite mean <= {'2^20 tool calls' if integer else '2^53 ≈ 9.0e15'}",
            text,
            f"Its mean is {mean:g}; pass smaller parameters.",
        )
    return law


def configure_agent_options(parser: argparse.ArgumentParser, *, standalone: bool = False) -> None:
    """Add the agent-rollout options (``--tool-*``, ``--agent-*``) to a ``refimpl simulate`` parser.

    Agent mode is on when ``--tool-turns`` is given. The run's ``--slots``, ``--batch``,
    ``--rollouts`` (``steps = rollouts // batch``) or ``--steps``, ``--seed``, ``--mu``/``--sigma``,
    ``--lengths-npy``, ``--lengths-pmf``, ``--token-time`` and ``--eta`` with ``--over-bound drop``
    are the plain simulator's options (``refimpl.sim.cli``; with ``--over-bound keep`` a bound
    changes nothing); ``standalone=True`` adds them too, for use without it.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The parser to extend.
    standalone : bool
        Also add ``--slots``, ``--batch``, ``--rollouts``, ``--seed``, ``--lengths-npy`` and ``--json``.

    Returns
    -------
    None

    Examples
    --------
    >>> import argparse
    >>> p = argparse.ArgumentParser()
    >>> configure_agent_options(p, standalone=True)
    >>> args = p.parse_args(["--tool-turns", "2", "--tool-capacity", "4"])
    >>> args.tool_turns, args.tool_capacity, args.tool_admission
    ('2', 4, 'queue')
    """
    if standalone:
        parser.add_argument("--slots", type=int, default=default(256), help="generation slots N")
        parser.add_argument(
            "--batch", type=int, default=default(512), help="rollouts per trainer step B"
        )
        parser.add_argument(
            "--rollouts", type=int, default=None, help="steps = rollouts // B (default: 100000)"
        )
        parser.add_argument(
            "--steps", type=int, default=None, help="trainer steps (default: not set)"
        )
        parser.add_argument("--seed", type=int, default=default(0), help="seed")
        parser.add_argument("--mu", type=float, default=default(6.0), help="lognormal log-mean")
        parser.add_argument("--sigma", type=float, default=default(1.0), help="lognormal log-sd")
        parser.add_argument(
            "--lengths-npy", default=None, help="N × K float64 length matrix (default: not set)"
        )
        parser.add_argument(
            "--lengths-pmf", default=None, help="pmf over lengths 1..M (default: not set)"
        )
        parser.add_argument("--token-time", type=float, default=default(1.0), help="time per token")
        parser.add_argument(
            "--eta", type=int, default=None, help="staleness bound η (default: none)"
        )
        parser.add_argument("--over-bound", choices=["keep", "drop"], default=default("keep"))
        parser.add_argument("--json", action="store_true", help="print one JSON object")
    g = parser.add_argument_group(
        "agent rollouts (tool calls in sandbox pools; on when --tool-turns is given; every --tool-* "
        "option needs it)"
    )
    g.add_argument(
        "--tool-turns",
        default=None,
        help="tool calls per rollout: INT or a law, 'poisson:mu=2' (default: not set, plain simulator)",
    )
    g.add_argument(
        "--agent-lengths",
        default=None,
        help="decoded tokens per rollout as a scipy.stats law, 'lognorm:s=1,scale=400' "
        "(default: lognormal(--mu, --sigma); not with --lengths-npy / --lengths-pmf)",
    )
    g.add_argument(
        "--tool-latency",
        default=default("0"),
        help="call service time: NUMBER >= 0 or a law, 'expon:scale=20'",
    )
    g.add_argument(
        "--tool-shards", type=int, default=default(1), help="shards of the sandbox pool, >= 1"
    )
    g.add_argument(
        "--tool-capacity",
        type=int,
        default=None,
        help="containers per shard, >= 1 (default: unlimited)",
    )
    g.add_argument(
        "--tool-admission",
        choices=ADMISSION_POLICIES,
        default=default("queue"),
        help="what a full shard does with an arriving call",
    )
    g.add_argument(
        "--tool-max-redirects",
        type=int,
        default=None,
        help="redirects per call with --tool-admission redirect (default: --tool-shards - 1)",
    )
    g.add_argument(
        "--tool-refresh",
        type=float,
        default=default(0.0),
        help="router view refresh period δ >= 0 (0 = exact)",
    )
    g.add_argument(
        "--tool-cold-start", type=float, default=default(0.0), help="cold container start time"
    )
    g.add_argument(
        "--tool-warm-start", type=float, default=default(0.0), help="warm container start time"
    )
    g.add_argument(
        "--tool-keepalive",
        type=float,
        default=default(math.inf),
        help="time a released container stays warm, > 0",
    )
    g.add_argument(
        "--tool-crash-rate",
        type=float,
        default=default(0.0),
        help="crashes per busy time unit",
    )
    g.add_argument(
        "--tool-timeout",
        type=float,
        default=None,
        help="per-attempt timeout, > 0 (default: none)",
    )
    g.add_argument(
        "--tool-max-attempts", type=int, default=default(3), help="attempts per call, >= 1"
    )
    g.add_argument(
        "--tool-retry-delay", type=float, default=default(0.0), help="back-off before a retry"
    )
    g.add_argument(
        "--tool-recovery",
        choices=RECOVERY_MODES,
        default=default("replay"),
        help="how a retry restores the sandbox state",
    )
    g.add_argument(
        "--tool-replay-cost",
        type=float,
        default=default(0.0),
        help="time to replay one logged tool result (--tool-recovery replay)",
    )
    g.add_argument(
        "--tool-on-failure",
        choices=FAILURE_ACTIONS,
        default=default("continue"),
        help="what a rollout does when a call fails",
    )


def agent_config_from_args(args: argparse.Namespace) -> AgentConfig | None:
    """The :class:`AgentConfig` described by parsed options, or ``None`` if agent mode is off.

    Parameters
    ----------
    args : argparse.Namespace
        Parsed by a parser extended with :func:`configure_agent_options`.

    Returns
    -------
    AgentConfig or None
        ``None`` when ``--tool-turns`` was not given.

    Raises
    ------
    ValueError, TypeError
        For an option out of its domain (the message names the option's field and the fix).

    Examples
    --------
    >>> import argparse
    >>> p = argparse.ArgumentParser()
    >>> configure_agent_options(p, standalone=True)
    >>> agent_config_from_args(p.parse_args([])) is None
    True
    >>> cfg = agent_config_from_args(p.parse_args(
    ...     ["--slots", "4", "--batch", "8", "--rollouts", "64", "--tool-turns", "1"]))
    >>> cfg.steps, cfg.turns
    (8, 1)
    """
    if getattr(args, "tool_turns", None) is None:
        return None
    import scipy.stats

    def opt(dest: str, fallback: Any = None) -> Any:
        return plain(getattr(args, dest, fallback))

    slots = opt("slots", 256)
    batch = as_int(opt("batch", 512), name="--batch", minimum=1, meaning="rollouts per step")
    steps = opt("steps")
    rollouts = opt("rollouts")
    if steps is not None and rollouts is not None:
        raise InvalidArgument(
            f"--rollouts and --steps must not both be given (each sets the run length); got "
            f"--rollouts={rollouts} and --steps={steps}. Pass only one of them."
        )
    if steps is None:
        rollouts = 100_000 if rollouts is None else int(rollouts)
        if rollouts < batch:
            raise invalid(
                "--rollouts", f"be >= --batch ({batch})", rollouts, "Pass --rollouts >= --batch."
            )
        steps = rollouts // batch
    lengths: Any
    path = opt("lengths_npy")
    pmf = opt("lengths_pmf")
    text = opt("agent_lengths")
    if path is not None and pmf is not None:
        raise invalid(
            "--lengths-npy", "not be combined with --lengths-pmf", path, "Pass one of them."
        )
    source = "--lengths-npy" if path is not None else "--lengths-pmf" if pmf is not None else None
    if source is not None and text is not None:
        raise InvalidArgument(
            f"--agent-lengths must not be combined with {source} (each gives the lengths); got "
            f"--agent-lengths={text!r} and {source}. Pass one of them."
        )
    for dest in ("mu", "sigma"):
        other = source or ("--agent-lengths" if text is not None else None)
        if other is not None and given(args, dest):
            raise InvalidArgument(
                f"--{dest} applies only to the default lognormal length law, which {other} "
                f"replaces; got --{dest} {opt(dest)} with {other}. Drop --{dest}, or drop {other}."
            )
    if path is not None:
        lengths = load_lengths_npy(str(path))
        if lengths.size and not np.all(np.isfinite(lengths) & (lengths > 0)):
            raise invalid(
                "--lengths-npy",
                "hold finite lengths > 0 (tokens per rollout)",
                str(path),
                "Save positive, finite lengths with numpy.save(path, lengths).",
            )
        if lengths.size and float(lengths.max()) > 2.0**53:
            raise invalid(
                "--lengths-npy",
                "hold lengths <= 2^53 ≈ 9.0e15 tokens (float64 counts single tokens only up to "
                "there)",
                str(path),
                f"Its largest entry is {float(lengths.max())!r}; save token counts <= 2^53.",
            )
    elif pmf is not None:
        try:
            p, _ = as_pmf(parse_pmf(str(pmf)), name="--lengths-pmf")
        except ValueError as err:
            raise InvalidArgument(typed_pmf(str(err), str(pmf))) from None
        probs = np.asarray(p, dtype=np.float64)
        lengths = scipy.stats.rv_discrete(values=(np.arange(1, probs.size + 1), probs))
    elif text is not None:
        lengths = _law_from_text(text, option="--agent-lengths", positive=True)
    else:
        mu, sigma = check_lognormal(opt("mu", 6.0), opt("sigma", 1.0), names=("--mu", "--sigma"))
        lengths = scipy.stats.lognorm(s=sigma, scale=math.exp(mu))
    eta = opt("eta") if opt("over_bound", "keep") == "drop" else None
    values = {
        "slots": slots,
        "batch": batch,
        "steps": steps,
        "lengths": lengths,
        "turns": _law_from_text(str(opt("tool_turns")), option="--tool-turns", integer=True),
        "token_time": opt("token_time", 1.0),
        "tool_latency": _law_from_text(str(opt("tool_latency", "0")), option="--tool-latency"),
        "shards": opt("tool_shards", 1),
        "capacity": opt("tool_capacity"),
        "admission": opt("tool_admission", "queue"),
        "max_redirects": opt("tool_max_redirects"),
        "refresh": opt("tool_refresh", 0.0),
        "cold_start": opt("tool_cold_start", 0.0),
        "warm_start": opt("tool_warm_start", 0.0),
        "keepalive": opt("tool_keepalive", math.inf),
        "crash_rate": opt("tool_crash_rate", 0.0),
        "timeout": opt("tool_timeout"),
        "max_attempts": opt("tool_max_attempts", 3),
        "retry_delay": opt("tool_retry_delay", 0.0),
        "recovery": opt("tool_recovery", "replay"),
        "replay_cost": opt("tool_replay_cost", 0.0),
        "on_failure": opt("tool_on_failure", "continue"),
        "eta": eta,
        "seed": opt("seed", 0),
    }
    if given(args, "tool_max_redirects") and values["admission"] != "redirect":
        raise InvalidArgument(
            f"--tool-max-redirects applies only with --tool-admission redirect (a full shard "
            f"sends the call on); got --tool-max-redirects {values['max_redirects']} with "
            f"--tool-admission {values['admission']}. Add --tool-admission redirect, or drop "
            "--tool-max-redirects."
        )
    if given(args, "tool_replay_cost") and values["recovery"] != "replay":
        raise InvalidArgument(
            f"--tool-replay-cost applies only with --tool-recovery replay (the default); got "
            f"--tool-replay-cost {values['replay_cost']} with --tool-recovery "
            f"{values['recovery']}. Drop one of them."
        )
    for name in (
        "token_time",
        "refresh",
        "cold_start",
        "warm_start",
        "crash_rate",
        "timeout",
        "retry_delay",
        "replay_cost",
    ):
        value = values[name]
        if isinstance(value, float) and math.isfinite(value) and value > 2.0**53:
            option = _CLI_OPTION.get(name, "--" + name.replace("_", "-"))
            raise invalid(
                option,
                "be <= 2^53 ≈ 9.0e15 (float64's exact range; beyond it the simulated clock "
                "overflows; the time unit is yours, so rescale every time together)",
                value,
                f"Pass {option} <= 2^53.",
            )
    try:
        return AgentConfig(**values)
    except (ValueError, TypeError) as err:
        raise type(err)(_cli_names(str(err))) from None


# AgentConfig fields -> the options of ``refimpl simulate`` that set them.
_CLI_OPTION = {
    "slots": "--slots",
    "batch": "--batch",
    "steps": "--steps",
    "seed": "--seed",
    "eta": "--eta",
    "token_time": "--token-time",
    "turns": "--tool-turns",
    "tool_latency": "--tool-latency",
    "shards": "--tool-shards",
    "capacity": "--tool-capacity",
    "admission": "--tool-admission",
    "max_redirects": "--tool-max-redirects",
    "refresh": "--tool-refresh",
    "cold_start": "--tool-cold-start",
    "warm_start": "--tool-warm-start",
    "keepalive": "--tool-keepalive",
    "crash_rate": "--tool-crash-rate",
    "timeout": "--tool-timeout",
    "max_attempts": "--tool-max-attempts",
    "retry_delay": "--tool-retry-delay",
    "recovery": "--tool-recovery",
    "replay_cost": "--tool-replay-cost",
    "on_failure": "--tool-on-failure",
}


def _cli_names(message: str) -> str:
    """Rewrite :class:`AgentConfig` field names in ``message`` as ``refimpl simulate`` options."""
    import re

    for name in sorted(_CLI_OPTION, key=len, reverse=True):
        message = re.sub(
            rf"(?:(?<=^)|(?<=got )|(?<=Pass )|(?<=finite )|(?<=raise )|(?<=or )){name}\b(?=[ =<>.,;)]|$)",
            _CLI_OPTION[name],
            message,
        )
    message = re.sub(r"(--[a-z-]+)='(\w+)'", r"\1 \2", message)
    return message


def run_agent_cli(
    config: AgentConfig,
    *,
    trace: Any = None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Run ``config`` and return its JSON-able summary (:func:`agent_summary_dict`).

    The integrator's ``refimpl simulate`` calls this when :func:`agent_config_from_args` returns a
    config, and prints ``json.dumps`` of the result.

    Parameters
    ----------
    config : AgentConfig
        The run.
    trace : str or path, optional
        A directory to write the traces to as Parquet (:meth:`AgentResult.to_parquet`).
    progress : callable, optional
        Passed to :func:`simulate_agent` (called with the steps done).

    Returns
    -------
    dict
        The summary, with ``rollouts_per_s`` (simulated rollouts per wall-clock second) added.

    Raises
    ------
    TypeError
        If ``config`` is not an :class:`AgentConfig`.

    Examples
    --------
    >>> import scipy.stats as st
    >>> out = run_agent_cli(AgentConfig(slots=2, batch=2, steps=3, lengths=st.expon(), turns=1))
    >>> out["calls_issued"] == out["calls_completed"] + out["calls_failed"]
    True
    """
    import time

    start = time.perf_counter()
    result = simulate_agent(config, progress=progress)
    wall = time.perf_counter() - start
    if trace is not None:
        result.to_parquet(trace)
    out = agent_summary_dict(result)
    out["wall_s"] = wall
    out["rollouts_per_s"] = result.summary.rollouts_trained / wall if wall > 0 else None
    return out
