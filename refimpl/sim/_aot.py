"""Kernels compiled ahead of time: a kernel's machine code in a shared object, called through ctypes.

A fresh process that runs a kernel held by numba's cache on disk still imports numba (about 0.14 s
of CPU time) and then loads the kernel through numba's dispatcher, target context and LLVM (another
0.15 to 0.3 s): most of what a fresh ``refimpl simulate`` call of a compiled mode spends beyond its
run. numba's cache cannot avoid numba itself. So the kernel's machine code is also kept as a shared
object, linked once with the system's C compiler (:mod:`refimpl.sim._aot_build`), which a process
loads with ``ctypes`` in about 2 ms, importing neither numba nor llvmlite.

- **The same code.** The shared object is compiled from the LLVM IR numba produced for the kernel
  (the same optimised module, callees linked in), with numba's CPU name, CPU features and
  optimisation level; only the relocation model differs (position-independent, as a shared object
  needs). The agreement tests check its traces against the reference engine's bit for bit.
- **The same key.** An entry is named after :func:`~refimpl.sim._compiled_cache.closure_stamp` (every
  file whose code the kernel holds, and the numba, numpy and Python versions), the arrays' types
  and this machine's CPU (:func:`cpu_fingerprint`): a change to any of them builds a new entry.
- **Built on first use**, in a child process (numba compiles the kernel from source there, in an
  empty cache of its own, so that every callee's IR is at hand), where this process would compile
  the kernel anyway (numba's cache lacks it) or where the caller asks for it (:data:`BUILD_WHEN_CACHED`:
  ``refimpl simulate`` does, since a command's fresh process is where numba's import costs). The
  command also takes the compiled kernels of runs from :data:`COMMAND_BUILD_ROLLOUTS` rollouts
  where nothing is built or cached yet (:func:`command_builds`), and says on standard error that
  it is compiling.
- **Otherwise numba's JIT**, as before: where no C compiler is found, where the build or the load
  fails, for arrays of other types or layouts, or with ``REFIMPL_AOT=0`` (or numba's
  ``NUMBA_DISABLE_JIT=1``: the kernels as plain Python) in the environment.
  :data:`PATHS` records which path each kernel took in this process and :data:`NOTES` why the
  ahead-of-time one was not taken.

The entries live beside numba's: under ``NUMBA_CACHE_DIR/refimpl-aot`` when it is set, else in the
``__pycache__`` beside the kernel's module when it is writable, else in the user's cache directory
(``~/.cache/refimpl/aot``).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import platform
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from types import FunctionType
from typing import Any

import numpy as np

from refimpl.sim._compiled_cache import cached_on_disk, closure_stamp

__all__ = [
    "BUILD_WHEN_CACHED",
    "NOTES",
    "PATHS",
    "Kernel",
    "array_spec",
    "building_when_cached",
    "cpu_fingerprint",
    "kernel_report",
]

#: The types of a kernel's arguments as its signature sees them: for an array (dtype string,
#: dimensions, read-only), for a tuple ``("tuple", (its items' types))``.
Spec = tuple[Any, ...]

#: How each kernel ran in this process, by name: ``"aot"`` (a shared object loaded), ``"aot-built"``
#: (built by this process, then loaded) or ``"jit"`` (numba's dispatcher).
PATHS: dict[str, str] = {}

#: Why a kernel ran on numba's JIT, by name, where the ahead-of-time path was tried and not taken.
NOTES: dict[str, str] = {}

#: Whether a missing entry is built even when numba's cache holds the kernel (a build compiles the
#: kernel from source: about 30 s for the event kernel). ``refimpl simulate`` sets it.
BUILD_WHEN_CACHED: bool = False

#: The environment variable that switches the ahead-of-time path off (``0``).
ENV = "REFIMPL_AOT"

#: Rollouts from which ``refimpl simulate`` runs a mode's compiled kernel even where it is neither
#: built nor in numba's cache, building its entry first: once for the machine (15-60 s), after which
#: every call loads it in milliseconds. Below it, and in the Python API, the reference engines run
#: until a run large enough to repay a compilation within itself (the engines' own thresholds): on
#: a fresh install a command at 10^6 rollouts otherwise ran the reference engines on every call,
#: 4.5 s for partial recompute and 17 s for agent rollouts against 0.2-0.5 s compiled (6 December
#: 2026). At this size the reference engines take about 0.5-2 s.
COMMAND_BUILD_ROLLOUTS = 100_000

_CTYPE_NAMES = {
    "ptr": "c_void_p",
    "i64": "c_int64",
    "i32": "c_int32",
    "i16": "c_int16",
    "i8": "c_int8",
    "double": "c_double",
    "float": "c_float",
}


@contextmanager
def building_when_cached() -> Iterator[None]:
    """Within the block, a missing entry is built even where numba's cache holds the kernel
    (:data:`BUILD_WHEN_CACHED`); the previous setting is restored after it."""
    global BUILD_WHEN_CACHED
    before, BUILD_WHEN_CACHED = BUILD_WHEN_CACHED, True
    PATHS.clear()  # what the block's kernels do, reported apart from earlier calls'
    NOTES.clear()
    try:
        yield
    finally:
        BUILD_WHEN_CACHED = before


def command_builds(rollouts: int) -> bool:
    """Whether a run of ``rollouts`` rollouts should take its compiled kernel and build the
    kernel's entry where it is missing: inside :func:`building_when_cached` (``refimpl simulate``),
    with the ahead-of-time path on, from :data:`COMMAND_BUILD_ROLLOUTS` rollouts.

    Examples
    --------
    >>> command_builds(10**6)  # outside the command
    False
    """
    return BUILD_WHEN_CACHED and enabled() and rollouts >= COMMAND_BUILD_ROLLOUTS


def enabled() -> bool:
    """Whether the ahead-of-time path may be taken: ``REFIMPL_AOT`` is not ``0``, and numba's JIT
    is not switched off (``NUMBA_DISABLE_JIT``: whoever asks for the kernels as plain Python, to
    debug them or to check what they mean, gets them, not machine code built earlier)."""
    jit_off = os.environ.get("NUMBA_DISABLE_JIT", "0").strip() not in ("", "0")
    return os.environ.get(ENV, "1") != "0" and not jit_off


def array_spec(arrays: tuple[Any, ...]) -> Spec | None:
    """The types of a kernel's arguments (C-contiguous arrays, and tuples of them), or ``None``
    where one is anything else (the ahead-of-time entry takes those only; numba's JIT takes the
    call).

    Examples
    --------
    >>> array_spec((np.zeros(3), (np.zeros((2, 2), dtype=np.int32),)))
    (('<f8', 1, False), ('tuple', (('<i4', 2, False),)))
    >>> array_spec((np.zeros((3, 3))[:, 0],)) is None
    True
    """
    spec = tuple(_arg_spec(a) for a in arrays)
    return None if any(s is None for s in spec) else spec


def _arg_spec(a: Any) -> Any:
    if isinstance(a, tuple):
        inner = tuple(_arg_spec(x) for x in a)
        return None if any(s is None for s in inner) else ("tuple", inner)
    if isinstance(a, np.ndarray) and a.flags.c_contiguous:
        return (a.dtype.str, a.ndim, not a.flags.writeable)
    return None


def _flatten(a: Any, flat: list[Any]) -> None:
    """``a``'s fields in numba's native calling convention, appended to ``flat``: an array's
    meminfo, parent, size, item size, data, shape and strides; a tuple's items in order."""
    if isinstance(a, tuple):
        for x in a:
            _flatten(x, flat)
    else:
        flat += (None, None, a.size, a.itemsize, a.ctypes.data, *a.shape, *a.strides)


