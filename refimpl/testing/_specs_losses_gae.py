r"""The spec ``gae_advantages``: GAE advantages (and returns) against
:func:`refimpl.losses.gae.gae_advantages` (value only: advantages are computed under no_grad).

The candidate is ``candidate(rewards, values, *, gamma, lam, mask)`` with (B, T) arrays and
returns the advantages (B, T), or ``(advantages, returns)`` with ``output='both'``. A candidate
without a critic (``critic='none'``: the discounted return of a REINFORCE estimator, OpenRLHF's
``reinforce`` at ``gamma < 1``) is ``candidate(rewards, *, gamma, mask)`` and is checked against
the same reference at :math:`V = 0`, :math:`\lambda = 1`, where GAE is the discounted return
:math:`\sum_{l \ge 0}\gamma^l r_{t+l}` (claim GAE2). Conventions
express what frameworks do around the recursion: whitening the advantages over the batch's valid
tokens (which variance, which ε, where ε sits), what a masked position between valid tokens is,
where the value after the last valid token comes from, and whether padded inputs may hold
garbage. The returns are always those of the raw (unwhitened) advantages, as every framework read
computes them.

Derived tolerances: a step of the recursion rounds :math:`\delta_t` and the sum
:math:`\delta_t + \gamma\lambda A_{t+1}` by a few :math:`u` of their terms, and the error of each
step is carried back with the factor :math:`\gamma\lambda`; so :math:`A_t` has condition
:math:`(n_t + 4)S_t` with :math:`S_t = \sum_l(\gamma\lambda)^l(|r| + \gamma|V'| + |V|)_{t+l}`
(the same recursion on absolute values) and :math:`n_t` the steps left in the row; the return
adds :math:`|V_t| + |R_t|`. Whitening divides the centred advantage by :math:`D`: the condition
is then the advantage's plus the mean's, over :math:`D`, plus :math:`|\hat A|(f_N + 4)` and the
rounding of the standard deviation (:math:`2|\hat A|\max_t(\cdot)/D`), as in the REINFORCE++ spec.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st
from numpy.typing import NDArray

from refimpl.losses.advantages import reinforce_pp_advantages
from refimpl.losses.gae import Gaps, gae_advantages
from refimpl.testing._arrays import ArrayBridge
from refimpl.testing._engine import Call, Case, Check, Convention, Conventions, Spec
from refimpl.testing._specs_weights import COMPUTE
from refimpl.testing.tolerances import summation_factor

__all__ = ["gae_spec"]

Array = NDArray[np.float64]
Strategy = Callable[[Conventions], st.SearchStrategy[list[Call]]]

# ---------------------------------------------------------------------------------------------
# conventions
# ---------------------------------------------------------------------------------------------

OUTPUT = Convention(
    "output",
    "advantages",
    ("advantages", "both"),
    "'advantages': the candidate returns the advantages (B, T); 'both': (advantages, returns), "
    "the returns R = A + V of the unwhitened advantages",
    who="both: verl 0.9.1 compute_gae_advantage_return, SkyRL 0.3.0 compute_gae_advantage_return, "
    "OpenRLHF 0.11.2 get_advantages_and_returns",
)
WHITEN = Convention(
    "whiten",
    "none",
    ("none", "batch"),
    "'batch': the advantages are whitened over every valid token of the batch, (A − mean)/D "
    "(whiten_std, whiten_eps, eps_placement); 'none': raw GAE",
    who="batch: verl 0.9.1 and SkyRL 0.3.0 compute_gae_advantage_return (masked_whiten), "
    "OpenRLHF 0.11.2 (after get_advantages_and_returns, over all experiences), AReaL 1.0.4 "
    "(adv_norm with mean_level=std_level='batch'); none: OpenRLHF get_advantages_and_returns "
    "itself, AReaL without adv_norm",
)
WHITEN_STD = Convention(
    "whiten_std",
    "sample",
    ("sample", "population", "none"),
    "with whiten='batch': the token-level standard deviation, sample (N − 1) or population (N), "
    "or none (centred only)",
    who="sample: verl 0.9.1 masked_var(unbiased=True), SkyRL 0.3.0 masked_var, AReaL 1.0.4 "
    "(std_unbiased=True default); population: OpenRLHF 0.11.2; none: OpenRLHF no_std_norm",
)
WHITEN_EPS = Convention(
    "whiten_eps",
    1e-8,
    (1e-8, 0.0),
    "with whiten='batch': ε >= 0 in the denominator, placed by eps_placement",
    number=True,
    who="1e-8: verl 0.9.1, SkyRL 0.3.0, OpenRLHF 0.11.2; 1e-5: AReaL 1.0.4 NormConfig.eps",
)
PLACEMENT = Convention(
    "eps_placement",
    "variance",
    ("variance", "floor", "std"),
    "with whiten='batch': D = √(s² + ε), √max(s², ε), or s + ε",
    who="variance: verl 0.9.1 and SkyRL 0.3.0 masked_whiten (rsqrt(var + 1e-8)); floor: "
    "OpenRLHF 0.11.2 (var.clamp(min=1e-8).rsqrt()); std: AReaL 1.0.4 Normalization",
)
GAPS = Convention(
    "gaps",
    "skip",
    ("skip", "steps", "excluded"),
    "a masked position between two valid tokens: 'skip' (not a step: the recursion carries "
    "the next valid token's value and advantage across it), 'steps' (a step with reward 0 and "
    "value 0), or 'excluded' (masks are right-padded only)",
    who="skip: verl 0.9.1 compute_gae_advantage_return, AReaL 1.0.4 PPOActor.compute_advantages; "
    "steps: OpenRLHF 0.11.2 get_advantages_and_returns (rewards and values times the mask); "
    "excluded: SkyRL 0.3.0 (no mask in the recursion)",
)
BOOTSTRAP = Convention(
    "bootstrap",
    "zero",
    ("zero", "keyword"),
    "the value after each row's last valid token: 0 (the sequence ended), or given to the "
    "candidate as bootstrap= (B,)",
    who="zero: verl 0.9.1, OpenRLHF 0.11.2, SkyRL 0.3.0; keyword: AReaL 1.0.4 (a sequence without "
    "EOS bootstraps from the value at the next position)",
)
PADDING_INPUTS = Convention(
    "padding_inputs",
    "garbage",
    ("garbage", "zero"),
    "what padded rewards and values hold in the draws: any finite value, or 0 (a candidate that "
    "reads them is then checked on clean padding only)",
    who="zero: SkyRL 0.3.0 compute_gae_advantage_return (reads the value and reward of every "
    "position)",
)
PADDING = Convention(
    "padding",
    "zero",
    ("zero", "ignored"),
    "the outputs at padding: exactly 0, or never read",
    who="ignored: verl 0.9.1 and SkyRL 0.3.0 (whitened garbage at padding), AReaL 1.0.4 (carried "
    "advantage at masked positions), OpenRLHF 0.11.2 (advantages at gaps, whitening at padding)",
)

CRITIC = Convention(
    "critic",
    "values",
    ("values", "none"),
    "'values': the candidate takes the critic's values and lam; 'none': it takes neither "
    "(candidate(rewards, *, gamma, mask)) and returns the discounted return per token, checked "
    "as GAE at V = 0, λ = 1",
    who="none: OpenRLHF 0.11.2 compute_advantages_and_returns with advantage.estimator="
    "'reinforce' (get_cumulative_returns with advantage.gamma, then the batch whitening)",
)

CONVENTIONS = (
    CRITIC,
    OUTPUT,
    WHITEN,
    WHITEN_STD,
    WHITEN_EPS,
    PLACEMENT,
    GAPS,
    BOOTSTRAP,
    PADDING_INPUTS,
    PADDING,
    COMPUTE,
)

_GARBAGE = (0.0, 1e4, -1e4, 1e30, -1e30, 7.0)

# ---------------------------------------------------------------------------------------------
# draws
# ---------------------------------------------------------------------------------------------


def _discount(special: list[float]) -> st.SearchStrategy[float]:
    return st.one_of(
        st.sampled_from(special), st.floats(0.0, 1.0, allow_nan=False, allow_subnormal=False)
    )


def _mask(
    draw: st.DrawFn, batch: int, time: int, conv: Conventions, *, gaps: bool, padded: bool
) -> Array:
    lengths = np.asarray(
        draw(
            st.lists(
                st.integers(0, max(time - 1, 0) if padded else time),
                min_size=batch,
                max_size=batch,
            )
        )
    )
    mask = (np.arange(time)[None, :] < lengths[:, None]).astype(np.float64)
    if gaps and conv["gaps"] != "excluded":
        holes = np.asarray(
            draw(st.lists(st.booleans(), min_size=batch * time, max_size=batch * time))
        ).reshape(batch, time)
        mask = np.where(holes, 0.0, mask)
    if conv["whiten"] == "batch" and mask.sum() < 2:  # a token-level std needs two tokens
        mask[0, : min(2, time)] = 1.0
        if mask.sum() < 2:
            mask[min(1, batch - 1), 0] = 1.0
    return mask


@st.composite
def _gae_calls(
    draw: st.DrawFn,
    conv: Conventions,
    *,
    lam: float | None = None,
    gaps: bool = False,
    garbage: bool = False,
    long: bool = False,
) -> list[Call]:
    gamma = draw(_discount([1.0, 0.99, 0.9, 0.5, 0.0]))
    lam_ = lam if lam is not None else draw(_discount([1.0, 0.95, 0.9, 0.5, 0.0]))
    if conv["critic"] == "none":
        lam_ = 1.0
    if long:
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        batch, time = 2, 512
        rewards = np.where(rng.random((batch, time)) < 0.1, rng.normal(0, 1, (batch, time)), 0.0)
        values = rng.normal(0.0, 1.0, (batch, time))
        lengths = np.asarray([time, int(rng.integers(2, time))])
        mask = (np.arange(time)[None, :] < lengths[:, None]).astype(np.float64)
    else:
        batch = draw(st.integers(1 if conv["whiten"] == "none" else 2, 3))
        time = draw(st.integers(1, 6))
        n = batch * time
        entries = st.one_of(
            st.sampled_from([0.0, 1.0, -1.0, 0.5]),
            st.floats(-5.0, 5.0, allow_nan=False, allow_subnormal=False),
        )
        rewards = np.asarray(draw(st.lists(entries, min_size=n, max_size=n))).reshape(batch, time)
        values = np.asarray(draw(st.lists(entries, min_size=n, max_size=n))).reshape(batch, time)
        mask = _mask(draw, batch, time, conv, gaps=gaps, padded=garbage)
    pad = (
        0.0
        if conv["padding_inputs"] == "zero"
        else np.asarray(
            draw(
                st.lists(
                    st.sampled_from(_GARBAGE if garbage else (0.0, 3.0, -2.0)),
                    min_size=2 * mask.size,
                    max_size=2 * mask.size,
                )
            )
        ).reshape(2, *mask.shape)
    )
    pads = np.broadcast_to(pad, (2, *mask.shape))
    rewards = np.where(mask > 0, rewards, pads[0])
    values = np.where(mask > 0, values, pads[1])
    if conv["critic"] == "none":
        return [((rewards,), {"gamma": gamma, "mask": mask})]
    kwargs: dict[str, Any] = {"gamma": gamma, "lam": lam_, "mask": mask}
    if conv["bootstrap"] == "keyword":
        boot = draw(st.lists(st.floats(-5.0, 5.0, allow_nan=False), min_size=batch, max_size=batch))
        kwargs["bootstrap"] = np.asarray(boot, dtype=np.float64)
    return [((rewards, values), kwargs)]


def _strategy(**flags: Any) -> Strategy:
    def strategy(conv: Conventions) -> st.SearchStrategy[list[Call]]:
        if flags:
            return _gae_calls(conv, **flags)
        return st.one_of(_gae_calls(conv), _gae_calls(conv, gaps=True), _gae_calls(conv, long=True))

    return strategy


# ---------------------------------------------------------------------------------------------
# reference and rounding-error model
# ---------------------------------------------------------------------------------------------


def _inputs(call: Call) -> tuple[Array, Array, float]:
    """``(rewards, values, lam)`` of a call; a call without a critic has V = 0 and λ = 1."""
    args, kwargs = call
    rewards = np.asarray(args[0], dtype=np.float64)
    if len(args) == 1:
        return rewards, np.zeros_like(rewards), 1.0
    return rewards, np.asarray(args[1], dtype=np.float64), float(kwargs["lam"])


def _raw(call: Call, conv: Conventions) -> tuple[Array, Array]:
    rewards, values, lam = _inputs(call)
    kwargs = call[1]
    gaps: Gaps = "steps" if conv["gaps"] == "steps" else "skip"
    out = gae_advantages(
        rewards,
        values,
        gamma=float(kwargs["gamma"]),
        lam=lam,
        mask=kwargs["mask"],
        bootstrap=kwargs.get("bootstrap"),
        gaps=gaps,
    )
    return out.advantages, out.returns


def _whiten(adv: Array, mask: Array, conv: Conventions) -> Array:
    """Token-level batch whitening: refimpl's REINFORCE++ whitening with one weight per token."""
    valid = mask > 0
    flat = reinforce_pp_advantages(
        adv[valid],
        std=conv["whiten_std"],
        eps=float(conv["whiten_eps"]),
        eps_placement=conv["eps_placement"],
    )
    out = np.zeros(adv.shape)
    out[valid] = flat
    return out


