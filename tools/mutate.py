"""Sampled mutation testing: how many plausible bugs in a module does the test suite catch?

A *mutant* is the module with one small change of the kind that real bugs are made of:

- an arithmetic operator swapped (``+``/``-``, ``*``/``/``, ``//``/``/``, ``**``/``*``);
- a comparison flipped or loosened (``<``/``<=``, ``>``/``>=``, ``==``/``!=``, ``<``/``>``);
- ``and``/``or`` swapped, a ``not`` removed, an ``if`` condition negated;
- an integer constant off by one (``n`` -> ``n + 1`` and ``n - 1``);
- ``min``/``max`` swapped, ``floor``/``ceil`` swapped;
- a ``raise`` removed (the refusal silently skipped);
- a ``return`` of a value replaced by ``return None`` is *not* used: mypy would catch most of them.

The tool lists every such site of a module, draws a seeded sample, applies each mutant to a copy
of the repository, runs the module's tests there (stopping at the first failure), and reports the
*score*: killed / (killed + survived). A mutant whose tests exceed the timeout counts as killed (an
infinite loop is caught) but is listed apart. Survivors are printed as a diff line, to be read:
either a test is missing, or the mutant is equivalent (it cannot change any result), which is
said with the reason in ``tools/mutation-equivalents.toml``.

Usage (from the repository root; outside the CI gate, it takes minutes)::

    .venv/bin/python tools/mutate.py refimpl/dispatch.py --sample 50 --seed 1
    .venv/bin/python tools/mutate.py refimpl/staleness.py --list          # the sites only
    .venv/bin/python tools/mutate.py refimpl/effort.py --json out.json    # machine-readable
    .venv/bin/python tools/mutate.py refimpl/sim --sample 50 --seed 7     # a whole package

The tests run for a module are ``tests/test_<name>.py`` and the other test modules that import it
by name (``--tests`` overrides), plus the module's own doctests. Given a package (a directory), the
tool draws its sample from the sites of all its modules together (``--exclude`` leaves modules out
by glob, e.g. ``--exclude 'refimpl/lab/plots*'``), and runs for each mutant the tests of the module
it mutates; the tests of each module are first run once unmutated.
"""

from __future__ import annotations

import argparse
import ast
import copy
import dataclasses
import fnmatch
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENTS = ROOT / "tools" / "mutation-equivalents.toml"

_SWAP_BINOP: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.Pow: ast.Mult,
    ast.Mod: ast.FloorDiv,
}
_SWAP_CMP: dict[type[ast.cmpop], list[type[ast.cmpop]]] = {
    ast.Lt: [ast.LtE, ast.Gt],
    ast.LtE: [ast.Lt, ast.GtE],
    ast.Gt: [ast.GtE, ast.Lt],
    ast.GtE: [ast.Gt, ast.LtE],
    ast.Eq: [ast.NotEq],
    ast.NotEq: [ast.Eq],
    ast.Is: [ast.IsNot],
    ast.IsNot: [ast.Is],
    ast.In: [ast.NotIn],
    ast.NotIn: [ast.In],
}
_SWAP_NAMES = {"min": "max", "max": "min", "floor": "ceil", "ceil": "floor"}


@dataclass(frozen=True)
class Mutant:
    """One change: the source segment ``[start, end)`` (line, column pairs) and its new text."""

    module: str
    scope: str  # the enclosing function's qualified name ("<module>" at top level)
    kind: str
    line: int
    col: int
    end_line: int
    end_col: int
    old: str
    new: str
    occurrence: int = 1  # the same change in the same function: 1st, 2nd, ... in source order

    @property
    def key(self) -> str:
        """Stable across edits elsewhere in the module: no line numbers."""
        return f"{self.module}::{self.scope}: {self.old} -> {self.new} #{self.occurrence}"


