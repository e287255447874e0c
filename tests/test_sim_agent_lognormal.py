"""The agent command line's lognormal length law (``refimpl.sim.agent._lognormal``) without scipy.

``refimpl simulate --tool-turns ...`` used to build ``scipy.stats.lognorm(s=sigma,
scale=exp(mu))``; importing scipy.stats cost a fresh call more than its run. The replacement must
draw the same numbers bit for bit with the same generator (so every trace of a call stays what it
was), and its distribution functions must be the lognormal's. The wrong variant the draw property
must reject is numpy's own ``Generator.lognormal``: the same law, rounded differently.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from typing import Any

import numpy as np
import pytest
import scipy.stats as st
from _wrong_variants import rejects, run_property
from hypothesis import given, settings
from hypothesis import strategies as hst

from refimpl.errors import InvalidArgument
from refimpl.sim.agent import AgentResult, _compiled_run, agent_config_from_args, simulate_agent
from refimpl.sim.agent._cli import configure_agent_options
from refimpl.sim.agent._lognormal import LognormalLaw

MUS = hst.floats(min_value=-30.0, max_value=30.0, allow_nan=False)
SIGMAS = hst.floats(min_value=1e-3, max_value=6.0, allow_nan=False)
SEEDS = hst.integers(min_value=0, max_value=2**32 - 1)
SIZES = hst.sampled_from([1, 7, 512, (3, 5)])


class _NumpyLognormal(LognormalLaw):
    """Wrong: numpy's ``Generator.lognormal``, ``exp(mu + sigma z)``, not ``exp(sigma z) e^mu``."""

    def rvs(self, size: int | tuple[int, ...] = 1, random_state: Any = None) -> Any:
        return random_state.lognormal(self.mu, self.sigma, size=size)


def check_draws_are_scipys(law_type: type[LognormalLaw]) -> Any:
    """The property: ``rvs`` gives scipy's lognorm draws, bit for bit, block after block."""

    @given(mu=MUS, sigma=SIGMAS, seed=SEEDS, size=SIZES)
    def prop(mu: float, sigma: float, seed: int, size: int | tuple[int, ...]) -> None:
        ours, theirs = law_type(mu=mu, sigma=sigma), st.lognorm(s=sigma, scale=math.exp(mu))
        g1, g2 = np.random.default_rng(seed), np.random.default_rng(seed)
        for _ in range(2):  # the second block continues the same stream
            a = np.asarray(ours.rvs(size=size, random_state=g1))
            b = np.asarray(theirs.rvs(size=size, random_state=g2))
            assert a.dtype == b.dtype == np.float64
            assert a.shape == b.shape
            assert a.tobytes() == b.tobytes(), (mu, sigma, seed)

    return prop


def test_draws_are_scipys_bit_for_bit() -> None:
    run_property(settings(max_examples=60, deadline=None)(check_draws_are_scipys(LognormalLaw)))


def test_the_draw_check_rejects_numpys_lognormal() -> None:
    rejects(check_draws_are_scipys(_NumpyLognormal))


