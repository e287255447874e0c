"""The ``refimpl`` command's own behaviour (each subcommand is tested beside its module)."""

from __future__ import annotations

import subprocess
import sys

from refimpl.cli import COMMANDS, main


def test_every_subcommand_is_listed_in_the_help() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "refimpl", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for name in COMMANDS:
        assert name in out


def test_a_closed_pipe_ends_quietly_without_a_traceback() -> None:
    # `refimpl simulate ... | head -c 10`: the reader goes away while we are still writing.
    script = (
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-m', 'refimpl', 'simulate', '--slots', '8',\n"
        "    '--batch', '16', '--rollouts', '2000', '--json'], stdout=subprocess.PIPE,\n"
        "    stderr=subprocess.PIPE)\n"
        "p.stdout.read(1); p.stdout.close()\n"
        "err = p.stderr.read().decode(); p.wait()\n"
        "print(p.returncode); print(err)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    code, _, err = done.stdout.partition("\n")
    assert "Traceback" not in err, err
    assert code.strip() == "141", done.stdout  # 128 + SIGPIPE, as a shell reports it


def test_unknown_subcommand_exits_2_with_the_choices() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "refimpl", "simulat"], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "simulate" in done.stderr


def test_main_returns_the_subcommand_exit_code() -> None:
    assert main(["simulate", "--slots", "4", "--batch", "8", "--rollouts", "64"]) == 0
