"""Atomic outputs, outputs that name an input, and OS errors in one line (refimpl._io).

The atomic writers are checked by injecting a failure mid-write (a full disk after half the
bytes, an exception, a ``KeyboardInterrupt``): the old file must be whole and no temporary file
left. The same checks run against a plain ``open(path, "w")`` writer, the wrong variant, which
they must reject. The refusal of an output that names an input is checked through every way two
paths can reach one file (same path, ``..``, a symlink to the file, a symlinked directory, a hard
link) and must let a different file through.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _wrong_variants import rejects
from hypothesis import given, settings
from hypothesis import strategies as st

from refimpl._io import (
    atomic_path,
    atomic_write,
    atomic_writer,
    describe_os_error,
    refuse_output_naming_input,
)
from refimpl.errors import InvalidArgument

Writer = Callable[[Path, bytes], None]

OLD = b"old content that must survive\n" * 100


def _plain_write(path: Path, data: bytes) -> None:
    """The wrong variant: truncates the old file first, so a failure mid-write loses it."""
    with open(path, "wb") as f:
        f.write(data)


@contextlib.contextmanager
def _file_size_limit(limit: int) -> Iterator[None]:
    """A real failure mid-write: the OS refuses to grow any file past ``limit`` bytes (EFBIG).

    ``RLIMIT_FSIZE`` makes the write itself fail part-way, as a full disk does, without patching
    Python: the writer under test sees the operating system's own error.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


def _leftovers(directory: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name not in keep)


def check_failure_leaves_old_file_whole(write: Writer, directory: Path) -> None:
    """The property: a write that fails mid-way leaves the old file whole and no temp file."""
    out = directory / "results.json"
    out.write_bytes(OLD)
    with pytest.raises(OSError, match="too large") as info, _file_size_limit(len(OLD) * 3):
        write(out, b"new" * 10_000)
    assert info.value.errno == errno.EFBIG
    assert out.read_bytes() == OLD, "the old file was damaged by a failed write"
    assert _leftovers(directory, {"results.json"}) == [], "a temporary file was left behind"


def _atomic(path: Path, data: bytes) -> None:
    atomic_write(path, data)


def test_a_failed_write_leaves_the_old_file_whole(tmp_path: Path) -> None:
    check_failure_leaves_old_file_whole(_atomic, tmp_path)


def test_the_failure_check_rejects_a_plain_writer(tmp_path: Path) -> None:
    rejects(check_failure_leaves_old_file_whole, _plain_write, tmp_path)


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(3), RuntimeError("boom")])
def test_an_exception_inside_the_block_keeps_the_old_file(
    tmp_path: Path, exc: BaseException
) -> None:
    out = tmp_path / "report.txt"
    out.write_text("old\n")

    def write_then_fail() -> None:
        with atomic_writer(out) as f:
            f.write("half of the new report")
            raise exc

    with pytest.raises(type(exc)):
        write_then_fail()
    assert out.read_text() == "old\n"
    assert _leftovers(tmp_path, {"report.txt"}) == []


def test_atomic_path_keeps_the_suffix_and_cleans_up_on_failure(tmp_path: Path) -> None:
    out = tmp_path / "figure.png"
    seen: list[str] = []

    def render() -> None:
        with atomic_path(out) as tmp:
            seen.append(tmp.name)
            tmp.write_bytes(b"partial")
            raise ValueError("renderer failed")

    with pytest.raises(ValueError, match="renderer"):
        render()
    assert seen[0].endswith(".png")
    assert seen[0] != "figure.png"
    assert not out.exists()
    assert _leftovers(tmp_path, set()) == []


@settings(max_examples=25, deadline=None)
@given(data=st.one_of(st.binary(max_size=5000), st.text(max_size=2000)))
def test_a_successful_write_is_read_back_exactly(data: str | bytes) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "x.bin"
        out.write_bytes(b"previous")
        atomic_write(out, data)
        expected = data.encode() if isinstance(data, str) else data
        assert out.read_bytes() == expected
        assert _leftovers(Path(d), {"x.bin"}) == []


