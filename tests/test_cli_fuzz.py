"""Fuzzing the command line: generated argument vectors and files thrown at every subcommand.

Every case runs ``refimpl.cli.main(argv)`` in this process, in a fresh directory, and must keep the
command line's contract (the CLI reference in the docs):

1. it returns (or exits with) 0, 1 or 2 — never another code, never an uncaught exception, which a
   user would see as a traceback; 130 belongs to Ctrl-C, which is not generated here (the CLI
   tests send it on purpose);
2. no warning of Python or of a library (numpy, scipy, pyarrow, tqdm) is raised, and nothing that
   looks like a traceback or a warning is printed;
3. it ends before the hang guard fires: ``HANG_GUARD_CPU_S`` of CPU time (every case is small by
   construction and takes well under a CPU second; CPU time, so load cannot make it fire), or
   ``HANG_GUARD_WALL_S`` of wall-clock time for a case that blocks; the guard only turns a hang
   into a failure, it never decides one;
4. it writes nothing but the outputs it was asked for, and changes no input;
5. whatever the exit code, an output left under a requested name is complete (it parses: a
   refused ``check`` still writes its report, which says why);
6. ``--json`` output is one valid JSON document.

Arguments are drawn from each subcommand's own argparse parser (so a new option is fuzzed without
editing this file): flags, choices, numbers from the edges (0, -0, negative, NaN, infinities,
``1e308``, subnormals, integers beyond 2^53 and 2^63, text that is not a number) and files of every
kind the command reads (random bytes, truncated and malformed CSV / JSONL / Parquet / TOML / .npy,
empty files, directories, ``/dev/null``, paths that run through a regular file). Options that set how
much work a run does (``--rollouts``, ``--slots``, ...) are drawn small when valid, so a case that is
accepted finishes at once; absurd values of them must be refused.

Two things are left to other tests: ``sweep --engine dask`` (it starts a cluster: tests/test_sweep_dask.py)
and the full lab (``lab`` always runs ``--quick --only effort`` here, the section that takes a second;
tests/test_lab.py runs the others).

Budgets: the ``ci`` profile runs each subcommand's fuzz with the example counts in ``BUDGET``,
derandomized (the same cases every run). ``HYPOTHESIS_PROFILE=thorough`` runs the counts in
``THOROUGH``, randomized, outside the gate::

    HYPOTHESIS_PROFILE=thorough .venv/bin/python -m pytest tests/test_cli_fuzz.py
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import signal
import stat
import sys
import tempfile
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _wrong_variants import rejects
from hypothesis import HealthCheck, Phase, event, example, given, note, settings
from hypothesis import strategies as st

from refimpl.cli import COMMANDS, _parser, main
from refimpl.lab import cli as lab_cli

HANG_GUARD_CPU_S = 60  # CPU seconds: every case takes well under one
HANG_GUARD_WALL_S = 1800  # wall-clock seconds: for a case that blocks instead of spinning
EXIT_CODES = frozenset({0, 1, 2})
_THOROUGH = os.environ.get("HYPOTHESIS_PROFILE") == "thorough"
THOROUGH = {"simulate": 2_000, "check": 2_000, "sweep": 1_000, "lab": 100, "conformance": 200}
BUDGET = {"simulate": 60, "check": 80, "sweep": 30, "lab": 8, "conformance": 10}

# --- files -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InFile:
    """An input file the case creates before the run (``content`` bytes, or a special path)."""

    name: str
    content: bytes | None = None
    special: str | None = None  # "missing", "dir", "devnull", "through-file"


@dataclass(frozen=True)
class OutPath:
    """An output path named on the command line; ``kind`` says where it points."""

    name: str
    kind: str = "fresh"  # "fresh", "existing", "dir", "missing-dir", "through-file", "devnull",
    # "loop" (a symlink to itself), "occupied" (a directory whose index.html is a directory),
    # "docs-link" (a symlink to the built docs, DOCS_BUILD, that the lab's links may open)


Token = str | InFile | OutPath

_NUMBER_TEXT = st.sampled_from(
    ["0", "-0", "-1", "1", "2", "nan", "NaN", "inf", "-inf", "1e308", "-1e308", "1e400", "5e-324",
     "9007199254740993", "18446744073709551617", str(10**40), "0.5", "1e-12", "abc", "", " ", "1,2",
     "0x10", "1_000", "True", "null", "\u0661"]
)  # fmt: skip
_FLOATS = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [0.0, -0.0, 1e308, -1e308, 5e-324, 2.0**53 + 2, 1e-300]
)
_INTS = st.integers(-3, 30) | st.sampled_from([2**31, 2**53 + 1, 2**63, -(2**63) - 1, 10**30])


def _cell(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)


@st.composite
def _table(draw: st.DrawFn, columns: list[str], complete: bool = False) -> dict[str, list[Any]]:
    """Columns drawn from ``columns`` (all of them when ``complete``, with numbers only)."""
    n = draw(st.integers(0 if not complete else 1, 12))
    scalar = _INTS | _FLOATS | st.sampled_from(["x", "", "1.0", True, None])
    out: dict[str, list[Any]] = {}
    names = (
        columns
        if complete
        else draw(st.lists(st.sampled_from(columns), max_size=len(columns), unique=True))
    )
    element: st.SearchStrategy[Any]
    for name in names:
        if name == "versions":
            element = st.integers(0, 6) if complete else _INTS
            out[name] = [draw(st.lists(element, min_size=complete, max_size=4)) for _ in range(n)]
        else:
            kinds = ["int", "float", "prob"] if complete else ["int", "float", "mixed", "prob"]
            kind = draw(st.sampled_from(kinds))
            element = {
                "int": st.integers(-2, 6),
                "float": st.floats(-30, 30),
                "mixed": scalar,
                "prob": st.floats(0, 1),
            }[kind]
            out[name] = [draw(element) for _ in range(n)]
    return out


_TRACE_COLUMNS = ["staleness", "weight", "logp_target", "logp_behavior", "b", "penalty", "cdf",
                  "pi", "trained_step", "min_version", "versions", "version", "extra"]  # fmt: skip


def _csv(table: dict[str, list[Any]]) -> bytes:
    names = list(table)
    rows = [",".join(names)]
    for i in range(len(next(iter(table.values()), []))):
        rows.append(",".join(_cell(table[c][i]).replace(",", ";") for c in names))
    return ("\n".join(rows) + "\n").encode()


def _jsonl(table: dict[str, list[Any]]) -> bytes:
    names = list(table)
    lines = []
    for i in range(len(next(iter(table.values()), []))):
        row = {c: table[c][i] for c in names}
        lines.append(json.dumps(row, allow_nan=True))
    return ("\n".join(lines) + "\n").encode()


def _parquet(table: dict[str, list[Any]]) -> bytes:
    sink = io.BytesIO()
    try:
        arrow = pa.table(table) if table else pa.table({"x": pa.array([], pa.int64())})
    except (pa.ArrowException, OverflowError, ValueError, TypeError):
        arrow = pa.table({c: pa.array([_cell(v) for v in vs]) for c, vs in table.items()})
    pq.write_table(arrow, sink)
    return sink.getvalue()


def _npy(draw: st.DrawFn) -> bytes:
    shape = draw(st.sampled_from([(2, 3), (3, 2), (1, 1), (0, 3), (3, 0), (4,), (2, 2, 2), ()]))
    dtype = draw(st.sampled_from(["float64", "float32", "int64", "bool", "complex128", "object",
                                  "U3"]))  # fmt: skip
    size = int(np.prod(shape, dtype=np.int64))
    values = draw(st.lists(_FLOATS | st.floats(0.5, 500), min_size=size, max_size=size))
    sink = io.BytesIO()
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dtype == "U3":
            array = np.array([str(v)[:3] for v in values], dtype="U3").reshape(shape)
        elif dtype == "object":
            array = np.array(values, dtype=object).reshape(shape)
        else:
            array = np.nan_to_num(np.array(values)).astype(dtype).reshape(shape) if dtype in (
                "int64", "bool") else np.array(values).astype(dtype).reshape(shape)  # fmt: skip
        np.save(sink, array, allow_pickle=True)
    return sink.getvalue()


def _toml_value(draw: st.DrawFn, key: str) -> str:
    small = {
        "draws": st.integers(1, 300),
        "slots": st.integers(1, 8),
        "batch": st.integers(1, 8),
        "rollouts": st.integers(1, 64),
        "steps": st.integers(1, 4),
        "replicates": st.integers(1, 3),
        "seed": st.integers(0, 5),
    }
    atom = st.one_of(
        small.get(key, st.integers(-2, 6)).map(str),
        _INTS.map(str),
        st.sampled_from(["nan", "inf", "-inf", "1e308", "0.5", "-0.0"]),
        st.sampled_from(['"async"', '"first_k"', '"lognorm"', '"x"', '""', "true", "[]", "{}"]),
    )
    if draw(st.booleans()):
        return "[" + ", ".join(draw(st.lists(atom, min_size=0, max_size=3))) + "]"
    return draw(atom)


_WELL_FORMED_GRIDS = [
    # kind, fixed, axes: every value valid, so the cells run (and their results are written)
    ('"busy"', "", "draws = [{a}, {b}]"),
    ('"refimpl.sweep.kinds:busy"', "", "draws = [{a}, 0]"),  # a failing cell: exit 1
    ('"simulate"', "rollouts = {a}", "slots = [2, {c}]\nbatch = [{c}]"),
    ('"simulate"', 'mode = "first_k"\nsteps = 3\nlaunch = {c}', "slots = [{c}]\nbatch = [1, 2]"),
    ('"closed_form"', 'function = "length_bias"\nlaw = "expon"\nk = 1', "n = [{c}, {d}]"),
]


@st.composite
def _well_formed_grid(draw: st.DrawFn) -> bytes:
    kind, fixed, axes = draw(st.sampled_from(_WELL_FORMED_GRIDS))
    values = {
        "a": draw(st.integers(1, 200)),
        "b": draw(st.integers(1, 200)),
        "c": draw(st.integers(2, 6)),
        "d": draw(st.integers(7, 12)),
    }
    replicates = draw(st.integers(1, 2))
    text = f"[sweep]\nkind = {kind}\nreplicates = {replicates}\n"
    text += f"[fixed]\n{fixed.format(**values)}\n" if fixed else ""
    return (text + f"[axes]\n{axes.format(**values)}\n").encode()


@st.composite
def _grid(draw: st.DrawFn) -> bytes:
    if draw(st.booleans()):
        return draw(_well_formed_grid())
    kind = draw(st.sampled_from(['"busy"', '"simulate"', '"closed_form"', '"nosuch"',
                                 '"refimpl.sweep.kinds:busy"', '"math:nosuch"', '"nosuch_mod:f"',
                                 '"busy:x:y"', "3"]))  # fmt: skip
    keys = ["draws", "slots", "batch", "rollouts", "steps", "mode", "eta", "mu", "sigma", "name",
            "n", "k", "law", "typo"]  # fmt: skip
    lines = ["[sweep]", f"kind = {kind}"]
    for key in draw(st.lists(st.sampled_from(["replicates", "seed", "metrics", "extra"]),
                             unique=True)):  # fmt: skip
        lines.append(f"{key} = {_toml_value(draw, key)}")
    for table in draw(st.lists(st.sampled_from(["fixed", "axes"]), unique=True)):
        lines.append(f"[{table}]")
        for key in draw(st.lists(st.sampled_from(keys), max_size=4, unique=True)):
            if table == "axes" and draw(st.booleans()):
                lines.append(f"{key} = {{ start = 1, stop = {draw(_NUMBER_TEXT) or 2}, num = 2 }}")
            else:
                lines.append(f"{key} = {_toml_value(draw, key)}")
    return ("\n".join(lines) + "\n").encode()


def _mangle(draw: st.DrawFn, data: bytes) -> bytes:
    how = draw(st.sampled_from(["as is", "as is", "as is", "truncate", "flip", "nul", "bom"]))
    if how == "truncate" and data:
        return data[: draw(st.integers(0, len(data) - 1))]
    if how == "flip" and data:
        i = draw(st.integers(0, len(data) - 1))
        return data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1 :]
    if how == "nul":
        return data + b"\x00\xff\xfe"
    if how == "bom":
        return b"\xef\xbb\xbf" + data
    return data


@st.composite
def _input_file(draw: st.DrawFn, fmt: str) -> InFile:
    """A file the command reads: mostly well-formed for ``fmt``, often broken, sometimes not a file."""
    special = draw(st.sampled_from([None] * 6 + ["missing", "dir", "devnull", "through-file"]))
    suffix = draw(st.sampled_from([fmt, fmt, fmt, "txt", ""]))
    name = f"input{'.' + suffix if suffix else ''}"
    if special is not None:
        return InFile(name, special=special)
    source = draw(st.sampled_from(["valid", "valid", "valid", "bytes", "text"]))
    if source == "bytes":
        return InFile(name, draw(st.binary(max_size=300)))
    if source == "text":
        return InFile(name, draw(st.text(max_size=200)).encode("utf-8", "surrogatepass"))
    if fmt == "npy":
        data = _npy(draw)
    elif fmt == "toml":
        data = draw(_grid())
    else:
        table = draw(_table(_TRACE_COLUMNS))
        data = {"csv": _csv, "jsonl": _jsonl, "parquet": _parquet}[fmt](table)
    return InFile(name, _mangle(draw, data))


# --- argument vectors from the parsers ---------------------------------------------------------


def _actions(command: str) -> list[argparse.Action]:
    parser = _parser(command)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [a for a in sub.choices[command]._actions if not isinstance(a, argparse._HelpAction)]


# Options whose valid values set how much work a run does: drawn small, so accepted cases are quick.
_WORK = {
    "--slots": st.integers(1, 12),
    "--batch": st.integers(1, 12),
    "--rollouts": st.integers(1, 300),
    "--steps": st.integers(1, 12),
    "--launch": st.integers(1, 24),
    "--tool-turns": st.integers(0, 2),
    "--workers": st.integers(1, 2),
    "--chunk-rows": st.integers(1, 50),
    "--max-show": st.integers(0, 5),
}
_INPUTS = {  # option (or positional dest) -> the format of the file it reads
    ("simulate", "--lengths-npy"): "npy",
    ("check", "trace"): "csv|jsonl|parquet",
    ("sweep", "grid"): "toml",
}
_OUTPUTS = {("simulate", "--trace"), ("check", "--report"), ("sweep", "--out"), ("lab", "--out")}
_OUT_SUFFIX = {"simulate": ".parquet", "check": ".json", "sweep": ".parquet", "lab": ""}
_TEXT_VALUES = {
    "--param": st.sampled_from(["eta=1", "eta=0", "cap=2", "low=0.5", "high=2", "k0=1", "b_min=0",
                                "tau=1", "n=4", "k=2", "eta=-1", "eta=x", "eta", "=1", "cap=nan",
                                "n=99999999999999999999", "eta=1=2", "zzz=1", "k=1.5"]),
    "--lengths-pmf": st.sampled_from(["0.5,0.5", "1", "0.2,0.3,0.5", "0,0", "-0.1,1.1", "nan,1",
                                      "a,b", "", ",", "1e308,1", "0.5,,0.5", "inf"]),
    "--agent-lengths": st.sampled_from(["lognorm:s=1,scale=20", "expon:scale=10", "lognorm:s=-1",
                                        "norm:loc=nan", "nosuchdist:x=1", "lognorm:s=1,scale=",
                                        "", ":", "lognorm", "uniform:loc=0,scale=0"]),
    "--scheduler": st.sampled_from(["tcp://127.0.0.1:1", "", "nonsense"]),
}  # fmt: skip


#: The built documentation a lab case may link to (a directory with an index.html); a
#: ``--docs-url`` that reaches it, or ``--out`` itself, makes the report overwrite an input.
DOCS_BUILD = "docs-build"

_LAB_VALUES = {  # the lab's own refusals: a seed out of range, a docs URL that is no address
    ("lab", "--seed"): st.sampled_from(["0", "7", "-1", "-0", "+3", " 5 ", "1.0", "1e3", "0x10",
                                        "", "abc", "\u0663", "9" * 1000, "9" * 1001, "-" + "9" * 5000,
                                        str(2**64), str(-(2**63))]),
    ("lab", "--docs-url"): st.sampled_from(["", " ", "https://example.org/refimpl/", "file:///nope/",
                                            "javascript:alert(1)", "data:text/html,x", "ftp://a/b",
                                            "../docs/_build/html", ".", "./", f"../{DOCS_BUILD}",
                                            f"../{DOCS_BUILD}/", "c:/docs", "x" * 5000,
                                            "https://" + "a" * 5000]),
}  # fmt: skip


def _is_flag(action: argparse.Action) -> bool:
    return action.nargs == 0


def _value(draw: st.DrawFn, command: str, action: argparse.Action, option: str) -> Token:
    key = (command, option if action.option_strings else action.dest)
    if key in _INPUTS:
        fmt = draw(st.sampled_from(_INPUTS[key].split("|")))
        return draw(_input_file(fmt))
    if key in _OUTPUTS:
        kind = draw(st.sampled_from(["fresh"] * 5 + ["existing", "dir", "missing-dir",
                                                     "through-file", "devnull", "loop"]
                                    + (["occupied", "docs-link"] if command == "lab" else [])))  # fmt: skip
        suffix = draw(st.sampled_from([_OUT_SUFFIX[command]] * 3 + [".csv", ".txt", ""]))
        return OutPath(f"out{suffix}", kind)
    if key in _LAB_VALUES:
        return draw(_LAB_VALUES[key])
    if option in _TEXT_VALUES:
        return draw(_TEXT_VALUES[option])
    if action.choices is not None:
        choices = [str(c) for c in action.choices]
        if command == "sweep" and option == "--engine":
            choices = ["serial", "serial", "serial", "local"]  # dask: see the module docstring
        return draw(st.sampled_from(choices) | st.sampled_from(["", "ASYNC", "nope"]))
    valid: st.SearchStrategy[Any]
    if option in _WORK:
        valid = _WORK[option]
    elif action.type is int:
        valid = st.integers(0, 5)
    elif action.type is float:
        valid = st.floats(0, 5) | st.sampled_from([0.0, 1.0, 0.5])
    else:
        valid = st.sampled_from(["1", "x", "0.5"])
    edge = _NUMBER_TEXT | _INTS.map(str) | _FLOATS.map(repr)
    text = draw(st.one_of(valid.map(str), valid.map(str), edge))
    if text.startswith("-") and draw(st.booleans()):
        return f"{option}={text}"  # the form argparse needs for a leading minus (marked below)
    return text


_CHECK_SPECS = {  # spec: (its parameters, its trace columns)
    "staleness_mask": (["eta=1", "eta=0"], ["staleness", "weight"]),
    "tis": (["cap=2", "cap=1"], ["logp_target", "logp_behavior", "weight"]),
    "masked_is": (["low=0.5 high=2", "low=0 high=1"], ["logp_target", "logp_behavior", "weight"]),
    "effort_penalty": (["k0=1 b_min=0 tau=1"], ["b", "penalty"]),
    "inclusion_probability": (["n=4 k=2", "n=1 k=1"], ["cdf", "pi"]),
    "staleness": ([""], ["trained_step", "min_version", "staleness"]),
}


@st.composite
def _check_case(draw: st.DrawFn) -> list[Token]:
    """``check`` with a spec, its parameters and a trace of its columns (values anything)."""
    spec = draw(st.sampled_from(sorted(_CHECK_SPECS)))
    params, columns = _CHECK_SPECS[spec]
    argv: list[Token] = ["--spec", spec]
    for param in draw(st.sampled_from(params)).split():
        argv += ["--param", param]
    if spec == "staleness" and draw(st.booleans()):
        columns = ["trained_step", "versions", "staleness"]
    table = draw(_table(columns, complete=True))
    fmt = draw(st.sampled_from(["csv", "jsonl", "parquet"]))
    data = {"csv": _csv, "jsonl": _jsonl, "parquet": _parquet}[fmt](table)
    argv.append(InFile(f"trace.{fmt}", _mangle(draw, data) if draw(st.booleans()) else data))
    if draw(st.booleans()):
        argv += ["--report", OutPath("report.json")]
    return argv


@dataclass
class Case:
    command: str
    argv: list[Token] = field(default_factory=list)


@st.composite
def cases(draw: st.DrawFn, command: str) -> Case:
    actions = _actions(command)
    optional = [a for a in actions if a.option_strings]
    positional = [a for a in actions if not a.option_strings]
    argv: list[Token] = []
    if command == "lab":
        argv += ["--quick", "--only", "effort"]
    if command == "check" and draw(st.booleans()):
        return Case(command, [command, *draw(_check_case())])  # well-formed: the deep paths
    if command == "sweep" and draw(st.booleans()):
        grid = InFile("grid.toml", draw(_well_formed_grid()))
        out = OutPath("results.parquet", draw(st.sampled_from(["fresh"] * 4 + ["existing"])))
        return Case(command, [command, grid, "--out", out, "--engine", "serial", "--quiet"])
    required = [a for a in optional if a.required]
    chosen = required + draw(st.lists(st.sampled_from(optional), max_size=6)) if optional else []
    if required and draw(st.integers(0, 9)) == 0:
        chosen = chosen[len(required) :]  # sometimes leave out a required option
    for action in chosen:
        option = draw(st.sampled_from(action.option_strings))
        if command == "lab" and option == "--only":
            argv += [option, draw(st.sampled_from(["effort", "nope", "", "EFFORT"]))]
            continue
        if _is_flag(action):
            argv.append(option)
            continue
        value = _value(draw, command, action, option)
        if isinstance(value, str) and value.startswith(f"{option}="):
            argv.append(value)
        else:
            argv += [option, value]
    for action in positional:
        count = draw(st.sampled_from([1, 1, 1, 1, 0, 2]))
        argv += [_value(draw, command, action, action.dest) for _ in range(count)]
    if any(isinstance(t, OutPath) and t.kind == "docs-link" for t in argv):
        # --out reaches the built docs: the links must open them too, else it is a plain --out
        argv += ["--docs-url", draw(st.sampled_from([".", f"../{DOCS_BUILD}"]))]
    return Case(command, [command, *argv])


# --- running a case ----------------------------------------------------------------------------


class _Hang(BaseException):
    pass


@contextlib.contextmanager
def _hang_guard(cpu_seconds: int, wall_seconds: int) -> Iterator[None]:
    """Turn a hang into a failure: a case that spins for ``cpu_seconds`` of this process's CPU
    time (``ITIMER_PROF``, so a loaded or niced machine does not make it fire sooner), or that
    blocks for ``wall_seconds`` (a last resort for a wait on a file or a pipe)."""

    def fire(signum: int, frame: FrameType | None) -> None:
        what = "CPU" if signum == signal.SIGPROF else "wall-clock"
        limit = cpu_seconds if signum == signal.SIGPROF else wall_seconds
        raise _Hang(f"the case did not end within {limit} s of {what} time")

    previous = {sig: signal.signal(sig, fire) for sig in (signal.SIGPROF, signal.SIGALRM)}
    signal.setitimer(signal.ITIMER_PROF, cpu_seconds)
    signal.setitimer(signal.ITIMER_REAL, wall_seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _materialize(case: Case, root: Path) -> tuple[list[str], list[Path]]:
    """Create the case's files under ``root``; return argv and the output paths."""
    (root / "a-file").write_text("not a directory\n")
    (root / DOCS_BUILD).mkdir()
    (root / DOCS_BUILD / "index.html").write_text("<p>the built docs</p>\n")
    argv: list[str] = []
    outputs: list[Path] = []
    for i, token in enumerate(case.argv):
        if isinstance(token, str):
            argv.append(token)
        elif isinstance(token, InFile):
            path = root / f"{i}-{token.name}"
            if token.special == "missing":
                pass
            elif token.special == "dir":
                path.mkdir()
            elif token.special == "devnull":
                path = Path(os.devnull)
            elif token.special == "through-file":
                path = root / "a-file" / token.name
            else:
                assert token.content is not None
                path.write_bytes(token.content)
            argv.append(str(path))
        else:
            path = root / f"{i}-{token.name}"
            if token.kind == "existing":
                path.write_bytes(b"an earlier file\n")
            elif token.kind == "dir":
                path.mkdir()
            elif token.kind == "missing-dir":
                path = root / "no-such-dir" / token.name
            elif token.kind == "through-file":
                path = root / "a-file" / token.name
            elif token.kind == "devnull":
                path = Path(os.devnull)
            elif token.kind == "loop":
                path.symlink_to(path.name)
            elif token.kind == "occupied":
                (path / "index.html").mkdir(parents=True)
            elif token.kind == "docs-link":
                path.symlink_to(DOCS_BUILD, target_is_directory=True)
            outputs.append(path)
            argv.append(str(path))
    named = set(argv)
    for command, option in _OUTPUTS:  # an output option left out writes to its default path
        if command == case.command and option not in named:
            default = next(a.default for a in _actions(command) if option in a.option_strings)
            if default is not None:
                outputs.append(root / str(default))
    return argv, outputs