def _expected(call: Call, conv: Conventions) -> tuple[Array, Array]:
    adv, ret = _raw(call, conv)
    if conv["whiten"] == "batch":
        adv = _whiten(adv, np.asarray(call[1]["mask"]), conv)
    return adv, ret


def _steps_condition(call: Call, conv: Conventions) -> Array:
    """(n_t + 4)·S_t, with S the recursion on absolute values (the raw advantages' condition)."""
    rewards, values, lam = _inputs(call)
    kwargs = call[1]
    mask = np.asarray(kwargs["mask"])
    r = np.where(mask > 0, np.abs(rewards), 0.0)
    v = np.where(mask > 0, np.abs(values), 0.0)
    gamma = float(kwargs["gamma"])
    boot = np.abs(np.asarray(kwargs.get("bootstrap", np.zeros(mask.shape[0])), dtype=np.float64))
    gaps: Gaps = "steps" if conv["gaps"] == "steps" else "skip"
    s = gae_advantages(r + 2.0 * v, v, gamma=gamma, lam=lam, mask=mask, bootstrap=boot, gaps=gaps)
    # with |r| + 2|V| in place of r, each δ is |r| + γ|V'| + |V| (>= 0, so A = S)
    steps = np.cumsum(mask[:, ::-1], axis=1)[:, ::-1]
    if gaps == "steps":
        steps = np.maximum(steps, (np.arange(mask.shape[1])[::-1][None, :] + 1) * (mask > 0))
    return np.asarray((steps + 4.0) * s.advantages, dtype=np.float64)


