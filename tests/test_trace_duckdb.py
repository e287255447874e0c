"""A large JSONL trace read by duckdb gets the verdict, the report and the error message of
pyarrow's reader.

Each trace below is checked in one process two ways: duckdb first and pyarrow after it (the
duckdb threshold at 0 bytes, polars' above the trace), and pyarrow alone (both above the trace);
those with an odd line after many good blocks also duckdb first and polars after it (both at 0). The exit codes, the printed lines and the reports
must be equal. The traces are those where duckdb reads otherwise than pyarrow, or might: numbers
as strings, booleans, trailing commas, ``nan``/``inf`` in any case, numbers beyond float64 (in a
column read and in one that is not), an integer ``-0``, blank lines, carriage returns, a key
repeated, missing or escaped, two objects on a line, one object over two lines, lists with empty
rows, nulls and strings, text that is not UTF-8, many blocks with the odd line late in the file.
A duckdb route without the certificate is a wrong variant, and is caught; the numbers duckdb
parses are pyarrow's, bit for bit, on many forms (digits, exponents, subnormals).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects, run_property
from hypothesis import given
from hypothesis import strategies as st

from refimpl.cli import main
from refimpl.testing import _trace_arrow, _trace_jsonl, _trace_jsonl_duckdb
from refimpl.testing._trace_arrow import float64

TIS = ["--spec", "tis", "--param", "cap=2"]
SEQ = ["--spec", "tis_sequence", "--param", "cap=2"]
NAMES = ["logp_target", "logp_behavior", "weight"]


def _tis_lines(n: int, seed: int = 0, spaced: bool = False) -> list[str]:
    rng = np.random.default_rng(seed)
    lb = -rng.exponential(1.0, n) * 10.0 ** rng.integers(-5, 5, n)
    lt = lb + rng.normal(0.0, 0.3, n)
    w = np.minimum(np.exp(np.minimum(lt - lb, np.log(2.0))), 2.0)
    w[rng.random(n) < 0.05] *= 1.01
    seps = (", ", ": ") if spaced else (",", ":")
    return [
        json.dumps(dict(zip(NAMES, map(float, row), strict=True)), separators=seps)
        for row in zip(lt, lb, w, strict=True)
    ]


def _seq_lines(n: int, seed: int = 1) -> list[str]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(1, 6))
        lb = (-rng.exponential(1.0, k)).tolist()
        lt = (np.asarray(lb) + rng.normal(0.0, 0.05, k)).tolist()
        w = float(min(np.exp(min(sum(lt) - sum(lb), np.log(2.0))), 2.0))
        out.append(json.dumps({"logp_target": lt, "logp_behavior": lb, "weight": w}))
    return out


GOOD = "\n".join(_tis_lines(3000)) + "\n"
ROW = '{"logp_target": -1, "logp_behavior": -1, "weight": 1}\n'
LATE = GOOD + "{0}\n" + "\n".join(_tis_lines(200, seed=5)) + "\n"
SMALL = [*TIS, "--chunk-rows", "300"]
CASES: dict[str, tuple[str, list[str]]] = {
    "many blocks": (GOOD, SMALL),
    "spaced": ("\n".join(_tis_lines(500, spaced=True)) + "\n", SMALL),
    "no newline at the end": (GOOD.rstrip("\n"), SMALL),
    "lists": ("\n".join(_seq_lines(800)) + "\n", [*SEQ, "--chunk-rows", "100"]),
    "forms of numbers": (
        '{"logp_target": -1, "logp_behavior": -1E0, "weight": 1}\n'
        '{"logp_target": -0.5e-3, "logp_behavior": -5e-4, "weight": 1.0000000000000002}\n'
        '{"logp_target": -1e-320, "logp_behavior": 0, "weight": 1}\n'
        '{"logp_target": 1e-400, "logp_behavior": -0.0, "weight": 1.0}\n'
        '{"logp_target": 123456789012345678901234567890, "logp_behavior": 0.0, "weight": 2}\n',
        TIS,
    ),
    "negative zero": ('{"logp_target": -0, "logp_behavior": 0, "weight": -0}\n', TIS),
    "negative zeros written as floats": (
        '{"logp_target": -0e0, "logp_behavior": -0.0, "weight": 1}\n'
        '{"logp_target": -0E+2, "logp_behavior": -0.000e-5, "weight": 1}\n',
        TIS,
    ),
    "infinity, mixed case": ('{"logp_target": -inF, "logp_behavior": -1, "weight": 1}\n', TIS),
    "negative zero in a list": (
        '{"logp_target": [-0, -1], "logp_behavior": [0, -1], "weight": 1}\n',
        SEQ,
    ),
    "string": ('{"logp_target": -1, "logp_behavior": -1, "weight": "1"}\n', TIS),
    "string in a list": (
        '{"logp_target": [-1, "-2"], "logp_behavior": [-1, -2], "weight": 1}\n',
        SEQ,
    ),
    "string first in a list": (
        '{"logp_target": ["-1"], "logp_behavior": [-1], "weight": 1}\n',
        SEQ,
    ),
    "boolean": ('{"logp_target": true, "logp_behavior": -1, "weight": 1}\n', TIS),
    "false in a list": (
        '{"logp_target": [false], "logp_behavior": [0], "weight": 1}\n',
        SEQ,
    ),
    "trailing comma": ('{"logp_target": -1, "logp_behavior": -1, "weight": 1,}\n', TIS),
    "trailing comma in a list": (
        '{"logp_target": [-1, -2,], "logp_behavior": [-1, -2], "weight": 1}\n',
        SEQ,
    ),
    "nan": ('{"logp_target": NaN, "logp_behavior": -1, "weight": 1}\n', TIS),
    "nan, lower case": ('{"logp_target": nan, "logp_behavior": -1, "weight": 1}\n', TIS),
    "inf": ('{"logp_target": -inf, "logp_behavior": -1, "weight": 1}\n', TIS),
    "infinity": ('{"logp_target": -Infinity, "logp_behavior": -1, "weight": 1}\n', TIS),
    "beyond float64": ('{"logp_target": -1e400, "logp_behavior": -1, "weight": 1}\n', TIS),
    "beyond float64, not read": (
        '{"logp_target": -1, "logp_behavior": -1, "weight": 1, "x": 1e400}\n',
        TIS,
    ),
    "nan, not read": ('{"logp_target": -1, "logp_behavior": -1, "weight": 1, "x": nan}\n', TIS),
    "many digits": (
        '{"logp_target": -1, "logp_behavior": -1, "weight": 1' + "0" * 400 + "}\n",
        TIS,
    ),
    "null": ('{"logp_target": -1, "logp_behavior": null, "weight": 1}\n', TIS),
    "null in a list": (
        '{"logp_target": [-1, null], "logp_behavior": [-1, -1], "weight": 1}\n',
        SEQ,
    ),
    "key missing": ('{"logp_target": -1, "logp_behavior": -1}\n', TIS),
    "key repeated": (ROW.replace("}", ', "weight": 7}') * 3, TIS),
    "key repeated, escaped": (ROW.replace("}", ', "weigh\\u0074": 7}') * 3, TIS),
    "key escaped": (ROW.replace('"weight"', '"weigh\\u0074"'), TIS),
    "key as a value": (ROW.replace("}", ', "x": "weight"}'), TIS),
    "another column": (ROW.replace("}", ', "step": 3}') * 3, TIS),
    "a key with a colon": (ROW.replace("}", ', "a:1": 3}'), TIS),
    "blank lines": (ROW + "\n\n" + ROW + "   \n" + ROW, TIS),
    "carriage returns": (ROW.replace("\n", "\r\n") * 3, TIS),
    "carriage returns alone": (ROW.replace("\n", "\r") * 3, TIS),
    "two objects on a line": (ROW.rstrip("\n") + ROW + ROW, TIS),
    "an object over two lines": (ROW.replace(', "weight"', ',\n"weight"') + ROW, TIS),
    "an array": ("[1, 2, 3]\n" + ROW, TIS),
    "not json": (ROW + '{"logp_target": -1, "logp_behavior": -1, "weight": 1\n', TIS),
    "not utf-8": (ROW.replace("}", ', "s": "\udcff"}'), TIS),
    "nul": (ROW.rstrip("\n") + "\x00\n", TIS),
    "vertical tab": (ROW.replace(" ", "\x0b", 1), TIS),
    "empty list": ('{"logp_target": [], "logp_behavior": [], "weight": 1}\n', SEQ),
    "a string late": (LATE.replace("{0}", ROW.replace("1}", '"1"}').rstrip()), SMALL),
    "a boolean late": (LATE.replace("{0}", ROW.replace("1}", "true}").rstrip()), SMALL),
    "a blank line late": (LATE.replace("{0}", ""), SMALL),
    "not json late": (LATE.replace("{0}", ROW.replace("}", "")), SMALL),
    "a repeated key late": (
        LATE.replace("{0}", ROW.replace("}", ', "weight": 1}').rstrip()),
        SMALL,
    ),
}

#: the exit code of each case (2, unusable, for the others)
EXIT_CODES = {
    "many blocks": 1,
    "spaced": 1,
    "no newline at the end": 1,
    "lists": 0,
    "forms of numbers": 0,
    "negative zero": 1,
    "negative zero in a list": 0,
    "negative zeros written as floats": 0,
    "beyond float64, not read": 0,
    "many digits": 1,
    "key escaped": 0,
    "key as a value": 0,
    "another column": 0,
    "a key with a colon": 0,
    "blank lines": 0,
    "carriage returns": 0,
    "carriage returns alone": 0,
    "a blank line late": 1,
}


def run(
    path: Path,
    argv: list[str],
    duckdb: int,
    polars: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
) -> tuple[int, str, str, dict[str, Any]]:
    monkeypatch.setattr(_trace_jsonl, "DUCKDB_MIN_BYTES", duckdb)
    monkeypatch.setattr(_trace_jsonl, "POLARS_MIN_BYTES", polars)
    report = path.with_suffix(".json")
    code = main(["check", str(path), *argv, "--no-progress", "--report", str(report)])
    out = capsys.readouterr()
    return code, out.out, out.err, json.loads(report.read_text())


NEVER = 1 << 62


def same_every_way(
    text: str,
    argv: list[str],
    tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
    then_polars: bool = True,
) -> int:
    path = tmp / "t.jsonl"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))  # "\udcff": the byte 0xff
    alone = run(path, argv, NEVER, NEVER, monkeypatch, capsys)
    assert run(path, argv, 0, NEVER, monkeypatch, capsys) == alone
    if then_polars:
        assert run(path, argv, 0, 0, monkeypatch, capsys) == alone
    return alone[0]


@pytest.mark.parametrize("case", sorted(CASES))
def test_duckdb_and_pyarrow_give_the_same_verdict_report_and_error(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    pytest.importorskip("duckdb")  # the `trace` extra; without it polars or pyarrow read
    text, argv = CASES[case]
    # duckdb then polars: where duckdb hands a block over after good ones (polars' own agreement
    # with pyarrow on every case is the engines test's)
    then_polars = "late" in case or "blocks" in case
    code = same_every_way(text, argv, tmp_path, monkeypatch, capsys, then_polars)
    assert code == EXIT_CODES.get(case, 2)


def _duckdb_columns(path: Path, names: list[str], lists: list[str]) -> list[Any]:
    with path.open("rb") as handle:
        blocks = _trace_jsonl._jsonl_blocks(handle, 1 << 16)
        return [c for _, _, c in _trace_jsonl_duckdb.duckdb_blocks(path, names, lists, blocks)]


def test_duckdb_reads_the_plain_blocks_itself(tmp_path: Path) -> None:
    """The agreement above is not vacuous: duckdb reads every block of the good traces, and the
    first odd block ends its stream."""
    pytest.importorskip("duckdb")
    path = tmp_path / "t.jsonl"
    path.write_text(GOOD)
    got = _duckdb_columns(path, NAMES, [])
    assert len(got) > 3
    assert all(c is not None for c in got)
    path.write_text(CASES["lists"][0])
    got = _duckdb_columns(path, ["weight"], ["logp_target", "logp_behavior"])
    assert all(c is not None for c in got)
    path.write_text(CASES["a string late"][0])
    got = _duckdb_columns(path, NAMES, [])
    first = next(i for i, c in enumerate(got) if c is None)
    assert first > 0
    assert all(c is None for c in got[first:])


def _number_forms(n: int, seed: int) -> list[str]:
    """Decimal numbers of many forms: up to 25 significant digits, exponents near both ends of
    float64, subnormals, integers beyond 2^53."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        digits = "".join(map(str, rng.integers(0, 10, int(rng.integers(1, 26)))))
        kind = int(rng.integers(0, 4))
        sign = "-" if rng.random() < 0.5 else ""
        if kind == 0:  # an integer (never -0, which pyarrow reads as -0.0 and duckdb as +0.0)
            out.append(f"{sign}{digits.lstrip('0')}" if digits.strip("0") else "0")
        elif kind == 1:
            out.append(f"{sign}0.{digits}")
        elif kind == 2:
            out.append(f"{sign}{digits[0]}.{digits[1:] or '0'}e{int(rng.integers(-330, 300))}")
        else:
            out.append(f"{sign}{digits[0]}.{digits[1:] or '0'}E+{int(rng.integers(0, 300))}")
    return out


