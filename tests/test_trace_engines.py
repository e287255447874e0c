"""The JSONL engines of ``refimpl check`` agree: a trace read by polars (a large one, when polars
is installed) gets the verdict, the report and the error message of pyarrow's reader.

Each trace below is checked twice in one process, once with the polars threshold at 0 bytes (every
block tried with polars first) and once above the trace's size (pyarrow only); the exit codes,
the printed lines and the reports must be equal. The traces are the ones where the two readers
could differ: numbers of every form, a negative zero, blank lines, a key missing, repeated or given
as a string, a boolean, a null, an unknown key, lists with empty rows and nulls, many blocks.
A polars path without the guard on repeated keys is a wrong variant, and is caught.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects

from refimpl.cli import main
from refimpl.testing import _trace_jsonl

TIS = ["--spec", "tis", "--param", "cap=2"]
SEQ = ["--spec", "tis_sequence", "--param", "cap=2"]


def _tis_lines(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    lb = -rng.exponential(1.0, n) * 10.0 ** rng.integers(-5, 5, n)
    lt = lb + rng.normal(0.0, 0.3, n)
    w = np.minimum(np.exp(np.minimum(lt - lb, np.log(2.0))), 2.0)
    w[rng.random(n) < 0.05] *= 1.01
    out = []
    for t, b, x in zip(lt, lb, w, strict=True):
        out.append(json.dumps({"logp_target": float(t), "logp_behavior": float(b), "weight": x}))
    return out


GOOD = "\n".join(_tis_lines(3000)) + "\n"
CASES: dict[str, tuple[str, list[str]]] = {
    "many blocks": (GOOD, [*TIS, "--chunk-rows", "300"]),
    "forms of numbers": (
        '{"logp_target": -1, "logp_behavior": -1E0, "weight": 1}\n'
        '{"logp_target": -0.5e-3, "logp_behavior": -5e-4, "weight": 1.0000000000000002}\n'
        '{"logp_target": -1e-320, "logp_behavior": 0, "weight": 1}\n\n\n'
        '{"weight": 2, "logp_behavior": -3, "logp_target": 4, "other": "x"}\n',
        TIS,
    ),
    "negative zero": ('{"logp_target": -0, "logp_behavior": 0, "weight": -0}\n', TIS),
    "key repeated": (
        '{"logp_target": -1, "logp_behavior": -1, "weight": 1, "weight": 7}\n' * 3,
        TIS,
    ),
    "key repeated, escaped": (
        '{"logp_target": -1, "logp_behavior": -1, "weight": 1, "weigh\\u0074": 7}\n' * 3,
        TIS,
    ),
    "key missing": ('{"logp_target": -1, "logp_behavior": -1}\n', TIS),
    "key as a value": (
        '{"logp_target": -1, "logp_behavior": -1, "weight": 1, "x": "weight"}\n',
        TIS,
    ),
    "string": ('{"logp_target": -1, "logp_behavior": -1, "weight": "1"}\n', TIS),
    "boolean": ('{"logp_target": true, "logp_behavior": -1, "weight": 1}\n', TIS),
    "null": ('{"logp_target": -1, "logp_behavior": null, "weight": 1}\n', TIS),
    "nan": ('{"logp_target": NaN, "logp_behavior": -1, "weight": 1}\n', TIS),
    "not json": ('{"logp_target": -1, "logp_behavior": -1, "weight": 1\n', TIS),
    "lists": (
        '{"logp_target": [-1, -2.5], "logp_behavior": [-1, -2], "weight": 0.6065306597126334}\n'
        '{"logp_target": [-3], "logp_behavior": [-3], "weight": 1}\n',
        SEQ,
    ),
    "empty list": ('{"logp_target": [], "logp_behavior": [], "weight": 1}\n', SEQ),
    "not utf-8": ('{"logp_target": -1, "logp_behavior": -1, "weight": 1, "s": "\udcff"}\n', TIS),
    "nul": ('{"logp_target": -1, "logp_behavior": -1, "weight": 1}\x00\n', TIS),
    "null in a list": (
        '{"logp_target": [-1, null], "logp_behavior": [-1, -1], "weight": 1}\n',
        SEQ,
    ),
}

#: the exit code of each case (2, unusable, for the others)
EXIT_CODES = {
    "many blocks": 1,
    "forms of numbers": 0,
    "key as a value": 0,
    "negative zero": 1,
    "lists": 0,
}


def run(
    path: Path, argv: list[str], threshold: int, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> tuple[int, str, str, dict[str, Any]]:
    monkeypatch.setattr(_trace_jsonl, "POLARS_MIN_BYTES", threshold)
    report = path.with_suffix(".json")
    code = main(["check", str(path), *argv, "--no-progress", "--report", str(report)])
    out = capsys.readouterr()
    return code, out.out, out.err, json.loads(report.read_text())


def same_either_way(
    text: str, argv: list[str], tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> int:
    path = tmp / "t.jsonl"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))  # "\udcff": the byte 0xff
    with_polars = run(path, argv, 0, monkeypatch, capsys)
    with_pyarrow = run(path, argv, 1 << 62, monkeypatch, capsys)
    assert with_polars == with_pyarrow
    return with_polars[0]


@pytest.mark.parametrize("case", sorted(CASES))
def test_polars_and_pyarrow_give_the_same_verdict_report_and_error(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    pytest.importorskip("polars")  # the `trace` extra; without it pyarrow reads every trace
    text, argv = CASES[case]
    code = same_either_way(text, argv, tmp_path, monkeypatch, capsys)
    assert code == EXIT_CODES.get(case, 2)


def test_the_polars_path_is_taken_on_a_plain_block() -> None:
    """The agreement above is not vacuous: polars parses the good trace's blocks itself."""
    pytest.importorskip("polars")
    data = GOOD.encode()
    names = ["logp_target", "logp_behavior", "weight"]
    got = _trace_jsonl._jsonl_polars(data, 1, data.count(b"\n"), names, [])
    assert got is not None
    assert got[1].tolist() == list(range(1, 3001))


def test_a_polars_path_that_trusts_repeated_keys_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    pytest.importorskip("polars")
    import polars as pl

    def trusting(data: bytes, line: int, newlines: int, numeric: Any, lists: Any) -> Any:
        frame = pl.read_ndjson(data, schema=dict.fromkeys(numeric, pl.Float64))
        cols = {c: frame[c].to_numpy() for c in numeric}
        return cols, line + np.arange(frame.height, dtype=np.int64)

    monkeypatch.setattr(_trace_jsonl, "_jsonl_polars", trusting)
    text, argv = CASES["key repeated"]
    check: Callable[..., Any] = same_either_way
    rejects(check, text, argv, tmp_path, monkeypatch, capsys)