def _condition(call: Call, conv: Conventions, expected: Any) -> tuple[Array, Array]:
    mask = np.asarray(call[1]["mask"])
    cond = _steps_condition(call, conv)
    if conv["compute_dtype"] is not None:  # the inputs rounded once more
        cond = cond * 2.0
    adv, ret = expected
    _, values, _ = _inputs(call)
    cond_ret = cond + np.where(mask > 0, np.abs(values) + np.abs(ret), 0.0)
    if conv["whiten"] == "none":
        return cond, cond_ret
    raw, _ = _raw(call, conv)
    valid = mask > 0
    n = int(valid.sum())
    f = summation_factor(max(n, 1)) + 2.0
    centring = cond + np.abs(raw) + (f + 1.0) * float(np.mean((np.abs(raw) + cond)[valid]))
    scale = _scale(raw, mask, conv)
    own = np.where(valid, centring / scale if scale > 0 else 0.0, 0.0)
    spread = 2.0 * np.abs(adv) * float(np.max(own, initial=0.0))
    if conv["whiten_std"] == "none":
        spread = np.zeros_like(spread)
    return np.asarray(own + np.abs(adv) * (f + 4.0) + spread, dtype=np.float64), cond_ret


def _scale(raw: Array, mask: Array, conv: Conventions) -> float:
    """The whitening denominator D from float64 statistics of the raw advantages."""
    x = raw[mask > 0]
    if conv["whiten_std"] == "none":
        return 1.0
    ddof = 1 if conv["whiten_std"] == "sample" else 0
    var = float(np.sum((x - x.mean()) ** 2) / max(x.size - ddof, 1))
    eps, place = float(conv["whiten_eps"]), conv["eps_placement"]
    if place == "std":
        return float(np.sqrt(var) + eps)
    if place == "variance":
        return float(np.sqrt(var + eps))
    return float(np.sqrt(max(var, eps)))