def test_duckdb_parses_numbers_as_pyarrow_does_bit_for_bit(tmp_path: Path) -> None:
    pytest.importorskip("duckdb")
    forms = _number_forms(6000, seed=3)
    lines = [
        f'{{"logp_target": {a}, "logp_behavior": {b}, "weight": {c}}}'
        for a, b, c in zip(forms[0::3], forms[1::3], forms[2::3], strict=True)
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    data = path.read_bytes()
    got = _duckdb_columns(path, NAMES, [])
    assert all(c is not None for c in got)
    want = _trace_jsonl._jsonl_fast(data, 1, NAMES, [], False)
    assert want is not None
    for name in NAMES:
        ours = np.concatenate([c[name] for c in got])
        assert ours.view(np.int64).tolist() == want[0][name].view(np.int64).tolist()


def test_a_duckdb_route_without_the_certificate_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    pytest.importorskip("duckdb")

    def trusting(table: Any, data: bytes, numeric: Any, lists: Any) -> Any:
        return {c: float64(table.column(c).combine_chunks()) for c in numeric}

    monkeypatch.setattr(_trace_jsonl_duckdb, "columns_of", trusting)
    monkeypatch.setattr(_trace_jsonl_duckdb, "plain_bytes", lambda data: True)
    text, argv = CASES["string"]
    rejects(same_every_way, text, argv, tmp_path, monkeypatch, capsys)


def _views_are_blocks(views: Callable[[io.BufferedIOBase, int, int], Iterator[memoryview]]) -> Any:
    """``views`` cuts a trace into the blocks of ``_jsonl_blocks``, byte for byte (each view
    copied before the next is taken, as the reader uses them)."""

    @given(
        lines=st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=40),
        last=st.booleans(),
        size=st.integers(1, 80),
        slack=st.integers(0, 40),
    )
    def check(lines: list[bytes], last: bool, size: int, slack: int) -> None:
        data = b"\n".join(lines) + (b"\n" if last and lines else b"")
        want = list(_trace_jsonl._jsonl_blocks(io.BytesIO(data), size))
        assert [bytes(v) for v in views(io.BytesIO(data), size, slack)] == want

    return check


