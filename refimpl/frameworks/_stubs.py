"""The one list of import stubs the framework adapters use, each with the reason it is off the tested path.

A stub replaces a module that a framework's import chain executes but that the tested function never
uses. Nothing else in refimpl stubs a framework module; :func:`install_stubs` is idempotent and
does nothing for a framework that is not installed.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from dataclasses import dataclass

__all__ = ["STUBS", "Stub", "install_stubs"]


@dataclass(frozen=True)
class Stub:
    """A module replaced by an empty package that keeps the real directory as its ``__path__``.

    Attributes
    ----------
    framework : str
        The framework whose import chain it is in.
    module : str
        The package whose ``__init__`` is not executed; its submodules still load from their files.
    reason : str
        Why the tested code does not need it.
    """

    framework: str
    module: str
    reason: str


STUBS: tuple[Stub, ...] = (
    Stub(
        framework="skyrl",
        module="skyrl.backends",
        reason=(
            "skyrl 0.3.0's skyrl/backends/__init__.py imports the Tinker backend (skyrl.backends.backend "
            "→ skyrl.tinker.types), whose pydantic models use typing.TypedDict, which pydantic refuses "
            "on Python < 3.12; the tested skyrl.backends.skyrl_train.utils.off_policy_correction_utils "
            "imports only torch, omegaconf and skyrl_train.utils.torch_utils. Its package __init__ is "
            "skipped; every module under it still loads from its installed file."
        ),
    ),
)


def install_stubs() -> None:
    """Put every stub of :data:`STUBS` in place (once; a framework that is not installed is left alone).

    Examples
    --------
    >>> from refimpl.frameworks import install_stubs
    >>> install_stubs()
    """
    for stub in STUBS:
        if stub.module in sys.modules:
            continue
        parent, _, _ = stub.module.rpartition(".")
        spec = importlib.util.find_spec(parent) if parent else None
        if spec is None or spec.origin is None:
            continue
        path = os.path.join(os.path.dirname(spec.origin), stub.module.rpartition(".")[2])
        if not os.path.isdir(path):
            continue
        module = types.ModuleType(stub.module, f"stub: {stub.reason}")
        module.__path__ = [path]
        sys.modules[stub.module] = module
