"""The ``refimpl`` command: wires subcommands to the modules that implement them.

Each subcommand lives in the module that owns it and exposes two functions::

    def configure(parser: argparse.ArgumentParser) -> None: ...   # add its options
    def run(args: argparse.Namespace) -> int: ...                  # do the work, return exit code

Only the chosen subcommand's module is imported, so ``refimpl --help`` and ``refimpl check`` stay fast.

Exit codes shared by every subcommand: **2** for a usage error (argparse) and for an error of the
operating system that the subcommand did not handle (one line naming the path and the cause:
permission denied, a directory, a symlink loop, a full disk), **130** (128 + SIGINT)
after Ctrl-C, which prints one line ``refimpl COMMAND: interrupted`` whether it comes while the
arguments are parsed, while the subcommand's modules load or while it runs, and **141**
(128 + SIGPIPE) when the reader of standard output goes away. This module and the package root import
only the standard library (numpy, scipy, pyarrow load inside :func:`main`), so the only moment a
Ctrl-C still ends with Python's own ``KeyboardInterrupt`` message is the interpreter's start-up, the
few milliseconds before :func:`main` is entered.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import errno
import importlib
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import NamedTuple, NoReturn

from refimpl import _process

__all__ = ["console", "full_parser", "main"]


class _Command(NamedTuple):
    module: str
    summary: str
    extra: str  # the optional dependencies it needs: pip install 'refimpl[EXTRA]'


COMMANDS: dict[str, _Command] = {
    "lab": _Command(
        "refimpl.lab.cli", "run the whole lab and write a report (the main job)", "lab"
    ),
    "simulate": _Command("refimpl.sim.cli", "simulate the asynchronous rollout queue", "sim"),
    "check": _Command(
        "refimpl.testing.check_cli", "check a logged trace against the reference", "trace"
    ),
    "sweep": _Command(
        "refimpl.sweep.cli", "run a parameter sweep on a local pool or Dask", "sweep"
    ),
    "conformance": _Command(
        "refimpl.frameworks.cli",
        "rerun the conformance matrix on the installed frameworks and print what changed",
        "all",  # needs no extra of refimpl: torch and the frameworks, which it names itself
    ),
}

#: Packages of the extras (pyproject's optional-dependencies), by import name.
_OPTIONAL = frozenset({"matplotlib", "pyarrow", "tqdm", "dask", "distributed", "pandas"})


def _missing_extra(name: str, exc: ModuleNotFoundError) -> str | None:
    """The one-line message for a command whose optional dependency is not installed."""
    root = (exc.name or "").split(".")[0]
    if root not in _OPTIONAL:
        return None
    command = name.removeprefix("refimpl ")
    extra = COMMANDS[command].extra if command in COMMANDS else "all"
    return (
        f"{name}: needs {root}, which is not installed (the light install leaves it out): "
        f"pip install 'refimpl[{extra}]'"
    )


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are two lines: a short usage and the error itself.

    argparse prints the whole usage block before the one useful line (35 lines for ``simulate``);
    the full list of options is what ``--help`` is for.
    """

    def error(self, message: str) -> NoReturn:
        what = "COMMAND [options]" if self.prog == "refimpl" else "[options]"
        self.exit(2, f"usage: {self.prog} {what}   ({self.prog} --help lists them)\n"
                     f"{self.prog}: error: {message}\n")  # fmt: skip


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    chosen: argparse.ArgumentParser = sub.choices[name]
    return chosen


def _parser(chosen: str | None) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="refimpl",
        description="Reference functions, simulator and lab for asynchronous RL of language models.",
    )
    parser.add_argument("--version", action=_Version, help="show the version and exit")
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=_Parser
    )
    for name, command in COMMANDS.items():
        p = sub.add_parser(name, help=command.summary, description=command.summary)
        if name == chosen:
            importlib.import_module(command.module).configure(p)
    return parser


def full_parser() -> argparse.ArgumentParser:
    """The ``refimpl`` parser with the options of every subcommand (the CLI reference's source).

    The command itself configures only the chosen subcommand, which keeps ``refimpl check`` fast;
    this imports every subcommand's module.

    Examples
    --------
    >>> sub = next(a for a in full_parser()._actions if isinstance(a, argparse._SubParsersAction))
    >>> "--quick" in sub.choices["lab"].format_help()
    True
    """
    parser = _parser(None)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, subparser in action.choices.items():
                importlib.import_module(COMMANDS[name].module).configure(subparser)
    return parser


