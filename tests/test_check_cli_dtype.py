"""``refimpl check --dtype float32``: a correct float32 trace of every spec passes, a planted bug
in it fails; framework column names are mapped with ``--column``.

Each trace is logged the way a float32 trainer logs it: inputs in float32, the value computed in
float32 (numpy float32 arithmetic for the importance weights; elsewhere the exact value rounded to
float32, which is within half an ulp of any correct float32 computation), written with 9
significant digits. The ``policy_loss`` trace carries the loss of an independent torch float32
PPO-clip (the generator of ``tests/test_check_cli_losses.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects
from test_check_cli_losses import PPO, columns, make_steps, torch_ppo_token_mean_float32

import refimpl
from refimpl.cli import main
from refimpl.testing import spec_names
from refimpl.testing.check_cli import SPECS, TRACE_ONLY

F32 = np.float32
RNG_SEED = 20251201
ROWS = 64


def _logps(rng: np.random.Generator, n: int) -> tuple[Any, Any]:
    lt = (-rng.exponential(2.0, n)).astype(F32)
    lb = (lt + rng.normal(0.0, 0.7, n)).astype(F32)
    return lt, lb


def _sequences(rng: np.random.Generator) -> tuple[list[Any], list[Any]]:
    lengths = rng.integers(1, 200, ROWS)
    pairs = [_logps(rng, int(n)) for n in lengths]
    return [a for a, _ in pairs], [b for _, b in pairs]


def _float32_sequence(lt: list[Any], lb: list[Any], mean: bool) -> Any:
    sums = np.array([np.sum(a - b, dtype=F32) for a, b in zip(lt, lb, strict=True)], dtype=F32)
    if mean:
        sums = (sums / np.array([len(a) for a in lt], dtype=F32)).astype(F32)
    return sums


def _trace(spec: str, rng: np.random.Generator) -> tuple[dict[str, Any], list[str], str]:
    """Columns (the logged value last), the --param options, and the value's column name."""
    if spec == "tis":
        lt, lb = _logps(rng, ROWS)
        w = np.minimum(np.exp(lt - lb), F32(2.0))
        return {"logp_target": lt, "logp_behavior": lb, "weight": w}, ["cap=2"], "weight"
    if spec == "masked_is":
        lt, lb = _logps(rng, ROWS)
        r = np.exp(lt - lb)
        w = np.where((r >= F32(0.5)) & (r <= F32(2.0)), r, F32(0.0))
        cols = {"logp_target": lt, "logp_behavior": lb, "weight": w}
        return cols, ["low=0.5", "high=2"], "weight"
    if spec == "decoupled_ppo":
        lt, lb = _logps(rng, ROWS)
        r = np.exp(lt - lb)
        w = np.where(r <= F32(2.0), r, F32(0.0))
        return {"logp_prox": lt, "logp_behavior": lb, "weight": w}, ["cap=2"], "weight"
    if spec in ("tis_sequence", "tis_geometric", "masked_is_sequence", "masked_is_geometric"):
        lt, lb = _sequences(rng)
        z = _float32_sequence(lt, lb, mean=spec.endswith("geometric"))
        if spec.startswith("tis"):
            w = np.exp(np.minimum(z, F32(np.log(5.0)))).astype(F32)
            w = np.minimum(w, F32(5.0))
            params = ["cap=5"]
        else:
            r = np.exp(np.minimum(z, F32(50.0))).astype(F32)
            w = np.where((r >= F32(0.2)) & (r <= F32(5.0)), r, F32(0.0))
            params = ["low=0.2", "high=5"]
        return {"logp_target": lt, "logp_behavior": lb, "weight": w}, params, "weight"
    if spec == "staleness_mask":
        s = rng.integers(0, 5, ROWS)
        return {"staleness": s, "weight": (s <= 2).astype(F32)}, ["eta=2"], "weight"
    if spec == "staleness_decay":
        s = rng.integers(0, 50, ROWS)
        return {"staleness": s, "weight": (F32(0.9) ** s.astype(F32))}, ["gamma=0.9"], "weight"
    if spec == "staleness":
        j = rng.integers(5, 20, ROWS)
        v = j - rng.integers(0, 5, ROWS)
        return {"trained_step": j, "min_version": v, "staleness": j - v}, [], "staleness"
    if spec == "admission_capacity":
        version, accepted, running = (rng.integers(0, 50, ROWS) for _ in range(3))
        cap = [
            refimpl.admission_capacity(
                eta=1, version=int(a), batch=8, accepted=int(b), running=int(c), max_concurrent=64
            )
            for a, b, c in zip(version, accepted, running, strict=True)
        ]
        cols = {"version": version, "accepted": accepted, "running": running, "capacity": cap}
        return cols, ["eta=1", "batch=8", "max_concurrent=64"], "capacity"
    if spec == "effort_penalty":
        b = rng.uniform(0.0, 10.0, ROWS).astype(F32)
        k = (F32(2.0) * np.exp(-(b - F32(0.0)) / F32(1.5))).astype(F32)
        return {"b": b, "penalty": k}, ["k0=2", "b_min=0", "tau=1.5"], "penalty"
    if spec == "inclusion_probability":
        u = rng.uniform(0.0, 1.0, ROWS).astype(F32)
        pi = refimpl.inclusion_probability(u.astype(float), n=16, k=4).astype(F32)
        return {"cdf": u, "pi": pi}, ["n=16", "k=4"], "pi"
    if spec == "shaped_reward":
        q = rng.uniform(-1, 1, ROWS).astype(F32)
        ell = rng.integers(0, 4096, ROWS).astype(F32)
        b = rng.uniform(0, 5, ROWS).astype(F32)
        r = (q - F32(0.01) * np.exp(-b / F32(2.0)) * ell / F32(1000.0)).astype(F32)
        cols = {"quality": q, "length": ell, "b": b, "reward": r}
        return cols, ["k0=0.01", "b_min=0", "tau=2", "length_scale=1000"], "reward"
    if spec == "dapo_overlong":
        ell = rng.integers(0, 5000, ROWS).astype(F32)
        ramp = (F32(4096 - 512) - ell) / F32(512)
        p = np.clip(ramp, F32(-1.0), F32(0.0)).astype(F32)
        return {"length": ell, "penalty": p}, ["max_length=4096", "cache_length=512"], "penalty"
    if spec == "cosine_length_reward":
        ell = rng.integers(0, 5000, ROWS).astype(F32)
        correct = rng.integers(0, 2, ROWS)
        c = F32(0.5) * (F32(1) + np.cos(F32(np.pi) * np.minimum(ell, F32(4096)) / F32(4096)))
        r = np.where(correct > 0, F32(0.5) + F32(0.5) * c, F32(-0.5) - F32(0.5) * c).astype(F32)
        return {"length": ell, "correct": correct, "reward": r}, ["max_length=4096"], "reward"
    if spec in ("l1_exact", "l1_max"):
        ell = rng.integers(0, 8192, ROWS).astype(F32)
        target = rng.integers(1, 8192, ROWS).astype(F32)
        correct = rng.integers(0, 2, ROWS)
        if spec == "l1_exact":
            r = (correct.astype(F32) - F32(3e-4) * np.abs(target - ell)).astype(F32)
        else:
            score = np.clip(F32(3e-4) * (target - ell) + F32(0.5), F32(0), F32(1))
            r = np.where(correct > 0, score, F32(0)).astype(F32)
        cols = {"length": ell, "correct": correct, "target_length": target, "reward": r}
        return cols, [], "reward"
    if spec in ("effective_sample_size", "masking_diagnostics"):
        w = [rng.uniform(0.0, 3.0, int(n)).astype(F32) for n in rng.integers(1, 100, ROWS)]
        for x in w[::3]:
            x[rng.random(x.size) < 0.5] = F32(0.0)
            x[0] = F32(1.0)  # at least one positive weight
        sq = [np.sum(x, dtype=F32) ** 2 / np.sum(x * x, dtype=F32) for x in w]
        if spec == "effective_sample_size":
            return {"weight": _rows(w), "ess": np.array(sq, dtype=F32)}, [], "ess"
        s = _rows([rng.integers(0, 4, x.size) for x in w])
        fraction = np.array([e / F32(x.size) for e, x in zip(sq, w, strict=True)], dtype=F32)
        cols = {"staleness": s, "weight": _rows(w), "effective_sample_size": fraction}
        return cols, ["statistic=effective_sample_size", "ess=fraction"], "effective_sample_size"
    if spec == "kimi_length_reward":
        spans = [rng.integers(0, 4096, int(n)).astype(F32) for n in rng.integers(1, 9, ROWS)]
        spans[0][:] = spans[0][0]  # no length spread: reward 0
        right = [rng.integers(0, 2, x.size) for x in spans]
        rewards = []
        for x, c in zip(spans, right, strict=True):
            lo, hi = x.min(), x.max()
            lam = F32(0.5) - (x - lo) / (hi - lo) if hi > lo else np.zeros_like(x)
            rewards.append(np.where(c > 0, lam, np.minimum(lam, F32(0.0))).astype(F32))
        cols = {"length": _rows(spans), "correct": _rows(right), "reward": _rows(rewards)}
        return cols, [], "reward"
    if spec == "vtrace":
        rows: dict[str, list[Any]] = {k: [] for k in ("v_tm1", "v_t", "r_t", "discount_t")}
        rows |= {"rho_tm1": [], "pg_advantage": []}
        for n in rng.integers(1, 40, ROWS):
            v_tm1, v_t, r_t = (rng.normal(0.0, 1.0, int(n)).astype(F32) for _ in range(3))
            discount = np.full(int(n), F32(0.99))
            rho = np.exp(rng.normal(0.0, 0.5, int(n))).astype(F32)
            rows["pg_advantage"].append(_float32_vtrace(v_tm1, v_t, r_t, discount, rho, F32(0.9)))
            for k, x in zip(rows, (v_tm1, v_t, r_t, discount, rho), strict=False):
                rows[k].append(x)
        return (
            {k: _rows(col) for k, col in rows.items()},
            ["output=pg_advantage", "lambda_=0.9"],
            "pg_advantage",
        )
    if spec == "policy_loss":
        return _policy_loss_trace(rng)
    raise AssertionError(f"no float32 trace for spec {spec!r}")


