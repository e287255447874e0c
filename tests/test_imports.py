"""Every module of refimpl imports on its own, in a fresh interpreter.

An import circle can hide behind import order: ``a`` imports ``b`` at its top, ``b`` imports ``a``
inside a function, and everything works as long as nobody imports ``b`` first. One child process
imports each module alone: before each import it forgets every ``refimpl`` module it has loaded,
so each import starts from nothing (third-party libraries stay loaded, which keeps it cheap: a few
seconds for all of them).
"""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import refimpl

# Run in the child: import each module named on stdin alone; print the failures as JSON.
_CHILD = r"""
import importlib, json, sys, traceback
from importlib.machinery import SourceFileLoader

# Each source is compiled once: where no bytecode is kept (a fresh checkout, PYTHONDONTWRITEBYTECODE
# set) every import of a module would compile it again. Importing it anew runs the same code object
# in a fresh module, as an import from bytecode would.
_codes = {}
_compile = SourceFileLoader.source_to_code


def _source_to_code(self, data, path, *, _optimize=-1):
    key = (path, bytes(data), _optimize)
    if key not in _codes:
        _codes[key] = _compile(self, data, path, _optimize=_optimize)
    return _codes[key]


SourceFileLoader.source_to_code = _source_to_code

failures = {}
for name in json.loads(sys.stdin.read()):
    for loaded in [m for m in sys.modules if m == ROOT or m.startswith(ROOT + ".")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except BaseException:
        failures[name] = traceback.format_exc(limit=-3)
print(json.dumps(failures))
"""


def import_each_alone(root: str, names: list[str], path: Path | None = None) -> dict[str, str]:
    """Failures (module -> traceback) of importing each module of ``names`` alone, in a child."""
    code = f"ROOT = {root!r}\n" + _CHILD
    if path is not None:
        code = f"import sys; sys.path.insert(0, {str(path)!r})\n" + code
    result = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(names),
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard: the imports take a few seconds
        check=True,
    )
    failures: dict[str, str] = json.loads(result.stdout.strip().splitlines()[-1])
    return failures


def _modules() -> list[str]:
    found = pkgutil.walk_packages(refimpl.__path__, prefix="refimpl.")
    return ["refimpl", *sorted(m.name for m in found)]


def test_every_refimpl_module_imports_alone() -> None:
    names = _modules()
    assert {"refimpl.sweep.grid", "refimpl.sweep.kinds", "refimpl.sim.agent"} <= set(names)
    failures = import_each_alone("refimpl", names)
    assert not failures, "\n".join(f"{name}:\n{tb}" for name, tb in failures.items())


def test_the_check_finds_a_circle_that_import_order_hides(tmp_path: Path) -> None:
    # the wrong variant: a imports b at its top, b needs a's name at its top
    pkg = tmp_path / "circ"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from circ.b import helper\nVALUE = 1\n")
    (pkg / "b.py").write_text("from circ.a import VALUE\n\ndef helper():\n    return VALUE\n")
    failures = import_each_alone("circ", ["circ.a", "circ.b"], path=tmp_path)
    assert set(failures) == {"circ.a", "circ.b"}
    assert all("ImportError" in tb for tb in failures.values())


# --- no import inside a function to dodge a circle ------------------------------------------------


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_edges(root: Path) -> tuple[dict[str, set[str]], list[tuple[str, str, int]]]:
    """The package's imports of its own modules: module-level edges, and those inside functions.

    An import under ``if TYPE_CHECKING:`` is not an edge (it never runs).
    """
    modules = {_module_name(p, root): p for p in root.rglob("*.py")}
    package = root.name

    def owner(name: str) -> str | None:  # the module a dotted name lives in
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    top: dict[str, set[str]] = {m: set() for m in modules}
    inner: list[tuple[str, str, int]] = []
    for name, path in modules.items():

        def add(target: str, line: int, depth: int, name: str = name) -> None:
            if target != package and not target.startswith(package + "."):
                return
            found = owner(target)
            if found is None or found == name:
                return
            if depth == 0:
                top[name].add(found)
            else:
                inner.append((name, found, line))

        def walk(node: ast.AST, depth: int) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and ast.unparse(child.test) == "TYPE_CHECKING":
                    continue
                if isinstance(child, ast.Import):
                    for alias in child.names:
                        add(alias.name, child.lineno, depth)
                elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                    for alias in child.names:
                        full = f"{child.module}.{alias.name}"
                        add(full if full in modules else child.module, child.lineno, depth)
                inner_depth = depth + isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
                walk(child, inner_depth)

        walk(ast.parse(path.read_text()), 0)
    return top, inner


