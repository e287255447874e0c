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
infinite loop is caught) but is listed apart: read each one, for on a loaded machine an
equivalent mutant that recompiles the numba kernels can outlast it too (seen at load 8 with the
default 600 s: the mutant of ``_hpop``'s tie-break listed as equivalent). Survivors are
printed as a diff line, to be read: either a test is missing, or the mutant is equivalent (it
cannot change any result), which is said with the reason in ``tools/mutation-equivalents.toml``.

Usage (from the repository root; outside the CI gate, it takes minutes)::

    .venv/bin/python tools/mutate.py refimpl/dispatch --sample 50 --seed 1
    .venv/bin/python tools/mutate.py refimpl/staleness/vtrace.py --list   # the sites only
    .venv/bin/python tools/mutate.py refimpl/effort --json out.json       # machine-readable
    .venv/bin/python tools/mutate.py refimpl/sim --sample 50 --seed 7     # a whole package
    .venv/bin/python tools/mutate.py refimpl/dispatch --fresh --sample 30  # a before-score
    .venv/bin/python tools/mutate.py --changed origin/main --sample 8 --threshold 0.97  # CI

Before-score and fresh samples
------------------------------
A score measures the suite only on a sample no test was written for: ``--fresh`` draws the seed
from the operating system's entropy and prints it first (``--seed`` repeats the sample), and the
score printed is that sample's *before-score*. Tests then written for its survivors raise its
*after-score*, which says little about the next sample; write them per class of hole instead
(``tests/test_depth_<package>.py``) and judge them on another fresh sample.

``--changed [REV]`` is the CI mode (``.ci/mutation``): the formula modules (:data:`FORMULA_MODULES`)
that ``git diff --name-only REV...HEAD`` lists (no REV: the files of the last commit; a clone
needs depth 2 for that), a sample of ``--sample`` split evenly over them, and a seed derived
from HEAD's commit hash (:func:`commit_seed`: its first 8 hex digits), so each change is scored on
a new sample, yet the same commit always draws the same one and a failure is repeated exactly.
``--threshold P`` exits 1 when killed / (killed + survived) is below ``P`` and prints, for each
survivor, the ``[[equivalent]]`` entry to append if no input can tell it apart.

The tests run for a module are ``tests/test_<name>.py`` and the other test modules that import it
by name (``--tests`` overrides), plus the module's own doctests. Given a package (a directory), the
tool draws its sample from the sites of all its modules together (``--exclude`` leaves modules out
by glob, e.g. ``--exclude 'refimpl/lab/plots*'``), and runs for each mutant the tests of the module
it mutates (with the doctests of every sampled module that has the same tests); every such
command is first run once unmutated (it must pass).

numba's on-disk cache
---------------------
Three modules of ``refimpl/sim`` (and one function of ``refimpl/staleness/versions.py``) are compiled with
``numba.njit(cache=True)``; compiling the two kernels takes minutes on a loaded machine. The copy
keeps the checkout's numba cache (``__pycache__/*.nbi``, ``*.nbc``; never ``.pyc``), the unmutated
runs complete it, and that state is kept aside as the *pristine* cache. Before each mutant the
copy's cache is reset to the pristine one **minus the entries of every module that may hold a
frozen part of the mutated module** (:func:`dependents`: the module and every module of
``refimpl/`` that imports it, directly or through others); those recompile from the mutated
source. After the mutant its source is restored byte for byte and the cache reset again, so no
mutant sees what another one compiled.

Why this is sound: numba 0.68's cache index of a source file is keyed by the SHA-256 of that file
alone, so an entry of an unchanged file is served even when what it froze at compile time has
changed elsewhere: globals read by jitted code (constants imported from other modules) and jitted
functions it calls or inlines from other modules. Measured: with ``_siftup`` of
``refimpl/sim/_compiled.py`` mutated (``tp < t`` -> ``tp > t``), ``simulate_agent(...,
engine='compiled')`` still returned the unmutated digest (the agent kernel, keyed by
``refimpl/sim/agent/_compiled.py``, came from the cache with the old heap inlined); with that
module's entries dropped it returned another. Everything a module's compiled code can hold comes
from modules it imports, transitively, so dropping the entries of that import closure leaves no
stale code; the price is a recompile of the kernels for a mutant of a module they import
(``_config``, ``_event``, ``_trace``, ...), which the sample pays only where the tests call them.

``--no-jit`` runs the tests with ``NUMBA_DISABLE_JIT=1`` instead (no cache at all): every kernel
runs as plain Python, so a mutant of a kernel costs no compile, and the sim tests take about 45 s
instead of about 85 s warm (idle, 2 December). It is sound because the kernels as plain Python
give the compiled traces bit for bit, which ``tests/test_sim_kernels_as_python.py`` checks on
every mode. That was not so before 2 December: numba widens an ``int16``/``int32`` value to 64
bits before ``<< 34`` or ``+ 1``, plain Python did not, and the agent kernel as Python ended with
an empty ``token_versions``; the kernel now widens them itself. A mutant that makes a kernel's
Python run differ from its compiled run (an integer that would wrap only in one of them) is the
one kind this mode can score differently; the sample's kernel survivors are worth a second run
without it.
"""

from __future__ import annotations

import argparse
import ast
import copy
import dataclasses
import fnmatch
import functools
import json
import os
import random
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENTS = ROOT / "tools" / "mutation-equivalents.toml"

#: The formula modules (globs relative to the repository root): pure reference functions whose
#: tests run in seconds. ``--changed`` samples only these; a change elsewhere (the simulator, whose
#: kernels recompile per mutant, the lab, the command line) passes with a line saying so.
FORMULA_MODULES = (
    "refimpl/dispatch/*.py",
    "refimpl/staleness/*.py",
    "refimpl/effort/*.py",
    "refimpl/penalties.py",
    "refimpl/losses/*.py",
)

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
            binop = copy.deepcopy(node)
            binop.op = _SWAP_BINOP[type(node.op)]()
            yield "binop", node, binop
        elif isinstance(node, ast.Compare) and len(node.ops) == 1:
            for replacement in _SWAP_CMP.get(type(node.ops[0]), []):
                compare = copy.deepcopy(node)
                compare.ops = [replacement()]
                yield "compare", node, compare
        elif isinstance(node, ast.BoolOp):
            boolop = copy.deepcopy(node)
            boolop.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
            yield "boolop", node, boolop
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield "not", node, copy.deepcopy(node.operand)
        elif isinstance(node, ast.If | ast.While) and not _is_type_checking(node.test):
            test = copy.deepcopy(node.test)
            yield "negate", node.test, ast.UnaryOp(op=ast.Not(), operand=test)
        elif (
            isinstance(node, ast.Constant)
            and type(node.value) is int
            and not _is_docstring(node, parents)
        ):
            for delta in (1, -1):
                yield f"int{delta:+d}", node, ast.Constant(node.value + delta)
        elif isinstance(node, ast.Name) and node.id in _SWAP_NAMES:
            parent = parents.get(node)
            if isinstance(parent, ast.Call) and parent.func is node:
                yield "swap", node, ast.Name(id=_SWAP_NAMES[node.id], ctx=ast.Load())
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in _SWAP_NAMES
            and isinstance(parents.get(node), ast.Call)
        ):
            attribute = copy.deepcopy(node)
            attribute.attr = _SWAP_NAMES[node.attr]
            yield "swap", node, attribute
        elif isinstance(node, ast.Raise):
            yield "no-raise", node, ast.Pass()


def _span(node: ast.AST) -> tuple[int, int, int, int] | None:
    """(line, column, end line, end column) of a node of the source, ``None`` for one without
    an end (made by the mutator, not parsed)."""
    if not isinstance(node, ast.expr | ast.stmt) or node.end_lineno is None:
        return None
    assert node.end_col_offset is not None
    return node.lineno, node.col_offset, node.end_lineno, node.end_col_offset


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
    data = source.encode()
    offsets = [0]  # byte offset of each line's start (ast columns are UTF-8 byte offsets)
    for line in data.splitlines(keepends=True):
        offsets.append(offsets[-1] + len(line))
    found: list[Mutant] = []
    seen: set[tuple[int, int, int, int, str]] = set()
    for kind, old, new in _sites(tree):
        span = _span(old)
        if span is None:
            continue
        first, col, end_line, end_col = span
        segment = data[offsets[first - 1] + col : offsets[end_line - 1] + end_col].decode()
        text = _unparse(new)
        where = (first, col, end_line, end_col, text)
        if where in seen or text == _unparse(old):
            continue
        seen.add(where)
        scope = _scope_of(old, scopes)
        found.append(Mutant(rel, scope, kind, first, col, end_line, end_col, segment, text))
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
    """``tests/test_<name>*.py``, ``tests/test_depth_<name>*.py``,
    ``tests/test_validation_<name>*.py`` (the bad calls of a module re-exported under another
    package, e.g. ``refimpl/staleness/frameworks.py`` as ``refimpl.frameworks``),
    ``tests/test_validation.py`` and every test module that names the module; a module of a package ``refimpl/<pkg>/...`` also gets
    ``tests/test_<pkg>*.py``, ``tests/test_depth_<pkg>*.py`` (the tests written per class of hole),
    ``tests/test_validation_<pkg>*.py`` and every test module that names the package
    (``refimpl.<pkg>`` followed by a space or a line end, ``import refimpl.<pkg> as``): the
    formula packages (``refimpl/dispatch``, ``refimpl/staleness``, ``refimpl/effort``) are tested
    through their flat names, by modules that name the package, not each of its modules.

    A module is named by its dotted path (``refimpl.sim._event``) or by ``from <parent> import
    <name>``; the short forms ``refimpl.<name>`` and ``import <name>`` count only for a top-level
    module (else ``refimpl/sim/cli.py`` would get the tests of ``refimpl/cli.py``).
    """
    name = path.stem.lstrip("_")
    rel = path.resolve().relative_to(ROOT)
    dotted = rel.with_suffix("").as_posix().replace("/", ".")
    parent, _, leaf = dotted.rpartition(".")
    found = {
        p.relative_to(ROOT).as_posix()
        for pattern in (f"test_{name}*.py", f"test_depth_{name}*.py", f"test_validation_{name}*.py")
        for p in (ROOT / "tests").glob(pattern)
    }
    found.add("tests/test_validation.py")
    names = [f"{dotted} ", f"{dotted}\n", f"{dotted}.", f"from {parent} import {leaf}"]
    if len(rel.parts) == 2:  # refimpl/<name>.py
        names += [f"refimpl.{name} ", f"import {name}\n"]
    else:
        package = rel.parts[1]
        for pattern in (
            f"test_{package}*.py",
            f"test_depth_{package}*.py",
            f"test_validation_{package}*.py",
        ):
            found |= {p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").glob(pattern)}
        names += [f"refimpl.{package} ", f"refimpl.{package}\n", f"import refimpl.{package} as"]
    for test in (ROOT / "tests").glob("test_*.py"):
        text = test.read_text()
        if any(s in text for s in names):
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


def _imported(path: Path) -> set[Path]:
    """The modules of the repository that the module at ``path`` names in an import statement
    (anywhere in it, functions included): ``from P import n`` names ``P/n.py`` (or the package
    ``P/n``) when ``n`` is a submodule, else ``P``'s ``__init__.py``."""

    def module_file(dotted: str) -> Path | None:
        base = ROOT.joinpath(*dotted.split("."))
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate.resolve()
        return None

    package = path.resolve().relative_to(ROOT).with_suffix("").parts[:-1]
    if path.name == "__init__.py":
        package = path.resolve().relative_to(ROOT).parts[:-1]
    found: set[Path] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package[: len(package) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            targets = []
            for alias in node.names:
                sub = f"{base}.{alias.name}" if base else alias.name
                targets.append(sub if module_file(sub) is not None else base)
        else:
            continue
        for dotted in targets:
            if dotted and (file := module_file(dotted)) is not None:
                found.add(file)
    return found


@functools.cache
def _import_graph() -> dict[Path, frozenset[Path]]:
    """Every module of ``refimpl/`` and the modules it imports (the unmutated sources)."""
    return {f.resolve(): frozenset(_imported(f)) for f in sorted((ROOT / "refimpl").rglob("*.py"))}


def dependents(path: Path) -> set[Path]:
    """``path`` and every module of ``refimpl/`` that imports it, directly or through others.

    numba's cache of a module is valid only for that module's source: the compiled code also
    holds, frozen, every global it reads (constants imported from other modules) and every jitted
    function it calls or inlines (``refimpl/sim/agent/_compiled.py`` inlines the heap helpers of
    ``refimpl/sim/_compiled.py``), and none of those are in the cache's key. The modules whose
    compiled code can hold something of ``path`` are among the ones that import it, transitively.
    """
    graph = _import_graph()
    out = {path.resolve()}
    grew = True
    while grew:
        grew = False
        for file, imports in graph.items():
            if file not in out and imports & out:
                out.add(file)
                grew = True
    return out


def _numba_files(tree: Path) -> Iterator[Path]:
    """numba's on-disk cache under ``tree``: ``__pycache__/<stem>.<function>-<line>.py3*.nbi``
    (the index) and ``....nbc`` (the compiled code)."""
    for suffix in ("*.nbi", "*.nbc"):
        yield from tree.rglob(f"__pycache__/{suffix}")


def _cache_owner(cache_file: Path) -> Path:
    """The source file a numba cache file belongs to (the stem before the first dot)."""
    return cache_file.parent.parent / (cache_file.name.split(".", 1)[0] + ".py")


def _copy_numba_cache(src: Path, dst: Path) -> None:
    """Copy numba's cache files under ``src`` to the same places under ``dst`` (nothing else)."""
    for file in _numba_files(src):
        target = dst / file.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(file, target)


def _reset_numba_cache(work: Path, pristine: Path, drop: set[Path]) -> int:
    """Make ``work``'s numba cache exactly ``pristine`` (the cache the unmutated tests left) minus
    the entries of the modules ``drop`` (repository-relative paths); returns how many were left
    out."""
    for file in list(_numba_files(work)):
        file.unlink()
    _copy_numba_cache(pristine, work)
    dropped = 0
    for file in list(_numba_files(work)):
        if _cache_owner(file).relative_to(work) in drop:
            file.unlink()
            dropped += 1
    return dropped


def split_sample(sizes: list[int], sample: int) -> list[int]:
    """How many of ``sample`` mutants each module draws, given its number of sites ``sizes``:
    as even a split as the sites allow (a module with fewer sites than its share gives the rest to
    the others, in order), so that every module a change touched gets at least one mutant when
    ``sample`` >= the number of modules."""
    quota = [0] * len(sizes)
    left = min(sample, sum(sizes))
    while left > 0:
        open_ = [i for i, size in enumerate(sizes) if quota[i] < size]
        share, extra = divmod(left, len(open_))
        for rank, i in enumerate(open_):
            take = min(share + (rank < extra), sizes[i] - quota[i])
            quota[i] += take
            left -= take
    return quota


def draw(paths: list[Path], sample: int | None, seed: int, split: bool = False) -> list[Mutant]:
    """The seeded sample: ``sample`` mutants drawn from the sites of all of ``paths`` together
    (every site when ``sample`` is None), or, with ``split``, :func:`split_sample` of them from
    each module; sorted by module and place."""
    per_module = [mutants(path) for path in paths]
    everything = [m for found in per_module for m in found]
    if sample is None or sample >= len(everything):
        return everything
    rng = random.Random(seed)
    if split:
        quota = split_sample([len(found) for found in per_module], sample)
        chosen = [
            m for found, k in zip(per_module, quota, strict=True) for m in rng.sample(found, k)
        ]
    else:
        chosen = rng.sample(everything, sample)
    return sorted(chosen, key=lambda m: (m.module, m.line, m.col))


def run(
    paths: list[Path],
    sample: int | None,
    seed: int,
    tests: list[str] | None,
    timeout: float,
    no_jit: bool = False,
    only: set[str] | None = None,
    split: bool = False,
) -> list[Outcome]:
    """Mutate a seeded sample of the sites of ``paths`` (all of them when ``sample`` is None;
    :func:`draw`) and run, for each, ``tests`` or the default tests of the module it mutates."""
    if only is None:
        chosen = draw(paths, sample, seed, split)
    else:  # some mutants alone (a sample's survivors, say), found by key among all the sites:
        # keys carry no line numbers, so they still name the mutant after edits elsewhere, when
        # the same seed would draw another sample
        everything = draw(paths, None, seed)
        chosen = [m for m in everything if m.key in only or m.key.replace("\n", "\\n") in only]
        missing = only - {m.key for m in chosen} - {m.key.replace("\n", "\\n") for m in chosen}
        if missing:
            raise SystemExit("--only: no such mutant (the code changed?):\n" + "\n".join(missing))
    known = _equivalents()
    outcomes: list[Outcome] = []

    # Each module's command is fixed before anything runs (a test file added to the checkout
    # meanwhile is not in the copy: naming it would fail every mutant's run, a false kill). The
    # sampled modules that share a list of test files share one command, their doctests included:
    # its unmutated run is then exactly the run each of their mutants is scored by.
    by_tests: dict[tuple[str, ...], list[str]] = {}
    for m in chosen:
        group = by_tests.setdefault(tuple(tests or default_tests(ROOT / m.module)), [])
        if m.module not in group:
            group.append(m.module)
    commands = {
        module: [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                 "-p", "no:randomly", *group, *test_files]
        for test_files, group in by_tests.items() for module in group
    }  # fmt: skip

    def command(rel: str) -> list[str]:
        return commands[rel]

    with tempfile.TemporaryDirectory(prefix="refimpl-mutate-") as tmp:
        work = Path(tmp) / "repo"
        pristine = Path(tmp) / "numba-cache"
        ignore = shutil.ignore_patterns(
            ".git", ".venv", "_build", "__pycache__", ".hypothesis", "lab-report"
        )
        shutil.copytree(ROOT, work, ignore=ignore)
        if not no_jit:  # numba's cache of the checkout: valid where a module's source is the same
            _copy_numba_cache(ROOT, work)  # (its key is the source's hash), else recompiled
        env = {**os.environ, "PYTHONPATH": str(work), "CI": "true", "PYTHONDONTWRITEBYTECODE": "1"}
        env.pop("NUMBA_CACHE_DIR", None)  # the cache stays beside the copy's sources
        if no_jit:
            env["NUMBA_DISABLE_JIT"] = "1"
        # Every test command runs once unmutated first: a failing test would count as a kill, and
        # the cache it leaves (each kernel the tests compile) is the one every mutant starts from.
        for cmd in dict.fromkeys(tuple(command(m.module)) for m in chosen if m.key not in known):
            start = time.monotonic()
            baseline = subprocess.run(
                cmd, cwd=work, env=env, capture_output=True, timeout=timeout, check=False
            )
            if baseline.returncode != 0:
                tail = baseline.stdout.decode(errors="replace")[-3000:]
                raise SystemExit(f"the tests fail on the unmutated tree; fix them first:\n"
                                 f"{' '.join(cmd[3:])}\n{tail}")  # fmt: skip
            print(f"[baseline] {time.monotonic() - start:5.1f} s  {' '.join(cmd[9:])}",
                  file=sys.stderr, flush=True)  # fmt: skip
        _copy_numba_cache(work, pristine)
        for number, mutant in enumerate(chosen, start=1):
            if mutant.key in known:
                outcomes.append(Outcome(mutant, "equivalent", 0.0, known[mutant.key]))
                continue
            rel = mutant.module
            # The mutated module's compiled code and that of every module that may hold a frozen
            # part of it are dropped: they recompile from the mutated source, never come stale.
            drop = {p.relative_to(ROOT) for p in dependents(ROOT / rel)}
            dropped = _reset_numba_cache(work, pristine, drop)
            source = work / rel
            original, stat = source.read_text(), source.stat()
            source.write_text(apply(original, mutant))
            start = time.monotonic()
            try:
                done = subprocess.run(
                    command(rel), cwd=work, env=env, capture_output=True, timeout=timeout,
                    check=False,
                )  # fmt: skip
                # 1: a test failed; anything else (collection or usage error): still a kill
                status = "survived" if done.returncode == 0 else "killed"
            except subprocess.TimeoutExpired:
                status = "timeout"
            seconds = time.monotonic() - start
            outcomes.append(Outcome(mutant, status, seconds))
            source.write_text(original)
            os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
            print(f"[{number}/{len(chosen)}] {status:8} {seconds:5.1f} s  {rel}:{mutant.line}: "
                  f"{mutant.old!r} -> {mutant.new!r}"
                  f"{f'  ({dropped} numba cache files dropped)' if dropped else ''}",
                  file=sys.stderr, flush=True)  # fmt: skip
        _reset_numba_cache(work, pristine, set())
    return outcomes


def score(outcomes: list[Outcome]) -> tuple[int, int, float]:
    killed = sum(o.status in ("killed", "timeout") for o in outcomes)
    survived = sum(o.status == "survived" for o in outcomes)
    total = killed + survived
    return killed, survived, (100.0 * killed / total if total else 100.0)


def fresh_seed() -> int:
    """A seed no one has seen: 32 bits of the operating system's entropy (``secrets``)."""
    return secrets.randbits(32)


def commit_seed(commit: str) -> int:
    """The seed of a change's sample: the commit hash's first 8 hex digits read as an integer.

    A new commit gives a new sample (the suite cannot have been tuned on it before the commit
    existed), and the same commit always gives the same one, so a failure in CI is repeated
    exactly with ``--seed`` (the tool prints it).
    """
    if not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", commit):
        raise ValueError(
            f"commit must be a full hexadecimal commit hash (40 or 64 lower-case digits, as "
            f"`git rev-parse HEAD` prints it); got commit={commit!r}"
        )
    return int(commit[:8], 16)


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed in {root}: {done.stderr.strip()}")
    return done.stdout


def changed_files(rev: str | None, root: Path | None = None) -> list[str]:
    """The files a change touched, relative to the repository root: ``git diff --name-only
    REV...HEAD`` (what HEAD changed since it left ``rev``), or, with ``rev`` None, the files of
    the last commit alone (every file for a root commit). A clone of depth 1 cannot tell them
    (HEAD's parent is missing, so HEAD looks like a root commit): refused, with the fix."""
    root = ROOT if root is None else root
    if rev is None:
        parents = _git(root, "rev-list", "--parents", "-n", "1", "HEAD").split()[1:]
        shallow = _git(root, "rev-parse", "--is-shallow-repository").strip() == "true"
        if not parents and shallow:  # a depth-1 clone: HEAD looks like a root commit
            raise SystemExit(
                "--changed: HEAD's parent is not in this clone (a shallow clone of depth 1), so "
                "the last commit's files cannot be told; fetch one more commit (git fetch "
                "--deepen 1, or clone with --depth 2) or pass the base, e.g. --changed origin/main"
            )
        out = _git(root, "diff-tree", "--root", "--no-commit-id", "--name-only", "-r", "HEAD")
    else:
        out = _git(root, "diff", "--name-only", f"{rev}...HEAD")
    return sorted({line for line in out.splitlines() if line})


def changed_modules(
    names: Iterable[str], patterns: Iterable[str] | None = None, root: Path | None = None
) -> list[Path]:
    """The modules among ``names`` (repository-relative paths) that match one of ``patterns``
    (default :data:`FORMULA_MODULES`) and still exist (a deleted module has nothing to mutate),
    sorted."""
    root = ROOT if root is None else root
    globs = list(FORMULA_MODULES if patterns is None else patterns)
    found = {
        (root / name).resolve()
        for name in names
        if name.endswith(".py")
        and any(fnmatch.fnmatch(name, g) for g in globs)
        and (root / name).is_file()
    }
    return sorted(found)


def equivalent_entry(mutant: Mutant) -> str:
    """A survivor judged equivalent, as the entry to append to ``tools/mutation-equivalents.toml``
    (the key as a TOML string; the reason is the reader's to write: why no input can tell)."""
    return (
        f"[[equivalent]]\nkey = {json.dumps(mutant.key)}\n"
        'reason = "<why no input can tell the mutant from the module>"'
    )


def report(outcomes: list[Outcome], label: str, seed: int) -> str:
    """The before-score of a sample and every mutant a reader must look at: each survivor as a
    diff line with its key, each timeout (counted as killed), each known equivalent with its
    reason."""
    killed, survived, pct = score(outcomes)
    equivalent = [o for o in outcomes if o.status == "equivalent"]
    lines = [
        f"{label}: score {pct:.1f} % ({killed} killed, {survived} survived, "
        f"{len(equivalent)} equivalent of {len(outcomes)} sampled; seed {seed})"
    ]
    for o in outcomes:
        m = o.mutant
        if o.status == "survived":
            lines += [f"  SURVIVED {m.key}", f"    {m.module}:{m.line}: {m.old!r} -> {m.new!r}"]
        elif o.status == "timeout":
            lines += [
                f"  timeout  {m.key}",
                f"    {m.module}:{m.line}: {m.old!r} -> {m.new!r} (counted as killed: check it "
                "is not a slow equivalent)",
            ]
    lines += [
        f"  equivalent {o.mutant.module}:{o.mutant.line}: {o.mutant.old!r} -> {o.mutant.new!r}: "
        f"{o.reason}"
        for o in equivalent
    ]
    return "\n".join(lines)


def verdict(outcomes: list[Outcome], threshold: float | None) -> tuple[int, str]:
    """The exit status and its line: 1 when the score (killed / not equivalent) is below
    ``threshold`` (a fraction), else 0. Each survivor is either a missing test or an equivalent
    mutant: the failing line says how to list the latter."""
    if threshold is None:
        return 0, ""
    killed, survived, _ = score(outcomes)
    total = killed + survived
    if total == 0 or killed >= threshold * total:
        return (
            0,
            f"passed: {killed} of {total} not-equivalent mutants killed (threshold {threshold})",
        )
    entries = "\n\n".join(equivalent_entry(o.mutant) for o in outcomes if o.status == "survived")
    return 1, (
        f"FAILED: {killed} of {total} not-equivalent mutants killed, below the threshold "
        f"{threshold}. Each survivor above is a test missing (write one that fails on it), or "
        "a mutant no input can tell from the module: then append its entry, with the reason, to "
        f"tools/mutation-equivalents.toml:\n\n{entries}"
    )


def _threshold(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(
            f"--threshold must be a fraction in [0, 1] (0.97 means 97 %); got {text}"
        )
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "module",
        type=Path,
        nargs="?",
        help="the module or package to mutate, e.g. refimpl/dispatch (not with --changed)",
    )
    parser.add_argument(
        "--sample", type=int, default=50, help="mutants to draw (default 50; 0: all)"
    )
    parser.add_argument(
        "--seed", type=int, help="seed of the sample (default 0; with --changed: HEAD's hash)"
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="draw a new seed from the operating system's entropy and print it first (a sample "
        "no test was tuned on: its score is a before-score); repeat the run with --seed",
    )
    parser.add_argument(
        "--changed",
        nargs="?",
        const="",
        metavar="REV",
        help="mutate the formula modules the change touched (git diff --name-only REV...HEAD; "
        "no REV: the last commit), --sample split evenly over them, seeded by HEAD's hash",
    )
    parser.add_argument(
        "--threshold",
        type=_threshold,
        help="exit 1 when the score (killed / not equivalent) is below this fraction, e.g. 0.97",
    )
    parser.add_argument("--tests", nargs="+", help="test files to run (default: see the docstring)")
    parser.add_argument(
        "--exclude", nargs="+", default=[], help="globs of modules of a package to leave out"
    )
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds per mutant (default 600)"
    )
    parser.add_argument(
        "--no-jit",
        action="store_true",
        help="run the tests with NUMBA_DISABLE_JIT=1 (numba kernels as plain Python)",
    )
    parser.add_argument(
        "--only",
        type=Path,
        help="a file of mutant keys, one a line (a newline in a key written \\n): run only those "
        "(e.g. a sample's survivors; found among all the sites, so --seed and --sample do not matter)",
    )
    parser.add_argument("--list", action="store_true", help="list the mutation sites and exit")
    parser.add_argument("--json", type=Path, help="also write the outcomes as JSON here")
    return parser


def _targets(args: argparse.Namespace, parser: argparse.ArgumentParser) -> tuple[str, list[Path]]:
    """The label and the modules to mutate; for ``--changed``, also sets the seed from HEAD."""
    if args.changed is None:
        if args.module is None:
            parser.error("give a module or package to mutate (e.g. refimpl/dispatch), or --changed")
        path = args.module.resolve()
        return path.relative_to(ROOT).as_posix(), modules(path, args.exclude)
    if args.module is not None or args.fresh:
        parser.error("--changed picks its modules and its seed itself: give no module, no --fresh")
    rev = args.changed or None
    head = _git(ROOT, "rev-parse", "HEAD").strip()
    if args.seed is None:
        args.seed = commit_seed(head)
    since = f"since {rev}" if rev else "in the last commit"
    touched = changed_modules(changed_files(rev))
    return f"formula modules changed {since} (HEAD {head[:12]})", touched


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # A shell starts a background job with SIGINT ignored, and the test processes would
        # inherit that: a test that interrupts itself (a real Ctrl-C) would then fail unmutated.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if args.fresh:
        if args.seed is not None:
            parser.error("--fresh draws its own seed: give --fresh or --seed, not both")
        args.seed = fresh_seed()
        print(f"fresh seed {args.seed} (repeat this sample with --seed {args.seed})", flush=True)
    label, paths = _targets(args, parser)
    if args.seed is None:
        args.seed = 0
    if args.changed is not None:
        print(f"{label}: seed {args.seed}", flush=True)
        if not paths:
            print("no formula module changed: nothing to mutate (passed)")
            return 0
        for file in paths:
            print(f"  {file.relative_to(ROOT).as_posix()}", flush=True)
    if args.list:
        for file in paths:
            for m in mutants(file):
                print(f"{m.module}:{m.line}:{m.col} {m.kind:9} {m.old!r} -> {m.new!r}")
        return 0
    sites = sum(len(mutants(file)) for file in paths)
    print(f"{label}: {sites} sites in {len(paths)} module(s)", file=sys.stderr)
    only = None if args.only is None else set(args.only.read_text().splitlines()) - {""}
    outcomes = run(
        paths,
        args.sample or None,
        args.seed,
        args.tests,
        args.timeout,
        args.no_jit,
        only,
        split=args.changed is not None,
    )
    print("\n" + report(outcomes, label, args.seed))
    if args.json is not None:
        args.json.write_text(json.dumps([{**asdict(o.mutant), "status": o.status, "seconds": o.seconds,
                                          "reason": o.reason} for o in outcomes], indent=1))  # fmt: skip
    status, line = verdict(outcomes, args.threshold)
    if line:
        print(line)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