class _Version(argparse.Action):
    """``--version``: the installed distribution's version, looked up only when asked for.

    argparse's own ``version`` action takes the string when the parser is built, and reading the
    installed distributions costs every command a tenth of a second or more.
    """

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:  # fmt: skip
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:  # fmt: skip
        print(_version())  # to standard output, as argparse's own version action does
        parser.exit()


def _version() -> str:
    from importlib.metadata import version

    return f"refimpl {version('refimpl')}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``refimpl`` command line; return the exit code.

    Examples
    --------
    >>> sorted(COMMANDS)
    ['check', 'conformance', 'lab', 'simulate', 'sweep']
    """
    args_list = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in args_list if not a.startswith("-")), None)
    name = f"refimpl {chosen}" if chosen in COMMANDS else "refimpl"
    try:
        parser = _parser(chosen if chosen in COMMANDS else None)
        args, extra = parser.parse_known_args(args_list)
        if extra:  # said by the subcommand (its usage), not by the root parser
            _subparser(parser, args.command).error(f"unrecognized arguments: {' '.join(extra)}")
        module = importlib.import_module(COMMANDS[args.command].module)
        code: int = module.run(args)
        sys.stdout.flush()
    except ModuleNotFoundError as exc:
        message = _missing_extra(name, exc)
        if message is None:
            raise
        print(message, file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`refimpl simulate --json | head`): end quietly, as `cat` does.
        # Point stdout at devnull so that the interpreter's final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except OSError as exc:
        # The system said no (permission denied, a directory, a symlink loop, a full disk, an
        # I/O error): one line naming the path and the cause, never a traceback.
        print(f"{name}: {_os_error_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if argv is None and _in_main_thread():
            # The command line is ending: a second Ctrl-C must not turn this into a traceback.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        print(f"{name}: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    return code


#: The variable numpy's bundled OpenBLAS reads, once, when numpy is imported.
BLAS_THREADS_VARIABLE = "OPENBLAS_NUM_THREADS"


def one_blas_thread() -> None:
    """Set ``OPENBLAS_NUM_THREADS=1`` for this process and its children, unless the user set it
    or numpy is imported already (its BLAS then has its threads).

    No command does linear algebra larger than a vector's norm, yet numpy's OpenBLAS starts a
    thread per core at import, and on two cores those threads spin on the CPU the command's own
    second thread uses: a fresh ``refimpl simulate`` at 10^6 rollouts took 0.27 s of CPU time
    with one BLAS thread and 0.37 s with the default, alternating, six calls each (6 December
    2026). One thread also keeps a BLAS sum from depending on the number of cores.
    """
    if "numpy" not in sys.modules:
        os.environ.setdefault(BLAS_THREADS_VARIABLE, "1")


def console() -> NoReturn:
    """The ``refimpl`` console command: :func:`main`, then leave without tearing the interpreter down.

    Once the command has returned, every output is written and closed (files atomically, the
    numba cache at compile time). What is left is the interpreter's finalisation, which after a
    simulation frees numba's and LLVM's objects one by one: 0.2–0.85 s measured, more than the
    rest of a small run. So the streams are flushed, the ``atexit`` handlers run (temporary
    directories, logging), and the process exits at once. Only when another non-daemon thread is
    still alive does it exit the ordinary way, which waits for that thread.

    Before anything imports numpy, the process asks for one BLAS thread (:func:`one_blas_thread`).
    """
    _process.claim()  # its process-wide settings (the allocators of `refimpl check`) are its own
    one_blas_thread()
    code = main()
    if threading.active_count() > 1:
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed or broken: nothing more to say
            stream.flush()
    atexit._run_exitfuncs()
    os._exit(code)


def _stdout_broken() -> bool:
    """Whether standard output refuses its buffer (``> /dev/full``, a failing disk).

    When it does, stdout is pointed at devnull, so that the interpreter's last flush does not fail
    again with an "Exception ignored" message after the one line.
    """
    try:
        sys.stdout.flush()
    except OSError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return True
    return False


#: Errors of a write; without a file name, the write was to standard output or another stream.
_WRITE_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EIO, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)}
)


def _os_error_line(exc: OSError) -> str:
    """The one line for an OS error (lazy: _io loads numpy, which ``refimpl --help`` does not)."""
    from refimpl._io import describe_os_error

    if exc.filename is None:
        broken = _stdout_broken()
        if broken or exc.errno in _WRITE_ERRNOS:
            where = "standard output" if broken else "the output"
            return describe_os_error(exc, None, action=f"write {where}")
    return describe_os_error(exc)  # the path is the error's own filename


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
