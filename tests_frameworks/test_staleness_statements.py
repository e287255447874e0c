"""Every statement refimpl.frameworks makes about a framework's staleness setting, checked against the
installed framework code. Frameworks read only from their repositories (prime-rl, slime) are not
stated by refimpl.frameworks; the docs describe them, labelled as not checked."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest

import refimpl
from refimpl.frameworks import (
    TESTED_VERSIONS,
    adapter,
    areal_staleness_bound,
    framework_staleness_bound,
    installed_version,
    load_from_source,
    skyrl_staleness_bound,
    trl_staleness_bound,
    verl_off_policy_bound,
    verl_staleness_bound,
)


def test_the_installed_versions_are_the_ones_the_statements_were_read_from() -> None:
    found = {name: installed_version(name) for name in TESTED_VERSIONS}
    assert found == {name: version for name, (_, version) in TESTED_VERSIONS.items()}


def test_every_statement_names_the_version_it_was_read_from() -> None:
    for framework, setting in [
        ("areal", None),
        ("skyrl", None),
        ("trl", None),
        ("verl", "staleness_threshold"),
        ("verl", "max_off_policy_threshold"),
    ]:
        b = framework_staleness_bound(framework=framework, value=1, setting=setting)
        dist, version = TESTED_VERSIONS[framework]
        assert b.source.startswith(f"{dist} {version}: "), b.source


def test_every_framework_stated_about_is_installed_and_tested_here() -> None:
    """refimpl.frameworks states nothing about a framework that this stage does not install."""
    from refimpl import frameworks
    from refimpl.frameworks import _staleness

    assert set(_staleness._FRAMEWORKS) <= set(TESTED_VERSIONS)
    stated = {name.removesuffix("_staleness_bound").removesuffix("_off_policy_bound")
              for name in frameworks.__all__ if name.endswith("_bound")}  # fmt: skip
    assert stated - {"framework"} <= set(TESTED_VERSIONS), stated
    with pytest.raises(ValueError, match="framework"):
        framework_staleness_bound(framework="prime-rl", value=1)


# --- AReaL: max_head_offpolicyness, StalenessManager.get_capacity ------------------------------


class _Version:
    def __init__(self) -> None:
        self.version = 0

    def get_version(self) -> int:
        return self.version


def _areal_capacity(
    *, eta: int, version: int, batch: int, accepted: int, running: int, max_concurrent: int
) -> int:
    from areal.infra.staleness_manager import StalenessManager

    provider = _Version()
    provider.version = version
    manager = StalenessManager(provider, max_concurrent, batch, eta)
    manager.rollout_stat.accepted = accepted
    manager.rollout_stat.running = running
    capacity: int = manager.get_capacity()
    return capacity


def test_areal_capacity_is_admission_capacity() -> None:
    grid = itertools.product(range(3), range(3), range(1, 4), range(7), range(4), range(1, 5))
    for eta, v, b, acc, run, n in grid:
        kwargs: dict[str, Any] = {
            "eta": eta,
            "version": v,
            "batch": b,
            "accepted": acc,
            "running": run,
            "max_concurrent": n,
        }
        assert _areal_capacity(**kwargs) == refimpl.admission_capacity(**kwargs), kwargs
    assert areal_staleness_bound(max_head_offpolicyness=2).eta == 2


def test_areal_counts_a_batch_size_or_concurrency_of_zero_as_one() -> None:
    for eta, v, acc, run in itertools.product(range(2), range(2), range(3), range(3)):
        zero: dict[str, Any] = {"eta": eta, "version": v, "accepted": acc, "running": run}
        assert _areal_capacity(**zero, batch=0, max_concurrent=0) == refimpl.admission_capacity(
            **zero, batch=1, max_concurrent=1
        )
    assert "counts as 1" in areal_staleness_bound(max_head_offpolicyness=0).note


def test_areal_admission_trains_a_long_rollout_far_beyond_eta() -> None:
    """per_sample_bound=False: AReaL's manager, driven through a schedule, admits s >> η.

    η = 1, B = 2: a long rollout L is launched at version 0 and keeps running; short rollouts,
    launched whenever the real get_capacity() allows, fill every batch. L finishes after 6 steps
    and is trained at step 6: s = 6 > η.
    """
    from areal.infra.staleness_manager import StalenessManager

    eta, batch = 1, 2
    provider = _Version()
    manager = StalenessManager(provider, 100, batch, eta)
    manager.on_rollout_enqueued()
    manager.on_rollout_submitted()  # L, at version 0
    ready = 0  # finished short rollouts not yet trained
    for step in range(6):
        while manager.get_capacity() > 0:
            manager.on_rollout_enqueued()
            manager.on_rollout_submitted()
            manager.on_rollout_accepted()  # short: done before the step
            ready += 1
        assert ready >= batch
        ready -= batch
        provider.version = step + 1
    manager.on_rollout_accepted()  # L finishes now, trained at step 6
    staleness = provider.version - 0
    assert staleness == 6 > eta
    b = areal_staleness_bound(max_head_offpolicyness=eta)
    assert b.per_sample_bound is False
    assert b.enforced_at == "admission"


def test_areal_refuses_the_removed_behaviour_weight_keys() -> None:
    from areal.api.cli_args import _migrate_legacy_rejection_sampling
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"actor": {"behave_imp_weight_cap": 5.0}})
    with pytest.raises(Exception, match="rejection_sampling"):
        _migrate_legacy_rejection_sampling(cfg)


# --- SkyRL: max_staleness_steps, _AsyncStalenessManager (loaded from its installed file) -------


def test_skyrl_capacity_is_admission_capacity_with_g_the_one_based_step() -> None:
    manager_class: Any = load_from_source("skyrl.train.fully_async_trainer")[
        "_AsyncStalenessManager"
    ]
    grid = itertools.product(range(3), range(3), range(1, 4), range(7), range(4), range(1, 5))
    for eta, v, b, acc, run, n in grid:
        m = manager_class(
            max_concurrent_generation_groups=n, mini_batch_size=b, max_staleness_steps=eta
        )
        m._current_global_step = v + 1  # g: the step being worked on, 1-based
        m._stat.accepted, m._stat.running = acc, run
        expected = refimpl.admission_capacity(
            eta=eta, version=v, batch=b, accepted=acc, running=run, max_concurrent=n
        )
        assert m._compute_capacity_unlocked() == expected
    fresh = manager_class(
        max_concurrent_generation_groups=1, mini_batch_size=1, max_staleness_steps=0
    )
    assert fresh._current_global_step == 1  # a new manager works on step 1: g = v + 1 with v = 0
    bound = skyrl_staleness_bound(max_staleness_steps=4)
    assert (bound.eta, bound.enforced_at, bound.per_sample_bound) == (4, "admission", False)


# --- TRL: async max_staleness, RolloutQueueDataset -----------------------------------------------


def test_trl_drops_exactly_the_samples_with_s_above_max_staleness() -> None:
    import torch

    candidate = adapter("trl.async_max_staleness").candidate
    s = torch.arange(0, 9)
    for eta in range(6):
        kept = candidate(s, eta=eta)
        assert kept.tolist() == [1.0 if v <= eta else 0.0 for v in range(9)]
        b = trl_staleness_bound(max_staleness=eta)
        assert (b.eta, b.enforced_at, b.per_sample_bound) == (eta, "consumption", True)


def test_trl_async_config_defaults_to_a_max_staleness_of_four() -> None:
    from trl.experimental.async_grpo.async_grpo_config import AsyncGRPOConfig

    assert AsyncGRPOConfig.__dataclass_fields__["max_staleness"].default == 4


# --- verl: max_off_policy_threshold (v1 replay buffer) and staleness_threshold --------------------


def test_verl_max_off_policy_threshold_counts_versions_spanned() -> None:
    import torch

    candidate = adapter("verl.max_off_policy_threshold").candidate
    s = torch.arange(0, 10)
    for threshold in range(1, 7):
        kept = candidate(s, eta=threshold)
        b = verl_off_policy_bound(max_off_policy_threshold=threshold)
        assert b.eta == threshold - 1
        assert kept.tolist() == [1.0 if v <= b.eta else 0.0 for v in range(10)]
        assert kept.tolist() == refimpl.staleness_mask(s.numpy(), eta=b.eta).tolist()


def test_verl_refuses_a_threshold_of_zero_as_refimpl_does() -> None:
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync

    with pytest.raises(AssertionError, match="greater than 0"):
        ReplayBufferAsync("async", OmegaConf.create({}), 0, "drop", OmegaConf.create({}))
    with pytest.raises(ValueError, match="max_off_policy_threshold"):
        verl_off_policy_bound(max_off_policy_threshold=0)


def test_verl_default_max_off_policy_threshold_is_eight() -> None:
    import verl

    config = Path(verl.__file__).parent / "trainer" / "config" / "ppo_trainer.yaml"
    assert "max_off_policy_threshold: 8\n" in config.read_text(encoding="utf-8")


def test_verl_staleness_threshold_is_a_fraction_of_extra_samples_per_sync() -> None:
    from omegaconf import OmegaConf
    from verl.experimental.fully_async_policy.fully_async_rollouter import FullyAsyncRollouter

    rollouter_class = FullyAsyncRollouter.__ray_metadata__.modified_class

    class _Servers:
        def get_active_server_count(self) -> int:
            return 1000

    # set_max_required_samples prints one line: captured by pytest
    for required, threshold, trigger in itertools.product((4, 16), (0.0, 0.5, 1.0, 3.0), (1, 2)):
        r = object.__new__(rollouter_class)
        r.lock = asyncio.Lock()
        r.required_samples, r.staleness_threshold = required, threshold
        r.total_rollout_steps, r.concurrent_samples_per_replica = 1000, 1
        r.llm_server_manager = _Servers()
        r._active_count_history = []  # set by __init__ (a Ray actor's, not run here)
        r.config = OmegaConf.create({"async_training": {"trigger_parameter_sync_step": trigger}})
        asyncio.run(rollouter_class.set_max_required_samples(r))
        # samples per sync: what one sync consumes, plus the fraction `threshold` of it extra
        assert r.max_required_samples == int(required * (threshold + 1) * trigger)
    b = verl_staleness_bound(staleness_threshold=0.5)
    assert b.eta is None
    assert b.per_sample_bound is False
    assert b.enforced_at == "sync"
