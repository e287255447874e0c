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
from refimpl.losses.aggregation import aggregation_weights
from refimpl.losses.clipped import ppo_clip_loss

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


# --- the specs added since: one small trace each, with the mistake it exists to catch -------


def _list(x: np.ndarray) -> list[float]:
    return [_round(v) for v in x]


def decoupled_ppo(rng: np.random.Generator, bug: bool) -> Rows:
    behavior = -rng.exponential(1.0, size=12)
    prox = np.minimum(behavior + rng.normal(0.0, 1.2, size=12), 0.0)  # log-probabilities <= 0
    # the bug: a behaviour weight above the cap clipped to it, where AReaL's rule masks it to 0
    weight = (
        np.minimum(np.exp(prox - behavior), 2.0)
        if bug
        else refimpl.decoupled_ppo_weights(prox, behavior, cap=2.0)
    )
    return [
        {"logp_prox": _round(t), "logp_behavior": _round(b), "weight": _round(w)}
        for t, b, w in zip(prox, behavior, weight, strict=True)
    ]


def _sequences(rng: np.random.Generator, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    out = []
    for length in rng.integers(1, 5, size=n):
        behavior = -rng.exponential(1.0, size=int(length))
        target = np.minimum(behavior + rng.normal(0.0, 0.5, size=int(length)), 0.0)
        out.append((target, behavior))
    return out


def _sequence_rows(pairs: list[tuple[np.ndarray, np.ndarray]], weights: list[float]) -> Rows:
    return [
        {"logp_target": _list(t), "logp_behavior": _list(b), "weight": _round(w)}
        for (t, b), w in zip(pairs, weights, strict=True)
    ]


def tis_sequence(rng: np.random.Generator, bug: bool) -> Rows:
    pairs = _sequences(rng, 8)
    # the bug: each token's ratio truncated before the product, Π min(ρ_t, C), not min(Π ρ_t, C)
    weights = [
        float(np.prod(np.minimum(np.exp(t - b), 2.0)))
        if bug
        else float(refimpl.truncated_is_weights(t, b, cap=2.0, level="sequence"))
        for t, b in pairs
    ]
    return _sequence_rows(pairs, weights)


def tis_geometric(rng: np.random.Generator, bug: bool) -> Rows:
    pairs = _sequences(rng, 8)
    longest = max(t.size for t, _ in pairs)
    # the bug: the mean log-ratio divided by the padded length T, not by the sequence's own length
    weights = [
        float(min(np.exp(np.sum(t - b) / longest), 2.0))
        if bug
        else float(refimpl.truncated_is_weights(t, b, cap=2.0, level="geometric"))
        for t, b in pairs
    ]
    return _sequence_rows(pairs, weights)


def masked_is_sequence(rng: np.random.Generator, bug: bool) -> Rows:
    pairs = _sequences(rng, 8)
    # the bug: a sequence ratio outside the band clipped to its edge instead of dropped
    weights = [
        float(np.clip(np.exp(np.sum(t - b)), 0.5, 2.0))
        if bug
        else float(refimpl.masked_is_weights(t, b, low=0.5, high=2.0, level="sequence"))
        for t, b in pairs
    ]
    return _sequence_rows(pairs, weights)


def masked_is_geometric(rng: np.random.Generator, bug: bool) -> Rows:
    pairs = _sequences(rng, 8)

    def banded(z: float) -> float:
        return float(np.exp(z)) if 0.8 <= np.exp(z) <= 1.25 else 0.0

    # the bug: the band tested on the sequence's product of ratios instead of its geometric mean
    weights = [
        banded(float(np.sum(t - b)))
        if bug
        else float(refimpl.masked_is_weights(t, b, low=0.8, high=1.25, level="geometric"))
        for t, b in pairs
    ]
    return _sequence_rows(pairs, weights)


def staleness_decay(rng: np.random.Generator, bug: bool) -> Rows:
    s = rng.integers(0, 6, size=10)
    # the bug: γ^(s+1), an on-policy sample already decayed (the version count off by one)
    weight = 0.9 ** (s + 1.0) if bug else refimpl.staleness_decay(s, gamma=0.9)
    return [{"staleness": int(x), "weight": _round(w)} for x, w in zip(s, weight, strict=True)]


def admission_capacity(rng: np.random.Generator, bug: bool) -> Rows:
    rows: Rows = []
    for _ in range(8):
        v, a, n = (int(x) for x in (rng.integers(0, 4), rng.integers(0, 40), rng.integers(0, 20)))
        # the bug: the rollouts in flight forgotten in the staleness budget (accepted only)
        cap = (
            min(64 - n, (1 + v + 1) * 8 - a)
            if bug
            else refimpl.admission_capacity(
                eta=1, version=v, batch=8, accepted=a, running=n, max_concurrent=64
            )
        )
        rows.append({"version": v, "accepted": a, "running": n, "capacity": int(cap)})
    return rows


def shaped_reward(rng: np.random.Generator, bug: bool) -> Rows:
    q = rng.uniform(0.0, 1.0, size=8)
    ell = rng.integers(100, 4000, size=8)
    b = rng.uniform(1.0, 6.0, size=8)
    k = refimpl.effort_penalty(b, k0=0.5, b_min=1.0, tau=2.0)
    # the bug: the length price charged per token, the length scale (1000 tokens) forgotten
    r = (
        q - k * ell
        if bug
        else refimpl.shaped_reward(q, ell, b, k0=0.5, b_min=1.0, tau=2.0, length_scale=1000.0)
    )
    return [
        {"quality": _round(x), "length": int(n), "b": _round(y), "reward": _round(z)}
        for x, n, y, z in zip(q, ell, b, r, strict=True)
    ]


def dapo_overlong(rng: np.random.Generator, bug: bool) -> Rows:
    ell = np.sort(rng.integers(3000, 4500, size=10))
    # the bug: the soft ramp started at max_length instead of max_length − cache_length
    p = (
        np.clip((4096 - ell) / 512, -1.0, 0.0)
        if bug
        else refimpl.dapo_overlong_penalty(ell, max_length=4096, cache_length=512)
    )
    return [{"length": int(n), "penalty": _round(x)} for n, x in zip(ell, p, strict=True)]


def cosine_length_reward(rng: np.random.Generator, bug: bool) -> Rows:
    ell = rng.integers(0, 4096, size=8)
    correct = rng.integers(0, 2, size=8).astype(bool)
    # the bug: the correct and the wrong value ranges swapped
    r = refimpl.cosine_length_reward(ell, ~correct if bug else correct, max_length=4096)
    return [
        {"length": int(n), "correct": int(c), "reward": _round(x)}
        for n, c, x in zip(ell, correct, r, strict=True)
    ]


def _l1_inputs(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (
        rng.integers(100, 3000, size=8),
        rng.integers(0, 2, size=8).astype(bool),
        rng.integers(500, 2500, size=8),
    )


def _l1_rows(ell: np.ndarray, correct: np.ndarray, target: np.ndarray, r: np.ndarray) -> Rows:
    return [
        {"length": int(n), "correct": int(c), "target_length": int(t), "reward": _round(x)}
        for n, c, t, x in zip(ell, correct, target, r, strict=True)
    ]


def l1_exact(rng: np.random.Generator, bug: bool) -> Rows:
    ell, correct, target = _l1_inputs(rng)
    # the bug: the signed difference, so a response shorter than its target earns a bonus
    r = correct - 3e-4 * (target - ell) if bug else refimpl.l1_exact_reward(ell, correct, target)
    return _l1_rows(ell, correct, target, r)


def l1_max(rng: np.random.Generator, bug: bool) -> Rows:
    ell, correct, target = _l1_inputs(rng)
    # the bug: the score not clipped to [0, 1]
    r = (
        correct * (3e-4 * (target - ell) + 0.5)
        if bug
        else refimpl.l1_max_reward(ell, correct, target)
    )
    return _l1_rows(ell, correct, target, r)


def effective_sample_size(rng: np.random.Generator, bug: bool) -> Rows:
    rows: Rows = []
    for size in rng.integers(2, 6, size=6):
        w = rng.uniform(0.0, 2.0, size=int(size))
        # the bug: Σw/Σw², the sum not squared (not even scale invariant)
        ess = w.sum() / (w * w).sum() if bug else refimpl.effective_sample_size(w)
        rows.append({"weight": _list(w), "ess": _round(ess)})
    return rows


def masking_diagnostics(rng: np.random.Generator, bug: bool) -> Rows:
    rows: Rows = []
    for size in rng.integers(3, 7, size=6):
        s = rng.integers(0, 3, size=int(size))
        s[0] = 0
        w = refimpl.staleness_mask(s, eta=1) * (rng.random(int(size)) < 0.8)
        on = s == 0
        # the bug: on-policy samples dropped counted over the whole batch, not over on-policy ones
        dropped = (
            float((on & (w == 0)).sum() / s.size)
            if bug
            else refimpl.masking_diagnostics(s, w).on_policy_dropped_fraction
        )
        rows.append(
            {
                "staleness": [int(x) for x in s],
                "weight": _list(w),
                "on_policy_dropped_fraction": _round(dropped),
            }
        )
    return rows


def kimi_length_reward(rng: np.random.Generator, bug: bool) -> Rows:
    rows: Rows = []
    for size in rng.integers(2, 5, size=5):
        ell = rng.integers(100, 2000, size=int(size))
        correct = rng.integers(0, 2, size=int(size)).astype(bool)
        reward = refimpl.kimi_length_reward(ell, correct)
        if bug:  # the bug: a short wrong answer rewarded, min(0, λ) forgotten
            reward = refimpl.kimi_length_reward(ell, np.ones_like(correct))
        rows.append(
            {
                "length": [int(x) for x in ell],
                "correct": [int(c) for c in correct],
                "reward": _list(reward),
            }
        )
    return rows


def vtrace(rng: np.random.Generator, bug: bool) -> Rows:
    rows: Rows = []
    for size in rng.integers(2, 4, size=5):
        v_tm1, v_t, r_t = (np.round(rng.normal(0.0, 1.0, size=int(size)), 3) for _ in range(3))
        discount = np.full(int(size), 0.9)
        rho = np.round(np.exp(rng.normal(0.0, 0.7, size=int(size))), 3)
        # the bug: the trace coefficients c_t = λ·ρ_t left unclipped (rlax clips them at 1)
        errors = (
            _vtrace_unclipped_traces(v_tm1, v_t, r_t, discount, rho)
            if bug
            else refimpl.vtrace(v_tm1, v_t, r_t, discount, rho).errors
        )
        rows.append(
            {
                "v_tm1": _list(v_tm1),
                "v_t": _list(v_t),
                "r_t": _list(r_t),
                "discount_t": _list(discount),
                "rho_tm1": _list(rho),
                "errors": _list(errors),
            }
        )
    return rows


def _vtrace_unclipped_traces(
    v_tm1: np.ndarray, v_t: np.ndarray, r_t: np.ndarray, discount: np.ndarray, rho: np.ndarray
) -> np.ndarray:
    delta = np.minimum(rho, 1.0) * (r_t + discount * v_t - v_tm1)
    errors: np.ndarray = np.zeros_like(delta)
    acc = 0.0
    for t in reversed(range(delta.size)):
        acc = delta[t] + discount[t] * rho[t] * acc
        errors[t] = acc
    return errors


def _rounded(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.array([_round(v) for v in x.ravel()]).reshape(x.shape)
    return out


def policy_loss(rng: np.random.Generator, bug: bool) -> Rows:
    width = 6  # the trainer's padded width T
    rows: Rows = []
    for step in range(3):
        lengths = rng.integers(1, width + 1, size=3)
        mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.float64)
        old = -rng.exponential(1.0, size=mask.shape)
        logp = -np.abs(old + rng.normal(0.0, 0.3, size=mask.shape))  # log-probabilities <= 0
        old, logp = (np.where(mask == 1, _rounded(x), 0.0) for x in (old, logp))  # pads hold 0
        adv = _rounded(rng.normal(0.0, 1.0, size=3))
        # PPO-clip (eps 0.2) on the values as logged, then the token mean
        per_token = ppo_clip_loss(logp, old, adv, mask=mask).loss
        # the bug: the masked token sum divided by the padded width B*T, not by the valid tokens
        loss = (
            float((mask * per_token).sum() / mask.size)
            if bug
            else float((aggregation_weights(mask, mode="token_mean") * per_token).sum())
        )
        rows += [
            {
                "step": step,
                "logp": _list(logp[b]),
                "logp_old": _list(old[b]),
                "mask": [int(x) for x in mask[b]],
                "advantage": float(adv[b]),
                "loss": _round(loss),
            }
            for b in range(mask.shape[0])
        ]
    return rows


SPECS: dict[str, tuple[Callable[[np.random.Generator, bool], Rows], str, list[str]]] = {
    # spec: (maker, file format, --param options)
    "staleness_mask": (staleness_mask, "csv", ["eta=2"]),
    "tis": (tis, "csv", ["cap=2"]),
    "masked_is": (masked_is, "csv", ["low=0.5", "high=2"]),
    "effort_penalty": (effort_penalty, "csv", ["k0=0.002", "b_min=1", "tau=2"]),
    "inclusion_probability": (inclusion_probability, "csv", ["n=8", "k=4"]),
    "staleness": (staleness, "jsonl", []),
    "decoupled_ppo": (decoupled_ppo, "csv", ["cap=2"]),
    "tis_sequence": (tis_sequence, "jsonl", ["cap=2"]),
    "tis_geometric": (tis_geometric, "jsonl", ["cap=2"]),
    "masked_is_sequence": (masked_is_sequence, "jsonl", ["low=0.5", "high=2"]),
    "masked_is_geometric": (masked_is_geometric, "jsonl", ["low=0.8", "high=1.25"]),
    "staleness_decay": (staleness_decay, "csv", ["gamma=0.9"]),
    "admission_capacity": (admission_capacity, "csv", ["eta=1", "batch=8", "max_concurrent=64"]),
    "shaped_reward": (shaped_reward, "csv", ["k0=0.5", "b_min=1", "tau=2", "length_scale=1000"]),
    "dapo_overlong": (dapo_overlong, "csv", ["max_length=4096", "cache_length=512"]),
    "cosine_length_reward": (cosine_length_reward, "csv", ["max_length=4096"]),
    "l1_exact": (l1_exact, "csv", []),
    "l1_max": (l1_max, "csv", []),
    "effective_sample_size": (effective_sample_size, "jsonl", []),
    "masking_diagnostics": (masking_diagnostics, "jsonl", ["statistic=on_policy_dropped_fraction"]),
    "kimi_length_reward": (kimi_length_reward, "jsonl", []),
    "vtrace": (vtrace, "jsonl", []),
    "policy_loss": (policy_loss, "jsonl", ["surrogate=ppo_clip", "aggregation=token_mean"]),
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
