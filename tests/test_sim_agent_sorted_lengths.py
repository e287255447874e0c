"""The compiled agent engine's launched lengths sorted while its kernel runs
(refimpl.sim.agent._compiled_lengths).

The summary's trained lengths, sorted, are the sorted draws of the length law without the draws
not launched and the launched lengths not trained: the same array as sorting the trained lengths,
ties included. Checked: the multiset difference of sorted arrays on drawn samples full of ties;
the sorted launched lengths across several chunks of draws (the kernel ran short and the driver
drew more) for every count of launches; and whole runs, whose summary must be the reference
engine's bit for bit (integer lengths, drops over the staleness bound, almost no room at first so
that the draws come in many chunks). Rejected wrong variants: equal values removed at one place
(one copy too few removed), the chunks drawn later left out, and the run's summary with that
wrong removal.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest
import scipy.stats as st
from _wrong_variants import rejects
from hypothesis import given
from hypothesis import strategies as hst
from numpy.typing import NDArray

from refimpl.sim.agent import AgentConfig, _results, simulate_agent
from refimpl.sim.agent import _compiled as agent_compiled
from refimpl.sim.agent._compiled_lengths import SortedDraws, without


@hst.composite
def _multisets(draw: Any) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """Values with many ties (a few distinct integers, or continuous) and a mask of those to
    remove."""
    n = draw(hst.integers(0, 400))
    rng = np.random.default_rng(draw(hst.integers(0, 2**32 - 1)))
    if draw(hst.booleans()):
        values = rng.integers(1, draw(hst.integers(1, 8)) + 1, size=n).astype(np.float64)
    else:
        values = rng.lognormal(2.0, 1.0, size=n)
    return values, rng.random(n) < draw(hst.sampled_from([0.0, 0.1, 0.5, 1.0]))


def _check_without(remove: Any) -> Any:
    @given(_multisets())
    def prop(sample: tuple[NDArray[np.float64], NDArray[np.bool_]]) -> None:
        values, gone = sample
        got = remove(np.sort(values), np.sort(values[gone]))
        assert got.tobytes() == np.sort(values[~gone]).tobytes()

    return prop


def _without_one_place_per_value(
    ordered: NDArray[np.float64], values: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Wrong: every copy of a value removed at the first one's place (removes it once)."""
    out: NDArray[np.float64] = np.delete(ordered, np.searchsorted(ordered, values, side="left"))
    return out


def test_removing_values_from_a_sorted_array_is_the_sorted_difference() -> None:
    _check_without(without)()
    rejects(_check_without(_without_one_place_per_value))


def _check_sorted_launched(add: Any) -> Any:
    @given(
        sizes=hst.lists(hst.integers(1, 300), min_size=1, max_size=5),
        seed=hst.integers(0, 2**32 - 1),
        data=hst.data(),
    )
    def prop(sizes: list[int], seed: int, data: Any) -> None:
        rng = np.random.default_rng(seed)
        chunks = [rng.integers(1, 6, size=k).astype(np.float64) for k in sizes]
        draws = SortedDraws(chunks[0], lambda: None)
        for chunk in chunks[1:]:
            add(draws, chunk)
        n = data.draw(hst.integers(0, sum(sizes)))
        assert draws.launched(n).tobytes() == np.sort(np.concatenate(chunks)[:n]).tobytes()

    return prop


def _add_nothing(draws: SortedDraws, chunk: NDArray[np.float64]) -> None:
    """Wrong: a chunk drawn later is not recorded."""


def test_the_launched_lengths_come_sorted_across_chunks_of_draws() -> None:
    _check_sorted_launched(SortedDraws.add)()
    rejects(_check_sorted_launched(_add_nothing))


_TIED = AgentConfig(
    slots=5, batch=4, steps=40, lengths=st.randint(1, 6), turns=1, tool_latency=1.0, eta=1,
    shards=2, capacity=2, seed=11,
)  # fmt: skip


def _check_same_summary_as_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """Integer lengths (ties), drops, and a first room of one row (many chunks of draws)."""
    reference = simulate_agent(_TIED, engine="event").summary
    for first in (None, (1, 1, 1, 1, 1, 1)):
        with monkeypatch.context() as m:
            if first is not None:
                m.setattr(agent_compiled, "_first_sizes", lambda cfg, f=first: f)
            run = simulate_agent(_TIED, engine="compiled").summary
        for name, u in reference._asdict().items():
            v = getattr(run, name)
            assert u == v or (isinstance(u, float) and math.isnan(u) and math.isnan(v)), name


def test_the_compiled_runs_summary_is_the_references(monkeypatch: pytest.MonkeyPatch) -> None:
    assert simulate_agent(_TIED, engine="event").summary.rollouts_dropped > 0
    _check_same_summary_as_the_reference(monkeypatch)
    monkeypatch.setattr(_results, "without", _without_one_place_per_value)
    rejects(_check_same_summary_as_the_reference, monkeypatch)


def test_a_length_matrix_has_no_sorted_draws() -> None:
    cfg = dataclasses.replace(_TIED, lengths=np.ones((5, 200)), eta=None)
    from refimpl.sim.agent._compiled import run_agent_compiled

    assert run_agent_compiled(cfg).sorted_lengths is None


def test_a_long_run_leaves_the_sort_to_the_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past SORT_AHEAD_ROWS rollouts nothing is sorted ahead, and the summary is the same."""
    from refimpl.sim.agent import _compiled_run
    from refimpl.sim.agent._compiled import run_agent_compiled

    ahead = simulate_agent(_TIED, engine="compiled").summary
    monkeypatch.setattr(_compiled_run, "SORT_AHEAD_ROWS", 10)
    assert run_agent_compiled(_TIED).sorted_lengths is None
    assert simulate_agent(_TIED, engine="compiled").summary == ahead