def hidden_circles(root: Path) -> list[str]:
    """Imports inside functions whose target imports the importer back (a circle they dodge)."""
    top, inner = import_edges(root)
    edges = {m: set(t) for m, t in top.items()}
    for a, b, _ in inner:
        edges[a].add(b)

    def reaches(start: str, goal: str) -> bool:  # importing a module also imports its packages
        seen: set[str] = set()
        stack = [start]
        while stack:
            node = stack.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                stack.extend([*edges.get(node, ()), *_parents(node)])
        return False

    return [
        f"{a} (line {line}) imports {b} inside a function" for a, b, line in inner if reaches(b, a)
    ]


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _adapter_candidate(line: str) -> bool:
    """An adapter's candidate imports what it calls inside its body by design: its source is
    pasted as a reproduction's setup (refimpl.frameworks.Adapter.setup), so a framework adapter
    module importing refimpl.frameworks there dodges no circle at import time."""
    return line.startswith("refimpl.frameworks._") and " imports refimpl.frameworks" in line


def test_no_module_imports_another_inside_a_function_to_dodge_a_circle() -> None:
    found = hidden_circles(Path(refimpl.__file__).parent)
    assert [line for line in found if not _adapter_candidate(line)] == []


def test_the_adapter_exemption_covers_only_adapter_modules() -> None:
    assert _adapter_candidate(
        "refimpl.frameworks._skyrl_losses (line 51) imports refimpl.frameworks inside a function"
    )
    assert not _adapter_candidate(
        "refimpl.losses.gae (line 3) imports refimpl.frameworks inside a function"
    )
    assert not _adapter_candidate("refimpl.frameworks._matrix (line 9) imports refimpl.testing")


def test_the_static_check_finds_a_circle_hidden_inside_a_function(tmp_path: Path) -> None:
    # the wrong variant: a imports b at its top; b imports a inside a function
    pkg = tmp_path / "circ"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from circ.b import helper\nVALUE = 1\n")
    (pkg / "b.py").write_text("def helper():\n    from circ.a import VALUE\n    return VALUE\n")
    (pkg / "c.py").write_text("def lazy():\n    import circ.a\n    return circ.a\n")  # no circle
    assert hidden_circles(pkg) == ["circ.b (line 2) imports circ.a inside a function"]
    assert import_each_alone("circ", ["circ.a", "circ.b", "circ.c"], path=tmp_path) == {}


def test_the_flat_api_loads_on_first_use_and_dunder_lookups_do_not_load_it() -> None:
    """In a fresh interpreter: ``import refimpl`` loads neither numpy nor the flat API; a lookup of
    an unknown dunder (``hasattr(refimpl, "__wrapped__")``, as inspect and pickle do) answers no
    without loading it; ``from refimpl import cli`` (a submodule) imports that module without
    loading it; ``refimpl.__all__`` and a flat name load it; an unknown name is an
    AttributeError. (tools/mutate.py found the lazy loader's condition untested: each of four
    mutants of ``name == "__all__" or not name.startswith("__")`` survived.)"""
    script = """
import json, sys
import refimpl
out = {"numpy_at_import": "numpy" in sys.modules}
out["dunder"] = hasattr(refimpl, "__wrapped__")
out["numpy_after_dunder"] = "numpy" in sys.modules
from refimpl import cli
out["cli"] = cli.__name__
out["numpy_after_cli"] = "numpy" in sys.modules
out["all"] = "selected_pmf" in refimpl.__all__
out["flat"] = callable(refimpl.selected_pmf)
try:
    refimpl.no_such_name
    out["unknown"] = "found"
except AttributeError as err:
    out["unknown"] = str(err)
print(json.dumps(out))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout) == {
        "numpy_at_import": False,
        "dunder": False,
        "numpy_after_dunder": False,
        "cli": "refimpl.cli",
        "numpy_after_cli": False,
        "all": True,
        "flat": True,
        "unknown": "module 'refimpl' has no attribute 'no_such_name'",
    }


# --- the public API is a list a reviewer reads -----------------------------------------------------

_API_LIST = Path(__file__).parent / "data" / "public_api.txt"


def read_api_list(path: Path) -> dict[str, set[str]]:
    """``module -> names`` of a public-API list: lines ``"<module> <name>"``, a line ``"<module>"``
    alone for a module whose ``__all__`` is empty, ``#`` comments."""
    listed: dict[str, set[str]] = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            module, *name = line.split()
            listed.setdefault(module, set()).update(name)
    return listed


def api_differences(listed: dict[str, set[str]]) -> list[str]:
    """What the installed package lacks or adds against ``listed``, one line each (empty: equal)."""
    found: list[str] = []
    for module_name, names in sorted(listed.items()):
        module = importlib.import_module(module_name)
        exported = list(module.__all__)
        found += [
            f"{module_name}: {n} listed twice in __all__"
            for n in sorted(set(exported))
            if exported.count(n) > 1
        ]
        found += [f"removed: {module_name} {n}" for n in sorted(names - set(exported))]
        found += [
            f"added (list it in tests/data/public_api.txt): {module_name} {n}"
            for n in sorted(set(exported) - names)
        ]
        found += [
            f"in __all__ but missing: {module_name} {n}"
            for n in sorted(exported)
            if not hasattr(module, n)
        ]
    return found


