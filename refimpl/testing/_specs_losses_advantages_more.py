r"""Specs of the advantages with other baselines and scales: GPG, OPO, ReMax, MaxRL and Pass@k (one
advantage per sequence), against :mod:`refimpl.losses.advantages_baselines`, and the helpers that
:mod:`refimpl.testing._specs_losses_advantages_tokens` (GDPO, the optimal token baseline) shares.

Value only: every framework computes advantages from rewards under ``torch.no_grad()``; none is
differentiated, so there is no gradient to compare.

Derived tolerances (per entry, in units of :math:`u`, before the engine's safety factor): a
baseline that is a (weighted) mean of :math:`n` rewards is off by at most
:math:`(f_n + 2)\,\overline{|r|}` with :math:`f_n` the pairwise sum's ``summation_factor``; the
centred reward :math:`r_i - b` adds :math:`|r_i|`; a scale :math:`s` multiplies both, and a scale
that itself depends on the rewards (MaxRL's :math:`1/(p + \varepsilon)`, Pass@k's
:math:`1/D(\sigma)`, GDPO's whitening) adds :math:`|A|` times the relative error of the scale.
The optimal token baseline is a :math:`W`-weighted mean of the returns: its error is
:math:`\sum_i \delta W_i |G_i - B| / \sum_i W_i` plus the sums', with :math:`\delta W_i` the
rounding of the cumulative path variance (a running sum of :math:`1 + 2\pi + \Sigma\pi^2` terms).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st
from numpy.typing import NDArray

from refimpl.losses.advantages_baselines import (
    gpg_advantages,
    maxrl_advantages,
    opo_advantages,
    passk_advantages,
    remax_advantages,
)
from refimpl.testing._arrays import ArrayBridge
from refimpl.testing._engine import Call, Case, Check, Convention, Conventions, Spec
from refimpl.testing._specs_losses_stats import Array, Strategy, padding_mask
from refimpl.testing._specs_losses_stats_advantages import (
    EPS_GRPO,
    GROUPS,
    SINGLETON,
    STD,
    _adv_agrees,
    _adv_condition,
    _adv_found,
    _constant_zero,
    _rewards_draw,
)
from refimpl.testing.tolerances import summation_factor

__all__ = ["more_advantage_specs"]

Ints = NDArray[np.intp]

# ---------------------------------------------------------------------------------------------
# conventions
# ---------------------------------------------------------------------------------------------

F_NORM = Convention(
    "f_norm",
    1.0,
    (1.0,),
    "F > 0: GPG divides the centred reward by this constant",
    number=True,
    who="1.0: verl 0.9.1 compute_gpg_outcome_advantage (f_norm default)",
)
EPS_MAXRL = Convention(
    "eps",
    0.0,
    (0.0, 1e-6),
    "ε >= 0 added to the group mean before dividing by it",
    number=True,
    who="1e-6: SkyRL 0.3.0 compute_maxrl_advantage",
)
# ---------------------------------------------------------------------------------------------
# draws
# ---------------------------------------------------------------------------------------------


def _lengths(draw: st.DrawFn, size: int) -> Array:
    time = draw(st.integers(1, 5))
    lengths = draw(st.lists(st.integers(1, time), min_size=size, max_size=size))
    return padding_mask(np.asarray(lengths, dtype=np.int64), time)


@st.composite
def _sequence_calls(
    draw: st.DrawFn,
    conv: Conventions,
    *,
    family: str,
    constant: bool = False,
    singles: bool = False,
    shift: bool = False,
    scale: bool = False,
    swap: bool = False,
) -> list[Call]:
    """``(rewards,), {group[, mask | baselines]}``; a second call with the rewards shifted, scaled,
    or (ReMax) swapped with the baselines if asked; ReMax with ``constant``: baselines = rewards."""
    rewards, group = draw(_rewards_draw(conv, constant=constant, singles=singles))
    if family == "maxrl":
        rewards = np.abs(rewards)
    kwargs: dict[str, Any] = {"group": group}
    if family == "opo":
        kwargs["mask"] = _lengths(draw, rewards.size)
        if constant:  # equal lengths: OPO's baseline is the group mean
            kwargs["mask"] = np.ones((rewards.size, int(kwargs["mask"].shape[1])))
    if family == "remax":
        drawn = np.asarray(draw(_floats_like(rewards.size)))
        kwargs = {"baselines": rewards.copy() if constant else drawn}
    call: Call = ((rewards,), kwargs)
    if swap:
        return [call, ((np.asarray(kwargs["baselines"]),), {"baselines": rewards})]
    if scale:
        c = float(draw(st.sampled_from([2.0, 0.5, 4.0, 3.0])))
        return [call, ((rewards * c,), dict(kwargs))]
    if not shift:
        return [call]
    c = float(draw(st.sampled_from([1.0, -5.0, 3.0, 0.5])))
    moved = dict(kwargs)
    if family == "remax":
        moved["baselines"] = np.asarray(kwargs["baselines"]) + c
    return [call, ((rewards + c,), moved)]


def _floats_like(size: int) -> st.SearchStrategy[list[float]]:
    one = st.floats(-4.0, 4.0, allow_subnormal=False)
    return st.lists(one, min_size=size, max_size=size)


def _calls(family: str, **flags: bool) -> Strategy:
    return lambda conv: _sequence_calls(conv, family=family, **flags)


# ---------------------------------------------------------------------------------------------
# references
# ---------------------------------------------------------------------------------------------


def _singleton(conv: Conventions) -> Any:
    alone = conv.get("singleton", "zero")
    return "zero" if alone == "excluded" else alone


def _expected(family: str) -> Callable[[Call, Conventions], Array]:
    def expected(call: Call, conv: Conventions) -> Array:
        args, kw = call
        r = np.asarray(args[0], dtype=np.float64)
        if family == "remax":
            out = remax_advantages(r, baselines=kw["baselines"])
        elif family == "gpg":
            out = gpg_advantages(
                r, group=kw["group"], f_norm=conv["f_norm"], singleton=_singleton(conv)
            )
        elif family == "opo":
            lengths = np.asarray(kw["mask"]).sum(axis=1)
            out = opo_advantages(r, group=kw["group"], lengths=lengths, singleton=_singleton(conv))
        elif family == "maxrl":
            out = maxrl_advantages(
                r, group=kw["group"], eps=conv["eps"], singleton=_singleton(conv)
            )
        else:
            out = passk_advantages(r, group=kw["group"], std=conv["std"], eps=conv["eps"])
        return np.asarray(out, dtype=np.float64)

    return expected


# ---------------------------------------------------------------------------------------------
# conditions (see the module docstring)
# ---------------------------------------------------------------------------------------------


def _groups(kw: dict[str, Any], size: int) -> tuple[Ints, NDArray[np.int64]]:
    _, inverse = np.unique(np.asarray(kw["group"]), return_inverse=True)
    inv = np.asarray(inverse, dtype=np.intp).reshape(-1)
    return inv, np.bincount(inv, minlength=int(inv.max(initial=-1)) + 1)


def _centred_terms(r: Array, kw: dict[str, Any]) -> tuple[Array, Array, Ints]:
    """Per entry: ``|r_i| + (f_n + 2)·mean_g |r|`` (the centred reward's error), ``f_n``, groups."""
    a = np.abs(r)
    inverse, counts = _groups(kw, r.size)
    f = np.asarray([summation_factor(int(c)) for c in counts])[inverse]
    mean_abs = (np.bincount(inverse, weights=a) / counts)[inverse]
    return a + (f + 2.0) * mean_abs, f, inverse


def _sequence_condition(family: str) -> Callable[[Call, Conventions, Any], Array]:
    def condition(call: Call, conv: Conventions, expected: Any) -> Array:
        (rewards,), kw = call
        r = np.asarray(rewards, dtype=np.float64)
        a = np.abs(np.asarray(expected, dtype=np.float64))
        if family == "remax":
            return np.asarray(np.abs(r) + np.abs(np.asarray(kw["baselines"])) + a, dtype=np.float64)
        if family == "passk":
            return _passk_condition(call, conv, expected)
        centring, f, inverse = _centred_terms(r, kw)
        if family == "gpg":
            counts_scale = r.size / max(int(np.count_nonzero(r)), 1) / float(conv["f_norm"])
            return np.asarray(centring * counts_scale + 3.0 * a, dtype=np.float64)
        if family == "opo":
            return np.asarray(centring + a, dtype=np.float64)
        counts = np.bincount(inverse)
        p = (np.bincount(inverse, weights=r) / counts)[inverse] + float(conv["eps"])
        scale = np.divide(1.0, p, out=np.zeros_like(p), where=p > 0)
        mean_err = (f + 2.0) * (np.bincount(inverse, weights=np.abs(r)) / counts)[inverse]
        return np.asarray((centring + mean_err * a) * scale + 3.0 * a, dtype=np.float64)

    return condition


def _passk_condition(call: Call, conv: Conventions, expected: Any) -> Array:
    """The gap's rounding over D, and (std) GRPO's z-score condition of the scale."""
    (rewards,), kw = call
    r = np.abs(np.asarray(rewards, dtype=np.float64))
    a = np.abs(np.asarray(expected, dtype=np.float64))
    inverse, _ = _groups(kw, r.size)
    top = np.zeros(int(inverse.max()) + 1)
    np.maximum.at(top, inverse, r)
    if conv["std"] == "none":
        return np.asarray(np.where(a > 0, 2.0 * top[inverse] + a, 0.0), dtype=np.float64)
    z = _adv_condition("grpo")(
        call, {**conv, "eps_placement": "std", "std_scope": "group"}, expected
    )
    return np.asarray(np.where(a > 0, 2.0 * z + a, 0.0), dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# checks
# ---------------------------------------------------------------------------------------------


def _group_sums_zero(weighted: bool) -> Callable[[Case], None]:
    """Each group's advantages sum to 0 (OPO: weighted by the response lengths)."""

    def check(case: Case) -> None:
        found = _adv_found(case)
        _, kw = case.calls[0]
        inverse, counts = _groups(kw, found.size)
        w = np.asarray(kw["mask"]).sum(axis=1) if weighted else np.ones(found.size)
        err = case.allowed(case.expected(), case.condition())
        sums = np.bincount(inverse, weights=w * found)
        f = np.asarray([summation_factor(int(c)) for c in counts])
        allowed = np.bincount(inverse, weights=w * err) + f * case.u * np.bincount(
            inverse, weights=w * np.abs(found)
        )
        raw_single = (counts == 1) & (case.conventions.get("singleton") == "raw")
        bad = (np.abs(sums) > allowed) & ~raw_single
        case.show("group sums:", sums, "allowed:", allowed)
        assert not bad.any(), f"group sums {sums[bad].tolist()} are not 0 (allowed {allowed[bad]})"

    return check


def _singletons_as_declared(scale: Callable[[Case], float]) -> Callable[[Case], None]:
    def check(case: Case) -> None:
        found = _adv_found(case)
        (rewards,), kw = case.calls[0]
        inverse, counts = _groups(kw, found.size)
        alone = counts[inverse] == 1
        r = np.asarray(rewards, dtype=np.float64)
        want = r * scale(case) if case.conventions["singleton"] == "raw" else np.zeros_like(r)
        ok = case.close(found, want, np.abs(want) * 4.0)
        bad = alone & ~ok
        assert not bad.any(), (
            f"singleton groups got {found[bad].tolist()}, expected {want[bad].tolist()} "
            f"(singleton={case.conventions['singleton']!r})"
        )

    return check


def _gpg_scale(case: Case) -> float:
    (rewards,), _ = case.calls[0]
    r = np.asarray(rewards)
    return r.size / max(int(np.count_nonzero(r)), 1) / float(case.conventions["f_norm"])


def _unchanged(case: Case) -> None:
    """Two calls whose rewards differ by a shift (GDPO: one column): the same advantages."""
    if len(case.calls) < 2:
        return  # an explicit example of one call (check_conformance(examples=...)) has no pair
    a, b = _adv_found(case, 0), _adv_found(case, 1)
    allowed = (
        case.allowed(case.expected(0), case.condition(0))
        + case.allowed(case.expected(1), case.condition(1))
        + np.abs(case.expected(1) - case.expected(0))
    )
    case.show("A(r):", a, "A(r + c):", b)
    bad = np.abs(a - b) > allowed
    assert not bad.any(), f"shifting the rewards changed {a[bad].tolist()} to {b[bad].tolist()}"


def _one_best(case: Case) -> None:
    """Pass@k: at most one non-zero advantage per group, at a best reward, and never negative."""
    found = _adv_found(case)
    (rewards,), kw = case.calls[0]
    r = np.asarray(rewards, dtype=np.float64)
    inverse, counts = _groups(kw, found.size)
    top = np.full(counts.size, -np.inf)
    np.maximum.at(top, inverse, r)
    allowed = case.allowed(case.expected(), case.condition())
    nonzero = np.abs(found) > allowed
    per_group = np.bincount(inverse, weights=nonzero.astype(np.float64), minlength=counts.size)
    assert np.all(per_group <= 1), f"groups with several non-zero advantages: {found.tolist()}"
    assert not np.any(nonzero & (r < top[inverse])), (
        f"a response below its group's best reward got a non-zero advantage: {found.tolist()}"
    )
    assert np.all(found >= -allowed), f"a negative Pass@k advantage: {found.tolist()}"


def _remax_zero(case: Case) -> None:
    found = _adv_found(case)
    allowed = case.allowed(case.expected(), case.condition())
    case.show("found:", found)
    assert np.all(np.abs(found) <= allowed), (
        f"a reward equal to its greedy baseline got advantage {found.tolist()}, not 0"
    )


def _antisymmetric(case: Case) -> None:
    """ReMax: swapping rewards and baselines negates the advantages."""
    a, b = _adv_found(case, 0), _adv_found(case, 1)
    allowed = case.allowed(case.expected(0), case.condition(0)) + case.allowed(
        case.expected(1), case.condition(1)
    )
    case.show("A(r, b):", a, "A(b, r):", b)
    bad = np.abs(a + b) > allowed
    assert not bad.any(), f"A(b, r) = {b[bad].tolist()} is not −A(r, b) = {(-a[bad]).tolist()}"


def _eps_zero_maxrl(conv: Conventions) -> str | None:
    return None if conv["eps"] == 0.0 else "ε > 0 is not scaled with the rewards"


def _singles_apply(conv: Conventions) -> str | None:
    if conv["singleton"] == "excluded":
        return "singleton='excluded' is declared"
    if conv.get("groups") == "contiguous":
        return "groups='contiguous' has equal sizes"
    return None


def _values(family: str, strategy: Strategy) -> Check:
    return Check(
        "values",
        f"the advantages agree with refimpl.{family}_advantages under the declared conventions",
        strategy,
        _adv_agrees,
    )


def _singles(scale: Callable[[Case], float], family: str) -> Check:
    return Check(
        "singleton_groups",
        "a group of one sequence gets 0 (singleton='zero') or its raw reward, scaled ('raw')",
        _calls(family, singles=True),
        _singletons_as_declared(scale),
        applies=_singles_apply,
    )


def _zero_sum(family: str, weighted: bool = False) -> Check:
    what = "length-weighted advantages" if weighted else "advantages"
    return Check(
        "zero_group_sum",
        f"the {what} of each group sum to 0",
        _calls(family),
        _group_sums_zero(weighted),
    )


def _constant(family: str) -> Check:
    return Check(
        "constant_group_is_zero",
        "a group whose rewards are all equal gets advantage 0",
        _calls(family, constant=True),
        _constant_zero,
    )


def _shift(family: str, what: str) -> Check:
    return Check("shift_invariance", what, _calls(family, shift=True), _unchanged)


def _spec(
    name: str,
    ref: str,
    signature: str,
    family: str,
    checks: list[Check],
    conventions: tuple[Convention, ...],
    condition: Any = None,
) -> Spec:
    return Spec(
        name=name,
        reference=ref,
        signature=signature,
        read=lambda raw, call, conv: ArrayBridge.to_numpy(raw),
        expected=_expected(family),
        condition=condition or _sequence_condition(family),
        checks=tuple(checks),
        conventions=conventions,
    )


def _gpg_spec() -> Spec:
    """GPG: the group-mean baseline scaled by α = B/max(#nonzero, 1)."""
    return _spec(
        "gpg_advantages",
        "losses.advantages_baselines.gpg_advantages",
        "candidate(rewards, *, group) -> (B,) (α = B/max(#nonzero, 1))",
        "gpg",
        [
            _values("gpg", _calls("gpg")),
            _zero_sum("gpg"),
            _constant("gpg"),
            _singles(_gpg_scale, "gpg"),
        ],
        (F_NORM, SINGLETON, GROUPS),
    )


def _opo_spec() -> Spec:
    """OPO: the length-weighted group baseline."""
    one = lambda case: 1.0  # noqa: E731
    return _spec(
        "opo_advantages",
        "losses.advantages_baselines.opo_advantages",
        "candidate(rewards, *, group, mask) -> (B,) (lengths = mask row sums)",
        "opo",
        [
            _values("opo", _calls("opo")),
            _zero_sum("opo", weighted=True),
            Check(
                "equal_lengths_is_group_mean",
                "with equal lengths the baseline is the group mean (Dr GRPO)",
                _calls("opo", constant=True),
                _adv_agrees,
            ),
            _shift("opo", "adding one constant to every reward leaves the advantages unchanged"),
            _singles(one, "opo"),
        ],
        (SINGLETON, GROUPS),
    )


def _remax_spec() -> Spec:
    """ReMax: the greedy response's reward as the baseline."""
    return _spec(
        "remax_advantages",
        "losses.advantages_baselines.remax_advantages",
        "candidate(rewards, *, baselines) -> (B,)",
        "remax",
        [
            _values("remax", _calls("remax")),
            _shift(
                "remax",
                "adding one constant to the rewards and the greedy baselines "
                "leaves the advantages unchanged",
            ),
            Check(
                "reward_equal_to_baseline_is_zero",
                "a reward equal to its greedy baseline gets advantage 0",
                _calls("remax", constant=True),
                _remax_zero,
            ),
            Check(
                "antisymmetry",
                "swapping rewards and baselines negates the advantages",
                _calls("remax", swap=True),
                _antisymmetric,
            ),
        ],
        (),
    )


def _maxrl_spec() -> Spec:
    """MaxRL: the group-centred reward divided by the group's mean reward."""
    one = lambda case: 1.0  # noqa: E731
    return _spec(
        "maxrl_advantages",
        "losses.advantages_baselines.maxrl_advantages",
        "candidate(rewards, *, group) -> (B,) (rewards >= 0)",
        "maxrl",
        [
            _values("maxrl", _calls("maxrl")),
            _zero_sum("maxrl"),
            _constant("maxrl"),
            Check(
                "scale_invariance",
                "multiplying every reward by c > 0 leaves the advantages unchanged (ε = 0)",
                _calls("maxrl", scale=True),
                _unchanged,
                applies=_eps_zero_maxrl,
            ),
            _singles(one, "maxrl"),
        ],
        (EPS_MAXRL, SINGLETON, GROUPS),
    )


def _passk_spec() -> Spec:
    """Pass@k: only each group's best response gets a non-zero advantage."""
    return _spec(
        "passk_advantages",
        "losses.advantages_baselines.passk_advantages",
        "candidate(rewards, *, group) -> (B,) (groups of two or more)",
        "passk",
        [
            _values("passk", _calls("passk")),
            Check(
                "one_best_per_group",
                "at most one advantage per group is non-zero, at a best reward, and >= 0",
                _calls("passk"),
                _one_best,
            ),
            _shift("passk", "adding one constant to every reward leaves the advantages unchanged"),
            _constant("passk"),
        ],
        (
            STD,
            EPS_GRPO,
            Convention(
                "singleton",
                "excluded",
                ("excluded",),
                "groups of one are never drawn (Pass@k needs two)",
            ),
            GROUPS,
        ),
    )


def more_advantage_specs() -> list[Spec]:
    """GPG, OPO, ReMax, MaxRL and Pass@k (value only); GDPO and the optimal token baseline are in
    :mod:`refimpl.testing._specs_losses_advantages_tokens`."""
    return [_gpg_spec(), _opo_spec(), _remax_spec(), _maxrl_spec(), _passk_spec()]
