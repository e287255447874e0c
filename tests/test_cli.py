"""The ``refimpl`` command's own behaviour (each subcommand is tested beside its module)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from refimpl.cli import COMMANDS, main


def test_every_subcommand_is_listed_in_the_help() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "refimpl", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for name in COMMANDS:
        assert name in out


@pytest.mark.parametrize(
    "argv",
    [
        # one short line at the very end: the first and only write meets the closed pipe
        ["simulate", "--slots", "8", "--batch", "16", "--rollouts", "2000", "--json"],
        # the human-readable summary: several lines
        ["simulate", "--slots", "8", "--batch", "16", "--rollouts", "2000"],
    ],
    ids=["json", "text"],
)
def test_a_closed_pipe_ends_quietly_without_a_traceback(argv: list[str]) -> None:
    # `refimpl simulate ... | head -c 0`: the reader is gone. The read end is closed before the
    # child starts, so its first write fails with EPIPE whatever the scheduler does; a reader that
    # closes "soon" instead races with a write that fits in the pipe buffer.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "refimpl", *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    finally:
        os.close(write_end)
    assert "Traceback" not in done.stderr, done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr  # a failed flush at exit
    assert done.returncode == 128 + signal.SIGPIPE, (done.returncode, done.stderr)


def test_unknown_subcommand_exits_2_with_the_choices() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "refimpl", "simulat"], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "simulate" in done.stderr


def test_main_returns_the_subcommand_exit_code() -> None:
    assert main(["simulate", "--slots", "4", "--batch", "8", "--rollouts", "64"]) == 0
