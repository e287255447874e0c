"""OpenRLHF (openrlhf 0.11.2): its advantage estimators, read from its installed sources.

``openrlhf/trainer/ppo_utils/experience_maker.py:RemoteExperienceMaker.compute_advantages_and_returns``
casts the rewards to at least float32, reshapes them to ``(-1, n_samples_per_prompt)``
(contiguous equal-size groups) and shapes them: ``rloo`` subtracts the leave-one-out mean
(``/(n − 1)``), ``reinforce_baseline`` and ``dr_grpo`` the group mean, ``group_norm`` divides the
centred rewards by ``torch.std`` (sample) ``+ 1e-9``; ``reinforce`` leaves them. Each reward is put
at the row's last valid token (``compute_reward``) and summed backwards (``get_cumulative_returns``,
γ forced to 1 except for ``reinforce``), so every valid token up to the last carries it. At
``advantage.gamma < 1`` the ``reinforce`` returns are discounted per token (rewards times the mask,
``R_t = r_t + γ·R_{t+1}`` over every position): the ``gae_advantages`` spec without a critic.
``gae``, ``reinforce`` and ``reinforce_baseline`` are then whitened over every valid token of the
batch: ``(A − mean)·rsqrt(max(var, 1e-8))`` with the population variance. ``get_advantages_and_returns``
is GAE on ``rewards·m`` and ``values·m`` (a masked gap is a step with reward and value 0; the value
after the last position is 0), returning ``(advantages, advantages + values·m)``.

The module cannot be imported here (``openrlhf.trainer.ray`` imports vllm; its launcher imports
``Actor`` (flash_attn) and the DeepSpeed strategy): the class is executed from its installed file
(a :data:`refimpl.frameworks.SOURCE_LOADS` entry, asked for in this round's report).
"""

from __future__ import annotations

from typing import Any

from refimpl.frameworks._registry import Adapter
from refimpl.frameworks._stubs import SOURCE_LOADS

_MAKER = "openrlhf.trainer.ppo_utils.experience_maker"


def openrlhf_advantages(
    estimator: str, rewards: Any, group: Any, mask: Any, *, no_std_norm: bool = False
) -> Any:
    """``RemoteExperienceMaker.compute_advantages_and_returns`` on one experience of B rows.

    The smallest objects the method reads: an instance made with ``__new__``, its
    ``strategy.args`` (``n_samples_per_prompt`` = the group size, γ = 1, no reward clip, no length
    penalty, ``advantage.no_std_norm``), ``kl_ctl.value = 0`` and one experience. Returns each
    row's advantage at its first valid token (the value every valid token of the row carries).
    """
    import types

    import torch

    from refimpl.frameworks import load_from_source

    maker_class = load_from_source("openrlhf.trainer.ppo_utils.experience_maker")[
        "RemoteExperienceMaker"
    ]
    ns = types.SimpleNamespace
    rows = rewards.shape[0]
    n = rows if group is None else rows // len(torch.unique(group))  # contiguous equal groups
    args = ns(
        rollout=ns(n_samples_per_prompt=n),
        algo=ns(advantage=ns(estimator=estimator, gamma=1.0, lambd=1.0, no_std_norm=no_std_norm)),
        reward=ns(clip_range=None),
    )
    maker = maker_class.__new__(maker_class)
    maker.strategy = ns(args=args)
    maker.advantage_estimator = estimator
    maker.kl_ctl = ns(value=0.0)
    action_mask = torch.ones(rows, 1, dtype=rewards.dtype) if mask is None else mask
    experience = ns(
        index=list(range(rows)),
        rewards=rewards.clone(),
        info={},
        kl=torch.zeros_like(action_mask, dtype=rewards.dtype),
        action_mask=action_mask,
        values=None,
    )
    maker.compute_advantages_and_returns([experience])
    first = action_mask.to(torch.int64).argmax(dim=1, keepdim=True)
    return experience.advantages.gather(1, first)[:, 0]


def openrlhf_group_norm(rewards: Any, *, group: Any) -> Any:
    """OpenRLHF ``compute_advantages_and_returns``, ``advantage.estimator="group_norm"`` (GRPO)."""
    from refimpl.frameworks._openrlhf_losses_advantages import openrlhf_advantages

    return openrlhf_advantages("group_norm", rewards, group, None)


def openrlhf_dr_grpo(rewards: Any, *, group: Any) -> Any:
    """OpenRLHF ``compute_advantages_and_returns``, ``advantage.estimator="dr_grpo"`` (centred, not scaled)."""
    from refimpl.frameworks._openrlhf_losses_advantages import openrlhf_advantages

    return openrlhf_advantages("dr_grpo", rewards, group, None)


