"""``refimpl check``: good, wrong and malformed traces in CSV, JSONL and Parquet.

Good traces are logged with refimpl's own values; wrong traces carry a planted bug (the first
mismatching row is known); malformed traces must exit 2 with the line (or Parquet row) named.
"""

from __future__ import annotations

import io
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import refimpl
from refimpl.cli import main
from refimpl.testing.check_cli import EXIT_MISMATCH, EXIT_OK, EXIT_UNUSABLE

FORMATS = ("csv", "jsonl", "parquet")
SUFFIX = {"csv": ".csv", "jsonl": ".jsonl", "parquet": ".parquet"}

Columns = dict[str, list[Any]]


def write_trace(directory: Path, fmt: str, columns: Columns, name: str = "trace") -> Path:
    """Write ``columns`` as a trace in ``fmt`` (lists become list cells; None an empty cell)."""
    path = directory / f"{name}{SUFFIX[fmt]}"
    names = list(columns)
    rows = list(zip(*columns.values(), strict=True))
    if fmt == "parquet":
        pq.write_table(pa.table(columns), path)
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps(dict(zip(names, r, strict=True))) + "\n" for r in rows))
    else:

        def cell(v: Any) -> str:
            if v is None:
                return ""
            if isinstance(v, list):
                return " ".join(map(str, v))
            return repr(v) if isinstance(v, float) else str(v)

        lines = [",".join(names)] + [",".join(cell(v) for v in r) for r in rows]
        path.write_text("\n".join(lines) + "\n")
    return path


def check(path: Path, spec: str, *extra: str) -> int:
    return main(["check", str(path), "--spec", spec, "--no-progress", *extra])


def where(fmt: str, row: int) -> str:
    """How the command names data row ``row`` (0-based): a line for text formats (header = 1)."""
    return f"row {row}" if fmt == "parquet" else f"line {row + 2 if fmt == 'csv' else row + 1}"


# ---------------------------------------------------------------------------------------------
# one good trace and one planted bug per spec
# ---------------------------------------------------------------------------------------------


class Case(NamedTuple):
    spec: str
    params: list[str]
    good: Columns
    wrong: Columns  # a planted bug
    first_bad_row: int


def _floats(x: Any) -> list[float]:
    return [float(v) for v in np.asarray(x, dtype=float)]


def _cases() -> list[Case]:
    s = [0, 1, 2, 1, 0, 3, 2, 5]
    eta = 2
    mask = _floats(refimpl.staleness_mask(s, eta=eta))
    strict = _floats(np.asarray(s) < eta)  # the off-by-one: drops s == eta
    rng = np.random.default_rng(0)
    lt = rng.uniform(-6, 0, 12).tolist()
    lb = rng.uniform(-6, 0, 12).tolist()
    lb[0] = lt[0]  # an on-policy token
    tis = _floats(refimpl.truncated_is_weights(lt, lb, cap=2.0))
    no_cap = _floats(np.exp(np.subtract(lt, lb)))  # TIS without its cap
    mis = _floats(refimpl.masked_is_weights(lt, lb, low=0.5, high=2.0))
    clipped = _floats(np.clip(np.exp(np.subtract(lt, lb)), 0.5, 2.0))  # clipped, not masked
    b = [0.0, 0.5, 1.0, 2.0, 4.0]
    pen = _floats(refimpl.effort_penalty(b, k0=0.5, b_min=0.0, tau=1.5))
    wrong_sign = _floats(0.5 * np.exp(np.asarray(b) / 1.5))
    steps = [5, 5, 6, 6, 7]
    versions = [[5, 5], [3, 4, 4], [6], [2, 5, 6], [7, 7]]
    oldest = [min(v) for v in versions]
    stale = [j - v for j, v in zip(steps, oldest, strict=True)]
    newest = [j - max(v) for j, v in zip(steps, versions, strict=True)]  # newest token decides
    cases = [
        Case(
            "staleness_mask",
            [f"eta={eta}"],
            {"staleness": s, "weight": mask},
            {"staleness": s, "weight": strict},
            first_bad_row=2,
        ),
        Case(
            "tis",
            ["cap=2.0"],
            {"logp_target": lt, "logp_behavior": lb, "weight": tis},
            {"logp_target": lt, "logp_behavior": lb, "weight": no_cap},
            first_bad_row=int(np.flatnonzero(np.asarray(no_cap) > 2.0)[0]),
        ),
        Case(
            "masked_is",
            ["low=0.5", "high=2.0"],
            {"logp_target": lt, "logp_behavior": lb, "weight": mis},
            {"logp_target": lt, "logp_behavior": lb, "weight": clipped},
            first_bad_row=int(np.flatnonzero(np.asarray(clipped) != np.asarray(mis))[0]),
        ),
        Case(
            "effort_penalty",
            ["k0=0.5", "b_min=0.0", "tau=1.5"],
            {"b": b, "penalty": pen},
            {"b": b, "penalty": wrong_sign},
            first_bad_row=1,
        ),
        Case(
            "staleness",
            [],
            {"trained_step": steps, "min_version": oldest, "staleness": stale},
            {"trained_step": steps, "versions": versions, "staleness": newest},
            first_bad_row=1,
        ),
    ]
    if hasattr(refimpl, "inclusion_probability"):
        u = [0.0, 0.1, 0.5, 0.9, 1.0]
        pi = _floats(refimpl.inclusion_probability(u, n=8, k=4))
        from scipy import stats

        off = _floats(stats.binom.cdf(4, 7, u))  # P(Bin(n−1, F) ≤ k) instead of ≤ k − 1
        cases.append(
            Case(
                "inclusion_probability",
                ["n=8", "k=4"],
                {"cdf": u, "pi": pi},
                {"cdf": u, "pi": off},
                first_bad_row=1,
            )
        )
    return cases


