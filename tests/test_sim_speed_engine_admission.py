"""The engine loop's admission check (refimpl.sim.engine._loop._fits_plan).

Before it calls ``_resume`` or ``_launch``, the loop checks whether the next rollout fits, as they
check it: under memory pressure most boundaries end on one that does not, and the check costs less
than their call. The run must be the one without it (each of them deciding alone), bit for bit,
for engine runs of every kind: checked on the loop in plain Python, both ways in one process. The
check is shown to fail on a stricter one (a token more than the rollout holds).
"""

from __future__ import annotations

from typing import Any

from _wrong_variants import rejects
from hypothesis import given, note, settings
from test_sim_engine_limits import assert_same_outcome, engine_runs, event_loop_run

from refimpl.sim import SimConfig
from refimpl.sim.engine import _loop as L


def _always(*args: Any) -> bool:
    """No check: ``_resume`` and ``_launch`` decide alone, as before it."""
    return True


def _one_token_more(IS: Any, P: Any, PR: Any, cnt: Any, r: int, g: int) -> bool:
    """The wrong variant: a rollout needs room for one token more than it holds."""
    p, took, _, _ = L._prompt_plan(IS, P, PR, r)
    own = P[L._PROMPT] % P[L._BS] if p >= 0 else P[L._PROMPT]
    return L._fits(IS, P, cnt, took, own + g + 1)


def check_the_check_changes_nothing(cfg: SimConfig, fits_plan: Any = L._fits_plan) -> None:
    alone = event_loop_run(cfg, _fits_plan=_always)
    checked = event_loop_run(cfg, _fits_plan=fits_plan)
    assert_same_outcome(alone, checked)


@settings(max_examples=60, deadline=None)
@given(engine_runs())
def test_checking_admission_first_gives_the_same_run(cfg: SimConfig) -> None:
    note(repr(cfg))
    check_the_check_changes_nothing(cfg)


@given(engine_runs())
def _stricter_check_gives_the_same_run(cfg: SimConfig) -> None:
    check_the_check_changes_nothing(cfg, _one_token_more)


def test_the_check_rejects_an_admission_check_one_token_stricter() -> None:
    rejects(_stricter_check_gives_the_same_run)
