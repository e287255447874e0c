r"""# Length bias of first-$k$-of-$n$ dispatch

Launch $n$ rollouts at once and train on the first $k$ to finish. Lengths are i.i.d. with pmf $p$
(or density $f$), CDF $F$ and survival $S = 1 - F$.

**Continuous lengths.** A rollout of length $\ell$ is trained iff at most $k-1$ of the other $n-1$
are shorter; each is shorter independently with probability $F(\ell)$, so
$\pi(\ell) = P(\mathrm{Bin}(n-1, F(\ell)) \le k-1)$. Differentiating the binomial sum in $F$
telescopes to $-(n-1)\,b(k-1;\,n-2,\,F)$, which is the derivative of the regularized incomplete beta
$I_{1-F}(n-k, k)$; both are 1 at $F = 0$, so $\pi(\ell) = I_{1-F(\ell)}(n-k, k)$ ([LB1](#lb1)). The
worked check $n = 8$, $k = 4$, $F = 1/2$ gives $\pi = 1/2$ by the symmetry of $\mathrm{Bin}(7, 1/2)$
([LB0](#lb0)).

**Discrete lengths and ties.** With ties broken uniformly at random, the definition (conventions §first-k-of-n) is the
multinomial sum $\pi(\ell) = E[\operatorname{clip}((k - A)/(E + 1), 0, 1)]$ where $A$ and $E$ count the
other rollouts strictly shorter and equally long. A cheaper, equivalent description: draw each
rollout's length as $L = F^{-1}(U)$ with $U \sim U(0, 1)$ and rank rollouts by $U$. Ranking by $U$
ranks by length and breaks ties uniformly (the $U$ of tied rollouts are i.i.d. uniform on the same
interval). Given $L = \ell$, the rollout's own $U$ is uniform on the *tie interval*
$[F(\ell-1), F(\ell)]$, and it is trained iff at most $k-1$ others have a smaller $U$. Hence

$$\pi(\ell) = \frac{1}{p(\ell)} \int_{F(\ell-1)}^{F(\ell)} P(\mathrm{Bin}(n-1, u) \le k-1)\,du
            = \frac{G(F(\ell)) - G(F(\ell-1))}{p(\ell)}$$

with the antiderivative $G(u) = \int_0^u P(\mathrm{Bin}(n-1,t) \le k-1)\,dt$. Integrating each binomial
term with the beta integral gives $G(u) = \frac1n \sum_{j=1}^{k} P(\mathrm{Bin}(n, u) \ge j) =
E[\min(\mathrm{Bin}(n,u), k)]/n$, and splitting the minimum,

$$G(u) = u\,P(\mathrm{Bin}(n-1,u) \le k-1) + \tfrac{k}{n}\,P(\mathrm{Bin}(n,u) \ge k+1)
       = \tfrac{k}{n} I_u(k+1, n-k) + u\, I_{1-u}(n-k, k),$$

a sum of two non-negative terms: $O(1)$ special-function calls per support point instead of the
$O(n^2)$ multinomial sum ([LB2](#lb2)). `refimpl.inclusion_probability_pmf` evaluates exactly this
(with `Fraction`s in exact mode; in float64 it chooses between this forward difference, the
complementary difference $K(S(\ell-1)) - K(S(\ell))$ with $K(s) = \int_0^s I_\sigma(n-k,k)\,d\sigma$,
and a midpoint expansion, whichever does not cancel).

**The trained law sums to one.** $q(\ell) = \frac{n}{k} p(\ell)\pi(\ell)$ and
$\sum_\ell p(\ell)\pi(\ell) = \sum_\ell [G(F(\ell)) - G(F(\ell-1))] = G(1) - G(0) = k/n$ ([LB3](#lb3)).
Since $\pi(\ell)$ is the average of the decreasing function $u \mapsto P(\mathrm{Bin}(n-1,u)\le k-1)$
over consecutive intervals, $q/p = (n/k)\pi$ is non-increasing: $q$ is stochastically smaller than
$p$, and strictly so unless $k = n$ or the law is degenerate.

**Correction.** With $w = k/(n\pi)$, $E_q[w\,g] = \sum_\ell \frac nk p\pi \frac{k}{n\pi} g = E_p[g]$.
For the *batch* Horvitz–Thompson estimate $\frac1k\sum_{i \in \text{batch}} w(L_i) g(L_i)$, linearity
over the $n$ launched rollouts gives $\frac1k \sum_{i \le n} E[\pi(L_i) w(L_i) g(L_i)] = E_p[g]$; the
claim [LB4](#lb4) verifies this as an exact rational identity in symbolic probabilities and values.
"""

