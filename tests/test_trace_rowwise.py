"""A long chunk of a row-wise spec is computed in two halves on two threads: the values are the
whole chunk's, bit for bit, and a rejected input gives the one-thread run's verdict, report and
message. A reference that is not row-wise (each value divided by the chunk's mean) fails the
equality, so the check of the flag is not vacuous."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects

from refimpl.cli import main
from refimpl.testing import _trace_compare
from refimpl.testing._trace_spec import Columns, References
from refimpl.testing._trace_specs import SPECS

ROWWISE = sorted(name for name, spec in SPECS.items() if spec.rowwise)


def _inputs(name: str, n: int = 1001) -> tuple[Columns, list[dict[str, Any]]]:
    rng = np.random.default_rng(7)
    if name == "tis":
        lb = -rng.exponential(1.0, n)
        lt = lb + rng.normal(0.0, 1.0, n)
        cols: Columns = {"logp_target": lt, "logp_behavior": lb}
        params = [{"cap": 2.0}, {"cap": 1.0}, {"cap": 3.0, "lower": 0.5, "log_ratio_clamp": 0.7}]
        return cols, params
    assert name == "staleness_mask", f"give {name}'s inputs here"
    staleness = rng.poisson(2.0, n).astype(np.float64)
    return {"staleness": staleness}, [
        {"eta": 0},
        {"eta": 2},
        {"eta": 2, "staleness_count": "versions_spanned"},
    ]


def halves_are_the_whole(reference: Any, cols: Columns) -> None:
    n = len(next(iter(cols.values())))
    whole = np.asarray(reference(cols), dtype=np.float64)
    split = _trace_compare._on_two_threads(reference, cols, n)
    assert split.dtype == np.float64
    assert np.array_equal(split, whole, equal_nan=True)
    assert np.array_equal(np.signbit(split), np.signbit(whole))


def test_every_rowwise_spec_is_given_inputs_here() -> None:
    assert ROWWISE == ["staleness_mask", "tis"]


@pytest.mark.parametrize("name", ROWWISE)
def test_the_halves_of_a_rowwise_spec_are_the_whole_chunks_values(name: str) -> None:
    spec, refimpl = SPECS[name], References()
    cols, param_sets = _inputs(name)
    for params in param_sets:
        halves_are_the_whole(lambda c, p=params: spec.expected(refimpl, c, p), cols)


def test_a_reference_that_is_not_rowwise_is_caught() -> None:
    cols, _ = _inputs("tis")

    def normalized(c: Columns) -> Any:
        w = np.exp(np.asarray(c["logp_target"]) - np.asarray(c["logp_behavior"]))
        return w / w.mean()

    rejects(halves_are_the_whole, normalized, cols)


def _trace(path: Path, bad_row: int | None) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(3)
    lb = -rng.exponential(1.0, 64)
    lt = lb + rng.normal(0.0, 0.5, 64)
    w = np.minimum(np.exp(np.minimum(lt - lb, np.log(2.0))), 2.0)
    w[[5, 40, 41]] *= 1.01
    if bad_row is not None:
        lt[bad_row] = np.nan
    pq.write_table(pa.table({"logp_target": lt, "logp_behavior": lb, "weight": w}), path)


@pytest.mark.parametrize("bad_row", [None, 3, 50])
def test_a_check_on_two_threads_is_the_one_thread_check(
    bad_row: int | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    path = tmp_path / "t.parquet"
    _trace(path, bad_row)
    calls: list[int] = []
    real = _trace_compare._on_two_threads

    def counted(reference: Any, cols: Columns, n: int) -> Any:
        calls.append(n)
        return real(reference, cols, n)

    monkeypatch.setattr(_trace_compare, "_on_two_threads", counted)
    results = []
    for split_rows in (8, 1 << 60):
        monkeypatch.setattr(_trace_compare, "SPLIT_ROWS", split_rows)
        report = tmp_path / f"r{split_rows}.json"
        argv = ["check", str(path), "--spec", "tis", "--param", "cap=2", "--chunk-rows", "32"]
        code = main([*argv, "--no-progress", "--report", str(report)])
        out = capsys.readouterr()
        results.append((code, out.out.replace(str(report), "R"), out.err, report.read_text()))
    assert results[0] == results[1]
    # the first run split every chunk it checked (the first only, when it holds the bad row);
    # the second run none
    assert calls == ([32] if bad_row is not None and bad_row < 32 else [32, 32])
    assert results[0][0] == (1 if bad_row is None else 2)
    if bad_row is None:
        assert json.loads(results[0][3])["mismatches"] == 3
