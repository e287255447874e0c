"""The engine loop's admission check (refimpl.sim.engine._loop._fits_plan).

Before it calls ``_resume`` or ``_launch``, the loop checks whether the next rollout fits, as they
check it: under memory pressure most boundaries end on one that does not, and the check costs less
than their call. The run must be the one without it (each of them deciding alone), bit for bit,
for engine runs of every kind: checked on the loop in plain Python, both ways in one process. The
check is shown to fail on a stricter one (a token more than the rollout holds).
"""

from __future__ import annotations

from typing import Any

import pytest
from _wrong_variants import rejects
from hypothesis import given, note, settings
from test_sim_engine_limits import _same, engine_runs

from refimpl.sim import SimConfig, simulate_engine
from refimpl.sim.engine import EngineRun
from refimpl.sim.engine import _loop as L


def _run(cfg: SimConfig, fits_plan: Any) -> EngineRun | None:
    """The loop in plain Python with ``fits_plan`` as its admission check; ``None`` when a
    sequence outgrows the budget."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(L, "_fits_plan", fits_plan)
        try:
            return simulate_engine(cfg, engine="event")
        except RuntimeError as err:
            if "cannot make progress" not in str(err):
                raise
            return None


def _always(*args: Any) -> bool:
    """No check: ``_resume`` and ``_launch`` decide alone, as before it."""
    return True


def _one_token_more(IS: Any, P: Any, PR: Any, cnt: Any, r: int, g: int) -> bool:
    """The wrong variant: a rollout needs room for one token more than it holds."""
    p, took, _, _ = L._prompt_plan(IS, P, PR, r)
    own = P[L._PROMPT] % P[L._BS] if p >= 0 else P[L._PROMPT]
    return L._fits(IS, P, cnt, took, own + g + 1)


def check_the_check_changes_nothing(cfg: SimConfig, fits_plan: Any = L._fits_plan) -> None:
    alone = _run(cfg, _always)
    checked = _run(cfg, fits_plan)
    assert (alone is None) == (checked is None)
    if alone is None or checked is None:
        return
    assert _same(alone.trace, checked.trace) == []
    assert alone.stats == checked.stats


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