def _snapshot(root: Path) -> dict[Path, bytes | None]:
    files: dict[Path, bytes | None] = {}
    for path in root.rglob("*"):
        files[path] = path.read_bytes() if path.is_file() else None
    return files


def _allowed(path: Path, outputs: list[Path]) -> bool:
    for out in outputs:
        if path == out or out in path.parents:
            return True
        if path.parent == out.parent and path.name.startswith(out.name + "."):
            return True  # OUT.journal.jsonl beside a sweep's results, a temporary OUT.tmp
    return False


def _complete(path: Path) -> str | None:
    """Why an output left after a run is not a complete file, or None when it is."""
    try:
        if path.is_dir():
            return None if (path / "index.html").is_file() or not any(path.iterdir()) else (
                f"{path} holds files but no index.html")  # fmt: skip
        if path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix == ".parquet":
            pq.read_table(path)
    except (OSError, ValueError, pa.ArrowException) as exc:
        return f"{path} is not a complete {path.suffix} file: {exc}"
    return None


def run_case(case: Case) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp).resolve()
        argv, outputs = _materialize(case, root)
        note(f"argv: {argv}")
        before = _snapshot(root)
        existed = {p: p.exists() for p in outputs}
        stdout, stderr = io.StringIO(), io.StringIO()
        code: Any = None
        crash: str | None = None
        with (
            warnings.catch_warnings(record=True) as caught,
            contextlib.chdir(root),
            contextlib.redirect_stdout(stdout),
            contextlib.redirect_stderr(stderr),
            np.errstate(all="warn"),
        ):
            warnings.simplefilter("always")
            saved_stdin = sys.stdin
            sys.stdin = io.TextIOWrapper(io.BytesIO(b""))
            try:
                with _hang_guard(HANG_GUARD_CPU_S, HANG_GUARD_WALL_S):
                    code = main(argv)
            except SystemExit as exc:
                code = 0 if exc.code is None else exc.code
            except BaseException:  # what the user would see as a traceback
                crash = traceback.format_exc()
            finally:
                sys.stdin = saved_stdin
        out, err = stdout.getvalue(), stderr.getvalue()
        note(f"exit code: {code!r}\nstderr: {err[-2000:]}")
        event(f"exit {code!r}")  # --hypothesis-show-statistics: how the cases end
        assert crash is None, f"{argv} raised (a traceback for the user):\n{crash}"
        assert code in EXIT_CODES, f"{argv} exited {code!r}; documented: 0, 1, 2\n{err}"
        assert not caught, f"{argv} raised warnings: {[str(w.message) for w in caught]}"
        assert "Traceback (most recent call last)" not in err + out, err
        assert "Warning:" not in err, err
        after = _snapshot(root)
        for path, content in before.items():
            if path not in outputs and not _allowed(path, outputs):
                assert after.get(path, b"<gone>") == content, f"{argv} changed or removed {path}"
        stray = [p for p in after if p not in before and not _allowed(p, outputs)]
        assert not stray, f"{argv} wrote outside its outputs: {stray}"
        # an output at /dev/null is written through, never replaced by a file (as root, a rename
        # would take /dev/null from every process on the machine)
        assert stat.S_ISCHR(os.stat(os.devnull).st_mode), f"{argv} replaced {os.devnull}"
        for path in outputs:
            if path == Path(os.devnull):
                continue
            if path.exists() and not existed[path]:
                problem = _complete(path)
                assert problem is None, f"{argv} exited {code}: {problem}"
        if code == 0 and "--json" in argv:
            document = out.strip().splitlines()[-1] if out.strip() else ""
            json.loads(document, parse_constant=lambda c: math.nan)


