"""Helpers for tests that start processes."""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """Run in the child before exec: SIGINT handled by default, as under a terminal.

    A shell that starts a job in the background (``&`` or ``nohup`` without job control) leaves
    SIGINT ignored, an ignored signal stays ignored across ``exec``, and Python then never raises
    ``KeyboardInterrupt``: the test would depend on how its runner was started.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
