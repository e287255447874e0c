#!/usr/bin/env python3
"""Benchmark refimpl.sim in every mode against SimPy, measured in the same run.

Model (the peer's): N = 256 slots, B = 512, lognormal(6, 1) lengths, seed 0.

1. Ratios at R rollouts (default 10^6), for every mode: our rollouts/s (``simulate``'s ``auto``
   engine for plain async, the vectorized one; the compiled engine, asked for by name, for the
   rest, agent rollouts included, so that a cold numba cache does not hand a mode to the
   reference engine; best of a few repeats, after WARMUP untimed runs) against the plain
   SimPy peer's (``tests/peers/simpy_queue.py``, ``--variant store``, timed once) and against a
   straightforward SimPy model of that same mode (``benchmarks/simpy_modes.py``), each first checked
   sample for sample against ours on the same length matrix. Targets: plain async >= 100x the peer,
   every other mode >= 20x, agent rollouts >= 10x. The engine mode (an inference engine under a KV
   budget, ``refimpl.sim.engine``) is held to its own SimPy model (>= 20x) and to plain async's
   time (within 20x of it).
2. A user's call: ``refimpl simulate ... --json`` in a fresh process per mode, its whole wall time
   against the plain peer's whole call (``simpy_queue.py`` in a fresh process), and the rate the
   command reports against the warmed rate of 1. Targets: >= 10x the peer's wall time in every
   mode (plain async >= 20x), and a reported rate within 1.5x of the warmed one. The one-time costs
   the command reports apart (start-up, lengths, kernel loading, mapping the run's memory ahead)
   are printed beside, with the run's own time, the seconds between the command's last report
   and the process's end (the interpreter's exit), and the path its kernels ran by (``aot``: the
   entry compiled ahead of time, loaded without numba; ``jit``: numba's; ``-``: no kernel). The
   untimed first call of each mode, at the timed size, builds a missing ahead-of-time entry, as
   a user's first call does.
3. Scaling from 10^5 to 10^7 rollouts, every mode: wall time and peak RSS (VmHWM) of a fresh
   subprocess per size (lengths drawn inside it), after a warm-up run of two trainer steps whose
   time (the fixed cost: loading the compiled kernel, first calls) is printed apart; the time per
   rollout shows how far the cost is from linear. Targets: 10^7 rollouts in 2 GiB, and a cost
   that grows linearly. A linear algorithm's time need not grow 10x from 10^6 to 10^7 rows: at
   10^6 a trace's columns (tens of MB) partly fit in the caches, at 10^7 they do not. So the same
   sizes run a memory-bound reference (a copy of 8 float64 columns and one random gather, linear
   as an algorithm), printed beside. And a fresh process pays for mapping fresh memory on first
   touch (about 2 s per GiB on this machine), which a 10^7-row run needs a GiB of: so each size
   also runs again in the same process (best of 3, of 2 at 10^7), and a mode counts as linear
   while that repeated run's user CPU time grows at most 13x for the last x10 (its wall and
   system times are printed beside: see LINEAR_GROWTH for why the system time is not the
   engine's).

Usage: python benchmarks/bench_sim.py [--quick] [--rollouts R] [--modes a,b] [--no-fresh]
[--no-scaling]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SLOTS, BATCH, SEED = 256, 512, 0
GIB = 1024**3


def load_peer() -> ModuleType:
    env = os.environ.get("REFIMPL_PEERS")
    candidates = [Path(env)] if env else []
    candidates += [ROOT.parent / "shared" / "peers", ROOT.parents[1] / "shared" / "peers"]
    # The vendored copy, identical to the shared one (tests/test_peers.py).
    candidates.append(ROOT / "tests" / "peers")
    for c in candidates:
        path = c / "simpy_queue.py"
        if path.is_file():
            spec = importlib.util.spec_from_file_location("simpy_queue_peer", path)
            assert spec is not None
            assert spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    raise SystemExit(
        "bench_sim: the SimPy peer simpy_queue.py was not found (vendored in tests/peers/, or a peer "
        "directory next to the repository); set REFIMPL_PEERS to its directory."
    )


def best_of(repeats: int, fn: Any, warmup: int = 0) -> tuple[float, float, Any]:
    """Best wall time, best CPU time (process_time: less sensitive to a shared machine), result,
    of ``repeats`` calls after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    best, best_cpu, out = float("inf"), float("inf"), None
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    return best, best_cpu, out