@cache
def cpu_fingerprint() -> str:
    """A hash of this machine's architecture and CPU (its model and feature flags as Linux lists
    them, and numba's CPU overrides): machine code built for one CPU is not loaded on another."""
    h = hashlib.sha256(platform.machine().encode())
    for var in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES"):
        h.update(os.environ.get(var, "").encode() + b"\0")
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = platform.processor()
    for line in text.partition("\n\n")[0].splitlines():
        if line.startswith(("model name", "flags", "Features", "CPU part", "vendor_id")):
            h.update(line.encode() + b"\n")
    return h.hexdigest()[:16]


def cache_dir(py_func: FunctionType) -> Path:
    """Where the entries of ``py_func``'s kernels live (see the module's docstring)."""
    root = os.environ.get("NUMBA_CACHE_DIR")
    if root:
        return Path(root) / "refimpl-aot"
    module = sys.modules.get(py_func.__module__)
    here = Path(getattr(module, "__file__", "") or ".").resolve().parent
    pycache = here / "__pycache__"
    if os.access(pycache if pycache.is_dir() else here, os.W_OK):
        return pycache
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "refimpl" / "aot"


def entry_path(py_func: FunctionType, spec: Spec, *, stamp: str | None = None) -> Path:
    """The shared object of ``py_func`` compiled for arrays of ``spec`` on this CPU, at its
    :func:`~refimpl.sim._compiled_cache.closure_stamp` (``stamp``, computed when not given; its
    metadata: the same name with ``.json``)."""
    spec_hash = hashlib.sha256(json.dumps(spec).encode()).hexdigest()[:12]
    stamp = (stamp or closure_stamp(py_func))[:32]
    name = f"{py_func.__module__}.{py_func.__qualname__}.{cpu_fingerprint()}.{spec_hash}.{stamp}.so"
    return cache_dir(py_func) / name