def openrlhf_rloo(rewards: Any, *, group: Any) -> Any:
    """OpenRLHF ``compute_advantages_and_returns``, ``advantage.estimator="rloo"``."""
    from refimpl.frameworks._openrlhf_losses_advantages import openrlhf_advantages

    return openrlhf_advantages("rloo", rewards, group, None)


def openrlhf_reinforce(rewards: Any, *, mask: Any) -> Any:
    """OpenRLHF ``compute_advantages_and_returns``, ``advantage.estimator="reinforce"`` (REINFORCE++: token-level batch whitening)."""
    from refimpl.frameworks._openrlhf_losses_advantages import openrlhf_advantages

    return openrlhf_advantages("reinforce", rewards, None, mask)


def openrlhf_reinforce_baseline(rewards: Any, *, mask: Any, group: Any) -> Any:
    """OpenRLHF ``compute_advantages_and_returns``, ``advantage.estimator="reinforce_baseline"`` (group mean, then batch whitening)."""
    from refimpl.frameworks._openrlhf_losses_advantages import openrlhf_advantages

    return openrlhf_advantages("reinforce_baseline", rewards, group, mask)


def openrlhf_gae(rewards: Any, values: Any, *, gamma: float, lam: float, mask: Any) -> Any:
    """OpenRLHF ``RemoteExperienceMaker.get_advantages_and_returns`` (reads nothing of ``self``)."""
    from refimpl.frameworks import load_from_source

    maker_class = load_from_source("openrlhf.trainer.ppo_utils.experience_maker")[
        "RemoteExperienceMaker"
    ]
    maker = maker_class.__new__(maker_class)
    return maker.get_advantages_and_returns(values, rewards, mask, float(gamma), float(lam))


def openrlhf_gae_advantages(
    rewards: Any,
    values: Any,
    gamma: float,
    lam: float,
    mask: Any,
    *,
    no_std_norm: bool,
    estimator: str = "gae",
) -> Any:
    """``RemoteExperienceMaker.compute_advantages_and_returns`` with ``estimator="gae"`` (or
    ``"reinforce"``: ``get_cumulative_returns`` with ``gamma``; ``values`` and ``lam`` unread).

    The per-token rewards enter as ``compute_reward``'s KL term: a zero outcome reward, ``kl =
    −rewards`` and ``kl_ctl.value = 1`` give ``reward_t = 0·[t = eos] − 1·kl_t = rewards_t``.
    Returns ``(advantages, returns)``: the advantages centred over the batch's valid tokens (and
    scaled by ``rsqrt(max(var, 1e-8))`` unless ``no_std_norm``), returns of the raw ones.
    """
    import types

    import torch

    from refimpl.frameworks import load_from_source

    maker_class = load_from_source("openrlhf.trainer.ppo_utils.experience_maker")[
        "RemoteExperienceMaker"
    ]
    ns = types.SimpleNamespace
    rows = rewards.shape[0]
    advantage = ns(estimator=estimator, gamma=gamma, lambd=lam, no_std_norm=no_std_norm)
    args = ns(
        rollout=ns(n_samples_per_prompt=1), algo=ns(advantage=advantage), reward=ns(clip_range=None)
    )
    maker = maker_class.__new__(maker_class)
    maker.strategy = ns(args=args)
    maker.advantage_estimator = estimator
    maker.kl_ctl = ns(value=1.0)
    experience = ns(
        index=list(range(rows)),
        rewards=torch.zeros(rows, dtype=rewards.dtype),
        info={},
        kl=-rewards,
        action_mask=mask,
        values=values,
    )
    maker.compute_advantages_and_returns([experience])
    return experience.advantages, experience.returns


def openrlhf_gae_whitened(rewards: Any, values: Any, *, gamma: float, lam: float, mask: Any) -> Any:
    """``compute_advantages_and_returns``, ``advantage.estimator="gae"``: GAE, then whitened."""
    from refimpl.frameworks._openrlhf_losses_advantages import openrlhf_gae_advantages

    return openrlhf_gae_advantages(
        rewards, values, float(gamma), float(lam), mask, no_std_norm=False
    )


def openrlhf_gae_centred(rewards: Any, values: Any, *, gamma: float, lam: float, mask: Any) -> Any:
    """``compute_advantages_and_returns``, ``estimator="gae"``, ``no_std_norm=True``: centred only."""
    from refimpl.frameworks._openrlhf_losses_advantages import openrlhf_gae_advantages

    return openrlhf_gae_advantages(
        rewards, values, float(gamma), float(lam), mask, no_std_norm=True
    )


