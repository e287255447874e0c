r"""# PPO-clip on the sequence-likelihood ratio, and its gradient

When a whole completion is one action, the importance ratio of a sequence is the ratio of its
likelihoods. Write $d_t = \log\pi_t - \log\pi^{\text{old}}_t$ for its $L$ valid tokens; then

$$
S = \frac{\pi(y\mid x)}{\pi^{\text{old}}(y\mid x)} = \prod_t e^{d_t} = \exp\Bigl(\sum_t d_t\Bigr),
$$

the product of the token ratios, where GSPO takes their geometric mean $e^{\frac1L\sum_t d_t}$
(see the derivation of the sequence-level surrogates). PPO's clipped surrogate is applied once per
sequence, $\ell = \max(-A S,\,-A\,\mathrm{clip}(S, 1-\epsilon_{\text{low}}, 1+\epsilon_{\text{high}}))$,
and every valid token carries $\ell$; the loss minimised is $J = \sum_t c_t\ell$ for weights $c_t$.

**Region by region (claim SP1).** With $A > 0$ and $S > 1+\epsilon_{\text{high}}$, or $A < 0$ and
$S < 1-\epsilon_{\text{low}}$, the clipped branch is active: $\ell$ is the constant
$-A(1\pm\epsilon)$ and the gradient is 0. Otherwise $\ell = -A e^{\sum_t d_t}$ and, since
$\partial(\sum_t d_t)/\partial\log\pi_{t'} = 1$,

$$
\frac{\partial J}{\partial\log\pi_{t'}} = -A\,S\sum_t c_t \qquad\text{for every valid } t',
$$

GSPO's gradient without its $1/L$. At logp = logp_old ($S = 1$) this is the sequence's policy
gradient $-A\sum_t c_t$ at each valid token.

**Length (claim SP2).** For a constant per-token log-ratio $\delta$ the ratio is $S = e^{L\delta}$:
it leaves the clip range $[1-\epsilon_{\text{low}}, 1+\epsilon_{\text{high}}]$ once
$L|\delta|$ passes $\log(1+\epsilon_{\text{high}})$ (or $-\log(1-\epsilon_{\text{low}})$), so a long
sequence is clipped at per-token drifts $L$ times smaller than a one-token one. With $L = 1$ the
product and the geometric mean coincide, and so do the two losses.

The library checks evaluate `refimpl.losses.sequence_product` against these closed forms, computed
here from the log-ratios with `math` (not with refimpl), at points of every region.
"""

from __future__ import annotations

import math

import numpy as np
import sympy as sp

from proofs._framework import GENERAL, assert_close, assert_zero, claim
from refimpl.losses.sequence import gspo_loss
from refimpl.losses.sequence_product import sequence_ppo_clip_loss

L = 3
lp = sp.symbols(f"l0:{L}", real=True)
old = sp.symbols(f"o0:{L}", real=True)
cw = sp.symbols(f"c0:{L}", real=True)
A, eps = sp.symbols("A epsilon", real=True)
S = sp.exp(sp.Add(*(lp[t] - old[t] for t in range(L))))


def _closed(a: float, d: list[float], c: list[float], lo: float, hi: float) -> tuple[float, float]:
    """(loss per token, gradient per valid token) from the closed forms of SP1."""
    s = math.exp(sum(d))
    loss = max(-a * s, -a * min(max(s, 1 - lo), 1 + hi))
    clipped = (a > 0 and s > 1 + hi) or (a < 0 and s < 1 - lo)
    return loss, 0.0 if clipped else -a * s * sum(c)


@claim(
    "SP1",
    r"Region by region: with $A>0, S>1+\epsilon_{\text{high}}$ or $A<0, S<1-\epsilon_{\text{low}}$ "
    r"the loss is $-A(1\pm\epsilon)$ at every valid token and the gradient 0; otherwise the loss is "
    r"$-A S$ with $S = e^{\sum_t d_t}$ and the gradient $-A\,S\sum_t c_t$ at every valid token; "
    r"padding gets 0.",
    method="symbolic",
    scope="L = 3 tokens symbolic; library check at points of each region, with padding",
)
def gradient_by_region() -> None:
    j_unclipped = sp.Add(*(cw[t] * (-A * S) for t in range(L)))
    j_clipped = sp.Add(*(cw[t] * (-A * (1 + eps)) for t in range(L)))
    for j in range(L):
        assert_zero(sp.diff(j_unclipped, lp[j]) + A * S * sp.Add(*cw), label=f"SP1 live {j}")
        assert_zero(sp.diff(j_clipped, lp[j]), label=f"SP1 clipped {j}")
    lo, hi = 0.2, 0.3
    c = [0.5, 1.0, 2.0]
    for a in (1.5, -1.5, 0.0):
        for total in (-0.6, -0.1, 0.0, 0.1, 0.6):  # below, inside, on-policy, inside, above
            d = [total / 3 + 0.2, total / 3 - 0.5, total / 3 + 0.3]
            logp = np.array([[*d, 3.0, 3.0]])
            mask = np.array([[1.0, 1.0, 1.0, 0.0, 0.0]])
            cot = np.array([[*c, 7.0, 7.0]])
            terms = sequence_ppo_clip_loss(
                logp, np.zeros_like(logp), [a], eps_low=lo, eps_high=hi, mask=mask, cotangent=cot
            )
            value, grad = _closed(a, d, c, lo, hi)
            for t in range(L):
                assert_close(terms.loss[0, t], value, rel=1e-14, abs_=1e-15, label="SP1 loss")
                assert_close(terms.grad[0, t], grad, rel=1e-13, abs_=1e-15, label="SP1 grad")
            assert np.all(terms.loss[0, L:] == 0.0)
            assert np.all(terms.grad[0, L:] == 0.0)


@claim(
    "SP2",
    r"For a constant per-token log-ratio $\delta$ over $L$ tokens the ratio is $S = e^{L\delta}$ "
    r"(GSPO's stays $e^\delta$); with $L = 1$ the two surrogates coincide in value and gradient.",
    method="symbolic",
    scope=GENERAL,
)
def ratio_grows_with_length() -> None:
    delta = sp.symbols("delta", real=True)
    n = sp.symbols("n", positive=True, integer=True)
    product = sp.exp(sp.Sum(delta, (sp.Symbol("t", integer=True), 1, n)).doit())
    assert_zero(product - sp.exp(n * delta), label="SP2 product")
    assert_zero((product - sp.exp(n * delta / n)).subs(n, 1), label="SP2 one token")
    for length in range(1, 8):
        logp = np.full((1, length), 0.05)
        terms = sequence_ppo_clip_loss(logp, np.zeros_like(logp), [-1.0], eps_low=0.2)
        s = math.exp(0.05 * length)  # A < 0 and S > 1: unclipped
        assert_close(float(terms.loss[0, 0]), s, rel=1e-14, label="SP2 loss")
        assert_close(float(terms.grad[0, 0]), s * length, rel=1e-14, label="SP2 grad (Σc = L)")
    one = np.array([[0.1], [-0.4]])
    for a in (1.0, -1.0):
        ours = sequence_ppo_clip_loss(one, np.zeros_like(one), [a, a], eps_low=0.2)
        theirs = gspo_loss(one, np.zeros_like(one), [a, a], eps_low=0.2)
        assert np.array_equal(ours.loss, theirs.loss)
        assert np.array_equal(ours.grad, theirs.grad)
