"""numba's cache on disk, keyed by every file whose code a compiled kernel holds.

numba keys a function's cache entry by the function's own source file: its index stores a hash of
that file, and a different hash makes the entry stale. A kernel's machine code holds more than that
file: the constants it reads from other modules (frozen into the code when it is compiled) and the
jitted functions it calls (inlined, or linked into it). The simulator's kernels read their layout
constants from :mod:`refimpl.sim._compiled_layout` and inline the heap of
:mod:`refimpl.sim._compiled_heap`: with numba's own key, a change to either file would let numba
serve the old kernel.

:func:`njit` compiles with numba's cache whose stamp is :func:`closure_stamp` instead: a hash of
every file of :func:`kernel_files` (the kernel's module, the modules its constants come from and,
recursively, those of every jitted or plain function it calls, within its top-level package) and
of the numba, numpy and Python versions. A change to any of them makes the entry stale and the
kernel compiles again; unrelated files do not. Where the cache lives is numba's own choice, which
lasts between processes: ``NUMBA_CACHE_DIR`` when it is set, else the ``__pycache__`` beside the
module when it is writable, else the user's cache directory (``~/.cache/numba``), as for an
installation in a read-only ``site-packages``.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import pickle
import platform
import re
import sys
from collections.abc import Callable, Iterator
from functools import cache
from importlib.util import find_spec
from pathlib import Path
from types import CodeType, FunctionType, ModuleType
from typing import Any

import numpy as np

#: Whether numba is installed, found without importing it: its import (0.16 s, and ``scipy.linalg``
#: at a kernel's first load) is paid only by a call that compiles or loads a kernel.
AVAILABLE: bool = find_spec("numba") is not None

__all__ = [
    "AVAILABLE",
    "cached_on_disk",
    "closure_stamp",
    "kernel_files",
    "load_numba",
    "njit",
    "numba_version",
]


def load_numba() -> Any:
    """The numba module, imported on first use (numba required: :data:`AVAILABLE`)."""
    if not AVAILABLE:
        raise RuntimeError("compiling a kernel needs numba: pip install 'refimpl[fast]'")
    return importlib.import_module("numba")


@cache
def numba_version() -> str:
    """numba's version (``"-"`` without numba), read off its version file without importing it
    (numba's own ``__version__`` comes from the same text); imported only where that file is not
    laid out as numba 0.68's is."""
    spec = find_spec("numba") if AVAILABLE else None
    if spec is None or spec.origin is None:
        return "-"
    try:
        text = (Path(spec.origin).parent / "_version.py").read_text()
    except OSError:
        text = ""
    found = re.search(r'"version":\s*"([^"]+)"', text)
    return found.group(1) if found else str(load_numba().__version__)


def _python_function(value: Any) -> FunctionType | None:
    """The Python function behind a numba dispatcher, or the function itself; else ``None``."""
    fn = getattr(value, "py_func", value)
    return fn if isinstance(fn, FunctionType) else None


def _names(code: CodeType) -> Iterator[str]:
    """The global and attribute names a code object reads, nested code objects included."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _names(const)


@cache
def _imported_names(module: str) -> dict[str, tuple[str, str]]:
    """``{local name: (module, name)}`` for every ``from module import name [as local]`` at the
    top of ``module`` (relative imports resolved)."""
    mod = sys.modules.get(module)
    path = getattr(mod, "__file__", None)
    if path is None:
        return {}
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    out = {}
    for node in ast.parse(Path(path).read_text()).body:
        if not isinstance(node, ast.ImportFrom):
            continue
        base = node.module or ""
        if node.level:
            parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            base = f"{parent}.{base}" if base else parent
        for alias in node.names:
            out[alias.asname or alias.name] = (base, alias.name)
    return out


def _module_file(module: str) -> str | None:
    path = getattr(sys.modules.get(module), "__file__", None)
    return None if path is None else _resolved(path)


@cache
def _resolved(path: str) -> str:
    """``path`` with its links resolved, once per process (a kernel's closure asks for its
    modules' files several hundred times)."""
    return str(Path(path).resolve())


def _origins(module: str, name: str, top: str) -> Iterator[str]:
    """The files a global ``name`` of ``module`` passes through, up to the module defining it
    (``from a import x`` in ``b``, ``from b import x`` in ``c``: ``c``, ``b`` and ``a``)."""
    seen = set()
    while module.partition(".")[0] == top and (module, name) not in seen:
        seen.add((module, name))
        path = _module_file(module)
        if path is not None:
            yield path
        source = _imported_names(module).get(name)
        if source is None:
            return
        module, name = source


def kernel_files(kernel: Any) -> tuple[str, ...]:
    """Every file whose code or constants ``kernel`` (a function or a numba dispatcher) can hold
    once compiled, sorted: its module's file, the modules its global constants are imported from,
    and recursively the same for every function it calls; only files of the kernel's top-level
    package (numba, numpy and Python count through their versions in :func:`closure_stamp`).

    Examples
    --------
    >>> from refimpl.sim import _compiled
    >>> [Path(f).name for f in kernel_files(_compiled._kernel)]
    ['_compiled.py', '_compiled_heap.py', '_compiled_layout.py', 'versions.py']
    """
    first = _python_function(kernel)
    if first is None:
        raise TypeError(f"kernel must be a Python function or a numba dispatcher; got {kernel!r}")
    top = first.__module__.partition(".")[0]
    files: set[str] = set()
    todo, done = [first], set()
    while todo:
        fn = todo.pop()
        if fn in done:
            continue
        done.add(fn)
        files.update(_origins(fn.__module__, fn.__name__, top))
        for name in set(_names(fn.__code__)):
            if name not in fn.__globals__:
                continue  # an attribute, or a builtin
            value = fn.__globals__[name]
            called = _python_function(value)
            if called is not None:
                if called.__module__.partition(".")[0] == top:
                    todo.append(called)
            elif isinstance(value, ModuleType):
                if value.__name__.partition(".")[0] == top and _module_file(value.__name__):
                    files.add(str(_module_file(value.__name__)))
            else:
                files.update(_origins(fn.__module__, name, top))
    return tuple(sorted(files))


def closure_stamp(kernel: Any) -> str:
    """The hash (SHA-256, hex) of the contents of :func:`kernel_files` and of the numba, numpy and
    Python versions: the freshness stamp of ``kernel``'s cache entry."""
    h = hashlib.sha256()
    for version in (numba_version(), np.__version__, platform.python_version()):
        h.update(version.encode() + b"\0")
    for path in kernel_files(kernel):
        h.update(path.encode() + b"\0")
        h.update(hashlib.sha256(Path(path).read_bytes()).digest())
    return h.hexdigest()


class _ClosureLocator:
    """numba's own locator for a function (where its cache lives), with :func:`closure_stamp` as
    the stamp of its freshness."""

    def __init__(self, inner: Any, stamp: str) -> None:
        self._inner = inner
        self._stamp = stamp

    def ensure_cache_path(self) -> None:
        self._inner.ensure_cache_path()

    def get_cache_path(self) -> str:
        return str(self._inner.get_cache_path())

    def get_source_stamp(self) -> str:
        return self._stamp

    def get_disambiguator(self) -> str:
        return str(self._inner.get_disambiguator())


@cache
def _closure_cache_class(*, lean: bool) -> Any:
    """numba's per-function cache with :class:`_ClosureLocator` as its locator (the classes
    subclass numba's own, so they are built on first use, once numba is imported); ``lean``: it
    loads a kernel without numba's registries (:func:`_load_without_refresh`)."""
    caching = importlib.import_module("numba.core.caching")
    impl_base: Any = caching.CompileResultCacheImpl
    cache_base: Any = caching.FunctionCache

    class _ClosureCacheImpl(impl_base):  # type: ignore[misc]
        def __init__(self, py_func: FunctionType) -> None:
            super().__init__(py_func)
            inner: Any = self._locator  # type: ignore[has-type]  # numba's choice of place
            self._locator = _ClosureLocator(inner, closure_stamp(py_func))

    class _ClosureCache(cache_base):  # type: ignore[misc]
        _impl_class = _ClosureCacheImpl

    needed = ("_load_overload", "_guard_against_spurious_io_errors")
    if lean and all(hasattr(cache_base, n) for n in needed):
        _ClosureCache.load_overload = _load_without_refresh
    return _ClosureCache


def _load_without_refresh(self: Any, sig: Any, target_context: Any) -> Any:
    """numba's ``Cache.load_overload`` without its first step, ``target_context.refresh()``.

    That refresh imports and installs every typing and lowering registry numba has (``numba.np``,
    ``numba.cpython``, ... and, through ``numba.np.arraymath``, ``scipy.linalg``): 0.22 s of CPU
    time in a fresh process, four fifths of what loading a kernel from the cache cost, and
    nothing a cached kernel needs. Rebuilding one links its machine code against symbols the
    target context registers when it is created; the registries serve typing and lowering, that
    is compiling, and numba's compiler refreshes them itself before it compiles anything (so a
    cache miss, or any later compilation in the process, finds them installed). A fresh
    process running a cached kernel runs the same machine code either way
    (``tests/test_kernel_cache.py`` checks a fresh process's traces against the reference
    engine's).

    Only for a kernel compiled without numba's runtime (``_nrt=False``, as the event loops are):
    a kernel that allocates calls into the runtime, which the refresh sets up (loaded without
    it, such a kernel crashes the process), so it loads the numba way.
    """
    with self._guard_against_spurious_io_errors():
        return self._load_overload(sig, target_context)


class _CacheOnFirstUse:
    """A dispatcher's cache, built when the dispatcher first reads it (to compile, load or look
    up a kernel). Building one hashes the kernel's closure (:func:`closure_stamp`) and finds its
    directory; a helper that is only ever inlined into a kernel never reads its own cache, so
    most of a kernel's helpers never pay for it."""

    def __init__(self, py_func: FunctionType, *, lean: bool) -> None:
        self._py_func = py_func
        self._lean = lean
        self._built: Any = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # copy and pickle probe dunders: nothing to build for them
            raise AttributeError(name)
        if self._built is None:
            self._built = _closure_cache_class(lean=self._lean)(self._py_func)
        return getattr(self._built, name)


def njit(fn: Callable[..., Any], **options: Any) -> Any:
    """``numba.njit(**options)(fn)`` cached on disk under :func:`closure_stamp` (numba required;
    this is where numba is imported). The cache is built on the dispatcher's first use of it.

    With numba's JIT switched off (``NUMBA_DISABLE_JIT=1``) numba returns ``fn`` itself, and so
    does this function.
    """
    numba = load_numba()
    options.pop("cache", None)
    dispatcher = numba.njit(**options)(fn)
    if hasattr(dispatcher, "enable_caching"):
        lean = options.get("_nrt", True) is False  # no numba runtime: loads without registries
        dispatcher._cache = _CacheOnFirstUse(dispatcher.py_func, lean=lean)
    return dispatcher


def cached_on_disk(dispatcher: Any) -> bool:
    """Whether numba's cache on disk holds a compilation of ``dispatcher`` for its current stamp
    (the closure's files for a kernel of :func:`njit`, its own file for any other dispatcher).

    Reads numba's index file (a stale or missing index holds nothing); a numba whose cache is laid
    out otherwise counts as holding nothing, so that the caller falls back to the size rule.
    """
    try:
        return bool(dispatcher._cache._cache_file._load_index())
    except (AttributeError, OSError, EOFError, ValueError, pickle.UnpicklingError):
        return False
