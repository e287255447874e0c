"""The engine loop compiled with numba: the very functions of :mod:`refimpl.sim.engine._loop`.

Each function of the loop is copied with a globals dictionary in which its helpers are the compiled
ones, then compiled, without numba's reference counting (the loop allocates nothing: its arrays,
heaps included, come from the caller, so a call costs no reference updates); so the compiled loop
runs the reference's code, operation for operation (inlining changes where code sits, not what it
computes), and the two agree bit for bit (tests/test_sim_engine_limits.py). Compiled once per
process, on first use, and cached on disk for the next process under a stamp of every file the
loop's code holds (:mod:`refimpl.sim._compiled_cache`).
"""

from __future__ import annotations

import types
from collections.abc import Callable

from refimpl.sim._aot import Kernel
from refimpl.sim._compiled_cache import AVAILABLE as _AVAILABLE
from refimpl.sim._compiled_cache import njit
from refimpl.sim.engine import _loop

AVAILABLE = _AVAILABLE  # numba installed (imported only when the loop is compiled or loaded)

__all__ = ["AVAILABLE", "compiled_loop", "runner"]

_FUNCTIONS = (
    "_cdiv",
    "_hpush",
    "_hpop",
    "_compact_newest",
    "_alloc",
    "_release_prompt",
    "_prompt_plan",
    "_acquire_prompt",
    "_fits",
    "_fits_plan",
    "_schedule",
    "_start",
    "_stop",
    "_launch",
    "_resume",
    "_admit",
    "_make_room",
    "_new_segment",
    "_interrupt",
    "_try_train",
    "_publish",
    "_complete",
    "_finish",
    "_step_time",
    "_account",
    "_advance",
    "_quiet",
    "_update",
    "run_loop",
)
#: Inlined where they are called (numba's own inlining): the helpers of every step, and the
#: functions a boundary calls, whose many array arguments made each call cost more than its work
#: (inlining these took the engine's time at 10^6 rollouts from 0.49 to 0.21 s of CPU with the
#: Qwen2.5-7B/H100 preset, and from 1.06 to 0.54 s under memory pressure, and its first
#: compilation from 53 s to 26 s: fewer functions to compile). Admission's launch and resumption
#: are inlined too, at each of ``_admit``'s sites: each call passed 16 arrays (over a hundred
#: fields in numba's calling convention) for a few dozen operations; under 8 GiB, 2.2 million of
#: them at 10^6 rollouts, the loop went from 0.27 to 0.22 s of CPU, its first compilation took
#: 32 s of CPU (an empty cache, a loaded machine). The rest stay calls: a weight update's (rare),
#: the stack's compaction, and the shared prompts' and version segments' bookkeeping.
_INLINE = frozenset(
    {
        "_cdiv", "_fits", "_fits_plan", "_quiet", "_advance", "_account", "_step_time", "_alloc",
        "_hpush", "_hpop", "_schedule", "_prompt_plan", "_start", "_stop",
        "_complete", "_finish", "_try_train", "_publish", "_make_room", "_admit", "_launch", "_resume",
    }
)  # fmt: skip
_compiled: dict[str, Callable[..., None]] = {}


def compiled_loop() -> Callable[..., None]:
    """``run_loop`` compiled (numba required)."""
    if not AVAILABLE:
        raise RuntimeError("the compiled engine needs numba: pip install 'refimpl[fast]'")
    if "run_loop" not in _compiled:
        space = dict(vars(_loop))
        for name in _FUNCTIONS:
            f = getattr(_loop, name)
            copy = types.FunctionType(f.__code__, space, name, f.__defaults__)
            inline = "always" if name in _INLINE else "never"
            # cached on disk under a stamp of every file the loop's code holds (_loop.py and the
            # modules its constants come from), not of _loop.py alone as numba's own cache=True
            space[name] = njit(copy, error_model="numpy", _nrt=False, inline=inline)
        _compiled["run_loop"] = space["run_loop"]
    return _compiled["run_loop"]


#: ``run_loop`` ahead of time compiled where it can be (:mod:`refimpl.sim._aot`: no numba imported),
#: else :func:`compiled_loop`'s.
runner = Kernel(_loop.run_loop, "refimpl.sim.engine._kernel:compiled_loop", compiled_loop)