def _policy_loss_trace(rng: np.random.Generator) -> tuple[dict[str, Any], list[str], str]:
    """Steps of 30-39 sequences, each step's PPO-clip token-mean loss computed by torch in
    float32 from the float32 inputs it logs (one row per sequence, padded token lists)."""
    seed = int(rng.integers(2**31))
    pairs = [torch_ppo_token_mean_float32(s) for s in make_steps(seed, n=6, rows=(30, 40))]
    logged = columns([s for _, s in pairs], [x for x, _ in pairs])
    loss = logged.pop("loss")
    cols = {
        k: _rows([np.asarray(x) for x in v]) if isinstance(v[0], list) else np.asarray(v)
        for k, v in logged.items()
    }
    return {**cols, "loss": np.asarray(loss)}, PPO, "loss"


def _rows(arrays: list[Any]) -> Any:
    """A list column: one array per row."""
    out = np.empty(len(arrays), dtype=object)
    for i, a in enumerate(arrays):
        out[i] = a
    return out


def _float32_vtrace(v_tm1: Any, v_t: Any, r_t: Any, discount: Any, rho: Any, lam: Any) -> Any:
    """rlax's V-trace in float32, thresholds 1: the policy-gradient advantage."""
    one = F32(1.0)
    rho_bar = np.minimum(rho, one)
    c = lam * np.minimum(rho, one)
    delta = rho_bar * (r_t + discount * v_t - v_tm1)
    errors = np.zeros_like(delta)
    acc = F32(0.0)
    for t in reversed(range(delta.size)):
        acc = delta[t] + discount[t] * c[t] * acc
        errors[t] = acc
    targets = v_tm1 + errors
    following = np.concatenate([lam * targets[1:] + (one - lam) * v_tm1[1:], v_t[-1:]])
    q = r_t + discount * following
    return (np.minimum(rho, one) * (q - v_tm1)).astype(F32)


