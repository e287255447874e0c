"""The frameworks refimpl tests, the versions it read them from, and the adapters' record type."""

from __future__ import annotations

import importlib
import importlib.metadata
import warnings
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from refimpl.frameworks._stubs import SOURCE_LOADS, STUBS, install_stubs, load_from_source

__all__ = [
    "TESTED_VERSIONS",
    "Adapter",
    "Classification",
    "Divergence",
    "Partition",
    "installed_version",
    "load_function",
]

#: Each framework's distribution on PyPI and the version every statement and adapter in
#: :mod:`refimpl.frameworks` was read from and is tested against (ci/frameworks-requirements.txt).
TESTED_VERSIONS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "verl": ("verl", "0.9.1"),
        "trl": ("trl", "1.16.0"),
        "areal": ("areal", "1.0.4"),
        "skyrl": ("skyrl", "0.3.0"),
        "openrlhf": ("openrlhf", "0.11.2"),
    }
)

Classification = Literal["convention", "numerical limit", "defect"]


def installed_version(framework: str) -> str | None:
    """The installed version of ``framework`` (a key of :data:`TESTED_VERSIONS`), or ``None``.

    Examples
    --------
    >>> from refimpl.frameworks import installed_version
    >>> installed_version("no-such-framework") is None
    True
    """
    dist = TESTED_VERSIONS.get(framework, (framework, ""))[0]
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def load_function(path: str) -> Any:
    """Import ``"package.module:attribute.attribute"`` after the stubs are in place.

    A module listed in :data:`refimpl.frameworks.SOURCE_LOADS` is not imported: the attribute is
    taken from its installed file by :func:`refimpl.frameworks.load_from_source`.

    Examples
    --------
    >>> from refimpl.frameworks import load_function
    >>> load_function("math:floor")(2.5)
    2
    """
    install_stubs()
    module_name, _, attribute = path.partition(":")
    parts = attribute.split(".") if attribute else []
    # A framework's import-time warnings (ray's deprecations under verl, say) are the framework's:
    # in a test session that turns warnings into errors they would stop the import of a function
    # that works, so they are not raised here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if any(entry.source == module_name for entry in SOURCE_LOADS):
            # executed from the installed file (its module cannot be imported: SOURCE_LOADS says why)
            obj: Any = load_from_source(module_name)[parts[0]]
            parts = parts[1:]
        else:
            obj = importlib.import_module(module_name)
    for part in parts:
        obj = getattr(obj, part)
    return obj


@dataclass(frozen=True)
class Divergence:
    """Why a framework function fails a check of its spec under its declared conventions.

    Attributes
    ----------
    classification : {"convention", "numerical limit", "defect"}
        A convention the oracle cannot declare (a different but deliberate rule), a limit of the
        framework's arithmetic (a precision, an epsilon), or a defect a maintainer would fix.
    explanation : str
        What differs and where in the framework's code, in a sentence or two.
    """

    classification: Classification
    explanation: str
    draft_report: str = ""


@dataclass(frozen=True)
class Partition:
    """A framework's real scaling path for one aggregation mode, checked for partition invariance.

    The candidate is the framework's loss on one micro-batch, called as its trainer calls it
    (:func:`refimpl.testing.check_partition_invariance`): ``candidate(logp, logp_old, advantages,
    mask, *, global_tokens, global_sequences, accumulation_steps, world_size)``, each keyword
    accepted only where the trainer passes the framework that number.

    Attributes
    ----------
    candidate : callable
        The micro-batch loss through the framework's own aggregation and scale factors. Its
        source is self-contained (imports inside), as an adapter's is.
    mode : str
        The aggregation mode (:data:`refimpl.losses.aggregation.AGGREGATION_MODES`).
    rule : str or ScalingRule
        The framework's scaling rule: a preset of :data:`refimpl.losses.partition.SCALING_RULES`
        or a :class:`refimpl.losses.partition.ScalingRule` read from its trainer.
    constant : float or None
        Dr GRPO's ``H`` for ``token_sum_norm``.
    empty_rows : {"excluded", "counted"}
        Whether the framework counts rows without a valid token as sequences.
    trainer : str
        Where the framework's trainer computes the counts and scale factors passed (file and
        function), and which ones it passes.
    divergences : mapping
        Check name (``finite``, ``gradient``, ``value``) → :class:`Divergence`.
    rtol : float or None
        The comparisons' relative tolerance, where the framework adds an epsilon to a
        denominator (see :func:`refimpl.testing.check_partition_invariance`).
    ratio : {"token", "sequence"}
        The loss's importance ratio: one per token, or one per sequence (the
        sequence-likelihood ratio, TRL's ``RLOOTrainer``): which PPO surrogate the partition
        check's reference aggregates.
    """

    candidate: Callable[..., Any]
    mode: str
    rule: Any = "verl"
    constant: float | None = None
    empty_rows: str = "excluded"
    trainer: str = ""
    divergences: Mapping[str, Divergence] = field(default_factory=dict)
    rtol: float | None = None
    ratio: str = "token"


