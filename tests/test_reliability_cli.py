"""The ``refimpl`` command when the operating system says no: one line, exit status 2.

A subcommand that meets an error of the operating system it does not handle itself (permission
denied, a directory where a file was expected, a symlink loop, a name too long, a full disk, an I/O
error) must not end in a traceback: :func:`refimpl.cli.main` prints one line naming the path and
the real cause and returns 2. The errors are real where the system can produce them here (a symlink
loop, a directory, a long name, ``/dev/full``) and injected where it cannot (permission denied as
root, an I/O error). The same checks reject a ``main`` without the handler (the wrong variant).
"""

from __future__ import annotations

import errno
import resource
import signal
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path

import pytest
from _wrong_variants import rejects

from refimpl import cli
from refimpl._io import atomic_write
from refimpl.lab import cli as lab_cli

Main = Callable[[list[str]], int]


def _register(monkeypatch: pytest.MonkeyPatch, run: Callable[[], None]) -> None:
    """A subcommand ``refimpl boom`` whose work is ``run``."""
    module = types.ModuleType("_refimpl_test_boom")
    module.configure = lambda parser: None  # type: ignore[attr-defined]

    def run_args(args: object) -> int:
        run()
        return 0

    module.run = run_args  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(cli.COMMANDS, "boom", cli._Command(module.__name__, "test", "all"))


def _raise(code: int, path: str) -> Callable[[], None]:
    def run() -> None:
        raise OSError(code, "injected", path)

    return run


@pytest.fixture
def places(tmp_path: Path) -> dict[str, Path]:
    loop_a, loop_b = tmp_path / "loop_a.csv", tmp_path / "loop_b.csv"
    loop_a.symlink_to(loop_b)
    loop_b.symlink_to(loop_a)
    (tmp_path / "adir").mkdir()
    return {"loop": loop_a, "dir": tmp_path / "adir", "long": tmp_path / ("n" * 300)}


def _calls(action: Callable[[], object]) -> Callable[[], None]:
    def run() -> None:
        action()

    return run


def _too_large(path: Path) -> Callable[[], None]:
    """An atomic write that the OS stops part-way (a file size limit: EFBIG, as a full disk)."""

    def run() -> None:
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, hard))
        try:
            atomic_write(path, "x" * 5000)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
            signal.signal(signal.SIGXFSZ, previous)

    return run


def _cases(places: dict[str, Path]) -> dict[str, tuple[Callable[[], None], str, str]]:
    """name -> (the subcommand's work, words of the cause, what the line must name)."""
    return {
        "symlink loop": (_calls(places["loop"].read_text), "symlink loop", "loop_a.csv"),
        "is a directory": (_calls(places["dir"].read_text), "is a directory", "adir"),
        "name too long": (_calls(lambda: places["long"].write_text("x")), "too long", "nnn"),
        # a write to an open file names no file: the line says so (atomic_write names it)
        "disk full": (_calls(lambda: Path("/dev/full").write_text("x")), "disk full", "output"),
        "file too large": (_too_large(places["dir"] / "r.json"), "file too large", "r.json"),
        "permission denied": (_raise(errno.EACCES, "secret.csv"), "permission denied", "secret"),
        "i/o error": (_raise(errno.EIO, "trace.parquet"), "input/output error", "trace.parquet"),
        "read-only": (_raise(errno.EROFS, "/ro/out.json"), "read-only file system", "/ro/out"),
    }