from __future__ import annotations

import itertools
import random
from fractions import Fraction

import numpy as np
import sympy as sp

import refimpl
from proofs._framework import assert_close, assert_zero, claim

u, a, h = sp.symbols("u a h", nonnegative=True)


def _binom_cdf(m: int, x: sp.Expr, j: int) -> sp.Expr:
    """P(Bin(m, x) <= j) as a polynomial in x."""
    return sum(
        (sp.binomial(m, i) * x**i * (1 - x) ** (m - i) for i in range(0, min(j, m) + 1)),
        sp.Integer(0),
    )


def tie_antiderivative(n: int, k: int, x: sp.Expr) -> sp.Expr:
    """G(x) = x P(Bin(n-1,x) <= k-1) + (k/n) P(Bin(n,x) >= k+1)."""
    return x * _binom_cdf(n - 1, x, k - 1) + sp.Rational(k, n) * (1 - _binom_cdf(n, x, k))


def multinomial_pi(n: int, k: int, below: sp.Expr, tie: sp.Expr, above: sp.Expr) -> sp.Expr:
    """The multinomial sum of conventions §first-k-of-n E[clip((k-A)/(E+1), 0, 1)] (times nothing: a polynomial)."""
    m = n - 1
    total = sp.Integer(0)
    for A in range(m + 1):
        for E in range(m + 1 - A):
            share = min(max(sp.Rational(k - A, E + 1), 0), 1)
            if share == 0:
                continue
            coef = sp.factorial(m) / (sp.factorial(A) * sp.factorial(E) * sp.factorial(m - A - E))
            total += coef * below**A * tie**E * above ** (m - A - E) * share
    return total


def _random_exact_pmf(rng: random.Random, size: int) -> list[Fraction]:
    weights = [rng.randint(0, 9) for _ in range(size)]
    weights[rng.randrange(size)] += 1
    total = sum(weights)
    return [Fraction(w, total) for w in weights]


@claim(
    "LB0",
    "Worked check: $n = 8$, $k = 4$, $F(\\ell) = 1/2$ gives $\\pi(\\ell) = 1/2$.",
    method="exact",
    scope="one worked instance: n = 8, k = 4, F = 1/2",
)
def worked_check() -> None:
    value = _binom_cdf(7, sp.Rational(1, 2), 3)
    assert_zero(value - sp.Rational(1, 2), label="P(Bin(7, 1/2) <= 3) - 1/2")
    assert_close(float(refimpl.inclusion_probability([0.5], n=8, k=4)[0]), 0.5, rel=1e-15)
    exact = refimpl.inclusion_probability_pmf([Fraction(1, 2), Fraction(1, 2)], n=8, k=4)
    # the tie interval of length 2 is [1/2, 1]: its average of the continuous pi
    avg = sp.integrate(_binom_cdf(7, u, 3), (u, sp.Rational(1, 2), 1)) * 2
    assert_zero(sp.Rational(exact[1].numerator, exact[1].denominator) - avg, label="pi(2)")


