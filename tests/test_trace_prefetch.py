"""The read-ahead thread of ``refimpl check``: the caller sees what the reader produced, in its
order and on its own thread, the reader's very exception where the reader failed, at most two
chunks alive, and a reader stopped and closed when the caller stops early.

None of these depends on timing: the bound is an invariant of the semaphore (checked at every
item), and the one wait below only gives a wrong variant (an unbounded read-ahead) the time to
run ahead, which it takes at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest
from _wrong_variants import rejects

from refimpl.testing import _trace_prefetch
from refimpl.testing._trace_prefetch import Prefetched


class Source:
    """A reader of ``n`` items that reports progress after each and may fail at item ``fail``."""

    def __init__(self, n: int, fail: int | None = None) -> None:
        self.n, self.fail = n, fail
        self.produced = 0
        self.closed = False
        self.threads: set[int] = set()
        self.enough = threading.Event()
        self.error = ValueError("row 3: the reader's message")

    def make(self, progress: Callable[[int], None]) -> Iterator[int]:
        try:
            for i in range(self.n):
                self.threads.add(threading.get_ident())
                if i == self.fail:
                    raise self.error
                self.produced += 1
                if self.produced >= 3:
                    self.enough.set()
                yield i
                progress(10 * (i + 1))
        finally:
            self.closed = True


def events(source: Source) -> list[tuple[str, int]]:
    seen: list[tuple[str, int]] = []
    with Prefetched(source.make, lambda n: seen.append(("progress", n))) as items:
        for item in items:
            seen.append(("item", item))
    return seen


def test_items_and_progress_arrive_in_the_readers_order() -> None:
    plain: list[tuple[str, int]] = []
    for item in Source(5).make(lambda n: plain.append(("progress", n))):
        plain.append(("item", item))
    source = Source(5)
    assert events(source) == plain
    assert source.closed
    assert threading.get_ident() not in source.threads  # it did read on another thread


def take(items: Prefetched[int], seen: list[int], fail_at: int | None = None) -> None:
    for item in items:
        if item == fail_at:
            raise KeyError("the checker failed on this chunk")
        seen.append(item)


def test_the_readers_error_is_raised_where_its_item_would_have_come() -> None:
    source = Source(6, fail=3)
    seen: list[int] = []
    reader = Prefetched(source.make, lambda n: None)
    with reader as items, pytest.raises(ValueError, match="the reader's message") as raised:
        take(items, seen)
    assert raised.value is source.error
    assert seen == [0, 1, 2]


def at_most_two_alive(wait: float) -> None:
    """When the caller holds item ``k``, the reader has produced at most items ``0 .. k + 1``."""
    source = Source(8)
    with Prefetched(source.make, lambda n: None) as items:
        for k, item in enumerate(items):
            assert item == k
            if k == 0:
                source.enough.wait(wait)  # a reader that reads ahead unbounded does it now
            assert source.produced <= k + 2, (k, source.produced)


def test_at_most_two_chunks_are_alive() -> None:
    at_most_two_alive(0.05)


def test_an_unbounded_read_ahead_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_trace_prefetch, "HELD", 1000)
    rejects(at_most_two_alive, 60.0)


def test_a_caller_that_stops_early_stops_and_closes_the_reader() -> None:
    source = Source(100)
    prefetched = Prefetched(source.make, lambda n: None)
    with prefetched as items, pytest.raises(KeyError, match="the checker failed"):
        take(items, [], fail_at=0)
    assert not prefetched._thread.is_alive()
    assert source.closed
    assert source.produced <= 2