CASES = _cases()


def _params(case: Case) -> list[str]:
    return [x for p in case.params for x in ("--param", p)]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", CASES, ids=[c.spec for c in CASES])
def test_trace_logged_with_the_reference_values_passes(
    case: Case, fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_trace(tmp_path, fmt, case.good)
    assert check(path, case.spec, *_params(case)) == EXIT_OK
    out = capsys.readouterr().out
    assert f"OK: all {len(next(iter(case.good.values())))} rows agree" in out


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", CASES, ids=[c.spec for c in CASES])
def test_trace_with_a_planted_bug_fails_and_names_the_first_bad_row(
    case: Case, fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_trace(tmp_path, fmt, case.wrong)
    report = tmp_path / "report.json"
    assert check(path, case.spec, *_params(case), "--report", str(report)) == EXIT_MISMATCH
    out = capsys.readouterr().out
    assert "MISMATCH" in out
    first = json.loads(report.read_text())["first_mismatches"][0]
    assert first["row"] == case.first_bad_row
    assert first["where"] == where(fmt, case.first_bad_row)
    assert f"  {first['where']}: " in out


def test_staleness_recomputed_from_per_token_versions_passes(tmp_path: Path) -> None:
    versions = [[5, 5], [3, 4, 4], [6], [2, 5, 6]]
    columns: Columns = {
        "trained_step": [5, 5, 6, 6],
        "versions": versions,
        "staleness": [0, 2, 0, 4],
    }
    for fmt in FORMATS:
        assert check(write_trace(tmp_path, fmt, columns), "staleness") == EXIT_OK


def test_float32_logging_is_within_the_trace_tolerance_but_a_real_error_is_not(
    tmp_path: Path,
) -> None:
    case = next(c for c in CASES if c.spec == "tis")
    logged = dict(case.good)
    logged["weight"] = [float(np.float32(w)) for w in case.good["weight"]]
    assert check(write_trace(tmp_path, "csv", logged), "tis", "--param", "cap=2.0") == EXIT_OK
    logged["weight"] = [w * (1 + 1e-3) for w in case.good["weight"]]
    path = write_trace(tmp_path, "csv", logged)
    assert check(path, "tis", "--param", "cap=2.0") == EXIT_MISMATCH
    assert check(path, "tis", "--param", "cap=2.0", "--rtol", "1e-2") == EXIT_OK


def test_band_edge_ratio_may_be_kept_or_dropped(tmp_path: Path) -> None:
    lt, lb = [math.log(2.0), 0.0], [0.0, 0.0]  # ratio exactly at high = 2, and on-policy
    for weight in ([2.0, 1.0], [0.0, 1.0]):
        columns: Columns = {"logp_target": lt, "logp_behavior": lb, "weight": weight}
        path = write_trace(tmp_path, "jsonl", columns)
        assert check(path, "masked_is", "--param", "low=0.5", "--param", "high=2.0") == EXIT_OK


# ---------------------------------------------------------------------------------------------
# streaming
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_mismatch_deep_in_a_streamed_trace_is_found_with_its_line(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    n = 5_000
    s = (np.arange(n) % 7).tolist()
    weight = _floats(refimpl.staleness_mask(s, eta=3))
    weight[4321] = 1.0 - weight[4321]
    path = write_trace(tmp_path, fmt, {"staleness": s, "weight": weight})
    report = tmp_path / "r.json"
    args = ["--param", "eta=3", "--chunk-rows", "64", "--report", str(report)]
    assert check(path, "staleness_mask", *args) == EXIT_MISMATCH
    data = json.loads(report.read_text())
    assert (data["rows"], data["mismatches"]) == (n, 1)
    assert data["first_mismatches"][0]["where"] == where(fmt, 4321)


def test_progress_goes_to_stderr_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = CASES[0]
    path = write_trace(tmp_path, "csv", case.good)
    assert main(["check", str(path), "--spec", case.spec, *_params(case), "--progress"]) == 0
    captured = capsys.readouterr()
    assert "refimpl check staleness_mask" in captured.err
    assert "refimpl check staleness_mask" not in captured.out.splitlines()[-1]


# ---------------------------------------------------------------------------------------------
# NaN, infinity and huge values
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_nan_or_huge_logged_value_is_a_mismatch(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    columns: Columns = {"staleness": [0, 1, 2, 3], "weight": [1.0, math.nan, 1e308, 0.0]}
    if fmt == "jsonl":  # json.dumps writes NaN, as Python trainers do
        pass
    path = write_trace(tmp_path, fmt, columns)
    report = tmp_path / "r.json"
    assert check(path, "staleness_mask", "--param", "eta=1", "--report", str(report)) == 1
    data = json.loads(report.read_text())
    assert data["mismatches"] == 2
    assert [m["found"] for m in data["first_mismatches"]] == ["nan", 1e308]


@pytest.mark.parametrize("fmt", FORMATS)
def test_huge_finite_inputs_are_checked_not_rejected(fmt: str, tmp_path: Path) -> None:
    columns: Columns = {
        "logp_target": [0.0, -1e300, 0.0],
        "logp_behavior": [-1e300, 0.0, 0.0],
        "weight": [2.0, 0.0, 1.0],  # capped, underflowed to 0, on-policy
    }
    assert check(write_trace(tmp_path, fmt, columns), "tis", "--param", "cap=2.0") == EXIT_OK


@pytest.mark.parametrize("fmt", FORMATS)
def test_nan_input_is_unusable_and_names_its_row(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    columns: Columns = {
        "logp_target": [0.0, -1.0, math.nan],
        "logp_behavior": [0.0, -1.0, -1.0],
        "weight": [1.0, 1.0, 1.0],
    }
    path = write_trace(tmp_path, fmt, columns)
    assert check(path, "tis", "--param", "cap=2.0") == EXIT_UNUSABLE
    err = capsys.readouterr().err
    assert f"{where(fmt, 2)}: the inputs (logp_target=nan, logp_behavior=-1)" in err
    assert "finite" in err


@pytest.mark.parametrize("fmt", FORMATS)
def test_input_outside_the_reference_domain_is_unusable(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    columns: Columns = {
        "trained_step": [3, 3, 3],
        "min_version": [3, 2, 4],
        "staleness": [0, 1, -1],
    }
    assert check(write_trace(tmp_path, fmt, columns), "staleness") == EXIT_UNUSABLE
    err = capsys.readouterr().err
    assert f"{where(fmt, 2)}: the inputs (trained_step=3, min_version=4)" in err
    assert "newer" in err


# ---------------------------------------------------------------------------------------------
# malformed traces
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_empty_file_is_unusable(fmt: str, tmp_path: Path) -> None:
    path = tmp_path / f"empty{SUFFIX[fmt]}"
    path.write_bytes(b"")
    assert check(path, "staleness_mask", "--param", "eta=1") == EXIT_UNUSABLE


@pytest.mark.parametrize("fmt", FORMATS)
def test_trace_without_rows_is_unusable(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if fmt == "parquet":
        path = tmp_path / "t.parquet"
        schema = pa.schema([("staleness", pa.int64()), ("weight", pa.float64())])
        pq.write_table(schema.empty_table(), path)
    elif fmt == "csv":
        path = tmp_path / "t.csv"
        path.write_text("staleness,weight\n")
    else:
        path = tmp_path / "t.jsonl"
        path.write_text("\n\n")
    assert check(path, "staleness_mask", "--param", "eta=1") == EXIT_UNUSABLE
    assert "has no rows" in capsys.readouterr().err


@pytest.mark.parametrize("fmt", FORMATS)
def test_missing_column_is_unusable_and_named(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_trace(tmp_path, fmt, {"staleness": [0, 1], "w": [1.0, 1.0]})
    assert check(path, "staleness_mask", "--param", "eta=1") == EXIT_UNUSABLE
    assert "'weight'" in capsys.readouterr().err


@pytest.mark.parametrize("fmt", FORMATS)
def test_wrong_type_is_unusable_and_names_its_row(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_trace(tmp_path, fmt, {"staleness": [0, 1, 2], "weight": ["1", "1", "zero"]})
    assert check(path, "staleness_mask", "--param", "eta=1") == EXIT_UNUSABLE
    err = capsys.readouterr().err
    if fmt == "csv":  # CSV has no types: "1" is a number, "zero" is not
        assert "line 4: column 'weight' holds 'zero', not a number" in err
    elif fmt == "jsonl":
        assert "line 1: 'weight' is '1' (str), not a number" in err
    else:
        assert "column 'weight' has type string, not numbers" in err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"staleness": 0, "weight": 1}\n{"staleness": 1, "weight": 1\n', "line 2: not valid JSON"),
        ('{"staleness": 0, "weight": 1}\n[0, 1]\n', "line 2: a JSON list, not an object"),
        ('{"staleness": 0, "weight": 1}\n\n{"staleness": 1}\n', "line 3: no key 'weight'"),
        (
            '{"staleness": 0, "weight": null}\n',
            "line 1: 'weight' is None (null), not a number. Log numbers, not null.",
        ),
        (
            '{"staleness": true, "weight": 1}\n',
            "line 1: 'staleness' is True (bool), not a number. Log numbers, not booleans",
        ),
        (
            '{"staleness": 0, "weight": "1"}\n',
            "line 1: 'weight' is '1' (str), not a number. Log numbers, not strings.",
        ),
        (
            '{"staleness": 0, "weight": {"w": 1}}\n',
            "'weight' is {'w': 1} (dict), not a number. Log numbers, not dict values.",
        ),
    ],
)
def test_unparsable_jsonl_row_is_unusable_with_its_line(
    text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    assert check(path, "staleness_mask", "--param", "eta=1") == EXIT_UNUSABLE
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("staleness,weight\n0,1\n1,\n", "line 3: column 'weight' is empty"),
        ("staleness,weight\n0,1\n1,1,7\n", "line 3: unparsable CSV"),
        ("staleness,weight\n0,1\n1, 1\n", "line 3: column 'weight' holds ' 1', not a number"),
    ],
)
def test_unparsable_csv_row_is_unusable(
    text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.csv"
    path.write_text(text)
    assert check(path, "staleness_mask", "--param", "eta=1") == EXIT_UNUSABLE
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("staleness,weight\n0,1\nabc,1\n", "line 3: column 'staleness' holds 'abc'"),
        ("staleness,weight\n0,1\n1,1,7\n", "line 3: unparsable CSV (3 fields"),
    ],
)
def test_unusable_csv_exits_2_every_time_in_a_real_process(
    text: str, message: str, tmp_path: Path
) -> None:
    # pyarrow's streaming CSV reader, alive at interpreter exit after the error, aborted the
    # process ("terminate called without an active exception", exit 134) in 25-95 % of the runs.
    # Twenty runs that all exit 2 would happen by chance with probability < 0.75**20 < 0.01 if
    # that were back. A fresh interpreter costs ~2.5 s of imports, so one process imports
    # refimpl and forks a child per run: each child runs the command (refimpl.cli.main, what
    # `python -m refimpl` runs) and exits through a full interpreter shutdown, as a CI job does.
    import subprocess
    import sys
    import textwrap

    path = tmp_path / "t.csv"
    path.write_text(text)
    script = textwrap.dedent(
        f"""
        import os, sys
        from refimpl.cli import main
        import refimpl.testing.check_cli
        codes = []
        for _ in range(20):
            pid = os.fork()
            if pid == 0:
                sys.exit(main(["check", {str(path)!r}, "--spec", "staleness_mask",
                               "--param", "eta=1", "--no-progress"]))
            codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
        print("CODES", codes)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert done.stdout.strip() == f"CODES {[EXIT_UNUSABLE] * 20}", (done.stdout, done.stderr)
    assert done.stderr.count(message) == 20, done.stderr
    command = ["check", str(path), "--spec", "staleness_mask", "--param", "eta=1"]
    direct = subprocess.run(  # and once through the installed entry point itself
        [sys.executable, "-m", "refimpl", *command, "--no-progress"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (direct.returncode, message in direct.stderr) == (EXIT_UNUSABLE, True), direct.stderr


def test_csv_lines_are_counted_across_blocks_and_blank_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = ["staleness,weight"] + ["1,1"] * 999 + [""] + ["1,1"] * 500 + ["1,0"] + ["1,1"] * 10
    path = tmp_path / "t.csv"
    path.write_text("\r\n".join(rows) + "\r\n")
    assert check(path, "staleness_mask", "--param", "eta=1", "--chunk-rows", "8") == EXIT_MISMATCH
    out = capsys.readouterr().out
    assert "1 of 1,510 rows" in out
    assert "line 1502: staleness=1 -> expected weight=1, found weight=0" in out
    bad = "\n".join([*rows[:1200], "1,1,1", *rows[1200:]]) + "\n"
    path.write_text(bad)
    assert check(path, "staleness_mask", "--param", "eta=1", "--chunk-rows", "8") == EXIT_UNUSABLE
    assert "line 1201: unparsable CSV (3 fields, the header has 2)" in capsys.readouterr().err


def test_quoted_csv_field_is_not_split_between_blocks(tmp_path: Path) -> None:
    rows = ["trained_step,versions,staleness"] + ['5,"[3, 4,\n 5]",2'] * 3000
    path = tmp_path / "t.csv"
    path.write_text("\n".join(rows) + "\n")
    assert check(path, "staleness", "--chunk-rows", "8") == EXIT_OK


def test_null_in_parquet_is_unusable_with_its_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"staleness": [0, 1, 2], "weight": [1.0, None, 0.0]}), path)
    assert check(path, "staleness_mask", "--param", "eta=1") == EXIT_UNUSABLE
    assert "row 1: column 'weight' is null" in capsys.readouterr().err


def test_garbage_parquet_is_unusable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.parquet"
    path.write_bytes(b"staleness,weight\n0,1\n")
    assert check(path, "staleness_mask", "--param", "eta=1") == EXIT_UNUSABLE
    assert "not a readable Parquet file" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# the command line itself
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--spec", "nope"], "unknown spec 'nope'; use one of: staleness_mask"),
        (["--spec", "staleness_mask"], "needs parameter(s) eta: add --param eta=..."),
        (
            ["--spec", "staleness_mask", "--param", "eta=1", "--param", "cap=2"],
            "unknown parameter 'cap' for spec 'staleness_mask' (its parameters: eta, staleness_count)",
        ),
        (["--spec", "staleness_mask", "--param", "eta"], "--param must be KEY=VALUE"),
        (["--spec", "staleness_mask", "--param", "eta=one"], "--param eta must be an integer"),
        (["--spec", "staleness_mask", "--param", "eta=-1"], "eta must be >= 0"),
        (["--spec", "tis", "--param", "cap=0.5"], "cap must be >= 1"),
        (
            [
                "--spec",
                "effort_penalty",
                "--param",
                "k0=1",
                "--param",
                "b_min=0",
                "--param",
                "tau=0",
            ],
            "tau must be > 0",
        ),
        (["--spec", "tis", "--param", "cap=2", "--rtol", "-1"], "--rtol must be finite and >= 0"),
    ],
)
def test_bad_command_line_is_unusable_and_says_how_to_fix_it(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_trace(tmp_path, "csv", {"staleness": [0], "weight": [1.0]})
    assert main(["check", str(path), "--no-progress", *args]) == EXIT_UNUSABLE
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("value", "message"),
    [("-1", "must be >= 0; got -1"), ("two", "must be an integer >= 0; got 'two'")],
)
def test_negative_or_non_integer_max_show_is_unusable(
    value: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_trace(tmp_path, "csv", {"staleness": [0, 2], "weight": [1.0, 1.0]})
    with pytest.raises(SystemExit) as exit_info:
        check(path, "staleness_mask", "--param", "eta=1", "--max-show", value)
    assert exit_info.value.code == EXIT_UNUSABLE
    err = capsys.readouterr().err
    assert f"argument --max-show: {message}" in err


def test_max_show_zero_shows_no_rows_but_still_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_trace(tmp_path, "csv", {"staleness": [0, 2], "weight": [1.0, 1.0]})
    assert check(path, "staleness_mask", "--param", "eta=1", "--max-show", "0") == EXIT_MISMATCH
    out = capsys.readouterr().out
    assert "MISMATCH: 1 of 2 rows" in out
    assert "line 3" not in out
    assert "mismatching rows:" not in out


def test_format_comes_from_the_suffix_or_from_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_trace(tmp_path, "jsonl", {"staleness": [0], "weight": [1.0]})
    odd = path.rename(tmp_path / "trace.log")
    assert check(odd, "staleness_mask", "--param", "eta=0") == EXIT_UNUSABLE
    assert "pass --format" in capsys.readouterr().err
    assert check(odd, "staleness_mask", "--param", "eta=0", "--format", "jsonl") == EXIT_OK


def test_missing_file_is_unusable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert check(tmp_path / "nope.csv", "staleness_mask", "--param", "eta=0") == EXIT_UNUSABLE
    assert "no such file" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["loop.csv", "loop"])
def test_a_symlink_loop_is_named_as_one(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trace path that is a symlink to itself is not "no such file": the error says what it
    is, and how to fix it (with or without a suffix that tells the format)."""
    loop = tmp_path / name
    loop.symlink_to(loop)
    report = tmp_path / "r.json"
    code = check(loop, "staleness_mask", "--param", "eta=0", "--report", str(report))
    assert code == EXIT_UNUSABLE
    err = capsys.readouterr().err
    assert "a symlink loop" in err
    assert "fix or remove it" in err
    assert "no such file" not in err
    assert "a symlink loop" in json.loads(report.read_text())["error"]


@pytest.mark.parametrize(
    ("columns", "status", "code"),
    [
        ({"staleness": [0, 2], "weight": [1.0, 0.0]}, "ok", 0),
        ({"staleness": [0, 2], "weight": [0.0, 0.0]}, "mismatch", 1),
        ({"staleness": [0, 2], "w": [0.0, 0.0]}, "unusable", 2),
    ],
)
def test_report_records_the_outcome(
    columns: Columns, status: str, code: int, tmp_path: Path
) -> None:
    path = write_trace(tmp_path, "csv", columns)
    report = tmp_path / "r.json"
    assert check(path, "staleness_mask", "--param", "eta=1", "--report", str(report)) == code
    data = json.loads(report.read_text())
    assert (data["status"], data["exit_code"], data["spec"]) == (status, code, "staleness_mask")
    assert data["params"] == {"eta": 1}
    if code == 2:
        assert "no column 'weight'" in data["error"]
    else:
        assert data["tolerance"] == {"rtol": 0.0, "atol": 0.0}
        assert data["rows"] == 2


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("missing/r.json", "the directory"),
        (".", "is a directory, not a file"),
    ],
)
def test_unwritable_report_is_unusable_before_the_trace_is_read(
    where: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the trace is missing too: the report path is checked first, so its error is the one shown
    report = tmp_path / where
    code = check(
        tmp_path / "nope.csv", "staleness_mask", "--param", "eta=1", "--report", str(report)
    )
    assert code == EXIT_UNUSABLE
    err = capsys.readouterr().err
    assert f"--report {str(report)!r}" in err
    assert message in err
    assert "Pass a --report path in an existing, writable directory" in err
    assert "no such file" not in err
    assert "Traceback" not in err


def test_command_runs_as_a_subprocess(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = write_trace(tmp_path, "csv", {"staleness": [0, 1], "weight": [1.0, 0.0]})
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "refimpl",
            "check",
            str(path),
            "--spec",
            "staleness_mask",
            "--param",
            "eta=0",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "OK: all 2 rows agree" in done.stdout


SpecFactory = Callable[[], Case]


@pytest.mark.parametrize("fmt", FORMATS)
def test_staleness_without_any_version_column_says_which_to_log(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_trace(tmp_path, fmt, {"trained_step": [3], "version": [2], "staleness": [1]})
    assert check(path, "staleness") == EXIT_UNUSABLE
    assert "neither a 'min_version' nor a 'versions' column" in capsys.readouterr().err


# --- exact integers, unusable files, standard input ----------------------------------------------

_BIG = 2**60  # float64 rounds 2**60 + 1 and 2**60 + 3 to 2**60: a float staleness would be 0


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("layout", ["min_version", "versions"])
def test_staleness_is_computed_exactly_for_versions_beyond_2_to_the_53(
    fmt: str, layout: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    versions: Any = (
        [[_BIG + 1, _BIG + 3], [_BIG + 2]] if layout == "versions" else [_BIG + 1, _BIG + 2]
    )
    columns: Columns = {"trained_step": [_BIG + 3, _BIG + 3], layout: versions, "staleness": [2, 1]}
    assert float(_BIG + 3) - float(_BIG + 1) == 0  # what a float64 computation would expect
    assert check(write_trace(tmp_path, fmt, columns), "staleness") == EXIT_OK, capsys.readouterr()
    columns["staleness"] = [2, 0]  # 0: the float64 answer, wrong by one
    assert check(write_trace(tmp_path, fmt, columns, "wrong"), "staleness") == EXIT_MISMATCH
    out = capsys.readouterr().out
    assert "MISMATCH: 1 of 2 rows" in out
    assert f"trained_step={_BIG + 3}" in out  # shown exactly, not rounded
    assert "expected staleness=1, found staleness=0" in out


def test_staleness_is_exact_for_versions_beyond_int64_in_jsonl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big = 2**70
    columns: Columns = {"trained_step": [big + 3], "min_version": [big + 1], "staleness": [2]}
    assert check(write_trace(tmp_path, "jsonl", columns), "staleness") == EXIT_OK
    report = tmp_path / "r.json"
    columns["staleness"] = [3]
    path = write_trace(tmp_path, "jsonl", columns, "wrong")
    assert check(path, "staleness", "--report", str(report)) == EXIT_MISMATCH
    shown = json.loads(report.read_text())["first_mismatches"][0]
    assert shown["inputs"] == {"trained_step": big + 3, "min_version": big + 1}
    assert (shown["expected"], shown["found"]) == (2, 3)


@pytest.mark.parametrize(
    ("content", "spec", "says"),
    [
        (b"\x7fELF\x02\x01\x01\x00\x00\x00garbage,\xff\xfe\n1,2\n", "tis", "a NUL byte"),
        (b"logp_target,logp_behavior,weight\n0,0,1\n\xe9t\xe9,0,1\n", "tis", "not UTF-8"),
        (b"trained_step,min_version,staleness\n\x00\x01\x02\n", "staleness", "a NUL byte"),
    ],
)
def test_a_binary_file_given_as_csv_is_not_a_csv_text_file_and_no_byte_is_echoed(
    content: bytes, spec: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(content)
    params = ["--param", "cap=2"] if spec == "tis" else []
    assert check(path, spec, *params) == EXIT_UNUSABLE
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith(f"refimpl check: error: {str(path)!r} is not a CSV text file (line ")
    assert says in err
    assert "JSONL" in err
    assert "Parquet" in err
    assert err.isascii()
    assert "garbage" not in err


def _last_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(
    ("name", "make", "says"),
    [
        ("dir.csv", lambda p: p.mkdir(), "is a directory, not a trace file"),
        ("empty.csv", lambda p: p.write_bytes(b""), "is empty"),
        ("empty.jsonl", lambda p: p.write_bytes(b""), "has no rows"),
        ("empty.parquet", lambda p: p.write_bytes(b""), "is not a readable Parquet file"),
        ("t.parquet", None, "is not a readable Parquet file"),  # truncated
        # bytes before the data: the footer reads, the pages it points at do not (found by the
        # fuzzing harness: a pyarrow OSError traceback while the batches were read)
        ("shifted.parquet", "prefix", "its data from row 0 on cannot be decoded"),
        ("t.jsonl", lambda p: p.write_text('{"cdf": 0.5, "pi": 1}\n{"cdf": 0.5,\n'), "line 2"),
        ("t.jsonl", lambda p: p.write_text('{"cdf": 0.5, "pi": 1}\n[1, 2]\n'), "line 2: a JSON"),
    ],
)
def test_an_unusable_file_is_one_line_and_exit_2(
    name: str,
    make: Callable[[Path], object] | str | None,
    says: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / name
    if make is None or make == "prefix":
        good = write_trace(tmp_path, "parquet", {"cdf": [0.5] * 100, "pi": [0.75] * 100}, "good")
        data = good.read_bytes()
        path.write_bytes(data[: len(data) // 2] if make is None else b"\xef\xbb\xbf" + data)
    elif callable(make):
        make(path)
    assert check(path, "inclusion_probability", "--param", "n=2", "--param", "k=1") == 2
    err = _last_error(capsys)
    assert says in err, err


def test_dev_null_is_an_empty_trace(capsys: pytest.CaptureFixture[str]) -> None:
    assert check(Path("/dev/null"), "staleness", "--format", "csv") == EXIT_UNUSABLE
    assert "'/dev/null' is empty" in _last_error(capsys)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("bad", [math.nan, math.inf, 1e308 * 10])
def test_a_non_finite_version_is_unusable_and_a_non_finite_logged_staleness_a_mismatch(
    fmt: str, bad: float, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inputs: Columns = {"trained_step": [5, 5], "min_version": [3, bad], "staleness": [2, 0]}
    assert check(write_trace(tmp_path, fmt, inputs), "staleness") == EXIT_UNUSABLE
    err = _last_error(capsys)
    assert f"{where(fmt, 1)}: the inputs" in err, err
    logged: Columns = {"trained_step": [5, 5], "min_version": [3, 4], "staleness": [2, bad]}
    assert check(write_trace(tmp_path, fmt, logged, "logged"), "staleness") == EXIT_MISMATCH
    assert "MISMATCH: 1 of 2 rows" in capsys.readouterr().out


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_trace_on_standard_input_is_read_with_its_format_sniffed_or_given(
    fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    columns: Columns = {"trained_step": [5, 7], "min_version": [3, 7], "staleness": [2, 1]}
    data = write_trace(tmp_path, fmt, columns).read_bytes()
    for given in ([], ["--format", fmt]):
        _stdin(monkeypatch, data)
        assert main(["check", "-", "--spec", "staleness", "--no-progress", *given]) == 1
        out = capsys.readouterr().out
        assert f"refimpl check - ({fmt})" in out
        assert "MISMATCH: 1 of 2 rows" in out


def test_an_empty_or_broken_standard_input_is_named_as_such(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _stdin(monkeypatch, b"")
    assert main(["check", "-", "--spec", "staleness"]) == EXIT_UNUSABLE
    assert _last_error(capsys) == (
        "refimpl check: error: standard input is empty: no header line and no rows. "
        "Nothing to check.\n"
    )
    _stdin(monkeypatch, b"PAR1 truncated")
    assert main(["check", "-", "--spec", "staleness"]) == EXIT_UNUSABLE
    err = _last_error(capsys)
    assert err.startswith("refimpl check: error: standard input is not a readable Parquet file")
    assert "refimpl-check-" not in err  # the spooled copy is never named


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--param", "eta=1", "--param", "eta=2"], "--param eta is given twice (last 'eta=2')"),
        (["--param", "eta=1", "--rtol", "-1"], "--rtol must be finite and >= 0 (a tolerance); got"),
        (
            ["--param", "eta=1", "--atol", "nan"],
            "--atol must be finite and >= 0 (a tolerance); got",
        ),
    ],
)
def test_options_given_wrong_are_named_in_one_line(
    extra: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_trace(tmp_path, "csv", {"staleness": [0, 1], "weight": [1.0, 1.0]})
    assert check(path, "staleness_mask", *extra) == EXIT_UNUSABLE
    assert says in _last_error(capsys)
