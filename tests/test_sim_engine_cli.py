"""``refimpl simulate --engine-model``: the engine mode from the command line, its JSON, its
refusals, one-time costs reported apart from the rate, and a trace that never overwrites an input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from refimpl.cli import main
from refimpl.sim import SimConfig, simulate_engine
from refimpl.sim.engine import EngineModel

_RUN = ["simulate", "--slots", "4", "--batch", "8", "--rollouts", "64", "--seed", "3"]


def _json(capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    assert main([*_RUN, *extra, "--json"]) == 0, capsys.readouterr().err
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_the_engine_mode_reports_the_apis_figures(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(
        capsys, "--engine-model", "unbounded", "--kv-memory-gib", "0.05", "--block-size", "4",
        "--prompt-tokens", "10", "--group-size", "2", "--mu", "3",
    )  # fmt: skip
    model = EngineModel(kv_memory_bytes=int(0.05 * 2**30), block_size=4, prompt_tokens=10, group_size=2)  # fmt: skip
    cfg = SimConfig(slots=4, batch=8, rollouts=64, seed=3, lognormal_mu=3.0, engine_model=model)
    run = simulate_engine(cfg)
    assert out["mode"] == "engine"
    assert out["engine"] == json.loads(json.dumps(run.stats.to_json_dict()))
    assert out["staleness_hist"] == run.trace.summary().staleness_hist.tolist()
    assert out["engine"]["total_blocks"] == int(0.05 * 2**30) // (4 * 57344) == 234


def test_one_time_costs_are_reported_apart(capsys: pytest.CaptureFixture[str]) -> None:
    for extra in ([], ["--engine-model", "unbounded"]):
        out = _json(capsys, *extra)
        assert set(out) >= {"startup_s", "lengths_s", "kernel_s", "sim_wall_s", "total_wall_s"}
        assert out["kernel_s"] >= 0.0
        assert out["lengths_s"] >= 0.0
        assert out["rollouts_per_s"] == pytest.approx(out["trained_rollouts"] / out["sim_wall_s"])


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--block-size", "8"], "--block-size applies only to the engine mode"),
        (["--preemption", "swap"], "--preemption applies only to the engine mode"),
        (["--engine-model", "unbounded", "--mode", "sync"], "--mode must be async"),
        (["--engine-model", "unbounded", "--prefill-time", "1"], "--prefill-time applies only"),
        (["--engine-model", "unbounded", "--block-size", "0"], "--block-size must be >= 1"),
        (["--engine-model", "unbounded", "--kv-memory-gib", "-1"], "--kv-memory-gib must be"),
        (["--engine-model", "unbounded", "--tool-turns", "2"], "--engine-model applies only"),
    ],
)
def test_refusals(extra: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*_RUN, *extra]) == 2
    err = capsys.readouterr().err
    assert says in err, err
    assert err.count("\n") == 1


def test_a_budget_that_holds_no_sequence_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*_RUN, "--engine-model", "unbounded", "--kv-memory-gib", "1e-9"]) == 2
    assert "no sequence fits" in capsys.readouterr().err


def test_the_trace_never_overwrites_an_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lengths = tmp_path / "lengths.parquet"  # an .npy file under a name the trace could take
    with lengths.open("wb") as f:
        np.save(f, np.ones((4, 100)))
    before = lengths.read_bytes()
    code = main([*_RUN, "--lengths-npy", str(lengths), "--trace", str(lengths)])
    assert code == 2
    assert "--trace must not name an input" in capsys.readouterr().err
    assert lengths.read_bytes() == before
    # through a symlink too
    link = tmp_path / "link.parquet"
    link.symlink_to(lengths)
    assert main([*_RUN, "--lengths-npy", str(lengths), "--trace", str(link)]) == 2
    assert lengths.read_bytes() == before


def test_the_trace_is_written_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import pyarrow.parquet as pq

    out = tmp_path / "t.parquet"
    assert main([*_RUN, "--engine-model", "unbounded", "--trace", str(out)]) == 0
    assert pq.read_table(out).num_rows > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet"]  # no temporary left
