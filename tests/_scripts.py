"""Loading a script of the repository (a benchmark, a tool, an example's maker) as a module.

Scripts are not installed with the package; a test imports one from its path. The module is
registered in ``sys.modules`` under its name, so that what needs its module to be importable
(dataclasses, pickling) works as in a normal import.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

#: the repository's root
ROOT = Path(__file__).resolve().parent.parent


def load_script(name: str, path: Path) -> ModuleType:
    """The script at ``path``, imported as the module ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
