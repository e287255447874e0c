"""Files written so that nothing is lost: atomic outputs, outputs that name an input, OS errors.

Every command that writes a file (a report, a results table, a journal, a figure) goes through
:func:`atomic_write` (or :func:`atomic_writer` for a writer that streams, :func:`atomic_path` for
a library that writes to a path it is given): the bytes go to a temporary file in the same
directory, are flushed to disk, and replace the old file in one ``os.replace``. A reader sees the
old file or the new one, never a mix; on any failure (a full disk, an I/O error, an exception or a
``KeyboardInterrupt`` mid-write) the old file is whole and no temporary file is left behind.

Before it writes anything, a command calls :func:`refuse_output_naming_input`: an output that is
one of the command's inputs (the same file through another path, a hard link or a symlink) would
destroy that input, so it is refused with a message that names both.

:func:`describe_os_error` turns an ``OSError`` into the one line a command prints before it exits
with status 2: the path and the real cause (a symlink loop is not "no such file").

:func:`captured_descriptors` (from :mod:`refimpl._io.descriptors`) points file descriptors 1 and
2 at temporary files while user code runs (a sweep cell, a candidate under test, in any thread),
so that what compiled code or a child process writes there is measured and capped like what
Python prints, and holds a bounded amount of disk while it runs.

Nothing here is public API; the messages are (tests/test_io.py pins them).
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import io
import os
import secrets
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any, Literal, cast, overload

from refimpl._io.descriptors import KEEP, DescriptorOutput, captured_descriptors
from refimpl._validation import invalid
from refimpl.errors import InvalidArgument

__all__ = [
    "KEEP",
    "BinaryView",
    "DescriptorOutput",
    "atomic_path",
    "atomic_write",
    "atomic_writer",
    "captured_descriptors",
    "describe_os_error",
    "refuse_output_naming_input",
    "user_text",
]

StrPath = str | os.PathLike[str]

_TEMP_TRIES = 100


def _target(path: StrPath) -> Path:
    """The file a write to ``path`` replaces: a symlink is followed, so the link keeps working.

    A symlink loop raises ``OSError(ELOOP)`` here, before anything is created.
    """
    p = Path(path)
    if not p.is_symlink():
        return p
    with contextlib.suppress(FileNotFoundError):  # dangling: the file it points to is created
        os.stat(p)
    return Path(os.path.realpath(p))


def _special(target: Path) -> bool:
    """Whether ``target`` exists and is neither a regular file nor a directory (a device such as
    ``/dev/null``, a pipe, a socket). A rename onto it would replace the device with a regular
    file (run as root, ``--out /dev/null`` would end ``/dev/null`` for every process)."""
    try:
        mode = os.stat(target).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _new_temp(target: Path) -> tuple[int, Path]:
    """Create an empty temporary file next to ``target``, with the mode a new file would get.

    ``os.open(..., 0o666)`` lets the umask decide, as ``open(path, "w")`` would (``mkstemp``
    creates 0o600, which would make every output private). The suffix is kept, so a library that
    picks its format from the name (``savefig``) still sees ``.png``.
    """
    for _ in range(_TEMP_TRIES):
        tmp = target.with_name(f".{target.stem}.{secrets.token_hex(4)}.tmp{target.suffix}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        return fd, tmp
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(target.parent))


def _keep_mode(target: Path, fd: int) -> None:
    """An existing file keeps its permission bits when it is replaced."""
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        return
    os.fchmod(fd, mode)


def _sync_dir(directory: Path) -> None:
    """Flush the directory entry of the rename (best effort: not every system can open a dir)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@overload
def atomic_writer(
    path: StrPath, *, binary: Literal[False] = ..., encoding: str = ...
) -> contextlib.AbstractContextManager[IO[str]]: ...
@overload
def atomic_writer(
    path: StrPath, *, binary: Literal[True], encoding: str = ...
) -> contextlib.AbstractContextManager[IO[bytes]]: ...
def atomic_writer(
    path: StrPath, *, binary: bool = False, encoding: str = "utf-8"
) -> contextlib.AbstractContextManager[IO[str]] | contextlib.AbstractContextManager[IO[bytes]]:
    """A file object whose content replaces ``path`` when the ``with`` block ends without error.

    Parameters
    ----------
    path : str or os.PathLike
        The file to write. A symlink is followed (the file it points to is replaced, the link
        stays); the parent directory must exist.
    binary : bool, default False
        Yield a binary file object instead of a text one.
    encoding : str, default "utf-8"
        The text encoding (text mode only). Newlines are written as ``"\\n"``.

    Raises
    ------
    OSError
        When the file cannot be created, written, flushed or renamed; the old file is whole and
        no temporary file is left.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "report.txt"
    >>> with atomic_writer(out) as f:
    ...     _ = f.write("all checks passed\\n")
    >>> out.read_text()
    'all checks passed\\n'
    """
    writer = _atomic_writer(path, binary=binary, encoding=encoding)
    if binary:
        return cast("contextlib.AbstractContextManager[IO[bytes]]", writer)
    return cast("contextlib.AbstractContextManager[IO[str]]", writer)


