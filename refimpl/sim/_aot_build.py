"""Build a kernel's ahead-of-time entry (:mod:`refimpl.sim._aot`): run as a child process,
``python -m refimpl.sim._aot_build FACTORY ARRAYS PATH STAMP``.

numba compiles the kernel for the arrays ``ARRAYS`` describes (dtypes, dimensions, layouts), in
the empty cache the parent gives this process, so that the final module holds every callee's IR,
not object code read back from a cache.
Its final LLVM module, without numba's CPython and cfunc wrappers (the only code that calls into
Python or numba's helpers), is compiled to a position-independent object with the target numba
itself uses (CPU name, features, optimisation level) and linked into a shared object with the C
compiler (``CC``), refusing undefined symbols beyond the C and maths libraries. The entry and its
metadata are written beside each other and moved into place last, so that a reader never sees
half of one; the same kernel's entries under older stamps are removed.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from refimpl.sim._aot import _CTYPE_NAMES, Spec
from refimpl.sim._compiled_cache import load_numba

__all__ = ["build_entry", "without_wrappers"]


def without_wrappers(ir: str) -> str:
    """``ir`` without the definitions of numba's CPython and cfunc wrappers of its functions.

    Examples
    --------
    >>> ir = "define i32 @f() {\\n  ret i32 0\\n}\\ndefine ptr @cfunc.f() {\\n  ret ptr null\\n}\\n"
    >>> print(without_wrappers(ir), end="")
    define i32 @f() {
      ret i32 0
    }
    """
    out, skipping = [], False
    for line in ir.splitlines(keepends=True):
        if line.startswith("define") and ("@_ZN7cpython" in line or "@cfunc." in line):
            skipping = True
        if not skipping:
            out.append(line)
        elif line.startswith("}"):
            skipping = False
    return "".join(out)


def _example(spec: Any) -> Any:
    """An argument of type ``spec`` (an empty array, or a tuple of them), for numba's typeof."""
    if spec[0] == "tuple":
        return tuple(_example(s) for s in spec[1])
    dtype, ndim, readonly = spec
    a = np.zeros((0,) * int(ndim), dtype=np.dtype(dtype))
    a.setflags(write=not readonly)
    return a


def _as_spec(item: Any) -> Any:
    """An argument's type read back from JSON (lists become the tuples of :mod:`~refimpl.sim._aot`)."""
    if item[0] == "tuple":
        return ("tuple", tuple(_as_spec(s) for s in item[1]))
    return (str(item[0]), int(item[1]), bool(item[2]))


def build_entry(factory: str, spec: Spec, path: Path, stamp: str) -> None:
    """Compile the dispatcher ``factory`` returns for ``spec`` and write its entry at ``path``."""
    numba = load_numba()
    ll = importlib.import_module("llvmlite.binding")
    module, _, name = factory.partition(":")
    dispatcher = getattr(importlib.import_module(module), name)()
    sig = tuple(numba.typeof(_example(s)) for s in spec)
    dispatcher.compile(sig)
    cres = dispatcher.overloads[sig]
    if cres.signature.return_type != numba.types.none:
        raise TypeError(f"{factory} returns {cres.signature.return_type}; a kernel returns None")
    llmod = ll.parse_assembly(without_wrappers(cres.library.get_llvm_str()))
    llmod.verify()
    symbol = cres.fndesc.mangled_name
    argtypes = [str(a.type) for a in llmod.get_function(symbol).arguments]
    unknown = sorted(set(argtypes) - set(_CTYPE_NAMES))
    if unknown:
        raise TypeError(f"{factory}: arguments of LLVM types {unknown} have no ctypes type here")
    codegen = cres.library.codegen
    tm = ll.Target.from_triple(ll.get_process_triple()).create_target_machine(
        cpu=codegen._get_host_cpu_name(),
        features=codegen._tm_features,
        opt=numba.core.config.OPT,
        reloc="pic",
        codemodel="default",
    )
    meta = {"name": f"{module}:{name}", "symbol": symbol, "argtypes": argtypes, "stamp": stamp}
    meta["spec"] = spec
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".build-") as tmp:
        obj, so = Path(tmp) / "kernel.o", Path(tmp) / "kernel.so"
        obj.write_bytes(tm.emit_object(llmod))
        cc = os.environ.get("CC") or "cc"
        link = [cc, "-shared", "-Wl,-z,defs", "-o", str(so), str(obj), "-lm"]
        subprocess.run(link, check=True, capture_output=True)
        (Path(tmp) / "kernel.json").write_text(json.dumps(meta))
        os.replace(Path(tmp) / "kernel.json", path.with_suffix(".json"))
        os.replace(so, path)  # last: an entry exists only with its metadata
    _remove_stale(path)


def _remove_stale(path: Path) -> None:
    """Remove the entries of the same kernel, arrays and CPU under other stamps than ``path``'s
    (built before a file the kernel holds changed: never loaded again)."""
    prefix = path.name.rsplit(".", 2)[0]  # module.function.cpu.arrays, then stamp.so
    for old in path.parent.glob(f"{prefix}.*"):
        if old.name.rsplit(".", 2)[0] == prefix and old.stem != path.stem:
            old.unlink(missing_ok=True)


def main(argv: list[str]) -> int:
    factory, spec_json, path, stamp = argv
    spec: Spec = tuple(_as_spec(item) for item in json.loads(spec_json))
    build_entry(factory, spec, Path(path), stamp)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
