"""``refimpl simulate``: run the rollout-queue simulator from the command line.

``refimpl simulate --slots N --batch B --rollouts R --seed S --json`` prints one JSON object with the
SimPy peer's keys (``rollouts_per_s``, ``staleness_mean``, ``staleness_hist``, ``length_mean``, ...)
and the simulator's own (``throughput``, idle fractions, ``length_bias``, tokens wasted and
recomputed, and ``closed_form``: what the closed forms of conventions §dispatch predict, where one applies). ``--lengths-npy FILE`` runs on an explicit ``N × K`` float64 matrix, so a run can be
compared sample for sample with the SimPy peer (``tests/peers/simpy_queue.py --save-lengths FILE``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
import time
from typing import Any

import numpy as np

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``simulate`` options to ``parser``."""
    g = parser.add_argument_group("run")
    g.add_argument("--slots", type=int, default=256, help="N generation slots (default 256)")
    g.add_argument(
        "--batch", type=int, default=512, help="B samples per trainer step (default 512)"
    )
    g.add_argument(
        "--rollouts",
        type=int,
        default=None,
        help="trained rollouts; runs rollouts // batch steps (default 100000 unless --steps)",
    )
    g.add_argument("--steps", type=int, default=None, help="trainer steps (instead of --rollouts)")
    g.add_argument("--seed", type=int, default=0, help="seed of every random draw (default 0)")
    g.add_argument(
        "--mode",
        choices=["async", "sync", "first_k", "admission"],
        default="async",
        help="dispatch",
    )
    g.add_argument("--launch", type=int, default=None, help="first_k: rollouts launched per step")
    g.add_argument(
        "--leftovers", choices=["drop", "carry"], default="drop", help="first_k leftovers"
    )
    g.add_argument("--eta", type=int, default=None, help="staleness bound η (default: none)")
    g.add_argument(
        "--over-bound", choices=["keep", "drop"], default="keep", help="samples with s > η"
    )
    g.add_argument(
        "--engine", choices=["auto", "vector", "event"], default="auto", help="simulation engine"
    )
    lg = parser.add_argument_group("lengths (default: lognormal(mu, sigma), drawn as the peer)")
    lg.add_argument("--mu", type=float, default=6.0, help="lognormal log-mean (default 6)")
    lg.add_argument("--sigma", type=float, default=1.0, help="lognormal log-sd (default 1)")
    lg.add_argument(
        "--lengths-npy",
        metavar="FILE",
        default=None,
        help="N x K float64 matrix of per-slot lengths",
    )
    lg.add_argument(
        "--lengths-pmf",
        metavar="P1,P2,...",
        default=None,
        help=(
            "discrete pmf over lengths 1..M: comma-separated probabilities P1,...,PM summing to 1 "
            "(write a value that starts with '-' as --lengths-pmf=-0.1,...)"
        ),
    )
    tg = parser.add_argument_group("timing")
    tg.add_argument("--token-time", type=float, default=1.0, help="decode time per token")
    tg.add_argument("--prefill-time", type=float, default=0.0, help="prefill time per rollout")
    tg.add_argument(
        "--slowdown-per-slot",
        type=float,
        default=None,
        metavar="A",
        help="decode slowdown factor 1 + A * busy_slots",
    )
    tg.add_argument("--trainer-time", type=float, default=0.0, help="trainer step time")
    tg.add_argument(
        "--trainer-time-random",
        action="store_true",
        help="draw each trainer step time from an exponential law with mean --trainer-time",
    )
    pg = parser.add_argument_group("partial rollouts and preemption")
    pg.add_argument(
        "--partial", choices=["none", "restart", "recompute", "keep_kv"], default="none"
    )
    pg.add_argument("--reprefill-token-time", type=float, default=0.0, help="re-prefill time/token")
    pg.add_argument("--preempt-rate", type=float, default=0.0, help="preemptions per slot per time")
    pg.add_argument(
        "--preempt-duration", type=float, default=0.0, help="time a preempted slot is lost"
    )
    pg.add_argument(
        "--no-persist-kv", action="store_true", help="re-prefill after preemption (no saved KV)"
    )
    pg.add_argument("--kv-restore-time", type=float, default=0.0, help="time to reload saved KV")
    og = parser.add_argument_group("output")
    og.add_argument("--json", action="store_true", help="print one JSON object")
    og.add_argument(
        "--trace", metavar="FILE.parquet", default=None, help="write the trace (Parquet)"
    )
    og.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: only when stderr is a terminal)",
    )
    from refimpl.sim.agent import configure_agent_options

    configure_agent_options(parser)  # agent rollouts (issue 9), on when --tool-turns is given


