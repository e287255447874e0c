"""The checks of the loss specs and the factory that assembles a spec from its description.

Each check compares the candidate's loss (``which=0``) and gradient (``which=1``) with the
reference under the derived tolerance of :mod:`refimpl.testing._specs_losses`; where the reference
has a jump within a correct candidate's rounding (a clip boundary, a tie of a ``max``, a dropped
token) any value between the one-sided references is accepted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from refimpl.testing._engine import Call, Case, Check, Conventions, Spec
from refimpl.testing._specs_losses import (
    COMMON,
    Array,
    LossDesc,
    Terms,
    calls,
    condition,
    expected,
    hand_over,
    mixed,
    parts,
    read,
)
from refimpl.testing.tolerances import largest_finite, smallest_normal, summation_factor

__all__ = ["loss_spec"]

# the checks
# ---------------------------------------------------------------------------------------------


def _valid_entries(case: Case, i: int) -> NDArray[np.bool_]:
    """Per-token entries of the loss that are compared (padding is free with padding='ignored')."""
    mask = np.asarray(case.calls[i][1]["mask"]) > 0
    if case.conventions["padding"] == "ignored":
        return mask
    return np.ones_like(mask)


def _one_sided(desc: LossDesc, case: Case, i: int) -> tuple[list[Terms], Array]:
    """The reference with its decision variables moved by a correct candidate's rounding, and
    the relative drift of a smooth value under that move."""
    if desc.shifted is None:
        return [], np.zeros(())
    out = []
    moved, drift = desc.shifted(desc, case.calls[i], case)
    for call in moved:
        try:
            out.append(expected(desc)(call, case.conventions))
        except (ValueError, TypeError, FloatingPointError):
            continue
    return out, drift


def _tied(desc: LossDesc, case: Case, i: int) -> list[Array]:
    """The gradient with the ties of a max/min taken the other way (see LossDesc.unclipped)."""
    if desc.unclipped is None or desc.branches is None:
        return []
    conv = case.conventions
    p = parts(desc, case.calls[i], conv)
    try:
        loss, grad = desc.terms(p, conv)
        _, open_grad = desc.unclipped(p, conv)
    except (ValueError, TypeError, FloatingPointError):
        return []
    cv, _ = desc.condition(p, conv, np.where(p.mask > 0, loss, 0.0), grad)
    cv = np.nan_to_num(cv, nan=0.0)
    tie = np.zeros(p.mask.shape, dtype=np.bool_)
    with np.errstate(all="ignore"):
        for one, other in desc.branches(p, conv):
            tie |= case.close(one, other, 3.0 * cv + np.abs(one)) & np.isfinite(one)
    tie &= p.mask > 0
    if desc.sequence_ratio:
        tie = np.broadcast_to(tie.any(axis=1, keepdims=True), tie.shape)
    return [np.where(tie, open_grad, grad), np.where(tie, 0.0, grad)]


def _agreement(
    case: Case,
    found: Array,
    ref: Array,
    cond: Array,
    alts: Sequence[Array],
    keep: NDArray[np.bool_],
    drift: Array | float = 0.0,
) -> NDArray[np.bool_]:
    """Where ``found`` agrees with the reference or, where the one-sided references disagree (a
    kink or a jump within the candidate's rounding), lies between them: at a kink every value
    between the one-sided gradients is a valid subgradient (torch splits ties in half)."""
    with np.errstate(all="ignore"):
        ok = case.close(found, ref, cond)
        sides = [a for a in alts if np.shape(a) == np.shape(ref) and np.all(np.isfinite(a) | ~keep)]
        if sides:
            low = np.minimum.reduce([ref, *sides])
            high = np.maximum.reduce([ref, *sides])
            top = np.maximum(np.abs(low), np.abs(high))
            move = np.asarray(drift, dtype=np.float64)
            if move.shape != top.shape:  # a scalar or a row-coupled gradient: the largest move
                move = np.full(top.shape, float(np.max(move, initial=0.0)))
            rounding = case.allowed(top, 3.0 * cond)
            # a zone is a jump (a kink, a tie, a dropped token: one side 0 or of the other
            # sign), not a smooth value that the move scales by at most (1 + move)²
            bottom = np.minimum(np.abs(low), np.abs(high))
            smooth = (np.sign(low) == np.sign(high)) & (top <= (1.0 + move) ** 2 * bottom)
            zone = np.isfinite(low) & np.isfinite(high) & ~smooth & (high - low > 0)
            slack = rounding + 2.0 * move * top
            ok = ok | (zone & (found >= low - slack) & (found <= high + slack))
    return np.asarray(ok | ~keep, dtype=np.bool_)


def _describe(
    case: Case, found: Array, ref: Array, cond: Array, ok: NDArray[np.bool_], what: str
) -> str:
    bad = np.argwhere(~ok) if ok.ndim else np.zeros((1, 0), dtype=int)
    where = [tuple(int(j) for j in b) for b in bad[:5]]
    fb = found[~ok] if ok.ndim else found.reshape(1)
    eb = ref[~ok] if ok.ndim else ref.reshape(1)
    allowed = case.allowed(ref, cond)
    ab = allowed[~ok] if ok.ndim else np.atleast_1d(allowed)
    count = len(bad) if ok.ndim else 1
    return (
        f"{what} differ from the reference at {count} of {ok.size} entries (first at {where}): "
        f"found {fb[:5].tolist()}, expected {eb[:5].tolist()} (allowed error {ab[:5].tolist()}; "
        f"{case.tolerance_text()})"
    )


def conv_is_token(case: Case) -> bool:
    return bool(case.conventions["output"] == "token")


def _gradient_defined(case: Case, i: int, shape: tuple[int, ...]) -> NDArray[np.bool_]:
    """Where a gradient can be compared: where the reference loss is finite in the candidate's
    dtype. Where it overflows, so does the Jacobian, and a zero cotangent times an infinite
    Jacobian is NaN in any autodiff, whatever the reference's exact product says."""
    loss = np.asarray(case.expected(i)[0], dtype=np.float64)
    if loss.shape != shape:
        return np.ones(shape, dtype=np.bool_)
    with np.errstate(all="ignore"):
        return np.asarray(
            np.isfinite(loss) & (np.abs(loss) <= largest_finite(case.dtype)), dtype=np.bool_
        )


def _compare(desc: LossDesc, case: Case, i: int, which: int) -> str | None:
    """None when the loss (which=0) or the gradient (which=1) of call ``i`` agrees, else why."""
    found = np.asarray(case.found[i][which], dtype=np.float64)
    ref = np.asarray(case.expected(i)[which], dtype=np.float64)
    cond = np.broadcast_to(np.asarray(case.condition(i)[which], dtype=np.float64), ref.shape)
    if found.shape != ref.shape:
        return f"shape {found.shape}, expected {ref.shape}"
    if desc.underflow is not None and conv_is_token(case):
        factor = np.abs(
            desc.underflow(parts(desc, case.calls[i], case.conventions), case.conventions)[which]
        )
        cond = cond + factor * 2.0 * smallest_normal(case.dtype)
    keep = np.ones(ref.shape, dtype=np.bool_)
    if which == 0 and ref.shape == np.shape(case.calls[i][1]["mask"]):
        keep = _valid_entries(case, i)
    if which == 1:
        keep = _gradient_defined(case, i, ref.shape)
    sides, drift = _one_sided(desc, case, i)
    alts = [a[which] for a in sides]
    if which == 1:
        alts += _tied(desc, case, i)
    ok = _agreement(case, found, ref, cond, alts, keep, drift)
    if ok.all():
        return None
    what = "the losses" if which == 0 else "the gradients"
    return _describe(case, found, ref, cond, ok, what)


def _show(case: Case, i: int) -> None:
    case.show("loss found:   ", case.found[i][0])
    case.show("loss expected:", case.expected(i)[0])
    case.show("grad found:   ", case.found[i][1])
    case.show("grad expected:", case.expected(i)[1])


def values(desc: LossDesc) -> Callable[[Case], None]:
    def values_agree(case: Case) -> None:
        for i in range(len(case.calls)):
            _show(case, i)
            why = _compare(desc, case, i, 0)
            assert why is None, why

    return values_agree


def gradient(desc: LossDesc) -> Callable[[Case], None]:
    def gradient_agrees(case: Case) -> None:
        for i in range(len(case.calls)):
            _show(case, i)
            why = _compare(desc, case, i, 1)
            if why is None:
                continue
            if _compare(desc, case, i, 0) is None:
                raise AssertionError(
                    f"the values agree; {why}: a missing or misplaced stop-gradient (detach)?"
                )
            raise AssertionError(f"the values differ too (see check 'values'); {why}")

    return gradient_agrees


def padding(desc: LossDesc) -> Callable[[Case], None]:
    def padding_contributes_nothing(case: Case) -> None:
        for i in range(len(case.calls)):
            mask = np.asarray(case.calls[i][1]["mask"]) > 0
            loss, grad = case.found[i]
            _show(case, i)
            pad_grad = grad[~mask] if grad.shape == mask.shape else grad[~mask.any(axis=1)]
            assert np.all(pad_grad == 0.0), (
                f"padding entries got gradients {pad_grad[pad_grad != 0.0][:5].tolist()} instead "
                "of 0 (mask 0 must contribute nothing whatever the padded entries hold: select "
                "with where(mask, x, 0) before exp and before any sum; inf·0 is NaN)"
            )
            if loss.shape == mask.shape and case.conventions["padding"] == "zero":
                pad = loss[~mask]
                assert np.all(pad == 0.0), (
                    f"padding entries got losses {pad[pad != 0.0][:5].tolist()} instead of 0: "
                    "pass conventions={'padding': 'ignored'} if the per-token loss is masked only "
                    "when it is aggregated"
                )
            for which in (0, 1):
                why = _compare(desc, case, i, which)
                assert why is None, f"with garbage at padding, {why}"

    return padding_contributes_nothing


def on_policy(desc: LossDesc) -> Callable[[Case], None]:
    def on_policy_is_policy_gradient(case: Case) -> None:
        for i in range(len(case.calls)):
            p = parts(desc, case.calls[i], case.conventions)
            a = np.where(p.mask > 0, np.asarray(p.arrays["advantages"], dtype=np.float64), 0.0)
            c = p.cotangent * p.mask
            if desc.on_policy == "sequence":
                lengths = np.maximum(p.mask.sum(axis=1, keepdims=True), 1.0)
                row = -(a * c).sum(axis=1, keepdims=True) / lengths
                pg = np.broadcast_to(row, p.mask.shape) * p.mask
                cond = np.broadcast_to(
                    (np.abs(a * c)).sum(axis=1, keepdims=True) / lengths, p.mask.shape
                )
                cond = cond * (summation_factor(int(p.mask.shape[1])) + 4.0)
            else:
                pg = -a * c
                cond = 4.0 * np.abs(pg)
            grad = case.found[i][1]
            case.show("grad found:     ", grad)
            case.show("−A·cotangent:   ", pg)
            ok = case.close(grad, pg, cond)
            assert ok.all(), (
                "at logp == logp_old the gradient is not the policy gradient: "
                + _describe(case, grad, pg, cond, ok, "the gradients").replace(
                    "from the reference", "from −A·cotangent"
                )
            )

    return on_policy_is_policy_gradient


def clipped_zero(desc: LossDesc) -> Callable[[Case], None]:
    def clipped_region_has_zero_gradient(case: Case) -> None:
        for i in range(len(case.calls)):
            p = parts(desc, case.calls[i], case.conventions)
            ref_grad = case.expected(i)[1]
            alts = [g for _, g in _one_sided(desc, case, i)[0]]
            clipped = (ref_grad == 0.0) & (p.mask > 0) & (p.cotangent != 0.0)
            for g in alts:  # not where a rounding of the ratio may leave the region
                clipped &= g == 0.0
            grad = case.found[i][1]
            case.show("clipped:", clipped)
            case.show("grad:   ", grad)
            wrong = clipped & (np.abs(grad) > smallest_normal(case.dtype))
            assert not wrong.any(), (
                f"tokens in a clipped region got gradients {grad[wrong][:5].tolist()} at "
                f"{[tuple(int(j) for j in w) for w in np.argwhere(wrong)[:5]]} instead of 0: the "
                "clipped branch must carry no gradient (a clip on the wrong side, or a factor "
                "that should be detached?)"
            )

    return clipped_region_has_zero_gradient


def finite(desc: LossDesc) -> Callable[[Case], None]:
    def huge_log_ratios_stay_finite(case: Case) -> None:
        top = largest_finite(case.dtype)
        for i in range(len(case.calls)):
            _show(case, i)
            for which, what in ((0, "losses"), (1, "gradients")):
                found = np.asarray(case.found[i][which], dtype=np.float64)
                ref = np.asarray(case.expected(i)[which], dtype=np.float64)
                keep = np.isfinite(ref) & (np.abs(ref) <= top)
                if which == 0 and ref.shape == np.shape(case.calls[i][1]["mask"]):
                    keep &= _valid_entries(case, i)
                if which == 1:
                    keep &= _gradient_defined(case, i, ref.shape)
                bad = keep & ~np.isfinite(found)
                assert not bad.any(), (
                    f"non-finite {what} {found[bad][:5].tolist()} where the reference is "
                    f"{ref[bad][:5].tolist()} (log-ratios up to ±1000: clamp the log-ratio before "
                    "exp, not the ratio after it; exp overflows and inf·0 is NaN in the gradient)"
                )
                why = _compare(desc, case, i, which)
                assert why is None, f"at huge log-ratios, {why}"

    return huge_log_ratios_stay_finite


def boundaries(desc: LossDesc) -> Callable[[Case], None]:
    def ratios_at_clip_boundaries(case: Case) -> None:
        for i in range(len(case.calls)):
            _show(case, i)
            for which in (0, 1):
                why = _compare(desc, case, i, which)
                assert why is None, (
                    f"at a clip boundary (ratio exactly at 1±ε or one ulp away) {why}; there the "
                    "value is continuous and the gradient must be one of the two one-sided ones"
                )

    return ratios_at_clip_boundaries


def loss_spec(
    desc: LossDesc, fixed: Callable[[Conventions], tuple[str, ...]] = lambda c: ()
) -> Spec:
    """The conformance spec of one loss description."""
    checks = [
        Check(
            "values",
            f"the loss agrees with refimpl.{desc.reference} on the inputs as the candidate saw "
            "them (per token, or aggregated with output='scalar')",
            mixed(desc),
            values(desc),
            small=calls(desc, "wide"),
        ),
        Check(
            "gradient",
            "the gradient with respect to the first argument (a VJP with a drawn cotangent, or "
            "the aggregation's weights) agrees with the reference's",
            mixed(desc),
            gradient(desc),
            small=calls(desc, "wide"),
        ),
        Check(
            "padding_contributes_nothing",
            "at mask 0 the loss and the gradient are 0 whatever the padded entries hold (huge "
            "values included), and the real tokens do not see them",
            calls(desc, "padding"),
            padding(desc),
        ),
    ]
    if desc.on_policy is not None:
        checks.append(
            Check(
                "on_policy_is_policy_gradient",
                "at logp == logp_old the gradient is the policy gradient −A·cotangent (GSPO, "
                "GMPO: −Σ_t c·A / L over the sequence)",
                calls(desc, "on_policy"),
                on_policy(desc),
            )
        )
    checks.append(
        Check(
            "clipped_region_has_zero_gradient",
            "where the reference's gradient is 0 because a clip (or clamp) is active, the "
            "candidate's is exactly 0",
            calls(desc, "clipped"),
            clipped_zero(desc),
            applies=desc.clips,
        )
    )
    checks.append(
        Check(
            "huge_log_ratios_stay_finite",
            "log-ratios of ±100 and ±1000 give finite losses and gradients wherever the "
            "reference's are finite in the dtype (a clamp after exp overflows)",
            calls(desc, "huge"),
            finite(desc),
        )
    )
    if desc.boundaries:
        checks.append(
            Check(
                "ratios_at_clip_boundaries",
                "ratios exactly at the clip boundaries 1±ε (and one ulp of float64, float32 or "
                "bfloat16 either side) give the reference's value and a one-sided gradient",
                calls(desc, "boundary"),
                boundaries(desc),
            )
        )
    guesses = desc.guesses

    def guess(calls_: list[Call], found: list[Any], conv: Conventions) -> dict[str, list[float]]:
        return {k: list(v) for k, v in guesses.items()}

    return Spec(
        name=desc.name,
        reference=desc.reference,
        signature=desc.signature,
        read=read(desc),
        expected=expected(desc),
        condition=condition(desc),
        checks=tuple(checks),
        conventions=(*COMMON, *desc.conventions),
        guesses=guess if guesses else None,
        vjp=hand_over(desc, fixed),
    )
