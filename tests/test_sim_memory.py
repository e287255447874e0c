"""``refimpl simulate`` keeps the memory it frees and maps its run's pages before the run.

:func:`refimpl.sim._memory.map_ahead` touches the pages a run's trace will take, inside
:func:`refimpl.sim._memory.kept_memory` (glibc's ``malloc`` told to keep freed memory), so that the
run's arrays reuse mapped pages and its rate is not charged for their first touch; the command
reports that cost apart as ``memory_s``. The checks: the pages mapped ahead serve the next arrays
without a page fault (counted by the kernel, ``ru_minflt``: no clock), which a ``map_ahead`` that
only allocates, or memory given back to the system, fail; the size mapped is the trace's columns
and nothing past the heap's block bound; and a run gives the same trace with its memory kept.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import numpy as np
from _wrong_variants import rejects

from refimpl.sim import SimConfig, simulate
from refimpl.sim._memory import TRACE_BYTES_PER_ROW, kept_memory, map_ahead, run_bytes

MIB = 1 << 20


#: Run in a fresh interpreter: how many page faults writing three fresh 8 MiB arrays costs after
#: ``ahead(32 MiB)`` inside ``kept_memory``, for ``ahead`` the command's ``map_ahead`` or one of
#: two wrong variants (printed as JSON; ``null`` where glibc's malloc is not there to keep memory).
#: A fresh process, because a long-lived one (a pytest worker after hundreds of tests) may already
#: hold freed heap pages that serve the arrays whatever ``ahead`` did.
_FAULTS = """
import ctypes, json, resource, sys
import numpy as np
import threading
from refimpl.sim._memory import MapAhead, kept_memory, map_ahead

MIB = 1 << 20

def beside(nbytes):  # the command's way: blocks allocated here, their pages touched by a thread
    MapAhead(nbytes).join()

def in_a_thread(nbytes):  # the whole of map_ahead in a thread: blocks from the thread's own arena
    worker = threading.Thread(target=map_ahead, args=(nbytes,))
    worker.start()
    worker.join()

def untouched(nbytes):  # the blocks allocated and freed, never written (never mapped)
    blocks = [np.empty(8 * MIB, dtype=np.uint8) for _ in range(-(-nbytes // (8 * MIB)))]
    del blocks

def given_back(nbytes):  # the pages mapped, then handed back to the system
    map_ahead(nbytes)
    ctypes.CDLL(None).malloc_trim(0)

ahead = {
    "map_ahead": map_ahead, "beside": beside, "untouched": untouched, "given_back": given_back,
    "in_a_thread": in_a_thread,
}[sys.argv[1]]
with kept_memory() as kept:
    ahead(32 * MIB)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    arrays = [np.ones(MIB) for _ in range(3)]
    new = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps(new if kept else None))
"""


def faults_after(ahead: str) -> int | None:
    done = subprocess.run(
        [sys.executable, "-c", _FAULTS, ahead], capture_output=True, text=True, check=True
    )
    found: int | None = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def next_arrays_fault_little(ahead: str) -> None:
    """After ``ahead(32 MiB)``, writing three fresh 8 MiB arrays faults in well under a tenth of
    their 6144 pages (where glibc keeps freed memory; elsewhere nothing is claimed)."""
    new = faults_after(ahead)
    if new is not None:
        assert new < 600, new


def glibc_keeps_memory() -> bool:
    with kept_memory() as kept:
        return kept


def test_pages_mapped_ahead_serve_the_next_arrays() -> None:
    next_arrays_fault_little("map_ahead")


def test_pages_touched_by_a_thread_beside_the_caller_serve_the_callers_next_arrays() -> None:
    next_arrays_fault_little("beside")


def test_the_check_rejects_pages_a_thread_allocated_for_itself() -> None:
    """glibc serves a thread's allocations from an arena of its own: pages it maps there do not
    serve the main thread's arrays, so :class:`MapAhead` allocates the blocks in the caller."""
    if glibc_keeps_memory():
        rejects(next_arrays_fault_little, "in_a_thread")


def test_the_check_rejects_memory_allocated_but_never_touched() -> None:
    if glibc_keeps_memory():  # the claim is made, and must fail on the wrong variant
        rejects(next_arrays_fault_little, "untouched")


def test_the_check_rejects_memory_given_back_to_the_system() -> None:
    if glibc_keeps_memory():
        rejects(next_arrays_fault_little, "given_back")


def maps_the_trace_within_the_heap(size: Callable[[int], int]) -> None:
    for rows in (0, 1, 1000, 1_000_000, 4 * MIB // 8 * 8, 4 * MIB, 4 * MIB + 1, 10_000_000):
        got = size(rows)
        if 8 * rows > 32 * MIB:  # a float64 column the heap does not serve: nothing mapped
            assert got == 0, (rows, got)
        else:
            assert got == rows * TRACE_BYTES_PER_ROW, (rows, got)


def test_the_size_mapped_is_the_traces_columns_within_the_heap() -> None:
    maps_the_trace_within_the_heap(run_bytes)
    assert run_bytes(1_000_000) == 93_000_000  # 93 bytes a row
    assert run_bytes(4_194_304) == 4_194_304 * 93  # a float64 column of exactly 32 MiB
    assert run_bytes(4_194_305) == 0
    # with the event kernel's own columns: 65 bytes a row more
    assert run_bytes(1_000_000, kernel=True) == 158_000_000
    assert run_bytes(4_194_305, kernel=True) == 0


def test_the_size_check_rejects_mapping_past_the_heaps_bound() -> None:
    rejects(maps_the_trace_within_the_heap, lambda rows: rows * TRACE_BYTES_PER_ROW)


def test_a_run_with_its_memory_kept_and_mapped_gives_the_same_trace() -> None:
    cfg = SimConfig(slots=16, batch=32, rollouts=20_000, seed=3)
    plain = simulate(cfg)
    with kept_memory():
        map_ahead(run_bytes(cfg.trained_target + cfg.slots))
        kept = simulate(cfg)
    for name in plain.COLUMNS:  # NaN: the finish time of a rollout still running
        a, b = getattr(plain, name), getattr(kept, name)
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), name
    assert plain.summary().to_json_dict() == kept.summary().to_json_dict()
