r"""The specs ``divergence_gated_is`` (token level) and ``divergence_gated_is_sequence``: importance
weights kept where the binary KL or total variation of the sampled token's probabilities is within
δ, against :func:`refimpl.losses.divergence_gated_weights`.

Value only: the weights multiply a loss under ``detach``/``no_grad``.

Derived tolerances (units of :math:`u`, before the engine's safety factor). A kept weight
:math:`\rho = e^{d}` is off by :math:`(|d| + 3)\rho`. The gate's statistic is computed from
:math:`p = e^{\log\mu}`, :math:`q = e^{\log\pi}` (each off by :math:`(|\log| + 2)` relative), their
complements :math:`1 - p`, :math:`1 - q` (whose relative error grows as :math:`1/(1 - p)`) and
four logarithms; the bound used here, per token,
:math:`K = (4 + |\log p| + |\log q| + |\log(1-p)| + |\log(1-q)|)\,(1 + |\log\mu| + |\log\pi|)
\,(1 + 1/(1 - \max(p, q)))`, is a generous majorant of both divergences' absolute error (a sequence
adds its mean's ``summation_factor``). A unit whose statistic is within that error of δ may be kept
or dropped: both outcomes are accepted there, and only there.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from hypothesis import strategies as st
from numpy.typing import NDArray

from refimpl.losses.divergence_gate import _binary_kl, divergence_gated_weights
from refimpl.testing._arrays import ArrayBridge
from refimpl.testing._engine import Call, Case, Check, Convention, Conventions, Spec
from refimpl.testing._specs_losses_stats import Array, padding_mask
from refimpl.testing.tolerances import SAFETY, summation_factor

__all__ = ["divergence_gate_specs"]

DIVERGENCE = Convention(
    "divergence",
    "binary_kl",
    ("binary_kl", "tv"),
    "the gate's divergence of the sampled token's probabilities p = μ(y), q = π(y): the binary KL "
    "p·log(p/q) + (1 − p)·log((1 − p)/(1 − q)), or the total variation |p − q|",
    who="binary_kl / tv: OpenRLHF 0.11.2 PolicyLoss.forward (is_correction_gating)",
)
PROB_CLAMP = Convention(
    "prob_clamp",
    None,
    (None,),
    "0 < c < 1/2: both probabilities are clipped to [c, 1 − c] before the divergence",
    number=True,
    who="1e-6: OpenRLHF 0.11.2 PolicyLoss.forward",
)

Bools = NDArray[np.bool_]


def _floats(low: float, high: float) -> st.SearchStrategy[float]:
    return st.floats(low, high, allow_nan=False, allow_infinity=False, allow_subnormal=False)


@st.composite
def _draw(draw: st.DrawFn, conv: Conventions, on_policy: bool) -> Call:
    """``(logp_target, logp_behavior), {delta, mask}``: log-ratios at 0, small and large."""
    batch, time = draw(st.integers(1, 3)), draw(st.integers(1, 6))
    n = batch * time
    base = st.one_of(st.sampled_from([0.0, -1e-9, -0.01, -0.7, -3.0]), _floats(-12.0, 0.0))
    lb = np.asarray(draw(st.lists(base, min_size=n, max_size=n))).reshape(batch, time)
    step = st.one_of(st.sampled_from([0.0, 0.01, -0.01, 0.3, -0.3, 2.0, -2.0]), _floats(-4.0, 4.0))
    d = np.zeros(n) if on_policy else np.asarray(draw(st.lists(step, min_size=n, max_size=n)))
    lt = np.minimum(lb + d.reshape(batch, time), 0.0)
    lengths = draw(
        st.lists(st.one_of(st.just(time), st.integers(0, time)), min_size=batch, max_size=batch)
    )
    mask = padding_mask(np.asarray(lengths, dtype=np.int64), time)
    garbage = draw(st.sampled_from([0.0, 5.0, -1e3]))
    lt, lb = np.where(mask > 0, lt, garbage), np.where(mask > 0, lb, -garbage)
    if conv["divergence"] == "tv":
        delta = draw(st.one_of(st.sampled_from([0.0, 0.05, 0.2, 0.9]), _floats(0.0, 1.0)))
    else:
        delta = draw(st.one_of(st.sampled_from([0.0, 0.01, 0.1, 1.0]), _floats(0.0, 2.0)))
    return (lt, lb), {"delta": delta, "mask": mask}


def _calls(on_policy: bool = False) -> Any:
    return lambda conv: _draw(conv, on_policy).map(lambda c: [c])


def _reference(level: Literal["token", "sequence"]) -> Any:
    def expected(call: Call, conv: Conventions) -> Array:
        (lt, lb), kw = call
        return divergence_gated_weights(
            lt,
            lb,
            **kw,
            divergence=conv["divergence"],
            level=level,
            prob_clamp=conv["prob_clamp"],
        )

    return expected


def _condition(call: Call, conv: Conventions, expected: Any) -> Array:
    (lt, lb), kw = call
    m = np.asarray(kw["mask"]) > 0
    d = np.where(m, np.asarray(lt) - np.asarray(lb), 0.0)
    return np.asarray((np.abs(d) + 3.0) * np.abs(np.asarray(expected)), dtype=np.float64)


def _statistic(case: Case, level: str) -> tuple[Array, Array]:
    """The gate's statistic per token (the row's mean at sequence level) and its error bound."""
    (lt, lb), kw = case.calls[0]
    conv = case.conventions
    m = np.asarray(kw["mask"]) > 0
    x, y = np.where(m, np.asarray(lt), 0.0), np.where(m, np.asarray(lb), 0.0)
    p, q = np.exp(y), np.exp(x)
    c = conv["prob_clamp"]
    if c is not None:
        p, q = np.clip(p, c, 1.0 - c), np.clip(q, c, 1.0 - c)
    with np.errstate(divide="ignore", invalid="ignore"):
        stat = _binary_kl(p, q) if conv["divergence"] == "binary_kl" else np.abs(p - q)
        logs = sum(np.abs(np.log(v)) for v in (p, q, 1.0 - p, 1.0 - q))
        near_one = 1.0 + 1.0 / (1.0 - np.maximum(p, q))
    k = np.nan_to_num((4.0 + logs) * (1.0 + np.abs(x) + np.abs(y)) * near_one, posinf=np.inf)
    stat, k = np.where(m, stat, 0.0), np.where(m, k, 0.0)
    if level == "sequence":
        counts = np.maximum(m.sum(axis=1, keepdims=True), 1)
        f = summation_factor(int(m.shape[1]))
        stat = np.broadcast_to(stat.sum(axis=1, keepdims=True) / counts, m.shape)
        k = np.broadcast_to((k.sum(axis=1, keepdims=True) + f * stat) / counts, m.shape)
    return np.asarray(stat), np.asarray(k)


def _zones(case: Case, level: str) -> tuple[Bools, Bools, Bools]:
    """(clearly kept, clearly dropped, either) real tokens under the candidate's rounding."""
    stat, k = _statistic(case, level)
    m = np.asarray(case.calls[0][1]["mask"]) > 0
    delta = float(case.calls[0][1]["delta"])
    err = SAFETY * case.u * (k + np.abs(stat) + delta)
    with np.errstate(invalid="ignore"):
        kept = m & (stat <= delta - err)
        dropped = m & ~(stat <= delta + err)
    return kept, dropped, m & ~kept & ~dropped


