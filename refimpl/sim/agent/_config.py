"""Agent rollouts: the run description (:class:`AgentConfig`), validated on construction, and the
status and event codes the other parts share."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from refimpl._validation import as_float_array, as_int, as_real, invalid, wrong_type
from refimpl.sim._config import MAX_LAUNCHED_ROLLOUTS

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
        self._check_lengths()
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
        self._check_pool()
        self._check_times()
        self._check_failures()
        if self.eta is not None:
            put(self, "eta", as_int(self.eta, name="eta", minimum=0, meaning="staleness bound"))
        put(self, "seed", as_int(self.seed, name="seed", minimum=0, meaning="random seed"))

    def _check_lengths(self) -> None:
        """``lengths``: a frozen law of positive tokens (a discrete one from 1 on), or an
        ``N × K`` array, one row per slot and enough columns for the run; stored read-only."""
        put = object.__setattr__
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
            return
        if self.lengths is None:
            raise invalid(
                "lengths",
                "be given (a frozen scipy.stats law or an N × K array of tokens per rollout)",
                None,
                "Pass e.g. lengths=scipy.stats.lognorm(s=1.0, scale=np.exp(6.0)).",
            )
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

    def _check_pool(self) -> None:
        """The sandbox pool: ``shards``, ``capacity``, ``admission`` and ``max_redirects``."""
        put = object.__setattr__
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

    def _check_times(self) -> None:
        """The pool's times and rates (each >= 0) and ``keepalive`` (> 0, ``inf`` allowed)."""
        put = object.__setattr__
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

    def _check_failures(self) -> None:
        """What a failed call does: ``timeout``, ``max_attempts``, ``recovery``, ``on_failure``."""
        put = object.__setattr__
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


#: Largest row count of one trace: ids and ranks are stored as int32.
MAX_TRACE_ROWS: int = 2**31 - 1
#: Most tool calls a ``turns`` law may draw for one rollout (its counts are stored as int16).
MAX_TURNS: int = 2**15 - 1


def _fit(
    bound: int, narrowest: type[np.signedinteger[Any]] = np.int8
) -> type[np.signedinteger[Any]]:
    """The narrowest signed integer type, from ``narrowest`` on, holding every value in
    ``[-1, bound]``. (Each combination of types is one compilation of the compiled engine: columns
    whose bounds vary in practice start at int16, so that one type serves nearly every run.)"""
    kinds = (np.int8, np.int16, np.int32)
    for kind in kinds[kinds.index(narrowest) :]:
        if bound <= np.iinfo(kind).max:
            return kind
    return np.int64


def _int_dtypes(cfg: AgentConfig) -> dict[str, type[np.signedinteger[Any]]]:
    """The integer type of each integer column (the reference engine's names), from bounds the
    configuration proves: ids, ranks and launch indices below :data:`MAX_TRACE_ROWS`, slots below
    ``slots``, versions and steps at most ``steps``, calls per rollout at most a constant ``turns``
    (at most :data:`MAX_TURNS` for a law, which both engines check), attempts at most ``max_attempts``, redirects at most ``max_redirects``,
    shards below ``shards`` and codes in ``[-1, 4]``."""
    ids = np.int32
    turns = np.int16 if _is_frozen_law(cfg.turns) else _fit(int(cfg.turns), np.int16)
    attempts = _fit(cfg.max_attempts)
    redirects = cfg.shards - 1 if cfg.max_redirects is None else cfg.max_redirects
    code = np.int8
    return {
        "r_slot": _fit(cfg.slots, np.int16),
        "r_k": ids,
        "r_calls": turns,
        "r_issued": turns,
        "r_version": _fit(cfg.steps, np.int16),
        "r_step": _fit(cfg.steps, np.int16),
        "r_rank": ids,
        "r_status": code,
        "c_rollout": ids,
        "c_index": turns,
        "c_attempts": attempts,
        "c_status": code,
        "a_call": ids,
        "a_number": attempts,
        "a_redirects": _fit(min(redirects, cfg.shards)),
        "a_shard": _fit(cfg.shards),
        "a_outcome": code,
        "a_box": ids,
        "a_state": code,
        "a_next": ids,
        "a_cold": code,
    }