# ---------------------------------------------------------------------------------------------
# reading and checks
# ---------------------------------------------------------------------------------------------


def _read(raw: Any, call: Call, conv: Conventions) -> tuple[Array, Array | None]:
    shape = np.shape(call[1]["mask"])
    if conv["output"] == "both":
        if not isinstance(raw, tuple | list) or len(raw) != 2:
            raise AssertionError(
                "with conventions={'output': 'both'} the candidate must return (advantages, "
                f"returns); got {type(raw).__name__}"
            )
        adv, ret = ArrayBridge.to_numpy(raw[0]), ArrayBridge.to_numpy(raw[1])
        assert ret.shape == shape, f"the returns have shape {ret.shape}, expected {shape}"
    else:
        if isinstance(raw, tuple | list):
            raise AssertionError(
                "the candidate returned a pair: pass conventions={'output': 'both'} if it returns "
                "(advantages, returns)"
            )
        adv, ret = ArrayBridge.to_numpy(raw), None
    assert adv.shape == shape, f"the advantages have shape {adv.shape}, expected {shape}"
    return adv, ret


def _compared(case: Case, i: int) -> NDArray[np.bool_]:
    mask = np.asarray(case.calls[i][1]["mask"]) > 0
    return mask if case.conventions["padding"] == "ignored" else np.ones_like(mask)


