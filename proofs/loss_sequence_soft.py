r"""# CISPO and SAPO with the sequence ratio, and their gradients

Write $d_t = \log\pi_t - \log\pi^{\text{old}}_t$ for the $L$ valid tokens of one sequence and
$s = \exp(\frac1L\sum_t d_t)$ for GSPO's sequence ratio (the geometric mean of the token ratios).
TRL's `importance_sampling_level="sequence"` puts $s$ in place of each token's ratio before the
loss type is applied. The loss minimised is $J = \sum_t c_t\ell_t$.

**CISPO (claim SS1).** $\ell_t = -\mathrm{sg}[w]\,A_t\log\pi_t$ with $w = \min(s, 1+\epsilon_{\text{high}})$.
The stop-gradient makes $w$ a constant for differentiation, so
$\partial J/\partial\log\pi_{t'} = -c_{t'}\,w\,A_{t'}$: no coupling across the tokens, and at
$s = 1$ the token-level policy gradient $-c_{t'}A_{t'}$. Without the stop-gradient the gradient
would gain $-\frac{s}{L}\sum_t c_tA_t\log\pi_t$ at every token where $w = s$.

**SAPO (claim SS2).** $\ell_t = -A_t\frac{4}{\tau_t}\sigma(\tau_t(s - 1))$ is differentiated
through $s$, with $\partial s/\partial\log\pi_{t'} = s/L$ and $\sigma' = \sigma(1-\sigma)$:

$$
\frac{\partial J}{\partial\log\pi_{t'}} = -\frac{s}{L}\sum_t c_t A_t\,4\sigma(x_t)\sigma(-x_t),
\qquad x_t = \tau_t(s - 1),
$$

the same at every valid token; at $s = 1$, $4\sigma(0)^2 = 1$ and it is
$-\frac1L\sum_t c_tA_t$.

The library checks compare `refimpl.losses.sequence_soft` with these closed forms, evaluated here
with `math` at points on both sides of the cap and of 1.
"""

from __future__ import annotations

import math

import numpy as np
import sympy as sp

from proofs._framework import assert_close, assert_zero, claim
from refimpl.losses.sequence_soft import cispo_sequence_loss, sapo_sequence_loss

L = 3
lp = sp.symbols(f"l0:{L}", real=True)
old = sp.symbols(f"o0:{L}", real=True)
cw = sp.symbols(f"c0:{L}", real=True)
adv = sp.symbols(f"A0:{L}", real=True)
tau = sp.symbols(f"tau0:{L}", positive=True)
W = sp.symbols("W", positive=True)  # the value of sg[w]
S = sp.exp(sp.Add(*(lp[t] - old[t] for t in range(L))) / L)


def _point(d: list[float], pad: int = 2) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    logp = np.array([[*[v - 1.0 for v in d], 2.0] + [5.0] * (pad - 1)])
    old_ = np.array([[-1.0] * len(d) + [-4.0] * pad])
    mask = np.array([[1.0] * len(d) + [0.0] * pad])
    return logp, old_, mask


