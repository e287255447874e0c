"""Pinned behaviours of the ``refimpl`` command's wiring (refimpl/cli.py) that a mutation run
(``tools/mutate.py refimpl/cli.py --sample 0`` with the fast CLI tests) found no fast test holding:
each test names the mutants it was seen to fail on. The subcommand is a stand-in module, so that
each path (a missing extra, a missing core package, Ctrl-C) is taken on purpose, in-process."""

from __future__ import annotations

import argparse
import signal
import sys
import types
from collections.abc import Callable, Iterator

import pytest

from refimpl import cli


@pytest.fixture
def command(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[BaseException], None]]:
    """``refimpl simulate`` wired to a stand-in whose ``run`` raises the given exception."""

    def plant(error: BaseException) -> None:
        def run(args: argparse.Namespace) -> int:
            raise error

        module = types.ModuleType("refimpl_stand_in_command")
        module.configure = lambda parser: None  # type: ignore[attr-defined]
        module.run = run  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, module.__name__, module)
        monkeypatch.setitem(
            cli.COMMANDS, "simulate", cli._Command(module.__name__, "stand-in", "sim")
        )

    before = signal.getsignal(signal.SIGINT)
    yield plant
    signal.signal(signal.SIGINT, before)


def test_a_missing_extra_is_one_line_naming_the_package_and_the_extra(
    command: Callable[[BaseException], None], capsys: pytest.CaptureFixture[str]
) -> None:
    # mutants: `exc.name or ""` made `and` (root ""), `.split(".")[0]` made [1] or [-1] ("auto"),
    # `root not in _OPTIONAL` negated (None for tqdm), `command in COMMANDS` negated (extra
    # "all"), the exit code 2 made 1 or 3
    command(ModuleNotFoundError("No module named 'tqdm.auto'", name="tqdm.auto"))
    assert cli.main(["simulate"]) == 2
    assert capsys.readouterr().err == (
        "refimpl simulate: needs tqdm, which is not installed (the light install leaves it out): "
        "pip install 'refimpl[sim]'\n"
    )


def test_a_missing_core_package_is_not_explained_as_an_extra(
    command: Callable[[BaseException], None],
) -> None:
    # mutants: `message is None` negated (the message None printed, exit 2) and the `raise`
    # removed: a missing numpy is a broken install, not an extra, and keeps its traceback
    command(ModuleNotFoundError("No module named 'numpy'", name="numpy"))
    with pytest.raises(ModuleNotFoundError, match="numpy"):
        cli.main(["simulate"])
    assert cli._missing_extra("refimpl simulate", ModuleNotFoundError(name=None)) is None


def test_ctrl_c_ignores_a_second_one_only_when_the_command_line_is_ending(
    command: Callable[[BaseException], None],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # mutants: `argv is None and _in_main_thread()` made `or`, negated, or `argv is not None`,
    # and `_in_main_thread` negated: only the real command line (argv None, the main thread)
    # stops a second Ctrl-C from turning the clean exit into a traceback
    command(KeyboardInterrupt())
    signal.signal(signal.SIGINT, signal.default_int_handler)
    assert cli.main(["simulate"]) == 130  # called with arguments: a library call, left alone
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    monkeypatch.setattr(sys, "argv", ["refimpl", "simulate"])
    assert cli.main() == 130
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert capsys.readouterr().err == "refimpl simulate: interrupted\n" * 2
