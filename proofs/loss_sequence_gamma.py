r"""# VESPO's gamma-kernel weight

VESPO weights the policy gradient of a sequence by a kernel of its importance weight
$w = \exp(\sum_t d_t)$, $d_t = \log\pi_t - \log\pi^{\text{old}}_t$ (a sum: no length
normalisation),

$$
\phi(w) = e^{\lambda}\,w^{k}\,e^{-\lambda w}, \qquad
\ell_t = -\mathrm{sg}[\phi(w)]\,A_t\log\pi_t,
$$

with $(k, \lambda)$ chosen by the sign of the advantage.

**The kernel (claim VS1).** $\log\phi = \lambda + k\log w - \lambda w$, so $\phi(1) = 1$ (on-policy,
the weight is 1 and the gradient is the policy gradient $-c_tA_t$), and
$\frac{d\log\phi}{d\log w} = k - \lambda w$ vanishes at $w = k/\lambda$, where $\phi$ is largest
(the second derivative, $-\lambda w$, is negative). The weight is detached, so
$\partial J/\partial\log\pi_{t'} = -c_{t'}\,\phi\,A_{t'}$ with no coupling across tokens.

The library check compares `refimpl.losses.sequence_gamma` with $\phi$ evaluated here with `math`.
"""

from __future__ import annotations

import math

import numpy as np
import sympy as sp

from proofs._framework import GENERAL, assert_close, assert_positive, assert_zero, claim
from refimpl.losses.sequence_gamma import vespo_loss


@claim(
    "VS1",
    r"$\phi(w) = e^{\lambda}w^ke^{-\lambda w}$ has $\phi(1) = 1$ and its maximum at "
    r"$w = k/\lambda$; VESPO's gradient is $-c_t\,\phi\,A_t$ (the weight detached).",
    method="symbolic",
    scope=GENERAL,
)
def gamma_kernel() -> None:
    w, k, lam = sp.symbols("w k lambda", positive=True)
    log_phi = lam + k * sp.log(w) - lam * w
    assert_zero(sp.exp(log_phi.subs(w, 1)) - 1, label="VS1 phi(1)")
    slope = sp.diff(log_phi, w) * w  # d log φ / d log w
    assert_zero(slope - (k - lam * w), label="VS1 slope")
    assert_zero(slope.subs(w, k / lam), label="VS1 peak")
    assert_positive(-sp.diff(slope, w) * w, label="VS1 concave in log w")
    lp = np.array([[-0.5, -1.0, -0.25, 4.0]])
    old = np.array([[-0.75, -0.5, -0.75, 0.0]])
    mask = np.array([[1.0, 1.0, 1.0, 0.0]])
    cot = np.array([[0.5, 1.0, 2.0, 9.0]])
    for a, (kk, ll) in ((1.5, (2.0, 3.0)), (-0.5, (3.0, 2.0))):
        terms = vespo_loss(lp, old, [a], mask=mask, cotangent=cot)
        log_w = 0.25 - 0.5 + 0.5  # w = e^{1/4}
        phi = math.exp(ll + kk * log_w - ll * math.exp(log_w))
        for t in range(3):
            assert_close(terms.grad[0, t], -cot[0, t] * phi * a, rel=1e-14, label="VS1 grad")
        assert terms.grad[0, 3] == 0.0