class Native:
    """A kernel's shared object, loaded: called with the arrays of its spec, it runs the kernel.

    numba's native calling convention: a status (0, or -2 for a function returning ``None``), a
    pointer for the return value and one for an exception's description, then every array
    flattened into its fields (meminfo, parent, size, item size, data, shape, strides), the
    argument types read off the IR when the entry was built.
    """

    def __init__(self, path: Path, meta: dict[str, Any]) -> None:
        ctypes = importlib.import_module("ctypes")
        self._lib = ctypes.CDLL(str(path))
        fn = self._lib[meta["symbol"]]
        fn.restype = ctypes.c_int32
        fn.argtypes = [getattr(ctypes, _CTYPE_NAMES[t]) for t in meta["argtypes"]]
        self._fn = fn
        self._name = str(meta["name"])
        self._ret = ctypes.create_string_buffer(64)  # a kernel returns None: nothing is written
        self._exc = ctypes.c_void_p()
        self._head = (ctypes.addressof(self._ret), ctypes.addressof(self._exc))

    def __call__(self, *arrays: Any) -> None:
        flat: list[Any] = list(self._head)
        for a in arrays:
            _flatten(a, flat)
        status = self._fn(*flat)
        if status not in (0, -2):
            raise RuntimeError(
                f"the ahead-of-time kernel {self._name} stopped with numba's status {status}; "
                f"run it on numba's JIT ({ENV}=0 in the environment) to see its exception"
            )


def load(path: Path) -> Native:
    """The entry at ``path`` (its metadata beside it), loaded."""
    meta = json.loads(path.with_suffix(".json").read_text())
    return Native(path, meta)


def _compiler() -> str | None:
    """The C compiler that links an entry (``CC``, else ``cc``), or ``None`` where there is none."""
    import shutil  # loaded for a build only

    return shutil.which(os.environ.get("CC") or "cc")


def build(factory: str, spec: Spec, path: Path, *, stamp: str) -> str | None:
    """Build the entry at ``path`` in a child process; ``None``, or why it was not built.

    ``factory`` (``"module:function"``) returns the kernel's numba dispatcher; the child compiles
    it for ``spec`` in an empty numba cache of its own and links it (:mod:`refimpl.sim._aot_build`).
    """
    import subprocess  # a build's tools, loaded for a build only
    import tempfile

    cc = _compiler()
    if cc is None:
        return "no C compiler to link it (set CC, or install cc)"
    path.parent.mkdir(parents=True, exist_ok=True)
    with _one_builder(path):
        if path.exists():  # built by another process while this one waited
            return None
        with tempfile.TemporaryDirectory(prefix="refimpl-aot-") as tmp:
            env = dict(os.environ, NUMBA_CACHE_DIR=tmp, CC=cc)
            cmd = [sys.executable, "-m", "refimpl.sim._aot_build", factory, json.dumps(spec)]
            cmd += [str(path), stamp]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not path.exists():
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return f"the build failed ({last})"
    return None


@contextmanager
def _one_builder(path: Path) -> Iterator[None]:
    """Held while the entry at ``path`` is built, so that processes needing one missing entry at
    once (two test workers, two commands) compile it once: the others wait, then load it. Where
    ``fcntl`` is missing, each builds its own copy (an entry is renamed into place whole, so
    either copy is right)."""
    try:
        import fcntl  # POSIX only; loaded for a build only
    except ImportError:
        yield
        return
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


_ANNOUNCED: list[str] = []  # the kernel whose build the command announced (one a process)


def _announce_build(name: str) -> None:
    """Say on standard error, once a process, why the command waits: it compiles its kernels."""
    if not _ANNOUNCED:
        _ANNOUNCED.append(name)
        print(
            f"refimpl simulate: compiling this mode's kernels ({name}, ...) for this machine, "
            "once (15-60 s); later calls load them",
            file=sys.stderr,
            flush=True,
        )


