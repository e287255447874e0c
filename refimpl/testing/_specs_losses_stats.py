r"""Specs of the loss statistics: aggregation and the outcome advantages.

``aggregation`` checks a candidate that turns a per-token loss matrix into the scalar a trainer
differentiates (:func:`refimpl.losses.aggregate_loss`): its value and its gradient with respect to
the loss matrix, which is exactly :func:`refimpl.losses.aggregation_weights`. The gradient comes
from the candidate's own autograd (:meth:`~refimpl.testing._arrays.ArrayBridge.value_and_vjp`,
cotangent 1 for the scalar); a numpy candidate returns ``(value, weights)`` itself
(``gradient='returned'``) or is checked on its value only (``gradient='none'``).

``grpo_advantages``, ``rloo_advantages`` and ``reinforce_pp_advantages`` check the outcome
advantages (value only: they are computed from rewards, never differentiated).

Derived tolerances
------------------
A sum of :math:`n` terms rounds by :math:`(\lceil\log_2 n\rceil + 1)\,u\sum|x|` (``summation_factor``).
The aggregated loss :math:`\sum w\ell` therefore has condition :math:`(f_N + 4)\sum|w\ell|` (the
weights :math:`1/(S L_b)` add two roundings, the product one) and its gradient :math:`4|w|`. A
z-score :math:`A_i = (r_i - \bar r)/D(\sigma)` inherits the rounding of the centred reward,
:math:`u(|r_i| + f_n\,\overline{|r|})`, divided by :math:`D`: the condition holds the terms
:math:`|r|/D` (large when a group's spread is small next to its rewards), plus
:math:`|A|(f_n + 4)` for the variance, the square root and the division.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st
from numpy.typing import NDArray

from refimpl.losses.advantages import grpo_advantages, reinforce_pp_advantages, rloo_advantages
from refimpl.losses.aggregation import AGGREGATION_MODES, aggregation_weights
from refimpl.testing._arrays import ArrayBridge
from refimpl.testing._engine import Call, Case, Check, Convention, Conventions, Spec
from refimpl.testing.tolerances import summation_factor

Array = NDArray[np.float64]
Strategy = Callable[[Conventions], st.SearchStrategy[list[Call]]]

__all__ = ["advantage_specs", "aggregation_spec"]

# ---------------------------------------------------------------------------------------------
# aggregation: conventions
# ---------------------------------------------------------------------------------------------

MODE = Convention(
    "mode",
    "token_mean",
    AGGREGATION_MODES,
    "the aggregation the candidate implements (refimpl.losses.aggregation_weights' mode); "
    "token_sum_norm receives constant=H, group_mean receives group=",
    who="token_mean: verl 0.9.1 agg_loss 'token-mean', TRL 1.16.0 'dapo'/'bnpo', AReaL 1.0.4 "
    "ppo_actor_loss_fn; seq_mean_token_mean: verl 'seq-mean-token-mean', TRL 'grpo', SkyRL 0.3.0 "
    "'sequence_mean', OpenRLHF 0.11.2 token_level_loss=False; seq_mean_token_sum: verl "
    "'seq-mean-token-sum', TRL 'luspo'; token_sum_norm: verl 'seq-mean-token-sum-norm' "
    "(loss_scale_factor), TRL 'dr_grpo' (max_completion_length), SkyRL 'seq_mean_token_sum_norm'; "
    "group_mean: SkyRL 'prompt_mean'; token_sum: verl 'token-sum'",
)
AGG_EMPTY_ROWS = Convention(
    "empty_rows",
    "excluded",
    ("excluded", "counted"),
    "whether a row without a valid token counts in the sequence (or group) count S",
    who="excluded: verl 0.9.1 agg_loss (seq_mask), OpenRLHF 0.11.2; counted: TRL 1.16.0 'grpo' "
    "(mean over every row)",
)
AGG_EMPTY_BATCH = Convention(
    "empty_batch",
    "drawn",
    ("drawn", "excluded"),
    "a batch without any valid token: drawn (the aggregate must be 0, not 0/0), or never drawn",
    who="excluded: verl 0.9.1 agg_loss 'token-mean' (divides by loss_mask.sum())",
)
AGG_GRADIENT = Convention(
    "gradient",
    "autodiff",
    ("autodiff", "returned", "none"),
    "'autodiff': differentiated by torch or jax autograd; 'returned': the candidate returns "
    "(value, dJ/dloss) itself; 'none': the value only (no gradient check)",
    who="returned: refimpl (aggregate_loss with aggregation_weights); none: a numpy candidate",
)

HUGE = (1e30, -1e30, 3e37, -7e20)


# ---------------------------------------------------------------------------------------------
# aggregation: draws
# ---------------------------------------------------------------------------------------------


def _lengths(
    draw: st.DrawFn, batch: int, time: int, conv: Conventions, *, low: int = 0
) -> NDArray[np.int64]:
    lengths = np.asarray(
        draw(st.lists(st.integers(low, time), min_size=batch, max_size=batch)), dtype=np.int64
    )
    if conv.get("empty_batch") == "excluded" and lengths.max() == 0:
        lengths[0] = 1
    return lengths


def _mask(lengths: NDArray[np.int64], time: int) -> Array:
    return (np.arange(time)[None, :] < lengths[:, None]).astype(np.float64)


@st.composite
def _agg_call(
    draw: st.DrawFn,
    conv: Conventions,
    *,
    wide: bool = False,
    empty: bool = False,
    zero: bool = False,
    garbage: bool = False,
) -> list[Call]:
    batch = draw(st.integers(2 if empty else 1, 4))
    time = draw(st.integers(1, 8))
    if zero:
        lengths = np.zeros(batch, dtype=np.int64)
    else:
        lengths = _lengths(draw, batch, time, conv)
        if empty:
            j = draw(st.integers(0, batch - 1))
            lengths[j] = 0
            lengths[(j + 1) % batch] = max(int(lengths[(j + 1) % batch]), 1)
    longest = int(lengths.max(initial=0))
    if wide:  # padded wider than needed, and H different from the padded width
        time = max(time, longest) + draw(st.integers(1, 6))
    mask = _mask(lengths, time)
    values = st.floats(-50.0, 50.0, allow_nan=False, allow_subnormal=False)
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    scale = draw(st.sampled_from([1.0, 1e-3, 50.0]))
    loss = rng.normal(0.0, scale, (batch, time))
    loss[0, 0] = draw(values)
    pad = rng.choice(HUGE, (batch, time)) if garbage else rng.normal(0.0, 1e3, (batch, time))
    loss = np.where(mask > 0, loss, pad)
    kwargs: dict[str, Any] = {}
    if conv["mode"] == "token_sum_norm":
        h = float(draw(st.integers(max(longest, 1), max(longest, 1) + 12)))
        if wide and h == time:
            h += 1.0
        kwargs["constant"] = h
    if conv["mode"] == "group_mean":
        kwargs["group"] = np.asarray(
            draw(st.lists(st.integers(0, 2), min_size=batch, max_size=batch)), dtype=np.int64
        )
    calls: list[Call] = [((loss, mask), kwargs)]
    if garbage:  # the same valid entries, other garbage
        other = np.where(mask > 0, loss, -np.flip(pad))
        calls.append(((other, mask), dict(kwargs)))
    return calls


def _agg_strategy(**flags: bool) -> Strategy:
    return lambda conv: _agg_call(conv, **flags)


# ---------------------------------------------------------------------------------------------
# aggregation: reference, reading, conditions, checks
# ---------------------------------------------------------------------------------------------


def _weights(call: Call, conv: Conventions) -> Array:
    (_, mask), kwargs = call
    return aggregation_weights(
        np.asarray(mask), mode=conv["mode"], empty_rows=conv["empty_rows"], **kwargs
    )


def _agg_expected(call: Call, conv: Conventions) -> tuple[Array, Array]:
    (loss, mask), _ = call
    w = _weights(call, conv)
    value = np.asarray(np.sum(w * np.where(np.asarray(mask) > 0, loss, 0.0)), dtype=np.float64)
    return value, w


def _agg_condition(call: Call, conv: Conventions, expected: Any) -> tuple[Array, Array]:
    (loss, mask), _ = call
    w = expected[1]
    terms = np.abs(w * np.where(np.asarray(mask) > 0, loss, 0.0))
    n = int(np.count_nonzero(np.asarray(mask)))
    value = np.asarray((summation_factor(max(n, 1)) + 4.0) * terms.sum(), dtype=np.float64)
    return value, 4.0 * np.abs(w)


def _agg_read(raw: Any, call: Call, conv: Conventions) -> tuple[Array, Array | None]:
    if conv["gradient"] == "none":
        return ArrayBridge.to_numpy(raw), None
    value, grad = raw
    return ArrayBridge.to_numpy(value), ArrayBridge.to_numpy(grad)


def _agg_vjp(call: Call, conv: Conventions) -> tuple[Call, Any]:
    return call, (np.asarray(1.0) if conv["gradient"] == "autodiff" else None)


def _agg_value(case: Case, i: int) -> None:
    value, _ = case.found[i]
    expected = case.expected(i)
    case.show("found:", value, "expected:", expected[0])
    assert value.shape == (), f"the aggregate has shape {value.shape}, expected a scalar"
    case.assert_close(value, expected[0], case.condition(i)[0], "the aggregated losses")


def _agg_gradient(case: Case, i: int) -> None:
    _, grad = case.found[i]
    if grad is None:
        return
    expected = case.expected(i)
    case.show("gradient:", grad, "weights:", expected[1])
    case.assert_close(grad, expected[1], case.condition(i)[1], "the gradients (weights)")


def _agg_values(case: Case) -> None:
    for i in range(len(case.calls)):
        _agg_value(case, i)


def _agg_gradients(case: Case) -> None:
    for i in range(len(case.calls)):
        _agg_value(case, i)
        _agg_gradient(case, i)


def _agg_padding(case: Case) -> None:
    for i, ((_, mask), _) in enumerate(case.calls):
        _agg_value(case, i)
        _, grad = case.found[i]
        if grad is not None:
            at_pad = grad[np.asarray(mask) == 0]
            assert np.all(at_pad == 0), f"padding entries got gradients {at_pad[at_pad != 0][:5]}"


def _agg_zero(case: Case) -> None:
    for i in range(len(case.calls)):
        value, grad = case.found[i]
        assert np.all(np.isfinite(value)), f"no valid token gave {value}, expected 0"
        assert np.all(value == 0), f"no valid token gave {value}, expected 0"
        if grad is not None:
            assert np.all(grad == 0), f"no valid token gave gradients {grad.ravel()[:5]}"


def _gradient_applies(conv: Conventions) -> str | None:
    return "the candidate declares gradient='none'" if conv["gradient"] == "none" else None


def _norm_applies(conv: Conventions) -> str | None:
    if conv["mode"] != "token_sum_norm":
        return "only mode='token_sum_norm' divides by a declared constant"
    return None


def _zero_applies(conv: Conventions) -> str | None:
    return "empty_batch='excluded' is declared" if conv["empty_batch"] == "excluded" else None


def aggregation_spec() -> Spec:
    """The ``aggregation`` spec: value and gradient of an aggregated per-token loss."""
    return Spec(
        name="aggregation",
        reference="losses.aggregation.aggregate_loss",
        signature="candidate(loss, mask) -> scalar (mode declared; constant= for token_sum_norm, "
        "group= for group_mean)",
        read=_agg_read,
        expected=_agg_expected,
        condition=_agg_condition,
        conventions=(MODE, AGG_EMPTY_ROWS, AGG_EMPTY_BATCH, AGG_GRADIENT),
        vjp=_agg_vjp,
        checks=(
            Check(
                "values",
                "the aggregate agrees with refimpl.losses.aggregate_loss in the declared mode",
                _agg_strategy(),
                _agg_values,
            ),
            Check(
                "gradient",
                "the gradient with respect to the loss matrix is aggregation_weights(mask, mode)",
                _agg_strategy(),
                _agg_gradients,
                applies=_gradient_applies,
            ),
            Check(
                "padding_contributes_nothing",
                "padding holding huge finite garbage changes neither the value nor the gradient "
                "(which is 0 there)",
                _agg_strategy(garbage=True),
                _agg_padding,
            ),
            Check(
                "token_sum_norm_uses_the_constant",
                "token_sum_norm divides by the declared constant H, not by the padded width "
                "(batches padded wider than their longest row)",
                _agg_strategy(wide=True),
                _agg_gradients,
                applies=_norm_applies,
            ),
            Check(
                "empty_rows",
                "rows without a valid token contribute nothing and count in S as declared "
                "(empty_rows)",
                _agg_strategy(empty=True),
                _agg_gradients,
            ),
            Check(
                "no_valid_token_gives_zero",
                "a batch without any valid token aggregates to 0 (not 0/0) with zero gradient",
                _agg_strategy(zero=True),
                _agg_zero,
                applies=_zero_applies,
            ),
        ),
    )


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
    "excluded: OpenRLHF 0.11.2 (divides by n − 1 = 0), TRL 1.16.0 (fixed-size groups)",
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
        kwargs["mask"] = _mask(lengths.astype(np.int64), time)
    call: Call = ((rewards,), kwargs)
    if shift:
        return _shift_calls(call, float(draw(st.sampled_from([1.0, -5.0, 3.0, 0.5]))))
    return [call]


def _adv_strategy(family: str, **flags: bool) -> Strategy:
    return lambda conv: _adv_calls(conv, family=family, **flags)


# ---------------------------------------------------------------------------------------------
# advantages: reference and the z-score's condition
# ---------------------------------------------------------------------------------------------


def _refimpl_singleton(conv: Conventions) -> str:
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
                    singleton=alone,  # type: ignore[arg-type]
                ),
                dtype=np.float64,
            )
        if family == "rloo":
            return np.asarray(
                rloo_advantages(r, group=kwargs["group"], singleton=alone),  # type: ignore[arg-type]
                dtype=np.float64,
            )
        return reinforce_pp_advantages(
            r,
            group=kwargs.get("group"),
            mask=kwargs["mask"],
            std=conv["std"],
            eps=conv["eps"],
            eps_placement=conv["eps_placement"],
            singleton=alone,  # type: ignore[arg-type]
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
    found = np.asarray(case.found[i], dtype=np.float64)
    (rewards,), _ = case.calls[i]
    size = np.asarray(rewards).size
    assert found.shape == (size,), f"advantages of shape {found.shape}, expected ({size},)"
    return found


def _adv_agrees(case: Case) -> None:
    for i in range(len(case.calls)):
        found = _adv_found(case, i)
        case.show("found:   ", found)
        case.show("expected:", case.expected(i))
        case.assert_close(found, case.expected(i), case.condition(i), "the advantages")


def _groups_of(case: Case, i: int = 0) -> tuple[NDArray[np.intp], NDArray[np.int64]]:
    (rewards,), kwargs = case.calls[i]
    inverse = _labels(kwargs, np.asarray(rewards).size)
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
    case.show("constant groups:", constant, "found:", found)
    assert np.all(found[constant] == 0), (
        f"groups whose rewards are all equal got advantages {found[constant].tolist()}, not 0"
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
        del checks[2]  # whitening a batch: a constant group is not zero unless the batch is
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
