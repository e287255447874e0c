"""Agent rollouts on the command line: the ``refimpl simulate --tool-turns ...`` options, the
:class:`AgentConfig` they build, and the run with its report."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from refimpl._validation import as_int, as_pmf, invalid
from refimpl.errors import InvalidArgument
from refimpl.sim._cliopts import default, given, plain
from refimpl.sim._config import check_lognormal
from refimpl.sim._lengthfiles import load_lengths_npy, parse_pmf
from refimpl.sim._lengthfiles import typed_pmf as _typed_pmf
from refimpl.sim.agent._config import (
    ADMISSION_POLICIES,
    FAILURE_ACTIONS,
    RECOVERY_MODES,
    AgentConfig,
    _is_discrete,
)
from refimpl.sim.agent._lognormal import LognormalLaw


def _law_from_text(text: str, *, option: str, integer: bool = False, positive: bool = False) -> Any:
    """``"2.5"`` -> 2.5; ``"expon:scale=2"`` -> ``scipy.stats.expon(scale=2.0)``, validated.

    A law must have finite parameters that scipy accepts, support in ``[0, inf)`` (``positive``:
    a discrete law from 1 on), an integer-valued (discrete) law when ``integer``, and a finite mean
    of at most ``2^53``; each failure is a ``ValueError`` naming ``option`` and quoting ``text``.
    """
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
        return _number_from_text(text, option=option, integer=integer)
    name, _, params = text.partition(":")
    name = name.strip()
    maker = _scipy_maker(name, text=text, option=option)
    kwargs = _law_parameters(params, text=text, option=option)
    law, low, mean = _frozen_law(maker, kwargs, name=name, text=text, option=option)
    _check_law_support(law, low, text=text, option=option, integer=integer, positive=positive)
    limit = 2.0**20 if integer else 2.0**53
    if not mean <= limit:
        raise invalid(
            option,
            f"have a finite mean <= {'2^20 tool calls' if integer else '2^53 ≈ 9.0e15'}",
            text,
            f"Its mean is {mean:g}; pass smaller parameters.",
        )
    return law


def _number_from_text(text: str, *, option: str, integer: bool) -> Any:
    """``"2"`` -> 2 (``integer``: a count in ``[0, 2^20]``) or ``"2.5"`` -> 2.5 (a time in
    ``[0, 2^53]``), refused naming ``option``."""
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


def _scipy_maker(name: str, *, text: str, option: str) -> Any:
    """The ``scipy.stats`` distribution called ``name``, refused unless it can be frozen."""
    import scipy.stats

    maker = getattr(scipy.stats, name, None)
    if maker is None or not callable(getattr(maker, "freeze", None)):
        raise invalid(
            option,
            "name a scipy.stats distribution",
            text,
            f"{name!r} is not one; use e.g. expon, lognorm, gamma, poisson.",
        )
    return maker


def _law_parameters(params: str, *, text: str, option: str) -> dict[str, float]:
    """``"s=1,scale=400"`` -> ``{"s": 1.0, "scale": 400.0}``: each key once, finite numbers."""
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
    return kwargs


def _frozen_law(
    maker: Any, kwargs: dict[str, float], *, name: str, text: str, option: str
) -> tuple[Any, float, float]:
    """``maker(**kwargs)`` with the low end of its support and its mean, refused when scipy
    rejects the parameters (or answers NaN for its support)."""
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
            f"Check each parameter's domain in the scipy.stats.{name} documentation.",
        )
    return law, low, mean


def _check_law_support(
    law: Any, low: float, *, text: str, option: str, integer: bool, positive: bool
) -> None:
    """Refuse a continuous law for a count (``integer``), and a support below 0 (``positive``:
    below 1 for a discrete law)."""
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
        _add_run_options(parser)
    g = parser.add_argument_group(
        "agent rollouts (tool calls in sandbox pools; on when --tool-turns is given; every --tool-* "
        "option needs it)"
    )
    _add_pool_options(g)
    _add_failure_options(g)


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    """The plain simulator's run options, for an agent parser used without ``refimpl.sim.cli``."""
    parser.add_argument("--slots", type=int, default=default(256), help="generation slots N")
    parser.add_argument(
        "--batch", type=int, default=default(512), help="rollouts per trainer step B"
    )
    parser.add_argument(
        "--rollouts", type=int, default=None, help="steps = rollouts // B (default: 100000)"
    )
    parser.add_argument("--steps", type=int, default=None, help="trainer steps (default: not set)")
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
    parser.add_argument("--eta", type=int, default=None, help="staleness bound η (default: none)")
    parser.add_argument("--over-bound", choices=["keep", "drop"], default=default("keep"))
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _add_pool_options(g: argparse._ArgumentGroup) -> None:
    """The rollout's tool calls and the sandbox pool that serves them (``--tool-turns`` to
    ``--tool-keepalive``)."""
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


def _add_failure_options(g: argparse._ArgumentGroup) -> None:
    """Crashes, timeouts and retries of tool calls (``--tool-crash-rate`` to
    ``--tool-on-failure``)."""
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
    batch, steps = _run_length(args)
    lengths = _lengths_from_args(args)
    values = _agent_values(args, batch=batch, steps=steps, lengths=lengths)
    _check_option_pairs(args, values)
    _check_time_ranges(values)
    try:
        return AgentConfig(**values)
    except (ValueError, TypeError) as err:
        raise type(err)(_cli_names(str(err))) from None


def _opt(args: argparse.Namespace, dest: str, fallback: Any = None) -> Any:
    """The value of option ``dest`` (``fallback`` when the parser lacks it), unwrapped from its
    default marker."""
    return plain(getattr(args, dest, fallback))


