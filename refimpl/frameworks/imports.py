"""``python -m refimpl.frameworks.imports``: import every function the shipped adapters test.

The framework stage of CI runs it first, so that a framework which fails to import stops the stage
with the module that failed, before any test runs. It prints each framework's installed version.
"""

from __future__ import annotations

import sys
import warnings

__all__ = ["main"]


def main() -> int:
    """Import each adapter's function; print the versions; return 1 on the first failure."""
    from refimpl.frameworks import TESTED_VERSIONS, adapters, installed_version, load_function

    for name, (dist, tested) in TESTED_VERSIONS.items():
        version = installed_version(name)
        if version is None:
            print(f"{name}: {dist} is not installed (tested: {tested})", file=sys.stderr)
            return 1
        mark = "" if version == tested else f"  (tested: {tested})"
        print(f"{name} {version}{mark}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the frameworks' own import-time warnings are theirs
        for function in dict.fromkeys(a.function for a in adapters()):
            try:
                load_function(function)
            except Exception as exc:
                print(f"cannot import {function}: {type(exc).__name__}: {exc}", file=sys.stderr)
                return 1
            print(f"  ok {function}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