def _load_lengths_npy(path: str) -> Any:
    """Read ``--lengths-npy FILE``: an ``N × K`` real matrix, or a ``ValueError`` naming the option."""
    rule = "name a .npy file holding an N×K float64 matrix (row i = slot i's lengths)"
    fix = (
        "Save the matrix with numpy.save(FILE, lengths) (lengths.shape == (slots, K)), e.g. "
        "shared/peers/simpy_queue.py --save-lengths FILE."
    )
    try:
        loaded = np.load(path, allow_pickle=False)
    except OSError as err:
        reason = err.strerror or str(err)
        raise ValueError(
            f"--lengths-npy must {rule}; got --lengths-npy={path!r}, which cannot be read "
            f"({reason}). Pass the path of an existing, readable file. {fix}"
        ) from None
    except (ValueError, EOFError) as err:
        with open(path, "rb") as fh:
            magic = fh.read(6)
        why = str(err)
        if magic != b"\x93NUMPY" and not magic.startswith(b"PK"):
            why = "no NumPy .npy header: it is not a file written by numpy.save"
        raise ValueError(
            f"--lengths-npy must {rule}; got --lengths-npy={path!r}, which numpy cannot read as a "
            f"plain numeric .npy array ({why}). {fix}"
        ) from None
    if not isinstance(loaded, np.ndarray):  # an .npz archive
        loaded.close()
        raise ValueError(
            f"--lengths-npy must {rule}; got --lengths-npy={path!r}, an .npz archive of arrays "
            f"{sorted(loaded.files)}. Save the one matrix with numpy.save, not numpy.savez."
        )
    if loaded.dtype.kind not in "iuf":
        raise ValueError(
            f"--lengths-npy must be an N×K float64 matrix (row i = slot i's lengths); got an array "
            f"of dtype {loaded.dtype} in {path!r}. Save lengths.astype(numpy.float64). {fix}"
        )
    if loaded.ndim != 2:
        hint = (
            " A pmf over lengths 1..M goes through --lengths-pmf P1,P2,... instead."
            if loaded.ndim == 1
            else ""
        )
        raise ValueError(
            f"--lengths-npy must be an N×K float64 matrix (row i = slot i's lengths); got a "
            f"{loaded.ndim}-D array of shape {loaded.shape} in {path!r}.{hint} {fix}"
        )
    return np.asarray(loaded, dtype=np.float64)


def _check_trace_path(path: str, *, directory: bool) -> None:
    """Fail before the run if ``--trace`` cannot be written (a ``ValueError`` naming the option).

    ``directory``: the agent simulator writes a directory of Parquet files (created with its
    parents); the plain simulator writes one Parquet file into an existing directory.
    """
    what = "a directory it can create or write" if directory else "a file in a writable directory"
    fix = (
        "Pass a path you can write, e.g. --trace ./trace" + ("" if directory else ".parquet") + "."
    )
    target = os.path.abspath(path)
    if directory:
        if os.path.exists(target) and not os.path.isdir(target):
            raise ValueError(
                f"--trace must name {what} (agent runs write one Parquet file per table); got "
                f"--trace={path!r}, an existing file. {fix}"
            )
        probe = target
        while not os.path.exists(probe):
            probe = os.path.dirname(probe)
    else:
        if os.path.isdir(target):
            raise ValueError(
                f"--trace must name {what}; got --trace={path!r}, an existing directory. "
                f"Name the file, e.g. --trace {os.path.join(path, 'trace.parquet')}."
            )
        probe = os.path.dirname(target)
        if not os.path.isdir(probe):
            raise ValueError(
                f"--trace must name {what}; got --trace={path!r}, whose directory {probe!r} does "
                f"not exist. Create it first, or {fix[0].lower()}{fix[1:]}"
            )
    if not os.path.isdir(probe):
        raise ValueError(
            f"--trace must name {what}; got --trace={path!r}, but {probe!r} is not a directory. "
            f"{fix}"
        )
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as err:
        raise ValueError(
            f"--trace must name {what}; got --trace={path!r}, but no file can be created in "
            f"{probe!r} ({err.strerror or err}). {fix}"
        ) from None


