"""``refimpl simulate``: run the rollout-queue simulator from the command line.

``refimpl simulate --slots N --batch B --rollouts R --seed S --json`` prints one JSON object with the
SimPy peer's keys (``rollouts_per_s``, ``staleness_mean``, ``staleness_hist``, ``length_mean``, ...)
and the simulator's own (``throughput``, idle fractions, ``length_bias``, tokens wasted and
recomputed, and, with ``--closed-form``, ``closed_form``: what the closed forms of conventions
§dispatch predict, where one applies). The one-time costs of the call (``startup_s``,
``lengths_s``, ``kernel_s``, ``memory_s``, ``total_wall_s``) are reported apart from the run's
rate, and ``kernel_path`` says how the compiled kernels ran (``aot``: loaded from their entries
compiled ahead of time, without numba; ``aot-built``: built first; ``jit``: numba's JIT; ``null``:
no compiled kernel), ``kernel_note`` why the ahead-of-time path was not taken. The command imports what the run needs and no more: scipy.stats only for ``--closed-form`` or
``--trainer-time-random``. ``--lengths-npy FILE`` runs on an explicit ``N × K`` float64 matrix (written by
``numpy.save``), so a run can be compared sample for sample with the SimPy peer on the same lengths.

Every input gets an answer: a bad value, an option the chosen mode does not read, or a value that
float64 cannot simulate meaningfully is refused with one line on stderr and exit status 2, before the
run; no traceback and no numpy warning reaches the user.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import sys
import time
from typing import Any

from refimpl.errors import InvalidArgument
from refimpl.sim import SimConfig, _aot, _simulate_any
from refimpl.sim._cliopts import (
    HelpFormatter,
    check_trace_path,
    default,
    given,
    numeric_guard,
    plain,
    print_result,
    progress_bar,
    since_start,
    small_pages,
)
from refimpl.sim._config import LOG_TOKEN_RANGE, TOKEN_RANGE
from refimpl.sim._lengthfiles import load_lengths_npy, parse_pmf, typed_pmf
from refimpl.sim._lengths import LengthSupply
from refimpl.sim._memory import MapAhead, kept_memory, run_bytes
from refimpl.sim.agent import agent_config_from_args, configure_agent_options, run_agent_cli
from refimpl.sim.agent._cli import agent_kernel_s
from refimpl.sim.engine._cli import (
    ENGINE_ONLY,
    configure_engine_options,
    engine_model_from_args,
    refuse_inert_engine_options,
)

__all__ = ["configure", "run"]


_NEGATIVE_NUMBER = re.compile(r"^-(?:[\d.][\d.eE+,-]*|inf|infinity|nan)$", re.IGNORECASE)


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``simulate`` options to ``parser``.

    Options whose default matters to the checks of :func:`run` (an option the chosen mode does not
    read is refused) store a marked default (:mod:`refimpl.sim._cliopts`), so "not given" can be
    told from "given the default value"; ``--help`` shows every default.
    """
    parser.formatter_class = HelpFormatter
    # argparse reads only -1 and -1.5 as negative numbers: `--mu -1e3`, `--trainer-time -inf` and
    # `--lengths-pmf -0.1,1.1` would be "expected one argument". A dash then a digit, a dot, inf or
    # nan is a value here (no option of simulate looks like that).
    parser._negative_number_matcher = _NEGATIVE_NUMBER
    parser.epilog = (
        "An option the chosen mode does not read is refused (exit 2) rather than ignored; an "
        "option given twice takes its last value. Lengths and times must stay within float64's "
        "exact range: mean length and every time at most 2^53 ~ 9.0e15."
    )
    _run_options(parser)
    _length_options(parser)
    _timing_options(parser)
    _partial_options(parser)
    configure_engine_options(parser)  # the engine mode, on when --engine-model is given
    _output_options(parser)
    configure_agent_options(parser)  # agent rollouts with tool calls, on when --tool-turns is given


