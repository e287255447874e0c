"""Write the sample traces of this folder: one per ``refimpl check`` spec, and one planted bug each.

Each correct trace holds the values a trainer would log, computed here with refimpl from seeded
inputs; its ``*-bug`` twin logs the same inputs through the mistake that spec exists to catch. The
files are committed; ``tests/test_examples.py`` checks that this script writes them byte for byte
and that ``refimpl check`` passes the correct ones and flags the bugs, as README.md says.

    python examples/traces/make_traces.py          # rewrites the files next to this script
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

import refimpl

HERE = Path(__file__).resolve().parent
Rows = list[dict[str, object]]


def _round(x: float) -> float:
    return float(f"{x:.10g}")  # what a logger printing 10 significant digits writes


def staleness_mask(rng: np.random.Generator, bug: bool) -> Rows:
    eta = 2
    staleness = rng.integers(0, 6, size=12)
    # the bug: `s < eta` where the rule is `s <= eta` (drops every sample exactly at the bound)
    weight = (staleness < eta) if bug else refimpl.staleness_mask(staleness, eta=eta)
    return [
        {"staleness": int(s), "weight": float(w)} for s, w in zip(staleness, weight, strict=True)
    ]


def _log_probs(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    behavior = -rng.exponential(1.0, size=n)
    target = behavior + rng.normal(0.0, 0.7, size=n)
    return target, behavior


def tis(rng: np.random.Generator, bug: bool) -> Rows:
    target, behavior = _log_probs(rng, 16)
    # the bug: the ratio taken the wrong way round, behaviour over target
    weight = (
        np.minimum(np.exp(behavior - target), 2.0)
        if bug
        else refimpl.truncated_is_weights(target, behavior, cap=2.0)
    )
    return [
        {"logp_target": _round(t), "logp_behavior": _round(b), "weight": _round(w)}
        for t, b, w in zip(target, behavior, weight, strict=True)
    ]


def masked_is(rng: np.random.Generator, bug: bool) -> Rows:
    target, behavior = _log_probs(rng, 16)
    ratio = np.exp(target - behavior)
    # the bug: tokens outside the band are clipped to its edge instead of masked to 0
    weight = (
        np.clip(ratio, 0.5, 2.0)
        if bug
        else refimpl.masked_is_weights(target, behavior, low=0.5, high=2.0)
    )
    return [
        {"logp_target": _round(t), "logp_behavior": _round(b), "weight": _round(w)}
        for t, b, w in zip(target, behavior, weight, strict=True)
    ]


def effort_penalty(rng: np.random.Generator, bug: bool) -> Rows:
    b = np.sort(rng.uniform(0.0, 8.0, size=10))
    # the bug: the decay written exp(-b/tau), forgetting that effort is measured from b_min = 1
    logged = b + 1.0
    penalty = (
        0.002 * np.exp(-logged / 2.0)
        if bug
        else refimpl.effort_penalty(logged, k0=0.002, b_min=1.0, tau=2.0)
    )
    return [{"b": _round(x), "penalty": _round(p)} for x, p in zip(logged, penalty, strict=True)]


def inclusion_probability(rng: np.random.Generator, bug: bool) -> Rows:
    cdf = np.sort(rng.uniform(0.0, 1.0, size=10))
    # the bug: the first-k-of-n propensity taken as k/n for every length (no length bias at all)
    pi = np.full(cdf.size, 4 / 8) if bug else refimpl.inclusion_probability(cdf, n=8, k=4)
    return [{"cdf": _round(c), "pi": _round(p)} for c, p in zip(cdf, pi, strict=True)]


def staleness(rng: np.random.Generator, bug: bool) -> Rows:
    rows: Rows = []
    for _ in range(8):
        step = int(rng.integers(3, 9))
        tokens = int(rng.integers(1, 6))
        versions = sorted(int(v) for v in rng.integers(max(0, step - 4), step + 1, size=tokens))
        # the bug: staleness from the newest token's version instead of the oldest one's
        s = step - (versions[-1] if bug else versions[0])
        if not bug:
            s = int(refimpl.sample_staleness(step, [versions]).sample[0])
        rows.append({"trained_step": step, "versions": versions, "staleness": s})
    return rows


SPECS: dict[str, tuple[Callable[[np.random.Generator, bool], Rows], str, list[str]]] = {
    # spec: (maker, file format, --param options)
    "staleness_mask": (staleness_mask, "csv", ["eta=2"]),
    "tis": (tis, "csv", ["cap=2"]),
    "masked_is": (masked_is, "csv", ["low=0.5", "high=2"]),
    "effort_penalty": (effort_penalty, "csv", ["k0=0.002", "b_min=1", "tau=2"]),
    "inclusion_probability": (inclusion_probability, "csv", ["n=8", "k=4"]),
    "staleness": (staleness, "jsonl", []),
}


def render(rows: Rows, fmt: str) -> str:
    if fmt == "jsonl":
        return "".join(json.dumps(row) + "\n" for row in rows)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def traces() -> dict[str, str]:
    """File name -> content, for every spec and its bug."""
    files = {}
    for number, (spec, (make, fmt, _)) in enumerate(SPECS.items()):
        for bug in (False, True):
            rng = np.random.default_rng(100 + number)  # the same inputs for the trace and its bug
            name = f"{spec}{'-bug' if bug else ''}.{fmt}"
            files[name] = render(make(rng, bug), fmt)
    return files


if __name__ == "__main__":
    for name, text in traces().items():
        (HERE / name).write_text(text)
        print(f"wrote {name}")