# --- the fuzz tests ----------------------------------------------------------------------------


def _settings(command: str) -> settings:
    return settings(
        max_examples=(THOROUGH if _THOROUGH else BUDGET)[command],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        # no explain phase: it traces every line run, which makes a case many times slower
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
    )


def test_every_subcommand_is_fuzzed() -> None:
    assert set(BUDGET) == set(THOROUGH) == set(COMMANDS)
    fuzzed = {
        name.removeprefix("test_fuzz_") for name in globals() if name.startswith("test_fuzz_")
    }
    assert fuzzed == set(COMMANDS)


@_settings("simulate")
@given(case=cases("simulate"))
def test_fuzz_simulate(case: Case) -> None:
    run_case(case)


@_settings("check")
@given(case=cases("check"))
def test_fuzz_check(case: Case) -> None:
    run_case(case)


@_settings("sweep")
@given(case=cases("sweep"))
def test_fuzz_sweep(case: Case) -> None:
    run_case(case)


_LAB = ["lab", "--quick", "--only", "effort"]

#: One case of each of the lab's refusals, tried first in every run whatever the budget draws.
LAB_REFUSALS = [
    Case("lab", [*_LAB, "--out", OutPath("out", "docs-link"), "--docs-url", f"../{DOCS_BUILD}"]),
    Case("lab", [*_LAB, "--out", OutPath("out", "docs-link"), "--docs-url", "."]),
    Case("lab", [*_LAB, "--out", OutPath("out", "dir"), "--docs-url", "."]),
    Case("lab", [*_LAB, "--out", OutPath("out", "existing")]),
    Case("lab", [*_LAB, "--out", OutPath("out", "through-file")]),
    Case("lab", [*_LAB, "--out", OutPath("out", "loop")]),
    Case("lab", [*_LAB, "--out", OutPath("out", "occupied")]),
    Case("lab", [*_LAB, "--out", OutPath("out"), "--seed", "-1"]),
    Case("lab", [*_LAB, "--out", OutPath("out"), "--seed", "9" * 5000]),
    Case("lab", [*_LAB, "--out", OutPath("out"), "--docs-url", ""]),
    Case("lab", [*_LAB, "--out", OutPath("out"), "--docs-url", "javascript:alert(1)"]),
]


