"""The framework stage's tests: they import the installed frameworks, so they run only in .venv-fw.

``pytest tests_frameworks`` (what ``.ci/frameworks`` runs) collects them; the default ``pytest`` run
never does, because ``testpaths`` in pyproject.toml names only ``tests`` and ``refimpl``. Nothing
here is skipped: a framework that is missing fails the run.

The frameworks' own import-time warnings (their deprecations, CUDA probes) are theirs, not ours:
every module the tests use is imported once here with warnings ignored. Warnings raised while the
tests run are still errors (pyproject's filterwarnings).
"""

from __future__ import annotations

import importlib
import warnings

from refimpl.frameworks import adapters, install_stubs, load_function

#: Every framework module the tests and the adapters import.
FRAMEWORK_MODULES = (
    "torch",
    "omegaconf",
    "accelerate",
    "verl.trainer.ppo.rollout_corr_helper",
    "verl.trainer.ppo.v1.replay_buffer",
    "verl.experimental.fully_async_policy.fully_async_rollouter",
    "trl.experimental.async_grpo.async_grpo_trainer",
    "trl.experimental.async_grpo.async_grpo_config",
    "areal.api.cli_args",
    "areal.utils.functional",
    "areal.infra.staleness_manager",
    "skyrl.backends.skyrl_train.utils.off_policy_correction_utils",
    "verl.trainer.ppo.core_algos",
    "verl.utils.torch_functional",
    "verl.workers.config",
    "verl.trainer.config",
    "trl.trainer.grpo_trainer",
    "trl.trainer.rloo_trainer",
    "trl.trainer.utils",
    "trl.experimental.gmpo.gmpo_trainer",
    "openrlhf.models.loss",
    "openrlhf.models.utils",
    "openrlhf.utils.loss_utils",
    "areal.engine.fsdp_engine",
    "areal.trainer.ppo.actor",
    "megatron.core.pipeline_parallel",
)

install_stubs()
with warnings.catch_warnings():
    # Their import-time warnings include SyntaxWarnings of their own sources, raised when Python
    # first compiles them (the stage installs without byte-compiling).
    warnings.simplefilter("ignore")
    for _name in FRAMEWORK_MODULES:
        importlib.import_module(_name)
    # and every function an adapter calls, so that none is first met inside a test
    for _adapter in adapters():
        load_function(_adapter.function)