@claim(
    "LB1",
    "The binomial sum equals the regularized incomplete beta: "
    "$P(\\mathrm{Bin}(n-1, F) \\le k-1) = I_{1-F}(n-k, k)$ for $k < n$. Symbolically: each term's "
    "derivative is $(n-1)[b(j-1; n-2, F) - b(j; n-2, F)]$ (so the sum's derivative telescopes to "
    "$-(n-1) b(k-1; n-2, F)$) and $(n-1)\\binom{n-2}{k-1} = 1/B(n-k, k)$; exactly as polynomials "
    "for every $n \\le 10$; and against `refimpl.inclusion_probability`.",
    scope="the derivative identity symbolic in n and k; the polynomial identity for every 2 <= n <= 10",
)
def binomial_sum_is_incomplete_beta() -> None:
    n, k, j = sp.symbols("n k j", positive=True, integer=True)
    F, Q = sp.symbols("F Q", positive=True)  # Q stands for 1 - F: d/dF = ∂/∂F - ∂/∂Q

    def b(i: sp.Expr, m: sp.Expr) -> sp.Expr:
        return sp.binomial(m, i) * F**i * Q ** (m - i)

    term = b(j, n - 1)
    lhs = sp.diff(term, F) - sp.diff(term, Q)
    rhs = (n - 1) * (b(j - 1, n - 2) - b(j, n - 2))
    ratio = sp.expand(sp.gammasimp(sp.expand_func((lhs - rhs) / (F ** (j - 1) * Q ** (n - j - 2)))))
    assert_zero(
        sp.gammasimp(ratio), label="d/dF of one binomial term minus the telescoping difference"
    )
    coef = (n - 1) * sp.binomial(n - 2, k - 1) - 1 / sp.beta(n - k, k)
    assert_zero(sp.gammasimp(sp.expand_func(coef)), label="(n-1) C(n-2,k-1) - 1/B(n-k,k)")
    F = sp.symbols("F", positive=True)
    t = sp.symbols("t", positive=True)
    for nn in range(2, 11):
        for kk in range(1, nn):
            beta_inc = sp.integrate(t ** (nn - kk - 1) * (1 - t) ** (kk - 1), (t, 0, 1 - F))
            beta_inc /= sp.gamma(nn - kk) * sp.gamma(kk) / sp.gamma(nn)
            assert_zero(
                sp.expand(_binom_cdf(nn - 1, F, kk - 1) - beta_inc), label=f"n={nn}, k={kk}"
            )
    rng = np.random.default_rng(1)
    for nn, kk in [(2, 1), (10, 3), (50, 25), (200, 199)]:
        for f in rng.random(5):
            found = float(refimpl.inclusion_probability([f], n=nn, k=kk)[0])
            want = float(_binom_cdf(nn - 1, sp.Float(f, 40), kk - 1))
            assert_close(found, want, rel=1e-12, abs_=1e-300, label=f"pi n={nn} k={kk} F={f}")


@claim(
    "LB2",
    "The tie-interval closed form equals the multinomial sum: "
    "$p(\\ell)\\,E[\\operatorname{clip}((k-A)/(E+1), 0, 1)] = G(F(\\ell)) - G(F(\\ell-1))$ with "
    "$G(u) = u P(\\mathrm{Bin}(n-1,u) \\le k-1) + \\frac kn P(\\mathrm{Bin}(n,u) \\ge k+1) = "
    "E[\\min(\\mathrm{Bin}(n,u),k)]/n$ and $G' = P(\\mathrm{Bin}(n-1,u) \\le k-1)$: a polynomial "
    "identity in $(F(\\ell-1), p(\\ell))$ for every $n \\le 6$, $1 \\le k \\le n$; and "
    "`refimpl.inclusion_probability_pmf` (exact and float) against the multinomial sum.",
    scope="every n <= 6, 1 <= k <= n (polynomial identity)",
)
def tie_interval_closed_form() -> None:
    for n in range(1, 7):
        for k in range(1, n + 1):
            g = tie_antiderivative(n, k, u)
            assert_zero(sp.expand(sp.diff(g, u) - _binom_cdf(n - 1, u, k - 1)), label=f"G' n={n}")
            e_min = sum(
                (sp.binomial(n, i) * u**i * (1 - u) ** (n - i) * min(i, k) for i in range(n + 1)),
                sp.Integer(0),
            )
            assert_zero(sp.expand(g - e_min / n), label=f"G = E[min]/n, n={n}, k={k}")
            lhs = h * multinomial_pi(n, k, a, h, 1 - a - h)
            rhs = tie_antiderivative(n, k, a + h) - tie_antiderivative(n, k, a)
            assert_zero(sp.expand(lhs - rhs), label=f"tie interval n={n}, k={k}")
    rng = random.Random(2)
    for _ in range(20):
        pmf = _random_exact_pmf(rng, rng.randint(1, 6))
        n = rng.randint(1, 7)
        k = rng.randint(1, n)
        exact = refimpl.inclusion_probability_pmf(pmf, n=n, k=k)
        floats = refimpl.inclusion_probability_pmf(np.array([float(x) for x in pmf]), n=n, k=k)
        cdf = Fraction(0)
        for p_l, e_l, f_l in zip(pmf, exact, floats, strict=True):
            below, tie = (
                sp.Rational(cdf.numerator, cdf.denominator),
                sp.Rational(p_l.numerator, p_l.denominator),
            )
            want = multinomial_pi(n, k, below, tie, 1 - below - tie)
            assert_zero(sp.Rational(e_l.numerator, e_l.denominator) - want, label="exact mode")
            assert_close(float(f_l), float(want), rel=1e-12, abs_=1e-300, label="float mode")
            cdf += p_l


