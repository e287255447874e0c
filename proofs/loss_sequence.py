r"""# Sequence-level surrogates: GSPO, GSPO-token and GMPO, and their gradients

Write $d_t = \log\pi_t - \log\pi^{\text{old}}_t$ for the $L$ valid tokens of one sequence, and
$m = \frac1L\sum_t d_t$ for their mean. GSPO's sequence ratio is the geometric mean of the token
ratios, $s = e^m$, and its per-token surrogate is
$\ell_t = \max(-A_t s,\,-A_t\,\mathrm{clip}(s, 1-\epsilon_{\text{low}}, 1+\epsilon_{\text{high}}))$.
The loss minimised is $J = \sum_t c_t \ell_t$ for weights $c_t$ (the aggregation's; the padding mask by
default).

**GSPO, region by region (claim SQ2).** With a sequence advantage $A$: if $A > 0$ and
$s > 1+\epsilon_{\text{high}}$, or $A < 0$ and $s < 1-\epsilon_{\text{low}}$, the clipped branch is
active, $\ell_t$ is the constant $-A(1\pm\epsilon)$ and the gradient is 0. Otherwise $\ell_t = -A e^m$
and, since $\partial m/\partial\log\pi_{t'} = 1/L$,

$$
\frac{\partial J}{\partial\log\pi_{t'}} = -A\,\frac{s}{L}\sum_t c_t \qquad\text{for every valid } t'.
$$

Every token of the sequence receives the same gradient, whatever its own ratio: the sequence is
clipped or not as a whole. At the bounds ($s = 1\pm\epsilon$ exactly) the two branches agree in value
and, because `torch.clamp` passes the gradient at its bounds, also in gradient.

**GSPO-token (claim SQ1).** GSPO-token replaces $s$ at token $t$ by
$s_t = \mathrm{sg}[s]\,\pi_t/\mathrm{sg}[\pi_t]$: the value is $s$ but
$\partial s_t/\partial\log\pi_{t'} = s\,\mathbb{1}[t = t']$. In the unclipped region
$\partial J/\partial\log\pi_{t'} = -A_{t'}\,c_{t'}\,s$. With one advantage per sequence this equals
GSPO's $-A\,s\,\frac1L\sum_t c_t$ exactly when $c_{t'} = \frac1L\sum_t c_t$, i.e. when the weights
are constant over the sequence's valid tokens. Every standard aggregation (token mean, sequence mean
of token means, the sum, a constant normaliser) has that property; a cotangent that varies within a
sequence separates the two (the difference is $-A s(c_{t'} - \bar c)$). The clip regions coincide
because the values coincide.

**GMPO (claim SQ3).** GMPO clips each token's log-ratio on the side its advantage's sign $\sigma_t$
points to, $\tilde d_t = \sigma_t\min(\sigma_t d_t,\,\sigma_t\,\mathrm{clip}(d_t, -\epsilon_{\text{low}},
\epsilon_{\text{high}}))$, so for $\sigma_t = +1$ only $d_t > \epsilon_{\text{high}}$ is replaced by
$\epsilon_{\text{high}}$ and for $\sigma_t = -1$ only $d_t < -\epsilon_{\text{low}}$ by
$-\epsilon_{\text{low}}$. The sequence loss is $\ell = -\bar A\,r$ with
$r = \exp(\frac1L\sum_t\tilde d_t)$ and $\bar A$ the mean advantage, and

$$
\frac{\partial \ell}{\partial\log\pi_{t'}} = -\bar A\,\frac{r}{L}\,\mathbb{1}[t' \text{ not clipped}],
$$

so a clipped token stops contributing to the gradient but its clipped value still scales $r$, and
with it the gradient of the other tokens.

**Length (claim SQ4).** For a constant per-token log-ratio $\delta$ the sequence ratio is $e^\delta$
at every length: the mean removes the length, where the product of the token ratios,
$e^{L\delta}$, would clip long sequences first.

Each claim evaluates `refimpl.losses.sequence` against the derived expressions at points of every
region (sequences of 3 valid tokens plus padding).
"""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import sympy as sp

from proofs._framework import GENERAL, assert_close, assert_zero, claim
from refimpl.losses.sequence import gmpo_loss, gspo_loss, gspo_token_loss

L = 3
lp = sp.symbols(f"l0:{L}", real=True)
old = sp.symbols(f"o0:{L}", real=True)
cw = sp.symbols(f"c0:{L}", real=True)
A, eps = sp.symbols("A epsilon", real=True)
kappa = sp.symbols("kappa", real=True)
S_sg = sp.symbols("S", positive=True)  # the value of sg[s]
L_sg = sp.symbols(f"lsg0:{L}", real=True)  # the values of sg[log π_t]
MEAN = sp.Add(*(lp[t] - old[t] for t in range(L))) / L
S = sp.exp(MEAN)


