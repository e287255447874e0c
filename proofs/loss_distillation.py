r"""# On-policy distillation: the reverse KL to a teacher as a detached reward

Notation for one token: $l = \log\pi_\theta(y)$ is what the gradient is taken with respect to,
$l_o$ the log-probability of the policy that sampled the token and $l_T$ the teacher's (both
fixed), $\rho = e^{l - l_o}$. The loss is minimised; $\mathrm{sg}[x]$ contributes its value and
no derivative.

**The score function of the reverse KL (DS1).** The loss $\ell = -\rho\,\mathrm{sg}[l_T - l]$
is the importance-weighted policy gradient with the reward $l_T - l$: its derivative is
$\rho\,(l - l_T)$, the ratio's alone. On-policy ($\rho = 1$) the gradient at each sampled token
is the k1 estimate $l - l_T$ of the reverse KL, and its expectation over $y \sim \pi_\theta$ is
the gradient of $\mathrm{KL}(\pi_\theta\,\|\,\pi_T)$: for a categorical $\pi = \mathrm{softmax}(z)$,
$\partial\,\mathrm{KL}/\partial z_j = \pi_j(\log\frac{\pi_j}{q_j} - \mathrm{KL})$, and
$\mathbb E_{y\sim\pi}[(\log\frac{\pi_y}{q_y})\,\partial\log\pi_y/\partial z_j]
= \sum_y \pi_y\log\frac{\pi_y}{q_y}(\mathbb 1[y = j] - \pi_j)$ is the same expression. The k1
penalty $l - l_T$ differentiated directly has derivative 1 at every token instead: its expected
gradient, $\mathbb E_\pi[\partial\log\pi_y/\partial z_j] = 0$, carries no signal.

The checks prove the identity symbolically for three categories and evaluate
`refimpl.losses.reverse_kl_distillation_loss` at points where the expected values are computed
here independently (`refimpl.kl_penalty`'s k1 value on-policy, the ratio from the definition).
"""

from __future__ import annotations

import math

import sympy as sp

from proofs._framework import GENERAL, assert_close, assert_zero, claim
from refimpl.losses.distillation import reverse_kl_distillation_loss
from refimpl.losses.kl import kl_penalty

lg, lo, lt = sp.symbols("l l_o l_T", real=True)


def _categorical_gradients() -> tuple[list[sp.Expr], list[sp.Expr]]:
    """(∂KL/∂z_j, E[k1·∂log π/∂z_j]) for π = softmax(z) over three categories, teacher q."""
    z = sp.symbols("z0:3", real=True)
    q = sp.symbols("q0:3", positive=True)
    norm = sum(sp.exp(zi) for zi in z)
    pi = [sp.exp(zi) / norm for zi in z]
    kl = sum(p * (sp.log(p) - sp.log(qi)) for p, qi in zip(pi, q, strict=True))
    exact = [sp.diff(kl, zj) for zj in z]
    score = [
        sum(pi[y] * (sp.log(pi[y]) - sp.log(q[y])) * sp.diff(sp.log(pi[y]), z[j]) for y in range(3))
        for j in range(3)
    ]
    return exact, score


@claim(
    "DS1",
    r"Distillation with the reward $\mathrm{sg}[l_T - l]$: the derivative of "
    r"$-\rho\,\mathrm{sg}[l_T - l]$ is $\rho(l - l_T)$; on-policy its expectation is the gradient "
    r"of $\mathrm{KL}(\pi_\theta\,\|\,\pi_T)$ (three categories, symbolic); refimpl's gradient is "
    r"the k1 value on-policy and $\rho$ times it off-policy.",
    scope=GENERAL,
)
def distillation_is_the_reverse_kl_score_function() -> None:
    w = sp.Symbol("w", real=True)  # the detached reward held fixed while differentiating
    loss = -sp.exp(lg - lo) * w
    assert_zero(sp.diff(loss, lg).subs(w, lt - lg) - sp.exp(lg - lo) * (lg - lt), label="DS1")
    exact, score = _categorical_gradients()
    for j in range(3):
        assert_zero(sp.expand_log(exact[j] - score[j], force=True), label=f"DS1 categorical {j}")
    logp = [[-0.5, -2.0, -1.25]]
    teacher = [[-1.5, -0.25, -1.25]]
    on = reverse_kl_distillation_loss(logp, logp, teacher)
    k1 = kl_penalty(logp, teacher, estimator="k1")
    assert on.grad.tolist() == k1.loss.tolist(), "DS1 on-policy gradient is the k1 value"
    old = [[x - math.log(2.0) for x in logp[0]]]  # ρ = 2
    off = reverse_kl_distillation_loss(logp, old, teacher)
    for t in range(3):
        want = 2.0 * (logp[0][t] - teacher[0][t])
        assert_close(float(off.grad[0, t]), want, rel=4e-16, label=f"DS1 off-policy {t}")
        assert_close(float(off.loss[0, t]), want, rel=4e-16, label=f"DS1 value {t}")