def test_a_replaced_file_keeps_its_mode_and_a_new_file_gets_the_umask(tmp_path: Path) -> None:
    old = tmp_path / "kept.txt"
    old.write_text("a")
    os.chmod(old, 0o640)
    atomic_write(old, "b")
    assert (old.stat().st_mode & 0o777) == 0o640
    mask = os.umask(0o022)
    try:
        atomic_write(tmp_path / "new.txt", "c")
    finally:
        os.umask(mask)
    assert ((tmp_path / "new.txt").stat().st_mode & 0o777) == 0o644


def test_a_symlinked_output_is_written_through_and_the_link_stays(tmp_path: Path) -> None:
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    atomic_write(link, "new")
    assert link.is_symlink()
    assert real.read_text() == "new"


def test_a_symlink_loop_as_output_is_an_eloop_and_nothing_is_created(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(OSError, match="symbolic links") as info:
        atomic_write(a, "x")
    assert info.value.errno == errno.ELOOP
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]


def test_a_directory_as_output_fails_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "adir"
    target.mkdir()
    with pytest.raises(IsADirectoryError) as info:
        atomic_write(target, "x")
    assert "directory" in describe_os_error(info.value, target)
    assert _leftovers(tmp_path, {"adir"}) == []


def test_atomic_write_refuses_a_non_text_payload(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="str or bytes"):
        atomic_write(tmp_path / "x", 3)  # type: ignore[arg-type]
    assert _leftovers(tmp_path, set()) == []


# --- outputs that name an input -----------------------------------------------------------------


def _ways_to_name(tmp_path: Path) -> dict[str, tuple[Path, Path]]:
    """Pairs (output, input) that reach one file, each in its own way."""
    data = tmp_path / "data"
    data.mkdir()
    trace = data / "trace.csv"
    trace.write_text("version\n0\n")
    (tmp_path / "link.csv").symlink_to(trace)
    (tmp_path / "linkdir").symlink_to(data)
    os.link(trace, tmp_path / "hard.csv")
    return {
        "same path": (trace, trace),
        "dot-dot": (data / ".." / "data" / "trace.csv", trace),
        "relative vs absolute": (Path(os.path.relpath(trace)), trace),
        "symlink to the input": (tmp_path / "link.csv", trace),
        "input is a symlink": (trace, tmp_path / "link.csv"),
        "symlinked directory": (tmp_path / "linkdir" / "trace.csv", trace),
        "hard link": (tmp_path / "hard.csv", trace),
    }


def test_every_way_of_naming_an_input_is_refused(tmp_path: Path) -> None:
    for way, (out, source) in _ways_to_name(tmp_path).items():
        with pytest.raises(InvalidArgument, match="--report must not name an input") as info:
            refuse_output_naming_input(out, [tmp_path / "other.csv", source], option="--report")
        assert "trace.csv" in str(info.value) or "link.csv" in str(info.value), way
        assert "nothing was written" in str(info.value), way


def test_a_hard_link_is_named_as_one(tmp_path: Path) -> None:
    out, source = _ways_to_name(tmp_path)["hard link"]
    with pytest.raises(InvalidArgument, match="hard link"):
        refuse_output_naming_input(out, [source], option="--out")


def test_an_output_inside_an_input_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "traces").mkdir()
    with pytest.raises(InvalidArgument, match="inside the input directory"):
        refuse_output_naming_input(
            tmp_path / "traces" / "new.csv", [tmp_path / "traces"], option="--out"
        )


def test_distinct_files_stdout_and_absent_inputs_pass(tmp_path: Path) -> None:
    a = tmp_path / "a.csv"
    a.write_text("x")
    b = tmp_path / "b.csv"
    b.write_text("x")  # same content, another file
    refuse_output_naming_input(b, [a], option="--out")
    refuse_output_naming_input(tmp_path / "new.json", [a, None, "-"], option="--out")
    refuse_output_naming_input("-", [a], option="--out")
    refuse_output_naming_input(None, [a], option="--out")


def _only_compares_strings(output: Path, inputs: list[Path], *, option: str) -> None:
    """The wrong variant: compares the paths as written, so any link or other spelling passes."""
    if any(str(output) == str(source) for source in inputs):
        raise InvalidArgument(f"{option} names an input")


