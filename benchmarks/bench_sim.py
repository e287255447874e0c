#!/usr/bin/env python3
"""Benchmark refimpl.sim against the SimPy peer, measured in the same run.

Model (the peer's): N = 256 slots, B = 512, lognormal(6, 1) lengths, seed 0, plain async.

1. Ratio at R rollouts (default 10^6): the peer's ``--variant store`` simulation (its own timer:
   the simulation only, not the length draw) against our vectorized engine and our event engine on
   the same length matrix, each checked sample for sample against the peer. Targets: vectorized
   >= 60x the peer's rollouts/s, event engine >= 5x. Ours is the best of a few repeats (the machine
   is shared; the peer, at ~15 s a run, is timed once unless --peer-repeats).
2. Scaling from 10^5 to 10^7 rollouts: wall time and peak RSS (VmHWM) of a fresh subprocess per
   size (lengths drawn inside it as the peer draws them), for both engines. Target: 10^7 rollouts
   in 2 GiB peak memory.

Usage: python benchmarks/bench_sim.py [--quick] [--rollouts R] [--no-event-1e7]
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


def best_of(repeats: int, fn: Any) -> tuple[float, float, Any]:
    """Best wall time, best CPU time (process_time: less sensitive to a shared machine), result."""
    best, best_cpu, out = float("inf"), float("inf"), None
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    return best, best_cpu, out


CHILD = r"""
import json, resource, sys, time
from refimpl.sim import SimConfig, simulate
rollouts, engine = int(sys.argv[1]), sys.argv[2]
cfg = SimConfig(slots={slots}, batch={batch}, rollouts=rollouts, seed={seed})
t0 = time.perf_counter()
trace = simulate(cfg, engine=engine)
t1 = time.perf_counter()
s = trace.summary()
t2 = time.perf_counter()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
try:  # this process image's own peak (ru_maxrss can carry the forking parent's peak on Linux)
    with open("/proc/self/status") as f:
        rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
except (OSError, StopIteration):
    pass
print(json.dumps({{"sim_s": t1 - t0, "summary_s": t2 - t1, "peak_rss": rss, "trained": s.trained,
                  "staleness_mean": s.staleness_mean}}))
"""


def scaling_run(rollouts: int, engine: str) -> dict[str, Any]:
    code = CHILD.format(slots=SLOTS, batch=BATCH, seed=SEED)
    out = subprocess.run(
        [sys.executable, "-c", code, str(rollouts), engine],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="10^5 rollouts, scaling 10^4..10^6")
    ap.add_argument("--rollouts", type=int, default=None, help="rollouts for the ratio")
    ap.add_argument("--repeats", type=int, default=3, help="repeats of our engines (best is kept)")
    ap.add_argument("--peer-repeats", type=int, default=1, help="repeats of the peer")
    ap.add_argument("--no-event-1e7", action="store_true", help="skip the event engine at 10^7")
    args = ap.parse_args()
    from refimpl.sim import SimConfig, simulate

    peer = load_peer()
    rollouts = args.rollouts or (100_000 if args.quick else 1_000_000)
    lengths = peer.draw_lengths(SLOTS, rollouts, SEED)
    steps = rollouts // BATCH
    print(f"# ratio at {rollouts:,} rollouts, N={SLOTS}, B={BATCH}, lognormal(6, 1), seed {SEED}")
    t_peer, c_peer, (stale, tlen, t_end) = best_of(
        args.peer_repeats, lambda: peer.simulate_store(lengths, BATCH, steps)
    )
    trained = stale.size
    cfg = SimConfig(slots=SLOTS, batch=BATCH, rollouts=rollouts, lengths=lengths)
    rows = [("simpy peer (store)", t_peer, 1.0, c_peer, 1.0, None)]
    ok = True
    for engine, target, repeats in (
        ("vector", 60.0, args.repeats),
        ("event", 5.0, max(1, args.repeats - 1)),
    ):
        t, c, trace = best_of(repeats, lambda e=engine: simulate(cfg, engine=e))
        order = trace.training_order()
        same = (
            np.array_equal(trace.staleness[order], stale)
            and np.array_equal(trace.length[order], tlen)
            and trace.end_time == t_end
        )
        if not same:
            print(f"ERROR: the {engine} engine disagrees with the peer", file=sys.stderr)
            ok = False
        rows.append((f"refimpl {engine}", t, t_peer / t, c, c_peer / c, target))
    print(
        f"{'implementation':22s} {'wall s':>9s} {'rollouts/s':>12s} {'x peer':>8s} "
        f"{'cpu s':>9s} {'x peer':>8s}  target (on wall-clock rollouts/s)"
    )
    for name, t, ratio, c, c_ratio, target in rows:
        verdict = "" if target is None else ("meets" if ratio >= target else "MISSES")
        tgt = "" if target is None else f">= {target:g}x {verdict}"
        print(
            f"{name:22s} {t:9.3f} {trained / t:12,.0f} {ratio:8.1f} {c:9.3f} {c_ratio:8.1f}  {tgt}"
        )
        ok &= target is None or ratio >= target

    sizes = [10_000, 100_000, 1_000_000] if args.quick else [100_000, 1_000_000, 10_000_000]
    print(f"\n# scaling (fresh subprocess per size; lengths drawn inside; N={SLOTS}, B={BATCH})")
    print(
        f"{'engine':8s} {'rollouts':>12s} {'sim s':>8s} {'summary s':>10s} {'rollouts/s':>12s} "
        f"{'peak RSS MiB':>13s}"
    )
    for engine in ("vector", "event"):
        prev = None
        for n in sizes:
            if engine == "event" and n >= 10_000_000 and args.no_event_1e7:
                continue
            r = scaling_run(n, engine)
            growth = "" if prev is None else f"  x{r['sim_s'] / prev:.1f} time for x10 rollouts"
            prev = r["sim_s"]
            print(
                f"{engine:8s} {n:12,d} {r['sim_s']:8.2f} {r['summary_s']:10.2f} "
                f"{r['trained'] / r['sim_s']:12,.0f} {r['peak_rss'] / 2**20:13.0f}{growth}"
            )
            if n >= 10_000_000:
                fits = r["peak_rss"] <= 2 * GIB
                print(f"         10^7 rollouts peak RSS <= 2 GiB: {'meets' if fits else 'MISSES'}")
                ok &= fits
    print("\nall targets met" if ok else "\nSOME TARGETS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