def check_one_line_exit_2(
    main: Main, case: tuple[Callable[[], None], str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The property: exit status 2 and one line on stderr naming the path and the cause."""
    try:
        code = main(["boom"])
    except OSError as exc:
        raise AssertionError(f"the OS error escaped as a traceback: {exc!r}") from None
    err = capsys.readouterr().err
    assert code == 2, code
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("refimpl boom: "), err
    assert case[1] in lines[0], err
    assert case[2] in lines[0], err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "name",
    [
        "symlink loop",
        "is a directory",
        "name too long",
        "disk full",
        "file too large",
        "permission denied",
        "i/o error",
        "read-only",
    ],
)
def test_an_os_error_is_one_line_naming_path_and_cause(
    name: str,
    places: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    case = _cases(places)[name]
    if name == "disk full" and not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")  # Linux has it; the injected cases still run
    _register(monkeypatch, case[0])
    check_one_line_exit_2(cli.main, case, capsys)


def _main_without_the_handler(argv: list[str]) -> int:
    """The wrong variant: the subcommand's OS error propagates (Python prints a traceback)."""
    module = __import__(cli.COMMANDS["boom"].module)
    code: int = module.run(None)
    return code


def test_the_check_rejects_a_main_that_lets_os_errors_escape(
    places: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    case = _cases(places)["symlink loop"]
    _register(monkeypatch, case[0])
    rejects(check_one_line_exit_2, _main_without_the_handler, case, capsys)


_CHILD = r"""
import sys, types
from refimpl import cli
from refimpl._io import atomic_write
module = types.ModuleType("boom")
module.configure = lambda parser: None
def run(args):
    for _ in range(2000):
        print("x" * 1000)
    return 0
module.run = run
sys.modules["boom"] = module
cli.COMMANDS["boom"] = cli._Command("boom", "test", "all")
sys.exit(cli.main(["boom"]))
"""


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_standard_output_on_a_full_disk_is_one_line_and_exit_2() -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    # the failed write dropped its buffer, so the stream names no file: "the output"
    assert lines == [
        "refimpl boom: cannot write the output: no space left on the device (disk full); "
        "free space and run again"
    ], done.stderr


# --- refimpl lab: an --out that cannot hold the report is refused before any section runs ------


def _lab_places(tmp: Path) -> dict[str, tuple[Path, str]]:
    """name -> (the --out, words the refusal must contain)."""
    loop = tmp / "loop"
    loop.symlink_to(loop.name)
    occupied = tmp / "occupied"
    (occupied / "metrics.json").mkdir(parents=True)
    return {
        "symlink loop": (loop, "a symlink loop (too many levels of symbolic links)"),
        "under a symlink loop": (loop / "report", "a symlink loop (too many levels"),
        "an output is a directory": (occupied, "metrics.json' is a directory"),
    }


def check_lab_refuses_an_out_it_cannot_fill(
    out: Path, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 2 with one line naming the cause, no traceback, and nothing written into ``out``."""
    before = sorted(p.name for p in out.iterdir()) if out.is_dir() else None
    try:  # a quick single section, should the refusal be missing (the wrong variant)
        code = cli.main(["lab", "--out", str(out), "--quick", "--only", "effort"])
    except Exception as exc:
        raise AssertionError(f"refimpl lab raised {exc!r} (a traceback)") from None
    err = capsys.readouterr().err
    assert code == 2, (code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("refimpl lab: "), err
    assert words in lines[0], err
    after = sorted(p.name for p in out.iterdir()) if out.is_dir() else None
    assert after == before, f"the refused run left {after} in --out (was {before})"


@pytest.mark.parametrize(
    "name", ["symlink loop", "under a symlink loop", "an output is a directory"]
)
def test_lab_refuses_an_out_it_cannot_fill(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, words = _lab_places(tmp_path)[name]
    check_lab_refuses_an_out_it_cannot_fill(out, words, capsys)


def test_the_lab_check_rejects_a_lab_without_the_loop_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the wrong variant: Path.resolve meets the loop first (RuntimeError on Python < 3.13), and
    # its message neither says what a loop is nor follows the other commands' wording
    monkeypatch.setattr(lab_cli, "_examinable", lambda out: None)
    out, words = _lab_places(tmp_path)["symlink loop"]
    rejects(check_lab_refuses_an_out_it_cannot_fill, out, words, capsys)


def test_the_lab_check_rejects_a_lab_that_finds_an_occupied_output_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the wrong variant: the section runs, and writing metrics.json fails after the figures
    monkeypatch.setattr(lab_cli, "_occupied", lambda out: None)
    out, words = _lab_places(tmp_path)["an output is a directory"]
    rejects(check_lab_refuses_an_out_it_cannot_fill, out, words, capsys)


# --- an interrupted lab run leaves the earlier report whole ------------------------------------


def _interrupted(spec: object, number: int, config: object, figures: Path) -> None:
    raise KeyboardInterrupt


def _interrupted_after_removing_the_old_figures(
    spec: object, number: int, config: object, figures: Path
) -> None:
    """The wrong variant: the earlier run's figures were removed before the sections ran."""
    for old in figures.glob("*.png"):
        old.unlink()
    raise KeyboardInterrupt


def check_an_interrupted_lab_keeps_the_earlier_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, section: Callable[..., None]
) -> None:
    out = tmp_path / "report"
    (out / "figures").mkdir(parents=True, exist_ok=True)
    (out / "index.html").write_text('<img src="figures/effort-old.png">\n')
    (out / "figures" / "effort-old.png").write_bytes(b"an earlier figure")
    monkeypatch.setattr(lab_cli, "_run_section", section)
    assert cli.main(["lab", "--quick", "--only", "effort", "--out", str(out)]) == 130
    assert (out / "figures" / "effort-old.png").exists(), (
        "the interrupted run removed a figure the earlier report shows"
    )
    assert (out / "index.html").read_text() == '<img src="figures/effort-old.png">\n'


def test_an_interrupted_lab_run_keeps_the_earlier_report_and_its_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_an_interrupted_lab_keeps_the_earlier_report(tmp_path, monkeypatch, _interrupted)


def test_the_report_check_rejects_a_lab_that_removes_the_old_figures_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rejects(
        check_an_interrupted_lab_keeps_the_earlier_report,
        tmp_path,
        monkeypatch,
        _interrupted_after_removing_the_old_figures,
    )