def check_every_way_is_refused(
    refuse: Callable[..., None], tmp_path: Path, way: str = "hard link"
) -> None:
    out, source = _ways_to_name(tmp_path)[way]
    try:
        refuse(out, [source], option="--out")
    except InvalidArgument:
        return
    raise AssertionError(f"{way}: {out} was not refused as output of input {source}")


@pytest.mark.parametrize("way", ["hard link", "symlink to the input", "dot-dot"])
def test_the_refusal_check_rejects_a_string_comparison(tmp_path: Path, way: str) -> None:
    (tmp_path / "right").mkdir()
    (tmp_path / "wrong").mkdir()
    check_every_way_is_refused(refuse_output_naming_input, tmp_path / "right", way)
    rejects(check_every_way_is_refused, _only_compares_strings, tmp_path / "wrong", way)


# --- OS errors in one line ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (errno.ELOOP, "symlink loop"),
        (errno.EACCES, "permission denied"),
        (errno.EISDIR, "is a directory"),
        (errno.ENOTDIR, "not a directory"),
        (errno.ENAMETOOLONG, "file name too long"),
        (errno.ENOSPC, "disk full"),
        (errno.EIO, "input/output error"),
        (errno.ENOENT, "no such file"),
        (errno.EROFS, "read-only"),
    ],
)
def test_each_cause_is_named_with_the_path(code: int, words: str) -> None:
    line = describe_os_error(OSError(code, os.strerror(code)), "out/report.json", action="write")
    assert line.startswith("cannot write 'out/report.json': ")
    assert words in line
    assert "\n" not in line


def test_a_real_symlink_loop_is_not_called_missing(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(OSError, match="symbolic links") as info:
        a.read_text()
    line = describe_os_error(info.value, a, action="read the trace")
    assert "symlink loop" in line
    assert "no such file" not in line


def test_a_dangling_symlink_names_its_target(tmp_path: Path) -> None:
    link = tmp_path / "trace.csv"
    link.symlink_to(tmp_path / "gone.csv")
    with pytest.raises(FileNotFoundError) as info:
        link.read_text()
    line = describe_os_error(info.value, link)
    assert "a symlink to a missing file" in line
    assert "gone.csv" in line


def test_a_real_name_too_long_and_a_real_disk_full(tmp_path: Path) -> None:
    long = tmp_path / ("x" * 300)
    with pytest.raises(OSError, match="too long") as info:
        long.write_text("x")
    line = describe_os_error(info.value, long, action="write the report")
    assert "file name too long" in line
    assert "characters)" in line
    assert len(line) < 300
    if Path("/dev/full").exists():
        with pytest.raises(OSError, match="No space") as full:
            Path("/dev/full").write_text("x")
        assert "disk full" in describe_os_error(full.value, "/dev/full")


def test_the_default_path_is_the_error_s_filename_and_newlines_are_flattened() -> None:
    exc = OSError(errno.EIO, "I/O error\nsecond line", "dev/disk")
    assert describe_os_error(exc).startswith("'dev/disk': input/output error")
    odd = OSError("a message\nwith no errno")
    assert "\n" not in describe_os_error(odd, "p")


def test_an_input_that_cannot_be_examined_is_left_to_its_reader(tmp_path: Path) -> None:
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.symlink_to(b)
    b.symlink_to(a)
    refuse_output_naming_input(tmp_path / "report.json", [a], option="--report")  # no error here
    with pytest.raises(OSError, match="symbolic links"):
        refuse_output_naming_input(a, [tmp_path / "trace.csv"], option="--report")


def test_a_pipe_is_written_in_place_not_replaced_by_a_file(tmp_path: Path) -> None:
    """An output path that is a device or a pipe (``--out /dev/null``) is written through: a
    rename onto it would replace it with a regular file (as root, ``/dev/null`` itself)."""
    import stat
    import threading

    from refimpl._io import atomic_write

    pipe = tmp_path / "out.json"
    os.mkfifo(pipe)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(pipe.read_bytes()))
    reader.start()
    atomic_write(pipe, "through the pipe\n")
    reader.join(timeout=60)
    assert got == [b"through the pipe\n"]
    assert stat.S_ISFIFO(os.stat(pipe).st_mode)