def _found(case: Case) -> Array:
    found = np.asarray(case.found[0], dtype=np.float64)
    want = np.asarray(case.expected()).shape
    assert found.shape == want, f"weights of shape {found.shape}, expected {want}"
    return found


def _agrees(level: str) -> Any:
    def check(case: Case) -> None:
        found, want, cond = _found(case), case.expected(), case.condition()
        (lt, lb), _ = case.calls[0]
        _, _, either = _zones(case, level)
        with np.errstate(over="ignore", invalid="ignore"):
            rho = np.exp(np.asarray(lt) - np.asarray(lb))
        ratio_cond = (np.abs(np.asarray(lt) - np.asarray(lb)) + 3.0) * np.abs(rho)
        as_kept = case.close(found, rho, ratio_cond) | (found == 0.0)
        ok = np.where(either, as_kept, case.close(found, want, cond))
        case.show("found:   ", found, "expected:", want)
        assert ok.all(), (
            f"the weights differ from the reference at {np.argwhere(~ok).tolist()}: found "
            f"{found[~ok].tolist()}, expected {want[~ok].tolist()}"
        )

    return check


def _on_policy_one(case: Case) -> None:
    found = _found(case)
    m = np.asarray(case.calls[0][1]["mask"]) > 0
    assert np.all(found[m] == 1.0), f"at ratio 1 (divergence 0) the weights are {found[m].tolist()}"


def _dropped_zero(level: str) -> Any:
    def check(case: Case) -> None:
        found = _found(case)
        _, dropped, _ = _zones(case, level)
        assert np.all(found[dropped] == 0.0), (
            f"units beyond delta kept weights {found[dropped].tolist()} (expected 0)"
        )

    return check


def _kept_ratio(level: str) -> Any:
    def check(case: Case) -> None:
        found = _found(case)
        kept, _, _ = _zones(case, level)
        want, cond = case.expected(), case.condition()
        ok = case.close(found, want, cond)
        bad = kept & ~ok
        assert not bad.any(), (
            f"units within delta got {found[bad].tolist()}, not their ratios {want[bad].tolist()}"
        )

    return check


def _zero_at_padding(case: Case) -> None:
    found = _found(case)
    m = np.asarray(case.calls[0][1]["mask"])
    assert np.all(found[m == 0] == 0.0), f"padding carries weights {found[m == 0].tolist()}"


def _spec(name: str, level: Literal["token", "sequence"]) -> Spec:
    return Spec(
        name=name,
        reference="losses.divergence_gate.divergence_gated_weights",
        signature=f"candidate(logp_target, logp_behavior, *, delta, mask) -> (B, T) ({level} level)",
        read=lambda raw, call, conv: ArrayBridge.to_numpy(raw),
        expected=_reference(level),
        condition=_condition,
        checks=(
            Check(
                "values",
                "the weights agree with refimpl.divergence_gated_weights (a unit whose divergence "
                "is within rounding of delta may be kept or dropped)",
                _calls(),
                _agrees(level),
            ),
            Check(
                "on_policy_weight_is_one",
                "where π = μ (divergence 0) every real token gets weight 1",
                _calls(on_policy=True),
                _on_policy_one,
            ),
            Check(
                "zero_beyond_delta",
                "a unit whose divergence is beyond delta gets weight 0",
                _calls(),
                _dropped_zero(level),
            ),
            Check(
                "kept_weight_is_the_ratio",
                "a unit within delta keeps its tokens' ratios π/μ",
                _calls(),
                _kept_ratio(level),
            ),
            Check("zero_at_padding", "padding gets weight 0", _calls(), _zero_at_padding),
        ),
        conventions=(DIVERGENCE, PROB_CLAMP),
    )


def divergence_gate_specs() -> tuple[Spec, ...]:
    """The specs ``divergence_gated_is`` and ``divergence_gated_is_sequence`` (value only)."""
    return (
        _spec("divergence_gated_is", "token"),
        _spec("divergence_gated_is_sequence", "sequence"),
    )