@dataclass(frozen=True)
class Adapter:
    """One framework function, at one setting, mapped onto one refimpl spec.

    Attributes
    ----------
    key : str
        Stable id, ``"<framework>.<name>"``: what :func:`refimpl.frameworks.check` and
        ``refimpl conformance`` take.
    framework : str
        A key of :data:`TESTED_VERSIONS`.
    function : str
        The framework function under test, ``"module:qualname"`` (imported, never transcribed).
    settings : mapping
        The framework's own settings this adapter calls it with, under the framework's names.
    spec : str
        The refimpl spec (:func:`refimpl.testing.spec_names`).
    conventions : mapping
        The declared conventions (:func:`refimpl.testing.conventions`), each read from the
        framework's code.
    candidate : callable
        The adapter: the spec's signature on arrays of ``xp`` in, the framework's result out. Its
        source is self-contained (imports inside), so a reproduction can paste it.
    divergences : mapping
        Check name → :class:`Divergence`, for the checks it is known to fail under its conventions.
    dtype : str
        The precision of the inputs it is checked in.
    xp : str
        The array library the framework function computes in, and so the one the inputs are
        given in (``check_conformance(xp=...)``): ``"torch"`` (default) or ``"jax.numpy"``
        (SkyRL's JAX backend). Its autograd differentiates the candidate, and the
        reproduction, the partition check and the matrix entry name it.
    note : str
        What the mapping does, in a sentence.
    max_examples : int or None
        Hypothesis examples per check in the matrix, when the default finds too little (a
        divergence that needs more draws to be met).
    examples : tuple of list
        Inputs every check tries before its search (``check_conformance(examples=...)``): a
        divergence read in the code and shown by one of them is found by every run, whatever
        the search draws.
    partition : Partition or None
        For an aggregation (or an aggregated loss): the framework's real scaling path across
        micro-batches, accumulation steps and ranks, checked by
        :func:`refimpl.testing.check_partition_invariance`.
    session : callable or None
        A context manager factory entered once around the adapter's whole check and partition
        check: state the candidate sets up on every call, held for the run instead (SkyRL's
        Megatron copy starts a gloo process group per call, and gloo's teardown waits about
        0.1 s). The candidate must not need it: its reproduction calls it without the session.
    """

    key: str
    framework: str
    function: str
    settings: Mapping[str, Any]
    spec: str
    conventions: Mapping[str, Any]
    candidate: Callable[..., Any]
    divergences: Mapping[str, Divergence] = field(default_factory=dict)
    dtype: str = "float64"
    xp: str = "torch"
    note: str = ""
    max_examples: int | None = None
    examples: tuple[list[tuple[tuple[Any, ...], dict[str, Any]]], ...] = ()
    partition: Partition | None = None
    session: Callable[[], AbstractContextManager[Any]] | None = None

    def held(self) -> AbstractContextManager[Any]:
        """The adapter's :attr:`session`, or a block that does nothing when it has none."""
        import contextlib

        return contextlib.nullcontext() if self.session is None else self.session()

    @property
    def setup(self) -> str:
        """Python that defines ``candidate`` on its own: the adapter's source, then its name."""
        import inspect
        import textwrap

        source = textwrap.dedent(inspect.getsource(self.candidate))
        stubs = ""
        if any(s.framework == self.framework for s in STUBS):
            stubs = "from refimpl.frameworks import install_stubs\ninstall_stubs()\n"
        # annotations stay unevaluated: the adapter's source names typing.Any without importing it
        head = "from __future__ import annotations\n\n"
        return f"{head}{stubs}{source}\ncandidate = {self.candidate.__name__}\n"