def _parse_pmf(text: str) -> Any:
    """Read ``--lengths-pmf P1,...,PM`` into a float array, or a ``ValueError`` naming the option."""
    values = []
    for i, item in enumerate(text.split(","), start=1):
        try:
            values.append(float(item))
        except ValueError:
            raise ValueError(
                f"--lengths-pmf must be comma-separated probabilities of lengths 1..M (P1,...,PM, "
                f"summing to 1); got --lengths-pmf={text!r}, whose entry {i} ({item.strip()!r}, "
                f"the probability of length {i}) is not a number. Pass e.g. --lengths-pmf "
                "0.5,0.3,0.2 (no spaces around the commas unless quoted)."
            ) from None
    return np.array(values, dtype=np.float64)


# SimConfig fields whose command-line option is not simply ``--field-with-dashes``.
_OPTION_OF_FIELD = {
    "lognormal_mu": "--mu",
    "lognormal_sigma": "--sigma",
    "slowdown": "--slowdown-per-slot",
    "persist_kv": "--no-persist-kv",
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
    return re.sub(r"(--[a-z-]+)='(\w+)'", r"\1 \2", message)


def _config(args: argparse.Namespace) -> Any:
    import scipy.stats

    from refimpl.sim import SimConfig

    lengths: Any = None
    if args.lengths_npy is not None and args.lengths_pmf is not None:
        raise ValueError(
            "--lengths-npy and --lengths-pmf must not both be given; got both. Pass one of them."
        )
    if args.lengths_npy is not None:
        lengths = _load_lengths_npy(args.lengths_npy)
    elif args.lengths_pmf is not None:
        lengths = _parse_pmf(args.lengths_pmf)
    if args.rollouts is not None and args.steps is not None:
        raise ValueError(
            f"--rollouts and --steps must not both be given (each sets the run length); got "
            f"--rollouts={args.rollouts} and --steps={args.steps}. Pass only one of them."
        )
    rollouts = args.rollouts
    if rollouts is None and args.steps is None:
        rollouts = 100_000
    slowdown = None
    if args.slowdown_per_slot is not None:
        a = float(args.slowdown_per_slot)
        positive = 1.0 + a > 0 and 1.0 + a * args.slots > 0  # 1 + A·busy is linear in busy
        if args.slots >= 1 and not (math.isfinite(a) and positive):
            raise ValueError(
                f"--slowdown-per-slot must keep the decode slowdown factor 1 + A·busy finite and "
                f"> 0 for busy = 1..--slots (A > -1/{args.slots}); got --slowdown-per-slot={a!r}. "
                "Pass A >= 0 (decoding slows as slots fill), e.g. --slowdown-per-slot 0.001."
            )
        slowdown = lambda busy: 1.0 + a * busy  # noqa: E731
    trainer_time: Any = args.trainer_time
    if args.trainer_time_random:
        mean = float(args.trainer_time)
        if not (math.isfinite(mean) and mean > 0):
            raise ValueError(
                "--trainer-time must be finite and > 0 with --trainer-time-random (it is the mean of "
                f"the exponential step time); got --trainer-time={mean!r}. Pass e.g. --trainer-time "
                "5 --trainer-time-random, or drop --trainer-time-random for a fixed step time."
            )
        trainer_time = scipy.stats.expon(scale=mean)
    return SimConfig(
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


def _jsonable(value: Any) -> Any:
    """Replace non-finite floats by ``None`` (strict JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def _print(out: dict[str, Any], *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(_jsonable(out), allow_nan=False))
        return
    for key, value in out.items():
        if key == "staleness_hist":
            value = " ".join(str(v) for v in value)
        elif isinstance(value, dict):
            value = ", ".join(
                f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in value.items()
            )
        print(f"{key:22s} {value}")


def _run_agent(args: argparse.Namespace, agent: Any) -> int:
    """Agent rollouts with tool calls (``refimpl.sim.agent``, issue 9), when --tool-turns is given."""
    from tqdm import tqdm

    from refimpl.sim.agent import run_agent_cli

    show = args.progress if args.progress is not None else sys.stderr.isatty()
    bar = tqdm(total=agent.steps, file=sys.stderr, disable=not show, unit="step", leave=False)

    def advance(n: int) -> None:
        bar.update(n)

    try:
        out = run_agent_cli(agent, trace=args.trace, progress=advance)
    except (ValueError, TypeError, RuntimeError, OSError) as err:
        bar.close()
        print(f"refimpl simulate: {err}", file=sys.stderr)
        return 2
    bar.close()
    _print(out, as_json=args.json)
    return 0


def run(args: argparse.Namespace) -> int:
    """Run ``refimpl simulate``; return the exit code (2 for a bad configuration)."""
    from tqdm import tqdm

    from refimpl.sim import simulate
    from refimpl.sim.agent import agent_config_from_args

    try:
        agent = agent_config_from_args(args)
    except (ValueError, TypeError) as err:
        print(f"refimpl simulate: {err}", file=sys.stderr)
        return 2
    if args.trace is not None:
        try:
            _check_trace_path(args.trace, directory=agent is not None)
        except ValueError as err:
            print(f"refimpl simulate: {err}", file=sys.stderr)
            return 2
    if agent is not None:
        return _run_agent(args, agent)
    try:
        cfg = _config(args)
    except (ValueError, TypeError) as err:
        print(f"refimpl simulate: {_option_names(str(err), args)}", file=sys.stderr)
        return 2
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    bar = tqdm(
        total=cfg.trained_target, file=sys.stderr, disable=not show, unit="rollout", leave=False
    )

    def advance(n: int) -> None:
        bar.update(n)

    t0 = time.perf_counter()
    try:
        trace = simulate(cfg, engine=args.engine, progress=advance)
    except (ValueError, TypeError, RuntimeError) as err:
        bar.close()
        print(f"refimpl simulate: {_option_names(str(err), args)}", file=sys.stderr)
        return 2
    wall = time.perf_counter() - t0
    bar.close()
    summary = trace.summary()
    engine = args.engine
    if engine == "auto":
        engine = "vector" if cfg.vectorizable else "event"
    out: dict[str, Any] = {
        "impl": f"refimpl-{engine}",
        "mode": cfg.mode,
        "slots": cfg.slots,
        "batch": cfg.batch,
        "rollouts_requested": cfg.rollouts,
        "seed": cfg.seed,
        "sim_wall_s": wall,
        "rollouts_per_s": summary.trained / wall if wall > 0 else float("inf"),
    }
    out.update(summary.to_json_dict())
    from refimpl.sim import closed_form

    try:
        out["closed_form"] = closed_form(cfg)._asdict()
    except ValueError:
        out["closed_form"] = None
    if args.trace is not None:
        try:
            trace.to_parquet(args.trace)
        except OSError as err:
            print(f"refimpl simulate: cannot write --trace={args.trace!r}: {err}", file=sys.stderr)
            return 2
        out["trace"] = args.trace
    _print(out, as_json=args.json)
    return 0