class Kernel:
    """A kernel that runs from its ahead-of-time entry where it can, and on numba's JIT otherwise.

    ``py_func`` is the kernel's Python function (its name, module and closure key the entry),
    ``factory`` (``"module:function"``) a function that returns its numba dispatcher (called in
    the child that builds an entry), and ``jit`` the same in this process (called only when the
    JIT runs the kernel, which is when numba is imported).
    """

    def __init__(self, py_func: Callable[..., Any], factory: str, jit: Callable[[], Any]) -> None:
        if not isinstance(py_func, FunctionType):
            raise TypeError(f"py_func must be a Python function; got {py_func!r}")
        self.py_func = py_func
        self._factory = factory
        self._jit = jit
        self._natives: dict[Spec, Native | None] = {}
        self._notes: dict[Spec, str] = {}  # why an entry was not built or loaded
        self._unbuilt: set[Spec] = set()  # not built: numba's cache held the kernel
        self._stamp: str | None = None
        self._seen_ready = False  # an entry was found: it stays for this process's stamp
        self.name = f"{py_func.__module__}.{py_func.__qualname__}"

    def stamp(self) -> str:
        """The kernel's :func:`~refimpl.sim._compiled_cache.closure_stamp`, computed once per
        process (as numba's cache computes its own once per kernel)."""
        if self._stamp is None:
            self._stamp = closure_stamp(self.py_func)
        return self._stamp

    def __call__(self, *arrays: Any) -> None:
        spec = array_spec(arrays)
        native = self._native(spec) if spec is not None else None
        if native is None:
            PATHS[self.name] = "jit"
            if spec in self._notes:
                NOTES[self.name] = self._notes[spec]
            self._jit()(*arrays)
        else:
            PATHS.setdefault(self.name, "aot")
            native(*arrays)

    def _native(self, spec: Spec) -> Native | None:
        if spec not in self._natives or (BUILD_WHEN_CACHED and spec in self._unbuilt):
            self._unbuilt.discard(spec)
            self._natives[spec] = self._find(spec)
        return self._natives[spec]

    def _find(self, spec: Spec) -> Native | None:
        """The entry for ``spec``: loaded, or built first where this process would compile the
        kernel anyway or is asked to (:data:`BUILD_WHEN_CACHED`); ``None``: the JIT runs it."""
        if not enabled():
            return None
        path = entry_path(self.py_func, spec, stamp=self.stamp())
        built = False
        if not path.exists():
            if not (BUILD_WHEN_CACHED or not self._jit_cached()):
                self._unbuilt.add(spec)  # built when a caller asks for it
                return None
            if BUILD_WHEN_CACHED:
                _announce_build(self.name)
            why = build(self._factory, spec, path, stamp=self.stamp())
            if why is not None:
                self._notes[spec] = why
                return None
            built = True
        try:
            native = load(path)
        except (OSError, ValueError, KeyError, AttributeError) as err:
            self._notes[spec] = f"its entry {path.name} did not load ({err})"
            return None
        if built:
            PATHS[self.name] = "aot-built"
        return native

    def _jit_cached(self) -> bool:
        """Whether numba's JIT would run the kernel without compiling it (imports numba)."""
        dispatcher = self._jit()
        if getattr(dispatcher, "signatures", None):
            return True
        return cached_on_disk(dispatcher)

    def ready(self) -> bool:
        """Whether an entry of this kernel, for any arrays, is built for its current closure.

        Asked before every run of ``simulate(engine="auto")``: scanning the directory for the
        three ordering kernels took 0.35 of the 0.86 ms of a 20-step plain run. So once an entry
        is found the answer is kept (a process's stamp does not change); a missing one is looked
        for again each time (another process may build it)."""
        if not enabled():
            return False
        if not self._seen_ready:
            probe = entry_path(self.py_func, (), stamp=self.stamp())
            stem = probe.name.split(".")
            pattern = ".".join([*stem[:-3], "*", stem[-2], "so"])
            self._seen_ready = any(probe.parent.glob(pattern))
        return self._seen_ready


def kernel_report() -> dict[str, str | None]:
    """What ``refimpl simulate`` reports of its kernels: ``kernel_path``, the path they ran by
    (``"aot"``, ``"aot-built"`` where this process built an entry first, ``"jit"`` where any ran
    on numba's JIT, ``None`` where no kernel ran), and ``kernel_note``, why the ahead-of-time path
    was not taken (``None`` where it was, or was not tried).

    Examples
    --------
    >>> PATHS.clear(); NOTES.clear()
    >>> kernel_report()
    {'kernel_path': None, 'kernel_note': None}
    """
    paths = set(PATHS.values())
    path = next((p for p in ("jit", "aot-built", "aot") if p in paths), None)
    note = "; ".join(f"{name}: {why}" for name, why in sorted(NOTES.items())) or None
    return {"kernel_path": path, "kernel_note": note}
