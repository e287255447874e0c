r"""Specs of GDPO (several reward components) and the optimal token baseline (one advantage per
token), against :mod:`refimpl.losses.advantages_tokens`; the sequence-level estimators and the
shared helpers are in :mod:`refimpl.testing._specs_losses_advantages_more`.

Value only (the frameworks compute advantages under ``torch.no_grad()``). Derived tolerances: GDPO
sums each component's GRPO condition (weighted) and adds the batch whitening's terms (token- or
sequence-weighted, the denominator as declared), as REINFORCE++ does; the optimal token baseline is a :math:`W`-weighted mean of the returns, off by
:math:`\sum_i \delta W_i |G_i - B| / \sum_i W_i` plus the sums' rounding, :math:`\delta W_i` the
rounding of the cumulative path variance (a running sum of :math:`1 + 2\pi + \Sigma\pi^2`
terms, the exponential included).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

from refimpl.losses.advantages import grpo_advantages
from refimpl.losses.advantages_tokens import gdpo_advantages, optimal_token_baseline_advantages
from refimpl.testing._arrays import ArrayBridge
from refimpl.testing._engine import Call, Case, Check, Convention, Conventions, Spec
from refimpl.testing._specs_losses_advantages_more import (
    _groups,
    _lengths,
    _singleton,
    _unchanged,
    _values,
)
from refimpl.testing._specs_losses_stats import Array
from refimpl.testing._specs_losses_stats_advantages import (
    EPS_GRPO,
    GROUPS,
    SINGLETON,
    STD,
    _adv_condition,
    _adv_found,
    _rewards_draw,
)
from refimpl.testing.tolerances import summation_factor

__all__ = ["token_advantage_specs"]

# ---------------------------------------------------------------------------------------------
# conventions
# ---------------------------------------------------------------------------------------------

EPS_OTB = Convention(
    "eps",
    0.0,
    (0.0, 1e-8),
    "ε >= 0 added to the baseline's denominator Σ W",
    number=True,
    who="1e-8: verl 0.9.1 compute_optimal_token_baseline_advantage and its multi-turn variant",
)
ZERO_TAIL = Convention(
    "zero_tail",
    True,
    (True, False),
    "the unique longest response's baseline is 0 past the second-longest length",
    who="True: verl 0.9.1 (handle_zero_tail default)",
)
POSITIONS = Convention(
    "positions",
    "column",
    ("column", "valid"),
    "which tokens of different rows share a baseline: the same column, or the k-th valid token "
    "of each row (a multi-turn mask's gaps skipped)",
    who="column: verl 0.9.1 compute_optimal_token_baseline_advantage; valid: "
    "compute_multi_turn_optimal_token_baseline_advantage",
)
WHITEN_EPS = Convention(
    "whiten_eps",
    1e-8,
    (1e-8, 0.0),
    "ε >= 0 under GDPO's batch variance, √(s² + ε)",
    number=True,
    who="1e-8: verl 0.9.1 masked_whiten; 1e-4: TRL 1.16.0 (normalize_then_sum)",
)
WHITEN_PLACEMENT = Convention(
    "whiten_placement",
    "variance",
    ("variance", "std", "floor"),
    "GDPO's batch denominator: √(s² + ε), s + ε, or √max(s², ε)",
    who="variance: verl 0.9.1 masked_whiten; std: TRL 1.16.0 GRPOTrainer "
    "(multi_objective_aggregation='normalize_then_sum', nanstd + 1e-4)",
)
WHITEN_WEIGHTS = Convention(
    "whiten_weights",
    "tokens",
    ("tokens", "sequences"),
    "GDPO's batch mean and variance: each sequence weighted by its valid tokens, or by 1",
    who="tokens: verl 0.9.1 masked_whiten over the response mask; sequences: TRL 1.16.0 "
    "(nanmean and nanstd over the batch's sequences)",
)


# ---------------------------------------------------------------------------------------------
# draws
# ---------------------------------------------------------------------------------------------


@st.composite
def _gdpo_calls(
    draw: st.DrawFn, conv: Conventions, *, shift: bool = False, scale: bool = False
) -> list[Call]:
    first, group = draw(_rewards_draw(conv))
    k = draw(st.integers(1, 3))
    cols = [first]
    for _ in range(k - 1):
        kind = draw(st.sampled_from([(0.0, 1.0), (0.0, 0.5, 1.0), (-1.0, 2.0, 3.5)]))
        cols.append(
            np.asarray(
                draw(st.lists(st.sampled_from(kind), min_size=first.size, max_size=first.size))
            )
        )
    rewards = np.stack(cols, axis=1)
    weights = np.asarray(draw(st.lists(st.sampled_from([1.0, 0.5, 2.0]), min_size=k, max_size=k)))
    kwargs = {"group": group, "weights": weights, "mask": _lengths(draw, first.size)}
    call: Call = ((rewards,), kwargs)
    if scale:
        c = float(draw(st.sampled_from([2.0, 0.5, 4.0])))
        return [call, ((rewards,), {**kwargs, "weights": weights * c})]
    if not shift:
        return [call]
    column = draw(st.integers(0, k - 1))
    moved = rewards.copy()
    moved[:, column] += float(draw(st.sampled_from([1.0, -5.0, 3.0])))
    return [call, ((moved,), dict(kwargs))]


@st.composite
def _otb_calls(draw: st.DrawFn, conv: Conventions, *, equal_weights: bool = False) -> list[Call]:
    rewards, group = draw(_rewards_draw(conv))
    mask = _lengths(draw, rewards.size)
    b, t = mask.shape
    if not equal_weights and draw(st.booleans()):  # a multi-turn mask: gaps between the turns
        bits = np.asarray(draw(st.lists(st.booleans(), min_size=b * t, max_size=b * t)))
        mask = bits.reshape(b, t).astype(np.float64)
        keep = np.asarray(draw(st.lists(st.integers(0, t - 1), min_size=b, max_size=b)))
        mask[np.arange(b), keep] = 1.0
        if b > 1 and draw(st.booleans()):  # a response with no valid token (an empty turn)
            mask[draw(st.integers(0, b - 1))] = 0.0
    token_rewards = np.zeros((b, t))
    for i, row in enumerate(mask):  # the outcome reward on the last valid token
        if row.any():
            token_rewards[i, np.flatnonzero(row)[-1]] = rewards[i]
    if draw(st.booleans()):  # dense per-token rewards as well
        dense = draw(st.lists(st.sampled_from([0.0, 0.25, -1.0]), min_size=b * t, max_size=b * t))
        token_rewards += np.asarray(dense).reshape(b, t) * mask
    # π <= 0.9 keeps w = 1 − 2π + Σπ² >= (1 − π)² >= 0.01: no cancellation in the weights
    pi = np.asarray(draw(st.lists(st.floats(0.01, 0.9), min_size=b * t, max_size=b * t)))
    if equal_weights:
        pi = np.full(b * t, pi[0])
    frac = np.asarray(draw(st.lists(st.floats(0.0, 1.0), min_size=b * t, max_size=b * t)))
    if equal_weights:
        frac = np.full(b * t, frac[0])
    s2 = pi * pi + frac * (1.0 - pi) ** 2
    logp = np.log(pi)
    kwargs = {"group": group, "mask": mask}
    return [((token_rewards, logp.reshape(b, t), s2.reshape(b, t)), kwargs)]


# ---------------------------------------------------------------------------------------------
# references and conditions
# ---------------------------------------------------------------------------------------------


def _gdpo_expected(call: Call, conv: Conventions) -> Array:
    (rewards,), kw = call
    return gdpo_advantages(
        rewards,
        group=kw["group"],
        weights=kw["weights"],
        mask=kw["mask"] if conv["whiten_weights"] == "tokens" else None,
        std=conv["std"],
        eps=conv["eps"],
        singleton=_singleton(conv),
        whiten_eps=conv["whiten_eps"],
        whiten_placement=conv["whiten_placement"],
    )


def _otb_expected(call: Call, conv: Conventions) -> Array:
    args, kw = call
    return optimal_token_baseline_advantages(
        *args,
        group=kw["group"],
        mask=kw["mask"],
        zero_tail=conv["zero_tail"],
        eps=conv["eps"],
        positions=conv["positions"],
    )


def _whiten_weights(kw: dict[str, Any], conv: Conventions) -> Array:
    """Each sequence's weight in GDPO's batch whitening: its valid tokens, or 1."""
    if conv["whiten_weights"] == "sequences":
        return np.ones(np.asarray(kw["mask"]).shape[0])
    return np.asarray(np.asarray(kw["mask"]).sum(axis=1), dtype=np.float64)


def _gdpo_condition(call: Call, conv: Conventions, expected: Any) -> Array:
    """Each component's GRPO condition, weighted and summed, then the whitening's terms."""
    (rewards,), kw = call
    r = np.asarray(rewards, dtype=np.float64)
    w = np.abs(np.asarray(kw["weights"], dtype=np.float64))
    grpo_conv = {**conv, "eps_placement": "std", "std_scope": "group"}
    cond_s = np.zeros(r.shape[0])
    total = np.zeros(r.shape[0])
    for k in range(r.shape[1]):
        col: Call = ((r[:, k],), {"group": kw["group"]})
        a_k = np.asarray(
            grpo_advantages(
                r[:, k],
                group=kw["group"],
                std=conv["std"],
                eps=conv["eps"],
                singleton=_singleton(conv),
            ),
            dtype=np.float64,
        )
        cond_s += w[k] * (_adv_condition("grpo")(col, grpo_conv, a_k) + 2.0 * np.abs(a_k))
        total += w[k] * a_k
    tokens = _whiten_weights(kw, conv)
    fb = summation_factor(max(int(tokens.sum()), 1)) + 2.0
    m = float(np.sum(tokens * total) / tokens.sum())
    var = float(np.sum(tokens * (total - m) ** 2) / max(tokens.sum() - 1.0, 1.0))
    e_w, place = float(conv["whiten_eps"]), conv["whiten_placement"]
    if place == "std":
        d = float(np.sqrt(var)) + e_w
    else:
        d = float(np.sqrt(var + e_w if place == "variance" else max(var, e_w)))
    a = np.abs(np.asarray(expected, dtype=np.float64))
    if d == 0.0:
        return np.asarray(a, dtype=np.float64)
    worst = float(np.max(cond_s + fb * np.abs(total), initial=0.0))
    return np.asarray(
        (cond_s + fb * np.max(np.abs(total))) / d + a * (fb + 4.0) + 2.0 * a * worst / d,
        dtype=np.float64,
    )


def _otb_condition(call: Call, conv: Conventions, expected: Any) -> Array:
    """``|G| + δG + δB`` per token: δB = Σ_i δW_i |G_i − B| / Σ_i W_i + the sums' rounding; for
    ``positions="valid"`` on each row's valid tokens moved to the front."""
    if conv["positions"] == "column":
        return _otb_column_condition(call, conv, expected)
    (rewards, logp, s2), kw = call
    m = np.asarray(kw["mask"], dtype=np.float64)
    width = int(m.sum(axis=1).max())
    rows = [np.flatnonzero(row) for row in m]

    def front(x: Any, fill: float) -> Array:
        out = np.full((m.shape[0], width), fill)
        for i, idx in enumerate(rows):
            out[i, : idx.size] = np.asarray(x, dtype=np.float64)[i, idx]
        return out

    packed: Call = (
        (front(rewards, 0.0), front(logp, 0.0), front(s2, 0.0)),
        {**kw, "mask": front(m, 0.0)},
    )
    cond_c = _otb_column_condition(packed, conv, front(expected, 0.0))
    cond = np.zeros_like(m)
    for i, idx in enumerate(rows):
        cond[i, idx] = cond_c[i, : idx.size]
    return cond