@contextlib.contextmanager
def _atomic_writer(path: StrPath, *, binary: bool, encoding: str) -> Iterator[IO[str] | IO[bytes]]:
    with atomic_path(path) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_TRUNC)
        if binary:
            f: IO[str] | IO[bytes] = os.fdopen(fd, "wb")
        else:
            f = os.fdopen(fd, "w", encoding=encoding, newline="\n")
        with f:
            yield f


@contextlib.contextmanager
def atomic_path(path: StrPath) -> Iterator[Path]:
    """A temporary path next to ``path``; what is written there replaces ``path`` on success.

    For a library that writes to a path it is given (``pyarrow.parquet.write_table``,
    ``Figure.savefig``): the temporary name keeps the suffix of ``path``. The file is flushed
    to disk before the rename. On any exception, including ``KeyboardInterrupt``, the temporary
    file is removed and ``path`` is untouched; an ``OSError`` of the write (which names no file,
    or the temporary one) is re-raised naming ``path``. A ``path`` that is a device or a pipe
    (``/dev/null``, a FIFO) is written in place: renaming onto it would replace it.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "table.csv"
    >>> with atomic_path(out) as tmp:
    ...     _ = tmp.write_text("a,b\\n1,2\\n")
    >>> out.read_text()
    'a,b\\n1,2\\n'
    >>> sorted(p.name for p in out.parent.iterdir())
    ['table.csv']
    """
    target = _target(path)
    if _special(target):  # /dev/null, a pipe, a terminal: written in place, never replaced
        yield target
        return
    fd, tmp = _new_temp(target)
    try:
        _keep_mode(target, fd)
        os.close(fd)
        fd = -1
        yield tmp
        _fsync_file(tmp)
        os.replace(tmp, target)
    except BaseException as exc:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename in (None, os.fspath(tmp)):
            exc.filename = os.fspath(target)  # a failed write names no file: say which one
        raise
    _sync_dir(target.parent)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: StrPath, data: str | bytes, *, encoding: str = "utf-8") -> None:
    """Replace ``path`` with ``data`` atomically: the old file or the new one, never a part.

    Parameters
    ----------
    path : str or os.PathLike
        The file to write (its parent directory must exist). A symlink is followed.
    data : str or bytes
        The whole new content; text is encoded with ``encoding``, newlines kept as they are.
    encoding : str, default "utf-8"
        The encoding of text ``data``.

    Raises
    ------
    TypeError
        When ``data`` is neither ``str`` nor ``bytes``.
    OSError
        When the write fails (permission denied, disk full, I/O error...): the old file is whole
        and no temporary file is left. :func:`describe_os_error` words it for a user.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "out.json"
    >>> atomic_write(out, '{"ok": true}\\n')
    >>> out.read_text()
    '{"ok": true}\\n'
    """
    if isinstance(data, str):
        payload = data.encode(encoding)
    elif isinstance(data, (bytes, bytearray, memoryview)):
        payload = bytes(data)
    else:
        raise TypeError(f"data must be str or bytes; got {type(data).__name__}")
    with atomic_writer(path, binary=True) as f:
        f.write(payload)


# --- outputs that name an input ---------------------------------------------------------------