def openrlhf_reinforce_discounted(rewards: Any, *, gamma: float, mask: Any) -> Any:
    """``compute_advantages_and_returns``, ``estimator="reinforce"``, ``advantage.gamma=gamma``:
    per-token rewards (as the KL term), the discounted return, then whitened."""
    from refimpl.frameworks._openrlhf_losses_advantages import openrlhf_gae_advantages

    return openrlhf_gae_advantages(
        rewards, None, float(gamma), 1.0, mask, no_std_norm=False, estimator="reinforce"
    )


def openrlhf_reinforce_discounted_centred(rewards: Any, *, gamma: float, mask: Any) -> Any:
    """``compute_advantages_and_returns``, ``estimator="reinforce"``, ``advantage.gamma=gamma``,
    ``no_std_norm=True``: the discounted return centred only."""
    from refimpl.frameworks._openrlhf_losses_advantages import openrlhf_gae_advantages

    return openrlhf_gae_advantages(
        rewards, None, float(gamma), 1.0, mask, no_std_norm=True, estimator="reinforce"
    )


def openrlhf_reinforce_centred(rewards: Any, *, mask: Any) -> Any:
    """``compute_advantages_and_returns``, ``estimator="reinforce"``, ``no_std_norm=True``."""
    from refimpl.frameworks._openrlhf_losses_advantages import openrlhf_advantages

    return openrlhf_advantages("reinforce", rewards, None, mask, no_std_norm=True)


def openrlhf_reinforce_baseline_centred(rewards: Any, *, mask: Any, group: Any) -> Any:
    """``compute_advantages_and_returns``, ``estimator="reinforce_baseline"``, ``no_std_norm``."""
    from refimpl.frameworks._openrlhf_losses_advantages import openrlhf_advantages

    return openrlhf_advantages("reinforce_baseline", rewards, group, mask, no_std_norm=True)


_GROUPS = {"groups": "contiguous", "singleton": "excluded"}
#: the reinforce estimator at advantage.gamma: the discounted return (GAE at V = 0, λ = 1; a gap
#: is a step: get_cumulative_returns multiplies the rewards by the mask), whitened in float32
_DISCOUNTED = {
    "critic": "none",
    "output": "both",
    "gaps": "steps",
    "padding": "ignored",
    "whiten": "batch",
    "whiten_std": "population",
    "whiten_eps": 1e-8,
    "eps_placement": "floor",
    "compute_dtype": "float32",  # the whitening casts the advantages with .float()
}
_WHITEN = {"std": "population", "eps": 1e-8, "eps_placement": "floor"}


def _adapter(
    key: str,
    estimator: str,
    spec: str,
    conventions: Any,
    candidate: Any,
    note: str,
    dtype: str = "float64",
    no_std_norm: bool = False,
) -> Adapter:
    settings: dict[str, Any] = {
        "advantage.estimator": estimator,
        "n_samples_per_prompt": "group size",
    }
    if no_std_norm:
        settings["advantage.no_std_norm"] = True
    return Adapter(
        key=f"openrlhf.{key}",
        framework="openrlhf",
        function=f"{_MAKER}:RemoteExperienceMaker.compute_advantages_and_returns",
        settings=settings,
        spec=spec,
        conventions=conventions,
        candidate=candidate,
        note=note,
        dtype=dtype,
    )


