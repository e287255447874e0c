"""The engine loop's completion calendar (refimpl.sim.engine._loop).

A step's completions wait in a list per step (bucket ``step % M``, ``M`` a power of two above the
longest length), appended in schedule order, where a binary heap keyed by (step, schedule number)
held them before (and still does past ``CALENDAR_MAX``). The run must be the heap's, bit for bit,
for engine runs of every kind (preemption, swapping, prefix sharing, the three partial policies):
checked on the loop in plain Python, both ways in one process. The check is shown to fail on a
calendar that puts a completion at the head of its bucket (the last scheduled first), and the
calendar's size is checked on hand-worked lengths.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _wrong_variants import rejects
from hypothesis import given, note, settings
from test_sim_engine_limits import assert_same_outcome, engine_runs, event_loop_run

from refimpl.sim import SimConfig
from refimpl.sim.engine import EngineModel, batching
from refimpl.sim.engine import _loop as L


def check_calendar_is_heap(cfg: SimConfig, **replaced: Any) -> None:
    """The run with the calendar (and loop functions replaced) is the heap's run."""
    heap = event_loop_run(cfg, CALENDAR_MAX=0)
    calendar = event_loop_run(cfg, **replaced)
    assert_same_outcome(heap, calendar)


@settings(max_examples=60, deadline=None)
@given(engine_runs())
def test_the_calendar_gives_the_heaps_run_bit_for_bit(cfg: SimConfig) -> None:
    note(repr(cfg))
    check_calendar_is_heap(cfg)


def _schedule_at_the_head(
    IS: Any, P: Any, R: Any, W: Any, WF: Any, H: Any, r: int, fin: int
) -> int:
    """The wrong variant: a completion put at the head of its step's bucket."""
    q = int(IS[L._SEQNO])
    IS[L._SEQNO] = q + 1
    W[L._SEQ, R[L._SLOT, r]] = q
    e = IS[L._EFREE]
    IS[L._EFREE] = H[4, 1, e]
    b = fin & (P[L._CAL] - 1)
    H[4, 0, e] = q * L.KEY + r
    H[4, 1, e] = H[3, 0, b]
    H[3, 0, b] = e
    if H[3, 1, b] < 0:
        H[3, 1, b] = e
    return q


def test_the_check_rejects_a_calendar_that_takes_a_steps_completions_last_first() -> None:
    # equal lengths: the rollouts launched together complete at the same step
    model = EngineModel(layers=1, kv_heads=1, head_dim=1, dtype_bytes=1, kv_memory_bytes=640)
    cfg = SimConfig(slots=4, batch=4, steps=3, lengths=np.full((4, 12), 5.0), engine_model=model)
    check_calendar_is_heap(cfg)
    rejects(check_calendar_is_heap, cfg, _schedule=_schedule_at_the_head)


@pytest.mark.parametrize(
    ("top", "size"),
    [(0, 2), (1, 2), (4, 8), (7, 8), (8, 16), (L.CALENDAR_MAX - 1, L.CALENDAR_MAX),
     (L.CALENDAR_MAX, 0)],
)  # fmt: skip
def test_the_calendar_has_a_power_of_two_of_buckets_above_the_longest_length(
    top: int, size: int
) -> None:
    lengths = np.zeros((2, 3), dtype=np.int64)
    lengths[1, 2] = top
    assert batching._calendar_size(lengths) == size
