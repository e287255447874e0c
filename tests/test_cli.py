"""The ``refimpl`` command's own behaviour (each subcommand is tested beside its module)."""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import signal
import subprocess
import sys
import types
from pathlib import Path
from typing import NoReturn

import pytest
from _processes import default_sigint

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


# --- Ctrl-C at any moment ------------------------------------------------------------------------


def _interrupt(*args: object, **kwargs: object) -> NoReturn:
    raise KeyboardInterrupt


@pytest.mark.parametrize("phase", ["parse", "configure", "import", "run"])
def test_ctrl_c_in_any_phase_of_a_command_prints_one_line_and_exits_130(
    phase: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import refimpl.testing.check_cli as check_cli

    if phase == "parse":
        monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", _interrupt)
    elif phase == "configure":
        monkeypatch.setattr(check_cli, "configure", _interrupt)
    elif phase == "run":
        monkeypatch.setattr(check_cli, "run", _interrupt)
    else:  # the subcommand's module is imported after the arguments are parsed
        real = importlib.import_module
        calls = []

        def import_module(name: str, package: str | None = None) -> types.ModuleType:
            calls.append(name)
            if name == COMMANDS["check"].module and calls.count(name) == 2:
                raise KeyboardInterrupt
            return real(name, package)

        monkeypatch.setattr(importlib, "import_module", import_module)
    try:
        code = main(["check", "t.csv", "--spec", "tis", "--param", "cap=2"])
    except KeyboardInterrupt:
        pytest.fail(f"a Ctrl-C while the command was in its {phase} phase escaped main()")
    assert code == 128 + signal.SIGINT
    assert capsys.readouterr() == ("", "refimpl check: interrupted\n")


def test_importing_the_command_loads_no_numerical_library() -> None:
    # Whatever `refimpl.cli` imports runs before main() can catch a Ctrl-C; numpy and scipy took
    # seconds on a loaded machine, a window in which Ctrl-C printed a 40-line traceback.
    code = (
        "import sys, refimpl.cli; print(sorted({'numpy', 'scipy', 'pyarrow'} & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


# Installed with PYTHONPATH in the child: the first import of numpy (inside main(), while the
# subcommand's options are configured) signals readiness on one pipe and blocks reading another,
# until the test's SIGINT interrupts the read; no sleep decides where the child is.
_HOLD_NUMPY = """
import os, sys

class _HoldNumpy:
    def find_spec(self, name, path=None, target=None):
        if name == "numpy":
            sys.meta_path.remove(self)
            os.write(int(os.environ["REFIMPL_TEST_READY_FD"]), b"r")
            os.read(int(os.environ["REFIMPL_TEST_HOLD_FD"]), 1)
        return None

sys.meta_path.insert(0, _HoldNumpy())
"""


def _console_script() -> list[str]:
    script = Path(sys.executable).with_name("refimpl")
    found = str(script) if script.exists() else shutil.which("refimpl")
    if found is None:
        pytest.fail("the refimpl console script is not installed: pip install -e .")
    return [found]


@pytest.mark.parametrize("launcher", ["python -m refimpl", "console script"])
def test_sigint_while_the_command_imports_prints_one_line_and_exits_130(
    launcher: str, tmp_path: Path
) -> None:
    (tmp_path / "sitecustomize.py").write_text(_HOLD_NUMPY)
    command = [sys.executable, "-m", "refimpl"] if launcher.startswith("python") else []
    command = command or _console_script()
    ready_r, ready_w = os.pipe()
    hold_r, hold_w = os.pipe()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path]),
        "REFIMPL_TEST_READY_FD": str(ready_w),
        "REFIMPL_TEST_HOLD_FD": str(hold_r),
    }
    proc = subprocess.Popen(
        [*command, "check", str(tmp_path / "t.csv"), "--spec", "tis", "--param", "cap=2"],
        env=env,
        pass_fds=(ready_w, hold_r),
        preexec_fn=default_sigint,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(ready_w)
    os.close(hold_r)
    try:
        assert os.read(ready_r, 1) == b"r", "the child ended before importing numpy"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)  # a hang guard only
    finally:
        os.close(hold_w)  # releases a child that the signal did not reach
        os.close(ready_r)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (proc.returncode, out, err) == (130, "", "refimpl check: interrupted\n")