_ADAPTERS: tuple[Adapter, ...] = (
    _adapter(
        "advantages_group_norm",
        "group_norm",
        "grpo_advantages",
        {**_GROUPS, "std": "sample", "eps": 1e-9, "eps_placement": "std"},
        openrlhf_group_norm,
        "(r − mean)/(sample std + 1e-9) per contiguous group of n_samples_per_prompt rows.",
    ),
    _adapter(
        "advantages_dr_grpo",
        "dr_grpo",
        "grpo_advantages",
        {**_GROUPS, "std": "none"},
        openrlhf_dr_grpo,
        "r − group mean (Dr GRPO), not scaled.",
    ),
    _adapter(
        "advantages_rloo",
        "rloo",
        "rloo_advantages",
        _GROUPS,
        openrlhf_rloo,
        "r − mean of the other n − 1 rewards of the group.",
    ),
    _adapter(
        "advantages_reinforce",
        "reinforce",
        "reinforce_pp_advantages",
        _WHITEN,
        openrlhf_reinforce,
        "The reward at every valid token, whitened in float32 over the batch's valid tokens.",
        dtype="float32",  # the whitening casts the advantages with .float(); the spec has no compute_dtype
    ),
    _adapter(
        "advantages_reinforce_baseline",
        "reinforce_baseline",
        "reinforce_pp_advantages",
        {**_WHITEN, **_GROUPS, "baseline": "group"},
        openrlhf_reinforce_baseline,
        "r − group mean at every valid token, then whitened in float32 over the valid tokens.",
        dtype="float32",  # the whitening casts the advantages with .float(); the spec has no compute_dtype
    ),
    _adapter(
        "advantages_reinforce_no_std_norm",
        "reinforce",
        "reinforce_pp_advantages",
        {"std": "none"},
        openrlhf_reinforce_centred,
        "no_std_norm=True: the reward at every valid token minus its float32 mean over the "
        "batch's valid tokens, not scaled.",
        dtype="float32",  # the centring casts the advantages with .float()
        no_std_norm=True,
    ),
    _adapter(
        "advantages_reinforce_baseline_no_std_norm",
        "reinforce_baseline",
        "reinforce_pp_advantages",
        {**_GROUPS, "baseline": "group", "std": "none"},
        openrlhf_reinforce_baseline_centred,
        "no_std_norm=True: r − group mean at every valid token, then minus its float32 mean over "
        "the batch's valid tokens, not scaled.",
        dtype="float32",  # the centring casts the advantages with .float()
        no_std_norm=True,
    ),
    Adapter(
        key="openrlhf.advantages_reinforce_gamma",
        framework="openrlhf",
        function=f"{_MAKER}:RemoteExperienceMaker.compute_advantages_and_returns",
        settings={"advantage.estimator": "reinforce", "gamma": "gamma"},
        spec="gae_advantages",
        conventions=_DISCOUNTED,
        candidate=openrlhf_reinforce_discounted,
        note="get_cumulative_returns: Σ γ^l·r_{t+l} over every position (rewards times the mask), "
        "then (A − mean)·rsqrt(max(var, 1e-8)) over the batch's valid tokens in float32; returns "
        "the unwhitened discounted return.",
    ),
    Adapter(
        key="openrlhf.advantages_reinforce_gamma_no_std_norm",
        framework="openrlhf",
        function=f"{_MAKER}:RemoteExperienceMaker.compute_advantages_and_returns",
        settings={"advantage.estimator": "reinforce", "gamma": "gamma", "no_std_norm": True},
        spec="gae_advantages",
        conventions={**_DISCOUNTED, "whiten_std": "none"},
        candidate=openrlhf_reinforce_discounted_centred,
        note="no_std_norm=True: the discounted return minus its float32 mean over the batch's "
        "valid tokens, not scaled.",
    ),
    Adapter(
        key="openrlhf.gae",
        framework="openrlhf",
        function=f"{_MAKER}:RemoteExperienceMaker.get_advantages_and_returns",
        settings={"advantage.estimator": "gae", "gamma": "gamma", "lambd": "lam"},
        spec="gae_advantages",
        conventions={"output": "both", "gaps": "steps", "padding": "ignored"},
        candidate=openrlhf_gae,
        note="GAE on rewards·m and values·m (a gap is a step), (advantages, advantages + values·m); "
        "the batch whitening follows in compute_advantages_and_returns.",
    ),
    Adapter(
        key="openrlhf.gae_whitened",
        framework="openrlhf",
        function=f"{_MAKER}:RemoteExperienceMaker.compute_advantages_and_returns",
        settings={"advantage.estimator": "gae", "gamma": "gamma", "lambd": "lam"},
        spec="gae_advantages",
        conventions={
            "output": "both",
            "gaps": "steps",
            "padding": "ignored",
            "whiten": "batch",
            "whiten_std": "population",
            "whiten_eps": 1e-8,
            "eps_placement": "floor",
            "compute_dtype": "float32",  # the whitening casts the advantages with .float()
        },
        candidate=openrlhf_gae_whitened,
        note="The trainer's path: GAE, then (A − mean)·rsqrt(max(var, 1e-8)) over the batch's "
        "valid tokens in float32; returns from the unwhitened advantages.",
    ),
    Adapter(
        key="openrlhf.gae_no_std_norm",
        framework="openrlhf",
        function=f"{_MAKER}:RemoteExperienceMaker.compute_advantages_and_returns",
        settings={
            "advantage.estimator": "gae",
            "gamma": "gamma",
            "lambd": "lam",
            "no_std_norm": True,
        },
        spec="gae_advantages",
        conventions={
            "output": "both",
            "gaps": "steps",
            "padding": "ignored",
            "whiten": "batch",
            "whiten_std": "none",
            "compute_dtype": "float32",  # the centring casts the advantages with .float()
        },
        candidate=openrlhf_gae_centred,
        note="no_std_norm=True: GAE, then A − its mean over the batch's valid tokens in float32, "
        "not scaled; returns from the uncentred advantages.",
    ),
)

#: Registered once :data:`refimpl.frameworks.SOURCE_LOADS` executes the class from its file.
ADAPTERS: tuple[Adapter, ...] = _ADAPTERS if any(e.source == _MAKER for e in SOURCE_LOADS) else ()

__all__ = ["ADAPTERS"]