def _write(path: Path, cols: dict[str, Any], rename: dict[str, str]) -> None:
    names = list(cols)
    with path.open("w") as f:
        for i in range(len(cols[names[0]])):
            row = {rename.get(k, k): _json(cols[k][i]) for k in names}
            f.write(json.dumps(row) + "\n")


def _json(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return [float(x) for x in value]
    if isinstance(value, (int, np.integer)):
        return int(value)
    return float(value)


PLANTED: dict[str, Callable[[Any], Any]] = {
    "staleness_mask": lambda w: 1.0 - np.asarray(w),
    "staleness": lambda s: np.asarray(s) + 1,
    "admission_capacity": lambda c: np.asarray(c) + 1,
}


def _planted(spec: str, found: Any) -> Any:
    if spec in PLANTED:
        return PLANTED[spec](found)
    if found.dtype == object:  # a list per row
        return _rows([_planted(spec, np.asarray(f, dtype=np.float64)) for f in found])
    return np.asarray(found, dtype=np.float64) * (1 + 1e-3) + 1e-3  # a 0.1% bias


@pytest.mark.parametrize("spec", list(SPECS))
def test_a_correct_float32_trace_passes_and_a_planted_bug_fails(
    spec: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cols, params, found = _trace(spec, np.random.default_rng(RNG_SEED))
    rename = {found: f"logged_{found}"}  # a framework's own column name
    trace = tmp_path / "trace.jsonl"
    _write(trace, cols, rename)
    args = ["check", str(trace), "--spec", spec, "--dtype", "float32"]
    args += [a for p in params for a in ("--param", p)]
    args += ["--column", f"{found}=logged_{found}"]
    assert main(args) == 0, capsys.readouterr().out
    bad = dict(cols)
    bad[found] = _planted(spec, cols[found])
    _write(trace, bad, rename)
    assert main(args) == 1, capsys.readouterr().out


def test_float64_default_tolerance_rejects_what_float32_accepts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A float32 sum over 4096 tokens of log-ratios +5 then −5, accumulated in order (as a loop
    does: the partial sums reach 10^4), differs from float64 by ~1e-3 relative: beyond TRACE's 1e-5,
    within the derived bound ``(⌈log₂ T⌉ + 1)·u·Σ|d|``, so --dtype float32 is what makes this
    correct trace pass."""
    rng = np.random.default_rng(3)
    lt, lb, w = [], [], []
    for _ in range(8):
        b = (-rng.exponential(2.0, 4096)).astype(F32)
        d = (np.repeat([5.0, -5.0], 2048) + rng.normal(0.0, 0.1, 4096)).astype(F32)
        a = (b + d).astype(F32)
        s = np.cumsum(a - b, dtype=F32)[-1]  # sequential float32 accumulation
        lt.append(a)
        lb.append(b)
        w.append(np.minimum(np.exp(np.minimum(s, F32(80.0))), F32(1e30)))
    trace = tmp_path / "long.jsonl"
    _write(trace, {"logp_target": lt, "logp_behavior": lb, "weight": np.array(w)}, {})
    args = ["check", str(trace), "--spec", "tis_sequence", "--param", "cap=1e30"]
    assert main([*args, "--dtype", "float32"]) == 0, capsys.readouterr().out
    assert main(args) == 1, capsys.readouterr().out


def test_an_unknown_column_mapping_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"staleness": 0, "weight": 1}\n')
    code = main(["check", str(trace), "--spec", "staleness_mask", "--param", "eta=1",
                 "--column", "response_mask=mask"])  # fmt: skip
    assert code == 2
    assert "does not read" in capsys.readouterr().err


def trace_specs_cover(
    trace_specs: Iterable[str], conformance: Iterable[str], trace_only: Iterable[str]
) -> None:
    """Every conformance spec has a trace spec of its name, and the trace specs without one are
    exactly the declared trace-only ones."""
    trace, specs, only = set(trace_specs), set(conformance), list(trace_only)
    assert specs <= trace, f"conformance specs with no trace spec: {sorted(specs - trace)}"
    assert trace - specs == set(only), (
        f"trace specs with no conformance spec: {sorted(trace - specs)}; declared trace-only: "
        f"{sorted(only)} (check_cli.TRACE_ONLY)"
    )
    assert len(set(only)) == len(only), f"TRACE_ONLY names a spec twice: {only}"


def test_every_conformance_spec_has_a_trace_spec() -> None:
    trace_specs_cover(SPECS, spec_names(), TRACE_ONLY)


def test_the_coverage_rule_rejects_a_missing_or_undeclared_trace_spec() -> None:
    rejects(trace_specs_cover, set(SPECS) - {"tis"}, spec_names(), TRACE_ONLY)  # tis lost
    rejects(trace_specs_cover, SPECS, spec_names(), ())  # policy_loss not declared
    rejects(trace_specs_cover, SPECS, spec_names(), (*TRACE_ONLY, "tis"))  # tis has a spec
    rejects(trace_specs_cover, SPECS, spec_names(), (*TRACE_ONLY, "no_such_spec"))


def test_a_list_row_of_the_wrong_length_is_unusable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"length": [1, 2, 3], "correct": [1, 0, 1], "reward": [0.5, -0.5]}\n')
    assert main(["check", str(trace), "--spec", "kimi_length_reward"]) == 2
    assert "reward has 2 values, expected 3" in capsys.readouterr().err


def test_the_trace_howto_lists_every_spec() -> None:
    import re

    page = Path(__file__).resolve().parent.parent / "docs" / "howto" / "gate-ci-on-traces.md"
    rows = [line for line in page.read_text().splitlines() if line.startswith("| `")]
    listed = {name for line in rows for name in re.findall(r"`(\w+)`", line.split("|")[1])}
    assert listed == set(SPECS)