def _agree(case: Case, i: int, what: str = "") -> None:
    adv, ret = case.found[i]
    exp_adv, exp_ret = case.expected(i)
    cond_adv, cond_ret = case.condition(i)
    keep = _compared(case, i)
    case.show("advantages found:   ", adv)
    case.show("advantages expected:", exp_adv)
    pairs = [("advantages", adv, exp_adv, cond_adv)]
    if ret is not None:
        case.show("returns found:   ", ret)
        case.show("returns expected:", exp_ret)
        pairs.append(("returns", ret, exp_ret, cond_ret))
    for name, found, ref, cond in pairs:
        case.assert_close(found, ref, cond, f"{what}the {name}", either=~keep)


def _values(case: Case) -> None:
    for i in range(len(case.calls)):
        _agree(case, i)


def _padding(case: Case) -> None:
    for i in range(len(case.calls)):
        mask = np.asarray(case.calls[i][1]["mask"]) > 0
        if case.conventions["padding"] == "zero":
            for name, out in zip(("advantages", "returns"), case.found[i], strict=True):
                if out is None:
                    continue
                pad = out[~mask]
                assert np.all(pad == 0.0), (
                    f"padding entries got {name} {pad[pad != 0.0][:5].tolist()} instead of 0: "
                    "pass conventions={'padding': 'ignored'} if the outputs at padding are never "
                    "read"
                )
        try:
            _agree(case, i, "with garbage in the padded rewards and values, ")
        except AssertionError as err:
            raise AssertionError(
                f"{err}. The recursion reads a padded reward or value (the value after the last "
                "valid token must be 0 or the bootstrap, not the next column's): mask them, or "
                "declare conventions={'padding_inputs': 'zero'} if the callers' padding is 0 "
                "(SkyRL 0.3.0)"
            ) from None


def _td_error(case: Case) -> None:
    """λ = 0: A_t = δ_t = r_t + γV_{t+1} − V_t (the bootstrap is the next valid token's value)."""
    for i in range(len(case.calls)):
        _agree(case, i, "at λ = 0 (A_t must be the TD error r_t + γ·V_next − V_t), ")


def _discounted_return(case: Case) -> None:
    for i in range(len(case.calls)):
        _agree(case, i, "at λ = 1 (A_t must be the discounted return minus V_t), ")


def _gaps(case: Case) -> None:
    for i in range(len(case.calls)):
        _agree(case, i, f"with gaps in the mask (gaps={case.conventions['gaps']!r}), ")