def _with_examples(test: Any, examples: list[Case]) -> Any:
    for case in reversed(examples):
        test = example(case=case)(test)
    return test


@_settings("lab")
@partial(_with_examples, examples=LAB_REFUSALS)
@given(case=cases("lab"))
def test_fuzz_lab(case: Case) -> None:
    run_case(case)


def check_a_lab_refusal_is_a_usage_error_that_writes_nothing(
    case: Case, capsys: pytest.CaptureFixture[str]
) -> None:
    with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp):
        argv, _ = _materialize(case, Path(tmp).resolve())
        code: Any
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's usage error
            code = exc.code
        assert code == 2, argv
        err = capsys.readouterr().err
        assert "Traceback" not in err, err
        assert len(err) < 2000, err
        assert (Path(tmp) / DOCS_BUILD).is_dir(), "the built docs were replaced"
        assert sorted(p.name for p in Path(tmp, DOCS_BUILD).iterdir()) == ["index.html"]


@pytest.mark.parametrize("case", LAB_REFUSALS, ids=range(len(LAB_REFUSALS)))
def test_each_lab_refusal_is_a_usage_error_that_writes_nothing(
    case: Case, capsys: pytest.CaptureFixture[str]
) -> None:
    check_a_lab_refusal_is_a_usage_error_that_writes_nothing(case, capsys)


