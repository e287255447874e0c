"""The binary heap of the compiled engines' events, in plain numbers (compiled with numba).

Heap ``w`` is row ``w`` of three arrays: ``ht`` the times, ``hk`` the keys (``(priority,
sequence)`` packed in one integer, so ties break as the reference engine's tuples do) and ``hp``
the payloads; ``hn[w]`` is its size. :mod:`refimpl.sim._compiled` and
:mod:`refimpl.sim.agent._compiled` compile :func:`_hpush` and :func:`_hpop` into their kernels.

Each kernel inlines these functions: its cache on disk is keyed by this file too
(:mod:`refimpl.sim._compiled_cache`), so a change here compiles the kernels again.
"""

from __future__ import annotations

from typing import Any

from refimpl.sim._compiled_cache import njit


def _siftup(ht: Any, hk: Any, hp: Any, w: int, i: int, t: float, key: int, payload: int) -> None:
    """Put ``(t, key, payload)`` into the hole at ``i`` of heap ``w``, moving it up past every
    parent that orders after it (the end of both a push and a pop)."""
    while i > 0:
        p = (i - 1) >> 1
        tp = ht[w, p]
        if tp < t or (tp == t and hk[w, p] < key):
            break
        ht[w, i] = tp
        hk[w, i] = hk[w, p]
        hp[w, i] = hp[w, p]
        i = p
    ht[w, i] = t
    hk[w, i] = key
    hp[w, i] = payload


_siftup_jitted = False


def jit_siftup() -> None:
    """Replace :func:`_siftup` by its compiled version, inlined where it is called (numba
    required): both heaps' kernels call this before compiling :func:`_hpush` and :func:`_hpop`,
    so that importing this module does not import numba."""
    global _siftup, _siftup_jitted
    if not _siftup_jitted:
        _siftup = njit(_siftup, error_model="numpy", _nrt=False, inline="always")
        _siftup_jitted = True


def _hpush(ht: Any, hk: Any, hp: Any, w: int, hn: Any, t: float, key: int, payload: int) -> bool:
    """Push ``(t, key)`` with its payload onto heap ``w``; ``False`` when it is full."""
    i = hn[w]
    if i >= ht.shape[1]:
        return False
    hn[w] = i + 1
    _siftup(ht, hk, hp, w, i, t, key, payload)
    return True


def _hpop(ht: Any, hk: Any, hp: Any, w: int, hn: Any, out: Any) -> float:
    """Pop the least ``(time, key)`` of heap ``w``; its kind, ref, gen go to ``out[0:3]``.

    Floyd's variant: the hole left at the root moves down to a leaf along the smaller children,
    and the last entry is sifted up from there: about half the comparisons of the textbook
    sift-down. The smaller child is chosen by its time alone, without a branch; only equal times
    (rare, but for whole-number times) take a branch to compare the keys, which keeps the keys'
    loads and comparisons off the path from one level to the next.
    """
    t0 = ht[w, 0]
    payload = hp[w, 0]
    out[0] = payload & 3
    out[1] = payload >> 34
    out[2] = (payload >> 2) & 0xFFFFFFFF
    n = hn[w] - 1
    hn[w] = n
    if n == 0:
        return float(t0)
    i = 0
    while True:
        c = 2 * i + 1
        if c + 1 < n:
            tc = ht[w, c]
            tr = ht[w, c + 1]
            if tr == tc:  # rare but for whole-number times: a branch the processor predicts
                c += hk[w, c + 1] < hk[w, c]
            else:
                c += tr < tc
        elif c >= n:
            break
        ht[w, i] = ht[w, c]
        hk[w, i] = hk[w, c]
        hp[w, i] = hp[w, c]
        i = c
    _siftup(ht, hk, hp, w, i, ht[w, n], hk[w, n], hp[w, n])
    return float(t0)