def _run_length(args: argparse.Namespace) -> tuple[int, int]:
    """``(batch, steps)``: ``--steps``, or ``--rollouts // --batch`` (default 100000 rollouts)."""
    batch = as_int(_opt(args, "batch", 512), name="--batch", minimum=1, meaning="rollouts per step")
    steps = _opt(args, "steps")
    rollouts = _opt(args, "rollouts")
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
    return batch, steps


def _lengths_from_args(args: argparse.Namespace) -> Any:
    """The rollout length law or ``N × K`` matrix: ``--lengths-npy``, ``--lengths-pmf``,
    ``--agent-lengths`` or the default lognormal(``--mu``, ``--sigma``), at most one given."""
    path = _opt(args, "lengths_npy")
    pmf = _opt(args, "lengths_pmf")
    text = _opt(args, "agent_lengths")
    _check_length_sources(args, path=path, pmf=pmf, text=text)
    if path is not None:
        return _lengths_from_npy(str(path))
    if pmf is not None:
        return _lengths_from_pmf(str(pmf))
    if text is not None:
        return _law_from_text(text, option="--agent-lengths", positive=True)
    mu, sigma = check_lognormal(
        _opt(args, "mu", 6.0), _opt(args, "sigma", 1.0), names=("--mu", "--sigma")
    )
    # scipy.stats.lognorm(s=sigma, scale=exp(mu))'s draws, without importing scipy.stats
    return LognormalLaw(mu=mu, sigma=sigma)


def _check_length_sources(args: argparse.Namespace, *, path: Any, pmf: Any, text: Any) -> None:
    """Refuse two sources of lengths, and ``--mu``/``--sigma`` beside a source that replaces the
    lognormal they shape."""
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
                f"replaces; got --{dest} {_opt(args, dest)} with {other}. Drop --{dest}, or drop "
                f"{other}."
            )


def _lengths_from_npy(path: str) -> Any:
    """The length matrix saved at ``path``: finite, > 0 and <= 2^53 tokens."""
    lengths = load_lengths_npy(path)
    if lengths.size and not np.all(np.isfinite(lengths) & (lengths > 0)):
        raise invalid(
            "--lengths-npy",
            "hold finite lengths > 0 (tokens per rollout)",
            path,
            "Save positive, finite lengths with numpy.save(path, lengths).",
        )
    if lengths.size and float(lengths.max()) > 2.0**53:
        raise invalid(
            "--lengths-npy",
            "hold lengths <= 2^53 ≈ 9.0e15 tokens (float64 counts single tokens only up to there)",
            path,
            f"Its largest entry is {float(lengths.max())!r}; save token counts <= 2^53.",
        )
    return lengths


def _lengths_from_pmf(pmf: str) -> Any:
    """The discrete law on ``1..M`` given by ``--lengths-pmf``."""
    import scipy.stats

    try:
        p, _ = as_pmf(parse_pmf(pmf), name="--lengths-pmf")
    except ValueError as err:
        raise InvalidArgument(_typed_pmf(str(err), pmf)) from None
    probs = np.asarray(p, dtype=np.float64)
    return scipy.stats.rv_discrete(values=(np.arange(1, probs.size + 1), probs))


def _agent_values(
    args: argparse.Namespace, *, batch: int, steps: int, lengths: Any
) -> dict[str, Any]:
    """:class:`AgentConfig`'s keyword arguments from the options (the laws parsed, the bound
    only with ``--over-bound drop``)."""

    def opt(dest: str, fallback: Any = None) -> Any:
        return _opt(args, dest, fallback)

    eta = opt("eta") if opt("over_bound", "keep") == "drop" else None
    return {
        "slots": opt("slots", 256),
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


def _check_option_pairs(args: argparse.Namespace, values: dict[str, Any]) -> None:
    """Refuse ``--tool-max-redirects`` without redirect admission and ``--tool-replay-cost``
    without replay recovery: each would change nothing."""
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


def _check_time_ranges(values: dict[str, Any]) -> None:
    """Refuse a finite time option past 2^53, where the float64 clock stops being exact."""
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
    from refimpl.sim.agent._engine import simulate_agent  # loaded for a run with tool calls only
    from refimpl.sim.agent._results import agent_summary_dict

    start = time.perf_counter()
    result = simulate_agent(config, progress=progress)
    wall = time.perf_counter() - start
    if trace is not None:
        result.to_parquet(trace)
    out = agent_summary_dict(result)
    out["wall_s"] = wall
    out["rollouts_per_s"] = result.summary.rollouts_trained / wall if wall > 0 else None
    return out


def agent_kernel_s(config: AgentConfig) -> float:
    """Seconds to make ready the kernel a run of ``config`` uses (compile it, or load it from
    numba's cache), by running one trainer step with the engine the whole run chooses; the
    ``kernel_s`` that ``refimpl simulate`` reports apart from the run's rate. A step that fails
    is left to the run itself to report.

    Examples
    --------
    >>> import numpy as np
    >>> cfg = AgentConfig(slots=2, batch=2, steps=3, lengths=np.ones((2, 16)), turns=0)
    >>> agent_kernel_s(cfg) >= 0.0
    True
    """
    from refimpl.sim.agent import _compiled  # loaded for a run with tool calls only
    from refimpl.sim.agent._engine import simulate_agent

    start = time.perf_counter()
    engine: Literal["compiled", "event"] = (
        "compiled" if _compiled.worth_compiling(config) else "event"
    )
    with contextlib.suppress(ValueError, TypeError, RuntimeError, FloatingPointError):
        simulate_agent(dataclasses.replace(config, steps=1), engine=engine)
    return time.perf_counter() - start