def _run_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("run")
    g.add_argument("--slots", type=int, default=default(256), help="N generation slots")
    g.add_argument("--batch", type=int, default=default(512), help="B samples per trainer step")
    g.add_argument(
        "--rollouts",
        type=int,
        default=None,
        help="trained rollouts; runs rollouts // batch steps (default: 100000 unless --steps)",
    )
    g.add_argument(
        "--steps",
        type=int,
        default=None,
        help="trainer steps, instead of --rollouts (default: not set)",
    )
    g.add_argument("--seed", type=int, default=default(0), help="seed of every random draw")
    g.add_argument(
        "--mode",
        choices=["async", "sync", "first_k", "admission"],
        default=default("async"),
        help="dispatch",
    )
    g.add_argument(
        "--launch",
        type=int,
        default=None,
        help="--mode first_k only: rollouts launched per step (default: --slots)",
    )
    g.add_argument(
        "--leftovers",
        choices=["drop", "carry"],
        default=default("drop"),
        help="--mode first_k only: what happens to the rollouts still running when a batch is full",
    )
    g.add_argument(
        "--eta",
        type=int,
        default=None,
        help=(
            "staleness bound η >= 0 (default: none). It acts only with --mode admission (launch "
            "capacity) or --over-bound drop; with the default --over-bound keep in the other modes "
            "it changes nothing, and the run says so on stderr"
        ),
    )
    g.add_argument(
        "--over-bound",
        choices=["keep", "drop"],
        default=default("keep"),
        help="what the trainer does with a sample whose staleness exceeds --eta (drop needs --eta)",
    )
    g.add_argument(
        "--engine",
        choices=["auto", "vector", "compiled", "event"],
        default=default("auto"),
        help="simulation engine (auto: vector where it applies, else compiled when numba is "
        "installed, else event, the reference; all give the same trace)",
    )


def _length_options(parser: argparse.ArgumentParser) -> None:
    lg = parser.add_argument_group(
        "lengths (default: lognormal(mu, sigma), drawn as the SimPy peer draws them)"
    )
    lg.add_argument(
        "--mu",
        type=float,
        default=default(6.0),
        help=(
            f"lognormal log-mean; needs {-LOG_TOKEN_RANGE:.2f} <= mu and mu + sigma^2/2 <= "
            f"{LOG_TOKEN_RANGE:.2f} (= 53 ln 2: median >= 2^-53, mean <= 2^53 tokens)"
        ),
    )
    lg.add_argument("--sigma", type=float, default=default(1.0), help="lognormal log-sd, > 0")
    lg.add_argument(
        "--lengths-npy",
        metavar="FILE",
        default=None,
        help=(
            "N x K float64 matrix of per-slot lengths (row i = slot i's lengths in launch order, "
            "entries in (0, 2^53]), written by numpy.save(FILE, lengths) (default: not set)"
        ),
    )
    lg.add_argument(
        "--lengths-pmf",
        metavar="P1,P2,...",
        default=None,
        help=(
            "discrete pmf over lengths 1..M: comma-separated probabilities P1,...,PM summing to 1 "
            "(write a value that starts with '-' as --lengths-pmf=-0.1,...) (default: not set)"
        ),
    )


def _timing_options(parser: argparse.ArgumentParser) -> None:
    tg = parser.add_argument_group("timing (any time unit; every time at most 2^53)")
    tg.add_argument(
        "--token-time",
        type=float,
        default=default(1.0),
        help="decode time per token, in [2^-53, 2^53]",
    )
    tg.add_argument(
        "--prefill-time", type=float, default=default(0.0), help="prefill time per rollout"
    )
    tg.add_argument(
        "--slowdown-per-slot",
        type=float,
        default=None,
        metavar="A",
        help="decode slowdown factor 1 + A * busy_slots (default: none, factor 1)",
    )
    tg.add_argument("--trainer-time", type=float, default=default(0.0), help="trainer step time")
    tg.add_argument(
        "--trainer-time-random",
        action="store_true",
        help="draw each trainer step time from an exponential law with mean --trainer-time",
    )


def _partial_options(parser: argparse.ArgumentParser) -> None:
    pg = parser.add_argument_group("partial rollouts (--mode async or admission) and preemption")
    pg.add_argument(
        "--partial",
        choices=["none", "restart", "recompute", "keep_kv"],
        default=default("none"),
        help="what happens to rollouts in flight at each publication",
    )
    pg.add_argument(
        "--reprefill-token-time",
        type=float,
        default=default(0.0),
        help="re-prefill time per generated token (--partial recompute, or --no-persist-kv)",
    )
    pg.add_argument(
        "--preempt-rate",
        type=float,
        default=default(0.0),
        help="preemptions per slot per time unit (0: none)",
    )
    pg.add_argument(
        "--preempt-duration",
        type=float,
        default=default(0.0),
        help="time a preempted slot is lost (> 0 with --preempt-rate)",
    )
    pg.add_argument(
        "--no-persist-kv",
        action="store_true",
        help="re-prefill after preemption instead of reloading the saved KV (with --preempt-rate)",
    )
    pg.add_argument(
        "--kv-restore-time",
        type=float,
        default=default(0.0),
        help="time to reload the saved KV after a preemption (with --preempt-rate)",
    )