#: Untimed runs of our engine before its timed ones, in each mode. The first call loads the
#: mode's kernels from numba's cache; and right after the peer's run, the next few runs of a
#: 10^6-rollout trace paid 30-100 ms of system time each (the kernel zeroing and compacting the
#: pages of fresh arrays) where later ones paid 0-16 ms: plain async took 43-45 ms a run from
#: the sixth on, 53-145 ms before (2 December, measured in this order in one process). The peer
#: is timed once: its run takes 5.5 s, which such a transient does not move.
WARMUP = 5

# Every mode of the table: name -> (SimConfig options, SimPy model, its options, target x
# the plain peer). The SimPy models are in benchmarks/simpy_modes.py.
PREEMPT = {"preempt_rate": 1e-4, "preempt_duration": 100.0}
MODES: dict[str, tuple[dict[str, Any], str | None, dict[str, Any], float]] = {
    "async": ({}, None, {}, 100.0),
    "async, eta=1, drop over the bound": (
        {"eta": 1, "over_bound": "drop"},
        "drop",
        {"eta": 1},
        20.0,
    ),
    "first_k, launch 600": ({"mode": "first_k", "launch": 600}, "first_k", {"launch": 600}, 20.0),
    "async, partial keep_kv": ({"partial": "keep_kv"}, "partial", {"partial": "keep_kv"}, 20.0),
    "async, partial recompute": (
        {"partial": "recompute"},
        "partial",
        {"partial": "recompute"},
        20.0,
    ),
    "async, partial restart": ({"partial": "restart"}, "partial", {"partial": "restart"}, 20.0),
    "async, checkpoint preemption": (
        PREEMPT,
        "preemption",
        {"rate": 1e-4, "duration": 100.0, "seed": SEED},
        20.0,
    ),
    "admission control, eta=1": ({"mode": "admission", "eta": 1}, "admission", {"eta": 1}, 20.0),
    # plain async on the same lengths rounded up to whole tokens, as a trainer's are: completions
    # then tie often (at 10^6 about one in seven has a neighbour at the same instant), and the tie
    # rule orders them (conventions §async-dispatch). Its model is the plain peer on those lengths.
    "async, integer lengths (ties)": ({"ceil_lengths": True}, None, {}, 100.0),
}
# Rollouts whose lengths a mode uses per trained one, beyond the peer's margin (restart aborts and
# relaunches): the length matrix is drawn for that many more rollouts.
LENGTHS_FACTOR = {"async, partial restart": 2.0, "first_k, launch 600": 1.5}
AGENT = "agent rollouts, 2 tool turns"
AGENT_OPTIONS: dict[str, Any] = {"turns": 2, "tool_latency": 50.0, "shards": 4, "capacity": 64}
# The engine mode: Qwen2.5-7B on an H100's roofline, 64-token prompts held per sequence (the SimPy
# model shares none). With the preset's 48 GiB of KV (56173 blocks of 16 tokens) 256 sequences fit
# at once; with 8 GiB (9362 blocks) they do not, and the engine preempts (newest first, recompute)
# about once per rollout: the second row.
ENGINE = "engine mode, Qwen2.5-7B/H100, 48 GiB KV"
ENGINE_TIGHT = "engine mode, 8 GiB KV: preemption"
ENGINE_PRESET = "qwen2.5-7b-h100"
ENGINE_OPTIONS: dict[str, dict[str, Any]] = {
    ENGINE: {"prompt_tokens": 64, "prefix_sharing": False},
    ENGINE_TIGHT: {"prompt_tokens": 64, "prefix_sharing": False, "kv_memory_bytes": 8 * 2**30},
}
ENGINE_TARGET = 20.0  # x its SimPy model; and its time within ENGINE_TARGET x plain async's


def engine_model(name: str) -> Any:
    from refimpl.sim.engine import EngineModel

    return EngineModel.preset(ENGINE_PRESET, **ENGINE_OPTIONS[name])