def test_the_public_api_is_the_committed_list() -> None:
    """Every name of ``__all__`` in ``refimpl`` and its documented modules, against the committed
    list: moving code must keep each flat ``refimpl.X`` and each documented ``refimpl.sub.X``."""
    listed = read_api_list(_API_LIST)
    assert {
        "refimpl",
        "refimpl.testing",
        "refimpl.losses",
        "refimpl.sim",
        "refimpl.sweep",
        "refimpl.lab",
        "refimpl.frameworks",
    } <= set(listed)
    assert api_differences(listed) == []


def test_the_api_check_finds_a_removed_and_an_added_name() -> None:
    # the wrong variants: a list naming what the package lacks, and one missing a name it has
    live = {m: set(importlib.import_module(m).__all__) for m in read_api_list(_API_LIST)}
    assert api_differences(live) == []
    live["refimpl.penalties"] = (live["refimpl.penalties"] - {"dapo_overlong_penalty"}) | {
        "dapo_penalty"
    }
    assert api_differences(live) == [
        "removed: refimpl.penalties dapo_penalty",
        "added (list it in tests/data/public_api.txt): refimpl.penalties dapo_overlong_penalty",
    ]


# --- layers: dependencies point one way ---------------------------------------------------------

#: refimpl's layers, lowest first. A module may import modules of its own layer and of the layers
#: below, never above (at the top of the module or inside a function). ``""`` is the root package
#: ``refimpl`` itself: the flat API, which flattens only the formula modules.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation", ("errors", "_imports", "_validation", "_io", "_process")),
    ("formulas", ("", "dispatch", "staleness", "effort", "penalties", "losses")),
    ("simulator", ("sim",)),
    ("learning", ("learning", "learning_async")),
    ("oracle and sweeps", ("testing", "sweep")),
    ("frameworks", ("frameworks",)),
    ("lab", ("lab",)),
    ("command line", ("cli", "__main__")),
)


def layer_of(module: str, layers: tuple[tuple[str, tuple[str, ...]], ...]) -> int | None:
    """The index of the layer of ``module`` (``pkg.unit.rest``: its ``unit`` decides)."""
    unit = module.split(".")[1] if "." in module else ""
    return next((i for i, (_, units) in enumerate(layers) if unit in units), None)


def upward_imports(
    root: Path, layers: tuple[tuple[str, tuple[str, ...]], ...], flat: tuple[str, ...]
) -> list[str]:
    """Every import of a module from a layer above its own, and every module of the package that
    no layer names; ``flat`` is what the root flattens by name (its ``_FLAT``), read as its imports.
    """
    top, inner = import_edges(root)
    edges = [(a, b, "") for a, targets in top.items() for b in sorted(targets)]
    edges += [(a, b, f" (line {line}, inside a function)") for a, b, line in inner]
    edges += [(root.name, f"{root.name}.{sub}", " (flattened by name)") for sub in flat]
    found = [f"{m} is in no layer: add its unit to LAYERS" for m in sorted(top)
             if layer_of(m, layers) is None]  # fmt: skip
    for a, b, where in edges:
        la, lb = layer_of(a, layers), layer_of(b, layers)
        if la is not None and lb is not None and lb > la:
            found.append(f"{a} ({layers[la][0]}) imports {b} ({layers[lb][0]}){where}")
    return sorted(set(found))


def test_no_module_imports_a_layer_above_its_own() -> None:
    assert upward_imports(Path(refimpl.__file__).parent, LAYERS, refimpl._FLAT) == []


def test_the_root_flattens_nothing_above_the_formula_layer() -> None:
    layers = {sub: layer_of(f"refimpl.{sub}", LAYERS) for sub in refimpl._FLAT}
    assert layers == {"errors": 0} | {sub: 1 for sub in refimpl._FLAT if sub != "errors"}


def test_the_layer_check_finds_an_upward_import_and_a_module_in_no_layer(tmp_path: Path) -> None:
    # the wrong variants: a low module importing a high one (at its top and inside a function),
    # the root flattening a high module by name, and a module no layer names
    pkg = tmp_path / "house"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("import house.high\n\ndef f():\n    from house import high\n")
    (pkg / "high.py").write_text("import house.low\n")
    (pkg / "stray.py").write_text("")
    layers = (("bottom", ("", "low")), ("top", ("high",)))
    assert upward_imports(pkg, layers, ("high",)) == [
        "house (bottom) imports house.high (top) (flattened by name)",
        "house.low (bottom) imports house.high (top)",
        "house.low (bottom) imports house.high (top) (line 4, inside a function)",
        "house.stray is in no layer: add its unit to LAYERS",
    ]
