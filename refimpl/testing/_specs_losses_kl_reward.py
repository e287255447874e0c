r"""The spec ``kl_reward``: per-token rewards with the KL penalty folded in, against
:func:`refimpl.losses.kl_penalized_rewards`.

Value only: the token rewards are computed from detached log-probabilities (OpenRLHF builds them in
its experience maker, under ``torch.no_grad``), so there is no gradient to compare.

Derived tolerance (per entry, units of :math:`u`, before the engine's safety factor): the product
:math:`\beta\,\mathrm{kl}` rounds once and the sum with the outcome reward once, so the error is
at most :math:`|\beta\,\mathrm{kl}| + |r|` with :math:`r` the token reward (clipping is exact).
The shaped outcome :math:`(R + c)\,s` (``reward_shaping="bias_scale"``) rounds twice more, by at
most :math:`2(|R| + |c|)\,|s|`, which the condition adds at each row's last real token.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st
from numpy.typing import NDArray

from refimpl.losses.kl_reward import kl_penalized_rewards
from refimpl.testing._arrays import ArrayBridge
from refimpl.testing._engine import Call, Case, Check, Convention, Conventions, Spec
from refimpl.testing._specs_losses_stats import Array, padding_mask
from refimpl.testing.tolerances import summation_factor

__all__ = ["kl_reward_spec"]

PADDING = Convention(
    "padding",
    "zero",
    ("zero", "ignored"),
    "the token reward at padding: exactly 0, or never read (returns and GAE multiply it by the "
    "mask)",
    who="ignored: OpenRLHF 0.11.2 compute_reward (−kl_coef·kl is not masked; an all-padding "
    "row's reward lands on its last position)",
)

REWARD_CLIP = Convention(
    "reward_clip",
    "applied",
    ("applied", "none", "symmetric"),
    "whether the candidate clips the outcome reward to the range it is given, or has no clip "
    "(then every call is drawn with reward_clip=None, which the candidate may ignore), or clips "
    "only to symmetric ranges (-c, c) (drawn so, or None)",
    who="none: SkyRL 0.3.0 RayPPOTrainer.apply_reward_kl_penalty (the token rewards as they "
    "come); symmetric: AReaL 1.0.4 PPOActor._compute_advantages (±reward_clip)",
)

REWARD_SHAPING = Convention(
    "reward_shaping",
    "none",
    ("none", "bias_scale"),
    "'bias_scale': the candidate also takes reward_bias= and reward_scaling= (drawn) and clips "
    "(R + reward_bias)·reward_scaling; 'none': it is called without them",
    who="bias_scale: AReaL 1.0.4 PPOActor._compute_advantages (reward_bias, reward_scaling)",
)


def _floats(low: float, high: float) -> st.SearchStrategy[float]:
    return st.floats(low, high, allow_nan=False, allow_infinity=False, allow_subnormal=False)


@st.composite
def _draw(draw: st.DrawFn, conv: Conventions, beta_zero: bool = False) -> Call:
    """``(rewards, kl), {beta, reward_clip, mask}``: rows of 0..T real tokens, garbage padding."""
    batch, time = draw(st.integers(1, 4)), draw(st.integers(1, 6))
    lengths = draw(
        st.lists(st.one_of(st.just(time), st.integers(0, time)), min_size=batch, max_size=batch)
    )
    mask = padding_mask(np.asarray(lengths, dtype=np.int64), time)
    rewards = np.asarray(
        draw(
            st.lists(
                st.one_of(st.sampled_from([0.0, 1.0, -1.0, 15.0]), _floats(-20.0, 20.0)),
                min_size=batch,
                max_size=batch,
            )
        )
    )
    kl = np.asarray(
        draw(st.lists(_floats(-3.0, 3.0), min_size=batch * time, max_size=batch * time))
    )
    kl = np.where(mask > 0, kl.reshape(batch, time), draw(st.sampled_from([0.0, 1e3, -7.0])))
    beta = (
        0.0
        if beta_zero
        else draw(st.one_of(st.sampled_from([0.0, 0.01, 0.05, 1.0]), _floats(0.0, 2.0)))
    )
    kwargs: dict[str, Any] = {"beta": beta, "reward_clip": _clip(draw, conv), "mask": mask}
    if conv["reward_shaping"] == "bias_scale":
        kwargs["reward_bias"] = draw(st.one_of(st.sampled_from([0.0, -0.5, 1.0]), _floats(-5, 5)))
        kwargs["reward_scaling"] = draw(
            st.one_of(st.sampled_from([1.0, 0.5, 2.0, -1.0]), _floats(-4.0, 4.0))
        )
    return (rewards, kl), kwargs


def _clip(draw: st.DrawFn, conv: Conventions) -> tuple[float, float] | None:
    if conv["reward_clip"] == "none":
        return None
    if conv["reward_clip"] == "symmetric":
        c = draw(st.one_of(st.none(), st.just(10.0), _floats(0.0, 5.0)))
        return None if c is None else (-c, c)
    return draw(
        st.one_of(
            st.none(), st.just((-10.0, 10.0)), st.tuples(_floats(-5.0, 0.0), _floats(0.0, 5.0))
        )
    )


def _outcome(call: Call) -> Array:
    """Each row's shaped and clipped outcome reward, as the reference computes it."""
    (rewards, _), kw = call
    r = np.asarray(rewards, dtype=np.float64)
    r = (r + float(kw.get("reward_bias", 0.0))) * float(kw.get("reward_scaling", 1.0))
    clip = kw["reward_clip"]
    return r if clip is None else np.clip(r, clip[0], clip[1])


