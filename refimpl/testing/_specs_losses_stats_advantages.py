r"""Specs of the outcome advantages: ``grpo_advantages``, ``rloo_advantages``,
``reinforce_pp_advantages`` against refimpl.losses.advantages (value only: advantages are
computed from rewards, never differentiated).

The frameworks' options are conventions: the standard deviation (sample, population, none), where
ε sits (σ + ε, √(σ² + ε), √max(σ², ε)), a group or batch std, what a singleton group gets, and
whether groups are labelled or contiguous equal-size blocks.

Derived tolerances: a z-score :math:`A_i = (r_i - \bar r)/D(\sigma)` inherits the rounding of the
centred reward, :math:`u(|r_i| + (f_n + 1)\,\overline{|r|})` with :math:`f_n` the pairwise sum's
``summation_factor``, divided by :math:`D`: the condition holds these :math:`|r|/D` terms (large
when a group's spread is small next to its rewards), :math:`|A|(f_n + 4)` for the variance, the
square root and the division, and :math:`2|A|` times the largest centring term of the group
over :math:`D` for the rounding of :math:`\sigma` itself (the relative error of :math:`\sigma` is
at most :math:`\sqrt{2}\max_j e_j/\sigma`, :math:`e_j` the centring errors). REINFORCE++ whitens
over the batch's tokens: its terms take the batch's token sum (a looser bound, checked on 400
drawn batches against a float32 torch whitening).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st
from numpy.typing import NDArray

from refimpl.losses.advantages import grpo_advantages, reinforce_pp_advantages, rloo_advantages
from refimpl.testing._arrays import ArrayBridge
from refimpl.testing._engine import Call, Case, Check, Convention, Conventions, Spec
from refimpl.testing._specs_losses_stats import Array, Strategy, padding_mask
from refimpl.testing.tolerances import summation_factor

__all__ = ["advantage_specs"]

# ---------------------------------------------------------------------------------------------
# advantages: conventions
# ---------------------------------------------------------------------------------------------

STD = Convention(
    "std",
    "sample",
    ("sample", "population", "none"),
    "the standard deviation divided by: sample (n − 1), population (n), or none (mean-centred)",
    who="sample: verl 0.9.1 compute_grpo_outcome_advantage (torch.std), TRL 1.16.0 (nanstd), "
    "OpenRLHF 0.11.2 group_norm; none: Dr GRPO (verl norm_adv_by_std_in_grpo=False, OpenRLHF "
    "dr_grpo)",
)
EPS_GRPO = Convention(
    "eps",
    1e-6,
    (1e-6, 0.0),
    "ε >= 0 in the denominator, placed by eps_placement",
    number=True,
    who="1e-6: verl 0.9.1; 1e-4: TRL 1.16.0; 1e-9: OpenRLHF 0.11.2 group_norm",
)
EPS_PP = Convention(
    "eps",
    1e-8,
    (1e-8, 0.0),
    "ε >= 0 in the denominator, placed by eps_placement",
    number=True,
    who="1e-8: verl 0.9.1 masked_whiten, OpenRLHF 0.11.2 reinforce (as a floor)",
)


def _placement(default: str, who: str) -> Convention:
    return Convention(
        "eps_placement",
        default,
        ("std", "variance", "floor"),
        "the denominator: σ + ε, √(σ² + ε), or √max(σ², ε)",
        who=who,
    )


PLACEMENT_GRPO = _placement(
    "std", "std: verl 0.9.1, TRL 1.16.0, OpenRLHF 0.11.2 group_norm (ε added to the std)"
)
PLACEMENT_PP = _placement(
    "variance", "variance: verl 0.9.1 masked_whiten; floor: OpenRLHF 0.11.2 reinforce"
)
STD_PP = Convention(
    "std",
    "sample",
    ("sample", "population", "none"),
    "the token-weighted batch standard deviation: sample (N − 1), population (N), or none",
    who="sample: verl 0.9.1 masked_whiten; population: OpenRLHF 0.11.2 reinforce",
)
SCOPE = Convention(
    "std_scope",
    "group",
    ("group", "batch"),
    "the standard deviation per group, or over every reward of the batch (group mean kept)",
    who="batch: TRL 1.16.0 scale_rewards='batch'",
)
SINGLETON = Convention(
    "singleton",
    "zero",
    ("zero", "raw", "excluded"),
    "a group of one sequence: advantage 0, its raw reward (mean 0, std 1), or never drawn",
    who="raw: verl 0.9.1 compute_grpo_outcome_advantage and compute_rloo_outcome_advantage; "
    "zero: TRL 1.16.0 (num_generations=1: std 0, advantage 0); excluded: OpenRLHF 0.11.2 "
    "(group_norm's torch.std of one reward is NaN, rloo divides by n − 1 = 0)",
)
GROUPS = Convention(
    "groups",
    "labelled",
    ("labelled", "contiguous"),
    "'labelled': group= holds any integer labels in any order, sizes may differ; 'contiguous': "
    "equal-size groups in consecutive rows (group= is still passed)",
    who="contiguous: TRL 1.16.0 (view(-1, num_generations)), OpenRLHF 0.11.2 "
    "(n_samples_per_prompt)",
)
BASELINE = Convention(
    "baseline",
    "none",
    ("none", "group"),
    "REINFORCE++ (no group=) or REINFORCE++-baseline (group= given: the group mean is "
    "subtracted first)",
    who="group: verl 0.9.1 compute_reinforce_plus_plus_baseline_outcome_advantage, OpenRLHF "
    "0.11.2 reinforce_baseline",
)

# ---------------------------------------------------------------------------------------------
# advantages: draws
# ---------------------------------------------------------------------------------------------


@st.composite
def _group_rewards(draw: st.DrawFn, size: int, kind: str) -> Array:
    if kind == "constant":  # exact in every float dtype: a correct mean is exact
        return np.full(size, draw(st.integers(-8, 8)) / 4.0)
    if kind == "binary":
        return np.asarray(draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=size, max_size=size)))
    base = draw(st.sampled_from([0.0, 1.0, -3.0, 10.0]))
    spread = draw(st.sampled_from([1.0, 1e-2, 1e-3, 1e-4]))  # small spreads test where ε sits
    z = draw(st.lists(st.floats(-2.0, 2.0, allow_subnormal=False), min_size=size, max_size=size))
    return base + spread * np.asarray(z)


@st.composite
def _rewards_draw(
    draw: st.DrawFn, conv: Conventions, *, constant: bool = False, singles: bool = False
) -> tuple[Array, NDArray[np.int64]]:
    """Rewards and group labels: 1–4 groups; under 'labelled' shuffled, with arbitrary labels."""
    n_groups = draw(st.integers(1, 4))
    lowest = 2 if conv.get("singleton", "zero") == "excluded" else 1
    if conv.get("groups") == "contiguous":
        size = draw(st.integers(max(lowest, 2 if not singles else lowest), 6))
        sizes = [size] * n_groups
    else:
        sizes = draw(st.lists(st.integers(lowest, 6), min_size=n_groups, max_size=n_groups))
        if singles and lowest == 1:
            sizes[0] = 1
            n_groups = max(n_groups, 2)
            sizes = [*sizes, draw(st.integers(2, 6))][:n_groups]
    kinds = ["constant", "binary", "spread"]
    parts = []
    for i, size in enumerate(sizes):
        kind = "constant" if constant and i == 0 else draw(st.sampled_from(kinds))
        parts.append(draw(_group_rewards(size, kind)))
    rewards = np.concatenate(parts)
    labels = draw(st.lists(st.integers(0, 99), min_size=n_groups, max_size=n_groups, unique=True))
    group = np.repeat(np.asarray(labels, dtype=np.int64), sizes)
    if rewards.size < 2:  # a batch of two at least (sample std of a batch)
        rewards = np.append(rewards, draw(_group_rewards(2, "binary")))
        group = np.append(group, np.asarray([100, 100], dtype=np.int64))
    if conv.get("groups") != "contiguous":
        order = np.asarray(draw(st.permutations(list(range(rewards.size)))), dtype=np.int64)
        rewards, group = rewards[order], group[order]
    return rewards, group


def _shift_calls(call: Call, shift: float) -> list[Call]:
    (rewards, *rest), kwargs = call
    return [call, ((np.asarray(rewards) + shift, *rest), dict(kwargs))]


@st.composite
def _adv_calls(
    draw: st.DrawFn,
    conv: Conventions,
    *,
    family: str,
    constant: bool = False,
    singles: bool = False,
    shift: bool = False,
) -> list[Call]:
    rewards, group = draw(_rewards_draw(conv, constant=constant, singles=singles))
    kwargs: dict[str, Any] = {}
    if family != "reinforce_pp" or conv["baseline"] == "group":
        kwargs["group"] = group
    if family == "reinforce_pp":
        time = draw(st.integers(1, 5))
        lengths = np.asarray(
            draw(st.lists(st.integers(1, time), min_size=rewards.size, max_size=rewards.size))
        )
        kwargs["mask"] = padding_mask(lengths.astype(np.int64), time)
    call: Call = ((rewards,), kwargs)
    if shift:
        return _shift_calls(call, float(draw(st.sampled_from([1.0, -5.0, 3.0, 0.5]))))
    return [call]


def _adv_strategy(family: str, **flags: bool) -> Strategy:
    return lambda conv: _adv_calls(conv, family=family, **flags)


# ---------------------------------------------------------------------------------------------
# advantages: reference and the z-score's condition
# ---------------------------------------------------------------------------------------------


def _refimpl_singleton(conv: Conventions) -> Any:
    return "zero" if conv.get("singleton", "zero") == "excluded" else conv.get("singleton", "zero")


def _adv_expected(family: str) -> Callable[[Call, Conventions], Array]:
    def expected(call: Call, conv: Conventions) -> Array:
        (rewards,), kwargs = call
        r = np.asarray(rewards, dtype=np.float64)
        alone = _refimpl_singleton(conv)
        if family == "grpo":
            return np.asarray(
                grpo_advantages(
                    r,
                    group=kwargs["group"],
                    std=conv["std"],
                    eps=conv["eps"],
                    eps_placement=conv["eps_placement"],
                    std_scope=conv["std_scope"],
                    singleton=alone,
                ),
                dtype=np.float64,
            )
        if family == "rloo":
            return np.asarray(
                rloo_advantages(r, group=kwargs["group"], singleton=alone),
                dtype=np.float64,
            )
        return reinforce_pp_advantages(
            r,
            group=kwargs.get("group"),
            mask=kwargs["mask"],
            std=conv["std"],
            eps=conv["eps"],
            eps_placement=conv["eps_placement"],
            singleton=alone,
        )

    return expected


def _labels(kwargs: dict[str, Any], size: int) -> NDArray[np.intp]:
    group = kwargs.get("group")
    if group is None:
        return np.zeros(size, dtype=np.intp)
    _, inverse = np.unique(np.asarray(group), return_inverse=True)
    return np.asarray(inverse, dtype=np.intp)


def _adv_condition(family: str) -> Callable[[Call, Conventions, Any], Array]:
    """Per entry: (|r_i| + f_n·mean|r|)·(scale) + |A|(f_n + 4), the scale 1/D or the RLOO/raw 1."""

    def condition(call: Call, conv: Conventions, expected: Any) -> Array:
        (rewards,), kwargs = call
        r = np.abs(np.asarray(rewards, dtype=np.float64))
        a = np.abs(np.asarray(expected, dtype=np.float64))
        inverse = _labels(kwargs, r.size)
        counts = np.bincount(inverse)
        f = np.asarray([summation_factor(int(c)) for c in counts])[inverse]
        mean_abs = (np.bincount(inverse, weights=r) / counts)[inverse]
        if family == "reinforce_pp":  # batch statistics over tokens, on the centred values
            tokens = int(np.asarray(kwargs["mask"]).sum())
            fb = summation_factor(max(tokens, 1)) + 2.0
            centred = r + f * mean_abs
            f = f + fb
            mean_abs = np.full(r.size, float(np.max(centred, initial=0.0)))
        centring = r + (f + 1.0) * mean_abs
        scale = np.ones_like(r)
        if conv.get("std", "none") != "none":
            raw = _centred_scale(call, conv, inverse)
            with np.errstate(divide="ignore", invalid="ignore"):
                scale = np.where(raw > 0, 1.0 / raw, 0.0)
        if family == "grpo" and conv.get("std") != "none":
            # a (nearly) constant group: the centred value is rounding, divided by D
            scale = np.where(np.isfinite(scale), scale, 0.0)
        own = centring * scale
        # the variance's rounding: |A|·(δσ/σ) <= |A|·√2·max_g(centring)/σ
        worst = np.zeros(counts.size)
        np.maximum.at(worst, inverse, own)
        if family == "reinforce_pp" or conv.get("std_scope") == "batch":
            worst[:] = worst.max(initial=0.0)
        spread = 2.0 * a * worst[inverse] if conv.get("std", "none") != "none" else 0.0
        return np.asarray(own + a * (f + 4.0) + spread, dtype=np.float64)

    return condition


def _centred_scale(call: Call, conv: Conventions, inverse: NDArray[np.intp]) -> Array:
    """The denominator D of each entry, from float64 statistics of the rewards as seen."""
    (rewards,), kwargs = call
    r = np.asarray(rewards, dtype=np.float64)
    counts = np.bincount(inverse)
    ddof = 1 if conv["std"] == "sample" else 0
    means = np.bincount(inverse, weights=r) / counts
    c = r - means[inverse]
    if "mask" in kwargs:  # REINFORCE++: token-weighted batch variance of x
        w = np.asarray(kwargs["mask"]).sum(axis=1)
        x = c if "group" in kwargs else r
        m = float(np.sum(w * x) / w.sum())
        var = np.full(r.size, float(np.sum(w * (x - m) ** 2) / max(w.sum() - ddof, 1.0)))
    elif conv.get("std_scope") == "batch":
        var = np.full(r.size, float(np.var(r, ddof=ddof)) if r.size > ddof else 0.0)
    else:
        sq = np.bincount(inverse, weights=c * c)
        var = (sq / np.maximum(counts - ddof, 1))[inverse]
    eps, place = float(conv["eps"]), conv["eps_placement"]
    if place == "std":
        return np.asarray(np.sqrt(var) + eps, dtype=np.float64)
    if place == "variance":
        return np.asarray(np.sqrt(var + eps), dtype=np.float64)
    return np.asarray(np.sqrt(np.maximum(var, eps)), dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# advantages: checks
# ---------------------------------------------------------------------------------------------


def _adv_found(case: Case, i: int = 0) -> Array:
    """The candidate's advantages of call ``i``, of the reference's shape."""
    found = np.asarray(case.found[i], dtype=np.float64)
    want = np.asarray(case.expected(i)).shape
    assert found.shape == want, f"advantages of shape {found.shape}, expected {want}"
    return found


def _adv_agrees(case: Case) -> None:
    for i in range(len(case.calls)):
        found = _adv_found(case, i)
        case.show("found:   ", found)
        case.show("expected:", case.expected(i))
        case.assert_close(found, case.expected(i), case.condition(i), "the advantages")


def _groups_of(case: Case, i: int = 0) -> tuple[NDArray[np.intp], NDArray[np.int64]]:
    (rewards,), kwargs = case.calls[i]
    inverse = _labels(kwargs, np.asarray(rewards).shape[0])  # one row per sequence
    return inverse, np.bincount(inverse)


def _zero_mean(weighted: bool) -> Callable[[Case], None]:
    """Each group's (REINFORCE++: the token-weighted batch's) advantages have mean 0."""

    def zero_group_mean(case: Case) -> None:
        found = _adv_found(case)
        (_,), kwargs = case.calls[0]
        if weighted:
            w = np.asarray(kwargs["mask"]).sum(axis=1)
            inverse, counts = np.zeros(found.size, dtype=np.intp), np.asarray([w.sum()])
        else:
            w = np.ones(found.size)
            inverse, counts = _groups_of(case)
        err = case.allowed(case.expected(), case.condition())
        mean = np.bincount(inverse, weights=w * found) / counts
        f = np.asarray([summation_factor(max(int(c), 1)) for c in counts])
        allowed = np.bincount(inverse, weights=w * err) / counts
        allowed += f * case.u * np.bincount(inverse, weights=w * np.abs(found)) / counts
        singles = (counts == 1) & (case.conventions.get("singleton") == "raw")
        bad = (np.abs(mean) > allowed) & ~(singles & (not weighted))
        case.show("group means:", mean, "allowed:", allowed)
        assert not bad.any(), f"group means {mean[bad].tolist()} are not 0 (allowed {allowed[bad]})"

    return zero_group_mean


def _declared_std(case: Case, i: int = 0) -> tuple[Array, Array]:
    """Per group: the std of the found advantages in the declared convention, and σ/D(σ)."""
    found = _adv_found(case, i)
    inverse, counts = _groups_of(case, i)
    ddof = 1 if case.conventions["std"] == "sample" else 0
    mean = np.bincount(inverse, weights=found) / counts
    c = found - mean[inverse]
    std = np.sqrt(np.bincount(inverse, weights=c * c) / np.maximum(counts - ddof, 1))
    scale = _centred_scale(case.calls[i], case.conventions, inverse)
    (rewards,), _ = case.calls[i]
    r = np.asarray(rewards, dtype=np.float64)
    rm = np.bincount(inverse, weights=r) / counts
    rc = r - rm[inverse]
    sigma = np.sqrt(np.bincount(inverse, weights=rc * rc) / np.maximum(counts - ddof, 1))
    first = np.zeros(counts.size, dtype=np.intp)
    first[inverse[::-1]] = np.arange(found.size)[::-1]
    return std, sigma / scale[first]


def _unit_std(case: Case) -> None:
    std, target = _declared_std(case)
    err = case.allowed(case.expected(), case.condition())
    inverse, counts = _groups_of(case)
    worst = np.zeros(counts.size)
    np.maximum.at(worst, inverse, err)
    allowed = 2.0 * worst + case.u * summation_factor(int(counts.max())) * target
    use = counts >= 2
    case.show("std:", std, "σ/D(σ):", target, "allowed:", allowed)
    bad = use & (np.abs(std - target) > allowed)
    assert not bad.any(), (
        f"group standard deviations {std[bad].tolist()} in the declared convention "
        f"({case.conventions['std']}) are not σ/D(σ) = {target[bad].tolist()}"
    )


def _unit_std_weighted(case: Case) -> None:
    """REINFORCE++: the token-weighted std of A over the batch is s/D(s)."""
    found = _adv_found(case)
    (rewards,), kwargs = case.calls[0]
    w = np.asarray(kwargs["mask"]).sum(axis=1)
    ddof = 1 if case.conventions["std"] == "sample" else 0
    inverse = _labels(kwargs, found.size)
    r = np.asarray(rewards, dtype=np.float64)
    if "group" in kwargs:
        counts = np.bincount(inverse)
        x = r - (np.bincount(inverse, weights=r) / counts)[inverse]
        if case.conventions["singleton"] == "raw":
            x = np.where(counts[inverse] == 1, r, x)
    else:
        x = r

    def weighted_std(v: Array) -> float:
        m = float(np.sum(w * v) / w.sum())
        return float(np.sqrt(np.sum(w * (v - m) ** 2) / (w.sum() - ddof)))

    scale = _centred_scale(((x,), {"mask": kwargs["mask"]}), case.conventions, inverse * 0)
    target = weighted_std(x) / float(scale[0])
    std = weighted_std(found)
    err = case.allowed(case.expected(), case.condition())
    allowed = 2.0 * float(err.max()) + case.u * summation_factor(int(w.sum())) * target
    case.show("std:", std, "s/D(s):", target, "allowed:", allowed)
    assert abs(std - target) <= allowed, (
        f"the token-weighted standard deviation {std} in the declared convention "
        f"({case.conventions['std']}) is not s/D(s) = {target}"
    )


def _constant_zero(case: Case) -> None:
    found = _adv_found(case)
    (rewards,), _ = case.calls[0]
    r = np.asarray(rewards, dtype=np.float64)
    inverse, counts = _groups_of(case)
    lo = np.full(counts.size, np.inf)
    hi = np.full(counts.size, -np.inf)
    np.minimum.at(lo, inverse, r)
    np.maximum.at(hi, inverse, r)
    constant = ((lo == hi) & (counts >= 2))[inverse]
    # a mean computed as sum·(1/n) (torch's mean over a view) may round: within the condition
    allowed = case.allowed(np.zeros(found.shape), case.condition())
    bad = constant & ~(np.abs(found) <= allowed)
    case.show("constant groups:", constant, "found:", found, "allowed:", allowed)
    assert not bad.any(), (
        f"groups whose rewards are all equal got advantages {found[bad].tolist()}, not 0 "
        f"(allowed {allowed[bad].tolist()})"
    )


def _singletons(case: Case) -> None:
    found = _adv_found(case)
    (rewards,), _ = case.calls[0]
    inverse, counts = _groups_of(case)
    alone = counts[inverse] == 1
    want = np.asarray(rewards, dtype=np.float64) if case.conventions["singleton"] == "raw" else 0.0
    want_arr = np.broadcast_to(want, found.shape)
    ok = case.close(found, want_arr, np.abs(want_arr) * 2.0)
    bad = alone & ~ok
    assert not bad.any(), (
        f"singleton groups got {found[bad].tolist()}, expected {want_arr[bad].tolist()} "
        f"(singleton={case.conventions['singleton']!r})"
    )


def _shift_invariant(case: Case) -> None:
    if len(case.calls) < 2:
        return  # an explicit example of one call (check_conformance(examples=...)) has no pair
    a, b = _adv_found(case, 0), _adv_found(case, 1)
    move = np.abs(case.expected(1) - case.expected(0))
    allowed = (
        case.allowed(case.expected(0), case.condition(0))
        + case.allowed(case.expected(1), case.condition(1))
        + move
    )
    inverse, counts = _groups_of(case)
    raw = (counts[inverse] == 1) & (case.conventions.get("singleton") == "raw")
    bad = (np.abs(a - b) > allowed) & ~raw
    case.show("A(r):", a, "A(r + c):", b)
    assert not bad.any(), (
        f"shifting every reward changed advantages {a[bad].tolist()} to {b[bad].tolist()}"
    )


def _needs_std(conv: Conventions) -> str | None:
    if conv["std"] == "none":
        return "std='none' does not scale"
    if conv.get("std_scope", "group") == "batch":
        return "std_scope='batch': a group's std is not σ_group/D"
    return None


def _singles_apply(conv: Conventions) -> str | None:
    if conv["singleton"] == "excluded":
        return "singleton='excluded' is declared"
    if conv.get("groups") == "contiguous":
        return "groups='contiguous' has equal sizes"
    return None


def _adv_checks(family: str) -> list[Check]:
    checks = [
        Check(
            "values",
            f"the advantages agree with refimpl.losses.{family}_advantages under the declared "
            "conventions",
            _adv_strategy(family),
            _adv_agrees,
        ),
        Check(
            "zero_group_mean",
            "the advantages of each group have mean 0 (REINFORCE++: token-weighted batch mean)",
            _adv_strategy(family),
            _zero_mean(family == "reinforce_pp"),
        ),
        Check(
            "constant_group_is_zero",
            "a group whose rewards are all equal gets advantage 0",
            _adv_strategy(family, constant=True),
            _constant_zero,
        ),
        Check(
            "shift_invariance",
            "adding one constant to every reward leaves the advantages unchanged",
            _adv_strategy(family, shift=True),
            _shift_invariant,
        ),
    ]
    if family == "reinforce_pp":
        checks[2] = Check(  # whitening a batch: a constant group is not zero unless the batch is
            "unit_std",
            "the token-weighted batch standard deviation of the advantages is s/D(s) in the "
            "declared std (1 up to ε)",
            _adv_strategy(family),
            _unit_std_weighted,
            applies=_needs_std,
        )
        return checks
    if family == "grpo":
        checks.insert(
            2,
            Check(
                "unit_std",
                "each group's advantages have standard deviation σ/D(σ) in the declared std "
                "(1 up to ε)",
                _adv_strategy(family),
                _unit_std,
                applies=_needs_std,
            ),
        )
    checks.append(
        Check(
            "singleton_groups",
            "a group of one sequence gets 0 (singleton='zero') or its raw reward ('raw')",
            _adv_strategy(family, singles=True),
            _singletons,
            applies=_singles_apply,
        )
    )
    return checks


def _adv_spec(family: str, signature: str, conventions: tuple[Convention, ...]) -> Spec:
    return Spec(
        name=f"{family}_advantages",
        reference=f"losses.advantages.{family}_advantages",
        signature=signature,
        read=lambda raw, call, conv: ArrayBridge.to_numpy(raw),
        expected=_adv_expected(family),
        condition=_adv_condition(family),
        checks=tuple(_adv_checks(family)),
        conventions=conventions,
    )


def advantage_specs() -> list[Spec]:
    """The advantage specs (value only)."""
    return [
        _adv_spec(
            "grpo",
            "candidate(rewards, *, group) -> (B,) (std, eps, placement, scope: conventions)",
            (STD, EPS_GRPO, PLACEMENT_GRPO, SCOPE, SINGLETON, GROUPS),
        ),
        _adv_spec("rloo", "candidate(rewards, *, group) -> (B,)", (SINGLETON, GROUPS)),
        _adv_spec(
            "reinforce_pp",
            "candidate(rewards, *, mask[, group]) -> (B,) (token-weighted batch whitening)",
            (BASELINE, STD_PP, EPS_PP, PLACEMENT_PP, SINGLETON, GROUPS),
        ),
    ]