@claim(
    "LB3",
    "The trained law sums to one: $\\sum_\\ell p(\\ell)\\pi(\\ell) = G(1) - G(0) = k/n$. Exactly, "
    "with symbolic probabilities $p_1, p_2, p_3 = 1 - p_1 - p_2$ and the multinomial $\\pi$, for "
    "every $n \\le 5$; and `refimpl.selected_pmf` sums to exactly 1 on random exact pmfs.",
    method="exact",
    scope="three-point pmfs with symbolic probabilities, every n <= 5",
)
def trained_law_sums_to_one() -> None:
    p1, p2 = sp.symbols("p1 p2", positive=True)
    probs = [p1, p2, 1 - p1 - p2]
    for n in range(1, 6):
        for k in range(1, n + 1):
            total = sp.Integer(0)
            cdf = sp.Integer(0)
            for p in probs:
                total += p * multinomial_pi(n, k, cdf, p, 1 - cdf - p)
                cdf += p
            assert_zero(sp.expand(total - sp.Rational(k, n)), label=f"sum p pi, n={n}, k={k}")
            assert_zero(tie_antiderivative(n, k, sp.Integer(1)) - sp.Rational(k, n), label="G(1)")
            assert_zero(tie_antiderivative(n, k, sp.Integer(0)), label="G(0)")
    rng = random.Random(3)
    for _ in range(30):
        pmf = _random_exact_pmf(rng, rng.randint(1, 10))
        n = rng.randint(1, 20)
        k = rng.randint(1, n)
        assert sum(refimpl.selected_pmf(pmf, n=n, k=k), Fraction(0)) == 1


@claim(
    "LB4",
    "Exact unbiasedness after correction: for the batch (first $k$ of $n$, ties uniform), "
    "$E\\bigl[\\frac1k \\sum_{i \\in \\text{batch}} \\frac{k}{n\\pi(L_i)} g(L_i)\\bigr] = "
    "\\sum_\\ell p_\\ell g_\\ell$ as a rational identity in symbolic $p_1, p_2$ "
    "($p_3 = 1 - p_1 - p_2$) and $g_1, g_2, g_3$, by enumerating every $n$-tuple, for "
    "$(n, k) \\in \\{(2,1), (3,1), (3,2)\\}$; and `refimpl.ipw_estimator_moments` reports zero "
    "Horvitz–Thompson bias exactly on random exact pmfs.",
    method="exact",
    scope="three-point pmfs with symbolic probabilities, (n, k) in {(2, 1), (3, 1), (3, 2)}",
)
def horvitz_thompson_is_unbiased() -> None:
    p1, p2 = sp.symbols("p1 p2", positive=True)
    gs = sp.symbols("g1 g2 g3")
    probs = [p1, p2, 1 - p1 - p2]
    for n, k in [(2, 1), (3, 1), (3, 2)]:
        pis = []
        cdf = sp.Integer(0)
        for p in probs:
            pis.append(multinomial_pi(n, k, cdf, p, 1 - cdf - p))
            cdf += p
        expectation = sp.Integer(0)
        for tup in itertools.product(range(3), repeat=n):
            prob = sp.Mul(*[probs[i] for i in tup])
            batch = sorted(tup)[:k]
            est = sum((sp.Rational(k, n) / pis[i] * gs[i] for i in batch), sp.Integer(0)) / k
            expectation += prob * est
        target = sum((p * g for p, g in zip(probs, gs, strict=True)), sp.Integer(0))
        assert_zero(sp.cancel(sp.together(expectation - target)), label=f"E[HT] - E_p[g], n={n}")
    rng = random.Random(4)
    for _ in range(15):
        pmf = _random_exact_pmf(rng, rng.randint(1, 4))
        n = rng.randint(1, 5)
        k = rng.randint(1, n)
        g = [Fraction(rng.randint(-5, 5)) for _ in pmf]
        moments = refimpl.ipw_estimator_moments(pmf, g, n=n, k=k)
        assert moments.horvitz_thompson.bias == 0