def _sections_must_not_run(*args: Any) -> Any:
    raise AssertionError("the lab ran its sections (it would then write its report)")


def test_the_refusal_check_rejects_a_lab_that_writes_over_the_docs_it_links_to(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(lab_cli, "_naming_input", lambda out, docs_url: None)
    monkeypatch.setattr(lab_cli, "_run_section", _sections_must_not_run)
    for case in LAB_REFUSALS[:3]:  # --out reaches the built docs that --docs-url links to
        rejects(check_a_lab_refusal_is_a_usage_error_that_writes_nothing, case, capsys)


@_settings("conformance")
@given(case=cases("conformance"))
def test_fuzz_conformance(case: Case) -> None:
    # Where the frameworks are not installed (the default environment), every run ends at the
    # check for torch or for an installed framework: the fuzzing covers the option parsing.
    run_case(case)


def test_the_hang_guard_fires_on_a_case_that_spins_or_blocks() -> None:
    import time

    def spin() -> None:
        while True:
            pass

    # a spinning hang is caught after one CPU second, however loaded the machine
    with pytest.raises(_Hang, match="1 s of CPU time"), _hang_guard(1, 600):
        spin()
    with pytest.raises(_Hang, match="1 s of wall-clock time"), _hang_guard(600, 1):
        time.sleep(600)  # a blocking hang: no CPU spent, caught by the wall-clock bound


def check_an_absurd_lab_seed_is_a_short_usage_error(
    seed: str, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 2, the cause in words, and an excerpt of the value (not thousands of digits)."""
    code: Any
    try:
        code = main(["lab", "--out", "never-written", "--seed", seed])
    except SystemExit as exc:  # argparse's usage error
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, (code, err[-300:])
    last = err.strip().splitlines()[-1]
    assert words in last, last
    assert len(last) < 300, f"the message quotes {len(last)} characters"


@pytest.mark.parametrize(
    ("seed", "words"),
    [
        ("9" * 5000, "at most 1000 digits"),  # past int()'s 4300 digits: not "not an integer"
        ("x" * 5000, "must be an integer"),
        ("-" + "1" * 2000, "at most 1000 digits"),
    ],
)
def test_an_absurd_lab_seed_is_a_short_usage_error(
    seed: str,
    words: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    check_an_absurd_lab_seed_is_a_short_usage_error(seed, words, capsys)
    assert not (tmp_path / "never-written").exists()


def test_the_seed_check_rejects_a_seed_without_the_length_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the wrong variant: every seed goes to int(), whose refusal past 4300 digits reads as
    # "not an integer" and quotes all 5000 of them
    monkeypatch.setattr(lab_cli, "_SEED_DIGITS", 10**9)
    monkeypatch.chdir(tmp_path)
    rejects(check_an_absurd_lab_seed_is_a_short_usage_error, "9" * 5000, "at most", capsys)


def check_a_docs_url_that_is_no_address_is_refused(
    url: str, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 2 before any section runs (``--only effort --quick`` runs one, should it not be)."""
    argv = ["lab", "--out", "report", "--quick", "--only", "effort", "--docs-url", url]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, (code, err[-300:])
    assert words in err.strip().splitlines()[-1], err
    assert not Path("report").exists(), "the lab wrote a report with broken links"


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("", "must be an address or a path"),  # would link to /concepts/... at the file root
        ("   ", "must be an address or a path"),
        ("javascript:alert(1)", "the scheme 'javascript'"),
        ("data:text/html,x", "the scheme 'data'"),
    ],
)
def test_a_docs_url_that_is_no_address_is_refused(
    url: str,
    words: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    check_a_docs_url_that_is_no_address_is_refused(url, words, capsys)


def test_the_docs_url_check_rejects_a_lab_that_takes_any_docs_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the wrong variant: --docs-url "" taken as a relative path (every link from the root)
    monkeypatch.setattr(lab_cli, "_bad_docs_url", lambda url: None)
    monkeypatch.chdir(tmp_path)
    rejects(check_a_docs_url_that_is_no_address_is_refused, "", "an address", capsys)


def test_a_long_docs_address_is_not_looked_up_as_a_path(tmp_path: Path) -> None:
    # Found by the fuzz: a 5000-character https --docs-url was taken as a path when the report
    # was written, after every section ran (file name too long: exit 2 and a partial report).
    assert lab_cli._docs_built(tmp_path / "out", "https://" + "a" * 5000) is False
    assert lab_cli._docs_built(tmp_path / "out", "x" * 5000) is False  # too long: not built
    (tmp_path / DOCS_BUILD).mkdir()
    (tmp_path / DOCS_BUILD / "index.html").write_text("docs")
    (tmp_path / "out").mkdir()
    assert lab_cli._docs_built(tmp_path / "out", f"../{DOCS_BUILD}") is True
