"""Bad calls to refimpl.sim and the messages they give (see tests/_validation_table.py).

Each case is ``(id, call, exception type, regex the message must match)``; every refusal must also
be an instance of :class:`refimpl.RefimplError`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.stats
from _validation_table import Case, as_any, check_refusal

from refimpl.sim import SimConfig, simulate


def _sim(**kw: Any) -> Any:
    base: dict[str, Any] = {"slots": 4, "batch": 4, "rollouts": 64}
    base.update(kw)
    return SimConfig(**base)


def _simulate(**kw: Any) -> Any:
    engine = kw.pop("engine", "auto")
    return simulate(_sim(**kw), engine=engine)


CASES: list[Case] = [
    Case("sim-batch-zero", lambda: _sim(batch=0), ValueError, r"batch must be >= 1.*got batch=0"),
    Case("sim-slots-zero", lambda: _sim(slots=0), ValueError, r"slots must be >= 1.*got slots=0"),
    Case("sim-slots-float", lambda: _sim(slots=2.5), TypeError, r"slots must be an integer"),
    Case(
        "sim-no-run-length",
        lambda: _sim(rollouts=None),
        ValueError,
        r"rollouts or steps must be given.*Pass rollouts=R",
    ),
    Case(
        "sim-steps-zero",
        lambda: _sim(rollouts=None, steps=0),
        ValueError,
        r"steps must be >= 1 \(trainer steps\); got steps=0",
    ),
    Case(
        "sim-rollouts-zero",
        lambda: _sim(rollouts=0),
        ValueError,
        r"rollouts must be >= 1 \(trained rollouts\); got rollouts=0",
    ),
    Case(
        "sim-steps-zero-with-rollouts",
        lambda: _sim(steps=0),
        ValueError,
        r"rollouts and steps must not both be given",
    ),
    Case(
        "sim-both-run-lengths",
        lambda: _sim(steps=3),
        ValueError,
        r"rollouts and steps must not both be given",
    ),
    Case(
        "sim-rollouts-below-batch",
        lambda: _sim(rollouts=3),
        ValueError,
        r"rollouts must be >= batch=4.*got rollouts=3",
    ),
    Case("sim-unknown-mode", lambda: _sim(mode="fifo"), ValueError, r"mode must be one of 'sync'"),
    Case(
        "sim-unknown-partial",
        lambda: _sim(partial="resume"),
        ValueError,
        r"partial must be one of .*'keep_kv'",
    ),
    Case(
        "sim-unknown-over-bound",
        lambda: _sim(eta=1, over_bound="clip"),
        ValueError,
        r"over_bound must be one of 'keep', 'drop'",
    ),
    Case(
        "sim-drop-without-eta",
        lambda: _sim(over_bound="drop"),
        ValueError,
        r"over_bound must be 'keep' when eta is None.*Pass eta",
    ),
    Case(
        "sim-admission-without-eta",
        lambda: _sim(mode="admission"),
        ValueError,
        r"eta must be given for mode='admission'",
    ),
    Case("sim-negative-eta", lambda: _sim(eta=-1), ValueError, r"eta must be >= 0"),
    Case(
        "sim-negative-prefill",
        lambda: _sim(prefill_time=-1.0),
        ValueError,
        r"prefill_time must be >= 0.*got prefill_time=-1.0",
    ),
    Case(
        "sim-zero-token-time",
        lambda: _sim(token_time=0.0),
        ValueError,
        r"token_time must be > 0",
    ),
    Case(
        "sim-negative-trainer-time",
        lambda: _sim(trainer_time=-2.0),
        ValueError,
        r"trainer_time must be >= 0",
    ),
    Case(
        "sim-trainer-law-negative",
        lambda: _sim(trainer_time=scipy.stats.norm()),
        ValueError,
        r"trainer_time must have support in \[0, inf\)",
    ),
    Case(
        "sim-launch-below-batch",
        lambda: _sim(mode="first_k", launch=2),
        ValueError,
        r"launch must be >= 4",
    ),
    Case(
        "sim-launch-outside-first-k",
        lambda: _sim(launch=5),
        ValueError,
        r"launch must be None unless mode='first_k'",
    ),
    Case(
        "sim-partial-in-sync",
        lambda: _sim(mode="sync", partial="restart"),
        ValueError,
        r"partial must be 'none' for mode='sync'",
    ),
    Case(
        "sim-preempt-without-duration",
        lambda: _sim(preempt_rate=0.1),
        ValueError,
        r"preempt_duration must be > 0 when preempt_rate > 0",
    ),
    Case(
        "sim-bad-slowdown",
        lambda: _sim(slowdown=lambda busy: 0.0),
        ValueError,
        r"slowdown must return a finite factor > 0.*slowdown\(1\) returned 0.0",
    ),
    Case(
        "sim-matrix-wrong-rows",
        lambda: _sim(lengths=np.ones((3, 10))),
        ValueError,
        r"(?s)lengths must have one row per slot \(slots=4 rows\).*got 3 rows",
    ),
    Case(
        "sim-matrix-nonpositive",
        lambda: _sim(lengths=np.zeros((4, 10))),
        ValueError,
        r"(?s)lengths must be > 0.*Entry \[0, 0\]",
    ),
    Case(
        "sim-matrix-nan",
        lambda: _sim(lengths=np.full((4, 10), float("nan"))),
        ValueError,
        r"lengths must contain only finite values",
    ),
    Case(
        "sim-pmf-not-normalised",
        lambda: _sim(lengths=np.array([0.5, 0.2])),
        ValueError,
        r"lengths must sum to 1.*divide every entry by the total",
    ),
    Case(
        "sim-lengths-string",
        lambda: _sim(lengths="lognormal"),
        TypeError,
        r"lengths must be None, a frozen scipy.stats law",
    ),
    Case(
        "sim-matrix-too-short",
        lambda: _simulate(lengths=np.ones((4, 3))),
        ValueError,
        r"lengths must hold every rollout.*K=3 columns.*slot \d needs at least \d+ lengths",
    ),
    Case(
        "sim-vector-engine-unsupported",
        lambda: _simulate(eta=0, over_bound="drop", engine="vector"),
        ValueError,
        r"engine must be 'event' or 'auto' for this config",
    ),
    Case(
        "sim-config-not-a-config",
        lambda: simulate(as_any({"slots": 4})),
        TypeError,
        r"config must be a SimConfig",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_call_raises_a_message_that_says_how_to_fix_it(case: Case) -> None:
    check_refusal(case)