def _output_options(parser: argparse.ArgumentParser) -> None:
    og = parser.add_argument_group("output")
    og.add_argument("--json", action="store_true", help="print one JSON object")
    og.add_argument(
        "--closed-form",
        action="store_true",
        help=(
            "also print what the closed forms of refimpl.sim.closed_form predict for the run "
            "(null where none applies; loads scipy.stats, about half a second) (default: "
            "closed_form is null)"
        ),
    )
    og.add_argument(
        "--trace",
        metavar="FILE.parquet",
        default=None,
        help=(
            "write the per-rollout trace as Parquet to FILE.parquet (agent runs: a directory of "
            "Parquet files) (default: not written)"
        ),
    )
    og.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: only when stderr is a terminal)",
    )


def _shown(args: argparse.Namespace, dest: str) -> str:
    """The option ``dest`` as the user typed it: ``--leftovers carry``, ``--no-persist-kv``."""
    option = "--" + dest.replace("_", "-")
    value = getattr(args, dest)
    return option if value is True else f"{option} {value}"


# Options of the plain simulator that agent rollouts (--tool-turns) do not model.
_PLAIN_ONLY = (
    "launch",
    "leftovers",
    "engine",
    "prefill_time",
    "slowdown_per_slot",
    "trainer_time",
    "trainer_time_random",
    "partial",
    "reprefill_token_time",
    "preempt_rate",
    "preempt_duration",
    "no_persist_kv",
    "kv_restore_time",
    "engine_model",
    "closed_form",
    *ENGINE_ONLY,
)
# Options of the engine mode, read only with --engine-model.


def _refuse_inert_options(args: argparse.Namespace) -> None:
    """Refuse an option that the chosen mode does not read (a ``ValueError`` naming it).

    argparse would accept it and the run would ignore it; the message names the option, what reads
    it, and how to select that or drop the option.
    """

    def refuse(dest: str, needs: str, fix: str, context: str = "without it") -> None:
        option = "--" + dest.replace("_", "-")
        raise InvalidArgument(
            f"{option} applies only {needs}; got {_shown(args, dest)} {context}. {fix}"
        )

    agent_dests = [d for d in vars(args) if d.startswith("tool_") or d == "agent_lengths"]
    if not given(args, "tool_turns"):
        for dest in agent_dests:
            if given(args, dest):
                refuse(
                    dest,
                    "to agent rollouts with tool calls, which --tool-turns selects",
                    f"Add --tool-turns N (tool calls per rollout), or drop "
                    f"--{dest.replace('_', '-')}.",
                )
    else:
        mode = getattr(args, "mode", "async")
        if given(args, "mode") and mode != "async":
            raise InvalidArgument(
                f"--mode must be async (or not given) with --tool-turns (agent rollouts are "
                f"continuous asynchronous dispatch); got --mode {mode} with --tool-turns "
                f"{args.tool_turns}. Drop --mode, or drop --tool-turns for the plain simulator."
            )
        for dest in _PLAIN_ONLY:
            if given(args, dest):
                option = "--" + dest.replace("_", "-")
                raise InvalidArgument(
                    f"{option} applies only to the plain simulator, which agent rollouts "
                    f"(--tool-turns) do not model; got {_shown(args, dest)} with --tool-turns "
                    f"{args.tool_turns}. Drop {option}, or drop --tool-turns."
                )
        return
    mode = args.mode
    refuse_inert_engine_options(args, refuse)
    if given(args, "leftovers") and mode != "first_k":
        refuse(
            "leftovers",
            f"to --mode first_k (the rollouts still running when a batch is full; --mode {mode} "
            "has none)",
            "Pass --mode first_k, or drop --leftovers.",
        )
    preempt = float(args.preempt_rate) > 0
    for dest in ("preempt_duration", "no_persist_kv", "kv_restore_time"):
        if given(args, dest) and not preempt:
            refuse(
                dest,
                "with preemption, which --preempt-rate R (R > 0) selects",
                f"Add --preempt-rate R, or drop --{dest.replace('_', '-')}.",
            )
    if given(args, "kv_restore_time") and args.no_persist_kv:
        refuse(
            "kv_restore_time",
            "when the saved KV is reloaded after a preemption, which --no-persist-kv turns off "
            "(then the prefix is re-prefilled at --reprefill-token-time)",
            "Drop --no-persist-kv, or drop --kv-restore-time.",
        )
    if (
        given(args, "reprefill_token_time")
        and args.partial != "recompute"
        and not (preempt and args.no_persist_kv)
    ):
        refuse(
            "reprefill_token_time",
            "when generated tokens are re-prefilled: with --partial recompute, or with "
            "--preempt-rate R --no-persist-kv",
            "Add one of those, or drop --reprefill-token-time.",
        )
    if args.lengths_npy is not None or args.lengths_pmf is not None:
        source = "--lengths-npy" if args.lengths_npy is not None else "--lengths-pmf"
        for dest in ("mu", "sigma"):
            if given(args, dest):
                refuse(
                    dest,
                    f"to the default lognormal length law, which {source} replaces",
                    f"Drop --{dest}, or drop {source}.",
                    context=f"with {source}",
                )


