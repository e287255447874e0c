r"""Specs of the policy losses: the value *and* the gradient of a candidate against refimpl.losses.

Every loss spec is built by one factory (``loss_spec`` in ``_specs_losses_checks.py``, with the
checks) from a short description (:class:`LossDesc`, the table is in ``_specs_losses_table.py``): the reference, the positional
arrays, the drawn hyperparameters, the conventions, the rounding-error model and which invariants
apply. A candidate is called with the reference's signature (arrays positional, ``mask=`` and the
hyperparameters keyword-only) and differentiated by its own autograd through
:meth:`~refimpl.testing._arrays.ArrayBridge.value_and_vjp` with respect to its first argument
(``logp``; the logits for ``token_logprobs``), with a drawn *cotangent*: non-negative, uneven
weights with zeros, like an aggregation's. A numpy candidate returns the gradient itself
(``conventions={'gradient': 'returned'}``: it takes ``cotangent=`` and returns ``(loss, grad)``),
which is how refimpl's own functions are checked. With ``output='scalar'`` the candidate returns
the aggregated loss :math:`J = \sum_{bt} w_{bt}\ell_{bt}` of the declared ``aggregation`` mode,
and its gradient is the step's: the VJP with cotangent :math:`w`.

Derived tolerances
------------------
A correct candidate computes in its inputs' dtype (unit roundoff :math:`u`) on the inputs *as it
received them*; the reference is evaluated on the same rounded inputs, so only the candidate's
own rounding counts: ``|found − reference| <= SAFETY·u·condition``. Per token, with
:math:`d = \log\pi - \log\pi_{\text{old}}`:

- the ratio :math:`r = e^{d}`: the subtraction rounds :math:`d` by :math:`u|d|`, ``exp`` turns that
  absolute error into a relative one and adds its own :math:`u`: relative error
  :math:`K u` with :math:`K = |d| + 3` (one more for the output cast). With
  ``compute_dtype`` coarser than the inputs the inputs are rounded again:
  :math:`K \mathrel{+}= |\log\pi| + |\log\pi_{\text{old}}|`, the rounding of both inputs times
  their magnitude;
- a sequence ratio :math:`s_b = \exp(\frac1{L}\sum_t d_t)` (GSPO, GMPO): a pairwise sum of
  :math:`L` terms adds :math:`(\lceil\log_2 L\rceil + 1)\frac1L\sum_t|d_t|`;
- a clip, ``min``/``max`` and ``where`` are exact: the clipped value :math:`1\pm\epsilon` carries
  only the rounding of the constant; products with :math:`A` and the cotangent add one :math:`u`
  each. So the PPO-style loss has condition :math:`|\ell|(K + 2)` and its gradient
  :math:`|g|(K + 3)`; the other families' conditions are derived the same way in the table;
- an aggregated loss adds the pairwise sum's :math:`(\lceil\log_2 N\rceil+1)\sum|w\ell|`.

A clip boundary is a discontinuity of the gradient (and, for DPPO's trust-region mask, of the
value): a correct candidate whose ratio is within its rounding of :math:`1\pm\epsilon` may take
either side. The checks therefore also evaluate the reference with ``logp`` moved up and
``logp_old`` down by that rounding (and the reverse), and accept, where these one-sided references
disagree, a result that matches one of them.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import numpy as np
from hypothesis import strategies as st
from numpy.typing import NDArray

from refimpl.testing._arrays import ArrayBridge
from refimpl.testing._engine import Call, Case, Convention, Conventions
from refimpl.testing._specs_weights import COMPUTE
from refimpl.testing.tolerances import summation_factor

Array = NDArray[np.float64]
Kind = Literal["mixed", "wide", "long", "padding", "on_policy", "clipped", "huge", "boundary"]

__all__ = ["LossDesc", "Parts"]

# ---------------------------------------------------------------------------------------------
# conventions every loss spec has
# ---------------------------------------------------------------------------------------------

AGGREGATIONS = (
    "token_mean",
    "token_sum",
    "seq_mean_token_mean",
    "seq_mean_token_sum",
    "token_sum_norm",
)

OUTPUT = Convention(
    "output",
    "token",
    ("token", "scalar"),
    "'token': the per-token loss (B, T); 'scalar': the loss aggregated by the declared "
    "aggregation mode (its gradient is then the step's gradient)",
    who="scalar: verl 0.9.1 compute_policy_loss_* (agg_loss), AReaL 1.0.4 ppo_actor_loss_fn, "
    "OpenRLHF 0.11.2 PolicyLoss.forward, TRL 1.16.0 GRPOTrainer._compute_loss",
)
AGGREGATION = Convention(
    "aggregation",
    "token_mean",
    AGGREGATIONS,
    "with output='scalar': the weights w of J = Σ w·loss (refimpl.losses.aggregation_weights; "
    "token_sum_norm divides by the padded width T)",
    who="token_mean: verl 'token-mean', AReaL (sum / mask count); seq_mean_token_mean: verl "
    "'seq-mean-token-mean', TRL loss_type='grpo'; token_sum_norm: verl "
    "'seq-mean-token-sum-norm' (H = response width), TRL 'dr_grpo'",
)
SEQUENCE_COUNT = Convention(
    "sequence_count",
    "nonempty",
    ("nonempty", "all"),
    "with output='scalar': the sequence count S of the seq_mean modes counts the rows with a "
    "real token, or every row",
    who="nonempty: verl agg_loss (seq_mask), OpenRLHF; all: TRL 'grpo' (mean over every row)",
)
GRADIENT = Convention(
    "gradient",
    "autodiff",
    ("autodiff", "returned"),
    "'autodiff': the candidate is differentiated by torch or jax autograd; 'returned': it takes "
    "cotangent= (token output) and returns (loss, grad) itself (numpy, refimpl.losses)",
    who="returned: refimpl.losses (LossTerms)",
)
PADDING = Convention(
    "padding",
    "zero",
    ("zero", "ignored"),
    "the per-token loss at padding: exactly 0, or never read (the cotangent is 0 there; the "
    "gradient at padding must still be 0)",
    who="ignored: verl 0.9.1 compute_policy_loss_vanilla (pg_losses masked only in agg_loss), "
    "SkyRL 0.3.0 ppo_policy_loss, TRL 1.16.0 (per_token_loss masked when aggregated)",
)
EMPTY_ROWS = Convention(
    "empty_rows",
    "drawn",
    ("drawn", "excluded"),
    "rows that are all padding: drawn (loss and gradient 0), or never drawn",
)
EMPTY_BATCH = Convention(
    "empty_batch",
    "drawn",
    ("drawn", "excluded"),
    "a batch that is all padding: drawn, or never drawn (a scalar token mean is then 0/0)",
    who="excluded: verl 0.9.1 agg_loss 'token-mean' (divides by loss_mask.sum())",
)

COMMON: tuple[Convention, ...] = (
    OUTPUT,
    AGGREGATION,
    SEQUENCE_COUNT,
    GRADIENT,
    PADDING,
    COMPUTE,
    EMPTY_ROWS,
    EMPTY_BATCH,
)


class Parts(NamedTuple):
    """A call taken apart: the named positional arrays, mask, cotangent (the aggregation weights
    with ``output='scalar'``), drawn hyperparameters (the candidate's keywords)."""

    arrays: dict[str, Any]
    mask: Array
    cotangent: Array
    params: dict[str, Any]


Terms = tuple[Array, Array]


@dataclass(frozen=True)
class LossDesc:
    """One loss spec's description; :func:`loss_spec` turns it into a :class:`Spec`.

    ``terms(parts, conv) -> (loss, grad)`` is the reference; ``condition(parts, conv, loss,
    grad) -> (cond_loss, cond_grad)`` the rounding-error model; ``params(conv)`` draws the
    candidate's keywords; ``edges(params, conv)`` the log-ratios where a regime changes;
    ``fixed(conv)`` the keywords that conventions fix (not handed to the candidate).
    """

    name: str
    reference: str
    signature: str
    arrays: tuple[str, ...]
    terms: Callable[[Parts, Conventions], Terms]
    condition: Callable[[Parts, Conventions, Array, Array], Terms]
    params: Callable[[Conventions], st.SearchStrategy[dict[str, Any]]]
    conventions: tuple[Convention, ...] = ()
    edges: Callable[[dict[str, Any], Conventions], list[float]] = lambda p, c: []
    #: "token": at logp == logp_old the gradient is −A·c; "sequence": −Σ_t c_bt A_bt / L_b at
    #: every valid token of row b; None: no such invariant (KL estimators)
    on_policy: Literal["token", "sequence"] | None = "token"
    #: why a clipped region does not apply under the conventions, or None when it does
    clips: Callable[[Conventions], str | None] = lambda c: "this loss has no clipped region"
    #: the ratio is a sequence's geometric mean (GSPO, GMPO): its rounding sums over the row
    sequence_ratio: bool = False
    #: advantages drawn constant per sequence (GSPO, GMPO), or per token
    sequence_advantages: bool = False
    #: whether the loss has clip boundaries (the check ratios_at_clip_boundaries)
    boundaries: bool = True
    #: the draws of the calls (default: the log-ratio family's)
    draws: Callable[[LossDesc, Conventions, Kind], st.SearchStrategy[Call]] | None = None
    #: the calls with the decision variables moved by a correct candidate's rounding, and the
    #: largest relative change that move makes to a smooth value (the one-sided zone)
    shifted: Callable[[LossDesc, Call, Case], tuple[list[Call], Array]] | None = None
    guesses: dict[str, list[float]] = field(default_factory=dict)
    #: PPO-style: the reference with every clip open, and the pairs of competing branch values
    #: of each max/min per token; where a pair is equal within the candidate's rounding the
    #: branches tie in its arithmetic and torch may return any mix of the unclipped gradient and
    #: 0 (it splits a tie in half), although the reference's branches do not tie
    unclipped: Callable[[Parts, Conventions], Terms] | None = None
    branches: Callable[[Parts, Conventions], list[tuple[Array, Array]]] | None = None
    #: the factors (loss, gradient) that multiply a quantity which may underflow into the
    #: dtype's subnormal range (an unclamped importance weight): its absolute error there is
    #: the subnormal spacing, 2·u·(smallest normal), not u times its value
    underflow: Callable[[Parts, Conventions], Terms] | None = None


# ---------------------------------------------------------------------------------------------
# the calls: drawn as (B, T) log-probabilities with controlled log-ratios
# ---------------------------------------------------------------------------------------------


def resolve(reference: str) -> Callable[..., Any]:
    """``refimpl.<module path>.<name>``, imported when first needed."""
    module, _, name = reference.rpartition(".")
    found: Callable[..., Any] = getattr(importlib.import_module(f"refimpl.{module}"), name)
    return found


def near(edge: float, k: int, step: str) -> float:
    """``edge`` moved by ``k`` units in the last place of float64, float32 or bfloat16."""
    if edge == 0.0 or k == 0:
        return edge
    bits = {"float64": 52, "float32": 23, "bfloat16": 7}[step]
    ulp = 2.0 ** (math.frexp(abs(edge))[1] - 1 - bits)
    return float(edge + k * ulp)


def _dyadic(draw: st.DrawFn, shape: tuple[int, ...]) -> Array:
    """Cotangent weights k/16, k in 0..32: uneven, zeros allowed, exact in every dtype."""
    ks = draw(
        st.lists(st.integers(0, 32), min_size=int(np.prod(shape)), max_size=int(np.prod(shape)))
    )
    return np.asarray(ks, dtype=np.float64).reshape(shape) / 16.0


_GARBAGE = (0.0, -1e4, 1e4, 1e30, -1e30, 88.0, -88.0, 1000.0)


def _lengths(
    draw: st.DrawFn, batch: int, time: int, conv: Conventions, kind: Kind
) -> NDArray[np.int64]:
    low = 1 if conv["empty_rows"] == "excluded" else 0  # no row of padding alone where excluded
    each = st.one_of(st.sampled_from(sorted({low, max(low, 1), time})), st.integers(low, time))
    if kind == "padding":  # a padded entry in every row that can hold one
        each = st.integers(low, max(time - 1, low))
    lengths = np.asarray(draw(st.lists(each, min_size=batch, max_size=batch)), dtype=np.int64)
    if conv["empty_batch"] == "excluded" and lengths.max() == 0:
        lengths[0] = 1
    return lengths


def _log_ratios(draw: st.DrawFn, shape: tuple[int, int], edges: list[float], kind: Kind) -> Array:
    """Per-token log-ratios d for the kind of draw (rows may be constant: a sequence statistic)."""
    near_edges = st.tuples(
        st.sampled_from(edges or [0.0]),
        st.integers(-1, 1),
        st.sampled_from(["float64", "float32", "bfloat16"]),
    ).map(lambda e: near(*e))
    if kind == "on_policy":
        return np.zeros(shape)
    if kind == "huge":
        values = st.sampled_from([100.0, -100.0, 1000.0, -1000.0, 89.0, -89.0, 0.0])
    elif kind == "boundary":
        values = near_edges
    elif kind == "clipped":
        values = st.one_of(
            st.sampled_from([0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 25.0, -25.0]),
            st.floats(-30.0, 30.0, allow_nan=False),
        )
    else:
        wide = kind == "wide"
        values = st.one_of(
            st.just(0.0),
            st.floats(-50.0 if wide else -3.0, 50.0 if wide else 3.0, allow_nan=False),
            st.sampled_from([25.0, -25.0, 50.0, -50.0] if wide else [0.1, -0.1, 1.0, -1.0]),
            near_edges,
        )
    out = np.asarray(
        draw(st.lists(values, min_size=shape[0] * shape[1], max_size=shape[0] * shape[1]))
    )
    out = out.reshape(shape)
    for i in range(shape[0]):
        if draw(st.booleans()):  # a constant row: a sequence statistic sits where a token's does
            out[i] = out[i, 0]
    return out


def _advantages(draw: st.DrawFn, d: Array, desc: LossDesc, kind: Kind) -> Array:
    shape = d.shape
    values = st.one_of(
        st.sampled_from([0.0, 1.0, -1.0, 0.5, -2.0]),
        st.floats(-5.0, 5.0, allow_nan=False, allow_subnormal=False),
    )
    n = shape[0] if desc.sequence_advantages else shape[0] * shape[1]
    a = np.asarray(draw(st.lists(values, min_size=n, max_size=n)), dtype=np.float64)
    a = np.broadcast_to(a[:, None], shape).copy() if desc.sequence_advantages else a.reshape(shape)
    if kind in ("huge", "clipped") and draw(st.integers(0, 4)) > 0:
        # the sign that makes the clipped branch active, so that the loss stays finite
        side = d.mean(axis=1, keepdims=True) if desc.sequence_ratio else d
        a = np.where(side != 0, np.sign(side) * np.maximum(np.abs(a), 0.5), a)
    if kind == "huge":
        # |A| >= 1 (or 0): a tiny advantage would bring A·exp(d) back into the dtype's range
        # while exp(d) itself overflows, which only log-space arithmetic (no loss's) could meet
        a = np.where(a != 0, np.sign(a) * np.maximum(np.abs(a), 1.0), a)
    return a


@st.composite
def ratio_draw(draw: st.DrawFn, desc: LossDesc, conv: Conventions, kind: Kind) -> Call:
    """A call of a log-ratio loss: ``logp``, the anchor (``logp_old``/``logp_ref``) with
    ``logp − anchor`` the drawn log-ratio, advantages, a second anchor (behaviour) if the
    loss has one, mask, cotangent and the drawn hyperparameters."""
    params = draw(desc.params(conv))
    if kind == "long":
        batch, time = draw(st.integers(1, 2)), 4096
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        anchor = -rng.exponential(2.0, (batch, time))
        spread = draw(st.sampled_from([0.0, 1e-3, 0.1, 1.0]))
        logp = np.minimum(anchor + rng.normal(0.0, spread, (batch, time)), 0.0)
        n = batch if desc.sequence_advantages else batch * time
        a = rng.normal(0.0, 1.0, n)
        adv = (
            np.broadcast_to(a[:, None], (batch, time)).copy()
            if desc.sequence_advantages
            else a.reshape(batch, time)
        )
        lengths = rng.integers(0 if conv["empty_rows"] == "drawn" else 1, time + 1, batch)
        lengths[0] = time
        cot = rng.integers(0, 33, (batch, time)) / 16.0
        other = np.minimum(anchor + rng.normal(0.0, 0.1, (batch, time)), 0.0)
    else:
        batch, time = draw(st.integers(1, 3)), draw(st.integers(1, 6))
        d = _log_ratios(draw, (batch, time), desc.edges(params, conv), kind)
        base_at_zero = kind == "boundary" and draw(st.booleans())
        elements = st.floats(-20.0, 0.0, allow_nan=False, allow_subnormal=False)
        base = (
            np.zeros((batch, time))
            if base_at_zero
            else np.asarray(
                draw(st.lists(elements, min_size=batch * time, max_size=batch * time))
            ).reshape(batch, time)
        )
        logp = base + np.minimum(d, 0.0)
        anchor = base - np.maximum(d, 0.0)
        adv = _advantages(draw, d, desc, kind)
        lengths = _lengths(draw, batch, time, conv, kind).astype(np.float64)
        cot = _dyadic(draw, (batch, time))
        other = base - np.asarray(
            draw(
                st.lists(
                    st.sampled_from([0.0, 0.5, -0.5, 2.0]),
                    min_size=batch * time,
                    max_size=batch * time,
                )
            )
        ).reshape(batch, time)
    mask = (np.arange(time)[None, :] < np.asarray(lengths)[:, None]).astype(np.float64)
    pools = {"logp": logp, "advantages": adv, "logp_behavior": other}
    arrays = {name: pools.get(name, anchor) for name in desc.arrays}
    if kind == "padding":
        # every draw holds the worst padding in its first padded entry (logp far above its
        # anchor, a huge negative advantage: exp overflows, and inf·0 is NaN), the rest drawn
        padded = np.flatnonzero(mask == 0)  # none when a forced valid token filled the batch
        for j, name in enumerate(arrays):
            garbage = np.asarray(
                draw(st.lists(st.sampled_from(_GARBAGE), min_size=mask.size, max_size=mask.size))
            ).reshape(mask.shape)
            garbage.flat[padded[:1]] = 1e30 if j == 0 else -1e30
            arrays[name] = np.where(mask > 0, arrays[name], garbage)
    if conv["padding"] == "ignored":
        cot = cot * mask
    kwargs: dict[str, Any] = {**params, "mask": mask}
    if conv["output"] == "token":
        kwargs["cotangent"] = cot
    return tuple(arrays[n] for n in desc.arrays), kwargs


def calls(desc: LossDesc, kind: Kind) -> Callable[[Conventions], st.SearchStrategy[list[Call]]]:
    def strategy(conv: Conventions) -> st.SearchStrategy[list[Call]]:
        draws = (
            desc.draws(desc, conv, kind) if desc.draws is not None else ratio_draw(desc, conv, kind)
        )
        return draws.map(lambda c: [c])

    return strategy


def mixed(desc: LossDesc) -> Callable[[Conventions], st.SearchStrategy[list[Call]]]:
    """Mostly short batches, log-ratios up to ±50 and at the clip edges, sometimes T = 4096."""

    def strategy(conv: Conventions) -> st.SearchStrategy[list[Call]]:
        return st.one_of(
            calls(desc, "mixed")(conv), calls(desc, "wide")(conv), calls(desc, "long")(conv)
        )

    return strategy


# ---------------------------------------------------------------------------------------------
# the reference under the conventions, and the rounding-error model
# ---------------------------------------------------------------------------------------------


def parts(desc: LossDesc, call: Call, conv: Conventions) -> Parts:
    """The call taken apart; with ``output='scalar'`` the cotangent is the aggregation weights."""
    args, kwargs = call
    arrays = dict(zip(desc.arrays, args, strict=True))
    mask = np.asarray(kwargs["mask"], dtype=np.float64)
    params = {k: v for k, v in kwargs.items() if k not in ("mask", "cotangent")}
    if conv["output"] == "scalar":
        cot = weights(mask, conv)
    else:
        cot = np.asarray(kwargs.get("cotangent", mask), dtype=np.float64) * mask
    return Parts(arrays, mask, cot, params)


def weights(mask: Array, conv: Conventions) -> Array:
    """The aggregation weights of the declared mode (refimpl.losses.aggregation_weights)."""
    aggregation_weights = resolve("losses.aggregation.aggregation_weights")
    mode = conv["aggregation"]
    extra = {"constant": float(mask.shape[1])} if mode == "token_sum_norm" else {}
    empty = "excluded" if conv["sequence_count"] == "nonempty" else "counted"
    out: Array = aggregation_weights(mask, mode=mode, empty_rows=empty, **extra)
    return out


def expected(desc: LossDesc) -> Callable[[Call, Conventions], Terms]:
    def reference(call: Call, conv: Conventions) -> Terms:
        p = parts(desc, call, conv)
        loss, grad = desc.terms(p, conv)
        loss = np.where(p.mask > 0, loss, 0.0) if loss.shape == p.mask.shape else loss
        if conv["output"] == "scalar":
            with np.errstate(invalid="ignore"):
                total = np.sum(np.where(p.cotangent != 0.0, p.cotangent * loss, 0.0))
            return np.asarray(total), grad
        return loss, grad

    return reference


def condition(desc: LossDesc) -> Callable[[Call, Conventions, Any], Terms]:
    def cond(call: Call, conv: Conventions, exp: Any) -> Terms:
        p = parts(desc, call, conv)
        loss, grad = desc.terms(p, conv)
        cv, cg = desc.condition(p, conv, np.where(p.mask > 0, loss, 0.0), grad)
        # a 0·inf in a condition (a zero advantage or weight times an overflowed ratio) weighs 0
        cv, cg = (
            np.nan_to_num(cv, nan=0.0, posinf=np.inf),
            np.nan_to_num(cg, nan=0.0, posinf=np.inf),
        )
        if conv["output"] == "scalar":
            w = p.cotangent
            n = max(int(np.count_nonzero(w)), 1)
            with np.errstate(invalid="ignore"):
                per = np.abs(w) * (cv + summation_factor(n) * np.abs(loss) * (p.mask > 0))
            total = np.sum(np.where(w != 0.0, per, 0.0))
            return np.asarray(total + abs(float(exp[0]))), cg + np.abs(grad)
        return cv, cg

    return cond


def ratio_error(
    p: Parts, conv: Conventions, first: str = "logp", second: str = "logp_old"
) -> Array:
    """K of the module docstring: the relative error of exp(logp − anchor) in units of u (the
    log-ratio after a declared clamp ``log_ratio_clamp``)."""
    x, y = np.asarray(p.arrays[first]), np.asarray(p.arrays[second])
    d = np.abs(np.where(p.mask > 0, x - y, 0.0))
    clamp = conv.get("log_ratio_clamp")
    if clamp is not None:
        d = np.minimum(d, clamp)
    k = d + 3.0
    if conv["compute_dtype"] is not None:
        k = k + np.where(p.mask > 0, np.abs(x) + np.abs(y), 0.0)
    return np.asarray(k, dtype=np.float64)


def row_error(p: Parts, conv: Conventions, k: Array) -> Array:
    """K of a sequence mean of the log-ratios (pairwise sum over the row), broadcast per token."""
    m = p.mask
    lengths = m.sum(axis=1)
    factor = np.array([summation_factor(int(n)) for n in lengths])
    mean_abs = ((k - 3.0) * m).sum(axis=1) / np.maximum(lengths, 1.0)  # Σ|d|/L (+ inputs)
    return np.asarray(
        np.broadcast_to(((factor + 1.0) * mean_abs)[:, None], m.shape), dtype=np.float64
    )


# ---------------------------------------------------------------------------------------------
# reading the candidate's output, handing the call over
# ---------------------------------------------------------------------------------------------


def read(desc: LossDesc) -> Callable[[Any, Call, Conventions], Terms]:
    def read_terms(raw: Any, call: Call, conv: Conventions) -> Terms:
        if not isinstance(raw, tuple | list) or len(raw) != 2:
            raise AssertionError(
                "with conventions={'gradient': 'returned'} the candidate must return (loss, grad); "
                f"got {type(raw).__name__}"
            )
        loss, grad = ArrayBridge.to_numpy(raw[0]), ArrayBridge.to_numpy(raw[1])
        args, kwargs = call
        mask = np.asarray(kwargs["mask"])
        if conv["output"] == "scalar":
            assert loss.size == 1, (
                f"the loss has shape {loss.shape}; expected a scalar (output='scalar'): pass "
                "conventions={'output': 'token'} if the candidate returns the per-token loss"
            )
            loss = loss.reshape(())
        else:
            hint = (
                ": pass conventions={'output': 'scalar', 'aggregation': ...} if the candidate "
                "returns the aggregated loss"
                if loss.size == 1
                else ""
            )
            assert loss.shape == mask.shape, (
                f"the per-token loss has shape {loss.shape}; expected {mask.shape}{hint}"
            )
        wrt = np.shape(args[0])
        assert grad.shape == wrt, f"the gradient has shape {grad.shape}; expected {wrt}"
        return loss, grad

    return read_terms


def hand_over(
    desc: LossDesc, fixed: Callable[[Conventions], tuple[str, ...]]
) -> Callable[[Call, Conventions], tuple[Call, Any]]:
    """The call the candidate receives and the cotangent of its VJP (None: it returns its own)."""

    def vjp(call: Call, conv: Conventions) -> tuple[Call, Any]:
        args, kwargs = call
        drop = {"cotangent", *fixed(conv)}
        kw = {k: v for k, v in kwargs.items() if k not in drop}
        scalar = conv["output"] == "scalar"
        cot = None if scalar else kwargs.get("cotangent")
        if conv["gradient"] == "returned":
            if cot is not None:
                kw["cotangent"] = cot
            return (args, kw), None
        if scalar:
            return (args, kw), np.ones(())
        return (args, kw), cot if cot is not None else np.asarray(kwargs["mask"], dtype=np.float64)

    return vjp


# ---------------------------------------------------------------------------------------------


def shift_ratio(desc: LossDesc, call: Call, case: Case) -> tuple[list[Call], Array]:
    """``logp`` up and the anchor down by half the rounding of the log-ratio (and the reverse):
    the log-ratio moves by its derived tolerance, a ratio by the factor ``e^{±h}``."""
    args, kwargs = call
    p = parts(desc, call, case.conventions)
    k = ratio_error(p, case.conventions, desc.arrays[0], desc.arrays[1])
    if desc.sequence_ratio:
        k = k + row_error(p, case.conventions, k)
    h = case.allowed(1.0, k) * (p.mask > 0)
    x, y = np.asarray(args[0], dtype=np.float64), np.asarray(args[1], dtype=np.float64)
    out = []
    for rising, falling, first in ((x, y, True), (y, x, False)):
        # the log-ratio moves by h; a log-probability <= 0 is not moved above 0 (DPPO refuses
        # that), the other one moves further instead
        up = np.where(rising <= 0.0, np.minimum(rising + h / 2.0, 0.0) - rising, h / 2.0)
        up = np.maximum(up, 0.0)
        moved = list(args)
        new_rising, new_falling = rising + up, falling - (h - up)
        moved[0], moved[1] = (new_rising, new_falling) if first else (new_falling, new_rising)
        out.append((tuple(moved), kwargs))
    if desc.sequence_ratio:  # a row's ratio moves with its largest token move
        h = np.broadcast_to(np.max(h, axis=1, keepdims=True), h.shape)
    return out, np.asarray(np.expm1(h), dtype=np.float64)
