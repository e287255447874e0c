"""The asynchronous rollout-queue simulator (conventions §vocabulary, §dispatch).

``N`` generation slots run rollouts, a trainer consumes them ``B`` per step and publishes a new policy
version after each step; the simulator records, for every rollout, when it ran, which versions
generated its tokens, when (and whether) it was trained and its staleness. Two engines compute the same
runs: a vectorized numpy engine for the modes whose timing does not depend on versions, and an event
engine for every mode; they agree sample for sample where both apply, and with the SimPy peer
(``tests/peers/simpy_queue.py``).

- :class:`SimConfig`: a frozen, validated run description.
- :func:`simulate`: run it; returns a :class:`SimTrace` (columnar, per rollout).
- :func:`summarize` / :class:`SimSummary`: throughput, idle fractions, staleness, length bias.
- :func:`closed_form` / :class:`ClosedForm`: what the closed forms of conventions §dispatch (``refimpl.dispatch``)
  predict for a configuration, to set beside a simulation.
- :func:`simulate_engine`: the engine mode (``SimConfig(engine_model=...)``, :mod:`refimpl.sim.engine`):
  continuous batching under a KV-cache budget; the trace and :class:`~refimpl.sim.engine.EngineStats`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from refimpl._validation import invalid, wrong_type
from refimpl.sim import _compiled, _config, _trace, _vector_compiled
from refimpl.sim._config import SimConfig
from refimpl.sim._event import _Stuck, fast_path_applies, run_async_fast, run_events
from refimpl.sim._lengths import LengthSupply, OutOfLengths
from refimpl.sim._trace import SimSummary, SimTrace, summarize
from refimpl.sim._vector import run_vector
from refimpl.sim.engine import EngineModel, EngineRun, EngineStats
from refimpl.sim.engine import _kernel as _engine_kernel
from refimpl.sim.engine.batching import engine_stats, run_engine

if TYPE_CHECKING:  # loaded on first use (__getattr__): the closed forms need scipy.stats
    from refimpl.sim._closed import ClosedForm, closed_form

__all__ = [
    "MODES",
    "OVER_BOUND_ACTIONS",
    "PARTIAL_POLICIES",
    "STATUS",
    "STATUS_NAMES",
    "ClosedForm",
    "EngineModel",
    "EngineRun",
    "EngineStats",
    "OutOfLengths",
    "SimConfig",
    "SimSummary",
    "SimTrace",
    "closed_form",
    "simulate",
    "simulate_engine",
    "summarize",
]

Engine = Literal["auto", "vector", "compiled", "event"]

#: The dispatch modes of :class:`SimConfig` (``mode=``).
MODES: tuple[str, ...] = _config.MODES
#: What the trainer does with a sample over the staleness bound (``over_bound=``).
OVER_BOUND_ACTIONS: tuple[str, ...] = _config.OVER_BOUND_ACTIONS
#: What happens to in-flight rollouts at each publication (``partial=``).
PARTIAL_POLICIES: tuple[str, ...] = _config.PARTIAL_POLICIES
#: Names of the trace's status codes, by code.
STATUS_NAMES: tuple[str, ...] = _trace.STATUS_NAMES
#: Status code by name (``trace.status == STATUS["trained"]``).
STATUS: dict[str, int] = _trace.STATUS


def __getattr__(name: str) -> Any:
    """:func:`closed_form` and :class:`ClosedForm`, imported on first use: they evaluate
    scipy.stats laws, which a simulation alone does not need (``refimpl simulate`` starts faster)."""
    if name in ("closed_form", "ClosedForm"):
        value = getattr(importlib.import_module("refimpl.sim._closed"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'refimpl.sim' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "closed_form", "ClosedForm"})


def _trainer_times(cfg: SimConfig) -> np.ndarray:
    tt = cfg.trainer_time
    if isinstance(tt, float):
        return np.full(cfg.steps, tt)
    rng = np.random.default_rng([cfg.seed, 1])
    out = np.asarray(tt.rvs(size=cfg.steps, random_state=rng), dtype=np.float64)
    if not np.all(np.isfinite(out) & (out >= 0)):
        raise invalid(
            "trainer_time",
            "draw finite times >= 0",
            tt,
            "Pass a law supported on [0, inf), e.g. scipy.stats.expon(scale=5.0).",
        )
    return out


def simulate(
    config: SimConfig,
    *,
    engine: Engine = "auto",
    progress: Callable[[int], None] | None = None,
) -> SimTrace:
    r"""Simulate one run of the rollout queue and return its per-rollout trace.

    A launch at time :math:`t` sees version :math:`v(t) = \#\{j : T_j < t\}` (:math:`T_j` the
    publication of version :math:`j+1`); a sample trained at step :math:`j` has staleness

    .. math::

        s = j - \min_t v_t \;\ge\; 0 .

    Parameters
    ----------
    config : SimConfig
        The run (validated when it was built).
    engine : {'auto', 'vector', 'compiled', 'event'}
        ``event`` is the reference engine (plain Python, every mode); ``compiled`` is the same
        event loop compiled with numba (every mode; needs ``pip install 'refimpl[fast]'``);
        ``vector`` the vectorized numpy engine (``config.vectorizable`` only). ``auto`` uses the
        vectorized engine where it applies, else the compiled event loop, else the reference
        engine; it uses numba only when it is installed and the run is long enough to repay
        compiling (``_compiled.COMPILE_ROLLOUTS``, ``_vector_compiled.COMPILE_ROWS``) or the kernel
        is ready: the event loop compiled in this process or in numba's cache on disk, the
        vectorized ordering step compiled in this process (loading it from disk costs more than it
        saves a shorter run). Every engine
        gives the same trace, sample for sample, so the choice changes only how long a run takes.
    progress : callable, optional
        Called with the number of newly completed rollouts every few thousand completions (event
        engine; the compiled engine about every 1/64 of the run, when it pauses; the vectorized
        engine once, at the end), e.g. ``tqdm.update``.

    Returns
    -------
    SimTrace
        One row per launched rollout; ``trace.summary()`` for the :class:`SimSummary`.

    Raises
    ------
    ValueError
        ``engine='vector'`` for a configuration it does not cover, ``engine='compiled'`` without
        numba; :class:`OutOfLengths` (a
        ``ValueError``) when an explicit length matrix is too short, naming the slot and how many
        lengths it needs.

    Notes
    -----
    Seeded runs reproduce exactly. The engines agree sample for sample with each other and with the
    SimPy peer (tests/test_sim_agreement.py), so numba changes how fast a run is, never its result. Tie rule (conventions §tie-rule): a rollout launched at the instant a
    version is published sees the old version; completions at one instant are processed in launch
    order.

    References
    ----------
    conventions §vocabulary, §dispatch; the SimPy peer ``tests/peers/simpy_queue.py`` (``--variant store``).

    Examples
    --------
    Two slots, batch 2, every rollout one token long: batch ``j`` completes at ``j + 1``; the
    rollouts launched at ``t = 1`` see version 0 (the tie rule), so from step 1 on staleness is 1.

    >>> trace = simulate(SimConfig(slots=2, batch=2, steps=3, lengths=np.ones((2, 8))))
    >>> order = trace.training_order()
    >>> trace.staleness[order].tolist()
    [0, 0, 1, 1, 1, 1]
    >>> trace.publish_times.tolist()
    [1.0, 2.0, 3.0]
    """
    trace, _ = _simulate_any(config, engine=engine, progress=progress)
    return trace


def simulate_engine(
    config: SimConfig,
    *,
    engine: Engine = "auto",
    progress: Callable[[int], None] | None = None,
) -> EngineRun:
    """Simulate a run in the engine mode; return its trace and the engine's own figures.

    :func:`simulate` returns the same trace; this adds :class:`~refimpl.sim.engine.EngineStats`
    (batch, memory, preemptions, prefix sharing, the bytes weight updates moved or kept).

    Parameters
    ----------
    config : SimConfig
        With ``engine_model`` set (:class:`~refimpl.sim.engine.EngineModel`).
    engine : {'auto', 'compiled', 'event'}
        ``event``: the engine loop in plain Python (the reference); ``compiled``: the same functions
        compiled with numba (``refimpl[fast]``); ``auto``: compiled when numba is installed. Both
        give the same trace and figures, bit for bit.
    progress : callable, optional
        Called once, at the end, with the number of trained rollouts.

    Returns
    -------
    EngineRun
        ``(trace, stats)``.

    Examples
    --------
    Three seats, but 4 blocks of 2 tokens cannot hold three sequences of 4 tokens: when the
    blocks run out the newest sequence is preempted, and 2.5 run per step on average.

    >>> m = EngineModel(layers=1, kv_heads=1, head_dim=1, dtype_bytes=1, block_size=2,
    ...                 kv_memory_bytes=16, watermark=0.0)
    >>> cfg = SimConfig(slots=3, batch=3, steps=2, lengths=np.full((3, 8), 4.0), engine_model=m)
    >>> run = simulate_engine(cfg, engine="event")
    >>> run.stats.total_blocks, run.stats.batch_mean, run.stats.preemptions, run.trace.end_time
    (4, 2.5, 2, 12.0)
    """
    if not isinstance(config, SimConfig) or config.engine_model is None:
        raise invalid(
            "config",
            "be a SimConfig with engine_model set",
            config,
            "Pass SimConfig(..., engine_model=EngineModel(...)), or call simulate().",
        )
    trace, stats = _simulate_any(config, engine=engine, progress=progress)
    assert stats is not None
    return EngineRun(trace, stats)


def _check_engine(config: SimConfig, engine: str) -> None:
    if not isinstance(config, SimConfig):
        raise wrong_type(
            "config", "a SimConfig", config, "Build one: SimConfig(slots=..., batch=..., ...)."
        )
    if engine not in ("auto", "vector", "compiled", "event"):
        raise invalid(
            "engine", "be one of 'auto', 'vector', 'compiled', 'event'", engine, "Pick one."
        )
    if engine == "compiled" and not _compiled.AVAILABLE:
        raise invalid(
            "engine",
            "be 'auto', 'vector' or 'event' without numba (the compiled engine needs it)",
            engine,
            "Install it (pip install 'refimpl[fast]'), or pass engine='auto'.",
        )
    if engine == "vector" and not config.vectorizable:
        raise invalid(
            "engine",
            "be 'event' or 'auto' for this config (the vectorized engine covers async with "
            "zero trainer time, sync with batch <= slots and first_k with dropped leftovers and "
            "launch <= slots; no drop over the bound, partial rollouts, preemption or slowdown)",
            engine,
            "Pass engine='auto'.",
        )


def _simulate_any(
    config: SimConfig,
    *,
    engine: str,
    progress: Callable[[int], None] | None,
    like: SimConfig | None = None,
    supply: LengthSupply | None = None,
) -> tuple[SimTrace, EngineStats | None]:
    """Run any mode; the engine mode's figures beside its trace (``None`` in the other modes).

    ``like``: the configuration whose size decides what ``engine="auto"`` compiles (default
    ``config``). ``refimpl simulate`` runs one step of its configuration first, with the choices of
    the whole run, so that compiling or loading the kernels is timed apart from the run; and it
    draws the lengths (``supply``, ``LengthSupply(config)`` by default) apart too."""
    _check_engine(config, engine)
    decide = config if like is None else like
    supply = LengthSupply(config) if supply is None else supply
    taus = _trainer_times(config)
    if config.engine_model is not None:
        compiled = engine == "compiled" or (engine == "auto" and _engine_kernel.AVAILABLE)
        raw_e, counters = run_engine(config, supply, taus, compiled=compiled)
        if progress is not None:
            progress(config.trained_target)
        data_e = raw_e._asdict()
        del raw_e
        trace_e = SimTrace.from_raw(data_e, config, canonical=True)
        return trace_e, engine_stats(counters, config)
    use_vector = engine == "vector" or (engine == "auto" and decide.vectorizable)
    if use_vector:
        # auto: the ordering step compiled when numba is installed (the same trace)
        raw = run_vector(
            config,
            supply,
            taus,
            compiled=engine == "auto" and _vector_compiled.worth_compiling(decide),
        )
        canonical = True
        if progress is not None:
            progress(config.trained_target)
    else:
        compiled = engine == "compiled" or (engine == "auto" and _compiled.worth_compiling(decide))
        try:
            if compiled:
                run = _compiled.run_compiled
            else:
                run = run_async_fast if fast_path_applies(config) else run_events
            raw = run(config, supply, taus, progress=progress)
        except _Stuck:
            raise RuntimeError(
                "the simulation can make no further progress before the last trainer step (no "
                "event left); this configuration cannot fill a batch — relax eta or over_bound."
            ) from None
        canonical = compiled
    data = raw._asdict()
    del raw  # from_raw frees the engine's columns one by one
    return SimTrace.from_raw(data, config, canonical=canonical), None