def _eta_note(args: argparse.Namespace) -> str | None:
    """A one-line note when ``--eta`` is given but acts on nothing (``--over-bound keep``)."""
    if args.eta is None or args.over_bound == "drop":
        return None
    if not given(args, "tool_turns") and args.mode == "admission":
        return None
    mode = "agent rollouts" if given(args, "tool_turns") else f"--mode {args.mode}"
    return (
        f"refimpl simulate: note: --eta {args.eta} changes nothing here: with --over-bound keep "
        f"(the default) and {mode}, samples staler than {args.eta} are trained and only reported "
        "in staleness_hist; add --over-bound drop to drop them"
        + (", or --mode admission to bound launches." if mode.startswith("--mode") else ".")
    )


# SimConfig fields whose command-line option is not simply ``--field-with-dashes``.
_OPTION_OF_FIELD = {
    "lognormal_mu": "--mu",
    "lognormal_sigma": "--sigma",
    "slowdown": "--slowdown-per-slot",
    "persist_kv": "--no-persist-kv",
    "prefix_sharing": "--no-prefix-sharing",
}
_PLAIN_FIELDS = (
    "slots",
    "batch",
    "rollouts",
    "steps",
    "mode",
    "launch",
    "leftovers",
    "eta",
    "partial",
    "seed",
    "engine",
    "lengths",
    "watermark",
    "prompts",
    "preemption",
)
_UNDERSCORE_FIELDS = (
    "lognormal_mu",
    "lognormal_sigma",
    "over_bound",
    "token_time",
    "prefill_time",
    "trainer_time",
    "reprefill_token_time",
    "preempt_rate",
    "preempt_duration",
    "kv_restore_time",
    "persist_kv",
    "block_size",
    "prompt_tokens",
    "group_size",
    "prefix_sharing",
)


def _option_names(message: str, args: argparse.Namespace) -> str:
    """Rewrite the config's field names in ``message`` as the options the user typed.

    ``lognormal_sigma must be > 0; got lognormal_sigma=-1.0`` becomes ``--sigma must be > 0; got
    --sigma=-1.0``. Underscored names are rewritten everywhere; plain words (``batch``, ``steps``,
    ``lengths``...) only where they name the parameter (``NAME must``, ``NAME=``, ``Pass NAME``,
    ``NAME >= ...``), so prose such as "trainer steps" stays as it is.
    """

    def option(name: str) -> str:
        if name == "lengths":
            return "--lengths-pmf" if args.lengths_pmf is not None else "--lengths-npy"
        return _OPTION_OF_FIELD.get(name, "--" + name.replace("_", "-"))

    message = message.replace("rollouts and steps", "--rollouts and --steps")
    for name in _UNDERSCORE_FIELDS:
        message = re.sub(rf"(?<![-\w]){name}\b", option(name), message)
    for name in _PLAIN_FIELDS:
        message = re.sub(
            rf"(?:(?<=^)|(?<=Pass )|(?<=Drop )|(?<=got )){name}\b|(?<![-\w.]){name}"
            r"(?==| must\b| >=? | <=? | is None\b)",
            option(name),
            message,
        )
    # config idiom -> command-line idiom: None is "not given", choices are written without quotes
    message = message.replace(" must be None unless ", " must not be given unless ")
    message = re.sub(r"(--[a-z-]+) is None\b", r"\1 is not given", message)
    message = re.sub(r"got (--[a-z-]+)=None\b", r"got no \1", message)
    if args.lengths_npy is not None:  # the file the user named, not the array read from it
        message = re.sub(
            r"got --lengths-npy=array of shape (\([^)]*\)): .*?(?=\. [A-Z]|\.$)",
            lambda m: f"got --lengths-npy={args.lengths_npy!r} (shape {m.group(1)})",
            message,
        )
    if args.lengths_pmf is not None:
        message = typed_pmf(message, str(args.lengths_pmf))
    return re.sub(r"(--[a-z-]+)='(\w+)'", r"\1 \2", message)


