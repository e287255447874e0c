"""What refimpl says about each RL framework, and adapters that check the framework's own functions.

Two parts, both read from the installed sources of the versions in :data:`TESTED_VERSIONS` and
tested against that installed code by the framework stage of CI (``.ci/frameworks``):

- **Staleness settings** (conventions §framework-settings): for a value of a framework's own
  setting, the ``η`` it corresponds to, where it is enforced and whether it bounds every sample
  (:func:`framework_staleness_bound` and one function per framework).
- **Adapters**: one per framework function and setting, mapping the framework's names and
  conventions onto a refimpl spec. ``check(key)`` runs the spec's conformance checks on the
  installed function in one call; :func:`adapters` lists them; ``refimpl conformance`` reruns the
  whole matrix (``docs/conformance-matrix.json``).

The adapters import a framework only when called, so ``import refimpl.frameworks`` needs none of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from refimpl.frameworks import (
    _areal,
    _areal_losses,
    _openrlhf,
    _openrlhf_losses,
    _skyrl,
    _skyrl_losses,
    _trl,
    _trl_losses,
    _verl,
    _verl_losses,
)
from refimpl.frameworks._areal import rejection_sampling_to_refimpl
from refimpl.frameworks._registry import (
    TESTED_VERSIONS,
    Adapter,
    Classification,
    Divergence,
    Partition,
    installed_version,
    load_function,
)
from refimpl.frameworks._staleness import (
    FrameworkStalenessBound,
    areal_staleness_bound,
    framework_staleness_bound,
    skyrl_staleness_bound,
    trl_staleness_bound,
    verl_off_policy_bound,
    verl_staleness_bound,
)
from refimpl.frameworks._stubs import (
    SOURCE_LOADS,
    STUBS,
    SourceLoad,
    Stub,
    install_stubs,
    load_from_source,
)

if TYPE_CHECKING:
    from refimpl.testing import ConformanceReport, PartitionReport

__all__ = [
    "SOURCE_LOADS",
    "STUBS",
    "TESTED_VERSIONS",
    "Adapter",
    "Classification",
    "Divergence",
    "FrameworkStalenessBound",
    "Partition",
    "SourceLoad",
    "Stub",
    "adapter",
    "adapters",
    "areal_staleness_bound",
    "check",
    "check_partition",
    "eager",
    "framework_staleness_bound",
    "install_stubs",
    "installed_version",
    "load_from_source",
    "load_function",
    "rejection_sampling_to_refimpl",
    "skyrl_staleness_bound",
    "trl_staleness_bound",
    "verl_off_policy_bound",
    "verl_staleness_bound",
]


def adapters(framework: str | None = None) -> tuple[Adapter, ...]:
    """Every shipped adapter, or those of one framework (a key of :data:`TESTED_VERSIONS`).

    Examples
    --------
    >>> from refimpl.frameworks import adapters
    >>> sorted({a.framework for a in adapters()})
    ['areal', 'openrlhf', 'skyrl', 'trl', 'verl']
    >>> all(a.key.startswith("verl.") for a in adapters("verl"))
    True
    """
    from refimpl._validation import invalid

    every = (
        *_verl.ADAPTERS,
        *_verl_losses.ADAPTERS,
        *_trl.ADAPTERS,
        *_trl_losses.ADAPTERS,
        *_areal.ADAPTERS,
        *_areal_losses.ADAPTERS,
        *_skyrl.ADAPTERS,
        *_skyrl_losses.ADAPTERS,
        *_openrlhf.ADAPTERS,
        *_openrlhf_losses.ADAPTERS,
    )
    if framework is None:
        return every
    if framework not in TESTED_VERSIONS:
        raise invalid(
            "framework",
            "be one of " + ", ".join(repr(f) for f in TESTED_VERSIONS),
            framework,
            "Pass one of these names, or None for every adapter.",
        )
    return tuple(a for a in every if a.framework == framework)


def adapter(key: str) -> Adapter:
    """The adapter named ``key`` (``"verl.rollout_is_token_tis"``, …; see :func:`adapters`).

    Examples
    --------
    >>> from refimpl.frameworks import adapter
    >>> a = adapter("verl.rollout_is_token_tis")
    >>> a.spec, a.conventions["log_ratio_clamp"]
    ('tis', 20.0)
    """
    from refimpl._validation import invalid

    found = {a.key: a for a in adapters()}
    if key not in found:
        raise invalid(
            "key",
            "name a shipped adapter",
            key,
            "List them with [a.key for a in refimpl.frameworks.adapters()].",
        )
    return found[key]


def check(key: str, **options: Any) -> ConformanceReport:
    """Check one framework function against refimpl, in one call: its adapter's spec and conventions.

    Runs :func:`refimpl.testing.check_conformance` on the installed function through the adapter
    ``key``, with arrays of the adapter's library (``Adapter.xp``: torch tensors, or jax arrays)
    in its dtype, its declared conventions, and the adapter's source as the reproduction's
    ``setup``.

    Parameters
    ----------
    key : str
        An adapter key (:func:`adapters`), e.g. ``"areal.rs_token_mask"``.
    **options
        Passed to :func:`refimpl.testing.check_conformance` (``dtype=``, ``max_examples=``,
        ``checks=``, …), overriding the adapter's defaults.

    Returns
    -------
    ConformanceReport

    Raises
    ------
    ValueError
        If ``key`` names no adapter.
    ModuleNotFoundError
        If the framework (or its array library) is not installed.

    Examples
    --------
    Needs the framework installed, so it is not run here::

        from refimpl.frameworks import check
        report = check("verl.rollout_is_token_tis")
        print(report)
    """
    from refimpl.testing import check_conformance

    a = adapter(key)
    load_function(a.function)  # fails here, naming the module, if the framework is missing
    kwargs: dict[str, Any] = {
        "spec": a.spec,
        "xp": a.xp,
        "dtype": a.dtype,
        "conventions": dict(a.conventions),
        "setup": a.setup,
    }
    if a.examples:
        kwargs["examples"] = a.examples
    kwargs.update(options)
    with eager(a.xp), a.held():
        return check_conformance(a.candidate, **kwargs)


def check_partition(key: str, **options: Any) -> PartitionReport:
    """Check one framework aggregation's real scaling path for partition invariance, in one call.

    Runs :func:`refimpl.testing.check_partition_invariance` on the adapter's
    :class:`Partition`: the framework's micro-batch loss called with the numbers its trainer
    passes (arrays of the adapter's ``xp``), accumulated over simulated ranks and accumulation
    steps by its scaling rule, against the full batch.

    Parameters
    ----------
    key : str
        An adapter key whose adapter has a ``partition`` (e.g. ``"verl.agg_loss_token_mean"``).
    **options
        Passed to :func:`refimpl.testing.check_partition_invariance` (``max_examples=``,
        ``dtype=``, …), overriding the adapter's.

    Returns
    -------
    PartitionReport

    Raises
    ------
    ValueError
        If ``key`` names no adapter, or one without a partition.
    ModuleNotFoundError
        If the framework (or torch) is not installed.

    Examples
    --------
    Needs the framework installed, so it is not run here::

        from refimpl.frameworks import check_partition
        print(check_partition("verl.agg_loss_token_mean"))
    """
    from refimpl._validation import invalid
    from refimpl.testing import check_partition_invariance

    a = adapter(key)
    if a.partition is None:
        with_one = [b.key for b in adapters() if b.partition is not None]
        raise invalid(
            "key",
            "name an adapter with a partition (an aggregation's scaling path)",
            key,
            f"Pass one of: {', '.join(with_one) or '(none shipped)'}.",
        )
    load_function(a.function)  # fails here, naming the module, if the framework is missing
    p = a.partition
    kwargs: dict[str, Any] = {
        "mode": p.mode,
        "rule": p.rule,
        "constant": p.constant,
        "empty_rows": p.empty_rows,
        "xp": a.xp,
        "dtype": a.dtype,
        "rtol": p.rtol,
    }
    if p.ratio != "token":
        kwargs["ratio"] = p.ratio
    kwargs.update(options)
    with eager(a.xp), a.held():
        return check_partition_invariance(p.candidate, **kwargs)


@contextmanager
def eager(xp: str = "torch") -> Iterator[None]:
    """Within the block, torch ignores ``torch.compile`` (``torch.compiler.set_stance("force_eager")``).

    Some framework functions are compiled (AReaL's ``gather_logprobs``, OpenRLHF's
    ``compute_entropy``): a compiled graph runs the same operations as the eager code, and
    compiling it costs about a minute per process on two CPU cores, recompiled for each new
    shape. The adapters are checked on the eager code; a torch without ``set_stance`` (before
    2.6) is left as it is. An adapter of another array library (``xp``, e.g. ``"jax.numpy"``)
    runs as it is, without importing torch.
    """
    if xp != "torch":
        yield
        return
    import torch

    stance = getattr(torch.compiler, "set_stance", None)
    if stance is None:
        yield
        return
    with stance("force_eager"):
        yield
