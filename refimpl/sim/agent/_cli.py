"""Agent rollouts on the command line: the ``refimpl simulate --tool-turns ...`` options, the
:class:`AgentConfig` they build, and the run with its report."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from refimpl._validation import as_int, invalid
from refimpl.sim.agent._config import (
    ADMISSION_POLICIES,
    FAILURE_ACTIONS,
    RECOVERY_MODES,
    AgentConfig,
    _is_discrete,
)
from refimpl.sim.agent._engine import (
    simulate_agent,
)
from refimpl.sim.agent._results import (
    agent_summary_dict,
)


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
    from refimpl.sim._cliopts import default

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

    from refimpl.sim._cliopts import given, plain
    from refimpl.sim._config import check_lognormal

    def opt(dest: str, fallback: Any = None) -> Any:
        return plain(getattr(args, dest, fallback))

    slots = opt("slots", 256)
    batch = as_int(opt("batch", 512), name="--batch", minimum=1, meaning="rollouts per step")
    steps = opt("steps")
    rollouts = opt("rollouts")
    if steps is not None and rollouts is not None:
        raise ValueError(
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
        raise ValueError(
            f"--agent-lengths must not be combined with {source} (each gives the lengths); got "
            f"--agent-lengths={text!r} and {source}. Pass one of them."
        )
    for dest in ("mu", "sigma"):
        other = source or ("--agent-lengths" if text is not None else None)
        if other is not None and given(args, dest):
            raise ValueError(
                f"--{dest} applies only to the default lognormal length law, which {other} "
                f"replaces; got --{dest} {opt(dest)} with {other}. Drop --{dest}, or drop {other}."
            )
    if path is not None:
        from refimpl.sim.cli import _load_lengths_npy

        lengths = _load_lengths_npy(str(path))
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
        from refimpl._validation import as_pmf
        from refimpl.sim.cli import _parse_pmf

        try:
            p, _ = as_pmf(_parse_pmf(str(pmf)), name="--lengths-pmf")
        except ValueError as err:
            raise ValueError(_typed_pmf(str(err), str(pmf))) from None
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
        raise ValueError(
            f"--tool-max-redirects applies only with --tool-admission redirect (a full shard "
            f"sends the call on); got --tool-max-redirects {values['max_redirects']} with "
            f"--tool-admission {values['admission']}. Add --tool-admission redirect, or drop "
            "--tool-max-redirects."
        )
    if given(args, "tool_replay_cost") and values["recovery"] != "replay":
        raise ValueError(
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


def _typed_pmf(message: str, text: str) -> str:
    """Show ``--lengths-pmf`` as typed, not as the array it was parsed into."""
    import re

    return re.sub(
        r"--lengths-pmf=array of shape \(\d+,\): \[[^\]]*\]", f"--lengths-pmf={text!r}", message
    )


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
