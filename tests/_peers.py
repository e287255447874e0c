"""Where the SimPy peer comes from, for every test that compares with it.

Order: the directory named by ``REFIMPL_PEERS``; the project's peer directory next to the repository
(``shared_candidates``: CI lays it beside the clone, and a git worktree one level deeper finds it one
level up); the copy vendored in ``tests/peers`` (so that a plain clone runs the suite). ``tests/test_peers.py`` checks that the
vendored copy equals the shared one wherever both exist.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

from _scripts import load_script

_HERE = Path(__file__).resolve()
VENDORED = _HERE.parent / "peers" / "simpy_queue.py"


def shared_candidates() -> list[Path]:
    """The places a shared (not vendored) peer may be, in the order they are tried."""
    found = [_HERE.parents[i] / "shared" / "peers" / "simpy_queue.py" for i in (2, 3)]
    env = os.environ.get("REFIMPL_PEERS")
    if env:
        found.insert(0, Path(env) / "simpy_queue.py")
    return found


def peer_path() -> Path:
    """The peer file the tests use: the first shared candidate that exists, else the vendored copy."""
    return next((p for p in shared_candidates() if p.is_file()), VENDORED)


def load_simpy_peer() -> ModuleType:
    """Import the peer module from :func:`peer_path`."""
    path = peer_path()
    if not path.is_file():
        raise FileNotFoundError(
            f"the SimPy peer is missing: looked in {[str(p) for p in shared_candidates()]} and "
            f"{VENDORED}. Restore tests/peers/simpy_queue.py or set REFIMPL_PEERS."
        )
    return load_script("simpy_queue_peer", path)