def _otb_column_condition(call: Call, conv: Conventions, expected: Any) -> Array:
    (rewards, logp, s2), kw = call
    m = np.asarray(kw["mask"], dtype=np.float64)
    r = np.asarray(rewards, dtype=np.float64) * m
    t = r.shape[1]
    g = np.cumsum(r[:, ::-1], axis=1)[:, ::-1]
    dg = (t + 1.0) * np.cumsum(np.abs(r)[:, ::-1], axis=1)[:, ::-1]
    pi = np.exp(np.asarray(logp, dtype=np.float64))
    w = (1.0 - 2.0 * pi + np.asarray(s2)) * m
    big_w = np.cumsum(w, axis=1)
    dw = (t + 4.0) * np.cumsum((1.0 + 2.0 * pi + np.asarray(s2)) * m, axis=1)
    inverse, counts = _groups(kw, r.shape[0])
    cond = np.abs(g) + dg
    a = np.abs(np.asarray(expected, dtype=np.float64))
    for grp in np.flatnonzero(counts >= 2):
        rows = np.flatnonzero(inverse == grp)
        den = np.sum(big_w[rows] * m[rows], axis=0) + float(conv["eps"])
        b = np.divide(
            np.sum(g[rows] * big_w[rows] * m[rows], axis=0), den, out=np.zeros(t), where=den > 0
        )
        f = summation_factor(int(rows.size)) + 3.0
        spread = np.sum(m[rows] * (dw[rows] * np.abs(g[rows] - b) + big_w[rows] * dg[rows]), axis=0)
        err_b = np.divide(spread, den, out=np.zeros(t), where=den > 0)
        err_b += f * np.max(np.abs(g[rows]) + dg[rows], axis=0)
        cond[rows] += err_b
    return np.asarray(np.where(m > 0, cond + a, 0.0), dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# checks
# ---------------------------------------------------------------------------------------------


def _padding_zero(case: Case) -> None:
    found = _adv_found(case)
    m = np.asarray(case.calls[0][1]["mask"])
    assert np.all(found[m == 0] == 0.0), f"padding carries advantages {found[m == 0].tolist()}"


def _otb_singletons_return(case: Case) -> None:
    found = _adv_found(case)
    (rewards, _, _), kw = case.calls[0]
    m = np.asarray(kw["mask"], dtype=np.float64)
    g = np.cumsum((np.asarray(rewards) * m)[:, ::-1], axis=1)[:, ::-1] * m
    inverse, counts = _groups(kw, found.shape[0])
    alone = (counts[inverse] == 1)[:, None] & np.ones_like(m, dtype=bool)
    ok = case.close(found, g, case.condition())
    assert not np.any(alone & ~ok), (
        f"a group of one did not get its return-to-go as advantage: {found.tolist()} vs "
        f"{g.tolist()}"
    )


def _otb_equal_weights(case: Case) -> None:
    """Equal per-token weights, equal lengths (no tail): the baseline is the group's mean return."""
    found = _adv_found(case)
    (rewards, _, _), kw = case.calls[0]
    m = np.asarray(kw["mask"], dtype=np.float64)
    g = np.cumsum((np.asarray(rewards) * m)[:, ::-1], axis=1)[:, ::-1]
    inverse, counts = _groups(kw, found.shape[0])
    want = np.array(g)
    for grp in np.flatnonzero(counts >= 2):
        rows = np.flatnonzero(inverse == grp)
        live = m[rows].sum(axis=0)
        mean = np.divide(
            np.sum(g[rows] * m[rows], axis=0), live, out=np.zeros(g.shape[1]), where=live > 0
        )
        want[rows] = g[rows] - mean
    want *= m
    uniform = np.all(m == m[:1], axis=None)
    if not uniform or case.conventions["eps"] != 0.0:
        return  # unequal lengths weigh W_t by how many tokens each row has
    case.assert_close(found, want, case.condition(), "the advantages (group mean return)")


def _otb_uniform_calls(conv: Conventions) -> st.SearchStrategy[list[Call]]:
    def rectangular(calls: list[Call]) -> list[Call]:
        (r, logp, s2), kw = calls[0]
        mask = np.ones_like(np.asarray(kw["mask"]))
        return [((r, logp, s2), {**kw, "mask": mask})]

    return _otb_calls(conv, equal_weights=True).map(rectangular)


def _batch_mean_zero(case: Case) -> None:
    """GDPO: the (token- or sequence-) weighted batch mean of the advantages is 0."""
    found = _adv_found(case)
    w = _whiten_weights(case.calls[0][1], case.conventions)
    err = case.allowed(case.expected(), case.condition())
    mean = float(np.sum(w * found) / w.sum())
    n = int(w.sum())
    allowed = float(np.sum(w * err) / w.sum()) + summation_factor(n) * case.u * float(
        np.sum(w * np.abs(found)) / w.sum()
    )
    case.show("weighted mean:", mean, "allowed:", allowed)
    assert abs(mean) <= allowed, f"the weighted batch mean {mean} is not 0 (allowed {allowed})"


def _eps_zero(conv: Conventions) -> str | None:
    return None if conv["eps"] == 0.0 else "ε > 0 shrinks the baseline by ΣW/(ΣW + ε)"


def _token_spec(
    name: str,
    ref: str,
    signature: str,
    expected: Any,
    checks: list[Check],
    conventions: tuple[Convention, ...],
    condition: Any,
) -> Spec:
    return Spec(
        name=name,
        reference=ref,
        signature=signature,
        read=lambda raw, call, conv: ArrayBridge.to_numpy(raw),
        expected=expected,
        condition=condition,
        checks=tuple(checks),
        conventions=conventions,
    )


def token_advantage_specs() -> list[Spec]:
    """GDPO and the optimal token baseline (value only)."""
    return [
        _token_spec(
            "gdpo_advantages",
            "losses.advantages_tokens.gdpo_advantages",
            "candidate(rewards, *, group, weights, mask) -> (B,) (rewards (B, K))",
            _gdpo_expected,
            [
                _values("gdpo", lambda conv: _gdpo_calls(conv)),
                Check(
                    "shift_invariance",
                    "adding one constant to one reward component leaves the advantages unchanged",
                    lambda conv: _gdpo_calls(conv, shift=True),
                    _unchanged,
                ),
                Check(
                    "weight_scale_invariance",
                    "multiplying every component weight by c > 0 leaves the advantages "
                    "unchanged (up to the whitening ε)",
                    lambda conv: _gdpo_calls(conv, scale=True),
                    _unchanged,
                ),
                Check(
                    "zero_batch_mean",
                    "the batch mean of the advantages is 0 (weighted as whiten_weights declares)",
                    lambda conv: _gdpo_calls(conv),
                    _batch_mean_zero,
                ),
            ],
            (STD, EPS_GRPO, SINGLETON, GROUPS, WHITEN_EPS, WHITEN_PLACEMENT, WHITEN_WEIGHTS),
            _gdpo_condition,
        ),
        _token_spec(
            "optimal_token_baseline_advantages",
            "losses.advantages_tokens.optimal_token_baseline_advantages",
            "candidate(token_rewards, logp_old, sum_pi_squared, *, group, mask) -> (B, T)",
            _otb_expected,
            [
                _values("optimal_token_baseline", lambda conv: _otb_calls(conv)),
                Check(
                    "padding_is_zero",
                    "padding tokens get advantage 0",
                    lambda conv: _otb_calls(conv),
                    _padding_zero,
                ),
                Check(
                    "singleton_gets_return",
                    "a group of one gets its reward-to-go",
                    lambda conv: _otb_calls(conv),
                    _otb_singletons_return,
                ),
                Check(
                    "equal_weights_is_group_mean",
                    "equal per-token weights and lengths: the baseline is the group's mean return",
                    _otb_uniform_calls,
                    _otb_equal_weights,
                    applies=_eps_zero,
                ),
            ],
            (EPS_OTB, ZERO_TAIL, POSITIONS, GROUPS),
            _otb_condition,
        ),
    ]
