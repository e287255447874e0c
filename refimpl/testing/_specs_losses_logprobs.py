r"""The spec ``token_logprobs``: a trainer's log-probability of the sampled tokens, and its gradient
with respect to the logits, against :func:`refimpl.losses.logprobs.token_logprobs` (the sampler's
semantics: temperature on the logits, then top-k, then top-p on the renormalised mass).

The candidate is ``candidate(logits, tokens, *, temperature, top_k, top_p, mask)`` with logits
``(B, T, V)`` and integer tokens ``(B, T)``; it returns the per-token log-probability ``(B, T)``
(``−inf`` for a token outside the kept support), differentiated with respect to the logits.
Conventions say what it does not take: ``truncation="none"`` withholds ``top_k=`` and ``top_p=``
(a trainer's full softmax), ``temperature="none"`` withholds ``temperature=`` (its caller divides
the logits first, or nothing does) and checks it at ``T = 1``, as for ``token_entropy``.
The drawn logits of a position are distinct (a shuffled grid), so top-k has no ties; a top-p
boundary within the candidate's rounding of the cumulative mass may fall either way (the reference
is also evaluated with ``top_p`` moved by that rounding).

Rounding-error model, with :math:`y = z/T`, :math:`\mu` the kept distribution: the value
:math:`y_x - \operatorname{lse}(y_S)` has condition :math:`|y_x| + |\max y| + \sum_j\mu_j|y_j| +
\log V + |\ell| + 4`; the gradient :math:`\frac{c}{T}(\mathbb 1[j = x] - \mu_j)` has condition
:math:`\frac{|c|}{T}(\mu_j(|y_j| + |\max y| + \sum\mu|y| + \log V + 4) + \mathbb 1[j = x]) + |g_j|`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from hypothesis import strategies as st
from numpy.typing import NDArray

from refimpl.testing._engine import Call, Case, Convention, Conventions, Spec
from refimpl.testing._specs_losses import (
    Kind,
    LossDesc,
    Parts,
    Terms,
    resolve,
)
from refimpl.testing._specs_losses_checks import loss_spec
from refimpl.testing._specs_losses_entropy import TEMPERATURE as _ENTROPY_TEMPERATURE
from refimpl.testing.tolerances import summation_factor

Array = NDArray[np.float64]

_GARBAGE = (0.0, -1e4, 1e4, 1e30, -1e30, 88.0)


#: Whether the candidate truncates the distribution as the sampler does.
TRUNCATION = Convention(
    "truncation",
    "drawn",
    ("drawn", "none"),
    "'drawn': the candidate receives top_k= and top_p= (None or a value) and keeps only the "
    "sampler's support; 'none': it takes neither and computes the log-probability under the "
    "full tempered distribution (checked with top_k = top_p = None)",
    who="none: verl 0.9.1 logprobs_from_logits (and _v2, _naive; verl/utils/torch_functional.py), "
    "TRL 1.16.0 selective_log_softmax (trl/trainer/utils.py), OpenRLHF 0.11.2 "
    "log_probs_from_logits (openrlhf/models/utils.py), AReaL 1.0.4 gather_logprobs and "
    "gather_logprobs_entropy (areal/utils/functional): the trainer's log-probability of a token "
    "is the full softmax's, whatever top-k or top-p the sampler used",
)

#: Whether the candidate takes ``temperature=`` (the meaning of ``token_entropy``'s convention).
TEMPERATURE = dataclasses.replace(
    _ENTROPY_TEMPERATURE,
    who="none: SkyRL 0.3.0 LogitsProcessorMixin.logits_to_logprobs and compute_logprobs "
    "(skyrl/tx/utils/logits_processor.py): the JAX backend's training step and its sampler's "
    "reported log-probability (tx/utils/generator.py, _prefill_and_decode) pass the untempered "
    "logits",
)


def _params(draw: st.DrawFn, vocab: int, conv: Conventions) -> dict[str, Any]:
    temperature = 1.0
    if conv["temperature"] == "keyword":
        temperature = draw(
            st.one_of(
                st.sampled_from([1.0, 0.7, 0.5, 2.0]),
                st.floats(0.3, 3.0, allow_nan=False, allow_subnormal=False),
            )
        )
    if conv["truncation"] == "none":
        return {"temperature": temperature, "top_k": None, "top_p": None}
    top_k = draw(st.one_of(st.none(), st.integers(1, vocab)))
    top_p = draw(
        st.one_of(
            st.none(),
            st.sampled_from([0.9, 0.5, 1.0]),
            st.floats(0.05, 1.0, allow_nan=False, allow_subnormal=False),
        )
    )
    return {"temperature": temperature, "top_k": top_k, "top_p": top_p}


def _grid_logits(draw: st.DrawFn, shape: tuple[int, int], vocab: int, scale: float) -> Array:
    """Per position: distinct multiples of ``scale/4`` (shuffled) plus an offset."""
    out = np.empty((*shape, vocab))
    for b in range(shape[0]):
        for t in range(shape[1]):
            ks = draw(st.lists(st.integers(-32, 32), min_size=vocab, max_size=vocab, unique=True))
            offset = draw(st.floats(-5.0, 5.0, allow_nan=False, allow_subnormal=False))
            out[b, t] = np.asarray(ks, dtype=np.float64) * (scale / 4.0) + offset
    return out


@st.composite
def logprob_draw(draw: st.DrawFn, desc: LossDesc, conv: Conventions, kind: Kind) -> Call:
    if kind == "long":
        vocab = 4
        params = _params(draw, vocab, conv)
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        batch, time = 1, 4096
        base = np.stack([rng.permutation(np.arange(vocab)) for _ in range(time)]) * 0.5
        logits = (base + rng.normal(0.0, 3.0, (time, 1)))[None]
        tokens = rng.integers(0, vocab, (batch, time))
        lengths = np.array([time])
        cot = rng.integers(0, 33, (batch, time)) / 16.0
    else:
        vocab = draw(st.integers(2, 8))
        params = _params(draw, vocab, conv)
        batch, time = draw(st.integers(1, 3)), draw(st.integers(1, 5))
        scale = {"huge": 100.0, "wide": 4.0}.get(kind, 1.0)
        logits = _grid_logits(draw, (batch, time), vocab, scale)
        ids = draw(
            st.lists(st.integers(0, vocab - 1), min_size=batch * time, max_size=batch * time)
        )
        tokens = np.asarray(ids, dtype=np.int64).reshape(batch, time)
        low = 1 if conv["empty_rows"] == "excluded" else 0
        each = st.integers(low, max(time - 1, low)) if kind == "padding" else st.integers(low, time)
        lengths = np.asarray(draw(st.lists(each, min_size=batch, max_size=batch)), dtype=np.int64)
        if conv["empty_batch"] == "excluded" and lengths.max() == 0:
            lengths[0] = 1
        ks = draw(st.lists(st.integers(0, 32), min_size=batch * time, max_size=batch * time))
        cot = np.asarray(ks, dtype=np.float64).reshape(batch, time) / 16.0
    mask = (np.arange(time)[None, :] < lengths[:, None]).astype(np.float64)
    if kind == "padding":
        junk = draw(st.lists(st.sampled_from(_GARBAGE), min_size=logits.size, max_size=logits.size))
        junk_arr = np.asarray(junk).reshape(logits.shape)
        logits = np.where(mask[..., None] > 0, logits, junk_arr)
    if conv["padding"] == "ignored":
        cot = cot * mask
    kwargs: dict[str, Any] = {**params, "mask": mask}
    if conv["output"] == "token":
        kwargs["cotangent"] = cot
    return (logits, tokens.astype(np.int64)), kwargs


def _terms(p: Parts, conv: Conventions) -> Terms:
    z, ids = p.arrays["logits"], p.arrays["tokens"]
    value = resolve("losses.logprobs.token_logprobs")(z, ids, mask=p.mask, **p.params)
    grad = resolve("losses.logprobs.token_logprobs_grad")(
        z, ids, mask=p.mask, cotangent=p.cotangent, **p.params
    )
    return np.asarray(value), np.asarray(grad)


def _kept(p: Parts) -> tuple[Array, Array, Array]:
    """(μ over the vocabulary, y = z/T, one-hot of the kept sampled token) per position."""
    z = np.asarray(p.arrays["logits"], dtype=np.float64)
    ids = np.asarray(p.arrays["tokens"], dtype=np.int64)
    t = float(p.params["temperature"])
    ones = np.ones(p.mask.shape)
    grad1 = resolve("losses.logprobs.token_logprobs_grad")(z, ids, cotangent=ones, **p.params)
    value = resolve("losses.logprobs.token_logprobs")(z, ids, **p.params)
    onehot = np.zeros(z.shape)
    np.put_along_axis(onehot, ids[..., None], np.isfinite(value)[..., None].astype(float), axis=-1)
    mu = np.clip(onehot - t * np.asarray(grad1), 0.0, 1.0)
    return mu, z / t, onehot


def _condition(p: Parts, conv: Conventions, loss: Array, grad: Array) -> Terms:
    mu, y, onehot = _kept(p)
    vocab = y.shape[-1]
    kept = mu > 0
    top = np.max(np.where(kept, np.abs(y), 0.0), axis=-1)
    spread = (mu * np.abs(y)).sum(axis=-1)
    y_x = (onehot * np.abs(y)).sum(axis=-1)
    base = top + spread + math.log(vocab) + 4.0
    cv = np.where(p.mask > 0, y_x + base + np.where(np.isfinite(loss), np.abs(loss), 0.0), 0.0)
    c = np.abs(p.cotangent)[..., None] / float(p.params["temperature"])
    cg = c * (mu * (np.abs(y) + base[..., None]) + onehot) + np.abs(grad)
    return cv, cg


def _shift_top_p(desc: LossDesc, call: Call, case: Case) -> tuple[list[Call], Array]:
    """``top_p`` moved by the rounding of a cumulative probability (each way)."""
    args, kwargs = call
    top_p = kwargs.get("top_p")
    if top_p is None:
        return [], np.zeros(())
    p = Parts(
        dict(zip(desc.arrays, args, strict=True)),
        np.asarray(kwargs["mask"]),
        np.asarray(kwargs["mask"]),
        {k: v for k, v in kwargs.items() if k in ("temperature", "top_k", "top_p")},
    )
    mu, y, _ = _kept(p)
    top = np.max(np.where(mu > 0, y, -np.inf), axis=-1, keepdims=True)
    gap = (mu * np.abs(y - top)).sum(axis=-1).max(initial=0.0)
    h = float(case.allowed(1.0, summation_factor(y.shape[-1]) + 4.0 + gap))
    out = []
    for moved in (top_p * (1.0 + h), top_p * (1.0 - h)):
        moved = min(max(moved, 1e-6), 1.0)
        out.append((args, {**kwargs, "top_p": moved}))
    return out, np.zeros(())


def _no_params(conv: Conventions) -> st.SearchStrategy[dict[str, Any]]:
    return st.just({})


def logprobs_spec() -> Spec:
    desc = LossDesc(
        "token_logprobs",
        "losses.logprobs.token_logprobs",
        "candidate(logits, tokens, *, temperature, top_k, top_p, mask) -> (B, T) log-probabilities",
        ("logits", "tokens"),
        _terms,
        _condition,
        _no_params,
        on_policy=None,
        boundaries=False,
        conventions=(TRUNCATION, TEMPERATURE),
        draws=logprob_draw,
        shifted=_shift_top_p,
    )
    return loss_spec(desc, _withheld)


def _withheld(conv: Conventions) -> tuple[str, ...]:
    """The keywords a convention withholds from the candidate."""
    truncation = ("top_k", "top_p") if conv["truncation"] == "none" else ()
    return truncation + (("temperature",) if conv["temperature"] == "none" else ())
