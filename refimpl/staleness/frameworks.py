"""Each framework's staleness setting, translated into refimpl's ``η`` (conventions §framework-settings).

refimpl's staleness of a sample trained at step ``j`` is ``s = j − min_t v_t`` (oldest token
version, queue time included), and a staleness bound ``η`` admits a sample iff ``s ≤ η``. Frameworks
name and enforce their settings differently; some bound every sample, some only bound the average
through admission control, one is not a version count at all. The functions here state, for a value
of a framework's own setting, the ``η`` it corresponds to, where it is enforced, and whether it
guarantees ``s ≤ η`` for every trained sample.

Each statement was read from the installed sources of the version named in its ``source`` field
(:data:`refimpl.frameworks.TESTED_VERSIONS`), and ``tests_frameworks/test_staleness_statements.py``
checks it against that installed code in the framework stage of CI (conventions
§framework-settings). Only frameworks installed and tested there are stated here: prime-rl and
slime, which have no release on PyPI, are described in the docs (``docs/howto/framework-settings.md``)
as read from their repositories, not checked by CI. A framework may change its semantics between
versions, so check the version you run.

These are statements about staleness, so they live with the staleness formulas (the root API
flattens them into ``refimpl``, and the root depends on nothing above the formulas);
:mod:`refimpl.frameworks` re-exports them beside its adapters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, NamedTuple

from refimpl._validation import as_int, as_real, invalid, wrong_type

__all__ = [
    "FrameworkStalenessBound",
    "areal_staleness_bound",
    "framework_staleness_bound",
    "skyrl_staleness_bound",
    "trl_staleness_bound",
    "verl_off_policy_bound",
    "verl_staleness_bound",
]

Framework = Literal["areal", "skyrl", "trl", "verl"]
_FRAMEWORKS = ("areal", "skyrl", "trl", "verl")


class FrameworkStalenessBound(NamedTuple):
    """One framework setting in refimpl's terms.

    Attributes
    ----------
    framework : str
        ``"areal"``, ``"skyrl"``, ``"trl"`` or ``"verl"``.
    setting : str
        The framework's own name for the setting.
    value : float
        The value given.
    eta : int or None
        The staleness bound ``η`` on ``s = j − min_t v_t`` the setting corresponds to; ``None`` when
        the setting is not a version count (verl).
    enforced_at : str
        ``"admission"`` (new rollouts are blocked; nothing is dropped), ``"consumption"`` (samples
        over the bound are dropped when the trainer takes them) or ``"sync"`` (a count of extra
        samples per weight synchronisation).
    per_sample_bound : bool
        True iff every trained sample is guaranteed ``s ≤ η``.
    note : str
        What the setting does and how it differs from ``η``, in one or two sentences.
    source : str
        The framework version and the code the statement was read from (and is tested against).
    """

    framework: str
    setting: str
    value: float
    eta: int | None
    enforced_at: str
    per_sample_bound: bool
    note: str
    source: str = ""


def areal_staleness_bound(*, max_head_offpolicyness: int) -> FrameworkStalenessBound:
    r"""AReaL's ``max_head_offpolicyness`` as ``η``: enforced at admission, no per-sample bound.

    AReaL blocks new launches when the admission capacity

    .. math::

        \min\bigl(N_\text{max} - \text{running},\;(\eta + v + 1)B - (\text{accepted} +
        \text{running})\bigr)

    is ``<= 0`` (:func:`refimpl.admission_capacity`). AReaL 1.0.4 computes it in
    ``StalenessManager.get_capacity`` (``areal/infra/staleness_manager.py``), fed with
    ``max_staleness=max_head_offpolicyness``, and treats a ``max_concurrent_rollouts`` or
    ``consumer_batch_size`` of 0 as 1. The rule only admits; it drops nothing, so a sample may be
    trained with ``s > η``: a long rollout, or one interrupted and resumed (partial rollout), can span
    more than ``η + 1`` versions. The bound holds on average, not per sample.

    Parameters
    ----------
    max_head_offpolicyness : int
        The AReaL setting, ``>= 0``.

    Returns
    -------
    FrameworkStalenessBound
        ``eta = max_head_offpolicyness``, ``enforced_at="admission"``, ``per_sample_bound=False``.

    Raises
    ------
    TypeError
        If the value is not an integer.
    ValueError
        If it is negative.

    References
    ----------
    AReaL (arXiv 2505.24298); AReaL 1.0.4, ``areal.infra.staleness_manager.StalenessManager``.

    Examples
    --------
    >>> from refimpl.frameworks import areal_staleness_bound
    >>> b = areal_staleness_bound(max_head_offpolicyness=2)
    >>> b.eta, b.enforced_at, b.per_sample_bound
    (2, 'admission', False)
    """
    eta = as_int(
        max_head_offpolicyness,
        name="max_head_offpolicyness",
        minimum=0,
        meaning="AReaL's staleness bound in versions",
    )
    return FrameworkStalenessBound(
        framework="areal",
        setting="max_head_offpolicyness",
        value=float(eta),
        eta=eta,
        enforced_at="admission",
        per_sample_bound=False,
        note="Admission control: launches stop when accepted + running reaches (η + v + 1)·B "
        "(see admission_capacity; a batch size or concurrency of 0 counts as 1); the rule drops "
        "nothing, so long or interrupted rollouts can be trained with s > η. Bounds staleness on "
        "average, not per sample.",
        source="areal 1.0.4: areal.infra.staleness_manager.StalenessManager.get_capacity",
    )


def skyrl_staleness_bound(*, max_staleness_steps: int) -> FrameworkStalenessBound:
    r"""SkyRL's ``max_staleness_steps`` as ``η``: AReaL's admission rule, no per-sample bound.

    SkyRL writes the same capacity rule as :math:`(S + g)\,B` with :math:`g = v + 1`, i.e.
    :math:`(\eta + v + 1)\,B` with :math:`\eta = S` (:func:`refimpl.admission_capacity`). In skyrl
    0.3.0, ``g`` is ``_AsyncStalenessManager._current_global_step`` (``skyrl/train/fully_async_trainer.py``),
    the 1-based step being worked on, so ``g = v + 1`` with ``v`` the steps finished.

    Parameters
    ----------
    max_staleness_steps : int
        The SkyRL setting, ``>= 0``.

    Returns
    -------
    FrameworkStalenessBound
        ``eta = max_staleness_steps``, ``enforced_at="admission"``, ``per_sample_bound=False``.

    Raises
    ------
    TypeError
        If the value is not an integer.
    ValueError
        If it is negative.

    Examples
    --------
    >>> from refimpl.frameworks import skyrl_staleness_bound
    >>> skyrl_staleness_bound(max_staleness_steps=4).eta
    4
    """
    eta = as_int(
        max_staleness_steps,
        name="max_staleness_steps",
        minimum=0,
        meaning="SkyRL's staleness bound in versions",
    )
    return FrameworkStalenessBound(
        framework="skyrl",
        setting="max_staleness_steps",
        value=float(eta),
        eta=eta,
        enforced_at="admission",
        per_sample_bound=False,
        note="The AReaL capacity rule written (S + g)·B with g = v + 1 (g: the 1-based step being "
        "worked on); admission control only, so no per-sample guarantee.",
        source="skyrl 0.3.0: skyrl.train.fully_async_trainer._AsyncStalenessManager"
        "._compute_capacity_unlocked",
    )


def trl_staleness_bound(*, max_staleness: int) -> FrameworkStalenessBound:
    """TRL's async ``max_staleness``: ``η`` on ``current − v_launch``, dropped at consumption.

    ``current − v_launch`` equals refimpl's ``s`` whenever ``current`` is the version the trainer
    holds when it takes the sample (``j``), because a rollout's oldest token is its first and
    versions only increase. Over-bound samples are dropped, so the bound holds per sample. In TRL
    1.16.0 the rule is in ``trl.experimental.async_grpo.async_grpo_trainer.RolloutQueueDataset``:
    ``staleness = model_version_fn() − sample.model_version``, dropped iff ``> max_staleness``
    (``AsyncGRPOConfig.max_staleness`` defaults to 4).

    Read in TRL 1.16.0 (``trl/experimental/async_grpo``): the version is recorded once per group of
    ``num_generations`` rollouts, when its first rollout is launched, so for a rollout of the group
    launched later ``current − v`` is at least its ``s``: TRL may drop a sample whose ``s`` is within
    the bound, never keep one beyond it.

    Parameters
    ----------
    max_staleness : int
        The TRL setting, ``>= 0``.

    Returns
    -------
    FrameworkStalenessBound
        ``eta = max_staleness``, ``enforced_at="consumption"``, ``per_sample_bound=True``.

    Raises
    ------
    TypeError
        If the value is not an integer.
    ValueError
        If it is negative.

    Examples
    --------
    >>> from refimpl.frameworks import trl_staleness_bound
    >>> trl_staleness_bound(max_staleness=3).enforced_at
    'consumption'
    """
    eta = as_int(
        max_staleness, name="max_staleness", minimum=0, meaning="TRL's staleness bound in versions"
    )
    return FrameworkStalenessBound(
        framework="trl",
        setting="max_staleness",
        value=float(eta),
        eta=eta,
        enforced_at="consumption",
        per_sample_bound=True,
        note="η on current − v_launch, which equals s = j − min_t v_t when 'current' is the "
        "trainer's version j; over-bound samples are dropped when consumed.",
        source="trl 1.16.0: trl.experimental.async_grpo.async_grpo_trainer.RolloutQueueDataset",
    )


def verl_staleness_bound(*, staleness_threshold: float) -> FrameworkStalenessBound:
    """verl's ``staleness_threshold``: a fraction of extra samples per sync, **not** a version count.

    The setting lets the rollout side generate up to a fraction ``staleness_threshold`` of extra
    samples beyond what one weight synchronisation consumes: in verl 0.9.1
    (``verl.experimental.fully_async_policy``), ``FullyAsyncRollouter`` stops at
    ``required_samples · (staleness_threshold + 1) · trigger_parameter_sync_step`` samples per
    synchronisation. It limits how much stale data accumulates, not how stale a sample is: there is
    no ``η``, and no per-sample bound (a long rollout can span several syncs). For a per-sample bound
    verl 0.9 has a separate setting, ``max_off_policy_threshold`` (:func:`verl_off_policy_bound`); or
    mask with :func:`refimpl.staleness_mask` on :func:`refimpl.sample_staleness`.

    .. warning::

        This is ``async_training.staleness_threshold`` (``verl/experimental/fully_async_policy``).
        verl 0.9.1's v1 trainer has a different setting, ``trainer.v1.sampler.max_off_policy_threshold``
        ``τ`` (default 8, ``max_off_policy_strategy="drop"`` or ``"wait"``), which *is* a count of
        steps: a trajectory is dropped (or waited for) when ``g − g_fetch + 1 > τ``, with ``g`` the
        global step being trained and ``g_fetch`` the one at which its prompt left the dataloader.
        That bounds ``s <= τ − 1`` only if the rollout's weights at fetch time were those of step
        ``g_fetch``; when the weight sync lags they are older and ``s`` can exceed it. It is not
        translated here.

    Parameters
    ----------
    staleness_threshold : float
        The verl setting, ``>= 0`` (0 admits no extra samples).

    Returns
    -------
    FrameworkStalenessBound
        ``eta=None``, ``enforced_at="sync"``, ``per_sample_bound=False``.

    Raises
    ------
    TypeError
        If the value is not a real number.
    ValueError
        If it is negative or non-finite.

    Examples
    --------
    >>> from refimpl.frameworks import verl_staleness_bound
    >>> b = verl_staleness_bound(staleness_threshold=0.5)
    >>> b.eta is None, b.per_sample_bound
    (True, False)
    """
    frac = as_real(
        staleness_threshold,
        name="staleness_threshold",
        low=0.0,
        meaning="verl's fraction of extra samples per sync",
    )
    return FrameworkStalenessBound(
        framework="verl",
        setting="staleness_threshold",
        value=frac,
        eta=None,
        enforced_at="sync",
        per_sample_bound=False,
        note="A fraction of extra samples generated per weight sync, not a version count: it "
        "does not bound the staleness of any sample.",
        source="verl 0.9.1: verl.experimental.fully_async_policy.fully_async_rollouter"
        ".FullyAsyncRollouter.set_max_required_samples",
    )


def verl_off_policy_bound(*, max_off_policy_threshold: int) -> FrameworkStalenessBound:
    """verl's ``max_off_policy_threshold`` (strategy ``"drop"``): versions spanned, so ``η = T − 1``.

    verl 0.9's replay buffer (``verl.trainer.ppo.v1.replay_buffer.ReplayBufferAsync``) drops a
    finished group iff ``global_steps − prompt_global_steps + 1 > T``: the setting counts the
    versions a sample spans, ``s + 1``, not its staleness ``s``. A sample is kept iff ``s ≤ T − 1``,
    so ``T`` corresponds to ``η = T − 1``, enforced per sample when the trainer takes a batch. (With
    ``max_off_policy_strategy="wait"`` nothing is dropped; that strategy is not translated here.)

    Parameters
    ----------
    max_off_policy_threshold : int
        The verl setting, ``>= 1`` (verl rejects 0; ``None`` there disables the control).

    Returns
    -------
    FrameworkStalenessBound
        ``eta = max_off_policy_threshold − 1``, ``enforced_at="consumption"``,
        ``per_sample_bound=True``.

    Raises
    ------
    TypeError
        If the value is not an integer.
    ValueError
        If it is below 1.

    Examples
    --------
    >>> from refimpl.frameworks import verl_off_policy_bound
    >>> b = verl_off_policy_bound(max_off_policy_threshold=8)  # verl's default
    >>> b.eta, b.enforced_at, b.per_sample_bound
    (7, 'consumption', True)
    """
    spanned = as_int(
        max_off_policy_threshold,
        name="max_off_policy_threshold",
        minimum=1,
        meaning="verl's bound on the versions a sample spans, s + 1",
    )
    return FrameworkStalenessBound(
        framework="verl",
        setting="max_off_policy_threshold",
        value=float(spanned),
        eta=spanned - 1,
        enforced_at="consumption",
        per_sample_bound=True,
        note="Counts versions spanned (s + 1): a finished group with global_steps − "
        "prompt_global_steps + 1 > T is dropped when a batch is sampled, so η = T − 1 per sample.",
        source="verl 0.9.1: verl.trainer.ppo.v1.replay_buffer.ReplayBufferAsync._stale_terminal_keys",
    )


def framework_staleness_bound(
    *, framework: Framework | str, value: Any, setting: str | None = None
) -> FrameworkStalenessBound:
    """Dispatch on a framework's name: its staleness setting, translated into ``η``.

    Parameters
    ----------
    framework : {"areal", "skyrl", "trl", "verl"}
        Case-insensitive.
    value : int or float
        The value of that framework's staleness setting (see the per-framework functions).
    setting : str, optional
        The setting's own name, for a framework with more than one: verl's
        ``"staleness_threshold"`` (the default) or ``"max_off_policy_threshold"``. For the others it
        must be omitted or equal to their one setting.

    Returns
    -------
    FrameworkStalenessBound

    Raises
    ------
    ValueError
        If the framework or the setting is unknown, or the value is out of range.
    TypeError
        If the value has the wrong type.

    Examples
    --------
    >>> from refimpl.frameworks import framework_staleness_bound
    >>> [framework_staleness_bound(framework=f, value=1).per_sample_bound
    ...  for f in ("areal", "skyrl", "trl", "verl")]
    [False, False, True, False]
    >>> framework_staleness_bound(framework="verl", value=8, setting="max_off_policy_threshold").eta
    7
    """
    if not isinstance(framework, str):  # checked before the lookup: a list is not even hashable
        raise wrong_type(
            "framework",
            "a framework name (a string)",
            framework,
            "Pass one of " + ", ".join(repr(f) for f in _FRAMEWORKS) + ".",
        )
    if setting is not None and not isinstance(setting, str):
        raise wrong_type(
            "setting", "a setting name (a string) or None", setting, "Pass the setting's name."
        )
    key = framework.lower()
    settings: dict[str, dict[str, Callable[[Any], FrameworkStalenessBound]]] = {
        "areal": {
            "max_head_offpolicyness": lambda v: areal_staleness_bound(max_head_offpolicyness=v)
        },
        "skyrl": {"max_staleness_steps": lambda v: skyrl_staleness_bound(max_staleness_steps=v)},
        "trl": {"max_staleness": lambda v: trl_staleness_bound(max_staleness=v)},
        "verl": {
            "staleness_threshold": lambda v: verl_staleness_bound(staleness_threshold=v),
            "max_off_policy_threshold": lambda v: verl_off_policy_bound(max_off_policy_threshold=v),
        },
    }
    if key not in settings:
        raise invalid(
            "framework",
            "be one of " + ", ".join(repr(f) for f in _FRAMEWORKS),
            framework,
            "Pass one of these names, or call the per-framework function directly.",
        )
    own = settings[key]
    name = next(iter(own)) if setting is None else setting
    if name not in own:
        raise invalid(
            "setting",
            f"name one of {key}'s settings: " + ", ".join(repr(n) for n in own),
            setting,
            "Pass one of these names, or omit setting for the first.",
        )
    return own[name](value)