@pytest.mark.parametrize("command", ["sweep", "check"])
def test_the_help_of_every_option_says_its_default(command: str) -> None:
    from refimpl.cli import _parser

    subparsers = next(a for a in _parser(command)._actions if isinstance(a.choices, dict))
    assert isinstance(subparsers.choices, dict)
    sub = subparsers.choices[command]
    for action in sub._actions:
        if (
            not action.option_strings
            or action.help == argparse.SUPPRESS
            or "-h" in action.option_strings
        ):
            continue
        text = action.help or ""
        assert action.required or "default" in text, (action.option_strings, text)


@pytest.mark.parametrize(
    ("argv", "prog", "says"),
    [
        (["simulate", "--slots", "abc"], "refimpl simulate", "invalid int value: 'abc'"),
        (["simulate", "--bogus"], "refimpl simulate", "unrecognized arguments: --bogus"),
        (["check", "--spec"], "refimpl check", "expected one argument"),
        (["check", "t.csv", "--spec", "tis", "u.csv"], "refimpl check", "unrecognized arguments"),
        (["sweep", "g.toml", "--workers", "a"], "refimpl sweep", "invalid int value: 'a'"),
        (["lab", "--nope"], "refimpl lab", "unrecognized arguments: --nope"),
        (["simulat"], "refimpl", "invalid choice: 'simulat'"),
        ([], "refimpl", "the following arguments are required: COMMAND"),
    ],
)
def test_a_usage_error_is_a_short_usage_line_and_the_error(
    argv: list[str], prog: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # argparse printed the whole usage block (35 lines for simulate) before the one useful line.
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"usage: {prog} "), lines
    assert f"({prog} --help lists them)" in lines[0], lines
    assert lines[1].startswith(f"{prog}: error: "), lines
    assert says in lines[1], lines


def _console_run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )


def test_the_console_command_flushes_runs_atexit_and_keeps_the_exit_status() -> None:
    # The fast exit skips the interpreter's teardown, not what a command left to do: the buffered
    # output, the atexit handlers and the status all arrive (the wrong variant, a bare os._exit,
    # loses the unflushed line and the handler's output).
    result = _console_run(
        "import atexit, sys\n"
        "from refimpl import cli\n"
        "atexit.register(lambda: print('atexit ran'))\n"
        "def fake() -> int:\n"
        "    sys.stdout.write('buffered, no newline')\n"
        "    return 4\n"
        "cli.main = fake\n"
        "cli.console()\n"
    )
    assert result.returncode == 4
    assert result.stdout == "buffered, no newlineatexit ran\n"


def test_the_console_command_waits_for_a_thread_the_command_left_running() -> None:
    result = _console_run(
        "import threading, time\n"
        "from refimpl import cli\n"
        "def work() -> None:\n"
        "    time.sleep(0.2)\n"
        "    print('thread finished', flush=True)\n"
        "def fake() -> int:\n"
        "    threading.Thread(target=work).start()\n"
        "    return 0\n"
        "cli.main = fake\n"
        "cli.console()\n"
    )
    assert (result.returncode, result.stdout) == (0, "thread finished\n")


def _blas_threads_seen(before: str = "") -> str:
    """What the command's process leaves in ``OPENBLAS_NUM_THREADS`` by the time its command runs
    (``-`` where it is unset), with ``before`` run first in that process."""
    result = _console_run(
        "import os, sys\n"
        f"{before}\n"
        "import refimpl.cli as cli\n"  # as the console script imports it: numpy not yet loaded
        "cli.main = lambda: print(os.environ.get(cli.BLAS_THREADS_VARIABLE, '-')) or 0\n"
        "cli.console()\n"
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_the_console_command_asks_for_one_blas_thread_before_numpy_is_imported() -> None:
    env_unset = "os.environ.pop('OPENBLAS_NUM_THREADS', None)"
    assert _blas_threads_seen(env_unset) == "1"
    # the user's choice stands, and a numpy imported before (its threads started) is left alone
    assert _blas_threads_seen("os.environ['OPENBLAS_NUM_THREADS'] = '3'") == "3"
    assert _blas_threads_seen(f"{env_unset}; import numpy") == "-"


def test_version_is_printed_to_standard_output() -> None:
    result = _console_run(
        "import sys; sys.argv = ['refimpl', '--version']\nfrom refimpl import cli\ncli.console()"
    )
    assert result.returncode == 0
    assert result.stdout.startswith("refimpl ")
    assert result.stderr == ""