def _unparse(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if isinstance(node, ast.stmt) else f"({text})"


def _is_docstring(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    parent = parents.get(node)
    return isinstance(parent, ast.Expr) and isinstance(node, ast.Constant)


def _sites(tree: ast.Module) -> Iterator[tuple[str, ast.AST, ast.AST]]:
    """(kind, original node, mutated node) for every mutation site of the module."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and type(node.op) in _SWAP_BINOP:
            new = copy.deepcopy(node)
            new.op = _SWAP_BINOP[type(node.op)]()
            yield "binop", node, new
        elif isinstance(node, ast.Compare) and len(node.ops) == 1:
            for replacement in _SWAP_CMP.get(type(node.ops[0]), []):
                new = copy.deepcopy(node)
                new.ops = [replacement()]
                yield "compare", node, new
        elif isinstance(node, ast.BoolOp):
            new = copy.deepcopy(node)
            new.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
            yield "boolop", node, new
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield "not", node, copy.deepcopy(node.operand)
        elif isinstance(node, ast.If | ast.While) and not _is_type_checking(node.test):
            new = copy.deepcopy(node.test)
            yield "negate", node.test, ast.UnaryOp(op=ast.Not(), operand=new)
        elif (
            isinstance(node, ast.Constant)
            and type(node.value) is int
            and not _is_docstring(node, parents)
        ):
            for delta in (1, -1):
                yield f"int{delta:+d}", node, ast.Constant(node.value + delta)
        elif isinstance(node, ast.Name) and node.id in _SWAP_NAMES:
            if isinstance(parents.get(node), ast.Call) and parents[node].func is node:  # type: ignore[attr-defined]
                yield "swap", node, ast.Name(id=_SWAP_NAMES[node.id], ctx=ast.Load())
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in _SWAP_NAMES
            and isinstance(parents.get(node), ast.Call)
        ):
            new = copy.deepcopy(node)
            new.attr = _SWAP_NAMES[node.attr]
            yield "swap", node, new
        elif isinstance(node, ast.Raise):
            yield "no-raise", node, ast.Pass()


def _scopes(tree: ast.Module) -> list[tuple[int, int, str]]:
    """(first line, last line, qualified name) of every function, innermost last."""
    out: list[tuple[int, int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    out.append((child.lineno, child.end_lineno or child.lineno, name))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def _scope_of(node: ast.AST, scopes: list[tuple[int, int, str]]) -> str:
    line = getattr(node, "lineno", 0)
    inside = [s for s in scopes if s[0] <= line <= s[1]]
    return max(inside, key=lambda s: s[0])[2] if inside else "<module>"


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def mutants(path: Path) -> list[Mutant]:
    """Every mutant of the module at ``path``, in source order."""
    source = path.read_text()
    tree = ast.parse(source)
    rel = path.resolve().relative_to(ROOT).as_posix()
    scopes = _scopes(tree)
    found: list[Mutant] = []
    seen: set[tuple[int, int, int, int, str]] = set()
    for kind, old, new in _sites(tree):
        if getattr(old, "end_lineno", None) is None:
            continue
        segment = ast.get_source_segment(source, old)
        if segment is None:
            continue
        text = _unparse(new)
        where = (old.lineno, old.col_offset, old.end_lineno, old.end_col_offset, text)  # type: ignore[attr-defined]
        if where in seen or text == _unparse(old):
            continue
        seen.add(where)
        found.append(
            Mutant(
                rel,
                _scope_of(old, scopes),
                kind,
                old.lineno,
                old.col_offset,
                old.end_lineno,
                old.end_col_offset,
                segment,
                text,
            )  # type: ignore[attr-defined]
        )
    found.sort(key=lambda m: (m.line, m.col, m.kind, m.new))
    counts: dict[tuple[str, str, str], int] = {}
    numbered = []
    for m in found:
        n = counts[(m.scope, m.old, m.new)] = counts.get((m.scope, m.old, m.new), 0) + 1
        numbered.append(dataclasses.replace(m, occurrence=n))
    return numbered


def apply(source: str, mutant: Mutant) -> str:
    """The module's source with the mutant's segment replaced (everything else byte for byte)."""
    data = source.encode()
    offsets = [0]  # byte offset of each line's start (ast columns are UTF-8 byte offsets)
    for line in data.splitlines(keepends=True):
        offsets.append(offsets[-1] + len(line))
    start = offsets[mutant.line - 1] + mutant.col
    end = offsets[mutant.end_line - 1] + mutant.end_col
    text = (data[:start] + mutant.new.encode() + data[end:]).decode()
    ast.parse(text)  # a mutant that does not parse is a bug of this tool
    return text


def default_tests(path: Path) -> list[str]:
    """``tests/test_<name>*.py``, ``tests/test_validation.py`` and every test module that names the
    module (``refimpl.<name>`` or ``import <name>``)."""
    name = path.stem.lstrip("_")
    dotted = path.resolve().relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
    found = {p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").glob(f"test_{name}*.py")}
    found.add("tests/test_validation.py")
    for test in (ROOT / "tests").glob("test_*.py"):
        text = test.read_text()
        if any(s in text for s in (dotted, f"refimpl.{name} ", f"import {name}\n")):
            found.add(test.relative_to(ROOT).as_posix())
    return sorted(found)


@dataclass
class Outcome:
    mutant: Mutant
    status: str  # "killed", "survived", "timeout", "equivalent"
    seconds: float
    reason: str = ""


def _equivalents() -> dict[str, str]:
    if not EQUIVALENTS.exists():
        return {}
    table = tomllib.loads(EQUIVALENTS.read_text())
    return {entry["key"]: entry["reason"] for entry in table.get("equivalent", [])}


def modules(path: Path, exclude: list[str]) -> list[Path]:
    """The module at ``path``, or every module of the package at ``path`` not matched by ``exclude``
    (globs relative to the repository root)."""
    path = path.resolve()
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise SystemExit(f"{path}: no such module or package; give a .py file or a directory")
    found = []
    for file in sorted(path.rglob("*.py")):
        rel = file.relative_to(ROOT).as_posix()
        if not any(fnmatch.fnmatch(rel, pattern) for pattern in exclude):
            found.append(file)
    if not found:
        raise SystemExit(f"{path}: no module left to mutate (check --exclude)")
    return found


def run(
    paths: list[Path], sample: int | None, seed: int, tests: list[str] | None, timeout: float
) -> list[Outcome]:
    """Mutate a seeded sample of the sites of ``paths`` (all of them when ``sample`` is None) and
    run, for each, ``tests`` or the default tests of the module it mutates."""
    everything = [m for path in paths for m in mutants(path)]
    chosen = (
        everything
        if sample is None or sample >= len(everything)
        else sorted(
            random.Random(seed).sample(everything, sample), key=lambda m: (m.module, m.line, m.col)
        )
    )
    known = _equivalents()
    outcomes: list[Outcome] = []
    checked: set[tuple[str, ...]] = set()  # commands whose unmutated run passed
    with tempfile.TemporaryDirectory(prefix="refimpl-mutate-") as tmp:
        work = Path(tmp) / "repo"
        ignore = shutil.ignore_patterns(
            ".git", ".venv", "_build", "__pycache__", ".hypothesis", "lab-report"
        )
        shutil.copytree(ROOT, work, ignore=ignore)
        env = {**os.environ, "PYTHONPATH": str(work), "CI": "true", "PYTHONDONTWRITEBYTECODE": "1"}
        for number, mutant in enumerate(chosen, start=1):
            if mutant.key in known:
                outcomes.append(Outcome(mutant, "equivalent", 0.0, known[mutant.key]))
                continue
            rel = mutant.module
            command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                       "-p", "no:randomly", rel,
                       *(tests or default_tests(ROOT / rel))]  # fmt: skip
            if tuple(command) not in checked:  # else a failing test would count as a kill
                baseline = subprocess.run(
                    command, cwd=work, env=env, capture_output=True, timeout=timeout, check=False
                )
                if baseline.returncode != 0:
                    tail = baseline.stdout.decode(errors="replace")[-3000:]
                    raise SystemExit(
                        f"the tests of {rel} fail on the unmutated tree; fix them first:\n{tail}"
                    )
                checked.add(tuple(command))
            original = (work / rel).read_text()
            (work / rel).write_text(apply(original, mutant))
            start = time.monotonic()
            try:
                done = subprocess.run(
                    command, cwd=work, env=env, capture_output=True, timeout=timeout, check=False
                )
                status = "survived" if done.returncode == 0 else "killed"
                if done.returncode not in (
                    0,
                    1,
                ):  # collection error, usage error: still a kill, but say so
                    status = "killed"
            except subprocess.TimeoutExpired:
                status = "timeout"
            seconds = time.monotonic() - start
            outcomes.append(Outcome(mutant, status, seconds))
            (work / rel).write_text(original)
            print(f"[{number}/{len(chosen)}] {status:8} {seconds:5.1f} s  {rel}:{mutant.line}: "
                  f"{mutant.old!r} -> {mutant.new!r}", file=sys.stderr, flush=True)  # fmt: skip
    return outcomes


def score(outcomes: list[Outcome]) -> tuple[int, int, float]:
    killed = sum(o.status in ("killed", "timeout") for o in outcomes)
    survived = sum(o.status == "survived" for o in outcomes)
    total = killed + survived
    return killed, survived, (100.0 * killed / total if total else 100.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "module", type=Path, help="the module or package to mutate, e.g. refimpl/dispatch.py"
    )
    parser.add_argument(
        "--sample", type=int, default=50, help="mutants to draw (default 50; 0: all)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the sample (default 0)")
    parser.add_argument("--tests", nargs="+", help="test files to run (default: see the docstring)")
    parser.add_argument(
        "--exclude", nargs="+", default=[], help="globs of modules of a package to leave out"
    )
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds per mutant (default 600)"
    )
    parser.add_argument("--list", action="store_true", help="list the mutation sites and exit")
    parser.add_argument("--json", type=Path, help="also write the outcomes as JSON here")
    args = parser.parse_args(argv)
    path = args.module.resolve()
    paths = modules(path, args.exclude)
    if args.list:
        for file in paths:
            for m in mutants(file):
                print(f"{m.module}:{m.line}:{m.col} {m.kind:9} {m.old!r} -> {m.new!r}")
        return 0
    sites = sum(len(mutants(file)) for file in paths)
    print(f"{path.relative_to(ROOT)}: {sites} sites in {len(paths)} module(s)", file=sys.stderr)
    outcomes = run(paths, args.sample or None, args.seed, args.tests, args.timeout)
    killed, survived, pct = score(outcomes)
    equivalent = [o for o in outcomes if o.status == "equivalent"]
    print(f"\n{path.relative_to(ROOT)}: score {pct:.1f} % ({killed} killed, {survived} survived, "
          f"{len(equivalent)} equivalent of {len(outcomes)} sampled; seed {args.seed})")  # fmt: skip
    for o in outcomes:
        if o.status == "survived":
            print(
                f"  SURVIVED {o.mutant.key}\n    {o.mutant.module}:{o.mutant.line}: "
                f"{o.mutant.old!r} -> {o.mutant.new!r}"
            )
        elif o.status == "timeout":
            print(
                f"  timeout  {o.mutant.module}:{o.mutant.line}: {o.mutant.old!r} -> {o.mutant.new!r}"
            )
    for o in equivalent:
        print(
            f"  equivalent {o.mutant.module}:{o.mutant.line}: {o.mutant.old!r} -> {o.mutant.new!r}: "
            f"{o.reason}"
        )
    if args.json is not None:
        args.json.write_text(json.dumps([{**asdict(o.mutant), "status": o.status, "seconds": o.seconds,
                                          "reason": o.reason} for o in outcomes], indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