def _cut_before(handle: io.BufferedIOBase, size: int, slack: int) -> Iterator[memoryview]:
    """Wrong: blocks cut at the last newline within ``size`` bytes (not the first after)."""
    rest = b""
    while data := rest + handle.read(size):
        cut = data.rfind(b"\n") + 1 or len(data)
        yield memoryview(data[:cut])
        rest = data[cut:]


def _read_ahead(handle: io.BufferedIOBase, size: int, slack: int) -> Iterator[memoryview]:
    """Wrong: every view taken before the first is used (the buffer holds the last block)."""
    return iter(list(_trace_jsonl._jsonl_views(handle, size, slack)))


def test_a_large_trace_is_read_into_one_buffer_in_the_same_blocks() -> None:
    run_property(_views_are_blocks(_trace_jsonl._jsonl_views))
    rejects(_views_are_blocks(_cut_before))
    rejects(_views_are_blocks(_read_ahead))


def _counts_are_counts(counts: Callable[[bytes, Sequence[int]], list[int]]) -> Any:
    """``counts`` counts each byte value as ``bytes.count`` does, across pieces of 7 bytes."""

    @given(data=st.binary(max_size=60), values=st.lists(st.integers(0, 255), max_size=4))
    def check(data: bytes, values: list[int]) -> None:
        assert counts(data, values) == [data.count(bytes([v])) for v in values]

    return check


def _whole_pieces(data: bytes, values: Sequence[int]) -> list[int]:
    """Wrong: the bytes after the last whole piece are not counted."""
    return _trace_arrow.byte_counts(data[: len(data) // 7 * 7], values)


def test_bytes_are_counted_piece_by_piece(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_trace_arrow, "_COUNT_PIECE", 7)
    run_property(_counts_are_counts(_trace_arrow.byte_counts))
    rejects(_counts_are_counts(_whole_pieces))