def _config(args: argparse.Namespace) -> Any:
    lengths: Any = None
    if args.lengths_npy is not None and args.lengths_pmf is not None:
        raise InvalidArgument(
            "--lengths-npy and --lengths-pmf must not both be given; got both. Pass one of them."
        )
    if args.lengths_npy is not None:
        lengths = load_lengths_npy(args.lengths_npy)
    elif args.lengths_pmf is not None:
        lengths = parse_pmf(args.lengths_pmf)
    if args.rollouts is not None and args.steps is not None:
        raise InvalidArgument(
            f"--rollouts and --steps must not both be given (each sets the run length); got "
            f"--rollouts={args.rollouts} and --steps={args.steps}. Pass only one of them."
        )
    rollouts = args.rollouts
    if rollouts is None and args.steps is None:
        rollouts = 100_000
    slowdown = None
    if args.slowdown_per_slot is not None:
        a = float(args.slowdown_per_slot)
        ends = (1.0 + a, 1.0 + a * args.slots)  # 1 + A·busy is linear in busy
        inside = all(0 < f <= TOKEN_RANGE for f in ends)
        if args.slots >= 1 and not (math.isfinite(a) and inside):
            raise InvalidArgument(
                f"--slowdown-per-slot must keep the decode slowdown factor 1 + A·busy in (0, 2^53] "
                f"for busy = 1..--slots (-1/{args.slots} < A <= (2^53 - 1)/{args.slots}); got "
                f"--slowdown-per-slot={a!r}. Pass A >= 0 (decoding slows as slots fill), e.g. "
                "--slowdown-per-slot 0.001."
            )
        slowdown = lambda busy: 1.0 + a * busy  # noqa: E731
    trainer_time: Any = args.trainer_time
    if args.trainer_time_random:
        mean = float(args.trainer_time)
        if not (math.isfinite(mean) and 0 < mean <= TOKEN_RANGE):
            raise InvalidArgument(
                "--trainer-time must be in (0, 2^53] with --trainer-time-random (it is the mean of "
                f"the exponential step time); got --trainer-time={mean!r}. Pass e.g. --trainer-time "
                "5 --trainer-time-random, or drop --trainer-time-random for a fixed step time."
            )
        import scipy.stats  # only here: the simulation alone does not need scipy

        trainer_time = scipy.stats.expon(scale=mean)
    return SimConfig(
        engine_model=engine_model_from_args(args),
        slots=args.slots,
        batch=args.batch,
        rollouts=rollouts,
        steps=args.steps,
        mode=args.mode,
        lengths=lengths,
        lognormal_mu=args.mu,
        lognormal_sigma=args.sigma,
        launch=args.launch,
        leftovers=args.leftovers,
        eta=args.eta,
        over_bound=args.over_bound,
        token_time=args.token_time,
        prefill_time=args.prefill_time,
        slowdown=slowdown,
        trainer_time=trainer_time,
        partial=args.partial,
        reprefill_token_time=args.reprefill_token_time,
        preempt_rate=args.preempt_rate,
        preempt_duration=args.preempt_duration,
        persist_kv=not args.no_persist_kv,
        kv_restore_time=args.kv_restore_time,
        seed=args.seed,
    )