def _identity(path: Path, *, strict: bool) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of the file ``path`` names (links followed), or None if absent.

    With ``strict``, an error other than absence (a symlink loop, permission denied) is raised;
    without, it counts as absent: an input that cannot be examined is reported when it is read.
    """
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        if strict:
            raise
        return None
    return st.st_dev, st.st_ino


def _resolved(path: Path) -> Path:
    """The absolute path with every symlink of its existing part resolved."""
    return Path(os.path.realpath(path))


def _how_same(output: Path, source: Path) -> str:
    """Words for how ``output`` reaches ``source``: the same path, a symlink, a hard link."""
    if os.path.abspath(output) == os.path.abspath(source):
        return "the same path"
    if _resolved(output) == _resolved(source):
        return "the same file through a symlink or another path"
    return "the same file through a hard link"


def _inside(path: Path, directory: Path) -> bool:
    try:
        _resolved(path).relative_to(_resolved(directory))
    except ValueError:
        return False
    return True


def refuse_output_naming_input(
    output: StrPath | None, inputs: Iterable[StrPath | None], *, option: str
) -> None:
    """Refuse an output that is one of the inputs, before anything is written.

    An output is refused when it is the same file as an input: the same path, another path to
    it, a symlink to it or a hard link of it (compared by ``st_dev`` and ``st_ino``), or when it
    does not exist yet but resolves (through symlinked directories) to an input's path. An input
    that is a directory counts with everything inside it: an output that lands inside a directory
    the command reads would be read back by the next run.

    Parameters
    ----------
    output : str, os.PathLike or None
        The output path (``None`` or ``"-"``, standard output, is never refused).
    inputs : iterable of str, os.PathLike or None
        The input paths (``None`` and ``"-"`` entries are skipped; absent files are compared by
        resolved path).
    option : str
        How the user named the output (``"--report"``, ``"out"``), for the message.

    Raises
    ------
    refimpl.errors.InvalidArgument
        When ``output`` names an input; the message names both and how they are the same.
    OSError
        When the output cannot be examined (a symlink loop, permission denied). An input that
        cannot be is skipped here: reading it reports the error, naming it.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> (d / "trace.csv").write_text("version\\n0\\n")
    10
    >>> refuse_output_naming_input(d / "report.json", [d / "trace.csv"], option="--report")
    >>> refuse_output_naming_input(d / "trace.csv", [d], option="--report")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    refimpl.errors.InvalidArgument: --report must not name an input ...
    """
    if output is None or os.fspath(output) == "-":
        return
    out = Path(output)
    out_id = _identity(out, strict=True)
    for entry in inputs:
        if entry is None or os.fspath(entry) == "-":
            continue
        source = Path(entry)
        src_id = _identity(source, strict=False)
        if out_id is not None and src_id is not None and out_id == src_id:
            how = _how_same(out, source)
        elif _resolved(out) == _resolved(source):
            how = "the same path once symlinks are resolved"
        elif source.is_dir() and _inside(out, source):
            how = "inside the input directory"
        else:
            continue
        raise _naming_input(option, out, source, how)


def _naming_input(option: str, out: Path, source: Path, how: str) -> InvalidArgument:
    return invalid(
        option,
        f"not name an input (writing it would destroy the input {os.fspath(source)!r}: {how})",
        os.fspath(out),
        f"Write {option} to another path; nothing was written.",
    )


# --- OS errors in one line --------------------------------------------------------------------

_CAUSES: dict[int, str] = {
    errno.ENOENT: "no such file or directory",
    errno.ELOOP: "a symlink loop (too many levels of symbolic links)",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EISDIR: "is a directory (a file was expected)",
    errno.ENOTDIR: "a component of the path is not a directory",
    errno.ENAMETOOLONG: "file name too long",
    errno.ENOSPC: "no space left on the device (disk full)",
    errno.EIO: "input/output error (the device or file system failed)",
    errno.EROFS: "read-only file system",
    errno.EEXIST: "already exists",
    errno.EMFILE: "too many open files",
    errno.EFBIG: "file too large",
    errno.EXDEV: "crosses file systems",
    errno.EBUSY: "device or resource busy",
}
if hasattr(errno, "EDQUOT"):
    _CAUSES[errno.EDQUOT] = "disk quota exceeded"

_FIXES: dict[int, str] = {
    errno.ENOENT: "check the path",
    errno.ELOOP: "a symlink on the path points back to itself; fix or remove it",
    errno.EACCES: "check the permissions of the file and its directory",
    errno.EPERM: "check the permissions of the file and its directory",
    errno.EISDIR: "pass a file path, not a directory",
    errno.ENOTDIR: "check the directories on the path",
    errno.ENAMETOOLONG: "use a shorter path",
    errno.ENOSPC: "free space and run again",
    errno.EIO: "check the disk, then run again",
    errno.EROFS: "write to a writable location",
}
if hasattr(errno, "EDQUOT"):
    _FIXES[errno.EDQUOT] = "free space within the quota and run again"

_MAX_PATH_SHOWN = 120


def _show_path(path: StrPath | bytes) -> str:
    text = os.fsdecode(path)
    if len(text) > _MAX_PATH_SHOWN:
        keep = _MAX_PATH_SHOWN // 2 - 2
        text = f"{text[:keep]}...{text[-keep:]} ({len(text)} characters)"
    return repr(text)


def _cause(exc: OSError, path: StrPath | bytes | None) -> str:
    code = exc.errno
    if code is None:
        return str(exc.strerror or exc) or type(exc).__name__
    if code == errno.ENOENT and path is not None and os.path.islink(path):
        with contextlib.suppress(OSError):
            return f"a symlink to a missing file ({os.readlink(os.fsdecode(path))!r})"
    return _CAUSES.get(code) or os.strerror(code).lower()


def describe_os_error(
    exc: OSError, path: StrPath | bytes | None = None, *, action: str | None = None
) -> str:
    """One line for a user: the path, the real cause, and how to fix it.

    Parameters
    ----------
    exc : OSError
        The error the operating system raised.
    path : str, os.PathLike, bytes or None
        The path the command was working on (default: the error's own ``filename``).
    action : str or None
        What the command was doing (``"read the trace"``, ``"write the report"``); the line
        starts with ``cannot {action}`` when given.

    Returns
    -------
    str
        A single line (no newline), e.g. ``cannot write the report 'out.json': no space left
        on the device (disk full); free space and run again``. Long paths are shortened.

    Examples
    --------
    >>> import errno
    >>> exc = OSError(errno.ELOOP, "Too many levels of symbolic links", "a.csv")
    >>> describe_os_error(exc, "a.csv", action="read the trace")
    "cannot read the trace 'a.csv': a symlink loop (too many levels of symbolic links); a symlink on the path points back to itself; fix or remove it"
    """
    where = path if path is not None else exc.filename
    cause = _cause(exc, where)
    fix = _FIXES.get(exc.errno) if exc.errno is not None else None
    if cause.startswith("a symlink to a missing"):
        fix = "fix the link or its target"
    head = f"cannot {action}" if action else ""
    shown = _show_path(where) if where is not None else ""
    subject = " ".join(part for part in (head, shown) if part)
    line = (f"{subject}: " if subject else "") + cause + (f"; {fix}" if fix else "")
    return line.replace("\n", " ").replace("\r", " ")  # one line, whatever the cause says


# --- what user code says ---------------------------------------------------------------------

#: The most characters of user code's text (an exception's message, an exit code) quoted.
_SAID = 500


def user_text(value: object, *, quoted: bool = False, limit: int = _SAID) -> str:
    """``str(value)`` (``repr`` when ``quoted``) of an object user code made, for a message: an
    exception's text, ``sys.exit``'s code. It never raises (an object whose ``__str__`` raises is
    described by its type) and never runs long (past ``limit`` characters, an excerpt and the
    length): user code's exceptions become a report's messages, and neither a broken
    ``__str__`` nor a 10 MB message may take the report down or fill it.

    Examples
    --------
    >>> user_text(ValueError("bad input"))
    'bad input'
    >>> user_text("x" * 1000, limit=10)
    'xxxxxxxxxx... (1000 characters)'
    >>> class Broken(Exception):
    ...     def __str__(self): raise RuntimeError
    >>> user_text(Broken())
    '<a Broken whose str() raised RuntimeError>'
    """
    try:
        text = repr(value) if quoted else str(value)
    except Exception as exc:
        return f"<a {type(value).__name__} whose {'repr' if quoted else 'str'}() raised {type(exc).__name__}>"
    if len(text) > limit:
        return f"{text[:limit]}... ({len(text)} characters)"
    return text


# --- what user code writes ------------------------------------------------------------------


class BinaryView(io.RawIOBase):
    """The ``.buffer`` of a text stand-in for ``sys.stdout``: bytes written here are decoded
    (UTF-8, a character split across writes kept whole, invalid bytes replaced) and written to
    the text stream, so code that writes bytes to ``sys.stdout.buffer`` is captured and capped
    like code that prints."""

    def __init__(self, text: io.TextIOBase | IO[str]) -> None:
        super().__init__()
        self._text = text
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        if isinstance(data, str) or not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"a bytes-like object is required, not {type(data).__name__!r}")
        size = memoryview(data).nbytes
        self._text.write(self._decoder.decode(bytes(data)))
        return size
