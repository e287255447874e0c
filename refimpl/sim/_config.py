"""The simulator's configuration: a frozen, validated description of one run.

Everything is checked when a :class:`SimConfig` is built, before anything runs; each message names the
field, the rule, the value received and what to change.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import numpy as np
from numpy.typing import NDArray

from refimpl._validation import (
    as_float_array,
    as_int,
    as_pmf,
    as_real,
    invalid,
    wrong_type,
)
from refimpl.errors import InvalidArgument
from refimpl.sim.engine.model import EngineModel

__all__ = [
    "LOG_TOKEN_RANGE",
    "MAX_LAUNCHED_ROLLOUTS",
    "MAX_PREEMPTIONS_PER_ROLLOUT",
    "MAX_SLOWDOWN_SLOTS",
    "MODES",
    "OVER_BOUND_ACTIONS",
    "PARTIAL_POLICIES",
    "TOKEN_RANGE",
    "SimConfig",
    "check_lognormal",
]

Mode = Literal["sync", "first_k", "async", "admission"]
MODES: tuple[str, ...] = ("sync", "first_k", "async", "admission")
LEFTOVERS: tuple[str, ...] = ("drop", "carry")
OVER_BOUND_ACTIONS: tuple[str, ...] = ("keep", "drop")
PARTIAL_POLICIES: tuple[str, ...] = ("none", "restart", "recompute", "keep_kv")


#: Largest mean length (tokens) and largest time a run takes: ``2^53``, the end of float64's exact
#: integers. Beyond it float64 no longer tells ``n`` tokens from ``n + 1``; within it, a clock that sums
#: up to ``2^40`` rollouts of at most ``2^53`` tokens times ``2^53`` per token (times a slowdown of at
#: most ``2^53``) stays below ``2^199``, far from float64's overflow at ``2^1024``, and the summary's
#: squared deviations stay finite.
TOKEN_RANGE: float = 2.0**53
#: Preemptions a rollout may expect (``preempt_rate ×`` its mean time); each is simulated as an
#: event, so far more would make a run of any size last hours.
MAX_PREEMPTIONS_PER_ROLLOUT: int = 1024
#: Rollouts one run may be expected to launch: the trace keeps a row per launched rollout (about
#: 120 bytes with its bookkeeping), so this is about 6 GB, a quarter of the machines it is made for.
MAX_LAUNCHED_ROLLOUTS: int = 50_000_000
#: Slots a run with a decode slowdown may have: its factor is computed for every busy count.
MAX_SLOWDOWN_SLOTS: int = 2**20
#: ``ln(2^53) = 53 ln 2 ≈ 36.74``: the lognormal's ``mu + sigma²/2`` (log of its mean) is at most this,
#: and its ``mu`` (log of its median) at least minus this, so that no draw underflows to 0 tokens.
LOG_TOKEN_RANGE: float = 53.0 * math.log(2.0)


def check_lognormal(mu: Any, sigma: Any, *, names: tuple[str, str]) -> tuple[float, float]:
    r"""Validate the lognormal length law's ``mu`` and ``sigma``; return them as floats.

    .. math::

        -53 \ln 2 \le \mu, \qquad \mu + \sigma^2/2 \le 53 \ln 2,

    i.e. median :math:`e^\mu \ge 2^{-53}` and mean :math:`e^{\mu + \sigma^2/2} \le 2^{53}` tokens
    (:data:`TOKEN_RANGE`). Then :math:`\sigma \le \sqrt{4 \cdot 53 \ln 2} \approx 12.1`, so a
    draw :math:`e^{\mu + \sigma z}` underflows to 0 only for :math:`|z| > 55` and is finite for any
    :math:`z` numpy draws.

    Examples
    --------
    >>> check_lognormal(6, 1, names=("mu", "sigma"))
    (6.0, 1.0)
    >>> check_lognormal(50.0, 1.0, names=("mu", "sigma"))
    Traceback (most recent call last):
    ...
    refimpl.errors.InvalidArgument: mu and sigma must give a lognormal mean exp(mu + sigma^2/2) <= 2^53 ≈ 9.0e15 tokens, i.e. mu + sigma^2/2 <= 36.74 (53·ln 2; beyond it float64 no longer counts single tokens); got mu=50.0 and sigma=1.0 (mu + sigma^2/2 = 50.5). Pass a smaller mu or sigma (mu=6, sigma=1: a median of 403 tokens).
    """
    m_name, s_name = names
    m = as_real(mu, name=m_name, meaning="log-scale location")
    sd = as_real(sigma, name=s_name, low=0.0, low_open=True)
    if m < -LOG_TOKEN_RANGE:
        raise invalid(
            m_name,
            f"be >= -{LOG_TOKEN_RANGE:.2f} (-53·ln 2: a median length exp({m_name}) >= 2^-53 "
            "tokens; below it draws underflow to 0 tokens)",
            m,
            f"Pass {m_name} >= -36.7 ({m_name}=6: a median of 403 tokens).",
        )
    log_mean = m + 0.5 * sd * sd
    if not log_mean <= LOG_TOKEN_RANGE:
        raise InvalidArgument(
            f"{m_name} and {s_name} must give a lognormal mean exp({m_name} + {s_name}^2/2) <= "
            f"2^53 ≈ 9.0e15 tokens, i.e. {m_name} + {s_name}^2/2 <= {LOG_TOKEN_RANGE:.2f} (53·ln 2; "
            f"beyond it float64 no longer counts single tokens); got {m_name}={m!r} and "
            f"{s_name}={sd!r} ({m_name} + {s_name}^2/2 = {log_mean:.6g}). Pass a smaller {m_name} "
            f"or {s_name} ({m_name}=6, {s_name}=1: a median of 403 tokens)."
        )
    return m, sd


def _choice(value: Any, *, name: str, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str):
        raise wrong_type(name, f"one of {allowed}", value, f"Pass {name} as a string.")
    if value not in allowed:
        raise invalid(
            name, f"be one of {', '.join(map(repr, allowed))}", value, f"Pick one of {allowed}."
        )
    return value


def _is_frozen_dist(obj: Any) -> bool:
    return all(callable(getattr(obj, a, None)) for a in ("rvs", "cdf", "ppf", "mean"))


def peer_columns(slots: int, rollouts: int) -> int:
    """Columns of the peer's length matrix: ``ceil(rollouts / slots * 1.25) + 64``.

    Examples
    --------
    >>> peer_columns(256, 1_000_000)
    4947
    """
    return math.ceil(rollouts / slots * 1.25) + 64


def _check_range(name: str, value: float, *, low: float | None = None) -> None:
    """A time or rate must lie in ``[low, 2^53]`` (:data:`TOKEN_RANGE`)."""
    if value > TOKEN_RANGE or (low is not None and value < low):
        span = "[2^-53, 2^53] ≈ [1.1e-16, 9.0e15]" if low is not None else "[0, 2^53 ≈ 9.0e15]"
        raise invalid(
            name,
            f"lie in {span} (float64's exact range: beyond it the simulated clock loses single tokens "
            "or overflows; the time unit is yours, so rescale every time together)",
            value,
            f"Pass {name} in {'[2^-53, 2^53]' if low is not None else '[0, 2^53]'}.",
        )


@dataclass(frozen=True, eq=False, kw_only=True)
class SimConfig:
    """One simulated run of the rollout queue (conventions §vocabulary, §dispatch), validated on construction.

    Parameters
    ----------
    slots : int
        ``N >= 1`` generation slots (continuous batching: each runs one rollout at a time).
    batch : int
        ``B >= 1`` samples per trainer step.
    rollouts, steps : int, optional
        Run length: ``steps`` trainer steps, or ``rollouts // batch`` steps when ``rollouts`` is given
        (as the SimPy peer counts). Give exactly one.
    mode : {'async', 'sync', 'first_k', 'admission'}
        ``sync``: launch ``B``, wait for all, train. ``first_k``: launch ``launch`` rollouts, train
        the first ``B`` to finish; ``leftovers`` are dropped or carried. ``async``: every slot
        relaunches as soon as it finishes, the trainer takes completions ``B`` at a time.
        ``admission``: ``async`` with the AReaL/SkyRL capacity rule (launches blocked while
        ``launched ≥ (η + v + 1)·B``; needs ``eta``).
    lengths : None, frozen scipy.stats distribution, 1-D pmf, or 2-D array
        Rollout lengths in tokens. ``None``: lognormal(``lognormal_mu``, ``lognormal_sigma``) drawn
        exactly as the SimPy peer does (``default_rng(seed).lognormal(mu, sigma, size=(N, K))``); a
        frozen law: drawn with ``dist.rvs``; a 1-D array: a pmf over lengths ``1..M``; a 2-D array:
        the explicit ``N × K`` matrix, row ``i`` = slot ``i``'s lengths in launch order.
    launch : int, optional
        ``first_k`` only: rollouts in flight at the start of each step (``n >= B``; default ``N``).
    leftovers : {'drop', 'carry'}
        ``first_k`` only: what happens to the rollouts still running when the batch is full.
    eta : int, optional
        Staleness bound ``η >= 0``; ``None`` = unbounded.
    over_bound : {'keep', 'drop'}
        What the trainer does with a sample whose staleness exceeds ``eta`` when it is consumed.
    token_time, prefill_time : float
        Decode time of one token (``> 0``) and the fixed prefill time of each rollout (``>= 0``).
    slowdown : callable, optional
        ``slowdown(busy) -> factor > 0``: decode time is multiplied by the factor while ``busy`` slots
        are generating; evaluated for ``busy = 1..N`` at construction.
    trainer_time : float or frozen scipy.stats distribution
        Time of one trainer step (``>= 0``; a law is drawn once per step). Generation continues in the
        asynchronous modes; in ``sync`` the generators wait.
    partial : {'none', 'restart', 'recompute', 'keep_kv'}
        What happens to in-flight rollouts at each publication (conventions §admission-and-partial).
    reprefill_token_time : float
        Time to re-prefill one already generated token (``recompute`` and preemption without
        persisted KV).
    preempt_rate, preempt_duration : float
        Checkpoint preemption: each slot is lost at rate ``preempt_rate`` (per time unit, Poisson)
        for ``preempt_duration``; its rollout is paused and resumed.
    persist_kv : bool
        On resume after preemption: ``True`` reloads the persisted KV cache (``kv_restore_time``),
        ``False`` re-prefills the prompt and the generated prefix.
    kv_restore_time : float
        Time to reload a persisted KV cache after preemption.
    seed : int
        Seed of every random draw (lengths as the peer draws them, trainer times, preemptions).
    engine_model : EngineModel, optional
        The engine mode (``refimpl.sim.engine``): ``slots`` becomes the most sequences an inference
        engine runs at once, fewer when its KV blocks run out; decode proceeds in steps timed by the
        model's roofline (or ``token_time`` each), lengths are rounded up to whole tokens, and the
        engine preempts, shares prefixes and (with ``partial``) interrupts in flight. Async dispatch
        only, without ``slowdown``, ``prefill_time``, ``reprefill_token_time`` or checkpoint
        preemption (the engine prices those itself) and with ``over_bound='keep'``.

    Raises
    ------
    ValueError, TypeError
        For any field out of its domain, before anything runs.

    Notes
    -----
    Conventions (conventions §vocabulary): version ``v`` counts optimizer steps; step ``j`` consumes batch ``j`` and
    publishes ``j + 1``; staleness ``s = j − min_t v_t``; a rollout launched at the instant of a
    publication sees the old version, except launches the publication itself triggers (the next
    step's launches in ``sync``/``first_k``, slots unblocked by admission, ``restart`` relaunches),
    which follow it and see the new version.

    References
    ----------
    conventions §vocabulary, §dispatch; AReaL (arXiv 2505.24298) for the admission rule; the SimPy peer
    ``tests/peers/simpy_queue.py`` for the plain asynchronous model.

    Examples
    --------
    >>> cfg = SimConfig(slots=4, batch=8, rollouts=64, seed=1)
    >>> cfg.steps, cfg.mode
    (8, 'async')
    >>> SimConfig(slots=4, batch=0, rollouts=64)
    Traceback (most recent call last):
    ...
    refimpl.errors.InvalidArgument: batch must be >= 1 (samples per trainer step); got batch=0. Pass batch >= 1.
    """

    slots: int
    batch: int
    rollouts: int | None = None
    # None = not given; __post_init__ always leaves an int >= 1 here.
    steps: int = field(default=cast(int, None))
    mode: str = "async"
    lengths: Any = None
    lognormal_mu: float = 6.0
    lognormal_sigma: float = 1.0
    launch: int | None = None
    leftovers: str = "drop"
    eta: int | None = None
    over_bound: str = "keep"
    token_time: float = 1.0
    prefill_time: float = 0.0
    slowdown: Callable[[int], float] | None = None
    trainer_time: Any = 0.0
    partial: str = "none"
    reprefill_token_time: float = 0.0
    preempt_rate: float = 0.0
    preempt_duration: float = 0.0
    persist_kv: bool = True
    kv_restore_time: float = 0.0
    seed: int = 0
    engine_model: EngineModel | None = None
    # derived (set in __post_init__)
    slowdown_table: NDArray[np.float64] | None = field(default=None, init=False, repr=False)
    length_kind: str = field(default="lognormal", init=False, repr=False)

    def __post_init__(self) -> None:
        s = object.__setattr__
        n = as_int(self.slots, name="slots", minimum=1, meaning="generation slots")
        b = as_int(self.batch, name="batch", minimum=1, meaning="samples per trainer step")
        s(self, "slots", n)
        s(self, "batch", b)
        steps_given = self.steps is not None  # steps=0 is given, and rejected below
        if self.rollouts is None and not steps_given:
            raise invalid(
                "rollouts or steps",
                "be given (the run length)",
                None,
                "Pass rollouts=R (trains R // batch steps, as the peer) or steps=S.",
            )
        if self.rollouts is not None and steps_given:
            raise invalid(
                "rollouts and steps",
                "not both be given",
                (self.rollouts, self.steps),
                "Pass only one of them.",
            )
        if self.rollouts is not None:
            r = as_int(self.rollouts, name="rollouts", minimum=1, meaning="trained rollouts")
            if r < b:
                raise invalid(
                    "rollouts",
                    f"be >= batch={b} (at least one trainer step)",
                    r,
                    f"Pass rollouts >= {b} or a smaller batch.",
                )
            s(self, "rollouts", r)
            s(self, "steps", r // b)
        else:
            s(self, "steps", as_int(self.steps, name="steps", minimum=1, meaning="trainer steps"))
        mode = _choice(self.mode, name="mode", allowed=MODES)
        s(self, "leftovers", _choice(self.leftovers, name="leftovers", allowed=LEFTOVERS))
        s(
            self,
            "over_bound",
            _choice(self.over_bound, name="over_bound", allowed=OVER_BOUND_ACTIONS),
        )
        s(self, "partial", _choice(self.partial, name="partial", allowed=PARTIAL_POLICIES))
        if self.launch is not None:
            if mode != "first_k":
                raise invalid(
                    "launch",
                    "be None unless mode='first_k'",
                    self.launch,
                    "Drop launch, or set mode='first_k'.",
                )
            nl = as_int(self.launch, name="launch", minimum=b, meaning="rollouts launched per step")
            s(self, "launch", nl)
        elif mode == "first_k":
            if n < b:
                raise invalid(
                    "launch",
                    f"be >= batch={b} for mode='first_k' (its default is slots={n})",
                    None,
                    f"Pass launch >= {b} (rollouts launched per step).",
                )
            s(self, "launch", n)
        if self.eta is not None:
            s(self, "eta", as_int(self.eta, name="eta", minimum=0, meaning="staleness bound"))
        elif mode == "admission":
            raise invalid(
                "eta",
                "be given for mode='admission' (the capacity rule (η + v + 1)·B needs it)",
                None,
                "Pass eta=0, 1, ... (AReaL max_head_offpolicyness).",
            )
        if self.over_bound == "drop" and self.eta is None:
            raise invalid(
                "over_bound",
                "be 'keep' when eta is None (there is no bound to enforce)",
                self.over_bound,
                "Pass eta, or over_bound='keep'.",
            )
        self._check_times()
        if mode in ("sync", "first_k") and self.partial != "none":
            raise invalid(
                "partial",
                f"be 'none' for mode={mode!r} (no rollout is in flight across a publication there "
                "unless carried; use mode='async' or 'admission')",
                self.partial,
                "Pass partial='none'.",
            )
        self._check_trainer_time()
        s(self, "seed", as_int(self.seed, name="seed", minimum=0, meaning="random seed"))
        self._check_slowdown(n)
        self._check_engine_model()
        # lengths
        self._check_lengths()
        if self.preempt_rate > 0:
            self._check_preemption_budget()
        self._check_run_size()

    def _check_times(self) -> None:
        """The times and rates: in float64's exact range (``-0.0`` read as ``0.0``)."""
        s = object.__setattr__
        for name, low_open in (
            ("token_time", True),
            ("prefill_time", False),
            ("reprefill_token_time", False),
            ("preempt_rate", False),
            ("preempt_duration", False),
            ("kv_restore_time", False),
        ):
            what = "(a time)" if name != "preempt_rate" else "(preemptions per slot per time unit)"
            value = as_real(
                getattr(self, name), name=name, low=0.0, low_open=low_open, meaning=what[1:-1]
            )
            _check_range(name, value, low=2.0**-53 if low_open else None)
            s(self, name, value + 0.0)  # + 0.0: -0.0 becomes 0.0
        if not isinstance(self.persist_kv, bool):
            raise wrong_type("persist_kv", "a bool", self.persist_kv, "Pass True or False.")
        if self.preempt_rate > 0 and self.preempt_duration <= 0:
            raise invalid(
                "preempt_duration",
                "be > 0 when preempt_rate > 0 (how long a preempted slot is lost)",
                self.preempt_duration,
                "Pass a positive preempt_duration, or preempt_rate=0.",
            )

    def _check_trainer_time(self) -> None:
        """A trainer step time: a duration >= 0, or a law on [0, inf)."""
        s = object.__setattr__
        tt = self.trainer_time
        if _is_frozen_dist(tt):
            low = float(tt.ppf(0.0))
            if not low >= 0.0:
                raise invalid(
                    "trainer_time",
                    "have support in [0, inf) (a duration)",
                    tt,
                    "Pass a non-negative law, e.g. scipy.stats.expon(scale=5.0).",
                )
        else:
            value = as_real(tt, name="trainer_time", low=0.0, meaning="a time")
            _check_range("trainer_time", value)
            s(self, "trainer_time", value + 0.0)

    def _check_slowdown(self, n: int) -> None:
        """Tabulate the decode slowdown for every busy count 1..n, each finite and > 0."""
        s = object.__setattr__
        if self.slowdown is not None:
            if not callable(self.slowdown):
                raise wrong_type(
                    "slowdown",
                    "a callable busy -> factor",
                    self.slowdown,
                    "Pass e.g. lambda busy: 1 + 0.001 * busy.",
                )
            if n > MAX_SLOWDOWN_SLOTS:
                raise invalid(
                    "slots",
                    f"be <= 2^20 = {MAX_SLOWDOWN_SLOTS} with a slowdown (the factor is tabulated "
                    "once for every busy count 1..slots)",
                    n,
                    "Pass fewer slots, or no slowdown.",
                )
            table = np.ones(n + 1, dtype=np.float64)
            for busy in range(1, n + 1):
                f = float(self.slowdown(busy))
                if not (math.isfinite(f) and 0 < f <= TOKEN_RANGE):
                    raise invalid(
                        "slowdown",
                        "return a finite factor > 0 and <= 2^53 for every busy count 1..slots",
                        self.slowdown,
                        f"slowdown({busy}) returned {f!r}; fix the function.",
                    )
                table[busy] = f
            table.setflags(write=False)
            s(self, "slowdown_table", table)

    def _check_engine_model(self) -> None:
        """The engine mode models async dispatch with its own timing, preemption and prefill."""
        model = self.engine_model
        if model is None:
            return
        if not isinstance(model, EngineModel):
            raise wrong_type(
                "engine_model",
                "an EngineModel or None",
                model,
                "Build one: refimpl.sim.engine.EngineModel(kv_memory_bytes=...).",
            )
        if self.mode != "async":
            raise invalid(
                "mode",
                "be 'async' with an engine_model (the engine admits sequences continuously)",
                self.mode,
                "Pass mode='async', or drop engine_model.",
            )
        inert = (
            ("over_bound", self.over_bound != "keep", "'keep'"),
            ("slowdown", self.slowdown is not None, "None (the roofline sets the step time)"),
            ("prefill_time", self.prefill_time != 0.0, "0 (prefill is priced per token)"),
            ("reprefill_token_time", self.reprefill_token_time != 0.0, "0 (likewise)"),
            ("preempt_rate", self.preempt_rate != 0.0, "0 (the engine preempts on memory)"),
            ("kv_restore_time", self.kv_restore_time != 0.0, "0 (swaps are priced per block)"),
            ("persist_kv", self.persist_kv is not True, "True (set EngineModel.preemption)"),
        )
        for name, bad, want in inert:
            if bad:
                raise invalid(
                    name,
                    f"be {want} with an engine_model",
                    getattr(self, name),
                    f"Drop {name}, or drop engine_model.",
                )

    def _mean_length(self) -> float:
        kind, lengths = self.length_kind, self.lengths
        if kind == "lognormal":
            return math.exp(self.lognormal_mu + 0.5 * self.lognormal_sigma**2)
        if kind == "pmf":
            return float(np.dot(np.arange(1, lengths.size + 1), lengths))
        return float(lengths.mean())

    def _check_run_size(self) -> None:
        """At most :data:`MAX_LAUNCHED_ROLLOUTS` rollouts expected to be launched.

        Trained samples, plus, asynchronously, what the slots keep generating while the trainer
        works: ``slots × steps × trainer_time / (mean rollout time)``, queued without bound.
        """
        launched = float(self.trained_target)
        if self.mode == "first_k" and self.launch is not None:
            launched = float(self.steps) * self.launch
        tt = self.trainer_time
        trainer = float(tt.mean()) if _is_frozen_dist(tt) else float(tt)
        queued = 0.0
        if self.mode == "async" and trainer > 0 and self.length_kind != "matrix":
            duration = self._mean_length() * self.token_time + self.prefill_time
            queued = self.slots * self.steps * trainer / duration
        if launched + queued > MAX_LAUNCHED_ROLLOUTS:
            why = f"{self.steps} steps of batch {self.batch} train {self.trained_target:.4g}" + (
                f", and while the trainer works (trainer_time {trainer:.4g} a step) the "
                f"{self.slots} slots generate about {queued:.3g} more rollouts, queued"
                if queued
                else ""
            )
            named = "rollouts" if self.rollouts is not None else "steps"
            raise invalid(
                named,
                f"keep the run to at most {MAX_LAUNCHED_ROLLOUTS:.0e} launched rollouts (a trace "
                "row each, about 120 bytes)",
                self.rollouts if self.rollouts is not None else self.steps,
                f"This run would launch about {launched + queued:.3g}: {why}. Pass fewer "
                "rollouts or steps"
                + (", a shorter trainer_time or fewer slots." if queued else "."),
            )

    def _check_preemption_budget(self) -> None:
        """At most :data:`MAX_PREEMPTIONS_PER_ROLLOUT` expected preemptions per rollout."""
        mean = self._mean_length()
        expected = self.preempt_rate * (mean * self.token_time + self.prefill_time)
        if expected > MAX_PREEMPTIONS_PER_ROLLOUT:
            raise invalid(
                "preempt_rate",
                f"expect at most {MAX_PREEMPTIONS_PER_ROLLOUT} preemptions per rollout "
                "(preempt_rate x mean rollout time; each is an event, so the run would not end in "
                "reasonable time)",
                self.preempt_rate,
                f"A rollout takes {mean * self.token_time + self.prefill_time:.6g} time units on "
                f"average, so preempt_rate={self.preempt_rate:g} expects {expected:.3g}; pass "
                f"preempt_rate <= {MAX_PREEMPTIONS_PER_ROLLOUT / (mean * self.token_time + self.prefill_time):.3g}.",
            )

    def _check_lengths(self) -> None:
        s = object.__setattr__
        lengths = self.lengths
        if lengths is None:
            mu, sigma = check_lognormal(
                self.lognormal_mu, self.lognormal_sigma, names=("lognormal_mu", "lognormal_sigma")
            )
            s(self, "lognormal_mu", mu)
            s(self, "lognormal_sigma", sigma)
            s(self, "length_kind", "lognormal")
            return
        if _is_frozen_dist(lengths):
            low = float(lengths.ppf(0.0))
            if not low >= 0.0:
                raise invalid(
                    "lengths",
                    "be a law on (0, inf) (rollout lengths in tokens)",
                    lengths,
                    "Pass a positive law, e.g. scipy.stats.lognorm(s=1.0, scale=np.exp(6.0)).",
                )
            s(self, "length_kind", "dist")
            return
        if isinstance(lengths, (str, bytes)):
            raise wrong_type(
                "lengths",
                "None, a frozen scipy.stats law, a 1-D pmf or an N x K matrix",
                lengths,
                "Pass one of those.",
            )
        arr = as_float_array(lengths, name="lengths", ndim=(1, 2))
        if arr.ndim == 1:
            pmf, _ = as_pmf(arr, name="lengths")
            pmf_arr = np.array(pmf, dtype=np.float64)
            pmf_arr.setflags(write=False)
            s(self, "lengths", pmf_arr)
            s(self, "length_kind", "pmf")
            return
        if arr.shape[0] != self.slots:
            raise invalid(
                "lengths",
                f"have one row per slot (slots={self.slots} rows)",
                arr,
                f"Pass an N x K matrix with N={self.slots} (got {arr.shape[0]} rows).",
            )
        if arr.shape[1] < 1:
            raise invalid(
                "lengths", "have at least one column", arr, "Pass K >= 1 lengths per slot."
            )
        if np.any(arr <= 0):
            i, k = np.argwhere(arr <= 0)[0]
            raise invalid(
                "lengths",
                "be > 0 (tokens per rollout)",
                arr,
                f"Entry [{i}, {k}] is {float(arr[i, k])!r}; pass positive lengths.",
            )
        if np.any(arr > TOKEN_RANGE):
            i, k = np.argwhere(arr > TOKEN_RANGE)[0]
            raise invalid(
                "lengths",
                "be <= 2^53 ≈ 9.0e15 tokens (float64 counts single tokens only up to there, and "
                "longer rollouts overflow the clock)",
                arr,
                f"Entry [{i}, {k}] is {float(arr[i, k])!r}; pass token counts <= 2^53.",
            )
        arr = np.ascontiguousarray(arr)
        arr.setflags(write=False)
        s(self, "lengths", arr)
        s(self, "length_kind", "matrix")

    @property
    def trained_target(self) -> int:
        """Samples trained by the end of the run: ``steps * batch``."""
        return self.steps * self.batch

    @property
    def vectorizable(self) -> bool:
        """Whether the vectorized engine applies (timing independent of versions)."""
        plain = (
            self.engine_model is None
            and self.slowdown is None
            and self.partial == "none"
            and self.preempt_rate == 0.0
            and self.over_bound == "keep"
        )
        if not plain:
            return False
        if self.mode == "async":
            return not _is_frozen_dist(self.trainer_time) and float(self.trainer_time) == 0.0
        if self.mode == "sync":
            return self.batch <= self.slots
        if self.mode == "first_k":
            return (
                self.leftovers == "drop" and self.launch is not None and self.launch <= self.slots
            )
        return False

    def initial_columns(self) -> int:
        """Columns drawn at first for a drawn length law (the peer's rule, on the trained target)."""
        return peer_columns(
            self.slots, self.trained_target if self.rollouts is None else self.rollouts
        )