def _run_agent(args: argparse.Namespace, agent: Any, timings: dict[str, float | None]) -> int:
    """Agent rollouts with tool calls (``refimpl.sim.agent``), when --tool-turns is given; the
    one-time costs (``timings``: start-up, the length law; then the kernel) apart from the rate."""
    kernel_s = agent_kernel_s(agent)
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    bar = progress_bar(total=agent.steps, show=show, unit="step")

    def advance(n: int) -> None:  # n: steps done so far (simulate_agent's progress)
        bar.update(n - bar.n)

    try:
        with numeric_guard():
            out = run_agent_cli(agent, trace=args.trace, progress=advance)
    except (FloatingPointError, RuntimeWarning) as err:
        bar.close()
        return _fail(
            f"the run overflows float64 arithmetic ({err}) with these options; scale the lengths "
            "and times down (see refimpl simulate --help for their ranges)."
        )
    except (ValueError, TypeError, RuntimeError, OSError, MemoryError) as err:
        bar.close()
        if _is_size_error(err):
            return _fail(_TOO_BIG.format(why=str(err).split(";")[0]))
        return _fail(str(err))
    bar.close()
    # nothing is mapped ahead for agent rollouts: their memory is their engine's, not a trace's
    out.update(timings, kernel_s=kernel_s, memory_s=0.0, **_aot.kernel_report())
    out.update(total_wall_s=since_start())
    print_result(out, as_json=args.json)
    return 0


def _fail(message: str) -> int:
    print(f"refimpl simulate: {message}", file=sys.stderr)
    return 2


_TOO_BIG = (
    "the run does not fit in memory ({why}): it draws --slots x K lengths up front (K = "
    "ceil(1.25 x rollouts / slots) + 64) and keeps one row per launched rollout. Pass fewer "
    "--rollouts or --steps, fewer --slots or a smaller --batch."
)


def _is_size_error(err: BaseException) -> bool:
    text = str(err)
    return isinstance(err, MemoryError) or (
        isinstance(err, ValueError)
        and ("array is too big" in text or "Maximum allowed dimension" in text)
    )


def _warm_up(cfg: SimConfig, engine: str) -> float:
    """Load (or compile) the kernels the run uses, on one step of the same configuration; its
    seconds, reported apart from the run's rate."""
    t0 = time.perf_counter()
    try:
        tiny = dataclasses.replace(cfg, rollouts=None, steps=1)
        with numeric_guard():
            _simulate_any(tiny, engine=engine, progress=None, like=cfg)
    except (ValueError, TypeError, RuntimeError, FloatingPointError, RuntimeWarning):
        pass  # the run itself reports what is wrong
    return time.perf_counter() - t0


def _closed_form(cfg: SimConfig) -> dict[str, Any] | None:
    """The closed-form predictions for the run, or ``None`` where none applies."""
    if cfg.engine_model is not None:
        return None
    from refimpl.sim import closed_form  # loads scipy.stats, which only this needs

    try:
        with numeric_guard():
            return closed_form(cfg)._asdict()
    except (ValueError, FloatingPointError, RuntimeWarning):
        return None


def run(args: argparse.Namespace) -> int:
    """Run ``refimpl simulate``; return the exit code (2 for a bad configuration). The run's
    arrays are mapped with small pages (:func:`~refimpl.sim._cliopts.small_pages`), and the
    memory the call frees is kept for reuse (:func:`~refimpl.sim._memory.kept_memory`), and a
    kernel runs ahead of time compiled, its entry built first where it is missing
    (:mod:`refimpl.sim._aot`: a command's fresh process is where numba's import costs)."""
    with small_pages(), kept_memory() as kept, _aot.building_when_cached():
        return _run(args, kept=kept)


def _head(
    args: argparse.Namespace,
    cfg: SimConfig,
    wall: float,
    trained: int,
    timings: dict[str, float | None],
) -> dict[str, Any]:
    """The result's first fields: the engine, the configuration, the run's rate and the one-time
    costs reported apart from it."""
    engine = args.engine
    if engine == "auto":  # the engine that ran: the run's own choice, asked again
        from refimpl.sim import _compiled

        if cfg.vectorizable:
            engine = "vector"
        elif cfg.engine_model is not None:
            engine = "compiled" if _compiled.AVAILABLE else "event"
        else:
            engine = "compiled" if _compiled.worth_compiling(cfg) else "event"
    return {
        "impl": f"refimpl-{engine}",
        "mode": cfg.mode if cfg.engine_model is None else "engine",
        "slots": cfg.slots,
        "batch": cfg.batch,
        "rollouts_requested": cfg.rollouts,
        "seed": cfg.seed,
        "sim_wall_s": wall,
        "rollouts_per_s": trained / wall if wall > 0 else float("inf"),
        # one-time costs, apart from the rate above: the interpreter and imports up to the
        # command's start, reading or drawing the lengths, loading (or compiling) the kernels,
        # mapping the memory the run will use (beside the last two: see MapAhead)
        "startup_s": timings.get("startup_s"),
        "lengths_s": timings.get("lengths_s", 0.0),
        "kernel_s": timings.get("kernel_s"),
        "memory_s": timings.get("memory_s"),
        **_aot.kernel_report(),
    }