# The same modes as `refimpl simulate` options, for the fresh-process calls.
CLI_FLAGS: dict[str, list[str]] = {
    "async": [],
    "async, eta=1, drop over the bound": ["--eta", "1", "--over-bound", "drop"],
    "first_k, launch 600": ["--mode", "first_k", "--launch", "600"],
    "async, partial keep_kv": ["--partial", "keep_kv"],
    "async, partial recompute": ["--partial", "recompute"],
    "async, partial restart": ["--partial", "restart"],
    "async, checkpoint preemption": ["--preempt-rate", "1e-4", "--preempt-duration", "100"],
    "admission control, eta=1": ["--mode", "admission", "--eta", "1"],
    "async, integer lengths (ties)": [],  # --lengths-npy added by fresh_calls
    AGENT: ["--tool-turns", "2", "--tool-latency", "50", "--tool-shards", "4", "--tool-capacity", "64"],
    ENGINE: ["--engine-model", ENGINE_PRESET, "--prompt-tokens", "64", "--no-prefix-sharing"],
    ENGINE_TIGHT: [
        "--engine-model", ENGINE_PRESET, "--prompt-tokens", "64", "--no-prefix-sharing",
        "--kv-memory-gib", "8",
    ],
}  # fmt: skip


def _ordering(cfg: Any) -> str:
    """How ``simulate``'s ``auto`` engine orders a vectorized run's rows in this process: by the
    compiled kernels where their ahead-of-time entries are built (by :func:`build_ordering`, as a
    user's first ``refimpl simulate`` call builds them) or numba holds them, else by numpy; the
    order is the same. Empty for the other engines."""
    from refimpl.sim import _vector_compiled

    if not cfg.vectorizable:
        return ""
    how = "compiled kernels" if _vector_compiled.worth_compiling(cfg) else "numpy"
    return f" (rows ordered by {how})"


def build_ordering() -> None:
    """Build the vectorized ordering kernels' ahead-of-time entries where they are missing, as a
    user's first ``refimpl simulate`` call of ``COMMAND_BUILD_ROLLOUTS`` rollouts or more does
    (once for the machine): the warmed rows are then ordered as the fresh calls are."""
    from refimpl.sim import SimConfig, _aot, simulate

    with _aot.building_when_cached():  # (trained rollouts: whole steps of BATCH, so twice)
        rollouts = 2 * _aot.COMMAND_BUILD_ROLLOUTS
        simulate(SimConfig(slots=SLOTS, batch=BATCH, rollouts=rollouts, seed=SEED))


