"""Reading a trace's next chunk while the current one is checked: a reader thread, two chunks held.

The readers spend most of their time in pyarrow's and polars' parsers and numpy, which release the
GIL, so a second thread reading chunk ``k + 1`` while the checker compares chunk ``k`` overlaps the
two on a machine with a core to spare. At most two chunks are alive: the one being checked and the
one being read (the thread waits before reading a third). What the reader reports reaches the
caller in the reader's order and on the caller's thread: each chunk, each progress count, and an
error (the very exception object, so its message and the exit status are those of a reading
without the thread) at the point where the chunk that could not be read would have come. When the
caller stops early (an error while checking, or fewer chunks wanted), the thread is told to stop,
stops after the read under way, closes the reader (its file) and is joined before
:meth:`Prefetched.close` returns.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")

#: chunks alive at once: the one being checked and the one being read
HELD = 2


class Prefetched(Generic[T]):
    """The items of ``make(progress)``, read ahead on a thread; ``progress`` is called on the
    caller's thread, in the reader's order. Use as a context manager (or call :meth:`close`)."""

    def __init__(
        self, make: Callable[[Callable[[int], None]], Iterator[T]], progress: Callable[[int], None]
    ) -> None:
        self._progress = progress
        self._events: queue.SimpleQueue[tuple[str, object]] = queue.SimpleQueue()
        self._slots = threading.Semaphore(HELD)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(make,), daemon=True)
        self._thread.start()

    def _read(self, make: Callable[[Callable[[int], None]], Iterator[T]]) -> None:
        put = self._events.put
        try:
            items = make(lambda n: put(("progress", n)))
            try:
                while True:
                    self._slots.acquire()
                    if self._stop.is_set():
                        return
                    try:
                        item = next(items)
                    except StopIteration:
                        break
                    put(("item", item))
            finally:
                close = getattr(items, "close", None)
                if close is not None:
                    close()
        except BaseException as exc:  # re-raised on the caller's thread, where it is handled
            put(("error", exc))
            return
        put(("done", None))

    def __iter__(self) -> Iterator[T]:
        taken = False
        while True:
            if taken:  # the caller is done with the previous item: its slot is free
                self._slots.release()
            kind, value = self._events.get()
            while kind == "progress":
                self._progress(value)  # type: ignore[arg-type]
                kind, value = self._events.get()
            if kind == "error":
                raise value  # type: ignore[misc]
            if kind == "done":
                return
            taken = True
            yield value  # type: ignore[misc]

    def close(self) -> None:
        """Stop the reader after the read under way and wait for it (its file closed)."""
        self._stop.set()
        self._slots.release()
        self._thread.join()

    def __enter__(self) -> Prefetched[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