def _run(args: argparse.Namespace, *, kept: bool = False) -> int:
    timings: dict[str, float | None] = {"startup_s": since_start()}
    try:
        _refuse_inert_options(args)
        t_lengths = time.perf_counter()
        agent = agent_config_from_args(args)
        timings["lengths_s"] = time.perf_counter() - t_lengths  # the agent's length law
    except (ValueError, TypeError) as err:
        return _fail(str(err))
    for name, value in vars(args).items():
        setattr(args, name, plain(value))
    note = _eta_note(args)
    if note is not None:
        print(note, file=sys.stderr)
    if args.trace is not None:
        from refimpl._io import refuse_output_naming_input  # loaded for --trace only

        try:
            check_trace_path(args.trace, directory=agent is not None)
            refuse_output_naming_input(args.trace, [args.lengths_npy], option="--trace")
        except ValueError as err:
            return _fail(str(err))
    if agent is not None:
        return _run_agent(args, agent, timings)
    try:
        t_lengths = time.perf_counter()
        cfg = _config(args)
        lengths_s = time.perf_counter() - t_lengths  # a --lengths-npy file read and checked
    except (ValueError, TypeError) as err:
        return _fail(_option_names(str(err), args))
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    bar = progress_bar(total=cfg.trained_target, show=show, unit="rollout")

    def advance(n: int) -> None:
        bar.update(n)

    # the pages the run's trace will take, and the event kernel's own columns (the engine mode's
    # loop maps its own), touched before it (kept for it) by a thread while the kernels load and
    # the lengths are drawn: reported apart, as memory_s
    kernel = not cfg.vectorizable and cfg.engine_model is None
    ahead = MapAhead(run_bytes(cfg.trained_target + cfg.slots, kernel=kernel)) if kept else None
    try:
        kernel_s = _warm_up(cfg, args.engine)
        with numeric_guard():
            t_lengths = time.perf_counter()
            supply = LengthSupply(cfg)  # drawn apart from the run's rate, as a file is read
            timings["lengths_s"] = lengths_s + time.perf_counter() - t_lengths
            memory_s = ahead.join() if ahead is not None else 0.0
            t0 = time.perf_counter()
            trace, stats = _simulate_any(cfg, engine=args.engine, progress=advance, supply=supply)
            del supply
            wall = time.perf_counter() - t0
            summary = trace.summary()
    except (FloatingPointError, RuntimeWarning) as err:
        bar.close()
        return _fail(
            f"the run overflows float64 arithmetic ({err}) with these options; scale the lengths "
            "and times down (see refimpl simulate --help for their ranges)."
        )
    except (ValueError, TypeError, RuntimeError, MemoryError) as err:
        bar.close()
        if _is_size_error(err):
            return _fail(_TOO_BIG.format(why=str(err).split(";")[0]))
        return _fail(_option_names(str(err), args))
    finally:
        if ahead is not None:
            ahead.join()  # already joined unless the lengths failed
    bar.close()
    timings.update(kernel_s=kernel_s, memory_s=memory_s)
    out = _head(args, cfg, wall, summary.trained, timings)
    out.update(summary.to_json_dict())
    if stats is not None:
        out["engine"] = stats.to_json_dict()
    out["closed_form"] = _closed_form(cfg) if args.closed_form else None
    if args.trace is not None:
        from refimpl._io import atomic_path

        try:
            with atomic_path(args.trace) as tmp:
                trace.to_parquet(tmp)
        except OSError as err:
            return _fail(f"cannot write --trace={args.trace!r}: {err}")
        out["trace"] = args.trace
    out["total_wall_s"] = since_start()
    print_result(out, as_json=args.json)
    return 0
