"""The one list of import stubs, and of code loaded without its module, each with the reason.

A stub replaces a module that a framework's import chain executes but that the tested function never
uses (:data:`STUBS`, put in place by :func:`install_stubs`, idempotent, a no-op for a framework that
is not installed). A *source load* (:data:`SOURCE_LOADS`, :func:`load_from_source`) executes classes
taken from an installed framework file, unchanged, when that file's own imports cannot run here.
Nothing else in refimpl stubs a framework module or reads framework code.
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import os
import sys
import types
from dataclasses import dataclass
from typing import Any

__all__ = ["SOURCE_LOADS", "STUBS", "SourceLoad", "Stub", "install_stubs", "load_from_source"]


@dataclass(frozen=True)
class Stub:
    """A module replaced by an empty package that keeps the real directory as its ``__path__``.

    Attributes
    ----------
    framework : str
        The framework whose import chain it is in.
    package : str
        The package whose ``__init__`` is not executed; its submodules still load from their files.
    reason : str
        Why the tested code does not need it.
    absent : bool
        The package is not installed at all (an optional accelerator library the framework imports
        at the top of a file but uses only in code the tests never run): an empty module stands
        in for it, with a module spec so that ``importlib.util.find_spec`` works on it, and no
        distribution metadata, so that libraries which look it up (transformers'
        ``is_deepspeed_available``) still find it missing. Put in place only when the framework
        is installed and the package is not.
    """

    framework: str
    package: str
    reason: str
    absent: bool = False


STUBS: tuple[Stub, ...] = (
    Stub(
        framework="skyrl",
        package="skyrl.backends",
        reason=(
            "skyrl 0.3.0's skyrl/backends/__init__.py imports the Tinker backend (skyrl.backends.backend "
            "→ skyrl.tinker.types), whose pydantic models use typing.TypedDict, which pydantic refuses "
            "on Python < 3.12; the tested skyrl.backends.skyrl_train.utils.off_policy_correction_utils "
            "imports only torch, omegaconf and skyrl_train.utils.torch_utils. Its package __init__ is "
            "skipped; every module under it still loads from its installed file."
        ),
    ),
    Stub(
        framework="areal",
        package="areal.trainer",
        reason=(
            "areal 1.0.4's areal/trainer/__init__.py imports every trainer (DPOTrainer through "
            "stats_logger needs swanlab, which the pinned set does not install); the tested "
            "areal.trainer.ppo.actor (grpo_loss_fn, the M2PO masking) imports torch, areal.api, "
            "areal.infra and areal.utils only. Its package __init__ is skipped; every module "
            "under it still loads from its installed file."
        ),
    ),
    Stub(
        framework="openrlhf",
        package="openrlhf.models",
        reason=(
            "openrlhf 0.11.2's openrlhf/models/__init__.py imports actor.py, which imports "
            "ring_attn_utils.py and with it flash_attn (a CUDA build, not installable here); the "
            "tested openrlhf.models.loss and openrlhf.models.utils import only torch, deepspeed "
            "and each other. Its package __init__ is skipped; every module under it still loads "
            "from its installed file."
        ),
    ),
    Stub(
        framework="openrlhf",
        package="deepspeed",
        absent=True,
        reason=(
            "openrlhf 0.11.2's openrlhf/models/utils.py imports deepspeed at the top and uses it "
            "only inside set_z3_leaf_modules (ZeRO-3 model surgery), which no tested function "
            "calls; deepspeed is not installed (its ops need a CUDA build). The loss code's "
            "micro-batch scaling that DeepSpeed applies (1/gas) is written in the adapters, "
            "citing OpenRLHF's own docstring."
        ),
    ),
)


def install_stubs() -> None:
    """Put every stub of :data:`STUBS` in place (once; a framework that is not installed is left alone).

    Examples
    --------
    >>> from refimpl.frameworks import install_stubs
    >>> install_stubs()
    """
    for stub in STUBS:
        if stub.package in sys.modules:
            continue
        if stub.absent:
            _stand_in(stub)
            continue
        parent, _, _ = stub.package.rpartition(".")
        spec = importlib.util.find_spec(parent) if parent else None
        if spec is None or spec.origin is None:
            continue
        path = os.path.join(os.path.dirname(spec.origin), stub.package.rpartition(".")[2])
        if not os.path.isdir(path):
            continue
        module = types.ModuleType(stub.package, f"stub: {stub.reason}")
        module.__path__ = [path]
        sys.modules[stub.package] = module


def _stand_in(stub: Stub) -> None:
    """An empty module for a package that is not installed, when its framework is."""
    if importlib.util.find_spec(stub.framework) is None:
        return
    if importlib.util.find_spec(stub.package) is not None:
        return  # installed after all: the real one is used
    module = types.ModuleType(stub.package, f"stand-in: {stub.reason}")
    module.__spec__ = importlib.machinery.ModuleSpec(stub.package, None)
    sys.modules[stub.package] = module


@dataclass(frozen=True)
class SourceLoad:
    """Top-level classes executed from an installed framework file without importing its module.

    Attributes
    ----------
    framework : str
        The framework the file belongs to.
    source : str
        The module whose file is read (located with :func:`importlib.util.find_spec` on its
        package, never imported).
    names : tuple of str
        The top-level classes or functions executed, in order, from that file's source.
    imports : str
        The imports they need (the standard library's, or the framework's own importable
        modules), executed first.
    reason : str
        Why the module itself cannot be imported, and why the names need nothing else from it.
    """

    framework: str
    source: str
    names: tuple[str, ...]
    imports: str
    reason: str


SOURCE_LOADS: tuple[SourceLoad, ...] = (
    SourceLoad(
        framework="skyrl",
        source="skyrl.train.fully_async_trainer",
        names=("_RolloutStat", "_AsyncStalenessManager"),
        imports="import asyncio\nfrom dataclasses import dataclass",
        reason=(
            "skyrl 0.3.0's fully_async_trainer imports the Ray PPO trainer, skyrl_gym and "
            "skyrl.train.config, whose import reaches skyrl.tinker.types (pydantic refuses its "
            "typing.TypedDict on Python < 3.12). _RolloutStat (a dataclass of counters) and "
            "_AsyncStalenessManager (the capacity rule; asyncio only) use nothing else of the module."
        ),
    ),
    SourceLoad(
        framework="skyrl",
        source="skyrl.backends.skyrl_train.utils.ppo_utils",
        names=(
            "BaseFunctionRegistry",
            "AdvantageEstimator",
            "AdvantageEstimatorRegistry",
            "PolicyLossType",
            "PolicyLossRegistry",
            "register_advantage_estimator",
            "register_policy_loss",
            "compute_approx_kl",
            "masked_var",
            "masked_whiten",
            "ppo_policy_loss",
            "sapo_policy_loss",
            "gspo_policy_loss",
            "compute_policy_loss_cispo",
            "rollout_is_policy_loss",
            "dppo_policy_loss",
            "compute_policy_loss_clip_cov",
            "compute_policy_loss_kl_cov",
            "cross_entropy_loss",
            "importance_sampling_loss",
            "reduce_loss",
            "apply_loss_reduction_to_advantages_minibatch",
            "compute_reinforce_plus_plus_outcome_advantage",
            "compute_rloo_outcome_advantage",
            "compute_gae_advantage_return",
            "compute_grpo_outcome_advantage",
            "compute_maxrl_advantage",
            "AdaptiveKLController",
            "FixedKLController",
            "get_kl_controller",
        ),
        imports=(
            "from __future__ import annotations\n"
            "from collections import defaultdict\n"
            "from enum import StrEnum\n"
            "from functools import wraps\n"
            "from typing import Callable, List, Optional, Tuple, Union\n"
            "import numpy as np\n"
            "import ray\n"
            "import torch\n"
            "from loguru import logger\n"
            "from skyrl.backends.skyrl_train.utils.off_policy_correction_utils import "
            "apply_off_policy_correction\n"
            "from skyrl.backends.skyrl_train.utils.torch_utils import masked_mean, safe_exp_delta\n"
        ),
        reason=(
            "skyrl 0.3.0's ppo_utils imports skyrl.train.config (for AlgorithmConfig, an "
            "annotation only), whose config.py imports skyrl_gym, which is not installed with "
            "skyrl. The registries, the policy losses, the loss reduction and the advantage "
            "estimators need torch, numpy, ray, loguru and two importable skyrl utility modules; "
            "annotations stay unevaluated (from __future__ import annotations), and the "
            "registries' decorators run, so each loss is the registered one."
        ),
    ),
    SourceLoad(
        framework="skyrl",
        source="skyrl.tinker.loss_fns",
        names=(
            "LossFnConfig",
            "safe_loss_mask",
            "cross_entropy_loss",
            "importance_sampling_loss",
            "ppo_loss",
            "cispo_loss",
        ),
        imports="from dataclasses import dataclass\nimport jax\nimport jax.numpy as jnp\n",
        reason=(
            "skyrl 0.3.0's tinker/loss_fns.py (the JAX backend's per-token losses) imports "
            "LOSS_TYPES from skyrl.tinker.types, whose pydantic models use typing.TypedDict, which "
            "pydantic refuses on Python < 3.12; LOSS_TYPES only orders the LOSS_FUNCTIONS list "
            "that the backend's jax.lax.switch indexes. The loss config and the four losses need "
            "jax and dataclasses alone."
        ),
    ),
    SourceLoad(
        framework="openrlhf",
        source="openrlhf.trainer.ppo_utils.experience_maker",
        names=("RemoteExperienceMaker",),
        imports=(
            "import itertools\n"
            "from typing import List, Tuple\n"
            "import torch\n"
            "from openrlhf.models.utils import compute_approx_kl, compute_reward, masked_mean\n"
            "from openrlhf.trainer.ppo_utils.experience import Experience\n"
            "from openrlhf.trainer.ppo_utils.length_penalty import apply_length_penalties\n"
            "from openrlhf.utils.logging_utils import init_logger\n"
            "logger = init_logger('openrlhf.trainer.ppo_utils.experience_maker')\n"
            "RayActorGroup = object  # an annotation of __init__ only\n"
        ),
        reason=(
            "openrlhf 0.11.2's experience_maker imports openrlhf.trainer.ray (vllm) and, through "
            "its launcher, the Actor model (flash_attn) and the DeepSpeed strategy. "
            "RemoteExperienceMaker's advantage estimators (compute_advantages_and_returns, "
            "get_advantages_and_returns, get_cumulative_returns) use torch, the loss utilities "
            "and the Experience record, imported here from their own modules; its annotations "
            "name RayActorGroup, which nothing tested calls."
        ),
    ),
    SourceLoad(
        framework="skyrl",
        source="skyrl.backends.skyrl_train.workers.worker",
        names=("DistributedTorchRayActor", "Worker", "PolicyWorkerBase"),
        imports=(
            "from __future__ import annotations\n"
            "import logging\n"
            "import os\n"
            "import socket\n"
            "from collections import defaultdict\n"
            "from contextlib import contextmanager\n"
            "from typing import Any, Callable, Dict, List, Optional\n"
            "import ray\n"
            "import torch\n"
            "import torch.nn as nn\n"
            "from loguru import logger\n"
            "from omegaconf import OmegaConf\n"
            "from skyrl.backends.skyrl_train.utils.torch_utils import masked_mean\n"
            "from skyrl.backends.skyrl_train.workers.worker_utils import (\n"
            "    BaseBatchIterator, all_reduce_metrics,\n"
            "    compute_minibatch_rollout_logprob_diff_metrics, get_microbatch_iterator,\n"
            "    reduce_metrics)\n"
            "from refimpl.frameworks._stubs import load_from_source\n"
            "_ppo = load_from_source('skyrl.backends.skyrl_train.utils.ppo_utils')\n"
            "PolicyLossRegistry = _ppo['PolicyLossRegistry']\n"
            "compute_approx_kl = _ppo['compute_approx_kl']\n"
        ),
        reason=(
            "skyrl 0.3.0's workers/worker.py imports skyrl.train.config (TrainerConfig, an "
            "annotation only), whose config.py imports skyrl_gym, which the skyrl wheel ships "
            "only as a non-importable data folder. PolicyWorkerBase._forward_backward_micro "
            "(the policy loss, the KL and entropy terms, the micro-batch weighting) uses torch, "
            "masked_mean, the worker_utils metrics and ppo_utils' PolicyLossRegistry and "
            "compute_approx_kl, bound here to ppo_utils' own source load; its bases are loaded "
            "with it (their __init__ is never run)."
        ),
    ),
    SourceLoad(
        framework="skyrl",
        source="skyrl.train.trainer",
        names=("RayPPOTrainer",),
        imports=(
            "from __future__ import annotations\n"
            "import torch\n"
            "from skyrl.backends.skyrl_train.utils.torch_utils import masked_mean\n"
            "from refimpl.frameworks._stubs import load_from_source\n"
            "_ppo = load_from_source('skyrl.backends.skyrl_train.utils.ppo_utils')\n"
            "apply_loss_reduction_to_advantages_minibatch = "
            "_ppo['apply_loss_reduction_to_advantages_minibatch']\n"
            "compute_approx_kl = _ppo['compute_approx_kl']\n"
        ),
        reason=(
            "skyrl 0.3.0's train/trainer.py imports skyrl.train.config (skyrl_gym, not importable "
            "here) and, through skyrl.train.evaluate and the generators package, "
            "skyrl.tinker.types (pydantic refuses its typing.TypedDict on Python < 3.12). "
            "RayPPOTrainer._normalize_advantages (advantage_batch_normalize, then the loss "
            "reduction's pre-scaling per mini-batch) and apply_reward_kl_penalty (use_kl_in_reward) "
            "use torch, masked_mean and ppo_utils' apply_loss_reduction_to_advantages_minibatch "
            "and compute_approx_kl, bound here to ppo_utils' own source load; the class's "
            "decorators need torch alone."
        ),
    ),
    SourceLoad(
        framework="skyrl",
        source="skyrl.backends.skyrl_train.workers.megatron.megatron_model_wrapper",
        names=(
            "_build_packed_targets",
            "_build_packed_valid_mask",
            "_fused_lm_head_output_processor",
            "MegatronModelWrapper",
        ),
        imports=(
            "from __future__ import annotations\n"
            "from dataclasses import asdict\n"
            "from functools import partial\n"
            "from typing import Any, Callable, Dict, List, Optional\n"
            "import megatron.core.parallel_state as mpu\n"
            "import torch\n"
            "import torch.nn as nn\n"
            "from megatron.core.distributed import finalize_model_grads\n"
            "from megatron.core.pipeline_parallel import get_forward_backward_func\n"
            "from omegaconf import OmegaConf\n"
            "from skyrl.backends.skyrl_train.distributed.megatron.megatron_utils import (\n"
            "    get_model_config, make_batch_generator, model_packs_sequences_internally,\n"
            "    preprocess_packed_seqs, recover_left_padding, remove_left_padding,\n"
            "    to_te_attention_mask)\n"
            "from skyrl.backends.skyrl_train.distributed.megatron.model_utils import (\n"
            "    _fused_vocab_parallel_entropy_from_hidden,\n"
            "    from_parallel_hidden_to_entropy_packed_sequences,\n"
            "    from_parallel_hidden_to_logprobs,\n"
            "    from_parallel_hidden_to_logprobs_packed_sequences,\n"
            "    from_parallel_logits_to_logprobs,\n"
            "    from_parallel_logits_to_logprobs_packed_sequences,\n"
            "    vocab_parallel_entropy, vocab_parallel_entropy_packed_sequences)\n"
            "from skyrl.backends.skyrl_train.distributed.megatron.packing_utils import is_fp8_enabled\n"
            "from skyrl.backends.skyrl_train.mtp.adapter import project_mtp_hidden_to_logits\n"
            "from skyrl.backends.skyrl_train.mtp.hidden_capture import maybe_capture_mtp_hidden\n"
            "from skyrl.backends.skyrl_train.mtp.soft_ce import (\n"
            "    build_teacher_logits, draft_soft_ce, draft_soft_ce_topk, shift_mask_for_mtp,\n"
            "    unpadded_vocab_shard_width)\n"
            "from skyrl.backends.skyrl_train.utils.replay_utils import (\n"
            "    setup_per_microbatch_replay_backward, setup_per_microbatch_replay_forward)\n"
            "from skyrl.backends.skyrl_train.utils.torch_utils import masked_mean\n"
            "from skyrl.backends.skyrl_train.workers.worker_utils import (\n"
            "    compute_minibatch_rollout_logprob_diff_metrics)\n"
            "from refimpl.frameworks._stubs import load_from_source\n"
            "_ppo = load_from_source('skyrl.backends.skyrl_train.utils.ppo_utils')\n"
            "PolicyLossRegistry = _ppo['PolicyLossRegistry']\n"
            "compute_approx_kl = _ppo['compute_approx_kl']\n"
        ),
        reason=(
            "skyrl 0.3.0's workers/megatron/megatron_model_wrapper.py imports skyrl.train.config "
            "(TrainerConfig, an annotation only) and ppo_utils, whose imports reach skyrl_gym, which "
            "the skyrl wheel ships only as a non-importable data folder. "
            "MegatronModelWrapper.forward_backward_mini_batch (its loss_func: the policy loss, the KL "
            "and entropy terms and their micro-batch scaling, run by megatron.core's schedule) uses "
            "megatron.core, the wrapper's own megatron utilities and ppo_utils' PolicyLossRegistry "
            "and compute_approx_kl, bound here to ppo_utils' own source load."
        ),
    ),
)


def load_from_source(module: str) -> dict[str, Any]:
    """Execute the :data:`SOURCE_LOADS` entry for ``module``: its names, from the installed file.

    Executed once per process (a registry's decorators register each loss once; the adapters
    call this on every call): later calls return the same objects.

    Returns
    -------
    dict
        The names defined (each class or function exactly as written in the installed file).

    Raises
    ------
    ValueError
        If ``module`` has no entry in :data:`SOURCE_LOADS`.
    ModuleNotFoundError
        If the framework is not installed.
    """
    if module in _LOADED:
        return dict(_LOADED[module])
    from refimpl._validation import invalid

    entry = next((e for e in SOURCE_LOADS if e.source == module), None)
    if entry is None:
        raise invalid(
            "module",
            "have an entry in refimpl.frameworks.SOURCE_LOADS",
            module,
            "List it there, with the reason it cannot be imported.",
        )
    package, _, leaf = module.rpartition(".")
    spec = importlib.util.find_spec(package)
    # a namespace package (a folder without __init__.py, as SkyRL's workers/megatron) has no
    # origin: its folder is its one search location
    folder = None
    if spec is not None:
        folders = spec.submodule_search_locations or []
        folder = os.path.dirname(spec.origin) if spec.origin else next(iter(folders), None)
    if folder is None:
        raise ModuleNotFoundError(f"{package} is not installed", name=package)
    path = os.path.join(folder, f"{leaf}.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    nodes = {
        n.name: n
        for n in tree.body
        if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
    }
    body = ast.parse(entry.imports).body + [nodes[name] for name in entry.names]
    code = compile(ast.Module(body=body, type_ignores=[]), path, "exec")
    # A module object of its own (dataclasses look their class's module up in sys.modules), under a
    # name that cannot be mistaken for the framework's module.
    loaded = types.ModuleType(f"refimpl.frameworks.source_load:{module}", f"from {path}")
    loaded.__file__ = path
    sys.modules[loaded.__name__] = loaded
    exec(code, loaded.__dict__)
    _LOADED[module] = {name: loaded.__dict__[name] for name in entry.names}
    return dict(_LOADED[module])


#: What :func:`load_from_source` executed, by module.
_LOADED: dict[str, dict[str, Any]] = {}