@claim(
    "SS1",
    r"Sequence-level CISPO: $\partial J/\partial\log\pi_{t'} = -c_{t'}\,w\,A_{t'}$ with "
    r"$w = \min(s, 1+\epsilon_{\text{high}})$ detached; with the weight not detached the "
    r"gradient gains $-\frac{s}{L}\sum_t c_tA_t\log\pi_t$ where $w = s$.",
    method="symbolic",
    scope="L = 3 tokens symbolic; library check below, at and above the cap, with padding",
)
def cispo_sequence_gradient() -> None:
    j_detached = sp.Add(*(cw[t] * (-W * adv[t] * lp[t]) for t in range(L)))
    j_live = sp.Add(*(cw[t] * (-S * adv[t] * lp[t]) for t in range(L)))
    extra = -S / L * sp.Add(*(cw[t] * adv[t] * lp[t] for t in range(L)))
    for j in range(L):
        assert_zero(sp.diff(j_detached, lp[j]) + cw[j] * W * adv[j], label=f"SS1 detached {j}")
        g_live = sp.diff(j_live, lp[j])
        assert_zero(g_live - (-cw[j] * S * adv[j]) - extra, label=f"SS1 not detached {j}")
    c = [0.5, 1.0, 2.0]
    a = [1.5, -0.5, 2.0]
    for mean in (-0.3, 0.0, 0.2, math.log(1.28), 0.6):
        d = [mean + 0.1, mean - 0.3, mean + 0.2]
        logp, old_, mask = _point(d)
        terms = cispo_sequence_loss(
            logp, old_, np.array([[*a, 9.0, 9.0]]), eps_high=0.28, mask=mask,
            cotangent=np.array([[*c, 7.0, 7.0]]),
        )  # fmt: skip
        w = min(math.exp(sum(d) / L), 1.28)
        for t in range(L):
            assert_close(terms.grad[0, t], -c[t] * w * a[t], rel=1e-13, label="SS1 grad")
            assert_close(terms.loss[0, t], -w * a[t] * logp[0, t], rel=1e-13, label="SS1 loss")
        assert np.all(terms.grad[0, L:] == 0.0)
        assert np.all(terms.loss[0, L:] == 0.0)


@claim(
    "SS2",
    r"Sequence-level SAPO: every valid token gets "
    r"$-\frac{s}{L}\sum_t c_tA_t\,4\sigma(x_t)\sigma(-x_t)$, $x_t = \tau_t(s-1)$; at $s = 1$ this "
    r"is $-\frac1L\sum_t c_tA_t$.",
    method="symbolic",
    scope="L = 3 tokens symbolic; library check at points below, at and above s = 1",
)
def sapo_sequence_gradient() -> None:
    x = [tau[t] * (S - 1) for t in range(L)]
    j = sp.Add(*(cw[t] * (-adv[t] * 4 / tau[t] * (1 / (1 + sp.exp(-x[t])))) for t in range(L)))

    def sig(v: sp.Expr) -> sp.Expr:
        return 1 / (1 + sp.exp(-v))

    closed = -S / L * sp.Add(*(cw[t] * adv[t] * 4 * sig(x[t]) * sig(-x[t]) for t in range(L)))
    for k in range(L):
        assert_zero(sp.diff(j, lp[k]) - closed, label=f"SS2 {k}")
    at_one = closed.subs({lp[t]: old[t] for t in range(L)})
    assert_zero(at_one + sp.Add(*(cw[t] * adv[t] for t in range(L))) / L, label="SS2 at s = 1")
    c = [0.5, 1.0, 2.0]
    a = [1.5, -0.5, 2.0]
    taus = {True: 1.0, False: 1.05}
    for mean in (-0.4, 0.0, 0.3, 1.5):
        d = [mean + 0.1, mean - 0.3, mean + 0.2]
        logp, old_, mask = _point(d)
        terms = sapo_sequence_loss(
            logp, old_, np.array([[*a, 9.0, 9.0]]), tau_pos=1.0, tau_neg=1.05, mask=mask,
            cotangent=np.array([[*c, 7.0, 7.0]]),
        )  # fmt: skip
        s = math.exp(sum(d) / L)
        total = 0.0
        for t in range(L):
            xt = taus[a[t] > 0] * (s - 1.0)
            sg = 1 / (1 + math.exp(-xt))
            total += c[t] * a[t] * 4 * sg * (1 - sg)
            value = -a[t] * 4 / taus[a[t] > 0] * sg
            assert_close(terms.loss[0, t], value, rel=1e-13, label="SS2 loss")
        for t in range(L):
            assert_close(terms.grad[0, t], -s / L * total, rel=1e-12, label="SS2 grad")
        assert np.all(terms.grad[0, L:] == 0.0)
