r"""The spec ``token_entropy``: the entropy of a trainer's next-token distribution and its gradient
with respect to the logits, against :func:`refimpl.losses.logprobs.token_entropy` (the full tempered
softmax: no top-k or top-p, which no framework applies to the entropy it logs or regularises).

The candidate is ``candidate(logits, *, temperature, mask)`` with logits ``(B, T, V)``; it returns
the per-token entropy ``(B, T)`` in nats of :math:`\mathrm{softmax}(z/T)`, 0 at padding, and is
differentiated by its own autograd with respect to the logits. The reference gradient (a VJP with
cotangent :math:`c`) is

.. math::

    \frac{\partial}{\partial z_{bt,j}} \sum_{b't'} c_{b't'} H_{b't'}
    = -\frac{c_{bt}}{T}\,\mu_{bt,j}\bigl(\log\mu_{bt,j} + H_{bt}\bigr),
    \qquad \mu = \mathrm{softmax}(z/T),

computed here in float64 (:func:`token_entropy_vjp`) and checked against torch autograd by the
tests.

Frameworks compute the entropy in one of two exact forms, :math:`-\sum_j \mu_j\log\mu_j`
(TRL, AReaL, SkyRL: ``log_softmax`` first) or :math:`\operatorname{lse}(y) - \sum_j \mu_j y_j`
(verl, OpenRLHF), which differ only in rounding. Conventions express the rest: whether the
candidate takes ``temperature=`` (most frameworks divide the logits before they call the entropy
function), whether it takes ``mask=``, and the dtype it computes in (verl's chunked version casts
each chunk to float32).

Rounding-error model, with :math:`y = z/T`, :math:`m = \max_j y_j`, :math:`L = \log V`,
:math:`f_V` the pairwise sum's factor, :math:`\bar y = \sum_j\mu_j|y_j|`: the division rounds
:math:`y_j` by :math:`u|y_j|`, which moves :math:`H` by at most
:math:`u\sum_j\mu_j|\log\mu_j + H|\,|y_j|`; ``log_softmax`` rounds :math:`\log\mu_j` by
:math:`u(|\log\mu_j| + L + 3)`; the second form rounds :math:`\mu_j` relatively by
:math:`u(|y_j - m| + L + 3) \le u(|\log\mu_j| + L + 3)` and cancels :math:`\operatorname{lse}`
against :math:`\sum\mu y`. The value's condition is

.. math::

    \sum_j \mu_j\bigl[(1 + |\log\mu_j|)(|\log\mu_j| + L + 3)
        + |y_j|(2|\log\mu_j| + H + L + 4)\bigr]
    + (f_V + 2)\Bigl(\sum_j\mu_j|\log\mu_j| + \bar y\Bigr) + |m| + L + 2 + H,

and the gradient's, per entry, :math:`\frac{|c|}{T}\mu_j\bigl[(|\log\mu_j| + H + 1)(|y_j| +
\bar y + |\log\mu_j| + L + 4) + S + (f_V + 3)(H + 1 + \bar y + |y_j| + \sum\mu|\log\mu|)\bigr]
+ 3|g_j|` with :math:`S = \sum_k\mu_k(|\log\mu_k| + H + 1)|y_k|` (the Hessian of :math:`H` times
the rounding of :math:`y`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st
from numpy.typing import NDArray

from refimpl.testing._engine import Call, Case, Check, Convention, Conventions, Spec
from refimpl.testing._specs_losses import (
    Kind,
    LossDesc,
    Parts,
    Terms,
    calls,
    resolve,
)
from refimpl.testing._specs_losses_checks import loss_spec
from refimpl.testing.tolerances import largest_finite, summation_factor

__all__ = ["entropy_spec", "huge_logits_stay_finite", "token_entropy_vjp"]

Array = NDArray[np.float64]

TEMPERATURE = Convention(
    "temperature",
    "keyword",
    ("keyword", "none"),
    "'keyword': the candidate receives temperature= and divides the logits by it; 'none': it "
    "takes no temperature= (its caller divides the logits first) and is checked at T = 1",
    who="keyword: AReaL 1.0.4 _gather_logprobs_entropy (areal/utils/functional/vocab_parallel.py), "
    "TRL 1.16.0 selective_log_softmax_and_entropy (trl/trainer/utils.py); none: verl 0.9.1 "
    "entropy_from_logits and entropy_from_logits_with_chunking (verl/utils/torch_functional.py; "
    "the FSDP engine divides the logits first), TRL 1.16.0 entropy_from_logits, OpenRLHF 0.11.2 "
    "compute_entropy (models/utils.py; Actor.forward divides the logits in place first), "
    "SkyRL 0.3.0 chunked_entropy_from_logits (skyrl_train/utils/torch_utils.py; the model "
    "wrapper divides the logits in place first)",
)
MASK = Convention(
    "mask",
    "keyword",
    ("keyword", "none"),
    "'keyword': the candidate receives mask=; 'none': it takes no mask= and computes an entropy "
    "at every position (declare padding='ignored' with it: the value at padding is never read)",
    who="none: verl 0.9.1 entropy_from_logits(_with_chunking), TRL 1.16.0 entropy_from_logits, "
    "OpenRLHF 0.11.2 compute_entropy; keyword: SkyRL 0.3.0 chunked_entropy_from_logits "
    "(attention_mask, zeros padding), TRL 1.16.0 selective_log_softmax_and_entropy (row_mask, "
    "zeros padding)",
)

_GARBAGE = (0.0, -1e4, 1e4, 1e30, -1e30, 88.0, -89.0)
_HUGE_OFFSETS = (0.0, 89.0, -89.0, 1000.0, -1000.0, 1e4, -1e4)


# ---------------------------------------------------------------------------------------------
# the reference gradient
# ---------------------------------------------------------------------------------------------


def _tempered(logits: Array, temperature: float, mask: Array) -> tuple[Array, Array, Array]:
    """``(y, log μ, H)``: the tempered logits (0 at padding), log-softmax, and the entropy."""
    y = np.where((mask > 0)[..., None], np.asarray(logits, dtype=np.float64) / temperature, 0.0)
    shift = np.max(y, axis=-1, keepdims=True)
    log_mu = (y - shift) - np.log(np.sum(np.exp(y - shift), axis=-1, keepdims=True))
    h = np.maximum(-np.sum(np.exp(log_mu) * log_mu, axis=-1), 0.0)
    return y, log_mu, h


def token_entropy_vjp(logits: Array, *, temperature: float, cotangent: Array, mask: Array) -> Array:
    r"""``∂(Σ_bt c_bt H_bt)/∂z = −(c/T)·μ·(log μ + H)`` in float64, 0 at padding (no validation:
    the spec's own calls)."""
    _, log_mu, h = _tempered(logits, temperature, mask)
    c = np.where(mask > 0, np.asarray(cotangent, dtype=np.float64), 0.0)
    grad = -(c / temperature)[..., None] * np.exp(log_mu) * (log_mu + h[..., None])
    return np.asarray(grad, dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# the calls
# ---------------------------------------------------------------------------------------------


def _temperature(draw: st.DrawFn, conv: Conventions) -> float:
    if conv["temperature"] == "none":
        return 1.0
    return float(
        draw(
            st.one_of(
                st.sampled_from([0.7, 0.5, 2.0, 0.3]),
                st.floats(0.3, 3.0, allow_nan=False, allow_subnormal=False),
            )
        )
    )


def _logits(draw: st.DrawFn, shape: tuple[int, int, int], kind: Kind) -> Array:
    """Per position: multiples of a step (ties allowed, sometimes all equal) plus an offset."""
    n = shape[0] * shape[1] * shape[2]
    step = {"wide": 1.0, "huge": 25.0}.get(kind, 0.25)
    ks = np.asarray(draw(st.lists(st.integers(-32, 32), min_size=n, max_size=n)), dtype=np.float64)
    grid = ks.reshape(shape) * step
    positions = shape[0] * shape[1]
    flat = st.lists(st.booleans(), min_size=positions, max_size=positions)
    flat_rows = np.asarray(draw(flat), dtype=bool).reshape(shape[:2])
    grid = np.where(flat_rows[..., None], grid[..., :1], grid)  # H = log V exactly
    if kind == "huge":
        offsets = st.sampled_from(_HUGE_OFFSETS)
    else:
        offsets = st.floats(-5.0, 5.0, allow_nan=False, allow_subnormal=False)
    off = np.asarray(draw(st.lists(offsets, min_size=positions, max_size=positions)))
    return np.asarray(grid + off.reshape(shape[:2])[..., None], dtype=np.float64)


def _lengths(
    draw: st.DrawFn, batch: int, time: int, conv: Conventions, kind: Kind
) -> NDArray[np.int64]:
    low = 1 if conv["empty_rows"] == "excluded" else 0
    each = st.integers(low, max(time - 1, low)) if kind == "padding" else st.integers(low, time)
    lengths = np.asarray(draw(st.lists(each, min_size=batch, max_size=batch)), dtype=np.int64)
    if conv["empty_batch"] == "excluded" and lengths.max() == 0:
        lengths[0] = 1
    return lengths


@st.composite
def entropy_draw(draw: st.DrawFn, desc: LossDesc, conv: Conventions, kind: Kind) -> Call:
    temperature = _temperature(draw, conv)
    if kind == "long":
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        batch, time, vocab = 1, 4096, 4
        base = np.stack([rng.permutation(np.arange(vocab)) for _ in range(time)]) * 0.5
        logits = (base + rng.normal(0.0, 3.0, (time, 1)))[None]
        lengths = np.array([time])
        cot = rng.integers(0, 33, (batch, time)) / 16.0
    else:
        batch, time = draw(st.integers(1, 3)), draw(st.integers(1, 5))
        vocab = draw(st.integers(1, 8))
        logits = _logits(draw, (batch, time, vocab), kind)
        lengths = _lengths(draw, batch, time, conv, kind)
        ks = draw(st.lists(st.integers(0, 32), min_size=batch * time, max_size=batch * time))
        cot = np.asarray(ks, dtype=np.float64).reshape(batch, time) / 16.0
    mask = (np.arange(time)[None, :] < lengths[:, None]).astype(np.float64)
    if kind == "padding":
        junk = draw(st.lists(st.sampled_from(_GARBAGE), min_size=logits.size, max_size=logits.size))
        logits = np.where(mask[..., None] > 0, logits, np.asarray(junk).reshape(logits.shape))
    if conv["padding"] == "ignored":
        cot = cot * mask
    kwargs: dict[str, Any] = {"temperature": temperature, "mask": mask}
    if conv["output"] == "token":
        kwargs["cotangent"] = cot
    return (logits,), kwargs


# ---------------------------------------------------------------------------------------------
# reference and rounding-error model
# ---------------------------------------------------------------------------------------------


def _terms(p: Parts, conv: Conventions) -> Terms:
    z = p.arrays["logits"]
    t = float(p.params["temperature"])
    value = resolve("losses.logprobs.token_entropy")(z, temperature=t, mask=p.mask)
    grad = token_entropy_vjp(np.asarray(z), temperature=t, cotangent=p.cotangent, mask=p.mask)
    return np.asarray(value), grad


def _condition(p: Parts, conv: Conventions, loss: Array, grad: Array) -> Terms:
    t = float(p.params["temperature"])
    y, log_mu, h = _tempered(np.asarray(p.arrays["logits"]), t, p.mask)
    mu = np.exp(log_mu)
    vocab = y.shape[-1]
    big_l = math.log(vocab)
    f = summation_factor(vocab)
    ay, al = np.abs(y), np.abs(log_mu)
    hh = h[..., None]
    y_bar = (mu * ay).sum(axis=-1, keepdims=True)
    l_bar = (mu * al).sum(axis=-1, keepdims=True)
    top = np.max(ay, axis=-1)
    own = mu * ((1.0 + al) * (al + big_l + 3.0) + ay * (2.0 * al + hh + big_l + 4.0))
    cv = own.sum(axis=-1) + (f + 2.0) * (l_bar + y_bar)[..., 0] + top + big_l + 2.0 + h
    cv = np.where(p.mask > 0, cv, 0.0)
    s = (mu * (al + hh + 1.0) * ay).sum(axis=-1, keepdims=True)
    c = (np.abs(p.cotangent) / t)[..., None]
    cg = (
        c
        * mu
        * (
            (al + hh + 1.0) * (ay + y_bar + al + big_l + 4.0)
            + s
            + (f + 3.0) * (hh + 1.0 + y_bar + ay + l_bar)
        )
    )
    cg = np.where((p.mask > 0)[..., None], cg, 0.0) + 3.0 * np.abs(grad)
    return np.asarray(cv, dtype=np.float64), np.asarray(cg, dtype=np.float64)


def _no_params(conv: Conventions) -> st.SearchStrategy[dict[str, Any]]:
    return st.just({})


def _fixed(conv: Conventions) -> tuple[str, ...]:
    """The keywords a convention withholds from the candidate."""
    return tuple(key for key in ("temperature", "mask") if conv[key] == "none")


# ---------------------------------------------------------------------------------------------
# the check of huge logits (the loss specs' version speaks of log-ratios)
# ---------------------------------------------------------------------------------------------


def huge_logits_stay_finite(values: str) -> Callable[[Case], None]:
    """The huge-logits check of a per-position quantity of the logits (``values`` names it)."""

    def check(case: Case) -> None:
        _huge_logits_check(case, values)

    return check


def _huge_logits_check(case: Case, values: str) -> None:
    top = largest_finite(case.dtype)
    for i, (_, kwargs) in enumerate(case.calls):
        mask = np.asarray(kwargs["mask"]) > 0
        expected, condition = case.expected(i), case.condition(i)
        for which, what in ((0, values), (1, "gradients")):
            found = np.asarray(case.found[i][which], dtype=np.float64)
            ref = np.asarray(expected[which], dtype=np.float64)
            assert found.shape == ref.shape, f"{what}: shape {found.shape}, expected {ref.shape}"
            keep = np.isfinite(ref) & (np.abs(ref) <= top)
            if which == 0 and ref.shape == mask.shape and case.conventions["padding"] == "ignored":
                keep &= mask
            case.show(f"{what} found:   ", found)
            case.show(f"{what} expected:", ref)
            bad = keep & ~np.isfinite(found)
            assert not bad.any(), (
                f"non-finite {what} {found[bad][:5].tolist()} where the reference is "
                f"{ref[bad][:5].tolist()} (logits up to ±1e4: subtract the largest logit before "
                "exp, as log_softmax and logsumexp do; exp(z)/Σexp(z) overflows to inf/inf)"
            )
            cond = np.broadcast_to(np.asarray(condition[which], dtype=np.float64), ref.shape)
            ok = case.close(found, ref, cond) | ~keep
            if not ok.all():
                where = [tuple(int(j) for j in b) for b in np.argwhere(~ok)[:5]]
                raise AssertionError(
                    f"at huge logits the {what} differ from the reference at {int((~ok).sum())} "
                    f"of {ok.size} entries (first at {where}): found {found[~ok][:5].tolist()}, "
                    f"expected {ref[~ok][:5].tolist()} (allowed error "
                    f"{case.allowed(ref, cond)[~ok][:5].tolist()}; {case.tolerance_text()})"
                )


def entropy_spec() -> Spec:
    """The ``token_entropy`` spec: value and gradient (w.r.t. the logits) of the entropy."""
    desc = LossDesc(
        "token_entropy",
        "losses.logprobs.token_entropy",
        "candidate(logits, *, temperature, mask) -> (B, T) entropies in nats of softmax(logits/T)",
        ("logits",),
        _terms,
        _condition,
        _no_params,
        conventions=(TEMPERATURE, MASK),
        on_policy=None,
        boundaries=False,
        draws=entropy_draw,
    )
    spec = loss_spec(desc, _fixed)
    huge = Check(
        "huge_logits_stay_finite",
        "logits offset by ±89, ±1000 or ±1e4 and spread by up to ±800 give finite entropies and "
        "gradients that agree with the reference (the log-sum-exp is shifted by the largest logit)",
        calls(desc, "huge"),
        huge_logits_stay_finite("entropies"),
    )
    checks = tuple(
        huge if c.name == "huge_log_ratios_stay_finite" else c
        for c in spec.checks
        if c.name != "clipped_region_has_zero_gradient"
    )
    return dataclasses.replace(spec, checks=checks)