def check_compiled_draws_are_the_chunks(more: Any) -> Any:
    """The property: the compiled engine's length draws (``_Draws.more``, one call for a
    lognormal law) are the reference's ``rvs(size=512)`` chunks, refill after refill, and leave
    the generator where the chunks leave it."""

    @given(mu=MUS, sigma=SIGMAS, seed=SEEDS, sizes=hst.lists(hst.integers(1, 3000), max_size=4))
    def prop(mu: float, sigma: float, seed: int, sizes: list[int]) -> None:
        law = LognormalLaw(mu=mu, sigma=sigma)
        g1, g2 = np.random.default_rng(seed), np.random.default_rng(seed)
        draws = _compiled_run._Draws(law, g1, np.float64)
        for n in sizes:
            got = more(draws, n)
            chunks = [law.rvs(size=512, random_state=g2) for _ in range(-(-n // 512))]
            assert got.dtype == np.float64
            assert got.tobytes() == np.concatenate(chunks).tobytes(), (mu, sigma, seed, n)
        assert g1.bit_generator.state == g2.bit_generator.state

    return prop


def _more_of_exactly_n(draws: Any, n: int) -> Any:
    """Wrong: ``n`` draws, not whole chunks (the next refill starts mid-chunk)."""
    return draws.law.rvs(size=n, random_state=draws.gen)


def test_the_compiled_engines_lognormal_draws_are_the_references_chunks() -> None:
    run_property(check_compiled_draws_are_the_chunks(_compiled_run._Draws.more))
    rejects(check_compiled_draws_are_the_chunks(_more_of_exactly_n))


def test_hand_worked_values() -> None:
    law = LognormalLaw(mu=6.0, sigma=1.0)
    # the median is e^mu, exactly, and the cdf there is 1/2 (erfc(0) = 1)
    assert float(law.ppf(0.5)) == math.exp(6.0)
    assert float(law.cdf(math.exp(6.0))) == 0.5
    assert float(law.ppf(0.0)) == 0.0
    assert float(law.ppf(1.0)) == math.inf
    assert float(law.cdf(0.0)) == 0.0
    assert float(law.cdf(-1.0)) == 0.0
    assert float(law.pdf(0.0)) == 0.0
    # E[L] = e^(mu + sigma^2/2) = e^6.5
    assert float(law.mean()) == pytest.approx(math.exp(6.5), rel=4e-16)
    assert law.support() == (0.0, math.inf)
    assert repr(law) == "LognormalLaw(mu=6.0, sigma=1.0)"


@settings(max_examples=40, deadline=None)
@given(mu=MUS, sigma=SIGMAS, q=hst.floats(min_value=1e-6, max_value=1 - 1e-6))
def test_distribution_functions_are_the_lognormals(mu: float, sigma: float, q: float) -> None:
    ours, theirs = LognormalLaw(mu=mu, sigma=sigma), st.lognorm(s=sigma, scale=math.exp(mu))
    x = float(theirs.ppf(q))
    # a few ulps of float64 on values of order 1 (each side rounds log, erfc and exp once or twice)
    assert float(ours.ppf(q)) == pytest.approx(x, rel=1e-12)
    assert float(ours.cdf(x)) == pytest.approx(float(theirs.cdf(x)), rel=1e-12, abs=1e-300)
    assert float(ours.pdf(x)) == pytest.approx(float(theirs.pdf(x)), rel=1e-10, abs=1e-300)
    assert float(ours.mean()) == pytest.approx(float(theirs.mean()), rel=1e-13)


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"mu": 0.0, "sigma": 0.0}, "sigma must be > 0"),
        ({"mu": math.nan, "sigma": 1.0}, "mu must be finite"),
        ({"mu": 800.0, "sigma": 1.0}, "mu must give a median exp(mu) that float64 holds"),
    ],
)
def test_bad_parameters_are_refused_naming_them(fields: dict[str, float], says: str) -> None:
    with pytest.raises(InvalidArgument, match=says.replace("(", r"\(").replace(")", r"\)")):
        LognormalLaw(**fields)


def test_a_probability_outside_the_unit_interval_is_refused() -> None:
    with pytest.raises(InvalidArgument, match=r"q must lie in \[0, 1\]"):
        LognormalLaw(mu=0.0, sigma=1.0).ppf(1.5)


def _cli_config(argv: list[str]) -> Any:
    p = argparse.ArgumentParser()
    configure_agent_options(p, standalone=True)
    return agent_config_from_args(p.parse_args(argv))


def _same_run(a: AgentResult, b: AgentResult) -> None:
    for name in a.rollouts._fields:
        x, y = getattr(a.rollouts, name), getattr(b.rollouts, name)
        assert x.dtype == y.dtype, name
        assert x.tobytes() == y.tobytes(), name
    assert a.summary == b.summary


@pytest.mark.parametrize("engine", ["event", "compiled"])
def test_the_commands_default_lengths_give_the_scipy_laws_run(engine: str) -> None:
    # the command line's law against scipy's, same options: every rollout and the summary agree
    cfg = _cli_config(
        ["--slots", "8", "--batch", "16", "--steps", "12", "--seed", "3", "--mu", "4",
         "--sigma", "1.5", "--tool-turns", "2", "--tool-latency", "expon:scale=20",
         "--tool-shards", "2", "--tool-capacity", "3"]
    )  # fmt: skip
    assert isinstance(cfg.lengths, LognormalLaw)
    scipy_cfg = dataclasses.replace(cfg, lengths=st.lognorm(s=1.5, scale=math.exp(4.0)))
    _same_run(simulate_agent(cfg, engine=engine), simulate_agent(scipy_cfg, engine=engine))  # type: ignore[arg-type]
