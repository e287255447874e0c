"""What user code writes to file descriptors 1 and 2, captured, measured and bounded.

A sweep cell and a candidate under test are user code. What they print through ``sys.stdout``
is capped by their callers; what compiled code or a child process writes straight to the
descriptors (``os.write(1, ...)``, C's ``printf``, a subprocess that inherits them) is captured
here: :func:`captured_descriptors` points the descriptors at temporary files while the call
runs, from any thread, keeps those files bounded on disk during the call, and reports the exact
number of bytes written and the first of them.

Nothing here is public API; :mod:`refimpl._io` re-exports the names its callers use.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

__all__ = ["KEEP", "DescriptorOutput", "captured_descriptors"]

# --- what user code writes to the file descriptors -------------------------------------------

#: The first bytes of each descriptor's output kept for a message.
_HEAD = 200

_LIBC: Any = None


def _flush_c_stdio() -> None:
    """Flush C's ``stdout``/``stderr`` buffers (``fflush(NULL)``), so that what compiled code
    printed lands on the descriptor it was printed to, not on the next one fd 1 points at."""
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL(None)
            _LIBC.fflush(None)
        except (OSError, AttributeError, TypeError):  # no C library to flush (not on this system)
            _LIBC = False
            return
    if _LIBC:
        _LIBC.fflush(None)


def _flush_all() -> None:
    """Flush Python's streams (the current ones and the original ``sys.__stdout__``) and C's."""
    for stream in {
        id(s): s for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)
    }.values():
        with contextlib.suppress(Exception):  # None, closed, or an odd stream: nothing to flush
            stream.flush()  # type: ignore[union-attr]
    _flush_c_stdio()


class DescriptorOutput:
    """What file descriptors 1 and 2 received during :func:`captured_descriptors`: ``sizes`` in
    bytes by descriptor (exact, also when the file was cut back during the call), and the first
    bytes of each (``heads``)."""

    def __init__(self) -> None:
        self.sizes: dict[int, int] = {1: 0, 2: 0}
        self.heads: dict[int, bytes] = {1: b"", 2: b""}

    @property
    def total(self) -> int:
        """Bytes written to both descriptors."""
        return self.sizes[1] + self.sizes[2]

    def head(self) -> str:
        """The first bytes written (fd 1's, else fd 2's), decoded for a message."""
        return (self.heads[1] or self.heads[2]).decode("utf-8", errors="replace")


#: Bytes a descriptor's file may hold during a capture before it is cut back to its head.
KEEP = 1 << 20

#: Seconds between two looks of the watcher at the files of a capture.
_INTERVAL = 0.01

#: Looks without a capture before the watcher sleeps (about a second).
_IDLE_LOOKS = 100

#: One capture at a time in the whole process: the descriptors are the process's, so a capture
#: in one thread sees every thread's output; a second thread's capture waits for the first to end
#: (else each would count, then restore, the other's). Reentrant: a capture inside a capture in
#: the same thread (``check_conformance`` run by a sweep cell) nests, the inner one passing its
#: output on to the outer one's file.
_CAPTURE = threading.RLock()


@contextlib.contextmanager
def captured_descriptors(
    *, replay: Callable[[DescriptorOutput], bool] | None = None, keep: int = KEEP
) -> Iterator[DescriptorOutput]:
    """Point file descriptors 1 and 2 at temporary files while the block runs.

    Output written below Python's ``sys.stdout`` (``os.write(1, ...)``, C's ``printf``, a
    subprocess that inherits the descriptors) then lands in those files instead of the terminal;
    when the block ends the descriptors are restored and the output is measured (its size and
    first bytes, never read whole). When ``replay(output)`` is true, output of at most ``keep``
    bytes per descriptor is passed on to the restored descriptors, in order per descriptor (else
    it is dropped: the caller reports it).

    The disk stays bounded during the call: a watcher thread looks at the files every
    ``_INTERVAL`` seconds and cuts one past ``keep`` bytes back to its first bytes (a writer's
    next bytes go on at its own offset, over a hole that takes no disk space), so a call that
    writes gigabytes holds about ``keep`` bytes plus what it wrote since the last look. The size
    reported stays exact: it is the file's offset, which every write through the descriptor
    advances. Compiled code that writes while holding the GIL keeps the watcher from running
    until it lets go; the file is cut then, and when the block ends.

    Temporary files, not a pipe: a pipe fills, and a writer that holds the GIL (or a child that
    outlives the block) would then wait forever for a reader that cannot run.

    Any thread may capture; captures are serialized process-wide (a thread's capture waits for
    another thread's to end), except that a thread the holder waits for shares the holder's
    capture (see :func:`_held_capture`). Python's and C's buffers are flushed at both ends.

    Examples
    --------
    >>> import os
    >>> with captured_descriptors() as seen:
    ...     _ = os.write(1, b"from C, say")
    >>> seen.sizes[1], seen.head()
    (11, 'from C, say')
    """
    seen = DescriptorOutput()
    with _held_capture() as own:
        if not own:  # run on behalf of the capture's holder: its files take this output
            with _measured_in_place(seen):
                yield seen
            return
        _flush_all()
        saved: dict[int, int | None] = {}
        files: dict[int, int] = {}
        with contextlib.ExitStack() as stack:
            try:
                for fd in (1, 2):
                    files[fd] = stack.enter_context(_spare_file())
                    try:
                        saved[fd] = os.dup(fd)
                    except OSError:  # the descriptor was closed: it is closed again afterwards
                        saved[fd] = None
                    os.dup2(files[fd], fd)
                _WATCHER.watch(files.values(), keep)
                yield seen
            finally:
                _flush_all()
                _restore(saved)
                _WATCHER.unwatch(files.values())
                _measure(seen, files)
                if seen.total and replay is not None and replay(seen):
                    for fd, tmp in files.items():
                        if 0 < seen.sizes[fd] <= keep and saved.get(fd) is not None:
                            _copy_to(tmp, fd)


@contextlib.contextmanager
def _measured_in_place(seen: DescriptorOutput) -> Iterator[None]:
    """What descriptors 1 and 2 received while the block ran, from the growth of their files'
    offsets (the holder's capture files; the holder waits, so its own output is not in it, but
    another thread sharing the capture adds its own): nothing is redirected or passed on."""
    _flush_all()
    start = {fd: _offset(fd) for fd in (1, 2)}
    try:
        yield
    finally:
        _flush_all()
        for fd, before in start.items():
            after = _offset(fd)
            if before is not None and after is not None and after > before:
                seen.sizes[fd] = after - before
                with contextlib.suppress(OSError):
                    seen.heads[fd] = os.pread(fd, _HEAD, before)


def _offset(fd: int) -> int | None:
    try:
        return os.lseek(fd, 0, os.SEEK_CUR)
    except OSError:  # closed, or not a file (a capture holds files: not shared then)
        return None


#: The thread that holds :data:`_CAPTURE` (None when no capture runs), for :func:`_holder_waits`.
_HOLDER: list[int | None] = [None]

#: Per thread: the wait of the holder that this thread last shared a capture with.
_SHARED = threading.local()


@contextlib.contextmanager
def _held_capture() -> Iterator[bool]:
    """Hold the process's capture while the block runs (True), or share the holder's (False).

    A capture in another thread is waited for, except when its holder stands still across a
    whole timeout (a cell that runs ``check_conformance`` in a thread pool and waits for the
    results, by a join or by polling with ``time.sleep``: waiting for the holder would never end). Then
    this thread runs on the holder's behalf: its output goes to the holder's files (bounded
    there), it is measured from their growth, and it does not redirect the descriptors itself.
    """
    if not _take_capture():
        yield False
        return
    outer = _HOLDER[0]  # this thread's own, for a capture inside a capture; else None
    _HOLDER[0] = threading.get_ident()
    try:
        yield True
    finally:
        _HOLDER[0] = outer
        _CAPTURE.release()


def _take_capture() -> bool:
    """Acquire :data:`_CAPTURE` (True), or find that its holder waits for this thread (False)."""
    if _CAPTURE.acquire(blocking=False):
        return True
    last = getattr(_SHARED, "wait", None)
    seen = _holder_waits()
    if seen is not None and seen == last:  # the same wait as this thread's last capture
        return False
    while not _CAPTURE.acquire(timeout=5 * _INTERVAL):
        now = _holder_waits()
        if now is not None and now == seen:  # in the same wait across a whole timeout
            _SHARED.wait = now
            return False
        seen = now
    return True


def _holder_waits() -> tuple[int, int, int] | None:
    """Where the holder of the capture stands (its thread, innermost frame and instruction), or
    None when no other thread holds one. The same place across a whole timeout is a wait:
    ``Thread.join``, ``Future.result``, ``Queue.get`` and a ``time.sleep`` poll all stand still.
    A holder in one long compiled call stands still too; sharing its capture then costs only the
    attribution of output (counted against both), never a hang."""
    holder = _HOLDER[0]
    frames = getattr(sys, "_current_frames", None)
    if holder is None or holder == threading.get_ident() or frames is None:
        return None
    frame = frames().get(holder)
    if frame is None:
        return None
    return holder, id(frame), frame.f_lasti


def _measure(seen: DescriptorOutput, files: dict[int, int]) -> None:
    """Each file's size (its offset: what was written, cut or not) and first bytes."""
    for fd, tmp in files.items():
        seen.sizes[fd] = max(os.lseek(tmp, 0, os.SEEK_CUR), os.fstat(tmp).st_size)
        seen.heads[fd] = os.pread(tmp, _HEAD, 0)


def _cut(tmp: int, keep: int) -> None:
    """Cut a capture's file past ``keep`` bytes back to its first :data:`_HEAD` bytes."""
    with contextlib.suppress(OSError):
        if os.fstat(tmp).st_size > keep:
            os.ftruncate(tmp, min(_HEAD, keep))


class _Watcher:
    """The thread that keeps the files of the current captures bounded while user code runs.

    It looks every :data:`_INTERVAL` seconds while captures come and goes to sleep after
    :data:`_IDLE_LOOKS` looks without one (the next capture wakes it): a run of short captures
    (a conformance search calls its candidate hundreds of times) does not wake it once per call.
    It touches a file only under its lock, so that a file no longer watched (then closed, its
    number reused) is never cut.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._files: dict[int, int] = {}
        self._thread: threading.Thread | None = None
        self._asleep = False
        self.passes = 0

    def watch(self, files: Iterable[int], keep: int) -> None:
        with self._cond:
            for tmp in files:
                self._files[tmp] = keep
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="refimpl-output-watcher", daemon=True
                )
                self._thread.start()
            elif self._asleep:
                self._cond.notify_all()

    def unwatch(self, files: Iterable[int]) -> None:
        with self._cond:
            for tmp in files:
                self._files.pop(tmp, None)

    def wait_pass(self) -> None:
        """Wait until the watcher has looked at every watched file once after this call."""
        with self._cond:
            target = self.passes + 1
            self._cond.notify_all()
            while self.passes < target and self._files:
                self._cond.wait()

    def _run(self) -> None:
        with self._cond:
            idle = 0
            while True:
                if self._files:
                    idle = 0
                    for tmp, keep in self._files.items():
                        _cut(tmp, keep)
                    self.passes += 1
                    self._cond.notify_all()
                else:
                    idle += 1
                if idle > _IDLE_LOOKS:  # asleep until the next capture wakes it
                    self._asleep = True
                    self._cond.wait()
                    self._asleep, idle = False, 0
                self._cond.wait(_INTERVAL)  # a capture shorter than this is never looked at


_WATCHER = _Watcher()


def _after_fork_in_child() -> None:
    """A forked child has none of the parent's threads: a fresh watcher and lock."""
    global _WATCHER, _CAPTURE
    _WATCHER = _Watcher()
    _CAPTURE = threading.RLock()
    _HOLDER[0] = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


#: Emptied temporary files kept for the next capture (one is created in about 0.1 ms, and a
#: conformance run captures every call of its candidate).
_SPARE: list[int] = []


@contextlib.contextmanager
def _spare_file() -> Iterator[int]:
    """The descriptor of an empty, unnamed temporary file with its offset at 0, emptied and
    returned to :data:`_SPARE` afterwards (a bare descriptor: one left open at exit warns
    nobody). A spare file written to since it was emptied (a child process that outlived its
    capture still writes there) is closed, not reused."""
    tmp = -1
    while _SPARE and tmp < 0:
        tmp = _SPARE.pop()
        if os.lseek(tmp, 0, os.SEEK_CUR) or os.fstat(tmp).st_size:
            os.close(tmp)
            tmp = -1
    if tmp < 0:
        tmp, name = tempfile.mkstemp(prefix="refimpl-output-")
        os.unlink(name)  # unnamed: gone with its last descriptor, whatever happens
    try:
        yield tmp
    finally:
        os.ftruncate(tmp, 0)
        os.lseek(tmp, 0, os.SEEK_SET)
        if len(_SPARE) < 2:
            _SPARE.append(tmp)
        else:
            os.close(tmp)


def _restore(saved: dict[int, int | None]) -> None:
    """Point each descriptor back where it pointed (or close it, if it was closed)."""
    for fd, old in saved.items():
        if old is None:
            os.close(fd)
        else:
            os.dup2(old, fd)
            os.close(old)


def _copy_to(source: int, fd: int) -> None:
    """Write the whole of file ``source`` to descriptor ``fd`` (a write error is the terminal's
    own business: a closed pipe drops the output, as it would have dropped it directly)."""
    offset = 0
    with contextlib.suppress(OSError):
        while chunk := os.pread(source, 1 << 16, offset):
            offset += len(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