def _whitened(case: Case) -> None:
    """Mean 0 over the valid tokens, and std s/D(s) in the declared convention."""
    for i in range(len(case.calls)):
        mask = np.asarray(case.calls[i][1]["mask"]) > 0
        adv = np.asarray(case.found[i][0], dtype=np.float64)[mask]
        err = case.allowed(case.expected(i)[0], case.condition(i)[0])[mask]
        n = adv.size
        f = summation_factor(n)
        mean = float(adv.mean())
        allowed = float(err.mean()) + f * case.u * float(np.abs(adv).mean())
        case.show("mean of the whitened advantages:", mean, "allowed:", allowed)
        assert abs(mean) <= allowed, (
            f"the whitened advantages have mean {mean} over the valid tokens, not 0 (allowed "
            f"{allowed}): whiten over the valid tokens only (a mean over the padded width?)"
        )
        if case.conventions["whiten_std"] == "none":
            continue
        raw, _ = _raw(case.calls[i], case.conventions)
        ddof = 1 if case.conventions["whiten_std"] == "sample" else 0
        x = raw[mask]
        sigma = float(np.sqrt(np.sum((x - x.mean()) ** 2) / (n - ddof)))
        target = sigma / _scale(raw, mask.astype(np.float64), case.conventions)
        std = float(np.sqrt(np.sum((adv - mean) ** 2) / (n - ddof)))
        allowed = 2.0 * float(err.max(initial=0.0)) + case.u * (f + 4.0) * target
        case.show("std:", std, "s/D(s):", target, "allowed:", allowed)
        assert abs(std - target) <= allowed, (
            f"the whitened advantages have standard deviation {std} over the valid tokens in the "
            f"declared convention ({case.conventions['whiten_std']}), not s/D(s) = {target}"
        )


def _whiten_applies(conv: Conventions) -> str | None:
    return "whiten='none' is declared" if conv["whiten"] == "none" else None


def _gaps_apply(conv: Conventions) -> str | None:
    return "gaps='excluded' is declared" if conv["gaps"] == "excluded" else None


def _critic_applies(conv: Conventions) -> str | None:
    return "critic='none' is declared (λ = 1 always)" if conv["critic"] == "none" else None


def _padding_applies(conv: Conventions) -> str | None:
    if conv["padding_inputs"] == "zero":
        return "padding_inputs='zero' is declared (padded rewards and values are 0)"
    return None


def gae_spec() -> Spec:
    """The ``gae_advantages`` spec (value only)."""
    return Spec(
        name="gae_advantages",
        reference="losses.gae.gae_advantages",
        signature="candidate(rewards, values, *, gamma, lam, mask[, bootstrap]) -> (B, T) "
        "advantages, or (advantages, returns) with output='both'; candidate(rewards, *, gamma, "
        "mask) with critic='none'",
        read=_read,
        expected=_expected,
        condition=_condition,
        conventions=CONVENTIONS,
        checks=(
            Check(
                "values",
                "the advantages (and returns) agree with refimpl.losses.gae_advantages under the "
                "declared conventions (right-padded rows, rows with gaps, rows of 512 tokens)",
                _strategy(),
                _values,
                small=_strategy(gaps=False),
            ),
            Check(
                "padding_contributes_nothing",
                "padded rewards and values holding huge finite garbage change nothing at the valid "
                "tokens (the value after the last valid token is not a padded value), and the "
                "outputs at padding are 0 (padding='zero')",
                _strategy(garbage=True),
                _padding,
                applies=_padding_applies,
            ),
            Check(
                "lambda_zero_is_td_error",
                "at λ = 0 each advantage is the one-step TD error r_t + γ·V_{t+1} − V_t (an "
                "off-by-one bootstrap, or γ and λ swapped, shows here)",
                _strategy(lam=0.0),
                _td_error,
                applies=_critic_applies,
            ),
            Check(
                "lambda_one_is_discounted_return",
                "at λ = 1 each advantage is the discounted return Σ γ^l r_{t+l} (+ γ^n·bootstrap) "
                "minus V_t",
                _strategy(lam=1.0),
                _discounted_return,
            ),
            Check(
                "gaps_in_the_mask",
                "masks with zeros between valid tokens (multi-turn observations) give the "
                "declared gap semantics",
                _strategy(gaps=True),
                _gaps,
                applies=_gaps_apply,
            ),
            Check(
                "whitened_mean_and_std",
                "with whiten='batch' the advantages have mean 0 over the valid tokens and standard "
                "deviation s/D(s) in the declared convention",
                _strategy(),
                _whitened,
                applies=_whiten_applies,
            ),
        ),
    )
