"""Run a script in a fresh interpreter beside a throwaway package of numba kernels."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_fresh(root: Path, script: str, *, timeout: float, **env: str) -> str:
    """``script``'s standard output, run in a fresh interpreter with ``root`` (the package) on its
    path and a numba cache of its own under it; no bytecode, since a file rewritten within the
    same second must be read again. ``env`` adds or overrides environment variables."""
    full = {
        **os.environ,
        "NUMBA_CACHE_DIR": str(root / "cache"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
        **env,
    }
    done = subprocess.run(
        [sys.executable, "-c", script], env=full, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()
