r"""# Importance weights gated by the binary KL or total variation of the sampled token

Notation: for one token, $p = \mu(y)$ its probability under the behaviour (rollout) policy and
$q = \pi(y)$ under the trainer's; the two Bernoulli distributions (this token, any other) have

$$
D_{\text{KL}}(p\,\|\,q) = p\log\frac pq + (1-p)\log\frac{1-p}{1-q}, \qquad D_{\text{TV}} = |p - q|.
$$

**The binary KL is a trust region around $p$ (DG1).** $D_{\text{KL}}(p\,\|\,q) = 0$ at $q = p$,
$\partial D/\partial q = \frac{q - p}{q(1 - q)}$, so it decreases on $(0, p)$ and increases on
$(p, 1)$: the set $\{q : D \le \delta\}$ is an interval around $p$, and the gate keeps a token whose
trainer probability stayed within it, whichever the direction it moved. The second derivative at
$q = p$ is $\frac{1}{p(1-p)}$: near $p$, $D \approx \frac{(q-p)^2}{2p(1-p)}$, so the same radius
$\delta$ allows a larger move for a token of probability near $1/2$ than near 0 or 1.

**The gate keeps the ratio (DG2).** A kept token's weight is $\rho = q/p$ and a dropped one's is 0;
at $q = p$ both divergences are 0, so for any $\delta \ge 0$ the weight is 1. The check evaluates
`refimpl.losses.divergence_gated_weights` at exact dyadic probabilities against these values and
against $D$ computed here independently, token by token and as a row mean.
"""

from __future__ import annotations

import math

import numpy as np
import sympy as sp

from proofs._framework import GENERAL, assert_positive, assert_zero, claim
from refimpl.losses.divergence_gate import divergence_gated_weights

p, q = sp.symbols("p q", positive=True)


def _kl(pp: sp.Expr, qq: sp.Expr) -> sp.Expr:
    return pp * sp.log(pp / qq) + (1 - pp) * sp.log((1 - pp) / (1 - qq))


@claim(
    "DG1",
    r"The binary KL $D(p\,\|\,q)$ is 0 at $q = p$ with $\partial D/\partial q = "
    r"(q - p)/(q(1-q))$ and $\partial^2 D/\partial q^2 = 1/(p(1-p))$ there: the gate "
    r"$D \le \delta$ is an interval of $q$ around $p$.",
    scope=GENERAL,
)
def binary_kl_is_a_region_around_p() -> None:
    d = _kl(p, q)
    assert_zero(d.subs(q, p), label="DG1 zero at q = p")
    assert_zero(sp.diff(d, q) - (q - p) / (q * (1 - q)), label="DG1 derivative")
    assert_zero(sp.diff(d, q, 2).subs(q, p) - 1 / (p * (1 - p)), label="DG1 curvature")
    # the sign of the derivative is the sign of q − p on (0, 1): q(1 − q) > 0 there
    s = sp.symbols("s", positive=True)
    assert_positive((q * (1 - q)).subs(q, s / (1 + s)), label="DG1 q(1 - q) > 0 on (0, 1)")


@claim(
    "DG2",
    r"A token (or row, by its mean divergence) within $\delta$ keeps $\rho = q/p$, one beyond "
    r"it gets 0, and $q = p$ always gets 1; refimpl matches at dyadic probabilities.",
    method="exact",
    scope="one 2 × 3 batch of dyadic probabilities, both divergences, token and sequence level",
)
def gate_keeps_the_ratio() -> None:
    mu = [[0.5, 0.25, 0.75], [0.5, 0.5, 0.125]]
    pi = [[0.5, 0.5, 0.5], [0.25, 0.5, 0.125]]
    lb, lt = np.log(mu), np.log(pi)
    for kind in ("tv", "binary_kl"):
        div = [
            [
                abs(a - b) if kind == "tv" else float(_kl(sp.Rational(a), sp.Rational(b)))
                for a, b in zip(ra, rb, strict=True)
            ]
            for ra, rb in zip(mu, pi, strict=True)
        ]
        for delta in (0.0, 0.2, 0.3):
            got = divergence_gated_weights(lt, lb, delta=delta, divergence=kind)
            for i in range(2):
                for j in range(3):
                    want = pi[i][j] / mu[i][j] if div[i][j] <= delta else 0.0
                    assert math.isclose(got[i, j], want, rel_tol=1e-15), (kind, delta, i, j)
            seq = divergence_gated_weights(lt, lb, delta=delta, divergence=kind, level="sequence")
            for i in range(2):
                keep = sum(div[i]) / 3 <= delta
                for j in range(3):
                    want = pi[i][j] / mu[i][j] if keep else 0.0
                    assert math.isclose(seq[i, j], want, rel_tol=1e-15), (kind, delta, i, "seq")
    same = divergence_gated_weights(lb, lb, delta=0.0, divergence="binary_kl")
    assert same.tolist() == [[1.0] * 3] * 2, "DG2 q = p"
