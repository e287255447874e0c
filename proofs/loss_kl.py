r"""# KL estimators: what each one estimates, under which sampling, and what its gradient is

Take a finite vocabulary of $K = 3$ tokens, a current policy $\pi = \pi_\theta$ given by logits
$\theta$ ($\pi_a = e^{\theta_a}/\sum_b e^{\theta_b}$), a reference policy $r = \pi_{\text{ref}}$ and,
off-policy, a behaviour policy $\mu$ that sampled the tokens. At a sampled token $a$ the frameworks
compute the log-ratio $d_a = \log\pi_a - \log r_a$ and one of

$$
k_1 = d, \qquad k_2 = \tfrac12 d^2, \qquad k_3 = e^{-d} + d - 1 = \rho - \log\rho - 1,
\quad \rho = r_a/\pi_a .
$$

**What the values estimate (samples from $\pi_\theta$).** Summing over the vocabulary,
$\mathbb{E}_\pi[k_1] = \sum_a \pi_a\log(\pi_a/r_a) = \mathrm{KL}(\pi_\theta\,\|\,\pi_{\text{ref}})$, the
*reverse* KL (claim KL1), and
$\mathbb{E}_\pi[k_3] = \sum_a r_a - \sum_a\pi_a\log(r_a/\pi_a) - 1 = \mathrm{KL}(\pi_\theta\,\|\,\pi_{\text{ref}})$
because $\sum_a r_a = 1$ (claim KL2). So both are unbiased for the KL *from the sampling policy to
the reference*; $k_3$ is moreover non-negative token by token ($\rho - \log\rho - 1 \ge 0$).
$\mathbb{E}_\pi[k_2] = \tfrac12\sum_a\pi_a\log^2(\pi_a/r_a)$ is not a KL: writing $r = \pi + t\delta$
with $\sum_a\delta_a = 0$, both it and the KL equal $\tfrac{t^2}{2}\sum_a\delta_a^2/\pi_a + O(t^3)$
and their $t^3$ coefficients differ (claim KL3).

**What the gradients estimate.** A framework differentiates the per-sample loss $k(a)$ and averages
over samples drawn before the update, i.e. it computes $\mathbb{E}_\pi[\nabla_\theta k(a)]$ with the
sampling distribution held fixed. With $\nabla_\theta\log\pi_a = e_a - \pi$:

- $k_2$: $\nabla k_2(a) = d_a\,\nabla\log\pi_a$, and
  $\sum_a \pi_a d_a(e_a - \pi) = \nabla_\theta \mathrm{KL}(\pi_\theta\,\|\,\pi_{\text{ref}})$, the
  gradient of the reverse KL (claim KL4); the straight-through estimators `k1+`, `k3+` share this
  gradient by construction;
- $k_3$: $\nabla k_3(a) = (1 - r_a/\pi_a)\nabla\log\pi_a$ and
  $\sum_a(\pi_a - r_a)(e_a - \pi) = \pi - r = \nabla_\theta \mathrm{KL}(\pi_{\text{ref}}\,\|\,\pi_\theta)$:
  the gradient of the **forward** KL, not of the KL its value estimates (claim KL5); the two
  differ by $\nabla\mathrm{KL}(\pi\|r) - (\pi - r)$, not zero in general;
- $k_1$: $\mathbb{E}_\pi[\nabla\log\pi_a] = \sum_a \pi_a(e_a - \pi) = 0$: no expected gradient at
  all (claim KL6).

**Off-policy.** If the tokens come from $\mu \ne \pi_\theta$, the plain estimators estimate
$\sum_a\mu_a k(a)$, which is not $\mathrm{KL}(\pi_\theta\|\pi_{\text{ref}})$. With the importance
weight $w_a = \pi_a/\mu_a$, $\mathbb{E}_\mu[w\,k] = \mathbb{E}_\pi[k]$ for every $k$, so weighted $k_1$
and $k_3$ are unbiased for $\mathrm{KL}(\pi_\theta\|\pi_{\text{ref}})$ (claim KL7). For the gradient,
$\mathbb{E}_\mu[\mathrm{sg}[w]\,\nabla k_2] = \mathbb{E}_\pi[d\,\nabla\log\pi]$, the reverse-KL
gradient; the same holds for $k_3$ times a *differentiable* weight (TRL's bias-corrected KL), since
$\nabla(w k_3) = w(k_3 + 1 - e^{-d})\nabla\log\pi = w\,d\,\nabla\log\pi$; with a *detached*
weight, $k_3$ again gives the forward-KL gradient (claim KL8).

Each claim also evaluates `refimpl.losses.kl.kl_penalty` or `importance_weighted_kl` on a
vocabulary of one-token sequences (one row per token $a$, cotangent $\pi_a$ or $\mu_a$) and compares
the enumerated expectation with the closed form, evaluated to 50 digits.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Literal

import numpy as np
import sympy as sp

from proofs._framework import GENERAL, assert_close, assert_zero, claim
from refimpl.losses.kl import importance_weighted_kl, kl_penalty

Weighting = Literal["detached", "differentiable", "gradient_only"]

K = 3
theta = sp.symbols(f"theta0:{K}", real=True)
r_free = sp.symbols(f"r0:{K}", positive=True)
p_free = sp.symbols(f"p0:{K}", positive=True)
_Z = sp.Add(*(sp.exp(x) for x in theta))
PI = [sp.exp(x) / _Z for x in theta]  # softmax policy
LOG_PI = [x - sp.log(_Z) for x in theta]
R_SUM1 = {r_free[K - 1]: 1 - sp.Add(*r_free[: K - 1])}  # the reference sums to 1
P_SUM1 = {p_free[K - 1]: 1 - sp.Add(*p_free[: K - 1])}

#: Exact instances (current, reference, behaviour) over the 3 tokens.
INSTANCES: list[tuple[list[Fraction], list[Fraction], list[Fraction]]] = [
    (
        [Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)],
        [Fraction(1, 5), Fraction(1, 5), Fraction(3, 5)],
        [Fraction(1, 4), Fraction(1, 2), Fraction(1, 4)],
    ),
    (
        [Fraction(1, 10), Fraction(7, 10), Fraction(1, 5)],
        [Fraction(1, 3), Fraction(1, 3), Fraction(1, 3)],
        [Fraction(3, 8), Fraction(3, 8), Fraction(1, 4)],
    ),
]


def _logs(p: list[Fraction]) -> np.ndarray:
    """The log-probabilities as a (K, 1) batch: one one-token sequence per token."""
    return np.asarray(np.log(np.array([float(x) for x in p]))[:, None])


def _exact_kl(p: list[Fraction], q: list[Fraction]) -> sp.Expr:
    return sp.Add(
        *(
            sp.Rational(a) * sp.log(sp.Rational(a) / sp.Rational(b))
            for a, b in zip(p, q, strict=True)
        )
    )


def _n(expr: sp.Expr) -> float:
    return float(sp.N(expr, 50))


def _cot(p: list[Fraction]) -> np.ndarray:
    return np.array([float(x) for x in p])[:, None]


def _softmax_grad(per_token: np.ndarray, p: list[Fraction]) -> np.ndarray:
    """``Σ_a g_a (e_a − π)``: a gradient in log π_a per token, carried to the logits."""
    pi = np.array([float(x) for x in p])
    g = per_token[:, 0]
    return np.asarray(g - g.sum() * pi)


def _grad_reverse_kl(p: list[Fraction], q: list[Fraction]) -> list[float]:
    """∇_θ KL(π_θ‖r) at π = p (closed form by SymPy, then evaluated)."""
    kl = sp.Add(*(PI[a] * (LOG_PI[a] - sp.log(r_free[a])) for a in range(K)))
    subs = {**{theta[a]: sp.log(sp.Rational(p[a])) for a in range(K)}}
    subs.update({r_free[a]: sp.Rational(q[a]) for a in range(K)})
    return [_n(sp.diff(kl, theta[j]).subs(subs)) for j in range(K)]


@claim(
    "KL1",
    r"Samples from $\pi_\theta$: $\mathbb{E}_{\pi_\theta}[k_1] = \mathrm{KL}(\pi_\theta\,\|\,"
    r"\pi_{\text{ref}})$ with $k_1 = \log\pi_\theta - \log\pi_{\text{ref}}$ (the reverse KL, "
    r"from the sampling policy to the reference).",
    method="symbolic",
    scope="3 tokens, symbolic probabilities; library check on 2 exact instances",
)
def k1_is_unbiased_for_reverse_kl() -> None:
    p, r = p_free, r_free
    estimate = sp.Add(*(p[a] * (sp.log(p[a]) - sp.log(r[a])) for a in range(K)))
    kl = sp.Add(*(p[a] * sp.log(p[a] / r[a]) for a in range(K)))
    assert_zero(sp.expand_log(estimate - kl, force=True), label="KL1")
    for pi, ref, _ in INSTANCES:
        terms = kl_penalty(_logs(pi), _logs(ref), estimator="k1", cotangent=_cot(pi))
        found = float(np.sum(_cot(pi) * terms.loss))
        assert_close(found, _n(_exact_kl(pi, ref)), rel=1e-13, label="KL1 refimpl")


@claim(
    "KL2",
    r"Samples from $\pi_\theta$: $\mathbb{E}_{\pi_\theta}[k_3] = \mathrm{KL}(\pi_\theta\,\|\,"
    r"\pi_{\text{ref}})$ with $k_3 = \rho - \log\rho - 1$, $\rho = \pi_{\text{ref}}/\pi_\theta$ "
    r"(uses $\sum_a \pi_{\text{ref}}(a) = 1$); each term is $\ge 0$.",
    method="symbolic",
    scope="3 tokens, symbolic probabilities; library check on 2 exact instances",
)
def k3_is_unbiased_for_reverse_kl() -> None:
    p, r = p_free, r_free
    estimate = sp.Add(*(p[a] * (r[a] / p[a] - sp.log(r[a] / p[a]) - 1) for a in range(K)))
    kl = sp.Add(*(p[a] * sp.log(p[a] / r[a]) for a in range(K)))
    diff = sp.expand_log(estimate - kl, force=True).subs(R_SUM1).subs(P_SUM1)
    assert_zero(diff, label="KL2")
    for pi, ref, _ in INSTANCES:
        terms = kl_penalty(_logs(pi), _logs(ref), estimator="k3")
        assert np.all(terms.loss >= 0.0)
        found = float(np.sum(_cot(pi) * terms.loss))
        assert_close(found, _n(_exact_kl(pi, ref)), rel=1e-13, label="KL2 refimpl")


@claim(
    "KL3",
    r"$\mathbb{E}_{\pi_\theta}[k_2]$ with $k_2 = \frac12(\log\pi_\theta - \log\pi_{\text{ref}})^2$ "
    r"agrees with $\mathrm{KL}(\pi_\theta\|\pi_{\text{ref}})$ to second order in the distance "
    r"($\pi_{\text{ref}} = \pi_\theta + t\delta$, $\sum\delta = 0$: equal coefficients of $t^0, t^1, "
    r"t^2$) but not at third order, so it is biased.",
    method="symbolic",
    scope="3 tokens, symbolic probabilities and direction; library check on 2 exact instances",
)
def k2_is_second_order_only() -> None:
    t = sp.symbols("t", real=True)
    delta = sp.symbols(f"delta0:{K}", real=True)
    p = [p_free[0], p_free[1], 1 - p_free[0] - p_free[1]]
    dl = [delta[0], delta[1], -delta[0] - delta[1]]
    e_k2 = sp.Add(*(p[a] * sp.log(1 + t * dl[a] / p[a]) ** 2 / 2 for a in range(K)))
    kl = sp.Add(*(-p[a] * sp.log(1 + t * dl[a] / p[a]) for a in range(K)))
    gap = sp.series(e_k2 - kl, t, 0, 4).removeO()
    for order in range(3):
        assert_zero(gap.coeff(t, order), label=f"KL3 order {order}")
    second = sp.series(kl, t, 0, 3).removeO().coeff(t, 2)
    assert_zero(second - sp.Add(*(dl[a] ** 2 / p[a] for a in range(K))) / 2, label="KL3 t^2")
    third = sp.simplify(gap.coeff(t, 3))
    assert third != 0, "KL3: k2 would agree with the KL at third order"
    for pi, ref, _ in INSTANCES:
        terms = kl_penalty(_logs(pi), _logs(ref), estimator="k2", cotangent=_cot(pi))
        exact = sp.Add(
            *(
                sp.Rational(a) * sp.log(sp.Rational(a) / sp.Rational(b)) ** 2 / 2
                for a, b in zip(pi, ref, strict=True)
            )
        )
        found = float(np.sum(_cot(pi) * terms.loss))
        assert_close(found, _n(exact), rel=1e-13, label="KL3 refimpl")
        assert abs(found - _n(_exact_kl(pi, ref))) > 1e-3, "KL3: this instance should show bias"


def _expected_grad(per_token_dk: list[sp.Expr], weights: list[sp.Expr]) -> list[sp.Expr]:
    """``Σ_a weights_a · dk_a · ∂ log π_a/∂θ_j`` for each logit j."""
    return [
        sp.Add(*(weights[a] * per_token_dk[a] * sp.diff(LOG_PI[a], theta[j]) for a in range(K)))
        for j in range(K)
    ]


def _check_grads(found: np.ndarray, expected: list[float], label: str) -> None:
    for j in range(K):
        assert_close(float(found[j]), expected[j], rel=1e-12, abs_=1e-14, label=f"{label}[{j}]")


@claim(
    "KL4",
    r"Samples from $\pi_\theta$, sampling held fixed: $\mathbb{E}_{\pi_\theta}[\nabla_\theta k_2] = "
    r"\nabla_\theta\mathrm{KL}(\pi_\theta\,\|\,\pi_{\text{ref}})$ (softmax logits); the straight-"
    r"through `k3+` and `k1+` have the same gradient and keep the value of $k_3$, $k_1$.",
    method="symbolic",
    scope="3 tokens, softmax logits, symbolic reference; library check on 2 exact instances",
)
def k2_gradient_is_reverse_kl_gradient() -> None:
    d = [LOG_PI[a] - sp.log(r_free[a]) for a in range(K)]
    kl = sp.Add(*(PI[a] * d[a] for a in range(K)))
    expected = _expected_grad(d, PI)
    for j in range(K):
        assert_zero(sp.diff(kl, theta[j]) - expected[j], label=f"KL4 logit {j}")
    for pi, ref, _ in INSTANCES:
        target = _grad_reverse_kl(pi, ref)
        for est in ("k2", "k3+", "k1+", "low_var_kl+"):
            terms = kl_penalty(_logs(pi), _logs(ref), estimator=est, cotangent=_cot(pi))
            _check_grads(_softmax_grad(terms.grad, pi), target, f"KL4 refimpl {est}")
        plain = kl_penalty(_logs(pi), _logs(ref), estimator="k3")
        straight = kl_penalty(_logs(pi), _logs(ref), estimator="k3+")
        assert np.array_equal(plain.loss, straight.loss), "KL4: k3+ keeps k3's value"


@claim(
    "KL5",
    r"Samples from $\pi_\theta$, sampling held fixed: $\mathbb{E}_{\pi_\theta}[\nabla_\theta k_3] = "
    r"\pi_\theta - \pi_{\text{ref}} = \nabla_\theta\mathrm{KL}(\pi_{\text{ref}}\,\|\,\pi_\theta)$, the "
    r"gradient of the forward KL, which differs from the reverse-KL gradient of KL4.",
    method="symbolic",
    scope="3 tokens, softmax logits, symbolic reference summing to 1; library check on 2 exact "
    "instances",
)
def k3_gradient_is_forward_kl_gradient() -> None:
    dk3 = [1 - r_free[a] / PI[a] for a in range(K)]
    expected = _expected_grad(dk3, PI)
    forward = sp.Add(*(r_free[a] * (sp.log(r_free[a]) - LOG_PI[a]) for a in range(K)))
    for j in range(K):
        assert_zero((sp.diff(forward, theta[j]) - expected[j]).subs(R_SUM1), label=f"KL5 {j}")
        assert_zero((expected[j] - (PI[j] - r_free[j])).subs(R_SUM1), label=f"KL5 closed {j}")
    for pi, ref, _ in INSTANCES:
        terms = kl_penalty(_logs(pi), _logs(ref), estimator="k3", cotangent=_cot(pi))
        found = _softmax_grad(terms.grad, pi)
        _check_grads(found, [float(a - b) for a, b in zip(pi, ref, strict=True)], "KL5 refimpl")
        reverse = _grad_reverse_kl(pi, ref)
        assert max(abs(found[j] - reverse[j]) for j in range(K)) > 1e-3, "KL5: should differ"


@claim(
    "KL6",
    r"Samples from $\pi_\theta$: $\mathbb{E}_{\pi_\theta}[\nabla_\theta k_1] = "
    r"\mathbb{E}_{\pi_\theta}[\nabla_\theta\log\pi_\theta] = 0$: $k_1$ as a loss has no expected "
    r"gradient.",
    method="symbolic",
    scope=GENERAL,
)
def k1_gradient_vanishes() -> None:
    expected = _expected_grad([sp.Integer(1)] * K, PI)
    for j in range(K):
        assert_zero(expected[j], label=f"KL6 {j}")
    for pi, ref, _ in INSTANCES:
        terms = kl_penalty(_logs(pi), _logs(ref), estimator="k1", cotangent=_cot(pi))
        _check_grads(_softmax_grad(terms.grad, pi), [0.0] * K, "KL6 refimpl")


@claim(
    "KL7",
    r"Samples from $\mu$: $\mathbb{E}_\mu[w\,k] = \mathbb{E}_{\pi_\theta}[k]$ with "
    r"$w = \pi_\theta/\mu$ for every per-token $k$, so the weighted $k_1$ and $k_3$ are unbiased "
    r"for $\mathrm{KL}(\pi_\theta\,\|\,\pi_{\text{ref}})$; unweighted they estimate "
    r"$\sum_a\mu_a k(a)$, which is not that KL.",
    method="symbolic",
    scope="3 tokens, symbolic probabilities and values; library check on 2 exact instances",
)
def importance_weighted_value() -> None:
    mu = sp.symbols(f"mu0:{K}", positive=True)
    k = sp.symbols(f"k0:{K}", real=True)
    weighted = sp.Add(*(mu[a] * (p_free[a] / mu[a]) * k[a] for a in range(K)))
    assert_zero(weighted - sp.Add(*(p_free[a] * k[a] for a in range(K))), label="KL7")
    for pi, ref, beh in INSTANCES:
        target = _n(_exact_kl(pi, ref))
        for est in ("k1", "k3"):
            terms = importance_weighted_kl(
                _logs(pi), _logs(ref), _logs(beh), estimator=est, cotangent=_cot(beh)
            )
            assert_close(float(np.sum(_cot(beh) * terms.loss)), target, rel=1e-13, label="KL7")
        plain = kl_penalty(_logs(pi), _logs(ref), estimator="k3")
        off = float(np.sum(_cot(beh) * plain.loss))
        assert abs(off - target) > 1e-3, "KL7: unweighted k3 off-policy should be biased here"


@claim(
    "KL8",
    r"Samples from $\mu$, sampling held fixed: $\mathbb{E}_\mu[\mathrm{sg}[w]\nabla k_2] = "
    r"\mathbb{E}_\mu[\nabla(w\,k_3)] = \nabla_\theta\mathrm{KL}(\pi_\theta\,\|\,\pi_{\text{ref}})$ "
    r"(detached weight with $k_2$; differentiable weight with $k_3$), while "
    r"$\mathbb{E}_\mu[\mathrm{sg}[w]\nabla k_3] = \nabla_\theta\mathrm{KL}(\pi_{\text{ref}}\,\|\,"
    r"\pi_\theta)$.",
    method="symbolic",
    scope="3 tokens, softmax logits, symbolic behaviour and reference; library check on 2 exact "
    "instances",
)
def importance_weighted_gradient() -> None:
    mu = sp.symbols(f"mu0:{K}", positive=True)
    w = [PI[a] / mu[a] for a in range(K)]
    d = [LOG_PI[a] - sp.log(r_free[a]) for a in range(K)]
    k3 = [sp.exp(-d[a]) + d[a] - 1 for a in range(K)]
    reverse = sp.Add(*(PI[a] * d[a] for a in range(K)))
    forward = sp.Add(*(r_free[a] * (sp.log(r_free[a]) - LOG_PI[a]) for a in range(K)))
    detached_k2 = _expected_grad(d, [mu[a] * w[a] for a in range(K)])
    detached_k3 = _expected_grad(
        [1 - sp.exp(-d[a]) for a in range(K)], [mu[a] * w[a] for a in range(K)]
    )
    for j in range(K):
        live_k3 = sp.Add(*(mu[a] * sp.diff(w[a] * k3[a], theta[j]) for a in range(K)))
        g_rev = sp.diff(reverse, theta[j])
        assert_zero(detached_k2[j] - g_rev, label=f"KL8 detached k2 {j}")
        assert_zero(live_k3 - g_rev, label=f"KL8 differentiable k3 {j}")
        g_fwd = sp.diff(forward, theta[j])
        assert_zero((detached_k3[j] - g_fwd).subs(R_SUM1), label=f"KL8 detached k3 {j}")
    for pi, ref, beh in INSTANCES:
        args = (_logs(pi), _logs(ref), _logs(beh))
        rev = _grad_reverse_kl(pi, ref)
        cases: list[tuple[str, Weighting, list[float]]] = [
            ("k2", "detached", rev),
            ("k3+", "detached", rev),
            ("k3+", "gradient_only", rev),
            ("k3", "differentiable", rev),
            ("k3", "detached", [float(a - b) for a, b in zip(pi, ref, strict=True)]),
        ]
        for est, mode, target in cases:
            terms = importance_weighted_kl(
                *args,
                estimator=est,
                weighting=mode,
                cotangent=_cot(beh),
            )
            _check_grads(_softmax_grad(terms.grad, pi), target, f"KL8 refimpl {est} {mode}")