def _calls(beta_zero: bool = False) -> Any:
    return lambda conv: _draw(conv, beta_zero).map(lambda c: [c])


def _expected(call: Call, conv: Conventions) -> Array:
    (rewards, kl), kw = call
    return kl_penalized_rewards(rewards, kl, **kw)


def _condition(call: Call, conv: Conventions, expected: Any) -> Array:
    (_, kl), kw = call
    m = np.asarray(kw["mask"])
    penalty = np.abs(float(kw["beta"]) * np.where(m > 0, np.asarray(kl), 0.0))
    shaping = 2.0 * (np.abs(call[0][0]) + abs(kw.get("reward_bias", 0.0)))
    shaping = shaping * abs(kw.get("reward_scaling", 1.0)) * ("reward_bias" in kw)
    last = kl_penalized_rewards(np.ones(m.shape[0]), np.zeros(m.shape), beta=0.0, mask=m)
    return np.asarray(penalty + np.abs(np.asarray(expected)) + last * shaping[:, None])


def _compared(case: Case, i: int = 0) -> NDArray[np.bool_]:
    """The entries the conventions compare: every entry, or (padding='ignored') the real tokens."""
    m = np.asarray(case.calls[i][1]["mask"]) > 0
    if case.conventions["padding"] == "ignored":
        return m
    return np.ones_like(m)


def _found(case: Case, i: int = 0) -> Array:
    found = np.asarray(case.found[i], dtype=np.float64)
    want = np.asarray(case.expected(i)).shape
    assert found.shape == want, f"token rewards of shape {found.shape}, expected {want}"
    return found


def _agrees(case: Case) -> None:
    found, keep = _found(case), _compared(case)
    case.show("found:   ", found)
    case.show("expected:", case.expected())
    case.assert_close(
        found[keep], case.expected()[keep], case.condition()[keep], "the token rewards"
    )


def _outcome_on_last(case: Case) -> None:
    """β = 0: the clipped outcome reward at each row's last real token, 0 at its other tokens."""
    found, keep = _found(case), _compared(case)
    expected = case.expected()
    m = np.asarray(case.calls[0][1]["mask"]) > 0
    # exact where the outcome is not shaped (clipping is exact); the shaping's two roundings else
    bad = keep & m & ~case.close(found, expected, case.condition())
    assert not bad.any(), (
        f"with beta = 0 the rewards {found.tolist()} are not the outcome on the last real token "
        f"{expected.tolist()}"
    )


def _row_sums(case: Case) -> None:
    """Each nonempty row's real tokens sum to clip(R) − β·Σ kl: the return from its first token."""
    found = _found(case)
    (_, kl), kw = case.calls[0]
    m = np.asarray(kw["mask"]) > 0
    r = _outcome(case.calls[0])
    penalty = float(kw["beta"]) * np.where(m, np.asarray(kl), 0.0)
    want = r - penalty.sum(axis=1)
    got = np.where(m, found, 0.0).sum(axis=1)
    f = summation_factor(int(m.shape[1]) + 1)
    allowed = case.allowed(want, f * (np.abs(penalty).sum(axis=1) + np.abs(r)))
    allowed = allowed + case.allowed(0.0, np.where(m, case.condition(), 0.0).sum(axis=1))
    rows = m.any(axis=1)
    bad = rows & (np.abs(got - want) > allowed)
    case.show("row sums:", got, "clip(R) − β·Σkl:", want)
    assert not bad.any(), (
        f"row sums {got[bad].tolist()} are not clip(R) − β·Σkl {want[bad].tolist()}"
    )


def _zero_at_padding(case: Case) -> None:
    found = _found(case)
    m = np.asarray(case.calls[0][1]["mask"])
    assert np.all(found[m == 0] == 0.0), f"padding carries rewards {found[m == 0].tolist()}"


def _padding_zero_declared(conv: Conventions) -> str | None:
    return None if conv["padding"] == "zero" else "padding='ignored' is declared"


def kl_reward_spec() -> Spec:
    """The spec ``kl_reward`` (value only)."""
    return Spec(
        name="kl_reward",
        reference="losses.kl_reward.kl_penalized_rewards",
        signature="candidate(rewards, kl, *, beta, reward_clip, mask[, reward_bias, "
        "reward_scaling]) -> (B, T)",
        read=lambda raw, call, conv: ArrayBridge.to_numpy(raw),
        expected=_expected,
        condition=_condition,
        checks=(
            Check(
                "values",
                "the token rewards agree with refimpl.kl_penalized_rewards",
                _calls(),
                _agrees,
            ),
            Check(
                "outcome_on_last_token",
                "with beta = 0 each row's (clipped) outcome reward sits on its last real token "
                "and nowhere else",
                _calls(beta_zero=True),
                _outcome_on_last,
            ),
            Check(
                "row_sum_is_the_return",
                "a row's real-token rewards sum to clip((R + c)·s) − β·Σ_t kl_t (its return with γ = 1)",
                _calls(),
                _row_sums,
            ),
            Check(
                "zero_at_padding",
                "padding carries reward exactly 0 (whatever kl holds there)",
                _calls(),
                _zero_at_padding,
                applies=_padding_zero_declared,
            ),
        ),
        conventions=(PADDING, REWARD_CLIP, REWARD_SHAPING),
    )