def load_models() -> ModuleType:
    path = Path(__file__).resolve().parent / "simpy_modes.py"
    spec = importlib.util.spec_from_file_location("simpy_modes", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CHILD = r"""
import json, resource, sys, time
import numpy as np
import scipy.stats
from refimpl.sim import SimConfig, simulate
from refimpl.sim.agent import AgentConfig, simulate_agent
rollouts, mode = int(sys.argv[1]), sys.argv[2]
options = json.loads(sys.argv[3])
if mode == "engine":
    from refimpl.sim.engine import EngineModel
    engine_model = EngineModel.preset(options["preset"], **options["fields"])
def run(n):
    if mode == "engine":
        simulate(SimConfig(slots={slots}, batch={batch}, rollouts=n, seed={seed},
                           engine_model=engine_model))
    elif mode == "agent":
        cfg = AgentConfig(slots={slots}, batch={batch}, steps=n // {batch},
                          lengths=scipy.stats.lognorm(s=1.0, scale=403.4287934927351), seed={seed},
                          **options)
        simulate_agent(cfg)
    elif options.get("ceil_lengths"):  # the lognormal(6, 1) matrix rounded up to whole tokens
        k = -(-n * 5 // (4 * {slots})) + 64
        lengths = np.ceil(np.random.default_rng({seed}).lognormal(6.0, 1.0, size=({slots}, k)))
        simulate(SimConfig(slots={slots}, batch={batch}, rollouts=n, lengths=lengths))
    else:
        simulate(SimConfig(slots={slots}, batch={batch}, rollouts=n, seed={seed}, **options))
# the fixed cost, apart: the first call loads the compiled kernel from numba's cache (or compiles
# it) and warms the interpreter; two trainer steps of the same mode
t0 = time.perf_counter()
run(2 * {batch})
t1 = time.perf_counter()
run(rollouts)
t2 = time.perf_counter()
with open("/proc/self/status") as f:  # this process image's own peak resident memory
    rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
# the same run again, in this process (its first run paid for mapping fresh pages, which on this
# machine costs about 2 s per GiB): the best of 3 (of 2 above 10^6), with that run's user and
# system CPU time (the kernel's share: zeroing the pages of arrays mapped afresh)
again, user, system = float("inf"), 0.0, 0.0
for _ in range(3 if rollouts <= 10**6 else 2):
    r0, t3 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    run(rollouts)
    t4, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    if t4 - t3 < again:
        again, user, system = t4 - t3, r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime
print(json.dumps({{"warmup_s": t1 - t0, "sim_s": t2 - t1, "again_s": again, "again_user_s": user,
                  "again_sys_s": system, "peak_rss": rss}}))
"""


def scaling_run(rollouts: int, mode: str, options: dict[str, Any]) -> dict[str, Any]:
    code = CHILD.format(slots=SLOTS, batch=BATCH, seed=SEED)
    out = subprocess.run(
        [sys.executable, "-c", code, str(rollouts), mode, json.dumps(options)],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


REFERENCE = r"""
import json, sys, time
import numpy as np
n = int(sys.argv[1])
rng = np.random.default_rng(0)
columns = rng.random((8, n))  # about a trace's columns
where = rng.permutation(n)
best = float("inf")
for _ in range(3):
    t0 = time.perf_counter()
    columns.copy()
    columns[0][where]
    best = min(best, time.perf_counter() - t0)
print(json.dumps({"s": best}))
"""


def memory_reference(rollouts: int) -> float:
    """Seconds of a memory-bound job of the size of a trace of ``rollouts`` rows, in a fresh
    process: a copy of 8 float64 columns and one random gather. Its time is linear in the rows'
    count as an algorithm, and shows what the machine's caches and first touch add on top as the
    arrays outgrow them: a yardstick for the modes' first runs, printed beside them (a mode that
    does less memory traffic per row grows less: plain async grew x11.3 where this grew x14.6)."""
    out = subprocess.run(
        [sys.executable, "-c", REFERENCE, str(rollouts)], check=True, capture_output=True, text=True
    )
    seconds: float = json.loads(out.stdout)["s"]
    return seconds


#: A mode's cost counts as linear while the user CPU time of a run repeated in the same process
#: grows at most this much for 10x the rollouts: 30 % over 10x leaves room for the caches, which
#: hold part of a 10^6-row trace and none of a 10^7-row one. User time, because the system time of
#: the repeated run is the kernel zeroing fresh pages, and glibc's malloc serves a 10^6-row
#: trace's arrays (under its 32 MiB mapping threshold) from memory freed by the previous run but
#: maps every array of a 10^7-row trace afresh: that share grows x20-x50 for x10 the rows. Both
#: are printed.
LINEAR_GROWTH = 13.0


def engine_row(
    args: Any,
    name: str,
    models: ModuleType,
    lengths: Any,
    steps: int,
    trained: int,
    t_peer: float,
    c_peer: float,
    warmed: dict[str, float],
) -> bool:
    """The engine mode's row: against its SimPy model (>= 20x) and plain async's time (<= 20x)."""
    from refimpl.sim import SimConfig, simulate

    model = engine_model(name)
    rollouts = steps * BATCH
    cfg = SimConfig(
        slots=SLOTS, batch=BATCH, rollouts=rollouts, lengths=lengths, engine_model=model
    )
    plain = SimConfig(slots=SLOTS, batch=BATCH, rollouts=rollouts, lengths=lengths)
    cost = model.roofline.cost(kv_bytes_per_token=model.kv_bytes_per_token)
    t_m, c_m, (m_stale, m_len, m_end) = best_of(
        1,
        lambda: models.simulate_engine(
            lengths, BATCH, steps, blocks=model.total_blocks, block_size=model.block_size,
            watermark_blocks=model.watermark_blocks, prompt_tokens=model.prompt_tokens,
            roofline=cost,
        ),
    )  # fmt: skip
    t, c, trace = best_of(args.repeats, lambda: simulate(cfg), WARMUP)
    t_plain, _, _ = best_of(args.repeats, lambda: simulate(plain), WARMUP)  # same run, same load
    order = trace.training_order()
    agrees = (
        np.array_equal(trace.staleness[order], m_stale)
        and np.array_equal(trace.length[order], m_len)
        and trace.end_time == m_end
    )
    ratio, slower = t_m / t, t / t_plain
    met = ratio >= ENGINE_TARGET and slower <= ENGINE_TARGET
    warmed[name] = trained / t
    print(
        f"{name:36s} {trained / t:11,.0f} {t_peer / t:7.1f} {ratio:8.1f} {trained / t_m:10,.0f} "
        f"{c_peer / c:10.1f} {c_m / c:11.1f}  {'yes' if agrees else 'NO':6s}  "
        f">= {ENGINE_TARGET:g}x model {'meets' if ratio >= ENGINE_TARGET else 'MISSES'}; "
        f"{slower:.1f}x plain async's time ({t:.3f} s vs {t_plain:.3f} s), <= {ENGINE_TARGET:g}x "
        f"{'meets' if slower <= ENGINE_TARGET else 'MISSES'}"
    )
    return bool(agrees and met)


def bytecode_env(tmp: Path, *, compiled: bool) -> dict[str, str]:
    """The environment of the fresh calls. ``compiled``: Python reads its modules' bytecode from a
    cache (``PYTHONPYCACHEPREFIX`` in ``tmp``, written by an untimed first call), as an installed
    package's is (pip compiles it at install time); a machine that sets
    ``PYTHONDONTWRITEBYTECODE`` (as the one the figures come from does) would otherwise make every
    call compile every module of refimpl from source, about 0.07 s of CPU time per call that no
    installed copy pays. Not ``compiled``: the environment as it is."""
    env = dict(os.environ)
    if compiled:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(tmp / "bytecode")
    return env


def fresh_calls(
    chosen: list[str],
    rollouts: int,
    peer: ModuleType,
    warmed: dict[str, float],
    *,
    bytecode: bool = True,
) -> bool:
    """Each mode as a user runs it: ``refimpl simulate ... --json`` in a fresh process, its whole
    wall time against the plain peer's whole call, and its reported rate against the warmed one.
    Every command first runs once untimed (the peer's small, each mode's at the timed size),
    which writes the bytecode cache of :func:`bytecode_env` and builds each mode's missing
    ahead-of-time entry, as a user's first call does."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        env = bytecode_env(Path(tmp), compiled=bytecode)
        lengths = Path(tmp) / "lengths.npy"  # the integer-lengths mode's matrix
        np.save(lengths, np.ceil(peer.draw_lengths(SLOTS, rollouts, SEED)))
        return _fresh_calls(chosen, rollouts, peer, warmed, env=env, lengths=lengths)


def _fresh_calls(
    chosen: list[str],
    rollouts: int,
    peer: ModuleType,
    warmed: dict[str, float],
    *,
    env: dict[str, str],
    lengths: Path,
) -> bool:
    import resource

    def child_cpu() -> float:  # user + system seconds of the finished child processes
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    def peer_call(n: int) -> list[str]:
        return [sys.executable, str(peer.__file__), "--rollouts", str(n), "--seed", str(SEED)]

    def call(name: str, n: int) -> list[str]:
        flags = list(CLI_FLAGS[name])
        if name == "async, integer lengths (ties)":
            flags += ["--lengths-npy", str(lengths)]
        return [sys.executable, "-m", "refimpl", "simulate", "--slots", str(SLOTS), "--batch",
                str(BATCH), "--rollouts", str(n), "--seed", str(SEED), *flags, "--json"]  # fmt: skip

    # untimed: the bytecode cache, and each mode's first call at the timed size, which builds
    # what a user's first call builds (the command compiles from COMMAND_BUILD_ROLLOUTS)
    for cmd in [peer_call(4 * BATCH), *(call(name, rollouts) for name in chosen)]:
        subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT, env=env)
    t0, c0 = time.perf_counter(), child_cpu()
    subprocess.run(peer_call(rollouts), check=True, capture_output=True, cwd=ROOT, env=env)
    peer_wall, peer_cpu = time.perf_counter() - t0, child_cpu() - c0
    cached = "PYTHONPYCACHEPREFIX" in env
    print(
        f"\n# a user's call: refimpl simulate --rollouts {rollouts:,} --json in a fresh process per "
        f"mode, against the plain peer's whole call ({peer_wall:.2f} s, a fresh process; "
        f"{peer_cpu:.2f} s of CPU time); reported rate against the warmed rate above. CPU: user + "
        "system seconds of the call's process, and the peer's CPU time over it (a shared machine "
        "stretches wall times; the targets are on wall time). Bytecode: "
        + (
            "read from a cache written by an untimed first call, as an installed package's is"
            if cached
            else "as the environment has it (--no-bytecode-cache)"
        )
        + f" (PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', 'unset')} here)"
    )
    print(
        f"{'mode':36s} {'wall s':>7s} {'x peer':>7s} {'reported r/s':>12s} {'warmed/rep':>10s} "
        f"{'startup s':>9s} {'lengths s':>9s} {'kernel s':>8s} {'memory s':>8s} {'run s':>6s} "
        f"{'exit s':>6s} "
        f"{'cpu s':>6s} {'cpu x peer':>10s} {'kernel':>9s}  target"
    )
    ok = True
    for name in chosen:
        cmd = call(name, rollouts)
        t0, c0 = time.perf_counter(), child_cpu()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT, env=env)
        wall, cpu = time.perf_counter() - t0, child_cpu() - c0
        got = json.loads(out.stdout)
        rate = float(got.get("rollouts_per_s", float("nan")))
        # the run itself, and what follows the command's last word: the interpreter's exit
        run_s = float(got.get("sim_wall_s") or got.get("wall_s") or float("nan"))
        total = float(got.get("total_wall_s") or float("nan"))
        need = 20.0 if name == "async" else 10.0
        ratio = peer_wall / wall
        gap = warmed.get(name, float("nan")) / rate
        met = ratio >= need and gap <= 1.5
        ok &= met
        print(
            f"{name:36s} {wall:7.2f} {ratio:7.1f} {rate:12,.0f} {gap:10.2f} "
            f"{got.get('startup_s') or float('nan'):9.2f} {got.get('lengths_s', float('nan')):9.3f} "
            f"{got.get('kernel_s', float('nan')):8.2f} {got.get('memory_s', float('nan')):8.2f} "
            f"{run_s:6.2f} {wall - total:6.2f} "
            f"{cpu:6.2f} {peer_cpu / cpu:10.1f} {got.get('kernel_path') or '-':>9s}"
            f"  >= {need:g}x, <= 1.5 "
            f"{'meets' if met else 'MISSES'}"
        )  # fmt: skip
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="10^5 rollouts, scaling 10^4..10^6")
    ap.add_argument("--rollouts", type=int, default=None, help="rollouts for the ratios")
    ap.add_argument("--repeats", type=int, default=3, help="repeats of our engine (best is kept)")
    ap.add_argument(
        "--modes",
        default=None,
        help="comma-separated substrings of the modes to run (a whole name: that mode alone)",
    )
    ap.add_argument("--no-fresh", action="store_true", help="skip the fresh-process calls")
    ap.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="fresh calls in the environment as it is (PYTHONDONTWRITEBYTECODE=1: every call "
        "compiles refimpl from source), not with a bytecode cache as an installed package has",
    )
    ap.add_argument("--no-scaling", action="store_true", help="skip the 10^5..10^7 scaling runs")
    args = ap.parse_args()
    from refimpl.sim import SimConfig, simulate
    from refimpl.sim._compiled import AVAILABLE
    from refimpl.sim.agent import AgentConfig, simulate_agent

    compiled: Any = "compiled" if AVAILABLE else "auto"  # the engine of the compiled modes

    peer = load_peer()
    models = load_models()
    rollouts = args.rollouts or (100_000 if args.quick else 1_000_000)
    lengths = peer.draw_lengths(SLOTS, rollouts, SEED)
    steps = rollouts // BATCH
    every = [*MODES, AGENT, ENGINE, ENGINE_TIGHT]
    wanted = args.modes.split(",") if args.modes else []
    # a mode's whole name picks that mode alone ("async" is a substring of most names)
    chosen = [
        m for m in every if not wanted or any(x == m or (x not in every and x in m) for x in wanted)
    ]
    print(
        f"# ratios at {rollouts:,} rollouts, N={SLOTS}, B={BATCH}, lognormal(6, 1), seed {SEED}; "
        f"compiled engine {'on' if AVAILABLE else 'OFF (pip install refimpl[fast])'}"
    )
    simulate(SimConfig(slots=4, batch=4, steps=2, mode="admission", eta=1))  # load the kernel
    build_ordering()
    t_peer, c_peer, (stale, tlen, t_end) = best_of(
        1, lambda: peer.simulate_store(lengths, BATCH, steps)
    )
    trained = stale.size
    print(f"plain SimPy peer (store): {t_peer:.2f} s, {trained / t_peer:,.0f} rollouts/s")
    header = (
        f"{'mode':36s} {'rollouts/s':>11s} {'x peer':>7s} {'x model':>8s} {'model r/s':>10s} "
        f"{'cpu x peer':>10s} {'cpu x model':>11s}  agrees  target"
    )
    print(header)
    ok = True
    warmed: dict[str, float] = {}  # rollouts/s of each mode, warmed, best of the repeats
    for name in chosen:
        if name in ENGINE_OPTIONS:
            ok &= engine_row(args, name, models, lengths, steps, trained, t_peer, c_peer, warmed)
            continue
        if name == AGENT:  # shared inputs: the same length matrix for ours and the model
            cfg_a = AgentConfig(
                slots=SLOTS, batch=BATCH, steps=steps, lengths=lengths, seed=SEED, **AGENT_OPTIONS
            )
            model_a = best_of(
                1,
                lambda: models.simulate_agent(lengths, BATCH, steps, **AGENT_OPTIONS),
            )
            t_m, c_m, (m_stale, m_len, m_end) = model_a
            t, c, res = best_of(
                args.repeats, lambda cfg_a=cfg_a: simulate_agent(cfg_a, engine=compiled), WARMUP
            )
            r = res.rollouts
            done = np.flatnonzero(r.status == 0)
            order = done[np.argsort(r.completion_rank[done])]
            agrees = (
                np.array_equal(r.staleness[order], m_stale)
                and np.array_equal(r.length[order], m_len)
                and res.summary.end_time == m_end
            )
            ok &= agrees
            ratio = t_peer / t
            met = ratio >= 10.0
            ok &= met
            warmed[name] = trained / t
            print(
                f"{name:36s} {trained / t:11,.0f} {ratio:7.1f} {t_m / t:8.1f} {trained / t_m:10,.0f} "
                f"{c_peer / c:10.1f} {c_m / c:11.1f}  {'yes' if agrees else 'NO':6s}  "
                f">= 10x {'meets' if met else 'MISSES'}"
            )
            continue
        options, model_name, model_options, target = MODES[name]
        factor = LENGTHS_FACTOR.get(name, 1.0)
        mode_lengths = (
            lengths if factor == 1.0 else peer.draw_lengths(SLOTS, int(rollouts * factor), SEED)
        )
        ceil = bool(options.get("ceil_lengths"))  # the bench's option, not SimConfig's
        if ceil:
            mode_lengths = np.ceil(lengths)
        options = {k: v for k, v in options.items() if k != "ceil_lengths"}
        cfg = SimConfig(
            slots=SLOTS, batch=BATCH, rollouts=rollouts, lengths=mode_lengths, **options
        )
        if ceil:  # its model is the plain peer on the same rounded lengths
            model = best_of(1, lambda m=mode_lengths: peer.simulate_store(m, BATCH, steps))
        elif model_name is None:
            model = (t_peer, c_peer, (stale, tlen, t_end))
        else:
            fn = models.MODELS[model_name]
            model = best_of(
                1, lambda fn=fn, kw=model_options, m=mode_lengths: fn(m, BATCH, steps, **kw)
            )
        t_m, c_m, (m_stale, m_len, m_end) = model
        how = "auto" if cfg.vectorizable else compiled
        t, c, trace = best_of(
            args.repeats, lambda cfg=cfg, how=how: simulate(cfg, engine=how), WARMUP
        )
        order = trace.training_order()
        agrees = (
            np.array_equal(trace.staleness[order], m_stale)
            and np.array_equal(trace.length[order], m_len)
            and trace.end_time == m_end
        )
        ok &= agrees
        ratio = t_peer / t
        met = ratio >= target
        ok &= met
        warmed[name] = trained / t
        print(
            f"{name:36s} {trained / t:11,.0f} {ratio:7.1f} {t_m / t:8.1f} {trained / t_m:10,.0f} "
            f"{c_peer / c:10.1f} {c_m / c:11.1f}  {'yes' if agrees else 'NO':6s}  "
            f">= {target:g}x {'meets' if met else 'MISSES'}{_ordering(cfg)}"
        )
    if not args.no_fresh:
        ok &= fresh_calls(chosen, rollouts, peer, warmed, bytecode=not args.no_bytecode_cache)
    if not args.no_scaling:
        sizes = [10_000, 100_000, 1_000_000] if args.quick else [100_000, 1_000_000, 10_000_000]
        print(
            f"\n# scaling (fresh subprocess per size; lengths drawn inside; N={SLOTS}, B={BATCH}):"
            " seconds of the run after a warm-up run of 2 steps (the fixed cost: loading the"
            " compiled kernel, first calls), which is reported apart; ns per rollout"
        )
        print(
            f"{'mode':36s} {'warm-up s':>9s} "
            + " ".join(f"{n:>10,d} s" for n in sizes)
            + " "
            + " ".join(f"{'ns/r ' + format(n, '.0e'):>11s}" for n in sizes)
            + "   peak RSS at the largest"
        )
        ref = [memory_reference(n) for n in sizes]
        ref_growth = ref[-1] / ref[-2]
        print(
            f"{'memory-bound reference':36s} {'':9s} " + " ".join(f"{r:12.3f}" for r in ref)
            + " " + " ".join(f"{r / n * 1e9:11.1f}" for r, n in zip(ref, sizes, strict=True))
            + f"   (x{ref_growth:.1f} time for the last x10: the machine's caches and first touch)"
        )  # fmt: skip
        for name in chosen:
            if name in ENGINE_OPTIONS:
                mode, options = "engine", {"preset": ENGINE_PRESET, "fields": ENGINE_OPTIONS[name]}
            elif name == AGENT:
                mode, options = "agent", AGENT_OPTIONS
            else:
                mode, options = "sim", MODES[name][0]
            runs = [scaling_run(n, mode, options) for n in sizes]
            peak = runs[-1]["peak_rss"]
            fits = peak <= 2 * GIB or sizes[-1] < 10_000_000
            ok &= fits
            growth = runs[-1]["sim_s"] / runs[-2]["sim_s"]
            again = runs[-1]["again_s"] / runs[-2]["again_s"]
            user = runs[-1]["again_user_s"] / max(runs[-2]["again_user_s"], 1e-9)
            linear = user <= LINEAR_GROWTH
            ok &= linear
            warm = max(r["warmup_s"] for r in runs)
            print(
                f"{name:36s} {warm:9.2f} " + " ".join(f"{r['sim_s']:12.2f}" for r in runs)
                + " " + " ".join(f"{r['sim_s'] / n * 1e9:11.0f}" for r, n in zip(runs, sizes, strict=True))
                + f"   {peak / 2**20:7.0f} MiB {'<= 2 GiB' if fits else '> 2 GiB MISSES'}"
                f"  last x10: x{growth:.1f} time ({growth / ref_growth:.2f} of the reference's),"
                f" run again in the same process: x{again:.1f} wall, x{user:.1f} user CPU"
                f" ({'linear' if linear else f'> {LINEAR_GROWTH:g}: NOT LINEAR'}),"
                f" system {runs[-2]['again_sys_s']:.2f} -> {runs[-1]['again_sys_s']:.2f} s"
            )  # fmt: skip
    print("\nall targets met" if ok else "\nSOME TARGETS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
