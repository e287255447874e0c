"""Every module of refimpl imports on its own, in a fresh interpreter.

An import circle can hide behind import order: ``a`` imports ``b`` at its top, ``b`` imports ``a``
inside a function, and everything works as long as nobody imports ``b`` first. One child process
imports each module alone: before each import it forgets every ``refimpl`` module it has loaded,
so each import starts from nothing (third-party libraries stay loaded, which keeps it cheap: a few
seconds for all of them).
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import refimpl

# Run in the child: import each module named on stdin alone; print the failures as JSON.
_CHILD = r"""
import importlib, json, sys, traceback

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
