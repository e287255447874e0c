"""The agent kernel's second event queue: a first-in, first-out ring for events of one constant delay.

A tool call served by a warm container, with a constant service time and one attempt per call,
ends a constant ``warm + service`` after its admission. The kernel handles its events in time
order, so those end events come due in the order they were scheduled: a ring (row 1 of the heap's
arrays ``ht``, ``hk``, ``hp``; its head in ``hn[1]``, its size in ``hn[2]``) holds them in time
and key order without a heap's sifts, and the kernel takes whichever of the ring's head and the
heap's top orders first by ``(time, key)``. Keys are unique (their sequence numbers), so the events
come in exactly the order one heap would give: the same run, bit for bit; at 10^6 rollouts of two
tool calls each, two of the five million events skip the heap.

Compiled with numba into :mod:`refimpl.sim.agent._compiled`'s kernel, and run as plain Python by
the kernel's reference run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from refimpl.sim.agent._compiled_layout import _PRIO_SHIFT, _SEQ

__all__ = ["_fifo_first", "_fifo_pop", "_fifo_push"]


def _fifo_push(
    ht: Any, hk: Any, hp: Any, hn: Any, S: Any, t: float, prio: int, kind: int, ref: int
) -> None:
    """Schedule an event of the constant delay at the ring's tail: its key and payload as the
    heap's ``_push`` makes them (the next sequence number). The ring has room: the kernel pauses
    for more before it could fill."""
    seq = S[_SEQ] + 1
    S[_SEQ] = seq
    payload: Any = (np.int64(ref) << 34) | (np.int64(kind) << 2)
    cap = ht.shape[1]
    i = hn[1] + hn[2]
    if i >= cap:
        i -= cap
    ht[1, i] = t
    hk[1, i] = (np.int64(prio) << _PRIO_SHIFT) | seq
    hp[1, i] = payload
    hn[2] += 1


def _fifo_first(ht: Any, hk: Any, hn: Any) -> bool:
    """Whether the next event is the ring's head: the ring holds one, and the heap none or a
    later one by ``(time, key)``."""
    if hn[2] == 0:
        return False
    if hn[0] == 0:
        return True
    h = hn[1]
    tf, t0 = ht[1, h], ht[0, 0]
    return bool(tf < t0 or (tf == t0 and hk[1, h] < hk[0, 0]))


def _fifo_pop(ht: Any, hp: Any, hn: Any, out: Any) -> float:
    """Take the ring's head: its time returned, its payload decoded into ``out`` as the heap's
    ``_hpop`` decodes it."""
    h = hn[1]
    t = ht[1, h]
    payload = hp[1, h]
    out[0] = payload & 3
    out[1] = payload >> 34
    out[2] = (payload >> 2) & 0xFFFFFFFF
    h += 1
    if h == ht.shape[1]:
        h = 0
    hn[1] = h
    hn[2] -= 1
    return float(t)