def _batch(d: list[float], pad: int = 2) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One sequence of log-ratios ``d`` (logp_old = 0) and ``pad`` padding tokens holding junk."""
    logp = np.array([[*d, *([3.0] * pad)]])
    mask = np.array([[1.0] * len(d) + [0.0] * pad])
    return logp, np.zeros_like(logp), mask


def _gspo_grad_closed(a: float, d: list[float], c: list[float], lo: float, hi: float) -> float:
    s = math.exp(sum(d) / len(d))
    clipped = (a > 0 and s > 1 + hi) or (a < 0 and s < 1 - lo)
    return 0.0 if clipped else -a * s / len(d) * sum(c)


@claim(
    "SQ1",
    r"With one advantage per sequence and weights $c_t$ constant over its valid tokens, "
    r"GSPO-token's gradient equals GSPO's: $-A\,s\,c_{t'}$ and $-A\,\frac{s}{L}\sum_t c_t$ coincide "
    r"(and differ by $-A s (c_{t'} - \bar c)$ otherwise).",
    method="symbolic",
    scope="unclipped region symbolic for L = 3 tokens; clipped regions are constants; library "
    "check on seeded batches with mixed lengths and the standard aggregation weights",
)
def gspo_token_gradient_equals_gspo() -> None:
    j_seq = sp.Add(*(cw[t] * (-A * S) for t in range(L)))
    s_tok = [S_sg * sp.exp(lp[t] - L_sg[t]) for t in range(L)]
    j_tok = sp.Add(*(cw[t] * (-A * s_tok[t]) for t in range(L)))
    at_values = {S_sg: S, **{L_sg[t]: lp[t] for t in range(L)}}
    c_bar = sp.Add(*cw) / L
    for j in range(L):
        g_seq = sp.diff(j_seq, lp[j])
        g_tok = sp.diff(j_tok, lp[j]).subs(at_values)
        assert_zero(g_tok - g_seq - (-A * S * (cw[j] - c_bar)), label=f"SQ1 difference {j}")
        assert_zero((g_tok - g_seq).subs(dict.fromkeys(cw, kappa)), label=f"SQ1 constant c {j}")
    rng = np.random.default_rng(11)
    for _ in range(20):
        lengths = rng.integers(1, 6, size=4)
        mask = (np.arange(6)[None, :] < lengths[:, None]).astype(float)
        logp = rng.normal(size=(4, 6)) * 0.3 - 1.0
        logp_old = logp + rng.normal(size=(4, 6)) * 0.2
        adv = rng.normal(size=4)
        weights = [mask, mask / lengths[:, None] / 4, mask / mask.sum(), mask / (4 * 6)]
        for c in weights:
            kw = {"eps_low": 0.2, "eps_high": 0.28, "mask": mask, "cotangent": c}
            g_seq = gspo_loss(logp, logp_old, adv, **kw).grad
            g_tok = gspo_token_loss(logp, logp_old, adv, **kw).grad
            for b in range(4):
                d = list((logp - logp_old)[b, : lengths[b]])
                cb = list(c[b, : lengths[b]])
                expected = _gspo_grad_closed(float(adv[b]), d, cb, 0.2, 0.28)
                for t in range(int(lengths[b])):
                    assert_close(g_seq[b, t], expected, rel=1e-12, abs_=1e-15, label="SQ1 gspo")
                    assert_close(g_tok[b, t], expected, rel=1e-12, abs_=1e-15, label="SQ1 token")


@claim(
    "SQ2",
    r"GSPO region by region: with $A>0, s>1+\epsilon_{\text{high}}$ or $A<0, s<1-\epsilon_{\text{low}}$ "
    r"the loss is $-A(1\pm\epsilon)$ at every valid token and the gradient 0; otherwise the loss is "
    r"$-A s$ and the gradient $-A\frac{s}{L}\sum_t c_t$ at every valid token; padding gets 0.",
    method="symbolic",
    scope="L = 3 tokens symbolic; library check at points of each region with padding",
)
def gspo_gradient_by_region() -> None:
    j_unclipped = sp.Add(*(cw[t] * (-A * S) for t in range(L)))
    j_clipped = sp.Add(*(cw[t] * (-A * (1 + eps)) for t in range(L)))
    for j in range(L):
        assert_zero(sp.diff(j_unclipped, lp[j]) + A * S / L * sp.Add(*cw), label=f"SQ2 live {j}")
        assert_zero(sp.diff(j_clipped, lp[j]), label=f"SQ2 clipped {j}")
    lo, hi = 0.2, 0.3
    c = [0.5, 1.0, 2.0]
    for a in (1.5, -1.5, 0.0):
        for mean in (-0.6, -0.1, 0.0, 0.1, 0.6):  # below, inside, on-policy, inside, above
            d = [mean + 0.2, mean - 0.5, mean + 0.3]
            logp, logp_old, mask = _batch(d)
            cot = np.array([[*c, 7.0, 7.0]])
            terms = gspo_loss(
                logp, logp_old, [a], eps_low=lo, eps_high=hi, mask=mask, cotangent=cot
            )
            s = math.exp(sum(d) / L)
            value = max(-a * s, -a * min(max(s, 1 - lo), 1 + hi))
            expected = _gspo_grad_closed(a, d, c, lo, hi)
            for t in range(L):
                assert_close(terms.loss[0, t], value, rel=1e-14, abs_=1e-15, label="SQ2 loss")
                assert_close(terms.grad[0, t], expected, rel=1e-13, abs_=1e-15, label="SQ2 grad")
            assert np.all(terms.loss[0, L:] == 0.0)
            assert np.all(terms.grad[0, L:] == 0.0)


@claim(
    "SQ3",
    r"GMPO: $\partial\ell/\partial\log\pi_{t'} = -\bar A\,\frac{r}{L}\,\mathbb{1}[t'\text{ not clipped}]$ "
    r"with $r = \exp(\frac1L\sum_t\tilde d_t)$, where a token is clipped iff $\sigma_t = +1$ and "
    r"$d_t > \epsilon_{\text{high}}$, or $\sigma_t = -1$ and $d_t < -\epsilon_{\text{low}}$.",
    method="symbolic",
    scope="L = 3 tokens, every combination of sign and region per token (216), symbolic; library "
    "check at one point of each combination",
)
def gmpo_gradient() -> None:
    e_lo, e_hi = sp.symbols("epsilon_low epsilon_high", positive=True)
    adv = sp.symbols(f"A0:{L}", real=True)
    lo, hi = 0.25, 0.35
    rng = random.Random(5)
    regions = ("below", "inside", "above")
    for signs in itertools.product((1, -1), repeat=L):
        for where in itertools.product(regions, repeat=L):
            d = [lp[t] - old[t] for t in range(L)]
            clipped = [
                (signs[t] > 0 and where[t] == "above") or (signs[t] < 0 and where[t] == "below")
                for t in range(L)
            ]
            bound = {1: e_hi, -1: -e_lo}
            d_tilde = [bound[signs[t]] if clipped[t] else d[t] for t in range(L)]
            a_bar = sp.Add(*adv) / L
            ell = -a_bar * sp.exp(sp.Add(*d_tilde) / L)
            r = sp.exp(sp.Add(*d_tilde) / L)
            for j in range(L):
                closed = 0 if clipped[j] else -a_bar * r / L
                assert_zero(sp.diff(ell, lp[j]) - closed, label=f"SQ3 {signs} {where} {j}")
            # library check at a point of this combination
            point = {"below": -lo - 0.1, "inside": 0.05, "above": hi + 0.1}
            dv = [point[w] + rng.uniform(-0.04, 0.04) for w in where]
            av = [s * rng.uniform(0.5, 2.0) for s in signs]
            logp, logp_old, mask = _batch(dv)
            cot = np.array([[1.0, 0.5, 2.0, 9.0, 9.0]])
            adv_row = np.array([[*av, 4.0, 4.0]])
            terms = gmpo_loss(
                logp, logp_old, adv_row, eps_low=lo, eps_high=hi, mask=mask, cotangent=cot
            )
            dt = [(hi if signs[t] > 0 else -lo) if clipped[t] else dv[t] for t in range(L)]
            rv = math.exp(sum(dt) / L)
            abar = sum(av) / L
            for t in range(L):
                assert_close(terms.loss[0, t], -abar * rv, rel=1e-13, label="SQ3 loss")
                g = 0.0 if clipped[t] else -abar * rv / L * 3.5
                assert_close(terms.grad[0, t], g, rel=1e-13, abs_=1e-15, label="SQ3 grad")


@claim(
    "SQ4",
    r"For a constant per-token log-ratio $\delta$, GSPO's ratio is $e^\delta$ at every length $L$ "
    r"(the product of the token ratios would be $e^{L\delta}$), so the loss per token does not "
    r"depend on the length.",
    method="symbolic",
    scope=GENERAL,
)
def gspo_ratio_is_length_free() -> None:
    delta = sp.symbols("delta", real=True)
    n = sp.symbols("n", positive=True, integer=True)
    assert_zero(sp.exp(n * delta / n) - sp.exp(delta), label="SQ4")
    for length in range(1, 8):
        logp = np.full((1, length), 0.15)
        terms = gspo_loss(logp, np.zeros_like(logp), [-1.0], eps_low=0.2)
        assert_close(float(terms.loss[0, 0]), math.exp(0.15), rel=1e-14, label="SQ4 loss")
        assert_close(
            float(terms.grad[0, 0]), math.exp(0.15), rel=1e-14, label="SQ4 grad (Σc/L = 1)"
        )
